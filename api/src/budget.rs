//! NodeDisruptionBudget (`aloft.dev/v1`): how many nodes of a labelled set may be unavailable at
//! once, counted across pools. Like a Kubernetes PodDisruptionBudget for nodes, with Flight
//! Control's `groupBy`: the budget applies separately to each group of nodes sharing the values
//! of the listed label keys (e.g. one budget per zone).

use crate::meta::{Extra, IntOrString, ObjectMeta};
use crate::selector::LabelSelector;
use serde::{Deserialize, Serialize};

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
    #[serde(flatten)]
    pub extra: Extra,
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

/// An int or `N%` of `total`. Percentages round up for `minAvailable` (`round_up`), down for
/// `maxUnavailable`, as Kubernetes rounds PodDisruptionBudgets: both err on the safe side.
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
    /// How many nodes of a group of `total` may be unavailable at once. A budget whose values do
    /// not resolve allows none (admission refuses such budgets; this is the safe reading of one
    /// stored before validation existed).
    pub fn allowed_unavailable(&self, total: usize) -> usize {
        match (&self.min_available, &self.max_unavailable) {
            (Some(min), None) => resolve(min, total, true).map(|m| total.saturating_sub(m)).unwrap_or(0),
            (None, Some(max)) => resolve(max, total, false).unwrap_or(0),
            _ => 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allowed_unavailable_rounds_safely() {
        let spec = |min: Option<IntOrString>, max: Option<IntOrString>| NodeDisruptionBudgetSpec {
            min_available: min,
            max_unavailable: max,
            ..Default::default()
        };
        let s = |v: &str| Some(IntOrString::String(v.into()));
        assert_eq!(spec(Some(IntOrString::Int(2)), None).allowed_unavailable(5), 3);
        assert_eq!(spec(Some(IntOrString::Int(9)), None).allowed_unavailable(5), 0, "minAvailable above the group");
        assert_eq!(spec(s("50%"), None).allowed_unavailable(5), 2, "minAvailable 2.5 rounds up to 3");
        assert_eq!(spec(None, s("50%")).allowed_unavailable(5), 2, "maxUnavailable 2.5 rounds down");
        assert_eq!(spec(None, Some(IntOrString::Int(0))).allowed_unavailable(5), 0);
        assert_eq!(spec(None, s("bogus")).allowed_unavailable(5), 0, "unreadable: nothing allowed");
        assert_eq!(spec(None, None).allowed_unavailable(5), 0);
        assert_eq!(resolve(&IntOrString::Int(-1), 3, true), Err(BudgetValueError::Negative(-1)));
        assert!(resolve(&IntOrString::String("101%".into()), 3, true).is_err());
    }
}
