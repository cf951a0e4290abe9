//! The kinds the coordinator serves, and how each is addressed. One table drives discovery,
//! routing, kubectl's short names and the store's resource keys, so adding a kind is one entry.

/// One served resource.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResourceType {
    /// Empty for the core group.
    pub group: &'static str,
    pub version: &'static str,
    pub kind: &'static str,
    pub plural: &'static str,
    pub singular: &'static str,
    pub short_names: &'static [&'static str],
    pub namespaced: bool,
    /// Has a `/status` subresource: writes to the main resource ignore `status`, writes to
    /// `/status` change only `status` (Kubernetes' rule, so controllers and users don't clobber
    /// each other).
    pub status_subresource: bool,
    pub categories: &'static [&'static str],
}

impl ResourceType {
    /// `apiVersion` as written in objects.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.to_string()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// The store's resource key: `<group>/<plural>`.
    pub fn store_key(&self) -> String {
        format!("{}/{}", self.group, self.plural)
    }

    /// Served for reading only (get, list, watch): the coordinator writes these objects itself
    /// and a client's write would only be overwritten, so it is refused (OLM's package server
    /// serves PackageManifests so).
    pub fn read_only(&self) -> bool {
        *self == PACKAGE_MANIFEST
    }

    /// How clients address it in URLs.
    pub fn path_ref(&self) -> aloft_client::ResourceRef<'static> {
        aloft_client::ResourceRef {
            group: self.group,
            version: self.version,
            plural: self.plural,
            namespaced: self.namespaced,
        }
    }

    /// `kind.group` in the singular, as kubectl prints objects: `machineconfigpool.machineconfiguration.openshift.io`.
    pub fn singular_qualified(&self) -> String {
        if self.group.is_empty() {
            self.singular.to_string()
        } else {
            format!("{}.{}", self.singular, self.group)
        }
    }

    /// `Kind.group`, as kube-apiserver names the kind of an invalid object (422):
    /// `MachineConfigPool.machineconfiguration.openshift.io "worker" is invalid: ...`.
    pub fn qualified_kind(&self) -> String {
        if self.group.is_empty() {
            self.kind.to_string()
        } else {
            format!("{}.{}", self.kind, self.group)
        }
    }

    /// `plural.group`, as the API server names a resource in errors: `machineconfigpools.machineconfiguration.openshift.io`.
    pub fn qualified(&self) -> String {
        if self.group.is_empty() {
            self.plural.to_string()
        } else {
            format!("{}.{}", self.plural, self.group)
        }
    }
}

pub const NODE: ResourceType = ResourceType {
    group: "",
    version: "v1",
    kind: "Node",
    plural: "nodes",
    singular: "node",
    short_names: &["no"],
    namespaced: false,
    status_subresource: true,
    categories: &[],
};

pub const EVENT: ResourceType = ResourceType {
    group: "",
    version: "v1",
    kind: "Event",
    plural: "events",
    singular: "event",
    short_names: &["ev"],
    namespaced: true,
    status_subresource: false,
    categories: &[],
};

pub const MACHINE_CONFIG: ResourceType = ResourceType {
    group: aloft_api::MCO_GROUP,
    version: "v1",
    kind: "MachineConfig",
    plural: "machineconfigs",
    singular: "machineconfig",
    short_names: &["mc"],
    namespaced: false,
    status_subresource: false,
    categories: &[],
};

pub const MACHINE_CONFIG_POOL: ResourceType = ResourceType {
    group: aloft_api::MCO_GROUP,
    version: "v1",
    kind: "MachineConfigPool",
    plural: "machineconfigpools",
    singular: "machineconfigpool",
    short_names: &["mcp"],
    namespaced: false,
    status_subresource: true,
    categories: &[],
};

/// OpenShift's cluster-wide MCO settings (`cluster`): node disruption policies live here.
pub const MACHINE_CONFIGURATION: ResourceType = ResourceType {
    group: "operator.openshift.io",
    version: "v1",
    kind: "MachineConfiguration",
    plural: "machineconfigurations",
    singular: "machineconfiguration",
    short_names: &[],
    namespaced: false,
    status_subresource: true,
    categories: &[],
};

