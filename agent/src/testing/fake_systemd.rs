//! A TEST implementation of systemd (`org.freedesktop.systemd1`) and logind
//! (`org.freedesktop.login1`), served on a [`TestBus`].
//!
//! It stands in for systemd and logind, the one boundary that cannot run in tests: a test
//! process cannot be PID 1, start real services, or reboot the machine. Everything around it is
//! real: the bus daemon, the D-Bus messages and signals, the agent's client code, and the files
//! beneath the test root. It records every call in order ([`FakeSystemd::calls`]), does to the
//! files what `systemctl` does (see `unit_files`), answers unit jobs with a `JobRemoved` signal
//! after the reply (result `done` unless a failure was injected), and records reboots without
//! rebooting anything.
//!
//! Deliberate simplifications, each documented where it applies: `PresetUnitFiles` behaves as
//! `EnableUnitFiles` (as if every preset said `enable`); unit jobs succeed for any unit name,
//! whether or not a unit file exists (tests restart `crio.service` without installing CRI-O);
//! `Subscribe`/`Unsubscribe` are accepted but not recorded (they are protocol bookkeeping, not
//! something the agent decides).

use super::bus::TestBus;
use super::unit_files::{Change, UnitFiles};
use crate::systemd::{unit_object_path, LOGIND_PATH, LOGIND_SERVICE, SYSTEMD_PATH, SYSTEMD_SERVICE};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use zbus::object_server::{ObjectServer, ResponseDispatchNotifier, SignalEmitter};
use zbus::{interface, Connection, DBusError, OwnedObjectPath, OwnedVariant};

/// An argument of a recorded call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Arg {
    Str(String),
    List(Vec<String>),
    Bool(bool),
}

impl From<&str> for Arg {
    fn from(s: &str) -> Self {
        Arg::Str(s.to_string())
    }
}

impl From<bool> for Arg {
    fn from(b: bool) -> Self {
        Arg::Bool(b)
    }
}

impl From<&[&str]> for Arg {
    fn from(l: &[&str]) -> Self {
        Arg::List(l.iter().map(|s| s.to_string()).collect())
    }
}

impl fmt::Display for Arg {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Arg::Str(s) => f.write_str(s),
            Arg::Bool(b) => write!(f, "{b}"),
            Arg::List(l) => write!(f, "[{}]", l.join(", ")),
        }
    }
}

/// One D-Bus method call the fake received: the method's name (as on the bus, e.g.
/// `EnableUnitFiles`) and its arguments in order. Displays as
/// `EnableUnitFiles([a.service, b.service], false, true)`, which makes assertions short.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Call {
    pub method: String,
    pub args: Vec<Arg>,
}

impl Call {
    pub fn new(method: &str, args: impl IntoIterator<Item = Arg>) -> Self {
        Call { method: method.to_string(), args: args.into_iter().collect() }
    }

    /// The unit names the call is about: the file list of a batch call, or the unit of a job.
    pub fn units(&self) -> Vec<String> {
        match self.args.first() {
            Some(Arg::List(l)) => l.clone(),
            Some(Arg::Str(s)) if self.method != "Reboot" => vec![s.clone()],
            _ => Vec::new(),
        }
    }
}

impl fmt::Display for Call {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let args: Vec<String> = self.args.iter().map(ToString::to_string).collect();
        write!(f, "{}({})", self.method, args.join(", "))
    }
}

/// Errors the fake returns on the bus, with systemd's error names
/// (`org.freedesktop.systemd1.NoSuchUnit`, ...). `Failed` is an injected or I/O failure.
#[derive(Debug, DBusError)]
#[zbus(prefix = "org.freedesktop.systemd1")]
pub enum FakeError {
    #[zbus(error)]
    ZBus(zbus::Error),
    NoSuchUnit(String),
    UnitMasked(String),
    /// A transient unit of a name that is loaded (running, or failed and not reset).
    UnitExists(String),
    Failed(String),
}

