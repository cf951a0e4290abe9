//! PackageManifests (`packages.operators.coreos.com/v1`): what a catalog offers, per package, in
//! the shape OLM's package server serves, so that `oc get packagemanifests`, `oc describe
//! packagemanifest NAME` and the `jsonpath` queries scripts run against them (default channel,
//! each channel's current CSV) work on aloft as on OpenShift.
//!
//! OLM computes them on every request from its catalogs; the coordinator writes them to its
//! store whenever a catalog's read changes (one per package, in the CatalogSource's namespace,
//! owned by it), and the API serves them read-only.

use crate::catalog::{Bundle, Catalog, Channel};
use crate::olm::CatalogSource;
use serde_json::{json, Map, Value};

/// The API group of PackageManifests.
pub const GROUP: &str = "packages.operators.coreos.com";
/// `apiVersion` of a PackageManifest.
pub const API_VERSION: &str = "packages.operators.coreos.com/v1";
/// The labels OLM puts on each PackageManifest: its CatalogSource's name and namespace.
pub const CATALOG_LABEL: &str = "catalog";
pub const CATALOG_NAMESPACE_LABEL: &str = "catalog-namespace";

/// The CSV fields a PackageManifest's `currentCSVDesc` carries, under the names OLM gives them
/// (the CSV's `customresourcedefinitions` and `apiservicedefinitions` keep theirs).
const DESCRIBED: &[&str] = &[
    "displayName",
    "description",
    "provider",
    "keywords",
    "links",
    "maintainers",
    "maturity",
    "installModes",
    "customresourcedefinitions",
    "apiservicedefinitions",
    "minKubeVersion",
    "relatedImages",
];

/// The PackageManifest of `package` in `catalog`, read from `source`; `None` when the package
/// has no channel with a head (OLM leaves such a package out). Its metadata has no uid,
/// resourceVersion or timestamps: the store's writer adds them.
pub fn package_manifest(source: &CatalogSource, catalog: &Catalog, package: &str) -> Option<Value> {
    let blob = catalog.package(package)?;
    let ns = source.metadata.namespace.clone().unwrap_or_default();
    let mut channels: Vec<&Channel> = Vec::new();
    for c in catalog.channels_of(package) {
        if !channels.iter().any(|x| x.name == c.name) {
            channels.push(c);
        }
    }
    channels.sort_by(|a, b| a.name.cmp(&b.name));
    let mut described = Vec::new();
    for c in channels {
        let Ok(head) = c.head() else { continue };
        let Some(bundle) = catalog.bundle(package, &head.name) else { continue };
        described.push((c, bundle));
    }
    if described.is_empty() {
        return None;
    }
    // As OLM: a default channel that is not served falls back to the first one served.
    let default = if described.iter().any(|(c, _)| c.name == blob.default_channel) {
        blob.default_channel.clone()
    } else {
        described[0].0.name.clone()
    };
    let package_icon = blob.icon.as_ref().map(|i| json!([{"base64data": i.data, "mediatype": i.media_type}]));
    let status_channels: Vec<Value> = described
        .iter()
        .map(|(c, bundle)| {
            json!({
                "name": c.name,
                "currentCSV": bundle.name,
                "currentCSVDesc": csv_description(bundle, package_icon.as_ref()),
                "entries": entries(catalog, package, c),
            })
        })
        .collect();
    let default_desc =
        described.iter().find(|(c, _)| c.name == default).map(|(_, b)| csv_description(b, None)).unwrap_or_default();
    let provider = default_desc.get("provider").cloned().unwrap_or_else(|| json!({}));
    let mut labels: Map<String, Value> =
        source.metadata.labels.iter().map(|(k, v)| (k.clone(), Value::String(v.clone()))).collect();
    labels.insert(CATALOG_LABEL.into(), json!(source.metadata.name));
    labels.insert(CATALOG_NAMESPACE_LABEL.into(), json!(ns));
    labels.insert("provider".into(), json!(provider.get("name").and_then(Value::as_str).unwrap_or("")));
    labels.insert("provider-url".into(), json!(provider.get("url").and_then(Value::as_str).unwrap_or("")));
    if !labels.keys().any(|k| k.starts_with("operatorframework.io/os")) {
        labels.insert("operatorframework.io/os.linux".into(), json!("supported"));
    }
    if !labels.keys().any(|k| k.starts_with("operatorframework.io/arch")) {
        labels.insert("operatorframework.io/arch.amd64".into(), json!("supported"));
    }
    Some(json!({
        "apiVersion": API_VERSION,
        "kind": "PackageManifest",
        "metadata": {"name": package, "namespace": ns, "labels": labels},
        "spec": {},
        "status": {
            "catalogSource": source.metadata.name,
            "catalogSourceDisplayName": source.spec.display_name,
            "catalogSourcePublisher": source.spec.publisher,
            "catalogSourceNamespace": ns,
            "provider": provider,
            "packageName": package,
            "channels": status_channels,
            "defaultChannel": default,
        },
    }))
}

