//! OS updates end to end on a sandboxed host: a real coordinator, a real `aloft-agent` process
//! whose OS is a real ostree directory sysroot, commits built and GPG-signed here and served over
//! HTTP on loopback, the test systemd/logind on a private bus (the test plays the reboots: new
//! boot id, agent restarted).
//!
//! Walks the whole OS flow: a container osImageURL is refused (Unreconcilable); an ostree one is
//! pulled, staged with the config's kernel arguments and rebooted into; a failing health check
//! after the next boot rolls back to the previous deployment, reports Degraded with the check's
//! output, and is not retried. The agent never touches libostree: a real `aloft-os-helper` serves
//! the host's sysroot on a socket under its root, as systemd's socket activation would on a
//! node; a second test shows a node whose helper is not running. (The download itself, the
//! helper's refusals and its socket are tested in osd/tests/.)

use aloft_api::annotations as ann;
use aloft_api::os::grubenv;
use aloft_coordinator::resources::{MACHINE_CONFIG, MACHINE_CONFIG_POOL, NODE};
use aloft_osd::testkit::{self, GpgKey, ServerRepo, StaticServer, REF};
use aloft_tests::sandbox::Host;
use aloft_tests::{bin, eventually, path_of, testdata, Coordinator};
use serde_json::{json, Value};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// A sandboxed host whose OS is an ostree directory sysroot under its root, managed through
/// the OS helper; the test plays its reboots.
struct OsHost {
    host: Host,
    boots: u32,
    bootstrap: PathBuf,
    /// `boot_counter` in the sysroot's GRUB environment block at each reboot the agent asked
    /// for (only on a host given one, `None` for unset).
    counters: Vec<Option<String>>,
}

impl OsHost {
    /// `aloft-agent status --json` of this host (it must succeed).
    fn agent_status(&self) -> Value {
        let out = Command::new(bin("aloft-agent"))
            .args(["status", "--json", "--bus-address", &self.host.bus_address])
            .arg("--root")
            .arg(self.host.root.path())
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice(&out.stdout).unwrap()
    }

    async fn new(name: &str, bootstrap: &Path) -> OsHost {
        let mut host = Host::new(name).await;
        host.extra_args = ["--health-timeout-seconds", "30"].iter().map(|s| s.to_string()).collect();
        std::fs::write(host.path("proc/sys/kernel/random/boot_id"), "boot-0\n").unwrap();
        OsHost { host, boots: 0, bootstrap: bootstrap.to_path_buf(), counters: Vec::new() }
    }

    fn sysroot(&self) -> PathBuf {
        self.host.path("sysroot")
    }

    fn grubenv(&self) -> PathBuf {
        self.sysroot().join("boot/grub2/grubenv")
    }

    /// The GRUB environment block, if the host has one.
    fn grub_env(&self) -> Option<grubenv::EnvBlock> {
        std::fs::read(self.grubenv()).ok().map(|b| grubenv::EnvBlock::parse(&b).unwrap())
    }

