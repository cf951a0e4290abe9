//! Kubernetes core/v1 Events for the controllers' decisions (which nodes a pass picked, why nodes
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
use crate::store::{revision_of, Key, Store, StoreError, Stored};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// The namespace events of cluster-scoped objects live in.
pub const NAMESPACE: &str = "default";

/// Event reasons, as `kubectl get events` shows them.
pub mod reasons {
    /// On the pool: the nodes a pass moved to the pool's target (MCO's reason and words).
    pub const SET_DESIRED_CONFIG: &str = "SetDesiredConfig";
    pub const NODE_WAITING: &str = "NodeWaiting";
    pub const BUDGET_BLOCKED: &str = "BudgetBlocked";
    pub const DRAIN_HOOK_FAILED: &str = "DrainHookFailed";
    pub const DRAIN_TIMEOUT: &str = "DrainTimeout";
    pub const DRAINED: &str = "Drained";
    pub const CANARY_SOAKING: &str = "CanarySoaking";
    pub const CIRCUIT_BROKEN: &str = "CircuitBroken";
    pub const PRESTAGE: &str = "Prestage";
    /// On a gone owner: the garbage collector deleted its dependents (the reason Kubernetes'
    /// workload controllers give their deletions: `kubectl get events` users know it).
    pub const SUCCESSFUL_DELETE: &str = "SuccessfulDelete";
    /// On a dependent whose owners are gone but which is kept: a rendered config a node or pool
    /// still names (MCO never removes a config in use). Retried until nothing uses it.
    pub const DELETE_DEFERRED: &str = "DeleteDeferred";
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
    /// Borrowed for the kinds the controllers know; owned for an owner the garbage collector
    /// only knows from an ownerReference.
    pub api_version: Cow<'static, str>,
    pub kind: Cow<'static, str>,
    pub name: String,
}

impl Involved {
    pub fn node(name: &str) -> Self {
        Involved { api_version: "v1".into(), kind: "Node".into(), name: name.to_string() }
    }
    pub fn pool(name: &str) -> Self {
        Involved {
            api_version: aloft_api::MCO_API_VERSION.into(),
            kind: "MachineConfigPool".into(),
            name: name.to_string(),
        }
    }
}

/// How many events may wait for their write. A controller deciding for a whole fleet at once
/// (a 10,000-node pool's first batch) queues one per node; past this, events are dropped with a
/// warning, as Kubernetes' event broadcaster drops them, rather than slowing the decisions.
const QUEUE: usize = 16_384;

