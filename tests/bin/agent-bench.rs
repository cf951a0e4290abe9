//! agent-bench: the node agent's costs, measured against baselines in the same run.
//!
//! 1. Idle: a real aloft-agent enrolled with a real coordinator on a sandboxed root (private bus,
//!    test systemd), Done and watching; its RSS and CPU time sampled from /proc over a window.
//! 2. Apply: time from setting a MachineConfig of 100 files + 5 units on the pool (rebootless by
//!    a node disruption policy) to the node reporting Done, against a baseline that writes the
//!    same 100 files and 5 unit files with plain std::fs in the same process.
//!
//! Usage: cargo run --release -p aloft-tests --bin agent-bench -- [IDLE_SECONDS] [ROUNDS]

use aloft_agent::testing::{FakeSystemd, TestBus};
use aloft_api::annotations as ann;
use aloft_coordinator::resources::{MACHINE_CONFIG, MACHINE_CONFIG_POOL, NODE};
use aloft_tests::{bin, path_of, proc_usage, Coordinator};
use serde_json::{json, Value};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn config(round: usize) -> Value {
    let files: Vec<Value> = (0..100)
        .map(|i| {
            json!({"path": format!("/etc/bench/f{i:03}.conf"), "mode": 420, "overwrite": true,
                        "contents": {"source": format!("data:,round%20{round}%20file%20{i}%0A{}", "x".repeat(200))}})
        })
        .collect();
    let units: Vec<Value> = (0..5)
        .map(|i| json!({"name": format!("bench-{i}.service"), "enabled": true,
                        "contents": format!("[Unit]\nDescription=bench {i} round {round}\n[Service]\nExecStart=/bin/true\n[Install]\nWantedBy=multi-user.target\n")}))
        .collect();
    json!({"apiVersion": "machineconfiguration.openshift.io/v1", "kind": "MachineConfig",
           "metadata": {"name": "50-worker-bench", "labels": {ann::ROLE_LABEL: "worker"}},
           "spec": {"config": {"ignition": {"version": "3.4.0"}, "storage": {"files": files}, "systemd": {"units": units}}}})
}

