//! Serving the graphs with the update service's protocol: `GET /api/upgrades_info/v1/graph?
//! channel=&arch=` answered as OpenShift's update service answers it (its media types, its
//! `{kind, value}` errors and their status codes), so the CVO, `oc adm upgrade` and aloft's
//! ClusterVersion controller all read it unchanged. The inputs are read again every refresh
//! interval and on SIGHUP; a reload that fails keeps the graphs that were served, and says why.

use super::build::Built;
use super::graph_data::{is_arch, is_channel, CHANNEL_CHARS, DEFAULT_ARCH};
use super::metrics::ServiceMetrics;
use axum::extract::{Query, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::json;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

/// The media types the update service answers with; a client asking for neither gets 406.
const JSON: &str = "application/json";
const CINCINNATI_V1: &str = "application/vnd.redhat.cincinnati.v1+json";

/// How `update-service` runs.
#[derive(Debug, Clone)]
pub struct ServiceOptions {
    pub graph_data: PathBuf,
    pub releases: PathBuf,
    pub listen: SocketAddr,
    pub refresh: Duration,
    /// PEM certificate chain and key: serve HTTPS.
    pub tls: Option<(PathBuf, PathBuf)>,
    /// Where `/metrics` is served (plain HTTP, apart from the graph); `None`: nowhere.
    pub metrics_listen: Option<SocketAddr>,
    pub build: aloft_api::build::BuildInfo,
}

/// What is served now, replaced whole by a reload.
struct Current {
    built: RwLock<Arc<Built>>,
    metrics: Arc<ServiceMetrics>,
}

impl Current {
    fn get(&self) -> Arc<Built> {
        match self.built.read() {
            Ok(g) => g.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    fn set(&self, b: Built) {
        match self.built.write() {
            Ok(mut g) => *g = Arc::new(b),
            Err(poisoned) => *poisoned.into_inner() = Arc::new(b),
        }
    }
}

/// The routes, on graphs already built.
fn router(
    built: Built,
    metrics: Arc<ServiceMetrics>,
) -> (axum::Router, impl Fn(Built) + Clone + Send + Sync + 'static) {
    let current = Arc::new(Current { built: RwLock::new(Arc::new(built)), metrics });
    let setter = {
        let current = current.clone();
        move |b: Built| current.set(b)
    };
    let app = axum::Router::new()
        .route("/api/upgrades_info/v1/graph", axum::routing::get(graph))
        .route("/api/upgrades_info/v1/channels", axum::routing::get(channels))
        .route("/healthz", axum::routing::get(|| async { "ok\n" }))
        .with_state(current);
    (app, setter)
}

/// An error as the update service writes it.
fn error(status: StatusCode, kind: &str, value: String) -> Response {
    (status, [(header::CONTENT_TYPE, JSON)], json!({"kind": kind, "value": value}).to_string()).into_response()
}

/// A refused query: its status, the error's `kind` and its text.
type Refusal = (StatusCode, &'static str, String);

/// The media type to answer with, from the request's Accept: JSON unless the client asked
/// for Cincinnati's own type only; `None` when it accepts neither.
fn negotiate(headers: &HeaderMap) -> Option<&'static str> {
    let Some(accept) = headers.get(header::ACCEPT) else { return Some(JSON) };
    let accept = accept.to_str().ok()?;
    let mut cincinnati = false;
    for item in accept.split(',') {
        let media = item.split(';').next().unwrap_or("").trim().to_ascii_lowercase();
        match media.as_str() {
            JSON | "application/*" | "*/*" => return Some(JSON),
            CINCINNATI_V1 => cincinnati = true,
            _ => {}
        }
    }
    cincinnati.then_some(CINCINNATI_V1)
}

/// The parameters a query may carry; `id` and `version` (what the CVO sends) are accepted and
/// do not change the answer, as for Cincinnati's public graph.
fn arch_of(params: &HashMap<String, String>) -> Result<String, Refusal> {
    let arch = params.get("arch").map(String::as_str).unwrap_or(DEFAULT_ARCH);
    if !is_arch(arch) {
        return Err((
            StatusCode::BAD_REQUEST,
            "invalid_params",
            format!("invalid client parameters: arch '{arch}' does not match regex '^[0-9a-z]+$'"),
        ));
    }
    Ok(arch.to_string())
}

async fn graph(
    State(current): State<Arc<Current>>,
    headers: HeaderMap,
    Query(params): Query<HashMap<String, String>>,
) -> Response {
    let started = Instant::now();
    let answer = match graph_answer(&current, &headers, &params) {
        Ok(ok) => ok,
        Err((status, kind, value)) => {
            current.metrics.refused(status.as_u16(), kind);
            error(status, kind, value)
        }
    };
    current.metrics.served(started.elapsed());
    answer
}

fn graph_answer(current: &Current, headers: &HeaderMap, params: &HashMap<String, String>) -> Result<Response, Refusal> {
    let media = negotiate(headers).ok_or((
        StatusCode::NOT_ACCEPTABLE,
        "invalid_content_type",
        "invalid Content-Type requested".to_string(),
    ))?;
    let channel = params.get("channel").ok_or((
        StatusCode::BAD_REQUEST,
        "missing_params",
        "mandatory client parameters missing: channel".to_string(),
    ))?;
    if !is_channel(channel) {
        return Err((
            StatusCode::BAD_REQUEST,
            "invalid_params",
            format!("invalid client parameters: channel '{channel}' does not match regex '{CHANNEL_CHARS}'"),
        ));
    }
    let arch = arch_of(params)?;
    let body = current.get().graph(channel, &arch);
    tracing::debug!(channel = %channel, arch = %arch, "graph served");
    Ok((StatusCode::OK, [(header::CONTENT_TYPE, media)], body.to_string()).into_response())
}

/// aloft's own: the channels that offer releases for an architecture (Cincinnati has no such
/// query; without it a misspelt channel reads as an empty graph and `VersionNotFound`).
async fn channels(State(current): State<Arc<Current>>, Query(params): Query<HashMap<String, String>>) -> Response {
    let arch = match arch_of(&params) {
        Ok(a) => a,
        Err((status, kind, value)) => return error(status, kind, value),
    };
    let list = current.get().channels(&arch);
    (StatusCode::OK, [(header::CONTENT_TYPE, JSON)], json!({"arch": arch, "channels": list}).to_string())
        .into_response()
}

/// Tell systemd (`Type=notify`) that the service is ready, and what `systemctl status` should
/// say: a failed reload shows there, not only in the journal. A no-op outside systemd.
fn notify(status: &str, ready: bool) {
    if std::env::var_os("NOTIFY_SOCKET").is_none() {
        return;
    }
    let line = status.replace('\n', " ");
    let mut states = vec![sd_notify::NotifyState::Status(&line)];
    if ready {
        states.push(sd_notify::NotifyState::Ready);
    }
    if let Err(e) = sd_notify::notify(&states) {
        tracing::warn!(error = %e, "sd_notify failed");
    }
}

/// Load the inputs off the runtime's threads (a real graph-data has a few thousand files).
async fn load(opts: &ServiceOptions, metrics: &ServiceMetrics) -> Result<Built, super::LoadError> {
    let (g, r) = (opts.graph_data.clone(), opts.releases.clone());
    let started = Instant::now();
    let result = match tokio::task::spawn_blocking(move || super::load(&g, &r)).await {
        Ok(result) => result,
        Err(e) => Err(super::LoadError { path: opts.graph_data.clone(), message: format!("the load stopped: {e}") }),
    };
    let served = result.as_ref().ok().map(|b| b.summary.releases.values().sum());
    metrics.loaded(started.elapsed(), served);
    result
}

/// `/metrics` (and `/healthz`) on a listener of their own.
fn metrics_router(metrics: Arc<ServiceMetrics>) -> axum::Router {
    axum::Router::new()
        .route(
            "/metrics",
            axum::routing::get(move || {
                let metrics = metrics.clone();
                async move {
                    match metrics.encode() {
                        Ok(text) => (
                            StatusCode::OK,
                            [(header::CONTENT_TYPE, "application/openmetrics-text; version=1.0.0; charset=utf-8")],
                            text,
                        )
                            .into_response(),
                        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, format!("cannot encode the metrics: {e}\n"))
                            .into_response(),
                    }
                }
            }),
        )
        .route("/healthz", axum::routing::get(|| async { "ok\n" }))
}

/// Serve until SIGTERM or SIGINT. The first load must succeed (a service with nothing to serve
/// would answer every fleet with an empty graph); later ones that fail keep what is served.
pub async fn run(opts: ServiceOptions) -> anyhow::Result<()> {
    let metrics = Arc::new(ServiceMetrics::new(&opts.build));
    let built = load(&opts, &metrics).await.map_err(|e| anyhow::anyhow!("the graph-data did not load: {e}"))?;
    tracing::info!("graph-data loaded from {}: {}", opts.graph_data.display(), built.summary);
    let mut last = built.fingerprint();
    let first_summary = built.summary.to_string();
    let (app, set) = router(built, metrics.clone());

    // Before the ready line: a SIGHUP (systemctl reload) right after the start must reload, not
    // stop the process, and certificates that do not load must stop the start.
    let hup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())
        .map_err(|e| anyhow::anyhow!("cannot watch SIGHUP: {e}"))?;
    let tls = match &opts.tls {
        None => None,
        Some((cert, key)) => Some(
            axum_server::tls_rustls::RustlsConfig::from_pem_file(cert, key)
                .await
                .map_err(|e| anyhow::anyhow!("--tls-cert-file/--tls-key-file: {e}"))?,
        ),
    };
    let listener = std::net::TcpListener::bind(opts.listen)
        .map_err(|e| anyhow::anyhow!("cannot listen on {}: {e}", opts.listen))?;
    listener.set_nonblocking(true)?;
    let addr = listener.local_addr()?;
    let metrics_listener = match opts.metrics_listen {
        None => None,
        Some(at) => {
            let l = std::net::TcpListener::bind(at)
                .map_err(|e| anyhow::anyhow!("--metrics-listen: cannot listen on {at}: {e}"))?;
            l.set_nonblocking(true)?;
            Some(l)
        }
    };
    let scheme = if tls.is_some() { "https" } else { "http" };
    tracing::info!("update service at {scheme}://{addr}/api/upgrades_info/v1/graph");
    println!("update service at {scheme}://{addr}/api/upgrades_info/v1/graph");
    let handle = axum_server::Handle::new();
    if let Some(l) = metrics_listener {
        let at = l.local_addr()?;
        tracing::info!("metrics at http://{at}/metrics");
        println!("metrics at http://{at}/metrics");
        let server = axum_server::from_tcp(l)?.handle(handle.clone());
        let app = metrics_router(metrics.clone());
        tokio::spawn(async move {
            if let Err(e) = server.serve(app.into_make_service()).await {
                tracing::warn!("the metrics listener stopped: {e}");
            }
        });
    }
    notify(&format!("serving on {addr}: {first_summary}"), true);

    {
        let handle = handle.clone();
        tokio::spawn(async move {
            let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(s) => s,
                Err(e) => {
                    tracing::warn!("cannot watch SIGTERM: {e}");
                    return;
                }
            };
            tokio::select! {
                _ = term.recv() => {}
                _ = tokio::signal::ctrl_c() => {}
            }
            tracing::info!("stopping");
            handle.graceful_shutdown(Some(Duration::from_secs(5)));
        });
    }
    {
        let (opts, metrics) = (opts.clone(), metrics.clone());
        tokio::spawn(async move {
            let mut hup = hup;
            let mut tick = tokio::time::interval(opts.refresh);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            tick.tick().await;
            loop {
                let why = tokio::select! {
                    _ = tick.tick() => "refresh",
                    Some(_) = hup.recv() => "SIGHUP",
                };
                match load(&opts, &metrics).await {
                    Ok(b) => {
                        let now = b.fingerprint();
                        if now != last || why == "SIGHUP" {
                            tracing::info!("graph-data reloaded ({why}): {}", b.summary);
                        }
                        last = now;
                        notify(&format!("serving on {addr}: {}", b.summary), false);
                        set(b);
                    }
                    Err(e) => {
                        tracing::warn!(
                            "graph-data did not reload ({why}); still serving the last graphs that loaded: {e}"
                        );
                        notify(
                            &format!("serving on {addr} the last graphs that loaded; the {why} reload failed: {e}"),
                            false,
                        );
                    }
                }
            }
        });
    }
    match tls {
        None => axum_server::from_tcp(listener)?.handle(handle).serve(app.into_make_service()).await?,
        Some(cfg) => axum_server::from_tcp_rustls(listener, cfg)?.handle(handle).serve(app.into_make_service()).await?,
    }
    Ok(())
}
