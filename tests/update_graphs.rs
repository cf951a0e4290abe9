//! aloft's update service (`aloft-coordinator update-service`) as a process on loopback, read by
//! a real coordinator's ClusterVersion controller: graphs built from a graph-data directory in
//! OpenShift's schema and aloft's release files, the protocol's answers to good and bad
//! queries, reloads (by the clock and SIGHUP) that change what the fleet is offered, and a
//! graph-data that breaks while it runs, which changes nothing served. Also OpenShift's real
//! graph-data over the releases of a graph OpenShift's service served: the fleet is offered what
//! an OpenShift cluster was.

use aloft_coordinator::resources::CLUSTER_VERSION;
use aloft_tests::graph_service::{write, Service};
use aloft_tests::*;
use serde_json::{json, Value};
use std::process::Command;
use std::time::Duration;

fn payload(n: u32) -> String {
    format!("ostree+http://127.0.0.1:9/repo#aloft/stable/x86_64@{:064x}", n)
}

/// GET `url` with `accept` (if any): (status, Content-Type, body).
async fn get(url: &str, accept: Option<&str>) -> (u16, String, Value) {
    install_crypto();
    let mut req = reqwest::Client::new().get(url);
    if let Some(a) = accept {
        req = req.header("Accept", a);
    }
    let resp = req.send().await.unwrap();
    let status = resp.status().as_u16();
    let ctype = resp.headers().get("content-type").map(|v| v.to_str().unwrap().to_string()).unwrap_or_default();
    let text = resp.text().await.unwrap();
    (status, ctype, serde_json::from_str(&text).unwrap_or_else(|_| json!(text)))
}

fn versions(list: &Value) -> Vec<String> {
    let mut v: Vec<String> =
        list.as_array().into_iter().flatten().map(|r| r["version"].as_str().unwrap().to_string()).collect();
    v.sort();
    v
}

fn conditional_versions(cv: &Value) -> Vec<String> {
    versions(&json!(cv["status"]["conditionalUpdates"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| c["release"].clone())
        .collect::<Vec<_>>()))
}

async fn wait_cv(c: &Client, what: &str, ok: impl Fn(&Value) -> bool) -> Value {
    eventually(Duration::from_secs(60), what, || async {
        let v = c.get(&path_of(&CLUSTER_VERSION, Some("version"))).await?.into_result()?;
        Ok(ok(&v).then_some(v))
    })
    .await
}

fn completed(v: &Value, version: &str) -> bool {
    v.pointer("/status/history/0").is_some_and(|h| h["state"] == "Completed" && h["version"] == version)
}

