//! The node's workloads around a drained update: the units wanted by `aloft-workloads.target`.
//!
//! Without Kubernetes there are no pods to evict; what a node runs for its users is whatever
//! systemd units the admin hangs off `aloft-workloads.target` (`WantedBy=aloft-workloads.target`).
//! After the coordinator has drained the node (cordon, hooks) and before the first byte of the
//! new config is written, those units are stopped gracefully, each with systemd's own stop
//! logic (`ExecStop=`, `TimeoutStopSec=`), all within one overall timeout; after a rebootless
//! update they are started again by starting the target. After a reboot the target starts them
//! at boot like any other target.

use crate::host::{Root, ServiceError, ServiceManager};
use std::path::PathBuf;
use std::time::Duration;

/// The target whose wanted units are the node's workloads.
pub const TARGET: &str = "aloft-workloads.target";

/// Why the workloads could not be stopped: the update does not go ahead.
#[derive(Debug, thiserror::Error)]
pub enum WorkloadError {
    #[error("cannot list the workloads of {TARGET}: {0}")]
    List(ServiceError),
    /// The service error names the stop and the unit.
    #[error("failed to stop a workload: {error}")]
    Stop { unit: String, error: ServiceError },
    #[error("workloads did not stop within {} seconds (still stopping: {})", timeout.as_secs(), units.join(", "))]
    Timeout { timeout: Duration, units: Vec<String> },
    /// The service error names the start and the unit.
    #[error("failed to start the workloads again: {0}")]
    Start(ServiceError),
    #[error("workloads failed to start again: {}", units.join(", "))]
    Failed { units: Vec<String> },
    #[error("cannot record that the workloads are stopped ({}): {error}", path.display())]
    Mark { path: PathBuf, error: std::io::Error },
}

/// Says the agent stopped the workloads and has not started them again. The Node's drain request
/// could not say it: the coordinator takes it back when it picks the node for another config (a
/// revert, a fix), and an update to a config that needs no drain does not ask; the workloads of a
/// node whose drained update failed then stayed stopped on a node reported Done and uncordoned.
fn marker(root: &Root) -> PathBuf {
    root.state_dir().join("workloads-stopped")
}

/// Whether the agent stopped the workloads and has not started them again.
pub fn stopped(root: &Root) -> bool {
    marker(root).exists()
}

/// [`stop`], recorded first (durably) so that whatever comes next starts them again.
pub async fn stop_marked(
    root: &Root,
    services: &dyn ServiceManager,
    timeout: Duration,
) -> Result<Vec<String>, WorkloadError> {
    let path = marker(root);
    let mark = || -> std::io::Result<()> {
        let f = std::fs::File::create(&path)?;
        f.sync_all()
    };
    mark().map_err(|error| WorkloadError::Mark { path: path.clone(), error })?;
    stop(services, timeout).await
}

/// Starts the workloads again when the update drained the node (`drained`) or the agent stopped
/// them ([`stopped`]); the record goes once they started.
pub async fn start_after(root: &Root, services: &dyn ServiceManager, drained: bool) -> Result<(), WorkloadError> {
    if !drained && !stopped(root) {
        return Ok(());
    }
    start(services).await?;
    match std::fs::remove_file(marker(root)) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            tracing::warn!(error = %e, "cannot remove the record of stopped workloads; they are started again next time too")
        }
        _ => {}
    }
    Ok(())
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
            services.stop_unit(u).await.map_err(|error| WorkloadError::Stop { unit: u.clone(), error })?;
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

