//! The OS steps of the daemon's update: check and download the OS commit before the node is
//! drained, stage it after files and units are written, reboot into it, then verify it and run
//! the health checks — rolling back to the previous deployment when they fail.
//!
//! Kept apart from `daemon.rs` so the file-and-unit flow reads as before; every method here is
//! a step of the same state machine (it persists its phase through [`Agent::enter`]).

use super::Agent;
use crate::engine::Refused;
use crate::host::Root;
use crate::os::client::HelperClient;
use crate::os::denylist::{self, Denylist};
use crate::os::health::HealthChecks;
use crate::os::rolled_back;
use crate::os::{kargs, prestage, DeploymentInfo, OsError, OsHandle, OsStatus, StageRequest};
use crate::state::{self, DeploymentId, Phase, Staged};
use aloft_api::os::{BootCount, BootCounting};
use aloft_api::osimage;
use aloft_api::{MachineConfig, MachineConfigSpec};
use anyhow::Result;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// How often an update's download shows its progress in the status (a status read of the
/// helper, which runs beside the pull).
const DOWNLOAD_STATUS_EVERY: Duration = Duration::from_secs(3);

/// How the agent manages the OS (command-line flags `--os-helper`, `--health-*`).
#[derive(Debug, Clone)]
pub struct OsOptions {
    /// The OS helper's socket: `/run/aloft/os-helper.sock` on a node; a temp path in tests.
    /// Where the sysroot is, which remote and which trusted keyring are the helper's options.
    pub helper_socket: PathBuf,
    /// Units that must be active after an OS-update boot.
    pub required_units: Vec<String>,
    /// Per health check.
    pub health_timeout: Duration,
    /// How long a new OS deployment has, from the agent's start in its first boot, to let the
    /// agent reach the coordinator before it is rolled back; zero: no limit.
    pub reach_timeout: Duration,
    /// How often an update's download, once it has run this long, writes how far it is to the
    /// Node ([`aloft_api::annotations::PROGRESS`]); zero: never.
    pub progress_report: Duration,
    /// Boots the bootloader gives a new OS deployment before it falls back; zero: not armed.
    pub boot_attempts: u32,
}

/// The OS backend and the health checks, as the daemon uses them.
#[derive(Clone)]
pub struct OsAgent {
    pub handle: OsHandle,
    pub health: HealthChecks,
    /// [`OsOptions::reach_timeout`].
    pub reach_timeout: Duration,
    /// [`OsOptions::progress_report`].
    pub progress_report: Duration,
    /// [`OsOptions::boot_attempts`].
    pub boot_attempts: u32,
}

impl OsAgent {
    /// The OS helper's client for `opts`.
    pub fn new(root: &Root, opts: &OsOptions) -> Self {
        OsAgent {
            handle: OsHandle::new(Arc::new(HelperClient::new(&opts.helper_socket))),
            health: HealthChecks {
                root: root.clone(),
                required_units: opts.required_units.clone(),
                timeout: opts.health_timeout,
            },
            reach_timeout: opts.reach_timeout,
            progress_report: opts.progress_report,
            boot_attempts: opts.boot_attempts,
        }
    }
}

/// What the running boot is, once read from the helper (it cannot change until the next boot).
#[derive(Debug, Clone, Default)]
pub(super) struct BootedOs {
    /// `Some(None)`: read, and nothing is booted (a directory sysroot).
    deployment: Option<Option<Booted>>,
    cmdline: Option<String>,
}

/// The booted deployment: its commit and ostree's deploy serial, which tells two deployments of
/// one commit apart (an update that changes only kernel arguments deploys the running commit
/// again).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Booted {
    checksum: String,
    serial: i32,
}

/// Whether `booted` is the deployment that failed its health checks: commit `failed`, and the
/// deploy serial the denylist recorded when it has one (an entry an older agent saved has none:
/// the commit decides then, as it did).
fn runs_failed_deployment(failed: &str, failed_serial: Option<i32>, booted: &Booted) -> bool {
    !failed.is_empty() && booted.checksum == failed && failed_serial.is_none_or(|s| s == booted.serial)
}

/// Whether the boot after staging runs the deployment staged (commit `checksum`, the deploy
/// serial `staged` recorded), as ostree names it: `<commit>.<serial>`. Nothing to compare on a
/// host that boots nothing (a directory sysroot) or for a record without a serial (saved by an
/// older agent): the commit and argument checks decide then, as before.
fn came_up_on_staged(staged: Option<&Staged>, checksum: &str, booted: Option<&Booted>) -> Result<(), String> {
    let (Some(staged @ Staged { serial: Some(serial), .. }), Some(booted)) = (staged, booted) else {
        return Ok(());
    };
    if !not_the_staged(staged, checksum, booted) {
        return Ok(());
    }
    Err(format!(
        "the node booted OS deployment {}.{}, not {checksum}.{serial}, the one staged for this update",
        booted.checksum, booted.serial
    ))
}

/// Whether `to` is the deployment the update was staged from (the one known to carry its "old"
/// arguments from aloft); a record without it (an older agent's) takes any deployment, as before.
fn went_back_to_start(staged: &Staged, to: &DeploymentInfo) -> bool {
    staged.from.as_ref().is_none_or(|f| f.checksum == to.checksum && f.serial == to.deploy_serial)
}

/// Whether `booted` is known not to be the deployment staged (commit `checksum`, the serial
/// `staged` recorded; without one, only another commit tells).
fn not_the_staged(staged: &Staged, checksum: &str, booted: &Booted) -> bool {
    booted.checksum != checksum || staged.serial.is_some_and(|s| s != booted.serial)
}

/// The node runs a deployment a rollback (or a staged deployment lost for good) left it on, which
/// carries `recorded` from aloft ([`rolled_back`]): the config's arguments must be those. The
/// command line alone cannot show it when the config removed an argument (nothing to look for):
/// a node whose update only removed one, its staged deployment lost at every try, was Degraded,
/// and the drift check then found its disk matching and reported it Done, the argument still set.
fn carries_configs_kargs(recorded: &[String], want: &[String], running: &Booted) -> Result<(), String> {
    // Split as the arithmetic splits them (`"a b"` is two arguments), in no particular order.
    let words = |v: &[String]| {
        let mut v: Vec<String> = v.iter().flat_map(|a| kargs::split(a)).collect();
        v.sort();
        v
    };
    let (have, want) = (words(recorded), words(want));
    if have == want {
        return Ok(());
    }
    Err(format!(
        "unexpected kernel arguments: the node runs OS deployment {}.{}, which carries [{}] from an earlier config, \
         not [{}]",
        running.checksum,
        running.serial,
        have.join(" "),
        want.join(" ")
    ))
}

fn refused(message: impl Into<String>, unreconcilable: bool) -> Refused {
    Refused { message: message.into(), unreconcilable }
}

/// On a node without the OS helper (no ostree sysroot): refuse, before anything is drained or
/// written, what only the helper can apply, so the node never reboots for it and then reports
/// the config as applied. A new osImageURL is Unreconcilable (as before); kernel arguments to add
/// fail the update (Degraded) naming the field; removing them all needs nothing, as none were
/// ever set here.
fn without_os_helper(old: &MachineConfigSpec, new: &MachineConfigSpec, has_image: bool) -> Result<(), Refused> {
    if has_image && old.os_image_url != new.os_image_url {
        return Err(refused(
            "osImageURL: this node has no ostree sysroot, so aloft-agent cannot deploy an OS commit \
             (start it with --os-helper pointing at aloft-os-helper's socket, or leave osImageURL empty)",
            true,
        ));
    }
    if old.kernel_arguments != new.kernel_arguments && !new.kernel_arguments.is_empty() {
        return Err(refused(
            format!(
                "spec.kernelArguments: kernel arguments ({}) need the OS helper (an ostree host) to be set; this \
                 node has none (start aloft-agent with --os-helper pointing at aloft-os-helper's socket, or leave \
                 kernelArguments empty for this pool)",
                new.kernel_arguments.join(" ")
            ),
            false,
        ));
    }
    Ok(())
}

/// Extensions and a non-default kernelType, which no aloft node applies (the render refuses
/// them; this catches a rendered config from before): the update fails (Degraded) before
/// anything is drained or written instead of rebooting for nothing.
fn never_applied(new: &MachineConfigSpec) -> Result<(), Refused> {
    match aloft_api::reconcile::unsupported_fields(new).into_iter().next() {
        Some(e) => Err(refused(e.to_string(), false)),
        None => Ok(()),
    }
}

/// What to do when the boot after staging is not on the staged deployment.
#[derive(Debug, PartialEq)]
enum FailedVerify {
    /// Stage this again (its count already raised) and reboot; the string is why.
    StageAgain(Staged, String),
    /// Give up: Degraded with this reason.
    Degraded(String),
}

/// Whether going from `old` to `new` asks for OS work (a commit or kernel arguments to deploy),
/// which an update does after writing the files and before saving the current config.
pub(super) fn os_part_changed(old: &MachineConfigSpec, new: &MachineConfigSpec) -> bool {
    old.os_image_url != new.os_image_url || old.kernel_arguments != new.kernel_arguments
}

/// Whether the config's commit (`want`) differs from the one running (`booted`, or the default
/// deployment of a sysroot that boots nothing): then the update deploys it, even when the old
/// and the new config name the same commit. After a rollback they do (the current config is the
/// failed one, its files on disk) while the node runs the previous commit: deciding from the two
/// configs alone, a new config with the same commit and a kernel-argument change redeployed the
/// *running* commit with the new arguments, failed the OS check after the reboot, and staged that
/// again, adding the arguments once more each time (VM scenario f, before this).
fn deploys_other_commit(want: Option<&str>, booted: &str) -> bool {
    want.is_some_and(|w| w != booted)
}

