//! The update service's Prometheus metrics, under the names OpenShift's update service (OSUS)
//! gives its own: its graph-builder's `cincinnati_gb_*` for the loads, its policy-engine's
//! `cincinnati_pe_*` for the queries. Why its names: OSUS's dashboards, alerts and SLO queries
//! (no load errors, at least one load an hour, 90% of graphs served under 0.5 s, no 5xx) then
//! read aloft's service unchanged. Served on a listener of its own (`--metrics-listen`), as OSUS
//! serves them on its status port, not beside the public graph.
//!
//! Series:
//! - `cincinnati_gb_graph_upstream_scrapes_total`, `cincinnati_gb_graph_upstream_errors_total`:
//!   loads of the graph-data and release files (the start, each refresh, each SIGHUP), and
//!   those that failed (the graphs served before stay served);
//! - `cincinnati_gb_graph_upstream_scrapes_duration`: how long a load took, in seconds;
//! - `cincinnati_gb_graph_last_successful_refresh_timestamp`: when the last load that succeeded
//!   ended (Unix seconds): what to alert on when a graph-data stops loading;
//! - `cincinnati_gb_graph_final_releases`: the releases served, over every architecture;
//! - `cincinnati_pe_graph_incoming_requests_total`: graph queries;
//! - `cincinnati_pe_graph_serve_duration_seconds`: how long each took to answer;
//! - `cincinnati_pe_graph_response_errors_total{code,kind}`: queries refused, by status code and
//!   the error's `kind` (`missing_params`, `invalid_params`, `invalid_content_type`);
//! - `cincinnati_gb_build_info{git_commit}`, `cincinnati_pe_build_info{git_commit}`: 1, which
//!   build serves.

use aloft_api::build::BuildInfo;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use std::time::Duration;

/// Query latencies: a graph is answered from memory in well under a millisecond on loopback;
/// OSUS's SLO is 0.5 s.
const SERVE_BUCKETS: [f64; 10] = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5, 1.0];
/// Load durations: OpenShift's whole graph-data loads in 0.3-0.7 s here.
const LOAD_BUCKETS: [f64; 9] = [0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ErrorLabels {
    code: u16,
    kind: String,
}

/// Counters the service updates as it works; each scrape encodes them into a fresh registry.
#[derive(Debug)]
pub struct ServiceMetrics {
    requests: Counter,
    serve: Histogram,
    errors: Family<ErrorLabels, Counter>,
    loads: Counter,
    load_errors: Counter,
    load_duration: Histogram,
    last_success: Gauge,
    releases: Gauge,
    git_commit: &'static str,
}

impl ServiceMetrics {
    pub fn new(build: &BuildInfo) -> ServiceMetrics {
        ServiceMetrics {
            requests: Counter::default(),
            serve: Histogram::new(SERVE_BUCKETS),
            errors: Family::default(),
            loads: Counter::default(),
            load_errors: Counter::default(),
            load_duration: Histogram::new(LOAD_BUCKETS),
            last_success: Gauge::default(),
            releases: Gauge::default(),
            git_commit: if build.git_commit.is_empty() { "unknown" } else { build.git_commit },
        }
    }

    /// A graph query answered, refused or not.
    pub fn served(&self, took: Duration) {
        self.requests.inc();
        self.serve.observe(took.as_secs_f64());
    }

    /// A graph query refused with `code` and the error's `kind`.
    pub fn refused(&self, code: u16, kind: &str) {
        self.errors.get_or_create(&ErrorLabels { code, kind: kind.to_string() }).inc();
    }

    /// A load of the inputs ended; `releases` is what it serves when it succeeded.
    pub fn loaded(&self, took: Duration, releases: Option<usize>) {
        self.loads.inc();
        self.load_duration.observe(took.as_secs_f64());
        match releases {
            Some(n) => {
                self.releases.set(i64::try_from(n).unwrap_or(i64::MAX));
                self.last_success.set(chrono::Utc::now().timestamp());
            }
            None => {
                self.load_errors.inc();
            }
        }
    }

    /// The exposition text.
    pub fn encode(&self) -> Result<String, std::fmt::Error> {
        let mut registry = Registry::default();
        {
            let gb = registry.sub_registry_with_prefix("cincinnati_gb");
            gb.register("graph_upstream_scrapes", "Loads of the graph-data and release files", self.loads.clone());
            gb.register(
                "graph_upstream_errors",
                "Loads that failed (the graphs loaded before stay served)",
                self.load_errors.clone(),
            );
            gb.register(
                "graph_upstream_scrapes_duration",
                "How long a load took, in seconds",
                self.load_duration.clone(),
            );
            gb.register(
                "graph_last_successful_refresh_timestamp",
                "When the last load that succeeded ended, in Unix seconds",
                self.last_success.clone(),
            );
            gb.register("graph_final_releases", "Releases served, over every architecture", self.releases.clone());
            gb.register("build_info", "Which build serves: 1", build_info(self.git_commit));
        }
        {
            let pe = registry.sub_registry_with_prefix("cincinnati_pe");
            pe.register("graph_incoming_requests", "Graph queries", self.requests.clone());
            pe.register(
                "graph_serve_duration_seconds",
                "How long a graph query took to answer, in seconds",
                self.serve.clone(),
            );
            pe.register(
                "graph_response_errors",
                "Graph queries refused, by status code and error kind",
                self.errors.clone(),
            );
            pe.register("build_info", "Which build serves: 1", build_info(self.git_commit));
        }
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &registry)?;
        Ok(out)
    }
}

