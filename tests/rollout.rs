//! The rollout against a real coordinator: NodeDisruptionBudgets holding drains (with the Event
//! naming the budget), drain hooks called over loopback HTTP (and failing or slow ones holding the
//! drain), the drain timeout marking the node and the pool, canary + soak ordering, the circuit
//! breaker stopping a rollout until `aloftctl rollout resume`, and — with real agents on sandboxed
//! hosts — the invariant (never more nodes unavailable than the pool and the budgets allow)
//! sampled throughout a rollout during which the coordinator is SIGKILLed and restarted.
//!
//! Tests without agents play the agent's part with admin writes of the same annotations.

use aloft_api::annotations as ann;
use aloft_coordinator::resources::{EVENT, MACHINE_CONFIG, MACHINE_CONFIG_POOL, NODE, NODE_DISRUPTION_BUDGET};
use aloft_tests::sandbox::Host;
use aloft_tests::{
    condition, eventually, machine_config, machine_config_pool, path_of, resource_path, Client, Coordinator, Options,
};
use serde_json::{json, Value};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const WAIT: Duration = Duration::from_secs(90);

async fn create(c: &Client, rt: &aloft_tests::ResourceType, obj: &Value) -> Value {
    c.post(&path_of(rt, None), obj).await.unwrap().into_result().unwrap_or_else(|e| panic!("create {obj}: {e:#}"))
}

async fn merge(c: &Client, path: &str, patch: Value) -> Value {
    c.patch(path, "application/merge-patch+json", &patch).await.unwrap().into_result().unwrap()
}

/// A Node with labels, Ready (or not), reporting Done with no config, as an enrolled agent does.
async fn fake_node(c: &Client, name: &str, labels: Value, ready: bool) {
    create(
        c,
        &NODE,
        &json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels,
        "annotations": {ann::STATE: "Done"}}}),
    )
    .await;
    set_ready(c, name, ready).await;
}

async fn set_ready(c: &Client, name: &str, ready: bool) {
    let cond = json!({"type": "Ready", "status": if ready { "True" } else { "False" }});
    merge(c, &format!("{}/status", path_of(&NODE, Some(name))), json!({"status": {"conditions": [cond]}})).await;
}

async fn annotate(c: &Client, name: &str, a: Value) {
    merge(c, &path_of(&NODE, Some(name)), json!({"metadata": {"annotations": a}})).await;
}

async fn node(c: &Client, name: &str) -> Value {
    c.get(&path_of(&NODE, Some(name))).await.unwrap().into_result().unwrap()
}

fn annotation<'a>(n: &'a Value, k: &str) -> &'a str {
    n.pointer("/metadata/annotations").and_then(|a| a.get(k)).and_then(Value::as_str).unwrap_or("")
}

fn cordoned(n: &Value) -> bool {
    n.pointer("/spec/unschedulable") == Some(&json!(true))
}

fn is_true(obj: &Value, type_: &str) -> bool {
    condition(obj, type_).is_some_and(|c| c["status"] == "True")
}

async fn pool(c: &Client) -> Value {
    c.get(&path_of(&MACHINE_CONFIG_POOL, Some("worker"))).await.unwrap().into_result().unwrap()
}

