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

/// A group's served versions, preferred first: its resources' (OLM's group serves `v1` and
/// `v1alpha1`), else `v1` (the reviews'), ordered as Kubernetes orders versions (GA before beta
/// before alpha, then the higher number), as kube-apiserver lists them.
fn served_versions(group: &str) -> Vec<&'static str> {
    let mut versions: Vec<&'static str> =
        resources::ALL.iter().filter(|r| r.group == group).map(|r| r.version).collect();
    if versions.is_empty() {
        versions.push("v1");
    }
    versions.sort_by_key(|v| std::cmp::Reverse(version_priority(v)));
    versions.dedup();
    versions
}

/// Kubernetes' version priority: `v2` > `v1` > `v1beta1` > `v1alpha2` > `v1alpha1`.
fn version_priority(v: &str) -> (u8, u32, u32) {
    let rest = v.strip_prefix('v').unwrap_or(v);
    let digits = |s: &str| s.chars().take_while(char::is_ascii_digit).collect::<String>();
    let major = digits(rest);
    let tail = &rest[major.len()..];
    let major = major.parse().unwrap_or(0);
    let (stage, minor) = match tail {
        "" => (2, 0),
        t if t.starts_with("beta") => (1, digits(&t[4..]).parse().unwrap_or(0)),
        t if t.starts_with("alpha") => (0, digits(&t[5..]).parse().unwrap_or(0)),
        _ => (0, 0),
    };
    (stage, major, minor)
}

fn group_entry(group: &str) -> Value {
    let versions = served_versions(group);
    let entry = |v: &str| json!({"groupVersion": format!("{group}/{v}"), "version": v});
    json!({
        "name": group,
        "versions": versions.iter().map(|v| entry(v)).collect::<Vec<_>>(),
        "preferredVersion": entry(versions[0]),
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
        "verbs": if r.read_only() { &["get", "list", "watch"][..] } else { VERBS },
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_group_lists_each_version_it_serves_preferred_first() {
        let olm = group(aloft_api::olm::GROUP).expect("served");
        assert_eq!(olm["preferredVersion"]["groupVersion"], "operators.coreos.com/v1");
        let listed: Vec<&str> =
            olm["versions"].as_array().unwrap().iter().map(|v| v["version"].as_str().unwrap()).collect();
        assert_eq!(listed, ["v1", "v1alpha1"]);
        let kinds = |v: &str| -> Vec<String> {
            resource_list(aloft_api::olm::GROUP, v).expect("a list")["resources"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|r| !r["name"].as_str().unwrap().contains('/'))
                .map(|r| r["kind"].as_str().unwrap().to_string())
                .collect()
        };
        assert_eq!(kinds("v1"), ["OperatorGroup"]);
        assert_eq!(kinds("v1alpha1"), ["CatalogSource", "Subscription", "InstallPlan", "ClusterServiceVersion"]);
        let mut ordered = vec!["v1alpha1", "v2", "v1beta1", "v1", "v1alpha2", "v10"];
        ordered.sort_by_key(|v| std::cmp::Reverse(version_priority(v)));
        assert_eq!(ordered, ["v10", "v2", "v1", "v1beta1", "v1alpha2", "v1alpha1"]);
        let mco = group("machineconfiguration.openshift.io").expect("served");
        assert_eq!(mco["versions"].as_array().map(Vec::len), Some(1));
    }
}
