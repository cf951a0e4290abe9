//! Reading YAML as Kubernetes clients do. yaml_serde follows YAML 1.2, where an unquoted `0644` is
//! a string; kubectl, `oc` and the API server read YAML 1.1, where it is the octal number 420.
//! OpenShift's own MachineConfigs write file modes that way, so a `mode` written as a 1.1 octal
//! literal is read as the number it means. Only `mode` keys are touched: a quoted "0644"
//! elsewhere stays a string.

use serde_json::Value;
use std::cell::RefCell;

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
    let mut v = read(yaml_serde::Deserializer::from_str(text), None, budget(text))?.0;
    octal_modes(&mut v);
    Ok(v)
}

/// How much a document of `text` may read as, counting each value (member of a sequence or
/// mapping) and each byte of a string once: a document without aliases reads as less than twice
/// its size. Aliases are expanded where they stand, so a large anchored list (or string) named
/// by many aliases read as anchor × aliases (the "billion laughs" of CVE-2019-11253): a request
/// body of a few KB took the coordinator's memory.
fn budget(text: &str) -> usize {
    // Twice the size: a value is one, a string's byte is one, and an escape may grow (`\L`,
    // two bytes, is U+2028, three); only aliases make a document read as more.
    text.len().saturating_mul(2).saturating_add(1024)
}

/// A key a YAML mapping repeats, worded as kube-apiserver and kubectl word it (Go's YAML
/// reader): `line 5: key "name" already set in map`.
pub fn duplicate_key(line: usize, key: &str) -> String {
    format!("line {line}: key {key:?} already set in map")
}

/// Repeated keys named with their line, at most this many (each line costs a parse of the
/// document; the first few say what is wrong).
const LINES_AT_MOST: usize = 16;

/// One YAML document into JSON (as [`from_str`]), with the keys its mappings repeat, worded by
/// [`duplicate_key`]. yaml_serde keeps the last value of a repeated key silently, as Go's
/// non-strict reader does; a strict reader refuses the document, and the API server's
/// `fieldValidation=Strict` and aloftctl's apply must be able to.
pub fn from_str_checked(text: &str) -> Result<(Value, Vec<String>), yaml_serde::Error> {
    let doc = || Some(yaml_serde::Deserializer::from_str(text));
    checked(doc, budget(text))
}

/// Every document of a multi-document `text`, as [`from_str_checked`] reads one, up to the first
/// that fails to read; line numbers count from the start of `text`.
pub fn documents_checked(text: &str) -> Vec<Result<(Value, Vec<String>), yaml_serde::Error>> {
    let mut out = Vec::new();
    for (i, de) in yaml_serde::Deserializer::from_str(text).enumerate() {
        let read = read(de, None, budget(text)).map(|(v, keys)| {
            if keys.is_empty() {
                return finish(v, Vec::new());
            }
            // Only a document that repeats keys is read again (to name their lines).
            let doc = || yaml_serde::Deserializer::from_str(text).nth(i);
            finish(v, name_lines(&keys, doc, budget(text)))
        });
        let failed = read.is_err();
        out.push(read);
        // A stream that fails to parse keeps failing: the rest cannot be read.
        if failed {
            break;
        }
    }
    out
}

/// Every document of a multi-document `text` as JSON, as written (no 1.1 octal modes), each
/// within the same alias budget as a request body: for files the coordinator is pointed at
/// (file-based catalogs), which an image's author writes, not the admin.
pub fn documents(text: &str) -> impl Iterator<Item = Result<Value, yaml_serde::Error>> + '_ {
    let budget = budget(text);
    yaml_serde::Deserializer::from_str(text).map(move |de| read(de, None, budget).map(|(v, _)| v))
}

fn checked<'a>(
    doc: impl Fn() -> Option<yaml_serde::Deserializer<'a>>,
    budget: usize,
) -> Result<(Value, Vec<String>), yaml_serde::Error> {
    let Some(de) = doc() else { return Ok((Value::Null, Vec::new())) };
    let (v, keys) = read(de, None, budget)?;
    let found = if keys.is_empty() { Vec::new() } else { name_lines(&keys, doc, budget) };
    Ok(finish(v, found))
}

