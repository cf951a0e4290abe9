//! `aloftctl adm prune renderedmachineconfigs`, as OpenShift's `oc adm prune
//! renderedmachineconfigs`: MCO never deletes a rendered config, so every change of a pool's
//! MachineConfigs leaves one behind for good. This deletes the ones nothing uses, oldest first,
//! and only with `--confirm` (a dry run otherwise, as `oc` does).
//!
//! In use means named by a pool (`spec.configuration` or `status.configuration`) or by a node
//! (`currentConfig`, `desiredConfig`, or aloft's pre-staging annotations). A pool's target that
//! gets deleted anyway (a change racing the prune) is rendered again by the render controller;
//! a config only nodes name is never deleted, since nothing could render it again.

use aloft_api::annotations as ann;
use serde_json::Value;

/// One rendered config and what uses it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rendered {
    pub name: String,
    /// The pool it was rendered for (its controller owner, else the name's `rendered-<pool>-`).
    pub pool: String,
    pub created: String,
    /// Who names it, e.g. "pool worker (spec)", "node n1 (currentConfig)"; empty: unused.
    pub used_by: Vec<String>,
}

impl Rendered {
    pub fn in_use(&self) -> bool {
        !self.used_by.is_empty()
    }
}

fn text<'a>(v: &'a Value, pointer: &str) -> &'a str {
    v.pointer(pointer).and_then(Value::as_str).unwrap_or("")
}

/// A config the render controller made: named `rendered-…` or owned by a pool.
fn owner_pool(mc: &Value) -> Option<String> {
    let owners = mc.pointer("/metadata/ownerReferences").and_then(Value::as_array);
    if let Some(o) = owners.into_iter().flatten().find(|o| text(o, "/kind") == "MachineConfigPool") {
        return Some(text(o, "/name").to_string());
    }
    let rest = text(mc, "/metadata/name").strip_prefix("rendered-")?;
    Some(rest.rsplit_once('-').map_or(rest, |(pool, _hash)| pool).to_string())
}

/// Every rendered config among `mcs`, with what uses it, by pool, oldest first.
pub fn inventory(mcs: &[Value], pools: &[Value], nodes: &[Value]) -> Vec<Rendered> {
    let mut out: Vec<Rendered> = mcs
        .iter()
        .filter_map(|mc| {
            let pool = owner_pool(mc)?;
            let name = text(mc, "/metadata/name").to_string();
            let mut used_by = Vec::new();
            for p in pools {
                let pname = text(p, "/metadata/name");
                for (part, ptr) in [("spec", "/spec/configuration/name"), ("status", "/status/configuration/name")] {
                    if text(p, ptr) == name {
                        used_by.push(format!("pool {pname} ({part})"));
                    }
                }
            }
            for n in nodes {
                let nname = text(n, "/metadata/name");
                let annotations = n.pointer("/metadata/annotations");
                for key in [ann::CURRENT_CONFIG, ann::DESIRED_CONFIG, ann::PRESTAGE_CONFIG, ann::PRESTAGED_CONFIG] {
                    if annotations.and_then(|a| a.get(key)).and_then(Value::as_str) == Some(name.as_str()) {
                        let short = key.rsplit('/').next().unwrap_or(key);
                        used_by.push(format!("node {nname} ({short})"));
                    }
                }
            }
            Some(Rendered { name, pool, created: text(mc, "/metadata/creationTimestamp").to_string(), used_by })
        })
        .collect();
    out.sort_by(|a, b| (&a.pool, &a.created, &a.name).cmp(&(&b.pool, &b.created, &b.name)));
    out
}

