//! The resource endpoints: get, list, watch, create, update, patch, delete, for every kind in
//! [`crate::resources`], with the status subresource, dry-run and preconditions.

use super::error::ApiError;
use super::fields::{self, Directive};
use super::finalizers::{self, Deleted};
use super::global_packages::GlobalPackages;
use super::objects::{self, PatchType};
use super::request::{self, FieldSelector, ResourcePath};
use super::{pages, table, validate, watch, Ctx};
use crate::auth::{self, Decision, Identity, Verb};
use crate::controllers::events::{reasons, EventType, Involved};
use crate::controllers::uncordon;
use crate::resources::ResourceType;
use crate::store::{revision_of, Key, StoreError, Stored};
use aloft_api::Selector;
use axum::http::{HeaderMap, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};
use std::collections::HashMap;

/// How many times a PATCH or an unconditional PUT retries after losing a compare-and-swap race.
const CAS_RETRIES: usize = 8;

pub struct Call<'a> {
    pub ctx: &'a Ctx,
    pub who: &'a Identity,
    pub method: Method,
    pub path: ResourcePath,
    pub params: HashMap<String, String>,
    pub headers: HeaderMap,
    pub body: axum::body::Bytes,
    /// The Table the `Accept` header's chosen range asks for ([`super::negotiate::output`]).
    pub table: Option<table::TableVersion>,
}

impl Call<'_> {
    fn key(&self, name: &str) -> Key {
        Key::new(&self.path.rt.store_key(), &self.path.store_namespace(), name)
    }
    fn qualified(&self) -> String {
        self.path.rt.qualified()
    }
    /// Whether the request is a dry run; every `dryRun` value was checked to be `All` before
    /// ([`check_dry_run`]).
    fn dry_run(&self) -> bool {
        self.params.get("dryRun").is_some_and(|v| v == "All")
    }
    fn is_status(&self) -> bool {
        self.path.subresource.as_deref() == Some("status")
    }
    /// Decide, looking up the caller's own Node when the decision depends on it.
    async fn authorize(&self, verb: Verb) -> Result<Decision, ApiError> {
        if let auth::Role::Node(node) = &self.who.role {
            self.ctx.presence.heard_from(node);
        }
        let field_name = match verb {
            Verb::List | Verb::Watch => {
                self.params.get("fieldSelector").and_then(|f| FieldSelector::parse(self.path.rt, f).ok())
            }
            _ => None,
        };
        let resource = self.path.rt.store_key();
        let req = auth::Request {
            verb,
            resource: &resource,
            name: self.path.name.as_deref(),
            subresource: self.path.subresource.as_deref(),
            field_name: field_name.as_ref().and_then(FieldSelector::name),
        };
        match decide(self.ctx, self.who, &req).await.map_err(|e| self.store_err(e, &self.who.name))? {
            Decision::Deny => Err(self.forbidden(verb)),
            d => Ok(d),
        }
    }
    fn forbidden(&self, verb: Verb) -> ApiError {
        ApiError::forbidden(
            self.who,
            verb.as_str(),
            &self.qualified(),
            self.path.namespace.as_deref(),
            self.path.name.as_deref(),
        )
    }
    /// The stored object, or 404.
    async fn stored(&self, name: &str) -> Result<Stored, ApiError> {
        let obj = self.ctx.store.get(&self.key(name)).await.map_err(|e| self.store_err(e, name))?;
        obj.ok_or_else(|| ApiError::not_found(&self.qualified(), name))
    }
    fn store_err(&self, e: StoreError, name: &str) -> ApiError {
        ApiError::from_store(e, &self.qualified(), name)
    }
    fn invalid(&self, name: &str, causes: Vec<aloft_api::StatusCause>) -> ApiError {
        ApiError::invalid(&self.path.rt.qualified_kind(), name, causes)
    }
    /// Admission of `obj` (an update of `stored`, or a create): Ok with the warnings its
    /// finalizer names earn.
    fn validate(&self, obj: &Value, stored: Option<&Value>) -> Result<Vec<String>, ApiError> {
        // First: nothing below walks an object the store could not read back.
        if let Some(path) = objects::too_deep(obj) {
            let cause = super::error::cause(
                &path,
                "FieldValueInvalid",
                format!("nested more than {} levels deep (objects and arrays within each other)", objects::MAX_DEPTH),
            );
            return Err(self.invalid(objects::name_of(obj), vec![cause]));
        }
        let mut causes = validate::object_causes(self.path.rt, obj);
        causes.extend(validate::annotation_causes(obj, stored));
        let (finalizer_causes, mut warnings) = finalizers::causes(obj, stored);
        warnings.extend(validate::object_warnings(self.path.rt, obj));
        causes.extend(finalizer_causes);
        if let Some(stored) = stored {
            causes.extend(finalizers::added_while_terminating(stored, obj));
            causes.extend(validate::generated_config_causes(self.path.rt, obj, stored));
        }
        if causes.is_empty() {
            Ok(warnings)
        } else {
            Err(self.invalid(objects::name_of(obj), causes).with_warnings(&warnings))
        }
    }
    fn check_namespace(&self, obj: &mut Value) -> Result<(), ApiError> {
        if !self.path.rt.namespaced {
            if let Some(m) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
                m.remove("namespace");
            }
            return Ok(());
        }
        let url_ns = self.path.namespace.as_deref().unwrap_or("");
        if url_ns.is_empty() {
            return Err(ApiError::bad_request(format!(
                "{} is namespaced: use /namespaces/<ns>/{}",
                self.path.rt.kind, self.path.rt.plural
            )));
        }
        let body_ns = obj.pointer("/metadata/namespace").and_then(Value::as_str).unwrap_or("");
        if !body_ns.is_empty() && body_ns != url_ns {
            return Err(ApiError::bad_request(format!(
                "the namespace of the provided object ({body_ns}) does not match the namespace sent on the request ({url_ns})"
            )));
        }
        // The URL's namespace is the object's from here on: admission reads it (an Event must
        // be in its object's namespace).
        if body_ns.is_empty() {
            if let Some(m) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
                m.insert("namespace".into(), url_ns.into());
            }
        }
        Ok(())
    }
}

