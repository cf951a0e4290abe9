//! The watch cache in front of etcd: every registry object in memory, and a window of recent
//! events, fed by one etcd watch, as kube-apiserver's cacher keeps them.
//!
//! Without it every read was a round trip to etcd and every agent's watch an etcd watch of its
//! own: a 1,000-node rollout on etcd spent 1.56 ms of coordinator CPU per node update, four times
//! the SQLite store's, and 10,000 agents would have been 10,000 watchers in etcd. Here reads are
//! map lookups, watches follow the same in-memory [`Hub`] the SQLite store publishes to (with
//! progress notes, which etcd watches did not give), and etcd sees one watch and the writes.
//!
//! **Reads see every acknowledged write.** Only the active coordinator writes objects (its
//! writes are fenced by its lease, see [`super::etcd`]), and a write is acknowledged only once
//! the cache has applied the etcd event of its revision. So a read after a write, from any
//! client of this coordinator, sees it or something newer, as it would reading etcd; a read
//! costs no round trip (kube-apiserver's consistent reads from its cache ask etcd for its
//! revision first, since other API servers write too).
//!
//! **A watch from an old revision.** The window keeps the newest events (at most
//! [`WindowLimits::events`] events and [`WindowLimits::bytes`] of their JSON) and replays
//! from it; a watch from a revision older than its start gets 410 Gone and the client lists
//! again, as kube-apiserver's cacher answers "too old resource version". A watch of one object
//! that has not changed since that revision follows from the window's start instead: it would
//! miss nothing (an agent reconnecting after a coordinator took over gets no 410 for a Node
//! nobody wrote meanwhile).
//!
//! If the etcd watch breaks, it is opened again from the last revision applied; if etcd compacted
//! past that, the cache cannot know what it missed and says so ([`WatchCache::failed`]): the
//! coordinator stops, and its next start lists everything again.

use super::etcd::{outcomes_of, EtcdStore};
use super::follow::{self, History};
use super::hub::{Hub, Subscription};
use super::object_cache::{parse, CachedResource, ObjectCache};
use super::{
    revision_of, CasWrite, Event, EventType, JsonListing, Key, Listing, ProgressSchedule, ProgressStream, Store,
    StoreError, Stored, WatchFilter, WatchStream,
};
use async_trait::async_trait;
use serde_json::Value;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;
use tokio::sync::oneshot;

/// How far back the window of events reaches.
#[derive(Debug, Clone, Copy)]
pub struct WindowLimits {
    /// Revisions back from the newest (`serve --watch-history`, which etcd's compaction keeps
    /// too): a watch from before is Gone, whichever store answers it.
    pub revisions: u64,
    /// Revisions of etcd's history read into the window at start (fewer if etcd compacted
    /// them): a watch from before a restart or a takeover resumes instead of being Gone.
    pub prefill: u64,
    pub events: usize,
    /// Of the events' JSON: what a window costs in memory (a Node's event is ~1-3 KB).
    pub bytes: usize,
}

impl Default for WindowLimits {
    /// Enough for a 10,000-node rollout (about six events a node) to be replayed from its start.
    fn default() -> Self {
        WindowLimits { revisions: super::sqlite::DEFAULT_RETAIN, prefill: 10_000, events: 100_000, bytes: 96 << 20 }
    }
}

/// How long a start may spend reading etcd's recent history into the window.
const PREFILL_WITHIN: Duration = Duration::from_secs(10);

/// Events a replay hands to a watch at once (whole revisions: a page may run over).
const PAGE: usize = 1000;

/// How long a write waits for its event before it is answered with an error. Its event comes
/// within milliseconds unless the etcd watch is broken.
const SEEN_WITHIN: Duration = Duration::from_secs(10);

/// The store on etcd, read from memory. Cheap to clone.
#[derive(Clone)]
pub struct WatchCache {
    inner: Arc<Inner>,
}

struct Inner {
    etcd: EtcdStore,
    objects: ObjectCache,
    hub: Arc<Hub>,
    window: Mutex<Window>,
    limits: WindowLimits,
    failed: tokio::sync::watch::Sender<Option<String>>,
    follower: Mutex<Option<tokio::task::AbortHandle>>,
    /// Woken when a write on behalf of an identity has its answer from etcd.
    resolved: tokio::sync::Notify,
    /// Tests: how long the follower holds each etcd response before applying it (a cache that
    /// lags etcd, as under load).
    #[cfg(test)]
    lag_ms: std::sync::atomic::AtomicU64,
}

impl Drop for Inner {
    fn drop(&mut self) {
        if let Some(f) = self.follower.get_mut().ok().and_then(Option::take) {
            f.abort();
        }
    }
}

/// One event of the window: its JSON only (the object is parsed again when it is replayed,
/// which is rare; a parsed Node takes several times its text).
struct Entry {
    revision: u64,
    key: Key,
    kind: EventType,
    json: Arc<str>,
}

#[derive(Default)]
struct Window {
    entries: VecDeque<Entry>,
    /// Each object's entries, oldest first, by revision and place (see `dropped`): a watch of
    /// one object (each agent's of its Node) replays its own events without reading the whole
    /// window. Scanning it was 10,000 agents' watches times ~30,000 entries: the coordinator's
    /// two cores for 30 s after a 10,000-node fleet connected.
    by_key: HashMap<Key, VecDeque<(u64, u64)>>,
    /// Entries dropped off the front so far: the entry placed `p` is at `entries[p - dropped]`.
    dropped: u64,
    bytes: usize,
    /// Every event after this revision is in `entries`.
    floor: u64,
    /// The newest revision applied (objects, window and hub).
    head: u64,
    /// Writes waiting for their revision to be applied.
    waiters: BTreeMap<u64, Vec<oneshot::Sender<()>>>,
    /// Who made the writes of these revisions (see [`super::Event::origin`]), for the events
    /// still to come; `origins_taken`: the newest revision whose event has taken its origin.
    origins: HashMap<u64, Arc<str>>,
    origins_taken: u64,
    /// Writes on behalf of an identity sent to etcd and not answered yet, by object: an event
    /// of such an object waits for them (see [`Inner::origins_ready`]).
    pending: HashMap<Key, usize>,
    /// Why the cache stopped following etcd.
    failed: Option<String>,
}

impl Window {
    /// Forgets `e`, just taken off the front (the oldest entry, so its object's oldest too).
    fn pop_key(&mut self, e: &Entry) {
        self.bytes -= e.json.len();
        self.dropped += 1;
        if let Some(revisions) = self.by_key.get_mut(&e.key) {
            revisions.pop_front();
            if revisions.is_empty() {
                self.by_key.remove(&e.key);
            }
        }
    }

