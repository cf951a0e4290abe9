//! Fan-out of committed writes to live watches, indexed by what each watch wants.
//!
//! Why not one broadcast channel: every agent watches its own Node, so with one shared channel
//! each write woke every watcher of the fleet to throw the event away (a 1,000-node rollout spent
//! most of the coordinator's CPU there). Here a write reaches only the watches whose filter can
//! match it: the watches of that one object by name, the watches of its resource, and the
//! watches of everything.
//!
//! A commit's events reach a subscription as one delivery: a watcher woken by the first write of
//! a group commit finds the whole group queued, instead of starting work on part of it and
//! being woken again for the rest (the node controller's thread was woken about three times a
//! commit, and each wake-up could start a pass over the fleet for a fraction of the freed slots).
//!
//! Each subscription has its own bounded queue. A watcher that falls that far behind is dropped
//! from the hub and told so ([`Subscription::lagged`]); it goes back to the store's log from the
//! last revision it saw and subscribes again, so it misses nothing and never holds up a writer.

use super::{Event, WatchFilter};
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use tokio::sync::mpsc;

/// Events a subscription may have queued before it is dropped as lagging.
pub(crate) const QUEUE: usize = 4096;

/// The events of one commit that one subscription wants, in revision order; never empty.
enum Delivery {
    /// The common case (an agent's watch of its own Node): no vector to allocate.
    One(Arc<Event>),
    Many(Vec<Arc<Event>>),
}

impl Delivery {
    fn push(&mut self, ev: Arc<Event>) {
        match self {
            Delivery::One(first) => *self = Delivery::Many(vec![first.clone(), ev]),
            Delivery::Many(v) => v.push(ev),
        }
    }
}

struct Sub {
    filter: WatchFilter,
    /// Shared: one copy of an event serves every watch that wants it, and a queue's slots are a
    /// pointer each (a tokio queue allocates its first 32 slots up front: with the event inline
    /// that was 4 KB per watch, 40 MB for a fleet of 10,000 agents each watching its Node).
    tx: mpsc::Sender<Delivery>,
    lagged: Arc<AtomicBool>,
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
        let (tx, rx) = mpsc::channel(QUEUE);
        let lagged = Arc::new(AtomicBool::new(false));
        let mut ix = self.lock();
        ix.next_id += 1;
        let id = ix.next_id;
        ix.slots.entry(Slot::of(&filter)).or_default().push(id);
        ix.subs.insert(id, Sub { filter, tx, lagged: lagged.clone() });
        Subscription { id, rx, pending: VecDeque::new(), lagged, hub: self.clone(), head: ix.head }
    }

    /// Queue a committed write for every watch that wants it. Called in revision order.
    #[cfg(test)]
    pub(crate) fn publish(&self, ev: &Event) {
        self.publish_all([ev]);
    }

    /// Queue the writes of one commit, in revision order, each for every watch that wants it;
    /// a watch gets all of its share in one delivery.
    pub(crate) fn publish_all<'a>(&self, events: impl IntoIterator<Item = &'a Event>) {
        let mut ix = self.lock();
        // By subscription, in the order first reached: where its delivery is in `out`.
        let mut at: HashMap<u64, usize> = HashMap::new();
        let mut out: Vec<(u64, Delivery)> = Vec::new();
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
                    let copy = shared.get_or_insert_with(|| Arc::new(ev.clone())).clone();
                    match at.get(id) {
                        Some(&k) => out[k].1.push(copy),
                        None => {
                            at.insert(*id, out.len());
                            out.push((*id, Delivery::One(copy)));
                        }
                    }
                }
            }
        }
        let mut drop_ids = Vec::new();
        for (id, delivery) in out {
            let Some(sub) = ix.subs.get(&id) else { continue };
            match sub.tx.try_send(delivery) {
                Ok(()) => {}
                Err(mpsc::error::TrySendError::Full(_)) => {
                    sub.lagged.store(true, Ordering::SeqCst);
                    drop_ids.push(id);
                }
                Err(mpsc::error::TrySendError::Closed(_)) => drop_ids.push(id),
            }
        }
        for id in drop_ids {
            ix.remove(id);
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
    rx: mpsc::Receiver<Delivery>,
    /// The rest of the delivery the last [`Self::recv`] took its event from.
    pending: VecDeque<Arc<Event>>,
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
    /// (see [`Self::lagged`]) or the store is gone.
    pub(crate) async fn recv(&mut self) -> Option<Arc<Event>> {
        if let Some(ev) = self.pending.pop_front() {
            return Some(ev);
        }
        match self.rx.recv().await? {
            Delivery::One(ev) => Some(ev),
            Delivery::Many(evs) => {
                self.pending.extend(evs);
                self.pending.pop_front()
            }
        }
    }

    /// The next event if one is queued already (tests: nothing more was delivered).
    #[cfg(test)]
    fn try_recv(&mut self) -> Option<Arc<Event>> {
        if let Some(ev) = self.pending.pop_front() {
            return Some(ev);
        }
        match self.rx.try_recv().ok()? {
            Delivery::One(ev) => Some(ev),
            Delivery::Many(evs) => {
                self.pending.extend(evs);
                self.pending.pop_front()
            }
        }
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

    /// A commit's events reach a watch as one delivery (one wake-up), in revision order, and
    /// each watch gets only its share of them.
    #[tokio::test]
    async fn a_commit_is_one_delivery_per_watch() {
        let hub = Arc::new(Hub::default());
        let mut nodes = hub.subscribe(WatchFilter::resource("/nodes"));
        let mut b = hub.subscribe(WatchFilter { name: Some("b".into()), ..WatchFilter::resource("/nodes") });
        let commit = [ev(1, "/nodes", "a"), ev(2, "/pools", "x"), ev(3, "/nodes", "b"), ev(4, "/nodes", "c")];
        hub.publish_all(&commit);
        assert_eq!(nodes.rx.len(), 1, "one delivery for the three node writes");
        assert_eq!(b.rx.len(), 1);
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
        assert_eq!(nodes.rx.len(), 2);
        assert_eq!(nodes.recv().await.map(|e| e.revision), Some(5));
        assert_eq!(nodes.rx.len(), 1, "the rest of the first delivery is taken before the second");
        assert_eq!(nodes.recv().await.map(|e| e.revision), Some(6));
        assert_eq!(nodes.recv().await.map(|e| e.revision), Some(7));
        assert_eq!(hub.lock().head, 7);
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
