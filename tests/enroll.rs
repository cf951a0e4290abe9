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

/// A merge patch that must succeed; the object as written.
async fn merge_patch(c: &aloft_tests::Client, path: &str, patch: &Value) -> Value {
    c.patch(path, "application/merge-patch+json", patch).await.unwrap().into_result().unwrap()
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

    // The annotations that choose what it may read, and the coordinator's answers and marks,
    // are not the node's to write: naming another pool's config as its desired one read that
    // config (the audit's case), and answering its own drain skipped the budgets and hooks.
    let a_path = format!("{NODES}/node-a");
    let before = admin.get(&a_path).await.unwrap().into_result().unwrap();
    for (key, value) in [
        ("machineconfiguration.openshift.io/desiredConfig", json!("rendered-infra-1")),
        ("machineconfiguration.openshift.io/desiredConfig", Value::Null),
        ("aloft.dev/prestageConfig", json!("rendered-infra-1")),
        ("machineconfiguration.openshift.io/lastAppliedDrain", json!("drain-rendered-worker-2")),
        ("aloft.dev/drainStarted", json!("drain-rendered-worker-2@2026-01-01T00:00:00Z")),
        ("aloft.dev/drainFailure", json!("")),
    ] {
        let patch = json!({"metadata": {"annotations": {key: value}}});
        let r = node_a.patch(&a_path, "application/merge-patch+json", &patch).await.unwrap();
        assert_eq!(r.code, 403, "{key}: {}", r.body);
        assert!(r.body["message"].as_str().unwrap_or_default().contains(key), "{}", r.body);
        let mut whole = before.clone();
        match value.as_str() {
            Some(v) => whole["metadata"]["annotations"][key] = json!(v),
            None => _ = whole["metadata"]["annotations"].as_object_mut().map(|a| a.remove(key)),
        }
        let r = node_a.put(&a_path, &whole).await.unwrap();
        assert_eq!(r.code, 403, "PUT {key}: {}", r.body);
    }
    assert_eq!(admin.get(&a_path).await.unwrap().into_result().unwrap(), before, "nothing written");
    assert_eq!(node_a.get(&format!("{MCS}/rendered-infra-1")).await.unwrap().code, 403);
    // Its current config is its own report; naming one there grants no read.
    let current =
        json!({"metadata": {"annotations": {"machineconfiguration.openshift.io/currentConfig": "rendered-infra-1"}}});
    merge_patch(&node_a, &a_path, &current).await;
    assert_eq!(node_a.get(&format!("{MCS}/rendered-infra-1")).await.unwrap().code, 403, "named as current");

    // Enrolling an enrolled name again is refused; the node's credential keeps working.
    let (code, _) = enroll(&c, &bootstrap, "node-a").await;
    assert_eq!(code, 409);
    assert_eq!(node_a.get(&format!("{NODES}/node-a")).await.unwrap().code, 200);
}

/// A node's credential holds 16 watches at once at most (its agent keeps one): the 17th is a
/// 429 naming the limit, and one closed makes room again. An admin's watches are not counted.
/// Before, a host taken over could open any number, each holding memory on the coordinator.
#[tokio::test]
async fn a_node_credential_holds_a_bounded_number_of_watches() {
    let c = Coordinator::start();
    let bootstrap = c.create_token("fleet", "bootstrap");
    let (code, a) = enroll(&c, &bootstrap, "node-a").await;
    assert_eq!(code, 201, "{a}");
    let node_a = c.client_with_token(Some(a["token"].as_str().unwrap()));
    let own = format!("{NODES}?watch=true&fieldSelector=metadata.name%3Dnode-a");
    let mut open = Vec::new();
    for i in 0..16 {
        open.push(node_a.watch(&own, None).await.unwrap_or_else(|e| panic!("watch {i}: {e:#}")));
    }
    let err = match node_a.watch(&own, None).await {
        Ok(_) => panic!("a 17th watch was served"),
        Err(e) => format!("{e:#}"),
    };
    assert!(err.contains("node node-a has 16 watches open already"), "{err}");
    // An admin's are not counted against the node's.
    let _admin = c.client().watch(&own, None).await.unwrap();
    // One closed: room again, once the coordinator has seen the stream end.
    open.pop();
    aloft_tests::eventually(std::time::Duration::from_secs(10), "a watch to be served again", || async {
        Ok(node_a.watch(&own, None).await.ok())
    })
    .await;
}

