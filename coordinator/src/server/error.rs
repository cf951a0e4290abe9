//! API errors as Kubernetes `Status` bodies with the matching HTTP code, so kubectl and client-go
//! recognise them (NotFound, Conflict, Invalid with field causes, Gone, ...).

use crate::store::StoreError;
use aloft_api::{Status, StatusCause, StatusDetails};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

/// An error response. Boxed: errors travel through many `Result`s on the request path.
#[derive(Debug)]
pub struct ApiError {
    pub status: Box<Status>,
    /// Sent as `Warning` headers with the error, as kube-apiserver sends the warnings a request
    /// earned before it was refused (an unknown field warned about, then a 422).
    pub warnings: Vec<String>,
    /// Sent as `Retry-After` (seconds): the answer is temporary.
    pub retry_after: Option<u64>,
}

impl ApiError {
    fn new(code: u16, reason: &str, message: impl Into<String>) -> Self {
        ApiError { status: Box::new(Status::failure(code, reason, message)), warnings: Vec::new(), retry_after: None }
    }
    /// This error, with the warnings computed before it to send along.
    pub fn with_warnings(mut self, warnings: &[String]) -> Self {
        self.warnings.extend_from_slice(warnings);
        self
    }
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, "BadRequest", message)
    }
    pub fn unauthorized() -> Self {
        Self::new(401, "Unauthorized", "Unauthorized: a valid bearer token is required (Authorization: Bearer <token>)")
    }
    /// 403 naming the caller as `kubectl auth whoami` does (`system:bootstrap:fleet`, not the
    /// token's name `fleet`).
    /// In kube-apiserver's words: `nodes "b" is forbidden: User "system:node:a" cannot patch
    /// resource "nodes" in API group "" at the cluster scope`, with the same details.
    pub fn forbidden(
        who: &crate::auth::Identity,
        verb: &str,
        resource: &str,
        namespace: Option<&str>,
        name: Option<&str>,
    ) -> Self {
        let user = who.user_info().0;
        let what = match name {
            Some(n) => format!("{resource} {n:?}"),
            None => resource.to_string(),
        };
        let (plural, group) = split_qualified(resource);
        let target = if resource.starts_with('/') {
            format!("path {resource:?}")
        } else {
            let scope = match namespace.filter(|n| !n.is_empty()) {
                Some(ns) => format!("in the namespace {ns:?}"),
                None => "at the cluster scope".to_string(),
            };
            format!("resource {plural:?} in API group {group:?} {scope}")
        };
        let mut e = Self::new(403, "Forbidden", format!("{what} is forbidden: User {user:?} cannot {verb} {target}"));
        if !resource.starts_with('/') {
            e.status.details = Some(details(resource, name.unwrap_or("")));
        }
        e
    }
    /// A request with an `Impersonate-*` header (`header`): aloft acts for no one but the caller.
    pub fn impersonation(header: &str, who: &crate::auth::Identity) -> Self {
        Self::new(
            403,
            "Forbidden",
            format!(
                "impersonation ({header}: kubectl --as, --as-group) is not supported: user {:?} can act only as itself; use the other identity's own token (kubectl --token)",
                who.user_info().0
            ),
        )
    }
    /// 403 with a message of its own, for a refusal that is not about a verb on a resource (a
    /// bootstrap token asking for another pool's config).
    pub fn forbidden_because(message: impl Into<String>) -> Self {
        Self::new(403, "Forbidden", message)
    }
    /// 503 for what will be there: the client asks again after `retry_after` seconds.
    pub fn unavailable(message: impl Into<String>, retry_after: u64) -> Self {
        let mut e = Self::new(503, "ServiceUnavailable", message);
        e.retry_after = Some(retry_after);
        e
    }
    pub fn not_found_path() -> Self {
        Self::new(404, "NotFound", "the server could not find the requested resource")
    }
    pub fn not_found(resource: &str, name: &str) -> Self {
        let mut e = Self::new(404, "NotFound", format!("{resource} {name:?} not found"));
        e.status.details = Some(details(resource, name));
        e
    }
    pub fn already_exists(resource: &str, name: &str) -> Self {
        let mut e = Self::new(409, "AlreadyExists", format!("{resource} {name:?} already exists"));
        e.status.details = Some(details(resource, name));
        e
    }
    pub fn conflict(resource: &str, name: &str, detail: &str) -> Self {
        let mut e =
            Self::new(409, "Conflict", format!("Operation cannot be fulfilled on {resource} {name:?}: {detail}"));
        e.status.details = Some(details(resource, name));
        e
    }
    pub fn gone(message: impl Into<String>) -> Self {
        Self::new(410, "Expired", message)
    }
    /// A list or watch from a resourceVersion the store has not reached, as kube-apiserver
    /// answers it (504 Timeout with a `ResourceVersionTooLarge` cause): client-go then lists
    /// afresh. Seen after the data directory was restored from a backup older than what the
    /// clients had read.
    pub fn future_resource_version(requested: u64, current: u64) -> Self {
        let mut e =
            Self::new(504, "Timeout", format!("Timeout: Too large resource version: {requested}, current: {current}"));
        e.status.details = Some(StatusDetails {
            causes: vec![StatusCause {
                reason: "ResourceVersionTooLarge".into(),
                message: "Too large resource version".into(),
                field: String::new(),
            }],
            ..Default::default()
        });
        e
    }
    /// 429 for what a caller already holds too much of (a node's open watches): no
    /// `Retry-After`, as the in-flight limits' 429 has, since waiting a second frees nothing;
    /// the caller closes what it holds first.
    pub fn too_many_requests(message: impl Into<String>) -> Self {
        Self::new(429, "TooManyRequests", message)
    }
    pub fn too_large(limit: usize) -> Self {
        Self::new(413, "RequestEntityTooLarge", format!("Request entity too large: limit is {limit} bytes"))
    }
    /// 413 for a request whose body fits but asks for too much (a JSON patch's operations).
    pub fn too_large_because(message: impl Into<String>) -> Self {
        Self::new(413, "RequestEntityTooLarge", message)
    }
    pub fn unsupported_media(message: impl Into<String>) -> Self {
        Self::new(415, "UnsupportedMediaType", message)
    }
    /// 406: the `Accept` header names nothing aloft can write ([`super::negotiate`]).
    pub fn not_acceptable(message: impl Into<String>) -> Self {
        Self::new(406, "NotAcceptable", message)
    }
    pub fn method_not_allowed(message: impl Into<String>) -> Self {
        Self::new(405, "MethodNotAllowed", message)
    }
    /// 422 with one cause per field error, worded as kube-apiserver's `NewInvalid`: `kind` is
    /// the qualified kind (`MachineConfigPool.machineconfiguration.openshift.io`, or `Node` for
    /// the core group), the causes after it, in brackets when there are several; the details
    /// carry the bare kind and the group.
    pub fn invalid(kind: &str, name: &str, causes: Vec<StatusCause>) -> Self {
        let each: Vec<String> = causes
            .iter()
            .map(|c| if c.field.is_empty() { c.message.clone() } else { format!("{}: {}", c.field, c.message) })
            .collect();
        let summary = match each.as_slice() {
            [one] => one.clone(),
            many => format!("[{}]", many.join(", ")),
        };
        let mut e = Self::new(422, "Invalid", format!("{kind} {name:?} is invalid: {summary}"));
        let (bare, group) = kind.split_once('.').unwrap_or((kind, ""));
        e.status.details = Some(StatusDetails { name: name.into(), kind: bare.into(), group: group.into(), causes });
        e
    }
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(500, "InternalError", message)
    }
    pub fn from_store(e: StoreError, resource: &str, name: &str) -> Self {
        match e {
            StoreError::NotFound(_) => Self::not_found(resource, name),
            StoreError::AlreadyExists(_) => Self::already_exists(resource, name),
            StoreError::Conflict { .. } => Self::conflict(resource, name, &e.to_string()),
            StoreError::Gone { .. } => Self::gone(e.to_string()),
            e @ StoreError::TooLarge { .. } => Self::too_large_because(format!("{resource} {name:?}: {e}")),
            StoreError::Backend(m) => Self::internal(m),
        }
    }
}

