//! The HTTP API: Kubernetes' REST conventions over the store, so OpenShift YAML applies unchanged
//! and kubectl works as a client.

pub mod config_server;
pub mod discovery;
pub mod enroll;
pub mod error;
pub mod explain;
pub mod fields;
pub mod finalizers;
pub mod global_packages;
pub mod handlers;
pub mod inflight;
pub mod lease;
mod negotiate;
pub mod objects;
pub mod openapi;
pub mod pages;
pub mod request;
pub mod request_metrics;
pub mod review;
mod strategic;
pub mod table;
pub mod validate;
pub mod watch;

use crate::auth::{self, Identity};
use crate::health::{self as health_checks, Health};
use crate::store::{Store, StoreError, Tokens};
use axum::body::Body;
use axum::extract::{Query, RawQuery, Request, State};
use axum::http::{HeaderMap, Method, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get};
use axum::{Extension, Json, Router};
use error::ApiError;
use request::Target;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

/// Request limits.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Largest request body; Kubernetes' API server uses 3 MiB.
    pub max_body: usize,
    /// A watch without `timeoutSeconds` ends after this; clients reconnect from their last version.
    pub watch_timeout: Duration,
    /// Reads served at once before a 429 (`--max-requests-inflight`); 0 is no limit.
    pub max_requests_inflight: usize,
    /// Writes served at once before a 429 (`--max-mutating-requests-inflight`); 0 is no limit.
    pub max_mutating_requests_inflight: usize,
    /// How long an HTTP/2 connection may send nothing before the coordinator pings it
    /// (`--http2-ping-interval`); zero sends none. A host that vanished without closing its
    /// connection (powered off, cut off) otherwise keeps its watches, and the slots they take of
    /// its node's [`watch::MAX_NODE_WATCHES`], until each watch's own timeout.
    pub ping_interval: Duration,
    /// How long a ping may go unanswered before its connection is closed, with every request
    /// and watch on it (`--http2-ping-timeout`).
    pub ping_timeout: Duration,
}

/// client-go's figures for its own side of the connection (ReadIdleTimeout, PingTimeout): a
/// connection that is gone is found within 45 s from either end.
pub const DEFAULT_PING_INTERVAL: Duration = Duration::from_secs(30);
pub const DEFAULT_PING_TIMEOUT: Duration = Duration::from_secs(15);

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_body: 3 * 1024 * 1024,
            watch_timeout: Duration::from_secs(1800),
            max_requests_inflight: inflight::DEFAULT_READ_ONLY,
            max_mutating_requests_inflight: inflight::DEFAULT_MUTATING,
            ping_interval: DEFAULT_PING_INTERVAL,
            ping_timeout: DEFAULT_PING_TIMEOUT,
        }
    }
}

/// The identity a bearer token stands for, if any.
async fn identity_of(tokens: &dyn Tokens, token: &str) -> Result<Option<Identity>, StoreError> {
    Ok(tokens.find_token(auth::token_hash(token)).await?.and_then(|(name, role)| {
        // A row with a role this build does not know grants nothing.
        role.parse().ok().map(|role| Identity { name, role })
    }))
}

/// Everything a request handler needs.
pub struct Ctx {
    pub store: Arc<dyn Store>,
    /// Where enrollment stores the node credentials it mints.
    pub token_store: Arc<dyn Tokens>,
    /// Events the API itself records (a refused enrollment).
    pub events: crate::controllers::events::Recorder,
    pub limits: Limits,
    /// Lists kept for their later pages (`limit` and `continue`).
    pub pages: pages::Pages,
    /// The supervised loops' states, for the health endpoints and `/metrics`.
    pub health: Arc<Health>,
    /// What the API answered, for `/metrics`.
    pub requests: request_metrics::RequestMetrics,
    /// The binary's allocator, for `/metrics`.
    pub allocator: Option<crate::process_metrics::AllocatorProbe>,
    /// The agents' open watches, which say whether each node's agent is there.
    pub presence: Arc<crate::controllers::presence::Presence>,
    /// Which build serves (`/version`, `/metrics`).
    pub build: aloft_api::build::BuildInfo,
    /// The node names being enrolled now (one enrollment of a name at a time).
    pub enrolling: enroll::InFlight,
    /// The requests served now, against [`Limits::max_requests_inflight`] and
    /// [`Limits::max_mutating_requests_inflight`].
    pub inflight: inflight::Inflight,
    /// OLM's global catalog namespace (`--olm-global-namespace`): its PackageManifests are
    /// listed in every namespace ([`global_packages`]).
    pub global_catalog_namespace: Option<String>,
    /// The CA agents pin (PEM), for the configs [`config_server`] serves; `None` over plain HTTP.
    pub ca_pem: Option<String>,
    /// The first-boot config files [`config_server`] served lately.
    pub first_boot: config_server::FirstBootCache,
}

