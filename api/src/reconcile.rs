//! Which changes a running node can take (MCO's reconcilable rules, pkg/controller/common/reconcile
//! and the daemon's update), and the day-2 checks every MachineConfig must pass.
//!
//! Used by the render controller (a pool refuses to render an unreconcilable change, naming the
//! MachineConfig) and by the agent (a node refuses to apply one and goes Unreconcilable without
//! touching anything), so both refuse exactly the same changes.

use crate::ignition;
use crate::machineconfig::MachineConfigSpec;
use serde_json::Value;

/// MCO's escape-hatch file (it makes the daemon skip validation); no config may write it.
pub const FORCE_FILE: &str = "/run/machine-config-daemon-force";

/// Kernel types a config may ask for; empty means default.
pub const KERNEL_TYPES: &[&str] = &["", "default", "realtime", "64k-pages"];

/// A change a running node cannot take, with the field that carries it. The field indexes the
/// config that was checked (for a render: the merged config).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct Unreconcilable {
    pub field: String,
    pub message: String,
}

fn unrec(field: impl Into<String>, message: impl Into<String>) -> Unreconcilable {
    Unreconcilable { field: field.into(), message: message.into() }
}

/// What kinds of change a reconcilable update carries, as MCO's daemon computes them before an
/// update: the agent's choice of actions (reboot or not, drain or not) starts here.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConfigDiff {
    pub os_update: bool,
    pub kargs: bool,
    pub fips: bool,
    pub passwd: bool,
    pub files: bool,
    pub units: bool,
    pub kernel_type: bool,
    pub extensions: bool,
}

impl ConfigDiff {
    /// Nothing changes: the node only needs to record the new config name.
    pub fn is_empty(&self) -> bool {
        *self == ConfigDiff::default()
    }
}

/// The config as 3.5 JSON when it parses (so 2.2 and 3.x spellings of one config compare equal),
/// else as written: a config that does not parse is reported by validation, not here.
fn normalised(v: &Value) -> Value {
    ignition::parse_config(v).unwrap_or_else(|_| v.clone())
}

fn at<'a>(v: &'a Value, p: &str) -> Option<&'a Value> {
    v.pointer(p).filter(|x| !x.is_null())
}

fn list<'a>(v: &'a Value, p: &str) -> Vec<&'a Value> {
    at(v, p).and_then(Value::as_array).map(|a| a.iter().collect()).unwrap_or_default()
}

fn is_empty(v: Option<&Value>) -> bool {
    match v {
        None => true,
        Some(Value::Array(a)) => a.is_empty(),
        Some(Value::Object(o)) => o.is_empty(),
        _ => false,
    }
}

/// Equal, counting absent, null, `[]` and `{}` as the same, and lists as sets of entries (the order
/// of files or units in a config means nothing on disk).
fn same(a: Option<&Value>, b: Option<&Value>) -> bool {
    if is_empty(a) && is_empty(b) {
        return true;
    }
    match (a, b) {
        (Some(Value::Array(x)), Some(Value::Array(y))) => {
            let key = |v: &Vec<Value>| {
                let mut k: Vec<String> = v.iter().map(crate::render::canonical_json).collect();
                k.sort();
                k
            };
            key(x) == key(y)
        }
        _ => a == b,
    }
}

fn name_of(v: &Value) -> &str {
    v.get("name").and_then(Value::as_str).unwrap_or("")
}

/// A user entry without the fields a running node can change, for comparing the rest.
fn fixed_fields(user: Option<&Value>) -> serde_json::Map<String, Value> {
    let mut m = user.and_then(Value::as_object).cloned().unwrap_or_default();
    m.retain(|k, v| k != "sshAuthorizedKeys" && k != "passwordHash" && !v.is_null());
    m.insert("name".into(), "core".into());
    m
}

