//! The agent's view of its own Node: one long-lived watch (`NodeApi::wait_change`), against a
//! real coordinator. It must deliver every change promptly, never hand back a view older than
//! the one asked about, time out with `None` when nothing changes, and carry on across a
//! coordinator restart.

use aloft_agent::coordinator::{NodeApi, Standing};
use aloft_tests::{bin, Client, Coordinator, Options};
use serde_json::json;
use std::time::{Duration, Instant};

async fn enroll(c: &Coordinator, name: &str) -> NodeApi {
    NodeApi::new(node_client(c, name).await, name)
}

/// A client with the node credential of a newly enrolled node `name`.
async fn node_client(c: &Coordinator, name: &str) -> Client {
    c.node_client(name, json!({"node-role.kubernetes.io/worker": ""})).await
}

/// A watch query for node `name` from its current revision (read by `admin`).
async fn watch_from_now(admin: &Client, name: &str) -> String {
    let from = aloft_tests::rv(&admin.get(&format!("/api/v1/nodes/{name}")).await.unwrap().into_result().unwrap());
    format!("/api/v1/nodes?watch=true&resourceVersion={from}&fieldSelector=metadata.name%3D{name}")
}

async fn set_label_annotation(admin: &Client, name: &str, value: &str) -> u64 {
    let r = admin
        .patch(
            &format!("/api/v1/nodes/{name}"),
            "application/merge-patch+json",
            &json!({"metadata": {"annotations": {"test/value": value}}}),
        )
        .await
        .unwrap()
        .into_result()
        .unwrap();
    aloft_tests::rv(&r)
}

#[tokio::test]
async fn the_follower_delivers_changes_in_order_times_out_and_survives_a_restart() {
    let mut c = Coordinator::start_with(Options { fixed_port: true, ..Default::default() });
    let admin = c.client();
    let api = enroll(&c, "watch-0").await;
    let v0 = api.get().await.unwrap();

    // Nothing changes: None after the timeout, not an error and not the same view again.
    let t = Instant::now();
    assert!(api.wait_change(&v0.revision, Duration::from_millis(300)).await.unwrap().is_none());
    assert!(t.elapsed() >= Duration::from_millis(300));

    // A change arrives, with the new contents.
    let r1 = set_label_annotation(&admin, "watch-0", "one").await;
    let v1 = api.wait_change(&v0.revision, Duration::from_secs(10)).await.unwrap().expect("the change");
    assert!(v1.revision.parse::<u64>().unwrap() >= r1);
    assert_eq!(v1.annotation("test/value"), "one");

    // Several changes while nobody waits: a wait from an old revision gets the newest view
    // at once, never one older than it asked about.
    set_label_annotation(&admin, "watch-0", "two").await;
    let r3 = set_label_annotation(&admin, "watch-0", "three").await;
    let newest = aloft_tests::eventually(Duration::from_secs(60), "the newest view", || {
        let api = api.clone();
        let rev = v1.revision.clone();
        async move {
            let v = api.wait_change(&rev, Duration::from_secs(1)).await?;
            anyhow::Ok(v.filter(|v| v.annotation("test/value") == "three"))
        }
    })
    .await;
    assert_eq!(newest.revision.parse::<u64>().unwrap(), r3);
    // Asking from the newest: nothing newer yet.
    assert!(api.wait_change(&newest.revision, Duration::from_millis(200)).await.unwrap().is_none());

    // The coordinator restarts: the follower reconnects by itself and the next change arrives.
    c.kill9();
    c.restart();
    // (A new admin client: the old one's pooled connection died with the coordinator.)
    let r4 = set_label_annotation(&c.client(), "watch-0", "four").await;
    let v4 = aloft_tests::eventually(Duration::from_secs(30), "the change after a restart", || {
        let api = api.clone();
        let rev = newest.revision.clone();
        async move {
            let v = api.wait_change(&rev, Duration::from_secs(2)).await?;
            anyhow::Ok(v.filter(|v| v.annotation("test/value") == "four"))
        }
    })
    .await;
    assert_eq!(v4.revision.parse::<u64>().unwrap(), r4);
}

