//! aloftctl against a real coordinator: apply / get / describe / patch / delete, output formats,
//! errors that say what to do, and nothing changed by refused input.

use aloft_tests::{bin, eventually, Coordinator};
use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

fn ctl(c: &Coordinator, args: &[&str]) -> Output {
    Command::new(bin("aloftctl"))
        .arg("--kubeconfig")
        .arg(c.kubeconfig_path())
        .args(args)
        .env_remove("ALOFT_KUBECONFIG")
        .output()
        .expect("run aloftctl")
}

fn ok(c: &Coordinator, args: &[&str]) -> String {
    let out = ctl(c, args);
    assert!(out.status.success(), "aloftctl {args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).expect("utf8")
}

fn fails(c: &Coordinator, args: &[&str]) -> String {
    let out = ctl(c, args);
    assert!(!out.status.success(), "aloftctl {args:?} should fail");
    String::from_utf8(out.stderr).expect("utf8")
}

fn example(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples").join(name).display().to_string()
}

#[tokio::test]
async fn apply_get_patch_describe_delete() {
    let c = Coordinator::start();
    let pool = example("worker-pool.yaml");
    let chrony = example("50-worker-chrony.yaml");
    let out = ok(&c, &["apply", "-f", &pool, "-f", &chrony]);
    assert!(out.contains("machineconfigpool.machineconfiguration.openshift.io/worker created"), "{out}");
    assert!(out.contains("machineconfig.machineconfiguration.openshift.io/50-worker-chrony created"), "{out}");
    // Re-applying the same files changes nothing.
    let out = ok(&c, &["apply", "-f", &pool]);
    assert!(out.contains("worker unchanged"), "{out}");

    // The pool renders; the table shows MCO's columns.
    let admin = c.client();
    let rendered = eventually(Duration::from_secs(30), "the pool to render", || {
        let a = admin.clone();
        async move {
            let p =
                a.get("/apis/machineconfiguration.openshift.io/v1/machineconfigpools/worker").await?.into_result()?;
            Ok(p.pointer("/spec/configuration/name").and_then(|v| v.as_str()).map(str::to_string))
        }
    })
    .await;
    assert!(rendered.starts_with("rendered-worker-"), "{rendered}");
    // With no nodes yet the pool is trivially updated on its rendered config.
    let out = ok(&c, &["rollout", "status", "mcp/worker", "--timeout", "30"]);
    assert!(out.contains(&format!("pool worker is updated: 0/0 nodes on {rendered}")), "{out}");
    // An unreconcilable config degrades the pool: rollout status fails and says why.
    let dir = tempfile::tempdir().unwrap();
    let disks = dir.path().join("disks.yaml");
    std::fs::write(&disks, "apiVersion: machineconfiguration.openshift.io/v1\nkind: MachineConfig\nmetadata:\n  name: 70-worker-disks\n  labels: {machineconfiguration.openshift.io/role: worker}\nspec:\n  config:\n    ignition: {version: 3.4.0}\n    storage: {disks: [{device: /dev/vdb, wipeTable: true}]}\n").unwrap();
    ok(&c, &["apply", "-f", &disks.display().to_string()]);
    let err = eventually(Duration::from_secs(30), "the pool to degrade", || {
        let out = ctl(&c, &["rollout", "status", "mcp/worker", "--timeout", "1"]);
        let err = String::from_utf8_lossy(&out.stderr).to_string();
        async move { Ok(err.contains("is degraded").then_some(err)) }
    })
    .await;
    assert!(err.contains("70-worker-disks"), "the degraded message names the config: {err}");
    ok(&c, &["delete", "mc", "70-worker-disks"]);
    let table = ok(&c, &["get", "mcp"]);
    let header = table.lines().next().unwrap();
    for col in [
        "NAME",
        "CONFIG",
        "UPDATED",
        "UPDATING",
        "DEGRADED",
        "MACHINECOUNT",
        "READYMACHINECOUNT",
        "UPDATEDMACHINECOUNT",
        "DEGRADEDMACHINECOUNT",
    ] {
        assert!(header.split_whitespace().any(|h| h == col), "column {col} missing in {header}");
    }
    let mcs = ok(&c, &["get", "mc", "-o", "name"]);
    assert!(mcs.contains(&format!("machineconfig.machineconfiguration.openshift.io/{rendered}")), "{mcs}");
    // Label selectors, YAML and JSON.
    let selected = ok(&c, &["get", "mc", "-l", "machineconfiguration.openshift.io/role=worker", "-o", "name"]);
    assert_eq!(selected.lines().count(), 1, "only the labelled config: {selected}");
    let yaml = ok(&c, &["get", "mcp/worker", "-o", "yaml"]);
    let v: serde_json::Value = yaml_serde::from_str(&yaml).unwrap();
    assert_eq!(v["spec"]["maxUnavailable"], 1);
    let json: serde_json::Value =
        serde_json::from_str(&ok(&c, &["get", "mc", "50-worker-chrony", "-o", "json"])).unwrap();
    assert_eq!(json["spec"]["kernelArguments"][0], "audit=1");
    let wide = ok(&c, &["get", "mc", "-o", "wide"]);
    assert!(wide.lines().next().unwrap().contains("OSIMAGEURL"), "{wide}");

    // Patch, then see it.
    let out = ok(&c, &["patch", "mcp", "worker", "--type", "merge", "-p", r#"{"spec":{"paused":true}}"#]);
    assert!(out.contains("patched"), "{out}");
    let json: serde_json::Value = serde_json::from_str(&ok(&c, &["get", "mcp", "worker", "-o", "json"])).unwrap();
    assert_eq!(json["spec"]["paused"], true);
    let out = ok(
        &c,
        &[
            "patch",
            "mcp",
            "worker",
            "--type",
            "json",
            "-p",
            r#"[{"op":"replace","path":"/spec/paused","value":false}]"#,
        ],
    );
    assert!(out.contains("patched"), "{out}");
    let desc = ok(&c, &["describe", "mcp", "worker"]);
    assert!(
        desc.contains("Name:         worker") && desc.contains("Conditions:") && desc.contains("RenderDegraded"),
        "{desc}"
    );

    // Delete, and a second delete is a clear NotFound.
    let out = ok(&c, &["delete", "mc", "50-worker-chrony"]);
    assert!(out.contains("\"50-worker-chrony\" deleted"), "{out}");
    let err = fails(&c, &["delete", "mc", "50-worker-chrony"]);
    assert!(err.contains("not found"), "{err}");
    ok(&c, &["delete", "mc", "50-worker-chrony", "--ignore-not-found"]);
    let err = fails(&c, &["get", "mc", "50-worker-chrony"]);
    assert!(err.contains("NotFound") && err.contains("50-worker-chrony"), "{err}");
}

#[tokio::test]
async fn refused_input_changes_nothing() {
    let c = Coordinator::start();
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, text: &str| {
        let p = dir.path().join(name);
        std::fs::write(&p, text).unwrap();
        p.display().to_string()
    };
    // A good object and a bad one in one file: nothing is applied, the error names the document.
    let mixed = write(
        "mixed.yaml",
        "apiVersion: machineconfiguration.openshift.io/v1\nkind: MachineConfigPool\nmetadata: {name: infra}\nspec: {}\n---\napiVersion: v1\nkind: Pod\nmetadata: {name: p}\n",
    );
    let err = fails(&c, &["apply", "-f", &mixed]);
    assert!(err.contains("kind \"Pod\""), "{err}");
    assert!(fails(&c, &["get", "mcp", "infra"]).contains("NotFound"));
    let broken = write("broken.yaml", "apiVersion: v1\nkind: [unclosed\n");
    assert!(fails(&c, &["apply", "-f", &broken]).contains("malformed YAML"));
    let bad_ign = write(
        "bad.yaml",
        "apiVersion: machineconfiguration.openshift.io/v1\nkind: MachineConfig\nmetadata: {name: bad}\nspec: {config: {ignition: {version: 9.9.9}}}\n",
    );
    let err = fails(&c, &["apply", "-f", &bad_ign]);
    assert!(err.contains("spec.config.ignition.version"), "{err}");
    assert!(fails(&c, &["get", "mc", "bad"]).contains("NotFound"));
    assert!(fails(&c, &["get", "pods"]).contains("doesn't have a resource type \"pods\""));
    // A read-only token cannot write.
    let viewer = c.create_token("auditor", "viewer");
    let out = Command::new(bin("aloftctl"))
        .args(["--server", c.url(), "--token", &viewer, "--certificate-authority"])
        .arg(c.ca_path())
        .args(["apply", "-f", &example("worker-pool.yaml")])
        .env_remove("ALOFT_KUBECONFIG")
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("Forbidden"), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(fails(&c, &["get", "mcp", "worker"]).contains("NotFound"));
}

/// `adm prune renderedmachineconfigs`: a dry run by default; with --confirm, the unused rendered
/// configs go (oldest first, --count of them), and what a pool or a node names stays, as do the
/// user's own configs. An unknown pool is an error that deletes nothing.
#[tokio::test]
async fn prune_deletes_only_unused_rendered_configs_and_only_when_confirmed() {
    let c = Coordinator::start();
    let admin = c.client();
    let mcs = "/apis/machineconfiguration.openshift.io/v1/machineconfigs";
    let pool_path = "/apis/machineconfiguration.openshift.io/v1/machineconfigpools/worker";
    // Paused: the pool renders, but no node is moved (the nodes' annotations stay as written).
    let pool = serde_json::json!({"apiVersion": "machineconfiguration.openshift.io/v1", "kind": "MachineConfigPool",
        "metadata": {"name": "worker"}, "spec": {"paused": true,
        "machineConfigSelector": {"matchLabels": {"machineconfiguration.openshift.io/role": "worker"}},
        "nodeSelector": {"matchLabels": {"node-role.kubernetes.io/worker": ""}}}});
    admin
        .post("/apis/machineconfiguration.openshift.io/v1/machineconfigpools", &pool)
        .await
        .unwrap()
        .into_result()
        .unwrap();
    // Each new config renders a new target; returns it.
    let mut last = String::new();
    let mut renders = Vec::new();
    for (i, name) in ["50-worker-a", "50-worker-b", "50-worker-c"].iter().enumerate() {
        let mc = serde_json::json!({"apiVersion": "machineconfiguration.openshift.io/v1", "kind": "MachineConfig",
            "metadata": {"name": name, "labels": {"machineconfiguration.openshift.io/role": "worker"}},
            "spec": {"config": {"ignition": {"version": "3.4.0"}, "storage": {"files": [
                {"path": format!("/etc/prune-{i}"), "mode": 420, "contents": {"source": "data:,x"}}]}}}});
        admin.post(mcs, &mc).await.unwrap().into_result().unwrap();
        let prev = last.clone();
        last = eventually(Duration::from_secs(30), "a new render", || {
            let (a, prev) = (admin.clone(), prev.clone());
            async move {
                let p = a.get(pool_path).await?.into_result()?;
                let name = p.pointer("/spec/configuration/name").and_then(|v| v.as_str()).unwrap_or("");
                Ok((!name.is_empty() && name != prev).then(|| name.to_string()))
            }
        })
        .await;
        renders.push(last.clone());
        // Creation times are to the second: keep the renders' order unambiguous.
        tokio::time::sleep(Duration::from_millis(1100)).await;
    }
    let (r1, r2, r3) = (&renders[0], &renders[1], &renders[2]);
    // With no nodes the pool is updated on its target at once: its status names r3, not r2.
    eventually(Duration::from_secs(30), "the pool's status on the last render", || {
        let (a, r3) = (admin.clone(), r3.clone());
        async move {
            let p = a.get(pool_path).await?.into_result()?;
            Ok((p.pointer("/status/configuration/name").and_then(|v| v.as_str()) == Some(r3.as_str())).then_some(()))
        }
    })
    .await;
    // A node still on the first render: that one is in use.
    let node = serde_json::json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1",
        "labels": {"node-role.kubernetes.io/worker": ""}, "annotations": {
        "machineconfiguration.openshift.io/currentConfig": r1, "machineconfiguration.openshift.io/desiredConfig": r1}}});
    admin.post("/api/v1/nodes", &node).await.unwrap().into_result().unwrap();
    let exists = |name: String| {
        let a = admin.clone();
        async move { a.get(&format!("{mcs}/{name}")).await.unwrap().code == 200 }
    };

    let out = ok(&c, &["adm", "prune", "renderedmachineconfigs", "list", "--in-use", "false"]);
    assert!(out.starts_with("worker\n"), "{out}");
    assert!(out.contains(&format!("{r2} -- ")) && out.contains("(Currently in use: false)"), "{out}");
    assert!(!out.contains(r1.as_str()) && !out.contains(r3.as_str()), "only the unused one: {out}");

    // Dry run: says what it would do, deletes nothing.
    let out = ok(&c, &["adm", "prune", "renderedmachineconfigs", "--pool-name", "worker"]);
    assert!(out.contains("Dry run enabled"), "{out}");
    assert!(out.contains(&format!("DRY RUN: Deleted rendered MachineConfig {r2}")), "{out}");
    assert!(
        out.contains(&format!("Skipping deletion of rendered MachineConfig {r1} as it's currently in use (node n1)")),
        "{out}"
    );
    assert!(
        out.contains(&format!(
            "Skipping deletion of rendered MachineConfig {r3} as it's currently in use (pool worker (spec, status))"
        )),
        "{out}"
    );
    assert!(exists(r2.clone()).await, "a dry run deletes nothing");

    // An unknown pool: an error naming it, nothing deleted.
    let err = fails(&c, &["adm", "prune", "renderedmachineconfigs", "--pool-name", "nope", "--confirm"]);
    assert!(err.contains("machineconfigpool \"nope\" not found"), "{err}");
    assert!(exists(r2.clone()).await);

    // --count 0 deletes nothing even when confirmed; then the real thing.
    let out = ok(&c, &["adm", "prune", "renderedmachineconfigs", "--count", "0", "--confirm"]);
    assert!(out.contains("No unused rendered MachineConfigs to delete"), "{out}");
    let out = ok(&c, &["adm", "prune", "renderedmachineconfigs", "--confirm"]);
    assert!(!out.contains("DRY RUN"), "{out}");
    assert!(out.contains(&format!("Deleted rendered MachineConfig {r2}")), "{out}");
    assert!(!exists(r2.clone()).await, "the unused render is gone");
    for keep in [r1.clone(), r3.clone(), "50-worker-a".into(), "50-worker-b".into(), "50-worker-c".into()] {
        assert!(exists(keep.clone()).await, "{keep} stays");
    }
    let out = ok(&c, &["adm", "prune", "renderedmachineconfigs", "--confirm"]);
    assert!(out.contains("No unused rendered MachineConfigs to delete"), "a second prune finds nothing: {out}");
    // A pool's target deleted anyway (a prune racing a change) is rendered again.
    ok(&c, &["delete", "mc", r3]);
    eventually(Duration::from_secs(30), "the pool's target rendered again", || {
        let e = exists(r3.clone());
        async move { Ok(e.await.then_some(())) }
    })
    .await;
}

