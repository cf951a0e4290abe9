//! What the API server itself writes into objects: identity and timestamps on create, the
//! Kubernetes rules for what an update may change (status subresource, immutable fields,
//! generation), and patches.

use super::error::ApiError;
use crate::resources::ResourceType;
use serde::Deserialize;
use serde_json::{Map, Value};

pub fn now() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

fn meta_mut(obj: &mut Value) -> &mut Map<String, Value> {
    if !obj.get("metadata").is_some_and(Value::is_object) {
        obj["metadata"] = Value::Object(Map::new());
    }
    match obj.get_mut("metadata").and_then(Value::as_object_mut) {
        Some(m) => m,
        None => unreachable!("metadata was just made an object"),
    }
}

/// The value at `path` (object keys, outermost first). `Value::pointer` does the same from a
/// JSON pointer string, but allocates two strings for every segment (to undo `~` escapes); the
/// lookups here run for every request and every watch event of a fleet.
pub fn at<'a>(v: &'a Value, path: &[&str]) -> Option<&'a Value> {
    path.iter().try_fold(v, |v, k| v.get(*k))
}

/// [`at`] for a dotted field path (`metadata.name`, `spec.unschedulable`), as field selectors
/// name fields.
pub fn at_dotted<'a>(v: &'a Value, path: &str) -> Option<&'a Value> {
    path.split('.').try_fold(v, |v, k| v.get(k))
}

pub fn name_of(obj: &Value) -> &str {
    at(obj, &["metadata", "name"]).and_then(Value::as_str).unwrap_or("")
}

/// Fill the server-owned metadata of a new object.
pub fn prepare_create(obj: &mut Value, namespace: &str) {
    let meta = meta_mut(obj);
    if !namespace.is_empty() {
        meta.insert("namespace".into(), namespace.into());
    }
    meta.insert("uid".into(), uuid::Uuid::new_v4().to_string().into());
    meta.insert("creationTimestamp".into(), now().into());
    meta.insert("generation".into(), 1.into());
    meta.remove("resourceVersion");
    meta.remove("selfLink");
    super::finalizers::drop_deletion_fields(obj);
}

/// A name from `generateName` (five random lowercase characters, as Kubernetes does).
pub fn generate_name(prefix: &str) -> String {
    use rand::Rng;
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut rng = rand::rng();
    let suffix: String = (0..5).map(|_| ALPHABET[rng.random_range(0..ALPHABET.len())] as char).collect();
    format!("{prefix}{suffix}")
}

/// Whether `a` and `b` are equal but for the top-level fields `skip` (when both are objects),
/// without copying either: every node report goes through such comparisons, and copying a
/// Node twice to drop a field was a few percent of the coordinator's CPU in a rollout.
pub fn equal_except(a: &Value, b: &Value, skip: &[&str]) -> bool {
    match (a.as_object(), b.as_object()) {
        (Some(a), Some(b)) => {
            let kept = |m: &Map<String, Value>| m.keys().filter(|k| !skip.contains(&k.as_str())).count();
            kept(a) == kept(b)
                && a.iter().filter(|(k, _)| !skip.contains(&k.as_str())).all(|(k, v)| b.get(k) == Some(v))
        }
        _ => a == b,
    }
}

/// Whether everything but metadata and status is the same: a change there bumps
/// `metadata.generation`.
fn same_spec(a: &Value, b: &Value) -> bool {
    equal_except(a, b, &["metadata", "status"])
}

