//! A fleet on sandboxed hosts: a real coordinator and three real `aloft-agent` processes, each on
//! its own root directory with its own private dbus-daemon serving the test systemd/logind (the
//! one boundary that cannot run here; the bus, the agent binary, HTTPS and the store are real).
//! MachineConfigs go to the worker pool; every node must reach Done with the right bytes, modes
//! and unit calls, and a rebootless change must not reboot anything.

use aloft_api::annotations as ann;
use aloft_coordinator::resources::{MACHINE_CONFIG, MACHINE_CONFIG_POOL, NODE};
use aloft_tests::sandbox::{converge, Host};
use aloft_tests::{bin, eventually, path_of, testdata, Coordinator};
use serde_json::{json, Value};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

fn yaml(path: &Path) -> Value {
    yaml_serde::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn mode(p: &Path) -> u32 {
    std::fs::metadata(p).unwrap().permissions().mode() & 0o7777
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_agents_apply_machine_configs_from_the_pool() {
    let c = Coordinator::start();
    let admin = c.client();
    let bootstrap = c.create_token("fleet", "bootstrap");
    let token_file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(token_file.path(), &bootstrap).unwrap();

    let mut hosts = Vec::new();
    for i in 0..3 {
        let mut h = Host::new(&format!("worker-{i}")).await;
        h.start_agent(&c, token_file.path());
        hosts.push(h);
    }
    // Enrolled, Ready, and reporting Done with no config yet.
    eventually(Duration::from_secs(120), "three nodes to enroll", || {
        let admin = admin.clone();
        async move {
            let list = admin.get(&path_of(&NODE, None)).await?.into_result()?;
            let ready = list["items"]
                .as_array()
                .map(|items| {
                    items
                        .iter()
                        .filter(|n| {
                            n.pointer("/metadata/annotations").and_then(|a| a.get(ann::STATE)) == Some(&json!("Done"))
                        })
                        .count()
                })
                .unwrap_or(0);
            Ok((ready == 3).then_some(()))
        }
    })
    .await;

    // OpenShift's worker pool, with room to update all three at once, and its SSH config.
    let mut pool = yaml(&testdata().join("mco/bootstrap/worker.machineconfigpool.yaml"));
    pool["spec"]["maxUnavailable"] = json!(3);
    admin.post(&path_of(&MACHINE_CONFIG_POOL, None), &pool).await.unwrap().into_result().unwrap();
    let ssh = yaml(&testdata().join("mco/bootstrap/99_openshift-machineconfig_worker.yaml"));
    admin.post(&path_of(&MACHINE_CONFIG, None), &ssh).await.unwrap().into_result().unwrap();
    let first = converge(&c, &hosts, None, "every node Done on the SSH config").await;
    for h in &hosts {
        let keys = h.path("/home/core/.ssh/authorized_keys.d/ignition");
        assert_eq!(std::fs::read_to_string(&keys).unwrap().trim(), "ssh-rsa SSH-AUTHORIZED-KEY", "{}", h.log());
        assert_eq!(mode(&keys), 0o600);
        assert!(h.fake.reboots().is_empty(), "SSH keys are rebootless (policy None): {:?}", h.fake.call_strings());
    }

    // A rebootless change by policy: /etc/containers/policy.json reloads crio, nothing reboots.
    for h in &hosts {
        h.fake.clear_calls();
    }
    let policy = json!({
        "apiVersion": "machineconfiguration.openshift.io/v1", "kind": "MachineConfig",
        "metadata": {"name": "50-worker-policy", "labels": {ann::ROLE_LABEL: "worker"}},
        "spec": {"config": {"ignition": {"version": "3.4.0"}, "storage": {"files": [
            {"path": "/etc/containers/policy.json", "mode": 384, "overwrite": true,
             "contents": {"source": "data:,%7B%22default%22%3A%5B%7B%22type%22%3A%22insecureAcceptAnything%22%7D%5D%7D"}}]}}},
    });
    admin.post(&path_of(&MACHINE_CONFIG, None), &policy).await.unwrap().into_result().unwrap();
    let second = converge(&c, &hosts, Some(&first), "every node Done on the policy.json config").await;
    assert_ne!(first, second);
    for h in &hosts {
        let f = h.path("/etc/containers/policy.json");
        assert_eq!(std::fs::read_to_string(&f).unwrap(), r#"{"default":[{"type":"insecureAcceptAnything"}]}"#);
        assert_eq!(mode(&f), 0o600);
        let calls = h.fake.call_strings();
        assert!(calls.iter().any(|c| c.starts_with("ReloadUnit(crio.service")), "{}: {calls:?}", h.name);
        assert!(h.fake.reboots().is_empty(), "{}: a rebootless change rebooted: {calls:?}", h.name);
    }

    // Drift: a managed file edited by hand makes the node Degraded with MCO's message; putting
    // the bytes back makes it Done again.
    let edited = hosts[0].path("/etc/containers/policy.json");
    let original = std::fs::read(&edited).unwrap();
    std::fs::write(&edited, b"{}").unwrap();
    let name0 = hosts[0].name.clone();
    let reason = eventually(Duration::from_secs(120), "worker-0 to report the drift", || {
        let admin = admin.clone();
        let name0 = name0.clone();
        async move {
            let n = admin.get(&path_of(&NODE, Some(&name0))).await?.into_result()?;
            let a = |k: &str| {
                n.pointer("/metadata/annotations")
                    .and_then(|x| x.get(k))
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string()
            };
            Ok((a(ann::STATE) == "Degraded").then(|| a(ann::REASON)))
        }
    })
    .await;
    assert_eq!(
        reason,
        format!("unexpected on-disk state validating against {second}: content mismatch for file \"/etc/containers/policy.json\"")
    );
    std::fs::write(&edited, &original).unwrap();
    converge(&c, &hosts, None, "worker-0 Done again after the repair").await;

    // A unit with no policy needs a reboot: one node at a time (maxUnavailable 1), each asks
    // logind to reboot; the test plays the reboot (new boot id, agent restarted).
    admin
        .patch(
            &path_of(&MACHINE_CONFIG_POOL, Some("worker")),
            "application/merge-patch+json",
            &json!({"spec": {"maxUnavailable": 1}}),
        )
        .await
        .unwrap()
        .into_result()
        .unwrap();
    let unit = json!({
        "apiVersion": "machineconfiguration.openshift.io/v1", "kind": "MachineConfig",
        "metadata": {"name": "60-worker-hello", "labels": {ann::ROLE_LABEL: "worker"}},
        "spec": {"config": {"ignition": {"version": "3.4.0"}, "systemd": {"units": [
            {"name": "hello.service", "enabled": true,
             "contents": "[Unit]\nDescription=hello\n[Service]\nExecStart=/bin/true\n[Install]\nWantedBy=multi-user.target\n"}]}}},
    });
    // Every version of every Node from here on: the agents' Done reports must come back
    // uncordoned in the same write (the pool has no drain hooks, so the pick granted it).
    let listed = admin.get(&path_of(&NODE, None)).await.unwrap().into_result().unwrap();
    let from = listed["metadata"]["resourceVersion"].as_str().unwrap().to_string();
    let mut versions =
        aloft_tests::WatchStream::open(&admin, &format!("{}?watch=true&resourceVersion={from}", path_of(&NODE, None)))
            .await
            .unwrap();
    admin.post(&path_of(&MACHINE_CONFIG, None), &unit).await.unwrap().into_result().unwrap();
    let mut rebooted = 0;
    let mut max_cordoned = 0;
    // Up to four minutes: slow only on a loaded machine.
    for round in 0..800 {
        let mut cordoned = 0;
        for n in admin.get(&path_of(&NODE, None)).await.unwrap().into_result().unwrap()["items"].as_array().unwrap() {
            if n.pointer("/spec/unschedulable") == Some(&json!(true)) {
                cordoned += 1;
            }
        }
        max_cordoned = max_cordoned.max(cordoned);
        for h in hosts.iter_mut() {
            let asked = h.fake.reboots().len();
            assert!(asked <= 1, "{} asked for {asked} reboots in one boot", h.name);
            if asked == 1 {
                // Until the reboot the Node names the config the node runs, as MCO moves
                // currentConfig only at Done (it named the new one while Working).
                let n = admin.get(&path_of(&NODE, Some(&h.name))).await.unwrap().into_result().unwrap();
                assert_eq!(node_annotation(&n, ann::STATE), "Working", "{n}");
                assert_eq!(node_annotation(&n, ann::CURRENT_CONFIG), second, "before its reboot: {n}");
                // Play the reboot: the host comes back with a new boot id and a fresh agent.
                h.stop_agent();
                h.fake.clear_calls();
                h.reboot(&c, token_file.path(), &format!("boot-2-{}-{round}", h.name));
                rebooted += 1;
            }
        }
        if rebooted == 3 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    assert_eq!(rebooted, 3, "each node reboots once for the new unit");
    assert!(max_cordoned <= 1, "never more than maxUnavailable=1 node cordoned at once (saw {max_cordoned})");
    let third = converge(&c, &hosts, Some(&second), "every node Done on the unit config after its reboot").await;
    assert_ne!(third, second);
    for h in &hosts {
        assert!(h.path("/etc/systemd/system/hello.service").exists(), "{}", h.log());
        assert!(
            h.path("/etc/systemd/system/multi-user.target.wants/hello.service").is_symlink(),
            "enabled through systemd: {}",
            h.log()
        );
        let node = admin.get(&path_of(&NODE, Some(&h.name))).await.unwrap().into_result().unwrap();
        assert_ne!(node.pointer("/spec/unschedulable"), Some(&json!(true)), "uncordoned after Done");
        assert_eq!(node_annotation(&node, ann::UNCORDON_AT_DONE), "", "no grant left standing: {node}");
    }
    let (mut done_versions, mut cordoned_picks) = (0, 0);
    while let Ok(Some(ev)) = versions.next(Duration::from_millis(500)).await {
        let n = &ev["object"];
        let cordoned = n.pointer("/spec/unschedulable") == Some(&json!(true));
        let on = |k| node_annotation(n, k);
        if on(ann::DESIRED_CONFIG) == third && on(ann::UNCORDON_AT_DONE) == third && cordoned {
            cordoned_picks += 1;
        }
        if on(ann::STATE) == "Done" && on(ann::CURRENT_CONFIG) == third {
            done_versions += 1;
            assert!(!cordoned, "a Done report on {third} written still cordoned: {n}");
        }
    }
    assert!(cordoned_picks >= 3, "every node's pick cordoned it and granted the uncordon ({cordoned_picks})");
    assert!(done_versions >= 3, "every node's Done report was seen ({done_versions})");

    // Enablement drift: `systemctl disable` removes only the link in multi-user.target.wants;
    // the drift watch sees it (well before the 10-minute check), and `enable` repairs it.
    let link = hosts[0].path("/etc/systemd/system/multi-user.target.wants/hello.service");
    let target = std::fs::read_link(&link).unwrap();
    std::fs::remove_file(&link).unwrap();
    let reason = eventually(Duration::from_secs(60), "worker-0 to report the disabled unit", || {
        let admin = admin.clone();
        let name0 = name0.clone();
        async move {
            let n = admin.get(&path_of(&NODE, Some(&name0))).await?.into_result()?;
            Ok((node_annotation(&n, ann::STATE) == "Degraded").then(|| node_annotation(&n, ann::REASON)))
        }
    })
    .await;
    assert_eq!(
        reason,
        format!(
            "unexpected on-disk state validating against {third}: unit \"hello.service\" is not enabled: no symlink to it in /etc/systemd/system/*.wants"
        )
    );
    std::os::unix::fs::symlink(&target, &link).unwrap();
    converge(&c, &hosts, None, "worker-0 Done again after the unit is enabled again").await;

    // `aloft-agent status --json` reports the same.
    let out = agent_status(&hosts[0]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let st: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(st["state"], "Done");
    assert_eq!(st["currentConfig"], third.as_str());
}

/// `aloft-agent status --json` of the agent on `h` (its bus, its root).
fn agent_status(h: &Host) -> std::process::Output {
    Command::new(bin("aloft-agent"))
        .args(["status", "--json", "--bus-address", &h.bus_address])
        .arg("--root")
        .arg(h.root.path())
        .output()
        .unwrap()
}

/// The agent's `/metrics` at `addr`, over plain HTTP/1.1 on loopback (retried while the agent
/// starts).
fn scrape_metrics(addr: std::net::SocketAddr) -> String {
    use std::io::{Read, Write};
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        match std::net::TcpStream::connect(addr) {
            Ok(mut s) => {
                write!(s, "GET /metrics HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").unwrap();
                let mut out = String::new();
                s.read_to_string(&mut out).unwrap();
                assert!(out.starts_with("HTTP/1.1 200"), "{out}");
                return out;
            }
            Err(e) if std::time::Instant::now() < deadline => {
                eprintln!("agent metrics at {addr} not yet: {e}");
                std::thread::sleep(Duration::from_millis(200));
            }
            Err(e) => panic!("agent metrics at {addr}: {e}"),
        }
    }
}

fn node_annotation(node: &Value, key: &str) -> String {
    node.pointer("/metadata/annotations").and_then(|a| a.get(key)).and_then(Value::as_str).unwrap_or("").to_string()
}

/// A drained update stops the units wanted by aloft-workloads.target after the drain and before
/// the files change, and starts the target again after; a workload that does not stop in time
/// leaves the node Degraded with a reason naming it, and the files untouched.
#[tokio::test]
async fn workloads_stop_around_a_drained_update() {
    let c = Coordinator::start();
    let admin = c.client();
    let token_file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(token_file.path(), c.create_token("fleet", "bootstrap")).unwrap();
    let mut h = Host::new("worker-w").await;
    // Two workloads hang off the target, as `systemctl enable` of a WantedBy=aloft-workloads.target unit leaves them.
    let wants = h.path("/etc/systemd/system/aloft-workloads.target.wants");
    std::fs::create_dir_all(&wants).unwrap();
    for u in ["app.service", "db.service"] {
        std::os::unix::fs::symlink(format!("/usr/lib/systemd/system/{u}"), wants.join(u)).unwrap();
    }
    h.extra_args = vec!["--workload-stop-timeout-seconds".into(), "3".into()];
    h.start_agent(&c, token_file.path());
    // Files under /etc/app drain the node and need nothing else (no reboot).
    admin
        .post(
            "/apis/operator.openshift.io/v1/machineconfigurations",
            &json!({
            "apiVersion": "operator.openshift.io/v1", "kind": "MachineConfiguration", "metadata": {"name": "cluster"},
            "spec": {"nodeDisruptionPolicy": {"files": [{"path": "/etc/app", "actions": [{"type": "Drain"}]}]}}}),
        )
        .await
        .unwrap()
        .into_result()
        .unwrap();
    let pool = yaml(&testdata().join("mco/bootstrap/worker.machineconfigpool.yaml"));
    admin.post(&path_of(&MACHINE_CONFIG_POOL, None), &pool).await.unwrap().into_result().unwrap();
    let mc = |name: &str, data: &str| {
        json!({"apiVersion": "machineconfiguration.openshift.io/v1", "kind": "MachineConfig",
            "metadata": {"name": name, "labels": {ann::ROLE_LABEL: "worker"}},
            "spec": {"config": {"ignition": {"version": "3.4.0"}, "storage": {"files": [
                {"path": "/etc/app/app.conf", "mode": 420, "contents": {"source": format!("data:,{data}")}}]}}}})
    };
    admin.post(&path_of(&MACHINE_CONFIG, None), &mc("50-worker-app", "one")).await.unwrap().into_result().unwrap();
    let hosts = [h];
    let first = converge(&c, &hosts, None, "the node Done on the first app config").await;
    let h = &hosts[0];
    assert_eq!(std::fs::read_to_string(h.path("/etc/app/app.conf")).unwrap(), "one");
    let calls = h.fake.call_strings();
    let pos = |prefix: &str| calls.iter().position(|c| c.starts_with(prefix));
    let (stop_app, stop_db, start) =
        (pos("StopUnit(app.service"), pos("StopUnit(db.service"), pos("StartUnit(aloft-workloads.target"));
    assert!(stop_app.is_some() && stop_db.is_some(), "both workloads stopped: {calls:?}");
    assert!(start > stop_app && start > stop_db, "the target started again after the stops: {calls:?}");
    assert!(h.fake.reboots().is_empty(), "{calls:?}");

    // A workload that hangs on stop: the update gives up after the timeout, names it, and the
    // file keeps its old bytes.
    h.fake.clear_calls();
    h.fake.hang_jobs_of("db.service");
    let app_path = path_of(&MACHINE_CONFIG, Some("50-worker-app"));
    let mut two = mc("50-worker-app", "two");
    two["metadata"]["resourceVersion"] =
        admin.get(&app_path).await.unwrap().body["metadata"]["resourceVersion"].clone();
    admin.put(&app_path, &two).await.unwrap().into_result().unwrap();
    let reason = eventually(Duration::from_secs(120), "the node Degraded by a hung workload", || {
        let admin = admin.clone();
        let first = first.clone();
        async move {
            let node = admin.get(&path_of(&NODE, Some("worker-w"))).await?.into_result()?;
            let desired = node_annotation(&node, ann::DESIRED_CONFIG);
            Ok((desired != first && node_annotation(&node, ann::STATE) == "Degraded")
                .then(|| (node_annotation(&node, ann::REASON), node_annotation(&node, ann::FAILED_CONFIG), desired)))
        }
    })
    .await;
    let (reason, failed_on, desired) = reason;
    assert_eq!(reason, "workloads did not stop within 3 seconds (still stopping: db.service)");
    assert_eq!(failed_on, desired, "the failure names the config it is about");
    assert_eq!(std::fs::read_to_string(h.path("/etc/app/app.conf")).unwrap(), "one");
    // A Degraded node retries with backoff (5 s, 10 s, ...), not every time its own report
    // changes the Node: within 25 s at most a few attempts (each one also waits 3 s for the stop).
    let tries = || h.log().matches("update planned").count();
    let before = tries();
    tokio::time::sleep(Duration::from_secs(25)).await;
    let during = tries() - before;
    assert!(during <= 3, "{during} update attempts in 25 s while Degraded: no backoff");
    assert_eq!(std::fs::read_to_string(h.path("/etc/app/app.conf")).unwrap(), "one");
}

/// One host whose agent runs against `c` with the worker pool and one MachineConfig holding
/// the file `path` (contents `contents`) under a disruption policy of `action` for it; returns
/// the host (agent running), the bootstrap token file and the rendered config it reached Done on.
async fn one_node_on_a_file(
    c: &Coordinator,
    name: &str,
    path: &str,
    contents: &str,
    action: &str,
) -> (Host, tempfile::NamedTempFile, String) {
    let admin = c.client();
    let token_file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(token_file.path(), c.create_token("fleet", "bootstrap")).unwrap();
    let mut h = Host::new(name).await;
    h.start_agent(c, token_file.path());
    let policy = json!({"apiVersion": "operator.openshift.io/v1", "kind": "MachineConfiguration",
        "metadata": {"name": "cluster"},
        "spec": {"nodeDisruptionPolicy": {"files": [{"path": path, "actions": [{"type": action}]}]}}});
    admin.post("/apis/operator.openshift.io/v1/machineconfigurations", &policy).await.unwrap().into_result().unwrap();
    let pool = yaml(&testdata().join("mco/bootstrap/worker.machineconfigpool.yaml"));
    admin.post(&path_of(&MACHINE_CONFIG_POOL, None), &pool).await.unwrap().into_result().unwrap();
    let mc = json!({"apiVersion": "machineconfiguration.openshift.io/v1", "kind": "MachineConfig",
        "metadata": {"name": format!("50-{name}"), "labels": {ann::ROLE_LABEL: "worker"}},
        "spec": {"config": {"ignition": {"version": "3.4.0"}, "storage": {"files": [
            {"path": path, "mode": 420, "contents": {"source": format!("data:,{contents}")}}]}}}});
    admin.post(&path_of(&MACHINE_CONFIG, None), &mc).await.unwrap().into_result().unwrap();
    let hosts = [h];
    let target = converge(c, &hosts, None, "the node Done on the config").await;
    let [h] = hosts;
    (h, token_file, target)
}

/// An agent that stopped after its drained update was applied but before it asked to be
/// uncordoned (here: the phase an older agent saved before that request) finishes with Done and
/// the uncordon request in one report, and the coordinator uncordons: the node does not stay
/// cordoned with nobody asking.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_agent_never_leaves_a_done_node_cordoned() {
    let c = Coordinator::start();
    let admin = c.client();
    // The file drains the node and needs nothing else (no reboot).
    let (h, token_file, target) = one_node_on_a_file(&c, "worker-u", "/etc/u.conf", "u", "Drain").await;
    let mut hosts = [h];

    // The state a crash leaves: drained and acknowledged, cordoned, still Working, the config
    // applied and saved on disk, and the agent's phase past the apply.
    hosts[0].stop_agent();
    let node_path = path_of(&NODE, Some("worker-u"));
    let drain = format!("drain-{target}");
    let patch = json!({"spec": {"unschedulable": true}, "metadata": {"annotations": {
        ann::DESIRED_DRAIN: drain, ann::LAST_APPLIED_DRAIN: drain, ann::STATE: "Working"}}});
    admin.patch(&node_path, "application/merge-patch+json", &patch).await.unwrap().into_result().unwrap();
    let phase = json!({"phase": "uncordoning", "target": target, "request": format!("uncordon-{target}")});
    std::fs::write(hosts[0].path("/var/lib/aloft/phase.json"), phase.to_string()).unwrap();
    hosts[0].start_agent(&c, token_file.path());

    converge(&c, &hosts, None, "Done and uncordoned after the restart").await;
    let node = admin.get(&node_path).await.unwrap().into_result().unwrap();
    assert_eq!(node_annotation(&node, ann::LAST_APPLIED_DRAIN), format!("uncordon-{target}"), "{node}");
    assert_ne!(node.pointer("/spec/unschedulable"), Some(&json!(true)), "{node}");
}

/// An agent in this process on `h`'s root and credential (its own process stopped), with metrics:
/// what the test reads of it, without a start-up check (which would see what the test made).
async fn in_process_agent(
    c: &Coordinator,
    h: &Host,
    name: &str,
) -> (aloft_agent::daemon::Agent, std::sync::Arc<aloft_agent::metrics::Metrics>) {
    let root = aloft_agent::host::Root::new(h.root.path());
    let (ca, labels) = (c.ca_pem(), Default::default());
    let enrollment = aloft_agent::enroll::Enrollment {
        server: c.url(),
        ca_pem: Some(&ca),
        bootstrap_token: None,
        node_name: name,
        labels: &labels,
        status: None,
    };
    let cred = aloft_agent::enroll::ensure(&root, &enrollment).await.unwrap();
    let client = aloft_client::Client::new(&aloft_client::ClientConfig {
        server: cred.server,
        ca_pem: Some(c.ca_pem()),
        token: Some(cred.token),
    })
    .unwrap();
    let api = aloft_agent::coordinator::NodeApi::new(client, name);
    let services = aloft_agent::engine::connect_services(Some(&h.bus_address)).await.unwrap();
    let mut agent = aloft_agent::daemon::Agent::new(root, api, services, Duration::from_secs(60)).unwrap();
    assert!(matches!(agent.phase(), aloft_agent::state::Phase::Idle), "{:?}", agent.phase());
    let metrics = std::sync::Arc::new(aloft_agent::metrics::Metrics::new(&aloft_api::build_info!()));
    agent.metrics = Some(metrics.clone());
    (agent, metrics)
}

/// Each update the agent finishes is counted and timed (`aloft_agent_apply_total{result}`,
/// `aloft_agent_apply_duration_seconds`): nothing recorded them, and the series never moved.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_counts_and_times_its_updates() {
    let c = Coordinator::start();
    let admin = c.client();
    let (mut h, _token_file, first) = one_node_on_a_file(&c, "worker-m", "/etc/m.conf", "m", "None").await;
    h.stop_agent();
    let (mut agent, metrics) = in_process_agent(&c, &h, "worker-m").await;
    let running = tokio::spawn(async move { agent.run_loop().await });
    let mc = json!({"apiVersion": "machineconfiguration.openshift.io/v1", "kind": "MachineConfig",
        "metadata": {"name": "50-worker-m", "labels": {ann::ROLE_LABEL: "worker"}},
        "spec": {"config": {"ignition": {"version": "3.4.0"}, "storage": {"files": [
            {"path": "/etc/m.conf", "mode": 420, "contents": {"source": "data:,m2"}}]}}}});
    let path = path_of(&MACHINE_CONFIG, Some("50-worker-m"));
    let mut stored = admin.get(&path).await.unwrap().into_result().unwrap();
    stored["spec"] = mc["spec"].clone();
    admin.put(&path, &stored).await.unwrap().into_result().unwrap();
    eventually(Duration::from_secs(60), "worker-m Done on the new config", || async {
        let n = node_of(&c, "worker-m").await?;
        let (current, state) = (node_annotation(&n, ann::CURRENT_CONFIG), node_annotation(&n, ann::STATE));
        Ok((current != first && state == "Done").then_some(()))
    })
    .await;
    running.abort();
    let text = metrics.encode().unwrap();
    assert!(text.lines().any(|l| l == "aloft_agent_apply_total{result=\"success\"} 1"), "{text}");
    assert!(text.lines().any(|l| l == "aloft_agent_apply_duration_seconds_count 1"), "{text}");
}

/// An edit made while no drift watch was armed (here: between the agent's last look at the disk
/// and the first watch of a fresh run loop; in CI it was the moment between a Done report and
/// the watch for the next Node change) is found as soon as the watch is armed, not at the
/// 10-minute check. The second agent runs in this process on the first one's root and
/// credential, so its start-up check (which would also catch the edit) is left out on purpose.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_edit_made_before_the_drift_watch_is_armed_is_found() {
    let c = Coordinator::start();
    let admin = c.client();
    // The file needs no reboot, so the first agent stays up until the test stops it.
    let (mut h, _token_file, target) = one_node_on_a_file(&c, "worker-w", "/etc/w.conf", "w", "None").await;
    h.stop_agent();
    std::fs::write(h.path("/etc/w.conf"), "edited by hand").unwrap();

    let (mut agent, metrics) = in_process_agent(&c, &h, "worker-w").await;
    let running = tokio::spawn(async move { agent.run_loop().await });

    // Well under the 5-minute wait for a Node change and the 10-minute periodic check.
    let reason = eventually(Duration::from_secs(60), "worker-w to report the edit", || {
        let admin = admin.clone();
        async move {
            let n = admin.get(&path_of(&NODE, Some("worker-w"))).await?.into_result()?;
            Ok((node_annotation(&n, ann::STATE) == "Degraded")
                .then(|| (node_annotation(&n, ann::REASON), node_annotation(&n, ann::FAILED_CONFIG))))
        }
    })
    .await;
    running.abort();
    let (reason, failed_on) = reason;
    assert_eq!(failed_on, target, "drift is a failure on the config the node runs");
    assert_eq!(
        reason,
        format!("unexpected on-disk state validating against {target}: content mismatch for file \"/etc/w.conf\"")
    );
    // The state series is MCO's state, as on the Node (the phase has its own series).
    let text = metrics.encode().unwrap();
    for line in ["aloft_agent_state{state=\"Degraded\"} 1", "aloft_agent_state{state=\"Done\"} 0"] {
        assert!(text.lines().any(|l| l == line), "missing {line:?} in\n{text}");
    }
    assert!(text.lines().any(|l| l == "aloft_agent_phase{phase=\"degraded\"} 1"), "{text}");
}

/// The Node's annotation `key` ("" when absent).
async fn annotation_of(c: &Coordinator, node: &str, key: &str) -> anyhow::Result<String> {
    Ok(node_annotation(&node_of(c, node).await?, key))
}

/// The Node `node`, in one read: annotations taken from it agree with each other (read one by
/// one, an agent's report between two reads mixed two states: a Degraded with an empty reason).
async fn node_of(c: &Coordinator, node: &str) -> anyhow::Result<Value> {
    c.client().get(&path_of(&NODE, Some(node))).await?.into_result()
}

/// For a node made by [`one_node_on_a_file`] with the file `path`: the next change of the file
/// reboots, the test logind refuses every reboot (the calls recorded from here), and the file
/// changes (its MachineConfig `50-<node>` rewritten).
async fn change_needing_a_refused_reboot(c: &Coordinator, h: &Host, path: &str) {
    h.fake.fail_calls("Reboot", None);
    change_needing_a_reboot(c, h, path).await;
}

/// `h`'s file at `path` changed (its MachineConfig `50-<name>`), with a policy that reboots for
/// it; the calls recorded so far forgotten.
async fn change_needing_a_reboot(c: &Coordinator, h: &Host, path: &str) {
    let admin = c.client();
    let policy =
        json!({"spec": {"nodeDisruptionPolicy": {"files": [{"path": path, "actions": [{"type": "Reboot"}]}]}}});
    let policy_path = "/apis/operator.openshift.io/v1/machineconfigurations/cluster";
    admin.patch(policy_path, "application/merge-patch+json", &policy).await.unwrap().into_result().unwrap();
    h.fake.clear_calls();
    let mc_path = path_of(&MACHINE_CONFIG, Some(&format!("50-{}", h.name)));
    let mut mc = admin.get(&mc_path).await.unwrap().into_result().unwrap();
    mc["spec"]["config"]["storage"]["files"][0]["contents"]["source"] = json!("data:,two");
    admin.put(&mc_path, &mc).await.unwrap().into_result().unwrap();
}

/// A reboot that logind refuses (an inhibitor lock, logind not answering) leaves the update
/// waiting for its reboot, not given up: the Node is Degraded naming the refusal and still on
/// the config the node runs, while the agent asks again with backoff, as MCO's daemon retries
/// its reboot; once logind lets the reboot through the Node is Working again, and after the
/// reboot Done on the new config. (The node stayed Degraded on a config it had not booted into,
/// asking nothing more, and a reboot by an admin did not clear it.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_reboot_is_asked_again_and_the_update_finishes() {
    let c = Coordinator::start();
    let (mut h, token_file, first) = one_node_on_a_file(&c, "worker-rb", "/etc/rb.conf", "one", "None").await;
    // Its metrics on a free loopback port, from the next start (the only agent of this test).
    h.stop_agent();
    h.metrics_listen = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().to_string();
    h.start_agent(&c, token_file.path());
    let mut hosts = [h];
    change_needing_a_refused_reboot(&c, &hosts[0], "/etc/rb.conf").await;
    let reason = eventually(Duration::from_secs(60), "worker-rb Degraded by the refused reboot", || async {
        let n = node_of(&c, "worker-rb").await?;
        let (state, reason) = (node_annotation(&n, ann::STATE), node_annotation(&n, ann::REASON));
        Ok((state == "Degraded").then_some(reason))
    })
    .await;
    assert!(reason.starts_with("reboot failed (retrying): ") && reason.contains("injected failure"), "{reason}");
    assert_eq!(annotation_of(&c, "worker-rb", ann::CURRENT_CONFIG).await.unwrap(), first, "not rebooted yet");
    assert_eq!(std::fs::read_to_string(hosts[0].path("/etc/rb.conf")).unwrap(), "two", "applied but for the reboot");
    eventually(Duration::from_secs(30), "the reboot asked for again", || async {
        Ok((hosts[0].reboots_asked() >= 2).then_some(()))
    })
    .await;
    assert!(hosts[0].fake.reboots().is_empty(), "no reboot went through yet");
    // The agent counts a refusal once logind's answer reaches it, after the fake recorded the
    // call: read until the count catches up.
    let metrics = hosts[0].metrics_listen.parse().unwrap();
    eventually(Duration::from_secs(30), "each refusal counted", || async move {
        let failures = scrape_metrics(metrics);
        let counted = failures
            .lines()
            .find_map(|l| l.strip_prefix("aloft_agent_reboot_failures_total "))
            .and_then(|v| v.parse::<f64>().ok());
        Ok(counted.is_some_and(|n| n >= 2.0).then_some(()))
    })
    .await;
    let out = agent_status(&hosts[0]);
    let st: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(st["state"], "Degraded", "{st}");
    assert!(st["progress"].as_str().unwrap_or("").starts_with("rebooting"), "the phase stays: {st}");

    hosts[0].fake.clear_failures();
    eventually(Duration::from_secs(90), "the reboot let through", || async {
        Ok((hosts[0].fake.reboots().len() == 1).then_some(()))
    })
    .await;
    eventually(Duration::from_secs(30), "worker-rb Working again while it reboots", || async {
        let n = node_of(&c, "worker-rb").await?;
        let (state, reason) = (node_annotation(&n, ann::STATE), node_annotation(&n, ann::REASON));
        Ok((state == "Working" && reason.is_empty()).then_some(()))
    })
    .await;
    hosts[0].reboot(&c, token_file.path(), "boot-2-worker-rb");
    let second = converge(&c, &hosts, Some(&first), "worker-rb Done on the new config after its reboot").await;
    assert_ne!(second, first);
    assert_eq!(hosts[0].fake.reboots().len(), 1, "{:?}", hosts[0].fake.call_strings());
}

