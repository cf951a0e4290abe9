//! Controllers: reconcile loops fed by store watches, one module each. Each loop lists what it
//! needs, reconciles everything once, then reconciles again after every relevant batch of events;
//! a broken watch restarts the loop from a fresh list, so a missed event can only delay work.

pub mod render;

use crate::store::Store;
use std::sync::Arc;

/// Start every controller on the tokio runtime.
pub fn spawn_all(store: Arc<dyn Store>) -> Vec<tokio::task::JoinHandle<()>> {
    vec![tokio::spawn(render::run(store))]
}
