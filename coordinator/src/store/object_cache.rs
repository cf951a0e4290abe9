//! The newest version of every object of some resources, in memory, for the SQLite store and
//! for the watch cache in front of etcd.

use super::{Event, EventType, JsonListing, Key, StoreError, Stored};
use std::sync::{Arc, Mutex};

pub(crate) fn parse(data: &str) -> Result<serde_json::Value, StoreError> {
    serde_json::from_str(data).map_err(|e| StoreError::Backend(format!("corrupt object in store: {e}")))
}

/// The newest committed version of every object of some resources, in memory, as
/// kube-apiserver's watch cache keeps them: a point read of such an object costs a map lookup
/// instead of an SQLite read and a JSON parse. With every write of a commit the SQLite file
/// changes, so each reader connection found its page cache stale and read the b-tree's pages
/// again: a fleet's GETs and PATCHes of Nodes and fetches of rendered configs spent more in
/// SQLite than in anything else of the request. The writer thread updates the cache after each
/// commit and before acknowledging it, and objects are written by this process only, so a read
/// never sees a version older than one acknowledged, nor one not committed.
///
/// A list of such a resource is answered from here too, at the revision of the last commit
/// applied (a commit is applied whole, under one lock, so a list sees all of it or none), and
/// its items are the cache's own JSON, shared: a paged list's later pages then pin no copy of
/// the fleet (a `limit=1` list of 10,000 Nodes kept ~10 MB for five minutes), and a list reads
/// no SQLite rows (kube-apiserver serves lists from its watch cache the same way).
///
/// Some resources are kept as their JSON text only ([`CachedResource::parsed`] false): a
/// MachineConfig's object tree took up to 17 times its text (a map per file entry; 147 KiB for
/// a config of 100 small files whose text is 8.7 KB, by the allocator's count:
/// `scripts/mc-memory.py`), every rendered config is kept, and what reads them (an agent's fetch,
/// the update inputs sent with a pick) sends the text. A point read of one parses it.
#[derive(Default)]
pub(crate) struct ObjectCache {
    resources: Vec<CachedResource>,
    /// Every resource, not only `resources` (kept parsed unless listed there as text only).
    everything: bool,
    state: Mutex<CacheState>,
}

/// A resource the store keeps in memory (see [`ObjectCache`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CachedResource {
    pub resource: String,
    /// Keep each object parsed as well as its text: for what is read often and is small
    /// (Nodes, pools), not for what is large and mostly sent on as it is (rendered configs).
    pub parsed: bool,
}

impl CachedResource {
    pub fn parsed(resource: String) -> Self {
        CachedResource { resource, parsed: true }
    }
    pub fn text(resource: String) -> Self {
        CachedResource { resource, parsed: false }
    }
}

/// One cached object: parsed and its text, or its text only.
#[derive(Debug, Clone)]
pub(crate) enum Kept {
    Parsed(Stored),
    Text(Arc<str>),
}

impl Kept {
    pub(crate) fn json(&self) -> &Arc<str> {
        match self {
            Kept::Parsed(s) => &s.json,
            Kept::Text(t) => t,
        }
    }
    pub(crate) fn stored(&self) -> Result<Stored, StoreError> {
        match self {
            Kept::Parsed(s) => Ok(s.clone()),
            Kept::Text(t) => Ok(Stored { object: Arc::new(parse(t)?), json: t.clone() }),
        }
    }
}

#[derive(Default)]
pub(crate) struct CacheState {
    /// By key: a point read or a write is a hash lookup (an ordered map's string comparisons
    /// down the tree cost the 10,000-node rollout 3% more coordinator CPU).
    pub(crate) objects: std::collections::HashMap<Key, Kept>,
    /// The same keys in order (resource, namespace, name), moved only when an object is added
    /// or deleted: a list is a range of it, already sorted as SQLite's listing is (a list that
    /// filtered and sorted the map took longer than SQLite's ordered read).
    order: std::collections::BTreeSet<Key>,
    /// The store's revision once the last commit applied here was made.
    pub(crate) revision: u64,
}

impl CacheState {
    pub(crate) fn put(&mut self, key: Key, stored: Kept) {
        if let Some(old) = self.objects.get_mut(&key) {
            *old = stored;
        } else {
            self.order.insert(key.clone());
            self.objects.insert(key, stored);
        }
    }
}

impl ObjectCache {
    /// A cache of the objects of `resources`, empty.
    pub(crate) fn of(resources: &[CachedResource]) -> Self {
        ObjectCache { resources: resources.to_vec(), ..Default::default() }
    }

    /// A cache of every resource's objects, kept parsed except those `text` says.
    pub(crate) fn of_everything(text: &[CachedResource]) -> Self {
        ObjectCache { resources: text.to_vec(), everything: true, ..Default::default() }
    }

    pub(crate) fn covers(&self, resource: &str) -> bool {
        self.everything || self.resources.iter().any(|r| r.resource == resource)
    }

    /// How to keep an object of `resource`; None when it is not cached.
    fn keeps_parsed(&self, resource: &str) -> Option<bool> {
        match self.resources.iter().find(|r| r.resource == resource) {
            Some(r) => Some(r.parsed),
            None => self.everything.then_some(true),
        }
    }

    pub(crate) fn lock(&self) -> std::sync::MutexGuard<'_, CacheState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Apply one commit's events (in revision order); `revision`: the store's revision after it.
    pub(crate) fn apply_commit<'a>(&self, events: impl IntoIterator<Item = &'a Event>, revision: u64) {
        let mut st = self.lock();
        for ev in events {
            let Some(parsed) = self.keeps_parsed(&ev.key.resource) else { continue };
            match ev.kind {
                EventType::Deleted => {
                    if st.objects.remove(&ev.key).is_some() {
                        st.order.remove(&ev.key);
                    }
                }
                _ if parsed => st.put(ev.key.clone(), Kept::Parsed(stored_of(ev))),
                _ => st.put(ev.key.clone(), Kept::Text(ev.json.clone())),
            }
        }
        st.revision = st.revision.max(revision);
    }

    /// Fill an empty cache with `items`, stored as of `revision`.
    pub(crate) fn load(&self, items: Vec<(Key, Stored)>, revision: u64) {
        let mut st = self.lock();
        for (key, stored) in items {
            match self.keeps_parsed(&key.resource) {
                None => {}
                Some(true) => st.put(key, Kept::Parsed(stored)),
                Some(false) => st.put(key, Kept::Text(stored.json)),
            }
        }
        st.revision = revision;
    }

    /// Every cached object of `resource` (in `namespace` when given), sorted by namespace and
    /// name as the SQLite listing is, with the revision they are at. Only for a resource it
    /// [`covers`](Self::covers).
    pub(crate) fn listing(&self, resource: &str, namespace: Option<&str>) -> JsonListing {
        let from = Key::new(resource, namespace.unwrap_or(""), "");
        let st = self.lock();
        let items = st
            .order
            .range(from..)
            .take_while(|k| k.resource == resource && namespace.is_none_or(|ns| k.namespace == ns))
            .filter_map(|k| st.objects.get(k).map(|c| c.json().clone()))
            .collect();
        JsonListing { items, revision: st.revision }
    }
}

/// What a committed write's event says is stored now (its JSON is the writer's, serialized once
/// for the rows and shared).
pub(crate) fn stored_of(ev: &Event) -> Stored {
    Stored { object: ev.object.clone(), json: ev.json.clone() }
}