/// The agent's run loop tries a failed step again as soon as the node's watch reaches the
/// coordinator again, not only after its backoff: what makes a coordinator restart cost a
/// node's turn the outage rather than 5-60 s. The step here fails on a refused reboot until
/// the backoff has grown to 20 s (refusals at about 0, 5 and 15 s); then the coordinator
/// restarts, and the next request comes with the watch's reconnect, logged, where without it
/// it would come 20 s after the third.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_step_is_tried_again_when_the_coordinator_answers_again() {
    let mut c = Coordinator::start_with(aloft_tests::Options { fixed_port: true, ..Default::default() });
    let (h, _token_file, _first) = one_node_on_a_file(&c, "worker-rc", "/etc/rc.conf", "one", "None").await;
    change_needing_a_refused_reboot(&c, &h, "/etc/rc.conf").await;
    eventually(Duration::from_secs(60), "three refused reboots (the next wait 20 s)", || async {
        Ok((h.reboots_asked() >= 3).then_some(()))
    })
    .await;
    let before = h.reboots_asked();
    const RETRIED: &str = "reached the coordinator (its watch connected); retrying now";
    assert!(!h.log().contains(RETRIED), "no reconnect yet:\n{}", h.log());
    tokio::task::block_in_place(|| c.restart());
    // Well inside the 20 s the backoff has left: the watch retries after 0.4 s, then 0.8 s.
    eventually(Duration::from_secs(18), "the reboot asked for again with the watch's reconnect", || async {
        Ok((h.reboots_asked() > before && h.log().contains(RETRIED)).then_some(()))
    })
    .await;
}