/// Starts the workloads again (the target starts what it wants). A node whose target wants
/// nothing (or that has no such target: systemd reports no wants for an unknown unit) has
/// nothing to start; starting an unknown target would fail with NoSuchUnit and leave the node
/// Degraded after every drained update (seen on the VMs, whose image has no workloads).
///
/// The target's start job succeeds whatever its wanted units do (`Wants=`; a target waits for
/// them, as it is ordered after what it wants), so each unit's state is read after it: a
/// workload that failed to come back is a failed update, not a node reported Done without it.
/// A unit whose state cannot be read is not judged.
pub async fn start(services: &dyn ServiceManager) -> Result<(), WorkloadError> {
    let units = services.wants(TARGET).await.map_err(WorkloadError::Start)?;
    if units.is_empty() {
        return Ok(());
    }
    tracing::info!("starting workloads");
    services.start_unit(TARGET).await.map_err(WorkloadError::Start)?;
    let mut failed = Vec::new();
    for u in units {
        if services.active_state(&u).await.is_ok_and(|s| s == "failed") {
            failed.push(u);
        }
    }
    if failed.is_empty() {
        Ok(())
    } else {
        Err(WorkloadError::Failed { units: failed })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use async_trait::async_trait;

    /// A systemd whose `aloft-workloads.target` wants `wants`; records starts. The units in
    /// `failing` are `failed` once the target was started.
    struct Systemd {
        wants: Vec<String>,
        started: std::sync::Mutex<Vec<String>>,
        failing: Vec<String>,
    }

    #[async_trait]
    impl ServiceManager for Systemd {
        async fn daemon_reload(&self) -> Result<(), ServiceError> {
            unreachable!()
        }
        async fn enable_units(&self, _: &[String]) -> Result<(), ServiceError> {
            unreachable!()
        }
        async fn disable_units(&self, _: &[String]) -> Result<(), ServiceError> {
            unreachable!()
        }
        async fn mask_units(&self, _: &[String]) -> Result<(), ServiceError> {
            unreachable!()
        }
        async fn unmask_units(&self, _: &[String]) -> Result<(), ServiceError> {
            unreachable!()
        }
        async fn preset_units(&self, _: &[String]) -> Result<(), ServiceError> {
            unreachable!()
        }
        async fn reload_unit(&self, _: &str) -> Result<(), ServiceError> {
            unreachable!()
        }
        async fn restart_unit(&self, _: &str) -> Result<(), ServiceError> {
            unreachable!()
        }
        async fn start_unit(&self, unit: &str) -> Result<(), ServiceError> {
            if self.wants.is_empty() {
                return Err(ServiceError::Call {
                    operation: format!("StartUnit({unit})"),
                    message: format!("org.freedesktop.systemd1.NoSuchUnit: Unit {unit} not found."),
                });
            }
            self.started.lock().unwrap().push(unit.to_string());
            Ok(())
        }
        async fn stop_unit(&self, _: &str) -> Result<(), ServiceError> {
            unreachable!()
        }
        async fn wants(&self, _: &str) -> Result<Vec<String>, ServiceError> {
            Ok(self.wants.clone())
        }
        async fn reboot(&self, _: &str) -> Result<(), ServiceError> {
            unreachable!()
        }
        async fn active_state(&self, unit: &str) -> Result<String, ServiceError> {
            let started = !self.started.lock().unwrap().is_empty();
            Ok(if started && self.failing.iter().any(|f| f == unit) { "failed" } else { "active" }.to_string())
        }
    }

    #[tokio::test]
    async fn a_node_without_workloads_starts_nothing() {
        let none = Systemd { wants: vec![], started: Default::default(), failing: vec![] };
        start(&none).await.expect("no target: nothing to start, no error");
        assert!(none.started.lock().unwrap().is_empty());
        let some = Systemd { wants: vec!["db.service".into()], started: Default::default(), failing: vec![] };
        start(&some).await.unwrap();
        assert_eq!(*some.started.lock().unwrap(), vec![TARGET.to_string()]);
    }

    /// A wanted unit that fails to start fails the start, named, though the target's own job
    /// succeeded.
    #[tokio::test]
    async fn a_workload_that_does_not_come_back_is_a_failure() {
        let wants = vec!["db.service".into(), "web.service".into()];
        let sd = Systemd { wants, started: Default::default(), failing: vec!["web.service".into()] };
        let e = start(&sd).await.unwrap_err();
        assert_eq!(e.to_string(), "workloads failed to start again: web.service");
    }
}
