//! The node's workloads around a drained update: the units wanted by `aloft-workloads.target`.
//!
//! Without Kubernetes there are no pods to evict; what a node runs for its users is whatever
//! systemd units the admin hangs off `aloft-workloads.target` (`WantedBy=aloft-workloads.target`).
//! After the coordinator has drained the node (cordon, hooks) and before the first byte of the
//! new config is written, those units are stopped gracefully, each with systemd's own stop
//! logic (`ExecStop=`, `TimeoutStopSec=`), all within one overall timeout; after a rebootless
//! update they are started again by starting the target. After a reboot the target starts them
//! at boot like any other target.

use crate::host::{ServiceError, ServiceManager};
use std::time::Duration;

/// The target whose wanted units are the node's workloads.
pub const TARGET: &str = "aloft-workloads.target";

/// Why the workloads could not be stopped: the update does not go ahead.
#[derive(Debug, thiserror::Error)]
pub enum WorkloadError {
    #[error("cannot list the workloads of {TARGET}: {0}")]
    List(#[source] ServiceError),
    #[error("failed to stop workload {unit}: {source}")]
    Stop {
        unit: String,
        #[source]
        source: ServiceError,
    },
    #[error("workloads did not stop within {} seconds (still stopping: {})", timeout.as_secs(), units.join(", "))]
    Timeout { timeout: Duration, units: Vec<String> },
    #[error("failed to start the workloads again ({TARGET}): {0}")]
    Start(#[source] ServiceError),
}

/// Stops every unit `aloft-workloads.target` wants, concurrently, and returns their names. A
/// node without the target (systemd reports no wants) has nothing to stop.
pub async fn stop(services: &dyn ServiceManager, timeout: Duration) -> Result<Vec<String>, WorkloadError> {
    let units = services.wants(TARGET).await.map_err(WorkloadError::List)?;
    if units.is_empty() {
        return Ok(units);
    }
    tracing::info!(units = ?units, timeout_s = timeout.as_secs(), "stopping workloads");
    let pending = std::sync::Mutex::new(units.clone());
    let stops = units.iter().map(|u| {
        let pending = &pending;
        async move {
            services.stop_unit(u).await.map_err(|source| WorkloadError::Stop { unit: u.clone(), source })?;
            if let Ok(mut p) = pending.lock() {
                p.retain(|x| x != u);
            }
            Ok::<(), WorkloadError>(())
        }
    });
    match tokio::time::timeout(timeout, futures::future::try_join_all(stops)).await {
        Ok(result) => result.map(|_| units),
        Err(_) => {
            let units = pending.lock().map(|p| p.clone()).unwrap_or_default();
            Err(WorkloadError::Timeout { timeout, units })
        }
    }
}

/// Starts the workloads again (the target starts what it wants).
pub async fn start(services: &dyn ServiceManager) -> Result<(), WorkloadError> {
    tracing::info!("starting workloads");
    services.start_unit(TARGET).await.map_err(WorkloadError::Start)
}