    /// Wait for the agent to ask logind for a reboot, then play it: new boot id, agent restarted
    /// (the helper is a system service: it keeps running, or systemd starts it on demand).
    async fn reboot_when_asked(&mut self, c: &Coordinator, what: &str) {
        for _ in 0..1200 {
            if !self.host.fake.reboots().is_empty() {
                self.host.stop_agent();
                self.host.fake.clear_calls();
                if let Some(env) = self.grub_env() {
                    self.counters.push(env.get(grubenv::BOOT_COUNTER).map(str::to_string));
                }
                self.boot(c);
                return;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        panic!("no reboot asked: {what}\n{}", self.host.log());
    }

    /// The next boot, with the agent stopped before it: a new boot id, the agent started. A host
    /// with a GRUB environment block has its boot counted first, as GRUB with greenboot's script
    /// counts it (a directory sysroot boots nothing: the fallback itself is VM scenario i's).
    fn boot(&mut self, c: &Coordinator) {
        if let Some(mut env) = self.grub_env() {
            grubenv::bootloader_pass(&mut env).unwrap();
            std::fs::write(self.grubenv(), env.to_bytes().unwrap()).unwrap();
        }
        self.boots += 1;
        std::fs::write(self.host.path("proc/sys/kernel/random/boot_id"), format!("boot-{}\n", self.boots)).unwrap();
        self.host.start_agent(c, &self.bootstrap);
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
    wait_node(c, name, state, on_target, None, what).await
}

/// [`wait_state`]; with `degraded_fails`, a Degraded report on the way fails at once, with its
/// reason and that host's agent log, instead of at the timeout.
async fn wait_node(
    c: &Coordinator,
    name: &str,
    state: &str,
    on_target: bool,
    degraded_fails: Option<&OsHost>,
    what: &str,
) -> (String, String) {
    let client = c.client();
    eventually(Duration::from_secs(240), what, || {
        let client = client.clone();
        async move {
            let pool = client.get(&path_of(&MACHINE_CONFIG_POOL, Some("worker"))).await?.into_result()?;
            let target = pool.pointer("/spec/configuration/name").and_then(Value::as_str).unwrap_or("").to_string();
            let a = node_annotations(c, name).await?;
            if let Some(host) = degraded_fails {
                let reason = get(&a, ann::REASON);
                assert_ne!(get(&a, ann::STATE), "Degraded", "{what}: {reason}\n{}", host.host.log());
            }
            let ok = get(&a, ann::STATE) == state && (!on_target || get(&a, ann::CURRENT_CONFIG) == target);
            Ok(ok.then(|| (get(&a, ann::CURRENT_CONFIG), get(&a, ann::REASON))))
        }
    })
    .await
}

/// Wait until the worker pool's target is rendered from MachineConfig `mc` (before that, a node
/// can be Done on the pool's earlier target, which is not the config a test waits for).
async fn wait_rendered_with(c: &Coordinator, mc: &str) {
    let client = c.client();
    eventually(Duration::from_secs(60), &format!("the worker pool rendered with {mc}"), || {
        let client = client.clone();
        async move {
            let pool = client.get(&path_of(&MACHINE_CONFIG_POOL, Some("worker"))).await?.into_result()?;
            let sources = pool.pointer("/spec/configuration/source").and_then(Value::as_array).cloned();
            Ok(sources.unwrap_or_default().iter().any(|s| s["name"] == mc).then_some(()))
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

/// What every test here starts from: a coordinator with a bootstrap token, and the OS — signed
/// commits built here, a repository served on loopback.
struct OsWorld {
    c: Coordinator,
    token_file: tempfile::NamedTempFile,
    work: tempfile::TempDir,
    key: GpgKey,
    server: ServerRepo,
    http: StaticServer,
    /// Files in each commit's tree.
    files: usize,
}

impl OsWorld {
    fn new(files: usize) -> OsWorld {
        OsWorld::with(files, aloft_tests::Options::default())
    }

    fn with(files: usize, opts: aloft_tests::Options) -> OsWorld {
        let c = Coordinator::start_with(opts);
        let token_file = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(token_file.path(), c.create_token("fleet", "bootstrap")).unwrap();
        let work = tempfile::tempdir().unwrap();
        let key = GpgKey::generate(work.path(), "os").unwrap();
        let server = ServerRepo::create(&work.path().join("srv/repo")).unwrap();
        let http = StaticServer::start(&work.path().join("srv")).unwrap();
        OsWorld { c, token_file, work, key, server, http, files }
    }

    /// A signed commit of a tree made for version `v`; returns its checksum.
    fn commit(&self, v: &str) -> String {
        let t = self.work.path().join(format!("tree-{v}"));
        testkit::write_tree(&t, v, self.files).unwrap();
        self.server.commit(&t, REF, v, Some(&self.key)).unwrap()
    }

    /// The osImageURL of commit `sum` in the served repository.
    fn url(&self, sum: &str) -> String {
        format!("ostree+{}#{REF}@{sum}", self.http.url("repo"))
    }

    /// A host whose sysroot has `base` deployed with `kargs` (no helper, no agent started yet).
    async fn host(&self, name: &str, base: &str, kargs: &[&str]) -> OsHost {
        let host = OsHost::new(name, self.token_file.path()).await;
        testkit::init_sysroot(&host.sysroot(), &self.server, base, kargs).unwrap();
        host
    }

    /// [`OsWorld::host`] with its OS helper (trusting the commits' key) and its agent running.
    async fn running_host(&self, name: &str, base: &str, kargs: &[&str]) -> OsHost {
        let mut host = self.host(name, base, kargs).await;
        let sysroot = host.sysroot();
        host.host.start_os_helper(&sysroot, &self.key.keyring);
        host.host.start_agent(&self.c, self.token_file.path());
        host
    }

    /// A running host on commit v1, Done on the SSH config, with a health check that fails, and
    /// MachineConfig `50-os` naming v2 created: its update to v2 is under way (the reboot into v2
    /// is the caller's to play). Returns the host, the check's path, v1 and v2.
    async fn host_updating_to_a_failing_v2(&self, name: &str) -> (OsHost, PathBuf, String, String) {
        let v1 = self.commit("1");
        let host = self.running_host(name, &v1, &["root=/dev/vda"]).await;
        self.pool_done_on_ssh_config(&host.host.name).await;
        let checks = host.host.path("etc/aloft/health.d");
        std::fs::create_dir_all(&checks).unwrap();
        let script = checks.join("50-app");
        std::fs::write(&script, "#!/bin/sh\necho app down\nexit 1\n").unwrap();
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
        let v2 = self.commit("2");
        let mc = os_mc("50-os", &self.url(&v2), &[]);
        self.c.client().post(&path_of(&MACHINE_CONFIG, None), &mc).await.unwrap().into_result().unwrap();
        (host, script, v1, v2)
    }

    /// The worker pool (maxUnavailable 1) and OpenShift's SSH MachineConfig; waits for node
    /// `name` to be Done on that config and returns its name.
    async fn pool_done_on_ssh_config(&self, name: &str) -> String {
        let admin = self.c.client();
        let mut pool = yaml(&testdata().join("mco/bootstrap/worker.machineconfigpool.yaml"));
        pool["spec"]["maxUnavailable"] = json!(1);
        admin.post(&path_of(&MACHINE_CONFIG_POOL, None), &pool).await.unwrap().into_result().unwrap();
        let ssh = yaml(&testdata().join("mco/bootstrap/99_openshift-machineconfig_worker.yaml"));
        admin.post(&path_of(&MACHINE_CONFIG, None), &ssh).await.unwrap().into_result().unwrap();
        wait_rendered_with(&self.c, "99-worker-ssh").await;
        wait_state(&self.c, name, "Done", true, "Done on the SSH config").await.0
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn os_update_health_check_and_rollback() {
    // The OS: a signed base commit deployed into the host's sysroot, a repository on loopback.
    let w = OsWorld::new(20);
    let (c, admin) = (&w.c, w.c.client());
    let commit = |v: &str| w.commit(v);
    let url = |sum: &str| w.url(sum);
    let v1 = commit("1");
    let mut host = w.running_host("worker-os", &v1, &["root=/dev/vda", "console=ttyS0"]).await;
    let name = host.host.name.clone();
    let first = w.pool_done_on_ssh_config(&name).await;
    // The host's bootloader counts boots (an empty environment block, as `grub-editenv create`).
    std::fs::create_dir_all(host.grubenv().parent().unwrap()).unwrap();
    std::fs::write(host.grubenv(), grubenv::EnvBlock::default().to_bytes().unwrap()).unwrap();

    // 1. A container reference (OpenShift YAML) renders, but the agent refuses it.
    let quay = os_mc("50-os", &format!("quay.io/openshift/okd-content@sha256:{}", "a".repeat(64)), &[]);
    admin.post(&path_of(&MACHINE_CONFIG, None), &quay).await.unwrap().into_result().unwrap();
    let (_, reason) = wait_state(c, &name, "Unreconcilable", false, "the container osImageURL refused").await;
    assert!(reason.contains("not an ostree commit reference"), "{reason}");
    assert_eq!(testkit::deployment_order(&host.sysroot()).unwrap(), vec![v1.clone()], "nothing deployed");

    // 2. An ostree commit with kernel arguments: pulled, staged, rebooted into, verified.
    let v2 = commit("2");
    let path = path_of(&MACHINE_CONFIG, Some("50-os"));
    let mut mc = admin.get(&path).await.unwrap().into_result().unwrap();
    mc["spec"]["osImageURL"] = json!(url(&v2));
    mc["spec"]["kernelArguments"] = json!(["mitigations=off"]);
    admin.put(&path, &mc).await.unwrap().into_result().unwrap();
    host.reboot_when_asked(c, "the OS update").await;
    assert_eq!(testkit::deployment_order(&host.sysroot()).unwrap(), vec![v2.clone(), v1.clone()]);
    let (second, _) = wait_state(c, &name, "Done", true, "Done on the OS update after its reboot").await;
    assert_ne!(second, first);
    // The agent's durable writes came in the order that makes a power cut between them safe: the
    // phase saying a deployment is staged, then the current config (the states a cut can leave
    // are walked in `a_power_cut_before_an_os_update_saves_its_config_is_recovered`).
    let log = host.host.log();
    let at = |what: &str| log.find(what).unwrap_or_else(|| panic!("no {what:?} in the agent's log:\n{log}"));
    assert!(
        at(&format!("to=\"rebooting-staged\" target=\"{second}\""))
            < at(&format!("current config saved config=\"{second}\"")),
        "the current config was saved before the phase RebootingStaged:\n{log}"
    );
    let st = host.agent_status();
    assert_eq!(st["os"]["deployments"][0]["checksum"], v2.as_str(), "{st}");
    // Boot counting: armed for the reboot into v2 (greenboot's 3 boots), disarmed once v2 was
    // verified (this boot marked good), and shown in the agent's status.
    assert_eq!(host.counters, vec![Some("3".to_string())], "boot_counter at the reboot into v2");
    let env = host.grub_env().unwrap();
    assert_eq!((env.get(grubenv::BOOT_COUNTER), env.get(grubenv::BOOT_SUCCESS)), (None, Some("1")));
    assert_eq!(st["os"]["bootCounting"]["bootSuccess"], "1", "{st}");
    assert_eq!(
        st["os"]["deployments"][0]["kernelArguments"],
        json!(["root=/dev/vda", "console=ttyS0", "mitigations=off"])
    );
    assert_eq!(st["os"]["rollback"]["checksum"], v1.as_str());

    // 3. A health check that fails on the new OS: after the update's reboot the agent makes the
    // previous deployment the default, reboots into it, reports Degraded, and does not retry.
    let checks = host.host.path("etc/aloft/health.d");
    std::fs::create_dir_all(&checks).unwrap();
    let script = checks.join("50-app");
    std::fs::write(&script, "#!/bin/sh\necho app does not answer on :8080\nexit 1\n").unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let v3 = commit("3");
    let mut mc = admin.get(&path).await.unwrap().into_result().unwrap();
    mc["spec"]["osImageURL"] = json!(url(&v3));
    // ... which also drops the kernel argument (the rollback goes back to a deployment with it).
    mc["spec"]["kernelArguments"] = json!([]);
    admin.put(&path, &mc).await.unwrap().into_result().unwrap();
    host.reboot_when_asked(c, "the v3 update").await;
    assert_eq!(testkit::deployment_order(&host.sysroot()).unwrap(), vec![v3.clone(), v2.clone()]);
    // Before the reboot into v2 the node still runs v3: Degraded, the rollback under way.
    let going = format!("; rolling back from OS commit {v3} to {v2}");
    eventually(Duration::from_secs(240), "Degraded while rolling back", || async {
        let a = node_annotations(c, &name).await?;
        let reason = get(&a, ann::REASON);
        Ok((get(&a, ann::STATE) == "Degraded"
            && reason.contains("app does not answer on :8080")
            && reason.ends_with(&going))
        .then_some(()))
    })
    .await;
    host.reboot_when_asked(c, "the rollback").await;
    assert_eq!(testkit::deployment_order(&host.sysroot()).unwrap(), vec![v2.clone(), v3.clone()], "rolled back");
    // Armed for the reboot into v3; disarmed before the rollback's reboot: a counter that ran out
    // there would send the bootloader to the second entry, which is v3 now.
    assert_eq!(host.counters, vec![Some("3".to_string()), Some("3".to_string()), None]);
    // Booted into v2: the rollback is done, and the reason says so.
    let done = format!("; rolled back from OS commit {v3} to {v2}");
    let reason = eventually(Duration::from_secs(240), "Degraded after the rollback", || async {
        let a = node_annotations(c, &name).await?;
        let reason = get(&a, ann::REASON).to_string();
        Ok((get(&a, ann::STATE) == "Degraded" && reason.ends_with(&done)).then_some(reason))
    })
    .await;
    assert!(reason.contains("app does not answer on :8080") && !reason.contains("rolling back"), "{reason}");
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(host.host.fake.reboots().is_empty(), "the failed commit is not retried");
    let denylist = std::fs::read_to_string(host.host.path("var/lib/aloft/os-denylist.json")).unwrap();
    assert!(denylist.contains(&v3), "{denylist}");
    // The rolled-back node stays Degraded: no drift check reports Done on the config whose
    // commit it rolled back from.
    let a = node_annotations(c, &name).await.unwrap();
    assert_eq!(get(&a, ann::STATE), "Degraded", "still Degraded after the rollback: {}", get(&a, ann::REASON));
    // A forced repair (MCO's force file) of the same config does not deploy the denylisted
    // commit again: the refusal holds (a repair that skipped it staged v3 and rebooted).
    std::fs::create_dir_all(host.host.path("run")).unwrap();
    std::fs::write(host.host.path("run/machine-config-daemon-force"), "").unwrap();
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert!(
        host.host.fake.reboots().is_empty(),
        "forced repair redeployed the denylisted commit:\n{}",
        host.host.log()
    );
    assert_eq!(testkit::deployment_order(&host.sysroot()).unwrap(), vec![v2.clone(), v3.clone()], "nothing staged");
    let a = node_annotations(c, &name).await.unwrap();
    assert!(get(&a, ann::REASON).contains("failed on this node"), "{}", get(&a, ann::REASON));

    // 4. The application is fixed, and a new config changes only a file: it still names v3,
    // which the node rolled back from. The update deploys v3 (a new config tries a denylisted
    // commit again) with a drain and a reboot, and the node comes up Done on it. Before, the
    // agent decided "no OS work" from the two configs (both name v3): it wrote the file, rebooted
    // into v2 and reported Done there (a booted host then went Degraded on the drift check).
    std::fs::remove_file(&script).unwrap();
    let mut mc = admin.get(&path).await.unwrap().into_result().unwrap();
    mc["spec"]["config"]["storage"] = json!({"files": [
        {"path": "/etc/app-fixed.conf", "mode": 420, "contents": {"source": "data:,fixed"}}]});
    admin.put(&path, &mc).await.unwrap().into_result().unwrap();
    host.reboot_when_asked(c, "deploying v3 again under a file-only config").await;
    assert_eq!(testkit::deployment_order(&host.sysroot()).unwrap()[0], v3, "v3 deployed again");
    let (fourth, _) = wait_state(c, &name, "Done", true, "Done on v3 with the fixed application").await;
    assert_eq!(std::fs::read_to_string(host.host.path("etc/app-fixed.conf")).unwrap(), "fixed", "{fourth}");
    let log = host.host.log();
    assert!(log.contains("the node runs another OS commit than its config names"), "{log}");
    // v3 came up without `mitigations=off`, which v2's deployment (the one rolled back to) had
    // and the last two configs do not ask for. (It stayed: the update took the failed config's
    // arguments, none, out of v2's, and kept the one no config names any more.)
    let st = host.agent_status();
    assert_eq!(st["os"]["deployments"][0]["checksum"], v3.as_str(), "{st}");
    assert_eq!(st["os"]["deployments"][0]["kernelArguments"], json!(["root=/dev/vda", "console=ttyS0"]), "{st}");
    assert!(!host.host.path("var/lib/aloft/os-rolled-back-kargs.json").exists(), "the record is void on v3");
}

/// An update that changes only kernel arguments fails its health check: the node rolls back to
/// the previous deployment of the same commit, and its reason says so (it said "from OS commit
/// v1 to v1"). The fix that then changes only a file, keeping the failed config's osImageURL and
/// kernel arguments, deploys the arguments: the node runs the deployment rolled back to, without
/// them (the fix wrote its file and reported Done there).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_kernel_argument_update_rolls_back_and_its_file_only_fix_deploys_them() {
    let w = OsWorld::new(5);
    let (c, admin) = (&w.c, w.c.client());
    let v1 = w.commit("1");
    let mut host = w.running_host("worker-kargs", &v1, &["root=/dev/vda"]).await;
    let name = host.host.name.clone();
    w.pool_done_on_ssh_config(&name).await;
    let checks = host.host.path("etc/aloft/health.d");
    std::fs::create_dir_all(&checks).unwrap();
    let script = checks.join("50-app");
    std::fs::write(&script, "#!/bin/sh\necho app down\nexit 1\n").unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let mc = os_mc("50-os", &w.url(&v1), &["nosmt"]);
    admin.post(&path_of(&MACHINE_CONFIG, None), &mc).await.unwrap().into_result().unwrap();
    host.reboot_when_asked(c, "the kernel-argument update").await;
    host.reboot_when_asked(c, "the rollback").await;
    let words = format!("; rolled back to the previous deployment of OS commit {v1} (");
    let reason = eventually(Duration::from_secs(240), "Degraded after the rollback", || async {
        let a = node_annotations(c, &name).await?;
        let reason = get(&a, ann::REASON);
        Ok((get(&a, ann::STATE) == "Degraded" && reason.contains(&words)).then_some(reason))
    })
    .await;
    assert!(reason.contains("app down") && !reason.contains("from OS commit"), "{reason}");
    let kargs = |host: &OsHost| {
        let st = host.agent_status();
        let first = &st["os"]["deployments"][0];
        (first["checksum"].as_str().unwrap_or_default().to_string(), first["kernelArguments"].clone())
    };
    assert_eq!(kargs(&host), (v1.clone(), json!(["root=/dev/vda"])), "the default is v1 without the argument");

    // The fix: the check passes again, and the config adds a file, nothing else.
    std::fs::remove_file(&script).unwrap();
    let path = path_of(&MACHINE_CONFIG, Some("50-os"));
    let mut mc = admin.get(&path).await.unwrap().into_result().unwrap();
    mc["spec"]["config"]["storage"] =
        json!({"files": [{"path": "/etc/app-fixed.conf", "mode": 420, "contents": {"source": "data:,fixed"}}]});
    admin.put(&path, &mc).await.unwrap().into_result().unwrap();
    host.reboot_when_asked(c, "the fix deploying the kernel argument").await;
    let (fixed, _) = wait_state(c, &name, "Done", true, "Done on the fix").await;
    assert_eq!(std::fs::read_to_string(host.host.path("etc/app-fixed.conf")).unwrap(), "fixed", "{fixed}");
    assert_eq!(kargs(&host), (v1.clone(), json!(["root=/dev/vda", "nosmt"])), "v1 with the argument");
    assert!(!host.host.path("var/lib/aloft/os-rolled-back-kargs.json").exists(), "the record is void now");
}

/// A node whose OS helper is not running: the OS update is refused before anything is drained or
/// written — Degraded, with a reason naming the helper's socket — and `aloft-agent status` says
/// why the deployments are missing instead of failing. Once the helper runs, the same config
/// goes through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn os_helper_not_running_is_degraded_and_changes_nothing() {
    let w = OsWorld::new(5);
    let (c, admin, key, http) = (&w.c, w.c.client(), &w.key, &w.http);
    let (v1, v2) = (w.commit("1"), w.commit("2"));
    let mut host = w.host("worker-nohelper", &v1, &["root=/dev/vda"]).await;
    let sysroot = host.sysroot();
    let socket = host.host.path("run/aloft/os-helper.sock");
    host.host.use_os_helper_socket(&socket);
    let name = host.host.name.clone();
    host.host.start_agent(c, w.token_file.path());
    let first = w.pool_done_on_ssh_config(&name).await;

    let not_running = format!("OS helper at {} is not running", socket.display());
    let st = host.agent_status();
    assert!(st["os"]["error"].as_str().unwrap_or_default().starts_with(&not_running), "{st}");

    let mut mc = os_mc("50-os", &format!("ostree+{}#{REF}@{v2}", http.url("repo")), &["mitigations=off"]);
    mc["spec"]["config"]["storage"] = json!({"files": [{"path": "/etc/aloft-os-test", "mode": 420,
        "contents": {"source": "data:,written%20with%20the%20OS%20update"}}]});
    admin.post(&path_of(&MACHINE_CONFIG, None), &mc).await.unwrap().into_result().unwrap();
    let (current, reason) = wait_state(c, &name, "Degraded", false, "Degraded without the OS helper").await;
    assert!(reason.starts_with(&not_running), "{reason}");
    assert_eq!(current, first, "still on the old config");
    assert!(!host.host.path("etc/aloft-os-test").exists(), "no file written");
    assert_eq!(testkit::deployment_order(&sysroot).unwrap(), vec![v1.clone()], "nothing deployed");
    assert!(host.host.fake.reboots().is_empty(), "no reboot");
    let node = c.client().get(&path_of(&NODE, Some(&name))).await.unwrap().into_result().unwrap();
    assert_ne!(node.pointer("/spec/unschedulable"), Some(&json!(true)), "not cordoned: {node}");

    // The helper comes up (systemd would start it on the next connection): the retry goes through.
    host.host.start_os_helper(&sysroot, &key.keyring);
    host.reboot_when_asked(c, "the OS update once the helper runs").await;
    assert_eq!(testkit::deployment_order(&sysroot).unwrap(), vec![v2.clone(), v1.clone()]);
    wait_state(c, &name, "Done", true, "Done after the helper came up").await;
    assert!(host.host.path("etc/aloft-os-test").exists());
}

/// A reboot into a staged OS deployment that logind refuses keeps the deployment and the update:
/// Degraded naming the refusal while the agent asks again, and once logind lets the reboot
/// through, the node boots the new commit and is Done. (It was Degraded for good, on a config
/// whose commit it never booted, and a later reboot left it so.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_reboot_into_a_staged_os_is_asked_again() {
    let w = OsWorld::new(5);
    let (c, admin) = (&w.c, w.c.client());
    let (v1, v2) = (w.commit("1"), w.commit("2"));
    let mut host = w.running_host("worker-osrb", &v1, &["root=/dev/vda"]).await;
    let name = host.host.name.clone();
    let first = w.pool_done_on_ssh_config(&name).await;
    host.host.fake.fail_calls("Reboot", None);
    admin
        .post(&path_of(&MACHINE_CONFIG, None), &os_mc("50-os", &w.url(&v2), &[]))
        .await
        .unwrap()
        .into_result()
        .unwrap();
    let (current, reason) = wait_state(c, &name, "Degraded", false, "Degraded by the refused reboot").await;
    assert!(reason.starts_with("reboot failed (retrying): "), "{reason}");
    assert_eq!(current, first, "the node runs the old config until it reboots");
    assert_eq!(testkit::deployment_order(&host.sysroot()).unwrap(), vec![v2.clone(), v1.clone()], "v2 kept staged");
    eventually(Duration::from_secs(30), "the reboot asked for again", || async {
        Ok((host.host.reboots_asked() >= 2).then_some(()))
    })
    .await;
    host.host.fake.clear_failures();
    host.reboot_when_asked(c, "the reboot let through").await;
    let (second, _) = wait_state(c, &name, "Done", true, "Done on v2 after the reboot").await;
    assert_ne!(second, first);
    assert_eq!(testkit::deployment_order(&host.sysroot()).unwrap(), vec![v2, v1]);
}

/// The OS helper out of reach in the boot after an OS update (not started yet, or restarting):
/// that says nothing about the boot, so the agent waits for it, retrying with backoff, says so
/// on the Node once the wait has lasted the health checks' timeout, and verifies once the
/// helper answers. It took the helper's error for a staged deployment that did not come up: it
/// spent a restage on it, reported Degraded on the new config and stayed so after the helper
/// came back, since nothing retried a node Degraded on its current config.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_os_helper_out_of_reach_after_the_reboot_is_waited_for() {
    let w = OsWorld::new(5);
    let (c, admin) = (&w.c, w.c.client());
    let (v1, v2) = (w.commit("1"), w.commit("2"));
    let mut host = w.host("worker-late-helper", &v1, &["root=/dev/vda"]).await;
    host.host.extra_args = ["--health-timeout-seconds", "5"].iter().map(|s| s.to_string()).collect();
    let sysroot = host.sysroot();
    host.host.start_os_helper(&sysroot, &w.key.keyring);
    host.host.start_agent(c, w.token_file.path());
    let name = host.host.name.clone();
    let first = w.pool_done_on_ssh_config(&name).await;
    admin
        .post(&path_of(&MACHINE_CONFIG, None), &os_mc("50-os", &w.url(&v2), &[]))
        .await
        .unwrap()
        .into_result()
        .unwrap();
    eventually(Duration::from_secs(240), "the OS update's reboot asked", || async {
        Ok((!host.host.fake.reboots().is_empty()).then_some(()))
    })
    .await;
    // Until Done the Node names the config the node ran, as MCO moves currentConfig at Done (the
    // OS update's Working report before its reboot named the new one).
    let a = node_annotations(c, &name).await.unwrap();
    assert_eq!((get(&a, ann::STATE), get(&a, ann::CURRENT_CONFIG)), ("Working".to_string(), first.clone()));
    host.host.stop_agent();
    host.host.stop_os_helper();
    host.host.fake.clear_calls();
    host.boot(c);
    eventually(Duration::from_secs(60), "the agent waiting for the helper", || async {
        Ok(host.host.log().contains("cannot verify the booted OS yet").then_some(()))
    })
    .await;
    let (_, reason) = wait_state(c, &name, "Degraded", false, "the wait said on the Node").await;
    assert!(reason.starts_with("cannot verify the booted OS: OS helper at"), "{reason}");
    assert!(reason.ends_with("retrying until the OS helper answers"), "{reason}");
    assert!(!host.host.log().contains("staging it again"), "{}", host.host.log());
    assert_eq!(get(&node_annotations(c, &name).await.unwrap(), ann::CURRENT_CONFIG), first, "not verified yet");

    host.host.start_os_helper(&sysroot, &w.key.keyring);
    wait_state(c, &name, "Done", true, "Done once the helper answers").await;
    assert!(host.host.fake.reboots().is_empty(), "no reboot for a helper out of reach");
    assert_eq!(testkit::deployment_order(&sysroot).unwrap(), vec![v2.clone(), v1.clone()]);
}

/// The staged deployment lost (a power cut before ostree finalized it: the node boots the OS it
/// ran) in an outage that keeps the coordinator away past the agent's reach limit. There is
/// nothing to roll back, and the agent waits for the coordinator without the limit. Before, a
/// limit of zero left made its start-up loop ask, warn and give up at once, forever: it never
/// reached the coordinator once it was back, and the node kept its slot of maxUnavailable.
/// (A directory sysroot boots nothing, so every boot here is one off the staged deployment.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_staged_deployment_past_the_reach_limit_waits_for_the_coordinator() {
    let mut w = OsWorld::with(5, aloft_tests::Options { fixed_port: true, ..Default::default() });
    let (v1, v2) = (w.commit("1"), w.commit("2"));
    let mut host = w.host("worker-lost-stage", &v1, &["root=/dev/vda"]).await;
    host.host.extra_args =
        ["--health-timeout-seconds", "30", "--os-reach-timeout-seconds", "1"].iter().map(|s| s.to_string()).collect();
    let sysroot = host.sysroot();
    host.host.start_os_helper(&sysroot, &w.key.keyring);
    host.host.start_agent(&w.c, w.token_file.path());
    let name = host.host.name.clone();
    w.pool_done_on_ssh_config(&name).await;
    let mc = os_mc("50-os", &w.url(&v2), &[]);
    w.c.client().post(&path_of(&MACHINE_CONFIG, None), &mc).await.unwrap().into_result().unwrap();
    eventually(Duration::from_secs(240), "the OS update's reboot asked", || async {
        Ok((!host.host.fake.reboots().is_empty()).then_some(()))
    })
    .await;
    host.host.stop_agent();
    host.host.fake.clear_calls();
    w.c.kill9();
    host.boot(&w.c);
    let gave_up = "nothing to roll back";
    eventually(Duration::from_secs(60), "the reach limit passed", || async {
        Ok(host.host.log().contains(gave_up).then_some(()))
    })
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let times = host.host.log().matches(gave_up).count();
    assert_eq!(times, 1, "judged once, then the wait goes on without the limit:\n{}", host.host.log());
    assert!(host.host.fake.reboots().is_empty(), "nothing rolled back, nothing rebooted");

    let ready = "aloft-agent ready";
    let before = host.host.log().matches(ready).count();
    w.c.restart();
    // The coordinator back: the agent marks its Node Ready and follows it again.
    eventually(Duration::from_secs(120), "the agent reaching the coordinator again", || async {
        Ok((host.host.log().matches(ready).count() > before).then_some(()))
    })
    .await;
    assert_eq!(host.host.log().matches(gave_up).count(), 1, "{}", host.host.log());
}

/// Where a power cut can fall in an OS update, after the agent's durable writes: each leaves
/// the node's files written and nothing staged (ostree finalizes a staged deployment only at
/// shutdown, so a power cut loses it). The cut after the current config is saved too is not
/// here: the agent finds it by comparing the booted commit with the config's, and a directory
/// sysroot boots nothing; the VM scenario `d_power_cut_during_os_update` cuts a real VM there.
#[derive(Debug, Clone, Copy)]
enum Cut {
    /// The apply finished (its journal committed); the phase still reads Applying.
    FilesWritten,
    /// The phase reads RebootingStaged; the current config is not saved yet.
    PhaseSaved,
}

/// A power cut at each durable step of an OS update before its current config is saved (`Cut`),
/// set up on the disk the way the agent's own code leaves it (the files written by its apply, the
/// phase saved by its function) while the real agent is stopped with SIGKILL and the coordinator
/// has picked the node. After a boot with a new boot id the node must do the update again and
/// come up Done with the new commit deployed. (Both windows were bugs: the VM power-cut scenario
/// caught the one at `PhaseSaved`, when the phase was saved after the current config; at
/// `FilesWritten` the restart saved the current config and rebooted into the old OS, which the
/// drift check then found: Degraded for good.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_power_cut_before_an_os_update_saves_its_config_is_recovered() {
    use aloft_agent::{host::Root, state};

    let w = OsWorld::new(5);
    let v1 = w.commit("1");
    let mut host = w.running_host("worker-cut", &v1, &["root=/dev/vda"]).await;
    let (c, admin) = (&w.c, w.c.client());
    let sysroot = host.sysroot();
    let name = host.host.name.clone();
    w.pool_done_on_ssh_config(&name).await;

    let root = Root::new(host.host.root.path());
    let mc_path = path_of(&MACHINE_CONFIG, Some("50-os"));
    let mut booted = v1.clone();
    for (i, cut) in [Cut::FilesWritten, Cut::PhaseSaved].into_iter().enumerate() {
        let v = w.commit(&(i + 2).to_string());
        let file = format!("written with OS commit {}", i + 2);
        host.host.stop_agent();
        let before = node_annotations(c, &name).await.unwrap();
        let mut mc = os_mc("50-os", &w.url(&v), &[]);
        mc["spec"]["config"]["storage"] = json!({"files": [{"path": "/etc/aloft-os-test", "mode": 420,
            "contents": {"source": format!("data:,{}", file.replace(' ', "%20"))}}]});
        if i == 0 {
            admin.post(&path_of(&MACHINE_CONFIG, None), &mc).await.unwrap().into_result().unwrap();
        } else {
            let mut stored = admin.get(&mc_path).await.unwrap().into_result().unwrap();
            stored["spec"] = mc["spec"].clone();
            admin.put(&mc_path, &stored).await.unwrap().into_result().unwrap();
        }
        // The coordinator picks the node while its agent is down (a node stays Ready without it).
        let target = eventually(Duration::from_secs(60), "the pick of the stopped node", || {
            let (c, name, was) = (&c, &name, get(&before, ann::DESIRED_CONFIG));
            async move {
                let d = get(&node_annotations(c, name).await?, ann::DESIRED_CONFIG);
                Ok((!d.is_empty() && d != was).then_some(d))
            }
        })
        .await;

        // The disk as the cut leaves it, written by the agent's own code.
        let (old_spec, new_spec) =
            aloft_tests::apply_as_the_agent(&admin, &root, &host.host.bus_address, &target).await;
        let phase = match cut {
            Cut::FilesWritten => state::Phase::Applying { target: target.clone() },
            Cut::PhaseSaved => state::Phase::RebootingStaged {
                target: target.clone(),
                boot_id: state::boot_id(&root),
                checksum: v.clone(),
                staged: Some(state::Staged {
                    image: Some(w.url(&v)),
                    old_kargs: old_spec.kernel_arguments.clone(),
                    new_kargs: new_spec.kernel_arguments.clone(),
                    restaged: 0,
                    serial: None,
                    from: None,
                }),
            },
        };
        state::save(&root, &phase).unwrap();
        assert_eq!(testkit::deployment_order(&sysroot).unwrap()[0], booted, "{cut:?}: nothing staged");

        host.boot(c);
        host.reboot_when_asked(c, &format!("{cut:?}: the update staged again")).await;
        let what = format!("{cut:?}: Done on {target}");
        let (current, _) = wait_node(c, &name, "Done", true, Some(&host), &what).await;
        assert_eq!(current, target, "{what}");
        assert_eq!(testkit::deployment_order(&sysroot).unwrap()[0], v, "{cut:?}: booted into the new commit");
        assert_eq!(std::fs::read_to_string(host.host.path("etc/aloft-os-test")).unwrap(), file, "{cut:?}");
        booted = v;
    }
}

/// An OS update whose staging fails after its files are written (here: the commit is in the
/// node's repository, signed and whole as far as its commit object says, but one of its file
/// objects is gone, so ostree's checkout fails) is undone as a failed rebootless action is: the
/// files written back to the previous config's, nothing deployed, Degraded naming the stage's
/// error. A revert is then Done on a disk that holds the previous config. (The update's files
/// stayed: the node was Degraded on the target with its files on disk and the previous config
/// current, and a revert reported Done over them.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_os_staging_undoes_the_updates_files() {
    let w = OsWorld::new(5);
    let (c, admin) = (&w.c, w.c.client());
    let (v1, v2) = (w.commit("1"), w.commit("2"));
    let host = w.running_host("worker-badstage", &v1, &["root=/dev/vda"]).await;
    let sysroot = host.sysroot();
    let name = host.host.name.clone();
    let first = w.pool_done_on_ssh_config(&name).await;

    // v2 in the node's repository, as a pre-staging fetch leaves it, less its file objects.
    let repo = sysroot.join("ostree/repo");
    let objects = |dir: &Path| -> std::collections::BTreeSet<PathBuf> {
        // objects/<2 hex>/<62 hex>.<kind>
        let fanout = std::fs::read_dir(dir.join("objects")).unwrap().map(|e| e.unwrap().path());
        fanout.flat_map(|d| std::fs::read_dir(d).unwrap().map(|e| e.unwrap().path())).collect()
    };
    let before = objects(&repo);
    let out = Command::new("ostree")
        .arg(format!("--repo={}", repo.display()))
        .arg("pull-local")
        .arg(&w.server.path)
        .arg(&v2)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let gone: Vec<PathBuf> =
        objects(&repo).difference(&before).filter(|p| p.extension().is_some_and(|e| e == "file")).cloned().collect();
    assert!(!gone.is_empty(), "v2 brought no file object of its own");
    for p in &gone {
        std::fs::remove_file(p).unwrap();
    }

    let mut mc = os_mc("50-os", &w.url(&v2), &[]);
    mc["spec"]["config"]["storage"] = json!({"files": [{"path": "/etc/aloft-os-test", "mode": 420,
        "contents": {"source": "data:,written%20with%20the%20OS%20update"}}]});
    admin.post(&path_of(&MACHINE_CONFIG, None), &mc).await.unwrap().into_result().unwrap();
    let (current, reason) = wait_state(c, &name, "Degraded", false, "Degraded by the failed staging").await;
    assert_eq!(current, first, "{reason}");
    assert!(reason.contains(&format!("deploying OS commit {v2}")), "{reason}");
    assert!(reason.ends_with("(the update was undone: back on the previous config)"), "{reason}");
    // Between two tries (each writes the files, fails to stage and undoes): the disk holds the
    // previous config, nothing is deployed.
    host.host.while_agent_in("degraded", Duration::from_secs(120), || {
        assert!(!host.host.path("etc/aloft-os-test").exists(), "the update's file left on disk");
        assert!(!host.host.path("var/lib/aloft/undoing.json").exists(), "the undo is finished");
    });
    assert_eq!(testkit::deployment_order(&sysroot).unwrap(), vec![v1.clone()], "nothing deployed");
    assert!(host.host.fake.reboots().is_empty(), "no reboot");

    // The revert: Done on the first config, with nothing of the update's on disk.
    admin.delete(&path_of(&MACHINE_CONFIG, Some("50-os"))).await.unwrap().into_result().unwrap();
    let (current, _) = wait_state(c, &name, "Done", true, "Done on the config before after the revert").await;
    assert_eq!(current, first);
    assert!(!host.host.path("etc/aloft-os-test").exists(), "the update's file left after the revert");
}

/// An OS update whose files were written and whose deployment was never staged (here: its
/// staging failed and the undo could not start, then the agent restarted, which forgets that
/// undo), and the admin reverts while the node is down: the node comes up Done on the config
/// before only with that config's files written back (the apply journal says whose files the
/// disk holds, and the write-back records it as an undo before its own apply clears the
/// journal: a first write-back that fails is tried again). It reported Done over the update's
/// files, which the drift check then found.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revert_of_an_os_update_never_staged_writes_the_files_back() {
    use aloft_agent::{host::Root, state};

    let w = OsWorld::new(5);
    let v1 = w.commit("1");
    let mut host = w.running_host("worker-cutrev", &v1, &["root=/dev/vda"]).await;
    let (c, admin) = (&w.c, w.c.client());
    let name = host.host.name.clone();
    let first = w.pool_done_on_ssh_config(&name).await;
    let root = Root::new(host.host.root.path());
    let v2 = w.commit("2");
    host.host.stop_agent();
    let mut mc = os_mc("50-os", &w.url(&v2), &[]);
    mc["spec"]["config"]["storage"] = json!({"files": [{"path": "/etc/aloft-os-test", "mode": 420,
        "contents": {"source": "data:,written%20with%20the%20OS%20update"}}]});
    mc["spec"]["config"]["systemd"] = json!({"units": [{"name": "y.service", "enabled": true,
        "contents": "[Service]\nExecStart=/bin/true\n[Install]\nWantedBy=multi-user.target\n"}]});
    admin.post(&path_of(&MACHINE_CONFIG, None), &mc).await.unwrap().into_result().unwrap();
    let desired = |want_first: bool| {
        let (c, name, first) = (&c, &name, &first);
        async move {
            let what = if want_first {
                "the coordinator's pick of the stopped node for the revert"
            } else {
                "the coordinator's pick of the stopped node"
            };
            eventually(Duration::from_secs(60), what, || async move {
                let d = get(&node_annotations(c, name).await?, ann::DESIRED_CONFIG);
                Ok((!d.is_empty() && (d == *first) == want_first).then_some(d))
            })
            .await
        }
    };
    let target = desired(false).await;
    // The disk as the cut leaves it, written by the agent's own code: the files, the phase.
    aloft_tests::apply_as_the_agent(&admin, &root, &host.host.bus_address, &target).await;
    state::save(&root, &state::Phase::Applying { target: target.clone() }).unwrap();
    assert!(host.host.path("etc/aloft-os-test").exists());

    // What the agent reported before it went down: the staging failed and its undo could not
    // start. A failing node, drained: the revert moves it at once, as the way out of a bad config.
    let failed = json!({"metadata": {"annotations": {ann::STATE: "Degraded", ann::REASON:
        "deploying OS commit: ...; undoing the update cannot start (retrying): No space left on device"}}});
    let node_path = path_of(&NODE, Some(&name));
    admin.patch(&node_path, "application/merge-patch+json", &failed).await.unwrap().into_result().unwrap();
    admin.delete(&path_of(&MACHINE_CONFIG, Some("50-os"))).await.unwrap().into_result().unwrap();
    desired(true).await;
    // The first write-back fails (systemd refuses its daemon-reload, so its rollback fails too
    // and recovery retries it): reported, and once systemd answers the next try still knows
    // whose files the disk holds (the write-back's apply cleared the journal that said it first).
    host.host.fake.fail_calls("Reload", None);
    host.boot(c);
    let writing = format!("writing {first}'s back failed: ");
    // Read from the agent's log: on the Node the reason is replaced a moment later by the
    // recovery's (the failing daemon-reload fails the write-back's rollback too, which the
    // recovery retries until systemd answers), and a poll could miss it.
    let reason = eventually(Duration::from_secs(60), "the write-back failing", || async {
        let log = host.host.log();
        let line = log.lines().find(|l| l.contains("update failed") && l.contains(&writing)).map(str::to_string);
        Ok(line)
    })
    .await;
    assert!(reason.contains("reason=the last update's files and units are on disk"), "{reason}");
    host.host.fake.clear_failures();
    let (current, _) = wait_state(c, &name, "Done", true, "Done on the config before after the revert").await;
    assert_eq!(current, first);
    assert!(!host.host.path("etc/aloft-os-test").exists(), "the update's file left under Done");
    let calls = host.host.fake.call_strings();
    assert!(calls.iter().any(|c| c.starts_with("PresetUnitFiles([y.service]")), "{calls:?}");
    assert!(!host.host.path("var/lib/aloft/undoing.json").exists());
    assert_eq!(testkit::deployment_order(&host.sysroot()).unwrap(), vec![v1], "nothing deployed");
    assert!(host.host.fake.reboots().is_empty(), "no reboot");
}

/// A power cut while a node that rolled back writes the files of its next config, when both
/// configs name the commit it rolled back from (the fix of the application is a new file): the
/// update deploys that commit (the node runs the previous one), and so must its restart. Before,
/// the restart decided from the two configs alone ("no OS work"), saved the new config, rebooted
/// into the old OS, and the OS check then reported the commit "failed on this node; not retried
/// until the desired config changes" though the desired config had changed: Degraded for good.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_power_cut_in_the_update_after_a_rollback_deploys_the_commit_on_restart() {
    use aloft_agent::{host::Root, state};

