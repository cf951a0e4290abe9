//! `aloftctl delete`: objects by TYPE NAME or from files, each one tried, as kubectl does; the
//! errors of those not deleted come at the end.

use super::{apply, objects_failed, targets, Usage};
use crate::client::{resource_path, Client};
use crate::resources::{self, ResourceType};
use anyhow::{anyhow, bail, Result};
use serde_json::Value;

pub(super) async fn delete(
    client: &Client,
    ns: &str,
    args: &[String],
    files: &[String],
    ignore_not_found: bool,
) -> Result<()> {
    let mut items: Vec<(&'static ResourceType, String, String)> = Vec::new();
    for f in files {
        for (origin, obj) in apply::read_objects(f)? {
            let av = obj.get("apiVersion").and_then(Value::as_str).unwrap_or("");
            let kind = obj.get("kind").and_then(Value::as_str).unwrap_or("");
            let rt = resources::by_kind(av, kind).ok_or_else(|| anyhow!("{origin}: no resource for {av} {kind}"))?;
            let name = obj.pointer("/metadata/name").and_then(Value::as_str).unwrap_or("").to_string();
            if name.is_empty() {
                bail!("{origin}: {kind} has no metadata.name: nothing to delete by");
            }
            let n = obj.pointer("/metadata/namespace").and_then(Value::as_str).unwrap_or(ns).to_string();
            items.push((rt, name, n));
        }
    }
    if !args.is_empty() {
        for (rt, name) in targets(args)? {
            let name =
                name.ok_or_else(|| Usage(format!("delete needs names: aloftctl delete {} NAME", rt.singular)))?;
            items.push((rt, name, ns.to_string()));
        }
    }
    if items.is_empty() {
        return Err(Usage("nothing to delete: give TYPE NAME... or -f FILE".into()).into());
    }
    // As kubectl: every object is tried, and the errors of those not deleted end the command,
    // each on its line, after the others were deleted.
    let mut errors = Vec::new();
    for (rt, name, n) in items {
        let r = match client.delete(&resource_path(rt.path_ref(), Some(&n), Some(&name))).await {
            Ok(r) => r,
            // The server out of reach: nothing more is tried, and the errors so far are said too.
            Err(e) if errors.is_empty() => return Err(e),
            Err(e) => {
                errors.push(format!("error: {e:#}"));
                break;
            }
        };
        if r.ok() {
            println!("{} {name:?} deleted", rt.singular_qualified());
        } else if r.code == 404 && ignore_not_found {
            continue;
        } else {
            errors.extend(r.into_result().err().map(|e| e.to_string()));
        }
    }
    objects_failed(errors)
}
