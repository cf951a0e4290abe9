//! The drain controller: answers an agent's `desiredDrain` request.
//!
//! `drain-<config>`: check the NodeDisruptionBudgets selecting the node (a blocked drain waits,
//! with an Event naming the budget), cordon (`spec.unschedulable`), call the pool's drain hooks
//! in order, then acknowledge with `lastAppliedDrain`. `uncordon-<config>` (the agent asks once
//! it is Done): call the hooks with phase `uncordon`, uncordon and acknowledge; a failing hook
//! keeps the node cordoned and is retried, as a drain's is.
//!
//! Everything it needs to continue after a restart is on the Node: when the drain started
//! (`aloft.dev/drainStarted`, for the timeout), whether it is cordoned, whether it timed out
//! (`aloft.dev/drainFailure`). A drain not acknowledged within the pool's `spec.drain.timeoutSeconds`
//! (default 1 h) is marked with `aloft.dev/drainFailure` (the node counts as degraded and the
//! pool raises NodeDrainTimeout) and keeps being retried, as MCO's controller does; so is an
//! uncordon whose hooks have not succeeded within it (from its first failed call).
//!
//! A node whose drain or uncordon call failed (a hook answering an error, or unreachable) is
//! retried with a back-off of its own ([`retry_after`]), as MCO's drain controller requeues a
//! failed drain after 1 min and, after 10 min, every 5 min: an endpoint that is down is not called
//! every 2 s per stuck node for as long as it is down. The back-off delays nothing else: other
//! nodes, the drain timeout (the controller wakes for it) and the retry after a success.

use super::budget::Ledger;
use super::cache::Cache;
use super::events::{reasons, EventType, Involved, Recorder};
use super::hooks::{HookRequest, Hooks, Phase};
use super::pools::{self, NodeFacts};
use super::uncordon::{cordon_for_drain, end_drain};
use super::{annotate, set_annotations};
use crate::resources::NODE;
use crate::store::{revision_of, Key, Store, StoreError, Stored};
use aloft_api::annotations as ann;
use aloft_api::{DrainHook, MachineConfigPool, Node, NodeDisruptionBudget};
use chrono::{DateTime, Utc};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;

/// The first retry of a node's failed drain or uncordon call: quick, so that a blip of the hook's
/// endpoint costs seconds, not MCO's minute.
const BACKOFF_FIRST: Duration = Duration::from_secs(2);
/// The longest step while the call has been failing for less than [`BACKOFF_LONG_AFTER`]: MCO's
/// drain controller requeues a failed drain after 1 min.
const BACKOFF_CAP: Duration = Duration::from_secs(60);
/// After this long failing, the call is retried every [`BACKOFF_LONG`] (MCO: "after 10 min every
/// 5 min").
const BACKOFF_LONG_AFTER: Duration = Duration::from_secs(600);
const BACKOFF_LONG: Duration = Duration::from_secs(300);
/// How long an uncordon the node controller makes (see [`left_to_node_controller`]) is left to
/// it before this controller does it instead, so that a node is never left cordoned.
const HANDOFF: Duration = Duration::from_secs(1);

/// How long after the `failures`-th consecutive failure (1: the first) of a node's drain or
/// uncordon call it is tried again, the call having failed for `failing_for` since its first
/// failure: 2 s, doubling per failure up to 1 min, and every 5 min once it has failed for 10 min
/// (reference/mco.md, "Drain controller": failure -> requeue 1 min, after 10 min every 5 min; the
/// quicker first steps let a blip pass without a minute's wait).
pub fn retry_after(failures: u32, failing_for: Duration) -> Duration {
    if failing_for >= BACKOFF_LONG_AFTER {
        return BACKOFF_LONG;
    }
    let doublings = failures.saturating_sub(1).min(16);
    BACKOFF_FIRST.saturating_mul(1 << doublings).min(BACKOFF_CAP)
}

/// A node's failing call: for which request, how many failures in a row, since when, and when
/// it is due again.
#[derive(Debug, Clone)]
struct Failing {
    request: String,
    failures: u32,
    since: Instant,
    due: Instant,
}

/// The back-off of every node whose call failed, by node. In memory: a restarted coordinator
/// retries at once and starts again from the first step.
#[derive(Debug, Default)]
struct Backoffs {
    nodes: HashMap<String, Failing>,
    /// The longest step: a sixth of the Event TTL, so that the failure's standing Event, written
    /// again on a retry once a third of the TTL old, is written within half the TTL and never
    /// expires while the node is stuck.
    max_step: Option<Duration>,
}

impl Backoffs {
    /// Record a failed call of `request` for `node` at `now` (a failure of another request
    /// starts again from the first step); returns when it is due again.
    fn failed(&mut self, node: &str, request: &str, now: Instant) -> Instant {
        let fresh = || Failing { request: request.to_string(), failures: 0, since: now, due: now };
        let f = self.nodes.entry(node.to_string()).or_insert_with(fresh);
        if f.request != request {
            *f = fresh();
        }
        f.failures = f.failures.saturating_add(1);
        let mut step = retry_after(f.failures, now.saturating_duration_since(f.since));
        if let Some(max) = self.max_step {
            step = step.min(max);
        }
        f.due = now + step;
        f.due
    }

    /// The call succeeded: the next failure starts from the first step.
    fn succeeded(&mut self, node: &str) {
        self.nodes.remove(node);
    }

    /// When `node`'s call of `request` is due again; None when it is not backing off (a back-off
    /// for another request is forgotten: a new request starts afresh).
    fn due(&mut self, node: &str, request: &str) -> Option<Instant> {
        match self.nodes.get(node) {
            Some(f) if f.request == request => Some(f.due),
            Some(_) => {
                self.nodes.remove(node);
                None
            }
            None => None,
        }
    }
}

/// What a back-off is about: the request and the hooks that failed it. Hooks fixed or removed in
/// the pool's spec are tried at once, not after the back-off of the ones that failed (up to
/// 5 minutes once a drain has failed for 10).
fn backoff_key(request: &str, hooks: &[DrainHook]) -> String {
    let mut key = request.to_string();
    for h in hooks {
        key.push_str(&format!(" {} {:?}", h.url, h.timeout_seconds));
    }
    key
}

/// What an agent asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    Drain(String),
    Uncordon(String),
}

