//! The coordinator's API against Kubernetes' conventions, over HTTPS with the generated CA pinned:
//! discovery, CRUD, selectors, patches, the status subresource, optimistic concurrency, field
//! errors, authentication and authorization, watches (resume, initial list, 410 Gone) and
//! server-side Table printing.

use aloft_tests::*;
use serde_json::{json, Value};
use std::time::Duration;

const MCO: &str = "/apis/machineconfiguration.openshift.io/v1";
const T: Duration = Duration::from_secs(60);

/// A DELETE of `path` with `options` (a DeleteOptions) as its body.
async fn delete_with(admin: &Client, path: &str, options: &Value) -> aloft_client::Reply {
    let body = serde_json::to_vec(options).unwrap();
    admin.call(reqwest::Method::DELETE, path, Some(("application/json", body)), None).await.unwrap()
}

fn resource<'a>(list: &'a Value, name: &str) -> &'a Value {
    list["resources"]
        .as_array()
        .and_then(|a| a.iter().find(|r| r["name"] == name))
        .unwrap_or_else(|| panic!("discovery has no resource {name}: {list}"))
}

fn verbs(r: &Value) -> Vec<&str> {
    let mut v: Vec<&str> = r["verbs"].as_array().expect("verbs").iter().filter_map(Value::as_str).collect();
    v.sort();
    v
}

#[tokio::test]
async fn discovery_and_tls_pinning() {
    let c = Coordinator::start();
    assert!(c.url().starts_with("https://127.0.0.1:"), "HTTPS by default: {}", c.url());
    let admin = c.client();

    let api = admin.get("/api").await.unwrap();
    assert_eq!(api.code, 200, "{}", api.body);
    assert_eq!(api.body["kind"], "APIVersions");
    assert_eq!(api.body["versions"], json!(["v1"]));

    let apis = admin.get("/apis").await.unwrap();
    assert_eq!(apis.body["kind"], "APIGroupList", "{}", apis.body);
    let group = apis.body["groups"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["name"] == "machineconfiguration.openshift.io")
        .unwrap_or_else(|| panic!("no MCO group in /apis: {}", apis.body))
        .clone();
    assert_eq!(group["preferredVersion"]["groupVersion"], "machineconfiguration.openshift.io/v1");

    let g = admin.get("/apis/machineconfiguration.openshift.io").await.unwrap();
    assert_eq!((g.code, g.body["kind"].clone()), (200, json!("APIGroup")), "{}", g.body);

    let mco = admin.get(MCO).await.unwrap();
    assert_eq!(mco.code, 200, "{}", mco.body);
    assert_eq!(mco.body["kind"], "APIResourceList");
    assert_eq!(mco.body["groupVersion"], "machineconfiguration.openshift.io/v1");
    let all = ["create", "delete", "get", "list", "patch", "update", "watch"];
    for (name, kind, short) in
        [("machineconfigs", "MachineConfig", "mc"), ("machineconfigpools", "MachineConfigPool", "mcp")]
    {
        let r = resource(&mco.body, name);
        assert_eq!(r["kind"], kind);
        assert_eq!(r["namespaced"], false, "{name} is cluster-scoped");
        assert!(r["shortNames"].as_array().unwrap().contains(&json!(short)), "{name} short name {short}: {r}");
        let v = verbs(r);
        for verb in all {
            assert!(v.contains(&verb), "{name} verbs {v:?} lack {verb}");
        }
    }
    let st = resource(&mco.body, "machineconfigpools/status");
    assert_eq!(verbs(st), vec!["get", "patch", "update"]);
    assert!(
        !mco.body["resources"].as_array().unwrap().iter().any(|r| r["name"] == "machineconfigs/status"),
        "MachineConfig has no status subresource"
    );

    let core = admin.get("/api/v1").await.unwrap();
    assert_eq!(core.body["groupVersion"], "v1", "{}", core.body);
    assert_eq!(resource(&core.body, "nodes")["namespaced"], false);
    assert_eq!(resource(&core.body, "events")["namespaced"], true);
    assert!(resource(&core.body, "nodes/status")["verbs"].as_array().unwrap().contains(&json!("update")));

    let version = admin.get("/version").await.unwrap();
    assert_eq!(version.code, 200);
    assert_eq!(version.body["major"], "1", "{}", version.body);

    // Unknown groups and versions are 404s in discovery too.
    assert_eq!(admin.get("/apis/foo.example.com").await.unwrap().code, 404);
    assert_eq!(admin.get("/apis/machineconfiguration.openshift.io/v2").await.unwrap().code, 404);

    // The kubeconfig pins the generated CA, and the serving certificate is not trusted otherwise.
    let kc = std::fs::read_to_string(c.kubeconfig_path()).unwrap();
    let kc: Value = yaml_serde::from_str(&kc).unwrap();
    use base64::Engine;
    let ca_data = kc["clusters"][0]["cluster"]["certificate-authority-data"].as_str().expect("CA data in kubeconfig");
    let ca_data = base64::engine::general_purpose::STANDARD.decode(ca_data).unwrap();
    assert_eq!(ca_data, c.ca_pem(), "kubeconfig CA is ca.crt");
    let unpinned = reqwest::Client::builder().build().unwrap();
    let err = unpinned.get(format!("{}/healthz", c.url())).send().await;
    assert!(err.is_err(), "a client without the coordinator's CA must refuse the certificate");
    let stranger = Coordinator::start();
    let wrong_pin = stranger.client_with_token(Some(&c.admin_token()));
    // `stranger`'s CA does not validate `c`'s certificate.
    let wrong = Client::new(&ClientConfig {
        server: c.url().to_string(),
        ca_pem: Some(stranger.ca_pem()),
        token: Some(c.admin_token()),
    })
    .unwrap();
    let e = format!("{:#}", wrong.get("/api").await.expect_err("pinning another CA must fail the TLS handshake"));
    assert!(
        e.contains("its certificate is not signed by the CA given") && e.contains("--ca"),
        "says what to check: {e}"
    );
    // And c's admin token is not valid on another coordinator.
    assert_eq!(wrong_pin.get("/api").await.unwrap().code, 401);
}

/// A restart without a `--tls-san` the last start had issues the serving certificate again
/// without that name: the coordinator says so (clients reaching it by that name will refuse
/// it), and says nothing when the names stay.
#[tokio::test]
async fn a_name_dropped_from_the_serving_certificate_is_warned_about() {
    let mut c = Coordinator::start_with(aloft_tests::Options {
        args: vec!["--tls-san".into(), "coord.example".into()],
        ..Default::default()
    });
    c.set_args(Vec::new());
    c.restart();
    let warned = c.log_lines_with("without names it had");
    assert_eq!(warned.len(), 1, "{}", c.log_tail());
    assert!(warned[0].contains("dropped=coord.example"), "names the name: {}", warned[0]);
    c.restart();
    assert!(c.log_lines_with("issued again").is_empty(), "the same names: {}", c.log_tail());
}

#[tokio::test]
async fn create_get_list_update_delete_with_selectors() {
    let c = Coordinator::start();
    let admin = c.client();
    let coll = path_of(&MACHINE_CONFIG, None);

    let mut created = Vec::new();
    for (name, role, tier) in
        [("10-a", "worker", "gold"), ("10-b", "worker", "silver"), ("10-c", "infra", "gold"), ("10-d", "infra", "")]
    {
        let mut mc = machine_config(name, role);
        if !tier.is_empty() {
            mc["metadata"]["labels"]["tier"] = tier.into();
        }
        let r = admin.post(&coll, &mc).await.unwrap();
        assert_eq!(r.code, 201, "create {name}: {}", r.body);
        assert_eq!(r.body["metadata"]["name"], name);
        assert_eq!(r.body["metadata"]["generation"], 1);
        assert!(r.body["metadata"]["uid"].as_str().is_some_and(|u| u.len() >= 32), "uid set: {}", r.body);
        assert!(r.body["metadata"]["creationTimestamp"].as_str().is_some_and(|t| t.ends_with('Z')), "{}", r.body);
        created.push(rv(&r.body));
    }
    assert!(created.windows(2).all(|w| w[0] < w[1]), "resourceVersions increase: {created:?}");

    // A second create of the same name: 409 AlreadyExists.
    let dup = admin.post(&coll, &machine_config("10-a", "worker")).await.unwrap();
    assert_status(&dup, 409, "AlreadyExists", "duplicate create");

    // A create that names a resourceVersion (an exported object, say) is refused, as
    // kube-apiserver refuses it, dry run or not; nothing is created. An empty one is no version.
    let mut exported = machine_config("10-e", "worker");
    exported["metadata"]["resourceVersion"] = json!(created[0].to_string());
    for query in ["", "?dryRun=All"] {
        let r = admin.post(&format!("{coll}{query}"), &exported).await.unwrap();
        assert_status(&r, 400, "BadRequest", "create with a resourceVersion");
        assert!(
            r.body["message"]
                .as_str()
                .unwrap_or("")
                .starts_with("resourceVersion should not be set on objects to be created"),
            "{}",
            r.body
        );
    }
    assert_eq!(admin.get(&path_of(&MACHINE_CONFIG, Some("10-e"))).await.unwrap().code, 404, "nothing created");
    exported["metadata"]["resourceVersion"] = json!("");
    let r = admin.post(&format!("{coll}?dryRun=All"), &exported).await.unwrap();
    assert_eq!(r.code, 201, "an empty resourceVersion is none: {}", r.body);

    let got = get_ok(&admin, &MACHINE_CONFIG, "10-b").await;
    assert_eq!(got["metadata"]["labels"]["tier"], "silver");
    assert_eq!(got["spec"]["config"]["ignition"]["version"], "3.4.0");
    assert_eq!(rv(&got), created[1]);

    let list = admin.get(&coll).await.unwrap();
    assert_eq!(list.code, 200);
    assert_eq!(list.body["kind"], "MachineConfigList");
    assert_eq!(list.body["apiVersion"], "machineconfiguration.openshift.io/v1");
    assert_eq!(item_names(&list.body), vec!["10-a", "10-b", "10-c", "10-d"]);
    // A GET answers with the JSON the store wrote; a list serializes the objects anew: the same.
    assert_eq!(list.body["items"][1], got, "the GET and the list agree on 10-b");
    let list_rv: u64 = list.body["metadata"]["resourceVersion"].as_str().unwrap().parse().unwrap();
    assert!(list_rv >= created[3], "list resourceVersion {list_rv} covers the last write {}", created[3]);

    let select = |q: &'static str| {
        let admin = admin.clone();
        let coll = coll.clone();
        async move {
            let r = admin.get(&format!("{coll}?{q}")).await.unwrap();
            assert_eq!(r.code, 200, "{q}: {}", r.body);
            item_names(&r.body)
        }
    };
    assert_eq!(select("labelSelector=tier%3Dgold").await, vec!["10-a", "10-c"]);
    assert_eq!(
        select("labelSelector=tier%21%3Dgold").await,
        vec!["10-b", "10-d"],
        "!= also matches objects without the label"
    );
    assert_eq!(select("labelSelector=tier").await, vec!["10-a", "10-b", "10-c"], "exists");
    assert_eq!(select("labelSelector=%21tier").await, vec!["10-d"], "does not exist");
    assert_eq!(select("labelSelector=tier%20in%20(silver,bronze)").await, vec!["10-b"]);
    assert_eq!(select("labelSelector=tier%20notin%20(gold)").await, vec!["10-b", "10-d"]);
    assert_eq!(
        select("labelSelector=machineconfiguration.openshift.io%2Frole%3Dinfra,tier%3Dgold").await,
        vec!["10-c"],
        "comma is AND"
    );
    assert_eq!(select("fieldSelector=metadata.name%3D10-d").await, vec!["10-d"]);
    assert_eq!(select("fieldSelector=metadata.name%21%3D10-d").await, vec!["10-a", "10-b", "10-c"]);
    let bad = admin.get(&format!("{coll}?labelSelector=tier%20in%20gold")).await.unwrap();
    assert_eq!(bad.code, 400, "malformed selector: {}", bad.body);
    let bad = admin.get(&format!("{coll}?fieldSelector=spec.osImageURL%3Dx")).await.unwrap();
    assert_eq!(bad.code, 400, "unsupported field selector: {}", bad.body);

    // Update: spec changes bump generation and resourceVersion; server-set metadata is kept.
    // A uid in the body is a precondition, as in kube-apiserver: another object's is 409.
    let mut upd = got.clone();
    upd["spec"]["kernelArguments"] = json!(["nosmt"]);
    upd["metadata"]["uid"] = "forged".into();
    let r = admin.put(&path_of(&MACHINE_CONFIG, Some("10-b")), &upd).await.unwrap();
    assert_status(&r, 409, "Conflict", "a PUT naming another uid");
    assert!(
        r.body["message"].as_str().unwrap_or_default().contains("Precondition failed: UID in precondition: forged"),
        "{}",
        r.body
    );
    upd["metadata"].as_object_mut().unwrap().remove("uid");
    let r = admin.put(&path_of(&MACHINE_CONFIG, Some("10-b")), &upd).await.unwrap();
    assert_eq!(r.code, 200, "{}", r.body);
    assert_eq!(r.body["spec"]["kernelArguments"], json!(["nosmt"]));
    assert_eq!(r.body["metadata"]["generation"], 2);
    assert_eq!(r.body["metadata"]["uid"], got["metadata"]["uid"], "uid is immutable");
    assert_eq!(r.body["metadata"]["creationTimestamp"], got["metadata"]["creationTimestamp"]);
    let after = rv(&r.body);
    assert!(after > list_rv);
    // A label-only change keeps generation.
    let mut lbl = r.body.clone();
    lbl["metadata"]["labels"]["tier"] = "bronze".into();
    let r2 = admin.put(&path_of(&MACHINE_CONFIG, Some("10-b")), &lbl).await.unwrap();
    assert_eq!((r2.code, r2.body["metadata"]["generation"].clone()), (200, json!(2)), "{}", r2.body);
    // An identical PUT is not a write: same resourceVersion.
    let r3 = admin.put(&path_of(&MACHINE_CONFIG, Some("10-b")), &r2.body).await.unwrap();
    assert_eq!(r3.code, 200);
    assert_eq!(rv(&r3.body), rv(&r2.body), "a no-op update does not create a revision");
    // PUT to a missing object is 404 (no upsert), and the name in the body must match the URL.
    let r = admin.put(&path_of(&MACHINE_CONFIG, Some("nope")), &machine_config("nope", "worker")).await.unwrap();
    assert_status(&r, 404, "NotFound", "PUT to a missing object");
    let r = admin.put(&path_of(&MACHINE_CONFIG, Some("10-a")), &machine_config("10-c", "worker")).await.unwrap();
    assert_eq!(r.code, 400, "name mismatch: {}", r.body);

    // Delete: returns the object, then it is gone.
    let r = admin.delete(&path_of(&MACHINE_CONFIG, Some("10-a"))).await.unwrap();
    assert_eq!(r.code, 200, "{}", r.body);
    assert_eq!(r.body["metadata"]["name"], "10-a");
    assert_status(
        &admin.get(&path_of(&MACHINE_CONFIG, Some("10-a"))).await.unwrap(),
        404,
        "NotFound",
        "GET after delete",
    );
    assert_status(
        &admin.delete(&path_of(&MACHINE_CONFIG, Some("10-a"))).await.unwrap(),
        404,
        "NotFound",
        "second delete",
    );
    assert_eq!(list_names(&admin, &MACHINE_CONFIG).await, vec!["10-b", "10-c", "10-d"]);

    // Delete with a stale precondition: 409, and the object stays.
    let stale = json!({"kind": "DeleteOptions", "apiVersion": "v1", "preconditions": {"resourceVersion": created[2].to_string()}});
    let cur = get_ok(&admin, &MACHINE_CONFIG, "10-c").await;
    let mut lbl = cur.clone();
    lbl["metadata"]["labels"]["x"] = "y".into();
    assert_eq!(admin.put(&path_of(&MACHINE_CONFIG, Some("10-c")), &lbl).await.unwrap().code, 200);
    let r = delete_with(&admin, &path_of(&MACHINE_CONFIG, Some("10-c")), &stale).await;
    assert_status(&r, 409, "Conflict", "delete with a stale precondition");
    get_ok(&admin, &MACHINE_CONFIG, "10-c").await;
    // A uid precondition that does not hold: kube-apiserver's message names both uids.
    let wrong_uid = json!({"kind": "DeleteOptions", "apiVersion": "v1", "preconditions": {"uid": "wrong"}});
    let r = delete_with(&admin, &path_of(&MACHINE_CONFIG, Some("10-c")), &wrong_uid).await;
    assert_status(&r, 409, "Conflict", "delete with a uid precondition that does not hold");
    let uid = cur["metadata"]["uid"].as_str().unwrap();
    assert!(
        r.body["message"]
            .as_str()
            .unwrap()
            .ends_with(&format!("Precondition failed: UID in precondition: wrong, UID in object meta: {uid}")),
        "{}",
        r.body
    );
    get_ok(&admin, &MACHINE_CONFIG, "10-c").await;

    // dryRun=All validates and answers, and stores nothing.
    let r = admin.post(&format!("{coll}?dryRun=All"), &machine_config("dry", "worker")).await.unwrap();
    assert_eq!(r.code, 201, "{}", r.body);
    assert_eq!(admin.get(&path_of(&MACHINE_CONFIG, Some("dry"))).await.unwrap().code, 404, "dry run stored nothing");
    // A dry run of a create whose name is taken answers as the create would: 409.
    let r = admin.post(&format!("{coll}?dryRun=All"), &machine_config("10-c", "worker")).await.unwrap();
    assert_eq!((r.code, &r.body["reason"]), (409, &json!("AlreadyExists")), "{}", r.body);
}

