//! The node controller: for every pool, move nodes to the pool's rendered config within
//! `maxUnavailable`, the NodeDisruptionBudgets and the pool's rollout policy (the decision is
//! [`super::pick::plan`], a pure function of the stored objects), ask waiting nodes to pre-stage
//! the target, record an Event for every decision change, and compute the pool's status (MCO's
//! counts and Updated / Updating / NodeDegraded / Degraded conditions with MCO's messages, plus
//! aloft's CanarySoaking / CircuitBroken / NodeDrainTimeout / BudgetBlocked and `status.rollout`).

use super::budget::{self, Ledger};
use super::cache::Cache;
use super::config_name::ConfigName;
use super::events::{reasons, EventType, Involved, Recorder};
use super::maintenance::WindowState;
use super::passes::Passes;
use super::pick::{self, names_text, FirstConfig, PoolPlan, Snapshot, Wait};
use super::pools::{NodeFacts, NodeHot};
use super::rollout_policy::HoldReason;
use super::uncordon::uncordon_edit;
use super::{annotate, set_annotations, write_node};
use crate::resources::{MACHINE_CONFIG, MACHINE_CONFIG_POOL, NODE, NODE_DISRUPTION_BUDGET};
use crate::server::objects;
use crate::store::{revision_of, Key, Store, StoreError, Stored};
use aloft_api::annotations as ann;
use aloft_api::machineconfig::conditions as cond;
use aloft_api::meta::{find_condition, set_condition};
use aloft_api::{
    Condition, MachineConfigPool, MachineConfigPoolStatus, Node, NodeDisruptionBudget, NodeDisruptionBudgetStatus,
    RolloutPhase,
};
use serde::Deserialize;
use serde_json::Value;
use std::sync::Arc;
use std::time::Duration;

/// At most this many pre-stage annotation writes per pass, so that on a big fleet a new target's
/// pre-staging never delays the next picks by more than a moment; the pass then asks for another
/// at once for the rest.
const PRESTAGE_WRITES_PER_PASS: usize = 200;

