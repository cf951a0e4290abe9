//! NodeDisruptionBudgets as a ledger: for every budget and every group of the nodes it selects
//! (split by its `groupBy` label keys), how many nodes are unavailable now and how many may be.
//! The node controller asks it before picking a node, the drain controller before cordoning one.
//! Pure: built from a snapshot of nodes and budgets, updated in memory as picks are made. A
//! budget's `status` ([`status_of`]) is read off a ledger of the fleet as it is, so that it shows
//! the very counts the decisions check.

use aloft_api::budget::{DISRUPTION_ALLOWED, INSUFFICIENT_NODES, SUFFICIENT_NODES};
use aloft_api::meta::set_condition;
use aloft_api::{
    Condition, NodeDisruptionBudget, NodeDisruptionBudgetGroupStatus, NodeDisruptionBudgetStatus, Selector,
};
use std::collections::HashMap;

/// One group of one budget.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Group {
    /// `key=value,...` of the groupBy labels; empty without groupBy.
    pub key: String,
    /// The group's value of each groupBy key, in the spec's order.
    pub values: Vec<String>,
    pub total: usize,
    pub unavailable: usize,
    pub allowed: usize,
}

#[derive(Debug)]
struct Compiled {
    name: String,
    groups: Vec<Group>,
    /// Per node (snapshot index): the group it belongs to, if the budget selects it.
    node_group: Vec<Option<u32>>,
}

/// Why a node may not be disrupted now. `group.unavailable` counts the other nodes of the group
/// only: with the node itself they are more than the group allows. (Counting the node too, the
/// words changed once it was unavailable for the wait itself: a drain past its timeout read
/// "allows 1 ... and 2 already are", the second one the node held back.)
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Blocked {
    pub budget: String,
    pub group: Group,
}

impl std::fmt::Display for Blocked {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "NodeDisruptionBudget {} allows {} of {} nodes{} unavailable and {} already are",
            self.budget,
            self.group.allowed,
            self.group.total,
            if self.group.key.is_empty() { String::new() } else { format!(" ({})", self.group.key) },
            self.group.unavailable
        )?;
        // minAvailable the whole group (or maxUnavailable 0): no waiting ends this, only a
        // change of the budget or of the group; say so rather than let it look like a queue.
        if self.group.allowed == 0 {
            f.write_str(", which blocks the group for good")?;
        }
        Ok(())
    }
}

/// Every budget's groups and counts over one snapshot of nodes.
#[derive(Debug)]
pub struct Ledger {
    budgets: Vec<Compiled>,
    /// Per node: already counted as unavailable.
    counted: Vec<bool>,
}

impl Ledger {
    /// `labels[i]` and `unavailable[i]` describe node `i` of the snapshot. A budget whose selector
    /// does not compile selects nothing (admission refuses such budgets) and is logged.
    pub fn new(
        budgets: &[NodeDisruptionBudget],
        labels: &[&std::collections::BTreeMap<String, String>],
        unavailable: &[bool],
    ) -> Self {
        let mut compiled = Vec::with_capacity(budgets.len());
        for b in budgets {
            let selector = match b.spec.selector.to_selector() {
                Ok(s) => s,
                Err(e) => {
                    tracing::warn!(budget = %b.metadata.name, error = %e, "ignoring a budget whose selector is invalid");
                    continue;
                }
            };
            compiled.push(compile(b, &selector, labels, unavailable));
        }
        compiled.sort_by(|a, b| a.name.cmp(&b.name));
        Ledger { budgets: compiled, counted: unavailable.to_vec() }
    }

    /// Whether disrupting node `i` keeps every budget that selects it: its group's unavailable
    /// nodes, counting `i` itself, stay within what the group allows. Otherwise the budget that
    /// holds it: one that blocks its group for good (allows none) first, as no waiting ends
    /// that one (naming a budget that is merely full sent an operator to fix the wrong one);
    /// else the first by name.
    pub fn check(&self, i: usize) -> Result<(), Blocked> {
        let counted = self.counted.get(i).copied().unwrap_or(false);
        let mut first: Option<Blocked> = None;
        for b in &self.budgets {
            if let Some(g) = b.node_group.get(i).copied().flatten() {
                let g = &b.groups[g as usize];
                let others = g.unavailable.saturating_sub(usize::from(counted));
                if others + 1 > g.allowed {
                    let blocked = Blocked { budget: b.name.clone(), group: Group { unavailable: others, ..g.clone() } };
                    if g.allowed == 0 {
                        return Err(blocked);
                    }
                    first.get_or_insert(blocked);
                }
            }
        }
        first.map_or(Ok(()), Err)
    }