#[tokio::test]
async fn merge_json_and_strategic_patches() {
    let c = Coordinator::start();
    let admin = c.client();
    let mut pool = machine_config_pool("patchme", "patchme");
    pool["spec"]["maxUnavailable"] = 1.into();
    pool["metadata"]["labels"] = json!({"a": "1", "b": "2"});
    let r = admin.post(&path_of(&MACHINE_CONFIG_POOL, None), &pool).await.unwrap();
    assert_eq!(r.code, 201, "{}", r.body);
    let p = path_of(&MACHINE_CONFIG_POOL, Some("patchme"));

    // Merge patch: set, replace, and delete with null.
    let r = admin
        .patch(
            &p,
            "application/merge-patch+json",
            &json!({"metadata": {"labels": {"a": null, "c": "3"}}, "spec": {"paused": true, "maxUnavailable": "50%"}}),
        )
        .await
        .unwrap();
    assert_eq!(r.code, 200, "{}", r.body);
    assert_eq!(r.body["spec"]["paused"], true);
    assert_eq!(r.body["spec"]["maxUnavailable"], "50%");
    assert_eq!(r.body["metadata"]["labels"], json!({"b": "2", "c": "3"}));
    assert_eq!(
        r.body["spec"]["nodeSelector"]["matchLabels"]["node-role.kubernetes.io/patchme"], "",
        "untouched fields stay"
    );
    let got = get_ok(&admin, &MACHINE_CONFIG_POOL, "patchme").await;
    assert_eq!(got["spec"]["paused"], true, "the patch was stored");

    // JSON patch: test + replace + add + remove, atomically.
    let ops = json!([
        {"op": "test", "path": "/spec/paused", "value": true},
        {"op": "replace", "path": "/spec/paused", "value": false},
        {"op": "add", "path": "/metadata/labels/d", "value": "4"},
        {"op": "remove", "path": "/metadata/labels/b"},
    ]);
    let r = admin.patch(&p, "application/json-patch+json", &ops).await.unwrap();
    assert_eq!(r.code, 200, "{}", r.body);
    assert_eq!(r.body["spec"]["paused"], false);
    assert_eq!(r.body["metadata"]["labels"], json!({"c": "3", "d": "4"}));
    let before = rv(&r.body);
    // A failing test op changes nothing.
    let ops = json!([
        {"op": "replace", "path": "/spec/paused", "value": true},
        {"op": "test", "path": "/metadata/labels/c", "value": "nope"},
    ]);
    let r = admin.patch(&p, "application/json-patch+json", &ops).await.unwrap();
    assert!(r.code == 422 || r.code == 409, "failed JSON patch test op: {} {}", r.code, r.body);
    let got = get_ok(&admin, &MACHINE_CONFIG_POOL, "patchme").await;
    assert_eq!(got["spec"]["paused"], false, "a failed JSON patch is not half-applied");
    // (The render controller may write status meanwhile; the spec is what matters here.)
    assert!(rv(&got) >= before);

    // Strategic merge patch (what kubectl sends by default for `kubectl patch`).
    let r =
        admin.patch(&p, "application/strategic-merge-patch+json", &json!({"spec": {"paused": true}})).await.unwrap();
    assert_eq!(r.code, 200, "{}", r.body);
    assert_eq!(r.body["spec"]["paused"], true);

    // A patch that makes the object invalid is refused with the field, and not stored.
    let r =
        admin.patch(&p, "application/merge-patch+json", &json!({"spec": {"maxUnavailable": "lots"}})).await.unwrap();
    assert_status(&r, 422, "Invalid", "patch to an invalid maxUnavailable");
    assert!(cause_fields(&r.body).iter().any(|f| f == "spec.maxUnavailable"), "{}", r.body);
    assert_eq!(get_ok(&admin, &MACHINE_CONFIG_POOL, "patchme").await["spec"]["maxUnavailable"], "50%");

    // Unknown patch types and server-side apply are 415.
    let r = admin.patch(&p, "application/apply-patch+yaml", &json!({})).await.unwrap();
    assert_eq!(r.code, 415, "{}", r.body);
    let r = admin.patch(&p, "text/plain", &json!({})).await.unwrap();
    assert_eq!(r.code, 415, "{}", r.body);
    // Patching a missing object is 404.
    let r = admin
        .patch(&path_of(&MACHINE_CONFIG_POOL, Some("nope")), "application/merge-patch+json", &json!({}))
        .await
        .unwrap();
    assert_status(&r, 404, "NotFound", "patch of a missing object");
}