/// Events about `kind`/`name` with `reason`.
async fn events(c: &Client, kind: &str, name: &str, reason: &str) -> Vec<Value> {
    let list = c.get(&resource_path(EVENT.path_ref(), Some("default"), None)).await.unwrap().into_result().unwrap();
    list["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["involvedObject"]["kind"] == kind && e["involvedObject"]["name"] == name && e["reason"] == reason)
        .cloned()
        .collect()
}

/// Wait for an event whose message contains `needle`; returns its message.
async fn event_with(c: &Client, kind: &str, name: &str, reason: &str, needle: &str) -> String {
    eventually(WAIT, &format!("a {reason} event on {kind}/{name} containing {needle:?}"), || async {
        let evs = events(c, kind, name, reason).await;
        Ok(evs.iter().filter_map(|e| e["message"].as_str()).find(|m| m.contains(needle)).map(str::to_string))
    })
    .await
}

/// The worker pool, paused (so no node is picked) unless `paused` is false, with `extra` spec.
fn worker_pool(paused: bool, extra: Value) -> Value {
    let mut p = machine_config_pool("worker", "worker");
    p["spec"]["paused"] = json!(paused);
    if let (Some(s), Some(e)) = (p["spec"].as_object_mut(), extra.as_object()) {
        s.extend(e.clone());
    }
    p
}

fn ndb(name: &str, spec: Value) -> Value {
    json!({"apiVersion": "aloft.dev/v1", "kind": "NodeDisruptionBudget", "metadata": {"name": name}, "spec": spec})
}

fn aloftctl(c: &Coordinator, args: &[&str]) -> std::process::Output {
    c.aloftctl(args)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn budget_blocks_a_drain_and_a_drain_past_its_timeout_degrades_the_node() {
    let c = Coordinator::start();
    let admin = c.client();
    // Invalid budgets are refused with the field at fault.
    for (spec, field) in [
        (json!({"minAvailable": 1, "maxUnavailable": 1}), "spec"),
        (json!({"maxUnavailable": "120%"}), "spec.maxUnavailable"),
        (
            json!({"minAvailable": 1, "selector": {"matchExpressions": [{"key": "a", "operator": "Near"}]}}),
            "spec.selector.matchExpressions[0].operator",
        ),
    ] {
        let r = admin.post(&path_of(&NODE_DISRUPTION_BUDGET, None), &ndb("bad", spec)).await.unwrap();
        assert_eq!(r.code, 422, "{}", r.body);
        assert_eq!(aloft_tests::cause_fields(&r.body), vec![field.to_string()], "{}", r.body);
    }
    create(&admin, &MACHINE_CONFIG_POOL, &worker_pool(true, json!({"drain": {"timeoutSeconds": 2}}))).await;
    let db = json!({"node-role.kubernetes.io/worker": "", "app": "db"});
    create(
        &admin,
        &NODE_DISRUPTION_BUDGET,
        &ndb("db", json!({"selector": {"matchLabels": {"app": "db"}}, "maxUnavailable": 1})),
    )
    .await;
    let listed = String::from_utf8_lossy(&aloftctl(&c, &["get", "ndb"]).stdout).to_string();
    let mut lines = listed.lines();
    assert!(lines.next().unwrap_or("").starts_with("NAME"), "{listed}");
    let row: Vec<&str> = lines.next().unwrap_or("").split_whitespace().collect();
    assert_eq!(&row[..4], &["db", "N/A", "1", "0"], "NAME MIN-AVAILABLE MAX-UNAVAILABLE ALLOWED-DISRUPTIONS: {listed}");
    fake_node(&admin, "n1", db.clone(), true).await;
    // n2 is down for reasons of its own: it uses the budget's one slot.
    fake_node(&admin, "n2", db, false).await;

    annotate(&admin, "n1", json!({ann::DESIRED_DRAIN: "drain-rendered-worker-1"})).await;
    let msg = event_with(&admin, "Node", "n1", "BudgetBlocked", "NodeDisruptionBudget db").await;
    assert_eq!(
        msg,
        "the drain for rendered-worker-1 waits: NodeDisruptionBudget db allows 1 of 2 nodes unavailable and 1 already are"
    );
    let n1 = node(&admin, "n1").await;
    assert!(!cordoned(&n1), "a blocked drain does not cordon");
    assert_eq!(annotation(&n1, ann::LAST_APPLIED_DRAIN), "", "a blocked drain is not acknowledged");

    // Past the pool's drain timeout: the node is marked, the pool says so, the drain goes on.
    let failure = drain_failure(&admin, "n1").await;
    assert_eq!(
        failure,
        "failed to drain node: n1 after 2 seconds: NodeDisruptionBudget db allows 1 of 2 nodes unavailable and 1 already are"
    );
    let p = eventually(WAIT, "the pool to raise NodeDrainTimeout", || async {
        let p = pool(&admin).await;
        Ok(is_true(&p, "NodeDrainTimeout").then_some(p))
    })
    .await;
    // The mark (which names the node) as the message, under a fixed reason.
    let timeout = condition(&p, "NodeDrainTimeout").unwrap();
    assert_eq!(
        (timeout["reason"].as_str(), timeout["message"].as_str()),
        (Some("DrainTimedOut"), Some(failure.as_str()))
    );
    assert!(is_true(&p, "NodeDegraded") && is_true(&p, "Degraded"), "{p}");
    assert_eq!(p["status"]["degradedMachineCount"], 1);
    event_with(&admin, "Node", "n1", "DrainTimeout", "failed to drain node: n1").await;
    let out = aloftctl(&c, &["get", "nodes"]);
    let text = String::from_utf8_lossy(&out.stdout);
    let row = text.lines().find(|l| l.starts_with("n1 ")).unwrap_or_else(|| panic!("no n1 row in:\n{text}"));
    assert!(row.contains("Degraded") && row.contains("failed to drain node: n1"), "{text}");
    assert!(text.lines().next().unwrap().contains("REASON"), "{text}");

    // While nothing changes, the blocked drain is not polled (it was, every 2 s): what would free
    // the budget is an event.
    let before = drain_passes(&c);
    tokio::time::sleep(Duration::from_secs(6)).await;
    let passes = drain_passes(&c) - before;
    assert!(passes <= 1, "{passes} drain passes in 6 s with nothing changing");

    // The other node comes back: the drain proceeds, and the failure is cleared.
    set_ready(&admin, "n2", true).await;
    let n1 = eventually(WAIT, "n1's drain acknowledged", || async {
        let n = node(&admin, "n1").await;
        Ok((annotation(&n, ann::LAST_APPLIED_DRAIN) == "drain-rendered-worker-1").then_some(n))
    })
    .await;
    assert!(cordoned(&n1));
    assert_eq!(annotation(&n1, ann::DRAIN_FAILURE), "");
    eventually(WAIT, "NodeDrainTimeout cleared", || async {
        Ok((!is_true(&pool(&admin).await, "NodeDrainTimeout")).then_some(()))
    })
    .await;
}

/// What the loopback hook server does with the next calls.
#[derive(Debug, Clone, Copy)]
enum HookMode {
    Ok,
    Status(u16),
    Sleep(Duration),
}

#[derive(Clone)]
struct HookServer {
    url: String,
    calls: Arc<Mutex<Vec<Value>>>,
    mode: Arc<Mutex<HookMode>>,
}

impl HookServer {
    /// A minimal HTTP/1.1 server on loopback that records each POST body.
    async fn start() -> HookServer {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/lb", listener.local_addr().unwrap());
        let s = HookServer { url, calls: Arc::default(), mode: Arc::new(Mutex::new(HookMode::Ok)) };
        let server = s.clone();
        tokio::spawn(async move {
            while let Ok((mut sock, _)) = listener.accept().await {
                let server = server.clone();
                tokio::spawn(async move {
                    let mut buf = Vec::new();
                    let mut chunk = [0u8; 4096];
                    let body = loop {
                        let Ok(n) = sock.read(&mut chunk).await else { return };
                        if n == 0 {
                            return;
                        }
                        buf.extend_from_slice(&chunk[..n]);
                        let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else { continue };
                        let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
                        let len: usize = head
                            .lines()
                            .find_map(|l| l.strip_prefix("content-length:"))
                            .and_then(|v| v.trim().parse().ok())
                            .unwrap_or(0);
                        if buf.len() >= end + 4 + len {
                            break buf[end + 4..end + 4 + len].to_vec();
                        }
                    };
                    let mode = *server.mode.lock().unwrap();
                    server.calls.lock().unwrap().push(serde_json::from_slice(&body).unwrap_or(Value::Null));
                    let code = match mode {
                        HookMode::Ok => 200,
                        HookMode::Status(c) => c,
                        HookMode::Sleep(d) => {
                            tokio::time::sleep(d).await;
                            200
                        }
                    };
                    let resp = format!("HTTP/1.1 {code} X\r\ncontent-length: 4\r\nconnection: close\r\n\r\nnope");
                    let _ = sock.write_all(resp.as_bytes()).await;
                });
            }
        });
        s
    }

    fn set(&self, m: HookMode) {
        *self.mode.lock().unwrap() = m;
    }

    fn calls(&self) -> Vec<Value> {
        self.calls.lock().unwrap().clone()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drain_hooks_are_called_in_order_and_failing_or_slow_hooks_hold_the_drain() {
    let c = Coordinator::start();
    let admin = c.client();
    let hook = HookServer::start().await;
    let hooks = json!({"drain": {"hooks": [{"url": hook.url, "timeoutSeconds": 1}]}});
    create(&admin, &MACHINE_CONFIG_POOL, &worker_pool(true, hooks)).await;
    let w = json!({"node-role.kubernetes.io/worker": ""});
    fake_node(&admin, "n1", w.clone(), true).await;
    fake_node(&admin, "n2", w, true).await;

    annotate(&admin, "n1", json!({ann::DESIRED_DRAIN: "drain-rendered-worker-1"})).await;
    let n1 = eventually(WAIT, "n1's drain acknowledged", || async {
        let n = node(&admin, "n1").await;
        Ok((annotation(&n, ann::LAST_APPLIED_DRAIN) == "drain-rendered-worker-1").then_some(n))
    })
    .await;
    assert!(cordoned(&n1));
    assert_eq!(
        hook.calls(),
        vec![json!({"node": "n1", "pool": "worker", "phase": "drain", "request": "drain-rendered-worker-1"})],
        "the hook was called once, before the acknowledgement"
    );

    // A hook answering 500 holds n2's drain; so does one slower than its timeout.
    hook.set(HookMode::Status(500));
    annotate(&admin, "n2", json!({ann::DESIRED_DRAIN: "drain-rendered-worker-1"})).await;
    let msg = event_with(&admin, "Node", "n2", "DrainHookFailed", "HTTP 500").await;
    assert!(msg.contains(&hook.url), "{msg}");
    assert_eq!(
        annotation(&node(&admin, "n2").await, ann::LAST_APPLIED_DRAIN),
        "",
        "not acknowledged while the hook fails"
    );
    hook.set(HookMode::Sleep(Duration::from_secs(4)));
    event_with(&admin, "Node", "n2", "DrainHookFailed", "did not answer within 1 s").await;
    assert_eq!(
        annotation(&node(&admin, "n2").await, ann::LAST_APPLIED_DRAIN),
        "",
        "not acknowledged while the hook hangs"
    );
    hook.set(HookMode::Ok);
    eventually(WAIT, "n2's drain acknowledged once the hook answers", || async {
        let n = node(&admin, "n2").await;
        Ok((annotation(&n, ann::LAST_APPLIED_DRAIN) == "drain-rendered-worker-1").then_some(()))
    })
    .await;

    // Uncordon: the hook hears about it (phase uncordon) and the node is schedulable again.
    annotate(&admin, "n1", json!({ann::DESIRED_DRAIN: "uncordon-rendered-worker-1"})).await;
    let n1 = eventually(WAIT, "n1 uncordoned", || async {
        let n = node(&admin, "n1").await;
        Ok((annotation(&n, ann::LAST_APPLIED_DRAIN) == "uncordon-rendered-worker-1").then_some(n))
    })
    .await;
    assert!(!cordoned(&n1));
    assert!(hook.calls().iter().any(|b| b["node"] == "n1" && b["phase"] == "uncordon"), "{:?}", hook.calls());
}

/// Nodes of the worker pool whose desiredConfig is `target`.
async fn picked(c: &Client, names: &[&str], target: &str) -> Vec<String> {
    let mut out = Vec::new();
    for n in names {
        if annotation(&node(c, n).await, ann::DESIRED_CONFIG) == target {
            out.push(n.to_string());
        }
    }
    out
}

/// Wait until `n` of `names` are picked for `target` (their desiredConfig), and return them.
async fn picked_all(c: &Client, names: &[&str], target: &str, n: usize) -> Vec<String> {
    eventually(WAIT, &format!("{n} of {names:?} picked for {target}"), || async {
        let p = picked(c, names, target).await;
        Ok((p.len() == n).then_some(p))
    })
    .await
}

/// Play the agent: the node finished (Done on `config`), or its update to `config` failed; as the
/// agent does, the failure names the config it is about and Done clears that.
async fn finish(c: &Client, name: &str, config: &str) {
    annotate(
        c,
        name,
        json!({ann::CURRENT_CONFIG: config, ann::STATE: "Done", ann::REASON: "", ann::FAILED_CONFIG: null}),
    )
    .await;
}

async fn fail(c: &Client, name: &str, config: &str) {
    annotate(c, name, json!({ann::STATE: "Degraded", ann::REASON: "boom", ann::FAILED_CONFIG: config})).await;
}

/// Play the agent: Working on the way to `config`, asking for its drain.
async fn working(c: &Client, name: &str, config: &str) {
    annotate(
        c,
        name,
        json!({ann::STATE: "Working", ann::REASON: "", ann::FAILED_CONFIG: null, ann::DESIRED_DRAIN: format!("drain-{config}")}),
    )
    .await;
}

/// Play the agents of `names`: finish each node as it is picked for `target`, until all are on it.
/// Worker nodes `names`, a worker pool with `spec` (its maxUnavailable and rollout policy) and a
/// first MachineConfig, every node taken to the first rendered config one at a time: the fleet
/// a test's change starts from. Returns that config.
async fn fleet_on_a_first_config(c: &Client, names: &[&str], spec: Value) -> String {
    for n in names {
        fake_node(c, n, json!({"node-role.kubernetes.io/worker": ""}), true).await;
    }
    create(c, &MACHINE_CONFIG_POOL, &worker_pool(false, spec)).await;
    create(c, &MACHINE_CONFIG, &machine_config("50-worker-a", "worker")).await;
    let first = new_target(c, "").await;
    finish_each_as_picked(c, names, &first).await;
    first
}

/// The node's `aloft.dev/drainFailure`, once it is set.
async fn drain_failure(c: &Client, name: &str) -> String {
    eventually(WAIT, &format!("{name} marked with a drain failure"), || async {
        let n = node(c, name).await;
        Ok(Some(annotation(&n, ann::DRAIN_FAILURE).to_string()).filter(|s| !s.is_empty()))
    })
    .await
}

async fn finish_each_as_picked(c: &Client, names: &[&str], target: &str) {
    for _ in names {
        let n = eventually(WAIT, &format!("a node picked for {target}"), || async {
            for n in names {
                let v = node(c, n).await;
                if annotation(&v, ann::DESIRED_CONFIG) == target && annotation(&v, ann::CURRENT_CONFIG) != target {
                    return Ok(Some(*n));
                }
            }
            Ok(None)
        })
        .await;
        finish(c, n, target).await;
    }
}

/// Wait for the pool to target a rendered config other than `previous`.
async fn new_target(c: &Client, previous: &str) -> String {
    eventually(WAIT, "the pool to render a new config", || async {
        let p = pool(c).await;
        Ok(p.pointer("/spec/configuration/name").and_then(Value::as_str).filter(|t| *t != previous).map(str::to_string))
    })
    .await
}

/// `spec.rollout.maintenance` with one window opening at `at` (UTC) for an hour.
fn window_at(at: chrono::DateTime<chrono::Utc>) -> Value {
    json!({"rollout": {"maintenance": {"timeZone": "UTC",
        "windows": [{"days": [at.format("%a").to_string()], "startTime": at.format("%H:%M").to_string(), "lengthMinutes": 60}]}}})
}

/// A maintenance window (`spec.rollout.maintenance`): while none is open a new config moves no
/// node (condition MaintenanceWindowClosed with the next opening, its Event, `aloftctl rollout
/// status` saying so), and the waiting nodes pre-stage it. Moved to a window that opens within
/// the minute, the rollout starts once it opens, with no write to start it: the last write (the
/// new schedule) was answered by a pass that still picked nothing. (The controller's timer at
/// the window's edges is `node::tests::a_window_wakes_the_controller_at_its_edges_while_nodes_wait`;
/// its 30 s resync would start the rollout too, a little later.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rollout_waits_for_its_maintenance_window_and_starts_when_it_opens() {
    use chrono::{DurationRound, TimeDelta, Utc};
    let c = Coordinator::start();
    let admin = c.client();
    let names = ["m0", "m1"];
    // Three days from now: closed for the whole test. Nodes with no config get their first one
    // all the same (as a pause lets them).
    let far = (Utc::now() + TimeDelta::days(3)).duration_trunc(TimeDelta::minutes(1)).unwrap();
    let mut spec = window_at(far);
    spec["maxUnavailable"] = json!(2);
    let first = fleet_on_a_first_config(&admin, &names, spec).await;
    // A new OS image, which the waiting nodes are asked to pre-stage.
    let mut os = machine_config("50-worker-os", "worker");
    os["spec"]["osImageURL"] = json!(format!("ostree+http://127.0.0.1:1/repo#aloft/os/x86_64@{}", "b".repeat(64)));
    create(&admin, &MACHINE_CONFIG, &os).await;
    let t2 = new_target(&admin, &first).await;
    let held = eventually(WAIT, "MaintenanceWindowClosed", || async {
        let p = pool(&admin).await;
        Ok(condition(&p, "MaintenanceWindowClosed").filter(|c| c["status"] == "True").cloned())
    })
    .await;
    let local = far.format("%a %Y-%m-%d %H:%M UTC (UTC)").to_string();
    assert_eq!(held["reason"], "OutsideWindow", "{held}");
    assert_eq!(held["message"], format!("no maintenance window is open: the next opens {local}"), "{held}");
    event_with(
        &admin,
        "MachineConfigPool",
        "worker",
        "MaintenanceWindowClosed",
        &format!("nodes wait for {t2}: no maintenance window is open: the next opens {local}"),
    )
    .await;
    for n in names {
        eventually(WAIT, &format!("{n} pre-staging {t2}"), || async {
            Ok((annotation(&node(&admin, n).await, ann::PRESTAGE_CONFIG) == t2).then_some(()))
        })
        .await;
    }
    assert!(picked(&admin, &names, &t2).await.is_empty(), "nothing picked outside the window");
    let out = aloftctl(&c, &["rollout", "status", "mcp/worker", "--timeout", "2"]);
    let said = String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{said}");
    assert!(said.contains(&format!("held: no maintenance window is open: the next opens {local}")), "{said}");

    // A window opening at the first whole minute at least 5 s away.
    let soon = (Utc::now() + TimeDelta::seconds(5 + 59)).duration_trunc(TimeDelta::minutes(1)).unwrap();
    merge(&admin, &path_of(&MACHINE_CONFIG_POOL, Some("worker")), json!({"spec": window_at(soon)})).await;
    let soon_local = soon.format("%a %Y-%m-%d %H:%M UTC (UTC)").to_string();
    eventually(WAIT, "the condition naming the new opening", || async {
        let p = pool(&admin).await;
        let c = condition(&p, "MaintenanceWindowClosed").cloned().unwrap_or_default();
        Ok(c["message"].as_str().is_some_and(|m| m.ends_with(&soon_local)).then_some(()))
    })
    .await;
    while Utc::now() < soon - TimeDelta::seconds(1) {
        assert!(picked(&admin, &names, &t2).await.is_empty(), "picked before the window opened at {soon}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    picked_all(&admin, &names, &t2, 2).await;
    assert!(Utc::now() >= soon, "picked before {soon}");
    eventually(WAIT, "MaintenanceWindowClosed False", || async {
        let p = pool(&admin).await;
        Ok(condition(&p, "MaintenanceWindowClosed").is_some_and(|c| c["status"] == "False").then_some(()))
    })
    .await;
    for n in names {
        finish(&admin, n, &t2).await;
    }
    eventually(WAIT, "the pool Updated", || async { Ok(is_true(&pool(&admin).await, "Updated").then_some(())) }).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn canary_soaks_before_batches_and_the_circuit_breaker_stops_a_rollout_until_resumed() {
    let c = Coordinator::start();
    let admin = c.client();
    let names = ["w0", "w1", "w2", "w3"];
    for n in names {
        fake_node(&admin, n, json!({"node-role.kubernetes.io/worker": ""}), true).await;
        // A running fleet: nodes with no config at all are not held by a canary or a soak (a node
        // that joins during the soak, below, is).
        finish(&admin, n, "rendered-worker-before").await;
    }
    // An hour, so that a node joins during the soak however slow the machine; shortened below.
    let policy = json!({"maxUnavailable": 3, "rollout": {"canary": 1, "soakSeconds": 3600}});
    create(&admin, &MACHINE_CONFIG_POOL, &worker_pool(false, policy)).await;
    create(&admin, &MACHINE_CONFIG, &machine_config("50-worker-a", "worker")).await;
    let t1 = new_target(&admin, "").await;

    // The canary: exactly one node, although maxUnavailable is 3; the others pre-stage.
    let canary = eventually(WAIT, "one canary picked", || async {
        let p = picked(&admin, &names, &t1).await;
        Ok((p.len() == 1).then(|| p[0].clone()))
    })
    .await;
    for _ in 0..5 {
        assert_eq!(picked(&admin, &names, &t1).await, vec![canary.clone()], "only the canary until it is updated");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    for n in names.iter().filter(|n| **n != canary) {
        let a = node(&admin, n).await;
        assert_eq!(annotation(&a, ann::PRESTAGE_CONFIG), t1, "{n} waits and pre-stages {t1}");
    }
    assert_eq!(annotation(&node(&admin, &canary).await, ann::PRESTAGE_CONFIG), "", "picked: no pre-stage");
    event_with(&admin, "MachineConfigPool", "worker", "SetDesiredConfig", &format!("Targeted node {canary} to {t1}"))
        .await;

    // The canary finishes: the pool soaks, still without picking.
    finish(&admin, &canary, &t1).await;
    let p = eventually(WAIT, "the pool soaking", || async {
        let p = pool(&admin).await;
        Ok(is_true(&p, "CanarySoaking").then_some(p))
    })
    .await;
    assert_eq!(p["status"]["rollout"]["phase"], "Soaking");
    assert_eq!(picked(&admin, &names, &t1).await, vec![canary.clone()], "nothing picked while soaking");
    event_with(&admin, "MachineConfigPool", "worker", "CanarySoaking", "soaking until").await;
    // A node that joins meanwhile has no config at all: it gets the target without waiting for
    // the soak (it stayed unconfigured until the soak ended), and the running nodes still wait.
    fake_node(&admin, "w4", json!({"node-role.kubernetes.io/worker": ""}), true).await;
    eventually(WAIT, "the joining node given the target during the soak", || async {
        Ok((annotation(&node(&admin, "w4").await, ann::DESIRED_CONFIG) == t1).then_some(()))
    })
    .await;
    assert!(is_true(&pool(&admin).await, "CanarySoaking"), "still soaking");
    assert_eq!(picked(&admin, &names, &t1).await, vec![canary.clone()], "the running nodes wait for the soak");
    let gone = admin.delete(&path_of(&NODE, Some("w4"))).await.unwrap();
    assert!(gone.code < 300, "deleting w4: {}", gone.code);

    // The soak shortened to end 3 s from now (its length is read on every pass): the
    // controller's own timer ends it.
    let p = pool(&admin).await;
    let started = p["status"]["rollout"]["soakStartTime"].as_str().unwrap_or_default().to_string();
    let started = chrono::DateTime::parse_from_rfc3339(&started).unwrap_or_else(|e| panic!("{started:?}: {e}: {p}"));
    let soak = (chrono::Utc::now() - started.with_timezone(&chrono::Utc)).num_seconds() + 3;
    merge(&admin, &path_of(&MACHINE_CONFIG_POOL, Some("worker")), json!({"spec": {"rollout": {"soakSeconds": soak}}}))
        .await;

    // After the soak: a batch of maxUnavailable.
    picked_all(&admin, &names, &t1, 4).await;
    // The picks are written before the pool status: the condition follows.
    eventually(WAIT, "CanarySoaking cleared", || async {
        Ok((!is_true(&pool(&admin).await, "CanarySoaking")).then_some(()))
    })
    .await;
    for n in names {
        finish(&admin, n, &t1).await;
    }
    eventually(WAIT, "the pool Updated", || async { Ok(is_true(&pool(&admin).await, "Updated").then_some(())) }).await;

    // The circuit breaker: no canary, two at a time, no failure tolerated.
    merge(
        &admin,
        &path_of(&MACHINE_CONFIG_POOL, Some("worker")),
        json!({"spec": {"maxUnavailable": 2, "rollout": {"canary": 0, "soakSeconds": 0, "maxFailures": 0}}}),
    )
    .await;
    let mut b = machine_config("50-worker-b", "worker");
    b["spec"]["kernelArguments"] = json!(["nosmt"]);
    create(&admin, &MACHINE_CONFIG, &b).await;
    let t2 = new_target(&admin, &t1).await;
    let first = picked_all(&admin, &names, &t2, 2).await;
    fail(&admin, &first[0], &t2).await;
    let p = eventually(WAIT, "the circuit breaker to trip", || async {
        let p = pool(&admin).await;
        Ok(is_true(&p, "CircuitBroken").then_some(p))
    })
    .await;
    let msg = condition(&p, "CircuitBroken").unwrap()["message"].as_str().unwrap().to_string();
    assert!(msg.contains(&first[0]) && msg.contains("more than maxFailures 0"), "{msg}");
    assert_eq!(p["spec"].get("paused"), Some(&json!(false)), "the user's spec is not rewritten");
    event_with(&admin, "MachineConfigPool", "worker", "CircuitBroken", &first[0]).await;
    finish(&admin, &first[1], &t2).await;
    for _ in 0..5 {
        assert_eq!(picked(&admin, &names, &t2).await.len(), 2, "nothing picked while the breaker is open");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    for n in names.iter().filter(|n| !first.contains(&n.to_string())) {
        assert_eq!(
            annotation(&node(&admin, n).await, ann::PRESTAGE_CONFIG),
            "",
            "{n}: no pre-staging of a stopped config"
        );
    }
    // A node that joins with the breaker open gets a config all the same, as MCO's
    // machine-config-server serves one: t2, which a node runs already.
    fake_node(&admin, "w5", json!({"node-role.kubernetes.io/worker": ""}), true).await;
    eventually(WAIT, "the joining node given t2 with the breaker open", || async {
        Ok((annotation(&node(&admin, "w5").await, ann::DESIRED_CONFIG) == t2).then_some(()))
    })
    .await;
    let msg = event_with(&admin, "MachineConfigPool", "worker", "SetDesiredConfig", "Targeted node w5").await;
    assert!(msg.contains("the circuit breaker is open") && msg.contains("the pool's target"), "{msg}");
    assert_eq!(picked(&admin, &names, &t2).await.len(), 2, "the configured nodes still wait for the breaker");
    let gone = admin.delete(&path_of(&NODE, Some("w5"))).await.unwrap();
    assert!(gone.code < 300, "deleting w5: {}", gone.code);
    let out = aloftctl(&c, &["rollout", "status", "mcp/worker", "--timeout", "30"]);
    assert!(!out.status.success(), "rollout status fails on an open breaker");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("degraded") || err.contains("circuit breaker"), "{err}");

    // Resume: the failure is forgiven and the rollout goes on.
    let out = aloftctl(&c, &["rollout", "resume", "mcp/worker"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("resumed"));
    // The failed node still holds its slot (maxUnavailable 2): one more is picked.
    picked_all(&admin, &names, &t2, 3).await;
    eventually(WAIT, "CircuitBroken cleared", || async {
        Ok((!is_true(&pool(&admin).await, "CircuitBroken")).then_some(()))
    })
    .await;
    finish(&admin, &first[0], &t2).await;
    picked_all(&admin, &names, &t2, 4).await;
    for n in names {
        finish(&admin, n, &t2).await;
    }
    let out = aloftctl(&c, &["rollout", "status", "mcp/worker", "--timeout", "60"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let table = String::from_utf8_lossy(&aloftctl(&c, &["get", "mcp"]).stdout).to_string();
    for col in [
        "CONFIG",
        "UPDATED",
        "UPDATING",
        "DEGRADED",
        "MACHINECOUNT",
        "READYMACHINECOUNT",
        "UPDATEDMACHINECOUNT",
        "DEGRADEDMACHINECOUNT",
    ] {
        assert!(table.lines().next().unwrap_or("").contains(col), "{col} in:\n{table}");
    }

    // Paused, with a new target t3 on no node: a node that joins gets t2, the config the pool's
    // nodes run (status.configuration), not the untested t3; Done on it, it is behind t3 like
    // the others (not updated, available), and held by the pause.
    merge(&admin, &path_of(&MACHINE_CONFIG_POOL, Some("worker")), json!({"spec": {"paused": true}})).await;
    let mut cfg = machine_config("50-worker-c", "worker");
    cfg["spec"]["kernelArguments"] = json!(["nosmt", "quiet"]);
    create(&admin, &MACHINE_CONFIG, &cfg).await;
    let t3 = new_target(&admin, &t2).await;
    fake_node(&admin, "w6", json!({"node-role.kubernetes.io/worker": ""}), true).await;
    eventually(WAIT, "the joining node given t2 while paused", || async {
        Ok((annotation(&node(&admin, "w6").await, ann::DESIRED_CONFIG) == t2).then_some(()))
    })
    .await;
    let msg = event_with(&admin, "MachineConfigPool", "worker", "SetDesiredConfig", "Targeted node w6").await;
    assert!(msg.contains(&format!("to {t2}")) && msg.contains("the pool is paused"), "{msg}");
    finish(&admin, "w6", &t2).await;
    let p = eventually(WAIT, "w6 counted on t2, behind t3", || async {
        let p = pool(&admin).await;
        let st = &p["status"];
        Ok((st["machineCount"] == 5 && st["unavailableMachineCount"] == 0).then_some(p))
    })
    .await;
    assert_eq!(p["status"]["updatedMachineCount"], 0, "{p}");
    assert_eq!(p["status"]["readyMachineCount"], 0, "{p}");
    let mut all = names.to_vec();
    all.push("w6");
    assert!(picked(&admin, &all, &t3).await.is_empty(), "nothing moves to t3 while paused");
}

/// Unavailable as the invariant counts it: not Ready, cordoned, asked to move and not there, or
/// Working.
fn unavailable(n: &Value) -> bool {
    let ready = n
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .is_some_and(|cs| cs.iter().any(|c| c["type"] == "Ready" && c["status"] == "True"));
    let desired = annotation(n, ann::DESIRED_CONFIG);
    !ready
        || cordoned(n)
        || (!desired.is_empty() && desired != annotation(n, ann::CURRENT_CONFIG))
        || ["Working", "Degraded", "Unreconcilable"].contains(&annotation(n, ann::STATE))
}

/// The budget binds (the pool allows two, the budget one), through two SIGKILLs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invariant_holds_with_real_agents_through_coordinator_sigkills() {
    invariant_through_sigkills(true).await;
}

/// The pool's own limit binds (maxUnavailable 1, no budget), through two SIGKILLs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_unavailable_holds_with_real_agents_through_coordinator_sigkills() {
    invariant_through_sigkills(false).await;
}

/// Three real agents roll out a config that reboots each, the coordinator SIGKILLed as the first
/// node goes down and while the second reboots; every sample of the Nodes has at most one
/// unavailable, the limit set by the budget (`by_budget`) or by the pool's maxUnavailable.
async fn invariant_through_sigkills(by_budget: bool) {
    let mut c = Coordinator::start_with(Options { fixed_port: true, ..Default::default() });
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
    let names: Vec<String> = hosts.iter().map(|h| h.name.clone()).collect();
    eventually(Duration::from_secs(120), "three nodes enrolled and Done", || async {
        let mut done = 0;
        for n in &names {
            if let Ok(r) = admin.get(&path_of(&NODE, Some(n))).await {
                if r.code == 200 && annotation(&r.body, ann::STATE) == "Done" {
                    done += 1;
                }
            }
        }
        Ok((done == 3).then_some(()))
    })
    .await;
    if by_budget {
        // The pool allows two at a time; the budget (2 of 3 must stay available) allows one.
        create(&admin, &MACHINE_CONFIG_POOL, &worker_pool(false, json!({"maxUnavailable": 2}))).await;
        create(
            &admin,
            &NODE_DISRUPTION_BUDGET,
            &ndb(
                "workers",
                json!({"selector": {"matchLabels": {"node-role.kubernetes.io/worker": ""}}, "minAvailable": 2}),
            ),
        )
        .await;
    } else {
        create(&admin, &MACHINE_CONFIG_POOL, &worker_pool(false, json!({"maxUnavailable": 1}))).await;
    }
    let allowed = 1;
    // A unit with no disruption policy: every node drains and reboots.
    let unit = json!({
        "apiVersion": "machineconfiguration.openshift.io/v1", "kind": "MachineConfig",
        "metadata": {"name": "60-worker-hello", "labels": {ann::ROLE_LABEL: "worker"}},
        "spec": {"config": {"ignition": {"version": "3.4.0"}, "systemd": {"units": [
            {"name": "hello.service", "enabled": true,
             "contents": "[Unit]\nDescription=hello\n[Service]\nExecStart=/bin/true\n[Install]\nWantedBy=multi-user.target\n"}]}}},
    });
    create(&admin, &MACHINE_CONFIG, &unit).await;
    let target = new_target(&admin, "").await;

    let mut rebooted = 0;
    let mut kills = 0;
    let mut samples = 0;
    let mut max_seen = 0;
    let mut seen_unavailable = std::collections::BTreeSet::new();
    let mut finished = false;
    // Sampled until every node is on the target (four minutes at most: three drains and
    // reboots, two coordinator restarts and the agents' reconnects, on a slow machine).
    let deadline = std::time::Instant::now() + Duration::from_secs(240);
    let mut round = 0;
    while !finished && std::time::Instant::now() < deadline {
        round += 1;
        // Sample every node at one revision (a list is one read transaction: node-by-node GETs
        // could see one node before its slot was freed and the next after it was taken); a
        // coordinator that is down yields no sample.
        let mut now_unavailable = Vec::new();
        let mut on_target = 0;
        let mut ok = false;
        if let Ok(r) = admin.get(&path_of(&NODE, None)).await {
            ok = r.code == 200;
            for item in r.body["items"].as_array().into_iter().flatten() {
                let n = item.pointer("/metadata/name").and_then(Value::as_str).unwrap_or("").to_string();
                if !names.contains(&n) {
                    continue;
                }
                if unavailable(item) {
                    now_unavailable.push(n);
                }
                if annotation(item, ann::CURRENT_CONFIG) == target
                    && annotation(item, ann::STATE) == "Done"
                    && !unavailable(item)
                {
                    on_target += 1;
                }
            }
        }
        if ok {
            samples += 1;
            max_seen = max_seen.max(now_unavailable.len());
            seen_unavailable.extend(now_unavailable.iter().cloned());
            assert!(
                now_unavailable.len() <= allowed,
                "round {round}: {now_unavailable:?} unavailable at once; the {} allows {allowed}",
                if by_budget { "budget" } else { "pool" }
            );
            if on_target == 3 {
                finished = true;
                break;
            }
            // SIGKILL the coordinator mid-rollout: first as soon as a node is taken down for the
            // update, ...
            if !now_unavailable.is_empty() && kills == 0 && rebooted == 0 {
                c.restart();
                kills += 1;
            }
        }
        for h in hosts.iter_mut() {
            if h.fake.reboots().len() == 1 {
                // Play the reboot: new boot id, fresh agent.
                h.stop_agent();
                // ... then while the second node reboots.
                if kills == 1 && rebooted == 1 {
                    c.restart();
                    kills += 1;
                }
                h.fake.clear_calls();
                std::fs::write(h.path("/proc/sys/kernel/random/boot_id"), format!("boot-2-{}-{round}\n", h.name))
                    .unwrap();
                h.start_agent(&c, token_file.path());
                rebooted += 1;
            }
        }
        tokio::time::sleep(Duration::from_millis(40)).await;
    }
    assert!(finished, "every node on {target} within four minutes ({round} rounds, {rebooted} reboots)");
    assert_eq!(rebooted, 3, "each node rebooted once");
    assert_eq!(kills, 2, "the coordinator was killed twice mid-rollout");
    // The samples watched the whole rollout: each node was caught in its unavailable window
    // (a fast rollout is over in fifteen samples; their count says nothing more).
    assert_eq!(
        seen_unavailable.len(),
        names.len(),
        "sampled {samples} times, saw {seen_unavailable:?} unavailable, of {names:?}"
    );
    assert_eq!(max_seen, allowed, "sampled {samples} times, at most {max_seen} unavailable");
    if by_budget {
        event_with(&admin, "MachineConfigPool", "worker", "BudgetBlocked", "NodeDisruptionBudget workers").await;
    }
    for n in &names {
        let node = node(&admin, n).await;
        assert!(!cordoned(&node), "{n} uncordoned after Done");
        assert_eq!(annotation(&node, ann::CURRENT_CONFIG), target);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiting_nodes_pre_stage_only_a_target_that_changes_their_os() {
    let c = Coordinator::start();
    let admin = c.client();
    let names = ["p0", "p1"];
    // Both nodes end up on t1, one at a time.
    let t1 = fleet_on_a_first_config(&admin, &names, json!({"maxUnavailable": 1})).await;

    // A config-only change: the node that waits has no OS to fetch, so no pre-stage request.
    let mut b = machine_config("50-worker-b", "worker");
    b["spec"]["kernelArguments"] = json!(["nosmt"]);
    create(&admin, &MACHINE_CONFIG, &b).await;
    let t2 = new_target(&admin, &t1).await;
    event_with(&admin, "MachineConfigPool", "worker", "NodeWaiting", &t2).await;
    let waiting = eventually(WAIT, "one node picked for t2, one waiting", || async {
        let p = picked(&admin, &names, &t2).await;
        Ok((p.len() == 1).then(|| names.iter().find(|n| **n != p[0]).map(|n| n.to_string())).flatten())
    })
    .await;
    // The pass that wrote the pick and the wait event would have written a pre-stage request
    // in the same breath; give it time to land if it was going to.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let w = node(&admin, &waiting).await;
    assert_eq!(annotation(&w, ann::PRESTAGE_CONFIG), "", "same OS: nothing to pre-stage ({w})");

    // A new OS image: the waiting node (its slot still taken by the node updating to t2) is
    // asked to pre-stage it.
    let mut os = machine_config("50-worker-os", "worker");
    os["spec"]["osImageURL"] = json!(format!("ostree+http://127.0.0.1:1/repo#aloft/os/x86_64@{}", "a".repeat(64)));
    create(&admin, &MACHINE_CONFIG, &os).await;
    let t3 = new_target(&admin, &t2).await;
    eventually(WAIT, "the waiting node asked to pre-stage the new OS", || async {
        Ok((annotation(&node(&admin, &waiting).await, ann::PRESTAGE_CONFIG) == t3).then_some(()))
    })
    .await;
}

fn revision(n: &Value) -> u64 {
    n.pointer("/metadata/resourceVersion").and_then(Value::as_str).and_then(|r| r.parse().ok()).unwrap_or(0)
}

/// A pool without drain hooks: the pick cordons the node and answers its drain at once (the
/// agent's request finds its answer waiting), and the Done report itself comes back uncordoned
/// (the pick's grant), whether the agent asked for the uncordon (it drained) or not (its update
/// needed no drain); the controller never has to write that node again, and the next pass
/// refills the slot.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_drain_hooks_the_pick_drains_and_the_done_report_frees_the_slot() {
    let c = Coordinator::start();
    let admin = c.client();
    let names = ["w0", "w1", "w2"];
    // The fleet's first config (the nodes had none): take them there one at a time.
    let t1 = fleet_on_a_first_config(&admin, &names, json!({"maxUnavailable": 1})).await;
    eventually(WAIT, "the pool Updated on the first config", || async {
        Ok(is_true(&pool(&admin).await, "Updated").then_some(()))
    })
    .await;
    for n in names {
        assert!(!cordoned(&node(&admin, n).await), "{n} is back in service after its first config");
    }

    let mut b = machine_config("50-worker-b", "worker");
    b["spec"]["kernelArguments"] = json!(["nosmt"]);
    create(&admin, &MACHINE_CONFIG, &b).await;
    let t2 = new_target(&admin, &t1).await;
    let drain = format!("drain-{t2}");
    let first = eventually(WAIT, "one node picked for the second config", || async {
        Ok(picked(&admin, &names, &t2).await.first().cloned())
    })
    .await;
    let n = node(&admin, &first).await;
    assert!(cordoned(&n), "picked without hooks: cordoned in the same write: {n}");
    assert_eq!(annotation(&n, ann::DESIRED_DRAIN), "", "no request left standing: {n}");
    assert_eq!(annotation(&n, ann::LAST_APPLIED_DRAIN), drain, "the drain is answered before it is asked: {n}");
    event_with(
        &admin,
        "MachineConfigPool",
        "worker",
        "SetDesiredConfig",
        &format!("Targeted node {first} to {t2}, cordoned for the drain"),
    )
    .await;
    assert_eq!(picked(&admin, &names, &t2).await, vec![first.clone()], "maxUnavailable 1");

    // The agent's own request finds its answer (its Working report carries it).
    annotate(&admin, &first, json!({ann::STATE: "Working", ann::FAILED_CONFIG: null, ann::DESIRED_DRAIN: drain})).await;
    // Done with the uncordon request, as an agent that drained reports it: the answer to that
    // write is already the uncordoned node, and no grant is left behind.
    let done = merge(
        &admin,
        &path_of(&NODE, Some(&first)),
        json!({"metadata": {"annotations": {ann::CURRENT_CONFIG: t2, ann::STATE: "Done", ann::REASON: "",
            ann::DESIRED_DRAIN: format!("uncordon-{t2}")}}}),
    )
    .await;
    assert!(!cordoned(&done), "the Done report comes back uncordoned: {done}");
    assert_eq!(annotation(&done, ann::LAST_APPLIED_DRAIN), format!("uncordon-{t2}"), "{done}");
    assert_eq!(annotation(&done, ann::UNCORDON_AT_DONE), "", "the grant is used up: {done}");
    let second = eventually(WAIT, "the next node picked", || async {
        Ok(picked(&admin, &names, &t2).await.into_iter().find(|n| *n != first))
    })
    .await;
    let a = node(&admin, &first).await;
    assert_eq!(revision(&a), revision(&done), "nothing left for the controller to write on {first}: {a}");

    // Done without asking (an update that needed no drain of the agent's): uncordoned all the same.
    let done = merge(
        &admin,
        &path_of(&NODE, Some(&second)),
        json!({"metadata": {"annotations": {ann::CURRENT_CONFIG: t2, ann::STATE: "Done", ann::REASON: ""}}}),
    )
    .await;
    assert!(!cordoned(&done), "the Done report comes back uncordoned: {done}");
    assert_eq!(annotation(&done, ann::DESIRED_DRAIN), format!("uncordon-{t2}"), "no request left pending: {done}");
    assert_eq!(annotation(&done, ann::LAST_APPLIED_DRAIN), format!("uncordon-{t2}"), "{done}");
    let third = eventually(WAIT, "the last node picked", || async {
        Ok(picked(&admin, &names, &t2).await.into_iter().find(|n| *n != first && *n != second))
    })
    .await;
    let b = node(&admin, &second).await;
    assert_eq!(revision(&b), revision(&done), "nothing left for the controller to write on {second}: {b}");
    finish(&admin, &third, &t2).await;
    eventually(WAIT, "the pool Updated with every node back in service", || async {
        Ok(is_true(&pool(&admin).await, "Updated").then_some(()))
    })
    .await;
    // MCO's Events at either end of the update, in its words.
    event_with(
        &admin,
        "MachineConfigPool",
        "worker",
        "Updating",
        &format!("Pool worker now targeting MachineConfig {t2}"),
    )
    .await;
    event_with(
        &admin,
        "MachineConfigPool",
        "worker",
        "Completed",
        &format!("Pool worker has completed update to MachineConfig {t2}"),
    )
    .await;
    for n in names {
        let v = node(&admin, n).await;
        assert!(!cordoned(&v), "{v}");
    }

    // A node that fails before asking for its drain (its update refused while being prepared)
    // goes back into service: nothing was drained. It still holds its slot (it failed half-way).
    let mut c3 = machine_config("50-worker-c", "worker");
    c3["spec"]["kernelArguments"] = json!(["nosmt", "quiet"]);
    create(&admin, &MACHINE_CONFIG, &c3).await;
    let t3 = new_target(&admin, &t2).await;
    let failing = eventually(WAIT, "a node picked for the third config", || async {
        Ok(picked(&admin, &names, &t3).await.first().cloned())
    })
    .await;
    assert!(cordoned(&node(&admin, &failing).await));
    fail(&admin, &failing, &t3).await;
    let v = eventually(WAIT, "the failed node uncordoned", || async {
        let v = node(&admin, &failing).await;
        Ok((!cordoned(&v)).then_some(v))
    })
    .await;
    assert_eq!(annotation(&v, ann::LAST_APPLIED_DRAIN), "", "no drain answer left: {v}");
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(picked(&admin, &names, &t3).await, vec![failing.clone()], "the failed node still holds the one slot");
}

/// The rollout record of the worker pool: (config, phase, failedNodes).
fn rollout_of(p: &Value) -> (String, String, Vec<String>) {
    let r = &p["status"]["rollout"];
    let failed = r["failedNodes"].as_array().into_iter().flatten().filter_map(Value::as_str).map(str::to_string);
    (r["config"].as_str().unwrap_or("").to_string(), r["phase"].as_str().unwrap_or("").to_string(), failed.collect())
}

/// Workers `names` on a first config; then a change that breaks the rollout (its first node
/// fails on it, the breaker opens, as it should) and the user's fix, a new rendered config, to
/// which that failed node is retargeted first. Returns (that node, the broken config, the fix).
async fn a_broken_config_and_its_fix(c: &Coordinator, names: &[&str]) -> (String, String, String) {
    let admin = c.client();
    let policy = json!({"maxUnavailable": 1, "rollout": {"maxFailures": 0}});
    let t0 = fleet_on_a_first_config(&admin, names, policy).await;
    let mut b = machine_config("60-worker-change", "worker");
    b["spec"]["kernelArguments"] = json!(["broken"]);
    create(&admin, &MACHINE_CONFIG, &b).await;
    let broken = new_target(&admin, &t0).await;
    let first = eventually(WAIT, "a node picked for the broken config", || async {
        Ok(picked(&admin, names, &broken).await.first().cloned())
    })
    .await;
    working(&admin, &first, &broken).await;
    fail(&admin, &first, &broken).await;
    let p = eventually(WAIT, "the breaker open on the broken config", || async {
        let p = pool(&admin).await;
        Ok((is_true(&p, "CircuitBroken") && rollout_of(&p).0 == broken).then_some(p))
    })
    .await;
    let msg = condition(&p, "CircuitBroken").unwrap()["message"].as_str().unwrap().to_string();
    assert!(msg.ends_with("resume with `aloftctl rollout resume mcp/worker` or change the config"), "{msg}");

    merge(&admin, &path_of(&MACHINE_CONFIG, Some("60-worker-change")), json!({"spec": {"kernelArguments": ["fixed"]}}))
        .await;
    let fix = new_target(&admin, &broken).await;
    eventually(WAIT, "the failed node retargeted to the fix", || async {
        Ok((annotation(&node(&admin, &first).await, ann::DESIRED_CONFIG) == fix).then_some(()))
    })
    .await;
    (first, broken, fix)
}

/// The fix starts afresh: the node that failed on the broken config still says Degraded (about
/// that config: `failedConfig`) until its agent reports on the fix, and that old failure must not
/// open the fix's breaker. The rollout then goes on by itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fix_starts_afresh_after_the_circuit_breaker_tripped_on_the_broken_config() {
    let c = Coordinator::start();
    let admin = c.client();
    let names = ["w1", "w2", "w3"];
    let (first, broken, fix) = a_broken_config_and_its_fix(&c, &names).await;
    let n = node(&admin, &first).await;
    assert_eq!(annotation(&n, ann::STATE), "Degraded", "{n}");
    assert_eq!(annotation(&n, ann::FAILED_CONFIG), broken, "{n}");
    eventually(WAIT, "the pool's record about the fix", || async {
        Ok((rollout_of(&pool(&admin).await).0 == fix).then_some(()))
    })
    .await;
    for _ in 0..15 {
        let p = pool(&admin).await;
        let (config, phase, failed) = rollout_of(&p);
        assert_eq!(config, fix);
        assert!(failed.is_empty() && phase != "CircuitBroken", "the broken config's failure counted on the fix: {p}");
        assert!(!is_true(&p, "CircuitBroken"), "{p}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // The agent reports on the fix: Working, then Done; every other node follows by itself.
    working(&admin, &first, &fix).await;
    finish(&admin, &first, &fix).await;
    let rest: Vec<&str> = names.iter().copied().filter(|n| *n != first).collect();
    finish_each_as_picked(&admin, &rest, &fix).await;
    let p = eventually(WAIT, "the pool Updated on the fix", || async {
        let p = pool(&admin).await;
        Ok(is_true(&p, "Updated").then_some(p))
    })
    .await;
    let (config, _, failed) = rollout_of(&p);
    assert!(config == fix && failed.is_empty(), "{p}");
}

/// The node that failed on the broken config fails on the fix too, with the very same reason and
/// before asking for a drain (the same refusal): only `failedConfig` changes, and that failure
/// counts for the fix's breaker. `aloftctl describe node` shows which config it failed on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_failure_on_the_fix_counts_for_the_fixs_breaker() {
    let c = Coordinator::start();
    let admin = c.client();
    let names = ["w1", "w2", "w3"];
    let (first, broken, fix) = a_broken_config_and_its_fix(&c, &names).await;
    let before = node(&admin, &first).await;
    assert_eq!(
        (annotation(&before, ann::STATE), annotation(&before, ann::REASON), annotation(&before, ann::FAILED_CONFIG)),
        ("Degraded", "boom", broken.as_str()),
        "{before}"
    );
    eventually(WAIT, "the pool's record about the fix", || async {
        Ok((rollout_of(&pool(&admin).await).0 == fix).then_some(()))
    })
    .await;
    fail(&admin, &first, &fix).await;
    let p = eventually(WAIT, "the breaker open on the fix", || async {
        let p = pool(&admin).await;
        Ok((is_true(&p, "CircuitBroken") && rollout_of(&p).0 == fix).then_some(p))
    })
    .await;
    assert_eq!(rollout_of(&p).2, vec![first.clone()], "{p}");
    let out = aloftctl(&c, &["describe", "node", &first]);
    let desc = String::from_utf8_lossy(&out.stdout);
    assert!(desc.contains(&format!("{}={fix}", ann::FAILED_CONFIG)), "{desc}");
}

/// MCO's `status.observedGeneration` follows the pool's generation: a spec change (here a
/// pause) bumps the generation, and the next status says it has seen it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pool_status_observes_each_spec_generation() {
    let c = Coordinator::start();
    let admin = c.client();
    fake_node(&admin, "w1", json!({"node-role.kubernetes.io/worker": ""}), true).await;
    create(&admin, &MACHINE_CONFIG_POOL, &worker_pool(false, json!({"maxUnavailable": 1}))).await;
    let observed = |p: &Value| (p["metadata"]["generation"].as_i64(), p["status"]["observedGeneration"].as_i64());
    eventually(WAIT, "the first status, observing generation 1", || async {
        let p = pool(&admin).await;
        Ok((observed(&p) == (Some(1), Some(1))).then_some(()))
    })
    .await;
    merge(&admin, &path_of(&MACHINE_CONFIG_POOL, Some("worker")), json!({"spec": {"paused": true}})).await;
    let p = eventually(WAIT, "the status observing the paused spec", || async {
        let p = pool(&admin).await;
        Ok((observed(&p) == (Some(2), Some(2))).then_some(p))
    })
    .await;
    assert_eq!(condition(&p, "Updating").unwrap()["message"], "Pool is paused", "{p}");
    // The render controller's new target is a spec change too, as MCO writes it through the
    // API: `kubectl wait --for=condition=Updated` must not take the old Updated for the new.
    create(&admin, &MACHINE_CONFIG, &machine_config("00-worker", "worker")).await;
    let p = eventually(WAIT, "the status observing the rendered target", || async {
        let p = pool(&admin).await;
        Ok((observed(&p) == (Some(3), Some(3))).then_some(p))
    })
    .await;
    assert!(p["spec"]["configuration"]["name"].as_str().is_some_and(|n| n.starts_with("rendered-worker-")), "{p}");
    // A status write or an annotation is no spec change: the generation stays.
    let resumed = json!({"metadata": {"annotations": {"aloft.dev/resumeRollout": "2026-01-01T00:00:00Z"}}});
    merge(&admin, &path_of(&MACHINE_CONFIG_POOL, Some("worker")), resumed).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(observed(&pool(&admin).await), (Some(3), Some(3)));
}

/// Everything a viewer or a node's own agent can read about drains (Events, Nodes, pools),
/// as one text.
async fn readable(c: &Client) -> String {
    let mut out = String::new();
    for path in [resource_path(EVENT.path_ref(), Some("default"), None), path_of(&NODE, None)] {
        out.push_str(&c.get(&path).await.unwrap().into_result().unwrap().to_string());
    }
    let pool = pool(c).await;
    out.push_str(&pool["status"].to_string());
    out
}

/// A hook URL carrying credentials (user and password, a token in the query, a fragment): the
/// failures name the hook as scheme://host:port/path only, in the DrainHookFailed and
/// DrainTimeout Events, the node's `aloft.dev/drainFailure` and the pool's conditions.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drain_hook_failures_never_show_the_hooks_credentials() {
    let c = Coordinator::start();
    let admin = c.client();
    let hook = HookServer::start().await;
    hook.set(HookMode::Status(500));
    let plain = hook.url.clone();
    let secret = plain.replacen("http://", "http://admin:s3cret@", 1) + "?token=qs-s3cret#frag-s3cret";
    let spec = json!({"drain": {"timeoutSeconds": 2, "hooks": [{"url": secret, "timeoutSeconds": 1}]}});
    create(&admin, &MACHINE_CONFIG_POOL, &worker_pool(true, spec)).await;
    fake_node(&admin, "n1", json!({"node-role.kubernetes.io/worker": ""}), true).await;

    annotate(&admin, "n1", json!({ann::DESIRED_DRAIN: "drain-rendered-worker-1"})).await;
    let msg = event_with(&admin, "Node", "n1", "DrainHookFailed", "HTTP 500").await;
    assert_eq!(msg, format!("draining: drain hook {plain} answered HTTP 500: nope"));
    // The hook's failure is what holds the drain (a timeout seen before the first call failed
    // would say "the drain has not finished"; the mark follows what holds it since).
    event_with(&admin, "Node", "n1", "DrainTimeout", "failed to drain node: n1 after 2 seconds: drain hook").await;
    let want = format!("failed to drain node: n1 after 2 seconds: drain hook {plain} answered HTTP 500: nope");
    let failure = eventually(WAIT, "n1 marked with the hook's failure", || async {
        let f = drain_failure(&admin, "n1").await;
        Ok((f == want).then_some(f))
    })
    .await;
    assert_eq!(failure, want);
    eventually(WAIT, "the pool to raise NodeDrainTimeout", || async {
        Ok(is_true(&pool(&admin).await, "NodeDrainTimeout").then_some(()))
    })
    .await;
    // What holds the drain changes: the mark follows it (it stayed at the first cause).
    hook.set(HookMode::Status(503));
    let now_503 = format!("failed to drain node: n1 after 2 seconds: drain hook {plain} answered HTTP 503: nope");
    eventually(WAIT, "the mark to follow the hook's new answer", || async {
        Ok((drain_failure(&admin, "n1").await == now_503).then_some(()))
    })
    .await;
    let text = readable(&admin).await;
    for s in ["s3cret", "admin:", "token="] {
        assert!(!text.contains(s), "{s:?} shown in:\n{text}");
    }
    // The node's own agent reads its Node: the same redacted text.
    let out = aloftctl(&c, &["get", "nodes"]);
    assert!(!String::from_utf8_lossy(&out.stdout).contains("s3cret"));
}

/// The uncordon hooks put a node back into service (e.g. into the load balancer): while one
/// fails the node stays cordoned (unavailable), the uncordon is retried, every failure is an
/// Event, and past the pool's drain timeout the node is marked as a stuck drain is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_uncordon_hook_is_retried_and_keeps_the_node_out_of_service() {
    let c = Coordinator::start();
    let admin = c.client();
    let hook = HookServer::start().await;
    let spec = json!({"drain": {"timeoutSeconds": 3, "hooks": [{"url": hook.url, "timeoutSeconds": 1}]}});
    create(&admin, &MACHINE_CONFIG_POOL, &worker_pool(true, spec)).await;
    fake_node(&admin, "n1", json!({"node-role.kubernetes.io/worker": ""}), true).await;
    annotate(&admin, "n1", json!({ann::DESIRED_DRAIN: "drain-rendered-worker-1"})).await;
    eventually(WAIT, "n1's drain acknowledged", || async {
        let n = node(&admin, "n1").await;
        Ok((annotation(&n, ann::LAST_APPLIED_DRAIN) == "drain-rendered-worker-1").then_some(()))
    })
    .await;

    hook.set(HookMode::Status(503));
    annotate(&admin, "n1", json!({ann::DESIRED_DRAIN: "uncordon-rendered-worker-1"})).await;
    let msg = event_with(&admin, "Node", "n1", "DrainHookFailed", "HTTP 503").await;
    assert_eq!(msg, format!("uncordoning: drain hook {} answered HTTP 503: nope", hook.url));
    let failure = eventually(WAIT, "n1 marked once the uncordon is past the drain timeout", || async {
        let n = node(&admin, "n1").await;
        assert!(cordoned(&n), "uncordoned although its uncordon hook fails: {n}");
        assert_eq!(annotation(&n, ann::LAST_APPLIED_DRAIN), "drain-rendered-worker-1", "{n}");
        Ok(Some(annotation(&n, ann::DRAIN_FAILURE).to_string()).filter(|s| !s.is_empty()))
    })
    .await;
    assert_eq!(
        failure,
        format!("failed to uncordon node: n1 after 3 seconds: drain hook {} answered HTTP 503: nope", hook.url)
    );
    event_with(&admin, "Node", "n1", "DrainTimeout", "failed to uncordon node: n1").await;
    let uncordons = hook.calls().iter().filter(|b| b["phase"] == "uncordon").count();
    assert!(uncordons >= 2, "the uncordon hook was retried: {:?}", hook.calls());
    let p = eventually(WAIT, "the pool to raise NodeDrainTimeout", || async {
        let p = pool(&admin).await;
        Ok(is_true(&p, "NodeDrainTimeout").then_some(p))
    })
    .await;
    assert_eq!(p["status"]["unavailableMachineCount"], 1, "cordoned: unavailable until the hook succeeds: {p}");
    assert_eq!(condition(&p, "NodeDrainTimeout").unwrap()["reason"], "UncordonTimedOut", "{p}");

    // The hook recovers: the node goes back into service and the marks go.
    hook.set(HookMode::Ok);
    let n = eventually(WAIT, "n1 uncordoned once its hook succeeds", || async {
        let n = node(&admin, "n1").await;
        Ok((annotation(&n, ann::LAST_APPLIED_DRAIN) == "uncordon-rendered-worker-1").then_some(n))
    })
    .await;
    assert!(!cordoned(&n), "{n}");
    assert_eq!(annotation(&n, ann::DRAIN_FAILURE), "", "{n}");
    assert_eq!(annotation(&n, ann::DRAIN_STARTED), "", "{n}");
    eventually(WAIT, "NodeDrainTimeout cleared", || async {
        Ok((!is_true(&pool(&admin).await, "NodeDrainTimeout")).then_some(()))
    })
    .await;
}

/// An admin's `kubectl cordon` made after the pick and before the drain (a pool with drain
/// hooks: the drain controller cordons, not the pick) outlasts the update: the drain and
/// uncordon hooks are called as for any drain, and the uncordon answers the node but leaves it
/// cordoned, with an Event saying why. Before, the two cordons were one, and the Done lifted the
/// admin's. A node no one cordoned is uncordoned as ever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cordon_made_between_the_pick_and_the_drain_outlasts_the_update() {
    let c = Coordinator::start();
    let admin = c.client();
    let hook = HookServer::start().await;
    let spec = json!({"drain": {"timeoutSeconds": 60, "hooks": [{"url": hook.url, "timeoutSeconds": 5}]}});
    create(&admin, &MACHINE_CONFIG_POOL, &worker_pool(true, spec)).await;
    for n in ["n1", "n2"] {
        fake_node(&admin, n, json!({"node-role.kubernetes.io/worker": ""}), true).await;
    }
    let nodes = path_of(&NODE, Some("n1"));
    merge(&admin, &nodes, json!({"spec": {"unschedulable": true}})).await;
    for n in ["n1", "n2"] {
        annotate(&admin, n, json!({ann::DESIRED_DRAIN: "drain-rendered-worker-1"})).await;
    }
    for n in ["n1", "n2"] {
        eventually(WAIT, &format!("{n}'s drain acknowledged"), || async {
            let v = node(&admin, n).await;
            Ok((annotation(&v, ann::LAST_APPLIED_DRAIN) == "drain-rendered-worker-1").then_some(()))
        })
        .await;
    }
    assert_eq!(annotation(&node(&admin, "n1").await, ann::CORDONED_BEFORE_DRAIN), "true");
    assert_eq!(annotation(&node(&admin, "n2").await, ann::CORDONED_BEFORE_DRAIN), "");
    for n in ["n1", "n2"] {
        annotate(&admin, n, json!({ann::DESIRED_DRAIN: "uncordon-rendered-worker-1"})).await;
    }
    for n in ["n1", "n2"] {
        let v = eventually(WAIT, &format!("{n}'s uncordon answered"), || async {
            let v = node(&admin, n).await;
            Ok((annotation(&v, ann::LAST_APPLIED_DRAIN) == "uncordon-rendered-worker-1").then_some(v))
        })
        .await;
        assert_eq!(cordoned(&v), n == "n1", "only the admin's cordon stays: {v}");
        assert_eq!(annotation(&v, ann::CORDONED_BEFORE_DRAIN), "", "{v}");
        assert_eq!(annotation(&v, ann::DRAIN_POOL), "", "{v}");
    }
    let msg = event_with(&admin, "Node", "n1", "CordonKept", "cordoned before its drain").await;
    assert!(msg.contains("kubectl uncordon"), "{msg}");
    for n in ["n1", "n2"] {
        for phase in ["drain", "uncordon"] {
            assert!(
                hook.calls().iter().any(|b| b["node"] == n && b["phase"] == phase),
                "{n}'s {phase} hook called: {:?}",
                hook.calls()
            );
        }
    }
    // The node is the admin's again: `kubectl uncordon` ends it, and nothing puts it back.
    merge(&admin, &nodes, json!({"spec": {"unschedulable": null}})).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(!cordoned(&node(&admin, "n1").await));
}

/// A drain hook that keeps failing is retried with a back-off of the node's own (2 s, doubling,
/// up to MCO's 1 min; reference/mco.md "Drain controller"), not every 2 s for as long as it fails;
/// the back-off does not hold the drain timeout back (the node is marked when it is due, between
/// two retries); and the node is drained once the hook answers 2xx.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_drain_hook_is_retried_with_a_back_off() {
    let c = Coordinator::start();
    let admin = c.client();
    let hook = HookServer::start().await;
    hook.set(HookMode::Status(500));
    let spec = json!({"drain": {"timeoutSeconds": 4, "hooks": [{"url": hook.url, "timeoutSeconds": 1}]}});
    create(&admin, &MACHINE_CONFIG_POOL, &worker_pool(true, spec)).await;
    fake_node(&admin, "n1", json!({"node-role.kubernetes.io/worker": ""}), true).await;
    annotate(&admin, "n1", json!({ann::DESIRED_DRAIN: "drain-rendered-worker-1"})).await;
    eventually(WAIT, "the hook's first call", || async { Ok((!hook.calls().is_empty()).then_some(())) }).await;

    // Steps of 2, 4 and 8 s: calls at 0, 2 and 6 s in the next 10 s (a retry every 2 s: 6).
    let first = std::time::Instant::now();
    let mut calls_when_marked = None;
    while first.elapsed() < Duration::from_secs(10) {
        let n = node(&admin, "n1").await;
        if calls_when_marked.is_none() && !annotation(&n, ann::DRAIN_FAILURE).is_empty() {
            calls_when_marked = Some(hook.calls().len());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let calls = hook.calls().len();
    assert!((2..=4).contains(&calls), "{calls} calls in 10 s of a failing hook: {:?}", hook.calls());
    // The 4 s timeout is marked at 4 s, before the retry due at 6 s.
    assert!(calls_when_marked.is_some_and(|n| n <= 2), "marked after {calls_when_marked:?} calls, not on time");
    event_with(&admin, "Node", "n1", "DrainTimeout", "failed to drain node: n1 after 4 seconds").await;
    // The admin replaces the failing hook right after its fourth call (at 14 s): the new one is
    // called at once, not after the 16 s step the failing one earned.
    eventually(WAIT, "the hook's fourth call", || async { Ok((hook.calls().len() >= 4).then_some(())) }).await;
    let good = HookServer::start().await;
    let fixed = json!({"spec": {"drain": {"timeoutSeconds": 4, "hooks": [{"url": good.url, "timeoutSeconds": 1}]}}});
    let old_calls = hook.calls().len();
    let fixed_at = std::time::Instant::now();
    merge(&admin, &path_of(&MACHINE_CONFIG_POOL, Some("worker")), fixed).await;
    let n = eventually(WAIT, "n1's drain acknowledged through the new hook", || async {
        let n = node(&admin, "n1").await;
        Ok((annotation(&n, ann::LAST_APPLIED_DRAIN) == "drain-rendered-worker-1").then_some(n))
    })
    .await;
    assert!(fixed_at.elapsed() < Duration::from_secs(10), "waited {:?}: the old hook's back-off", fixed_at.elapsed());
    assert_eq!(good.calls().len(), 1, "{:?}", good.calls());
    assert!(hook.calls().len() <= old_calls + 1, "at most the call in flight: {:?}", hook.calls());
    assert_eq!(annotation(&n, ann::DRAIN_FAILURE), "", "{n}");
}

/// A drain hook call that hangs (up to its own timeout, here 30 s) does not hold the pool's drain
/// timeout (2 s) back: the node is marked Degraded with a reason, and the DrainTimeout Event
/// recorded, while the call still runs, not when it ends. Removing the hook from the pool stops
/// the call and lets the drain through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hanging_drain_hook_does_not_hold_the_drain_timeout_back() {
    let c = Coordinator::start();
    let admin = c.client();
    let hook = HookServer::start().await;
    hook.set(HookMode::Sleep(Duration::from_secs(30)));
    let spec = json!({"drain": {"timeoutSeconds": 2, "hooks": [{"url": hook.url, "timeoutSeconds": 30}]}});
    create(&admin, &MACHINE_CONFIG_POOL, &worker_pool(true, spec)).await;
    fake_node(&admin, "n1", json!({"node-role.kubernetes.io/worker": ""}), true).await;
    annotate(&admin, "n1", json!({ann::DESIRED_DRAIN: "drain-rendered-worker-1"})).await;
    eventually(WAIT, "the hook's first call", || async { Ok((!hook.calls().is_empty()).then_some(())) }).await;
    // Within 20 s: the call ends at 30 s.
    let failure = eventually(Duration::from_secs(20), "n1 marked while its hook call hangs", || async {
        let n = node(&admin, "n1").await;
        Ok(Some(annotation(&n, ann::DRAIN_FAILURE).to_string()).filter(|s| !s.is_empty()))
    })
    .await;
    assert_eq!(hook.calls().len(), 1, "the hanging call is not started again: {:?}", hook.calls());
    assert_eq!(failure, "failed to drain node: n1 after 2 seconds: the drain has not finished");
    event_with(&admin, "Node", "n1", "DrainTimeout", "failed to drain node: n1 after 2 seconds").await;
    eventually(WAIT, "the pool to raise NodeDrainTimeout", || async {
        Ok(is_true(&pool(&admin).await, "NodeDrainTimeout").then_some(()))
    })
    .await;
    // The admin removes the hanging hook: the call in flight is stopped, and the drain goes
    // through without it, before the call would have ended (30 s after it started).
    let path = path_of(&MACHINE_CONFIG_POOL, Some("worker"));
    let r = admin.patch(&path, "application/merge-patch+json", &json!({"spec": {"drain": {"hooks": null}}})).await;
    assert!(r.unwrap().code < 300);
    eventually(Duration::from_secs(20), "n1 drained once the hanging hook is gone", || async {
        let n = node(&admin, "n1").await;
        Ok((annotation(&n, ann::LAST_APPLIED_DRAIN) == "drain-rendered-worker-1").then_some(()))
    })
    .await;
    assert_eq!(hook.calls().len(), 1, "{:?}", hook.calls());
}

/// A drain hook that keeps failing keeps its DrainHookFailed Event past the Event TTL: the
/// drain controller records the failure on every retry, and the recorder writes the standing
/// Event again (counted) every third of the TTL instead of letting it expire.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standing_drain_hook_failure_keeps_its_event_past_the_event_ttl() {
    let ttl = Duration::from_secs(6);
    let c = Coordinator::start_with(Options { args: vec!["--event-ttl".into(), "6s".into()], ..Default::default() });
    let admin = c.client();
    let hook = HookServer::start().await;
    hook.set(HookMode::Status(503));
    let spec = json!({"drain": {"hooks": [{"url": hook.url, "timeoutSeconds": 1}]}});
    create(&admin, &MACHINE_CONFIG_POOL, &worker_pool(true, spec)).await;
    fake_node(&admin, "n1", json!({"node-role.kubernetes.io/worker": ""}), true).await;
    annotate(&admin, "n1", json!({ann::DESIRED_DRAIN: "drain-rendered-worker-1"})).await;
    event_with(&admin, "Node", "n1", "DrainHookFailed", "HTTP 503").await;
    let start = std::time::Instant::now();
    // Two and a half TTLs: the first write alone would have expired twice over.
    while start.elapsed() < ttl * 5 / 2 {
        let evs = events(&admin, "Node", "n1", "DrainHookFailed").await;
        assert_eq!(evs.len(), 1, "the standing failure's Event after {:?}: {evs:?}", start.elapsed());
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let evs = events(&admin, "Node", "n1", "DrainHookFailed").await;
    let count = evs[0]["count"].as_i64().unwrap_or(0);
    assert!(count >= 3, "refreshed about every third of the TTL: {evs:?}");
    let retries = hook.calls().len() as i64;
    assert!(count < retries, "not a write per retry ({retries} calls): {evs:?}");
}

/// A drain stuck past the pool's drain timeout keeps its DrainTimeout Event for as long as it
/// stays stuck, past the Event TTL: the drain controller records the timeout on every retry, with
/// the message the node is marked with, and the recorder counts it again every third of the TTL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standing_drain_timeout_keeps_its_event_past_the_event_ttl() {
    let ttl = Duration::from_secs(6);
    let c = Coordinator::start_with(Options { args: vec!["--event-ttl".into(), "6s".into()], ..Default::default() });
    let admin = c.client();
    let hook = HookServer::start().await;
    hook.set(HookMode::Status(503));
    let spec = json!({"drain": {"timeoutSeconds": 1, "hooks": [{"url": hook.url, "timeoutSeconds": 1}]}});
    create(&admin, &MACHINE_CONFIG_POOL, &worker_pool(true, spec)).await;
    fake_node(&admin, "n1", json!({"node-role.kubernetes.io/worker": ""}), true).await;
    annotate(&admin, "n1", json!({ann::DESIRED_DRAIN: "drain-rendered-worker-1"})).await;
    // The hook's answer is what holds the drain (a timeout seen before the first call failed
    // says "the drain has not finished", a message of its own, and is not the standing one).
    let msg = event_with(&admin, "Node", "n1", "DrainTimeout", "after 1 second: drain hook").await;
    assert_eq!(
        annotation(&node(&admin, "n1").await, ann::DRAIN_FAILURE),
        msg,
        "the Event says what the node is marked with"
    );
    let start = std::time::Instant::now();
    // Two and a half TTLs: a timeout recorded once would have expired twice over.
    while start.elapsed() < ttl * 5 / 2 {
        let evs = events(&admin, "Node", "n1", "DrainTimeout").await;
        let standing = evs.iter().filter(|e| e["message"] == msg.as_str()).count();
        assert_eq!(standing, 1, "the standing timeout's Event after {:?}: {evs:?}", start.elapsed());
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let evs = events(&admin, "Node", "n1", "DrainTimeout").await;
    let count = evs.iter().find(|e| e["message"] == msg.as_str()).and_then(|e| e["count"].as_i64()).unwrap_or(0);
    assert!(count >= 3, "refreshed about every third of the TTL: {evs:?}");
    let retries = hook.calls().len() as i64;
    assert!(count < retries, "not a write per retry ({retries} calls): {evs:?}");
}

/// A rollout a budget stalls keeps a lasting record on the pool (the Event expires with the
/// event TTL): the `BudgetBlocked` condition names the budget, its group and the count, and
/// says when the budget blocks the group for good; it clears once the budget allows the picks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_budget_that_stalls_the_rollout_is_a_pool_condition() {
    let c = Coordinator::start();
    let admin = c.client();
    let web = json!({"node-role.kubernetes.io/worker": "", "app": "web", "topology.kubernetes.io/zone": "z1"});
    for n in ["web1", "web2"] {
        fake_node(&admin, n, web.clone(), true).await;
    }
    let spec = json!({"selector": {"matchLabels": {"app": "web"}}, "minAvailable": "100%",
        "groupBy": ["topology.kubernetes.io/zone"]});
    create(&admin, &NODE_DISRUPTION_BUDGET, &ndb("web", spec)).await;
    create(&admin, &MACHINE_CONFIG_POOL, &worker_pool(false, json!({"maxUnavailable": 2}))).await;
    create(&admin, &MACHINE_CONFIG, &machine_config("50-worker-a", "worker")).await;
    let target = new_target(&admin, "").await;
    let p = eventually(WAIT, "the pool's BudgetBlocked condition", || async {
        let p = pool(&admin).await;
        Ok(is_true(&p, "BudgetBlocked").then_some(p))
    })
    .await;
    let cond = condition(&p, "BudgetBlocked").unwrap();
    assert_eq!(cond["reason"], "NodeDisruptionBudget web", "{p}");
    assert_eq!(
        cond["message"],
        "web1, web2 wait: NodeDisruptionBudget web allows 0 of 2 nodes (topology.kubernetes.io/zone=z1) \
         unavailable and 0 already are, which blocks the group for good",
        "{p}"
    );
    event_with(&admin, "MachineConfigPool", "worker", "BudgetBlocked", "blocks the group for good").await;
    assert!(picked(&admin, &["web1", "web2"], &target).await.is_empty());

    // The budget goes: the nodes are picked and the condition clears.
    let r = admin.delete(&path_of(&NODE_DISRUPTION_BUDGET, Some("web"))).await.unwrap();
    assert!(r.code < 300, "{}", r.body);
    eventually(WAIT, "the condition cleared once the budget allows the picks", || async {
        let p = pool(&admin).await;
        Ok((condition(&p, "BudgetBlocked").is_some_and(|c| c["status"] == "False")).then_some(()))
    })
    .await;
    assert_eq!(picked(&admin, &["web1", "web2"], &target).await.len(), 2);
}

/// How many passes the drain controller has made (`/metrics`).
fn drain_passes(c: &Coordinator) -> u64 {
    let out = aloftctl(c, &["get", "--raw", "/metrics"]);
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let line = "aloft_controller_passes_total{controller=\"drain\",result=\"success\"} ";
    text.lines().find_map(|l| l.strip_prefix(line)).and_then(|v| v.trim().parse().ok()).unwrap_or_else(|| {
        panic!("no drain passes in the metrics:\n{text}");
    })
}

/// Whether the metrics say `condition` of the worker pool is True.
fn condition_metric(c: &Coordinator, condition: &str) -> bool {
    let out = aloftctl(c, &["get", "--raw", "/metrics"]);
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    text.lines().any(|l| {
        l.starts_with("aloft_pool_condition{")
            && l.contains("pool=\"worker\"")
            && l.contains(&format!("condition=\"{condition}\""))
            && l.ends_with(" 1")
    })
}

/// The audit's case: every node of the pool is picked at once (maxUnavailable 2 of 2), then one
/// fails with maxFailures 0. Nobody waits, and the breaker is open all the same: the condition,
/// the Event, the metric and `aloftctl rollout resume` all say so. Once the failed node recovers
/// and every node is updated, the breaker closes with the rollout (the pool is not shown stopped
/// while Updated), and a node that joins later is updated as usual. On the next config the same
/// trip is resumed with aloftctl.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_breaker_tripped_with_every_node_picked_is_open_everywhere_and_closes_with_the_rollout() {
    let c = Coordinator::start();
    let admin = c.client();
    let names = ["w1", "w2"];
    let t0 = fleet_on_a_first_config(&admin, &names, json!({"maxUnavailable": 2, "rollout": {"maxFailures": 0}})).await;
    let mut b = machine_config("60-worker-b", "worker");
    b["spec"]["kernelArguments"] = json!(["nosmt"]);
    create(&admin, &MACHINE_CONFIG, &b).await;
    let t1 = new_target(&admin, &t0).await;
    picked_all(&admin, &names, &t1, 2).await;
    fail(&admin, "w1", &t1).await;
    let p = eventually(WAIT, "the CircuitBroken condition True", || async {
        let p = pool(&admin).await;
        Ok(is_true(&p, "CircuitBroken").then_some(p))
    })
    .await;
    assert_eq!(rollout_of(&p).1, "CircuitBroken", "{p}");
    let msg = condition(&p, "CircuitBroken").unwrap()["message"].as_str().unwrap().to_string();
    assert!(msg.contains("(w1), more than maxFailures 0"), "{msg}");
    event_with(&admin, "MachineConfigPool", "worker", "CircuitBroken", "(w1)").await;
    assert!(condition_metric(&c, "CircuitBroken"), "aloft_pool_condition CircuitBroken is 1");

    // Recovered and all updated: the rollout is over, and so is the breaker.
    finish(&admin, "w1", &t1).await;
    finish(&admin, "w2", &t1).await;
    let p = eventually(WAIT, "the pool Updated", || async {
        let p = pool(&admin).await;
        Ok(is_true(&p, "Updated").then_some(p))
    })
    .await;
    assert!(!is_true(&p, "CircuitBroken"), "{p}");
    assert_ne!(rollout_of(&p).1, "CircuitBroken", "{p}");
    fake_node(&admin, "w3", json!({"node-role.kubernetes.io/worker": ""}), true).await;
    picked_all(&admin, &["w3"], &t1, 1).await;
    finish(&admin, "w3", &t1).await;
    let names = ["w1", "w2", "w3"];

    // Next config: 2 of 3 picked, one fails; resume works, and the third is picked.
    let mut cmc = machine_config("70-worker-c", "worker");
    cmc["spec"]["kernelArguments"] = json!(["quiet"]);
    create(&admin, &MACHINE_CONFIG, &cmc).await;
    let t2 = new_target(&admin, &t1).await;
    let first = picked_all(&admin, &names, &t2, 2).await;
    fail(&admin, &first[0], &t2).await;
    finish(&admin, &first[1], &t2).await;
    eventually(WAIT, "the CircuitBroken condition True", || async {
        Ok(is_true(&pool(&admin).await, "CircuitBroken").then_some(()))
    })
    .await;
    let out = aloftctl(&c, &["rollout", "resume", "mcp/worker"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    picked_all(&admin, &names, &t2, 3).await;
}

/// A node drained through its pool's hooks that then leaves the pool (here, labelled into a
/// custom pool without hooks) is uncordoned through the same hooks: the load balancer told to
/// drain it is told to take it back. The audit's case: it was uncordoned without a call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_that_left_its_pool_is_uncordoned_through_the_hooks_that_drained_it() {
    let c = Coordinator::start();
    let admin = c.client();
    let hook = HookServer::start().await;
    let hooks = json!({"drain": {"hooks": [{"url": hook.url, "timeoutSeconds": 1}]}});
    create(&admin, &MACHINE_CONFIG_POOL, &worker_pool(true, hooks)).await;
    let mut infra = machine_config_pool("infra", "infra");
    infra["spec"]["paused"] = true.into();
    create(&admin, &MACHINE_CONFIG_POOL, &infra).await;
    fake_node(&admin, "n1", json!({"node-role.kubernetes.io/worker": ""}), true).await;

    annotate(&admin, "n1", json!({ann::DESIRED_DRAIN: "drain-rendered-worker-1"})).await;
    let n1 = eventually(WAIT, "n1's drain acknowledged", || async {
        let n = node(&admin, "n1").await;
        Ok((annotation(&n, ann::LAST_APPLIED_DRAIN) == "drain-rendered-worker-1").then_some(n))
    })
    .await;
    assert_eq!(annotation(&n1, ann::DRAIN_POOL), "worker", "{n1}");
    merge(&admin, "/api/v1/nodes/n1", json!({"metadata": {"labels": {"node-role.kubernetes.io/infra": ""}}})).await;

    annotate(&admin, "n1", json!({ann::DESIRED_DRAIN: "uncordon-rendered-worker-1"})).await;
    let n1 = eventually(WAIT, "n1 uncordoned", || async {
        let n = node(&admin, "n1").await;
        Ok((annotation(&n, ann::LAST_APPLIED_DRAIN) == "uncordon-rendered-worker-1").then_some(n))
    })
    .await;
    assert!(!cordoned(&n1) && annotation(&n1, ann::DRAIN_POOL).is_empty(), "{n1}");
    let uncordon =
        json!({"node": "n1", "pool": "worker", "phase": "uncordon", "request": "uncordon-rendered-worker-1"});
    assert!(hook.calls().contains(&uncordon), "{:?}", hook.calls());
}

/// A node's uncordon request lifts only a cordon a drain made. An admin's cordon stays: the
/// request is answered (the agent goes on), an Event says why the node is still cordoned, and
/// no hook puts it back into the load balancer. (It was lifted, the node read as available and
/// its pool could take another node down.) After a drain, the uncordon lifts the drain's cordon.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_uncordon_request_lifts_only_a_cordon_a_drain_made() {
    let c = Coordinator::start();
    let admin = c.client();
    let hook = HookServer::start().await;
    let hooks = json!({"drain": {"hooks": [{"url": hook.url, "timeoutSeconds": 1}]}});
    create(&admin, &MACHINE_CONFIG_POOL, &worker_pool(true, hooks)).await;
    fake_node(&admin, "n1", json!({"node-role.kubernetes.io/worker": ""}), true).await;
    merge(&admin, &path_of(&NODE, Some("n1")), json!({"spec": {"unschedulable": true}})).await;

    annotate(&admin, "n1", json!({ann::DESIRED_DRAIN: "uncordon-rendered-worker-1"})).await;
    let n1 = eventually(WAIT, "n1's uncordon request answered", || async {
        let n = node(&admin, "n1").await;
        Ok((annotation(&n, ann::LAST_APPLIED_DRAIN) == "uncordon-rendered-worker-1").then_some(n))
    })
    .await;
    assert!(cordoned(&n1), "an admin's cordon lifted at the node's request: {n1}");
    let said = event_with(&admin, "Node", "n1", "CordonKept", "uncordon-rendered-worker-1").await;
    assert!(said.contains("no drain cordoned it"), "{said}");
    assert!(hook.calls().is_empty(), "{:?}", hook.calls());

    // The admin lifts theirs; a drain (through the hooks), then its uncordon: lifted, through
    // the hooks. (A drain made over the admin's cordon would keep it: see
    // `a_cordon_made_between_the_pick_and_the_drain_outlasts_the_update`.)
    merge(&admin, &path_of(&NODE, Some("n1")), json!({"spec": {"unschedulable": null}})).await;
    annotate(&admin, "n1", json!({ann::DESIRED_DRAIN: "drain-rendered-worker-2"})).await;
    eventually(WAIT, "n1's drain answered", || async {
        Ok((annotation(&node(&admin, "n1").await, ann::LAST_APPLIED_DRAIN) == "drain-rendered-worker-2").then_some(()))
    })
    .await;
    annotate(&admin, "n1", json!({ann::DESIRED_DRAIN: "uncordon-rendered-worker-2"})).await;
    let n1 = eventually(WAIT, "n1 uncordoned", || async {
        let n = node(&admin, "n1").await;
        Ok((annotation(&n, ann::LAST_APPLIED_DRAIN) == "uncordon-rendered-worker-2").then_some(n))
    })
    .await;
    assert!(!cordoned(&n1), "{n1}");
    let phases: Vec<Value> = hook.calls().iter().map(|c| c["phase"].clone()).collect();
    assert_eq!(phases, [json!("drain"), json!("uncordon")], "{:?}", hook.calls());
}

/// Hooks added to a pool after its pick drained a node (no hooks then) and before the node's
/// agent asked for that drain: the pick's answer stands (the agent may have gone on from it
/// already: it reads the answer with the pick, and an OS download can come between), the node
/// stays cordoned until its Done report, and the hooks are called for the drains after it. (The
/// answer was taken back, which uncordoned a node its agent was disrupting, and the hooks were
/// called after the fact.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hooks_added_after_the_pick_leave_its_drain_answer_standing() {
    let c = Coordinator::start();
    let admin = c.client();
    let names = ["w0", "w1"];
    let t1 = fleet_on_a_first_config(&admin, &names, json!({"maxUnavailable": 1})).await;
    let mut b = machine_config("50-worker-b", "worker");
    b["spec"]["kernelArguments"] = json!(["nosmt"]);
    create(&admin, &MACHINE_CONFIG, &b).await;
    let t2 = new_target(&admin, &t1).await;
    let first =
        eventually(WAIT, "a node picked", || async { Ok(picked(&admin, &names, &t2).await.first().cloned()) }).await;
    let n = node(&admin, &first).await;
    assert!(cordoned(&n) && annotation(&n, ann::LAST_APPLIED_DRAIN) == format!("drain-{t2}"), "{n}");

    let hook = HookServer::start().await;
    let hooks = json!({"spec": {"drain": {"hooks": [{"url": hook.url, "timeoutSeconds": 1}]}}});
    merge(&admin, &path_of(&MACHINE_CONFIG_POOL, Some("worker")), hooks).await;
    // Passes of the node controller run on the pool's change; the answer stands through them.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let n = node(&admin, &first).await;
    assert!(cordoned(&n) && annotation(&n, ann::LAST_APPLIED_DRAIN) == format!("drain-{t2}"), "taken back: {n}");
    working(&admin, &first, &t2).await;
    finish(&admin, &first, &t2).await;
    // The next node's drain goes through the hooks.
    let second = if first == "w0" { "w1" } else { "w0" };
    eventually(WAIT, "the second node picked", || async {
        Ok((annotation(&node(&admin, second).await, ann::DESIRED_CONFIG) == t2).then_some(()))
    })
    .await;
    working(&admin, second, &t2).await;
    eventually(WAIT, "the second drain answered through the hooks", || async {
        Ok((annotation(&node(&admin, second).await, ann::LAST_APPLIED_DRAIN) == format!("drain-{t2}")).then_some(()))
    })
    .await;
    let drain = json!({"node": second, "pool": "worker", "phase": "drain", "request": format!("drain-{t2}")});
    assert!(hook.calls().contains(&drain), "{:?}", hook.calls());
    assert!(!hook.calls().iter().any(|c| c["node"] == first.as_str() && c["phase"] == "drain"), "{:?}", hook.calls());
}

/// A bad MachineConfig (`60-worker-bad`) for the fleet on `t0`: its rendered config, and the
/// first of `names` picked for it.
async fn a_bad_config_picks_one(admin: &Client, names: &[&str], t0: &str) -> (String, String) {
    let mut b = machine_config("60-worker-bad", "worker");
    b["spec"]["kernelArguments"] = json!(["broken"]);
    create(admin, &MACHINE_CONFIG, &b).await;
    let bad = new_target(admin, t0).await;
    let first = eventually(WAIT, "a node picked for the bad config", || async {
        Ok(picked(admin, names, &bad).await.first().cloned())
    })
    .await;
    (bad, first)
}

/// The bad MachineConfig deleted (the revert): `node` failed on it is sent back to `t0`, and once
/// it reports Done there (as the agent does, asking for no uncordon: it drained nothing), the
/// pool is Updated with the node uncordoned. Returns the node then.
async fn reverted_and_back_in_service(admin: &Client, failed: &str, t0: &str) -> Value {
    let r = admin.delete(&path_of(&MACHINE_CONFIG, Some("60-worker-bad"))).await.unwrap();
    assert!(r.ok(), "{}", r.body);
    eventually(WAIT, "the failed node sent back to the config it runs", || async {
        Ok((annotation(&node(admin, failed).await, ann::DESIRED_CONFIG) == t0).then_some(()))
    })
    .await;
    finish(admin, failed, t0).await;
    eventually(WAIT, "the pool Updated with the node back in service", || async {
        let n = node(admin, failed).await;
        Ok((!cordoned(&n) && is_true(&pool(admin).await, "Updated")).then_some(n))
    })
    .await
}

/// Two workers on a first config (returned) with `maxUnavailable: 1`, then a bad config: the
/// node picked for it (returned) is drained at the pick, Working, and fails on it, still
/// cordoned by that drain.
async fn failed_on_a_bad_config_drained_at_the_pick(admin: &Client) -> (String, String) {
    let names = ["w1", "w2"];
    let t0 = fleet_on_a_first_config(admin, &names, json!({"maxUnavailable": 1})).await;
    let (bad, first) = a_bad_config_picks_one(admin, &names, &t0).await;
    working(admin, &first, &bad).await;
    fail(admin, &first, &bad).await;
    assert!(cordoned(&node(admin, &first).await), "drained for the bad config at the pick");
    (t0, first)
}

/// A node drained for a bad config and failed on it (still cordoned by that drain) is sent back
/// by the revert to the config it runs: its Done report puts it back into service, and the pool
/// is Updated. (Picked for the config it runs, a node is not cordoned again, unless the drain of
/// its failed update still holds it: then the pick's own drain answer is what the Done ends.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reverted_node_still_cordoned_by_its_failed_update_comes_back_into_service() {
    let c = Coordinator::start();
    let admin = c.client();
    let (t0, first) = failed_on_a_bad_config_drained_at_the_pick(&admin).await;
    reverted_and_back_in_service(&admin, &first, &t0).await;
}

/// The same in a pool with drain hooks, where the pick makes no drain: the node drained through
/// the hooks for the bad config and failed on it is sent back to the config it runs, and its
/// Done report asks for no uncordon (the revert drained nothing). The coordinator asks for it,
/// and the drain controller ends the bad config's drain through the hooks that made it. Before,
/// the node stayed cordoned for good, holding the pool's one slot, and the pool never Updated.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reverted_node_drained_through_hooks_comes_back_into_service_through_them() {
    drained_through_hooks_failed_and_reverted(false).await;
}