pub type SharedCtx = Arc<Ctx>;

/// The token of an `Authorization: Bearer <token>` header. The scheme is case-insensitive (RFC
/// 7235 section 2.1), as kube-apiserver's bearer authenticator takes it: `bearer` works too.
fn bearer_token(header: &str) -> Option<&str> {
    let (scheme, token) = header.trim_start().split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

/// The first `Impersonate-*` header of a request (`kubectl --as`, `--as-group`, `--as-uid`).
fn impersonation(headers: &HeaderMap) -> Option<&str> {
    headers.keys().map(|k| k.as_str()).find(|k| k.starts_with("impersonate-"))
}

async fn authenticate(State(ctx): State<SharedCtx>, mut req: Request, next: Next) -> Response {
    let token = req.headers().get("authorization").and_then(|v| v.to_str().ok()).and_then(bearer_token);
    let Some(token) = token else { return ApiError::unauthorized().into_response() };
    match identity_of(ctx.token_store.as_ref(), token).await {
        // Refused, not ignored: answered as the caller, `kubectl auth can-i --as=X` reported the
        // caller's rights as X's, and `kubectl --as=<viewer> apply` (run to make sure a change
        // is read-only) wrote with the admin's.
        Ok(Some(who)) => {
            if let Some(header) = impersonation(req.headers()) {
                return ApiError::impersonation(header, &who).into_response();
            }
            req.extensions_mut().insert(who);
            next.run(req).await
        }
        Ok(None) => ApiError::unauthorized().into_response(),
        Err(e) => ApiError::internal(e.to_string()).into_response(),
    }
}

async fn read_body(body: Body, headers: &HeaderMap, limit: usize) -> Result<axum::body::Bytes, ApiError> {
    let declared = headers.get("content-length").and_then(|v| v.to_str().ok()).and_then(|v| v.parse::<usize>().ok());
    if declared.is_some_and(|n| n > limit) {
        return Err(ApiError::too_large(limit));
    }
    axum::body::to_bytes(body, limit).await.map_err(|_| ApiError::too_large(limit))
}

fn json_ok(v: serde_json::Value) -> Response {
    (StatusCode::OK, Json(v)).into_response()
}

#[allow(clippy::too_many_arguments)]
async fn api_entry(
    core: bool,
    ctx: SharedCtx,
    who: Identity,
    method: Method,
    rest: &str,
    params: HashMap<String, String>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let target = request::parse(core, rest)?;
    let discovery = |v: Option<serde_json::Value>| v.map(json_ok).ok_or_else(ApiError::not_found_path);
    let reading = method == Method::GET || method == Method::HEAD;
    if !reading
        && matches!(target, Target::CoreVersions | Target::Groups | Target::Group(_) | Target::ResourceList { .. })
    {
        // Discovery is read, as `auth::decide_path` and `can-i` say (a DELETE of /apis answered
        // 200 with the group list).
        return Err(ApiError::method_not_allowed(format!("{method} is not supported on discovery: only GET")));
    }
    match target {
        Target::CoreVersions => Ok(json_ok(discovery::core_versions())),
        Target::Groups => Ok(json_ok(discovery::group_list())),
        Target::Group(g) => discovery(discovery::group(&g)),
        Target::ResourceList { group, version } => discovery(discovery::resource_list(&group, &version)),
        Target::Resource(path) => {
            let asked = negotiate::output(headers.get(axum::http::header::ACCEPT), handlers::watches(&path, &params))?;
            let body = read_body(body, &headers, ctx.limits.max_body).await?;
            let call = handlers::Call { ctx: &ctx, who: &who, method, path, params, headers, body, table: asked.table };
            let answer = handlers::dispatch(call).await;
            written_as(asked.output, into_response(answer)).await
        }
        Target::Pods => {
            let output = negotiate::output_plain(headers.get(axum::http::header::ACCEPT))?;
            written_as(output, into_response(empty_pod_list(&ctx, &method, &params).await)).await
        }
        Target::NodeLease(name) => {
            let output = negotiate::output_plain(headers.get(axum::http::header::ACCEPT))?;
            let watching = handlers::is_watch(&params);
            written_as(output, into_response(lease::answer(&ctx, &who, &method, &name, watching).await)).await
        }
        Target::Review(review) => {
            let body = read_body(body, &headers, ctx.limits.max_body).await?;
            review::answer(&ctx, &who, review, &method, &headers, &body).await
        }
    }
}

/// `GET /api/v1/pods` (and of a namespace): an empty `PodList` at the store's current
/// resourceVersion. aloft runs no pods, so none is ever on a node; `kubectl describe node` lists
/// them (`spec.nodeName=<node>`) and fails on a 404, which made it unusable. Only a list is
/// served: a watch, a named pod or a write is not (405), and pods are not in discovery, so
/// `kubectl get pods` still says the server does not have the resource type (describe uses its
/// typed client and needs no discovery). The selectors are not checked: nothing could match.
async fn empty_pod_list(ctx: &Ctx, method: &Method, params: &HashMap<String, String>) -> Result<Response, ApiError> {
    let watching = handlers::is_watch(params);
    if *method != Method::GET || watching {
        return Err(ApiError::method_not_allowed("aloft runs no pods: only GET of the (empty) pod list is served"));
    }
    let revision = ctx.store.revision().await.map_err(|e| ApiError::internal(e.to_string()))?;
    Ok(json_ok(serde_json::json!({
        "kind": "PodList",
        "apiVersion": "v1",
        "metadata": {"resourceVersion": revision.to_string()},
        "items": [],
    })))
}

/// Everything under `/api` (`CORE`: the core group) or `/apis` (named groups); `rest` is absent
/// for the root itself.
async fn api_root<const CORE: bool>(
    State(c): State<SharedCtx>,
    Extension(w): Extension<Identity>,
    m: Method,
    rest: Option<axum::extract::Path<String>>,
    Query(pairs): Query<Vec<(String, String)>>,
    h: HeaderMap,
    b: Body,
) -> Response {
    let rest = rest.map(|p| p.0).unwrap_or_default();
    if let Err(e) = handlers::check_dry_run(&m, pairs.iter().filter(|(k, _)| k == "dryRun").map(|(_, v)| v.as_str())) {
        return e.into_response();
    }
    // A parameter given twice counts once, its last value (as before; `dryRun`, where a second
    // value could turn a dry run into a real write, is checked whole above).
    let q: HashMap<String, String> = pairs.into_iter().collect();
    into_response(api_entry(CORE, c, w, m, &rest, q, h, b).await)
}

/// The answer in the negotiated output: its errors too, as kube-apiserver writes a `Status` in
/// the serializer the client asked for.
async fn written_as(output: negotiate::Output, answer: Response) -> Result<Response, ApiError> {
    Ok(match output {
        negotiate::Output::Json => answer,
        negotiate::Output::Yaml => negotiate::to_yaml(answer).await,
    })
}

fn into_response(r: Result<Response, ApiError>) -> Response {
    r.unwrap_or_else(IntoResponse::into_response)
}

/// The query of a health endpoint: `verbose` (present, whatever its value) and every `exclude`.
fn health_query(raw: Option<&str>) -> (bool, Vec<String>) {
    let (mut verbose, mut exclude) = (false, Vec::new());
    for pair in raw.unwrap_or_default().split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        let v = percent_encoding::percent_decode_str(v).decode_utf8_lossy().into_owned();
        match k {
            "verbose" => verbose = true,
            "exclude" => exclude.push(v),
            _ => {}
        }
    }
    (verbose, exclude)
}

