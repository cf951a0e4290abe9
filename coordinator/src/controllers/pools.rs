//! Pool membership and node facts, as MCO's node controller reads them. Pure functions, shared by
//! the node controller and the pool status computation.

use super::config_name::ConfigName;
use aloft_api::annotations as ann;
use aloft_api::{IntOrString, MachineConfigPool, Node};
use std::collections::BTreeMap;

/// The agent's states for a node that fails (MCO's Degraded, and Unreconcilable for a config it
/// refused), as opposed to updating or done.
pub fn failing_state(state: &str) -> bool {
    state == "Degraded" || state == "Unreconcilable"
}

/// What a node's annotations and conditions say about it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeFacts {
    pub current: ConfigName,
    pub desired: ConfigName,
    pub state: String,
    pub reason: String,
    /// Ready condition True and not cordoned.
    pub ready: bool,
    /// The drain controller's note that this node's drain is past its timeout (empty: none).
    pub drain_failure: String,
    /// The rendered config the node is asked to pre-stage (empty: none).
    pub prestage: ConfigName,
    /// The agent asked for a drain or an uncordon not yet acknowledged (what the drain
    /// controller looks for on every pass, kept here so a pass does not re-read every node).
    pub drain_pending: bool,
    /// `spec.unschedulable`.
    pub cordoned: bool,
    /// The drain handshake: `desiredDrain` (asked) and `lastAppliedDrain` (answered).
    pub drain_request: String,
    pub drain_answer: String,
    /// The config the agent's failure report names ([`ann::FAILED_CONFIG`]; empty: none, or an
    /// agent that does not name it).
    pub failed_config: ConfigName,
    /// The pool whose drain hooks drained the node ([`ann::DRAIN_POOL`]; empty: none did).
    pub drain_pool: String,
}