/// A TCP relay on loopback that can stop passing bytes while keeping both of its connections
/// open: what a coordinator sees of a host that vanished (powered off, cut off the network)
/// without closing its connection. The kernel still acknowledges what the coordinator sends, as
/// a router's buffers would for a while; only an answer the host itself must give (an HTTP/2
/// ping's) goes missing.
struct FreezingRelay {
    port: u16,
    frozen: tokio::sync::watch::Sender<bool>,
    _accept: tokio::task::JoinHandle<()>,
}

impl FreezingRelay {
    async fn start(to: std::net::SocketAddr) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let (frozen, _) = tokio::sync::watch::channel(false);
        let on = frozen.clone();
        let accept = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let Ok(server) = tokio::net::TcpStream::connect(to).await else { return };
                let (cr, cw) = client.into_split();
                let (sr, sw) = server.into_split();
                tokio::spawn(pass(cr, sw, on.subscribe()));
                tokio::spawn(pass(sr, cw, on.subscribe()));
            }
        });
        FreezingRelay { port, frozen, _accept: accept }
    }

    fn freeze(&self) {
        self.frozen.send_replace(true);
    }
}

/// Copy `from` to `to` until frozen, then hold both halves open (dropping them would close the
/// connection, which is what a vanished host does not do) until the test ends.
async fn pass(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    mut frozen: tokio::sync::watch::Receiver<bool>,
) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        tokio::select! {
            _ = async {
                while !*frozen.borrow_and_update() {
                    if frozen.changed().await.is_err() {
                        break;
                    }
                }
            } => break,
            n = from.read(&mut buf) => match n {
                Ok(0) | Err(_) => return,
                Ok(n) => if to.write_all(&buf[..n]).await.is_err() { return },
            },
        }
    }
    std::future::pending::<()>().await;
    drop((from, to));
}

/// The TCP states of the coordinator's side of its connections (`/proc/net/tcp`, shared by
/// every process on this network): whether each has its keepalive timer running (`tr` 2).
fn keepalive_timers_on_port(port: u16) -> Vec<bool> {
    let table = std::fs::read_to_string("/proc/net/tcp").unwrap_or_default();
    table
        .lines()
        .skip(1)
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let local_port = f.get(1)?.rsplit(':').next().and_then(|p| u16::from_str_radix(p, 16).ok())?;
            // 01: ESTABLISHED.
            (local_port == port && f.get(3) == Some(&"01")).then(|| f.get(5).is_some_and(|t| t.starts_with("02:")))
        })
        .collect()
}

