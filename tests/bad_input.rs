//! Bad input gets the right 4xx with a message that says what is wrong, and nothing is stored:
//! malformed bodies, wrong apiVersion/kind, invalid Ignition, oversized bodies, bad names and
//! unknown resources. After each refusal the store's revision has not moved.

use aloft_tests::*;
use serde_json::{json, Value};

/// The store's newest revision, as a list reports it.
async fn head(c: &Client) -> u64 {
    let r = c.get(&path_of(&MACHINE_CONFIG, None)).await.unwrap();
    assert_eq!(r.code, 200, "{}", r.body);
    r.body["metadata"]["resourceVersion"].as_str().unwrap().parse().unwrap()
}

async fn send(c: &Client, method: reqwest::Method, path: &str, ctype: &str, body: &[u8]) -> Reply {
    c.call(method, path, Some((ctype, body.to_vec())), None).await.unwrap()
}

fn message(r: &Reply) -> String {
    r.body["message"].as_str().unwrap_or("").to_string()
}

#[tokio::test]
async fn malformed_and_mistyped_bodies_are_400() {
    let c = Coordinator::start();
    let admin = c.client();
    let mc_coll = path_of(&MACHINE_CONFIG, None);
    let before = head(&admin).await;
    let post = reqwest::Method::POST;

    let r = send(
        &admin,
        post.clone(),
        &mc_coll,
        "application/json",
        b"{\"apiVersion\": \"machineconfiguration.openshift.io/v1\", \"kind\": ",
    )
    .await;
    assert_status(&r, 400, "BadRequest", "truncated JSON");
    assert!(message(&r).to_lowercase().contains("json"), "the message says the JSON is malformed: {}", r.body);

    let yaml =
        "apiVersion: machineconfiguration.openshift.io/v1\nkind: MachineConfig\nmetadata:\n  name: y\n   labels: [\n";
    let r = send(&admin, post.clone(), &mc_coll, "application/yaml", yaml.as_bytes()).await;
    assert_status(&r, 400, "BadRequest", "malformed YAML");
    assert!(message(&r).to_lowercase().contains("yaml"), "the message says the YAML is malformed: {}", r.body);

    let r = send(&admin, post.clone(), &mc_coll, "application/json", b"[1, 2, 3]").await;
    assert_status(&r, 400, "BadRequest", "a JSON array");
    let r = send(&admin, post.clone(), &mc_coll, "application/json", b"").await;
    assert_status(&r, 400, "BadRequest", "an empty body");
    let r = send(&admin, post.clone(), &mc_coll, "application/json", &[0xff, 0xfe, 0x00]).await;
    assert_status(&r, 400, "BadRequest", "binary garbage");
    let r = send(&admin, post.clone(), &mc_coll, "text/plain", b"name=x").await;
    assert_eq!(r.code, 415, "an unsupported content type: {}", r.body);

    // Wrong apiVersion or kind for the endpoint.
    let mut v2 = machine_config("v2", "worker");
    v2["apiVersion"] = "machineconfiguration.openshift.io/v2".into();
    let r = admin.post(&mc_coll, &v2).await.unwrap();
    assert_status(&r, 400, "BadRequest", "apiVersion v2");
    assert!(
        message(&r).contains("machineconfiguration.openshift.io/v2"),
        "the message names the wrong apiVersion: {}",
        r.body
    );
    let mut wrong_kind = machine_config("wk", "worker");
    wrong_kind["kind"] = "MachineConfigPool".into();
    let r = admin.post(&mc_coll, &wrong_kind).await.unwrap();
    assert_status(&r, 400, "BadRequest", "a MachineConfigPool posted to machineconfigs");
    assert!(message(&r).contains("MachineConfigPool"), "{}", r.body);
    let mut no_kind = machine_config("nk", "worker");
    no_kind.as_object_mut().unwrap().remove("kind");
    assert_status(&admin.post(&mc_coll, &no_kind).await.unwrap(), 400, "BadRequest", "no kind");
    let mut no_av = machine_config("nav", "worker");
    no_av.as_object_mut().unwrap().remove("apiVersion");
    assert_status(&admin.post(&mc_coll, &no_av).await.unwrap(), 400, "BadRequest", "no apiVersion");
    let mut core_av = machine_config("cav", "worker");
    core_av["apiVersion"] = "v1".into();
    assert_status(&admin.post(&mc_coll, &core_av).await.unwrap(), 400, "BadRequest", "core apiVersion");

    // The same rules on update, and the stored object is untouched.
    let r = admin.post(&mc_coll, &machine_config("target", "worker")).await.unwrap();
    assert_eq!(r.code, 201);
    let target = r.body;
    let before = before.max(rv(&target));
    let p = path_of(&MACHINE_CONFIG, Some("target"));
    let r = send(&admin, reqwest::Method::PUT, &p, "application/json", b"{not json").await;
    assert_status(&r, 400, "BadRequest", "malformed PUT");
    let mut t2 = target.clone();
    t2["kind"] = "Node".into();
    assert_status(&admin.put(&p, &t2).await.unwrap(), 400, "BadRequest", "PUT with the wrong kind");
    let r = send(&admin, reqwest::Method::PATCH, &p, "application/merge-patch+json", b"{oops").await;
    assert_status(&r, 400, "BadRequest", "malformed merge patch");
    let r = send(&admin, reqwest::Method::PATCH, &p, "application/json-patch+json", b"{\"op\": \"add\"}").await;
    assert_status(&r, 400, "BadRequest", "a JSON patch that is not a list of operations");

    assert_eq!(head(&admin).await, before, "no refused request wrote anything");
    assert_eq!(list_names(&admin, &MACHINE_CONFIG).await, vec!["target"]);
    assert_eq!(get_ok(&admin, &MACHINE_CONFIG, "target").await, target);
}

/// A MachineConfig whose Ignition config is `config`.
fn mc_with_config(name: &str, config: Value) -> Value {
    let mut mc = machine_config(name, "worker");
    mc["spec"]["config"] = config;
    mc
}