/// One field error for [`ApiError::invalid`].
/// `plural.group` (or a core `plural`) as its two parts.
fn split_qualified(resource: &str) -> (&str, &str) {
    resource.split_once('.').unwrap_or((resource, ""))
}

/// A Status' details as kube-apiserver gives them for a resource: `kind` is the resource's
/// plural, `group` its API group (client-go reads them to tell which resource an error is
/// about; the group was folded into `kind`).
fn details(resource: &str, name: &str) -> StatusDetails {
    let (plural, group) = split_qualified(resource);
    StatusDetails { name: name.into(), group: group.into(), kind: plural.into(), ..Default::default() }
}

pub fn cause(field: &str, reason: &str, message: impl Into<String>) -> StatusCause {
    StatusCause { field: field.into(), reason: reason.into(), message: message.into() }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let code = StatusCode::from_u16(self.status.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let mut response = (code, axum::Json(*self.status)).into_response();
        if let Some(secs) = self.retry_after {
            response.headers_mut().insert(axum::http::header::RETRY_AFTER, axum::http::HeaderValue::from(secs));
        }
        super::fields::with_warnings(response, &self.warnings)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// kube-apiserver's `NewInvalid`: one cause as it is, several in brackets; the details
    /// split the qualified kind into kind and group.
    #[test]
    fn invalid_reads_as_kube_apiservers() {
        let one = ApiError::invalid("Node", "n1", vec![cause("metadata.name", "FieldValueInvalid", "bad")]);
        assert_eq!(one.status.message, "Node \"n1\" is invalid: metadata.name: bad");
        let two = ApiError::invalid(
            "MachineConfigPool.machineconfiguration.openshift.io",
            "w",
            vec![cause("spec.a", "FieldValueInvalid", "x"), cause("spec.b", "FieldValueRequired", "y")],
        );
        assert_eq!(
            two.status.message,
            "MachineConfigPool.machineconfiguration.openshift.io \"w\" is invalid: [spec.a: x, spec.b: y]"
        );
        let details = two.status.details.unwrap();
        assert_eq!(
            (details.kind.as_str(), details.group.as_str()),
            ("MachineConfigPool", "machineconfiguration.openshift.io")
        );
    }
}
