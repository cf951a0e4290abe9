//! Test helpers: MCO's fixtures under shared/testdata/mco, and OpenShift template processing for
//! the e2e templates among them.

use serde_json::Value;
use std::path::{Path, PathBuf};

pub fn testdata(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/testdata/mco").join(rel)
}

pub fn yaml(rel: &str) -> Value {
    yaml_serde::from_str(&std::fs::read_to_string(testdata(rel)).unwrap()).unwrap()
}

/// OpenShift template processing of the template's first object: `${X}` inside strings (and keys)
/// is text substitution, a string that is exactly `${{X}}` becomes the JSON value of X. Parameters
/// not given take the template's default value.
pub fn template(rel: &str, params: &[(&str, &str)]) -> Value {
    template_objects(rel, params).swap_remove(0)
}

/// Every object of a template, processed as [`template`] does.
pub fn template_objects(rel: &str, params: &[(&str, &str)]) -> Vec<Value> {
    let t = yaml(rel);
    let mut values: Vec<(String, String)> = Vec::new();
    for p in t["parameters"].as_array().into_iter().flatten() {
        let name = p["name"].as_str().unwrap().to_string();
        let given = params.iter().find(|(k, _)| *k == name).map(|(_, v)| v.to_string());
        let default = p.get("value").and_then(Value::as_str).map(|s| s.trim().to_string());
        let value = given.or(default).unwrap_or_else(|| panic!("parameter {name} not given"));
        values.push((name, value));
    }
    fn subst(s: &str, values: &[(String, String)]) -> String {
        let mut out = s.to_string();
        for (k, v) in values {
            out = out.replace(&format!("${{{k}}}"), v);
        }
        out
    }
    fn walk(v: &Value, values: &[(String, String)]) -> Value {
        match v {
            Value::String(s) => {
                for (k, val) in values {
                    if s == &format!("${{{{{k}}}}}") {
                        return serde_json::from_str(val).unwrap();
                    }
                }
                Value::String(subst(s, values))
            }
            Value::Array(a) => Value::Array(a.iter().map(|x| walk(x, values)).collect()),
            Value::Object(m) => Value::Object(m.iter().map(|(k, x)| (subst(k, values), walk(x, values))).collect()),
            other => other.clone(),
        }
    }
    t["objects"].as_array().into_iter().flatten().map(|o| walk(o, &values)).collect()
}
