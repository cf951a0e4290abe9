//! The store: every object the coordinator knows, behind one narrow interface.
//!
//! Objects are JSON documents addressed by (resource, namespace, name), where `resource` is
//! `<group>/<plural>` (`/nodes` for the core group). Every write gets the next value of one global
//! revision counter, which is also the object's `metadata.resourceVersion`; a watch is a replay of
//! the write log from a revision, then live writes. That is etcd's model, so an etcd-backed
//! implementation can sit behind the same trait without touching the API server or controllers.

pub mod etcd;
mod etcd_metrics;
mod follow;
#[cfg(test)]
pub mod hooked;
mod hub;
mod object_cache;
mod read_batch;
pub mod sqlite;
mod token_cache;
pub mod watch_cache;

use async_trait::async_trait;
use futures::stream::BoxStream;
use serde_json::Value;
use std::sync::Arc;

pub use etcd::{EtcdOptions, EtcdStore};
pub use sqlite::{SqliteStore, TokenInfo};
pub use watch_cache::WatchCache;

/// Where an object lives.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Key {
    /// `<group>/<plural>`, e.g. `machineconfiguration.openshift.io/machineconfigpools`.
    pub resource: String,
    /// Empty for cluster-scoped objects.
    pub namespace: String,
    pub name: String,
}

impl Key {
    pub fn new(resource: &str, namespace: &str, name: &str) -> Self {
        Key { resource: resource.to_string(), namespace: namespace.to_string(), name: name.to_string() }
    }
    pub fn cluster(resource: &str, name: &str) -> Self {
        Key::new(resource, "", name)
    }
}

/// What happened to an object at a revision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    Added,
    Modified,
    Deleted,
}

impl EventType {
    /// The Kubernetes watch event type name.
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Added => "ADDED",
            EventType::Modified => "MODIFIED",
            EventType::Deleted => "DELETED",
        }
    }
    fn from_code(c: i64) -> Self {
        match c {
            0 => EventType::Added,
            1 => EventType::Modified,
            _ => EventType::Deleted,
        }
    }
    fn code(self) -> i64 {
        match self {
            EventType::Added => 0,
            EventType::Modified => 1,
            EventType::Deleted => 2,
        }
    }
}

/// One entry of the write log. For a deletion `object` is the last state, with the deletion's
/// revision as its resourceVersion (as Kubernetes reports it).
#[derive(Debug, Clone)]
pub struct Event {
    pub revision: u64,
    pub key: Key,
    pub kind: EventType,
    pub object: Arc<Value>,
    /// `object` as the store wrote it: a watch sends it as is instead of serializing the
    /// object again for every watcher.
    pub json: Arc<str>,
    /// The API identity whose write this is, when it came through [`Store::update_by`]: that
    /// identity's watch can leave it out (it has the object from its write's answer already).
    pub origin: Option<Arc<str>>,
}

impl Event {
    /// An event of `object`, serialized here, made by no API identity.
    pub fn new(revision: u64, key: Key, kind: EventType, object: Value) -> Event {
        let stored = Stored::new(object);
        Event { revision, key, kind, object: stored.object, json: stored.json, origin: None }
    }
}

/// An object as the store holds it: shared, so that a read or a write's answer copies nothing,
/// with its JSON as the store wrote it, so that an answer sends those bytes instead of
/// serializing the object again. A fleet's requests read and write Nodes and rendered configs
/// of a few KB each: copying and serializing them was a sixth of the API threads' time.
#[derive(Debug, Clone)]
pub struct Stored {
    pub object: Arc<Value>,
    /// `object` serialized, exactly as `serde_json::to_string` gives it.
    pub json: Arc<str>,
}

impl Stored {
    /// A new object not written (yet), e.g. a dry run's.
    pub fn new(object: Value) -> Stored {
        let json = Arc::from(serde_json::to_string(&object).unwrap_or_default());
        Stored { object: Arc::new(object), json }
    }

    /// The object to change (a copy only when it is shared, as a stored object usually is).
    pub fn into_value(self) -> Value {
        Arc::unwrap_or_clone(self.object)
    }
}

impl std::ops::Deref for Stored {
    type Target = Value;
    fn deref(&self) -> &Value {
        &self.object
    }
}

