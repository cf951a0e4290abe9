//! FleetLock (`aloft.dev/v1`): a reboot semaphore for hosts that update themselves with
//! Zincati's `fleet_lock` strategy (Fedora CoreOS), served by the coordinator over the FleetLock
//! protocol, as airlock serves it. Each object is one FleetLock group (its name); its status
//! lists the hosts holding a slot, which airlock keeps out of sight.

use crate::meta::{Extra, ObjectMeta};
use serde::{Deserialize, Serialize};

/// `apiVersion` of FleetLock.
pub const API_VERSION: &str = "aloft.dev/v1";

/// The slots of a group whose `spec.maxHolders` is unset: one host reboots at a time, as
/// airlock's default.
pub const DEFAULT_MAX_HOLDERS: i64 = 1;

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FleetLock {
    #[serde(default)]
    pub api_version: String,
    #[serde(default)]
    pub kind: String,
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: FleetLockSpec,
    /// The coordinator's (a `status` subresource): the holders, as the FleetLock protocol's
    /// requests left them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<FleetLockStatus>,
    #[serde(flatten)]
    pub extra: Extra,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FleetLockSpec {
    /// How many hosts of the group may hold a slot (reboot) at once; default 1. Lowering it
    /// takes no slot back: holders keep theirs until they release them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_holders: Option<i64>,
    #[serde(flatten)]
    pub extra: Extra,
}

impl FleetLockSpec {
    pub fn max_holders(&self) -> usize {
        usize::try_from(self.max_holders.unwrap_or(DEFAULT_MAX_HOLDERS)).unwrap_or(0)
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FleetLockStatus {
    #[serde(default)]
    pub holders: Vec<FleetLockHolder>,
    #[serde(flatten)]
    pub extra: Extra,
}

/// A host holding a slot: the FleetLock `client_params.id` (Zincati sends the host's
/// app-specific machine ID) and when it took the slot.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FleetLockHolder {
    #[serde(default)]
    pub id: String,
    /// RFC 3339.
    #[serde(default)]
    pub since: String,
    #[serde(flatten)]
    pub extra: Extra,
}