/// The same, with the failed node uncordoned by hand before the revert (`kubectl uncordon`): the
/// drain's marks still go when the node is Done, through the hooks (the load balancer told to
/// drain it is told it is back). Left, they made the admin's next cordon look like that drain's,
/// which the next pass then lifted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_old_drain_uncordoned_by_hand_leaves_nothing_to_lift_the_next_cordon() {
    drained_through_hooks_failed_and_reverted(true).await;
}

async fn drained_through_hooks_failed_and_reverted(uncordoned_by_hand: bool) {
    let c = Coordinator::start();
    let admin = c.client();
    let hook = HookServer::start().await;
    let names = ["w1", "w2"];
    let spec = json!({"maxUnavailable": 1, "drain": {"hooks": [{"url": hook.url, "timeoutSeconds": 5}]}});
    let t0 = fleet_on_a_first_config(&admin, &names, spec).await;
    let (bad, first) = a_bad_config_picks_one(&admin, &names, &t0).await;
    working(&admin, &first, &bad).await;
    eventually(WAIT, "the bad config's drain answered through the hooks", || async {
        let n = node(&admin, &first).await;
        Ok((annotation(&n, ann::LAST_APPLIED_DRAIN) == format!("drain-{bad}") && cordoned(&n)).then_some(()))
    })
    .await;
    fail(&admin, &first, &bad).await;
    let path = path_of(&NODE, Some(&first));
    if uncordoned_by_hand {
        merge(&admin, &path, json!({"spec": {"unschedulable": false}})).await;
    }

    reverted_and_back_in_service(&admin, &first, &t0).await;
    // Uncordoned by hand, the node counts as available once it is Done, so the pool can read
    // Updated a pass before the old drain's end is asked for and answered: wait for the answer.
    let request = format!("uncordon-{t0}");
    let n = eventually(WAIT, "the old drain ended through the hooks", || async {
        let n = node(&admin, &first).await;
        Ok((annotation(&n, ann::LAST_APPLIED_DRAIN) == request).then_some(n))
    })
    .await;
    assert!(!cordoned(&n), "{n}");
    assert_eq!(annotation(&n, ann::DRAIN_POOL), "", "{n}");
    let call = json!({"node": first, "pool": "worker", "phase": "uncordon", "request": request});
    assert!(hook.calls().contains(&call), "{:?}", hook.calls());
    if uncordoned_by_hand {
        // The admin's next cordon is theirs: a few passes later (each node event brings one, and
        // the cordon is one), still there, and no uncordon hook called again.
        merge(&admin, &path, json!({"spec": {"unschedulable": true}})).await;
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert!(cordoned(&node(&admin, &first).await), "the admin's cordon stands");
        let uncordons = hook.calls().iter().filter(|b| b["node"] == first && b["phase"] == "uncordon").count();
        assert_eq!(uncordons, 1, "{:?}", hook.calls());
    }
}

