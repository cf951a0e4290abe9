//! Strategic merge patch (`application/strategic-merge-patch+json`, what `kubectl patch` sends
//! by default), for the lists Kubernetes merges rather than replaces.
//!
//! A strategic patch is a JSON merge patch, except for the lists whose Go types carry a patch
//! strategy: a Node's `status.conditions` and `status.addresses` merge by `type`, every
//! object's `metadata.finalizers` as a set, and so on. Taken as a merge patch, `kubectl patch node
//! --subresource status` of one condition dropped `Ready`, and a patch adding one taint or
//! finalizer removed the others. A list without a strategy (a Node's `spec.taints`, which
//! `kubectl taint` rewrites whole) is replaced. The directives kubectl and client-go send with such patches are
//! understood: `$patch` (`replace`, `delete`, `merge`) on maps and list items,
//! `$setElementOrder/<list>`, `$deleteFromPrimitiveList/<list>` and `$retainKeys`.
//!
//! aloft's own kinds (custom resources on OpenShift, where kube-apiserver refuses strategic
//! patches) have no merge-keyed lists beyond the metadata ones, so a strategic patch of them is
//! their merge patch.

use serde_json::{Map, Value};
use std::collections::{HashMap, HashSet};

/// How a list field merges.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ListRule {
    /// Items are maps, matched by this key; a patch item merges into the item with its key.
    ByKey(&'static str),
    /// Items are scalars; the patch's are added to the stored ones (kept once).
    Set,
}

/// The list fields of `kind` (dotted paths, no indexes) that merge, from the Kubernetes types'
/// `patchStrategy:"merge"` tags. Every other list is replaced whole, as in a merge patch.
fn list_rule(kind: &str, path: &str) -> Option<ListRule> {
    match (kind, path) {
        (_, "metadata.finalizers") => Some(ListRule::Set),
        (_, "metadata.ownerReferences") => Some(ListRule::ByKey("uid")),
        ("Node", "spec.podCIDRs") => Some(ListRule::Set),
        ("Node", "status.conditions") | ("Node", "status.addresses") => Some(ListRule::ByKey("type")),
        // `spec.taints` has no strategy (an atomic list): `kubectl taint KEY-` sends the list
        // that remains, and a merge by key kept the removed taint.
        _ => None,
    }
}

/// Applies the strategic merge patch `patch` to `target`, an object of `kind`. An error is a
/// malformed patch (a directive it does not take, a merge-keyed item without its key), and
/// leaves `target` as it may be half-changed: callers patch a copy.
pub fn apply(kind: &str, target: &mut Value, patch: &Value) -> Result<(), String> {
    let Value::Object(p) = patch else { return Err("a strategic merge patch must be a JSON object".into()) };
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    let Value::Object(t) = target else { return Ok(()) };
    merge_map(kind, &mut Vec::new(), t, p)
}

