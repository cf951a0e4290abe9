//! The drain controller, first cut: answers an agent's `desiredDrain` request by cordoning
//! (`drain-<config>`) or uncordoning (`uncordon-<config>`) the Node and writing the same value to
//! `lastAppliedDrain`. Disruption budgets, drain hooks and timeouts belong to the rollout work;
//! this is the acknowledgement the agent's handshake needs.

use crate::resources::NODE;
use crate::server::objects;
use crate::store::{revision_of, Key, Store, StoreError};
use aloft_api::annotations as ann;
use serde_json::Value;
use std::sync::Arc;

/// Answers each Node event by itself (no full list per event), with a full pass at start and after
/// a broken watch.
pub async fn run(store: Arc<dyn Store>) {
    loop {
        if let Err(e) = follow(&store).await {
            tracing::warn!(controller = "drain", error = %e, "controller restarting");
        }
        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    }
}

async fn follow(store: &Arc<dyn Store>) -> Result<(), StoreError> {
    use futures::StreamExt;
    let from = store.revision().await?;
    let mut events = store.watch(crate::store::WatchFilter::resource(&NODE.store_key()), from).await?;
    reconcile_all(store).await?;
    while let Some(ev) = events.next().await {
        let ev = ev?;
        if ev.kind != crate::store::EventType::Deleted {
            answer(store, &ev.object).await?;
        }
    }
    Ok(())
}

/// What to write for a node, if anything: (unschedulable, lastAppliedDrain).
pub fn decide(node: &Value) -> Option<(bool, String)> {
    let ann = node.pointer("/metadata/annotations")?;
    let want = ann.get(ann::DESIRED_DRAIN)?.as_str()?;
    let done = ann.get(ann::LAST_APPLIED_DRAIN).and_then(Value::as_str).unwrap_or("");
    if want.is_empty() || want == done {
        return None;
    }
    if want.starts_with("drain-") {
        Some((true, want.to_string()))
    } else if want.starts_with("uncordon-") {
        Some((false, want.to_string()))
    } else {
        None
    }
}

pub async fn reconcile_all(store: &Arc<dyn Store>) -> Result<(), StoreError> {
    for node in store.list(&NODE.store_key(), None).await?.items {
        answer(store, &node).await?;
    }
    Ok(())
}

/// Cordon or uncordon one node and acknowledge its request, if it has one pending.
async fn answer(store: &Arc<dyn Store>, node: &Value) -> Result<(), StoreError> {
    let Some((cordon, applied)) = decide(node) else { return Ok(()) };
    let mut next = node.clone();
    if cordon {
        next["spec"]["unschedulable"] = true.into();
    } else if let Some(spec) = next.get_mut("spec").and_then(Value::as_object_mut) {
        spec.remove("unschedulable");
    }
    next["metadata"]["annotations"][ann::LAST_APPLIED_DRAIN] = applied.clone().into();
    let name = objects::name_of(node).to_string();
    match store.update(&Key::cluster(&NODE.store_key(), &name), next, revision_of(node)).await {
        Ok(_) => tracing::info!(node = %name, %applied, "drain request acknowledged"),
        // A newer version of the node is on its way through the watch.
        Err(StoreError::Conflict { .. }) | Err(StoreError::NotFound(_)) => {}
        Err(e) => return Err(e),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn decisions() {
        let n = |want: &str, done: &str| json!({"metadata": {"annotations": {ann::DESIRED_DRAIN: want, ann::LAST_APPLIED_DRAIN: done}}});
        assert_eq!(decide(&n("drain-r2", "")), Some((true, "drain-r2".into())));
        assert_eq!(decide(&n("uncordon-r2", "drain-r2")), Some((false, "uncordon-r2".into())));
        assert_eq!(decide(&n("drain-r2", "drain-r2")), None);
        assert_eq!(decide(&n("bogus", "")), None);
        assert_eq!(decide(&json!({"metadata": {}})), None);
    }
}
