//! Node enrollment and what a node credential may do: its own Node and the rendered configs it
//! is told to apply, nothing else.

use aloft_tests::Coordinator;
use serde_json::{json, Value};

const NODES: &str = "/api/v1/nodes";
const MCS: &str = "/apis/machineconfiguration.openshift.io/v1/machineconfigs";

async fn enroll(c: &Coordinator, bootstrap: &str, name: &str) -> (u16, Value) {
    let r = c
        .client_with_token(Some(bootstrap))
        .post("/aloft/v1/enroll", &json!({"nodeName": name, "labels": {"node-role.kubernetes.io/worker": ""}}))
        .await
        .unwrap();
    (r.code, r.body)
}

fn mc(name: &str) -> Value {
    json!({"apiVersion": "machineconfiguration.openshift.io/v1", "kind": "MachineConfig", "metadata": {"name": name},
           "spec": {"config": {"ignition": {"version": "3.4.0"}}}})
}

#[tokio::test]
async fn nodes_are_confined_to_their_own_objects() {
    let c = Coordinator::start();
    let admin = c.client();
    let bootstrap = c.create_token("fleet", "bootstrap");

    // A wrong bootstrap token is 401, and creates nothing.
    let (code, _) = enroll(&c, "aloft_wrong", "intruder").await;
    assert_eq!(code, 401);
    assert_eq!(admin.get(&format!("{NODES}/intruder")).await.unwrap().code, 404);
    // Bad names are refused with the field.
    let (code, body) = enroll(&c, &bootstrap, "Bad_Name").await;
    assert_eq!(code, 422, "{body}");
    assert_eq!(body["details"]["causes"][0]["field"], "nodeName");

    let (code, a) = enroll(&c, &bootstrap, "node-a").await;
    assert_eq!(code, 201, "{a}");
    let (_, b) = enroll(&c, &bootstrap, "node-b").await;
    let a_tok = a["token"].as_str().unwrap().to_string();
    let b_tok = b["token"].as_str().unwrap().to_string();
    assert_ne!(a_tok, b_tok);
    let node_a = c.client_with_token(Some(&a_tok));

    // The Node exists with the labels it enrolled with.
    let n = admin.get(&format!("{NODES}/node-a")).await.unwrap().into_result().unwrap();
    assert_eq!(n["metadata"]["labels"]["node-role.kubernetes.io/worker"], "");

    // The bootstrap token itself reads nothing.
    assert_eq!(c.client_with_token(Some(&bootstrap)).get(NODES).await.unwrap().code, 403);

    // Own Node: read, watch by name, annotate, status. Others': nothing.
    assert_eq!(node_a.get(&format!("{NODES}/node-a")).await.unwrap().code, 200);
    assert_eq!(node_a.get(&format!("{NODES}/node-b")).await.unwrap().code, 403);
    assert_eq!(node_a.get(NODES).await.unwrap().code, 403, "listing all nodes");
    assert_eq!(node_a.get(&format!("{NODES}?fieldSelector=metadata.name%3Dnode-a")).await.unwrap().code, 200);
    let annotate = json!({"metadata": {"annotations": {"machineconfiguration.openshift.io/state": "Done"}}});
    assert_eq!(
        node_a.patch(&format!("{NODES}/node-a"), "application/merge-patch+json", &annotate).await.unwrap().code,
        200
    );
    assert_eq!(
        node_a.patch(&format!("{NODES}/node-b"), "application/merge-patch+json", &annotate).await.unwrap().code,
        403
    );
    let status = json!({"status": {"conditions": [{"type": "Ready", "status": "True"}]}});
    assert_eq!(
        node_a.patch(&format!("{NODES}/node-a/status"), "application/merge-patch+json", &status).await.unwrap().code,
        200
    );
    assert_eq!(
        node_a.patch(&format!("{NODES}/node-b/status"), "application/merge-patch+json", &status).await.unwrap().code,
        403
    );
    // Changing its own labels or spec (e.g. uncordoning itself) is not a node's right.
    let relabel = json!({"metadata": {"labels": {"node-role.kubernetes.io/master": ""}}});
    let r = node_a.patch(&format!("{NODES}/node-a"), "application/merge-patch+json", &relabel).await.unwrap();
    assert_eq!(r.code, 403, "{}", r.body);
    let uncordon = json!({"spec": {"unschedulable": false}});
    assert_eq!(
        node_a.patch(&format!("{NODES}/node-a"), "application/merge-patch+json", &uncordon).await.unwrap().code,
        403
    );
    assert!(admin.get(&format!("{NODES}/node-a")).await.unwrap().body["metadata"]["labels"]
        .get("node-role.kubernetes.io/master")
        .is_none());
    assert_eq!(node_a.delete(&format!("{NODES}/node-a")).await.unwrap().code, 403);

    // Rendered configs: only those its own Node names.
    for name in ["rendered-worker-1", "rendered-worker-2", "rendered-infra-1"] {
        admin.post(MCS, &mc(name)).await.unwrap().into_result().unwrap();
    }
    let desire =
        |cfg: &str| json!({"metadata": {"annotations": {"machineconfiguration.openshift.io/desiredConfig": cfg}}});
    admin
        .patch(&format!("{NODES}/node-a"), "application/merge-patch+json", &desire("rendered-worker-2"))
        .await
        .unwrap()
        .into_result()
        .unwrap();
    admin
        .patch(&format!("{NODES}/node-b"), "application/merge-patch+json", &desire("rendered-infra-1"))
        .await
        .unwrap()
        .into_result()
        .unwrap();
    assert_eq!(node_a.get(&format!("{MCS}/rendered-worker-2")).await.unwrap().code, 200);
    assert_eq!(node_a.get(&format!("{MCS}/rendered-infra-1")).await.unwrap().code, 403, "node B's config");
    assert_eq!(node_a.get(&format!("{MCS}/rendered-worker-1")).await.unwrap().code, 403, "a config it was not given");
    assert_eq!(node_a.get(MCS).await.unwrap().code, 403);
    assert_eq!(node_a.post(MCS, &mc("sneaky")).await.unwrap().code, 403);

    // Enrolling again replaces the credential: the old token stops working.
    let (_, a2) = enroll(&c, &bootstrap, "node-a").await;
    assert_eq!(node_a.get(&format!("{NODES}/node-a")).await.unwrap().code, 401);
    let again = c.client_with_token(a2["token"].as_str());
    assert_eq!(again.get(&format!("{NODES}/node-a")).await.unwrap().code, 200);
}
