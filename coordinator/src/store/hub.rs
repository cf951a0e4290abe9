//! Fan-out of committed writes to live watches, indexed by what each watch wants.
//!
//! Why not one broadcast channel: every agent watches its own Node, so with one shared channel
//! each write woke every watcher of the fleet to throw the event away (a 1,000-node rollout spent
//! most of the coordinator's CPU there). Here a write reaches only the watches whose filter can
//! match it: the watches of that one object by name, the watches of its resource, and the
//! watches of everything.
//!
//! A commit's events wake each subscription once: a watcher woken by the first write of a group
//! commit finds the whole group queued, instead of starting work on part of it and being woken
//! again for the rest (the node controller's thread was woken about three times a commit, and
//! each wake-up could start a pass over the fleet for a fraction of the freed slots).
//!
//! Each subscription has its own bounded queue. A watcher that falls that far behind is dropped
//! from the hub and told so ([`Subscription::lagged`]); it goes back to the store's log from the
//! last revision it saw and subscribes again, so it misses nothing and never holds up a writer.

use super::{Event, WatchFilter};
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use tokio::sync::Notify;

/// Events a subscription may have queued before it is dropped as lagging.
pub(crate) const QUEUE: usize = 4096;

/// One watch's queue: the hub fills it and wakes the watch once a commit; the watch empties it.
/// A deque and a notifier, not a tokio channel: a channel allocates its first 32 slots up front
/// (and a slot per delivered batch would be four times a pointer), while an agent's watch of its
/// own Node holds one event at a time: with 10,000 agents the channels' first blocks alone were
/// megabytes.
#[derive(Default)]
struct Queue {
    events: Mutex<VecDeque<Arc<Event>>>,
    /// The hub let go of it (it lagged, or it was unregistered): what is queued is the last.
    closed: AtomicBool,
    ready: Notify,
    /// How many times the hub woke it (tests: once a commit).
    #[cfg(test)]
    wakes: std::sync::atomic::AtomicUsize,
}

impl Queue {
    fn events(&self) -> MutexGuard<'_, VecDeque<Arc<Event>>> {
        self.events.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn wake(&self) {
        #[cfg(test)]
        self.wakes.fetch_add(1, Ordering::SeqCst);
        self.ready.notify_one();
    }
}

struct Sub {
    filter: WatchFilter,
    /// Shared: one copy of an event serves every watch that wants it; a queue holds pointers.
    queue: Arc<Queue>,
    lagged: Arc<AtomicBool>,
}

impl Drop for Sub {
    /// Out of the hub, for whatever reason: the watch takes what is queued, then ends.
    fn drop(&mut self) {
        self.queue.closed.store(true, Ordering::SeqCst);
        self.queue.wake();
    }
}

/// Where a subscription is indexed.
#[derive(Clone, PartialEq, Eq, Hash)]
enum Slot {
    Name(String, String),
    Resource(String),
    All,
}

impl Slot {
    fn of(f: &WatchFilter) -> Slot {
        match (&f.resource, &f.name) {
            (Some(r), Some(n)) => Slot::Name(r.clone(), n.clone()),
            (Some(r), None) => Slot::Resource(r.clone()),
            (None, _) => Slot::All,
        }
    }
}

#[derive(Default)]
struct Index {
    /// The newest revision published.
    head: u64,
    next_id: u64,
    subs: HashMap<u64, Sub>,
    slots: HashMap<Slot, Vec<u64>>,
}

impl Index {
    fn remove(&mut self, id: u64) {
        if let Some(sub) = self.subs.remove(&id) {
            let slot = Slot::of(&sub.filter);
            if let Some(ids) = self.slots.get_mut(&slot) {
                ids.retain(|&x| x != id);
                if ids.is_empty() {
                    self.slots.remove(&slot);
                }
            }
        }
    }
}

/// The live-watch index of one store.
#[derive(Default)]
pub(crate) struct Hub {
    index: Mutex<Index>,
}

impl Hub {
    /// A hub for a store whose newest committed revision is `head`.
    pub(crate) fn new(head: u64) -> Self {
        Hub { index: Mutex::new(Index { head, ..Index::default() }) }
    }