/// A reboot logind took but that does not happen (the shutdown cancelled, or stuck before it
/// stopped the agent) does not leave the node Working for good: once the reboot timeout has
/// passed with the host still up, the Node is Degraded saying so and the agent asks again; the
/// node stays Degraded until it reboots, then is Done on the new config.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reboot_that_does_not_happen_is_said_and_asked_again() {
    let c = Coordinator::start();
    let admin = c.client();
    let (mut h, token_file, first) = one_node_on_a_file(&c, "worker-rt", "/etc/rt.conf", "one", "None").await;
    h.stop_agent();
    h.extra_args = vec!["--reboot-timeout-seconds".into(), "3".into()];
    h.start_agent(&c, token_file.path());
    let mut hosts = [h];
    let policy = json!({"spec": {"nodeDisruptionPolicy": {"files": [{"path": "/etc/rt.conf", "actions": [{"type": "Reboot"}]}]}}});
    let policy_path = "/apis/operator.openshift.io/v1/machineconfigurations/cluster";
    admin.patch(policy_path, "application/merge-patch+json", &policy).await.unwrap().into_result().unwrap();
    let mc_path = path_of(&MACHINE_CONFIG, Some("50-worker-rt"));
    let mut mc = admin.get(&mc_path).await.unwrap().into_result().unwrap();
    mc["spec"]["config"]["storage"]["files"][0]["contents"]["source"] = json!("data:,two");
    admin.put(&mc_path, &mc).await.unwrap().into_result().unwrap();
    // The fake logind takes each request and reboots nothing: the host stays up.
    eventually(Duration::from_secs(60), "the reboot asked for", || async {
        Ok((hosts[0].fake.reboots().len() == 1).then_some(()))
    })
    .await;
    // Working until the timeout (Degraded already, on a slow machine, only for the timeout).
    let state = annotation_of(&c, "worker-rt", ann::STATE).await.unwrap();
    let said = annotation_of(&c, "worker-rt", ann::REASON).await.unwrap();
    assert!(state == "Working" || said.contains("has not happened"), "{state}: {said}");
    let reason = eventually(Duration::from_secs(60), "worker-rt Degraded: the reboot did not happen", || async {
        let n = node_of(&c, "worker-rt").await?;
        let (state, reason) = (node_annotation(&n, ann::STATE), node_annotation(&n, ann::REASON));
        Ok((state == "Degraded").then_some(reason))
    })
    .await;
    assert!(reason.starts_with("the reboot logind took ") && reason.contains("has not happened"), "{reason}");
    assert_eq!(annotation_of(&c, "worker-rt", ann::CURRENT_CONFIG).await.unwrap(), first, "not rebooted yet");
    eventually(Duration::from_secs(30), "the reboot asked for again", || async {
        Ok((hosts[0].fake.reboots().len() >= 2).then_some(()))
    })
    .await;
    // Still Degraded after the second request: nothing says this one will be carried out.
    assert_eq!(annotation_of(&c, "worker-rt", ann::STATE).await.unwrap(), "Degraded");
    // The reboot at last.
    hosts[0].reboot(&c, token_file.path(), "boot-2-worker-rt");
    let second = converge(&c, &hosts, Some(&first), "worker-rt Done on the new config after its reboot").await;
    assert_ne!(second, first);
}

/// A reboot logind takes and then holds (an inhibitor in delay mode, held longer than logind's
/// `InhibitDelayMaxSec`): once the reboot timeout has passed the agent says the reboot has not
/// happened and asks again, and logind refuses that request as a shutdown already in progress.
/// The Node's reason then says that logind holds a shutdown and how to see who holds it, beside
/// logind's words (which alone read as if the reboot were under way). VM scenario e holds a real
/// one the same way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_reboot_says_logind_holds_it_and_where_to_look() {
    let c = Coordinator::start();
    let (mut h, token_file, first) = one_node_on_a_file(&c, "worker-hr", "/etc/hr.conf", "one", "None").await;
    h.stop_agent();
    h.extra_args = vec!["--reboot-timeout-seconds".into(), "2".into()];
    h.start_agent(&c, token_file.path());
    h.fake.hold_reboots();
    change_needing_a_reboot(&c, &h, "/etc/hr.conf").await;
    let reason = eventually(Duration::from_secs(60), "worker-hr Degraded: logind holds the reboot", || async {
        let n = node_of(&c, "worker-hr").await?;
        let (state, reason) = (node_annotation(&n, ann::STATE), node_annotation(&n, ann::REASON));
        Ok((state == "Degraded" && reason.contains("OperationInProgress")).then_some(reason))
    })
    .await;
    assert!(
        reason.starts_with("reboot failed (retrying): logind holds a shutdown it has not carried out")
            && reason.contains("systemd-inhibit --list")
            && reason.ends_with(
                "): asking logind: org.freedesktop.login1.OperationInProgress: \
                 There's already a shutdown or sleep operation in progress"
            ),
        "{reason}"
    );
    // The first request was taken, and said to be overdue before it was asked again.
    assert_eq!(h.fake.reboots().len(), 1, "logind took one request");
    assert!(h.reboots_asked() >= 2, "asked again: {:?}", h.fake.call_strings());
    assert!(h.log().contains("has not happened"), "the overdue reboot is said first:\n{}", h.log());
    assert_eq!(annotation_of(&c, "worker-hr", ann::CURRENT_CONFIG).await.unwrap(), first, "not rebooted yet");
    // The inhibitor lets go and the host reboots: Done on the new config.
    let mut hosts = [h];
    hosts[0].reboot(&c, token_file.path(), "boot-2-worker-hr");
    let second = converge(&c, &hosts, Some(&first), "worker-hr Done on the new config after its held reboot").await;
    assert_ne!(second, first);
}

/// An interrupted apply whose recovery fails at start (here systemd refuses every reload, so
/// neither the forward nor the rollback steps can finish) does not make the agent exit: that was
/// a crash loop under `Restart=on-failure`, with the Node still saying Done. The agent keeps
/// running, reports Degraded with the reason, retries the recovery, and once systemd works again
/// the node is back on its config and Done.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_recovery_at_start_is_degraded_not_a_crash_loop() {
    let c = Coordinator::start();
    let (mut h, token_file, target) = one_node_on_a_file(&c, "worker-r", "/etc/r.conf", "r", "None").await;
    h.stop_agent();

    // Leave the journal in RollingBack: an apply whose every daemon-reload fails.
    let root = aloft_agent::host::Root::new(h.root.path());
    let current = aloft_agent::daemon::load_current(&root).unwrap().expect("a current config");
    let mut broken = current.spec.clone();
    broken.config["systemd"] =
        json!({"units": [{"name": "x.service", "contents": "[Service]\nExecStart=/bin/true\n"}]});
    h.fake.fail_calls("Reload", None);
    let services = aloft_agent::engine::connect_services(Some(&h.bus_address)).await.unwrap();
    let journal = aloft_agent::journal::Journal::new(&root);
    let err = aloft_agent::apply::apply(&root, &journal, &current.spec, &broken, services.as_ref()).await.unwrap_err();
    assert!(matches!(err, aloft_agent::apply::ApplyError::RollbackFailed { .. }), "{err}");

    h.start_agent(&c, token_file.path());
    let reason = eventually(Duration::from_secs(60), "worker-r to report the failed recovery", || {
        let c = &c;
        async move {
            Ok((annotation_of(c, "worker-r", ann::STATE).await? == "Degraded")
                .then_some(annotation_of(c, "worker-r", ann::REASON).await?))
        }
    })
    .await;
    assert!(reason.contains("could neither be finished nor rolled back"), "{reason}");
    assert!(reason.contains("Reload"), "{reason}");
    assert!(!h.agent_exited(), "the agent exited on a failed recovery");

    h.fake.clear_failures();
    let hosts = [h];
    let back = converge(&c, &hosts, None, "worker-r Done again once the recovery succeeds").await;
    assert_eq!(back, target);
    let [mut h] = hosts;
    assert!(!h.agent_exited());
    assert!(!h.path("/etc/systemd/system/x.service").exists());
    assert!(!aloft_agent::engine::apply_unfinished(&root));
}

/// A restart in the middle of the rebootless actions makes the agent reboot to be safe (which
/// actions ran is unknown); that reboot drains first, as every reboot does in MCO: the drain
/// request is answered (cordon, budgets, hooks) before logind is asked, never a bare reboot.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reboot_after_an_interrupted_rebootless_update_drains_first() {
    let c = Coordinator::start();
    let admin = c.client();
    let (mut h, token_file, target) = one_node_on_a_file(&c, "worker-d", "/etc/d.conf", "d", "None").await;
    assert!(h.fake.reboots().is_empty(), "a rebootless update rebooted");

    // A budget that allows no node down holds the drain: the reboot must wait for it.
    let ndb = json!({"apiVersion": "aloft.dev/v1", "kind": "NodeDisruptionBudget", "metadata": {"name": "none"},
        "spec": {"selector": {}, "maxUnavailable": 0}});
    let ndb_path = path_of(&aloft_coordinator::resources::NODE_DISRUPTION_BUDGET, None);
    admin.post(&ndb_path, &ndb).await.unwrap().into_result().unwrap();

    // The state a crash while running the rebootless actions leaves.
    h.stop_agent();
    let phase = json!({"phase": "acting", "target": target});
    std::fs::write(h.path("/var/lib/aloft/phase.json"), phase.to_string()).unwrap();
    h.start_agent(&c, token_file.path());

    let hosts = [h];
    let h = &hosts[0];
    let drain = format!("drain-{target}");
    eventually(Duration::from_secs(60), "worker-d asking for its drain", || async {
        Ok((annotation_of(&c, "worker-d", ann::DESIRED_DRAIN).await? == drain).then_some(()))
    })
    .await;
    for _ in 0..10 {
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert_ne!(annotation_of(&c, "worker-d", ann::LAST_APPLIED_DRAIN).await.unwrap(), drain, "the budget holds it");
        assert!(h.fake.reboots().is_empty(), "rebooted while the budget held the drain");
    }
    admin.delete(&format!("{ndb_path}/none")).await.unwrap().into_result().unwrap();
    eventually(Duration::from_secs(60), "worker-d to ask for its reboot", || async {
        Ok((!h.fake.reboots().is_empty()).then_some(()))
    })
    .await;
    let node = admin.get(&path_of(&NODE, Some("worker-d"))).await.unwrap().into_result().unwrap();
    assert_eq!(node_annotation(&node, ann::DESIRED_DRAIN), drain, "the reboot was not preceded by a drain request");
    assert_eq!(node_annotation(&node, ann::LAST_APPLIED_DRAIN), drain, "rebooted before the drain was done");
    assert_eq!(node.pointer("/spec/unschedulable"), Some(&json!(true)), "rebooted while schedulable: {node}");
}

/// A crash after an apply wrote its files (its journal committed) and before the phase moved on
/// (still Applying): which actions the config needed is not known any more, so the restarted
/// agent drains and reboots before it reports Done, as after a crash in the actions; it must not
/// report the config applied with a reboot or a reload never made.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_apply_cut_short_after_its_files_drains_and_reboots_before_done() {
    use aloft_agent::{host::Root, state};
    let c = Coordinator::start();
    let admin = c.client();
    let (mut h, token_file, first) = one_node_on_a_file(&c, "worker-w", "/etc/w.conf", "one", "None").await;
    h.stop_agent();
    let mc_path = path_of(&MACHINE_CONFIG, Some("50-worker-w"));
    let mut mc = admin.get(&mc_path).await.unwrap().into_result().unwrap();
    mc["spec"]["config"]["storage"]["files"][0]["contents"]["source"] = json!("data:,two");
    admin.put(&mc_path, &mc).await.unwrap().into_result().unwrap();
    // The coordinator picks the node while its agent is down (it stays Ready without it).
    let target = eventually(Duration::from_secs(60), "the pick of the stopped node", || async {
        let d = annotation_of(&c, "worker-w", ann::DESIRED_CONFIG).await?;
        Ok((!d.is_empty() && d != first).then_some(d))
    })
    .await;

    // The disk as the crash leaves it, written by the agent's own code.
    let root = Root::new(h.root.path());
    aloft_tests::apply_as_the_agent(&admin, &root, &h.bus_address, &target).await;
    state::save(&root, &state::Phase::Applying { target: target.clone() }).unwrap();
    assert_eq!(std::fs::read_to_string(h.path("/etc/w.conf")).unwrap(), "two");
    assert!(h.fake.reboots().is_empty());

    h.start_agent(&c, token_file.path());
    eventually(Duration::from_secs(60), "worker-w to ask for its reboot", || async {
        Ok((!h.fake.reboots().is_empty()).then_some(()))
    })
    .await;
    let node = admin.get(&path_of(&NODE, Some("worker-w"))).await.unwrap().into_result().unwrap();
    let drain = format!("drain-{target}");
    assert_eq!(node_annotation(&node, ann::LAST_APPLIED_DRAIN), drain, "rebooted before the drain was done: {node}");
    assert_eq!(node_annotation(&node, ann::STATE), "Working", "reported before the reboot: {node}");
    assert_eq!(node_annotation(&node, ann::CURRENT_CONFIG), first, "{node}");

    // The reboot: the next boot's agent finishes the update.
    h.reboot(&c, token_file.path(), "boot-2-worker-w");
    let hosts = [h];
    let done = converge(&c, &hosts, Some(&first), "worker-w Done on the config after its reboot").await;
    assert_eq!(done, target);
    assert_eq!(hosts[0].fake.reboots().len(), 1, "{:?}", hosts[0].fake.call_strings());
}