    /// Count node `i` as unavailable from now on (it was picked).
    pub fn take(&mut self, i: usize) {
        if self.counted.get(i).copied().unwrap_or(true) {
            return;
        }
        self.counted[i] = true;
        for b in &mut self.budgets {
            if let Some(g) = b.node_group.get(i).copied().flatten() {
                b.groups[g as usize].unavailable += 1;
            }
        }
    }

    /// Every group of every budget: (budget name, group). For tests and status.
    pub fn groups(&self) -> impl Iterator<Item = (&str, &Group)> {
        self.budgets.iter().flat_map(|b| b.groups.iter().map(move |g| (b.name.as_str(), g)))
    }

    /// The groups of budget `name` (none when it selects no node, or its selector is invalid).
    pub fn groups_of(&self, name: &str) -> &[Group] {
        self.budgets
            .binary_search_by(|b| b.name.as_str().cmp(name))
            .map_or(&[][..], |k| self.budgets[k].groups.as_slice())
    }
}

/// Budget `b`'s status from its groups in a [`Ledger`] built without picks (the fleet as it is),
/// as a PodDisruptionBudget's: `disruptionsAllowed` is what [`Ledger::check`] lets through now,
/// and with `groupBy` the least any group allows (each group's own counts are in `groups`). The
/// `DisruptionAllowed` condition keeps its `lastTransitionTime` from `old` while it holds.
pub fn status_of(
    b: &NodeDisruptionBudget,
    groups: &[Group],
    old: Option<&NodeDisruptionBudgetStatus>,
    now: &str,
) -> NodeDisruptionBudgetStatus {
    let mut per: Vec<(&Group, NodeDisruptionBudgetGroupStatus)> =
        groups.iter().map(|g| (g, group_status(b, g))).collect();
    per.sort_by(|a, b| a.0.key.cmp(&b.0.key));
    let sum = |f: fn(&NodeDisruptionBudgetGroupStatus) -> i64| per.iter().map(|(_, s)| f(s)).sum::<i64>();
    let least = per.iter().min_by_key(|(_, s)| s.disruptions_allowed);
    let mut st = NodeDisruptionBudgetStatus {
        observed_generation: b.metadata.generation,
        expected_nodes: sum(|s| s.expected_nodes),
        current_healthy: sum(|s| s.current_healthy),
        // No node selected: what the spec asks of an empty set (minAvailable's number), as a PDB
        // without pods shows it.
        desired_healthy: if per.is_empty() { count(b.spec.desired_healthy(0)) } else { sum(|s| s.desired_healthy) },
        disruptions_allowed: least.map_or(0, |(_, s)| s.disruptions_allowed),
        conditions: old.map(|o| o.conditions.clone()).unwrap_or_default(),
        groups: Vec::new(),
        extra: Default::default(),
    };
    let allowed = allowed_condition(least, !b.spec.group_by.is_empty());
    set_condition(&mut st.conditions, allowed, now);
    if !b.spec.group_by.is_empty() {
        st.groups = per.into_iter().map(|(_, s)| s).collect();
    }
    st
}

fn group_status(b: &NodeDisruptionBudget, g: &Group) -> NodeDisruptionBudgetGroupStatus {
    NodeDisruptionBudgetGroupStatus {
        labels: b.spec.group_by.iter().cloned().zip(g.values.iter().cloned()).collect(),
        expected_nodes: count(g.total),
        current_healthy: count(g.total.saturating_sub(g.unavailable)),
        desired_healthy: count(b.spec.desired_healthy(g.total)),
        disruptions_allowed: count(g.allowed.saturating_sub(g.unavailable)),
    }
}

