//! The real `kubectl` as a client of the coordinator: apply (twice), get with server-side
//! printing, -o yaml, patch, get -w, delete, nodes, errors. kubectl must be on PATH; without it
//! the tests pass with a note unless ALOFT_REQUIRE_KUBECTL is set (scripts/test.sh sets it).

use aloft_tests::*;
use serde_json::{json, Value};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// A child process killed (SIGKILL) and reaped when dropped, also when the test fails.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// How kubectl is pointed at the coordinator.
enum Auth {
    /// `--server URL --token T --certificate-authority DIR/ca.crt`
    Flags { token: String },
    /// `--kubeconfig DIR/admin.kubeconfig`
    Kubeconfig,
}

struct Kubectl {
    exe: PathBuf,
    /// HOME for kubectl: an empty one, so no user config or discovery cache leaks in.
    home: tempfile::TempDir,
    args: Vec<String>,
}

impl Kubectl {
    fn new(exe: PathBuf, c: &Coordinator, auth: Auth) -> Self {
        let args = match auth {
            Auth::Flags { token } => vec![
                format!("--server={}", c.url()),
                format!("--token={token}"),
                format!("--certificate-authority={}", c.ca_path().display()),
            ],
            Auth::Kubeconfig => vec![format!("--kubeconfig={}", c.kubeconfig_path().display())],
        };
        Kubectl { exe, home: tempfile::tempdir().unwrap(), args }
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(&self.exe);
        cmd.args(&self.args)
            .arg("--request-timeout=30s")
            .args(args)
            .env("HOME", self.home.path())
            .env_remove("KUBECONFIG")
            .stdin(Stdio::null());
        cmd
    }

    fn run(&self, args: &[&str]) -> Output {
        self.command(args).output().expect("run kubectl")
    }

