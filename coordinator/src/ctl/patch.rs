//! `aloftctl patch`: a merge patch or a JSON patch to one object or its status, the patch
//! written as JSON or YAML, as kubectl takes it.

use super::{targets, with_query, Usage, Validate};
use crate::client::{resource_path, Client};
use anyhow::Result;
use serde_json::Value;

pub(super) async fn patch_cmd(
    client: &Client,
    ns: &str,
    args: &[String],
    (patch_type, patch): (&str, &str),
    sub: Option<String>,
    validate: Validate,
) -> Result<()> {
    let ctype = match patch_type {
        "merge" => "application/merge-patch+json",
        "json" => "application/json-patch+json",
        "strategic" => return Err(Usage("--type strategic is not supported by aloft: use merge or json".into()).into()),
        other => return Err(Usage(format!("--type {other:?}: want merge or json")).into()),
    };
    let body = patch_body(patch, patch_type == "json")?;
    for (rt, name) in targets(args)? {
        let name =
            name.ok_or_else(|| Usage(format!("patch needs a name: aloftctl patch {} NAME -p ...", rt.singular)))?;
        let mut path = resource_path(rt.path_ref(), Some(ns), Some(&name));
        if let Some(s) = &sub {
            path.push('/');
            path.push_str(s);
        }
        let before = client.get(&path).await?.into_result()?;
        let q = [("fieldValidation", validate.param().to_string())];
        let after = client.patch(&with_query(path, &q), ctype, &body).await?.into_result()?;
        let changed = after.pointer("/metadata/resourceVersion") != before.pointer("/metadata/resourceVersion");
        println!("{}/{name} {}", rt.singular_qualified(), if changed { "patched" } else { "patched (no change)" });
    }
    Ok(())
}

/// `--patch` as kubectl reads it: JSON, or YAML (`spec: {paused: true}`), which is turned into
/// the same JSON (YAML 1.1 octal file modes included, as for `apply`). A merge patch must be a
/// mapping and a JSON patch a list: `-p foo` reads as a YAML string, which is no patch.
fn patch_body(patch: &str, json_patch: bool) -> Result<Value> {
    let body = match serde_json::from_str(patch) {
        Ok(v) => v,
        Err(json) => crate::yaml::from_str(patch)
            .map_err(|yaml| Usage(format!("--patch is neither JSON ({json}) nor YAML ({yaml})")))?,
    };
    let (fits, want) =
        if json_patch { (body.is_array(), "a list of operations") } else { (body.is_object(), "a mapping") };
    if !fits {
        let example = if json_patch {
            r#"'[{"op":"replace","path":"/spec/paused","value":true}]'"#
        } else {
            r#"'{"spec":{"paused":true}}' or 'spec: {paused: true}'"#
        };
        return Err(Usage(format!("--patch {patch:?} is not {want} (want e.g. {example})")).into());
    }
    Ok(body)
}
