//! core/v1 Node, the parts aloft uses. A node's MCO state lives in its annotations
//! (see [`crate::annotations`]).

use crate::meta::{Condition, Extra, ObjectMeta};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Node {
    #[serde(default)]
    pub api_version: String,
    #[serde(default)]
    pub kind: String,
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: NodeSpec,
    #[serde(default)]
    pub status: NodeStatus,
    #[serde(flatten)]
    pub extra: Extra,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeSpec {
    /// Cordoned: the drain controller sets it before disruptive updates.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub unschedulable: bool,
    #[serde(flatten)]
    pub extra: Extra,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeStatus {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    #[serde(flatten)]
    pub extra: Extra,
}

impl Node {
    /// Ready as Kubernetes means it: the `Ready` condition is True.
    pub fn is_ready(&self) -> bool {
        crate::meta::find_condition(&self.status.conditions, "Ready").is_some_and(|c| c.is_true())
    }

    /// Ready as MCO's node controller means it (`isNodeReady`): `Ready` True, and neither
    /// `DiskPressure` nor `NetworkUnavailable` anything but False where the node reports them.
    /// Why: a node short of disk or network is unavailable to MCO, so it holds a slot of
    /// `maxUnavailable` and is not picked; counting it Ready let a rollout take one node more
    /// than the pool allows.
    pub fn is_ready_for_update(&self) -> bool {
        self.is_ready()
            && ["DiskPressure", "NetworkUnavailable"]
                .iter()
                .all(|t| crate::meta::find_condition(&self.status.conditions, t).is_none_or(|c| c.status == "False"))
    }

    pub fn annotation(&self, key: &str) -> Option<&str> {
        self.metadata.annotations.get(key).map(String::as_str)
    }
}