/// `wait_reached` (what the agent's run loop waits on before it retries a step that failed)
/// returns once this node's watch reaches the coordinator again after a restart, long before its
/// timeout, and runs to its timeout while nothing happens or the coordinator stays away.
#[tokio::test]
async fn wait_reached_says_when_the_coordinator_answers_again() {
    let mut c = Coordinator::start_with(Options { fixed_port: true, ..Default::default() });
    let api = enroll(&c, "reach-0").await;
    assert_eq!(api.links(), 0, "nothing followed yet");
    // The first wait starts following the Node: its watch reaches the coordinator.
    assert!(api.wait_reached(0, Duration::from_secs(30)).await, "the first watch opens");
    let links = api.links();
    assert!(links >= 1, "{links}");
    assert!(!api.wait_reached(links, Duration::from_millis(300)).await, "nothing to wait for: the timeout");

    c.kill9();
    assert!(api.get().await.is_err(), "the coordinator is down");
    assert!(!api.wait_reached(links, Duration::from_secs(2)).await, "not reached while the coordinator is down");
    assert_eq!(api.links(), links);

    c.restart();
    // Reached by the watch's own retries: a broken wait would hold this test for 120 s and fail.
    assert!(api.wait_reached(links, Duration::from_secs(120)).await, "reached again after the restart");
    assert!(api.links() > links);
    api.get().await.expect("a request right after it is answered");
}

/// `report_working` does not wait for its write, but the node's next write does: the
/// coordinator sees Working (with the drain request) and then Done, never Done overwritten by a
/// late Working, even when the next write is made at once.
#[tokio::test]
async fn a_background_working_report_lands_before_the_next_write() {
    use aloft_api::annotations as ann;
    let c = Coordinator::start();
    let admin = c.client();
    let api = enroll(&c, "bg-0").await;
    let path = watch_from_now(&admin, "bg-0").await;
    let mut watch = aloft_tests::WatchStream::open(&admin, &path).await.unwrap();
    let mut want = Vec::new();
    for round in 0..20 {
        let (old, new) = (format!("cfg-{round}"), format!("cfg-{}", round + 1));
        api.report_working(&old, Some(&format!("drain-{new}"))).await;
        let done = api.report_done(&new, true).await.unwrap();
        assert_eq!((done.annotation(ann::STATE), done.annotation(ann::CURRENT_CONFIG)), ("Done", new.as_str()));
        want.push(("Working".to_string(), old, format!("drain-{new}")));
        want.push(("Done".to_string(), new.clone(), format!("uncordon-{new}")));
    }
    // Every version the coordinator stored, in order (the drain controller's answers change
    // neither field and are folded away).
    let mut seen: Vec<(String, String, String)> = Vec::new();
    while seen.len() < want.len() {
        let Some(ev) = watch.next(Duration::from_secs(10)).await.unwrap() else { break };
        let a = |k: &str| ev["object"]["metadata"]["annotations"][k].as_str().unwrap_or("").to_string();
        let v = (a(ann::STATE), a(ann::CURRENT_CONFIG), a(ann::DESIRED_DRAIN));
        if v.0.is_empty() || seen.last() == Some(&v) {
            continue;
        }
        seen.push(v);
    }
    assert_eq!(seen, want);
    let node = admin.get("/api/v1/nodes/bg-0").await.unwrap().into_result().unwrap();
    assert_eq!(node["metadata"]["annotations"][ann::STATE], "Done");
    assert_eq!(node["metadata"]["annotations"][ann::CURRENT_CONFIG], "cfg-20");
}

