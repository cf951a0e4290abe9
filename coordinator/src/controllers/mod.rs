//! Controllers: reconcile loops fed by store watches, one module each. Each loop reconciles
//! everything once, then again after every debounced batch of events on the resources it
//! watches; a broken watch restarts the loop from a fresh pass, so a missed event can only delay
//! work, never lose it.

pub mod budget;
pub mod cache;
pub mod cluster_version;
pub mod config_name;
pub mod drain;
pub mod event_ttl;
pub mod events;
pub mod gc;
pub mod hooks;
pub mod maintenance;
pub mod node;
pub mod olm;
pub mod passes;
pub mod pick;
pub mod pools;
pub mod presence;
pub mod render;
pub mod rollout_policy;
pub mod token_cleaner;
pub mod uncordon;

use crate::health::Health;
use crate::resources::NODE;
use crate::server::objects;
use crate::store::{revision_of, Event, Key, Store, StoreError, WatchFilter};
use futures::StreamExt;
use serde_json::Value;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// A batch of events ends once no new one arrived for this long (a multi-document apply is one
/// request after another, milliseconds apart: its documents are reconciled together)...
pub(crate) const QUIET: Duration = Duration::from_millis(20);
/// ...or this long after its first event, however busy the watch stays.
pub(crate) const BATCH_AT_MOST: Duration = Duration::from_secs(2);
/// Reconcile even without events this often, so time-based conditions are noticed.
pub(crate) const RESYNC: Duration = Duration::from_secs(30);

/// An error and its causes on one line ("connection refused" hides in the source chain), for
/// the controllers' HTTP calls (drain hooks, the update service).
pub(crate) fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut src = e.source();
    while let Some(c) = src {
        s.push_str(": ");
        s.push_str(&c.to_string());
        src = c.source();
    }
    s
}

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
) -> Result<Option<Arc<Value>>, StoreError> {
    let mut next = raw.clone();
    set_annotations(&mut next, changes);
    write_node(store, raw, next).await
}

/// Write `next` over the stored version `raw` (compare-and-swap); None when it changes nothing,
/// or when someone else changed the node first.
pub(crate) async fn write_node(
    store: &Arc<dyn Store>,
    raw: &Value,
    next: Value,
) -> Result<Option<Arc<Value>>, StoreError> {
    if &next == raw {
        return Ok(None);
    }
    let key = Key::cluster(&NODE.store_key(), objects::name_of(raw));
    match store.update(&key, next, revision_of(raw)).await {
        Ok(v) => Ok(Some(v.object)),
        Err(StoreError::Conflict { .. }) | Err(StoreError::NotFound(_)) => Ok(None),
        Err(e) => Err(e),
    }
}

/// What the node and drain controllers both follow: watches of Nodes, pools and budgets from one
/// revision, and caches of the three loaded after the watches started (so no write falls between
/// a list and its watch; replayed events only re-put what a list already had).
pub(crate) struct FleetFeed {
    /// The three resources' store keys: Nodes, pools, budgets.
    pub(crate) keys: [String; 3],
    /// The three watches' events, merged.
    pub(crate) events: futures::stream::SelectAll<crate::store::WatchStream>,
    pub(crate) nodes: cache::Cache<aloft_api::Node>,
    pub(crate) pools: cache::Cache<aloft_api::MachineConfigPool>,
    pub(crate) budgets: cache::Cache<aloft_api::NodeDisruptionBudget>,
}

impl FleetFeed {
    /// Watch from the store's current revision, then list.
    pub(crate) async fn start(store: &Arc<dyn Store>) -> Result<Self, StoreError> {
        use crate::resources::{MACHINE_CONFIG_POOL, NODE, NODE_DISRUPTION_BUDGET};
        let from = store.revision().await?;
        let keys = [NODE.store_key(), MACHINE_CONFIG_POOL.store_key(), NODE_DISRUPTION_BUDGET.store_key()];
        let mut watches = Vec::new();
        for k in &keys {
            watches.push(store.watch(WatchFilter::resource(k), from).await?);
        }
        let events = futures::stream::select_all(watches);
        Ok(FleetFeed {
            nodes: cache::Cache::load(store, &keys[0]).await?,
            pools: cache::Cache::load(store, &keys[1]).await?,
            budgets: cache::Cache::load(store, &keys[2]).await?,
            keys,
            events,
        })
    }
}

