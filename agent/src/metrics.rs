//! Prometheus metrics, served on a loopback HTTP endpoint (`/metrics`, default
//! 127.0.0.1:9101).
//!
//! From the first day, as Zincati does: a fleet operator needs to see, without logging into
//! nodes, which agents are stuck Working, how long applies take, and how often nodes reboot or
//! drift. Loopback only: a node exporter or agent on the node scrapes it; nothing about the node
//! is exposed on the network by default.
//!
//! Series: `aloft_agent_state{state}` (1 for the current MCO state, the Node's `state`
//! annotation: Done, Working, Degraded, Unreconcilable; 0 for the others),
//! `aloft_agent_phase{phase}` (1 for the agent's own phase, e.g. `draining`, `rebooting`),
//! `aloft_agent_apply_total{result}`, `aloft_agent_apply_duration_seconds` (histogram),
//! `aloft_agent_reboots_total`, `aloft_agent_reboot_failures_total` (refused by logind, or asked
//! for and not happening: MCO's `mcd_reboots_failed_total`), `aloft_agent_drift_detected` (0/1), and
//! `aloft_agent_build_info{version,git_commit,git_tree_state,build_date}` (1: the running agent's
//! build, as the coordinator's `aloft_build_info`, so that a half-done upgrade of the agents
//! shows node by node).