/// A host that vanishes without closing its connection gives back its watches (and with them
/// its node's share of the 16 a credential may hold) once it leaves the coordinator's HTTP/2
/// ping unanswered: before, they stayed until each watch's timeout (30 minutes by default), and
/// the host, back on another connection, got 429 for its own watch. With pings turned off the
/// slots stay taken, which shows it is the ping that frees them. Every connection of the
/// coordinator also has TCP keepalive, which finds a vanished peer on a connection idle both
/// ways (HTTP/1.1 ones too).
#[tokio::test]
async fn a_vanished_hosts_watches_end_when_it_leaves_a_ping_unanswered() {
    for pings in [true, false] {
        let interval = if pings { "1s" } else { "0s" };
        // A timeout a loaded machine meets: the relay and the client answering pings share the
        // test's one thread.
        let args = ["--http2-ping-interval", interval, "--http2-ping-timeout", "3s"].map(String::from).to_vec();
        let c = Coordinator::start_with(aloft_tests::Options { args, ..Default::default() });
        let bootstrap = c.create_token("fleet", "bootstrap");
        let (code, a) = enroll(&c, &bootstrap, "node-a").await;
        assert_eq!(code, 201, "{a}");
        let token = a["token"].as_str().unwrap().to_string();
        let port: u16 = c.url().rsplit(':').next().and_then(|p| p.parse().ok()).unwrap();
        let relay = FreezingRelay::start(([127, 0, 0, 1], port).into()).await;
        let via_relay = aloft_tests::Client::new(&aloft_tests::ClientConfig {
            server: format!("https://127.0.0.1:{}", relay.port),
            ca_pem: Some(c.ca_pem()),
            token: Some(token.clone()),
        })
        .unwrap();
        let own = format!("{NODES}?watch=true&fieldSelector=metadata.name%3Dnode-a");
        let mut open = Vec::new();
        for i in 0..16 {
            open.push(via_relay.watch(&own, None).await.unwrap_or_else(|e| panic!("watch {i}: {e:#}")));
        }
        let direct = c.client_with_token(Some(&token));
        let err = format!("{:#}", direct.watch(&own, None).await.err().expect("a 17th watch was served"));
        assert!(err.contains("16 watches open already"), "{err}");
        // (A connection with bytes not yet acknowledged shows its retransmission timer instead.)
        aloft_tests::eventually(std::time::Duration::from_secs(10), "keepalive on every connection", || async {
            let timers = keepalive_timers_on_port(port);
            Ok((timers.len() >= 2 && timers.iter().all(|t| *t)).then_some(()))
        })
        .await;

        relay.freeze();
        if pings {
            aloft_tests::eventually(
                std::time::Duration::from_secs(20),
                "the watches of the vanished connection to end",
                || async { Ok(direct.watch(&own, None).await.ok()) },
            )
            .await;
        } else {
            // Twice what the pinging coordinator needs (a ping after 1 s, 3 s for its answer).
            tokio::time::sleep(std::time::Duration::from_secs(8)).await;
            let err = format!("{:#}", direct.watch(&own, None).await.err().expect("served without pings"));
            assert!(err.contains("16 watches open already"), "{err}");
        }
        drop(open);
    }
}

/// A ping timeout of zero would close every connection at its first ping: refused, naming the
/// flag, before anything is made.
#[test]
fn a_ping_timeout_of_zero_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let out = std::process::Command::new(aloft_tests::bin("aloft-coordinator"))
        .args(["serve", "--listen", "127.0.0.1:0", "--http2-ping-timeout", "0s", "--data-dir"])
        .arg(&data)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("--http2-ping-timeout 0s"), "{err}");
    assert!(!data.exists(), "nothing made");
}