fn finish(mut v: Value, found: Vec<String>) -> (Value, Vec<String>) {
    octal_modes(&mut v);
    (v, found)
}

/// The repeated `keys` (in reading order) worded with their lines. The reader knows where a key
/// is only while it reads it: to name the line of repeat `i`, the document is read again and
/// stopped there.
fn name_lines<'a>(
    keys: &[String],
    doc: impl Fn() -> Option<yaml_serde::Deserializer<'a>>,
    budget: usize,
) -> Vec<String> {
    keys.iter()
        .enumerate()
        .map(|(i, key)| {
            let stopped = if i < LINES_AT_MOST { doc().map(|de| read(de, Some(i), budget)) } else { None };
            match stopped.and_then(|r| r.err()).and_then(|e| e.location()) {
                Some(at) => duplicate_key(at.line(), key),
                None => format!("key {key:?} already set in map"),
            }
        })
        .collect()
}

/// Read a document, noting repeated keys (the last value wins); with `fail_at`, fail at that
/// repeat instead (its error carries the key's location). Fails past `budget` values.
fn read<'de>(
    de: yaml_serde::Deserializer<'de>,
    fail_at: Option<usize>,
    budget: usize,
) -> Result<(Value, Vec<String>), yaml_serde::Error> {
    let repeats = Repeats { keys: RefCell::new(Vec::new()), fail_at, left: std::cell::Cell::new(budget) };
    let v = serde::de::DeserializeSeed::deserialize(Seed { repeats: &repeats }, de)?;
    Ok((v, repeats.keys.into_inner()))
}

struct Repeats {
    keys: RefCell<Vec<String>>,
    fail_at: Option<usize>,
    /// Values still allowed (see [`budget`]).
    left: std::cell::Cell<usize>,
}

impl Repeats {
    /// One more value read, or the error once the budget is spent.
    fn take<E: serde::de::Error>(&self) -> Result<(), E> {
        self.take_n(1)
    }

    /// `n` more of the budget (a string's bytes), or the error once it is spent.
    fn take_n<E: serde::de::Error>(&self, n: usize) -> Result<(), E> {
        let Some(left) = self.left.get().checked_sub(n) else {
            return Err(E::custom("the document expands to more than twice its size (YAML aliases repeated): refused"));
        };
        self.left.set(left);
        Ok(())
    }
}

/// Reads a value as serde_json's `Value` does, noting repeated keys in [`Repeats`].
#[derive(Clone, Copy)]
struct Seed<'a> {
    repeats: &'a Repeats,
}

impl<'de> serde::de::DeserializeSeed<'de> for Seed<'_> {
    type Value = Value;
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> serde::de::Visitor<'de> for Seed<'_> {
    type Value = Value;
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("any YAML value")
    }
    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Value, E> {
        self.repeats.take_n(v.len())?;
        Ok(Value::String(v.to_string()))
    }
    fn visit_string<E: serde::de::Error>(self, v: String) -> Result<Value, E> {
        self.repeats.take_n(v.len())?;
        Ok(Value::String(v))
    }
    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_some<D: serde::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut out = Vec::new();
        while let Some(v) = seq.next_element_seed(self)? {
            self.repeats.take()?;
            out.push(v);
        }
        Ok(Value::Array(out))
    }
    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = serde_json::Map::new();
        while let Some(k) = map.next_key_seed(Key { repeats: self.repeats, seen: &out })? {
            let v = map.next_value_seed(self)?;
            self.repeats.take()?;
            out.insert(k, v);
        }
        Ok(Value::Object(out))
    }
}

/// A mapping's key, checked against the keys before it while the reader is at it.
struct Key<'a> {
    repeats: &'a Repeats,
    seen: &'a serde_json::Map<String, Value>,
}