/// The garbage collector's name in its Events (Kubernetes' is `garbage-collector-controller`).
const GC_COMPONENT: &str = "aloft-garbage-collector";

/// Start every controller.
///
/// They run on a thread of their own, with a runtime of their own: on the API server's runtime a
/// controller's pass was one task among the hundreds of requests a fleet sends at once (the
/// Done reports of a whole batch of nodes), and the picks that refill the freed slots waited
/// behind them. As a thread, the controllers get their share of the CPU from the kernel.
///
/// Their Events are written from the runtime this is called on (the API server's), not from the
/// controllers' thread: a rollout records one per pick, and building and writing them was a
/// tenth of that thread's time, taken between the passes that refill freed slots.
///
/// `event_ttl` is `--event-ttl`: the recorders write a standing decision's Event again before
/// it would expire.
pub fn spawn_all(store: Arc<dyn Store>, health: Arc<Health>, event_ttl: Duration) -> std::io::Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let recorder = |component| match tokio::runtime::Handle::try_current() {
        Ok(_) => Some(events::Recorder::new(component, store.clone(), event_ttl)),
        Err(_) => None,
    };
    let (node_events, drain_events) = (recorder("aloft-node-controller"), recorder("aloft-drain-controller"));
    let gc_events = recorder(GC_COMPONENT);
    std::thread::Builder::new().name("controllers".into()).spawn(move || {
        rt.block_on(async move {
            // Without a runtime to call from, the Events are written from this one.
            let node_events =
                node_events.unwrap_or_else(|| events::Recorder::new("aloft-node-controller", store.clone(), event_ttl));
            let drain_events = drain_events
                .unwrap_or_else(|| events::Recorder::new("aloft-drain-controller", store.clone(), event_ttl));
            let gc_events = gc_events.unwrap_or_else(|| events::Recorder::new(GC_COMPONENT, store.clone(), event_ttl));
            let (s1, s2, s3, s4) = (store.clone(), store.clone(), store.clone(), store);
            let beat = health.clone();
            let passes = health.passes().clone();
            let (p1, p2, p3, p4) = (passes.of("render"), passes.of("node"), passes.of("drain"), passes.of("gc"));
            futures::future::join5(
                supervise("render", health.clone(), move || render::run(s1.clone(), p1.clone())),
                supervise("node", health.clone(), move || node::run(s2.clone(), node_events.clone(), p2.clone())),
                supervise("drain", health.clone(), move || drain::run(s3.clone(), drain_events.clone(), p3.clone())),
                supervise("gc", health, move || gc::run(s4.clone(), gc_events.clone(), p4.clone())),
                async move {
                    loop {
                        beat.beat();
                        tokio::time::sleep(crate::health::BEAT_EVERY).await;
                    }
                },
            )
            .await;
        })
    })?;
    Ok(())
}

/// The first wait before a stopped controller starts again; it doubles while the controller
/// keeps stopping, up to [`RESTART_AT_MOST`].
pub(crate) const RESTART_AFTER: Duration = Duration::from_secs(1);
/// The longest wait before a stopped controller starts again.
pub(crate) const RESTART_AT_MOST: Duration = Duration::from_secs(60);
/// A controller that ran this long before it stopped starts again after [`RESTART_AFTER`].
const RAN_WELL: Duration = Duration::from_secs(300);

/// Run a controller forever, starting it again whenever it stops.
///
/// A controller's loop never returns; if it does, or panics, the coordinator would go on serving
/// the API with nobody picking nodes, and a rollout would hang with no sign but a log line (a
/// panic in the node controller once did exactly that mid-rollout). A controller keeps no state
/// that its start does not rebuild from the store, so starting it again is safe; the wait grows
/// while it keeps stopping so that a defect hit on every pass does not spin. `health` follows
/// each start and stop, for `/readyz` and `/metrics`.
pub async fn supervise<F, Fut>(name: &'static str, health: Arc<Health>, start: F)
where
    F: Fn() -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let mut wait = RESTART_AFTER;
    loop {
        let started = tokio::time::Instant::now();
        health.started(name);
        let outcome = tokio::spawn(start()).await;
        if started.elapsed() >= RAN_WELL {
            wait = RESTART_AFTER;
        }
        match outcome {
            Ok(()) => tracing::error!(controller = name, restart_in = ?wait, "controller stopped; starting it again"),
            Err(e) => tracing::error!(controller = name, error = %e, restart_in = ?wait,
                "controller failed; starting it again"),
        }
        health.stopped(name, wait);
        tokio::time::sleep(wait).await;
        wait = (wait * 2).min(RESTART_AT_MOST);
    }
}