#[tokio::test]
async fn invalid_ignition_is_422_naming_the_field() {
    let c = Coordinator::start();
    let admin = c.client();
    let coll = path_of(&MACHINE_CONFIG, None);
    let before = head(&admin).await;

    let cases: Vec<(&str, Value, &str)> = vec![
        ("version-999", json!({"ignition": {"version": "9.9.9"}}), "spec.config.ignition.version"),
        ("version-missing", json!({"storage": {"files": []}}), "spec.config.ignition.version"),
        ("version-number", json!({"ignition": {"version": 3.2}}), "spec.config.ignition.version"),
        (
            "mode-setuid-sticky",
            json!({"ignition": {"version": "3.4.0"}, "storage": {"files": [{"path": "/etc/x", "mode": 0o4777, "contents": {"source": "data:,x"}}]}}),
            "spec.config.storage.files",
        ),
        (
            "files-not-a-list",
            json!({"ignition": {"version": "3.4.0"}, "storage": {"files": "/etc/x"}}),
            "spec.config.storage.files",
        ),
        (
            "mode-a-string",
            json!({"ignition": {"version": "3.4.0"}, "storage": {"files": [{"path": "/etc/x", "mode": "0644"}]}}),
            "spec.config.storage.files",
        ),
        (
            "relative-path",
            json!({"ignition": {"version": "3.4.0"}, "storage": {"files": [{"path": "etc/x", "contents": {"source": "data:,x"}}]}}),
            "spec.config.storage.files",
        ),
        (
            "unit-enabled-string",
            json!({"ignition": {"version": "3.4.0"}, "systemd": {"units": [{"name": "a.service", "enabled": "yes"}]}}),
            "spec.config.systemd.units",
        ),
        ("config-a-string", json!("not an ignition config"), "spec.config"),
    ];
    let mut problems = Vec::new();
    for (name, config, field) in cases {
        let r = admin.post(&coll, &mc_with_config(name, config.clone())).await.unwrap();
        if r.code != 422 {
            problems.push(format!("{name}: want 422 for {config}, got {}", r.code));
            let _ = admin.delete(&path_of(&MACHINE_CONFIG, Some(name))).await;
            continue;
        }
        assert_status(&r, 422, "Invalid", &format!("{name}: {config}"));
        assert_eq!(r.body["details"]["name"], name, "{name}: details.name");
        let fields = cause_fields(&r.body);
        if !fields.iter().any(|f| f.starts_with(field)) {
            problems.push(format!("{name}: want a cause naming {field}, got {fields:?}: {}", message(&r)));
        }
    }
    assert!(
        problems.is_empty(),
        "invalid Ignition must be 422 with a cause naming the field:\n{}",
        problems.join("\n")
    );
    // Wrong types outside the Ignition config.
    let mut mc = machine_config("kargs-string", "worker");
    mc["spec"]["kernelArguments"] = "nosmt".into();
    let r = admin.post(&coll, &mc).await.unwrap();
    assert_status(&r, 422, "Invalid", "kernelArguments as a string");
    assert!(
        message(&r).contains("kernelArguments") || cause_fields(&r.body).iter().any(|f| f.contains("kernelArguments")),
        "{}",
        r.body
    );
    let mut mc = machine_config("labels-list", "worker");
    mc["metadata"]["labels"] = json!(["a"]);
    let r = admin.post(&coll, &mc).await.unwrap();
    assert!(r.code == 400 || r.code == 422, "labels as a list: {} {}", r.code, r.body);

    assert_eq!(head(&admin).await, before, "nothing was stored");
    assert!(list_names(&admin, &MACHINE_CONFIG).await.is_empty());

    // An update to an invalid config is refused and leaves the stored object as it was.
    let ok = admin.post(&coll, &machine_config("valid", "worker")).await.unwrap();
    assert_eq!(ok.code, 201, "{}", ok.body);
    let mut bad = ok.body.clone();
    bad["spec"]["config"]["ignition"]["version"] = "9.9.9".into();
    let r = admin.put(&path_of(&MACHINE_CONFIG, Some("valid")), &bad).await.unwrap();
    assert_status(&r, 422, "Invalid", "PUT with Ignition 9.9.9");
    let r = admin
        .patch(
            &path_of(&MACHINE_CONFIG, Some("valid")),
            "application/merge-patch+json",
            &json!({"spec": {"config": {"ignition": {"version": "9.9.9"}}}}),
        )
        .await
        .unwrap();
    assert_status(&r, 422, "Invalid", "PATCH to Ignition 9.9.9");
    assert_eq!(get_ok(&admin, &MACHINE_CONFIG, "valid").await, ok.body, "the stored object is unchanged");
}

#[tokio::test]
async fn bodies_over_the_limit_are_413() {
    let small =
        Coordinator::start_with(Options { args: vec!["--max-body-bytes".into(), "4096".into()], ..Default::default() });
    let admin = small.client();
    let before = head(&admin).await;
    let mut mc = machine_config("big", "worker");
    mc["metadata"]["annotations"] = json!({"filler": "x".repeat(5000)});
    let r = admin.post(&path_of(&MACHINE_CONFIG, None), &mc).await.unwrap();
    assert_status(&r, 413, "RequestEntityTooLarge", "5 kB body with --max-body-bytes 4096");
    assert!(message(&r).contains("4096"), "the message names the limit: {}", r.body);
    // Just under the limit is fine.
    let mut fits = machine_config("fits", "worker");
    fits["metadata"]["annotations"] = json!({"filler": "x".repeat(3000)});
    assert_eq!(admin.post(&path_of(&MACHINE_CONFIG, None), &fits).await.unwrap().code, 201);
    // The limit holds for updates and patches, and for bodies sent without a length (chunked).
    let p = path_of(&MACHINE_CONFIG, Some("fits"));
    let stored = get_ok(&admin, &MACHINE_CONFIG, "fits").await;
    let mut upd = stored.clone();
    upd["metadata"]["annotations"]["filler"] = "y".repeat(5000).into();
    assert_status(&admin.put(&p, &upd).await.unwrap(), 413, "RequestEntityTooLarge", "oversized PUT");
    let r = admin
        .patch(&p, "application/merge-patch+json", &json!({"metadata": {"annotations": {"filler": "z".repeat(5000)}}}))
        .await
        .unwrap();
    assert_status(&r, 413, "RequestEntityTooLarge", "oversized PATCH");
    let http = reqwest::Client::builder()
        .tls_certs_only([reqwest::Certificate::from_pem(&small.ca_pem()).unwrap()])
        .build()
        .unwrap();
    let chunks: Vec<Result<Vec<u8>, std::io::Error>> = vec![Ok(b"{\"apiVersion\":\"machineconfiguration.openshift.io/v1\",\"kind\":\"MachineConfig\",\"metadata\":{\"name\":\"chunked\",\"annotations\":{\"a\":\"".to_vec()), Ok(vec![b'q'; 6000]), Ok(b"\"}}}".to_vec())];
    let resp = http
        .post(format!("{}{}", small.url(), path_of(&MACHINE_CONFIG, None)))
        .bearer_auth(small.admin_token())
        .header("content-type", "application/json")
        .body(reqwest::Body::wrap_stream(futures::stream::iter(chunks)))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 413, "a chunked body over the limit");
    assert_eq!(get_ok(&admin, &MACHINE_CONFIG, "fits").await, stored);
    assert_eq!(head(&admin).await, before + 1, "only the fitting create was stored");

    // The default limit is Kubernetes' 3 MiB.
    let dflt = Coordinator::start();
    let admin = dflt.client();
    let before = head(&admin).await;
    let mut huge = machine_config("huge", "worker");
    huge["metadata"]["annotations"] = json!({"filler": "x".repeat(3 * 1024 * 1024 + 1)});
    let r = admin.post(&path_of(&MACHINE_CONFIG, None), &huge).await.unwrap();
    assert_status(&r, 413, "RequestEntityTooLarge", "a body over 3 MiB");
    // (In a file's contents: annotations hold at most 256 KiB, as in Kubernetes.)
    let mut large = machine_config("large", "worker");
    large["spec"]["config"]["storage"] = json!({"files": [{"path": "/etc/filler", "mode": 420,
        "contents": {"source": format!("data:,{}", "x".repeat(1024 * 1024))}}]});
    assert_eq!(
        admin.post(&path_of(&MACHINE_CONFIG, None), &large).await.unwrap().code,
        201,
        "1 MiB is within the limit"
    );
    assert_eq!(list_names(&admin, &MACHINE_CONFIG).await, vec!["large"]);
    assert_eq!(head(&admin).await, before + 1);

    // An object is stored up to 2 MiB (etcd refuses kube-apiserver's past 1.5 MiB): a node's
    // credential cannot fill the store, 3 MiB a write, through its own status.
    let node = dflt.node_client("n-big", json!({})).await;
    let status = path_of(&NODE, Some("n-big")) + "/status";
    let before = head(&admin).await;
    let r = node
        .patch(&status, "application/merge-patch+json", &json!({"status": {"filler": "x".repeat(2_500_000)}}))
        .await
        .unwrap();
    assert_status(&r, 413, "RequestEntityTooLarge", "a 2.5 MB status");
    assert!(message(&r).contains("the limit is 2097152 bytes"), "{}", r.body);
    assert_eq!(head(&admin).await, before, "nothing stored");
    let mut over = machine_config("over", "worker");
    over["spec"]["config"]["storage"] = json!({"files": [{"path": "/etc/filler", "mode": 420,
        "contents": {"source": format!("data:,{}", "x".repeat(2_200_000))}}]});
    let r = admin.post(&path_of(&MACHINE_CONFIG, None), &over).await.unwrap();
    assert_status(&r, 413, "RequestEntityTooLarge", "a 2.2 MB MachineConfig");
    assert_eq!(list_names(&admin, &MACHINE_CONFIG).await, vec!["large"]);
}