/// The decision on a resource request, looking up the caller's own Node when the decision depends
/// on it. Every resource request and every SelfSubjectAccessReview is decided here, so what
/// `kubectl auth can-i` answers is what the request would get.
pub async fn decide(ctx: &Ctx, who: &Identity, req: &auth::Request<'_>) -> Result<Decision, StoreError> {
    let own_node = match (&who.role, auth::needs_own_node(who, req)) {
        (auth::Role::Node(n), true) => ctx.store.get(&Key::cluster(&crate::resources::NODE.store_key(), n)).await?,
        _ => None,
    };
    Ok(auth::decide(who, req, auth::Facts { own_node: own_node.as_deref() }))
}

/// The options kind kube-apiserver names in an error about a write's options.
fn options_kind(method: &Method) -> &'static str {
    match *method {
        Method::POST => "CreateOptions.meta.k8s.io",
        Method::PUT => "UpdateOptions.meta.k8s.io",
        Method::PATCH => "PatchOptions.meta.k8s.io",
        _ => "DeleteOptions.meta.k8s.io",
    }
}

/// Every `dryRun` value of a write must be `All`, the only one Kubernetes defines: anything else
/// (`true`, `all`, or `All` next to another value) is refused as kube-apiserver refuses it,
/// before anything is written. Taken for "not a dry run", `?dryRun=true` deleted for real what a
/// script only meant to try. Reads take no such option, and ignore it.
pub fn check_dry_run<'v>(method: &Method, values: impl IntoIterator<Item = &'v str>) -> Result<(), ApiError> {
    if matches!(*method, Method::GET | Method::HEAD) {
        return Ok(());
    }
    match values.into_iter().find(|v| *v != "All") {
        None => Ok(()),
        Some(v) => Err(ApiError::invalid(
            options_kind(method),
            "",
            vec![super::error::cause(
                "dryRun",
                "FieldValueNotSupported",
                format!("Unsupported value: {v:?}: supported values: \"All\""),
            )],
        )),
    }
}

/// Whether the request asks for a watch (`watch=true` or `1`): what the dispatch, the output
/// negotiation and the pod list all read the same way.
pub fn is_watch(params: &HashMap<String, String>) -> bool {
    params.get("watch").is_some_and(|v| v == "true" || v == "1")
}

/// Whether a request on `path` is a watch: one of a collection asking for it. A GET of a named
/// object is that object, `watch` or not, as in kube-apiserver (a watch of one object is a
/// collection's, with `fieldSelector=metadata.name=NAME`); it streamed the whole collection.
pub fn watches(path: &super::request::ResourcePath, params: &HashMap<String, String>) -> bool {
    path.name.is_none() && is_watch(params)
}

pub async fn dispatch(call: Call<'_>) -> Result<Response, ApiError> {
    let has_name = call.path.name.is_some();
    let watching = watches(&call.path, &call.params);
    if call.path.subresource.is_some() && !matches!(call.method, Method::GET | Method::PUT | Method::PATCH) {
        // Only get, update and patch are served on a status subresource, as discovery says;
        // a DELETE of `nodes/NAME/status` deleted the Node (and revoked its agent).
        return Err(ApiError::method_not_allowed(format!(
            "{} is not supported on the status subresource: only GET, PUT and PATCH",
            call.method
        )));
    }
    if call.path.rt.read_only() && call.method != Method::GET {
        return Err(ApiError::method_not_allowed(format!(
            "{} is not supported on {}: they are read-only, written by the coordinator from its \
             CatalogSources' catalogs (change the catalog, or the CatalogSource, instead)",
            call.method,
            call.path.rt.qualified()
        )));
    }
    match (&call.method, has_name) {
        (&Method::GET, _) if watching => watch_handler(call).await,
        (&Method::GET, true) => get(call).await,
        (&Method::GET, false) => list(call).await,
        (&Method::POST, false) => create(call).await,
        (&Method::PUT, true) => update(call).await,
        (&Method::PATCH, true) => patch(call).await,
        (&Method::DELETE, true) => delete(call).await,
        (m, _) => Err(ApiError::method_not_allowed(format!("{m} is not supported on this path"))),
    }
}

fn respond(code: StatusCode, v: Value) -> Response {
    (code, Json(v)).into_response()
}

/// One object: as a Table when asked for one, else the JSON the store wrote, as is.
fn respond_one(call: &Call<'_>, code: StatusCode, obj: Stored) -> Response {
    if let Some(version) = call.table {
        let include = match table::IncludeObject::from_params(&call.params) {
            Ok(i) => i,
            Err(e) => return e.into_response(),
        };
        return respond(code, table::table(call.path.rt, version, &[&obj], revision_of(&obj), true, include));
    }
    let body = axum::body::Bytes::from_owner(JsonText(obj.json));
    (code, [(axum::http::header::CONTENT_TYPE, "application/json")], body).into_response()
}

/// Stored JSON as a response body, without a copy.
struct JsonText(std::sync::Arc<str>);

impl AsRef<[u8]> for JsonText {
    fn as_ref(&self) -> &[u8] {
        self.0.as_bytes()
    }
}