#[tokio::test]
async fn status_subresource_rules() {
    let c = Coordinator::start();
    let admin = c.client();
    // A Node in no pool: no controller writes to it.
    let node = json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": "n1", "labels": {"kubernetes.io/hostname": "n1"}},
        "spec": {"providerID": "aloft://n1"},
        "status": {"nodeInfo": {"osImage": "from-create"}},
    });
    let r = admin.post(&path_of(&NODE, None), &node).await.unwrap();
    assert_eq!(r.code, 201, "{}", r.body);
    let np = path_of(&NODE, Some("n1"));
    let sp = format!("{np}/status");

    // Writes to the main resource ignore status.
    let mut upd = r.body.clone();
    upd["spec"]["unschedulable"] = true.into();
    upd["status"] = json!({"nodeInfo": {"osImage": "from-main-put"}});
    let r = admin.put(&np, &upd).await.unwrap();
    assert_eq!(r.code, 200, "{}", r.body);
    assert_eq!(r.body["spec"]["unschedulable"], true);
    assert_ne!(r.body["status"]["nodeInfo"]["osImage"], "from-main-put", "main PUT must not change status: {}", r.body);
    let r = admin
        .patch(&np, "application/merge-patch+json", &json!({"status": {"nodeInfo": {"osImage": "from-main-patch"}}}))
        .await
        .unwrap();
    assert_eq!(r.code, 200, "{}", r.body);
    assert_ne!(r.body["status"]["nodeInfo"]["osImage"], "from-main-patch", "main PATCH must not change status");
    let stored = get_ok(&admin, &NODE, "n1").await;
    assert_ne!(stored["status"]["nodeInfo"]["osImage"], "from-main-put");
    assert_ne!(stored["status"]["nodeInfo"]["osImage"], "from-main-patch");
    let gen = stored["metadata"]["generation"].clone();

    // Writes to /status change only status (and do not bump generation).
    let mut st = stored.clone();
    st["status"] = json!({"nodeInfo": {"osImage": "from-status-put"}});
    st["spec"]["unschedulable"] = false.into();
    st["metadata"]["labels"]["sneaky"] = "yes".into();
    let r = admin.put(&sp, &st).await.unwrap();
    assert_eq!(r.code, 200, "{}", r.body);
    assert_eq!(r.body["status"]["nodeInfo"]["osImage"], "from-status-put");
    assert_eq!(r.body["spec"]["unschedulable"], true, "/status must not change spec");
    assert!(r.body["metadata"]["labels"].get("sneaky").is_none(), "/status must not change labels");
    assert_eq!(r.body["metadata"]["generation"], gen, "status writes do not bump generation");
    let r = admin
        .patch(
            &sp,
            "application/merge-patch+json",
            &json!({"spec": {"unschedulable": false}, "status": {"nodeInfo": {"osImage": "from-status-patch"}}}),
        )
        .await
        .unwrap();
    assert_eq!(r.code, 200, "{}", r.body);
    let stored = get_ok(&admin, &NODE, "n1").await;
    assert_eq!(stored["status"]["nodeInfo"]["osImage"], "from-status-patch");
    assert_eq!(stored["spec"]["unschedulable"], true);
    let r = admin.get(&sp).await.unwrap();
    assert_eq!(r.code, 200, "GET /status: {}", r.body);
    assert_eq!(r.body["status"]["nodeInfo"]["osImage"], "from-status-patch");
    // A status subresource is got, updated and patched, not deleted (405, the Node stays); a
    // GET of one object is that object, `watch` or not.
    let r = admin.delete(&sp).await.unwrap();
    assert_eq!(r.code, 405, "DELETE /status: {}", r.body);
    assert!(r.body["message"].as_str().unwrap_or("").contains("status subresource"), "{}", r.body);
    assert_eq!(admin.get(&np).await.unwrap().code, 200, "the Node is still there");
    for p in [&np, &sp] {
        let r = admin.get(&format!("{p}?watch=true")).await.unwrap();
        assert_eq!(
            (r.code, &r.body["kind"], &r.body["metadata"]["name"]),
            (200, &json!("Node"), &json!("n1")),
            "{}",
            r.body
        );
    }

    // Pools have /status too: a user's PUT of the pool cannot fake machine counts.
    let r = admin.post(&path_of(&MACHINE_CONFIG_POOL, None), &machine_config_pool("p1", "p1")).await.unwrap();
    assert_eq!(r.code, 201, "{}", r.body);
    // (A PUT of a custom resource names the revision it replaces, as kube-apiserver requires;
    // the controller may write the pool's status meanwhile, so the PUT is tried again on 409.)
    let mut r = admin.get(&path_of(&MACHINE_CONFIG_POOL, Some("p1"))).await.unwrap();
    for _ in 0..20 {
        let mut p = get_ok(&admin, &MACHINE_CONFIG_POOL, "p1").await;
        p["status"]["machineCount"] = 42.into();
        p["spec"]["paused"] = true.into();
        r = admin.put(&path_of(&MACHINE_CONFIG_POOL, Some("p1")), &p).await.unwrap();
        if r.code != 409 {
            break;
        }
    }
    assert_eq!(r.code, 200, "{}", r.body);
    assert_ne!(r.body["status"]["machineCount"], 42, "{}", r.body);
    assert_eq!(get_ok(&admin, &MACHINE_CONFIG_POOL, "p1").await["spec"]["paused"], true);
    // MachineConfig has no /status.
    let r = admin.post(&path_of(&MACHINE_CONFIG, None), &machine_config("mc1", "p1")).await.unwrap();
    assert_eq!(r.code, 201);
    assert_eq!(admin.get(&format!("{}/status", path_of(&MACHINE_CONFIG, Some("mc1")))).await.unwrap().code, 404);
}

#[tokio::test]
async fn stale_resource_version_is_409() {
    let c = Coordinator::start();
    let admin = c.client();
    let r = admin.post(&path_of(&MACHINE_CONFIG, None), &machine_config("cas", "worker")).await.unwrap();
    assert_eq!(r.code, 201);
    let v1 = r.body.clone();
    let p = path_of(&MACHINE_CONFIG, Some("cas"));

    let mut a = v1.clone();
    a["spec"]["kernelArguments"] = json!(["a=1"]);
    let ra = admin.put(&p, &a).await.unwrap();
    assert_eq!(ra.code, 200, "{}", ra.body);
    assert!(rv(&ra.body) > rv(&v1));

    // A second writer still holding v1 loses.
    let mut b = v1.clone();
    b["spec"]["kernelArguments"] = json!(["b=2"]);
    let rb = admin.put(&p, &b).await.unwrap();
    assert_status(&rb, 409, "Conflict", "PUT with a stale resourceVersion");
    assert!(rb.body["message"].as_str().unwrap().contains("cas"), "the message names the object: {}", rb.body);
    let stored = get_ok(&admin, &MACHINE_CONFIG, "cas").await;
    assert_eq!(stored["spec"]["kernelArguments"], json!(["a=1"]), "the loser changed nothing");
    assert_eq!(rv(&stored), rv(&ra.body));

    // A merge patch carrying a stale resourceVersion is a precondition too.
    let r = admin
        .patch(
            &p,
            "application/merge-patch+json",
            &json!({"metadata": {"resourceVersion": rv(&v1).to_string()}, "spec": {"kernelArguments": ["c=3"]}}),
        )
        .await
        .unwrap();
    assert_status(&r, 409, "Conflict", "patch with a stale resourceVersion");
    // A resourceVersion the server never issued is a 400 or 409, never a write.
    let mut junk = stored.clone();
    junk["metadata"]["resourceVersion"] = "not-a-number".into();
    junk["spec"]["kernelArguments"] = json!(["d=4"]);
    let r = admin.put(&p, &junk).await.unwrap();
    assert!(r.code == 400 || r.code == 409, "{} {}", r.code, r.body);
    // Retrying with the current version succeeds.
    let mut ok = stored.clone();
    ok["spec"]["kernelArguments"] = json!(["b=2"]);
    let r = admin.put(&p, &ok).await.unwrap();
    assert_eq!(r.code, 200, "{}", r.body);
    assert_eq!(get_ok(&admin, &MACHINE_CONFIG, "cas").await["spec"]["kernelArguments"], json!(["b=2"]));
}

#[tokio::test]
async fn invalid_objects_are_422_with_field_paths() {
    let c = Coordinator::start();
    let admin = c.client();
    let mcp_coll = path_of(&MACHINE_CONFIG_POOL, None);
    let mc_coll = path_of(&MACHINE_CONFIG, None);

    let mut p = machine_config_pool("bad-mu", "x");
    p["spec"]["maxUnavailable"] = "ten".into();
    let r = admin.post(&mcp_coll, &p).await.unwrap();
    assert_status(&r, 422, "Invalid", "maxUnavailable \"ten\"");
    assert_eq!(cause_fields(&r.body), vec!["spec.maxUnavailable"], "{}", r.body);
    assert_eq!(r.body["details"]["name"], "bad-mu");
    assert_eq!(r.body["details"]["kind"], "MachineConfigPool");
    // As kube-apiserver words it: the qualified kind, and the group in the details.
    assert_eq!(r.body["details"]["group"], "machineconfiguration.openshift.io");
    assert!(
        r.body["message"].as_str().unwrap().starts_with(
            "MachineConfigPool.machineconfiguration.openshift.io \"bad-mu\" is invalid: spec.maxUnavailable: "
        ),
        "{}",
        r.body
    );

    let mut p = machine_config_pool("bad-sel", "x");
    p["spec"]["machineConfigSelector"] =
        json!({"matchExpressions": [{"key": "role", "operator": "Near", "values": ["a"]}]});
    let r = admin.post(&mcp_coll, &p).await.unwrap();
    assert_status(&r, 422, "Invalid", "selector operator Near");
    assert_eq!(
        cause_fields(&r.body),
        ["spec.machineConfigSelector.matchExpressions[0].operator"],
        "the field is the operator, as kube-apiserver names it: {}",
        r.body
    );

    let r = admin.post(&mcp_coll, &machine_config_pool("Bad_Name", "x")).await.unwrap();
    assert_status(&r, 422, "Invalid", "name Bad_Name");
    assert_eq!(cause_fields(&r.body), vec!["metadata.name"], "{}", r.body);

    let mut mc = machine_config("bad-ign", "worker");
    mc["spec"]["config"]["ignition"]["version"] = "9.9.9".into();
    let r = admin.post(&mc_coll, &mc).await.unwrap();
    assert_status(&r, 422, "Invalid", "ignition version 9.9.9");
    assert!(
        cause_fields(&r.body).iter().any(|f| f.starts_with("spec.config.ignition.version")),
        "the cause names spec.config.ignition.version: {}",
        r.body
    );

    assert!(list_names(&admin, &MACHINE_CONFIG_POOL).await.is_empty(), "nothing invalid was stored");
    assert!(list_names(&admin, &MACHINE_CONFIG).await.is_empty(), "nothing invalid was stored");
}

#[tokio::test]
async fn authentication_and_viewer_authorization() {
    let c = Coordinator::start();
    let admin = c.client();
    let r = admin.post(&path_of(&MACHINE_CONFIG, None), &machine_config("keep", "worker")).await.unwrap();
    assert_eq!(r.code, 201);
    let keep_rv = rv(&r.body);

    // Health is open; the API is not.
    let anon = c.client_with_token(None);
    let h = reqwest::Client::builder()
        .tls_certs_only([reqwest::Certificate::from_pem(&c.ca_pem()).unwrap()])
        .build()
        .unwrap()
        .get(format!("{}/healthz", c.url()))
        .send()
        .await
        .unwrap();
    assert_eq!(h.status(), 200);
    for path in ["/api", "/apis", MCO, &path_of(&MACHINE_CONFIG, None), &path_of(&MACHINE_CONFIG, Some("keep"))] {
        assert_status(&anon.get(path).await.unwrap(), 401, "Unauthorized", &format!("GET {path} without a token"));
    }
    let bad = c.client_with_token(Some("aloft_0000000000000000000000000000000000000000000000000000000000000000"));
    assert_status(&bad.get(&path_of(&MACHINE_CONFIG, None)).await.unwrap(), 401, "Unauthorized", "unknown token");
    let r = anon.post(&path_of(&MACHINE_CONFIG, None), &machine_config("anon", "worker")).await.unwrap();
    assert_status(&r, 401, "Unauthorized", "anonymous create");

    // A viewer reads everything and writes nothing.
    let token = c.create_token("auditor", "viewer");
    let viewer = c.client_with_token(Some(&token));
    assert_eq!(viewer.get(&path_of(&MACHINE_CONFIG, None)).await.unwrap().code, 200);
    assert_eq!(viewer.get(&path_of(&MACHINE_CONFIG, Some("keep"))).await.unwrap().code, 200);
    let mut w = WatchStream::open(&viewer, &format!("{}?watch=true&resourceVersion=0", path_of(&MACHINE_CONFIG, None)))
        .await
        .unwrap();
    let ev = w.next(T).await.unwrap().expect("an initial event");
    assert_eq!(ev["object"]["metadata"]["name"], "keep");

    let p = path_of(&MACHINE_CONFIG, Some("keep"));
    let r = viewer.post(&path_of(&MACHINE_CONFIG, None), &machine_config("viewer-made", "worker")).await.unwrap();
    assert_status(&r, 403, "Forbidden", "viewer create");
    assert!(r.body["message"].as_str().unwrap().contains("auditor"), "the 403 names the user: {}", r.body);
    let mut upd = get_ok(&admin, &MACHINE_CONFIG, "keep").await;
    upd["spec"]["kernelArguments"] = json!(["x=1"]);
    assert_status(&viewer.put(&p, &upd).await.unwrap(), 403, "Forbidden", "viewer update");
    let r =
        viewer.patch(&p, "application/merge-patch+json", &json!({"spec": {"kernelArguments": ["y"]}})).await.unwrap();
    assert_status(&r, 403, "Forbidden", "viewer patch");
    assert_status(&viewer.delete(&p).await.unwrap(), 403, "Forbidden", "viewer delete");

    let stored = get_ok(&admin, &MACHINE_CONFIG, "keep").await;
    assert_eq!(rv(&stored), keep_rv, "no refused request changed the object");
    assert_eq!(list_names(&admin, &MACHINE_CONFIG).await, vec!["keep"]);

    // Re-creating the viewer's token revokes the old one.
    let token2 = c.create_token("auditor", "viewer");
    assert_ne!(token, token2);
    assert_status(&viewer.get(&path_of(&MACHINE_CONFIG, None)).await.unwrap(), 401, "Unauthorized", "replaced token");
    assert_eq!(c.client_with_token(Some(&token2)).get(&path_of(&MACHINE_CONFIG, None)).await.unwrap().code, 200);
}

/// Create `n` MachineConfigs labelled `batch=<batch>`; returns (name, resourceVersion) in order.
async fn create_batch(admin: &Client, batch: &str, n: usize) -> Vec<(String, u64)> {
    let mut out = Vec::new();
    for i in 0..n {
        let name = format!("{batch}-{i:02}");
        let mut mc = machine_config(&name, "worker");
        mc["metadata"]["labels"]["batch"] = batch.into();
        let r = admin.post(&path_of(&MACHINE_CONFIG, None), &mc).await.unwrap();
        assert_eq!(r.code, 201, "{}", r.body);
        out.push((name, rv(&r.body)));
    }
    out
}

