//! An update's inputs delivered with the pick (`includeUpdateInputs=true` on a watch of Nodes):
//! the rendered config and MachineConfiguration/cluster arrive on the node's own watch just ahead
//! of the event that names the new desiredConfig, so the agent reads neither over the network on
//! its update's critical path. Against a real coordinator, with a real node credential.

use aloft_agent::coordinator::NodeApi;
use aloft_api::annotations as ann;
use aloft_tests::{Client, Coordinator, WatchStream};
use serde_json::{json, Value};
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(60);

/// A newly enrolled node `name`: its credential's client.
async fn node_client(c: &Coordinator, name: &str) -> Client {
    c.node_client(name, json!({"node-role.kubernetes.io/infra": ""})).await
}

fn config(name: &str, path: &str) -> Value {
    json!({"apiVersion": "machineconfiguration.openshift.io/v1", "kind": "MachineConfig",
        "metadata": {"name": name},
        "spec": {"config": {"ignition": {"version": "3.4.0"}, "storage": {"files": [
            {"path": path, "mode": 420, "contents": {"source": "data:,x"}}]}}}})
}

async fn create(admin: &Client, path: &str, obj: &Value) -> Value {
    admin.post(path, obj).await.unwrap().into_result().unwrap()
}

async fn annotate(admin: &Client, node: &str, values: Value) -> Value {
    admin
        .patch(
            &format!("/api/v1/nodes/{node}"),
            "application/merge-patch+json",
            &json!({"metadata": {"annotations": values}}),
        )
        .await
        .unwrap()
        .into_result()
        .unwrap()
}

const MCS: &str = "/apis/machineconfiguration.openshift.io/v1/machineconfigs";
const CLUSTER: &str = "/apis/operator.openshift.io/v1/machineconfigurations";

fn watch_query(name: &str, rev: &str, extra: &str) -> String {
    format!("/api/v1/nodes?watch=true&resourceVersion={rev}&fieldSelector=metadata.name%3D{name}{extra}")
}

#[tokio::test]
async fn a_node_watch_carries_the_update_inputs_ahead_of_the_event_that_needs_them() {
    let c = Coordinator::start();
    let admin = c.client();
    let node = node_client(&c, "inputs-0").await;
    create(&admin, MCS, &config("rendered-infra-a", "/etc/a")).await;
    let b = create(&admin, MCS, &config("rendered-infra-b", "/etc/b")).await;
    let start = annotate(&admin, "inputs-0", json!({ann::CURRENT_CONFIG: "rendered-infra-a"})).await;
    let rev = aloft_tests::rv(&start).to_string();

    let mut with = WatchStream::open(&node, &watch_query("inputs-0", &rev, "&includeUpdateInputs=true")).await.unwrap();
    let mut without = WatchStream::open(&node, &watch_query("inputs-0", &rev, "")).await.unwrap();

    // A new desiredConfig: the inputs first (no MachineConfiguration/cluster: null), then the Node.
    annotate(&admin, "inputs-0", json!({ann::DESIRED_CONFIG: "rendered-infra-b"})).await;
    let evs = with.take(2, WAIT).await.unwrap();
    assert_eq!(evs[0]["type"], "UPDATE_INPUTS", "{evs:?}");
    assert_eq!(evs[0]["object"]["machineConfig"], b, "the config as a GET returns it");
    assert_eq!(evs[0]["object"]["machineConfiguration"], Value::Null);
    assert_eq!(evs[1]["type"], "MODIFIED");
    assert_eq!(evs[1]["object"]["metadata"]["annotations"][ann::DESIRED_CONFIG], "rendered-infra-b");
    // A watch that did not ask gets the Node event alone.
    let plain = without.next(WAIT).await.unwrap().unwrap();
    assert_eq!(plain["type"], "MODIFIED");
    assert!(without.is_quiet(Duration::from_millis(300)).await.unwrap());

    // Another event naming the same desiredConfig: no inputs again.
    annotate(&admin, "inputs-0", json!({"test/step": "2"})).await;
    let ev = with.next(WAIT).await.unwrap().unwrap();
    assert_eq!(
        (ev["type"].as_str(), &ev["object"]["metadata"]["annotations"]["test/step"]),
        (Some("MODIFIED"), &json!("2"))
    );

    // With a policy stored, it comes along as stored; back to the config the node runs: nothing.
    let policy = create(
        &admin,
        CLUSTER,
        &json!({"apiVersion": "operator.openshift.io/v1", "kind": "MachineConfiguration", "metadata": {"name": "cluster"},
            "spec": {"nodeDisruptionPolicy": {"files": [{"path": "/etc/a", "actions": [{"type": "None"}]}]}}}),
    )
    .await;
    annotate(&admin, "inputs-0", json!({ann::DESIRED_CONFIG: "rendered-infra-a"})).await;
    let ev = with.next(WAIT).await.unwrap().unwrap();
    assert_eq!(ev["type"], "MODIFIED", "desiredConfig is currentConfig: no inputs ({ev})");
    annotate(&admin, "inputs-0", json!({ann::DESIRED_CONFIG: "rendered-infra-b"})).await;
    let evs = with.take(2, WAIT).await.unwrap();
    assert_eq!(evs[0]["type"], "UPDATE_INPUTS", "{evs:?}");
    assert_eq!(evs[0]["object"]["machineConfiguration"], policy);
    assert_eq!(evs[0]["object"]["machineConfig"], b);
    assert_eq!(evs[1]["type"], "MODIFIED");

    // A config that is not stored: the Node event alone (the agent's own read reports the error).
    annotate(&admin, "inputs-0", json!({ann::DESIRED_CONFIG: "rendered-infra-missing"})).await;
    let ev = with.next(WAIT).await.unwrap().unwrap();
    assert_eq!(ev["type"], "MODIFIED", "{ev}");
}