async fn get(call: Call<'_>) -> Result<Response, ApiError> {
    call.authorize(Verb::Get).await?;
    let name = call.path.name.clone().unwrap_or_default();
    // A resourceVersion on a GET means "not older than", as on a list: one the store has not
    // reached waits, then is refused (504); one it never issued is a bad request. The store
    // serves only its newest state, which is never older than a version it has reached.
    match call.params.get("resourceVersion").map(String::as_str) {
        None | Some("") | Some("0") => {}
        Some(rv) => {
            let rv = rv.parse::<u64>().map_err(|_| {
                ApiError::bad_request(format!("resourceVersion {rv:?} is not a resourceVersion this server issued"))
            })?;
            watch::reached(call.ctx, rv).await?;
        }
    }
    let obj = match GlobalPackages::of(call.ctx, &call.path) {
        Some(view) => view
            .get(&*call.ctx.store, &name)
            .await
            .map_err(|e| call.store_err(e, &name))?
            .ok_or_else(|| ApiError::not_found(&call.qualified(), &name))?,
        None => call.stored(&name).await?,
    };
    Ok(respond_one(&call, StatusCode::OK, obj))
}

/// Selectors of a list or watch request.
pub struct Filters {
    pub labels: Selector,
    pub fields: FieldSelector,
}

impl Filters {
    pub fn from_params(rt: &ResourceType, params: &HashMap<String, String>) -> Result<Self, ApiError> {
        let labels = match params.get("labelSelector") {
            Some(s) => Selector::parse(s).map_err(|e| ApiError::bad_request(e.to_string()))?,
            None => Selector::everything(),
        };
        let fields = match params.get("fieldSelector") {
            Some(s) => FieldSelector::parse(rt, s)?,
            None => FieldSelector::default(),
        };
        Ok(Filters { labels, fields })
    }

    /// No selector: every object matches.
    pub fn is_everything(&self) -> bool {
        self.labels.is_empty() && self.fields.is_empty()
    }

    /// Whether a write can move an object into or out of the selection (a label or a field
    /// other than the name or namespace is selected by).
    pub fn can_change(&self) -> bool {
        !self.labels.is_empty() || self.fields.selects_by_content()
    }

    pub fn matches(&self, obj: &Value) -> bool {
        if !self.fields.matches(obj) {
            return false;
        }
        if self.labels.is_empty() {
            return true;
        }
        let labels = obj
            .pointer("/metadata/labels")
            .and_then(Value::as_object)
            .map(|m| m.iter().map(|(k, v)| (k.clone(), v.as_str().unwrap_or("").to_string())).collect())
            .unwrap_or_default();
        self.labels.matches(&labels)
    }
}

/// The state a list asks for (`resourceVersion`, `resourceVersionMatch`), as Kubernetes' API
/// reads them: unset or "0", any; with `NotOlderThan` (or no match) a version, anything at least
/// as new; with `Exact`, that version. The store keeps only each object's newest version, so an
/// Exact version is served only when it is the current one.
#[derive(Debug, PartialEq, Eq)]
struct ListVersion {
    at_least: Option<u64>,
    exact: bool,
}

impl ListVersion {
    fn from_params(params: &HashMap<String, String>) -> Result<Self, ApiError> {
        let rv = params.get("resourceVersion").map(String::as_str).unwrap_or("");
        let invalid = |message: &str, value: &str| {
            ApiError::invalid(
                "ListOptions.meta.k8s.io",
                "",
                vec![super::error::cause("resourceVersionMatch", "FieldValueInvalid", format!("{value:?}: {message}"))],
            )
        };
        let exact = match params.get("resourceVersionMatch").map(String::as_str) {
            None | Some("") => false,
            Some(m) if rv.is_empty() => {
                return Err(invalid("resourceVersionMatch is forbidden unless resourceVersion is provided", m))
            }
            Some(m) if params.get("continue").is_some_and(|c| !c.is_empty()) => {
                return Err(invalid("resourceVersionMatch is forbidden when continue is provided", m))
            }
            Some("NotOlderThan") => false,
            Some("Exact") if rv == "0" => {
                return Err(invalid("resourceVersionMatch \"Exact\" is forbidden for resourceVersion \"0\"", "Exact"))
            }
            Some("Exact") => true,
            Some(m) => return Err(invalid("supported values: \"Exact\", \"NotOlderThan\"", m)),
        };
        let at_least = match rv {
            "" | "0" => None,
            _ => Some(rv.parse::<u64>().map_err(|_| {
                ApiError::bad_request(format!("resourceVersion {rv:?} is not a resourceVersion this server issued"))
            })?),
        };
        Ok(ListVersion { at_least, exact })
    }
}

/// The one object at `key` and the revision a list of it is at: the store's, read first (a
/// write in between is then newer than the list, as a list's items may be, and a watch from it
/// sends that write again rather than miss it).
pub async fn one_object(
    store: &dyn crate::store::Store,
    key: &Key,
) -> Result<(Option<crate::store::Stored>, u64), StoreError> {
    let revision = store.revision().await?;
    Ok((store.get(key).await?, revision))
}

/// The one key a list or watch of `path` pinned to `name` (a `metadata.name=` field selector)
/// can hold: its object is read alone, not picked out of the whole collection. An agent's watch
/// or list of its own Node read and parsed every Node of the fleet, at no cost to the agent.
/// None across the namespaces of a namespaced kind (one name may be in several).
pub fn pinned_key(path: &ResourcePath, name: Option<&str>) -> Option<Key> {
    let name = name?;
    match (&path.namespace, path.rt.namespaced) {
        (Some(ns), true) => Some(Key::new(&path.rt.store_key(), ns, name)),
        (None, false) => Some(Key::cluster(&path.rt.store_key(), name)),
        _ => None,
    }
}

