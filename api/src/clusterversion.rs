//! ClusterVersion (`config.openshift.io/v1`): the fleet's release and where its updates come
//! from, in the shape OpenShift's Cluster Version Operator keeps it, so `oc adm upgrade`'s
//! habits and YAML carry over.
//!
//! In aloft a release is an OS: the graph's `payload` of each release is an `osImageURL` an
//! agent can apply (`ostree+http(s)://…#REF@CHECKSUM`). Accepting a release writes it into the
//! release MachineConfigs, so it reaches the nodes on the one delivery path every config takes:
//! rendered per pool, rolled out under each pool's budget, reported back through the pools.

use crate::meta::{Condition, Extra, ObjectMeta};
use serde::{Deserialize, Serialize};

/// `apiVersion` of ClusterVersion.
pub const API_VERSION: &str = "config.openshift.io/v1";
/// The one ClusterVersion a fleet has, named as OpenShift names it.
pub const NAME: &str = "version";
/// How many entries `status.history` keeps (the CVO's limit).
pub const MAX_HISTORY: usize = 100;

/// Condition types, as the CVO names them.
pub const RETRIEVED_UPDATES: &str = "RetrievedUpdates";
pub const RELEASE_ACCEPTED: &str = "ReleaseAccepted";
pub const PROGRESSING: &str = "Progressing";
pub const AVAILABLE: &str = "Available";
pub const FAILING: &str = "Failing";
/// False while an installed operator cannot run on the next minor release (its
/// `olm.maxOpenShiftVersion`); absent otherwise, as the CVO leaves it.
pub const UPGRADEABLE: &str = "Upgradeable";
/// True while `spec.desiredUpdate` cannot name a release (a version alone that is neither an
/// available update nor in the history); the request is ignored meanwhile, as the CVO ignores it.
pub const INVALID: &str = "Invalid";
/// Upgradeable's reason then, OLM's.
pub const INCOMPATIBLE_OPERATORS: &str = "IncompatibleOperatorsInstalled";
/// The condition of each `status.conditionalUpdates[]` entry.
pub const RECOMMENDED: &str = "Recommended";

/// `status.history[].state`.
pub const COMPLETED: &str = "Completed";
pub const PARTIAL: &str = "Partial";

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterVersion {
    #[serde(default)]
    pub api_version: String,
    #[serde(default)]
    pub kind: String,
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: ClusterVersionSpec,
    /// The coordinator's (a `status` subresource).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<ClusterVersionStatus>,
    #[serde(flatten)]
    pub extra: Extra,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterVersionSpec {
    /// Sent to the update service as `id`, so it can tell fleets apart (a UUID).
    #[serde(default, rename = "clusterID", skip_serializing_if = "String::is_empty")]
    pub cluster_id: String,
    /// The update service's channel the fleet follows (`stable-1`, `fast-4.8`); none means
    /// no updates are looked for.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub channel: String,
    /// The update service's graph URL (`https://host/api/upgrades_info/v1/graph`). OpenShift
    /// falls back to Red Hat's service; aloft has no default.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub upstream: String,
    /// The release the fleet should run. Setting it starts an update.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub desired_update: Option<Update>,
    /// aloft's: take updates as they are offered, as Zincati does for a Fedora CoreOS host
    /// (OpenShift waits for an admin, or for OSD's upgrade policies).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub automatic_updates: Option<AutomaticUpdates>,
    #[serde(flatten)]
    pub extra: Extra,
}

/// When on, the controller sets `desiredUpdate` to the newest recommended update once the
/// current release has completed, newer than every release in the history (so a rollback by
/// hand holds until a newer release is offered) and passing the preconditions. The pools'
/// maintenance windows, canaries and budgets pace the rollout as for any release.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AutomaticUpdates {
    #[serde(default)]
    pub enabled: bool,
}

/// A release asked for by version (looked up in the update graph), by image (the payload
/// itself), or both (which must then agree).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Update {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub version: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub image: String,
    /// Take the release although a precondition fails (a rollback, a hop of more than one
    /// minor); the failures are kept in the history's `acceptedRisks`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub force: bool,
    #[serde(flatten)]
    pub extra: Extra,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterVersionStatus {
    /// The release being rolled out, or rolled out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub desired: Option<Release>,
    /// Newest first; at most [`MAX_HISTORY`].
    #[serde(default)]
    pub history: Vec<UpdateHistory>,
    #[serde(default)]
    pub observed_generation: i64,
    /// Releases the graph recommends from the current one.
    #[serde(default)]
    pub available_updates: Vec<Release>,
    /// Releases the graph offers with known risks, and whether they apply here.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditional_updates: Vec<ConditionalUpdate>,
    #[serde(default)]
    pub conditions: Vec<Condition>,
    #[serde(flatten)]
    pub extra: Extra,
}

