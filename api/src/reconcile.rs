//! Which changes a running node can take (MCO's reconcilable rules), and the day-2 checks every
//! MachineConfig must pass. Used by the render controller (a pool refuses to render an
//! unreconcilable change) and by the agent (a node refuses to apply one), so both refuse the same.

use crate::machineconfig::MachineConfigSpec;
use serde_json::Value;

/// MCO's escape-hatch file; no config may write it.
pub const FORCE_FILE: &str = "/run/machine-config-daemon-force";

/// Kernel types a config may ask for.
pub const KERNEL_TYPES: &[&str] = &["", "default", "realtime", "64k-pages"];

/// A change a running node cannot take, with the field that carries it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct Unreconcilable {
    pub field: String,
    pub message: String,
}

fn unrec(field: impl Into<String>, message: impl Into<String>) -> Unreconcilable {
    Unreconcilable { field: field.into(), message: message.into() }
}

/// What kinds of change a reconcilable update carries: the agent's disruption policy starts here.
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

fn at<'a>(v: &'a Value, p: &str) -> Option<&'a Value> {
    v.pointer(p).filter(|x| !x.is_null())
}

fn is_empty(v: Option<&Value>) -> bool {
    match v {
        None => true,
        Some(Value::Array(a)) => a.is_empty(),
        Some(Value::Object(o)) => o.is_empty(),
        _ => false,
    }
}

fn same(a: Option<&Value>, b: Option<&Value>) -> bool {
    a == b || (is_empty(a) && is_empty(b))
}

fn users(cfg: &Value) -> Vec<&Value> {
    at(cfg, "/passwd/users").and_then(Value::as_array).map(|u| u.iter().collect()).unwrap_or_default()
}

/// Can a node on `old` move to `new` without reprovisioning? Both configs are Ignition 3.x JSON
/// (normalised by [`crate::ignition::parse_config`]).
pub fn reconcilable(old: &MachineConfigSpec, new: &MachineConfigSpec) -> Result<ConfigDiff, Unreconcilable> {
    let (o, n) = (&old.config, &new.config);
    if !same(at(o, "/passwd/groups"), at(n, "/passwd/groups")) {
        return Err(unrec("spec.config.passwd.groups", "ignition passwd groups section contains changes"));
    }
    for (i, u) in users(n).iter().enumerate() {
        let name = u.get("name").and_then(Value::as_str).unwrap_or("");
        if name != "core" {
            return Err(unrec(format!("spec.config.passwd.users[{i}].name"), format!("ignition passwd user section contains unsupported changes: non-core user {name:?} added or changed")));
        }
        let old_user = users(o).into_iter().find(|x| x.get("name").and_then(Value::as_str) == Some("core"));
        let strip = |v: Option<&Value>| -> Value {
            let mut v = v.cloned().unwrap_or_else(|| serde_json::json!({"name": "core"}));
            if let Some(m) = v.as_object_mut() {
                m.remove("sshAuthorizedKeys");
                m.remove("passwordHash");
            }
            v
        };
        if strip(old_user) != strip(Some(u)) {
            return Err(unrec(format!("spec.config.passwd.users[{i}]"), "ignition passwd user section contains unsupported changes: only sshAuthorizedKeys and passwordHash of user core may change"));
        }
    }
    if !same(at(o, "/kernelArguments"), at(n, "/kernelArguments")) {
        return Err(unrec(
            "spec.config.kernelArguments",
            "ignition kernelArguments section contains changes: use spec.kernelArguments",
        ));
    }
    for key in ["disks", "filesystems", "raid", "luks", "directories"] {
        if !same(at(o, &format!("/storage/{key}")), at(n, &format!("/storage/{key}"))) {
            return Err(unrec(
                format!("spec.config.storage.{key}"),
                format!("ignition {key} section contains changes"),
            ));
        }
    }
    let old_links: Vec<&Value> =
        at(o, "/storage/links").and_then(Value::as_array).map(|l| l.iter().collect()).unwrap_or_default();
    if let Some(links) = at(n, "/storage/links").and_then(Value::as_array) {
        if let Some(i) = links.iter().position(|l| !old_links.contains(&l)) {
            return Err(unrec(
                format!("spec.config.storage.links[{i}]"),
                "ignition links section contains changes: adding links is not supported",
            ));
        }
    }
    if let Some(files) = at(n, "/storage/files").and_then(Value::as_array) {
        for (i, f) in files.iter().enumerate() {
            if f.get("path").and_then(Value::as_str) == Some(FORCE_FILE) {
                return Err(unrec(
                    format!("spec.config.storage.files[{i}].path"),
                    format!("ignition file {FORCE_FILE} includes the MCO force file"),
                ));
            }
            if f.get("append").is_some_and(|a| !is_empty(Some(a))) {
                return Err(unrec(
                    format!("spec.config.storage.files[{i}].append"),
                    "ignition file contains append: appending to files is not supported",
                ));
            }
        }
    }
    if old.fips.unwrap_or(false) != new.fips.unwrap_or(false) {
        return Err(unrec("spec.fips", "detected change to FIPS flag; refusing to modify FIPS on a running cluster"));
    }
    if !KERNEL_TYPES.contains(&new.kernel_type.as_str()) {
        return Err(unrec(
            "spec.kernelType",
            format!("unknown kernelType {:?} (want default, realtime or 64k-pages)", new.kernel_type),
        ));
    }
    let norm_kt = |k: &str| if k.is_empty() { "default".to_string() } else { k.to_string() };
    Ok(ConfigDiff {
        os_update: old.os_image_url != new.os_image_url,
        kargs: old.kernel_arguments != new.kernel_arguments,
        fips: false,
        passwd: !same(at(o, "/passwd/users"), at(n, "/passwd/users")),
        files: !same(at(o, "/storage/files"), at(n, "/storage/files"))
            || !same(at(o, "/storage/links"), at(n, "/storage/links")),
        units: !same(at(o, "/systemd/units"), at(n, "/systemd/units")),
        kernel_type: norm_kt(&old.kernel_type) != norm_kt(&new.kernel_type),
        extensions: old.extensions != new.extensions,
    })
}