    let w = OsWorld::new(5);
    let (mut host, script, v1, v2) = w.host_updating_to_a_failing_v2("worker-rb-cut").await;
    let (c, admin) = (&w.c, w.c.client());
    let sysroot = host.sysroot();
    let name = host.host.name.clone();
    // v2 fails its health check after its reboot: rolled back to v1, Degraded on v2's config.
    host.reboot_when_asked(c, "the v2 update").await;
    host.reboot_when_asked(c, "the rollback").await;
    let rolled_back = format!("; rolled back from OS commit {v2} to {v1}");
    let failed = eventually(Duration::from_secs(240), "Degraded after the rollback", || async {
        let a = node_annotations(c, &name).await?;
        Ok((get(&a, ann::STATE) == "Degraded" && get(&a, ann::REASON).ends_with(&rolled_back))
            .then(|| get(&a, ann::CURRENT_CONFIG)))
    })
    .await;
    assert_eq!(testkit::deployment_order(&sysroot).unwrap()[0], v1, "rolled back");

    // The application is fixed; the next config adds a file and still names v2. The agent is cut
    // (SIGKILL) after writing its files, before staging v2.
    std::fs::remove_file(&script).unwrap();
    host.host.stop_agent();
    let path = path_of(&MACHINE_CONFIG, Some("50-os"));
    let mut mc = admin.get(&path).await.unwrap().into_result().unwrap();
    mc["spec"]["config"]["storage"] =
        json!({"files": [{"path": "/etc/app-fixed.conf", "mode": 420, "contents": {"source": "data:,fixed"}}]});
    admin.put(&path, &mc).await.unwrap().into_result().unwrap();
    let target = eventually(Duration::from_secs(60), "the pick of the stopped node", || {
        let (c, name, was) = (&c, &name, failed.clone());
        async move {
            let d = get(&node_annotations(c, name).await?, ann::DESIRED_CONFIG);
            Ok((!d.is_empty() && d != was).then_some(d))
        }
    })
    .await;
    let root = Root::new(host.host.root.path());
    let (old_spec, new_spec) = aloft_tests::apply_as_the_agent(&admin, &root, &host.host.bus_address, &target).await;
    assert_eq!(old_spec.os_image_url, new_spec.os_image_url, "both configs name v2");
    state::save(&root, &state::Phase::Applying { target: target.clone() }).unwrap();

