//! What every node refuses to write, whatever its host: paths the agent reserves, owners it
//! cannot resolve, SSH keys and password hashes that would corrupt their files, configs it would
//! have to fetch. The agent refuses these when it validates an update; the API server refuses
//! them at admission with the same messages, so a MachineConfig the API accepts is never one
//! every node of its pool goes Degraded on (they were stored, rendered, and then failed on each
//! node, retried forever).

use serde_json::{Map, Value};

/// The agent's own state, MCO's backup directories and the kernel's trees: a config may not
/// write there.
pub const RESERVED_PREFIXES: &[&str] = &[
    "/var/lib/aloft",
    "/etc/machine-config-daemon/orig",
    "/etc/machine-config-daemon/noorig",
    "/proc",
    "/sys",
    "/dev",
];

/// The suffix of the agent's temporary files, beside the file they replace.
pub const TEMP_SUFFIX: &str = ".aloft-tmp";

/// What the agent adds to a written file's name: MCO's backup suffix (`.mcdnoorig`, the longer
/// one) and its own temp name around that (`.NAME.aloft-tmp`). A name that fits Linux's 255
/// bytes but not with these would fail in the middle of an update (ENAMETOOLONG), after the
/// drain: refused up front instead.
pub const NAME_HEADROOM: usize = ".mcdnoorig".len() + 1 + TEMP_SUFFIX.len();

/// The longest file, unit or drop-in name a node writes.
pub const MAX_WRITTEN_NAME: usize = crate::ignition::MAX_PATH_COMPONENT - NAME_HEADROOM;

/// The longest path a node writes: its backup lives under MCO's noorig tree, with the headroom.
pub const MAX_WRITTEN_PATH: usize =
    crate::ignition::MAX_PATH - "/etc/machine-config-daemon/noorig".len() - NAME_HEADROOM;

/// Why a node cannot write a file named `name` (one path component), or `None`.
pub fn name_length_error(name: &str) -> Option<String> {
    (name.len() > MAX_WRITTEN_NAME).then(|| {
        format!(
            "name {:?}... is {} bytes long, over the {MAX_WRITTEN_NAME} bytes a node can write (Linux allows 255, and \
             the backup and temporary names beside it add {NAME_HEADROOM})",
            name.chars().take(16).collect::<String>(),
            name.len()
        )
    })
}

/// Why a node would not write `path`, or `None`: absolute, clean (Ignition refuses "dirty"
/// paths: no `.`, `..`, `//`, trailing `/`), a file name (not `/` itself), lengths Linux takes,
/// not a temporary file's name and not in a reserved tree.
pub fn path_error(path: &str) -> Option<String> {
    if !path.starts_with('/') {
        return Some(format!("path {path:?} is not absolute"));
    }
    if path.contains('\0') {
        return Some("path contains a NUL byte".into());
    }
    if let Err(m) = crate::ignition::check_path_lengths(path) {
        return Some(m);
    }
    if path.len() > MAX_WRITTEN_PATH {
        return Some(format!(
            "path is {} bytes long, over the {MAX_WRITTEN_PATH} bytes a node can write (its backup under \
             /etc/machine-config-daemon/noorig must fit Linux's 4095)",
            path.len()
        ));
    }
    let parts: Vec<&str> = path[1..].split('/').collect();
    if path == "/" || parts.iter().any(|p| p.is_empty() || *p == "." || *p == "..") {
        return Some(format!("path {path:?} is not clean (no '.', '..', '//' or trailing '/')"));
    }
    if let Some(m) = parts.last().and_then(|n| name_length_error(n)) {
        return Some(m);
    }
    if parts.last().is_some_and(|n| n.ends_with(TEMP_SUFFIX)) {
        return Some(format!("path {path:?} ends in {TEMP_SUFFIX}, the agent's temp file suffix"));
    }
    if let Some(r) = RESERVED_PREFIXES.iter().find(|r| path == **r || path.starts_with(&format!("{r}/"))) {
        return Some(format!("path {path:?} is in {r}, which the agent reserves"));
    }
    None
}

