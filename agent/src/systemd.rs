//! systemd and logind over D-Bus: the production [`ServiceManager`].
//!
//! The agent never shells out to `systemctl`: a D-Bus call gives a typed reply, a job object to
//! wait on, and an error name instead of text to parse. Unit-file operations
//! (`EnableUnitFiles`, `MaskUnitFiles`, ...) complete when the call returns; unit jobs
//! (`RestartUnit`, ...) only *queue* a job, so [`SystemdDbus`] waits for the job's `JobRemoved`
//! signal and turns a result other than `done` into an error naming the unit, because a restart
//! that was queued but failed must fail the rebootless update (MCO then rolls back and goes
//! Degraded).
//!
//! Tests run the same code against the test implementation of systemd1/login1 in
//! `crate::testing` (feature `test-support`), served on a private `dbus-daemon`.

use crate::host::{ServiceError, ServiceManager, TransientEnd, TransientRun};
use async_trait::async_trait;
use futures::StreamExt;
use std::time::{Duration, Instant};
use zbus::proxy::CacheProperties;
use zbus::{proxy, Connection, OwnedObjectPath, Variant};

/// systemd's bus name.
pub const SYSTEMD_SERVICE: &str = "org.freedesktop.systemd1";
/// The path of systemd's Manager object.
pub const SYSTEMD_PATH: &str = "/org/freedesktop/systemd1";
/// logind's bus name.
pub const LOGIND_SERVICE: &str = "org.freedesktop.login1";
/// The path of logind's Manager object.
pub const LOGIND_PATH: &str = "/org/freedesktop/login1";

/// How long a unit job may take by default. systemd's own start timeout is 90 s per unit; a job
/// can wait on dependencies too, so allow several of those before calling the job lost.
pub const DEFAULT_JOB_TIMEOUT: Duration = Duration::from_secs(300);

/// One change systemd reports for a unit-file operation: `(type, file, destination)`, e.g.
/// `("symlink", "/etc/systemd/system/multi-user.target.wants/x.service",
/// "/etc/systemd/system/x.service")`.
pub type UnitFileChange = (String, String, String);

