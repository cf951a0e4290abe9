//! Controllers: reconcile loops fed by store watches, one module each. Each loop reconciles
//! everything once, then again after every debounced batch of events on the resources it
//! watches; a broken watch restarts the loop from a fresh pass, so a missed event can only delay
//! work, never lose it.

pub mod budget;
pub mod cache;
pub mod drain;
pub mod events;
pub mod hooks;
pub mod node;
pub mod pick;
pub mod pools;
pub mod render;
pub mod rollout_policy;

use crate::resources::NODE;
use crate::server::objects;
use crate::store::{revision_of, Event, Key, Store, StoreError, WatchFilter};
use futures::StreamExt;
use serde_json::Value;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

/// Events arriving within this window are reconciled together.
pub(crate) const DEBOUNCE: Duration = Duration::from_millis(50);
/// Reconcile even without events this often, so time-based conditions are noticed.
pub(crate) const RESYNC: Duration = Duration::from_secs(30);

/// Set (Some) or remove (None) annotations of a stored object, in place.
pub(crate) fn set_annotations(obj: &mut Value, changes: &[(&str, Option<&str>)]) {
    if !obj["metadata"]["annotations"].is_object() {
        obj["metadata"]["annotations"] = Value::Object(Default::default());
    }
    if let Some(a) = obj["metadata"]["annotations"].as_object_mut() {
        for (k, v) in changes {
            match v {
                Some(v) => {
                    a.insert(k.to_string(), (*v).into());
                }
                None => {
                    a.remove(*k);
                }
            }
        }
    }
}

/// Set (Some) or remove (None) annotations of a node; the stored node, or None when someone
/// else changed it first (the next pass decides again from the newer version).
pub(crate) async fn annotate(
    store: &Arc<dyn Store>,
    raw: &Value,
    changes: &[(&str, Option<&str>)],
) -> Result<Option<Value>, StoreError> {
    let mut next = raw.clone();
    set_annotations(&mut next, changes);
    write_node(store, raw, next).await
}

/// Write `next` over the stored version `raw` (compare-and-swap); None when it changes nothing,
/// or when someone else changed the node first.
pub(crate) async fn write_node(store: &Arc<dyn Store>, raw: &Value, next: Value) -> Result<Option<Value>, StoreError> {
    if &next == raw {
        return Ok(None);
    }
    let key = Key::cluster(&NODE.store_key(), objects::name_of(raw));
    match store.update(&key, next, revision_of(raw)).await {
        Ok(v) => Ok(Some(v)),
        Err(StoreError::Conflict { .. }) | Err(StoreError::NotFound(_)) => Ok(None),
        Err(e) => Err(e),
    }
}

/// Start every controller.
///
/// They run on a thread of their own, with a runtime of their own: on the API server's runtime a
/// controller's pass was one task among the hundreds of requests a fleet sends at once (the
/// Done reports of a whole batch of nodes), and the picks that refill the freed slots waited
/// behind them. As a thread, the controllers get their share of the CPU from the kernel.
pub fn spawn_all(store: Arc<dyn Store>) -> std::io::Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    std::thread::Builder::new().name("controllers".into()).spawn(move || {
        rt.block_on(async move {
            let all = [
                tokio::spawn(render::run(store.clone())),
                tokio::spawn(node::run(store.clone())),
                tokio::spawn(drain::run(store)),
            ];
            for r in futures::future::join_all(all).await {
                if let Err(e) = r {
                    tracing::error!(error = %e, "a controller stopped");
                }
            }
        })
    })?;
    Ok(())
}