/// A crash in a re-apply of the current config (the force file's repair) before it wrote
/// anything (the phase says Applying on the current config; the journal holds no record): the
/// restarted agent has nothing to finish and nothing to reboot for, and reports Done without a
/// reboot. (From Applying on the current config the agent reboots to be safe when the files may
/// be written; with no record they are not.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repair_cut_short_before_it_wrote_anything_reboots_nothing() {
    use aloft_agent::{host::Root, state};
    let c = Coordinator::start();
    let (mut h, token_file, current) = one_node_on_a_file(&c, "worker-f", "/etc/f.conf", "f", "None").await;
    h.stop_agent();
    let root = Root::new(h.root.path());
    aloft_agent::engine::forget_finished_apply(&root).unwrap();
    state::save(&root, &state::Phase::Applying { target: current.clone() }).unwrap();
    h.start_agent(&c, token_file.path());
    // Long enough for the agent to start, drain and ask for a reboot, had it decided on one.
    let asked = tokio::time::timeout(Duration::from_secs(15), async {
        while h.fake.reboots().is_empty() {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
    .await;
    assert!(asked.is_err(), "rebooted: {:?}", h.fake.call_strings());
    assert!(h.log().contains("restarted before a re-apply of the current config wrote anything"), "{}", h.log());
    let hosts = [h];
    let done = converge(&c, &hosts, None, "worker-f Done after the restart").await;
    assert_eq!(done, current);
    let node = c.client().get(&path_of(&NODE, Some("worker-f"))).await.unwrap().into_result().unwrap();
    assert_eq!(node_annotation(&node, ann::STATE), "Done", "{node}");
    assert!(!node_annotation(&node, ann::DESIRED_DRAIN).starts_with("drain-"), "drained: {node}");
}

/// `aloft-agent status` after the agent restarted with nothing to do names the Node's
/// desiredConfig (it said `<none>` until the next update), and with the agent stopped it shows
/// the status the agent last wrote but fails saying the agent is not running (it passed for live).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agent_status_names_the_desired_config_and_says_when_the_agent_is_not_running() {
    let c = Coordinator::start();
    let (h, token_file, target) = one_node_on_a_file(&c, "worker-s", "/etc/s.conf", "s", "None").await;
    let mut hosts = [h];
    hosts[0].stop_agent();
    hosts[0].start_agent(&c, token_file.path());
    let h = &hosts[0];
    eventually(Duration::from_secs(60), "the restarted agent's status naming the desired config", || async {
        let out = agent_status(h);
        let st: Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
        Ok((out.status.success() && st["desiredConfig"] == target.as_str()).then_some(()))
    })
    .await;

    hosts[0].stop_agent();
    let out = agent_status(&hosts[0]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "a stopped agent's status is not passed as live: {err}");
    assert!(err.contains("aloft-agent is not running"), "{err}");
    let st: Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
    assert_eq!(st["currentConfig"], target.as_str(), "the last status is still shown: {st}");
}

/// A node Degraded by drift (a managed file edited by hand) does not take the next config, which
/// would overwrite the edit: as MCO, the disk is validated against the current config before an
/// update, and the node stays Degraded, with a reason naming the file and the force file, until
/// the file is repaired or MCO's force file exists; then the update goes on and the force file
/// is removed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drifted_node_is_not_updated_until_forced() {
    let c = Coordinator::start();
    let admin = c.client();
    let (h, _token_file, first) = one_node_on_a_file(&c, "worker-f", "/etc/f.conf", "f", "None").await;
    std::fs::write(h.path("/etc/f.conf"), "edited by hand").unwrap();
    eventually(Duration::from_secs(60), "worker-f Degraded by the edit", || async {
        Ok((annotation_of(&c, "worker-f", ann::STATE).await? == "Degraded").then_some(()))
    })
    .await;

    // The same file with other contents (a later MachineConfig wins): rebootless by the policy.
    let mc = json!({"apiVersion": "machineconfiguration.openshift.io/v1", "kind": "MachineConfig",
        "metadata": {"name": "51-more", "labels": {ann::ROLE_LABEL: "worker"}},
        "spec": {"config": {"ignition": {"version": "3.4.0"}, "storage": {"files": [
            {"path": "/etc/f.conf", "mode": 420, "contents": {"source": "data:,more"}}]}}}});
    admin.post(&path_of(&MACHINE_CONFIG, None), &mc).await.unwrap().into_result().unwrap();
    let force = h.path("/run/machine-config-daemon-force");
    let (desired, reason) =
        eventually(Duration::from_secs(120), "worker-f to refuse the update over its drift", || async {
            let n = node_of(&c, "worker-f").await?;
            let (desired, reason) = (node_annotation(&n, ann::DESIRED_CONFIG), node_annotation(&n, ann::REASON));
            Ok((desired != first && reason.contains("not updating to")).then_some((desired, reason)))
        })
        .await;
    assert!(
        reason.starts_with(&format!(
            "unexpected on-disk state validating against {first}: content mismatch for file \"/etc/f.conf\"; \
             not updating to {desired} over it: restore /etc/f.conf as {first} has it, or create {}",
            force.display()
        )),
        "{reason}"
    );
    assert_eq!(std::fs::read_to_string(h.path("/etc/f.conf")).unwrap(), "edited by hand");
    assert_eq!(annotation_of(&c, "worker-f", ann::STATE).await.unwrap(), "Degraded");
    assert_eq!(annotation_of(&c, "worker-f", ann::CURRENT_CONFIG).await.unwrap(), first);

    std::fs::create_dir_all(force.parent().unwrap()).unwrap();
    std::fs::write(&force, "").unwrap();
    let hosts = [h];
    let second = converge(&c, &hosts, Some(&first), "worker-f Done on the new config once forced").await;
    assert_eq!(second, desired);
    assert!(!force.exists(), "the force file stayed");
    assert_eq!(std::fs::read_to_string(hosts[0].path("/etc/f.conf")).unwrap(), "more", "forced: the edit goes");
}

/// MCO's way back from `content mismatch` with nothing else to update to: the force file makes
/// the agent write the current config again over the hand edit, with no reboot, and the node is
/// Done (it did nothing until an unrelated later update came). The edited file is not taken for
/// an original (the config owned the path already). And the drift watch follows a managed
/// file's directory removed and made again (it watched the removed directory's inode, and an
/// edit after the restore went unseen until the 10-minute check).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_force_file_repairs_a_drifted_node_and_the_watch_follows_a_directory_made_again() {
    let c = Coordinator::start();
    let (h, _token_file, first) = one_node_on_a_file(&c, "worker-r", "/etc/repair/deep/r.conf", "r", "None").await;
    let file = h.path("/etc/repair/deep/r.conf");
    let state_is = |want: &'static str| {
        let c = &c;
        move || async move { Ok((annotation_of(c, "worker-r", ann::STATE).await? == want).then_some(())) }
    };

    std::fs::remove_dir_all(h.path("/etc/repair")).unwrap();
    eventually(Duration::from_secs(60), "worker-r Degraded by the removed directory", state_is("Degraded")).await;
    std::fs::create_dir_all(file.parent().unwrap()).unwrap();
    std::fs::write(&file, "r").unwrap();
    eventually(Duration::from_secs(60), "worker-r Done once the directory is restored", state_is("Done")).await;
    std::fs::write(&file, "edited by hand").unwrap();
    eventually(
        Duration::from_secs(60),
        "worker-r Degraded by an edit in the directory made again",
        state_is("Degraded"),
    )
    .await;
    let reason = annotation_of(&c, "worker-r", ann::REASON).await.unwrap();
    assert!(reason.contains("content mismatch for file \"/etc/repair/deep/r.conf\""), "{reason}");

    let backups = |h: &Host| -> Vec<String> {
        ["/etc/machine-config-daemon/orig/etc/repair/deep", "/etc/machine-config-daemon/noorig/etc/repair/deep"]
            .iter()
            .flat_map(|d| std::fs::read_dir(h.path(d)).into_iter().flatten().flatten())
            .map(|e| format!("{}={}", e.path().display(), std::fs::read_to_string(e.path()).unwrap_or_default()))
            .collect()
    };
    let backed_up = backups(&h);
    // An empty directory counts (MCO's `os.Remove` takes it): it wedged the agent.
    let force = h.path("/run/machine-config-daemon-force");
    std::fs::create_dir_all(&force).unwrap();
    eventually(Duration::from_secs(60), "worker-r Done once forced", state_is("Done")).await;
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "r", "the edit is not overwritten");
    assert!(!force.exists(), "the force file stayed");
    assert_eq!(annotation_of(&c, "worker-r", ann::CURRENT_CONFIG).await.unwrap(), first);
    assert_eq!(annotation_of(&c, "worker-r", ann::REASON).await.unwrap(), "");
    assert!(h.fake.reboots().is_empty(), "a repair rebooted");
    assert_eq!(backups(&h), backed_up, "the hand edit was kept as the file's original");
    assert!(h.log().contains("writing the current config again"), "{}", h.log());
}

/// A tmpfs mounted for a test, unmounted when dropped (lazily: a process may still hold it).
struct Tmpfs(std::path::PathBuf);

impl Tmpfs {
    fn mount(at: &Path, size: &str) -> Tmpfs {
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(at)
            .output()
            .unwrap();
        assert!(out.status.success(), "mount a tmpfs (needs root): {}", String::from_utf8_lossy(&out.stderr));
        Tmpfs(at.to_path_buf())
    }
    fn resize(&self, size: &str) {
        let out = Command::new("mount").args(["-o", &format!("remount,size={size}")]).arg(&self.0).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).output();
    }
}

/// The durability audit's full disk: an update whose large file cannot be put in the agent's
/// journal is reported Degraded with the reason (the node stayed Working with none, its pool not
/// Degraded), leaves no half-written blob or temp file holding the space, and goes through by
/// itself once there is room.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_is_reported_and_leaves_nothing_behind() {
    use std::io::Write;
    let c = Coordinator::start();
    let admin = c.client();
    let token_file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(token_file.path(), c.create_token("fleet", "bootstrap")).unwrap();
    let mut h = Host::new("worker-full").await;
    let state = h.path("/var/lib/aloft");
    std::fs::create_dir_all(&state).unwrap();
    let disk = Tmpfs::mount(&state, "1m");
    std::fs::write(h.path("/etc/big.bin"), vec![b'x'; 2 << 20]).unwrap();
    h.start_agent(&c, token_file.path());
    admin
        .post(
            "/apis/operator.openshift.io/v1/machineconfigurations",
            &json!({"apiVersion": "operator.openshift.io/v1", "kind": "MachineConfiguration", "metadata": {"name": "cluster"},
                    "spec": {"nodeDisruptionPolicy": {"files": [{"path": "/etc/big.bin", "actions": [{"type": "None"}]}]}}}),
        )
        .await
        .unwrap()
        .into_result()
        .unwrap();
    let pool = yaml(&testdata().join("mco/bootstrap/worker.machineconfigpool.yaml"));
    admin.post(&path_of(&MACHINE_CONFIG_POOL, None), &pool).await.unwrap().into_result().unwrap();
    // A 2 MiB file gzipped into a small MachineConfig, over a file of the host's own, which the
    // journal keeps a copy of to restore (MCO's .mcdorig): more than the state dir's tmpfs holds.
    let big = |byte: u8| {
        use base64::Engine;
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        gz.write_all(&vec![byte; 2 << 20]).unwrap();
        let b64 = base64::engine::general_purpose::STANDARD.encode(gz.finish().unwrap());
        json!({"apiVersion": "machineconfiguration.openshift.io/v1", "kind": "MachineConfig",
            "metadata": {"name": "50-worker-big", "labels": {ann::ROLE_LABEL: "worker"}},
            "spec": {"config": {"ignition": {"version": "3.4.0"}, "storage": {"files": [
                {"path": "/etc/big.bin", "mode": 420,
                 "contents": {"compression": "gzip", "source": format!("data:;base64,{b64}")}}]}}}})
    };
    admin.post(&path_of(&MACHINE_CONFIG, None), &big(b'y')).await.unwrap().into_result().unwrap();
    let hosts = [h];
    let (reason, pool) =
        eventually(Duration::from_secs(120), "the node and its pool Degraded by the full disk", || async {
            let n = admin.get(&path_of(&NODE, Some("worker-full"))).await?.into_result()?;
            let pool = admin.get(&path_of(&MACHINE_CONFIG_POOL, Some("worker"))).await?.into_result()?;
            let degraded = node_annotation(&n, ann::STATE) == "Degraded" && pool["status"]["degradedMachineCount"] == 1;
            Ok(degraded.then(|| (node_annotation(&n, ann::REASON), pool)))
        })
        .await;
    assert!(reason.contains("No space left on device"), "{reason}");
    let h = &hosts[0];
    // Looked at between two tries (the agent retries at once when the coordinator touches its
    // Node, and a try in flight has its blob half written, as it should).
    let (incoming, left) = h.while_agent_in("degraded", Duration::from_secs(60), || {
        let left: Vec<String> = std::fs::read_dir(state.join("journal/blobs"))
            .map(|d| d.filter_map(|e| e.ok()).map(|e| e.file_name().to_string_lossy().into_owned()).collect())
            .unwrap_or_default();
        (state.join("journal/blobs/.incoming").exists(), left)
    });
    assert!(!incoming, "no half-written blob");
    assert!(left.is_empty(), "the failed plan's blobs are gone: {left:?}");
    assert!(std::fs::read(h.path("/etc/big.bin")).unwrap() == vec![b'x'; 2 << 20], "nothing written");
    let conditions = pool["status"]["conditions"].as_array().cloned().unwrap_or_default();
    assert!(conditions.iter().any(|c| c["type"] == "NodeDegraded" && c["status"] == "True"), "{pool}");

    // Room again: the agent's retry goes through.
    disk.resize("64m");
    converge(&c, &hosts, None, "the node Done on the big config once there is room").await;
    assert!(std::fs::read(h.path("/etc/big.bin")).unwrap() == vec![b'y'; 2 << 20], "the new bytes");
    drop(hosts);
    drop(disk);
}

/// The node `name`'s `(state, failedConfig, reason)` at each change the watch `w` delivers, until
/// it is Done on `config` with `config` desired.
async fn states_until_done(
    w: &mut aloft_tests::WatchStream,
    name: &str,
    config: &str,
) -> Vec<(String, String, String)> {
    let mut seen = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(90);
    loop {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        let ev = w.next(left).await.unwrap_or_else(|e| panic!("{name} not Done on {config}: {e:#}; seen {seen:?}"));
        let node = ev.expect("the watch ended")["object"].clone();
        if node.pointer("/metadata/name") != Some(&json!(name)) {
            continue;
        }
        let a = |k: &str| node_annotation(&node, k);
        seen.push((a(ann::STATE), a(ann::FAILED_CONFIG), a(ann::REASON)));
        if a(ann::STATE) == "Done" && a(ann::CURRENT_CONFIG) == config && a(ann::DESIRED_CONFIG) == config {
            return seen;
        }
    }
}

/// One node on a drained file config `first` with its pool paused, and a second rendered config
/// of the file (contents `two`) that nothing has asked the node for yet.
async fn paused_node_and_a_second_config(
    c: &Coordinator,
    name: &str,
) -> (Host, tempfile::NamedTempFile, String, String) {
    let admin = c.client();
    let (h, token, first) = one_node_on_a_file(c, name, "/etc/back.conf", "one", "Drain").await;
    let pool_path = path_of(&MACHINE_CONFIG_POOL, Some("worker"));
    let paused = json!({"spec": {"paused": true}});
    admin.patch(&pool_path, "application/merge-patch+json", &paused).await.unwrap().into_result().unwrap();
    let mc_path = path_of(&MACHINE_CONFIG, Some(&format!("50-{name}")));
    let mut mc = admin.get(&mc_path).await.unwrap().into_result().unwrap();
    mc["spec"]["config"]["storage"]["files"][0]["contents"]["source"] = json!("data:,two");
    admin.put(&mc_path, &mc).await.unwrap().into_result().unwrap();
    let second = eventually(Duration::from_secs(60), "the second config rendered", || {
        let admin = admin.clone();
        let (pool_path, first) = (pool_path.clone(), first.clone());
        async move {
            let pool = admin.get(&pool_path).await?.into_result()?;
            let target = pool.pointer("/spec/configuration/name").and_then(Value::as_str).unwrap_or("");
            Ok((!target.is_empty() && target != first).then(|| target.to_string()))
        }
    })
    .await;
    (h, token, first, second)
}

async fn set_desired(c: &Coordinator, name: &str, config: &str) {
    let patch = json!({"metadata": {"annotations": {ann::DESIRED_CONFIG: config}}});
    let path = path_of(&NODE, Some(name));
    c.client().patch(&path, "application/merge-patch+json", &patch).await.unwrap().into_result().unwrap();
}

