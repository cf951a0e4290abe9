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