/// Errors of the fake logind, with logind's error names.
#[derive(Debug, DBusError)]
#[zbus(prefix = "org.freedesktop.login1")]
pub enum FakeLoginError {
    #[zbus(error)]
    ZBus(zbus::Error),
    /// What logind answers a shutdown request while it holds one it took (a delay inhibitor).
    OperationInProgress(String),
    /// A failure injected with [`FakeSystemd::fail_calls`].
    Failed(String),
}

impl From<FakeError> for FakeLoginError {
    fn from(e: FakeError) -> Self {
        match e {
            FakeError::ZBus(e) => FakeLoginError::ZBus(e),
            FakeError::NoSuchUnit(s) | FakeError::UnitMasked(s) | FakeError::UnitExists(s) | FakeError::Failed(s) => {
                FakeLoginError::Failed(s)
            }
        }
    }
}

#[derive(Debug, Default)]
struct State {
    calls: Vec<Call>,
    /// unit -> the job result to report instead of `done`.
    job_results: BTreeMap<String, String>,
    /// Units whose jobs never finish (no JobRemoved).
    hung: BTreeSet<String>,
    /// Units whose jobs finish only once the test releases them ([`FakeSystemd::release_held_jobs`]).
    held: BTreeSet<String>,
    /// (method, unit or None for every call of the method).
    call_failures: Vec<(String, Option<String>)>,
    /// unit -> ActiveState.
    active: BTreeMap<String, String>,
    reboots: Vec<bool>,
    /// Reboots are held, as a delay inhibitor holds logind's: the first request is taken and
    /// nothing happens; later ones are refused as in progress.
    hold_reboots: bool,
    next_job: u32,
    /// Transient units still loaded: running, or failed and not reset (a successful one is
    /// unloaded at its end, as systemd collects an inactive transient unit).
    transient: BTreeMap<String, TransientEnded>,
}

/// How a transient unit's run ended, as its Service properties say (`running` until then).
#[derive(Debug, Clone)]
struct TransientEnded {
    result: String,
    status: i32,
}

#[derive(Clone)]
struct Shared {
    state: Arc<Mutex<State>>,
    files: UnitFiles,
    /// Raised by each release of the held jobs; a held job waits for a value above the one it
    /// saw when it was queued.
    releases: Arc<tokio::sync::watch::Sender<u64>>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A test that panicked while holding the lock must not hide the calls from the next one.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Record the call, then fail it if a failure was injected for it.
    fn record(&self, call: Call) -> Result<(), FakeError> {
        let mut st = self.lock();
        let units = call.units();
        let failing = st
            .call_failures
            .iter()
            .any(|(m, u)| *m == call.method && u.as_ref().is_none_or(|u| units.iter().any(|x| x == u)));
        let text = call.to_string();
        st.calls.push(call);
        if failing {
            return Err(FakeError::Failed(format!("injected failure: {text}")));
        }
        Ok(())
    }

    fn batch(
        &self,
        method: &str,
        files: Vec<String>,
        flags: &[bool],
        mut each: impl FnMut(&UnitFiles, &str) -> Result<(bool, Vec<Change>), FakeError>,
    ) -> Result<(bool, Vec<Change>), FakeError> {
        let mut args = vec![Arg::List(files.clone())];
        args.extend(flags.iter().map(|b| Arg::Bool(*b)));
        self.record(Call { method: method.to_string(), args })?;
        let mut carries = false;
        let mut changes = Vec::new();
        for f in &files {
            let (c, ch) = each(&self.files, f)?;
            carries |= c;
            changes.extend(ch);
        }
        Ok((carries, changes))
    }