/// An update the coordinator takes back while its drain waits (here a budget allows no
/// disruption) is given up at once: the agent stops waiting for a drain nobody will answer (it
/// waited out its drain timeout, an hour by default, and then reported Degraded with
/// `failedConfig` naming a config no longer wanted), and the node is Done on its config again,
/// never Degraded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_update_taken_back_while_its_drain_waits_is_given_up_not_failed() {
    let c = Coordinator::start();
    let admin = c.client();
    let (h, _token, first, second) = paused_node_and_a_second_config(&c, "worker-b").await;
    let ndb = json!({"apiVersion": "aloft.dev/v1", "kind": "NodeDisruptionBudget", "metadata": {"name": "none"},
        "spec": {"selector": {}, "maxUnavailable": 0}});
    let ndb_path = path_of(&aloft_coordinator::resources::NODE_DISRUPTION_BUDGET, None);
    admin.post(&ndb_path, &ndb).await.unwrap().into_result().unwrap();
    set_desired(&c, "worker-b", &second).await;
    let request = format!("drain-{second}");
    eventually(Duration::from_secs(60), "worker-b asking for its drain", || async {
        Ok((annotation_of(&c, "worker-b", ann::DESIRED_DRAIN).await? == request).then_some(()))
    })
    .await;
    assert_ne!(
        annotation_of(&c, "worker-b", ann::LAST_APPLIED_DRAIN).await.unwrap(),
        request,
        "the budget holds the drain"
    );
    let mut w = aloft_tests::WatchStream::open(&admin, "/api/v1/nodes?watch=true").await.unwrap();
    set_desired(&c, "worker-b", &first).await;
    let seen = states_until_done(&mut w, "worker-b", &first).await;
    assert!(
        seen.iter().all(|(state, failed, _)| state != "Degraded" && failed.is_empty()),
        "a failure reported for the config taken back: {seen:?}"
    );
    assert_eq!(std::fs::read_to_string(h.path("/etc/back.conf")).unwrap(), "one");
    assert!(h.log().contains("update given up"), "{}", h.log());
}

/// The same while the drained node's workloads stop (one hangs past the stop timeout): the
/// timeout does not report a failure for the config taken back, and the workloads start again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_update_taken_back_while_its_workloads_stop_is_given_up_not_failed() {
    let c = Coordinator::start();
    let admin = c.client();
    let (mut h, token, first, second) = paused_node_and_a_second_config(&c, "worker-s").await;
    h.stop_agent();
    let wants = h.path("/etc/systemd/system/aloft-workloads.target.wants");
    std::fs::create_dir_all(&wants).unwrap();
    std::os::unix::fs::symlink("/usr/lib/systemd/system/db.service", wants.join("db.service")).unwrap();
    h.fake.hang_jobs_of("db.service");
    h.extra_args = vec!["--workload-stop-timeout-seconds".into(), "4".into()];
    h.start_agent(&c, token.path());
    h.fake.clear_calls();
    set_desired(&c, "worker-s", &second).await;
    eventually(Duration::from_secs(60), "worker-s stopping its workloads", || async {
        Ok(h.fake.call_strings().iter().any(|call| call.starts_with("StopUnit(db.service")).then_some(()))
    })
    .await;
    let mut w = aloft_tests::WatchStream::open(&admin, "/api/v1/nodes?watch=true").await.unwrap();
    set_desired(&c, "worker-s", &first).await;
    let seen = states_until_done(&mut w, "worker-s", &first).await;
    assert!(
        seen.iter().all(|(state, failed, _)| state != "Degraded" && failed.is_empty()),
        "a failure reported for the config taken back: {seen:?}"
    );
    let calls = h.fake.call_strings();
    let stop = calls.iter().position(|call| call.starts_with("StopUnit(db.service"));
    let start = calls.iter().rposition(|call| call.starts_with("StartUnit(aloft-workloads.target"));
    assert!(start > stop, "the workloads started again after the stop: {calls:?}");
    assert_eq!(std::fs::read_to_string(h.path("/etc/back.conf")).unwrap(), "one");
    // The coordinator uncordons after Done.
    eventually(Duration::from_secs(30), "worker-s uncordoned after Done", || async {
        let node = admin.get(&path_of(&NODE, Some("worker-s"))).await?.into_result()?;
        Ok((node.pointer("/spec/unschedulable") != Some(&json!(true))).then_some(()))
    })
    .await;
}

/// Each start of the agent (so each boot) reports the OS image and kernel the node runs and its
/// boot ID in `status.nodeInfo`, as a kubelet does, and `get nodes -o wide` shows them: an
/// OS-update fleet can see which image each node booted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_report_the_os_they_booted() {
    let c = Coordinator::start();
    let admin = c.client();
    let token_file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(token_file.path(), c.create_token("fleet", "bootstrap")).unwrap();
    let mut h = Host::new("worker-i").await;
    std::fs::write(h.path("/etc/machine-id"), "4c4c4544004b4a10804bb4c04f333233\n").unwrap();
    // A free loopback port for the agent's /metrics (the only agent of this test serving them).
    let metrics_addr = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    h.metrics_listen = metrics_addr.to_string();
    h.start_agent(&c, token_file.path());
    let info_when = |boot: &'static str| {
        let admin = admin.clone();
        eventually(Duration::from_secs(60), "nodeInfo of the boot", move || {
            let admin = admin.clone();
            async move {
                let node = admin.get(&path_of(&NODE, Some("worker-i"))).await?.into_result()?;
                let info = node.pointer("/status/nodeInfo").cloned().unwrap_or_default();
                Ok((info["bootID"] == boot).then_some(info))
            }
        })
    };
    let info = info_when("boot-1-worker-i").await;
    assert_eq!(info["osImage"], "aloft sandbox 1", "{info}");
    assert_eq!(info["machineID"], "4c4c4544004b4a10804bb4c04f333233", "{info}");
    assert_eq!(info["operatingSystem"], "linux", "{info}");
    // The agent's build, as a kubelet's version (`kubectl get nodes` VERSION): the binary under
    // test was built from this tree in this environment, as this test was.
    let agent_version = aloft_api::build_info!().node_version();
    assert_eq!(info["kubeletVersion"], json!(agent_version), "{info}");
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap().trim().to_string();
    assert_eq!(info["kernelVersion"], json!(kernel), "{info}");
    // The running agent's build, on the node itself: `aloft-agent status` (from the agent over
    // D-Bus, not the command's own build) and its /metrics.
    let build = aloft_api::build_info!();
    let out = agent_status(&h);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let st: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(st["version"], json!(build.long_version()), "{st}");
    let text = Command::new(bin("aloft-agent"))
        .args(["status", "--bus-address", &h.bus_address])
        .arg("--root")
        .arg(h.root.path())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.lines().any(|l| l == format!("Version:  {}", build.long_version())), "{text}");
    let scraped = scrape_metrics(metrics_addr);
    let series = format!(
        "aloft_agent_build_info{{version=\"{}\",git_commit=\"{}\",git_tree_state=\"{}\",build_date=\"{}\"}} 1",
        build.version, build.git_commit, build.git_tree_state, build.build_date
    );
    assert!(scraped.lines().any(|l| l == series), "{series} not in\n{scraped}");

    // A reboot into another OS image: the next boot's agent says so.
    h.stop_agent();
    std::fs::write(h.path("/etc/os-release"), "NAME=\"aloft sandbox\"\nPRETTY_NAME=\"aloft sandbox 2\"\n").unwrap();
    std::fs::write(h.path("/proc/sys/kernel/random/boot_id"), "boot-2-worker-i\n").unwrap();
    h.start_agent(&c, token_file.path());
    let info = info_when("boot-2-worker-i").await;
    assert_eq!(info["osImage"], "aloft sandbox 2", "{info}");

    let out = Command::new(bin("aloftctl"))
        .arg("--kubeconfig")
        .arg(c.kubeconfig_path())
        .args(["get", "nodes", "-o", "wide"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let header = text.lines().next().unwrap_or("");
    assert!(header.contains("VERSION") && header.contains("OS-IMAGE") && header.contains("KERNEL-VERSION"), "{text}");
    let row = text.lines().find(|l| l.starts_with("worker-i")).unwrap_or("");
    assert!(row.contains("aloft sandbox 2") && row.contains(&kernel) && row.contains(&agent_version), "{text}");
}

/// A rebootless action that fails (the policy's restart of a service) fails the update as MCO's
/// daemon does: the config before it is written back, the node stays Degraded naming the action
/// (it reported Done a few seconds later, the action never run, and the pool rolled on), and the
/// update is retried; once the service restarts, the node is Done on the new config.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_rebootless_action_undoes_the_update_and_is_retried() {
    let c = Coordinator::start();
    let admin = c.client();
    let (h, _token, first) = one_node_on_a_file(&c, "worker-r", "/etc/r.conf", "one", "None").await;
    let policy = json!({"spec": {"nodeDisruptionPolicy": {"files": [{"path": "/etc/r.conf",
        "actions": [{"type": "Restart", "restart": {"serviceName": "auditd.service"}}]}]}}});
    let policy_path = "/apis/operator.openshift.io/v1/machineconfigurations/cluster";
    admin.patch(policy_path, "application/merge-patch+json", &policy).await.unwrap().into_result().unwrap();
    h.fake.fail_jobs_of("auditd.service", "failed");
    h.fake.clear_calls();
    let mc_path = path_of(&MACHINE_CONFIG, Some("50-worker-r"));
    let mut mc = admin.get(&mc_path).await.unwrap().into_result().unwrap();
    mc["spec"]["config"]["storage"]["files"][0]["contents"]["source"] = json!("data:,two");
    admin.put(&mc_path, &mc).await.unwrap().into_result().unwrap();
    let (reason, failed_on) = eventually(Duration::from_secs(60), "worker-r Degraded by the restart", || async {
        let n = node_of(&c, "worker-r").await?;
        let (state, failed) = (node_annotation(&n, ann::STATE), node_annotation(&n, ann::FAILED_CONFIG));
        // One read for all three: the retry that follows at once could come between reads
        // (seen once: Degraded and failedConfig read, then an empty reason).
        Ok((state == "Degraded" && !failed.is_empty()).then(|| (node_annotation(&n, ann::REASON), failed)))
    })
    .await;
    // The action and systemd's answer, each said once, and what the agent did about it.
    assert!(reason.starts_with("rebootless action Restart auditd.service failed: systemd job "), "{reason}");
    assert!(
        reason.ends_with("finished with result \"failed\" (the update was undone: back on the previous config)"),
        "{reason}"
    );
    assert_eq!(reason.matches("auditd.service").count(), 1, "{reason}");
    assert_ne!(failed_on, first, "the failure names the new config");
    // Still failing after its first retry: Degraded on the config before, its file written back.
    // (Polled as one condition: between the retried action's failure and its undo the file
    // reads "two" for a moment, and the state is still the first failure's Degraded.)
    let restarts = || h.fake.call_strings().iter().filter(|c| c.starts_with("RestartUnit(auditd.service")).count();
    eventually(
        Duration::from_secs(60),
        "retried, and Degraded on the config before, its file written back",
        || async {
            let n = node_of(&c, "worker-r").await?;
            let (state, current) = (node_annotation(&n, ann::STATE), node_annotation(&n, ann::CURRENT_CONFIG));
            let file = std::fs::read_to_string(h.path("/etc/r.conf"))?;
            Ok((restarts() >= 2 && state == "Degraded" && current == first && file == "one").then_some(()))
        },
    )
    .await;

    // The service restarts again: the retry takes the node to the new config.
    let mut w = aloft_tests::WatchStream::open(&admin, "/api/v1/nodes?watch=true").await.unwrap();
    h.fake.clear_failures();
    let seen = states_until_done(&mut w, "worker-r", &failed_on).await;
    assert!(!seen.is_empty());
    assert_eq!(std::fs::read_to_string(h.path("/etc/r.conf")).unwrap(), "two");
}

/// Workloads the agent stopped for a drained update that then failed are started again however
/// the node leaves it: here the admin reverts, the coordinator picks the node for the config it
/// runs (taking its drain request back), and the node is Done. They stayed stopped on a node
/// reported Done and uncordoned.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workloads_stopped_for_a_failed_update_start_again_after_a_revert() {
    let c = Coordinator::start();
    let admin = c.client();
    let (mut h, token, first) = one_node_on_a_file(&c, "worker-v", "/etc/v.conf", "one", "Drain").await;
    h.stop_agent();
    let wants = h.path("/etc/systemd/system/aloft-workloads.target.wants");
    std::fs::create_dir_all(&wants).unwrap();
    std::os::unix::fs::symlink("/usr/lib/systemd/system/db.service", wants.join("db.service")).unwrap();
    h.fake.hang_jobs_of("db.service");
    h.extra_args = vec!["--workload-stop-timeout-seconds".into(), "3".into()];
    h.start_agent(&c, token.path());
    let mc_path = path_of(&MACHINE_CONFIG, Some("50-worker-v"));
    let original = admin.get(&mc_path).await.unwrap().into_result().unwrap();
    let mut two = original.clone();
    two["spec"]["config"]["storage"]["files"][0]["contents"]["source"] = json!("data:,two");
    admin.put(&mc_path, &two).await.unwrap().into_result().unwrap();
    eventually(Duration::from_secs(60), "worker-v Degraded by the hung workload", || async {
        Ok((annotation_of(&c, "worker-v", ann::STATE).await? == "Degraded").then_some(()))
    })
    .await;
    h.fake.clear_failures();
    h.fake.clear_calls();
    // The revert: the MachineConfig as it was.
    let mut back = admin.get(&mc_path).await.unwrap().into_result().unwrap();
    back["spec"] = original["spec"].clone();
    admin.put(&mc_path, &back).await.unwrap().into_result().unwrap();
    let hosts = [h];
    let target = converge(&c, &hosts, Some("none"), "worker-v Done after the revert").await;
    assert_eq!(target, first, "the revert renders the config before");
    let calls = hosts[0].fake.call_strings();
    assert!(calls.iter().any(|c| c.starts_with("StartUnit(aloft-workloads.target")), "started again: {calls:?}");
    assert_eq!(std::fs::read_to_string(hosts[0].path("/etc/v.conf")).unwrap(), "one");
}

/// A failed rebootless action on a node's first config does not undo to "no config": that
/// removed core's SSH keys and wrote `*` for its password (what "no config" says of them),
/// locking `core` out of the node it was to fix. The config's files, keys and password stay, no
/// config is current, the node is Degraded and retried, and Done once the service restarts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_action_on_the_first_config_leaves_core_able_to_log_in() {
    let c = Coordinator::start();
    let admin = c.client();
    let token_file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(token_file.path(), c.create_token("fleet", "bootstrap")).unwrap();
    let mut h = Host::new("worker-k").await;
    let keys = h.path("/home/core/.ssh/authorized_keys.d");
    std::fs::create_dir_all(&keys).unwrap();
    std::fs::write(keys.join("ignition"), "ssh-ed25519 AAAAignition admin@laptop\n").unwrap();
    let shadow = "root:*:19000:0:99999:7:::\ncore:$6$ign$ignitionhash:19000:0:99999:7:::\n";
    std::fs::write(h.path("/etc/shadow"), shadow).unwrap();
    h.fake.fail_jobs_of("auditd.service", "failed");
    let policy = json!({"apiVersion": "operator.openshift.io/v1", "kind": "MachineConfiguration",
        "metadata": {"name": "cluster"}, "spec": {"nodeDisruptionPolicy": {"files": [{"path": "/etc/k.conf",
        "actions": [{"type": "Restart", "restart": {"serviceName": "auditd.service"}}]}]}}});
    admin.post("/apis/operator.openshift.io/v1/machineconfigurations", &policy).await.unwrap().into_result().unwrap();
    let pool = yaml(&testdata().join("mco/bootstrap/worker.machineconfigpool.yaml"));
    admin.post(&path_of(&MACHINE_CONFIG_POOL, None), &pool).await.unwrap().into_result().unwrap();
    let mc = json!({"apiVersion": "machineconfiguration.openshift.io/v1", "kind": "MachineConfig",
        "metadata": {"name": "50-worker-k", "labels": {ann::ROLE_LABEL: "worker"}},
        "spec": {"config": {"ignition": {"version": "3.4.0"},
            "passwd": {"users": [{"name": "core", "sshAuthorizedKeys": ["ssh-ed25519 AAAAconfig ops"],
                "passwordHash": "$6$cfg$confighash"}]},
            "storage": {"files": [{"path": "/etc/k.conf", "mode": 420, "contents": {"source": "data:,k"}}]}}}});
    admin.post(&path_of(&MACHINE_CONFIG, None), &mc).await.unwrap().into_result().unwrap();
    h.start_agent(&c, token_file.path());
    eventually(Duration::from_secs(60), "worker-k Degraded by the restart", || async {
        Ok((annotation_of(&c, "worker-k", ann::STATE).await? == "Degraded").then_some(()))
    })
    .await;
    assert_eq!(annotation_of(&c, "worker-k", ann::CURRENT_CONFIG).await.unwrap(), "", "no config current");
    // core can still log in: with the keys and password the config wrote (it was undone to none).
    let key_file = std::fs::read_to_string(keys.join("ignition")).unwrap_or_default();
    assert!(key_file.contains("AAAAconfig"), "{key_file:?}");
    let shadow_now = std::fs::read_to_string(h.path("/etc/shadow")).unwrap();
    assert!(shadow_now.contains("core:$6$cfg$confighash:"), "{shadow_now}");
    h.fake.clear_failures();
    let hosts = [h];
    converge(&c, &hosts, None, "worker-k Done once the service restarts").await;
    assert_eq!(std::fs::read_to_string(hosts[0].path("/etc/k.conf")).unwrap(), "k");
}