/// What a restart in Verifying does when the denylist holds the commit it was verifying: health
/// checks failed on it here and a rollback was under way.
#[derive(Debug, Clone, PartialEq, Eq)]
enum RollbackCut {
    /// The node still runs that commit: the rollback was cut short (a crash after the denylist was
    /// saved and before the previous deployment became the default, or before the reboot into
    /// it). Roll back again with the failure the denylist keeps (idempotent on a booted host: the
    /// deployment made the default is the first one that is not booted). Without this the restart
    /// reported Degraded and left the node on the failing commit.
    Again { failure: String },
    /// The node runs another deployment, `booted`: the rollback made it the default and the node
    /// came up on it, but the power went before the rollback's own phase was saved. Degraded with
    /// the rollback's reason, as when that phase is found, rather than with the OS check's
    /// "expected ... got ..." about a commit that is not meant to run.
    Done { failure: String, booted: String },
}

/// `denied` is the denylist's entry for `checksum`, `booted` the running deployment. `None`
/// when the commit never failed here, or when nothing is booted to compare (a directory sysroot,
/// or a phase saved by an older agent without a checksum). The failed *deployment* is compared,
/// not its commit: after a kernel-argument update the deployment rolled back to has the same
/// commit, and a restart there rolled back again, into the failed deployment.
fn rollback_cut(denied: Option<&denylist::Entry>, booted: Option<&Booted>, checksum: &str) -> Option<RollbackCut> {
    match (denied, booted) {
        (Some(entry), Some(b)) if !checksum.is_empty() && !b.checksum.is_empty() => {
            let failure = entry.reason.clone();
            Some(if runs_failed_deployment(checksum, entry.deploy_serial, b) {
                RollbackCut::Again { failure }
            } else {
                RollbackCut::Done { failure, booted: b.checksum.clone() }
            })
        }
        _ => None,
    }
}

/// What the agent's words after a health check's failure say of the two deployments: a rollback
/// from one commit to another, or (an update that changed only kernel arguments) to the previous
/// deployment of the same commit. "From OS commit c to c" read as a rollback that did nothing.
fn rollback_words(from: &str, to: &str) -> String {
    if from == to {
        format!("to the previous deployment of OS commit {to} (the failed one was that commit with the update's kernel arguments)")
    } else {
        format!("from OS commit {from} to {to}")
    }
}

/// The reason a node rolled back from `from` to `to` reports, once it runs `to`.
fn rolled_back_reason(failure: &str, from: &str, to: &str) -> String {
    format!("{failure}; rolled back {}", rollback_words(from, to))
}

/// The counting and the booted deployment when `status` says the bootloader fell back from the
/// staged deployment of `checksum`: the counter at -1 and another deployment booted. A fallback
/// counter with the staged deployment running (someone picked it by hand) is no fallback.
fn fell_back_from(status: OsStatus, checksum: &str, staged: Option<&Staged>) -> Option<(BootCounting, DeploymentInfo)> {
    let counting = status.boot_counting.filter(BootCounting::fell_back)?;
    let booted = status.booted?;
    let running = Booted { checksum: booted.checksum.clone(), serial: booted.deploy_serial };
    if booted.checksum == checksum && came_up_on_staged(staged, checksum, Some(&running)).is_ok() {
        return None;
    }
    Some((counting, booted))
}

/// The bootloader fell back to the booted deployment (`boot_counter=-1`), and the one it gave
/// up on is still ostree's default: the next boot with the counting disarmed would start it.
fn fallback_not_kept(status: &OsStatus) -> bool {
    status.boot_counting.as_ref().is_some_and(BootCounting::fell_back) && status.rollback_queued
}

/// Why a new OS deployment failed when the bootloader gave up on it (boot counting ran out):
/// nothing on the node ran long enough to say more, so the reason says where to look.
fn fell_back_failure(checksum: &str, attempts: u32, counting: &BootCounting) -> String {
    let tries = match attempts {
        0 => "the boots it was given".to_string(),
        1 => "1 boot".to_string(),
        n => format!("{n} boots"),
    };
    format!(
        "the new OS deployment of commit {checksum} never came up: the bootloader gave up on it after {tries} \
         (boot counting in {}) and booted the previous deployment; not retried until the desired config changes \
         (its kernel's console or `journalctl --list-boots` shows why the boots failed)",
        counting.grubenv
    )
}

/// The reason a node rolling back from `from` to `to` reports until it has booted `to` (the
/// previous deployment made the default, the reboot into it asked for). It said "rolled back"
/// from the start, while the node still ran the failed commit (and for good when the reboot
/// was refused).
fn rolling_back_reason(failure: &str, from: &str, to: &str) -> String {
    format!("{failure}; rolling back {}", rollback_words(from, to))
}

/// The reason of a rollback done, from the one it said while it went on ([`rolling_back_reason`]);
/// a reason saved by an older agent (which said "rolled back" from the start) stays as it is.
fn rolled_back(reason: &str) -> String {
    let last = ["; rolling back from OS commit ", "; rolling back to the previous deployment of OS commit "]
        .iter()
        .filter_map(|words| reason.rfind(words).map(|at| (at, *words)))
        .max_by_key(|(at, _)| *at);
    match last {
        Some((at, words)) => {
            let done = words.replacen("rolling back", "rolled back", 1);
            format!("{}{done}{}", &reason[..at], &reason[at + words.len()..])
        }
        None => reason.to_string(),
    }
}

/// The reason a rollback from `failed` ends with, `reason` being the one it said while it went on:
/// "rolled back", unless the boot after it runs the failed deployment again (`failed_again`;
/// false when nothing is booted to compare, as on a directory sysroot, or a phase saved without
/// the commit).
fn rollback_outcome(reason: &str, failed: &str, failed_again: bool) -> String {
    if failed_again {
        format!(
            "{reason} did not take: the node came up on the failed deployment of {failed} again after the reboot \
             (is the previous deployment the bootloader's default? `ostree admin status` shows the deployments)"
        )
    } else {
        rolled_back(reason)
    }
}

/// The staged deployment is staged again while attempts remain ([`state::MAX_RESTAGES`]) and its
/// commit never failed its health checks here (a denylisted commit is not retried); the
/// reason of a node that runs out of attempts says so and where to look.
fn after_failed_verify(staged: Option<Staged>, denied: bool, reason: String) -> FailedVerify {
    match staged {
        Some(staged) if !denied && staged.restaged < state::MAX_RESTAGES => {
            FailedVerify::StageAgain(Staged { restaged: staged.restaged + 1, ..staged }, reason)
        }
        Some(staged) if staged.restaged > 0 => FailedVerify::Degraded(format!(
            "{reason} (staged again {} times after boots that did not come up on it: was the node powered off \
             before ostree finalized the deployment, or did finalizing it fail? see ostree-finalize-staged.service)",
            staged.restaged
        )),
        _ => FailedVerify::Degraded(reason),
    }
}

impl Agent {
    /// The deployments for the status, as last read from the helper (`null` without an OS
    /// backend; `{"error": ...}` when the helper could not be asked). Cached rather than asked
    /// on every status write, so that publishing a phase never blocks on the helper and an idle
    /// agent does not wake a socket-activated helper.
    pub(super) fn os_status_json(&self) -> serde_json::Value {
        self.os_status.clone()
    }

    /// Ask the helper for the deployments and keep the answer for the status.
    pub(super) async fn read_os_status(&mut self, os: &super::OsAgent) -> Result<OsStatus, OsError> {
        let result = os.handle.run_read(|b| b.status()).await;
        self.os_status = match &result {
            Ok(st) => serde_json::to_value(st).unwrap_or_default(),
            Err(e) => serde_json::json!({ "error": e.to_string() }),
        };
        result
    }

    /// Refresh the cached deployments (at start-up and after an OS change); errors end up in
    /// the status, not in the caller.
    pub(super) async fn refresh_os_status(&mut self) {
        if let Some(os) = self.os.clone() {
            if let Err(e) = self.read_os_status(&os).await {
                tracing::warn!(error = %e, "cannot read the OS deployments");
            }
        }
    }

    /// Start the background download the coordinator asked for with `aloft.dev/prestageConfig`,
    /// once per config.
    pub(super) fn maybe_prestage(&mut self, node: &crate::coordinator::NodeView) {
        let name = node.annotation(prestage::PRESTAGE_CONFIG);
        let Some(os) = &self.os else {
            // Said once per config: the request stays on the Node unanswered, and without this
            // nothing told why.
            if !name.is_empty() && self.prestage_started.as_deref() != Some(name) {
                self.prestage_started = Some(name.to_string());
                tracing::info!(config = name, "not pre-staging: this node does not manage its OS (no OS helper)");
            }
            return;
        };
        // A download another OS call cancelled is started again (below, once idle).
        if let Some(cancelled) = os.handle.take_cancelled() {
            if self.prestage_started.as_deref() == Some(cancelled.as_str()) {
                self.prestage_started = None;
            }
        }
        if name.is_empty()
            || node.annotation(prestage::PRESTAGED_CONFIG) == name
            || self.prestage_started.as_deref() == Some(name)
        {
            return;
        }
        // Only while no update is under way: a download holds the OS helper for up to an hour.
        // The OS steps of an update cancel it rather than wait behind it (`OsHandle`), but one
        // started in the middle of an update would only be cancelled by its next step. Asked
        // again at the next step.
        if !matches!(self.phase, Phase::Idle | Phase::Degraded { .. } | Phase::Unreconcilable { .. }) {
            tracing::debug!(config = name, phase = ?self.phase, "pre-staging waits for the update under way");
            return;
        }
        self.prestage_started = Some(name.to_string());
        tracing::info!(config = name, "pre-staging the OS commit of a config in the background");
        tokio::spawn(prestage::run(
            self.api.clone(),
            os.handle.clone(),
            self.root.clone(),
            name.to_string(),
            os.progress_report,
        ));
    }