    /// Record a unit job, move the unit's ActiveState, and answer with a job path; JobRemoved
    /// follows once the reply has been sent, as systemd orders them.
    fn job(
        &self,
        method: &str,
        name: String,
        mode: String,
        emitter: &SignalEmitter<'_>,
    ) -> Result<ResponseDispatchNotifier<OwnedObjectPath>, FakeError> {
        self.record(Call::new(method, [Arg::Str(name.clone()), Arg::Str(mode)]))?;
        let (id, result, hung, held) = {
            let mut st = self.lock();
            st.next_job += 1;
            let id = st.next_job;
            let result = st.job_results.get(&name).cloned().unwrap_or_else(|| "done".to_string());
            let state = match (method, result.as_str()) {
                (_, "done") if method == "StopUnit" => "inactive",
                (_, "done") => "active",
                _ => "failed",
            };
            st.active.insert(name.clone(), state.to_string());
            // Seen under the lock the releases are made under: a release after this job was
            // held must count, and one before it must not.
            let mut releases = self.releases.subscribe();
            let queued_at = *releases.borrow_and_update();
            (id, result, st.hung.contains(&name), st.held.contains(&name).then_some((releases, queued_at)))
        };
        let path = OwnedObjectPath::try_from(format!("{SYSTEMD_PATH}/job/{id}")).map_err(FakeError::ZBus)?;
        let (reply, sent) = ResponseDispatchNotifier::new(path.clone());
        if !hung {
            let emitter = emitter.to_owned();
            tokio::spawn(async move {
                sent.await;
                if let Some((mut releases, queued_at)) = held {
                    let _ = releases.wait_for(|r| *r > queued_at).await;
                }
                if let Err(e) = SystemdManager::job_removed(&emitter, id, path, &name, &result).await {
                    tracing::warn!(error = %e, "fake systemd could not emit JobRemoved");
                }
            });
        }
        Ok(reply)
    }
}

/// `org.freedesktop.systemd1.Manager` at /org/freedesktop/systemd1.
struct SystemdManager {
    shared: Shared,
}

#[interface(name = "org.freedesktop.systemd1.Manager")]
impl SystemdManager {
    fn subscribe(&self) {}

    fn unsubscribe(&self) {}

    fn reload(&self) -> Result<(), FakeError> {
        self.shared.record(Call::new("Reload", []))
    }

    fn enable_unit_files(
        &self,
        files: Vec<String>,
        runtime: bool,
        force: bool,
    ) -> Result<(bool, Vec<Change>), FakeError> {
        self.shared.batch("EnableUnitFiles", files, &[runtime, force], |u, f| u.enable(f, force))
    }

    fn disable_unit_files(&self, files: Vec<String>, runtime: bool) -> Result<Vec<Change>, FakeError> {
        Ok(self.shared.batch("DisableUnitFiles", files, &[runtime], |u, f| Ok((false, u.disable(f)?)))?.1)
    }

    fn mask_unit_files(&self, files: Vec<String>, runtime: bool, force: bool) -> Result<Vec<Change>, FakeError> {
        Ok(self.shared.batch("MaskUnitFiles", files, &[runtime, force], |u, f| Ok((false, u.mask(f, force)?)))?.1)
    }

    fn unmask_unit_files(&self, files: Vec<String>, runtime: bool) -> Result<Vec<Change>, FakeError> {
        Ok(self.shared.batch("UnmaskUnitFiles", files, &[runtime], |u, f| Ok((false, u.unmask(f)?)))?.1)
    }

    /// Behaves as EnableUnitFiles: the fake has no preset files, and treats every unit as if a
    /// preset said `enable`.
    fn preset_unit_files(
        &self,
        files: Vec<String>,
        runtime: bool,
        force: bool,
    ) -> Result<(bool, Vec<Change>), FakeError> {
        self.shared.batch("PresetUnitFiles", files, &[runtime, force], |u, f| u.enable(f, force))
    }

    fn reload_unit(
        &self,
        name: String,
        mode: String,
        #[zbus(signal_emitter)] emitter: SignalEmitter<'_>,
    ) -> Result<ResponseDispatchNotifier<OwnedObjectPath>, FakeError> {
        self.shared.job("ReloadUnit", name, mode, &emitter)
    }

    fn restart_unit(
        &self,
        name: String,
        mode: String,
        #[zbus(signal_emitter)] emitter: SignalEmitter<'_>,
    ) -> Result<ResponseDispatchNotifier<OwnedObjectPath>, FakeError> {
        self.shared.job("RestartUnit", name, mode, &emitter)
    }

    fn start_unit(
        &self,
        name: String,
        mode: String,
        #[zbus(signal_emitter)] emitter: SignalEmitter<'_>,
    ) -> Result<ResponseDispatchNotifier<OwnedObjectPath>, FakeError> {
        self.shared.job("StartUnit", name, mode, &emitter)
    }