/// Combine what the client sent with what is stored, by the rules of the endpoint it was sent to.
pub fn prepare_update(rt: &ResourceType, status_endpoint: bool, stored: &Value, incoming: Value) -> Value {
    let mut out = if status_endpoint {
        // Only status changes through /status.
        let mut o = stored.clone();
        match incoming.get("status") {
            Some(s) => o["status"] = s.clone(),
            None => {
                if let Some(m) = o.as_object_mut() {
                    m.remove("status");
                }
            }
        }
        o
    } else {
        let mut o = incoming;
        if rt.status_subresource {
            // Status is the controllers' and agents': writes to the object keep the stored status.
            // A patch of the stored object carries that status already: compared, not copied
            // again (an agent's every report is such a patch).
            match stored.get("status") {
                Some(s) if o.get("status") != Some(s) => o["status"] = s.clone(),
                Some(_) => {}
                None => {
                    if let Some(m) = o.as_object_mut() {
                        m.remove("status");
                    }
                }
            }
        }
        o
    };
    // The five fields the server owns, copied one by one (not the stored metadata whole, with
    // every label and annotation).
    let stored_meta = stored.get("metadata");
    let meta = meta_mut(&mut out);
    for k in ["name", "namespace", "uid", "creationTimestamp", "resourceVersion"] {
        match stored_meta.and_then(|m| m.get(k)) {
            Some(v) if meta.get(k) == Some(v) => None,
            Some(v) => meta.insert(k.into(), v.clone()),
            None => meta.remove(k),
        };
    }
    set_generation(stored, &mut out);
    out
}

/// `metadata.generation` of `next`, an update of `stored`: one more when anything but metadata
/// and status changed. Again after the server itself edits the spec of an update (see
/// [`crate::controllers::uncordon::at_done`]).
pub fn set_generation(stored: &Value, next: &mut Value) {
    let generation = at(stored, &["metadata", "generation"]).and_then(Value::as_i64).unwrap_or(1);
    let bumped = if !same_spec(next, stored) { generation + 1 } else { generation };
    meta_mut(next).insert("generation".into(), bumped.into());
}

/// How a PATCH body is to be read, from its content type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatchType {
    /// RFC 7386 JSON merge patch.
    Merge,
    /// RFC 6902 JSON patch.
    Json,
    /// Kubernetes' strategic merge patch, which kubectl sends for core kinds. Applied as a merge
    /// patch with `$patch`/`$retainKeys` directives refused: lists are replaced, not merged by key.
    Strategic,
}

impl PatchType {
    pub fn from_content_type(ct: &str) -> Result<Self, ApiError> {
        let base = ct.split(';').next().unwrap_or("").trim();
        match base {
            "application/merge-patch+json" => Ok(PatchType::Merge),
            "application/json-patch+json" => Ok(PatchType::Json),
            "application/strategic-merge-patch+json" => Ok(PatchType::Strategic),
            "application/apply-patch+yaml" => Err(ApiError::unsupported_media(
                "server-side apply is not supported: use client-side `kubectl apply` (the default) or `aloftctl apply`",
            )),
            other => Err(ApiError::unsupported_media(format!(
                "unsupported patch type {other:?}: use application/merge-patch+json, application/json-patch+json or application/strategic-merge-patch+json"
            ))),
        }
    }
}

/// A PATCH body, and the keys it repeats (for field validation).
pub fn parse_patch(body: &[u8]) -> Result<(Value, Vec<String>), ApiError> {
    super::fields::parse_json(body).map_err(|e| ApiError::bad_request(format!("malformed patch: {e}")))
}

/// Apply a patch to a stored object of type `rt` (its kind named in errors as kube-apiserver's
/// other 422s name it: `MachineConfigPool.machineconfiguration.openshift.io "worker" is invalid:
/// ...`).
///
/// `copy_limit`: the most bytes the `copy` operations of a JSON patch may add in all (the
/// server's request body limit).
pub fn apply_patch(
    kind: PatchType,
    rt: &ResourceType,
    target: &Value,
    patch: &Value,
    copy_limit: usize,
) -> Result<Value, ApiError> {
    let mut out = target.clone();
    match kind {
        PatchType::Merge => {
            if !patch.is_object() {
                return Err(ApiError::bad_request("a merge patch must be a JSON object"));
            }
            json_patch::merge(&mut out, patch);
        }
        PatchType::Strategic => {
            super::strategic::apply(rt.kind, &mut out, patch)
                .map_err(|e| ApiError::bad_request(format!("malformed strategic merge patch: {e}")))?;
        }
        PatchType::Json => {
            let p = json_patch::Patch::deserialize(patch)
                .map_err(|e| ApiError::bad_request(format!("malformed JSON patch: {e}")))?;
            apply_json_patch(&mut out, &p.0, rt, name_of(target), copy_limit)?;
        }
    }
    Ok(out)
}

