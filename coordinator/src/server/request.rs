//! Turning an HTTP request into what it addresses (a discovery document or a resource), and its
//! body into an object.

use super::error::ApiError;
use crate::resources::{self, ResourceType};
use axum::http::HeaderMap;
use serde_json::Value;

/// What a path under `/api` or `/apis` names.
#[derive(Debug, Clone, PartialEq)]
pub enum Target {
    CoreVersions,
    Groups,
    Group(String),
    ResourceList {
        group: String,
        version: String,
    },
    Resource(ResourcePath),
    /// The core Pods collection, cluster-wide or of one namespace. aloft runs no pods, but
    /// `kubectl describe node` lists the node's pods and gives up on a 404: it is served as
    /// an empty list ([`super::empty_pod_list`]).
    Pods,
    /// A node's Lease (`coordination.k8s.io/v1`, namespace `kube-node-lease`), which `kubectl
    /// describe node` reads: made from what the coordinator knows of the node's agent
    /// ([`super::lease`]).
    NodeLease(String),
    /// A review: who the caller is, or whether it may do something (`kubectl auth whoami` and
    /// `kubectl auth can-i`), answered by [`super::review`].
    Review(super::review::Review),
}

#[derive(Debug, Clone, PartialEq)]
pub struct ResourcePath {
    pub rt: &'static ResourceType,
    /// Some for a namespaced path (`.../namespaces/<ns>/...`).
    pub namespace: Option<String>,
    pub name: Option<String>,
    pub subresource: Option<String>,
}

impl ResourcePath {
    /// The namespace the object lives in: empty for cluster-scoped kinds.
    pub fn store_namespace(&self) -> String {
        if self.rt.namespaced {
            self.namespace.clone().unwrap_or_default()
        } else {
            String::new()
        }
    }
}

/// Parse the part of the path after `/api` (`core = true`) or `/apis`.
pub fn parse(core: bool, rest: &str) -> Result<Target, ApiError> {
    let segs: Vec<String> = rest
        .split('/')
        .filter(|s| !s.is_empty())
        .map(|s| percent_encoding::percent_decode_str(s).decode_utf8_lossy().into_owned())
        .collect();
    let (group, version, tail) = if core {
        match segs.as_slice() {
            [] => return Ok(Target::CoreVersions),
            [v, tail @ ..] => (String::new(), v.clone(), tail),
        }
    } else {
        match segs.as_slice() {
            [] => return Ok(Target::Groups),
            [g] => return Ok(Target::Group(g.clone())),
            [g, v, tail @ ..] => (g.clone(), v.clone(), tail),
        }
    };
    let (namespace, tail) = match tail {
        [ns_kw, ns, rest @ ..] if ns_kw == "namespaces" && !rest.is_empty() => (Some(ns.clone()), rest),
        _ => (None, tail),
    };
    let (plural, name, sub) = match tail {
        [] => return Ok(Target::ResourceList { group, version }),
        [p] => (p, None, None),
        [p, n] => (p, Some(n.clone()), None),
        [p, n, s] => (p, Some(n.clone()), Some(s.clone())),
        _ => return Err(ApiError::not_found_path()),
    };
    if core && version == "v1" && plural == "pods" && name.is_none() {
        return Ok(Target::Pods);
    }
    if let (false, "coordination.k8s.io", "v1", Some(super::lease::NAMESPACE), "leases", Some(n), None) =
        (core, group.as_str(), version.as_str(), namespace.as_deref(), plural.as_str(), &name, &sub)
    {
        return Ok(Target::NodeLease(n.clone()));
    }
    if let Some(review) = super::review::Review::at(&group, &version, plural) {
        return match (&namespace, &name) {
            (None, None) => Ok(Target::Review(review)),
            _ => Err(ApiError::not_found_path()),
        };
    }
    let rt = resources::by_path(&group, &version, plural).ok_or_else(ApiError::not_found_path)?;
    if namespace.is_some() && !rt.namespaced {
        return Err(ApiError::not_found_path());
    }
    match sub.as_deref() {
        None => {}
        Some("status") if rt.status_subresource => {}
        Some(_) => return Err(ApiError::not_found_path()),
    }
    Ok(Target::Resource(ResourcePath { rt, namespace, name, subresource: sub }))
}

