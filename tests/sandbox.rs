//! A sandboxed host for fleet tests: a root directory with the files an agent expects, its own
//! private dbus-daemon serving the test systemd/logind (the one boundary that cannot run here),
//! and a real `aloft-agent` process on it. A host whose OS is an ostree sysroot also runs a real
//! `aloft-os-helper` on a socket under its root ([`Host::start_os_helper`]), as systemd would
//! start it on a node.

use crate::{bin, eventually, path_of, Coordinator};
use aloft_agent::testing::{FakeSystemd, TestBus};
use aloft_api::annotations as ann;
use aloft_coordinator::resources::{MACHINE_CONFIG_POOL, NODE};
use aloft_osd::testkit::HelperProcess;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// One host. Dropping it kills its agent (and prints the agent's log tail if the test failed).
pub struct Host {
    pub name: String,
    pub root: tempfile::TempDir,
    _bus: TestBus,
    pub fake: FakeSystemd,
    agent: Option<Child>,
    pub bus_address: String,
    /// More agent flags (timeouts), appended to the defaults.
    pub extra_args: Vec<String>,
    /// The agent's `--metrics-listen`; empty (the default here) serves no metrics, as several
    /// hosts share the machine's ports.
    pub metrics_listen: String,
    /// The OS helper serving this host's sysroot, when it has one.
    pub os_helper: Option<HelperProcess>,
    /// More `aloft-os-helper` flags, for [`Host::start_os_helper`].
    pub os_helper_args: Vec<String>,
    /// The agent's `--os-helper` (the helper's socket), once [`Host::start_os_helper`] or
    /// [`Host::use_os_helper_socket`] set it.
    os_helper_socket: Option<PathBuf>,
}

impl Host {
    /// A root with /etc/passwd, /etc/group, /etc/os-release, a boot id, and a private bus serving the test
    /// systemd/logind.
    pub async fn new(name: &str) -> Host {
        let root = tempfile::tempdir().unwrap();
        let r = root.path();
        for d in ["etc/systemd/system", "home/core", "var/lib", "proc/sys/kernel/random"] {
            std::fs::create_dir_all(r.join(d)).unwrap();
        }
        std::fs::write(
            r.join("etc/passwd"),
            "root:x:0:0:root:/root:/bin/bash\ncore:x:1000:1000:core:/home/core:/bin/bash\n",
        )
        .unwrap();
        std::fs::write(r.join("etc/group"), "root:x:0:\ncore:x:1000:\n").unwrap();
        std::fs::write(r.join("proc/sys/kernel/random/boot_id"), format!("boot-1-{name}\n")).unwrap();
        std::fs::write(r.join("etc/os-release"), "NAME=\"aloft sandbox\"\nPRETTY_NAME=\"aloft sandbox 1\"\n").unwrap();
        let bus = TestBus::start().unwrap();
        let fake = FakeSystemd::serve(&bus, r).await.unwrap();
        let bus_address = bus.address().to_string();
        Host {
            name: name.into(),
            root,
            _bus: bus,
            fake,
            agent: None,
            bus_address,
            extra_args: Vec::new(),
            metrics_listen: String::new(),
            os_helper: None,
            os_helper_args: Vec::new(),
            os_helper_socket: None,
        }
    }

    /// Start `aloft-os-helper` on `sysroot`, trusting `keyring`, listening at
    /// `<root>/run/aloft/os-helper.sock`, with [`Host::os_helper_args`]; agents started
    /// afterwards use it (`--os-helper`).
    pub fn start_os_helper(&mut self, sysroot: &Path, keyring: &Path) {
        let args: Vec<&str> = self.os_helper_args.iter().map(String::as_str).collect();
        let helper =
            HelperProcess::start_with(&bin("aloft-os-helper"), &self.path("run/aloft"), sysroot, keyring, &args)
                .expect("start aloft-os-helper");
        self.os_helper_socket = Some(helper.socket.clone());
        self.os_helper = Some(helper);
    }

    /// Point the agent at a helper socket without starting a helper (a node whose helper is not
    /// running).
    pub fn use_os_helper_socket(&mut self, socket: &Path) {
        self.os_helper_socket = Some(socket.to_path_buf());
    }

    /// Kill the OS helper (the agent keeps its `--os-helper`).
    pub fn stop_os_helper(&mut self) {
        if let Some(mut h) = self.os_helper.take() {
            h.kill();
        }
    }

    /// Start `aloft-agent` on this host against `c`, enrolling with the bootstrap token file.
    pub fn start_agent(&mut self, c: &Coordinator, bootstrap: &Path) {
        // Appended: a restarted agent (a simulated reboot) keeps the earlier log.
        let log =
            std::fs::OpenOptions::new().create(true).append(true).open(self.root.path().join("agent.log")).unwrap();
        let mut cmd = Command::new(bin("aloft-agent"));
        if let Some(socket) = &self.os_helper_socket {
            cmd.arg("--os-helper").arg(socket);
        }
        let child = cmd
            .args(["--coordinator", c.url(), "--node-name", &self.name, "--metrics-listen", &self.metrics_listen])
            .arg("--ca")
            .arg(c.ca_path())
            .arg("--bootstrap-token-file")
            .arg(bootstrap)
            .arg("--root")
            .arg(self.root.path())
            .args(["--bus-address", &self.bus_address, "--drain-timeout-seconds", "60"])
            .args(&self.extra_args)
            .env("ALOFT_LOG", std::env::var("ALOFT_TEST_AGENT_LOG").unwrap_or_else(|_| "info".into()))
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("spawn aloft-agent");
        self.agent = Some(child);
    }

