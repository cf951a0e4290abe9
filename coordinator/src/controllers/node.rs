//! The node controller: for every pool, choose which nodes move to the pool's rendered config
//! (MCO's rules: maxUnavailable, candidates by zone then age, paused pools untouched), set their
//! `desiredConfig`, and compute the pool's status (counts and the Updated / Updating /
//! NodeDegraded / Degraded conditions, with MCO's messages).

use super::pools::{self, NodeFacts};
use crate::resources::{MACHINE_CONFIG_POOL, NODE};
use crate::server::objects;
use crate::store::{revision_of, Key, Store, StoreError, WatchFilter};
use aloft_api::annotations as ann;
use aloft_api::machineconfig::conditions as cond;
use aloft_api::meta::{find_condition, set_condition};
use aloft_api::{Condition, MachineConfigPool, MachineConfigPoolStatus, Node};
use serde_json::Value;
use std::collections::BTreeMap;
use std::sync::Arc;

/// Watch nodes and pools; reconcile after every batch of events, from an in-memory cache that
/// each event updates (an informer): a batch costs the nodes that changed, not a re-read and
/// re-parse of the whole fleet.
pub async fn run(store: Arc<dyn Store>) {
    loop {
        if let Err(e) = follow(&store).await {
            tracing::warn!(controller = "node", error = %e, "controller restarting");
        }
        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    }
}

/// Objects of one resource by name, kept both raw (to write back exactly) and typed.
struct Cache<T> {
    items: BTreeMap<String, (Value, T)>,
}

impl<T: serde::de::DeserializeOwned> Cache<T> {
    async fn load(store: &Arc<dyn Store>, resource: &str) -> Result<Self, StoreError> {
        let mut c = Cache { items: BTreeMap::new() };
        for v in store.list(resource, None).await?.items {
            c.put(v);
        }
        Ok(c)
    }

    fn put(&mut self, v: Value) {
        let name = objects::name_of(&v).to_string();
        match serde_json::from_value::<T>(v.clone()) {
            Ok(t) => {
                self.items.insert(name, (v, t));
            }
            Err(e) => {
                tracing::warn!(%name, error = %e, "ignoring an object that does not parse");
                self.items.remove(&name);
            }
        }
    }

    fn apply(&mut self, ev: &crate::store::Event) {
        match ev.kind {
            crate::store::EventType::Deleted => {
                self.items.remove(&ev.key.name);
            }
            _ => {
                // Replayed events can be older than what the initial list returned.
                let cached = self.items.get(&ev.key.name).and_then(|(v, _)| revision_of(v));
                if cached.is_none_or(|c| c < ev.revision) {
                    self.put((*ev.object).clone());
                }
            }
        }
    }
}

async fn follow(store: &Arc<dyn Store>) -> Result<(), StoreError> {
    let from = store.revision().await?;
    let node_key = NODE.store_key();
    let watches = vec![
        store.watch(WatchFilter::resource(&node_key), from).await?,
        store.watch(WatchFilter::resource(&MACHINE_CONFIG_POOL.store_key()), from).await?,
    ];
    let mut events = futures::stream::select_all(watches);
    let mut nodes: Cache<Node> = Cache::load(store, &node_key).await?;
    let mut pools: Cache<MachineConfigPool> = Cache::load(store, &MACHINE_CONFIG_POOL.store_key()).await?;
    // The lists may be newer than `from`; replayed events then only re-put the same objects.
    reconcile(store, &nodes, &pools).await?;
    while let Some(batch) = super::next_batch(&mut events).await? {
        for ev in &batch {
            if ev.key.resource == node_key {
                nodes.apply(ev);
            } else {
                pools.apply(ev);
            }
        }
        reconcile(store, &nodes, &pools).await?;
    }
    Ok(())
}

