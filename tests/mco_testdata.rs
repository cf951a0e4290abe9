//! OpenShift's own MachineConfig and MachineConfigPool documents (shared/testdata/mco, taken
//! unchanged from openshift/machine-config-operator) are accepted by the coordinator and read
//! back with no field lost; pools render them into `rendered-<pool>-<hash>` configs; and a pool
//! whose configs cannot be merged reports RenderDegraded naming the offending config.

use aloft_tests::*;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::time::Duration;

const RENDER_TIMEOUT: Duration = Duration::from_secs(30);

fn mco() -> PathBuf {
    testdata().join("mco")
}

fn is_mco_kind(doc: &Value) -> bool {
    doc["apiVersion"] == "machineconfiguration.openshift.io/v1"
        && (doc["kind"] == "MachineConfig" || doc["kind"] == "MachineConfigPool")
}

fn rt_of(doc: &Value) -> &'static ResourceType {
    if doc["kind"] == "MachineConfigPool" {
        &MACHINE_CONFIG_POOL
    } else {
        &MACHINE_CONFIG
    }
}

fn yaml_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap_or_else(|e| panic!("read {}: {e}", d.display())) {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "yaml" || x == "yml") {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

/// Values for the template parameters that have no default. `NAME` is derived from the file.
fn params_for(file: &Path) -> Vec<(String, String)> {
    use base64::Engine;
    let stem = file.file_stem().unwrap().to_string_lossy().to_lowercase().replace(['_', '.'], "-");
    let journald =
        std::fs::read(mco().join("e2e-templates/journald.conf")).expect("journald.conf beside the templates");
    vec![
        ("NAME".into(), format!("tpl-{stem}")),
        ("POOL".into(), "worker".into()),
        ("DEVICE1".into(), "/dev/vdb".into()),
        ("DEVICE2".into(), "/dev/vdc".into()),
        ("FILE_PATH".into(), "/etc/aloft-test-file".into()),
        ("FILE_CONTENT".into(), "hello".into()),
        ("CONFIGURATION".into(), base64::engine::general_purpose::STANDARD.encode(journald)),
        ("FIPS".into(), "false".into()),
        ("IGNITION_VERSION".into(), "3.2.0".into()),
        ("OSIMAGESTREAM".into(), "rhel-9".into()),
    ]
}

/// YAML 1.1 (what `oc process` and kubectl parse with) reads `mode: 0644` as octal 420; the
/// YAML 1.2 parser used here reads it as the string "0644". Convert, so the documents mean what
/// their authors meant.
fn yaml11_octal_modes(v: &mut Value) {
    match v {
        Value::Object(m) => {
            for (k, x) in m.iter_mut() {
                if k == "mode" {
                    if let Some(s) = x.as_str() {
                        if s.len() > 1 && s.starts_with('0') && s.chars().all(|c| ('0'..='7').contains(&c)) {
                            *x = json!(i64::from_str_radix(s, 8).unwrap());
                            continue;
                        }
                    }
                }
                yaml11_octal_modes(x);
            }
        }
        Value::Array(a) => a.iter_mut().for_each(yaml11_octal_modes),
        _ => {}
    }
}

/// A document to create: where it came from, the object, and the raw YAML to send (for plain
/// files, so the server's YAML decoding is exercised too).
struct Doc {
    origin: String,
    obj: Value,
    yaml: Option<String>,
}

/// Every MachineConfig and MachineConfigPool in the MCO test data.
fn all_documents() -> Vec<Doc> {
    let mut docs = Vec::new();
    let root = mco();
    let mut plain: Vec<PathBuf> = yaml_files(&root.join("bootstrap"));
    plain.extend(yaml_files(&root.join("server/machine-configs")));
    plain.extend(yaml_files(&root.join("server/machine-pools")));
    for f in plain {
        let parsed = yaml_docs(&f).unwrap();
        let single = parsed.len() == 1;
        for obj in parsed.into_iter().filter(is_mco_kind) {
            let yaml = single.then(|| std::fs::read_to_string(&f).unwrap());
            docs.push(Doc { origin: f.strip_prefix(&root).unwrap().display().to_string(), obj, yaml });
        }
    }
    for f in yaml_files(&root.join("e2e-templates")) {
        let Ok(parsed) = yaml_docs(&f) else { continue };
        for t in parsed.into_iter().filter(|d| d["kind"] == "Template") {
            if !t["objects"].as_array().is_some_and(|o| o.iter().any(is_mco_kind)) {
                continue;
            }
            let params = params_for(&f);
            let params: Vec<(&str, &str)> = params.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
            let objects = process_template(&t, &params).unwrap_or_else(|e| panic!("processing {}: {e:#}", f.display()));
            for mut obj in objects.into_iter().filter(is_mco_kind) {
                yaml11_octal_modes(&mut obj);
                docs.push(Doc { origin: f.strip_prefix(&root).unwrap().display().to_string(), obj, yaml: None });
            }
        }
    }
    docs
}

/// Metadata the server sets, not compared.
const SERVER_SET: &[&str] =
    &["/metadata/resourceVersion", "/metadata/uid", "/metadata/creationTimestamp", "/metadata/generation"];

#[tokio::test]
async fn every_mco_document_round_trips() {
    let docs = all_documents();
    let mcs = docs.iter().filter(|d| d.obj["kind"] == "MachineConfig").count();
    let pools = docs.len() - mcs;
    eprintln!("{mcs} MachineConfigs and {pools} MachineConfigPools from {}", mco().display());
    // bootstrap: 2 MCs + 3 pools; server: 1 MC + 2 pools; e2e templates: many MCs + 2 pools.
    assert!(mcs >= 25 && pools >= 7, "found the test data ({mcs} MCs, {pools} pools)");

    let c = Coordinator::start();
    let admin = c.client();
    let mut failures = Vec::new();
    // The pools OpenShift 4.18's admission policy `custom-machine-config-pool-selector` refuses:
    // their machineConfigSelector does not select the worker configs (MCO's own unit-test
    // fixtures, which never pass through an API server).
    const REFUSED: &[&str] = &[
        "bootstrap/layered-worker.machineconfigpool.yaml",
        "server/machine-pools/master.yaml",
        "server/machine-pools/test-pool.yaml",
    ];
    let mut refused = Vec::new();
    for d in &docs {
        let rt = rt_of(&d.obj);
        let name = d.obj["metadata"]["name"].as_str().unwrap().to_string();
        let what = format!("{} {name} from {}", rt.kind, d.origin);
        if REFUSED.contains(&d.origin.as_str()) {
            let r = admin.post(&path_of(rt, None), &d.obj).await.unwrap();
            let cause = &r.body["details"]["causes"][0];
            if r.code == 422
                && cause["field"] == "spec.machineConfigSelector"
                && cause["message"]
                    .as_str()
                    .is_some_and(|m| m.starts_with("All custom MachineConfigPools must inherit"))
            {
                refused.push(d.origin.as_str());
            } else {
                failures.push(format!(
                    "{what}: should be refused as OpenShift refuses it, answered {}: {}",
                    r.code, r.body
                ));
            }
            continue;
        }
        // Strict field validation (what kubectl sends): no field of MCO's own documents is unknown.
        let coll = format!("{}?fieldValidation=Strict", path_of(rt, None));
        let reply = match &d.yaml {
            Some(y) => {
                admin.call(reqwest::Method::POST, &coll, Some(("application/yaml", y.clone().into_bytes())), None).await
            }
            None => admin.post(&coll, &d.obj).await,
        }
        .unwrap();
        if reply.code != 201 {
            failures.push(format!("{what}: create answered {}: {}", reply.code, reply.body["message"]));
            continue;
        }
        let mut skip: Vec<&str> = SERVER_SET.to_vec();
        if rt.status_subresource {
            skip.push("/status");
        }
        for m in missing_leaves(&d.obj, &reply.body, &skip) {
            failures.push(format!("{what}: create answer lost {m}"));
        }
        // Read back. The render controller owns a pool's spec.configuration (as in MCO) and may
        // have replaced it by now; everything else must be as written.
        let got = get_ok(&admin, rt, &name).await;
        if rt.kind == "MachineConfigPool" {
            skip.push("/spec/configuration");
        }
        for m in missing_leaves(&d.obj, &got, &skip) {
            failures.push(format!("{what}: read-back lost {m}"));
        }
        // Some names repeat across files (two `master` pools): make room for the next.
        let r = admin.delete(&path_of(rt, Some(&name))).await.unwrap();
        assert_eq!(r.code, 200, "{what}: delete: {}", r.body);
    }
    assert!(failures.is_empty(), "{} problems:\n{}", failures.len(), failures.join("\n"));
    assert_eq!(refused, REFUSED, "each refused once");
}

#[tokio::test]
async fn yaml_octal_file_modes_read_as_kubectl_reads_them() {
    // kubectl and `oc process` parse YAML 1.1, where `mode: 0644` is octal 420. A YAML body sent to
    // the coordinator must mean the same, or a file meant rw-r--r-- becomes mode 644 (01204).
    let c = Coordinator::start();
    let admin = c.client();
    let yaml = "apiVersion: machineconfiguration.openshift.io/v1\nkind: MachineConfig\nmetadata:\n  name: octal\nspec:\n  config:\n    ignition:\n      version: 3.2.0\n    storage:\n      files:\n        - path: /etc/test\n          mode: 0644\n          contents:\n            source: data:,x\n";
    let r = admin
        .call(
            reqwest::Method::POST,
            &path_of(&MACHINE_CONFIG, None),
            Some(("application/yaml", yaml.as_bytes().to_vec())),
            None,
        )
        .await
        .unwrap();
    assert_eq!(r.code, 201, "{}", r.body);
    assert_eq!(
        r.body["spec"]["config"]["storage"]["files"][0]["mode"], 420,
        "mode: 0644 is octal 420, as kubectl reads it"
    );
}

async fn create_yaml_file(admin: &Client, file: &Path) -> Value {
    let docs = yaml_docs(file).unwrap();
    assert_eq!(docs.len(), 1, "{}", file.display());
    let r = admin.post(&path_of(rt_of(&docs[0]), None), &docs[0]).await.unwrap();
    assert_eq!(r.code, 201, "create {}: {}", file.display(), r.body);
    r.body
}

async fn create_from_template(admin: &Client, file: &str, params: &[(&str, &str)]) -> Reply {
    let t = yaml_docs(&mco().join("e2e-templates").join(file)).unwrap().remove(0);
    let objs = process_template(&t, params).unwrap();
    assert_eq!(objs.len(), 1);
    admin.post(&path_of(&MACHINE_CONFIG, None), &objs[0]).await.unwrap()
}

/// Wait until the pool's spec.configuration names a rendered config other than `previous`.
async fn wait_rendered(admin: &Client, pool: &str, previous: Option<&str>) -> Value {
    let prefix = format!("rendered-{pool}-");
    eventually(RENDER_TIMEOUT, &format!("pool {pool} to render"), || {
        let admin = admin.clone();
        let prefix = prefix.clone();
        let pool = pool.to_string();
        let previous = previous.map(str::to_string);
        async move {
            let p = get_ok(&admin, &MACHINE_CONFIG_POOL, &pool).await;
            let name = p["spec"]["configuration"]["name"].as_str().unwrap_or("");
            if name.starts_with(&prefix) && Some(name) != previous.as_deref() {
                return Ok(Some(p));
            }
            anyhow::bail!(
                "spec.configuration {}, status.conditions {}",
                p["spec"]["configuration"],
                p["status"]["conditions"]
            )
        }
    })
    .await
}

fn sources(pool: &Value) -> Vec<String> {
    let mut s: Vec<String> = pool["spec"]["configuration"]["source"]
        .as_array()
        .map(|a| a.iter().map(|r| r["name"].as_str().unwrap_or("").to_string()).collect())
        .unwrap_or_default();
    s.sort();
    s
}

#[tokio::test]
async fn worker_pool_renders_openshift_configs() {
    let c = Coordinator::start();
    let admin = c.client();
    let boot = mco().join("bootstrap");
    create_yaml_file(&admin, &boot.join("worker.machineconfigpool.yaml")).await;
    create_yaml_file(&admin, &boot.join("master.machineconfigpool.yaml")).await;
    create_yaml_file(&admin, &boot.join("99_openshift-machineconfig_worker.yaml")).await;
    create_yaml_file(&admin, &boot.join("99_openshift-machineconfig_master.yaml")).await;

    let pool = wait_rendered(&admin, "worker", None).await;
    let rendered_name = pool["spec"]["configuration"]["name"].as_str().unwrap().to_string();
    let hash = rendered_name.trim_start_matches("rendered-worker-");
    assert!(
        hash.len() == 32 && hash.chars().all(|c| c.is_ascii_hexdigit()),
        "rendered-worker-<32 hex>: {rendered_name}"
    );
    assert_eq!(sources(&pool), vec!["99-worker-ssh"], "the worker pool renders exactly the worker configs");
    let rendered = get_ok(&admin, &MACHINE_CONFIG, &rendered_name).await;
    let users = rendered["spec"]["config"]["passwd"]["users"].as_array().expect("rendered passwd.users");
    let core = users.iter().find(|u| u["name"] == "core").expect("user core");
    assert!(
        core["sshAuthorizedKeys"].as_array().unwrap().contains(&json!("ssh-rsa SSH-AUTHORIZED-KEY")),
        "the rendered config carries 99-worker-ssh's key: {core}"
    );
    assert!(
        rendered["spec"]["config"]["ignition"]["version"].as_str().is_some_and(|v| v.starts_with("3.")),
        "rendered Ignition is spec 3: {}",
        rendered["spec"]["config"]["ignition"]
    );
    // The master pool renders separately, from the master configs only.
    let master = wait_rendered(&admin, "master", None).await;
    assert_eq!(sources(&master), vec!["99-master-ssh"]);
    assert_ne!(master["spec"]["configuration"]["name"], pool["spec"]["configuration"]["name"]);

    // A day-2 config re-renders the pool; the new config has both.
    let r = create_from_template(
        &admin,
        "change-worker-kernel-selinux.yaml",
        &[("NAME", "50-worker-selinux"), ("POOL", "worker")],
    )
    .await;
    assert_eq!(r.code, 201, "{}", r.body);
    let pool2 = wait_rendered(&admin, "worker", Some(&rendered_name)).await;
    assert_eq!(sources(&pool2), vec!["50-worker-selinux", "99-worker-ssh"]);
    let rendered2 = get_ok(&admin, &MACHINE_CONFIG, pool2["spec"]["configuration"]["name"].as_str().unwrap()).await;
    assert!(
        rendered2["spec"]["kernelArguments"].as_array().is_some_and(|a| a.contains(&json!("enforcing=0"))),
        "{}",
        rendered2["spec"]
    );
    assert!(rendered2.to_string().contains("ssh-rsa SSH-AUTHORIZED-KEY"));
    // The old rendered config stays (nodes may still be on it).
    get_ok(&admin, &MACHINE_CONFIG, &rendered_name).await;
    // Deleting the day-2 config renders back to the same content: the same name as before.
    assert_eq!(admin.delete(&path_of(&MACHINE_CONFIG, Some("50-worker-selinux"))).await.unwrap().code, 200);
    let pool3 = wait_rendered(&admin, "worker", Some(pool2["spec"]["configuration"]["name"].as_str().unwrap())).await;
    assert_eq!(pool3["spec"]["configuration"]["name"], rendered_name.as_str(), "rendering is deterministic");
    let degraded = condition(&pool3, "RenderDegraded");
    assert!(degraded.is_none_or(|c| c["status"] == "False"), "a pool that renders is not RenderDegraded: {degraded:?}");
}

/// A MachineConfig as MCO's controllers and the installer write it: Go's `json.Marshal` of an
/// Ignition 3.2 config writes an unset `replace` as `{"verification": {}}` and empty
/// `security`/`timeouts` structs, and the installer's manifests write nil lists as null and empty
/// strings (openshift/installer's 99-worker-ssh). Accepted as it is, and rendered.
#[tokio::test]
async fn configs_as_go_writes_them_are_accepted_and_rendered() {
    let c = Coordinator::start();
    let admin = c.client();
    create_yaml_file(&admin, &mco().join("bootstrap/worker.machineconfigpool.yaml")).await;
    let mc = json!({
        "apiVersion": "machineconfiguration.openshift.io/v1", "kind": "MachineConfig",
        "metadata": {"name": "99-worker-ssh", "labels": {"machineconfiguration.openshift.io/role": "worker"}},
        "spec": {
            "config": {
                "ignition": {"config": {"replace": {"verification": {}}}, "proxy": {}, "security": {"tls": {}},
                    "timeouts": {}, "version": "3.2.0"},
                "passwd": {"users": [{"name": "core", "sshAuthorizedKeys": ["ssh-ed25519 AAAA go"]}]},
                "storage": {}, "systemd": {}
            },
            "extensions": null, "fips": false, "kernelArguments": null, "kernelType": "", "osImageURL": ""
        }
    });
    let r = admin.post(&path_of(&MACHINE_CONFIG, None), &mc).await.unwrap();
    assert_eq!(r.code, 201, "{}", r.body);
    let pool = wait_rendered(&admin, "worker", None).await;
    assert_eq!(sources(&pool), vec!["99-worker-ssh"]);
    let rendered = get_ok(&admin, &MACHINE_CONFIG, pool["spec"]["configuration"]["name"].as_str().unwrap()).await;
    assert!(rendered.to_string().contains("ssh-ed25519 AAAA go"), "{rendered}");
    // A replace that names a source would be fetched: still refused, naming the field.
    let mut fetch = mc.clone();
    fetch["metadata"]["name"] = json!("98-fetch");
    fetch["spec"]["config"]["ignition"]["config"]["replace"]["source"] = json!("https://example.com/x.ign");
    let r = admin.post(&path_of(&MACHINE_CONFIG, None), &fetch).await.unwrap();
    assert_eq!(r.code, 422, "{}", r.body);
    assert!(r.body.to_string().contains("spec.config.ignition.config.replace"), "{}", r.body);
}

/// Wait until the pool's RenderDegraded condition has `status`; returns the pool.
async fn wait_render_degraded(admin: &Client, pool: &str, status: &str) -> Value {
    eventually(RENDER_TIMEOUT, &format!("pool {pool} RenderDegraded={status}"), || {
        let admin = admin.clone();
        let pool = pool.to_string();
        let status = status.to_string();
        async move {
            let p = get_ok(&admin, &MACHINE_CONFIG_POOL, &pool).await;
            match condition(&p, "RenderDegraded") {
                Some(c) if c["status"] == status.as_str() => Ok(Some(p)),
                other => anyhow::bail!("RenderDegraded is {other:?}"),
            }
        }
    })
    .await
}

#[tokio::test]
async fn unrenderable_changes_degrade_the_pool_naming_the_config() {
    let c = Coordinator::start();
    let admin = c.client();
    let boot = mco().join("bootstrap");
    create_yaml_file(&admin, &boot.join("worker.machineconfigpool.yaml")).await;
    create_yaml_file(&admin, &boot.join("99_openshift-machineconfig_worker.yaml")).await;
    let first = wait_rendered(&admin, "worker", None).await;
    let first_name = first["spec"]["configuration"]["name"].as_str().unwrap().to_string();
    wait_render_degraded(&admin, "worker", "False").await;

    // Adding disks after the pool rendered is a change a running node cannot take (MCO:
    // "ignition disks section contains changes"). The config is valid, so admission takes it...
    let r = create_from_template(
        &admin,
        "extra-disks.yaml",
        &[("NAME", "50-worker-disks"), ("POOL", "worker"), ("DEVICE1", "/dev/vdb"), ("DEVICE2", "/dev/vdc")],
    )
    .await;
    assert_eq!(r.code, 201, "{}", r.body);
    // ...and the pool refuses to render it, says why, and stays on its config.
    let p = wait_render_degraded(&admin, "worker", "True").await;
    let msg = condition(&p, "RenderDegraded").unwrap()["message"].as_str().unwrap_or("").to_string();
    assert!(msg.contains("50-worker-disks"), "the message names the offending config: {msg:?}");
    assert!(msg.contains("disks"), "the message names the field: {msg:?}");
    assert_eq!(p["spec"]["configuration"]["name"], first_name.as_str(), "a degraded pool keeps its configuration");
    assert_eq!(
        condition(&p, "Degraded").map(|c| c["status"].clone()),
        Some(json!("True")),
        "Degraded summarises RenderDegraded"
    );
    let t = admin
        .call(reqwest::Method::GET, &path_of(&MACHINE_CONFIG_POOL, Some("worker")), None, Some(TABLE_ACCEPT))
        .await
        .unwrap();
    assert_eq!(t.body["rows"][0]["cells"][4], "True", "the DEGRADED column shows it: {}", t.body["rows"]);
    // Removing the config heals the pool, on the same rendered config.
    assert_eq!(admin.delete(&path_of(&MACHINE_CONFIG, Some("50-worker-disks"))).await.unwrap().code, 200);
    let p = wait_render_degraded(&admin, "worker", "False").await;
    assert_eq!(p["spec"]["configuration"]["name"], first_name.as_str());

    // MCO's kernel type configs are accepted (OpenShift users have them), but aloft boots the OS
    // image's kernel only: the pool does not render them and says which config and field.
    let r =
        create_from_template(&admin, "set-realtime-kernel.yaml", &[("NAME", "60-worker-realtime"), ("POOL", "worker")])
            .await;
    assert_eq!(r.code, 201, "{}", r.body);
    let p = wait_render_degraded(&admin, "worker", "True").await;
    let msg = condition(&p, "RenderDegraded").unwrap()["message"].as_str().unwrap_or("").to_string();
    assert!(
        msg.contains("MachineConfig 60-worker-realtime: spec.kernelType: kernelType \"realtime\" is not supported"),
        "{msg:?}"
    );
    // Two configs asking for different kernel types cannot be merged either: both are named.
    let r = create_from_template(&admin, "set-64k-pages-kernel.yaml", &[("NAME", "61-worker-64k"), ("POOL", "worker")])
        .await;
    assert_eq!(r.code, 201, "{}", r.body);
    let msg = eventually(RENDER_TIMEOUT, "RenderDegraded names both kernel type configs", || {
        let admin = admin.clone();
        async move {
            let p = get_ok(&admin, &MACHINE_CONFIG_POOL, "worker").await;
            let msg = condition(&p, "RenderDegraded").map(|c| c["message"].as_str().unwrap_or("").to_string());
            match msg {
                Some(m) if m.contains("61-worker-64k") => Ok(Some(m)),
                other => anyhow::bail!("RenderDegraded message is {other:?}"),
            }
        }
    })
    .await;
    assert!(msg.contains("60-worker-realtime"), "the message names both configs: {msg:?}");
    let p = get_ok(&admin, &MACHINE_CONFIG_POOL, "worker").await;
    let name = p["spec"]["configuration"]["name"].as_str().unwrap();
    assert!(name.starts_with("rendered-worker-"), "{name}");
    let rendered = get_ok(&admin, &MACHINE_CONFIG, name).await;
    assert_ne!(rendered["spec"]["kernelType"], "64k-pages", "the conflicting config was not rendered");
}
