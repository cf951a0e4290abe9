//! Kubernetes core/v1 Events for the controllers' decisions (which node was picked, why nodes
//! wait, which budget blocked, drain hooks and timeouts), one per decision change, not one per
//! reconcile pass.
//!
//! The recorder remembers the last message per (object, reason) and writes only when it
//! changes. Event names are derived from the object, reason and message, so after a coordinator
//! restart (memory empty) the same decision finds its event and bumps `count` instead of adding
//! a duplicate. Events of cluster-scoped objects go to the `default` namespace, as Kubernetes
//! puts them.

use crate::resources::EVENT;
use crate::server::objects;
use crate::store::{revision_of, Key, Store, StoreError};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// The namespace events of cluster-scoped objects live in.
pub const NAMESPACE: &str = "default";

/// Event reasons, as `kubectl get events` shows them.
pub mod reasons {
    pub const NODE_PICKED: &str = "NodePicked";
    pub const NODE_WAITING: &str = "NodeWaiting";
    pub const BUDGET_BLOCKED: &str = "BudgetBlocked";
    pub const DRAIN_HOOK_FAILED: &str = "DrainHookFailed";
    pub const DRAIN_TIMEOUT: &str = "DrainTimeout";
    pub const DRAINED: &str = "Drained";
    pub const CANARY_SOAKING: &str = "CanarySoaking";
    pub const CIRCUIT_BROKEN: &str = "CircuitBroken";
    pub const PRESTAGE: &str = "Prestage";
}

/// Normal or Warning.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    Normal,
    Warning,
}

/// The object an event is about.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Involved {
    pub api_version: &'static str,
    pub kind: &'static str,
    pub name: String,
}

impl Involved {
    pub fn node(name: &str) -> Self {
        Involved { api_version: "v1", kind: "Node", name: name.to_string() }
    }
    pub fn pool(name: &str) -> Self {
        Involved { api_version: aloft_api::MCO_API_VERSION, kind: "MachineConfigPool", name: name.to_string() }
    }
}

/// Writes events, skipping repeats of the last message per (object, reason).
#[derive(Clone)]
pub struct Recorder {
    component: &'static str,
    last: Arc<Mutex<HashMap<(Involved, &'static str), String>>>,
}

impl Recorder {
    pub fn new(component: &'static str) -> Self {
        Recorder { component, last: Arc::default() }
    }

    /// Record `message` unless it is what this (object, reason) said last.
    pub async fn emit(
        &self,
        store: &Arc<dyn Store>,
        about: &Involved,
        type_: EventType,
        reason: &'static str,
        message: &str,
    ) -> Result<(), StoreError> {
        let key = (about.clone(), reason);
        {
            let last = self.last.lock().unwrap_or_else(|e| e.into_inner());
            if last.get(&key).map(String::as_str) == Some(message) {
                return Ok(());
            }
        }
        write_event(store, self.component, about, type_, reason, message).await?;
        self.last.lock().unwrap_or_else(|e| e.into_inner()).insert(key, message.to_string());
        Ok(())
    }

    /// The decision behind (object, reason) is over: the same message later is a new decision.
    pub fn forget(&self, about: &Involved, reason: &'static str) {
        self.last.lock().unwrap_or_else(|e| e.into_inner()).remove(&(about.clone(), reason));
    }
}

async fn write_event(
    store: &Arc<dyn Store>,
    component: &str,
    about: &Involved,
    type_: EventType,
    reason: &str,
    message: &str,
) -> Result<(), StoreError> {
    let digest = Sha256::digest(format!("{}\0{}\0{reason}\0{message}", about.kind, about.name).as_bytes());
    let name = format!("{}.{}", about.name, &hex::encode(digest)[..16]);
    let key = Key::new(&EVENT.store_key(), NAMESPACE, &name);
    let now = objects::now();
    let mut ev = json!({
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": name},
        "involvedObject": {"apiVersion": about.api_version, "kind": about.kind, "name": about.name},
        "reason": reason,
        "message": message,
        "type": match type_ { EventType::Normal => "Normal", EventType::Warning => "Warning" },
        "source": {"component": component},
        "reportingComponent": component,
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
    });
    objects::prepare_create(&mut ev, NAMESPACE);
    // Create first: an event is almost always new (a read first cost every event a lookup).
    match store.create(&key, ev).await {
        Ok(_) => {
            tracing::info!(object = %about.name, kind = about.kind, %reason, %message, "event");
            return Ok(());
        }
        Err(StoreError::AlreadyExists(_)) => {}
        Err(e) => return Err(e),
    }
    // The same decision again (e.g. after a restart emptied the recorder): count it.
    let Some(mut existing) = store.get(&key).await? else { return Ok(()) };
    let count = existing.get("count").and_then(Value::as_i64).unwrap_or(1) + 1;
    existing["count"] = count.into();
    existing["lastTimestamp"] = now.into();
    let rev = revision_of(&existing);
    match store.update(&key, existing, rev).await {
        Ok(_) | Err(StoreError::Conflict { .. }) | Err(StoreError::NotFound(_)) => Ok(()),
        Err(e) => Err(e),
    }
}
