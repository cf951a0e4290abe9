//! OS updates end to end on a sandboxed host: a real coordinator, a real `aloft-agent` process
//! whose OS is a real ostree directory sysroot, commits built and GPG-signed here and served over
//! HTTP on loopback, the test systemd/logind on a private bus (the test plays the reboots: new
//! boot id, agent restarted).
//!
//! Walks the whole OS flow: a container osImageURL is refused (Unreconcilable); an ostree one is
//! pulled, staged with the config's kernel arguments and rebooted into; a failing health check
//! after the next boot rolls back to the previous deployment, reports Degraded with the check's
//! output, and is not retried. (The pre-stage round trip needs the coordinator to let a node read
//! the config named by `aloft.dev/prestageConfig`, which comes with the rollout work; the
//! download itself is tested in agent/tests/os_ostree.rs.)

use aloft_agent::os::testkit::{self, GpgKey, ServerRepo, StaticServer, REF};
use aloft_agent::testing::{FakeSystemd, TestBus};
use aloft_api::annotations as ann;
use aloft_coordinator::resources::{MACHINE_CONFIG, MACHINE_CONFIG_POOL, NODE};
use aloft_tests::{bin, eventually, path_of, testdata, Coordinator};
use serde_json::{json, Value};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

struct Host {
    name: String,
    root: tempfile::TempDir,
    _bus: TestBus,
    fake: FakeSystemd,
    agent: Option<Child>,
    bus_address: String,
    keyring: PathBuf,
    boots: u32,
}

impl Host {
    fn sysroot(&self) -> PathBuf {
        self.root.path().join("sysroot")
    }

    fn start_agent(&mut self, c: &Coordinator, bootstrap: &Path) {
        let log =
            std::fs::OpenOptions::new().create(true).append(true).open(self.root.path().join("agent.log")).unwrap();
        let child = Command::new(bin("aloft-agent"))
            .args(["--coordinator", c.url(), "--node-name", &self.name, "--metrics-listen", ""])
            .arg("--ca")
            .arg(c.ca_path())
            .arg("--bootstrap-token-file")
            .arg(bootstrap)
            .arg("--root")
            .arg(self.root.path())
            .args(["--bus-address", &self.bus_address, "--drain-timeout-seconds", "60"])
            .arg("--ostree-sysroot")
            .arg(self.sysroot())
            .arg("--ostree-keyring")
            .arg(&self.keyring)
            .args(["--health-timeout-seconds", "30"])
            .env("ALOFT_LOG", "info")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("spawn aloft-agent");
        self.agent = Some(child);
    }

