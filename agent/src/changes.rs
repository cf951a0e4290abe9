//! What differs between two rendered configs, computed before anything is applied: the
//! disruption policy needs it to decide whether the node must be drained and rebooted, and that
//! decision comes before the first byte is written.

use crate::disruption::Changes;
use aloft_api::MachineConfigSpec;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};

fn by_key<'a>(cfg: &'a Value, list: &str, key: &str) -> BTreeMap<String, &'a Value> {
    let ptr = format!("/{}", list.replace('.', "/"));
    cfg.pointer(&ptr)
        .and_then(Value::as_array)
        .map(|items| items.iter().filter_map(|i| Some((i.get(key)?.as_str()?.to_string(), i))).collect())
        .unwrap_or_default()
}

fn diff_keys(a: &BTreeMap<String, &Value>, b: &BTreeMap<String, &Value>) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for (k, v) in a {
        if b.get(k) != Some(v) {
            out.insert(k.clone());
        }
    }
    for k in b.keys() {
        if !a.contains_key(k) {
            out.insert(k.clone());
        }
    }
    out
}

/// What of the core user the `sshkey` policy covers: its keys and its password hash (MCO takes
/// any change of the `passwd` section for its SSH key actions; core is the only user a config
/// may name).
fn core_keys(cfg: &Value) -> (Option<&Value>, Option<&Value>) {
    let core = cfg
        .pointer("/passwd/users")
        .and_then(Value::as_array)
        .and_then(|users| users.iter().find(|u| u.get("name").and_then(Value::as_str) == Some("core")));
    let field = |k: &str| core.and_then(|u| u.get(k)).filter(|v| !v.is_null());
    (field("sshAuthorizedKeys"), field("passwordHash"))
}

/// Unset and "default" are the same kernel.
fn kernel_type(t: &str) -> &str {
    if t.is_empty() {
        "default"
    } else {
        t
    }
}

/// Compare two configs whose `config` is Ignition 3.x JSON (already converted), in the terms the
/// node disruption policy decides on. Paths and unit names come out sorted.
pub fn between(old: &MachineConfigSpec, new: &MachineConfigSpec) -> Changes {
    let (oc, nc) = (&old.config, &new.config);
    Changes {
        files: diff_keys(&by_key(oc, "storage.files", "path"), &by_key(nc, "storage.files", "path"))
            .into_iter()
            .collect(),
        units: diff_keys(&by_key(oc, "systemd.units", "name"), &by_key(nc, "systemd.units", "name"))
            .into_iter()
            .collect(),
        ssh_keys: core_keys(oc) != core_keys(nc),
        os_update: old.os_image_url != new.os_image_url,
        kernel_arguments: old.kernel_arguments != new.kernel_arguments,
        fips: old.fips.unwrap_or(false) != new.fips.unwrap_or(false),
        kernel_type: kernel_type(&old.kernel_type) != kernel_type(&new.kernel_type),
        extensions: old.extensions != new.extensions,
        // MCO's "safe registries.conf change" analysis is not done: unknown means drain.
        registries_safe: false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn spec(v: Value) -> MachineConfigSpec {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn finds_what_changed() {
        let old = spec(json!({"config": {"ignition": {"version": "3.4.0"},
            "storage": {"files": [{"path": "/etc/a", "mode": 420}, {"path": "/etc/b", "mode": 420}]},
            "systemd": {"units": [{"name": "x.service", "enabled": true}]},
            "passwd": {"users": [{"name": "core", "sshAuthorizedKeys": ["k1"]}]}},
            "kernelArguments": ["a=1"]}));
        let new = spec(json!({"config": {"ignition": {"version": "3.4.0"},
            "storage": {"files": [{"path": "/etc/a", "mode": 384}, {"path": "/etc/c", "mode": 420}]},
            "systemd": {"units": [{"name": "x.service", "enabled": true}, {"name": "y.service"}]},
            "passwd": {"users": [{"name": "core", "sshAuthorizedKeys": ["k1"]}]}},
            "kernelArguments": ["a=1"]}));
        let c = between(&old, &new);
        assert_eq!(c.files.iter().map(String::as_str).collect::<Vec<_>>(), vec!["/etc/a", "/etc/b", "/etc/c"]);
        assert_eq!(c.units.iter().map(String::as_str).collect::<Vec<_>>(), vec!["y.service"]);
        assert!(!c.ssh_keys && !c.kernel_arguments && !c.os_update);
        assert_eq!(between(&new, &new), Changes::default());
        let mut default_kernel = new.clone();
        default_kernel.kernel_type = "default".into();
        assert_eq!(between(&new, &default_kernel), Changes::default(), "unset and default are the same kernel");
        let mut keys = new.clone();
        keys.config["passwd"]["users"][0]["sshAuthorizedKeys"] = json!(["k2"]);
        keys.kernel_arguments.push("b=2".into());
        let c = between(&new, &keys);
        assert!(c.ssh_keys && c.kernel_arguments && c.files.is_empty());
        // A password change alone is the same kind of change (MCO's passwd diff).
        let mut password = new.clone();
        password.config["passwd"]["users"][0]["passwordHash"] = json!("$6$salt$hash");
        let c = between(&new, &password);
        assert!(c.ssh_keys && c.files.is_empty() && !c.kernel_arguments, "{c:?}");
    }
}