    /// Run; must succeed; returns stdout.
    #[track_caller]
    fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(
            out.status.success(),
            "kubectl {} failed ({}):\nstdout: {}\nstderr: {}\n(re-run with -v=8 to see the requests)",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    /// Run; must fail; returns stderr.
    #[track_caller]
    fn fails(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(
            !out.status.success(),
            "kubectl {} should fail; stdout: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stdout)
        );
        String::from_utf8(out.stderr).unwrap()
    }
}

fn mco_file(rel: &str) -> String {
    testdata().join("mco").join(rel).display().to_string()
}

/// Columns of the header line of a kubectl table.
fn header(out: &str) -> Vec<&str> {
    out.lines().next().unwrap_or("").split_whitespace().collect()
}

/// The row whose first column is `name`.
fn row<'a>(out: &'a str, name: &str) -> Option<Vec<&'a str>> {
    out.lines().skip(1).map(|l| l.split_whitespace().collect::<Vec<_>>()).find(|cols| cols.first() == Some(&name))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_apply_get_patch_watch_delete() {
    let Some(exe) = kubectl_path() else { return };
    let c = Coordinator::start();
    let admin = c.client();
    let k = Kubectl::new(exe, &c, Auth::Flags { token: c.admin_token() });

    let pool = mco_file("bootstrap/worker.machineconfigpool.yaml");
    let ssh = mco_file("bootstrap/99_openshift-machineconfig_worker.yaml");
    let server_pool = mco_file("server/machine-pools/test-pool.yaml");
    let server_mc = mco_file("server/machine-configs/test-config.yaml");
    let out = k.ok(&["apply", "-f", &pool]);
    assert!(out.contains("machineconfigpool.machineconfiguration.openshift.io/worker created"), "{out}");
    let out = k.ok(&["apply", "-f", &ssh]);
    assert!(out.contains("machineconfig.machineconfiguration.openshift.io/99-worker-ssh created"), "{out}");
    let out = k.ok(&["apply", "-f", &server_mc]);
    assert!(out.contains("machineconfig.machineconfiguration.openshift.io/test-config created"), "{out}");
    // MCO's fixture pool selects only `role: test` configs: OpenShift 4.18+ refuses it, and so
    // does aloft, with its words; the same pool inheriting worker is created.
    let err = k.fails(&["apply", "-f", &server_pool]);
    assert!(
        err.contains("spec.machineConfigSelector")
            && err.contains("All custom MachineConfigPools must inherit from the worker pool"),
        "{err}"
    );
    let inheriting = std::fs::read_to_string(&server_pool).unwrap().replace(
        "matchLabels:\n      machineconfiguration.openshift.io/role: test",
        "matchExpressions:\n    - {key: machineconfiguration.openshift.io/role, operator: In, values: [worker, test]}",
    );
    let dir = tempfile::tempdir().unwrap();
    let inheriting_file = dir.path().join("test-pool.yaml");
    std::fs::write(&inheriting_file, inheriting).unwrap();
    let out = k.ok(&["apply", "-f", inheriting_file.to_str().unwrap()]);
    assert!(out.contains("machineconfigpool.machineconfiguration.openshift.io/test-pool created"), "{out}");
    let stored = get_ok(&admin, &MACHINE_CONFIG, "99-worker-ssh").await;
    assert_eq!(stored["spec"]["config"]["passwd"]["users"][0]["sshAuthorizedKeys"][0], "ssh-rsa SSH-AUTHORIZED-KEY");
    assert!(
        stored["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"].is_string(),
        "client-side apply keeps its annotation"
    );
    let ssh_rv = rv(&stored);

    // Applying the same files again changes nothing.
    let out = k.ok(&["apply", "-f", &pool, "-f", &ssh, "-f", &server_mc]);
    for name in ["worker", "99-worker-ssh", "test-config"] {
        assert!(
            out.lines()
                .any(|l| l.contains(&format!("/{name} ")) && (l.ends_with("unchanged") || l.ends_with("configured"))),
            "second apply of {name}: {out}"
        );
    }
    assert!(out.contains("99-worker-ssh unchanged"), "an identical re-apply is `unchanged`: {out}");
    assert_eq!(rv(&get_ok(&admin, &MACHINE_CONFIG, "99-worker-ssh").await), ssh_rv, "an unchanged apply wrote nothing");

    // Server-side printing with MCO's columns.
    let out = k.ok(&["get", "machineconfigpools"]);
    assert_eq!(
        header(&out),
        vec![
            "NAME",
            "CONFIG",
            "UPDATED",
            "UPDATING",
            "DEGRADED",
            "MACHINECOUNT",
            "READYMACHINECOUNT",
            "UPDATEDMACHINECOUNT",
            "DEGRADEDMACHINECOUNT",
            "AGE"
        ],
        "{out}"
    );
    assert!(row(&out, "worker").is_some() && row(&out, "test-pool").is_some(), "{out}");
    let out = k.ok(&["get", "mc"]);
    assert_eq!(&header(&out)[..4], ["NAME", "GENERATEDBYCONTROLLER", "IGNITIONVERSION", "AGE"], "{out}");
    let r = row(&out, "99-worker-ssh").unwrap_or_else(|| panic!("no 99-worker-ssh row: {out}"));
    assert_eq!(r[1], "3.2.0", "{out}");
    // In pages (kubectl asks for 500 at a time by default; here 1): the same rows, Table and JSON.
    let names = |out: &str| {
        out.lines().skip(1).map(|l| l.split_whitespace().next().unwrap_or("").to_string()).collect::<Vec<_>>()
    };
    let paged = k.ok(&["get", "mc", "--chunk-size=1"]);
    assert_eq!(names(&paged), names(&out), "{paged}");
    assert!(names(&paged).len() >= 2, "more than one page: {paged}");
    let traced = k.run(&["get", "mc", "--chunk-size=1", "-o", "name", "-v=6"]);
    let requests = String::from_utf8_lossy(&traced.stderr);
    assert!(
        requests.contains("limit=1") && requests.contains("continue="),
        "kubectl followed the continue token: {requests}"
    );
    assert_eq!(
        k.ok(&["get", "mc", "--chunk-size=1", "-o", "name"]),
        k.ok(&["get", "mc", "--chunk-size=0", "-o", "name"])
    );
    let out = k.ok(&["get", "mcp", "worker", "-o", "yaml"]);
    let y: Value = yaml_serde::from_str(&out).unwrap();
    assert_eq!(
        (y["kind"].as_str(), y["metadata"]["name"].as_str()),
        (Some("MachineConfigPool"), Some("worker")),
        "{out}"
    );
    assert_eq!(y["spec"]["machineConfigSelector"]["matchLabels"]["machineconfiguration.openshift.io/role"], "worker");
    assert_eq!(y["metadata"]["labels"]["machineconfiguration.openshift.io/mco-built-in"], "");
    let out =
        k.ok(&["get", "machineconfigpool.machineconfiguration.openshift.io/worker", "-o", "jsonpath={.metadata.name}"]);
    assert_eq!(out, "worker");

    // Patches: merge, JSON, and kubectl's default (strategic).
    let out = k.ok(&["patch", "mcp", "worker", "--type", "merge", "-p", r#"{"spec":{"paused":true}}"#]);
    assert!(out.contains("worker patched"), "{out}");
    assert_eq!(
        get_ok(&admin, &MACHINE_CONFIG_POOL, "worker").await["spec"]["paused"],
        true,
        "kubectl patch --type merge"
    );
    k.ok(&[
        "patch",
        "mcp",
        "worker",
        "--type",
        "json",
        "-p",
        r#"[{"op":"replace","path":"/spec/paused","value":false}]"#,
    ]);
    assert_eq!(
        get_ok(&admin, &MACHINE_CONFIG_POOL, "worker").await["spec"]["paused"],
        false,
        "kubectl patch --type json"
    );
    k.ok(&["patch", "mcp", "worker", "-p", r#"{"spec":{"maxUnavailable":2}}"#]);
    assert_eq!(
        get_ok(&admin, &MACHINE_CONFIG_POOL, "worker").await["spec"]["maxUnavailable"],
        2,
        "kubectl patch (strategic)"
    );
    k.ok(&["label", "mc", "99-worker-ssh", "tier=gold"]);
    k.ok(&["annotate", "mcp", "worker", "note=hello"]);
    assert_eq!(get_ok(&admin, &MACHINE_CONFIG, "99-worker-ssh").await["metadata"]["labels"]["tier"], "gold");
    assert_eq!(
        k.ok(&["get", "mc", "-l", "tier=gold", "-o", "name"]).trim(),
        "machineconfig.machineconfiguration.openshift.io/99-worker-ssh"
    );

    // get -w: the initial table, then a line per change.
    let mut watch = KillOnDrop(
        k.command(&["get", "mcp", "-w"])
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn kubectl get -w"),
    );
    let (tx, rx) = mpsc::channel::<String>();
    let stdout = watch.0.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let wait_line = |pred: &dyn Fn(&str) -> bool, what: &str, seen: &mut Vec<String>| {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match rx.recv_timeout(left) {
                Ok(l) => {
                    let hit = pred(&l);
                    seen.push(l);
                    if hit {
                        return;
                    }
                }
                Err(_) => panic!("kubectl get -w: no line for {what} within 20s; saw {seen:#?}"),
            }
        }
    };
    let mut seen = Vec::new();
    wait_line(&|l| l.starts_with("NAME "), "the header", &mut seen);
    wait_line(&|l| l.starts_with("worker "), "the worker row", &mut seen);
    let mut infra = machine_config_pool("infra", "infra");
    infra["metadata"]["labels"] = json!({"x": "y"});
    let r = admin.post(&path_of(&MACHINE_CONFIG_POOL, None), &infra).await.unwrap();
    assert_eq!(r.code, 201, "{}", r.body);
    wait_line(&|l| l.starts_with("infra "), "the new infra pool", &mut seen);
    assert!(watch.0.try_wait().unwrap().is_none(), "kubectl get -w keeps watching");
    drop(watch);

    // Delete.
    let out = k.ok(&["delete", "mc", "test-config"]);
    assert!(out.contains("\"test-config\" deleted"), "{out}");
    assert_eq!(admin.get(&path_of(&MACHINE_CONFIG, Some("test-config"))).await.unwrap().code, 404);
    let err = k.fails(&["delete", "mc", "test-config"]);
    assert!(err.contains("NotFound") || err.contains("not found"), "{err}");
    let err = k.fails(&["get", "mc", "no-such-config"]);
    assert!(err.contains("not found"), "{err}");

    // Nodes: empty, then one with the node columns.
    let out = k.run(&["get", "nodes"]);
    assert!(out.status.success(), "kubectl get nodes: {}", String::from_utf8_lossy(&out.stderr));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("No resources found"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let node = json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": "node-a", "labels": {"node-role.kubernetes.io/infra": ""}},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]},
    });
    assert_eq!(admin.post(&path_of(&NODE, None), &node).await.unwrap().code, 201);
    let out = k.ok(&["get", "nodes"]);
    let r = row(&out, "node-a").unwrap_or_else(|| panic!("{out}"));
    // Ready (cordoned too, once the infra pool picks it for its first config).
    assert!(r[1].starts_with("Ready") && r[2] == "infra", "{out}");
    assert_eq!(k.ok(&["get", "no", "node-a", "-o", "jsonpath={.metadata.name}"]), "node-a");

    // Refusals come back as kubectl errors naming the field, and nothing is stored.
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.yaml");
    std::fs::write(
        &bad,
        "apiVersion: machineconfiguration.openshift.io/v1\nkind: MachineConfigPool\nmetadata:\n  name: bad-pool\nspec:\n  maxUnavailable: lots\n",
    )
    .unwrap();
    let err = k.fails(&["apply", "-f", bad.to_str().unwrap()]);
    assert!(err.contains("spec.maxUnavailable"), "the error names the field: {err}");
    assert_eq!(admin.get(&path_of(&MACHINE_CONFIG_POOL, Some("bad-pool"))).await.unwrap().code, 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_with_the_generated_kubeconfig() {
    let Some(exe) = kubectl_path() else { return };
    let c = Coordinator::start();
    let admin = c.client();
    let k = Kubectl::new(exe.clone(), &c, Auth::Kubeconfig);

    let out = k.ok(&[
        "apply",
        "-f",
        &mco_file("bootstrap/master.machineconfigpool.yaml"),
        "-f",
        &mco_file("bootstrap/99_openshift-machineconfig_master.yaml"),
    ]);
    assert!(out.contains("machineconfigpool.machineconfiguration.openshift.io/master created"), "{out}");
    assert!(out.contains("machineconfig.machineconfiguration.openshift.io/99-master-ssh created"), "{out}");
    let out = k.ok(&["get", "mcp", "master", "-o", "json"]);
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["metadata"]["name"], "master");

    // Discovery as kubectl sees it: MCO kinds with their short names.
    let out = k.ok(&["api-resources", "--api-group=machineconfiguration.openshift.io"]);
    let mc = row(&out, "machineconfigs").unwrap_or_else(|| panic!("{out}"));
    assert!(mc.contains(&"mc") && mc.contains(&"MachineConfig"), "{out}");
    let mcp = row(&out, "machineconfigpools").unwrap_or_else(|| panic!("{out}"));
    assert!(mcp.contains(&"mcp") && mcp.contains(&"false"), "cluster-scoped: {out}");
    let out = k.ok(&["version", "-o", "json"]);
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["serverVersion"]["major"], "1", "{out}");

    // A viewer token reads and is refused writes, as kubectl reports Forbidden.
    let token = c.create_token("kubectl-viewer", "viewer");
    let viewer = Kubectl::new(exe.clone(), &c, Auth::Flags { token });
    assert!(row(&viewer.ok(&["get", "mcp"]), "master").is_some());
    let err = viewer.fails(&["delete", "mc", "99-master-ssh"]);
    assert!(err.contains("Forbidden") || err.contains("forbidden"), "{err}");
    let err = viewer.fails(&["patch", "mcp", "master", "--type", "merge", "-p", r#"{"spec":{"paused":true}}"#]);
    assert!(err.contains("orbidden"), "{err}");
    assert_ne!(get_ok(&admin, &MACHINE_CONFIG_POOL, "master").await["spec"]["paused"], true);
    get_ok(&admin, &MACHINE_CONFIG, "99-master-ssh").await;
    // A bad token is Unauthorized, and a wrong CA fails verification.
    let anon = Kubectl::new(exe.clone(), &c, Auth::Flags { token: "aloft_nope".into() });
    let err = anon.fails(&["get", "mcp"]);
    assert!(err.contains("Unauthorized") || err.contains("must be logged in"), "{err}");
    let other = Coordinator::start();
    let mut wrong_ca = Kubectl::new(exe, &c, Auth::Flags { token: c.admin_token() });
    wrong_ca.args[2] = format!("--certificate-authority={}", other.ca_path().display());
    let err = wrong_ca.fails(&["get", "mcp"]);
    assert!(err.contains("certificate"), "{err}");
    assert!(Path::new(&c.kubeconfig_path()).exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_describe_shows_the_objects_events() {
    let Some(exe) = kubectl_path() else { return };
    let c = Coordinator::start();
    let admin = c.client();
    let k = Kubectl::new(exe, &c, Auth::Kubeconfig);
    k.ok(&["apply", "-f", &mco_file("bootstrap/worker.machineconfigpool.yaml")]);
    let pool = get_ok(&admin, &MACHINE_CONFIG_POOL, "worker").await;
    // Events about cluster-scoped objects live in `default`, as in Kubernetes.
    let now = "2026-01-01T00:00:00Z";
    let event = json!({
        "apiVersion": "v1", "kind": "Event",
        "metadata": {"name": "worker.aloft-test", "namespace": "default"},
        "involvedObject": {"apiVersion": "machineconfiguration.openshift.io/v1", "kind": "MachineConfigPool", "name": "worker", "uid": pool["metadata"]["uid"]},
        "reason": "AloftTestReason", "message": "an event the test wrote", "type": "Warning",
        "firstTimestamp": now, "lastTimestamp": now, "count": 1, "source": {"component": "aloft-tests"},
    });
    let r = admin.post(&resource_path(EVENT.path_ref(), Some("default"), None), &event).await.unwrap();
    assert_eq!(r.code, 201, "{}", r.body);
    let out = k.ok(&["get", "events", "-n", "default"]);
    assert!(out.contains("AloftTestReason"), "kubectl get events: {out}");
    // `kubectl describe` lists the object's events with
    // GET /api/v1/events?fieldSelector=involvedObject.name=worker,involvedObject.namespace=,
    //     involvedObject.kind=MachineConfigPool,involvedObject.uid=<uid>
    let out = k.ok(&["describe", "mcp", "worker"]);
    assert!(out.contains("Name:") && out.contains("worker"), "{out}");
    assert!(
        out.contains("AloftTestReason") && out.contains("an event the test wrote"),
        "kubectl describe shows the pool's events (needs fieldSelector involvedObject.* on /api/v1/events):\n{out}"
    );
}

/// The controllers' own Events show in `kubectl describe mcp|node`, which selects them by
/// `involvedObject.uid`; `kubectl describe node` works at all (it lists the node's pods, which
/// aloft serves as an empty list); and a pool deleted and created again under its name does not
/// show the Events about the one before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_describe_shows_the_controllers_events_on_pools_and_nodes() {
    let Some(exe) = kubectl_path() else { return };
    let c = Coordinator::start();
    let admin = c.client();
    let k = Kubectl::new(exe, &c, Auth::Kubeconfig);
    let pool_file = mco_file("bootstrap/worker.machineconfigpool.yaml");
    k.ok(&["apply", "-f", &pool_file]);
    let node = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1",
        "labels": {"node-role.kubernetes.io/worker": ""}, "annotations": {"machineconfiguration.openshift.io/state": "Done"}}});
    assert_eq!(admin.post(&path_of(&NODE, None), &node).await.unwrap().code, 201);
    let ready = json!({"status": {"conditions": [{"type": "Ready", "status": "True"}]}});
    let status = format!("{}/status", path_of(&NODE, Some("n1")));
    admin.patch(&status, "application/merge-patch+json", &ready).await.unwrap().into_result().unwrap();
    assert_eq!(
        admin.post(&path_of(&MACHINE_CONFIG, None), &machine_config("50-test", "worker")).await.unwrap().code,
        201
    );

    // The node controller targets n1: a SetDesiredConfig Event on the pool.
    let out = eventually(Duration::from_secs(60), "kubectl describe mcp worker to show SetDesiredConfig", || async {
        let out = k.ok(&["describe", "mcp", "worker"]);
        Ok(out.contains("SetDesiredConfig").then_some(out))
    })
    .await;
    assert!(out.contains("Targeted node n1 to rendered-worker-"), "{out}");
    assert!(out.contains("aloft-node-controller"), "the Event's source: {out}");
    // In the order they were written (kubectl sorts by lastTimestamp alone, which aloft writes
    // to the microsecond: several decisions of one second were shown scrambled).
    let path = format!("{}?fieldSelector=involvedObject.name%3Dworker", path_of(&EVENT, None));
    let list = admin.get(&path).await.unwrap().into_result().unwrap();
    let mut events = list["items"].as_array().cloned().unwrap_or_default();
    if aloft_tests::stores_on_etcd() {
        // On etcd the Events a controller writes together are written at once, and etcd may
        // commit them in another order than they were decided (and stamped): their
        // resourceVersions do not say the decisions' order there; their timestamps do.
        events.sort_by(|a, b| a["lastTimestamp"].as_str().cmp(&b["lastTimestamp"].as_str()));
    } else {
        events.sort_by_key(|e| e["metadata"]["resourceVersion"].as_str().and_then(|r| r.parse::<u64>().ok()));
    }
    let at: Vec<usize> = events
        .iter()
        .filter_map(|e| e["message"].as_str())
        .map(|m| out.find(m).unwrap_or_else(|| panic!("{m} not in:\n{out}")))
        .collect();
    assert!(!at.is_empty() && at.windows(2).all(|w| w[0] < w[1]), "{at:?}\n{out}");

    // n1 asks for a drain (the pick's own drain was acknowledged with the pick): a Drained
    // Event on the node, and `kubectl describe node` shows it.
    let desired = "rendered-worker-other";
    let ask = json!({"metadata": {"annotations": {"machineconfiguration.openshift.io/desiredDrain": format!("drain-{desired}")}}});
    admin
        .patch(&path_of(&NODE, Some("n1")), "application/merge-patch+json", &ask)
        .await
        .unwrap()
        .into_result()
        .unwrap();
    let out = eventually(Duration::from_secs(60), "kubectl describe node n1 to show Drained", || async {
        let out = k.ok(&["describe", "node", "n1"]);
        Ok(out.contains("Drained").then_some(out))
    })
    .await;
    assert!(out.contains("Name:") && out.contains("n1"), "{out}");
    assert!(
        out.contains("machineconfiguration.openshift.io/desiredConfig: rendered-worker-"),
        "the annotations: {out}"
    );
    assert!(out.contains(&format!("cordoned and drained for {desired}")), "{out}");

    // Another pool of the same name: the Events about the one before stay, but not on it.
    k.ok(&["delete", "mcp", "worker"]);
    k.ok(&["apply", "-f", &pool_file]);
    assert!(k.ok(&["get", "events", "-n", "default"]).contains("SetDesiredConfig"));
    let out = k.ok(&["describe", "mcp", "worker"]);
    assert!(!out.contains("SetDesiredConfig"), "an Event about the deleted pool shown on the new one:\n{out}");
}

/// Events expire `--event-ttl` after they last happened, as kube-apiserver expires them; what
/// is not an Event stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_expire_after_the_event_ttl() {
    let Some(exe) = kubectl_path() else { return };
    let c = Coordinator::start_with(Options { args: vec!["--event-ttl".into(), "3s".into()], ..Default::default() });
    let admin = c.client();
    let k = Kubectl::new(exe, &c, Auth::Kubeconfig);
    k.ok(&["apply", "-f", &mco_file("bootstrap/worker.machineconfigpool.yaml")]);
    // Long ago: the TTL runs from the Event's write (its creation, here), as an etcd lease does.
    let now = "2026-01-01T00:00:00Z";
    let event = json!({
        "apiVersion": "v1", "kind": "Event",
        "metadata": {"name": "worker.expiring", "namespace": "default"},
        "involvedObject": {"apiVersion": "machineconfiguration.openshift.io/v1", "kind": "MachineConfigPool", "name": "worker"},
        "reason": "AloftTestReason", "message": "an event that expires", "type": "Normal",
        "firstTimestamp": now, "lastTimestamp": now, "count": 1, "source": {"component": "aloft-tests"},
    });
    let path = resource_path(EVENT.path_ref(), Some("default"), None);
    let r = admin.post(&path, &event).await.unwrap();
    assert_eq!(r.code, 201, "{}", r.body);
    let r = admin.get(&format!("{path}/worker.expiring")).await.unwrap();
    assert_eq!(r.code, 200, "just written, not expired: {}", r.body);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let r = admin.get(&format!("{path}/worker.expiring")).await.unwrap();
        if r.code == 404 {
            break;
        }
        assert!(Instant::now() < deadline, "the Event outlived its 3 s TTL by 27 s: {}", r.body);
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let out = k.ok(&["get", "events", "-n", "default", "-o", "name"]);
    assert!(!out.contains("worker.expiring"), "kubectl get events still lists it: {out}");
    get_ok(&admin, &MACHINE_CONFIG_POOL, "worker").await;
}

/// The coordinator's health and metrics through `kubectl get --raw`, as an operator reads them.
#[test]
fn kubectl_get_raw_reads_readyz_and_metrics() {
    let Some(exe) = kubectl_path() else { return };
    let c = Coordinator::start();
    let k = Kubectl::new(exe, &c, Auth::Kubeconfig);
    let ready = k.ok(&["get", "--raw", "/readyz?verbose"]);
    assert!(ready.contains("[+]store ok") && ready.contains("[+]controller/node ok"), "{ready}");
    assert!(ready.ends_with("readyz check passed\n"), "{ready}");
    let metrics = k.ok(&["get", "--raw", "/metrics"]);
    assert!(metrics.contains("aloft_controller_up{controller=\"node\"} 1"), "{metrics}");
    let err = k.fails(&["get", "--raw", "/readyz/etcd"]);
    assert!(err.contains("NotFound") || err.contains("not found") || err.contains("404"), "{err}");
}

/// `kubectl explain`, as `oc explain mcp.spec` on OpenShift: the pool's fields (aloft's rollout
/// and drain among them), the NodeDisruptionBudget's, a MachineConfig's and a Node's, with what
/// they mean.
#[test]
fn kubectl_explain_describes_the_fields_of_pools_budgets_configs_and_nodes() {
    let Some(exe) = kubectl_path() else { return };
    let c = Coordinator::start();
    let k = Kubectl::new(exe, &c, Auth::Kubeconfig);
    let max = k.ok(&["explain", "mcp.spec.maxUnavailable"]);
    assert!(max.contains("How many of the pool's nodes may be unavailable at once"), "{max}");
    let rollout = k.ok(&["explain", "machineconfigpool.spec.rollout"]);
    for f in ["canary", "soakSeconds", "maxFailures", "prestage"] {
        assert!(rollout.contains(f), "{f}: {rollout}");
    }
    let hooks = k.ok(&["explain", "mcp.spec.drain.hooks"]);
    assert!(hooks.contains("timeoutSeconds") && hooks.contains("url"), "{hooks}");
    let budget = k.ok(&["explain", "ndb.spec"]);
    for f in ["selector", "minAvailable", "maxUnavailable", "groupBy"] {
        assert!(budget.contains(f), "{f}: {budget}");
    }
    let status = k.ok(&["explain", "mcp.status.degradedMachineCount"]);
    assert!(status.contains("failed to update"), "{status}");
    let err = k.fails(&["explain", "mcp.spec.noSuchField"]);
    assert!(err.contains("noSuchField"), "{err}");
    // A MachineConfig's and a Node's fields too (kubectl explain node.spec said nothing).
    let mc = k.ok(&["explain", "mc.spec"]);
    for f in ["config", "osImageURL", "kernelArguments", "extensions", "kernelType", "fips"] {
        assert!(mc.contains(f), "{f}: {mc}");
    }
    let url = k.ok(&["explain", "machineconfig.spec.osImageURL"]);
    assert!(url.contains("ostree+http(s)://HOST/PATH#REF@CHECKSUM"), "{url}");
    let node = k.ok(&["explain", "node.spec.unschedulable"]);
    assert!(node.contains("Cordoned"), "{node}");
    let info = k.ok(&["explain", "node.status.nodeInfo"]);
    for f in ["osImage", "kernelVersion", "bootID", "machineID"] {
        assert!(info.contains(f), "{f}: {info}");
    }
}

/// kubectl's field validation: `apply` (Strict since kubectl 1.27) refuses a pool with misspelt
/// fields with the API server's `strict decoding error`; `--validate=warn` stores it and prints
/// each unknown field as a warning. An unknown kind or version ends in kubectl's own
/// `no matches for kind`, not in a failed OpenAPI download.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_field_validation_and_unknown_kinds() {
    let Some(exe) = kubectl_path() else { return };
    let c = Coordinator::start();
    let admin = c.client();
    let k = Kubectl::new(exe, &c, Auth::Flags { token: c.admin_token() });
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, text: &str| {
        let p = dir.path().join(name);
        std::fs::write(&p, text).unwrap();
        p.display().to_string()
    };
    let typos = write(
        "typos.yaml",
        "apiVersion: machineconfiguration.openshift.io/v1\nkind: MachineConfigPool\nmetadata:\n  name: typo\nspec:\n  \
         machineConfigSelector: {matchLabels: {machineconfiguration.openshift.io/role: worker}}\n  maxUnavailble: 3\n  rollout:\n    canery: 1\n    soakSecond: 1800\n",
    );
    for args in [vec!["apply", "-f", &typos], vec!["apply", "--validate=strict", "-f", &typos]] {
        let err = k.fails(&args);
        assert!(err.contains("strict decoding error"), "{args:?}: {err}");
        for f in ["spec.maxUnavailble", "spec.rollout.canery", "spec.rollout.soakSecond"] {
            assert!(err.contains(&format!("unknown field \"{f}\"")), "{args:?} names {f}: {err}");
        }
    }
    assert!(list_names(&admin, &MACHINE_CONFIG_POOL).await.is_empty(), "Strict stored nothing");
    let out = k.run(&["apply", "--validate=warn", "-f", &typos]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("Warning: unknown field \"spec.rollout.canery\""), "kubectl prints the warnings: {err}");
    assert_eq!(get_ok(&admin, &MACHINE_CONFIG_POOL, "typo").await["spec"]["rollout"]["canery"], 1);
    // Inside a MachineConfig's Ignition config (kept as written, as MCO's CRD does) a key no
    // Ignition version has is stored and warned about: MCO ignored it without a word.
    let ign_typo = write(
        "ign-typo.yaml",
        "apiVersion: machineconfiguration.openshift.io/v1\nkind: MachineConfig\nmetadata:\n  name: 50-typo\n  \
         labels: {machineconfiguration.openshift.io/role: worker}\nspec:\n  config:\n    ignition: {version: 3.4.0}\n    \
         storage:\n      files: [{path: /etc/typo, contens: {source: 'data:,x'}}]\n",
    );
    let out = k.run(&["apply", "-f", &ign_typo]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("Warning: spec.config.storage.files[0].contens: unknown field, ignored"), "{err}");

    let pod = write("pod.yaml", "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\nspec:\n  containers: []\n");
    let err = k.fails(&["apply", "-f", &pod]);
    assert!(err.contains("no matches for kind \"Pod\" in version \"v1\""), "{err}");
    let node_v2 = write("node.yaml", "apiVersion: v2\nkind: Node\nmetadata:\n  name: node-v2\n");
    let err = k.fails(&["apply", "-f", &node_v2]);
    assert!(err.contains("no matches for kind \"Node\" in version \"v2\""), "{err}");
}