/// `/readyz` and `/healthz` (the same checks, as in Kubernetes since /healthz was deprecated):
/// 200 `ok`, or 500 listing each check; `?verbose` lists them also when all pass, `?exclude=NAME`
/// leaves one out; `/readyz/NAME` runs one.
async fn health_endpoint(ctx: &Ctx, endpoint: &str, one: Option<&str>, query: Option<&str>) -> Response {
    // Liveness is the process answering: a stopped controller is started again inside it, and
    // restarting the whole coordinator for it would only drop every agent's watch.
    let checks = if endpoint == "livez" {
        vec![health_checks::Check::passed("ping")]
    } else {
        health_checks::checks(&ctx.health, ctx.store.as_ref()).await
    };
    let verdict = match one {
        Some(name) => match health_checks::single(&checks, name) {
            Some(v) => v,
            None => return (StatusCode::NOT_FOUND, format!("no health check named {name:?}\n")).into_response(),
        },
        None => {
            let (verbose, exclude) = health_query(query);
            match health_checks::without(checks, &exclude) {
                Ok(checks) => health_checks::verdict(endpoint, &checks, verbose),
                Err(e) => return (StatusCode::BAD_REQUEST, format!("{e}\n")).into_response(),
            }
        }
    };
    let code = if verdict.ok { StatusCode::OK } else { StatusCode::INTERNAL_SERVER_ERROR };
    (code, [("content-type", "text/plain; charset=utf-8"), ("x-content-type-options", "nosniff")], verdict.body)
        .into_response()
}