    fn stop_unit(
        &self,
        name: String,
        mode: String,
        #[zbus(signal_emitter)] emitter: SignalEmitter<'_>,
    ) -> Result<ResponseDispatchNotifier<OwnedObjectPath>, FakeError> {
        self.shared.job("StopUnit", name, mode, &emitter)
    }

    fn get_unit_file_state(&self, file: String) -> Result<String, FakeError> {
        self.shared.record(Call::new("GetUnitFileState", [Arg::Str(file.clone())]))?;
        self.shared.files.state(&file)
    }

    /// Registers a Unit object for `name` (once) and returns its path.
    async fn load_unit(
        &self,
        name: String,
        #[zbus(object_server)] server: &ObjectServer,
    ) -> Result<OwnedObjectPath, FakeError> {
        self.shared.record(Call::new("LoadUnit", [Arg::Str(name.clone())]))?;
        let path = OwnedObjectPath::try_from(unit_object_path(&name)).map_err(FakeError::ZBus)?;
        let unit = SystemdUnit { name, shared: self.shared.clone() };
        // An existing object is kept: its state lives in the shared map, not in the object.
        let _existing = server.at(path.as_str(), unit).await.map_err(FakeError::ZBus)?;
        Ok(path)
    }

    /// Runs the program of a oneshot transient unit as a child of this test process (the
    /// boundary: it cannot be systemd's), its output in the file to truncate, with only the
    /// unit's environment and systemd's PATH, stopped at `TimeoutStartUSec`; JobRemoved says
    /// `done`, `failed` or `timeout` when it ends. Properties the agent does not send are refused,
    /// as systemd refuses unknown ones.
    async fn start_transient_unit(
        &self,
        name: String,
        mode: String,
        properties: Vec<(String, OwnedVariant)>,
        _aux: Vec<(String, Vec<(String, OwnedVariant)>)>,
        #[zbus(signal_emitter)] emitter: SignalEmitter<'_>,
        #[zbus(object_server)] server: &ObjectServer,
    ) -> Result<ResponseDispatchNotifier<OwnedObjectPath>, FakeError> {
        let spec = TransientSpec::parse(&properties)?;
        self.shared.record(Call::new(
            "StartTransientUnit",
            [Arg::Str(name.clone()), Arg::Str(mode), Arg::List(spec.argv.clone())],
        ))?;
        let id = {
            let mut st = self.shared.lock();
            if st.transient.contains_key(&name) {
                return Err(FakeError::UnitExists(format!("Unit {name} was already loaded or has a fragment file.")));
            }
            st.transient.insert(name.clone(), TransientEnded { result: "running".into(), status: 0 });
            st.active.insert(name.clone(), "activating".into());
            st.next_job += 1;
            st.next_job
        };
        let unit_path = unit_object_path(&name);
        let _existing =
            server.at(unit_path.as_str(), SystemdUnit { name: name.clone(), shared: self.shared.clone() }).await;
        let _existing =
            server.at(unit_path.as_str(), SystemdService { name: name.clone(), shared: self.shared.clone() }).await;
        let path = OwnedObjectPath::try_from(format!("{SYSTEMD_PATH}/job/{id}")).map_err(FakeError::ZBus)?;
        let (reply, sent) = ResponseDispatchNotifier::new(path.clone());
        let emitter = emitter.to_owned();
        let shared = self.shared.clone();
        tokio::spawn(async move {
            sent.await;
            let ended = spec.run().await;
            // As systemd: a oneshot stopped at `TimeoutStartSec=` fails its job; its Result
            // says `timeout`.
            let job_result = if ended.result == "success" { "done" } else { "failed" };
            {
                let mut st = shared.lock();
                if ended.result == "success" {
                    st.transient.remove(&name);
                    st.active.insert(name.clone(), "inactive".into());
                } else {
                    st.transient.insert(name.clone(), ended);
                    st.active.insert(name.clone(), "failed".into());
                }
            }
            if let Err(e) = SystemdManager::job_removed(&emitter, id, path, &name, job_result).await {
                tracing::warn!(error = %e, "fake systemd could not emit JobRemoved");
            }
        });
        Ok(reply)
    }