#[tokio::test]
async fn watch_from_resource_version_replays_exactly_later_events() {
    let c = Coordinator::start();
    let admin = c.client();
    let coll = path_of(&MACHINE_CONFIG, None);
    let made = create_batch(&admin, "w", 20).await;
    let (_, from) = made[9].clone();

    let mut w = WatchStream::open(&admin, &format!("{coll}?watch=true&resourceVersion={from}&labelSelector=batch%3Dw"))
        .await
        .unwrap();
    let events = w.take(10, T).await.unwrap();
    let got: Vec<(String, String, u64)> = events
        .iter()
        .map(|e| {
            (
                e["type"].as_str().unwrap().to_string(),
                e["object"]["metadata"]["name"].as_str().unwrap().to_string(),
                rv(&e["object"]),
            )
        })
        .collect();
    let want: Vec<(String, String, u64)> =
        made[10..].iter().map(|(n, r)| ("ADDED".to_string(), n.clone(), *r)).collect();
    assert_eq!(got, want, "exactly the events after resourceVersion {from}, in order");
    assert!(w.is_quiet(Duration::from_millis(500)).await.unwrap(), "no further (duplicate or earlier) events");

    // Live events follow: MODIFIED and DELETED, with their own revisions.
    let mut m = get_ok(&admin, &MACHINE_CONFIG, "w-03").await;
    m["spec"]["kernelArguments"] = json!(["live=1"]);
    let upd = admin.put(&path_of(&MACHINE_CONFIG, Some("w-03")), &m).await.unwrap();
    assert_eq!(upd.code, 200);
    let del = admin.delete(&path_of(&MACHINE_CONFIG, Some("w-04"))).await.unwrap();
    assert_eq!(del.code, 200);
    // An object outside the selector produces no event.
    admin.post(&coll, &machine_config("unlabelled", "worker")).await.unwrap();
    let ev = w.take(2, T).await.unwrap();
    assert_eq!(
        (ev[0]["type"].as_str(), ev[0]["object"]["metadata"]["name"].as_str()),
        (Some("MODIFIED"), Some("w-03"))
    );
    assert_eq!(rv(&ev[0]["object"]), rv(&upd.body));
    assert_eq!(ev[0]["object"]["spec"]["kernelArguments"], json!(["live=1"]));
    assert_eq!((ev[1]["type"].as_str(), ev[1]["object"]["metadata"]["name"].as_str()), (Some("DELETED"), Some("w-04")));
    assert!(rv(&ev[1]["object"]) > rv(&ev[0]["object"]));
    assert!(w.is_quiet(Duration::from_millis(300)).await.unwrap(), "no event for an object outside the selector");

    // Resuming from the revision of the update replays only the delete (and the unlabelled create,
    // when unfiltered).
    let mut w2 =
        WatchStream::open(&admin, &format!("{coll}?watch=true&resourceVersion={}", rv(&upd.body))).await.unwrap();
    let ev = w2.take(2, T).await.unwrap();
    assert_eq!(ev[0]["type"], "DELETED");
    assert_eq!(ev[1]["object"]["metadata"]["name"], "unlabelled");

    // A field selector pins one object.
    let mut w3 = WatchStream::open(
        &admin,
        &format!("{coll}?watch=true&resourceVersion={}&fieldSelector=metadata.name%3Dw-05", made[0].1),
    )
    .await
    .unwrap();
    let ev = w3.next(T).await.unwrap().unwrap();
    assert_eq!(ev["object"]["metadata"]["name"], "w-05");
    assert!(w3.is_quiet(Duration::from_millis(300)).await.unwrap());

    // A resourceVersion that is not a number is refused.
    let r = admin.get(&format!("{coll}?watch=true&resourceVersion=abc")).await.unwrap();
    assert_eq!(r.code, 400, "{}", r.body);
}

/// A watch with a label selector resumed after a gap in which one of its objects was deleted and
/// another relabelled out of the selection: both come as DELETED (kube-apiserver's answer), so an
/// informer drops them. Before, neither was in the list the resumed watch started from, and both
/// events were dropped: the client kept both objects for good.
#[tokio::test]
async fn a_resumed_watch_with_a_selector_tells_what_left_it_during_the_gap() {
    let c = Coordinator::start();
    let admin = c.client();
    let coll = path_of(&MACHINE_CONFIG, None);
    let made = create_batch(&admin, "g", 3).await;
    let from = made[2].1;
    assert_eq!(admin.delete(&path_of(&MACHINE_CONFIG, Some("g-00"))).await.unwrap().code, 200);
    let r = admin
        .patch(
            &path_of(&MACHINE_CONFIG, Some("g-01")),
            "application/merge-patch+json",
            &json!({"metadata": {"labels": {"batch": "x"}}}),
        )
        .await
        .unwrap();
    assert_eq!(r.code, 200, "{}", r.body);
    let mut w = WatchStream::open(&admin, &format!("{coll}?watch=true&resourceVersion={from}&labelSelector=batch%3Dg"))
        .await
        .unwrap();
    let ev = w.take(2, T).await.unwrap();
    let got: Vec<(&str, &str)> =
        ev.iter().map(|e| (e["type"].as_str().unwrap(), e["object"]["metadata"]["name"].as_str().unwrap())).collect();
    assert_eq!(got, [("DELETED", "g-00"), ("DELETED", "g-01")]);
    assert!(w.is_quiet(Duration::from_millis(300)).await.unwrap(), "nothing else: g-02 did not change");
    // Live from here: g-02 leaving the selection is DELETED as before.
    admin
        .patch(
            &path_of(&MACHINE_CONFIG, Some("g-02")),
            "application/merge-patch+json",
            &json!({"metadata": {"labels": {"batch": "x"}}}),
        )
        .await
        .unwrap();
    let ev = w.next(T).await.unwrap().unwrap();
    assert_eq!((ev["type"].as_str(), ev["object"]["metadata"]["name"].as_str()), (Some("DELETED"), Some("g-02")));
}

#[tokio::test]
async fn watch_from_zero_starts_with_added_for_every_object() {
    let c = Coordinator::start();
    let admin = c.client();
    let coll = path_of(&MACHINE_CONFIG, None);
    let made = create_batch(&admin, "z", 5).await;
    assert_eq!(made.len(), 5);
    for q in ["watch=true&resourceVersion=0", "watch=true"] {
        let existing = list_names(&admin, &MACHINE_CONFIG).await;
        let mut w = WatchStream::open(&admin, &format!("{coll}?{q}")).await.unwrap();
        let ev = w.take(existing.len(), T).await.unwrap();
        let mut names: Vec<String> =
            ev.iter().map(|e| e["object"]["metadata"]["name"].as_str().unwrap().to_string()).collect();
        names.sort();
        assert_eq!(names, existing, "{q}: one initial event per object");
        assert!(ev.iter().all(|e| e["type"] == "ADDED"), "{q}: initial events are ADDED: {ev:?}");
        assert!(w.is_quiet(Duration::from_millis(300)).await.unwrap(), "{q}: nothing else until a write");
        let r = admin.post(&coll, &machine_config(&format!("after-{}", q.len()), "worker")).await.unwrap();
        let ev = w.next(T).await.unwrap().unwrap();
        assert_eq!(ev["type"], "ADDED");
        assert_eq!(rv(&ev["object"]), rv(&r.body), "{q}: the live event follows the initial list");
    }
    // timeoutSeconds ends the stream cleanly.
    let mut w =
        WatchStream::open(&admin, &format!("{coll}?watch=true&resourceVersion=0&timeoutSeconds=1")).await.unwrap();
    let mut n = 0;
    let ended = loop {
        match w.next(Duration::from_secs(10)).await.unwrap() {
            Some(_) => n += 1,
            None => break true,
        }
    };
    assert!(ended && n == 7, "timeoutSeconds=1 ends the watch after the 7 initial events (got {n})");
    // A timeout past any clock, with bookmarks: a watch like any other (the deadline overflowed,
    // and the request failed).
    let mut w = WatchStream::open(
        &admin,
        &format!("{coll}?watch=true&allowWatchBookmarks=true&resourceVersion=0&timeoutSeconds={}", u64::MAX),
    )
    .await
    .unwrap();
    let first = w.next(T).await.unwrap().expect("the initial events");
    assert_eq!(first["type"], "ADDED", "{first}");
}

#[tokio::test]
async fn watch_from_compacted_revision_is_410_gone() {
    let c =
        Coordinator::start_with(Options { args: vec!["--watch-history".into(), "10".into()], ..Default::default() });
    let admin = c.client();
    let coll = path_of(&MACHINE_CONFIG, None);
    let first = admin.post(&coll, &machine_config("gone-0", "worker")).await.unwrap();
    assert_eq!(first.code, 201, "{}", first.body);
    let early = rv(&first.body);
    // The store compacts its log every 1000 revisions: write past revision 1000.
    let mut handles = Vec::new();
    for t in 0..4 {
        let admin = admin.clone();
        handles.push(tokio::spawn(async move {
            let p = path_of(&MACHINE_CONFIG, Some(&format!("gone-t{t}")));
            let r = admin
                .post(&path_of(&MACHINE_CONFIG, None), &machine_config(&format!("gone-t{t}"), "worker"))
                .await
                .unwrap();
            assert_eq!(r.code, 201);
            for i in 0..260 {
                let r = admin
                    .patch(&p, "application/merge-patch+json", &json!({"metadata": {"labels": {"i": i.to_string()}}}))
                    .await
                    .unwrap();
                assert_eq!(r.code, 200, "{}", r.body);
            }
        }));
    }
    for h in handles {
        h.await.unwrap();
    }
    let list = admin.get(&coll).await.unwrap();
    let head: u64 = list.body["metadata"]["resourceVersion"].as_str().unwrap().parse().unwrap();
    assert!(head > 1000, "wrote past revision 1000 (at {head})");

    let r = admin.get(&format!("{coll}?watch=true&resourceVersion={early}")).await.unwrap();
    assert_status(&r, 410, "Expired", "watch from a compacted revision");
    // A recent revision still works, and a re-list (rv=0) always does.
    let mut w = WatchStream::open(&admin, &format!("{coll}?watch=true&resourceVersion={}", head - 1)).await.unwrap();
    assert!(w.next(T).await.unwrap().is_some(), "the newest event replays");
    let mut w = WatchStream::open(&admin, &format!("{coll}?watch=true&resourceVersion=0")).await.unwrap();
    assert_eq!(w.take(5, T).await.unwrap().len(), 5);
}

