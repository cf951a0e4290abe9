//! Kubernetes core/v1 Events for the controllers' decisions (which nodes a pass picked, why nodes
//! wait, which budget blocked, drain hooks and timeouts), one per decision change, not one per
//! reconcile pass.
//!
//! The recorder remembers the last message per (object, reason) and writes only when it
//! changes, or when the same decision still stands a third of an Event TTL after its last write: then
//! it bumps `count` and `lastTimestamp`, as client-go's event correlator does for repeats, so a
//! lasting decision (a drain hook that keeps failing) keeps its Event instead of losing it to
//! `--event-ttl`. Event names are derived from the object (with its uid), reason and message, so
//! after a coordinator restart (memory empty) the same decision finds its event and bumps
//! `count` instead of adding a duplicate. Events of cluster-scoped objects go to the `default`
//! namespace, as Kubernetes puts them.
//!
//! `involvedObject.uid` is the object's uid when the Event is written (looked up by the writer
//! task, off the decision path): `kubectl describe` selects Events by it, so an Event about an
//! object deleted and created again under the same name is not shown for the new one.

use crate::resources::{self, EVENT};
use crate::server::objects;
use crate::store::{revision_of, Key, Store, StoreError, Stored};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The namespace events of cluster-scoped objects live in.
pub const NAMESPACE: &str = "default";

/// Event reasons, as `kubectl get events` shows them.
pub mod reasons {
    /// On the pool: the nodes a pass moved to the pool's target (MCO's reason and words).
    pub const SET_DESIRED_CONFIG: &str = "SetDesiredConfig";
    /// MCO's: a pool took a new target.
    pub const UPDATING: &str = "Updating";
    /// MCO's: every node of a pool is updated on its target.
    pub const COMPLETED: &str = "Completed";
    pub const NODE_WAITING: &str = "NodeWaiting";
    pub const BUDGET_BLOCKED: &str = "BudgetBlocked";
    pub const DRAIN_HOOK_FAILED: &str = "DrainHookFailed";
    pub const DRAIN_TIMEOUT: &str = "DrainTimeout";
    pub const DRAINED: &str = "Drained";
    /// On a Node: its uncordon request was answered, and a cordon no drain made (an admin's)
    /// left in place.
    pub const CORDON_KEPT: &str = "CordonKept";
    pub const CANARY_SOAKING: &str = "CanarySoaking";
    pub const CIRCUIT_BROKEN: &str = "CircuitBroken";
    /// On the pool: nodes wait for its next maintenance window (or for a schedule that can be
    /// read).
    pub const MAINTENANCE_WINDOW_CLOSED: &str = "MaintenanceWindowClosed";
    /// MCO's: a pool's `nodeSelector` is empty (it then selects no node).
    pub const SELECTING_ALL: &str = "SelectingAll";
    /// On the pool: a resume (`aloftctl rollout resume`) closed the circuit breaker.
    pub const ROLLOUT_RESUMED: &str = "RolloutResumed";
    pub const PRESTAGE: &str = "Prestage";
    /// On a gone owner: the garbage collector deleted its dependents (the reason Kubernetes'
    /// workload controllers give their deletions: `kubectl get events` users know it).
    pub const SUCCESSFUL_DELETE: &str = "SuccessfulDelete";
    /// On a dependent whose owners are gone but which is kept: a rendered config a node or pool
    /// still names (MCO never removes a config in use). Retried until nothing uses it.
    pub const DELETE_DEFERRED: &str = "DeleteDeferred";
    /// On a Node: an enrollment under its name was refused, as it already has an enrolled agent
    /// (a second host with the same name).
    pub const ENROLLMENT_REFUSED: &str = "EnrollmentRefused";
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
    /// Empty for a cluster-scoped object (its Events go to `default`); a namespaced object's
    /// Events are written in its namespace, where `kubectl describe` looks for them.
    pub namespace: String,
    pub name: String,
    /// The object's uid when the caller knows it (the garbage collector's gone owner, from its
    /// ownerReference); None: the writer reads the uid of the object stored under that name.
    pub uid: Option<String>,
}

impl Involved {
    pub fn node(name: &str) -> Self {
        Involved {
            api_version: "v1".into(),
            kind: "Node".into(),
            namespace: String::new(),
            name: name.to_string(),
            uid: None,
        }
    }
    pub fn pool(name: &str) -> Self {
        Involved {
            api_version: aloft_api::MCO_API_VERSION.into(),
            kind: "MachineConfigPool".into(),
            namespace: String::new(),
            name: name.to_string(),
            uid: None,
        }
    }
}

