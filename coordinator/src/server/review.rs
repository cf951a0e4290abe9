//! The reviews kube-apiserver serves to every authenticated caller, so `kubectl auth whoami` and
//! `kubectl auth can-i` work: `SelfSubjectReview` (authentication.k8s.io/v1, who am I),
//! `SelfSubjectAccessReview` (authorization.k8s.io/v1, may I) and `SelfSubjectRulesReview` (what
//! may I: `can-i --list`). All are create-only and stored nowhere. An access review is decided by
//! [`super::handlers::decide`] and [`crate::auth::decide_path`], the functions that decide the
//! real requests; a rules review lists [`crate::auth::rules`], which a unit test holds to them.

use super::error::{cause, ApiError};
use super::request::{self, FieldSelector};
use super::Ctx;
use crate::auth::{self, Decision, Identity, Verb};
use axum::http::{HeaderMap, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Map, Value};

/// Which review a path names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Review {
    SelfSubject,
    SelfSubjectAccess,
    SelfSubjectRules,
}

impl Review {
    const ALL: [Review; 3] = [Review::SelfSubject, Review::SelfSubjectAccess, Review::SelfSubjectRules];

    fn group(self) -> &'static str {
        match self {
            Review::SelfSubject => "authentication.k8s.io",
            Review::SelfSubjectAccess | Review::SelfSubjectRules => "authorization.k8s.io",
        }
    }
    fn plural(self) -> &'static str {
        match self {
            Review::SelfSubject => "selfsubjectreviews",
            Review::SelfSubjectAccess => "selfsubjectaccessreviews",
            Review::SelfSubjectRules => "selfsubjectrulesreviews",
        }
    }
    fn kind(self) -> &'static str {
        match self {
            Review::SelfSubject => "SelfSubjectReview",
            Review::SelfSubjectAccess => "SelfSubjectAccessReview",
            Review::SelfSubjectRules => "SelfSubjectRulesReview",
        }
    }
    fn api_version(self) -> String {
        format!("{}/v1", self.group())
    }

    /// The review served at `/apis/<group>/<version>/<plural>`.
    pub fn at(group: &str, version: &str, plural: &str) -> Option<Review> {
        Self::ALL.into_iter().find(|r| r.group() == group && version == "v1" && r.plural() == plural)
    }

    /// The API groups the reviews live in, for discovery.
    pub fn groups() -> impl Iterator<Item = &'static str> {
        Self::ALL.into_iter().map(Review::group)
    }

    /// Discovery's `APIResource` entries of `group`/`version`: create only, as kube-apiserver
    /// lists them.
    pub fn discovery_entries(group: &str, version: &str) -> Vec<Value> {
        Self::ALL
            .into_iter()
            .filter(|r| r.group() == group && version == "v1")
            .map(|r| {
                json!({
                    "name": r.plural(),
                    "singularName": r.plural().trim_end_matches('s'),
                    "namespaced": false,
                    "kind": r.kind(),
                    "verbs": ["create"],
                })
            })
            .collect()
    }
}

/// `POST` of a review: the review answered, with its status filled in.
pub async fn answer(
    ctx: &Ctx,
    who: &Identity,
    review: Review,
    method: &Method,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<Response, ApiError> {
    if *method != Method::POST {
        return Err(ApiError::method_not_allowed(format!(
            "{method} is not supported on {}: a review is only created (POST)",
            review.plural()
        )));
    }
    let protobuf = headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|c| c.starts_with("application/vnd.kubernetes.protobuf"));
    let mut obj = if protobuf { from_protobuf(review, body)? } else { request::decode_object(headers, body)? };
    check_type(review, &obj)?;
    obj["apiVersion"] = review.api_version().into();
    obj["kind"] = review.kind().into();
    if !obj.get("metadata").is_some_and(Value::is_object) {
        obj["metadata"] = json!({});
    }
    obj["metadata"]["creationTimestamp"] = Value::Null;
    obj["status"] = match review {
        Review::SelfSubject => {
            let (username, groups) = who.user_info();
            json!({"userInfo": {
                "username": username,
                "groups": groups,
                "extra": {"aloft.dev/token-name": [who.name]},
            }})
        }
        Review::SelfSubjectAccess => access_status(ctx, who, &obj).await?,
        Review::SelfSubjectRules => {
            // kube-apiserver asks for a namespace (kubectl sends one); what it is changes
            // nothing here: every kind aloft serves is cluster-scoped.
            match obj.pointer("/spec/namespace") {
                Some(Value::String(ns)) if !ns.is_empty() => {}
                _ => return Err(ApiError::bad_request("no namespace on request")),
            }
            let own_node = match &who.role {
                auth::Role::Node(n) => {
                    let key = crate::store::Key::cluster(&crate::resources::NODE.store_key(), n);
                    ctx.store.get(&key).await.map_err(|e| ApiError::from_store(e, "nodes", n))?
                }
                _ => None,
            };
            auth::rules(who, own_node.as_deref())
        }
    };
    Ok((StatusCode::CREATED, axum::Json(obj)).into_response())
}

