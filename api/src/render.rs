//! Rendering a pool, by MCO's rules: select the MachineConfigs the pool's
//! `machineConfigSelector` picks, order them (role=worker first, then by name), merge them, check
//! the result against the pool's current rendered config, and name it by a hash of its content.
//! A pure function of its inputs, so every coordinator renders the same name for the same pool.

use crate::annotations;
use crate::ignition;
use crate::machineconfig::{MachineConfig, MachineConfigPool, MachineConfigSpec};
use crate::meta::{ObjectMeta, ObjectReference, OwnerReference};
use crate::reconcile;
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

/// MCO's limit on a rendered config (it must fit an etcd object with room to spare).
pub const MAX_RENDERED_BYTES: usize = 1_572_864;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RenderError {
    #[error("pool {pool} has an empty machineConfigSelector: it would select every MachineConfig")]
    EmptySelector { pool: String },
    #[error("pool {pool}: spec.machineConfigSelector: {message}")]
    BadSelector { pool: String, message: String },
    #[error("no MachineConfigs found matching the selector of pool {pool}")]
    NothingSelected { pool: String },
    #[error("MachineConfig {config}: {field}: {message}")]
    Invalid { config: String, field: String, message: String },
    #[error("MachineConfigs {first} and {second} ask for different kernel types ({first_type} and {second_type})")]
    KernelTypeConflict { first: String, first_type: String, second: String, second_type: String },
    #[error("rendered config for pool {pool} is {size} bytes, over the {limit}-byte limit")]
    TooLarge { pool: String, size: usize, limit: usize },
    #[error("MachineConfig {config} makes a change a running node cannot take: {field}: {message}")]
    Unreconcilable { config: String, field: String, message: String },
}

/// A rendered config and the MachineConfigs it came from, in merge order.
#[derive(Debug, Clone, PartialEq)]
pub struct Rendered {
    pub machine_config: MachineConfig,
    pub sources: Vec<ObjectReference>,
}

const ROLE_WORKER: (&str, &str) = (annotations::ROLE_LABEL, "worker");

/// Generated configs (rendered ones) never feed a render.
fn is_generated(mc: &MachineConfig) -> bool {
    mc.metadata.name.starts_with("rendered-")
        || mc.metadata.owner_references.iter().any(|o| o.kind == "MachineConfigPool")
}

/// The configs `pool` selects, in MCO's merge order.
pub fn select_and_order(pool: &MachineConfigPool, all: &[MachineConfig]) -> Result<Vec<MachineConfig>, RenderError> {
    let name = pool.metadata.name.clone();
    let sel = match &pool.spec.machine_config_selector {
        Some(s) if !s.is_empty() => {
            s.to_selector().map_err(|e| RenderError::BadSelector { pool: name.clone(), message: e.to_string() })?
        }
        _ => return Err(RenderError::EmptySelector { pool: name }),
    };
    let mut picked: Vec<MachineConfig> =
        all.iter().filter(|m| !is_generated(m) && sel.matches(&m.metadata.labels)).cloned().collect();
    let is_worker = |m: &MachineConfig| m.metadata.labels.get(ROLE_WORKER.0).map(String::as_str) == Some(ROLE_WORKER.1);
    picked.sort_by(|a, b| is_worker(b).cmp(&is_worker(a)).then_with(|| a.metadata.name.cmp(&b.metadata.name)));
    Ok(picked)
}

/// The key that identifies an entry of an Ignition list, for the lists Ignition merges by key.
fn list_key(list: &str) -> Option<&'static str> {
    match list {
        "files" | "directories" | "links" | "filesystems" => Some("path"),
        "units" | "dropins" | "users" | "groups" | "raid" | "luks" => Some("name"),
        "disks" => Some("device"),
        "partitions" => Some("label"),
        _ => None,
    }
}