/// A bootstrap token gives only the labels of Kubernetes' own namespaces it was made for: they
/// choose a node's pool, and so which rendered configs, secrets included, its credential reads.
/// The audit's case: the fleet's bootstrap token enrolled a "master" and read the master pool's
/// secret key. Refused with 403 naming the label and the command that makes a token for it;
/// nothing is created (no Node, no credential), and an existing Node is not relabelled. The
/// labels a host says of itself, and others' labels, are always allowed.
#[tokio::test]
async fn a_bootstrap_token_gives_only_the_pool_labels_it_allows() {
    let c = Coordinator::start();
    let admin = c.client();
    let fleet = c.create_token("fleet", "bootstrap");
    let master = json!({"node-role.kubernetes.io/master": ""});
    for (name, labels) in [
        ("m1", master.clone()),
        ("m2", json!({"node-role.kubernetes.io/worker": "", "node-role.kubernetes.io/master": ""})),
        ("m3", json!({"node-role.kubernetes.io/worker": "yes"})),
        ("m4", json!({"node-restriction.kubernetes.io/pool": "db"})),
        ("m5", json!({"example.k8s.io/tier": "db"})),
    ] {
        let (code, body) = enroll_with(&c, &fleet, name, labels).await;
        assert_eq!(code, 403, "{name}: {body}");
        let message = body["message"].as_str().unwrap_or_default();
        assert!(message.contains("token create") && message.contains("--labels"), "{name}: {body}");
        assert_eq!(admin.get(&format!("{NODES}/{name}")).await.unwrap().code, 404, "{name}: no Node made");
    }
    let (_, body) = enroll_with(&c, &fleet, "m1", master.clone()).await;
    assert!(body["message"].as_str().unwrap_or_default().contains("node-role.kubernetes.io/master="), "{body}");
    // A Node made by hand is not relabelled through an enrollment either.
    let by_hand = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "pre"}});
    admin.post(NODES, &by_hand).await.unwrap().into_result().unwrap();
    let (code, _) = enroll_with(&c, &fleet, "pre", master.clone()).await;
    assert_eq!(code, 403);
    let pre = admin.get(&format!("{NODES}/pre")).await.unwrap().into_result().unwrap();
    assert!(pre["metadata"].get("labels").is_none(), "{pre}");

    // The default token: a worker, with the labels a host says of itself and anyone's labels.
    let own = json!({"node-role.kubernetes.io/worker": "", "topology.kubernetes.io/zone": "a",
                     "kubernetes.io/arch": "amd64", "node.kubernetes.io/instance-type": "m5",
                     "feature.node.kubernetes.io/cpu": "x", "example.com/rack": "r1"});
    let (code, body) = enroll_with(&c, &fleet, "w1", own).await;
    assert_eq!(code, 201, "{body}");

    // A token made for masters enrolls one, and only with the labels it names.
    let masters = c.create_token("masters", "bootstrap:node-role.kubernetes.io/master=");
    let (code, body) = enroll_with(&c, &masters, "m1", master.clone()).await;
    assert_eq!(code, 201, "{body}");
    let (code, _) = enroll_with(&c, &masters, "w2", json!({"node-role.kubernetes.io/worker": ""})).await;
    assert_eq!(code, 403, "a token with a list allows that list");
    // The labels judged are the ones the Node ends up with (the fixes' audit): a Node made by
    // hand as a master, or a master whose credential was revoked to replace its host, is not
    // handed to the worker token, even when the enrollment asks for no label.
    let by_hand = json!({"apiVersion": "v1", "kind": "Node",
                         "metadata": {"name": "pm", "labels": {"node-role.kubernetes.io/master": ""}}});
    admin.post(NODES, &by_hand).await.unwrap().into_result().unwrap();
    let (code, body) = enroll_with(&c, &fleet, "pm", json!({})).await;
    assert_eq!(code, 403, "{body}");
    assert!(body["message"].as_str().unwrap_or_default().contains("on the Node of that name already"), "{body}");
    let out = std::process::Command::new(aloft_tests::bin("aloft-coordinator"))
        .args(["token", "revoke", "--name", "node:m1", "--data-dir"])
        .arg(c.data_dir())
        .args(c.store_args())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let (code, body) = enroll_with(&c, &fleet, "m1", json!({"node-role.kubernetes.io/worker": ""})).await;
    assert_eq!(code, 403, "{body}");
    let (code, body) = enroll_with(&c, &masters, "m1", json!({})).await;
    assert_eq!(code, 201, "the master token may: {body}");
    // The admin may give any label.
    let (code, _) = enroll_with(&c, &c.admin_token(), "m9", master).await;
    assert_eq!(code, 201);
}

async fn enroll_with(c: &Coordinator, bootstrap: &str, name: &str, labels: Value) -> (u16, Value) {
    let r = c
        .client_with_token(Some(bootstrap))
        .post("/aloft/v1/enroll", &json!({"nodeName": name, "labels": labels}))
        .await
        .unwrap();
    (r.code, r.body)
}