    /// The entries `filter` wants after `after`, up to a page (whole revisions).
    fn wanted_after(&self, filter: &WatchFilter, after: u64) -> Vec<&Entry> {
        let mut found: Vec<&Entry> = Vec::new();
        if let (Some(resource), Some(namespace), Some(name)) = (&filter.resource, &filter.namespace, &filter.name) {
            let key = Key::new(resource, namespace, name);
            let Some(revisions) = self.by_key.get(&key) else { return found };
            let newer = revisions.partition_point(|(r, _)| *r <= after);
            let at = |place: u64| usize::try_from(place.saturating_sub(self.dropped)).ok();
            found.extend(revisions.range(newer..).take(PAGE).filter_map(|(_, p)| self.entries.get(at(*p)?)));
            return found;
        }
        let start = self.entries.partition_point(|e| e.revision <= after);
        for e in self.entries.range(start..) {
            if found.len() >= PAGE && found.last().is_some_and(|f| f.revision != e.revision) {
                break;
            }
            if filter.matches(&e.key) {
                found.push(e);
            }
        }
        found
    }

    /// A window of `history` (every event after `floor`), at `head`.
    fn of_history(history: Vec<Event>, floor: u64, head: u64) -> Window {
        let mut w = Window { floor, head, ..Window::default() };
        for ev in &history {
            w.push(ev);
        }
        w
    }

    /// Whole revisions out of the front, so that the window's start is a revision's end, down
    /// to `limits` (`last`: the newest revision, which stays however large).
    fn evict(&mut self, limits: &WindowLimits, last: u64) {
        let keep_after = last.saturating_sub(limits.revisions.max(1));
        while let Some(oldest) = self.entries.front().map(|e| e.revision) {
            let over = self.entries.len() > limits.events || self.bytes > limits.bytes;
            if oldest >= last || !(over || oldest <= keep_after) {
                break;
            }
            while self.entries.front().is_some_and(|e| e.revision == oldest) {
                if let Some(e) = self.entries.pop_front() {
                    self.pop_key(&e);
                }
            }
            self.floor = oldest;
        }
        // Revisions of nothing (another prefix's writes, the active key) age out too.
        self.floor = self.floor.max(keep_after);
    }

    /// `ev` at the window's end (its JSON only).
    fn push(&mut self, ev: &Event) {
        self.bytes += ev.json.len();
        let place = self.dropped + self.entries.len() as u64;
        self.by_key.entry(ev.key.clone()).or_default().push_back((ev.revision, place));
        self.entries.push_back(Entry {
            revision: ev.revision,
            key: ev.key.clone(),
            kind: ev.kind,
            json: ev.json.clone(),
        });
    }
}

impl WatchCache {
    /// Read every object from `etcd` and follow it from there. `text`: the resources to keep
    /// as JSON text only (large ones sent on as they are); everything else is kept parsed.
    pub async fn start(etcd: EtcdStore, text: &[CachedResource]) -> Result<WatchCache, StoreError> {
        Self::start_with(etcd, text, WindowLimits::default()).await
    }

