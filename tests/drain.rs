//! The agent's side of the drain handshake against a real coordinator: an acknowledged drain
//! cordons the node, an unanswered one times out with MCO's message. And what a
//! NodeDisruptionBudget allows, as its status and `aloftctl get ndb` show it.

use aloft_agent::coordinator::NodeApi;
use aloft_api::annotations as ann;
use aloft_client::{Client, ClientConfig};
use aloft_coordinator::resources::{NODE, NODE_DISRUPTION_BUDGET};
use aloft_tests::{bin, condition, eventually, path_of, rv, Coordinator};
use serde_json::{json, Value};
use std::time::Duration;

#[tokio::test]
async fn drain_handshake_acknowledged_and_timed_out() {
    let c = Coordinator::start();
    let bootstrap = c.create_token("fleet", "bootstrap");
    let enrolled = c
        .client_with_token(Some(&bootstrap))
        .post("/aloft/v1/enroll", &json!({"nodeName": "n1", "labels": {}}))
        .await
        .unwrap()
        .into_result()
        .unwrap();
    let token = enrolled["token"].as_str().unwrap().to_string();
    let client =
        Client::new(&ClientConfig { server: c.url().to_string(), ca_pem: Some(c.ca_pem()), token: Some(token) })
            .unwrap();
    let api = NodeApi::new(client, "n1");

    // The drain controller cordons and acknowledges.
    api.drain_handshake("drain-rendered-worker-1", Duration::from_secs(30)).await.unwrap();
    let node = c.client().get(&path_of(&NODE, Some("n1"))).await.unwrap().into_result().unwrap();
    assert_eq!(node.pointer("/spec/unschedulable"), Some(&Value::Bool(true)));
    api.drain_handshake("uncordon-rendered-worker-1", Duration::from_secs(30)).await.unwrap();
    let node = c.client().get(&path_of(&NODE, Some("n1"))).await.unwrap().into_result().unwrap();
    assert_ne!(node.pointer("/spec/unschedulable"), Some(&Value::Bool(true)));

    // A request nobody answers: the agent gives up after its timeout, with MCO's wording.
    let err = api.drain_handshake("evacuate-rendered-worker-2", Duration::from_secs(2)).await.unwrap_err();
    assert!(err.to_string().starts_with("failed to drain node: n1 after 2 seconds"), "{err}");
    // Without a limit of the agent's own (its default), it waits on: the pool's drain timeout is
    // the coordinator's to apply.
    let waiting =
        tokio::time::timeout(Duration::from_secs(3), api.drain_handshake("evacuate-rendered-worker-3", Duration::ZERO));
    assert!(waiting.await.is_err(), "still waiting after 3 s, no error");
}

const WAIT: Duration = Duration::from_secs(60);

async fn merge(c: &Client, path: &str, patch: Value) -> Value {
    c.patch(path, "application/merge-patch+json", &patch).await.unwrap().into_result().unwrap()
}

/// A Ready node with `labels`, Done, as an enrolled agent leaves it.
async fn ready_node(c: &Client, name: &str, labels: Value) {
    let node = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels,
        "annotations": {ann::STATE: "Done"}}});
    c.post(&path_of(&NODE, None), &node).await.unwrap().into_result().unwrap();
    let ready = json!({"status": {"conditions": [{"type": "Ready", "status": "True"}]}});
    merge(c, &format!("{}/status", path_of(&NODE, Some(name))), ready).await;
}

/// Wait until budget `name`'s status satisfies `ok`; returns the budget.
async fn budget_when(c: &Client, name: &str, what: &str, ok: impl Fn(&Value) -> bool) -> Value {
    eventually(WAIT, &format!("budget {name}: {what}"), || async {
        let b = c.get(&path_of(&NODE_DISRUPTION_BUDGET, Some(name))).await?.into_result()?;
        Ok(ok(&b).then_some(b))
    })
    .await
}

/// (expectedNodes, currentHealthy, desiredHealthy, disruptionsAllowed) of a status or a group.
fn counts(s: &Value) -> (i64, i64, i64, i64) {
    let n = |k: &str| s[k].as_i64().unwrap_or(-1);
    (n("expectedNodes"), n("currentHealthy"), n("desiredHealthy"), n("disruptionsAllowed"))
}