/// A second host enrolling under an enrolled node's name (a cloned image, a duplicated
/// hostname) is refused with a 409 that says how to replace a host on purpose, and a Warning
/// Event on the Node: it neither takes the Node over nor relabels it, and the first agent keeps
/// its credential (OpenShift's machine-approver refuses a bootstrap CSR for an existing node).
#[tokio::test]
async fn a_second_host_cannot_take_over_an_enrolled_node() {
    let c = Coordinator::start();
    let admin = c.client();
    let bootstrap = c.create_token("fleet", "bootstrap:node-role.kubernetes.io/worker=,node-role.kubernetes.io/infra=");
    let worker = json!({"node-role.kubernetes.io/worker": ""});
    let (code, first) = enroll_with(&c, &bootstrap, "dup", worker.clone()).await;
    assert_eq!(code, 201, "{first}");
    let first = c.client_with_token(first["token"].as_str());

    let (code, body) = enroll_with(&c, &bootstrap, "dup", json!({"node-role.kubernetes.io/infra": ""})).await;
    assert_eq!(code, 409, "{body}");
    let message = body["message"].as_str().unwrap_or_default();
    assert!(
        message.starts_with("Operation cannot be fulfilled on nodes \"dup\": the node is already enrolled: "),
        "{body}"
    );
    assert!(message.contains("kubectl delete node dup"), "{body}");
    // Named by kube's prefix, then in the two commands that replace the host; not once more.
    assert_eq!(message.matches("dup").count(), 3, "{body}");
    assert_eq!(first.get(&format!("{NODES}/dup")).await.unwrap().code, 200, "the first agent keeps its credential");
    let node = admin.get(&format!("{NODES}/dup")).await.unwrap().into_result().unwrap();
    assert!(node["metadata"]["labels"].get("node-role.kubernetes.io/infra").is_none(), "not relabelled: {node}");
    aloft_tests::eventually(std::time::Duration::from_secs(10), "the EnrollmentRefused event", || async {
        let events = admin.get("/api/v1/namespaces/default/events").await?.into_result()?;
        let found = events["items"].as_array().into_iter().flatten().any(|e| {
            e["reason"] == "EnrollmentRefused" && e["type"] == "Warning" && e["involvedObject"]["name"] == "dup"
        });
        Ok(found.then_some(()))
    })
    .await;

    // A Node an admin created (no agent yet) is attached to the agent that enrolls as it.
    let pre = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "pre"}});
    admin.post(NODES, &pre).await.unwrap().into_result().unwrap();
    let (code, body) = enroll_with(&c, &bootstrap, "pre", worker.clone()).await;
    assert_eq!(code, 201, "{body}");
}

/// Hosts enrolling under one new name at the same moment: one gets the Node and a credential
/// that works, every other is refused (409), none is told it enrolled with a credential a later
/// enrollment deleted. Rounds of 12 at once, on fresh names.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn of_hosts_enrolling_under_one_name_at_once_exactly_one_enrolls() {
    let c = Coordinator::start();
    let bootstrap = c.create_token("fleet", "bootstrap");
    for round in 0..6 {
        let name = format!("race-{round}");
        let tries = (0..12).map(|_| {
            let client = c.client_with_token(Some(&bootstrap));
            let body = json!({"nodeName": name, "labels": {"node-role.kubernetes.io/worker": ""}});
            tokio::spawn(async move { client.post("/aloft/v1/enroll", &body).await.map(|r| (r.code, r.body)) })
        });
        let mut enrolled = Vec::new();
        for t in tries.collect::<Vec<_>>() {
            let (code, body) = t.await.unwrap().unwrap();
            match code {
                201 => enrolled.push(body["token"].as_str().unwrap_or_default().to_string()),
                409 => {}
                other => panic!("{name}: {other} {body}"),
            }
        }
        assert_eq!(enrolled.len(), 1, "{name}: {} hosts told they enrolled", enrolled.len());
        let node = c.client_with_token(Some(&enrolled[0])).get(&format!("{NODES}/{name}")).await.unwrap();
        assert_eq!(node.code, 200, "{name}: the credential of the one that enrolled works: {}", node.body);
    }
}

/// Deleting a Node revokes its agent's credential (401, not 404: a decommissioned host's token
/// must not take over a later Node of the same name), and the name can be enrolled afresh.
#[tokio::test]
async fn deleting_a_node_revokes_its_credential_and_the_name_can_enroll_again() {
    let c = Coordinator::start();
    let admin = c.client();
    let bootstrap = c.create_token("fleet", "bootstrap");
    let worker = json!({"node-role.kubernetes.io/worker": ""});
    let (_, first) = enroll_with(&c, &bootstrap, "dup", worker.clone()).await;
    let first = c.client_with_token(first["token"].as_str());
    assert_eq!(first.get(&format!("{NODES}/dup")).await.unwrap().code, 200);
    admin.delete(&format!("{NODES}/dup")).await.unwrap().into_result().unwrap();
    assert_eq!(first.get(&format!("{NODES}/dup")).await.unwrap().code, 401, "the deleted Node's credential");
    let (code, again) = enroll_with(&c, &bootstrap, "dup", worker).await;
    assert_eq!(code, 201, "{again}");
    let again = c.client_with_token(again["token"].as_str());
    assert_eq!(again.get(&format!("{NODES}/dup")).await.unwrap().code, 200);
    assert_eq!(first.get(&format!("{NODES}/dup")).await.unwrap().code, 401, "the old credential stays revoked");
}

