//! Ignition configs as MachineConfigs carry them: validated with CoreOS's own spec structs
//! (ignition-config) and normalised to spec 3.5.0, so everything after admission (merging,
//! diffing, applying) deals with one version. Spec 3.0–3.5 are accepted as written (later 3.x
//! versions only add fields), 2.2 is converted the way MCO converts it, anything else is refused
//! with the field and the versions that are accepted.

use serde_json::{json, Map, Value};

/// The spec version every config is normalised to.
pub const TARGET_VERSION: &str = "3.5.0";
const ACCEPTED: &str = "2.2.0, 3.0.0, 3.1.0, 3.2.0, 3.3.0, 3.4.0, 3.5.0";

/// A config that cannot be used, with the field at fault.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct IgnitionError {
    field: String,
    message: String,
}

impl IgnitionError {
    fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        IgnitionError { field: field.into(), message: message.into() }
    }
    /// Dotted path from the MachineConfig root, e.g. `spec.config.ignition.version`.
    pub fn field(&self) -> String {
        self.field.clone()
    }
    pub fn message(&self) -> &str {
        &self.message
    }
}

const VERSION_FIELD: &str = "spec.config.ignition.version";

/// Validate `raw` (a MachineConfig's `spec.config`) and return it as a 3.5.0 document. Fields are
/// kept as written (only the version changes for 3.x); null or `{}` means an empty config.
pub fn parse_config(raw: &Value) -> Result<Value, IgnitionError> {
    let obj = match raw {
        Value::Null => return Ok(empty()),
        Value::Object(m) if m.is_empty() => return Ok(empty()),
        Value::Object(m) => m,
        other => {
            return Err(IgnitionError::new(
                "spec.config",
                format!("must be an Ignition config object, got {}", kind(other)),
            ))
        }
    };
    let version = match obj.get("ignition").and_then(|i| i.get("version")) {
        Some(Value::String(s)) => s.clone(),
        Some(other) => {
            return Err(IgnitionError::new(VERSION_FIELD, format!("must be a string such as \"3.4.0\", got {other}")))
        }
        None => {
            return Err(IgnitionError::new(
                VERSION_FIELD,
                format!("missing: an Ignition config needs a version (accepted: {ACCEPTED})"),
            ))
        }
    };
    let v3 = match version.as_str() {
        "2.2.0" => convert_v2(obj)?,
        "3.0.0" | "3.1.0" | "3.2.0" | "3.3.0" | "3.4.0" | "3.5.0" => Value::Object(obj.clone()),
        "" => {
            return Err(IgnitionError::new(
                VERSION_FIELD,
                format!("empty: an Ignition config needs a version (accepted: {ACCEPTED})"),
            ))
        }
        v => {
            return Err(IgnitionError::new(
                VERSION_FIELD,
                format!("unsupported Ignition version {v:?} (accepted: {ACCEPTED})"),
            ))
        }
    };
    // Check the document against the schema of the version it was written for, then as 3.5.
    check_schema(&v3)?;
    let mut out = v3;
    out["ignition"]["version"] = TARGET_VERSION.into();
    check_schema(&out)?;
    Ok(out)
}

fn empty() -> Value {
    json!({"ignition": {"version": TARGET_VERSION}})
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

fn check_schema(v: &Value) -> Result<(), IgnitionError> {
    let bytes = serde_json::to_vec(v).map_err(|e| IgnitionError::new("spec.config", e.to_string()))?;
    match ignition_config::Config::parse_slice(&bytes) {
        Ok(_) => Ok(()),
        Err(ignition_config::Error::Serialization(e)) => {
            Err(IgnitionError::new("spec.config", format!("invalid Ignition config: {e}")))
        }
        Err(e) => Err(IgnitionError::new(VERSION_FIELD, format!("{e} (accepted: {ACCEPTED})"))),
    }
}

fn take<'a>(m: &'a Map<String, Value>, k: &str) -> Option<&'a Value> {
    m.get(k).filter(|v| !v.is_null())
}

fn non_empty(v: Option<&Value>) -> bool {
    match v {
        None | Some(Value::Null) => false,
        Some(Value::Array(a)) => !a.is_empty(),
        Some(Value::Object(o)) => !o.is_empty(),
        _ => true,
    }
}