/// A node drained at the pick for a bad config, failed on it, then taken out of its pool (its
/// role label removed) and sent back by hand to the config it runs: Done there, in no pool, it
/// comes back into service, as MCO's daemon ends every update with an uncordon. Before, only
/// pool members were looked at, and it stayed cordoned for good.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_taken_out_of_its_pool_after_a_failed_update_comes_back_into_service() {
    let c = Coordinator::start();
    let admin = c.client();
    let (t0, first) = failed_on_a_bad_config_drained_at_the_pick(&admin).await;
    let path = path_of(&NODE, Some(&first));
    merge(&admin, &path, json!({"metadata": {"labels": {"node-role.kubernetes.io/worker": null}}})).await;
    eventually(WAIT, "the pool to count the node out", || async {
        Ok((pool(&admin).await["status"]["machineCount"] == 1).then_some(()))
    })
    .await;
    annotate(&admin, &first, json!({ann::DESIRED_CONFIG: t0, ann::DESIRED_DRAIN: null})).await;
    finish(&admin, &first, &t0).await;
    let n = eventually(WAIT, "the node in no pool back in service", || async {
        let n = node(&admin, &first).await;
        Ok((!cordoned(&n)).then_some(n))
    })
    .await;
    assert_eq!(annotation(&n, ann::DESIRED_CONFIG), t0, "no pool moves it: {n}");
    assert_eq!(annotation(&n, ann::STATE), "Done", "{n}");
}

