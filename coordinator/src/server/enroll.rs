//! Node enrollment: `POST /aloft/v1/enroll` with a bootstrap token (or an admin's) and
//! `{"nodeName": "...", "labels": {...}}`. The coordinator creates the Node (or merges the labels
//! into an existing one), mints the node's own credential (role `node:<name>`) and returns it
//! once.
//!
//! A name whose Node exists and already has a node credential is refused (409): a second host
//! under the same name (a cloned image, a duplicated hostname) would otherwise silently take the
//! Node over and lock the first agent out. OpenShift's machine-approver likewise refuses a
//! bootstrap CSR for a node name that already exists. To replace a host on purpose, delete its
//! Node (`kubectl delete node NAME`, which revokes the credential) or revoke the credential
//! (`aloft-coordinator token revoke --name node:NAME`) first. A credential left over from a Node
//! that no longer exists is replaced (the Node is created afresh).

use super::error::{cause, ApiError};
use super::{objects, validate, SharedCtx};
use crate::auth::{self, Identity, Role};
use crate::controllers::events::{reasons, EventType, Involved};
use crate::resources::NODE;
use crate::store::{Key, StoreError, Tokens};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::sync::Arc;

/// What an agent sends.
#[derive(Debug, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct EnrollRequest {
    pub node_name: String,
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
}

/// What it gets back.
#[derive(Debug, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EnrollResponse {
    pub node_name: String,
    pub token: String,
}

fn check_labels(labels: &BTreeMap<String, String>) -> Vec<aloft_api::StatusCause> {
    // Labels, checked as labels (the message said "invalid label selector").
    labels
        .iter()
        .flat_map(|(k, v)| {
            let key = aloft_api::selector::label_key_errors(k).into_iter().map(move |m| format!("key {k:?}: {m}"));
            let value =
                aloft_api::selector::label_value_errors(v).into_iter().map(move |m| format!("value {v:?}: {m}"));
            key.chain(value)
                .map(move |m| cause(&format!("labels[{k}]"), "FieldValueInvalid", format!("invalid label: {m}")))
        })
        .collect()
}

/// The names being enrolled now. An enrollment reads whether the name has a Node and a
/// credential, then claims one, then writes the Node: two at once under one name interleaved,
/// and the second took the first's fresh credential (no Node yet) for a stale one and deleted
/// it, so both hosts were told 201 and the first found its credential gone at its next request.
/// One enrollment of a name at a time closes that; the other is refused as a second host.
#[derive(Default)]
pub struct InFlight(std::sync::Mutex<std::collections::HashSet<String>>);

/// A name held by [`InFlight::hold`]; let go when dropped, however the enrollment ends.
pub struct Held<'a> {
    names: &'a InFlight,
    name: String,
}

impl InFlight {
    /// Hold `name`, or `None` while another enrollment holds it.
    pub fn hold(&self, name: &str) -> Option<Held<'_>> {
        let mut names = self.0.lock().unwrap_or_else(|e| e.into_inner());
        names.insert(name.to_string()).then(|| Held { names: self, name: name.to_string() })
    }
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        self.names.0.lock().unwrap_or_else(|e| e.into_inner()).remove(&self.name);
    }
}

/// Handle an enrollment. `tokens` is where the node credential is stored.
pub async fn enroll(ctx: SharedCtx, tokens: Arc<dyn Tokens>, who: Identity, body: &[u8]) -> Result<Response, ApiError> {
    if auth::decide_path(&who, "post", "/aloft/v1/enroll") == auth::Decision::Deny {
        return Err(ApiError::forbidden(&who, "create", "enrollments", None, None));
    }
    let req: EnrollRequest = serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("malformed enrollment request: {e}")))?;
    let mut causes = validate::name_causes(&req.node_name);
    for c in &mut causes {
        c.field = "nodeName".into();
    }
    causes.extend(check_labels(&req.labels));
    if !causes.is_empty() {
        return Err(ApiError::invalid("Enrollment", &req.node_name, causes));
    }
    let Some(_held) = ctx.enrolling.hold(&req.node_name) else {
        return Err(refuse(&ctx, &req.node_name, &who.name));
    };
    let key = Key::cluster(&NODE.store_key(), &req.node_name);
    if let Role::Bootstrap(scope) = &who.role {
        // Judged on the labels the Node ends up with, as NodeRestriction judges them: an
        // existing Node's (one made by hand, or whose credential was revoked to replace its
        // host) would otherwise hand a worker's token a master's credential.
        let stored = ctx.store.get(&key).await.map_err(|e| ApiError::from_store(e, "nodes", &req.node_name))?;
        let mut labels: BTreeMap<String, String> = stored
            .as_ref()
            .and_then(|n| n.pointer("/metadata/labels"))
            .and_then(Value::as_object)
            .map(|m| m.iter().map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string())).collect())
            .unwrap_or_default();
        labels.extend(req.labels.iter().map(|(k, v)| (k.clone(), v.clone())));
        let refused: Vec<String> =
            labels.iter().filter(|(k, v)| !scope.allows(k, v)).map(|(k, v)| format!("{k}={v}")).collect();
        if !refused.is_empty() {
            let mut e = ApiError::forbidden(&who, "create", "enrollments", None, None);
            e.status.message = format!(
                "enrollment of {:?} is forbidden: bootstrap token {:?} may not give the label(s) {} (asked for, or on the \
                 Node of that name already): labels of \
                 Kubernetes' own namespaces choose a node's pool, and so the configs and secrets it reads. Make a \
                 token that may: aloft-coordinator token create --name NAME --role bootstrap --labels {}",
                req.node_name,
                who.name,
                refused.join(", "),
                refused.join(",")
            );
            tracing::warn!(node = %req.node_name, by = %who.name, labels = %refused.join(","), "enrollment refused: labels the bootstrap token may not give");
            return Err(e);
        }
    }
    let role = Role::Node(req.node_name.clone());
    let token_name = role.to_string();
    let existing_node =
        ctx.store.get(&key).await.map_err(|e| ApiError::from_store(e, "nodes", &req.node_name))?.is_some();
    let stale = tokens.token_hash_of(token_name.clone()).await.map_err(|e| ApiError::internal(e.to_string()))?;
    if let (true, Some(_)) = (existing_node, &stale) {
        return Err(refuse(&ctx, &req.node_name, &who.name));
    }
    if let Some(hash) = stale {
        // The Node is gone but its credential was not revoked (deleted before deletion revoked
        // credentials): nothing left to take over.
        tokens.delete_token(token_name.clone(), Some(hash)).await.map_err(|e| ApiError::internal(e.to_string()))?;
    }
    // Claim the credential before touching the Node: of two concurrent enrollments only one
    // gets it.
    let token = auth::generate_token();
    let hash = auth::token_hash(&token);
    if !tokens
        .claim_token(hash.clone(), token_name.clone(), role.to_string())
        .await
        .map_err(|e| ApiError::internal(e.to_string()))?
    {
        return Err(refuse(&ctx, &req.node_name, &who.name));
    }
    if let Err(e) = put_node(&ctx, &key, &req).await {
        let _ = tokens.delete_token(token_name, Some(hash)).await;
        return Err(e);
    }
    tracing::info!(node = %req.node_name, by = %who.name, "node enrolled");
    Ok((StatusCode::CREATED, Json(EnrollResponse { node_name: req.node_name, token })).into_response())
}