#[tokio::test]
async fn names_that_are_not_dns_subdomains_are_422() {
    let c = Coordinator::start();
    let admin = c.client();
    let before = head(&admin).await;
    let long = "a".repeat(254);
    for name in ["Bad_Name", "../x", "a/b", "UPPER", "-lead", "trail-", "a..b", "with space", long.as_str()] {
        for (rt, obj) in [
            (&MACHINE_CONFIG, machine_config(name, "worker")),
            (&MACHINE_CONFIG_POOL, machine_config_pool(name, "worker")),
        ] {
            let r = admin.post(&path_of(rt, None), &obj).await.unwrap();
            assert_status(&r, 422, "Invalid", &format!("{} named {name:?}", rt.kind));
            assert_eq!(cause_fields(&r.body), vec!["metadata.name"], "{name:?}: {}", r.body);
        }
    }
    let mut unnamed = machine_config("", "worker");
    unnamed["metadata"].as_object_mut().unwrap().remove("name");
    let r = admin.post(&path_of(&MACHINE_CONFIG, None), &unnamed).await.unwrap();
    assert_status(&r, 422, "Invalid", "no name");
    assert_eq!(cause_fields(&r.body), vec!["metadata.name"]);
    // 253 characters is the longest valid name.
    let max = "a".repeat(253);
    assert_eq!(admin.post(&path_of(&MACHINE_CONFIG, None), &machine_config(&max, "worker")).await.unwrap().code, 201);
    assert_eq!(head(&admin).await, before + 1, "only the valid name was stored");
    assert_eq!(list_names(&admin, &MACHINE_CONFIG).await, vec![max]);
    assert!(list_names(&admin, &MACHINE_CONFIG_POOL).await.is_empty());
}

#[tokio::test]
async fn unknown_resources_are_404() {
    let c = Coordinator::start();
    let admin = c.client();
    let before = head(&admin).await;
    let get = reqwest::Method::GET;
    let post = reqwest::Method::POST;
    let body = serde_json::to_vec(&json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}})).unwrap();
    for (m, path) in [
        (get.clone(), "/api/v1/pods/p"),
        (get.clone(), "/api/v1/namespaces/default/pods/p"),
        (get.clone(), "/api/v2/nodes"),
        (get.clone(), "/apis/foo/v1/bars"),
        (post.clone(), "/apis/foo/v1/bars"),
        (get.clone(), "/apis/machineconfiguration.openshift.io/v2/machineconfigs"),
        (get.clone(), "/apis/machineconfiguration.openshift.io/v1/machineconfigs/x/status"),
        (get.clone(), "/apis/machineconfiguration.openshift.io/v1/machineconfigpools/x/scale"),
        (get.clone(), "/apis/machineconfiguration.openshift.io/v1/namespaces/default/machineconfigs"),
        (get.clone(), "/nonsense"),
    ] {
        let r = send(&admin, m.clone(), path, "application/json", if m == post { &body } else { b"" }).await;
        assert_status(&r, 404, "NotFound", &format!("{m} {path}"));
    }
    // Pods: aloft runs none. The lists are served empty (`kubectl describe node` lists a node's
    // pods and gives up on a 404); nothing else about pods is.
    for path in ["/api/v1/pods?fieldSelector=spec.nodeName%3Dn1", "/api/v1/namespaces/default/pods"] {
        let r = send(&admin, get.clone(), path, "application/json", b"").await;
        assert_eq!(r.code, 200, "GET {path}: {}", r.body);
        assert_eq!(
            (&r.body["kind"], &r.body["apiVersion"], &r.body["items"]),
            (&json!("PodList"), &json!("v1"), &json!([]))
        );
        assert!(r.body["metadata"]["resourceVersion"].as_str().is_some_and(|v| !v.is_empty()), "{}", r.body);
    }
    let r = send(&admin, post.clone(), "/api/v1/pods", "application/json", &body).await;
    assert_eq!(r.code, 405, "POST a pod: {}", r.body);
    let r = send(&admin, get.clone(), "/api/v1/pods?watch=true", "application/json", b"").await;
    assert_eq!(r.code, 405, "watch pods: {}", r.body);
    // A missing object of a known kind is 404 naming it.
    let r = admin.get(&path_of(&MACHINE_CONFIG, Some("absent"))).await.unwrap();
    assert_status(&r, 404, "NotFound", "missing object");
    assert!(message(&r).contains("absent"), "{}", r.body);
    // Methods a path does not support are 405.
    let r = send(&admin, reqwest::Method::DELETE, &path_of(&MACHINE_CONFIG, None), "application/json", b"").await;
    assert_eq!(r.code, 405, "DELETE on a collection: {}", r.body);
    let r = send(&admin, reqwest::Method::POST, &path_of(&MACHINE_CONFIG, Some("x")), "application/json", b"{}").await;
    assert_eq!(r.code, 405, "POST to an object: {}", r.body);
    assert_eq!(head(&admin).await, before, "nothing was stored");
}

/// A `serve` flag that does not parse stops the coordinator before it touches anything: the
/// error names the flag, and no data directory is created.
#[test]
fn a_bad_event_ttl_is_refused_naming_the_flag_and_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let out = std::process::Command::new(bin("aloft-coordinator"))
        .args(["serve", "--listen", "127.0.0.1:0", "--event-ttl", "an hour", "--data-dir"])
        .arg(&data)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "serve accepted --event-ttl 'an hour': {stderr}");
    assert!(stderr.contains("--event-ttl"), "the error names the flag: {stderr}");
    assert!(!data.exists(), "nothing was created");
}

