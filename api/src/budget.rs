//! NodeDisruptionBudget (`aloft.dev/v1`): how many nodes of a labelled set may be unavailable at
//! once, counted across pools. Like a Kubernetes PodDisruptionBudget for nodes, with Flight
//! Control's `groupBy`: the budget applies separately to each group of nodes sharing the values
//! of the listed label keys (e.g. one budget per zone).

use crate::meta::{Condition, Extra, IntOrString, ObjectMeta};
use crate::selector::LabelSelector;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// `apiVersion` of NodeDisruptionBudget.
pub const API_VERSION: &str = "aloft.dev/v1";

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeDisruptionBudget {
    #[serde(default)]
    pub api_version: String,
    #[serde(default)]
    pub kind: String,
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: NodeDisruptionBudgetSpec,
    /// The coordinator's, written through the `status` subresource's rules (a user's write of the
    /// object keeps it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<NodeDisruptionBudgetStatus>,
    #[serde(flatten)]
    pub extra: Extra,
}

/// The condition type a budget's status carries, as a PodDisruptionBudget's.
pub const DISRUPTION_ALLOWED: &str = "DisruptionAllowed";
/// [`DISRUPTION_ALLOWED`] True: at least one node (of every group) may be disrupted now.
pub const SUFFICIENT_NODES: &str = "SufficientNodes";
/// [`DISRUPTION_ALLOWED`] False: no node (of some group) may be disrupted now.
pub const INSUFFICIENT_NODES: &str = "InsufficientNodes";

/// What the budget allows now, in a PodDisruptionBudget's words with nodes for pods, so that
/// `kubectl get ndb -o yaml` reads as `kubectl get pdb -o yaml` does. "Healthy" is the node
/// controller's reading of available (Ready, not cordoned, not updating or failed half-way, not
/// stuck in a drain): the very count the drain and node controllers check.
///
/// With `groupBy` the budget applies per group: `groups` has each group's counts, the
/// budget-wide counts are their sums, and `disruptionsAllowed` is the least any group allows
/// (a node of that group is the one that could not be disrupted).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeDisruptionBudgetStatus {
    /// The `metadata.generation` these counts were worked out for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    #[serde(default)]
    pub expected_nodes: i64,
    #[serde(default)]
    pub current_healthy: i64,
    #[serde(default)]
    pub desired_healthy: i64,
    #[serde(default)]
    pub disruptions_allowed: i64,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// One entry per group of `groupBy` label values; absent without `groupBy`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub groups: Vec<NodeDisruptionBudgetGroupStatus>,
    #[serde(flatten)]
    pub extra: Extra,
}

/// One `groupBy` group's counts (see [`NodeDisruptionBudgetStatus`]).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeDisruptionBudgetGroupStatus {
    /// The group's value of each `groupBy` key (empty for nodes without the label).
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    #[serde(default)]
    pub expected_nodes: i64,
    #[serde(default)]
    pub current_healthy: i64,
    #[serde(default)]
    pub desired_healthy: i64,
    #[serde(default)]
    pub disruptions_allowed: i64,
}

/// Exactly one of `min_available` and `max_unavailable` is set (admission refuses both or none).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeDisruptionBudgetSpec {
    /// Nodes this budget covers; an empty selector covers every node.
    #[serde(default)]
    pub selector: LabelSelector,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_available: Option<IntOrString>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_unavailable: Option<IntOrString>,
    /// Label keys; nodes with equal values for all of them form one group. Empty: one group.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub group_by: Vec<String>,
    #[serde(flatten)]
    pub extra: Extra,
}

/// Why a budget value is invalid.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BudgetValueError {
    #[error("{0} must be >= 0")]
    Negative(i64),
    #[error("{0:?} must be an integer or a percentage between 0% and 100% such as \"10%\"")]
    BadPercent(String),
}

/// An int or `N%` of `total`, rounded up when `round_up`. A budget rounds both of its values up,
/// as Kubernetes' disruption controller does a PodDisruptionBudget's (`minAvailable` to the safe
/// side; `maxUnavailable` so that `10%` of a 5-node group allows one node, not none: rounded
/// down, a group smaller than 100/N nodes could never be updated, and nothing said so).
pub fn resolve(v: &IntOrString, total: usize, round_up: bool) -> Result<usize, BudgetValueError> {
    match v {
        IntOrString::Int(i) if *i < 0 => Err(BudgetValueError::Negative(*i)),
        IntOrString::Int(i) => Ok(*i as usize),
        IntOrString::String(s) => {
            let p = s
                .strip_suffix('%')
                .and_then(|p| p.trim().parse::<usize>().ok())
                .filter(|p| *p <= 100)
                .ok_or_else(|| BudgetValueError::BadPercent(s.clone()))?;
            let scaled = total * p;
            Ok(if round_up { scaled.div_ceil(100) } else { scaled / 100 })
        }
    }
}

impl NodeDisruptionBudgetSpec {
    /// `spec.groupBy` keys given more than once, in Kubernetes' words (`spec.groupBy[1]:
    /// Duplicate value: "zone"`): a repeated key groups nothing differently, so it is a mistake.
    pub fn group_by_errors(&self) -> Vec<crate::reconcile::FieldError> {
        let mut seen = std::collections::HashSet::new();
        self.group_by
            .iter()
            .enumerate()
            .filter(|(_, k)| !seen.insert(k.as_str()))
            .map(|(i, k)| crate::reconcile::FieldError {
                field: format!("spec.groupBy[{i}]"),
                message: format!("Duplicate value: {k:?}"),
            })
            .collect()
    }