    host.boot(c);
    host.reboot_when_asked(c, "v2 staged by the restarted update").await;
    let (current, _) = eventually(Duration::from_secs(240), "Done on the fixed config", || async {
        let a = node_annotations(c, &name).await?;
        let (state, current) = (get(&a, ann::STATE), get(&a, ann::CURRENT_CONFIG));
        assert!(
            !(state == "Degraded" && current == target),
            "Degraded on {target}: {}\n{}",
            get(&a, ann::REASON),
            host.host.log()
        );
        Ok((state == "Done" && current == target).then(|| (current, get(&a, ann::REASON))))
    })
    .await;
    assert_eq!(current, target);
    assert_eq!(testkit::deployment_order(&sysroot).unwrap()[0], v2, "v2 deployed again");
    assert_eq!(std::fs::read_to_string(host.host.path("etc/app-fixed.conf")).unwrap(), "fixed");
}

/// A node rebooting into an OS that fails its health check while its pool moves on to a fix: the
/// coordinator asks the node to pre-stage the fix meanwhile. The rollback goes ahead of that
/// download. (The download held the OS helper, and the rollback waited behind it: here the fix's
/// repository never answers, and the node sat on the failing OS, Working, with no reason.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rollback_does_not_wait_for_a_pre_stage_download() {
    let w = OsWorld::new(5);
    let (mut host, _script, v1, _v2) = w.host_updating_to_a_failing_v2("worker-rb-pre").await;
    let (c, admin) = (&w.c, w.c.client());
    let sysroot = host.sysroot();
    let name = host.host.name.clone();
    eventually(Duration::from_secs(240), "the reboot into v2 asked", || async {
        Ok((!host.host.fake.reboots().is_empty()).then_some(()))
    })
    .await;

    // The fix, from a repository that accepts connections and never answers.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = silent.local_addr().unwrap().port();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for s in silent.incoming() {
            held.push(s);
        }
    });
    let path = path_of(&MACHINE_CONFIG, Some("50-os"));
    let mut mc = admin.get(&path).await.unwrap().into_result().unwrap();
    mc["spec"]["osImageURL"] = json!(format!("ostree+http://127.0.0.1:{port}/repo#{REF}@{}", "ab".repeat(32)));
    admin.put(&path, &mc).await.unwrap().into_result().unwrap();
    eventually(Duration::from_secs(60), "the fix's pre-stage asked of the rebooting node", || async {
        let a = node_annotations(c, &name).await?;
        Ok((!get(&a, ann::PRESTAGE_CONFIG).is_empty() && get(&a, ann::PRESTAGE_CONFIG) != get(&a, ann::DESIRED_CONFIG))
            .then_some(()))
    })
    .await;

    // The reboot into v2: its health check fails, and the rollback's reboot is asked at once.
    host.host.stop_agent();
    host.host.fake.clear_calls();
    host.boot(c);
    let asked = std::time::Instant::now();
    while host.host.fake.reboots().is_empty() {
        assert!(
            asked.elapsed() < Duration::from_secs(20),
            "no rollback within 20 s of the boot into v2:\n{}",
            host.host.log()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    eprintln!("the rollback's reboot was asked {:?} after the boot", asked.elapsed());
    assert_eq!(testkit::deployment_order(&sysroot).unwrap()[0], v1, "the rollback made v1 the default");
}

/// Two running hosts on v1, Done on the SSH config; the pool's OS then moves to v2 served by a
/// mirror that holds every object request (a stalled one). a holds v2 already and is picked
/// first (its zone); its reboot is not played, so a keeps the pool's one slot while b waits and
/// pre-stages v2 from the stalled mirror. b's helper runs with `b_helper_args`.
async fn b_prestaging_from_a_stalled_mirror(w: &OsWorld, b_helper_args: &[&str]) -> StalledPrestage {
    let (c, admin) = (&w.c, w.c.client());
    let v1 = w.commit("1");
    let a = w.running_host("worker-a", &v1, &["root=/dev/vda"]).await;
    let mut b = w.host("worker-b", &v1, &["root=/dev/vda"]).await;
    b.host.os_helper_args = b_helper_args.iter().map(|s| s.to_string()).collect();
    // A download's progress reaches the Node once it has run 2 s (30 s by default).
    b.host.extra_args.extend(["--os-progress-report-seconds".to_string(), "2".to_string()]);
    let b_sysroot = b.sysroot();
    b.host.start_os_helper(&b_sysroot, &w.key.keyring);
    b.host.start_agent(c, w.token_file.path());
    w.pool_done_on_ssh_config(&a.host.name).await;
    wait_state(c, &b.host.name, "Done", true, "b Done on the SSH config").await;
    // a is picked first: nodes with a zone come first.
    let node_a = path_of(&NODE, Some(&a.host.name));
    let zone = json!({"metadata": {"labels": {"topology.kubernetes.io/zone": "a"}}});
    admin.patch(&node_a, "application/merge-patch+json", &zone).await.unwrap().into_result().unwrap();

    // v2 from the stalled mirror; a already holds it (no download), b does not.
    let v2 = w.commit("2");
    let repo = format!("--repo={}", a.sysroot().join("ostree/repo").display());
    let out = Command::new("ostree").args([repo.as_str(), "pull-local"]).arg(&w.server.path).arg(&v2).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let gate = testkit::Gate::shut();
    let mirror = StaticServer::start_gated(&w.work.path().join("srv"), Some(gate.clone())).unwrap();
    let stalled_url = format!("ostree+{}#{REF}@{v2}", mirror.url("repo"));
    admin
        .post(&path_of(&MACHINE_CONFIG, None), &os_mc("50-os", &stalled_url, &[]))
        .await
        .unwrap()
        .into_result()
        .unwrap();
    let g = gate.clone();
    let held = tokio::task::spawn_blocking(move || g.wait_held(Duration::from_secs(120))).await.unwrap();
    assert!(held, "b never started pre-staging v2:\n{}", b.host.log());
    StalledPrestage { a, b, v2, gate, _mirror: mirror }
}

/// What [`b_prestaging_from_a_stalled_mirror`] set up.
struct StalledPrestage {
    a: OsHost,
    b: OsHost,
    v2: String,
    /// The stalled mirror's: open, it sends.
    gate: testkit::Gate,
    _mirror: StaticServer,
}

/// Plays every reboot a and b ask for until b is Done with `commit` first in its boot order.
async fn play_until_b_done_on(c: &Coordinator, a: &mut OsHost, b: &mut OsHost, commit: &str, what: &str) {
    let (b_sysroot, b_name) = (b.sysroot(), b.host.name.clone());
    eventually(Duration::from_secs(300), what, || {
        play_reboots(c, [&mut *a, &mut *b]);
        let (b_sysroot, b_name, commit) = (b_sysroot.clone(), b_name.clone(), commit.to_string());
        async move {
            let ann = node_annotations(c, &b_name).await?;
            let on_commit = testkit::deployment_order(&b_sysroot)?.first() == Some(&commit);
            Ok((get(&ann, ann::STATE) == "Done"
                && get(&ann, ann::CURRENT_CONFIG) == get(&ann, ann::DESIRED_CONFIG)
                && on_commit)
                .then_some(()))
        }
    })
    .await;
}

/// A node picked for the commit its pre-stage is fetching from a mirror that stopped sending
/// waited for that download, and libostree 2022.7 has no timeout for a silent mirror: the update
/// sat in Preparing for up to the agent's hour. With the helper's stall guard
/// (`--pull-stall-seconds`, 8 s here) the pull is stopped, b is Degraded with a reason that says
/// the mirror stalled, it tries again, and once the mirror sends again b updates. Meanwhile b's
/// status shows the download and how far it came.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_update_whose_mirror_stopped_sending_fails_as_stalled_and_completes_once_it_sends() {
    let w = OsWorld::new(5);
    let c = &w.c;
    let StalledPrestage { mut a, mut b, v2, gate, _mirror } =
        b_prestaging_from_a_stalled_mirror(&w, &["--pull-stall-seconds", "8"]).await;

    // a's reboot is played; b's turn comes, and its pull of v2 meets the silent mirror.
    let b_name = b.host.name.clone();
    let started = std::time::Instant::now();
    let mut progress = Vec::new();
    let on_node = std::sync::Arc::new(std::sync::Mutex::new(Vec::<(String, String)>::new()));
    let reason = eventually(Duration::from_secs(120), "b Degraded: the mirror stalled", || {
        play_reboots(c, [&mut a, &mut b]);
        let st = b.agent_status();
        if st["progress"].as_str().is_some_and(|p| p.starts_with("preparing: downloading OS commit")) {
            let seen = (st["progress"].clone(), st["os"]["download"].clone());
            if progress.last() != Some(&seen) {
                progress.push(seen);
            }
        }
        let (b_name, on_node) = (b_name.clone(), on_node.clone());
        async move {
            let ann = node_annotations(c, &b_name).await?;
            let shown = get(&ann, ann::PROGRESS).to_string();
            if !shown.is_empty() {
                on_node.lock().unwrap().push((get(&ann, ann::STATE).to_string(), shown.clone()));
            }
            let reason = get(&ann, ann::REASON).to_string();
            Ok((get(&ann, ann::STATE) == "Degraded"
                && reason.contains("stalled: nothing arrived from the mirror for 8 s"))
            .then_some((reason, shown)))
        }
    })
    .await;
    let (reason, left_on_node) = reason;
    // The Node showed the download while b updated (picked, it downloads before it reports
    // Working: its state still says Done on v1), and not once it failed.
    let on_node = on_node.lock().unwrap().clone();
    let node_shown = format!("downloading OS commit {v2}: ");
    assert!(
        on_node.iter().any(|(state, p)| state != "Degraded" && p.starts_with(&node_shown) && p.contains(" objects, ")),
        "b's Node never showed the download: {:?}",
        &on_node[on_node.len().saturating_sub(5)..]
    );
    assert_eq!(left_on_node, "", "the failure report took the progress off the Node");
    // Shown every 3 s: with the update's pull or the pre-stage it waits for under way.
    let shown = format!("preparing: downloading OS commit {v2}: ");
    assert!(
        progress.iter().any(|(p, d)| p.as_str().is_some_and(|p| p.starts_with(&shown) && p.contains(" objects, "))
            && d["checksum"] == json!(v2)),
        "b's status never showed the download (the last of what it showed): {:?}",
        &progress[progress.len().saturating_sub(5)..]
    );
    assert!(reason.contains(&v2), "the reason names the commit: {reason}");
    let helper_log = b.host.os_helper.as_ref().map(|h| h.log_text()).unwrap_or_default();
    assert!(helper_log.contains("stopping the pull worker: stalled"), "{helper_log}");
    eprintln!("b Degraded on the stalled mirror {:?} after a's reboot was played", started.elapsed());

    // The mirror sends again: b's next try completes.
    gate.open();
    play_until_b_done_on(c, &mut a, &mut b, &v2, "b Done on v2").await;
    let ann = node_annotations(c, &b_name).await.unwrap();
    assert_eq!(get(&ann, ann::PROGRESS), "", "no progress on the Node once b is Done");
}