#[tokio::test]
async fn table_output_has_mco_columns() {
    let c = Coordinator::start();
    let admin = c.client();
    let r = admin.post(&path_of(&MACHINE_CONFIG_POOL, None), &machine_config_pool("worker", "worker")).await.unwrap();
    assert_eq!(r.code, 201, "{}", r.body);
    let r = admin.post(&path_of(&MACHINE_CONFIG, None), &machine_config("00-worker", "worker")).await.unwrap();
    assert_eq!(r.code, 201, "{}", r.body);

    let t =
        admin.call(reqwest::Method::GET, &path_of(&MACHINE_CONFIG_POOL, None), None, Some(TABLE_ACCEPT)).await.unwrap();
    assert_eq!(t.code, 200, "{}", t.body);
    assert_eq!(
        (t.body["kind"].as_str(), t.body["apiVersion"].as_str()),
        (Some("Table"), Some("meta.k8s.io/v1")),
        "{}",
        t.body
    );
    let cols: Vec<&str> =
        t.body["columnDefinitions"].as_array().unwrap().iter().map(|c| c["name"].as_str().unwrap()).collect();
    assert_eq!(
        cols,
        vec![
            "Name",
            "Config",
            "Updated",
            "Updating",
            "Degraded",
            "MachineCount",
            "ReadyMachineCount",
            "UpdatedMachineCount",
            "DegradedMachineCount",
            "Age"
        ],
        "oc get mcp columns"
    );
    let rows = t.body["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0]["cells"].as_array().unwrap().len(), cols.len());
    assert_eq!(rows[0]["cells"][0], "worker");
    assert_eq!(rows[0]["object"]["metadata"]["name"], "worker", "rows carry object metadata for kubectl");

    // The Table of the range chosen: v1beta1 when asked (kube-apiserver still writes it), none
    // of a group or version kube does not convert to, and then the plain JSON that follows.
    let mcp = path_of(&MACHINE_CONFIG_POOL, None);
    let beta = "application/json;as=Table;v=v1beta1;g=meta.k8s.io";
    let t = admin.call(reqwest::Method::GET, &mcp, None, Some(beta)).await.unwrap();
    assert_eq!((t.code, t.body["apiVersion"].as_str()), (200, Some("meta.k8s.io/v1beta1")), "{}", t.body);
    let other = "application/json;as=Table;v=v9;g=foo.example.com";
    let r = admin.call(reqwest::Method::GET, &mcp, None, Some(other)).await.unwrap();
    assert_status(&r, 406, "NotAcceptable", other);
    let r = admin.call(reqwest::Method::GET, &mcp, None, Some(&format!("{other}, application/json"))).await.unwrap();
    assert_eq!((r.code, r.body["kind"].as_str()), (200, Some("MachineConfigPoolList")), "{}", r.body);

    let t = admin
        .call(reqwest::Method::GET, &path_of(&MACHINE_CONFIG, Some("00-worker")), None, Some(TABLE_ACCEPT))
        .await
        .unwrap();
    assert_eq!(t.code, 200, "{}", t.body);
    let cols: Vec<&str> =
        t.body["columnDefinitions"].as_array().unwrap().iter().map(|c| c["name"].as_str().unwrap()).collect();
    assert_eq!(&cols[..4], ["Name", "GeneratedByController", "IgnitionVersion", "Age"], "oc get mc columns");
    let cells = &t.body["rows"][0]["cells"];
    assert_eq!(cells[0], "00-worker");
    assert_eq!(cells[2], "3.4.0");

    // Without the Table Accept header the same GET is the object.
    let o = admin.get(&path_of(&MACHINE_CONFIG, Some("00-worker"))).await.unwrap();
    assert_eq!(o.body["kind"], "MachineConfig");
}

#[tokio::test]
async fn namespaced_events() {
    let c = Coordinator::start();
    let admin = c.client();
    let ev = |ns: &str, name: &str| {
        json!({
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"name": name, "namespace": ns},
            "involvedObject": {"kind": "MachineConfigPool", "name": "worker",
                               "namespace": if ns == "default" { "" } else { ns }},
            "reason": "Test", "message": "hello", "type": "Normal",
        })
    };
    let path = |ns: &str, name: Option<&str>| resource_path(EVENT.path_ref(), Some(ns), name);
    for (ns, name) in [("default", "e1"), ("default", "e2"), ("openshift-machine-config-operator", "e3")] {
        let r = admin.post(&path(ns, None), &ev(ns, name)).await.unwrap();
        assert_eq!(r.code, 201, "{}", r.body);
        assert_eq!(r.body["metadata"]["namespace"], ns);
    }
    // A body without a namespace takes the URL's.
    let mut bare = ev("", "e4");
    bare["metadata"].as_object_mut().unwrap().remove("namespace");
    let r = admin.post(&path("default", None), &bare).await.unwrap();
    assert_eq!((r.code, r.body["metadata"]["namespace"].as_str()), (201, Some("default")), "{}", r.body);
    // A body naming another namespace than the URL is refused.
    let r = admin.post(&path("default", None), &ev("other", "e5")).await.unwrap();
    assert_status(&r, 400, "BadRequest", "namespace mismatch");

    let list = |p: String| {
        let admin = admin.clone();
        async move {
            let r = admin.get(&p).await.unwrap();
            assert_eq!(r.code, 200, "{p}: {}", r.body);
            let mut n = item_names(&r.body);
            n.sort();
            n
        }
    };
    assert_eq!(list(path("default", None)).await, vec!["e1", "e2", "e4"]);
    assert_eq!(list("/api/v1/events".into()).await, vec!["e1", "e2", "e3", "e4"], "all namespaces");
    assert_eq!(
        list("/api/v1/events?fieldSelector=metadata.namespace%3Dopenshift-machine-config-operator".into()).await,
        vec!["e3"]
    );
    assert_eq!(admin.get(&path("default", Some("e3"))).await.unwrap().code, 404, "e3 is in another namespace");
    assert_eq!(admin.get(&path("openshift-machine-config-operator", Some("e3"))).await.unwrap().code, 200);
    // A namespaced kind needs its namespace on create.
    let r = admin.post("/api/v1/events", &ev("default", "e6")).await.unwrap();
    assert_eq!(r.code, 400, "POST /api/v1/events without a namespace: {}", r.body);
    assert_eq!(admin.delete(&path("default", Some("e1"))).await.unwrap().code, 200);
    assert_eq!(list(path("default", None)).await, vec!["e2", "e4"]);
}

/// `limit` and `continue`: every page of one list is the same snapshot (objects changed, deleted
/// or created after the first page do not show in the later ones, and every page carries the
/// first page's resourceVersion), so a paged list followed by a watch from its revision sees
/// each change exactly once. Bad tokens and parameters are refused by name.
#[tokio::test]
async fn lists_in_pages_are_one_snapshot() {
    let c = Coordinator::start();
    let admin = c.client();
    let coll = path_of(&MACHINE_CONFIG, None);
    let made = create_batch(&admin, "p", 7).await;

    let first = admin.get(&format!("{coll}?limit=3")).await.unwrap();
    assert_eq!(first.code, 200, "{}", first.body);
    assert_eq!(item_names(&first.body), ["p-00", "p-01", "p-02"]);
    let list_rv = first.body["metadata"]["resourceVersion"].as_str().unwrap().to_string();
    assert_eq!(list_rv, made[6].1.to_string());
    assert_eq!(first.body["metadata"]["remainingItemCount"], 4, "{}", first.body["metadata"]);
    let token = first.body["metadata"]["continue"].as_str().unwrap().to_string();

    // Changes after the first page.
    let mut m = get_ok(&admin, &MACHINE_CONFIG, "p-04").await;
    m["spec"]["kernelArguments"] = json!(["paged=1"]);
    assert_eq!(admin.put(&path_of(&MACHINE_CONFIG, Some("p-04")), &m).await.unwrap().code, 200);
    assert_eq!(admin.delete(&path_of(&MACHINE_CONFIG, Some("p-05"))).await.unwrap().code, 200);
    assert_eq!(admin.post(&coll, &machine_config("p-07", "worker")).await.unwrap().code, 201);

    let second = admin.get(&format!("{coll}?limit=3&continue={token}")).await.unwrap();
    assert_eq!(second.code, 200, "{}", second.body);
    assert_eq!(item_names(&second.body), ["p-03", "p-04", "p-05"], "the snapshot, p-05 still in it");
    assert_eq!(second.body["items"][1]["spec"]["kernelArguments"], json!(null), "p-04 as it was");
    assert_eq!(rv(&second.body["items"][1]), made[4].1);
    assert_eq!(second.body["metadata"]["resourceVersion"], list_rv);
    let token2 = second.body["metadata"]["continue"].as_str().unwrap().to_string();
    let last = admin.get(&format!("{coll}?limit=3&continue={token2}")).await.unwrap();
    assert_eq!(item_names(&last.body), ["p-06"], "p-07 came after the snapshot");
    assert_eq!(last.body["metadata"]["continue"], json!(null), "the last page has no continue");
    assert_eq!(last.body["metadata"]["resourceVersion"], list_rv);

    // The watch from the list's revision has exactly the three changes.
    let mut w = WatchStream::open(&admin, &format!("{coll}?watch=true&resourceVersion={list_rv}")).await.unwrap();
    let ev = w.take(3, T).await.unwrap();
    let got: Vec<(&str, &str)> =
        ev.iter().map(|e| (e["type"].as_str().unwrap(), e["object"]["metadata"]["name"].as_str().unwrap())).collect();
    assert_eq!(got, [("MODIFIED", "p-04"), ("DELETED", "p-05"), ("ADDED", "p-07")]);

    // The finished list's token is spent; a new list starts from now.
    assert_status(&admin.get(&format!("{coll}?continue={token2}")).await.unwrap(), 410, "Expired", "a spent token");
    let again = admin.get(&format!("{coll}?limit=100")).await.unwrap();
    assert_eq!(item_names(&again.body), ["p-00", "p-01", "p-02", "p-03", "p-04", "p-06", "p-07"]);
    assert_eq!(again.body["metadata"]["continue"], json!(null));
    // A limit past any list, with a token that has an offset: the rest (the two overflowed,
    // and the request failed).
    let page = admin.get(&format!("{coll}?limit=2")).await.unwrap();
    let t = page.body["metadata"]["continue"].as_str().unwrap().to_string();
    let rest = admin.get(&format!("{coll}?limit={}&continue={t}", u64::MAX)).await.unwrap();
    assert_eq!(rest.code, 200, "{}", rest.body);
    assert_eq!(item_names(&rest.body), ["p-02", "p-03", "p-04", "p-06", "p-07"]);

    // Selectors page too, and a token is only good for the list it came from.
    let sel = admin.get(&format!("{coll}?limit=2&labelSelector=batch%3Dp")).await.unwrap();
    assert_eq!(item_names(&sel.body), ["p-00", "p-01"]);
    assert_eq!(sel.body["metadata"]["remainingItemCount"], json!(null), "not exact with a selector, so not given");
    let t = sel.body["metadata"]["continue"].as_str().unwrap();
    let wrong = admin.get(&format!("{coll}?limit=2&continue={t}")).await.unwrap();
    assert_status(&wrong, 400, "BadRequest", "a token from another list");
    assert!(wrong.body["message"].as_str().unwrap().contains("issued for another list"), "{}", wrong.body);
    let rest = admin.get(&format!("{coll}?labelSelector=batch%3Dp&continue={t}")).await.unwrap();
    assert_eq!(item_names(&rest.body), ["p-02", "p-03", "p-04", "p-06"], "no limit: the rest (p-07 has no label)");

    // Table pages carry the token as well (kubectl get --chunk-size).
    let table = admin.call(reqwest::Method::GET, &format!("{coll}?limit=2"), None, Some(TABLE_ACCEPT)).await.unwrap();
    assert_eq!(table.body["kind"], "Table");
    assert_eq!(table.body["rows"].as_array().unwrap().len(), 2);
    assert!(table.body["metadata"]["continue"].is_string(), "{}", table.body["metadata"]);

    for (q, want) in [
        ("limit=-1", "limit \"-1\" is not a number"),
        ("continue=not-a-token", "continue key is not valid"),
        ("continue=e30&resourceVersion=5", "specifying resource version is not allowed when using continue"),
    ] {
        let r = admin.get(&format!("{coll}?{q}")).await.unwrap();
        assert_status(&r, 400, "BadRequest", q);
        assert!(r.body["message"].as_str().unwrap().contains(want), "{q}: {}", r.body);
    }
}

/// A list's `resourceVersion`/`resourceVersionMatch`, as Kubernetes reads them: Exact is served
/// only for the current version (410 for an older one), a version the store has not reached is
/// 504 "Too large resource version" (client-go then lists afresh), and malformed ones are refused.
#[tokio::test]
async fn a_list_honours_resource_version_and_its_match() {
    let c = Coordinator::start();
    let admin = c.client();
    for name in ["rv-a", "rv-b"] {
        let node = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}});
        admin.post("/api/v1/nodes", &node).await.unwrap().into_result().unwrap();
    }
    let list = |q: String| {
        let admin = admin.clone();
        async move {
            tokio::time::timeout(Duration::from_secs(30), admin.get(&format!("/api/v1/nodes?{q}")))
                .await
                .unwrap()
                .unwrap()
        }
    };
    let head = rv(&list(String::new()).await.into_result().unwrap());

    let now = list(format!("resourceVersion={head}&resourceVersionMatch=Exact")).await;
    assert_eq!(now.code, 200, "{}", now.body);
    assert_eq!(item_names(&now.body), ["rv-a", "rv-b"]);
    let older = list(format!("resourceVersion={}&resourceVersionMatch=Exact", head - 1)).await;
    assert_status(&older, 410, "Expired", "Exact for a version that is not the current one");
    // NotOlderThan (or no match) an older version: the current state, as before.
    let not_older = list(format!("resourceVersion={}&resourceVersionMatch=NotOlderThan", head - 1)).await;
    assert_eq!((not_older.code, rv(&not_older.body)), (200, head));

    for q in [
        format!("resourceVersion={}", head + 1000),
        format!("resourceVersion={}&resourceVersionMatch=NotOlderThan", head + 1000),
        format!("resourceVersion={}&resourceVersionMatch=Exact", head + 1000),
    ] {
        let future = list(q.clone()).await;
        assert_status(&future, 504, "Timeout", &q);
        assert_eq!(future.body["details"]["causes"][0]["reason"], "ResourceVersionTooLarge", "{q}: {}", future.body);
    }
    assert_status(&list("resourceVersion=abc".into()).await, 400, "BadRequest", "a resourceVersion that is no number");
    for q in [
        "resourceVersionMatch=Exact",
        "resourceVersion=1&resourceVersionMatch=Bogus",
        "resourceVersion=0&resourceVersionMatch=Exact",
    ] {
        assert_status(&list(q.into()).await, 422, "Invalid", q);
    }
}

