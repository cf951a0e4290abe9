//! The API's in-flight limits (`--max-requests-inflight`, `--max-mutating-requests-inflight`),
//! as kube-apiserver's: a request over its kind's limit is answered 429 with `Retry-After: 1`
//! and changes nothing; reads and writes count apart; watches, the health endpoints and an
//! admin's requests are always served; aloft's client sends a 429'd request again after the
//! wait and succeeds once a place is free. kubectl's side is in `kubectl.rs`.

use aloft_tests::*;
use reqwest::Method;
use serde_json::json;
use std::time::{Duration, Instant};

/// A coordinator that serves one read and one write at a time.
fn one_at_a_time() -> Coordinator {
    Coordinator::start_with(Options {
        args: ["--max-requests-inflight", "1", "--max-mutating-requests-inflight", "1"]
            .iter()
            .map(|s| s.to_string())
            .collect(),
        ..Default::default()
    })
}

/// The value of `name{request_kind="KIND"}` in the coordinator's `/metrics`.
async fn series(admin: &aloft_client::Client, name: &str, kind: &str) -> f64 {
    let (code, body) = admin.get_raw("/metrics").await.expect("/metrics");
    assert_eq!(code, 200);
    let text = String::from_utf8(body).expect("utf8");
    let prefix = format!("{name}{{request_kind=\"{kind}\"}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&prefix)?.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {prefix} in /metrics:\n{text}"))
}

#[tokio::test(flavor = "multi_thread")]
async fn requests_over_the_in_flight_limits_are_answered_429_and_change_nothing() {
    let c = one_at_a_time();
    let admin = c.client();
    let viewer_token = c.create_token("limited-viewer", "viewer");
    let boot_token = c.create_token("limited-boot", "bootstrap");
    let raw = c.http_client();
    let mcs = path_of(&MACHINE_CONFIG, None);
    let get = |path: &str| raw.get(format!("{}{path}", c.url())).bearer_auth(&viewer_token).send();
    let enroll = |name: &str| {
        raw.post(format!("{}/aloft/v1/enroll", c.url()))
            .bearer_auth(&boot_token)
            .json(&json!({"nodeName": name, "labels": {"example.com/rack": "r1"}}))
            .send()
    };

    // A write held in flight takes the one place for writes. A viewer's write is refused (403)
    // once served; over the limit it is not served at all.
    let event = json!({"apiVersion": "v1", "kind": "Event", "metadata": {"name": "e"}});
    let write = || {
        raw.post(format!("{}/api/v1/namespaces/default/events", c.url())).bearer_auth(&viewer_token).json(&event).send()
    };
    let held_write = take_the_place(&c, &viewer_token, Method::POST, &mcs, || async { write().await.ok() }).await;
    let refused = write().await.expect("a write over the limit");
    assert_eq!(refused.status(), 429);
    assert_eq!(refused.headers().get("retry-after").and_then(|v| v.to_str().ok()), Some("1"));
    assert_eq!(refused.text().await.expect("body"), "Too many requests, please try again later.\n");

    // An enrollment over the limit enrolls nothing.
    let r = enroll("n1").await.expect("an enrollment over the limit");
    assert_eq!(r.status(), 429);
    assert!(!list_names(&admin, &NODE).await.contains(&"n1".to_string()), "no Node for a refused enrollment");

    // Reads count apart: a read is served while the writes are full.
    let r = get("/api/v1/nodes").await.expect("a read");
    assert_eq!(r.status(), 200, "a read while the one write place is taken");

    // An admin is served over the limit (kube-apiserver's system:masters), and what it writes is stored.
    let r = admin.post(&mcs, &machine_config("99-admin-over-the-limit", "worker")).await.expect("admin write");
    assert_eq!(r.code, 201, "an admin's write over the limit: {}", r.body);
    assert!(list_names(&admin, &MACHINE_CONFIG).await.contains(&"99-admin-over-the-limit".to_string()));

    // The place given back, the enrollment goes through.
    held_write.release().await;
    let r = enroll("n1").await.expect("the enrollment again");
    assert_eq!(r.status(), 201, "an enrollment once the place is free");

    // A read held in flight takes the one place for reads: the next read is refused, a watch
    // and the health endpoints are not.
    let pools = "/apis/machineconfiguration.openshift.io/v1/machineconfigpools";
    let held_read =
        take_the_place(&c, &viewer_token, Method::GET, "/api/v1/nodes", || async { get(pools).await.ok() }).await;
    assert_eq!(get(pools).await.expect("a read over the limit").status(), 429);
    let mut watch = get("/api/v1/nodes?watch=true").await.expect("a watch");
    assert_eq!(watch.status(), 200, "a watch is not counted");
    let first = tokio::time::timeout(Duration::from_secs(10), watch.chunk()).await.expect("an event in time");
    assert!(first.expect("the watch's stream").is_some(), "the watch sends the Node's ADDED event");
    let readyz = raw.get(format!("{}/readyz", c.url())).send().await.expect("readyz");
    assert_eq!(readyz.status(), 200, "health endpoints are outside the limits");
    let (code, _) = admin.get_raw("/api/v1/nodes").await.expect("admin read");
    assert_eq!(code, 200, "an admin's read over the limit");

    // Counted for /metrics: kube-apiserver's series, and the high water to size the limits by.
    assert!(series(&admin, "apiserver_dropped_requests_total", "mutating").await >= 2.0);
    assert!(series(&admin, "apiserver_dropped_requests_total", "readOnly").await >= 1.0);
    assert_eq!(series(&admin, "aloft_apiserver_inflight_requests_high_water", "mutating").await, 1.0);
    assert_eq!(series(&admin, "aloft_apiserver_inflight_requests_high_water", "readOnly").await, 1.0);

    // The place given back, reads are served again.
    held_read.release().await;
    let r = get("/api/v1/nodes").await.expect("a read");
    assert_eq!(r.status(), 200, "a read once the held one ended");
}