/// At most this many operations in a JSON patch (kube-apiserver's limit, with its message).
pub const MAX_JSON_PATCH_OPERATIONS: usize = 10_000;

/// How deeply an object may nest (objects and arrays within each other). The store reads every
/// object back with serde_json, which refuses more than 128 levels: an object stored deeper
/// could not be read, and the coordinator, which loads Nodes and pools at start, would not start
/// again. Kept well under that, and far over what any object of the API needs (~10).
pub const MAX_DEPTH: usize = 100;

/// A JSON patch, one operation at a time, within limits a small request could otherwise blow
/// through: a `copy` doubles what it copies, so thirty copies of `/status` into itself in a 2 KB
/// body asked for terabytes, and copies of a value into its own deepest leaf doubled the nesting
/// each time (a recursive clone or drop of that overflows the stack: the process aborts). The
/// bytes all copies add are capped at `copy_limit` (kube-apiserver caps them at its request body
/// limit, answering 413), and no operation may put a value deeper than [`MAX_DEPTH`].
fn apply_json_patch(
    out: &mut Value,
    ops: &[json_patch::PatchOperation],
    rt: &ResourceType,
    name: &str,
    copy_limit: usize,
) -> Result<(), ApiError> {
    use json_patch::PatchOperation as Op;
    if ops.len() > MAX_JSON_PATCH_OPERATIONS {
        return Err(ApiError::too_large_because(format!(
            "The allowed maximum operations in a JSON patch is {MAX_JSON_PATCH_OPERATIONS}, got {}",
            ops.len()
        )));
    }
    let invalid = |field: &str, message: String| {
        ApiError::invalid(&rt.qualified_kind(), name, vec![super::error::cause(field, "FieldValueInvalid", message)])
    };
    let tokens = |p: &json_patch::jsonptr::PointerBuf| p.as_str().matches('/').count();
    // Bytes of the document walked to measure copies and moves: capped as the copies are, so
    // that ten thousand moves of a large value cannot keep a worker busy for minutes.
    let (mut copied, mut walked) = (0usize, 0usize);
    for (i, op) in ops.iter().enumerate() {
        let inserted = match op {
            Op::Add(a) => Some((&a.path, measure(&a.value))),
            Op::Replace(r) => Some((&r.path, measure(&r.value))),
            Op::Copy(c) => out.pointer(c.from.as_str()).map(|v| (&c.path, measure(v))),
            // A move no deeper than where the value is keeps the document within the limit it
            // is within already: nothing to measure.
            Op::Move(m) if tokens(&m.path) > tokens(&m.from) => {
                out.pointer(m.from.as_str()).map(|v| (&m.path, measure(v)))
            }
            Op::Move(_) | Op::Remove(_) | Op::Test(_) => None,
        };
        if let Some((path, size)) = inserted {
            if matches!(op, Op::Copy(_) | Op::Move(_)) {
                walked = walked.saturating_add(size.bytes);
                if walked > copy_limit.saturating_mul(2) {
                    return Err(ApiError::too_large_because(format!(
                        "the values a JSON patch copies and moves deeper add up to more than {} bytes (operation \
                         '/{i}')",
                        copy_limit.saturating_mul(2)
                    )));
                }
            }
            let at = tokens(path);
            if at + size.depth > MAX_DEPTH {
                return Err(invalid(
                    &field_of(path.as_str()),
                    format!(
                        "JSON patch operation '/{i}' would nest the object {} levels deep at path '{path}'; at most \
                         {MAX_DEPTH} are stored",
                        at + size.depth
                    ),
                ));
            }
            if matches!(op, Op::Copy(_)) {
                copied = copied.saturating_add(size.bytes);
                if copied > copy_limit {
                    return Err(ApiError::too_large_because(format!(
                        "Unable to copy, the accumulated size increase of copy is {copied}, exceeding the limit \
                         {copy_limit} (JSON patch operation '/{i}')"
                    )));
                }
            }
        }
        json_patch::patch(out, std::slice::from_ref(op)).map_err(|e| {
            invalid("", format!("JSON patch failed: operation '/{i}' failed at path '{}': {}", e.path, e.kind))
        })?;
    }
    Ok(())
}