/// `ALOFT_FAILPOINTS` naming a point the agent does not have, or an action the fail crate does
/// not know, stops the agent before it does anything (a test that meant to hold the agent
/// somewhere must not run on without it): the error names the variable and the entry, and the
/// agent's root stays empty. An unknown point and a malformed entry are named by every build;
/// an action the fail crate does not know is checked only by a build with failpoints (the
/// workspace's `cargo build --bins` has none, and refuses every entry as such; the action's
/// refusal is unit-tested in agent/src/failpoints.rs, which is built with them).
#[test]
fn bad_failpoints_stop_the_agent_before_it_starts() {
    for (spec, says, every_build) in [
        ("os-after-lunch=pause", "os-after-lunch", true),
        ("os-after-stage=explode(3)", "os-after-stage", false),
        ("os-after-stage", "os-after-stage", true),
    ] {
        let root = tempfile::tempdir().unwrap();
        let out = std::process::Command::new(bin("aloft-agent"))
            .args(["--coordinator", "https://127.0.0.1:9", "--node-name", "n1", "--root"])
            .arg(root.path())
            .env("ALOFT_FAILPOINTS", spec)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{spec}: the agent started: {stderr}");
        assert!(stderr.contains("ALOFT_FAILPOINTS"), "{spec}: the error names the variable: {stderr}");
        let builtin = !stderr.contains("built without failpoints");
        assert!(!(builtin || every_build) || stderr.contains(says), "{spec}: the error names the entry: {stderr}");
        assert_eq!(std::fs::read_dir(root.path()).unwrap().count(), 0, "{spec}: the root was written");
    }
}

/// A reboot timeout of zero (every reboot overdue at once: the agent would ask logind again in a
/// loop) or one that is not a number stops the agent before it does anything, naming the flag
/// (and the variable's value as the flag's).
#[test]
fn a_bad_reboot_timeout_stops_the_agent_naming_the_flag() {
    for (flag, env) in [(Some("0"), None), (Some("soon"), None), (None, Some("0"))] {
        let root = tempfile::tempdir().unwrap();
        let mut cmd = std::process::Command::new(bin("aloft-agent"));
        cmd.args(["--coordinator", "https://127.0.0.1:9", "--node-name", "n1", "--root"]).arg(root.path());
        if let Some(v) = flag {
            cmd.args(["--reboot-timeout-seconds", v]);
        }
        if let Some(v) = env {
            cmd.env("ALOFT_REBOOT_TIMEOUT_SECONDS", v);
        }
        let out = cmd.output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{flag:?}/{env:?}: the agent started: {stderr}");
        assert!(stderr.contains("--reboot-timeout-seconds"), "{flag:?}/{env:?}: the error names the flag: {stderr}");
        assert_eq!(std::fs::read_dir(root.path()).unwrap().count(), 0, "{flag:?}/{env:?}: the root was written");
    }
}

/// An answer with its `Warning` headers, which [`Reply`] does not carry.
struct Raw {
    code: u16,
    warnings: Vec<String>,
    body: Value,
}

async fn raw(c: &Coordinator, method: reqwest::Method, path: &str, ctype: &str, body: &[u8]) -> Raw {
    install_crypto();
    let http = reqwest::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(&c.ca_pem()).unwrap())
        .build()
        .unwrap();
    let r = http
        .request(method, format!("{}{path}", c.url()))
        .bearer_auth(c.admin_token())
        .header("content-type", ctype)
        .body(body.to_vec())
        .send()
        .await
        .unwrap();
    let code = r.status().as_u16();
    let warnings = r.headers().get_all("warning").iter().map(|v| v.to_str().unwrap().to_string()).collect();
    let body = serde_json::from_slice(&r.bytes().await.unwrap()).unwrap_or(Value::Null);
    Raw { code, warnings, body }
}

fn pool_with(name: &str, spec: Value) -> Value {
    let mut p = machine_config_pool(name, "worker");
    p["spec"].as_object_mut().unwrap().extend(spec.as_object().unwrap().clone());
    p
}

/// A pool's rollout numbers beyond any sane value (a soak of 292 billion years) would overflow
/// the controllers' date arithmetic: admission refuses them, naming the field and the bound; and
/// maintenance windows that cannot be read, naming each wrong field.
#[tokio::test]
async fn absurd_pool_numbers_are_422_naming_the_field() {
    let c = Coordinator::start();
    let admin = c.client();
    let coll = path_of(&MACHINE_CONFIG_POOL, None);
    let before = head(&admin).await;
    let cases: Vec<(Value, &str)> = vec![
        (json!({"rollout": {"soakSeconds": 9223372036854775807i64}}), "spec.rollout.soakSeconds"),
        (json!({"rollout": {"soakSeconds": 10000000000000i64}}), "spec.rollout.soakSeconds"),
        (json!({"rollout": {"canary": 10000000000i64}}), "spec.rollout.canary"),
        (json!({"rollout": {"maxFailures": -1}}), "spec.rollout.maxFailures"),
        (json!({"drain": {"timeoutSeconds": 9223372036854775807i64}}), "spec.drain.timeoutSeconds"),
        (
            json!({"drain": {"hooks": [{"url": "http://lb/", "timeoutSeconds": 86400}]}}),
            "spec.drain.hooks[0].timeoutSeconds",
        ),
    ];
    for (spec, field) in cases {
        let r = admin.post(&coll, &pool_with("worker", spec.clone())).await.unwrap();
        assert_status(&r, 422, "Invalid", &spec.to_string());
        assert_eq!(cause_fields(&r.body), [field], "{spec}: {}", r.body);
    }
    // Maintenance windows: every wrong field named, in the schedule's order.
    let window = |w: Value| json!({"rollout": {"maintenance": {"windows": [w]}}});
    let cases: Vec<(Value, Vec<&str>, &str)> = vec![
        (
            json!({"rollout": {"maintenance": {"timeZone": "Mars/Olympus",
                "windows": [{"days": ["Sat"], "startTime": "23:30", "lengthMinutes": 60}]}}}),
            vec!["spec.rollout.maintenance.timeZone"],
            "Invalid value: \"Mars/Olympus\": not a time zone of this coordinator's database",
        ),
        (
            window(json!({"days": ["Sat", "Funday"], "startTime": "25:00", "lengthMinutes": 0})),
            vec![
                "spec.rollout.maintenance.windows[0].days[1]",
                "spec.rollout.maintenance.windows[0].startTime",
                "spec.rollout.maintenance.windows[0].lengthMinutes",
            ],
            "Invalid value: \"Funday\": want Mon, Tue, Wed, Thu, Fri, Sat or Sun",
        ),
        (
            window(json!({"days": ["Sun"], "startTime": "02:00", "lengthMinutes": 10081})),
            vec!["spec.rollout.maintenance.windows[0].lengthMinutes"],
            "must be from 1 to 10080 (a week)",
        ),
        (
            json!({"rollout": {"maintenance": {"timeZone": "UTC"}}}),
            vec!["spec.rollout.maintenance.windows"],
            "Required value: at least one window",
        ),
    ];
    for (spec, fields, words) in cases {
        let r = admin.post(&coll, &pool_with("worker", spec.clone())).await.unwrap();
        assert_status(&r, 422, "Invalid", &spec.to_string());
        assert_eq!(cause_fields(&r.body), fields, "{spec}: {}", r.body);
        assert!(message(&r).contains(words), "{spec}: {}", message(&r));
    }
    let r = admin.post(&coll, &pool_with("worker", json!({"rollout": {"soakSeconds": 9223372036854775807i64}}))).await;
    assert!(message(&r.unwrap()).contains("must be at most 31536000 (one year)"));
    // Past what an i64 holds (JSON reads 2^64 as a float): the same words, not serde's.
    let big = serde_json::to_vec(&pool_with("worker", json!({"rollout": {"maxFailures": 0}}))).unwrap();
    let big = String::from_utf8(big).unwrap().replace("\"maxFailures\":0", "\"maxFailures\":18446744073709551616");
    let r = send(&admin, reqwest::Method::POST, &coll, "application/json", big.as_bytes()).await;
    assert_status(&r, 422, "Invalid", "maxFailures 2^64");
    assert_eq!(cause_fields(&r.body), ["spec.rollout.maxFailures"], "{}", r.body);
    let m = message(&r);
    assert!(
        m.contains("spec.rollout.maxFailures: Invalid value: 1.8446744073709552e19: must be at most 2147483647"),
        "{m}"
    );
    assert_eq!(head(&admin).await, before, "nothing was stored");

    // The same on a patch of a stored pool, which stays as it was.
    let ok = admin.post(&coll, &pool_with("worker", json!({"rollout": {"soakSeconds": 600}}))).await.unwrap();
    assert_eq!(ok.code, 201, "{}", ok.body);
    let p = path_of(&MACHINE_CONFIG_POOL, Some("worker"));
    let r = admin
        .patch(&p, "application/merge-patch+json", &json!({"spec": {"rollout": {"soakSeconds": 10000000000000i64}}}))
        .await
        .unwrap();
    assert_status(&r, 422, "Invalid", "patch to an absurd soak");
    assert_eq!(cause_fields(&r.body), ["spec.rollout.soakSeconds"]);
    assert_eq!(get_ok(&admin, &MACHINE_CONFIG_POOL, "worker").await["spec"], ok.body["spec"]);
}

