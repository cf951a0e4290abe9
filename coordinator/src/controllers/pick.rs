//! The node controller's decision, as one pure function over a snapshot of the stored objects
//! (nodes, pools, budgets) and the clock: which nodes move to their pool's target now, which
//! wait and why, which are asked to pre-stage, and the rollout record to store. No I/O and no
//! memory between calls, so a restarted coordinator decides exactly what the old one would have,
//! and a property test can drive it over a simulated fleet (`tests` below).
//!
//! The invariant it keeps: a node is picked only if, counting it, no more nodes of its pool are
//! unavailable than `maxUnavailable` allows (nodes unavailable for any other reason count), and
//! no NodeDisruptionBudget selecting it has more unavailable nodes in its group than it allows.

use super::budget::{Blocked, Ledger};
use super::config_name::ConfigName;
use super::maintenance::{Schedule, WindowState};
use super::pools::{self, NodeFacts, NodeHot};
use super::rollout_policy::{self, Gate, HoldReason};
use aloft_api::annotations as ann;
use aloft_api::{MachineConfigPool, Node, NodeDisruptionBudget, RolloutStatus};
use chrono::{DateTime, Utc};
use std::collections::BTreeMap;

/// The stored objects a decision reads.
#[derive(Debug, Clone, Copy)]
pub struct Snapshot<'a> {
    pub nodes: &'a [Node],
    pub pools: &'a [MachineConfigPool],
    pub budgets: &'a [NodeDisruptionBudget],
}

/// Why a pool's remaining candidates were not picked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Wait {
    Paused,
    /// The pool is being deleted (`deletionTimestamp`, held by a finalizer).
    Deleting,
    /// `maxUnavailable` is used up; the unavailable nodes, by index into the snapshot's nodes
    /// (not by name: a pass that finds every slot taken, most passes of a big rollout, would
    /// copy a thousand names for a message that shows five).
    MaxUnavailable {
        max: usize,
        unavailable: Vec<usize>,
    },
    Policy(HoldReason),
    /// The only nodes left to move are not Ready (down, or under pressure): they are picked
    /// once Ready again. By index into the snapshot's nodes; nodes that join (no config yet,
    /// not Ready until their agent's first report) are not named: they are not waiting for
    /// anything but their own start.
    NotReady {
        nodes: Vec<usize>,
    },
    /// `spec.rollout.maintenance` has no window open now; the next opens at `opens` (`local`:
    /// that time as the schedule's time zone reads it).
    MaintenanceWindow {
        opens: DateTime<Utc>,
        local: String,
    },
    /// `spec.rollout.maintenance` cannot be read (stored before admission checked it, or its
    /// time zone has left the coordinator's database): nothing is picked until it is fixed, as
    /// a pool whose owner wanted updates only at set times must not update at any time.
    BadSchedule(String),
}