/// An update given up while its drain was never answered starts and judges no workload: the
/// agent stopped none. A workload failed for its own reasons made the give-up's start fail, and
/// the Node stayed Working and cordoned with no reason, the step retried in silence.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_give_up_judges_no_workload_it_did_not_stop() {
    let c = Coordinator::start();
    let admin = c.client();
    let (h, _token, first, second) = paused_node_and_a_second_config(&c, "worker-g").await;
    let wants = h.path("/etc/systemd/system/aloft-workloads.target.wants");
    std::fs::create_dir_all(&wants).unwrap();
    std::os::unix::fs::symlink("/usr/lib/systemd/system/db.service", wants.join("db.service")).unwrap();
    h.fake.set_active_state("db.service", "failed");
    // A hook nothing answers: the drain is never acknowledged.
    let hooks = json!({"spec": {"drain": {"hooks": [{"url": "http://127.0.0.1:9/lb", "timeoutSeconds": 1}]}}});
    let pool_path = path_of(&MACHINE_CONFIG_POOL, Some("worker"));
    admin.patch(&pool_path, "application/merge-patch+json", &hooks).await.unwrap().into_result().unwrap();
    h.fake.clear_calls();
    set_desired(&c, "worker-g", &second).await;
    let request = format!("drain-{second}");
    eventually(Duration::from_secs(60), "worker-g asking for its drain", || async {
        Ok((annotation_of(&c, "worker-g", ann::DESIRED_DRAIN).await? == request).then_some(()))
    })
    .await;
    let mut w = aloft_tests::WatchStream::open(&admin, "/api/v1/nodes?watch=true").await.unwrap();
    set_desired(&c, "worker-g", &first).await;
    let seen = states_until_done(&mut w, "worker-g", &first).await;
    assert!(seen.iter().all(|(state, failed, _)| state != "Degraded" && failed.is_empty()), "{seen:?}");
    let calls = h.fake.call_strings();
    assert!(
        !calls.iter().any(|c| c.starts_with("StopUnit(db.service") || c.starts_with("StartUnit(aloft-workloads")),
        "{calls:?}"
    );
}

/// An agent started before its coordinator can answer (a host's first boot while the coordinator
/// is down or being upgraded) keeps asking to enroll, saying why, instead of exiting (its unit
/// failed and restarted every 5 s), and joins once the coordinator is back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_first_enrollment_waits_for_the_coordinator() {
    let mut c = Coordinator::start_with(aloft_tests::Options { fixed_port: true, ..Default::default() });
    let token_file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(token_file.path(), c.create_token("fleet", "bootstrap")).unwrap();
    c.kill9();
    let mut h = Host::new("worker-late").await;
    h.start_agent(&c, token_file.path());
    eventually(Duration::from_secs(60), "the agent to try twice", || {
        let tries = h.log().matches("cannot enroll yet; retrying").count();
        async move { Ok((tries >= 2).then_some(())) }
    })
    .await;
    assert!(!h.agent_exited(), "the agent waits instead of exiting: {}", h.log());
    assert!(h.log().contains("Connection refused") || h.log().contains("connection refused"), "{}", h.log());
    // `aloft-agent status` finds the waiting agent and says what it waits for (it found no agent).
    let out = agent_status(&h);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let st: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(st["state"], aloft_agent::enroll::ENROLLING, "{st}");
    assert!(st["progress"].as_str().unwrap_or("").starts_with(&format!("waiting to enroll with {}", c.url())), "{st}");
    assert!(st["reason"].as_str().unwrap_or("").to_lowercase().contains("connection refused"), "{st}");
    c.restart();
    let admin = c.client();
    eventually(Duration::from_secs(60), "the late node to enroll and report Done", || {
        let admin = admin.clone();
        async move {
            let r = admin.get(&path_of(&NODE, Some("worker-late"))).await?;
            Ok((r.code == 200
                && r.body.pointer("/metadata/annotations").and_then(|a| a.get(ann::STATE)) == Some(&json!("Done")))
            .then_some(()))
        }
    })
    .await;
    assert!(!h.agent_exited(), "{}", h.log());
    assert!(h.path("/var/lib/aloft/credential.json").exists());
    // Enrolled, the agent's own status replaces the wait's.
    let out = agent_status(&h);
    let st: Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
    assert_eq!(st["state"], "Done", "{st}");
    assert_eq!(st["reason"], "", "{st}");
}

/// The unit `y.service`, enabled or not.
fn unit_y(enabled: bool) -> Value {
    json!({"units": [{"name": "y.service", "enabled": enabled,
        "contents": "[Service]\nExecStart=/bin/true\n[Install]\nWantedBy=multi-user.target\n"}]})
}

/// One node on a config with `/etc/u.conf` "one" and `y.service` disabled, then an update to a
/// config that changes the file (its policy restarts auditd.service, which fails) and enables
/// `y.service`, whose undo fails too (systemd refuses to disable y.service): the node is Degraded
/// on that update with the disk holding its files. Returns the host, the config it was on, the
/// failed one and the MachineConfig of the config it was on.
async fn a_node_whose_undo_failed(
    c: &Coordinator,
    name: &str,
) -> (Host, tempfile::NamedTempFile, String, String, Value) {
    let admin = c.client();
    let (h, token, zero) = one_node_on_a_file(c, name, "/etc/u.conf", "one", "None").await;
    let policy = json!({"spec": {"nodeDisruptionPolicy": {
        "files": [{"path": "/etc/u.conf", "actions": [{"type": "Restart", "restart": {"serviceName": "auditd.service"}}]}],
        "units": [{"name": "y.service", "actions": [{"type": "None"}]}]}}});
    let policy_path = "/apis/operator.openshift.io/v1/machineconfigurations/cluster";
    admin.patch(policy_path, "application/merge-patch+json", &policy).await.unwrap().into_result().unwrap();
    let mc_path = path_of(&MACHINE_CONFIG, Some(&format!("50-{name}")));
    let mut original = admin.get(&mc_path).await.unwrap().into_result().unwrap();
    original["spec"]["config"]["systemd"] = unit_y(false);
    original = admin.put(&mc_path, &original).await.unwrap().into_result().unwrap();
    let hosts = [h];
    let first = converge(c, &hosts, Some(&zero), "the node Done with y.service disabled").await;
    let [h] = hosts;
    h.fake.fail_jobs_of("auditd.service", "failed");
    h.fake.fail_calls("DisableUnitFiles", Some("y.service"));
    let mut mc = original.clone();
    mc["spec"]["config"]["storage"]["files"][0]["contents"]["source"] = json!("data:,two");
    mc["spec"]["config"]["systemd"] = unit_y(true);
    admin.put(&mc_path, &mc).await.unwrap().into_result().unwrap();
    let (reason, failed) = eventually(Duration::from_secs(60), "the update and its undo failed", || async {
        let n = node_of(c, name).await?;
        let (state, reason) = (node_annotation(&n, ann::STATE), node_annotation(&n, ann::REASON));
        Ok((state == "Degraded" && reason.contains("undoing the update failed too"))
            .then(|| (reason, node_annotation(&n, ann::FAILED_CONFIG))))
    })
    .await;
    assert!(reason.starts_with("rebootless action Restart auditd.service failed"), "{reason}");
    assert!(reason.contains("DisableUnitFiles"), "{reason}");
    assert!(reason.ends_with(&format!("the disk still holds {failed}'s files")), "{reason}");
    assert_ne!(failed, first);
    // Where the disk is: on the failed update's files, its unit enabled (systemd refused to
    // disable it after the restart, and the undo's rollback enabled it again).
    assert_eq!(std::fs::read_to_string(h.path("/etc/u.conf")).unwrap(), "two");
    let calls = h.fake.call_strings();
    let restart = calls.iter().position(|c| c.starts_with("RestartUnit(auditd.service")).expect("the restart");
    let y: Vec<&String> = calls[restart..].iter().filter(|c| c.contains("[y.service]")).collect();
    assert!(y.len() >= 2 && y[0].starts_with("DisableUnitFiles("), "{calls:?}");
    assert!(y[y.len() - 1].starts_with("EnableUnitFiles("), "{calls:?}");
    (h, token, first, failed, original)
}
/// Wait until `name` is Done on `config`; a Degraded report on the way is a retry, not an end.
async fn done_on(c: &Coordinator, name: &str, config: &str, what: &str) {
    eventually(Duration::from_secs(240), what, || async {
        let n = node_of(c, name).await?;
        let done = node_annotation(&n, ann::STATE) == "Done"
            && node_annotation(&n, ann::CURRENT_CONFIG) == config
            && node_annotation(&n, ann::DESIRED_CONFIG) == config;
        Ok(done.then_some(()))
    })
    .await;
}

/// The admin reverts after an update whose undo failed: the node is Done on the config it was
/// on only once that config's files and units are back, and stays Degraded, saying why, while
/// they cannot be written. It reported Done at once over the failed update's files (then drift
/// made it Degraded a moment later).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revert_after_a_failed_undo_writes_the_config_back_before_done() {
    let c = Coordinator::start();
    let admin = c.client();
    let (mut h, token, first, failed, original) = a_node_whose_undo_failed(&c, "worker-u").await;
    // The journal's record of the undo's rollback goes as the next apply starts (and with a plan
    // that fails, no record replaces it); the undo's own record outlives it, and a restart.
    h.stop_agent();
    aloft_agent::engine::forget_finished_apply(&aloft_agent::host::Root::new(h.root.path())).unwrap();
    h.start_agent(&c, token.path());
    h.fake.clear_calls();
    let mc_path = path_of(&MACHINE_CONFIG, Some("50-worker-u"));
    let mut back = admin.get(&mc_path).await.unwrap().into_result().unwrap();
    back["spec"] = original["spec"].clone();
    admin.put(&mc_path, &back).await.unwrap().into_result().unwrap();
    // systemd still refuses: not Done, and the reason says what the agent tries.
    let reason = eventually(Duration::from_secs(60), "the revert waiting for the files to be written back", || async {
        let n = node_of(&c, "worker-u").await?;
        let reason = node_annotation(&n, ann::REASON);
        let waiting = node_annotation(&n, ann::DESIRED_CONFIG) == first
            && node_annotation(&n, ann::STATE) == "Degraded"
            && reason.contains("writing");
        Ok(waiting.then_some(reason))
    })
    .await;
    assert!(
        reason.starts_with(&format!(
            "the last update's undo failed and left its files and units on disk; writing {first}'s back failed again: "
        )),
        "{reason}"
    );
    assert!(reason.contains("DisableUnitFiles") && reason.ends_with("the disk still holds its files"), "{reason}");
    let n = node_of(&c, "worker-u").await.unwrap();
    assert_eq!(node_annotation(&n, ann::FAILED_CONFIG), failed, "the failure is the undone update's");
    assert_eq!(std::fs::read_to_string(h.path("/etc/u.conf")).unwrap(), "two");

    written_back_once_systemd_answers(&c, &h, &first, "one").await;
    assert!(!aloft_agent::engine::apply_unfinished(&aloft_agent::host::Root::new(h.root.path())));
}

/// systemd disables units again: `name` is Done on `config`, `/etc/u.conf` reads `contents`, and
/// y.service, which the update undone had enabled, was disabled on the way (the config `name`
/// ends on has it disabled, as the config before the update undone).
async fn written_back_once_systemd_answers(c: &Coordinator, h: &Host, config: &str, contents: &str) {
    h.fake.clear_failures();
    h.fake.clear_calls();
    done_on(c, &h.name, config, &format!("{} Done on {config}", h.name)).await;
    assert_eq!(std::fs::read_to_string(h.path("/etc/u.conf")).unwrap(), contents);
    let calls = h.fake.call_strings();
    assert!(calls.iter().any(|c| c.starts_with("DisableUnitFiles([y.service]")), "y.service disabled again: {calls:?}");
}

/// After an update whose undo failed, the admin asks for a third config instead: the agent first
/// writes back the config it was on, as the undo would have, then updates from it. The third
/// config was applied as a change from the config before, over the failed update's files: the
/// unit that update enabled stayed enabled, with nothing reporting it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_config_after_a_failed_undo_starts_from_the_config_written_back() {
    let c = Coordinator::start();
    let admin = c.client();
    let (h, _token, _first, failed, _original) = a_node_whose_undo_failed(&c, "worker-w").await;
    let mc_path = path_of(&MACHINE_CONFIG, Some("50-worker-w"));
    let mut third = admin.get(&mc_path).await.unwrap().into_result().unwrap();
    third["spec"]["config"]["storage"]["files"][0]["contents"]["source"] = json!("data:,three");
    third["spec"]["config"]["systemd"] = unit_y(false);
    admin.put(&mc_path, &third).await.unwrap().into_result().unwrap();
    let target = eventually(Duration::from_secs(60), "the third config Degraded on the write-back", || async {
        let n = node_of(&c, "worker-w").await?;
        let desired = node_annotation(&n, ann::DESIRED_CONFIG);
        let waiting = desired != failed
            && node_annotation(&n, ann::FAILED_CONFIG) == desired
            && node_annotation(&n, ann::REASON).contains("writing");
        Ok(waiting.then_some(desired))
    })
    .await;
    // Nothing of the third config applied over the failed update: the disk holds the failed
    // update's file, or the config before's while a retry of the write-back runs (it writes it,
    // then the failing systemd call rolls it back: the suite read it once in that window).
    let on_disk = std::fs::read_to_string(h.path("/etc/u.conf")).unwrap();
    assert!(on_disk == "two" || on_disk == "one", "applied over the failed update: {on_disk:?}");
    // The third config has y.service disabled, as the config before: planned from that config
    // alone, nothing disabled the unit the failed update had enabled.
    written_back_once_systemd_answers(&c, &h, &target, "three").await;
}