    pub async fn start_with(
        etcd: EtcdStore,
        text: &[CachedResource],
        limits: WindowLimits,
    ) -> Result<WatchCache, StoreError> {
        let (items, revision) = etcd.snapshot().await?;
        let count = items.len();
        let back = limits.prefill.min(limits.revisions);
        let (floor, history) = match tokio::time::timeout(
            PREFILL_WITHIN,
            etcd.history(revision.saturating_sub(back), revision),
        )
        .await
        {
            Ok(Ok(h)) => h,
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "reading etcd's recent history failed; watches from before now are Gone");
                (revision, Vec::new())
            }
            Err(_) => {
                tracing::warn!("reading etcd's recent history took over 10 s; watches from before now are Gone");
                (revision, Vec::new())
            }
        };
        // Within the limits from the start, not only from the first event on.
        let mut window = Window::of_history(history, floor, revision);
        window.evict(&limits, revision);
        let objects = ObjectCache::of_everything(text);
        objects.load(items, revision);
        let stream = etcd.watch_registry(revision).await?;
        let (failed, _) = tokio::sync::watch::channel(None);
        let inner = Arc::new(Inner {
            etcd: etcd.clone(),
            objects,
            hub: Arc::new(Hub::new(revision)),
            window: Mutex::new(window),
            limits,
            failed,
            follower: Mutex::new(None),
            resolved: tokio::sync::Notify::new(),
            #[cfg(test)]
            lag_ms: Default::default(),
        });
        // Spawned once the cache exists: a follower that found it gone would stop at once.
        let follower = tokio::spawn(follow_etcd(Arc::downgrade(&inner), etcd, stream)).abort_handle();
        *inner.follower.lock().unwrap_or_else(|e| e.into_inner()) = Some(follower);
        tracing::info!(objects = count, revision, history_from = floor, "the watch cache holds the store from etcd");
        Ok(WatchCache { inner })
    }

    /// Returns when the cache stopped following etcd, with why: from then on it answers
    /// nothing new, and the coordinator must stop.
    pub async fn failed(&self) -> String {
        let mut rx = self.inner.failed.subscribe();
        loop {
            if let Some(why) = rx.borrow_and_update().clone() {
                return why;
            }
            if rx.changed().await.is_err() {
                return std::future::pending().await;
            }
        }
    }

    /// The write `stored` made, answered once the cache has applied its revision.
    async fn seen(&self, stored: Stored) -> Result<Stored, StoreError> {
        let revision = revision_of(&stored.object)
            .ok_or_else(|| StoreError::Backend("etcd answered a write without its revision".into()))?;
        self.applied(revision).await?;
        Ok(stored)
    }

    /// Returns once the cache has applied `revision`.
    async fn applied(&self, revision: u64) -> Result<(), StoreError> {
        let answered = std::time::Instant::now();
        self.reached(revision).await?;
        self.inner.etcd.metrics().cache_applied(answered);
        Ok(())
    }

    /// [`Self::applied`], without counting the wait as a write's.
    async fn reached(&self, revision: u64) -> Result<(), StoreError> {
        let rx = {
            let mut w = self.inner.lock();
            if w.head >= revision {
                return Ok(());
            }
            if let Some(why) = &w.failed {
                return Err(unseen(revision, why));
            }
            let (tx, rx) = oneshot::channel();
            w.waiters.entry(revision).or_default().push(tx);
            rx
        };
        match tokio::time::timeout(SEEN_WITHIN, rx).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(_)) => {
                let why = self.inner.lock().failed.clone().unwrap_or_else(|| "it stopped".into());
                Err(unseen(revision, &why))
            }
            Err(_) => Err(unseen(revision, "its etcd watch has not delivered it within 10 s")),
        }
    }

    /// A write of `key` etcd refused, answered once the cache holds what refused it: a caller
    /// that reads again and retries (a PATCH, on a conflict) must read the write it lost to,
    /// not the version it had, or it would lose again until the cache caught up. The refusal
    /// is the answer whatever the wait comes to.
    async fn refused<T>(&self, key: &Key, e: StoreError) -> Result<T, StoreError> {
        match &e {
            StoreError::Conflict { stored, .. } => {
                let _ = self.applied(*stored).await;
            }
            StoreError::AlreadyExists(_) => self.caught_up_on(key, true).await,
            StoreError::NotFound(_) => self.caught_up_on(key, false).await,
            _ => {}
        }
        Err(e)
    }

    /// Waits (at most [`SEEN_WITHIN`]) until the cache holds `key` (`present`) or holds it no
    /// more, or has applied a write of it since the wait began: etcd refused a write for a
    /// state of `key` that the cache had not applied yet, or has now. The revision of that
    /// state is not known: etcd's current one may be a write outside the registry (a token,
    /// the marker of a start), which the cache never sees, and waiting for it stalled such a
    /// refusal until the next registry write, up to 10 s, then failed it.
    async fn caught_up_on(&self, key: &Key, present: bool) {
        let deadline = tokio::time::Instant::now() + SEEN_WITHIN;
        let last_write = |w: &Window| w.by_key.get(key).and_then(|r| r.back()).map(|(revision, _)| *revision);
        let began = last_write(&self.inner.lock());
        loop {
            // The head first: what is checked next is at least that new, and an apply in
            // between makes the wait below return at once.
            let head = {
                let w = self.inner.lock();
                if last_write(&w) != began {
                    return;
                }
                w.head
            };
            if self.inner.objects.lock().objects.contains_key(key) == present {
                return;
            }
            match tokio::time::timeout_at(deadline, self.reached(head + 1)).await {
                Ok(Ok(())) => {}
                Ok(Err(_)) | Err(_) => return,
            }
        }
    }

    /// The answer to a write of `key`: once the cache has it, or once it holds what refused it.
    async fn answer(&self, key: &Key, written: Result<Stored, StoreError>) -> Result<Stored, StoreError> {
        match written {
            Ok(stored) => self.seen(stored).await,
            Err(e) => self.refused(key, e).await,
        }
    }

    /// A subscription for a watch of `filter` from `from`, and the revision it follows from:
    /// `from`, or the window's start for a watch of one object unchanged since `from`.
    fn subscribe(&self, filter: &WatchFilter, from: u64) -> Result<(Subscription, u64), StoreError> {
        // Subscribed before the window is looked at, so nothing applied in between is missed.
        let sub = self.inner.hub.subscribe(filter.clone());
        let floor = self.inner.lock().floor;
        if from >= floor {
            return Ok((sub, from));
        }
        if self.unchanged_since(filter, from) {
            return Ok((sub, floor));
        }
        Err(StoreError::Gone { requested: from, oldest: floor + 1 })
    }

    /// Whether `filter` is one object, there now, last written at or before `from`: then no
    /// event it wants came after `from` (a deletion would have taken it out).
    fn unchanged_since(&self, filter: &WatchFilter, from: u64) -> bool {
        let (Some(resource), Some(namespace), Some(name)) = (&filter.resource, &filter.namespace, &filter.name) else {
            return false;
        };
        let key = Key::new(resource, namespace, name);
        let kept = self.inner.objects.lock().objects.get(&key).cloned();
        let written = kept.and_then(|k| k.stored().ok()).and_then(|s| revision_of(&s.object));
        written.is_some_and(|r| r <= from)
    }
}

/// A write of an object on behalf of an identity, sent to etcd and not answered yet (see
/// [`Inner::origins_ready`]); counted off when dropped, also when the request is given up
/// half-way (its client went away).
struct Pending<'a> {
    inner: &'a Inner,
    key: Key,
}

impl<'a> Pending<'a> {
    fn new(inner: &'a Inner, key: &Key) -> Self {
        *inner.lock().pending.entry(key.clone()).or_default() += 1;
        Pending { inner, key: key.clone() }
    }
}

impl Drop for Pending<'_> {
    fn drop(&mut self) {
        {
            let mut w = self.inner.lock();
            if let Some(n) = w.pending.get_mut(&self.key) {
                *n -= 1;
                if *n == 0 {
                    w.pending.remove(&self.key);
                }
            }
        }
        self.inner.resolved.notify_waiters();
    }
}

/// A write etcd committed that the cache has not seen.
fn unseen(revision: u64, why: &str) -> StoreError {
    StoreError::Backend(format!(
        "etcd committed the write (revision {revision}) but the coordinator's watch cache has not seen it: {why}"
    ))
}

impl Inner {
    fn lock(&self) -> MutexGuard<'_, Window> {
        self.window.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Waits while an event of `events` may be the write of an identity whose answer from etcd
    /// has not come yet (so that its origin is known). Bounded: past 5 s the events go out
    /// without (a watch that leaves that identity's writes out then gets one it did not need).
    async fn origins_ready(&self, events: &[Event]) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        loop {
            let resolved = self.resolved.notified();
            tokio::pin!(resolved);
            resolved.as_mut().enable();
            {
                let w = self.lock();
                let waits = |e: &Event| w.pending.contains_key(&e.key) && !w.origins.contains_key(&e.revision);
                if w.pending.is_empty() || !events.iter().any(waits) {
                    return;
                }
            }
            if tokio::time::timeout_at(deadline, resolved).await.is_err() {
                tracing::warn!(
                    "events of objects with a write on an identity's behalf still unanswered by etcd waited 5 s \
                     for its origin; they go out without (a watch leaving out that identity's writes may get one)"
                );
                return;
            }
        }
    }

    /// Apply one etcd watch response's events (whole revisions, in order): to the objects, the
    /// window and the hub, then answer the writes they complete.
    fn apply(&self, mut events: Vec<Event>) {
        let Some(last) = events.last().map(|e| e.revision) else { return };
        {
            // The window first (a watch replaying it ahead of the objects or the hub gets the
            // hub's copies of the same events after, and drops them as not newer).
            let mut w = self.lock();
            for ev in &mut events {
                ev.origin = w.origins.remove(&ev.revision);
                w.push(ev);
            }
            w.origins_taken = last;
        }
        self.objects.apply_commit(events.iter(), last);
        self.hub.publish_all(events.iter());
        let done = {
            let mut w = self.lock();
            // Only now may the floor pass these revisions: a watch of one object from before
            // them that found the floor past its revision and its object unchanged (in the
            // objects, not yet applied) would follow from after an event it never got.
            w.evict(&self.limits, last);
            w.head = last;
            let later = w.waiters.split_off(&(last + 1));
            std::mem::replace(&mut w.waiters, later)
        };
        for tx in done.into_values().flatten() {
            let _ = tx.send(());
        }
    }

    fn fail(&self, why: String) {
        tracing::error!(reason = %why, "the watch cache stopped following etcd");
        {
            let mut w = self.lock();
            w.failed = Some(why.clone());
            // The writes waiting are told (their senders dropped).
            w.waiters.clear();
        }
        self.failed.send_replace(Some(why));
    }
}