    fn lock(&self) -> MutexGuard<'_, Index> {
        self.index.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Register a watch; events published from now on that match `filter` are queued for it.
    pub(crate) fn subscribe(self: &Arc<Self>, filter: WatchFilter) -> Subscription {
        let queue = Arc::new(Queue::default());
        let lagged = Arc::new(AtomicBool::new(false));
        let mut ix = self.lock();
        ix.next_id += 1;
        let id = ix.next_id;
        ix.slots.entry(Slot::of(&filter)).or_default().push(id);
        ix.subs.insert(id, Sub { filter, queue: queue.clone(), lagged: lagged.clone() });
        Subscription { id, queue, lagged, hub: self.clone(), head: ix.head }
    }

    /// Queue a committed write for every watch that wants it. Called in revision order.
    #[cfg(test)]
    pub(crate) fn publish(&self, ev: &Event) {
        self.publish_all([ev]);
    }

    /// Queue the writes of one commit, in revision order, each for every watch that wants it,
    /// then wake each watch that got any, once.
    pub(crate) fn publish_all<'a>(&self, events: impl IntoIterator<Item = &'a Event>) {
        let mut ix = self.lock();
        // The watches this commit reached; `true`: its queue was full (it lags).
        let mut reached: HashMap<u64, bool> = HashMap::new();
        for ev in events {
            ix.head = ix.head.max(ev.revision);
            // Copied once, when the first watch wants it.
            let mut shared: Option<Arc<Event>> = None;
            let slots = [
                Slot::Name(ev.key.resource.clone(), ev.key.name.clone()),
                Slot::Resource(ev.key.resource.clone()),
                Slot::All,
            ];
            for slot in &slots {
                let Some(ids) = ix.slots.get(slot) else { continue };
                for id in ids {
                    let Some(sub) = ix.subs.get(id) else { continue };
                    if !sub.filter.wants(ev) {
                        continue;
                    }
                    let mut queue = sub.queue.events();
                    // Whether a watch lags is decided once a commit, at its first event for
                    // it: a queue holds whole commits, so a watch that lags stops at the end of
                    // one and resumes from its last revision without missing the rest of it
                    // (on etcd a transaction's writes share one revision).
                    let full = *reached.entry(*id).or_insert(queue.len() >= QUEUE);
                    if !full {
                        queue.push_back(shared.get_or_insert_with(|| Arc::new(ev.clone())).clone());
                    }
                }
            }
        }
        for (id, lags) in reached {
            if lags {
                if let Some(sub) = ix.subs.get(&id) {
                    sub.lagged.store(true, Ordering::SeqCst);
                }
                // Dropping it closes its queue and wakes it.
                ix.remove(id);
            } else if let Some(sub) = ix.subs.get(&id) {
                sub.queue.wake();
            }
        }
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.lock().subs.len()
    }
}

/// One watch's queue. Dropping it unregisters the watch.
pub(crate) struct Subscription {
    id: u64,
    queue: Arc<Queue>,
    lagged: Arc<AtomicBool>,
    hub: Arc<Hub>,
    /// Every event after this revision is queued for this subscription (unless it lags).
    head: u64,
}

impl Subscription {
    /// The newest revision published before this subscription: a watch that has seen it needs
    /// nothing from the store's log.
    pub(crate) fn head(&self) -> u64 {
        self.head
    }

    /// The next queued event; `None` once the queue is closed and drained: the watch lagged
    /// (see [`Self::lagged`]) or was unregistered. Cancel-safe: an event is taken only when it
    /// is returned.
    pub(crate) async fn recv(&mut self) -> Option<Arc<Event>> {
        loop {
            if let Some(ev) = self.queue.events().pop_front() {
                return Some(ev);
            }
            if self.queue.closed.load(Ordering::SeqCst) {
                // Closed after its last push: anything pushed is visible now.
                return self.queue.events().pop_front();
            }
            // A wake between the look above and this wait is kept as a permit.
            self.queue.ready.notified().await;
        }
    }

    /// The newest revision published, if nothing is queued for this subscription: then every
    /// event up to it that this subscription wants has been received. Read under the hub's lock,
    /// which a commit holds while it queues its events and moves the head.
    pub(crate) fn caught_up(&self) -> Option<u64> {
        let ix = self.hub.lock();
        self.queue.events().is_empty().then_some(ix.head)
    }