async fn fleet_following(c: &Coordinator, upstream: &str, channel: &str, version: &str) -> Client {
    let admin = c.client();
    aloft_tests::update_service::worker_pool(&admin).await;
    let cv = json!({"apiVersion": "config.openshift.io/v1", "kind": "ClusterVersion", "metadata": {"name": "version"},
        "spec": {"upstream": upstream, "channel": channel, "desiredUpdate": {"version": version}}});
    admin.post(&path_of(&CLUSTER_VERSION, None), &cv).await.unwrap().into_result().unwrap();
    admin
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fleet_follows_the_channels_the_update_service_builds() {
    let gd = tempfile::tempdir().unwrap();
    let root = gd.path();
    write(root, "version", "1.1.0\n");
    write(root, "channels/stable-1.yaml", "name: stable-1\nversions: [1.0.0, 1.1.0, 1.2.0]\n");
    write(root, "channels/candidate-1.yaml", "name: candidate-1\nversions: [1.0.0, 1.1.0, 1.2.0, 1.3.0]\n");
    write(
        root,
        "releases/1.0.0.yaml",
        &format!("version: 1.0.0\npayload: {}\nmetadata: {{url: https://notes.example/1.0.0}}\n", payload(1)),
    );
    write(root, "releases/1.1.0.yaml", &format!("version: 1.1.0\npayload: {}\nprevious: [1.0.0]\n", payload(2)));
    write(root, "releases/1.2.0.yaml", &format!("version: 1.2.0\npayload: {}\nprevious: [1.0.0, 1.1.0]\n", payload(3)));
    write(root, "releases/1.3.0.yaml", &format!("version: 1.3.0\npayload: {}\nprevious: [1.2.0]\n", payload(4)));
    write(
        root,
        "blocked-edges/1.2.0-data-loss.yaml",
        "to: 1.2.0\nfrom: ^1[.]0[.]0[+]\nurl: https://bugs.example/1\nname: DataLoss\nmessage: Nodes may lose /var.\nmatchingRules:\n- type: Always\n",
    );

    // --check prints what each channel holds.
    let out = Command::new(bin("aloft-coordinator"))
        .args(["update-service", "--check", "--graph-data"])
        .arg(root)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.starts_with("4 release(s) (amd64 4), 2 channel(s), 1 blocked-edges file(s); 4 update(s) declared, 0 blocked, 1 conditional\n"), "{text}");
    assert!(text.contains("stable-1 (amd64): 3 release(s), newest 1.2.0; 2 update(s), 1 conditional\n"), "{text}");

    let svc = Service::start(root, &root.join("releases"), "1s");

    // The protocol: the graph, its media types, its errors.
    let (status, ctype, g) =
        get(&format!("{}?channel=stable-1&arch=amd64&id=x&version=1.0.0", svc.url), Some("application/json")).await;
    assert_eq!((status, ctype.as_str()), (200, "application/json"), "{g}");
    assert_eq!(versions(&g["nodes"]), ["1.0.0", "1.1.0", "1.2.0"]);
    assert_eq!(
        g["nodes"][0]["metadata"],
        json!({"url": "https://notes.example/1.0.0", "io.openshift.upgrades.graph.release.channels": "candidate-1,stable-1"})
    );
    assert_eq!(g["edges"], json!([[0, 1], [1, 2]]));
    assert_eq!(g["conditionalEdges"][0]["edges"], json!([{"from": "1.0.0", "to": "1.2.0"}]));
    let (status, ctype, _) =
        get(&format!("{}?channel=stable-1", svc.url), Some("application/vnd.redhat.cincinnati.v1+json")).await;
    assert_eq!((status, ctype.as_str()), (200, "application/vnd.redhat.cincinnati.v1+json"));
    let (status, _, e) = get(&svc.url, None).await;
    assert_eq!(
        (status, &e),
        (400, &json!({"kind": "missing_params", "value": "mandatory client parameters missing: channel"}))
    );
    let (status, _, e) = get(&format!("{}?channel=Stable_1", svc.url), None).await;
    assert_eq!((status, e["kind"].as_str()), (400, Some("invalid_params")), "{e}");
    let (status, _, e) = get(&format!("{}?channel=stable-1&arch=x86_64!", svc.url), None).await;
    assert_eq!((status, e["kind"].as_str()), (400, Some("invalid_params")), "{e}");
    let (status, _, e) = get(&format!("{}?channel=stable-1", svc.url), Some("text/html")).await;
    assert_eq!((status, e["kind"].as_str()), (406, Some("invalid_content_type")), "{e}");
    // A query whose bytes are not UTF-8: read as U+FFFD (axum's `Query` decodes lossily, as
    // form encoding does), which no channel matches: Cincinnati's JSON error, counted below.
    let (status, _, e) = get(&format!("{}?channel=stable%FF", svc.url), None).await;
    assert_eq!((status, e["kind"].as_str()), (400, Some("invalid_params")), "{e}");
    // A channel or architecture nothing is in: the empty graph, as OpenShift's service answers;
    // the channel list says which exist.
    let (status, _, g) = get(&format!("{}?channel=stable-1&arch=arm64", svc.url), None).await;
    assert_eq!((status, g), (200, json!({"version": 1, "nodes": [], "edges": [], "conditionalEdges": []})));
    let (_, _, list) = get(&format!("{}/api/upgrades_info/v1/channels", svc.base()), None).await;
    assert_eq!(list, json!({"arch": "amd64", "channels": ["candidate-1", "stable-1"]}));
    // What it served, on /metrics under OpenShift's update service's names: 8 graph queries,
    // 5 refused, by code and kind; a load that served the 4 releases.
    assert_eq!(svc.metric("cincinnati_pe_graph_incoming_requests_total").await, Some(8.0));
    assert_eq!(svc.metric("cincinnati_pe_graph_serve_duration_seconds_count").await, Some(8.0));
    let refused = |code: &str, kind: &str| {
        format!("cincinnati_pe_graph_response_errors_total{{code=\"{code}\",kind=\"{kind}\"}}")
    };
    assert_eq!(svc.metric(&refused("400", "invalid_params")).await, Some(3.0));
    assert_eq!(svc.metric(&refused("400", "missing_params")).await, Some(1.0));
    assert_eq!(svc.metric(&refused("406", "invalid_content_type")).await, Some(1.0));
    assert_eq!(svc.metric("cincinnati_gb_graph_final_releases").await, Some(4.0));
    assert!(svc.metric("cincinnati_gb_graph_upstream_scrapes_total").await >= Some(1.0));
    assert_eq!(svc.metric("cincinnati_gb_graph_upstream_errors_total").await, Some(0.0));

    // A fleet at 1.0.0 on stable-1: 1.1.0 recommended, 1.2.0 conditional with its risk.
    let c = Coordinator::start_with(Options {
        args: vec!["--update-poll-interval".into(), "1s".into()],
        ..Default::default()
    });
    let admin = fleet_following(&c, &svc.url, "stable-1", "1.0.0").await;
    let v = wait_cv(&admin, "1.0.0 completed with its updates", |v| {
        completed(v, "1.0.0") && !versions(&v["status"]["availableUpdates"]).is_empty()
    })
    .await;
    assert_eq!(versions(&v["status"]["availableUpdates"]), ["1.1.0"], "{v}");
    assert_eq!(conditional_versions(&v), ["1.2.0"], "{v}");
    let rec = &v["status"]["conditionalUpdates"][0]["conditions"][0];
    assert_eq!((rec["status"].as_str(), rec["reason"].as_str()), (Some("False"), Some("DataLoss")), "{rec}");
    assert!(v["status"]["desired"]["channels"].as_array().unwrap().contains(&json!("stable-1")), "{v}");

    // Over HTTPS, with a certificate of yours (here the coordinator's serving one); a key that
    // is not the certificate's stops the start, naming the flags.
    let pki = c.data_dir();
    let (cert, key) = (pki.join("serving.crt"), pki.join("serving.key"));
    let tls = Service::start_with(
        root,
        &root.join("releases"),
        &["--tls-cert-file", cert.to_str().unwrap(), "--tls-key-file", key.to_str().unwrap()],
    );
    assert!(tls.url.starts_with("https://127.0.0.1:"), "{}", tls.url);
    let https = reqwest::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(&c.ca_pem()).unwrap())
        .build()
        .unwrap();
    let g: Value = https.get(format!("{}?channel=stable-1", tls.url)).send().await.unwrap().json().await.unwrap();
    assert_eq!(versions(&g["nodes"]), ["1.0.0", "1.1.0", "1.2.0"]);
    drop(tls);
    let out = Command::new(bin("aloft-coordinator"))
        .args(["update-service", "--listen", "127.0.0.1:0", "--graph-data"])
        .arg(root)
        .arg("--tls-cert-file")
        .arg(&cert)
        .arg("--tls-key-file")
        .arg(pki.join("ca.key"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("--tls-cert-file/--tls-key-file"), "{err}");

    // The risk is lifted and 1.0.0 -> 1.1.0 dropped instead: the next refresh serves it and
    // the fleet is offered 1.2.0 alone.
    std::fs::remove_file(root.join("blocked-edges/1.2.0-data-loss.yaml")).unwrap();
    write(root, "blocked-edges/1.1.0.yaml", "to: 1.1.0\nfrom: ^1\\.0\\.0\\+amd64$\n");
    let v = wait_cv(&admin, "the reloaded graph offered", |v| {
        versions(&v["status"]["availableUpdates"]) == ["1.2.0"] && conditional_versions(v).is_empty()
    })
    .await;
    assert_eq!(v["status"]["history"][0]["version"], "1.0.0");
    eventually(Duration::from_secs(10), "the reload logged", || async {
        Ok(svc.log().contains("graph-data reloaded (refresh)").then_some(()))
    })
    .await;

    // A graph-data that breaks while served: nothing served changes, the log says which file.
    let before = get(&format!("{}?channel=stable-1", svc.url), None).await.2;
    write(root, "channels/stable-1.yaml", "name: stable-1\nversions: [1.0.0, 1.1.0, 1.2.0\n");
    eventually(Duration::from_secs(15), "the failed reload logged", || async {
        Ok(svc
            .log()
            .lines()
            .any(|l| l.contains("did not reload") && l.contains("channels/stable-1.yaml"))
            .then_some(()))
    })
    .await;
    assert_eq!(get(&format!("{}?channel=stable-1", svc.url), None).await.2, before);
    assert_eq!(versions(&wait_cv(&admin, "", |_| true).await["status"]["availableUpdates"]), ["1.2.0"]);
    // Counted as failed loads, one a second; the last good one's time and releases stay.
    let stale = svc.metric("cincinnati_gb_graph_last_successful_refresh_timestamp").await;
    let failed = svc.metric("cincinnati_gb_graph_upstream_errors_total").await.unwrap();
    assert!(failed >= 1.0);
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert!(svc.metric("cincinnati_gb_graph_upstream_errors_total").await > Some(failed));
    assert_eq!(svc.metric("cincinnati_gb_graph_last_successful_refresh_timestamp").await, stale);
    assert_eq!(svc.metric("cincinnati_gb_graph_final_releases").await, Some(4.0));

    // Mended, and a SIGHUP reloads at once (a long refresh interval would wait).
    write(root, "channels/stable-1.yaml", "name: stable-1\nversions: [1.0.0, 1.1.0, 1.2.0, 1.3.0]\n");
    svc.hup();
    eventually(Duration::from_secs(15), "the SIGHUP reload", || async {
        Ok(svc.log().contains("graph-data reloaded (SIGHUP)").then_some(()))
    })
    .await;
    let (_, _, g) = get(&format!("{}?channel=stable-1", svc.url), None).await;
    assert_eq!(versions(&g["nodes"]), ["1.0.0", "1.1.0", "1.2.0", "1.3.0"]);
    drop(svc);
    // `--metrics-listen` on a port taken stops the start, naming the flag.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let out = Command::new(bin("aloft-coordinator"))
        .args(["update-service", "--listen", "127.0.0.1:0", "--metrics-listen"])
        .arg(taken.local_addr().unwrap().to_string())
        .arg("--graph-data")
        .arg(root)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("--metrics-listen: cannot listen on"), "{err}");

    // --check on a graph-data that does not load: non-zero, naming the file and field.
    write(root, "releases/1.3.0.yaml", "version: 1.3.0\npayload: p\nprevious: [1.4.0]\n");
    let out = Command::new(bin("aloft-coordinator"))
        .args(["update-service", "--check", "--graph-data"])
        .arg(root)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(err.contains("releases/1.3.0.yaml: previous[0]: 1.4.0 is not older than the release (1.3.0)"), "{err}");
}