impl NodeFacts {
    pub fn of(n: &Node) -> Self {
        let a = |k| n.annotation(k).unwrap_or("").to_string();
        let name = |k| ConfigName::new(n.annotation(k).unwrap_or(""));
        NodeFacts {
            current: name(ann::CURRENT_CONFIG),
            desired: name(ann::DESIRED_CONFIG),
            state: a(ann::STATE),
            reason: a(ann::REASON),
            ready: n.is_ready_for_update() && !n.spec.unschedulable,
            drain_failure: a(ann::DRAIN_FAILURE),
            prestage: name(ann::PRESTAGE_CONFIG),
            drain_pending: {
                let want = n.annotation(ann::DESIRED_DRAIN).unwrap_or("");
                (want.starts_with("drain-") || want.starts_with("uncordon-"))
                    && n.annotation(ann::LAST_APPLIED_DRAIN) != Some(want)
            },
            cordoned: n.spec.unschedulable,
            drain_request: a(ann::DESIRED_DRAIN),
            drain_answer: a(ann::LAST_APPLIED_DRAIN),
            failed_config: name(ann::FAILED_CONFIG),
            drain_pool: a(ann::DRAIN_POOL),
        }
    }
    /// Failing on the config it is asked for: Degraded or Unreconcilable with a report that names
    /// that config, or stuck in its drain (the drain controller's mark is about the drain for the
    /// desired config). A node retargeted while failing keeps its old failure until its agent
    /// reports on the new config; the name tells the two apart. A failure that names no config
    /// (an agent from before `failedConfig`) counts for the desired config: for a circuit
    /// breaker, counting a failure too many is the safe side, missing one is not.
    pub fn failing_on_desired(&self) -> bool {
        !self.drain_failure.is_empty()
            || (failing_state(&self.state) && (self.failed_config.is_empty() || self.failed_config == self.desired))
    }
    /// Equal in everything the node controller decides on. The drain handshake is not: a
    /// node's drain request and its answer come and go while it updates, and the one step the
    /// node controller takes on them ([`NodeFacts::uncordon_due`]) follows a Done report, which
    /// is a change of state.
    pub fn same_for_rollout(&self, other: &NodeFacts) -> bool {
        // Every field named, so that a new one is a compile error here until it is decided on;
        // compared in place (this runs for every Node event).
        let NodeFacts {
            current,
            desired,
            state,
            reason,
            ready,
            drain_failure,
            prestage,
            cordoned,
            drain_pending: _,
            drain_request: _,
            drain_answer: _,
            drain_pool: _,
            failed_config,
        } = self;
        // A node moving to its desired config that goes from Done to Working (its agent took
        // the pick up) is unavailable before and after, and counted the same everywhere; only
        // failing states change a decision then. A pass for each such report was a third of a
        // 10,000-node rollout's passes, each reading the whole fleet.
        let moving = !desired.is_empty() && *desired != *current;
        (*state == other.state || (moving && !failing_state(state) && !failing_state(&other.state)))
            && *ready == other.ready
            && *cordoned == other.cordoned
            && *current == other.current
            && *desired == other.desired
            && *reason == other.reason
            && *drain_failure == other.drain_failure
            && *prestage == other.prestage
            && *failed_config == other.failed_config
    }
    /// Done on the config it was drained for, and still cordoned by that drain: the node goes
    /// back into service now ("uncordon after Done"). Either the agent asked for it
    /// (`uncordon-<config>`), or nobody asked: the coordinator drained the node when it picked
    /// it, and the agent's update needed no drain of its own (no request) or asked for that same
    /// drain and never for the uncordon (an agent from before Done carried it).
    pub fn uncordon_due(&self) -> bool {
        self.cordoned
            && self.done()
            && self.drain_answer.strip_prefix("drain-") == Some(self.current.as_str())
            && (self.drain_request.is_empty()
                || self.drain_request == self.drain_answer
                || self.drain_request.strip_prefix("uncordon-") == Some(self.current.as_str()))
    }
    /// Done on its desired config while a drain of ours made for another config still stands
    /// (its answer, or the pool whose hooks made it): an update that failed after its drain,
    /// then a revert or a newer config whose update needed no drain (in a pool with drain hooks
    /// the pick makes none), or a drain asked for an older config answered after the node moved
    /// on. MCO's daemon asks for the uncordon at the end of every update; nobody asked here, and
    /// the node stayed cordoned for good, holding a slot of maxUnavailable. Uncordoned by hand
    /// meanwhile, the drain's marks still stand, and must go too: left, they made the next
    /// cordon, the admin's own, look like that drain's. (Not a node with no config yet: as MCO's
    /// `isNodeDone`, it is not done with anything.)
    pub fn left_by_an_older_drain(&self) -> bool {
        self.done()
            && (self.drain_answer.starts_with("drain-") || !self.drain_pool.is_empty())
            && self.drain_answer.strip_prefix("drain-") != Some(self.current.as_str())
            && self.drain_request.strip_prefix("uncordon-") != Some(self.current.as_str())
    }
    /// Cordoned by the coordinator's pick for its desired config, then failed before asking for
    /// that drain (an update refused while it was being prepared): nothing was drained, so the
    /// node goes back into service, as it would have without the drain at the pick. It still
    /// counts as unavailable (it failed half-way); a retry asks for its drain again.
    pub fn failed_before_drain(&self) -> bool {
        self.cordoned
            && failing_state(&self.state)
            && self.drain_request.is_empty()
            && self.drain_answer.strip_prefix("drain-") == Some(self.desired.as_str())
    }
    /// Cordoned, and not by a drain of the coordinator's (none asked, none answered): by an
    /// admin (`kubectl cordon`). MCO never picks such a node, failing or not, so the cordon
    /// stays until the admin lifts it; a failing node aloft cordoned for its update is picked
    /// again to move it on.
    pub fn cordoned_by_hand(&self) -> bool {
        self.cordoned && !self.drain_answer.starts_with("drain-") && !self.drain_request.starts_with("drain-")
    }
    /// Degraded or Unreconcilable (failing, not updating), or stuck in a drain past its timeout.
    pub fn degraded(&self) -> bool {
        failing_state(&self.state) || !self.drain_failure.is_empty()
    }
    /// Counted in the pool's `degradedMachineCount` and named by its NodeDegraded condition:
    /// as MCO's `getDegradedMachines`, a node failing only once it has a desired config (one
    /// failing before it was given any has failed at no update of the pool's); and aloft's
    /// drains stuck past their timeout, whatever asked for them.
    pub fn status_degraded(&self) -> bool {
        (failing_state(&self.state) && !self.desired.is_empty()) || !self.drain_failure.is_empty()
    }
    /// Why the node is degraded: the drain controller's mark (which names the budget or hook
    /// that holds the drain, where the agent's own timeout only says it was not acknowledged),
    /// or the agent's reason; as `aloftctl get nodes` shows it.
    pub fn degraded_reason(&self) -> &str {
        if self.drain_failure.is_empty() {
            &self.reason
        } else {
            &self.drain_failure
        }
    }
    /// The rollout's reading of "unavailable", used for every pick and budget decision: not
    /// Ready or cordoned, asked to move to a config it has not finished (including nodes that
    /// failed half-way: a half-applied node is not serving), Working, stuck in a drain, or
    /// failing on the config it runs (drift found on it: MCO's `IsUnavailableForUpdate` counts
    /// it, as its status does; left out, a pool of `maxUnavailable: 1` with a drifted node took
    /// another node down for the next config, two unavailable at once).
    /// Stricter than MCO's status count ([`NodeFacts::unavailable`]), which lets nodes failing on
    /// their way out; MCO then subtracts those on the target separately, we count them wherever
    /// they are.
    pub fn disrupted(&self) -> bool {
        !self.ready
            || self.state == "Working"
            || failing_state(&self.state)
            || !self.drain_failure.is_empty()
            || (!self.desired.is_empty() && self.desired != self.current)
    }
    /// Asks for a drain not answered yet, and is otherwise in service (Ready, not cordoned, not
    /// failing): its agent disrupts nothing before the answer. Such nodes do not count against
    /// each other's drains (see `controllers::drain`).
    pub fn waits_for_its_drain(&self) -> bool {
        self.ready
            && !self.cordoned
            && !failing_state(&self.state)
            && self.drain_request.starts_with("drain-")
            && self.drain_answer != self.drain_request
    }
    /// Finished its last update: Done, on the config it was asked for. As MCO's `isNodeDone`,
    /// a node with no config yet (one that joined and waits for its first) is done with nothing.
    pub fn done(&self) -> bool {
        self.state == "Done" && !self.current.is_empty() && self.current == self.desired
    }
    /// MCO (`IsUnavailableForUpdate`): not ready, or neither done nor failing on its way to its
    /// desired config. A node failing on the config it runs (drift found on it: current ==
    /// desired) is not on its way anywhere, so MCO counts it, and so does this; a node with no
    /// config yet is not done ([`NodeFacts::done`]), so it counts too, as in MCO. (The pick
    /// reads [`NodeFacts::disrupted`], which lets such a node be given its first config.)
    pub fn unavailable(&self) -> bool {
        let failing_on_the_way = failing_state(&self.state) && self.current != self.desired;
        !self.ready || (!self.done() && !failing_on_the_way && self.drain_failure.is_empty())
    }
    /// On `target` and finished there.
    pub fn updated_to(&self, target: &ConfigName) -> bool {
        self.current == *target && self.desired == self.current && self.state == "Done"
    }
}

