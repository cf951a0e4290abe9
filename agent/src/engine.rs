//! The daemon's view of the apply engine, the disruption policy and the service manager: one
//! small surface so the state machine in [`crate::daemon`] reads as a sequence of steps.

use crate::apply::{self, Recovery};
use crate::disruption::{self, Plan};
use crate::host::{Root, ServiceManager};
use crate::journal::Journal;
use crate::ondisk;
use crate::validate::RefusalKind;
use aloft_api::{MachineConfig, MachineConfigSpec};
use anyhow::{Context, Result};
use std::sync::Arc;

/// Why a config is not applied; nothing on the node changed.
#[derive(Debug, Clone)]
pub struct Refused {
    pub message: String,
    /// Unreconcilable (never retried for this config) rather than Degraded (retried).
    pub unreconcilable: bool,
}

/// The spec with its Ignition config normalised to 3.5 (2.2 converted), as the engine and the
/// change set compare it.
pub fn normalize(spec: &MachineConfigSpec) -> Result<MachineConfigSpec, aloft_api::ignition::IgnitionError> {
    Ok(MachineConfigSpec { config: aloft_api::ignition::parse_config(&spec.config)?, ..spec.clone() })
}

/// Everything checked before the node is drained: reconcilability, hostile input, host paths.
/// The result lets [`apply_checked`] skip validating again when nothing was waited for.
pub fn validate(root: &Root, old: &MachineConfigSpec, new: &MachineConfigSpec) -> Result<apply::Checked, Refused> {
    apply::check(root, old, new).map_err(|r| Refused {
        message: format!("{}: {}", r.field, r.message),
        unreconcilable: r.kind == RefusalKind::Unreconcilable,
    })
}

/// Write files, units and SSH keys through the journal.
pub async fn apply(
    root: &Root,
    old: &MachineConfigSpec,
    new: &MachineConfigSpec,
    services: &dyn ServiceManager,
) -> Result<()> {
    let journal = Journal::new(root);
    let report = apply::apply(root, &journal, old, new, services).await?;
    log_report(&report);
    Ok(())
}

/// [`apply`] of what [`validate`] returned, without validating again: only when the host had no
/// time to change since (no drain in between).
pub async fn apply_checked(root: &Root, checked: &apply::Checked, services: &dyn ServiceManager) -> Result<()> {
    let journal = Journal::new(root);
    let report = apply::apply_checked(root, &journal, checked, services).await?;
    log_report(&report);
    Ok(())
}

fn log_report(report: &apply::ApplyReport) {
    for w in &report.warnings {
        tracing::warn!(warning = %w, "apply");
    }
    tracing::info!(files = report.changed_paths().len(), units = report.units_changed.len(), "applied");
}

/// Run the rebootless actions of `plan`. The error names the action and systemd's answer; no
/// more is needed in a Degraded reason.
pub async fn act(plan: &Plan, services: &dyn ServiceManager) -> Result<(), disruption::ExecuteError> {
    disruption::execute(plan, services).await
}

/// MCO's on-disk validation of `mc`, as its Degraded reason.
pub fn verify(root: &Root, mc: &MachineConfig) -> Result<(), String> {
    ondisk::verify(root, &mc.spec).map_err(|d| d.reason(&mc.metadata.name))
}

/// The on-disk files, units and drop-ins checked against `mc` (not the OS commit): the first
/// difference, with the path it is about.
pub fn verify_files(root: &Root, mc: &MachineConfig) -> Result<(), ondisk::Drift> {
    ondisk::verify(root, &mc.spec)
}

/// Whether the apply journal says the disk holds `current` and nothing else: no record (the last
/// update was reported Done), a committed apply of `current`, or an apply of another config
/// rolled back to `current`. An unfinished record (an apply a crash interrupted), a committed
/// apply of another config (its files written, its OS update not finished, the current config
/// not saved yet) or an unreadable record: the disk may hold another config's files on purpose,
/// so it is not judged against `current`.
pub fn journal_settled_on(root: &Root, current: &MachineConfigSpec) -> bool {
    use crate::journal::Phase as J;
    match Journal::new(root).load() {
        Ok(None) => true,
        Ok(Some(r)) => match r.phase {
            J::Committed => r.new == *current,
            J::RolledBack { .. } => r.old == *current,
            J::Forward | J::RollingBack { .. } => false,
        },
        Err(e) => {
            tracing::warn!(error = %e, "cannot read the apply journal; the disk is not validated before this update");
            false
        }
    }
}

