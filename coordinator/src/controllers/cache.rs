//! An informer-style cache of one resource for a controller: loaded by one list, then kept
//! current by the watch's events and by the controller's own writes (put as soon as the store
//! returns them, so the next decision never works from a version older than what it wrote: a
//! pick not yet seen back through the watch must still count).

use crate::server::objects;
use crate::store::{revision_of, Store, StoreError};
use serde_json::Value;
use std::collections::HashMap;
use std::sync::Arc;

/// Objects of one resource by name, kept both raw (to write back exactly) and typed, in vectors
/// so that a decision borrows the typed objects as one slice.
pub(crate) struct Cache<T> {
    index: HashMap<String, usize>,
    pub(crate) raw: Vec<Value>,
    pub(crate) typed: Vec<T>,
}

impl<T: serde::de::DeserializeOwned> Cache<T> {
    pub(crate) async fn load(store: &Arc<dyn Store>, resource: &str) -> Result<Self, StoreError> {
        let mut c = Cache { index: HashMap::new(), raw: Vec::new(), typed: Vec::new() };
        for v in store.list(resource, None).await?.items {
            c.put(v);
        }
        Ok(c)
    }

    pub(crate) fn put(&mut self, v: Value) {
        let name = objects::name_of(&v).to_string();
        match serde_json::from_value::<T>(v.clone()) {
            Ok(t) => match self.index.get(&name) {
                Some(&i) => {
                    self.raw[i] = v;
                    self.typed[i] = t;
                }
                None => {
                    self.index.insert(name, self.raw.len());
                    self.raw.push(v);
                    self.typed.push(t);
                }
            },
            Err(e) => {
                tracing::warn!(%name, error = %e, "ignoring an object that does not parse");
                self.remove(&name);
            }
        }
    }

    fn remove(&mut self, name: &str) {
        let Some(i) = self.index.remove(name) else { return };
        self.raw.swap_remove(i);
        self.typed.swap_remove(i);
        if i < self.raw.len() {
            let moved = objects::name_of(&self.raw[i]).to_string();
            self.index.insert(moved, i);
        }
    }

    pub(crate) fn apply(&mut self, ev: &crate::store::Event) {
        match ev.kind {
            crate::store::EventType::Deleted => self.remove(&ev.key.name),
            _ => {
                // Replayed events (and the events of our own writes, already put) can be older
                // than what the cache holds.
                let cached = self.index.get(&ev.key.name).and_then(|&i| revision_of(&self.raw[i]));
                if cached.is_none_or(|c| c < ev.revision) {
                    self.put((*ev.object).clone());
                }
            }
        }
    }
}
