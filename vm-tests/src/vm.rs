//! One VM: a QEMU process per boot, supervised by a task that plays the bootloader.
//!
//! Each VM has a qcow2 overlay over the built `disk.raw` (`qemu-img create -b disk.raw -F raw -f
//! qcow2`), so the build's disk is never written and VMs do not share state. QEMU runs with
//! `-no-reboot`: a guest reboot ends the process, QMP's `SHUTDOWN` event says `guest-reset`, and
//! the supervisor reads the boot entries from the overlay again (`qemu-img convert` to a
//! temporary raw image, then `images/boot-entry`, which picks the highest-`version` BLS entry
//! with debugfs, without mounting anything) and starts QEMU with that kernel, initrd and options.
//! Before it picks, it counts the boot as GRUB with greenboot's script does, in the disk's
//! `/boot/grub2/grubenv`: once the counter the OS armed runs out, it boots the previous entry.
//!
//! Every QEMU process is killed by its own PID: when a boot does not reach `ALOFT-READY` in
//! time, when the VM's whole life exceeds its limit, when a test cuts the power, and when the
//! [`Vm`] is dropped (also `kill_on_drop`). A `qemu.pid` file lets the next run kill a QEMU that
//! an aborted run left behind (only if that PID's command line names this VM's overlay).

use crate::channel::{Channel, Output};
use crate::images::Images;
use crate::qmp::{self, EventLog};
use crate::{env, images};
use aloft_api::os::grubenv::{self, BootChoice};
use anyhow::{anyhow, bail, ensure, Context, Result};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, oneshot, watch};

/// How a VM is started.
#[derive(Debug, Clone)]
pub struct VmOptions {
    pub name: String,
    /// The first-boot bootstrap config, given as fw_cfg `opt/aloft/bootstrap`.
    pub bootstrap: String,
    /// `guestfwd`s: (guest address `IP:PORT`, host loopback port). Nothing else is reachable
    /// from the guest (`restrict=on`).
    pub forwards: Vec<(String, u16)>,
    pub memory_mib: u32,
    pub cpus: u32,
    /// `cache=writeback` (the guest's flushes reach the host file before they are acknowledged)
    /// instead of `cache=unsafe`. A test that kills QEMU in the middle of writes needs it: with
    /// `unsafe`, qcow2 metadata QEMU still holds in memory would be lost with acknowledged data,
    /// which no real disk does.
    pub durable_disk: bool,
    /// Each boot must print `ALOFT-READY` within this.
    pub boot_timeout: Duration,
    /// The VM's whole life (all boots); then QEMU is killed.
    pub max_runtime: Duration,
}

impl VmOptions {
    pub fn new(name: &str, bootstrap: String, forwards: Vec<(String, u16)>) -> VmOptions {
        VmOptions {
            name: name.to_string(),
            bootstrap,
            forwards,
            memory_mib: 1024,
            cpus: 2,
            durable_disk: false,
            boot_timeout: Duration::from_secs(600),
            max_runtime: Duration::from_secs(3 * 3600),
        }
    }
}

/// Where a VM is in its life.
#[derive(Debug, Clone, PartialEq)]
pub enum Phase {
    /// QEMU is running, the OS has not printed `ALOFT-READY` yet.
    Booting,
    /// `ALOFT-READY` seen on the console of this boot.
    Ready { boot_id: String, release: String },
    /// The guest rebooted; the harness reads the boot entries and starts QEMU again.
    Rebooting,
    /// QEMU is not running: the guest powered off, or the test cut the power.
    Off { power_cut: bool },
    /// The VM stays down: a boot timed out, QEMU died, no boot entry. The message says which.
    Failed(String),
}

/// How long [`Vm::exec_timeout`] waits for a VM that is booting to come up.
pub const UP_WAIT: Duration = Duration::from_secs(90);

/// The VM's state, as the supervisor publishes it.
#[derive(Debug, Clone)]
pub struct Status {
    /// QEMU starts so far (1 = the first boot).
    pub boot: u32,
    pub phase: Phase,
}

/// How one boot went.
#[derive(Debug, Clone)]
pub struct BootRecord {
    pub boot: u32,
    /// What the bootloader chose: `ENTRY version=N: OPTIONS` (images/boot-entry's line).
    pub entry: String,
    pub started: Instant,
    /// Time from QEMU's start to `ALOFT-READY`.
    pub ready_after: Option<Duration>,
    pub boot_id: Option<String>,
    pub release: Option<String>,
    /// How it ended (None while running): `guest-reset`, `guest-shutdown`, `power-cut`, ...
    pub end: Option<String>,
    /// Its console log. A boot the harness power-cycled after a guest kernel hang or a crash of
    /// QEMU is tried again under the same number; the lost attempt's log is kept as
    /// `serial-N-hung-K.log` or `serial-N-crashed-K.log`.
    pub serial: PathBuf,
}

enum Control {
    PowerCut(oneshot::Sender<()>),
    PowerOn,
}

/// A kernel, an initrd and a command line: what a bootloader hands over.
#[derive(Debug, Clone)]
struct BootFiles {
    kernel: PathBuf,
    initrd: PathBuf,
    cmdline: String,
    entry: String,
}

/// A running VM. Dropping it kills its QEMU.
pub struct Vm {
    pub name: String,
    /// Overlay, serial logs (`serial-N.log`), QEMU's output (`qemu-N.log`), boot entries.
    pub dir: PathBuf,
    status: watch::Receiver<Status>,
    control: mpsc::Sender<Control>,
    channel: Arc<tokio::sync::Mutex<Option<Channel>>>,
    pid: Arc<AtomicU32>,
    events: EventLog,
    boots: Arc<Mutex<Vec<BootRecord>>>,
    task: tokio::task::JoinHandle<()>,
}