/// One pass over every pool, from the cache. Writes go to the store; their events update the
/// cache on the next batch.
async fn reconcile(
    store: &Arc<dyn Store>,
    nodes: &Cache<Node>,
    pools: &Cache<MachineConfigPool>,
) -> Result<(), StoreError> {
    let node_list: Vec<&(Value, Node)> = nodes.items.values().collect();
    let typed_nodes: Vec<Node> = node_list.iter().map(|(_, n)| n.clone()).collect();
    let typed_pools: Vec<MachineConfigPool> = pools.items.values().map(|(_, p)| p.clone()).collect();
    let (members, errors) = pools::membership(&typed_pools, &typed_nodes);
    for (raw_pool, pool) in pools.items.values() {
        let idx = members.get(&pool.metadata.name).cloned().unwrap_or_default();
        let target = pool.spec.configuration.as_ref().map(|c| c.name.clone()).unwrap_or_default();
        let mut facts: Vec<NodeFacts> = idx.iter().map(|&i| NodeFacts::of(&typed_nodes[i])).collect();
        if !pool.spec.paused && !target.is_empty() {
            for i in choose(pool, &typed_nodes, &idx, &facts, &target) {
                let node = &typed_nodes[idx[i]];
                if set_desired(store, &node_list[idx[i]].0, &target).await? {
                    tracing::info!(pool = %pool.metadata.name, node = %node.metadata.name, config = %target, "node picked for update");
                    facts[i].desired = target.clone();
                }
            }
        }
        let members: Vec<(&Node, &NodeFacts)> = idx.iter().map(|&i| &typed_nodes[i]).zip(&facts).collect();
        let status = compute_status(pool, &members, &target, errors.get(&pool.metadata.name));
        write_status(store, raw_pool, status).await?;
    }
    Ok(())
}

/// Indexes (into `idx`/`facts`) of the nodes to move to `target` now.
fn choose(pool: &MachineConfigPool, nodes: &[Node], idx: &[usize], facts: &[NodeFacts], target: &str) -> Vec<usize> {
    let max = pools::max_unavailable(pool.spec.max_unavailable.as_ref(), idx.len());
    let unavailable = facts.iter().filter(|f| f.unavailable()).count();
    let failing_on_target = facts.iter().filter(|f| f.degraded() && f.desired == target).count();
    let capacity = max.saturating_sub(unavailable + failing_on_target);
    if capacity == 0 {
        return Vec::new();
    }
    let mut candidates: Vec<usize> = (0..idx.len()).filter(|&i| facts[i].desired != target && facts[i].ready).collect();
    // Sort in node-index space, then map back.
    let mut node_idx: Vec<usize> = candidates.iter().map(|&i| idx[i]).collect();
    pools::sort_candidates(nodes, &mut node_idx);
    candidates = node_idx.iter().filter_map(|n| idx.iter().position(|x| x == n)).collect();
    candidates.truncate(capacity);
    candidates
}

/// Set a node's desiredConfig annotation; false when someone else changed the node first (the
/// next pass decides again).
async fn set_desired(store: &Arc<dyn Store>, raw: &Value, target: &str) -> Result<bool, StoreError> {
    let mut next = raw.clone();
    if !next["metadata"]["annotations"].is_object() {
        next["metadata"]["annotations"] = Value::Object(Default::default());
    }
    next["metadata"]["annotations"][ann::DESIRED_CONFIG] = target.into();
    let key = Key::cluster(&NODE.store_key(), objects::name_of(raw));
    match store.update(&key, next, revision_of(raw)).await {
        Ok(_) => Ok(true),
        Err(StoreError::Conflict { .. }) | Err(StoreError::NotFound(_)) => Ok(false),
        Err(e) => Err(e),
    }
}

fn condition(type_: &str, on: bool, reason: &str, message: String) -> Condition {
    Condition {
        type_: type_.into(),
        status: if on { "True" } else { "False" }.into(),
        reason: reason.into(),
        message,
        ..Default::default()
    }
}

