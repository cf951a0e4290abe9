//! MachineConfig and MachineConfigPool, in OpenShift's `machineconfiguration.openshift.io/v1` shape.

use crate::meta::{Condition, Extra, IntOrString, ObjectMeta, ObjectReference};
use crate::selector::LabelSelector;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// One piece of a node's configuration. Pools merge the MachineConfigs they select into a
/// `rendered-<pool>-<hash>` MachineConfig, which is what nodes apply.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MachineConfig {
    #[serde(default)]
    pub api_version: String,
    #[serde(default)]
    pub kind: String,
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: MachineConfigSpec,
    #[serde(flatten)]
    pub extra: Extra,
}

/// `spec` of a MachineConfig. `config` stays raw JSON: it is an Ignition document whose version
/// decides its schema, and validation/conversion is the render step's job.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MachineConfigSpec {
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub config: Value,
    // null reads as unset: the installer's manifests write `kernelArguments: null`,
    // `extensions: null` (Go's nil slices), and MCO's CRD allows it.
    #[serde(
        default,
        rename = "osImageURL",
        skip_serializing_if = "String::is_empty",
        deserialize_with = "null_as_default"
    )]
    pub os_image_url: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty", deserialize_with = "null_as_empty")]
    pub kernel_arguments: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty", deserialize_with = "null_as_empty")]
    pub extensions: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fips: Option<bool>,
    #[serde(default, skip_serializing_if = "String::is_empty", deserialize_with = "null_as_default")]
    pub kernel_type: String,
    #[serde(flatten)]
    pub extra: Extra,
}

/// A set of nodes (by `nodeSelector`) that share one rendered config (from the MachineConfigs its
/// `machineConfigSelector` picks) and roll out together.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MachineConfigPool {
    #[serde(default)]
    pub api_version: String,
    #[serde(default)]
    pub kind: String,
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: MachineConfigPoolSpec,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<MachineConfigPoolStatus>,
    #[serde(flatten)]
    pub extra: Extra,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MachineConfigPoolSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub machine_config_selector: Option<LabelSelector>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_selector: Option<LabelSelector>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub paused: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_unavailable: Option<IntOrString>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub configuration: Option<PoolConfiguration>,
    /// aloft extension: canary batch, soak time and circuit breaker for each new config.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout: Option<RolloutPolicy>,
    /// aloft extension: drain timeout and drain hooks for the pool's nodes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drain: Option<DrainSettings>,
    #[serde(flatten)]
    pub extra: Extra,
}

/// `spec.rollout` (aloft extension; OpenShift's fields stay as they are). For each new rendered
/// config: first `canary` nodes only, then wait `soak_seconds` after they are all updated, then
/// batches of `maxUnavailable`. More than `max_failures` nodes failing on the config trips the
/// circuit breaker: the pool stops picking nodes for that config (condition `CircuitBroken`)
/// until the config changes or the user resumes it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RolloutPolicy {
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "bounded::count")]
    pub canary: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "bounded::duration")]
    pub soak_seconds: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "bounded::count")]
    pub max_failures: Option<i64>,
    /// Pre-stage the config's OS on nodes waiting for their turn (`aloft.dev/prestageConfig`);
    /// default true. `false` makes each node download its OS only once picked (the unavailable
    /// window then includes the download: the vm-tests compare both).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prestage: Option<bool>,
    /// When nodes may start an update (Zincati's periodic strategy, Flight Control's update
    /// schedule): outside every window no node is picked; updates under way finish, and waiting
    /// nodes still pre-stage, so the window is spent on drains and reboots, not downloads.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub maintenance: Option<MaintenanceSchedule>,
    #[serde(flatten)]
    pub extra: Extra,
}

/// `spec.rollout.maintenance`: weekly windows in one time zone.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MaintenanceSchedule {
    /// An IANA time zone name (`Europe/Berlin`), read from the coordinator's time zone database;
    /// default `UTC`. Windows follow its daylight saving time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_zone: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub windows: Vec<MaintenanceWindow>,
    #[serde(flatten)]
    pub extra: Extra,
}