/// `org.freedesktop.systemd1.Manager`, the subset the agent uses.
#[proxy(
    interface = "org.freedesktop.systemd1.Manager",
    default_service = "org.freedesktop.systemd1",
    default_path = "/org/freedesktop/systemd1"
)]
pub trait SystemdManager {
    /// Ask systemd to send signals (JobRemoved) to this client.
    fn subscribe(&self) -> zbus::Result<()>;
    /// `systemctl daemon-reload`.
    fn reload(&self) -> zbus::Result<()>;
    /// `systemctl enable`: returns (carries install info, changes).
    fn enable_unit_files(
        &self,
        files: &[&str],
        runtime: bool,
        force: bool,
    ) -> zbus::Result<(bool, Vec<UnitFileChange>)>;
    /// `systemctl disable`.
    fn disable_unit_files(&self, files: &[&str], runtime: bool) -> zbus::Result<Vec<UnitFileChange>>;
    /// `systemctl mask`.
    fn mask_unit_files(&self, files: &[&str], runtime: bool, force: bool) -> zbus::Result<Vec<UnitFileChange>>;
    /// `systemctl unmask`.
    fn unmask_unit_files(&self, files: &[&str], runtime: bool) -> zbus::Result<Vec<UnitFileChange>>;
    /// `systemctl preset`.
    fn preset_unit_files(
        &self,
        files: &[&str],
        runtime: bool,
        force: bool,
    ) -> zbus::Result<(bool, Vec<UnitFileChange>)>;
    /// Queue a reload job; returns the job's object path.
    fn reload_unit(&self, name: &str, mode: &str) -> zbus::Result<OwnedObjectPath>;
    /// Queue a restart job.
    fn restart_unit(&self, name: &str, mode: &str) -> zbus::Result<OwnedObjectPath>;
    /// Queue a start job.
    fn start_unit(&self, name: &str, mode: &str) -> zbus::Result<OwnedObjectPath>;
    /// Queue a stop job.
    fn stop_unit(&self, name: &str, mode: &str) -> zbus::Result<OwnedObjectPath>;
    /// `enabled`, `disabled`, `static`, `masked`, ... of a unit file.
    fn get_unit_file_state(&self, file: &str) -> zbus::Result<String>;
    /// The unit's object path, loading the unit if needed.
    fn load_unit(&self, name: &str) -> zbus::Result<OwnedObjectPath>;
    /// `systemd-run`: create a transient unit from `properties` and queue its start job.
    fn start_transient_unit(
        &self,
        name: &str,
        mode: &str,
        properties: &[(&str, Variant<'_>)],
        aux: &[(&str, Vec<(&str, Variant<'_>)>)],
    ) -> zbus::Result<OwnedObjectPath>;
    /// `systemctl reset-failed`: a failed transient unit is unloaded only by this.
    fn reset_failed_unit(&self, name: &str) -> zbus::Result<()>;
    /// A job finished: `result` is `done`, `canceled`, `timeout`, `failed`, `dependency` or
    /// `skipped`.
    #[zbus(signal)]
    fn job_removed(&self, id: u32, job: OwnedObjectPath, unit: String, result: String) -> zbus::Result<()>;
}

/// `org.freedesktop.systemd1.Unit`: the properties the agent reads.
#[proxy(interface = "org.freedesktop.systemd1.Unit", default_service = "org.freedesktop.systemd1")]
pub trait SystemdUnit {
    /// `active`, `reloading`, `inactive`, `failed`, `activating`, `deactivating`.
    #[zbus(property)]
    fn active_state(&self) -> zbus::Result<String>;
    /// `loaded`, `not-found`, `masked`, ...
    #[zbus(property)]
    fn load_state(&self) -> zbus::Result<String>;
    /// Units this one wants (its `Wants=` and `.wants/` links).
    #[zbus(property)]
    fn wants(&self) -> zbus::Result<Vec<String>>;
}

/// `org.freedesktop.systemd1.Service`: how a transient run ended.
#[proxy(interface = "org.freedesktop.systemd1.Service", default_service = "org.freedesktop.systemd1")]
pub trait SystemdService {
    /// `success`, `exit-code`, `signal`, `core-dump`, `timeout`, ...
    #[zbus(property)]
    fn result(&self) -> zbus::Result<String>;
    /// The main process's exit status (or signal number).
    #[zbus(property)]
    fn exec_main_status(&self) -> zbus::Result<i32>;
}

/// `org.freedesktop.login1.Manager`: only the reboot.
#[proxy(
    interface = "org.freedesktop.login1.Manager",
    default_service = "org.freedesktop.login1",
    default_path = "/org/freedesktop/login1"
)]
pub trait LogindManager {
    /// Reboot now; `interactive=false` so polkit never prompts a daemon.
    fn reboot(&self, interactive: bool) -> zbus::Result<()>;
}

/// The unit jobs the agent queues, named as their D-Bus methods.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobKind {
    Reload,
    Restart,
    Start,
    Stop,
}

impl JobKind {
    /// The Manager method that queues this job.
    pub fn method(self) -> &'static str {
        match self {
            JobKind::Reload => "ReloadUnit",
            JobKind::Restart => "RestartUnit",
            JobKind::Start => "StartUnit",
            JobKind::Stop => "StopUnit",
        }
    }

    /// The verb `systemctl` uses, for messages people read.
    pub fn verb(self) -> &'static str {
        match self {
            JobKind::Reload => "reload",
            JobKind::Restart => "restart",
            JobKind::Start => "start",
            JobKind::Stop => "stop",
        }
    }
}

