//! Releases and the update graph against a real coordinator on loopback: the ClusterVersion
//! controller polls an update service (a real one's served graphs from
//! shared/testdata/cincinnati-graphs, with each payload mapped to an OS commit URL, since aloft
//! releases are OS commits), shows the updates the graph offers and the risks of the
//! conditional ones, takes a desired release into the release MachineConfigs and completes it
//! once the pools run it; `aloftctl adm upgrade` shows and starts updates. Releases that fail the
//! CVO's preconditions, and ClusterVersions the controller could not use, are refused with the
//! field or the precondition named, changing nothing.
//!
//! No node agents here (the worker pool is empty): the same flow with a real agent deploying the
//! release's OS commit is `os_fleet.rs::a_release_from_the_update_graph_reaches_the_node`.

use aloft_coordinator::resources::{CLUSTER_VERSION, MACHINE_CONFIG, NODE};
use aloft_tests::update_service::{graph, offered, worker_pool, UpdateService};
use aloft_tests::*;
use serde_json::{json, Value};
use std::time::Duration;

const CLUSTER_ID: &str = "5e5b4b5c-3a0e-4c8e-9f54-2c1d5a9e1f00";

/// An OS commit URL standing for a payload (the checksum is the payload's digest).
fn os_payload(digest: &str) -> String {
    format!("ostree+http://127.0.0.1:9/repo#ocp/x86_64@{digest}")
}

/// A real served graph, each `quay.io/...@sha256:D` payload turned into an OS commit URL.
fn real_graph(file: &str) -> Value {
    let path = testdata().join("cincinnati-graphs").join(file);
    let mut g: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    for n in g["nodes"].as_array_mut().unwrap() {
        let digest = n["payload"].as_str().unwrap().rsplit_once("sha256:").unwrap().1.to_string();
        n["payload"] = json!(os_payload(&digest));
    }
    g
}

fn payload_of(g: &Value, version: &str) -> String {
    g["nodes"].as_array().unwrap().iter().find(|n| n["version"] == version).unwrap()["payload"]
        .as_str()
        .unwrap()
        .to_string()
}

fn cluster_version(spec: Value) -> Value {
    json!({"apiVersion": "config.openshift.io/v1", "kind": "ClusterVersion", "metadata": {"name": "version"},
        "spec": spec})
}

async fn cv(c: &Client) -> Value {
    c.get(&path_of(&CLUSTER_VERSION, Some("version"))).await.unwrap().into_result().unwrap()
}

fn versions(list: &Value) -> Vec<String> {
    let mut v: Vec<String> =
        list.as_array().into_iter().flatten().map(|r| r["version"].as_str().unwrap().to_string()).collect();
    v.sort();
    v
}

/// Wait for the ClusterVersion to satisfy `ok`; returns it.
async fn wait_cv(c: &Client, what: &str, ok: impl Fn(&Value) -> bool) -> Value {
    eventually(Duration::from_secs(60), what, || async {
        let v = c.get(&path_of(&CLUSTER_VERSION, Some("version"))).await?.into_result()?;
        Ok(ok(&v).then_some(v))
    })
    .await
}

fn cond_is(v: &Value, type_: &str, status: &str, reason: &str) -> bool {
    condition(v, type_).is_some_and(|c| c["status"] == status && c["reason"].as_str().unwrap_or("") == reason)
}

fn completed(v: &Value, version: &str) -> bool {
    v.pointer("/status/history/0").is_some_and(|h| h["state"] == "Completed" && h["version"] == version)
}

/// `aloftctl ARGS` against `c`: (exit code, stdout, stderr).
fn aloftctl(c: &Coordinator, args: &[&str]) -> (i32, String, String) {
    let out = c.aloftctl(args);
    let text = |b: &[u8]| String::from_utf8_lossy(b).to_string();
    (out.status.code().unwrap_or(-1), text(&out.stdout), text(&out.stderr))
}

async fn release_config_image(c: &Client, role: &str) -> String {
    let mc =
        c.get(&path_of(&MACHINE_CONFIG, Some(&format!("00-{role}-release")))).await.unwrap().into_result().unwrap();
    mc.pointer("/spec/osImageURL").and_then(Value::as_str).unwrap_or("").to_string()
}

