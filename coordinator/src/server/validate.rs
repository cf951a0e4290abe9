//! Admission: what an object must satisfy before it is stored. Every failure is a field path and a
//! message (HTTP 422), and nothing is stored.

use super::error::cause;
use crate::resources::ResourceType;
use aloft_api::{IntOrString, MachineConfig, MachineConfigPool, Node, NodeDisruptionBudget, StatusCause};
use serde_json::Value;

/// DNS-1123 subdomain: what Kubernetes requires of most object names.
pub fn name_causes(name: &str) -> Vec<StatusCause> {
    let field = "metadata.name";
    if name.is_empty() {
        return vec![cause(field, "FieldValueRequired", "name or generateName is required")];
    }
    let mut out = Vec::new();
    if name.len() > 253 {
        out.push(cause(field, "FieldValueInvalid", "must be no more than 253 characters"));
    }
    let ok_label = |l: &str| {
        let b = l.as_bytes();
        !b.is_empty()
            && b[0].is_ascii_alphanumeric()
            && b[b.len() - 1].is_ascii_alphanumeric()
            && b.iter().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
    };
    if !name.split('.').all(ok_label) {
        out.push(cause(
            field,
            "FieldValueInvalid",
            format!(
                "Invalid value: {name:?}: a lowercase RFC 1123 subdomain must consist of lower case alphanumeric \
                 characters, '-' or '.', and must start and end with an alphanumeric character"
            ),
        ));
    }
    out
}

/// Read the object as its type; a wrong type anywhere is a cause at that field's path.
/// Read plainly first: tracking the path of every field costs about as much again, and only an
/// invalid object needs it (every agent report goes through here).
fn typed<T: serde::de::DeserializeOwned>(obj: &Value, out: &mut Vec<StatusCause>) -> Option<T> {
    if let Ok(t) = <T as serde::Deserialize>::deserialize(obj) {
        return Some(t);
    }
    match serde_path_to_error::deserialize::<_, T>(obj) {
        Ok(t) => Some(t),
        Err(e) => {
            let field = e.path().to_string();
            let field = if field == "." { String::new() } else { field };
            out.push(cause(&field, "FieldValueInvalid", e.into_inner().to_string()));
            None
        }
    }
}

fn selector_causes(sel: &Option<aloft_api::LabelSelector>, field: &str, out: &mut Vec<StatusCause>) {
    if let Some(s) = sel {
        if let Err(e) = s.to_selector() {
            out.push(cause(field, "FieldValueInvalid", e.to_string()));
        }
    }
}

fn max_unavailable_causes(mu: &Option<IntOrString>, out: &mut Vec<StatusCause>) {
    int_or_percent_causes(mu, "spec.maxUnavailable", out)
}

/// An int >= 0 or a percentage `0%`..`100%`.
fn int_or_percent_causes(mu: &Option<IntOrString>, field: &str, out: &mut Vec<StatusCause>) {
    match mu {
        Some(IntOrString::Int(n)) if *n < 0 => out.push(cause(field, "FieldValueInvalid", format!("{n} must be >= 0"))),
        Some(IntOrString::String(s)) => {
            let ok = s.strip_suffix('%').and_then(|p| p.parse::<u32>().ok()).is_some_and(|p| p <= 100);
            if !ok {
                out.push(cause(
                    field,
                    "FieldValueInvalid",
                    format!("{s:?} must be an integer or a percentage such as \"10%\""),
                ));
            }
        }
        _ => {}
    }
}

/// A count that must be >= `min` when set.
fn count_causes(v: Option<i64>, field: &str, min: i64, out: &mut Vec<StatusCause>) {
    if let Some(n) = v.filter(|n| *n < min) {
        out.push(cause(field, "FieldValueInvalid", format!("{n} must be >= {min}")));
    }
}

/// `spec.rollout` and `spec.drain`, aloft's extensions of the pool.
fn pool_extension_causes(p: &MachineConfigPool, out: &mut Vec<StatusCause>) {
    if let Some(r) = &p.spec.rollout {
        count_causes(r.canary, "spec.rollout.canary", 0, out);
        count_causes(r.soak_seconds, "spec.rollout.soakSeconds", 0, out);
        count_causes(r.max_failures, "spec.rollout.maxFailures", 0, out);
    }
    if let Some(d) = &p.spec.drain {
        count_causes(d.timeout_seconds, "spec.drain.timeoutSeconds", 1, out);
        for (i, h) in d.hooks.iter().enumerate() {
            let field = format!("spec.drain.hooks[{i}].url");
            match reqwest::Url::parse(&h.url) {
                Ok(u) if matches!(u.scheme(), "http" | "https") && u.host_str().is_some() => {}
                Ok(u) => out.push(cause(
                    &field,
                    "FieldValueInvalid",
                    format!("{:?}: scheme {:?} is not supported (want http or https)", h.url, u.scheme()),
                )),
                Err(e) => out.push(cause(&field, "FieldValueInvalid", format!("{:?}: {e}", h.url))),
            }
            count_causes(h.timeout_seconds, &format!("spec.drain.hooks[{i}].timeoutSeconds"), 1, out);
        }
    }
}