/// What went wrong talking to systemd or logind. Every variant names the unit (or units) so the
/// Degraded reason a user reads says what to look at.
#[derive(Debug, thiserror::Error)]
pub enum SystemdError {
    #[error("cannot connect to D-Bus at {bus}: {error}")]
    Connect { bus: String, error: zbus::Error },
    #[error("{method}({target}): {error}")]
    Call { method: &'static str, target: String, error: zbus::Error },
    #[error("systemd job {job} to {verb} {unit} finished with result {result:?}")]
    JobFailed { verb: &'static str, unit: String, job: String, result: String },
    #[error("systemd job {job} to {verb} {unit} did not finish within {timeout:?}")]
    JobTimeout { verb: &'static str, unit: String, job: String, timeout: Duration },
    #[error("lost systemd's JobRemoved signals while waiting for job {job} to {verb} {unit}")]
    SignalsLost { verb: &'static str, unit: String, job: String },
}

impl SystemdError {
    /// A short name of the operation for [`ServiceError::Call`], e.g. `restart crio.service`.
    fn operation(&self) -> String {
        match self {
            SystemdError::Connect { .. } => "connect".to_string(),
            SystemdError::Call { method, target, .. } => format!("{method} {target}").trim_end().to_string(),
            SystemdError::JobFailed { verb, unit, .. }
            | SystemdError::JobTimeout { verb, unit, .. }
            | SystemdError::SignalsLost { verb, unit, .. } => format!("{verb} {unit}"),
        }
    }
}

impl From<SystemdError> for ServiceError {
    /// The message leaves out what the operation already names: a Node's reason reads
    /// `restart crio.service failed: org.freedesktop.systemd1.NoSuchUnit: ...`, not the unit
    /// (or a reboot's whole reason) twice.
    fn from(e: SystemdError) -> Self {
        let operation = e.operation();
        let message = match e {
            SystemdError::Call { error, .. } => error.to_string(),
            SystemdError::JobFailed { job, result, .. } => format!("systemd job {job} finished with result {result:?}"),
            SystemdError::JobTimeout { job, timeout, .. } => {
                format!("systemd job {job} did not finish within {timeout:?}")
            }
            SystemdError::SignalsLost { job, .. } => {
                format!("lost systemd's JobRemoved signals while waiting for job {job}")
            }
            e @ SystemdError::Connect { .. } => e.to_string(),
        };
        ServiceError::Call { operation, message }
    }
}

/// The result JobRemoved gives for `job` once it comes; `None` when the signals end.
async fn job_result(removed: &mut JobRemovedStream, job: &str) -> Option<String> {
    while let Some(signal) = removed.next().await {
        match signal.args() {
            Ok(args) if args.job.as_str() == job => return Some(args.result.clone()),
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %e, "unreadable JobRemoved signal"),
        }
    }
    None
}

/// The job results that mean "the unit is where it was asked to be". `skipped` is what systemd
/// reports for e.g. a reload of a unit that is not running: nothing to do is not a failure.
fn job_succeeded(result: &str) -> bool {
    matches!(result, "done" | "skipped")
}

/// systemd's object-path escaping of unit names (`bus_label_escape`): every byte outside
/// `[A-Za-z0-9]` becomes `_xx` in lower-case hex; the empty name is `_`.
pub fn bus_label_escape(name: &str) -> String {
    if name.is_empty() {
        return "_".to_string();
    }
    let mut out = String::with_capacity(name.len() * 3);
    for b in name.bytes() {
        if b.is_ascii_alphanumeric() {
            out.push(b as char);
        } else {
            out.push_str(&format!("_{b:02x}"));
        }
    }
    out
}

/// The object path systemd gives a unit, e.g. `/org/freedesktop/systemd1/unit/crio_2eservice`.
pub fn unit_object_path(name: &str) -> String {
    format!("{SYSTEMD_PATH}/unit/{}", bus_label_escape(name))
}

/// [`ServiceManager`] over D-Bus: systemd for units, logind for the reboot.
#[derive(Clone, Debug)]
pub struct SystemdDbus {
    conn: Connection,
    systemd: SystemdManagerProxy<'static>,
    logind: LogindManagerProxy<'static>,
    job_timeout: Duration,
}

impl SystemdDbus {
    /// Connect to the system bus (production). Must run inside a tokio runtime.
    pub async fn system() -> Result<Self, SystemdError> {
        let conn = Connection::system()
            .await
            .map_err(|error| SystemdError::Connect { bus: "the system bus".to_string(), error })?;
        Self::from_connection(conn).await
    }

    /// Connect to the bus at `address` (tests: the private bus of `testing::TestBus`, e.g.
    /// `unix:path=/tmp/.../bus`).
    pub async fn connect(address: &str) -> Result<Self, SystemdError> {
        let conn = zbus::connection::Builder::address(address)
            .build()
            .await
            .map_err(|error| SystemdError::Connect { bus: address.to_string(), error })?;
        Self::from_connection(conn).await
    }

    /// Use an existing connection (e.g. one the agent shares with its status interface).
    pub async fn from_connection(conn: Connection) -> Result<Self, SystemdError> {
        let call = |method: &'static str| {
            move |error| SystemdError::Call { method, target: SYSTEMD_SERVICE.to_string(), error }
        };
        let systemd = SystemdManagerProxy::new(&conn).await.map_err(call("proxy"))?;
        let logind = LogindManagerProxy::new(&conn).await.map_err(|error| SystemdError::Call {
            method: "proxy",
            target: LOGIND_SERVICE.to_string(),
            error,
        })?;
        // systemd sends JobRemoved only while some client is subscribed; subscribe once per
        // connection (a second Subscribe from the same client is an error).
        // Another SystemdDbus on the same connection may have subscribed already: that is fine.
        match systemd.subscribe().await {
            Err(e) if !e.to_string().contains("org.freedesktop.systemd1.AlreadySubscribed") => {
                return Err(call("Subscribe")(e));
            }
            _ => {}
        }
        Ok(SystemdDbus { conn, systemd, logind, job_timeout: DEFAULT_JOB_TIMEOUT })
    }

    /// Wait at most `timeout` for each unit job (default [`DEFAULT_JOB_TIMEOUT`]).
    #[must_use]
    pub fn with_job_timeout(mut self, timeout: Duration) -> Self {
        self.job_timeout = timeout;
        self
    }

    /// The underlying connection.
    pub fn connection(&self) -> &Connection {
        &self.conn
    }

    /// `systemctl is-enabled`: `enabled`, `disabled`, `static`, `masked`, ... An unknown unit is
    /// an error (systemd's NoSuchUnit / FileNotFound).
    pub async fn unit_file_state(&self, unit: &str) -> Result<String, SystemdError> {
        self.systemd.get_unit_file_state(unit).await.map_err(|error| SystemdError::Call {
            method: "GetUnitFileState",
            target: unit.to_string(),
            error,
        })
    }

    /// A proxy on `unit`'s object whose property reads always go to systemd (never cached).
    async fn unit(&self, unit: &str) -> Result<SystemdUnitProxy<'static>, SystemdError> {
        self.fresh(unit).await
    }

    /// A proxy of kind `P` (an interface of the unit's object) on `unit`, loaded first, whose
    /// property reads always go to systemd.
    async fn fresh<P>(&self, unit: &str) -> Result<P, SystemdError>
    where
        P: From<zbus::Proxy<'static>> + zbus::proxy::Defaults,
    {
        let err = |method: &'static str| {
            let target = unit.to_string();
            move |error| SystemdError::Call { method, target, error }
        };
        let path = self.systemd.load_unit(unit).await.map_err(err("LoadUnit"))?;
        zbus::proxy::Builder::<P>::new(&self.conn)
            .path(path)
            .cache_properties(CacheProperties::No)
            .build()
            .await
            .map_err(err("Get"))
    }

