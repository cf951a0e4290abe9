//! Health checks after an OS-update boot, as greenboot's required checks: the new OS is kept
//! only if the node works on it.
//!
//! Checks, in order: every required unit is `active`; then every executable in
//! `/usr/lib/aloft/health.d` and `/etc/aloft/health.d` (beneath the root) exits 0 within the
//! timeout. A file in `/etc` replaces the one of the same name in `/usr/lib` (drop-in rules, so an
//! admin can override a check the OS ships); a non-executable file is skipped, so `chmod -x`
//! disables a check. Checks run by name, one at a time: a check may depend on the ones before.
//! The first failure stops the run and names the check with its output, which becomes the
//! Degraded reason.
//!
//! A script runs as a transient unit of systemd, not as the agent's child: the agent's own unit
//! is sandboxed (private /dev, no netlink, few capabilities, no W^X memory), and a check must see
//! the host as the host's services do, or a sound OS update would be rolled back.

use crate::host::{Root, ServiceManager, TransientEnd, TransientRun};
use std::collections::BTreeMap;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Where the OS and the admin put health checks (relative to the root).
pub const CHECK_DIRS: [&str; 2] = ["usr/lib/aloft/health.d", "etc/aloft/health.d"];
/// Output kept per failing check (its tail: the end usually says what broke).
const MAX_OUTPUT: usize = 1500;

/// What to check.
#[derive(Debug, Clone)]
pub struct HealthChecks {
    pub root: Root,
    /// Units that must be `active`.
    pub required_units: Vec<String>,
    /// Per check (unit waits included).
    pub timeout: Duration,
}

/// The first check that failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("health check {check} failed: {output}")]
pub struct HealthFailure {
    /// `unit crio.service` or the script's path.
    pub check: String,
    pub output: String,
}

/// The end of a check's output, on one line (its lines joined with ` | `): it becomes a Node's
/// reason, which `aloftctl get nodes` shows in a column.
fn tail(s: &str) -> String {
    let joined = s.lines().map(str::trim).filter(|l| !l.is_empty()).collect::<Vec<_>>().join(" | ");
    let s = joined.as_str();
    if s.len() <= MAX_OUTPUT {
        return s.to_string();
    }
    let mut start = s.len() - MAX_OUTPUT;
    while !s.is_char_boundary(start) {
        start += 1;
    }
    format!("...{}", &s[start..])
}