    /// How many nodes of a group of `total` may be unavailable at once: `total` less
    /// [`Self::desired_healthy`], never more than the group has (`maxUnavailable` above the
    /// group's size allows the whole group), so that what the group allows now, this less its
    /// unavailable nodes, is PodDisruptionBudget's `max(0, currentHealthy - desiredHealthy)`. A
    /// budget whose values do not resolve allows none (admission refuses such budgets; this is
    /// the safe reading of one stored before validation existed).
    pub fn allowed_unavailable(&self, total: usize) -> usize {
        match (&self.min_available, &self.max_unavailable) {
            (Some(min), None) => resolve(min, total, true).map(|m| total.saturating_sub(m)).unwrap_or(0),
            (None, Some(max)) => resolve(max, total, true).map(|m| m.min(total)).unwrap_or(0),
            _ => 0,
        }
    }

    /// How many nodes of a group of `total` must stay available: PodDisruptionBudget's
    /// `desiredHealthy`. It may exceed `total` (`minAvailable` above the group's size); a budget
    /// whose values do not resolve wants every node, as [`Self::allowed_unavailable`] allows none.
    pub fn desired_healthy(&self, total: usize) -> usize {
        match (&self.min_available, &self.max_unavailable) {
            (Some(min), None) => resolve(min, total, true).unwrap_or(total),
            (None, Some(max)) => resolve(max, total, true).map_or(total, |m| total.saturating_sub(m)),
            _ => total,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(min: Option<IntOrString>, max: Option<IntOrString>) -> NodeDisruptionBudgetSpec {
        NodeDisruptionBudgetSpec { min_available: min, max_unavailable: max, ..Default::default() }
    }

    fn s(v: &str) -> Option<IntOrString> {
        Some(IntOrString::String(v.into()))
    }

    #[test]
    fn allowed_unavailable_rounds_as_a_pdb() {
        assert_eq!(spec(Some(IntOrString::Int(2)), None).allowed_unavailable(5), 3);
        assert_eq!(spec(Some(IntOrString::Int(9)), None).allowed_unavailable(5), 0, "minAvailable above the group");
        assert_eq!(spec(s("50%"), None).allowed_unavailable(5), 2, "minAvailable 2.5 rounds up to 3");
        assert_eq!(spec(None, s("50%")).allowed_unavailable(5), 3, "maxUnavailable 2.5 rounds up, as a PDB's");
        assert_eq!(spec(None, s("10%")).allowed_unavailable(5), 1, "a small group is not blocked for good");
        assert_eq!(spec(None, s("0%")).allowed_unavailable(5), 0);
        assert_eq!(spec(None, Some(IntOrString::Int(0))).allowed_unavailable(5), 0);
        assert_eq!(spec(None, Some(IntOrString::Int(9))).allowed_unavailable(5), 5, "the whole group, no more");
        assert_eq!(spec(None, Some(IntOrString::Int(2))).allowed_unavailable(1), 1);
        assert_eq!(spec(None, s("bogus")).allowed_unavailable(5), 0, "unreadable: nothing allowed");
        assert_eq!(spec(None, None).allowed_unavailable(5), 0);
        assert_eq!(resolve(&IntOrString::Int(-1), 3, true), Err(BudgetValueError::Negative(-1)));
        assert!(resolve(&IntOrString::String("101%".into()), 3, true).is_err());
    }

    #[test]
    fn a_group_by_key_given_twice_is_a_duplicate() {
        let mut s = spec(None, Some(IntOrString::Int(1)));
        s.group_by = vec!["zone".into(), "rack".into(), "zone".into(), "zone".into()];
        let errs: Vec<(String, String)> = s.group_by_errors().into_iter().map(|e| (e.field, e.message)).collect();
        assert_eq!(
            errs,
            [
                ("spec.groupBy[2]".to_string(), "Duplicate value: \"zone\"".to_string()),
                ("spec.groupBy[3]".to_string(), "Duplicate value: \"zone\"".to_string()),
            ]
        );
        s.group_by.truncate(2);
        assert!(s.group_by_errors().is_empty());
    }

    #[test]
    fn desired_healthy_as_a_pdb_counts_it() {
        assert_eq!(spec(Some(IntOrString::Int(2)), None).desired_healthy(3), 2);
        assert_eq!(spec(Some(IntOrString::Int(9)), None).desired_healthy(5), 9, "more than the group has");
        assert_eq!(spec(s("50%"), None).desired_healthy(5), 3, "rounded up");
        assert_eq!(spec(None, s("50%")).desired_healthy(5), 2, "maxUnavailable 2.5 rounds up to 3");
        assert_eq!(spec(None, Some(IntOrString::Int(9))).desired_healthy(5), 0);
        assert_eq!(spec(None, s("bogus")).desired_healthy(5), 5, "unreadable: every node");
        assert_eq!(spec(None, None).desired_healthy(5), 5);
    }
}
