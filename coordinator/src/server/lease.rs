//! A node's Lease, read-only. A kubelet renews `kube-node-lease/<node>` every 10 s and
//! `kubectl describe node` prints its holder and renew time; an aloft agent renews nothing (the
//! coordinator knows it is there from its open watch of its Node and its requests, see
//! [`crate::controllers::presence`]), so the Lease is made from that on each read: holder the
//! node, renewed now while its agent's watch is open, else at its last request or when its last
//! watch closed. Without it
//! every `kubectl describe node` said `Failed to get lease: the server could not find the
//! requested resource`. A Node no agent manages (made by hand) has no Lease, as a Node without a
//! kubelet has none; nor has an agent not seen since the coordinator started (presence is kept
//! in memory). Not listed in discovery, not writable: nothing else may rely on it.

use super::error::ApiError;
use super::Ctx;
use crate::auth::{Identity, Role};
use crate::controllers::presence::{AGENT_READY, STATUS_UNKNOWN};
use crate::resources::NODE;
use crate::store::Key;
use axum::http::{Method, StatusCode};
use axum::response::{IntoResponse, Json, Response};
use serde_json::{json, Value};

/// The namespace of node Leases, as in Kubernetes.
pub const NAMESPACE: &str = "kube-node-lease";

const RESOURCE: &str = "leases.coordination.k8s.io";

/// `GET` of node `name`'s Lease, for whoever may read that Node: the admin and viewers, and the
/// node itself.
pub async fn answer(
    ctx: &Ctx,
    who: &Identity,
    method: &Method,
    name: &str,
    watching: bool,
) -> Result<Response, ApiError> {
    if (*method != Method::GET && *method != Method::HEAD) || watching {
        return Err(ApiError::method_not_allowed(
            "node Leases are made by the coordinator on each read: only GET of one is served (no watch)",
        ));
    }
    let allowed = match &who.role {
        Role::Admin | Role::Viewer => true,
        Role::Node(own) => own == name,
        Role::Bootstrap(_) => false,
    };
    if !allowed {
        return Err(ApiError::forbidden(who, "get", RESOURCE, Some(NAMESPACE), Some(name)));
    }
    let not_found = || ApiError::not_found(RESOURCE, name);
    let stored = ctx
        .store
        .get(&Key::cluster(&NODE.store_key(), name))
        .await
        .map_err(|e| ApiError::internal(e.to_string()))?
        .ok_or_else(not_found)?;
    let seen_ago = ctx.presence.seen_ago(name, std::time::Instant::now());
    let lease = of(&stored, seen_ago, chrono::Utc::now()).ok_or_else(not_found)?;
    Ok((StatusCode::OK, Json(lease)).into_response())
}

/// The Lease of `node`, whose agent was last seen `seen_ago` before `now`; None for a Node no
/// agent manages or an agent not seen since the coordinator started.
fn of(node: &Value, seen_ago: Option<std::time::Duration>, now: chrono::DateTime<chrono::Utc>) -> Option<Value> {
    let ready_reason = node
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .and_then(|cs| cs.iter().find(|c| c["type"] == "Ready"))
        .and_then(|c| c["reason"].as_str());
    if !matches!(ready_reason, Some(AGENT_READY | STATUS_UNKNOWN)) {
        return None;
    }
    let renewed = now - chrono::Duration::from_std(seen_ago?).ok()?;
    let meta = &node["metadata"];
    Some(json!({
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {
            "name": meta["name"],
            "namespace": NAMESPACE,
            "creationTimestamp": meta["creationTimestamp"],
            "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": meta["name"], "uid": meta["uid"]}],
        },
        "spec": {
            "holderIdentity": meta["name"],
            // MicroTime, as a kubelet writes it.
            "renewTime": renewed.to_rfc3339_opts(chrono::SecondsFormat::Micros, true),
        },
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn node(reason: &str) -> Value {
        json!({"metadata": {"name": "n1", "uid": "u1", "creationTimestamp": "2026-01-01T00:00:00Z"},
            "status": {"conditions": [{"type": "Ready", "status": "True", "reason": reason}]}})
    }

    #[test]
    fn made_from_the_agents_presence() {
        let now = chrono::DateTime::parse_from_rfc3339("2026-11-30T12:00:00Z").unwrap().to_utc();
        let lease = of(&node(AGENT_READY), Some(Duration::ZERO), now).unwrap();
        assert_eq!(lease["spec"]["holderIdentity"], "n1");
        assert_eq!(lease["spec"]["renewTime"], "2026-11-30T12:00:00.000000Z");
        assert_eq!(lease["metadata"]["ownerReferences"][0]["uid"], "u1");
        let gone = of(&node(STATUS_UNKNOWN), Some(Duration::from_secs(90)), now).unwrap();
        assert_eq!(gone["spec"]["renewTime"], "2026-11-30T11:58:30.000000Z", "when its last watch closed");
        assert!(of(&node(AGENT_READY), None, now).is_none(), "not seen since the coordinator started");
        assert!(of(&node("KubeletReady"), Some(Duration::ZERO), now).is_none(), "no agent manages it");
        assert!(of(&json!({"metadata": {"name": "n1"}}), Some(Duration::ZERO), now).is_none());
    }
}
