//! How long etcd takes to answer, as kube-apiserver reports it (`etcd_request_duration_seconds`),
//! and how long a write etcd answered then waits for the watch cache.
//!
//! Why: on etcd every write of the coordinator, and every agent's, is a round trip to etcd
//! followed by its event coming back through the watch; when a rollout slows down on etcd these
//! say which of the two it is waiting for (an etcd behind on its disk or CPU, or a cache behind
//! on its events), which the controllers' pass durations alone cannot.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use std::time::Instant;

/// Upper bounds, in seconds: a loopback etcd answers in a fraction of a millisecond, one
/// behind on its writes in seconds.
const BUCKETS: [f64; 15] =
    [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Operation {
    operation: &'static str,
}

/// The etcd store's series, kept for the process's life and registered into each scrape.
#[derive(Clone, Debug)]
pub struct EtcdMetrics {
    requests: Family<Operation, Histogram, fn() -> Histogram>,
    cache_wait: Histogram,
}

impl Default for EtcdMetrics {
    fn default() -> Self {
        EtcdMetrics {
            requests: Family::new_with_constructor(|| Histogram::new(BUCKETS)),
            cache_wait: Histogram::new(BUCKETS),
        }
    }
}

impl EtcdMetrics {
    /// One request to etcd of `operation` (`txn`: a write, `get`, `list`, `tokens`: a batch of
    /// token lookups, `revision`), begun at `since`.
    pub(crate) fn request(&self, operation: &'static str, since: Instant) {
        self.requests.get_or_create(&Operation { operation }).observe(since.elapsed().as_secs_f64());
    }

    /// A write etcd had answered at `since`, applied by the watch cache now.
    pub(crate) fn cache_applied(&self, since: Instant) {
        self.cache_wait.observe(since.elapsed().as_secs_f64());
    }

    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "etcd_request_duration_seconds",
            "How long etcd took to answer the coordinator's requests, by operation",
            self.requests.clone(),
        );
        registry.register(
            "aloft_watch_cache_write_wait_seconds",
            "How long a write etcd had answered then waited for the watch cache to apply it \
             (a write is answered once every read sees it)",
            self.cache_wait.clone(),
        );
    }
}