/// A compare-and-swap update for [`Store::update_in_order`]: the key, the new object, and the
/// revision the object must still have (`None`: any, as long as it exists).
pub type CasWrite = (Key, Value, Option<u64>);

/// A list at one consistent revision.
#[derive(Debug, Clone)]
pub struct Listing {
    pub items: Vec<Value>,
    pub revision: u64,
}

/// [`Listing`] with each item as its stored JSON text: for a resource the store keeps in memory,
/// the store's own copy (shared, not copied: a paged list keeps its later pages this way).
#[derive(Debug, Clone)]
pub struct JsonListing {
    pub items: Vec<Arc<str>>,
    pub revision: u64,
}

/// Which events a watch wants.
#[derive(Debug, Clone, Default)]
pub struct WatchFilter {
    /// None: every resource.
    pub resource: Option<String>,
    /// None: every namespace.
    pub namespace: Option<String>,
    /// None: every name.
    pub name: Option<String>,
    /// Leave out the live events of the writes this API identity made (see
    /// [`Event::origin`]). Dropped where the write is published, not where the watch reads:
    /// an event queued only to be dropped cost a queue slot, a copy and a poll of the watch's
    /// task for nothing. Events read back from the log carry no origin and are kept.
    pub skip_origin: Option<Arc<str>>,
}

impl WatchFilter {
    pub fn resource(resource: &str) -> Self {
        WatchFilter { resource: Some(resource.to_string()), ..Default::default() }
    }
    pub fn matches(&self, k: &Key) -> bool {
        self.resource.as_ref().is_none_or(|r| *r == k.resource)
            && self.namespace.as_ref().is_none_or(|n| *n == k.namespace)
            && self.name.as_ref().is_none_or(|n| *n == k.name)
    }
    /// Whether a watch with this filter is sent `ev`.
    pub fn wants(&self, ev: &Event) -> bool {
        self.matches(&ev.key) && (self.skip_origin.is_none() || ev.origin != self.skip_origin)
    }
}

/// A watch: events strictly after the revision it started from, in revision order. It ends with an
/// error item when it can no longer guarantee that no event is missed (the client re-lists).
pub type WatchStream = BoxStream<'static, Result<Event, StoreError>>;

/// What a watch with progress notes ([`Store::watch_with_progress`]) yields.
#[derive(Debug, Clone)]
pub enum WatchItem {
    Event(Event),
    /// Every event of the watch up to this revision has been yielded: a client that resumes
    /// from it misses nothing (a Kubernetes watch BOOKMARK's resourceVersion).
    Progress(u64),
}

pub type ProgressStream = BoxStream<'static, Result<WatchItem, StoreError>>;

/// When a watch's progress notes fall due, as kube-apiserver's cacher schedules BOOKMARKs:
/// every `every`, and 2 s before the watch's `deadline` (so that a client whose watch times out
/// resumes from a revision no older than that).
#[derive(Debug, Clone, Copy)]
pub struct ProgressSchedule {
    pub every: std::time::Duration,
    pub deadline: Option<tokio::time::Instant>,
}

impl ProgressSchedule {
    /// The next note after `now`; None once the watch is within 2 s of its end.
    pub fn next(&self, now: tokio::time::Instant) -> Option<tokio::time::Instant> {
        let mut at = now + self.every;
        if let Some(d) = self.deadline {
            let before_end = d.checked_sub(std::time::Duration::from_secs(2)).unwrap_or(d);
            at = at.min(before_end);
        }
        (at > now).then_some(at)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("{0} not found")]
    NotFound(String),
    #[error("{0} already exists")]
    AlreadyExists(String),
    #[error("the object has been modified; please apply your changes to the latest version and try again (have resourceVersion {have}, stored {stored})")]
    Conflict { have: u64, stored: u64 },
    #[error("too old resource version: {requested} (oldest available {oldest})")]
    Gone { requested: u64, oldest: u64 },
    #[error("object is too large: {size} bytes as stored, the limit is {limit} bytes")]
    TooLarge { size: usize, limit: usize },
    #[error("store: {0}")]
    Backend(String),
}

