//! `apply`: create what is missing, patch what exists, the way `kubectl apply` does (client-side,
//! with the same `last-applied-configuration` annotation, so the two tools can take turns on one
//! object), and report created / configured / unchanged.

use super::{with_query, Validate};
use crate::client::{resource_path, Client};
use crate::resources::{self, ResourceType};
use anyhow::{anyhow, bail, Context, Result};
use serde_json::{Map, Value};
use std::path::Path;

/// The annotation kubectl keeps the last applied document in.
pub const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// Read every object from a file, a directory of .yaml/.yml/.json files, or `-` (stdin).
/// Multi-document YAML and `kind: List` are expanded; empty documents skipped.
pub fn read_objects(path: &str) -> Result<Vec<(String, Value)>> {
    let mut out = Vec::new();
    if path == "-" {
        let mut s = String::new();
        std::io::Read::read_to_string(&mut std::io::stdin(), &mut s)?;
        parse_documents("<stdin>", &s, &mut out)?;
        return Ok(out);
    }
    let p = Path::new(path);
    if p.is_dir() {
        let mut entries: Vec<_> = std::fs::read_dir(p)
            .with_context(|| format!("reading directory {path}"))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|e| e.extension().and_then(|x| x.to_str()).is_some_and(|x| matches!(x, "yaml" | "yml" | "json")))
            .collect();
        entries.sort();
        for e in entries {
            let s = std::fs::read_to_string(&e).with_context(|| format!("reading {}", e.display()))?;
            parse_documents(&e.display().to_string(), &s, &mut out)?;
        }
    } else {
        let s = std::fs::read_to_string(p).with_context(|| format!("reading {path}"))?;
        parse_documents(path, &s, &mut out)?;
    }
    Ok(out)
}

/// Each object of `text` with where it came from: `origin` alone for a file of one object, else
/// `origin document N` (and `item K` of a `kind: List`), so that an error names the one at fault.
fn parse_documents(origin: &str, text: &str, out: &mut Vec<(String, Value)>) -> Result<()> {
    let mut found = Vec::new();
    for (i, doc) in crate::yaml::documents_checked(text).into_iter().enumerate() {
        let (v, repeated) = doc.map_err(|e| anyhow!("{origin}: document {}: malformed YAML: {e}", i + 1))?;
        // kubectl refuses the file: a repeated key is a mistake, not a choice of its last value.
        if !repeated.is_empty() {
            bail!("{origin}: error converting YAML to JSON: yaml: unmarshal errors:\n  {}", repeated.join("\n  "));
        }
        match v {
            Value::Null => continue,
            Value::Object(ref m) if m.get("kind").and_then(Value::as_str) == Some("List") => {
                for (k, item) in m.get("items").and_then(Value::as_array).into_iter().flatten().enumerate() {
                    found.push((i + 1, Some(k + 1), item.clone()));
                }
            }
            Value::Object(_) => found.push((i + 1, None, v)),
            other => bail!("{origin}: document {} is not an object: {other}", i + 1),
        }
    }
    let several = found.len() > 1;
    out.extend(found.into_iter().map(|(doc, item, v)| {
        let at = match (several, item) {
            (false, _) => origin.to_string(),
            (true, None) => format!("{origin} document {doc}"),
            (true, Some(k)) => format!("{origin} document {doc} item {k}"),
        };
        (at, v)
    }));
    Ok(())
}

/// The merge patch that takes `current` to `desired`, deleting (null) what `last` had and
/// `desired` no longer has. Fields nobody applied (set by controllers) are left alone.
pub fn three_way_patch(last: Option<&Value>, desired: &Value) -> Value {
    match (last, desired) {
        (Some(Value::Object(l)), Value::Object(d)) => {
            let mut p = Map::new();
            for (k, dv) in d {
                p.insert(k.clone(), three_way_patch(l.get(k), dv));
            }
            for k in l.keys() {
                if !d.contains_key(k) {
                    p.insert(k.clone(), Value::Null);
                }
            }
            Value::Object(p)
        }
        (_, Value::Object(d)) => Value::Object(d.iter().map(|(k, v)| (k.clone(), three_way_patch(None, v))).collect()),
        (_, d) => d.clone(),
    }
}

/// The most all annotations of an object may hold (Kubernetes' and the coordinator's limit).
const MAX_ANNOTATIONS_BYTES: usize = 256 * 1024;