/// A collection larger than one page (aloftctl reads 500 at a time, as kubectl): every object
/// is printed once, in order, in one aligned table, and `-o json` is one List of them all.
#[tokio::test]
async fn get_reads_a_long_list_in_pages() {
    let c = Coordinator::start();
    let admin = c.client();
    let coll = aloft_tests::path_of(&aloft_coordinator::resources::MACHINE_CONFIG, None);
    // The last name is the longest and comes on the third page: a table printed page by page
    // would have narrower columns on the first two.
    let mut want: Vec<String> = (0..1203).map(|i| format!("50-paged-{i:04}")).collect();
    want.push("50-paged-zz-the-longest-name-of-them-all".into());
    let n = want.len();
    for name in &want {
        let r = admin.post(&coll, &aloft_tests::machine_config(name, "worker")).await.unwrap();
        assert_eq!(r.code, 201, "{}", r.body);
    }

    let names = ok(&c, &["get", "mc", "-o", "name"]);
    let got: Vec<&str> =
        names.lines().map(|l| l.trim_start_matches("machineconfig.machineconfiguration.openshift.io/")).collect();
    assert_eq!(got, want);

    let table = ok(&c, &["get", "mc"]);
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(lines.len(), n + 1, "a header and one row each");
    assert!(lines[0].starts_with("NAME"), "{}", lines[0]);
    let rows: Vec<&str> = lines[1..].iter().map(|l| l.split_whitespace().next().unwrap_or("")).collect();
    assert_eq!(rows, want);
    // One table: the last column (AGE) starts at the same place on every line.
    let col = |l: &str| l.trim_end().rfind(char::is_whitespace);
    assert!(lines.iter().all(|l| col(l) == col(lines[0])), "columns aligned across pages:\n{}", lines[..3].join("\n"));

    let json: serde_json::Value = serde_json::from_str(&ok(&c, &["get", "mc", "-o", "json"])).unwrap();
    assert_eq!(json["kind"], "List");
    assert_eq!(json["items"].as_array().unwrap().len(), n);
    assert_eq!(json["items"][n - 1]["metadata"]["name"], want[n - 1]);
}