/// A budget's status, as a PodDisruptionBudget's: minAvailable 2 of 3 healthy nodes allows one
/// disruption; a node cordoned, or updating (a Working report), allows none and turns
/// DisruptionAllowed False; with groupBy each group has its counts and the budget allows the
/// least of them; `aloftctl get ndb` shows the allowed disruptions; nothing changing writes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn budget_status_counts_healthy_nodes_like_a_pdb() {
    let c = Coordinator::start();
    let admin = c.client();
    for (name, zone) in [("n1", "a"), ("n2", "a"), ("n3", "b")] {
        ready_node(&admin, name, json!({"app": "db", "zone": zone})).await;
    }
    ready_node(&admin, "web", json!({"app": "web", "zone": "a"})).await;
    let ndb = |name: &str, spec: Value| json!({"apiVersion": "aloft.dev/v1", "kind": "NodeDisruptionBudget", "metadata": {"name": name}, "spec": spec});
    let db = ndb("db", json!({"selector": {"matchLabels": {"app": "db"}}, "minAvailable": 2}));
    admin.post(&path_of(&NODE_DISRUPTION_BUDGET, None), &db).await.unwrap().into_result().unwrap();
    let b = budget_when(&admin, "db", "one disruption allowed", |b| counts(&b["status"]) == (3, 3, 2, 1)).await;
    assert_eq!(b["status"]["observedGeneration"], 1);
    let allowed = condition(&b, "DisruptionAllowed").expect("DisruptionAllowed");
    assert_eq!((&allowed["status"], &allowed["reason"]), (&json!("True"), &json!("SufficientNodes")), "{b}");
    assert!(b["status"].get("groups").is_none(), "no groups without groupBy: {b}");

    let out = std::process::Command::new(bin("aloftctl"))
        .arg("--kubeconfig")
        .arg(c.kubeconfig_path())
        .args(["get", "ndb"])
        .output()
        .unwrap();
    let listed = String::from_utf8_lossy(&out.stdout).to_string();
    let header: Vec<&str> = listed.lines().next().unwrap_or("").split("  ").filter(|c| !c.is_empty()).collect();
    let header: Vec<&str> = header.iter().map(|c| c.trim()).collect();
    assert_eq!(header, ["NAME", "MIN AVAILABLE", "MAX UNAVAILABLE", "ALLOWED DISRUPTIONS", "AGE"], "{listed}");
    let row: Vec<&str> = listed.lines().nth(1).unwrap_or("").split_whitespace().collect();
    assert_eq!(&row[..4], ["db", "2", "N/A", "1"], "{listed}");

    // Cordoned: unavailable.
    merge(&admin, &path_of(&NODE, Some("n1")), json!({"spec": {"unschedulable": true}})).await;
    let b = budget_when(&admin, "db", "none allowed", |b| counts(&b["status"]) == (3, 2, 2, 0)).await;
    let allowed = condition(&b, "DisruptionAllowed").unwrap();
    assert_eq!((&allowed["status"], &allowed["reason"]), (&json!("False"), &json!("InsufficientNodes")), "{b}");
    assert_eq!(allowed["message"], "no disruption allowed: 2 of 3 nodes healthy, 2 required");
    // Back, and another one updating: still none.
    merge(&admin, &path_of(&NODE, Some("n1")), json!({"spec": {"unschedulable": null}})).await;
    merge(&admin, &path_of(&NODE, Some("n2")), json!({"metadata": {"annotations": {ann::STATE: "Working"}}})).await;
    budget_when(&admin, "db", "n1 healthy, n2 not", |b| counts(&b["status"]) == (3, 2, 2, 0)).await;

    // A spec change is observed; the status is the coordinator's: a write of the object keeps it.
    merge(&admin, &path_of(&NODE_DISRUPTION_BUDGET, Some("db")), json!({"spec": {"minAvailable": 1}})).await;
    let b = budget_when(&admin, "db", "generation 2 observed", |b| b["status"]["observedGeneration"] == 2).await;
    assert_eq!(counts(&b["status"]), (3, 2, 1, 1));
    let kept =
        merge(&admin, &path_of(&NODE_DISRUPTION_BUDGET, Some("db")), json!({"status": {"disruptionsAllowed": 9}}))
            .await;
    assert_eq!(kept["status"]["disruptionsAllowed"], 1, "a write of the object does not change its status");

    // Per zone: zone a has n2 Working.
    let zones =
        ndb("zones", json!({"selector": {"matchLabels": {"app": "db"}}, "maxUnavailable": 1, "groupBy": ["zone"]}));
    admin.post(&path_of(&NODE_DISRUPTION_BUDGET, None), &zones).await.unwrap().into_result().unwrap();
    let b = budget_when(&admin, "zones", "groups", |b| b["status"]["groups"].as_array().is_some_and(|g| g.len() == 2))
        .await;
    let groups: Vec<(Value, (i64, i64, i64, i64))> =
        b["status"]["groups"].as_array().unwrap().iter().map(|g| (g["labels"].clone(), counts(g))).collect();
    assert_eq!(groups, [(json!({"zone": "a"}), (2, 1, 1, 0)), (json!({"zone": "b"}), (1, 1, 0, 1))], "{b}");
    assert_eq!(counts(&b["status"]), (3, 2, 1, 0), "the budget allows what its tightest group does");
    let allowed = condition(&b, "DisruptionAllowed").unwrap();
    assert_eq!(allowed["status"], "False");
    assert_eq!(allowed["message"], "group zone=a allows no disruption: 1 of 2 nodes healthy, 1 required");
    // n2 Done again: every group allows one.
    merge(&admin, &path_of(&NODE, Some("n2")), json!({"metadata": {"annotations": {ann::STATE: "Done"}}})).await;
    let b = budget_when(&admin, "zones", "one allowed", |b| counts(&b["status"]) == (3, 3, 1, 1)).await;
    assert_eq!(condition(&b, "DisruptionAllowed").unwrap()["reason"], "SufficientNodes");

    // Nothing a budget counts changes: no status write, however many passes.
    let before = rv(&budget_when(&admin, "db", "settled", |b| counts(&b["status"]) == (3, 3, 1, 2)).await);
    for i in 0..5 {
        merge(&admin, &path_of(&NODE, Some("web")), json!({"metadata": {"annotations": {ann::STATE: "Working"}}}))
            .await;
        merge(&admin, &path_of(&NODE, Some("web")), json!({"metadata": {"labels": {"round": i.to_string()}}})).await;
        merge(&admin, &path_of(&NODE, Some("web")), json!({"metadata": {"annotations": {ann::STATE: "Done"}}})).await;
        tokio::time::sleep(Duration::from_millis(400)).await;
    }
    let after = admin.get(&path_of(&NODE_DISRUPTION_BUDGET, Some("db"))).await.unwrap().into_result().unwrap();
    assert_eq!(rv(&after), before, "a budget whose counts did not change was written: {after}");
}

