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

use crate::host::{Root, ServiceManager};
use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::time::Duration;

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
            self.run_script(&script).await.map_err(|output| HealthFailure { check: check.clone(), output })?;
            passed.push(check);
        }
        tracing::info!(checks = passed.len(), "health checks passed");
        Ok(passed)
    }

    /// A unit still starting after boot gets until the timeout to become active.
    async fn unit_active(&self, services: &dyn ServiceManager, unit: &str) -> Result<(), String> {
        let deadline = tokio::time::Instant::now() + self.timeout;
        loop {
            let state = services.active_state(unit).await.map_err(|e| e.to_string())?;
            match state.as_str() {
                "active" => return Ok(()),
                "activating" | "reloading" if tokio::time::Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(500)).await
                }
                // The check already names the unit.
                other => return Err(format!("its state is {other}, want active")),
            }
        }
    }

    async fn run_script(&self, script: &std::path::Path) -> Result<(), String> {
        let mut cmd = tokio::process::Command::new(script);
        cmd.env("ALOFT_ROOT", self.root.path())
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true);
        let child = cmd.spawn().map_err(|e| format!("cannot run: {e}"))?;
        match tokio::time::timeout(self.timeout, child.wait_with_output()).await {
            Err(_) => Err(format!("did not finish within {} seconds", self.timeout.as_secs())),
            Ok(Err(e)) => Err(format!("cannot run: {e}")),
            Ok(Ok(out)) if out.status.success() => Ok(()),
            Ok(Ok(out)) => {
                let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
                Err(format!(
                    "{} (exit status {})",
                    tail(&text),
                    out.status.code().map_or("signal".into(), |c| c.to_string())
                ))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::ServiceError;
    use async_trait::async_trait;

    struct Units(&'static str);
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
            Ok(self.0.to_string())
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
        assert_eq!(checks.run(&Units("active")).await.unwrap(), vec!["unit crio.service"], "nothing else to run");
        let f = checks.run(&Units("failed")).await.unwrap_err();
        assert_eq!(f.to_string(), "health check unit crio.service failed: its state is failed, want active");

        script(root, "usr/lib/aloft/health.d", "10-ok", "exit 0", 0o755);
        script(root, "usr/lib/aloft/health.d", "20-bad", "echo disk is full; exit 3", 0o755);
        script(root, "usr/lib/aloft/health.d", "30-disabled", "exit 1", 0o644);
        let f = checks.run(&Units("active")).await.unwrap_err();
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
        let f = checks.run(&Units("active")).await.unwrap_err();
        assert_eq!(f.output, "disk | is full | x (exit status 3)");
        // The admin overrides the OS's check of the same name.
        script(root, "etc/aloft/health.d", "20-bad", "exit 0", 0o755);
        let passed = checks.run(&Units("active")).await.unwrap();
        assert_eq!(passed.len(), 3, "{passed:?}");
        assert!(passed[2].ends_with("etc/aloft/health.d/20-bad"));
        // A check that hangs fails at the timeout.
        script(root, "etc/aloft/health.d", "40-hang", "sleep 30", 0o755);
        let quick = HealthChecks { timeout: Duration::from_millis(300), ..checks.clone() };
        let f = quick.run(&Units("active")).await.unwrap_err();
        assert!(f.output.contains("did not finish within"), "{f}");
    }
}