/// Follow etcd's registry into the cache while it lives; a broken watch is opened again from
/// the last revision applied.
async fn follow_etcd(cache: Weak<Inner>, etcd: EtcdStore, mut stream: etcd_client::WatchStream) {
    let why = loop {
        let message = stream.message().await;
        let Some(inner) = cache.upgrade() else { return };
        if let Ok(Some(resp)) = &message {
            tracing::trace!(
                events = resp.events().len(),
                header = resp.header().map(|h| h.revision()),
                created = resp.created(),
                "etcd watch response"
            );
        }
        let broken = match message {
            Ok(Some(resp)) if resp.compact_revision() > 0 => {
                break format!(
                    "etcd compacted its history to revision {} past the cache's last, {}",
                    resp.compact_revision(),
                    inner.lock().head
                );
            }
            Ok(Some(resp)) if resp.canceled() => format!("etcd canceled the watch: {}", resp.cancel_reason()),
            Ok(Some(resp)) => match etcd.events_of(&resp) {
                Ok(events) => {
                    #[cfg(test)]
                    {
                        let lag = inner.lag_ms.load(std::sync::atomic::Ordering::SeqCst);
                        tokio::time::sleep(Duration::from_millis(lag)).await;
                    }
                    inner.origins_ready(&events).await;
                    inner.apply(events);
                    continue;
                }
                Err(e) => break format!("an event from etcd: {e}"),
            },
            Ok(None) => "etcd ended the watch".to_string(),
            Err(e) => format!("the watch: {e}"),
        };
        drop(inner);
        let Some(s) = reopen(&cache, &etcd, &broken).await else { return };
        stream = s;
    };
    if let Some(inner) = cache.upgrade() {
        inner.fail(why);
    }
}

