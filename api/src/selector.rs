//! Label selectors: the structured `LabelSelector` of pool specs and the string form of the
//! `labelSelector` query parameter (`a=b,c!=d,e in (x,y),f notin (z),g,!h`), both reduced to one
//! list of requirements so that matching has a single implementation.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// `metav1.LabelSelector`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LabelSelector {
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub match_labels: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub match_expressions: Vec<LabelSelectorRequirement>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LabelSelectorRequirement {
    pub key: String,
    pub operator: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub values: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SelectorError {
    #[error("invalid label selector {selector:?}: {message}")]
    Parse { selector: String, message: String },
    #[error("matchExpressions[{index}].operator: unsupported operator {operator:?} (want In, NotIn, Exists or DoesNotExist)")]
    Operator { index: usize, operator: String },
    #[error("matchExpressions[{index}].values: {message}")]
    Values { index: usize, message: String },
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Op {
    In(Vec<String>),
    NotIn(Vec<String>),
    Exists,
    DoesNotExist,
    /// `key>N` / `key<N` (string form only, as Kubernetes' `selection.GreaterThan`/`LessThan`):
    /// the label's value, read as an integer, is greater / less than N.
    Gt(i64),
    Lt(i64),
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Requirement {
    key: String,
    op: Op,
}

impl Requirement {
    fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        let v = labels.get(&self.key);
        match &self.op {
            Op::In(vals) => v.is_some_and(|v| vals.contains(v)),
            Op::NotIn(vals) => v.is_none_or(|v| !vals.contains(v)),
            Op::Exists => v.is_some(),
            Op::DoesNotExist => v.is_none(),
            // A value that is no integer matches neither, as in Kubernetes.
            Op::Gt(n) => v.and_then(|v| v.parse::<i64>().ok()).is_some_and(|v| v > *n),
            Op::Lt(n) => v.and_then(|v| v.parse::<i64>().ok()).is_some_and(|v| v < *n),
        }
    }
}

/// A compiled selector. The empty selector matches everything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Selector {
    reqs: Vec<Requirement>,
}

impl Selector {
    pub fn everything() -> Self {
        Selector::default()
    }

    pub fn is_empty(&self) -> bool {
        self.reqs.is_empty()
    }

    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.reqs.iter().all(|r| r.matches(labels))
    }

    /// Parse the string form used by `?labelSelector=` and `kubectl -l`.
    pub fn parse(s: &str) -> Result<Selector, SelectorError> {
        let err = |m: &str| SelectorError::Parse { selector: s.to_string(), message: m.to_string() };
        let mut reqs = Vec::new();
        if s.trim().is_empty() {
            return Ok(Selector { reqs });
        }
        // An empty term is an error, as in Kubernetes' parser: `-l ','` (or `a=x,`) was read as
        // no requirement, and selected every object for a `delete -l`.
        let terms = split_terms(s);
        for (i, term) in terms.iter().enumerate() {
            let term = term.trim();
            if term.is_empty() {
                return Err(err(if i == 0 {
                    "found ',', expected: !, identifier, or 'end of string'"
                } else if i + 1 == terms.len() {
                    "found '', expected: identifier after ','"
                } else {
                    "found ',', expected: identifier after ','"
                }));
            }
            let req = if let Some(key) = term.strip_prefix('!') {
                Requirement { key: check_key(key.trim()).map_err(|m| err(&m))?, op: Op::DoesNotExist }
            } else if let Some((k, v)) = term.split_once("!=") {
                Requirement {
                    key: check_key(k.trim()).map_err(|m| err(&m))?,
                    op: Op::NotIn(vec![check_value(v.trim()).map_err(|m| err(&m))?]),
                }
            } else if let Some((k, v)) = term.split_once("==").or_else(|| term.split_once('=')) {
                Requirement {
                    key: check_key(k.trim()).map_err(|m| err(&m))?,
                    op: Op::In(vec![check_value(v.trim()).map_err(|m| err(&m))?]),
                }
            } else if let Some((k, op, v)) = term
                .split_once('>')
                .map(|(k, v)| (k, '>', v))
                .or_else(|| term.split_once('<').map(|(k, v)| (k, '<', v)))
            {
                let n = v
                    .trim()
                    .parse::<i64>()
                    .map_err(|_| err(&format!("for '{op}', the value must be an integer, got {:?}", v.trim())))?;
                let key = check_key(k.trim()).map_err(|m| err(&m))?;
                Requirement { key, op: if op == '>' { Op::Gt(n) } else { Op::Lt(n) } }
            } else if let Some((k, rest)) = split_set_op(term) {
                let (negate, rest) = rest;
                let inner = rest
                    .trim()
                    .strip_prefix('(')
                    .and_then(|r| r.strip_suffix(')'))
                    .ok_or_else(|| err("a set must be written as (v1,v2)"))?;
                if inner.trim().is_empty() {
                    // Kubernetes' words; read as one empty value, `in ()` matched `k=""`.
                    return Err(err("for 'in', 'notin' operators, values set can't be empty"));
                }
                let mut vals = Vec::new();
                for v in inner.split(',') {
                    vals.push(check_value(v.trim()).map_err(|m| err(&m))?);
                }
                let key = check_key(k.trim()).map_err(|m| err(&m))?;
                Requirement { key, op: if negate { Op::NotIn(vals) } else { Op::In(vals) } }
            } else {
                Requirement { key: check_key(term).map_err(|m| err(&m))?, op: Op::Exists }
            };
            reqs.push(req);
        }
        Ok(Selector { reqs })
    }
}