    /// Before anything is written or drained: refuse an osImageURL this node cannot apply, refuse
    /// a commit that failed here before, download (and verify) the commit. Returns what to stage,
    /// or `None` when the booted OS already is what `new` asks for.
    pub(super) async fn os_prepare(
        &mut self,
        target: &str,
        old: &MachineConfigSpec,
        new: &MachineConfigSpec,
    ) -> Result<Option<StageRequest>, Refused> {
        let image = osimage::parse(&new.os_image_url).map_err(|e| refused(e.to_string(), true))?;
        never_applied(new)?;
        if !os_part_changed(old, new)
            && !self.runs_other_commit(image.as_ref().map(|i| i.checksum.as_str())).await
            && !self.runs_rolled_back_deployment().await
        {
            return Ok(None);
        }
        let os_changed = old.os_image_url != new.os_image_url;
        let Some(os) = self.os.clone() else {
            return without_os_helper(old, new, image.is_some()).map(|()| None);
        };
        let denied = denylist::refresh(&self.root, target)
            .map_err(|e| refused(format!("the OS commit denylist: {e}"), false))?;
        if let Some(img) = &image {
            if let Some(entry) = denied.find(&img.checksum) {
                return Err(refused(
                    format!(
                        "OS commit {} failed on this node ({}); not retried until the desired config changes",
                        img.checksum, entry.reason
                    ),
                    false,
                ));
            }
        }
        let status = self.read_os_status(&os).await.map_err(|e| refused(e.to_string(), false))?;
        let Some(booted_or_default) = status.booted.clone().or_else(|| status.deployments.first().cloned()) else {
            return Err(refused("the ostree sysroot has no deployment to update from", false));
        };
        let os_changed = os_changed
            || deploys_other_commit(image.as_ref().map(|i| i.checksum.as_str()), &booted_or_default.checksum);
        // After a rollback the running deployment carries the arguments of the config before the
        // failed one, not the current config's (`rolled_back`).
        let old_kargs =
            rolled_back::load(&self.root, &booted_or_default).unwrap_or_else(|| old.kernel_arguments.clone());
        // Nothing to do when the running OS is already the commit with the right arguments.
        let image_checksum = image.as_ref().map(|i| i.checksum.as_str());
        if booted_matches(status.booted.as_ref(), image_checksum, &old_kargs, &new.kernel_arguments) {
            tracing::info!(target, "the booted OS already matches osImageURL and kernelArguments");
            // A deployment a rollback left carries the new config's arguments now, in the words
            // the OS check compares.
            if rolled_back::load(&self.root, &booted_or_default).is_some() {
                if let Err(e) = rolled_back::save(&self.root, &booted_or_default, &new.kernel_arguments) {
                    tracing::warn!(error = %e, "cannot record the running deployment's kernel arguments");
                }
            }
            return Ok(None);
        }
        if let Some(img) = image.clone().filter(|_| os_changed) {
            self.enter(Phase::Preparing { target: target.into() }, &format!("downloading OS commit {}", img.checksum))
                .map_err(|e| refused(format!("{e:#}"), false))?;
            let started = std::time::Instant::now();
            let report = self.pull_showing_progress(&os, img).await.map_err(|e| {
                let untrusted = matches!(e, OsError::Untrusted { .. });
                refused(e.to_string(), untrusted)
            })?;
            tracing::info!(
                target,
                already_present = report.already_present,
                elapsed_ms = started.elapsed().as_millis() as u64,
                "OS commit ready"
            );
        }
        Ok(Some(StageRequest {
            // A kernel-argument change alone redeploys the running commit.
            image: image.filter(|_| os_changed),
            old_kargs,
            new_kargs: new.kernel_arguments.clone(),
        }))
    }

    /// An update's pull of `img`, its progress in the status every [`DOWNLOAD_STATUS_EVERY`]
    /// (`preparing: downloading OS commit …: 3 of 120 objects, 1.2 MB in 14 s`): a download may
    /// take minutes, and the helper's status, read beside the pull, says how far it is.
    async fn pull_showing_progress(
        &mut self,
        os: &super::OsAgent,
        img: osimage::OstreeImage,
    ) -> Result<aloft_api::os::PullReport, OsError> {
        let checksum = img.checksum.clone();
        let pull = os.handle.run_pull(&checksum, move |b| b.pull(&img));
        tokio::pin!(pull);
        let first = tokio::time::Instant::now() + DOWNLOAD_STATUS_EVERY;
        let mut tick = tokio::time::interval_at(first, DOWNLOAD_STATUS_EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut shown = false;
        let started = tokio::time::Instant::now();
        // The Node hears of a download only once it runs long, and then every `progress_report`:
        // a fleet's quick downloads cost the coordinator no write.
        let mut node_report = crate::os::node_progress::NodeProgress::new(os.progress_report, started);
        let result = loop {
            tokio::select! {
                result = &mut pull => break result,
                _ = tick.tick() => {
                    // A status the helper cannot give now does not stop the download.
                    let Ok(status) = self.read_os_status(os).await else { continue };
                    let Some(download) = status.download.filter(|d| d.checksum == checksum) else { continue };
                    shown = true;
                    let text = format!("downloading OS commit {checksum}: {download}");
                    if let Err(e) = self.write_status(&text) {
                        tracing::warn!(error = %format!("{e:#}"), "cannot publish the download's progress");
                    }
                    if node_report.due(tokio::time::Instant::now()) {
                        node_report.write(&self.api, text);
                    }
                }
            }
        };
        if shown {
            // Over: the cached deployments no longer carry it.
            if let Some(status) = self.os_status.as_object_mut() {
                status.remove("download");
            }
        }
        node_report.end(&self.api).await;
        result
    }

    /// Drop a staged OS deployment no update of this process means to boot, when one may exist
    /// ([`Agent::maybe_stray_stage`]). ostree boots a staged deployment at the next reboot,
    /// whatever the reboot is for: one left by an update that failed, crashed or was taken back
    /// after its stage would boot at the next reboot of another config or of an admin, an OS
    /// no health check and no rollback looks at. While a stage may still run in the helper
    /// ([`Agent::stage_may_run`]: the agent crashed in the call, or gave up on it) the drop is
    /// asked for at once and waits for that stage (the sysroot's lock; up to the call's timeout,
    /// behind a background pull too). Otherwise the status is read first, which does not wait
    /// behind a pull the way a write does.
    pub(super) async fn drop_stray_stage(&mut self, when: &str) -> Result<(), OsError> {
        if !self.maybe_stray_stage {
            return Ok(());
        }
        let Some(os) = self.os.clone() else {
            self.maybe_stray_stage = false;
            return Ok(());
        };
        if !self.stage_may_run && self.read_os_status(&os).await?.staged.is_none() {
            self.maybe_stray_stage = false;
            return Ok(());
        }
        let dropped = os.handle.run(|b| b.drop_staged()).await?;
        self.maybe_stray_stage = false;
        self.stage_may_run = false;
        if let Some(d) = dropped {
            tracing::warn!(
                checksum = %d.checksum,
                serial = d.deploy_serial,
                "dropped the staged OS deployment of an update that did not finish ({when}): it is not booted"
            );
            self.refresh_os_status().await;
        }
        Ok(())
    }

    /// Before a reboot that is not into a staged deployment of this update: a stray one is
    /// dropped, and when that fails while the helper shows one staged, the reboot is not asked
    /// for (Degraded saying why, retried with backoff). A helper that cannot say either way does
    /// not hold up the reboot of an update that has no OS part.
    pub(super) async fn no_stray_stage_before_reboot(&mut self, target: &str) -> anyhow::Result<()> {
        let Err(e) = self.drop_stray_stage("before a reboot").await else { return Ok(()) };
        // A helper that cannot say is no sign that nothing is staged: libostree's own record of
        // a staged deployment is read then (the agent's unit may read /run).
        let staged = match self.os.clone() {
            Some(os) => match self.read_os_status(&os).await {
                Ok(st) => st.staged.map(|d| d.checksum),
                Err(_) => self
                    .root
                    .path()
                    .join("run/ostree/staged-deployment")
                    .exists()
                    .then(|| "(unknown: the OS helper does not answer)".to_string()),
            },
            None => None,
        };
        let Some(staged) = staged else {
            tracing::warn!(error = %e, "cannot drop a staged OS deployment an earlier update may have left; the helper shows none: rebooting");
            return Ok(());
        };
        let what = format!(
            "OS commit {staged} is staged by an update that did not finish and could not be dropped ({e}): a reboot \
             now would boot it unchecked; asked again"
        );
        let reason = self.degraded_for_reboot(target, what).await?;
        Err(anyhow::anyhow!(reason))
    }

    /// The OS update whose new deployment this boot runs unchecked: booted after the reboot into
    /// it (`RebootingStaged` from an earlier boot), or its check begun (`Verifying`); its target
    /// and commit.
    fn unchecked_os_boot(&self) -> Option<(String, String)> {
        let current = self.current_name();
        match &self.phase {
            Phase::RebootingStaged { target, boot_id, checksum, .. }
                if *target == current && *boot_id != state::boot_id(&self.root) =>
            {
                Some((target.clone(), checksum.clone()))
            }
            Phase::Verifying { target, checksum, .. } if *target == current => Some((target.clone(), checksum.clone())),
            _ => None,
        }
    }

    /// How much longer the new OS deployment this boot runs unchecked may go without reaching the
    /// coordinator ([`OsOptions::reach_timeout`], from this process's start); `None` when no such
    /// deployment runs or there is no limit.
    pub(super) fn os_reach_left(&self) -> Option<Duration> {
        let os = self.os.as_ref()?;
        if os.reach_timeout.is_zero() || self.os_reach_moot {
            return None;
        }
        self.unchecked_os_boot()?;
        Some(os.reach_timeout.saturating_sub(self.started_at.elapsed()))
    }

    /// The new OS deployment did not let the agent reach the coordinator in time: rolled back as
    /// a failed health check (denylisted, the previous deployment made the default, rebooted), as
    /// greenboot rolls back a boot whose checks fail and balenaOS one that cannot reach its cloud.
    /// An update that broke the network, DNS, the clock or the agent's credential would otherwise
    /// leave the node on it for good, out of reach and holding a slot of maxUnavailable. Nothing
    /// is rolled back when the boot is not the staged deployment (it was lost: the node runs the
    /// OS it ran before, and the check once the coordinator answers says so), and the limit is
    /// then lifted for this process.
    pub(super) async fn roll_back_unreached(&mut self, last_error: &str) -> Result<()> {
        let (Some((target, checksum)), Some(os)) = (self.unchecked_os_boot(), self.os.clone()) else {
            return Ok(());
        };
        let staged = match &self.phase {
            Phase::RebootingStaged { staged, .. } | Phase::Verifying { staged, .. } => staged.clone(),
            _ => None,
        };
        let booted = self.booted_deployment(&os).await.map_err(|e| anyhow::anyhow!("{e}"))?;
        let on_new = booted.as_ref().is_some_and(|b| b.checksum == checksum)
            && came_up_on_staged(staged.as_ref(), &checksum, booted.as_ref()).is_ok();
        if !on_new {
            tracing::warn!(target, checksum, "the coordinator is out of reach, but this boot does not run the staged deployment: nothing to roll back; waiting for the coordinator");
            // Asked again, the answer would be the same: the wait for the coordinator goes on
            // without the limit (a limit of zero left would otherwise be a busy loop).
            self.os_reach_moot = true;
            return Ok(());
        }
        let failure = format!(
            "the new OS did not reach the coordinator within {} s of the agent's start (--os-reach-timeout-seconds; \
             last error: {last_error})",
            os.reach_timeout.as_secs()
        );
        self.roll_back(&os, &target, &checksum, failure).await
    }

    /// Stage the deployment; returns it (its commit and deploy serial).
    pub(super) async fn os_stage(&mut self, target: &str, req: StageRequest) -> Result<DeploymentInfo, String> {
        let Some(os) = self.os.clone() else { return Err("no OS backend".into()) };
        self.enter(Phase::Staging { target: target.into() }, "staging the OS deployment")
            .map_err(|e| format!("{e:#}"))?;
        let staged = os.handle.run(move |b| b.stage(&req)).await.map_err(|e| e.to_string());
        self.refresh_os_status().await;
        staged
    }

    /// The deployment running as an update is first staged ([`Staged::from`]), read once per
    /// boot; none when nothing is booted or the helper cannot say (then the records are kept as
    /// an older agent kept them).
    pub(super) async fn staging_from(&mut self) -> Option<DeploymentId> {
        let os = self.os.clone()?;
        match self.booted_deployment(&os).await {
            Ok(b) => b.map(|b| DeploymentId { checksum: b.checksum, serial: b.serial }),
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the running OS deployment before staging");
                None
            }
        }
    }