    /// Unloads a failed transient unit.
    fn reset_failed_unit(&self, name: String) -> Result<(), FakeError> {
        self.shared.record(Call::new("ResetFailedUnit", [Arg::Str(name.clone())]))?;
        let mut st = self.shared.lock();
        if st.transient.get(&name).is_some_and(|t| t.result != "running") {
            st.transient.remove(&name);
            st.active.insert(name, "inactive".into());
        }
        Ok(())
    }

    #[zbus(signal)]
    async fn job_removed(
        emitter: &SignalEmitter<'_>,
        id: u32,
        job: OwnedObjectPath,
        unit: &str,
        result: &str,
    ) -> zbus::Result<()>;
}

/// `org.freedesktop.systemd1.Unit` of one unit, for ActiveState/LoadState reads.
struct SystemdUnit {
    name: String,
    shared: Shared,
}

#[interface(name = "org.freedesktop.systemd1.Unit")]
impl SystemdUnit {
    #[zbus(property)]
    fn id(&self) -> String {
        self.name.clone()
    }

    #[zbus(property)]
    fn active_state(&self) -> String {
        self.shared.lock().active.get(&self.name).cloned().unwrap_or_else(|| "inactive".to_string())
    }

    #[zbus(property)]
    fn wants(&self) -> Vec<String> {
        self.shared.files.wants(&self.name)
    }

    #[zbus(property)]
    fn load_state(&self) -> String {
        let files = &self.shared.files;
        if files.is_masked(&self.name) {
            "masked"
        } else if files.exists(&self.name) {
            "loaded"
        } else {
            "not-found"
        }
        .to_string()
    }
}

/// `org.freedesktop.systemd1.Service` of a transient unit: how its run ended.
struct SystemdService {
    name: String,
    shared: Shared,
}

#[interface(name = "org.freedesktop.systemd1.Service")]
impl SystemdService {
    #[zbus(property)]
    fn result(&self) -> String {
        self.shared.lock().transient.get(&self.name).map_or_else(|| "success".to_string(), |t| t.result.clone())
    }

    #[zbus(property)]
    fn exec_main_status(&self) -> i32 {
        self.shared.lock().transient.get(&self.name).map_or(0, |t| t.status)
    }
}

/// What a transient unit runs, read from its properties.
struct TransientSpec {
    argv: Vec<String>,
    env: Vec<String>,
    output: Option<PathBuf>,
    timeout: Option<std::time::Duration>,
}

impl TransientSpec {
    fn parse(properties: &[(String, OwnedVariant)]) -> Result<Self, FakeError> {
        fn bad(name: &str, e: impl std::fmt::Display) -> FakeError {
            FakeError::Failed(format!("invalid property {name}: {e}"))
        }
        let mut spec = TransientSpec { argv: Vec::new(), env: Vec::new(), output: None, timeout: None };
        for (name, value) in properties {
            let value = value.try_clone().map_err(|e| bad(name, e))?;
            match name.as_str() {
                "Description" | "Type" | "StandardInput" => {}
                "ExecStart" => {
                    let exec: Vec<(String, Vec<String>, bool)> = value.try_into().map_err(|e| bad(name, e))?;
                    let [(path, argv, _)] = exec.as_slice() else {
                        return Err(FakeError::Failed("a oneshot transient unit takes one ExecStart".into()));
                    };
                    if !path.starts_with('/') {
                        return Err(FakeError::Failed(format!("Path {path} is not absolute.")));
                    }
                    spec.argv = argv.clone();
                }
                "Environment" => spec.env = value.try_into().map_err(|e| bad(name, e))?,
                "StandardOutputFileToTruncate" => {
                    let path: String = value.try_into().map_err(|e| bad(name, e))?;
                    spec.output = Some(PathBuf::from(path));
                }
                "TimeoutStartUSec" => {
                    let micros: u64 = value.try_into().map_err(|e| bad(name, e))?;
                    spec.timeout = Some(std::time::Duration::from_micros(micros));
                }
                other => return Err(FakeError::Failed(format!("Cannot set property {other}, or unknown property."))),
            }
        }
        if spec.argv.is_empty() {
            return Err(FakeError::Failed("Service has no ExecStart=, ExecStop=, or SuccessAction=. Refusing.".into()));
        }
        Ok(spec)
    }