/// How many events may wait for their write. A controller deciding for a whole fleet at once
/// (a 10,000-node pool's first batch) queues one per node; past this, events are dropped with a
/// warning, as Kubernetes' event broadcaster drops them, rather than slowing the decisions.
const QUEUE: usize = 16_384;

/// Writes events, skipping repeats of the last message per (object, reason) unless its last
/// write is a third of an Event TTL old.
///
/// Like client-go's event broadcaster, recording does not wait for the write: the events queue
/// up for a task of their own, which writes what has queued together (one group commit of the
/// store). A controller's pass that waited for its events held up its next decision by a commit
/// (the picks of the next freed slots waited behind the Events of the last ones).
#[derive(Clone)]
pub struct Recorder {
    last: Arc<LastMap>,
    queue: tokio::sync::mpsc::Sender<Pending>,
    /// A third of the Event TTL: a standing decision's Event is written again (counted) on the
    /// first record once its last write is this old, so it never expires while the decision
    /// stands. A third, not a half: a caller that records again every sixth of the TTL writes
    /// within half the TTL, and half the TTL is left for a slow store (with half, the write came
    /// at five sixths of the TTL, a second before expiry under a 6 s TTL on a loaded machine).
    /// None: Events never expire (`--event-ttl 0`), nothing to refresh.
    refresh: Option<Duration>,
}

/// How long a last message is kept when Events never expire (`--event-ttl 0`): after that a
/// repeat of a standing decision is counted once more on its Event instead of the entry being
/// kept for good (the entries of deleted objects and of one-off decisions were never dropped).
const KEPT_WITHOUT_TTL: Duration = Duration::from_secs(3600);

/// The last messages kept before the first look for old ones; each look sets the next at
/// twice what it left, so a large fleet's live entries are looked over rarely.
const PRUNE_AT: usize = 4096;

/// What (object, reason) said last, and when that was queued for its write.
struct Last {
    message: String,
    queued: Instant,
}

type LastMap = Mutex<LastMessages>;

