//! OLM on a fleet: a real coordinator reads file-based catalogs over HTTP on loopback, resolves
//! Subscriptions, waits for InstallPlan approval, and installs bundles whose MachineConfigs a
//! real agent (on a sandboxed root, with its private dbus-daemon) applies; upgrades replace the
//! CSV and its configs in one rollout, and an uninstall removes them. Catalogs are the tests'
//! own (an aloft bundle carries MachineConfigs) and the real ones in shared/testdata (community
//! operators, OLM's e2e catalogs), which aloft must read and refuse to half-install.

use aloft_api::annotations as ann;
use aloft_coordinator::resources::{
    CATALOG_SOURCE, CLUSTER_SERVICE_VERSION, CLUSTER_VERSION, EVENT, INSTALL_PLAN, MACHINE_CONFIG, MACHINE_CONFIG_POOL,
    NODE, OPERATOR_GROUP, PACKAGE_MANIFEST, SUBSCRIPTION,
};
use aloft_tests::catalog_server::CatalogServer;
use aloft_tests::sandbox::Host;
use aloft_tests::update_service::{graph, UpdateService};
use aloft_tests::{condition, eventually, machine_config, path_of, resource_path, testdata, Client, Coordinator};
use base64::Engine as _;
use serde_json::{json, Value};
use std::time::Duration;

const CATALOG_NS: &str = "olm";
const NS: &str = "operators";
const PKG: &str = "node-exporter";
const WAIT: Duration = Duration::from_secs(120);

fn ns_path(rt: &aloft_tests::ResourceType, ns: &str, name: Option<&str>) -> String {
    resource_path(rt.path_ref(), Some(ns), name)
}

/// One MachineConfig of a bundle: a file for the worker role.
fn bundle_config(name: &str, path: &str, contents: &str) -> Value {
    json!({
        "apiVersion": "machineconfiguration.openshift.io/v1", "kind": "MachineConfig",
        "metadata": {"name": name, "labels": {ann::ROLE_LABEL: "worker"}},
        "spec": {"config": {"ignition": {"version": "3.4.0"}, "storage": {"files": [
            {"path": path, "mode": 420, "contents": {"source": format!("data:,{contents}")}}]}}},
    })
}

/// A bundle blob of package [`PKG`] carrying its CSV and `configs` inline (olm.bundle.object,
/// as catalogs built with `opm` from bundle directories carry them).
fn bundle(version: &str, replaces: Option<&str>, configs: &[Value]) -> Value {
    let mut csv = csv_of(PKG, version);
    csv["spec"]["displayName"] = json!("Node Exporter");
    if let Some(r) = replaces {
        csv["spec"]["replaces"] = json!(r);
    }
    bundle_blob(PKG, version, &csv, &configs.iter().map(bundle_object).collect::<Vec<_>>())
}

/// The CSV of `package` at `version` (no Deployments: aloft runs none).
fn csv_of(package: &str, version: &str) -> Value {
    json!({
        "apiVersion": "operators.coreos.com/v1alpha1", "kind": "ClusterServiceVersion",
        "metadata": {"name": format!("{package}.v{version}")},
        "spec": {"displayName": package, "version": version,
                 "install": {"strategy": "deployment", "spec": {"deployments": []}}},
    })
}

/// Create a CSV of `package` at `version` as a user would by hand, with no Subscription, its
/// package named in its properties annotation as an installed operator's is.
async fn install_by_hand(c: &Client, package: &str, version: &str) {
    let mut csv = csv_of(package, version);
    let properties =
        json!({"properties": [{"type": "olm.package", "value": {"packageName": package, "version": version}}]});
    csv["metadata"]["annotations"] = json!({"operatorframework.io/properties": properties.to_string()});
    c.post(&ns_path(&CLUSTER_SERVICE_VERSION, NS, None), &csv).await.unwrap().into_result().unwrap();
}

/// A manifest as an `olm.bundle.object` property.
fn bundle_object(manifest: &Value) -> Value {
    json!({"type": "olm.bundle.object",
           "value": {"data": base64::engine::general_purpose::STANDARD.encode(manifest.to_string())}})
}

/// The bundle blob of `package` at `version`: its `olm.package`, its CSV inline, then `more`.
fn bundle_blob(package: &str, version: &str, csv: &Value, more: &[Value]) -> Value {
    let mut properties =
        vec![json!({"type": "olm.package", "value": {"packageName": package, "version": version}}), bundle_object(csv)];
    properties.extend(more.iter().cloned());
    json!({"schema": "olm.bundle", "name": format!("{package}.v{version}"), "package": package,
           "image": format!("quay.example/{package}-bundle:v{version}"), "properties": properties})
}

/// The catalog as `opm render` prints it: one JSON object after another.
fn catalog(bundles: &[(Value, Option<&str>)]) -> String {
    package_blobs(PKG, bundles).iter().map(Value::to_string).collect::<Vec<_>>().join("\n")
}

/// The blobs of `package` with one channel, `stable`, of `bundles` (each with what it replaces).
fn package_blobs(package: &str, bundles: &[(Value, Option<&str>)]) -> Vec<Value> {
    let entries: Vec<Value> = bundles
        .iter()
        .map(|(b, replaces)| {
            let mut e = json!({"name": b["name"]});
            if let Some(r) = replaces {
                e["replaces"] = json!(r);
            }
            e
        })
        .collect();
    let mut blobs = vec![
        json!({"schema": "olm.package", "name": package, "defaultChannel": "stable"}),
        json!({"schema": "olm.channel", "package": package, "name": "stable", "entries": entries}),
    ];
    blobs.extend(bundles.iter().map(|(b, _)| b.clone()));
    blobs
}

/// The bundle blob of `package` at `version`, replacing `replaces`, carrying `configs`.
fn bundle_with(package: &str, version: &str, replaces: Option<&str>, configs: &[Value]) -> Value {
    let mut csv = csv_of(package, version);
    if let Some(r) = replaces {
        csv["spec"]["replaces"] = json!(r);
    }
    bundle_blob(package, version, &csv, &configs.iter().map(bundle_object).collect::<Vec<_>>())
}

fn catalog_source(name: &str, address: &str) -> Value {
    json!({
        "apiVersion": "operators.coreos.com/v1alpha1", "kind": "CatalogSource",
        "metadata": {"name": name, "namespace": CATALOG_NS},
        "spec": {"sourceType": "http", "address": address, "displayName": "Fleet operators",
                 "publisher": "aloft tests", "updateStrategy": {"registryPoll": {"interval": "1s"}}},
    })
}

fn subscription(name: &str, source: &str, package: &str, approval: &str) -> Value {
    json!({
        "apiVersion": "operators.coreos.com/v1alpha1", "kind": "Subscription",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"source": source, "sourceNamespace": CATALOG_NS, "name": package, "channel": "stable",
                 "installPlanApproval": approval},
    })
}

fn s<'a>(v: &'a Value, ptr: &str) -> &'a str {
    v.pointer(ptr).and_then(Value::as_str).unwrap_or("")
}

async fn get(c: &Client, path: &str) -> anyhow::Result<Option<Value>> {
    let r = c.get(path).await?;
    if r.code == 404 {
        return Ok(None);
    }
    Ok(Some(r.into_result()?))
}

/// Wait for the subscription's plan for `csv` to reach `phase`; returns the plan.
async fn plan_for(c: &Client, sub: &str, csv: &str, phase: &str) -> Value {
    let (c, sub_path) = (c.clone(), ns_path(&SUBSCRIPTION, NS, Some(sub)));
    eventually(WAIT, &format!("a {phase} plan for {csv}"), || {
        let (c, sub_path) = (c.clone(), sub_path.clone());
        async move {
            let Some(sub) = get(&c, &sub_path).await? else { return Ok(None) };
            let plan_name = s(&sub, "/status/installPlanRef/name");
            if plan_name.is_empty() {
                return Ok(None);
            }
            let Some(plan) = get(&c, &ns_path(&INSTALL_PLAN, NS, Some(plan_name))).await? else { return Ok(None) };
            let ok = s(&plan, "/spec/clusterServiceVersionNames/0") == csv && s(&plan, "/status/phase") == phase;
            Ok(ok.then_some(plan))
        }
    })
    .await
}

/// Wait until the object at `path` exists and `ok` holds of it; returns it.
async fn object_until(c: &Client, path: &str, what: &str, ok: impl Fn(&Value) -> bool + Clone) -> Value {
    eventually(WAIT, what, || {
        let (c, path, ok) = (c.clone(), path.to_string(), ok.clone());
        async move { Ok(get(&c, &path).await?.filter(|v| ok(v))) }
    })
    .await
}

/// Create the CatalogSource `source` in the catalogs' namespace.
async fn add_catalog(c: &Client, source: &Value) {
    c.post(&ns_path(&CATALOG_SOURCE, CATALOG_NS, None), source).await.unwrap().into_result().unwrap();
}

/// Create the CatalogSource `name` of `address` in `namespace` (not the catalogs' usual one).
async fn add_catalog_in(c: &Client, namespace: &str, name: &str, address: &str) {
    let mut source = catalog_source(name, address);
    source["metadata"]["namespace"] = json!(namespace);
    c.post(&ns_path(&CATALOG_SOURCE, namespace, None), &source).await.unwrap().into_result().unwrap();
}

/// Create `sub` and wait until `ok` holds of it; returns the subscription.
async fn subscribe_until(c: &Client, sub: Value, what: &str, ok: fn(&Value) -> bool) -> Value {
    c.post(&ns_path(&SUBSCRIPTION, NS, None), &sub).await.unwrap().into_result().unwrap();
    object_until(c, &ns_path(&SUBSCRIPTION, NS, Some(s(&sub, "/metadata/name"))), what, ok).await
}

/// Whether the subscription's condition `type_` is True.
fn cond_true(sub: &Value, type_: &str) -> bool {
    condition(sub, type_).is_some_and(|c| s(c, "/status") == "True")
}

async fn csv_phase(c: &Client, name: &str, phase: &str) -> Value {
    let path = ns_path(&CLUSTER_SERVICE_VERSION, NS, Some(name));
    object_until(c, &path, &format!("CSV {name} {phase}"), |csv| s(csv, "/status/phase") == phase).await
}

/// The node Done on the pool's target, which must be new; returns it.
async fn converged(c: &Client, node: &str, previous: &str) -> String {
    let (c, node) = (c.clone(), node.to_string());
    let previous = previous.to_string();
    eventually(Duration::from_secs(180), "the node Done on a new config", || {
        let (c, node, previous) = (c.clone(), node.clone(), previous.clone());
        async move {
            let pool = c.get(&path_of(&MACHINE_CONFIG_POOL, Some("worker"))).await?.into_result()?;
            let target = s(&pool, "/spec/configuration/name").to_string();
            let n = c.get(&path_of(&NODE, Some(&node))).await?.into_result()?;
            let a = |k: &str| s(&n, &format!("/metadata/annotations/{}", k.replace('/', "~1"))).to_string();
            anyhow::ensure!(a(ann::STATE) != "Degraded", "node Degraded: {}", a(ann::REASON));
            let done =
                !target.is_empty() && target != previous && a(ann::STATE) == "Done" && a(ann::CURRENT_CONFIG) == target;
            Ok(done.then_some(target))
        }
    })
    .await
}

