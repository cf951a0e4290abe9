//! The client's HTTP/2 connection (aloft-client's `h2conn`) against a real coordinator: plain
//! HTTP with prior knowledge, and a connection the coordinator dropped. (Proxies from the
//! environment: `proxy_env.rs`, a binary of its own.)

use aloft_tests::{Coordinator, Options};
use serde_json::json;

#[tokio::test]
async fn plain_http_speaks_http2_with_prior_knowledge() {
    let c = Coordinator::start_with(Options { insecure_http: true, ..Options::default() });
    assert!(c.url().starts_with("http://"), "{}", c.url());
    let admin = c.client_with_token(Some(&c.admin_token()));
    let nodes = admin.get("/api/v1/nodes").await.unwrap().into_result().unwrap();
    assert_eq!(nodes["kind"], "NodeList");
    let node = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}});
    admin.post("/api/v1/nodes", &node).await.unwrap().into_result().unwrap();
    let patched = admin
        .patch("/api/v1/nodes/n1", "application/merge-patch+json", &json!({"metadata": {"labels": {"a": "b"}}}))
        .await
        .unwrap()
        .into_result()
        .unwrap();
    assert_eq!(patched["metadata"]["labels"]["a"], "b");
}

/// One client across a coordinator restart: its connection is gone, the next request opens
/// another.
#[tokio::test]
async fn a_client_reconnects_after_the_coordinator_restarts() {
    let mut c = Coordinator::start_with(Options { fixed_port: true, ..Options::default() });
    let admin = c.client();
    admin.get("/api/v1/nodes").await.unwrap().into_result().unwrap();
    c.restart();
    let again = admin.get("/api/v1/nodes").await.unwrap().into_result().unwrap();
    assert_eq!(again["kind"], "NodeList");
}