/// The agent's failure report names the config it failed on (`aloft.dev/failedConfig`), and its
/// next Working or Done report removes that name in the same write: what the coordinator stores
/// never shows an old failure's config beside a newer state.
#[tokio::test]
async fn a_failure_report_names_its_config_until_working_or_done() {
    use aloft_api::annotations as ann;
    let c = Coordinator::start();
    let api = enroll(&c, "fc-0").await;
    let failed = api.report_failure("Degraded", "boom", "cfg-1", "cfg-2").await.unwrap();
    assert_eq!((failed.annotation(ann::STATE), failed.annotation(ann::FAILED_CONFIG)), ("Degraded", "cfg-2"));
    // `aloftctl get nodes -o wide` shows it.
    let out = std::process::Command::new(bin("aloftctl"))
        .arg("--kubeconfig")
        .arg(c.kubeconfig_path())
        .args(["get", "node", "fc-0", "-o", "wide"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let mut lines = text.lines();
    let header = lines.next().unwrap_or("");
    let column = header.find("FAILED CONFIG").unwrap_or_else(|| panic!("no FAILED CONFIG column: {text}"));
    let row = lines.next().unwrap_or("");
    assert!(
        row.starts_with("fc-0 ") && row.get(column..).and_then(|r| r.split_whitespace().next()) == Some("cfg-2"),
        "{text}"
    );
    let working = api.report_working_now("cfg-1").await.unwrap();
    assert_eq!((working.annotation(ann::STATE), working.annotation(ann::FAILED_CONFIG)), ("Working", ""));
    assert!(!working.annotations.contains_key(ann::FAILED_CONFIG), "removed, not emptied");
    api.report_failure("Unreconcilable", "fips", "cfg-1", "cfg-3").await.unwrap();
    api.report_working("cfg-1", Some("drain-cfg-3")).await;
    // The next write waits for that background one: its answer shows what it left.
    let node = api.annotate(&[("test/after", Some("working"))]).await.unwrap();
    assert_eq!((node.annotation(ann::STATE), node.annotation(ann::FAILED_CONFIG)), ("Working", ""));
    api.report_failure("Degraded", "boom", "cfg-1", "cfg-3").await.unwrap();
    let done = api.report_done("cfg-3", true).await.unwrap();
    assert_eq!((done.annotation(ann::STATE), done.annotation(ann::CURRENT_CONFIG)), ("Done", "cfg-3"));
    assert!(!done.annotations.contains_key(ann::FAILED_CONFIG), "{:?}", done.annotations);
}

/// `skipOwnWrites=true` leaves out the events of the caller's own writes (it has them from the
/// writes' answers) and nothing else; without it, a watch carries every write.
#[tokio::test]
async fn a_watch_can_leave_out_the_callers_own_writes() {
    let c = Coordinator::start();
    let admin = c.client();
    let node = node_client(&c, "own-0").await;
    let q = watch_from_now(&admin, "own-0").await;
    let mut all = aloft_tests::WatchStream::open(&node, &q).await.unwrap();
    let mut others = aloft_tests::WatchStream::open(&node, &format!("{q}&skipOwnWrites=true")).await.unwrap();
    let patch = |v: &str| json!({"metadata": {"annotations": {"test/value": v}}});
    let own = node
        .patch("/api/v1/nodes/own-0", "application/merge-patch+json", &patch("mine"))
        .await
        .unwrap()
        .into_result()
        .unwrap();
    let theirs = set_label_annotation(&admin, "own-0", "theirs").await;
    let value = |ev: &serde_json::Value| ev["object"]["metadata"]["annotations"]["test/value"].clone();
    let both = all.take(2, Duration::from_secs(10)).await.unwrap();
    assert_eq!((value(&both[0]), value(&both[1])), (json!("mine"), json!("theirs")));
    assert_eq!(aloft_tests::rv(&both[0]["object"]), aloft_tests::rv(&own));
    let first = others.next(Duration::from_secs(10)).await.unwrap().expect("the admin's write");
    assert_eq!((value(&first), aloft_tests::rv(&first["object"])), (json!("theirs"), theirs));
    assert!(others.is_quiet(Duration::from_millis(300)).await.unwrap(), "nothing else");
    // The stored JSON as sent is what the object reads back as.
    let stored = admin.get("/api/v1/nodes/own-0").await.unwrap().into_result().unwrap();
    assert_eq!(first["object"], stored);
    let bad = node.get(&format!("{q}&skipOwnWrites=yes")).await.unwrap();
    assert_eq!(bad.code, 400, "{:?}", bad.body);
}

/// Copies the files of `from` into `to` (a data directory: the store, its WAL, the tokens, the CA).
fn copy_dir(from: &std::path::Path, to: &std::path::Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        if entry.file_type().unwrap().is_file() {
            std::fs::copy(entry.path(), to.join(entry.file_name())).unwrap();
        }
    }
}

/// The data directory is restored from a backup older than what the agent has seen, at the same
/// address: the agent's watch is from a revision the store has not reached. The coordinator
/// refuses it (504 Too large resource version, as kube-apiserver) instead of waiting silently,
/// and the follower reads the Node afresh and delivers the change made after the restore to a
/// wait from a revision of before it.
#[tokio::test]
async fn the_follower_carries_on_after_the_store_is_restored_from_an_older_backup() {
    if aloft_tests::stores_on_etcd() {
        eprintln!("not run with ALOFT_TEST_STORE=etcd: the backup is a copy of the SQLite store's files");
        return;
    }
    let mut c = Coordinator::start_with(Options { fixed_port: true, ..Default::default() });
    let api = enroll(&c, "restore-0").await;
    set_label_annotation(&c.client(), "restore-0", "before-backup").await;

    // A backup (taken stopped: the store and its WAL as they are on disk).
    c.kill9();
    let backup = tempfile::tempdir().unwrap();
    copy_dir(&c.data_dir(), backup.path());
    c.restart();

    // Life goes on: the agent sees revisions the backup never had.
    let admin = c.client();
    let mut last = 0;
    for i in 0..20 {
        last = set_label_annotation(&admin, "restore-0", &format!("after-backup-{i}")).await;
    }
    let seen = aloft_tests::eventually(Duration::from_secs(30), "the follower at the newest", || {
        let api = api.clone();
        async move {
            let v = api.wait_change("0", Duration::from_secs(2)).await?;
            anyhow::Ok(v.filter(|v| v.revision.parse::<u64>().unwrap_or(0) >= last))
        }
    })
    .await;

    // Disaster: the backup is restored, same address.
    c.kill9();
    for entry in std::fs::read_dir(c.data_dir()).unwrap() {
        let path = entry.unwrap().path();
        if path.is_file() {
            std::fs::remove_file(path).unwrap();
        }
    }
    copy_dir(backup.path(), &c.data_dir());
    c.restart();

    // The coordinator says a watch from the future is one (and does not hang).
    let admin = c.client();
    let head = aloft_tests::rv(&admin.get("/api/v1/nodes/restore-0").await.unwrap().into_result().unwrap());
    assert!(head < last, "the restored store is older: {head} < {last}");
    let refused = tokio::time::timeout(
        Duration::from_secs(30),
        admin.watch(&format!("/api/v1/nodes?watch=true&resourceVersion={last}"), None),
    )
    .await
    .expect("answered");
    let err = format!("{:#}", refused.err().expect("a watch from a revision the store has not reached is refused"));
    assert!(err.contains("Too large resource version"), "{err}");

    // The change made after the restore reaches a wait from the revision the agent had before.
    set_label_annotation(&admin, "restore-0", "after-restore").await;
    let v = aloft_tests::eventually(Duration::from_secs(60), "the change after the restore", || {
        let api = api.clone();
        let rev = seen.revision.clone();
        async move {
            let v = api.wait_change(&rev, Duration::from_secs(2)).await?;
            anyhow::Ok(v.filter(|v| v.annotation("test/value") == "after-restore"))
        }
    })
    .await;
    assert!(v.revision.parse::<u64>().unwrap() < last);
    // And the next wait, from that view, waits for a change as usual.
    assert!(api.wait_change(&v.revision, Duration::from_millis(300)).await.unwrap().is_none());
}

/// A Node deleted before this node's watch ever read it (right after the agent started): the
/// follower's read is refused for good (404, then 401 once the credential is revoked), and a
/// wait for the Node's next change ends at once so that the caller reads the Node and finds out.
/// The follower retried the refusal as an outage while the wait ran to its timeout (the run
/// loop's is 5 minutes: a deleted node registered again only then; the identity test saw it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_ends_when_the_node_is_deleted_before_the_watch_reads_it() {
    let c = Coordinator::start();
    let api = enroll(&c, "gone-0").await;
    let rev = api.get().await.unwrap().revision;
    c.client().delete("/api/v1/nodes/gone-0").await.unwrap().into_result().unwrap();
    // The first wait starts the follower: its first read is refused.
    let waited = tokio::time::timeout(Duration::from_secs(60), api.wait_change(&rev, Duration::from_secs(3600))).await;
    assert!(matches!(waited, Ok(Ok(None))), "the wait did not end on the refusal: {waited:?}");
    assert!(
        matches!(api.standing().await, Ok(Standing::Revoked | Standing::NodeGone)),
        "the caller's read finds out why"
    );
}