/// Run `reconcile` over `store` forever: once at start, then after each batch of events on
/// `resources`, and at least every [`RESYNC`].
pub async fn run_loop<F, Fut>(name: &'static str, store: Arc<dyn Store>, resources: &[String], reconcile: F)
where
    F: Fn(Arc<dyn Store>) -> Fut,
    Fut: Future<Output = Result<(), StoreError>>,
{
    loop {
        if let Err(e) = watch_and_reconcile(&store, resources, &reconcile).await {
            tracing::warn!(controller = name, error = %e, "controller restarting");
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

async fn watch_and_reconcile<F, Fut>(
    store: &Arc<dyn Store>,
    resources: &[String],
    reconcile: &F,
) -> Result<(), StoreError>
where
    F: Fn(Arc<dyn Store>) -> Fut,
    Fut: Future<Output = Result<(), StoreError>>,
{
    let from = store.revision().await?;
    let mut watches = Vec::new();
    for r in resources {
        watches.push(store.watch(WatchFilter::resource(r), from).await?);
    }
    let mut events = futures::stream::select_all(watches);
    reconcile(store.clone()).await?;
    while next_batch(&mut events).await?.is_some() {
        reconcile(store.clone()).await?;
    }
    Ok(())
}

/// The next batch of events: the first one (or none, after [`RESYNC`]), then whatever else
/// arrives within [`DEBOUNCE`]. `Ok(None)` when the watch ended.
pub(crate) async fn next_batch<S>(events: &mut S) -> Result<Option<Vec<Event>>, StoreError>
where
    S: futures::Stream<Item = Result<Event, StoreError>> + Unpin,
{
    next_batch_within(events, RESYNC).await
}

/// [`next_batch`], waiting at most `idle` for the first event (a controller with a deadline of
/// its own, such as the end of a soak, wakes up for it).
pub(crate) async fn next_batch_within<S>(events: &mut S, idle: Duration) -> Result<Option<Vec<Event>>, StoreError>
where
    S: futures::Stream<Item = Result<Event, StoreError>> + Unpin,
{
    next_batch_debounced(events, idle, DEBOUNCE).await
}

/// The next batch without waiting for more: the first event (or none, after `idle`), then every
/// event already queued. For controllers on a rollout's critical path (a freed slot must be
/// refilled at once): the store publishes all writes of one group commit together, and while a
/// pass runs the next events queue up, so batches grow with the load by themselves.
pub(crate) async fn next_batch_ready<S>(events: &mut S, idle: Duration) -> Result<Option<Vec<Event>>, StoreError>
where
    S: futures::Stream<Item = Result<Event, StoreError>> + Unpin,
{
    let Some(mut batch) = first_event(events, idle).await? else { return Ok(None) };
    if batch.is_empty() {
        return Ok(Some(batch));
    }
    // Let the writers of the same moment publish, then take what is queued.
    tokio::task::yield_now().await;
    while let Some(ev) = futures::FutureExt::now_or_never(events.next()) {
        match ev {
            None => return Ok(None),
            Some(ev) => batch.push(ev?),
        }
    }
    Ok(Some(batch))
}

/// The first event, or an empty batch after `idle`; `None` when the watch ended.
async fn first_event<S>(events: &mut S, idle: Duration) -> Result<Option<Vec<Event>>, StoreError>
where
    S: futures::Stream<Item = Result<Event, StoreError>> + Unpin,
{
    tokio::select! {
        ev = events.next() => match ev {
            None => Ok(None),
            Some(ev) => Ok(Some(vec![ev?])),
        },
        _ = tokio::time::sleep(idle) => Ok(Some(Vec::new())),
    }
}

async fn next_batch_debounced<S>(
    events: &mut S,
    idle: Duration,
    debounce: Duration,
) -> Result<Option<Vec<Event>>, StoreError>
where
    S: futures::Stream<Item = Result<Event, StoreError>> + Unpin,
{
    let Some(mut batch) = first_event(events, idle).await? else { return Ok(None) };
    let deadline = tokio::time::sleep(debounce);
    tokio::pin!(deadline);
    loop {
        tokio::select! {
            _ = &mut deadline => return Ok(Some(batch)),
            ev = events.next() => match ev {
                None => return Ok(None),
                Some(ev) => batch.push(ev?),
            },
        }
    }
}