    fn get_err(unit: &str) -> impl FnOnce(zbus::Error) -> SystemdError + '_ {
        move |error| SystemdError::Call { method: "Get", target: unit.to_string(), error }
    }

    /// `systemctl is-active`: `active`, `inactive`, `failed`, ... read fresh, for health checks
    /// after a restart.
    pub async fn active_state(&self, unit: &str) -> Result<String, SystemdError> {
        self.unit(unit).await?.active_state().await.map_err(Self::get_err(unit))
    }

    /// The units `unit` wants, read fresh: the workloads of `aloft-workloads.target`.
    pub async fn wants(&self, unit: &str) -> Result<Vec<String>, SystemdError> {
        self.unit(unit).await?.wants().await.map_err(Self::get_err(unit))
    }

    /// Queue a unit job and wait for it to finish. The JobRemoved stream is opened *before* the
    /// job is queued, so a job that finishes before its reply arrives is not missed.
    pub async fn run_job(&self, kind: JobKind, unit: &str) -> Result<(), SystemdError> {
        let call_err = |error| SystemdError::Call { method: kind.method(), target: unit.to_string(), error };
        let mut removed = self.systemd.receive_job_removed().await.map_err(call_err)?;
        let started = Instant::now();
        let job = match kind {
            JobKind::Reload => self.systemd.reload_unit(unit, "replace").await,
            JobKind::Restart => self.systemd.restart_unit(unit, "replace").await,
            JobKind::Start => self.systemd.start_unit(unit, "replace").await,
            JobKind::Stop => self.systemd.stop_unit(unit, "replace").await,
        }
        .map_err(call_err)?;
        let job = job.to_string();
        tracing::debug!(unit, job = %job, method = kind.method(), "systemd job queued");
        let wait = job_result(&mut removed, &job);
        let verb = kind.verb();
        match tokio::time::timeout(self.job_timeout, wait).await {
            Err(_) => Err(SystemdError::JobTimeout { verb, unit: unit.to_string(), job, timeout: self.job_timeout }),
            Ok(None) => Err(SystemdError::SignalsLost { verb, unit: unit.to_string(), job }),
            Ok(Some(result)) if job_succeeded(&result) => {
                tracing::info!(unit, verb, result = %result, elapsed_ms = started.elapsed().as_millis() as u64, "systemd job finished");
                Ok(())
            }
            Ok(Some(result)) => Err(SystemdError::JobFailed { verb, unit: unit.to_string(), job, result }),
        }
    }

    /// Run `run` as a transient oneshot service and wait for its end, as `systemd-run --wait`
    /// does: the start job of a oneshot ends when its program does, `done` for exit status 0,
    /// `failed` otherwise, the service's `Result` and `ExecMainStatus` then saying how
    /// (`timeout` when systemd stopped it at `TimeoutStartSec=`). A failed unit stays loaded
    /// until reset, so it is reset once read.
    pub async fn run_transient(&self, run: &TransientRun) -> Result<TransientEnd, SystemdError> {
        let unit = run.unit.as_str();
        let call_err =
            |method: &'static str| move |error| SystemdError::Call { method, target: unit.to_string(), error };
        let program = run.argv.first().cloned().unwrap_or_default();
        let exec = vec![(program, run.argv.clone(), false)];
        let output = run.output.to_string_lossy().into_owned();
        let micros = u64::try_from(run.timeout.as_micros()).unwrap_or(u64::MAX);
        let props: Vec<(&str, Variant<'_>)> = vec![
            ("Description", Variant::from(run.description.as_str())),
            ("Type", Variant::from("oneshot")),
            ("ExecStart", Variant::from(exec)),
            ("Environment", Variant::from(run.env.clone())),
            ("StandardInput", Variant::from("null")),
            // Standard error inherits standard output (systemd's default): one file, in order.
            ("StandardOutputFileToTruncate", Variant::from(output.as_str())),
            ("TimeoutStartUSec", Variant::from(micros)),
        ];
        let mut removed = self.systemd.receive_job_removed().await.map_err(call_err("StartTransientUnit"))?;
        let job = self
            .systemd
            .start_transient_unit(unit, "fail", &props, &[])
            .await
            .map_err(call_err("StartTransientUnit"))?
            .to_string();
        tracing::debug!(unit, job = %job, program = %run.argv.join(" "), "transient unit started");
        let wait = job_result(&mut removed, &job);
        // systemd stops the program at the timeout itself; the stop may take its own timeout
        // (90 s by default) before SIGKILL.
        let grace = Duration::from_secs(120);
        let result = match tokio::time::timeout(run.timeout.saturating_add(grace), wait).await {
            Ok(Some(result)) => result,
            Ok(None) => {
                self.abandon_transient(unit).await;
                return Err(SystemdError::SignalsLost { verb: "run", unit: unit.to_string(), job });
            }
            Err(_) => {
                self.abandon_transient(unit).await;
                return Ok(TransientEnd::TimedOut);
            }
        };
        let end = match result.as_str() {
            "done" => return Ok(TransientEnd::Succeeded),
            // A job timeout (`JobTimeoutSec=`); the program's own shows as the Result below.
            "timeout" => TransientEnd::TimedOut,
            _ => {
                let (service, status) = match self.service(unit).await {
                    Ok(p) => (p.result().await.ok(), p.exec_main_status().await.ok()),
                    Err(e) => {
                        tracing::warn!(unit, error = %e, "cannot read how a transient unit ended");
                        (None, None)
                    }
                };
                match service.as_deref() {
                    // `TimeoutStartSec=` of a oneshot: systemd stopped it, the job says `failed`.
                    Some("timeout") => TransientEnd::TimedOut,
                    _ => TransientEnd::Failed { result: service.unwrap_or(result), status },
                }
            }
        };
        if let Err(e) = self.systemd.reset_failed_unit(unit).await {
            tracing::warn!(unit, error = %e, "cannot reset a failed transient unit");
        }
        Ok(end)
    }

    /// Stop a transient unit whose end was not seen, and unload it if it failed, so that it
    /// neither runs on beside the next check nor stays loaded.
    async fn abandon_transient(&self, unit: &str) {
        if let Err(e) = self.run_job(JobKind::Stop, unit).await {
            tracing::warn!(unit, error = %e, "cannot stop a transient unit whose end was not seen");
        }
        let _ = self.systemd.reset_failed_unit(unit).await;
    }

    /// A proxy on `unit`'s Service interface, never cached.
    async fn service(&self, unit: &str) -> Result<SystemdServiceProxy<'static>, SystemdError> {
        self.fresh(unit).await
    }

    fn batch_err(method: &'static str, units: &[String]) -> impl FnOnce(zbus::Error) -> SystemdError {
        let target = units.join(", ");
        move |error| SystemdError::Call { method, target, error }
    }

    fn log_changes(method: &'static str, changes: &[UnitFileChange]) {
        for (kind, file, dest) in changes {
            tracing::info!(method, kind = %kind, file = %file, destination = %dest, "unit file change");
        }
    }
}