/// Why a file's `user` or `group` (`{id, name}`) cannot be resolved, with the field under it it
/// is about (`""`: the owner itself), or `None`.
pub fn owner_error(owner: &Map<String, Value>) -> Option<(&'static str, String)> {
    let id = owner.get("id").filter(|v| !v.is_null());
    if id.is_some_and(|v| v.as_u64().and_then(|n| u32::try_from(n).ok()).is_none()) {
        return Some(("id", "must be an integer from 0 to 4294967295".into()));
    }
    let named = owner.get("name").and_then(Value::as_str).is_some_and(|n| !n.is_empty());
    if id.is_some() && named {
        return Some(("", "set either id or name, not both".into()));
    }
    None
}

/// Why an SSH key cannot go into `authorized_keys` (one key a line), or `None`.
pub fn ssh_key_error(key: &str) -> Option<&'static str> {
    key.chars().any(char::is_control).then_some("an SSH key must be one line without control characters")
}

/// Why a password hash cannot go into `/etc/shadow` (`:` separates its fields), or `None`.
pub fn password_hash_error(hash: &str) -> Option<&'static str> {
    (hash.contains(':') || hash.chars().any(char::is_control))
        .then_some("a password hash may not contain ':' or control characters")
}

/// The message for `ignition.config.merge` (2.x: `append`) or `replace` naming configs.
pub const FETCH_REFUSED: &str =
    "configs referenced for merge/replace would have to be fetched; a running node never fetches";

/// Which of `ignition.config.merge` (`append` in Ignition 2.x, checked on the config as its
/// author wrote it) and `replace` a config uses, in that order: `merge`/`append` when it lists
/// any config, `replace` when it has a source. A `replace` without one is what Go's
/// `json.Marshal` writes for an unset struct (`"replace": {"verification": {}}`), as in every
/// MachineConfig MCO's controllers and the installer make: it fetches nothing.
pub fn fetched_configs(config: &Value) -> Vec<&'static str> {
    let Some(c) = config.pointer("/ignition/config") else { return Vec::new() };
    let lists = |key: &str| {
        c.get(key).and_then(Value::as_array).is_some_and(|m| !m.is_empty())
            || c.get(key).is_some_and(|m| !m.is_null() && !m.is_array())
    };
    let replace = c.get("replace").is_some_and(|r| match r.get("source") {
        Some(Value::String(s)) => !s.is_empty(),
        Some(Value::Null) | None => !r.is_null() && !r.is_object(),
        Some(_) => true,
    });
    [("merge", lists("merge")), ("append", lists("append")), ("replace", replace)]
        .into_iter()
        .filter(|(_, on)| *on)
        .map(|(k, _)| k)
        .collect()
}

/// The message for contents that name a compression and no source.
pub const COMPRESSION_WITHOUT_SOURCE: &str = "compression without a source";

/// Where unit files and drop-ins go.
pub const UNIT_DIR: &str = "/etc/systemd/system";
/// Where core's SSH keys go (MCO writes this file; sshd reads authorized_keys.d via a drop-in).
pub const CORE_KEYS_FILE: &str = "/home/core/.ssh/authorized_keys.d/ignition";
/// Where core's password hash goes.
pub const SHADOW: &str = "/etc/shadow";