/// NodeDisruptionBudget: a valid selector, exactly one of minAvailable / maxUnavailable, valid
/// label keys to group by.
fn budget_causes(b: &NodeDisruptionBudget, out: &mut Vec<StatusCause>) {
    if let Err(e) = b.spec.selector.to_selector() {
        out.push(cause("spec.selector", "FieldValueInvalid", e.to_string()));
    }
    match (&b.spec.min_available, &b.spec.max_unavailable) {
        (Some(_), Some(_)) => out.push(cause(
            "spec",
            "FieldValueInvalid",
            "minAvailable and maxUnavailable are mutually exclusive: set one of them",
        )),
        (None, None) => {
            out.push(cause("spec", "FieldValueRequired", "one of minAvailable or maxUnavailable is required"))
        }
        _ => {}
    }
    int_or_percent_causes(&b.spec.min_available, "spec.minAvailable", out);
    int_or_percent_causes(&b.spec.max_unavailable, "spec.maxUnavailable", out);
    for (i, k) in b.spec.group_by.iter().enumerate() {
        let ok = !k.is_empty()
            && k.len() <= 316
            && k.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/'));
        if !ok {
            out.push(cause(&format!("spec.groupBy[{i}]"), "FieldValueInvalid", format!("{k:?} is not a label key")));
        }
    }
}

/// Whether `next`, an update of `stored`, needs no check beyond this one: it differs from
/// `stored` only in `metadata.annotations`, each of which is a string, and in the fields the
/// server keeps (resourceVersion, generation). Fields an update leaves as they
/// were are not checked again, as Kubernetes' validation ratcheting does. Every agent report
/// is such an update; checking the whole Node for each was ~4% of the API threads' time in a
/// 10,000-node rollout.
pub fn only_annotations_changed(stored: &Value, next: &Value) -> bool {
    use super::objects::equal_except;
    let (Some(old), Some(new)) = (stored.get("metadata"), next.get("metadata")) else { return false };
    let annotations_are_strings = match new.get("annotations") {
        None | Some(Value::Null) => true,
        Some(Value::Object(m)) => m.values().all(Value::is_string),
        Some(_) => false,
    };
    annotations_are_strings
        && equal_except(old, new, &["annotations", "resourceVersion", "generation"])
        && equal_except(stored, next, &["metadata"])
}