/// The node controller's pick in a pool without drain hooks cordons the node, answers its drain
/// and grants the uncordon at Done (`aloft.dev/uncordonAtDone`): the agent's Done report is
/// then written uncordoned, in that one write. Only the coordinator may set or drop the grant.
#[tokio::test]
async fn a_granted_done_report_comes_back_uncordoned_and_the_grant_is_the_coordinators() {
    let c = Coordinator::start();
    let admin = c.client();
    let bootstrap = c.create_token("fleet", "bootstrap");
    let (_, a) = enroll(&c, &bootstrap, "node-a").await;
    let node_a = c.client_with_token(a["token"].as_str());
    let path = format!("{NODES}/node-a");
    const GRANT: &str = "aloft.dev/uncordonAtDone";
    // As the pick writes it.
    let picked = json!({"spec": {"unschedulable": true}, "metadata": {"annotations": {
        "machineconfiguration.openshift.io/desiredConfig": "rendered-worker-2",
        "machineconfiguration.openshift.io/currentConfig": "rendered-worker-1",
        "machineconfiguration.openshift.io/lastAppliedDrain": "drain-rendered-worker-2",
        "machineconfiguration.openshift.io/desiredDrain": null,
        GRANT: "rendered-worker-2"}}});
    merge_patch(&admin, &path, &picked).await;
    let get = || async { admin.get(&path).await.unwrap().into_result().unwrap() };
    let before = get().await;

    // The node may neither move nor drop the grant; nothing changes.
    for grant in [json!("rendered-worker-9"), Value::Null] {
        let r = node_a
            .patch(&path, "application/merge-patch+json", &json!({"metadata": {"annotations": {GRANT: grant}}}))
            .await
            .unwrap();
        assert_eq!(r.code, 403, "{}", r.body);
        assert!(r.body["message"].as_str().unwrap().contains(GRANT), "{}", r.body);
        assert_eq!(get().await, before, "nothing written");
    }

    let report = |state: &str, current: &str, request: &str| {
        json!({"metadata": {"annotations": {
            "machineconfiguration.openshift.io/state": state,
            "machineconfiguration.openshift.io/currentConfig": current,
            "machineconfiguration.openshift.io/desiredDrain": request}}})
    };
    // Working (with the drain request the pick answered already): still cordoned.
    let w = merge_patch(&node_a, &path, &report("Working", "rendered-worker-1", "drain-rendered-worker-2")).await;
    assert_eq!(w.pointer("/spec/unschedulable"), Some(&json!(true)));
    assert_eq!(w["metadata"]["annotations"][GRANT], "rendered-worker-2");

    // Done on the granted config: the answer is the uncordoned node, one revision later.
    let rv = |n: &Value| n["metadata"]["resourceVersion"].as_str().unwrap().parse::<u64>().unwrap();
    let done = merge_patch(&node_a, &path, &report("Done", "rendered-worker-2", "uncordon-rendered-worker-2")).await;
    assert_eq!(done.pointer("/spec/unschedulable"), None, "{done}");
    let ann = &done["metadata"]["annotations"];
    assert_eq!(ann["machineconfiguration.openshift.io/lastAppliedDrain"], "uncordon-rendered-worker-2");
    assert_eq!(ann["machineconfiguration.openshift.io/state"], "Done");
    assert!(ann.get(GRANT).is_none(), "the grant is used up: {done}");
    assert_eq!(rv(&done), rv(&w) + 1, "one write");
    let generation = |n: &Value| n["metadata"]["generation"].as_i64().unwrap();
    assert_eq!(generation(&done), generation(&w) + 1, "a spec change, as any other: {done}");
    assert_eq!(get().await, done, "as stored");

    // Without a grant, the Done report is written as sent, still cordoned: its uncordon request
    // is then the controllers' to answer (here the drain controller's: the node is in no pool).
    merge_patch(&admin, &path, &picked).await;
    merge_patch(&admin, &path, &json!({"metadata": {"annotations": {GRANT: null}}})).await;
    let done = merge_patch(&node_a, &path, &report("Done", "rendered-worker-2", "uncordon-rendered-worker-2")).await;
    assert_eq!(done.pointer("/spec/unschedulable"), Some(&json!(true)), "{done}");
    assert_eq!(
        done["metadata"]["annotations"]["machineconfiguration.openshift.io/lastAppliedDrain"],
        "drain-rendered-worker-2"
    );

    // A pick over an admin's cordon marks it (`aloft.dev/cordonedBeforeDrain`): the granted Done
    // report ends the drain but keeps the cordon, and an Event says so and how to lift it.
    const MARK: &str = "aloft.dev/cordonedBeforeDrain";
    let mut marked = picked.clone();
    marked["metadata"]["annotations"][MARK] = json!("true");
    merge_patch(&admin, &path, &marked).await;
    let done = merge_patch(&node_a, &path, &report("Done", "rendered-worker-2", "uncordon-rendered-worker-2")).await;
    assert_eq!(done.pointer("/spec/unschedulable"), Some(&json!(true)), "the admin's cordon stays: {done}");
    let ann = &done["metadata"]["annotations"];
    assert_eq!(ann["machineconfiguration.openshift.io/lastAppliedDrain"], "uncordon-rendered-worker-2", "{done}");
    assert!(ann.get(GRANT).is_none() && ann.get(MARK).is_none(), "the drain's marks are gone: {done}");
    let kept = aloft_tests::eventually(std::time::Duration::from_secs(10), "the CordonKept event", || async {
        let events = admin.get("/api/v1/namespaces/default/events").await?.into_result()?;
        let found = events["items"].as_array().into_iter().flatten().find_map(|e| {
            (e["reason"] == "CordonKept" && e["involvedObject"]["name"] == "node-a")
                .then(|| e["message"].as_str().unwrap_or_default().to_string())
        });
        Ok(found)
    })
    .await;
    assert!(kept.contains("uncordon-rendered-worker-2 answered") && kept.contains("kubectl uncordon"), "{kept}");
}