/// Finalizers as Kubernetes serves them: a DELETE of an object with finalizers marks it
/// (`deletionTimestamp`, `deletionGracePeriodSeconds: 0`; watchers see MODIFIED) and answers 200
/// with it; it stays, takes no new finalizer, keeps its deletion fields whatever an update says,
/// and goes (watchers see DELETED) with the update that removes its last finalizer. A create
/// drops the deletion fields; an invalid finalizer name is a 422 naming it, and nothing is stored.
#[tokio::test]
async fn finalizers_hold_a_deleted_object_until_they_are_removed() {
    let c = Coordinator::start();
    let admin = c.client();
    let path = "/api/v1/nodes/fin";
    let bad = json!({"apiVersion": "v1", "kind": "Node",
        "metadata": {"name": "fin", "finalizers": ["example.com/keep", "example.com/a/b"]}});
    let r = admin.post("/api/v1/nodes", &bad).await.unwrap();
    assert_status(&r, 422, "Invalid", "a create with an invalid finalizer name");
    assert_eq!(cause_fields(&r.body), ["metadata.finalizers[1]"]);
    assert_eq!(admin.get(path).await.unwrap().code, 404, "nothing stored");

    let with = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "fin",
        "finalizers": ["example.com/keep"], "deletionTimestamp": "2020-01-01T00:00:00Z",
        "deletionGracePeriodSeconds": 30}});
    let created = admin.post("/api/v1/nodes", &with).await.unwrap().into_result().unwrap();
    assert_eq!(created["metadata"]["finalizers"], json!(["example.com/keep"]));
    assert!(created["metadata"].get("deletionTimestamp").is_none(), "dropped on create: {created}");
    assert!(created["metadata"].get("deletionGracePeriodSeconds").is_none(), "dropped on create: {created}");
    let mut w = WatchStream::open(
        &admin,
        &format!("/api/v1/nodes?watch=true&resourceVersion={}&fieldSelector=metadata.name%3Dfin", rv(&created)),
    )
    .await
    .unwrap();

    // Only a DELETE starts a deletion: an update that sets the fields is refused, naming them
    // (kube-apiserver: "field is immutable"), and changes nothing.
    for (how, field) in [("deletionTimestamp", json!("2030-01-01T00:00:00Z")), ("deletionGracePeriodSeconds", json!(0))]
    {
        let patch = json!({"metadata": {how: field, "labels": {"a": "z"}}});
        let r = admin.patch(path, "application/merge-patch+json", &patch).await.unwrap();
        assert_status(&r, 422, "Invalid", how);
        assert_eq!(cause_fields(&r.body), [format!("metadata.{how}")]);
        assert!(r.body["message"].as_str().unwrap_or_default().contains("field is immutable"), "{}", r.body);
    }
    let mut put = created.clone();
    put["metadata"]["deletionTimestamp"] = "2030-01-01T00:00:00Z".into();
    assert_status(&admin.put(path, &put).await.unwrap(), 422, "Invalid", "a PUT setting deletionTimestamp");
    assert_eq!(rv(&admin.get(path).await.unwrap().into_result().unwrap()), rv(&created), "nothing written");

    // A dry run answers what the DELETE would do, and does nothing.
    let r = admin.delete(&format!("{path}?dryRun=All")).await.unwrap();
    assert_eq!(r.code, 200, "{}", r.body);
    assert!(r.body["metadata"]["deletionTimestamp"].is_string(), "{}", r.body);
    assert_eq!(rv(&admin.get(path).await.unwrap().into_result().unwrap()), rv(&created));

    let r = admin.delete(path).await.unwrap();
    assert_eq!(r.code, 200, "{}", r.body);
    let ts = r.body["metadata"]["deletionTimestamp"].as_str().unwrap_or_default().to_string();
    assert!(ts.len() == 20 && ts.ends_with('Z'), "RFC 3339 seconds, UTC: {}", r.body);
    assert_eq!(r.body["metadata"]["deletionGracePeriodSeconds"], 0);
    // The mark moves the generation once, as kube-apiserver's does (controllers that act on
    // generation changes only would not see the deletion otherwise).
    let generation = created["metadata"]["generation"].as_i64().unwrap();
    assert_eq!(r.body["metadata"]["generation"], generation + 1, "{}", r.body);
    let marked = admin.get(path).await.unwrap().into_result().unwrap();
    assert_eq!(marked, r.body, "the object stays, as the DELETE answered it");
    let ev = w.next(T).await.unwrap().unwrap();
    assert_eq!((ev["type"].as_str(), rv(&ev["object"])), (Some("MODIFIED"), rv(&marked)), "{ev}");

    // Deleting again changes nothing (the generation neither); preconditions still hold.
    let r = admin.delete(path).await.unwrap();
    assert_eq!((r.code, rv(&r.body)), (200, rv(&marked)), "{}", r.body);
    assert_eq!(r.body["metadata"]["generation"], generation + 1, "{}", r.body);
    let stale = json!({"kind": "DeleteOptions", "apiVersion": "v1",
        "preconditions": {"resourceVersion": rv(&created).to_string()}});
    let r = delete_with(&admin, path, &stale).await;
    assert_status(&r, 409, "Conflict", "a delete with a stale precondition");

    // No new finalizer while it is being deleted.
    let more = json!({"metadata": {"finalizers": ["example.com/keep", "example.com/more"]}});
    let r = admin.patch(path, "application/merge-patch+json", &more).await.unwrap();
    assert_status(&r, 422, "Invalid", "a finalizer added while being deleted");
    assert_eq!(cause_fields(&r.body), ["metadata.finalizers"]);
    let msg = r.body["message"].as_str().unwrap_or_default();
    assert!(msg.contains("no new finalizers can be added if the object is being deleted"), "{msg}");

    // The deletion fields are the server's: clearing the timestamp or the grace period, or
    // changing the timestamp, is ignored; changing the grace period is refused, as
    // kube-apiserver does.
    let longer = json!({"metadata": {"deletionGracePeriodSeconds": 5}});
    let r = admin.patch(path, "application/merge-patch+json", &longer).await.unwrap();
    assert_status(&r, 422, "Invalid", "a changed grace period");
    assert_eq!(cause_fields(&r.body), ["metadata.deletionGracePeriodSeconds"]);
    let clear =
        json!({"metadata": {"deletionTimestamp": null, "deletionGracePeriodSeconds": null, "labels": {"a": "b"}}});
    let r = admin.patch(path, "application/merge-patch+json", &clear).await.unwrap();
    let patched = r.into_result().unwrap();
    assert_eq!(patched["metadata"]["deletionTimestamp"].as_str(), Some(ts.as_str()), "{patched}");
    assert_eq!(patched["metadata"]["deletionGracePeriodSeconds"], 0);
    assert_eq!(patched["metadata"]["labels"]["a"], "b");
    let mut put = patched.clone();
    put["metadata"].as_object_mut().unwrap().remove("deletionTimestamp");
    put["metadata"]["labels"]["a"] = "c".into();
    let replaced = admin.put(path, &put).await.unwrap().into_result().unwrap();
    assert_eq!(replaced["metadata"]["deletionTimestamp"].as_str(), Some(ts.as_str()), "{replaced}");
    for want in [rv(&patched), rv(&replaced)] {
        let ev = w.next(T).await.unwrap().unwrap();
        assert_eq!((ev["type"].as_str(), rv(&ev["object"])), (Some("MODIFIED"), want), "{ev}");
    }

    // Removing the last finalizer removes the object.
    let r =
        admin.patch(path, "application/merge-patch+json", &json!({"metadata": {"finalizers": null}})).await.unwrap();
    assert_eq!(r.code, 200, "{}", r.body);
    assert_eq!(r.body["metadata"]["name"], "fin");
    let ev = w.next(T).await.unwrap().unwrap();
    assert_eq!(
        (ev["type"].as_str(), ev["object"]["metadata"]["name"].as_str()),
        (Some("DELETED"), Some("fin")),
        "{ev}"
    );
    assert_status(&admin.get(path).await.unwrap(), 404, "NotFound", "gone with its last finalizer");

    // Without finalizers, a DELETE removes at once, as before.
    let plain = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "fin", "finalizers": []}});
    admin.post("/api/v1/nodes", &plain).await.unwrap().into_result().unwrap();
    assert_eq!(admin.delete(path).await.unwrap().code, 200);
    assert_eq!(admin.get(path).await.unwrap().code, 404);
}

/// `sendInitialEvents=true` (client-go's WatchList): the current objects as ADDED, then the
/// BOOKMARK annotated `k8s.io/initial-events-end` at the list's revision, then live events.
#[tokio::test]
async fn send_initial_events_ends_with_the_initial_events_end_bookmark() {
    let c = Coordinator::start();
    let admin = c.client();
    for name in ["ie-a", "ie-b"] {
        let node = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}});
        admin.post("/api/v1/nodes", &node).await.unwrap().into_result().unwrap();
    }
    let head = rv(&admin.get("/api/v1/nodes").await.unwrap().into_result().unwrap());
    let q =
        "/api/v1/nodes?watch=true&sendInitialEvents=true&allowWatchBookmarks=true&resourceVersionMatch=NotOlderThan";
    for path in [q.to_string(), format!("{q}&resourceVersion={head}")] {
        let mut w = WatchStream::open(&admin, &path).await.unwrap();
        let evs = w.take(3, T).await.unwrap();
        let kinds: Vec<&str> = evs.iter().map(|e| e["type"].as_str().unwrap()).collect();
        assert_eq!(kinds, ["ADDED", "ADDED", "BOOKMARK"], "{path}: {evs:?}");
        let mark = &evs[2]["object"];
        assert_eq!(mark["metadata"]["annotations"]["k8s.io/initial-events-end"], "true", "{mark}");
        assert_eq!(mark["metadata"]["resourceVersion"], head.to_string());
        assert_eq!(mark["kind"], "Node");
    }
    let r = admin.get("/api/v1/nodes?watch=true&sendInitialEvents=true&allowWatchBookmarks=true").await.unwrap();
    assert_status(&r, 422, "Invalid", "sendInitialEvents without resourceVersionMatch=NotOlderThan");
}

/// `allowWatchBookmarks=true`: BOOKMARKs as kube-apiserver's watch cache sends them (every
/// minute, and 2 s before the watch's timeout), at a resourceVersion past every event sent, and
/// past writes of other kinds the watch does not carry: a client that resumes from it misses
/// nothing and gets nothing twice. A watch that does not allow them gets none.
#[tokio::test]
async fn a_watch_that_allows_bookmarks_gets_one_before_it_times_out() {
    let c = Coordinator::start();
    let admin = c.client();
    let node = |name: &str| json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}});
    let a = admin.post("/api/v1/nodes", &node("bm-a")).await.unwrap().into_result().unwrap();
    // 10 s: the BOOKMARK comes at 8 s, after the writes below however slow the machine.
    let q = format!("/api/v1/nodes?watch=true&timeoutSeconds=10&resourceVersion={}", rv(&a));
    let mut marked = WatchStream::open(&admin, &format!("{q}&allowWatchBookmarks=true")).await.unwrap();
    let mut plain = WatchStream::open(&admin, &q).await.unwrap();
    let b = admin.post("/api/v1/nodes", &node("bm-b")).await.unwrap().into_result().unwrap();
    let mc = admin
        .post("/apis/machineconfiguration.openshift.io/v1/machineconfigs", &machine_config("50-bm", "worker"))
        .await
        .unwrap()
        .into_result()
        .unwrap();
    assert!(rv(&mc) > rv(&b));
    let started = std::time::Instant::now();
    let ev = marked.next(T).await.unwrap().unwrap();
    assert_eq!((ev["type"].as_str(), rv(&ev["object"])), (Some("ADDED"), rv(&b)), "{ev}");
    let mark = marked.next(T).await.unwrap().unwrap();
    assert_eq!(mark["type"], "BOOKMARK", "{mark}");
    assert_eq!(
        mark["object"],
        json!({"kind": "Node", "apiVersion": "v1", "metadata": {"resourceVersion": rv(&mc).to_string()}}),
        "at the store's revision, past the MachineConfig"
    );
    assert_eq!(marked.next(T).await.unwrap(), None, "the watch ends at its timeout, after the BOOKMARK");
    eprintln!("the BOOKMARK and the end came {:?} after the writes", started.elapsed());
    let ev = plain.next(T).await.unwrap().unwrap();
    assert_eq!(ev["type"], "ADDED", "{ev}");
    assert_eq!(plain.next(T).await.unwrap(), None, "no BOOKMARK when not allowed");

    // Resumed from the BOOKMARK: what came after it, and nothing before.
    let d = admin.post("/api/v1/nodes", &node("bm-d")).await.unwrap().into_result().unwrap();
    let from = mark["object"]["metadata"]["resourceVersion"].as_str().unwrap();
    let mut again =
        WatchStream::open(&admin, &format!("/api/v1/nodes?watch=true&timeoutSeconds=3&resourceVersion={from}"))
            .await
            .unwrap();
    let ev = again.next(T).await.unwrap().unwrap();
    assert_eq!((ev["type"].as_str(), rv(&ev["object"])), (Some("ADDED"), rv(&d)), "{ev}");
    assert_eq!(again.next(T).await.unwrap(), None);

    let r = admin.get("/api/v1/nodes?watch=true&allowWatchBookmarks=yes").await.unwrap();
    assert_status(&r, 400, "BadRequest", "allowWatchBookmarks=yes");
    assert!(r.body["message"].as_str().unwrap_or_default().contains("allowWatchBookmarks \"yes\""), "{}", r.body);
}