struct Supervisor {
    name: String,
    dir: PathBuf,
    sock_dir: PathBuf,
    overlay: PathBuf,
    opts: VmOptions,
    status: watch::Sender<Status>,
    control: mpsc::Receiver<Control>,
    channel: Arc<tokio::sync::Mutex<Option<Channel>>>,
    pid: Arc<AtomicU32>,
    events: EventLog,
    boots: Arc<Mutex<Vec<BootRecord>>>,
    deadline: tokio::time::Instant,
}

enum Exit {
    /// The guest rebooted.
    Reset,
    /// The guest powered off.
    Poweroff,
    /// The test cut the power.
    PowerCut,
    /// The handle is gone.
    Dropped,
    /// The guest kernel reported a CPU stuck for minutes before the boot was ready (see
    /// [`kernel_hang`]); QEMU is killed.
    Hung(String),
    /// QEMU itself ended without a `SHUTDOWN` event: neither the guest nor the test ended it (a
    /// crash of the emulator, or a kill from outside such as the OOM killer). What it printed
    /// and how it ended.
    Crashed(String),
    Failed(String),
}

/// How long a guest CPU must be reported stuck before the harness power-cycles the VM. Under TCG
/// on a loaded host a lockup report of 20-40 s can be transient (the vCPU thread was not
/// scheduled); one of minutes has not come back in any run we have (CI once saw `CPU#1 stuck for
/// 540s! [systemd:1]` until the boot timeout).
const HANG_AFTER: Duration = Duration::from_secs(120);

/// At the boot timeout, how many of the console's last lines a lockup or stall report must be
/// among for the boot to count as hung: the kernel repeats them every minute or so while a CPU
/// stays stuck, and prints little else.
const HANG_REPORT_LINES: usize = 20;

/// How many hung boots a VM is power-cycled out of before its test fails: a real host's hardware
/// watchdog resets it the same way, and a guest that hangs again is a finding, not an accident.
const MAX_HANG_RESETS: u32 = 2;

/// How many times a VM whose QEMU died under it is power-cycled before its test fails. A host's
/// crash is a power cut to the guest, which aloft must survive anyway; a QEMU that cannot start
/// at all fails again at once and is reported with its own words.
const MAX_CRASH_RESETS: u32 = 1;

/// The guest kernel's own report of a hang on the console: a soft lockup of at least `at_least`
/// (`watchdog: BUG: soft lockup - CPU#1 stuck for 130s! [systemd:1]`), or with `at_least` zero,
/// any lockup or RCU stall report. The line, to name in the boot's record.
///
/// A kernel hang is the emulator's (TCG) or the guest kernel's, never aloft's: aloft runs in user
/// space, and the reports name a CPU spinning in the kernel. Waiting out the boot timeout and
/// failing the test would report an accident of the host as a finding.
pub fn kernel_hang(serial: &str, at_least: Duration) -> Option<String> {
    serial
        .lines()
        .find_map(|line| {
            let line = line.trim_end_matches('\r');
            let report = line.find("soft lockup - CPU#").map(|i| &line[i..])?;
            let secs: u64 = report.split("stuck for ").nth(1)?.split('s').next()?.parse().ok()?;
            (secs >= at_least.as_secs()).then(|| report.trim().to_string())
        })
        .or_else(|| {
            at_least.is_zero().then_some(())?;
            serial
                .lines()
                .find(|l| l.contains("self-detected stall on CPU") || l.contains("detected stalls on CPUs"))
                .map(|l| l.trim_end_matches('\r').trim().to_string())
        })
}

/// At the boot timeout: a lockup or stall report among the console's last lines, so the kernel
/// was still stuck when the time ran out (an early report that passed says nothing of the end).
fn hung_at_the_end(serial: &str) -> Option<String> {
    let mut last: Vec<&str> = serial.lines().rev().take(HANG_REPORT_LINES).collect();
    last.reverse();
    kernel_hang(&last.join("\n"), Duration::ZERO)
}

impl Vm {
    /// Create the VM's overlay in `dir` and boot it (v1's entry from the build). `sock_dir` holds
    /// the QMP and command channel sockets (a short path: Unix socket paths are limited to 107
    /// bytes). Returns at once; see [`Vm::wait_ready`].
    pub async fn start(images: &Images, opts: VmOptions, dir: &Path, sock_dir: &Path) -> Result<Vm> {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        std::fs::create_dir_all(sock_dir)?;
        let overlay = dir.join("overlay.qcow2");
        kill_stale_qemu(dir, &overlay);
        let _ = std::fs::remove_file(&overlay);
        let out = tokio::process::Command::new("qemu-img")
            .args(["create", "-q", "-f", "qcow2", "-F", "raw", "-b"])
            .arg(images.disk())
            .arg(&overlay)
            .output()
            .await
            .context("running qemu-img create")?;
        if !out.status.success() {
            bail!("qemu-img create {}: {}", overlay.display(), String::from_utf8_lossy(&out.stderr));
        }
        std::fs::write(dir.join("bootstrap.env"), &opts.bootstrap)?;
        let (kernel, initrd, cmdline) = images.first_boot()?;
        let first = BootFiles { kernel, initrd, cmdline, entry: "v1 (from the build)".into() };
        let (status_tx, status) = watch::channel(Status { boot: 0, phase: Phase::Booting });
        let (control_tx, control_rx) = mpsc::channel(4);
        let channel = Arc::new(tokio::sync::Mutex::new(None));
        let pid = Arc::new(AtomicU32::new(0));
        let events: EventLog = Arc::default();
        let boots: Arc<Mutex<Vec<BootRecord>>> = Arc::default();
        let sup = Supervisor {
            name: opts.name.clone(),
            dir: dir.to_path_buf(),
            sock_dir: sock_dir.to_path_buf(),
            overlay,
            deadline: tokio::time::Instant::now() + opts.max_runtime,
            opts: opts.clone(),
            status: status_tx,
            control: control_rx,
            channel: channel.clone(),
            pid: pid.clone(),
            events: events.clone(),
            boots: boots.clone(),
        };
        let task = tokio::spawn(sup.run(first));
        Ok(Vm {
            name: opts.name,
            dir: dir.to_path_buf(),
            status,
            control: control_tx,
            channel,
            pid,
            events,
            boots,
            task,
        })
    }