/// Plays every reboot `hosts` asked for: the agent is stopped and started on a new boot id.
fn play_reboots<const N: usize>(c: &Coordinator, hosts: [&mut OsHost; N]) {
    for host in hosts {
        if !host.host.fake.reboots().is_empty() {
            host.host.stop_agent();
            host.host.fake.clear_calls();
            host.boot(c);
        }
    }
}

/// A waiting node's pre-stage download gives way. Node b waits while a updates (a's reboot
/// into v2 not played yet), and pre-stages v2 from a repository that holds every object request
/// (a stalled mirror). The pool then moves on to v3, on a repository that answers: b's new
/// pre-stage cancels the stalled one (the helper kills that pull's worker), and b updates when
/// its turn comes. (Before, the stalled download held b's OS helper for up to an hour, and everything b
/// had to do with its OS waited behind it.)
///
/// While it waits, b's Node shows the pre-stage's progress (`aloftctl get nodes` REASON). b's
/// agent is then killed mid-download: the progress stays on the Node, and the agent started
/// again takes it off (its own pre-stage, started again, reports only after an hour).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_pre_stage_download_gives_way_to_the_next_target() {
    let w = OsWorld::new(5);
    let (c, admin) = (&w.c, w.c.client());
    let StalledPrestage { mut a, mut b, gate: _gate, _mirror, v2 } = b_prestaging_from_a_stalled_mirror(&w, &[]).await;

    // The pre-stage's progress on b's Node, named as one.
    let b_name = b.host.name.clone();
    let shown = eventually(Duration::from_secs(60), "b's Node showing its pre-stage", || async {
        let ann = node_annotations(c, &b_name).await?;
        let p = get(&ann, ann::PROGRESS).to_string();
        Ok((p.contains(" objects, ")).then_some((p, get(&ann, ann::PRESTAGE_CONFIG).to_string())))
    })
    .await;
    let (progress, prestage_config) = shown;
    assert!(
        progress.starts_with(&format!("pre-staging OS commit {v2} for {prestage_config}: ")),
        "{progress} (pre-staging {prestage_config})"
    );
    let out = Command::new(bin("aloftctl"))
        .arg("--kubeconfig")
        .arg(c.kubeconfig_path())
        .args(["get", "nodes"])
        .output()
        .unwrap();
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(
        table.lines().any(|l| l.starts_with(&b_name) && l.contains(&format!("pre-staging OS commit {v2}"))),
        "{table}"
    );
    // Killed mid-download, the agent leaves it behind; started again, it takes it off.
    b.host.stop_agent();
    let ann = node_annotations(c, &b_name).await.unwrap();
    assert!(get(&ann, ann::PROGRESS).starts_with("pre-staging OS commit"), "left by the killed agent: {ann:?}");
    let at = b.host.extra_args.iter().position(|a| a == "--os-progress-report-seconds").unwrap();
    b.host.extra_args[at + 1] = "3600".into();
    b.host.start_agent(c, &b.bootstrap);
    eventually(Duration::from_secs(60), "the restarted agent taking the stale progress off", || async {
        Ok(get(&node_annotations(c, &b_name).await?, ann::PROGRESS).is_empty().then_some(()))
    })
    .await;
    assert!(b.host.log().contains("took off a download progress an earlier run left on the Node"), "{}", b.host.log());

    // The pool moves on to v3, from the repository that answers.
    let v3 = w.commit("3");
    let path = path_of(&MACHINE_CONFIG, Some("50-os"));
    let mut mc = admin.get(&path).await.unwrap().into_result().unwrap();
    mc["spec"]["osImageURL"] = json!(w.url(&v3));
    admin.put(&path, &mc).await.unwrap().into_result().unwrap();
    play_until_b_done_on(c, &mut a, &mut b, &v3, "b Done on v3").await;
    let log = b.host.log();
    assert!(log.contains("cancelling the background download"), "{log}");
    assert!(!log.contains("pre-stage failed"), "a cancelled download is not a failure: {log}");
}