    fn stop_agent(&mut self) {
        if let Some(mut c) = self.agent.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Wait for the agent to ask logind for a reboot, then play it.
    async fn reboot_when_asked(&mut self, c: &Coordinator, bootstrap: &Path, what: &str) {
        for _ in 0..1200 {
            if !self.fake.reboots().is_empty() {
                self.stop_agent();
                self.fake.clear_calls();
                self.boots += 1;
                std::fs::write(
                    self.root.path().join("proc/sys/kernel/random/boot_id"),
                    format!("boot-{}\n", self.boots),
                )
                .unwrap();
                self.start_agent(c, bootstrap);
                return;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        panic!("no reboot asked: {what}\n{}", self.log());
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.root.path().join("agent.log")).unwrap_or_default()
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        self.stop_agent();
        if std::thread::panicking() {
            let log = self.log();
            let lines: Vec<&str> = log.lines().collect();
            eprintln!("--- agent log (tail) ---");
            for l in &lines[lines.len().saturating_sub(40)..] {
                eprintln!("{l}");
            }
        }
    }
}

fn yaml(path: &Path) -> Value {
    yaml_serde::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

async fn node_annotations(c: &Coordinator, name: &str) -> anyhow::Result<serde_json::Map<String, Value>> {
    let n = c.client().get(&path_of(&NODE, Some(name))).await?.into_result()?;
    Ok(n.pointer("/metadata/annotations").and_then(Value::as_object).cloned().unwrap_or_default())
}

fn get(a: &serde_json::Map<String, Value>, k: &str) -> String {
    a.get(k).and_then(Value::as_str).unwrap_or("").to_string()
}

/// Wait for the node to reach `state` on the pool's current target (or any config when
/// `on_target` is false); returns (currentConfig, reason).
async fn wait_state(c: &Coordinator, name: &str, state: &str, on_target: bool, what: &str) -> (String, String) {
    let client = c.client();
    eventually(Duration::from_secs(240), what, || {
        let client = client.clone();
        async move {
            let pool = client.get(&path_of(&MACHINE_CONFIG_POOL, Some("worker"))).await?.into_result()?;
            let target = pool.pointer("/spec/configuration/name").and_then(Value::as_str).unwrap_or("").to_string();
            let a = node_annotations(c, name).await?;
            let ok = get(&a, ann::STATE) == state && (!on_target || get(&a, ann::CURRENT_CONFIG) == target);
            Ok(ok.then(|| (get(&a, ann::CURRENT_CONFIG), get(&a, ann::REASON))))
        }
    })
    .await
}

fn os_mc(name: &str, url: &str, kargs: &[&str]) -> Value {
    json!({
        "apiVersion": "machineconfiguration.openshift.io/v1", "kind": "MachineConfig",
        "metadata": {"name": name, "labels": {ann::ROLE_LABEL: "worker"}},
        "spec": {"config": {"ignition": {"version": "3.4.0"}}, "osImageURL": url, "kernelArguments": kargs},
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn os_update_health_check_and_rollback() {
    let c = Coordinator::start();
    let admin = c.client();
    let token_file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(token_file.path(), c.create_token("fleet", "bootstrap")).unwrap();

    // The OS: a signed base commit deployed into the host's sysroot, a repository on loopback.
    let work = tempfile::tempdir().unwrap();
    let key = GpgKey::generate(work.path(), "os").unwrap();
    let server = ServerRepo::create(&work.path().join("srv/repo")).unwrap();
    let commit = |v: &str| {
        let t = work.path().join(format!("tree-{v}"));
        testkit::write_tree(&t, v, 20).unwrap();
        server.commit(&t, REF, v, Some(&key)).unwrap()
    };
    let v1 = commit("1");
    let http = StaticServer::start(&work.path().join("srv")).unwrap();
    let url = |sum: &str| format!("ostree+{}#{REF}@{sum}", http.url("repo"));

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
    std::fs::write(r.join("proc/sys/kernel/random/boot_id"), "boot-0\n").unwrap();
    testkit::init_sysroot(&r.join("sysroot"), &server, &v1, &["root=/dev/vda", "console=ttyS0"]).unwrap();
    let bus = TestBus::start().unwrap();
    let fake = FakeSystemd::serve(&bus, r).await.unwrap();
    let bus_address = bus.address().to_string();
    let mut host = Host {
        name: "worker-os".into(),
        root,
        _bus: bus,
        fake,
        agent: None,
        bus_address,
        keyring: key.keyring.clone(),
        boots: 0,
    };
    let name = host.name.clone();
    host.start_agent(&c, token_file.path());

    let mut pool = yaml(&testdata().join("mco/bootstrap/worker.machineconfigpool.yaml"));
    pool["spec"]["maxUnavailable"] = json!(1);
    admin.post(&path_of(&MACHINE_CONFIG_POOL, None), &pool).await.unwrap().into_result().unwrap();
    let ssh = yaml(&testdata().join("mco/bootstrap/99_openshift-machineconfig_worker.yaml"));
    admin.post(&path_of(&MACHINE_CONFIG, None), &ssh).await.unwrap().into_result().unwrap();
    let (first, _) = wait_state(&c, &name, "Done", true, "Done on the SSH config").await;

    // 1. A container reference (OpenShift YAML) renders, but the agent refuses it.
    let quay = os_mc("50-os", &format!("quay.io/openshift/okd-content@sha256:{}", "a".repeat(64)), &[]);
    admin.post(&path_of(&MACHINE_CONFIG, None), &quay).await.unwrap().into_result().unwrap();
    let (_, reason) = wait_state(&c, &name, "Unreconcilable", false, "the container osImageURL refused").await;
    assert!(reason.contains("not an ostree commit reference"), "{reason}");
    assert_eq!(testkit::deployment_order(&host.sysroot()).unwrap(), vec![v1.clone()], "nothing deployed");

    // 2. An ostree commit with kernel arguments: pulled, staged, rebooted into, verified.
    let v2 = commit("2");
    let path = path_of(&MACHINE_CONFIG, Some("50-os"));
    let mut mc = admin.get(&path).await.unwrap().into_result().unwrap();
    mc["spec"]["osImageURL"] = json!(url(&v2));
    mc["spec"]["kernelArguments"] = json!(["mitigations=off"]);
    admin.put(&path, &mc).await.unwrap().into_result().unwrap();
    host.reboot_when_asked(&c, token_file.path(), "the OS update").await;
    assert_eq!(testkit::deployment_order(&host.sysroot()).unwrap(), vec![v2.clone(), v1.clone()]);
    let (second, _) = wait_state(&c, &name, "Done", true, "Done on the OS update after its reboot").await;
    assert_ne!(second, first);
    let out = Command::new(bin("aloft-agent"))
        .args(["status", "--json", "--bus-address", &host.bus_address])
        .arg("--root")
        .arg(host.root.path())
        .output()
        .unwrap();
    let st: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(st["os"]["deployments"][0]["checksum"], v2.as_str(), "{st}");
    assert_eq!(
        st["os"]["deployments"][0]["kernelArguments"],
        json!(["root=/dev/vda", "console=ttyS0", "mitigations=off"])
    );
    assert_eq!(st["os"]["rollback"]["checksum"], v1.as_str());

    // 3. A health check that fails on the new OS: after the update's reboot the agent makes the
    // previous deployment the default, reboots into it, reports Degraded, and does not retry.
    let checks = host.root.path().join("etc/aloft/health.d");
    std::fs::create_dir_all(&checks).unwrap();
    let script = checks.join("50-app");
    std::fs::write(&script, "#!/bin/sh\necho app does not answer on :8080\nexit 1\n").unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let v3 = commit("3");
    let mut mc = admin.get(&path).await.unwrap().into_result().unwrap();
    mc["spec"]["osImageURL"] = json!(url(&v3));
    admin.put(&path, &mc).await.unwrap().into_result().unwrap();
    host.reboot_when_asked(&c, token_file.path(), "the v3 update").await;
    assert_eq!(testkit::deployment_order(&host.sysroot()).unwrap(), vec![v3.clone(), v2.clone()]);
    host.reboot_when_asked(&c, token_file.path(), "the rollback").await;
    assert_eq!(testkit::deployment_order(&host.sysroot()).unwrap(), vec![v2.clone(), v3.clone()], "rolled back");
    let (_, reason) = wait_state(&c, &name, "Degraded", false, "Degraded after the rollback").await;
    assert!(reason.contains("app does not answer on :8080"), "{reason}");
    assert!(reason.contains(&format!("rolled back from OS commit {v3} to {v2}")), "{reason}");
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(host.fake.reboots().is_empty(), "the failed commit is not retried");
    let denylist = std::fs::read_to_string(host.root.path().join("var/lib/aloft/os-denylist.json")).unwrap();
    assert!(denylist.contains(&v3), "{denylist}");
}