/// After an update whose undo failed, the admin asks for a config the node refuses for good
/// (Unreconcilable: an OS commit on a node without ostree): the config the node is on is written back first,
/// and the refusal is reported once it is. The refusal came at once, and is never retried: the
/// disk kept the failed update's files and the unit it enabled, with nothing saying so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_config_after_a_failed_undo_still_writes_the_config_back() {
    let c = Coordinator::start();
    let admin = c.client();
    let (h, _token, first, failed, original) = a_node_whose_undo_failed(&c, "worker-r").await;
    let mc_path = path_of(&MACHINE_CONFIG, Some("50-worker-r"));
    let mut refused = admin.get(&mc_path).await.unwrap().into_result().unwrap();
    refused["spec"] = original["spec"].clone();
    refused["spec"]["osImageURL"] = json!(format!("ostree+http://127.0.0.1:9/repo#aloft/os@{}", "a".repeat(64)));
    admin.put(&mc_path, &refused).await.unwrap().into_result().unwrap();
    // systemd still refuses to disable y.service: the write-back is what the node reports.
    let writing = format!("writing {first}'s back failed again");
    let target = eventually(Duration::from_secs(60), "the refused config waiting for the write-back", || async {
        let n = node_of(&c, "worker-r").await?;
        let desired = node_annotation(&n, ann::DESIRED_CONFIG);
        let waiting = desired != failed
            && node_annotation(&n, ann::STATE) == "Degraded"
            && node_annotation(&n, ann::REASON).contains(&writing);
        Ok(waiting.then_some(desired))
    })
    .await;
    // The failed update's file, or the config before's while a retry of the write-back runs (it
    // writes it, then the failing systemd call rolls it back: the suite read it once in that
    // window, as the test above says); nothing else.
    let on_disk = std::fs::read_to_string(h.path("/etc/u.conf")).unwrap();
    assert!(on_disk == "two" || on_disk == "one", "{on_disk:?}");
    h.fake.clear_failures();
    h.fake.clear_calls();
    let reason = eventually(Duration::from_secs(120), "the refusal once the config is written back", || async {
        let n = node_of(&c, "worker-r").await?;
        let refused =
            node_annotation(&n, ann::STATE) == "Unreconcilable" && node_annotation(&n, ann::FAILED_CONFIG) == target;
        Ok(refused.then(|| node_annotation(&n, ann::REASON)))
    })
    .await;
    assert!(reason.contains("this node has no ostree sysroot"), "{reason}");
    assert_eq!(std::fs::read_to_string(h.path("/etc/u.conf")).unwrap(), "one", "written back");
    let calls = h.fake.call_strings();
    assert!(calls.iter().any(|c| c.starts_with("DisableUnitFiles([y.service]")), "y.service disabled again: {calls:?}");
    assert!(!h.path("/var/lib/aloft/undoing.json").exists(), "the undo is finished");
    let n = node_of(&c, "worker-r").await.unwrap();
    assert_eq!(node_annotation(&n, ann::CURRENT_CONFIG), first);
}

/// A failed rebootless action whose undo cannot start (the disk is full as the undo records
/// itself) leaves the node Degraded saying so, and the undo is tried again until there is room:
/// then the config before is written back and the node is Degraded on the update, undone. The
/// step's error left the phase as the action left it (the update's config saved current), and
/// the node went on as if the update were done: Working with no reason while the disk was full,
/// Done on the update whose action had failed once there was room.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_undo_that_cannot_start_on_a_full_disk_is_tried_again() {
    use std::io::Write;
    let c = Coordinator::start();
    let admin = c.client();
    let (mut h, token, first) = one_node_on_a_file(&c, "worker-f", "/etc/u.conf", "one", "None").await;
    // The agent's state dir moves to a small disk of its own, with what it holds.
    h.stop_agent();
    let state = h.path("/var/lib/aloft");
    let saved = tempfile::tempdir().unwrap();
    let cp = |from: &Path, to: &Path| {
        let out = Command::new("cp").arg("-a").arg(from.join(".")).arg(to).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    };
    cp(&state, saved.path());
    let _disk = Tmpfs::mount(&state, "1m");
    cp(saved.path(), &state);
    h.start_agent(&c, token.path());
    let policy = json!({"spec": {"nodeDisruptionPolicy": {
        "files": [{"path": "/etc/u.conf", "actions": [{"type": "Restart", "restart": {"serviceName": "auditd.service"}}]}]}}});
    let policy_path = "/apis/operator.openshift.io/v1/machineconfigurations/cluster";
    admin.patch(policy_path, "application/merge-patch+json", &policy).await.unwrap().into_result().unwrap();
    h.fake.fail_jobs_of("auditd.service", "failed");
    h.fake.hold_jobs_of("auditd.service");
    let mc_path = path_of(&MACHINE_CONFIG, Some("50-worker-f"));
    let mut mc = admin.get(&mc_path).await.unwrap().into_result().unwrap();
    mc["spec"]["config"]["storage"]["files"][0]["contents"]["source"] = json!("data:,two");
    admin.put(&mc_path, &mc).await.unwrap().into_result().unwrap();
    // The agent waits for the restart's job; the disk fills meanwhile, then the job fails.
    eventually(Duration::from_secs(60), "the restart asked for", || async {
        Ok(h.fake.call_strings().iter().any(|c| c.starts_with("RestartUnit(auditd.service")).then_some(()))
    })
    .await;
    let filler = state.join("filler");
    let mut f = std::fs::File::create(&filler).unwrap();
    while f.write_all(&[0u8; 4096]).and_then(|()| f.sync_data()).is_ok() {}
    drop(f);
    h.fake.release_held_jobs();
    let (reason, failed) = eventually(Duration::from_secs(60), "Degraded: the undo cannot start", || async {
        let n = node_of(&c, "worker-f").await?;
        let reason = node_annotation(&n, ann::REASON);
        Ok((node_annotation(&n, ann::STATE) == "Degraded" && reason.contains("undoing the update cannot start"))
            .then(|| (reason, node_annotation(&n, ann::FAILED_CONFIG))))
    })
    .await;
    assert!(reason.starts_with("rebootless action Restart auditd.service failed"), "{reason}");
    assert!(reason.contains("No space left on device"), "{reason}");
    assert_ne!(failed, first);
    assert_eq!(std::fs::read_to_string(h.path("/etc/u.conf")).unwrap(), "two", "not undone yet");

    // Room again: the undo goes through, and the node is Degraded on the update, undone.
    std::fs::remove_file(&filler).unwrap();
    let reason = eventually(Duration::from_secs(120), "the update undone once there is room", || async {
        let n = node_of(&c, "worker-f").await?;
        let (state, reason) = (node_annotation(&n, ann::STATE), node_annotation(&n, ann::REASON));
        assert_ne!(state, "Done", "Done on an update whose action failed: {n}");
        Ok((state == "Degraded" && reason.ends_with("(the update was undone: back on the previous config)"))
            .then_some(reason))
    })
    .await;
    assert!(reason.starts_with("rebootless action Restart auditd.service failed"), "{reason}");
    assert_eq!(std::fs::read_to_string(h.path("/etc/u.conf")).unwrap(), "one", "written back");
    let n = node_of(&c, "worker-f").await.unwrap();
    assert_eq!(node_annotation(&n, ann::CURRENT_CONFIG), first);
    assert_eq!(node_annotation(&n, ann::FAILED_CONFIG), failed);
    assert!(!state.join("undoing.json").exists(), "the undo is finished");
}

/// An undo's record left behind after the undo finished (a crash between the write-back's apply
/// and the record's removal): the journal's committed apply of the current config says the disk
/// holds that config, so the record is dropped, not acted on. Acted on, the next update first
/// wrote the current config "back" from the config undone, which the disk no longer held: a path
/// only that config had counted as its file, and the host's own file there was deleted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_undo_record_left_after_its_undo_is_dropped() {
    use aloft_agent::host::Root;
    let c = Coordinator::start();
    let admin = c.client();
    let (mut h, token, first) = one_node_on_a_file(&c, "worker-s", "/etc/u.conf", "one", "None").await;
    h.stop_agent();
    // The host's own file, which no config of this pool has.
    std::fs::write(h.path("/etc/host-own.conf"), "the host's").unwrap();
    let root = Root::new(h.root.path());
    // The disk as the crash leaves it: the journal's last apply committed the current config (the
    // undo's write-back), and the record names the config undone, which had a file at that path.
    let (_, current) = aloft_tests::apply_as_the_agent(&admin, &root, &h.bus_address, &first).await;
    let mut undone = current.clone();
    undone.config["storage"]["files"].as_array_mut().unwrap().push(
        json!({"path": "/etc/host-own.conf", "mode": 420, "contents": {"source": "data:,the%20undone%20config's"}}),
    );
    let undone = aloft_agent::engine::normalize(&undone).unwrap();
    aloft_agent::undo::begin(&root, &undone).unwrap();
    h.start_agent(&c, token.path());

    let mc_path = path_of(&MACHINE_CONFIG, Some("50-worker-s"));
    let mut mc = admin.get(&mc_path).await.unwrap().into_result().unwrap();
    mc["spec"]["config"]["storage"]["files"][0]["contents"]["source"] = json!("data:,two");
    admin.put(&mc_path, &mc).await.unwrap().into_result().unwrap();
    let hosts = [h];
    converge(&c, &hosts, Some(&first), "the next update Done").await;
    let [h] = hosts;
    assert_eq!(std::fs::read_to_string(h.path("/etc/u.conf")).unwrap(), "two");
    assert_eq!(
        std::fs::read_to_string(h.path("/etc/host-own.conf")).ok().as_deref(),
        Some("the host's"),
        "the host's own file"
    );
    assert!(!h.path("/var/lib/aloft/undoing.json").exists(), "the record is gone");
}

/// What Ignition does at first boot with a served config, as far as the agent can see it: every
/// file written with its mode, every unit written and, when enabled, linked into the target its
/// `WantedBy=` names (systemd's preset at first boot). Data URLs only, as MCO's configs have.
fn ignite(root: &Path, config: &Value) {
    for f in config["storage"]["files"].as_array().into_iter().flatten() {
        let path = root.join(f["path"].as_str().unwrap().trim_start_matches('/'));
        let source = f["contents"]["source"].as_str().unwrap_or("data:,");
        let bytes = aloft_api::content::decode(source, f["contents"]["compression"].as_str(), None).unwrap();
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, bytes).unwrap();
        let mode = f["mode"].as_u64().unwrap_or(0o644) as u32;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
    }
    for u in config["systemd"]["units"].as_array().into_iter().flatten() {
        let name = u["name"].as_str().unwrap();
        let contents = u["contents"].as_str().unwrap();
        let dir = root.join("etc/systemd/system");
        std::fs::write(dir.join(name), contents).unwrap();
        if u["enabled"] == true {
            let target = contents.lines().find_map(|l| l.strip_prefix("WantedBy=")).unwrap().trim();
            let wants = dir.join(format!("{target}.wants"));
            std::fs::create_dir_all(&wants).unwrap();
            std::os::unix::fs::symlink(format!("/etc/systemd/system/{name}"), wants.join(name)).unwrap();
        }
    }
}