/// What a pass reads of every member of a pool, packed into 32 bytes and kept beside the facts it
/// is worked out from ([`NodeHot::of`]). A pass walks a 10,000-node pool several times; read
/// from [`NodeFacts`] (~170 bytes a node, its strings behind pointers) every member missed the
/// CPU's caches, and those walks were a quarter of the controllers' thread in a rollout.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NodeHot {
    /// [`ConfigName::id`]s of the facts' names, valid while those facts are held.
    desired: usize,
    current: usize,
    prestage: usize,
    flags: u16,
}

const HOT_READY: u16 = 1;
const HOT_DISRUPTED: u16 = 1 << 1;
const HOT_DEGRADED: u16 = 1 << 2;
const HOT_FAILING: u16 = 1 << 3;
const HOT_STATE_DONE: u16 = 1 << 4;
const HOT_PRESTAGE_SET: u16 = 1 << 5;
const HOT_STATUS_UNAVAILABLE: u16 = 1 << 6;
const HOT_DRAIN_FAILED: u16 = 1 << 7;
const HOT_FAILING_ON_DESIRED: u16 = 1 << 8;
const HOT_UNCONFIGURED: u16 = 1 << 9;
const HOT_CORDONED_BY_HAND: u16 = 1 << 10;
const HOT_STATUS_DEGRADED: u16 = 1 << 11;

impl NodeHot {
    pub fn of(f: &NodeFacts) -> Self {
        let flag = |on: bool, bit: u16| if on { bit } else { 0 };
        NodeHot {
            desired: f.desired.id(),
            current: f.current.id(),
            prestage: f.prestage.id(),
            flags: flag(f.ready, HOT_READY)
                | flag(f.disrupted(), HOT_DISRUPTED)
                | flag(f.degraded(), HOT_DEGRADED)
                | flag(failing_state(&f.state), HOT_FAILING)
                | flag(f.state == "Done", HOT_STATE_DONE)
                | flag(!f.prestage.is_empty(), HOT_PRESTAGE_SET)
                | flag(f.unavailable(), HOT_STATUS_UNAVAILABLE)
                | flag(!f.drain_failure.is_empty(), HOT_DRAIN_FAILED)
                | flag(f.failing_on_desired(), HOT_FAILING_ON_DESIRED)
                | flag(f.current.is_empty() && f.desired.is_empty(), HOT_UNCONFIGURED)
                | flag(f.cordoned_by_hand(), HOT_CORDONED_BY_HAND)
                | flag(f.status_degraded(), HOT_STATUS_DEGRADED),
        }
    }
    fn has(&self, bit: u16) -> bool {
        self.flags & bit != 0
    }
    /// Has never had a config: it joined the pool and its agent waits for its first one.
    pub fn unconfigured(&self) -> bool {
        self.has(HOT_UNCONFIGURED)
    }
    /// [`NodeFacts::cordoned_by_hand`].
    pub fn cordoned_by_hand(&self) -> bool {
        self.has(HOT_CORDONED_BY_HAND)
    }
    /// [`NodeFacts::ready`].
    pub fn ready(&self) -> bool {
        self.has(HOT_READY)
    }
    /// [`NodeFacts::disrupted`].
    pub fn disrupted(&self) -> bool {
        self.has(HOT_DISRUPTED)
    }
    /// [`NodeFacts::degraded`].
    pub fn degraded(&self) -> bool {
        self.has(HOT_DEGRADED)
    }
    /// [`NodeFacts::failing_on_desired`].
    pub fn failing_on_desired(&self) -> bool {
        self.has(HOT_FAILING_ON_DESIRED)
    }
    /// [`failing_state`] of the node's state.
    pub fn failing(&self) -> bool {
        self.has(HOT_FAILING)
    }
    /// [`NodeFacts::unavailable`], MCO's count for the pool's status.
    pub fn status_unavailable(&self) -> bool {
        self.has(HOT_STATUS_UNAVAILABLE)
    }
    /// [`NodeFacts::status_degraded`], MCO's degraded count for the pool's status.
    pub fn status_degraded(&self) -> bool {
        self.has(HOT_STATUS_DEGRADED)
    }
    /// The drain controller gave up waiting for this node's drain ([`NodeFacts::drain_failure`]).
    pub fn drain_failed(&self) -> bool {
        self.has(HOT_DRAIN_FAILED)
    }
    /// Asked to move to `target` (its desired config is `target`).
    pub fn desires(&self, target: &ConfigName) -> bool {
        self.desired == target.id()
    }
    /// Desired and current config differ.
    pub fn moving(&self) -> bool {
        self.desired != self.current
    }
    /// Runs `target` already (whatever it is asked for and however it is doing).
    pub fn runs(&self, target: &ConfigName) -> bool {
        self.current == target.id()
    }
    /// Runs the same current config as `other`.
    pub fn same_current(&self, other: &NodeHot) -> bool {
        self.current == other.current
    }
    /// [`NodeFacts::updated_to`].
    pub fn updated_to(&self, target: &ConfigName) -> bool {
        self.current == target.id() && self.desired == self.current && self.has(HOT_STATE_DONE)
    }
    /// Updated on `target` and back in service: Ready, uncordoned (its uncordon hooks, if any,
    /// have succeeded) and not stuck in a drain. What the rollout policy waits for before it
    /// counts a canary as proven, or forgets a node's failure: an agent reports Done before its
    /// uncordon, so Done alone is not the end of a node's update.
    pub fn in_service_on(&self, target: &ConfigName) -> bool {
        self.updated_to(target) && self.ready() && !self.drain_failed()
    }
    /// Asked to pre-stage `target`.
    pub fn prestages(&self, target: &ConfigName) -> bool {
        self.prestage == target.id()
    }
    /// Asked to pre-stage anything.
    pub fn prestaging(&self) -> bool {
        self.has(HOT_PRESTAGE_SET)
    }
}