/// `/metrics`, for admins and viewers (a node's credential reads only what its node needs).
/// OpenMetrics when the scraper asks for it (Prometheus does), else the classic text format
/// ([`aloft_api::exposition`]).
async fn metrics(ctx: &Ctx, who: &Identity, headers: &HeaderMap) -> Response {
    use aloft_api::exposition;
    if auth::decide_path(who, "get", "/metrics") == auth::Decision::Deny {
        return ApiError::forbidden(who, "get", "/metrics", None, None).into_response();
    }
    let accept = headers.get(axum::http::header::ACCEPT).and_then(|v| v.to_str().ok()).unwrap_or("");
    match crate::metrics::encode(
        ctx.store.as_ref(),
        &ctx.health,
        (&ctx.requests, &ctx.inflight),
        ctx.allocator,
        &ctx.build,
    )
    .await
    {
        Ok(text) if exposition::wants_openmetrics(accept) => {
            (StatusCode::OK, [("content-type", exposition::OPENMETRICS)], text).into_response()
        }
        Ok(text) => {
            (StatusCode::OK, [("content-type", exposition::TEXT)], exposition::to_text_format(&text)).into_response()
        }
        Err(e) => ApiError::internal(e.to_string()).into_response(),
    }
}

/// `/<endpoint>` (all checks) and `/<endpoint>/<check>` (one).
fn health_routes(endpoint: &'static str) -> Router<SharedCtx> {
    let all = move |State(c): State<SharedCtx>, RawQuery(q): RawQuery| async move {
        health_endpoint(&c, endpoint, None, q.as_deref()).await
    };
    let one = move |State(c): State<SharedCtx>, axum::extract::Path(n): axum::extract::Path<String>| async move {
        health_endpoint(&c, endpoint, Some(&n), None).await
    };
    Router::new().route(&format!("/{endpoint}"), get(all)).route(&format!("/{endpoint}/{{*check}}"), get(one))
}