/// The status is the coordinator's: a client's write through the status subresource (kubectl
/// patch --subresource=status) is put back within the status interval, as a pool's is, not at
/// the next resync; and once put back it stays (no write after write).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_foreign_budget_status_write_is_put_back_within_the_status_interval() {
    let c = Coordinator::start();
    let admin = c.client();
    ready_node(&admin, "n1", json!({"app": "db"})).await;
    let db = json!({"apiVersion": "aloft.dev/v1", "kind": "NodeDisruptionBudget", "metadata": {"name": "db"},
        "spec": {"selector": {"matchLabels": {"app": "db"}}, "maxUnavailable": 1}});
    admin.post(&path_of(&NODE_DISRUPTION_BUDGET, None), &db).await.unwrap().into_result().unwrap();
    budget_when(&admin, "db", "one disruption allowed", |b| counts(&b["status"]) == (1, 1, 0, 1)).await;
    let status = format!("{}/status", path_of(&NODE_DISRUPTION_BUDGET, Some("db")));
    let forged = merge(&admin, &status, json!({"status": {"disruptionsAllowed": 77}})).await;
    assert_eq!(forged["status"]["disruptionsAllowed"], 77, "the write went through: {forged}");
    let b = eventually(Duration::from_secs(20), "the computed status back", || async {
        let b = admin.get(&path_of(&NODE_DISRUPTION_BUDGET, Some("db"))).await?.into_result()?;
        Ok((counts(&b["status"]) == (1, 1, 0, 1)).then_some(b))
    })
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let after = admin.get(&path_of(&NODE_DISRUPTION_BUDGET, Some("db"))).await.unwrap().into_result().unwrap();
    assert_eq!(rv(&after), rv(&b), "written again although nothing changed: {after}");
}