fn refs(units: &[String]) -> Vec<&str> {
    units.iter().map(String::as_str).collect()
}

/// Batch calls with no units are skipped: there is nothing for systemd to do, and it keeps the
/// recorded call sequence to the calls that mean something.
#[async_trait]
impl ServiceManager for SystemdDbus {
    async fn daemon_reload(&self) -> Result<(), ServiceError> {
        // Named as systemctl names it: "Reload failed" read as a unit's reload.
        self.systemd.reload().await.map_err(Self::batch_err("daemon-reload", &[]))?;
        tracing::info!("systemd daemon-reload done");
        Ok(())
    }

    async fn enable_units(&self, units: &[String]) -> Result<(), ServiceError> {
        if units.is_empty() {
            return Ok(());
        }
        let (_, changes) = self
            .systemd
            .enable_unit_files(&refs(units), false, true)
            .await
            .map_err(Self::batch_err("EnableUnitFiles", units))?;
        Self::log_changes("EnableUnitFiles", &changes);
        Ok(())
    }

    async fn disable_units(&self, units: &[String]) -> Result<(), ServiceError> {
        if units.is_empty() {
            return Ok(());
        }
        let changes = self
            .systemd
            .disable_unit_files(&refs(units), false)
            .await
            .map_err(Self::batch_err("DisableUnitFiles", units))?;
        Self::log_changes("DisableUnitFiles", &changes);
        Ok(())
    }