/// The paths a config (read as 3.5) writes besides `storage`: unit files (with contents or a
/// mask), drop-ins, core's keys file and `/etc/shadow`, each with the field that asks for it.
pub fn other_written_paths(config: &Value) -> Vec<(String, String)> {
    let list = |v: &Value, p: &str| v.pointer(p).and_then(Value::as_array).cloned().unwrap_or_default();
    let mut out = Vec::new();
    for (i, u) in list(config, "/systemd/units").iter().enumerate() {
        let Some(name) = u.get("name").and_then(Value::as_str) else { continue };
        let field = format!("spec.config.systemd.units[{i}]");
        let masked = u.get("mask").and_then(Value::as_bool) == Some(true);
        if masked || u.get("contents").is_some_and(|c| !c.is_null()) {
            out.push((format!("{UNIT_DIR}/{name}"), format!("{field}.name")));
        }
        for (k, d) in list(u, "/dropins").iter().enumerate() {
            if let Some(dname) = d.get("name").and_then(Value::as_str) {
                out.push((format!("{UNIT_DIR}/{name}.d/{dname}"), format!("{field}.dropins[{k}].name")));
            }
        }
    }
    for (i, u) in list(config, "/passwd/users").iter().enumerate() {
        if u.get("name").and_then(Value::as_str) != Some("core") {
            continue;
        }
        let field = format!("spec.config.passwd.users[{i}]");
        if u.get("sshAuthorizedKeys").and_then(Value::as_array).is_some_and(|k| !k.is_empty()) {
            out.push((CORE_KEYS_FILE.to_string(), format!("{field}.sshAuthorizedKeys")));
        }
        if u.get("passwordHash").and_then(Value::as_str).is_some_and(|h| !h.is_empty()) {
            out.push((SHADOW.to_string(), format!("{field}.passwordHash")));
        }
    }
    out
}