fn start_coordinator() -> Coordinator {
    Coordinator::start_with(Options { args: vec!["--update-poll-interval".into(), "3s".into()], ..Default::default() })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn releases_follow_a_real_update_graph() {
    let c = start_coordinator();
    let admin = c.client();
    let svc = UpdateService::start().await;
    let stable47 = real_graph("stable-4.7_amd64_v1.json");
    svc.set("stable-4.7", stable47.clone());
    worker_pool(&admin).await;

    // The release the fleet runs, by version: looked up in the graph, taken as the first one.
    let spec = json!({"clusterID": CLUSTER_ID, "upstream": svc.url, "channel": "stable-4.7",
        "desiredUpdate": {"version": "4.7.2"}});
    admin.post(&path_of(&CLUSTER_VERSION, None), &cluster_version(spec)).await.unwrap().into_result().unwrap();
    let (plain, conditional) = offered(&stable47, "4.7.2");
    assert!(plain.len() >= 3 && conditional == ["4.7.4"], "the data: {plain:?} {conditional:?}");
    let v = wait_cv(&admin, "4.7.2 completed, its updates retrieved", |v| {
        completed(v, "4.7.2")
            && cond_is(v, "RetrievedUpdates", "True", "")
            && !versions(&v["status"]["availableUpdates"]).is_empty()
    })
    .await;
    let p472 = payload_of(&stable47, "4.7.2");
    assert_eq!(v["status"]["desired"]["image"], p472.as_str(), "{v}");
    assert!(v["status"]["desired"]["url"].as_str().unwrap().starts_with("https://access.redhat.com/errata/"), "{v}");
    assert!(v["status"]["desired"]["channels"].as_array().unwrap().contains(&json!("stable-4.7")), "{v}");
    assert_eq!(release_config_image(&admin, "worker").await, p472);
    assert_eq!(release_config_image(&admin, "master").await, p472);
    assert_eq!(v["status"]["history"][0]["verified"], false);
    assert!(cond_is(&v, "Available", "True", "") && cond_is(&v, "Progressing", "False", ""), "{v}");
    assert_eq!(condition(&v, "Progressing").unwrap()["message"], "Cluster version is 4.7.2");
    assert_eq!(v["status"]["observedGeneration"], v["metadata"]["generation"]);

    // What the graph offers from 4.7.2: its edges, less the conditional one, which has a PromQL
    // risk aloft cannot evaluate (Recommended Unknown, not offered as available).
    assert_eq!(versions(&v["status"]["availableUpdates"]), plain, "{v}");
    let cu = &v["status"]["conditionalUpdates"];
    assert_eq!(versions(&cu.as_array().unwrap().iter().map(|c| c["release"].clone()).collect()), conditional);
    let rec = &cu[0]["conditions"][0];
    assert_eq!(
        (rec["type"].as_str(), rec["status"].as_str(), rec["reason"].as_str()),
        (Some("Recommended"), Some("Unknown"), Some("EvaluationFailed")),
        "{rec}"
    );
    assert!(rec["message"].as_str().unwrap().contains("VSphereNodeNameChanges"), "{rec}");
    assert_eq!(cu[0]["risks"][0]["name"], "VSphereNodeNameChanges");

    // On /metrics, as the CVO exposes its own: what is offered, the conditions, no release
    // rolling out.
    let (code, metrics, err) = aloftctl(&c, &["get", "--raw", "/metrics"]);
    assert_eq!(code, 0, "{err}");
    let offered_line = format!(
        "aloft_cluster_version_available_updates{{channel=\"stable-4.7\",upstream=\"{}\"}} {}\n",
        svc.url,
        plain.len()
    );
    assert!(metrics.contains(&offered_line), "{offered_line}\n{metrics}");
    assert!(metrics.contains("aloft_cluster_version_condition{condition=\"Available\"} 1\n"), "{metrics}");
    assert!(metrics.contains("aloft_cluster_version_condition{condition=\"Failing\"} 0\n"), "{metrics}");
    assert!(!metrics.contains("aloft_cluster_version_progressing_seconds{"), "{metrics}");

    // The query, as the CVO sends it.
    let q = svc.queries().last().cloned().unwrap();
    assert_eq!(q["channel"], "stable-4.7");
    assert_eq!(q["id"], CLUSTER_ID);
    assert_eq!(q["version"], "4.7.2");
    assert_eq!(q["accept"], "application/json");
    assert!(!q["arch"].is_empty());

    // `aloftctl adm upgrade` shows it all; the risky update is refused without
    // --allow-not-recommended (exit 2: a usage error), and changes nothing.
    let (code, out, err) = aloftctl(&c, &["adm", "upgrade"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.starts_with("Cluster version is 4.7.2\n"), "{out}");
    assert!(out.contains(&format!("Upstream: {}\nChannel: stable-4.7\n", svc.url)), "{out}");
    let newest = plain.iter().max_by_key(|v| semver(v)).unwrap().clone();
    assert!(out.contains("Recommended updates:") && out.contains(&newest), "{out}");
    assert!(out.contains("not recommended for this fleet are available (1)"), "{out}");
    let (code, out, err) = aloftctl(&c, &["adm", "upgrade", "--include-not-recommended"]);
    assert!(code == 0 && out.contains("Version: 4.7.4") && out.contains("Reason: EvaluationFailed"), "{out}{err}");
    let (code, _, err) = aloftctl(&c, &["adm", "upgrade", "--to", "4.7.4"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("the update to 4.7.4 is not recommended") && err.contains("--allow-not-recommended"), "{err}");
    let (code, _, err) = aloftctl(&c, &["adm", "upgrade", "--to", "9.9.9"]);
    assert!(code == 2 && err.contains("9.9.9 is not one of the available updates"), "{err}");
    assert!(cv(&admin).await["spec"]["desiredUpdate"] == json!({"version": "4.7.2"}), "nothing asked");

    // The newest recommended update: taken, rolled out, completed; the history keeps both.
    let (code, out, err) = aloftctl(&c, &["adm", "upgrade", "--to", &newest]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains(&format!("Requested update to {newest}")), "{out}");
    let v = wait_cv(&admin, "the update completed", |v| completed(v, &newest)).await;
    let h = v["status"]["history"].as_array().unwrap();
    assert_eq!((h.len(), h[1]["version"].as_str(), h[1]["state"].as_str()), (2, Some("4.7.2"), Some("Completed")));
    assert_eq!(h[0]["acceptedRisks"], Value::Null, "a recommended update has no risks: {v}");
    assert_eq!(release_config_image(&admin, "worker").await, payload_of(&stable47, &newest));
    assert!(cond_is(&v, "ReleaseAccepted", "True", "PayloadLoaded"), "{v}");
    eventually(Duration::from_secs(30), "the query for the new release", || async {
        Ok(svc.queries().iter().any(|q| q.get("version") == Some(&newest)).then_some(()))
    })
    .await;

    // The update service fails: RetrievedUpdates says how, the last good lists stay.
    svc.answer("stable-4.7", 503, json!({"kind": "upstream_unavailable", "value": "graph builder restarting"}));
    let v =
        wait_cv(&admin, "RetrievedUpdates False", |v| cond_is(v, "RetrievedUpdates", "False", "ResponseFailed")).await;
    let m = condition(&v, "RetrievedUpdates").unwrap()["message"].as_str().unwrap().to_string();
    assert!(m.contains("HTTP 503") && m.contains("upstream_unavailable: graph builder restarting"), "{m}");
    let kept = versions(&v["status"]["availableUpdates"]);
    assert_eq!(kept, versions(&wait_cv(&admin, "", |_| true).await["status"]["availableUpdates"]));
    // Not JSON a graph: ResponseInvalid, naming what is wrong.
    svc.set("stable-4.7", json!({"version": 1, "nodes": [{"version": "4.7.2", "payload": "p"}], "edges": [[0, 7]]}));
    let v = wait_cv(&admin, "ResponseInvalid", |v| cond_is(v, "RetrievedUpdates", "False", "ResponseInvalid")).await;
    assert!(condition(&v, "RetrievedUpdates").unwrap()["message"].as_str().unwrap().contains("edges[0]"), "{v}");

    // Another channel, one the release is in (its graph node lists it): fetched at once.
    svc.set("stable-4.8", real_graph("stable-4.8_amd64_v1.json"));
    // Not a channel of the current release: refused (exit 2), as `oc adm upgrade channel`
    // refuses it, and nothing changes.
    let (code, _, err) = aloftctl(&c, &["adm", "upgrade", "channel", "stable-4.9"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("\"stable-4.9\" is not one of the available channels") && err.contains("stable-4.8"), "{err}");
    assert_eq!(cv(&admin).await["spec"]["channel"], "stable-4.7");
    let (code, out, err) = aloftctl(&c, &["adm", "upgrade", "channel", "stable-4.8"]);
    assert!(code == 0 && out.contains("Changed the channel from \"stable-4.7\" to \"stable-4.8\""), "{out}{err}");
    let v = wait_cv(&admin, "the new channel retrieved", |v| {
        svc.queries().last().is_some_and(|q| q["channel"] == "stable-4.8")
            && condition(v, "RetrievedUpdates").is_some_and(|c| c["reason"] != "ResponseInvalid")
    })
    .await;
    let in48 = offered(&real_graph("stable-4.8_amd64_v1.json"), &newest);
    assert!(cond_is(&v, "RetrievedUpdates", "True", ""), "{newest} is in stable-4.8: {v}");
    assert_eq!(versions(&v["status"]["availableUpdates"]), in48.0);
}

fn semver(v: &str) -> Vec<u64> {
    v.split('.').map(|p| p.parse().unwrap_or(0)).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_is_checked_before_it_is_taken() {
    let c = start_coordinator();
    let admin = c.client();
    let svc = UpdateService::start().await;
    let p = |n: u8| os_payload(&format!("{n}").repeat(64));
    svc.set(
        "stable-1",
        graph(
            &[("1.0.0", &p(1)), ("1.1.0", &p(2)), ("1.2.0", &p(3))],
            &[("1.0.0", "1.1.0")],
            &[("1.0.0", "1.2.0", "DataLoss", "Nodes may lose /var on the first boot.")],
        ),
    );

    // What the controller could not use is refused, naming the field; nothing is stored.
    let bad = [
        (json!({"metadata": {"name": "cluster"}}), "metadata.name"),
        (json!({"spec": {"channel": "Stable-1"}}), "spec.channel"),
        (json!({"spec": {"clusterID": "not-a-uuid"}}), "spec.clusterID"),
        (json!({"spec": {"upstream": "ftp://updates.example/graph"}}), "spec.upstream"),
        (json!({"spec": {"desiredUpdate": {}}}), "spec.desiredUpdate"),
        (json!({"spec": {"desiredUpdate": {"version": "four"}}}), "spec.desiredUpdate.version"),
        (json!({"spec": {"desiredUpdate": {"image": "quay.io/ocp/release@sha256:abc"}}}), "spec.desiredUpdate.image"),
    ];
    for (patch, field) in bad {
        let mut obj = cluster_version(json!({}));
        merge(&mut obj, &patch);
        // Strict, as kubectl asks: an unknown field (overrides, which aloft does not read) too.
        let strict = format!("{}?fieldValidation=Strict", path_of(&CLUSTER_VERSION, None));
        let r = admin.post(&strict, &obj).await.unwrap();
        assert_eq!(r.code, 422, "{field}: {}", r.body);
        assert!(cause_fields(&r.body).iter().any(|f| f == field), "{field}: {}", r.body);
    }
    // A field aloft does not read (OpenShift's overrides) is refused under Strict, as
    // kube-apiserver refuses an unknown field (400), rather than ignored.
    let mut obj = cluster_version(json!({}));
    obj["spec"]["overrides"] = json!([]);
    let r = admin.post(&format!("{}?fieldValidation=Strict", path_of(&CLUSTER_VERSION, None)), &obj).await.unwrap();
    assert!(
        r.code == 400 && r.body["message"].as_str().unwrap().contains("unknown field \"spec.overrides\""),
        "{}",
        r.body
    );
    assert_eq!(list_names(&admin, &CLUSTER_VERSION).await, Vec::<String>::new());

    worker_pool(&admin).await;
    let spec = json!({"upstream": svc.url, "channel": "stable-1", "desiredUpdate": {"version": "1.0.0"}});
    admin.post(&path_of(&CLUSTER_VERSION, None), &cluster_version(spec)).await.unwrap().into_result().unwrap();
    let v = wait_cv(&admin, "1.0.0 completed", |v| completed(v, "1.0.0") && cond_is(v, "RetrievedUpdates", "True", ""))
        .await;
    assert_eq!(versions(&v["status"]["availableUpdates"]), ["1.1.0"]);
    let rec = &v["status"]["conditionalUpdates"][0]["conditions"][0];
    assert_eq!((rec["status"].as_str(), rec["reason"].as_str()), (Some("False"), Some("DataLoss")), "{v}");
    assert_eq!(rec["message"], "Nodes may lose /var on the first boot. https://bugs.example/DataLoss");
    let path = path_of(&CLUSTER_VERSION, Some("version"));
    let ask = |update: Value| {
        let admin = admin.clone();
        let path = path.clone();
        async move {
            // Nulls take out what an earlier request set and this one does not name.
            let mut all = json!({"version": null, "image": null, "force": null});
            merge(&mut all, &update);
            let patch = json!({"spec": {"desiredUpdate": all}});
            admin.patch(&path, "application/merge-patch+json", &patch).await.unwrap().into_result().unwrap();
        }
    };
    let refused = |reason: &'static str| move |v: &Value| cond_is(v, "ReleaseAccepted", "False", reason);

    // A version alone that is no available update (nor in the history): the CVO's Invalid, the
    // request ignored, what runs still loaded.
    ask(json!({"version": "1.5.0"})).await;
    let v = wait_cv(&admin, "1.5.0 invalid", |v| cond_is(v, "Invalid", "True", "InvalidClusterVersion")).await;
    let invalid = condition(&v, "Invalid").and_then(|c| c["message"].as_str()).unwrap_or("").to_string();
    assert!(
        invalid.contains("when image is empty the update must be a previous version or an available update")
            && invalid.contains("--allow-explicit-upgrade"),
        "{v}"
    );
    assert_eq!(v["status"]["desired"]["version"], "1.0.0", "nothing taken");
    // The conditional 1.2.0 by version alone: invalid too, saying how to take it knowingly.
    ask(json!({"version": "1.2.0"})).await;
    let v = wait_cv(&admin, "1.2.0 invalid", |v| {
        condition(v, "Invalid")
            .is_some_and(|c| c["message"].as_str().unwrap_or("").contains("1.2.0 is a conditional update"))
    })
    .await;
    assert_eq!(v["status"]["desired"]["version"], "1.0.0", "nothing taken");
    // An image the graph gives another version.
    ask(json!({"version": "1.1.0", "image": p(3)})).await;
    let v = wait_cv(&admin, "a version and image that disagree", refused("VerifyPayloadVersion")).await;
    assert!(accepted_message(&v).contains("the update graph says that image is release 1.2.0"), "{v}");
    // A hop over a minor release, off the graph: the precondition fails...
    ask(json!({"version": "1.3.0", "image": p(4)})).await;
    let v = wait_cv(&admin, "GiantHop refused", refused("PreconditionChecks")).await;
    assert!(accepted_message(&v).contains("GiantHop: 1.0.0 to 1.3.0"), "{v}");
    assert_eq!(v["status"]["desired"]["version"], "1.0.0", "nothing taken");
    assert_eq!(release_config_image(&admin, "worker").await, p(1), "nothing written");
    // Reverted to the release that runs: the refusal is lifted, and Invalid is gone.
    ask(json!({"version": "1.0.0"})).await;
    let v = wait_cv(&admin, "the refusal lifted", |v| cond_is(v, "ReleaseAccepted", "True", "PayloadLoaded")).await;
    assert!(accepted_message(&v).contains("version=\"1.0.0\""), "{v}");
    assert!(condition(&v, "Invalid").is_none(), "{v}");
    // ... and `force` takes it, keeping what it overrode.
    ask(json!({"version": "1.3.0", "image": p(4), "force": true})).await;
    let v = wait_cv(&admin, "1.3.0 completed", |v| completed(v, "1.3.0")).await;
    let risks = v["status"]["history"][0]["acceptedRisks"].as_str().unwrap();
    assert!(
        risks.contains("GiantHop") && risks.contains("RecommendedUpdate: 1.3.0 is not a recommended update"),
        "{risks}"
    );
    assert_eq!(release_config_image(&admin, "worker").await, p(4));
    // 1.3.0 is not in the graph: VersionNotFound, and no updates offered.
    let v = wait_cv(&admin, "VersionNotFound", |v| cond_is(v, "RetrievedUpdates", "False", "VersionNotFound")).await;
    assert_eq!(versions(&v["status"]["availableUpdates"]), Vec::<String>::new());
    // Back to 1.0.0: a rollback across minors is refused.
    ask(json!({"version": "1.0.0"})).await;
    let v = wait_cv(&admin, "Rollback refused", refused("PreconditionChecks")).await;
    assert!(accepted_message(&v).contains("Rollback: release 1.0.0 is older than 1.3.0"), "{v}");
    assert_eq!(v["status"]["desired"]["version"], "1.3.0");
    // aloftctl asks anew: the last request's force is not carried into this one.
    let (code, out, err) =
        aloftctl(&c, &["adm", "upgrade", "--to-image", &p(2), "--to", "1.1.0", "--allow-explicit-upgrade"]);
    assert_eq!(code, 0, "{out}{err}");
    let v = wait_cv(&admin, "1.1.0 refused", |v| {
        condition(v, "ReleaseAccepted").is_some_and(|c| c["message"].as_str().unwrap_or("").contains("1.1.0 is older"))
    })
    .await;
    assert_eq!(v["spec"]["desiredUpdate"], json!({"version": "1.1.0", "image": p(2)}));
    let (code, _, err) = aloftctl(&c, &["adm", "upgrade", "--to-image", &p(2)]);
    assert!(code == 2 && err.contains("add --allow-explicit-upgrade"), "{err}");

    // `kubectl get clusterversion`'s columns, from aloftctl.
    let (code, out, err) = aloftctl(&c, &["get", "clusterversion"]);
    assert_eq!(code, 0, "{err}");
    let row = out.lines().nth(1).unwrap_or("");
    assert!(out.starts_with("NAME") && out.contains("VERSION") && out.contains("PROGRESSING"), "{out}");
    assert!(row.starts_with("version") && row.contains("1.3.0") && row.contains("Cluster version is 1.3.0"), "{out}");
}

/// The ReleaseAccepted condition's message.
fn accepted_message(v: &Value) -> String {
    condition(v, "ReleaseAccepted").and_then(|c| c["message"].as_str()).unwrap_or("").to_string()
}

fn merge(into: &mut Value, patch: &Value) {
    match (into, patch) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, v) in b {
                merge(a.entry(k.clone()).or_insert(Value::Null), v);
            }
        }
        (slot, v) => *slot = v.clone(),
    }
}

/// The graph is asked for the architecture the fleet's Nodes report, not the coordinator's own
/// (an amd64 server may run the coordinator of arm64 hosts: its own would offer them releases
/// they cannot boot); a fleet of two architectures gets no graph, saying which nodes differ.
/// Only Nodes that take the release count, and a node's credential cannot change the
/// architecture it reported: one node must not be able to hold the whole fleet's graph back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_graph_is_asked_for_the_fleets_architecture() {
    let c = start_coordinator();
    let admin = c.client();
    let svc = UpdateService::start().await;
    let p = |n: u8| os_payload(&format!("{n}").repeat(64));
    svc.set("stable-1", graph(&[("1.0.0", &p(1)), ("1.1.0", &p(2))], &[("1.0.0", "1.1.0")], &[]));
    worker_pool(&admin).await;
    let report_arch = |node: &Client, name: &'static str, arch: &'static str| {
        let node = node.clone();
        async move {
            let patch = json!({"status": {"nodeInfo": {"architecture": arch}}});
            let path = format!("/api/v1/nodes/{name}/status");
            node.patch(&path, "application/merge-patch+json", &patch).await.unwrap()
        }
    };
    let worker = json!({"node-role.kubernetes.io/worker": ""});
    let edge1 = c.node_client("edge-1", worker.clone()).await;
    report_arch(&edge1, "edge-1", "arm64").await.into_result().unwrap();
    // A node in no pool gets no release: its architecture is not the fleet's.
    let stray = c.node_client("stray", json!({})).await;
    report_arch(&stray, "stray", "amd64").await.into_result().unwrap();
    let spec = json!({"upstream": svc.url, "channel": "stable-1", "desiredUpdate": {"version": "1.0.0"}});
    admin.post(&path_of(&CLUSTER_VERSION, None), &cluster_version(spec)).await.unwrap().into_result().unwrap();
    let v = wait_cv(&admin, "the graph retrieved", |v| cond_is(v, "RetrievedUpdates", "True", "")).await;
    assert_eq!(versions(&v["status"]["availableUpdates"]), ["1.1.0"]);
    let archs: Vec<String> = svc.queries().iter().map(|q| q["arch"].clone()).collect();
    assert!(!archs.is_empty() && archs.iter().all(|a| a == "arm64"), "asked for {archs:?}");

    // A node's credential may not change the architecture it reported, nor report one that is
    // no architecture's name: the rest of its write stands (an agent's Ready report carries its
    // nodeInfo), the architecture does not, and the coordinator says so.
    let kept = report_arch(&edge1, "edge-1", "amd64").await.into_result().unwrap();
    assert_eq!(kept["status"]["nodeInfo"]["architecture"], "arm64", "{kept}");
    let made_up = c.node_client("edge-3", worker.clone()).await;
    let dropped = report_arch(&made_up, "edge-3", "quantum").await.into_result().unwrap();
    assert_eq!(dropped["status"]["nodeInfo"].get("architecture"), None, "{dropped}");
    let logged = c.log_lines_with("a node's reported architecture was not taken");
    assert!(
        logged.iter().any(|l| l.contains("edge-1") && l.contains("stays"))
            && logged.iter().any(|l| l.contains("edge-3") && l.contains("Go's architecture names")),
        "{logged:?}"
    );
    let node = get_ok(&admin, &NODE, "edge-1").await;
    assert_eq!(node["status"]["nodeInfo"]["architecture"], "arm64");
    // The writer hears it too: an HTTP Warning on its response, as kubectl prints them.
    let http = c.http_client();
    let boot = c.create_token("boot-edge-4", "bootstrap:node-role.kubernetes.io/worker=");
    let enrolled: Value = http
        .post(format!("{}/aloft/v1/enroll", c.url()))
        .bearer_auth(&boot)
        .json(&json!({"nodeName": "edge-4", "labels": {"node-role.kubernetes.io/worker": ""}}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let node_token = enrolled["token"].as_str().expect("a node token").to_string();
    let report = |arch: &'static str| {
        let (http, url, token) = (http.clone(), format!("{}/api/v1/nodes/edge-4/status", c.url()), node_token.clone());
        async move {
            let r = http
                .patch(url)
                .bearer_auth(token)
                .header("content-type", "application/merge-patch+json")
                .body(json!({"status": {"nodeInfo": {"architecture": arch}}}).to_string())
                .send()
                .await
                .unwrap();
            let warning = r.headers().get("warning").map(|w| w.to_str().unwrap_or_default().to_string());
            (r.status().as_u16(), warning)
        }
    };
    assert_eq!(report("arm64").await, (200, None), "the first report");
    let (code, warning) = report("s390x").await;
    assert_eq!(code, 200);
    assert!(
        warning.as_deref().is_some_and(|w| w.starts_with("299 ") && w.contains("status.nodeInfo.architecture stays")),
        "{warning:?}"
    );

    // A node of another architecture that does take the release: no graph fits the fleet
    // (one OS commit per release), and the message names the nodes.
    let edge2 = c.node_client("edge-2", worker.clone()).await;
    report_arch(&edge2, "edge-2", "amd64").await.into_result().unwrap();
    let v =
        wait_cv(&admin, "MultipleArchitectures", |v| cond_is(v, "RetrievedUpdates", "False", "MultipleArchitectures"))
            .await;
    let message = condition(&v, "RetrievedUpdates").and_then(|c| c["message"].as_str()).unwrap_or("").to_string();
    assert!(message.contains("(1 amd64: edge-2; 2 arm64)"), "the few named, the many counted: {message}");
    assert_eq!(versions(&v["status"]["availableUpdates"]), Vec::<String>::new(), "no other architecture's lists");

    // Replaced by an arm64 host under the same name (its Node's credential revoked, enrolled
    // again): the new host reports its own architecture, and the fleet has one again.
    c.revoke_token("node:edge-2");
    let edge2 = c.node_client("edge-2", worker.clone()).await;
    let node = get_ok(&admin, &NODE, "edge-2").await;
    assert_eq!(node["status"]["nodeInfo"].get("architecture"), None, "enrolling again clears it: {node}");
    report_arch(&edge2, "edge-2", "arm64").await.into_result().unwrap();
    let v = wait_cv(&admin, "the graph retrieved again", |v| cond_is(v, "RetrievedUpdates", "True", "")).await;
    assert_eq!(versions(&v["status"]["availableUpdates"]), ["1.1.0"]);
}

/// With `--release-keyring`, a release is taken only when its OS commit is signed by a key of
/// the keyring, as the CVO verifies a payload before it takes it: the coordinator fetches the
/// commit (checked against its checksum) and its detached signatures from the release's
/// repository. Real commits signed by `ostree commit --gpg-sign`, served on loopback. An
/// unsigned release and one signed by another key are refused, saying why, and nothing moves;
/// `force` takes one anyway, recording the risk; a keyring that does not read stops the start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_is_verified_against_the_keyring_before_it_is_taken() {
    use aloft_osd::testkit::{self, GpgKey, ServerRepo, StaticServer, REF};
    let work = tempfile::tempdir().unwrap();
    let trusted = GpgKey::generate(work.path(), "release").unwrap();
    let stranger = GpgKey::generate(work.path(), "stranger").unwrap();
    let repo = ServerRepo::create(&work.path().join("srv/repo")).unwrap();
    let http = StaticServer::start(&work.path().join("srv")).unwrap();
    // A commit of `branch`, named as a release of REF.
    let commit_on = |branch: &str, v: &str, key: Option<&GpgKey>| {
        let tree = work.path().join(format!("tree-{v}"));
        testkit::write_tree(&tree, v, 2).unwrap();
        let sum = repo.commit(&tree, branch, v, key).unwrap();
        format!("ostree+{}#{REF}@{sum}", http.url("repo"))
    };
    let commit = |v: &str, key: Option<&GpgKey>| commit_on(REF, v, key);
    let (signed, unsigned, foreign, signed2) =
        (commit("1", Some(&trusted)), commit("2", None), commit("3", Some(&stranger)), commit("4", Some(&trusted)));

    // A keyring that does not read: the coordinator does not start, naming the flag.
    let junk = work.path().join("junk.gpg");
    std::fs::write(&junk, b"not a key").unwrap();
    let out = std::process::Command::new(bin("aloft-coordinator"))
        .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(work.path().join("never"))
        .arg("--release-keyring")
        .arg(&junk)
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && said.contains("--release-keyring: the keyring"), "{said}");
    let out = std::process::Command::new(bin("aloft-coordinator"))
        .args(["serve", "--listen", "127.0.0.1:0", "--update-poll-interval", "0s", "--data-dir"])
        .arg(work.path().join("never"))
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && said.contains("--update-poll-interval 0s is too short"), "{said}");

    let keyring = trusted.keyring.to_string_lossy().into_owned();
    let c = Coordinator::start_with(Options {
        args: vec!["--update-poll-interval".into(), "3s".into(), "--release-keyring".into(), keyring.clone()],
        ..Default::default()
    });
    let admin = c.client();
    let svc = UpdateService::start().await;
    let releases = [
        ("1.0.0", signed.as_str()),
        ("1.1.0", unsigned.as_str()),
        ("1.2.0", foreign.as_str()),
        ("1.3.0", signed2.as_str()),
    ];
    let edges = [("1.0.0", "1.1.0"), ("1.0.0", "1.2.0"), ("1.0.0", "1.3.0")];
    svc.set("stable-1", graph(&releases, &edges, &[]));
    let spec = json!({"upstream": svc.url, "channel": "stable-1", "desiredUpdate": {"version": "1.0.0"}});
    admin.post(&path_of(&CLUSTER_VERSION, None), &cluster_version(spec)).await.unwrap().into_result().unwrap();
    let v = wait_cv(&admin, "1.0.0 taken", |v| v["status"]["desired"]["version"] == "1.0.0").await;
    assert_eq!(v["status"]["history"][0]["verified"], true, "{}", v["status"]["history"]);
    let cv_path = path_of(&CLUSTER_VERSION, Some("version"));
    let ask = |version: &str, force: bool| json!({"spec": {"desiredUpdate": {"version": version, "force": force}}});

    // Unsigned: refused, the reason the CVO gives, 1.0.0 still the release.
    admin.patch(&cv_path, "application/merge-patch+json", &ask("1.1.0", false)).await.unwrap().into_result().unwrap();
    let v = wait_cv(&admin, "1.1.0 refused", |v| cond_is(v, "ReleaseAccepted", "False", "RetrievePayload")).await;
    let message = condition(&v, "ReleaseAccepted").and_then(|c| c["message"].as_str()).unwrap_or("").to_string();
    assert!(message.contains("The update cannot be verified") && message.contains("has no signatures"), "{message}");
    assert_eq!(v["status"]["desired"]["version"], "1.0.0");
    assert_eq!(v["status"]["history"].as_array().map(Vec::len), Some(1));

    // Signed, by a key the keyring does not hold: refused, naming who signed it.
    admin.patch(&cv_path, "application/merge-patch+json", &ask("1.2.0", false)).await.unwrap().into_result().unwrap();
    let v = wait_cv(&admin, "1.2.0 refused", |v| {
        cond_is(v, "ReleaseAccepted", "False", "RetrievePayload")
            && condition(v, "ReleaseAccepted").and_then(|c| c["message"].as_str()).is_some_and(|m| m.contains("1.2.0"))
    })
    .await;
    let message = condition(&v, "ReleaseAccepted").and_then(|c| c["message"].as_str()).unwrap_or("").to_string();
    assert!(message.contains("none by a key of") && message.contains(&keyring), "{message}");
    assert!(message.contains(&stranger.key_id[stranger.key_id.len() - 16..]), "names the signer: {message}");
    assert_eq!(v["status"]["desired"]["version"], "1.0.0");

    // Forced: taken unverified, the failure among its accepted risks.
    admin.patch(&cv_path, "application/merge-patch+json", &ask("1.1.0", true)).await.unwrap().into_result().unwrap();
    let v = wait_cv(&admin, "1.1.0 forced", |v| v["status"]["desired"]["version"] == "1.1.0").await;
    let h = &v["status"]["history"][0];
    assert_eq!((h["version"].as_str(), h["verified"].as_bool()), (Some("1.1.0"), Some(false)), "{h}");
    assert!(h["acceptedRisks"].as_str().unwrap_or("").contains("The update cannot be verified"), "{h}");
    drop(c);

    // Keys as they come: the trusted key gets a signing subkey (which then signs, as most keys
    // do), the stranger certifies it, and the keyring is both keys armored one block after the
    // other, named by the environment as a systemd drop-in would. A commit of another ref
    // named as a release of this one is refused.
    gpg(&trusted.home, &["--quick-add-key", &trusted.key_id, "ed25519", "sign", "never"]);
    let by_subkey = commit("5", Some(&trusted));
    let other_ref = commit_on("aloft/other/x86_64", "6", Some(&trusted));
    let trusted_asc = work.path().join("trusted.asc");
    std::fs::write(&trusted_asc, gpg(&trusted.home, &["--export", "--armor", &trusted.key_id])).unwrap();
    gpg(&stranger.home, &["--import", &trusted_asc.to_string_lossy()]);
    gpg(&stranger.home, &["--quick-sign-key", &trusted.key_id]);
    let mut armored_keys = gpg(&stranger.home, &["--export", "--armor", &stranger.key_id]);
    armored_keys.extend(gpg(&stranger.home, &["--export", "--armor", &trusted.key_id]));
    let armored = work.path().join("keys.asc");
    std::fs::write(&armored, &armored_keys).unwrap();
    let releases = [("1.4.0", by_subkey.as_str()), ("1.4.1", foreign.as_str()), ("1.4.2", other_ref.as_str())];
    svc.set("stable-1", graph(&releases, &[("1.4.0", "1.4.1"), ("1.4.1", "1.4.2")], &[]));
    let c = Coordinator::start_with(Options {
        args: vec!["--update-poll-interval".into(), "3s".into()],
        env: vec![("ALOFT_RELEASE_KEYRING".into(), armored.to_string_lossy().into_owned())],
        ..Default::default()
    });
    let admin = c.client();
    let spec = json!({"upstream": svc.url, "channel": "stable-1", "desiredUpdate": {"version": "1.4.0"}});
    admin.post(&path_of(&CLUSTER_VERSION, None), &cluster_version(spec)).await.unwrap().into_result().unwrap();
    let v = wait_cv(&admin, "1.4.0 taken", |v| v["status"]["desired"]["version"] == "1.4.0").await;
    assert_eq!(v["status"]["history"][0]["verified"], true, "{}", v["status"]["history"]);
    let signers = c.log_lines_with("release verified");
    assert!(
        signers.iter().any(|l| l.contains("signer=") && !l.contains(&trusted.key_id)),
        "signed by the subkey, not the primary key: {signers:?}"
    );
    // The stranger's key is in this keyring: its release is verified too.
    admin.patch(&cv_path, "application/merge-patch+json", &ask("1.4.1", false)).await.unwrap().into_result().unwrap();
    let v = wait_cv(&admin, "1.4.1 taken", |v| v["status"]["desired"]["version"] == "1.4.1").await;
    assert_eq!(v["status"]["history"][0]["verified"], true, "{}", v["status"]["history"]);
    // Another ref's commit, signed by a trusted key: refused, naming the ref it is bound to.
    admin.patch(&cv_path, "application/merge-patch+json", &ask("1.4.2", true)).await.unwrap().into_result().unwrap();
    let v = wait_cv(&admin, "1.4.2 forced", |v| v["status"]["desired"]["version"] == "1.4.2").await;
    let h = &v["status"]["history"][0];
    assert_eq!(h["verified"], false, "{h}");
    assert!(h["acceptedRisks"].as_str().unwrap_or("").contains("is bound to ref aloft/other/x86_64, not"), "{h}");
}