/// The body names this review's kind and version, or none (then it is taken as this review, as
/// kube-apiserver decodes into the endpoint's kind).
fn check_type(review: Review, obj: &Value) -> Result<(), ApiError> {
    let av = obj.get("apiVersion").and_then(Value::as_str).unwrap_or("");
    let kind = obj.get("kind").and_then(Value::as_str).unwrap_or("");
    if !kind.is_empty() && kind != review.kind() {
        return Err(ApiError::bad_request(format!(
            "the kind in the data ({kind}) does not match the expected kind ({})",
            review.kind()
        )));
    }
    if !av.is_empty() && av != review.api_version() {
        return Err(ApiError::bad_request(format!(
            "the API version in the data ({av}) does not match the expected API version ({})",
            review.api_version()
        )));
    }
    Ok(())
}

fn invalid(field: &str, value: &Value, message: &str) -> ApiError {
    let shown = serde_json::to_string(value).unwrap_or_default();
    ApiError::invalid(
        "SelfSubjectAccessReview.authorization.k8s.io",
        "",
        vec![cause(field, "FieldValueInvalid", format!("Invalid value: {shown}: {message}"))],
    )
}

/// A string field of an attributes object: absent is empty, anything but a string is refused.
fn text<'a>(attrs: &'a Map<String, Value>, path: &str, key: &str) -> Result<&'a str, ApiError> {
    match attrs.get(key) {
        None | Some(Value::Null) => Ok(""),
        Some(Value::String(s)) => Ok(s),
        Some(other) => Err(invalid(&format!("{path}.{key}"), other, "must be a string")),
    }
}

/// `status` of a SelfSubjectAccessReview: exactly one of `spec.resourceAttributes` and
/// `spec.nonResourceAttributes`, as kube-apiserver validates it (422 naming the field).
async fn access_status(ctx: &Ctx, who: &Identity, obj: &Value) -> Result<Value, ApiError> {
    let spec = obj.get("spec").filter(|s| !s.is_null());
    let attrs = |k: &str| spec.and_then(|s| s.get(k)).filter(|v| !v.is_null());
    let (decision, what) = match (attrs("resourceAttributes"), attrs("nonResourceAttributes")) {
        (Some(_), Some(n)) => {
            return Err(invalid(
                "spec.nonResourceAttributes",
                n,
                "cannot be specified in combination with resourceAttributes",
            ))
        }
        (None, None) => {
            return Err(invalid(
                "spec.resourceAttributes",
                &Value::Null,
                "exactly one of nonResourceAttributes or resourceAttributes must be specified",
            ))
        }
        (Some(r), None) => {
            let path = "spec.resourceAttributes";
            let r = r.as_object().ok_or_else(|| invalid(path, r, "must be an object"))?;
            resource_decision(ctx, who, r, path).await?
        }
        (None, Some(n)) => {
            let path = "spec.nonResourceAttributes";
            let n = n.as_object().ok_or_else(|| invalid(path, n, "must be an object"))?;
            let (verb, url) = (text(n, path, "verb")?, text(n, path, "path")?);
            (auth::decide_path(who, verb, url), format!("{verb} {url}"))
        }
    };
    let role = &who.role;
    Ok(match decision {
        Decision::Allow => json!({"allowed": true, "reason": format!("aloft: role {role} may {what}")}),
        Decision::AllowStatusAndAnnotations => json!({
            "allowed": true,
            "reason": format!("aloft: role {role} may {what}, changing only metadata.annotations and status"),
        }),
        // aloft's one authorizer has the last word: a no is a denial, not a lack of opinion.
        // No reason, as RBAC gives none: `kubectl auth can-i` prints a reason after its "no".
        Decision::Deny => json!({"allowed": false, "denied": true}),
    })
}