/// The API router. Health endpoints are open; everything else needs a token. Every answer is
/// counted for `/metrics`.
pub fn router(ctx: SharedCtx) -> Router {
    let counting = middleware::from_fn_with_state(ctx.clone(), request_metrics::observe);
    let api = Router::new()
        .route(
            "/metrics",
            get(|State(c): State<SharedCtx>, Extension(w): Extension<Identity>, h: HeaderMap| async move {
                metrics(&c, &w, &h).await
            }),
        )
        .route(
            "/aloft/v1/enroll",
            axum::routing::post(
                |State(c): State<SharedCtx>, Extension(w): Extension<Identity>, h: HeaderMap, b: Body| async move {
                    let body = match read_body(b, &h, c.limits.max_body).await {
                        Ok(b) => b,
                        Err(e) => return e.into_response(),
                    };
                    let tokens = c.token_store.clone();
                    into_response(enroll::enroll(c, tokens, w, &body).await)
                },
            ),
        )
        .route(
            "/config/{pool}",
            get(
                |State(c): State<SharedCtx>,
                 Extension(w): Extension<Identity>,
                 m: axum::http::Method,
                 u: axum::http::Uri,
                 h: HeaderMap,
                 axum::extract::Path(pool): axum::extract::Path<String>| async move {
                    let authority = u
                        .authority()
                        .map(|a| a.to_string())
                        .or_else(|| h.get(axum::http::header::HOST).and_then(|v| v.to_str().ok()).map(str::to_string))
                        .unwrap_or_default();
                    let scheme = if c.ca_pem.is_some() { "https" } else { "http" };
                    let token =
                        h.get(axum::http::header::AUTHORIZATION).and_then(|v| v.to_str().ok()).and_then(bearer_token);
                    let req = config_server::ConfigRequest {
                        pool: &pool,
                        who: &w,
                        token,
                        server: format!("{scheme}://{authority}"),
                        accept: h.get(axum::http::header::ACCEPT).and_then(|v| v.to_str().ok()),
                        head: m == axum::http::Method::HEAD,
                    };
                    into_response(config_server::serve(&c, req).await)
                },
            ),
        )
        .route(
            "/openapi/v2",
            get(|h: HeaderMap| async move {
                let (ctype, body) = openapi::v2(h.get("accept").and_then(|v| v.to_str().ok()).unwrap_or(""));
                (StatusCode::OK, [("content-type", ctype)], body).into_response()
            }),
        )
        .route("/openapi/v3", get(|| async { json_ok(openapi::index()) }))
        .route(
            "/openapi/v3/{*path}",
            get(|axum::extract::Path(p): axum::extract::Path<String>| async move {
                openapi::document(&p).map(json_ok).unwrap_or_else(|| ApiError::not_found_path().into_response())
            }),
        )
        .route("/api", any(api_root::<true>))
        .route("/api/{*rest}", any(api_root::<true>))
        .route("/apis", any(api_root::<false>))
        .route("/apis/{*rest}", any(api_root::<false>))
        .fallback(|| async { ApiError::not_found_path().into_response() })
        // Inside authentication: an admin is served over the limits.
        .route_layer(middleware::from_fn_with_state(ctx.clone(), inflight::limit))
        .route_layer(middleware::from_fn_with_state(ctx.clone(), authenticate))
        .with_state(ctx.clone());
    Router::new()
        .merge(health_routes("healthz"))
        .merge(health_routes("readyz"))
        .merge(health_routes("livez"))
        // Open, as kube-apiserver's `system:public-info-viewer` has it: monitoring and load
        // balancers read the version without a credential.
        .route("/version", get(|State(c): State<SharedCtx>| async move { json_ok(discovery::version(&c.build)) }))
        .with_state(ctx)
        .merge(api)
        .layer(counting)
}

#[cfg(test)]
mod bearer_tests {
    use super::bearer_token;

    #[test]
    fn the_scheme_is_case_insensitive_and_a_token_is_required() {
        assert_eq!(bearer_token("Bearer abc"), Some("abc"));
        assert_eq!(bearer_token("bearer abc"), Some("abc"));
        assert_eq!(bearer_token("BEARER  abc "), Some("abc"));
        assert_eq!(bearer_token("Basic abc"), None);
        assert_eq!(bearer_token("Bearer "), None);
        assert_eq!(bearer_token("Bearerabc"), None);
    }
}