async fn list(call: Call<'_>) -> Result<Response, ApiError> {
    call.authorize(Verb::List).await?;
    let filters = Filters::from_params(call.path.rt, &call.params)?;
    let paging = pages::PageRequest::from_params(&call.params)?;
    let version = ListVersion::from_params(&call.params)?;
    if let Some(rv) = version.at_least {
        // A version the store has not reached: 504 after a short wait, as for a watch.
        watch::reached(call.ctx, rv).await?;
    }
    let ns = call.path.namespace.clone();
    let store_key = call.path.rt.store_key();
    // A continue token is good only for the list it came from.
    let query = format!(
        "{store_key}\n{}\n{}\n{}",
        ns.as_deref().unwrap_or(""),
        call.params.get("labelSelector").map(String::as_str).unwrap_or(""),
        call.params.get("fieldSelector").map(String::as_str).unwrap_or(""),
    );
    let page = match &paging.from {
        Some(from) => call.ctx.pages.next(&query, from, paging.limit)?,
        None => {
            let view = GlobalPackages::of(call.ctx, &call.path);
            let listing = match (view, pinned_key(&call.path, filters.fields.name())) {
                (Some(view), _) => view.list_json(&*call.ctx.store).await,
                (None, Some(key)) => one_object(&*call.ctx.store, &key).await.map(|(item, revision)| {
                    crate::store::JsonListing { items: item.map(|s| s.json).into_iter().collect(), revision }
                }),
                (None, None) => call.ctx.store.list_json(&store_key, ns.as_deref()).await,
            }
            .map_err(|e| call.store_err(e, ""))?;
            if let (Some(rv), true) = (version.at_least, version.exact) {
                if rv != listing.revision {
                    return Err(ApiError::gone(format!(
                        "too old resource version: {rv} ({}): this server lists only the current state",
                        listing.revision
                    )));
                }
            }
            // One pass: an item is parsed only to match a selector; the items stay the stored
            // text, copied as they are into a JSON answer or kept for the later pages.
            let everything = filters.is_everything();
            let limit = if paging.limit == 0 { usize::MAX } else { paging.limit };
            let (mut page, mut rest) = (Vec::new(), Vec::new());
            for text in listing.items {
                if !everything && !filters.matches(&parse_stored(&text)?) {
                    continue;
                }
                if page.len() < limit {
                    page.push(text);
                } else {
                    rest.push(text);
                }
            }
            call.ctx.pages.first(query, listing.revision, page, rest)
        }
    };
    let mut metadata = json!({"resourceVersion": page.revision.to_string()});
    if let Some((token, remaining)) = &page.next {
        metadata["continue"] = token.clone().into();
        // As Kubernetes: the count is exact only without selectors, so it is given only then.
        if filters.is_everything() {
            metadata["remainingItemCount"] = (*remaining as u64).into();
        }
    }
    if let Some(version) = call.table {
        let items = page.items.iter().map(|s| parse_stored(s)).collect::<Result<Vec<Value>, _>>()?;
        let refs: Vec<&Value> = items.iter().collect();
        let include = table::IncludeObject::from_params(&call.params)?;
        let mut t = table::table(call.path.rt, version, &refs, Some(page.revision), true, include);
        t["metadata"] = metadata;
        return Ok(respond(StatusCode::OK, t));
    }
    // The list's envelope around the items' stored text, which is copied, not parsed and
    // written again (a 10,000-node list spent most of its time doing that).
    let envelope = json!({
        "apiVersion": call.path.rt.api_version(),
        "kind": format!("{}List", call.path.rt.kind),
        "metadata": metadata,
    })
    .to_string();
    let size = envelope.len() + 12 + page.items.iter().map(|s| s.len() + 1).sum::<usize>();
    let mut body = String::with_capacity(size);
    body.push_str(&envelope[..envelope.len() - 1]);
    body.push_str(",\"items\":[");
    for (i, item) in page.items.iter().enumerate() {
        if i > 0 {
            body.push(',');
        }
        body.push_str(item);
    }
    body.push_str("]}");
    Ok((StatusCode::OK, [(axum::http::header::CONTENT_TYPE, "application/json")], body).into_response())
}

/// A stored object's JSON, which the store wrote itself: a failure is the server's.
fn parse_stored(text: &str) -> Result<Value, ApiError> {
    serde_json::from_str(text).map_err(|e| ApiError::internal(format!("a stored object does not parse: {e}")))
}

async fn watch_handler(call: Call<'_>) -> Result<Response, ApiError> {
    call.authorize(Verb::Watch).await?;
    let filters = Filters::from_params(call.path.rt, &call.params)?;
    // The credential the watch was opened with, checked again while it is open.
    let credential = call
        .headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(super::bearer_token)
        .map(crate::auth::token_hash);
    watch::serve(call.ctx, call.path.clone(), &call.params, filters, call.table, call.who, credential).await
}

async fn create(call: Call<'_>) -> Result<Response, ApiError> {
    call.authorize(Verb::Create).await?;
    let directive = Directive::from_params(&call.params)?;
    let (obj, mut problems) = fields::decode_object(&call.headers, &call.body)?;
    request::check_type(call.path.rt, &obj)?;
    refuse_resource_version(&obj)?;
    problems.extend(fields::unknown_fields(call.path.rt, &obj).iter().map(|p| fields::unknown_field(p)));
    let warnings = directive.judge(call.path.rt, problems)?;
    create_judged(&call, obj).await.map(|r| fields::with_warnings(r, &warnings)).map_err(|e| e.with_warnings(&warnings))
}

/// A create (POST) names no resourceVersion: that is the server's to give, and one in the body
/// was read from some object (a client that copied an object it read, or another store's),
/// which a create would silently drop (kubectl and aloftctl clear it before they create).
/// kube-apiserver's storage refuses it with this message (as a 500, the error not being a
/// Status; a 400 here, the request's fault); a dry run is refused too, so it predicts the real
/// answer.
fn refuse_resource_version(obj: &Value) -> Result<(), ApiError> {
    match objects::at(obj, &["metadata", "resourceVersion"]) {
        None | Some(Value::Null) => Ok(()),
        Some(Value::String(s)) if s.is_empty() => Ok(()),
        Some(_) => Err(ApiError::bad_request(
            "resourceVersion should not be set on objects to be created (metadata.resourceVersion: remove it, \
             or update the existing object with apply, replace or patch)",
        )),
    }
}

