//! The coordinator's Prometheus metrics (`GET /metrics`, with an admin or viewer token).
//!
//! Why: a fleet operator alerts on what `aloftctl get mcp` shows (degraded machines, a pool that
//! stays Updating, a circuit breaker that opened) and on the coordinator's own trouble (a
//! controller that keeps being started again), without polling the API and parsing objects.
//! Pool series are read from the pools' stored status at scrape time, so they are exactly what
//! the node controller last wrote (MCO's counts and conditions), never a second computation.
//!
//! Series:
//! - `aloft_pool_machine_count{pool}`, and `..._ready_`, `..._updated_`, `..._unavailable_`,
//!   `..._degraded_machine_count{pool}`: the pool's status counts;
//! - `aloft_pool_condition{pool,condition}`: 1 while the condition is True, else 0;
//! - `aloft_pool_paused{pool}`: 1 when `spec.paused` is set;
//! - `aloft_fleetlock_holders{group}`, `aloft_fleetlock_max_holders{group}` and
//!   `aloft_fleetlock_oldest_hold_seconds{group}`: each FleetLock group's slots held, its slots,
//!   and how long its longest holder has held one (0 with none): a host that never came back
//!   keeps its slot, and this is what to alert on ([`crate::fleetlock`]);
//! - `aloft_cluster_version_available_updates{channel,upstream}`,
//!   `aloft_cluster_version_condition{condition}` (1 while True) and
//!   `aloft_cluster_version_progressing_seconds{version}` (how long the release rolling out has
//!   been, absent when none is): the ClusterVersion's, as the CVO exposes its own; what to alert
//!   on for an update that does not finish ([`crate::controllers::cluster_version`]);
//! - `aloft_controller_up{controller}`: 1 while the loop runs, 0 while it waits to start again;
//! - `aloft_controller_restarts_total{controller}`: times it stopped and was started again;
//! - `aloft_controller_passes_total{controller,result}`,
//!   `aloft_controller_pass_duration_seconds{controller}` and
//!   `aloft_controller_pass_events_total{controller}`: each controller's reconcile passes
//!   ([`crate::controllers::passes`]);
//! - `aloft_store_revision`: the store's newest revision (a write counter);
//! - on etcd, `etcd_request_duration_seconds{operation}` (kube-apiserver's name) and
//!   `aloft_watch_cache_write_wait_seconds`: how long etcd took to answer, and how long a write
//!   it answered then waited for the watch cache ([`crate::store::etcd`]);
//! - `aloft_build_info{version,git_commit,git_tree_state,build_date}`: 1, which build serves
//!   (as `kubernetes_build_info`), so a half-done upgrade of the coordinators shows;
//! - `apiserver_request_total{verb,group,version,resource,subresource,scope,code}`,
//!   `apiserver_request_duration_seconds{...}` and `apiserver_longrunning_requests{...}`: what the
//!   API answered, as Kubernetes' API server names it ([`crate::server::request_metrics`]);
//! - `process_cpu_seconds_total`, `process_resident_memory_bytes`, `process_virtual_memory_bytes`,
//!   `process_start_time_seconds`, `process_open_fds`, `process_max_fds`, and
//!   `aloft_allocator_bytes{kind}`: the process itself ([`crate::process_metrics`]).

use crate::health::{Health, LoopState};
use crate::process_metrics::AllocatorProbe;
use crate::resources::{CLUSTER_VERSION, FLEET_LOCK, MACHINE_CONFIG_POOL};
use crate::server::request_metrics::RequestMetrics;
use crate::store::{Store, StoreError};
use aloft_api::build::BuildInfo;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use serde_json::Value;