/// The config MCO's machine-config-server gives a new machine of a pool: the target (`target`)
/// once some member runs it (`target_taken`), else the pool's last complete config
/// (`complete`, `status.configuration`), so that new machines do not join on a config no node
/// has taken yet; else (a pool never complete) the target. One rule for the two places a new
/// machine gets a config, so they agree: the machine config server's `/config/<pool>` and the
/// node controller's pick of a node with no config while the rollout is held.
pub fn served_to_new_machines<'a>(
    target: Option<&'a str>,
    complete: Option<&'a str>,
    target_taken: bool,
) -> Option<&'a str> {
    let (target, complete) = (target.filter(|t| !t.is_empty()), complete.filter(|c| !c.is_empty()));
    if target_taken {
        target.or(complete)
    } else {
        complete.or(target)
    }
}

/// `maxUnavailable` for a pool of `total` nodes: an int, or a percent rounded down; 0 means 1;
/// default 1 (MCO).
pub fn max_unavailable(v: Option<&IntOrString>, total: usize) -> usize {
    let n = match v {
        None => 1,
        Some(IntOrString::Int(i)) => (*i).max(0) as usize,
        Some(IntOrString::String(s)) => match s.strip_suffix('%').and_then(|p| p.trim().parse::<usize>().ok()) {
            Some(p) => total * p.min(100) / 100,
            None => 1,
        },
    };
    n.max(1)
}

fn is_master(p: &MachineConfigPool) -> bool {
    p.metadata.name == "master"
}
fn is_worker(p: &MachineConfigPool) -> bool {
    p.metadata.name == "worker"
}

/// Which pool each node belongs to. A node matched by master belongs to master; else by exactly
/// one custom pool, to it; else by worker, to worker. A node matched by two custom pools belongs
/// to none, and is reported in the second map (pool name -> message) on every pool involved.
pub fn membership(
    pools: &[MachineConfigPool],
    nodes: &[Node],
) -> (BTreeMap<String, Vec<usize>>, BTreeMap<String, String>) {
    let mut members: BTreeMap<String, Vec<usize>> =
        pools.iter().map(|p| (p.metadata.name.clone(), Vec::new())).collect();
    // Per pool, one phrase per node placed in no pool because of it.
    let mut misplaced: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let rules = Membership::new(pools);
    for (i, n) in nodes.iter().enumerate() {
        match rules.pool_of(n) {
            Ok(Some(p)) => members.entry(pools[p].metadata.name.clone()).or_default().push(i),
            Ok(None) => {}
            Err(custom) => {
                let names: Vec<&str> = custom.iter().map(|&p| pools[p].metadata.name.as_str()).collect();
                let phrase =
                    format!("node {} belongs to {} custom pools ({})", n.metadata.name, names.len(), names.join(", "));
                for name in &names {
                    misplaced.entry(name.to_string()).or_default().push(phrase.clone());
                }
            }
        }
    }
    let errors = misplaced.into_iter().map(|(pool, phrases)| (pool, misplaced_message(&phrases))).collect();
    (members, errors)
}

/// Every node a pool's selector placed in several custom pools, in one message (up to five by
/// name, then a count): naming only one sent an admin back once per misplaced node.
fn misplaced_message(phrases: &[String]) -> String {
    const NAMED: usize = 5;
    let mut text = phrases.iter().take(NAMED).cloned().collect::<Vec<_>>().join(", ");
    if phrases.len() > NAMED {
        text.push_str(&format!(", and {} more nodes", phrases.len() - NAMED));
    }
    let each = if phrases.len() == 1 { "it" } else { "each" };
    format!("{text}; {each} must belong to at most one")
}