/// The etcd watch again, from the last revision applied, retried until it opens (or the cache
/// is gone).
async fn reopen(cache: &Weak<Inner>, etcd: &EtcdStore, why: &str) -> Option<etcd_client::WatchStream> {
    tracing::warn!(reason = why, "the watch cache's etcd watch broke; opening it again");
    let mut backoff = Duration::from_millis(100);
    loop {
        let head = cache.upgrade()?.lock().head;
        match etcd.watch_registry(head).await {
            Ok(s) => return Some(s),
            Err(e) => tracing::warn!(error = %e, "opening the watch cache's etcd watch failed; retrying"),
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(Duration::from_secs(2));
    }
}

#[async_trait]
impl History for WatchCache {
    fn hub(&self) -> &Arc<Hub> {
        &self.inner.hub
    }

    async fn after(&self, filter: &WatchFilter, after: u64) -> Result<Vec<Event>, StoreError> {
        let found: Vec<(u64, Key, EventType, Arc<str>)> = {
            let w = self.inner.lock();
            if after < w.floor {
                return Err(StoreError::Gone { requested: after, oldest: w.floor + 1 });
            }
            w.wanted_after(filter, after)
                .into_iter()
                .map(|e| (e.revision, e.key.clone(), e.kind, e.json.clone()))
                .collect()
        };
        found
            .into_iter()
            .map(|(revision, key, kind, json)| {
                Ok(Event { revision, key, kind, object: Arc::new(parse(&json)?), json, origin: None })
            })
            .collect()
    }
}

#[async_trait]
impl Store for WatchCache {
    fn register_metrics(&self, registry: &mut prometheus_client::registry::Registry) {
        self.inner.etcd.metrics().register(registry);
    }

    async fn get(&self, key: &Key) -> Result<Option<Stored>, StoreError> {
        let kept = self.inner.objects.lock().objects.get(key).cloned();
        kept.map(|k| k.stored()).transpose()
    }

    async fn get_json(&self, key: &Key) -> Result<Option<Arc<str>>, StoreError> {
        Ok(self.inner.objects.lock().objects.get(key).map(|k| k.json().clone()))
    }

    async fn list(&self, resource: &str, namespace: Option<&str>) -> Result<Listing, StoreError> {
        let listing = self.inner.objects.listing(resource, namespace);
        let items = listing.items.iter().map(|s| parse(s)).collect::<Result<Vec<Value>, _>>()?;
        Ok(Listing { items, revision: listing.revision })
    }

    async fn list_json(&self, resource: &str, namespace: Option<&str>) -> Result<JsonListing, StoreError> {
        Ok(self.inner.objects.listing(resource, namespace))
    }

    async fn create(&self, key: &Key, object: Value) -> Result<Stored, StoreError> {
        let written = self.inner.etcd.create(key, object).await;
        self.answer(key, written).await
    }

    async fn update(&self, key: &Key, object: Value, expected: Option<u64>) -> Result<Stored, StoreError> {
        let written = self.inner.etcd.update(key, object, expected).await;
        self.answer(key, written).await
    }

    async fn update_by(
        &self,
        key: &Key,
        object: Value,
        expected: Option<u64>,
        origin: &str,
    ) -> Result<Stored, StoreError> {
        // Its event must say who made it (so that a watch leaving out that identity's writes
        // does not get it), and etcd's watch may bring the event before the answer.
        let in_flight = Pending::new(&self.inner, key);
        let written = self.inner.etcd.update(key, object, expected).await;
        if let Ok(stored) = &written {
            if let Some(revision) = revision_of(&stored.object) {
                let mut w = self.inner.lock();
                if w.origins_taken < revision {
                    w.origins.insert(revision, Arc::from(origin));
                }
            }
        }
        drop(in_flight);
        self.answer(key, written).await
    }

    async fn delete(&self, key: &Key, expected: Option<u64>) -> Result<Stored, StoreError> {
        let written = self.inner.etcd.delete(key, expected).await;
        self.answer(key, written).await
    }

    async fn watch(&self, filter: WatchFilter, from: u64) -> Result<WatchStream, StoreError> {
        let (sub, from) = self.subscribe(&filter, from)?;
        Ok(follow::events(self.clone(), filter, from, sub))
    }

    async fn watch_with_progress(
        &self,
        filter: WatchFilter,
        from: u64,
        schedule: ProgressSchedule,
    ) -> Result<ProgressStream, StoreError> {
        let (sub, from) = self.subscribe(&filter, from)?;
        Ok(follow::with_progress(self.clone(), filter, from, sub, schedule))
    }

    async fn revision(&self) -> Result<u64, StoreError> {
        Ok(self.inner.objects.lock().revision)
    }

    async fn check_writes(&self) -> Result<(), StoreError> {
        self.inner.etcd.check_writes().await
    }

    /// Answered once the cache holds every write made and what refused the others, as a
    /// single write is ([`Self::answer`]).
    async fn update_in_order(
        &self,
        first: Vec<CasWrite>,
        then: Vec<CasWrite>,
    ) -> Result<Vec<Option<Stored>>, StoreError> {
        let keys: Vec<Key> = first.iter().chain(&then).map(|(key, _, _)| key.clone()).collect();
        let outcomes = self.inner.etcd.write_in_order(first, then).await;
        let (mut made, mut refused) = (0, 0);
        for (key, outcome) in keys.iter().zip(&outcomes) {
            match outcome {
                Some(Ok(stored)) => made = made.max(revision_of(&stored.object).unwrap_or_default()),
                Some(Err(StoreError::Conflict { stored, .. })) => refused = refused.max(*stored),
                Some(Err(StoreError::NotFound(_))) => self.caught_up_on(key, false).await,
                _ => {}
            }
        }
        // The cache applies revisions in order: the last one is all of them.
        if made > 0 {
            self.applied(made.max(refused)).await?;
        } else if refused > 0 {
            let _ = self.applied(refused).await;
        }
        outcomes_of(outcomes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::etcd::testing::EtcdServer;
    use crate::store::{EtcdOptions, WatchItem};
    use futures::StreamExt;
    use serde_json::json;

    fn obj(name: &str, v: i64) -> Value {
        json!({"metadata": {"name": name}, "spec": {"v": v}})
    }

    async fn etcd_store(etcd: &EtcdServer) -> EtcdStore {
        EtcdStore::connect(&EtcdOptions::new(vec![etcd.endpoint().to_string()])).await.unwrap()
    }

    fn node(name: &str) -> Key {
        Key::cluster("/nodes", name)
    }

    fn one(name: &str) -> WatchFilter {
        WatchFilter { name: Some(name.into()), namespace: Some(String::new()), ..WatchFilter::resource("/nodes") }
    }

    /// Bounded: a watch that never delivers fails the test instead of hanging it.
    async fn next<S: futures::Stream + Unpin>(s: &mut S) -> S::Item {
        tokio::time::timeout(Duration::from_secs(10), s.next()).await.expect("an item within 10 s").expect("more")
    }

    /// A refused write is answered with its refusal, also when etcd's last write was outside
    /// the registry (a token), which the cache never sees: waiting for etcd's revision held
    /// such a refusal until the next registry write, up to 10 s, then answered that the write
    /// was committed but not seen.
    #[tokio::test]
    async fn a_refusal_after_a_write_outside_the_registry_is_answered_as_such() {
        use crate::store::Tokens;
        let etcd = EtcdServer::start();
        let cache = WatchCache::start_with(etcd_store(&etcd).await, &[], WindowLimits::default()).await.unwrap();
        let there = node("there");
        cache.create(&there, obj("t", 1)).await.unwrap();
        let token = |n: &str| cache.inner.etcd.put_token(format!("hash-{n}"), n.to_string(), "viewer".into(), None);
        token("a").await.unwrap();
        match cache.create(&there, obj("t", 2)).await {
            Err(StoreError::AlreadyExists(_)) => {}
            other => panic!("a create of an object there: {other:?}"),
        }
        for missing in
            [cache.delete(&node("missing"), None).await, cache.update(&node("missing"), obj("m", 1), None).await]
        {
            assert!(matches!(missing, Err(StoreError::NotFound(_))), "{missing:?}");
        }
        let out = cache.update_in_order(vec![(node("missing"), obj("m", 1), None)], Vec::new()).await.unwrap();
        assert!(out.len() == 1 && out[0].is_none(), "{out:?}");
        // Deleted by another client of etcd, then a token written: the refusal is answered
        // once the cache holds the deletion, so a read after it agrees.
        let direct = etcd_store(&etcd).await;
        direct.delete(&there, None).await.unwrap();
        token("b").await.unwrap();
        match cache.update(&there, obj("t", 3), None).await {
            Err(StoreError::NotFound(_)) => {}
            other => panic!("an update of an object deleted meanwhile: {other:?}"),
        }
        assert!(cache.get(&there).await.unwrap().is_none(), "read after the refusal: gone");
        // And created again elsewhere: the refused create is answered once the cache has it.
        direct.create(&there, obj("t", 4)).await.unwrap();
        token("c").await.unwrap();
        assert!(matches!(cache.create(&there, obj("t", 5)).await, Err(StoreError::AlreadyExists(_))));
        assert_eq!(cache.get(&there).await.unwrap().unwrap().object["spec"]["v"], 4, "read after the refusal");
    }

    /// Writes made together (a rollout's uncordons, then the picks they make room for) take a
    /// revision each, as every write does in Kubernetes: a watcher that resumes from any one's
    /// resourceVersion gets exactly the writes after it. With one revision for the group, a
    /// watcher cut off after the group's first event resumed past the others.
    #[tokio::test]
    async fn a_watch_resumed_after_any_write_of_a_group_misses_none_of_the_others() {
        let etcd = EtcdServer::start();
        let cache = WatchCache::start_with(etcd_store(&etcd).await, &[], WindowLimits::default()).await.unwrap();
        for i in 0..4 {
            cache.create(&node(&format!("g{i}")), obj("g", 0)).await.unwrap();
        }
        let from = cache.revision().await.unwrap();
        let write = |i: usize| (node(&format!("g{i}")), obj("g", 1), None);
        let made = cache.update_in_order(vec![write(0), write(1)], vec![write(2), write(3)]).await.unwrap();
        assert!(made.iter().all(Option::is_some), "{made:?}");
        let mut all = cache.watch(WatchFilter::resource("/nodes"), from).await.unwrap();
        let mut seen = Vec::new();
        for _ in 0..4 {
            let ev = next(&mut all).await.unwrap();
            seen.push((ev.revision, ev.key.name.clone()));
        }
        let firsts: Vec<&str> = seen[..2].iter().map(|(_, n)| n.as_str()).collect();
        assert!(firsts.contains(&"g0") && firsts.contains(&"g1"), "`first` before `then`: {seen:?}");
        for (k, (revision, _)) in seen.iter().enumerate() {
            let mut resumed = cache.watch(WatchFilter::resource("/nodes"), *revision).await.unwrap();
            // A marker write after the group: a resumed watch gets the rest, then the marker.
            let marker = cache.update(&node("g0"), obj("g", 10 + k as i64), None).await.unwrap();
            let mut got = Vec::new();
            loop {
                let ev = next(&mut resumed).await.unwrap();
                if ev.revision == revision_of(&marker.object).unwrap() {
                    break;
                }
                got.push((ev.revision, ev.key.name.clone()));
            }
            let want: Vec<_> = seen[k + 1..].to_vec();
            let got: Vec<_> = got.into_iter().filter(|(r, _)| *r <= seen[3].0).collect();
            assert_eq!(got, want, "resumed at the event of {}", seen[k].1);
        }
    }

    /// A watch of one object replays from the object's own index what a scan of the whole
    /// window finds, page for page, also after the front of the window was dropped; the index
    /// forgets what the window dropped.
    #[test]
    fn one_objects_replay_from_its_index_is_the_windows_scan() {
        let mut w = Window::default();
        let mut revision = 0;
        for round in 0..40u64 {
            revision += 1;
            // One revision of several objects, as a pick of many nodes, then single writes.
            for n in 0..(round % 4 + 1) {
                let key = node(&format!("n{}", (round + n) % 7));
                let json: Arc<str> = Arc::from(format!("{{\"r\":{revision},\"n\":{n}}}"));
                let object = Arc::new(parse(&json).unwrap());
                w.push(&Event { revision, key, kind: EventType::Modified, object, json, origin: None });
            }
        }
        let scan = |w: &Window, filter: &WatchFilter, after: u64| -> Vec<(u64, String)> {
            let start = w.entries.partition_point(|e| e.revision <= after);
            let all: Vec<&Entry> = w.entries.range(start..).filter(|e| filter.matches(&e.key)).collect();
            all.iter().map(|e| (e.revision, e.json.to_string())).collect()
        };
        let check = |w: &Window| {
            for name in ["n0", "n3", "n6", "none"] {
                for after in [0, 1, 5, 17, 39, 40] {
                    let indexed: Vec<(u64, String)> =
                        w.wanted_after(&one(name), after).iter().map(|e| (e.revision, e.json.to_string())).collect();
                    assert_eq!(indexed, scan(w, &one(name), after), "{name} after {after}");
                }
            }
        };
        check(&w);
        assert!(!w.wanted_after(&one("n3"), 0).is_empty());
        // The front dropped as `apply` drops it: whole revisions, oldest first.
        while w.entries.front().is_some_and(|e| e.revision <= 25) {
            if let Some(e) = w.entries.pop_front() {
                w.pop_key(&e);
            }
        }
        check(&w);
        let indexed: usize = w.by_key.values().map(VecDeque::len).sum();
        assert_eq!(indexed, w.entries.len(), "the index holds the window's entries, no more");
        assert_eq!(w.bytes, w.entries.iter().map(|e| e.json.len()).sum::<usize>());
        // A watch of many objects still scans, a page of whole revisions at most.
        assert_eq!(w.wanted_after(&WatchFilter::resource("/nodes"), 0).len(), w.entries.len());
    }

    /// What was in etcd before is there at start; every write is read back at once, from any
    /// read (point, list, revision); and a write made to etcd by someone else shows up.
    #[tokio::test]
    async fn reads_see_every_acknowledged_write() {
        let etcd = EtcdServer::start();
        let direct = etcd_store(&etcd).await;
        direct.create(&node("before"), obj("before", 1)).await.unwrap();
        direct.create(&Key::new("/pods", "ns", "p"), obj("p", 1)).await.unwrap();
        let mc = Key::cluster("/mcs", "rendered");
        direct.create(&mc, obj("rendered", 1)).await.unwrap();
        let cache = WatchCache::start(etcd_store(&etcd).await, &[CachedResource::text("/mcs".into())]).await.unwrap();
        assert_eq!(cache.get(&node("before")).await.unwrap().unwrap().object["spec"]["v"], 1);
        assert_eq!(cache.list("/pods", Some("ns")).await.unwrap().items.len(), 1);
        assert!(cache.get_json(&mc).await.unwrap().unwrap().contains("\"rendered\""));
        assert_eq!(cache.get(&mc).await.unwrap().unwrap().object["spec"]["v"], 1, "text-only objects parse");
        for i in 0..50 {
            let k = node(&format!("n{i:02}"));
            let created = cache.create(&k, obj("n", i)).await.unwrap();
            let rev = revision_of(&created.object).unwrap();
            let read = cache.get(&k).await.unwrap().expect("a created object is read back at once");
            assert_eq!(revision_of(&read.object), Some(rev));
            assert!(cache.revision().await.unwrap() >= rev);
            let updated = cache.update(&k, obj("n", i + 100), Some(rev)).await.unwrap();
            assert_eq!(cache.get(&k).await.unwrap().unwrap().object["spec"]["v"], i + 100);
            let listed = cache.list_json("/nodes", None).await.unwrap();
            assert!(listed.revision >= revision_of(&updated.object).unwrap());
            assert!(listed.items.iter().any(|j| j.contains(&format!("\"v\":{}", i + 100))));
        }
        // Compare-and-swap is etcd's, and what it refuses changes nothing.
        match cache.update(&node("n00"), obj("n", 0), Some(1)).await {
            Err(StoreError::Conflict { .. }) => {}
            other => panic!("a stale update: {other:?}"),
        }
        assert_eq!(cache.get(&node("n00")).await.unwrap().unwrap().object["spec"]["v"], 100);
        let both = cache
            .update_in_order(vec![(node("n01"), obj("n", 7), None)], vec![(node("n02"), obj("n", 8), None)])
            .await
            .unwrap();
        assert!(both.len() == 2 && both.iter().all(Option::is_some));
        assert_eq!(cache.get(&node("n02")).await.unwrap().unwrap().object["spec"]["v"], 8, "read once answered");
        let deleted = cache.delete(&node("n03"), None).await.unwrap();
        assert_eq!(deleted.object["spec"]["v"], 103);
        assert!(cache.get(&node("n03")).await.unwrap().is_none());
        let names: Vec<String> = cache
            .list("/nodes", None)
            .await
            .unwrap()
            .items
            .iter()
            .map(|o| o["metadata"]["name"].as_str().unwrap().to_string())
            .collect();
        assert_eq!(names.len(), 50, "49 written and the one from before");
        let direct_names = direct.list("/nodes", None).await.unwrap().items.len();
        assert_eq!(direct_names, 50, "etcd holds what the cache says");
        // A write refused for another's newer write is answered once the cache holds that
        // write: the caller's next read sees what it lost to, and its retry can succeed. The
        // cache is made to lag etcd by 30 ms, as it may under load.
        cache.inner.lag_ms.store(30, std::sync::atomic::Ordering::SeqCst);
        for v in 0..5 {
            let held = revision_of(&cache.get(&node("n04")).await.unwrap().unwrap().object).unwrap();
            let theirs = direct.update(&node("n04"), obj("n", 1000 + v), None).await.unwrap();
            match cache.update(&node("n04"), obj("n", v), Some(held)).await {
                Err(StoreError::Conflict { stored, .. }) => assert_eq!(Some(stored), revision_of(&theirs.object)),
                other => panic!("a stale update: {other:?}"),
            }
            let now = cache.get(&node("n04")).await.unwrap().unwrap();
            assert_eq!(now.object["spec"]["v"], 1000 + v, "read after a conflict: the write it lost to");
            let gone = direct.create(&node(&format!("x{v}")), obj("x", v)).await.unwrap();
            assert!(matches!(
                cache.create(&node(&format!("x{v}")), obj("x", v)).await,
                Err(StoreError::AlreadyExists(_))
            ));
            let seen = cache.get(&node(&format!("x{v}"))).await.unwrap().expect("what the create lost to");
            assert_eq!(revision_of(&seen.object), revision_of(&gone.object));
        }
        cache.inner.lag_ms.store(0, std::sync::atomic::Ordering::SeqCst);
        // `/metrics` says how long etcd took and how long the writes then waited for the cache:
        // the five conflicts above waited its 30 ms of lag at least.
        let mut registry = prometheus_client::registry::Registry::default();
        cache.register_metrics(&mut registry);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        let sample = |prefix: &str| -> f64 {
            let line = text.lines().find(|l| l.starts_with(prefix)).unwrap_or_else(|| panic!("no {prefix} in\n{text}"));
            line.rsplit(' ').next().unwrap().parse().unwrap()
        };
        assert!(sample("etcd_request_duration_seconds_count{operation=\"txn\"}") >= 100.0, "{text}");
        let waits = sample("aloft_watch_cache_write_wait_seconds_count");
        assert!(waits >= 100.0, "{text}");
        assert!(sample("aloft_watch_cache_write_wait_seconds_bucket{le=\"0.025\"}") <= waits - 5.0, "{text}");
        // Someone else's write reaches the cache through its watch.
        direct.create(&node("elsewhere"), obj("x", 1)).await.unwrap();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while cache.get(&node("elsewhere")).await.unwrap().is_none() {
            assert!(tokio::time::Instant::now() < deadline, "another client's write never reached the cache");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// A watch replays the window, then follows; one object's watch gets that object only; a
    /// watch gives progress notes; a write made on behalf of an identity is left out of a watch
    /// that asks so, every time.
    #[tokio::test]
    async fn watches_replay_the_window_then_follow() {
        let etcd = EtcdServer::start();
        let cache = WatchCache::start(etcd_store(&etcd).await, &[]).await.unwrap();
        let start = cache.revision().await.unwrap();
        for i in 0..3 {
            cache.create(&node(&format!("n{i}")), obj("n", i)).await.unwrap();
        }
        cache.create(&Key::cluster("/other", "o"), obj("o", 0)).await.unwrap();
        let mut all = cache.watch(WatchFilter::resource("/nodes"), start).await.unwrap();
        for i in 0..3 {
            let ev = next(&mut all).await.unwrap();
            assert_eq!((ev.key.name.as_str(), ev.kind), (format!("n{i}").as_str(), EventType::Added));
            assert_eq!(ev.object["spec"]["v"], i, "a replayed event's object is parsed from its JSON");
            assert_eq!(revision_of(&ev.object), Some(ev.revision));
        }
        let upd = cache.update(&node("n1"), obj("n", 10), None).await.unwrap();
        let ev = next(&mut all).await.unwrap();
        assert_eq!((ev.kind, ev.revision), (EventType::Modified, revision_of(&upd.object).unwrap()));
        let del = cache.delete(&node("n1"), None).await.unwrap();
        let ev = next(&mut all).await.unwrap();
        assert_eq!((ev.kind, ev.revision), (EventType::Deleted, revision_of(&del.object).unwrap()));
        assert_eq!(ev.object["spec"]["v"], 10, "a deletion's event carries the last state");

        let mut n2 = cache.watch(one("n2"), start).await.unwrap();
        assert_eq!(next(&mut n2).await.unwrap().key.name, "n2");
        cache.update(&node("n0"), obj("n", 5), None).await.unwrap();
        let w = cache.update(&node("n2"), obj("n", 5), None).await.unwrap();
        assert_eq!(next(&mut n2).await.unwrap().revision, revision_of(&w.object).unwrap());

        // Writes of the identity the watch leaves out never reach it; everybody else's do.
        let skip = WatchFilter { skip_origin: Some(Arc::from("node:n0")), ..one("n0") };
        let mut own = cache.watch(skip, cache.revision().await.unwrap()).await.unwrap();
        for v in 0..20 {
            cache.update_by(&node("n0"), obj("n", v), None, "node:n0").await.unwrap();
        }
        let admin = cache.update_by(&node("n0"), obj("n", 99), None, "admin").await.unwrap();
        let ev = next(&mut own).await.unwrap();
        assert_eq!(ev.revision, revision_of(&admin.object).unwrap(), "the node's own 20 writes were left out");
        assert_eq!(ev.origin.as_deref(), Some("admin"));

        // Progress notes: once every event before them is out.
        let schedule = ProgressSchedule { every: Duration::from_millis(100), deadline: None };
        let head = cache.revision().await.unwrap();
        let mut notes = cache.watch_with_progress(one("n2"), head, schedule).await.unwrap();
        match next(&mut notes).await.unwrap() {
            WatchItem::Progress(at) => assert!(at >= head),
            other => panic!("a quiet watch's first item: {other:?}"),
        }
        let n2w = cache.update(&node("n2"), obj("n", 6), None).await.unwrap();
        let mut got_event = false;
        for _ in 0..5 {
            match next(&mut notes).await.unwrap() {
                WatchItem::Event(e) => {
                    assert_eq!(e.revision, revision_of(&n2w.object).unwrap());
                    got_event = true;
                }
                WatchItem::Progress(at) if got_event => {
                    assert!(at >= revision_of(&n2w.object).unwrap());
                    break;
                }
                WatchItem::Progress(_) => {}
            }
        }
        assert!(got_event);
    }

    /// A cache started on an etcd with history (a restart, a takeover) reads the recent part
    /// into its window: a watch from before it started resumes; from before etcd's compaction,
    /// or past what it reads, it is Gone.
    #[tokio::test]
    async fn a_new_cache_replays_etcds_recent_history() {
        let etcd = EtcdServer::start();
        let first = WatchCache::start(etcd_store(&etcd).await, &[]).await.unwrap();
        let mut revs = Vec::new();
        first.create(&node("a"), obj("a", 0)).await.unwrap();
        for v in 1..=30 {
            revs.push(revision_of(&first.update(&node("a"), obj("a", v), None).await.unwrap().object).unwrap());
        }
        drop(first);
        let second = WatchCache::start(etcd_store(&etcd).await, &[]).await.unwrap();
        let mut w = second.watch(WatchFilter::resource("/nodes"), revs[9]).await.unwrap();
        for (i, rev) in revs[10..].iter().enumerate() {
            let ev = next(&mut w).await.unwrap();
            assert_eq!((ev.revision, &ev.object["spec"]["v"]), (*rev, &json!(i + 11)));
        }
        // etcd compacted: the window starts there.
        let direct = etcd_store(&etcd).await;
        direct.compact(revs[19]).await.unwrap();
        let third = WatchCache::start(etcd_store(&etcd).await, &[]).await.unwrap();
        assert!(matches!(third.watch(WatchFilter::resource("/nodes"), revs[5]).await, Err(StoreError::Gone { .. })));
        let mut w = third.watch(WatchFilter::resource("/nodes"), revs[19]).await.unwrap();
        assert_eq!(next(&mut w).await.unwrap().revision, revs[20]);
        // No more than `prefill` revisions back.
        let short = WindowLimits { prefill: 3, ..WindowLimits::default() };
        let fourth = WatchCache::start_with(etcd_store(&etcd).await, &[], short).await.unwrap();
        let head = fourth.revision().await.unwrap();
        assert!(matches!(fourth.watch(WatchFilter::resource("/nodes"), head - 4).await, Err(StoreError::Gone { .. })));
        // (The two starts before wrote their marker key after the last node write.)
        assert_eq!(head, revs[29] + 2);
        let mut w = fourth.watch(WatchFilter::resource("/nodes"), head - 3).await.unwrap();
        assert_eq!(next(&mut w).await.unwrap().revision, revs[29]);
        // The window's own limits hold from the start: no more than `events` of that history.
        let few = WindowLimits { events: 4, ..WindowLimits::default() };
        let fifth = WatchCache::start_with(etcd_store(&etcd).await, &[], few).await.unwrap();
        let (kept, floor) = {
            let w = fifth.inner.lock();
            (w.entries.iter().map(|e| e.revision).collect::<Vec<_>>(), w.floor)
        };
        assert_eq!(kept, revs[26..].to_vec(), "the newest four");
        assert_eq!(floor, revs[25], "and Gone from before them");
    }

    /// The window keeps whole revisions up to its limits; a watch from before it is Gone, except
    /// a watch of one object unchanged since, which follows from the window's start.
    #[tokio::test]
    async fn a_watch_from_before_the_window_is_gone_unless_its_object_is_unchanged() {
        let etcd = EtcdServer::start();
        let limits = WindowLimits { events: 10, ..WindowLimits::default() };
        let cache = WatchCache::start_with(etcd_store(&etcd).await, &[], limits).await.unwrap();
        let quiet = cache.create(&node("quiet"), obj("q", 0)).await.unwrap();
        let quiet_rev = revision_of(&quiet.object).unwrap();
        let busy = node("busy");
        cache.create(&busy, obj("b", 0)).await.unwrap();
        for v in 1..30 {
            cache.update(&busy, obj("b", v), None).await.unwrap();
        }
        // Five objects in one transaction: one revision, kept or dropped whole.
        for i in 0..5 {
            cache.create(&node(&format!("t{i}")), obj("t", 0)).await.unwrap();
        }
        let txn: Vec<_> = (0..5).map(|i| (node(&format!("t{i}")), obj("t", 1))).collect();
        let txn_rev = cache.inner.etcd.put_together(txn).await.unwrap();
        cache.applied(txn_rev).await.unwrap();
        for v in 30..36 {
            cache.update(&busy, obj("b", v), None).await.unwrap();
        }
        let floor = cache.inner.lock().floor;
        assert!(floor > quiet_rev);
        {
            let w = cache.inner.lock();
            assert!(w.entries.len() <= 10);
            assert!(w.entries.front().is_some_and(|e| e.revision == floor + 1), "the window starts after its floor");
        }
        match cache.watch(WatchFilter::resource("/nodes"), quiet_rev).await {
            Err(StoreError::Gone { requested, oldest }) => assert_eq!((requested, oldest), (quiet_rev, floor + 1)),
            Ok(_) => panic!("a watch of every node from before the window must be Gone"),
            Err(e) => panic!("{e}"),
        }
        assert!(matches!(cache.watch(one("busy"), quiet_rev).await, Err(StoreError::Gone { .. })));
        // Unchanged since: followed from the window's start, and its next write arrives.
        let mut q = cache.watch(one("quiet"), quiet_rev).await.unwrap();
        let w = cache.update(&node("quiet"), obj("q", 1), None).await.unwrap();
        assert_eq!(next(&mut q).await.unwrap().revision, revision_of(&w.object).unwrap());
        // A watch from just before the transaction gets all five of its writes, or the window
        // has dropped the transaction whole.
        // `--watch-history` revisions back at most, however few events they hold.
        let short = WindowLimits { revisions: 5, ..WindowLimits::default() };
        let recent = WatchCache::start_with(etcd_store(&etcd).await, &[], short).await.unwrap();
        for v in 0..20 {
            recent.update(&busy, obj("b", 100 + v), None).await.unwrap();
        }
        let head = recent.revision().await.unwrap();
        assert_eq!(recent.inner.lock().floor, head - 5);
        assert!(matches!(recent.watch(WatchFilter::resource("/nodes"), head - 6).await, Err(StoreError::Gone { .. })));
        let mut last5 = recent.watch(WatchFilter::resource("/nodes"), head - 5).await.unwrap();
        for _ in 0..5 {
            next(&mut last5).await.unwrap();
        }
        match cache.watch(WatchFilter::resource("/nodes"), txn_rev - 1).await {
            Ok(mut s) => {
                for _ in 0..5 {
                    assert_eq!(next(&mut s).await.unwrap().revision, txn_rev);
                }
            }
            Err(StoreError::Gone { oldest, .. }) => assert!(oldest > txn_rev),
            Err(e) => panic!("{e}"),
        }
    }
}