/// `?fieldValidation=`: Strict refuses unknown fields (and repeated JSON keys) with kube's
/// `strict decoding error`; Warn, the default, stores and warns in `Warning` headers; Ignore
/// says nothing. Only the parts aloft has a schema for are checked.
#[tokio::test]
async fn unknown_fields_follow_field_validation() {
    let c = Coordinator::start();
    let admin = c.client();
    let pools = path_of(&MACHINE_CONFIG_POOL, None);
    let post = reqwest::Method::POST;
    let typo_pool =
        pool_with("typo", json!({"maxUnavailble": 3, "rollout": {"canery": 1, "soakSecond": 1800, "bogus": 1}}));
    let body = serde_json::to_vec(&typo_pool).unwrap();
    let before = head(&admin).await;

    let r = raw(&c, post.clone(), &format!("{pools}?fieldValidation=Strict"), "application/json", &body).await;
    assert_eq!(r.code, 400, "{}", r.body);
    assert_eq!(r.body["reason"], "BadRequest");
    let msg = r.body["message"].as_str().unwrap();
    for f in ["spec.maxUnavailble", "spec.rollout.canery", "spec.rollout.soakSecond", "spec.rollout.bogus"] {
        assert!(msg.contains(&format!("unknown field \"{f}\"")), "{f}: {msg}");
    }
    assert!(msg.contains("strict decoding error"), "{msg}");
    let r = raw(&c, post.clone(), &format!("{pools}?fieldValidation=strictly"), "application/json", &body).await;
    assert_eq!(r.code, 400, "{}", r.body);
    assert!(r.body["message"].as_str().unwrap().contains("\"strictly\""), "{}", r.body);
    // Repeated keys: serde_json (like Go) keeps the last one, which Strict refuses.
    let dup = br#"{"apiVersion": "machineconfiguration.openshift.io/v1", "kind": "MachineConfig",
        "metadata": {"name": "first"}, "spec": {}, "metadata": {"name": "second"}}"#;
    let mcs = path_of(&MACHINE_CONFIG, None);
    let r = raw(&c, post.clone(), &format!("{mcs}?fieldValidation=Strict"), "application/json", dup).await;
    assert_eq!(r.code, 400, "{}", r.body);
    assert!(r.body["message"].as_str().unwrap().contains("json: duplicate field \"metadata\""), "{}", r.body);
    for (coll, obj, field) in [
        (
            path_of(&resources::NODE_DISRUPTION_BUDGET, None),
            json!({"apiVersion": "aloft.dev/v1", "kind": "NodeDisruptionBudget", "metadata": {"name": "b"},
                "spec": {"maxUnavialable": 1, "minAvailable": 1}}),
            "spec.maxUnavialable",
        ),
        (
            mcs.clone(),
            json!({"apiVersion": "machineconfiguration.openshift.io/v1", "kind": "MachineConfig",
            "metadata": {"name": "m"}, "spec": {"confg": {}}}),
            "spec.confg",
        ),
    ] {
        let r = raw(
            &c,
            post.clone(),
            &format!("{coll}?fieldValidation=Strict"),
            "application/json",
            &serde_json::to_vec(&obj).unwrap(),
        )
        .await;
        assert_eq!(r.code, 400, "{}", r.body);
        assert!(r.body["message"].as_str().unwrap().contains(&format!("unknown field \"{field}\"")), "{}", r.body);
    }
    assert_eq!(head(&admin).await, before, "Strict stored nothing");

    // Warn (the default): stored, every field named in a Warning header, and kept.
    let r = raw(&c, post.clone(), &pools, "application/json", &body).await;
    assert_eq!(r.code, 201, "{}", r.body);
    let mut w = r.warnings.clone();
    w.sort();
    assert_eq!(
        w,
        [
            r#"299 - "unknown field \"spec.maxUnavailble\"""#,
            r#"299 - "unknown field \"spec.rollout.bogus\"""#,
            r#"299 - "unknown field \"spec.rollout.canery\"""#,
            r#"299 - "unknown field \"spec.rollout.soakSecond\"""#,
        ]
    );
    assert_eq!(r.body["spec"]["maxUnavailble"], 3, "unknown fields are kept");
    // Ignore: no warnings.
    let mut quiet = typo_pool.clone();
    quiet["metadata"]["name"] = "quiet".into();
    let r = raw(
        &c,
        post.clone(),
        &format!("{pools}?fieldValidation=Ignore"),
        "application/json",
        &serde_json::to_vec(&quiet).unwrap(),
    )
    .await;
    assert_eq!((r.code, r.warnings.len()), (201, 0), "{}", r.body);

    // Updates: only what the write adds is judged, so a pool stored with a typo can still be
    // changed under Strict; a new typo is refused and changes nothing.
    let p = path_of(&MACHINE_CONFIG_POOL, Some("typo"));
    let stored = get_ok(&admin, &MACHINE_CONFIG_POOL, "typo").await;
    let patch = |v: Value| serde_json::to_vec(&v).unwrap();
    let r = raw(
        &c,
        reqwest::Method::PATCH,
        &format!("{p}?fieldValidation=Strict"),
        "application/merge-patch+json",
        &patch(json!({"spec": {"paused": true}})),
    )
    .await;
    assert_eq!((r.code, r.warnings.len()), (200, 0), "{}", r.body);
    let stored = {
        let mut s = stored;
        s["spec"]["paused"] = true.into();
        s
    };
    let r = raw(
        &c,
        reqwest::Method::PATCH,
        &format!("{p}?fieldValidation=Strict"),
        "application/merge-patch+json",
        &patch(json!({"spec": {"drain": {"timeoutSecs": 60}}})),
    )
    .await;
    assert_eq!(r.code, 400, "{}", r.body);
    assert!(r.body["message"].as_str().unwrap().contains("unknown field \"spec.drain.timeoutSecs\""), "{}", r.body);
    let r = raw(
        &c,
        reqwest::Method::PATCH,
        &format!("{p}?fieldValidation=Strict"),
        "application/merge-patch+json",
        br#"{"spec": {"paused": false}, "spec": {"paused": false}}"#,
    )
    .await;
    assert_eq!(r.code, 400, "a patch repeating a key: {}", r.body);
    let mut put = get_ok(&admin, &MACHINE_CONFIG_POOL, "typo").await;
    put["spec"]["nodeSelecter"] = json!({});
    let r = raw(
        &c,
        reqwest::Method::PUT,
        &format!("{p}?fieldValidation=Strict"),
        "application/json",
        &serde_json::to_vec(&put).unwrap(),
    )
    .await;
    assert_eq!(r.code, 400, "{}", r.body);
    let got = get_ok(&admin, &MACHINE_CONFIG_POOL, "typo").await;
    assert_eq!(got["spec"], stored["spec"], "refused updates changed nothing");
    let r = raw(
        &c,
        reqwest::Method::PATCH,
        &p,
        "application/merge-patch+json",
        &patch(json!({"spec": {"drain": {"timeoutSecs": 60}}})),
    )
    .await;
    assert_eq!(r.code, 200, "{}", r.body);
    assert_eq!(r.warnings, [r#"299 - "unknown field \"spec.drain.timeoutSecs\"""#]);
}

/// Events are checked as Nodes are: a typo in ObjectMeta and an unknown top-level field are a
/// `strict decoding error` under Strict (what `kubectl apply` sends), and warnings under Warn.
#[tokio::test]
async fn unknown_event_fields_follow_field_validation() {
    let c = Coordinator::start();
    let admin = c.client();
    let events = resource_path(resources::EVENT.path_ref(), Some("default"), None);
    let event = |name: &str| {
        json!({"apiVersion": "v1", "kind": "Event", "metadata": {"name": name, "namespace": "default",
            "lables": {"a": "b"}}, "bogusTop": 1,
            "involvedObject": {"apiVersion": "v1", "kind": "Node", "name": "n1"}, "reason": "Test",
            "message": "m", "type": "Normal", "source": {"component": "tests"}, "count": 1,
            "firstTimestamp": "2026-01-01T00:00:00Z", "lastTimestamp": "2026-01-01T00:00:00Z"})
    };
    let before = head(&admin).await;
    let body = serde_json::to_vec(&event("strict")).unwrap();
    let r =
        raw(&c, reqwest::Method::POST, &format!("{events}?fieldValidation=Strict"), "application/json", &body).await;
    assert_eq!(r.code, 400, "{}", r.body);
    let msg = r.body["message"].as_str().unwrap();
    assert!(msg.contains("strict decoding error"), "{msg}");
    for f in ["metadata.lables", "bogusTop"] {
        assert!(msg.contains(&format!("unknown field \"{f}\"")), "{f}: {msg}");
    }
    assert_eq!(head(&admin).await, before, "Strict stored nothing");
    let body = serde_json::to_vec(&event("warned")).unwrap();
    let r = raw(&c, reqwest::Method::POST, &events, "application/json", &body).await;
    assert_eq!(r.code, 201, "{}", r.body);
    let mut w = r.warnings.clone();
    w.sort();
    assert_eq!(w, [r#"299 - "unknown field \"bogusTop\"""#, r#"299 - "unknown field \"metadata.lables\"""#]);
    // Every field of a core/v1 Event is known.
    let mut full = event("full");
    full["metadata"].as_object_mut().unwrap().remove("lables");
    full.as_object_mut().unwrap().remove("bogusTop");
    let extra = json!({"eventTime": null, "series": {"count": 2, "lastObservedTime": "2026-01-01T00:00:00.000000Z"},
        "action": "Drain", "related": {"kind": "Node", "name": "n2"}, "reportingComponent": "tests",
        "reportingInstance": "i"});
    full.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
    let body = serde_json::to_vec(&full).unwrap();
    let r =
        raw(&c, reqwest::Method::POST, &format!("{events}?fieldValidation=Strict"), "application/json", &body).await;
    assert_eq!((r.code, r.warnings.len()), (201, 0), "{}", r.body);
}

/// What an agent would refuse (a unit name that is a path, contents that are not inline or not
/// base64, empty kernel arguments) is refused before it is stored, naming the field.
fn file_at(path: &str) -> Value {
    json!({"ignition": {"version": "3.4.0"}, "storage": {"files": [{"path": path, "contents": {"source": "data:,x"}}]}})
}

#[tokio::test]
async fn machine_configs_an_agent_refuses_are_422() {
    let c = Coordinator::start();
    let admin = c.client();
    let coll = path_of(&MACHINE_CONFIG, None);
    let before = head(&admin).await;
    let ign = |rest: Value| {
        let mut cfg = json!({"ignition": {"version": "3.4.0"}});
        cfg.as_object_mut().unwrap().extend(rest.as_object().unwrap().clone());
        cfg
    };
    let cases: Vec<(&str, Value, &str)> = vec![
        (
            "unit-path",
            ign(json!({"systemd": {"units": [{"name": "../../x.service", "contents": "[Unit]"}]}})),
            "spec.config.systemd.units[0].name",
        ),
        (
            "dropin-path",
            ign(json!({"systemd": {"units": [{"name": "a.service", "dropins": [{"name": "../x.conf"}]}]}})),
            "spec.config.systemd.units[0].dropins[0].name",
        ),
        (
            "bad-base64",
            ign(
                json!({"storage": {"files": [{"path": "/etc/x", "contents": {"source": "data:;base64,!!!notbase64"}}]}}),
            ),
            "spec.config.storage.files[0].contents.source",
        ),
        (
            "remote",
            ign(json!({"storage": {"files": [{"path": "/etc/x", "contents": {"source": "http://evil/x"}}]}})),
            "spec.config.storage.files[0].contents.source",
        ),
        // What every agent refuses whatever its host (aloft_api::node_limits): these were stored
        // and rendered, and every node of the pool went Degraded on them.
        ("proc", file_at("/proc/sys/kernel/hostname"), "spec.config.storage.files[0].path"),
        ("root", file_at("/"), "spec.config.storage.files[0].path"),
        ("agent-state", file_at("/var/lib/aloft/credential.json"), "spec.config.storage.files[0].path"),
        ("temp-name", file_at("/etc/x.aloft-tmp"), "spec.config.storage.files[0].path"),
        (
            "merge",
            json!({"ignition": {"version": "3.4.0", "config": {"merge": [{"source": "https://evil.example/x.ign"}]}}}),
            "spec.config.ignition.config.merge",
        ),
        (
            // The same in Ignition 2.x, where it is `append`: it was stored and rendered (as
            // `merge`), and every node refused it.
            "append",
            json!({"ignition": {"version": "2.2.0", "config": {"append": [{"source": "https://evil.example/x.ign"}]}},
                "storage": {"files": [{"path": "/etc/x", "filesystem": "root", "contents": {"source": "data:,x"}}]}}),
            "spec.config.ignition.config.append",
        ),
        (
            "ssh-two-lines",
            ign(
                json!({"passwd": {"users": [{"name": "core", "sshAuthorizedKeys": ["ssh-rsa AAA x\nssh-rsa BBB y"]}]}}),
            ),
            "spec.config.passwd.users[0].sshAuthorizedKeys[0]",
        ),
        (
            "hash-colon",
            ign(json!({"passwd": {"users": [{"name": "core", "passwordHash": "$6$a:b"}]}})),
            "spec.config.passwd.users[0].passwordHash",
        ),
        (
            "owner-both",
            ign(json!({"storage": {"files": [{"path": "/etc/x", "user": {"id": 0, "name": "root"}}]}})),
            "spec.config.storage.files[0].user",
        ),
        (
            "owner-id",
            ign(json!({"storage": {"files": [{"path": "/etc/x", "group": {"id": 99999999999u64}}]}})),
            "spec.config.storage.files[0].group.id",
        ),
        (
            "file-and-unit",
            ign(
                json!({"storage": {"files": [{"path": "/etc/systemd/system/a.service", "contents": {"source": "data:,x"}}]},
                "systemd": {"units": [{"name": "a.service", "contents": "[Unit]\n"}]}}),
            ),
            "spec.config.storage.files[0].path",
        ),
        (
            "gzip-nothing",
            ign(json!({"storage": {"files": [{"path": "/etc/x", "contents": {"compression": "gzip"}}]}})),
            "spec.config.storage.files[0].contents.compression",
        ),
    ];
    for (name, config, field) in cases {
        let r = admin.post(&coll, &mc_with_config(name, config)).await.unwrap();
        assert_status(&r, 422, "Invalid", name);
        assert_eq!(cause_fields(&r.body), [field], "{name}: {}", r.body);
    }
    let mut mc = machine_config("kargs", "worker");
    mc["spec"]["kernelArguments"] = json!(["a b", ""]);
    let r = admin.post(&coll, &mc).await.unwrap();
    assert_status(&r, 422, "Invalid", "an empty kernel argument");
    assert_eq!(cause_fields(&r.body), ["spec.kernelArguments[1]"], "\"a b\" is two arguments, as in MCO: {}", r.body);
    assert_eq!(head(&admin).await, before, "nothing was stored");
}

/// Label keys and values, and the selectors of pools and budgets, by Kubernetes' rules.
#[tokio::test]
async fn labels_and_selectors_are_validated() {
    let c = Coordinator::start();
    let admin = c.client();
    let node = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1", "labels": {"zone": "a"}}});
    let r = admin.post(&path_of(&NODE, None), &node).await.unwrap();
    assert_eq!(r.code, 201, "{}", r.body);
    let stored = r.body;
    let before = head(&admin).await;
    let np = path_of(&NODE, Some("n1"));
    for labels in [json!({"ok": "has space"}), json!({"ok": "v".repeat(100)}), json!({"bad key!": "x"})] {
        let r =
            admin.patch(&np, "application/merge-patch+json", &json!({"metadata": {"labels": labels}})).await.unwrap();
        assert_status(&r, 422, "Invalid", &labels.to_string());
        assert_eq!(cause_fields(&r.body), ["metadata.labels"], "{labels}: {}", r.body);
    }
    let r = admin.patch(&np, "application/merge-patch+json", &json!({"metadata": {"labels": {"bad key!": "x"}}})).await;
    assert!(
        message(&r.unwrap()).contains(
            "metadata.labels: Invalid value: \"bad key!\": name part must consist of alphanumeric characters"
        ),
        "kube's wording"
    );
    let pool = pool_with("p", json!({"nodeSelector": {"matchLabels": {"bad key!": "x y"}}}));
    let r = admin.post(&path_of(&MACHINE_CONFIG_POOL, None), &pool).await.unwrap();
    assert_status(&r, 422, "Invalid", "pool nodeSelector");
    assert_eq!(cause_fields(&r.body), ["spec.nodeSelector.matchLabels", "spec.nodeSelector.matchLabels"]);
    let ndb = json!({"apiVersion": "aloft.dev/v1", "kind": "NodeDisruptionBudget", "metadata": {"name": "db"},
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"bad key!": "db"}}}});
    let r = admin.post(&path_of(&resources::NODE_DISRUPTION_BUDGET, None), &ndb).await.unwrap();
    assert_status(&r, 422, "Invalid", "budget selector");
    assert_eq!(cause_fields(&r.body), ["spec.selector.matchLabels"]);
    let ndb = json!({"apiVersion": "aloft.dev/v1", "kind": "NodeDisruptionBudget", "metadata": {"name": "db"},
        "spec": {"maxUnavailable": 1, "groupBy": ["zone", "zone"]}});
    let r = admin.post(&path_of(&resources::NODE_DISRUPTION_BUDGET, None), &ndb).await.unwrap();
    assert_status(&r, 422, "Invalid", "budget groupBy twice");
    assert_eq!(cause_fields(&r.body), ["spec.groupBy[1]"]);
    assert!(message(&r).contains("spec.groupBy[1]: Duplicate value: \"zone\""), "{}", message(&r));
    assert_eq!(head(&admin).await, before, "nothing was stored");
    assert_eq!(get_ok(&admin, &NODE, "n1").await, stored);
}