/// A release from an update graph reaches the node: the ClusterVersion takes release 1.0.0 (the
/// OS commit the node runs) from a graph served on loopback, then `aloftctl adm upgrade --to
/// 1.1.0` takes the next one; its OS commit goes out through the release MachineConfig and the
/// worker pool, the node reboots into it, and the release completes once the pool runs it
/// (`tests/releases.rs` covers the graph and the preconditions without agents).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_from_the_update_graph_reaches_the_node() {
    use aloft_coordinator::resources::CLUSTER_VERSION;
    use aloft_tests::update_service::{graph, UpdateService};
    let mut w = OsWorld::new(20);
    // The coordinator verifies each release against the keyring the node trusts, as one started
    // with the nodes' keyring does: both check the same signatures, one before the rollout.
    let keyring = w.key.keyring.to_string_lossy().into_owned();
    w.c.set_args(vec!["--release-keyring".into(), keyring]);
    w.c.restart();
    let (c, admin) = (&w.c, w.c.client());
    let v1 = w.commit("1");
    let mut host = w.running_host("worker-release", &v1, &["root=/dev/vda"]).await;
    let name = host.host.name.clone();
    w.pool_done_on_ssh_config(&name).await;
    let v2 = w.commit("2");
    let svc = UpdateService::start().await;
    svc.set("stable-1", graph(&[("1.0.0", &w.url(&v1)), ("1.1.0", &w.url(&v2))], &[("1.0.0", "1.1.0")], &[]));
    let cv = json!({"apiVersion": "config.openshift.io/v1", "kind": "ClusterVersion", "metadata": {"name": "version"},
        "spec": {"upstream": svc.url, "channel": "stable-1", "desiredUpdate": {"version": "1.0.0"}}});
    admin.post(&path_of(&CLUSTER_VERSION, None), &cv).await.unwrap().into_result().unwrap();
    let path = path_of(&CLUSTER_VERSION, Some("version"));
    // Plays the reboots the node asks for until the ClusterVersion satisfies `ok`.
    async fn until(c: &Coordinator, host: &mut OsHost, path: &str, what: &str, ok: impl Fn(&Value) -> bool) -> Value {
        for _ in 0..1200 {
            play_reboots(c, [&mut *host]);
            let v = c.client().get(path).await.unwrap().into_result().unwrap();
            if ok(&v) {
                return v;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        panic!("{what}: {}\n{}", c.client().get(path).await.unwrap().body, host.host.log());
    }
    let completed = |version: &'static str| {
        move |v: &Value| {
            v.pointer("/status/history/0").is_some_and(|h| h["state"] == "Completed" && h["version"] == version)
        }
    };
    let v = until(c, &mut host, &path, "1.0.0 completed", |v| {
        completed("1.0.0")(v) && v.pointer("/status/availableUpdates/0/version").is_some_and(|x| x == "1.1.0")
    })
    .await;
    assert_eq!(v["status"]["desired"]["image"], w.url(&v1).as_str());
    assert_eq!(testkit::deployment_order(&host.sysroot()).unwrap()[0], v1, "still on v1");

    let out = c.aloftctl(&["adm", "upgrade", "--to", "1.1.0"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    // While the node updates, Progressing says how far the fleet is.
    let v = until(c, &mut host, &path, "Progressing towards 1.1.0", |v| {
        v["status"]["conditions"].as_array().into_iter().flatten().any(|c| {
            c["type"] == "Progressing"
                && c["status"] == "True"
                && c["message"].as_str().is_some_and(|m| m.starts_with("Working towards 1.1.0: 0 of 1 nodes updated"))
        })
    })
    .await;
    assert_eq!(v["status"]["history"][0]["state"], "Partial");
    let metrics = String::from_utf8_lossy(&c.aloftctl(&["get", "--raw", "/metrics"]).stdout).to_string();
    assert!(metrics.contains("aloft_cluster_version_progressing_seconds{version=\"1.1.0\"} "), "{metrics}");
    host.reboot_when_asked(c, "the release's OS update").await;
    let v = until(c, &mut host, &path, "1.1.0 completed", completed("1.1.0")).await;
    assert_eq!(testkit::deployment_order(&host.sysroot()).unwrap()[0], v2, "the node runs the release's commit");
    assert_eq!(v["status"]["history"][1]["version"], "1.0.0");
    let verified: Vec<&Value> = (0..2).map(|i| &v["status"]["history"][i]["verified"]).collect();
    assert_eq!(verified, [&json!(true), &json!(true)], "both releases verified: {}", v["status"]["history"]);
    let (config, _) = wait_state(c, &name, "Done", true, "Done on the release").await;
    assert!(config.starts_with("rendered-worker-"), "{config}");
}