async fn approve(c: &Client, plan: &str) {
    c.patch(
        &ns_path(&INSTALL_PLAN, NS, Some(plan)),
        "application/merge-patch+json",
        &json!({"spec": {"approved": true}}),
    )
    .await
    .unwrap()
    .into_result()
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_is_approved_installed_upgraded_and_removed_through_the_pool() {
    let c = Coordinator::start();
    let admin = c.client();
    let served = CatalogServer::start().await;
    let (version_file, extra_file) = ("/etc/node-exporter/version", "/etc/node-exporter/extra.conf");

    // One node on the worker pool; the exporter's files need no reboot.
    let token_file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(token_file.path(), c.create_token("fleet", "bootstrap")).unwrap();
    let mut host = Host::new("worker-0").await;
    host.start_agent(&c, token_file.path());
    let policy = json!({"apiVersion": "operator.openshift.io/v1", "kind": "MachineConfiguration",
        "metadata": {"name": "cluster"},
        "spec": {"nodeDisruptionPolicy": {"files": [
            {"path": version_file, "actions": [{"type": "None"}]},
            {"path": extra_file, "actions": [{"type": "None"}]}]}}});
    admin.post("/apis/operator.openshift.io/v1/machineconfigurations", &policy).await.unwrap().into_result().unwrap();
    let pool: Value = yaml_serde::from_str(
        &std::fs::read_to_string(testdata().join("mco/bootstrap/worker.machineconfigpool.yaml")).unwrap(),
    )
    .unwrap();
    admin.post(&path_of(&MACHINE_CONFIG_POOL, None), &pool).await.unwrap().into_result().unwrap();
    admin
        .post(&path_of(&MACHINE_CONFIG, None), &machine_config("00-worker", "worker"))
        .await
        .unwrap()
        .into_result()
        .unwrap();
    let first = converged(&admin, "worker-0", "").await;

    // A catalog with 1.0.0, read and shown.
    let v1 = bundle(
        "1.0.0",
        None,
        &[
            bundle_config("50-node-exporter", version_file, "v1"),
            bundle_config("51-node-exporter-extra", extra_file, "extra"),
        ],
    );
    let url = served.set("catalogs/fleet.json", &catalog(&[(v1.clone(), None)]));
    add_catalog(&admin, &catalog_source("fleet", &url)).await;
    let catsrc = object_until(&admin, &ns_path(&CATALOG_SOURCE, CATALOG_NS, Some("fleet")), "the catalog read", |cs| {
        s(cs, "/status/connectionState/lastObservedState") == "READY"
    })
    .await;
    assert_eq!(catsrc.pointer("/status/packages"), Some(&json!(1)), "{catsrc}");
    assert_eq!(catsrc.pointer("/status/bundles"), Some(&json!(1)), "{catsrc}");
    assert_eq!(s(&catsrc, "/status/connectionState/address"), url);

    // A Manual subscription: the plan waits, showing what it will create; nothing is installed.
    admin
        .post(&ns_path(&SUBSCRIPTION, NS, None), &subscription(PKG, "fleet", PKG, "Manual"))
        .await
        .unwrap()
        .into_result()
        .unwrap();
    let plan = plan_for(&admin, PKG, "node-exporter.v1.0.0", "RequiresApproval").await;
    assert_eq!(plan.pointer("/spec/approved"), Some(&json!(false)));
    assert_eq!(s(&plan, "/spec/approval"), "Manual");
    let steps: Vec<(&str, &str)> = plan["status"]["plan"]
        .as_array()
        .unwrap()
        .iter()
        .map(|st| (s(st, "/resource/kind"), s(st, "/resource/name")))
        .collect();
    assert_eq!(
        steps,
        [
            ("ClusterServiceVersion", "node-exporter.v1.0.0"),
            ("MachineConfig", "50-node-exporter"),
            ("MachineConfig", "51-node-exporter-extra")
        ]
    );
    let sub = get(&admin, &ns_path(&SUBSCRIPTION, NS, Some(PKG))).await.unwrap().unwrap();
    assert_eq!(s(&sub, "/status/state"), "UpgradePending", "{sub}");
    assert_eq!(s(&sub, "/status/currentCSV"), "node-exporter.v1.0.0");
    assert_eq!(s(&sub, "/status/installedCSV"), "");
    let pending = condition(&sub, "InstallPlanPending").expect("InstallPlanPending");
    assert_eq!((s(pending, "/status"), s(pending, "/reason")), ("True", "RequiresApproval"));
    let healthy = condition(&sub, "CatalogSourcesUnhealthy").expect("CatalogSourcesUnhealthy");
    assert_eq!(s(healthy, "/status"), "False", "{sub}");
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(get(&admin, &ns_path(&CLUSTER_SERVICE_VERSION, NS, Some("node-exporter.v1.0.0"))).await.unwrap().is_none());
    assert!(get(&admin, &path_of(&MACHINE_CONFIG, Some("50-node-exporter"))).await.unwrap().is_none());

    // kubectl shows them with their short names and columns, and approves the plan as the
    // README says (without kubectl on PATH and not required, through the API).
    let plan_name = s(&plan, "/metadata/name");
    if let Some(exe) = aloft_tests::kubectl_path() {
        let home = tempfile::tempdir().unwrap();
        let k = |args: &[&str]| {
            let out = std::process::Command::new(&exe)
                .arg(format!("--kubeconfig={}", c.kubeconfig_path().display()))
                .args(args)
                .env("HOME", home.path())
                .env_remove("KUBECONFIG")
                .output()
                .unwrap();
            let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
            assert!(out.status.success(), "kubectl {args:?}: {stderr}");
            stdout.lines().map(|l| l.split_whitespace().map(str::to_string).collect()).collect::<Vec<Vec<String>>>()
        };
        let ip = k(&["get", "ip", "-n", NS]);
        assert_eq!(ip[0], ["NAME", "CSV", "APPROVAL", "APPROVED"], "{ip:?}");
        assert_eq!(ip[1], [plan_name, "node-exporter.v1.0.0", "Manual", "false"], "{ip:?}");
        let sub = k(&["get", "sub", "-n", NS]);
        assert_eq!(sub[1][..3], [PKG, PKG, "fleet"], "{sub:?}");
        let catsrc = k(&["get", "catsrc", "-n", CATALOG_NS, "-o", "wide"]);
        assert!(catsrc[0].contains(&"PACKAGES".to_string()), "{catsrc:?}");
        assert!(catsrc[1].contains(&"READY".to_string()) && catsrc[1].contains(&"1".to_string()), "{catsrc:?}");
        k(&["patch", "installplan", plan_name, "-n", NS, "--type", "merge", "-p", r#"{"spec":{"approved":true}}"#]);
    } else {
        approve(&admin, plan_name).await;
    }

    // Approved: the CSV and both configs; Installing until the node runs them, then Succeeded.
    plan_for(&admin, PKG, "node-exporter.v1.0.0", "Complete").await;
    let mc = get(&admin, &path_of(&MACHINE_CONFIG, Some("50-node-exporter"))).await.unwrap().expect("installed");
    assert_eq!(s(&mc, "/metadata/labels/olm.aloft.dev~1csv"), "node-exporter.v1.0.0");
    assert_eq!(s(&mc, "/metadata/labels/olm.aloft.dev~1namespace"), NS);
    let second = converged(&admin, "worker-0", &first).await;
    let csv = csv_phase(&admin, "node-exporter.v1.0.0", "Succeeded").await;
    let phases: Vec<&str> = csv["status"]["conditions"].as_array().unwrap().iter().map(|c| s(c, "/phase")).collect();
    assert_eq!(phases.first(), Some(&"Pending"), "{phases:?}");
    assert_eq!(phases.last(), Some(&"Succeeded"), "{phases:?}");
    assert_eq!(std::fs::read_to_string(host.path(version_file)).unwrap(), "v1");
    assert_eq!(std::fs::read_to_string(host.path(extra_file)).unwrap(), "extra");
    let sub =
        object_until(&admin, &ns_path(&SUBSCRIPTION, NS, Some(PKG)), "the subscription at the latest known", |x| {
            s(x, "/status/state") == "AtLatestKnown"
        })
        .await;
    assert_eq!(s(&sub, "/status/installedCSV"), "node-exporter.v1.0.0");
    assert!(condition(&sub, "InstallPlanPending").is_none(), "{sub}");

    // The catalog gains 1.1.0 (replaces 1.0.0, without the extra config): a new plan to approve;
    // the upgrade is one rollout, after which the old CSV is gone.
    let v2 = bundle("1.1.0", Some("node-exporter.v1.0.0"), &[bundle_config("50-node-exporter", version_file, "v2")]);
    served.set("catalogs/fleet.json", &catalog(&[(v1, None), (v2, Some("node-exporter.v1.0.0"))]));
    let plan = plan_for(&admin, PKG, "node-exporter.v1.1.0", "RequiresApproval").await;
    assert_eq!(std::fs::read_to_string(host.path(version_file)).unwrap(), "v1", "nothing moves before approval");
    approve(&admin, s(&plan, "/metadata/name")).await;
    let third = converged(&admin, "worker-0", &second).await;
    csv_phase(&admin, "node-exporter.v1.1.0", "Succeeded").await;
    eventually(WAIT, "the replaced CSV deleted", || {
        let admin = admin.clone();
        async move {
            let old = get(&admin, &ns_path(&CLUSTER_SERVICE_VERSION, NS, Some("node-exporter.v1.0.0"))).await?;
            Ok(old.is_none().then_some(()))
        }
    })
    .await;
    assert_eq!(std::fs::read_to_string(host.path(version_file)).unwrap(), "v2");
    assert!(!host.path(extra_file).exists(), "the config 1.1.0 dropped is gone from the node");
    assert!(get(&admin, &path_of(&MACHINE_CONFIG, Some("51-node-exporter-extra"))).await.unwrap().is_none());
    let pool = admin.get(&path_of(&MACHINE_CONFIG_POOL, Some("worker"))).await.unwrap().into_result().unwrap();
    assert_eq!(s(&pool, "/status/configuration/name"), third, "one rollout for the upgrade");

    // Events in the subscription's namespace say what happened.
    let events = admin.get(&ns_path(&EVENT, NS, None)).await.unwrap().into_result().unwrap();
    let reasons: Vec<&str> = events["items"].as_array().unwrap().iter().map(|e| s(e, "/reason")).collect();
    for want in ["InstallPlanCreated", "Installed", "InstallSucceeded", "Replaced"] {
        assert!(reasons.contains(&want), "no {want} Event in {reasons:?}");
    }
    assert!(events["items"].as_array().unwrap().iter().all(|e| s(e, "/involvedObject/namespace") == NS));

    // Uninstall as OLM documents it: the Subscription, then the CSV; the configs leave the node.
    admin.delete(&ns_path(&SUBSCRIPTION, NS, Some(PKG))).await.unwrap().into_result().unwrap();
    admin
        .delete(&ns_path(&CLUSTER_SERVICE_VERSION, NS, Some("node-exporter.v1.1.0")))
        .await
        .unwrap()
        .into_result()
        .unwrap();
    converged(&admin, "worker-0", &third).await;
    assert!(get(&admin, &path_of(&MACHINE_CONFIG, Some("50-node-exporter"))).await.unwrap().is_none());
    assert!(!host.path(version_file).exists(), "uninstalled: {}", host.log());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn catalogs_and_subscriptions_say_what_they_cannot_do() {
    let c = Coordinator::start();
    let admin = c.client();
    let served = CatalogServer::start().await;

    // Admission names each field it refuses, and stores nothing.
    let refusals = [
        (
            json!({"sourceType": "grpc", "image": "registry.redhat.io/redhat/community-operator-index:v4.20"}),
            "spec.sourceType",
            "runs no pods",
        ),
        (json!({"sourceType": "http"}), "spec.address", "Required value"),
        (json!({"sourceType": "http", "address": "ftp://catalog.example/all.json"}), "spec.address", "http or https"),
        (
            json!({"sourceType": "http", "address": "http://catalog.example/all.json", "updateStrategy": {"registryPoll": {"interval": "often"}}}),
            "spec.updateStrategy.registryPoll.interval",
            "duration",
        ),
        // Longer than a Duration holds: refused, not a panic (and an empty reply).
        (
            json!({"sourceType": "http", "address": "http://catalog.example/all.json", "updateStrategy": {"registryPoll": {"interval": "9999999999999999h"}}}),
            "spec.updateStrategy.registryPoll.interval",
            "at most 2562047h",
        ),
    ];
    for (spec, field, words) in refusals {
        let mut cs = catalog_source("bad", "http://x.example/");
        cs["spec"] = spec;
        let r = admin.post(&ns_path(&CATALOG_SOURCE, CATALOG_NS, None), &cs).await.unwrap();
        assert_eq!(r.code, 422, "{field}: {}", r.body);
        let causes = &r.body["details"]["causes"];
        assert!(
            causes.as_array().unwrap().iter().any(|c| s(c, "/field") == field && s(c, "/message").contains(words)),
            "{field}: {causes}"
        );
    }
    let mut sub = subscription("bad", "fleet", "", "Sometimes");
    sub["spec"]["sourceNamespace"] = json!("");
    let r = admin.post(&ns_path(&SUBSCRIPTION, NS, None), &sub).await.unwrap();
    assert_eq!(r.code, 422, "{}", r.body);
    let fields: Vec<&str> = r.body["details"]["causes"].as_array().unwrap().iter().map(|c| s(c, "/field")).collect();
    assert_eq!(fields, ["spec.name", "spec.sourceNamespace", "spec.installPlanApproval"]);
    let mut with_config = subscription("bad", "fleet", PKG, "Automatic");
    with_config["spec"]["config"] = json!({"env": [{"name": "A", "value": "b"}]});
    let r = admin
        .post(&format!("{}?fieldValidation=Strict", ns_path(&SUBSCRIPTION, NS, None)), &with_config)
        .await
        .unwrap();
    assert_eq!(r.code, 400, "{}", r.body);
    assert!(r.body["message"].as_str().unwrap().contains("unknown field \"spec.config\""), "{}", r.body);
    let listed = admin.get(&ns_path(&SUBSCRIPTION, NS, None)).await.unwrap().into_result().unwrap();
    assert_eq!(listed["items"].as_array().map(Vec::len), Some(0), "nothing stored");

    // A catalog that cannot be read, and one opm would refuse: TRANSIENT_FAILURE, with why.
    let missing = served.url("catalogs/missing.json");
    add_catalog(&admin, &catalog_source("missing", &missing)).await;
    let two_heads = "{\"schema\":\"olm.package\",\"name\":\"p\",\"defaultChannel\":\"s\"}\n\
        {\"schema\":\"olm.channel\",\"package\":\"p\",\"name\":\"s\",\"entries\":[{\"name\":\"p.v1\"},{\"name\":\"p.v2\"}]}\n\
        {\"schema\":\"olm.bundle\",\"name\":\"p.v1\",\"package\":\"p\",\"image\":\"i\",\"properties\":[{\"type\":\"olm.package\",\"value\":{\"packageName\":\"p\",\"version\":\"1.0.0\"}}]}\n\
        {\"schema\":\"olm.bundle\",\"name\":\"p.v2\",\"package\":\"p\",\"image\":\"i\",\"properties\":[{\"type\":\"olm.package\",\"value\":{\"packageName\":\"p\",\"version\":\"2.0.0\"}}]}";
    let invalid = served.set("catalogs/invalid.json", two_heads);
    add_catalog(&admin, &catalog_source("invalid", &invalid)).await;
    for (name, words) in [("missing", "404"), ("invalid", "multiple channel heads found in graph")] {
        let path = ns_path(&CATALOG_SOURCE, CATALOG_NS, Some(name));
        let cs = object_until(&admin, &path, &format!("catalog {name} to fail"), |cs| {
            s(cs, "/status/connectionState/lastObservedState") == "TRANSIENT_FAILURE"
        })
        .await;
        assert!(s(&cs, "/status/message").contains(words), "{name}: {cs}");
    }

    // Real catalogs: a community operator (its bundles carry Deployments and CRDs) and OLM's
    // e2e example operator (its bundles are images only). Both read; neither half-installs.
    let community =
        std::fs::read_to_string(testdata().join("fbc-community-operators/v4.12/ecr-secret-operator/catalog.yaml"))
            .unwrap();
    let community_url = served.set("catalogs/community.yaml", &community);
    add_catalog(&admin, &catalog_source("community", &community_url)).await;
    let example =
        std::fs::read_to_string(testdata().join("olm-e2e/subscription/example-operator.v0.2.0-deprecations.yaml"))
            .unwrap();
    let example_url = served.set("catalogs/example.yaml", &example);
    add_catalog(&admin, &catalog_source("example", &example_url)).await;

    let mut community_sub = subscription("ecr", "community", "ecr-secret-operator", "Automatic");
    community_sub["spec"]["channel"] = json!("");
    let failed = subscribe_until(&admin, community_sub, "the community operator's plan to fail", |sub| {
        s(sub, "/status/state") == "UpgradeFailed"
    })
    .await;
    let why = condition(&failed, "InstallPlanFailed").expect("InstallPlanFailed");
    let message = s(why, "/message");
    assert!(message.contains("runs Deployments") && message.contains("CustomResourceDefinition"), "{message}");
    let csvs = admin.get(&ns_path(&CLUSTER_SERVICE_VERSION, NS, None)).await.unwrap().into_result().unwrap();
    assert_eq!(csvs["items"].as_array().map(Vec::len), Some(0), "nothing half-installed: {csvs}");

    let mut example_sub = subscription("example", "example", "test-package", "Automatic");
    example_sub["spec"]["channel"] = json!("");
    let failed = subscribe_until(&admin, example_sub, "the example operator's plan to fail", |sub| {
        s(sub, "/status/state") == "UpgradeFailed"
    })
    .await;
    let message = s(condition(&failed, "InstallPlanFailed").expect("InstallPlanFailed"), "/message");
    assert!(message.contains("carries no manifests"), "{message}");
    // The catalog's deprecations are the subscription's conditions.
    let deprecated = condition(&failed, "Deprecated").expect("Deprecated");
    assert_eq!(s(deprecated, "/status"), "True", "{failed}");
    assert!(condition(&failed, "PackageDeprecated").is_some(), "{failed}");

    // A package the catalog does not have.
    let unresolved = subscribe_until(
        &admin,
        subscription("nope", "example", "no-such-package", "Automatic"),
        "the subscription ResolutionFailed",
        |sub| cond_true(sub, "ResolutionFailed"),
    )
    .await;
    let why = condition(&unresolved, "ResolutionFailed").unwrap();
    assert_eq!(s(why, "/reason"), "ConstraintsNotSatisfiable");
    assert!(s(why, "/message").contains("no-such-package"), "{why}");

    // A subscription to a catalog that does not exist says so.
    let orphan = subscribe_until(
        &admin,
        subscription("orphan", "nowhere", PKG, "Automatic"),
        "the subscription CatalogSourcesUnhealthy",
        |sub| cond_true(sub, "CatalogSourcesUnhealthy"),
    )
    .await;
    let why = condition(&orphan, "CatalogSourcesUnhealthy").unwrap();
    assert_eq!(s(why, "/message"), "targeted catalogsource olm/nowhere missing");
}

/// `aloft-coordinator catalog validate|render` on catalogs written outside aloft: a real
/// community catalog is valid and renders to the stream a CatalogSource reads back whole; the
/// operator-registry's index directory (several catalogs of one package side by side) is not,
/// and each problem is named; render refuses it and prints nothing.
#[test]
fn the_catalog_commands_check_and_render_real_catalogs() {
    let exe = aloft_tests::bin("aloft-coordinator");
    let run = |args: &[&str]| std::process::Command::new(&exe).args(args).output().unwrap();
    let community = testdata().join("fbc-community-operators/v4.12");
    let out = run(&["catalog", "validate", community.to_str().unwrap()]);
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{said}{}", String::from_utf8_lossy(&out.stderr));
    assert!(said.trim_end().ends_with("valid: 10 packages, 164 bundles"), "{said}");

    let out = run(&["catalog", "render", community.to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let stream = String::from_utf8(out.stdout).unwrap();
    let blobs = aloft_coordinator::fbc::blobs_of_stream(&stream, "all.json").expect("the rendered stream reads back");
    let catalog = aloft_api::catalog::Catalog::from_blobs(blobs).expect("and is the valid catalog");
    assert_eq!((catalog.packages.len(), catalog.bundles.len()), (10, 164));

    let several = testdata().join("fbc-operator-registry/index-declcfgs");
    let out = run(&["catalog", "validate", several.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains(r#"package "foo" has duplicate bundle "foo.v0.2.0""#), "{err}");
    let out = run(&["catalog", "render", several.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty(), "nothing rendered from an invalid catalog");

    let out = run(&["catalog", "validate", "/nonexistent/catalog"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent/catalog"));
}

/// An installed operator whose bundle says `olm.maxOpenShiftVersion: "1.0"` holds the fleet on
/// release 1.0.x, as OLM's Upgradeable=False holds an OpenShift cluster: the ClusterVersion says
/// why, a minor update is refused naming the CSV, a patch goes on; once
/// the operator is upgraded to a bundle that supports 1.1, the minor update is taken.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_that_supports_no_newer_release_holds_back_minor_updates() {
    let c = Coordinator::start_with(aloft_tests::Options {
        args: vec!["--update-poll-interval".into(), "3s".into()],
        ..Default::default()
    });
    let admin = c.client();
    let served = CatalogServer::start().await;
    let svc = UpdateService::start().await;
    let payload = |n: u8| format!("ostree+http://127.0.0.1:9/repo#ocp/x86_64@{}", n.to_string().repeat(64));
    svc.set(
        "stable-1",
        graph(
            &[("1.0.0", &payload(1)), ("1.0.1", &payload(2)), ("1.1.0", &payload(3))],
            &[("1.0.0", "1.0.1"), ("1.0.0", "1.1.0"), ("1.0.1", "1.1.0")],
            &[],
        ),
    );
    admin
        .post(&path_of(&MACHINE_CONFIG_POOL, None), &aloft_tests::machine_config_pool("worker", "worker"))
        .await
        .unwrap()
        .into_result()
        .unwrap();
    let cv_path = path_of(&CLUSTER_VERSION, Some("version"));
    let ask = |version: &str, force: bool| {
        let (admin, path) = (admin.clone(), cv_path.clone());
        let patch = json!({"spec": {"desiredUpdate": {"version": version, "force": force}}});
        async move { admin.patch(&path, "application/merge-patch+json", &patch).await.unwrap().into_result().unwrap() }
    };
    let wait_cv = |what: &'static str, ok: fn(&Value) -> bool| {
        let (admin, path) = (admin.clone(), cv_path.clone());
        eventually(WAIT, what, move || {
            let (admin, path) = (admin.clone(), path.clone());
            async move { Ok(get(&admin, &path).await?.filter(ok)) }
        })
    };
    let cv = json!({"apiVersion": "config.openshift.io/v1", "kind": "ClusterVersion", "metadata": {"name": "version"},
        "spec": {"upstream": svc.url, "channel": "stable-1", "desiredUpdate": {"version": "1.0.0"}}});
    admin.post(&path_of(&CLUSTER_VERSION, None), &cv).await.unwrap().into_result().unwrap();
    wait_cv("1.0.0 completed", |v| s(v, "/status/history/0/state") == "Completed").await;

    // The operator, installed at once (Automatic), supports releases up to 1.0.
    let limited = |version: &str, replaces: Option<&str>, max: &str| {
        let mut b =
            bundle(version, replaces, &[bundle_config("50-node-exporter", "/etc/node-exporter/version", version)]);
        b["properties"].as_array_mut().unwrap().push(json!({"type": "olm.maxOpenShiftVersion", "value": max}));
        b
    };
    let v1 = limited("1.0.0", None, "1.0");
    let url = served.set("fleet.json", &catalog(&[(v1.clone(), None)]));
    add_catalog(&admin, &catalog_source("fleet", &url)).await;
    admin.post(&ns_path(&SUBSCRIPTION, NS, None), &subscription(PKG, "fleet", PKG, "Automatic")).await.unwrap();
    let csv = csv_phase(&admin, "node-exporter.v1.0.0", "Succeeded").await;
    let props = s(&csv, "/metadata/annotations/operatorframework.io~1properties");
    assert!(props.contains("olm.maxOpenShiftVersion") && !props.contains("olm.bundle.object"), "{props}");

    let v = wait_cv("Upgradeable=False", |v| condition(v, "Upgradeable").is_some_and(|c| c["status"] == "False")).await;
    let up = condition(&v, "Upgradeable").unwrap();
    assert_eq!(up["reason"], "IncompatibleOperatorsInstalled");
    assert_eq!(
        up["message"],
        "ClusterServiceVersions blocking minor version updates to 1.1 or higher: \
         maximum supported version for operators/node-exporter.v1.0.0 is 1.0"
    );

    // The minor update is refused, naming the operator; nothing is taken.
    ask("1.1.0", false).await;
    let v = wait_cv("1.1.0 refused", |v| {
        condition(v, "ReleaseAccepted").is_some_and(|c| c["reason"] == "PreconditionChecks")
    })
    .await;
    let said = s(condition(&v, "ReleaseAccepted").unwrap(), "/message");
    assert!(said.contains("Upgradeable: IncompatibleOperatorsInstalled: ClusterServiceVersions blocking"), "{said}");
    assert!(said.contains("operators/node-exporter.v1.0.0 is 1.0"), "{said}");
    assert_eq!(s(&v, "/status/desired/version"), "1.0.0");
    // A patch goes on.
    ask("1.0.1", false).await;
    wait_cv("1.0.1 completed", |v| {
        s(v, "/status/history/0/version") == "1.0.1" && s(v, "/status/history/0/state") == "Completed"
    })
    .await;

    // The operator's next bundle supports 1.1: once it replaced the old one, nothing holds the
    // fleet back and the minor update is taken.
    let v2 = limited("1.1.0", Some("node-exporter.v1.0.0"), "1.1");
    served.set("fleet.json", &catalog(&[(v1, None), (v2, Some("node-exporter.v1.0.0"))]));
    csv_phase(&admin, "node-exporter.v1.1.0", "Succeeded").await;
    wait_cv("Upgradeable no longer False", |v| condition(v, "Upgradeable").is_none()).await;
    ask("1.1.0", false).await;
    let v = wait_cv("1.1.0 completed", |v| {
        s(v, "/status/history/0/version") == "1.1.0" && s(v, "/status/history/0/state") == "Completed"
    })
    .await;
    assert_eq!(s(&v, "/status/history/0/acceptedRisks"), "", "nothing overridden");

    // On 1.1, the same operator holds back 1.2; a limit that does not read blocks too (OLM
    // counts it incompatible), naming the CSV.
    let v = wait_cv("1.2 held back", |v| condition(v, "Upgradeable").is_some_and(|c| c["status"] == "False")).await;
    assert_eq!(
        condition(&v, "Upgradeable").unwrap()["message"],
        "ClusterServiceVersions blocking minor version updates to 1.2 or higher: \
         maximum supported version for operators/node-exporter.v1.1.0 is 1.1"
    );
    let csv_path = ns_path(&CLUSTER_SERVICE_VERSION, NS, Some("node-exporter.v1.1.0"));
    let patch = json!({"metadata": {"annotations": {"operatorframework.io/properties":
        r#"{"properties":[{"type":"olm.maxOpenShiftVersion","value":"not-a-version"}]}"#}}});
    admin.patch(&csv_path, "application/merge-patch+json", &patch).await.unwrap().into_result().unwrap();
    let v = wait_cv("an unreadable limit blocks", |v| {
        condition(v, "Upgradeable").is_some_and(|c| c["message"].as_str().unwrap_or("").contains("not-a-version"))
    })
    .await;
    let said = s(condition(&v, "Upgradeable").unwrap(), "/message");
    assert!(said.contains("operators/node-exporter.v1.1.0: failed to parse"), "{said}");
}

/// An OLM install manifest as OperatorHub gives it (an OperatorGroup beside the Subscription)
/// applies with kubectl as it is; the group's `status.namespaces` is filled; a second group in
/// the namespace holds the plan back, saying why, until one is deleted; what aloft cannot use of
/// a group is refused naming the field.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operator_groups_apply_as_olm_manifests_have_them_and_two_hold_an_install_back() {
    let c = Coordinator::start();
    let admin = c.client();
    let served = CatalogServer::start().await;
    let v1 = bundle("1.0.0", None, &[bundle_config("50-node-exporter", "/etc/node-exporter/version", "v1")]);
    let url = served.set("fleet.json", &catalog(&[(v1, None)]));
    add_catalog(&admin, &catalog_source("fleet", &url)).await;
    let group = |name: &str, targets: Value| {
        json!({"apiVersion": "operators.coreos.com/v1", "kind": "OperatorGroup",
               "metadata": {"name": name, "namespace": NS}, "spec": {"targetNamespaces": targets}})
    };
    let og_path = |name: Option<&str>| resource_path(OPERATOR_GROUP.path_ref(), Some(NS), name);
    admin
        .post(&path_of(&MACHINE_CONFIG_POOL, None), &aloft_tests::machine_config_pool("worker", "worker"))
        .await
        .unwrap()
        .into_result()
        .unwrap();

    // Refused, naming the field: a target that is no namespace name, a strategy OLM does not
    // know; under strict validation, what scopes an operator pod's permissions.
    let bad = [
        (group("bad", json!(["Operators"])), "spec.targetNamespaces[0]"),
        (
            json!({"apiVersion": "operators.coreos.com/v1", "kind": "OperatorGroup",
                   "metadata": {"name": "bad", "namespace": NS}, "spec": {"upgradeStrategy": {"name": "Fast"}}}),
            "spec.upgradeStrategy.name",
        ),
    ];
    for (obj, field) in bad {
        let r = admin.post(&og_path(None), &obj).await.unwrap();
        assert_eq!(r.code, 422, "{field}: {}", r.body);
        assert!(aloft_tests::cause_fields(&r.body).iter().any(|f| f == field), "{field}: {}", r.body);
    }
    let mut pod_scoped = group("bad", json!([NS]));
    pod_scoped["spec"]["serviceAccountName"] = json!("operator-sa");
    let r = admin.post(&format!("{}?fieldValidation=Strict", og_path(None)), &pod_scoped).await.unwrap();
    assert_eq!(r.code, 400, "{}", r.body);
    assert!(r.body["message"].as_str().unwrap().contains("spec.serviceAccountName"), "{}", r.body);

    // Two groups, then the subscription: the plan waits, saying why.
    let manifest = [group("operators-og", json!([NS])), subscription(PKG, "fleet", PKG, "Automatic")];
    let text: String = manifest.iter().map(|o| format!("---\n{}\n", yaml_serde::to_string(o).unwrap())).collect();
    let applied = match aloft_tests::kubectl_path() {
        Some(exe) => {
            let file = tempfile::NamedTempFile::new().unwrap();
            std::fs::write(file.path(), &text).unwrap();
            let home = tempfile::tempdir().unwrap();
            let out = std::process::Command::new(exe)
                .arg(format!("--kubeconfig={}", c.kubeconfig_path().display()))
                .args(["apply", "-f", file.path().to_str().unwrap()])
                .env("HOME", home.path())
                .env_remove("KUBECONFIG")
                .output()
                .unwrap();
            let said = String::from_utf8_lossy(&out.stdout).to_string();
            assert!(out.status.success(), "{said}{}", String::from_utf8_lossy(&out.stderr));
            said
        }
        None => {
            admin.post(&og_path(None), &manifest[0]).await.unwrap().into_result().unwrap();
            admin.post(&ns_path(&SUBSCRIPTION, NS, None), &manifest[1]).await.unwrap().into_result().unwrap();
            String::new()
        }
    };
    assert!(
        applied.is_empty() || applied.contains("operatorgroup.operators.coreos.com/operators-og created"),
        "{applied}"
    );
    let og = object_until(&admin, &og_path(Some("operators-og")), "the group's status", |og| {
        og.pointer("/status/namespaces").is_some()
    })
    .await;
    assert_eq!(og["status"]["namespaces"], json!([NS]));
    plan_for(&admin, PKG, "node-exporter.v1.0.0", "Complete").await;

    // A second group, and a second subscription's plan waits until it is gone.
    admin.post(&og_path(None), &group("all-namespaces", json!([]))).await.unwrap().into_result().unwrap();
    let all = object_until(&admin, &og_path(Some("all-namespaces")), "the second group's status", |og| {
        og.pointer("/status/namespaces").is_some()
    })
    .await;
    assert_eq!(all["status"]["namespaces"], json!([""]), "every namespace, as OLM writes it");
    admin.delete(&ns_path(&SUBSCRIPTION, NS, Some(PKG))).await.unwrap().into_result().unwrap();
    admin
        .delete(&ns_path(&CLUSTER_SERVICE_VERSION, NS, Some("node-exporter.v1.0.0")))
        .await
        .unwrap()
        .into_result()
        .unwrap();
    let again = subscription("again", "fleet", PKG, "Automatic");
    admin.post(&ns_path(&SUBSCRIPTION, NS, None), &again).await.unwrap().into_result().unwrap();
    let held = eventually(WAIT, "the plan held back", || {
        let admin = admin.clone();
        async move {
            let Some(sub) = get(&admin, &ns_path(&SUBSCRIPTION, NS, Some("again"))).await? else { return Ok(None) };
            let name = s(&sub, "/status/installPlanRef/name").to_string();
            if name.is_empty() {
                return Ok(None);
            }
            let plan = get(&admin, &ns_path(&INSTALL_PLAN, NS, Some(&name))).await?;
            Ok(plan.filter(|p| condition(p, "Installed").is_some_and(|c| c["reason"] == "TooManyOperatorGroups")))
        }
    })
    .await;
    let why = s(condition(&held, "Installed").unwrap(), "/message");
    assert!(why.contains("has 2 OperatorGroups (all-namespaces, operators-og)"), "{why}");
    assert_ne!(s(&held, "/status/phase"), "Complete");
    assert!(get(&admin, &ns_path(&CLUSTER_SERVICE_VERSION, NS, Some("node-exporter.v1.0.0"))).await.unwrap().is_none());

    admin.delete(&og_path(Some("all-namespaces"))).await.unwrap().into_result().unwrap();
    plan_for(&admin, "again", "node-exporter.v1.0.0", "Complete").await;
    csv_phase(&admin, "node-exporter.v1.0.0", "Succeeded").await;
}

/// A bundle of `package` at `version` with its CSV inline and the given extra properties.
fn bundle_of(package: &str, version: &str, more: &[Value]) -> Value {
    bundle_blob(package, version, &csv_of(package, version), more)
}

/// A catalog whose tuned-exporter needs base-tuning 1.2 to 2.0 and the Profile API
/// (base-tuning's channels: stable 1.1.0 -> 1.3.0, old 1.1.0; both versions provide Profile),
/// and whose orphan-exporter also needs a package no catalog has; served at `fleet`.
async fn dependency_catalog(admin: &Client, served: &CatalogServer) {
    let url = served.set("fleet.json", &stream_of(&dependency_blobs(), |_| true));
    add_catalog(admin, &catalog_source("fleet", &url)).await;
}

/// The blobs of the catalog [`dependency_catalog`] serves.
fn dependency_blobs() -> Vec<Value> {
    let profile = json!({"group": "tuning.example.com", "version": "v1", "kind": "Profile"});
    let required = |package: &str, range: &str| json!({"type": "olm.package.required", "value": {"packageName": package, "versionRange": range}});
    vec![
        json!({"schema": "olm.package", "name": "base-tuning", "defaultChannel": "stable"}),
        json!({"schema": "olm.channel", "package": "base-tuning", "name": "stable",
               "entries": [{"name": "base-tuning.v1.1.0"}, {"name": "base-tuning.v1.3.0", "replaces": "base-tuning.v1.1.0"}]}),
        json!({"schema": "olm.channel", "package": "base-tuning", "name": "old", "entries": [{"name": "base-tuning.v1.1.0"}]}),
        bundle_of("base-tuning", "1.1.0", &[json!({"type": "olm.gvk", "value": profile})]),
        bundle_of("base-tuning", "1.3.0", &[json!({"type": "olm.gvk", "value": profile})]),
        json!({"schema": "olm.package", "name": "tuned-exporter", "defaultChannel": "stable"}),
        json!({"schema": "olm.channel", "package": "tuned-exporter", "name": "stable", "entries": [{"name": "tuned-exporter.v1.0.0"}]}),
        bundle_of(
            "tuned-exporter",
            "1.0.0",
            &[required("base-tuning", ">=1.2.0 <2.0.0"), json!({"type": "olm.gvk.required", "value": profile})],
        ),
        json!({"schema": "olm.package", "name": "orphan-exporter", "defaultChannel": "stable"}),
        json!({"schema": "olm.channel", "package": "orphan-exporter", "name": "stable", "entries": [{"name": "orphan-exporter.v1.0.0"}]}),
        bundle_of("orphan-exporter", "1.0.0", &[required("base-tuning", ">=1.0.0"), required("missing-op", ">=1.0.0")]),
    ]
}

/// [`dependency_blobs`] with base-tuning's stable channel made of `entries`, and a bundle, which
/// provides Profile as the others do, for each of the new `versions`.
fn with_base_tuning_stable(entries: Value, versions: &[&str]) -> Vec<Value> {
    let profile =
        json!({"type": "olm.gvk", "value": {"group": "tuning.example.com", "version": "v1", "kind": "Profile"}});
    let stable =
        |b: &Value| s(b, "/schema") == "olm.channel" && s(b, "/package") == "base-tuning" && s(b, "/name") == "stable";
    let mut blobs: Vec<Value> = dependency_blobs().into_iter().filter(|b| !stable(b)).collect();
    blobs.push(json!({"schema": "olm.channel", "package": "base-tuning", "name": "stable", "entries": entries}));
    blobs.extend(versions.iter().map(|v| bundle_of("base-tuning", v, std::slice::from_ref(&profile))));
    blobs
}

/// The JSON stream of the blobs of the packages `keep` keeps.
fn stream_of(blobs: &[Value], keep: impl Fn(&str) -> bool) -> String {
    let package =
        |b: &Value| if s(b, "/schema") == "olm.package" { s(b, "/name") } else { s(b, "/package") }.to_string();
    blobs.iter().filter(|b| keep(&package(b))).map(Value::to_string).collect::<Vec<_>>().join("\n")
}

/// The PackageManifests of the catalogs' namespace: (name, the catalog label), sorted.
async fn package_manifests(admin: &Client) -> anyhow::Result<Vec<(String, String)>> {
    let listed = admin.get(&ns_path(&PACKAGE_MANIFEST, CATALOG_NS, None)).await?.into_result()?;
    let mut out: Vec<(String, String)> = listed["items"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|p| (s(p, "/metadata/name").to_string(), s(p, "/metadata/labels/catalog").to_string()))
        .collect();
    out.sort();
    Ok(out)
}

/// PackageManifests follow their catalogs: one per package as read; a package the catalog
/// drops loses its PackageManifest; where two catalogs of a namespace have a package, the higher
/// priority one's is served, and once that catalog is deleted the other's is again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn package_manifests_follow_their_catalogs_and_priorities() {
    let c = Coordinator::start();
    let admin = c.client();
    let served = CatalogServer::start().await;
    dependency_catalog(&admin, &served).await;
    let until = |what: &'static str, want: Vec<(&'static str, &'static str)>| {
        let admin = admin.clone();
        async move {
            let want: Vec<(String, String)> = want.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect();
            eventually(WAIT, what, || {
                let (admin, want) = (admin.clone(), want.clone());
                async move { Ok((package_manifests(&admin).await? == want).then_some(())) }
            })
            .await
        }
    };
    until("one per package", vec![("base-tuning", "fleet"), ("orphan-exporter", "fleet"), ("tuned-exporter", "fleet")])
        .await;

    // A second catalog with base-tuning, at a higher priority, serves it.
    let url = served.set("mirror.json", &stream_of(&dependency_blobs(), |p| p == "base-tuning"));
    let mut mirror = catalog_source("mirror", &url);
    mirror["spec"]["priority"] = json!(5);
    add_catalog(&admin, &mirror).await;
    until(
        "base-tuning from the higher priority catalog",
        vec![("base-tuning", "mirror"), ("orphan-exporter", "fleet"), ("tuned-exporter", "fleet")],
    )
    .await;

    // The first catalog drops orphan-exporter (read again within its 1 s poll).
    served.set("fleet.json", &stream_of(&dependency_blobs(), |p| p != "orphan-exporter"));
    until("orphan-exporter gone with its package", vec![("base-tuning", "mirror"), ("tuned-exporter", "fleet")]).await;

    // The mirror goes, and with it its PackageManifest: base-tuning is the first catalog's again.
    admin.delete(&ns_path(&CATALOG_SOURCE, CATALOG_NS, Some("mirror"))).await.unwrap().into_result().unwrap();
    until("base-tuning back from the first catalog", vec![("base-tuning", "fleet"), ("tuned-exporter", "fleet")]).await;
}

/// The global catalog namespace's PackageManifests are listed in every namespace, as OLM's
/// package server lists them: after the namespace's own, moved into it (no owner reference to a
/// CatalogSource it does not have; `status.catalogSourceNamespace` says where they come from);
/// a get answers the namespace's own first; a watch of another namespace follows them too. The
/// global namespace's own list, and a list of every namespace, are the stored objects.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_global_catalog_namespaces_packages_are_listed_in_every_namespace() {
    let c = Coordinator::start();
    let admin = c.client();
    let served = CatalogServer::start().await;
    dependency_catalog(&admin, &served).await;
    let apps = served.set("apps.json", &stream_of(&dependency_blobs(), |p| p == "tuned-exporter"));
    add_catalog_in(&admin, NS, "apps", &apps).await;
    let listed = |ns: &'static str, query: &'static str| {
        let admin = admin.clone();
        async move {
            let l = admin.get(&format!("{}{query}", ns_path(&PACKAGE_MANIFEST, ns, None))).await?.into_result()?;
            anyhow::Ok(l["items"].as_array().cloned().unwrap_or_default())
        }
    };
    let shown = |items: &[Value]| -> Vec<String> {
        items
            .iter()
            .map(|p| {
                format!(
                    "{}/{} {}",
                    s(p, "/metadata/namespace"),
                    s(p, "/metadata/name"),
                    s(p, "/metadata/labels/catalog")
                )
            })
            .collect()
    };
    let items = eventually(WAIT, "both catalogs' packages in the namespace", || async {
        let items = listed(NS, "").await?;
        Ok((items.len() == 4).then_some(items))
    })
    .await;
    assert_eq!(
        shown(&items),
        [
            "operators/tuned-exporter apps",
            "operators/base-tuning fleet",
            "operators/orphan-exporter fleet",
            "operators/tuned-exporter fleet"
        ],
        "the namespace's own first, then the global namespace's, moved into it"
    );
    let base = &items[1];
    assert_eq!(s(base, "/status/catalogSourceNamespace"), CATALOG_NS);
    assert!(base["metadata"].get("ownerReferences").is_none(), "{base}");
    assert!(items[0]["metadata"]["ownerReferences"].is_array(), "the namespace's own is as stored: {}", items[0]);

    // Any namespace, even one with no object of its own.
    assert_eq!(
        shown(&listed("team-b", "").await.unwrap()),
        ["team-b/base-tuning fleet", "team-b/orphan-exporter fleet", "team-b/tuned-exporter fleet"]
    );
    assert_eq!(shown(&listed(NS, "?labelSelector=catalog%3Dapps").await.unwrap()), ["operators/tuned-exporter apps"]);
    assert_eq!(
        shown(&listed(CATALOG_NS, "").await.unwrap()),
        ["olm/base-tuning fleet", "olm/orphan-exporter fleet", "olm/tuned-exporter fleet"],
        "the global namespace lists its own"
    );
    let every =
        admin.get("/apis/packages.operators.coreos.com/v1/packagemanifests").await.unwrap().into_result().unwrap();
    assert_eq!(
        shown(every["items"].as_array().unwrap()),
        [
            "olm/base-tuning fleet",
            "olm/orphan-exporter fleet",
            "olm/tuned-exporter fleet",
            "operators/tuned-exporter apps"
        ],
        "every namespace: the stored objects, once each"
    );

    // A get: the namespace's own, else the global one's; nothing for a package neither has.
    let got = |ns: &'static str, name: &'static str| {
        let admin = admin.clone();
        async move { get(&admin, &ns_path(&PACKAGE_MANIFEST, ns, Some(name))).await.unwrap() }
    };
    let tuned = got(NS, "tuned-exporter").await.unwrap();
    assert_eq!(s(&tuned, "/metadata/labels/catalog"), "apps");
    let base = got(NS, "base-tuning").await.unwrap();
    assert_eq!((s(&base, "/metadata/namespace"), s(&base, "/metadata/labels/catalog")), (NS, "fleet"));
    assert!(got(NS, "missing-op").await.is_none());

    // A watch of another namespace: the global ones as ADDED, then the change of a global
    // catalog, in that namespace.
    let mut w =
        aloft_tests::WatchStream::open(&admin, &format!("{}?watch=true", ns_path(&PACKAGE_MANIFEST, "team-b", None)))
            .await
            .unwrap();
    let mut seen = Vec::new();
    for _ in 0..3 {
        let ev = w.next(WAIT).await.unwrap().expect("an event");
        seen.push(format!(
            "{} {}/{}",
            s(&ev, "/type"),
            s(&ev, "/object/metadata/namespace"),
            s(&ev, "/object/metadata/name")
        ));
    }
    seen.sort();
    assert_eq!(seen, ["ADDED team-b/base-tuning", "ADDED team-b/orphan-exporter", "ADDED team-b/tuned-exporter"]);
    served.set("fleet.json", &stream_of(&dependency_blobs(), |p| p != "orphan-exporter"));
    let gone = loop {
        let ev = w.next(WAIT).await.unwrap().expect("an event");
        assert_eq!(s(&ev, "/object/metadata/namespace"), "team-b", "{ev}");
        if s(&ev, "/type") != "MODIFIED" {
            break ev;
        }
    };
    assert_eq!((s(&gone, "/type"), s(&gone, "/object/metadata/name")), ("DELETED", "orphan-exporter"), "{gone}");
}

/// The names of the Subscriptions of the tests' namespace, sorted.
async fn subscription_names(admin: &Client) -> Vec<String> {
    let listed = admin.get(&ns_path(&SUBSCRIPTION, NS, None)).await.unwrap().into_result().unwrap();
    let mut names: Vec<String> =
        listed["items"].as_array().unwrap().iter().map(|x| s(x, "/metadata/name").to_string()).collect();
    names.sort();
    names
}

/// Where the namespace's plan for a CSV comes among its plans: they are numbered in the order
/// they were made (`spec.generation`).
async fn plan_order(admin: &Client) -> impl Fn(&str) -> i64 {
    let listed = admin.get(&ns_path(&INSTALL_PLAN, NS, None)).await.unwrap().into_result().unwrap();
    move |csv: &str| {
        listed["items"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|p| s(p, "/spec/clusterServiceVersionNames/0") == csv)
            .and_then(|p| p["spec"]["generation"].as_i64())
            .unwrap_or_else(|| panic!("no plan for {csv}: {listed}"))
    }
}

/// The messages of the namespace's Events with `reason`.
async fn event_messages(admin: &Client, reason: &str) -> Vec<String> {
    let events = admin.get(&ns_path(&EVENT, NS, None)).await.unwrap().into_result().unwrap();
    events["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|e| s(e, "/reason") == reason)
        .map(|e| s(e, "/message").to_string())
        .collect()
}

/// A bundle's dependencies (`olm.package.required`, `olm.gvk.required`) are subscribed to as
/// OLM subscribes to them: a Subscription of their own, named as OLM names it, starting at the
/// bundle nearest the default channel's head that meets them; the dependent bundle is planned
/// only once they are installed. A dependency no catalog has fails the resolution, naming it,
/// and nothing is subscribed to for the others (all or nothing, as a resolution is).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bundles_dependencies_are_subscribed_to_and_installed_first() {
    let c = Coordinator::start();
    let admin = c.client();
    let served = CatalogServer::start().await;
    dependency_catalog(&admin, &served).await;

    // One dependency no catalog provides: resolution fails naming each, nothing is created.
    let orphan = subscribe_until(
        &admin,
        subscription("orphan", "fleet", "orphan-exporter", "Automatic"),
        "ResolutionFailed",
        |s| cond_true(s, "ResolutionFailed"),
    )
    .await;
    let why = s(condition(&orphan, "ResolutionFailed").unwrap(), "/message").to_string();
    for words in [
        "constraints not satisfiable: bundle orphan-exporter.v1.0.0 requires",
        r#"package "missing-op" in range ">=1.0.0" (olm.package.required): no bundle of the catalogs olm/fleet provides it"#,
        r#"package "base-tuning" in range ">=1.0.0" (olm.package.required): base-tuning.v1.3.0 of olm/fleet meets it"#,
    ] {
        assert!(why.contains(words), "{words:?} in {why}");
    }
    assert_eq!(subscription_names(&admin).await, ["orphan"], "nothing subscribed for a resolution that fails");

    // Both of tuned-exporter's dependencies are met by base-tuning 1.3.0: one Subscription,
    // which asks for approval as its dependent does, and the dependent waits for it.
    let tuned = subscribe_until(
        &admin,
        subscription("tuned", "fleet", "tuned-exporter", "Manual"),
        "waiting for its dependencies",
        |s| condition(s, "InstallPlanPending").is_some_and(|c| c["reason"] == "WaitingForDependencies"),
    )
    .await;
    let generated = "base-tuning-stable-fleet-olm";
    assert_eq!(subscription_names(&admin).await, [generated, "orphan", "tuned"]);
    let dep = get(&admin, &ns_path(&SUBSCRIPTION, NS, Some(generated))).await.unwrap().unwrap();
    for (ptr, want) in [
        ("/spec/name", "base-tuning"),
        ("/spec/channel", "stable"),
        ("/spec/startingCSV", "base-tuning.v1.3.0"),
        ("/spec/source", "fleet"),
        ("/spec/sourceNamespace", CATALOG_NS),
        ("/spec/installPlanApproval", "Manual"),
        ("/metadata/annotations/aloft.dev~1requiredBy", "tuned (tuned-exporter.v1.0.0)"),
    ] {
        assert_eq!(s(&dep, ptr), want, "{ptr} of {dep}");
    }
    assert_eq!(s(&tuned, "/status/state"), "UpgradePending");
    assert_eq!(s(&tuned, "/status/currentCSV"), "tuned-exporter.v1.0.0");
    assert_eq!(s(&tuned, "/status/installPlanRef/name"), "", "no plan of its own yet: {tuned}");
    let base_plan = plan_for(&admin, generated, "base-tuning.v1.3.0", "RequiresApproval").await;
    let waiting = eventually(WAIT, "the wait naming the dependency's plan", || {
        let admin = admin.clone();
        async move {
            let sub = get(&admin, &ns_path(&SUBSCRIPTION, NS, Some("tuned"))).await?;
            Ok(sub
                .and_then(|x| condition(&x, "InstallPlanPending").map(|c| s(c, "/message").to_string()))
                .filter(|m| m.contains("RequiresApproval")))
        }
    })
    .await;
    assert_eq!(
        waiting,
        format!(
            "tuned-exporter.v1.0.0 waits for its dependencies to be installed: \
             package \"base-tuning\" in range \">=1.2.0 <2.0.0\" (olm.package.required) from Subscription \"{generated}\" \
             (installing base-tuning.v1.3.0, its plan RequiresApproval); API tuning.example.com/v1 Profile \
             (olm.gvk.required) from Subscription \"{generated}\" (installing base-tuning.v1.3.0, its plan RequiresApproval)"
        )
    );
    approve(&admin, s(&base_plan, "/metadata/name")).await;
    let base = csv_phase(&admin, "base-tuning.v1.3.0", "Succeeded").await;
    let tuned_plan = plan_for(&admin, "tuned", "tuned-exporter.v1.0.0", "RequiresApproval").await;
    approve(&admin, s(&tuned_plan, "/metadata/name")).await;
    let dependent = csv_phase(&admin, "tuned-exporter.v1.0.0", "Succeeded").await;
    // The dependency's plan came first.
    let order = plan_order(&admin).await;
    assert!(order("base-tuning.v1.3.0") < order("tuned-exporter.v1.0.0"));
    assert_eq!(s(&dependent, "/metadata/namespace"), NS);
    assert_eq!(s(&base, "/metadata/namespace"), NS);
    let tuned = object_until(&admin, &ns_path(&SUBSCRIPTION, NS, Some("tuned")), "tuned's installed CSV", |x| {
        s(x, "/status/installedCSV") == "tuned-exporter.v1.0.0"
    })
    .await;
    assert!(!cond_true(&tuned, "ResolutionFailed"), "resolved: {tuned}");
    assert!(condition(&tuned, "InstallPlanPending").is_none(), "no longer waiting: {tuned}");
    let subscribed = event_messages(&admin, "DependencySubscribed").await;
    assert!(
        subscribed.len() == 1
            && subscribed[0].contains(generated)
            && subscribed[0].contains("API tuning.example.com/v1 Profile"),
        "one DependencySubscribed Event naming the Subscription and what it meets: {subscribed:?}"
    );
}

/// A catalog with a chain: app needs mid; mid's channel head (2.0.0) needs leaf, which no
/// catalog has, its 1.0.0 needs leaf2, which this one has; strict needs mid 2.x.
fn chain_blobs() -> Vec<Value> {
    let required = |package: &str, range: &str| json!({"type": "olm.package.required", "value": {"packageName": package, "versionRange": range}});
    let channel = |package: &str, entries: Value| json!({"schema": "olm.channel", "package": package, "name": "stable", "entries": entries});
    let mut blobs = Vec::new();
    for package in ["app", "strict", "mid", "leaf2"] {
        blobs.push(json!({"schema": "olm.package", "name": package, "defaultChannel": "stable"}));
    }
    blobs.extend([
        channel("app", json!([{"name": "app.v1.0.0"}])),
        bundle_of("app", "1.0.0", &[required("mid", ">=1.0.0")]),
        channel("strict", json!([{"name": "strict.v1.0.0"}])),
        bundle_of("strict", "1.0.0", &[required("mid", ">=2.0.0")]),
        channel("mid", json!([{"name": "mid.v1.0.0"}, {"name": "mid.v2.0.0", "replaces": "mid.v1.0.0"}])),
        bundle_of("mid", "1.0.0", &[required("leaf2", ">=1.0.0")]),
        bundle_of("mid", "2.0.0", &[required("leaf", ">=1.0.0")]),
        channel("leaf2", json!([{"name": "leaf2.v1.0.0"}])),
        bundle_of("leaf2", "1.0.0", &[]),
    ]);
    blobs
}

/// A dependency's own dependencies are resolved with it, as OLM's solver resolves a chain at
/// once: a chain that cannot be completed fails the dependent's resolution, naming where it
/// breaks, with nothing subscribed to; where the preferred bundle of a dependency needs what
/// no catalog has, the next one that can be installed is taken, and everything the chain needs
/// is subscribed to at once and installed before what needs it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dependency_chain_is_resolved_whole_and_installed_leaf_first() {
    let c = Coordinator::start();
    let admin = c.client();
    let served = CatalogServer::start().await;
    let url = served.set("chain.json", &stream_of(&chain_blobs(), |_| true));
    add_catalog(&admin, &catalog_source("chain", &url)).await;

    // strict needs mid 2.x, and mid 2.0.0 needs leaf: nothing is subscribed to.
    let strict =
        subscribe_until(&admin, subscription("strict", "chain", "strict", "Automatic"), "ResolutionFailed", |s| {
            cond_true(s, "ResolutionFailed")
        })
        .await;
    let why = s(condition(&strict, "ResolutionFailed").unwrap(), "/message").to_string();
    let words = r#"constraints not satisfiable: bundle strict.v1.0.0 requires package "mid" in range ">=2.0.0" (olm.package.required): mid.v2.0.0 of olm/chain provides it, but it requires package "leaf" in range ">=1.0.0" (olm.package.required), which no bundle of the catalogs provides"#;
    assert!(why.starts_with(words), "{words:?} in {why}");
    assert_eq!(subscription_names(&admin).await, ["strict"], "nothing subscribed for a chain that breaks");
    admin.delete(&ns_path(&SUBSCRIPTION, NS, Some("strict"))).await.unwrap().into_result().unwrap();

    // app takes mid 1.0.0, whose leaf2 is subscribed to in the same pass.
    let app = subscribe_until(
        &admin,
        subscription("app", "chain", "app", "Automatic"),
        "waiting for its dependencies",
        |s| condition(s, "InstallPlanPending").is_some_and(|c| c["reason"] == "WaitingForDependencies"),
    )
    .await;
    let (mid, leaf2) = ("mid-stable-chain-olm", "leaf2-stable-chain-olm");
    assert_eq!(subscription_names(&admin).await, ["app", leaf2, mid]);
    // The pass that subscribes says what the chain needs; the passes after it name the
    // dependency's Subscription, which says where it is.
    let waits = s(condition(&app, "InstallPlanPending").unwrap(), "/message").to_string();
    let first = format!(
        "app.v1.0.0 waits for its dependencies to be installed: package \"mid\" in range \">=1.0.0\" \
         (olm.package.required) from Subscription \"{mid}\" ("
    );
    assert!(waits.starts_with(&first), "{waits}");
    for (name, csv, by) in
        [(mid, "mid.v1.0.0", "app (app.v1.0.0)"), (leaf2, "leaf2.v1.0.0", "mid-stable-chain-olm (mid.v1.0.0)")]
    {
        let sub = get(&admin, &ns_path(&SUBSCRIPTION, NS, Some(name))).await.unwrap().unwrap();
        assert_eq!(s(&sub, "/spec/startingCSV"), csv, "{sub}");
        assert_eq!(s(&sub, "/metadata/annotations/aloft.dev~1requiredBy"), by, "{sub}");
        assert_eq!(s(&sub, "/spec/installPlanApproval"), "Automatic", "{sub}");
    }
    for csv in ["leaf2.v1.0.0", "mid.v1.0.0", "app.v1.0.0"] {
        csv_phase(&admin, csv, "Succeeded").await;
    }
    // mid stays on 1.0.0, as OLM's solver keeps it: its channel's 2.0.0 needs leaf, and its
    // Subscription says so without failing.
    let stays = object_until(&admin, &ns_path(&SUBSCRIPTION, NS, Some(mid)), "mid's upgrade held", |x| {
        cond_true(x, "UpgradeHeld")
    })
    .await;
    assert_not_installable(&stays, "mid.v1.0.0");
    // Each was planned only once what it needs was installed.
    let order = plan_order(&admin).await;
    assert!(order("leaf2.v1.0.0") < order("mid.v1.0.0") && order("mid.v1.0.0") < order("app.v1.0.0"));
    let subscribed = event_messages(&admin, "DependencySubscribed").await;
    assert!(
        subscribed.iter().any(|m| m
            .starts_with(&format!("created Subscription \"{leaf2}\" for mid.v1.0.0 (it requires package \"leaf2\""))),
        "{subscribed:?}"
    );
}

/// A Subscription that stays on `installed` because its channel's 2.0.0 needs `leaf`, which no
/// catalog has: not failed (OLM's solver keeps the installed bundle), `AtLatestKnown`, and
/// `UpgradeHeld` saying what 2.0.0 lacks.
fn assert_not_installable(sub: &Value, installed: &str) {
    let held = condition(sub, "UpgradeHeld").unwrap();
    assert_eq!(s(held, "/reason"), "NotInstallable", "{sub}");
    let words = format!(
        r#"{installed} stays installed: mid.v2.0.0 cannot be installed: bundle mid.v2.0.0 requires package "leaf" in range ">=1.0.0" (olm.package.required): no bundle of the catalogs olm/chain provides it; the upgrade goes on by itself once what it needs can be installed"#
    );
    assert_eq!(s(held, "/message"), words);
    assert!(!cond_true(sub, "ResolutionFailed"), "not a failure: {sub}");
    for (ptr, want) in
        [("/status/installedCSV", installed), ("/status/currentCSV", installed), ("/status/state", "AtLatestKnown")]
    {
        assert_eq!(s(sub, ptr), want, "{ptr} of {sub}");
    }
}

/// An upgrade that cannot be installed (its head needs what no catalog has) is passed over for
/// the next one that can, as OLM's solver passes over a bundle it cannot satisfy: mid's channel
/// goes 1.0.0 -> 1.5.0 -> 2.0.0, 2.0.0 skipping everything below it and needing `leaf`; a
/// Subscription installed at 1.0.0 moves to 1.5.0, saying why not 2.0.0, and then stays there,
/// saying what 2.0.0 lacks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upgrade_that_cannot_be_installed_is_passed_over_for_one_that_can() {
    let required = |package: &str| json!({"type": "olm.package.required", "value": {"packageName": package, "versionRange": ">=1.0.0"}});
    let mut blobs: Vec<Value> =
        chain_blobs().into_iter().filter(|b| b["package"] != "mid" || s(b, "/schema") == "olm.package").collect();
    blobs.extend([
        json!({"schema": "olm.channel", "package": "mid", "name": "stable", "entries": [
            {"name": "mid.v1.0.0"},
            {"name": "mid.v1.5.0", "replaces": "mid.v1.0.0"},
            {"name": "mid.v2.0.0", "replaces": "mid.v1.5.0", "skipRange": ">=1.0.0 <2.0.0"}]}),
        bundle_of("mid", "1.0.0", &[]),
        bundle_of("mid", "1.5.0", &[required("leaf2")]),
        bundle_of("mid", "2.0.0", &[required("leaf")]),
    ]);
    let c = Coordinator::start();
    let admin = c.client();
    let served = CatalogServer::start().await;
    let url = served.set("chain.json", &stream_of(&blobs, |_| true));
    add_catalog(&admin, &catalog_source("chain", &url)).await;
    let mut sub = subscription("mid", "chain", "mid", "Automatic");
    sub["spec"]["startingCSV"] = json!("mid.v1.0.0");
    let settled = subscribe_until(&admin, sub, "mid settled on 1.5.0", |x| {
        s(x, "/status/installedCSV") == "mid.v1.5.0" && cond_true(x, "UpgradeHeld")
    })
    .await;
    assert_not_installable(&settled, "mid.v1.5.0");
    // 1.5.0 needed leaf2, subscribed to and installed first.
    assert_eq!(eventually_csvs(&admin, &["leaf2.v1.0.0", "mid.v1.5.0"]).await, ["leaf2.v1.0.0", "mid.v1.5.0"]);
    let held = event_messages(&admin, "UpgradeHeld").await;
    assert!(
        held.iter().any(|m| m.starts_with(
            r#"mid.v1.5.0 is installed instead of mid.v2.0.0: mid.v2.0.0 cannot be installed: bundle mid.v2.0.0 requires package "leaf""#
        )),
        "{held:?}"
    );
}

/// A new Subscription whose channel head cannot be installed (mid 2.0.0 needs `leaf`, which no
/// catalog has) gets the newest bundle of the channel that can, as OLM's solver, for which
/// every entry of the channel is a candidate: mid 1.0.0, with its `leaf2` subscribed to and
/// installed first, saying why not 2.0.0; then it stays there, held. A Subscription whose
/// channel has nothing that can be installed (strict) still fails its resolution.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_subscription_whose_head_cannot_be_installed_gets_the_newest_that_can() {
    let c = Coordinator::start();
    let admin = c.client();
    let served = CatalogServer::start().await;
    let url = served.set("chain.json", &stream_of(&chain_blobs(), |_| true));
    add_catalog(&admin, &catalog_source("chain", &url)).await;
    let waiting =
        subscribe_until(&admin, subscription("mid", "chain", "mid", "Automatic"), "mid waits for leaf2", |x| {
            condition(x, "InstallPlanPending").is_some_and(|c| c["reason"] == "WaitingForDependencies")
        })
        .await;
    assert_eq!(s(&waiting, "/status/currentCSV"), "mid.v1.0.0", "{waiting}");
    assert!(!cond_true(&waiting, "ResolutionFailed"), "{waiting}");
    let held = event_messages(&admin, "UpgradeHeld").await;
    assert!(
        held.iter().any(|m| m.starts_with(
            r#"mid.v1.0.0 is installed instead of mid.v2.0.0: mid.v2.0.0 cannot be installed: bundle mid.v2.0.0 requires package "leaf""#
        )),
        "{held:?}"
    );
    assert_eq!(subscription_names(&admin).await, ["leaf2-stable-chain-olm", "mid"]);
    for csv in ["leaf2.v1.0.0", "mid.v1.0.0"] {
        csv_phase(&admin, csv, "Succeeded").await;
    }
    let stays = object_until(&admin, &ns_path(&SUBSCRIPTION, NS, Some("mid")), "mid held at 1.0.0", |x| {
        s(x, "/status/installedCSV") == "mid.v1.0.0" && cond_true(x, "UpgradeHeld")
    })
    .await;
    assert_not_installable(&stays, "mid.v1.0.0");
    let order = plan_order(&admin).await;
    assert!(order("leaf2.v1.0.0") < order("mid.v1.0.0"));

    let strict =
        subscribe_until(&admin, subscription("strict", "chain", "strict", "Automatic"), "ResolutionFailed", |x| {
            cond_true(x, "ResolutionFailed")
        })
        .await;
    assert_eq!(s(&strict, "/status/installedCSV"), "", "{strict}");
}

/// One operator of a package, and one provider of an API, in a namespace, as OLM's solver
/// allows: with base-tuning installed (it provides Profile), a second Subscription of
/// base-tuning, and one of alt-tuning (it provides Profile too), each fail their resolution
/// naming what holds it, with nothing planned and base-tuning untouched; once base-tuning is
/// uninstalled, alt-tuning goes on by itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_namespace_has_one_operator_of_a_package_and_one_provider_of_an_api() {
    let profile = json!({"group": "tuning.example.com", "version": "v1", "kind": "Profile"});
    let mut blobs = dependency_blobs();
    blobs.extend([
        json!({"schema": "olm.package", "name": "alt-tuning", "defaultChannel": "stable"}),
        json!({"schema": "olm.channel", "package": "alt-tuning", "name": "stable", "entries": [{"name": "alt-tuning.v1.0.0"}]}),
        bundle_of("alt-tuning", "1.0.0", &[json!({"type": "olm.gvk", "value": profile})]),
    ]);
    let c = Coordinator::start();
    let admin = c.client();
    let served = CatalogServer::start().await;
    let url = served.set("fleet.json", &stream_of(&blobs, |_| true));
    add_catalog(&admin, &catalog_source("fleet", &url)).await;
    admin
        .post(&ns_path(&SUBSCRIPTION, NS, None), &subscription("base", "fleet", "base-tuning", "Automatic"))
        .await
        .unwrap()
        .into_result()
        .unwrap();
    csv_phase(&admin, "base-tuning.v1.3.0", "Succeeded").await;

    let mut again = subscription("base-old", "fleet", "base-tuning", "Automatic");
    again["spec"]["channel"] = json!("old");
    let again = subscribe_until(&admin, again, "base-old ResolutionFailed", |x| cond_true(x, "ResolutionFailed")).await;
    let why = s(condition(&again, "ResolutionFailed").unwrap(), "/message").to_string();
    let words = r#"constraints not satisfiable: Subscription "base" of this namespace holds package "base-tuning" (installed base-tuning.v1.3.0), and there can be only one operator from package base-tuning in a namespace"#;
    assert!(why.starts_with(words), "{words:?} in {why}");
    let alt =
        subscribe_until(&admin, subscription("alt", "fleet", "alt-tuning", "Automatic"), "alt ResolutionFailed", |x| {
            cond_true(x, "ResolutionFailed")
        })
        .await;
    let why = s(condition(&alt, "ResolutionFailed").unwrap(), "/message").to_string();
    let words = "constraints not satisfiable: base-tuning.v1.3.0 and alt-tuning.v1.0.0 provide Profile (tuning.example.com/v1), and a namespace has one provider of an API; nothing is installed for it, and it goes on by itself once the other is uninstalled";
    assert!(why.starts_with(words), "{words:?} in {why}");
    for refused in [&again, &alt] {
        assert_eq!(s(refused, "/status/installPlanRef/name"), "", "no plan: {refused}");
    }
    // base-tuning's own Subscription is not disturbed by either.
    let base = get(&admin, &ns_path(&SUBSCRIPTION, NS, Some("base"))).await.unwrap().unwrap();
    assert!(!cond_true(&base, "ResolutionFailed"), "{base}");
    assert_eq!(s(&base, "/status/state"), "AtLatestKnown", "{base}");
    let listed = admin.get(&ns_path(&CLUSTER_SERVICE_VERSION, NS, None)).await.unwrap().into_result().unwrap();
    let csvs: Vec<&str> = listed["items"].as_array().unwrap().iter().map(|c| s(c, "/metadata/name")).collect();
    assert_eq!(csvs, ["base-tuning.v1.3.0"]);

    // Uninstalled (the second Subscription of its package first), base-tuning makes room.
    for path in [
        ns_path(&SUBSCRIPTION, NS, Some("base-old")),
        ns_path(&SUBSCRIPTION, NS, Some("base")),
        ns_path(&CLUSTER_SERVICE_VERSION, NS, Some("base-tuning.v1.3.0")),
    ] {
        admin.delete(&path).await.unwrap().into_result().unwrap();
    }
    csv_phase(&admin, "alt-tuning.v1.0.0", "Succeeded").await;
}

/// An operator whose Subscription was deleted (its CSV kept, as OLM keeps it) is taken as
/// installed by a new Subscription of its package, which upgrades it along its own channel:
/// the new CSV replaces the kept one, and the package never has two operators side by side.
/// (OLM fails that Subscription instead: "clusterserviceversion base-tuning.v1.1.0 exists and
/// is not referenced by a subscription", until someone deletes the running operator.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_subscription_takes_over_the_operator_its_package_left_behind() {
    let c = Coordinator::start();
    let admin = c.client();
    let served = CatalogServer::start().await;
    dependency_catalog(&admin, &served).await;
    let mut old = subscription("first", "fleet", "base-tuning", "Automatic");
    old["spec"]["channel"] = json!("old");
    admin.post(&ns_path(&SUBSCRIPTION, NS, None), &old).await.unwrap().into_result().unwrap();
    csv_phase(&admin, "base-tuning.v1.1.0", "Succeeded").await;
    admin.delete(&ns_path(&SUBSCRIPTION, NS, Some("first"))).await.unwrap().into_result().unwrap();
    eventually(WAIT, "the Subscription gone", || {
        let admin = admin.clone();
        async move { Ok(get(&admin, &ns_path(&SUBSCRIPTION, NS, Some("first"))).await?.is_none().then_some(())) }
    })
    .await;
    assert_eq!(eventually_csvs(&admin, &["base-tuning.v1.1.0"]).await, ["base-tuning.v1.1.0"], "the CSV stays");

    admin
        .post(&ns_path(&SUBSCRIPTION, NS, None), &subscription("again", "fleet", "base-tuning", "Automatic"))
        .await
        .unwrap()
        .into_result()
        .unwrap();
    let upgraded = csv_phase(&admin, "base-tuning.v1.3.0", "Succeeded").await;
    assert_eq!(s(&upgraded, "/spec/replaces"), "base-tuning.v1.1.0", "an upgrade of the kept one: {upgraded}");
    assert_eq!(eventually_csvs(&admin, &["base-tuning.v1.3.0"]).await, ["base-tuning.v1.3.0"]);
    let again = object_until(&admin, &ns_path(&SUBSCRIPTION, NS, Some("again")), "again at 1.3.0", |x| {
        s(x, "/status/installedCSV") == "base-tuning.v1.3.0" && s(x, "/status/state") == "AtLatestKnown"
    })
    .await;
    assert!(!cond_true(&again, "ResolutionFailed"), "{again}");
    assert_eq!(
        event_messages(&admin, "AdoptedCSV").await,
        ["base-tuning.v1.1.0 of package base-tuning is installed and no Subscription holds it: this Subscription \
          takes it as installed, and upgrades it along channel \"stable\""]
    );
    let plans = admin.get(&ns_path(&INSTALL_PLAN, NS, None)).await.unwrap().into_result().unwrap();
    let planned: Vec<&str> =
        plans["items"].as_array().unwrap().iter().map(|p| s(p, "/spec/clusterServiceVersionNames/0")).collect();
    // The first Subscription's plan went with it (its owner); the new one made one, the upgrade.
    assert_eq!(planned, ["base-tuning.v1.3.0"], "{plans}");
    assert_eq!(s(&plans["items"][0], "/metadata/ownerReferences/0/name"), "again", "{plans}");

    // Two operators of the package that no Subscription holds (one installed by hand): which
    // to take is the user's to say, and nothing is planned meanwhile.
    admin.delete(&ns_path(&SUBSCRIPTION, NS, Some("again"))).await.unwrap().into_result().unwrap();
    install_by_hand(&admin, "base-tuning", "1.2.0").await;
    let third = subscribe_until(
        &admin,
        subscription("third", "fleet", "base-tuning", "Automatic"),
        "third ResolutionFailed",
        |x| cond_true(x, "ResolutionFailed"),
    )
    .await;
    assert_eq!(
        s(condition(&third, "ResolutionFailed").unwrap(), "/message"),
        "constraints not satisfiable: clusterserviceversions base-tuning.v1.2.0, base-tuning.v1.3.0 of package \
         base-tuning exist and are not referenced by a subscription, and there can be only one operator from package \
         base-tuning in a namespace; delete all but one of them, and this Subscription takes that one"
    );
    assert_eq!((s(&third, "/status/installedCSV"), s(&third, "/status/installPlanRef/name")), ("", ""), "{third}");
    assert_eq!(eventually_csvs(&admin, &["base-tuning.v1.2.0", "base-tuning.v1.3.0"]).await.len(), 2);
}

/// An operator installed by hand, at a version its catalog does not have, is taken over by a
/// new Subscription, which stays there while nothing newer covers it; once the catalog
/// publishes an entry whose skipRange covers the version the CSV's properties give (the
/// catalog cannot say it), the Subscription upgrades to it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_installed_by_hand_is_upgraded_by_the_skip_range_that_covers_it() {
    let before: Vec<Value> = with_base_tuning_stable(json!([{"name": "base-tuning.v1.1.0"}]), &[])
        .into_iter()
        .filter(|b| s(b, "/name") != "base-tuning.v1.3.0")
        .collect();
    let after = with_base_tuning_stable(
        json!([{"name": "base-tuning.v1.1.0"},
               {"name": "base-tuning.v1.3.0", "replaces": "base-tuning.v1.1.0", "skipRange": ">=1.0.0 <1.3.0"}]),
        &[],
    );
    let c = Coordinator::start();
    let admin = c.client();
    let served = CatalogServer::start().await;
    let url = served.set("fleet.json", &stream_of(&before, |_| true));
    add_catalog(&admin, &catalog_source("fleet", &url)).await;
    install_by_hand(&admin, "base-tuning", "1.2.0").await;
    csv_phase(&admin, "base-tuning.v1.2.0", "Succeeded").await;
    let sub =
        subscribe_until(&admin, subscription("base", "fleet", "base-tuning", "Automatic"), "base took 1.2.0", |x| {
            s(x, "/status/installedCSV") == "base-tuning.v1.2.0" && s(x, "/status/state") == "AtLatestKnown"
        })
        .await;
    assert!(!cond_true(&sub, "ResolutionFailed"), "{sub}");

    served.set("fleet.json", &stream_of(&after, |_| true));
    let upgraded = csv_phase(&admin, "base-tuning.v1.3.0", "Succeeded").await;
    assert_eq!(s(&upgraded, "/spec/replaces"), "base-tuning.v1.2.0", "{upgraded}");
    assert_eq!(eventually_csvs(&admin, &["base-tuning.v1.3.0"]).await, ["base-tuning.v1.3.0"]);
    object_until(&admin, &ns_path(&SUBSCRIPTION, NS, Some("base")), "base at 1.3.0", |x| {
        s(x, "/status/installedCSV") == "base-tuning.v1.3.0" && s(x, "/status/state") == "AtLatestKnown"
    })
    .await;
}

/// The blobs of a catalog whose ring-a and ring-b each need the other (`olm.package.required`).
fn cycle_blobs() -> Vec<Value> {
    let required = |package: &str| json!({"type": "olm.package.required", "value": {"packageName": package, "versionRange": ">=1.0.0"}});
    let mut blobs = Vec::new();
    for (package, other) in [("ring-a", "ring-b"), ("ring-b", "ring-a")] {
        blobs.push(json!({"schema": "olm.package", "name": package, "defaultChannel": "stable"}));
        blobs.push(json!({"schema": "olm.channel", "package": package, "name": "stable", "entries": [{"name": format!("{package}.v1.0.0")}]}));
        blobs.push(bundle_of(package, "1.0.0", &[required(other)]));
    }
    blobs
}

/// Two bundles that need each other are both installed, as OLM installs a dependency cycle (in
/// one plan): subscribed to alone, ring-a gets ring-b subscribed to and is installed without
/// waiting for it, saying why; subscribed to together, whichever resolves second sees the other
/// waiting for it and goes first; needed by hub (a cycle below the bundle subscribed to), both
/// get Subscriptions, one goes first as when subscribed to together, and hub is installed after
/// both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_operators_that_need_each_other_are_both_installed() {
    let mut blobs = cycle_blobs();
    blobs.extend([
        json!({"schema": "olm.package", "name": "hub", "defaultChannel": "stable"}),
        json!({"schema": "olm.channel", "package": "hub", "name": "stable", "entries": [{"name": "hub.v1.0.0"}]}),
        bundle_of(
            "hub",
            "1.0.0",
            &[json!({"type": "olm.package.required", "value": {"packageName": "ring-a", "versionRange": ">=1.0.0"}})],
        ),
    ]);
    for case in ["alone", "together", "below"] {
        let c = Coordinator::start();
        let admin = c.client();
        let served = CatalogServer::start().await;
        let url = served.set("ring.json", &stream_of(&blobs, |_| true));
        add_catalog(&admin, &catalog_source("ring", &url)).await;
        let subs = match case {
            "alone" => vec![subscription("ring-a", "ring", "ring-a", "Automatic")],
            "together" => vec![
                subscription("ring-a", "ring", "ring-a", "Automatic"),
                subscription("ring-b", "ring", "ring-b", "Automatic"),
            ],
            _ => vec![subscription("hub", "ring", "hub", "Automatic")],
        };
        for sub in &subs {
            admin.post(&ns_path(&SUBSCRIPTION, NS, None), sub).await.unwrap().into_result().unwrap();
        }
        for csv in ["ring-a.v1.0.0", "ring-b.v1.0.0"] {
            csv_phase(&admin, csv, "Succeeded").await;
        }
        let (a, b) = match case {
            "alone" => ("ring-a", "ring-b-stable-ring-olm"),
            "together" => ("ring-a", "ring-b"),
            _ => ("ring-a-stable-ring-olm", "ring-b-stable-ring-olm"),
        };
        let mut want = vec![a, b];
        if case == "below" {
            csv_phase(&admin, "hub.v1.0.0", "Succeeded").await;
            let order = plan_order(&admin).await;
            assert!(order("hub.v1.0.0") > order("ring-a.v1.0.0").max(order("ring-b.v1.0.0")), "hub after both");
            want.insert(0, "hub");
        }
        assert_eq!(subscription_names(&admin).await, want, "{case}");
        for name in &want {
            let sub = object_until(&admin, &ns_path(&SUBSCRIPTION, NS, Some(name)), "installed", |x| {
                s(x, "/status/state") == "AtLatestKnown"
            })
            .await;
            assert!(!cond_true(&sub, "ResolutionFailed"), "{sub}");
        }
        let cycle = event_messages(&admin, "DependencyCycle").await;
        let head = |me: &str| {
            format!("{me}.v1.0.0 is installed without waiting for its dependencies, which need it in turn (a dependency cycle, which OLM installs in one plan): ")
        };
        let said: Vec<String> = if case == "alone" {
            vec![format!(
                r#"{}ring-b.v1.0.0 (Subscription "ring-b-stable-ring-olm") meets package "ring-b" in range ">=1.0.0" (olm.package.required) and needs ring-a.v1.0.0 in turn"#,
                head("ring-a")
            )]
        } else {
            // The one resolved second goes first (either way one of them).
            [("ring-b", "ring-a", a), ("ring-a", "ring-b", b)]
                .iter()
                .map(|(me, other, name)| format!(r#"{}Subscription "{name}" meets package "{other}" in range ">=1.0.0" (olm.package.required) and waits for {me}.v1.0.0 itself"#, head(me)))
                .collect()
        };
        assert!(cycle.iter().any(|m| said.contains(m)), "{case}: one of {said:?} in {cycle:?}");
    }
}

/// An operator's Subscription and its dependency's, applied together, get bundles that work
/// together, as OLM's solver chooses for a namespace's Subscriptions at once: base-tuning's
/// channel head 2.0.0 is out of tuned-exporter's range (`>=1.2.0 <2.0.0`), so the Subscription
/// of base-tuning installs 1.3.0, saying why not 2.0.0, whichever of the two is resolved first
/// (both exist before their catalog does; "base" sorts before "tuned", "zz-base" after), and
/// then holds there; no second Subscription of base-tuning is made.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscriptions_applied_together_get_bundles_that_work_together() {
    let blobs = with_base_tuning_stable(
        json!([{"name": "base-tuning.v1.1.0"}, {"name": "base-tuning.v1.3.0", "replaces": "base-tuning.v1.1.0"},
               {"name": "base-tuning.v2.0.0", "replaces": "base-tuning.v1.3.0"}]),
        &["2.0.0"],
    );
    for base in ["base", "zz-base"] {
        let c = Coordinator::start();
        let admin = c.client();
        let served = CatalogServer::start().await;
        for sub in [
            subscription(base, "fleet", "base-tuning", "Automatic"),
            subscription("tuned", "fleet", "tuned-exporter", "Automatic"),
        ] {
            admin.post(&ns_path(&SUBSCRIPTION, NS, None), &sub).await.unwrap().into_result().unwrap();
        }
        let url = served.set("fleet.json", &stream_of(&blobs, |_| true));
        add_catalog(&admin, &catalog_source("fleet", &url)).await;
        csv_phase(&admin, "base-tuning.v1.3.0", "Succeeded").await;
        csv_phase(&admin, "tuned-exporter.v1.0.0", "Succeeded").await;
        let held = object_until(&admin, &ns_path(&SUBSCRIPTION, NS, Some(base)), "base held at 1.3.0", |x| {
            cond_true(x, "UpgradeHeld") && s(x, "/status/installedCSV") == "base-tuning.v1.3.0"
        })
        .await;
        assert_eq!(s(condition(&held, "UpgradeHeld").unwrap(), "/reason"), "RequiredByDependents", "{held}");
        let passed = event_messages(&admin, "UpgradeHeld").await;
        let words = r#"base-tuning.v1.3.0 is installed instead of base-tuning.v2.0.0: base-tuning.v2.0.0 cannot be installed: tuned-exporter.v1.0.0 requires package "base-tuning" in range ">=1.2.0 <2.0.0" (olm.package.required), which it does not meet"#;
        assert!(passed.iter().any(|m| m == words), "{base}: {words:?} in {passed:?}");
        let listed = admin.get(&ns_path(&CLUSTER_SERVICE_VERSION, NS, None)).await.unwrap().into_result().unwrap();
        let csvs: Vec<&str> = listed["items"].as_array().unwrap().iter().map(|c| s(c, "/metadata/name")).collect();
        assert_eq!(csvs, ["base-tuning.v1.3.0", "tuned-exporter.v1.0.0"], "{base}: never 2.0.0");
        let mut names = vec![base, "tuned"];
        names.sort();
        assert_eq!(subscription_names(&admin).await, names, "{base}");
    }
}

/// A dependency is looked for in the global catalog namespace's catalogs too
/// (`--olm-global-namespace`), as OLM's resolver does: a Subscription of `operators` on a
/// catalog of its own namespace that has only tuned-exporter gets base-tuning from the global
/// namespace's catalog, subscribed to there. With the global namespace turned off (an empty
/// value), the same resolution fails, naming the only catalog it looked in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dependency_is_met_from_the_global_catalog_namespace() {
    const GLOBAL: &str = "fleet-marketplace";
    let served = CatalogServer::start().await;
    let apps = served.set("apps.json", &stream_of(&dependency_blobs(), |p| p == "tuned-exporter"));
    let base = served.set("base.json", &stream_of(&dependency_blobs(), |p| p == "base-tuning"));
    let mut sub = subscription("tuned", "apps", "tuned-exporter", "Manual");
    sub["spec"]["sourceNamespace"] = json!(NS);
    for global in [GLOBAL, ""] {
        let c = Coordinator::start_with(aloft_tests::Options {
            args: vec!["--olm-global-namespace".into(), global.into()],
            ..Default::default()
        });
        let admin = c.client();
        for (ns, name, url) in [(NS, "apps", &apps), (GLOBAL, "base", &base)] {
            add_catalog_in(&admin, ns, name, url).await;
        }
        if global.is_empty() {
            let failed =
                subscribe_until(&admin, sub.clone(), "ResolutionFailed", |s| cond_true(s, "ResolutionFailed")).await;
            let why = s(condition(&failed, "ResolutionFailed").unwrap(), "/message").to_string();
            let words = r#"package "base-tuning" in range ">=1.2.0 <2.0.0" (olm.package.required): no bundle of the catalogs operators/apps provides it"#;
            assert!(why.contains(words), "{words:?} in {why}");
            assert_eq!(subscription_names(&admin).await, ["tuned"], "nothing subscribed without a global namespace");
            continue;
        }
        subscribe_until(&admin, sub.clone(), "waiting for its dependencies", |s| {
            condition(s, "InstallPlanPending").is_some_and(|c| c["reason"] == "WaitingForDependencies")
        })
        .await;
        let generated = format!("base-tuning-stable-base-{GLOBAL}");
        assert_eq!(subscription_names(&admin).await, [generated.as_str(), "tuned"]);
        let dep = get(&admin, &ns_path(&SUBSCRIPTION, NS, Some(&generated))).await.unwrap().unwrap();
        for (ptr, want) in [
            ("/spec/source", "base"),
            ("/spec/sourceNamespace", GLOBAL),
            ("/spec/startingCSV", "base-tuning.v1.3.0"),
            ("/metadata/namespace", NS),
        ] {
            assert_eq!(s(&dep, ptr), want, "{ptr} of {dep}");
        }
    }
}

/// A dependency the namespace already subscribes to is left to that Subscription: while it is
/// settled on a bundle out of the range, the dependent fails resolution naming it and what to
/// do, and nothing is planned or subscribed; moved to a channel that meets it, the dependent
/// goes on by itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bundle_waits_for_a_dependency_its_namespace_holds_out_of_range() {
    let c = Coordinator::start();
    let admin = c.client();
    let served = CatalogServer::start().await;
    dependency_catalog(&admin, &served).await;

    // base-tuning 1.1.0 (its old channel) provides the API but is out of the range.
    let mut old = subscription("base", "fleet", "base-tuning", "Automatic");
    old["spec"]["channel"] = json!("old");
    admin.post(&ns_path(&SUBSCRIPTION, NS, None), &old).await.unwrap().into_result().unwrap();
    csv_phase(&admin, "base-tuning.v1.1.0", "Succeeded").await;
    let sub = subscribe_until(
        &admin,
        subscription("tuned", "fleet", "tuned-exporter", "Automatic"),
        "ResolutionFailed naming Subscription base",
        |s| cond_true(s, "ResolutionFailed") && s.to_string().contains("moves no further"),
    )
    .await;
    let why = s(condition(&sub, "ResolutionFailed").unwrap(), "/message").to_string();
    for words in [
        r#"bundle tuned-exporter.v1.0.0 requires package "base-tuning" in range ">=1.2.0 <2.0.0" (olm.package.required)"#,
        r#"Subscription "base" of this namespace (package "base-tuning") is the one to meet it, but installed base-tuning.v1.1.0"#,
        "change its channel to one that reaches a bundle that meets it",
    ] {
        assert!(why.contains(words), "{words:?} in {why}");
    }
    assert!(!why.contains("Profile"), "the API is met by 1.1.0: {why}");
    assert_eq!(s(&sub, "/status/installPlanRef/name"), "", "no plan: {sub}");
    assert_eq!(subscription_names(&admin).await, ["base", "tuned"], "no second Subscription for base-tuning");
    let listed = admin.get(&ns_path(&CLUSTER_SERVICE_VERSION, NS, None)).await.unwrap().into_result().unwrap();
    let csvs: Vec<&str> = listed["items"].as_array().unwrap().iter().map(|c| s(c, "/metadata/name")).collect();
    assert_eq!(csvs, ["base-tuning.v1.1.0"], "nothing of tuned-exporter installed");

    // Moved to the stable channel, base-tuning upgrades to 1.3.0, and tuned-exporter installs.
    admin
        .patch(
            &ns_path(&SUBSCRIPTION, NS, Some("base")),
            "application/merge-patch+json",
            &json!({"spec": {"channel": "stable"}}),
        )
        .await
        .unwrap()
        .into_result()
        .unwrap();
    csv_phase(&admin, "base-tuning.v1.3.0", "Succeeded").await;
    plan_for(&admin, "tuned", "tuned-exporter.v1.0.0", "Complete").await;
    let csv = csv_phase(&admin, "tuned-exporter.v1.0.0", "Succeeded").await;
    assert_eq!(s(&csv, "/metadata/namespace"), NS);
    let sub = get(&admin, &ns_path(&SUBSCRIPTION, NS, Some("tuned"))).await.unwrap().unwrap();
    assert!(!cond_true(&sub, "ResolutionFailed"), "resolved: {sub}");
    assert_eq!(subscription_names(&admin).await, ["base", "tuned"]);
}

/// A catalog whose ruled-exporter declares its dependency with an `olm.constraint`: a bundle of
/// certified-base in 1.x that carries a `certified` property (a CEL rule). certified-base's
/// stable channel is 1.0.0 -> 1.1.0 (certified) -> 2.0.0 (certified, out of range), so the
/// bundle that meets it is 1.1.0, not the head. broken-exporter's constraint does not compile.
fn constraint_blobs() -> Vec<Value> {
    let certified = json!({"type": "certified", "value": true});
    let rule = |value: Value| json!({"type": "olm.constraint", "value": value});
    vec![
        json!({"schema": "olm.package", "name": "certified-base", "defaultChannel": "stable"}),
        json!({"schema": "olm.channel", "package": "certified-base", "name": "stable", "entries": [
            {"name": "certified-base.v1.0.0"},
            {"name": "certified-base.v1.1.0", "replaces": "certified-base.v1.0.0"},
            {"name": "certified-base.v2.0.0", "replaces": "certified-base.v1.1.0"}]}),
        bundle_of("certified-base", "1.0.0", &[]),
        bundle_of("certified-base", "1.1.0", std::slice::from_ref(&certified)),
        bundle_of("certified-base", "2.0.0", &[certified]),
        json!({"schema": "olm.package", "name": "ruled-exporter", "defaultChannel": "stable"}),
        json!({"schema": "olm.channel", "package": "ruled-exporter", "name": "stable", "entries": [{"name": "ruled-exporter.v1.0.0"}]}),
        bundle_of(
            "ruled-exporter",
            "1.0.0",
            &[rule(json!({
            "failureMessage": "ruled-exporter needs a certified certified-base 1.x",
            "all": {"constraints": [
                {"package": {"packageName": "certified-base", "versionRange": ">=1.0.0 <2.0.0"}},
                {"cel": {"rule": "properties.exists(p, p.type == 'certified' && p.value == true)"}}]}}))],
        ),
        json!({"schema": "olm.package", "name": "broken-exporter", "defaultChannel": "stable"}),
        json!({"schema": "olm.channel", "package": "broken-exporter", "name": "stable", "entries": [{"name": "broken-exporter.v1.0.0"}]}),
        bundle_of("broken-exporter", "1.0.0", &[rule(json!({"cel": {"rule": "properties.exists(p, "}}))]),
        // Reads, but gives an int: OLM's type checker refuses it.
        json!({"schema": "olm.package", "name": "typo-exporter", "defaultChannel": "stable"}),
        json!({"schema": "olm.channel", "package": "typo-exporter", "name": "stable", "entries": [{"name": "typo-exporter.v1.0.0"}]}),
        bundle_of(
            "typo-exporter",
            "1.0.0",
            &[rule(json!({"cel": {"rule":
                "properties.exists(p, p.type == 'olm.package') ? semver_compare('1.0.0', '1.0.0') : 1"}}))],
        ),
    ]
}

/// A dependency declared as an `olm.constraint` (a package range and a CEL rule that one bundle
/// must both meet) is subscribed to at the bundle that meets it and installed first; one whose
/// rule does not compile, or gives no bool, fails resolution saying where, and creates nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_olm_constraint_with_a_cel_rule_picks_the_bundle_that_meets_it() {
    let c = Coordinator::start();
    let admin = c.client();
    let served = CatalogServer::start().await;
    let url = served.set("rules.json", &stream_of(&constraint_blobs(), |_| true));
    add_catalog(&admin, &catalog_source("rules", &url)).await;

    for (name, package, words) in [
        ("broken", "broken-exporter", "cel.rule: the CEL rule does not compile: ERROR: <input>:"),
        (
            "typo",
            "typo-exporter",
            "cel.rule: the CEL rule does not compile: the rule gives an int, not a bool (OLM: cel expressions must \
             have type Bool)",
        ),
    ] {
        let broken =
            subscribe_until(&admin, subscription(name, "rules", package, "Automatic"), "ResolutionFailed", |s| {
                cond_true(s, "ResolutionFailed")
            })
            .await;
        let why = s(condition(&broken, "ResolutionFailed").unwrap(), "/message").to_string();
        for words in [
            &format!(
                "constraints not satisfiable: bundle {package}.v1.0.0 requires olm.constraint that does not read: "
            ),
            words,
        ] {
            assert!(why.contains(words), "{words:?} in {why}");
        }
    }
    assert_eq!(
        subscription_names(&admin).await,
        ["broken", "typo"],
        "nothing subscribed for a rule that does not compile"
    );

    admin
        .post(&ns_path(&SUBSCRIPTION, NS, None), &subscription("ruled", "rules", "ruled-exporter", "Automatic"))
        .await
        .unwrap()
        .into_result()
        .unwrap();
    let generated = "certified-base-stable-rules-olm";
    let dep =
        object_until(&admin, &ns_path(&SUBSCRIPTION, NS, Some(generated)), "the dependency's Subscription", |_| true)
            .await;
    assert_eq!(s(&dep, "/spec/name"), "certified-base");
    assert_eq!(s(&dep, "/spec/startingCSV"), "certified-base.v1.1.0", "in range and certified, not the head: {dep}");
    assert_eq!(s(&dep, "/metadata/annotations/aloft.dev~1requiredBy"), "ruled (ruled-exporter.v1.0.0)");
    csv_phase(&admin, "certified-base.v1.1.0", "Succeeded").await;
    csv_phase(&admin, "ruled-exporter.v1.0.0", "Succeeded").await;
    let ruled = get(&admin, &ns_path(&SUBSCRIPTION, NS, Some("ruled"))).await.unwrap().unwrap();
    assert!(!cond_true(&ruled, "ResolutionFailed"), "resolved: {ruled}");
    assert_eq!(subscription_names(&admin).await, ["broken", generated, "ruled", "typo"]);
    // certified-base's channel goes on to 2.0.0, which ruled-exporter's constraint refuses: the
    // dependency is held at 1.1.0, from the moment it was installed (ruled-exporter was being
    // installed then, waiting for it) and on.
    let held = object_until(&admin, &ns_path(&SUBSCRIPTION, NS, Some(generated)), "the dependency held", |x| {
        cond_true(x, "UpgradeHeld")
    })
    .await;
    let why = s(condition(&held, "UpgradeHeld").unwrap(), "/message");
    assert!(
        why.starts_with("certified-base.v1.1.0 stays installed: certified-base.v2.0.0 would leave unmet what certified-base.v1.1.0 meets now: ruled-exporter.v1.0.0"),
        "{why}"
    );
    assert_eq!(s(&held, "/status/installedCSV"), "certified-base.v1.1.0", "{held}");
    assert_eq!(
        eventually_csvs(&admin, &["certified-base.v1.1.0", "ruled-exporter.v1.0.0"]).await,
        ["certified-base.v1.1.0", "ruled-exporter.v1.0.0"]
    );
}

/// An upgrade of a dependency is checked against the operators that depend on it, as OLM's
/// solver checks a namespace as a whole: base-tuning's channel gains 1.4.0 and 2.0.0 (whose
/// skipRange covers 1.3.0); tuned-exporter needs base-tuning below 2.0.0, so base-tuning moves to 1.4.0
/// (an Event says why not 2.0.0) and is then held there, its Subscription saying so
/// (`UpgradeHeld`), until tuned-exporter 2.0.0, which needs base-tuning 2.x, is offered: then
/// both move, base-tuning first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upgrade_that_would_break_a_dependent_is_held_back() {
    let c = Coordinator::start();
    let admin = c.client();
    let served = CatalogServer::start().await;
    dependency_catalog(&admin, &served).await;
    admin
        .post(&ns_path(&SUBSCRIPTION, NS, None), &subscription("tuned", "fleet", "tuned-exporter", "Automatic"))
        .await
        .unwrap()
        .into_result()
        .unwrap();
    csv_phase(&admin, "base-tuning.v1.3.0", "Succeeded").await;
    csv_phase(&admin, "tuned-exporter.v1.0.0", "Succeeded").await;

    let mut blobs = with_base_tuning_stable(
        json!([{"name": "base-tuning.v1.1.0"}, {"name": "base-tuning.v1.3.0", "replaces": "base-tuning.v1.1.0"},
               {"name": "base-tuning.v1.4.0", "replaces": "base-tuning.v1.3.0"},
               {"name": "base-tuning.v2.0.0", "replaces": "base-tuning.v1.4.0", "skipRange": ">=1.3.0 <1.4.0"}]),
        &["1.4.0", "2.0.0"],
    );
    served.set("fleet.json", &stream_of(&blobs, |_| true));
    let changed = std::time::Instant::now();

    let generated = "base-tuning-stable-fleet-olm";
    csv_phase(&admin, "base-tuning.v1.4.0", "Succeeded").await;
    // The catalog polls every second: its new bundles are read when that falls due, not at the
    // OLM controller's 30 s resync (printed, not asserted: a timing).
    eprintln!("catalog changed -> base-tuning.v1.4.0 Succeeded in {:.1} s", changed.elapsed().as_secs_f64());
    let held = object_until(&admin, &ns_path(&SUBSCRIPTION, NS, Some(generated)), "UpgradeHeld", |x| {
        cond_true(x, "UpgradeHeld") && s(x, "/status/installedCSV") == "base-tuning.v1.4.0"
    })
    .await;
    let why = condition(&held, "UpgradeHeld").unwrap();
    assert_eq!(s(why, "/reason"), "RequiredByDependents");
    assert_eq!(
        s(why, "/message"),
        "base-tuning.v1.4.0 stays installed: base-tuning.v2.0.0 would leave unmet what base-tuning.v1.4.0 meets \
         now: tuned-exporter.v1.0.0 requires package \"base-tuning\" in range \">=1.2.0 <2.0.0\" \
         (olm.package.required); the upgrade goes on by itself once its dependents allow it"
    );
    assert_eq!(s(&held, "/status/state"), "AtLatestKnown");
    assert_eq!(s(&held, "/status/currentCSV"), "base-tuning.v1.4.0");
    let events = admin.get(&ns_path(&EVENT, NS, None)).await.unwrap().into_result().unwrap();
    let passed: Vec<&str> = events["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| s(e, "/reason") == "UpgradeHeld")
        .map(|e| s(e, "/message"))
        .collect();
    assert!(
        passed.iter().any(|m| m.starts_with("base-tuning.v1.4.0 is installed instead of base-tuning.v2.0.0: ")),
        "an Event says why 1.4.0 rather than the head: {passed:?}"
    );
    let listed = admin.get(&ns_path(&CLUSTER_SERVICE_VERSION, NS, None)).await.unwrap().into_result().unwrap();
    let csvs: Vec<&str> = listed["items"].as_array().unwrap().iter().map(|c| s(c, "/metadata/name")).collect();
    assert!(!csvs.contains(&"base-tuning.v2.0.0"), "2.0.0 never installed: {csvs:?}");

    // tuned-exporter 2.0.0 needs base-tuning 2.x: the two move together, as OLM's one plan
    // moves them, base-tuning first.
    blobs.retain(|b| !(s(b, "/schema") == "olm.channel" && s(b, "/package") == "tuned-exporter"));
    blobs.extend([
        json!({"schema": "olm.channel", "package": "tuned-exporter", "name": "stable", "entries": [
            {"name": "tuned-exporter.v1.0.0"}, {"name": "tuned-exporter.v2.0.0", "replaces": "tuned-exporter.v1.0.0"}]}),
        bundle_of(
            "tuned-exporter",
            "2.0.0",
            &[json!({"type": "olm.package.required", "value": {"packageName": "base-tuning", "versionRange": ">=2.0.0"}})],
        ),
    ]);
    served.set("fleet.json", &stream_of(&blobs, |_| true));
    csv_phase(&admin, "base-tuning.v2.0.0", "Succeeded").await;
    csv_phase(&admin, "tuned-exporter.v2.0.0", "Succeeded").await;
    let sub = object_until(&admin, &ns_path(&SUBSCRIPTION, NS, Some(generated)), "at 2.0.0", |x| {
        s(x, "/status/installedCSV") == "base-tuning.v2.0.0"
    })
    .await;
    assert!(condition(&sub, "UpgradeHeld").is_none(), "no longer held: {sub}");
    let events = admin.get(&ns_path(&EVENT, NS, None)).await.unwrap().into_result().unwrap();
    let first: Vec<&str> = events["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| s(e, "/reason") == "UpgradeBeforeDependents")
        .map(|e| s(e, "/message"))
        .collect();
    assert_eq!(
        first,
        ["base-tuning.v2.0.0 is installed first: tuned-exporter.v1.0.0 (Subscription \"tuned\") moves to \
          tuned-exporter.v2.0.0 after it"]
    );
    let csvs = eventually_csvs(&admin, &["base-tuning.v2.0.0", "tuned-exporter.v2.0.0"]).await;
    assert_eq!(csvs, ["base-tuning.v2.0.0", "tuned-exporter.v2.0.0"], "the replaced CSVs are gone");
}

/// The namespace's CSV names once they are `want` (sorted), waiting for replaced ones to go.
async fn eventually_csvs(admin: &Client, want: &[&str]) -> Vec<String> {
    let want: Vec<String> = want.iter().map(|w| w.to_string()).collect();
    eventually(WAIT, "the namespace's CSVs", || {
        let (admin, want) = (admin.clone(), want.clone());
        async move {
            let listed = admin.get(&ns_path(&CLUSTER_SERVICE_VERSION, NS, None)).await?.into_result()?;
            let mut names: Vec<String> =
                listed["items"].as_array().into_iter().flatten().map(|c| s(c, "/metadata/name").to_string()).collect();
            names.sort();
            Ok((names == want).then_some(names))
        }
    })
    .await
}

/// Whether the object at `path` is stored.
async fn exists(admin: &Client, path: &str) -> bool {
    get(admin, path).await.unwrap().is_some()
}

/// A plan that cannot write its whole bundle (a MachineConfig of the same name is the
/// admin's) fails having created nothing, and stays failed: an upgrade's plan leaves the
/// installed bundle as it was (its CSV, its config's content), makes no CSV of the new bundle
/// to replace it, and the Subscription says `UpgradeFailed` with the installed CSV kept. A
/// fresh install's plan leaves no CSV either, so deleting the failed plan (the retry) makes a
/// new plan rather than adopting half an install, which installs once the name is free.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plan_that_cannot_write_its_whole_bundle_creates_nothing_and_stays_failed() {
    let c = Coordinator::start();
    let admin = c.client();
    let served = CatalogServer::start().await;
    let mc = |name: &str| path_of(&MACHINE_CONFIG, Some(name));
    let csv = |name: &str| ns_path(&CLUSTER_SERVICE_VERSION, NS, Some(name));
    for (name, path) in [("90-up-b", "/etc/up/b"), ("90-admin", "/etc/admin")] {
        let mine = bundle_config(name, path, "admin");
        admin.post(&path_of(&MACHINE_CONFIG, None), &mine).await.unwrap().into_result().unwrap();
    }
    let up_v1 = bundle_with("up", "1.0.0", None, &[bundle_config("90-up-a", "/etc/up/a", "v1")]);
    let fresh = bundle_with(
        "fresh",
        "1.0.0",
        None,
        &[bundle_config("91-fresh-a", "/etc/fresh/a", "v1"), bundle_config("90-admin", "/etc/admin", "fresh")],
    );
    let fresh_blobs = package_blobs("fresh", &[(fresh, None)]);
    let blobs = [package_blobs("up", &[(up_v1.clone(), None)]), fresh_blobs.clone()].concat();
    let url = served.set("fleet.json", &stream_of(&blobs, |_| true));
    add_catalog(&admin, &catalog_source("fleet", &url)).await;
    subscribe_until(&admin, subscription("up", "fleet", "up", "Automatic"), "up at 1.0.0", |x| {
        s(x, "/status/installedCSV") == "up.v1.0.0" && s(x, "/status/state") == "AtLatestKnown"
    })
    .await;
    let a_before = get(&admin, &mc("90-up-a")).await.unwrap().expect("up.v1.0.0's config");
    assert_eq!(s(&a_before, "/metadata/labels/olm.aloft.dev~1csv"), "up.v1.0.0");

    // 2.0.0 would rewrite 90-up-a and take the admin's 90-up-b: the plan fails, naming it.
    let up_v2 = bundle_with(
        "up",
        "2.0.0",
        Some("up.v1.0.0"),
        &[bundle_config("90-up-a", "/etc/up/a", "v2"), bundle_config("90-up-b", "/etc/up/b", "v2")],
    );
    let blobs = [package_blobs("up", &[(up_v1, None), (up_v2, Some("up.v1.0.0"))]), fresh_blobs].concat();
    served.set("fleet.json", &stream_of(&blobs, |_| true));
    let plan = plan_for(&admin, "up", "up.v2.0.0", "Failed").await;
    assert_eq!(
        s(&plan, "/status/message"),
        "bundle up.v2.0.0 cannot be installed: MachineConfig \"90-up-b\" exists and was not installed by an operator \
         bundle"
    );
    let sub = object_until(&admin, &ns_path(&SUBSCRIPTION, NS, Some("up")), "up UpgradeFailed", |x| {
        s(x, "/status/state") == "UpgradeFailed"
    })
    .await;
    assert_eq!(s(&sub, "/status/installedCSV"), "up.v1.0.0", "{sub}");
    assert!(cond_true(&sub, "InstallPlanFailed"), "{sub}");
    // A few passes later, still nothing of 2.0.0, and 1.0.0 as it was.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(!exists(&admin, &csv("up.v2.0.0")).await, "no CSV of the failed plan");
    let v1 = get(&admin, &csv("up.v1.0.0")).await.unwrap().expect("up.v1.0.0 stays");
    assert_ne!(s(&v1, "/status/phase"), "Replacing", "{v1}");
    let a_after = get(&admin, &mc("90-up-a")).await.unwrap().expect("90-up-a stays");
    assert_eq!(a_after["spec"], a_before["spec"], "up.v1.0.0's config untouched: {a_after}");
    assert_eq!(a_after["metadata"]["labels"], a_before["metadata"]["labels"], "{a_after}");
    let b = get(&admin, &mc("90-up-b")).await.unwrap().expect("the admin's 90-up-b");
    assert!(b.to_string().contains("data:,admin") && s(&b, "/metadata/labels/olm.aloft.dev~1csv").is_empty(), "{b}");
    let sub = get(&admin, &ns_path(&SUBSCRIPTION, NS, Some("up"))).await.unwrap().unwrap();
    assert_eq!((s(&sub, "/status/state"), s(&sub, "/status/installedCSV")), ("UpgradeFailed", "up.v1.0.0"), "{sub}");
    assert!(event_messages(&admin, "InstalledCSVGone").await.is_empty());

    // A fresh install that would take the admin's 90-admin: nothing created.
    admin
        .post(&ns_path(&SUBSCRIPTION, NS, None), &subscription("fresh", "fleet", "fresh", "Automatic"))
        .await
        .unwrap()
        .into_result()
        .unwrap();
    let failed = plan_for(&admin, "fresh", "fresh.v1.0.0", "Failed").await;
    assert!(s(&failed, "/status/message").contains("MachineConfig \"90-admin\" exists and was not installed"));
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(!exists(&admin, &csv("fresh.v1.0.0")).await, "no CSV of the failed plan");
    assert!(!exists(&admin, &mc("91-fresh-a")).await, "no config of the failed plan");

    // The retry: the failed plan deleted, a new one is made (nothing to adopt), which fails
    // the same way while the name is taken.
    let plan_path = |p: &Value| ns_path(&INSTALL_PLAN, NS, Some(s(p, "/metadata/name")));
    admin.delete(&plan_path(&failed)).await.unwrap().into_result().unwrap();
    let again = plan_for(&admin, "fresh", "fresh.v1.0.0", "Failed").await;
    assert_ne!(s(&again, "/metadata/name"), s(&failed, "/metadata/name"));
    let sub = get(&admin, &ns_path(&SUBSCRIPTION, NS, Some("fresh"))).await.unwrap().unwrap();
    assert_eq!(s(&sub, "/status/installedCSV"), "", "nothing adopted: {sub}");
    assert!(event_messages(&admin, "AdoptedCSV").await.is_empty());
    assert!(!exists(&admin, &csv("fresh.v1.0.0")).await);

    // The name freed and the plan deleted: installed.
    admin.delete(&mc("90-admin")).await.unwrap().into_result().unwrap();
    admin.delete(&plan_path(&again)).await.unwrap().into_result().unwrap();
    plan_for(&admin, "fresh", "fresh.v1.0.0", "Complete").await;
    assert!(exists(&admin, &csv("fresh.v1.0.0")).await);
    let taken = get(&admin, &mc("90-admin")).await.unwrap().expect("the bundle's 90-admin");
    assert_eq!(s(&taken, "/metadata/labels/olm.aloft.dev~1csv"), "fresh.v1.0.0");
}

/// An installed CSV deleted while its Subscription stays is installed again, as OLM does
/// (delete the Subscription first to uninstall): a new plan, the CSV and its MachineConfig
/// back, and the Subscription at the latest known again, not pointed at the old plan.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_installed_csv_deleted_by_hand_is_installed_again() {
    let c = Coordinator::start();
    let admin = c.client();
    let served = CatalogServer::start().await;
    let v1 = bundle("1.0.0", None, &[bundle_config("50-node-exporter", "/etc/node-exporter/version", "v1")]);
    let url = served.set("fleet.json", &catalog(&[(v1, None)]));
    add_catalog(&admin, &catalog_source("fleet", &url)).await;
    admin
        .post(&ns_path(&SUBSCRIPTION, NS, None), &subscription(PKG, "fleet", PKG, "Automatic"))
        .await
        .unwrap()
        .into_result()
        .unwrap();
    let first = plan_for(&admin, PKG, "node-exporter.v1.0.0", "Complete").await;
    let csv_path = ns_path(&CLUSTER_SERVICE_VERSION, NS, Some("node-exporter.v1.0.0"));
    let installed = object_until(&admin, &csv_path, "the CSV", |_| true).await;
    admin.delete(&csv_path).await.unwrap().into_result().unwrap();

    let uid = s(&installed, "/metadata/uid").to_string();
    let again = object_until(&admin, &csv_path, "the CSV installed again", move |x| s(x, "/metadata/uid") != uid).await;
    assert_eq!(s(&again, "/spec/version"), "1.0.0");
    let sub_path = ns_path(&SUBSCRIPTION, NS, Some(PKG));
    let first_name = s(&first, "/metadata/name").to_string();
    let sub = object_until(&admin, &sub_path, "the Subscription at the latest known", move |x| {
        s(x, "/status/state") == "AtLatestKnown" && s(x, "/status/installPlanRef/name") != first_name
    })
    .await;
    assert_eq!(s(&sub, "/status/installedCSV"), "node-exporter.v1.0.0", "{sub}");
    assert!(condition(&sub, "InstallPlanPending").is_none(), "{sub}");
    let mc = object_until(&admin, &path_of(&MACHINE_CONFIG, Some("50-node-exporter")), "its config back", |m| {
        s(m, "/metadata/labels/olm.aloft.dev~1csv") == "node-exporter.v1.0.0"
    })
    .await;
    assert!(mc.to_string().contains("data:,v1"), "{mc}");
}