/// Errors in words a user acts on: an int-or-percent that is neither, a failed JSON patch
/// naming the object's kind.
#[tokio::test]
async fn error_texts_name_the_field_and_kind() {
    let c = Coordinator::start();
    let admin = c.client();
    let coll = path_of(&MACHINE_CONFIG_POOL, None);
    for (v, shown) in [(json!(1.5), "1.5"), (json!(true), "true")] {
        let r = admin.post(&coll, &pool_with("worker", json!({"maxUnavailable": v}))).await.unwrap();
        assert_status(&r, 422, "Invalid", shown);
        assert_eq!(
            message(&r),
            format!(
                "MachineConfigPool.machineconfiguration.openshift.io \"worker\" is invalid: spec.maxUnavailable: Invalid value: {shown}: must be an integer or a percentage like \"10%\""
            )
        );
    }
    let ok = admin.post(&coll, &machine_config_pool("worker", "worker")).await.unwrap();
    assert_eq!(ok.code, 201, "{}", ok.body);
    let r = admin
        .patch(
            &path_of(&MACHINE_CONFIG_POOL, Some("worker")),
            "application/json-patch+json",
            &json!([{"op": "test", "path": "/spec/paused", "value": true}]),
        )
        .await
        .unwrap();
    assert_status(&r, 422, "Invalid", "a failed JSON patch test");
    assert!(
        message(&r).starts_with("MachineConfigPool.machineconfiguration.openshift.io \"worker\" is invalid: "),
        "named as the other 422s name the kind: {}",
        r.body
    );
    assert_eq!(r.body["details"]["kind"], "MachineConfigPool");
    assert_eq!(r.body["details"]["group"], "machineconfiguration.openshift.io");
    assert_eq!(get_ok(&admin, &MACHINE_CONFIG_POOL, "worker").await["spec"], ok.body["spec"]);
}