/// One weekly window: it opens at `start_time` on each of `days` and stays open
/// `length_minutes` (past midnight if need be), as Zincati's `[[updates.periodic.window]]`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MaintenanceWindow {
    /// `Mon` .. `Sun` (or the full names), the days the window opens on.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub days: Vec<String>,
    /// `HH:MM`, 24-hour, in the schedule's time zone.
    #[serde(default)]
    pub start_time: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub length_minutes: Option<i64>,
    #[serde(flatten)]
    pub extra: Extra,
}

/// `spec.drain` (aloft extension).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DrainSettings {
    /// How long a drain may take before the node is reported degraded (default 3600, MCO's hour).
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "bounded::timeout")]
    pub timeout_seconds: Option<i64>,
    /// Called in order before a node is acknowledged drained, and after it is uncordoned.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hooks: Vec<DrainHook>,
    #[serde(flatten)]
    pub extra: Extra,
}

/// One drain webhook: `POST url` with a JSON body naming the node, the phase and the config; any
/// 2xx within `timeout_seconds` (default 30) is success.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DrainHook {
    #[serde(default)]
    pub url: String,
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "bounded::hook_timeout")]
    pub timeout_seconds: Option<i64>,
    #[serde(flatten)]
    pub extra: Extra,
}

/// Default drain timeout: MCO's hour.
pub const DEFAULT_DRAIN_TIMEOUT_SECONDS: i64 = 3600;
/// Default timeout of one drain hook call.
pub const DEFAULT_HOOK_TIMEOUT_SECONDS: i64 = 30;
/// The longest `spec.rollout.soakSeconds` and `spec.drain.timeoutSeconds` admission accepts: one
/// year. Longer is a mistake (or a unit mix-up), and times that far out overflow date arithmetic.
pub const MAX_DURATION_SECONDS: i64 = 365 * 24 * 3600;
/// The longest drain hook timeout admission accepts: one hour, MCO's whole drain budget. A hook
/// is one HTTP call; a load balancer that needs longer should answer and be polled again.
pub const MAX_HOOK_TIMEOUT_SECONDS: i64 = 3600;
/// The largest node count (`canary`, `maxFailures`, an integer `maxUnavailable`) admission
/// accepts: Kubernetes' counts are 32-bit.
pub const MAX_COUNT: i64 = i32::MAX as i64;

/// The pool's bounded numbers, read so that one no `i64` holds (a JSON number past 2^63, read as a
/// float, or any fraction) gets admission's words for the field (`Invalid value: N: must be at
/// most M`, as for one that fits, and `must be an integer` for a fraction) instead of serde's
/// `invalid type: floating point ..., expected i64`. The bounds themselves are admission's to
/// check: a number that fits is read as it is.
mod bounded {
    use super::{MAX_COUNT, MAX_DURATION_SECONDS, MAX_HOOK_TIMEOUT_SECONDS};
    use serde::de::{Deserializer, Error, Visitor};

    /// (least, most, what `most` is in words), as admission states the bound.
    type Bound = (i64, i64, &'static str);

    struct V(Bound);

    impl<'de> Visitor<'de> for V {
        type Value = Option<i64>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("an integer")
        }
        fn visit_i64<E: Error>(self, v: i64) -> Result<Option<i64>, E> {
            Ok(Some(v))
        }
        fn visit_u64<E: Error>(self, v: u64) -> Result<Option<i64>, E> {
            let (_, most, unit) = self.0;
            i64::try_from(v)
                .map(Some)
                .map_err(|_| E::custom(format!("Invalid value: {v}: must be at most {most}{unit}")))
        }
        fn visit_f64<E: Error>(self, v: f64) -> Result<Option<i64>, E> {
            let (least, most, unit) = self.0;
            // A whole number written as a float (`60.0`, `6e1`) is that integer, as the OpenAPI
            // validation of a CRD's `type: integer` field takes it (these are the pool's, a CRD in
            // OpenShift). 2^63 itself is an f64 that `as` would clamp: it stays out.
            if v.is_finite() && v.fract() == 0.0 && v >= i64::MIN as f64 && v < i64::MAX as f64 {
                return Ok(Some(v as i64));
            }
            Err(E::custom(if v.fract() != 0.0 || !v.is_finite() {
                format!("Invalid value: {v}: must be an integer")
            } else if v < 0.0 {
                format!("Invalid value: {v:e}: must be >= {least}")
            } else {
                format!("Invalid value: {v:e}: must be at most {most}{unit}")
            }))
        }
        fn visit_none<E: Error>(self) -> Result<Option<i64>, E> {
            Ok(None)
        }
        fn visit_unit<E: Error>(self) -> Result<Option<i64>, E> {
            Ok(None)
        }
        fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Option<i64>, D::Error> {
            d.deserialize_any(self)
        }
    }

