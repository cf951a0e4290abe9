//! An informer-style cache of one resource for a controller: loaded by one list, then kept
//! current by the watch's events and by the controller's own writes (put as soon as the store
//! returns them, so the next decision never works from a version older than what it wrote: a
//! pick not yet seen back through the watch must still count).

use crate::server::objects;
use crate::store::{revision_of, Store, StoreError};
use serde_json::Value;
use std::collections::HashMap;
use std::sync::Arc;

/// What a controller reads of every object on every pass, worked out once when the object
/// changes instead (a pass over a 1,000-node fleet otherwise spends its time re-reading the
/// same annotations).
pub(crate) trait Derive: Sized {
    type Derived;
    fn derive(&self) -> Self::Derived;
    /// Whether a rollout decision reads the same from the new version as from the old one, so
    /// an event that changed only other fields needs no new pass (a node's drain handshake
    /// writes change nothing the node controller decides on). Conservative by default.
    fn same_for_decisions(_old: (&Self, &Self::Derived), _new: (&Self, &Self::Derived)) -> bool {
        false
    }
}

impl Derive for aloft_api::Node {
    type Derived = super::pools::NodeFacts;
    fn derive(&self) -> Self::Derived {
        super::pools::NodeFacts::of(self)
    }
    /// The node controller reads a node's facts, labels (pool membership, zone), name and
    /// creation time (candidate order); the last two never change.
    fn same_for_decisions(old: (&Self, &Self::Derived), new: (&Self, &Self::Derived)) -> bool {
        old.0.metadata.labels == new.0.metadata.labels && old.1.same_for_rollout(new.1)
    }
}

impl Derive for aloft_api::MachineConfigPool {
    type Derived = ();
    fn derive(&self) {}
}

impl Derive for aloft_api::NodeDisruptionBudget {
    type Derived = ();
    fn derive(&self) {}
}

/// Objects of one resource by name, kept raw (to write back exactly), typed, and derived, in
/// vectors so that a decision borrows them as slices.
pub(crate) struct Cache<T: Derive> {
    index: HashMap<String, usize>,
    /// Shared with the watch events they came from (a fleet's worth of Node events is a lot
    /// of copying otherwise).
    pub(crate) raw: Vec<Arc<Value>>,
    pub(crate) typed: Vec<T>,
    pub(crate) derived: Vec<T::Derived>,
}

impl<T: serde::de::DeserializeOwned + Derive> Cache<T> {
    pub(crate) async fn load(store: &Arc<dyn Store>, resource: &str) -> Result<Self, StoreError> {
        let mut c = Cache { index: HashMap::new(), raw: Vec::new(), typed: Vec::new(), derived: Vec::new() };
        for v in store.list(resource, None).await?.items {
            c.put(v);
        }
        Ok(c)
    }

    pub(crate) fn put(&mut self, v: impl Into<Arc<Value>>) {
        self.replace(v.into());
    }

    /// Puts `v`; returns whether a decision could read anything different now
    /// ([`Derive::same_for_decisions`]).
    fn replace(&mut self, v: Arc<Value>) -> bool {
        let name = objects::name_of(&v).to_string();
        match T::deserialize(&*v) {
            Ok(t) => {
                let d = t.derive();
                match self.index.get(&name) {
                    Some(&i) => {
                        let same = T::same_for_decisions((&self.typed[i], &self.derived[i]), (&t, &d));
                        self.raw[i] = v;
                        self.typed[i] = t;
                        self.derived[i] = d;
                        !same
                    }
                    None => {
                        self.index.insert(name, self.raw.len());
                        self.raw.push(v);
                        self.typed.push(t);
                        self.derived.push(d);
                        true
                    }
                }
            }
            Err(e) => {
                tracing::warn!(%name, error = %e, "ignoring an object that does not parse");
                self.remove(&name);
                true
            }
        }
    }

    fn remove(&mut self, name: &str) {
        let Some(i) = self.index.remove(name) else { return };
        self.raw.swap_remove(i);
        self.typed.swap_remove(i);
        self.derived.swap_remove(i);
        if i < self.raw.len() {
            let moved = objects::name_of(&self.raw[i]).to_string();
            self.index.insert(moved, i);
        }
    }

    /// Applies a watch event; returns whether a decision could read anything different now
    /// (false for stale events and for changes [`Derive::same_for_decisions`] calls irrelevant).
    pub(crate) fn apply(&mut self, ev: &crate::store::Event) -> bool {
        match ev.kind {
            crate::store::EventType::Deleted => {
                let known = self.index.contains_key(&ev.key.name);
                self.remove(&ev.key.name);
                known
            }
            _ => {
                // Replayed events (and the events of our own writes, already put) can be older
                // than what the cache holds.
                let cached = self.index.get(&ev.key.name).and_then(|&i| revision_of(&self.raw[i]));
                cached.is_none_or(|c| c < ev.revision) && self.replace(ev.object.clone())
            }
        }
    }
}
