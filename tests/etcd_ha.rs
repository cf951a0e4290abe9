//! Two coordinators on one real etcd, as a control plane that survives the loss of a machine:
//! one is active, the other waits as a standby and takes over when the active one dies, on the
//! same address (as behind a virtual IP); real agents on sandboxed hosts keep updating through
//! the takeover with the credentials they enrolled for at the first. A coordinator paused past
//! its lease stops by itself when it wakes, instead of acting beside the one that took over.

use aloft_coordinator::resources::{MACHINE_CONFIG, MACHINE_CONFIG_POOL, NODE};
use aloft_coordinator::store::etcd::testing::EtcdServer;
use aloft_tests::sandbox::{converge, Host};
use aloft_tests::{eventually, free_port, machine_config, path_of, Coordinator, Options};
use serde_json::{json, Value};
use std::time::{Duration, Instant};

const LEASE: &str = "3s";

fn etcd_args(etcd: &EtcdServer) -> Vec<String> {
    vec!["--etcd-servers".into(), etcd.endpoint().into(), "--active-lease-duration".into(), LEASE.into()]
}

/// The files a second coordinator needs to serve as the first: its CA and admin token.
fn shared_files(first: &Coordinator) -> Vec<(String, Vec<u8>)> {
    ["ca.crt", "ca.key", "admin.token"]
        .iter()
        .map(|f| (f.to_string(), std::fs::read(first.data_dir().join(f)).unwrap()))
        .collect()
}

/// Until `c` says it waits for the active coordinator.
async fn waits_as_standby(c: &Coordinator) {
    eventually(Duration::from_secs(30), "a coordinator to say it waits as a standby", || {
        let waiting = c.log_lines_with("standby: another coordinator is active").len();
        async move { Ok((waiting == 1).then_some(())) }
    })
    .await;
}

/// A change the nodes take without a reboot (the sandboxed hosts do not reboot by themselves):
/// SSH keys (MCO's policy: nothing), or the image policy (MCO's policy: reload crio).
fn ssh_config(key: &str) -> Value {
    let mut mc = machine_config("99-worker-ssh", "worker");
    mc["spec"]["config"]["passwd"] = json!({"users": [{"name": "core", "sshAuthorizedKeys": [key]}]});
    mc
}