/// The rest of a create, once the body's unknown and repeated fields are judged: its answer,
/// or its error, carries the warnings they earned.
async fn create_judged(call: &Call<'_>, mut obj: Value) -> Result<Response, ApiError> {
    call.check_namespace(&mut obj)?;
    let mut name = objects::name_of(&obj).to_string();
    if name.is_empty() {
        if let Some(prefix) = obj.pointer("/metadata/generateName").and_then(Value::as_str) {
            name = objects::generate_name(prefix);
            obj["metadata"]["name"] = name.clone().into();
        }
    }
    let causes = validate::name_causes(&name);
    if !causes.is_empty() {
        return Err(call.invalid(&name, causes));
    }
    if call.path.rt.status_subresource && !call.path.rt.group.is_empty() {
        // A custom resource's status is its controller's, as kube-apiserver's strategy for one
        // with a status subresource drops it on create (watchers saw a made-up status until the
        // controller's next pass). A Node keeps it: its agent registers it with its status.
        if let Some(m) = obj.as_object_mut() {
            m.remove("status");
        }
    }
    let warnings = call.validate(&obj, None)?;
    objects::prepare_create(&mut obj, &call.path.store_namespace());
    if call.dry_run() {
        // As the create would answer: a taken name is 409 (kube-apiserver's dry run goes
        // through its storage, which says so).
        let key = call.key(&name);
        if call.ctx.store.get(&key).await.map_err(|e| call.store_err(e, &name))?.is_some() {
            return Err(call.store_err(StoreError::AlreadyExists(name.clone()), &name));
        }
        return Ok(fields::with_warnings(respond(StatusCode::CREATED, obj), &warnings));
    }
    let created = call.ctx.store.create(&call.key(&name), obj).await.map_err(|e| call.store_err(e, &name))?;
    Ok(fields::with_warnings(respond_one(call, StatusCode::CREATED, created), &warnings))
}

fn precondition(obj: &Value) -> Result<Option<u64>, ApiError> {
    match objects::at(obj, &["metadata", "resourceVersion"]) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if s.is_empty() => Ok(None),
        Some(Value::String(s)) => s.parse().map(Some).map_err(|_| {
            ApiError::bad_request(format!("metadata.resourceVersion {s:?} is not a resourceVersion this server issued"))
        }),
        Some(other) => Err(ApiError::bad_request(format!("metadata.resourceVersion must be a string, got {other}"))),
    }
}

/// Read-modify-write with compare-and-swap, retried while `retry` allows it. `problems` are the
/// body's own (repeated keys); the fields the write adds that its kind does not have join them,
/// judged by `directive`; the answer carries the warnings to send.
async fn read_modify_write(
    call: &Call<'_>,
    name: &str,
    retry: bool,
    decision: Decision,
    judged: (Directive, &[String]),
    modify: impl FnMut(&Value) -> Result<Value, ApiError>,
) -> Result<(Stored, Vec<String>), ApiError> {
    let mut warned = Vec::new();
    let out = read_modify_write_warned(call, name, retry, decision, judged, modify, &mut warned).await;
    out.map_err(|e| e.with_warnings(&warned))
}

/// [`read_modify_write`], keeping in `warned` the warnings of the last attempt judged, for an
/// error after them to carry.
async fn read_modify_write_warned(
    call: &Call<'_>,
    name: &str,
    retry: bool,
    decision: Decision,
    (directive, problems): (Directive, &[String]),
    mut modify: impl FnMut(&Value) -> Result<Value, ApiError>,
    warned: &mut Vec<String>,
) -> Result<(Stored, Vec<String>), ApiError> {
    let key = call.key(name);
    for _ in 0..CAS_RETRIES {
        let stored = call.stored(name).await?;
        let stored_rev = revision_of(&stored).unwrap_or(0);
        let incoming = modify(&stored)?;
        if let Some(want) = precondition(&incoming)? {
            if want != stored_rev {
                return Err(call.store_err(StoreError::Conflict { have: want, stored: stored_rev }, name));
            }
        }
        let mut next = objects::prepare_update(call.path.rt, call.is_status(), &stored, incoming);
        let started = finalizers::set_by_update(&stored, &next);
        if !started.is_empty() {
            return Err(call.invalid(name, started));
        }
        finalizers::keep_deletion_fields(&stored, &mut next);
        let mut found = problems.to_vec();
        let mut warnings = if validate::only_annotations_changed(&stored, &next) {
            let mut causes = validate::annotation_causes(&next, Some(&stored));
            // A rendered config's mark is an annotation: dropping it is not a plain one.
            causes.extend(validate::generated_config_causes(call.path.rt, &next, &stored));
            if !causes.is_empty() {
                return Err(call.invalid(name, causes));
            }
            directive.judge(call.path.rt, found)?
        } else {
            let added = fields::new_unknown_fields(call.path.rt, &stored, &next);
            found.extend(added.iter().map(|p| fields::unknown_field(p)));
            let mut warnings = directive.judge(call.path.rt, found)?;
            warned.clone_from(&warnings);
            warnings.extend(call.validate(&next, Some(&stored))?);
            warnings
        };
        warned.clone_from(&warnings);
        if decision == Decision::AllowStatusAndAnnotations {
            if !auth::only_status_and_annotations(&stored, &next) {
                let mut e = call.forbidden(Verb::Update);
                e.status.message.push_str(": a node may change only its own status and annotations");
                return Err(e);
            }
            if let Some(k) = uncordon::coordinator_only_changed(&stored, &next) {
                let mut e = call.forbidden(Verb::Update);
                e.status.message.push_str(&format!(": annotation {k} is the coordinator's to set"));
                return Err(e);
            }
        }
        // On the status subresource too, which a node may write whole. The rest of the write
        // stands (an agent's Ready report carries its nodeInfo: refusing it would keep the node
        // from ever reporting Ready); the architecture stays as it was, with a warning.
        if matches!(call.who.role, auth::Role::Node(_)) && *call.path.rt == crate::resources::NODE {
            if let Some(warning) = auth::keep_node_arch(&stored, &mut next) {
                tracing::warn!(node = %name, %warning, "a node's reported architecture was not taken");
                warnings.push(warning);
                warned.clone_from(&warnings);
            }
        }
        // A Done report the node controller's pick granted its uncordon is written uncordoned.
        let ended = match *call.path.rt == crate::resources::NODE {
            true => uncordon::at_done(&mut next),
            false => uncordon::AtDone::Unchanged,
        };
        if ended == uncordon::AtDone::Uncordoned {
            objects::set_generation(&stored, &mut next);
        }
        if next == *stored {
            // A no-op write is not a write: no new resourceVersion, no watch event.
            return Ok((stored, warnings));
        }
        if call.dry_run() {
            return Ok((Stored::new(next), warnings));
        }
        if finalizers::finished(&next) {
            // The last finalizer of an object being deleted is gone: the update removes it,
            // answered with its last stored state (as kube-apiserver's deleteWithoutFinalizers).
            match remove(call, name, Some(stored_rev)).await {
                Ok(v) => return Ok((v, warnings)),
                Err(StoreError::Conflict { .. }) if retry => continue,
                Err(e) => return Err(call.store_err(e, name)),
            }
        }
        match call.ctx.store.update_by(&key, next, Some(stored_rev), &call.who.name).await {
            Ok(v) => {
                match ended {
                    // At debug: one per node update; the Done report is the record.
                    uncordon::AtDone::Uncordoned => tracing::debug!(node = %name, "uncordoned with its Done report"),
                    uncordon::AtDone::CordonKept => {
                        tracing::info!(node = %name, "drain ended with its Done report; the node stays cordoned, as it was before its drain");
                        let answer = objects::at(
                            &v.object,
                            &["metadata", "annotations", aloft_api::annotations::LAST_APPLIED_DRAIN],
                        )
                        .and_then(Value::as_str);
                        let msg = uncordon::cordon_kept_message(answer);
                        call.ctx.events.emit(&Involved::node(name), EventType::Normal, reasons::CORDON_KEPT, &msg);
                    }
                    uncordon::AtDone::Unchanged => {}
                }
                return Ok((v, warnings));
            }
            Err(StoreError::Conflict { .. }) if retry => continue,
            Err(e) => return Err(call.store_err(e, name)),
        }
    }
    Err(ApiError::conflict(&call.qualified(), name, "too many concurrent writers; try again"))
}