fn merge_map(
    kind: &str,
    path: &mut Vec<String>,
    target: &mut Map<String, Value>,
    patch: &Map<String, Value>,
) -> Result<(), String> {
    match patch.get("$patch").map(|d| d.as_str()) {
        None | Some(Some("merge")) => {}
        Some(Some("replace")) => {
            let mut fresh = Map::new();
            let rest: Map<String, Value> =
                patch.iter().filter(|(k, _)| *k != "$patch").map(|(k, v)| (k.clone(), v.clone())).collect();
            merge_map(kind, path, &mut fresh, &rest)?;
            *target = fresh;
            return Ok(());
        }
        Some(Some("delete")) => {
            target.clear();
            return Ok(());
        }
        Some(other) => return Err(format!("{}: unknown $patch directive {other:?}", at(path))),
    }
    // Deletions from scalar lists first, then the fields, then the order and the kept keys.
    for (k, v) in patch {
        if let Some(field) = k.strip_prefix("$deleteFromPrimitiveList/") {
            let gone = v.as_array().ok_or_else(|| format!("{}: {k} must be a list", at(path)))?;
            if let Some(Value::Array(items)) = target.get_mut(field) {
                let gone: HashSet<String> = gone.iter().map(identity).collect();
                items.retain(|i| !gone.contains(&identity(i)));
            }
        }
    }
    for (k, v) in patch {
        if k == "$patch"
            || k == "$retainKeys"
            || k.starts_with("$setElementOrder/")
            || k.starts_with("$deleteFromPrimitiveList/")
        {
            continue;
        }
        if k.starts_with('$') {
            return Err(format!("{}: strategic merge patch directive {k:?} is not supported", at(path)));
        }
        path.push(k.clone());
        let done = merge_field(kind, path, target, k, v);
        path.pop();
        done?;
    }
    for (k, v) in patch {
        if let Some(field) = k.strip_prefix("$setElementOrder/") {
            let order = v.as_array().ok_or_else(|| format!("{}: {k} must be a list", at(path)))?;
            path.push(field.to_string());
            let rule = list_rule(kind, &path.join("."));
            path.pop();
            if let Some(Value::Array(items)) = target.get_mut(field) {
                reorder(items, order, rule);
            }
        }
    }
    if let Some(keep) = patch.get("$retainKeys") {
        let keep = keep.as_array().ok_or_else(|| format!("{}: $retainKeys must be a list", at(path)))?;
        let keep: HashSet<&str> = keep.iter().filter_map(Value::as_str).collect();
        target.retain(|k, _| keep.contains(k.as_str()));
    }
    Ok(())
}

fn merge_field(
    kind: &str,
    path: &mut Vec<String>,
    target: &mut Map<String, Value>,
    k: &str,
    v: &Value,
) -> Result<(), String> {
    match v {
        Value::Null => {
            target.remove(k);
        }
        Value::Object(pm) if pm.get("$patch").and_then(Value::as_str) == Some("delete") => {
            target.remove(k);
        }
        Value::Object(pm) => {
            let slot = target.entry(k.to_string()).or_insert_with(|| Value::Object(Map::new()));
            if !slot.is_object() {
                *slot = Value::Object(Map::new());
            }
            if let Value::Object(tm) = slot {
                merge_map(kind, path, tm, pm)?;
            }
        }
        Value::Array(items) => match list_rule(kind, &path.join(".")) {
            Some(rule) => {
                let slot = target.entry(k.to_string()).or_insert_with(|| Value::Array(Vec::new()));
                if !slot.is_array() {
                    *slot = Value::Array(Vec::new());
                }
                if let Value::Array(list) = slot {
                    merge_list(kind, path, rule, list, items)?;
                }
            }
            None => {
                target.insert(k.to_string(), Value::Array(items.iter().map(plain).collect::<Result<_, _>>()?));
            }
        },
        scalar => {
            target.insert(k.to_string(), scalar.clone());
        }
    }
    Ok(())
}