/// OpenShift's real graph-data, served by aloft over the releases of stable-4.7 as OpenShift's
/// service served it (each release file saying what the release image's metadata says): a
/// fleet at 4.7.2 is offered what an OpenShift cluster at 4.7.2 was, with the same risks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_real_graph_data_offers_a_fleet_what_openshift_offered() {
    let served: Value = serde_json::from_str(
        &std::fs::read_to_string(testdata().join("cincinnati-graphs/stable-4.7_amd64_v1.json")).unwrap(),
    )
    .unwrap();
    let nodes = served["nodes"].as_array().unwrap();
    let mut previous: Vec<Vec<String>> = vec![Vec::new(); nodes.len()];
    for e in served["edges"].as_array().unwrap() {
        previous[e[1].as_u64().unwrap() as usize]
            .push(nodes[e[0].as_u64().unwrap() as usize]["version"].as_str().unwrap().into());
    }
    for group in served["conditionalEdges"].as_array().unwrap() {
        for e in group["edges"].as_array().unwrap() {
            let to = nodes.iter().position(|n| n["version"] == e["to"]).unwrap();
            previous[to].push(e["from"].as_str().unwrap().into());
        }
    }
    let releases = tempfile::tempdir().unwrap();
    for (n, prev) in nodes.iter().zip(&previous) {
        let digest = n["payload"].as_str().unwrap().rsplit_once("sha256:").unwrap().1;
        let metadata = match n["metadata"]["url"].as_str() {
            Some(url) => json!({"url": url}),
            None => json!({}),
        };
        let doc = json!({"kind": "cincinnati-metadata-v0", "version": n["version"],
            "payload": format!("ostree+http://127.0.0.1:9/repo#ocp/x86_64@{digest}"),
            "previous": prev, "metadata": metadata});
        write(releases.path(), &format!("4.7/{}.json", n["version"].as_str().unwrap()), &doc.to_string());
    }
    let svc = Service::start(&testdata().join("cincinnati-graph-data"), releases.path(), "5m");
    assert!(svc.log().contains("1717 blocked-edges file(s)"), "{}", svc.log());

    // What OpenShift's service offered from 4.7.2: its edges, the conditional ones apart.
    let (want_plain, want_cond) = aloft_tests::update_service::offered(&served, "4.7.2");
    assert!(want_plain.len() >= 3 && want_cond == ["4.7.4"], "{want_plain:?} {want_cond:?}");

    let c = Coordinator::start_with(Options {
        args: vec!["--update-poll-interval".into(), "3s".into()],
        ..Default::default()
    });
    let admin = fleet_following(&c, &svc.url, "stable-4.7", "4.7.2").await;
    let v = wait_cv(&admin, "4.7.2 completed with its updates", |v| {
        completed(v, "4.7.2") && !versions(&v["status"]["availableUpdates"]).is_empty()
    })
    .await;
    assert_eq!(versions(&v["status"]["availableUpdates"]), want_plain);
    assert_eq!(conditional_versions(&v), want_cond);
    let risk = &v["status"]["conditionalUpdates"][0]["risks"][0];
    assert_eq!(risk["name"], "VSphereNodeNameChanges", "{v}");
    assert_eq!(risk["url"], "https://bugzilla.redhat.com/show_bug.cgi?id=1942207#c3");
    // Its channels, as OpenShift's service listed them for 4.7.2.
    let from = nodes.iter().position(|n| n["version"] == "4.7.2").unwrap();
    let listed = nodes[from]["metadata"]["io.openshift.upgrades.graph.release.channels"].as_str().unwrap();
    assert_eq!(v["status"]["desired"]["channels"], json!(listed.split(',').collect::<Vec<_>>()));
}