use aloft_api::build::BuildInfo;
use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::{Registry, Unit};
use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Where metrics are served unless configured otherwise.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:9101";
/// The states exported from the start, so a dashboard sees every series at 0 before it is used.
pub const STATES: &[&str] = &["Done", "Working", "Degraded", "Unreconcilable"];
/// OpenMetrics text, which Prometheus scrapes natively.

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StateLabels {
    state: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PhaseLabels {
    phase: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabels {
    result: String,
}

/// Errors of the metrics endpoint.
#[derive(Debug, thiserror::Error)]
pub enum MetricsError {
    #[error("cannot listen for metrics on {addr}: {error}")]
    Bind { addr: String, error: std::io::Error },
    #[error("encoding metrics: {0}")]
    Encode(std::fmt::Error),
}

impl From<std::fmt::Error> for MetricsError {
    fn from(e: std::fmt::Error) -> Self {
        MetricsError::Encode(e)
    }
}

/// The agent's metrics. Cheap to share (`Arc<Metrics>`); every update is lock-free except the
/// state switch.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    state: Family<StateLabels, Gauge>,
    seen_states: Mutex<BTreeSet<String>>,
    phase: Family<PhaseLabels, Gauge>,
    seen_phases: Mutex<BTreeSet<String>>,
    apply_total: Family<ResultLabels, Counter>,
    apply_duration: Histogram,
    reboots: Counter,
    reboot_failures: Counter,
    drift: Gauge,
}

impl Metrics {
    /// The agent's series, with `build` as the running build.
    pub fn new(build: &BuildInfo) -> Self {
        let mut registry = Registry::default();
        let info = Family::<[(&'static str, &'static str); 4], Gauge>::default();
        info.get_or_create(&build.metric_labels()).set(1);
        registry.register(
            "aloft_agent_build_info",
            "Which build of the agent runs: 1, with its version and commit",
            info,
        );
        let state = Family::<StateLabels, Gauge>::default();
        registry.register("aloft_agent_state", "The agent's MCO state (1 = current)", state.clone());
        let phase = Family::<PhaseLabels, Gauge>::default();
        registry.register("aloft_agent_phase", "The agent's internal phase (1 = current)", phase.clone());
        let apply_total = Family::<ResultLabels, Counter>::default();
        registry.register("aloft_agent_apply", "Config applies by result", apply_total.clone());
        // 0.1 s .. ~55 min: a rebootless file change up to a slow OS update.
        let apply_duration = Histogram::new(exponential_buckets(0.1, 2.0, 16));
        registry.register_with_unit(
            "aloft_agent_apply_duration",
            "Time to apply a config (validate to done or failure)",
            Unit::Seconds,
            apply_duration.clone(),
        );
        let reboots = Counter::default();
        registry.register("aloft_agent_reboots", "Reboots the agent asked for", reboots.clone());
        let reboot_failures = Counter::default();
        registry.register(
            "aloft_agent_reboot_failures",
            "Reboots logind refused, or took and did not carry out in time (each asked for again)",
            reboot_failures.clone(),
        );
        let drift = Gauge::default();
        registry.register(
            "aloft_agent_drift_detected",
            "1 while the disk differs from the current config",
            drift.clone(),
        );
        for s in STATES {
            state.get_or_create(&StateLabels { state: s.to_string() }).set(0);
        }
        let seen_states = Mutex::new(STATES.iter().map(|s| s.to_string()).collect());
        Metrics {
            registry,
            state,
            seen_states,
            phase,
            seen_phases: Mutex::new(BTreeSet::new()),
            apply_total,
            apply_duration,
            reboots,
            reboot_failures,
            drift,
        }
    }

    /// The current state: its series becomes 1, every other one 0.
    pub fn set_state(&self, current: &str) {
        let mut seen = self.seen_states.lock().unwrap_or_else(|p| p.into_inner());
        seen.insert(current.to_string());
        for s in seen.iter() {
            self.state.get_or_create(&StateLabels { state: s.clone() }).set(i64::from(s == current));
        }
    }

    /// The agent's own phase (`idle`, `draining`, ...): its series becomes 1, every other one 0.
    /// Apart from the state: dashboards and alerts on `aloft_agent_state` use MCO's states.
    pub fn set_phase(&self, current: &str) {
        let mut seen = self.seen_phases.lock().unwrap_or_else(|p| p.into_inner());
        seen.insert(current.to_string());
        for p in seen.iter() {
            self.phase.get_or_create(&PhaseLabels { phase: p.clone() }).set(i64::from(p == current));
        }
    }

    /// One apply finished with `result` (e.g. `success`, `failure`, `unreconcilable`), after
    /// `took` when known (an update finished after its reboot, by the next boot's agent, is
    /// counted but not timed: its start is not known).
    pub fn observe_apply(&self, result: &str, took: Option<Duration>) {
        self.apply_total.get_or_create(&ResultLabels { result: result.to_string() }).inc();
        if let Some(took) = took {
            self.apply_duration.observe(took.as_secs_f64());
        }
    }

    /// The agent asked for a reboot.
    pub fn inc_reboots(&self) {
        self.reboots.inc();
    }

    /// A reboot the agent asked for was refused, or did not happen in time.
    pub fn inc_reboot_failures(&self) {
        self.reboot_failures.inc();
    }

    /// Whether the last on-disk check found drift.
    pub fn set_drift(&self, drifted: bool) {
        self.drift.set(i64::from(drifted));
    }

    /// The exposition text.
    pub fn encode(&self) -> Result<String, MetricsError> {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry)?;
        Ok(out)
    }

    /// The `/metrics` router.
    pub fn router(self: Arc<Self>) -> Router {
        Router::new().route("/metrics", get(scrape)).with_state(self)
    }
}

/// OpenMetrics when the scraper asks for it (Prometheus does), else the classic text format
/// ([`aloft_api::exposition`]).
async fn scrape(State(metrics): State<Arc<Metrics>>, headers: axum::http::HeaderMap) -> Response {
    use aloft_api::exposition;
    let accept = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()).unwrap_or("");
    match metrics.encode() {
        Ok(body) if exposition::wants_openmetrics(accept) => {
            ([(header::CONTENT_TYPE, exposition::OPENMETRICS)], body).into_response()
        }
        Ok(body) => ([(header::CONTENT_TYPE, exposition::TEXT)], exposition::to_text_format(&body)).into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    }
}

