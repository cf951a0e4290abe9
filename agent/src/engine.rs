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

/// Run the rebootless actions of `plan`.
pub async fn act(plan: &Plan, services: &dyn ServiceManager) -> Result<()> {
    disruption::execute(plan, services).await.context("running the node disruption actions")
}

/// MCO's on-disk validation of `mc`, as its Degraded reason.
pub fn verify(root: &Root, mc: &MachineConfig) -> Result<(), String> {
    ondisk::verify(root, &mc.spec).map_err(|d| d.reason(&mc.metadata.name))
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
    let s = match address {
        Some(a) => crate::systemd::SystemdDbus::connect(a).await,
        None => crate::systemd::SystemdDbus::system().await,
    }
    .context("connecting to systemd over D-Bus")?;
    Ok(Arc::new(s))
}