/// MCO's calculateStatus.
fn compute_status(
    pool: &MachineConfigPool,
    members: &[(&Node, &NodeFacts)],
    target: &str,
    membership_error: Option<&String>,
) -> MachineConfigPoolStatus {
    let mut st = pool.status.clone().unwrap_or_default();
    let total = members.len();
    let updated = members.iter().filter(|(_, f)| f.updated_to(target)).count();
    let ready = members.iter().filter(|(_, f)| f.updated_to(target) && f.ready).count();
    let unavailable = members.iter().filter(|(_, f)| f.unavailable()).count();
    let degraded: Vec<&(&Node, &NodeFacts)> = members.iter().filter(|(_, f)| f.degraded()).collect();
    st.machine_count = total as i64;
    st.updated_machine_count = updated as i64;
    st.ready_machine_count = ready as i64;
    st.unavailable_machine_count = unavailable as i64;
    st.degraded_machine_count = degraded.len() as i64;
    st.observed_generation = pool.metadata.generation;
    let now = objects::now();
    let all_updated = !target.is_empty() && updated == total && ready == total && unavailable == 0;
    if all_updated {
        st.configuration = pool.spec.configuration.clone();
    }
    set_condition(
        &mut st.conditions,
        condition(
            cond::UPDATED,
            all_updated,
            "",
            if all_updated { format!("All nodes are updated with {target}") } else { String::new() },
        ),
        &now,
    );
    let updating = if all_updated {
        condition(cond::UPDATING, false, "", String::new())
    } else if pool.spec.paused {
        condition(cond::UPDATING, false, "", "Pool is paused".into())
    } else if target.is_empty() {
        condition(cond::UPDATING, false, "", "Waiting for the pool to render".into())
    } else {
        condition(cond::UPDATING, true, "", format!("All nodes are updating to {target}"))
    };
    set_condition(&mut st.conditions, updating, &now);
    let node_degraded = if let Some(e) = membership_error {
        condition(cond::NODE_DEGRADED, true, "NodeInMultiplePools", e.clone())
    } else if degraded.is_empty() {
        condition(cond::NODE_DEGRADED, false, "", String::new())
    } else {
        let msgs: Vec<String> =
            degraded.iter().map(|(n, f)| format!("Node {} is reporting: {:?}", n.metadata.name, f.reason)).collect();
        condition(
            cond::NODE_DEGRADED,
            true,
            &format!("{} nodes are reporting degraded status on sync", degraded.len()),
            msgs.join(", "),
        )
    };
    let nd = node_degraded.is_true();
    set_condition(&mut st.conditions, node_degraded, &now);
    let render = find_condition(&st.conditions, cond::RENDER_DEGRADED).filter(|c| c.is_true()).cloned();
    let degraded_cond = match (&render, nd) {
        (Some(r), _) => condition(cond::DEGRADED, true, "RenderFailed", r.message.clone()),
        (None, true) => condition(
            cond::DEGRADED,
            true,
            "NodeDegraded",
            find_condition(&st.conditions, cond::NODE_DEGRADED).map(|c| c.message.clone()).unwrap_or_default(),
        ),
        (None, false) => condition(cond::DEGRADED, false, "", String::new()),
    };
    set_condition(&mut st.conditions, degraded_cond, &now);
    st
}