/// What a prune does: the unused configs to delete (oldest first, across pools; at most `count`
/// of them), and the ones it keeps because they are in use.
pub fn plan(inv: &[Rendered], count: Option<usize>) -> (Vec<&Rendered>, Vec<&Rendered>) {
    let (used, mut unused): (Vec<&Rendered>, Vec<&Rendered>) = inv.iter().partition(|r| r.in_use());
    unused.sort_by(|a, b| (&a.created, &a.name).cmp(&(&b.created, &b.name)));
    let delete = unused.into_iter().take(count.unwrap_or(usize::MAX)).collect();
    (delete, used)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn rendered(name: &str, created: &str, owner: Option<&str>) -> Value {
        let mut mc = json!({"metadata": {"name": name, "creationTimestamp": created}});
        if let Some(o) = owner {
            mc["metadata"]["ownerReferences"] = json!([{"kind": "MachineConfigPool", "name": o, "controller": true}]);
        }
        mc
    }

    #[test]
    fn only_rendered_configs_nothing_names_are_pruned_oldest_first() {
        let mcs = [
            rendered("rendered-worker-c", "2026-01-03T00:00:00Z", Some("worker")),
            rendered("rendered-worker-a", "2026-01-01T00:00:00Z", Some("worker")),
            rendered("rendered-worker-b", "2026-01-02T00:00:00Z", None),
            rendered("rendered-infra-x", "2026-01-01T00:00:00Z", Some("infra")),
            rendered("rendered-infra-y", "2026-01-02T00:00:00Z", Some("infra")),
            rendered("rendered-worker-d", "2026-01-04T00:00:00Z", Some("worker")),
            // Not rendered: a user's config, never a candidate.
            json!({"metadata": {"name": "50-worker-chrony", "creationTimestamp": "2020-01-01T00:00:00Z"}}),
        ];
        let pools = [json!({"metadata": {"name": "worker"}, "spec": {"configuration": {"name": "rendered-worker-d"}},
            "status": {"configuration": {"name": "rendered-worker-c"}}})];
        let nodes = [json!({"metadata": {"name": "n1", "annotations": {ann::CURRENT_CONFIG: "rendered-infra-x",
            ann::DESIRED_CONFIG: "rendered-infra-x", ann::PRESTAGE_CONFIG: "rendered-worker-b"}}})];
        let inv = inventory(&mcs, &pools, &nodes);
        let names: Vec<(&str, &str, bool)> =
            inv.iter().map(|r| (r.pool.as_str(), r.name.as_str(), r.in_use())).collect();
        assert_eq!(
            names,
            [
                ("infra", "rendered-infra-x", true),
                ("infra", "rendered-infra-y", false),
                ("worker", "rendered-worker-a", false),
                ("worker", "rendered-worker-b", true),
                ("worker", "rendered-worker-c", true),
                ("worker", "rendered-worker-d", true),
            ]
        );
        let x = inv.iter().find(|r| r.name == "rendered-infra-x").unwrap();
        assert_eq!(x.used_by, ["node n1 (currentConfig)", "node n1 (desiredConfig)"]);
        let c = inv.iter().find(|r| r.name == "rendered-worker-c").unwrap();
        assert_eq!(c.used_by, ["pool worker (status)"]);

        let (delete, keep) = plan(&inv, None);
        let names = |v: &[&Rendered]| v.iter().map(|r| r.name.clone()).collect::<Vec<_>>();
        assert_eq!(names(&delete), ["rendered-worker-a", "rendered-infra-y"], "oldest first");
        assert_eq!(keep.len(), 4);
        let (delete, _) = plan(&inv, Some(1));
        assert_eq!(names(&delete), ["rendered-worker-a"], "--count: the oldest first");
        let (delete, _) = plan(&inv, Some(0));
        assert!(delete.is_empty());
    }

    #[test]
    fn the_pool_of_a_config_without_an_owner_comes_from_its_name() {
        assert_eq!(owner_pool(&rendered("rendered-infra-edge-0123abcd", "", None)).as_deref(), Some("infra-edge"));
        assert_eq!(owner_pool(&rendered("rendered-worker", "", None)).as_deref(), Some("worker"));
        assert_eq!(owner_pool(&rendered("99-worker-ssh", "", None)), None);
    }
}