/// `gpg ARGS` in the key store `home`, unattended; its output.
fn gpg(home: &std::path::Path, args: &[&str]) -> Vec<u8> {
    let out = std::process::Command::new("gpg")
        .env("GNUPGHOME", home)
        .args(["--batch", "--yes", "--quiet", "--pinentry-mode", "loopback", "--passphrase", ""])
        .args(args)
        .output()
        .unwrap();
    assert!(out.status.success(), "gpg {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    out.stdout
}

/// A key made in the past (gpg's `faked-system-time`, 2024-01-01, written in its gpg.conf with
/// `extra`, so `ostree commit --gpg-sign` signs as of then), expiring after `expire`.
fn key_made_in_2024(dir: &std::path::Path, name: &str, expire: &str, extra: &str) -> aloft_osd::testkit::GpgKey {
    let home = dir.join(format!("gnupg-{name}"));
    std::fs::create_dir_all(&home).unwrap();
    std::fs::set_permissions(&home, std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
    std::fs::write(home.join("gpg.conf"), format!("faked-system-time 20240101T000000!\n{extra}")).unwrap();
    let gpg = |args: &[&str]| gpg(&home, args);
    gpg(&["--quick-gen-key", &format!("aloft test {name} <{name}@aloft.invalid>"), "ed25519", "sign", expire]);
    let listing = String::from_utf8(gpg(&["--with-colons", "--list-secret-keys"])).unwrap();
    let key_id = listing.lines().find_map(|l| l.strip_prefix("fpr:").map(|r| r.trim_matches(':').to_string())).unwrap();
    let keyring = dir.join(format!("{name}.gpg"));
    std::fs::write(&keyring, gpg(&["--export", &key_id])).unwrap();
    aloft_osd::testkit::GpgKey { home, key_id, keyring }
}

/// Expiry, as libostree's pull checks it (the agents would refuse these commits at the first
/// canary: "Key expired", "Signature expired"): a commit signed in 2024 by a key that expired at
/// the end of 2024, or with a signature that expired the next day, is refused before any node
/// drains; signed then by a key that never expires, or whose owner extended its expiry since
/// (the newest self-signature counts), it is taken.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_keys_and_signatures_are_refused_as_the_nodes_would() {
    use aloft_osd::testkit::{self, ServerRepo, StaticServer, REF};
    let work = tempfile::tempdir().unwrap();
    let lasting = key_made_in_2024(work.path(), "lasting", "never", "");
    let expired = key_made_in_2024(work.path(), "expired", "1y", "");
    let short_sig = key_made_in_2024(work.path(), "shortsig", "never", "default-sig-expire 1d\n");
    let extended = key_made_in_2024(work.path(), "extended", "1y", "");
    // A primary key that never expires with a signing subkey that expired at the end of 2024
    // (gpg signs with the subkey): the subkey's binding says so.
    let sub_expired = key_made_in_2024(work.path(), "subexpired", "never", "");
    gpg(&sub_expired.home, &["--quick-add-key", &sub_expired.key_id, "ed25519", "sign", "1y"]);
    let listing = String::from_utf8(gpg(&sub_expired.home, &["--with-colons", "--list-keys"])).unwrap();
    let subkey = listing.lines().filter_map(|l| l.strip_prefix("fpr:")).nth(1).unwrap().trim_matches(':').to_string();
    let repo = ServerRepo::create(&work.path().join("srv/repo")).unwrap();
    let http = StaticServer::start(&work.path().join("srv")).unwrap();
    let commit = |v: &str, key: &testkit::GpgKey| {
        let tree = work.path().join(format!("tree-{v}"));
        testkit::write_tree(&tree, v, 2).unwrap();
        let sum = repo.commit(&tree, REF, v, Some(key)).unwrap();
        format!("ostree+{}#{REF}@{sum}", http.url("repo"))
    };
    let (c1, c2, c3, c4) =
        (commit("1", &lasting), commit("2", &expired), commit("3", &short_sig), commit("4", &extended));
    let c5 = commit("5", &sub_expired);
    // The owner of `extended` moves its expiry out, today (no faked time): its newest
    // self-signature has the new expiry.
    std::fs::write(extended.home.join("gpg.conf"), "").unwrap();
    gpg(&extended.home, &["--quick-set-expire", &extended.key_id, "10y"]);
    let mut keyring = gpg(&extended.home, &["--export", &extended.key_id]);
    for k in [&lasting, &expired, &short_sig] {
        keyring.extend(std::fs::read(&k.keyring).unwrap());
    }
    keyring.extend(gpg(&sub_expired.home, &["--export", &sub_expired.key_id]));
    let keyring_path = work.path().join("keyring.gpg");
    std::fs::write(&keyring_path, keyring).unwrap();

    let c = Coordinator::start_with(Options {
        args: vec![
            "--update-poll-interval".into(),
            "3s".into(),
            "--release-keyring".into(),
            keyring_path.to_string_lossy().into_owned(),
        ],
        ..Default::default()
    });
    let admin = c.client();
    let svc = UpdateService::start().await;
    let releases = [
        ("1.0.0", c1.as_str()),
        ("1.0.1", c2.as_str()),
        ("1.0.2", c3.as_str()),
        ("1.0.3", c4.as_str()),
        ("1.0.4", c5.as_str()),
    ];
    let edges = [("1.0.0", "1.0.1"), ("1.0.0", "1.0.2"), ("1.0.0", "1.0.3"), ("1.0.0", "1.0.4")];
    svc.set("stable-1", graph(&releases, &edges, &[]));
    let spec = json!({"upstream": svc.url, "channel": "stable-1", "desiredUpdate": {"version": "1.0.0"}});
    admin.post(&path_of(&CLUSTER_VERSION, None), &cluster_version(spec)).await.unwrap().into_result().unwrap();
    let v = wait_cv(&admin, "1.0.0 taken", |v| v["status"]["desired"]["version"] == "1.0.0").await;
    assert_eq!(
        v["status"]["history"][0]["verified"], true,
        "signed in 2024 by a key that lasts: {}",
        v["status"]["history"]
    );

    let cv_path = path_of(&CLUSTER_VERSION, Some("version"));
    for (version, says) in [
        ("1.0.1", format!("key {} expired on 2024-12-31T00:00:00Z", expired.key_id)),
        ("1.0.2", format!("the signature by {} expired on 2024-01-02T00:00:00Z", short_sig.key_id)),
        ("1.0.4", format!("key {subkey} expired on 2024-12-31T00:00:00Z")),
    ] {
        let ask = json!({"spec": {"desiredUpdate": {"version": version}}});
        admin.patch(&cv_path, "application/merge-patch+json", &ask).await.unwrap().into_result().unwrap();
        let v = wait_cv(&admin, &format!("{version} refused"), |v| {
            cond_is(v, "ReleaseAccepted", "False", "RetrievePayload") && accepted_message(v).contains(version)
        })
        .await;
        let m = accepted_message(&v);
        assert!(
            m.contains("The update cannot be verified") && m.contains("signed only by expired keys or signatures"),
            "{m}"
        );
        assert!(m.contains(&says), "{m} should say {says}");
        assert_eq!(v["status"]["desired"]["version"], "1.0.0");
    }
    let ask = json!({"spec": {"desiredUpdate": {"version": "1.0.3"}}});
    admin.patch(&cv_path, "application/merge-patch+json", &ask).await.unwrap().into_result().unwrap();
    let v = wait_cv(&admin, "1.0.3 taken", |v| v["status"]["desired"]["version"] == "1.0.3").await;
    assert_eq!(v["status"]["history"][0]["verified"], true, "the expiry was extended: {}", v["status"]["history"]);
}

/// A signing key and an archive repository served on loopback, for the verification tests.
struct SignedRepo {
    work: tempfile::TempDir,
    key: aloft_osd::testkit::GpgKey,
    repo: aloft_osd::testkit::ServerRepo,
    http: aloft_osd::testkit::StaticServer,
}

impl SignedRepo {
    fn new() -> SignedRepo {
        use aloft_osd::testkit::{GpgKey, ServerRepo, StaticServer};
        let work = tempfile::tempdir().unwrap();
        let key = GpgKey::generate(work.path(), "release").unwrap();
        let repo = ServerRepo::create(&work.path().join("srv/repo")).unwrap();
        let http = StaticServer::start(&work.path().join("srv")).unwrap();
        SignedRepo { work, key, repo, http }
    }

    /// A commit of REF (signed by this repository's key when `signed`), as a release's payload.
    fn commit(&self, v: &str, signed: bool) -> String {
        use aloft_osd::testkit::{self, REF};
        let tree = self.work.path().join(format!("tree-{v}"));
        testkit::write_tree(&tree, v, 2).unwrap();
        let sum = self.repo.commit(&tree, REF, v, signed.then_some(&self.key)).unwrap();
        format!("ostree+{}#{REF}@{sum}", self.http.url("repo"))
    }
}

/// A release whose repository does not answer is verified apart from the controller's pass:
/// while the check waits on it (each read is given 10 s), the ClusterVersion goes on showing
/// what the graph offers, and the release is neither taken nor refused until the check ends,
/// refused then, naming the read that did not come back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_whose_repository_hangs_holds_nothing_else() {
    use aloft_osd::testkit::REF;
    let signed = SignedRepo::new();
    let first = signed.commit("1", true);
    // A repository that takes connections and never answers.
    let hung = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let hung_at = hung.local_addr().unwrap();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for conn in hung.incoming() {
            held.push(conn);
        }
    });
    let stuck = format!("ostree+http://{hung_at}/repo#{REF}@{}", "ab".repeat(32));
    let third = format!("ostree+http://{hung_at}/repo#{REF}@{}", "cd".repeat(32));

    let c = Coordinator::start_with(Options {
        args: vec![
            "--update-poll-interval".into(),
            "1s".into(),
            "--release-keyring".into(),
            signed.key.keyring.to_string_lossy().into_owned(),
        ],
        ..Default::default()
    });
    let admin = c.client();
    let svc = UpdateService::start().await;
    svc.set("stable-1", graph(&[("1.0.0", first.as_str()), ("1.0.1", stuck.as_str())], &[("1.0.0", "1.0.1")], &[]));
    let spec = json!({"upstream": svc.url, "channel": "stable-1", "desiredUpdate": {"version": "1.0.0"}});
    admin.post(&path_of(&CLUSTER_VERSION, None), &cluster_version(spec)).await.unwrap().into_result().unwrap();
    wait_cv(&admin, "1.0.0 taken", |v| completed(v, "1.0.0")).await;

    let cv_path = path_of(&CLUSTER_VERSION, Some("version"));
    let ask = json!({"spec": {"desiredUpdate": {"version": "1.0.1"}}});
    admin.patch(&cv_path, "application/merge-patch+json", &ask).await.unwrap().into_result().unwrap();
    // The graph changes meanwhile: the next passes show it, the check of 1.0.1 still waiting.
    svc.set(
        "stable-1",
        graph(
            &[("1.0.0", first.as_str()), ("1.0.1", stuck.as_str()), ("1.0.2", third.as_str())],
            &[("1.0.0", "1.0.1"), ("1.0.0", "1.0.2")],
            &[],
        ),
    );
    let v =
        wait_cv(&admin, "the new graph shown", |v| versions(&v["status"]["availableUpdates"]) == ["1.0.1", "1.0.2"])
            .await;
    // Neither taken nor refused, and said so, as the CVO shows a payload it is retrieving.
    assert!(cond_is(&v, "ReleaseAccepted", "Unknown", "RetrievePayload"), "{}", v["status"]["conditions"]);
    let waiting = format!("Retrieving and verifying payload version=\"1.0.1\" image={stuck:?}");
    assert_eq!(accepted_message(&v), waiting);
    assert_eq!(v["status"]["desired"]["version"], "1.0.0");
    assert_ne!(v["status"]["observedGeneration"], v["metadata"]["generation"], "observed before it was judged");
    let events = admin.get("/api/v1/events").await.unwrap().into_result().unwrap();
    let said: Vec<&Value> = events["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["reason"] == "RetrievePayload" && e["message"] == waiting.as_str())
        .collect();
    // One Event object for the wait, however many passes saw it (a pass whose status write
    // lost a race to the spec's patch says it again, counted on the same Event).
    assert_eq!(said.len(), 1, "one Event for the wait: {said:?}");
    let v = wait_cv(&admin, "1.0.1 refused once its check ends", |v| {
        cond_is(v, "ReleaseAccepted", "False", "RetrievePayload") && accepted_message(v).contains("1.0.1")
    })
    .await;
    let m = accepted_message(&v);
    assert!(m.contains("The update cannot be verified") && m.contains(&hung_at.to_string()), "{m}");
    assert_eq!(v["status"]["desired"]["version"], "1.0.0");

    // Asked for another release of that repository, then taken back while it is checked: the
    // condition says what is loaded again, not the wait.
    let ask = json!({"spec": {"desiredUpdate": {"version": "1.0.2"}}});
    admin.patch(&cv_path, "application/merge-patch+json", &ask).await.unwrap().into_result().unwrap();
    wait_cv(&admin, "1.0.2 being retrieved", |v| {
        cond_is(v, "ReleaseAccepted", "Unknown", "RetrievePayload") && accepted_message(v).contains("1.0.2")
    })
    .await;
    let back = json!({"spec": {"desiredUpdate": {"version": "1.0.0"}}});
    admin.patch(&cv_path, "application/merge-patch+json", &back).await.unwrap().into_result().unwrap();
    let v = wait_cv(&admin, "1.0.0 loaded again", |v| cond_is(v, "ReleaseAccepted", "True", "PayloadLoaded")).await;
    assert!(accepted_message(&v).starts_with("Payload loaded version=\"1.0.0\""), "{v}");
}