fn merge_list(
    kind: &str,
    path: &mut Vec<String>,
    rule: ListRule,
    list: &mut Vec<Value>,
    items: &[Value],
) -> Result<(), String> {
    let replace = items.iter().any(|i| i.get("$patch").and_then(Value::as_str) == Some("replace"));
    if replace {
        list.clear();
    }
    // Items are found by their identity through an index, not by scanning the list for each
    // patch item: a patch of n items to a list of n was n² (20,000 finalizers, seconds of a
    // worker's time, from any credential that may patch, before its write was even judged).
    let mut values: HashSet<String> = HashSet::new();
    let mut by_key: HashMap<String, Vec<usize>> = HashMap::new();
    match rule {
        ListRule::Set => values.extend(list.iter().map(identity)),
        ListRule::ByKey(key) => {
            for (i, t) in list.iter().enumerate() {
                if let Some(id) = t.get(key) {
                    by_key.entry(identity(id)).or_default().push(i);
                }
            }
        }
    }
    let mut dead = vec![false; list.len()];
    for item in items {
        if replace && item.get("$patch").is_some() {
            continue;
        }
        match rule {
            ListRule::Set => {
                if item.is_object() || item.is_array() {
                    return Err(format!("{}: a list of values takes no {item}", at(path)));
                }
                if values.insert(identity(item)) {
                    list.push(item.clone());
                    dead.push(false);
                }
            }
            ListRule::ByKey(key) => {
                let Value::Object(im) = item else {
                    return Err(format!("{}: each item must be an object with {key:?}", at(path)));
                };
                let id = im.get(key).ok_or_else(|| format!("{}: an item has no merge key {key:?}", at(path)))?;
                let id = identity(id);
                let found = by_key.get(&id).and_then(|at| at.first().copied());
                match (im.get("$patch").and_then(Value::as_str), found) {
                    (Some("delete"), _) => {
                        for i in by_key.remove(&id).unwrap_or_default() {
                            dead[i] = true;
                        }
                    }
                    (Some(d), _) if d != "merge" => {
                        return Err(format!("{}: unknown $patch directive {d:?} in a list item", at(path)))
                    }
                    (_, Some(i)) => {
                        if let Value::Object(tm) = &mut list[i] {
                            merge_map(kind, path, tm, im)?;
                        } else {
                            list[i] = plain(item)?;
                        }
                    }
                    (_, None) => {
                        list.push(plain(item)?);
                        dead.push(false);
                        by_key.entry(id).or_default().push(list.len() - 1);
                    }
                }
            }
        }
    }
    if dead.contains(&true) {
        let mut i = 0;
        list.retain(|_| {
            let keep = !dead[i];
            i += 1;
            keep
        });
    }
    Ok(())
}

/// What makes two values one item of a list: their JSON text (equal values, equal text, since
/// objects are kept with sorted keys).
fn identity(v: &Value) -> String {
    v.to_string()
}

/// A patch value as plain JSON: its nulls and directives applied to nothing.
fn plain(v: &Value) -> Result<Value, String> {
    match v {
        Value::Object(m) => {
            let mut out = Map::new();
            let rest: Map<String, Value> =
                m.iter().filter(|(k, _)| *k != "$patch").map(|(k, v)| (k.clone(), v.clone())).collect();
            merge_map("", &mut Vec::new(), &mut out, &rest)?;
            Ok(Value::Object(out))
        }
        Value::Array(a) => Ok(Value::Array(a.iter().map(plain).collect::<Result<_, _>>()?)),
        other => Ok(other.clone()),
    }
}

/// `$setElementOrder`: the items it names in its order, then the others in theirs.
fn reorder(items: &mut Vec<Value>, order: &[Value], rule: Option<ListRule>) {
    let id = |v: &Value| -> Value {
        match rule {
            Some(ListRule::ByKey(key)) => v.get(key).cloned().unwrap_or(Value::Null),
            _ => v.clone(),
        }
    };
    // The items of each identity, first first; each name of the order takes the next of its own.
    let mut by_id: HashMap<String, std::collections::VecDeque<usize>> = HashMap::new();
    for (i, v) in items.iter().enumerate() {
        by_id.entry(identity(&id(v))).or_default().push_back(i);
    }
    let mut taken = vec![false; items.len()];
    let mut first: Vec<usize> = Vec::new();
    for w in order {
        if let Some(i) = by_id.get_mut(&identity(&id(w))).and_then(|q| q.pop_front()) {
            taken[i] = true;
            first.push(i);
        }
    }
    let mut slots: Vec<Option<Value>> = std::mem::take(items).into_iter().map(Some).collect();
    let mut sorted: Vec<Value> = first.iter().filter_map(|&i| slots[i].take()).collect();
    sorted.extend(slots.into_iter().zip(taken).filter(|(_, t)| !t).filter_map(|(v, _)| v));
    *items = sorted;
}