/// Writes events, skipping repeats of the last message per (object, reason).
///
/// Like client-go's event broadcaster, recording does not wait for the write: the events queue
/// up for a task of their own, which writes what has queued together (one group commit of the
/// store). A controller's pass that waited for its events held up its next decision by a commit
/// (the picks of the next freed slots waited behind the Events of the last ones).
#[derive(Clone)]
pub struct Recorder {
    last: Arc<Mutex<HashMap<(Involved, &'static str), String>>>,
    queue: tokio::sync::mpsc::Sender<Pending>,
}

/// An event waiting for its write.
struct Pending {
    about: Involved,
    type_: EventType,
    reason: &'static str,
    message: String,
}

impl Recorder {
    /// A recorder for `component`, with its writer task (it ends when the last clone is
    /// dropped). Needs a Tokio runtime.
    pub fn new(component: &'static str, store: Arc<dyn Store>) -> Self {
        let (queue, rx) = tokio::sync::mpsc::channel(QUEUE);
        let last: Arc<Mutex<HashMap<(Involved, &'static str), String>>> = Arc::default();
        tokio::spawn(write_queued(store, component, rx, last.clone()));
        Recorder { last, queue }
    }

    /// Record `message` unless it is what this (object, reason) said last. The write happens
    /// in the background; one that fails is logged, and the same message later is written again.
    pub fn emit(&self, about: &Involved, type_: EventType, reason: &'static str, message: &str) {
        let key = (about.clone(), reason);
        {
            let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
            if last.get(&key).map(String::as_str) == Some(message) {
                return;
            }
            last.insert(key.clone(), message.to_string());
        }
        let pending = Pending { about: about.clone(), type_, reason, message: message.to_string() };
        if let Err(e) = self.queue.try_send(pending) {
            tracing::warn!(object = %about.name, %reason, %message, "event dropped: {e}");
            forget_if(&self.last, &key, message);
        }
    }

    /// The decision behind (object, reason) is over: the same message later is a new decision.
    pub fn forget(&self, about: &Involved, reason: &'static str) {
        self.last.lock().unwrap_or_else(|e| e.into_inner()).remove(&(about.clone(), reason));
    }
}

/// Forget (object, reason) if `message` is still the last thing it said.
fn forget_if(last: &Mutex<HashMap<(Involved, &'static str), String>>, key: &(Involved, &'static str), message: &str) {
    let mut last = last.lock().unwrap_or_else(|e| e.into_inner());
    if last.get(key).map(String::as_str) == Some(message) {
        last.remove(key);
    }
}

/// At most this many events per round of concurrent writes.
const BATCH: usize = 1024;

/// The recorder's writer: everything queued at once, concurrently (one commit).
async fn write_queued(
    store: Arc<dyn Store>,
    component: &'static str,
    mut rx: tokio::sync::mpsc::Receiver<Pending>,
    last: Arc<Mutex<HashMap<(Involved, &'static str), String>>>,
) {
    let mut batch = Vec::new();
    while rx.recv_many(&mut batch, BATCH).await > 0 {
        let writes = batch.iter().map(|p| write_event(&store, component, &p.about, p.type_, p.reason, &p.message));
        let results = futures::future::join_all(writes).await;
        for (p, r) in batch.drain(..).zip(results) {
            if let Err(e) = r {
                tracing::warn!(object = %p.about.name, reason = p.reason, error = %e, "event not written");
                forget_if(&last, &(p.about, p.reason), &p.message);
            }
        }
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
            // Debug, not info: the Event is the record (`kubectl get events`), and the decisions
            // it reports are logged where they are made; a rollout of 10,000 nodes wrote each
            // pick twice to the log.
            tracing::debug!(object = %about.name, kind = %about.kind, %reason, %message, "event");
            return Ok(());
        }
        Err(StoreError::AlreadyExists(_)) => {}
        Err(e) => return Err(e),
    }
    // The same decision again (e.g. after a restart emptied the recorder): count it.
    let Some(mut existing) = store.get(&key).await?.map(Stored::into_value) else { return Ok(()) };
    let count = existing.get("count").and_then(Value::as_i64).unwrap_or(1) + 1;
    existing["count"] = count.into();
    existing["lastTimestamp"] = now.into();
    let rev = revision_of(&existing);
    match store.update(&key, existing, rev).await {
        Ok(_) | Err(StoreError::Conflict { .. }) | Err(StoreError::NotFound(_)) => Ok(()),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::SqliteStore;

    async fn stored(store: &Arc<dyn Store>) -> Vec<Value> {
        store.list(&EVENT.store_key(), None).await.unwrap().items
    }

    /// Recording returns at once; the writer task writes each decision once, a repeat of the
    /// last message not at all, and the same message again after `forget` as a new count.
    #[tokio::test]
    async fn events_are_written_in_the_background_once_per_decision() {
        let dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn Store> = Arc::new(SqliteStore::open(&dir.path().join("s.db")).unwrap());
        let rec = Recorder::new("test", store.clone());
        let n = Involved::node("n1");
        for i in 0..50 {
            rec.emit(&Involved::node(&format!("p{i}")), EventType::Normal, reasons::SET_DESIRED_CONFIG, "picked");
        }
        rec.emit(&n, EventType::Warning, reasons::DRAIN_TIMEOUT, "too slow");
        rec.emit(&n, EventType::Warning, reasons::DRAIN_TIMEOUT, "too slow");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while stored(&store).await.len() < 51 {
            assert!(std::time::Instant::now() < deadline, "events not written: {}", stored(&store).await.len());
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        let count = |evs: &[Value]| {
            let e = evs.iter().find(|e| e["involvedObject"]["name"] == "n1").expect("n1's event");
            (e["count"].as_i64(), e["type"].as_str().map(str::to_string))
        };
        assert_eq!(count(&stored(&store).await), (Some(1), Some("Warning".into())), "a repeat is not a new event");
        // The decision ended and came back: the same event, counted again.
        rec.forget(&n, reasons::DRAIN_TIMEOUT);
        rec.emit(&n, EventType::Warning, reasons::DRAIN_TIMEOUT, "too slow");
        while count(&stored(&store).await).0 != Some(2) {
            assert!(std::time::Instant::now() < deadline, "the repeat after forget was not counted");
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        assert_eq!(stored(&store).await.len(), 51);
    }
}