fn check_passwd(o: &Value, n: &Value) -> Result<(), Unreconcilable> {
    if !same(at(o, "/passwd/groups"), at(n, "/passwd/groups")) {
        return Err(unrec(
            "spec.config.passwd.groups",
            "ignition passwd groups section contains changes: groups cannot be changed on a running node",
        ));
    }
    if same(at(o, "/passwd/users"), at(n, "/passwd/users")) {
        return Ok(());
    }
    let old_core = list(o, "/passwd/users").into_iter().find(|u| name_of(u) == "core");
    for (i, u) in list(n, "/passwd/users").into_iter().enumerate() {
        let name = name_of(u);
        if name != "core" {
            return Err(unrec(
                format!("spec.config.passwd.users[{i}].name"),
                format!(
                    "ignition passwd user section contains unsupported changes: non-core user {name:?}; only user core's sshAuthorizedKeys and passwordHash can change on a running node"
                ),
            ));
        }
        let (before, after) = (fixed_fields(old_core), fixed_fields(Some(u)));
        if before != after {
            let mut changed: Vec<&str> = before
                .keys()
                .chain(after.keys())
                .filter(|k| before.get(*k) != after.get(*k))
                .map(String::as_str)
                .collect();
            changed.sort_unstable();
            changed.dedup();
            return Err(unrec(
                format!("spec.config.passwd.users[{i}]"),
                format!(
                    "ignition passwd user section contains unsupported changes: user core's {} changed; only sshAuthorizedKeys and passwordHash can change on a running node",
                    changed.join(", ")
                ),
            ));
        }
    }
    Ok(())
}

fn check_storage(o: &Value, n: &Value) -> Result<(), Unreconcilable> {
    for (key, what) in [
        ("disks", "disks"),
        ("filesystems", "filesystems"),
        ("raid", "raid arrays"),
        ("luks", "LUKS devices"),
        ("directories", "directories"),
    ] {
        let p = format!("/storage/{key}");
        if !same(at(o, &p), at(n, &p)) {
            return Err(unrec(
                format!("spec.config.storage.{key}"),
                format!("ignition {key} section contains changes: {what} cannot be changed on a running node"),
            ));
        }
    }
    let old_links: Vec<String> = list(o, "/storage/links").into_iter().map(crate::render::canonical_json).collect();
    for (i, l) in list(n, "/storage/links").into_iter().enumerate() {
        if !old_links.contains(&crate::render::canonical_json(l)) {
            let path = l.get("path").and_then(Value::as_str).unwrap_or("");
            return Err(unrec(
                format!("spec.config.storage.links[{i}]"),
                format!("ignition links section contains changes: adding or changing link {path:?} is not supported on a running node (removing links is)"),
            ));
        }
    }
    for (i, f) in list(n, "/storage/files").into_iter().enumerate() {
        let path = f.get("path").and_then(Value::as_str).unwrap_or("");
        if path == FORCE_FILE {
            return Err(unrec(
                format!("spec.config.storage.files[{i}].path"),
                format!("ignition file {FORCE_FILE} is MCO's force file: a config cannot write it"),
            ));
        }
        if !is_empty(at(f, "/append")) {
            return Err(unrec(
                format!("spec.config.storage.files[{i}].append"),
                format!(
                    "ignition file {path:?} includes append: appending to files is not supported on a running node"
                ),
            ));
        }
    }
    Ok(())
}

fn kernel_type(t: &str) -> &str {
    if t.is_empty() {
        "default"
    } else {
        t
    }
}

fn unknown_kernel_type(t: &str) -> String {
    format!("unknown kernelType {t:?}: use default, realtime or 64k-pages")
}