fn baseline(dir: &std::path::Path, round: usize) -> Duration {
    let t = Instant::now();
    std::fs::create_dir_all(dir.join("etc/bench")).unwrap();
    std::fs::create_dir_all(dir.join("etc/systemd/system")).unwrap();
    for i in 0..100 {
        std::fs::write(
            dir.join(format!("etc/bench/f{i:03}.conf")),
            format!("round {round} file {i}\n{}", "x".repeat(200)),
        )
        .unwrap();
    }
    for i in 0..5 {
        std::fs::write(
            dir.join(format!("etc/systemd/system/bench-{i}.service")),
            format!("[Unit]\nDescription=bench {i} round {round}\n"),
        )
        .unwrap();
    }
    t.elapsed()
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "-h" || a == "--help") {
        println!(
            "agent-bench [IDLE_SECONDS] [ROUNDS]: the agent's idle RSS and CPU over IDLE_SECONDS (60), then \
             desiredConfig to Done of 100 files + 5 units, ROUNDS (10) times, against plain std::fs writes"
        );
        return;
    }
    let number = |i: usize, default: u64| match args.get(i) {
        None => default,
        Some(a) => a.parse().unwrap_or_else(|_| {
            eprintln!("agent-bench: {a:?} is not a number (agent-bench [IDLE_SECONDS] [ROUNDS]; --help)");
            std::process::exit(2)
        }),
    };
    let idle_secs = number(0, 60);
    let rounds = number(1, 10).max(1) as usize;
    let c = Coordinator::start();
    let admin = c.client();
    let root = tempfile::tempdir().unwrap();
    for d in ["etc/systemd/system", "home/core", "proc/sys/kernel/random"] {
        std::fs::create_dir_all(root.path().join(d)).unwrap();
    }
    std::fs::write(root.path().join("etc/passwd"), "root:x:0:0::/root:/bin/sh\ncore:x:1000:1000::/home/core:/bin/sh\n")
        .unwrap();
    std::fs::write(root.path().join("etc/group"), "root:x:0:\ncore:x:1000:\n").unwrap();
    std::fs::write(root.path().join("proc/sys/kernel/random/boot_id"), "bench\n").unwrap();
    let bus = TestBus::start().unwrap();
    let fake = FakeSystemd::serve(&bus, root.path()).await.unwrap();
    let token = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(token.path(), c.create_token("bench", "bootstrap")).unwrap();
    // Rebootless by policy: the bench files and units need no action.
    let units: Vec<Value> =
        (0..5).map(|i| json!({"name": format!("bench-{i}.service"), "actions": [{"type": "None"}]})).collect();
    admin
        .post("/apis/operator.openshift.io/v1/machineconfigurations", &json!({
            "apiVersion": "operator.openshift.io/v1", "kind": "MachineConfiguration", "metadata": {"name": "cluster"},
            "spec": {"nodeDisruptionPolicy": {"files": [{"path": "/etc/bench", "actions": [{"type": "None"}]}], "units": units}}}))
        .await.unwrap().into_result().unwrap();
    let pool = json!({"apiVersion": "machineconfiguration.openshift.io/v1", "kind": "MachineConfigPool", "metadata": {"name": "worker"},
        "spec": {"machineConfigSelector": {"matchLabels": {ann::ROLE_LABEL: "worker"}}, "nodeSelector": {"matchLabels": {"node-role.kubernetes.io/worker": ""}}}});
    admin.post(&path_of(&MACHINE_CONFIG_POOL, None), &pool).await.unwrap().into_result().unwrap();
    admin.post(&path_of(&MACHINE_CONFIG, None), &config(0)).await.unwrap().into_result().unwrap();
    let mut agent = Command::new(bin("aloft-agent"))
        .args([
            "--coordinator",
            c.url(),
            "--node-name",
            "bench-0",
            "--metrics-listen",
            "",
            "--bus-address",
            bus.address(),
        ])
        .arg("--ca")
        .arg(c.ca_path())
        .arg("--bootstrap-token-file")
        .arg(token.path())
        .arg("--root")
        .arg(root.path())
        .env("ALOFT_LOG", std::env::var("ALOFT_LOG").unwrap_or_else(|_| "warn".into()))
        .stdout(Stdio::null())
        // ALOFT_LOG=info puts the agent's phase timestamps here, to see where the time goes.
        .stderr(std::fs::File::create(std::env::temp_dir().join("agent-bench.log")).unwrap())
        .spawn()
        .unwrap();
    let done_on = |want: Option<String>| {
        let admin = admin.clone();
        async move {
            loop {
                if let Ok(r) = admin.get(&path_of(&NODE, Some("bench-0"))).await {
                    let a = |k: &str| {
                        r.body
                            .pointer("/metadata/annotations")
                            .and_then(|x| x.get(k))
                            .and_then(Value::as_str)
                            .unwrap_or("")
                            .to_string()
                    };
                    let target = a(ann::DESIRED_CONFIG);
                    if a(ann::STATE) == "Done"
                        && !target.is_empty()
                        && a(ann::CURRENT_CONFIG) == target
                        && want.as_ref().is_none_or(|w| *w != target)
                    {
                        return target;
                    }
                }
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        }
    };
    let mut current = done_on(None).await;
    // Idle.
    let pid = agent.id();
    let u0 = proc_usage(pid);
    let start = Instant::now();
    let mut peak = u0.rss_kb;
    while start.elapsed() < Duration::from_secs(idle_secs) {
        tokio::time::sleep(Duration::from_millis(500)).await;
        peak = peak.max(proc_usage(pid).rss_kb);
    }
    let u1 = proc_usage(pid);
    let rss1 = u1.rss_kb;
    let cpu_s = u1.cpu_s - u0.cpu_s;
    println!(
        "agent-bench: idle for {idle_secs} s: RSS {:.1} MiB (peak {:.1} MiB), CPU {:.3} s ({:.3}% of one core)",
        rss1 as f64 / 1024.0,
        peak as f64 / 1024.0,
        cpu_s,
        100.0 * cpu_s / idle_secs as f64
    );
    // Apply rounds.
    let mut applies = Vec::new();
    let mut bases = Vec::new();
    let base_dir = tempfile::tempdir().unwrap();
    for round in 1..=rounds {
        bases.push(baseline(base_dir.path(), round));
        // A merge patch of the spec: an update needs the stored resourceVersion, a patch does not.
        let spec = json!({"spec": config(round)["spec"].clone()});
        admin
            .patch(&path_of(&MACHINE_CONFIG, Some("50-worker-bench")), "application/merge-patch+json", &spec)
            .await
            .unwrap()
            .into_result()
            .unwrap();
        // The clock starts when the node controller sets the node's desiredConfig.
        let t = loop {
            let r = admin.get(&path_of(&NODE, Some("bench-0"))).await.unwrap();
            let desired = r
                .body
                .pointer("/metadata/annotations")
                .and_then(|x| x.get(ann::DESIRED_CONFIG))
                .and_then(Value::as_str)
                .unwrap_or("");
            if desired != current {
                break Instant::now();
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        };
        current = done_on(Some(current)).await;
        applies.push(t.elapsed());
    }
    assert!(fake.reboots().is_empty(), "the bench change must be rebootless");
    applies.sort();
    bases.sort();
    let med = |v: &[Duration]| v[v.len() / 2];
    println!("agent-bench: {rounds} rounds of 100 files + 5 units, node desiredConfig set -> node Done (agent: fetch, validate, journal, atomic fsynced writes, unit calls over D-Bus, report)");
    println!(
        "  median apply {:.1} ms (min {:.1}, max {:.1})",
        ms(med(&applies)),
        ms(applies[0]),
        ms(applies[applies.len() - 1])
    );
    println!("  median baseline, same files with plain std::fs::write: {:.2} ms", ms(med(&bases)));
    println!("  ratio {:.1}x (target < 3x)", med(&applies).as_secs_f64() / med(&bases).as_secs_f64());
    let _ = agent.kill();
    let _ = agent.wait();
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}