/// Ignition 2.2 -> 3.x, for what a day-2 MachineConfig can carry (files, links, directories on
/// the root filesystem, units, users' SSH keys and password hashes). Anything that has no
/// faithful 3.x form is an error naming it.
fn convert_v2(src: &Map<String, Value>) -> Result<Value, IgnitionError> {
    let f = |p: &str| format!("spec.config.{p}");
    let mut out = Map::new();
    let mut ign = Map::new();
    ign.insert("version".into(), "3.0.0".into());
    if let Some(Value::Object(i)) = take(src, "ignition") {
        if let Some(Value::Object(cfg)) = take(i, "config") {
            let mut c = Map::new();
            if let Some(a) = take(cfg, "append") {
                c.insert("merge".into(), a.clone());
            }
            if let Some(r) = take(cfg, "replace") {
                c.insert("replace".into(), r.clone());
            }
            if !c.is_empty() {
                ign.insert("config".into(), Value::Object(c));
            }
        }
        for k in ["security", "timeouts"] {
            if let Some(v) = take(i, k) {
                ign.insert(k.into(), v.clone());
            }
        }
    }
    out.insert("ignition".into(), Value::Object(ign));
    if non_empty(take(src, "networkd").and_then(|n| n.get("units"))) {
        return Err(IgnitionError::new(
            f("networkd"),
            "networkd units have no Ignition 3 equivalent: write the .network files under storage.files",
        ));
    }
    if let Some(Value::Object(st)) = take(src, "storage") {
        let mut s = Map::new();
        for k in ["disks", "raid", "filesystems"] {
            if non_empty(take(st, k)) {
                return Err(IgnitionError::new(
                    f(&format!("storage.{k}")),
                    format!("converting Ignition 2.2 storage.{k} is not supported: rewrite the config as Ignition 3"),
                ));
            }
        }
        for (list, key) in [("files", "path"), ("directories", "path"), ("links", "path")] {
            let Some(Value::Array(items)) = take(st, list) else { continue };
            let mut conv = Vec::new();
            for (i, item) in items.iter().enumerate() {
                let field = f(&format!("storage.{list}[{i}]"));
                let Value::Object(m) = item else {
                    return Err(IgnitionError::new(field, "must be an object"));
                };
                match m.get("filesystem").and_then(Value::as_str) {
                    None | Some("root") => {}
                    Some(fs) => {
                        return Err(IgnitionError::new(
                            format!("{field}.filesystem"),
                            format!("only the root filesystem can be converted from Ignition 2.2, got {fs:?}"),
                        ))
                    }
                }
                if m.get("append").and_then(Value::as_bool) == Some(true) {
                    return Err(IgnitionError::new(format!("{field}.append"), "appending to files is not supported"));
                }
                if !m.get(key).is_some_and(Value::is_string) {
                    return Err(IgnitionError::new(format!("{field}.{key}"), "required"));
                }
                let mut c = Map::new();
                for (k, v) in m {
                    match k.as_str() {
                        "filesystem" | "append" => {}
                        "contents" => {
                            let mut contents = v.as_object().cloned().unwrap_or_default();
                            if contents.get("verification").is_some_and(|v| v.as_object().is_some_and(Map::is_empty)) {
                                contents.remove("verification");
                            }
                            c.insert(k.clone(), Value::Object(contents));
                        }
                        _ => {
                            c.insert(k.clone(), v.clone());
                        }
                    }
                }
                if list == "files" {
                    // 2.x replaced files unconditionally; MCO writes day-2 files the same way.
                    c.insert("overwrite".into(), true.into());
                }
                conv.push(Value::Object(c));
            }
            s.insert(list.into(), Value::Array(conv));
        }
        if !s.is_empty() {
            out.insert("storage".into(), Value::Object(s));
        }
    }
    if let Some(Value::Object(sd)) = take(src, "systemd") {
        let mut units = Vec::new();
        for (i, u) in sd.get("units").and_then(Value::as_array).into_iter().flatten().enumerate() {
            let field = f(&format!("systemd.units[{i}]"));
            let Value::Object(m) = u else { return Err(IgnitionError::new(field, "must be an object")) };
            let mut c = Map::new();
            for (k, v) in m {
                match k.as_str() {
                    // `enable` is 2.x's deprecated spelling of `enabled`.
                    "enable" => {
                        if !m.contains_key("enabled") {
                            c.insert("enabled".into(), v.clone());
                        }
                    }
                    _ => {
                        c.insert(k.clone(), v.clone());
                    }
                }
            }
            units.push(Value::Object(c));
        }
        if !units.is_empty() {
            out.insert("systemd".into(), json!({"units": units}));
        }
    }
    if let Some(Value::Object(pw)) = take(src, "passwd") {
        let mut p = Map::new();
        if let Some(Value::Array(users)) = take(pw, "users") {
            let mut conv = Vec::new();
            for (i, u) in users.iter().enumerate() {
                let field = f(&format!("passwd.users[{i}]"));
                let Value::Object(m) = u else { return Err(IgnitionError::new(field, "must be an object")) };
                if m.contains_key("create") {
                    return Err(IgnitionError::new(
                        format!("{field}.create"),
                        "the 2.x `create` block has no Ignition 3 form: set the user's fields directly",
                    ));
                }
                conv.push(Value::Object(m.clone()));
            }
            p.insert("users".into(), Value::Array(conv));
        }
        if let Some(g) = take(pw, "groups") {
            p.insert("groups".into(), g.clone());
        }
        if !p.is_empty() {
            out.insert("passwd".into(), Value::Object(p));
        }
    }
    Ok(Value::Object(out))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn testdata(rel: &str) -> std::path::PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/testdata/mco").join(rel)
    }

    fn mc_config(rel: &str) -> Value {
        let text = std::fs::read_to_string(testdata(rel)).unwrap();
        let v: Value = yaml_serde::from_str(&text).unwrap();
        v["spec"]["config"].clone()
    }

    #[test]
    fn accepts_3x_and_normalises_the_version() {
        let cfg = mc_config("bootstrap/99_openshift-machineconfig_worker.yaml");
        assert_eq!(cfg["ignition"]["version"], "3.2.0");
        let out = parse_config(&cfg).unwrap();
        assert_eq!(out["ignition"]["version"], TARGET_VERSION);
        assert_eq!(out["passwd"]["users"][0]["sshAuthorizedKeys"][0], "ssh-rsa SSH-AUTHORIZED-KEY");
        for v in ["3.0.0", "3.1.0", "3.3.0", "3.4.0", "3.5.0"] {
            assert!(parse_config(&json!({"ignition": {"version": v}})).is_ok(), "{v}");
        }
        assert_eq!(parse_config(&Value::Null).unwrap(), empty());
        assert_eq!(parse_config(&json!({})).unwrap(), empty());
    }

    #[test]
    fn the_ignition_fixtures_parse() {
        let plain: Value =
            serde_json::from_slice(&std::fs::read(testdata("ignition-fixtures/ign_config.json")).unwrap()).unwrap();
        assert!(parse_config(&plain).is_ok());
        let gz = std::fs::read(testdata("ignition-fixtures/compressed_ign_config.json.gz")).unwrap();
        let mut text = String::new();
        std::io::Read::read_to_string(&mut flate2::read::GzDecoder::new(&gz[..]), &mut text).unwrap();
        let v: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(parse_config(&v).unwrap()["ignition"]["version"], TARGET_VERSION);
    }

    #[test]
    fn converts_2_2_like_mco() {
        let cfg = mc_config("server/machine-configs/test-config.yaml");
        let out = parse_config(&cfg).unwrap();
        assert_eq!(out["ignition"]["version"], TARGET_VERSION);
        let file = &out["storage"]["files"][0];
        assert_eq!(file["path"], "/etc/coreos/update.conf");
        assert!(file.get("filesystem").is_none());
        assert!(file["contents"].get("verification").is_none(), "empty verification dropped");
        assert_eq!(file["overwrite"], true);
        assert_eq!(file["mode"], 420);
        let units = out["systemd"]["units"].as_array().unwrap();
        assert_eq!(units[0]["name"], "docker.service");
        assert_eq!(units[0]["dropins"][0]["name"], "10-dockeropts.conf");
        assert_eq!(units[0]["enabled"], true);
        // 2.x's `enable` becomes `enabled`.
        let old =
            json!({"ignition": {"version": "2.2.0"}, "systemd": {"units": [{"name": "a.service", "enable": true}]}});
        assert_eq!(parse_config(&old).unwrap()["systemd"]["units"][0]["enabled"], true);
    }

    #[test]
    fn refusals_name_the_field() {
        let cases = [
            (json!({"ignition": {"version": "9.9.9"}}), VERSION_FIELD, "unsupported Ignition version"),
            (json!({"ignition": {"version": ""}}), VERSION_FIELD, "empty"),
            (json!({"ignition": {}}), VERSION_FIELD, "missing"),
            (json!({"ignition": {"version": 3}}), VERSION_FIELD, "must be a string"),
            (json!({"ignition": {"version": "3.6.0-experimental"}}), VERSION_FIELD, "unsupported"),
            (json!("text"), "spec.config", "must be an Ignition config object"),
            (
                json!({"ignition": {"version": "3.4.0"}, "storage": {"files": "nope"}}),
                "spec.config",
                "invalid Ignition config",
            ),
            (
                json!({"ignition": {"version": "3.4.0"}, "storage": {"files": [{"path": "/a", "mode": "0644"}]}}),
                "spec.config",
                "invalid Ignition config",
            ),
            (
                json!({"ignition": {"version": "2.2.0"}, "storage": {"files": [{"path": "/a", "filesystem": "var"}]}}),
                "spec.config.storage.files[0].filesystem",
                "only the root filesystem",
            ),
            (
                json!({"ignition": {"version": "2.2.0"}, "storage": {"files": [{"path": "/a", "append": true}]}}),
                "spec.config.storage.files[0].append",
                "appending",
            ),
            (
                json!({"ignition": {"version": "2.2.0"}, "networkd": {"units": [{"name": "a.network"}]}}),
                "spec.config.networkd",
                "networkd",
            ),
            (
                json!({"ignition": {"version": "2.2.0"}, "storage": {"filesystems": [{"name": "x"}]}}),
                "spec.config.storage.filesystems",
                "not supported",
            ),
        ];
        for (cfg, field, msg) in cases {
            let e = parse_config(&cfg).unwrap_err();
            assert_eq!(e.field(), field, "{cfg}");
            assert!(e.to_string().contains(msg), "{cfg}: {e}");
        }
    }
}