/// YAML bodies are checked for repeated keys as JSON ones are, with kube-apiserver's wording
/// (`line N: key "x" already set in map`): Strict refuses and writes nothing, Warn writes (the
/// last value wins) and warns.
#[tokio::test]
async fn repeated_yaml_keys_are_refused_under_strict_and_warned_under_warn() {
    let c = Coordinator::start();
    let admin = c.client();
    let post = reqwest::Method::POST;
    let mcs = path_of(&MACHINE_CONFIG, None);
    let yaml = |name: &str| {
        format!(
            "apiVersion: machineconfiguration.openshift.io/v1\nkind: MachineConfig\nmetadata:\n  name: {name}\n  \
             name: {name}-again\nspec: {{}}\n"
        )
    };
    let before = list_names(&admin, &MACHINE_CONFIG).await;
    let r =
        raw(&c, post.clone(), &format!("{mcs}?fieldValidation=Strict"), "application/yaml", yaml("y").as_bytes()).await;
    assert_eq!(r.code, 400, "{}", r.body);
    let msg = r.body["message"].as_str().unwrap();
    assert!(msg.contains("strict decoding error: line 5: key \"name\" already set in map"), "{msg}");
    assert_eq!(list_names(&admin, &MACHINE_CONFIG).await, before, "nothing written");

    let r = raw(&c, post, &mcs, "application/yaml", yaml("w").as_bytes()).await;
    assert_eq!(r.code, 201, "{}", r.body);
    assert_eq!(r.warnings, [r#"299 - "line 5: key \"name\" already set in map""#]);
    assert_eq!(r.body["metadata"]["name"], "w-again", "the last value wins");
}

/// Warnings earned before a write is refused come with the error, as kube-apiserver sends them:
/// an unknown field warned about, then a 422 for an invalid value (create and update).
#[tokio::test]
async fn warnings_come_with_the_error_that_follows_them() {
    let c = Coordinator::start();
    let pools = path_of(&MACHINE_CONFIG_POOL, None);
    let bad = pool_with("warned", json!({"maxUnavailble": 3, "maxUnavailable": -1}));
    let r = raw(&c, reqwest::Method::POST, &pools, "application/json", &serde_json::to_vec(&bad).unwrap()).await;
    assert_eq!(r.code, 422, "{}", r.body);
    assert_eq!(r.warnings, [r#"299 - "unknown field \"spec.maxUnavailble\"""#], "{}", r.body);

    let good = pool_with("warned", json!({}));
    let r = raw(&c, reqwest::Method::POST, &pools, "application/json", &serde_json::to_vec(&good).unwrap()).await;
    assert_eq!(r.code, 201, "{}", r.body);
    let one = path_of(&MACHINE_CONFIG_POOL, Some("warned"));
    let r = raw(&c, reqwest::Method::PUT, &one, "application/json", &serde_json::to_vec(&bad).unwrap()).await;
    assert_eq!(r.code, 422, "{}", r.body);
    assert_eq!(r.warnings, [r#"299 - "unknown field \"spec.maxUnavailble\"""#], "{}", r.body);
}

/// Requests that are small but ask for too much, from the least trusted caller there is (a node's
/// own credential, which may patch its own Node): a JSON patch whose copies double what they copy
/// (40 copies in 3 KB asked for terabytes: the coordinator was killed for its memory), and objects
/// nested deeper than the store can read back (they were stored, and the coordinator then did
/// not start again: it reads every Node at start). Each is refused naming the limit, nothing is
/// stored, and the coordinator still runs and starts again.
#[tokio::test]
async fn patches_that_multiply_or_nest_too_deep_are_refused_and_the_coordinator_still_starts() {
    let mut c = Coordinator::start();
    let admin = c.client();
    let node = c.node_client("n1", json!({"node-role.kubernetes.io/worker": ""})).await;
    let p = path_of(&NODE, Some("n1"));
    let before = get_ok(&admin, &NODE, "n1").await;
    let json_patch = |ops: Vec<Value>| Value::Array(ops);

    // Copies that double what they copy.
    let mut doubling = vec![json!({"op": "add", "path": "/status", "value": {"x": "y".repeat(100)}})];
    doubling.extend((0..40).map(|i| json!({"op": "copy", "from": "/status", "path": format!("/status/a{i}")})));
    let r = node.patch(&p, "application/json-patch+json", &json_patch(doubling)).await.unwrap();
    assert_status(&r, 413, "RequestEntityTooLarge", "copies that double the Node's status");
    assert!(message(&r).contains("accumulated size increase of copy"), "{}", r.body);
    assert!(c.is_running(), "the coordinator survived the doubling patch");

    // A value nested 110 levels under /status (the body itself parses: 114 levels).
    let mut deep = json!({});
    for _ in 0..110 {
        deep = json!({"a": deep});
    }
    let r = node
        .patch(
            &p,
            "application/json-patch+json",
            &json_patch(vec![json!({"op": "add", "path": "/status", "value": {"z": deep}})]),
        )
        .await
        .unwrap();
    assert_status(&r, 422, "Invalid", "a value nested 113 levels deep");
    assert!(message(&r).contains("levels deep"), "{}", r.body);
    // Copies of a value into its own deepest point: each doubles the nesting.
    let mut ops = vec![
        json!({"op": "add", "path": "/status", "value": {}}),
        json!({"op": "add", "path": "/status/z", "value": {"a": {}}}),
    ];
    let mut leaf = "/status/z/a".to_string();
    for _ in 0..8 {
        ops.push(json!({"op": "copy", "from": "/status/z", "path": leaf.clone()}));
        leaf = format!("{leaf}{}", leaf.trim_start_matches("/status/z"));
    }
    let r = node.patch(&p, "application/json-patch+json", &json_patch(ops)).await.unwrap();
    assert_status(&r, 422, "Invalid", "copies that double the nesting");
    // A merge patch that nests too deep through the stored object's own depth.
    let mut deep = json!({});
    for _ in 0..110 {
        deep = json!({"a": deep});
    }
    let status = format!("{p}/status");
    let r = node.patch(&status, "application/merge-patch+json", &json!({"status": {"z": deep}})).await.unwrap();
    assert_status(&r, 422, "Invalid", "a merge patch nesting 112 levels deep");
    assert!(message(&r).contains("status.z.a.a"), "the cause names where: {}", r.body);
    assert_eq!(get_ok(&admin, &NODE, "n1").await, before, "the Node is unchanged");

    // YAML nests as deep as its parser lets it (128): refused too.
    let before_head = head(&admin).await;
    let mut yaml = String::from(
        "apiVersion: machineconfiguration.openshift.io/v1\nkind: MachineConfig\nmetadata:\n  name: deep\nspec:\n  x:\n",
    );
    for i in 0..124 {
        yaml.push_str(&format!("{}a:\n", " ".repeat(4 + 2 * i)));
    }
    yaml.push_str(&format!("{}b: 1\n", " ".repeat(4 + 2 * 124)));
    let r = send(
        &admin,
        reqwest::Method::POST,
        &format!("{}?fieldValidation=Ignore", path_of(&MACHINE_CONFIG, None)),
        "application/yaml",
        yaml.as_bytes(),
    )
    .await;
    assert_ne!(r.code / 100, 2, "a MachineConfig nested 127 levels deep was stored: {}", r.body);
    assert_eq!(head(&admin).await, before_head, "nothing stored");

    // A patch at the limit still goes through, and the coordinator starts again on its store.
    let r = node
        .patch(
            &status,
            "application/json-patch+json",
            &json_patch(vec![json!({"op": "add", "path": "/status", "value": {"ok": {"a": {"b": 1}}}})]),
        )
        .await
        .unwrap();
    assert_eq!(r.code, 200, "{}", r.body);
    c.restart();
    assert_eq!(get_ok(&c.client(), &NODE, "n1").await["status"]["ok"], json!({"a": {"b": 1}}));
}