    async fn mask_units(&self, units: &[String]) -> Result<(), ServiceError> {
        if units.is_empty() {
            return Ok(());
        }
        let changes = self
            .systemd
            .mask_unit_files(&refs(units), false, true)
            .await
            .map_err(Self::batch_err("MaskUnitFiles", units))?;
        Self::log_changes("MaskUnitFiles", &changes);
        Ok(())
    }

    async fn unmask_units(&self, units: &[String]) -> Result<(), ServiceError> {
        if units.is_empty() {
            return Ok(());
        }
        let changes = self
            .systemd
            .unmask_unit_files(&refs(units), false)
            .await
            .map_err(Self::batch_err("UnmaskUnitFiles", units))?;
        Self::log_changes("UnmaskUnitFiles", &changes);
        Ok(())
    }

    async fn preset_units(&self, units: &[String]) -> Result<(), ServiceError> {
        if units.is_empty() {
            return Ok(());
        }
        let (_, changes) = self
            .systemd
            .preset_unit_files(&refs(units), false, true)
            .await
            .map_err(Self::batch_err("PresetUnitFiles", units))?;
        Self::log_changes("PresetUnitFiles", &changes);
        Ok(())
    }

    async fn reload_unit(&self, unit: &str) -> Result<(), ServiceError> {
        Ok(self.run_job(JobKind::Reload, unit).await?)
    }