/// Ignition's merge: objects field by field (later wins), keyed lists entry by entry, other lists
/// appended without duplicates (SSH keys from several configs add up). A later file entry that
/// brings `contents` replaces the earlier contents whole, so it does not inherit a stale
/// `compression` (MCO resets it for the same reason).
fn merge_value(base: &mut Value, over: &Value, field: &str) {
    match (base, over) {
        (Value::Object(b), Value::Object(o)) => {
            for (k, ov) in o {
                if ov.is_null() {
                    continue;
                }
                if k == "contents" && field == "files" {
                    b.insert(k.clone(), ov.clone());
                    continue;
                }
                match b.get_mut(k) {
                    Some(bv) => merge_value(bv, ov, k),
                    None => {
                        b.insert(k.clone(), ov.clone());
                    }
                }
            }
        }
        (Value::Array(b), Value::Array(o)) => match list_key(field) {
            Some(key) => {
                for item in o {
                    let id = item.get(key).cloned();
                    match b.iter_mut().find(|x| id.is_some() && x.get(key) == id.as_ref()) {
                        Some(existing) => merge_value(existing, item, field),
                        None => b.push(item.clone()),
                    }
                }
            }
            None => {
                for item in o {
                    if !b.contains(item) {
                        b.push(item.clone());
                    }
                }
            }
        },
        (b, o) => *b = o.clone(),
    }
}

fn kernel_type(t: &str) -> &str {
    if t.is_empty() {
        "default"
    } else {
        t
    }
}

/// Merge `configs` (already in order) into one spec.
pub fn merge(configs: &[MachineConfig]) -> Result<MachineConfigSpec, RenderError> {
    let mut merged = Value::Object(Map::new());
    let mut out = MachineConfigSpec::default();
    let mut kt: Option<(String, String)> = None;
    for mc in configs {
        let name = &mc.metadata.name;
        let cfg = ignition::parse_config(&mc.spec.config).map_err(|e| RenderError::Invalid {
            config: name.clone(),
            field: e.field(),
            message: e.message().to_string(),
        })?;
        merge_value(&mut merged, &cfg, "");
        if mc.spec.fips == Some(true) {
            out.fips = Some(true);
        }
        let t = kernel_type(&mc.spec.kernel_type);
        if !reconcile::KERNEL_TYPES.contains(&t) {
            return Err(RenderError::Invalid {
                config: name.clone(),
                field: "spec.kernelType".into(),
                message: format!("unknown kernelType {t:?}"),
            });
        }
        if t != "default" {
            match &kt {
                Some((other, other_t)) if other_t != t => {
                    return Err(RenderError::KernelTypeConflict {
                        first: other.clone(),
                        first_type: other_t.clone(),
                        second: name.clone(),
                        second_type: t.to_string(),
                    })
                }
                _ => kt = Some((name.clone(), t.to_string())),
            }
        }
        out.kernel_arguments.extend(mc.spec.kernel_arguments.iter().cloned());
        out.extensions.extend(mc.spec.extensions.iter().cloned());
        if !mc.spec.os_image_url.is_empty() {
            out.os_image_url = mc.spec.os_image_url.clone();
        }
    }
    merged["ignition"] = serde_json::json!({"version": ignition::TARGET_VERSION});
    out.config = merged;
    out.kernel_type = kt.map(|(_, t)| t).unwrap_or_default();
    Ok(out)
}

/// JSON with object keys sorted at every level: a stable byte form for hashing.
pub fn canonical_json(v: &Value) -> String {
    fn sorted(v: &Value) -> Value {
        match v {
            Value::Object(m) => {
                let mut keys: Vec<&String> = m.keys().collect();
                keys.sort();
                Value::Object(keys.into_iter().map(|k| (k.clone(), sorted(&m[k]))).collect())
            }
            Value::Array(a) => Value::Array(a.iter().map(sorted).collect()),
            other => other.clone(),
        }
    }
    sorted(v).to_string()
}

/// `rendered-<pool>-<32 hex>`: the first 16 bytes of SHA-256 over the canonical spec.
pub fn rendered_name(pool: &str, spec: &MachineConfigSpec) -> String {
    let v = serde_json::to_value(spec).unwrap_or(Value::Null);
    let digest = Sha256::digest(canonical_json(&v).as_bytes());
    format!("rendered-{pool}-{}", hex::encode(&digest[..16]))
}

/// Which selected config brought the field an unreconcilable error names (the last one that
/// sets it), so the pool's condition can point at the config to fix.
fn culprit(configs: &[MachineConfig], field: &str) -> String {
    let sets = |mc: &MachineConfig| -> bool {
        if field == "spec.fips" {
            return mc.spec.fips.is_some();
        }
        if field == "spec.kernelType" {
            return !mc.spec.kernel_type.is_empty();
        }
        let Some(rest) = field.strip_prefix("spec.config.") else { return false };
        let ptr: String = rest.split('.').map(|p| p.split('[').next().unwrap_or(p)).collect::<Vec<_>>().join("/");
        mc.spec
            .config
            .pointer(&format!("/{ptr}"))
            .is_some_and(|v| !v.is_null() && v != &Value::Array(vec![]) && v != &Value::Object(Map::new()))
    };
    configs.iter().rev().find(|m| sets(m)).or(configs.last()).map(|m| m.metadata.name.clone()).unwrap_or_default()
}

