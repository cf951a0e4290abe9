//! OpenAPI v3 documents, minimal (and an empty v2 one, see [`v2`]): one schema per kind carrying
//! `x-kubernetes-group-version-kind`, with the fields of the kinds written by hand described for
//! `kubectl explain` ([`super::explain`]).
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
        let mut schema = json!({
            "type": "object",
            "description": format!("{} ({})", r.kind, r.api_version()),
            "x-kubernetes-group-version-kind": [{"group": r.group, "version": r.version, "kind": r.kind}],
            "x-kubernetes-preserve-unknown-fields": true,
        });
        // The fields `kubectl explain` shows, for the kinds written by hand.
        if let Some(props) = super::explain::properties(r.kind) {
            schema["properties"] = props;
        }
        schemas.insert(name.clone(), schema);
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

/// `/openapi/v2`: an empty Swagger 2.0 document, as protobuf (what kubectl asks for) or JSON.
/// kubectl falls back to v2 for a kind the v3 documents do not describe (a Pod, a `v2` Node),
/// and skips its own validation of a kind v2 lacks too; it then asks discovery and ends in its
/// usual `no matches for kind "Pod" in version "v1"`. Without a v2 document it stopped at
/// "failed to download openapi".
pub fn v2(accept: &str) -> (&'static str, Vec<u8>) {
    const TITLE: &str = "aloft-coordinator";
    const VERSION: &str = env!("CARGO_PKG_VERSION");
    if accept.contains("protobuf") {
        // gnostic's openapi_v2.Document: swagger (1) = "2.0", info (2) = {title (1), version (2)}.
        let field = |tag: u8, bytes: &[u8]| -> Vec<u8> {
            let mut out = vec![tag];
            out.extend(varint(bytes.len()));
            out.extend_from_slice(bytes);
            out
        };
        let info = [field(0x0a, TITLE.as_bytes()), field(0x12, VERSION.as_bytes())].concat();
        let doc = [field(0x0a, b"2.0"), field(0x12, &info)].concat();
        // Kubernetes' own spelling: Go's mime parser refuses the `@` of the Accept form.
        return ("application/com.github.proto-openapi.spec.v2.v1.0+protobuf", doc);
    }
    let doc = json!({"swagger": "2.0", "info": {"title": TITLE, "version": VERSION}, "paths": {}});
    ("application/json", doc.to_string().into_bytes())
}

/// A protobuf varint.
fn varint(mut n: usize) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let low = (n & 0x7f) as u8;
        n >>= 7;
        if n == 0 {
            out.push(low);
            return out;
        }
        out.push(low | 0x80);
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
        // The kinds written by hand carry their fields, for kubectl explain; unknown fields stay.
        let pool = &doc["components"]["schemas"]["io.openshift.machineconfiguration.v1.MachineConfigPool"];
        assert!(pool["properties"]["spec"]["properties"]["rollout"]["properties"]["canary"].is_object(), "{pool}");
        assert_eq!(pool["x-kubernetes-preserve-unknown-fields"], true);
        let mc = &doc["components"]["schemas"]["io.openshift.machineconfiguration.v1.MachineConfig"];
        assert!(mc["properties"]["spec"]["properties"]["osImageURL"].is_object(), "{mc}");
        assert!(mc["properties"].get("status").is_none(), "a MachineConfig has no status: {mc}");
        assert_eq!(mc["x-kubernetes-preserve-unknown-fields"], true);
        assert_eq!(mc["properties"]["spec"]["properties"]["config"]["x-kubernetes-preserve-unknown-fields"], true);
    }

    #[test]
    fn v2_is_an_empty_swagger_document() {
        let (ctype, pb) = v2("application/com.github.proto-openapi.spec.v2@v1.0+protobuf");
        assert!(ctype.ends_with("+protobuf"));
        assert_eq!(&pb[..5], b"\x0a\x032.0", "swagger = \"2.0\"");
        assert_eq!(pb[5], 0x12, "then info");
        assert_eq!(pb[6] as usize, pb.len() - 7, "whose length is the rest");
        assert_eq!(varint(300), [0xac, 0x02]);
        let (ctype, js) = v2("application/json");
        assert_eq!(ctype, "application/json");
        assert_eq!(serde_json::from_slice::<Value>(&js).unwrap()["swagger"], "2.0");
    }
}