/// The reviews behind `kubectl auth whoami` / `can-i`: in discovery, open to every credential
/// (not to none), decided as real requests are, and bad bodies refused naming the field.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn self_subject_reviews_are_discovered_decided_and_validated() {
    let c = Coordinator::start();
    let admin = c.client();
    let ssr = "/apis/authentication.k8s.io/v1/selfsubjectreviews";
    let ssar = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews";

    let groups = admin.get("/apis").await.unwrap().into_result().unwrap();
    let names: Vec<&str> = groups["groups"].as_array().unwrap().iter().filter_map(|g| g["name"].as_str()).collect();
    assert!(names.contains(&"authentication.k8s.io") && names.contains(&"authorization.k8s.io"), "{groups}");
    for (gv, plural, kind) in [
        ("authentication.k8s.io/v1", "selfsubjectreviews", "SelfSubjectReview"),
        ("authorization.k8s.io/v1", "selfsubjectaccessreviews", "SelfSubjectAccessReview"),
    ] {
        let list = admin.get(&format!("/apis/{gv}")).await.unwrap().into_result().unwrap();
        let r = list["resources"].as_array().unwrap().iter().find(|r| r["name"] == plural).cloned();
        let r = r.unwrap_or_else(|| panic!("{plural} not in /apis/{gv}: {list}"));
        assert_eq!(r["kind"], kind);
        assert_eq!(r["verbs"], json!(["create"]));
    }

    let viewer = c.client_with_token(Some(&c.create_token("dash", "viewer")));
    let boot = c.client_with_token(Some(&c.create_token("fleet", "bootstrap")));
    let body = json!({"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"});
    let me = viewer.post(ssr, &body).await.unwrap();
    assert_eq!(me.code, 201, "{}", me.body);
    assert_eq!(me.body["status"]["userInfo"]["username"], "dash", "{}", me.body);
    assert_eq!(me.body["status"]["userInfo"]["groups"], json!(["aloft:viewers", "system:authenticated"]));
    let me = boot.post(ssr, &json!({})).await.unwrap();
    assert_eq!(me.body["status"]["userInfo"]["username"], "system:bootstrap:fleet", "{}", me.body);
    let none = c.client_with_token(None).post(ssr, &body).await.unwrap();
    assert_status(&none, 401, "Unauthorized", "a review without a credential");

    let access = |attrs: Value| json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview", "spec": attrs});
    let node_pool = |verb: &str| {
        access(json!({"resourceAttributes": {
        "verb": verb, "group": "machineconfiguration.openshift.io", "resource": "machineconfigpools"}}))
    };
    let r = viewer.post(ssar, &node_pool("list")).await.unwrap();
    assert_eq!(r.code, 201, "{}", r.body);
    assert_eq!(r.body["status"]["allowed"], true, "{}", r.body);
    assert_eq!(r.body["spec"]["resourceAttributes"]["verb"], "list", "the spec is echoed: {}", r.body);
    let r = viewer.post(ssar, &node_pool("delete")).await.unwrap();
    assert_eq!(r.body["status"]["allowed"], false, "{}", r.body);
    assert_eq!(r.body["status"]["denied"], true, "{}", r.body);
    assert!(r.body["status"].get("reason").is_none(), "no reason, as RBAC gives none: {}", r.body);
    let direct =
        viewer.delete(&path_of(&aloft_coordinator::resources::MACHINE_CONFIG_POOL, Some("worker"))).await.unwrap();
    assert_eq!(direct.code, 403, "the request itself is refused as the review said: {}", direct.body);
    let metrics = access(json!({"nonResourceAttributes": {"verb": "get", "path": "/metrics"}}));
    assert_eq!(viewer.post(ssar, &metrics).await.unwrap().body["status"]["allowed"], true);
    assert_eq!(boot.post(ssar, &metrics).await.unwrap().body["status"]["allowed"], false);
    // A node may list its own Node only through a metadata.name field selector.
    let node = c.node_client("n1", json!({})).await;
    let nodes = |selector: Option<&str>| {
        let mut attrs = json!({"verb": "watch", "resource": "nodes"});
        if let Some(s) = selector {
            attrs["fieldSelector"] = json!({"rawSelector": s});
        }
        access(json!({"resourceAttributes": attrs}))
    };
    assert_eq!(node.post(ssar, &nodes(Some("metadata.name=n1"))).await.unwrap().body["status"]["allowed"], true);
    assert_eq!(node.post(ssar, &nodes(None)).await.unwrap().body["status"]["allowed"], false);

    let r = admin.post(ssar, &access(json!({}))).await.unwrap();
    assert_status(&r, 422, "Invalid", "neither attributes");
    assert_eq!(cause_fields(&r.body), vec!["spec.resourceAttributes"], "{}", r.body);
    let both = access(json!({"resourceAttributes": {"verb": "get"}, "nonResourceAttributes": {"verb": "get"}}));
    let r = admin.post(ssar, &both).await.unwrap();
    assert_status(&r, 422, "Invalid", "both attributes");
    assert_eq!(cause_fields(&r.body), vec!["spec.nonResourceAttributes"], "{}", r.body);
    let r = admin.post(ssar, &access(json!({"resourceAttributes": {"verb": 3}}))).await.unwrap();
    assert_status(&r, 422, "Invalid", "a verb that is not a string");
    assert_eq!(cause_fields(&r.body), vec!["spec.resourceAttributes.verb"], "{}", r.body);
    let r = admin.post(ssar, &json!({"kind": "SelfSubjectReview", "spec": {}})).await.unwrap();
    assert_status(&r, 400, "BadRequest", "the wrong kind");
    assert!(r.body["message"].as_str().unwrap_or("").contains("SelfSubjectAccessReview"), "{}", r.body);
    let r =
        admin.call(reqwest::Method::POST, ssar, Some(("application/json", b"{not json".to_vec())), None).await.unwrap();
    assert_status(&r, 400, "BadRequest", "malformed JSON");
    let r = admin.get(ssr).await.unwrap();
    assert_status(&r, 405, "MethodNotAllowed", "a review is only created");

    // What may I (`kubectl auth can-i --list`): the role's rules; a namespace is asked for, as
    // kube-apiserver asks.
    let ssrr = "/apis/authorization.k8s.io/v1/selfsubjectrulesreviews";
    let rules = |ns: Value| json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectRulesReview", "spec": {"namespace": ns}});
    let r = boot.post(ssrr, &rules(json!("default"))).await.unwrap();
    assert_eq!(r.code, 201, "{}", r.body);
    let listed = r.body["status"]["resourceRules"].to_string();
    assert!(listed.contains("\"pods\"") && !listed.contains("machineconfigs"), "{listed}");
    assert_eq!(r.body["status"]["nonResourceRules"][1]["nonResourceURLs"], json!(["/aloft/v1/enroll"]), "{}", r.body);
    for bad in [json!(null), json!(""), json!(5)] {
        let r = boot.post(ssrr, &rules(bad.clone())).await.unwrap();
        assert_status(&r, 400, "BadRequest", &format!("namespace {bad}"));
        assert!(r.body["message"].as_str().unwrap_or("").contains("no namespace on request"), "{}", r.body);
    }
    // Listed, and answered: the empty pod list is every caller's; discovery is read only.
    let pods = access(json!({"resourceAttributes": {"verb": "list", "resource": "pods"}}));
    assert_eq!(boot.post(ssar, &pods).await.unwrap().body["status"]["allowed"], true);
    assert_eq!(boot.get("/api/v1/pods").await.unwrap().code, 200);
    let r = admin.delete("/apis").await.unwrap();
    assert_status(&r, 405, "MethodNotAllowed", "discovery is read only");
}