/// The config whose files the journal's last apply wrote, when that apply committed (normalized,
/// as every apply's specs are). Compared with the current config by `Agent::finish_undo`: another
/// config's means its files are on disk with the config before still current (an OS update whose
/// deployment was never staged: a restart between the two, or an undo that could not start), to
/// be written back as an undo's are (`crate::undo` says it for an undo in flight; the journal says
/// this until the next apply starts); the current config's means the disk holds it, whatever an
/// older undo record says. An unreadable journal is [`apply_unfinished`]'s to report.
pub fn last_committed(root: &Root) -> Option<MachineConfigSpec> {
    match Journal::new(root).load() {
        Ok(Some(r)) if matches!(r.phase, crate::journal::Phase::Committed) => Some(r.new),
        _ => None,
    }
}

/// Removes the journal record of a finished apply (committed or rolled back), durably; a
/// record of an unfinished apply stays for [`recover`].
pub fn forget_finished_apply(root: &Root) -> Result<()> {
    Journal::new(root).clear_finished().context("clearing the journal of the last apply")?;
    Ok(())
}

/// Whether the journal holds an apply that is neither committed nor rolled back (a rollback
/// failed): [`recover`] must finish it before anything else runs. Unreadable counts as unfinished.
pub fn apply_unfinished(root: &Root) -> bool {
    match Journal::new(root).phase() {
        Ok(None) => false,
        Ok(Some(phase)) => !phase.is_terminal(),
        Err(_) => true,
    }
}

/// Finish or roll back an apply a crash interrupted.
pub async fn recover(root: &Root, services: &dyn ServiceManager) -> Result<Recovery> {
    let journal = Journal::new(root);
    let r = apply::recover(root, &journal, services).await?;
    match &r {
        Recovery::Nothing => {}
        Recovery::Applied { .. } => tracing::info!("recovered an interrupted apply: the node is on the new config"),
        Recovery::RolledBack { reason, .. } => {
            tracing::warn!(%reason, "recovered an interrupted apply by rolling back")
        }
    }
    Ok(r)
}

/// systemd and logind: on the system bus, or on `address` (tests, sandboxed hosts).
pub async fn connect_services(address: Option<&str>) -> Result<Arc<dyn ServiceManager>> {
    connect_services_for(address, crate::systemd::DEFAULT_JOB_TIMEOUT).await
}

/// [`connect_services`], waiting up to `job_timeout` for each unit job: a workload's stop may
/// be given longer than systemd's default job wait (`--workload-stop-timeout-seconds` above
/// 300 cut every graceful stop short at 300 s).
pub async fn connect_services_for(
    address: Option<&str>,
    job_timeout: std::time::Duration,
) -> Result<Arc<dyn ServiceManager>> {
    let s = match address {
        Some(a) => crate::systemd::SystemdDbus::connect(a).await,
        None => crate::systemd::SystemdDbus::system().await,
    }
    .context("connecting to systemd over D-Bus")?;
    Ok(Arc::new(s.with_job_timeout(job_timeout.max(crate::systemd::DEFAULT_JOB_TIMEOUT))))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::journal::{Phase, Record, RECORD_VERSION};

    fn spec(url: &str) -> MachineConfigSpec {
        MachineConfigSpec { os_image_url: url.into(), ..Default::default() }
    }

    /// The journal tells a disk that must hold the current config from one an update or its
    /// recovery left with another config's files on purpose.
    #[test]
    fn the_journal_says_when_the_disk_holds_the_current_config() {
        let dir = tempfile::tempdir().unwrap();
        let root = Root::new(dir.path());
        let (cur, other) = (spec("a"), spec("b"));
        assert!(journal_settled_on(&root, &cur), "no record: the last update was reported Done");
        let journal = Journal::new(&root);
        let record = |phase, old: &MachineConfigSpec, new: &MachineConfigSpec| Record {
            version: RECORD_VERSION,
            id: "0123456789abcdef".into(),
            phase,
            old: old.clone(),
            new: new.clone(),
            forward: Vec::new(),
            rollback: Vec::new(),
            report: Default::default(),
        };
        let cases = [
            (record(Phase::Committed, &other, &cur), true, "committed apply of the current config"),
            (record(Phase::Committed, &cur, &other), false, "another config's files written, not saved yet"),
            (record(Phase::RolledBack { reason: "x".into() }, &cur, &other), true, "rolled back to it"),
            (record(Phase::Forward, &cur, &other), false, "an interrupted apply"),
            (record(Phase::RollingBack { reason: "x".into() }, &cur, &other), false, "an interrupted rollback"),
        ];
        for (r, settled, what) in cases {
            journal.save(&r).unwrap();
            assert_eq!(journal_settled_on(&root, &cur), settled, "{what}");
        }
        // The undo of `other` (an apply from it back to the current config) rolled back: the disk
        // holds `other`, not the current config.
        journal.save(&record(Phase::RolledBack { reason: "x".into() }, &other, &cur)).unwrap();
        assert!(!journal_settled_on(&root, &cur));
        std::fs::write(journal.dir().join("record.json"), "{nope").unwrap();
        assert!(!journal_settled_on(&root, &cur), "unreadable: not judged");
        crate::reclaim::release();
    }
}
