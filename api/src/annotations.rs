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

/// aloft's own node annotations (the `aloft.dev/` prefix marks what OpenShift does not have).
///
/// Set by the node controller on nodes of a pool that are not yet on the pool's target and not
/// picked: the rendered config to fetch in the background, so that a node's unavailable window
/// is drain + apply + reboot only. Removed when the node gets `desiredConfig`.
pub const PRESTAGE_CONFIG: &str = "aloft.dev/prestageConfig";
/// The agent's answer to [`PRESTAGE_CONFIG`]: the rendered config whose OS image it has fetched.
pub const PRESTAGED_CONFIG: &str = "aloft.dev/prestagedConfig";
/// Written by the drain controller when it first sees a drain request it has not finished:
/// `<desiredDrain value>@<RFC 3339 time>`. The drain timeout counts from here, across restarts.
pub const DRAIN_STARTED: &str = "aloft.dev/drainStarted";
/// Written by the drain controller when a drain has not finished within the pool's drain timeout:
/// why. The node counts as degraded (pool NodeDegraded, `get nodes` shows it) until the drain
/// finishes; the controller keeps retrying.
pub const DRAIN_FAILURE: &str = "aloft.dev/drainFailure";
/// Written by the drain controller with the cordon of a drain that calls drain hooks: the pool
/// whose hooks those are. The node's uncordon calls the same pool's hooks, even when the node
/// has left that pool since (a label or a selector changed): a load balancer told to drain the
/// node is told to take it back. Removed by the uncordon.
pub const DRAIN_POOL: &str = "aloft.dev/drainPool";
/// Written by the drain controller when it drains a node someone had cordoned already (a
/// `kubectl cordon` made after the node controller picked the node and before the drain): the
/// uncordon that ends the drain leaves that cordon standing, as it leaves a cordon no drain
/// made. Without it the admin's cordon, indistinguishable from the drain's, was lifted at Done.
/// Removed by that uncordon.
pub const CORDONED_BEFORE_DRAIN: &str = "aloft.dev/cordonedBeforeDrain";
/// On a MachineConfigPool: set by `aloftctl rollout resume` (any new value, a timestamp) to
/// close a tripped circuit breaker. The controller remembers the last value it honoured in
/// `status.rollout.resumeToken`, so each new value resumes exactly once.
pub const RESUME_ROLLOUT: &str = "aloft.dev/resumeRollout";
/// Set by the node controller when its pick cordons a node and answers the drain itself (a pool
/// without drain hooks): the rendered config the pick is for. The agent's Done report on that
/// config then comes back uncordoned, in the same write (the coordinator's API server applies
/// it, the node cannot: only the coordinator may change this annotation). Saves every node
/// update a second write of the Node, its watch event to the agent, and a controller edit.
/// Removed by that uncordon, or by any later pick or release.
pub const UNCORDON_AT_DONE: &str = "aloft.dev/uncordonAtDone";

/// Written by the agent while an update's OS download runs long: how far it is (`downloading
/// OS commit <checksum>: 40 of 1,200 objects, 310 MB in 1m30s`), every
/// `--os-progress-report-seconds` (30 s by default) once the download has taken that long, so
/// `aloftctl get nodes` and `kubectl get nodes` show it in REASON while the node updates (a
/// picked node downloads before its Working report). Removed when the download ends, and by
/// every state report (Working, Done, a failure). MCO has no such
/// annotation (its MachineConfigNode says which step a node is in, not how far a download is).
pub const PROGRESS: &str = "aloft.dev/progress";

/// Written by the agent with every Degraded or Unreconcilable report: the rendered config the
/// failure is about (the update's target; for drift, the config the node runs). MCO's `state` and
/// `reason` do not say, and a node retargeted while failing still carries the old config's
/// failure until its agent reports again: the rollout's circuit breaker counts a failure only
/// for the config named here. Removed (null) by the Working and Done reports, in the same write.
pub const FAILED_CONFIG: &str = "aloft.dev/failedConfig";