impl Request {
    fn value(&self) -> &str {
        match self {
            Request::Drain(v) | Request::Uncordon(v) => v,
        }
    }
}

/// The request a node has pending (desiredDrain set and not yet equal to lastAppliedDrain).
pub fn pending(node: &Value) -> Option<Request> {
    let want = asked(node)?;
    if want.starts_with("drain-") {
        Some(Request::Drain(want.to_string()))
    } else {
        Some(Request::Uncordon(want.to_string()))
    }
}

/// The `desiredDrain` value of a pending request, borrowed.
fn asked(node: &Value) -> Option<&str> {
    let ann = crate::server::objects::at(node, &["metadata", "annotations"])?;
    let want = ann.get(ann::DESIRED_DRAIN)?.as_str()?;
    let done = ann.get(ann::LAST_APPLIED_DRAIN).and_then(Value::as_str).unwrap_or("");
    ((want.starts_with("drain-") || want.starts_with("uncordon-")) && want != done).then_some(want)
}

/// Whether [`pending`] finds a request, without copying it (asked of every Node event).
fn asks(node: &Value) -> bool {
    asked(node).is_some()
}

/// [`pending`] from the facts cached for the node (a pass must not re-read every asking node's
/// annotations).
fn request_of(f: &NodeFacts) -> Option<Request> {
    if !f.drain_pending {
        None
    } else if f.drain_request.starts_with("drain-") {
        Some(Request::Drain(f.drain_request.clone()))
    } else {
        Some(Request::Uncordon(f.drain_request.clone()))
    }
}

/// When the drain for `request` started, from `aloft.dev/drainStarted` (`<request>@<time>`).
fn started_at(node: &Node, request: &str) -> Option<DateTime<Utc>> {
    parse_start_mark(node.annotation(ann::DRAIN_STARTED)?, request)
}

/// The time in a `<request>@<time>` mark, when it is for `request`.
fn parse_start_mark(mark: &str, request: &str) -> Option<DateTime<Utc>> {
    let (r, t) = mark.rsplit_once('@')?;
    (r == request).then(|| DateTime::parse_from_rfc3339(t).ok().map(|t| t.with_timezone(&Utc))).flatten()
}

/// `1 hour`, `90 seconds`: MCO's wording of drain timeouts.
fn humanize(seconds: i64) -> String {
    let (n, unit) = if seconds >= 3600 && seconds % 3600 == 0 {
        (seconds / 3600, "hour")
    } else if seconds >= 60 && seconds % 60 == 0 {
        (seconds / 60, "minute")
    } else {
        (seconds, "second")
    };
    format!("{n} {unit}{}", if n == 1 { "" } else { "s" })
}

/// Why a node's drain has not finished: a budget's wait, which ends when the budget lets the
/// node go, or a hook call's failure, which stands until a call succeeds.
#[derive(Debug, Clone)]
enum Holdup {
    Budget(String),
    Hook(String),
}

impl Holdup {
    fn text(&self) -> &str {
        match self {
            Holdup::Budget(t) | Holdup::Hook(t) => t,
        }
    }
}

#[derive(Clone)]
struct Ctx {
    events: Recorder,
    hooks: Hooks,
    /// Nodes with a drain or uncordon task running, and what it runs.
    inflight: Arc<Mutex<HashMap<String, Running>>>,
    /// The id of the next task ([`Running::id`]).
    next_id: Arc<std::sync::atomic::AtomicU64>,
    /// The last reason a node's drain did not finish (for the timeout message).
    last_error: Arc<Mutex<HashMap<String, Holdup>>>,
    /// The back-off of the nodes whose call failed.
    backoffs: Arc<Mutex<Backoffs>>,
    /// Told when a drain or uncordon task ends, so that the controller takes its outcome into
    /// account (a back-off to wait for) without polling.
    done: Arc<tokio::sync::Notify>,
    /// The Nodes the tasks wrote, put into the cache by the next pass before its budgets are
    /// counted. Counted from the watch alone, a drain a task had just granted was not seen yet,
    /// and concurrent requests were each answered as if the budget were free (an audit saw six
    /// drains of a `maxUnavailable: 1` budget answered within 50 ms).
    written: Arc<Mutex<Vec<Arc<Value>>>>,
}

/// A drain or uncordon task running for a node: the request and hooks it was started for, so
/// that one made stale (the request changed, the pool's hooks were edited, e.g. a hanging hook
/// removed) is stopped instead of holding the node until its call times out.
struct Running {
    id: u64,
    request: String,
    hooks: Vec<DrainHook>,
    abort: tokio::task::AbortHandle,
}

