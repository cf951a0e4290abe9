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

/// An `http://` address pointed at the coordinator's HTTPS port: the TLS answer to the HTTP/2
/// preface is recognised and named, with the address to use, instead of h2's "frame with
/// invalid size".
#[tokio::test]
async fn plain_http_at_an_https_port_says_to_use_https() {
    let c = Coordinator::start();
    assert!(c.url().starts_with("https://"), "{}", c.url());
    let plain = c.url().replacen("https://", "http://", 1);
    let client =
        aloft_client::Client::new(&aloft_client::ClientConfig { server: plain.clone(), ca_pem: None, token: None })
            .unwrap();
    let e = format!("{:#}", client.get("/version").await.unwrap_err());
    assert!(e.contains(&format!("{} answered with TLS", plain.trim_end_matches('/'))), "{e}");
    assert!(e.contains(&format!("use {}", c.url().trim_end_matches('/'))), "{e}");
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

/// A connection whose peer stops answering without closing it (here the coordinator stopped
/// with SIGSTOP: its socket stays open, nothing is read or answered, as a host gone without a FIN
/// or a NAT that forgot the flow) is found dead by its PING and closed: the watch on it ends
/// instead of waiting for good, and once the coordinator answers again a request opens a new
/// connection. A healthy idle watch answers its PINGs and stays open.
#[tokio::test]
async fn a_dead_connection_is_closed_by_its_keepalive() {
    use nix::sys::signal::{kill, Signal};
    use std::time::{Duration, Instant};
    let c = Coordinator::start();
    let pid = nix::unistd::Pid::from_raw(c.pid() as i32);
    let keepalive =
        aloft_client::Keepalive { read_idle: Duration::from_millis(500), ping_timeout: Duration::from_secs(1) };
    let client = c.client().with_keepalive(keepalive);
    let mut watch = client.watch("/api/v1/nodes?watch=true&timeoutSeconds=300", None).await.unwrap();
    assert_eq!(watch.status(), 200);
    let quiet = tokio::time::timeout(Duration::from_secs(3), watch.chunk()).await;
    assert!(quiet.is_err(), "a healthy idle watch stays open across several PINGs: {quiet:?}");

    kill(pid, Signal::SIGSTOP).unwrap();
    let stopped = Instant::now();
    let ended = tokio::time::timeout(Duration::from_secs(20), watch.chunk()).await;
    let waited = stopped.elapsed();
    kill(pid, Signal::SIGCONT).unwrap();
    let ended = ended.expect("the watch on a dead connection ends within 20 s");
    assert!(!matches!(ended, Ok(Some(_))), "no data came from a stopped coordinator: {ended:?}");
    assert!(waited >= Duration::from_millis(500), "ended only after the idle time and a PING: {waited:?}");
    let nodes = client.get("/api/v1/nodes").await.unwrap().into_result().unwrap();
    assert_eq!(nodes["kind"], "NodeList", "a new connection once the coordinator answers again");
}