    fn read<'de, D: Deserializer<'de>>(d: D, bound: Bound) -> Result<Option<i64>, D::Error> {
        d.deserialize_option(V(bound))
    }

    pub fn count<'de, D: Deserializer<'de>>(d: D) -> Result<Option<i64>, D::Error> {
        read(d, (0, MAX_COUNT, ""))
    }
    pub fn duration<'de, D: Deserializer<'de>>(d: D) -> Result<Option<i64>, D::Error> {
        read(d, (0, MAX_DURATION_SECONDS, " (one year)"))
    }
    pub fn timeout<'de, D: Deserializer<'de>>(d: D) -> Result<Option<i64>, D::Error> {
        read(d, (1, MAX_DURATION_SECONDS, " (one year)"))
    }
    pub fn hook_timeout<'de, D: Deserializer<'de>>(d: D) -> Result<Option<i64>, D::Error> {
        read(d, (1, MAX_HOOK_TIMEOUT_SECONDS, " (one hour)"))
    }
}

impl MachineConfigPoolSpec {
    pub fn drain_timeout_seconds(&self) -> i64 {
        self.drain.as_ref().and_then(|d| d.timeout_seconds).unwrap_or(DEFAULT_DRAIN_TIMEOUT_SECONDS)
    }
}

/// The rendered config a pool targets, and the MachineConfigs it was rendered from.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PoolConfiguration {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub source: Vec<ObjectReference>,
    #[serde(flatten)]
    pub extra: Extra,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MachineConfigPoolStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub configuration: Option<PoolConfiguration>,
    #[serde(default)]
    pub machine_count: i64,
    #[serde(default)]
    pub updated_machine_count: i64,
    #[serde(default)]
    pub ready_machine_count: i64,
    #[serde(default)]
    pub unavailable_machine_count: i64,
    #[serde(default)]
    pub degraded_machine_count: i64,
    #[serde(default, skip_serializing_if = "Vec::is_empty", deserialize_with = "null_as_empty")]
    pub conditions: Vec<Condition>,
    /// aloft extension, controller-owned: where the rollout policy stands for the pool's target,
    /// so that a restarted coordinator continues (soak timing, circuit breaker) rather than
    /// starting over.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout: Option<RolloutStatus>,
    #[serde(flatten)]
    pub extra: Extra,
}

/// The phase of a pool's rollout of one rendered config.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum RolloutPhase {
    /// Only the first `canary` nodes may be picked.
    #[default]
    Canary,
    /// The canaries are updated; nothing is picked until the soak time has passed.
    Soaking,
    /// maxUnavailable batches.
    Batches,
    /// The circuit breaker tripped: nothing is picked for this config.
    CircuitBroken,
    /// Every node of the pool (one at least) was updated on the config: its rollout is over. A
    /// node failing on it since (drift found on it, one that joined) is a degraded node, as MCO
    /// shows it, not a rollout to stop.
    Complete,
}

/// `status.rollout`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RolloutStatus {
    /// The rendered config this record is about; a new target starts a new record.
    #[serde(default)]
    pub config: String,
    #[serde(default)]
    pub phase: RolloutPhase,
    /// When the canaries were all updated (RFC 3339); the soak counts from here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub soak_start_time: Option<String>,
    /// Nodes that failed (Degraded/Unreconcilable, or drain timed out) on `config`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub failed_nodes: Vec<String>,
    /// Failures the user resumed past; they no longer count towards the breaker.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub forgiven_nodes: Vec<String>,
    /// The last `aloft.dev/resumeRollout` value honoured.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub resume_token: String,
    #[serde(flatten)]
    pub extra: Extra,
}