/// A revert to a config whose rollout a bad config cut short: the reverted config proves itself
/// again (its canaries, its whole soak), and the node that failed on the bad one, which runs the
/// reverted config already, is sent back to it at once instead of staying Degraded and cordoned
/// for the canaries and the soak (it applies nothing, spreads nothing). The nodes still on the
/// older config keep waiting for the soak.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revert_through_a_soak_takes_the_failed_node_back_at_once() {
    let c = Coordinator::start();
    let admin = c.client();
    let names = ["w1", "w2", "w3", "w4", "w5"];
    let spec = json!({"maxUnavailable": 2, "rollout": {"canary": 1, "soakSeconds": 1}});
    let t0 = fleet_on_a_first_config(&admin, &names, spec).await;
    let mut b = machine_config("60-worker-b", "worker");
    b["spec"]["kernelArguments"] = json!(["nosmt"]);
    create(&admin, &MACHINE_CONFIG, &b).await;
    let t1 = new_target(&admin, &t0).await;
    let canary = picked_all(&admin, &names, &t1, 1).await.remove(0);
    finish(&admin, &canary, &t1).await;
    // After the one-second soak, batches of two: one node finishes, two are on their way when
    // the bad config arrives, and one never got t1.
    let batch = picked_all(&admin, &names, &t1, 3).await;
    let done = batch.iter().find(|n| **n != canary).unwrap().clone();
    finish(&admin, &done, &t1).await;
    let all = picked_all(&admin, &names, &t1, 4).await;
    let on_the_way: Vec<String> = all.iter().filter(|n| **n != canary && **n != done).cloned().collect();
    let left = names.iter().find(|n| !all.iter().any(|a| a == *n)).unwrap().to_string();
    let mut bad = machine_config("70-worker-bad", "worker");
    bad["spec"]["kernelArguments"] = json!(["broken"]);
    create(&admin, &MACHINE_CONFIG, &bad).await;
    let t2 = new_target(&admin, &t1).await;
    // Room for the bad config's canary beside the two on their way (raised once t2 is the
    // target: before, it would have taken the last node to t1), and a soak the test outlasts.
    let pool_path = path_of(&MACHINE_CONFIG_POOL, Some("worker"));
    merge(&admin, &pool_path, json!({"spec": {"maxUnavailable": 3, "rollout": {"soakSeconds": 3600}}})).await;
    let failed = picked_all(&admin, &names, &t2, 1).await.remove(0);
    assert_eq!(annotation(&node(&admin, &failed).await, ann::CURRENT_CONFIG), t1, "the bad config's canary runs t1");
    working(&admin, &failed, &t2).await;
    fail(&admin, &failed, &t2).await;
    admin.delete(&path_of(&MACHINE_CONFIG, Some("70-worker-bad"))).await.unwrap().into_result().unwrap();
    assert_eq!(new_target(&admin, &t2).await, t1, "the revert renders the config before");
    // The reverted config waits for its nodes on their way (its canary phase): the failed node
    // is sent back all the same.
    eventually(WAIT, "the failed node sent back to the config it runs", || async {
        Ok((annotation(&node(&admin, &failed).await, ann::DESIRED_CONFIG) == t1).then_some(()))
    })
    .await;
    finish(&admin, &failed, &t1).await;
    for n in &on_the_way {
        finish(&admin, n, &t1).await;
    }
    eventually(WAIT, "the failed node back in service while the reverted config soaks", || async {
        let p = pool(&admin).await;
        let n = node(&admin, &failed).await;
        Ok((p["status"]["rollout"]["phase"] == "Soaking" && !cordoned(&n) && annotation(&n, ann::STATE) == "Done")
            .then_some(()))
    })
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(annotation(&node(&admin, &left).await, ann::DESIRED_CONFIG), t0, "{left} waits for the soak");
}