    pub fn status(&self) -> Status {
        self.status.borrow().clone()
    }

    /// Every boot so far.
    pub fn boots(&self) -> Vec<BootRecord> {
        self.boots.lock().expect("boots").clone()
    }

    /// How many times the guest rebooted by itself (boots that ended in `guest-reset`).
    pub fn reboots(&self) -> usize {
        self.boots().iter().filter(|b| b.end.as_deref() == Some("guest-reset")).count()
    }

    /// QMP events of every boot.
    pub fn events(&self) -> Vec<qmp::Event> {
        self.events.lock().expect("events").clone()
    }

    /// Wait until `pred` holds for the VM's status; fails at once when the VM has failed.
    pub async fn wait_for(
        &self,
        what: &str,
        timeout: Duration,
        mut pred: impl FnMut(&Status) -> bool,
    ) -> Result<Status> {
        let mut rx = self.status.clone();
        let waited =
            tokio::time::timeout(timeout, rx.wait_for(|s| pred(s) || matches!(s.phase, Phase::Failed(_)))).await;
        match waited {
            Err(_) => bail!("{}: {what}: not within {timeout:?} (now {:?})", self.name, self.status()),
            Ok(Err(_)) => bail!("{}: {what}: the VM's supervisor is gone", self.name),
            Ok(Ok(s)) => match &s.phase {
                Phase::Failed(msg) if !pred(&s) => bail!("{}: {what}: the VM failed: {msg}", self.name),
                _ => Ok(s.clone()),
            },
        }
    }