/// A PUT whose body names a uid is conditional on it, as kube-apiserver makes it: a manifest
/// saved from an object since deleted and made again under its name does not overwrite the new
/// one.
fn uid_precondition(call: &Call<'_>, name: &str, obj: &Value, stored: &Value) -> Result<(), ApiError> {
    let want = obj.pointer("/metadata/uid").and_then(Value::as_str).unwrap_or("");
    let have = stored.pointer("/metadata/uid").and_then(Value::as_str).unwrap_or("");
    if want.is_empty() || want == have {
        return Ok(());
    }
    Err(uid_conflict(call, name, want, have))
}

/// kube-apiserver's answer to a uid precondition that does not hold, naming both uids: the
/// caller sees which object is there now.
fn uid_conflict(call: &Call<'_>, name: &str, want: &str, have: &str) -> ApiError {
    ApiError::conflict(
        &call.qualified(),
        name,
        &format!("Precondition failed: UID in precondition: {want}, UID in object meta: {have}"),
    )
}

/// A patch may not make the object another one: another kind or API version (kubectl could no
/// longer read, list or delete it), another name or namespace, another uid. Each is refused
/// with kube-apiserver's answer instead of being stored or silently dropped.
fn same_identity(call: &Call<'_>, stored: &Value, patched: &Value) -> Result<(), ApiError> {
    // Borrowed, not copied: every agent report is a patch.
    fn text<'a>(v: &'a Value, p: &str) -> &'a str {
        v.pointer(p).and_then(Value::as_str).unwrap_or("")
    }
    let name = text(stored, "/metadata/name");
    let rt = call.path.rt;
    let mut causes = Vec::new();
    let api_version = text(patched, "/apiVersion");
    if api_version != rt.api_version() {
        causes.push(super::error::cause(
            "apiVersion",
            "FieldValueInvalid",
            format!("Invalid value: {api_version:?}: must be {}", rt.api_version()),
        ));
    }
    let kind = text(patched, "/kind");
    if kind != rt.kind {
        causes.push(super::error::cause(
            "kind",
            "FieldValueInvalid",
            format!("Invalid value: {kind:?}: must be {}", rt.kind),
        ));
    }
    let uid = text(patched, "/metadata/uid");
    if !uid.is_empty() && uid != text(stored, "/metadata/uid") {
        causes.push(super::error::cause(
            "metadata.uid",
            "FieldValueInvalid",
            format!("Invalid value: {uid:?}: field is immutable"),
        ));
    }
    if !causes.is_empty() {
        return Err(call.invalid(name, causes));
    }
    let patched_name = text(patched, "/metadata/name");
    if !patched_name.is_empty() && patched_name != name {
        return Err(ApiError::bad_request(format!(
            "the name of the object ({patched_name}) does not match the name on the URL ({name})"
        )));
    }
    let namespace = text(patched, "/metadata/namespace");
    let stored_namespace = text(stored, "/metadata/namespace");
    if rt.namespaced && !namespace.is_empty() && namespace != stored_namespace {
        return Err(ApiError::bad_request(format!(
            "the namespace of the object ({namespace}) does not match the namespace on the URL ({stored_namespace})"
        )));
    }
    Ok(())
}