    /// Run it to its end (or its timeout) as systemd would run the service: a clean
    /// environment, standard input from /dev/null, standard error where standard output goes.
    async fn run(self) -> TransientEnded {
        let failed = |result: &str, status: i32| TransientEnded { result: result.into(), status };
        let mut cmd = tokio::process::Command::new(&self.argv[0]);
        cmd.args(&self.argv[1..])
            .env_clear()
            .env("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
            .stdin(std::process::Stdio::null())
            .kill_on_drop(true);
        for kv in &self.env {
            if let Some((k, v)) = kv.split_once('=') {
                cmd.env(k, v);
            }
        }
        if let Some(path) = &self.output {
            let Ok(out) = std::fs::File::create(path) else { return failed("resources", 209) };
            let Ok(err) = out.try_clone() else { return failed("resources", 209) };
            cmd.stdout(out).stderr(err);
        }
        let Ok(mut child) = cmd.spawn() else { return failed("exit-code", 203) };
        let status = match self.timeout {
            Some(t) => match tokio::time::timeout(t, child.wait()).await {
                Ok(s) => s,
                Err(_) => {
                    // systemd's SIGTERM first, then SIGKILL after the stop timeout.
                    if let Some(pid) = child.id() {
                        let _ = nix::sys::signal::kill(
                            nix::unistd::Pid::from_raw(pid as i32),
                            nix::sys::signal::Signal::SIGTERM,
                        );
                    }
                    if tokio::time::timeout(std::time::Duration::from_secs(5), child.wait()).await.is_err() {
                        let _ = child.kill().await;
                    }
                    return failed("timeout", 0);
                }
            },
            None => child.wait().await,
        };
        use std::os::unix::process::ExitStatusExt;
        match status {
            Ok(s) if s.success() => failed("success", 0),
            Ok(s) => match (s.code(), s.signal()) {
                (Some(code), _) => failed("exit-code", code),
                (None, Some(sig)) => failed("signal", sig),
                (None, None) => failed("exit-code", 1),
            },
            Err(_) => failed("exit-code", 1),
        }
    }
}

/// `org.freedesktop.login1.Manager` at /org/freedesktop/login1.
struct LogindManager {
    shared: Shared,
}

#[interface(name = "org.freedesktop.login1.Manager")]
impl LogindManager {
    /// Records the reboot. Reboots nothing.
    fn reboot(&self, interactive: bool) -> Result<(), FakeLoginError> {
        self.shared.record(Call::new("Reboot", [Arg::Bool(interactive)]))?;
        let mut st = self.shared.lock();
        if st.hold_reboots && !st.reboots.is_empty() {
            return Err(FakeLoginError::OperationInProgress(
                "There's already a shutdown or sleep operation in progress".into(),
            ));
        }
        st.reboots.push(interactive);
        Ok(())
    }
}

/// The test systemd + logind, serving `org.freedesktop.systemd1` and `org.freedesktop.login1`
/// on a private bus, with unit-file effects beneath `root`. Stays on the bus while this value
/// lives.
pub struct FakeSystemd {
    conn: Connection,
    shared: Shared,
    root: PathBuf,
}

impl FakeSystemd {
    /// Serve on `bus`; unit files are read and links written beneath `root`
    /// (`<root>/etc/systemd/system`, `<root>/usr/lib/systemd/system`).
    pub async fn serve(bus: &TestBus, root: impl AsRef<Path>) -> Result<Self, zbus::Error> {
        Self::serve_at(bus.address(), root).await
    }