/// Kind-specific checks.
pub fn object_causes(r: &ResourceType, obj: &Value) -> Vec<StatusCause> {
    let mut out = Vec::new();
    match r.kind {
        "MachineConfig" => {
            if let Some(mc) = typed::<MachineConfig>(obj, &mut out) {
                if let Err(e) = aloft_api::ignition::parse_config(&mc.spec.config) {
                    out.push(cause(&e.field(), "FieldValueInvalid", e.to_string()));
                }
                if let Err(errs) = aloft_api::reconcile::validate_for_day2(&mc.spec) {
                    for e in errs {
                        out.push(cause(&e.field, "FieldValueInvalid", e.message));
                    }
                }
            }
        }
        "MachineConfigPool" => {
            if let Some(p) = typed::<MachineConfigPool>(obj, &mut out) {
                selector_causes(&p.spec.machine_config_selector, "spec.machineConfigSelector", &mut out);
                selector_causes(&p.spec.node_selector, "spec.nodeSelector", &mut out);
                max_unavailable_causes(&p.spec.max_unavailable, &mut out);
                pool_extension_causes(&p, &mut out);
            }
        }
        "NodeDisruptionBudget" => {
            if let Some(b) = typed::<NodeDisruptionBudget>(obj, &mut out) {
                budget_causes(&b, &mut out);
            }
        }
        "Node" => {
            typed::<Node>(obj, &mut out);
        }
        _ => {}
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_an_annotation_change_skips_the_whole_check() {
        use serde_json::json;
        let stored = json!({"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": "a", "resourceVersion": "5", "labels": {"x": "1"}, "annotations": {"k": "v"}},
            "spec": {"unschedulable": false}, "status": {"conditions": []}});
        let with = |f: &dyn Fn(&mut Value)| {
            let mut v = stored.clone();
            f(&mut v);
            v
        };
        let cases: Vec<(&str, Value, bool)> = vec![
            ("an annotation changed", with(&|v| v["metadata"]["annotations"]["k"] = json!("w")), true),
            (
                "one added, the revision moved",
                with(&|v| {
                    v["metadata"]["annotations"]["n"] = json!("1");
                    v["metadata"]["resourceVersion"] = json!("6");
                }),
                true,
            ),
            (
                "annotations removed",
                with(&|v| {
                    v["metadata"].as_object_mut().unwrap().remove("annotations");
                }),
                true,
            ),
            ("an annotation that is not a string", with(&|v| v["metadata"]["annotations"]["k"] = json!(1)), false),
            ("annotations that are not a map", with(&|v| v["metadata"]["annotations"] = json!("k=v")), false),
            ("a label changed", with(&|v| v["metadata"]["labels"]["x"] = json!("2")), false),
            ("managedFields set", with(&|v| v["metadata"]["managedFields"] = json!("all")), false),
            ("the spec changed", with(&|v| v["spec"]["unschedulable"] = json!("yes")), false),
            ("the status changed", with(&|v| v["status"]["conditions"] = json!("none")), false),
            (
                "metadata gone",
                with(&|v| {
                    v.as_object_mut().unwrap().remove("metadata");
                }),
                false,
            ),
        ];
        for (what, next, skip) in cases {
            assert_eq!(only_annotations_changed(&stored, &next), skip, "{what}");
            if !skip {
                continue;
            }
            // Whatever skips the check passes it.
            assert!(object_causes(&crate::resources::NODE, &next).is_empty(), "{what}");
        }
        // The changes that do not skip it, and are wrong, are caught by it.
        for bad in [
            with(&|v| v["metadata"]["annotations"]["k"] = json!(1)),
            with(&|v| v["spec"]["unschedulable"] = json!("yes")),
            with(&|v| v["metadata"]["labels"]["x"] = json!(2)),
        ] {
            assert!(!object_causes(&crate::resources::NODE, &bad).is_empty(), "{bad}");
        }
    }

    #[test]
    fn type_errors_name_the_field() {
        let mc = serde_json::json!({"apiVersion": "machineconfiguration.openshift.io/v1", "kind": "MachineConfig",
            "metadata": {"name": "x"}, "spec": {"kernelArguments": "nosmt"}});
        let causes = object_causes(&crate::resources::MACHINE_CONFIG, &mc);
        assert_eq!(causes.len(), 1);
        assert_eq!(causes[0].field, "spec.kernelArguments");
        assert!(causes[0].message.contains("expected a sequence"), "{}", causes[0].message);
    }

    #[test]
    fn budgets_and_pool_extensions() {
        let ndb = |spec: serde_json::Value| {
            let obj = serde_json::json!({"apiVersion": "aloft.dev/v1", "kind": "NodeDisruptionBudget",
                "metadata": {"name": "b"}, "spec": spec});
            let mut fields: Vec<String> =
                object_causes(&crate::resources::NODE_DISRUPTION_BUDGET, &obj).into_iter().map(|c| c.field).collect();
            fields.sort();
            fields
        };
        assert!(ndb(
            serde_json::json!({"selector": {"matchLabels": {"app": "db"}}, "minAvailable": "50%", "groupBy": ["zone"]})
        )
        .is_empty());
        assert_eq!(ndb(serde_json::json!({"minAvailable": 1, "maxUnavailable": 1})), vec!["spec"]);
        assert_eq!(ndb(serde_json::json!({})), vec!["spec"]);
        assert_eq!(ndb(serde_json::json!({"maxUnavailable": "150%"})), vec!["spec.maxUnavailable"]);
        assert_eq!(ndb(serde_json::json!({"minAvailable": -1})), vec!["spec.minAvailable"]);
        assert_eq!(
            ndb(
                serde_json::json!({"maxUnavailable": 1, "selector": {"matchExpressions": [{"key": "a", "operator": "Near"}]}})
            ),
            vec!["spec.selector"]
        );
        assert_eq!(ndb(serde_json::json!({"maxUnavailable": 1, "groupBy": ["a b"]})), vec!["spec.groupBy[0]"]);
        let pool = |spec: serde_json::Value| {
            let obj = serde_json::json!({"apiVersion": "machineconfiguration.openshift.io/v1", "kind": "MachineConfigPool",
                "metadata": {"name": "worker"}, "spec": spec});
            let mut fields: Vec<String> =
                object_causes(&crate::resources::MACHINE_CONFIG_POOL, &obj).into_iter().map(|c| c.field).collect();
            fields.sort();
            fields
        };
        assert!(pool(serde_json::json!({"rollout": {"canary": 1, "soakSeconds": 600, "maxFailures": 0},
            "drain": {"timeoutSeconds": 3600, "hooks": [{"url": "http://127.0.0.1:9/lb", "timeoutSeconds": 5}]}}))
        .is_empty());
        assert_eq!(
            pool(
                serde_json::json!({"rollout": {"canary": -1}, "drain": {"timeoutSeconds": 0, "hooks": [{"url": "ftp://x/"}, {"url": "http://x/", "timeoutSeconds": 0}]}})
            ),
            vec![
                "spec.drain.hooks[0].url",
                "spec.drain.hooks[1].timeoutSeconds",
                "spec.drain.timeoutSeconds",
                "spec.rollout.canary"
            ]
        );
        assert_eq!(pool(serde_json::json!({"rollout": {"canary": "two"}})), vec!["spec.rollout.canary"]);
    }

    #[test]
    fn names() {
        for good in ["worker", "99-worker-ssh", "rendered-worker-0a1b", "a.b.c", "n1"] {
            assert!(name_causes(good).is_empty(), "{good}");
        }
        for bad in ["", "Worker", "-a", "a-", "a..b", "a_b", "a/b", "../etc", &"x".repeat(254)] {
            assert!(!name_causes(bad).is_empty(), "{bad}");
        }
    }
}
