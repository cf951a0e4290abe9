//! A test's world: a coordinator on the host, the repo server, and N VMs enrolled through the
//! first-boot bootstrap (fw_cfg config naming the coordinator at `https://10.0.2.100:6443`, its
//! CA and a bootstrap token).

use crate::env;
use crate::images::{self, Images, HOST_ADDR};
use crate::repo_server::RepoServer;
use crate::vm::{Vm, VmOptions};
use aloft_tests::{path_of, Client, Coordinator, Options, NODE};
use anyhow::{anyhow, Context, Result};
use serde_json::Value;
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

/// The coordinator's port as the guests see it.
pub const COORDINATOR_GUEST_PORT: u16 = 6443;

#[derive(Debug, Clone)]
pub struct FleetOptions {
    /// How many VMs (named `vm-0`, `vm-1`, ...).
    pub vms: usize,
    /// See [`VmOptions::durable_disk`].
    pub durable_disk: bool,
    pub cpus: u32,
}

impl Default for FleetOptions {
    fn default() -> Self {
        FleetOptions { vms: 1, durable_disk: false, cpus: 2 }
    }
}

pub struct Fleet {
    pub test: String,
    /// `target/vm-tests/<test>`: one directory per VM, kept when the test fails.
    pub dir: PathBuf,
    pub images: &'static Images,
    pub coordinator: Coordinator,
    pub admin: Client,
    pub repo: RepoServer,
    pub vms: Vec<Vm>,
    pub started: Instant,
    _sockets: tempfile::TempDir,
    _one_at_a_time: tokio::sync::OwnedMutexGuard<()>,
}

/// Scenarios of one test process run one at a time even without `--test-threads=1` (say, under
/// `cargo test --workspace`): three TCG VMs already want more than two cores.
fn one_at_a_time() -> Arc<tokio::sync::Mutex<()>> {
    static LOCK: OnceLock<Arc<tokio::sync::Mutex<()>>> = OnceLock::new();
    LOCK.get_or_init(Arc::default).clone()
}

impl Fleet {
    /// Build (or reuse) the images, start the coordinator and the repo server, and boot the VMs.
    /// `Ok(None)`: the test is skipped (tools missing, `ALOFT_REQUIRE_VM` not set; a loud message
    /// was printed). Returns once the VMs are started, not booted: see [`Fleet::wait_ready`].
    pub async fn start(test: &str, opts: FleetOptions) -> Result<Option<Fleet>> {
        env::init_logging();
        if !env::prerequisites(test)? {
            return Ok(None);
        }
        let lock = one_at_a_time();
        let guard = match lock.clone().try_lock_owned() {
            Ok(g) => g,
            Err(_) => {
                tracing::info!(test, "waiting for the VM test running in this process to finish");
                lock.lock_owned().await
            }
        };
        let started = Instant::now();
        let images = images::ensure().await?;
        let dir = env::test_dir(test);
        let coordinator = tokio::task::spawn_blocking(|| {
            Coordinator::start_with(Options { args: vec!["--tls-san".into(), HOST_ADDR.into()], ..Options::default() })
        })
        .await
        .context("starting the coordinator")?;
        let admin = coordinator.client();
        let port: u16 = coordinator
            .url()
            .rsplit(':')
            .next()
            .and_then(|p| p.trim_end_matches('/').parse().ok())
            .ok_or_else(|| anyhow!("no port in the coordinator's URL {}", coordinator.url()))?;
        let token = coordinator.create_token("vm-fleet", "bootstrap");
        let ca = String::from_utf8(coordinator.ca_pem())?;
        let repo = RepoServer::start(&images.repo()).await?;
        let sockets = tempfile::Builder::new().prefix("aloft-vm-").tempdir()?;
        let mut vms = Vec::new();
        for i in 0..opts.vms {
            let name = format!("vm-{i}");
            let bootstrap = format!(
                "ALOFT_COORDINATOR=https://{HOST_ADDR}:{COORDINATOR_GUEST_PORT}\nALOFT_BOOTSTRAP_TOKEN={token}\n\
                 ALOFT_NODE_NAME={name}\n{ca}"
            );
            let forwards =
                vec![(format!("{HOST_ADDR}:{COORDINATOR_GUEST_PORT}"), port), (format!("{HOST_ADDR}:80"), repo.port)];
            let mut vm_opts = VmOptions::new(&name, bootstrap, forwards);
            vm_opts.durable_disk = opts.durable_disk;
            vm_opts.cpus = opts.cpus;
            let vm_dir = dir.join(&name);
            if vm_dir.exists() {
                // keep nothing of an earlier run but what kill_stale_qemu needs
                for entry in std::fs::read_dir(&vm_dir)?.flatten() {
                    if entry.file_name() != "qemu.pid" {
                        let p = entry.path();
                        let _ = if p.is_dir() { std::fs::remove_dir_all(&p) } else { std::fs::remove_file(&p) };
                    }
                }
            }
            vms.push(Vm::start(images, vm_opts, &vm_dir, &sockets.path().join(&name)).await?);
        }
        tracing::info!(test, vms = opts.vms, dir = %dir.display(), coordinator = %coordinator.url(), "fleet started");
        Ok(Some(Fleet {
            test: test.to_string(),
            dir,
            images,
            coordinator,
            admin,
            repo,
            vms,
            started,
            _sockets: sockets,
            _one_at_a_time: guard,
        }))
    }

    /// Wait for every VM's first boot; returns each one's boot id.
    pub async fn wait_ready(&self, timeout: Duration) -> Result<Vec<String>> {
        let waits = self.vms.iter().map(|vm| vm.wait_ready(1, timeout));
        let ready = futures::future::try_join_all(waits).await?;
        Ok(ready.into_iter().map(|(_, boot_id, _)| boot_id).collect())
    }