/// An agent that cannot run on its host (here: no D-Bus at `--bus-address`; a metrics address
/// taken is the same) fails before it enrolls: its Node would have stayed in the pool NotReady,
/// holding a slot of maxUnavailable, and the pool's rollouts waited for it.
#[tokio::test]
async fn an_agent_that_cannot_run_here_does_not_enroll() {
    let c = Coordinator::start();
    let dir = tempfile::tempdir().unwrap();
    let token_file = dir.path().join("bootstrap.token");
    std::fs::write(&token_file, c.create_token("fleet", "bootstrap")).unwrap();
    let root = dir.path().join("root");
    std::fs::create_dir_all(&root).unwrap();
    // A root whose state dir cannot be made (a file where the directory goes): the credential
    // could not be saved, and the next start's enrollment was refused for the Node left behind.
    let blocked = dir.path().join("blocked");
    std::fs::create_dir_all(blocked.join("var/lib")).unwrap();
    std::fs::write(blocked.join("var/lib/aloft"), "not a directory").unwrap();
    for (root, bus, says) in [
        (&root, "unix:path=/nonexistent/bus", "/nonexistent/bus"),
        (&blocked, "unix:path=/nonexistent/bus", "state dir"),
    ] {
        let out = std::process::Command::new(aloft_tests::bin("aloft-agent"))
            .args(["--coordinator", c.url(), "--node-name", "nx", "--metrics-listen", ""])
            .arg("--ca")
            .arg(c.ca_path())
            .arg("--bootstrap-token-file")
            .arg(&token_file)
            .arg("--root")
            .arg(root)
            .args(["--bus-address", bus])
            .env("ALOFT_LOG", "info")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{stderr}");
        assert!(stderr.contains(says), "says what: {stderr}");
        assert!(!stderr.contains("enrolled"), "{stderr}");
        assert_eq!(c.client().get(&format!("{NODES}/nx")).await.unwrap().code, 404, "no Node");
    }
}