    /// Record that the node reboots into the staged deployment of `checksum` from this boot.
    pub(super) fn enter_rebooting_staged(&mut self, target: &str, checksum: String, staged: Staged) -> Result<()> {
        let boot_id = state::boot_id(&self.root);
        self.enter(
            Phase::RebootingStaged { target: target.into(), boot_id, checksum, staged: Some(staged) },
            "rebooting into the new OS deployment",
        )
    }

    /// Report Working on the current config and ask for the reboot into the staged deployment
    /// (the phase is RebootingStaged already).
    pub(super) async fn ask_reboot_staged(&mut self, target: &str) -> Result<()> {
        // The config the node runs until the reboot (MCO moves currentConfig at Done); the
        // current config is saved already.
        let current = self.running_config();
        self.api.report_working_now(&current).await.ok();
        self.ask_reboot(target).await
    }

    /// After the OS-update boot: the booted commit and kernel arguments must be the config's
    /// (MCO's checks and messages), then the health checks must pass; a failing health check
    /// rolls back.
    pub(super) async fn verify_os_boot(&mut self, target: &str) -> Result<()> {
        let (Some(os), Some(cur)) = (self.os.clone(), self.current.clone()) else {
            return self.finish(target, true).await;
        };
        let (checksum, staged) = match &self.phase {
            Phase::RebootingStaged { checksum, staged, .. } | Phase::Verifying { checksum, staged, .. } => {
                (checksum.clone(), staged.clone())
            }
            _ => (String::new(), None),
        };
        self.enter(
            Phase::Verifying { target: target.into(), checksum: checksum.clone(), staged: staged.clone() },
            "verifying the booted OS and running health checks",
        )?;
        // The helper answers first: one out of reach (not started yet, restarting) says nothing
        // about the boot. Judged without it, the boot counted as a lost staged deployment: a
        // restage spent (or the running commit staged again, if the helper came back between
        // the two calls) and the node left Degraded on its current config, which nothing
        // retried. Failing the step keeps the phase, and the loop retries with backoff.
        if let Err(e) = self.helper_answers(&os, &cur).await {
            return self.helper_out_of_reach(&os, target, e).await;
        }
        self.helper_wait = None;
        // Before anything else: a boot the bootloader fell back to would otherwise read as a lost
        // staged deployment, and staged again into the same failure.
        match self.bootloader_fell_back(&os, &checksum, staged.as_ref()).await {
            Ok(Some((counting, booted))) => {
                return self.keep_fallback(&os, target, &checksum, staged.as_ref(), &counting, &booted).await
            }
            Ok(None) => {}
            // Not known: judged as no fallback, the boot would be staged again into the failure.
            Err(e) => return self.helper_out_of_reach(&os, target, e).await,
        }
        let denied = Denylist::load(&self.root).ok().and_then(|l| l.find(&checksum).cloned());
        let booted = match denied {
            Some(_) => self.booted_deployment(&os).await.ok().flatten(),
            None => None,
        };
        match rollback_cut(denied.as_ref(), booted.as_ref(), &checksum) {
            Some(RollbackCut::Again { failure }) => {
                tracing::warn!(
                    target,
                    checksum,
                    "restarted on a commit that failed its health checks: rolling back again"
                );
                return self.roll_back(&os, target, &checksum, failure).await;
            }
            Some(RollbackCut::Done { failure, booted }) => {
                tracing::warn!(target, checksum, %booted,
                    "restarted on the deployment a rollback made the default, before the rollback saved its phase: the rollback is done");
                // The record a finished rollback would have made (the cut came before it).
                if let Ok(st) = self.read_os_status(&os).await {
                    if let Some(running) = st.booted.or_else(|| st.deployments.first().cloned()) {
                        self.record_rolled_back_kargs(&running);
                    }
                }
                self.disarm_boot_counter().await;
                return self.fail(target, rolled_back_reason(&failure, &checksum, &booted), false).await;
            }
            None => {}
        }
        // The commit and arguments can match on the deployment booted before the update (one that
        // only removed arguments): the staged one must be what runs. Another deployment of the
        // staged commit is said as such; another commit gets MCO's words from the OS checks.
        let booted = self.booted_deployment(&os).await.ok().flatten();
        let on_staged = came_up_on_staged(staged.as_ref(), &checksum, booted.as_ref());
        let verified = match on_staged {
            Err(lost) if booted.as_ref().is_some_and(|b| b.checksum == checksum) => Err(lost),
            on_staged => self.verify_os(&os, &cur).await.and(on_staged),
        };
        if let Err(reason) = verified {
            return match after_failed_verify(staged, denied.is_some(), reason) {
                FailedVerify::StageAgain(staged, why) => self.restage(&os, target, &checksum, staged, why).await,
                FailedVerify::Degraded(reason) => {
                    self.record_staged_lost(&os, &checksum).await;
                    self.disarm_boot_counter().await;
                    self.fail(target, reason, false).await
                }
            };
        }
        match os.health.run(self.services.as_ref()).await {
            Ok(_) => {
                // Running a deployment staged since any rollback: it carries its own arguments.
                if let Err(e) = rolled_back::clear(&self.root) {
                    tracing::warn!(error = %e, "cannot remove the rolled-back deployment's kernel arguments");
                }
                // The boot is good: the bootloader stops counting (greenboot's set-success).
                self.disarm_boot_counter().await;
                self.finish(target, true).await
            }
            Err(failure) => self.roll_back(&os, target, &checksum, failure.to_string()).await,
        }
    }

    /// The booted commit (and, when the config has kernel arguments, the command line), read
    /// from the helper: what verifying the boot needs, or why the helper could not say.
    async fn helper_answers(&mut self, os: &super::OsAgent, cur: &MachineConfig) -> Result<(), OsError> {
        let booted = self.booted_checksum(os).await?;
        if booted.is_some() && !cur.spec.kernel_arguments.is_empty() && self.booted_os.cmdline.is_none() {
            let c = os.handle.run_read(|b| b.booted_cmdline()).await?;
            self.booted_os.cmdline = Some(c);
        }
        Ok(())
    }

    /// The helper could not be asked after the update's reboot: the step fails (the phase stays
    /// Verifying, retried with backoff). Once that has lasted the health checks' timeout the Node
    /// says why, as Degraded on the update's config (the node is unavailable anyway), once;
    /// it goes Done when the helper answers and the checks pass.
    async fn helper_out_of_reach(&mut self, os: &super::OsAgent, target: &str, error: OsError) -> Result<()> {
        let (since, reported) = *self.helper_wait.get_or_insert((std::time::Instant::now(), false));
        if !reported && since.elapsed() >= os.health.timeout {
            // A helper that answered with an error is not waited for: its journal says more.
            let retrying = match error {
                OsError::Helper { .. } => "retrying until the OS helper answers",
                _ => "retrying (`journalctl -u aloft-os-helper` says more)",
            };
            let reason = format!("cannot verify the booted OS: {error}; {retrying}");
            tracing::warn!(target, %reason, "reporting the wait for the OS helper");
            // Not verified yet: the Node keeps naming the config it said the node runs.
            let current = self.running_config();
            self.api.report_failure("Degraded", &reason, &current, target).await?;
            self.helper_wait = Some((since, true));
        }
        anyhow::bail!("cannot verify the booted OS yet: {error}")
    }