fn policy_config(text: &str) -> Value {
    let mut mc = machine_config("50-worker-policy", "worker");
    mc["spec"]["config"]["storage"] = json!({"files": [{
        "path": "/etc/containers/policy.json", "mode": 420, "overwrite": true,
        "contents": {"source": format!("data:,{text}")}
    }]});
    mc
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standby_coordinator_takes_over_the_fleet_when_the_active_one_dies() {
    let etcd = EtcdServer::start();
    let port = free_port();
    let first =
        Coordinator::start_with(Options { args: etcd_args(&etcd), listen_port: Some(port), ..Default::default() });
    assert_eq!(first.log_lines_with("this coordinator is the active one").len(), 1, "{}", first.log_tail());
    let admin = first.client();
    let bootstrap = first.create_token("fleet", "bootstrap");
    let token_file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(token_file.path(), &bootstrap).unwrap();

    // The standby: same address, CA and admin token; it waits and does not serve.
    let mut second = Coordinator::start_standby(Options {
        args: etcd_args(&etcd),
        listen_port: Some(port),
        data_files: shared_files(&first),
        ..Default::default()
    });
    waits_as_standby(&second).await;

    let mut hosts = Vec::new();
    for i in 0..2 {
        let mut h = Host::new(&format!("worker-{i}")).await;
        h.start_agent(&first, token_file.path());
        hosts.push(h);
    }
    let mut pool = aloft_tests::machine_config_pool("worker", "worker");
    pool["spec"]["maxUnavailable"] = json!(2);
    admin.post(&path_of(&MACHINE_CONFIG_POOL, None), &pool).await.unwrap().into_result().unwrap();
    let one = ssh_config("ssh-ed25519 AAAA first");
    admin.post(&path_of(&MACHINE_CONFIG, None), &one).await.unwrap().into_result().unwrap();
    let before = converge(&first, &hosts, None, "both nodes Done on the first coordinator's config").await;
    assert!(!second.serving_yet());
    assert!(second.exited().is_none(), "the standby waits: {}", second.log_tail());

    // The active one dies; the standby takes over within the lease.
    let mut first = first;
    let died = Instant::now();
    first.kill9();
    second.wait_serving(Duration::from_secs(30));
    let took = died.elapsed();
    eprintln!("the standby served {:.2} s after the active coordinator died (lease {LEASE})", took.as_secs_f64());
    assert!(took < Duration::from_secs(20), "took over after {took:?}");
    assert_eq!(second.log_lines_with("this coordinator is the active one").len(), 1);

    // Everything is there, and the fleet goes on updating through the second one: the agents
    // reconnect to the same address with the credentials the first coordinator minted.
    let admin = second.client();
    let rendered = admin.get(&path_of(&MACHINE_CONFIG, Some(&before))).await.unwrap().into_result().unwrap();
    assert_eq!(rendered["metadata"]["name"], before.as_str());
    let two = policy_config("second");
    admin.post(&path_of(&MACHINE_CONFIG, None), &two).await.unwrap().into_result().unwrap();
    let after = converge(&second, &hosts, Some(&before), "both nodes Done on the second coordinator's config").await;
    assert_ne!(before, after);
    for h in &hosts {
        assert_eq!(std::fs::read_to_string(h.path("/etc/containers/policy.json")).unwrap(), "second", "{}", h.log());
        let keys = std::fs::read_to_string(h.path("/home/core/.ssh/authorized_keys.d/ignition")).unwrap();
        assert_eq!(keys.trim(), "ssh-ed25519 AAAA first");
        assert!(h.fake.reboots().is_empty(), "nothing rebooted: {:?}", h.fake.call_strings());
    }
    let tokens = std::process::Command::new(aloft_tests::bin("aloft-coordinator"))
        .args(["token", "list", "--etcd-servers", etcd.endpoint(), "--data-dir"])
        .arg(second.data_dir())
        .output()
        .unwrap();
    let listed = String::from_utf8_lossy(&tokens.stdout);
    for name in ["admin", "fleet", "node:worker-0", "node:worker-1"] {
        assert!(listed.lines().any(|l| l.starts_with(name)), "{name} in:\n{listed}");
    }

    // Paused past its lease, the active one is replaced; woken, it stops by itself.
    let mut third = Coordinator::start_standby(Options {
        args: etcd_args(&etcd),
        data_files: shared_files(&second),
        ..Default::default()
    });
    let pid = nix::unistd::Pid::from_raw(second.pid() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGSTOP).unwrap();
    third.wait_serving(Duration::from_secs(30));
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGCONT).unwrap();
    let status = eventually(Duration::from_secs(30), "the woken coordinator to stop", || {
        let status = second.exited();
        async move { Ok(status) }
    })
    .await;
    assert!(!status.success(), "it stops with an error");
    assert!(!second.log_lines_with("no longer the active one").is_empty(), "it says why: {}", second.log_tail());
    // A standby stops at SIGTERM while it waits (systemctl stop), at once and cleanly.
    let mut fourth = Coordinator::start_standby(Options {
        args: etcd_args(&etcd),
        data_files: shared_files(&third),
        ..Default::default()
    });
    waits_as_standby(&fourth).await;
    let pid = nix::unistd::Pid::from_raw(fourth.pid() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    let status = eventually(Duration::from_secs(10), "the standby to stop at SIGTERM", || {
        let status = fourth.exited();
        async move { Ok(status) }
    })
    .await;
    assert!(status.success(), "a standby stopped by SIGTERM exits cleanly: {}", fourth.log_tail());
    // The one that took over answers, with the fleet's state.
    let nodes = third.client().get(&path_of(&NODE, None)).await.unwrap().into_result().unwrap();
    assert_eq!(nodes["items"].as_array().map(Vec::len), Some(2));
}