impl HealthChecks {
    /// The check scripts in run order: name -> path, `/etc` winning over `/usr/lib`.
    pub fn scripts(&self) -> Vec<PathBuf> {
        let mut by_name = BTreeMap::new();
        for dir in CHECK_DIRS {
            let Ok(entries) = std::fs::read_dir(self.root.path().join(dir)) else { continue };
            for e in entries.flatten() {
                by_name.insert(e.file_name(), e.path());
            }
        }
        by_name
            .into_values()
            .filter(|p| {
                std::fs::metadata(p).map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0).unwrap_or(false)
            })
            .collect()
    }

    /// Run every check; `Ok` with the names of the checks that passed.
    pub async fn run(&self, services: &dyn ServiceManager) -> Result<Vec<String>, HealthFailure> {
        let mut passed = Vec::new();
        for unit in &self.required_units {
            let check = format!("unit {unit}");
            self.unit_active(services, unit).await.map_err(|output| HealthFailure { check: check.clone(), output })?;
            passed.push(check);
        }
        for script in self.scripts() {
            let check = script.display().to_string();
            self.run_script(services, &script)
                .await
                .map_err(|output| HealthFailure { check: check.clone(), output })?;
            passed.push(check);
        }
        tracing::info!(checks = passed.len(), "health checks passed");
        Ok(passed)
    }

    /// A unit still starting after boot gets until the timeout to become active: `inactive`
    /// too, which is what a unit whose start job waits on others (kubelet after crio) reports
    /// until its turn; only `failed` fails at once.
    async fn unit_active(&self, services: &dyn ServiceManager, unit: &str) -> Result<(), String> {
        let deadline = tokio::time::Instant::now() + self.timeout;
        loop {
            let state = services.active_state(unit).await.map_err(|e| e.to_string())?;
            match state.as_str() {
                "active" => return Ok(()),
                "activating" | "reloading" | "inactive" if tokio::time::Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(500)).await
                }
                // The check already names the unit.
                other => return Err(format!("its state is {other}, want active")),
            }
        }
    }

    /// A check runs as a transient service of systemd (greenboot runs its checks from a unit of
    /// their own too): with the host's privileges, not the agent's sandbox, so that a check may
    /// look at devices, ask netlink, ping, or start containers. Its output goes to
    /// `/run/aloft/health/NAME.log`, where an admin finds the last run's whole text; a service
    /// manager that cannot start services (tests without systemd) has the agent run it itself.
    async fn run_script(&self, services: &dyn ServiceManager, script: &Path) -> Result<(), String> {
        // D-Bus strings are UTF-8: a path that is not cannot be named to systemd as it is.
        let Some(program) = script.to_str() else {
            tracing::warn!(script = %script.display(), "a health check whose path is not UTF-8 runs as the agent's child");
            return self.run_child(script).await;
        };
        let name = script.file_name().map(|n| unit_word(&n.to_string_lossy())).unwrap_or_default();
        let dir = self.root.path().join(OUTPUT_DIR);
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&dir)
            .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        let run = TransientRun {
            unit: unit_name(&name),
            description: format!("aloft health check {}", script.display()),
            argv: vec![program.to_string()],
            env: check_env(self.root.path()),
            output: dir.join(format!("{name}.log")),
            timeout: self.timeout,
        };
        let end = match services.run_transient(&run).await {
            Err(e) => return Err(format!("cannot run: {e}")),
            Ok(None) => return self.run_child(script).await,
            Ok(Some(end)) => end,
        };
        let text = read_tail(&run.output);
        match end {
            TransientEnd::Succeeded => Ok(()),
            TransientEnd::TimedOut => {
                Err(with_output(format!("did not finish within {}", seconds(self.timeout)), &text))
            }
            TransientEnd::Failed { result, status } => {
                let how = match (result.as_str(), status) {
                    ("exit-code", Some(code)) => format!("exit status {code}"),
                    ("signal" | "core-dump", Some(sig)) => format!("killed by signal {sig}"),
                    (result, _) => format!("systemd result {result}"),
                };
                Err(format!("{} ({how})", tail(&text)).trim_start().to_string())
            }
        }
    }

    /// The check as the agent's own child: where no service manager can start it.
    async fn run_child(&self, script: &Path) -> Result<(), String> {
        let mut cmd = tokio::process::Command::new(script);
        cmd.env("ALOFT_ROOT", self.root.path())
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true);
        let child = cmd.spawn().map_err(|e| format!("cannot run: {e}"))?;
        match tokio::time::timeout(self.timeout, child.wait_with_output()).await {
            Err(_) => Err(format!("did not finish within {}", seconds(self.timeout))),
            Ok(Err(e)) => Err(format!("cannot run: {e}")),
            Ok(Ok(out)) if out.status.success() => Ok(()),
            Ok(Ok(out)) => {
                let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
                let how = match (out.status.code(), out.status.signal()) {
                    (Some(code), _) => format!("exit status {code}"),
                    (None, Some(sig)) => format!("killed by signal {sig}"),
                    (None, None) => "ended abnormally".to_string(),
                };
                Err(format!("{} ({how})", tail(&text)).trim_start().to_string())
            }
        }
    }
}

/// A check's environment: `ALOFT_ROOT`, and the agent's proxy settings (from
/// `/etc/aloft/agent.env`, the agent's own environment), so that a check reaching an endpoint
/// goes the way the agent does.
fn check_env(root: &Path) -> Vec<String> {
    let mut env = vec![format!("ALOFT_ROOT={}", root.display())];
    for k in ["HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "NO_PROXY", "no_proxy"] {
        if let Ok(v) = std::env::var(k) {
            env.push(format!("{k}={v}"));
        }
    }
    env
}

/// Where each check's output goes, relative to the root: `NAME.log` per check.
pub const OUTPUT_DIR: &str = "run/aloft/health";

/// `what`, and the check's output when it said anything.
fn with_output(what: String, text: &str) -> String {
    match tail(text) {
        t if t.is_empty() => what,
        t => format!("{what}: {t}"),
    }
}

/// `5 seconds`, `0.3 seconds`.
fn seconds(d: Duration) -> String {
    if d.subsec_millis() == 0 {
        format!("{} seconds", d.as_secs())
    } else {
        format!("{:.1} seconds", d.as_secs_f64())
    }
}

/// The last 64 KiB of a check's output file, as text (missing: nothing said).
fn read_tail(path: &Path) -> String {
    use std::io::{Read, Seek, SeekFrom};
    const KEEP: u64 = 64 * 1024;
    let Ok(mut f) = std::fs::File::open(path) else { return String::new() };
    let len = f.metadata().map(|m| m.len()).unwrap_or(0);
    if f.seek(SeekFrom::Start(len.saturating_sub(KEEP))).is_err() {
        return String::new();
    }
    let mut buf = Vec::new();
    let _ = f.take(KEEP).read_to_end(&mut buf);
    String::from_utf8_lossy(&buf).into_owned()
}