    /// The boot after staging did not come up on the staged deployment (see [`Staged`]): stage
    /// the same request again (`staged`, of commit `checksum`, counts this attempt already) and
    /// reboot. The phase stays Verifying until the reboot is asked for, so a crash meanwhile
    /// verifies (and stages) again rather than reporting Done on the old OS.
    async fn restage(
        &mut self,
        os: &super::OsAgent,
        target: &str,
        checksum: &str,
        staged: Staged,
        why: String,
    ) -> Result<()> {
        let restaged = staged.restaged;
        tracing::warn!(target, restaged, reason = %why,
            "the staged OS deployment did not come up (the node went down before ostree finalized it?): staging it again");
        let req = match staged.request() {
            Ok(r) => r,
            Err(e) => {
                self.record_staged_lost(os, checksum).await;
                return self.fail(target, format!("{why}; staging it again: {e}"), false).await;
            }
        };
        let result = os.handle.run(move |b| b.stage(&req)).await;
        self.refresh_os_status().await;
        match result {
            Ok(d) => {
                let staged = Staged { serial: Some(d.deploy_serial), ..staged };
                // Meant once the phase says so; a failed save leaves it stray.
                self.maybe_stray_stage = true;
                self.enter_rebooting_staged(target, d.checksum, staged)?;
                self.maybe_stray_stage = false;
                self.ask_reboot_staged(target).await
            }
            Err(e) => {
                // The helper may still finish a stage this client gave up on.
                self.maybe_stray_stage = true;
                self.stage_may_run = true;
                if let Err(drop) = self.drop_stray_stage("after staging again failed").await {
                    tracing::warn!(error = %drop, "cannot drop what the failed stage may have left");
                }
                self.record_staged_lost(os, checksum).await;
                self.fail(target, format!("{why}; staging it again failed: {e}"), false).await
            }
        }
    }

    /// Before the reboot into the staged deployment: the bootloader gets
    /// [`OsOptions::boot_attempts`] boots for it, counted in its environment block, before it
    /// boots the previous deployment by itself. Best effort: without it (a host whose bootloader
    /// does not count, a helper from before boot counting) the update goes on as before.
    pub(super) async fn arm_boot_counter(&mut self) {
        let Some(os) = self.os.clone() else { return };
        let attempts = os.boot_attempts;
        if attempts == 0 {
            return;
        }
        match os.handle.run(move |b| b.boot_counter(BootCount::Arm(attempts))).await {
            Ok(Some(c)) => {
                tracing::info!(attempts, grubenv = %c.grubenv, "boot counting armed for the new OS deployment");
                self.refresh_os_status().await;
            }
            Ok(None) => tracing::info!(
                "the bootloader counts no boots here (no GRUB environment block): a new OS that never comes up is not rolled back by it"
            ),
            Err(e) => tracing::warn!(error = %e, "cannot arm the bootloader's boot counting; rebooting without it"),
        }
    }

    /// The bootloader stops counting and this boot is marked good: after a verified OS update,
    /// before a rollback's reboot, and at every start of the agent outside an unchecked OS boot
    /// (a counter left armed by an update given up before its reboot would otherwise run out on
    /// unrelated reboots, and boot the previous deployment). Best effort; logged.
    pub(super) async fn disarm_boot_counter(&mut self) {
        let Some(os) = self.os.clone() else { return };
        // The helper leaves the counter at -1 while the deployment the bootloader gave up on is
        // still the default (disarmed, the next reboot would start it again, uncounted).
        match os.handle.run(|b| b.boot_counter(BootCount::Disarm)).await {
            // The status shows the counting: read again once it changed.
            Ok(Some(_)) => self.refresh_os_status().await,
            Ok(None) => {}
            Err(e) => tracing::warn!(error = %e, "cannot mark the boot good in the bootloader's boot counting"),
        }
    }