impl std::fmt::Display for Wait {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Wait::Paused => f.write_str("the pool is paused"),
            Wait::Deleting => f.write_str("the pool is being deleted"),
            Wait::MaxUnavailable { max, unavailable } => write!(
                f,
                "maxUnavailable is {max} and {} node{} unavailable",
                unavailable.len(),
                if unavailable.len() == 1 { " is" } else { "s are" },
            ),
            Wait::NotReady { nodes } => {
                write!(
                    f,
                    "{} left to update {} not Ready or cordoned; {} picked once Ready and uncordoned",
                    plural(nodes.len(), "node"),
                    if nodes.len() == 1 { "is" } else { "are" },
                    if nodes.len() == 1 { "it is" } else { "they are" }
                )
            }
            Wait::MaintenanceWindow { local, .. } => {
                write!(f, "no maintenance window is open: the next opens {local}")
            }
            Wait::BadSchedule(why) => write!(f, "spec.rollout.maintenance cannot be read, so no node is picked: {why}"),
            Wait::Policy(HoldReason::Canary { canaries }) => match canaries {
                1 => f.write_str("the canary node is still updating"),
                n => write!(f, "the {n} canary nodes are still updating"),
            },
            Wait::Policy(HoldReason::Soaking { until, failed }) => {
                if failed.is_empty() {
                    f.write_str("canary nodes are updated")?;
                } else {
                    // Failed within maxFailures, or forgiven by a resume: either way the soak
                    // does not follow a proven canary.
                    write!(f, "canary nodes are finished, {} of them failed ({})", failed.len(), names_text(failed))?;
                }
                match until {
                    Some(until) => {
                        write!(f, "; soaking until {}", until.to_rfc3339_opts(chrono::SecondsFormat::Secs, true))
                    }
                    None => f.write_str("; soaking for good (soakSeconds ends past the last representable date)"),
                }
            }
            Wait::Policy(HoldReason::CircuitBroken { failed, max_failures }) if failed.len() > *max_failures => write!(
                f,
                "circuit breaker open: {} failed on this config ({}), more than maxFailures {max_failures}",
                plural(failed.len(), "node"),
                names_text(failed)
            ),
            // Tripped, then nodes recovered or maxFailures was raised: it stays open until
            // resumed. Not "more than maxFailures N failed": with N raised since, that was false.
            Wait::Policy(HoldReason::CircuitBroken { failed, max_failures }) => write!(
                f,
                "circuit breaker open: it tripped when more nodes failed on this config than maxFailures allowed; {} \
                 failing now{} (maxFailures {max_failures})",
                failed.len(),
                if failed.is_empty() { String::new() } else { format!(": {}", names_text(failed)) }
            ),
        }
    }
}

/// What holds a pool's rollout while nodes with no config still get their first one (see
/// [`FirstConfig`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Held {
    /// `spec.paused`.
    Paused,
    /// The open circuit breaker ([`PoolPlan::breaker`] says which nodes failed).
    CircuitBroken,
    /// The rollout policy's canaries are out and have not finished on the target.
    Canary,
    /// The rollout policy's soak after the canaries.
    Soaking,
    /// No maintenance window is open (or the schedule cannot be read).
    MaintenanceWindow,
}

impl std::fmt::Display for Held {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Held::Paused => "the pool is paused",
            Held::CircuitBroken => "the circuit breaker is open",
            Held::Canary => "the canaries update",
            Held::Soaking => "the config soaks on the canaries",
            Held::MaintenanceWindow => "no maintenance window is open",
        })
    }
}

/// A pool paused, with its breaker open, or held by its canaries or their soak picks only nodes
/// that joined with no config at all (no `currentConfig`, no `desiredConfig`), and gives them the
/// config MCO's machine-config-server would serve a new machine of the pool, whatever the hold:
/// the target once a member is updated on it, else `status.configuration` (what the pool's nodes
/// run), else the target. Held back, such a node was a machine that joined and could run nothing
/// until the hold ended; given the untested target, it would spread the config the pause or the
/// breaker stopped, or be one canary more than the policy allows.
#[derive(Debug, Clone, PartialEq)]
pub struct FirstConfig {
    /// The config the picks get.
    pub config: ConfigName,
    pub held: Held,
}

/// `1 node`, `2 nodes`.
pub(crate) fn plural(n: usize, noun: &str) -> String {
    format!("{n} {noun}{}", if n == 1 { "" } else { "s" })
}

/// Up to five names, then a count: messages stay short on big fleets.
pub fn names_text(names: &[String]) -> String {
    if names.len() <= 5 {
        names.join(", ")
    } else {
        format!("{}, and {} more", names[..5].join(", "), names.len() - 5)
    }
}