/// Split on commas that are not inside parentheses.
fn split_terms(s: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let (mut depth, mut start) = (0i32, 0usize);
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                out.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&s[start..]);
    out
}

/// `key in (...)` / `key notin (...)`: returns (key, (negated, rest)).
fn split_set_op(term: &str) -> Option<(&str, (bool, &str))> {
    // `key in (a,b)`, `key notin(a)`: the operator is a word after the key, and the set may
    // follow it without a space, as Kubernetes' lexer takes `(` as a token of its own.
    let open = term.find('(')?;
    let head = term[..open].trim_end();
    for (word, negate) in [("notin", true), ("in", false)] {
        if let Some(key) = head.strip_suffix(word).filter(|k| k.ends_with(char::is_whitespace)) {
            return Some((key, (negate, &term[open..])));
        }
    }
    None
}

fn check_key(k: &str) -> Result<String, String> {
    if k.is_empty() {
        return Err("empty label key".into());
    }
    let (prefix, name) = match k.rsplit_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, k),
    };
    if let Some(p) = prefix {
        if p.is_empty() || p.len() > 253 || !p.split('.').all(is_dns_label) {
            return Err(format!("label key prefix {p:?} must be a DNS subdomain"));
        }
    }
    if name.is_empty() || name.len() > 63 || !is_label_name(name) {
        return Err(format!("label key {k:?} is not a valid label name"));
    }
    Ok(k.to_string())
}

fn check_value(v: &str) -> Result<String, String> {
    if v.len() > 63 || !(v.is_empty() || is_label_name(v)) {
        return Err(format!("label value {v:?} is not valid"));
    }
    Ok(v.to_string())
}

fn is_label_name(s: &str) -> bool {
    let b = s.as_bytes();
    b.first().is_some_and(u8::is_ascii_alphanumeric)
        && b.last().is_some_and(u8::is_ascii_alphanumeric)
        && b.iter().all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
}

/// Whether `s` is an RFC 1123 label as Kubernetes requires of a label key's prefix parts and of
/// a namespace's name: lowercase letters, digits and '-', at most 63 characters, starting and
/// ending with a letter or digit.
pub fn is_dns_label(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
        && b.iter().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
}

const NAME_RULE: &str =
    "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";