/// `token create --ttl`: a bootstrap token that works until its time, then is refused (401)
/// and listed as expired. As kubeadm's: `--ttl 0` never expires, and a bootstrap token made
/// without `--ttl` expires in 24 h (a viewer token does not); `token delete` revokes.
#[tokio::test]
async fn a_bootstrap_token_with_a_ttl_stops_working_at_its_time() {
    use std::process::Command;
    let mut c = Coordinator::start();
    let (data_dir, store_args) = (c.data_dir(), c.store_args());
    let token_cmd = |args: &[&str]| {
        Command::new(aloft_tests::bin("aloft-coordinator"))
            .arg("token")
            .args(args)
            .arg("--data-dir")
            .arg(&data_dir)
            .args(&store_args)
            .env("ALOFT_LOG", "warn")
            .output()
            .unwrap()
    };
    let create = |name: &str, ttl: &str| {
        let mut args = vec!["create", "--name", name, "--role", if name == "watcher" { "viewer" } else { "bootstrap" }];
        if !ttl.is_empty() {
            args.extend(["--ttl", ttl]);
        }
        let out = token_cmd(&args);
        assert!(out.status.success(), "{name}: {}", String::from_utf8_lossy(&out.stderr));
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        (String::from_utf8(out.stdout).unwrap().trim().to_string(), stderr)
    };
    let (brief, said) = create("brief", "2s");
    assert!(said.contains("expires in 2s"), "{said}");
    let (day, _) = create("day", "24h");
    let (_, said) = create("forever", "0s");
    assert!(said.contains("never expires"), "{said}");
    let (_, said) = create("default", "");
    assert!(said.contains("expires in 1day") && said.contains("--ttl 0"), "{said}");
    let (_, said) = create("watcher", "");
    assert!(said.contains("never expires"), "{said}");

    let (code, body) = enroll(&c, &brief, "n-early").await;
    assert_eq!(code, 201, "{body}");
    tokio::time::sleep(std::time::Duration::from_millis(2500)).await;
    let (code, body) = enroll(&c, &brief, "n-late").await;
    assert_eq!(code, 401, "an expired token: {body}");
    assert_eq!(c.client().get(&format!("{NODES}/n-late")).await.unwrap().code, 404, "nothing created");
    let (code, body) = enroll(&c, &day, "n-day").await;
    assert_eq!(code, 201, "{body}");

    let list = String::from_utf8_lossy(&token_cmd(&["list"]).stdout).into_owned();
    let line = |name: &str| list.lines().find(|l| l.starts_with(&format!("{name} "))).unwrap_or_default().to_string();
    assert!(line("brief").ends_with("(expired)"), "{list}");
    for dated in ["day", "default"] {
        assert!(!line(dated).ends_with("(expired)") && !line(dated).ends_with("never"), "{dated}: {list}");
    }
    for never in ["admin", "forever", "watcher"] {
        assert!(line(never).ends_with("never"), "{never}: {list}");
    }

    let out = token_cmd(&["delete", "--name", "day"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let (code, body) = enroll(&c, &day, "n-after-delete").await;
    assert_eq!(code, 401, "a deleted token: {body}");

    // A running coordinator deletes expired tokens (tokencleaner's job): at its start, then every
    // minute. Restarted, it deletes `brief` at once, and only `brief`.
    c.restart();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let list = loop {
        let list = String::from_utf8_lossy(&token_cmd(&["list"]).stdout).into_owned();
        if !list.lines().any(|l| l.starts_with("brief ")) || std::time::Instant::now() > deadline {
            break list;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    };
    assert!(!list.lines().any(|l| l.starts_with("brief ")), "the expired token is deleted: {list}");
    for kept in ["admin", "default", "forever", "watcher", "node:n-early", "node:n-day"] {
        assert!(list.lines().any(|l| l.starts_with(&format!("{kept} "))), "{kept} kept: {list}");
    }
    let said = c.log_lines_with("expired token deleted");
    assert!(said.len() == 1 && said[0].contains("brief"), "said so in the log: {said:?}");
}