/// The refusal of an enrollment under a name whose Node has an enrolled agent: a WARN, a
/// Warning Event on the Node, and a 409 that says how to replace the host on purpose.
fn refuse(ctx: &SharedCtx, node: &str, by: &str) -> ApiError {
    // After kube's "Operation cannot be fulfilled on nodes \"<name>\": ", which names the node.
    let message = format!(
        "the node is already enrolled: another host holds its credential (two hosts with one \
         name?). To replace the host on purpose, stop its agent and run `kubectl delete node {node}` \
         (or `aloft-coordinator token revoke --name node:{node}`), then enroll again"
    );
    tracing::warn!(node, by, "enrollment refused: the node is already enrolled");
    ctx.events.emit(
        &Involved::node(node),
        EventType::Warning,
        reasons::ENROLLMENT_REFUSED,
        &format!("an enrollment as {node:?} (by {by}) was refused: the node already has an enrolled agent"),
    );
    ApiError::conflict("nodes", node, &message)
}

/// Create the Node with `req`'s labels, or merge them into the existing one (compare-and-swap,
/// retried).
async fn put_node(ctx: &SharedCtx, key: &Key, req: &EnrollRequest) -> Result<(), ApiError> {
    let labels: serde_json::Map<String, Value> =
        req.labels.iter().map(|(k, v)| (k.clone(), v.clone().into())).collect();
    // Create the Node, or merge the labels into the existing one (compare-and-swap, retried).
    let mut done = false;
    for _ in 0..8 {
        match ctx.store.get(key).await.map_err(|e| ApiError::from_store(e, "nodes", &req.node_name))? {
            None => {
                let mut obj =
                    json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": req.node_name, "labels": labels}});
                objects::prepare_create(&mut obj, "");
                match ctx.store.create(key, obj).await {
                    Ok(_) => {
                        done = true;
                        break;
                    }
                    Err(StoreError::AlreadyExists(_)) => continue,
                    Err(e) => return Err(ApiError::from_store(e, "nodes", &req.node_name)),
                }
            }
            Some(stored) => {
                let mut next = Value::clone(&stored);
                json_patch::merge(&mut next, &json!({"metadata": {"labels": labels}}));
                // A new host under an old name reports its own architecture, which a node's
                // credential may set only while none is reported (auth::keep_node_arch).
                if let Some(info) = next.pointer_mut("/status/nodeInfo").and_then(Value::as_object_mut) {
                    info.remove("architecture");
                }
                if next == *stored {
                    done = true;
                    break;
                }
                match ctx.store.update(key, next, crate::store::revision_of(&stored)).await {
                    Ok(_) => {
                        done = true;
                        break;
                    }
                    Err(StoreError::Conflict { .. }) => continue,
                    Err(e) => return Err(ApiError::from_store(e, "nodes", &req.node_name)),
                }
            }
        }
    }
    if !done {
        return Err(ApiError::conflict("nodes", &req.node_name, "too many concurrent writers; try again"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A bad label is called a label (it was "invalid label selector"), key and value apart.
    #[test]
    fn bad_labels_are_named_as_labels() {
        let labels: BTreeMap<String, String> =
            [("bad key".to_string(), "x".to_string()), ("ok".to_string(), "bad value!".to_string())].into();
        let causes = check_labels(&labels);
        assert_eq!(causes.len(), 2, "{causes:?}");
        assert_eq!(causes[0].field, "labels[bad key]");
        assert!(causes[0].message.starts_with("invalid label: key \"bad key\""), "{causes:?}");
        assert!(causes[1].message.starts_with("invalid label: value \"bad value!\""), "{causes:?}");
        assert!(causes.iter().all(|c| !c.message.contains("selector")), "{causes:?}");
        let good: BTreeMap<String, String> = [("node-role.kubernetes.io/worker".to_string(), String::new())].into();
        assert!(check_labels(&good).is_empty());
    }
}
