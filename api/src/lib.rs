//! aloft-api: the resource types the coordinator and the agents exchange.
//!
//! Objects keep their OpenShift/Kubernetes shapes so that YAML written for OpenShift applies
//! unchanged. Every typed struct carries a flattened `extra` map, so reading an object into a type
//! and writing it back never drops a field this crate does not know about. This crate does no I/O.

pub mod annotations;
pub mod budget;
pub mod build;
pub mod catalog;
pub mod clusterversion;
pub mod content;
pub mod disruption;
pub mod exit;
pub mod exposition;
pub mod fleetlock;
pub mod ignition;
pub mod json_words;
pub mod log_spec;
pub mod machineconfig;
pub mod meta;
pub mod node;
pub mod node_limits;
pub mod olm;
pub mod os;
pub mod osimage;
pub mod packages;
pub mod reconcile;
pub mod render;
pub mod selector;
pub mod status;
#[cfg(test)]
mod testutil;
pub mod update_graph;

pub use budget::{
    NodeDisruptionBudget, NodeDisruptionBudgetGroupStatus, NodeDisruptionBudgetSpec, NodeDisruptionBudgetStatus,
};
pub use machineconfig::{
    DrainHook, DrainSettings, MachineConfig, MachineConfigPool, MachineConfigPoolSpec, MachineConfigPoolStatus,
    MachineConfigSpec, MaintenanceSchedule, MaintenanceWindow, PoolConfiguration, RolloutPhase, RolloutPolicy,
    RolloutStatus,
};
pub use meta::{Condition, IntOrString, ObjectMeta, ObjectReference, OwnerReference};
pub use node::{Node, NodeSpec, NodeStatus};
pub use selector::{LabelSelector, LabelSelectorRequirement, Selector, SelectorError};
pub use status::{Status, StatusCause, StatusDetails};

/// The API group of MachineConfig and MachineConfigPool, kept from OpenShift so YAML applies as is.
pub const MCO_GROUP: &str = "machineconfiguration.openshift.io";
/// `apiVersion` of MachineConfig and MachineConfigPool.
pub const MCO_API_VERSION: &str = "machineconfiguration.openshift.io/v1";
/// aloft's own API group, for resources OpenShift has no equivalent of.
pub const ALOFT_GROUP: &str = "aloft.dev";