/// Render `pool` from `all` MachineConfigs. `current` is the pool's current rendered config: the
/// new one must be reachable from it on a running node.
pub fn render(
    pool: &MachineConfigPool,
    all: &[MachineConfig],
    current: Option<&MachineConfig>,
) -> Result<Rendered, RenderError> {
    let pool_name = pool.metadata.name.clone();
    let configs = select_and_order(pool, all)?;
    if configs.is_empty() {
        return Err(RenderError::NothingSelected { pool: pool_name });
    }
    let spec = merge(&configs)?;
    if let Some(cur) = current {
        let cur_spec = MachineConfigSpec {
            config: ignition::parse_config(&cur.spec.config).unwrap_or(Value::Null),
            ..cur.spec.clone()
        };
        if let Err(e) = reconcile::reconcilable(&cur_spec, &spec) {
            return Err(RenderError::Unreconcilable {
                config: culprit(&configs, &e.field),
                field: e.field,
                message: e.message,
            });
        }
    }
    let name = rendered_name(&pool_name, &spec);
    let machine_config = MachineConfig {
        api_version: crate::MCO_API_VERSION.into(),
        kind: "MachineConfig".into(),
        metadata: ObjectMeta {
            name,
            annotations: [(annotations::GENERATED_BY.to_string(), format!("aloft-{}", env!("CARGO_PKG_VERSION")))]
                .into(),
            owner_references: vec![OwnerReference {
                api_version: crate::MCO_API_VERSION.into(),
                kind: "MachineConfigPool".into(),
                name: pool_name.clone(),
                uid: pool.metadata.uid.clone().unwrap_or_default(),
                controller: Some(true),
            }],
            ..Default::default()
        },
        spec,
        extra: Default::default(),
    };
    let size = serde_json::to_vec(&machine_config).map(|v| v.len()).unwrap_or(0);
    if size > MAX_RENDERED_BYTES {
        return Err(RenderError::TooLarge { pool: pool_name, size, limit: MAX_RENDERED_BYTES });
    }
    let sources = configs
        .iter()
        .map(|m| ObjectReference {
            api_version: crate::MCO_API_VERSION.into(),
            kind: "MachineConfig".into(),
            name: m.metadata.name.clone(),
            extra: Default::default(),
        })
        .collect();
    Ok(Rendered { machine_config, sources })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn mc(name: &str, role: &str, spec: Value) -> MachineConfig {
        serde_json::from_value(
            json!({"metadata": {"name": name, "labels": {annotations::ROLE_LABEL: role}}, "spec": spec}),
        )
        .unwrap()
    }
    fn ign(extra: Value) -> Value {
        let mut v = json!({"ignition": {"version": "3.4.0"}});
        json_merge(&mut v, &extra);
        v
    }
    fn json_merge(a: &mut Value, b: &Value) {
        if let (Value::Object(a), Value::Object(b)) = (a, b) {
            for (k, v) in b {
                a.insert(k.clone(), v.clone());
            }
        }
    }
    fn pool(role: &str) -> MachineConfigPool {
        serde_json::from_value(json!({"metadata": {"name": role, "uid": "pool-uid"},
            "spec": {"machineConfigSelector": {"matchExpressions": [{"key": annotations::ROLE_LABEL, "operator": "In", "values": ["worker", role]}]}}}))
        .unwrap()
    }
    fn file(path: &str, data: &str) -> Value {
        json!({"path": path, "mode": 420, "contents": {"source": format!("data:,{data}")}})
    }

    #[test]
    fn order_is_worker_first_then_by_name() {
        let all = vec![
            mc("99-infra", "infra", json!({})),
            mc("50-worker", "worker", json!({})),
            mc("10-infra", "infra", json!({})),
            mc("01-worker", "worker", json!({})),
            mc("rendered-infra-abc", "infra", json!({})),
        ];
        let names: Vec<String> =
            select_and_order(&pool("infra"), &all).unwrap().into_iter().map(|m| m.metadata.name).collect();
        assert_eq!(names, vec!["01-worker", "50-worker", "10-infra", "99-infra"]);
        let mut empty = pool("x");
        empty.spec.machine_config_selector = Some(Default::default());
        assert!(matches!(select_and_order(&empty, &all), Err(RenderError::EmptySelector { .. })));
    }

    #[test]
    fn files_units_and_dropins_merge_by_key() {
        let a = mc(
            "00-a",
            "worker",
            json!({"config": ign(json!({
            "storage": {"files": [file("/etc/x", "one"), file("/etc/keep", "k")]},
            "systemd": {"units": [{"name": "a.service", "enabled": true, "dropins": [{"name": "10.conf", "contents": "A"}, {"name": "20.conf", "contents": "B"}]}]},
            "passwd": {"users": [{"name": "core", "sshAuthorizedKeys": ["key-a"]}]}}))}),
        );
        let b = mc(
            "01-b",
            "worker",
            json!({"config": ign(json!({
            "storage": {"files": [file("/etc/x", "two")]},
            "systemd": {"units": [{"name": "a.service", "dropins": [{"name": "20.conf", "contents": "B2"}]}, {"name": "b.service", "mask": true}]},
            "passwd": {"users": [{"name": "core", "sshAuthorizedKeys": ["key-b"]}]}}))}),
        );
        let s = merge(&[a, b]).unwrap();
        let files = s.config["storage"]["files"].as_array().unwrap();
        assert_eq!(files.len(), 2);
        assert_eq!(files[0]["contents"]["source"], "data:,two", "later config wins for a path");
        let units = s.config["systemd"]["units"].as_array().unwrap();
        assert_eq!(units.len(), 2);
        assert_eq!(units[0]["enabled"], true, "fields the later config does not set are kept");
        assert_eq!(
            units[0]["dropins"],
            json!([{"name": "10.conf", "contents": "A"}, {"name": "20.conf", "contents": "B2"}])
        );
        assert_eq!(s.config["passwd"]["users"][0]["sshAuthorizedKeys"], json!(["key-a", "key-b"]));
        assert_eq!(s.config["ignition"]["version"], "3.5.0");
    }

    #[test]
    fn compression_is_not_inherited() {
        let gz = mc(
            "00-gz",
            "worker",
            json!({"config": ign(json!({"storage": {"files": [{"path": "/etc/x", "contents": {"source": "data:;base64,H4sI", "compression": "gzip"}}]}}))}),
        );
        let plain =
            mc("01-plain", "worker", json!({"config": ign(json!({"storage": {"files": [file("/etc/x", "plain")]}}))}));
        let s = merge(&[gz, plain]).unwrap();
        assert!(s.config["storage"]["files"][0]["contents"].get("compression").is_none());
    }

    #[test]
    fn scalar_rules() {
        let a = mc(
            "00-a",
            "worker",
            json!({"kernelArguments": ["a=1"], "extensions": ["usbguard"], "osImageURL": "img-a", "fips": false}),
        );
        let b = mc(
            "01-b",
            "worker",
            json!({"kernelArguments": ["b=2", "a=1"], "osImageURL": "", "fips": true, "kernelType": "realtime"}),
        );
        let c = mc("02-c", "worker", json!({"extensions": ["kerberos"], "osImageURL": "img-c"}));
        let s = merge(&[a.clone(), b.clone(), c]).unwrap();
        assert_eq!(s.kernel_arguments, vec!["a=1", "b=2", "a=1"], "concatenated in order");
        assert_eq!(s.extensions, vec!["usbguard", "kerberos"]);
        assert_eq!(s.os_image_url, "img-c", "last non-empty wins");
        assert_eq!(s.fips, Some(true), "any true");
        assert_eq!(s.kernel_type, "realtime");
        assert_eq!(merge(&[a.clone(), b.clone()]).unwrap().os_image_url, "img-a");
        let pages = mc("03-d", "worker", json!({"kernelType": "64k-pages"}));
        assert!(matches!(merge(&[b, pages]), Err(RenderError::KernelTypeConflict { .. })));
        let bad = mc("04-e", "worker", json!({"kernelType": "turbo"}));
        let e = merge(&[a, bad]).unwrap_err();
        assert!(e.to_string().contains("MachineConfig 04-e"), "{e}");
    }

    #[test]
    fn name_is_a_hash_of_content_not_of_key_order() {
        let a = mc("00-a", "worker", json!({"config": ign(json!({"storage": {"files": [file("/etc/x", "1")]}}))}));
        let s1 = merge(std::slice::from_ref(&a)).unwrap();
        let reordered: Value =
            serde_json::from_str(&canonical_json(&serde_json::to_value(&s1).unwrap()).chars().collect::<String>())
                .unwrap();
        let s2: MachineConfigSpec = serde_json::from_value(reordered).unwrap();
        assert_eq!(rendered_name("worker", &s1), rendered_name("worker", &s2));
        let n = rendered_name("worker", &s1);
        assert!(n.starts_with("rendered-worker-") && n.len() == "rendered-worker-".len() + 32, "{n}");
        let other = mc("00-a", "worker", json!({"config": ign(json!({"storage": {"files": [file("/etc/x", "2")]}}))}));
        assert_ne!(rendered_name("worker", &merge(&[other]).unwrap()), n);
        assert_eq!(
            canonical_json(&json!({"b": 1, "a": {"d": 2, "c": [3, {"f": 1, "e": 0}]}})),
            r#"{"a":{"c":[3,{"e":0,"f":1}],"d":2},"b":1}"#
        );
    }

    #[test]
    fn render_names_sources_and_refuses() {
        let p = pool("worker");
        let a = mc("00-a", "worker", json!({"config": ign(json!({"storage": {"files": [file("/etc/x", "1")]}}))}));
        let b = mc("01-b", "worker", json!({"kernelArguments": ["nosmt"]}));
        let r = render(&p, &[b.clone(), a.clone()], None).unwrap();
        assert_eq!(r.sources.iter().map(|s| s.name.as_str()).collect::<Vec<_>>(), vec!["00-a", "01-b"]);
        assert_eq!(r.machine_config.metadata.owner_references[0].uid, "pool-uid");
        // Unreconcilable against the current rendered config: the culprit is named.
        let disks = mc(
            "02-disks",
            "worker",
            json!({"config": ign(json!({"storage": {"disks": [{"device": "/dev/vdb", "wipeTable": true}]}}))}),
        );
        let e = render(&p, &[a.clone(), b.clone(), disks], Some(&r.machine_config)).unwrap_err();
        assert!(
            matches!(&e, RenderError::Unreconcilable { config, field, .. } if config == "02-disks" && field == "spec.config.storage.disks"),
            "{e}"
        );
        let fips = mc("03-fips", "worker", json!({"fips": true}));
        let e = render(&p, &[a.clone(), fips], Some(&r.machine_config)).unwrap_err();
        assert!(e.to_string().contains("MachineConfig 03-fips"), "{e}");
        // Too large.
        let big = "x".repeat(MAX_RENDERED_BYTES);
        let huge =
            mc("04-huge", "worker", json!({"config": ign(json!({"storage": {"files": [file("/etc/big", &big)]}}))}));
        assert!(matches!(render(&p, &[huge], None), Err(RenderError::TooLarge { .. })));
        assert!(matches!(
            render(&pool("nothing"), &[mc("x", "other", json!({}))], None),
            Err(RenderError::NothingSelected { .. })
        ));
    }

    #[test]
    fn renders_the_mco_bootstrap_configs() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/testdata/mco/bootstrap");
        let read = |f: &str| -> Value { yaml_serde::from_str(&std::fs::read_to_string(dir.join(f)).unwrap()).unwrap() };
        let p: MachineConfigPool = serde_json::from_value(read("worker.machineconfigpool.yaml")).unwrap();
        let mcs: Vec<MachineConfig> =
            ["99_openshift-machineconfig_worker.yaml", "99_openshift-machineconfig_master.yaml"]
                .iter()
                .map(|f| serde_json::from_value(read(f)).unwrap())
                .collect();
        let r = render(&p, &mcs, None).unwrap();
        assert_eq!(r.sources.len(), 1, "only the worker config");
        assert_eq!(
            r.machine_config.spec.config["passwd"]["users"][0]["sshAuthorizedKeys"][0],
            "ssh-rsa SSH-AUTHORIZED-KEY"
        );
        assert_eq!(render(&p, &mcs, None).unwrap().machine_config.metadata.name, r.machine_config.metadata.name);
    }
}