    /// The next event if one is queued already (tests: nothing more was delivered).
    #[cfg(test)]
    fn try_recv(&mut self) -> Option<Arc<Event>> {
        self.queue.events().pop_front()
    }

    /// The hub dropped this subscription because its queue was full: events after the last
    /// received one are in the store's log only.
    pub(crate) fn lagged(&self) -> bool {
        self.lagged.load(Ordering::SeqCst)
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        self.hub.lock().remove(self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{EventType, Key};
    use serde_json::json;

    fn ev(rev: u64, resource: &str, name: &str) -> Event {
        Event::new(rev, Key::cluster(resource, name), EventType::Modified, json!({"metadata": {"name": name}}))
    }

    #[tokio::test]
    async fn a_write_reaches_only_the_watches_that_want_it() {
        let hub = Arc::new(Hub::default());
        let mut a = hub.subscribe(WatchFilter { name: Some("a".into()), ..WatchFilter::resource("/nodes") });
        let mut b = hub.subscribe(WatchFilter { name: Some("b".into()), ..WatchFilter::resource("/nodes") });
        let mut nodes = hub.subscribe(WatchFilter::resource("/nodes"));
        let mut all = hub.subscribe(WatchFilter::default());
        hub.publish(&ev(1, "/nodes", "a"));
        hub.publish(&ev(2, "/pools", "a"));
        let first = a.recv().await.expect("the node's own watch gets its write");
        assert_eq!(first.revision, 1);
        assert!(a.try_recv().is_none(), "a pool named like the node is not the node");
        assert!(b.try_recv().is_none());
        let of_nodes = nodes.recv().await.expect("the watch of all nodes gets it");
        assert!(nodes.try_recv().is_none());
        let of_all = all.recv().await.expect("the watch of everything gets it");
        // One copy of the event for all the watches that want it.
        assert!(Arc::ptr_eq(&first, &of_nodes) && Arc::ptr_eq(&first, &of_all));
        assert_eq!(all.recv().await.map(|e| e.revision), Some(2));
    }

    /// A watch that leaves out one identity's writes never has them queued (so its task is not
    /// woken for them), and still gets everybody else's, and writes made by no identity.
    #[tokio::test]
    async fn writes_of_the_skipped_identity_are_never_queued() {
        let hub = Arc::new(Hub::default());
        let node = |skip: Option<&str>| WatchFilter {
            name: Some("a".into()),
            skip_origin: skip.map(Arc::from),
            ..WatchFilter::resource("/nodes")
        };
        let mut own = hub.subscribe(node(Some("node:a")));
        let mut every = hub.subscribe(node(None));
        let by = |rev: u64, origin: Option<&str>| Event { origin: origin.map(Arc::from), ..ev(rev, "/nodes", "a") };
        hub.publish(&by(1, Some("node:a")));
        hub.publish(&by(2, Some("admin")));
        hub.publish(&by(3, None));
        hub.publish(&by(4, Some("node:a")));
        let queued = |s: &mut Subscription| {
            let mut revs = Vec::new();
            while let Some(e) = s.try_recv() {
                revs.push(e.revision);
            }
            revs
        };
        assert_eq!(queued(&mut own), vec![2, 3]);
        assert_eq!(queued(&mut every), vec![1, 2, 3, 4]);
    }

    /// A commit's events wake a watch once, arrive in revision order, and each watch gets only
    /// its share of them.
    #[tokio::test]
    async fn a_commit_wakes_each_watch_once() {
        let hub = Arc::new(Hub::default());
        let mut nodes = hub.subscribe(WatchFilter::resource("/nodes"));
        let mut b = hub.subscribe(WatchFilter { name: Some("b".into()), ..WatchFilter::resource("/nodes") });
        let commit = [ev(1, "/nodes", "a"), ev(2, "/pools", "x"), ev(3, "/nodes", "b"), ev(4, "/nodes", "c")];
        hub.publish_all(&commit);
        let wakes = |s: &Subscription| s.queue.wakes.load(Ordering::SeqCst);
        assert_eq!(wakes(&nodes), 1, "one wake-up for the three node writes");
        assert_eq!(wakes(&b), 1);
        let mut revs = Vec::new();
        while let Some(e) = nodes.try_recv() {
            revs.push(e.revision);
        }
        assert_eq!(revs, [1, 3, 4]);
        assert_eq!(b.recv().await.map(|e| e.revision), Some(3));
        assert!(b.try_recv().is_none());
        // The next commit is the next delivery, after what is left of this one.
        hub.publish_all(&[ev(5, "/nodes", "a"), ev(6, "/nodes", "d")]);
        hub.publish_all(&[ev(7, "/nodes", "e")]);
        assert_eq!(wakes(&nodes), 3, "one more a commit");
        assert_eq!(wakes(&b), 1, "not for commits without its writes");
        assert_eq!(nodes.recv().await.map(|e| e.revision), Some(5));
        assert_eq!(nodes.recv().await.map(|e| e.revision), Some(6));
        assert_eq!(nodes.recv().await.map(|e| e.revision), Some(7));
        assert_eq!(hub.lock().head, 7);
    }

    /// A watch waiting for its next event is woken by the commit that brings it, and a watch
    /// unregistered while it waits ends.
    #[tokio::test]
    async fn a_waiting_watch_is_woken_by_the_commit() {
        let hub = Arc::new(Hub::default());
        let mut s = hub.subscribe(WatchFilter::resource("/nodes"));
        let waiter = tokio::spawn(async move {
            let e = s.recv().await.map(|e| e.revision);
            (e, s)
        });
        tokio::task::yield_now().await;
        hub.publish_all(&[ev(1, "/pools", "x"), ev(2, "/nodes", "a")]);
        // Bounded waits: a lost wake-up fails the test instead of hanging it.
        let limit = std::time::Duration::from_secs(10);
        let (got, mut s) = tokio::time::timeout(limit, waiter).await.expect("woken by the commit").unwrap();
        assert_eq!(got, Some(2));
        // Unregistered by the hub (as when it lags): the wait ends with what was queued.
        hub.lock().remove(s.id);
        assert!(s.queue.closed.load(Ordering::SeqCst));
        assert!(tokio::time::timeout(limit, s.recv()).await.expect("a closed queue ends the wait").is_none());
    }

    #[tokio::test]
    async fn a_full_queue_drops_the_watch_and_says_it_lagged() {
        let hub = Arc::new(Hub::default());
        let mut s = hub.subscribe(WatchFilter::default());
        for rev in 1..=(QUEUE as u64 + 10) {
            hub.publish(&ev(rev, "/nodes", "a"));
        }
        assert_eq!(hub.len(), 0);
        let mut got = 0;
        while let Some(e) = s.recv().await {
            got += 1;
            assert_eq!(e.revision, got);
        }
        assert_eq!(got, QUEUE as u64);
        assert!(s.lagged());
    }

    /// A commit that finds a watch's queue short of full is queued whole, past the limit: a
    /// watch never lags in the middle of a commit (whose writes may share a revision).
    #[tokio::test]
    async fn a_watch_lags_only_between_commits() {
        let hub = Arc::new(Hub::default());
        let mut s = hub.subscribe(WatchFilter::default());
        for rev in 1..QUEUE as u64 {
            hub.publish(&ev(rev, "/nodes", "a"));
        }
        let commit: Vec<Event> = (0..3).map(|i| ev(QUEUE as u64, "/nodes", &format!("n{i}"))).collect();
        hub.publish_all(&commit);
        assert_eq!(hub.len(), 1, "not dropped: its queue was short of full when the commit came");
        hub.publish(&ev(QUEUE as u64 + 1, "/nodes", "a"));
        assert_eq!(hub.len(), 0, "dropped at the next commit");
        let mut got = Vec::new();
        while let Some(e) = s.recv().await {
            got.push(e.revision);
        }
        assert_eq!(got.len(), QUEUE + 2, "the whole commit was queued");
        assert_eq!(got.last(), Some(&(QUEUE as u64)));
        assert!(s.lagged());
    }

    #[tokio::test]
    async fn dropping_a_subscription_unregisters_it() {
        let hub = Arc::new(Hub::default());
        let s = hub.subscribe(WatchFilter { name: Some("a".into()), ..WatchFilter::resource("/nodes") });
        assert_eq!(hub.len(), 1);
        drop(s);
        assert_eq!(hub.len(), 0);
        hub.publish(&ev(1, "/nodes", "a"));
    }
}