/// Decode a request body: JSON, or YAML when the content type says so (a single document).
pub fn decode_object(headers: &HeaderMap, body: &[u8]) -> Result<Value, ApiError> {
    let ctype = headers.get("content-type").and_then(|v| v.to_str().ok()).unwrap_or("application/json");
    let v: Value = if ctype.contains("yaml") {
        let text = std::str::from_utf8(body).map_err(|_| ApiError::bad_request("request body is not UTF-8"))?;
        crate::yaml::from_str(text)
            .map_err(|e| ApiError::bad_request(format!("malformed YAML in request body: {e}")))?
    } else if ctype.contains("json") || ctype.is_empty() {
        serde_json::from_slice(body)
            .map_err(|e| ApiError::bad_request(format!("malformed JSON in request body: {e}")))?
    } else {
        return Err(ApiError::unsupported_media(format!(
            "unsupported content type {ctype:?}: send application/json or application/yaml"
        )));
    };
    if !v.is_object() {
        return Err(ApiError::bad_request("request body must be a JSON object"));
    }
    Ok(v)
}

/// The object's apiVersion and kind must be those of the endpoint it was sent to.
pub fn check_type(rt: &ResourceType, obj: &Value) -> Result<(), ApiError> {
    let av = obj.get("apiVersion").and_then(Value::as_str).unwrap_or("");
    let kind = obj.get("kind").and_then(Value::as_str).unwrap_or("");
    if av.is_empty() || kind.is_empty() {
        return Err(ApiError::bad_request("Object 'apiVersion' and 'kind' are required"));
    }
    if av != rt.api_version() {
        return Err(ApiError::bad_request(format!(
            "the API version in the data ({av}) does not match the expected API version ({})",
            rt.api_version()
        )));
    }
    if kind != rt.kind {
        return Err(ApiError::bad_request(format!(
            "the kind in the data ({kind}) does not match the expected kind ({})",
            rt.kind
        )));
    }
    Ok(())
}

/// Field selectors kubectl sends: `metadata.name=x` for `get NAME -w`, `metadata.namespace`, and
/// for events `involvedObject.*`, `reason`, `type` (what `kubectl describe` asks for).
#[derive(Debug, Default, Clone)]
pub struct FieldSelector {
    terms: Vec<(String, bool, String)>,
}

/// The fields a kind can be selected by, beyond `metadata.name` and `metadata.namespace`.
fn extra_fields(rt: &ResourceType) -> &'static [&'static str] {
    match rt.kind {
        "Event" => &[
            "involvedObject.kind",
            "involvedObject.namespace",
            "involvedObject.name",
            "involvedObject.uid",
            "involvedObject.apiVersion",
            "involvedObject.resourceVersion",
            "involvedObject.fieldPath",
            "reason",
            "reportingComponent",
            "source",
            "type",
        ],
        "Node" => &["spec.unschedulable"],
        _ => &[],
    }
}

impl FieldSelector {
    pub fn parse(rt: &ResourceType, s: &str) -> Result<Self, ApiError> {
        let mut terms = Vec::new();
        for t in s.split(',').map(str::trim).filter(|t| !t.is_empty()) {
            let (field, neg, value) = if let Some((f, v)) = t.split_once("!=") {
                (f, true, v)
            } else if let Some((f, v)) = t.split_once("==").or_else(|| t.split_once('=')) {
                (f, false, v)
            } else {
                return Err(ApiError::bad_request(format!(
                    "invalid field selector {t:?}: want field=value or field!=value"
                )));
            };
            let field = field.trim();
            let extra = extra_fields(rt);
            if field != "metadata.name" && field != "metadata.namespace" && !extra.contains(&field) {
                let mut supported = vec!["metadata.name", "metadata.namespace"];
                supported.extend_from_slice(extra);
                return Err(ApiError::bad_request(format!(
                    "field label not supported: {field} (supported for {}: {})",
                    rt.plural,
                    supported.join(", ")
                )));
            }
            terms.push((field.to_string(), neg, value.trim().to_string()));
        }
        Ok(FieldSelector { terms })
    }

    /// No terms: every object matches.
    pub fn is_empty(&self) -> bool {
        self.terms.is_empty()
    }

    /// The single name it pins, if any: lets a watch filter in the store.
    pub fn name(&self) -> Option<&str> {
        self.terms.iter().find(|(f, neg, _)| f == "metadata.name" && !neg).map(|(_, _, v)| v.as_str())
    }

    /// Whether it selects by anything an object's writes can change (not only by its name or
    /// namespace, which are fixed at creation).
    pub fn selects_by_content(&self) -> bool {
        self.terms.iter().any(|(f, _, _)| f != "metadata.name" && f != "metadata.namespace")
    }