    /// Wait until boot `boot` prints a line containing `marker` on its serial console (the guest
    /// writes to `/dev/console`, as the ready line does). Fails when that boot ends first, or at
    /// `timeout`. For moments no command can be run at, such as late in a shutdown.
    pub async fn wait_serial(&self, boot: u32, marker: &str, timeout: Duration) -> Result<()> {
        let serial = self.dir.join(format!("serial-{boot}.log"));
        let until = tokio::time::Instant::now() + timeout;
        loop {
            let text = std::fs::read(&serial).unwrap_or_default();
            if String::from_utf8_lossy(&text).contains(marker) {
                return Ok(());
            }
            let now = self.status();
            if now.boot > boot || matches!(now.phase, Phase::Failed(_) | Phase::Off { .. }) {
                bail!(
                    "{}: boot {boot} ended ({now:?}) without printing {marker:?} (see {})",
                    self.name,
                    serial.display()
                );
            }
            if tokio::time::Instant::now() >= until {
                bail!(
                    "{}: boot {boot} did not print {marker:?} within {timeout:?} (see {})",
                    self.name,
                    serial.display()
                );
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Wait for a boot numbered at least `min_boot` to be ready; returns (boot, boot_id, release).
    pub async fn wait_ready(&self, min_boot: u32, timeout: Duration) -> Result<(u32, String, String)> {
        let s = self
            .wait_for(&format!("ready (boot {min_boot} or later)"), timeout, |s| {
                s.boot >= min_boot && matches!(s.phase, Phase::Ready { .. })
            })
            .await?;
        match s.phase {
            Phase::Ready { boot_id, release } => Ok((s.boot, boot_id, release)),
            other => Err(anyhow!("{}: not ready: {other:?}", self.name)),
        }
    }

    /// Run a shell script as root in the guest. A VM that is booting, or between two boots, is
    /// waited for (at most [`UP_WAIT`]): an agent reports Done from its own unit, which can run
    /// before the guest prints its ready line, so a rollout can converge a moment before the
    /// node takes commands (seen once in scenario c: both nodes Done on v2, vm-0's ready line
    /// not read yet). A VM that is off or failed is an error at once.
    pub async fn exec_timeout(&self, script: &str, timeout: Duration) -> Result<Output> {
        let now = self.status();
        if matches!(now.phase, Phase::Booting | Phase::Rebooting) {
            self.wait_ready(now.boot, UP_WAIT)
                .await
                .with_context(|| format!("{}: cannot run {script:?}: the VM did not come up", self.name))?;
        }
        if !matches!(self.status().phase, Phase::Ready { .. }) {
            bail!("{}: cannot run {script:?}: the VM is not up ({:?})", self.name, self.status());
        }
        let mut ch = self.channel.lock().await;
        let ch = ch.as_mut().ok_or_else(|| anyhow!("{}: no command channel (the VM is down)", self.name))?;
        ch.run(script, timeout).await.with_context(|| format!("{}: running {script:?}", self.name))
    }

    /// [`Vm::exec_timeout`] with 5 minutes.
    pub async fn exec(&self, script: &str) -> Result<Output> {
        self.exec_timeout(script, Duration::from_secs(300)).await
    }

    /// Run a script that must succeed; its output.
    pub async fn sh(&self, script: &str) -> Result<String> {
        let name = &self.name;
        self.exec(script).await?.ok(&format!("{name}: {script}"))
    }

    /// Cut the power: SIGKILL to this VM's QEMU (by its PID), as a power failure would. The
    /// VM stays off until [`Vm::power_on`].
    pub async fn power_cut(&self) -> Result<()> {
        let (tx, rx) = oneshot::channel();
        self.control.send(Control::PowerCut(tx)).await.map_err(|_| anyhow!("{}: supervisor gone", self.name))?;
        rx.await.map_err(|_| anyhow!("{}: supervisor gone", self.name))
    }

    /// Power on after a power cut or a power-off: the boot entries are read from the disk again.
    pub async fn power_on(&self) -> Result<()> {
        self.control.send(Control::PowerOn).await.map_err(|_| anyhow!("{}: supervisor gone", self.name))
    }

    /// The journal over all boots of the agent, its OS helper and the units that finalize a
    /// staged deployment (`journalctl -u ...`, [`JOURNAL_UNITS`]), with the structured fields
    /// the agent logs (tracing-journald puts them in journal fields, which the usual one-line
    /// formats leave out), saved as `agent-journal.log` in the VM's directory; and its warnings
    /// and errors (priority 4 or lower), which a failure report prints, since CI keeps only the
    /// test's output. Needs the VM up.
    pub async fn save_journal(&self) -> Result<(PathBuf, Vec<String>)> {
        let units: Vec<String> = JOURNAL_UNITS.iter().map(|u| format!("-u {u}")).collect();
        let cmd = format!("journalctl {} --no-pager -o json", units.join(" "));
        let out = self.exec_timeout(&cmd, Duration::from_secs(120)).await?;
        let text: Vec<String> = out.out.lines().map(format_journal_line).collect();
        let warnings = out.out.lines().filter(|l| is_warning(l)).map(format_journal_line).collect();
        let path = self.dir.join("agent-journal.log");
        std::fs::write(&path, text.join("\n") + "\n")?;
        Ok((path, warnings))
    }
}

/// The units whose journal a failed test keeps: the agent, its OS helper, and ostree's
/// finalizing of staged deployments with the image's /boot checkpoint after it.
pub const JOURNAL_UNITS: [&str; 4] =
    ["aloft-agent", "aloft-os-helper", "ostree-finalize-staged.service", "aloft-boot-sync.service"];

/// A `journalctl -o json` record of priority warning or worse.
fn is_warning(line: &str) -> bool {
    let Ok(serde_json::Value::Object(m)) = serde_json::from_str::<serde_json::Value>(line) else {
        return false;
    };
    m.get("PRIORITY").and_then(|p| p.as_str()).and_then(|p| p.parse::<u8>().ok()).is_some_and(|p| p <= 4)
}

/// One `journalctl -o json` record as `[boot-prefix monotonic] identifier: MESSAGE KEY=value...`
/// (fields of the record's own, not journald's bookkeeping). Lines that are not JSON stay as
/// they are.
pub fn format_journal_line(line: &str) -> String {
    let Ok(serde_json::Value::Object(m)) = serde_json::from_str::<serde_json::Value>(line) else {
        return line.to_string();
    };
    let s = |k: &str| m.get(k).and_then(|v| v.as_str()).unwrap_or("").to_string();
    let mono = s("__MONOTONIC_TIMESTAMP").parse::<f64>().map(|us| us / 1e6).unwrap_or(0.0);
    let boot: String = s("_BOOT_ID").chars().take(8).collect();
    let ident = if s("SYSLOG_IDENTIFIER").is_empty() { s("_COMM") } else { s("SYSLOG_IDENTIFIER") };
    let skip = |k: &str| {
        k.starts_with('_')
            || k.starts_with("SYSLOG_")
            || k.starts_with("CODE_")
            || matches!(k, "MESSAGE" | "PRIORITY" | "TARGET" | "INVOCATION_ID" | "MESSAGE_ID" | "TID")
    };
    let mut fields: Vec<String> = m
        .iter()
        .filter(|(k, _)| !skip(k))
        .map(|(k, v)| {
            format!("{}={}", k.to_lowercase(), v.as_str().map(str::to_string).unwrap_or_else(|| v.to_string()))
        })
        .collect();
    fields.sort();
    format!("[{boot} {mono:>10.3}] {ident}: {} {}", s("MESSAGE"), fields.join(" "))
}

impl Drop for Vm {
    fn drop(&mut self) {
        let pid = self.pid.swap(0, Ordering::SeqCst);
        if pid != 0 {
            let _ = kill(Pid::from_raw(pid as i32), Signal::SIGKILL);
        }
        self.task.abort();
    }
}

/// Kill a QEMU an aborted earlier run left behind in `dir`, if `qemu.pid` names a live process
/// whose command line has this VM's overlay in it.
fn kill_stale_qemu(dir: &Path, overlay: &Path) {
    let Ok(text) = std::fs::read_to_string(dir.join("qemu.pid")) else { return };
    let Ok(pid) = text.trim().parse::<i32>() else { return };
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    let needle = overlay.as_os_str().as_encoded_bytes();
    if cmdline.windows(needle.len()).any(|w| w == needle) {
        tracing::warn!(pid, dir = %dir.display(), "killing a QEMU left behind by an earlier run");
        let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// `ALOFT-READY boot_id=<uuid> uptime=<s> release=<n>` on the console: (boot_id, release).
pub fn parse_ready(serial: &str) -> Option<(String, String)> {
    let line = serial.lines().find_map(|l| l.find("ALOFT-READY ").map(|i| &l[i..]))?;
    let field =
        |k: &str| line.split_whitespace().find_map(|w| w.strip_prefix(k)).map(|v| v.trim_end_matches('\r').to_string());
    Some((field("boot_id=")?, field("release=")?))
}

impl Supervisor {
    fn set(&self, boot: u32, phase: Phase) {
        tracing::info!(vm = %self.name, boot, ?phase, "vm");
        self.status.send_replace(Status { boot, phase });
    }

    fn end_boot(&self, boot: u32, end: &str) {
        if let Some(b) = self.boots.lock().expect("boots").iter_mut().rev().find(|b| b.boot == boot) {
            b.end = Some(end.to_string());
        }
    }

    /// Power-cycle a boot the harness lost (a hung guest kernel, a crashed QEMU): keep its logs
    /// as `*-{lost}.log`, record why it ended, and run the firmware and bootloader again: the
    /// same boot, its entry read afresh. None when the entry cannot be read (the VM is Failed).
    async fn power_cycle(&self, boot: u32, lost: &str, why: &str) -> Option<BootFiles> {
        self.keep_lost_logs(boot, lost);
        self.end_boot(boot, why);
        self.set(boot, Phase::Rebooting);
        match self.read_boot_entry(boot).await {
            Ok(f) => Some(f),
            Err(e) => {
                self.set(boot, Phase::Failed(format!("bootloader: {e:#}")));
                None
            }
        }
    }

    /// Keep a lost attempt's (hung or crashed) console and QEMU logs beside the retry's (which take the boot's
    /// usual names); the boot's record points at the kept console log.
    fn keep_lost_logs(&self, boot: u32, what: &str) {
        for log in ["serial", "qemu"] {
            let from = self.dir.join(format!("{log}-{boot}.log"));
            let to = self.dir.join(format!("{log}-{boot}-{what}.log"));
            if std::fs::rename(&from, &to).is_ok() && log == "serial" {
                if let Some(b) = self.boots.lock().expect("boots").iter_mut().rev().find(|b| b.boot == boot) {
                    b.serial = to;
                }
            }
        }
    }

    async fn run(mut self, first: BootFiles) {
        let mut files = first;
        let mut boot = 0;
        let mut hangs = 0;
        let mut crashes = 0;
        let mut again = false;
        loop {
            if !std::mem::take(&mut again) {
                boot += 1;
            }
            let exit = match self.boot_once(boot, &files).await {
                Ok(exit) => exit,
                Err(e) => Exit::Failed(format!("{e:#}")),
            };
            let power_cut = match exit {
                Exit::Dropped => return,
                Exit::Crashed(report) if crashes < MAX_CRASH_RESETS => {
                    crashes += 1;
                    tracing::warn!(
                        vm = %self.name, boot, %report,
                        "QEMU died under the guest: power-cycling the VM and booting again \
                         ({crashes} of at most {MAX_CRASH_RESETS})"
                    );
                    let why = format!("QEMU crashed ({report}); power-cycled by the harness");
                    let Some(f) = self.power_cycle(boot, &format!("crashed-{crashes}"), &why).await else { return };
                    files = f;
                    again = true;
                    continue;
                }
                Exit::Crashed(report) => {
                    self.end_boot(boot, "failed");
                    let msg = format!(
                        "{report}; the harness had power-cycled this VM out of {crashes} such crash(es) already"
                    );
                    self.set(boot, Phase::Failed(msg));
                    return;
                }
                Exit::Hung(report) if hangs < MAX_HANG_RESETS => {
                    hangs += 1;
                    tracing::warn!(
                        vm = %self.name, boot, %report,
                        "the guest kernel hung before the boot was ready: power-cycling the VM and booting again \
                         ({hangs} of at most {MAX_HANG_RESETS})"
                    );
                    let why = format!("hung ({report}); power-cycled by the harness");
                    let Some(f) = self.power_cycle(boot, &format!("hung-{hangs}"), &why).await else { return };
                    files = f;
                    again = true;
                    continue;
                }
                Exit::Hung(report) => {
                    self.end_boot(boot, "failed");
                    let msg = format!(
                        "boot {boot} hung in the guest kernel again ({report}), after the harness power-cycled \
                         this VM out of {hangs} such hangs"
                    );
                    self.set(boot, Phase::Failed(msg));
                    return;
                }
                Exit::Failed(msg) => {
                    self.end_boot(boot, "failed");
                    self.set(boot, Phase::Failed(msg));
                    return;
                }
                Exit::Reset => {
                    self.end_boot(boot, "guest-reset");
                    self.set(boot, Phase::Rebooting);
                    None
                }
                Exit::Poweroff => Some(false),
                Exit::PowerCut => Some(true),
            };
            if let Some(power_cut) = power_cut {
                self.end_boot(boot, if power_cut { "power-cut" } else { "guest-shutdown" });
                self.set(boot, Phase::Off { power_cut });
                loop {
                    match self.control.recv().await {
                        None => return,
                        Some(Control::PowerOn) => break,
                        Some(Control::PowerCut(ack)) => {
                            let _ = ack.send(());
                        }
                    }
                }
            }
            files = match self.read_boot_entry(boot + 1).await {
                Ok(f) => f,
                Err(e) => {
                    self.set(boot, Phase::Failed(format!("bootloader: {e:#}")));
                    return;
                }
            };
        }
    }

    /// Play bootloader: the highest-version BLS entry of the VM's disk, as images/boot-entry
    /// reads it from a raw image (debugfs, no mounts).
    async fn read_boot_entry(&self, boot: u32) -> Result<BootFiles> {
        let out_dir = self.dir.join(format!("boot-{boot}"));
        std::fs::create_dir_all(&out_dir)?;
        let raw = out_dir.join("disk.raw");
        let converted = tokio::process::Command::new("qemu-img")
            .args(["convert", "-f", "qcow2", "-O", "raw"])
            .arg(&self.overlay)
            .arg(&raw)
            .output()
            .await
            .context("running qemu-img convert")?;
        if !converted.status.success() {
            bail!("qemu-img convert: {}", String::from_utf8_lossy(&converted.stderr));
        }
        let counted = self.count_boot(&raw).await;
        let script = env::workspace_root().join("images/boot-entry");
        let mut pick = tokio::process::Command::new(&script);
        pick.arg(&raw).arg(&out_dir);
        if let Ok(Some((BootChoice::Fallback, _))) = &counted {
            pick.arg("--rollback");
        }
        let picked = pick.output().await;
        let _ = std::fs::remove_file(&raw);
        let counted = counted?;
        let picked = picked.with_context(|| format!("running {}", script.display()))?;
        if !picked.status.success() {
            bail!("images/boot-entry: {}", String::from_utf8_lossy(&picked.stderr));
        }
        let mut entry = String::from_utf8_lossy(&picked.stdout).trim().to_string();
        let cmdline = std::fs::read_to_string(out_dir.join("cmdline"))?.trim().to_string();
        if let Some((choice, counter)) = &counted {
            let which = match choice {
                BootChoice::Default => "default entry",
                BootChoice::Fallback => "previous entry (fallback)",
            };
            entry = format!("{entry} [{which}; boot counting: {counter}]");
        }
        tracing::info!(vm = %self.name, boot, %entry, "bootloader: booting");
        Ok(BootFiles { kernel: out_dir.join("vmlinuz"), initrd: out_dir.join("initramfs.img"), cmdline, entry })
    }

    /// GRUB's boot counting with greenboot's scripts, run on the disk's environment block
    /// (`/boot/grub2/grubenv`) before an entry is picked ([`grubenv::bootloader_pass`]). The
    /// changed block is written back in place, into the blocks the file has, as GRUB's
    /// `save_env` does: found with debugfs in `raw` (the overlay's copy), written into the
    /// overlay with `qemu-io`. `None` without a block (or one GRUB could not read): no counting;
    /// else the choice and what the counter did.
    async fn count_boot(&self, raw: &Path) -> Result<Option<(BootChoice, String)>> {
        const FILE: &str = "/boot/grub2/grubenv";
        let debugfs = |req: String| async move {
            tokio::process::Command::new("debugfs").args(["-c", "-R", &req]).arg(raw).output().await
        };
        let bytes = debugfs(format!("cat {FILE}")).await.context("running debugfs")?.stdout;
        let Ok(mut env) = grubenv::EnvBlock::parse(&bytes) else {
            return Ok(None);
        };
        let before = env.get(grubenv::BOOT_COUNTER).unwrap_or("unset").to_string();
        let choice = grubenv::bootloader_pass(&mut env).context("GRUB's boot counting")?;
        let after = env.get(grubenv::BOOT_COUNTER).unwrap_or("unset").to_string();
        let new = env.to_bytes().context("GRUB's boot counting")?;
        if new != bytes {
            let field = |out: &str, key: &str| -> Option<u64> {
                out.lines().find_map(|l| l.trim().strip_prefix(key)).and_then(|v| v.trim().parse().ok())
            };
            let stats = String::from_utf8_lossy(&debugfs("stats".into()).await?.stdout).into_owned();
            let block_size = field(&stats, "Block size:").context("debugfs stats: no block size")?;
            let bmap = String::from_utf8_lossy(&debugfs(format!("bmap {FILE} 0")).await?.stdout).into_owned();
            let block: u64 = bmap.trim().parse().with_context(|| format!("debugfs bmap {FILE}: {bmap:?}"))?;
            ensure!(block > 0 && new.len() as u64 <= block_size, "{FILE}: block {block}, {} bytes", new.len());
            let tmp = raw.with_file_name("grubenv.new");
            std::fs::write(&tmp, &new)?;
            let write = format!("write -q -s {} {} {}", tmp.display(), block * block_size, new.len());
            let out = tokio::process::Command::new("qemu-io")
                .args(["-f", "qcow2", "-c", &write])
                .arg(&self.overlay)
                .output()
                .await
                .context("running qemu-io")?;
            let _ = std::fs::remove_file(&tmp);
            ensure!(
                out.status.success() && out.stderr.is_empty(),
                "qemu-io {write}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Ok(Some((choice, format!("boot_counter {before} -> {after}"))))
    }

    fn qemu_command(&self, boot: u32, files: &BootFiles) -> Result<tokio::process::Command> {
        let o = &self.opts;
        let mut net = String::from("user,id=n0,restrict=on");
        for (guest, port) in &o.forwards {
            net.push_str(&format!(",guestfwd=tcp:{guest}-cmd:socat - TCP:127.0.0.1:{port}"));
        }
        let cache = if o.durable_disk { "writeback" } else { "unsafe" };
        let log = std::fs::File::create(self.dir.join(format!("qemu-{boot}.log")))?;
        let mut cmd = tokio::process::Command::new("qemu-system-x86_64");
        cmd.args(["-accel", &env::accel(), "-machine", "q35", "-cpu", &env::cpu()])
            .args(["-smp", &o.cpus.to_string(), "-m", &o.memory_mib.to_string()])
            .args(["-display", "none", "-no-reboot", "-monitor", "none"])
            .arg("-serial")
            .arg(format!("file:{}", self.dir.join(format!("serial-{boot}.log")).display()))
            .arg("-qmp")
            .arg(format!("unix:{},server=on,wait=off", self.sock_dir.join("qmp.sock").display()))
            .arg("-drive")
            .arg(format!("file={},if=virtio,format=qcow2,cache={cache}", self.overlay.display()))
            .args(["-device", "virtio-rng-pci", "-device", "virtio-serial-pci", "-chardev"])
            .arg(format!("socket,id=cmd,path={},server=on,wait=off", self.sock_dir.join("cmd.sock").display()))
            .args(["-device", "virtserialport,chardev=cmd,name=org.aloft.cmd", "-fw_cfg"])
            .arg(format!("name=opt/aloft/bootstrap,file={}", self.dir.join("bootstrap.env").display()))
            .args(["-netdev", &net, "-device", "virtio-net-pci,netdev=n0"])
            .arg("-kernel")
            .arg(&files.kernel)
            .arg("-initrd")
            .arg(&files.initrd)
            .args(["-append", &files.cmdline])
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .kill_on_drop(true);
        Ok(cmd)
    }

    async fn boot_once(&mut self, boot: u32, files: &BootFiles) -> Result<Exit> {
        for s in ["qmp.sock", "cmd.sock"] {
            let _ = std::fs::remove_file(self.sock_dir.join(s));
        }
        let started = Instant::now();
        let mut child = self.qemu_command(boot, files)?.spawn().context("starting qemu-system-x86_64")?;
        let pid = child.id().ok_or_else(|| anyhow!("QEMU exited at once"))?;
        self.pid.store(pid, Ordering::SeqCst);
        std::fs::write(self.dir.join("qemu.pid"), pid.to_string())?;
        self.boots.lock().expect("boots").push(BootRecord {
            boot,
            entry: files.entry.clone(),
            started,
            ready_after: None,
            boot_id: None,
            release: None,
            end: None,
            serial: self.dir.join(format!("serial-{boot}.log")),
        });
        self.set(boot, Phase::Booting);
        let result = self.watch(boot, &mut child, started).await;
        // However the boot ended, this QEMU is gone or goes now.
        if result.is_err() || matches!(result, Ok(Exit::Dropped | Exit::Hung(_))) {
            let _ = kill(Pid::from_raw(pid as i32), Signal::SIGKILL);
            let _ = child.wait().await;
        }
        self.pid.store(0, Ordering::SeqCst);
        self.channel.lock().await.take();
        result
    }

    async fn watch(&mut self, boot: u32, child: &mut tokio::process::Child, started: Instant) -> Result<Exit> {
        let connect = Duration::from_secs(60);
        let channel = Channel::connect(&self.sock_dir.join("cmd.sock"), connect).await?;
        *self.channel.lock().await = Some(channel);
        let qmp_task = qmp::follow(&self.sock_dir.join("qmp.sock"), boot, self.events.clone(), connect).await?;
        let serial = self.dir.join(format!("serial-{boot}.log"));
        let ready_by = tokio::time::Instant::now() + self.opts.boot_timeout;
        let mut ready = false;
        let mut exited = None;
        let exit = loop {
            tokio::select! {
                status = child.wait() => {
                    let status = status.context("waiting for QEMU")?;
                    tracing::info!(vm = %self.name, boot, %status, "QEMU exited");
                    exited = Some(status);
                    break None;
                }
                _ = tokio::time::sleep(Duration::from_millis(500)), if !ready => {
                    let text = String::from_utf8_lossy(&std::fs::read(&serial).unwrap_or_default()).into_owned();
                    if let Some((boot_id, release)) = parse_ready(&text) {
                        ready = true;
                        let after = started.elapsed();
                        if let Some(b) = self.boots.lock().expect("boots").iter_mut().rev().find(|b| b.boot == boot) {
                            b.ready_after = Some(after);
                            b.boot_id = Some(boot_id.clone());
                            b.release = Some(release.clone());
                        }
                        tracing::info!(vm = %self.name, boot, secs = after.as_secs_f64(), %boot_id, %release, "ALOFT-READY");
                        self.set(boot, Phase::Ready { boot_id, release });
                    } else if let Some(report) = kernel_hang(&text, HANG_AFTER) {
                        break Some(Exit::Hung(report));
                    } else if tokio::time::Instant::now() >= ready_by {
                        if let Some(report) = hung_at_the_end(&text) {
                            break Some(Exit::Hung(report));
                        }
                        bail!("boot {boot} did not print ALOFT-READY within {:?} (see {})", self.opts.boot_timeout, serial.display());
                    }
                }
                c = self.control.recv() => match c {
                    None => break Some(Exit::Dropped),
                    Some(Control::PowerOn) => {}
                    Some(Control::PowerCut(ack)) => {
                        tracing::info!(vm = %self.name, boot, pid = child.id(), "power cut: SIGKILL to QEMU");
                        if let Some(pid) = child.id() {
                            let _ = kill(Pid::from_raw(pid as i32), Signal::SIGKILL);
                        }
                        let _ = child.wait().await;
                        let _ = ack.send(());
                        break Some(Exit::PowerCut);
                    }
                },
                _ = tokio::time::sleep_until(self.deadline) => {
                    bail!("the VM ran longer than its limit of {:?}", self.opts.max_runtime);
                }
            }
        };
        // QEMU is gone: the QMP connection ends; let the reader take the last events first.
        let _ = tokio::time::timeout(Duration::from_secs(5), qmp_task).await;
        if let Some(exit) = exit {
            return Ok(exit);
        }
        let reason = self
            .events
            .lock()
            .expect("events")
            .iter()
            .rev()
            .find(|e| e.boot == boot && e.name == "SHUTDOWN")
            .and_then(|e| e.shutdown_reason().map(str::to_string));
        Ok(match reason.as_deref() {
            Some("guest-reset") => Exit::Reset,
            Some("guest-shutdown") => Exit::Poweroff,
            Some(other) => Exit::Failed(format!("QEMU shut down: {other}")),
            None => {
                // CI keeps only the test's output: QEMU's own last words and how it ended (a
                // signal it did not send itself, an error exit) go into the failure.
                let log = self.dir.join(format!("qemu-{boot}.log"));
                let said = log_tail(&log, QEMU_LOG_TAIL);
                let how = exited.map_or_else(|| "with an unknown status".to_string(), |s| s.to_string());
                Exit::Crashed(format!(
                    "QEMU exited without a SHUTDOWN event ({how}, {:.0} s into boot {boot}, {}); its log {}: {}",
                    started.elapsed().as_secs_f64(),
                    if ready { "after the boot was ready" } else { "before the boot was ready" },
                    log.display(),
                    if said.is_empty() { "empty".to_string() } else { said.join(" | ") }
                ))
            }
        })
    }
}

/// How many of QEMU's own log lines (its stderr) a boot's failure quotes.
const QEMU_LOG_TAIL: usize = 8;

/// The last `n` non-empty lines of a log file (none if it cannot be read), each cut to 240
/// characters.
fn log_tail(path: &Path, n: usize) -> Vec<String> {
    let text = String::from_utf8_lossy(&std::fs::read(path).unwrap_or_default()).into_owned();
    let mut lines: Vec<String> =
        text.lines().filter(|l| !l.trim().is_empty()).map(|l| l.chars().take(240).collect()).collect();
    let skip = lines.len().saturating_sub(n);
    lines.drain(..skip);
    lines
}

/// The `images` module's guest address, re-exported for tests writing URLs.
pub use images::HOST_ADDR;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn journal_record() {
        let line = r#"{"__MONOTONIC_TIMESTAMP":"161999810","_BOOT_ID":"0669d8c9c4f1","SYSLOG_IDENTIFIER":"aloft-agent","MESSAGE":"update failed","ERROR":"mkdir /etc/x: Read-only file system","PRIORITY":"3","_PID":"291","CODE_LINE":"7"}"#;
        assert_eq!(
            format_journal_line(line),
            "[0669d8c9    162.000] aloft-agent: update failed error=mkdir /etc/x: Read-only file system"
        );
        assert_eq!(format_journal_line("-- No entries --"), "-- No entries --");
        assert!(is_warning(line), "priority 3 is an error");
        assert!(is_warning(&line.replace(r#""PRIORITY":"3""#, r#""PRIORITY":"4""#)), "priority 4 is a warning");
        assert!(!is_warning(&line.replace(r#""PRIORITY":"3""#, r#""PRIORITY":"6""#)), "priority 6 is info");
        assert!(!is_warning("-- No entries --"));
    }

    #[test]
    fn hung_kernel() {
        // From CI's console of a boot that never came up (boot 8 of f_named_cuts).
        let serial = "[   31.631882] rcu: INFO: rcu_preempt self-detected stall on CPU\r\n\
                      [   56.592295] watchdog: BUG: soft lockup - CPU#1 stuck for 44s! [systemd:1]\r\n\
                      [   84.592130] watchdog: BUG: soft lockup - CPU#1 stuck for 70s! [systemd:1]\r\n";
        assert_eq!(kernel_hang(serial, HANG_AFTER), None, "70 s may still pass under TCG");
        assert_eq!(
            kernel_hang(serial, Duration::from_secs(60)).as_deref(),
            Some("soft lockup - CPU#1 stuck for 70s! [systemd:1]")
        );
        let later =
            format!("{serial}[  148.592119] watchdog: BUG: soft lockup - CPU#1 stuck for 130s! [systemd:1]\r\n");
        assert_eq!(kernel_hang(&later, HANG_AFTER).as_deref(), Some("soft lockup - CPU#1 stuck for 130s! [systemd:1]"));
        // At the boot timeout any report will do, a stall alone too.
        let stall = "[   31.6] rcu: INFO: rcu_preempt self-detected stall on CPU\r\n";
        assert_eq!(kernel_hang(stall, HANG_AFTER), None);
        assert_eq!(
            kernel_hang(stall, Duration::ZERO).as_deref(),
            Some("[   31.6] rcu: INFO: rcu_preempt self-detected stall on CPU")
        );
        let quiet = "[    2.1] EXT4-fs (vda4): mounted filesystem\r\nALOFT-READY boot_id=";
        assert_eq!(kernel_hang(quiet, Duration::ZERO), None);
        // At the timeout, only a report near the end counts.
        assert!(hung_at_the_end(stall).is_some());
        let passed = format!("{stall}{}", "[   40.0] systemd[1]: Started something.\r\n".repeat(HANG_REPORT_LINES));
        assert_eq!(hung_at_the_end(&passed), None, "an early stall that passed");
    }

    #[test]
    fn ready_line() {
        let serial = "junk\r\n[  OK  ] Reached target\r\nALOFT-READY boot_id=5f0c uptime=61.20 release=2\r\n";
        assert_eq!(parse_ready(serial), Some(("5f0c".into(), "2".into())));
        assert_eq!(parse_ready("no marker yet\nALOFT-READY boot_id="), None);
    }
}
