//! Annotation and label names shared by the coordinator and the agent. They are MCO's names, so
//! tooling written for OpenShift (dashboards, `oc describe node`, runbooks) reads aloft nodes too.

/// The rendered config the node runs now (written by the agent).
pub const CURRENT_CONFIG: &str = "machineconfiguration.openshift.io/currentConfig";
/// The rendered config the node should run (written by the coordinator's node controller).
pub const DESIRED_CONFIG: &str = "machineconfiguration.openshift.io/desiredConfig";
/// The agent's state: Done, Working, Degraded or Unreconcilable.
pub const STATE: &str = "machineconfiguration.openshift.io/state";
/// Why the node is in its state; empty when Done.
pub const REASON: &str = "machineconfiguration.openshift.io/reason";
/// What the agent asks of the drain controller: `drain-<rendered>` or `uncordon-<rendered>`.
pub const DESIRED_DRAIN: &str = "machineconfiguration.openshift.io/desiredDrain";
/// The drain controller's answer: the last `desiredDrain` value it completed.
pub const LAST_APPLIED_DRAIN: &str = "machineconfiguration.openshift.io/lastAppliedDrain";
/// Label on MachineConfigs selecting the pool they belong to (`worker`, `master`, custom).
pub const ROLE_LABEL: &str = "machineconfiguration.openshift.io/role";
/// Annotation on rendered configs naming the coordinator that generated them.
pub const GENERATED_BY: &str = "machineconfiguration.openshift.io/generated-by-controller-version";