/// The status counts exported per pool, by the name of their status field.
const COUNTS: &[(&str, &str, &str)] = &[
    ("aloft_pool_machine_count", "machineCount", "Nodes in the pool"),
    ("aloft_pool_ready_machine_count", "readyMachineCount", "Nodes on the pool's config and Ready"),
    ("aloft_pool_updated_machine_count", "updatedMachineCount", "Nodes on the pool's config"),
    (
        "aloft_pool_unavailable_machine_count",
        "unavailableMachineCount",
        "Nodes unavailable as MCO counts them: not Ready, cordoned, updating, or with no config yet",
    ),
    ("aloft_pool_degraded_machine_count", "degradedMachineCount", "Nodes that failed to update"),
];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PoolLabels {
    pool: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct UpstreamLabels {
    channel: String,
    upstream: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CvConditionLabels {
    condition: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct VersionLabels {
    version: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct GroupLabels {
    group: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ConditionLabels {
    pool: String,
    condition: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ControllerLabels {
    controller: String,
}

/// Errors of a scrape. Each message quotes its cause, which is not also the error's source (a
/// log line with the chain would say it twice).
#[derive(Debug, thiserror::Error)]
pub enum MetricsError {
    #[error("reading the store: {0}")]
    Store(StoreError),
    #[error("encoding metrics: {0}")]
    Encode(std::fmt::Error),
}

impl From<StoreError> for MetricsError {
    fn from(e: StoreError) -> Self {
        MetricsError::Store(e)
    }
}

impl From<std::fmt::Error> for MetricsError {
    fn from(e: std::fmt::Error) -> Self {
        MetricsError::Encode(e)
    }
}

/// The exposition text: a fresh registry per scrape, filled from the store and `health`.
pub async fn encode(
    store: &dyn Store,
    health: &Health,
    (requests, inflight): (&RequestMetrics, &crate::server::inflight::Inflight),
    allocator: Option<AllocatorProbe>,
    build: &BuildInfo,
) -> Result<String, MetricsError> {
    let pools = store.list(&MACHINE_CONFIG_POOL.store_key(), None).await?;
    let mut registry = Registry::default();
    for (metric, field, help) in COUNTS {
        let family = Family::<PoolLabels, Gauge>::default();
        for pool in &pools.items {
            if let Some(n) = pool["status"][field].as_i64() {
                family.get_or_create(&PoolLabels { pool: name_of(pool) }).set(n);
            }
        }
        registry.register(*metric, *help, family);
    }
    let conditions = Family::<ConditionLabels, Gauge>::default();
    let paused = Family::<PoolLabels, Gauge>::default();
    for pool in &pools.items {
        for c in pool["status"]["conditions"].as_array().into_iter().flatten() {
            let Some(condition) = c["type"].as_str() else { continue };
            let labels = ConditionLabels { pool: name_of(pool), condition: condition.to_string() };
            conditions.get_or_create(&labels).set(i64::from(c["status"] == "True"));
        }
        paused.get_or_create(&PoolLabels { pool: name_of(pool) }).set(i64::from(pool["spec"]["paused"] == true));
    }
    registry.register("aloft_pool_condition", "A pool's status condition: 1 while True", conditions);
    registry.register("aloft_pool_paused", "1 while the pool's spec.paused is set", paused);
    register_fleet_locks(&mut registry, store, chrono::Utc::now()).await?;
    register_cluster_version(&mut registry, store, chrono::Utc::now()).await?;

    let up = Family::<ControllerLabels, Gauge>::default();
    let restarts = Family::<ControllerLabels, Counter>::default();
    for (name, l) in health.loops() {
        let labels = ControllerLabels { controller: name.to_string() };
        up.get_or_create(&labels).set(i64::from(l.state == LoopState::Running));
        restarts.get_or_create(&labels).inc_by(l.restarts);
    }
    registry.register("aloft_controller_up", "1 while the controller runs, 0 while it waits to start again", up);
    registry.register("aloft_controller_restarts", "Times the controller stopped and was started again", restarts);
    health.passes().register(&mut registry);

    let revision = Gauge::<i64>::default();
    revision.set(i64::try_from(pools.revision).unwrap_or(i64::MAX));
    registry.register("aloft_store_revision", "The store's newest revision", revision);
    requests.register(&mut registry);
    inflight.register(&mut registry);
    store.register_metrics(&mut registry);
    crate::process_metrics::register(&mut registry, allocator);
    let info = Family::<[(&'static str, &'static str); 4], Gauge>::default();
    info.get_or_create(&build.metric_labels()).set(1);
    registry.register("aloft_build_info", "Which build of aloft serves: 1, with the build's version and commit", info);

    let mut out = String::new();
    prometheus_client::encoding::text::encode(&mut out, &registry)?;
    Ok(out)
}

/// The FleetLock groups' series, from their stored objects.
async fn register_fleet_locks(
    registry: &mut Registry,
    store: &dyn Store,
    now: chrono::DateTime<chrono::Utc>,
) -> Result<(), MetricsError> {
    let locks = store.list(&FLEET_LOCK.store_key(), None).await?;
    let (held, max, oldest) = (
        Family::<GroupLabels, Gauge>::default(),
        Family::<GroupLabels, Gauge>::default(),
        Family::<GroupLabels, Gauge>::default(),
    );
    for lock in &locks.items {
        let labels = GroupLabels { group: name_of(lock) };
        let holders: &[Value] = lock["status"]["holders"].as_array().map(Vec::as_slice).unwrap_or_default();
        held.get_or_create(&labels).set(holders.len() as i64);
        max.get_or_create(&labels)
            .set(lock["spec"]["maxHolders"].as_i64().unwrap_or(aloft_api::fleetlock::DEFAULT_MAX_HOLDERS));
        let longest = holders
            .iter()
            .filter_map(|h| chrono::DateTime::parse_from_rfc3339(h["since"].as_str()?).ok())
            .map(|since| (now - since.with_timezone(&chrono::Utc)).num_seconds().max(0))
            .max()
            .unwrap_or(0);
        oldest.get_or_create(&labels).set(longest);
    }
    registry.register("aloft_fleetlock_holders", "Hosts of the FleetLock group holding a slot", held);
    registry.register("aloft_fleetlock_max_holders", "Slots of the FleetLock group (spec.maxHolders)", max);
    registry.register(
        "aloft_fleetlock_oldest_hold_seconds",
        "How long the group's longest holder has held its slot (0 with none)",
        oldest,
    );
    Ok(())
}

/// The ClusterVersion's series, from the stored object (none without one).
async fn register_cluster_version(
    registry: &mut Registry,
    store: &dyn Store,
    now: chrono::DateTime<chrono::Utc>,
) -> Result<(), MetricsError> {
    let key = crate::store::Key::cluster(&CLUSTER_VERSION.store_key(), aloft_api::clusterversion::NAME);
    let (available, conditions, progressing) = (
        Family::<UpstreamLabels, Gauge>::default(),
        Family::<CvConditionLabels, Gauge>::default(),
        Family::<VersionLabels, Gauge>::default(),
    );
    if let Some(cv) = store.get(&key).await? {
        let (spec, status) = (&cv.object["spec"], &cv.object["status"]);
        let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
        let labels = UpstreamLabels { channel: text(&spec["channel"]), upstream: text(&spec["upstream"]) };
        available.get_or_create(&labels).set(status["availableUpdates"].as_array().map(Vec::len).unwrap_or(0) as i64);
        for c in status["conditions"].as_array().into_iter().flatten() {
            let Some(condition) = c["type"].as_str() else { continue };
            conditions
                .get_or_create(&CvConditionLabels { condition: condition.to_string() })
                .set(i64::from(c["status"] == "True"));
        }
        let first = &status["history"][0];
        if first["state"] == aloft_api::clusterversion::PARTIAL {
            if let Ok(started) = chrono::DateTime::parse_from_rfc3339(first["startedTime"].as_str().unwrap_or("")) {
                let seconds = (now - started.with_timezone(&chrono::Utc)).num_seconds().max(0);
                progressing.get_or_create(&VersionLabels { version: text(&first["version"]) }).set(seconds);
            }
        }
    }
    registry.register(
        "aloft_cluster_version_available_updates",
        "Releases the update graph recommends from the current one",
        available,
    );
    registry.register("aloft_cluster_version_condition", "A ClusterVersion condition: 1 while True", conditions);
    registry.register(
        "aloft_cluster_version_progressing_seconds",
        "How long the release rolling out has been (absent when none is)",
        progressing,
    );
    Ok(())
}

fn name_of(obj: &Value) -> String {
    obj["metadata"]["name"].as_str().unwrap_or_default().to_string()
}