    /// Serve on the bus at `address`.
    pub async fn serve_at(address: &str, root: impl AsRef<Path>) -> Result<Self, zbus::Error> {
        let root = root.as_ref().to_path_buf();
        let shared = Shared {
            state: Arc::default(),
            files: UnitFiles::new(&root),
            releases: Arc::new(tokio::sync::watch::Sender::new(0)),
        };
        let conn = zbus::connection::Builder::address(address)
            .serve_at(SYSTEMD_PATH, SystemdManager { shared: shared.clone() })
            .serve_at(LOGIND_PATH, LogindManager { shared: shared.clone() })
            .name(SYSTEMD_SERVICE)
            .name(LOGIND_SERVICE)
            .build()
            .await?;
        Ok(FakeSystemd { conn, shared, root })
    }

    /// The root the unit-file effects land beneath.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The fake's own connection.
    pub fn connection(&self) -> &Connection {
        &self.conn
    }

    /// Every call received so far, in order (Subscribe/Unsubscribe excepted).
    pub fn calls(&self) -> Vec<Call> {
        self.shared.lock().calls.clone()
    }

    /// [`calls`](Self::calls) as strings, e.g. `["Reload()", "RestartUnit(crio.service, replace)"]`.
    pub fn call_strings(&self) -> Vec<String> {
        self.calls().iter().map(ToString::to_string).collect()
    }

    /// Forget the calls (and reboots) recorded so far.
    pub fn clear_calls(&self) {
        let mut shared = self.shared.lock();
        shared.calls.clear();
        shared.reboots.clear();
    }

    /// The reboots asked for (each one's `interactive` flag), in order.
    pub fn reboots(&self) -> Vec<bool> {
        self.shared.lock().reboots.clone()
    }

    /// Jobs for `unit` finish with `result` (`failed`, `timeout`, `dependency`, `canceled`)
    /// instead of `done`; the unit's ActiveState becomes `failed`.
    pub fn fail_jobs_of(&self, unit: &str, result: &str) {
        self.shared.lock().job_results.insert(unit.to_string(), result.to_string());
    }

    /// Jobs for `unit` never finish (no JobRemoved), to exercise the client's timeout.
    pub fn hang_jobs_of(&self, unit: &str) {
        self.shared.lock().hung.insert(unit.to_string());
    }

    /// Jobs for `unit` wait (no JobRemoved) until [`release_held_jobs`](Self::release_held_jobs),
    /// then finish as they would have: a test can change the host while the agent waits for one.
    pub fn hold_jobs_of(&self, unit: &str) {
        self.shared.lock().held.insert(unit.to_string());
    }

    /// Let the held jobs finish, and hold no more.
    pub fn release_held_jobs(&self) {
        let mut st = self.shared.lock();
        st.held.clear();
        self.shared.releases.send_modify(|r| *r += 1);
    }

    /// Calls of `method` (e.g. `EnableUnitFiles`, `Reload`, `Reboot`) fail with
    /// `org.freedesktop.systemd1.Failed`: every call when `unit` is None, else those naming it.
    /// The call is still recorded.
    pub fn fail_calls(&self, method: &str, unit: Option<&str>) {
        self.shared.lock().call_failures.push((method.to_string(), unit.map(str::to_string)));
    }

    /// Hold reboots as logind does while a delay inhibitor holds the one it took: the first
    /// request is taken (and recorded in [`reboots`](Self::reboots)), later ones fail with
    /// `org.freedesktop.login1.OperationInProgress`. The calls are still recorded.
    pub fn hold_reboots(&self) {
        self.shared.lock().hold_reboots = true;
    }

    /// Remove every injected failure, hang and hold.
    pub fn clear_failures(&self) {
        let mut st = self.shared.lock();
        st.job_results.clear();
        st.hung.clear();
        st.held.clear();
        st.call_failures.clear();
        st.hold_reboots = false;
        self.shared.releases.send_modify(|r| *r += 1);
    }

    /// A unit's ActiveState as the fake reports it (`inactive` until a job ran).
    pub fn active_state(&self, unit: &str) -> String {
        self.shared.lock().active.get(unit).cloned().unwrap_or_else(|| "inactive".to_string())
    }

    /// Set a unit's ActiveState (e.g. `failed`, for health-check tests).
    pub fn set_active_state(&self, unit: &str, state: &str) {
        self.shared.lock().active.insert(unit.to_string(), state.to_string());
    }
}