    pub fn matches(&self, obj: &Value) -> bool {
        self.terms.iter().all(|(field, neg, value)| {
            // An Event's `source` is its `source.component`, or its `reportingComponent` when that
            // is empty, as kube-apiserver's field set for Events has it.
            let at = |path: &str| super::objects::at_dotted(obj, path);
            let found = if field == "source" {
                at("source.component")
                    .filter(|v| v.as_str().is_some_and(|s| !s.is_empty()))
                    .or_else(|| at("reportingComponent"))
            } else {
                at(field)
            };
            let actual = match found {
                Some(Value::String(s)) => s.clone(),
                Some(Value::Bool(b)) => b.to_string(),
                Some(Value::Number(n)) => n.to_string(),
                // An unset boolean reads as false, as the API server's field sets do.
                None | Some(Value::Null) if field == "spec.unschedulable" => "false".into(),
                _ => String::new(),
            };
            (actual == *value) != *neg
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths() {
        assert_eq!(parse(true, "").unwrap(), Target::CoreVersions);
        assert_eq!(parse(false, "/").unwrap(), Target::Groups);
        assert!(matches!(parse(false, "/machineconfiguration.openshift.io/v1").unwrap(), Target::ResourceList { .. }));
        let Target::Resource(p) =
            parse(false, "/machineconfiguration.openshift.io/v1/machineconfigpools/worker/status").unwrap()
        else {
            panic!("not a resource")
        };
        assert_eq!(
            (p.rt.kind, p.name.as_deref(), p.subresource.as_deref()),
            ("MachineConfigPool", Some("worker"), Some("status"))
        );
        let Target::Resource(p) = parse(true, "/v1/namespaces/default/events").unwrap() else {
            panic!("not a resource")
        };
        assert_eq!((p.rt.kind, p.namespace.as_deref()), ("Event", Some("default")));
        // Unknown resources, subresources and namespaced paths of cluster kinds are 404s.
        assert_eq!(parse(true, "/v1/pods").unwrap(), Target::Pods);
        assert_eq!(parse(true, "/v1/namespaces/default/pods").unwrap(), Target::Pods);
        assert_eq!(
            parse(false, "/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/n1").unwrap(),
            Target::NodeLease("n1".into())
        );
        assert!(parse(false, "/coordination.k8s.io/v1/namespaces/default/leases/n1").is_err());
        for bad in [
            "/v1/pods/p",
            "/v1/namespaces/default/pods/p",
            "/v1/nodes/a/proxy",
            "/v1/namespaces/x/nodes",
            "/v1/nodes/a/status/x",
        ] {
            assert_eq!(parse(true, bad).unwrap_err().status.code, 404, "{bad}");
        }
        assert_eq!(
            parse(false, "/machineconfiguration.openshift.io/v1/machineconfigs/mc/status").unwrap_err().status.code,
            404
        );
    }

    #[test]
    fn field_selectors() {
        let pools = &crate::resources::MACHINE_CONFIG_POOL;
        let f = FieldSelector::parse(pools, "metadata.name=worker").unwrap();
        assert_eq!(f.name(), Some("worker"));
        assert!(f.matches(&serde_json::json!({"metadata": {"name": "worker"}})));
        assert!(!f.matches(&serde_json::json!({"metadata": {"name": "master"}})));
        assert!(FieldSelector::parse(pools, "spec.unschedulable=true").is_err());
        assert!(FieldSelector::parse(pools, "metadata.name").is_err());
        // What `kubectl describe` sends for a cluster-scoped object's events.
        let ev = FieldSelector::parse(
            &crate::resources::EVENT,
            "involvedObject.name=worker,involvedObject.namespace=,involvedObject.kind=MachineConfigPool",
        )
        .unwrap();
        let event = serde_json::json!({"involvedObject": {"kind": "MachineConfigPool", "name": "worker"}});
        assert!(ev.matches(&event));
        assert!(!ev.matches(&serde_json::json!({"involvedObject": {"kind": "Node", "name": "worker"}})));
        let cordoned = FieldSelector::parse(&crate::resources::NODE, "spec.unschedulable=false").unwrap();
        assert!(cordoned.matches(&serde_json::json!({"spec": {}})));
        assert!(!cordoned.matches(&serde_json::json!({"spec": {"unschedulable": true}})));
        // `source` is the Event's source.component, else its reportingComponent.
        let by_node = FieldSelector::parse(&crate::resources::EVENT, "source=aloft-node-controller").unwrap();
        let not_node = FieldSelector::parse(&crate::resources::EVENT, "source!=aloft-node-controller").unwrap();
        let ours = serde_json::json!({"source": {"component": "aloft-node-controller"}, "reportingComponent": "x"});
        let reported = serde_json::json!({"source": {}, "reportingComponent": "aloft-node-controller"});
        let other = serde_json::json!({"source": {"component": "aloft-drain-controller"}});
        assert!(by_node.matches(&ours) && by_node.matches(&reported) && !by_node.matches(&other));
        assert!(!not_node.matches(&ours) && not_node.matches(&other));
    }
}