/// A count as the API's integer (a fleet never comes near the limit; saturating all the same).
fn count(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// `DisruptionAllowed`, naming the group that allows the least when there are groups.
fn allowed_condition(least: Option<&(&Group, NodeDisruptionBudgetGroupStatus)>, grouped: bool) -> Condition {
    let counts = |s: &NodeDisruptionBudgetGroupStatus| {
        format!("{} of {} nodes healthy, {} required", s.current_healthy, s.expected_nodes, s.desired_healthy)
    };
    let (ok, message) = match least {
        None => (false, "the selector matches no node".to_string()),
        Some((g, s)) if grouped => (
            s.disruptions_allowed > 0,
            if s.disruptions_allowed > 0 {
                format!("every group allows a disruption; the fewest, {}, in group {}", s.disruptions_allowed, g.key)
            } else {
                format!("group {} allows no disruption: {}", g.key, counts(s))
            },
        ),
        Some((_, s)) => (
            s.disruptions_allowed > 0,
            if s.disruptions_allowed > 0 {
                format!("{} disruption(s) allowed: {}", s.disruptions_allowed, counts(s))
            } else {
                format!("no disruption allowed: {}", counts(s))
            },
        ),
    };
    Condition {
        type_: DISRUPTION_ALLOWED.into(),
        status: if ok { "True" } else { "False" }.into(),
        reason: if ok { SUFFICIENT_NODES } else { INSUFFICIENT_NODES }.into(),
        message,
        ..Default::default()
    }
}

fn compile(
    b: &NodeDisruptionBudget,
    selector: &Selector,
    labels: &[&std::collections::BTreeMap<String, String>],
    unavailable: &[bool],
) -> Compiled {
    let mut index: HashMap<Vec<&str>, u32> = HashMap::new();
    let mut groups: Vec<Group> = Vec::new();
    let mut node_group = Vec::with_capacity(labels.len());
    for (i, l) in labels.iter().enumerate() {
        if !selector.matches(l) {
            node_group.push(None);
            continue;
        }
        // A node without one of the labels forms a group with the others that lack it.
        let values: Vec<&str> = b.spec.group_by.iter().map(|k| l.get(k).map(String::as_str).unwrap_or("")).collect();
        let g = match index.get(&values) {
            Some(&g) => g,
            None => {
                let key: Vec<String> = b.spec.group_by.iter().zip(&values).map(|(k, v)| format!("{k}={v}")).collect();
                let owned = values.iter().map(|v| v.to_string()).collect();
                groups.push(Group { key: key.join(","), values: owned, total: 0, unavailable: 0, allowed: 0 });
                let g = (groups.len() - 1) as u32;
                index.insert(values, g);
                g
            }
        };
        let group = &mut groups[g as usize];
        group.total += 1;
        if unavailable.get(i).copied().unwrap_or(false) {
            group.unavailable += 1;
        }
        node_group.push(Some(g));
    }
    for g in &mut groups {
        g.allowed = b.spec.allowed_unavailable(g.total);
    }
    Compiled { name: b.metadata.name.clone(), groups, node_group }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::collections::BTreeMap;

    fn budget(name: &str, spec: serde_json::Value) -> NodeDisruptionBudget {
        serde_json::from_value(json!({"metadata": {"name": name}, "spec": spec})).unwrap()
    }

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn groups_and_checks() {
        let nodes = [
            labels(&[("app", "db"), ("zone", "a")]),
            labels(&[("app", "db"), ("zone", "a")]),
            labels(&[("app", "db"), ("zone", "b")]),
            labels(&[("app", "db"), ("zone", "b")]),
            labels(&[("app", "web")]),
        ];
        let refs: Vec<&BTreeMap<String, String>> = nodes.iter().collect();
        let budgets = [budget(
            "db-per-zone",
            json!({"selector": {"matchLabels": {"app": "db"}}, "maxUnavailable": 1, "groupBy": ["zone"]}),
        )];
        let mut l = Ledger::new(&budgets, &refs, &[true, false, false, false, false]);
        let b = l.check(1).unwrap_err();
        assert_eq!(b.budget, "db-per-zone");
        assert_eq!(b.group.key, "zone=a");
        assert_eq!(
            b.to_string(),
            "NodeDisruptionBudget db-per-zone allows 1 of 2 nodes (zone=a) unavailable and 1 already are"
        );
        assert!(l.check(0).is_ok(), "a node already counted does not count twice");
        // A node counted as unavailable (a drain past its timeout) and held back: the message
        // counts the others, as it did before the node was counted.
        let both = Ledger::new(&budgets, &refs, &[true, true, false, false, false]);
        assert_eq!(
            both.check(1).unwrap_err().to_string(),
            "NodeDisruptionBudget db-per-zone allows 1 of 2 nodes (zone=a) unavailable and 1 already are"
        );
        assert!(l.check(2).is_ok(), "another zone is another group");
        l.take(2);
        assert!(l.check(3).is_err());
        assert!(l.check(4).is_ok(), "not selected");
        assert_eq!(l.groups().count(), 2);
    }

    #[test]
    fn min_available_across_the_selected_set() {
        let nodes: Vec<BTreeMap<String, String>> = (0..4).map(|_| labels(&[("role", "w")])).collect();
        let refs: Vec<&BTreeMap<String, String>> = nodes.iter().collect();
        let budgets = [budget("keep3", json!({"minAvailable": 3}))];
        let mut l = Ledger::new(&budgets, &refs, &[false; 4]);
        assert!(l.check(0).is_ok());
        l.take(0);
        assert!(l.check(1).is_err());
        // A budget that is merely full is named after one that blocks the node for good.
        let both = [budget("a-full", json!({"maxUnavailable": 1})), budget("z-freeze", json!({"maxUnavailable": 0}))];
        let mut full = Ledger::new(&both, &refs, &[false; 4]);
        full.take(3);
        assert_eq!(full.check(0).unwrap_err().budget, "z-freeze");
        let all = [budget("all", json!({"minAvailable": "100%"}))];
        let b = Ledger::new(&all, &refs, &[false; 4]).check(0).unwrap_err();
        assert_eq!(
            b.to_string(),
            "NodeDisruptionBudget all allows 0 of 4 nodes unavailable and 0 already are, which blocks the group for good",
            "minAvailable 100% blocks every node, and says it is for good"
        );
    }

    /// A PodDisruptionBudget's status with nodes for pods: minAvailable 2 of 3 healthy nodes
    /// allows one disruption; one node down allows none, and the condition says so.
    #[test]
    fn status_counts_as_a_pdbs() {
        let nodes: Vec<BTreeMap<String, String>> = (0..3).map(|_| labels(&[("app", "db")])).collect();
        let refs: Vec<&BTreeMap<String, String>> = nodes.iter().collect();
        let mut b = budget("db", json!({"selector": {"matchLabels": {"app": "db"}}, "minAvailable": 2}));
        b.metadata.generation = Some(4);
        let status = |unavailable: &[bool], old: Option<&NodeDisruptionBudgetStatus>| {
            let l = Ledger::new(std::slice::from_ref(&b), &refs, unavailable);
            status_of(&b, l.groups_of("db"), old, "t1")
        };
        let st = status(&[false; 3], None);
        assert_eq!(
            (st.observed_generation, st.expected_nodes, st.current_healthy, st.desired_healthy, st.disruptions_allowed),
            (Some(4), 3, 2 + 1, 2, 1)
        );
        let c = &st.conditions[0];
        assert_eq!(
            (c.type_.as_str(), c.status.as_str(), c.reason.as_str()),
            ("DisruptionAllowed", "True", "SufficientNodes")
        );
        assert_eq!(c.message, "1 disruption(s) allowed: 3 of 3 nodes healthy, 2 required");
        assert!(st.groups.is_empty(), "no groups without groupBy");
        let down = status(&[false, true, false], Some(&st));
        assert_eq!((down.current_healthy, down.disruptions_allowed), (2, 0));
        let c = &down.conditions[0];
        assert_eq!((c.status.as_str(), c.reason.as_str()), ("False", "InsufficientNodes"));
        assert_eq!(c.message, "no disruption allowed: 2 of 3 nodes healthy, 2 required");
        assert_eq!(c.last_transition_time.as_deref(), Some("t1"));
        let none = Ledger::new(std::slice::from_ref(&b), &[], &[]);
        let empty = status_of(&b, none.groups_of("db"), None, "t1");
        assert_eq!((empty.expected_nodes, empty.desired_healthy, empty.disruptions_allowed), (0, 2, 0));
        assert_eq!(empty.conditions[0].message, "the selector matches no node");
    }

    /// maxUnavailable 2 over a single node that is down: currentHealthy 0, desiredHealthy 0, and
    /// as a PDB counts it, max(0, 0 - 0) = 0 disruptions allowed (not 2 - 1). The decision
    /// agrees: a healthy node of that group could not be taken down; the node already down may
    /// still be moved (it disrupts nothing more, as a PDB lets an unhealthy pod be evicted while
    /// currentHealthy >= desiredHealthy), and a second node would be blocked.
    #[test]
    fn max_unavailable_above_the_group_allows_what_a_pdb_does() {
        let nodes: Vec<BTreeMap<String, String>> = (0..1).map(|_| labels(&[("app", "db")])).collect();
        let refs: Vec<&BTreeMap<String, String>> = nodes.iter().collect();
        let b = budget("db", json!({"selector": {"matchLabels": {"app": "db"}}, "maxUnavailable": 2}));
        let l = Ledger::new(std::slice::from_ref(&b), &refs, &[true]);
        let st = status_of(&b, l.groups_of("db"), None, "t1");
        assert_eq!((st.expected_nodes, st.current_healthy, st.desired_healthy, st.disruptions_allowed), (1, 0, 0, 0));
        assert_eq!(st.conditions[0].status, "False");
        assert!(l.check(0).is_ok(), "the node already down may be moved");
        // Two nodes, one down: one more may go (2 allowed of 2), as the status says.
        let two: Vec<BTreeMap<String, String>> = (0..2).map(|_| labels(&[("app", "db")])).collect();
        let refs: Vec<&BTreeMap<String, String>> = two.iter().collect();
        let l = Ledger::new(std::slice::from_ref(&b), &refs, &[true, false]);
        let st = status_of(&b, l.groups_of("db"), None, "t1");
        assert_eq!((st.current_healthy, st.desired_healthy, st.disruptions_allowed), (1, 0, 1));
        assert!(l.check(1).is_ok());
    }

    /// With groupBy every group has its own counts, in label order, and the budget allows what
    /// its tightest group does.
    #[test]
    fn grouped_status_takes_the_least_of_its_groups() {
        let nodes = [
            labels(&[("app", "db"), ("zone", "b")]),
            labels(&[("app", "db"), ("zone", "a")]),
            labels(&[("app", "db"), ("zone", "a")]),
            labels(&[("app", "db"), ("zone", "b")]),
            labels(&[("app", "db")]),
        ];
        let refs: Vec<&BTreeMap<String, String>> = nodes.iter().collect();
        let b =
            budget("db", json!({"selector": {"matchLabels": {"app": "db"}}, "maxUnavailable": 1, "groupBy": ["zone"]}));
        let l = Ledger::new(std::slice::from_ref(&b), &refs, &[false, true, false, false, false]);
        let st = status_of(&b, l.groups_of("db"), None, "t1");
        let groups: Vec<(String, i64, i64, i64, i64)> = st
            .groups
            .iter()
            .map(|g| {
                let zone = g.labels.get("zone").cloned().unwrap_or_default();
                (zone, g.expected_nodes, g.current_healthy, g.desired_healthy, g.disruptions_allowed)
            })
            .collect();
        assert_eq!(
            groups,
            [("".into(), 1, 1, 0, 1), ("a".into(), 2, 1, 1, 0), ("b".into(), 2, 2, 1, 1)],
            "a node without the label is a group of its own kind"
        );
        assert_eq!((st.expected_nodes, st.current_healthy, st.desired_healthy, st.disruptions_allowed), (5, 4, 2, 0));
        assert_eq!(st.conditions[0].status, "False");
        assert_eq!(st.conditions[0].message, "group zone=a allows no disruption: 1 of 2 nodes healthy, 1 required");
        let l = Ledger::new(std::slice::from_ref(&b), &refs, &[false; 5]);
        let st = status_of(&b, l.groups_of("db"), None, "t1");
        assert_eq!(st.disruptions_allowed, 1);
        assert_eq!(st.conditions[0].message, "every group allows a disruption; the fewest, 1, in group zone=");
    }
}