/// What each (object, reason) said last, and the size at which the entries that can no longer
/// hold anything back are dropped.
#[derive(Default)]
struct LastMessages {
    by_key: HashMap<(Involved, &'static str), Last>,
    prune_at: usize,
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
    /// dropped), for Events that expire `ttl` after their last write (`--event-ttl`; zero:
    /// never). Needs a Tokio runtime.
    pub fn new(component: &'static str, store: Arc<dyn Store>, ttl: Duration) -> Self {
        let (queue, rx) = tokio::sync::mpsc::channel(QUEUE);
        let last: Arc<LastMap> = Arc::default();
        tokio::spawn(write_queued(store, component, rx, last.clone()));
        let refresh = (!ttl.is_zero()).then(|| ttl / 3);
        Recorder { last, queue, refresh }
    }

    /// Record `message` unless it is what this (object, reason) said last, less than a third of
    /// the Event TTL ago: a repeat after that is counted on the stored Event (at most one write
    /// per (object, reason) per third of the TTL). The write happens in the background; one that fails is
    /// logged, and the same message later is written again.
    pub fn emit(&self, about: &Involved, type_: EventType, reason: &'static str, message: &str) {
        let key = (about.clone(), reason);
        {
            let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
            let now = Instant::now();
            let kept = self.refresh.unwrap_or(KEPT_WITHOUT_TTL);
            if let Some(l) = last.by_key.get_mut(&key).filter(|l| l.message == message) {
                if now.duration_since(l.queued) < kept {
                    return;
                }
                l.queued = now;
            } else {
                last.by_key.insert(key.clone(), Last { message: message.to_string(), queued: now });
                if last.by_key.len() >= last.prune_at.max(PRUNE_AT) {
                    // An entry older than `kept` holds nothing back (its repeat is written
                    // again either way): dropped, the map holds the live decisions only.
                    last.by_key.retain(|_, l| now.duration_since(l.queued) < kept);
                    last.prune_at = last.by_key.len() * 2;
                }
            }
        }
        let pending = Pending { about: about.clone(), type_, reason, message: message.to_string() };
        if let Err(e) = self.queue.try_send(pending) {
            tracing::warn!(object = %about.name, %reason, %message, "event dropped: {e}");
            forget_if(&self.last, &key, message);
        }
    }

    /// How often a standing decision's Event is written again (a third of the Event TTL); None when
    /// Events never expire. A controller retrying a standing decision must retry at least this
    /// often for its Event to outlive the TTL.
    pub fn refresh_interval(&self) -> Option<Duration> {
        self.refresh
    }

    /// The decision behind (object, reason) is over: the same message later is a new decision.
    pub fn forget(&self, about: &Involved, reason: &'static str) {
        self.last.lock().unwrap_or_else(|e| e.into_inner()).by_key.remove(&(about.clone(), reason));
    }

    /// The object is gone: what was said about it holds nothing back about a new object of its
    /// name (a host replaced under its name whose drain hook fails with the same words as the
    /// old one's had its Event held back for a third of the TTL, or for good without one).
    pub fn forget_object(&self, kind: &str, name: &str) {
        self.last
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .by_key
            .retain(|(about, _), _| !(about.kind == kind && about.name == name));
    }

    /// How many last messages are kept (for tests of their pruning).
    #[cfg(test)]
    fn kept(&self) -> usize {
        self.last.lock().unwrap_or_else(|e| e.into_inner()).by_key.len()
    }
}

/// Forget (object, reason) if `message` is still the last thing it said.
fn forget_if(last: &LastMap, key: &(Involved, &'static str), message: &str) {
    let mut last = last.lock().unwrap_or_else(|e| e.into_inner());
    if last.by_key.get(key).is_some_and(|l| l.message == message) {
        last.by_key.remove(key);
    }
}

/// At most this many events per round of concurrent writes.
const BATCH: usize = 1024;

/// The recorder's writer: everything queued at once, concurrently (one commit).
async fn write_queued(
    store: Arc<dyn Store>,
    component: &'static str,
    mut rx: tokio::sync::mpsc::Receiver<Pending>,
    last: Arc<LastMap>,
) {
    let mut batch = Vec::new();
    while rx.recv_many(&mut batch, BATCH).await > 0 {
        let uids = uids_of(&store, &batch).await;
        let writes = batch.iter().map(|p| {
            let id = (&*p.about.kind, stored_namespace(&p.about), p.about.name.as_str());
            let uid = p.about.uid.as_deref().or_else(|| uids.get(&id)?.as_deref());
            write_event(&store, component, &p.about, uid, p.type_, p.reason, &p.message)
        });
        let results = futures::future::join_all(writes).await;
        for (p, r) in batch.drain(..).zip(results) {
            if let Err(e) = r {
                tracing::warn!(object = %p.about.name, reason = p.reason, error = %e, "event not written");
                forget_if(&last, &(p.about, p.reason), &p.message);
            }
        }
    }
}

/// The namespace an Event's object is stored under: its own for a namespaced kind, none for a
/// cluster-scoped one (whatever the caller wrote).
fn stored_namespace(about: &Involved) -> &str {
    match resources::by_kind(&about.api_version, &about.kind) {
        Some(rt) if rt.namespaced => &about.namespace,
        _ => "",
    }
}

/// The uids of the objects a batch's Events are about and do not know the uid of, read once per
/// object (a pool's Events in one batch share one read). Only the uid is decoded. An object that
/// is not stored, or cannot be read, has none: its Events carry no uid.
async fn uids_of<'a>(
    store: &Arc<dyn Store>,
    batch: &'a [Pending],
) -> HashMap<(&'a str, &'a str, &'a str), Option<String>> {
    #[derive(serde::Deserialize)]
    struct Object {
        metadata: Meta,
    }
    #[derive(serde::Deserialize)]
    struct Meta {
        uid: Option<String>,
    }
    let mut wanted: HashMap<(&str, &str, &str), Key> = HashMap::new();
    for p in batch.iter().filter(|p| p.about.uid.is_none()) {
        let Some(rt) = resources::by_kind(&p.about.api_version, &p.about.kind) else {
            continue;
        };
        let namespace = stored_namespace(&p.about);
        wanted
            .entry((&*p.about.kind, namespace, p.about.name.as_str()))
            .or_insert_with(|| Key::new(&rt.store_key(), namespace, &p.about.name));
    }
    let reads = wanted.into_iter().map(|(id, key)| async move {
        let uid = match store.get_json(&key).await {
            Ok(Some(text)) => serde_json::from_str::<Object>(&text).ok().and_then(|o| o.metadata.uid),
            Ok(None) => None,
            Err(e) => {
                tracing::debug!(object = %key.name, error = %e, "uid of an Event's object not read");
                None
            }
        };
        (id, uid)
    });
    futures::future::join_all(reads).await.into_iter().collect()
}

async fn write_event(
    store: &Arc<dyn Store>,
    component: &str,
    about: &Involved,
    uid: Option<&str>,
    type_: EventType,
    reason: &str,
    message: &str,
) -> Result<(), StoreError> {
    // The uid is part of the name: the same words about a newer object of that name are another
    // Event, not a count on the old object's.
    let digest = Sha256::digest(
        format!("{}\0{}\0{}\0{reason}\0{message}", about.kind, about.name, uid.unwrap_or_default()).as_bytes(),
    );
    let name = format!("{}.{}", about.name, &hex::encode(digest)[..16]);
    let namespace = if about.namespace.is_empty() { NAMESPACE } else { about.namespace.as_str() };
    let key = Key::new(&EVENT.store_key(), namespace, &name);
    // To the microsecond, as an Event's `eventTime` is written: `kubectl describe` and `kubectl
    // events` order Events by `lastTimestamp` alone, and the names (a hash of the decision) do
    // not sort by time, so at whole seconds the decisions of one second came out scrambled
    // (kubectl, like every RFC 3339 reader, takes the fraction).
    let now = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Micros, true);
    let mut involved = json!({"apiVersion": about.api_version, "kind": about.kind, "name": about.name});
    if !about.namespace.is_empty() {
        involved["namespace"] = about.namespace.clone().into();
    }
    if let Some(uid) = uid {
        involved["uid"] = uid.into();
    }
    let build = || {
        let mut ev = json!({
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": name},
        "involvedObject": involved,
        "reason": reason,
        "message": message,
        "type": match type_ { EventType::Normal => "Normal", EventType::Warning => "Warning" },
        "source": {"component": component},
        "reportingComponent": component,
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
        });
        objects::prepare_create(&mut ev, namespace);
        ev
    };
    // Create first: an event is almost always new (a read first cost every event a lookup).
    match store.create(&key, build()).await {
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
    // The same decision again (after a restart emptied the recorder, or standing for a third of
    // the Event TTL): count it.
    let Some(mut existing) = store.get(&key).await?.map(Stored::into_value) else {
        // Expired or deleted between the two calls: it is new again.
        return match store.create(&key, build()).await {
            Ok(_) | Err(StoreError::AlreadyExists(_)) => Ok(()),
            Err(e) => Err(e),
        };
    };
    let count = existing.get("count").and_then(Value::as_i64).unwrap_or(1) + 1;
    existing["count"] = count.into();
    // Never earlier than it was: a clock stepped back (NTP) put a counted Event's last time
    // before its first, and kubectl orders Events by it.
    existing["lastTimestamp"] = later_time(existing.get("lastTimestamp").and_then(Value::as_str), now).into();
    let rev = revision_of(&existing);
    match store.update(&key, existing, rev).await {
        Ok(_) | Err(StoreError::Conflict { .. }) | Err(StoreError::NotFound(_)) => Ok(()),
        Err(e) => Err(e),
    }
}

/// `now`, or `stored` when it is later (both RFC 3339; an unreadable `stored` loses).
fn later_time(stored: Option<&str>, now: String) -> String {
    let parse = |t: &str| chrono::DateTime::parse_from_rfc3339(t).ok();
    match (stored.and_then(parse), parse(&now)) {
        (Some(s), Some(n)) if s > n => stored.unwrap_or_default().to_string(),
        _ => now,
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
        let rec = Recorder::new("test", store.clone(), Duration::from_secs(3600));
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

    /// Decisions of one second keep their order in time: `kubectl describe` sorts Events by
    /// `lastTimestamp` alone, so it is written to the microsecond (and reads as RFC 3339).
    #[tokio::test]
    async fn events_of_one_second_are_ordered_by_their_timestamps() {
        let dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn Store> = Arc::new(SqliteStore::open(&dir.path().join("s.db")).unwrap());
        let rec = Recorder::new("test", store.clone(), Duration::from_secs(3600));
        let pool = Involved::pool("worker");
        for m in ["first", "second", "third"] {
            rec.emit(&pool, EventType::Normal, reasons::NODE_WAITING, m);
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        let mut evs = wait_for(&store, "three events", |evs| evs.len() == 3).await;
        evs.sort_by_key(revision_of);
        let times: Vec<chrono::DateTime<chrono::FixedOffset>> = evs
            .iter()
            .map(|e| {
                let t = e["lastTimestamp"].as_str().unwrap();
                assert_eq!(t.len(), "2026-01-01T00:00:00.000000Z".len(), "to the microsecond: {t}");
                chrono::DateTime::parse_from_rfc3339(t).unwrap()
            })
            .collect();
        assert!(times.windows(2).all(|w| w[0] < w[1]), "{times:?}");
        let messages: Vec<&str> = evs.iter().map(|e| e["message"].as_str().unwrap()).collect();
        assert_eq!(messages, ["first", "second", "third"]);
    }

    async fn wait_for(store: &Arc<dyn Store>, what: &str, ok: impl Fn(&[Value]) -> bool) -> Vec<Value> {
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            let evs = stored(store).await;
            if ok(&evs) {
                return evs;
            }
            assert!(std::time::Instant::now() < deadline, "{what}: {evs:#?}");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// An Event carries the uid of the object stored under its name when it is written (what
    /// `kubectl describe` selects by); the same words about an object created again under that
    /// name are another Event, with the new uid; an object not stored gives no uid.
    #[tokio::test]
    async fn events_carry_the_uid_of_the_object_they_are_about() {
        let dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn Store> = Arc::new(SqliteStore::open(&dir.path().join("s.db")).unwrap());
        let rec = Recorder::new("test", store.clone(), Duration::ZERO);
        let pool_key = Key::cluster(&resources::MACHINE_CONFIG_POOL.store_key(), "worker");
        let put_pool = || async {
            let mut p = json!({"apiVersion": aloft_api::MCO_API_VERSION, "kind": "MachineConfigPool",
                "metadata": {"name": "worker"}, "spec": {}});
            objects::prepare_create(&mut p, "");
            store.create(&pool_key, p).await.unwrap().into_value()["metadata"]["uid"].as_str().unwrap().to_string()
        };
        let first = put_pool().await;
        let worker = Involved::pool("worker");
        rec.emit(&worker, EventType::Normal, reasons::SET_DESIRED_CONFIG, "Targeted node n1");
        rec.emit(&Involved::node("absent"), EventType::Normal, reasons::DRAINED, "drained");
        let evs = wait_for(&store, "two events", |e| e.len() == 2).await;
        let about = |evs: &[Value], name: &str| -> Vec<Value> {
            evs.iter().filter(|e| e["involvedObject"]["name"] == name).map(|e| e["involvedObject"].clone()).collect()
        };
        assert_eq!(
            about(&evs, "worker"),
            [json!({"apiVersion": aloft_api::MCO_API_VERSION,
            "kind": "MachineConfigPool", "name": "worker", "uid": first})]
        );
        assert!(about(&evs, "absent")[0].get("uid").is_none(), "no object, no uid");
        // Deleted and created again: the same decision is a new Event about the new pool.
        store.delete(&pool_key, None).await.unwrap();
        let second = put_pool().await;
        // The same words before the controllers saw the delete: held back (TTL 0 keeps the last
        // message an hour). The delete seen, the new pool's Event is written.
        rec.emit(&worker, EventType::Normal, reasons::SET_DESIRED_CONFIG, "Targeted node n1");
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(stored(&store).await.len(), 2, "held back as a repeat");
        rec.forget_object("MachineConfigPool", "worker");
        rec.emit(&worker, EventType::Normal, reasons::SET_DESIRED_CONFIG, "Targeted node n1");
        let evs = wait_for(&store, "the new pool's event", |e| e.len() == 3).await;
        let mut uids: Vec<_> = about(&evs, "worker").iter().map(|o| o["uid"].as_str().unwrap().to_string()).collect();
        uids.sort();
        let mut want = vec![first, second];
        want.sort();
        assert_eq!(uids, want);
    }

    /// The last messages of decisions old enough to hold nothing back are dropped once there
    /// are many (they were kept for good: every deleted node's, every one-off decision's), and
    /// only those: a repeat of a recent one is still held back.
    #[tokio::test]
    async fn old_last_messages_are_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn Store> = Arc::new(SqliteStore::open(&dir.path().join("s.db")).unwrap());
        // A third of 3 s: entries older than 1 s hold nothing back.
        let rec = Recorder::new("test", store.clone(), Duration::from_secs(3));
        for i in 0..PRUNE_AT - 1 {
            rec.emit(&Involved::node(&format!("gone-{i}")), EventType::Normal, reasons::DRAINED, "drained");
        }
        assert_eq!(rec.kept(), PRUNE_AT - 1);
        tokio::time::sleep(Duration::from_millis(1100)).await;
        let fresh = Involved::node("fresh");
        rec.emit(&fresh, EventType::Normal, reasons::DRAINED, "drained");
        assert_eq!(rec.kept(), 1, "only the fresh decision's message is kept");
        rec.emit(&fresh, EventType::Normal, reasons::DRAINED, "drained");
        let count_fresh = |evs: &[Value]| {
            evs.iter()
                .filter(|e| e["involvedObject"]["name"] == "fresh")
                .filter_map(|e| e["count"].as_i64())
                .sum::<i64>()
        };
        wait_for(&store, "the fresh event", |e| count_fresh(e) == 1).await;
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(count_fresh(&stored(&store).await), 1, "a recent repeat is still held back");
    }

    /// A counted Event's lastTimestamp never goes back, whatever the clock says now.
    #[test]
    fn last_timestamps_do_not_go_back() {
        let later = "2026-12-03T10:00:00.000000Z";
        let earlier = "2026-12-03T09:59:59.000000Z".to_string();
        assert_eq!(later_time(Some(later), earlier.clone()), later);
        assert_eq!(later_time(Some(&earlier), later.to_string()), later);
        assert_eq!(later_time(None, earlier.clone()), earlier);
        assert_eq!(later_time(Some("garbage"), earlier.clone()), earlier);
    }

    /// A decision that stands is written again (counted, lastTimestamp bumped) once its last
    /// write is a third of the Event TTL old, so it outlives the TTL; never more often than that;
    /// and never with a TTL of zero (Events that never expire). The caller retries every 50 ms
    /// until two refreshes are stored, however long a slow machine takes; the bounds follow from
    /// the time it took, so they hold at any speed.
    #[tokio::test]
    async fn a_standing_decision_is_refreshed_every_third_of_the_ttl() {
        let dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn Store> = Arc::new(SqliteStore::open(&dir.path().join("s.db")).unwrap());
        let every = Duration::from_secs(1);
        let rec = Recorder::new("test", store.clone(), every * 3);
        assert_eq!(rec.refresh_interval(), Some(every));
        let forever = Recorder::new("test", store.clone(), Duration::ZERO);
        assert_eq!(forever.refresh_interval(), None);
        let (n1, n2) = (Involved::node("n1"), Involved::node("n2"));
        let count = |evs: &[Value], node: &str| {
            evs.iter().find(|e| e["involvedObject"]["name"] == node).and_then(|e| e["count"].as_i64())
        };
        let start = std::time::Instant::now();
        let (mut first_seen, mut emits) = (None, 0);
        let evs = loop {
            rec.emit(&n1, EventType::Warning, reasons::DRAIN_HOOK_FAILED, "hook answered 503");
            forever.emit(&n2, EventType::Warning, reasons::DRAIN_HOOK_FAILED, "hook answered 503");
            emits += 1;
            let evs = stored(&store).await;
            if first_seen.is_none() {
                first_seen =
                    evs.iter().find(|e| e["involvedObject"]["name"] == "n1").map(|e| e["lastTimestamp"].clone());
            }
            if count(&evs, "n1").is_some_and(|c| c >= 3) {
                break evs;
            }
            assert!(start.elapsed() < Duration::from_secs(60), "no two refreshes in 60 s: {evs:?}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        let took = start.elapsed();
        // Written at most once per interval: two refreshes took two intervals at least, and
        // there are no more writes than intervals passed (not one per retry).
        assert!(took >= every * 2, "two refreshes after {took:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
        let after = stored(&store).await;
        let n = count(&after, "n1").unwrap_or(0);
        let most = start.elapsed().as_millis() / every.as_millis() + 1;
        assert!(n >= 3 && (n as u128) <= most, "{n} writes for {emits} emits in {took:?}");
        assert_eq!(count(&after, "n2"), Some(1), "TTL 0: never refreshed");
        let n1_event = evs.iter().find(|e| e["involvedObject"]["name"] == "n1").unwrap();
        assert_ne!(Some(&n1_event["lastTimestamp"]), first_seen.as_ref(), "lastTimestamp bumped");
    }
}