/// A channel's entries with their versions, head first (as listed when the channel cannot be
/// ordered): what a `startingCSV` may name.
fn entries(catalog: &Catalog, package: &str, channel: &Channel) -> Vec<Value> {
    let names: Vec<&str> = match channel.order() {
        Ok(order) => order.iter().map(|e| e.name.as_str()).collect(),
        Err(_) => channel.entries.iter().map(|e| e.name.as_str()).collect(),
    };
    names
        .into_iter()
        .map(|name| {
            let version = catalog.bundle(package, name).and_then(Bundle::version).map(|v| v.to_string());
            json!({"name": name, "version": version.unwrap_or_default()})
        })
        .collect()
}

/// `currentCSVDesc`: the head bundle's CSV fields for people, from its `olm.csv.metadata` or
/// else its inline CSV, with its version; the package's icon when the CSV has none.
fn csv_description(bundle: &Bundle, package_icon: Option<&Value>) -> Map<String, Value> {
    let from_objects;
    let (fields, annotations, icon) = match bundle.csv_metadata() {
        Some(m) => (Some(m), m.get("annotations"), m.get("icon")),
        None => {
            from_objects = bundle.objects().ok().and_then(|objects| {
                objects.into_iter().find(|o| o.get("kind").and_then(Value::as_str) == Some("ClusterServiceVersion"))
            });
            match &from_objects {
                Some(csv) => (csv.get("spec"), csv.pointer("/metadata/annotations"), csv.pointer("/spec/icon")),
                None => (None, None, None),
            }
        }
    };
    let mut out = Map::new();
    if let Some(fields) = fields {
        for f in DESCRIBED {
            if let Some(v) = fields.get(*f).filter(|v| !v.is_null()) {
                out.insert((*f).into(), v.clone());
            }
        }
    }
    if let Some(a) = annotations.filter(|a| a.is_object()) {
        out.insert("annotations".into(), a.clone());
    }
    if let Some(icon) = icon.filter(|i| i.as_array().is_some_and(|a| !a.is_empty())).or(package_icon) {
        out.insert("icon".into(), icon.clone());
    }
    if let Some(v) = bundle.version() {
        out.insert("version".into(), json!(v.to_string()));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn source() -> CatalogSource {
        serde_json::from_value(json!({
            "metadata": {"name": "fleet", "namespace": "olm", "labels": {"team": "infra"}},
            "spec": {"sourceType": "http", "address": "http://x/c.json", "displayName": "Fleet operators",
                     "publisher": "aloft tests"},
        }))
        .unwrap()
    }

    fn catalog(blobs: Vec<Value>) -> Catalog {
        Catalog::from_blobs(blobs.into_iter().map(|b| ("c.json".to_string(), b))).expect("a valid catalog")
    }

    #[test]
    fn a_package_reads_as_olms_package_server_shows_it() {
        let meta = |v: &str| {
            json!({"type": "olm.csv.metadata", "value": {
                "displayName": format!("Node exporter {v}"), "description": "Exports node metrics",
                "provider": {"name": "aloft", "url": "https://example.com"}, "keywords": ["metrics"],
                "installModes": [{"type": "AllNamespaces", "supported": true}],
                "annotations": {"capabilities": "Basic Install"}, "unknownField": 1}})
        };
        let bundle = |v: &str| {
            json!({"schema": "olm.bundle", "name": format!("ne.v{v}"), "package": "ne", "image": "example.com/ne",
                   "properties": [{"type": "olm.package", "value": {"packageName": "ne", "version": v}}, meta(v)]})
        };
        let c = catalog(vec![
            json!({"schema": "olm.package", "name": "ne", "defaultChannel": "stable",
                   "icon": {"base64data": "PHN2Zz48L3N2Zz4=", "mediatype": "image/svg+xml"}}),
            json!({"schema": "olm.channel", "package": "ne", "name": "stable",
                   "entries": [{"name": "ne.v1.0.0"}, {"name": "ne.v1.1.0", "replaces": "ne.v1.0.0"}]}),
            json!({"schema": "olm.channel", "package": "ne", "name": "fast", "entries": [{"name": "ne.v2.0.0"}]}),
            bundle("1.0.0"),
            bundle("1.1.0"),
            bundle("2.0.0"),
        ]);
        let pm = package_manifest(&source(), &c, "ne").expect("served");
        assert_eq!(pm["metadata"]["name"], "ne");
        assert_eq!(pm["metadata"]["namespace"], "olm");
        let labels = &pm["metadata"]["labels"];
        for (k, v) in [
            ("catalog", "fleet"),
            ("catalog-namespace", "olm"),
            ("team", "infra"),
            ("provider", "aloft"),
            ("provider-url", "https://example.com"),
            ("operatorframework.io/os.linux", "supported"),
            ("operatorframework.io/arch.amd64", "supported"),
        ] {
            assert_eq!(labels[k], v, "label {k}: {labels}");
        }
        let st = &pm["status"];
        assert_eq!(st["catalogSourceDisplayName"], "Fleet operators");
        assert_eq!(st["catalogSourcePublisher"], "aloft tests");
        assert_eq!(st["defaultChannel"], "stable");
        assert_eq!(st["provider"]["name"], "aloft");
        let names: Vec<&str> = st["channels"].as_array().unwrap().iter().map(|c| c["name"].as_str().unwrap()).collect();
        assert_eq!(names, ["fast", "stable"], "by name");
        let stable = &st["channels"][1];
        assert_eq!(stable["currentCSV"], "ne.v1.1.0");
        let desc = &stable["currentCSVDesc"];
        assert_eq!(desc["displayName"], "Node exporter 1.1.0");
        assert_eq!(desc["version"], "1.1.0");
        assert_eq!(desc["annotations"]["capabilities"], "Basic Install");
        assert_eq!(desc["installModes"][0]["type"], "AllNamespaces");
        assert_eq!(desc["icon"][0]["mediatype"], "image/svg+xml", "the package's icon: {desc}");
        assert!(desc.get("unknownField").is_none(), "only the described fields: {desc}");
        assert_eq!(
            stable["entries"],
            json!([{"name": "ne.v1.1.0", "version": "1.1.0"}, {"name": "ne.v1.0.0", "version": "1.0.0"}]),
            "head first"
        );
    }

    #[test]
    fn a_default_channel_without_a_head_falls_back_and_an_unknown_package_is_none() {
        let c = catalog(vec![
            json!({"schema": "olm.package", "name": "p", "defaultChannel": "a"}),
            json!({"schema": "olm.channel", "package": "p", "name": "a", "entries": [{"name": "p.v1.0.0"}]}),
            json!({"schema": "olm.bundle", "name": "p.v1.0.0", "package": "p", "image": "x",
                   "properties": [{"type": "olm.package", "value": {"packageName": "p", "version": "1.0.0"}}]}),
        ]);
        let pm = package_manifest(&source(), &c, "p").unwrap();
        assert_eq!(pm["status"]["defaultChannel"], "a");
        assert_eq!(pm["status"]["provider"], json!({}), "no CSV fields, no provider");
        assert!(package_manifest(&source(), &c, "nope").is_none());
    }
}