/// `kubectl delete` (background propagation) takes a pool's rendered config with it;
/// `--cascade=orphan` leaves it, its reference to the pool removed; `--cascade=foreground`
/// deletes it before the pool.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_delete_cascades_in_the_background_foreground_or_not_at_all() {
    let Some(exe) = kubectl_path() else { return };
    let c = Coordinator::start();
    let admin = c.client();
    let k = Kubectl::new(exe, &c, Auth::Flags { token: c.admin_token() });
    for role in ["worker", "master"] {
        let pool = mco_file(&format!("bootstrap/{role}.machineconfigpool.yaml"));
        let mc = mco_file(&format!("bootstrap/99_openshift-machineconfig_{role}.yaml"));
        k.ok(&["apply", "-f", &pool, "-f", &mc]);
    }
    let rendered = |pool: &'static str| {
        let admin = admin.clone();
        async move {
            eventually(Duration::from_secs(20), "the pool's rendered config", || async {
                let p = get_ok(&admin, &MACHINE_CONFIG_POOL, pool).await;
                Ok(p["spec"]["configuration"]["name"].as_str().map(str::to_string))
            })
            .await
        }
    };
    let (worker, master) = (rendered("worker").await, rendered("master").await);

    let out = k.ok(&["delete", "machineconfigpool", "worker", "--cascade=orphan"]);
    assert!(out.contains("deleted"), "{out}");
    let mc = get_ok(&admin, &MACHINE_CONFIG, &worker).await;
    assert!(mc["metadata"].get("ownerReferences").is_none(), "orphaned: {mc}");

    k.ok(&["delete", "machineconfigpool", "master"]);
    eventually(Duration::from_secs(20), "the master pool's rendered config to go", || async {
        let r = admin.get(&path_of(&MACHINE_CONFIG, Some(&master))).await?;
        Ok((r.code == 404).then_some(()))
    })
    .await;
    let out = k.ok(&["get", "machineconfig", &worker, "-o", "name"]);
    assert!(out.contains(&worker), "the orphan stays: {out}");

    // The pool again: it adopts its orphan. `--cascade=foreground` (kubectl waits for the pool to
    // be gone): the rendered config is gone first, not after.
    k.ok(&["apply", "-f", &mco_file("bootstrap/worker.machineconfigpool.yaml")]);
    eventually(Duration::from_secs(20), "the worker pool to adopt its rendered config", || async {
        let mc = get_ok(&admin, &MACHINE_CONFIG, &worker).await;
        Ok((mc["metadata"]["ownerReferences"][0]["blockOwnerDeletion"] == true).then_some(()))
    })
    .await;
    let out = k.ok(&["delete", "machineconfigpool", "worker", "--cascade=foreground"]);
    assert!(out.contains("deleted"), "{out}");
    assert_eq!(admin.get(&path_of(&MACHINE_CONFIG_POOL, Some("worker"))).await.unwrap().code, 404);
    let r = admin.get(&path_of(&MACHINE_CONFIG, Some(&worker))).await.unwrap();
    assert_eq!(r.code, 404, "the dependent went before its owner: {}", r.body);
}