async fn update(call: Call<'_>) -> Result<Response, ApiError> {
    let decision = call.authorize(Verb::Update).await?;
    let name = call.path.name.clone().unwrap_or_default();
    let directive = Directive::from_params(&call.params)?;
    let (mut obj, problems) = fields::decode_object(&call.headers, &call.body)?;
    request::check_type(call.path.rt, &obj)?;
    call.check_namespace(&mut obj)?;
    let body_name = objects::name_of(&obj);
    if !body_name.is_empty() && body_name != name {
        return Err(ApiError::bad_request(format!(
            "the name of the object ({body_name}) does not match the name on the URL ({name})"
        )));
    }
    // Without a resourceVersion the PUT is unconditional, as Kubernetes allows for its built-in
    // kinds (Node, Event) and not for custom resources: on OpenShift a blind PUT of a
    // MachineConfig or pool can never overwrite a newer one.
    let unconditional = precondition(&obj)?.is_none();
    if unconditional && !call.path.rt.group.is_empty() {
        call.stored(&name).await?; // a missing object is 404 first, as in kube-apiserver
                                   // The body's unknown fields are judged first (warned about, or a strict refusal).
        let mut found = problems.clone();
        found.extend(fields::unknown_fields(call.path.rt, &obj).iter().map(|p| fields::unknown_field(p)));
        let warnings = directive.judge(call.path.rt, found)?;
        return Err(call
            .invalid(
                &name,
                vec![super::error::cause(
                    "metadata.resourceVersion",
                    "FieldValueInvalid",
                    "Invalid value: 0x0: must be specified for an update",
                )],
            )
            .with_warnings(&warnings));
    }
    let (out, warnings) = read_modify_write(&call, &name, unconditional, decision, (directive, &problems), |stored| {
        uid_precondition(&call, &name, &obj, stored)?;
        Ok(obj.clone())
    })
    .await?;
    Ok(fields::with_warnings(respond_one(&call, StatusCode::OK, out), &warnings))
}

async fn patch(call: Call<'_>) -> Result<Response, ApiError> {
    let decision = call.authorize(Verb::Patch).await?;
    let name = call.path.name.clone().unwrap_or_default();
    let ctype = call.headers.get("content-type").and_then(|v| v.to_str().ok()).unwrap_or("");
    let kind = PatchType::from_content_type(ctype)?;
    let directive = Directive::from_params(&call.params)?;
    let (patch, problems) = objects::parse_patch(&call.body)?;
    let rt = call.path.rt;
    let (out, warnings) = read_modify_write(&call, &name, true, decision, (directive, &problems), |stored| {
        let patched = objects::apply_patch(kind, rt, stored, &patch, call.ctx.limits.max_body)?;
        same_identity(&call, stored, &patched)?;
        Ok(patched)
    })
    .await?;
    Ok(fields::with_warnings(respond_one(&call, StatusCode::OK, out), &warnings))
}

/// How a DELETE propagates to the object's dependents, checked as kube-apiserver checks
/// DeleteOptions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cascade {
    /// The default: the object goes, and the garbage collector ([`crate::controllers::gc`])
    /// deletes its dependents after it.
    Background,
    /// `propagationPolicy: Foreground`: the object stays, being deleted, with the
    /// `foregroundDeletion` finalizer, until the garbage collector has deleted its blocking
    /// dependents.
    Foreground,
    /// `propagationPolicy: Orphan` (or the older `orphanDependents: true`): the dependents lose
    /// their references to the object first, and stay.
    Orphan,
}

fn propagation(policy: Option<&str>, orphan_dependents: Option<bool>) -> Result<Cascade, ApiError> {
    let invalid = |field: &str, reason: &str, message: String| {
        ApiError::invalid("DeleteOptions.meta.k8s.io", "", vec![super::error::cause(field, reason, message)])
    };
    if let (Some(_), Some(o)) = (policy, orphan_dependents) {
        return Err(invalid(
            "orphanDependents",
            "FieldValueInvalid",
            format!("Invalid value: {o}: OrphanDependents and PropagationPolicy cannot both be set"),
        ));
    }
    match policy {
        None if orphan_dependents == Some(true) => Ok(Cascade::Orphan),
        None | Some("Background") => Ok(Cascade::Background),
        Some("Foreground") => Ok(Cascade::Foreground),
        Some("Orphan") => Ok(Cascade::Orphan),
        Some(p) => Err(invalid(
            "propagationPolicy",
            "FieldValueNotSupported",
            format!("Unsupported value: {p:?}: supported values: \"Foreground\", \"Background\", \"Orphan\""),
        )),
    }
}

