//! Writing JSON as YAML that reads back the same in a YAML 1.1 reader. kubectl, `oc` and Go's
//! YAML libraries read YAML 1.1, where a plain `yes`, `on`, `off`, `y`, `2001-01-01` or `1:20`
//! is a boolean, a date or a number; yaml_serde writes YAML 1.2 and leaves such strings plain, so
//! an object saved with `aloftctl get -o yaml` (or an API answer in YAML) and applied again with
//! kubectl failed ("cannot unmarshal bool into ... of type string") or changed its data.
//!
//! The rule is the safe side of both versions: a string is written plain only when it starts with
//! a letter, `_` or `/`, holds nothing but ASCII letters, digits and `_-./`, and is not one of
//! YAML 1.1's boolean and null words; every other string is double-quoted with JSON's escapes
//! (valid YAML escapes), the few characters YAML does not take as they are escaped too.

use serde_json::{Map, Value};

/// `v` as a YAML document (block style, two-space indentation, sequences under a key at the
/// key's indentation, as kubectl writes them).
pub fn to_string(v: &Value) -> String {
    let mut out = String::new();
    match v {
        Value::Object(m) if !m.is_empty() => map(&mut out, m, 0),
        Value::Array(a) if !a.is_empty() => seq(&mut out, a, 0),
        other => {
            out.push_str(&scalar(other));
            out.push('\n');
        }
    }
    out
}

fn pad(out: &mut String, indent: usize) {
    out.extend(std::iter::repeat_n(' ', indent));
}

fn map(out: &mut String, m: &Map<String, Value>, indent: usize) {
    for (k, v) in m {
        pad(out, indent);
        entry(out, k, v, indent);
    }
}

/// `key: value` from where the line's indentation ends.
fn entry(out: &mut String, k: &str, v: &Value, indent: usize) {
    out.push_str(&string(k));
    out.push(':');
    match v {
        Value::Object(m) if !m.is_empty() => {
            out.push('\n');
            map(out, m, indent + 2);
        }
        Value::Array(a) if !a.is_empty() => {
            out.push('\n');
            seq(out, a, indent);
        }
        _ => {
            out.push(' ');
            out.push_str(&scalar(v));
            out.push('\n');
        }
    }
}

fn seq(out: &mut String, a: &[Value], indent: usize) {
    for item in a {
        pad(out, indent);
        out.push('-');
        match item {
            Value::Object(m) if !m.is_empty() => {
                out.push(' ');
                for (i, (k, v)) in m.iter().enumerate() {
                    if i > 0 {
                        pad(out, indent + 2);
                    }
                    entry(out, k, v, indent + 2);
                }
            }
            Value::Array(inner) if !inner.is_empty() => {
                out.push('\n');
                seq(out, inner, indent + 2);
            }
            _ => {
                out.push(' ');
                out.push_str(&scalar(item));
                out.push('\n');
            }
        }
    }
}