fn null_as_default<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de> + Default,
{
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

fn null_as_empty<'de, D, T>(d: D) -> Result<Vec<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    Ok(Option::<Vec<T>>::deserialize(d)?.unwrap_or_default())
}

/// Pool condition types, as MCO names them.
pub mod conditions {
    pub const UPDATED: &str = "Updated";
    pub const UPDATING: &str = "Updating";
    pub const DEGRADED: &str = "Degraded";
    pub const NODE_DEGRADED: &str = "NodeDegraded";
    pub const RENDER_DEGRADED: &str = "RenderDegraded";
    /// aloft: the canary nodes are updated and the pool waits out `spec.rollout.soakSeconds`.
    pub const CANARY_SOAKING: &str = "CanarySoaking";
    /// aloft: more than `spec.rollout.maxFailures` nodes failed on the target; nothing is picked.
    pub const CIRCUIT_BROKEN: &str = "CircuitBroken";
    /// aloft: a node's drain has not finished within `spec.drain.timeoutSeconds`.
    pub const NODE_DRAIN_TIMEOUT: &str = "NodeDrainTimeout";
    /// aloft: a NodeDisruptionBudget holds back nodes the pool would pick now (the lasting
    /// record of what the `BudgetBlocked` Events say, which expire).
    pub const BUDGET_BLOCKED: &str = "BudgetBlocked";
    /// aloft: nodes wait for the pool's next maintenance window (`spec.rollout.maintenance`).
    pub const MAINTENANCE_WINDOW_CLOSED: &str = "MaintenanceWindowClosed";
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A number no i64 holds gets admission's words, naming the bound; one that fits is read as
    /// it is (admission checks the bound); null is unset.
    #[test]
    fn pool_numbers_past_i64_say_what_the_field_allows() {
        let read = |v: &str| serde_json::from_str::<RolloutPolicy>(v).map_err(|e| e.to_string());
        let err = read(r#"{"maxFailures": 18446744073709551616}"#).unwrap_err();
        assert!(err.starts_with("Invalid value: 1.8446744073709552e19: must be at most 2147483647"), "{err}");
        let err = read(r#"{"soakSeconds": 18446744073709551615}"#).unwrap_err();
        assert!(err.starts_with("Invalid value: 18446744073709551615: must be at most 31536000 (one year)"), "{err}");
        let err = read(r#"{"canary": -1e30}"#).unwrap_err();
        assert!(err.starts_with("Invalid value: -1e30: must be >= 0"), "{err}");
        let err = read(r#"{"canary": 1.5}"#).unwrap_err();
        assert!(err.starts_with("Invalid value: 1.5: must be an integer"), "{err}");
        let err = serde_json::from_str::<DrainHook>(r#"{"timeoutSeconds": 1e20}"#).unwrap_err().to_string();
        assert!(err.starts_with("Invalid value: 1e20: must be at most 3600 (one hour)"), "{err}");
        assert_eq!(read(r#"{"maxFailures": 3, "canary": null}"#).unwrap().max_failures, Some(3));
        assert_eq!(read(r#"{"maxFailures": 9223372036854775807}"#).unwrap().max_failures, Some(i64::MAX));
        assert_eq!(read("{}").unwrap(), RolloutPolicy::default());
        // A whole number written as a float is that number (OpenAPI's `integer`).
        let p = read(r#"{"canary": 2.0, "soakSeconds": 6e1, "maxFailures": -0.0}"#).unwrap();
        assert_eq!((p.canary, p.soak_seconds, p.max_failures), (Some(2), Some(60), Some(0)));
        let err = read(r#"{"canary": 9.223372036854775807e18}"#).unwrap_err();
        assert!(err.starts_with("Invalid value: 9.223372036854776e18: must be at most 2147483647"), "{err}");
    }
}