/// A new host's first boot: its pointer Ignition config fetches `/config/worker` with a
/// bootstrap token (as Ignition asks, for the newest spec it reads), gets the pool's rendered
/// config with the agent's enrollment files, and Ignition writes it; the agent then enrolls and
/// takes that config with no reboot, where a host that booted without it reboots into it. A
/// host whose agent enrolls once the pool has moved on updates from what its first boot wrote
/// (what only that config had goes); one whose first boot's file was edited is Degraded, naming
/// it, until forced. A token may read only the pool its nodes join; an Accept that no served version can meet, or
/// a pool that does not exist, is refused, naming why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_host_boots_with_its_pools_config_from_the_config_server() {
    let c = Coordinator::start();
    let admin = c.client();
    let bootstrap = c.create_token("fleet", "bootstrap");
    let token_file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(token_file.path(), &bootstrap).unwrap();
    let mut pool = yaml(&testdata().join("mco/bootstrap/worker.machineconfigpool.yaml"));
    pool["spec"]["maxUnavailable"] = json!(8);
    admin.post(&path_of(&MACHINE_CONFIG_POOL, None), &pool).await.unwrap().into_result().unwrap();
    let infra = json!({"apiVersion": "machineconfiguration.openshift.io/v1", "kind": "MachineConfigPool",
        "metadata": {"name": "infra"},
        "spec": {"machineConfigSelector": {"matchExpressions": [{"key": ann::ROLE_LABEL, "operator": "In", "values": ["worker", "infra"]}]},
                 "nodeSelector": {"matchLabels": {"node-role.kubernetes.io/infra": ""}}}});
    admin.post(&path_of(&MACHINE_CONFIG_POOL, None), &infra).await.unwrap().into_result().unwrap();
    let mc = json!({"apiVersion": "machineconfiguration.openshift.io/v1", "kind": "MachineConfig",
        "metadata": {"name": "50-worker-fleet", "labels": {ann::ROLE_LABEL: "worker"}},
        "spec": {"config": {"ignition": {"version": "3.2.0"},
            "storage": {"files": [{"path": "/etc/fleet.conf", "mode": 420, "contents": {"source": "data:,region%3Deu%0A"}},
                {"path": "/etc/fleet-os.conf", "mode": 420, "contents": {"source": "data:,fleet%0A"}}]},
            "systemd": {"units": [{"name": "fleet.service", "enabled": true,
                "contents": "[Service]\nExecStart=/bin/true\n[Install]\nWantedBy=multi-user.target\n"}]}}}});
    admin.post(&path_of(&MACHINE_CONFIG, None), &mc).await.unwrap().into_result().unwrap();
    // OpenShift's worker SSH config, which stays when the one above is removed.
    let ssh = yaml(&testdata().join("mco/bootstrap/99_openshift-machineconfig_worker.yaml"));
    admin.post(&path_of(&MACHINE_CONFIG, None), &ssh).await.unwrap().into_result().unwrap();
    let rendered = eventually(Duration::from_secs(30), "the worker pool rendered", || {
        let admin = admin.clone();
        async move {
            let p = admin.get(&path_of(&MACHINE_CONFIG_POOL, Some("worker"))).await?.into_result()?;
            Ok(p.pointer("/spec/configuration/name").and_then(Value::as_str).map(str::to_string))
        }
    })
    .await;

    let http = reqwest::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(&c.ca_pem()).unwrap())
        .build()
        .unwrap();
    // What Ignition 2.17 to 2.19 send (the newest spec they read); a spec-2 Ignition's below.
    let ignition_accept = "application/vnd.coreos.ignition+json;version=3.4.0, */*;q=0.1";
    let get = |pool: &str, token: Option<&str>, accept: &str| {
        let mut r = http.get(format!("{}/config/{pool}", c.url())).header("accept", accept.to_string());
        if let Some(t) = token {
            r = r.bearer_auth(t);
        }
        r.send()
    };
    // The host's pointer config, as the admin makes it; the host's Ignition follows it: the
    // source, the header and the CA it names (nothing else is given to the host).
    let out = c.aloftctl(&[
        "adm",
        "pointer-ignition",
        "worker",
        "--bootstrap-token-file",
        token_file.path().to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let pointer: Value = serde_json::from_slice(&out.stdout).unwrap();
    let merge = &pointer["ignition"]["config"]["merge"][0];
    assert_eq!(merge["source"], format!("{}/config/worker", c.url()));
    let ca_source = pointer["ignition"]["security"]["tls"]["certificateAuthorities"][0]["source"].as_str().unwrap();
    assert!(ca_source.starts_with("data:text/plain;charset=utf-8;base64,"), "{ca_source}");
    let ca = aloft_api::content::decode(ca_source, None, None).unwrap();
    let ignition =
        reqwest::Client::builder().add_root_certificate(reqwest::Certificate::from_pem(&ca).unwrap()).build().unwrap();
    let header = &merge["httpHeaders"][0];
    let served = ignition
        .get(merge["source"].as_str().unwrap())
        .header(header["name"].as_str().unwrap(), header["value"].as_str().unwrap())
        .header("accept", ignition_accept)
        .send()
        .await
        .unwrap();
    assert_eq!(served.status(), 200);
    assert_eq!(served.headers()["content-type"], "application/vnd.coreos.ignition+json;version=3.4.0");
    assert_eq!(served.headers()["x-aloft-rendered-config"], rendered.as_str());
    let config: Value = served.json().await.unwrap();
    assert_eq!(config["ignition"]["version"], "3.4.0");
    let paths: Vec<&str> =
        config["storage"]["files"].as_array().unwrap().iter().filter_map(|f| f["path"].as_str()).collect();
    assert_eq!(
        paths,
        [
            "/etc/fleet.conf",
            "/etc/fleet-os.conf",
            "/etc/machine-config-daemon/node-annotations.json",
            "/etc/aloft/first-boot-config.json",
            "/etc/aloft/ca.crt",
            "/etc/aloft/bootstrap-token",
            "/etc/aloft/agent.env"
        ]
    );

    // The config the first boot writes for the agent to go from: that config's Ignition part,
    // compressed, root's alone.
    let first_boot_file = &config["storage"]["files"][3];
    assert_eq!(
        (first_boot_file["mode"].as_u64(), &first_boot_file["contents"]["compression"]),
        (Some(0o600), &json!("gzip"))
    );

    // The host's first boot: Ignition writes it. The agent's files say how to enroll.
    // A file the OS ships (ostree keeps /etc's pristine copy in /usr/etc), which the config
    // overwrites at first boot.
    let os_ships = |h: &Host| {
        for p in ["usr/etc/fleet-os.conf", "etc/fleet-os.conf"] {
            std::fs::create_dir_all(h.root.path().join(p).parent().unwrap()).unwrap();
            std::fs::write(h.root.path().join(p), "os default\n").unwrap();
        }
    };
    let mut born = Host::new("worker-born").await;
    os_ships(&born);
    ignite(born.root.path(), &config);
    // A host born at the same time whose agent starts only once the pool has moved on (its
    // first update goes from what its first boot wrote, not from nothing).
    let mut late = Host::new("worker-late").await;
    os_ships(&late);
    ignite(late.root.path(), &config);
    // And one whose first boot's file was changed before the agent started.
    let mut edited = Host::new("worker-edited").await;
    ignite(edited.root.path(), &config);
    std::fs::write(edited.path("/etc/fleet.conf"), "region=us\n").unwrap();
    edited.start_agent(&c, &edited.path("/etc/aloft/bootstrap-token"));
    assert_eq!(std::fs::read_to_string(born.path("/etc/fleet-os.conf")).unwrap(), "fleet\n");
    let env = std::fs::read_to_string(born.path("/etc/aloft/agent.env")).unwrap();
    assert!(env.contains(&format!("ALOFT_COORDINATOR={}\n", c.url())), "{env}");
    assert!(env.contains("ALOFT_LABELS=node-role.kubernetes.io/worker=\n"), "{env}");
    assert_eq!(std::fs::read_to_string(born.path("/etc/aloft/bootstrap-token")).unwrap().trim(), bootstrap);
    assert_eq!(std::fs::read(born.path("/etc/aloft/ca.crt")).unwrap(), c.ca_pem());
    assert_eq!(mode(&born.path("/etc/aloft/bootstrap-token")), 0o600);
    assert_eq!(std::fs::read_to_string(born.path("/etc/fleet.conf")).unwrap(), "region=eu\n");
    born.start_agent(&c, &born.path("/etc/aloft/bootstrap-token"));
    // A host that booted without it, beside it; and one with the same files but not the
    // first boot's word that they are that config's (files some failed update left behind
    // look the same): both take the config as an update that writes files, with a reboot.
    let mut plain = Host::new("worker-plain").await;
    plain.start_agent(&c, token_file.path());
    let mut copied = Host::new("worker-copied").await;
    ignite(copied.root.path(), &config);
    std::fs::remove_file(copied.path("/etc/machine-config-daemon/node-annotations.json")).unwrap();
    copied.start_agent(&c, token_file.path());
    let mut older = Host::new("worker-older").await;
    ignite(older.root.path(), &config);
    std::fs::remove_file(older.path("/etc/aloft/first-boot-config.json")).unwrap();
    older.start_agent(&c, &older.path("/etc/aloft/bootstrap-token"));
    let hosts = [born, plain, copied, edited, older];
    eventually(Duration::from_secs(120), "the host born with the config Done on it", || {
        let c = &c;
        let rendered = rendered.clone();
        async move {
            Ok((annotation_of(c, "worker-born", ann::CURRENT_CONFIG).await? == rendered
                && annotation_of(c, "worker-born", ann::STATE).await? == "Done")
                .then_some(()))
        }
    })
    .await;
    let [mut born, plain, copied, edited, older] = hosts;
    assert_eq!(born.reboots_asked(), 0, "taken without a reboot: {:?}", born.fake.call_strings());
    assert!(born.log().contains("written at first boot"), "{}", born.log());
    assert!(
        !born.path("/etc/aloft/first-boot-config.json").exists(),
        "the file (the pool's secrets) left after its use"
    );
    for h in [&plain, &copied] {
        eventually(Duration::from_secs(60), &format!("{} to reboot into the config", h.name), || async move {
            Ok((h.reboots_asked() > 0).then_some(()))
        })
        .await;
        assert!(!h.log().contains("written at first boot"), "{}", h.log());
    }
    // The edited host: Degraded, naming the file and the way on, its edit kept.
    let force = edited.path("/run/machine-config-daemon-force");
    let reason = eventually(Duration::from_secs(60), "the edited host to refuse its first update", || {
        let c = &c;
        async move {
            let n = node_of(c, "worker-edited").await?;
            let reason = node_annotation(&n, ann::REASON);
            Ok((node_annotation(&n, ann::STATE) == "Degraded" && reason.contains("not updating")).then_some(reason))
        }
    })
    .await;
    assert!(
        reason.starts_with(&format!(
            "unexpected on-disk state validating against {rendered}: content mismatch for file \"/etc/fleet.conf\" \
             (written at first boot); not updating to {rendered} over it: restore /etc/fleet.conf as {rendered} has it, \
             or create {}",
            force.display()
        )),
        "{reason}"
    );
    assert_eq!(std::fs::read_to_string(edited.path("/etc/fleet.conf")).unwrap(), "region=us\n");
    // Forced: the update goes on from that config, and writes the config's files over the edit
    // (as MCO's daemon, planned from the two configs: here the same one, so no reboot).
    std::fs::create_dir_all(force.parent().unwrap()).unwrap();
    std::fs::write(&force, "").unwrap();
    done_on(&c, "worker-edited", &rendered, "the edited host Done once forced").await;
    assert_eq!(std::fs::read_to_string(edited.path("/etc/fleet.conf")).unwrap(), "region=eu\n");
    assert!(!force.exists());
    assert_eq!(edited.reboots_asked(), 0, "{:?}", edited.fake.call_strings());
    drop(edited);
    // A host whose first boot left the node annotations but not the config (served by an older
    // coordinator): given the config they name, with the disk holding it, it goes from it too.
    done_on(&c, "worker-older", &rendered, "the older host Done").await;
    assert_eq!(older.reboots_asked(), 0, "{}", older.log());
    assert!(older.log().contains("written at first boot"), "{}", older.log());
    drop(older);

    // The MachineConfig removed: the files the first boot wrote go, as they would have on a
    // host that got them from the agent (not put back as if the OS had shipped them).
    admin.delete(&path_of(&MACHINE_CONFIG, Some("50-worker-fleet"))).await.unwrap().into_result().unwrap();
    eventually(Duration::from_secs(60), "the born host to reboot for the removal", || {
        let born = &born;
        async move { Ok((born.reboots_asked() > 0).then_some(())) }
    })
    .await;
    born.reboot(&c, &born.path("/etc/aloft/bootstrap-token"), "boot-2-worker-born");
    let without = eventually(Duration::from_secs(60), "the born host Done without the config", || {
        let c = &c;
        let rendered = rendered.clone();
        async move {
            let current = annotation_of(c, "worker-born", ann::CURRENT_CONFIG).await?;
            Ok((current != rendered && annotation_of(c, "worker-born", ann::STATE).await? == "Done").then_some(current))
        }
    })
    .await;
    assert!(without.starts_with("rendered-worker-"), "{without}");
    assert!(!born.path("/etc/fleet.conf").exists(), "the first boot's file was put back: {}", born.log());
    assert_eq!(
        std::fs::read_to_string(born.path("/etc/fleet-os.conf")).unwrap(),
        "os default\n",
        "the OS's file is its own again"
    );
    assert!(!born.path("/etc/systemd/system/fleet.service").exists(), "{}", born.log());

    // The late host enrolls now: the pool's config is another one than its first boot wrote.
    // Its first update goes from that one, so what only that one had goes, as on the born host.
    late.start_agent(&c, &late.path("/etc/aloft/bootstrap-token"));
    eventually(Duration::from_secs(60), "the late host to reboot into the pool's config", || {
        let late = &late;
        async move { Ok((late.reboots_asked() > 0).then_some(())) }
    })
    .await;
    late.reboot(&c, &late.path("/etc/aloft/bootstrap-token"), "boot-2-worker-late");
    done_on(&c, "worker-late", &without, "the late host Done on the pool's config").await;
    assert!(late.log().contains("updating from the config written at first boot"), "{}", late.log());
    assert!(!late.path("/etc/fleet.conf").exists(), "left behind, unmanaged: {}", late.log());
    assert_eq!(std::fs::read_to_string(late.path("/etc/fleet-os.conf")).unwrap(), "os default\n");
    assert!(!late.path("/etc/systemd/system/fleet.service").exists(), "{}", late.log());

    // The rules of the endpoint.
    let refused = get("infra", Some(&bootstrap), ignition_accept).await.unwrap();
    assert_eq!(refused.status(), 403);
    let why: Value = refused.json().await.unwrap();
    assert!(why["message"].as_str().unwrap().contains("enrolls nodes into pool \"worker\""), "{why}");
    let as_admin = get("infra", Some(&c.admin_token()), "application/json").await.unwrap();
    assert_eq!(as_admin.status(), 200);
    let infra_config: Value = as_admin.json().await.unwrap();
    assert_eq!(infra_config["ignition"]["version"], "3.5.0");
    let infra_paths: Vec<&str> =
        infra_config["storage"]["files"].as_array().unwrap().iter().filter_map(|f| f["path"].as_str()).collect();
    // (50-worker-fleet is gone by now: the node annotations and the config alone.)
    assert_eq!(
        infra_paths,
        ["/etc/machine-config-daemon/node-annotations.json", "/etc/aloft/first-boot-config.json"],
        "no agent files for an admin's request"
    );
    assert_eq!(get("worker", None, ignition_accept).await.unwrap().status(), 401);
    let missing = get("nope", Some(&c.admin_token()), ignition_accept).await.unwrap();
    assert_eq!(missing.status(), 404);
    // A bootstrap token learns nothing of other pools: 403, whether they exist or not.
    assert_eq!(get("nope", Some(&bootstrap), ignition_accept).await.unwrap().status(), 403);
    // A token whose nodes no pool selects yet: 503, to be asked again (Ignition retries a 5xx).
    let edge = c.create_token("edge", "bootstrap:node-role.kubernetes.io/edge=");
    let early = get("edge", Some(&edge), ignition_accept).await.unwrap();
    assert_eq!(early.status(), 503);
    assert!(early.headers().contains_key("retry-after"));
    // Spec-2 Ignition (what it sends): 406, not a 3.x config for its */*.
    let old = get(
        "worker",
        Some(&bootstrap),
        "application/vnd.coreos.ignition+json;version=2.2.0, application/vnd.coreos.ignition+json;version=1;q=0.5, */*;q=0.1",
    )
    .await
    .unwrap();
    assert_eq!(old.status(), 406);
    let why: Value = old.json().await.unwrap();
    assert!(why["message"].as_str().unwrap().contains("2.2.0: not served"), "{why}");
    // A token whose nodes join another pool gets no pointer config.
    let out = c.aloftctl(&[
        "adm",
        "pointer-ignition",
        "infra",
        "--bootstrap-token-file",
        token_file.path().to_str().unwrap(),
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("does not serve pool \"infra\" to this token"), "{err}");
    assert!(out.stdout.is_empty());
    let head = http
        .head(format!("{}/config/worker", c.url()))
        .bearer_auth(&bootstrap)
        .header("accept", ignition_accept)
        .send()
        .await
        .unwrap();
    assert_eq!(head.status(), 200);
    assert!(head.headers()["content-length"].to_str().unwrap().parse::<usize>().unwrap() > 100);
}

/// A host's first update from the config its first boot wrote, whose rebootless action fails
/// after the files are written: as on any node's first update, there is no config of the node's
/// own to write back, so the files stay (the first boot's config is not made current: its
/// Ignition part alone would read as that config fully taken), the node is Degraded with no
/// current config, and the retry goes on from there to Done, the file only the first boot's
/// config had gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_first_update_from_the_first_boots_config_is_tried_again() {
    let c = Coordinator::start();
    let admin = c.client();
    let bootstrap = c.create_token("fleet", "bootstrap");
    let mut pool = yaml(&testdata().join("mco/bootstrap/worker.machineconfigpool.yaml"));
    pool["spec"]["maxUnavailable"] = json!(1);
    admin.post(&path_of(&MACHINE_CONFIG_POOL, None), &pool).await.unwrap().into_result().unwrap();
    let policy = json!({"apiVersion": "operator.openshift.io/v1", "kind": "MachineConfiguration",
        "metadata": {"name": "cluster"},
        "spec": {"nodeDisruptionPolicy": {"files": [
            {"path": "/etc/fleet.conf", "actions": [{"type": "Restart", "restart": {"serviceName": "auditd.service"}}]},
            {"path": "/etc/only-first.conf", "actions": [{"type": "None"}]}]}}});
    admin.post("/apis/operator.openshift.io/v1/machineconfigurations", &policy).await.unwrap().into_result().unwrap();
    let mc_path = path_of(&MACHINE_CONFIG, Some("50-worker-fleet"));
    let mut mc = json!({"apiVersion": "machineconfiguration.openshift.io/v1", "kind": "MachineConfig",
        "metadata": {"name": "50-worker-fleet", "labels": {ann::ROLE_LABEL: "worker"}},
        "spec": {"config": {"ignition": {"version": "3.2.0"},
            "storage": {"files": [{"path": "/etc/fleet.conf", "mode": 420, "contents": {"source": "data:,one"}},
                {"path": "/etc/only-first.conf", "mode": 420, "contents": {"source": "data:,first"}}]}}}});
    admin.post(&path_of(&MACHINE_CONFIG, None), &mc).await.unwrap().into_result().unwrap();
    let target_of = || {
        let admin = admin.clone();
        async move {
            let p = admin.get(&path_of(&MACHINE_CONFIG_POOL, Some("worker"))).await?.into_result()?;
            Ok(p.pointer("/spec/configuration/name").and_then(Value::as_str).map(str::to_string))
        }
    };
    let first = eventually(Duration::from_secs(30), "the worker pool rendered", target_of).await;
    let http = reqwest::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(&c.ca_pem()).unwrap())
        .build()
        .unwrap();
    let served = http.get(format!("{}/config/worker", c.url())).bearer_auth(&bootstrap).send().await.unwrap();
    assert_eq!(served.status(), 200);
    let config: Value = served.json().await.unwrap();
    let mut h = Host::new("worker-first").await;
    ignite(h.root.path(), &config);
    // The pool moves on before the host enrolls: its file changes, the other goes.
    mc = admin.get(&mc_path).await.unwrap().into_result().unwrap();
    mc["spec"]["config"]["storage"]["files"] =
        json!([{"path": "/etc/fleet.conf", "mode": 420, "contents": {"source": "data:,two"}}]);
    admin.put(&mc_path, &mc).await.unwrap().into_result().unwrap();
    let second = eventually(Duration::from_secs(30), "the pool's next config", || {
        let target = target_of();
        let first = first.clone();
        async move { Ok(target.await?.filter(|t| *t != first)) }
    })
    .await;
    h.fake.fail_jobs_of("auditd.service", "failed");
    h.start_agent(&c, &h.path("/etc/aloft/bootstrap-token"));
    let reason = eventually(Duration::from_secs(60), "the first update failed", || {
        let c = &c;
        async move {
            let n = node_of(c, "worker-first").await?;
            let reason = node_annotation(&n, ann::REASON);
            Ok((node_annotation(&n, ann::STATE) == "Degraded" && reason.starts_with("rebootless action Restart"))
                .then_some(reason))
        }
    })
    .await;
    assert!(reason.contains("auditd.service"), "{reason}");
    assert!(h.log().contains("updating from the config written at first boot"), "{}", h.log());
    assert_eq!(std::fs::read_to_string(h.path("/etc/fleet.conf")).unwrap(), "two", "{}", h.log());
    assert!(!h.path("/etc/only-first.conf").exists(), "{}", h.log());
    let n = node_of(&c, "worker-first").await.unwrap();
    assert_eq!(node_annotation(&n, ann::CURRENT_CONFIG), "", "no config of its own: {n}");
    assert_eq!(node_annotation(&n, ann::DESIRED_CONFIG), second);
    assert!(!h.path("/var/lib/aloft/currentconfig.json").exists(), "{}", h.log());
    // The action works again: the retry takes the node to Done.
    h.fake.clear_failures();
    let hosts = [h];
    let done = converge(&c, &hosts, Some(&first), "the retry Done").await;
    assert_eq!(done, second);
    let [h] = hosts;
    assert_eq!(std::fs::read_to_string(h.path("/etc/fleet.conf")).unwrap(), "two");
    assert!(!h.path("/etc/only-first.conf").exists(), "{}", h.log());
    assert_eq!(h.reboots_asked(), 0, "rebootless by the policy: {:?}", h.fake.call_strings());
}