/// The decision for one pool.
#[derive(Debug, Clone, PartialEq)]
pub struct PoolPlan {
    /// Index into the snapshot's pools.
    pub pool: usize,
    pub target: ConfigName,
    /// Indexes into the snapshot's nodes, in node order (shared with the [`Layout`]).
    pub members: std::sync::Arc<[usize]>,
    /// Nodes to move to `target` now, in pick order.
    pub picks: Vec<usize>,
    /// Why candidates that were not picked wait (None: no candidate left waiting).
    pub wait: Option<Wait>,
    /// The open circuit breaker ([`HoldReason::CircuitBroken`]), whether or not a node still
    /// waits: with every node picked before it tripped, nothing waits, and the breaker is open
    /// all the same. The pool's condition, its Event and `aloftctl rollout resume` follow this.
    pub breaker: Option<HoldReason>,
    /// The canaries' soak ([`HoldReason::Soaking`]), whether or not a node waits for it: a
    /// paused pool's nodes wait for the pause, and the soak counts on all the same.
    pub soak: Option<HoldReason>,
    /// Budgets that kept candidates back, one entry per budget group, by budget name and group:
    /// (the first violation in that group, the nodes it held).
    pub blocked: Vec<(Blocked, Vec<usize>)>,
    /// The `aloft.dev/prestageConfig` value each member should have (None: the annotation goes).
    pub prestage: Vec<(usize, Option<String>)>,
    /// `status.rollout` to store (None: no target yet, leave it as it is).
    pub rollout: Option<RolloutStatus>,
    /// Why some node could not be placed in this pool (it matches two custom pools).
    pub membership_error: Option<String>,
    /// Set while a pause or the open breaker holds the rollout and a node with no config is a
    /// candidate: the picks are such nodes, and get [`FirstConfig::config`], not `target`.
    pub first_config: Option<FirstConfig>,
    /// The pool's maintenance window now (None: no schedule, or one that cannot be read): the
    /// node controller passes again when it opens, or closes while nodes wait.
    pub window: Option<WindowState>,
    /// A resume (`aloft.dev/resumeRollout`) this pass took that the stored status does not
    /// record yet: nothing is picked until it does, and the node controller passes again soon.
    /// Picked before, a node failing while the status write was throttled or lost was taken as
    /// failed before the resume by the next pass (which read the old token and took the same
    /// resume again), and forgiven.
    pub resume_unrecorded: bool,
}

impl PoolPlan {
    /// The config this plan's picks are moved to: the target, or a held pool's first config.
    pub fn pick_config(&self) -> &ConfigName {
        self.first_config.as_ref().map_or(&self.target, |f| &f.config)
    }
}

/// The config MCO's machine-config-server serves a new machine of `pool`: the target once some
/// member is updated on it (`updatedMachineCount > 0`), else `status.configuration` (the config
/// the pool's nodes run, while the target has reached none), else (a pool never updated) the
/// target.
fn served_config(pool: &MachineConfigPool, members: &[usize], hot: &[NodeHot], target: &ConfigName) -> ConfigName {
    let complete = pool.status.as_ref().and_then(|st| st.configuration.as_ref()).map(|c| c.name.as_str());
    let taken = members.iter().any(|&i| hot[i].updated_to(target));
    match pools::served_to_new_machines(Some(target.as_str()), complete, taken) {
        Some(name) if name != target.as_str() => ConfigName::new(name),
        _ => target.clone(),
    }
}

/// Decide for every pool of the snapshot. Pools are decided in name order and share one budget
/// ledger, so a budget spanning pools counts the picks of the pools decided before.
pub fn plan(s: Snapshot<'_>, now: DateTime<Utc>) -> Vec<PoolPlan> {
    let facts: Vec<NodeFacts> = s.nodes.iter().map(NodeFacts::of).collect();
    plan_with_facts(s, &facts, now)
}

/// [`plan`] with `facts[i]` = `NodeFacts::of(&s.nodes[i])` already worked out (the controller
/// keeps them in its cache).
pub fn plan_with_facts(s: Snapshot<'_>, facts: &[NodeFacts], now: DateTime<Utc>) -> Vec<PoolPlan> {
    let hot: Vec<NodeHot> = facts.iter().map(NodeHot::of).collect();
    plan_with_layout(s, facts, &hot, &Layout::of(s.pools, s.nodes), &|_, _| false, now)
}

/// Which nodes belong to which pool, and in which order a pool's candidates are picked: what a
/// decision reads of node labels, names, creation times and pool selectors only. Those change
/// rarely, and working this out (a selector match per node and pool, a sort of every pool) was
/// most of a pass on a big fleet; the controller keeps it until one of them changes.
#[derive(Debug, Clone, Default)]
pub struct Layout {
    /// Pool name -> member indexes, in node order.
    members: BTreeMap<String, std::sync::Arc<[usize]>>,
    /// Pool name -> member indexes, in MCO's candidate order.
    ordered: BTreeMap<String, Vec<usize>>,
    /// Pool name -> why a node could not be placed in it.
    errors: BTreeMap<String, String>,
    /// Nodes in no pool (none selects them, or two custom pools do), in node order: no pick
    /// moves them, but a drain of ours may still have to end on them.
    unpooled: Vec<usize>,
}