/// Drain requests arriving one after the other, each in its own pass of the drain controller,
/// are counted against a budget together: a drain a task is still granting (or granted, before
/// the watch brings its write back) holds the budget. Each pass used to count only what its watch
/// had seen, and a `maxUnavailable: 1` budget had several nodes drained at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drains_granted_one_pass_after_another_stay_within_the_budget() {
    let c = Coordinator::start();
    let admin = c.client();
    let names: Vec<String> = (0..6).map(|i| format!("b{i}")).collect();
    for n in &names {
        ready_node(&admin, n, json!({"app": "web"})).await;
    }
    let ndb = json!({"apiVersion": "aloft.dev/v1", "kind": "NodeDisruptionBudget", "metadata": {"name": "web"},
        "spec": {"selector": {"matchLabels": {"app": "web"}}, "maxUnavailable": 1}});
    admin.post(&path_of(&NODE_DISRUPTION_BUDGET, None), &ndb).await.unwrap().into_result().unwrap();
    budget_when(&admin, "web", "one disruption allowed", |b| counts(&b["status"]) == (6, 6, 5, 1)).await;
    // Rounds of requests a few milliseconds apart, as agents' requests come: each in a pass of
    // its own, while the task of the one before is still writing.
    for round in 1..=3u64 {
        let mut w = aloft_tests::WatchStream::open(&admin, "/api/v1/nodes?watch=true").await.unwrap();
        let request = format!("drain-r{round}");
        let asks: Vec<_> = names
            .iter()
            .enumerate()
            .map(|(i, n)| {
                let (admin, path) = (admin.clone(), path_of(&NODE, Some(n)));
                let patch = json!({"metadata": {"annotations": {ann::DESIRED_DRAIN: request}}});
                tokio::spawn(async move {
                    tokio::time::sleep(Duration::from_millis(round * i as u64)).await;
                    merge(&admin, &path, patch).await
                })
            })
            .collect();
        for ask in asks {
            ask.await.unwrap();
        }
        // Every change of the Nodes until the controller has answered one (however long a
        // slow machine takes) and held the others back (quiet for 2 s after that).
        let mut cordoned = std::collections::BTreeSet::new();
        let mut most = 0;
        let mut acked = false;
        let answer = |n: &Value| {
            n.pointer("/metadata/annotations").and_then(|a| a.get(ann::LAST_APPLIED_DRAIN)) == Some(&json!(request))
        };
        while let Ok(Some(ev)) = w.next(if acked { Duration::from_secs(2) } else { WAIT }).await {
            let node = &ev["object"];
            let name = node["metadata"]["name"].as_str().unwrap_or("").to_string();
            if node.pointer("/spec/unschedulable") == Some(&json!(true)) {
                cordoned.insert(name);
            } else {
                cordoned.remove(&name);
            }
            most = most.max(cordoned.len());
            acked |= answer(node);
        }
        assert_eq!(
            most, 1,
            "round {round}: nodes of a maxUnavailable-1 budget cordoned at once; at the end {cordoned:?}"
        );
        let mut answered = Vec::new();
        for n in &names {
            let node = admin.get(&path_of(&NODE, Some(n))).await.unwrap().into_result().unwrap();
            let acked = node.pointer("/metadata/annotations").and_then(|a| a.get(ann::LAST_APPLIED_DRAIN));
            if acked == Some(&json!(request)) {
                answered.push(n.clone());
            }
        }
        assert_eq!(answered.len(), 1, "round {round}: drains answered: {answered:?}");
        // All back in service for the next round.
        let back = format!("uncordon-r{round}");
        for n in &names {
            merge(&admin, &path_of(&NODE, Some(n)), json!({"metadata": {"annotations": {ann::DESIRED_DRAIN: back}}}))
                .await;
        }
        budget_when(&admin, "web", "every node back", |b| counts(&b["status"]) == (6, 6, 5, 1)).await;
    }
}