/// A coordinator serving one read at a time, that read held in flight, and a viewer's client.
async fn a_viewer_behind_a_held_read() -> (Coordinator, aloft_client::Client, HeldRequest) {
    let c = one_at_a_time();
    let viewer = c.client_with_token(Some(&c.create_token("waiting-viewer", "viewer")));
    let raw = c.http_client();
    let token = c.create_token("probe-viewer", "viewer");
    let probe = || async { raw.get(format!("{}/api/v1/nodes", c.url())).bearer_auth(&token).send().await.ok() };
    let held = take_the_place(&c, &token, Method::GET, "/api/v1/nodes", probe).await;
    (c, viewer, held)
}

#[tokio::test(flavor = "multi_thread")]
async fn the_client_sends_a_429d_request_again_after_the_wait() {
    let (_c, viewer, held) = a_viewer_behind_a_held_read().await;
    let release = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(1200)).await;
        held.release().await
    });
    let started = Instant::now();
    let r = viewer.get("/api/v1/nodes").await.expect("the viewer's list");
    let took = started.elapsed();
    assert_eq!(r.code, 200, "served once the place was free: {}", r.body);
    assert!(took >= Duration::from_secs(1), "it waited for the place ({took:?})");
    assert!(took < Duration::from_secs(8), "and no longer than a couple of waits ({took:?})");
    let _ = release.await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_client_told_to_wait_too_often_reports_the_429() {
    let (_c, viewer, held) = a_viewer_behind_a_held_read().await;
    // Ten tries at 1-1.5 s each, then the 429 is the caller's, in kubectl's words.
    let started = Instant::now();
    let r = viewer.get("/api/v1/nodes").await.expect("an answer");
    assert_eq!(r.code, 429);
    assert!(started.elapsed() >= Duration::from_secs(10), "after ten waits ({:?})", started.elapsed());
    let err = r.into_result().expect_err("a 429 is an error").to_string();
    assert_eq!(err, "Error from server (TooManyRequests): Too many requests, please try again later.");
    held.release().await;
}