/// The most one object may take as stored JSON: a rendered config's most
/// (`aloft_api::render::MAX_RENDERED_BYTES`, etcd's 1.5 MiB request limit) and room for its
/// metadata. kube-apiserver's etcd refuses larger (413); here, without it, an identity that may
/// write one object (a node, its own status) could fill the disk and every watcher's memory
/// 3 MiB a request.
pub const MAX_OBJECT_BYTES: usize = 2 * 1024 * 1024;

impl From<rusqlite::Error> for StoreError {
    fn from(e: rusqlite::Error) -> Self {
        StoreError::Backend(e.to_string())
    }
}

/// The narrow interface every backend implements. Implementations set
/// `metadata.resourceVersion` on what they store and return it, and nothing else of the object;
/// defaulting and validation are the API server's.
#[async_trait]
pub trait Store: Send + Sync + 'static {
    async fn get(&self, key: &Key) -> Result<Option<Stored>, StoreError>;
    /// [`Store::get`] as the JSON the store wrote, for a reader that sends it on (an object kept
    /// as text only is then not parsed).
    async fn get_json(&self, key: &Key) -> Result<Option<Arc<str>>, StoreError> {
        Ok(self.get(key).await?.map(|s| s.json))
    }
    /// Everything of a resource (in `namespace` when given), sorted by namespace and name.
    async fn list(&self, resource: &str, namespace: Option<&str>) -> Result<Listing, StoreError>;
    /// [`Store::list`] as the JSON the store wrote, not parsed: a paged list parses only the
    /// page it answers with and keeps the rest as it is.
    async fn list_json(&self, resource: &str, namespace: Option<&str>) -> Result<JsonListing, StoreError>;
    /// The keys of `resource`'s objects last written at or before `revision`, with their
    /// revisions: what has not been written since a moment whose revision the caller noted (the
    /// Event TTL's sweep), found without reading or parsing the objects where the backend can.
    async fn written_by(&self, resource: &str, revision: u64) -> Result<Vec<(Key, u64)>, StoreError> {
        let listing = self.list_json(resource, None).await?;
        Ok(written_by_in(resource, &listing.items, revision))
    }
    /// Fails with AlreadyExists when the key is taken.
    async fn create(&self, key: &Key, object: Value) -> Result<Stored, StoreError>;
    /// Compare-and-swap: with `expected`, fails with Conflict unless the stored revision is it.
    async fn update(&self, key: &Key, object: Value, expected: Option<u64>) -> Result<Stored, StoreError>;
    /// [`Store::update`] on behalf of the API identity `origin`, named in the write's event.
    async fn update_by(
        &self,
        key: &Key,
        object: Value,
        expected: Option<u64>,
        _origin: &str,
    ) -> Result<Stored, StoreError> {
        self.update(key, object, expected).await
    }
    /// Returns the deleted object; `expected` as for update.
    async fn delete(&self, key: &Key, expected: Option<u64>) -> Result<Stored, StoreError>;
    /// Events with revision > `from`. Gone when `from` is older than the retained log.
    async fn watch(&self, filter: WatchFilter, from: u64) -> Result<WatchStream, StoreError>;
    /// [`Store::watch`] with progress notes on `schedule`, each once every event before it is
    /// yielded. A backend that cannot say gives none (a watch may go without BOOKMARKs).
    async fn watch_with_progress(
        &self,
        filter: WatchFilter,
        from: u64,
        _schedule: ProgressSchedule,
    ) -> Result<ProgressStream, StoreError> {
        use futures::StreamExt;
        Ok(Box::pin(self.watch(filter, from).await?.map(|r| r.map(WatchItem::Event))))
    }
    /// The newest revision.
    async fn revision(&self) -> Result<u64, StoreError>;
    /// Returns once the write path takes work: for the health checks, since reads still answer
    /// while a commit that never returns holds every write.
    async fn check_writes(&self) -> Result<(), StoreError>;
    /// Compare-and-swap updates in two steps, for a decision whose parts are only safe in that
    /// order (slots freed, then refilled): no write of `then` is made before every write of
    /// `first` is, nor at all unless all of `first` were. Every object takes a revision of its
    /// own, as every write does in Kubernetes, so a watch resumed at any one's
    /// `resourceVersion` misses none of the others. Answers one entry a write, `first` then
    /// `then`: the object as stored, or `None` where a condition failed (the object changed or
    /// went meanwhile) or the step was not taken. A backend may also leave every write unmade
    /// when one fails: SQLite makes them in one transaction. An error other than a lost
    /// condition (the backend's) is returned as such; writes may have been made before it.
    async fn update_in_order(
        &self,
        first: Vec<CasWrite>,
        then: Vec<CasWrite>,
    ) -> Result<Vec<Option<Stored>>, StoreError>;
    /// The backend's own series for `/metrics` (etcd's request durations); none by default.
    fn register_metrics(&self, _registry: &mut prometheus_client::registry::Registry) {}
}

