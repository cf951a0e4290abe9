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
    #[serde(default, rename = "osImageURL", skip_serializing_if = "String::is_empty")]
    pub os_image_url: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub kernel_arguments: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub extensions: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fips: Option<bool>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
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
    #[serde(flatten)]
    pub extra: Extra,
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
    #[serde(flatten)]
    pub extra: Extra,
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
}