/// Can a node on `old` move to `new` in place? Refused, as MCO refuses: any change to
/// passwd.groups; users other than `core`; fields of `core` other than sshAuthorizedKeys and
/// passwordHash; Ignition-level kernelArguments; storage disks, filesystems, raid, luks and
/// directories; added (or changed) links; files with `append`; the force file; the `fips` flag;
/// an unknown kernelType. Those need a reprovisioned node; everything else is applied in place,
/// and the returned diff says what kind of change it is.
pub fn reconcilable(old: &MachineConfigSpec, new: &MachineConfigSpec) -> Result<ConfigDiff, Unreconcilable> {
    let (o, n) = (normalised(&old.config), normalised(&new.config));
    check_passwd(&o, &n)?;
    if !same(at(&o, "/kernelArguments"), at(&n, "/kernelArguments")) {
        return Err(unrec(
            "spec.config.kernelArguments",
            "ignition kernelArguments section contains changes: set kernel arguments with spec.kernelArguments instead",
        ));
    }
    check_storage(&o, &n)?;
    if old.fips.unwrap_or(false) != new.fips.unwrap_or(false) {
        return Err(unrec(
            "spec.fips",
            "detected change to FIPS flag: refusing to modify FIPS on a running node (FIPS is set at install time)",
        ));
    }
    if !KERNEL_TYPES.contains(&new.kernel_type.as_str()) {
        return Err(unrec("spec.kernelType", unknown_kernel_type(&new.kernel_type)));
    }
    Ok(ConfigDiff {
        os_update: old.os_image_url != new.os_image_url,
        kargs: old.kernel_arguments != new.kernel_arguments,
        fips: false,
        passwd: !same(at(&o, "/passwd/users"), at(&n, "/passwd/users")),
        files: !same(at(&o, "/storage/files"), at(&n, "/storage/files"))
            || !same(at(&o, "/storage/links"), at(&n, "/storage/links")),
        units: !same(at(&o, "/systemd/units"), at(&n, "/systemd/units")),
        kernel_type: kernel_type(&old.kernel_type) != kernel_type(&new.kernel_type),
        extensions: old.extensions != new.extensions,
    })
}

/// What aloft never applies, on any node: `spec.extensions` (MCO installs them with rpm-ostree
/// from the OS image's extension repository; aloft deploys the OS image as one ostree commit and
/// has no package layer) and a `spec.kernelType` other than the default (MCO swaps in the
/// kernel-rt or kernel-64k packages; aloft boots the OS image's kernel). A node would otherwise
/// drain and reboot for them and report the config as applied with none of it in effect.
/// Empty lists and `""`/`"default"` (which MCO's own configs carry) are fine.
pub fn unsupported_fields(spec: &MachineConfigSpec) -> Vec<FieldError> {
    let mut out = Vec::new();
    if !spec.extensions.is_empty() {
        out.push(FieldError {
            field: "spec.extensions".into(),
            message: format!(
                "extensions ({}) cannot be installed: aloft deploys the OS image as one ostree commit and has no \
                 rpm-ostree package layer; build them into the OS image (osImageURL) and leave extensions empty",
                spec.extensions.join(", ")
            ),
        });
    }
    let t = kernel_type(&spec.kernel_type);
    if t != "default" && KERNEL_TYPES.contains(&t) {
        out.push(FieldError {
            field: "spec.kernelType".into(),
            message: format!(
                "kernelType {t:?} is not supported: aloft boots the OS image's own kernel and cannot switch to another \
                 one; use an OS image (osImageURL) with that kernel and leave kernelType empty or \"default\""
            ),
        });
    }
    out
}

/// A field error of [`validate_for_day2`], in the API server's cause shape.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct FieldError {
    pub field: String,
    pub message: String,
}