/// [`Store::written_by`] over objects' JSON, parsing each: for a backend that has no cheaper way.
pub(crate) fn written_by_in(resource: &str, items: &[Arc<str>], revision: u64) -> Vec<(Key, u64)> {
    items
        .iter()
        .filter_map(|json| serde_json::from_str::<Value>(json).ok())
        .filter_map(|obj| {
            let rev = revision_of(&obj).filter(|r| *r <= revision)?;
            let ns = crate::server::objects::at(&obj, &["metadata", "namespace"]).and_then(Value::as_str);
            Some((Key::new(resource, ns.unwrap_or(""), crate::server::objects::name_of(&obj)), rev))
        })
        .collect()
}

/// Read `metadata.resourceVersion` as the integer the store wrote.
pub fn revision_of(obj: &Value) -> Option<u64> {
    crate::server::objects::at(obj, &["metadata", "resourceVersion"])
        .and_then(Value::as_str)
        .and_then(|s| s.parse().ok())
}

pub(crate) fn set_revision(obj: &mut Value, rev: u64) {
    if let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.insert("resourceVersion".into(), Value::String(rev.to_string()));
    }
}

/// Where API tokens live (their hashes only; see [`crate::auth`]): beside the objects, in the
/// same backend, so that every coordinator on one etcd knows every node's credential.
#[async_trait]
pub trait Tokens: Send + Sync + 'static {
    /// Store a token's hash with its identity and role, replacing the token of that name. With
    /// `ttl`, it stops working that long from now (kubeadm's bootstrap tokens expire after 24 h).
    async fn put_token(
        &self,
        hash: String,
        name: String,
        role: String,
        ttl: Option<std::time::Duration>,
    ) -> Result<(), StoreError>;
    /// Store a token under `name` only if no token has that name: true if stored. Enrollment
    /// claims a node's credential this way, so two hosts enrolling under one name at the same
    /// time cannot both get one.
    async fn claim_token(&self, hash: String, name: String, role: String) -> Result<bool, StoreError>;
    /// The hash of the token named `name`, if there is one.
    async fn token_hash_of(&self, name: String) -> Result<Option<String>, StoreError>;
    /// Every token's (name, role, created, expires), by name; never the hashes.
    async fn list_tokens(&self) -> Result<Vec<TokenInfo>, StoreError>;
    /// Delete the token named `name` (with `hash`, only if it still has that hash). True if one
    /// was deleted.
    async fn delete_token(&self, name: String, hash: Option<String>) -> Result<bool, StoreError>;
    /// Delete every token that has expired at `now`; returns their names, sorted.
    async fn purge_expired_tokens(&self, now: chrono::DateTime<chrono::Utc>) -> Result<Vec<String>, StoreError>;
    /// Look a token hash up: (name, role), if it exists and has not expired.
    async fn find_token(&self, hash: String) -> Result<Option<(String, String)>, StoreError>;
}

/// A time as tokens record it: RFC 3339, whole seconds, UTC.
pub(crate) fn rfc3339(t: chrono::DateTime<chrono::Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

/// When a token minted `now` with `ttl` expires.
pub(crate) fn token_expiry(
    now: chrono::DateTime<chrono::Utc>,
    ttl: Option<std::time::Duration>,
) -> Result<Option<String>, StoreError> {
    let Some(ttl) = ttl else { return Ok(None) };
    let ttl = chrono::Duration::from_std(ttl)
        .map_err(|_| StoreError::Backend(format!("a token's time to live of {ttl:?} is too long")))?;
    let at =
        now.checked_add_signed(ttl).ok_or_else(|| StoreError::Backend("a token's time to live is too long".into()))?;
    Ok(Some(rfc3339(at)))
}