/// A check's file name as systemd allows in a unit name (ASCII letters, digits, `_`, `.`,
/// `-`; the rest `_`), at most 64 bytes.
fn unit_word(name: &str) -> String {
    name.chars()
        .map(|c| if c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-') { c } else { '_' })
        .take(64)
        .collect()
}

/// A unit name no earlier run has: systemd refuses a transient unit whose name is loaded, and a
/// failed one stays loaded if the agent stopped before resetting it.
fn unit_name(word: &str) -> String {
    static RUNS: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or_default();
    format!("aloft-health-{word}-{nanos:x}-{}.service", RUNS.fetch_add(1, Ordering::Relaxed))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::ServiceError;
    use async_trait::async_trait;

    /// A systemd whose units are all in state `.0` (`.1`: until this instant, then active).
    struct Units(&'static str, Option<std::time::Instant>);
    #[async_trait]
    impl ServiceManager for Units {
        async fn daemon_reload(&self) -> Result<(), ServiceError> {
            Ok(())
        }
        async fn enable_units(&self, _: &[String]) -> Result<(), ServiceError> {
            Ok(())
        }
        async fn disable_units(&self, _: &[String]) -> Result<(), ServiceError> {
            Ok(())
        }
        async fn mask_units(&self, _: &[String]) -> Result<(), ServiceError> {
            Ok(())
        }
        async fn unmask_units(&self, _: &[String]) -> Result<(), ServiceError> {
            Ok(())
        }
        async fn preset_units(&self, _: &[String]) -> Result<(), ServiceError> {
            Ok(())
        }
        async fn reload_unit(&self, _: &str) -> Result<(), ServiceError> {
            Ok(())
        }
        async fn restart_unit(&self, _: &str) -> Result<(), ServiceError> {
            Ok(())
        }
        async fn start_unit(&self, _: &str) -> Result<(), ServiceError> {
            Ok(())
        }
        async fn stop_unit(&self, _: &str) -> Result<(), ServiceError> {
            Ok(())
        }
        async fn wants(&self, _: &str) -> Result<Vec<String>, ServiceError> {
            Ok(Vec::new())
        }
        async fn reboot(&self, _: &str) -> Result<(), ServiceError> {
            Ok(())
        }
        async fn active_state(&self, _: &str) -> Result<String, ServiceError> {
            match self.1 {
                Some(until) if std::time::Instant::now() >= until => Ok("active".into()),
                _ => Ok(self.0.to_string()),
            }
        }
    }

    fn script(root: &std::path::Path, dir: &str, name: &str, body: &str, mode: u32) {
        let d = root.join(dir);
        std::fs::create_dir_all(&d).unwrap();
        let p = d.join(name);
        std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
    }

    #[tokio::test]
    async fn runs_units_then_scripts_and_names_the_failure() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let checks = HealthChecks {
            root: Root::new(root),
            required_units: vec!["crio.service".into()],
            timeout: Duration::from_secs(5),
        };
        assert_eq!(checks.run(&Units("active", None)).await.unwrap(), vec!["unit crio.service"], "nothing else to run");
        let f = checks.run(&Units("failed", None)).await.unwrap_err();
        assert_eq!(f.to_string(), "health check unit crio.service failed: its state is failed, want active");
        // A unit still waiting for its start job at boot (inactive) gets the timeout; one that
        // never starts fails at it.
        let soon = Some(std::time::Instant::now() + Duration::from_millis(700));
        assert_eq!(checks.run(&Units("inactive", soon)).await.unwrap(), vec!["unit crio.service"]);
        let quick = HealthChecks { timeout: Duration::from_millis(600), ..checks.clone() };
        let f = quick.run(&Units("inactive", None)).await.unwrap_err();
        assert_eq!(f.output, "its state is inactive, want active");

        script(root, "usr/lib/aloft/health.d", "10-ok", "exit 0", 0o755);
        script(root, "usr/lib/aloft/health.d", "20-bad", "echo disk is full; exit 3", 0o755);
        script(root, "usr/lib/aloft/health.d", "30-disabled", "exit 1", 0o644);
        let f = checks.run(&Units("active", None)).await.unwrap_err();
        assert!(f.check.ends_with("usr/lib/aloft/health.d/20-bad"), "{f}");
        assert_eq!(f.output, "disk is full (exit status 3)");
        // Output of many lines comes on one, the blank ones left out.
        script(
            root,
            "usr/lib/aloft/health.d",
            "20-bad",
            "echo disk; echo; echo '  is full  '; echo x >&2; exit 3",
            0o755,
        );
        let f = checks.run(&Units("active", None)).await.unwrap_err();
        assert_eq!(f.output, "disk | is full | x (exit status 3)");
        // The admin overrides the OS's check of the same name.
        script(root, "etc/aloft/health.d", "20-bad", "exit 0", 0o755);
        let passed = checks.run(&Units("active", None)).await.unwrap();
        assert_eq!(passed.len(), 3, "{passed:?}");
        assert!(passed[2].ends_with("etc/aloft/health.d/20-bad"));
        // A check that hangs fails at the timeout.
        script(root, "etc/aloft/health.d", "40-hang", "sleep 30", 0o755);
        let quick = HealthChecks { timeout: Duration::from_millis(300), ..checks.clone() };
        let f = quick.run(&Units("active", None)).await.unwrap_err();
        assert!(f.output.contains("did not finish within"), "{f}");
    }
}