    pub fn vm(&self, name: &str) -> Result<&Vm> {
        self.vms.iter().find(|v| v.name == name).ok_or_else(|| anyhow!("no VM {name}"))
    }

    /// Every Node object.
    pub async fn nodes(&self) -> Result<Vec<Value>> {
        let list = self.admin.get(&path_of(&NODE, None)).await?.into_result()?;
        Ok(list["items"].as_array().cloned().unwrap_or_default())
    }

    /// End the test: on failure keep everything under [`Fleet::dir`], save each running VM's
    /// agent journal there and print a report (the cause, the journals' warnings, the boots and
    /// the paths); on success delete the overlays (the logs stay until the next run). Returns
    /// `result` (with where the logs are added to a failure).
    pub async fn finish(self, result: Result<()>) -> Result<()> {
        let elapsed = self.started.elapsed();
        match result {
            Ok(()) => {
                for vm in &self.vms {
                    let _ = std::fs::remove_file(vm.dir.join("overlay.qcow2"));
                }
                tracing::info!(test = %self.test, secs = elapsed.as_secs_f64(), "PASSED");
                Ok(())
            }
            Err(e) => {
                let mut kept = Vec::new();
                for vm in &self.vms {
                    match vm.save_journal().await {
                        Ok((p, warnings)) => {
                            kept.push(format!("  {} agent journal: {}", vm.name, p.display()));
                            let skip = warnings.len().saturating_sub(JOURNAL_WARNINGS);
                            kept.push(format!(
                                "    its warnings and errors ({} of {}):",
                                warnings.len() - skip,
                                warnings.len()
                            ));
                            kept.extend(warnings[skip..].iter().map(|l| format!("    | {}", cut(l, 400))));
                        }
                        Err(err) => kept.push(format!("  {} agent journal: not saved ({err:#})", vm.name)),
                    }
                    let boots = vm.boots();
                    for b in &boots {
                        let serial = &b.serial;
                        kept.push(format!(
                            "  {} boot {}: {} (entry {}; ready after {:?}; release {:?}; ended {:?})",
                            vm.name,
                            b.boot,
                            serial.display(),
                            b.entry,
                            b.ready_after,
                            b.release,
                            b.end
                        ));
                        // CI keeps only the test's output: the console of a boot that never came
                        // up (or of the last one) says why, e.g. an initramfs that found no root.
                        if b.ready_after.is_none() || Some(b.boot) == boots.last().map(|l| l.boot) {
                            kept.push(format!("    last lines of {}:", serial.display()));
                            kept.extend(
                                serial_tail(serial, SERIAL_TAIL_LINES).into_iter().map(|l| format!("    | {l}")),
                            );
                        }
                    }
                }
                let coordinator_log = self.dir.join("coordinator.log");
                let _ = std::fs::write(&coordinator_log, self.coordinator.log_tail());
                kept.push(format!("  coordinator log (tail): {}", coordinator_log.display()));
                // The cause first: CI shows the head and the tail of a failed test's output.
                let msg = format!(
                    "VM test {} FAILED after {:.0} s: {}\nlogs kept under {}:\n{}",
                    self.test,
                    elapsed.as_secs_f64(),
                    cut(&format!("{e:#}"), 2000),
                    self.dir.display(),
                    kept.join("\n")
                );
                eprintln!("\n{msg}\n");
                // The whole report is printed above; the error says where, once more after the
                // cause chain (the end of CI's output).
                Err(e.context(format!(
                    "VM test {} FAILED after {:.0} s (report above; logs under {})",
                    self.test,
                    elapsed.as_secs_f64(),
                    self.dir.display()
                )))
            }
        }
    }
}

/// How many console lines a failed test prints per boot it reports.
const SERIAL_TAIL_LINES: usize = 40;

/// How many of a VM's last journal warnings and errors a failed test prints.
const JOURNAL_WARNINGS: usize = 15;

/// `s` cut to `n` characters, saying so.
fn cut(s: &str, n: usize) -> String {
    match s.char_indices().nth(n) {
        Some((i, _)) => format!("{}... ({} characters more)", &s[..i], s[i..].chars().count()),
        None => s.to_string(),
    }
}

/// The last `n` lines of a serial log, without carriage returns, escape sequences (systemd colours
/// its status lines) or empty lines, each cut to 240 characters.
fn serial_tail(path: &std::path::Path, n: usize) -> Vec<String> {
    let plain = strip_ansi_escapes::strip(std::fs::read(path).unwrap_or_default());
    let text = String::from_utf8_lossy(&plain).into_owned();
    let mut lines: Vec<String> =
        text.split(['\n', '\r']).filter(|l| !l.trim().is_empty()).map(|l| l.chars().take(240).collect()).collect();
    let skip = lines.len().saturating_sub(n);
    lines.drain(..skip);
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_serial_tail_drops_escapes_and_keeps_the_last_lines() {
        let dir = std::env::temp_dir().join(format!("aloft-serial-tail-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let path = dir.join("serial-2.log");
        std::fs::write(
            &path,
            "one\r\n\x1b[0;1;31mFAILED\x1b[0m to start x\r\n\r\nthree\r\nostree-prepare-root: Couldn't find root\r\n",
        )
        .expect("write");
        assert_eq!(
            serial_tail(&path, 3),
            vec!["FAILED to start x", "three", "ostree-prepare-root: Couldn't find root"]
        );
        assert!(serial_tail(&dir.join("missing.log"), 3).is_empty());
        assert_eq!(cut("abcdé", 5), "abcdé");
        assert_eq!(cut("abcdéf", 4), "abcd... (2 characters more)");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