/// Checks every MachineConfig must pass before it is stored, beyond being valid Ignition: file
/// modes a node refuses (setuid, setgid and sticky bits, 0o1000 to 0o7777; anything else is not a
/// file mode, which the Ignition check refuses) and an unknown
/// kernelType. All errors are returned, so a user fixes them in one round. `spec.config` may be
/// any accepted Ignition version.
pub fn validate_for_day2(spec: &MachineConfigSpec) -> Result<(), Vec<FieldError>> {
    let mut errs = Vec::new();
    let cfg = normalised(&spec.config);
    for (i, f) in list(&cfg, "/storage/files").into_iter().enumerate() {
        // Ignition's rules on a file without a source (and so MCO's, whose parse refuses them):
        // nothing to write cannot replace what is there (aloft wrote an empty file over the
        // host's), and a hash needs something to check (it was dropped). Here, not in the
        // parse: a stored config or a node's current one that predates them still reads.
        let source = f.pointer("/contents/source").is_some_and(|v| !v.is_null());
        if !source && f.get("overwrite") == Some(&Value::Bool(true)) {
            errs.push(FieldError {
                field: format!("spec.config.storage.files[{i}].overwrite"),
                message: "overwrite must be false if source is unspecified".into(),
            });
        }
        if !source && f.pointer("/contents/verification/hash").is_some_and(|v| !v.is_null()) {
            errs.push(FieldError {
                field: format!("spec.config.storage.files[{i}].contents.verification.hash"),
                message: "source must be specified if verification is specified".into(),
            });
        }
        let Some(mode) = f.get("mode").and_then(Value::as_i64) else { continue };
        // Outside 0..=0o7777 is not a file mode at all (type bits copied from `stat`, negative):
        // the Ignition check says so, and this one would add a wrong second cause.
        if (0o1000..=0o7777).contains(&mode) {
            let path = f.get("path").and_then(Value::as_str).unwrap_or("");
            errs.push(FieldError {
                field: format!("spec.config.storage.files[{i}].mode"),
                message: format!(
                    "{mode} (0{mode:o} octal) of {path:?} is not allowed: setuid, setgid and sticky bits (modes above 0777) are refused"
                ),
            });
        }
    }
    if !KERNEL_TYPES.contains(&spec.kernel_type.as_str()) {
        errs.push(FieldError { field: "spec.kernelType".into(), message: unknown_kernel_type(&spec.kernel_type) });
    }
    if errs.is_empty() {
        Ok(())
    } else {
        Err(errs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn spec(config: Value) -> MachineConfigSpec {
        MachineConfigSpec { config, ..Default::default() }
    }
    fn base() -> Value {
        json!({"ignition": {"version": "3.5.0"},
            "passwd": {"users": [{"name": "core", "sshAuthorizedKeys": ["k1"], "shell": "/bin/bash"}]},
            "storage": {"files": [{"path": "/etc/a", "contents": {"source": "data:,a"}}, {"path": "/etc/b", "mode": 420}],
                        "links": [{"path": "/etc/l", "target": "/etc/a"}]},
            "systemd": {"units": [{"name": "x.service", "enabled": true}]}})
    }
    fn changed(f: impl Fn(&mut Value)) -> MachineConfigSpec {
        let mut v = base();
        f(&mut v);
        spec(v)
    }
    fn refused(f: impl Fn(&mut Value)) -> Unreconcilable {
        reconcilable(&spec(base()), &changed(f)).unwrap_err()
    }

    #[test]
    fn no_change_is_an_empty_diff() {
        let d = reconcilable(&spec(base()), &spec(base())).unwrap();
        assert!(d.is_empty(), "{d:?}");
        // Order of entries and empty-vs-absent sections are not changes.
        let reordered = changed(|v| {
            v["storage"]["files"] =
                json!([{"path": "/etc/b", "mode": 420}, {"path": "/etc/a", "contents": {"source": "data:,a"}}]);
            v["storage"]["directories"] = json!([]);
            v["passwd"]["groups"] = json!([]);
        });
        assert_eq!(reconcilable(&spec(base()), &reordered).unwrap(), ConfigDiff::default());
    }

    #[test]
    fn each_kind_of_change_sets_its_flag() {
        let old = spec(base());
        let only = |d: ConfigDiff| {
            let mut flags = vec![];
            for (name, on) in [
                ("os_update", d.os_update),
                ("kargs", d.kargs),
                ("fips", d.fips),
                ("passwd", d.passwd),
                ("files", d.files),
                ("units", d.units),
                ("kernel_type", d.kernel_type),
                ("extensions", d.extensions),
            ] {
                if on {
                    flags.push(name);
                }
            }
            flags
        };
        let mut s = old.clone();
        s.os_image_url = "quay.io/os@sha256:1".into();
        assert_eq!(only(reconcilable(&old, &s).unwrap()), ["os_update"]);
        let mut s = old.clone();
        s.kernel_arguments = vec!["nosmt".into()];
        assert_eq!(only(reconcilable(&old, &s).unwrap()), ["kargs"]);
        let mut s = old.clone();
        s.kernel_type = "realtime".into();
        assert_eq!(only(reconcilable(&old, &s).unwrap()), ["kernel_type"]);
        let mut s = old.clone();
        s.kernel_type = "default".into();
        assert_eq!(only(reconcilable(&old, &s).unwrap()), Vec::<&str>::new(), "empty and default are one kernel");
        let mut s = old.clone();
        s.extensions = vec!["usbguard".into()];
        assert_eq!(only(reconcilable(&old, &s).unwrap()), ["extensions"]);
        let d = reconcilable(&old, &changed(|v| v["passwd"]["users"][0]["sshAuthorizedKeys"] = json!(["k1", "k2"])))
            .unwrap();
        assert_eq!(only(d), ["passwd"]);
        let d = reconcilable(&old, &changed(|v| v["passwd"]["users"][0]["passwordHash"] = "$6$x".into())).unwrap();
        assert_eq!(only(d), ["passwd"]);
        let d = reconcilable(&old, &changed(|v| v["storage"]["files"][0]["contents"]["source"] = "data:,b".into()))
            .unwrap();
        assert_eq!(only(d), ["files"]);
        let d = reconcilable(&old, &changed(|v| v["storage"]["files"].as_array_mut().unwrap().truncate(1))).unwrap();
        assert_eq!(only(d), ["files"], "removing a file");
        let d = reconcilable(&old, &changed(|v| v["storage"]["links"] = json!([]))).unwrap();
        assert_eq!(only(d), ["files"], "removing a link is a file change, and allowed");
        let d = reconcilable(&old, &changed(|v| v["systemd"]["units"][0]["enabled"] = false.into())).unwrap();
        assert_eq!(only(d), ["units"]);
    }

    #[test]
    fn core_may_gain_keys_or_be_added_with_only_keys() {
        let mut no_users = base();
        no_users["passwd"] = json!({});
        let with_core = changed(|v| v["passwd"]["users"] = json!([{"name": "core", "sshAuthorizedKeys": ["k9"]}]));
        assert!(reconcilable(&spec(no_users.clone()), &with_core).unwrap().passwd);
        assert!(reconcilable(&with_core, &spec(no_users)).unwrap().passwd, "removing core's entry is fine");
    }

    #[test]
    fn passwd_refusals() {
        let e = refused(|v| v["passwd"]["groups"] = json!([{"name": "wheel2"}]));
        assert_eq!(e.field, "spec.config.passwd.groups");
        assert!(e.message.contains("groups"), "{e}");
        let e = refused(|v| v["passwd"]["users"].as_array_mut().unwrap().push(json!({"name": "alice"})));
        assert_eq!(e.field, "spec.config.passwd.users[1].name");
        assert!(e.message.contains("non-core user \"alice\""), "{e}");
        let e = refused(|v| v["passwd"]["users"][0]["shell"] = "/bin/zsh".into());
        assert_eq!(e.field, "spec.config.passwd.users[0]");
        assert!(e.message.contains("user core's shell changed"), "{e}");
        let e = refused(|v| {
            v["passwd"]["users"][0]["uid"] = 1001.into();
            v["passwd"]["users"][0]["groups"] = json!(["wheel"]);
        });
        assert!(e.message.contains("groups, uid changed"), "{e}");
    }

    #[test]
    fn an_unchanged_non_core_user_is_not_a_change() {
        let with_alice = |v: &mut Value| v["passwd"]["users"].as_array_mut().unwrap().push(json!({"name": "alice"}));
        let old = changed(with_alice);
        let new = changed(|v| {
            with_alice(v);
            v["storage"]["files"][0]["contents"]["source"] = "data:,new".into();
        });
        let d = reconcilable(&old, &new).unwrap();
        assert!(d.files && !d.passwd);
        // ...but once passwd changes, every user must be core, as in MCO.
        let keys = changed(|v| {
            with_alice(v);
            v["passwd"]["users"][0]["sshAuthorizedKeys"] = json!(["k2"]);
        });
        assert_eq!(reconcilable(&old, &keys).unwrap_err().field, "spec.config.passwd.users[1].name");
    }

    #[test]
    fn storage_refusals() {
        for (key, value) in [
            ("disks", json!([{"device": "/dev/vdb", "wipeTable": true}])),
            ("filesystems", json!([{"device": "/dev/vdb1", "path": "/var/lib/data", "format": "xfs"}])),
            ("raid", json!([{"name": "md0", "level": "raid1", "devices": ["/dev/vdb", "/dev/vdc"]}])),
            ("luks", json!([{"name": "data", "device": "/dev/vdb"}])),
            ("directories", json!([{"path": "/var/d", "mode": 493}])),
        ] {
            let e = refused(|v| v["storage"][key] = value.clone());
            assert_eq!(e.field, format!("spec.config.storage.{key}"));
            assert!(e.message.starts_with(&format!("ignition {key} section contains changes")), "{e}");
            assert!(e.message.contains("cannot be changed on a running node"), "{e}");
            // Removing one is refused the same way.
            let with: MachineConfigSpec = changed(|v| v["storage"][key] = value.clone());
            assert_eq!(reconcilable(&with, &spec(base())).unwrap_err().field, format!("spec.config.storage.{key}"));
            assert!(reconcilable(&with, &with).is_ok(), "unchanged {key} is fine");
        }
        let e = refused(|v| {
            v["storage"]["links"].as_array_mut().unwrap().push(json!({"path": "/etc/m", "target": "/etc/b"}))
        });
        assert_eq!(e.field, "spec.config.storage.links[1]");
        assert!(e.message.contains("\"/etc/m\""), "{e}");
        let e = refused(|v| v["storage"]["links"][0]["target"] = "/etc/b".into());
        assert_eq!(e.field, "spec.config.storage.links[0]", "changing a link's target is adding a link");
    }

    #[test]
    fn file_refusals() {
        let e = refused(|v| v["storage"]["files"][1]["path"] = FORCE_FILE.into());
        assert_eq!(e.field, "spec.config.storage.files[1].path");
        assert!(e.message.contains("force file"), "{e}");
        let e = refused(|v| v["storage"]["files"][0]["append"] = json!([{"source": "data:,more"}]));
        assert_eq!(e.field, "spec.config.storage.files[0].append");
        assert!(e.message.contains("\"/etc/a\" includes append"), "{e}");
    }

    #[test]
    fn ignition_kernel_arguments_are_refused() {
        let e = refused(|v| v["kernelArguments"] = json!({"shouldExist": ["enforcing=0"]}));
        assert_eq!(e.field, "spec.config.kernelArguments");
        assert!(e.message.contains("spec.kernelArguments"), "{e}");
        let mut s = spec(base());
        s.kernel_arguments = vec!["enforcing=0".into()];
        assert!(reconcilable(&spec(base()), &s).unwrap().kargs, "spec.kernelArguments is the way");
    }

    #[test]
    fn fips_and_kernel_type_refusals() {
        let old = spec(base());
        for (from, to) in [(None, Some(true)), (Some(true), Some(false)), (Some(false), Some(true))] {
            let (mut a, mut b) = (old.clone(), old.clone());
            a.fips = from;
            b.fips = to;
            let e = reconcilable(&a, &b).unwrap_err();
            assert_eq!(e.field, "spec.fips");
            assert!(e.message.contains("FIPS"), "{e}");
        }
        let (mut a, mut b) = (old.clone(), old.clone());
        a.fips = None;
        b.fips = Some(false);
        assert!(reconcilable(&a, &b).is_ok(), "unset and false are the same");
        let mut rt = old.clone();
        rt.kernel_type = "rt".into();
        let e = reconcilable(&old, &rt).unwrap_err();
        assert_eq!(e.field, "spec.kernelType");
        assert!(e.to_string().starts_with("spec.kernelType: unknown kernelType \"rt\""), "{e}");
    }

    #[test]
    fn v2_and_v3_spellings_of_one_config_are_the_same() {
        let v2 = spec(json!({"ignition": {"version": "2.2.0"},
            "storage": {"files": [{"filesystem": "root", "path": "/etc/a", "contents": {"source": "data:,a", "verification": {}}}]},
            "systemd": {"units": [{"name": "x.service", "enable": true}]}}));
        let v3 = spec(json!({"ignition": {"version": "3.2.0"},
            "storage": {"files": [{"path": "/etc/a", "overwrite": true, "contents": {"source": "data:,a"}}]},
            "systemd": {"units": [{"name": "x.service", "enabled": true}]}}));
        assert!(reconcilable(&v2, &v3).unwrap().is_empty());
    }

    /// Ignition's source rules are refused for a config admitted or applied, yet a stored or
    /// current config that predates them still parses (refusing it there left a node unable to
    /// take any update, the one removing the entry included, and a pool unable to render).
    #[test]
    fn a_file_without_a_source_may_not_overwrite_or_carry_a_hash() {
        let s = spec(json!({"ignition": {"version": "3.2.0"}, "storage": {"files": [
            {"path": "/etc/a", "overwrite": true},
            {"path": "/etc/b", "contents": {"verification": {"hash": "sha512-00"}}},
            {"path": "/etc/c", "overwrite": false},
            {"path": "/etc/d", "overwrite": true, "contents": {"source": "data:,d", "verification": {"hash": "sha512-00"}}}]}}));
        let errs = validate_for_day2(&s).unwrap_err();
        assert_eq!(
            errs.iter().map(|e| (e.field.as_str(), e.message.as_str())).collect::<Vec<_>>(),
            [
                ("spec.config.storage.files[0].overwrite", "overwrite must be false if source is unspecified"),
                (
                    "spec.config.storage.files[1].contents.verification.hash",
                    "source must be specified if verification is specified"
                ),
            ]
        );
        assert!(crate::ignition::parse_config(&s.config).is_ok(), "a stored config still reads");
        // A 2.x file without contents converts without `overwrite: true`.
        let v2 = spec(json!({"ignition": {"version": "2.2.0"}, "storage": {"files": [
            {"filesystem": "root", "path": "/etc/empty"}]}}));
        assert_eq!(validate_for_day2(&v2), Ok(()));
    }

    #[test]
    fn day2_validation() {
        let mut s = spec(json!({"ignition": {"version": "3.4.0"}, "storage": {"files": [
            {"path": "/a", "mode": 420}, {"path": "/b", "mode": 2541}, {"path": "/c", "mode": 511}, {"path": "/d", "mode": 512}]}}));
        let errs = validate_for_day2(&s).unwrap_err();
        assert_eq!(
            errs.iter().map(|e| e.field.as_str()).collect::<Vec<_>>(),
            ["spec.config.storage.files[1].mode", "spec.config.storage.files[3].mode"]
        );
        assert!(errs[0].message.starts_with("2541 (04755 octal) of \"/b\" is not allowed"), "{}", errs[0]);
        s.config["storage"]["files"][1]["mode"] = 493.into();
        s.config["storage"]["files"][3]["mode"] = 0.into();
        assert_eq!(validate_for_day2(&s), Ok(()));
        s.kernel_type = "lowlatency".into();
        s.config["storage"]["files"][0]["mode"] = 1023.into();
        let errs = validate_for_day2(&s).unwrap_err();
        assert_eq!(
            errs.iter().map(|e| e.field.as_str()).collect::<Vec<_>>(),
            ["spec.config.storage.files[0].mode", "spec.kernelType"],
            "all errors at once"
        );
        for ok in ["", "default", "realtime", "64k-pages"] {
            s.kernel_type = ok.into();
            s.config["storage"]["files"][0]["mode"] = 420.into();
            assert_eq!(validate_for_day2(&s), Ok(()), "{ok}");
        }
        // A 2.2 config is checked too.
        let v2 = spec(
            json!({"ignition": {"version": "2.2.0"}, "storage": {"files": [{"filesystem": "root", "path": "/s", "mode": 3565}]}}),
        );
        assert_eq!(validate_for_day2(&v2).unwrap_err()[0].field, "spec.config.storage.files[0].mode");
        // Type bits and negative modes are the Ignition check's ("not a file mode"), not this one's.
        for not_a_mode in [0o100644, -1] {
            let s = spec(
                json!({"ignition": {"version": "3.4.0"}, "storage": {"files": [{"path": "/a", "mode": not_a_mode}]}}),
            );
            assert_eq!(validate_for_day2(&s), Ok(()), "{not_a_mode}");
        }
    }
}