/// A rendered config's spec cannot be edited (a patch or a replace is 422 naming `spec`, and
/// nothing changes), its labels can; the source MachineConfig is the way, and renders anew.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_cannot_edit_a_rendered_config() {
    let Some(exe) = kubectl_path() else { return };
    let c = Coordinator::start();
    let admin = c.client();
    let k = Kubectl::new(exe, &c, Auth::Flags { token: c.admin_token() });
    let pool = mco_file("bootstrap/worker.machineconfigpool.yaml");
    let mc = mco_file("bootstrap/99_openshift-machineconfig_worker.yaml");
    k.ok(&["apply", "-f", &pool, "-f", &mc]);
    let rendered = eventually(Duration::from_secs(20), "the pool's rendered config", || async {
        let p = get_ok(&admin, &MACHINE_CONFIG_POOL, "worker").await;
        Ok(p["spec"]["configuration"]["name"].as_str().map(str::to_string))
    })
    .await;
    let before = get_ok(&admin, &MACHINE_CONFIG, &rendered).await;
    let kargs = r#"{"spec":{"kernelArguments":["nosmt"]}}"#;
    let err = k.fails(&["patch", "machineconfig", &rendered, "--type=merge", "-p", kargs]);
    assert!(err.contains("spec: Forbidden"), "{err}");
    assert!(err.contains("edit or add a MachineConfig"), "says what to do instead: {err}");
    // Dropping the generated-by annotation in the same write does not lift the rule.
    let mut edited = before.clone();
    edited["metadata"]["annotations"]
        .as_object_mut()
        .unwrap()
        .remove("machineconfiguration.openshift.io/generated-by-controller-version");
    edited["spec"]["kernelArguments"] = json!(["nosmt"]);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("edited.json");
    std::fs::write(&file, edited.to_string()).unwrap();
    let err = k.fails(&["replace", "-f", &file.display().to_string()]);
    assert!(err.contains("spec: Forbidden"), "{err}");
    assert_eq!(get_ok(&admin, &MACHINE_CONFIG, &rendered).await, before, "nothing changed");
    // Metadata may change.
    k.ok(&["label", "machineconfig", &rendered, "backup=keep"]);
    assert_eq!(get_ok(&admin, &MACHINE_CONFIG, &rendered).await["metadata"]["labels"]["backup"], "keep");
    // A user's MachineConfig that happens to be named rendered-* is the user's to edit.
    let own = json!({"apiVersion": "machineconfiguration.openshift.io/v1", "kind": "MachineConfig",
        "metadata": {"name": "rendered-by-hand"}, "spec": {"config": {"ignition": {"version": "3.4.0"}}}});
    admin.post(&path_of(&MACHINE_CONFIG, None), &own).await.unwrap().into_result().unwrap();
    k.ok(&["patch", "machineconfig", "rendered-by-hand", "--type=merge", "-p", kargs]);
    // One with no owner (orphaned, or imported from OpenShift) is marked by its annotation
    // alone: a write of annotations only may not drop it either.
    let imported = json!({"apiVersion": "machineconfiguration.openshift.io/v1", "kind": "MachineConfig",
        "metadata": {"name": "rendered-worker-imported",
            "annotations": {"machineconfiguration.openshift.io/generated-by-controller-version": "4.16.0"}},
        "spec": {"config": {"ignition": {"version": "3.4.0"}}}});
    admin.post(&path_of(&MACHINE_CONFIG, None), &imported).await.unwrap().into_result().unwrap();
    let err = k.fails(&[
        "annotate",
        "machineconfig",
        "rendered-worker-imported",
        "machineconfiguration.openshift.io/generated-by-controller-version-",
    ]);
    assert!(err.contains("metadata: Forbidden"), "{err}");
    k.ok(&["annotate", "machineconfig", "rendered-worker-imported", "note=kept"]);
}

