//! OpenAPI v3 documents, minimal: one schema per kind carrying `x-kubernetes-group-version-kind`.
//! kubectl (1.27+) downloads these before `apply`/`create` to learn that the server validates
//! fields itself; it then sends `fieldValidation=Strict` and leaves validation to us instead of
//! failing with "failed to download openapi". Kinds keep unknown fields
//! (`x-kubernetes-preserve-unknown-fields`), as OpenShift's CRDs do for Ignition configs.

use crate::resources::{self, ResourceType};
use serde_json::{json, Map, Value};
use sha2::{Digest, Sha256};

fn gv_path(group: &str, version: &str) -> String {
    if group.is_empty() {
        format!("api/{version}")
    } else {
        format!("apis/{group}/{version}")
    }
}

/// A schema name in Kubernetes' reverse-domain style.
fn schema_name(r: &ResourceType) -> String {
    let group = if r.group.is_empty() {
        "io.k8s.api.core".to_string()
    } else {
        r.group.split('.').rev().collect::<Vec<_>>().join(".")
    };
    format!("{group}.{}.{}", r.version, r.kind)
}

fn gv_doc(group: &str, version: &str) -> Option<Value> {
    let mut schemas = Map::new();
    let mut paths = Map::new();
    let served: Vec<&ResourceType> =
        resources::ALL.iter().filter(|r| r.group == group && r.version == version).collect();
    if served.is_empty() {
        return None;
    }
    for r in served {
        let name = schema_name(r);
        schemas.insert(
            name.clone(),
            json!({
                "type": "object",
                "description": format!("{} ({})", r.kind, r.api_version()),
                "x-kubernetes-group-version-kind": [{"group": r.group, "version": r.version, "kind": r.kind}],
                "x-kubernetes-preserve-unknown-fields": true,
            }),
        );
        let reference = json!({"$ref": format!("#/components/schemas/{name}")});
        let field_validation = json!({"name": "fieldValidation", "in": "query", "schema": {"type": "string"}});
        let ok = json!({"200": {"description": "OK", "content": {"application/json": {"schema": reference}}}});
        let ns = if r.namespaced { "/namespaces/{namespace}" } else { "" };
        paths.insert(
            format!("/{}{ns}/{}/{{name}}", gv_path(group, version), r.plural),
            json!({
                "get": {"responses": ok},
                "put": {"parameters": [field_validation], "responses": ok},
                // kubectl looks for the GVK on the PATCH operation itself, as one object.
                "patch": {
                    "x-kubernetes-group-version-kind": {"group": r.group, "version": r.version, "kind": r.kind},
                    "parameters": [field_validation],
                    "responses": ok,
                },
            }),
        );
        paths.insert(
            format!("/{}{ns}/{}", gv_path(group, version), r.plural),
            json!({"post": {"parameters": [field_validation], "responses": ok}}),
        );
    }
    Some(json!({
        "openapi": "3.0.0",
        "info": {"title": "aloft-coordinator", "version": env!("CARGO_PKG_VERSION")},
        "paths": paths,
        "components": {"schemas": schemas},
    }))
}

fn group_versions() -> Vec<(&'static str, &'static str)> {
    let mut gvs: Vec<(&str, &str)> = resources::ALL.iter().map(|r| (r.group, r.version)).collect();
    gvs.sort();
    gvs.dedup();
    gvs
}

/// `/openapi/v3`: where each group version's document is.
pub fn index() -> Value {
    let mut paths = Map::new();
    for (g, v) in group_versions() {
        let hash =
            gv_doc(g, v).map(|d| hex::encode(&Sha256::digest(d.to_string().as_bytes())[..8])).unwrap_or_default();
        let p = gv_path(g, v);
        paths.insert(p.clone(), json!({"serverRelativeURL": format!("/openapi/v3/{p}?hash={hash}")}));
    }
    json!({"paths": paths})
}

/// `/openapi/v3/<api/v1 | apis/group/version>`.
pub fn document(path: &str) -> Option<Value> {
    let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
    match segs.as_slice() {
        ["api", v] => gv_doc("", v),
        ["apis", g, v] => gv_doc(g, v),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_is_described() {
        let idx = index();
        for r in resources::ALL {
            let p = gv_path(r.group, r.version);
            let url = idx["paths"][&p]["serverRelativeURL"].as_str().unwrap();
            assert!(url.starts_with(&format!("/openapi/v3/{p}?hash=")));
            let doc = document(&p).unwrap();
            let gvk = &doc["components"]["schemas"][schema_name(r)]["x-kubernetes-group-version-kind"][0];
            assert_eq!(gvk["kind"], r.kind);
        }
        assert!(document("apis/nope/v1").is_none());
        // kubectl's field-validation probe: a PATCH operation naming the GVK, with the parameter.
        let doc = document("apis/machineconfiguration.openshift.io/v1").unwrap();
        let patch = &doc["paths"]["/apis/machineconfiguration.openshift.io/v1/machineconfigpools/{name}"]["patch"];
        assert_eq!(patch["x-kubernetes-group-version-kind"]["kind"], "MachineConfigPool");
        assert_eq!(patch["parameters"][0]["name"], "fieldValidation");
    }
}