/// aloft's NodeDisruptionBudget: how many nodes of a labelled set may be unavailable at once,
/// across pools (optionally per group of label values).
pub const NODE_DISRUPTION_BUDGET: ResourceType = ResourceType {
    group: aloft_api::ALOFT_GROUP,
    version: "v1",
    kind: "NodeDisruptionBudget",
    plural: "nodedisruptionbudgets",
    singular: "nodedisruptionbudget",
    short_names: &["ndb"],
    namespaced: false,
    status_subresource: true,
    categories: &[],
};

/// A FleetLock group's reboot semaphore (see `crate::fleetlock`).
pub const FLEET_LOCK: ResourceType = ResourceType {
    group: aloft_api::ALOFT_GROUP,
    version: "v1",
    kind: "FleetLock",
    plural: "fleetlocks",
    singular: "fleetlock",
    short_names: &["flk"],
    namespaced: false,
    status_subresource: true,
    categories: &[],
};

/// The fleet's release and its updates (see `crate::controllers::cluster_version`); one object,
/// `version`, as in OpenShift.
pub const CLUSTER_VERSION: ResourceType = ResourceType {
    group: "config.openshift.io",
    version: "v1",
    kind: "ClusterVersion",
    plural: "clusterversions",
    singular: "clusterversion",
    short_names: &[],
    namespaced: false,
    status_subresource: true,
    categories: &[],
};

/// OLM's catalog of operator bundles (see `crate::controllers::olm`), read over HTTP(S).
pub const CATALOG_SOURCE: ResourceType = ResourceType {
    group: aloft_api::olm::GROUP,
    version: "v1alpha1",
    kind: "CatalogSource",
    plural: "catalogsources",
    singular: "catalogsource",
    short_names: &["catsrc"],
    namespaced: true,
    status_subresource: true,
    categories: &["olm"],
};

/// A package followed on a catalog channel.
pub const SUBSCRIPTION: ResourceType = ResourceType {
    group: aloft_api::olm::GROUP,
    version: "v1alpha1",
    kind: "Subscription",
    plural: "subscriptions",
    singular: "subscription",
    short_names: &["sub", "subs"],
    namespaced: true,
    status_subresource: true,
    categories: &["olm"],
};

/// What installing a subscription's next bundle creates, waiting for approval if Manual.
pub const INSTALL_PLAN: ResourceType = ResourceType {
    group: aloft_api::olm::GROUP,
    version: "v1alpha1",
    kind: "InstallPlan",
    plural: "installplans",
    singular: "installplan",
    short_names: &["ip"],
    namespaced: true,
    status_subresource: true,
    categories: &["olm"],
};

/// An installed bundle's record and its install progress.
pub const CLUSTER_SERVICE_VERSION: ResourceType = ResourceType {
    group: aloft_api::olm::GROUP,
    version: "v1alpha1",
    kind: "ClusterServiceVersion",
    plural: "clusterserviceversions",
    singular: "clusterserviceversion",
    short_names: &["csv", "csvs"],
    namespaced: true,
    status_subresource: true,
    categories: &["olm"],
};

/// Which namespaces an operator serves (OLM's, at `v1`); see [`aloft_api::olm::OperatorGroup`].
pub const OPERATOR_GROUP: ResourceType = ResourceType {
    group: aloft_api::olm::GROUP,
    version: "v1",
    kind: "OperatorGroup",
    plural: "operatorgroups",
    singular: "operatorgroup",
    short_names: &["og"],
    namespaced: true,
    status_subresource: true,
    categories: &["olm"],
};

/// What a catalog offers, per package (OLM's package server's kind). Read-only: the OLM
/// controller writes them from its CatalogSources' reads (see [`ResourceType::read_only`]).
pub const PACKAGE_MANIFEST: ResourceType = ResourceType {
    group: aloft_api::packages::GROUP,
    version: "v1",
    kind: "PackageManifest",
    plural: "packagemanifests",
    singular: "packagemanifest",
    short_names: &[],
    namespaced: true,
    status_subresource: false,
    categories: &[],
};

/// Every served resource.
pub const ALL: &[ResourceType] = &[
    NODE,
    EVENT,
    MACHINE_CONFIG,
    MACHINE_CONFIG_POOL,
    MACHINE_CONFIGURATION,
    NODE_DISRUPTION_BUDGET,
    FLEET_LOCK,
    CLUSTER_VERSION,
    CATALOG_SOURCE,
    SUBSCRIPTION,
    INSTALL_PLAN,
    CLUSTER_SERVICE_VERSION,
    OPERATOR_GROUP,
    PACKAGE_MANIFEST,
];

