//! Reading YAML as Kubernetes clients do. yaml_serde follows YAML 1.2, where an unquoted `0644` is
//! a string; kubectl, `oc` and the API server read YAML 1.1, where it is the octal number 420.
//! OpenShift's own MachineConfigs write file modes that way, so a `mode` written as a 1.1 octal
//! literal is read as the number it means. Only `mode` keys are touched: a quoted "0644"
//! elsewhere stays a string.

use serde_json::Value;

/// Rewrite `mode: "0644"`-style values (YAML 1.1 octal, also `0o644`) into numbers, recursively.
pub fn octal_modes(v: &mut Value) {
    match v {
        Value::Object(m) => {
            for (k, x) in m.iter_mut() {
                if k == "mode" {
                    if let Some(n) = x.as_str().and_then(parse_octal) {
                        *x = Value::from(n);
                        continue;
                    }
                }
                octal_modes(x);
            }
        }
        Value::Array(a) => a.iter_mut().for_each(octal_modes),
        _ => {}
    }
}

fn parse_octal(s: &str) -> Option<u64> {
    let digits = s.strip_prefix("0o").or_else(|| s.strip_prefix('0').filter(|d| !d.is_empty()))?;
    if digits.is_empty() || !digits.bytes().all(|b| (b'0'..=b'7').contains(&b)) {
        return None;
    }
    u64::from_str_radix(digits, 8).ok()
}

/// One YAML document into JSON, with 1.1 octal modes.
pub fn from_str(text: &str) -> Result<Value, yaml_serde::Error> {
    let mut v: Value = yaml_serde::from_str(text)?;
    octal_modes(&mut v);
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_read_as_yaml_1_1() {
        let v = from_str("spec:\n  files:\n  - path: /a\n    mode: 0644\n  - path: /b\n    mode: 420\n  - path: /c\n    mode: 0o755\nlabels:\n  zip: \"0644\"\n").unwrap();
        assert_eq!(v["spec"]["files"][0]["mode"], 420);
        assert_eq!(v["spec"]["files"][1]["mode"], 420);
        assert_eq!(v["spec"]["files"][2]["mode"], 493);
        assert_eq!(v["labels"]["zip"], "0644", "only mode keys");
        let mut bad = serde_json::json!({"mode": "0899"});
        octal_modes(&mut bad);
        assert_eq!(bad["mode"], "0899", "not octal: left for validation to refuse");
    }
}