/// A JSON pointer as the field path of an error cause (`/spec/x/0` -> `spec.x.0`).
fn field_of(pointer: &str) -> String {
    pointer.trim_start_matches('/').replace('/', ".").replace("~1", "/").replace("~0", "~")
}

/// How deep a value nests and about how many bytes it serializes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Size {
    /// 0 for a scalar, 1 + the deepest member for an object or array.
    pub depth: usize,
    pub bytes: usize,
}

/// [`Size`] of `v`, without recursion (a value built by patches may nest deeper than the stack
/// allows) and without serializing it.
pub fn measure(v: &Value) -> Size {
    let mut stack = vec![(v, 0usize)];
    let mut size = Size { depth: 0, bytes: 0 };
    while let Some((v, d)) = stack.pop() {
        size.bytes += match v {
            Value::Null | Value::Bool(true) => 4,
            Value::Bool(false) => 5,
            Value::Number(n) => n.to_string().len(),
            Value::String(s) => s.len() + 2,
            Value::Array(a) => {
                size.depth = size.depth.max(d + 1);
                stack.extend(a.iter().map(|x| (x, d + 1)));
                2 + a.len()
            }
            Value::Object(m) => {
                size.depth = size.depth.max(d + 1);
                stack.extend(m.values().map(|x| (x, d + 1)));
                2 + m.keys().map(|k| k.len() + 4).sum::<usize>()
            }
        };
    }
    size
}