/// Find by group, version and plural (the URL form).
pub fn by_path(group: &str, version: &str, plural: &str) -> Option<&'static ResourceType> {
    ALL.iter().find(|r| r.group == group && r.version == version && r.plural == plural)
}

/// Find by `apiVersion` and `kind` (the object form).
pub fn by_kind(api_version: &str, kind: &str) -> Option<&'static ResourceType> {
    ALL.iter().find(|r| r.api_version() == api_version && r.kind == kind)
}

/// Find by any name a user may type: plural, singular, short name, kind, or `plural.group`.
pub fn by_name(name: &str) -> Option<&'static ResourceType> {
    let lower = name.to_ascii_lowercase();
    ALL.iter().find(|r| {
        r.plural == lower
            || r.singular == lower
            || r.short_names.contains(&lower.as_str())
            || r.kind.eq_ignore_ascii_case(&lower)
            || r.qualified() == lower
            || format!("{}.{}", r.singular, r.group) == lower
    })
}

/// The API groups (non-core) in a stable order, for discovery.
pub fn groups() -> Vec<&'static str> {
    let mut g: Vec<&str> = ALL.iter().map(|r| r.group).filter(|g| !g.is_empty()).collect();
    g.dedup();
    g.sort();
    g.dedup();
    g
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_name_a_user_types_resolves() {
        for n in [
            "mcp",
            "machineconfigpool",
            "machineconfigpools",
            "MachineConfigPool",
            "machineconfigpools.machineconfiguration.openshift.io",
        ] {
            assert_eq!(by_name(n).map(|r| r.kind), Some("MachineConfigPool"), "{n}");
        }
        assert_eq!(by_name("mc").map(|r| r.kind), Some("MachineConfig"));
        assert_eq!(by_name("no").map(|r| r.kind), Some("Node"));
        assert!(by_name("pods").is_none());
        assert_eq!(by_kind("machineconfiguration.openshift.io/v1", "MachineConfig"), Some(&MACHINE_CONFIG));
        assert!(by_kind("machineconfiguration.openshift.io/v2", "MachineConfig").is_none());
        assert_eq!(by_name("ndb").map(|r| r.kind), Some("NodeDisruptionBudget"));
        assert_eq!(by_kind("aloft.dev/v1", "NodeDisruptionBudget"), Some(&NODE_DISRUPTION_BUDGET));
        assert_eq!(
            groups(),
            vec![
                "aloft.dev",
                "config.openshift.io",
                "machineconfiguration.openshift.io",
                "operator.openshift.io",
                "operators.coreos.com",
                "packages.operators.coreos.com"
            ]
        );
        assert_eq!(by_name("csv").map(|r| r.kind), Some("ClusterServiceVersion"));
        assert_eq!(by_name("sub").map(|r| r.kind), Some("Subscription"));
        assert_eq!(by_name("ip").map(|r| r.kind), Some("InstallPlan"));
        assert_eq!(by_name("catsrc").map(|r| r.kind), Some("CatalogSource"));
        assert_eq!(by_name("clusterversion").map(|r| r.kind), Some("ClusterVersion"));
        assert_eq!(by_kind("config.openshift.io/v1", "ClusterVersion"), Some(&CLUSTER_VERSION));
        assert_eq!(by_kind("operators.coreos.com/v1alpha1", "ClusterServiceVersion"), Some(&CLUSTER_SERVICE_VERSION));
        assert_eq!(by_name("packagemanifests").map(|r| r.kind), Some("PackageManifest"));
        assert_eq!(by_kind("packages.operators.coreos.com/v1", "PackageManifest"), Some(&PACKAGE_MANIFEST));
        assert!(ALL.iter().filter(|r| r.read_only()).eq([&PACKAGE_MANIFEST]));
    }

    /// A kind is served at one version, the one its API version names.
    #[test]
    fn olm_serves_operator_groups_at_v1_and_the_rest_at_v1alpha1() {
        assert_eq!(by_kind("operators.coreos.com/v1", "OperatorGroup"), Some(&OPERATOR_GROUP));
        assert!(by_kind("operators.coreos.com/v1alpha1", "OperatorGroup").is_none());
        assert!(by_kind("operators.coreos.com/v1", "Subscription").is_none());
        assert_eq!(by_name("og").map(|r| r.kind), Some("OperatorGroup"));
    }
}