/// Why `key` is not a label key, in Kubernetes' words (`IsQualifiedName`): an optional DNS-1123
/// subdomain prefix of at most 253 characters and `/`, then a name of at most 63 characters.
/// Empty when it is one.
pub fn label_key_errors(key: &str) -> Vec<String> {
    let mut out = Vec::new();
    let parts: Vec<&str> = key.split('/').collect();
    let name = match parts.as_slice() {
        [name] => *name,
        [prefix, name] => {
            if prefix.is_empty() {
                out.push("prefix part must be non-empty".to_string());
            } else if prefix.len() > 253 {
                out.push("prefix part must be no more than 253 characters".to_string());
            } else if !prefix.split('.').all(is_dns_label) {
                out.push(
                    "prefix part a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, \
                     '-' or '.', and must start and end with an alphanumeric character"
                        .to_string(),
                );
            }
            name
        }
        _ => {
            out.push(format!(
                "a qualified name {NAME_RULE}, with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"
            ));
            return out;
        }
    };
    if name.is_empty() {
        out.push("name part must be non-empty".to_string());
    } else if name.len() > 63 {
        out.push("name part must be no more than 63 characters".to_string());
    }
    if !name.is_empty() && !is_label_name(name) {
        out.push(format!("name part {NAME_RULE}"));
    }
    out
}

/// Why `value` is not a label value, in Kubernetes' words (`IsValidLabelValue`): at most 63
/// characters, empty or a name. Empty when it is one.
pub fn label_value_errors(value: &str) -> Vec<String> {
    let mut out = Vec::new();
    if value.len() > 63 {
        out.push("must be no more than 63 characters".to_string());
    }
    if !value.is_empty() && !is_label_name(value) {
        out.push(format!("a valid label must be an empty string or {NAME_RULE}"));
    }
    out
}

/// Kubernetes' `ValidateLabels`: every key and value of a label map, as errors at `field`
/// (`metadata.labels: Invalid value: "bad key!": name part must ...`).
pub fn labels_errors<'a>(
    labels: impl IntoIterator<Item = (&'a String, &'a String)>,
    field: &str,
) -> Vec<crate::reconcile::FieldError> {
    let mut out = Vec::new();
    for (k, v) in labels {
        for m in label_key_errors(k) {
            out.push(invalid(field, k, &m));
        }
        for m in label_value_errors(v) {
            out.push(invalid(field, v, &m));
        }
    }
    out
}

fn invalid(field: &str, value: &str, message: &str) -> crate::reconcile::FieldError {
    crate::reconcile::FieldError { field: field.to_string(), message: format!("Invalid value: {value:?}: {message}") }
}

impl LabelSelector {
    /// Compile; an unknown operator is an error naming the expression, never "matches nothing".
    pub fn to_selector(&self) -> Result<Selector, SelectorError> {
        let mut reqs: Vec<Requirement> = self
            .match_labels
            .iter()
            .map(|(k, v)| Requirement { key: k.clone(), op: Op::In(vec![v.clone()]) })
            .collect();
        for (index, e) in self.match_expressions.iter().enumerate() {
            let op = match e.operator.as_str() {
                "In" | "NotIn" if e.values.is_empty() => {
                    return Err(SelectorError::Values {
                        index,
                        message: format!("must be non-empty for {}", e.operator),
                    })
                }
                "Exists" | "DoesNotExist" if !e.values.is_empty() => {
                    return Err(SelectorError::Values { index, message: format!("must be empty for {}", e.operator) })
                }
                "In" => Op::In(e.values.clone()),
                "NotIn" => Op::NotIn(e.values.clone()),
                "Exists" => Op::Exists,
                "DoesNotExist" => Op::DoesNotExist,
                other => return Err(SelectorError::Operator { index, operator: other.to_string() }),
            };
            reqs.push(Requirement { key: e.key.clone(), op });
        }
        Ok(Selector { reqs })
    }