    async fn restart_unit(&self, unit: &str) -> Result<(), ServiceError> {
        Ok(self.run_job(JobKind::Restart, unit).await?)
    }

    async fn start_unit(&self, unit: &str) -> Result<(), ServiceError> {
        Ok(self.run_job(JobKind::Start, unit).await?)
    }

    async fn stop_unit(&self, unit: &str) -> Result<(), ServiceError> {
        Ok(self.run_job(JobKind::Stop, unit).await?)
    }

    async fn wants(&self, unit: &str) -> Result<Vec<String>, ServiceError> {
        Ok(SystemdDbus::wants(self, unit).await?)
    }

    async fn reboot(&self, reason: &str) -> Result<(), ServiceError> {
        tracing::warn!(reason, "asking logind to reboot");
        // The reason is logged above; the error names only logind's method.
        self.logind.reboot(false).await.map_err(|error| SystemdError::Call {
            method: "logind Reboot",
            target: String::new(),
            error,
        })?;
        Ok(())
    }

    async fn active_state(&self, unit: &str) -> Result<String, ServiceError> {
        Ok(SystemdDbus::active_state(self, unit).await?)
    }

    async fn run_transient(&self, run: &TransientRun) -> Result<Option<TransientEnd>, ServiceError> {
        Ok(Some(SystemdDbus::run_transient(self, run).await?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_unit_names_like_systemd() {
        assert_eq!(bus_label_escape("crio.service"), "crio_2eservice");
        assert_eq!(bus_label_escape("getty@tty1.service"), "getty_40tty1_2eservice");
        assert_eq!(bus_label_escape("a-b_c"), "a_2db_5fc");
        assert_eq!(bus_label_escape(""), "_");
        assert_eq!(unit_object_path("x.service"), "/org/freedesktop/systemd1/unit/x_2eservice");
    }

    #[test]
    fn job_results() {
        assert!(job_succeeded("done") && job_succeeded("skipped"));
        for bad in ["failed", "timeout", "dependency", "canceled"] {
            assert!(!job_succeeded(bad), "{bad}");
        }
    }

    #[test]
    fn errors_name_the_unit() {
        let e: ServiceError = SystemdError::JobFailed {
            verb: "restart",
            unit: "crio.service".into(),
            job: "/org/freedesktop/systemd1/job/7".into(),
            result: "failed".into(),
        }
        .into();
        let text = e.to_string();
        assert!(text.starts_with("restart crio.service failed:"), "{text}");
        assert!(text.contains("result \"failed\""), "{text}");
    }
}