/// Watch nodes, pools and budgets; reconcile after every batch of events, from an in-memory
/// cache that each event (and each of the controller's own writes) updates: a batch costs the
/// objects that changed, not a re-read of the whole fleet. `events` records this controller's
/// Events (see [`super::spawn_all`] for where their writes run); `passes` counts and times its
/// passes.
pub async fn run(store: Arc<dyn Store>, events: Recorder, passes: Passes) {
    loop {
        if let Err(e) = follow(&store, &events, &passes).await {
            tracing::warn!(controller = "node", error = %e, "controller restarting");
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

struct State {
    nodes: Cache<Node>,
    pools: Cache<MachineConfigPool>,
    budgets: Cache<NodeDisruptionBudget>,
    /// The layout and the (nodes, pools) layout versions it was built at.
    layout: Option<((u64, u64), pick::Layout)>,
    /// Rendered config name -> its osImageURL (None: not in the store, e.g. collected; such a
    /// node is asked to pre-stage, the safe side). Rendered configs are named by their content,
    /// so an entry never goes stale.
    os_images: std::collections::HashMap<String, Option<String>>,
    /// Configs nodes reported running since the last pass, to look up in `os_images` (every
    /// node's at the first pass): a pass must not read the whole fleet for the few new names.
    os_unknown: Option<std::collections::HashSet<String>>,
    /// The pools' status write under way, if any (see [`write_statuses`]).
    status_job: Option<tokio::task::JoinHandle<Vec<Arc<Value>>>>,
    /// A pass skipped the statuses because the last write was under way: how soon to look
    /// again (doubling, from [`STATUS_RETRY`] up to a second, while it stays under way).
    status_retry: Option<Duration>,
    /// When the pools' statuses were last worked out (see [`STATUS_EVERY`]).
    status_at: Option<tokio::time::Instant>,
    /// The budgets' status write under way, if any, and when their statuses were last worked
    /// out (see [`budget_statuses`]).
    budget_job: Option<tokio::task::JoinHandle<Vec<Arc<Value>>>>,
    budget_status_at: Option<tokio::time::Instant>,
    /// Budget name -> the status last worked out for it (written, or found stored already). A
    /// budget event with another status is someone else's write: a budget's status asks for no
    /// pass (it changes no decision), so without this a client's status write stood until the
    /// next resync.
    budget_computed: std::collections::HashMap<String, Value>,
    /// The nodes whose events arrived since the last pass, the only ones [`release`] needs to
    /// look at (a node becomes due by its own Done report); None: look at every node (the first
    /// pass, timers, pool or budget changes, a changed layout, a lost write).
    touched: Option<Vec<usize>>,
}

impl State {
    /// The node controller's state over the fleet's caches, nothing worked out yet.
    fn new(nodes: Cache<Node>, pools: Cache<MachineConfigPool>, budgets: Cache<NodeDisruptionBudget>) -> State {
        State {
            nodes,
            pools,
            budgets,
            layout: None,
            os_images: Default::default(),
            os_unknown: None,
            status_job: None,
            status_retry: None,
            status_at: None,
            budget_job: None,
            budget_status_at: None,
            budget_computed: Default::default(),
            touched: None,
        }
    }

    /// The next wait for the status write a pass skipped.
    fn retry_statuses_later(&mut self) -> Duration {
        let next = self.status_retry.map_or(STATUS_RETRY, |d| (d * 2).min(Duration::from_secs(1)));
        self.status_retry = Some(next);
        next
    }
}

async fn follow(store: &Arc<dyn Store>, events: &Recorder, passes: &Passes) -> Result<(), StoreError> {
    let super::FleetFeed { keys, events: mut stream, nodes, pools, budgets } = super::FleetFeed::start(store).await?;
    let mut st = State::new(nodes, pools, budgets);
    let mut last = passes.time(0, reconcile(store, &mut st, events)).await?;
    let mut due = tokio::time::Instant::now() + last.wake;
    loop {
        let idle = due.saturating_duration_since(tokio::time::Instant::now());
        let Some(batch) = super::next_batch_ready(&mut stream, idle).await? else { break };
        // Our own finished status write first: its events are then no news.
        let status_free = collect_statuses(&mut st);
        collect_budget_statuses(&mut st);
        // An empty batch is a timer: a soak ending, the resync (always a pass), or a look at
        // whether the status write a pass had to skip is over (a pass once it is).
        let timer = batch.is_empty();
        if timer && !status_free && st.status_retry.is_some() {
            due = tokio::time::Instant::now() + st.retry_statuses_later();
            continue;
        }
        let mut changed = timer || last.again || (st.status_retry.is_some() && status_free);
        if timer {
            st.touched = None;
        }
        let mut foreign_budget_status = false;
        for ev in &batch {
            if ev.kind == crate::store::EventType::Deleted {
                // What was said about a deleted Node or pool holds nothing back about a new one
                // of its name (a host replaced under its name).
                let kind = if ev.key.resource == keys[0] {
                    Some("Node")
                } else if ev.key.resource == keys[1] {
                    Some("MachineConfigPool")
                } else {
                    None
                };
                if let Some(kind) = kind {
                    events.forget_object(kind, &ev.key.name);
                }
            }
            changed |= if ev.key.resource == keys[0] {
                note_current_config(&mut st, ev);
                let relevant = st.nodes.apply(ev);
                if let (Some(t), Some(i)) = (st.touched.as_mut(), st.nodes.index_of(&ev.key.name)) {
                    t.push(i);
                }
                relevant
            } else {
                let relevant = if ev.key.resource == keys[1] {
                    st.pools.apply(ev)
                } else {
                    foreign_budget_status |= ev.kind != crate::store::EventType::Deleted
                        && ev.object.get("status") != st.budget_computed.get(&ev.key.name);
                    st.budgets.apply(ev)
                };
                if relevant {
                    st.touched = None;
                }
                relevant
            };
        }
        // Events that change nothing a decision reads (the controller's own writes, already
        // in the cache; a node's drain handshake) cost no pass: on a big fleet most events are
        // such, and every pass reads the whole fleet.
        if changed {
            last = passes.time(batch.len(), reconcile(store, &mut st, events)).await?;
            due = tokio::time::Instant::now() + last.wake;
        } else if foreign_budget_status {
            // Put the computed status back within the status interval, as a pool's is (a
            // budget's status is what drains and picks are said to check).
            if let Some(left) = budget_statuses(store, &mut st) {
                due = due.min(tokio::time::Instant::now() + left);
            }
        }
    }
    Ok(())
}

/// One pass: decide from the cache, write the picks first (with the uncordons they make room
/// for: they are what the fleet waits for), then events, statuses and pre-staging. Returns how
/// long the controller may sleep without events (until a soak ends, at most [`super::RESYNC`])
/// and whether a write lost a race.
async fn reconcile(store: &Arc<dyn Store>, st: &mut State, events: &Recorder) -> Result<Pass, StoreError> {
    let now = chrono::Utc::now();
    let version = (st.nodes.layout_version, st.pools.layout_version);
    if st.layout.as_ref().is_none_or(|(v, _)| *v != version) {
        st.layout = Some((version, pick::Layout::of(&st.pools.typed, &st.nodes.typed)));
        st.touched = None;
    }
    learn_os_images(store, st).await?;
    // Nodes Done on the config they were drained for go back into service, and the plan below
    // already counts them so: their slots are refilled in the same write. (Nothing between here
    // and that write may fail: the cache holds the uncordons before the store does.)
    let released = release(st);
    st.touched = Some(Vec::new());
    let os = &st.os_images;
    let same_os = |current: &str, target: &str| match (os.get(current), os.get(target)) {
        (Some(Some(a)), Some(Some(b))) => a == b,
        _ => false,
    };
    let empty = pick::Layout::default();
    let plans = pick::plan_with_layout(
        Snapshot { nodes: &st.nodes.typed, pools: &st.pools.typed, budgets: &st.budgets.typed },
        &st.nodes.derived,
        &st.nodes.hot,
        st.layout.as_ref().map_or(&empty, |(_, l)| l),
        &same_os,
        now,
    );
    let mut wake = super::RESYNC;
    let picks: Vec<(usize, usize)> =
        plans.iter().enumerate().flat_map(|(k, pp)| pp.picks.iter().map(move |&i| (k, i))).collect();
    // What to write, by node: the uncordons first, then the picks (a node can be both: freed
    // from its last target and picked for a newer one, in one write).
    let mut order: Vec<usize> = released.iter().map(|(i, _, _)| *i).collect();
    let mut edits: std::collections::HashMap<usize, Value> =
        order.iter().map(|&i| (i, Value::clone(&st.nodes.raw[i]))).collect();
    // The plans some of whose picks were not cordoned (sent to the config they run), for the
    // pick Event's words.
    let mut not_cordoned = vec![false; plans.len()];
    for &(k, i) in &picks {
        let pool = &st.pools.typed[plans[k].pool];
        let v = edits.entry(i).or_insert_with(|| {
            order.push(i);
            Value::clone(&st.nodes.raw[i])
        });
        // A node picked for the config it runs already (a revert, a node enrolled again) has
        // nothing to apply: no cordon, which nothing would end. Unless the drain of the update
        // it failed still holds it: then the pick's own answer and grant are what its Done
        // report ends (the old answer, for the failed config, would hold it for good).
        let f = &st.nodes.derived[i];
        let nothing_to_do = f.current == *plans[k].pick_config() && !f.cordoned;
        not_cordoned[k] |= nothing_to_do;
        pick_edit(v, plans[k].pick_config(), drains_at_pick(pool) && !nothing_to_do);
    }
    let writes: Vec<(usize, Value)> = order.iter().filter_map(|i| edits.remove(i).map(|v| (*i, v))).collect();
    let stored = if released.is_empty() {
        // Independent picks: concurrent writes share one commit of the store, and a node that
        // changed meanwhile is decided again in the next pass.
        let raw = &st.nodes.raw;
        futures::future::try_join_all(writes.into_iter().map(|(i, v)| {
            let stored = &raw[i];
            async move { write_node(store, stored, v).await.map(|r| (i, r)) }
        }))
        .await?
    } else {
        // A freed slot must never be refilled before it is freed: the uncordons (with the picks
        // of nodes that are both) are written first, the other picks only once all of them
        // are, in one call on the rollout's critical path instead of two passes (the
        // uncordon's, then the next pick's after its event came back). `order` has the
        // released nodes first.
        let mut first: Vec<crate::store::CasWrite> = writes
            .into_iter()
            .map(|(i, v)| {
                let raw = &st.nodes.raw[i];
                (Key::cluster(&NODE.store_key(), objects::name_of(raw)), v, revision_of(raw))
            })
            .collect();
        let then = first.split_off(released.len());
        // An error (not a lost race) ends this controller's run: it starts again from a fresh
        // read of the fleet, which has whatever was written.
        let outcomes = store.update_in_order(first, then).await?;
        // A write not made goes back to what is stored: the next pass decides again, from the
        // newer version that made it fail (its event is already queued).
        for ((_, stored, _), outcome) in released.iter().zip(&outcomes) {
            if outcome.is_none() {
                tracing::debug!(node = %objects::name_of(stored), "an uncordon lost a race; deciding again");
                st.nodes.put(stored.clone());
                st.touched = None;
            }
        }
        order.iter().copied().zip(outcomes.into_iter().map(|o| o.map(|s| s.object))).collect()
    };
    let picked: std::collections::HashMap<usize, usize> = picks.iter().map(|&(k, i)| (i, k)).collect();
    // The nodes this pass moved to each plan's pick config (by plan), for its Event.
    let mut targeted: Vec<Vec<String>> = vec![Vec::new(); plans.len()];
    let mut again = false;
    for (i, v) in stored {
        let Some(v) = v else {
            again = true;
            continue;
        };
        st.nodes.put(v);
        let node_name = st.nodes.typed[i].metadata.name.clone();
        if let Some(&(_, _, how)) = released.iter().find(|(r, _, _)| *r == i) {
            log_release(events, &node_name, &st.nodes.derived[i], how);
        }
        let Some(&k) = picked.get(&i) else { continue };
        let pool = &st.pools.typed[plans[k].pool];
        let pool_name = &pool.metadata.name;
        tracing::debug!(pool = %pool_name, node = %node_name, config = %plans[k].pick_config(), "node picked for update");
        targeted[k].push(node_name);
    }
    for pp in &plans {
        // From the soak, not the wait: a paused pool's nodes wait for the pause, and the soak's
        // end still changes its condition.
        if let Some(HoldReason::Soaking { until: Some(until), .. }) = &pp.soak {
            let left = (*until - now).to_std().unwrap_or_default() + Duration::from_millis(100);
            wake = wake.min(left);
        }
        if let Some(left) = window_wake(pp, now) {
            wake = wake.min(left);
        }
    }
    // While the last statuses are being written, none are computed (the next pass does, from
    // the pools as written).
    let status_free = collect_statuses(st);
    // While nodes wait for a slot, more passes follow at once (each freed slot brings one):
    // statuses are worked out at most every STATUS_EVERY then, not on the critical path of
    // every pick. Once nothing waits, every pass does (the pool turns Updated without delay).
    let waiting = plans.iter().any(|pp| matches!(pp.wait, Some(Wait::MaxUnavailable { .. })));
    // One reading of the clock: two could straddle STATUS_EVERY, and the subtraction of the
    // second would underflow (it did, and stopped the controllers mid-rollout).
    let throttled = st.status_at.filter(|_| waiting).and_then(|t| status_wait(t.elapsed()));
    let status_due = status_free && throttled.is_none();
    let status_of = |pp: &PoolPlan| {
        let pairs: Vec<Member> =
            pp.members.iter().map(|&i| (&st.nodes.typed[i], &st.nodes.derived[i], &st.nodes.hot[i])).collect();
        let pool = &st.pools.typed[pp.pool];
        (pp.pool, compute_status(pool, &pairs, &pp.target, pp.membership_error.as_ref(), Some(pp)))
    };
    let statuses: Vec<(usize, MachineConfigPoolStatus)> =
        if status_due { plans.iter().map(status_of).collect() } else { Vec::new() };
    let mut prestage = Vec::new();
    for pp in &plans {
        for (i, want) in &pp.prestage {
            if prestage.len() >= PRESTAGE_WRITES_PER_PASS {
                // The rest in the next pass, at once (our own writes' events start none).
                wake = Duration::ZERO;
                break;
            }
            // Picked nodes lost the annotation with their pick.
            let facts = &st.nodes.derived[*i];
            let have = (!facts.prestage.is_empty()).then_some(facts.prestage.as_str());
            if have == want.as_deref() || (want.is_some() && facts.desired == pp.target) {
                continue;
            }
            prestage.push((*i, want.clone()));
        }
    }
    for (k, names) in targeted.iter().enumerate().filter(|(_, n)| !n.is_empty()) {
        let pool = &st.pools.typed[plans[k].pool];
        // One line per pass and pool (each node's at debug): a line is a write to the journal,
        // and a 10,000-node rollout wrote 10,000 of them from the thread that refills slots.
        let config = plans[k].pick_config();
        tracing::info!(pool = %pool.metadata.name, config = %config, count = names.len(),
            nodes = %names_text(names), "nodes picked for update");
        let mut msg = set_target_message(names, config, drains_at_pick(pool) && !not_cordoned[k]);
        if let Some(fc) = &plans[k].first_config {
            msg.push_str(&first_config_why(fc, &plans[k].target));
        }
        events.emit(&Involved::pool(&pool.metadata.name), EventType::Normal, reasons::SET_DESIRED_CONFIG, &msg);
    }
    for pp in &plans {
        record_waits(events, &st.pools.typed[pp.pool].metadata.name, pp, &st.nodes.typed, &st.nodes.hot);
        record_selector(events, &st.pools.typed[pp.pool]);
    }
    if plans.iter().any(|pp| pp.resume_unrecorded) {
        // Its picks wait for the status that records the resume (being written, or written
        // in this pass); no event of that write brings the next pass. Every STATUS_EVERY: a
        // timer's pass reads the whole fleet, and a resume is a person's, not the fleet's.
        wake = wake.min(STATUS_EVERY);
    }
    if let (true, Some(left)) = (status_free, throttled) {
        wake = wake.min(left);
    } else if status_free {
        st.status_retry = None;
        st.status_at = Some(tokio::time::Instant::now());
        for (k, new) in &statuses {
            record_progress(events, &st.pools.typed[*k], new);
        }
        write_statuses(store, st, statuses);
    } else {
        wake = wake.min(st.retry_statuses_later());
    }
    if let Some(left) = budget_statuses(store, st) {
        wake = wake.min(left);
    }
    // Pre-staging requests at once, so that they share one commit.
    let raw = &st.nodes.raw;
    let prestaged =
        futures::future::try_join_all(prestage.iter().map(|(i, want)| async move {
            annotate(store, &raw[*i], &[(ann::PRESTAGE_CONFIG, want.as_deref())]).await
        }))
        .await?;
    for v in prestaged.into_iter().flatten() {
        st.nodes.put(v);
    }
    Ok(Pass { wake, again })
}

/// Most node names a `SetDesiredConfig` Event lists.
const TARGETED_NAMES: usize = 50;

/// The pass's pick Event, in MCO's words ("Targeted node <node> to <config>", "Set target for <n>
/// nodes to <config>"), naming the nodes (the first [`TARGETED_NAMES`]) where MCO gives only the
/// count. One Event per pass and pool, on the pool, as MCO records it: one per node was a fifth
/// of the store's writes in a rollout, and a 10,000-node pool's rollout left 10,000 Events.
fn set_target_message(names: &[String], target: &str, cordoned: bool) -> String {
    let how = if cordoned { ", cordoned for the drain" } else { "" };
    match names {
        [one] => format!("Targeted node {one} to {target}{how}"),
        _ if names.len() <= TARGETED_NAMES => {
            format!("Set target for {} nodes to {target}{how}: {}", names.len(), names.join(", "))
        }
        _ => format!(
            "Set target for {} nodes to {target}{how}: {}, and {} more",
            names.len(),
            names[..TARGETED_NAMES].join(", "),
            names.len() - TARGETED_NAMES
        ),
    }
}

/// Why a held pool's pick got a config at all, and which one: the words added to its
/// `SetDesiredConfig` Event (the pool is paused, and a user reading "Targeted node" would take it
/// for the pause being ignored).
fn first_config_why(fc: &FirstConfig, target: &ConfigName) -> String {
    let which = if fc.config == *target {
        "the pool's target".to_string()
    } else {
        format!("the config the pool's nodes run (status.configuration), not {target}, which no node runs yet")
    };
    format!(
        "; it had no config, and while {} a node with none gets what the machine-config-server serves: {which}",
        fc.held
    )
}

/// What a pass leaves for the next one.
struct Pass {
    /// How long the controller may sleep without events.
    wake: Duration,
    /// A write lost a race: decide again after the next events, even if they change nothing a
    /// decision reads (they are what the write lost to).
    again: bool,
}

/// Whether this pool's nodes are cordoned and their drain acknowledged in the write that picks
/// them. Without drain hooks a drain is a cordon and nothing else, and the pick already checked
/// maxUnavailable and every NodeDisruptionBudget: the agent's drain request then finds its
/// answer waiting, instead of waiting for a commit and a watch event of the drain controller.
/// With hooks the drain controller calls them first, on the agent's request.
fn drains_at_pick(pool: &MachineConfigPool) -> bool {
    pool.spec.drain.as_ref().is_none_or(|d| d.hooks.is_empty())
}

/// Say what [`release`] did once it is written: a cordon kept (someone else's, made before the
/// drain; see `uncordon::end_drain`) is an Event, as the drain controller's is.
fn log_release(events: &Recorder, node: &str, f: &NodeFacts, how: Release) {
    let (why, kept) = match how {
        Release::Ended { why, kept } => (why, kept),
        Release::Cleared => {
            tracing::info!(node = %node, config = %f.current, "cleared what a drain for another config left on a node uncordoned since");
            return;
        }
        Release::AskUncordon => {
            tracing::info!(node = %node, config = %f.current, "Done on a config its drain was not for; its uncordon asked for, through the hooks that drained it");
            return;
        }
    };
    if kept {
        tracing::info!(node = %node, config = %f.current, "drain ended {why}; the node stays cordoned, as it was before its drain");
        let answer = f.done().then(|| format!("uncordon-{}", f.current));
        let msg = super::uncordon::cordon_kept_message(answer.as_deref());
        events.emit(&Involved::node(node), EventType::Normal, reasons::CORDON_KEPT, &msg);
    } else {
        tracing::info!(node = %node, config = %f.current, "uncordoned {why}");
    }
}

/// How [`release`] ends a node's drain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Release {
    /// The drain ended, `why`; `kept`: a cordon made before it stays.
    Ended { why: &'static str, kept: bool },
    /// Done on a config its drain was not for ([`NodeFacts::left_by_an_older_drain`]), drained
    /// without hooks and uncordoned by hand since: only the drain's answer is cleared.
    Cleared,
    /// The same, drained through hooks: its uncordon asked for (`uncordon-<current>`), which
    /// the drain controller answers through the hooks that drained it (and lifts the cordon,
    /// if it still stands). The node is unavailable until then.
    AskUncordon,
}

/// Uncordon, in the cache, every node Done on the config it was drained for
/// ([`NodeFacts::uncordon_due`]; in a pool with drain hooks only when the drain was the pick's
/// and nobody asked for it), that failed before the drain its pick made
/// ([`NodeFacts::failed_before_drain`]), or that is Done on a config its drain was not for
/// ([`NodeFacts::left_by_an_older_drain`]; a drain made through hooks gets its uncordon asked
/// for instead); returns them with their stored versions (what the write compares
/// against, and what goes back into the cache if it fails).
fn release(st: &mut State) -> Vec<(usize, Arc<Value>, Release)> {
    let Some((_, layout)) = &st.layout else { return Vec::new() };
    let facts = &st.nodes.derived;
    let touched = st.touched.as_mut().map(|t| {
        t.sort_unstable();
        t.dedup();
        &*t
    });
    // Every pool's members, and the nodes in no pool (left by an update, or placed in two
    // custom pools): a drain of ours ends on them too, as MCO's daemon ends every update with an
    // uncordon. Their drains at the pick were made without hooks (one made with hooks names its
    // pool in `aloft.dev/drainPool`, and ends with them).
    let groups = st.pools.typed.iter().map(|p| (drains_at_pick(p), layout.members_of(&p.metadata.name)));
    let due: Vec<usize> = groups
        .chain(std::iter::once((true, layout.unpooled())))
        .flat_map(|(hookless, members)| {
            // Members are in node order: a touched node is looked up, not the whole pool read.
            let look: Box<dyn Iterator<Item = usize>> = match touched {
                Some(t) => Box::new(t.iter().copied().filter(|i| members.binary_search(i).is_ok())),
                None => Box::new(members.iter().copied()),
            };
            look.filter(move |&i| {
                let f = &facts[i];
                // With hooks, the drain controller answers the agent's uncordon request (it calls
                // the hooks first). A drain made with hooks (of this pool or one the node has
                // left) ends with them, in the drain controller. A drain the pick made stands
                // until Done even when hooks come to the pool before the node asks for it: its
                // agent may have gone on from that answer already (it reads it with the pick, and
                // an OS download can come between), and taking it back uncordoned a node being
                // disrupted, the hooks called after the fact.
                let made_with_hooks = !f.drain_pool.is_empty();
                (f.uncordon_due() && !made_with_hooks && (hookless || f.drain_request.is_empty()))
                    || f.failed_before_drain()
                    || f.left_by_an_older_drain()
            })
        })
        .collect();
    due.into_iter()
        .map(|i| {
            let stored = st.nodes.raw[i].clone();
            let mut next = Value::clone(&stored);
            let facts = &st.nodes.derived[i];
            let how = if facts.uncordon_due() {
                Release::Ended { why: "after Done", kept: uncordon_edit(&mut next, &facts.current) }
            } else if facts.failed_before_drain() {
                // A retry asks for its drain again.
                Release::Ended { why: "after failing before its drain", kept: undo_drain_edit(&mut next) }
            } else if facts.drain_pool.is_empty() {
                let kept = uncordon_edit(&mut next, &facts.current);
                match facts.cordoned {
                    true => Release::Ended { why: "after Done on a config its drain was not for", kept },
                    false => Release::Cleared,
                }
            } else {
                // Asked as the agent would have; the drain controller ends the drain through the
                // hooks that made it (its `uncordon` reads the pool from `aloft.dev/drainPool`).
                let r = format!("uncordon-{}", facts.current);
                set_annotations(&mut next, &[(ann::DESIRED_DRAIN, Some(&r))]);
                Release::AskUncordon
            };
            st.nodes.put(next);
            (i, stored, how)
        })
        .collect()
}

/// The pick: the target, no pre-stage request any more, and with `drain`, the cordon and the
/// drain's answer (see [`drains_at_pick`]). No request is left standing: the agent's own
/// (`drain-<target>`, with its Working report) matches the answer, and when it makes none the
/// node either finishes without a drain or fails before one ([`NodeFacts::failed_before_drain`]).
fn pick_edit(node: &mut Value, target: &str, drain: bool) {
    set_annotations(
        node,
        &[
            (ann::DESIRED_CONFIG, Some(target)),
            (ann::PRESTAGE_CONFIG, None),
            // The Done report on this target comes back uncordoned (see `uncordon::at_done`)
            // when the pick made the drain; otherwise a grant of an earlier pick is void.
            (ann::UNCORDON_AT_DONE, drain.then_some(target)),
            // A stuck drain's mark is about the config the node leaves: kept, a node sent back
            // to the config it runs read as failing on it (a breaker of that config counted it).
            (ann::DRAIN_FAILURE, None),
        ],
    );
    if drain {
        let r = format!("drain-{target}");
        super::uncordon::cordon_for_drain(node);
        set_annotations(
            node,
            &[(ann::DESIRED_DRAIN, None), (ann::LAST_APPLIED_DRAIN, Some(&r)), (ann::DRAIN_STARTED, None)],
        );
    }
}

/// Back into service after failing before the drain the pick made: no cordon and no answer (a
/// retry asks for its drain again, and the drain controller answers it).
fn undo_drain_edit(node: &mut Value) -> bool {
    // A cordon from before an earlier drain of this update stays.
    super::uncordon::end_drain(node, None)
}

/// Remember the config a node event says the node runs, when its OS image is not known yet.
fn note_current_config(st: &mut State, ev: &crate::store::Event) {
    let Some(unknown) = st.os_unknown.as_mut() else { return };
    let current = objects::at(&ev.object, &["metadata", "annotations", ann::CURRENT_CONFIG]);
    if let Some(name) = current.and_then(Value::as_str) {
        if !name.is_empty() && !st.os_images.contains_key(name) && !unknown.contains(name) {
            unknown.insert(name.to_string());
        }
    }
}

/// Look up the osImageURL of every rendered config a pool targets or a node runs that is not
/// known yet (a few per rollout; pre-staging a target on the OS a node runs already would cost a
/// write, a watch event, a config fetch and a report per waiting node, for nothing). Every
/// node's config at the first pass, then those of the nodes that changed since.
async fn learn_os_images(store: &Arc<dyn Store>, st: &mut State) -> Result<(), StoreError> {
    let targets = st.pools.typed.iter().filter_map(|p| p.spec.configuration.as_ref().map(|c| c.name.as_str()));
    let first = st.os_unknown.is_none();
    let noted = st.os_unknown.replace(Default::default()).unwrap_or_default();
    let all: &[NodeFacts] = if first { &st.nodes.derived } else { &[] };
    let names: std::collections::HashSet<&str> =
        targets.chain(all.iter().map(|f| f.current.as_str())).chain(noted.iter().map(String::as_str)).collect();
    let mut missing: Vec<String> =
        names.into_iter().filter(|n| !n.is_empty() && !st.os_images.contains_key(*n)).map(str::to_string).collect();
    missing.sort_unstable();
    for name in missing {
        let key = Key::cluster(&MACHINE_CONFIG.store_key(), &name);
        let url = store
            .get(&key)
            .await?
            .map(|mc| mc.pointer("/spec/osImageURL").and_then(Value::as_str).unwrap_or("").to_string());
        st.os_images.insert(name, url);
    }
    Ok(())
}

/// MCO's pool Events, on the status that says so: `Updating` when the pool takes a new target
/// ("Pool worker now targeting MachineConfig rendered-..."), `Completed` when every node is
/// updated on it ("Pool worker has completed update to MachineConfig rendered-..."). The record
/// of when an update began and ended, which `kubectl describe mcp` shows.
fn record_progress(events: &Recorder, pool: &MachineConfigPool, new: &MachineConfigPoolStatus) {
    fn target_of(s: Option<&MachineConfigPoolStatus>) -> &str {
        s.and_then(|s| s.rollout.as_ref()).map_or("", |r| r.config.as_str())
    }
    fn done_of(s: Option<&MachineConfigPoolStatus>) -> &str {
        s.and_then(|s| s.configuration.as_ref()).map_or("", |c| c.name.as_str())
    }
    let (old, name) = (pool.status.as_ref(), &pool.metadata.name);
    let about = Involved::pool(name);
    let target = target_of(Some(new));
    if !target.is_empty() && target != target_of(old) {
        let msg = format!("Pool {name} now targeting MachineConfig {target}");
        events.emit(&about, EventType::Normal, reasons::UPDATING, &msg);
        // A completion of this target after this is news, even in the words of the last one.
        events.forget(&about, reasons::COMPLETED);
    }
    let done = done_of(Some(new));
    // Also when the pool finishes going back to the config it had completed before (a revert
    // of a config that never completed leaves `status.configuration` where it was; MCO then
    // says nothing, and the Events read as if the revert never finished).
    let complete = |s: Option<&MachineConfigPoolStatus>| {
        s.and_then(|s| s.rollout.as_ref()).is_some_and(|r| r.phase == RolloutPhase::Complete)
    };
    let completed_again = complete(Some(new)) && target == done && !(complete(old) && target_of(old) == target);
    if !done.is_empty() && (done != done_of(old) || completed_again) {
        let msg = format!("Pool {name} has completed update to MachineConfig {done}");
        events.emit(&about, EventType::Normal, reasons::COMPLETED, &msg);
    }
    let token_of = |s: Option<&MachineConfigPoolStatus>| {
        s.and_then(|s| s.rollout.as_ref()).map_or(String::new(), |r| r.resume_token.clone())
    };
    let token = token_of(Some(new));
    if !token.is_empty() && token != token_of(old) && !target.is_empty() {
        let forgiven = new.rollout.as_ref().map(|r| r.forgiven_nodes.clone()).unwrap_or_default();
        let msg = format!(
            "Rollout of {target} resumed ({} {token}): the circuit breaker is closed{}",
            aloft_api::annotations::RESUME_ROLLOUT,
            if forgiven.is_empty() { String::new() } else { format!("; forgiven: {}", names_text(&forgiven)) }
        );
        events.emit(&about, EventType::Normal, reasons::ROLLOUT_RESUMED, &msg);
    }
}

/// MCO's Warning for a pool whose `nodeSelector` is empty: it selects no node (an empty selector
/// selecting every node would take the whole fleet), which a user who wrote `{}` meaning "all"
/// was not told.
fn record_selector(events: &Recorder, pool: &MachineConfigPool) {
    let about = Involved::pool(&pool.metadata.name);
    if pool.spec.node_selector.as_ref().is_some_and(|s| s.is_empty()) {
        // MCO's first words would say the opposite of what aloft does with it.
        let msg = "This machineconfigpool's spec.nodeSelector is empty, which MCO reads as selecting all nodes. A \
                   non-empty selector is required: until it has one, this pool selects no node.";
        events.emit(&about, EventType::Warning, reasons::SELECTING_ALL, msg);
    } else {
        events.forget(&about, reasons::SELECTING_ALL);
    }
}

/// How soon the pool's maintenance window changes in a way a pass must see: its next opening,
/// for the nodes that wait for it; its closing, while nodes wait for anything (their condition
/// and Event then name the window). A little after the edge, so the pass is past it.
fn window_wake(pp: &PoolPlan, now: chrono::DateTime<chrono::Utc>) -> Option<Duration> {
    let at = match (&pp.window, &pp.wait) {
        (Some(WindowState::Closed { opens }), Some(Wait::MaintenanceWindow { .. })) => *opens,
        (Some(WindowState::Open { closes: Some(closes) }), Some(_)) => *closes,
        _ => return None,
    };
    Some((at - now).to_std().unwrap_or_default() + Duration::from_millis(100))
}

/// Events for what kept a pool's nodes waiting: one per change of reason or message.
fn record_waits(events: &Recorder, pool_name: &str, pp: &PoolPlan, nodes: &[Node], hot: &[NodeHot]) {
    let about = Involved::pool(pool_name);
    // The breaker's Event follows the breaker, not the waiting nodes: it trips just as well with
    // every node picked already (then none waits).
    match &pp.breaker {
        // The trip, and a new one (more nodes failing than allowed, again or others): a Warning.
        Some(h @ HoldReason::CircuitBroken { failed, max_failures }) if failed.len() > *max_failures => {
            let msg = format!("Rollout of {} stopped: {}", pp.target, Wait::Policy(h.clone()));
            events.emit(&about, EventType::Warning, reasons::CIRCUIT_BROKEN, &msg);
        }
        // Still open with fewer failing (nodes recovered): the trip's Event stands; a second
        // Warning read as a second trip. The condition says how many fail now.
        Some(_) => {}
        None => events.forget(&about, reasons::CIRCUIT_BROKEN),
    }
    // Nodes held by the breaker are in its Event.
    let wait = pp.wait.as_ref().filter(|w| !matches!(w, Wait::Policy(HoldReason::CircuitBroken { .. })));
    let reason = match wait {
        Some(Wait::Policy(HoldReason::Soaking { .. })) => reasons::CANARY_SOAKING,
        Some(Wait::MaintenanceWindow { .. } | Wait::BadSchedule(_)) => reasons::MAINTENANCE_WINDOW_CLOSED,
        _ => reasons::NODE_WAITING,
    };
    for r in [reasons::CANARY_SOAKING, reasons::MAINTENANCE_WINDOW_CLOSED, reasons::NODE_WAITING] {
        if wait.is_none() || r != reason {
            events.forget(&about, r);
        }
    }
    if let Some(w) = wait {
        // A schedule that cannot be read holds the pool until someone fixes it.
        let kind = if matches!(w, Wait::BadSchedule(_)) { EventType::Warning } else { EventType::Normal };
        events.emit(&about, kind, reason, &wait_message(pp, w, nodes, hot));
    }
    if pp.blocked.is_empty() {
        events.forget(&about, reasons::BUDGET_BLOCKED);
    } else {
        let msg = blocked_message(pp, |i| &nodes[i].metadata.name);
        events.emit(&about, EventType::Normal, reasons::BUDGET_BLOCKED, &msg);
    }
}

/// The waiting Event's message: one per reason and target, not one per pass (it leaves out what
/// changes with every pick: how many wait, which nodes are updating; the pool's status counts
/// them). Degraded nodes that hold slots are named (`degraded` gives a node's name if it is
/// degraded): they hold them until someone acts, and the status's `unavailableMachineCount`
/// leaves them out, as MCO's does, so "every slot is taken" beside a count of 0 would not say
/// by whom.
fn wait_message(pp: &PoolPlan, w: &Wait, nodes: &[Node], hot: &[NodeHot]) -> String {
    // Degraded nodes, and nodes an admin cordoned: both hold their slots until someone acts.
    let held_by = |unavailable: &[usize]| {
        let by = |what: &str, pick: &dyn Fn(usize) -> bool| {
            let names: Vec<String> =
                unavailable.iter().filter(|&&i| pick(i)).map(|&i| nodes[i].metadata.name.clone()).collect();
            let n = names.len();
            (n > 0)
                .then(|| format!("{n} of them by {what} node{}: {}", if n == 1 { "" } else { "s" }, names_text(&names)))
        };
        // Not Ready (down, or under disk or network pressure) while asked for nothing: a node on
        // its way to a config is the rollout's own, and not named.
        let down = |i: usize| {
            !hot[i].degraded() && !hot[i].moving() && !hot[i].cordoned_by_hand() && !nodes[i].is_ready_for_update()
        };
        let parts: Vec<String> = [
            by("degraded", &|i| hot[i].degraded()),
            by("cordoned", &|i| !hot[i].degraded() && hot[i].cordoned_by_hand()),
            by("not Ready", &down),
        ]
        .into_iter()
        .flatten()
        .collect();
        if parts.is_empty() {
            String::new()
        } else {
            format!(" ({})", parts.join("; "))
        }
    };
    match (w, &pp.first_config) {
        // Only the nodes with no config are candidates; the rest wait for the pause or breaker.
        (Wait::MaxUnavailable { max, unavailable }, Some(fc)) => format!(
            "nodes with no config wait for {}: maxUnavailable is {max} and every slot is taken{}; the others \
             wait for {}: {}",
            fc.config,
            held_by(unavailable),
            pp.target,
            fc.held
        ),
        (Wait::MaxUnavailable { max, unavailable }, None) => {
            format!(
                "nodes wait for {}: maxUnavailable is {max} and every slot is taken{}",
                pp.target,
                held_by(unavailable)
            )
        }
        (Wait::NotReady { nodes: waiting }, _) => {
            // `kubectl get nodes` shows a cordoned node Ready,SchedulingDisabled: say which it is.
            let (cordoned, down): (Vec<usize>, Vec<usize>) =
                waiting.iter().partition(|&&i| nodes[i].spec.unschedulable && nodes[i].is_ready_for_update());
            let names =
                |list: &[usize]| names_text(&list.iter().map(|&i| nodes[i].metadata.name.clone()).collect::<Vec<_>>());
            let mut parts = Vec::new();
            if !down.is_empty() {
                parts.push(format!("not Ready: {}", names(&down)));
            }
            // A node aloft cordoned for its own drain is not one an admin cordoned.
            let (by_hand, for_drain): (Vec<usize>, Vec<usize>) =
                cordoned.iter().partition(|&&i| hot[i].cordoned_by_hand());
            if !by_hand.is_empty() {
                parts.push(format!("cordoned: {}", names(&by_hand)));
            }
            if !for_drain.is_empty() {
                parts.push(format!("cordoned for their drain: {}", names(&for_drain)));
            }
            let once = match (down.is_empty(), cordoned.is_empty()) {
                (false, true) => "Ready",
                (true, false) => "uncordoned",
                _ => "Ready and uncordoned",
            };
            format!("nodes wait for {}: {}; they are picked once {once}", pp.target, parts.join("; "))
        }
        (w, _) => format!("nodes wait for {}: {w}", pp.target),
    }
}

/// Which nodes each budget holds back and why (`name` of a node by its snapshot index), for the
/// `BudgetBlocked` Event and condition.
fn blocked_message<'a>(pp: &PoolPlan, name: impl Fn(usize) -> &'a str) -> String {
    let parts: Vec<String> = pp
        .blocked
        .iter()
        .map(|(b, held)| {
            let names: Vec<String> = held.iter().map(|&i| name(i).to_string()).collect();
            format!("{} {}: {b}", names_text(&names), if names.len() == 1 { "waits" } else { "wait" })
        })
        .collect();
    parts.join("; ")
}

fn condition(type_: &str, on: bool, reason: &str, message: String) -> Condition {
    Condition {
        type_: type_.into(),
        status: if on { "True" } else { "False" }.into(),
        reason: reason.into(),
        message,
        ..Default::default()
    }
}

/// A pool member as a status reads it: the packed facts for the counts (a walk over every
/// member, see [`NodeHot`]), the node and its full facts for the few named in conditions.
type Member<'a> = (&'a Node, &'a NodeFacts, &'a NodeHot);

/// MCO's calculateStatus, plus aloft's rollout conditions and record when a plan is given.
fn compute_status(
    pool: &MachineConfigPool,
    members: &[Member],
    target: &ConfigName,
    membership_error: Option<&String>,
    plan: Option<&PoolPlan>,
) -> MachineConfigPoolStatus {
    let mut st = pool.status.clone().unwrap_or_default();
    let total = members.len();
    // One pass over the members (a pool can have thousands, and this runs after every pick).
    let (mut updated, mut ready, mut unavailable) = (0, 0, 0);
    let mut degraded: Vec<&Member> = Vec::new();
    for m in members {
        let h = m.2;
        // Not before the pool has a config: MCO's `isNodeDone` wants a current config, and a
        // node with none is not updated on an empty target.
        if !target.is_empty() && h.updated_to(target) {
            updated += 1;
            ready += usize::from(h.ready());
        }
        unavailable += usize::from(h.status_unavailable());
        if h.status_degraded() {
            degraded.push(m);
        }
    }
    st.machine_count = total as i64;
    st.updated_machine_count = updated as i64;
    st.ready_machine_count = ready as i64;
    st.unavailable_machine_count = unavailable as i64;
    st.degraded_machine_count = degraded.len() as i64;
    st.observed_generation = pool.metadata.generation;
    let now = objects::now();
    let all_updated = !target.is_empty() && updated == total && ready == total && unavailable == 0;
    if all_updated {
        st.configuration = pool.spec.configuration.clone();
    }
    // The breaker the decision saw, as the CircuitBroken condition and Event show it.
    let broken = plan.is_some_and(|p| p.breaker.is_some());
    set_condition(
        &mut st.conditions,
        condition(
            cond::UPDATED,
            all_updated,
            "",
            if all_updated { format!("All nodes are updated with MachineConfig {target}") } else { String::new() },
        ),
        &now,
    );
    let updating = if all_updated {
        condition(cond::UPDATING, false, "", String::new())
    } else if pool.spec.paused {
        // MCO's words (`getPoolUpdateLine`): the message names what the pause holds back.
        let line =
            if target.is_empty() { String::new() } else { format!("; will not update to MachineConfig {target}") };
        condition(cond::UPDATING, false, "", format!("Pool is paused{line}"))
    } else if target.is_empty() {
        condition(cond::UPDATING, false, "", "Waiting for the pool to render".into())
    } else if broken {
        condition(cond::UPDATING, false, "CircuitBroken", format!("Rollout of {target} stopped by the circuit breaker"))
    } else {
        condition(cond::UPDATING, true, "", format!("All nodes are updating to MachineConfig {target}"))
    };
    set_condition(&mut st.conditions, updating, &now);
    // MCO's message names every degraded node; nodes this pool could not place are added to it
    // (they are in no pool, so not counted), not put in its place.
    let node_degraded = match (membership_error, degraded.is_empty()) {
        (None, true) => condition(cond::NODE_DEGRADED, false, "", String::new()),
        (Some(e), true) => condition(cond::NODE_DEGRADED, true, "NodeInMultiplePools", e.clone()),
        (e, false) => {
            // As MCO, a node reporting no reason is counted but not quoted.
            let mut msgs: Vec<String> = degraded
                .iter()
                .filter(|(_, f, _)| !f.degraded_reason().is_empty())
                .map(|(n, f, _)| format!("Node {} is reporting: {:?}", n.metadata.name, f.degraded_reason()))
                .collect();
            msgs.extend(e.cloned());
            condition(
                cond::NODE_DEGRADED,
                true,
                &format!("{} nodes are reporting degraded status on sync", degraded.len()),
                msgs.join(", "),
            )
        }
    };
    let nd = node_degraded.is_true();
    set_condition(&mut st.conditions, node_degraded, &now);
    let render = find_condition(&st.conditions, cond::RENDER_DEGRADED).filter(|c| c.is_true()).cloned();
    let degraded_cond = match (&render, nd) {
        (Some(r), _) => condition(cond::DEGRADED, true, "RenderFailed", r.message.clone()),
        (None, true) => condition(
            cond::DEGRADED,
            true,
            "NodeDegraded",
            find_condition(&st.conditions, cond::NODE_DEGRADED).map(|c| c.message.clone()).unwrap_or_default(),
        ),
        // A rollout the breaker stopped needs someone, nodes failing now or not: `oc get mcp`
        // showed it False/False/False, a pool with nothing wrong.
        (None, false) if broken => condition(
            cond::DEGRADED,
            true,
            "CircuitBroken",
            format!("Rollout of {target} stopped by the circuit breaker (see the CircuitBroken condition)"),
        ),
        (None, false) => condition(cond::DEGRADED, false, "", String::new()),
    };
    set_condition(&mut st.conditions, degraded_cond, &now);
    if let Some(pp) = plan {
        rollout_conditions(&mut st, &pool.metadata.name, members, pp, &now);
    }
    st
}

/// aloft's conditions: CanarySoaking, CircuitBroken, NodeDrainTimeout, BudgetBlocked; and
/// `status.rollout`.
fn rollout_conditions(st: &mut MachineConfigPoolStatus, pool: &str, members: &[Member], pp: &PoolPlan, now: &str) {
    let soaking = match &pp.soak {
        Some(h) => {
            let paused = matches!(pp.wait, Some(Wait::Paused));
            let msg = format!("{}{}", Wait::Policy(h.clone()), if paused { " (the pool is paused)" } else { "" });
            condition(cond::CANARY_SOAKING, true, "Soaking", msg)
        }
        None => condition(cond::CANARY_SOAKING, false, "", String::new()),
    };
    set_condition(&mut st.conditions, soaking, now);
    let broken = match &pp.breaker {
        Some(h) => condition(
            cond::CIRCUIT_BROKEN,
            true,
            "TooManyFailures",
            format!(
                "{}; resume with `aloftctl rollout resume mcp/{pool}` or change the config",
                Wait::Policy(h.clone())
            ),
        ),
        None => condition(cond::CIRCUIT_BROKEN, false, "", String::new()),
    };
    set_condition(&mut st.conditions, broken, now);
    // True only while nodes wait for it: a closed window with nothing to do holds nothing.
    let window = match &pp.wait {
        Some(w @ Wait::MaintenanceWindow { .. }) => {
            condition(cond::MAINTENANCE_WINDOW_CLOSED, true, "OutsideWindow", w.to_string())
        }
        Some(w @ Wait::BadSchedule(_)) => {
            condition(cond::MAINTENANCE_WINDOW_CLOSED, true, "InvalidSchedule", w.to_string())
        }
        _ => condition(cond::MAINTENANCE_WINDOW_CLOSED, false, "", String::new()),
    };
    set_condition(&mut st.conditions, window, now);
    // Each mark names its node; the reason is a fixed word (what alerts and filters match),
    // the count and the names go in the message, the first five quoted.
    let stuck: Vec<&str> =
        members.iter().filter(|(_, _, h)| h.drain_failed()).map(|(_, f, _)| f.drain_failure.as_str()).collect();
    let drain = if stuck.is_empty() {
        condition(cond::NODE_DRAIN_TIMEOUT, false, "", String::new())
    } else {
        let reason = if stuck.iter().all(|f| f.starts_with("failed to uncordon")) {
            "UncordonTimedOut"
        } else {
            "DrainTimedOut"
        };
        let mut message = stuck.iter().take(5).copied().collect::<Vec<_>>().join("; ");
        if stuck.len() > 5 {
            message.push_str(&format!("; and {} more", stuck.len() - 5));
        }
        condition(cond::NODE_DRAIN_TIMEOUT, true, reason, message)
    };
    set_condition(&mut st.conditions, drain, now);
    set_condition(&mut st.conditions, budget_condition(members, pp), now);
    if pp.rollout.is_some() {
        st.rollout = pp.rollout.clone();
    }
}

/// [`cond::BUDGET_BLOCKED`]: the Event's words, kept for as long as the decision stands (an Event
/// expires with the event TTL, a stalled rollout may not).
fn budget_condition(members: &[Member], pp: &PoolPlan) -> Condition {
    if pp.blocked.is_empty() {
        return condition(cond::BUDGET_BLOCKED, false, "", String::new());
    }
    let mut budgets: Vec<&str> = pp.blocked.iter().map(|(b, _)| b.budget.as_str()).collect();
    budgets.dedup();
    let reason = match budgets.as_slice() {
        [one] => format!("NodeDisruptionBudget {one}"),
        many => format!("NodeDisruptionBudgets {}", many.join(", ")),
    };
    // Members are in snapshot order (see `status_of`): a held node is found by its index.
    let name = |i: usize| pp.members.binary_search(&i).ok().map_or("", |k| members[k].0.metadata.name.as_str());
    condition(cond::BUDGET_BLOCKED, true, &reason, blocked_message(pp, name))
}

/// How often, at most, pool statuses are worked out while a rollout has nodes waiting for a slot
/// (a status is a pass over every member; at a pass per freed slot it was a third of the node
/// controller's time on a 10,000-node pool).
const STATUS_EVERY: Duration = Duration::from_millis(100);

/// How long the next statuses still wait, `since` the last were worked out (None: due now).
fn status_wait(since: Duration) -> Option<Duration> {
    STATUS_EVERY.checked_sub(since).filter(|left| !left.is_zero())
}

/// How soon a pass that found the pools' last status write still under way tries again.
const STATUS_RETRY: Duration = Duration::from_millis(5);

/// Start writing the pools' statuses that changed, in a task of its own: the next pass must not
/// wait for them (a status write queued behind a fleet's reports held up the next picks by a
/// commit). At most one such write is under way ([`collect_statuses`] says when the last one
/// is over and puts its pools into the cache, so the next write compares against their new
/// revisions); one that lost a race is dropped, and the winner's event brings another pass.
fn write_statuses(store: &Arc<dyn Store>, st: &mut State, statuses: Vec<(usize, MachineConfigPoolStatus)>) {
    let writes: Vec<(Key, Value, Option<u64>)> = statuses
        .into_iter()
        .filter_map(|(p, status)| {
            let raw = &st.pools.raw[p];
            let new = match serde_json::to_value(&status) {
                Ok(v) => v,
                Err(e) => {
                    tracing::warn!(error = %e, "pool status does not serialize");
                    return None;
                }
            };
            if raw.get("status") == Some(&new) {
                return None;
            }
            let mut next = Value::clone(raw);
            next["status"] = new;
            Some((Key::cluster(&MACHINE_CONFIG_POOL.store_key(), objects::name_of(raw)), next, revision_of(raw)))
        })
        .collect();
    if writes.is_empty() {
        return;
    }
    st.status_job = Some(spawn_status_writes(store, writes));
}

/// Write statuses (key, object, the revision it was read at) concurrently in a task of its own;
/// the task returns the objects written. One that lost a race is dropped: the winner's event
/// brings another pass.
fn spawn_status_writes(
    store: &Arc<dyn Store>,
    writes: Vec<(Key, Value, Option<u64>)>,
) -> tokio::task::JoinHandle<Vec<Arc<Value>>> {
    let store = store.clone();
    tokio::spawn(async move {
        let all = writes.into_iter().map(|(key, next, rev)| {
            let store = &store;
            async move {
                match store.update(&key, next, rev).await {
                    Ok(v) => Some(v),
                    Err(StoreError::Conflict { .. }) | Err(StoreError::NotFound(_)) => None,
                    Err(e) => {
                        tracing::warn!(resource = %key.resource, name = %key.name, error = %e, "status not written");
                        None
                    }
                }
            }
        });
        futures::future::join_all(all).await.into_iter().flatten().map(|s: Stored| s.object).collect()
    })
}

/// How often, at most, the budgets' statuses are worked out and written: a budget's counts move
/// with every node a rollout takes down or brings back, and a write for each was a write per
/// node update (a 10,000-node rollout's worth). A reader sees counts at most this old.
const BUDGET_STATUS_EVERY: Duration = Duration::from_secs(1);

/// How soon a pass that found the budgets' last status write still under way looks again.
const BUDGET_STATUS_RETRY: Duration = Duration::from_millis(50);

/// Work out every budget's status from the fleet as the cache holds it now (a [`Ledger`] of the
/// same unavailability the decisions count, [`NodeHot::disrupted`]) and start writing those
/// that differ from what is stored, at most every [`BUDGET_STATUS_EVERY`] and one write at a
/// time. Returns how soon a pass must look again when it left them for later.
fn budget_statuses(store: &Arc<dyn Store>, st: &mut State) -> Option<Duration> {
    collect_budget_statuses(st);
    if st.budgets.typed.is_empty() {
        return None;
    }
    if st.budget_job.is_some() {
        return Some(BUDGET_STATUS_RETRY);
    }
    let since = st.budget_status_at.map(|t| t.elapsed());
    if let Some(left) = since.and_then(|d| BUDGET_STATUS_EVERY.checked_sub(d)).filter(|d| !d.is_zero()) {
        return Some(left);
    }
    st.budget_status_at = Some(tokio::time::Instant::now());
    let unavailable: Vec<bool> = st.nodes.hot.iter().map(NodeHot::disrupted).collect();
    let labels: Vec<&std::collections::BTreeMap<String, String>> =
        st.nodes.typed.iter().map(|n| &n.metadata.labels).collect();
    let ledger = Ledger::new(&st.budgets.typed, &labels, &unavailable);
    let now = objects::now();
    let computed = &mut st.budget_computed;
    computed.clear();
    let writes: Vec<(Key, Value, Option<u64>)> = st
        .budgets
        .typed
        .iter()
        .zip(&st.budgets.raw)
        .filter_map(|(b, raw)| {
            let old = raw.get("status").and_then(|v| NodeDisruptionBudgetStatus::deserialize(v).ok());
            let status = budget::status_of(b, ledger.groups_of(&b.metadata.name), old.as_ref(), &now);
            let new = match serde_json::to_value(&status) {
                Ok(v) => v,
                Err(e) => {
                    tracing::warn!(budget = %b.metadata.name, error = %e, "budget status does not serialize");
                    return None;
                }
            };
            // Against the stored status (the cache holds the last version the watch brought,
            // a client's write included), not only against what this controller wrote last.
            computed.insert(b.metadata.name.clone(), new.clone());
            if raw.get("status") == Some(&new) {
                return None;
            }
            let mut next = Value::clone(raw);
            next["status"] = new;
            Some((Key::cluster(&NODE_DISRUPTION_BUDGET.store_key(), objects::name_of(raw)), next, revision_of(raw)))
        })
        .collect();
    if !writes.is_empty() {
        st.budget_job = Some(spawn_status_writes(store, writes));
    }
    None
}

/// Put the budgets of a finished status write into the cache (unless a newer version, or their
/// deletion, came first).
fn collect_budget_statuses(st: &mut State) {
    let Some(job) = st.budget_job.take_if(|j| j.is_finished()) else { return };
    match futures::FutureExt::now_or_never(job) {
        Some(Ok(stored)) => {
            for v in stored {
                st.budgets.put_if_newer(v);
            }
        }
        Some(Err(e)) => tracing::warn!(error = %e, "the budget status write failed"),
        None => {}
    }
}

/// Put the pools of a finished status write into the cache (unless a newer version, or their
/// deletion, came first); false while one is under way. Put unconditionally, a status write
/// that finished after a newer spec (a pause, a lower maxUnavailable) had been applied from the
/// watch put the older pool back: picks went on from the old spec, and every later status
/// write conflicted with the newer revision and was dropped, until some other write of the pool.
fn collect_statuses(st: &mut State) -> bool {
    let Some(job) = st.status_job.take_if(|j| j.is_finished()) else { return st.status_job.is_none() };
    match futures::FutureExt::now_or_never(job) {
        Some(Ok(stored)) => {
            for v in stored {
                st.pools.put_if_newer(v);
            }
        }
        Some(Err(e)) => tracing::warn!(error = %e, "the pool status write failed"),
        None => {}
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn node(name: &str, current: &str, desired: &str, state: &str, ready: bool) -> Node {
        serde_json::from_value(json!({
            "metadata": {"name": name, "labels": {"node-role.kubernetes.io/worker": ""}, "annotations": {
                ann::CURRENT_CONFIG: current, ann::DESIRED_CONFIG: desired, ann::STATE: state, ann::REASON: if state == "Degraded" { "disk full" } else { "" }}},
            "status": {"conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}]},
        }))
        .unwrap()
    }
    fn pool(max: serde_json::Value, paused: bool) -> MachineConfigPool {
        serde_json::from_value(json!({"metadata": {"name": "worker"}, "spec": {"maxUnavailable": max, "paused": paused, "configuration": {"name": "r2"}}})).unwrap()
    }

    fn state() -> State {
        State::new(Cache::empty(), Cache::empty(), Cache::empty())
    }

    fn pool_at(revision: u64, paused: bool) -> Arc<Value> {
        Arc::new(json!({"metadata": {"name": "worker", "resourceVersion": revision.to_string()},
                        "spec": {"maxUnavailable": 1, "paused": paused, "configuration": {"name": "r2"}}}))
    }

    /// A status write that finishes after the watch brought a newer pool (here: paused) must not
    /// put the older one back into the cache.
    #[tokio::test]
    async fn a_late_status_write_never_rolls_a_pool_back() {
        let mut st = state();
        st.pools.put(pool_at(12, true));
        let job = tokio::spawn(async { vec![pool_at(11, false)] });
        while !job.is_finished() {
            tokio::task::yield_now().await;
        }
        st.status_job = Some(job);
        assert!(collect_statuses(&mut st));
        assert!(st.status_job.is_none(), "the finished job is collected");
        let i = st.pools.index_of("worker").unwrap();
        assert!(st.pools.typed[i].spec.paused, "the newer, paused pool stays: {}", st.pools.raw[i]);
        assert_eq!(st.pools.raw[i]["metadata"]["resourceVersion"], "12");
        // A write newer than the cache still goes in.
        st.status_job = Some(tokio::spawn(async { vec![pool_at(13, true)] }));
        while !st.status_job.as_ref().unwrap().is_finished() {
            tokio::task::yield_now().await;
        }
        assert!(collect_statuses(&mut st));
        assert_eq!(st.pools.raw[st.pools.index_of("worker").unwrap()]["metadata"]["resourceVersion"], "13");
    }

    #[test]
    fn statuses_wait_out_the_interval_and_never_underflow_past_it() {
        assert_eq!(status_wait(Duration::ZERO), Some(STATUS_EVERY));
        assert_eq!(status_wait(Duration::from_millis(40)), Some(STATUS_EVERY - Duration::from_millis(40)));
        assert_eq!(status_wait(STATUS_EVERY), None);
        // Past the interval (a second reading of the clock that crossed it panicked here).
        assert_eq!(status_wait(STATUS_EVERY + Duration::from_nanos(1)), None);
        assert_eq!(status_wait(Duration::from_secs(3600)), None);
    }

    /// A pick clears what an earlier drain left about the config the node leaves: a stuck
    /// drain's mark (kept, a node sent back to the config it runs read as failing on it), and the
    /// mark of an admin's cordon lifted since (kept, it would have held the pick's own cordon for
    /// good). An admin's cordon still standing under a stuck node's drain stays marked.
    #[test]
    fn a_pick_drops_what_an_earlier_drain_left_about_the_config_left() {
        let stale = || {
            json!({"metadata": {"name": "a", "annotations": {
                ann::CURRENT_CONFIG: "r1", ann::DESIRED_CONFIG: "r2", ann::STATE: "Degraded",
                ann::LAST_APPLIED_DRAIN: "uncordon-r2", ann::DRAIN_FAILURE: "failed to drain node: a",
                ann::CORDONED_BEFORE_DRAIN: "true"}}, "spec": {}})
        };
        let mark = |n: &Value, k: &str| objects::at(n, &["metadata", "annotations", k]).cloned();
        let mut n = stale();
        pick_edit(&mut n, "r1", false);
        assert_eq!(mark(&n, ann::DRAIN_FAILURE), None, "{n}");
        let mut n = stale();
        pick_edit(&mut n, "r3", true);
        assert_eq!((mark(&n, ann::DRAIN_FAILURE), mark(&n, ann::CORDONED_BEFORE_DRAIN)), (None, None), "{n}");
        assert_eq!(n["spec"]["unschedulable"], true);
        // Still cordoned by the admin under its failed update's drain: the mark stays.
        let mut n = stale();
        n["spec"]["unschedulable"] = true.into();
        n["metadata"]["annotations"][ann::LAST_APPLIED_DRAIN] = "drain-r2".into();
        pick_edit(&mut n, "r3", true);
        assert_eq!(mark(&n, ann::CORDONED_BEFORE_DRAIN), Some(json!("true")), "{n}");
    }

    #[test]
    fn a_pass_picks_in_one_event_in_mcos_words() {
        let names = |n: usize| (0..n).map(|i| format!("n{i}")).collect::<Vec<_>>();
        assert_eq!(set_target_message(&names(1), "r2", false), "Targeted node n0 to r2");
        assert_eq!(
            set_target_message(&names(3), "r2", true),
            "Set target for 3 nodes to r2, cordoned for the drain: n0, n1, n2"
        );
        let many = set_target_message(&names(TARGETED_NAMES + 7), "r2", false);
        assert!(many.starts_with(&format!("Set target for {} nodes to r2: n0, n1,", TARGETED_NAMES + 7)), "{many}");
        assert!(many.ends_with(&format!("n{}, and 7 more", TARGETED_NAMES - 1)), "{many}");
    }

    fn members_of<'a>(nodes: &'a [Node], facts: &'a [NodeFacts], hot: &'a [NodeHot]) -> Vec<Member<'a>> {
        nodes.iter().zip(facts).zip(hot).map(|((n, f), h)| (n, f, h)).collect()
    }

    fn plan_for(members: usize, wait: Option<Wait>) -> PoolPlan {
        PoolPlan {
            pool: 0,
            target: ConfigName::new("r2"),
            members: (0..members).collect::<Vec<_>>().into(),
            picks: Vec::new(),
            breaker: match &wait {
                Some(Wait::Policy(h @ HoldReason::CircuitBroken { .. })) => Some(h.clone()),
                _ => None,
            },
            soak: match &wait {
                Some(Wait::Policy(h @ HoldReason::Soaking { .. })) => Some(h.clone()),
                _ => None,
            },
            wait,
            blocked: Vec::new(),
            prestage: Vec::new(),
            rollout: None,
            membership_error: None,
            first_config: None,
            window: None,
            resume_unrecorded: false,
        }
    }

    /// The controller passes again when a window opens for the nodes waiting for it, and when
    /// it closes on nodes still waiting; with nothing waiting, a window's edges wake nothing.
    #[test]
    fn a_window_wakes_the_controller_at_its_edges_while_nodes_wait() {
        let t = |s: &str| chrono::DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&chrono::Utc);
        let now = t("2026-01-01T00:00:00Z");
        let opens = t("2026-01-01T00:00:30Z");
        let mut pp = plan_for(2, Some(Wait::MaintenanceWindow { opens, local: String::new() }));
        pp.window = Some(WindowState::Closed { opens });
        assert_eq!(window_wake(&pp, now), Some(Duration::from_millis(30_100)));
        pp.wait = None;
        assert_eq!(window_wake(&pp, now), None, "nothing waits for it");
        pp.window = Some(WindowState::Open { closes: Some(opens) });
        pp.wait = Some(Wait::MaxUnavailable { max: 1, unavailable: vec![0] });
        assert_eq!(window_wake(&pp, now), Some(Duration::from_millis(30_100)), "closing on waiting nodes");
        pp.window = Some(WindowState::Open { closes: None });
        assert_eq!(window_wake(&pp, now), None, "never closes");
        // An edge already past (a slow pass) wakes at once, not never.
        pp.window = Some(WindowState::Closed { opens: t("2025-12-31T23:59:00Z") });
        pp.wait = Some(Wait::MaintenanceWindow { opens, local: String::new() });
        assert_eq!(window_wake(&pp, now), Some(Duration::from_millis(100)));
    }

    #[test]
    fn the_circuit_breaker_says_how_to_resume_this_pool() {
        let p = pool(json!(1), false);
        let nodes = [node("a", "r1", "r2", "Degraded", true), node("b", "r1", "r1", "Done", true)];
        let facts: Vec<NodeFacts> = nodes.iter().map(NodeFacts::of).collect();
        let hot: Vec<NodeHot> = facts.iter().map(NodeHot::of).collect();
        let wait = Wait::Policy(HoldReason::CircuitBroken { failed: vec!["a".into()], max_failures: 0 });
        let pp = plan_for(2, Some(wait));
        let st = compute_status(&p, &members_of(&nodes, &facts, &hot), &pp.target, None, Some(&pp));
        let c = find_condition(&st.conditions, cond::CIRCUIT_BROKEN).unwrap();
        assert!(c.is_true());
        assert_eq!(
            c.message,
            "circuit breaker open: 1 node failed on this config (a), more than maxFailures 0; resume with \
             `aloftctl rollout resume mcp/worker` or change the config"
        );
    }

    /// The canaries' soak counts on while the pool is paused, and its condition says so (it
    /// turned False, as if the soak had stopped).
    #[test]
    fn a_soak_keeps_its_condition_through_a_pause() {
        let p = pool(json!(1), true);
        let nodes = [node("a", "r2", "r2", "Done", true), node("b", "r1", "r1", "Done", true)];
        let facts: Vec<NodeFacts> = nodes.iter().map(NodeFacts::of).collect();
        let hot: Vec<NodeHot> = facts.iter().map(NodeHot::of).collect();
        let until = chrono::DateTime::parse_from_rfc3339("2026-01-01T00:10:00Z").unwrap().with_timezone(&chrono::Utc);
        let mut pp = plan_for(2, Some(Wait::Paused));
        pp.soak = Some(HoldReason::Soaking { until: Some(until), failed: vec![] });
        let st = compute_status(&p, &members_of(&nodes, &facts, &hot), &pp.target, None, Some(&pp));
        let c = find_condition(&st.conditions, cond::CANARY_SOAKING).unwrap();
        assert!(c.is_true(), "{c:?}");
        assert!(c.message.contains("soaking until 2026-01-01T00:10:00Z"), "{}", c.message);
        assert!(c.message.ends_with("(the pool is paused)"), "{}", c.message);
        pp.soak = None;
        let st = compute_status(&p, &members_of(&nodes, &facts, &hot), &pp.target, None, Some(&pp));
        assert!(!find_condition(&st.conditions, cond::CANARY_SOAKING).unwrap().is_true());
    }

    /// Every node was picked before one failed (maxUnavailable 2, maxFailures 0): nobody waits,
    /// and the breaker is open all the same. The CircuitBroken condition (which `aloftctl
    /// rollout resume` and the metric read) says so, naming the failed node, as Updating does.
    #[test]
    fn a_breaker_tripped_with_every_node_picked_is_a_true_condition() {
        let p: MachineConfigPool = serde_json::from_value(json!({"metadata": {"name": "worker"}, "spec": {
            "nodeSelector": {"matchLabels": {"node-role.kubernetes.io/worker": ""}},
            "maxUnavailable": 2, "configuration": {"name": "r2"}, "rollout": {"maxFailures": 0}}}))
        .unwrap();
        let nodes = [node("a", "r1", "r2", "Degraded", true), node("b", "r1", "r2", "Working", true)];
        let plan =
            pick::plan(Snapshot { nodes: &nodes, pools: std::slice::from_ref(&p), budgets: &[] }, chrono::Utc::now());
        let pp = &plan[0];
        assert_eq!(pp.wait, None, "nobody waits");
        let facts: Vec<NodeFacts> = nodes.iter().map(NodeFacts::of).collect();
        let hot: Vec<NodeHot> = facts.iter().map(NodeHot::of).collect();
        let st = compute_status(&p, &members_of(&nodes, &facts, &hot), &pp.target, None, Some(pp));
        assert_eq!(st.rollout.as_ref().unwrap().phase, aloft_api::RolloutPhase::CircuitBroken);
        let c = find_condition(&st.conditions, cond::CIRCUIT_BROKEN).unwrap();
        assert!(c.is_true(), "{c:?}");
        assert!(c.message.contains("(a), more than maxFailures 0"), "{}", c.message);
        let u = find_condition(&st.conditions, cond::UPDATING).unwrap();
        assert_eq!(u.reason, "CircuitBroken");
    }

    /// MCO's `status.observedGeneration`: the generation of the spec the status was computed
    /// from, so a reader knows whether the status already reflects its last spec change.
    #[test]
    fn the_status_observes_the_pools_generation() {
        let mut p = pool(json!(1), false);
        p.metadata.generation = Some(7);
        let st = compute_status(&p, &[], &ConfigName::new("r2"), None, None);
        assert_eq!(st.observed_generation, Some(7));
        assert_eq!(serde_json::to_value(&st).unwrap()["observedGeneration"], 7);
    }

    /// As MCO counts: nothing is updated before the pool has a config (a node with none is
    /// not done on an empty target, nor on any other), a node degraded on the config it runs
    /// (drift) is unavailable, and one that gives no reason is counted but not quoted.
    #[test]
    fn counts_and_messages_follow_mco_for_unrendered_pools_drift_and_no_reason() {
        let p = pool(json!(1), false);
        let nodes = vec![node("fresh", "", "", "Done", true)];
        let facts: Vec<NodeFacts> = nodes.iter().map(NodeFacts::of).collect();
        let hot: Vec<NodeHot> = facts.iter().map(NodeHot::of).collect();
        let st = compute_status(&p, &members_of(&nodes, &facts, &hot), &ConfigName::new(""), None, None);
        assert_eq!((st.updated_machine_count, st.ready_machine_count), (0, 0));
        // MCO's isNodeDone wants both configs: a node with none yet is not done, so it counts
        // as unavailable, failing or not (isNodeMCDFailing is false where both configs are
        // equal); and getDegradedMachines wants a desired config, so one failing before it
        // was given any is not counted degraded.
        let nodes = vec![node("fresh", "", "", "Done", true), node("broken", "", "", "Degraded", true)];
        let facts: Vec<NodeFacts> = nodes.iter().map(NodeFacts::of).collect();
        let hot: Vec<NodeHot> = facts.iter().map(NodeHot::of).collect();
        let st = compute_status(&p, &members_of(&nodes, &facts, &hot), &ConfigName::new("r2"), None, None);
        let counts = (st.updated_machine_count, st.unavailable_machine_count, st.degraded_machine_count);
        assert_eq!(counts, (0, 2, 0), "{st:?}");
        assert!(find_condition(&st.conditions, cond::NODE_DEGRADED).is_some_and(|c| c.status == "False"), "{st:?}");
        let mut drifted = node("a", "r1", "r1", "Degraded", true);
        drifted.metadata.annotations.insert(ann::REASON.into(), "content mismatch".into());
        let mut silent = node("b", "r1", "r2", "Degraded", true);
        silent.metadata.annotations.remove(ann::REASON);
        let nodes = vec![drifted, silent];
        let facts: Vec<NodeFacts> = nodes.iter().map(NodeFacts::of).collect();
        let hot: Vec<NodeHot> = facts.iter().map(NodeHot::of).collect();
        let st = compute_status(&p, &members_of(&nodes, &facts, &hot), &ConfigName::new("r2"), None, None);
        assert_eq!((st.degraded_machine_count, st.unavailable_machine_count), (2, 1), "{st:?}");
        let nd = find_condition(&st.conditions, cond::NODE_DEGRADED).unwrap();
        assert_eq!(nd.message, "Node a is reporting: \"content mismatch\"");
        assert_eq!(nd.reason, "2 nodes are reporting degraded status on sync");
    }

    /// A budget holding back nodes the pool would pick now is a condition of the pool, the
    /// lasting record (its Event expires); one that allows none of a group says it is for good.
    #[test]
    fn a_budget_holding_the_rollout_back_is_a_pool_condition() {
        let p: MachineConfigPool = serde_json::from_value(json!({"metadata": {"name": "worker"}, "spec": {
            "maxUnavailable": 3, "configuration": {"name": "r2"},
            "nodeSelector": {"matchLabels": {"node-role.kubernetes.io/worker": ""}}}}))
        .unwrap();
        let mut nodes: Vec<Node> = ["a", "b", "c"].iter().map(|n| node(n, "r1", "r1", "Done", true)).collect();
        for n in &mut nodes[..2] {
            n.metadata.labels.insert("app".into(), "web".into());
            n.metadata.labels.insert("topology.kubernetes.io/zone".into(), "z1".into());
        }
        let web: NodeDisruptionBudget = serde_json::from_value(json!({"metadata": {"name": "web"}, "spec": {
            "selector": {"matchLabels": {"app": "web"}}, "minAvailable": "100%",
            "groupBy": ["topology.kubernetes.io/zone"]}}))
        .unwrap();
        let facts: Vec<NodeFacts> = nodes.iter().map(NodeFacts::of).collect();
        let hot: Vec<NodeHot> = facts.iter().map(NodeHot::of).collect();
        let status = |budgets: &[NodeDisruptionBudget]| {
            let pools = [p.clone()];
            let plans = pick::plan(Snapshot { nodes: &nodes, pools: &pools, budgets }, chrono::Utc::now());
            compute_status(&p, &members_of(&nodes, &facts, &hot), &plans[0].target, None, Some(&plans[0]))
        };
        let st = status(&[web]);
        let c = find_condition(&st.conditions, cond::BUDGET_BLOCKED).unwrap();
        assert!(c.is_true(), "{c:?}");
        assert_eq!(c.reason, "NodeDisruptionBudget web");
        assert_eq!(
            c.message,
            "a, b wait: NodeDisruptionBudget web allows 0 of 2 nodes (topology.kubernetes.io/zone=z1) unavailable \
             and 0 already are, which blocks the group for good"
        );
        let st = status(&[]);
        assert!(!find_condition(&st.conditions, cond::BUDGET_BLOCKED).unwrap().is_true());
    }

    /// One budget holding nodes of two of its groups: each group's part of the message names
    /// only that group's nodes, and the reason names the budget once.
    #[test]
    fn a_budget_blocking_two_groups_names_each_groups_own_nodes() {
        let p: MachineConfigPool = serde_json::from_value(json!({"metadata": {"name": "worker"}, "spec": {
            "maxUnavailable": 3, "configuration": {"name": "r2"},
            "nodeSelector": {"matchLabels": {"node-role.kubernetes.io/worker": ""}}}}))
        .unwrap();
        let mut nodes: Vec<Node> = ["w2", "w3"].iter().map(|n| node(n, "r1", "r1", "Done", true)).collect();
        for (n, zone) in nodes.iter_mut().zip(["z2", "z3"]) {
            n.metadata.labels.insert("app".into(), "web".into());
            n.metadata.labels.insert("zone".into(), zone.into());
        }
        let web: NodeDisruptionBudget = serde_json::from_value(json!({"metadata": {"name": "web"}, "spec": {
            "selector": {"matchLabels": {"app": "web"}}, "minAvailable": "100%", "groupBy": ["zone"]}}))
        .unwrap();
        let facts: Vec<NodeFacts> = nodes.iter().map(NodeFacts::of).collect();
        let hot: Vec<NodeHot> = facts.iter().map(NodeHot::of).collect();
        let pools = [p.clone()];
        let plans = pick::plan(Snapshot { nodes: &nodes, pools: &pools, budgets: &[web] }, chrono::Utc::now());
        let st = compute_status(&p, &members_of(&nodes, &facts, &hot), &plans[0].target, None, Some(&plans[0]));
        let c = find_condition(&st.conditions, cond::BUDGET_BLOCKED).unwrap();
        assert_eq!(c.reason, "NodeDisruptionBudget web");
        assert_eq!(
            c.message,
            "w2 waits: NodeDisruptionBudget web allows 0 of 1 nodes (zone=z2) unavailable and 0 already are, \
             which blocks the group for good; w3 waits: NodeDisruptionBudget web allows 0 of 1 nodes (zone=z3) \
             unavailable and 0 already are, which blocks the group for good"
        );
    }

    /// A node that joined a paused pool with no config gets r1, the config the pool's nodes run,
    /// not the target r2, and the Event says why; with no slot free, the waiting Event says it
    /// waits for maxUnavailable (not for the pause). Done on r1, it is counted as MCO counts a
    /// node on an older config: not updated (so not ready), and available.
    #[test]
    fn a_node_given_its_first_config_while_paused_is_explained_and_counted_as_mco_does() {
        let mut p: MachineConfigPool = serde_json::from_value(json!({"metadata": {"name": "worker"}, "spec": {
            "nodeSelector": {"matchLabels": {"node-role.kubernetes.io/worker": ""}},
            "maxUnavailable": 1, "paused": true, "configuration": {"name": "r2"}}}))
        .unwrap();
        p.status = Some(serde_json::from_value(json!({"configuration": {"name": "r1"}})).unwrap());
        let pools = std::slice::from_ref(&p);
        let mut nodes = vec![node("a", "r1", "r1", "Done", true), node("fresh", "", "", "", true)];
        let plans = pick::plan(Snapshot { nodes: &nodes, pools, budgets: &[] }, chrono::Utc::now());
        let pp = &plans[0];
        assert_eq!(pp.picks, vec![1]);
        let fc = pp.first_config.as_ref().expect("a first config");
        let msg = set_target_message(&["fresh".into()], pp.pick_config(), true) + &first_config_why(fc, &pp.target);
        assert_eq!(
            msg,
            "Targeted node fresh to r1, cordoned for the drain; it had no config, and while the pool is paused a \
             node with none gets what the machine-config-server serves: the config the pool's nodes run \
             (status.configuration), not r2, which no node runs yet"
        );
        // a is down: the only slot is taken.
        nodes[0] = node("a", "r1", "r1", "Done", false);
        let plans = pick::plan(Snapshot { nodes: &nodes, pools, budgets: &[] }, chrono::Utc::now());
        let pp = &plans[0];
        assert!(pp.picks.is_empty());
        let hot = |nodes: &[Node]| -> Vec<NodeHot> { nodes.iter().map(|n| NodeHot::of(&NodeFacts::of(n))).collect() };
        assert_eq!(
            wait_message(pp, pp.wait.as_ref().expect("a wait"), &nodes, &hot(&nodes)),
            "nodes with no config wait for r1: maxUnavailable is 1 and every slot is taken (1 of them by not Ready \
             node: a); the others wait for r2: the pool is paused"
        );
        // a failed on r2 (asked before the pause): it holds the slot, and the Event names it (the
        // status counts it as degraded, not unavailable).
        nodes[0] = node("a", "r1", "r2", "Degraded", true);
        let plans = pick::plan(Snapshot { nodes: &nodes, pools, budgets: &[] }, chrono::Utc::now());
        let pp = &plans[0];
        assert!(pp.picks.is_empty());
        assert_eq!(
            wait_message(pp, pp.wait.as_ref().expect("a wait"), &nodes, &hot(&nodes)),
            "nodes with no config wait for r1: maxUnavailable is 1 and every slot is taken (1 of them by degraded \
             node: a); the others wait for r2: the pool is paused"
        );
        // Nodes left that are not Ready are named, with what they wait for.
        assert_eq!(
            wait_message(pp, &Wait::NotReady { nodes: vec![0] }, &nodes, &hot(&nodes)),
            "nodes wait for r2: not Ready: a; they are picked once Ready"
        );
        // A node an admin cordoned is said to be cordoned (kubectl shows it Ready), and named
        // when it holds a slot.
        let mut cordoned = nodes.clone();
        cordoned[0] = node("a", "r1", "r1", "Done", true);
        cordoned[0].spec.unschedulable = true;
        assert_eq!(
            wait_message(pp, &Wait::NotReady { nodes: vec![0] }, &cordoned, &hot(&cordoned)),
            "nodes wait for r2: cordoned: a; they are picked once uncordoned"
        );
        // One aloft cordoned for its drain is not called an admin's.
        let mut draining = cordoned.clone();
        draining[0].metadata.annotations.insert(ann::DESIRED_DRAIN.into(), "drain-r3".into());
        assert_eq!(
            wait_message(pp, &Wait::NotReady { nodes: vec![0] }, &draining, &hot(&draining)),
            "nodes wait for r2: cordoned for their drain: a; they are picked once uncordoned"
        );
        let wait = Wait::MaxUnavailable { max: 1, unavailable: vec![0] };
        let unpaused = PoolPlan { first_config: None, ..pp.clone() };
        assert_eq!(
            wait_message(&unpaused, &wait, &cordoned, &hot(&cordoned)),
            "nodes wait for r2: maxUnavailable is 1 and every slot is taken (1 of them by cordoned node: a)"
        );
        let down = vec![node("a", "r1", "r1", "Done", false)];
        assert_eq!(
            wait_message(&unpaused, &wait, &down, &hot(&down)),
            "nodes wait for r2: maxUnavailable is 1 and every slot is taken (1 of them by not Ready node: a)"
        );
        // Done on r1: behind r2, available.
        nodes = vec![node("a", "r1", "r1", "Done", true), node("fresh", "r1", "r1", "Done", true)];
        let plans = pick::plan(Snapshot { nodes: &nodes, pools, budgets: &[] }, chrono::Utc::now());
        assert!(plans[0].picks.is_empty());
        assert_eq!(plans[0].wait, Some(Wait::Paused));
        let facts: Vec<NodeFacts> = nodes.iter().map(NodeFacts::of).collect();
        let hot: Vec<NodeHot> = facts.iter().map(NodeHot::of).collect();
        let st = compute_status(&p, &members_of(&nodes, &facts, &hot), &plans[0].target, None, Some(&plans[0]));
        assert_eq!(
            (st.machine_count, st.updated_machine_count, st.ready_machine_count, st.unavailable_machine_count),
            (2, 0, 0, 0)
        );
        assert_eq!(st.configuration.as_ref().map(|c| c.name.as_str()), Some("r1"));
        assert_eq!(
            find_condition(&st.conditions, cond::UPDATING).unwrap().message,
            "Pool is paused; will not update to MachineConfig r2"
        );
    }

    #[test]
    fn status_like_mco() {
        let p = pool(json!(1), false);
        let nodes = [
            node("a", "r2", "r2", "Done", true),
            node("b", "r1", "r2", "Degraded", true),
            node("c", "r1", "r1", "Done", true),
        ];
        let facts: Vec<NodeFacts> = nodes.iter().map(NodeFacts::of).collect();
        let hot: Vec<NodeHot> = facts.iter().map(NodeHot::of).collect();
        let members: Vec<Member> = nodes.iter().zip(&facts).zip(&hot).map(|((n, f), h)| (n, f, h)).collect();
        let st = compute_status(&p, &members, &ConfigName::new("r2"), None, None);
        assert_eq!(
            (
                st.machine_count,
                st.updated_machine_count,
                st.ready_machine_count,
                st.degraded_machine_count,
                st.unavailable_machine_count
            ),
            (3, 1, 1, 1, 0)
        );
        let c = |t| find_condition(&st.conditions, t).unwrap().clone();
        assert!(!c(cond::UPDATED).is_true() && c(cond::UPDATING).is_true());
        assert_eq!(c(cond::NODE_DEGRADED).reason, "1 nodes are reporting degraded status on sync");
        assert_eq!(c(cond::NODE_DEGRADED).message, "Node b is reporting: \"disk full\"");
        assert!(c(cond::DEGRADED).is_true());
        assert_eq!(c(cond::UPDATING).message, "All nodes are updating to MachineConfig r2");
        // Nodes in several custom pools are named beside the degraded ones, not instead of them.
        let misplaced =
            "node w9 belongs to 2 custom pools (worker-a, worker-b); it must belong to at most one".to_string();
        let both = compute_status(&p, &members, &ConfigName::new("r2"), Some(&misplaced), None);
        let nd = find_condition(&both.conditions, cond::NODE_DEGRADED).unwrap();
        assert_eq!(nd.reason, "1 nodes are reporting degraded status on sync");
        assert_eq!(nd.message, format!("Node b is reporting: \"disk full\", {misplaced}"));
        assert_eq!(find_condition(&both.conditions, cond::DEGRADED).unwrap().message, nd.message);
        assert!(st.configuration.is_none(), "status.configuration moves only when all are updated");
        let done: Vec<Node> = vec![node("a", "r2", "r2", "Done", true)];
        let facts: Vec<NodeFacts> = done.iter().map(NodeFacts::of).collect();
        let hot: Vec<NodeHot> = facts.iter().map(NodeHot::of).collect();
        let members: Vec<Member> = done.iter().zip(&facts).zip(&hot).map(|((n, f), h)| (n, f, h)).collect();
        let st = compute_status(&p, &members, &ConfigName::new("r2"), None, None);
        assert!(find_condition(&st.conditions, cond::UPDATED).unwrap().is_true());
        assert_eq!(st.configuration.unwrap().name, "r2");
        let paused = compute_status(&pool(json!(1), true), &[], &ConfigName::new(""), None, None);
        assert_eq!(find_condition(&paused.conditions, cond::UPDATING).unwrap().message, "Pool is paused");
    }
}