impl Layout {
    pub fn of(pools: &[MachineConfigPool], nodes: &[Node]) -> Self {
        let (members, errors) = pools::membership(pools, nodes);
        let ordered = members
            .iter()
            .map(|(name, idx)| {
                let mut idx = idx.clone();
                pools::sort_candidates(nodes, &mut idx);
                (name.clone(), idx)
            })
            .collect();
        let mut pooled = vec![false; nodes.len()];
        for &i in members.values().flatten() {
            pooled[i] = true;
        }
        let unpooled = (0..nodes.len()).filter(|&i| !pooled[i]).collect();
        let members = members.into_iter().map(|(name, idx)| (name, idx.into())).collect();
        Layout { members, ordered, errors, unpooled }
    }

    /// The members of pool `name`, in node order.
    pub fn members_of(&self, name: &str) -> &[usize] {
        self.members.get(name).map(|m| &m[..]).unwrap_or_default()
    }

    /// The nodes in no pool, in node order.
    pub fn unpooled(&self) -> &[usize] {
        &self.unpooled
    }
}

/// Whether two rendered configs (a node's current one, a target) run the same OS image: then
/// the target has nothing to pre-stage. False when unknown.
pub type SameOs<'a> = &'a dyn Fn(&str, &str) -> bool;

/// [`plan_with_facts`] with the [`Layout`] of the snapshot already worked out, `hot[i]` =
/// `NodeHot::of(&facts[i])`, and what is known of the rendered configs' OS images.
pub fn plan_with_layout(
    s: Snapshot<'_>,
    facts: &[NodeFacts],
    hot: &[NodeHot],
    layout: &Layout,
    same_os: SameOs<'_>,
    now: DateTime<Utc>,
) -> Vec<PoolPlan> {
    // Without budgets the ledger allows everything and counts nothing: nothing to build.
    let mut ledger = if s.budgets.is_empty() {
        Ledger::new(&[], &[], &[])
    } else {
        let unavailable: Vec<bool> = facts.iter().map(NodeFacts::disrupted).collect();
        let labels: Vec<&BTreeMap<String, String>> = s.nodes.iter().map(|n| &n.metadata.labels).collect();
        Ledger::new(s.budgets, &labels, &unavailable)
    };
    let mut order: Vec<usize> = (0..s.pools.len()).collect();
    order.sort_by(|&a, &b| s.pools[a].metadata.name.cmp(&s.pools[b].metadata.name));
    let mut out = Vec::with_capacity(order.len());
    for p in order {
        let name = &s.pools[p].metadata.name;
        let idx = layout.members.get(name).cloned().unwrap_or_else(|| std::sync::Arc::from([]));
        let ordered = layout.ordered.get(name).map(Vec::as_slice).unwrap_or_default();
        let mut pp = plan_pool(s, p, idx, ordered, facts, hot, &mut ledger, same_os, now);
        pp.membership_error = layout.errors.get(name).cloned();
        out.push(pp);
    }
    out.sort_by_key(|pp| pp.pool);
    out
}