/// Listen on `addr` (e.g. [`DEFAULT_LISTEN`], or port 0 for tests) and serve `/metrics` from a
/// task. Returns the bound address and the task; binding errors are returned, serving errors
/// are logged.
pub async fn serve(
    addr: &str,
    metrics: Arc<Metrics>,
) -> Result<(SocketAddr, tokio::task::JoinHandle<()>), MetricsError> {
    let bind_err = |error| MetricsError::Bind { addr: addr.to_string(), error };
    let listener = tokio::net::TcpListener::bind(addr).await.map_err(bind_err)?;
    let local = listener.local_addr().map_err(bind_err)?;
    tracing::info!(addr = %local, "serving metrics on /metrics");
    let task = tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, metrics.router()).await {
            tracing::warn!(error = %e, "metrics endpoint stopped");
        }
    });
    Ok((local, task))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    async fn http_get(addr: SocketAddr, path: &str) -> String {
        http_get_accepting(addr, path, "*/*").await
    }

    async fn http_get_accepting(addr: SocketAddr, path: &str, accept: &str) -> String {
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nAccept: {accept}\r\nConnection: close\r\n\r\n");
        s.write_all(request.as_bytes()).await.unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).await.unwrap();
        out
    }

    #[tokio::test]
    async fn scraped_over_http_on_loopback() {
        let build = BuildInfo::new("0.1.0", Some("1a2b3c4d"), Some("dirty"), Some("2026-11-30T19:00:00Z"));
        let m = Arc::new(Metrics::new(&build));
        m.set_state("Working");
        m.set_state("Done");
        m.set_phase("draining");
        m.set_phase("idle");
        m.observe_apply("success", Some(Duration::from_millis(1500)));
        m.observe_apply("failure", Some(Duration::from_secs(3)));
        m.observe_apply("success", None);
        m.inc_reboots();
        m.inc_reboot_failures();
        m.set_drift(true);
        let (addr, task) = serve("127.0.0.1:0", m.clone()).await.unwrap();
        assert!(addr.ip().is_loopback());
        let resp = http_get_accepting(addr, "/metrics", "application/openmetrics-text;version=1.0.0,*/*;q=0.1").await;
        let (head, body) = resp.split_once("\r\n\r\n").unwrap();
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
        assert!(head.to_lowercase().contains("content-type: application/openmetrics-text"), "{head}");
        for line in [
            "aloft_agent_state{state=\"Done\"} 1",
            "aloft_agent_state{state=\"Working\"} 0",
            "aloft_agent_state{state=\"Degraded\"} 0",
            "aloft_agent_phase{phase=\"idle\"} 1",
            "aloft_agent_phase{phase=\"draining\"} 0",
            "aloft_agent_apply_total{result=\"success\"} 2",
            "aloft_agent_apply_total{result=\"failure\"} 1",
            "aloft_agent_apply_duration_seconds_count 2",
            "aloft_agent_apply_duration_seconds_sum 4.5",
            "aloft_agent_reboots_total 1",
            "aloft_agent_reboot_failures_total 1",
            "aloft_agent_drift_detected 1",
            "aloft_agent_build_info{version=\"0.1.0\",git_commit=\"1a2b3c4d\",git_tree_state=\"dirty\",build_date=\"2026-11-30T19:00:00Z\"} 1",
            "# EOF",
        ] {
            assert!(body.lines().any(|l| l == line), "missing {line:?} in\n{body}");
        }
        // Anything else gets the classic text format: counters named by their `_total`, no EOF.
        let resp = http_get(addr, "/metrics").await;
        let (head, body) = resp.split_once("\r\n\r\n").unwrap();
        assert!(head.to_lowercase().contains("content-type: text/plain; version=0.0.4"), "{head}");
        assert!(body.lines().any(|l| l == "# TYPE aloft_agent_reboots_total counter"), "{body}");
        assert!(body.lines().any(|l| l == "aloft_agent_reboots_total 1") && !body.contains("# EOF"), "{body}");
        assert!(http_get(addr, "/other").await.starts_with("HTTP/1.1 404"));
        task.abort();
    }

    #[tokio::test]
    async fn bind_errors_name_the_address() {
        let err = serve("256.0.0.1:1", Arc::new(Metrics::new(&BuildInfo::new("0.1.0", None, None, None))))
            .await
            .unwrap_err()
            .to_string();
        assert!(err.contains("256.0.0.1:1"), "{err}");
    }
}