/// A multi-hop upgrade (1.0.0 <- 1.1.0 <- 1.2.0, each hop planned as soon as the last plan is
/// complete, before its CSV succeeds) leaves one CSV once the newest has succeeded: every CSV
/// on the replaces chain behind it is deleted, not only its direct predecessor, as OLM deletes
/// a CSV whose replacement chain leads to a Succeeded one. A leftover would keep its old
/// platform limit blocking cluster updates.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_multi_hop_upgrade_leaves_only_the_newest_csv() {
    let c = Coordinator::start();
    let admin = c.client();
    let served = CatalogServer::start().await;
    let hop = |version: &str, replaces: Option<&str>| {
        bundle_with("hop", version, replaces, &[bundle_config("50-hop", "/etc/hop/version", version)])
    };
    let blobs = package_blobs(
        "hop",
        &[
            (hop("1.0.0", None), None),
            (hop("1.1.0", Some("hop.v1.0.0")), Some("hop.v1.0.0")),
            (hop("1.2.0", Some("hop.v1.1.0")), Some("hop.v1.1.0")),
        ],
    );
    let url = served.set("fleet.json", &stream_of(&blobs, |_| true));
    add_catalog(&admin, &catalog_source("fleet", &url)).await;
    // No pool selects the configs yet: every CSV stays Installing while the hops are planned.
    let mut sub = subscription("hop", "fleet", "hop", "Automatic");
    sub["spec"]["startingCSV"] = json!("hop.v1.0.0");
    subscribe_until(&admin, sub, "hop at 1.2.0", |x| s(x, "/status/installedCSV") == "hop.v1.2.0").await;
    let all = ["hop.v1.0.0", "hop.v1.1.0", "hop.v1.2.0"];
    assert_eq!(eventually_csvs(&admin, &all).await, all, "the old ones wait, Replacing");
    csv_phase(&admin, "hop.v1.0.0", "Replacing").await;

    // A worker pool (no nodes yet) renders the config: 1.2.0 succeeds, and both others go.
    let pool: Value = yaml_serde::from_str(
        &std::fs::read_to_string(testdata().join("mco/bootstrap/worker.machineconfigpool.yaml")).unwrap(),
    )
    .unwrap();
    admin.post(&path_of(&MACHINE_CONFIG_POOL, None), &pool).await.unwrap().into_result().unwrap();
    csv_phase(&admin, "hop.v1.2.0", "Succeeded").await;
    assert_eq!(eventually_csvs(&admin, &["hop.v1.2.0"]).await, ["hop.v1.2.0"]);
    let mc = get(&admin, &path_of(&MACHINE_CONFIG, Some("50-hop"))).await.unwrap().expect("the config stays");
    assert_eq!(s(&mc, "/metadata/labels/olm.aloft.dev~1csv"), "hop.v1.2.0", "{mc}");
    eventually(WAIT, "a Replaced Event for each", || {
        let admin = admin.clone();
        async move {
            let replaced = event_messages(&admin, "Replaced").await;
            let both =
                ["hop.v1.0.0", "hop.v1.1.0"].iter().all(|old| replaced.contains(&format!("replaced {NS}/{old}")));
            Ok(both.then_some(()))
        }
    })
    .await;
}
