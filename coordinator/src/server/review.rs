//! The reviews kube-apiserver serves to every authenticated caller, so `kubectl auth whoami` and
//! `kubectl auth can-i` work: `SelfSubjectReview` (authentication.k8s.io/v1, who am I) and
//! `SelfSubjectAccessReview` (authorization.k8s.io/v1, may I). Both are create-only and stored
//! nowhere. An access review is decided by [`super::handlers::decide`] and
//! [`crate::auth::decide_path`], the functions that decide the real requests.

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
}

impl Review {
    const ALL: [Review; 2] = [Review::SelfSubject, Review::SelfSubjectAccess];

    fn group(self) -> &'static str {
        match self {
            Review::SelfSubject => "authentication.k8s.io",
            Review::SelfSubjectAccess => "authorization.k8s.io",
        }
    }
    fn plural(self) -> &'static str {
        match self {
            Review::SelfSubject => "selfsubjectreviews",
            Review::SelfSubjectAccess => "selfsubjectaccessreviews",
        }
    }
    fn kind(self) -> &'static str {
        match self {
            Review::SelfSubject => "SelfSubjectReview",
            Review::SelfSubjectAccess => "SelfSubjectAccessReview",
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
        "SelfSubjectAccessReview",
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
/// fields aloft reads, as the JSON object they would have been. The envelope is the magic
/// `k8s\0` and a `runtime.Unknown` (1: typeMeta {1: apiVersion, 2: kind}, 2: raw); in the raw
/// SelfSubjectAccessReview, 2: spec {1: resourceAttributes, 2: nonResourceAttributes}; field numbers
/// from k8s.io/api/authorization/v1's generated.proto.
fn from_protobuf(review: Review, body: &[u8]) -> Result<Value, ApiError> {
    let bad = || ApiError::bad_request(format!("malformed protobuf {} in request body", review.kind()));
    let envelope = body.strip_prefix(b"k8s\0").ok_or_else(bad)?;
    let unknown = proto::fields(envelope).ok_or_else(bad)?;
    let type_meta = proto::fields(proto::bytes(&unknown, 1)).ok_or_else(bad)?;
    let mut obj = json!({
        "apiVersion": proto::text(&type_meta, 1).ok_or_else(bad)?,
        "kind": proto::text(&type_meta, 2).ok_or_else(bad)?,
    });
    if review == Review::SelfSubject {
        return Ok(obj);
    }
    let raw = proto::fields(proto::bytes(&unknown, 2)).ok_or_else(bad)?;
    let spec = proto::fields(proto::bytes(&raw, 2)).ok_or_else(bad)?;
    let strings = |msg: &[u8], names: &[(u64, &str)]| -> Option<Value> {
        let f = proto::fields(msg)?;
        let mut m = Map::new();
        for (n, name) in names {
            m.insert(name.to_string(), proto::text(&f, *n)?.into());
        }
        Some(Value::Object(m))
    };
    let mut spec_json = Map::new();
    if let Some(r) = proto::get(&spec, 1) {
        let mut attrs = strings(
            r,
            &[
                (1, "namespace"),
                (2, "verb"),
                (3, "group"),
                (4, "version"),
                (5, "resource"),
                (6, "subresource"),
                (7, "name"),
            ],
        )
        .ok_or_else(bad)?;
        let f = proto::fields(r).ok_or_else(bad)?;
        if let Some(fs) = proto::get(&f, 8) {
            attrs["fieldSelector"] = strings(fs, &[(1, "rawSelector")]).ok_or_else(bad)?;
        }
        spec_json.insert("resourceAttributes".into(), attrs);
    }
    if let Some(n) = proto::get(&spec, 2) {
        spec_json.insert("nonResourceAttributes".into(), strings(n, &[(1, "path"), (2, "verb")]).ok_or_else(bad)?);
    }
    obj["spec"] = Value::Object(spec_json);
    Ok(obj)
}

/// Just enough protobuf wire format to read the length-delimited fields of a message.
mod proto {
    /// The length-delimited fields of `msg` by number (the last one wins, as protobuf merges
    /// scalars); varint and fixed fields are skipped. None when `msg` is not well-formed.
    pub fn fields(mut msg: &[u8]) -> Option<Vec<(u64, &[u8])>> {
        let mut out = Vec::new();
        while !msg.is_empty() {
            let key = varint(&mut msg)?;
            let skip = match key & 7 {
                0 => {
                    varint(&mut msg)?;
                    0
                }
                1 => 8,
                5 => 4,
                2 => {
                    let len = usize::try_from(varint(&mut msg)?).ok()?;
                    let value = msg.get(..len)?;
                    out.push((key >> 3, value));
                    len
                }
                _ => return None,
            };
            msg = msg.get(skip..)?;
        }
        Some(out)
    }

    fn varint(buf: &mut &[u8]) -> Option<u64> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let (&b, rest) = buf.split_first()?;
            *buf = rest;
            v |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Some(v);
            }
        }
        None
    }

    pub fn get<'a>(fields: &[(u64, &'a [u8])], n: u64) -> Option<&'a [u8]> {
        fields.iter().rev().find(|(k, _)| *k == n).map(|(_, v)| *v)
    }

    /// Field `n`'s bytes; empty when absent (protobuf's default).
    pub fn bytes<'a>(fields: &[(u64, &'a [u8])], n: u64) -> &'a [u8] {
        get(fields, n).unwrap_or_default()
    }

    /// Field `n` as UTF-8; empty when absent, None when not UTF-8.
    pub fn text<'a>(fields: &[(u64, &'a [u8])], n: u64) -> Option<&'a str> {
        std::str::from_utf8(bytes(fields, n)).ok()
    }

    #[cfg(test)]
    mod tests {
        #[test]
        fn reads_nested_length_delimited_fields_and_skips_others() {
            // 1: "ab", 3: varint 300, 2: {1: "x"}
            let msg = [0x0a, 2, b'a', b'b', 0x18, 0xac, 0x02, 0x12, 3, 0x0a, 1, b'x'];
            let f = super::fields(&msg).unwrap();
            assert_eq!(super::text(&f, 1), Some("ab"));
            let inner = super::fields(super::bytes(&f, 2)).unwrap();
            assert_eq!(super::text(&inner, 1), Some("x"));
            assert_eq!(super::text(&inner, 9), Some(""));
            assert!(super::fields(&[0x0a, 5, b'a']).is_none(), "a length past the end");
        }
    }
}