/// Finalizers through kubectl: a name without a domain prefix is stored with kube-apiserver's
/// warning; `kubectl delete --wait=false` leaves an object with finalizers, being deleted (as
/// `kubectl get` shows), and the patch that removes its finalizers removes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_delete_waits_for_finalizers() {
    let Some(exe) = kubectl_path() else { return };
    let c = Coordinator::start();
    let k = Kubectl::new(exe, &c, Auth::Flags { token: c.admin_token() });
    let dir = tempfile::tempdir().unwrap();
    let node = dir.path().join("node.yaml");
    std::fs::write(
        &node,
        "apiVersion: v1\nkind: Node\nmetadata:\n  name: fin\n  finalizers:\n  - example.com/keep\n  - keep\n",
    )
    .unwrap();
    let out = k.run(&["create", "-f", &node.display().to_string()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains("Warning: metadata.finalizers: \"keep\": prefer a domain-qualified finalizer name"),
        "kubectl prints the warning: {err}"
    );
    assert!(!err.contains("example.com/keep"), "a qualified name is not warned about: {err}");

    let out = k.ok(&["delete", "node", "fin", "--wait=false"]);
    assert!(out.contains("deleted"), "{out}");
    let ts = k.ok(&["get", "node", "fin", "-o", "jsonpath={.metadata.deletionTimestamp}"]);
    assert!(ts.ends_with('Z'), "still there, being deleted: {ts:?}");
    let out = k.ok(&["get", "node", "fin", "-o", "name"]);
    assert_eq!(out.trim(), "node/fin");

    k.ok(&["patch", "node", "fin", "--type=merge", "-p", r#"{"metadata":{"finalizers":null}}"#]);
    let err = k.fails(&["get", "node", "fin"]);
    assert!(err.contains("NotFound") || err.contains("not found"), "gone with its finalizers: {err}");
}

/// `kubectl auth whoami` and `kubectl auth can-i` (SelfSubjectReview, SelfSubjectAccessReview):
/// who a credential is, and whether it may do something, as the server decides real requests.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_auth_whoami_and_can_i() {
    let Some(exe) = kubectl_path() else { return };
    let c = Coordinator::start();
    let admin = Kubectl::new(exe.clone(), &c, Auth::Kubeconfig);
    let boot = c.client_with_token(Some(&c.create_token("fleet", "bootstrap")));
    let enrolled = boot.post("/aloft/v1/enroll", &json!({"nodeName": "n1"})).await.unwrap().into_result().unwrap();
    let token = enrolled["token"].as_str().expect("a node credential").to_string();
    let node = Kubectl::new(exe, &c, Auth::Flags { token });

    let user = |k: &Kubectl| -> Value {
        let out = k.ok(&["auth", "whoami", "-o", "json"]);
        let review: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("whoami -o json: {e}: {out}"));
        assert_eq!(review["kind"], "SelfSubjectReview", "{review}");
        assert_eq!(review["apiVersion"], "authentication.k8s.io/v1", "{review}");
        review["status"]["userInfo"].clone()
    };
    let a = user(&admin);
    assert_eq!(a["username"], "admin", "{a}");
    assert_eq!(a["groups"], json!(["system:masters", "system:authenticated"]), "{a}");
    let n = user(&node);
    assert_eq!(n["username"], "system:node:n1", "{n}");
    assert_eq!(n["groups"], json!(["system:nodes", "system:authenticated"]), "{n}");
    assert_eq!(n["extra"]["aloft.dev/token-name"], json!(["node:n1"]), "{n}");
    let table = node.ok(&["auth", "whoami"]);
    assert!(table.contains("system:node:n1") && table.contains("system:nodes"), "{table}");

    // `can-i` prints yes (exit 0) or no (exit 1).
    let can = |k: &Kubectl, args: &[&str]| -> bool {
        let mut all = vec!["auth", "can-i"];
        all.extend_from_slice(args);
        let out = k.run(&all);
        let said = String::from_utf8_lossy(&out.stdout).trim().to_string();
        assert!(said == "yes" || said == "no", "can-i {args:?}: {said:?}, {}", String::from_utf8_lossy(&out.stderr));
        assert_eq!(out.status.success(), said == "yes", "can-i {args:?}: exit status {}", out.status);
        said == "yes"
    };
    assert!(can(&node, &["patch", "nodes/n1"]), "a node patches its own Node");
    assert!(can(&node, &["get", "nodes/n1"]));
    assert!(!can(&node, &["patch", "nodes/n2"]), "but not another's");
    assert!(!can(&node, &["list", "nodes"]), "nor lists every Node");
    assert!(!can(&node, &["delete", "machineconfigs"]));
    assert!(!can(&node, &["list", "secrets"]));
    assert!(!can(&node, &["get", "/metrics"]), "a node's credential does not read /metrics");
    assert!(can(&admin, &["delete", "machineconfigs"]));
    assert!(can(&admin, &["get", "/metrics"]));
    assert!(can(&admin, &["*", "*"]), "the admin may do everything");

    // `can-i --list` (a SelfSubjectRulesReview) lists the same rules.
    let list = node.ok(&["auth", "can-i", "--list"]);
    let row = |resource: &str| list.lines().find(|l| l.split_whitespace().next() == Some(resource)).unwrap_or("");
    assert!(row("nodes").contains("[n1]") && row("nodes").contains("[get list watch update patch]"), "{list}");
    assert!(row("machineconfigurations.operator.openshift.io").contains("[cluster]"), "{list}");
    assert!(row("selfsubjectrulesreviews.authorization.k8s.io").contains("[create]"), "{list}");
    assert!(!list.contains("/metrics"), "{list}");
    let list = admin.ok(&["auth", "can-i", "--list"]);
    assert!(list.lines().any(|l| l.starts_with("*.*") && l.contains("[*]")), "{list}");

    // The answers are the server's: the denied write is refused, the allowed one goes through.
    let err = node.fails(&["delete", "machineconfigs", "x"]);
    assert!(err.contains("Forbidden") || err.contains("forbidden"), "{err}");
    assert!(err.contains("User \"system:node:n1\""), "named as whoami names it: {err}");

    // Impersonation (`--as`) is refused, not ignored: answered as the caller, `can-i --as=X`
    // gave the admin's rights as X's, and a write `--as` a viewer went through as the admin.
    let err = admin.fails(&["auth", "can-i", "list", "nodes", "--as=system:node:n2"]);
    assert!(err.contains("impersonation") && err.contains("not supported"), "{err}");
    let err = admin.fails(&["delete", "machineconfigs", "x", "--as=system:anonymous"]);
    assert!(err.contains("impersonation"), "{err}");
}