/// With no upstream or channel, a release asked for by image is verified as well, and judged:
/// taken when signed, refused when not, observedGeneration following each request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_asked_for_by_image_without_a_channel_is_verified_too() {
    let repo = SignedRepo::new();
    let (signed, unsigned) = (repo.commit("1", true), repo.commit("2", false));
    let c = Coordinator::start_with(Options {
        args: vec!["--release-keyring".into(), repo.key.keyring.to_string_lossy().into_owned()],
        ..Default::default()
    });
    let admin = c.client();
    let spec = json!({"desiredUpdate": {"version": "1.0.0", "image": signed}});
    admin.post(&path_of(&CLUSTER_VERSION, None), &cluster_version(spec)).await.unwrap().into_result().unwrap();
    let v = wait_cv(&admin, "1.0.0 taken", |v| v["status"]["desired"]["version"] == "1.0.0").await;
    assert_eq!(v["status"]["history"][0]["verified"], true, "{}", v["status"]["history"]);
    let cv_path = path_of(&CLUSTER_VERSION, Some("version"));
    let ask = json!({"spec": {"desiredUpdate": {"version": "1.0.1", "image": unsigned, "force": null}}});
    admin.patch(&cv_path, "application/merge-patch+json", &ask).await.unwrap().into_result().unwrap();
    let v = wait_cv(&admin, "1.0.1 refused, the request observed", |v| {
        cond_is(v, "ReleaseAccepted", "False", "RetrievePayload")
            && v["status"]["observedGeneration"] == v["metadata"]["generation"]
    })
    .await;
    assert!(accepted_message(&v).contains("has no signatures"), "{v}");
    assert_eq!(v["status"]["desired"]["version"], "1.0.0");
}

