//! `aloftctl adm prune renderedmachineconfigs`, as OpenShift's `oc adm prune
//! renderedmachineconfigs`: MCO never deletes a rendered config, so every change of a pool's
//! MachineConfigs leaves one behind for good. This deletes the ones nothing uses, oldest first,
//! and only with `--confirm` (a dry run otherwise, as `oc` does).
//!
//! In use means named by a pool (`spec.configuration` or `status.configuration`) or by a node
//! (`currentConfig`, `desiredConfig`, or aloft's pre-staging annotations). A pool's target that
//! gets deleted anyway (a change racing the prune) is rendered again by the render controller;
//! a config only nodes name is never deleted, since nothing could render it again.

use crate::client::{resource_path, Client};
pub use crate::config_use::{owner_pool, rendered, users, Rendered, NODE_CONFIG_ANNOTATIONS};
use crate::resources::{self, ResourceType};
use anyhow::{bail, Result};
use serde_json::Value;

/// Every rendered config among `mcs`, with what uses it, by pool, oldest first.
pub fn inventory(mcs: &[Value], pools: &[Value], nodes: &[Value]) -> Vec<Rendered> {
    let mut out: Vec<Rendered> = mcs.iter().filter_map(|mc| rendered(mc, pools, nodes)).collect();
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

/// The rendered configs (of `pool`, when given) and what uses them; an unknown pool is an error.
async fn rendered_inventory(client: &Client, pool: Option<&str>) -> Result<Vec<Rendered>> {
    let items = |v: Value| v.get("items").and_then(Value::as_array).cloned().unwrap_or_default();
    // In pages, as every other list of aloftctl: a fleet's Nodes in one response would hold
    // the whole fleet at once, on both sides.
    let list = |rt: &'static ResourceType| async move {
        Ok::<_, anyhow::Error>(items(
            super::list_in_pages(client, &resource_path(rt.path_ref(), None, None), None).await?,
        ))
    };
    let pools = list(&resources::MACHINE_CONFIG_POOL).await?;
    if let Some(p) = pool {
        if !pools.iter().any(|v| v.pointer("/metadata/name").and_then(Value::as_str) == Some(p)) {
            bail!("machineconfigpool {p:?} not found (aloftctl get mcp lists them)");
        }
    }
    let (mcs, nodes) = (list(&resources::MACHINE_CONFIG).await?, list(&resources::NODE).await?);
    let mut inv = inventory(&mcs, &pools, &nodes);
    inv.retain(|r| pool.is_none_or(|p| r.pool == p));
    Ok(inv)
}

pub(super) async fn list_rendered(client: &Client, pool: Option<&str>, in_use: Option<bool>) -> Result<()> {
    let inv = rendered_inventory(client, pool).await?;
    let mut last_pool = None;
    for r in inv.iter().filter(|r| in_use.is_none_or(|u| r.in_use() == u)) {
        if last_pool != Some(&r.pool) {
            println!("{}", r.pool);
            last_pool = Some(&r.pool);
        }
        println!("  {} -- {} (Currently in use: {})", r.name, r.created, r.in_use());
    }
    if last_pool.is_none() {
        eprintln!("No rendered MachineConfigs found.");
    }
    Ok(())
}

pub(super) async fn prune_rendered(
    client: &Client,
    pool: Option<&str>,
    count: Option<usize>,
    confirm: bool,
) -> Result<()> {
    let inv = rendered_inventory(client, pool).await?;
    let (delete, keep) = plan(&inv, count);
    let dry = if confirm { "" } else { "DRY RUN: " };
    if !confirm {
        println!("Dry run enabled - no modifications will be made. Add --confirm to remove rendered machine configs.");
    }
    for r in &keep {
        println!(
            "{dry}Skipping deletion of rendered MachineConfig {} as it's currently in use ({})",
            r.name,
            r.used_by()
        );
    }
    let mut failed = 0;
    for r in &delete {
        if confirm {
            let path = resource_path(resources::MACHINE_CONFIG.path_ref(), None, Some(&r.name));
            let reply = client.call(reqwest::Method::DELETE, &path, None, None).await?;
            // Gone already (another prune) is what was wanted.
            if reply.code != 404 {
                if let Err(e) = reply.into_result() {
                    eprintln!("error: deleting rendered MachineConfig {}: {e}", r.name);
                    failed += 1;
                    continue;
                }
            }
        }
        println!("{dry}Deleted rendered MachineConfig {}", r.name);
    }
    if delete.is_empty() {
        println!("No unused rendered MachineConfigs to delete.");
    }
    if failed > 0 {
        bail!("{failed} rendered MachineConfig(s) not deleted");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use aloft_api::annotations as ann;
    use serde_json::json;

    #[test]
    fn a_fleets_worth_of_users_is_summarised() {
        let r = |pools: &[(&str, &'static str)], nodes: &[&str]| Rendered {
            name: "rendered-worker-a".into(),
            pool: "worker".into(),
            created: String::new(),
            pools: pools.iter().map(|(p, w)| (p.to_string(), *w)).collect(),
            nodes: nodes.iter().map(|n| n.to_string()).collect(),
        };
        assert_eq!(r(&[("worker", "spec"), ("worker", "status")], &[]).used_by(), "pool worker (spec, status)");
        assert_eq!(r(&[], &["a", "b"]).used_by(), "2 nodes: a, b");
        let many: Vec<String> = (0..10_000).map(|i| format!("n{i:05}")).collect();
        let many: Vec<&str> = many.iter().map(String::as_str).collect();
        assert_eq!(
            r(&[("worker", "spec")], &many).used_by(),
            "pool worker (spec), 10000 nodes: n00000, n00001, n00002, …"
        );
        assert!(!r(&[], &[]).in_use());
    }

    /// A rendered config, as the render controller writes it (its version annotation).
    fn rendered(name: &str, created: &str, owner: Option<&str>) -> Value {
        let mut mc = json!({"metadata": {"name": name, "creationTimestamp": created,
            "annotations": {ann::GENERATED_BY: "aloft-0.1.0"}}});
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
            // Not rendered: users' configs, never candidates (whatever their names).
            json!({"metadata": {"name": "50-worker-chrony", "creationTimestamp": "2020-01-01T00:00:00Z"}}),
            json!({"metadata": {"name": "rendered-my-tweaks", "creationTimestamp": "2020-01-01T00:00:00Z"}}),
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
        assert_eq!(x.used_by(), "node n1", "named twice by n1, listed once");
        let c = inv.iter().find(|r| r.name == "rendered-worker-c").unwrap();
        assert_eq!(c.used_by(), "pool worker (status)");

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
        let users = json!({"metadata": {"name": "rendered-my-tweaks"}});
        assert_eq!(owner_pool(&users), None, "a user's config, named like a rendered one: a pool input");
    }
}