/// [`membership`]'s rules with the pools' selectors compiled once, for placing nodes one at a
/// time (the drain controller places only the nodes that ask it something).
pub struct Membership<'a> {
    pools: &'a [MachineConfigPool],
    selectors: Vec<Option<aloft_api::Selector>>,
}

impl<'a> Membership<'a> {
    pub fn new(pools: &'a [MachineConfigPool]) -> Self {
        let selectors = pools
            .iter()
            .map(|p| p.spec.node_selector.as_ref().filter(|s| !s.is_empty()).and_then(|s| s.to_selector().ok()))
            .collect();
        Membership { pools, selectors }
    }

    /// The index of `node`'s pool; `Err` with the custom pools it matches when there are two or
    /// more (it then belongs to none).
    pub fn pool_of(&self, node: &Node) -> Result<Option<usize>, Vec<usize>> {
        let matching: Vec<usize> = (0..self.pools.len())
            .filter(|&p| self.selectors[p].as_ref().is_some_and(|s| s.matches(&node.metadata.labels)))
            .collect();
        if let Some(&m) = matching.iter().find(|&&p| is_master(&self.pools[p])) {
            return Ok(Some(m));
        }
        let custom: Vec<usize> = matching.iter().copied().filter(|&p| !is_worker(&self.pools[p])).collect();
        match custom.len() {
            0 => Ok(matching.into_iter().find(|&p| is_worker(&self.pools[p]))),
            1 => Ok(Some(custom[0])),
            _ => Err(custom),
        }
    }
}

