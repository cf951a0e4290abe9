//! Discovery documents (`/api`, `/apis`, `/apis/<group>/<version>`, `/version`), in the legacy
//! (non-aggregated) form. kubectl asks for aggregated discovery first and falls back to these when
//! the answer is plain JSON, which every kubectl since 1.26 does.

use super::review::Review;
use crate::resources::{self, ResourceType};
use serde_json::{json, Value};

const VERBS: &[&str] = &["create", "delete", "get", "list", "patch", "update", "watch"];

pub fn core_versions() -> Value {
    json!({"kind": "APIVersions", "apiVersion": "v1", "versions": ["v1"], "serverAddressByClientCIDRs": []})
}

/// A group's one served version: its resources' (OLM's are `v1alpha1`), else `v1` (the reviews').
fn served_version(group: &str) -> &'static str {
    resources::ALL.iter().find(|r| r.group == group).map_or("v1", |r| r.version)
}

fn group_entry(group: &str) -> Value {
    let version = served_version(group);
    let gv = format!("{group}/{version}");
    json!({
        "name": group,
        "versions": [{"groupVersion": gv, "version": version}],
        "preferredVersion": {"groupVersion": gv, "version": version},
    })
}

/// The served groups: the resources' and the reviews' (`kubectl auth whoami` and `can-i`).
fn served_groups() -> Vec<&'static str> {
    let mut groups = resources::groups();
    groups.extend(Review::groups());
    groups.sort();
    // One entry a group: two reviews of one group listed it twice (`kubectl api-versions`).
    groups.dedup();
    groups
}

pub fn group_list() -> Value {
    let groups: Vec<Value> = served_groups().into_iter().map(group_entry).collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

/// `/apis/<group>`; None when the group is not served.
pub fn group(group: &str) -> Option<Value> {
    if !served_groups().contains(&group) {
        return None;
    }
    let mut g = group_entry(group);
    g["kind"] = "APIGroup".into();
    g["apiVersion"] = "v1".into();
    Some(g)
}

fn entries(r: &ResourceType) -> Vec<Value> {
    let mut out = vec![json!({
        "name": r.plural,
        "singularName": r.singular,
        "namespaced": r.namespaced,
        "kind": r.kind,
        "verbs": VERBS,
        "shortNames": r.short_names,
        "categories": r.categories,
    })];
    if r.status_subresource {
        out.push(json!({
            "name": format!("{}/status", r.plural),
            "singularName": "",
            "namespaced": r.namespaced,
            "kind": r.kind,
            "verbs": ["get", "patch", "update"],
        }));
    }
    out
}

/// `/api/v1` or `/apis/<group>/<version>`; None when nothing is served there.
pub fn resource_list(group: &str, version: &str) -> Option<Value> {
    let mut list: Vec<Value> =
        resources::ALL.iter().filter(|r| r.group == group && r.version == version).flat_map(entries).collect();
    list.extend(Review::discovery_entries(group, version));
    if list.is_empty() {
        return None;
    }
    let gv = if group.is_empty() { version.to_string() } else { format!("{group}/{version}") };
    Some(json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": list}))
}

/// `/version`: the Kubernetes minor version whose API conventions the coordinator follows, so
/// kubectl's version-skew check stays quiet, with aloft's own version after it and the build's
/// commit (`kubectl version -o yaml`, `aloftctl version`).
pub fn version(build: &aloft_api::build::BuildInfo) -> Value {
    json!({
        "major": "1",
        "minor": "32",
        "gitVersion": format!("v1.32.0+aloft-{}", build.version),
        "gitCommit": build.git_commit,
        "gitTreeState": build.git_tree_state,
        "buildDate": build.build_date,
        "goVersion": "",
        "compiler": "rustc",
        "platform": format!("{}/{}", std::env::consts::OS, std::env::consts::ARCH),
    })
}