/// An uncordon request the node controller answers itself, in the write that refills the slot
/// (pools without drain hooks: nothing to call, and the node is Done on the config it asked
/// about). Answering it here as well would race that write and make it fail.
fn left_to_node_controller(req: &Request, hooks: &[DrainHook], in_pool: bool, facts: &NodeFacts) -> bool {
    matches!(req, Request::Uncordon(_))
        && in_pool
        && hooks.is_empty()
        && facts.uncordon_due()
        && facts.drain_pool.is_empty()
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Answer drain requests forever; `events` records this controller's Events.
pub async fn run(store: Arc<dyn Store>, events: Recorder, passes: super::passes::Passes) {
    let hooks = match Hooks::new() {
        Ok(h) => h,
        Err(e) => {
            tracing::error!(controller = "drain", error = %e, "cannot build the HTTP client for drain hooks");
            return;
        }
    };
    let max_step = events.refresh_interval().map(|third| third / 2);
    let backoffs = Arc::new(Mutex::new(Backoffs { max_step, ..Default::default() }));
    let ctx = Ctx {
        events,
        hooks,
        inflight: Arc::default(),
        next_id: Arc::default(),
        last_error: Arc::default(),
        backoffs,
        done: Arc::default(),
        written: Arc::default(),
    };
    let mut handoffs = HashMap::new();
    loop {
        if let Err(e) = follow(&store, &ctx, &passes, &mut handoffs).await {
            tracing::warn!(controller = "drain", error = %e, "controller restarting");
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

struct State {
    nodes: Cache<Node>,
    pools: Cache<MachineConfigPool>,
    budgets: Cache<NodeDisruptionBudget>,
    /// The nodes whose cached facts have a request pending, by name: a pass starts from these
    /// instead of reading every node's facts (a rollout's passes, one per batch of events, mostly
    /// find none: the pick answers the drain and the Done report its uncordon).
    asking: BTreeSet<String>,
}

/// Bring `asking` ([`State::asking`]) up to date for node `name` after its cache entry changed.
fn track(nodes: &Cache<Node>, asking: &mut BTreeSet<String>, name: &str) {
    match nodes.index_of(name) {
        Some(i) if nodes.derived[i].drain_pending => {
            if !asking.contains(name) {
                asking.insert(name.to_string());
            }
        }
        _ => {
            asking.remove(name);
        }
    }
}

impl State {
    /// [`State::asking`] from every node's facts (after a load or a refresh of the whole cache).
    fn track_all(&mut self) {
        let nodes = &self.nodes;
        self.asking = nodes
            .derived
            .iter()
            .zip(&nodes.typed)
            .filter(|(f, _)| f.drain_pending)
            .map(|(_, n)| n.metadata.name.clone())
            .collect();
    }
}

/// Uncordon requests left to the node controller, by node: since when.
type Handoffs = HashMap<String, tokio::time::Instant>;

async fn follow(
    store: &Arc<dyn Store>,
    ctx: &Ctx,
    passes: &super::passes::Passes,
    handoffs: &mut Handoffs,
) -> Result<(), StoreError> {
    let super::FleetFeed { keys, events: mut stream, nodes, pools, budgets } = super::FleetFeed::start(store).await?;
    let mut st = State { nodes, pools, budgets, asking: BTreeSet::new() };
    st.track_all();
    let mut wake = passes.time(0, pass(store, ctx, &mut st, handoffs)).await?;
    loop {
        // Until the earliest retry due (or an event, or a task's end), not a poll.
        let idle = wake.map_or(super::RESYNC, |w| w.saturating_duration_since(Instant::now()));
        let Some(batch) = super::next_batch_ready_or(&mut stream, idle, ctx.done.notified()).await? else { break };
        for ev in &batch {
            if ev.key.resource == keys[0] {
                if ev.kind == crate::store::EventType::Deleted {
                    // Its drain's Events hold nothing back about a new Node of its name.
                    ctx.events.forget_object("Node", &ev.key.name);
                }
                // A node that neither asks nor asked is read again only when a drain needs the
                // whole fleet (the budgets' counts): most Node events of a rollout are such.
                st.nodes.apply_lazily(ev, |raw, old| old.drain_pending || asks(raw));
                track(&st.nodes, &mut st.asking, &ev.key.name);
            } else if ev.key.resource == keys[1] {
                st.pools.apply(ev);
            } else {
                st.budgets.apply(ev);
            }
        }
        wake = passes.time(batch.len(), pass(store, ctx, &mut st, handoffs)).await?;
    }
    Ok(())
}

/// The earlier of `wake` and `at`.
fn earliest(wake: &mut Option<Instant>, at: Instant) {
    *wake = Some(wake.map_or(at, |w| w.min(at)));
}

/// One pass over the cache: start a task for every pending request that may go ahead. Returns
/// when the next pass is due for a request still waiting (a budget, a back-off, a drain timeout);
/// None when nothing waits on time (a running task wakes the controller when it ends).
async fn pass(
    store: &Arc<dyn Store>,
    ctx: &Ctx,
    st: &mut State,
    handoffs: &mut Handoffs,
) -> Result<Option<Instant>, StoreError> {
    let now = Utc::now();
    let clock = Instant::now();
    let mut wake = None;
    // A drain a task is granting counts against the budgets as if granted: the tasks running
    // (before their cordon is written), then what the tasks that ended wrote (before the watch
    // brings it). In that order: a task puts its writes here before it leaves `inflight`. Every
    // pass takes the writes (an uncordon's too: they must not pile up), before it reads who asks.
    let granting: HashSet<String> =
        lock(&ctx.inflight).iter().filter(|(_, r)| r.request.starts_with("drain-")).map(|(n, _)| n.clone()).collect();
    // Taken out first: a `for` over the guard's temporary would hold the lock through the loop,
    // and a task that ends meanwhile would block its worker thread on it.
    let written = std::mem::take(&mut *lock(&ctx.written));
    for v in written {
        let name = crate::server::objects::name_of(&v).to_string();
        st.nodes.put_if_newer(v);
        track(&st.nodes, &mut st.asking, &name);
    }
    // Most passes on a big fleet have nothing pending: find that out before building anything.
    // In cache order, as the fleet was listed.
    let mut asking: Vec<usize> = st.asking.iter().filter_map(|name| st.nodes.index_of(name)).collect();
    asking.sort_unstable();
    let requests: Vec<(usize, Request)> =
        asking.into_iter().filter_map(|i| request_of(&st.nodes.derived[i]).map(|r| (i, r))).collect();
    {
        // Hand-offs and back-offs of nodes that ask nothing any more are dropped (such a node
        // starts afresh on its next failure). By name through a set: a batch of a big fleet has a
        // thousand uncordons pending at once.
        let mut backoffs = lock(&ctx.backoffs);
        if !handoffs.is_empty() || !backoffs.nodes.is_empty() {
            let asking: HashSet<&str> =
                requests.iter().map(|(i, _)| st.nodes.typed[*i].metadata.name.as_str()).collect();
            handoffs.retain(|name, _| asking.contains(name.as_str()));
            backoffs.nodes.retain(|name, _| asking.contains(name.as_str()));
        }
    }
    if requests.is_empty() {
        return Ok(None);
    }
    // Only a drain is checked against the budgets; a pass with none (a fleet's uncordon requests,
    // which the node controller answers) builds no ledger: that reads the whole fleet.
    let drains = requests.iter().any(|(_, r)| matches!(r, Request::Drain(_)));
    if drains {
        // Nodes left unparsed asked nothing, and still ask nothing once parsed; counted again
        // all the same, as cheap as the refresh itself.
        st.nodes.refresh();
        st.track_all();
    }
    let (unavailable, labels): (Vec<bool>, Vec<&BTreeMap<String, String>>) = if drains {
        (
            st.nodes
                .derived
                .iter()
                .zip(&st.nodes.typed)
                // A node that waits for its own drain is not out of service yet. Counted, two
                // picked nodes of a budget that shrank after their picks (a covered node deleted
                // or gone NotReady, the budget tightened) each held the other's drain, both until
                // their drain timeout and on: a deadlock, where one drain at a time was allowed.
                .map(|(f, n)| (f.disrupted() && !f.waits_for_its_drain()) || granting.contains(&n.metadata.name))
                .collect(),
            st.nodes.typed.iter().map(|n| &n.metadata.labels).collect(),
        )
    } else {
        Default::default()
    };
    let mut ledger = Ledger::new(&st.budgets.typed, &labels, &unavailable);
    let membership = pools::Membership::new(&st.pools.typed);
    for (i, req) in requests {
        let name = st.nodes.typed[i].metadata.name.clone();
        // A node whose call is still running (a hook that hangs, up to its own timeout) is not
        // started again, but its drain timeout is still checked on time below.
        // The pool of this node only (MCO's membership rules, one node at a time): a pass must
        // not cost the whole fleet.
        let pool = membership.pool_of(&st.nodes.typed[i]).ok().flatten().map(|p| &st.pools.typed[p]);
        // An uncordon calls the hooks of the pool that drained the node, which it may have left
        // since; that pool gone, its hooks are too, and the node's pool's are called.
        let drained_by = match &req {
            Request::Uncordon(_) => st.nodes.typed[i]
                .annotation(ann::DRAIN_POOL)
                .and_then(|name| st.pools.typed.iter().find(|p| p.metadata.name == name)),
            Request::Drain(_) => None,
        };
        let hooks_of = drained_by.or(pool);
        let pool_hooks = hooks_of.and_then(|p| p.spec.drain.as_ref()).map_or(&[][..], |d| d.hooks.as_slice());
        // A task started for another request or other hooks is stopped: it would hold the node
        // until its call ends (a hanging hook the admin removed, up to its own timeout).
        let in_flight = {
            let mut running = lock(&ctx.inflight);
            match running.get(&name) {
                Some(r) if r.request == req.value() && r.hooks == pool_hooks => true,
                Some(r) => {
                    r.abort.abort();
                    // Its failure was about the old request or hooks: a timeout must not name it.
                    lock(&ctx.last_error).remove(&name);
                    tracing::info!(node = %name, request = %req.value(), was = %r.request, "stopped a drain task started for another request or other hooks");
                    running.remove(&name);
                    false
                }
                None => false,
            }
        };
        if !in_flight && left_to_node_controller(&req, pool_hooks, pool.is_some(), &st.nodes.derived[i]) {
            let since = *handoffs.entry(name.clone()).or_insert(clock);
            if clock.duration_since(since) < HANDOFF {
                earliest(&mut wake, since + HANDOFF);
                continue;
            }
            tracing::warn!(node = %name, request = %req.value(), "the node controller has not uncordoned this node; uncordoning it here");
        }
        let node = st.nodes.typed[i].clone();
        let node = &node;
        let timeout = pool
            .map(|p| p.spec.drain_timeout_seconds())
            .unwrap_or(aloft_api::machineconfig::DEFAULT_DRAIN_TIMEOUT_SECONDS);
        // The start is recorded by the job's cordon (or below, when a budget holds the drain
        // back; for an uncordon, by its first failed hook call), not by a write of its own here:
        // a pass must not wait for commits.
        let started = match &req {
            Request::Drain(r) => Some(started_at(node, r).unwrap_or(now)),
            Request::Uncordon(r) => started_at(node, r),
        };
        if started.is_some_and(|t| (now - t).num_seconds() >= timeout) {
            let (what, default) = match &req {
                Request::Drain(_) => ("drain", "the drain has not finished"),
                Request::Uncordon(_) => ("uncordon", "the uncordon has not finished"),
            };
            // Said afresh on every pass, so the mark follows what holds the drain now (a budget
            // that freed up, then a hook that fails); after a restart, before this process has
            // seen a failure of its own, the mark it finds stands.
            let why = lock(&ctx.last_error).get(&name).map(|h| h.text().to_string());
            let msg = match (why, node.annotation(ann::DRAIN_FAILURE)) {
                (None, Some(marked)) => marked.to_string(),
                (why, _) => format!(
                    "failed to {what} node: {name} after {}: {}",
                    humanize(timeout),
                    why.as_deref().unwrap_or(default)
                ),
            };
            if node.annotation(ann::DRAIN_FAILURE) != Some(msg.as_str()) {
                // `put` replaces in place: index `i` is still this node.
                if let Some(stored) = annotate(store, &st.nodes.raw[i], &[(ann::DRAIN_FAILURE, Some(&msg))]).await? {
                    st.nodes.put(stored);
                    track(&st.nodes, &mut st.asking, &name);
                }
                tracing::warn!(node = %name, %msg, "{what} timed out; still retrying");
            }
            // Recorded on every retry while the drain stays stuck, with the message the node was
            // marked with: the recorder writes it once and then counts it again every third of the
            // Event TTL, so the Event lasts as long as the timeout does (a timeout recorded only once
            // expired with the TTL while the node was still stuck).
            ctx.events.emit(&Involved::node(&name), EventType::Warning, reasons::DRAIN_TIMEOUT, &msg);
        } else if started.is_some() && node.annotation(ann::DRAIN_FAILURE).is_some() {
            // Marked under a shorter timeout than the pool's now (raised since): not timed out
            // any more, so not degraded, and the timeout fires again if this one passes too.
            if let Some(stored) = annotate(store, &st.nodes.raw[i], &[(ann::DRAIN_FAILURE, None)]).await? {
                st.nodes.put(stored);
                track(&st.nodes, &mut st.asking, &name);
            }
            ctx.events.forget(&Involved::node(&name), reasons::DRAIN_TIMEOUT);
            tracing::info!(node = %name, "the drain timeout was raised past this drain's time; no longer marked");
        }
        // When the drain times out, for a pass due then (none once the node is marked).
        let times_out = started
            .filter(|_| node.annotation(ann::DRAIN_FAILURE).is_none())
            .and_then(|t| (t + chrono::Duration::seconds(timeout) - now).to_std().ok().map(|left| clock + left));
        if in_flight {
            if let Some(at) = times_out {
                earliest(&mut wake, at);
            }
            continue;
        }
        let job = Job {
            store: store.clone(),
            ctx: ctx.clone(),
            node: name.clone(),
            cached: st.nodes.raw[i].clone(),
            pool: hooks_of.map(|p| p.metadata.name.clone()).unwrap_or_default(),
            hooks: pool_hooks.to_vec(),
            request: req.clone(),
            start: start_mark(req.value(), now),
            id: ctx.next_id.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
        };
        if let Request::Drain(r) = &req {
            if !node.spec.unschedulable {
                if let Err(b) = ledger.check(i) {
                    if started_at(node, r).is_none() {
                        let v = start_mark(r, now);
                        if let Some(stored) =
                            annotate(store, &st.nodes.raw[i], &[(ann::DRAIN_STARTED, Some(&v))]).await?
                        {
                            st.nodes.put(stored);
                            track(&st.nodes, &mut st.asking, &name);
                        }
                    }
                    // The config the drain is for, not the request's token.
                    let msg = format!("the drain for {} waits: {b}", r.strip_prefix("drain-").unwrap_or(r));
                    lock(&ctx.last_error).insert(name.clone(), Holdup::Budget(b.to_string()));
                    ctx.events.emit(&Involved::node(&name), EventType::Normal, reasons::BUDGET_BLOCKED, &msg);
                    // Not a poll: whatever frees the budget (a node back in service, a budget
                    // edited or deleted) is an event, and every event runs a pass. Due again for
                    // the drain timeout, and before the standing Event would expire.
                    let refresh = lock(&ctx.backoffs).max_step.map_or(super::RESYNC, |m| m.min(super::RESYNC));
                    earliest(&mut wake, clock + refresh);
                    if let Some(at) = times_out {
                        earliest(&mut wake, at);
                    }
                    continue;
                }
                ledger.take(i);
                // The budget lets it go now: a mark made from here on must not blame it (a
                // hook's failure, recorded by its call, is kept).
                let mut last = lock(&ctx.last_error);
                if matches!(last.get(&name), Some(Holdup::Budget(_))) {
                    last.remove(&name);
                }
            }
            ctx.events.forget(&Involved::node(&name), reasons::BUDGET_BLOCKED);
        }
        // A failed call waits for its back-off; the drain timeout does not: the pass that marks
        // it is due on time.
        let due = lock(&ctx.backoffs).due(&name, &backoff_key(req.value(), pool_hooks));
        if let Some(due) = due.filter(|d| *d > clock) {
            earliest(&mut wake, due);
            if let Some(at) = times_out {
                earliest(&mut wake, at);
            }
            continue;
        }
        // Registered under the lock the task's end takes too: a task that ends at once finds
        // its entry.
        let mut running = lock(&ctx.inflight);
        let (id, request, hooks) = (job.id, job.request.value().to_string(), job.hooks.clone());
        let abort = tokio::spawn(job.run()).abort_handle();
        running.insert(name, Running { id, request, hooks, abort });
    }
    Ok(wake)
}

/// One drain or uncordon, from cordon to acknowledgement.
struct Job {
    store: Arc<dyn Store>,
    ctx: Ctx,
    node: String,
    /// The node as this pass saw it: the first compare-and-swap tries it, which is almost always
    /// the newest version (the pass runs on the event of the request), before reading the store.
    cached: Arc<Value>,
    pool: String,
    hooks: Vec<DrainHook>,
    request: Request,
    /// `aloft.dev/drainStarted` for this request, written with the cordon unless already there.
    start: String,
    /// Its [`Running::id`].
    id: u64,
}

impl Job {
    async fn run(self) {
        let result = match &self.request {
            Request::Drain(r) => self.drain(r).await,
            Request::Uncordon(r) => self.uncordon(r).await,
        };
        let acked = result.unwrap_or_else(|e| {
            tracing::warn!(node = %self.node, request = %self.request.value(), error = %e, "drain step failed; retrying");
            false
        });
        {
            let mut backoffs = lock(&self.ctx.backoffs);
            if acked {
                backoffs.succeeded(&self.node);
            } else {
                // Not answered (a hook failed, a write did not go through, or the request
                // changed meanwhile: then the pass forgets this back-off).
                let key = backoff_key(self.request.value(), &self.hooks);
                let due = backoffs.failed(&self.node, &key, Instant::now());
                tracing::debug!(node = %self.node, request = %self.request.value(), retry_in = ?due.saturating_duration_since(Instant::now()), "retrying later");
            }
        }
        {
            // Only its own entry: a task stopped as stale was replaced by another.
            let mut running = lock(&self.ctx.inflight);
            if running.get(&self.node).is_some_and(|r| r.id == self.id) {
                running.remove(&self.node);
            }
        }
        self.ctx.done.notify_one();
    }

    /// [`update_node`] of this task's node; what it wrote goes to [`Ctx::written`].
    async fn update(&self, cached: Option<&Value>, change: impl Fn(&mut Value) -> bool) -> Result<bool, StoreError> {
        let Some(stored) = update_node(&self.store, &self.node, cached, change).await? else { return Ok(false) };
        lock(&self.ctx.written).push(stored);
        Ok(true)
    }

    fn hook_request<'a>(&'a self, phase: Phase, request: &'a str) -> HookRequest<'a> {
        HookRequest { node: &self.node, pool: &self.pool, phase, request }
    }

    /// True when acknowledged.
    async fn drain(&self, r: &str) -> Result<bool, StoreError> {
        // Without hooks there is nothing between the cordon and the acknowledgement: one write.
        let acked = if self.hooks.is_empty() {
            self.update(Some(&self.cached), |n| acknowledge_drain(n, r)).await?
        } else {
            self.drain_with_hooks(r).await?
        };
        if acked {
            lock(&self.ctx.last_error).remove(&self.node);
            self.ctx.events.forget(&Involved::node(&self.node), reasons::DRAIN_HOOK_FAILED);
            self.ctx.events.forget(&Involved::node(&self.node), reasons::DRAIN_TIMEOUT);
            let called = match self.hooks.len() {
                0 => String::new(),
                1 => " (1 hook called)".to_string(),
                n => format!(" ({n} hooks called)"),
            };
            let msg = format!("cordoned and drained for {}{called}", r.strip_prefix("drain-").unwrap_or(r));
            // Each drain is an occurrence, not a standing decision: the same request drained
            // again (its update retried) is counted on the Event, as client-go counts repeats.
            self.ctx.events.forget(&Involved::node(&self.node), reasons::DRAINED);
            self.ctx.events.emit(&Involved::node(&self.node), EventType::Normal, reasons::DRAINED, &msg);
            tracing::info!(node = %self.node, request = %r, "drain acknowledged");
        }
        Ok(acked)
    }

    /// Cordon (recording when the drain started), call the hooks, acknowledge. True when
    /// acknowledged.
    async fn drain_with_hooks(&self, r: &str) -> Result<bool, StoreError> {
        let cordoned = self
            .update(Some(&self.cached), |n| {
                if pending(n).as_ref().map(Request::value) != Some(r) {
                    return false;
                }
                cordon_for_drain(n);
                let mark = n["metadata"]["annotations"].get(ann::DRAIN_STARTED).and_then(Value::as_str);
                if mark.and_then(|m| parse_start_mark(m, r)).is_none() {
                    set_annotations(n, &[(ann::DRAIN_STARTED, Some(&self.start))]);
                }
                // Before the first call: the uncordon calls these hooks again, wherever the node is.
                set_annotations(n, &[(ann::DRAIN_POOL, Some(&self.pool))]);
                true
            })
            .await?;
        if !cordoned {
            return Ok(false);
        }
        if let Err(e) = self.ctx.hooks.call_all(&self.hooks, &self.hook_request(Phase::Drain, r)).await {
            let msg = e.to_string();
            lock(&self.ctx.last_error).insert(self.node.clone(), Holdup::Hook(msg.clone()));
            // The Event says which call failed: a failing uncordon call is another Event, not a
            // count on the drain's.
            let event = format!("draining: {msg}");
            self.ctx.events.emit(&Involved::node(&self.node), EventType::Warning, reasons::DRAIN_HOOK_FAILED, &event);
            return Ok(false);
        }
        // The cordon above made the cached version stale.
        self.update(None, |n| acknowledge_drain(n, r)).await
    }

    /// True when acknowledged.
    async fn uncordon(&self, r: &str) -> Result<bool, StoreError> {
        if !cordoned_by_a_drain(&self.cached) {
            return self.answer_keeping_the_cordon(r).await;
        }
        // The hooks put the node back (e.g. into the load balancer): until every one has
        // succeeded it stays cordoned and counts as unavailable, and the request is retried as a
        // drain's is; past the pool's drain timeout it is marked as a drain would be.
        if let Err(e) = self.ctx.hooks.call_all(&self.hooks, &self.hook_request(Phase::Uncordon, r)).await {
            let msg = e.to_string();
            lock(&self.ctx.last_error).insert(self.node.clone(), Holdup::Hook(msg.clone()));
            let event = format!("uncordoning: {msg}");
            self.ctx.events.emit(&Involved::node(&self.node), EventType::Warning, reasons::DRAIN_HOOK_FAILED, &event);
            // When the uncordon started, for its timeout (the drain's mark went with its answer).
            self.update(Some(&self.cached), |n| {
                let mark = n["metadata"]["annotations"].get(ann::DRAIN_STARTED).and_then(Value::as_str);
                if pending(n).as_ref().map(Request::value) != Some(r)
                    || mark.and_then(|m| parse_start_mark(m, r)).is_some()
                {
                    return false;
                }
                set_annotations(n, &[(ann::DRAIN_STARTED, Some(&self.start))]);
                true
            })
            .await?;
            return Ok(false);
        }
        // Whether the written version kept a cordon made before the drain (the last try's say).
        let kept = std::sync::atomic::AtomicBool::new(false);
        let acked = self
            .update(Some(&self.cached), |n| {
                if pending(n).as_ref().map(Request::value) != Some(r) || !cordoned_by_a_drain(n) {
                    return false;
                }
                kept.store(end_drain(n, Some(r)), std::sync::atomic::Ordering::Relaxed);
                true
            })
            .await?;
        if acked {
            lock(&self.ctx.last_error).remove(&self.node);
            self.ctx.events.forget(&Involved::node(&self.node), reasons::DRAIN_HOOK_FAILED);
            self.ctx.events.forget(&Involved::node(&self.node), reasons::DRAIN_TIMEOUT);
            let kept = kept.load(std::sync::atomic::Ordering::Relaxed);
            if kept {
                let msg = super::uncordon::cordon_kept_message(Some(r));
                self.ctx.events.emit(&Involved::node(&self.node), EventType::Normal, reasons::CORDON_KEPT, &msg);
            }
            tracing::info!(node = %self.node, request = %r, cordon_kept = kept, "uncordon acknowledged");
        }
        Ok(acked)
    }
}

impl Job {
    /// Answers an uncordon request of a node this controller did not cordon (no drain answered,
    /// none under way): the answer without the uncordon and without the hooks. The cordon is
    /// someone else's (an admin's `kubectl cordon`): lifted at a node's request, the node read as
    /// available again and the pool took another node down in its place, and the hooks put a
    /// node into its load balancer that nobody had taken out.
    async fn answer_keeping_the_cordon(&self, r: &str) -> Result<bool, StoreError> {
        let cordoned = self.cached.pointer("/spec/unschedulable") == Some(&Value::Bool(true));
        let acked = self
            .update(Some(&self.cached), |n| {
                if pending(n).as_ref().map(Request::value) != Some(r) || cordoned_by_a_drain(n) {
                    return false;
                }
                mark_answered(n, r);
                true
            })
            .await?;
        if acked {
            lock(&self.ctx.last_error).remove(&self.node);
            if cordoned {
                let msg = format!(
                    "{r} answered and the node left cordoned: no drain cordoned it (uncordon it with kubectl uncordon)"
                );
                self.ctx.events.emit(&Involved::node(&self.node), EventType::Normal, reasons::CORDON_KEPT, &msg);
            }
            tracing::info!(node = %self.node, request = %r, cordoned, "uncordon answered; no drain of ours to end");
        }
        Ok(acked)
    }
}

/// Whether the node's cordon is a drain's of this controller: one answered (`lastAppliedDrain`
/// says `drain-…`), or one with hooks under way (its pool recorded with the cordon). Only such
/// a cordon is lifted at the node's request.
fn cordoned_by_a_drain(n: &Value) -> bool {
    let ann = crate::server::objects::at(n, &["metadata", "annotations"]);
    let get = |k: &str| ann.and_then(|a| a.get(k)).and_then(Value::as_str).unwrap_or("");
    get(ann::LAST_APPLIED_DRAIN).starts_with("drain-") || !get(ann::DRAIN_POOL).is_empty()
}

/// `<request>@<time>`, the value of `aloft.dev/drainStarted`. In milliseconds: a mark cut to the
/// second put the start up to a second early, and a 1-second drain timeout fired at once, before
/// the first hook call had a chance to fail (CI saw it 7 ms into a drain).
fn start_mark(request: &str, now: DateTime<Utc>) -> String {
    format!("{request}@{}", now.to_rfc3339_opts(chrono::SecondsFormat::Millis, true))
}

/// Cordon and acknowledge `r` in one edit (re-cordoning, in case someone uncordoned meanwhile);
/// false when `r` is no longer the node's pending request.
fn acknowledge_drain(n: &mut Value, r: &str) -> bool {
    if pending(n).as_ref().map(Request::value) != Some(r) {
        return false;
    }
    cordon_for_drain(n);
    // A drain made with the hooks is ended with them: no uncordon inside the Done report.
    mark_answered(n, r);
    true
}

/// `r` answered (`lastAppliedDrain`), and the marks of a request under way gone with it.
fn mark_answered(n: &mut Value, r: &str) {
    set_annotations(
        n,
        &[
            (ann::LAST_APPLIED_DRAIN, Some(r)),
            (ann::DRAIN_STARTED, None),
            (ann::DRAIN_FAILURE, None),
            (ann::UNCORDON_AT_DONE, None),
        ],
    );
}

/// Let `change` edit the node (false: nothing to do) and write it with compare-and-swap: first
/// from `cached` when given, then read fresh from the store after each lost race. The node as
/// written, when written.
async fn update_node(
    store: &Arc<dyn Store>,
    name: &str,
    cached: Option<&Value>,
    change: impl Fn(&mut Value) -> bool,
) -> Result<Option<Arc<Value>>, StoreError> {
    let key = Key::cluster(&NODE.store_key(), name);
    let mut first = cached.cloned();
    for _ in 0..10 {
        let current = match first.take() {
            Some(v) => Some(v),
            None => store.get(&key).await?.map(Stored::into_value),
        };
        let Some(mut node) = current else { return Ok(None) };
        let rev = revision_of(&node);
        if !change(&mut node) {
            return Ok(None);
        }
        match store.update(&key, node, rev).await {
            Ok(stored) => return Ok(Some(stored.object)),
            Err(StoreError::Conflict { .. }) => continue,
            Err(StoreError::NotFound(_)) => return Ok(None),
            Err(e) => return Err(e),
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn requests() {
        let n = |want: &str, done: &str| json!({"metadata": {"annotations": {ann::DESIRED_DRAIN: want, ann::LAST_APPLIED_DRAIN: done}}});
        assert_eq!(pending(&n("drain-r2", "")), Some(Request::Drain("drain-r2".into())));
        assert_eq!(pending(&n("uncordon-r2", "drain-r2")), Some(Request::Uncordon("uncordon-r2".into())));
        assert_eq!(pending(&n("drain-r2", "drain-r2")), None);
        assert_eq!(pending(&n("bogus", "")), None);
        assert_eq!(pending(&json!({"metadata": {}})), None);
        // The pass reads the same requests from the cached facts, and the event filter agrees.
        for (want, done) in
            [("drain-r2", ""), ("uncordon-r2", "drain-r2"), ("drain-r2", "drain-r2"), ("bogus", ""), ("", "")]
        {
            let raw = n(want, done);
            let facts = NodeFacts::of(&serde_json::from_value(raw.clone()).unwrap());
            assert_eq!(request_of(&facts), pending(&raw), "{want:?} answered {done:?}");
            assert_eq!(asks(&raw), pending(&raw).is_some(), "{want:?} answered {done:?}");
        }
        assert!(
            !asks(&json!({"metadata": {}})) && !asks(&json!({"metadata": {"annotations": {ann::DESIRED_DRAIN: 3}}}))
        );
    }

    /// MCO's requeue of a failed drain (1 min, every 5 min after 10 min), with quick first steps.
    #[test]
    fn a_failed_call_backs_off_as_mcos_drain_controller() {
        let s = Duration::from_secs;
        let steps: Vec<u64> = (1..=8).map(|n| retry_after(n, s(30)).as_secs()).collect();
        assert_eq!(steps, [2, 4, 8, 16, 32, 60, 60, 60]);
        assert_eq!(retry_after(u32::MAX, s(599)), s(60), "no overflow, capped at a minute");
        assert_eq!(retry_after(20, s(600)), s(300), "every 5 min after failing for 10 min");
        assert_eq!(retry_after(1, s(3600)), s(300));
    }

    /// The back-off grows per failure of the same request and starts afresh after a success or
    /// for another request; it is never longer than the Event refresh allows.
    #[test]
    fn the_back_off_is_per_node_and_request() {
        let t0 = Instant::now();
        let s = Duration::from_secs;
        let mut b = Backoffs::default();
        assert_eq!(b.failed("n1", "drain-r1", t0), t0 + s(2));
        assert_eq!(b.failed("n1", "drain-r1", t0 + s(2)), t0 + s(6));
        assert_eq!(b.failed("n2", "drain-r1", t0 + s(2)), t0 + s(4), "another node starts at the first step");
        assert_eq!(b.due("n1", "drain-r1"), Some(t0 + s(6)));
        assert_eq!(b.due("n1", "uncordon-r1"), None, "a new request is not held back");
        assert_eq!(b.due("n1", "drain-r1"), None, "and the old back-off is gone");
        assert_eq!(b.failed("n1", "uncordon-r1", t0 + s(10)), t0 + s(12));
        b.succeeded("n1");
        assert_eq!(b.due("n1", "uncordon-r1"), None);
        assert_eq!(b.failed("n1", "uncordon-r1", t0 + s(20)), t0 + s(22), "afresh after a success");
        // Failing for 10 min: every 5 min.
        if let Some(f) = b.nodes.get_mut("n1") {
            f.since = t0;
        }
        assert_eq!(b.failed("n1", "uncordon-r1", t0 + s(600)), t0 + s(900));
        let mut capped = Backoffs { max_step: Some(s(3)), ..Default::default() };
        capped.failed("n1", "drain-r1", t0);
        assert_eq!(capped.failed("n1", "drain-r1", t0), t0 + s(3));
    }

    #[test]
    fn drain_start_and_wording() {
        let node: Node = serde_json::from_value(
            json!({"metadata": {"name": "a", "annotations": {ann::DRAIN_STARTED: "drain-r2@2026-01-01T00:00:00Z"}}}),
        )
        .unwrap();
        assert_eq!(started_at(&node, "drain-r2").map(|t| t.to_rfc3339()), Some("2026-01-01T00:00:00+00:00".into()));
        assert_eq!(started_at(&node, "drain-r3"), None, "a start for another request does not count");
        // The mark keeps the start to the millisecond: read back, it is not a second early.
        let t = DateTime::parse_from_rfc3339("2026-01-01T00:00:00.999Z").unwrap().with_timezone(&Utc);
        let mark = start_mark("drain-r2", t);
        assert_eq!(mark, "drain-r2@2026-01-01T00:00:00.999Z");
        assert_eq!(parse_start_mark(&mark, "drain-r2"), Some(t));
        assert_eq!(humanize(3600), "1 hour");
        assert_eq!(humanize(120), "2 minutes");
        assert_eq!(humanize(5), "5 seconds");
        assert_eq!(humanize(60), "1 minute");
        assert_eq!(humanize(1), "1 second");
        assert_eq!(humanize(7200), "2 hours");
    }

    /// A drain a task of one pass is granting holds the budget in the next pass, before the
    /// watch brings the task's write back (this test never feeds the watch): a second node's
    /// request is held back by a `maxUnavailable: 1` budget. Each pass used to count only what
    /// its watch had seen, and answered both.
    #[tokio::test]
    async fn a_drain_being_granted_holds_the_budget_for_the_next_pass() {
        use crate::resources::NODE_DISRUPTION_BUDGET;
        use crate::store::SqliteStore;
        let dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn Store> = Arc::new(SqliteStore::open(&dir.path().join("s.db")).unwrap());
        let node_key = |n: &str| Key::cluster(&NODE.store_key(), n);
        for n in ["a", "b"] {
            let node = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": n, "labels": {"app": "web"},
                "annotations": {ann::STATE: "Done"}},
                "status": {"conditions": [{"type": "Ready", "status": "True"}]}});
            store.create(&node_key(n), node).await.unwrap();
        }
        let ndb = json!({"apiVersion": "aloft.dev/v1", "kind": "NodeDisruptionBudget", "metadata": {"name": "web"},
            "spec": {"selector": {"matchLabels": {"app": "web"}}, "maxUnavailable": 1}});
        store.create(&Key::cluster(&NODE_DISRUPTION_BUDGET.store_key(), "web"), ndb).await.unwrap();
        let feed = super::super::FleetFeed::start(&store).await.unwrap();
        let mut st = State { nodes: feed.nodes, pools: feed.pools, budgets: feed.budgets, asking: BTreeSet::new() };
        st.track_all();
        let ctx = Ctx {
            events: Recorder::new("test", store.clone(), Duration::from_secs(3600)),
            hooks: Hooks::new().unwrap(),
            inflight: Arc::default(),
            next_id: Arc::default(),
            last_error: Arc::default(),
            backoffs: Arc::default(),
            done: Arc::default(),
            written: Arc::default(),
        };
        let mut handoffs = HashMap::new();
        // A request, as the watch brings it to the cache.
        let ask = |name: &'static str| {
            let store = store.clone();
            async move {
                let key = node_key(name);
                let mut node = store.get(&key).await.unwrap().unwrap().into_value();
                node["metadata"]["annotations"][ann::DESIRED_DRAIN] = json!("drain-r2");
                let rev = revision_of(&node);
                store.update(&key, node, rev).await.unwrap().object
            }
        };
        let a = ask("a").await;
        st.nodes.put(a);
        track(&st.nodes, &mut st.asking, "a");
        pass(&store, &ctx, &mut st, &mut handoffs).await.unwrap();
        let b = ask("b").await;
        st.nodes.put(b);
        track(&st.nodes, &mut st.asking, "b");
        pass(&store, &ctx, &mut st, &mut handoffs).await.unwrap();
        // Both tasks (if any was started for b) have ended.
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while !lock(&ctx.inflight).is_empty() {
            assert!(std::time::Instant::now() < deadline, "a drain task did not end");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let acked = |n: &Value| n["metadata"]["annotations"].get(ann::LAST_APPLIED_DRAIN).cloned();
        let a = store.get(&node_key("a")).await.unwrap().unwrap().into_value();
        let b = store.get(&node_key("b")).await.unwrap().unwrap().into_value();
        assert_eq!(acked(&a), Some(json!("drain-r2")), "{a}");
        assert_eq!(acked(&b), None, "b drained while a was: {b}");
        assert_ne!(b.pointer("/spec/unschedulable"), Some(&json!(true)), "{b}");

        // Three requests found by one pass (a coordinator started with them pending, or a
        // pool whose hooks drain): the pass counts each drain it grants before judging the
        // next, so one of them goes.
        for n in ["c", "d", "e"] {
            let node = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": n, "labels": {"app": "api"},
                "annotations": {ann::STATE: "Done", ann::DESIRED_DRAIN: "drain-r2"}},
                "status": {"conditions": [{"type": "Ready", "status": "True"}]}});
            store.create(&node_key(n), node).await.unwrap();
        }
        let ndb = json!({"apiVersion": "aloft.dev/v1", "kind": "NodeDisruptionBudget", "metadata": {"name": "api"},
            "spec": {"selector": {"matchLabels": {"app": "api"}}, "maxUnavailable": 1}});
        store.create(&Key::cluster(&NODE_DISRUPTION_BUDGET.store_key(), "api"), ndb).await.unwrap();
        let feed = super::super::FleetFeed::start(&store).await.unwrap();
        let mut st = State { nodes: feed.nodes, pools: feed.pools, budgets: feed.budgets, asking: BTreeSet::new() };
        st.track_all();
        pass(&store, &ctx, &mut st, &mut handoffs).await.unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while !lock(&ctx.inflight).is_empty() {
            assert!(std::time::Instant::now() < deadline, "a drain task did not end");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let mut granted = Vec::new();
        for n in ["c", "d", "e"] {
            let v = store.get(&node_key(n)).await.unwrap().unwrap().into_value();
            if acked(&v).is_some() || v.pointer("/spec/unschedulable") == Some(&json!(true)) {
                granted.push(n);
            }
        }
        assert_eq!(granted.len(), 1, "one drain of a maxUnavailable 1 budget in one pass: {granted:?}");
    }
}
