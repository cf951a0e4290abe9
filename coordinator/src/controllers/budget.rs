//! NodeDisruptionBudgets as a ledger: for every budget and every group of the nodes it selects
//! (split by its `groupBy` label keys), how many nodes are unavailable now and how many may be.
//! The node controller asks it before picking a node, the drain controller before cordoning one.
//! Pure: built from a snapshot of nodes and budgets, updated in memory as picks are made.

use aloft_api::{NodeDisruptionBudget, Selector};
use std::collections::HashMap;

/// One group of one budget.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Group {
    /// `key=value,...` of the groupBy labels; empty without groupBy.
    pub key: String,
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

/// Why a node may not be disrupted now.
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
    /// nodes, counting `i` itself, stay within what the group allows. The first budget that
    /// would be violated, by name, otherwise.
    pub fn check(&self, i: usize) -> Result<(), Blocked> {
        let extra = usize::from(!self.counted.get(i).copied().unwrap_or(false));
        for b in &self.budgets {
            if let Some(g) = b.node_group.get(i).copied().flatten() {
                let g = &b.groups[g as usize];
                if g.unavailable + extra > g.allowed {
                    return Err(Blocked { budget: b.name.clone(), group: g.clone() });
                }
            }
        }
        Ok(())
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
                groups.push(Group { key: key.join(","), total: 0, unavailable: 0, allowed: 0 });
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
        let all = [budget("all", json!({"minAvailable": "100%"}))];
        let b = Ledger::new(&all, &refs, &[false; 4]).check(0).unwrap_err();
        assert_eq!(
            b.to_string(),
            "NodeDisruptionBudget all allows 0 of 4 nodes unavailable and 0 already are, which blocks the group for good",
            "minAvailable 100% blocks every node, and says it is for good"
        );
    }
}