/// The path of the first place `obj` nests deeper than [`MAX_DEPTH`] (as an error cause's field),
/// or None. Recursion stops at the limit, so an object of any depth is safe to look at.
pub fn too_deep(obj: &Value) -> Option<String> {
    fn walk(v: &Value, depth: usize, path: &mut Vec<String>) -> bool {
        let nested = |c: &Value| c.is_object() || c.is_array();
        if !nested(v) {
            return false;
        }
        if depth + 1 > MAX_DEPTH {
            return true;
        }
        let into = |key: String, child: &Value, path: &mut Vec<String>| {
            path.push(key);
            let deep = walk(child, depth + 1, path);
            if !deep {
                path.pop();
            }
            deep
        };
        match v {
            Value::Object(m) => m.iter().filter(|(_, c)| nested(c)).any(|(k, c)| into(k.clone(), c, path)),
            Value::Array(a) => {
                a.iter().enumerate().filter(|(_, c)| nested(c)).any(|(i, c)| into(i.to_string(), c, path))
            }
            _ => false,
        }
    }
    let mut path = Vec::new();
    walk(obj, 0, &mut path).then(|| path.join("."))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::{MACHINE_CONFIG, MACHINE_CONFIG_POOL};
    use serde_json::json;

    #[test]
    fn paths_read_nested_keys_including_ones_with_slashes() {
        let v = json!({"metadata": {"name": "n1", "resourceVersion": "7",
                       "annotations": {"machineconfiguration.openshift.io/state": "Done"}},
                       "spec": {"unschedulable": true}, "status": {"conditions": [{"type": "Ready"}]}});
        assert_eq!(
            at(&v, &["metadata", "annotations", "machineconfiguration.openshift.io/state"]),
            Some(&json!("Done"))
        );
        assert_eq!(at(&v, &[]), Some(&v));
        assert_eq!(at(&v, &["metadata", "missing"]), None);
        assert_eq!(at(&v, &["metadata", "name", "deeper"]), None, "a string has no keys");
        assert_eq!(at(&v, &["status", "conditions", "0"]), None, "keys only, no list indexes");
        assert_eq!(at_dotted(&v, "spec.unschedulable"), Some(&json!(true)));
        assert_eq!(at_dotted(&v, "metadata.name"), Some(&json!("n1")));
        assert_eq!(at_dotted(&v, "spec.nope"), None);
        assert_eq!(name_of(&v), "n1");
        assert_eq!(name_of(&json!({"metadata": []})), "");
        assert_eq!(crate::store::revision_of(&v), Some(7));
    }

    fn stored() -> Value {
        json!({"apiVersion": "machineconfiguration.openshift.io/v1", "kind": "MachineConfigPool",
               "metadata": {"name": "worker", "uid": "u1", "creationTimestamp": "t0", "generation": 3, "resourceVersion": "7"},
               "spec": {"paused": false}, "status": {"machineCount": 2}})
    }

    #[test]
    fn status_rules() {
        let mut incoming = stored();
        incoming["spec"]["paused"] = true.into();
        incoming["status"]["machineCount"] = 9.into();
        incoming["metadata"]["uid"] = "forged".into();
        let main = prepare_update(&MACHINE_CONFIG_POOL, false, &stored(), incoming.clone());
        assert_eq!(main["spec"]["paused"], true);
        assert_eq!(main["status"]["machineCount"], 2, "status ignored on the main resource");
        assert_eq!(main["metadata"]["uid"], "u1", "uid immutable");
        assert_eq!(main["metadata"]["generation"], 4, "spec change bumps generation");
        let status = prepare_update(&MACHINE_CONFIG_POOL, true, &stored(), incoming);
        assert_eq!(status["spec"]["paused"], false, "spec ignored on /status");
        assert_eq!(status["status"]["machineCount"], 9);
        assert_eq!(status["metadata"]["generation"], 3);
        // Kinds without a status subresource keep what the client sent.
        let mc = prepare_update(
            &MACHINE_CONFIG,
            false,
            &json!({"metadata": {"name": "a"}}),
            json!({"metadata": {"name": "a"}, "status": {"x": 1}}),
        );
        assert_eq!(mc["status"]["x"], 1);
    }

    #[test]
    fn patches() {
        let s = stored();
        let apply = |kind: PatchType, body: &[u8]| {
            let (patch, _) = parse_patch(body)?;
            apply_patch(kind, &MACHINE_CONFIG_POOL, &s, &patch, 3 << 20)
        };
        let m = apply(PatchType::Merge, br#"{"spec":{"paused":true,"maxUnavailable":2}}"#).unwrap();
        assert_eq!(m["spec"], json!({"paused": true, "maxUnavailable": 2}));
        let j = apply(PatchType::Json, br#"[{"op":"replace","path":"/spec/paused","value":true}]"#).unwrap();
        assert_eq!(j["spec"]["paused"], true);
        let e = apply(PatchType::Json, br#"[{"op":"test","path":"/spec/paused","value":true}]"#).unwrap_err();
        assert_eq!(e.status.code, 422);
        assert!(
            e.status.message.starts_with("MachineConfigPool.machineconfiguration.openshift.io \"worker\" is invalid: "),
            "the kind is named as the API's other 422s name it: {}",
            e.status.message
        );
        let details = e.status.details.as_ref().unwrap();
        assert_eq!(
            (details.kind.as_str(), details.group.as_str()),
            ("MachineConfigPool", "machineconfiguration.openshift.io")
        );
        assert_eq!(apply(PatchType::Merge, b"[1]").unwrap_err().status.code, 400);
        assert_eq!(apply(PatchType::Merge, b"{oops").unwrap_err().status.code, 400);
        // Strategic: directives are applied (server/strategic.rs); a malformed one is a 400.
        let r = apply(PatchType::Strategic, br#"{"spec":{"$patch":"replace","paused":true}}"#).unwrap();
        assert_eq!(r["spec"], json!({"paused": true}));
        assert_eq!(apply(PatchType::Strategic, br#"{"spec":{"$patch":"wipe"}}"#).unwrap_err().status.code, 400);
        assert_eq!(PatchType::from_content_type("application/apply-patch+yaml").unwrap_err().status.code, 415);
    }

    fn nested(levels: usize) -> Value {
        (1..levels).fold(json!({}), |v, _| json!({"a": v}))
    }

    #[test]
    fn sizes_and_depths_are_measured_without_recursion() {
        assert_eq!(measure(&json!(1)).depth, 0);
        assert_eq!(measure(&json!({})).depth, 1);
        assert_eq!(measure(&json!({"a": [1, {"b": []}]})).depth, 4);
        let big = json!({"s": "x".repeat(1000)});
        assert!((1000..1100).contains(&measure(&big).bytes), "{:?}", measure(&big));
        // Deeper than any recursion would survive (dropped iteratively by hand below).
        let mut v = json!(null);
        for _ in 0..200_000 {
            v = Value::Array(vec![v]);
        }
        assert_eq!(measure(&v).depth, 200_000);
        assert!(too_deep(&v).is_some());
        while let Value::Array(mut a) = v {
            v = a.pop().unwrap_or(Value::Null);
        }
        assert_eq!(too_deep(&nested(MAX_DEPTH)), None);
        assert_eq!(too_deep(&nested(MAX_DEPTH + 1)).unwrap(), vec!["a"; MAX_DEPTH].join("."));
    }

    #[test]
    fn json_patches_that_multiply_or_nest_too_deep_are_refused() {
        let s = stored();
        let apply = |ops: Value, limit: usize| apply_patch(PatchType::Json, &MACHINE_CONFIG_POOL, &s, &ops, limit);
        let copies: Vec<Value> =
            (0..40).map(|i| json!({"op": "copy", "from": "/spec", "path": format!("/spec/c{i}")})).collect();
        let e = apply(Value::Array(copies), 1 << 20).unwrap_err();
        assert_eq!((e.status.code, e.status.reason.as_str()), (413, "RequestEntityTooLarge"), "{}", e.status.message);
        // A few copies within the limit are fine.
        let few = json!([{"op": "copy", "from": "/spec", "path": "/spec/c0"}]);
        assert!(apply(few, 1 << 20).unwrap()["spec"]["c0"].is_object());
        let many: Vec<Value> = (0..MAX_JSON_PATCH_OPERATIONS + 1)
            .map(|_| json!({"op": "test", "path": "/spec/paused", "value": false}))
            .collect();
        let e = apply(Value::Array(many), 1 << 20).unwrap_err();
        assert_eq!(e.status.code, 413);
        assert!(e.status.message.contains("maximum operations"), "{}", e.status.message);
        // Nesting: an added value, a copy into its own leaf, a move.
        let e = apply(json!([{"op": "add", "path": "/spec/x", "value": nested(MAX_DEPTH)}]), 1 << 20).unwrap_err();
        assert_eq!(e.status.code, 422);
        assert!(e.status.message.contains("levels deep"), "{}", e.status.message);
        assert!(apply(json!([{"op": "add", "path": "/spec/x", "value": nested(MAX_DEPTH - 2)}]), 1 << 20).is_ok());
        let e = apply(
            json!([{"op": "add", "path": "/spec/x", "value": nested(60)},
                   {"op": "copy", "from": "/spec/x", "path": format!("/spec/x{}", "/a".repeat(58))}]),
            1 << 20,
        )
        .unwrap_err();
        assert_eq!(e.status.code, 422, "{}", e.status.message);
        // Moves deeper walk what they move: capped; moves up or sideways are not measured.
        let big = Value::Array((0..40_000).map(|i| json!(i)).collect());
        let mut ops = vec![
            json!({"op": "add", "path": "/spec/big", "value": big}),
            json!({"op": "add", "path": "/spec/d", "value": {}}),
        ];
        for _ in 0..20 {
            ops.push(json!({"op": "move", "from": "/spec/big", "path": "/spec/d/big"}));
            ops.push(json!({"op": "move", "from": "/spec/d/big", "path": "/spec/big"}));
        }
        let e = apply(Value::Array(ops.clone()), 1 << 20).unwrap_err();
        assert_eq!(e.status.code, 413, "{}", e.status.message);
        ops.truncate(6);
        assert!(apply(Value::Array(ops), 1 << 20).is_ok(), "two moves down and back");
        let sideways: Vec<Value> = (0..1000)
            .map(|i| json!({"op": "move", "from": if i % 2 == 0 { "/spec/paused" } else { "/spec/p" }, "path": if i % 2 == 0 { "/spec/p" } else { "/spec/paused" }}))
            .collect();
        assert!(apply(Value::Array(sideways), 1 << 20).is_ok());
        assert_eq!(measure(&json!([true, false, null, 12345, "ab"])).bytes, 2 + 5 + 4 + 5 + 4 + 5 + 4);
        // Errors still name the operation that failed.
        let e = apply(
            json!([{"op": "test", "path": "/spec/paused", "value": false},
                             {"op": "remove", "path": "/nope"}]),
            1 << 20,
        )
        .unwrap_err();
        assert!(e.status.message.contains("operation '/1'"), "{}", e.status.message);
    }
}
