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

/// What the record of stopped workloads says: the units that were running when they were
/// stopped, the ones whose start again is the update's to judge.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct Record {
    running: Vec<String>,
}

/// The units the record says were running at the stop; `None` without a readable record (one
/// written by an older agent is empty): every wanted unit is judged then.
fn running_at_stop(root: &Root) -> Option<Vec<String>> {
    let text = std::fs::read(marker(root)).ok()?;
    serde_json::from_slice::<Record>(&text).ok().map(|r| r.running)
}

/// [`stop`], recorded first (durably) so that whatever comes next starts them again, with the
/// units that were running: a workload failed (or stopped by its admin) before the update is
/// not the update's to bring back, and failed a sound update when it was judged.
pub async fn stop_marked(
    root: &Root,
    services: &dyn ServiceManager,
    timeout: Duration,
) -> Result<Vec<String>, WorkloadError> {
    let path = marker(root);
    // A record standing from an earlier stop (a retried update: the workloads are still
    // stopped) keeps its units: read now, they are inactive, and would no longer be judged.
    let mut running = running_at_stop(root).unwrap_or_default();
    for u in services.wants(TARGET).await.map_err(WorkloadError::List)? {
        if running.contains(&u) {
            continue;
        }
        // A state that cannot be read is judged at the start, as one that was running.
        let state = services.active_state(&u).await.unwrap_or_else(|_| "unknown".into());
        if !matches!(state.as_str(), "inactive" | "failed") {
            running.push(u);
        }
    }
    let mark = || -> std::io::Result<()> {
        let text = serde_json::to_vec(&Record { running }).map_err(std::io::Error::other)?;
        let mut f = std::fs::File::create(&path)?;
        std::io::Write::write_all(&mut f, &text)?;
        f.sync_all()
    };
    mark().map_err(|error| WorkloadError::Mark { path: path.clone(), error })?;
    stop(services, timeout).await
}

/// Starts the workloads again when the update drained the node (`drained`) or the agent stopped
/// them ([`stopped`]), judging the ones that were running at the stop; the record goes once
/// they started.
pub async fn start_after(root: &Root, services: &dyn ServiceManager, drained: bool) -> Result<(), WorkloadError> {
    if !drained && !stopped(root) {
        return Ok(());
    }
    start(services, running_at_stop(root).as_deref()).await?;
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
/// Only the units of `judged` (all, without it) are: the ones that were running before. A unit
/// whose state cannot be read is not judged.
pub async fn start(services: &dyn ServiceManager, judged: Option<&[String]>) -> Result<(), WorkloadError> {
    let units = services.wants(TARGET).await.map_err(WorkloadError::Start)?;
    if units.is_empty() {
        return Ok(());
    }
    tracing::info!("starting workloads");
    services.start_unit(TARGET).await.map_err(WorkloadError::Start)?;
    let mut failed = Vec::new();
    for u in units.into_iter().filter(|u| judged.is_none_or(|j| j.contains(u))) {
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

    /// A systemd whose `aloft-workloads.target` wants `wants`; records starts and stops. The
    /// units in `failing` are `failed` once the target was started, those in `broken` always.
    struct Systemd {
        wants: Vec<String>,
        started: std::sync::Mutex<Vec<String>>,
        failing: Vec<String>,
        broken: Vec<String>,
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
            Ok(())
        }
        async fn wants(&self, _: &str) -> Result<Vec<String>, ServiceError> {
            Ok(self.wants.clone())
        }
        async fn reboot(&self, _: &str) -> Result<(), ServiceError> {
            unreachable!()
        }
        async fn active_state(&self, unit: &str) -> Result<String, ServiceError> {
            let started = !self.started.lock().unwrap().is_empty();
            let failed = self.broken.iter().any(|f| f == unit) || (started && self.failing.iter().any(|f| f == unit));
            Ok(if failed { "failed" } else { "active" }.to_string())
        }
    }

    #[tokio::test]
    async fn a_node_without_workloads_starts_nothing() {
        let none = Systemd { wants: vec![], started: Default::default(), failing: vec![], broken: vec![] };
        start(&none, None).await.expect("no target: nothing to start, no error");
        assert!(none.started.lock().unwrap().is_empty());
        let some =
            Systemd { wants: vec!["db.service".into()], started: Default::default(), failing: vec![], broken: vec![] };
        start(&some, None).await.unwrap();
        assert_eq!(*some.started.lock().unwrap(), vec![TARGET.to_string()]);
    }

    /// A wanted unit that fails to start fails the start, named, though the target's own job
    /// succeeded.
    #[tokio::test]
    async fn a_workload_that_does_not_come_back_is_a_failure() {
        let wants = vec!["db.service".into(), "web.service".into()];
        let sd = Systemd { wants, started: Default::default(), failing: vec!["web.service".into()], broken: vec![] };
        let e = start(&sd, None).await.unwrap_err();
        assert_eq!(e.to_string(), "workloads failed to start again: web.service");
    }

    /// A workload failed before the update is not the update's: the record of the stop names
    /// the running ones, and only those are judged at the start; one that was running and does
    /// not come back still fails it. A record from an older agent (empty) judges every one.
    #[tokio::test]
    async fn only_the_workloads_that_were_running_are_judged() {
        let dir = tempfile::tempdir().unwrap();
        let root = Root::new(dir.path());
        std::fs::create_dir_all(root.state_dir()).unwrap();
        let wants = vec!["batch.service".into(), "db.service".into()];
        let sd = Systemd { wants, started: Default::default(), failing: vec![], broken: vec!["batch.service".into()] };
        stop_marked(&root, &sd, Duration::from_secs(5)).await.unwrap();
        assert_eq!(running_at_stop(&root), Some(vec!["db.service".to_string()]));
        start_after(&root, &sd, true).await.expect("batch.service was failed before: not judged");
        assert!(!stopped(&root), "the record goes once they started");

        let wants = vec!["batch.service".into(), "db.service".into()];
        let sd = Systemd { wants, started: Default::default(), failing: vec!["db.service".into()], broken: vec![] };
        stop_marked(&root, &sd, Duration::from_secs(5)).await.unwrap();
        // A retried update stops them again while they are stopped (inactive): the record keeps
        // what was running at the first stop.
        let stopped_now = Systemd {
            wants: vec!["batch.service".into(), "db.service".into()],
            started: Default::default(),
            failing: vec![],
            broken: vec!["batch.service".into(), "db.service".into()],
        };
        stop_marked(&root, &stopped_now, Duration::from_secs(5)).await.unwrap();
        assert_eq!(running_at_stop(&root), Some(vec!["batch.service".to_string(), "db.service".to_string()]));
        let e = start_after(&root, &sd, true).await.unwrap_err();
        assert_eq!(e.to_string(), "workloads failed to start again: db.service");

        let wants = vec!["batch.service".into()];
        let sd = Systemd { wants, started: Default::default(), failing: vec![], broken: vec!["batch.service".into()] };
        std::fs::write(marker(&root), "").unwrap();
        let e = start_after(&root, &sd, false).await.unwrap_err();
        assert_eq!(e.to_string(), "workloads failed to start again: batch.service");
    }
}
