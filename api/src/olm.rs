//! The Operator Lifecycle Manager's objects (`operators.coreos.com/v1alpha1`): CatalogSource,
//! Subscription, InstallPlan and ClusterServiceVersion, in OLM's shapes so that the YAML and the
//! `oc`/`kubectl` habits of an OpenShift admin carry over.
//!
//! In aloft an operator bundle is a versioned set of MachineConfigs (with its CSV as the record
//! of what is installed): a subscription follows a catalog channel, an InstallPlan (approved by
//! hand or automatically) installs the next bundle, and the bundle's MachineConfigs reach the
//! nodes through the pools like any other config. The coordinator runs no Kubernetes workloads,
//! so a bundle that needs them (Deployments, CRDs) is refused by name instead of being half
//! installed.

use crate::meta::{Condition, Extra, ObjectMeta};
use serde::{Deserialize, Serialize};

/// The API group of OLM's objects.
pub const GROUP: &str = "operators.coreos.com";
/// `apiVersion` of CatalogSource, Subscription, InstallPlan and ClusterServiceVersion.
pub const API_VERSION: &str = "operators.coreos.com/v1alpha1";

/// The only `spec.sourceType` aloft reads: a file-based catalog fetched over HTTP(S) from
/// `spec.address` (what `opm render` writes, or OLM v1's `<base>/api/v1/all`). OLM's `grpc`
/// sources are catalog images run as pods, which aloft does not have.
pub const SOURCE_TYPE_HTTP: &str = "http";
/// OLM's default registry poll when the interval is missing or unreadable.
pub const DEFAULT_POLL_SECS: u64 = 15 * 60;

/// `status.connectionState.lastObservedState` (gRPC's connectivity states, as OLM shows them).
pub const READY: &str = "READY";
pub const TRANSIENT_FAILURE: &str = "TRANSIENT_FAILURE";
pub const CONNECTING: &str = "CONNECTING";

/// `spec.installPlanApproval`.
pub const AUTOMATIC: &str = "Automatic";
pub const MANUAL: &str = "Manual";

/// Subscription `status.state`.
pub const AT_LATEST_KNOWN: &str = "AtLatestKnown";
pub const UPGRADE_PENDING: &str = "UpgradePending";
pub const UPGRADE_FAILED: &str = "UpgradeFailed";

/// Subscription condition types.
pub const CATALOG_SOURCES_UNHEALTHY: &str = "CatalogSourcesUnhealthy";
pub const RESOLUTION_FAILED: &str = "ResolutionFailed";
pub const INSTALL_PLAN_PENDING: &str = "InstallPlanPending";
pub const INSTALL_PLAN_FAILED: &str = "InstallPlanFailed";
pub const DEPRECATED: &str = "Deprecated";
pub const PACKAGE_DEPRECATED: &str = "PackageDeprecated";
pub const CHANNEL_DEPRECATED: &str = "ChannelDeprecated";
pub const BUNDLE_DEPRECATED: &str = "BundleDeprecated";

/// InstallPlan `status.phase`.
pub const PLAN_REQUIRES_APPROVAL: &str = "RequiresApproval";
pub const PLAN_INSTALLING: &str = "Installing";
pub const PLAN_COMPLETE: &str = "Complete";
pub const PLAN_FAILED: &str = "Failed";

/// ClusterServiceVersion `status.phase`.
pub const CSV_PENDING: &str = "Pending";
pub const CSV_INSTALLING: &str = "Installing";
pub const CSV_SUCCEEDED: &str = "Succeeded";
pub const CSV_FAILED: &str = "Failed";
pub const CSV_REPLACING: &str = "Replacing";

/// The labels aloft puts on the MachineConfigs an InstallPlan created: the CSV's name and
/// namespace (a cluster-scoped MachineConfig cannot hold an owner reference to a namespaced
/// CSV), so a bundle's configs are found, replaced on upgrade and removed with it.
pub const OWNER_CSV_LABEL: &str = "olm.aloft.dev/csv";
pub const OWNER_NAMESPACE_LABEL: &str = "olm.aloft.dev/namespace";
/// The annotation aloft puts on a CSV an InstallPlan created, naming the plan: a plan takes
/// only its own CSV as written (a retry after a pass cut short), refuses any other of that
/// name, and deletes its own when it fails, so a failed plan leaves no CSV to adopt or succeed.
pub const INSTALL_PLAN_ANNOTATION: &str = "olm.aloft.dev/install-plan";
/// The annotation an upgrade's plan puts on a MachineConfig it took over from the CSV it
/// replaces, naming that CSV: if the plan fails after a pass cut short, the config is handed
/// back to it rather than left to the sweep of uninstalled CSVs' configs.
pub const TAKEN_OVER_ANNOTATION: &str = "olm.aloft.dev/taken-over-from";