/// `spec.automaticUpdates` walks a real channel (OpenShift's stable-4.7 graph, where 4.7.2's
/// newest recommended update is the channel's last): once a release completes, the newest
/// recommended update newer than every release run is asked for and taken, until the graph
/// offers nothing newer, with an Event; then step after step on a graph made for it, past
/// conditional updates that look newer. A malformed setting is refused, naming the field.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn automatic_updates_walk_a_real_channel_to_its_newest_recommended_release() {
    let c = start_coordinator();
    let admin = c.client();
    let svc = UpdateService::start().await;
    let g = real_graph("stable-4.7_amd64_v1.json");
    svc.set("stable-4.7", g.clone());
    worker_pool(&admin).await;
    // What the graph says the walk is: from each release, the newest recommended destination.
    let mut chain = vec!["4.7.2".to_string()];
    loop {
        let (plain, _) = offered(&g, chain.last().unwrap());
        let newest_run = chain.iter().map(|v| semver(v)).max().unwrap();
        match plain.into_iter().filter(|v| semver(v) > newest_run).max_by_key(|v| semver(v)) {
            Some(next) => chain.push(next),
            None => break,
        }
    }
    assert!(chain.len() >= 2, "the data offers an update from 4.7.2: {chain:?}");
    let (_, conditional) = offered(&g, "4.7.2");

    // Malformed: refused, nothing stored.
    let bad = json!({"upstream": svc.url, "channel": "stable-4.7", "automaticUpdates": {"enabled": "yes"}});
    let r = admin.post(&path_of(&CLUSTER_VERSION, None), &cluster_version(bad)).await.unwrap();
    assert!(r.code == 422 || r.code == 400, "{} {}", r.code, r.body);
    assert!(r.body.to_string().contains("automaticUpdates"), "names the field: {}", r.body);

    let spec = json!({"upstream": svc.url, "channel": "stable-4.7", "desiredUpdate": {"version": "4.7.2"},
        "automaticUpdates": {"enabled": true}});
    admin.post(&path_of(&CLUSTER_VERSION, None), &cluster_version(spec)).await.unwrap().into_result().unwrap();
    let last = chain.last().unwrap().clone();
    let v = eventually(Duration::from_secs(120), "the walk to its end", || {
        let (admin, last) = (admin.clone(), last.clone());
        async move {
            let v = admin.get(&path_of(&CLUSTER_VERSION, Some("version"))).await?.into_result()?;
            Ok(completed(&v, &last).then_some(v))
        }
    })
    .await;
    let run: Vec<String> = v["status"]["history"]
        .as_array()
        .unwrap()
        .iter()
        .rev()
        .map(|h| h["version"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(run, chain, "the releases taken, oldest first");
    assert!(run.iter().all(|r| !conditional.contains(r)), "no conditional update taken: {run:?}");
    assert_eq!(v["spec"]["desiredUpdate"]["version"], last.as_str());
    assert_eq!(v["status"]["observedGeneration"], v["metadata"]["generation"]);
    // Nothing newer: it stays.
    tokio::time::sleep(Duration::from_secs(4)).await;
    let again = admin.get(&path_of(&CLUSTER_VERSION, Some("version"))).await.unwrap().into_result().unwrap();
    assert_eq!(again["status"]["history"].as_array().map(Vec::len), Some(chain.len()));
    let events = admin.get("/api/v1/events").await.unwrap().into_result().unwrap();
    let said: Vec<&str> = events["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["reason"] == "AutomaticUpdate")
        .filter_map(|e| e["message"].as_str())
        .collect();
    assert!(
        said.iter().any(|m| m.contains(&format!("4.7.2 completed; asking for {}", chain[1]))),
        "the first step's Event: {said:?}"
    );

    // Step after step on a graph made for it: 1.0.0 offers only 1.0.1; 1.0.1 offers 1.1.0 and,
    // conditionally (a risk that always applies), the newer-looking 1.0.9 and 1.1.5, which are
    // never taken. Each completed release asks for the next.
    let c = start_coordinator();
    let admin = c.client();
    worker_pool(&admin).await;
    let p = |n: u8| os_payload(&format!("{n}").repeat(64));
    let risky = [
        ("1.0.1", "1.0.9", "DataLoss", "Nodes may lose /var."),
        ("1.0.1", "1.1.5", "DataLoss", "Nodes may lose /var."),
    ];
    let releases = [("1.0.0", p(1)), ("1.0.1", p(2)), ("1.0.9", p(3)), ("1.1.0", p(4)), ("1.1.5", p(5))];
    let releases: Vec<(&str, &str)> = releases.iter().map(|(v, i)| (*v, i.as_str())).collect();
    svc.set("steps", graph(&releases, &[("1.0.0", "1.0.1"), ("1.0.1", "1.1.0")], &risky));
    let spec = json!({"upstream": svc.url, "channel": "steps", "desiredUpdate": {"version": "1.0.0"},
        "automaticUpdates": {"enabled": true}});
    admin.post(&path_of(&CLUSTER_VERSION, None), &cluster_version(spec)).await.unwrap().into_result().unwrap();
    let v = wait_cv(&admin, "1.1.0 completed", |v| completed(v, "1.1.0")).await;
    let run: Vec<&str> =
        v["status"]["history"].as_array().unwrap().iter().rev().filter_map(|h| h["version"].as_str()).collect();
    assert_eq!(run, ["1.0.0", "1.0.1", "1.1.0"], "two automatic steps, no conditional update");
    tokio::time::sleep(Duration::from_secs(4)).await;
    let again = admin.get(&path_of(&CLUSTER_VERSION, Some("version"))).await.unwrap().into_result().unwrap();
    assert_eq!(again["status"]["history"].as_array().map(Vec::len), Some(3), "nothing newer: it stays");
    let out = c.aloftctl(&["adm", "upgrade"]);
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(said.contains("Automatic updates: on (the newest recommended update newer than 1.1.0"), "{said}");
}