/// A field error of [`validate_for_day2`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    pub field: String,
    pub message: String,
}

/// Checks every MachineConfig must pass before it is stored: modes a node would refuse and an
/// unknown kernelType. `spec.config` may be any accepted Ignition version.
pub fn validate_for_day2(spec: &MachineConfigSpec) -> Result<(), Vec<FieldError>> {
    let mut errs = Vec::new();
    if let Some(files) = spec.config.pointer("/storage/files").and_then(Value::as_array) {
        for (i, f) in files.iter().enumerate() {
            if let Some(mode) = f.get("mode").and_then(Value::as_i64) {
                if !(0..=0o777).contains(&mode) {
                    errs.push(FieldError {
                        field: format!("spec.config.storage.files[{i}].mode"),
                        message: format!(
                            "mode {mode:#o} is not allowed: setuid, setgid and sticky bits (above 0777) are refused"
                        ),
                    });
                }
            }
        }
    }
    if !KERNEL_TYPES.contains(&spec.kernel_type.as_str()) {
        errs.push(FieldError {
            field: "spec.kernelType".into(),
            message: format!("unknown kernelType {:?} (want default, realtime or 64k-pages)", spec.kernel_type),
        });
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
        json!({"ignition": {"version": "3.5.0"}, "passwd": {"users": [{"name": "core", "sshAuthorizedKeys": ["k1"]}]},
               "storage": {"files": [{"path": "/etc/a", "contents": {"source": "data:,a"}}]}})
    }

    #[test]
    fn reconcilable_changes() {
        let old = spec(base());
        let mut n = base();
        n["passwd"]["users"][0]["sshAuthorizedKeys"] = json!(["k2"]);
        n["storage"]["files"][0]["contents"]["source"] = "data:,b".into();
        n["systemd"] = json!({"units": [{"name": "x.service", "enabled": true}]});
        let mut new = spec(n);
        new.kernel_arguments = vec!["nosmt".into()];
        new.os_image_url = "ostree+https://h/repo#ref@abc".into();
        let d = reconcilable(&old, &new).unwrap();
        assert!(d.passwd && d.files && d.units && d.kargs && d.os_update);
        assert!(!d.fips && !d.kernel_type && !d.extensions);
        assert_eq!(reconcilable(&old, &old).unwrap(), ConfigDiff::default());
        let mut rt = old.clone();
        rt.kernel_type = "realtime".into();
        assert!(reconcilable(&old, &rt).unwrap().kernel_type);
        // Removing a link is fine.
        let mut with_link = base();
        with_link["storage"]["links"] = json!([{"path": "/etc/l", "target": "/etc/a"}]);
        assert!(reconcilable(&spec(with_link), &old).is_ok());
    }

    #[test]
    fn unreconcilable_changes_name_the_field() {
        let old = spec(base());
        let change = |f: &dyn Fn(&mut Value)| {
            let mut v = base();
            f(&mut v);
            reconcilable(&old, &spec(v)).unwrap_err()
        };
        assert_eq!(
            change(&|v| v["storage"]["disks"] = json!([{"device": "/dev/vdb"}])).field,
            "spec.config.storage.disks"
        );
        assert_eq!(
            change(&|v| v["storage"]["filesystems"] = json!([{"path": "/var"}])).field,
            "spec.config.storage.filesystems"
        );
        assert_eq!(change(&|v| v["storage"]["raid"] = json!([{"name": "md"}])).field, "spec.config.storage.raid");
        assert_eq!(
            change(&|v| v["storage"]["directories"] = json!([{"path": "/d"}])).field,
            "spec.config.storage.directories"
        );
        assert_eq!(
            change(&|v| v["storage"]["links"] = json!([{"path": "/l", "target": "/a"}])).field,
            "spec.config.storage.links[0]"
        );
        assert_eq!(change(&|v| v["passwd"]["groups"] = json!([{"name": "g"}])).field, "spec.config.passwd.groups");
        assert_eq!(
            change(&|v| v["passwd"]["users"] = json!([{"name": "alice"}])).field,
            "spec.config.passwd.users[0].name"
        );
        assert_eq!(
            change(&|v| v["passwd"]["users"][0]["shell"] = "/bin/zsh".into()).field,
            "spec.config.passwd.users[0]"
        );
        assert_eq!(
            change(&|v| v["kernelArguments"] = json!({"shouldExist": ["a"]})).field,
            "spec.config.kernelArguments"
        );
        assert_eq!(
            change(&|v| v["storage"]["files"][0]["path"] = FORCE_FILE.into()).field,
            "spec.config.storage.files[0].path"
        );
        assert_eq!(
            change(&|v| v["storage"]["files"][0]["append"] = json!([{"source": "data:,x"}])).field,
            "spec.config.storage.files[0].append"
        );
        let mut fips = old.clone();
        fips.fips = Some(true);
        let e = reconcilable(&old, &fips).unwrap_err();
        assert_eq!(e.field, "spec.fips");
        assert!(e.message.contains("FIPS"));
        let mut kt = old.clone();
        kt.kernel_type = "rt".into();
        assert_eq!(reconcilable(&old, &kt).unwrap_err().field, "spec.kernelType");
    }

    #[test]
    fn day2_checks() {
        let mut s = spec(
            json!({"ignition": {"version": "3.4.0"}, "storage": {"files": [{"path": "/a", "mode": 420}, {"path": "/b", "mode": 0o4755}]}}),
        );
        let errs = validate_for_day2(&s).unwrap_err();
        assert_eq!(errs.len(), 1);
        assert_eq!(errs[0].field, "spec.config.storage.files[1].mode");
        s.config["storage"]["files"][1]["mode"] = 0o755.into();
        assert!(validate_for_day2(&s).is_ok());
        s.kernel_type = "lowlatency".into();
        assert_eq!(validate_for_day2(&s).unwrap_err()[0].field, "spec.kernelType");
    }
}