/// OperatorGroup's API version: OLM serves it at `v1`, beside the `v1alpha1` kinds.
pub const OPERATOR_GROUP_API_VERSION: &str = "operators.coreos.com/v1";
/// The `upgradeStrategy.name`s OLM knows.
pub const UPGRADE_STRATEGIES: &[&str] = &["Default", "TechPreviewUnsafeFailForward"];

/// Which namespaces an operator of this namespace serves. Every OLM install manifest carries one
/// beside its Subscription; aloft installs no workloads to scope, so it only shows the target
/// namespaces and, as OLM does, refuses to install into a namespace with two or more.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OperatorGroup {
    #[serde(default)]
    pub api_version: String,
    #[serde(default)]
    pub kind: String,
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: OperatorGroupSpec,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<OperatorGroupStatus>,
    #[serde(flatten)]
    pub extra: Extra,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OperatorGroupSpec {
    /// Empty (and no selector): every namespace, OLM's AllNamespaces mode.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub target_namespaces: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<crate::LabelSelector>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upgrade_strategy: Option<UpgradeStrategy>,
    #[serde(flatten)]
    pub extra: Extra,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct UpgradeStrategy {
    #[serde(default)]
    pub name: String,
    #[serde(flatten)]
    pub extra: Extra,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OperatorGroupStatus {
    /// The target namespaces; `[""]` for all, as OLM writes it.
    #[serde(default)]
    pub namespaces: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_updated: Option<String>,
    #[serde(flatten)]
    pub extra: Extra,
}

impl OperatorGroup {
    /// What `status.namespaces` says: the target namespaces sorted, or `[""]` (all).
    pub fn namespaces(&self) -> Vec<String> {
        if self.spec.target_namespaces.is_empty() {
            return vec![String::new()];
        }
        let mut ns = self.spec.target_namespaces.clone();
        ns.sort();
        ns.dedup();
        ns
    }
}

/// The annotation OLM writes on a CSV with its bundle's properties (`{"properties": [...]}`);
/// it is where `olm.maxOpenShiftVersion` is read from once the bundle is installed.
pub const PROPERTIES_ANNOTATION: &str = "operatorframework.io/properties";

/// The bundle properties an installed CSV carries in [`PROPERTIES_ANNOTATION`], without the
/// manifests (`olm.bundle.object`): those are installed objects, not facts about the bundle.
pub fn properties_annotation(bundle: &crate::catalog::Bundle) -> String {
    let kept: Vec<&crate::catalog::Property> =
        bundle.properties.iter().filter(|p| p.type_ != crate::catalog::PROPERTY_BUNDLE_OBJECT).collect();
    serde_json::json!({ "properties": kept }).to_string()
}

/// The bundle an installed CSV was made from, as far as its [`PROPERTIES_ANNOTATION`] tells:
/// its properties under the CSV's name. `Ok(None)` without the annotation; an error naming it
/// when it does not read.
fn annotated_bundle(csv_name: &str, meta: &ObjectMeta) -> Result<Option<crate::catalog::Bundle>, String> {
    let Some(text) = meta.annotations.get(PROPERTIES_ANNOTATION) else { return Ok(None) };
    #[derive(Deserialize)]
    struct Annotation {
        #[serde(default)]
        properties: Vec<crate::catalog::Property>,
    }
    let read: Annotation = serde_json::from_str(text)
        .map_err(|e| format!("annotation {PROPERTIES_ANNOTATION} does not read as {{\"properties\": [...]}}: {e}"))?;
    Ok(Some(crate::catalog::Bundle { name: csv_name.to_string(), properties: read.properties, ..Default::default() }))
}

/// The newest platform minor an installed CSV supports (`olm.maxOpenShiftVersion` in its
/// [`PROPERTIES_ANNOTATION`]), read as OLM reads it: `Ok(None)` without one; an error naming
/// what is wrong when the annotation or the value does not read, which OLM, and aloft, count as
/// incompatible with any newer minor (a limit that cannot be read is not taken as no limit).
pub fn max_platform_version(csv_name: &str, meta: &ObjectMeta) -> Result<Option<(u64, u64)>, String> {
    match annotated_bundle(csv_name, meta)? {
        None => Ok(None),
        Some(bundle) => bundle.max_openshift_version_checked().map_err(|e| e.message),
    }
}

/// The bundle properties an installed CSV carries ([`PROPERTIES_ANNOTATION`]), as a bundle of
/// the CSV's name: what it provides to other bundles' dependencies is read from there, as OLM
/// reads an installed operator's. A CSV without the annotation provides nothing; one whose
/// annotation does not read, too (the ClusterVersion's `Upgradeable=False` names that CSV and
/// the error, see [`max_platform_version`]).
pub fn installed_bundle(csv_name: &str, meta: &ObjectMeta) -> crate::catalog::Bundle {
    annotated_bundle(csv_name, meta)
        .ok()
        .flatten()
        .unwrap_or_else(|| crate::catalog::Bundle { name: csv_name.to_string(), ..Default::default() })
}

/// The dependencies of `bundle` (`olm.package.required`, `olm.gvk.required`) that none of
/// `installed` (the namespace's installed operators, as [`installed_bundle`] reads them) meets;
/// each displays as a user would look for it. The bundle's own APIs meet its own
/// `olm.gvk.required`. A bundle with unmet dependencies is not installed until they are (the
/// coordinator subscribes to them, as OLM does), rather than installed without them.
pub fn unmet_dependencies(
    bundle: &crate::catalog::Bundle,
    installed: &[crate::catalog::Bundle],
) -> Vec<crate::catalog::Dependency> {
    unmet_of(bundle.dependencies(), installed)
}

/// Those of `dependencies` that none of `installed` meets (see [`unmet_dependencies`]), for a
/// caller that has read a bundle's dependencies already.
pub fn unmet_of(
    dependencies: Vec<crate::catalog::Dependency>,
    installed: &[crate::catalog::Bundle],
) -> Vec<crate::catalog::Dependency> {
    dependencies.into_iter().filter(|d| !installed.iter().any(|b| d.met_by(b))).collect()
}

/// One dependency of an installed operator that an upgrade would leave unmet.
#[derive(Debug, Clone, PartialEq)]
pub struct Broken {
    /// The installed operator that depends on it (its CSV's name).
    pub dependent: String,
    pub dependency: crate::catalog::Dependency,
}

/// What installing `to` in place of the installed CSV `from` would take from the namespace's
/// other installed operators (`installed`, as [`installed_bundle`] reads them, `from` among
/// them) and from the bundles its Subscriptions are installing (`coming`: chosen, not yet
/// installed, perhaps waiting for this very dependency): each dependency that some installed
/// operator meets today and none would after. OLM's solver resolves a namespace as a whole and
/// does not choose such an upgrade; a dependency already unmet is not this upgrade's doing and
/// is left out. Why `coming` counts: a dependency is installed before what needs it, so without
/// it the dependency's own Subscription could move past the range its dependent needs in the
/// moment between the two installs.
pub fn broken_by_replacing(
    from: &str,
    to: &crate::catalog::Bundle,
    installed: &[crate::catalog::Bundle],
    coming: &[crate::catalog::Bundle],
) -> Vec<Broken> {
    let after: Vec<&crate::catalog::Bundle> =
        installed.iter().filter(|b| b.name != from).chain(std::iter::once(to)).collect();
    let mut out = Vec::new();
    for dependent in installed.iter().filter(|b| b.name != from).chain(coming) {
        for dependency in dependent.dependencies() {
            let met_now = installed.iter().any(|b| dependency.met_by(b));
            if met_now && !after.iter().any(|b| dependency.met_by(b)) {
                out.push(Broken { dependent: dependent.name.clone(), dependency });
            }
        }
    }
    out
}

/// The package a bundle is of: its `package` field, or, for an installed operator read from
/// its CSV (see [`installed_bundle`]), its `olm.package` property.
pub fn package_of(bundle: &crate::catalog::Bundle) -> String {
    if !bundle.package.is_empty() {
        return bundle.package.clone();
    }
    bundle.package_property().map(|p| p.package_name).unwrap_or_default()
}

/// The first API `bundle` provides (`olm.gvk`) that one of `others` of another package (the
/// namespace's operators, installed or being installed) provides already, in OLM's words:
/// "base-tuning.v1.3.0 and alt-tuning.v1.0.0 provide Profile (tuning.example.com/v1)". OLM's
/// solver allows one provider of an API in a namespace, so such a bundle is not installed
/// there; a bundle of the same package is the one it replaces, not a second provider.
pub fn api_provided_already<'a>(
    bundle: &crate::catalog::Bundle,
    others: impl IntoIterator<Item = &'a crate::catalog::Bundle>,
) -> Option<String> {
    let mine = bundle.provided_gvks();
    if mine.is_empty() {
        return None;
    }
    let package = package_of(bundle);
    others.into_iter().filter(|o| o.name != bundle.name && package_of(o) != package).find_map(|other| {
        let gvk = other.provided_gvks().into_iter().find(|g| mine.contains(g))?;
        Some(format!("{} and {} provide {} ({}/{})", other.name, bundle.name, gvk.kind, gvk.group, gvk.version))
    })
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CatalogSource {
    #[serde(default)]
    pub api_version: String,
    #[serde(default)]
    pub kind: String,
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: CatalogSourceSpec,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<CatalogSourceStatus>,
    #[serde(flatten)]
    pub extra: Extra,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CatalogSourceSpec {
    #[serde(default)]
    pub source_type: String,
    /// For `http`: the URL of the catalog's FBC (a JSON or YAML stream of blobs).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub address: String,
    /// A catalog image (OLM's `grpc` sources); aloft refuses it by name.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub image: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub display_name: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub publisher: String,
    /// Breaks ties between catalogs offering the same package (higher first), as in OLM.
    #[serde(default)]
    pub priority: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub update_strategy: Option<UpdateStrategy>,
    #[serde(flatten)]
    pub extra: Extra,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct UpdateStrategy {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub registry_poll: Option<RegistryPoll>,
    #[serde(flatten)]
    pub extra: Extra,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RegistryPoll {
    /// A Go duration (`15m`, `1h30m`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub interval: String,
    #[serde(flatten)]
    pub extra: Extra,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CatalogSourceStatus {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connection_state: Option<ConnectionState>,
    /// When the catalog was last read successfully.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latest_image_registry_poll: Option<String>,
    /// aloft's: what the last good read held, so `kubectl get catsrc` shows it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub packages: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bundles: Option<u64>,
    #[serde(flatten)]
    pub extra: Extra,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ConnectionState {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub address: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub last_observed_state: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_connect: Option<String>,
    #[serde(flatten)]
    pub extra: Extra,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Subscription {
    #[serde(default)]
    pub api_version: String,
    #[serde(default)]
    pub kind: String,
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: SubscriptionSpec,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<SubscriptionStatus>,
    #[serde(flatten)]
    pub extra: Extra,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SubscriptionSpec {
    /// The CatalogSource's name.
    #[serde(default)]
    pub source: String,
    #[serde(default)]
    pub source_namespace: String,
    /// The package.
    #[serde(default)]
    pub name: String,
    /// Empty: the package's default channel.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub channel: String,
    #[serde(default, rename = "startingCSV", skip_serializing_if = "String::is_empty")]
    pub starting_csv: String,
    /// `Automatic` (the default) or `Manual`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub install_plan_approval: String,
    #[serde(flatten)]
    pub extra: Extra,
}

impl SubscriptionSpec {
    /// Whether plans for this subscription wait for an admin's approval.
    pub fn manual(&self) -> bool {
        self.install_plan_approval == MANUAL
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SubscriptionStatus {
    /// The newest bundle the catalog offers this subscription (what the plan installs).
    #[serde(default, rename = "currentCSV", skip_serializing_if = "String::is_empty")]
    pub current_csv: String,
    #[serde(default, rename = "installedCSV", skip_serializing_if = "String::is_empty")]
    pub installed_csv: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub install_plan_ref: Option<PlanReference>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub state: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_updated: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub catalog_health: Vec<CatalogHealth>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    #[serde(flatten)]
    pub extra: Extra,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PlanReference {
    #[serde(default)]
    pub api_version: String,
    #[serde(default)]
    pub kind: String,
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub namespace: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub uid: String,
    #[serde(flatten)]
    pub extra: Extra,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CatalogHealth {
    pub catalog_source_ref: PlanReference,
    pub healthy: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_updated: Option<String>,
    #[serde(flatten)]
    pub extra: Extra,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InstallPlan {
    #[serde(default)]
    pub api_version: String,
    #[serde(default)]
    pub kind: String,
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: InstallPlanSpec,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<InstallPlanStatus>,
    #[serde(flatten)]
    pub extra: Extra,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InstallPlanSpec {
    #[serde(default)]
    pub cluster_service_version_names: Vec<String>,
    #[serde(default)]
    pub approval: String,
    /// Set to true by an admin (`oc patch installplan X --type merge -p '{"spec":{"approved":true}}'`).
    #[serde(default)]
    pub approved: bool,
    #[serde(default)]
    pub generation: i64,
    #[serde(flatten)]
    pub extra: Extra,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InstallPlanStatus {
    #[serde(default)]
    pub phase: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub catalog_sources: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub plan: Vec<Step>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<String>,
    #[serde(flatten)]
    pub extra: Extra,
}

/// One object a plan creates: the bundle's manifest, kept whole in `manifest` (a JSON string,
/// as OLM keeps it) so approving a plan installs exactly what was shown.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Step {
    /// The CSV (bundle) this step belongs to.
    #[serde(default)]
    pub resolving: String,
    pub resource: StepResource,
    /// `Unknown`, `NotPresent`, `Present`, `Created`.
    #[serde(default)]
    pub status: String,
    #[serde(flatten)]
    pub extra: Extra,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StepResource {
    #[serde(default)]
    pub source_name: String,
    #[serde(default)]
    pub source_namespace: String,
    #[serde(default)]
    pub group: String,
    #[serde(default)]
    pub version: String,
    #[serde(default)]
    pub kind: String,
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub manifest: String,
    #[serde(flatten)]
    pub extra: Extra,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterServiceVersion {
    #[serde(default)]
    pub api_version: String,
    #[serde(default)]
    pub kind: String,
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// Kept as written by the bundle's author (a CSV has dozens of fields aloft only shows).
    #[serde(default)]
    pub spec: serde_json::Value,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<CsvStatus>,
    #[serde(flatten)]
    pub extra: Extra,
}

impl ClusterServiceVersion {
    /// `spec.version`, `spec.displayName`, `spec.replaces`: what `get csv` shows.
    pub fn spec_str(&self, field: &str) -> &str {
        self.spec.get(field).and_then(serde_json::Value::as_str).unwrap_or("")
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CsvStatus {
    #[serde(default)]
    pub phase: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_update_time: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<String>,
    /// Every phase it went through, as OLM keeps it (newest last).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<CsvCondition>,
    #[serde(flatten)]
    pub extra: Extra,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CsvCondition {
    pub phase: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<String>,
    #[serde(flatten)]
    pub extra: Extra,
}

/// How many phase changes a CSV's `status.conditions` keeps (OLM keeps a short history too).
pub const MAX_CSV_CONDITIONS: usize = 20;

impl CsvStatus {
    /// Move to a phase: records the change in `conditions` when phase, reason or message
    /// differ; returns whether anything changed.
    pub fn set_phase(&mut self, phase: &str, reason: &str, message: &str, now: &str) -> bool {
        if self.phase == phase && self.reason == reason && self.message == message {
            return false;
        }
        if self.phase != phase {
            self.last_transition_time = Some(now.to_string());
        }
        self.phase = phase.to_string();
        self.reason = reason.to_string();
        self.message = message.to_string();
        self.last_update_time = Some(now.to_string());
        self.conditions.push(CsvCondition {
            phase: phase.to_string(),
            reason: reason.to_string(),
            message: message.to_string(),
            last_transition_time: Some(now.to_string()),
            extra: Extra::default(),
        });
        let skip = self.conditions.len().saturating_sub(MAX_CSV_CONDITIONS);
        self.conditions.drain(..skip);
        true
    }
}

/// The longest duration Go reads (`time.Duration` is an int64 of nanoseconds, about 292
/// years): a longer one is an error there, so OLM's CRD refuses it. Capping it here also keeps
/// the catalog poller's `read_at + interval` from overflowing an `Instant`.
pub const MAX_GO_DURATION: std::time::Duration = std::time::Duration::from_nanos(i64::MAX as u64);

/// A Go duration as OLM's poll interval is written (`15m`, `1h30m`, `45s`); None if it does not
/// read, or is longer than Go reads ([`MAX_GO_DURATION`]); OLM then falls back to
/// [`DEFAULT_POLL_SECS`].
pub fn parse_go_duration(text: &str) -> Option<std::time::Duration> {
    let mut rest = text.trim();
    if rest.is_empty() {
        return None;
    }
    let mut total = 0f64;
    while !rest.is_empty() {
        let digits = rest.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(rest.len());
        if digits == 0 {
            return None;
        }
        let n: f64 = rest[..digits].parse().ok()?;
        rest = &rest[digits..];
        let unit_len = rest.find(|c: char| c.is_ascii_digit() || c == '.').unwrap_or(rest.len());
        let secs = match &rest[..unit_len] {
            "h" => 3600.0,
            "m" => 60.0,
            "s" => 1.0,
            "ms" => 0.001,
            _ => return None,
        };
        total += n * secs;
        rest = &rest[unit_len..];
    }
    if !(total.is_finite() && total > 0.0) {
        return None;
    }
    // `try_`: a sum past what a Duration holds is refused, never a panic on a request path.
    std::time::Duration::try_from_secs_f64(total).ok().filter(|d| *d <= MAX_GO_DURATION)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// One provider of an API in a namespace: a bundle of another package that provides one of
    /// the same APIs is named, with the API, in OLM's words; one of the same package (the one it
    /// replaces), one providing other APIs, and one read from an installed CSV's annotation
    /// without a package field are told apart.
    #[test]
    fn a_second_provider_of_an_api_is_named() {
        let gvk = |kind: &str| serde_json::json!({"type": "olm.gvk", "value": {"group": "tuning.example.com", "version": "v1", "kind": kind}});
        let bundle = |package: &str, version: &str, provides: &[&str]| -> crate::catalog::Bundle {
            let mut properties =
                vec![serde_json::json!({"type": "olm.package", "value": {"packageName": package, "version": version}})];
            properties.extend(provides.iter().map(|k| gvk(k)));
            serde_json::from_value(serde_json::json!({"schema": "olm.bundle", "name": format!("{package}.v{version}"),
                "package": package, "properties": properties}))
            .unwrap()
        };
        let alt = bundle("alt", "1.0.0", &["Tuned", "Profile"]);
        let base = bundle("base", "1.3.0", &["Profile"]);
        let meta = ObjectMeta {
            annotations: [(PROPERTIES_ANNOTATION.to_string(), properties_annotation(&base))].into(),
            ..Default::default()
        };
        let installed = installed_bundle("base.v1.3.0", &meta);
        assert_eq!(installed.package, "", "read from the CSV");
        assert_eq!(package_of(&installed), "base");
        assert_eq!(
            api_provided_already(&alt, [&installed]).as_deref(),
            Some("base.v1.3.0 and alt.v1.0.0 provide Profile (tuning.example.com/v1)")
        );
        let base2 = bundle("base", "2.0.0", &["Profile"]);
        assert_eq!(api_provided_already(&base2, [&installed]), None, "the bundle it replaces");
        let other = bundle("other", "1.0.0", &["Other"]);
        assert_eq!(api_provided_already(&alt, [&other]), None);
        assert_eq!(api_provided_already(&bundle("plain", "1.0.0", &[]), [&installed]), None);
    }

    /// A bundle's dependencies are met only by installed operators of the right package and
    /// version, or that provide the API (or by its own APIs); each unmet one is named, an
    /// unreadable range too; an installed CSV is read from what a plan wrote on it.
    #[test]
    fn dependencies_are_met_by_installed_operators_only() {
        let bundle = |name: &str, package: &str, version: &str, more: serde_json::Value| -> crate::catalog::Bundle {
            let mut properties =
                vec![serde_json::json!({"type": "olm.package", "value": {"packageName": package, "version": version}})];
            properties.extend(more.as_array().cloned().unwrap_or_default());
            serde_json::from_value(
                serde_json::json!({"schema": "olm.bundle", "name": name, "package": package, "properties": properties}),
            )
            .unwrap()
        };
        let gvk = |kind: &str| serde_json::json!({"group": "tuning.example.com", "version": "v1", "kind": kind});
        let wants = bundle(
            "a.v1.0.0",
            "a",
            "1.0.0",
            serde_json::json!([
                {"type": "olm.package.required", "value": {"packageName": "base", "versionRange": ">=1.2.0 <2.0.0"}},
                {"type": "olm.gvk.required", "value": gvk("Profile")},
                {"type": "olm.gvk.required", "value": gvk("Own")},
                {"type": "olm.gvk", "value": gvk("Own")},
            ]),
        );
        let installed_as_csv = |b: &crate::catalog::Bundle| {
            let meta = ObjectMeta {
                annotations: [(PROPERTIES_ANNOTATION.to_string(), properties_annotation(b))].into(),
                ..Default::default()
            };
            installed_bundle(&b.name, &meta)
        };
        let texts =
            |unmet: Vec<crate::catalog::Dependency>| -> Vec<String> { unmet.iter().map(ToString::to_string).collect() };
        let unmet = texts(unmet_dependencies(&wants, &[]));
        assert_eq!(
            unmet,
            [
                r#"package "base" in range ">=1.2.0 <2.0.0" (olm.package.required)"#,
                "API tuning.example.com/v1 Profile (olm.gvk.required)",
            ]
        );
        let old_base =
            bundle("base.v1.1.0", "base", "1.1.0", serde_json::json!([{"type": "olm.gvk", "value": gvk("Profile")}]));
        let other = bundle("other.v1.5.0", "other", "1.5.0", serde_json::json!([]));
        let unmet = texts(unmet_dependencies(&wants, &[installed_as_csv(&old_base), installed_as_csv(&other)]));
        assert_eq!(
            unmet,
            [r#"package "base" in range ">=1.2.0 <2.0.0" (olm.package.required)"#],
            "1.1.0 is out of range"
        );
        let base =
            bundle("base.v1.3.0", "base", "1.3.0", serde_json::json!([{"type": "olm.gvk", "value": gvk("Profile")}]));
        assert_eq!(texts(unmet_dependencies(&wants, &[installed_as_csv(&base)])), Vec::<String>::new());
        let no_annotation = installed_bundle("base.v1.3.0", &ObjectMeta::default());
        assert_eq!(
            unmet_dependencies(&wants, &[no_annotation]).len(),
            2,
            "a CSV without its properties provides nothing"
        );
        let bad_range = bundle(
            "b.v1.0.0",
            "b",
            "1.0.0",
            serde_json::json!([{"type": "olm.package.required", "value": {"packageName": "base", "versionRange": "||"}}]),
        );
        let unmet = texts(unmet_dependencies(&bad_range, &[installed_as_csv(&base)]));
        assert!(unmet.len() == 1 && unmet[0].contains("the range does not read"), "{unmet:?}");
    }

    /// An upgrade that would take a dependency away from another installed operator is
    /// named with that operator and dependency; one that keeps it met, or a dependency met by
    /// another operator too, or one unmet already, is not.
    #[test]
    fn upgrades_that_break_an_installed_dependent_are_named() {
        let bundle = |package: &str, version: &str, more: serde_json::Value| -> crate::catalog::Bundle {
            serde_json::from_value(crate::catalog::test_bundle(package, version, more)).unwrap()
        };
        let profile = serde_json::json!({"type": "olm.gvk", "value": {"group": "t.example.com", "version": "v1", "kind": "Profile"}});
        let dependent = bundle(
            "tuned",
            "1.0.0",
            serde_json::json!([
                {"type": "olm.package.required", "value": {"packageName": "base", "versionRange": ">=1.2.0 <2.0.0"}},
                {"type": "olm.gvk.required", "value": {"group": "t.example.com", "version": "v1", "kind": "Profile"}},
                {"type": "olm.package.required", "value": {"packageName": "gone", "versionRange": ">=1.0.0"}},
            ]),
        );
        let base13 = bundle("base", "1.3.0", serde_json::json!([profile.clone()]));
        let installed = [dependent.clone(), base13.clone()];
        let shown = |b: Vec<Broken>| -> Vec<String> {
            b.iter().map(|b| format!("{}: {}", b.dependent, b.dependency)).collect()
        };
        let base14 = bundle("base", "1.4.0", serde_json::json!([profile.clone()]));
        assert_eq!(shown(broken_by_replacing("base.v1.3.0", &base14, &installed, &[])), Vec::<String>::new());
        let base20 = bundle("base", "2.0.0", serde_json::json!([]));
        assert_eq!(
            shown(broken_by_replacing("base.v1.3.0", &base20, &installed, &[])),
            [
                r#"tuned.v1.0.0: package "base" in range ">=1.2.0 <2.0.0" (olm.package.required)"#,
                "tuned.v1.0.0: API t.example.com/v1 Profile (olm.gvk.required)",
            ],
            "the missing package was unmet before: not this upgrade's doing"
        );
        let other = bundle("alt", "0.1.0", serde_json::json!([profile]));
        let with_other = [dependent, base13, other];
        assert_eq!(
            shown(broken_by_replacing("base.v1.3.0", &base20, &with_other, &[])),
            [r#"tuned.v1.0.0: package "base" in range ">=1.2.0 <2.0.0" (olm.package.required)"#],
            "alt still provides Profile"
        );
        // Not installed yet, but chosen (its plan waits for base): it counts as a dependent.
        let [dependent, base13, other] = with_other;
        let installed = [base13, other];
        assert_eq!(shown(broken_by_replacing("base.v1.3.0", &base20, &installed, &[])), Vec::<String>::new());
        assert_eq!(
            shown(broken_by_replacing("base.v1.3.0", &base20, &installed, std::slice::from_ref(&dependent))),
            [r#"tuned.v1.0.0: package "base" in range ">=1.2.0 <2.0.0" (olm.package.required)"#]
        );
    }

    /// What a plan writes on a CSV reads back as the bundle's limit; no annotation is no limit;
    /// an annotation or a value that does not read is an error naming it.
    #[test]
    fn a_csvs_platform_limit_comes_from_its_bundle_properties() {
        let bundle: crate::catalog::Bundle = serde_json::from_value(serde_json::json!({
            "schema": "olm.bundle", "name": "a.v1", "package": "a",
            "properties": [
                {"type": "olm.package", "value": {"packageName": "a", "version": "1.0.0"}},
                {"type": "olm.maxOpenShiftVersion", "value": "4.8"},
                {"type": "olm.bundle.object", "value": {"data": "e30="}},
            ],
        }))
        .unwrap();
        let written = properties_annotation(&bundle);
        assert!(!written.contains("olm.bundle.object"), "{written}");
        let meta = |a: Option<&str>| ObjectMeta {
            annotations: a.map(|a| [(PROPERTIES_ANNOTATION.to_string(), a.to_string())].into()).unwrap_or_default(),
            ..Default::default()
        };
        assert_eq!(max_platform_version("a.v1", &meta(Some(&written))), Ok(Some((4, 8))));
        assert_eq!(max_platform_version("a.v1", &meta(None)), Ok(None));
        assert_eq!(max_platform_version("a.v1", &meta(Some(r#"{"properties":[]}"#))), Ok(None));
        let bad = max_platform_version("a.v1", &meta(Some("[")));
        assert!(bad.as_ref().is_err_and(|e| e.contains(PROPERTIES_ANNOTATION)), "{bad:?}");
        let patch = r#"{"properties":[{"type":"olm.maxOpenShiftVersion","value":"4.8.1"}]}"#;
        let bad = max_platform_version("a.v1", &meta(Some(patch)));
        assert!(bad.as_ref().is_err_and(|e| e.contains("only <major>.<minor>")), "{bad:?}");
    }

    #[test]
    fn go_durations_read_as_olm_reads_them() {
        assert_eq!(parse_go_duration("15m"), Some(Duration::from_secs(900)));
        assert_eq!(parse_go_duration("1h30m"), Some(Duration::from_secs(5400)));
        assert_eq!(parse_go_duration("45s"), Some(Duration::from_secs(45)));
        assert_eq!(parse_go_duration("1.5h"), Some(Duration::from_secs(5400)));
        assert_eq!(parse_go_duration("500ms"), Some(Duration::from_millis(500)));
        for bad in ["", "15", "m", "10x", "-5m", "1h-", "0s"] {
            assert_eq!(parse_go_duration(bad), None, "{bad:?}");
        }
    }

    /// A duration longer than Go reads is refused, as Go's `time.ParseDuration` refuses it,
    /// and never panics: one past what a `Duration` holds, one past `f64`, and one just past
    /// Go's int64 of nanoseconds; Go's largest (2562047h) still reads.
    #[test]
    fn a_duration_longer_than_go_reads_is_refused_not_a_panic() {
        for huge in ["9999999999999999h", &format!("{}h", "9".repeat(400)), "2562048h", "9223372037s"] {
            assert_eq!(parse_go_duration(huge), None, "{huge:?}");
        }
        assert_eq!(parse_go_duration("2562047h"), Some(Duration::from_secs(2_562_047 * 3600)));
        assert!(parse_go_duration("2562047h").is_some_and(|d| d <= MAX_GO_DURATION));
    }

    #[test]
    fn a_subscription_reads_as_openshift_writes_it() {
        let sub: Subscription = serde_json::from_value(serde_json::json!({
            "apiVersion": API_VERSION, "kind": "Subscription",
            "metadata": {"name": "etcd", "namespace": "operators"},
            "spec": {"channel": "singlenamespace-alpha", "name": "etcd", "source": "operatorhubio-catalog",
                     "sourceNamespace": "olm", "startingCSV": "etcdoperator.v0.9.2",
                     "installPlanApproval": "Manual", "config": {"env": []}},
        }))
        .expect("reads");
        assert_eq!(sub.spec.starting_csv, "etcdoperator.v0.9.2");
        assert!(sub.spec.manual());
        let back = serde_json::to_value(&sub).expect("writes");
        assert_eq!(back["spec"]["startingCSV"], "etcdoperator.v0.9.2");
        assert_eq!(back["spec"]["config"], serde_json::json!({"env": []}), "unknown fields are kept");
    }

    #[test]
    fn a_csv_keeps_its_phase_history() {
        let mut s = CsvStatus::default();
        assert!(s.set_phase(CSV_PENDING, "RequirementsUnknown", "", "t0"));
        assert!(!s.set_phase(CSV_PENDING, "RequirementsUnknown", "", "t1"), "no change, no entry");
        assert!(s.set_phase(CSV_INSTALLING, "InstallWaiting", "worker: 0 of 2", "t2"));
        assert!(s.set_phase(CSV_INSTALLING, "InstallWaiting", "worker: 1 of 2", "t3"));
        assert_eq!(s.last_transition_time.as_deref(), Some("t2"), "the phase changed at t2");
        assert_eq!(s.conditions.len(), 3);
        for i in 0..30 {
            s.set_phase(CSV_INSTALLING, "InstallWaiting", &format!("{i}"), "t");
        }
        assert_eq!(s.conditions.len(), MAX_CSV_CONDITIONS);
    }
}