async fn write_status(store: &Arc<dyn Store>, raw: &Value, status: MachineConfigPoolStatus) -> Result<(), StoreError> {
    let new = serde_json::to_value(&status).map_err(|e| StoreError::Backend(e.to_string()))?;
    if raw.get("status") == Some(&new) {
        return Ok(());
    }
    let mut next = raw.clone();
    next["status"] = new;
    let key = Key::cluster(&MACHINE_CONFIG_POOL.store_key(), objects::name_of(raw));
    match store.update(&key, next, revision_of(raw)).await {
        Ok(_) | Err(StoreError::Conflict { .. }) | Err(StoreError::NotFound(_)) => Ok(()),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn node(name: &str, current: &str, desired: &str, state: &str, ready: bool) -> Node {
        serde_json::from_value(json!({
            "metadata": {"name": name, "labels": {"node-role.kubernetes.io/worker": ""}, "annotations": {
                ann::CURRENT_CONFIG: current, ann::DESIRED_CONFIG: desired, ann::STATE: state, ann::REASON: if state == "Degraded" { "disk full" } else { "" }}},
            "status": {"conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}]},
        }))
        .unwrap()
    }
    fn pool(max: serde_json::Value, paused: bool) -> MachineConfigPool {
        serde_json::from_value(json!({"metadata": {"name": "worker"}, "spec": {"maxUnavailable": max, "paused": paused, "configuration": {"name": "r2"}}})).unwrap()
    }

    #[test]
    fn picks_within_max_unavailable() {
        let nodes = vec![
            node("a", "r1", "r1", "Done", true),
            node("b", "r1", "r1", "Done", true),
            node("c", "r1", "r1", "Done", true),
        ];
        let idx = vec![0, 1, 2];
        let facts: Vec<NodeFacts> = nodes.iter().map(NodeFacts::of).collect();
        assert_eq!(choose(&pool(json!(1), false), &nodes, &idx, &facts, "r2").len(), 1);
        assert_eq!(choose(&pool(json!(2), false), &nodes, &idx, &facts, "r2").len(), 2);
        assert_eq!(choose(&pool(json!("50%"), false), &nodes, &idx, &facts, "r2").len(), 1);
        // One already updating: capacity used up at maxUnavailable 1.
        let nodes = vec![
            node("a", "r1", "r2", "Working", true),
            node("b", "r1", "r1", "Done", true),
            node("c", "r1", "r1", "Done", false),
        ];
        let facts: Vec<NodeFacts> = nodes.iter().map(NodeFacts::of).collect();
        assert!(choose(&pool(json!(1), false), &nodes, &idx, &facts, "r2").is_empty());
        // Not-ready nodes count against the budget and are never candidates.
        assert_eq!(choose(&pool(json!(3), false), &nodes, &idx, &facts, "r2"), vec![1]);
        // A node failing on the target stops the rollout at maxUnavailable 1.
        let nodes = vec![node("a", "r1", "r2", "Degraded", true), node("b", "r1", "r1", "Done", true)];
        let facts: Vec<NodeFacts> = nodes.iter().map(NodeFacts::of).collect();
        assert!(choose(&pool(json!(1), false), &nodes, &[0, 1], &facts, "r2").is_empty());
    }

    #[test]
    fn status_like_mco() {
        let p = pool(json!(1), false);
        let nodes = [
            node("a", "r2", "r2", "Done", true),
            node("b", "r1", "r2", "Degraded", true),
            node("c", "r1", "r1", "Done", true),
        ];
        let facts: Vec<NodeFacts> = nodes.iter().map(NodeFacts::of).collect();
        let members: Vec<(&Node, &NodeFacts)> = nodes.iter().zip(&facts).collect();
        let st = compute_status(&p, &members, "r2", None);
        assert_eq!(
            (
                st.machine_count,
                st.updated_machine_count,
                st.ready_machine_count,
                st.degraded_machine_count,
                st.unavailable_machine_count
            ),
            (3, 1, 1, 1, 0)
        );
        let c = |t| find_condition(&st.conditions, t).unwrap().clone();
        assert!(!c(cond::UPDATED).is_true() && c(cond::UPDATING).is_true());
        assert_eq!(c(cond::NODE_DEGRADED).reason, "1 nodes are reporting degraded status on sync");
        assert_eq!(c(cond::NODE_DEGRADED).message, "Node b is reporting: \"disk full\"");
        assert!(c(cond::DEGRADED).is_true());
        assert!(st.configuration.is_none(), "status.configuration moves only when all are updated");
        let done: Vec<Node> = vec![node("a", "r2", "r2", "Done", true)];
        let facts: Vec<NodeFacts> = done.iter().map(NodeFacts::of).collect();
        let members: Vec<(&Node, &NodeFacts)> = done.iter().zip(&facts).collect();
        let st = compute_status(&p, &members, "r2", None);
        assert!(find_condition(&st.conditions, cond::UPDATED).unwrap().is_true());
        assert_eq!(st.configuration.unwrap().name, "r2");
        let paused = compute_status(&pool(json!(1), true), &[], "", None);
        assert_eq!(find_condition(&paused.conditions, cond::UPDATING).unwrap().message, "Pool is paused");
    }
}