/// [`run_loop`]'s event filter for a loop that follows rollouts: every event of its resources
/// wakes it, but a pool's only while `following` is set. Pools write their status many times a
/// second in a rollout, which is progress to such a loop only while it follows one; otherwise
/// its resync notices what changed.
pub fn pools_wake_while(following: Arc<AtomicBool>) -> impl Fn() -> Box<dyn FnMut(&Event) -> bool + Send> {
    let pools = crate::resources::MACHINE_CONFIG_POOL.store_key();
    move || {
        let (following, pools) = (following.clone(), pools.clone());
        Box::new(move |ev: &Event| ev.key.resource != pools || following.load(Ordering::Relaxed))
    }
}

/// Run `reconcile` over `store` forever: once at start, then after each batch of events on
/// `resources` that `relevant` keeps (see [`next_batch_debounced`]), and at least every [`RESYNC`];
/// `passes` counts and times each run.
pub async fn run_loop<F, Fut, R>(
    name: &'static str,
    store: Arc<dyn Store>,
    resources: &[String],
    relevant: R,
    passes: passes::Passes,
    reconcile: F,
) where
    F: Fn(Arc<dyn Store>) -> Fut,
    Fut: Future<Output = Result<(), StoreError>>,
    R: Fn() -> Box<dyn FnMut(&Event) -> bool + Send>,
{
    run_loop_woken(name, store, resources, relevant, passes, None, reconcile).await
}

