//! The agent's side of the drain handshake against a real coordinator: an acknowledged drain
//! cordons the node, an unanswered one times out with MCO's message.

use aloft_agent::coordinator::NodeApi;
use aloft_client::{Client, ClientConfig};
use aloft_coordinator::resources::NODE;
use aloft_tests::{path_of, Coordinator};
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
}