/// The audit's story in Events: a trip of the breaker is one Warning (a node recovering while it
/// is open is no second trip), `rollout resume` answers once the coordinator has acted on it (a
/// `rollout status` right after read the breaker from before it) and leaves an Event, and a
/// revert to the config the pool had completed says it completed again (the Events read as if
/// the revert never finished).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trip_a_resume_and_a_revert_each_tell_their_event() {
    let c = Coordinator::start();
    let admin = c.client();
    let names = ["w1", "w2", "w3"];
    let t0 = fleet_on_a_first_config(&admin, &names, json!({"maxUnavailable": 2, "rollout": {"maxFailures": 0}})).await;
    event_with(&admin, "MachineConfigPool", "worker", "Completed", &t0).await;
    let mut b = machine_config("60-worker-b", "worker");
    b["spec"]["kernelArguments"] = json!(["nosmt"]);
    create(&admin, &MACHINE_CONFIG, &b).await;
    let t1 = new_target(&admin, &t0).await;
    let first = picked_all(&admin, &names, &t1, 2).await;
    fail(&admin, &first[0], &t1).await;
    event_with(&admin, "MachineConfigPool", "worker", "CircuitBroken", &format!("({})", first[0])).await;
    // Recovered with the breaker open: the condition counts none failing, and no second Warning.
    finish(&admin, &first[0], &t1).await;
    eventually(WAIT, "the breaker's condition to count none failing", || async {
        let p = pool(&admin).await;
        let m = condition(&p, "CircuitBroken").and_then(|c| c["message"].as_str().map(str::to_string));
        Ok(m.filter(|m| m.contains("0 failing now")).map(|_| ()))
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let trips = events(&admin, "MachineConfigPool", "worker", "CircuitBroken").await;
    assert_eq!(trips.len(), 1, "one trip, one Warning: {trips:?}");

    let out = aloftctl(&c, &["rollout", "resume", "mcp/worker"]);
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success() && said.contains("resumed: the circuit breaker is closed"), "{said}");
    let p = pool(&admin).await;
    let token = annotation(&p, ann::RESUME_ROLLOUT).to_string();
    assert!(
        p.pointer("/status/rollout/resumeToken").and_then(Value::as_str) == Some(token.as_str())
            || !is_true(&p, "CircuitBroken"),
        "answered before the coordinator acted on it: {p}"
    );
    event_with(&admin, "MachineConfigPool", "worker", "RolloutResumed", &format!("Rollout of {t1} resumed")).await;

    // The rollout goes on to w3, which fails (a new trip); the bad config is reverted.
    let third = picked_all(&admin, &names, &t1, 3).await;
    let last = third.iter().find(|n| !first.contains(n)).unwrap().clone();
    finish(&admin, &first[1], &t1).await;
    fail(&admin, &last, &t1).await;
    event_with(&admin, "MachineConfigPool", "worker", "CircuitBroken", &format!("({last})")).await;
    admin.delete(&path_of(&MACHINE_CONFIG, Some("60-worker-b"))).await.unwrap().into_result().unwrap();
    assert_eq!(new_target(&admin, &t1).await, t0, "the revert renders the config before");
    // The node that failed on t1 runs t0: sent back at once, it has nothing to do.
    picked_all(&admin, &[last.as_str()], &t0, 1).await;
    finish(&admin, &last, &t0).await;
    finish_each_as_picked(&admin, &first.iter().map(String::as_str).collect::<Vec<_>>(), &t0).await;
    eventually(WAIT, "a second Completed for the config completed before", || async {
        let done = events(&admin, "MachineConfigPool", "worker", "Completed").await;
        let again = done.iter().find(|e| e["message"].as_str().is_some_and(|m| m.contains(&t0)) && e["count"] == 2);
        Ok(again.map(|_| ()))
    })
    .await;
}

/// A pool whose `nodeSelector` is empty selects no node, and says so with MCO's Warning (a user
/// who wrote `{}` meaning "every node" was told nothing).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_node_selector_is_warned_about() {
    let c = Coordinator::start();
    let admin = c.client();
    fake_node(&admin, "w1", json!({"node-role.kubernetes.io/worker": ""}), true).await;
    let mut p = worker_pool(false, json!({}));
    p["spec"]["nodeSelector"] = json!({});
    create(&admin, &MACHINE_CONFIG_POOL, &p).await;
    let msg =
        event_with(&admin, "MachineConfigPool", "worker", "SelectingAll", "A non-empty selector is required").await;
    assert!(msg.contains("this pool selects no node"), "{msg}");
    let ev = events(&admin, "MachineConfigPool", "worker", "SelectingAll").await;
    assert_eq!(ev[0]["type"], "Warning");
    assert_eq!(pool(&admin).await.pointer("/status/machineCount"), Some(&json!(0)));
}