/// An open watch ends with its credential. A node agent's watch of its Node ends with that
/// Node's DELETED event (deleting a Node revokes its agent's credential): open on, it streamed
/// the Node enrolled again under the name, a new host's, to the old host. Any other watch ends
/// within `CREDENTIAL_RECHECK` of its token's revocation (here by the CLI, another process):
/// it went on until its timeout, however long the client had asked for.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_open_watch_ends_when_its_credential_is_revoked_or_its_node_deleted() {
    use aloft_tests::WatchStream;
    let c = Coordinator::start();
    let admin = c.client();
    let node = node_client(&c, "w-old").await;
    let own = "/api/v1/nodes?watch=true&fieldSelector=metadata.name%3Dw-old&timeoutSeconds=3600";
    let mut agent = WatchStream::open(&node, own).await.unwrap();
    let first = agent.next(Duration::from_secs(30)).await.unwrap().expect("the Node");
    assert_eq!((first["type"].as_str(), first["object"]["metadata"]["name"].as_str()), (Some("ADDED"), Some("w-old")));
    let viewer = c.client_with_token(Some(&c.create_token("watcher", "viewer")));
    let mut watching = WatchStream::open(&viewer, "/api/v1/nodes?watch=true&timeoutSeconds=3600").await.unwrap();
    assert_eq!(watching.next(Duration::from_secs(30)).await.unwrap().expect("the Node")["type"], "ADDED");

    admin.delete("/api/v1/nodes/w-old").await.unwrap().into_result().unwrap();
    let deleted = agent.next(Duration::from_secs(30)).await.unwrap().expect("the deletion");
    assert_eq!(deleted["type"], "DELETED", "{deleted}");
    let after = agent.next(Duration::from_secs(10)).await;
    assert!(matches!(after, Ok(None)), "the agent's watch went on after its Node's deletion: {after:?}");
    let refused = node.get("/api/v1/nodes/w-old").await.unwrap();
    assert_eq!(refused.code, 401, "the deleted Node's credential is revoked: {}", refused.body);

    c.revoke_token("watcher");
    let revoked = Instant::now();
    loop {
        match watching.next(Duration::from_secs(40)).await {
            Ok(Some(ev)) => assert_eq!(ev["type"], "DELETED", "{ev}"),
            Ok(None) => {
                eprintln!("the revoked viewer's watch ended {:?} after", revoked.elapsed());
                break;
            }
            Err(e) => panic!("the revoked viewer's watch is still open {:?} after: {e:#}", revoked.elapsed()),
        }
    }
    let refused = viewer.get("/api/v1/nodes").await.unwrap();
    assert_eq!(refused.code, 401, "{}", refused.body);
}