fn scalar(v: &Value) -> String {
    match v {
        Value::Null => "null".into(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => number(n),
        Value::String(s) => string(s),
        Value::Object(_) => "{}".into(),
        Value::Array(_) => "[]".into(),
    }
}

/// A number as both YAML 1.1 and 1.2 read it: JSON's `1e100` has no `.` and no exponent sign,
/// which YAML 1.1's float needs (PyYAML read it as a string), so it is written `1.0e+100`.
fn number(n: &serde_json::Number) -> String {
    let text = n.to_string();
    let Some((mantissa, exponent)) = text.split_once(['e', 'E']) else { return text };
    let dot = if mantissa.contains('.') { "" } else { ".0" };
    let sign = if exponent.starts_with(['-', '+']) { "" } else { "+" };
    format!("{mantissa}{dot}e{sign}{exponent}")
}

/// A string, plain when no reader can take it for anything else, else double-quoted.
fn string(s: &str) -> String {
    if plain(s) {
        return s.to_string();
    }
    let json = serde_json::to_string(s).unwrap_or_else(|_| "\"\"".into());
    // What YAML does not take unescaped, and JSON leaves as it is: DEL, the C1 controls
    // (U+0085 is a line break to YAML 1.1), the BOM and the Unicode line separators.
    json.chars()
        .map(|c| match c {
            '\u{7f}'..='\u{9f}' | '\u{feff}' | '\u{2028}' | '\u{2029}' | '\u{fffe}' | '\u{ffff}' => {
                format!("\\u{:04x}", c as u32)
            }
            c => c.to_string(),
        })
        .collect()
}

fn plain(s: &str) -> bool {
    let Some(first) = s.chars().next() else { return false };
    (first.is_ascii_alphabetic() || first == '_' || first == '/')
        && s.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | '/'))
        && !matches!(
            s.to_ascii_lowercase().as_str(),
            "y" | "n" | "yes" | "no" | "on" | "off" | "true" | "false" | "null"
        )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Strings a YAML 1.1 reader would take for a boolean, a null, a number or a date are
    /// quoted; what reads the same everywhere stays plain; everything reads back as it was.
    #[test]
    fn what_yaml_1_1_reads_as_another_type_is_quoted_and_everything_round_trips() {
        let tricky = [
            "yes",
            "Yes",
            "NO",
            "on",
            "Off",
            "y",
            "N",
            "true",
            "null",
            "~",
            "",
            " lead",
            "trail ",
            "2001-01-01",
            "2001-12-14t21:59:43.10-05:00",
            "1:20",
            "1_000",
            "0o17",
            "0x1F",
            "017",
            "1e3",
            ".inf",
            ".NaN",
            "-",
            "- x",
            "a: b",
            "#c",
            "x #y",
            "@at",
            "`tick",
            "!tag",
            "&anchor",
            "*alias",
            "%pct",
            "{a}",
            "[a]",
            "'q'",
            "\"dq\"",
            "multi\nline",
            "tab\there",
            "nel\u{85}",
            "bom\u{feff}",
            "ünïcode",
            "ls\u{2028}",
        ];
        for s in tricky {
            let text = to_string(&json!({ "k": s }));
            assert!(text.starts_with("k: \""), "{s:?} must be quoted: {text}");
            let back: Value = yaml_serde::from_str(&text).unwrap_or_else(|e| panic!("{s:?}: {e}: {text}"));
            assert_eq!(back["k"], s, "{text}");
        }
        for s in ["worker", "rendered-worker-0a1b", "machineconfiguration.openshift.io/role", "/etc/chrony.conf", "_x"]
        {
            assert_eq!(to_string(&json!({ "k": s })), format!("k: {s}\n"));
        }
    }

    /// Floats keep a `.` and a signed exponent (YAML 1.1's float), integers stay as they are,
    /// and each reads back as the number it was.
    #[test]
    fn numbers_read_as_numbers_in_yaml_1_1_too() {
        for (n, written) in [
            (json!(1e100), "1.0e+100"),
            (json!(1.5e-7), "1.5e-7"),
            (json!(-2.5e300), "-2.5e+300"),
            (json!(0.25), "0.25"),
            (json!(42), "42"),
            (json!(-7), "-7"),
            (json!(u64::MAX), "18446744073709551615"),
        ] {
            let text = to_string(&json!({ "k": n }));
            assert_eq!(text, format!("k: {written}\n"));
            let back: Value = yaml_serde::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
            assert_eq!(back["k"].as_f64(), n.as_f64(), "{text}");
        }
    }

    #[test]
    fn a_whole_object_reads_back_the_same() {
        let node = json!({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": "worker-0", "labels": {"node-role.kubernetes.io/worker": "", "zone": "on"},
                "annotations": {"machineconfiguration.openshift.io/state": "Done", "k": "2001-01-01"}, "finalizers": []},
            "spec": {"taints": [{"key": "a", "effect": "NoSchedule"}, {}], "podCIDRs": ["10.0.0.0/24"], "unschedulable": true},
            "status": {"conditions": [{"type": "Ready", "status": "True", "n": 3, "f": 1.5, "z": null}],
                "nested": [[1, 2], [], [{"a": [3]}]], "empty": {}},
        });
        let text = to_string(&node);
        let back: Value = yaml_serde::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
        assert_eq!(back, node, "{text}");
        assert!(text.contains("  annotations:\n    k: \"2001-01-01\"\n"), "{text}");
        assert!(text.contains("  taints:\n  - effect: NoSchedule\n    key: a\n  - {}\n"), "{text}");
        assert_eq!(to_string(&json!("yes")), "\"yes\"\n");
        assert_eq!(to_string(&json!([])), "[]\n");
    }
}