/// MCO's candidate order: by zone label ascending (unzoned last), oldest first within a zone,
/// then by name for a stable order.
pub fn sort_candidates(nodes: &[Node], idx: &mut [usize]) {
    // Keys computed once per node, not per comparison: this sort runs over whole pools of
    // thousands of nodes on every pass.
    idx.sort_by_cached_key(|&i| {
        let n = &nodes[i];
        let zone = n.metadata.labels.get("topology.kubernetes.io/zone").map(String::as_str);
        (zone.is_none(), zone, n.metadata.creation_timestamp.as_deref(), n.metadata.name.as_str())
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pool(name: &str, sel: serde_json::Value) -> MachineConfigPool {
        serde_json::from_value(json!({"metadata": {"name": name}, "spec": {"nodeSelector": sel}})).unwrap()
    }
    fn node(name: &str, labels: serde_json::Value, zone: Option<&str>, created: &str) -> Node {
        let mut n: Node =
            serde_json::from_value(json!({"metadata": {"name": name, "labels": labels, "creationTimestamp": created}}))
                .unwrap();
        if let Some(z) = zone {
            n.metadata.labels.insert("topology.kubernetes.io/zone".into(), z.into());
        }
        n
    }

    #[test]
    fn uncordon_is_due_only_after_done_on_the_drained_config() {
        let f = |state: &str, current: &str, cordoned: bool, request: &str, answer: &str| NodeFacts {
            current: current.into(),
            desired: "r2".into(),
            state: state.into(),
            cordoned,
            drain_request: request.into(),
            drain_answer: answer.into(),
            ..Default::default()
        };
        // The agent drained and asks for the uncordon with its Done report.
        assert!(f("Done", "r2", true, "uncordon-r2", "drain-r2").uncordon_due());
        // The coordinator drained it at the pick and the update needed no drain: nobody asks.
        assert!(f("Done", "r2", true, "drain-r2", "drain-r2").uncordon_due());
        // Still updating, or not at the config yet.
        assert!(!f("Working", "r1", true, "drain-r2", "drain-r2").uncordon_due());
        assert!(!f("Done", "r1", true, "drain-r2", "drain-r2").uncordon_due());
        // Failed half-way: stays out of service.
        assert!(!f("Degraded", "r1", true, "drain-r2", "drain-r2").uncordon_due());
        // Already uncordoned, or cordoned by someone else (no drain of ours for this config).
        assert!(!f("Done", "r2", false, "uncordon-r2", "drain-r2").uncordon_due());
        assert!(!f("Done", "r2", true, "uncordon-r1", "uncordon-r1").uncordon_due());
        assert!(!f("Done", "r2", true, "", "").uncordon_due());
        // A drain still being asked for another config is the drain controller's.
        assert!(!f("Done", "r2", true, "drain-r3", "drain-r2").uncordon_due());
        // Drained at the pick, and the update needed no drain of the agent's (it never asked).
        assert!(f("Done", "r2", true, "", "drain-r2").uncordon_due());
    }

    /// A drain made for a config the node is no longer on: the update it was for failed after
    /// the drain, and a revert (or a newer config) needed none. Done, the node is due to end it,
    /// cordoned still or uncordoned by hand since (its marks go).
    #[test]
    fn a_drain_for_another_config_ends_once_the_node_is_done_on_its_own() {
        let f = |state: &str, cordoned: bool, request: &str, answer: &str, pool: &str| NodeFacts {
            current: "r1".into(),
            desired: "r1".into(),
            state: state.into(),
            cordoned,
            drain_request: request.into(),
            drain_answer: answer.into(),
            drain_pool: pool.into(),
            ..Default::default()
        };
        // Drained for r2 (through hooks, or not), failed, sent on to r1 and Done there.
        assert!(f("Done", true, "drain-r2", "drain-r2", "worker").left_by_an_older_drain());
        assert!(f("Done", true, "drain-r2", "drain-r2", "").left_by_an_older_drain());
        // A drain of hooks under way for a request the node has moved past.
        assert!(f("Done", true, "drain-r2", "uncordon-r0", "worker").left_by_an_older_drain());
        // Uncordoned by hand since: the marks still go.
        assert!(f("Done", false, "drain-r2", "drain-r2", "worker").left_by_an_older_drain());
        assert!(f("Done", false, "drain-r2", "drain-r2", "").left_by_an_older_drain());
        // Not Done, or its own drain (the usual uncordon's), or its uncordon asked.
        assert!(!f("Degraded", true, "drain-r2", "drain-r2", "worker").left_by_an_older_drain());
        assert!(!f("Working", true, "drain-r2", "drain-r2", "worker").left_by_an_older_drain());
        assert!(!f("Done", true, "uncordon-r1", "drain-r1", "").left_by_an_older_drain());
        assert!(!f("Done", true, "uncordon-r1", "drain-r2", "worker").left_by_an_older_drain());
        // A node with no config yet is done with nothing (a drain asked by hand, for one).
        let mut fresh = f("Done", true, "drain-r2", "drain-r2", "worker");
        (fresh.current, fresh.desired) = ("".into(), "".into());
        assert!(!fresh.left_by_an_older_drain());
        // An admin's cordon with no drain of ours standing: nothing to end.
        assert!(!f("Done", true, "uncordon-r0", "uncordon-r0", "").left_by_an_older_drain());
        assert!(!f("Done", true, "", "", "").left_by_an_older_drain());
    }

    #[test]
    fn a_node_failing_before_its_drain_goes_back_into_service() {
        let f = |state: &str, request: &str, answer: &str| NodeFacts {
            current: "r1".into(),
            desired: "r2".into(),
            state: state.into(),
            cordoned: true,
            drain_request: request.into(),
            drain_answer: answer.into(),
            ..Default::default()
        };
        assert!(f("Degraded", "", "drain-r2").failed_before_drain());
        assert!(f("Unreconcilable", "", "drain-r2").failed_before_drain());
        // It asked for the drain: drained, and stays out of service.
        assert!(!f("Degraded", "drain-r2", "drain-r2").failed_before_drain());
        // Still working on it, or cordoned for another config (or by someone else).
        assert!(!f("Working", "", "drain-r2").failed_before_drain());
        assert!(!f("Degraded", "", "drain-r1").failed_before_drain());
        assert!(!f("Degraded", "", "").failed_before_drain());
        assert!(!NodeFacts { cordoned: false, ..f("Degraded", "", "drain-r2") }.failed_before_drain());
    }

    #[test]
    fn the_drain_handshake_and_taking_the_pick_up_are_no_rollout_change() {
        let base = NodeFacts {
            current: "r1".into(),
            desired: "r2".into(),
            state: "Working".into(),
            ready: true,
            ..Default::default()
        };
        let handshake = NodeFacts {
            drain_pending: true,
            drain_request: "drain-r2".into(),
            drain_answer: "drain-r1".into(),
            ..base.clone()
        };
        assert!(base.same_for_rollout(&handshake) && handshake.same_for_rollout(&base));
        // The agent taking the pick up (Done, then Working, on the way from r1 to r2).
        let picked = NodeFacts { state: "Done".into(), ..base.clone() };
        assert!(picked.same_for_rollout(&base) && base.same_for_rollout(&picked));
        // The same state change on a node that is not moving is a change (Working counts it
        // unavailable), and so is any change into or out of a failing state.
        let settled = NodeFacts { current: "r2".into(), ..base.clone() };
        assert!(!settled.same_for_rollout(&NodeFacts { state: "Done".into(), ..settled.clone() }));
        let failed = NodeFacts { state: "Degraded".into(), ..base.clone() };
        assert!(!failed.same_for_rollout(&base) && !base.same_for_rollout(&failed));
        let changes = [
            NodeFacts { current: "r2".into(), ..base.clone() },
            NodeFacts { desired: "r3".into(), ..base.clone() },
            NodeFacts { state: "Degraded".into(), ..base.clone() },
            NodeFacts { state: "Unreconcilable".into(), ..base.clone() },
            NodeFacts { reason: "x".into(), ..base.clone() },
            NodeFacts { ready: false, ..base.clone() },
            NodeFacts { drain_failure: "x".into(), ..base.clone() },
            NodeFacts { prestage: "r2".into(), ..base.clone() },
            NodeFacts { cordoned: true, ..base.clone() },
            NodeFacts { failed_config: "r2".into(), ..base.clone() },
        ];
        for c in &changes {
            assert!(!base.same_for_rollout(c), "{c:?}");
        }
    }

    /// A failure counts for the config its report names; one that names another (the config the
    /// node was asked for before) does not, whatever its state and reason; one that names none is
    /// counted (the safe side); a drain past its timeout always is.
    #[test]
    fn a_failure_counts_for_the_config_it_names() {
        let n = |state: &str, failed: Option<&str>, drain_failure: &str| {
            let mut a = json!({ann::DESIRED_CONFIG: "rB", ann::CURRENT_CONFIG: "r0", ann::STATE: state,
                ann::REASON: "boom", ann::DRAIN_FAILURE: drain_failure});
            if let Some(c) = failed {
                a[ann::FAILED_CONFIG] = c.into();
            }
            NodeFacts::of(&serde_json::from_value(json!({"metadata": {"name": "a", "annotations": a}})).unwrap())
        };
        let on_a = n("Degraded", Some("rA"), "");
        assert!(on_a.failed_config == "rA" && !on_a.failing_on_desired() && on_a.degraded(), "{on_a:?}");
        assert!(!n("Unreconcilable", Some("rA"), "").failing_on_desired());
        for (f, why) in [
            (n("Degraded", Some("rB"), ""), "named the desired config"),
            (n("Unreconcilable", Some("rB"), ""), "refused the desired config"),
            (n("Degraded", None, ""), "named none: counted (the safe side)"),
            (n("Degraded", Some(""), ""), "named none"),
            (n("Degraded", Some("rA"), "drain timed out"), "its drain for the desired config is stuck"),
            (n("Working", None, "drain timed out"), "its drain for the desired config is stuck"),
        ] {
            assert!(f.failing_on_desired(), "{why}: {f:?}");
        }
        assert!(!n("Working", Some("rB"), "").failing_on_desired(), "not failing");
        assert!(!n("Done", None, "").failing_on_desired());
        // Only the name changes (the same failure, now on the desired config): a rollout change.
        assert!(!on_a.same_for_rollout(&n("Degraded", Some("rB"), "")));
    }

    #[test]
    fn max_unavailable_rules() {
        assert_eq!(max_unavailable(None, 10), 1);
        assert_eq!(max_unavailable(Some(&IntOrString::Int(0)), 10), 1);
        assert_eq!(max_unavailable(Some(&IntOrString::Int(3)), 10), 3);
        assert_eq!(max_unavailable(Some(&IntOrString::String("25%".into())), 10), 2, "rounded down");
        assert_eq!(max_unavailable(Some(&IntOrString::String("5%".into())), 10), 1, "0 means 1");
        assert_eq!(max_unavailable(Some(&IntOrString::String("100%".into())), 7), 7);
    }

    #[test]
    fn membership_precedence() {
        let pools = vec![
            pool("worker", json!({"matchLabels": {"node-role.kubernetes.io/worker": ""}})),
            pool("master", json!({"matchLabels": {"node-role.kubernetes.io/master": ""}})),
            pool("infra", json!({"matchLabels": {"node-role.kubernetes.io/infra": ""}})),
            pool("gpu", json!({"matchLabels": {"node-role.kubernetes.io/gpu": ""}})),
        ];
        let w = "node-role.kubernetes.io/worker";
        let nodes = vec![
            node("w", json!({w: ""}), None, "t"),
            node("wi", json!({w: "", "node-role.kubernetes.io/infra": ""}), None, "t"),
            node(
                "wm",
                json!({w: "", "node-role.kubernetes.io/master": "", "node-role.kubernetes.io/infra": ""}),
                None,
                "t",
            ),
            node(
                "two",
                json!({w: "", "node-role.kubernetes.io/infra": "", "node-role.kubernetes.io/gpu": ""}),
                None,
                "t",
            ),
            node("none", json!({}), None, "t"),
        ];
        let (m, errors) = membership(&pools, &nodes);
        assert_eq!(m["worker"], vec![0], "custom beats worker");
        assert_eq!(m["infra"], vec![1]);
        assert_eq!(m["master"], vec![2], "master beats custom");
        assert!(m["gpu"].is_empty());
        assert!(errors["infra"].contains("two") && errors["gpu"].contains("2 custom pools"));
    }

    /// Every node in several custom pools is named on each of them (the last one overwrote the
    /// others: an admin learnt of them one fix at a time), up to five, then counted.
    #[test]
    fn every_node_in_several_custom_pools_is_named() {
        let pools = vec![
            pool("infra", json!({"matchLabels": {"node-role.kubernetes.io/infra": ""}})),
            pool("gpu", json!({"matchLabels": {"node-role.kubernetes.io/gpu": ""}})),
        ];
        let both = json!({"node-role.kubernetes.io/infra": "", "node-role.kubernetes.io/gpu": ""});
        let nodes: Vec<Node> = (1..=2).map(|i| node(&format!("w{i}"), both.clone(), None, "t")).collect();
        let (_, errors) = membership(&pools, &nodes);
        let want = "node w1 belongs to 2 custom pools (infra, gpu), node w2 belongs to 2 custom pools (infra, gpu); \
                    each must belong to at most one";
        assert_eq!(errors["infra"], want);
        assert_eq!(errors["gpu"], want);
        let nodes: Vec<Node> = (1..=7).map(|i| node(&format!("w{i}"), both.clone(), None, "t")).collect();
        let (_, errors) = membership(&pools, &nodes);
        assert!(errors["infra"].contains("node w5 belongs") && !errors["infra"].contains("w6"), "{}", errors["infra"]);
        assert!(
            errors["infra"].ends_with(", and 2 more nodes; each must belong to at most one"),
            "{}",
            errors["infra"]
        );
    }

    #[test]
    fn candidates_by_zone_then_age() {
        let nodes = vec![
            node("a", json!({}), None, "2026-01-01T00:00:00Z"),
            node("b", json!({}), Some("z2"), "2026-01-01T00:00:00Z"),
            node("c", json!({}), Some("z1"), "2026-03-01T00:00:00Z"),
            node("d", json!({}), Some("z1"), "2026-02-01T00:00:00Z"),
        ];
        let mut idx = vec![0, 1, 2, 3];
        sort_candidates(&nodes, &mut idx);
        let names: Vec<&str> = idx.iter().map(|&i| nodes[i].metadata.name.as_str()).collect();
        assert_eq!(names, vec!["d", "c", "b", "a"]);
    }

    #[test]
    fn node_facts() {
        let mut n = node("a", json!({}), None, "t");
        n.status.conditions.push(aloft_api::Condition {
            type_: "Ready".into(),
            status: "True".into(),
            ..Default::default()
        });
        let set = |n: &mut Node, k: &str, v: &str| {
            n.metadata.annotations.insert(k.into(), v.into());
        };
        set(&mut n, ann::STATE, "Done");
        // As MCO's isNodeDone: no config yet is done with nothing, so counted unavailable.
        let fresh = NodeFacts::of(&n);
        assert!(!fresh.done() && fresh.unavailable() && !fresh.disrupted(), "fresh node, Done, no configs");
        set(&mut n, ann::STATE, "Degraded");
        let fresh = NodeFacts::of(&n);
        assert!(fresh.degraded() && !fresh.status_degraded(), "failing with no desired config: not counted degraded");
        set(&mut n, ann::STATE, "Done");
        set(&mut n, ann::DESIRED_CONFIG, "r2");
        assert!(NodeFacts::of(&n).unavailable(), "asked to update: unavailable");
        set(&mut n, ann::CURRENT_CONFIG, "r2");
        assert!(NodeFacts::of(&n).updated_to(&ConfigName::new("r2")));
        // As MCO's IsUnavailableForUpdate: a node failing on its way to a config is let out of
        // the count (it is counted as degraded); one failing on the config it runs (drift) is not.
        set(&mut n, ann::STATE, "Degraded");
        let f = NodeFacts::of(&n);
        assert!(f.degraded() && f.status_degraded() && f.unavailable(), "degraded on the config it runs");
        set(&mut n, ann::DESIRED_CONFIG, "r3");
        let f = NodeFacts::of(&n);
        assert!(f.degraded() && !f.unavailable(), "degraded on its way to r3");
        n.spec.unschedulable = true;
        assert!(NodeFacts::of(&n).unavailable(), "cordoned: unavailable");
    }

    /// The packed facts a pass reads say what the full facts say, for every combination of the
    /// fields they are worked out from.
    #[test]
    fn packed_facts_read_as_the_full_ones() {
        let (r1, r2, none) = (ConfigName::new("r1"), ConfigName::new("r2"), ConfigName::new(""));
        let configs = [&none, &r1, &r2];
        let mut seen = 0;
        for state in ["", "Done", "Working", "Degraded", "Unreconcilable", "Rebooting"] {
            let triples: Vec<(&ConfigName, &ConfigName, &ConfigName)> = configs
                .iter()
                .flat_map(|c| configs.iter().flat_map(|d| configs.iter().map(|p| (*c, *d, *p))).collect::<Vec<_>>())
                .collect();
            for (current, desired, prestage) in triples {
                let cases = [(true, ""), (false, ""), (true, "drain timed out")]
                    .into_iter()
                    .flat_map(|(r, d)| configs.iter().map(move |c| (r, d, *c)));
                for (ready, drain_failure, failed_config) in cases {
                    let f = NodeFacts {
                        current: current.clone(),
                        desired: desired.clone(),
                        prestage: prestage.clone(),
                        state: state.into(),
                        ready,
                        drain_failure: drain_failure.into(),
                        failed_config: failed_config.clone(),
                        ..Default::default()
                    };
                    let h = NodeHot::of(&f);
                    let case = format!("{f:?}");
                    assert_eq!(h.ready(), f.ready, "{case}");
                    assert_eq!(h.disrupted(), f.disrupted(), "{case}");
                    assert_eq!(h.degraded(), f.degraded(), "{case}");
                    assert_eq!(h.failing(), failing_state(&f.state), "{case}");
                    assert_eq!(h.status_unavailable(), f.unavailable(), "{case}");
                    assert_eq!(h.status_degraded(), f.status_degraded(), "{case}");
                    assert_eq!(h.drain_failed(), !f.drain_failure.is_empty(), "{case}");
                    assert_eq!(h.failing_on_desired(), f.failing_on_desired(), "{case}");
                    assert_eq!(h.moving(), f.desired != f.current, "{case}");
                    assert_eq!(h.prestaging(), !f.prestage.is_empty(), "{case}");
                    for target in configs {
                        assert_eq!(h.desires(target), f.desired == *target, "{case} {target}");
                        assert_eq!(h.updated_to(target), f.updated_to(target), "{case} {target}");
                        assert_eq!(h.prestages(target), f.prestage == *target, "{case} {target}");
                    }
                    let other = NodeHot::of(&NodeFacts { current: r1.clone(), ..Default::default() });
                    assert_eq!(h.same_current(&other), f.current == r1, "{case}");
                    seen += 1;
                }
            }
        }
        assert_eq!(seen, 6 * 27 * 3 * 3);
    }
}
