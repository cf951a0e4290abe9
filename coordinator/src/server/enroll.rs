//! Node enrollment: `POST /aloft/v1/enroll` with a bootstrap token (or an admin's) and
//! `{"nodeName": "...", "labels": {...}}`. The coordinator creates the Node (or merges the labels
//! into an existing one), mints the node's own credential (role `node:<name>`) and returns it
//! once. Enrolling a name again replaces the node's credential: a reinstalled host comes back
//! under its name, and the old credential stops working.

use super::error::{cause, ApiError};
use super::{objects, validate, SharedCtx};
use crate::auth::{self, Identity, Role};
use crate::resources::NODE;
use crate::store::{Key, SqliteStore, StoreError};
use aloft_api::Selector;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use std::collections::BTreeMap;

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
    labels
        .iter()
        .filter_map(|(k, v)| {
            Selector::parse(&format!("{k}={v}"))
                .err()
                .map(|e| cause(&format!("labels[{k}]"), "FieldValueInvalid", e.to_string()))
        })
        .collect()
}

/// Handle an enrollment. `tokens` is where the node credential is stored.
pub async fn enroll(ctx: SharedCtx, tokens: SqliteStore, who: Identity, body: &[u8]) -> Result<Response, ApiError> {
    if !matches!(who.role, Role::Bootstrap | Role::Admin) {
        return Err(ApiError::forbidden(&who.name, "create", "enrollments", None));
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
    let key = Key::cluster(&NODE.store_key(), &req.node_name);
    let labels: serde_json::Map<String, Value> =
        req.labels.iter().map(|(k, v)| (k.clone(), v.clone().into())).collect();
    // Create the Node, or merge the labels into the existing one (compare-and-swap, retried).
    let mut done = false;
    for _ in 0..8 {
        match ctx.store.get(&key).await.map_err(|e| ApiError::from_store(e, "nodes", &req.node_name))? {
            None => {
                let mut obj =
                    json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": req.node_name, "labels": labels}});
                objects::prepare_create(&mut obj, "");
                match ctx.store.create(&key, obj).await {
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
                if next == *stored {
                    done = true;
                    break;
                }
                match ctx.store.update(&key, next, crate::store::revision_of(&stored)).await {
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
    let token = auth::generate_token();
    let role = Role::Node(req.node_name.clone());
    tokens
        .put_token(auth::token_hash(&token), role.to_string(), role.to_string())
        .await
        .map_err(|e| ApiError::internal(e.to_string()))?;
    tracing::info!(node = %req.node_name, by = %who.name, "node enrolled");
    Ok((StatusCode::CREATED, Json(EnrollResponse { node_name: req.node_name, token })).into_response())
}