#[tokio::test]
async fn include_update_inputs_is_refused_where_it_means_nothing() {
    let c = Coordinator::start();
    let admin = c.client();
    for (path, want) in [
        ("/api/v1/nodes?watch=true&includeUpdateInputs=yes", "includeUpdateInputs \"yes\" is not true or false"),
        (&format!("{MCS}?watch=true&includeUpdateInputs=true") as &str, "includeUpdateInputs is for watches of Nodes"),
    ] {
        let err = admin.watch(path, None).await.err().expect("refused").to_string();
        assert!(err.contains(want), "{path}: {err}");
    }
    // As a Table (kubectl get -w) it would have no place to go.
    let err = admin
        .watch(
            "/api/v1/nodes?watch=true&includeUpdateInputs=true",
            Some("application/json;as=Table;v=v1;g=meta.k8s.io"),
        )
        .await
        .err()
        .expect("refused")
        .to_string();
    assert!(err.contains("as a Table"), "{err}");
}

#[tokio::test]
async fn the_agent_plans_from_the_delivered_inputs_once() {
    let c = Coordinator::start();
    let admin = c.client();
    let api = NodeApi::new(node_client(&c, "inputs-1").await, "inputs-1");
    create(&admin, MCS, &config("rendered-infra-c", "/etc/c")).await;
    let v0 = api.get().await.unwrap();
    // The follower's watch is open before the pick (as the agent's is): it has seen a change.
    annotate(&admin, "inputs-1", json!({"test/step": "1"})).await;
    let v0 = api.wait_change(&v0.revision, WAIT).await.unwrap().expect("the follower sees a change");

    annotate(&admin, "inputs-1", json!({ann::DESIRED_CONFIG: "rendered-infra-c"})).await;
    let v1 = api.wait_change(&v0.revision, WAIT).await.unwrap().expect("the pick");
    assert_eq!(v1.annotation(ann::DESIRED_CONFIG), "rendered-infra-c");
    // Gone from the coordinator now: only the delivered copy can answer.
    admin.delete(&format!("{MCS}/rendered-infra-c")).await.unwrap().into_result().unwrap();
    let (config, policy) = api.update_inputs("rendered-infra-c").await;
    let config = config.expect("the config delivered with the pick");
    assert_eq!(config.metadata.name, "rendered-infra-c");
    assert_eq!(policy.unwrap(), aloft_agent::disruption::Policy::mco_defaults());
    // Used once: a second plan reads again, and the coordinator has no such config any more.
    let (again, _) = api.update_inputs("rendered-infra-c").await;
    let err = format!("{:#}", again.expect_err("read from the coordinator"));
    assert!(err.contains("rendered-infra-c"), "{err}");
    // Another target than the delivered one is read too.
    let (other, _) = api.update_inputs("rendered-infra-d").await;
    assert!(other.is_err());
}