async fn delete(call: Call<'_>) -> Result<Response, ApiError> {
    call.authorize(Verb::Delete).await?;
    let name = call.path.name.clone().unwrap_or_default();
    let mut expected = None;
    let mut uid = None;
    // dryRun and propagationPolicy come as query parameters, or inside DeleteOptions (what
    // client-go and kubectl send).
    let mut dry_run = call.dry_run();
    let mut policy = call.params.get("propagationPolicy").cloned();
    let mut orphan_dependents = None;
    if !call.body.is_empty() {
        let opts: Value = serde_json::from_slice(&call.body)
            .map_err(|e| ApiError::bad_request(format!("malformed DeleteOptions: {e}")))?;
        if let Some(rv) = opts.pointer("/preconditions/resourceVersion").and_then(Value::as_str) {
            expected = Some(
                rv.parse::<u64>()
                    .map_err(|_| ApiError::bad_request(format!("preconditions.resourceVersion {rv:?} is invalid")))?,
            );
        }
        uid = opts.pointer("/preconditions/uid").and_then(Value::as_str).map(str::to_string);
        if let Some(values) = opts.get("dryRun").filter(|v| !v.is_null()) {
            let values = values
                .as_array()
                .filter(|a| a.iter().all(Value::is_string))
                .ok_or_else(|| ApiError::bad_request("malformed DeleteOptions: dryRun must be a list of strings"))?;
            check_dry_run(&call.method, values.iter().filter_map(Value::as_str))?;
            dry_run |= !values.is_empty();
        }
        if let Some(p) = opts.get("propagationPolicy").and_then(Value::as_str) {
            policy = Some(p.to_string());
        }
        orphan_dependents = opts.get("orphanDependents").and_then(Value::as_bool);
    }
    // Said by the client: a DELETE of an object being deleted sets its propagation again, as
    // kube-apiserver's does (`kubectl delete` sends Background: the way out of a foreground
    // deletion a dependent holds up).
    let explicit = policy.is_some() || orphan_dependents.is_some();
    let cascade = match propagation(policy.as_deref(), orphan_dependents)? {
        // The kinds the collector does not watch would wait for its resync: nothing in aloft
        // owns objects through them, and a Node must go through this handler's removal.
        Cascade::Foreground if !crate::controllers::gc::watches(call.path.rt) => Cascade::Background,
        c => c,
    };
    let credential =
        if dry_run { None } else { node_credential(&call, &name).await.map_err(|e| call.store_err(e, &name))? };
    let key = call.key(&name);
    let mut orphaned = false;
    for _ in 0..CAS_RETRIES {
        let stored = call.stored(&name).await?;
        let stored_rev = revision_of(&stored);
        if let Some(uid) = &uid {
            let have = stored.pointer("/metadata/uid").and_then(Value::as_str).unwrap_or("");
            if have != uid.as_str() {
                // kube-apiserver's words, both uids: the caller sees which object is there now.
                return Err(uid_conflict(&call, &name, uid, have));
            }
        }
        if let Some(want) = expected.filter(|want| Some(*want) != stored_rev) {
            let e = StoreError::Conflict { have: want, stored: stored_rev.unwrap_or_default() };
            return Err(call.store_err(e, &name));
        }
        if dry_run {
            // What the DELETE would answer: the object marked as being deleted when it has
            // finalizers, else as it is.
            let answer = match cascade {
                Cascade::Foreground if !finalizers::is_terminating(&stored) => {
                    finalizers::marked(&finalizers::with_finalizer(&stored, crate::controllers::gc::FOREGROUND))
                }
                _ => finalizers::marked(&stored),
            };
            return Ok(respond_one(&call, StatusCode::OK, answer.map(Stored::new).unwrap_or(stored)));
        }
        if cascade == Cascade::Orphan && !orphaned {
            let n = crate::controllers::gc::orphan(&call.ctx.store, call.path.rt, &stored)
                .await
                .map_err(|e| call.store_err(e, &name))?;
            tracing::info!(owner = %name, kind = call.path.rt.kind, dependents = n.len(), "dependents orphaned");
            orphaned = true;
        }
        // One compare-and-swap write on the revision just read (and checked against the
        // preconditions): removed, or marked as being deleted when it has finalizers.
        let foreground = (cascade == Cascade::Foreground).then_some(crate::controllers::gc::FOREGROUND);
        let deleted = match cascade {
            _ if explicit && finalizers::is_terminating(&stored) => {
                finalizers::propagate_again(&call.ctx.store, &key, stored, foreground).await
            }
            Cascade::Foreground => {
                finalizers::delete_adding(&call.ctx.store, &key, stored, crate::controllers::gc::FOREGROUND).await
            }
            Cascade::Background | Cascade::Orphan => finalizers::delete(&call.ctx.store, &key, stored).await,
        };
        match deleted {
            Ok(Deleted::Removed(deleted)) => {
                if let Some((token_name, hash)) = credential {
                    revoke_node_credential(&call, token_name, hash).await;
                }
                return Ok(respond_one(&call, StatusCode::OK, deleted));
            }
            // As kube-apiserver answers a pending deletion: 200 with the object, which stays.
            Ok(pending) => return Ok(respond_one(&call, StatusCode::OK, pending.object())),
            // Written since it was read: read again, unless the client pinned a version.
            Err(StoreError::Conflict { .. }) if expected.is_none() => continue,
            Err(e) => return Err(call.store_err(e, &name)),
        }
    }
    Err(ApiError::conflict(&call.qualified(), &name, "too many concurrent writers; try again"))
}

/// Remove `name` from the store (compare-and-swap on `expected`): an update that took the last
/// finalizer of an object being deleted. A Node's agent credential is revoked with it, as a
/// DELETE that removes a Node does.
async fn remove(call: &Call<'_>, name: &str, expected: Option<u64>) -> Result<Stored, StoreError> {
    let credential = node_credential(call, name).await?;
    let deleted = call.ctx.store.delete(&call.key(name), expected).await?;
    if let Some((token_name, hash)) = credential {
        revoke_node_credential(call, token_name, hash).await;
    }
    Ok(deleted)
}

/// For a Node: the name and hash of its agent's credential, read before the delete. Deleting a
/// Node revokes that credential (a decommissioned host's token must not take over a later Node
/// of the same name); the hash makes sure a credential minted since, by an enrollment of a new
/// Node under the name, is not the one revoked.
async fn node_credential(call: &Call<'_>, name: &str) -> Result<Option<(String, String)>, StoreError> {
    if call.path.rt.store_key() != crate::resources::NODE.store_key() {
        return Ok(None);
    }
    let token_name = crate::auth::Role::Node(name.to_string()).to_string();
    let hash = call.ctx.token_store.token_hash_of(token_name.clone()).await?;
    Ok(hash.map(|h| (token_name, h)))
}

async fn revoke_node_credential(call: &Call<'_>, token_name: String, hash: String) {
    // What was said about the deleted Node (a refused enrollment) holds nothing back about a
    // new Node of its name.
    if let Some(node) = token_name.strip_prefix("node:") {
        call.ctx.events.forget_object("Node", node);
    }
    match call.ctx.token_store.delete_token(token_name.clone(), Some(hash)).await {
        Ok(true) => tracing::info!(token = %token_name, "Node deleted: its agent's credential is revoked"),
        Ok(false) => {}
        Err(e) => {
            tracing::error!(token = %token_name, error = %e, "Node deleted, but revoking its agent's credential failed: run `aloft-coordinator token revoke --name {token_name}`")
        }
    }
}