/// Put the applied document (without the annotation itself) into its annotation; false, with
/// nothing put, when the annotations would then hold more than Kubernetes allows (a
/// MachineConfig with large files): the object is applied without its record, as the
/// coordinator would refuse it with one (kubectl's apply fails there).
pub fn annotate_last_applied(obj: &mut Value) -> Result<bool> {
    let mut copy = obj.clone();
    if let Some(a) = copy.pointer_mut("/metadata/annotations").and_then(Value::as_object_mut) {
        a.remove(LAST_APPLIED);
        if a.is_empty() {
            if let Some(m) = copy.get_mut("metadata").and_then(Value::as_object_mut) {
                m.remove("annotations");
            }
        }
    }
    let text = serde_json::to_string(&copy)?;
    let others: usize = copy
        .pointer("/metadata/annotations")
        .and_then(Value::as_object)
        .map_or(0, |a| a.iter().map(|(k, v)| k.len() + v.as_str().map_or(0, str::len)).sum());
    if others + LAST_APPLIED.len() + text.len() > MAX_ANNOTATIONS_BYTES {
        return Ok(false);
    }
    let meta = obj
        .as_object_mut()
        .ok_or_else(|| anyhow!("object is not a map"))?
        .entry("metadata")
        .or_insert_with(|| Value::Object(Map::new()));
    let ann = meta
        .as_object_mut()
        .ok_or_else(|| anyhow!("metadata is not a map"))?
        .entry("annotations")
        .or_insert_with(|| Value::Object(Map::new()));
    ann.as_object_mut()
        .ok_or_else(|| anyhow!("metadata.annotations is not a map"))?
        .insert(LAST_APPLIED.into(), text.into());
    Ok(true)
}

/// The last applied document stored on a live object.
pub fn last_applied(live: &Value) -> Option<Value> {
    let s = live.pointer("/metadata/annotations")?.get(LAST_APPLIED)?.as_str()?;
    serde_json::from_str(s).ok()
}

pub(super) async fn apply_files(
    client: &Client,
    ns: &str,
    files: &[String],
    dry_run: bool,
    validate: Validate,
) -> Result<()> {
    let mut objects = Vec::new();
    for f in files {
        objects.extend(read_objects(f)?);
    }
    if objects.is_empty() {
        bail!("no objects passed to apply");
    }
    // Check every document before changing anything.
    let mut plan = Vec::new();
    for (origin, obj) in objects {
        let av = obj.get("apiVersion").and_then(Value::as_str).unwrap_or("");
        let kind = obj.get("kind").and_then(Value::as_str).unwrap_or("");
        let rt = resources::by_kind(av, kind).ok_or_else(|| {
            anyhow!("{origin}: no resource for apiVersion {av:?} kind {kind:?} (see `aloftctl api-resources`)")
        })?;
        let name = obj.pointer("/metadata/name").and_then(Value::as_str).unwrap_or("").to_string();
        if name.is_empty() {
            bail!("{origin}: {kind} has no metadata.name");
        }
        plan.push((origin, rt, name, obj));
    }
    let mut q = vec![("fieldValidation", validate.param().to_string())];
    if dry_run {
        q.push(("dryRun", "All".to_string()));
    }
    let suffix = if dry_run { " (server dry run)" } else { "" };
    // As kubectl: one by one, a refused object does not stop the others; errors at the end.
    let total = plan.len();
    let (mut applied, mut errors) = (Vec::new(), Vec::new());
    for (origin, rt, name, obj) in plan {
        let what = format!("{}/{}", rt.singular_qualified(), name);
        match apply_one(client, ns, rt, &name, obj, &q).await {
            Ok(verb) => {
                println!("{what} {verb}{suffix}");
                applied.push(what);
            }
            Err(e) => errors.push(format!("{origin}, {what}: {e:#}")),
        }
    }
    not_applied(total, &applied, errors)
}

/// The errors of the objects apply could not apply, and (of several) which it did apply.
fn not_applied(total: usize, applied: &[String], errors: Vec<String>) -> Result<()> {
    if errors.is_empty() {
        return Ok(());
    }
    let mut msg = errors.join("\n");
    if total > 1 {
        let done = if applied.is_empty() { "none".to_string() } else { applied.join(", ") };
        msg.push_str(&format!("\n{} of {total} objects not applied; applied: {done}", errors.len()));
    }
    Err(anyhow!(msg))
}

