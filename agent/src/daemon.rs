//! The daemon: enroll, recover, verify the disk, then follow the Node. Every decision is made by
//! [`decide`] from the persisted phase, the Node's annotations and the on-disk current config; the
//! effects of each step are in [`Agent`]'s methods, each persisting the next phase first.

use crate::changes;
use crate::coordinator::{NodeApi, NodeView, Standing};
use crate::dbus_status::{AgentStatus, StatusService};
use crate::enroll;
use crate::host::{Root, ServiceManager};
use crate::metrics::Metrics;
use crate::state::{self, Phase};
use aloft_api::annotations as ann;
use aloft_api::MachineConfig;
use aloft_client::{Client, ClientConfig};
use anyhow::{Context, Result};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

mod osflow;
pub use osflow::{OsAgent, OsOptions};

/// The OS update's failpoints (see [`crate::failpoints`]), one after each of its durable steps:
/// the VM tests hold the agent at one and cut the power there. Stable: tests refer to them.
pub mod os_points {
    /// The deployment is staged; the phase still says Staging.
    pub const AFTER_STAGE: &str = "os-after-stage";
    /// The phase says RebootingStaged; the current config is not saved yet.
    pub const AFTER_REBOOTING_STAGED: &str = "os-after-rebooting-staged";
    /// Both are saved; the reboot is not asked for yet.
    pub const AFTER_CURRENT_SAVED: &str = "os-after-current-saved";
    /// The health checks failed and the commit is denylisted; the previous deployment is not the
    /// default yet.
    pub const AFTER_DENYLIST: &str = "os-after-denylist";
    /// The previous deployment is the default; the phase does not say RollingBack yet.
    pub const AFTER_ROLLBACK: &str = "os-after-rollback";
}

/// Every failpoint of the OS update.
pub const OS_FAILPOINTS: &[&str] = &[
    os_points::AFTER_STAGE,
    os_points::AFTER_REBOOTING_STAGED,
    os_points::AFTER_CURRENT_SAVED,
    os_points::AFTER_DENYLIST,
    os_points::AFTER_ROLLBACK,
];

/// How the daemon was started.
#[derive(Debug, Clone)]
pub struct Options {
    pub coordinator: String,
    pub ca_pem: Option<Vec<u8>>,
    pub bootstrap_token: Option<String>,
    pub node_name: String,
    pub labels: BTreeMap<String, String>,
    pub root: PathBuf,
    pub bus_address: Option<String>,
    pub metrics_listen: Option<String>,
    pub drain_timeout: Duration,
    pub workload_stop_timeout: Duration,
    /// How long the host may stay up after logind took a reboot request.
    pub reboot_timeout: Duration,
    /// The OS backend (an ostree sysroot); `None`: files and units only, the booted OS is kept.
    pub os: Option<OsOptions>,
    /// Which agent build this is (`aloft_api::build_info!()` in the binary): the Node's
    /// `kubeletVersion` and the log say it.
    pub build: aloft_api::build::BuildInfo,
}

/// What to do next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Nothing to do: wait for the Node to change.
    Wait,
    /// Tell the coordinator we are Done on `current` (annotations lag behind the disk).
    ReportDone,
    /// Move to `target`.
    Update { target: String },
    /// The reboot into `target` happened: verify, uncordon, report Done.
    FinishAfterReboot { target: String },
    /// Asked for a reboot that has not happened (a crash in between): ask again.
    Reboot { target: String },
    /// A reboot the agent decided on after a restart: drain (handshake, workloads stopped), then
    /// reboot into `target`.
    DrainAndReboot { target: String },
    /// Booted after an OS update to `target`: verify the booted commit and kernel arguments, run
    /// the health checks, then finish (or roll back).
    VerifyOs { target: String },
    /// Booted back into the previous OS after failed health checks: report Degraded.
    FinishRollback { target: String },
}

/// The phase to resume in after a restart found the agent in `phase`, when it is not `phase`
/// itself. Acting (running the rebootless actions: the files are written and the current config
/// saved) cannot be resumed: which actions ran is unknown, and the diff that chose them is gone
/// with the old config. Rebooting applies all of it, as for an apply that recovery finished;
/// without this the restarted agent reported Done with the actions (a service restart, a
/// reload) never run. The reboot drains first, as every reboot does (MCO: a Reboot action
/// always drains); rebooting straight away skipped the cordon, the drain hooks and the
/// workloads' stop.
pub fn resume_after_restart(phase: &Phase, current: &str) -> Option<Phase> {
    match phase {
        Phase::Acting { target } if target == current => Some(drain_for_reboot(target)),
        _ => None,
    }
}

/// The phase as status shows it. A reboot asked for in an earlier boot has happened: the agent is
/// finishing the update (verifying, reporting Done), and "rebooting" would send whoever looks
/// to wait for a reboot that is over.
fn shown_phase(phase: &Phase, boot_now: &str) -> &'static str {
    match phase {
        Phase::Rebooting { boot_id, .. } | Phase::RebootingStaged { boot_id, .. } if boot_id != boot_now => {
            "finishing-after-reboot"
        }
        _ => phase.name(),
    }
}

/// Whether a failure of the update of `target` may be given up rather than reported, should the
/// coordinator ask for another config ([`Agent::superseded`]): only when the disk is back on the
/// `current` config, untouched by it. A failure of the config the disk holds (its check after the
/// reboot, drift) or one with an apply left unfinished is the node's own, and reported whatever
/// the coordinator asks for now: given up, the part no later check looks at (an OS commit, a
/// kernel argument) was lost for good.
fn may_be_given_up(target: &str, current: &str, apply_unfinished: bool) -> bool {
    target != current && !apply_unfinished
}

/// What [`Agent::finish_undo`] found and did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum UndoLeft {
    /// No undo left unfinished: the disk holds the current config.
    Nothing,
    /// The current config's files and units were written back.
    Finished,
    /// Writing them back failed, and was reported.
    Failed,
    /// The disk holds the config the update asks for (the update undone, tried again): its
    /// apply goes from it, over its own files (a rollback of that apply leaves them, as the undo's
    /// record says); its actions are still planned from the current config, so the action that
    /// failed runs again.
    Kept,
}

/// What [`Agent::undo_update`] needs to be tried again.
#[derive(Debug, Clone)]
struct UndoToStart {
    target: String,
    before: Option<MachineConfig>,
    old_spec: aloft_api::MachineConfigSpec,
    new_spec: aloft_api::MachineConfigSpec,
    reason: String,
    /// The reason reported meanwhile.
    said: String,
}

/// The phase of a reboot the agent decided on: drain (`drain-<target>`), then reboot.
fn drain_for_reboot(target: &str) -> Phase {
    Phase::DrainingForReboot { target: target.to_string(), request: format!("drain-{target}") }
}

/// The state machine's transition function. `current` is the on-disk current config's name
/// ("" before the first apply), `boot_id` the boot we run in.
pub fn decide(phase: &Phase, node: &NodeView, current: &str, boot_id: &str) -> Step {
    let desired = node.annotation(ann::DESIRED_CONFIG);
    // An OS update finishes (verified, health-checked, or rolled back) before anything else,
    // even if the coordinator has changed its mind meanwhile.
    match phase {
        Phase::RebootingStaged { target, boot_id: asked_in, .. } if target == current => {
            return if asked_in != boot_id {
                Step::VerifyOs { target: target.clone() }
            } else {
                Step::Reboot { target: target.clone() }
            };
        }
        Phase::Verifying { target, .. } if target == current => return Step::VerifyOs { target: target.clone() },
        Phase::RollingBack { target, boot_id: asked_in, .. } if target == current => {
            return if asked_in != boot_id {
                Step::FinishRollback { target: target.clone() }
            } else {
                Step::Reboot { target: target.clone() }
            };
        }
        _ => {}
    }
    // The update's files are written and its config saved, and what should follow (the
    // rebootless actions, or the reboot) may not have run: its phase was not saved (a full disk
    // failed the save and the step), so this process goes on from the phase before. Reported
    // Done from there, the node ran the new config's files without its restarts or its reboot.
    // As after a restart ([`resume_after_restart`]), it drains and reboots to be safe.
    if let Phase::DrainingForReboot { target, .. } | Phase::Applying { target } | Phase::Acting { target } = phase {
        if target == current {
            return Step::DrainAndReboot { target: target.clone() };
        }
    }
    if let Phase::Rebooting { target, boot_id: asked_in } = phase {
        if target == current {
            return if asked_in != boot_id {
                Step::FinishAfterReboot { target: target.clone() }
            } else {
                Step::Reboot { target: target.clone() }
            };
        }
    }
    if desired.is_empty() || desired == current {
        // Done with whatever was asked; make the annotations say so.
        let reported = node.annotation(ann::STATE) == "Done"
            && node.annotation(ann::CURRENT_CONFIG) == current
            && node.annotation(ann::REASON).is_empty();
        return match phase {
            Phase::Idle if reported => Step::Wait,
            Phase::Degraded { .. } if desired.is_empty() => Step::Wait,
            _ if matches!(phase, Phase::Degraded { target, .. } if target == current) => Step::Wait,
            _ => Step::ReportDone,
        };
    }
    match phase {
        // An unreconcilable target stays refused until the coordinator asks for another.
        Phase::Unreconcilable { target, .. } if target == desired => Step::Wait,
        _ => Step::Update { target: desired.to_string() },
    }
}

/// How often a settled node's disk is checked against its current config besides what the
/// drift watch reports.
const RECHECK: Duration = Duration::from_secs(600);

/// MCO's force file, beneath the root: while it exists, the next update skips the validation of
/// the disk against the current config (and removes it), as MCO's daemon does.
pub const FORCE_FILE: &str = "run/machine-config-daemon-force";

/// Whether MCO's force file is there: anything at its path but a directory with something in it
/// (which nobody made as the force file, and which a removal would not take away).
fn force_file_present(path: &Path) -> bool {
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.is_dir() => std::fs::read_dir(path).is_ok_and(|mut d| d.next().is_none()),
        Ok(_) => true,
        Err(_) => false,
    }
}

/// What the OS part of an update changes, for its disruption plan: what the booted OS has to
/// become (`os_work`, from `os_prepare`), not what the two configs say. The booted OS already as
/// the config asks (on a node with the OS helper) needs no reboot for an osImageURL or
/// kernel-argument change; OS work the configs do not show (a node on a deployment a rollback
/// left, whose next config keeps the commit and the arguments) drains and reboots as any OS
/// update does: planned from the configs' changes alone, a next config that changed only SSH keys
/// (no disruption) staged and rebooted without a drain.
fn os_work_changes(
    changes: &mut crate::disruption::Changes,
    os_work: Option<&aloft_api::os::StageRequest>,
    has_os: bool,
) {
    match os_work {
        None if has_os => {
            changes.os_update = false;
            changes.kernel_arguments = false;
        }
        None => {}
        Some(w) if w.image.is_some() => changes.os_update = true,
        Some(_) => changes.kernel_arguments = true,
    }
}

/// Whether an update starting in `phase` validates the disk against the current config
/// (`current`) first, as MCO does: only when the agent is settled on it, i.e. Done on it (Idle)
/// or Degraded on it (drift, a failed check after its reboot, an OS rollback: all with its files
/// written and saved). Any other phase has an update or its recovery in flight, and the disk may
/// hold the target's files on purpose (a power cut after the files were written and before the
/// current config was saved: Staging, RebootingStaged; an undo that failed: Degraded on the
/// target): judging it against the current config would call that recovery drift.
pub fn validates_before_update(phase: &Phase, current: &str) -> bool {
    match phase {
        Phase::Idle => !current.is_empty(),
        Phase::Degraded { target, .. } => !current.is_empty() && target == current,
        _ => false,
    }
}

/// The saved config holds every file's contents, secrets included: the root's alone to read,
/// as the journal's backups are.
const CURRENT_CONFIG_MODE: u32 = 0o600;

fn current_config_path(root: &Root) -> PathBuf {
    root.state_dir().join("currentconfig.json")
}