#[allow(clippy::too_many_arguments)]
fn plan_pool(
    s: Snapshot<'_>,
    p: usize,
    members: std::sync::Arc<[usize]>,
    ordered: &[usize],
    facts: &[NodeFacts],
    hot: &[NodeHot],
    ledger: &mut Ledger,
    same_os: SameOs<'_>,
    now: DateTime<Utc>,
) -> PoolPlan {
    let pool = &s.pools[p];
    let target = ConfigName::new(pool.spec.configuration.as_ref().map_or("", |c| c.name.as_str()));
    let mut pp = PoolPlan {
        pool: p,
        target: target.clone(),
        members,
        picks: Vec::new(),
        wait: None,
        breaker: None,
        soak: None,
        blocked: Vec::new(),
        prestage: Vec::new(),
        rollout: None,
        membership_error: None,
        first_config: None,
        window: None,
        resume_unrecorded: false,
    };
    if target.is_empty() {
        return pp;
    }
    // Whether each member is still to be moved to the target, compared once per pass (by node
    // index; the rest of the fleet stays false). A 10,000-node pool is walked on every pass:
    // the walks read the members' packed facts only (`hot`), never the Nodes themselves.
    let mut behind = vec![false; facts.len()];
    let mut waiting_any = false;
    for &i in pp.members.iter() {
        let b = !hot[i].desires(&target);
        behind[i] = b;
        waiting_any |= b;
    }
    let name = |i: usize| s.nodes[i].metadata.name.as_str();
    let eval = rollout_policy::evaluate(
        pool.spec.rollout.as_ref(),
        pool.status.as_ref().and_then(|st| st.rollout.as_ref()),
        pool.metadata.annotations.get(ann::RESUME_ROLLOUT).map(String::as_str),
        pool.status.as_ref().and_then(|st| st.configuration.as_ref()).map(|c| c.name.as_str()),
        &target,
        &rollout_policy::Members { index: &pp.members, hot, name: &name },
        now,
    );
    let recorded = pool.status.as_ref().and_then(|st| st.rollout.as_ref()).map_or("", |r| r.resume_token.as_str());
    pp.resume_unrecorded = eval.status.resume_token != recorded;
    pp.rollout = Some(eval.status);
    match &eval.gate {
        Gate::Hold(h @ HoldReason::CircuitBroken { .. }) => pp.breaker = Some(h.clone()),
        Gate::Hold(h @ HoldReason::Soaking { .. }) => pp.soak = Some(h.clone()),
        _ => {}
    }
    let broken = pp.breaker.is_some();
    // In candidate order already (the layout's).
    // A node failing and unavailable (cordoned by the update it failed, or not Ready) is a
    // candidate too: see `stuck` below. Not one an admin cordoned: that cordon is theirs to lift
    // (drained, updated and uncordoned at Done, it was lost).
    let failing_unavailable = |i: usize| hot[i].failing() && hot[i].disrupted() && !hot[i].cordoned_by_hand();
    // A failing node sent back to the config it runs (a revert): nothing to apply, every count
    // lowered.
    let revert = |i: usize| failing_unavailable(i) && hot[i].runs(&target);
    let mut candidates: Vec<usize> =
        ordered.iter().copied().filter(|&i| behind[i] && (hot[i].ready() || failing_unavailable(i))).collect();
    // As MCO's node controller (`syncMachineConfigPool`: `syncStatusOnly` once the pool has a
    // deletionTimestamp): a pool being deleted gets its status and nothing else; no node is moved,
    // not even one with no config, while a finalizer holds the pool.
    if pool.metadata.deletion_timestamp.is_some() {
        pp.wait = waiting_any.then_some(Wait::Deleting);
        return pp;
    }
    // Outside every maintenance window the rollout is held as a pause holds it; updates under
    // way go on, and waiting nodes still pre-stage.
    let closed = match pool.spec.rollout.as_ref().and_then(|r| r.maintenance.as_ref()) {
        None => None,
        Some(m) => match Schedule::parse(m, "spec.rollout.maintenance") {
            Ok(schedule) => {
                let state = schedule.state(now);
                pp.window = Some(state.clone());
                match state {
                    WindowState::Open { .. } => None,
                    WindowState::Closed { opens } => {
                        Some(Wait::MaintenanceWindow { opens, local: schedule.local(opens) })
                    }
                }
            }
            Err(errors) => {
                Some(Wait::BadSchedule(errors.iter().map(ToString::to_string).collect::<Vec<_>>().join("; ")))
            }
        },
    };
    // A node that joins while the rollout is held (paused, breaker open, canaries out, config
    // soaking, no maintenance window open) has no config at all (Ready and schedulable, but nothing applied): it gets the
    // config MCO's machine-config-server would serve ([`FirstConfig`]: the target only once some
    // node runs it), within maxUnavailable and the budgets.
    let held = match (&eval.gate, pool.spec.paused) {
        (_, true) => Some(Held::Paused),
        (Gate::Hold(HoldReason::CircuitBroken { .. }), false) => Some(Held::CircuitBroken),
        (Gate::Hold(HoldReason::Canary { .. }), false) => Some(Held::Canary),
        (Gate::Hold(HoldReason::Soaking { .. }), false) => Some(Held::Soaking),
        (Gate::Pick { .. }, false) if closed.is_some() => Some(Held::MaintenanceWindow),
        _ => None,
    };
    // A failing node sent back to the config it runs goes through the policy's holds (below);
    // before any first config, which could wait for a slot such a node holds.
    let policy_hold = matches!(eval.gate, Gate::Hold(_)) && !pool.spec.paused && closed.is_none();
    let reverts_through_holds = policy_hold && candidates.iter().any(|&c| revert(c));
    let fresh_only = held.is_some() && !reverts_through_holds && candidates.iter().any(|&i| hot[i].unconfigured());
    if fresh_only {
        candidates.retain(|&i| hot[i].unconfigured());
        pp.first_config = held.map(|held| FirstConfig { config: served_config(pool, &pp.members, hot, &target), held });
    }
    let limit = match (&eval.gate, pool.spec.paused) {
        (_, true) => {
            pp.wait = waiting_any.then_some(Wait::Paused);
            if fresh_only {
                usize::MAX
            } else {
                0
            }
        }
        (Gate::Hold(h), false) => {
            pp.wait = waiting_any.then(|| Wait::Policy(h.clone()));
            if fresh_only {
                usize::MAX
            } else {
                0
            }
        }
        (Gate::Pick { .. }, false) if closed.is_some() => {
            pp.wait = if waiting_any { closed } else { None };
            if fresh_only {
                usize::MAX
            } else {
                0
            }
        }
        (Gate::Pick { limit }, false) => limit.unwrap_or(usize::MAX),
    };
    if limit > 0 && !candidates.is_empty() {
        let max = pools::max_unavailable(pool.spec.max_unavailable.as_ref(), pp.members.len());
        // MCO also holds back capacity for nodes failing on the target even when they serve.
        let busy: Vec<usize> =
            pp.members.iter().copied().filter(|&i| hot[i].disrupted() || (!behind[i] && hot[i].degraded())).collect();
        let room = max.saturating_sub(busy.len());
        let capacity = room.min(limit);
        // By budget and group: each group's entry names only its own nodes (the nodes of a
        // budget's other groups are held by other counts).
        let mut blocked: BTreeMap<(String, String), (Blocked, Vec<usize>)> = BTreeMap::new();
        let mut unpicked = 0;
        // A node stuck Degraded/Unreconcilable on an older config is unavailable already and
        // counted as such: moving it to the new target (the usual way out of a bad config)
        // takes no slot and changes no budget count. Stuck whether it failed before reaching
        // that config (desired != current) or after (an OS update rolled back from its health
        // check: desired == current, still cordoned from its drain; without this a pool whose
        // only slot it held waited for it forever). Only while the pool and every disruption
        // budget selecting it are within their limits counting it: a pool or budget group already
        // over (nodes down for other reasons) disrupts nothing more.
        // In the canary phase (a limit from the policy) a stuck node moved to the untested
        // config is one of the canaries: the batch is never larger than the policy says. A
        // paused pool's first-config picks are no canaries: they may not even get the target.
        let within = busy.len() <= max;
        let stuck = |i: usize| within && failing_unavailable(i);
        let canary_limit = match eval.gate {
            Gate::Pick { limit: Some(l) } if pp.first_config.is_none() => Some(l),
            _ => None,
        };
        let (mut taken, mut stuck_taken) = (0, 0);
        for &c in &candidates {
            let canaries_full = canary_limit.is_some_and(|l| taken + stuck_taken >= l);
            // A failing node sent back to the config it runs (a revert) has nothing to apply:
            // its agent reports Done and it is available again. It lowers every count, so it
            // goes even when the pool or a budget is over its limit (failed nodes more than
            // maxUnavailable, or maxUnavailable lowered since): such a pool could take neither
            // a fix nor its revert until maxUnavailable was raised.
            if revert(c) {
                pp.picks.push(c);
                continue;
            }
            if stuck(c) && ledger.check(c).is_ok() {
                if canaries_full {
                    unpicked += 1;
                } else {
                    pp.picks.push(c);
                    stuck_taken += 1;
                }
                continue;
            }
            if taken >= capacity || canaries_full {
                unpicked += 1;
                continue;
            }
            match ledger.check(c) {
                Ok(()) => {
                    ledger.take(c);
                    pp.picks.push(c);
                    taken += 1;
                }
                Err(b) => {
                    blocked.entry((b.budget.clone(), b.group.key.clone())).or_insert_with(|| (b, Vec::new())).1.push(c)
                }
            }
        }
        pp.blocked = blocked.into_values().collect();
        // The nodes that were not candidates wait for the hold, as said above; a held pool's
        // nodes with no config, left without a slot, wait for maxUnavailable (the hold does not
        // hold them), and the wait says so.
        if unpicked > 0 {
            pp.wait = Some(if room <= limit {
                let mut is_busy = vec![false; facts.len()];
                for &i in &busy {
                    is_busy[i] = true;
                }
                let mut unavailable = busy;
                unavailable.extend(pp.picks.iter().filter(|&&i| !is_busy[i]));
                Wait::MaxUnavailable { max, unavailable }
            } else {
                let canaries = pool.spec.rollout.as_ref().and_then(|r| r.canary).unwrap_or(0).max(0) as usize;
                Wait::Policy(HoldReason::Canary { canaries })
            });
        }
    } else if limit == 0 && reverts_through_holds {
        // A failing node sent back to the config it runs has nothing to apply and lowers every
        // count (see the loop above): the policy's hold is about spreading the target, which it
        // does not. Held, it stayed Degraded, cordoned and out of service for the whole soak of
        // a reverted config that must prove itself again (one whose soak a newer config cut
        // short). Not through a pause or a closed maintenance window: those hold every change.
        // Nodes with no config get theirs in the next pass (a plan's picks all get one config).
        pp.picks.extend(candidates.iter().copied().filter(|&c| revert(c)));
    } else if limit > 0 && waiting_any {
        // Candidates exist only once nodes are Ready again: that is what they wait for, not a
        // slot (there may be every slot free).
        let nodes: Vec<usize> =
            pp.members.iter().copied().filter(|&i| behind[i] && !hot[i].ready() && !hot[i].unconfigured()).collect();
        if !nodes.is_empty() {
            pp.wait = Some(Wait::NotReady { nodes });
        }
    }
    if pp.resume_unrecorded {
        pp.picks.clear();
    }
    // Pre-stage the target on every member that waits for its turn; never for a paused pool, a
    // config whose rollout the breaker stopped, or a pool that turned it off
    // (`spec.rollout.prestage: false`, which also withdraws annotations already set).
    let prestage_on = pool.spec.rollout.as_ref().and_then(|r| r.prestage).unwrap_or(true);
    let prestage_ok = prestage_on && !pool.spec.paused && !broken;
    let mut picked = pp.picks.clone();
    picked.sort_unstable();
    let picked = |i: usize| picked.binary_search(&i).is_ok();
    // Neighbours mostly run the same config: the last answer is kept.
    let mut last_os: Option<(&NodeHot, bool)> = None;
    for &i in pp.members.iter() {
        let h = &hot[i];
        // A target on the OS the node runs already has nothing to fetch.
        let want = prestage_ok
            && behind[i]
            && !picked(i)
            && !match last_os {
                Some((seen, same)) if seen.same_current(h) => same,
                _ => {
                    let same = same_os(&facts[i].current, &target);
                    last_os = Some((h, same));
                    same
                }
            };
        // Compared as text: a pass must not copy a string for each of thousands of members.
        if want && !h.prestages(&target) {
            pp.prestage.push((i, Some(target.to_string())));
        } else if !want && h.prestaging() {
            pp.prestage.push((i, None));
        }
    }
    pp
}

#[cfg(test)]
mod tests;