/// A `storage` entry (file, directory or link) that collides with a path another part of the
/// config writes (a unit file, a drop-in, core's keys file, `/etc/shadow`): at the same path, a
/// storage file above it (the other cannot be created under a file), or the other a file above
/// the entry. The storage path, the storage entry's field and the message. A node refuses such
/// a config.
pub fn storage_collision(config: &Value) -> Option<(String, String, String)> {
    let others = other_written_paths(config);
    let under =
        |path: &str, dir: &str| path.len() > dir.len() && path.starts_with(dir) && path.as_bytes()[dir.len()] == b'/';
    for list in ["files", "directories", "links"] {
        let entries = config.pointer(&format!("/storage/{list}")).and_then(Value::as_array);
        for (i, e) in entries.into_iter().flatten().enumerate() {
            let Some(path) = e.get("path").and_then(Value::as_str) else { continue };
            let field = format!("spec.config.storage.{list}[{i}].path");
            for (other_path, other) in &others {
                let message = if other_path == path {
                    format!("duplicate path {path:?}: {other} writes it too")
                } else if list == "files" && under(other_path, path) {
                    format!("{other} writes {other_path:?}, inside {path:?}, which is written as a file")
                } else if under(path, other_path) {
                    format!("path {path:?} is inside {other_path:?}, which {other} writes as a file")
                } else {
                    continue;
                };
                return Some((path.to_string(), field, message));
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn paths_a_node_will_not_write() {
        for (path, says) in [
            ("/", "not clean"),
            ("etc/x", "not absolute"),
            ("/etc//x", "not clean"),
            ("/proc/sys/kernel/hostname", "in /proc"),
            ("/sys/x", "in /sys"),
            ("/dev/sda", "in /dev"),
            ("/var/lib/aloft/credential.json", "in /var/lib/aloft"),
            ("/etc/machine-config-daemon/orig/etc/x.mcdorig", "reserves"),
            ("/etc/x.aloft-tmp", "temp file suffix"),
        ] {
            assert!(path_error(path).is_some_and(|m| m.contains(says)), "{path}: {:?}", path_error(path));
        }
        for ok in ["/etc/x", "/var/lib/aloftx", "/devices", "/etc/proc"] {
            assert_eq!(path_error(ok), None, "{ok}");
        }
    }

    #[test]
    fn owners_keys_hashes_and_fetched_configs() {
        let o = |v: Value| v.as_object().unwrap().clone();
        assert_eq!(owner_error(&o(json!({"id": 0, "name": "root"}))).map(|e| e.0), Some(""));
        assert_eq!(owner_error(&o(json!({"id": 99999999999u64}))).map(|e| e.0), Some("id"));
        assert_eq!(owner_error(&o(json!({"id": -1}))).map(|e| e.0), Some("id"));
        assert_eq!(owner_error(&o(json!({"id": 1000, "name": ""}))), None);
        assert_eq!(owner_error(&o(json!({"name": "core"}))), None);
        assert!(ssh_key_error("ssh-rsa AAA x\nssh-rsa BBB y").is_some());
        assert!(ssh_key_error("ssh-ed25519 AAAA user@host").is_none());
        assert!(password_hash_error("$6$a:b").is_some() && password_hash_error("$6$ab").is_none());
        let clash = json!({"storage": {"files": [{"path": "/etc/systemd/system/a.service"}]},
            "systemd": {"units": [{"name": "a.service", "contents": "[Unit]"}]}});
        let (path, storage, message) = storage_collision(&clash).unwrap();
        assert_eq!(
            (path.as_str(), storage.as_str()),
            ("/etc/systemd/system/a.service", "spec.config.storage.files[0].path")
        );
        assert!(message.contains("spec.config.systemd.units[0].name writes it too"), "{message}");
        // A file where a drop-in's directory, or core's keys directory, has to be.
        let dropin_dir = json!({"storage": {"files": [{"path": "/etc/systemd/system/a.service.d"}]},
            "systemd": {"units": [{"name": "a.service", "dropins": [{"name": "x.conf", "contents": "[Unit]"}]}]}});
        assert!(storage_collision(&dropin_dir).is_some_and(|c| c.2.contains("which is written as a file")));
        let keys_dir = json!({"storage": {"files": [{"path": "/home/core/.ssh/authorized_keys.d"}]},
            "passwd": {"users": [{"name": "core", "sshAuthorizedKeys": ["k"]}]}});
        assert!(storage_collision(&keys_dir).is_some());
        // A directory there is fine; a file under /etc/shadow is not.
        let dir = json!({"storage": {"directories": [{"path": "/etc/systemd/system/a.service.d"}]},
            "systemd": {"units": [{"name": "a.service", "dropins": [{"name": "x.conf", "contents": "[Unit]"}]}]}});
        assert!(storage_collision(&dir).is_none());
        let shadow = json!({"storage": {"files": [{"path": "/etc/shadow/x"}]},
            "passwd": {"users": [{"name": "core", "passwordHash": "$6$x"}]}});
        assert!(storage_collision(&shadow).is_some_and(|c| c.2.contains("is inside \"/etc/shadow\"")));
        let keys = json!({"storage": {"files": [{"path": CORE_KEYS_FILE}]},
            "passwd": {"users": [{"name": "core", "sshAuthorizedKeys": ["k"]}]}});
        assert!(storage_collision(&keys).is_some());
        let enabled_only = json!({"storage": {"files": [{"path": "/etc/systemd/system/a.service"}]},
            "systemd": {"units": [{"name": "a.service", "enabled": true}]}});
        assert!(storage_collision(&enabled_only).is_none(), "a unit without contents writes no file");
        let merge = json!({"ignition": {"config": {"merge": [{"source": "https://x/y.ign"}], "replace": {}}}});
        assert_eq!(fetched_configs(&merge), ["merge"]);
        // Ignition 2.x's name for it, as the config's author wrote it.
        let append = json!({"ignition": {"version": "2.2.0", "config": {"append": [{"source": "https://x/y.ign"}]}}});
        assert_eq!(fetched_configs(&append), ["append"]);
        assert!(fetched_configs(&json!({"ignition": {"config": {"append": []}}})).is_empty());
        assert!(fetched_configs(&json!({"ignition": {"config": {"merge": []}}})).is_empty());
        // What Go's json.Marshal writes for configs MCO and the installer make.
        let go = json!({"ignition": {"config": {"replace": {"verification": {}}}, "version": "3.2.0"}});
        assert!(fetched_configs(&go).is_empty());
        let go_null = json!({"ignition": {"config": {"merge": null, "replace": {"source": null, "verification": {}}}}});
        assert!(fetched_configs(&go_null).is_empty());
        let replace = json!({"ignition": {"config": {"replace": {"source": "https://x/y.ign", "verification": {}}}}});
        assert_eq!(fetched_configs(&replace), ["replace"]);
    }
}
