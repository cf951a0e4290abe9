//! Admission: what an object must satisfy before it is stored. Every failure is a field path and a
//! message (HTTP 422), and nothing is stored.

use super::error::cause;
use crate::resources::ResourceType;
use aloft_api::{IntOrString, MachineConfig, MachineConfigPool, Node, StatusCause};
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
fn typed<T: serde::de::DeserializeOwned>(obj: &Value, out: &mut Vec<StatusCause>) -> Option<T> {
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
    let field = "spec.maxUnavailable";
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
    fn type_errors_name_the_field() {
        let mc = serde_json::json!({"apiVersion": "machineconfiguration.openshift.io/v1", "kind": "MachineConfig",
            "metadata": {"name": "x"}, "spec": {"kernelArguments": "nosmt"}});
        let causes = object_causes(&crate::resources::MACHINE_CONFIG, &mc);
        assert_eq!(causes.len(), 1);
        assert_eq!(causes[0].field, "spec.kernelArguments");
        assert!(causes[0].message.contains("expected a sequence"), "{}", causes[0].message);
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