/// A release as ClusterVersion shows it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Release {
    #[serde(default)]
    pub version: String,
    #[serde(default)]
    pub image: String,
    /// The release's notes (the graph's `metadata.url`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub url: String,
    /// The channels the release is in (the graph's
    /// `metadata["io.openshift.upgrades.graph.release.channels"]`, comma-separated there).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub channels: Vec<String>,
    #[serde(flatten)]
    pub extra: Extra,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct UpdateHistory {
    /// `Partial` until every pool runs the release, then `Completed`.
    #[serde(default)]
    pub state: String,
    /// RFC 3339.
    #[serde(default)]
    pub started_time: String,
    /// RFC 3339, null while Partial.
    #[serde(default)]
    pub completion_time: Option<String>,
    #[serde(default)]
    pub version: String,
    #[serde(default)]
    pub image: String,
    /// Whether the payload's signature was checked before it was accepted. aloft's releases
    /// are OS commits whose signatures each agent checks before it deploys them, so the
    /// coordinator reports false here, as the CVO does for an unverified payload.
    #[serde(default)]
    pub verified: bool,
    /// What `force` overrode, or the risks of a release not recommended, when it was accepted.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub accepted_risks: String,
    #[serde(flatten)]
    pub extra: Extra,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ConditionalUpdate {
    pub release: Release,
    #[serde(default)]
    pub risks: Vec<crate::update_graph::Risk>,
    /// `Recommended`: True, False (a risk applies) or Unknown (none could be evaluated).
    #[serde(default)]
    pub conditions: Vec<Condition>,
    #[serde(flatten)]
    pub extra: Extra,
}

/// The graph metadata key listing a release's channels.
pub const CHANNELS_KEY: &str = "io.openshift.upgrades.graph.release.channels";

impl Release {
    /// A graph node as ClusterVersion shows it.
    pub fn from_graph(r: &crate::update_graph::Release) -> Release {
        Release {
            version: r.version.clone(),
            image: r.payload.clone(),
            url: r.metadata.get("url").cloned().unwrap_or_default(),
            channels: r
                .metadata
                .get(CHANNELS_KEY)
                .map(|c| c.split(',').map(str::trim).filter(|c| !c.is_empty()).map(String::from).collect())
                .unwrap_or_default(),
            extra: Extra::default(),
        }
    }
}

impl ClusterVersion {
    /// The release the fleet runs or is moving to: `status.desired`.
    pub fn current(&self) -> Option<&Release> {
        self.status.as_ref().and_then(|s| s.desired.as_ref()).filter(|d| !d.version.is_empty())
    }
}

/// The `spec.channel` pattern (the update service refuses anything else).
pub fn valid_channel(c: &str) -> bool {
    !c.is_empty()
        && c.len() <= 100
        && c.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
}

/// The `spec.clusterID` form: a UUID, 8-4-4-4-12 hex digits.
pub fn valid_cluster_id(id: &str) -> bool {
    let groups: Vec<&str> = id.split('-').collect();
    groups.len() == 5
        && groups.iter().zip([8, 4, 4, 4, 12]).all(|(g, n)| g.len() == n && g.bytes().all(|b| b.is_ascii_hexdigit()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn openshift_yaml_reads_and_writes_back_in_the_same_shape() {
        let yaml = r#"
apiVersion: config.openshift.io/v1
kind: ClusterVersion
metadata: {name: version}
spec:
  clusterID: 5e5b4b5c-3a0e-4c8e-9f54-2c1d5a9e1f00
  channel: stable-4.8
  upstream: https://updates.example/api/upgrades_info/v1/graph
  desiredUpdate: {version: 4.8.2, force: true}
status:
  desired: {version: 4.8.1, image: "ostree+http://h/repo#r@abc", channels: [stable-4.8]}
  history:
  - {state: Completed, startedTime: "2026-01-01T00:00:00Z", completionTime: "2026-01-01T01:00:00Z", version: 4.8.1, image: x, verified: false}
  observedGeneration: 2
  availableUpdates: []
  conditions: [{type: Available, status: "True"}]
"#;
        let cv: ClusterVersion = yaml_serde::from_str(yaml).expect("parses");
        assert_eq!(cv.spec.cluster_id, "5e5b4b5c-3a0e-4c8e-9f54-2c1d5a9e1f00");
        assert!(cv.spec.desired_update.as_ref().is_some_and(|u| u.force && u.version == "4.8.2"));
        assert_eq!(cv.current().map(|r| r.version.as_str()), Some("4.8.1"));
        let back = serde_json::to_value(&cv).expect("serializes");
        assert_eq!(back["spec"]["clusterID"], "5e5b4b5c-3a0e-4c8e-9f54-2c1d5a9e1f00");
        assert_eq!(back["status"]["history"][0]["completionTime"], "2026-01-01T01:00:00Z");
        assert_eq!(back["status"]["desired"]["channels"][0], "stable-4.8");
    }

    #[test]
    fn channels_and_cluster_ids_are_checked_as_the_update_service_and_openshift_check_them() {
        for ok in ["stable-4.8", "fast-1.0", "candidate-4.12"] {
            assert!(valid_channel(ok), "{ok}");
        }
        for bad in ["", "Stable-4.8", "stable 4.8", "stable/4.8", "stable_4.8"] {
            assert!(!valid_channel(bad), "{bad}");
        }
        assert!(valid_cluster_id("5e5b4b5c-3a0e-4c8e-9f54-2c1d5a9e1f00"));
        for bad in ["", "5e5b4b5c3a0e4c8e9f542c1d5a9e1f00", "5e5b4b5c-3a0e-4c8e-9f54-2c1d5a9e1f0g", "a-b-c-d-e"] {
            assert!(!valid_cluster_id(bad), "{bad}");
        }
    }

    #[test]
    fn a_graph_node_shows_its_notes_and_channels() {
        let mut metadata = std::collections::BTreeMap::new();
        metadata.insert("url".to_string(), "https://notes/4.8.2".to_string());
        metadata.insert(CHANNELS_KEY.to_string(), "fast-4.8, stable-4.8,".to_string());
        let node = crate::update_graph::Release { version: "4.8.2".into(), payload: "p".into(), metadata };
        let r = Release::from_graph(&node);
        assert_eq!((r.version.as_str(), r.image.as_str(), r.url.as_str()), ("4.8.2", "p", "https://notes/4.8.2"));
        assert_eq!(r.channels, ["fast-4.8", "stable-4.8"]);
    }
}