fn build_info(git_commit: &'static str) -> Family<[(&'static str, &'static str); 1], Gauge> {
    let info = Family::<[(&'static str, &'static str); 1], Gauge>::default();
    info.get_or_create(&[("git_commit", git_commit)]).set(1);
    info
}

#[cfg(test)]
mod tests {
    use super::*;

    fn value(text: &str, series: &str) -> Option<f64> {
        text.lines().find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
    }

    #[test]
    fn the_series_carry_the_update_services_names_and_counts() {
        let m = ServiceMetrics::new(&BuildInfo::new("0.1.0", Some("abc123"), None, None));
        m.loaded(Duration::from_millis(300), Some(7));
        m.loaded(Duration::from_millis(20), None);
        m.served(Duration::from_micros(300));
        m.served(Duration::from_micros(400));
        m.refused(400, "missing_params");
        let text = m.encode().unwrap();
        assert_eq!(value(&text, "cincinnati_gb_graph_upstream_scrapes_total"), Some(2.0), "{text}");
        assert_eq!(value(&text, "cincinnati_gb_graph_upstream_errors_total"), Some(1.0), "{text}");
        assert_eq!(value(&text, "cincinnati_gb_graph_final_releases"), Some(7.0), "{text}");
        let at = value(&text, "cincinnati_gb_graph_last_successful_refresh_timestamp").unwrap();
        assert!((at - chrono::Utc::now().timestamp() as f64).abs() < 60.0, "{text}");
        assert_eq!(value(&text, "cincinnati_pe_graph_incoming_requests_total"), Some(2.0), "{text}");
        assert_eq!(value(&text, "cincinnati_pe_graph_serve_duration_seconds_count"), Some(2.0), "{text}");
        assert_eq!(value(&text, "cincinnati_pe_graph_serve_duration_seconds_bucket{le=\"0.0005\"}"), Some(2.0));
        assert_eq!(
            value(&text, "cincinnati_pe_graph_response_errors_total{code=\"400\",kind=\"missing_params\"}"),
            Some(1.0),
            "{text}"
        );
        assert_eq!(value(&text, "cincinnati_gb_build_info{git_commit=\"abc123\"}"), Some(1.0), "{text}");
        assert_eq!(value(&text, "cincinnati_pe_build_info{git_commit=\"abc123\"}"), Some(1.0), "{text}");
    }

    #[test]
    fn a_failed_load_keeps_what_the_last_good_one_said() {
        let m = ServiceMetrics::new(&BuildInfo::new("0.1.0", None, None, None));
        m.loaded(Duration::from_millis(1), Some(3));
        let before = value(&m.encode().unwrap(), "cincinnati_gb_graph_last_successful_refresh_timestamp");
        m.loaded(Duration::from_millis(1), None);
        let text = m.encode().unwrap();
        assert_eq!(value(&text, "cincinnati_gb_graph_final_releases"), Some(3.0));
        assert_eq!(value(&text, "cincinnati_gb_graph_last_successful_refresh_timestamp"), before);
        assert_eq!(value(&text, "cincinnati_gb_build_info{git_commit=\"unknown\"}"), Some(1.0), "{text}");
    }
}