/// The decision on `spec.resourceAttributes`, and the request in words for the reason.
async fn resource_decision(
    ctx: &Ctx,
    who: &Identity,
    r: &Map<String, Value>,
    path: &str,
) -> Result<(Decision, String), ApiError> {
    let verb = text(r, path, "verb")?;
    let group = text(r, path, "group")?;
    let resource = text(r, path, "resource")?;
    let name = text(r, path, "name")?;
    let subresource = text(r, path, "subresource")?;
    let mut what = format!("{verb} {resource}");
    if !group.is_empty() {
        what = format!("{what}.{group}");
    }
    if !subresource.is_empty() {
        what = format!("{what}/{subresource}");
    }
    if !name.is_empty() {
        what = format!("{what} {name:?}");
    }
    let Some(verb) = Verb::parse(verb) else {
        // A verb no endpoint serves (`deletecollection`, `*`, ...): only a caller allowed
        // everything may.
        let d = if who.allowed_everything() { Decision::Allow } else { Decision::Deny };
        return Ok((d, what));
    };
    // The key `decide` compares with `ResourceType::store_key()`: the same `<group>/<plural>` form,
    // also for kinds aloft does not serve (they match no rule but an admin's or a viewer's read).
    let rt = crate::resources::ALL.iter().find(|rt| rt.group == group && rt.plural == resource);
    let key = rt.map(|rt| rt.store_key()).unwrap_or_else(|| format!("{group}/{resource}"));
    // A `metadata.name=` field selector pins a list or watch to one object (an agent's own Node).
    let raw_selector = r.get("fieldSelector").and_then(|f| f.get("rawSelector")).and_then(Value::as_str);
    let selector = match (rt, raw_selector) {
        (Some(rt), Some(raw)) if matches!(verb, Verb::List | Verb::Watch) => Some(
            FieldSelector::parse(rt, raw)
                .map_err(|e| invalid(&format!("{path}.fieldSelector.rawSelector"), &raw.into(), &e.status.message))?,
        ),
        _ => None,
    };
    let req = auth::Request {
        verb,
        resource: &key,
        name: (!name.is_empty()).then_some(name),
        subresource: (!subresource.is_empty()).then_some(subresource),
        field_name: selector.as_ref().and_then(FieldSelector::name),
    };
    let decision =
        super::handlers::decide(ctx, who, &req).await.map_err(|e| ApiError::from_store(e, "nodes", &who.name))?;
    Ok((decision, what))
}

/// A review sent as Kubernetes protobuf, as kubectl's typed client sends built-in kinds: the
/// fields aloft reads, as the JSON object they would have been. The body is the magic `k8s\0`
/// and a `runtime.Unknown` whose `raw` is the review ([`pb`]).
fn from_protobuf(review: Review, body: &[u8]) -> Result<Value, ApiError> {
    use prost::Message;
    let bad = |e: prost::DecodeError| {
        ApiError::bad_request(format!("malformed protobuf {} in request body: {e}", review.kind()))
    };
    let envelope = body.strip_prefix(b"k8s\0").ok_or_else(|| {
        ApiError::bad_request(format!("malformed protobuf {} in request body: no k8s\\0 envelope magic", review.kind()))
    })?;
    let unknown = pb::Unknown::decode(envelope).map_err(bad)?;
    let type_meta = unknown.type_meta.unwrap_or_default();
    let mut obj = json!({"apiVersion": type_meta.api_version, "kind": type_meta.kind});
    match review {
        // A who-am-I review has no spec.
        Review::SelfSubject => return Ok(obj),
        Review::SelfSubjectRules => {
            let spec = pb::SelfSubjectRulesReview::decode(unknown.raw.as_slice()).map_err(bad)?.spec;
            obj["spec"] = json!({"namespace": spec.unwrap_or_default().namespace});
            return Ok(obj);
        }
        Review::SelfSubjectAccess => {}
    }
    let spec = pb::SelfSubjectAccessReview::decode(unknown.raw.as_slice()).map_err(bad)?.spec.unwrap_or_default();
    let mut spec_json = Map::new();
    if let Some(r) = spec.resource_attributes {
        let mut attrs = json!({
            "namespace": r.namespace,
            "verb": r.verb,
            "group": r.group,
            "version": r.version,
            "resource": r.resource,
            "subresource": r.subresource,
            "name": r.name,
        });
        if let Some(fs) = r.field_selector {
            attrs["fieldSelector"] = json!({"rawSelector": fs.raw_selector});
        }
        spec_json.insert("resourceAttributes".into(), attrs);
    }
    if let Some(n) = spec.non_resource_attributes {
        spec_json.insert("nonResourceAttributes".into(), json!({"path": n.path, "verb": n.verb}));
    }
    obj["spec"] = Value::Object(spec_json);
    Ok(obj)
}