/// `get --raw PATH` prints what the server answers, as kubectl's does: the health checks and
/// the metrics text; a failing answer is an error carrying the body; a path that is not from
/// the root, or --raw with a TYPE, is refused before any request.
#[tokio::test]
async fn get_raw_prints_health_and_metrics_and_fails_on_an_error_answer() {
    let c = Coordinator::start();
    let ready = ok(&c, &["get", "--raw", "/readyz?verbose"]);
    assert!(ready.starts_with("[+]ping ok\n[+]store ok\n") && ready.ends_with("readyz check passed\n"), "{ready}");
    let metrics = ok(&c, &["get", "--raw", "/metrics"]);
    assert!(metrics.contains("aloft_controller_up{controller=\"render\"} 1"), "{metrics}");
    let pools = ok(&c, &["get", "--raw", "/apis/machineconfiguration.openshift.io/v1/machineconfigpools"]);
    let list: serde_json::Value = serde_json::from_str(&pools).expect("a list as JSON");
    assert_eq!(list["kind"], "MachineConfigPoolList");

    let err = fails(&c, &["get", "--raw", "/readyz/etcd"]);
    assert!(err.contains("answered 404 for /readyz/etcd: no health check named \"etcd\""), "{err}");
    let err = fails(&c, &["get", "--raw", "readyz"]);
    assert!(err.contains("starting with '/'") && err.contains("\"readyz\""), "{err}");
    let err = fails(&c, &["get", "mcp", "--raw", "/readyz"]);
    assert!(err.contains("cannot be used with"), "{err}");
}
