//! How often each controller reconciles, how long its passes take and how many watch events
//! started them, for `/metrics`:
//! - `aloft_controller_passes_total{controller,result}` (`result`: `success`, or `error` when the
//!   pass failed and the controller starts over from a fresh list);
//! - `aloft_controller_pass_duration_seconds{controller}`, a histogram;
//! - `aloft_controller_pass_events_total{controller}`: the watch events the passes were run for
//!   (over the passes, the mean batch; a timer's pass has none).
//!
//! Why: between a node's Done report and the next node's pick, a rollout waits for the node
//! controller's pass, and on a large fleet a pass is mostly the store writes it waits for, so a
//! slow disk or a busy store shows here first. An OpenShift control plane shows the same through
//! controller-runtime's `controller_runtime_reconcile_total` and `..._reconcile_time_seconds`;
//! these have names of their own because an aloft pass reconciles a whole fleet, not one object.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use std::future::Future;

/// The histogram's upper bounds, in seconds: a pass over a quiet fleet takes well under a
/// millisecond, one that writes a thousand picks tens of milliseconds, a stalled store seconds.
const BUCKETS: [f64; 14] = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Controller {
    controller: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Outcome {
    controller: &'static str,
    result: &'static str,
}

/// Every controller's series, kept for the coordinator's life and registered into each scrape's
/// registry (see [`crate::metrics`]).
#[derive(Clone, Debug)]
pub struct PassMetrics {
    passes: Family<Outcome, Counter>,
    events: Family<Controller, Counter>,
    duration: Family<Controller, Histogram, fn() -> Histogram>,
}

impl Default for PassMetrics {
    fn default() -> Self {
        PassMetrics {
            passes: Family::default(),
            events: Family::default(),
            duration: Family::new_with_constructor(|| Histogram::new(BUCKETS)),
        }
    }
}

impl PassMetrics {
    /// The recorder of one controller's passes.
    pub fn of(&self, controller: &'static str) -> Passes {
        Passes { metrics: self.clone(), controller }
    }

    /// Adds the series to a scrape's registry: they keep counting between scrapes, and every
    /// scrape reads the same ones.
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "aloft_controller_passes",
            "Reconcile passes of each controller, by result (error: the controller starts over)",
            self.passes.clone(),
        );
        registry.register(
            "aloft_controller_pass_duration_seconds",
            "How long each controller's passes took, their store writes included",
            self.duration.clone(),
        );
        registry.register(
            "aloft_controller_pass_events",
            "Watch events each controller's passes were run for",
            self.events.clone(),
        );
    }
}

/// Records the passes of one controller.
#[derive(Clone, Debug)]
pub struct Passes {
    metrics: PassMetrics,
    controller: &'static str,
}

impl Passes {
    /// Run `pass`, started for `events` watch events, and count it with its time and outcome.
    pub async fn time<T, E>(&self, events: usize, pass: impl Future<Output = Result<T, E>>) -> Result<T, E> {
        let start = std::time::Instant::now();
        let out = pass.await;
        let m = &self.metrics;
        let controller = self.controller;
        m.duration.get_or_create(&Controller { controller }).observe(start.elapsed().as_secs_f64());
        m.events.get_or_create(&Controller { controller }).inc_by(events as u64);
        let result = if out.is_ok() { "success" } else { "error" };
        m.passes.get_or_create(&Outcome { controller, result }).inc();
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(m: &PassMetrics) -> String {
        let mut registry = Registry::default();
        m.register(&mut registry);
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &registry).unwrap();
        out
    }

    #[tokio::test]
    async fn passes_are_counted_by_controller_and_result_with_their_events_and_time() {
        let m = PassMetrics::default();
        let node = m.of("node");
        assert_eq!(node.time(3, async { Ok::<_, ()>(7) }).await, Ok(7));
        assert_eq!(node.time(2, async { Err::<(), _>("lost") }).await, Err("lost"));
        m.of("drain").time(0, async { Ok::<_, ()>(()) }).await.unwrap();
        let t = text(&m);
        for line in [
            "aloft_controller_passes_total{controller=\"node\",result=\"success\"} 1\n",
            "aloft_controller_passes_total{controller=\"node\",result=\"error\"} 1\n",
            "aloft_controller_passes_total{controller=\"drain\",result=\"success\"} 1\n",
            "aloft_controller_pass_events_total{controller=\"node\"} 5\n",
            "aloft_controller_pass_events_total{controller=\"drain\"} 0\n",
            "aloft_controller_pass_duration_seconds_count{controller=\"node\"} 2\n",
            "aloft_controller_pass_duration_seconds_count{controller=\"drain\"} 1\n",
        ] {
            assert!(t.contains(line), "missing {line:?} in:\n{t}");
        }
    }
}