/// What kube-apiserver refuses is refused, and nothing is written (the kubectl audit):
/// - a dry run spelled other than `All` (`?dryRun=true` deleted a MachineConfig for real);
/// - a patch that makes the object another kind, name, namespace or uid;
/// - `managedFields` or `generateName` of the wrong type (every typed client then failed on it);
/// - bad annotation keys and more than 256 KiB of annotations;
/// - label selectors with empty terms (`-l ','` selected everything), while `a in(x)` is read;
/// - a watch with `resourceVersionMatch`, a GET with a resourceVersion never issued.
///
/// And what it answers is answered: a strategic patch of one Node condition keeps the others,
/// `timeoutSeconds=0` is the default timeout, a group is listed once, a Status names the
/// resource's group and plural, a custom resource's status sent on create is dropped.
#[tokio::test]
async fn what_kube_apiserver_refuses_is_refused_and_nothing_is_written() {
    let c = Coordinator::start();
    let admin = c.client();
    let mc_path = path_of(&MACHINE_CONFIG, Some("60-x"));
    let r = admin.post(&path_of(&MACHINE_CONFIG, None), &machine_config("60-x", "none")).await.unwrap();
    assert_eq!(r.code, 201, "{}", r.body);
    let revision = rv(&r.body);

    // Dry runs: only `All`, in the query (every value) and in DeleteOptions.
    for query in ["dryRun=true", "dryRun=all", "dryRun=All&dryRun=true"] {
        let r = admin.call(reqwest::Method::DELETE, &format!("{mc_path}?{query}"), None, None).await.unwrap();
        assert_status(&r, 422, "Invalid", query);
        assert!(r.body["message"].as_str().unwrap_or_default().contains("supported values: \"All\""), "{}", r.body);
        let r = admin
            .patch(
                &format!("{mc_path}?{query}"),
                "application/merge-patch+json",
                &json!({"metadata": {"labels": {"a": "b"}}}),
            )
            .await
            .unwrap();
        assert_status(&r, 422, "Invalid", query);
        let r = admin
            .post(&format!("{}?{query}", path_of(&MACHINE_CONFIG, None)), &machine_config("61-y", "none"))
            .await
            .unwrap();
        assert_status(&r, 422, "Invalid", query);
    }
    let r =
        delete_with(&admin, &mc_path, &json!({"kind": "DeleteOptions", "apiVersion": "v1", "dryRun": ["all"]})).await;
    assert_status(&r, 422, "Invalid", "DeleteOptions dryRun [all]");
    let r = admin.call(reqwest::Method::DELETE, &format!("{mc_path}?dryRun=All"), None, None).await.unwrap();
    assert_eq!(r.code, 200, "a dry run spelled All: {}", r.body);
    let got = get_ok(&admin, &MACHINE_CONFIG, "60-x").await;
    assert_eq!(rv(&got), revision, "nothing written");
    assert_eq!(admin.get(&path_of(&MACHINE_CONFIG, Some("61-y"))).await.unwrap().code, 404);

    // Patches that would make the object another one.
    let merge = |p: Value| {
        let admin = admin.clone();
        let path = mc_path.clone();
        async move { admin.patch(&path, "application/merge-patch+json", &p).await.unwrap() }
    };
    for (patch, code, words) in [
        (
            json!({"kind": "MachineConfigPool"}),
            422,
            "kind: Invalid value: \"MachineConfigPool\": must be MachineConfig",
        ),
        (json!({"kind": null}), 422, "must be MachineConfig"),
        (json!({"apiVersion": "v1"}), 422, "must be machineconfiguration.openshift.io/v1"),
        (json!({"metadata": {"uid": "11111111-0000-0000-0000-000000000000"}}), 422, "field is immutable"),
        (json!({"metadata": {"name": "other"}}), 400, "does not match the name on the URL (60-x)"),
        (json!({"metadata": {"managedFields": "garbage"}}), 422, "metadata.managedFields"),
        (json!({"metadata": {"managedFields": [{"manager": 5}]}}), 422, "metadata.managedFields[0].manager"),
        (json!({"metadata": {"generateName": 5}}), 422, "metadata.generateName"),
        (json!({"metadata": {"annotations": {"bad key": "v"}}}), 422, "metadata.annotations"),
        (json!({"metadata": {"annotations": {"": "v"}}}), 422, "metadata.annotations"),
        (
            json!({"metadata": {"annotations": {"big": "x".repeat(300_000)}}}),
            422,
            "Too long: must have at most 262144 bytes",
        ),
    ] {
        let r = merge(patch.clone()).await;
        assert_eq!(r.code, code, "{patch}: {}", r.body);
        assert!(r.body["message"].as_str().unwrap_or_default().contains(words), "{patch}: {}", r.body);
    }
    assert_eq!(rv(&get_ok(&admin, &MACHINE_CONFIG, "60-x").await), revision, "nothing written");
    // An annotation key in capitals is a qualified name as Kubernetes takes it (lowercased).
    assert_eq!(merge(json!({"metadata": {"annotations": {"Example.com/Note": "v"}}})).await.code, 200);
    // A node may not store megabytes in its own annotations either.
    let node = c.node_client("n1", json!({"node-role.kubernetes.io/worker": ""})).await;
    let r = node
        .patch(
            "/api/v1/nodes/n1",
            "application/merge-patch+json",
            &json!({"metadata": {"annotations": {"y": "z".repeat(300_000)}}}),
        )
        .await
        .unwrap();
    assert_status(&r, 422, "Invalid", "a node's own megabyte annotation");

    // A strategic patch of one Node condition keeps Ready; a finalizer is added to the others.
    let ready = json!({"type": "Ready", "status": "True", "reason": "r", "lastHeartbeatTime": "2026-01-01T00:00:00Z",
                       "lastTransitionTime": "2026-01-01T00:00:00Z"});
    let sp = "/api/v1/nodes/n1/status";
    let strategic = "application/strategic-merge-patch+json";
    admin.patch(sp, strategic, &json!({"status": {"conditions": [ready]}})).await.unwrap().into_result().unwrap();
    let disk = json!({"type": "DiskPressure", "status": "False", "reason": "d", "lastHeartbeatTime": "2026-01-01T00:00:00Z",
                      "lastTransitionTime": "2026-01-01T00:00:00Z"});
    let r =
        admin.patch(sp, strategic, &json!({"status": {"conditions": [disk]}})).await.unwrap().into_result().unwrap();
    let types: Vec<&str> =
        r["status"]["conditions"].as_array().unwrap().iter().filter_map(|c| c["type"].as_str()).collect();
    assert!(types.contains(&"Ready") && types.contains(&"DiskPressure"), "{r}");
    for f in ["example.com/a", "example.com/b"] {
        admin
            .patch("/api/v1/nodes/n1", strategic, &json!({"metadata": {"finalizers": [f]}}))
            .await
            .unwrap()
            .into_result()
            .unwrap();
    }
    let n = admin.get("/api/v1/nodes/n1").await.unwrap().into_result().unwrap();
    assert_eq!(n["metadata"]["finalizers"], json!(["example.com/a", "example.com/b"]));
    admin
        .patch(
            "/api/v1/nodes/n1",
            strategic,
            &json!({"metadata": {"$deleteFromPrimitiveList/finalizers": ["example.com/a", "example.com/b"]}}),
        )
        .await
        .unwrap()
        .into_result()
        .unwrap();

    // Label selectors: empty terms are 400; `in(` without a space is read.
    for sel in [",", "a%3Dx%2C", "a%2C%2Cb"] {
        let r = admin.get(&format!("{}?labelSelector={sel}", path_of(&MACHINE_CONFIG, None))).await.unwrap();
        assert_eq!(r.code, 400, "{sel}: {}", r.body);
    }
    let r = admin.get("/api/v1/nodes?labelSelector=node-role.kubernetes.io%2Fworker%20in(%22%22)").await.unwrap();
    assert_eq!(r.code, 400, "a quoted value is not a label value: {}", r.body);
    let r = admin.get("/api/v1/nodes?labelSelector=kubernetes.io%2Fos%20notin(windows)").await.unwrap();
    assert_eq!((r.code, r.body["items"].as_array().map(Vec::len)), (200, Some(1)), "{}", r.body);

    // Reads: a watch takes no resourceVersionMatch; timeoutSeconds=0 is the default, so the
    // initial events all come; a GET's resourceVersion must be one this server issued.
    let r = admin.get("/api/v1/nodes?watch=1&resourceVersionMatch=Exact&resourceVersion=5").await.unwrap();
    assert_eq!(r.code, 422, "{}", r.body);
    admin.post(&path_of(&MACHINE_CONFIG, None), &machine_config("62-z", "none")).await.unwrap().into_result().unwrap();
    let existing = list_names(&admin, &MACHINE_CONFIG).await;
    let mut w = WatchStream::open(&admin, &format!("{}?watch=1&timeoutSeconds=0", path_of(&MACHINE_CONFIG, None)))
        .await
        .unwrap();
    let ev = w.take(existing.len(), T).await.unwrap();
    assert_eq!(ev.len(), existing.len(), "every initial event with timeoutSeconds=0: {ev:?}");
    assert!(w.is_quiet(Duration::from_millis(300)).await.unwrap(), "and the watch stays open");
    let r = admin.get(&format!("{mc_path}?resourceVersion=abc")).await.unwrap();
    assert_eq!(r.code, 400, "{}", r.body);
    let r = admin.get(&format!("{mc_path}?resourceVersion=999999999")).await.unwrap();
    assert_eq!(r.code, 504, "{}", r.body);

    // Discovery lists a group once; Status details name the group and the plural.
    let groups = admin.get("/apis").await.unwrap().into_result().unwrap();
    let mut names: Vec<&str> = groups["groups"].as_array().unwrap().iter().filter_map(|g| g["name"].as_str()).collect();
    let all = names.len();
    names.dedup();
    assert_eq!(names.len(), all, "{groups}");
    let r = admin.get(&path_of(&MACHINE_CONFIG_POOL, Some("nope"))).await.unwrap();
    assert_eq!(
        r.body["details"],
        json!({"name": "nope", "group": "machineconfiguration.openshift.io", "kind": "machineconfigpools"})
    );
    let r = node.get("/api/v1/nodes/n2").await.unwrap();
    assert_status(&r, 403, "Forbidden", "another node's Node");
    assert!(
        r.body["message"]
            .as_str()
            .unwrap_or_default()
            .contains("cannot get resource \"nodes\" in API group \"\" at the cluster scope"),
        "{}",
        r.body
    );
    assert_eq!(r.body["details"]["kind"], "nodes");

    // A custom resource's status sent on create is its controller's: dropped.
    let mut ndb = json!({"apiVersion": "aloft.dev/v1", "kind": "NodeDisruptionBudget", "metadata": {"name": "b1"},
                         "spec": {"maxUnavailable": 1}, "status": {"disruptionsAllowed": 9}});
    let r = admin.post("/apis/aloft.dev/v1/nodedisruptionbudgets", &ndb).await.unwrap();
    assert_eq!(r.code, 201, "{}", r.body);
    assert_ne!(r.body["status"]["disruptionsAllowed"], 9, "{}", r.body);
    // Events: in their object's namespace, or `default` for a cluster-scoped one.
    ndb = json!({"apiVersion": "v1", "kind": "Event", "metadata": {"name": "e9", "namespace": "default"},
                 "involvedObject": {"kind": "Node", "name": "n1", "namespace": "other"}, "reason": "x"});
    let r = admin.post("/api/v1/namespaces/default/events", &ndb).await.unwrap();
    assert_status(&r, 422, "Invalid", "an Event in another namespace than its object's");
}

/// `Accept` chooses how an answer is written, as kube-apiserver negotiates it: YAML when asked
/// (errors too), JSON for `*/*` and kubectl's headers, and 406 — before anything is written —
/// for what aloft cannot write (protobuf alone, `text/html`, a YAML watch).
#[tokio::test]
async fn the_accept_header_chooses_the_answer_s_format() {
    let c = Coordinator::start();
    let admin = c.client();
    let mc_path = path_of(&MACHINE_CONFIG, Some("60-x"));
    let collection = path_of(&MACHINE_CONFIG, None);
    let body = || Some(("application/json", serde_json::to_vec(&machine_config("60-x", "none")).unwrap()));
    let yaml_of = |r: &aloft_client::Reply| -> Value {
        let text = r.body.as_str().unwrap_or_else(|| panic!("not YAML text: {}", r.body));
        yaml_serde::from_str(text).unwrap_or_else(|e| panic!("{e}: {text}"))
    };

    for accept in ["application/vnd.kubernetes.protobuf", "text/html", "application/json;q=0"] {
        let r = admin.call(reqwest::Method::POST, &collection, body(), Some(accept)).await.unwrap();
        assert_status(&r, 406, "NotAcceptable", accept);
        let message = r.body["message"].as_str().unwrap_or_default();
        assert!(message.contains("application/json, application/yaml"), "{}", r.body);
    }
    assert_eq!(admin.get(&mc_path).await.unwrap().code, 404, "a refused create wrote nothing");

    let r = admin.call(reqwest::Method::POST, &collection, body(), Some("application/yaml")).await.unwrap();
    assert_eq!(r.code, 201, "{}", r.body);
    let created = yaml_of(&r);
    assert_eq!(created["metadata"]["name"], "60-x");
    let r = admin
        .call(reqwest::Method::GET, &mc_path, None, Some("application/yaml, application/json;q=0.9"))
        .await
        .unwrap();
    assert_eq!(r.code, 200);
    assert_eq!(yaml_of(&r), get_ok(&admin, &MACHINE_CONFIG, "60-x").await, "the same object, in YAML");
    let r = admin.call(reqwest::Method::GET, &collection, None, Some("application/yaml")).await.unwrap();
    assert_eq!(yaml_of(&r)["items"][0]["metadata"]["name"], "60-x");
    let r = admin
        .call(reqwest::Method::GET, &path_of(&MACHINE_CONFIG, Some("nope")), None, Some("application/yaml"))
        .await
        .unwrap();
    assert_eq!(r.code, 404);
    assert_eq!(yaml_of(&r)["reason"], "NotFound", "an error is written as asked too");
    let r = admin.call(reqwest::Method::GET, "/api/v1/pods", None, Some("application/yaml")).await.unwrap();
    assert_eq!(yaml_of(&r)["kind"], "PodList");

    // A PATCH refused for its Accept leaves the object as it was.
    let before = get_ok(&admin, &MACHINE_CONFIG, "60-x").await;
    let patch = Some(("application/merge-patch+json", br#"{"metadata":{"labels":{"a":"b"}}}"#.to_vec()));
    let r =
        admin.call(reqwest::Method::PATCH, &mc_path, patch, Some("application/vnd.kubernetes.protobuf")).await.unwrap();
    assert_status(&r, 406, "NotAcceptable", "protobuf only");
    assert_eq!(get_ok(&admin, &MACHINE_CONFIG, "60-x").await, before);

    // What clients send keeps its JSON; a watch is JSON or refused.
    for accept in ["*/*", "application/vnd.kubernetes.protobuf, */*", "application/json, application/yaml;q=0.5"] {
        let r = admin.call(reqwest::Method::GET, &mc_path, None, Some(accept)).await.unwrap();
        assert_eq!(r.body, before, "{accept}");
    }
    let err = admin.watch(&format!("{collection}?watch=true"), Some("application/yaml")).await.err();
    let err = format!("{:#}", err.expect("a YAML watch is refused"));
    assert!(err.contains("application/json;stream=watch"), "{err}");
    let w = admin.watch(&format!("{collection}?watch=true"), Some("application/json;stream=watch")).await;
    assert!(w.is_ok(), "a JSON stream is served");
}