fn at(path: &[String]) -> String {
    if path.is_empty() {
        "the patch".to_string()
    } else {
        path.join(".")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn patched(kind: &str, target: Value, patch: Value) -> Value {
        let mut t = target;
        apply(kind, &mut t, &patch).unwrap();
        t
    }

    /// The audit's case: one condition patched through `kubectl patch --subresource status`
    /// keeps `Ready`; a finalizer added keeps the others; taints are replaced whole, as
    /// `kubectl taint KEY-` expects.
    #[test]
    fn merge_keyed_lists_merge() {
        let node = json!({"metadata": {"name": "n", "finalizers": ["a"]},
            "spec": {"taints": [{"key": "k1", "effect": "NoSchedule"}]},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]}});
        let out = patched(
            "Node",
            node.clone(),
            json!({"status": {"conditions": [{"type": "DiskPressure", "status": "False"}]}}),
        );
        assert_eq!(
            out["status"]["conditions"],
            json!([{"type": "Ready", "status": "True"}, {"type": "DiskPressure", "status": "False"}])
        );
        let out =
            patched("Node", node.clone(), json!({"status": {"conditions": [{"type": "Ready", "status": "False"}]}}));
        assert_eq!(out["status"]["conditions"], json!([{"type": "Ready", "status": "False"}]), "merged by type");
        let out = patched("Node", node.clone(), json!({"metadata": {"finalizers": ["b", "a"]}}));
        assert_eq!(out["metadata"]["finalizers"], json!(["a", "b"]), "a set: added once");
        let out = patched("Node", node.clone(), json!({"spec": {"taints": [{"key": "k2", "effect": "NoExecute"}]}}));
        assert_eq!(out["spec"]["taints"], json!([{"key": "k2", "effect": "NoExecute"}]), "taints: replaced");
        let out =
            patched("Node", node.clone(), json!({"status": {"addresses": [{"type": "Hostname", "address": "h"}]}}));
        assert_eq!(out["status"]["addresses"], json!([{"type": "Hostname", "address": "h"}]));
        // Other lists, and other kinds' lists, are replaced as in a merge patch.
        let out = patched("Node", json!({"status": {"images": [{"names": ["a"]}]}}), json!({"status": {"images": []}}));
        assert_eq!(out["status"]["images"], json!([]));
        let pool = json!({"spec": {"configuration": {"source": [{"name": "a"}]}}});
        let out = patched("MachineConfigPool", pool, json!({"spec": {"configuration": {"source": [{"name": "b"}]}}}));
        assert_eq!(out["spec"]["configuration"]["source"], json!([{"name": "b"}]));
    }

    /// What kubectl and client-go send with such patches: deletions by key and from scalar
    /// lists, a list or map replaced, an order, kept keys; nulls delete as in a merge patch.
    #[test]
    fn directives() {
        let node = json!({"metadata": {"finalizers": ["a", "b"], "labels": {"x": "1", "y": "2"}},
            "status": {"conditions": [{"type": "k1"}, {"type": "k2"}]}});
        let out = patched(
            "Node",
            node.clone(),
            json!({"status": {"conditions": [{"type": "k1", "$patch": "delete"}]},
                   "metadata": {"$deleteFromPrimitiveList/finalizers": ["a"], "labels": {"x": null}}}),
        );
        assert_eq!(out["status"]["conditions"], json!([{"type": "k2"}]));
        assert_eq!(out["metadata"]["finalizers"], json!(["b"]));
        assert_eq!(out["metadata"]["labels"], json!({"y": "2"}));
        let out =
            patched("Node", node.clone(), json!({"status": {"conditions": [{"$patch": "replace"}, {"type": "k3"}]}}));
        assert_eq!(out["status"]["conditions"], json!([{"type": "k3"}]));
        let out = patched("Node", node.clone(), json!({"metadata": {"labels": {"$patch": "replace", "z": "3"}}}));
        assert_eq!(out["metadata"]["labels"], json!({"z": "3"}));
        let out = patched("Node", node.clone(), json!({"metadata": {"labels": {"$patch": "delete"}}}));
        assert!(out["metadata"].get("labels").is_none(), "a map deleted: {out}");
        let out = patched(
            "Node",
            node.clone(),
            json!({"status": {"$setElementOrder/conditions": [{"type": "k2"}, {"type": "k1"}], "conditions": [{"type": "k1", "status": "E"}]}}),
        );
        assert_eq!(out["status"]["conditions"], json!([{"type": "k2"}, {"type": "k1", "status": "E"}]));
        let out = patched("Node", node.clone(), json!({"metadata": {"$retainKeys": ["labels"], "labels": {"w": "0"}}}));
        assert_eq!(out["metadata"], json!({"labels": {"x": "1", "y": "2", "w": "0"}}));
        // A patch value's own nulls and directives never reach the object.
        let out = patched("Node", json!({}), json!({"status": {"conditions": [{"type": "k", "reason": null}]}}));
        assert_eq!(out["status"]["conditions"], json!([{"type": "k"}]));
    }

    /// Lists of many items merge by index, not by a scan per item: 100,000 finalizers, keyed
    /// conditions and their deletions and order (each of these was n² before, seconds for
    /// 20,000 items from a node's credential, on a worker thread, before the write was judged).
    /// What the merge does is unchanged: the same items, duplicates folded, in the same order.
    #[test]
    fn long_lists_merge_as_short_ones_do() {
        const N: usize = 100_000;
        let names: Vec<Value> = (0..N).map(|i| json!(format!("example.com/f{i}"))).collect();
        let mut twice = names.clone();
        twice.extend(names.iter().cloned());
        let node = json!({"metadata": {"finalizers": names[..10].to_vec()}});
        let out = patched("Node", node, json!({"metadata": {"finalizers": twice}}));
        assert_eq!(out["metadata"]["finalizers"].as_array().map(Vec::len), Some(N), "each once");
        assert_eq!(out["metadata"]["finalizers"][N - 1], names[N - 1]);
        let gone: Vec<Value> = names[..N / 2].to_vec();
        let mut order: Vec<Value> = names.clone();
        order.reverse();
        let out = patched(
            "Node",
            out,
            json!({"metadata": {"$deleteFromPrimitiveList/finalizers": gone, "$setElementOrder/finalizers": order}}),
        );
        let left = out["metadata"]["finalizers"].as_array().cloned().unwrap_or_default();
        assert_eq!(left.len(), N / 2);
        assert_eq!((&left[0], &left[N / 2 - 1]), (&names[N - 1], &names[N / 2]), "in the order given");
        let conditions: Vec<Value> = (0..N).map(|i| json!({"type": format!("T{i}"), "status": "True"})).collect();
        let out = patched("Node", json!({"status": {}}), json!({"status": {"conditions": conditions}}));
        let mut again: Vec<Value> = (0..N).map(|i| json!({"type": format!("T{i}"), "status": "False"})).collect();
        again.push(json!({"type": "T7", "$patch": "delete"}));
        let out = patched("Node", out, json!({"status": {"conditions": again}}));
        let c = out["status"]["conditions"].as_array().cloned().unwrap_or_default();
        assert_eq!(c.len(), N - 1, "T7 deleted");
        assert_eq!((c[0]["type"].as_str(), c[0]["status"].as_str()), (Some("T0"), Some("False")));
        assert!(c.iter().all(|x| x["type"] != "T7"));
    }

    #[test]
    fn malformed_patches_are_refused() {
        let node = json!({"status": {"conditions": [{"type": "Ready"}]}});
        for (patch, words) in [
            (json!({"status": {"conditions": [{"status": "True"}]}}), "no merge key \"type\""),
            (json!({"status": {"conditions": ["Ready"]}}), "must be an object"),
            (json!({"metadata": {"finalizers": [{"a": 1}]}}), "a list of values"),
            (json!({"$patch": "wipe"}), "unknown $patch directive"),
            (json!({"spec": {"$unknown": 1}}), "not supported"),
            (json!([1]), "must be a JSON object"),
        ] {
            let mut t = node.clone();
            let e = apply("Node", &mut t, &patch).unwrap_err();
            assert!(e.contains(words), "{patch}: {e}");
        }
    }
}