    /// At the agent's start: the boot is good unless it is an OS update's first, which
    /// [`Self::verify_os_boot`] judges. A boot the bootloader fell back to while the failed
    /// deployment is still the default (the fallback's own handling was cut short, or failed)
    /// first gets the booted deployment made the default, as greenboot's fallback check does at
    /// every boot; until that works the counter stays at -1, which keeps the bootloader on the
    /// previous entry (disarmed, the next reboot would boot the failed deployment again).
    pub(super) async fn settle_boot_counting(&mut self) {
        // An update's first boot is judged by verify_os_boot; a reboot into a staged deployment
        // still owed by this boot arms the counting again when it is asked for (disarmed here,
        // a reboot logind had already taken would start the new deployment uncounted).
        if self.unchecked_os_boot().is_some() || matches!(self.phase, Phase::RebootingStaged { .. }) {
            return;
        }
        let Some(os) = self.os.clone() else { return };
        let status = match self.read_os_status(&os).await {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the boot counting at start");
                return;
            }
        };
        if fallback_not_kept(&status) {
            tracing::warn!("the bootloader fell back to this deployment, and the failed one is still the default: keeping this one");
            let kept = os.handle.run(|b| b.keep_booted()).await;
            self.refresh_os_status().await;
            if let Err(e) = kept {
                tracing::warn!(error = %e, "cannot make the booted deployment the default; the boot counting stays at -1");
                return;
            }
        }
        self.disarm_boot_counter().await;
    }

    /// The bootloader ran out of boots for the staged deployment of `checksum` and booted the
    /// previous one: the counting and the booted deployment. `None` when it did not, or when the
    /// staged deployment runs after all; an error when the helper cannot say.
    async fn bootloader_fell_back(
        &mut self,
        os: &super::OsAgent,
        checksum: &str,
        staged: Option<&Staged>,
    ) -> Result<Option<(BootCounting, DeploymentInfo)>, OsError> {
        let status = self.read_os_status(os).await?;
        Ok(fell_back_from(status, checksum, staged))
    }

    /// After the bootloader fell back: the failed commit is denylisted (so the update is not
    /// staged again into the same failure), the running deployment made the default (else the
    /// next reboot with the counting disarmed boots the failed one), the counting disarmed, and
    /// the node Degraded saying so, as greenboot's fallback check does with `rpm-ostree rollback`.
    /// In that order: a crash midway does it again (the counter still says -1), and after the
    /// disarm the denylist and the order say the rollback is done.
    async fn keep_fallback(
        &mut self,
        os: &super::OsAgent,
        target: &str,
        checksum: &str,
        staged: Option<&Staged>,
        counting: &BootCounting,
        booted: &DeploymentInfo,
    ) -> Result<()> {
        let failure = fell_back_failure(checksum, os.boot_attempts, counting);
        tracing::warn!(target, checksum, booted = %booted.checksum, "the bootloader fell back from the new OS deployment");
        let mut list = Denylist::load(&self.root).unwrap_or_default();
        list.deny(target, checksum, staged.and_then(|s| s.serial), &failure);
        if let Err(e) = list.save(&self.root) {
            tracing::warn!(error = %e, "cannot persist the OS commit denylist");
        }
        let kept = os.handle.run(|b| b.keep_booted()).await;
        self.refresh_os_status().await;
        match kept {
            Ok(d) => self.record_rolled_back_kargs(&d),
            Err(e) => {
                // The counter stays at -1 (the bootloader stays on this deployment) and so does
                // the phase: the step is retried with backoff, and the Node says why meanwhile.
                let reason = format!("{failure}; making the running deployment the default failed (retrying): {e}");
                let current = self.running_config();
                if let Err(report) = self.api.report_failure("Degraded", &reason, &current, target).await {
                    tracing::warn!(error = %format!("{report:#}"), "cannot report the failed fallback");
                }
                anyhow::bail!(reason);
            }
        }
        self.disarm_boot_counter().await;
        self.fail(target, rolled_back_reason(&failure, checksum, &booted.checksum), false).await
    }

    /// A staged deployment lost for good (not staged again): the node runs the deployment from
    /// before the update, whose arguments from aloft are the update's "old" ones, as after a
    /// rollback. Recorded as a rollback records it ([`rolled_back`]), so that the drift check
    /// holds the node to them and the next update starts from them and does OS work. Only when
    /// the booted deployment is known not to be the staged one (commit `checksum`).
    ///
    /// The booted deployment is the one read for the boot's verification (it cannot change within
    /// a boot): the helper, which may be what just failed, is not asked again.
    async fn record_staged_lost(&mut self, os: &super::OsAgent, checksum: &str) {
        let Phase::Verifying { staged: Some(staged), .. } = &self.phase else { return };
        let staged = staged.clone();
        let booted = match self.booted_deployment(os).await {
            Ok(Some(b)) => b,
            Ok(None) => return,
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the running OS deployment to record its kernel arguments");
                return;
            }
        };
        if not_the_staged(&staged, checksum, &booted) {
            let running = DeploymentInfo {
                checksum: booted.checksum.clone(),
                deploy_serial: booted.serial,
                booted: true,
                ..Default::default()
            };
            self.record_rolled_back_kargs(&running);
        }
    }

    /// The deployment gone back to (`to`) carries the failed update's "old" arguments
    /// (`rolled_back`): said while the phase still holds the update's [`Staged`] request. From
    /// Verifying (a failed health check) and from RebootingStaged (the new OS never reached the
    /// coordinator, so it was never verified): without the record, going back to the config
    /// before would add its arguments a second time, and a fix would keep ones it dropped.
    fn record_rolled_back_kargs(&self, to: &DeploymentInfo) {
        if let Phase::Verifying { staged: Some(staged), .. } | Phase::RebootingStaged { staged: Some(staged), .. } =
            &self.phase
        {
            if !went_back_to_start(staged, to) {
                // Its arguments from aloft are not known: the OS checks judge it by its commit
                // and command line, as any deployment without a record.
                tracing::warn!(deployment = %format_args!("{}.{}", to.checksum, to.deploy_serial),
                    "the node runs a deployment other than the one the update started from: no kernel arguments recorded for it");
                return;
            }
            if let Err(e) = rolled_back::save(&self.root, to, &staged.old_kargs) {
                tracing::warn!(error = %e, "cannot record the rolled-back deployment's kernel arguments");
            }
        }
    }

    async fn roll_back(&mut self, os: &super::OsAgent, target: &str, checksum: &str, failure: String) -> Result<()> {
        tracing::warn!(target, checksum, %failure, "health checks failed: rolling back");
        // The deployment that failed (the booted one), so that the boot after the rollback is
        // not taken for it when the update kept the commit and changed kernel arguments.
        let serial =
            self.booted_deployment(os).await.ok().flatten().filter(|b| b.checksum == checksum).map(|b| b.serial);
        let mut list = Denylist::load(&self.root).unwrap_or_default();
        list.deny(target, checksum, serial, &failure);
        if let Err(e) = list.save(&self.root) {
            tracing::warn!(error = %e, "cannot persist the OS commit denylist");
        }
        crate::failpoints::hit(super::os_points::AFTER_DENYLIST);
        let rolled_back = os.handle.run(|b| b.rollback()).await;
        self.refresh_os_status().await;
        if rolled_back.is_ok() {
            crate::failpoints::hit(super::os_points::AFTER_ROLLBACK);
        }
        let previous = match rolled_back {
            Ok(d) => d,
            Err(e) => return self.fail(target, format!("{failure}; rolling back failed: {e}"), false).await,
        };
        self.record_rolled_back_kargs(&previous);
        // The order is the rollback's now: a counter still armed would, once run out, send the
        // bootloader to the second entry, the deployment that failed.
        self.disarm_boot_counter().await;
        let reason = rolling_back_reason(&failure, checksum, &previous.checksum);
        let boot_id = state::boot_id(&self.root);
        self.enter(
            Phase::RollingBack {
                target: target.into(),
                boot_id,
                checksum: checksum.into(),
                serial,
                reason: reason.clone(),
            },
            "rebooting into the previous OS deployment",
        )?;
        let current = self.current_name();
        // Best effort, and not waited on for long: the boot after the rollback says it again,
        // and a coordinator out of reach may be why the node rolls back.
        let report = self.api.report_failure("Degraded", &reason, &current, target);
        if !matches!(tokio::time::timeout(Duration::from_secs(30), report).await, Ok(Ok(_))) {
            tracing::warn!(target, "the rollback is not on the Node yet; it is said after the reboot");
        }
        self.ask_reboot(target).await
    }

    /// Booted back into the previous OS: Degraded with the health check's reason, until the
    /// desired config changes (the denylist keeps the commit from being retried). A boot that
    /// came up on the failed commit again (the bootloader did not take the rollback's default)
    /// says so rather than "rolled back": the node still runs the commit that failed. It is not
    /// rolled back and rebooted again: a bootloader that keeps booting that entry would make a
    /// reboot loop of it.
    pub(super) async fn finish_rollback(&mut self, target: &str) -> Result<()> {
        let (failed, serial, reason) = match &self.phase {
            Phase::RollingBack { checksum, serial, reason, .. } => (checksum.clone(), *serial, reason.clone()),
            other => (String::new(), None, other.reason().to_string()),
        };
        let booted = match self.os.clone() {
            // Without the failed commit (a phase an older agent saved) there is nothing to compare.
            Some(_) if failed.is_empty() => None,
            // The helper not answering says nothing about the boot: retried with backoff, and
            // said on the Node once that has lasted the health checks' timeout.
            Some(os) => match self.booted_deployment(&os).await {
                Ok(b) => {
                    self.helper_wait = None;
                    b
                }
                Err(e) => return self.helper_out_of_reach(&os, target, e).await,
            },
            None => None,
        };
        // The phase names the failed deployment (a phase an older agent saved: the denylist).
        let failed_serial = serial
            .or_else(|| Denylist::load(&self.root).ok().and_then(|l| l.find(&failed).and_then(|e| e.deploy_serial)));
        let failed_again = booted.as_ref().is_some_and(|b| runs_failed_deployment(&failed, failed_serial, b));
        let outcome = rollback_outcome(&reason, &failed, failed_again);
        if failed_again {
            tracing::warn!(target, commit = %failed, "the reboot of the rollback came up on the failed commit again");
        }
        self.fail(target, outcome, false).await
    }

    /// MCO's OS checks for `cur` on the running boot.
    async fn verify_os(&mut self, os: &super::OsAgent, cur: &MachineConfig) -> Result<(), String> {
        let Ok(Some(image)) = osimage::parse(&cur.spec.os_image_url) else {
            return self.verify_kargs(os, cur).await;
        };
        if let Some(entry) = Denylist::load(&self.root).ok().and_then(|l| l.find(&image.checksum).cloned()) {
            return Err(format!(
                "OS commit {} failed on this node ({}); not retried until the desired config changes",
                image.checksum, entry.reason
            ));
        }
        match self.booted_checksum(os).await.map_err(|e| e.to_string())? {
            Some(b) => kargs::verify_booted(&cur.spec.os_image_url, &image.checksum, Some(&b))?,
            // A directory sysroot (tests) boots nothing: there is nothing to compare.
            None => return Ok(()),
        }
        self.verify_kargs(os, cur).await
    }

    async fn verify_kargs(&mut self, os: &super::OsAgent, cur: &MachineConfig) -> Result<(), String> {
        if rolled_back::recorded(&self.root) {
            // A helper that cannot say which deployment runs is no finding (as below).
            if let Ok(Some(running)) = self.booted_deployment(os).await {
                if let Some(recorded) = rolled_back::kargs_for(&self.root, &running.checksum, running.serial) {
                    carries_configs_kargs(&recorded, &cur.spec.kernel_arguments, &running)?;
                }
            }
        }
        if cur.spec.kernel_arguments.is_empty() {
            return Ok(());
        }
        let booted = self.booted_checksum(os).await.map(|b| b.is_some()).unwrap_or(false);
        if !booted {
            return Ok(());
        }
        let cmdline = match &self.booted_os.cmdline {
            Some(c) => c.clone(),
            None => {
                let c = os.handle.run_read(|b| b.booted_cmdline()).await.map_err(|e| e.to_string())?;
                self.booted_os.cmdline = Some(c.clone());
                c
            }
        };
        kargs::verify(&cmdline, &cur.spec.kernel_arguments)
    }

    /// Whether the node runs another commit than `want`, the one its config names, when the two
    /// configs of an update name the same. After a rollback they do: the current config is the
    /// failed one, the node runs the previous commit. A new config that kept that osImageURL and
    /// changed only files did no OS work, and the drift check then found the node on the wrong
    /// commit (Degraded, "expected target osImageURL"). The config names the commit, so the
    /// update deploys it, as any new config with a denylisted commit tries it again. Asks the
    /// helper at most once per process on a booted host; when the helper cannot say, the update
    /// goes on as a file-only one and the drift check afterwards reports what runs.
    async fn runs_other_commit(&mut self, want: Option<&str>) -> bool {
        match self.commit_differs(want).await {
            Ok(differs) => differs,
            Err(e) => {
                tracing::warn!(error = %e, "could not read the running OS commit; updating as the configs say");
                false
            }
        }
    }

    /// Whether the node runs the deployment a rollback went back to ([`rolled_back`]): its
    /// kernel arguments are the config's before the failed one, so a config that keeps the failed
    /// one's osImageURL and kernel arguments still has OS work to do. After an update that
    /// changed only kernel arguments failed, a fix that changed only a file wrote it and reported
    /// Done on the deployment without the arguments (a booted host then went Degraded on the
    /// drift check; one whose update removed an argument kept it for good). False when there is
    /// no record (no helper call then) or the helper cannot say.
    pub(super) async fn runs_rolled_back_deployment(&mut self) -> bool {
        let Some(os) = self.os.clone() else { return false };
        if !rolled_back::recorded(&self.root) {
            return false;
        }
        match self.read_os_status(&os).await {
            Ok(st) => st
                .booted
                .or_else(|| st.deployments.first().cloned())
                .is_some_and(|running| rolled_back::load(&self.root, &running).is_some()),
            Err(e) => {
                tracing::warn!(error = %e, "could not read the running OS deployment; updating as the configs say");
                false
            }
        }
    }

    /// [`Self::runs_other_commit`], with the helper's failure to say returned.
    async fn commit_differs(&mut self, want: Option<&str>) -> Result<bool, String> {
        let (Some(os), Some(want)) = (self.os.clone(), want) else { return Ok(false) };
        let running = match self.booted_checksum(&os).await {
            // A sysroot that boots nothing runs its default deployment.
            Ok(None) => self
                .read_os_status(&os)
                .await
                .map(|st| st.deployments.first().map(|d| d.checksum.clone()))
                .map_err(|e| e.to_string()),
            booted => booted.map_err(|e| e.to_string()),
        };
        match running? {
            Some(running) if deploys_other_commit(Some(want), &running) => {
                tracing::info!(running = %running, config = %want, "the node runs another OS commit than its config names (after a rollback): deploying the config's");
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    /// Whether the node may run another commit than the one `spec` names (none, or an
    /// osImageURL this node cannot read: no). When the helper cannot say, yes: the caller then
    /// does the update again, which asks again and deploys only what differs, where taking it
    /// for the same commit rebooted into the old OS for good.
    pub(super) async fn may_run_other_commit_than(&mut self, spec: &MachineConfigSpec) -> bool {
        let image = osimage::parse(&spec.os_image_url).ok().flatten();
        match self.commit_differs(image.as_ref().map(|i| i.checksum.as_str())).await {
            Ok(differs) => differs,
            Err(e) => {
                tracing::warn!(error = %e, "could not read the running OS commit; doing the interrupted update again");
                true
            }
        }
    }

    /// The booted deployment's commit (`None` on a sysroot that boots nothing). Asked once per
    /// process: it cannot change before the next boot, which restarts the agent, so drift checks
    /// on an idle node do not wake the helper.
    async fn booted_checksum(&mut self, os: &super::OsAgent) -> Result<Option<String>, OsError> {
        Ok(self.booted_deployment(os).await?.map(|b| b.checksum))
    }

    /// The booted deployment, read from the helper once per boot.
    async fn booted_deployment(&mut self, os: &super::OsAgent) -> Result<Option<Booted>, OsError> {
        if let Some(b) = &self.booted_os.deployment {
            return Ok(b.clone());
        }
        let st = self.read_os_status(os).await?;
        let b = st.booted.map(|d| Booted { checksum: d.checksum, serial: d.deploy_serial });
        self.booted_os.deployment = Some(b.clone());
        Ok(b)
    }

    /// MCO's on-disk validation: files and units, then (with an OS backend) the booted commit and
    /// kernel arguments.
    pub(super) async fn verify_current(&mut self, cur: &MachineConfig) -> Result<(), String> {
        crate::engine::verify(&self.root, cur)?;
        match self.os.clone() {
            Some(os) => self.verify_os(&os, cur).await,
            None => Ok(()),
        }
    }
}

/// Whether the booted deployment already is what the update asks for: the commit (`image`, when
/// the config names one) with the kernel arguments the change from `old_kargs` to `new_kargs`
/// gives it. Nothing is booted on a directory sysroot (tests): that is never a match.
fn booted_matches(
    booted: Option<&DeploymentInfo>,
    image: Option<&str>,
    old_kargs: &[String],
    new_kargs: &[String],
) -> bool {
    booted.is_some_and(|b| {
        image.is_none_or(|c| c == b.checksum)
            && kargs::compute(&b.kernel_arguments, old_kargs, new_kargs) == b.kernel_arguments
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A change of kernel arguments alone on the booted commit is not "already there" (only the
    /// VMs boot a deployment, so no sandboxed test reaches this); nor is another commit.
    #[test]
    fn the_booted_os_matches_only_with_the_commit_and_the_arguments() {
        let v = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let booted = DeploymentInfo {
            checksum: "c1".into(),
            kernel_arguments: v(&["root=/dev/vda", "nosmt"]),
            booted: true,
            ..Default::default()
        };
        // (The arguments asked for are the booted ones less the old config's, plus the new's.)
        assert!(booted_matches(Some(&booted), Some("c1"), &v(&["nosmt"]), &v(&["nosmt"])), "already booted with it");
        assert!(!booted_matches(Some(&booted), Some("c1"), &v(&[]), &v(&["nosmt"])), "added once more");
        assert!(booted_matches(Some(&booted), None, &v(&["nosmt"]), &v(&["nosmt"])), "no image named, nothing changed");
        assert!(
            !booted_matches(Some(&booted), Some("c1"), &v(&["nosmt"]), &v(&["nosmt", "quiet"])),
            "an argument added"
        );
        assert!(!booted_matches(Some(&booted), Some("c1"), &v(&["nosmt"]), &v(&[])), "an argument removed");
        assert!(!booted_matches(Some(&booted), Some("c2"), &v(&[]), &v(&["nosmt"])), "another commit");
        assert!(!booted_matches(None, Some("c1"), &v(&[]), &v(&["nosmt"])), "nothing booted");
    }

    fn staged(restaged: u32) -> Staged {
        Staged { image: None, old_kargs: vec![], new_kargs: vec!["k=1".into()], restaged, serial: None, from: None }
    }

    #[test]
    fn without_the_os_helper_kernel_arguments_fail_the_update_before_anything_is_done() {
        let spec = |kargs: &[&str]| MachineConfigSpec {
            kernel_arguments: kargs.iter().map(|s| s.to_string()).collect(),
            ..Default::default()
        };
        let r = without_os_helper(&spec(&[]), &spec(&["nosmt"]), false).unwrap_err();
        assert!(!r.unreconcilable, "Degraded: the node can take it once the helper runs");
        assert!(
            r.message.starts_with("spec.kernelArguments: kernel arguments (nosmt) need the OS helper (an ostree host)"),
            "{}",
            r.message
        );
        assert!(without_os_helper(&spec(&["a"]), &spec(&["a", "b"]), false).is_err());
        // Unchanged, or all removed: nothing to apply.
        assert!(without_os_helper(&spec(&["a"]), &spec(&["a"]), false).is_ok());
        assert!(without_os_helper(&spec(&["a"]), &spec(&[]), false).is_ok());
        let ext = MachineConfigSpec { extensions: vec!["usbguard".into()], ..Default::default() };
        assert!(never_applied(&ext).unwrap_err().message.starts_with("spec.extensions: "));
        let rt = MachineConfigSpec { kernel_type: "realtime".into(), ..Default::default() };
        assert!(never_applied(&rt).unwrap_err().message.starts_with("spec.kernelType: "));
        assert!(never_applied(&MachineConfigSpec { kernel_type: "default".into(), ..Default::default() }).is_ok());
        // A new osImageURL stays Unreconcilable.
        let os = MachineConfigSpec { os_image_url: "aloft:c1".into(), ..spec(&["nosmt"]) };
        assert!(without_os_helper(&spec(&[]), &os, true).unwrap_err().unreconcilable);
    }

    #[test]
    fn the_running_commit_decides_whether_the_config_s_commit_is_deployed() {
        assert!(deploys_other_commit(Some("c3"), "c2"), "rolled back from c3: c3 is deployed again");
        assert!(!deploys_other_commit(Some("c2"), "c2"));
        // No osImageURL: kernel arguments alone redeploy the running commit.
        assert!(!deploys_other_commit(None, "c2"));
    }

    fn booted(checksum: &str, serial: i32) -> Booted {
        Booted { checksum: checksum.into(), serial }
    }

    fn entry(reason: &str, serial: Option<i32>) -> crate::os::denylist::Entry {
        crate::os::denylist::Entry {
            checksum: "c3".into(),
            deploy_serial: serial,
            reason: reason.into(),
            at: "2026-12-02T00:00:00Z".into(),
        }
    }

    #[test]
    fn a_restart_on_a_commit_that_failed_its_health_checks_rolls_back_again() {
        let why = "app does not answer on :8080";
        let failed = entry(why, Some(0));
        let again = RollbackCut::Again { failure: why.into() };
        assert_eq!(rollback_cut(Some(&failed), Some(&booted("c3", 0)), "c3"), Some(again.clone()));
        // Booted into the previous commit: the rollback went through; Degraded with its reason.
        let done = RollbackCut::Done { failure: why.into(), booted: "c2".into() };
        assert_eq!(rollback_cut(Some(&failed), Some(&booted("c2", 0)), "c3"), Some(done));
        assert_eq!(
            rolled_back_reason(why, "c3", "c2"),
            "app does not answer on :8080; rolled back from OS commit c3 to c2"
        );
        // Until the reboot into c2, the reason says the rollback is under way; after it, done.
        let going = rolling_back_reason(why, "c3", "c2");
        assert_eq!(going, "app does not answer on :8080; rolling back from OS commit c3 to c2");
        assert_eq!(rolled_back(&going), rolled_back_reason(why, "c3", "c2"));
        // The check's output may say anything: only the last (the agent's own) words change.
        let odd = rolling_back_reason("x; rolling back from OS commit a to b", "c3", "c2");
        assert_eq!(rolled_back(&odd), "x; rolling back from OS commit a to b; rolled back from OS commit c3 to c2");
        // A phase an older agent saved said "rolled back" already.
        let old = rolled_back_reason(why, "c3", "c2");
        assert_eq!(rolled_back(&old), old);
        // The boot after the rollback: on the previous commit, done; on the failed one again,
        // not rolled back, and the reason says so; nothing booted to compare: done.
        assert_eq!(rollback_outcome(&going, "c3", false), rolled_back(&going));
        let again = rollback_outcome(&going, "c3", true);
        assert!(
            again.starts_with("app does not answer on :8080; rolling back from OS commit c3 to c2 did not take: "),
            "{again}"
        );
        assert!(again.contains("came up on the failed deployment of c3 again"), "{again}");
        // A commit that never failed here is verified as usual.
        assert_eq!(rollback_cut(None, Some(&booted("c3", 0)), "c3"), None);
        assert_eq!(rollback_cut(None, Some(&booted("c2", 0)), "c3"), None);
        // A directory sysroot boots nothing; a phase saved by an older agent has no checksum.
        assert_eq!(rollback_cut(Some(&failed), None, "c3"), None);
        assert_eq!(rollback_cut(Some(&failed), Some(&booted("", 0)), ""), None);
        assert_eq!(rollback_cut(Some(&failed), Some(&booted("c2", 0)), ""), None);
    }

    /// An update that changed only kernel arguments deploys the running commit again (serial 1
    /// next to serial 0): its failure is told from the deployment rolled back to by the serial.
    /// By the commit alone, the boot after the rollback said "did not take: came up on c3 again",
    /// and a restart cut between the rollback and its saved phase rolled back once more, into the
    /// failed deployment.
    #[test]
    fn a_failed_kernel_argument_update_is_told_from_the_deployment_rolled_back_to() {
        let why = "app does not answer on :8080";
        let failed = entry(why, Some(1));
        assert_eq!(
            rollback_cut(Some(&failed), Some(&booted("c3", 1)), "c3"),
            Some(RollbackCut::Again { failure: why.into() }),
            "still on the failed deployment"
        );
        assert_eq!(
            rollback_cut(Some(&failed), Some(&booted("c3", 0)), "c3"),
            Some(RollbackCut::Done { failure: why.into(), booted: "c3".into() }),
            "on the previous deployment of the same commit"
        );
        assert!(runs_failed_deployment("c3", Some(1), &booted("c3", 1)));
        assert!(!runs_failed_deployment("c3", Some(1), &booted("c3", 0)));
        assert!(!runs_failed_deployment("c3", Some(1), &booted("c2", 1)));
        // An entry an older agent saved names no serial: the commit decides, as before.
        assert!(runs_failed_deployment("c3", None, &booted("c3", 0)));
        assert!(!runs_failed_deployment("", None, &booted("", 0)), "a phase saved without the commit");
        // The words: not "from OS commit c3 to c3".
        let going = rolling_back_reason(why, "c3", "c3");
        assert_eq!(
            going,
            "app does not answer on :8080; rolling back to the previous deployment of OS commit c3 (the failed one \
             was that commit with the update's kernel arguments)"
        );
        assert_eq!(rolled_back(&going), rolled_back_reason(why, "c3", "c3"));
        assert!(rolled_back(&going).contains("; rolled back to the previous deployment of OS commit c3 ("));
        assert_eq!(rollback_outcome(&going, "c3", false), rolled_back(&going));
    }

    /// An update that only removed a kernel argument deploys the running commit again, and the
    /// config has no argument left to look for: after a boot that lost the staged deployment
    /// (power gone before ostree finalized it), the commit and the command line both passed, and
    /// the node reported Done with the argument still set. The deploy serial tells the two
    /// deployments apart.
    #[test]
    fn a_boot_is_judged_by_the_staged_deployments_serial() {
        let c = "ab".repeat(32);
        let with = |serial| Staged { old_kargs: vec!["k=1".into()], new_kargs: vec![], serial, ..staged(0) };
        assert_eq!(came_up_on_staged(Some(&with(Some(3))), &c, Some(&booted(&c, 3))), Ok(()));
        let lost = came_up_on_staged(Some(&with(Some(3))), &c, Some(&booted(&c, 2))).unwrap_err();
        assert_eq!(lost, format!("the node booted OS deployment {c}.2, not {c}.3, the one staged for this update"));
        // Another commit with the staged serial is not it either.
        assert!(came_up_on_staged(Some(&with(Some(3))), &c, Some(&booted(&"cd".repeat(32), 3))).is_err());
        // A lost deployment is staged again (this is the failure the restage path takes).
        assert!(matches!(after_failed_verify(Some(with(Some(3))), false, lost), FailedVerify::StageAgain(..)));
        // Nothing to compare: a record an older agent saved, a host that boots nothing, no record.
        assert_eq!(came_up_on_staged(Some(&with(None)), &c, Some(&booted(&c, 2))), Ok(()));
        assert_eq!(came_up_on_staged(Some(&with(Some(3))), &c, None), Ok(()));
        assert_eq!(came_up_on_staged(None, &c, Some(&booted(&c, 2))), Ok(()));
    }

    /// Only the deployment the update was staged from is known to carry its "old" arguments from
    /// aloft: a node that comes up on a third one (chosen in the boot menu, or the rollback's
    /// pick when a pinned deployment stands first) gets no record, which would hold it to
    /// arguments it may never have had. A record an older agent saved (no `from`) takes any.
    #[test]
    fn only_the_deployment_staged_from_is_recorded_with_the_old_arguments() {
        let (a, b) = ("ab".repeat(32), "cd".repeat(32));
        let deployment = |checksum: &str, serial| DeploymentInfo {
            checksum: checksum.into(),
            deploy_serial: serial,
            ..Default::default()
        };
        let staged = Staged { from: Some(DeploymentId { checksum: a.clone(), serial: 2 }), ..staged(0) };
        assert!(went_back_to_start(&staged, &deployment(&a, 2)));
        assert!(!went_back_to_start(&staged, &deployment(&a, 1)), "another deployment of the commit");
        assert!(!went_back_to_start(&staged, &deployment(&b, 2)), "another commit");
        let older = Staged { from: None, ..staged };
        assert!(went_back_to_start(&older, &deployment(&b, 7)));
    }

    /// A staged deployment lost for good leaves the node on the deployment from before the
    /// update: recorded as a rollback, and the drift check then holds the node to the arguments
    /// that deployment carries, whatever the config says (its removal included).
    #[test]
    fn a_deployment_left_by_a_lost_update_must_carry_the_configs_arguments() {
        let c = "ab".repeat(32);
        let staged = Staged { serial: Some(3), ..staged(0) };
        assert!(not_the_staged(&staged, &c, &booted(&c, 2)), "an older deployment of the commit");
        assert!(not_the_staged(&staged, &c, &booted(&"cd".repeat(32), 3)), "another commit");
        assert!(!not_the_staged(&staged, &c, &booted(&c, 3)), "the staged one");
        // Without a serial (an older agent's record) only another commit tells.
        let unnumbered = Staged { serial: None, ..staged.clone() };
        assert!(!not_the_staged(&unnumbered, &c, &booted(&c, 2)));
        assert!(not_the_staged(&unnumbered, &c, &booted(&"cd".repeat(32), 2)));
        let v = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let running = booted(&c, 2);
        let err = carries_configs_kargs(&v(&["nosmt"]), &v(&[]), &running).unwrap_err();
        assert_eq!(
            err,
            format!(
                "unexpected kernel arguments: the node runs OS deployment {c}.2, which carries [nosmt] from an \
                 earlier config, not []"
            )
        );
        assert!(carries_configs_kargs(&v(&["a", "b"]), &v(&["b", "a"]), &running).is_ok(), "the order is not judged");
        assert!(carries_configs_kargs(&v(&["a"]), &v(&["a", "a"]), &running).is_err(), "nor twice for once");
        assert!(carries_configs_kargs(&v(&["a b"]), &v(&["b", "a"]), &running).is_ok(), "split as the arithmetic does");
        assert!(carries_configs_kargs(&v(&[]), &v(&[]), &running).is_ok());
    }

    /// Only a counter at -1 with another deployment booted is a fallback; the reason says how
    /// many boots and where the counting is.
    #[test]
    fn a_fallback_is_the_counter_run_out_with_another_deployment_booted() {
        let deployment = |checksum: &str, serial: i32| DeploymentInfo {
            checksum: checksum.into(),
            deploy_serial: serial,
            booted: true,
            ..Default::default()
        };
        let counting = |counter: Option<&str>| BootCounting {
            grubenv: "/boot/grub2/grubenv".into(),
            boot_counter: counter.map(str::to_string),
            boot_success: Some("0".into()),
        };
        let status = |booted: Option<DeploymentInfo>, c: Option<BootCounting>| OsStatus {
            booted,
            boot_counting: c,
            ..Default::default()
        };
        let staged = Staged { serial: Some(1), ..staged(0) };
        let fell = |st: OsStatus| fell_back_from(st, "new", Some(&staged));
        let (c, booted) = fell(status(Some(deployment("old", 0)), Some(counting(Some("-1"))))).expect("a fallback");
        assert_eq!((c.boot_counter.as_deref(), booted.checksum.as_str()), (Some("-1"), "old"));
        assert!(fell(status(Some(deployment("old", 0)), Some(counting(Some("0"))))).is_none(), "attempts left");
        assert!(fell(status(Some(deployment("old", 0)), Some(counting(None)))).is_none(), "nothing armed");
        assert!(fell(status(Some(deployment("old", 0)), None)).is_none(), "no counting on this host");
        assert!(fell(status(None, Some(counting(Some("-1"))))).is_none(), "nothing booted");
        assert!(fell(status(Some(deployment("new", 1)), Some(counting(Some("-1"))))).is_none(), "the staged one runs");
        // Another deployment of the staged commit (a kernel-argument update): still a fallback.
        assert!(fell(status(Some(deployment("new", 0)), Some(counting(Some("-1"))))).is_some());
        let reason = fell_back_failure("new", 3, &counting(Some("-1")));
        assert!(
            reason.starts_with("the new OS deployment of commit new never came up: the bootloader gave up on it after 3 boots (boot counting in /boot/grub2/grubenv)"),
            "{reason}"
        );
        assert!(fell_back_failure("new", 1, &counting(None)).contains("after 1 boot ("));
        // At a start outside an update: kept only while the failed deployment is the default.
        let queued = |c: Option<&str>, rollback_queued: bool| OsStatus {
            rollback_queued,
            ..status(Some(deployment("old", 0)), Some(counting(c)))
        };
        assert!(fallback_not_kept(&queued(Some("-1"), true)));
        assert!(!fallback_not_kept(&queued(Some("-1"), false)), "the booted one is the default already");
        assert!(!fallback_not_kept(&queued(Some("2"), true)), "no fallback: a rollback the agent queued");
        assert!(!fallback_not_kept(&queued(None, true)));
    }

    #[test]
    fn a_lost_staged_deployment_is_staged_again_at_most_twice_then_degraded() {
        let why = || "expected target osImageURL x, have y".to_string();
        assert_eq!(after_failed_verify(Some(staged(0)), false, why()), FailedVerify::StageAgain(staged(1), why()));
        assert_eq!(after_failed_verify(Some(staged(1)), false, why()), FailedVerify::StageAgain(staged(2), why()));
        let FailedVerify::Degraded(reason) = after_failed_verify(Some(staged(2)), false, why()) else {
            panic!("a third lost boot must not stage again");
        };
        assert!(reason.starts_with(&why()) && reason.contains("staged again 2 times"), "{reason}");
        assert!(reason.contains("ostree-finalize-staged.service"), "{reason}");
        // A commit that failed its health checks here is never staged again.
        assert_eq!(after_failed_verify(Some(staged(0)), true, why()), FailedVerify::Degraded(why()));
        // A phase saved by an older agent has no request to stage again.
        assert_eq!(after_failed_verify(None, false, why()), FailedVerify::Degraded(why()));
    }
}