/// Two nodes picked for an update, both asking for their drain, under a budget that allows one
/// disruption (it allowed two when they were picked: a covered node went since). One drain is
/// answered, the other waits for it, and goes once the first node is back. (Each counted the
/// other as unavailable, and both waited until their drain timeout and after: a deadlock.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_nodes_waiting_for_their_drains_do_not_hold_each_other() {
    let c = Coordinator::start();
    let admin = c.client();
    for n in ["w0", "w1", "w2", "w3", "w4"] {
        ready_node(&admin, n, json!({"app": "web"})).await;
    }
    let ndb = json!({"apiVersion": "aloft.dev/v1", "kind": "NodeDisruptionBudget", "metadata": {"name": "web"},
        "spec": {"selector": {"matchLabels": {"app": "web"}}, "minAvailable": 3}});
    admin.post(&path_of(&NODE_DISRUPTION_BUDGET, None), &ndb).await.unwrap().into_result().unwrap();
    budget_when(&admin, "web", "two disruptions allowed", |b| counts(&b["status"]) == (5, 5, 3, 2)).await;
    // Picked (desired is not current) and Working, as agents are before they ask for the drain.
    for n in ["w0", "w1"] {
        let picked = json!({"metadata": {"annotations": {ann::DESIRED_CONFIG: "r2", ann::CURRENT_CONFIG: "r1",
            ann::STATE: "Working"}}});
        merge(&admin, &path_of(&NODE, Some(n)), picked).await;
    }
    // A covered node goes: the budget allows one disruption now, and both picked nodes ask.
    admin.delete(&path_of(&NODE, Some("w4"))).await.unwrap().into_result().unwrap();
    budget_when(&admin, "web", "w4 gone, w0 and w1 counted", |b| counts(&b["status"]) == (4, 2, 3, 0)).await;
    for n in ["w0", "w1"] {
        let ask = json!({"metadata": {"annotations": {ann::DESIRED_DRAIN: "drain-r2"}}});
        merge(&admin, &path_of(&NODE, Some(n)), ask).await;
    }
    let answered = |n: &Value| {
        n.pointer("/metadata/annotations").and_then(|a| a.get(ann::LAST_APPLIED_DRAIN)) == Some(&json!("drain-r2"))
    };
    let first = eventually(WAIT, "one drain answered", || async {
        let mut got = Vec::new();
        for n in ["w0", "w1"] {
            let node = admin.get(&path_of(&NODE, Some(n))).await?.into_result()?;
            if answered(&node) {
                got.push(n);
            }
        }
        assert!(got.len() < 2, "both drains answered under a budget of one: {got:?}");
        Ok(got.first().map(|n| n.to_string()))
    })
    .await;
    let second = if first == "w0" { "w1" } else { "w0" };
    tokio::time::sleep(Duration::from_secs(2)).await;
    let node = admin.get(&path_of(&NODE, Some(second))).await.unwrap().into_result().unwrap();
    assert!(!answered(&node), "{second} drained while {first} is out: {node}");
    // The first one is done and back in service: the second one's drain goes.
    let done = json!({"metadata": {"annotations": {ann::CURRENT_CONFIG: "r2", ann::STATE: "Done",
        ann::DESIRED_DRAIN: "uncordon-r2"}}});
    merge(&admin, &path_of(&NODE, Some(&first)), done).await;
    eventually(WAIT, "the second drain answered", || async {
        let node = admin.get(&path_of(&NODE, Some(second))).await?.into_result()?;
        Ok(answered(&node).then_some(()))
    })
    .await;
}