    /// Kubernetes' `ValidateLabelSelector`, field by field under `field` (e.g. `spec.nodeSelector`):
    /// label keys and values, known operators, values present for In/NotIn and absent for
    /// Exists/DoesNotExist. Empty when the selector is valid.
    pub fn field_errors(&self, field: &str) -> Vec<crate::reconcile::FieldError> {
        use crate::reconcile::FieldError;
        let mut out = labels_errors(&self.match_labels, &format!("{field}.matchLabels"));
        for (i, e) in self.match_expressions.iter().enumerate() {
            let at = format!("{field}.matchExpressions[{i}]");
            for m in label_key_errors(&e.key) {
                out.push(invalid(&format!("{at}.key"), &e.key, &m));
            }
            match e.operator.as_str() {
                "In" | "NotIn" if e.values.is_empty() => out.push(FieldError {
                    field: format!("{at}.values"),
                    message: "Required value: must be specified when `operator` is 'In' or 'NotIn'".into(),
                }),
                "Exists" | "DoesNotExist" if !e.values.is_empty() => out.push(FieldError {
                    field: format!("{at}.values"),
                    message: "Forbidden: may not be specified when `operator` is 'Exists' or 'DoesNotExist'".into(),
                }),
                "In" | "NotIn" | "Exists" | "DoesNotExist" => {}
                other => out.push(invalid(
                    &format!("{at}.operator"),
                    other,
                    "not a valid selector operator (want In, NotIn, Exists or DoesNotExist)",
                )),
            }
            for (j, v) in e.values.iter().enumerate() {
                for m in label_value_errors(v) {
                    out.push(invalid(&format!("{at}.values[{j}]"), v, &m));
                }
            }
        }
        out
    }