/// Create `obj`, or patch the live object to it (three-way, as kubectl); what was done
/// (`created`, `configured`, `unchanged`). `q` is the writes' query (fieldValidation, dryRun).
async fn apply_one(
    client: &Client,
    ns: &str,
    rt: &ResourceType,
    name: &str,
    mut obj: Value,
    q: &[(&str, String)],
) -> Result<&'static str> {
    let obj_ns = obj.pointer("/metadata/namespace").and_then(Value::as_str).unwrap_or(ns).to_string();
    let recorded = annotate_last_applied(&mut obj)?;
    if !recorded {
        eprintln!(
            "Warning: {} {name:?} is too large to keep its applied configuration in an annotation \
             (256 KiB for all of them): applied without it, so a field later removed from the file \
             is not removed from the object (use `kubectl replace`, or patch it away)",
            rt.kind
        );
    }
    let path = resource_path(rt.path_ref(), Some(&obj_ns), Some(name));
    let live = client.get(&path).await?;
    if live.code == 404 {
        // A file exported from a coordinator (`get -o yaml`) carries that store's
        // resourceVersion, which a create refuses: it means nothing for an object made here,
        // and kubectl's create and apply clear it too.
        if let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
            meta.remove("resourceVersion");
        }
        client.post(&with_query(resource_path(rt.path_ref(), Some(&obj_ns), None), q), &obj).await?.into_result()?;
        return Ok("created");
    }
    let live = live.into_result()?;
    let last = last_applied(&live);
    let mut patch = three_way_patch(last.as_ref(), &obj);
    if !recorded && last.is_some() {
        // An earlier, smaller record would now be stale: it goes.
        patch["metadata"]["annotations"][LAST_APPLIED] = Value::Null;
    }
    // As kubectl: a patch that changes nothing on the live object is not sent.
    let mut patched = live.clone();
    json_patch::merge(&mut patched, &patch);
    if patched == live {
        return Ok("unchanged");
    }
    client.patch(&with_query(path, q), "application/merge-patch+json", &patch).await?.into_result()?;
    Ok("configured")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn three_way() {
        let last = json!({"spec": {"a": 1, "b": 2, "sel": {"x": "1"}}});
        let desired = json!({"spec": {"a": 5, "sel": {"y": "2"}}});
        let p = three_way_patch(Some(&last), &desired);
        assert_eq!(p, json!({"spec": {"a": 5, "b": null, "sel": {"y": "2", "x": null}}}));
        let mut live = json!({"spec": {"a": 1, "b": 2, "sel": {"x": "1"}, "configuration": {"name": "r"}}});
        json_patch::merge(&mut live, &p);
        assert_eq!(live, json!({"spec": {"a": 5, "sel": {"y": "2"}, "configuration": {"name": "r"}}}));
    }

    #[test]
    fn documents() {
        let mut out = Vec::new();
        parse_documents("f", "---\napiVersion: v1\nkind: Node\nmetadata: {name: a}\n---\n---\nkind: List\nitems:\n- {kind: Node, metadata: {name: b}}\n", &mut out).unwrap();
        let origins: Vec<&str> = out.iter().map(|(o, _)| o.as_str()).collect();
        assert_eq!(origins, ["f document 1", "f document 3 item 1"]);
        let mut one = Vec::new();
        parse_documents("g", "---\nkind: Node\nmetadata: {name: a}\n---\n", &mut one).unwrap();
        assert_eq!(one[0].0, "g");
        assert!(parse_documents("f", "a: [", &mut Vec::new()).unwrap_err().to_string().contains("malformed YAML"));
        assert!(parse_documents("f", "- 1\n", &mut Vec::new()).is_err());
        // A repeated key refuses the whole file, naming it, the line and the key (as kubectl).
        let mut none = Vec::new();
        let text = "kind: Node\nmetadata: {name: a}\n---\nkind: Node\nmetadata:\n  name: b\n  name: c\n";
        let e = parse_documents("dup.yaml", text, &mut none).unwrap_err().to_string();
        assert_eq!(
            e,
            "dup.yaml: error converting YAML to JSON: yaml: unmarshal errors:\n  line 7: key \"name\" already set in map"
        );
        assert!(none.is_empty(), "nothing from that file");
        let mut o = json!({"metadata": {"name": "a"}});
        assert!(annotate_last_applied(&mut o).unwrap());
        assert_eq!(last_applied(&o), Some(json!({"metadata": {"name": "a"}})));
        // Too large to record within Kubernetes' 256 KiB of annotations: applied without it.
        let mut big = json!({"metadata": {"name": "b"}, "spec": {"data": "x".repeat(300 * 1024)}});
        assert!(!annotate_last_applied(&mut big).unwrap());
        assert_eq!(last_applied(&big), None);
    }
}