/// YAML written by aloft (an API answer in YAML, `aloftctl get -o yaml`) reads back the same in
/// kubectl, a YAML 1.1 reader: an annotation `yes` or `2001-01-01` stays a string. The audit's
/// case: kubectl refused the saved object ("cannot unmarshal bool ... of type string").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn yaml_aloft_writes_is_read_back_by_kubectl_as_it_was() {
    let Some(exe) = kubectl_path() else { return };
    let c = Coordinator::start();
    let admin = c.client();
    let k = Kubectl::new(exe, &c, Auth::Kubeconfig);
    let mut pool = machine_config_pool("worker", "worker");
    pool["metadata"]["annotations"] = json!({"a": "yes", "b": "on", "c": "2001-01-01", "d": "1:20", "e": "NO"});
    assert_eq!(admin.post(&path_of(&MACHINE_CONFIG_POOL, None), &pool).await.unwrap().code, 201);
    let pool_path = path_of(&MACHINE_CONFIG_POOL, Some("worker"));
    let r = admin.call(reqwest::Method::GET, &pool_path, None, Some("application/yaml")).await.unwrap();
    let api_yaml = r.body.as_str().expect("a YAML answer").to_string();
    let ctl = std::process::Command::new(aloft_tests::bin("aloftctl"))
        .args(["get", "mcp", "worker", "-o", "yaml"])
        .env("ALOFT_KUBECONFIG", c.kubeconfig_path())
        .output()
        .unwrap();
    assert!(ctl.status.success(), "{}", String::from_utf8_lossy(&ctl.stderr));
    let dir = tempfile::tempdir().unwrap();
    for (name, text) in [("api.yaml", api_yaml), ("aloftctl.yaml", String::from_utf8(ctl.stdout).unwrap())] {
        let file = dir.path().join(name);
        std::fs::write(&file, &text).unwrap();
        let out = k.ok(&["apply", "--dry-run=client", "-o", "json", "-f", file.to_str().unwrap()]);
        let read: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
        let annotations = &read["metadata"]["annotations"];
        for (key, want) in [("a", "yes"), ("b", "on"), ("c", "2001-01-01"), ("d", "1:20"), ("e", "NO")] {
            assert_eq!(annotations[key], want, "{name}: {text}");
        }
    }
}