/// [`run_loop`], with a pass also whenever `wake` is notified: for a controller with work
/// that falls due on a clock of its own (a catalog's poll), not on a change in the store.
pub async fn run_loop_woken<F, Fut, R>(
    name: &'static str,
    store: Arc<dyn Store>,
    resources: &[String],
    relevant: R,
    passes: passes::Passes,
    wake: Option<Arc<tokio::sync::Notify>>,
    reconcile: F,
) where
    F: Fn(Arc<dyn Store>) -> Fut,
    Fut: Future<Output = Result<(), StoreError>>,
    R: Fn() -> Box<dyn FnMut(&Event) -> bool + Send>,
{
    loop {
        if let Err(e) =
            watch_and_reconcile(&store, resources, &mut *relevant(), &passes, wake.as_deref(), &reconcile).await
        {
            tracing::warn!(controller = name, error = %e, "controller restarting");
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

async fn watch_and_reconcile<F, Fut>(
    store: &Arc<dyn Store>,
    resources: &[String],
    relevant: &mut (dyn FnMut(&Event) -> bool + Send),
    passes: &passes::Passes,
    wake: Option<&tokio::sync::Notify>,
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
    passes.time(0, reconcile(store.clone())).await?;
    loop {
        let next = next_batch_debounced(&mut events, RESYNC, QUIET, BATCH_AT_MOST, relevant);
        let batch = match wake {
            // A batch cut short by the wake is not lost: a pass reads the store whole.
            Some(wake) => tokio::select! {
                batch = next => batch?,
                _ = wake.notified() => Some(Vec::new()),
            },
            None => next.await?,
        };
        let Some(batch) = batch else { return Ok(()) };
        passes.time(batch.len(), reconcile(store.clone())).await?;
    }
}

/// Whether an event changed an object's `metadata.generation` (its spec), or created or deleted
/// it: the filter of a controller that reads specs only and must not run on every status write.
#[derive(Default)]
pub(crate) struct SpecChanges {
    generations: std::collections::HashMap<Key, Option<i64>>,
}

impl SpecChanges {
    pub(crate) fn changed(&mut self, ev: &Event) -> bool {
        if matches!(ev.kind, crate::store::EventType::Deleted) {
            self.generations.remove(&ev.key);
            return true;
        }
        let generation = crate::server::objects::at(&ev.object, &["metadata", "generation"]).and_then(Value::as_i64);
        self.generations.insert(ev.key.clone(), generation) != Some(generation)
    }
}

/// The next batch without waiting for more: the first event (or none, after `idle`), then every
/// event already queued. For controllers on a rollout's critical path (a freed slot must be
/// refilled at once): the store publishes all writes of one group commit together, and while a
/// pass runs the next events queue up, so batches grow with the load by themselves.
pub(crate) async fn next_batch_ready<S>(events: &mut S, idle: Duration) -> Result<Option<Vec<Event>>, StoreError>
where
    S: futures::Stream<Item = Result<Event, StoreError>> + Unpin,
{
    next_batch_ready_or(events, idle, std::future::pending()).await
}

/// [`next_batch_ready`], also ending with an empty batch as soon as `wake` completes while no
/// event has come yet (a controller's own background work finished): raced only before the
/// first event is taken, so no event is lost to it.
pub(crate) async fn next_batch_ready_or<S>(
    events: &mut S,
    idle: Duration,
    wake: impl std::future::Future<Output = ()>,
) -> Result<Option<Vec<Event>>, StoreError>
where
    S: futures::Stream<Item = Result<Event, StoreError>> + Unpin,
{
    let first = tokio::select! {
        b = first_event(events, idle) => b?,
        () = wake => Some(Vec::new()),
    };
    let Some(mut batch) = first else { return Ok(None) };
    if batch.is_empty() {
        return Ok(Some(batch));
    }
    // Let the writers of the same moment publish, then take what is queued.
    tokio::task::yield_now().await;
    // Unconstrained: tokio's cooperative budget would end the batch after 128 events (its
    // receivers report "not ready" once a task used its budget), and at 10,000 nodes the
    // controller then fell behind the watch by seconds, a pass per 128 events.
    while let Some(ev) = futures::FutureExt::now_or_never(tokio::task::unconstrained(events.next())) {
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

/// The next batch of the events `relevant` keeps (the others are dropped): the first one (or
/// none, after `idle`: an empty batch), then the ones that follow it each within `quiet`, for
/// at most `at_most` after the first. `Ok(None)` when the watch ended.
pub(crate) async fn next_batch_debounced<S>(
    events: &mut S,
    idle: Duration,
    quiet: Duration,
    at_most: Duration,
    relevant: &mut (dyn FnMut(&Event) -> bool + Send),
) -> Result<Option<Vec<Event>>, StoreError>
where
    S: futures::Stream<Item = Result<Event, StoreError>> + Unpin,
{
    let idle_until = tokio::time::Instant::now() + idle;
    let mut batch = loop {
        tokio::select! {
            ev = events.next() => match ev {
                None => return Ok(None),
                Some(ev) => {
                    let ev = ev?;
                    if relevant(&ev) {
                        break vec![ev];
                    }
                }
            },
            _ = tokio::time::sleep_until(idle_until) => return Ok(Some(Vec::new())),
        }
    };
    let end = tokio::time::Instant::now() + at_most;
    let mut until = (tokio::time::Instant::now() + quiet).min(end);
    loop {
        tokio::select! {
            _ = tokio::time::sleep_until(until) => return Ok(Some(batch)),
            ev = events.next() => match ev {
                None => return Ok(None),
                Some(ev) => {
                    let ev = ev?;
                    if relevant(&ev) {
                        batch.push(ev);
                        until = (tokio::time::Instant::now() + quiet).min(end);
                    }
                }
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::EventType;
    use serde_json::json;

    fn ev(revision: u64, name: &str, generation: i64) -> Result<Event, StoreError> {
        Ok(Event::new(
            revision,
            Key::cluster("/pools", name),
            EventType::Modified,
            json!({"metadata": {"name": name, "generation": generation}}),
        ))
    }

    /// A controller that panics, then returns, is started again each time, after waits that
    /// double; the third start runs for good.
    #[tokio::test(start_paused = true)]
    async fn a_controller_that_panics_or_returns_is_started_again_after_a_growing_wait() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        let starts = Arc::new(AtomicUsize::new(0));
        let t0 = tokio::time::Instant::now();
        let at = Arc::new(std::sync::Mutex::new(Vec::new()));
        let (s, a) = (starts.clone(), at.clone());
        let health = Arc::new(Health::default());
        let sup = tokio::spawn(supervise("test", health.clone(), move || {
            let (s, a) = (s.clone(), a.clone());
            async move {
                let n = s.fetch_add(1, Ordering::SeqCst);
                a.lock().unwrap().push(t0.elapsed());
                match n {
                    0 => panic!("a defect on the first pass"),
                    1 => {}
                    _ => std::future::pending::<()>().await,
                }
            }
        }));
        tokio::time::sleep(Duration::from_millis(500)).await;
        let l = health.loops()["test"].clone();
        assert_eq!(
            (l.restarts, &l.state),
            (1, &crate::health::LoopState::WaitingToStart { at: t0 + RESTART_AFTER }),
            "after the panic, waiting to start again"
        );
        tokio::time::sleep(Duration::from_millis(9500)).await;
        assert_eq!(starts.load(Ordering::SeqCst), 3, "started, started again after the panic and after the return");
        let l = health.loops()["test"].clone();
        assert_eq!((l.restarts, l.state), (2, crate::health::LoopState::Running), "running after two stops");
        let at = at.lock().unwrap().clone();
        assert_eq!(at[1] - at[0], RESTART_AFTER, "{at:?}");
        assert_eq!(at[2] - at[1], RESTART_AFTER * 2, "{at:?}");
        assert!(!sup.is_finished(), "the supervisor never ends");
        sup.abort();
    }

    #[test]
    fn spec_changes_see_generations_creations_and_deletions() {
        let mut specs = SpecChanges::default();
        assert!(specs.changed(&ev(1, "worker", 1).unwrap()), "first sight");
        assert!(!specs.changed(&ev(2, "worker", 1).unwrap()), "a status write keeps the generation");
        assert!(specs.changed(&ev(3, "worker", 2).unwrap()), "a spec change bumps it");
        assert!(specs.changed(&ev(4, "infra", 2).unwrap()), "another object");
        let mut gone = ev(5, "worker", 2).unwrap();
        gone.kind = EventType::Deleted;
        assert!(specs.changed(&gone));
        assert!(specs.changed(&ev(6, "worker", 2).unwrap()), "created again");
    }

    #[tokio::test(start_paused = true)]
    async fn a_batch_takes_what_follows_closely_and_ignores_the_rest() {
        let (tx, rx) = futures::channel::mpsc::unbounded();
        let mut events = rx;
        for (i, g) in [1, 1, 2, 2, 3].into_iter().enumerate() {
            tx.unbounded_send(ev(i as u64 + 1, "worker", g)).unwrap();
        }
        let mut specs = SpecChanges::default();
        let mut relevant = |e: &Event| specs.changed(e);
        let quiet = Duration::from_millis(100);
        let batch = next_batch_debounced(&mut events, RESYNC, quiet, Duration::from_secs(5), &mut relevant)
            .await
            .unwrap()
            .unwrap();
        let revs: Vec<u64> = batch.iter().map(|e| e.revision).collect();
        assert_eq!(revs, [1, 3, 5], "queued together, status-only writes left out");

        // A stream of status writes neither starts nor holds open a batch: it ends `quiet`
        // after the last relevant event, and a timer ends the wait when none comes.
        let flood = tokio::spawn({
            let tx = tx.clone();
            async move {
                for i in 0..200u64 {
                    if tx.unbounded_send(ev(100 + i, "worker", 3)).is_err() {
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            }
        });
        let t = tokio::time::Instant::now();
        let none =
            next_batch_debounced(&mut events, Duration::from_millis(300), quiet, Duration::from_secs(5), &mut relevant)
                .await
                .unwrap()
                .unwrap();
        assert!(none.is_empty(), "only status writes: the idle timer's empty batch");
        assert_eq!(t.elapsed(), Duration::from_millis(300), "the flood did not hold it past the idle timer");
        flood.abort();

        // Relevant events that never stop: the batch still ends after `at_most`.
        let busy = tokio::spawn(async move {
            for i in 0..2000u64 {
                if tx.unbounded_send(ev(1000 + i, "worker", 4 + i as i64)).is_err() {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        });
        let t = tokio::time::Instant::now();
        let batch = next_batch_debounced(&mut events, RESYNC, quiet, Duration::from_millis(300), &mut relevant)
            .await
            .unwrap()
            .unwrap();
        assert!(!batch.is_empty());
        // Virtual time: the first event comes at once, then `at_most` ends the batch (the
        // flood's 5 ms steps land on it, so within one step of it).
        let took = t.elapsed();
        assert!(
            took >= Duration::from_millis(300) && took <= Duration::from_millis(305),
            "at_most ends a busy batch: {took:?}"
        );
        assert!(batch.len() >= 50, "the batch took the events of those 300 ms: {}", batch.len());
        busy.abort();
    }
}