/// The on-disk current config: the source of truth for what this node runs (as MCO's
/// /etc/machine-config-daemon/currentconfig), winning over the Node's annotation.
pub fn load_current(root: &Root) -> Result<Option<MachineConfig>> {
    let path = current_config_path(root);
    match std::fs::read_to_string(&path) {
        Ok(s) => {
            // Written readable by all before (its files' contents, 0600 secrets among them, for
            // any local user to read): made the root's alone on the next start.
            use std::os::unix::fs::PermissionsExt;
            if std::fs::metadata(&path).is_ok_and(|m| m.permissions().mode() & 0o077 != 0) {
                if let Err(e) = std::fs::set_permissions(&path, std::fs::Permissions::from_mode(CURRENT_CONFIG_MODE)) {
                    tracing::warn!(path = %path.display(), error = %e, "cannot make the saved config readable by root alone");
                }
            }
            Ok(Some(serde_json::from_str(&s).context("currentconfig.json is corrupt")?))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// Durably replaces the on-disk current config (written, fsynced, renamed, directory fsynced):
/// from then on a restart counts `mc` as what the node runs.
fn save_current(root: &Root, mc: &MachineConfig) -> Result<()> {
    crate::durable::replace_private(&current_config_path(root), &serde_json::to_vec(mc)?)?;
    tracing::info!(config = mc.metadata.name.as_str(), "current config saved");
    Ok(())
}

/// Lets the kernel free the files the last update replaced ([`crate::reclaim`]), on a thread
/// of its own: on a loaded disk this takes a while, and nothing waits for it.
fn release_replaced() {
    if crate::reclaim::held() > 0 {
        tokio::task::spawn_blocking(crate::reclaim::release);
    }
}

fn status_path(root: &Path) -> PathBuf {
    root.join("var/lib/aloft/status.json")
}

/// `aloft-agent status [--json]`: from the agent's D-Bus object when it is reachable (on the
/// system bus, or `bus_address`), else from the status file it writes beside its journal.
pub async fn print_status(root: &Path, json: bool, bus_address: Option<&str>) -> Result<()> {
    // With no agent answering on D-Bus, the file it last wrote is shown, and the command then
    // fails saying so: a stale "Done" must not read as the state of a running agent.
    let (st, not_running) = match crate::dbus_status::fetch(bus_address).await {
        Ok(st) => (st, None),
        Err(bus_err) => {
            let path = status_path(root);
            let text = std::fs::read_to_string(&path).with_context(|| {
                format!(
                    "agent status not on D-Bus ({bus_err}) nor at {} (is aloft-agent running on this root? \
                     One still starting, waiting to enroll, says what it waits for in \
                     `systemctl status aloft-agent` and its log)",
                    path.display()
                )
            })?;
            let st = serde_json::from_str::<AgentStatus>(&text).context("status.json is corrupt")?;
            let why = format!(
                "aloft-agent is not running (no answer on D-Bus: {bus_err}); shown is the status it last wrote to {}, at {}",
                path.display(),
                st.updated_at
            );
            (st, Some(why))
        }
    };
    let text = if json {
        format!("{}\n", serde_json::to_string_pretty(&st)?)
    } else {
        let or_none = |s: &str| if s.is_empty() { "<none>".to_string() } else { s.to_string() };
        let mut t = format!("State:    {}\n", st.state);
        t += &format!("Current:  {}\n", or_none(&st.current_config));
        t += &format!("Desired:  {}\n", or_none(&st.desired_config));
        if !st.progress.is_empty() {
            t += &format!("Progress: {}\n", st.progress);
        }
        if !st.reason.is_empty() {
            t += &format!("Reason:   {}\n", st.reason);
        }
        t += &format!("Updated:  {}\n", st.updated_at);
        if !st.version.is_empty() {
            t += &format!("Version:  {}\n", st.version);
        }
        t
    };
    // A reader that went away (`| head -2`) ends the output, not the process with a panic.
    use std::io::Write;
    match std::io::stdout().lock().write_all(text.as_bytes()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => return Ok(()),
        other => other?,
    }
    match not_running {
        Some(why) => Err(anyhow::anyhow!(why)),
        None => Ok(()),
    }
}

/// The running agent.
pub struct Agent {
    pub root: Root,
    pub api: NodeApi,
    pub services: Arc<dyn ServiceManager>,
    /// The agent's own limit on waiting for its drain (zero: none; the pool's applies at the
    /// coordinator).
    pub drain_timeout: Duration,
    /// Bound on stopping the units of aloft-workloads.target before a drained update.
    pub workload_stop_timeout: Duration,
    /// How long the host may stay up after logind took a reboot request before the agent says
    /// it did not happen and asks again.
    pub reboot_timeout: Duration,
    phase: Phase,
    current: Option<MachineConfig>,
    desired: String,
    /// The coordinator's `lastAppliedDrain` in the newest view of the Node (a pick's answer is
    /// never taken back while the node updates: the update may go on from it).
    drain_answer: String,
    /// Feeds the D-Bus status object, when one is served.
    pub status_tx: Option<tokio::sync::watch::Sender<AgentStatus>>,
    pub metrics: Option<Arc<Metrics>>,
    /// The running build, in the status (`aloft-agent status`, D-Bus); empty when not told.
    pub version: String,
    /// This process already asked logind to reboot: do not ask again on every Node change. A new
    /// process in the same boot (a crash before the reboot) asks again.
    reboot_asked: bool,
    /// When logind took this process's last reboot request.
    reboot_asked_at: Option<tokio::time::Instant>,
    /// The OS backend and health checks, when this node has an ostree sysroot.
    pub os: Option<OsAgent>,
    /// The config a background pre-stage download was started for (not started twice).
    prestage_started: Option<String>,
    /// Whether a download progress left on the Node by an earlier run of the agent (stopped
    /// mid-download) was looked for, and taken off.
    stale_progress_checked: bool,
    /// The deployments as last read from the OS helper, for the status (see `os_status_json`).
    os_status: serde_json::Value,
    /// The running boot's commit and command line, once read.
    booted_os: osflow::BootedOs,
    /// The drift watch armed for the named current config, kept across Node changes so an edit
    /// made while the Node was being re-read is still seen (its event waits in the channel).
    drift_watch: Option<(String, crate::drift::DriftWatch)>,
    /// When the disk is checked again whatever the drift watch saw ([`RECHECK`] after the last
    /// check; sooner while Degraded on the current config). Kept across the waits for the Node,
    /// which end every 5 minutes: a timer started afresh by each wait never fired, and an edit
    /// the watch cannot see (through a hard link, past an inotify overflow) stayed unnoticed.
    recheck_at: Option<tokio::time::Instant>,
    /// An interrupted apply could neither be finished nor rolled back: the node is reported
    /// Degraded with this reason and recovery is retried with backoff, instead of the daemon
    /// exiting (every start failed the same way: a crash loop, with the Node still saying Done).
    recovery_error: Option<String>,
    /// The undo of a failed update that could not start (its record or the config before could
    /// not be written: a full disk): tried again before anything else at each step, as a failed
    /// recovery is. Left to the next step, the phase a failed action leaves (Acting, the update's
    /// config saved current) read as an update done: the node reported Done with its action
    /// failed.
    undo_to_start: Option<UndoToStart>,
    /// The reboot an update waits for did not happen: logind refused it (an inhibitor lock,
    /// logind not answering), or took it and the host stayed up past [`Agent::reboot_timeout`].
    /// The node is reported Degraded with this reason, the phase stays, and the reboot is asked
    /// for again.
    reboot_error: Option<String>,
    /// The update this process started: when, for `aloft_agent_apply_*`, and the config the node
    /// ran before it, which the Working reports name until the change takes effect (MCO moves
    /// `currentConfig` at Done, not before the reboot).
    started: Option<(std::time::Instant, String)>,
    /// The Node's `currentConfig` as last read: what a Working report keeps naming before a
    /// reboot that an earlier process of this boot prepared.
    reported_current: String,
    /// Since when the OS helper could not be asked to verify the boot after an OS update, and
    /// whether the Node has been told.
    helper_wait: Option<(std::time::Instant, bool)>,
    /// A staged OS deployment no update of this process means to boot may exist: set at start
    /// (a crash may have left one), when a stage failed (the helper may finish it after the
    /// client gave up) and when the records of a stage could not be saved; cleared once the
    /// helper says nothing is staged ([`Agent::drop_stray_stage`]).
    maybe_stray_stage: bool,
    /// A stage may still run in the helper: this process gave up on one (a client timeout), or
    /// started in a phase whose stage an earlier process of this boot may have left running.
    stage_may_run: bool,
    /// When this process started: a new OS deployment's time to reach the coordinator runs
    /// from here ([`Agent::os_reach_left`]).
    started_at: tokio::time::Instant,
    /// The boot's OS is not the staged deployment the reach limit is for (that deployment was
    /// lost): nothing to roll back, so the limit no longer applies in this process.
    os_reach_moot: bool,
}

impl Agent {
    pub fn new(root: Root, api: NodeApi, services: Arc<dyn ServiceManager>, drain_timeout: Duration) -> Result<Self> {
        let phase = state::load(&root)?;
        let current = load_current(&root)?;
        if current.is_some() {
            // The node has a config of its own: the first boot's (the pool's secrets) has no use.
            crate::first_boot::forget_config(&root);
        }
        Ok(Agent {
            root,
            api,
            services,
            drain_timeout,
            workload_stop_timeout: Duration::from_secs(300),
            reboot_timeout: Duration::from_secs(900),
            phase,
            current,
            desired: String::new(),
            status_tx: None,
            metrics: None,
            version: String::new(),
            reboot_asked: false,
            reboot_asked_at: None,
            os: None,
            prestage_started: None,
            stale_progress_checked: false,
            drain_answer: String::new(),
            os_status: serde_json::Value::Null,
            booted_os: osflow::BootedOs::default(),
            drift_watch: None,
            recheck_at: None,
            recovery_error: None,
            undo_to_start: None,
            reboot_error: None,
            started: None,
            reported_current: String::new(),
            helper_wait: None,
            maybe_stray_stage: true,
            stage_may_run: true,
            started_at: tokio::time::Instant::now(),
            os_reach_moot: false,
        })
    }

    pub fn phase(&self) -> &Phase {
        &self.phase
    }

    fn current_name(&self) -> String {
        self.current.as_ref().map(|m| m.metadata.name.clone()).unwrap_or_default()
    }

    /// Persist the phase, then tell everyone who looks (status file, logs).
    fn enter(&mut self, phase: Phase, progress: &str) -> Result<()> {
        state::save(&self.root, &phase)?;
        if phase != self.phase {
            tracing::info!(from = self.phase.name(), to = phase.name(), target = phase.target().unwrap_or(""), "phase");
        }
        self.phase = phase;
        self.write_status(progress)
    }

    /// Publish the status: the local file, D-Bus, sd_notify STATUS= and the state metric.
    fn write_status(&self, progress: &str) -> Result<()> {
        let undo = self.undo_to_start.as_ref().map(|u| &u.said);
        let (state, reason) = match self.recovery_error.as_ref().or(self.reboot_error.as_ref()).or(undo) {
            Some(reason) => ("Degraded", reason.as_str()),
            None => (self.phase.mco_state(), self.phase.reason()),
        };
        // While an update runs, the config the node runs until its Done, as the Node says it
        // (MCO moves currentConfig at Done): the saved one is the target from the apply on.
        let current = if self.phase.mco_state() == "Working" { self.running_config() } else { self.current_name() };
        let mut st = AgentStatus {
            state: state.into(),
            current_config: current,
            desired_config: self.desired.clone(),
            reason: reason.into(),
            progress: {
                let shown = shown_phase(&self.phase, &state::boot_id(&self.root));
                if progress.is_empty() {
                    shown.into()
                } else {
                    format!("{shown}: {progress}")
                }
            },
            os: self.os_status_json(),
            version: self.version.clone(),
            updated_at: String::new(),
        };
        st.touch();
        let path = status_path(self.root.path());
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let tmp = path.with_extension("json.tmp");
        std::fs::write(&tmp, serde_json::to_vec_pretty(&st)?)?;
        crate::reclaim::hold_path(&path);
        std::fs::rename(&tmp, &path)?;
        crate::notify::status(&format!("{} {}", st.state, st.progress));
        if let Some(m) = &self.metrics {
            // MCO's state, as the Node says it; the phase is a series of its own.
            m.set_state(&st.state);
            m.set_phase(self.phase.name());
        }
        if let Some(tx) = &self.status_tx {
            tx.send_replace(st);
        }
        Ok(())
    }

    /// Leave the update of `target` as Degraded (retried) or Unreconcilable (not retried). The
    /// report names `target` as the failed config (drift names the current config: it fails on
    /// that), so the rollout counts the failure for the config it is about.
    async fn fail(&mut self, target: &str, reason: String, unreconcilable: bool) -> Result<()> {
        if let Some(desired) = self.superseded(target).await {
            return self.abandon(target, &desired, &reason).await;
        }
        tracing::warn!(target, %reason, unreconcilable, "update failed");
        // An update's failure (one this process started, or a phase of one after a restart);
        // not drift found on a settled node, which no update asked for.
        if self.started.is_some()
            || !matches!(self.phase, Phase::Idle | Phase::Degraded { .. } | Phase::Unreconcilable { .. })
        {
            self.observe_apply(if unreconcilable { "unreconcilable" } else { "failure" });
        }
        let phase = if unreconcilable {
            Phase::Unreconcilable { target: target.into(), reason: reason.clone() }
        } else {
            Phase::Degraded { target: target.into(), reason: reason.clone() }
        };
        if let Err(e) = self.enter(phase.clone(), "") {
            // The failure is said all the same (a full disk fails the save, and the node stayed
            // Working with no reason, its pool not Degraded); the report needs no local disk.
            tracing::warn!(error = %format!("{e:#}"), "cannot save the failed phase; reporting the failure all the same");
            self.phase = phase;
        }
        let current = self.current_name();
        self.api.report_failure(self.phase.mco_state(), &reason, &current, target).await?;
        release_replaced();
        Ok(())
    }

    /// The config the coordinator asks for now, when it is no longer `target` and the update of
    /// `target` left the disk on the current config (it failed before the apply, or the apply
    /// was rolled back). A failure of an update the coordinator took back (a revert while the
    /// agent fetched, waited for its drain or applied) is nobody's failure: reported, it said
    /// Degraded with `failedConfig` naming a config no longer wanted, over the new
    /// `desiredConfig`, until the next retry a minute later.
    async fn superseded(&self, target: &str) -> Option<String> {
        if !may_be_given_up(target, &self.current_name(), crate::engine::apply_unfinished(&self.root)) {
            return None;
        }
        // An undo that failed left the disk on `target`'s files, not on the current config's
        // (its own record says so, and the journal too until the next apply): given up, nothing
        // said so, and the next step reported Done over them. (Normalized as every apply's
        // specs are.)
        let current = self.current.as_ref().map(|c| &c.spec);
        if !matches!(crate::undo::pending(&self.root, current), Ok(None)) {
            return None;
        }
        if let Some(cur) = current {
            let spec = crate::engine::normalize(cur).unwrap_or_else(|_| cur.clone());
            if !crate::engine::journal_settled_on(&self.root, &spec) {
                return None;
            }
        }
        let node = self.api.get().await.ok()?;
        let desired = node.annotation(ann::DESIRED_CONFIG);
        (!desired.is_empty() && desired != target).then(|| desired.to_string())
    }

    /// Give up the update of `target`, which the coordinator no longer asks for: the node is back
    /// on its current config (Idle), and the loop goes on at once with what is asked now. The
    /// workloads it stopped come back; the uncordon request goes with the next Done, as after
    /// any drain.
    async fn abandon(&mut self, target: &str, desired: &str, why: &str) -> Result<()> {
        tracing::info!(target, desired, stopped_by = why, "update given up: the coordinator asks for another config");
        self.observe_apply("superseded");
        // What this agent stopped (a drain request alone stopped nothing); a failed start is
        // tried again by the Done that follows, and reported there.
        if let Err(e) = crate::workloads::start_after(&self.root, self.services.as_ref(), false).await {
            tracing::warn!(error = %e, "cannot start the workloads again");
        }
        self.enter(Phase::Idle, "")?;
        release_replaced();
        Ok(())
    }

    /// Report Done; `uncordon`: the node was drained for this update, and the same write asks
    /// the coordinator to uncordon it.
    async fn report_done(&mut self, uncordon: bool) -> Result<()> {
        let current = self.current_name();
        self.enter(Phase::Idle, "")?;
        self.api.report_done(&current, uncordon).await?;
        // Reported: the finished apply's journal record has served (it only bridges a crash
        // between the journal's commit and the current config's save), and so have the files
        // it replaced. Both go now, after the report, instead of at the start of the next
        // update, where they would delay it.
        // Done: the disk holds the current config (an undo left unfinished was finished first,
        // or the update it undid applied after all). The record goes first: left behind with the
        // journal gone (a crash between the two), nothing would say it is stale, and the next
        // update would write its config "back" over a disk that does not hold it.
        crate::undo::done(&self.root)?;
        crate::engine::forget_finished_apply(&self.root)?;
        release_replaced();
        crate::reclaim::trim_heap();
        Ok(())
    }

    /// The config the node runs until an update's reboot, for the Working reports (MCO moves
    /// `currentConfig` at Done): the one before the update, when this process started it; after
    /// a restart, what the Node says (the Working report before the restart named it); else the
    /// saved one.
    fn running_config(&self) -> String {
        match &self.started {
            Some((_, before)) => before.clone(),
            None if !self.reported_current.is_empty() => self.reported_current.clone(),
            None => self.current_name(),
        }
    }

    /// Count an update as finished with `result`, timed when this process started it (one
    /// finished after its reboot, by the next boot's agent, is counted but not timed).
    fn observe_apply(&mut self, result: &str) {
        let started = self.started.take();
        if let Some(m) = &self.metrics {
            m.observe_apply(result, started.map(|(at, _)| at.elapsed()));
        }
    }

    /// Take off the download progress an earlier run of the agent left on the Node: stopped
    /// mid-download (a crash, a restart, a power cut), it never ended it, and `get nodes` showed
    /// a download nothing runs until the next state report. At the first step, before this
    /// process starts a download of its own; one that fails (the coordinator away) is tried
    /// again at the next step.
    async fn drop_stale_progress(&mut self, node: &NodeView) {
        let stale = node.annotation(ann::PROGRESS);
        if stale.is_empty() {
            self.stale_progress_checked = true;
            return;
        }
        match self.api.annotate(&[(ann::PROGRESS, None)]).await {
            Ok(_) => {
                tracing::info!(progress = stale, "took off a download progress an earlier run left on the Node");
                self.stale_progress_checked = true;
            }
            Err(e) => tracing::debug!(error = %format!("{e:#}"), "the stale download progress is still on the Node"),
        }
    }

    /// One step of the loop; returns the step taken.
    pub async fn step(&mut self, node: &NodeView) -> Result<Step> {
        // A drop that failed before (the helper away) is tried again at every step, whatever the
        // node does: settled, nothing else would, and the next reboot of an admin would boot it.
        if self.maybe_stray_stage {
            if let Err(e) = self.drop_stray_stage("tried again").await {
                tracing::warn!(error = %e, "cannot drop a staged OS deployment an earlier update may have left");
            }
        }
        if !self.stale_progress_checked {
            self.drop_stale_progress(node).await;
        }
        let desired = node.annotation(ann::DESIRED_CONFIG);
        if desired != self.desired {
            self.desired = desired.to_string();
            // Published at once, not at the next phase change: after a start with nothing to
            // do, `aloft-agent status` said `Desired: <none>` while the Node named a config.
            self.write_status("")?;
        }
        self.drain_answer = node.annotation(ann::LAST_APPLIED_DRAIN).to_string();
        self.reported_current = node.annotation(ann::CURRENT_CONFIG).to_string();
        if self.recovery_error.is_some() {
            // Nothing else may run over a half-applied disk (nor report it Done): retry first.
            self.startup().await?;
            if self.recovery_error.is_some() {
                return Ok(Step::Wait);
            }
        }
        if let Some(u) = self.undo_to_start.take() {
            let target = u.target.clone();
            self.undo_update(&u.target, u.before, &u.old_spec, &u.new_spec, u.reason).await?;
            // Not Wait: an undo given up for a revert (Idle, nothing written to the Node) must
            // go on to report Done at once, not wait out the Node's idle watch.
            return Ok(Step::Update { target });
        }
        self.maybe_prestage(node);
        let mut step = decide(&self.phase, node, &self.current_name(), &state::boot_id(&self.root));
        if step == Step::Wait && self.repair_forced() {
            // MCO's escape hatch out of `content mismatch`: the force file skips the check and
            // writes the config again, without waiting for another one to be asked for.
            step = Step::Update { target: self.current_name() };
        }
        match &step {
            Step::Wait => {}
            Step::ReportDone => {
                // The config is written back over an update whose undo failed before it is
                // reported Done; the failure is that update's, retried with backoff until then.
                let current = self.current_name();
                let undone = self.phase.target().filter(|t| *t != current).unwrap_or(&current).to_string();
                if self.finish_undo(&undone, None).await? == UndoLeft::Failed {
                    return Ok(step);
                }
                // An update taken back after its stage (the coordinator went back to this
                // config while it crashed or failed) leaves nothing for the next reboot to boot.
                if let Err(e) = self.drop_stray_stage("as the node goes back to its config").await {
                    tracing::warn!(error = %e, "cannot drop a staged OS deployment an earlier update may have left");
                }
                // Drained and never uncordoned (e.g. the coordinator went back to this config
                // mid-update): the workloads come back and the uncordon request goes with Done.
                let drained = node.annotation(ann::DESIRED_DRAIN).starts_with("drain-");
                // Only what this agent stopped is started and judged: a drain request may never
                // have been answered, and a workload failed for its own reasons is not this
                // update's. A start that fails is reported, not retried as a silent step.
                if let Err(e) = crate::workloads::start_after(&self.root, self.services.as_ref(), false).await {
                    let current = self.current_name();
                    self.fail(&current, e.to_string(), false).await?;
                    return Ok(step);
                }
                self.report_done(drained).await?
            }
            Step::Update { target } => self.update(target).await?,
            Step::FinishAfterReboot { target } => self.finish(target, true).await?,
            Step::Reboot { target } if !self.reboot_asked => match self.phase {
                // Reported Working again only once a refused reboot goes through: each retry
                // would flip the Node between Working and Degraded.
                Phase::Rebooting { .. } if self.reboot_error.is_none() => self.reboot(target).await?,
                // The OS phases keep what they know; only the request is repeated.
                _ => self.ask_reboot(target).await?,
            },
            Step::Reboot { target } if self.reboot_overdue().is_some() => self.reboot_not_happening(target).await?,
            Step::Reboot { .. } => {}
            Step::DrainAndReboot { target } => self.drain_and_reboot(target).await?,
            Step::VerifyOs { target } => self.verify_os_boot(target).await?,
            Step::FinishRollback { target } => self.finish_rollback(target).await?,
        }
        Ok(step)
    }

    /// Whether MCO's force file asks to write the current config again: the node is Degraded on
    /// it (drift, or a failed check after its reboot) with nothing else to do. MCO's daemon then
    /// skips the on-disk check and runs a full update from the config to itself, the documented
    /// way back from `content mismatch`; without this the file waited for an unrelated later
    /// update, and disarmed that update's check.
    fn repair_forced(&self) -> bool {
        let current = self.current_name();
        !current.is_empty()
            && matches!(&self.phase, Phase::Degraded { target, .. } if *target == current)
            && force_file_present(&self.root.path().join(FORCE_FILE))
    }

    /// Removes MCO's force file (an empty directory too, as MCO's `os.Remove` does); whether it
    /// was there and is gone. Used once: by the update it let go on. One that cannot be removed
    /// is not honoured (logged): honoured, it would skip every later update's check.
    fn take_force_file(&self) -> Result<bool> {
        let force = self.root.path().join(FORCE_FILE);
        if !force_file_present(&force) {
            return Ok(false);
        }
        let removed = match std::fs::remove_file(&force) {
            Err(e) if e.kind() == std::io::ErrorKind::IsADirectory => std::fs::remove_dir(&force),
            r => r,
        };
        match removed {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
            Err(e) => {
                tracing::warn!(force = %force.display(), error = %e, "cannot remove the force file: not honoured");
                Ok(false)
            }
        }
    }

    /// MCO validates the disk against the current config before an update: a node whose managed
    /// file was edited by hand stays Degraded and is not updated, so the edit is not silently
    /// overwritten, until the file is repaired or the force file exists (then it is removed and
    /// the update goes on). Only from a settled state ([`validates_before_update`], and the apply
    /// journal saying the disk holds the current config), and only files, units and drop-ins:
    /// the OS commit has its own checks (a rolled-back commit is not drift). Returns whether to
    /// go on.
    async fn disk_matches_current(&mut self, target: &str) -> Result<bool> {
        let Some(cur) = self.current.clone() else { return Ok(true) };
        let name = cur.metadata.name.clone();
        // Normalized, as every apply's specs are (the journal compares them).
        let spec = crate::engine::normalize(&cur.spec).unwrap_or_else(|_| cur.spec.clone());
        if !validates_before_update(&self.phase, &name) || !crate::engine::journal_settled_on(&self.root, &spec) {
            return Ok(true);
        }
        let force = self.root.path().join(FORCE_FILE);
        if self.take_force_file()? {
            tracing::warn!(force = %force.display(), target, "force file present: the disk is not validated before this update");
            return Ok(true);
        }
        let Err(drift) = crate::engine::verify_files(&self.root, &cur) else { return Ok(true) };
        if let Some(m) = &self.metrics {
            m.set_drift(true);
        }
        let what = if drift.path.is_empty() { "the disk".to_string() } else { drift.path.clone() };
        let reason = format!(
            "{}; not updating to {target} over it: restore {what} as {name} has it, or create {} to update anyway \
             (the update then overwrites it)",
            drift.reason(&name),
            force.display()
        );
        tracing::warn!(%reason, "the disk does not match the current config: not updating");
        self.fail(&name, reason, false).await?;
        Ok(false)
    }

    /// [`Agent::disk_matches_current`] for a host's first update from the config its first
    /// boot wrote ([`crate::first_boot`]): MCO's daemon validates the disk against the
    /// node-annotations' config the same way. A file changed since (by hand, or by a pointer
    /// config that appends to it) keeps the node Degraded, naming it, until it is put
    /// back or the force file exists (then the update goes on from that config: as every
    /// update, it writes all the target's files, over what is there, and removes what only
    /// that config had). Only while no update has written anything yet (the journal holds no
    /// apply of another config, and the phase is settled). Returns whether to go on.
    async fn disk_matches_first_boot(&mut self, target: &str, base: &MachineConfig) -> Result<bool> {
        let name = base.metadata.name.as_str();
        let spec = crate::engine::normalize(&base.spec).unwrap_or_else(|_| base.spec.clone());
        if !matches!(self.phase, Phase::Idle | Phase::Degraded { .. })
            || !crate::engine::journal_settled_on(&self.root, &spec)
        {
            return Ok(true);
        }
        let force = self.root.path().join(FORCE_FILE);
        // Taken whether or not it is needed, as before any update: left, it would disarm some
        // later update's check.
        if self.take_force_file()? {
            tracing::warn!(force = %force.display(), target, "force file present: the first boot's files are not validated");
            return Ok(true);
        }
        let Err(drift) = crate::engine::verify_files(&self.root, base) else { return Ok(true) };
        if let Some(m) = &self.metrics {
            m.set_drift(true);
        }
        let what = if drift.path.is_empty() { "the disk".to_string() } else { drift.path.clone() };
        let reason = format!(
            "{} (written at first boot); not updating to {target} over it: restore {what} as {name} has it, or \
             create {} to update anyway (the update then writes {target}'s files over what is there)",
            drift.reason(name),
            force.display()
        );
        tracing::warn!(%reason, "the disk does not match the config the first boot wrote: not updating");
        self.fail(target, reason, false).await?;
        Ok(false)
    }

    async fn update(&mut self, target: &str) -> Result<()> {
        // An update to the current config is a forced repair ([`Agent::repair_forced`]): the
        // force file skips the on-disk check, and goes now.
        let repair = target == self.current_name();
        if repair {
            if !self.take_force_file()? {
                return Ok(());
            }
            tracing::warn!(target, "force file: writing the current config again over the disk");
        } else if !self.disk_matches_current(target).await? {
            return Ok(());
        }
        // A host whose first boot wrote a config (Ignition, from the coordinator's
        // `/config/<pool>`): its first update goes from that config, as MCO's daemon goes from
        // the node-annotations' one, once the disk is found to hold it.
        let first_boot = if self.current.is_none() { crate::first_boot::read(&self.root) } else { None };
        if let Some(base) = first_boot.as_ref().and_then(|f| f.config.as_ref()) {
            if !self.disk_matches_first_boot(target, base).await? {
                return Ok(());
            }
        }
        self.started = Some((std::time::Instant::now(), self.current_name()));
        self.enter(
            Phase::Preparing { target: target.into() },
            "reading the rendered config and the disruption policy",
        )?;
        let current = self.current_name();
        // A forced repair writes the saved current config again: nothing to fetch, and only
        // changes that always reboot (an OS rolled back from it) can be found, which no policy
        // decides.
        let repair = if repair { self.current.clone() } else { None };
        // Delivered with the pick on the Node's watch, or two reads at once; the Working report
        // waits for the plan, so that it can carry the drain request (one write on the
        // coordinator instead of two).
        let (fetched, policy) = match &repair {
            Some(mc) => (Ok(mc.clone()), Ok(crate::disruption::Policy::default())),
            None => self.api.update_inputs(target).await,
        };
        let new = match fetched {
            Ok(mc) => mc,
            Err(e) => return self.fail(target, format!("{e:#}"), false).await,
        };
        // The config the update goes from. Its undo writes back only a config of the node's own:
        // saved current, the first boot's (Ignition's part alone) would read as that config fully
        // taken, its OS part never applied.
        let first_boot_base = first_boot.as_ref().and_then(|fb| crate::first_boot::base(fb, &new, &self.root));
        if let Some(base) = &first_boot_base {
            tracing::info!(target, from = %base.metadata.name, "updating from the config written at first boot");
        }
        let before = self.current.clone();
        let old = before.clone().or(first_boot_base).unwrap_or_default();
        let (old_spec, new_spec) = match (crate::engine::normalize(&old.spec), crate::engine::normalize(&new.spec)) {
            (Ok(o), Ok(n)) => (o, n),
            // The field says where, and which of the two configs is at fault.
            (Err(e), _) => {
                let reason =
                    format!("the current config {} is invalid: {}: {}", old.metadata.name, e.field(), e.message());
                return self.fail(target, reason, false).await;
            }
            (_, Err(e)) => return self.fail(target, format!("{}: {}", e.field(), e.message()), false).await,
        };
        // An earlier update whose undo failed left its files: written back first, as its undo
        // would have, so that this update is validated and planned on the disk of the config it
        // goes from, and a refusal of it leaves that disk (unless it is that update, tried
        // again: its apply goes over its own files).
        let undo = self.finish_undo(target, Some(&new_spec)).await?;
        if undo == UndoLeft::Failed {
            return Ok(());
        }
        let checked = match crate::engine::validate(&self.root, &old_spec, &new_spec) {
            Ok(c) => c,
            Err(refusal) => return self.fail(target, refusal.message, refusal.unreconcilable).await,
        };
        let mut changes = changes::between(&old_spec, &new_spec);
        // On a host whose first boot wrote a config, the originals of the first update's paths
        // are decided as MCO decides them there (the OS's copy in /usr/etc, else none), whether
        // the update goes from that config or (without its file) from none: what is on disk
        // may be that config's, not the OS's.
        if first_boot.is_some() {
            if let Err(e) = checked.take_first_boot_originals(&self.root) {
                let reason = format!("recording the originals of the first boot's files: {e}");
                return self.fail(target, reason, false).await;
            }
        }
        let os_work = match self.os_prepare(target, &old_spec, &new_spec).await {
            Ok(w) => w,
            Err(refusal) => return self.fail(target, refusal.message, refusal.unreconcilable).await,
        };
        os_work_changes(&mut changes, os_work.as_ref(), self.os.is_some());
        let policy = match policy {
            Ok(p) => p,
            Err(e) => return self.fail(target, format!("{e:#}"), false).await,
        };
        let mut plan = crate::disruption::plan(&changes, &policy);
        if repair.is_some() && !plan.reboot {
            let units =
                new_spec.config.pointer("/systemd/units").and_then(|u| u.as_array()).is_some_and(|u| !u.is_empty());
            plan = crate::disruption::Plan::repair(units);
        }
        tracing::info!(target, reboot = plan.reboot, drain = plan.drain, reason = %plan.reason(), "update planned");
        if plan.drain {
            let request = format!("drain-{target}");
            self.enter(
                Phase::Draining { target: target.into(), request: request.clone() },
                "waiting for the coordinator to drain this node",
            )?;
            if self.drain_answer == request {
                // Drained when the coordinator picked this node: nothing to wait for.
                self.api.report_working(&current, Some(&request)).await;
            } else if let Err(e) =
                self.api.working_and_drain(&current, &request, Some(target), self.drain_timeout).await
            {
                return self.fail(target, format!("{e:#}"), false).await;
            }
            self.write_status("stopping the workloads of aloft-workloads.target")?;
            if let Err(e) =
                crate::workloads::stop_marked(&self.root, self.services.as_ref(), self.workload_stop_timeout).await
            {
                return self.fail(target, e.to_string(), false).await;
            }
        }
        // A finished record of an earlier apply must not be mistaken for this apply's outcome
        // by a restart in the Applying phase (see `startup`): gone, durably, before that phase.
        // Normally `report_done` removed it already and this only looks.
        if let Err(e) = crate::engine::forget_finished_apply(&self.root) {
            return self.fail(target, format!("{e:#}"), false).await;
        }
        if !plan.drain {
            self.api.report_working(&current, None).await;
        }
        self.enter(Phase::Applying { target: target.into() }, "writing files and units")?;
        // After a drain or an OS download (minutes) the host is validated again; straight after
        // the check it had no time to change, and each validation (Ignition decoding of both
        // configs, host lookups) was about a sixth of the agent's CPU in an update.
        let applied = if undo == UndoLeft::Kept {
            crate::engine::apply(&self.root, &new_spec, &new_spec, self.services.as_ref()).await
        } else if plan.drain || os_work.is_some() {
            crate::engine::apply(&self.root, &old_spec, &new_spec, self.services.as_ref()).await
        } else {
            crate::engine::apply_checked(&self.root, &checked, self.services.as_ref()).await
        };
        if let Err(e) = applied {
            let reason = match e.downcast_ref::<crate::apply::ApplyError>() {
                // Rolled back onto the files it went over: this update's own, left by its undo.
                Some(crate::apply::ApplyError::RolledBack { reason }) if undo == UndoLeft::Kept => {
                    format!("{reason}; the disk still holds {target}'s files (its undo failed before)")
                }
                _ => format!("{e:#}"),
            };
            return self.apply_failed(target, reason).await;
        }
        let staged = match os_work {
            Some(req) => {
                let record = crate::state::Staged { from: self.staging_from().await, ..crate::state::Staged::of(&req) };
                match self.os_stage(target, req).await {
                    Ok(d) => Some((d.checksum, crate::state::Staged { serial: Some(d.deploy_serial), ..record })),
                    // The files are written and nothing is staged: undone, as MCO rolls the
                    // files back when its OS update fails. A stage the client gave up on may
                    // still finish in the helper: it is dropped (waiting for it), never booted.
                    Err(e) => {
                        self.maybe_stray_stage = true;
                        self.stage_may_run = true;
                        if let Err(drop) = self.drop_stray_stage("after the stage failed").await {
                            tracing::warn!(error = %drop, "cannot drop what the failed stage may have left");
                        }
                        return self.undo_update(target, before, &old_spec, &new_spec, e).await;
                    }
                }
            }
            None => None,
        };
        // With an OS deployment staged, the phase says so before the current config is saved: a
        // power cut between the two must not leave the new config saved and the phase Staging,
        // which a restart reads as done and then finds the old OS booted (the staged deployment
        // is lost when the node goes down before ostree finalizes it). From RebootingStaged a
        // restart either redoes the update (current config not saved yet) or verifies the boot
        // and stages again.
        if let Some((checksum, record)) = &staged {
            crate::failpoints::hit(os_points::AFTER_STAGE);
            // Unsaved, the phase does not say the deployment is meant: whatever runs next
            // (this update again, or another config) drops it unless it stages its own.
            self.maybe_stray_stage = true;
            self.enter_rebooting_staged(target, checksum.clone(), record.clone())?;
            crate::failpoints::hit(os_points::AFTER_REBOOTING_STAGED);
        }
        let mut applied = new.clone();
        applied.spec = new_spec;
        save_current(&self.root, &applied)?;
        if first_boot.is_some() {
            crate::first_boot::forget_config(&self.root);
        }
        if staged.is_some() {
            // Phase and current config saved: the reboot is into this deployment.
            self.maybe_stray_stage = false;
        }
        self.current = Some(applied);
        if staged.is_some() {
            crate::failpoints::hit(os_points::AFTER_CURRENT_SAVED);
            return self.ask_reboot_staged(target).await;
        }
        if plan.reboot {
            return self.reboot(target).await;
        }
        self.enter(Phase::Acting { target: target.into() }, "running the rebootless actions")?;
        if let Err(e) = crate::engine::act(&plan, self.services.as_ref()).await {
            // What was applied: the current config until now.
            let new_spec = self.current.as_ref().map(|c| c.spec.clone()).unwrap_or_default();
            return self.undo_update(target, before, &old_spec, &new_spec, e.to_string()).await;
        }
        self.finish(target, plan.drain).await
    }

    /// MCO's answer to a failed rebootless action (a restart or reload of the policy) or a failed
    /// OS update, once `new_spec`'s files and units are written: the update is undone, the config
    /// before it current (again) and its files and units written back, and the node is Degraded
    /// on `target`, which is retried with backoff from the start. Left current after a failed
    /// action, the new config's failure read as drift on it that had cleared (its files were all
    /// there), and a few seconds later the node reported Done with the action never run: a
    /// broken service rolled through the whole pool, each node Done. Left on disk after a failed
    /// staging, a revert reported Done over the update's files.
    async fn undo_update(
        &mut self,
        target: &str,
        before: Option<MachineConfig>,
        old_spec: &aloft_api::MachineConfigSpec,
        new_spec: &aloft_api::MachineConfigSpec,
        reason: String,
    ) -> Result<()> {
        tracing::warn!(target, %reason, "the update failed after its files were written: undoing it");
        // The config before first: a crash in the undo's apply is finished forward by the
        // journal's recovery, onto the config that is current then.
        let Some(mc) = &before else {
            // No config before (the node's first): nothing of aloft's to write back, and "no
            // config" written over the host would take away what was there before aloft (the
            // SSH keys and password Ignition wrote). The files stay; with no config current the
            // retry starts from the beginning, and nothing reads the failure as drift cleared.
            match std::fs::remove_file(current_config_path(&self.root)) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e.into()),
                _ => {}
            }
            self.current = None;
            return self.fail(target, reason, false).await;
        };
        // Said before the config before is saved current: from then until the undo is done, the
        // disk may hold the update's files (`crate::undo`).
        let started = crate::undo::begin(&self.root, new_spec).and_then(|()| save_current(&self.root, mc));
        if let Err(e) = started {
            // The phase stays as the failure left it (from Acting a restart drains and reboots,
            // as after any interrupted action; from Staging it does the update again, or writes
            // the config before back for a revert: `finish_undo` reads the journal); the undo is
            // tried again first at each step, and the failure said meanwhile.
            let why = format!("{reason}; undoing the update cannot start (retrying): {e:#}");
            tracing::warn!(target, reason = %why, "cannot start the undo of a failed update");
            if let Err(report) = self.api.report_failure("Degraded", &why, &mc.metadata.name, target).await {
                tracing::warn!(error = %format!("{report:#}"), "cannot report the failed undo");
            }
            self.undo_to_start = Some(UndoToStart {
                target: target.to_string(),
                before: before.clone(),
                old_spec: old_spec.clone(),
                new_spec: new_spec.clone(),
                reason,
                said: why,
            });
            // Said locally as on the Node (the status file may be on the full disk: best effort).
            if let Err(status) = self.write_status("") {
                tracing::warn!(error = %format!("{status:#}"), "cannot write the status");
            }
            return Err(e.context("starting the undo of a failed update"));
        }
        self.current = before;
        if let Err(e) = crate::engine::apply(&self.root, new_spec, old_spec, self.services.as_ref()).await {
            // The undo's own rollback went back to `target`'s files: "rolled back to the
            // previous config" would say the opposite of where the disk is.
            let undo = match e.downcast_ref::<crate::apply::ApplyError>() {
                Some(crate::apply::ApplyError::RolledBack { reason }) => {
                    format!("{reason}; the disk still holds {target}'s files")
                }
                _ => format!("{e:#}"),
            };
            return self.apply_failed(target, format!("{reason}; undoing the update failed too: {undo}")).await;
        }
        crate::undo::done(&self.root)?;
        self.fail(target, format!("{reason} (the update was undone: back on the previous config)"), false).await
    }

    /// Writes the current config's files and units back over those of an update whose undo
    /// failed ([`crate::undo::pending`]), as that undo would have, unless `keep` is
    /// that update's config (tried again: its own apply goes over them). A failure is reported
    /// as `target`'s (Degraded, retried with backoff), never given up: nothing else may be
    /// planned from the current config while the disk holds another one.
    async fn finish_undo(&mut self, target: &str, keep: Option<&aloft_api::MachineConfigSpec>) -> Result<UndoLeft> {
        let Some(cur) = self.current.clone() else { return Ok(UndoLeft::Nothing) };
        // Normalized as every apply's specs are (the current config's spec, as saved).
        let cur_spec = crate::engine::normalize(&cur.spec).unwrap_or_else(|_| cur.spec.clone());
        let committed = crate::engine::last_committed(&self.root);
        let (undone, left, again) = match crate::undo::pending(&self.root, Some(&cur.spec)) {
            // The journal's last apply committed the current config after the record was written
            // (a crash or an error between the undo's apply and the record's removal): the disk
            // holds it, and a write-back would apply a diff from a config it does not hold
            // (deleting, for a path only the undone config had, the host's own file).
            Ok(Some(_)) if committed.as_ref() == Some(&cur_spec) => {
                crate::undo::done(&self.root)?;
                return Ok(UndoLeft::Nothing);
            }
            Ok(Some(u)) => (u, "the last update's undo failed and left its files and units on disk", " again"),
            // No undo recorded, but the journal's last apply wrote another config's files: an OS
            // update that never staged (a restart came between, or its undo could not start).
            // A revert reported Done over them.
            Ok(None) => match committed.filter(|c| *c != cur_spec) {
                Some(u) => {
                    // Said as an undo says it before anything clears the journal (the write-back's
                    // own apply does, and the update's): a write-back that fails, or a retry of
                    // that update that fails, must find it again.
                    if let Err(e) = crate::undo::begin(&self.root, &u) {
                        let reason = format!("the last update's files and units are on disk: {e:#} (retrying)");
                        self.fail(target, reason, false).await?;
                        return Ok(UndoLeft::Failed);
                    }
                    (u, "the last update's files and units are on disk, its config never saved current", "")
                }
                None => return Ok(UndoLeft::Nothing),
            },
            Err(e) => {
                let reason = format!("{e:#}; remove it once the disk holds {}'s files", cur.metadata.name);
                self.fail(target, reason, false).await?;
                return Ok(UndoLeft::Failed);
            }
        };
        if keep == Some(&undone) {
            return Ok(UndoLeft::Kept);
        }
        let name = cur.metadata.name.clone();
        tracing::warn!(config = %name, target, left, "writing the current config back over another config's files");
        self.write_status(&format!("writing {name}'s files and units back over those of the last update"))?;
        let Err(e) = crate::engine::apply(&self.root, &undone, &cur_spec, self.services.as_ref()).await else {
            crate::undo::done(&self.root)?;
            tracing::info!(config = %name, "the failed undo is finished: the disk holds the current config again");
            return Ok(UndoLeft::Finished);
        };
        let why = match e.downcast_ref::<crate::apply::ApplyError>() {
            Some(crate::apply::ApplyError::RolledBack { reason }) => {
                format!("{reason}; the disk still holds its files")
            }
            _ => format!("{e:#}"),
        };
        let reason = format!("{left}; writing {name}'s back failed{again}: {why}");
        self.apply_failed(target, reason).await?;
        Ok(UndoLeft::Failed)
    }

    /// An apply of `target` failed with `reason`: Degraded, and when its journal could not roll
    /// it back either, recovery is retried before anything else.
    async fn apply_failed(&mut self, target: &str, reason: String) -> Result<()> {
        // Marked before the report, which can fail: the step retried after that must be the
        // recovery, not another apply over the half-applied disk (refused as unfinished, and
        // that refusal reported in place of this reason).
        let unfinished = crate::engine::apply_unfinished(&self.root);
        if unfinished {
            self.recovery_error = Some(reason.clone());
        }
        let reported = self.fail(target, reason, false).await;
        if unfinished {
            self.write_status("")?;
        }
        reported
    }

    /// A reboot the agent decided on after a restart: the drain handshake as for any disruptive
    /// update (desiredDrain, wait for lastAppliedDrain: budgets, cordon, hooks), the workloads
    /// stopped, then the reboot. A failed drain is reported and retried (the phase stays: the
    /// node must not be reported Done before the reboot it needs).
    async fn drain_and_reboot(&mut self, target: &str) -> Result<()> {
        let request = format!("drain-{target}");
        self.enter(
            Phase::DrainingForReboot { target: target.into(), request: request.clone() },
            "waiting for the coordinator to drain this node before the reboot",
        )?;
        let current = self.running_config();
        let drained = if self.drain_answer == request {
            self.api.report_working(&current, Some(&request)).await;
            Ok(())
        } else {
            self.api.working_and_drain(&current, &request, None, self.drain_timeout).await
        };
        let stopped = match drained {
            Ok(()) => {
                self.write_status("stopping the workloads of aloft-workloads.target")?;
                crate::workloads::stop_marked(&self.root, self.services.as_ref(), self.workload_stop_timeout)
                    .await
                    .map_err(anyhow::Error::from)
            }
            Err(e) => Err(e),
        };
        if let Err(e) = stopped {
            let reason = format!("{e:#}");
            if let Err(report) = self.api.report_failure("Degraded", &reason, &current, target).await {
                tracing::warn!(error = %format!("{report:#}"), "cannot report the failed drain");
            }
            return Err(e.context("draining before the reboot"));
        }
        self.reboot(target).await
    }

    async fn reboot(&mut self, target: &str) -> Result<()> {
        let boot_id = state::boot_id(&self.root);
        self.enter(Phase::Rebooting { target: target.into(), boot_id }, "")?;
        let current = self.running_config();
        self.api.report_working_now(&current).await.ok();
        self.ask_reboot(target).await
    }

    /// Ask logind to reboot (the phase says why). A refusal (an inhibitor lock, logind not
    /// answering) keeps the phase: all but the reboot is done (files written, the OS deployment
    /// staged), so the update is not given up. The node is reported Degraded with the reason
    /// and the step fails, so that the loop asks again with backoff (5 s, doubling to 60 s), as
    /// MCO's daemon retries its reboot; a reboot by anyone else meanwhile finishes the update as
    /// the asked one would. (Made Degraded with the phase gone, the node waited on a config it
    /// had not booted into, and stayed Degraded after any later reboot.)
    async fn ask_reboot(&mut self, target: &str) -> Result<()> {
        if matches!(self.phase, Phase::Rebooting { .. }) {
            self.no_stray_stage_before_reboot(target).await?;
        }
        if matches!(self.phase, Phase::RebootingStaged { .. }) {
            self.arm_boot_counter().await;
        }
        self.ask_logind(target).await?;
        if self.reboot_error.take().is_some() {
            tracing::info!(target, "the reboot went through after all");
            self.write_status("")?;
            // The Node said Degraded for the refusal: it says what the node does now.
            let reported = match &self.phase {
                Phase::RollingBack { reason, .. } => {
                    let current = self.current_name();
                    self.api.report_failure("Degraded", reason, &current, target).await.map(|_| ())
                }
                _ => self.api.report_working_now(&self.running_config()).await.map(|_| ()),
            };
            if let Err(e) = reported {
                tracing::warn!(error = %format!("{e:#}"), "cannot report the reboot that went through");
            }
        }
        Ok(())
    }

    /// The request itself: taken (counted, and timed for [`Agent::reboot_overdue`]), or
    /// refused ([`Agent::reboot_refused`]).
    async fn ask_logind(&mut self, target: &str) -> Result<()> {
        if let Err(e) = self.services.reboot(&format!("aloft: applying {target}")).await {
            return self.reboot_refused(target, &e).await;
        }
        self.reboot_asked = true;
        self.reboot_asked_at = Some(tokio::time::Instant::now());
        if let Some(m) = &self.metrics {
            m.inc_reboots();
        }
        Ok(())
    }

    /// How long ago logind took this process's reboot request, once that is longer than
    /// [`Agent::reboot_timeout`]: the host should be down by then.
    fn reboot_overdue(&self) -> Option<Duration> {
        let asked = self.reboot_asked_at.filter(|_| self.reboot_asked)?;
        Some(asked.elapsed()).filter(|waited| *waited >= self.reboot_timeout)
    }

    /// How long to wait for the Node after the reboot was asked for: until the reboot is
    /// overdue, at most the usual five minutes.
    fn reboot_wait(&self) -> Duration {
        let left = match self.reboot_asked_at {
            Some(asked) if self.reboot_asked => self.reboot_timeout.saturating_sub(asked.elapsed()),
            _ => self.reboot_timeout,
        };
        left.min(Duration::from_secs(300))
    }

    /// logind refused the reboot of `target`'s update: Degraded with the reason, and an error
    /// for the loop's backoff.
    async fn reboot_refused(&mut self, target: &str, error: &crate::host::ServiceError) -> Result<()> {
        let reason = self.degraded_for_reboot(target, refused_reboot_reason(error)).await?;
        Err(anyhow::anyhow!(reason))
    }

    /// logind took the reboot request [`Agent::reboot_timeout`] ago or more and the host is
    /// still up (the shutdown was cancelled, or is stuck before it stopped the agent): Degraded
    /// saying so, and asked again. The node stays Degraded until it reboots: a request taken
    /// once already is no sign that this one will be carried out.
    async fn reboot_not_happening(&mut self, target: &str) -> Result<()> {
        let waited = self.reboot_overdue().unwrap_or_default().as_secs();
        let what = format!(
            "the reboot logind took {waited} s ago has not happened (was the shutdown cancelled?); asked for again"
        );
        self.degraded_for_reboot(target, what).await?;
        self.reboot_asked = false;
        self.ask_logind(target).await
    }

    /// The node is Degraded because `what` happened to the reboot `target`'s update waits for
    /// (after a rollback, with the rollback's reason first): said in the status and, once per
    /// distinct reason, on the Node, with the config the node runs. Returns the reason.
    async fn degraded_for_reboot(&mut self, target: &str, what: String) -> Result<String> {
        if let Some(m) = &self.metrics {
            m.inc_reboot_failures();
        }
        let (reason, current) = match &self.phase {
            Phase::RollingBack { reason, .. } => {
                (format!("{reason}; rebooting into the previous deployment: {what}"), self.current_name())
            }
            _ => (what, self.running_config()),
        };
        tracing::warn!(target, %reason, "the reboot did not happen; asking again");
        let repeated = self.reboot_error.as_deref() == Some(reason.as_str());
        self.reboot_error = Some(reason.clone());
        self.write_status("")?;
        if !repeated {
            if let Err(e) = self.api.report_failure("Degraded", &reason, &current, target).await {
                tracing::warn!(error = %format!("{e:#}"), "cannot report the reboot that did not happen");
            }
        }
        Ok(reason)
    }

    /// After the change took effect: verify the disk, start the workloads again if drained,
    /// report Done (with the uncordon request when drained: the coordinator uncordons after Done).
    async fn finish(&mut self, target: &str, drained: bool) -> Result<()> {
        if let Err(e) = self.drop_stray_stage("at the end of an update").await {
            tracing::warn!(error = %e, "cannot drop a staged OS deployment an earlier update may have left");
        }
        if let Some(cur) = self.current.clone() {
            if let Err(drift) = self.verify_current(&cur).await {
                return self.fail(target, drift, false).await;
            }
        }
        // After a reboot the target has started them already; starting it again is a no-op.
        if let Err(e) = crate::workloads::start_after(&self.root, self.services.as_ref(), drained).await {
            return self.fail(target, e.to_string(), false).await;
        }
        self.observe_apply("success");
        self.report_done(drained).await
    }

    /// At start: finish or undo an interrupted apply, then check the disk against the current
    /// config (drift is Degraded, as MCO reports it).
    pub async fn startup(&mut self) -> Result<()> {
        let recovered = match crate::engine::recover(&self.root, self.services.as_ref()).await {
            Ok(r) => r,
            Err(e) => return self.recovery_failed(format!("{e:#}")).await,
        };
        if self.recovery_error.take().is_some() {
            tracing::info!("the interrupted apply is recovered");
        }
        self.current = load_current(&self.root)?;
        // A crash between the journal's commit and saving the current config: the journal says
        // which config the node is on now.
        let writes_current = |new: &aloft_api::MachineConfigSpec| {
            self.current.as_ref().is_some_and(|c| crate::engine::normalize(&c.spec).is_ok_and(|s| s == *new))
        };
        let finished_target = match (&recovered, &self.phase) {
            (crate::apply::Recovery::Applied { new, .. }, Phase::Applying { target })
                if *target != self.current_name() && writes_current(new) =>
            {
                // The apply finished wrote the current config's spec (a write-back over an
                // update's files, `finish_undo`, or a target that renders the same): the disk
                // holds the current config, which stays saved under its own name; the update of
                // `target` goes on as the Node asks (done again, or reported Done for a revert).
                tracing::info!(target = %target, "the interrupted apply wrote the current config's files: nothing to save");
                None
            }
            (crate::apply::Recovery::Applied { new, .. }, Phase::Applying { target }) => Some((target.clone(), new)),
            _ => None,
        };
        if let Some((target, new)) = finished_target {
            let none = aloft_api::MachineConfigSpec::default();
            let changed = osflow::os_part_changed(self.current.as_ref().map_or(&none, |c| &c.spec), new);
            // After a rollback both configs may name the commit the node rolled back from, or
            // (an update that changed only kernel arguments) the arguments the deployment rolled
            // back to lacks: the update deploys them all the same (`os_prepare`), and so must its
            // restart.
            let os_pending = self.current_name() != target
                && (changed || self.may_run_other_commit_than(new).await || self.runs_rolled_back_deployment().await);
            if os_pending {
                // The files are the target's and its OS deployment was never staged (an update
                // stages after writing the files). Finishing as below would save the current
                // config and reboot into the old OS, which the drift check then finds: Degraded
                // for good. As from Staging, the update is done again instead: it finds the files
                // written, stages the deployment, and only then saves the current config.
                tracing::warn!(
                    target,
                    "restarted after writing the files of an OS update, before staging it: doing the update again"
                );
                self.enter(
                    Phase::Staging { target },
                    "the interrupted apply finished; the OS deployment is staged again",
                )?;
            } else {
                if self.current_name() != target {
                    let mut mc = self.current.clone().unwrap_or_default();
                    mc.metadata.name = target.clone();
                    mc.spec = (**new).clone();
                    save_current(&self.root, &mc)?;
                    self.current = Some(mc);
                }
                // Apply finished; which actions it needed is not known any more: reboot, after
                // the drain every reboot needs.
                self.enter(drain_for_reboot(&target), "the interrupted apply finished; draining to reboot to be safe")?;
            }
        }
        if let (crate::apply::Recovery::Nothing, Phase::Applying { target }) = (&recovered, &self.phase) {
            if *target == self.current_name() {
                // A re-apply of the current config (the force file's repair) that had written
                // nothing yet: no record of it. Nothing to finish and nothing to reboot for
                // (`decide` reboots from Applying on the current config, as the files may be
                // written): it goes on as the Node asks.
                tracing::info!(target = %target, "restarted before a re-apply of the current config wrote anything");
                self.enter(Phase::Idle, "")?;
            }
        }
        if let Some(resumed) = resume_after_restart(&self.phase, &self.current_name()) {
            tracing::warn!(phase = ?self.phase, "restarted while running the rebootless actions; draining to reboot to be safe");
            self.enter(resumed, "interrupted while running the rebootless actions; draining to reboot to be safe")?;
        }
        if let (crate::apply::Recovery::RolledBack { reason, .. }, Phase::Applying { target }) =
            (&recovered, &self.phase)
        {
            // Said as a rollback during the apply says it.
            let (target, reason) = (target.clone(), format!("{reason} (rolled back to the previous config)"));
            self.fail(&target, reason, false).await?;
        }
        // A staged deployment is meant only by a reboot into it that this boot still owes.
        let boot_now = state::boot_id(&self.root);
        let current = self.current_name();
        match &self.phase {
            Phase::RebootingStaged { target, boot_id, .. } if *target == current && *boot_id == boot_now => {
                self.maybe_stray_stage = false;
                self.stage_may_run = false;
            }
            _ => {
                // Only a stage an earlier process of this boot left running is waited for; that
                // may take longer than systemd waits for the start.
                self.stage_may_run = matches!(self.phase, Phase::Staging { .. } | Phase::Verifying { .. });
                if self.stage_may_run {
                    crate::notify::extend_start(crate::os::client::timeout_for(&aloft_api::os::wire::Call::DropStaged));
                }
                if let Err(e) = self.drop_stray_stage("at start").await {
                    tracing::warn!(error = %e, "cannot drop a staged OS deployment a crash may have left; tried again before any reboot");
                }
            }
        }
        self.settle_boot_counting().await;
        self.refresh_os_status().await;
        if let (Phase::Idle, Some(cur)) = (&self.phase, self.current.clone()) {
            if let Err(drift) = self.verify_current(&cur).await {
                let name = cur.metadata.name.clone();
                self.fail(&name, drift, false).await?;
            }
        }
        self.write_status("")?;
        Ok(())
    }

    /// Recovery of an interrupted apply failed: report Degraded and keep running (retried from
    /// [`Agent::step`]). The persisted phase stays as it was, so that a later recovery resumes
    /// from it as at any start.
    async fn recovery_failed(&mut self, error: String) -> Result<()> {
        // The recovery also clears the record of a finished apply and its backups: failing at
        // that, no apply was interrupted.
        let what = if crate::engine::apply_unfinished(&self.root) {
            "an interrupted apply could neither be finished nor rolled back"
        } else {
            "the journal of the last apply cannot be cleared"
        };
        let reason = format!("{what} (retrying): {error}");
        tracing::error!(%reason, "recovery failed");
        self.current = load_current(&self.root)?;
        let target = self.phase.target().map(str::to_string).unwrap_or_else(|| self.current_name());
        let repeated = self.recovery_error.as_deref() == Some(reason.as_str());
        self.recovery_error = Some(reason.clone());
        self.write_status("")?;
        if !repeated {
            let current = self.current_name();
            if let Err(e) = self.api.report_failure("Degraded", &reason, &current, &target).await {
                // Retried with the recovery; the daemon keeps running either way.
                self.recovery_error = Some(format!("{reason} (not reported: {e:#})"));
                tracing::warn!(error = %format!("{e:#}"), "cannot report the failed recovery");
            }
        }
        Ok(())
    }

    /// How long after a check of the disk the next one is due: [`RECHECK`], or while Degraded on
    /// the current config (drift, or workloads that would not start again) the retry interval
    /// MCO's daemon caps its backoff at, so that a cleared fault is seen within a minute.
    fn recheck_period(&self) -> Duration {
        let current = self.current_name();
        if matches!(&self.phase, Phase::Degraded { target, .. } if *target == current) {
            Duration::from_secs(60)
        } else {
            RECHECK
        }
    }

    /// Wait for the Node to change; meanwhile, re-validate the disk whenever a watched directory
    /// changes (and when [`Agent::recheck_period`] has passed since the last check): drift makes
    /// the node Degraded, a repair makes it Done.
    async fn idle(&mut self, node: &NodeView) {
        let Some(cur) = self.current.clone() else {
            let _ = self.api.wait_change(&node.revision, Duration::from_secs(300)).await;
            return;
        };
        let name = cur.metadata.name.clone();
        // Degraded on the current config: MCO's force file, once created, asks for a repair.
        let force_file = |phase: &Phase| matches!(phase, Phase::Degraded { target, .. } if *target == name);
        let mut watch = match self.drift_watch.take() {
            Some((watched, w)) if watched == name && w.is_current(&self.root, &cur, force_file(&self.phase)) => Some(w),
            _ => {
                let w = crate::drift::watch(&self.root, &cur, force_file(&self.phase));
                // A new watch saw nothing before it was armed: an edit made between the apply
                // (or the repair) and now would otherwise wait for the 10-minute check. Look once;
                // if that changed the phase (Degraded by drift, Done after a repair), the Node
                // changed too: go read it.
                if matches!(self.phase, Phase::Idle | Phase::Degraded { .. }) {
                    let before = std::mem::discriminant(&self.phase);
                    if let Err(e) = self.check_drift(&cur).await {
                        tracing::warn!(error = %format!("{e:#}"), "drift check failed");
                    }
                    if std::mem::discriminant(&self.phase) != before || self.repair_forced() {
                        return;
                    }
                }
                w
            }
        };
        let api = self.api.clone();
        let revision = node.revision.clone();
        let changed = async move { api.wait_change(&revision, Duration::from_secs(300)).await };
        tokio::pin!(changed);
        loop {
            let period = self.recheck_period();
            let recheck_at = *self.recheck_at.get_or_insert_with(|| tokio::time::Instant::now() + period);
            let drift_event = async {
                match watch.as_mut() {
                    Some(w) => w.events.recv().await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = &mut changed => {
                    self.drift_watch = watch.map(|w| (name, w));
                    return;
                }
                _ = drift_event => {}
                _ = tokio::time::sleep_until(recheck_at) => {}
            }
            // Let a burst of writes settle before judging.
            tokio::time::sleep(Duration::from_millis(200)).await;
            // A watched directory replaced (removed and made again), or one that appeared where
            // its ancestor was watched: armed again before the check, so that nothing after the
            // check goes unseen.
            self.rearm(&mut watch, &cur, force_file(&self.phase));
            if self.repair_forced() {
                return;
            }
            if let Err(e) = self.check_drift(&cur).await {
                tracing::warn!(error = %format!("{e:#}"), "drift check failed");
            }
            if !matches!(self.phase, Phase::Idle | Phase::Degraded { .. }) {
                return;
            }
            // Now Degraded by drift: the force file is watched from here on, and looked for once
            // (it may have been made before the watch).
            let rearmed = self.rearm(&mut watch, &cur, force_file(&self.phase));
            if self.repair_forced() {
                return;
            }
            if rearmed {
                // The new watch saw nothing before it was armed: an edit undone right after the
                // check (the drift reported, the file put back) waited for the 10-minute check.
                let before = std::mem::discriminant(&self.phase);
                if let Err(e) = self.check_drift(&cur).await {
                    tracing::warn!(error = %format!("{e:#}"), "drift check failed");
                }
                if std::mem::discriminant(&self.phase) != before {
                    return;
                }
            }
        }
    }

    /// Arms `watch` again unless it still covers what `cur` (and the force file, if asked)
    /// needs watched; true when it did.
    fn rearm(&self, watch: &mut Option<crate::drift::DriftWatch>, cur: &MachineConfig, force_file: bool) -> bool {
        if watch.as_ref().is_some_and(|w| w.is_current(&self.root, cur, force_file)) {
            return false;
        }
        *watch = crate::drift::watch(&self.root, cur, force_file);
        true
    }

    async fn check_drift(&mut self, cur: &MachineConfig) -> Result<()> {
        let name = cur.metadata.name.clone();
        // Checked now, whatever asked for it: the next timed check is due a period from here.
        self.recheck_at = None;
        let drifted = self.verify_current(cur).await;
        if let Some(m) = &self.metrics {
            m.set_drift(drifted.is_err());
        }
        match (drifted, &self.phase) {
            (Err(reason), Phase::Idle) => {
                tracing::warn!(%reason, "on-disk drift");
                self.fail(&name, reason, false).await?;
            }
            (Ok(()), Phase::Degraded { target, .. }) if *target == name => {
                tracing::info!("on-disk state matches the current config again");
                // Degraded after the drain (e.g. drift found before Done): the workloads come back
                // and the uncordon request goes with Done, or the node stays cordoned.
                let node = self.api.get().await?;
                let drained = node.annotation(ann::DESIRED_DRAIN).starts_with("drain-");
                crate::workloads::start_after(&self.root, self.services.as_ref(), false).await?;
                self.report_done(drained).await?;
            }
            _ => {}
        }
        Ok(())
    }

    /// Wait `backoff` before a failed step is tried again, or only until the coordinator is
    /// reached again when it was away (this node's watch (re)connected since `links`, counted
    /// before the step): a coordinator restart then costs a node's turn the outage, not the
    /// backoff (MCO's 5 s at least; with 1,000 simulated nodes and the coordinator down 2 s, the
    /// rollout took 8.4-8.6 s instead of 10.1 s, BENCHMARKS.md). A step that failed for another
    /// reason finds the watch as it was and waits the whole backoff, which doubles either way.
    async fn retry_after(&self, links: u64, backoff: Duration) {
        if self.api.wait_reached(links, backoff).await {
            tracing::info!("reached the coordinator (its watch connected); retrying now");
        }
    }

    /// Follow the Node forever.
    pub async fn run_loop(&mut self) -> Result<()> {
        let mut backoff = Duration::from_secs(5);
        loop {
            let links = self.api.links();
            let node = match self.api.get().await {
                Ok(n) => n,
                Err(e) => {
                    if let Ok(lost @ (Standing::Revoked | Standing::NodeGone)) = self.api.standing().await {
                        return Err(CredentialLost(lost).into());
                    }
                    tracing::warn!(error = %format!("{e:#}"), "cannot read own Node; retrying");
                    if self.os_reach_left().is_some_and(|left| left.is_zero()) {
                        if let Err(rb) = self.roll_back_unreached(&format!("{e:#}")).await {
                            tracing::warn!(error = %format!("{rb:#}"), "cannot roll back the OS that does not reach the coordinator");
                        }
                    }
                    self.retry_after(links, backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(60));
                    continue;
                }
            };
            let step = match self.step(&node).await {
                Ok(s) => s,
                Err(e) => {
                    tracing::warn!(error = %format!("{e:#}"), "step failed; retrying");
                    self.retry_after(links, backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(60));
                    continue;
                }
            };
            if self.recovery_error.is_some() {
                // Recovery failed: retry with backoff, or sooner if the Node changes.
                let _ = self.api.wait_change(&node.revision, backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(60));
                continue;
            }
            let drifted = matches!(&self.phase, Phase::Degraded { target, .. } if *target == self.current_name());
            match (&step, &self.phase) {
                // Degraded by drift on the current config: watch the disk for the repair.
                (Step::Wait, Phase::Degraded { .. }) if drifted => self.idle(&node).await,
                // Degraded: retry with backoff (MCO: 5 s base, 60 s cap), or sooner if the Node changes.
                (_, Phase::Degraded { .. }) => {
                    // Wait for changes after our own writes of this step (state, reason, drain
                    // request): waiting from the revision read before it woke at once on them,
                    // and a Degraded node retried in a tight loop (seen on VMs: ~2 tries a second).
                    let since = match self.api.get().await {
                        Ok(n) => n.revision,
                        Err(_) => node.revision.clone(),
                    };
                    let _ = self.api.wait_change(&since, backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(60));
                }
                // The host goes down any moment; waiting longer than the reboot timeout would
                // not notice that it did not.
                (Step::Reboot { .. }, _) => {
                    backoff = Duration::from_secs(5);
                    let _ = self.api.wait_change(&node.revision, self.reboot_wait()).await;
                }
                (Step::Wait, _) => {
                    backoff = Duration::from_secs(5);
                    self.idle(&node).await;
                }
                _ => backoff = Duration::from_secs(5),
            }
        }
    }
}

/// [`Agent::run_loop`] stopped: the node's credential was revoked or its Node deleted.
#[derive(Debug, thiserror::Error)]
#[error("{}", lost_reason(*.0))]
struct CredentialLost(Standing);

fn lost_reason(s: Standing) -> &'static str {
    match s {
        Standing::NodeGone => "the coordinator has no Node of this name any more (deleted)",
        _ => "the coordinator refuses this node's credential (401: revoked)",
    }
}

/// The API of the Node the stored credential names, enrolling again first if that credential
/// no longer works (its Node was deleted: `kubectl delete node` revokes it).
async fn node_api(
    root: &Root,
    opts: &Options,
    lost: Option<Standing>,
    status: Option<&tokio::sync::watch::Sender<AgentStatus>>,
) -> Result<NodeApi> {
    let connect = |cred: &enroll::Credential| -> Result<NodeApi> {
        let client = Client::new(&ClientConfig {
            server: cred.server.clone(),
            ca_pem: opts.ca_pem.clone(),
            token: Some(cred.token.clone()),
        })?;
        Ok(NodeApi::new(client, &cred.node_name))
    };
    let enrollment = enroll::Enrollment {
        server: &opts.coordinator,
        ca_pem: opts.ca_pem.as_deref(),
        bootstrap_token: opts.bootstrap_token.as_deref(),
        node_name: &opts.node_name,
        labels: &opts.labels,
        status,
    };
    let mut lost = lost;
    if lost.is_none() {
        let cred = enroll::ensure(root, &enrollment).await?;
        let api = connect(&cred)?;
        match api.standing().await {
            Ok(s @ (Standing::Revoked | Standing::NodeGone)) => lost = Some(s),
            // Enrolled, or not known yet (the coordinator unreachable): go on as before.
            _ => return Ok(api),
        }
    }
    let why = lost_reason(lost.unwrap_or(Standing::Revoked));
    // Without the bootstrap token, `enroll_again`'s error says what to do, logged once below.
    if opts.bootstrap_token.is_some() {
        tracing::warn!(node = %opts.node_name, reason = why, "this node's credential no longer works; enrolling again with the bootstrap token");
    }
    let cred = enroll::enroll_again(root, &enrollment, why)
        .await
        .inspect_err(|e| tracing::error!(node = %opts.node_name, error = %format!("{e:#}"), "cannot rejoin"))?;
    connect(&cred)
}

/// Start everything and run until stopped.
pub async fn run(opts: Options) -> Result<()> {
    let root = Root::new(&opts.root);
    // This host's own settings first (its state dir, its D-Bus, the metrics address): an agent
    // that cannot run here must not enroll, or its Node stays in the pool NotReady, holding a
    // slot of maxUnavailable, and the pool's rollouts wait for it.
    crate::enroll::check_state_dir(&root)?;
    // A workload's stop job may take its whole timeout (and a little for systemd's SIGKILL).
    let job_timeout = opts.workload_stop_timeout.saturating_add(Duration::from_secs(30));
    let services = crate::engine::connect_services_for(opts.bus_address.as_deref(), job_timeout).await?;
    let metrics = match &opts.metrics_listen {
        Some(addr) => {
            let metrics = Arc::new(Metrics::new(&opts.build));
            crate::metrics::serve(addr, metrics.clone()).await?;
            Some(metrics)
        }
        None => None,
    };
    // The D-Bus status object, served before enrolling (a first enrollment may wait long for its
    // coordinator, and says so there); optional, since a sandboxed agent may share a bus.
    let version = opts.build.long_version();
    let mut starting = AgentStatus {
        state: "Starting".into(),
        progress: "starting".into(),
        version: version.clone(),
        ..Default::default()
    };
    starting.touch();
    let served = match opts.bus_address.as_deref() {
        Some(a) => StatusService::serve_at_address(a, starting.clone()).await,
        None => StatusService::serve_system(starting.clone()).await,
    };
    let status_tx = match served {
        Ok(svc) => {
            let (tx, rx) = tokio::sync::watch::channel(starting);
            svc.follow(rx);
            Some(tx)
        }
        Err(e) => {
            tracing::warn!(error = %e, "not serving org.aloft.Agent1 on D-Bus; `aloft-agent status` reads the status file");
            None
        }
    };
    let api = node_api(&root, &opts, None, status_tx.as_ref()).await?;
    let mut agent = Agent::new(root, api, services, opts.drain_timeout)?;
    agent.workload_stop_timeout = opts.workload_stop_timeout;
    agent.reboot_timeout = opts.reboot_timeout;
    agent.metrics = metrics;
    agent.status_tx = status_tx;
    agent.version = version;
    if let Some(os) = &opts.os {
        agent.os = Some(OsAgent::new(&agent.root, os));
        tracing::info!(helper = %os.helper_socket.display(), "managing the OS through aloft-os-helper");
    }
    agent.startup().await?;
    // Ready for systemd once the host's own state is recovered; the coordinator may be down
    // (the watchdog keeps being fed while the agent waits for it).
    crate::notify::ready("aloft-agent ready");
    crate::notify::spawn_watchdog();
    let node_info = crate::node_info::of(&agent.root, &opts.build);
    // A new OS deployment that cannot reach the coordinator is rolled back once its time is
    // up, not waited on for good.
    loop {
        let ready = agent.api.set_ready_waiting(true, "aloft-agent is running", Some(&node_info));
        let Some(left) = agent.os_reach_left() else {
            ready.await?;
            break;
        };
        match tokio::time::timeout(left, ready).await {
            Ok(ready) => {
                ready?;
                break;
            }
            Err(_) => {
                if let Err(e) = agent.roll_back_unreached("cannot mark the Node Ready").await {
                    tracing::warn!(error = %format!("{e:#}"), "cannot roll back the OS that does not reach the coordinator");
                    tokio::time::sleep(Duration::from_secs(30)).await;
                }
            }
        }
    }
    tracing::info!(node = %opts.node_name, os_image = %node_info["osImage"], version = %opts.build.long_version(),
        "aloft-agent ready");
    loop {
        let Err(e) = agent.run_loop().await else { return Ok(()) };
        let Some(CredentialLost(lost)) = e.downcast_ref::<CredentialLost>() else { return Err(e) };
        // The Node was deleted (or the credential revoked): register again, as a kubelet does.
        agent.api = node_api(&agent.root, &opts, Some(*lost), agent.status_tx.as_ref()).await?;
        // A wait to enroll again showed `Enrolling`: the agent's own status again.
        if let Err(e) = agent.write_status("") {
            tracing::warn!(error = %format!("{e:#}"), "cannot publish the status after enrolling again");
        }
        agent.api.set_ready_waiting(true, "aloft-agent is running", Some(&node_info)).await?;
        tracing::info!(node = %opts.node_name, "enrolled again; following the Node");
    }
}

/// logind's error name for a shutdown request while it holds another (one it took and waits to
/// carry out: a delay inhibitor, or a shutdown scheduled by someone else).
const LOGIND_IN_PROGRESS: &str = "org.freedesktop.login1.OperationInProgress";

/// logind's error name for a shutdown an inhibitor in block mode keeps from starting (a caller
/// without the privilege to override it).
const LOGIND_BLOCKED: &str = "org.freedesktop.login1.BlockedByInhibitorLock";

/// The Node's reason for a reboot logind refused: what the agent does (retries), then logind's
/// answer, said once. When logind says a shutdown is already in progress, the reason says what
/// that means on a host that is still up (the shutdown is held, most often by a delay
/// inhibitor) and where to look: logind's own words alone read as if the reboot were under way.
fn refused_reboot_reason(error: &crate::host::ServiceError) -> String {
    let message = error.message();
    let hint = if message.contains(LOGIND_IN_PROGRESS) {
        "logind holds a shutdown it has not carried out (an inhibitor in delay mode? `systemd-inhibit --list` \
         shows them): "
    } else if message.contains(LOGIND_BLOCKED) {
        "an inhibitor in block mode holds the reboot off (`systemd-inhibit --list` shows them): "
    } else {
        ""
    };
    format!("reboot failed (retrying): {hint}asking logind: {message}")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// OS work only the booted deployment shows (the configs keep the commit and the arguments:
    /// a deployment a rollback left) is planned as an OS update: drained and rebooted, whatever
    /// else the config changed. A next config that changed only SSH keys staged the arguments and
    /// rebooted without a drain.
    #[test]
    fn os_work_the_configs_do_not_show_drains_and_reboots() {
        let policy = crate::disruption::Policy::default();
        let ssh_only = || crate::disruption::Changes { ssh_keys: true, ..Default::default() };
        assert!(!crate::disruption::plan(&ssh_only(), &policy).reboot, "SSH keys alone need no reboot");
        let kargs = aloft_api::os::StageRequest { image: None, old_kargs: vec![], new_kargs: vec!["nosmt".into()] };
        let mut c = ssh_only();
        os_work_changes(&mut c, Some(&kargs), true);
        let plan = crate::disruption::plan(&c, &policy);
        assert!(plan.reboot && plan.drain, "{plan:?}");
        let url = format!("ostree+http://h/repo#r@{}", "ab".repeat(32));
        let image = aloft_api::os::StageRequest { image: aloft_api::osimage::parse(&url).unwrap(), ..kargs };
        let mut c = ssh_only();
        os_work_changes(&mut c, Some(&image), true);
        assert!(c.os_update && crate::disruption::plan(&c, &policy).reboot);
        // The booted OS already as the config asks: an osImageURL change alone needs no reboot.
        let mut c = crate::disruption::Changes { os_update: true, kernel_arguments: true, ..Default::default() };
        os_work_changes(&mut c, None, true);
        assert!(!crate::disruption::plan(&c, &policy).reboot);
        // Without the OS helper the configs' changes stand (the update is refused before this).
        let mut c = crate::disruption::Changes { os_update: true, ..Default::default() };
        os_work_changes(&mut c, None, false);
        assert!(c.os_update);
    }

    #[test]
    fn a_refused_reboot_says_when_logind_holds_a_shutdown() {
        let refused = |message: &str| {
            refused_reboot_reason(&crate::host::ServiceError::Call {
                operation: "logind Reboot".into(),
                message: message.into(),
            })
        };
        let held = "org.freedesktop.login1.OperationInProgress: There's already a shutdown or sleep operation in \
                    progress";
        let reason = refused(held);
        assert!(reason.starts_with("reboot failed (retrying): logind holds a shutdown"), "{reason}");
        assert!(reason.contains("`systemd-inhibit --list`"), "{reason}");
        assert!(reason.ends_with(&format!(": asking logind: {held}")), "{reason}");
        let inhibited = "org.freedesktop.login1.BlockedByInhibitorLock: Operation inhibited by \"backup\"";
        assert_eq!(
            refused(inhibited),
            format!(
                "reboot failed (retrying): an inhibitor in block mode holds the reboot off (`systemd-inhibit \
                 --list` shows them): asking logind: {inhibited}"
            )
        );
        // Anything else: logind's answer once, after what the agent does.
        let gone = "org.freedesktop.DBus.Error.ServiceUnknown: The name org.freedesktop.login1 was not provided";
        assert_eq!(refused(gone), format!("reboot failed (retrying): asking logind: {gone}"));
        assert_eq!(refused(gone).matches("eboot").count(), 1, "{}", refused(gone));
    }

    fn node(desired: &str, current: &str, state: &str) -> NodeView {
        NodeView {
            annotations: [
                (ann::DESIRED_CONFIG, desired),
                (ann::CURRENT_CONFIG, current),
                (ann::STATE, state),
                (ann::REASON, ""),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
            revision: "1".into(),
        }
    }

    #[test]
    fn transitions() {
        let idle = Phase::Idle;
        assert_eq!(decide(&idle, &node("", "", "Done"), "", "b1"), Step::Wait);
        assert_eq!(decide(&idle, &node("", "", ""), "", "b1"), Step::ReportDone, "fresh node reports Done");
        assert_eq!(decide(&idle, &node("r2", "r1", "Done"), "r1", "b1"), Step::Update { target: "r2".into() });
        assert_eq!(decide(&idle, &node("r2", "r1", "Done"), "r2", "b1"), Step::ReportDone, "disk wins over annotation");
        let refused = Phase::Unreconcilable { target: "r2".into(), reason: "fips".into() };
        assert_eq!(decide(&refused, &node("r2", "r1", "Unreconcilable"), "r1", "b1"), Step::Wait);
        assert_eq!(
            decide(&refused, &node("r3", "r1", "Unreconcilable"), "r1", "b1"),
            Step::Update { target: "r3".into() }
        );
        let degraded = Phase::Degraded { target: "r2".into(), reason: "x".into() };
        assert_eq!(
            decide(&degraded, &node("r2", "r1", "Degraded"), "r1", "b1"),
            Step::Update { target: "r2".into() },
            "retried"
        );
        let rebooting = Phase::Rebooting { target: "r2".into(), boot_id: "b1".into() };
        assert_eq!(shown_phase(&rebooting, "b1"), "rebooting", "before the reboot");
        assert_eq!(shown_phase(&rebooting, "b2"), "finishing-after-reboot", "in the boot after it");
        assert_eq!(shown_phase(&Phase::Idle, "b2"), "idle");
        assert_eq!(decide(&rebooting, &node("r2", "r1", "Working"), "r2", "b1"), Step::Reboot { target: "r2".into() });
        assert_eq!(
            decide(&rebooting, &node("r2", "r1", "Working"), "r2", "b2"),
            Step::FinishAfterReboot { target: "r2".into() }
        );
    }

    #[test]
    fn only_an_update_that_left_the_disk_as_it_was_may_be_given_up() {
        assert!(may_be_given_up("r2", "r1", false), "failed before its apply, or rolled back");
        assert!(!may_be_given_up("r2", "r2", false), "the config the disk holds failed (its check, drift)");
        assert!(!may_be_given_up("r2", "r1", true), "an apply left unfinished");
    }

    #[test]
    fn a_restart_while_acting_drains_and_reboots_instead_of_reporting_done() {
        let acting = Phase::Acting { target: "r2".into() };
        let resumed = resume_after_restart(&acting, "r2");
        assert_eq!(resumed, Some(Phase::DrainingForReboot { target: "r2".into(), request: "drain-r2".into() }));
        // From there the node drains and then reboots (whatever the coordinator wants meanwhile),
        // and finishes (uncordon, Done) after the reboot.
        let working = node("r2", "r1", "Working");
        assert_eq!(
            decide(resumed.as_ref().unwrap(), &working, "r2", "b1"),
            Step::DrainAndReboot { target: "r2".into() }
        );
        assert_eq!(
            decide(resumed.as_ref().unwrap(), &node("r3", "r1", "Working"), "r2", "b1"),
            Step::DrainAndReboot { target: "r2".into() }
        );
        // In the same process too (the save of the next phase failed): never Done with the
        // actions (or the reboot) not known to have run.
        assert_eq!(decide(&acting, &working, "r2", "b1"), Step::DrainAndReboot { target: "r2".into() });
        let applying = Phase::Applying { target: "r2".into() };
        assert_eq!(decide(&applying, &working, "r2", "b1"), Step::DrainAndReboot { target: "r2".into() });
        assert_eq!(decide(&applying, &working, "r1", "b1"), Step::Update { target: "r2".into() }, "not saved yet");
        for other in [Phase::Idle, Phase::Applying { target: "r2".into() }, Phase::Acting { target: "r3".into() }] {
            assert_eq!(resume_after_restart(&other, "r2"), None, "{other:?}");
        }
    }

    /// Only a node settled on its current config has its disk validated before an update: the
    /// phases of an update or of its recovery (the target's files already written on purpose)
    /// are not judged as drift.
    #[test]
    fn the_disk_is_validated_before_an_update_only_when_settled_on_the_current_config() {
        assert!(validates_before_update(&Phase::Idle, "r1"));
        let drifted = Phase::Degraded { target: "r1".into(), reason: "content mismatch".into() };
        assert!(validates_before_update(&drifted, "r1"), "Degraded on the current config (drift, OS rollback)");
        assert!(!validates_before_update(&Phase::Idle, ""), "no current config yet");
        let failed = Phase::Degraded { target: "r2".into(), reason: "staging failed".into() };
        assert!(!validates_before_update(&failed, "r1"), "a failed update of r2 may have written r2's files");
        let in_flight = [
            Phase::Preparing { target: "r2".into() },
            Phase::Applying { target: "r2".into() },
            Phase::Staging { target: "r2".into() },
            Phase::RebootingStaged { target: "r2".into(), boot_id: "b1".into(), checksum: "c".into(), staged: None },
            Phase::Verifying { target: "r2".into(), checksum: "c".into(), staged: None },
            Phase::RollingBack {
                target: "r2".into(),
                boot_id: "b".into(),
                checksum: "c".into(),
                serial: None,
                reason: "x".into(),
            },
            Phase::Unreconcilable { target: "r2".into(), reason: "fips".into() },
        ];
        for p in in_flight {
            assert!(!validates_before_update(&p, "r1"), "{p:?}");
        }
    }

    /// The force file may be an empty directory (MCO's `os.Remove` takes it); a directory with
    /// something in it is not the force file.
    #[test]
    fn what_counts_as_the_force_file() {
        let dir = tempfile::tempdir().unwrap();
        let force = dir.path().join("machine-config-daemon-force");
        assert!(!force_file_present(&force));
        std::fs::write(&force, "").unwrap();
        assert!(force_file_present(&force));
        std::fs::remove_file(&force).unwrap();
        std::fs::create_dir(&force).unwrap();
        assert!(force_file_present(&force), "an empty directory");
        std::fs::write(force.join("x"), "").unwrap();
        assert!(!force_file_present(&force), "a directory with something in it");
    }

    #[test]
    fn os_update_transitions() {
        let staged =
            Phase::RebootingStaged { target: "r2".into(), boot_id: "b1".into(), checksum: "c".into(), staged: None };
        let working = node("r2", "r1", "Working");
        assert_eq!(decide(&staged, &working, "r2", "b1"), Step::Reboot { target: "r2".into() }, "same boot: ask again");
        assert_eq!(decide(&staged, &working, "r2", "b2"), Step::VerifyOs { target: "r2".into() }, "new boot: verify");
        assert_eq!(
            decide(&staged, &node("r3", "r1", "Working"), "r2", "b2"),
            Step::VerifyOs { target: "r2".into() },
            "a new desired config waits until the OS update is verified"
        );
        let verifying = Phase::Verifying { target: "r2".into(), checksum: "c".into(), staged: None };
        assert_eq!(decide(&verifying, &working, "r2", "b2"), Step::VerifyOs { target: "r2".into() }, "crash: again");
        let back = Phase::RollingBack {
            target: "r2".into(),
            boot_id: "b2".into(),
            checksum: "c".into(),
            serial: None,
            reason: "x".into(),
        };
        assert_eq!(decide(&back, &working, "r2", "b2"), Step::Reboot { target: "r2".into() });
        assert_eq!(decide(&back, &working, "r2", "b3"), Step::FinishRollback { target: "r2".into() });
        let degraded = Phase::Degraded { target: "r2".into(), reason: "health check failed".into() };
        assert_eq!(
            decide(&degraded, &node("r2", "r2", "Degraded"), "r2", "b3"),
            Step::Wait,
            "after the rollback the same desired config is not retried"
        );
        assert_eq!(
            decide(&degraded, &node("r3", "r2", "Degraded"), "r2", "b3"),
            Step::Update { target: "r3".into() },
            "a new desired config is"
        );
    }
}