/// The messages of the reviews kubectl sends, as far as aloft reads them; field numbers as in
/// k8s.io/apimachinery's runtime.Unknown and k8s.io/api/authorization/v1's generated.proto
/// (unknown fields, such as metadata and labelSelector, are skipped by the decoder).
mod pb {
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct TypeMeta {
        #[prost(string, tag = "1")]
        pub api_version: String,
        #[prost(string, tag = "2")]
        pub kind: String,
    }

    /// The envelope of every protobuf body: the type, and the object's own encoding in `raw`.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Unknown {
        #[prost(message, optional, tag = "1")]
        pub type_meta: Option<TypeMeta>,
        #[prost(bytes = "vec", tag = "2")]
        pub raw: Vec<u8>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct SelfSubjectAccessReview {
        #[prost(message, optional, tag = "2")]
        pub spec: Option<Spec>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct SelfSubjectRulesReview {
        #[prost(message, optional, tag = "2")]
        pub spec: Option<RulesSpec>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct RulesSpec {
        #[prost(string, tag = "1")]
        pub namespace: String,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Spec {
        #[prost(message, optional, tag = "1")]
        pub resource_attributes: Option<ResourceAttributes>,
        #[prost(message, optional, tag = "2")]
        pub non_resource_attributes: Option<NonResourceAttributes>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ResourceAttributes {
        #[prost(string, tag = "1")]
        pub namespace: String,
        #[prost(string, tag = "2")]
        pub verb: String,
        #[prost(string, tag = "3")]
        pub group: String,
        #[prost(string, tag = "4")]
        pub version: String,
        #[prost(string, tag = "5")]
        pub resource: String,
        #[prost(string, tag = "6")]
        pub subresource: String,
        #[prost(string, tag = "7")]
        pub name: String,
        #[prost(message, optional, tag = "8")]
        pub field_selector: Option<FieldSelector>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct FieldSelector {
        #[prost(string, tag = "1")]
        pub raw_selector: String,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct NonResourceAttributes {
        #[prost(string, tag = "1")]
        pub path: String,
        #[prost(string, tag = "2")]
        pub verb: String,
    }

    #[cfg(test)]
    mod tests {
        use super::*;
        use prost::Message;

        /// A review as kubectl encodes it reads back with its attributes; a truncated one is an
        /// error, not a review of nothing.
        #[test]
        fn a_review_round_trips_and_a_truncated_one_is_refused() {
            let review = SelfSubjectAccessReview {
                spec: Some(Spec {
                    resource_attributes: Some(ResourceAttributes {
                        verb: "patch".into(),
                        resource: "nodes".into(),
                        name: "n1".into(),
                        field_selector: Some(FieldSelector { raw_selector: "metadata.name=n1".into() }),
                        ..Default::default()
                    }),
                    non_resource_attributes: None,
                }),
            };
            let unknown = Unknown {
                type_meta: Some(TypeMeta {
                    api_version: "authorization.k8s.io/v1".into(),
                    kind: "SelfSubjectAccessReview".into(),
                }),
                raw: review.encode_to_vec(),
            };
            let mut body = b"k8s\0".to_vec();
            body.extend(unknown.encode_to_vec());
            let v = super::super::from_protobuf(super::super::Review::SelfSubjectAccess, &body).expect("decodes");
            assert_eq!(v["kind"], "SelfSubjectAccessReview");
            assert_eq!(v["spec"]["resourceAttributes"]["verb"], "patch");
            assert_eq!(v["spec"]["resourceAttributes"]["name"], "n1");
            assert_eq!(v["spec"]["resourceAttributes"]["fieldSelector"]["rawSelector"], "metadata.name=n1");
            assert!(v["spec"].get("nonResourceAttributes").is_none());
            let cut = &body[..body.len() - 3];
            assert!(super::super::from_protobuf(super::super::Review::SelfSubjectAccess, cut).is_err());
            assert!(super::super::from_protobuf(super::super::Review::SelfSubjectAccess, b"{}").is_err());
        }
    }
}
