//! OperatorGroups: their `status.namespaces`, and the one rule of theirs that matters where no
//! operator pod is scoped: a namespace with two or more cannot be installed into (OLM's
//! TooManyOperatorGroups), since nothing says which one an operator belongs to.

use super::write_if_changed;
use crate::resources::OPERATOR_GROUP;
use crate::server::objects;
use crate::store::{Key, Store, StoreError};
use aloft_api::olm::OperatorGroup;
use serde_json::Value;
use std::sync::Arc;

/// Write each group's `status.namespaces` (its targets, or `[""]` for all) when it differs.
pub async fn reconcile(store: &Arc<dyn Store>) -> Result<(), StoreError> {
    for raw in store.list(&OPERATOR_GROUP.store_key(), None).await?.items {
        let Ok(og) = serde_json::from_value::<OperatorGroup>(raw.clone()) else { continue };
        let namespaces = og.namespaces();
        if og.status.as_ref().is_some_and(|s| s.namespaces == namespaces) {
            continue;
        }
        let mut next = raw.clone();
        next["status"] = serde_json::json!({"namespaces": namespaces, "lastUpdated": objects::now()});
        let key =
            Key::new(&OPERATOR_GROUP.store_key(), og.metadata.namespace.as_deref().unwrap_or(""), &og.metadata.name);
        write_if_changed(store, &key, &raw, next).await?;
    }
    Ok(())
}

/// Why nothing may be installed into `namespace` now, if it has more than one OperatorGroup.
pub async fn too_many(store: &Arc<dyn Store>, namespace: &str) -> Result<Option<String>, StoreError> {
    let mut names: Vec<String> = store
        .list(&OPERATOR_GROUP.store_key(), None)
        .await?
        .items
        .iter()
        .filter(|og| og.pointer("/metadata/namespace").and_then(Value::as_str) == Some(namespace))
        .filter(|og| og.pointer("/metadata/deletionTimestamp").is_none())
        .map(|og| objects::name_of(og).to_string())
        .collect();
    if names.len() < 2 {
        return Ok(None);
    }
    names.sort();
    Ok(Some(format!(
        "namespace {namespace:?} has {} OperatorGroups ({}): csv created in namespace with multiple operatorgroups, \
         can't pick one automatically; delete all but one and the plan goes on",
        names.len(),
        names.join(", ")
    )))
}