impl<'de> serde::de::DeserializeSeed<'de> for Key<'_> {
    type Value = String;
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<String, D::Error> {
        d.deserialize_str(self)
    }
}

impl<'de> serde::de::Visitor<'de> for Key<'_> {
    type Value = String;
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a string key")
    }
    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<String, E> {
        self.repeats.take_n(v.len())?;
        if self.seen.contains_key(v) {
            let mut keys = self.repeats.keys.borrow_mut();
            if self.repeats.fail_at == Some(keys.len()) {
                return Err(E::custom(format!("key {v:?} already set in map")));
            }
            keys.push(v.to_string());
        }
        Ok(v.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Repeated keys are named with their line (from the start of the text, 1-based, as Go's
    /// reader counts), at any depth and in any document; the last value wins.
    #[test]
    fn repeated_keys_are_named_with_their_line() {
        let text =
            "apiVersion: v1\nkind: Node\nmetadata:\n  name: a\n  name: b\n  labels:\n    x: \"1\"\n    x: \"2\"\n";
        let (v, found) = from_str_checked(text).unwrap();
        assert_eq!(found, [r#"line 5: key "name" already set in map"#, r#"line 8: key "x" already set in map"#]);
        assert_eq!(v["metadata"]["name"], "b", "the last wins");
        assert_eq!(v["metadata"]["labels"]["x"], "2");
        let two = "kind: A\n---\nkind: B\nspec:\n  files:\n  - mode: 0644\n    mode: 0600\n";
        let docs: Vec<_> = documents_checked(two).into_iter().map(Result::unwrap).collect();
        assert!(docs[0].1.is_empty());
        assert_eq!(docs[1].1, [r#"line 7: key "mode" already set in map"#]);
        assert_eq!(docs[1].0["spec"]["files"][0]["mode"], 384, "octal modes still read");
        assert!(from_str_checked(two).is_err(), "a request body is one document");
        assert!(from_str_checked("a: [").is_err(), "malformed YAML is still an error");
    }

    /// Aliases are read where they stand, up to the document's own size: a few aliases of a
    /// small anchor read, a "billion laughs" is refused without being expanded.
    #[test]
    fn aliases_expanding_past_the_documents_size_are_refused() {
        let ok = from_str("a: &x [1, 2, 3]\nb: [*x, *x]\n").unwrap();
        assert_eq!(ok["b"][1][2], 3);
        let mut laughs = String::from("a: &a [x, x, x, x, x, x, x, x, x, x]\n");
        for (name, prev) in
            ["b", "c", "d", "e", "f", "g", "h", "i"].into_iter().zip(["a", "b", "c", "d", "e", "f", "g", "h"])
        {
            let refs = vec![format!("*{prev}"); 10].join(", ");
            laughs.push_str(&format!("{name}: &{name} [{refs}]\n"));
        }
        for read in [from_str(&laughs).map(|_| ()), from_str_checked(&laughs).map(|_| ())] {
            let err = read.expect_err("10^9 values from a few hundred bytes");
            assert!(err.to_string().contains("more than twice its size"), "{err}");
        }
        assert!(documents_checked(&laughs)[0].is_err());
        // A large anchored string named by many aliases: 64 KiB, 1,000 times.
        let big = format!("a: &s \"{}\"\nb: [{}]\n", "x".repeat(64 << 10), vec!["*s"; 1000].join(", "));
        let err = from_str(&big).expect_err("64 MiB from 68 KiB");
        assert!(err.to_string().contains("more than twice its size"), "{err}");
        // Strings as written, escapes that grow included, still read.
        let grows = format!("a: \"{}\"\n", "\\L".repeat(10_000));
        assert_eq!(from_str(&grows).unwrap()["a"].as_str().map(str::len), Some(30_000));
        let keys: String = (0..2000).map(|i| format!("key-number-{i}: value-number-{i}\n")).collect();
        assert_eq!(from_str(&keys).unwrap().as_object().map(|m| m.len()), Some(2000));
    }

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