    /// An empty selector (`{}`): Kubernetes reads it as "everything", MCO refuses it for pools.
    pub fn is_empty(&self) -> bool {
        self.match_labels.is_empty() && self.match_expressions.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    /// `key>N` / `key<N` compare the label's value as an integer, as Kubernetes' selectors do
    /// (`kubectl get no -l 'idx>1'`); a missing or non-integer value matches neither.
    #[test]
    fn greater_and_less_than_compare_integers() {
        let l = labels(&[("idx", "2"), ("name", "x")]);
        for (sel, want) in [
            ("idx>1", true),
            ("idx>2", false),
            ("idx<3", true),
            ("idx < 2", false),
            ("idx>-5,idx<10", true),
            ("name>0", false),
            ("name<0", false),
            ("missing<100", false),
        ] {
            assert_eq!(Selector::parse(sel).unwrap().matches(&l), want, "{sel}");
        }
        let e = Selector::parse("idx>one").unwrap_err().to_string();
        assert!(e.contains("must be an integer"), "{e}");
    }

    #[test]
    fn string_selector_forms() {
        let l = labels(&[("a", "1"), ("node-role.kubernetes.io/worker", ""), ("zone", "z1")]);
        for (sel, want) in [
            ("", true),
            ("a=1", true),
            ("a==1", true),
            ("a!=1", false),
            ("a=2", false),
            ("node-role.kubernetes.io/worker", true),
            ("!node-role.kubernetes.io/worker", false),
            ("!missing", true),
            ("zone in (z1,z2)", true),
            ("zone notin (z1,z2)", false),
            ("zone in (z3),a=1", false),
            ("a=1, zone in (z1, z2)", true),
            ("node-role.kubernetes.io/worker=", true),
            ("zone in(z1)", true),
            ("zone notin(z1)", false),
            ("zone  in  ( z2 )", false),
            ("  ", true),
        ] {
            assert_eq!(Selector::parse(sel).unwrap().matches(&l), want, "{sel}");
        }
    }

    /// An empty term is refused with Kubernetes' parser's words: read as nothing, `-l ','` or
    /// `a=x,` selected more than asked (`kubectl delete mc -l ','` deleted every config).
    #[test]
    fn empty_terms_are_refused() {
        for (sel, words) in [
            (",", "found ',', expected: !, identifier, or 'end of string'"),
            (",a=1", "found ',', expected: !, identifier, or 'end of string'"),
            ("a=1,", "found '', expected: identifier after ','"),
            ("a,,b", "found ',', expected: identifier after ','"),
            ("a=1, ", "found '', expected: identifier after ','"),
        ] {
            let e = Selector::parse(sel).unwrap_err().to_string();
            assert!(e.contains(words), "{sel:?}: {e}");
        }
        assert!(Selector::parse("zonein(z1)").is_err(), "no operator without a space after the key");
    }

    #[test]
    fn bad_string_selectors_are_errors() {
        for bad in ["a in z1", "=1", "a=b c", "Bad_/x=1", "a in (x y)", "a in ()", "a notin ( )"] {
            assert!(Selector::parse(bad).is_err(), "{bad} should not parse");
        }
        let e = Selector::parse("env in ()").unwrap_err().to_string();
        assert!(e.contains("values set can't be empty"), "{e}");
    }

    #[test]
    fn label_keys_values_and_selectors_follow_kubernetes() {
        for ok in ["a", "node-role.kubernetes.io/worker", "A_b.c-9", "example.com/My.Name", &"x".repeat(63)] {
            assert!(label_key_errors(ok).is_empty(), "{ok}");
        }
        for bad in ["", "bad key!", "-a", "a/b/c", "/a", "Example.com/a", "a/", &"x".repeat(64)] {
            assert!(!label_key_errors(bad).is_empty(), "{bad}");
        }
        assert_eq!(
            labels_errors(&labels(&[("bad key!", "ok")]), "metadata.labels")[0].to_string(),
            "metadata.labels: Invalid value: \"bad key!\": name part must consist of alphanumeric characters, \
             '-', '_' or '.', and must start and end with an alphanumeric character"
        );
        for ok in ["", "x", "has_space-not.9", &"v".repeat(63)] {
            assert!(label_value_errors(ok).is_empty(), "{ok}");
        }
        for bad in ["has space", "-x", &"v".repeat(64)] {
            assert!(!label_value_errors(bad).is_empty(), "{bad}");
        }
        let req = |key: &str, operator: &str, values: &[&str]| LabelSelectorRequirement {
            key: key.into(),
            operator: operator.into(),
            values: values.iter().map(|v| v.to_string()).collect(),
        };
        let sel = LabelSelector {
            match_labels: labels(&[("bad key!", "x y")]),
            match_expressions: vec![
                req("zone", "In", &[]),
                req("zone", "Exists", &["a"]),
                req("zone", "Near", &[]),
                req("ok", "In", &["a b"]),
                req("ok", "NotIn", &["fine"]),
            ],
        };
        let fields: Vec<String> = sel.field_errors("spec.selector").into_iter().map(|e| e.field).collect();
        assert_eq!(
            fields,
            [
                "spec.selector.matchLabels",
                "spec.selector.matchLabels",
                "spec.selector.matchExpressions[0].values",
                "spec.selector.matchExpressions[1].values",
                "spec.selector.matchExpressions[2].operator",
                "spec.selector.matchExpressions[3].values[0]",
            ]
        );
    }

    #[test]
    fn structured_selector() {
        let s = LabelSelector {
            match_labels: labels(&[("role", "worker")]),
            match_expressions: vec![LabelSelectorRequirement {
                key: "zone".into(),
                operator: "NotIn".into(),
                values: vec!["z9".into()],
            }],
        }
        .to_selector()
        .unwrap();
        assert!(s.matches(&labels(&[("role", "worker")])));
        assert!(!s.matches(&labels(&[("role", "worker"), ("zone", "z9")])));
        assert!(!s.matches(&labels(&[("role", "master")])));
        let bad = LabelSelector {
            match_labels: BTreeMap::new(),
            match_expressions: vec![LabelSelectorRequirement {
                key: "k".into(),
                operator: "Gt".into(),
                values: vec![],
            }],
        };
        assert!(matches!(bad.to_selector(), Err(SelectorError::Operator { index: 0, .. })));
    }
}