/// aloftctl's `-o jsonpath` and `-o custom-columns` print what kubectl's print, for the same
/// templates over the same objects: a script written for `oc get` or `kubectl get` reads the
/// same with `aloftctl get`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aloftctl_templates_print_what_kubectls_print() {
    let Some(exe) = kubectl_path() else { return };
    let c = Coordinator::start();
    let admin = c.client();
    let k = Kubectl::new(exe, &c, Auth::Kubeconfig);
    for (name, state, zone) in [("n1", "Done", "a"), ("n2", "Working", "b"), ("node-three", "Degraded", "a")] {
        let mut labels = json!({"node-role.kubernetes.io/worker": "", "topology.kubernetes.io/zone": zone});
        // A field some objects lack (sorted first), the others' values apart.
        match name {
            "n2" => labels["tier"] = json!("db"),
            "node-three" => labels["tier"] = json!("app"),
            _ => {}
        }
        let mut node = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels,
            "annotations": {"machineconfiguration.openshift.io/state": state,
                "machineconfiguration.openshift.io/currentConfig": "rendered-worker-1"}},
            "status": {"conditions": [{"type": "Ready", "status": if state == "Degraded" { "False" } else { "True" }}]}});
        if name == "n1" {
            node["metadata"]["annotations"]["note"] = json!("say \"hi\"");
        }
        if name == "n2" {
            // Objects, arrays and a number, which custom columns print as Go does.
            node["spec"] = json!({"taints": [{"key": "dedicated", "value": "db", "effect": "NoSchedule"}],
                                  "podCIDRs": ["10.0.0.0/24", "10.0.1.0/24"]});
            node["status"]["daemonEndpoints"] = json!({"kubeletEndpoint": {"Port": 10250}});
        }
        assert_eq!(admin.post(&path_of(&NODE, None), &node).await.unwrap().code, 201);
    }
    let run = |args: &[&str]| {
        let ctl = std::process::Command::new(aloft_tests::bin("aloftctl"))
            .args(args)
            .env("ALOFT_KUBECONFIG", c.kubeconfig_path())
            .output();
        ctl.unwrap()
    };
    let aloftctl = |args: &[&str]| {
        let out = run(args);
        assert!(out.status.success(), "aloftctl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap()
    };
    let state = r"machineconfiguration\.openshift\.io/state";
    let templates = [
        "{.items[*].metadata.name}".to_string(),
        format!("{{.items[*].metadata.annotations.{state}}}"),
        r#"{range .items[*]}{.metadata.name}{"\t"}{.status.conditions[?(@.type=="Ready")].status}{"\n"}{end}"#.into(),
        r#"{.items[?(@.metadata.labels.topology\.kubernetes\.io/zone=="a")].metadata.name}"#.into(),
        "{.items[0].metadata.name} and {.items[-1].metadata.name}".into(),
        "{.items[0:2].metadata.name}".into(),
        "{.items[*]['metadata.name']}".into(),
        "{.kind}: {..currentConfig}".into(),
        "{range .items}{.metadata.name};{end}".into(),
        "{.items[-1:].metadata.name}{.items[1:1].metadata.name}".into(),
        "{.items[*].spec.nothing}".into(),
        r#"{.items[?(@.metadata.annotations.note=="say \"hi\"")].metadata.name}"#.into(),
        r#"{range .items[*]}{.metadata.annotations.note}{"\"\t'"}{end}"#.into(),
    ];
    for t in &templates {
        let arg = format!("jsonpath={t}");
        assert_eq!(aloftctl(&["get", "nodes", "-o", &arg]), k.ok(&["get", "nodes", "-o", &arg]), "{t}");
    }
    let one = format!("jsonpath={{.metadata.name}} {{.metadata.annotations.{state}}}");
    assert_eq!(aloftctl(&["get", "node", "n2", "-o", &one]), k.ok(&["get", "node", "n2", "-o", &one]));
    let cols = format!("custom-columns=Z:.metadata.labels.topology\\.kubernetes\\.io/zone,NAME:.metadata.name,STATE:.metadata.annotations.{state},TAINTS:.spec.taints,LABELS:.metadata.labels,CIDRS:.spec.podCIDRs,CIDR:.spec.podCIDRs[*],PORT:.status.daemonEndpoints.kubeletEndpoint.Port");
    for extra in [None, Some("--no-headers")] {
        let mut args = vec!["get", "nodes", "-o", &cols];
        args.extend(extra);
        assert_eq!(aloftctl(&args), k.ok(&args), "{args:?}");
    }
    // Sorted by a field (text, or missing on some), in a column or a template.
    let by_state = format!("--sort-by=.metadata.annotations.{state}");
    for sort in [
        by_state.as_str(),
        "--sort-by={.metadata.labels.topology\\.kubernetes\\.io/zone}",
        "--sort-by=.metadata.labels.tier",
    ] {
        for o in [cols.as_str(), "jsonpath={.items[*].metadata.name}"] {
            let args = ["get", "nodes", "-o", o, sort];
            assert_eq!(aloftctl(&args), k.ok(&args), "{args:?}");
        }
    }
    let sorted = aloftctl(&["get", "nodes", "--no-headers", &by_state]);
    let names: Vec<&str> = sorted.lines().filter_map(|l| l.split_whitespace().next()).collect();
    assert_eq!(names, ["node-three", "n1", "n2"], "Degraded, Done, Working:\n{sorted}");
    // Custom columns' headers are the user's, as given.
    let args = [
        "get",
        "nodes",
        "-o",
        "custom-columns=name:.metadata.name,Zone:.metadata.labels.topology\\.kubernetes\\.io/zone",
    ];
    assert_eq!(aloftctl(&args), k.ok(&args), "{args:?}");
    // With --allow-missing-template-keys=false, a field not found fails the template in both,
    // naming the field; one found everywhere prints as by default.
    for (t, missing) in [
        ("{.items[*].metadata.name}", None),
        ("{.items[*].metadata.nothing}", Some("nothing")),
        // A filter that keeps nothing is no missing field.
        (r#"{.items[?(@.metadata.name=="zzz")].metadata.name}"#, None),
        ("{range .items[*]}{.metadata.labels.tier}{end}", Some("tier")),
        // Inside a filter's comparison, over a label some nodes lack; a quoted key.
        (r#"{.items[?(@.metadata.labels.tier=="app")].metadata.name}"#, Some("tier")),
        ("{.items[*]['metadata.nothing']}", Some("nothing")),
        ("{.items[?(@.metadata.labels.tier)].metadata.name}", None),
    ] {
        let arg = format!("jsonpath={t}");
        let args = ["get", "nodes", "-o", &arg, "--allow-missing-template-keys=false"];
        let out = run(&args);
        match missing {
            None => assert_eq!(aloftctl(&args), k.ok(&args), "{t}"),
            Some(field) => {
                let want = format!("{field} is not found");
                let theirs = k.fails(&args);
                let ours = String::from_utf8_lossy(&out.stderr);
                assert!(theirs.contains(&want), "kubectl, {t}: {theirs}");
                assert!(!out.status.success() && ours.contains(&want), "aloftctl, {t}: {ours}");
            }
        }
    }
    // An index out of bounds fails the template in both.
    let args = ["get", "nodes", "-o", "jsonpath={.items[7].metadata.name}"];
    assert!(k.fails(&args).contains("array index out of bounds: index 7, length 3"));
    let out = run(&args);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("array index out of bounds: index 7, length 3"), "{err}");
    // A path no object has is an error, in both.
    let args = ["get", "nodes", "-o", "name", "--sort-by=.spec.providerID"];
    let want = "couldn't find any field with path \"{.spec.providerID}\" in the list of objects";
    assert!(k.fails(&args).contains(want));
    let out = run(&args);
    assert!(!out.status.success() && String::from_utf8_lossy(&out.stderr).contains(want), "{out:?}");
}

/// `kubectl describe node` shows the node's Lease, made from its agent's presence: held by the
/// node and renewed while its agent follows its Node. A Node no agent manages has none (as a
/// Node without a kubelet), another node's credential may not read it, and it cannot be written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_describe_node_shows_its_lease() {
    let Some(exe) = kubectl_path() else { return };
    let c = Coordinator::start();
    let admin = c.client();
    let k = Kubectl::new(exe, &c, Auth::Kubeconfig);
    let api = aloft_agent::coordinator::NodeApi::new(c.node_client("leased", json!({})).await, "leased");
    api.set_ready(true, "aloft-agent is running").await.unwrap();
    // Following its Node, as the agent does.
    let _ = api.wait_change("0", Duration::from_millis(200)).await;
    let path = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/leased";
    // The watch opens in the background: its Lease is there once it has.
    let lease = eventually(Duration::from_secs(30), "the lease of a followed node", || async {
        let r = admin.get(path).await?;
        Ok((r.code == 200).then_some(r.body))
    })
    .await;
    assert_eq!((lease["kind"].as_str(), lease["spec"]["holderIdentity"].as_str()), (Some("Lease"), Some("leased")));
    let renewed = lease["spec"]["renewTime"].as_str().unwrap_or("");
    let renewed = chrono::DateTime::parse_from_rfc3339(renewed).unwrap_or_else(|e| panic!("{e}: {lease}"));
    assert!((chrono::Utc::now() - renewed.to_utc()).num_seconds().abs() < 60, "{lease}");
    let out = k.ok(&["describe", "node", "leased"]);
    assert!(out.contains("HolderIdentity:  leased") && !out.contains("Failed to get lease"), "{out}");

    // A Node made by hand: no Lease, in Kubernetes' words.
    let node = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "by-hand"}});
    admin.post(&path_of(&NODE, None), &node).await.unwrap().into_result().unwrap();
    let r = admin.get("/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/by-hand").await.unwrap();
    assert_status(&r, 404, "NotFound", "no agent, no lease");
    assert_eq!(r.body["message"], "leases.coordination.k8s.io \"by-hand\" not found");
    let other = c.node_client("other", json!({})).await;
    assert_status(&other.get(path).await.unwrap(), 403, "Forbidden", "another node's lease");
    let r = admin.delete(path).await.unwrap();
    assert_status(&r, 405, "MethodNotAllowed", "not writable");
    let r = admin.get(&format!("{path}?watch=true")).await.unwrap();
    assert_status(&r, 405, "MethodNotAllowed", "not watched");
    // It has no Table form: a client asking for nothing else is refused.
    let table = "application/json;as=Table;v=v1;g=meta.k8s.io";
    let r = admin.call(reqwest::Method::GET, path, None, Some(table)).await.unwrap();
    assert_status(&r, 406, "NotAcceptable", "a Table only");
}

/// kubectl (client-go) waits out a 429 of the in-flight limits (`Retry-After: 1`) and sends the
/// request again: it gets its answer once a place is free, instead of failing.
#[tokio::test(flavor = "multi_thread")]
async fn kubectl_waits_out_the_in_flight_limit() {
    let Some(exe) = kubectl_path() else { return };
    let c = Coordinator::start_with(Options {
        args: vec!["--max-requests-inflight".into(), "1".into()],
        ..Default::default()
    });
    let token = c.create_token("kubectl-patient", "viewer");
    let raw = c.http_client();
    let probe = || async { raw.get(format!("{}/api/v1/nodes", c.url())).bearer_auth(&token).send().await.ok() };
    for args in [vec!["get", "--raw", "/api/v1/nodes"], vec!["get", "mcp"]] {
        let held = take_the_place(&c, &token, reqwest::Method::GET, "/api/v1/nodes", probe).await;
        let kubectl = Kubectl::new(exe.clone(), &c, Auth::Flags { token: token.clone() });
        let started = Instant::now();
        let run = tokio::task::spawn_blocking(move || {
            let out = kubectl.run(&args.iter().map(|s| &**s).collect::<Vec<_>>());
            (out, args)
        });
        tokio::time::sleep(Duration::from_millis(1500)).await;
        held.release().await;
        let (out, args) = run.await.expect("kubectl ran");
        let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert!(out.status.success(), "kubectl {args:?} after a 429: {stdout}\n{stderr}");
        assert!(started.elapsed() >= Duration::from_secs(1), "it waited for the place ({:?})", started.elapsed());
        // The list's answer (a fresh coordinator has no pools: kubectl says so).
        let answered =
            if args[1] == "--raw" { stdout.contains("NodeList") } else { stderr.contains("No resources found") };
        assert!(answered, "kubectl {args:?} printed its answer: {stdout}\n{stderr}");
    }
}

/// FleetLock objects with kubectl: created from YAML, listed (`get flk`, the holders in a
/// column), explained, and a dead host's slot freed with `patch --subresource=status`, as the
/// README says to.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_manages_fleetlocks_and_frees_a_slot() {
    let Some(exe) = kubectl_path() else { return };
    let c = Coordinator::start();
    let k = Kubectl::new(exe, &c, Auth::Kubeconfig);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("flk.yaml");
    std::fs::write(
        &file,
        "apiVersion: aloft.dev/v1\nkind: FleetLock\nmetadata: {name: default}\nspec: {maxHolders: 2}\n",
    )
    .unwrap();
    k.ok(&["apply", "-f", file.to_str().unwrap()]);
    // Two holders, as two hosts' pre-reboot requests leave them (written here as the server does).
    let admin = c.client();
    let status = serde_json::json!({"status": {"holders": [
        {"id": "m1", "since": "2026-12-04T05:00:00Z"}, {"id": "m2", "since": "2026-12-04T05:01:00Z"}]}});
    admin
        .patch("/apis/aloft.dev/v1/fleetlocks/default/status", "application/merge-patch+json", &status)
        .await
        .unwrap()
        .into_result()
        .unwrap();
    let out = k.ok(&["get", "flk"]);
    assert_eq!(header(&out), ["NAME", "MAX", "HOLDERS", "HOLDERS", "AGE"], "{out}");
    assert_eq!(&row(&out, "default").unwrap()[..3], ["default", "2", "m1,m2"], "{out}");
    let explained = k.ok(&["explain", "fleetlock.spec.maxHolders"]);
    assert!(explained.contains("reboot"), "{explained}");
    k.ok(&[
        "patch",
        "fleetlock",
        "default",
        "--subresource=status",
        "--type=json",
        "-p",
        r#"[{"op":"test","path":"/status/holders/0/id","value":"m1"},{"op":"remove","path":"/status/holders/0"}]"#,
    ]);
    let out = k.ok(&["get", "fleetlock", "default"]);
    assert_eq!(&row(&out, "default").unwrap()[..3], ["default", "2", "m2"], "{out}");
}