    /// How many times the agent asked logind to reboot, refused requests included.
    pub fn reboots_asked(&self) -> usize {
        self.fake.call_strings().iter().filter(|c| c.starts_with("Reboot(")).count()
    }

    /// Play a reboot: the agent stops, the host comes back with boot ID `boot_id`, and a fresh
    /// agent starts (enrolled already, it keeps its credential).
    pub fn reboot(&mut self, c: &Coordinator, bootstrap: &Path, boot_id: &str) {
        self.stop_agent();
        std::fs::write(self.path("/proc/sys/kernel/random/boot_id"), format!("{boot_id}\n")).unwrap();
        self.start_agent(c, bootstrap);
    }

    /// Whether the agent process was started and has exited since (it is reaped).
    pub fn agent_exited(&mut self) -> bool {
        self.agent.as_mut().is_some_and(|c| matches!(c.try_wait(), Ok(Some(_))))
    }

    /// Runs `check` with the agent process stopped (SIGSTOP) while its status file says it is
    /// in `phase` (the progress' first word, e.g. `degraded`), then lets it go on (SIGCONT):
    /// what is on disk is then what that phase left, not a retry's work in flight. Panics after
    /// `timeout` without catching the agent in that phase.
    pub fn while_agent_in<T>(&self, phase: &str, timeout: std::time::Duration, check: impl FnOnce() -> T) -> T {
        let pid = self.agent.as_ref().expect("the agent runs").id().to_string();
        let signal = |sig: &str| {
            let ok = Command::new("kill").args([sig, &pid]).status().is_ok_and(|s| s.success());
            assert!(ok, "kill {sig} {pid}");
        };
        let deadline = std::time::Instant::now() + timeout;
        loop {
            signal("-STOP");
            let status = std::fs::read_to_string(self.path("/var/lib/aloft/status.json")).unwrap_or_default();
            let progress = serde_json::from_str::<serde_json::Value>(&status)
                .ok()
                .and_then(|v| v["progress"].as_str().map(str::to_string))
                .unwrap_or_default();
            if progress.split(':').next() == Some(phase) {
                let out = check();
                signal("-CONT");
                return out;
            }
            signal("-CONT");
            assert!(std::time::Instant::now() < deadline, "the agent never seen in phase {phase} (last: {progress:?})");
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }

    /// SIGKILL the agent.
    pub fn stop_agent(&mut self) {
        if let Some(mut c) = self.agent.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// A path inside the host's root.
    pub fn path(&self, p: &str) -> PathBuf {
        self.root.path().join(p.trim_start_matches('/'))
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.root.path().join("agent.log")).unwrap_or_default()
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        self.stop_agent();
        if std::thread::panicking() {
            eprintln!("--- agent {} log (tail) ---", self.name);
            let log = self.log();
            let lines: Vec<&str> = log.lines().collect();
            for l in &lines[lines.len().saturating_sub(30)..] {
                eprintln!("{l}");
            }
            eprintln!("--- {} systemd calls: {:?}", self.name, self.fake.call_strings());
            if let Some(h) = &self.os_helper {
                let log = h.log_text();
                let lines: Vec<&str> = log.lines().collect();
                eprintln!("--- {} os helper log (tail) ---", self.name);
                for l in &lines[lines.len().saturating_sub(20)..] {
                    eprintln!("{l}");
                }
            }
        }
        self.stop_os_helper();
    }
}

/// Wait until every host's Node is Done on the worker pool's current target; returns it.
pub async fn converge(c: &Coordinator, hosts: &[Host], previous: Option<&str>, what: &str) -> String {
    let previous = previous.map(str::to_string);
    let client = c.client();
    eventually(Duration::from_secs(240), what, || {
        let client = client.clone();
        let names: Vec<String> = hosts.iter().map(|h| h.name.clone()).collect();
        let previous = previous.clone();
        async move {
            let pool = client.get(&path_of(&MACHINE_CONFIG_POOL, Some("worker"))).await?.into_result()?;
            let Some(target) = pool.pointer("/spec/configuration/name").and_then(Value::as_str) else {
                return Ok(None);
            };
            if previous.as_deref() == Some(target) {
                return Ok(None);
            }
            for n in &names {
                let node = client.get(&path_of(&NODE, Some(n))).await?.into_result()?;
                let a = |k: &str| {
                    node.pointer("/metadata/annotations")
                        .and_then(|x| x.get(k))
                        .and_then(Value::as_str)
                        .unwrap_or("")
                        .to_string()
                };
                if a(ann::STATE) == "Degraded" || a(ann::STATE) == "Unreconcilable" {
                    anyhow::bail!("node {n} is {}: {}", a(ann::STATE), a(ann::REASON));
                }
                // Converged: Done on the target and uncordoned (the coordinator uncordons after
                // the Done report).
                if a(ann::STATE) != "Done"
                    || a(ann::CURRENT_CONFIG) != target
                    || node.pointer("/spec/unschedulable") == Some(&json!(true))
                {
                    return Ok(None);
                }
            }
            Ok(Some(target.to_string()))
        }
    })
    .await
}