/// kubectl on the ClusterVersion as on OpenShift's: `apply`, `wait --for=condition=...`, `get
/// clusterversion` with `oc get clusterversion`'s columns, `explain`, a merge patch of the
/// channel; a release given by image and version (no update service) is taken and, with no pool
/// to roll out to, completes at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_follows_the_cluster_version() {
    let Some(exe) = kubectl_path() else { return };
    let c = Coordinator::start();
    let k = Kubectl::new(exe, &c, Auth::Kubeconfig);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("cv.yaml");
    let image = format!("ostree+http://repo.example/os#aloft/x86_64@{}", "a".repeat(64));
    std::fs::write(
        &file,
        format!(
            "apiVersion: config.openshift.io/v1\nkind: ClusterVersion\nmetadata: {{name: version}}\n\
             spec:\n  channel: stable-1\n  desiredUpdate: {{version: 1.0.0, image: \"{image}\"}}\n"
        ),
    )
    .unwrap();
    k.ok(&["apply", "-f", file.to_str().unwrap()]);
    k.ok(&["wait", "--for=condition=Available", "clusterversion/version", "--timeout=60s"]);
    let out = k.ok(&["get", "clusterversion"]);
    assert_eq!(header(&out), ["NAME", "VERSION", "AVAILABLE", "PROGRESSING", "SINCE", "STATUS"], "{out}");
    let r = row(&out, "version").unwrap();
    assert_eq!(&r[..4], ["version", "1.0.0", "True", "False"], "{out}");
    assert!(out.contains("Cluster version is 1.0.0"), "{out}");
    // No upstream: said so, in the condition kubectl reads.
    let reason = k.ok(&[
        "get",
        "clusterversion",
        "version",
        "-o",
        "jsonpath={.status.conditions[?(@.type==\"RetrievedUpdates\")].reason}",
    ]);
    assert_eq!(reason.trim(), "NoUpstream");
    let explained = k.ok(&["explain", "clusterversion.spec.desiredUpdate"]);
    assert!(explained.contains("force") && explained.contains("osImageURL"), "{explained}");
    k.ok(&["patch", "clusterversion", "version", "--type=merge", "-p", r#"{"spec":{"channel":"stable-2"}}"#]);
    let channel = k.ok(&["get", "clusterversion", "version", "-o", "jsonpath={.spec.channel}"]);
    assert_eq!(channel.trim(), "stable-2");
    let mc = k.ok(&["get", "machineconfig", "00-worker-release", "-o", "jsonpath={.spec.osImageURL}"]);
    assert_eq!(mc.trim(), image);
}

/// PackageManifests as an OpenShift admin reads them, from a real community catalog: `kubectl
/// get packagemanifests` lists each package with its catalog, jsonpath reads a package's default
/// channel and that channel's current CSV (what a Subscription installs), label selectors pick
/// a catalog, another namespace lists the global catalog namespace's too, writes are refused,
/// and deleting the CatalogSource removes them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_lists_the_package_manifests_of_a_real_catalog() {
    let Some(exe) = kubectl_path() else { return };
    let c = Coordinator::start();
    let admin = c.client();
    let k = Kubectl::new(exe, &c, Auth::Kubeconfig);
    let rendered = Command::new(bin("aloft-coordinator"))
        .args(["catalog", "render"])
        .arg(testdata().join("fbc-community-operators/v4.12"))
        .output()
        .unwrap();
    assert!(rendered.status.success(), "{}", String::from_utf8_lossy(&rendered.stderr));
    let stream = String::from_utf8(rendered.stdout).unwrap();
    let blobs = aloft_coordinator::fbc::blobs_of_stream(&stream, "all.json").unwrap();
    let catalog = aloft_api::catalog::Catalog::from_blobs(blobs).unwrap();
    let served = catalog_server::CatalogServer::start().await;
    let url = served.set("community.json", &stream);
    let source = json!({
        "apiVersion": "operators.coreos.com/v1alpha1", "kind": "CatalogSource",
        "metadata": {"name": "community", "namespace": "olm"},
        "spec": {"sourceType": "http", "address": url, "displayName": "Community", "publisher": "tests"},
    });
    admin
        .post("/apis/operators.coreos.com/v1alpha1/namespaces/olm/catalogsources", &source)
        .await
        .unwrap()
        .into_result()
        .unwrap();

    let listed = eventually(Duration::from_secs(60), "a PackageManifest per package", || {
        let out = k.ok(&["get", "packagemanifests", "-n", "olm"]);
        async move { Ok((out.lines().count() == 1 + CATALOG_PACKAGES).then_some(out)) }
    })
    .await;
    assert_eq!(header(&listed), ["NAME", "CATALOG", "AGE"], "{listed}");
    let summary = catalog.packages();
    assert_eq!(summary.len(), CATALOG_PACKAGES);
    for p in &summary {
        let cols = row(&listed, &p.name).unwrap_or_else(|| panic!("{} in {listed}", p.name));
        assert_eq!(cols[1], "Community", "{listed}");
        let path = ["get", "packagemanifest", p.name.as_str(), "-n", "olm"];
        let default = k.ok(&[&path[..], &["-o", "jsonpath={.status.defaultChannel}"]].concat());
        assert_eq!(default, p.default_channel, "{}", p.name);
        let query = format!("jsonpath={{.status.channels[?(@.name==\"{default}\")].currentCSV}}");
        let current = k.ok(&[&path[..], &["-o", &query]].concat());
        let head = &p.channels.iter().find(|ch| ch.name == p.default_channel).unwrap().head;
        assert_eq!(&current, head, "{}: the default channel's head", p.name);
    }
    let wide = k.ok(&["get", "packagemanifests", "-n", "olm", "-o", "wide"]);
    assert_eq!(header(&wide), ["NAME", "CATALOG", "AGE", "DEFAULT", "CHANNEL", "CHANNELS"], "{wide}");
    let picked = k.ok(&["get", "packagemanifests", "-A", "-l", "catalog=community", "-o", "name"]);
    assert_eq!(picked.lines().count(), CATALOG_PACKAGES, "{picked}");
    let none = k.run(&["get", "packagemanifests", "-A", "-l", "catalog=other"]);
    assert!(String::from_utf8_lossy(&none.stderr).contains("No resources found"), "{none:?}");

    // `olm` is the global catalog namespace: its packages are listed in every namespace, as
    // OLM's package server lists them, each shown in that namespace and saying where it is from.
    let elsewhere = k.ok(&["get", "packagemanifests", "-n", "operators"]);
    assert_eq!(elsewhere.lines().count(), 1 + CATALOG_PACKAGES, "{elsewhere}");
    assert!(summary.iter().all(|p| row(&elsewhere, &p.name).is_some_and(|c| c[1] == "Community")), "{elsewhere}");
    let from = k.ok(&[
        "get",
        "packagemanifest",
        &summary[0].name,
        "-n",
        "operators",
        "-o",
        "jsonpath={.metadata.namespace} {.status.catalogSourceNamespace}",
    ]);
    assert_eq!(from, "operators olm");

    // Read-only, as OLM's package server serves them.
    let name = &summary[0].name;
    let err = k.fails(&["delete", "packagemanifest", name, "-n", "olm"]);
    assert!(err.contains("MethodNotAllowed") && err.contains("read-only"), "{err}");
    let err = k.fails(&["label", "packagemanifest", name, "-n", "olm", "x=y"]);
    assert!(err.contains("MethodNotAllowed"), "{err}");
    let verbs = k.ok(&["api-resources", "--api-group=packages.operators.coreos.com", "-o", "wide"]);
    assert!(verbs.contains("packagemanifests") && verbs.contains("get,list,watch"), "{verbs}");

    // They go with their CatalogSource.
    k.ok(&["delete", "catalogsource", "community", "-n", "olm"]);
    eventually(Duration::from_secs(60), "the PackageManifests gone with their catalog", || {
        let (all, elsewhere) = (
            k.run(&["get", "packagemanifests", "-A", "-o", "name"]),
            k.run(&["get", "packagemanifests", "-n", "operators", "-o", "name"]),
        );
        async move { Ok((all.stdout.is_empty() && elsewhere.stdout.is_empty()).then_some(())) }
    })
    .await;
}

/// Packages in the community catalog of shared/testdata (v4.12).
const CATALOG_PACKAGES: usize = 10;
