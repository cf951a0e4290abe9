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

/// aloftctl started with `args` and left running, its stdout piped, its stderr to `stderr`.
fn spawn_ctl_with(c: &Coordinator, args: &[&str], stderr: std::process::Stdio) -> std::process::Child {
    Command::new(bin("aloftctl"))
        .arg("--kubeconfig")
        .arg(c.kubeconfig_path())
        .args(args)
        .env_remove("ALOFT_KUBECONFIG")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(stderr)
        .spawn()
        .expect("spawn aloftctl")
}

/// [`spawn_ctl_with`] both outputs piped (read them with `wait_with_output`).
fn spawn_ctl(c: &Coordinator, args: &[&str]) -> std::process::Child {
    spawn_ctl_with(c, args, std::process::Stdio::piped())
}

/// Waits for `child` to exit; kills it and fails the test if it is still running after `within`
/// (a command that should end by itself, not a timing).
fn exits_within(child: &mut std::process::Child, within: Duration, what: &str) {
    let deadline = std::time::Instant::now() + within;
    while child.try_wait().unwrap().is_none() {
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            panic!("{what}: still running after {within:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Writes `text` to `dir/name` and returns the path as aloftctl takes it.
fn write_in(dir: &std::path::Path, name: &str, text: &str) -> String {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p.display().to_string()
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
    // YAML, as kubectl takes it; a type aloftctl does not know is a usage error (2), a patch
    // that is neither JSON nor YAML an error (1), and neither changes the pool.
    let out = ok(&c, &["patch", "mcp", "worker", "-p", "spec: {paused: true}"]);
    assert!(out.contains("patched") && !out.contains("no change"), "{out}");
    let json: serde_json::Value = serde_json::from_str(&ok(&c, &["get", "mcp", "worker", "-o", "json"])).unwrap();
    assert_eq!(json["spec"]["paused"], true, "the YAML patch applied");
    let wrong = ctl(&c, &["patch", "mcp", "worker", "--type", "foo", "-p", "{}"]);
    assert_eq!(wrong.status.code(), Some(2), "{}", String::from_utf8_lossy(&wrong.stderr));
    assert!(String::from_utf8_lossy(&wrong.stderr).contains("--type \"foo\": want merge or json"));
    let err = fails(&c, &["patch", "mcp", "worker", "-p", "spec: [unclosed"]);
    assert!(err.contains("--patch is neither JSON (") && err.contains(") nor YAML ("), "{err}");
    // A YAML string is no patch: said by aloftctl, not sent.
    let err = fails(&c, &["patch", "mcp", "worker", "-p", "spec.paused=true"]);
    assert!(err.contains("--patch \"spec.paused=true\" is not a mapping"), "{err}");
    ok(&c, &["patch", "mcp", "worker", "-p", r#"{"spec":{"paused":false}}"#]);
    // A selector with a name would show the named object whether or not it matched: refused.
    let both = ctl(&c, &["get", "mcp", "worker", "-l", "x=y"]);
    assert_eq!(both.status.code(), Some(2), "{}", String::from_utf8_lossy(&both.stdout));
    assert!(String::from_utf8_lossy(&both.stderr).contains("name cannot be provided when a selector is specified"));
    assert!(both.stdout.is_empty(), "nothing listed");
    let desc = ok(&c, &["describe", "mcp", "worker"]);
    assert!(
        desc.contains("Name:         worker") && desc.contains("Conditions:") && desc.contains("RenderDegraded"),
        "{desc}"
    );

    // Delete, and a second delete is a clear NotFound.
    let out = ok(&c, &["delete", "mc", "50-worker-chrony"]);
    assert!(out.contains("\"50-worker-chrony\" deleted"), "{out}");
    // The server's errors as kubectl prints them: one line each, no `error: ` before them.
    let err = fails(&c, &["delete", "mc", "50-worker-chrony", "70-worker-disks"]);
    assert_eq!(
        err,
        "Error from server (NotFound): machineconfigs.machineconfiguration.openshift.io \"50-worker-chrony\" not \
         found\nError from server (NotFound): machineconfigs.machineconfiguration.openshift.io \"70-worker-disks\" \
         not found\n"
    );
    ok(&c, &["delete", "mc", "50-worker-chrony", "--ignore-not-found"]);
    let err = fails(&c, &["get", "mc", "50-worker-chrony"]);
    assert!(err.starts_with("Error from server (NotFound): ") && err.contains("50-worker-chrony"), "{err}");
    // The client's own errors after `error: `.
    let err = fails(&c, &["get", "nosuchkind"]);
    assert!(err.starts_with("error: "), "{err}");
}

#[tokio::test]
async fn refused_input_changes_nothing() {
    let c = Coordinator::start();
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, text: &str| write_in(dir.path(), name, text);
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

/// A command used wrongly exits 2 (as clap's own errors, so that a script tells a typo from a
/// failure), says what to type, and changes nothing: a missing or empty name (`mcp/`, which the
/// server would read as the collection's path), a patch that is no patch, a `--raw` path without
/// its `/`, a watch of two types. `apply --dry-run` takes kubectl's `=server|client` and stores
/// nothing either way.
#[tokio::test]
async fn misuse_exits_2_and_changes_nothing() {
    let c = Coordinator::start();
    create_pool(&c, aloft_tests::machine_config_pool("worker", "worker")).await;
    settled(&c, "worker").await;
    // Its spec (the controllers keep writing its status).
    let spec = || {
        let pool: serde_json::Value = serde_json::from_str(&ok(&c, &["get", "mcp", "worker", "-o", "json"])).unwrap();
        pool["spec"].clone()
    };
    let pool_before = spec();
    let cases: &[(&[&str], &str)] = &[
        (&["describe", "mcp"], "describe needs a name: aloftctl describe machineconfigpool NAME"),
        (&["describe", "mcp/"], "\"mcp/\": want TYPE/NAME, e.g. machineconfigpool/NAME"),
        (&["delete"], "nothing to delete: give TYPE NAME... or -f FILE"),
        (&["delete", "mcp"], "delete needs names"),
        (&["delete", "mcp/"], "want TYPE/NAME"),
        (&["delete", "mcp/worker/x"], "want TYPE/NAME"),
        (&["patch", "mcp/", "-p", "{}"], "want TYPE/NAME"),
        (&["patch", "mcp", "worker", "-p", "paused"], "is not a mapping"),
        (&["patch", "mcp", "worker", "-p", "{spec: [unclosed"], "--patch is neither JSON"),
        (&["patch", "mcp", "worker", "--type", "json", "-p", "{}"], "is not a list of operations"),
        (&["get", "mcp/"], "\"mcp/\": no name after the '/' (TYPE/NAME)"),
        (&["get", "--raw", "metrics"], "starting with '/'"),
        (&["get", "-w", "mcp,mc"], "watch is only supported on one object or one type's collection"),
        (&["apply", "--dry-run=maybe", "-f", "x.yaml"], "invalid value 'maybe'"),
    ];
    for (args, says) in cases {
        let out = ctl(&c, args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
    }
    assert_eq!(spec(), pool_before, "the pool is as it was");

    let dir = tempfile::tempdir().unwrap();
    let dry = write_in(
        dir.path(),
        "dry.yaml",
        "apiVersion: machineconfiguration.openshift.io/v1\nkind: MachineConfig\nmetadata: {name: 50-dry, labels: {machineconfiguration.openshift.io/role: worker}}\nspec: {}\n",
    );
    for flag in ["--dry-run", "--dry-run=server", "--dry-run=client"] {
        let out = ok(&c, &["apply", flag, "-f", &dry]);
        assert!(
            out.contains("machineconfig.machineconfiguration.openshift.io/50-dry created (server dry run)"),
            "{flag}: {out}"
        );
        assert!(fails(&c, &["get", "mc", "50-dry"]).contains("NotFound"), "{flag}: nothing stored");
    }
    // A document without a name is refused by delete -f, naming the file, before anything goes.
    let nameless = write_in(
        dir.path(),
        "nameless.yaml",
        "apiVersion: machineconfiguration.openshift.io/v1\nkind: MachineConfigPool\nmetadata: {name: worker}\n---\napiVersion: machineconfiguration.openshift.io/v1\nkind: MachineConfigPool\nmetadata: {}\n",
    );
    let err = fails(&c, &["delete", "-f", &nameless]);
    assert!(err.contains("nameless.yaml") && err.contains("has no metadata.name"), "{err}");
    assert_eq!(spec(), pool_before, "nothing deleted");
}

/// `rollout status` waits through a coordinator restart, but a coordinator never reached (here: a
/// port nothing listens on) is a mistake to say after a short grace, not an hour's wait.
#[tokio::test]
async fn rollout_status_fails_soon_when_it_never_reaches_the_coordinator() {
    let c = Coordinator::start();
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let server = format!("https://{}", closed.local_addr().unwrap());
    drop(closed);
    let mut follow = spawn_ctl(&c, &["--server", &server, "rollout", "status", "mcp/worker", "--timeout", "1h"]);
    exits_within(&mut follow, Duration::from_secs(60), "rollout status on a server it never reached");
    let out = follow.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains(&format!("cannot reach the coordinator at {server} (tried for 10 s)")), "{stderr}");
}

/// `rollout status --timeout` bounds the whole wait, a coordinator that stops answering
/// included (here: stopped with SIGSTOP, its socket open): the command ends at its timeout
/// instead of waiting out the client's keepalive (over a minute). `--watch=false` says where the
/// rollout stands once and exits 0, as kubectl's; a usage error is exit status 2 with no
/// configuration at all.
#[tokio::test]
async fn rollout_status_keeps_its_timeout_when_the_coordinator_hangs() {
    let c = Coordinator::start();
    ok(&c, &["apply", "-f", &example("worker-pool.yaml"), "-f", &example("50-worker-chrony.yaml")]);
    // A worker that never updates: the pool waits for it.
    let admin = c.client();
    let node = serde_json::json!({"apiVersion": "v1", "kind": "Node",
        "metadata": {"name": "n1", "labels": {"node-role.kubernetes.io/worker": ""}}});
    admin.post("/api/v1/nodes", &node).await.unwrap().into_result().unwrap();
    // (Until the render has caught up with the MachineConfig, the pool may say its render failed.)
    let (code, line) = eventually(Duration::from_secs(30), "the pool to target its rendered config", || {
        let out = ctl(&c, &["rollout", "status", "mcp/worker", "--watch=false"]);
        async move {
            let line = String::from_utf8_lossy(&out.stdout).to_string();
            Ok(line.contains("0/1 updated").then_some((out.status.code(), line)))
        }
    })
    .await;
    assert_eq!(code, Some(0), "not updated, and not failing: {line}");
    assert_eq!(line.lines().count(), 1, "one line, once: {line}");
    assert!(line.starts_with("pool worker: "), "{line}");

    let mut follow = spawn_ctl(&c, &["rollout", "status", "mcp/worker", "--timeout", "4"]);
    std::thread::sleep(Duration::from_millis(1500));
    let pid = nix::unistd::Pid::from_raw(c.pid() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGSTOP).unwrap();
    let ended = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        exits_within(&mut follow, Duration::from_secs(30), "rollout status --timeout 4 on a stopped coordinator")
    }));
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGCONT).unwrap();
    if let Err(e) = ended {
        std::panic::resume_unwind(e);
    }
    let out = follow.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("timed out after 4 s"), "{stderr}");

    let home = tempfile::tempdir().unwrap();
    let out = Command::new(bin("aloftctl"))
        .args(["rollout", "status", "node/n1"])
        .env_remove("ALOFT_KUBECONFIG")
        .env_remove("KUBECONFIG")
        .env("HOME", home.path())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "a usage error before a missing configuration: {stderr}");
    assert!(stderr.contains("works on MachineConfigPools"), "{stderr}");
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

/// aloftctl left running (`get -w`, `rollout status`), its stdout gathered as it comes.
struct Background {
    child: std::process::Child,
    text: std::sync::Arc<std::sync::Mutex<String>>,
    reader: Option<std::thread::JoinHandle<()>>,
}

impl Background {
    fn start(c: &Coordinator, args: &[&str]) -> Self {
        let mut child = spawn_ctl_with(c, args, std::process::Stdio::null());
        let mut stdout = child.stdout.take().unwrap();
        let text = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
        let sink = text.clone();
        let reader = std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = std::io::Read::read(&mut stdout, &mut buf) {
                if n == 0 {
                    break;
                }
                sink.lock().unwrap().push_str(&String::from_utf8_lossy(&buf[..n]));
            }
        });
        Background { child, text, reader: Some(reader) }
    }

    fn text(&self) -> String {
        self.text.lock().unwrap().clone()
    }

    /// Waits (20 s at most) until what it printed so far satisfies `done`.
    fn wait_for(&self, what: &str, done: impl Fn(&str) -> bool) {
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while !done(&self.text()) {
            assert!(std::time::Instant::now() < deadline, "timed out waiting for {what}; printed:\n{}", self.text());
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Waits (90 s at most) for it to exit by itself; returns how, and everything it printed.
    fn finish(mut self) -> (std::process::ExitStatus, String) {
        let deadline = std::time::Instant::now() + Duration::from_secs(90);
        let status = loop {
            if let Some(status) = self.child.try_wait().expect("wait for aloftctl") {
                break status;
            }
            assert!(std::time::Instant::now() < deadline, "aloftctl still running; printed:\n{}", self.text());
            std::thread::sleep(Duration::from_millis(20));
        };
        if let Some(r) = self.reader.take() {
            r.join().unwrap();
        }
        (status, self.text())
    }

    /// Kills it (by its own PID) and returns everything it printed.
    fn stop(mut self) -> String {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if let Some(r) = self.reader.take() {
            r.join().unwrap();
        }
        self.text()
    }
}

const POOLS: &str = "/apis/machineconfiguration.openshift.io/v1/machineconfigpools";
const MCS: &str = "/apis/machineconfiguration.openshift.io/v1/machineconfigs";

/// Creates `pool` and a MachineConfig of the role it selects (a pool with none does not render).
async fn create_pool(c: &Coordinator, pool: serde_json::Value) {
    let selector = &pool["spec"]["machineConfigSelector"];
    let role = selector["matchLabels"]["machineconfiguration.openshift.io/role"]
        .as_str()
        .or_else(|| selector["matchExpressions"][0]["values"].as_array()?.last()?.as_str())
        .unwrap()
        .to_string();
    let admin = c.client();
    let mc = admin.post(MCS, &aloft_tests::machine_config(&format!("00-{role}"), &role)).await.unwrap();
    assert!(mc.code == 201 || mc.code == 409, "{}", mc.body);
    admin.post(POOLS, &pool).await.unwrap().into_result().unwrap();
}

/// Waits until pool `name` has rendered and its status is on that render; returns it.
async fn settled(c: &Coordinator, name: &str) -> String {
    let admin = c.client();
    let path = format!("{POOLS}/{name}");
    eventually(Duration::from_secs(30), "the pool to render and settle", || {
        let (a, path) = (admin.clone(), path.clone());
        async move {
            let p = a.get(&path).await?.into_result()?;
            let want = p.pointer("/spec/configuration/name").and_then(|v| v.as_str()).unwrap_or("");
            let have = p.pointer("/status/configuration/name").and_then(|v| v.as_str()).unwrap_or("");
            Ok((!want.is_empty() && want == have).then(|| want.to_string()))
        }
    })
    .await
}

async fn label_pool(c: &Coordinator, name: &str, value: &str) {
    let patch = serde_json::json!({"metadata": {"labels": {"watch-test": value}}});
    c.client()
        .patch(&format!("{POOLS}/{name}"), "application/merge-patch+json", &patch)
        .await
        .unwrap()
        .into_result()
        .unwrap();
}

/// The columns of a table row start where the header's words start (a row's word may only
/// begin where a header word begins), and nothing is an empty line.
fn assert_one_aligned_table(text: &str) {
    let lines: Vec<&str> = text.lines().collect();
    assert!(!lines.is_empty() && lines[0].starts_with("NAME"), "a header first:\n{text}");
    let starts = |l: &str| -> Vec<usize> {
        let b = l.as_bytes();
        (0..b.len()).filter(|&i| b[i] != b' ' && (i == 0 || b[i - 1] == b' ')).collect()
    };
    let header = starts(lines[0]);
    for l in &lines[1..] {
        assert!(!l.trim().is_empty(), "an empty line in:\n{text}");
        assert!(!l.starts_with("NAME"), "one header only:\n{text}");
        assert!(starts(l).iter().all(|s| header.contains(s)), "row {l:?} is not aligned under the header:\n{text}");
    }
}

/// `get -w`: the listing's table, then one row per change, under the listing's header and in its
/// columns (the server sends the column definitions in the first event only, as kube-apiserver).
#[tokio::test]
async fn get_watch_prints_each_change_as_an_aligned_row() {
    let c = Coordinator::start();
    create_pool(&c, aloft_tests::machine_config_pool("worker", "worker")).await;
    settled(&c, "worker").await;
    for args in [&["get", "mcp", "-w"][..], &["get", "mcp", "worker", "-w", "-o", "wide"][..]] {
        let w = Background::start(&c, args);
        w.wait_for("the listing", |t| t.lines().count() >= 2);
        for i in 0..3 {
            label_pool(&c, "worker", &format!("{args:?}{i}").replace(|ch: char| !ch.is_alphanumeric(), "")).await;
            w.wait_for("a row per change", |t| t.lines().count() >= 3 + i);
        }
        let out = w.stop();
        assert_one_aligned_table(&out);
        assert!(out.lines().skip(1).all(|l| l.starts_with("worker ")), "{out}");
    }
}

/// `get -w -o yaml|json|name` prints each event's object: YAML documents separated by `---`, JSON
/// objects one after another, a name a line.
#[tokio::test]
async fn get_watch_prints_objects_in_yaml_json_and_name() {
    let c = Coordinator::start();
    create_pool(&c, aloft_tests::machine_config_pool("worker", "worker")).await;
    settled(&c, "worker").await;
    let count = |fmt: &'static str| -> Box<dyn Fn(&str) -> usize> {
        match fmt {
            "yaml" => Box::new(|t: &str| t.lines().filter(|l| *l == "kind: MachineConfigPool").count()),
            "json" => Box::new(|t: &str| t.matches("\"kind\": \"MachineConfigPool\"").count()),
            _ => Box::new(|t: &str| t.lines().count()),
        }
    };
    for fmt in ["yaml", "json", "name"] {
        let w = Background::start(&c, &["get", "mcp", "worker", "-w", "-o", fmt]);
        let n = count(fmt);
        w.wait_for("the object", |t| n(t) >= 1);
        for i in 0..2 {
            let value = format!("{fmt}{i}");
            label_pool(&c, "worker", &value).await;
            // A name says nothing of the change; the objects show it.
            w.wait_for("an object per change", |t| n(t) >= 2 + i && (fmt == "name" || t.contains(&value)));
        }
        let out = w.stop();
        let objects: Vec<serde_json::Value> = match fmt {
            "yaml" => {
                assert!(out.contains("\n---\n"), "documents separated by ---:\n{out}");
                aloft_tests::yaml_docs_str(&out).unwrap()
            }
            "json" => serde_json::Deserializer::from_str(&out).into_iter().map(Result::unwrap).collect(),
            _ => {
                assert!(
                    out.lines().all(|l| l == "machineconfigpool.machineconfiguration.openshift.io/worker"),
                    "{out}"
                );
                continue;
            }
        };
        assert!(objects.len() >= 3, "the object and one per change: {out}");
        assert!(objects.iter().all(|o| o["metadata"]["name"] == "worker"), "{out}");
        assert_eq!(objects.last().unwrap()["metadata"]["labels"]["watch-test"], format!("{fmt}1"));
    }
}

/// `get` with several names: one List for yaml/json (as kubectl), one table, a name a line; the
/// comma form of types prints one table per type.
#[tokio::test]
async fn get_several_names_is_one_list_or_one_table() {
    let c = Coordinator::start();
    create_pool(&c, aloft_tests::machine_config_pool("worker", "worker")).await;
    create_pool(&c, aloft_tests::machine_config_pool("infra-pool-with-a-long-name", "infra")).await;
    for args in [
        &["get", "mcp", "worker", "infra-pool-with-a-long-name"][..],
        &["get", "mcp/worker", "mcp/infra-pool-with-a-long-name"][..],
    ] {
        let with = |fmt: &str| ok(&c, &[args, &["-o", fmt]].concat());
        let yaml: serde_json::Value = yaml_serde::from_str(&with("yaml")).unwrap();
        let json: serde_json::Value = serde_json::from_str(&with("json")).unwrap();
        for list in [&yaml, &json] {
            assert_eq!(list["kind"], "List");
            assert_eq!(list["apiVersion"], "v1");
            let names: Vec<&str> =
                list["items"].as_array().unwrap().iter().map(|i| i["metadata"]["name"].as_str().unwrap()).collect();
            assert_eq!(names, ["worker", "infra-pool-with-a-long-name"]);
        }
        assert_eq!(with("name").lines().count(), 2);
        let table = ok(&c, args);
        assert_eq!(table.lines().count(), 3, "{table}");
        assert_one_aligned_table(&table);
    }
    // A missing name: the others are printed, and it fails naming the missing one.
    let out = ctl(&c, &["get", "mcp", "worker", "nope", "-o", "name"]);
    assert!(!out.status.success());
    assert_eq!(String::from_utf8_lossy(&out.stdout), "machineconfigpool.machineconfiguration.openshift.io/worker\n");
    assert!(String::from_utf8_lossy(&out.stderr).contains("nope"));
    // Types by comma: a table each, in one List for yaml.
    let out = ok(&c, &["get", "mcp,mc"]);
    assert_eq!(out.matches("NAME").count(), 2, "{out}");
    let list: serde_json::Value = yaml_serde::from_str(&ok(&c, &["get", "mcp,mc", "-o", "yaml"])).unwrap();
    let kinds: Vec<&str> = list["items"].as_array().unwrap().iter().map(|i| i["kind"].as_str().unwrap()).collect();
    assert!(kinds.contains(&"MachineConfigPool") && kinds.contains(&"MachineConfig"), "{kinds:?}");
    // Watching more than one thing is refused, as kubectl does.
    assert!(fails(&c, &["get", "mcp", "worker", "infra-pool-with-a-long-name", "-w"]).contains("watch"));
}

/// A MachineConfig with a file in it: it changes the render.
fn worker_file_config(name: &str) -> serde_json::Value {
    let mut mc = aloft_tests::machine_config(name, "worker");
    mc["spec"]["config"]["storage"] = serde_json::json!({"files": [{"path": format!("/etc/{name}"), "mode": 420, "contents": {"source": "data:,x"}}]});
    mc
}

/// What scripts written for `oc get` ask for: `-o jsonpath` (one object or the `List` of all,
/// ranges, annotation keys with escaped dots, a condition by type), `-o custom-columns` (from the
/// flag or a file, `<none>` where a path finds nothing), and `--no-headers`. A bad template or
/// format is a usage error (exit 2) naming what is wrong, before anything is asked.
#[tokio::test]
async fn get_prints_jsonpath_templates_and_custom_columns() {
    let c = Coordinator::start();
    let admin = c.client();
    for (name, state) in [("n1", "Done"), ("n2", "Working")] {
        admin
            .post("/api/v1/nodes", &worker_node(name, "rendered-worker-a", state))
            .await
            .unwrap()
            .into_result()
            .unwrap();
    }
    let state = r"machineconfiguration\.openshift\.io/state";
    let one = ok(&c, &["get", "node", "n2", "-o", &format!("jsonpath={{.metadata.annotations.{state}}}")]);
    assert_eq!(one, "Working", "the object itself, and no newline added (as kubectl)");
    let all =
        format!(r#"jsonpath={{range .items[*]}}{{.metadata.name}} {{.metadata.annotations.{state}}}{{"\n"}}{{end}}"#);
    assert_eq!(ok(&c, &["get", "nodes", "-o", &all]), "n1 Done\nn2 Working\n");
    let names = ok(&c, &["get", "nodes", "-o", r#"jsonpath={.items[?(@.metadata.name!="n1")].metadata.name}"#]);
    assert_eq!(names, "n2");
    assert_eq!(ok(&c, &["get", "nodes", "-o", "jsonpath={.items[*].spec.nothing}"]), "", "missing prints nothing");

    let cols = format!("custom-columns=NAME:.metadata.name,STATE:.metadata.annotations.{state},TAINTS:.spec.taints");
    assert_eq!(
        ok(&c, &["get", "nodes", "-o", &cols]),
        "NAME   STATE     TAINTS\nn1     Done      <none>\nn2     Working   <none>\n"
    );
    assert_eq!(
        ok(&c, &["get", "nodes", "-o", &cols, "--no-headers"]),
        "n1    Done      <none>\nn2    Working   <none>\n"
    );
    let dir = tempfile::tempdir().unwrap();
    let file = write_in(dir.path(), "cols", &format!("NAME   STATE\n.metadata.name   .metadata.annotations.{state}\n"));
    let from_file = ok(&c, &["get", "node", "n1", "-o", &format!("custom-columns-file={file}")]);
    assert_eq!(from_file, "NAME   STATE\nn1     Done\n");
    let table = ok(&c, &["get", "nodes", "--no-headers"]);
    assert!(table.starts_with("n1 ") && table.lines().count() == 2, "{table}");

    for (format, want) in [
        ("jsonpath={.metadata.name", "unclosed action"),
        ("jsonpath={range .items[*]}{.x}", "{range} without an {end}"),
        ("xml", "unknown output format \"xml\""),
        ("custom-columns=NAME", "is not HEADER:PATH"),
        ("jsonpath", "needs a value"),
        ("custom-columns-file=/nonexistent/cols", "cannot read /nonexistent/cols"),
    ] {
        let out = ctl(&c, &["get", "nodes", "-o", format]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{format}: {err}");
        assert!(err.contains(want), "{format}: {err}");
    }
}

/// `get -A` lists a namespaced kind across namespaces, with a NAMESPACE column first as
/// kubectl's; `-n` picks one; a cluster-scoped kind is listed as it is; a name with `-A` is
/// refused as kubectl refuses it.
#[tokio::test]
async fn get_all_namespaces_lists_every_namespace() {
    let c = Coordinator::start();
    let admin = c.client();
    for (ns, name) in [("default", "e-default"), ("team-a", "e-team")] {
        let event = serde_json::json!({"apiVersion": "v1", "kind": "Event", "metadata": {"name": name},
            "involvedObject": {"apiVersion": "operators.coreos.com/v1alpha1", "kind": "Subscription", "name": "s",
                "namespace": ns}, "type": "Normal",
            "reason": "Test", "message": format!("in {ns}")});
        admin.post(&format!("/api/v1/namespaces/{ns}/events"), &event).await.unwrap().into_result().unwrap();
    }
    let names = |args: &[&str]| {
        let mut all = vec!["get", "events", "-o", "jsonpath={.items[*].metadata.name}"];
        all.extend(args);
        ok(&c, &all)
    };
    assert_eq!(names(&[]), "e-default");
    assert_eq!(names(&["-n", "team-a"]), "e-team");
    assert_eq!(names(&["-A"]), "e-default e-team");
    let table = ok(&c, &["get", "events", "--all-namespaces"]);
    let mut lines = table.lines();
    assert!(lines.next().is_some_and(|h| h.starts_with("NAMESPACE ")), "{table}");
    let first: Vec<&str> = lines.map(|l| l.split_whitespace().next().unwrap_or("")).collect();
    assert_eq!(first, ["default", "team-a"], "{table}");
    let pools = ok(&c, &["get", "mcp", "-A"]);
    assert!(!pools.contains("NAMESPACE"), "cluster-scoped: {pools}");
    let out = ctl(&c, &["get", "events", "e-team", "-A"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot be retrieved by name across all namespaces"));
}

fn worker_node(name: &str, current: &str, state: &str) -> serde_json::Value {
    serde_json::json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name,
        "labels": {"node-role.kubernetes.io/worker": ""}, "annotations": {
        "machineconfiguration.openshift.io/currentConfig": current,
        "machineconfiguration.openshift.io/desiredConfig": current,
        "machineconfiguration.openshift.io/state": state,
        "machineconfiguration.openshift.io/reason": if state == "Degraded" { "boom" } else { "" }}}})
}

/// Worker node `name`, Done on `config`, Ready: what a rollout picks.
async fn ready_worker_node(admin: &aloft_client::Client, name: &str, config: &str) {
    admin.post("/api/v1/nodes", &worker_node(name, config, "Done")).await.unwrap().into_result().unwrap();
    let ready = serde_json::json!({"status": {"conditions": [{"type": "Ready", "status": "True"}]}});
    let status = format!("/api/v1/nodes/{name}/status");
    admin.patch(&status, "application/merge-patch+json", &ready).await.unwrap().into_result().unwrap();
}

/// Three writers of MachineConfigs no pool selects, for 1.5 s: the render waits for the
/// MachineConfig writes to pause, so a config posted meanwhile is rendered only after them.
fn flood_other_configs(c: &Coordinator, tag: &str) -> Vec<tokio::task::JoinHandle<()>> {
    let until = std::time::Instant::now() + Duration::from_millis(1500);
    (0..3)
        .map(|f| {
            let admin = c.client();
            let tag = tag.to_string();
            tokio::spawn(async move {
                let mut i = 0;
                while std::time::Instant::now() < until {
                    let mc = aloft_tests::machine_config(&format!("10-other-{tag}-{f}-{i}"), "other");
                    admin.post(MCS, &mc).await.unwrap().into_result().unwrap();
                    i += 1;
                }
            })
        })
        .collect()
}

/// `apply -f new-mc.yaml && rollout status`: until the render controller has rendered the new
/// config, the pool is not "updated" on its old one; the wait says what it waits for. (The
/// render waits for MachineConfig writes to pause, 2 s at most: a stream of writes to configs no
/// pool selects holds it back, so that aloftctl sees the pool before the render. A run where the
/// render came first anyway, on a stalled machine, proves nothing and is tried again.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rollout_status_waits_for_the_render_of_a_new_config() {
    let c = Coordinator::start();
    create_pool(&c, aloft_tests::machine_config_pool("worker", "worker")).await;
    let mut old = settled(&c, "worker").await;
    for attempt in 0..5 {
        let floods = flood_other_configs(&c, &format!("{attempt}"));
        tokio::time::sleep(Duration::from_millis(100)).await;
        let name = format!("99-worker-new-{attempt}");
        c.client().post(MCS, &worker_file_config(&name)).await.unwrap().into_result().unwrap();
        let out = ok(&c, &["rollout", "status", "mcp", "worker", "--timeout", "30"]);
        for f in floods {
            f.await.unwrap();
        }
        let new = settled(&c, "worker").await;
        assert_ne!(new, old);
        assert!(out.ends_with(&format!("pool worker is updated: 0/0 nodes on {new}\n")), "{out}");
        if out.contains(&format!("pool worker: waiting for the render of MachineConfig {name}\n")) {
            return;
        }
        old = new;
    }
    panic!("aloftctl never saw the pool before the render of its new config");
}

/// `apply -f first-mc.yaml && rollout status` on a pool whose render failed for want of that
/// MachineConfig: the failure is older than the apply, and the wait goes on to the render and
/// the update instead of failing at once on it. (Floods of writes to other configs hold the
/// render back, as in the test above, so that aloftctl sees the old failure.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rollout_status_does_not_fail_on_a_render_failure_the_apply_fixes() {
    let c = Coordinator::start();
    for attempt in 0..5 {
        let pool_name = format!("solo{attempt}");
        let pool = aloft_tests::machine_config_pool(&pool_name, &pool_name);
        c.client().post(POOLS, &pool).await.unwrap().into_result().unwrap();
        pool_when(&c, &pool_name, "its render failed: no MachineConfigs", |p| pool_condition_true(p, "RenderDegraded"))
            .await;
        let floods = flood_other_configs(&c, &format!("fix-{attempt}"));
        tokio::time::sleep(Duration::from_millis(100)).await;
        let mc = aloft_tests::machine_config(&format!("50-{pool_name}"), &pool_name);
        c.client().post(MCS, &mc).await.unwrap().into_result().unwrap();
        let out = ctl(&c, &["rollout", "status", &format!("mcp/{pool_name}"), "--timeout", "30"]);
        for f in floods {
            f.await.unwrap();
        }
        let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert!(out.status.success(), "{stdout}{stderr}");
        assert!(stdout.contains(&format!("pool {pool_name} is updated")), "{stdout}");
        if stdout.contains(&format!("waiting for the render of MachineConfig 50-{pool_name}")) {
            return;
        }
    }
    panic!("aloftctl never saw the old render failure before the render");
}

/// `rollout status --watch=false` right after an apply that does not fix a failed render: the
/// failure could be stale for a few seconds (the render has not said yet), so the one look waits
/// them out and then fails naming the config at fault. Before, it printed "waiting for the render
/// of MachineConfig 50-worker-extra" and exited 0, as if the rollout were going on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rollout_status_once_fails_on_a_render_failure_an_apply_leaves_standing() {
    let c = Coordinator::start();
    let dir = tempfile::tempdir().unwrap();
    // The config before its pool: the pool never renders from an empty set, whose failure a
    // `rollout status` right after could read. (A setup step failed once under load; this is
    // the race in it we could see, not one confirmed from its output.)
    ok(&c, &["apply", "-f", &example("50-worker-chrony.yaml"), "-f", &example("worker-pool.yaml")]);
    ok(&c, &["rollout", "status", "mcp/worker", "--timeout", "30"]);
    let disks = "apiVersion: machineconfiguration.openshift.io/v1\nkind: MachineConfig\nmetadata:\n  name: 70-worker-disks\n  labels: {machineconfiguration.openshift.io/role: worker}\nspec:\n  config:\n    ignition: {version: 3.4.0}\n    storage: {disks: [{device: /dev/vdb, wipeTable: true}]}\n";
    ok(&c, &["apply", "-f", &write_in(dir.path(), "disks.yaml", disks)]);
    pool_when(&c, "worker", "its render failed on 70-worker-disks", |p| pool_condition_true(p, "RenderDegraded")).await;
    let extra = "apiVersion: machineconfiguration.openshift.io/v1\nkind: MachineConfig\nmetadata:\n  name: 50-worker-extra\n  labels: {machineconfiguration.openshift.io/role: worker}\nspec:\n  kernelArguments: [nosmt]\n";
    ok(&c, &["apply", "-f", &write_in(dir.path(), "extra.yaml", extra)]);
    let out = ctl(&c, &["rollout", "status", "mcp/worker", "--watch=false"]);
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.status.code(), Some(1), "{stdout}{stderr}");
    assert!(stderr.contains("70-worker-disks"), "the failure names the config at fault: {stderr}");
    assert!(!stdout.contains("waiting"), "{stdout}");
    // A timeout shorter than the grace: the failure seen until then is the answer, not "could
    // not tell".
    let out = ctl(&c, &["rollout", "status", "mcp/worker", "--watch=false", "--timeout", "2"]);
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.status.code(), Some(1), "{stdout}{stderr}");
    assert!(stderr.contains("70-worker-disks") && !stderr.contains("could not tell"), "{stderr}");
}

/// A paused pool: the progress line says so (and not "canary"), the wait goes on until the
/// timeout, and nothing but progress lines goes to a pipe (no blank line before the error).
#[tokio::test]
async fn rollout_status_says_paused_and_prints_no_blank_line() {
    let c = Coordinator::start();
    let mut pool = aloft_tests::machine_config_pool("worker", "worker");
    pool["spec"]["paused"] = true.into();
    pool["spec"]["rollout"] = serde_json::json!({"canary": 1, "soakSeconds": 60});
    create_pool(&c, pool).await;
    c.client()
        .post("/api/v1/nodes", &worker_node("n1", "rendered-worker-old", "Done"))
        .await
        .unwrap()
        .into_result()
        .unwrap();
    // The render and the pool's status first (a loaded machine may take longer than the wait).
    let admin = c.client();
    eventually(Duration::from_secs(30), "the paused pool rendered, with its node counted", || {
        let a = admin.clone();
        async move {
            let p = a.get(&format!("{POOLS}/worker")).await?.into_result()?;
            let rendered =
                p.pointer("/spec/configuration/name").and_then(|v| v.as_str()).is_some_and(|n| !n.is_empty());
            Ok((rendered && p.pointer("/status/machineCount").and_then(|v| v.as_i64()) == Some(1)).then_some(()))
        }
    })
    .await;
    let (stdout, _) = status_timing_out(&c);
    assert!(stdout.lines().last().is_some_and(|l| l.contains("0/1 updated") && l.contains(", paused")), "{stdout}");
    assert!(!stdout.contains("canary"), "{stdout}");
    assert!(!stdout.lines().any(|l| l.trim().is_empty()), "no blank line to a pipe: {stdout:?}");
}

/// Pool `name` once its status satisfies `ok`.
async fn pool_when(c: &Coordinator, name: &str, what: &str, ok: impl Fn(&serde_json::Value) -> bool) {
    let admin = c.client();
    let path = format!("{POOLS}/{name}");
    eventually(Duration::from_secs(30), what, || async {
        let p = admin.get(&path).await?.into_result()?;
        Ok(ok(&p).then_some(()))
    })
    .await;
}

/// `rollout status mcp/worker --timeout 2` on a pool that does not finish: it must fail with
/// status 1; its stdout (the progress lines) and stderr (the timeout's error).
fn status_timing_out(c: &Coordinator) -> (String, String) {
    let out = ctl(c, &["rollout", "status", "mcp/worker", "--timeout", "2"]);
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.status.code(), Some(1), "{stdout}{stderr}");
    assert!(stderr.contains("timed out after 2 s"), "{stderr}");
    (stdout.into_owned(), stderr.into_owned())
}

fn pool_condition_true(p: &serde_json::Value, type_: &str) -> bool {
    p.pointer("/status/conditions")
        .and_then(|c| c.as_array())
        .is_some_and(|cs| cs.iter().any(|c| c["type"] == type_ && c["status"] == "True"))
}

/// Every node updated but one cordoned by hand: the pool is not Updated (MCO: updated == ready
/// == total, none unavailable), the full bar says how many are ready and unavailable, and the
/// timeout's error says the same and names the node, instead of a bare "not updated".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rollout_status_says_a_cordoned_node_holds_an_updated_pool() {
    let c = Coordinator::start();
    create_pool(&c, aloft_tests::machine_config_pool("worker", "worker")).await;
    let target = settled(&c, "worker").await;
    let admin = c.client();
    for n in ["n1", "n2"] {
        let mut node = worker_node(n, &target, "Done");
        node["spec"] = serde_json::json!({"unschedulable": n == "n1"});
        admin.post("/api/v1/nodes", &node).await.unwrap().into_result().unwrap();
        let ready = serde_json::json!({"status": {"conditions": [{"type": "Ready", "status": "True"}]}});
        admin
            .patch(&format!("/api/v1/nodes/{n}/status"), "application/merge-patch+json", &ready)
            .await
            .unwrap()
            .into_result()
            .unwrap();
    }
    pool_when(&c, "worker", "both nodes updated, n1 unavailable", |p| {
        p.pointer("/status/updatedMachineCount").and_then(|v| v.as_i64()) == Some(2)
            && p.pointer("/status/unavailableMachineCount").and_then(|v| v.as_i64()) == Some(1)
    })
    .await;
    let (stdout, stderr) = status_timing_out(&c);
    assert!(
        stdout.lines().last().is_some_and(|l| l.contains("2/2 updated, 1 ready, 1 unavailable, 0 degraded")),
        "{stdout}"
    );
    assert!(
        stderr.contains("timed out after 2 s: pool worker is not updated: 1 ready, 1 unavailable (cordoned: n1)"),
        "the timeout names the node: {stderr}"
    );
    // Ready but under disk pressure (MCO counts it unavailable; `get nodes` shows it Ready): the
    // condition is named.
    let pressure = serde_json::json!({"status": {"conditions": [{"type": "Ready", "status": "True"},
        {"type": "DiskPressure", "status": "True"}]}});
    let path = "/api/v1/nodes/n2/status";
    admin.patch(path, "application/merge-patch+json", &pressure).await.unwrap().into_result().unwrap();
    pool_when(&c, "worker", "n2 unavailable too", |p| {
        p.pointer("/status/unavailableMachineCount").and_then(|v| v.as_i64()) == Some(2)
    })
    .await;
    let (_, stderr) = status_timing_out(&c);
    assert!(stderr.contains("(cordoned: n1; under pressure: n2 (DiskPressure))"), "{stderr}");
}

/// A rollout its status says nothing about (no condition, not every node updated): n1 cordoned
/// and NotReady takes the only slot of `maxUnavailable: 1`, so n2 is never picked. The timeout's
/// error counts the updated nodes and names what takes the slots, instead of a bare "not updated".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rollout_status_names_the_nodes_taking_the_slots() {
    let c = Coordinator::start();
    create_pool(&c, aloft_tests::machine_config_pool("worker", "worker")).await;
    let old = settled(&c, "worker").await;
    let admin = c.client();
    let mut n1 = worker_node("n1", &old, "Done");
    n1["spec"] = serde_json::json!({"unschedulable": true});
    admin.post("/api/v1/nodes", &n1).await.unwrap().into_result().unwrap();
    ready_worker_node(&admin, "n2", &old).await;
    admin.post(MCS, &worker_file_config("99-worker-new")).await.unwrap().into_result().unwrap();
    pool_when(&c, "worker", "a new target, nothing updated", |p| {
        p.pointer("/spec/configuration/name").and_then(|v| v.as_str()).is_some_and(|t| t != old)
            && p.pointer("/status/unavailableMachineCount").and_then(|v| v.as_i64()) == Some(1)
    })
    .await;
    let (_, stderr) = status_timing_out(&c);
    assert!(
        stderr.contains(
            "timed out after 2 s: pool worker is not updated: 0 of 2 updated; unavailable (1 of maxUnavailable 1): n1 cordoned and NotReady"
        ),
        "{stderr}"
    );
    assert!(!stderr.contains("n2"), "n2 waits for the slot, it does not take one: {stderr}");
    // Ready again but still cordoned: the slot is still taken, by a cordon alone.
    let ready = serde_json::json!({"status": {"conditions": [{"type": "Ready", "status": "True"}]}});
    admin
        .patch("/api/v1/nodes/n1/status", "application/merge-patch+json", &ready)
        .await
        .unwrap()
        .into_result()
        .unwrap();
    let (_, stderr) = status_timing_out(&c);
    assert!(stderr.contains("unavailable (1 of maxUnavailable 1): n1 cordoned\n"), "{stderr}");
}

/// A budget that blocks the rollout for good: the line and the timeout's error name it, from the
/// pool's BudgetBlocked condition.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rollout_status_names_the_budget_that_blocks_the_pool() {
    let c = Coordinator::start();
    create_pool(&c, aloft_tests::machine_config_pool("worker", "worker")).await;
    let old = settled(&c, "worker").await;
    let admin = c.client();
    ready_worker_node(&admin, "n1", &old).await;
    let ndb = serde_json::json!({"apiVersion": "aloft.dev/v1", "kind": "NodeDisruptionBudget",
        "metadata": {"name": "frozen"}, "spec": {"maxUnavailable": 0}});
    let path = aloft_tests::path_of(&aloft_coordinator::resources::NODE_DISRUPTION_BUDGET, None);
    admin.post(&path, &ndb).await.unwrap().into_result().unwrap();
    admin.post(MCS, &worker_file_config("99-worker-new")).await.unwrap().into_result().unwrap();
    pool_when(&c, "worker", "the pool blocked by the budget", |p| pool_condition_true(p, "BudgetBlocked")).await;
    let (stdout, stderr) = status_timing_out(&c);
    assert!(
        stdout.lines().last().is_some_and(|l| l.contains("; blocked: n1 waits: NodeDisruptionBudget frozen")),
        "{stdout}"
    );
    assert!(stderr.contains("pool worker is not updated: blocked: n1 waits: NodeDisruptionBudget frozen"), "{stderr}");
    assert!(stderr.contains("for good"), "{stderr}");
}

/// `--not-config OLD`: a pool degraded on OLD does not end the wait for a new target; once the
/// target is new, degradation does. Without it, degradation ends the wait at once.
#[tokio::test]
async fn rollout_status_not_config_ignores_degradation_on_the_old_target() {
    let c = Coordinator::start();
    create_pool(&c, aloft_tests::machine_config_pool("worker", "worker")).await;
    let admin = c.client();
    let old = eventually(Duration::from_secs(30), "the pool to render", || {
        let a = admin.clone();
        async move {
            let p = a.get(&format!("{POOLS}/worker")).await?.into_result()?;
            Ok(p.pointer("/spec/configuration/name").and_then(|v| v.as_str()).map(str::to_string))
        }
    })
    .await;
    admin.post("/api/v1/nodes", &worker_node("n1", &old, "Degraded")).await.unwrap().into_result().unwrap();
    eventually(Duration::from_secs(30), "the pool to degrade", || {
        let out = ctl(&c, &["rollout", "status", "mcp/worker", "--timeout", "1"]);
        let err = String::from_utf8_lossy(&out.stderr).to_string();
        async move { Ok(err.contains("is degraded").then_some(())) }
    })
    .await;
    let out = ctl(&c, &["rollout", "status", "mcp", "worker", "--not-config", &old, "--timeout", "2"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("timed out after 2 s"), "waits for a new target: {stderr}");
    // A new target, and the node still degraded: that ends the wait.
    admin.post(MCS, &worker_file_config("99-worker-new")).await.unwrap().into_result().unwrap();
    let out = ctl(&c, &["rollout", "status", "mcp", "worker", "--not-config", &old, "--timeout", "30"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("is degraded") && stderr.contains("boom"), "{stderr}");
}

/// A revert (the bad MachineConfig deleted): once the render is back on the old config, the node
/// that failed on the bad one still shows Degraded until the node controller moves it back and
/// its agent reports. `rollout status` waits for that report instead of failing on the old
/// failure (this test plays the agent, and reports 2 s into the wait); with no report the failure
/// stands after a grace of seconds, and a node failing on the target itself fails the wait at
/// once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rollout_status_waits_for_a_reverted_node_to_report() {
    let c = Coordinator::start();
    create_pool(&c, aloft_tests::machine_config_pool("worker", "worker")).await;
    let old = settled(&c, "worker").await;
    let admin = c.client();
    ready_worker_node(&admin, "n1", &old).await;
    let desired_of_n1 = || {
        let a = admin.clone();
        async move {
            let n = a.get("/api/v1/nodes/n1").await?.into_result()?;
            anyhow::Ok(
                n.pointer("/metadata/annotations")
                    .and_then(|m| m.get(aloft_api::annotations::DESIRED_CONFIG))
                    .and_then(|v| v.as_str())
                    .map(str::to_string),
            )
        }
    };
    let report = |state: &str, reason: &str, failed_on: Option<&str>| {
        serde_json::json!({"metadata": {"annotations": {
            aloft_api::annotations::STATE: state,
            aloft_api::annotations::REASON: reason,
            aloft_api::annotations::FAILED_CONFIG: failed_on}}})
    };
    admin.post(MCS, &worker_file_config("99-worker-bad")).await.unwrap().into_result().unwrap();
    let bad = eventually(Duration::from_secs(30), "n1 asked for the bad config", || {
        let get = desired_of_n1();
        let old = old.clone();
        async move { Ok(get.await?.filter(|d| *d != old)) }
    })
    .await;
    let merge = "application/merge-patch+json";
    admin
        .patch("/api/v1/nodes/n1", merge, &report("Degraded", "boom: bad config", Some(&bad)))
        .await
        .unwrap()
        .into_result()
        .unwrap();
    pool_when(&c, "worker", "the pool degraded by n1", |p| pool_condition_true(p, "NodeDegraded")).await;
    admin.delete(&format!("{MCS}/99-worker-bad")).await.unwrap().into_result().unwrap();
    eventually(Duration::from_secs(30), "the revert rendered and n1 moved back", || {
        let (a, get, old) = (admin.clone(), desired_of_n1(), old.clone());
        async move {
            let p = a.get(&format!("{POOLS}/worker")).await?.into_result()?;
            let target = p.pointer("/spec/configuration/name").and_then(|v| v.as_str()) == Some(old.as_str());
            Ok((target && get.await?.as_deref() == Some(old.as_str())).then_some(()))
        }
    })
    .await;
    // Still degraded by n1's report on the bad config: the window the wait must not fail in.
    pool_when(&c, "worker", "the pool still degraded", |p| pool_condition_true(p, "NodeDegraded")).await;
    let waiting = format!("waiting for degraded node n1 to take {old}: it failed on another config");

    // No report: the old failure stands once the grace is over.
    let out = ctl(&c, &["rollout", "status", "mcp/worker", "--timeout", "60"]);
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.status.code(), Some(1), "{stdout}{stderr}");
    assert!(stdout.contains(&waiting), "{stdout}");
    assert!(stderr.contains("pool worker is degraded") && stderr.contains("boom: bad config"), "{stderr}");

    // The agent reports while the wait waits: the pool is updated, and the wait says so.
    let w = Background::start(&c, &["rollout", "status", "mcp/worker", "--timeout", "60"]);
    w.wait_for("the wait for n1", |t| t.contains(&waiting));
    let done = report("Done", "", None);
    admin.patch("/api/v1/nodes/n1", merge, &done).await.unwrap().into_result().unwrap();
    let (status, stdout) = w.finish();
    assert!(status.success(), "{status}: {stdout}");
    assert!(stdout.contains("pool worker is updated"), "{stdout}");

    // Failing on the target itself: no grace (the timeout is shorter than it).
    admin
        .patch("/api/v1/nodes/n1", merge, &report("Degraded", "boom: on target", Some(&old)))
        .await
        .unwrap()
        .into_result()
        .unwrap();
    pool_when(&c, "worker", "the pool degraded by n1 on its target", |p| pool_condition_true(p, "NodeDegraded")).await;
    // 9 s: time for a slow start, and still inside the 10 s grace a failure on another config gets.
    let out = ctl(&c, &["rollout", "status", "mcp/worker", "--timeout", "9"]);
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.status.code(), Some(1), "{stdout}{stderr}");
    assert!(stderr.contains("pool worker is degraded") && stderr.contains("boom: on target"), "{stderr}");
    assert!(!stdout.contains("waiting for degraded node"), "{stdout}");
}

/// kubectl's small things: `api-resources` aligned for every name, `rollout resume` of a pool
/// that is not stopped is an error that writes nothing (and says how to unpause a paused one),
/// usage errors exit 2, `--timeout` takes a duration, `apply` of nothing is an error, and
/// `describe` prints nested status values as YAML.
#[tokio::test]
async fn api_resources_resume_empty_apply_and_describe() {
    let c = Coordinator::start();
    let resources = ok(&c, &["api-resources"]);
    assert!(resources.contains("nodedisruptionbudgets"), "{resources}");
    assert_one_aligned_table(&resources);

    create_pool(&c, aloft_tests::machine_config_pool("worker", "worker")).await;
    let rendered = settled(&c, "worker").await;
    for args in [&["rollout", "resume", "mcp/worker"][..], &["rollout", "resume", "mcp", "worker"][..]] {
        let err = fails(&c, args);
        assert!(err.contains("mcp/worker: the circuit breaker is not open; nothing to resume"), "{err}");
    }
    let pool: serde_json::Value = serde_json::from_str(&ok(&c, &["get", "mcp", "worker", "-o", "json"])).unwrap();
    assert!(pool["metadata"]["annotations"]["aloft.dev/resumeRollout"].is_null(), "nothing written: {pool}");
    // Paused, the refusal says how to go on.
    ok(&c, &["patch", "mcp", "worker", "-p", r#"{"spec":{"paused":true}}"#]);
    let err = fails(&c, &["rollout", "resume", "mcp/worker"]);
    assert!(err.contains("The pool is paused (spec.paused): unpause it with `aloftctl patch mcp worker"), "{err}");
    // A usage error is exit status 2 (as clap's), not 1 (a failed rollout).
    for args in
        [&["rollout", "status", "worker"][..], &["rollout", "status", "node/n1"][..], &["rollout", "resume", "mcp"][..]]
    {
        let out = ctl(&c, args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
    }
    // The likeliest slip, a bare pool name, is answered with the command to type.
    let err = String::from_utf8_lossy(&ctl(&c, &["rollout", "status", "worker"]).stderr).to_string();
    assert!(err.contains("(try: aloftctl rollout status mcp/worker)"), "{err}");
    let err = String::from_utf8_lossy(&ctl(&c, &["rollout", "resume", "mcp"]).stderr).to_string();
    assert!(err.contains("no pool name in \"mcp\" (try: aloftctl rollout resume mcp/NAME)"), "{err}");
    // --timeout takes a duration as kubectl does.
    let out = ok(&c, &["rollout", "status", "mcp/worker", "--timeout", "1m"]);
    assert!(out.contains("pool worker is updated"), "{out}");

    let out = ctl(&c, &["apply", "-f", "-"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("no objects passed to apply"));

    let desc = ok(&c, &["describe", "mcp", "worker"]);
    assert!(desc.contains("Status:\n") && desc.contains("\n  configuration:\n"), "{desc}");
    assert!(desc.contains(&format!("    name: {rendered}\n")), "{desc}");
    assert!(!desc.contains("{\""), "no JSON in describe: {desc}");
}

fn pool_yaml(name: &str, spec_extra: &str) -> String {
    format!(
        "apiVersion: machineconfiguration.openshift.io/v1\nkind: MachineConfigPool\nmetadata: {{name: {name}}}\nspec:\n  machineConfigSelector: {{matchExpressions: [{{key: machineconfiguration.openshift.io/role, operator: In, values: [worker, {name}]}}]}}\n  nodeSelector: {{matchLabels: {{node-role.kubernetes.io/{name}: \"\"}}}}\n  maxUnavailable: 1\n{spec_extra}"
    )
}

/// What a refused write must leave as it was: the pool's spec and what apply last recorded.
fn pool_as_applied(c: &Coordinator, name: &str) -> serde_json::Value {
    let p: serde_json::Value = serde_json::from_str(&ok(c, &["get", "mcp", name, "-o", "json"])).unwrap();
    serde_json::json!({"spec": p["spec"], "annotations": p["metadata"]["annotations"]})
}

/// The `Warning:` lines of aloftctl's stderr.
fn warning_lines(stderr: &[u8]) -> Vec<String> {
    String::from_utf8_lossy(stderr).lines().filter(|l| l.starts_with("Warning:")).map(str::to_string).collect()
}

/// As kubectl (`--validate=strict` by default): a typo in a pool is refused by the server and
/// nothing changes; `--validate=warn` stores it and prints the server's warning as kubectl does;
/// `--validate=ignore` stores it without a word. In a file of several documents the others are
/// applied, one by one, and the error names the refused document and what was applied.
#[tokio::test]
async fn apply_validates_fields_strictly_unless_told_otherwise() {
    let c = Coordinator::start();
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, text: &str| write_in(dir.path(), name, text);
    let good = write("good.yaml", &pool_yaml("infra", ""));
    ok(&c, &["apply", "-f", &good]);
    let before = pool_as_applied(&c, "infra");
    let typo = write("typo.yaml", &pool_yaml("infra", "  maxUnavailble: 3\n"));
    for args in
        [&["apply", "-f", &typo][..], &["apply", "-f", &typo, "--validate=true"], &["apply", "--validate", "-f", &typo]]
    {
        let err = fails(&c, args);
        assert!(err.contains(r#"strict decoding error: unknown field "spec.maxUnavailble""#), "{args:?}: {err}");
        assert!(err.contains("machineconfigpool.machineconfiguration.openshift.io/infra"), "{err}");
        assert_eq!(pool_as_applied(&c, "infra"), before, "{args:?} changed the pool");
    }
    // A new object is refused too, and not created.
    let new = write("new.yaml", &pool_yaml("edge", "  maxUnavailble: 3\n"));
    assert!(fails(&c, &["apply", "-f", &new]).contains(r#"unknown field "spec.maxUnavailble""#));
    assert!(fails(&c, &["get", "mcp", "edge"]).contains("NotFound"));

    // Several documents: the good ones are applied, the refused one named with its document.
    let mixed = write(
        "mixed.yaml",
        &[pool_yaml("a", ""), pool_yaml("b", "  rollout: {canery: 1}\n"), pool_yaml("c", "")].join("---\n"),
    );
    let out = ctl(&c, &["apply", "-f", &mixed]);
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(!out.status.success(), "{stdout}");
    assert!(stdout.contains("/a created") && stdout.contains("/c created") && !stdout.contains("/b "), "{stdout}");
    assert!(stderr.contains(&format!("{mixed} document 2")), "{stderr}");
    assert!(stderr.contains(r#"unknown field "spec.rollout.canery""#), "{stderr}");
    assert!(stderr.contains("1 of 3 objects not applied"), "{stderr}");
    assert!(
        stderr.contains("applied: machineconfigpool.machineconfiguration.openshift.io/a, machineconfigpool.machineconfiguration.openshift.io/c"),
        "{stderr}"
    );
    assert!(fails(&c, &["get", "mcp", "b"]).contains("NotFound"));

    // Warn: stored, and the server's warning printed once, as kubectl prints it.
    let out = ctl(&c, &["apply", "-f", &typo, "--validate=warn"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(warning_lines(&out.stderr), [r#"Warning: unknown field "spec.maxUnavailble""#]);
    let json: serde_json::Value = serde_json::from_str(&ok(&c, &["get", "mcp", "infra", "-o", "json"])).unwrap();
    assert_eq!(json["spec"]["maxUnavailble"], 3);
    // Ignore (and false): stored without a warning.
    for (mode, field) in [("ignore", "maxUnavailbl"), ("false", "maxUnavail")] {
        let quiet = write("quiet.yaml", &pool_yaml("infra", &format!("  maxUnavailble: 3\n  {field}: 4\n")));
        let out = ctl(&c, &["apply", "-f", &quiet, &format!("--validate={mode}")]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        assert_eq!(warning_lines(&out.stderr), Vec::<String>::new(), "{mode}");
        let json: serde_json::Value = serde_json::from_str(&ok(&c, &["get", "mcp", "infra", "-o", "json"])).unwrap();
        assert_eq!(json["spec"][field], 4, "{mode}");
    }
    assert!(fails(&c, &["apply", "-f", &typo, "--validate=sometimes"]).contains("sometimes"));
    let help = ok(&c, &["apply", "--help"]);
    assert!(help.contains("--validate") && help.contains("unknown field"), "{help}");
}

/// `patch` validates as `apply` does: strict by default, warn prints, ignore says nothing.
#[tokio::test]
async fn patch_validates_fields_strictly_unless_told_otherwise() {
    let c = Coordinator::start();
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("good.yaml");
    std::fs::write(&good, pool_yaml("infra", "")).unwrap();
    ok(&c, &["apply", "-f", &good.display().to_string()]);
    let before = pool_as_applied(&c, "infra");
    let typo = r#"{"spec":{"maxUnavailble":2}}"#;
    let err = fails(&c, &["patch", "mcp", "infra", "-p", typo]);
    assert!(err.contains(r#"strict decoding error: unknown field "spec.maxUnavailble""#), "{err}");
    let json_patch = r#"[{"op":"add","path":"/spec/maxUnavailble","value":2}]"#;
    let err = fails(&c, &["patch", "mcp", "infra", "--type", "json", "-p", json_patch]);
    assert!(err.contains(r#"unknown field "spec.maxUnavailble""#), "{err}");
    assert_eq!(pool_as_applied(&c, "infra"), before, "a refused patch changed the pool");

    let out = ctl(&c, &["patch", "mcp", "infra", "-p", typo, "--validate=warn"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(warning_lines(&out.stderr), [r#"Warning: unknown field "spec.maxUnavailble""#]);
    let out = ctl(&c, &["patch", "mcp", "infra", "-p", r#"{"spec":{"maxUnavail":2}}"#, "--validate=ignore"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(warning_lines(&out.stderr), Vec::<String>::new());
    let json: serde_json::Value = serde_json::from_str(&ok(&c, &["get", "mcp", "infra", "-o", "json"])).unwrap();
    assert_eq!((json["spec"]["maxUnavailble"].clone(), json["spec"]["maxUnavail"].clone()), (2.into(), 2.into()));
    let help = ok(&c, &["patch", "--help"]);
    assert!(help.contains("--validate"), "{help}");
}

/// `describe` ends with kubectl's Events section: the Events about that object only (same name
/// of another kind, or another node, are not), oldest first, with a repeat's count; `<none>`
/// for an object nothing was recorded about.
#[tokio::test]
async fn describe_shows_the_objects_events() {
    let c = Coordinator::start();
    let admin = c.client();
    let mut uids = std::collections::HashMap::new();
    for name in ["n1", "n2"] {
        let node = serde_json::json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}});
        let made = admin.post("/api/v1/nodes", &node).await.unwrap().into_result().unwrap();
        uids.insert(name, made["metadata"]["uid"].as_str().unwrap_or_default().to_string());
    }
    let now = chrono::Utc::now();
    let ago = |s: i64| (now - chrono::Duration::seconds(s)).to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    // By uid, as the coordinator's own Events are (describe asks for the object's uid).
    let event =
        |name: &str, kind: &str, about: &str, reason: &str, message: &str, first: i64, last: i64, count: i64| {
            let uid = if kind == "Node" { uids.get(about).cloned().unwrap_or_default() } else { String::new() };
            serde_json::json!({"apiVersion": "v1", "kind": "Event", "metadata": {"name": name},
            "involvedObject": {"apiVersion": "v1", "kind": kind, "name": about, "uid": uid},
            "type": if reason == "DrainTimeout" { "Warning" } else { "Normal" }, "reason": reason,
            "message": message, "source": {"component": "drain-controller"},
            "firstTimestamp": ago(first), "lastTimestamp": ago(last), "count": count})
        };
    for e in [
        event("e1", "Node", "n1", "DrainTimeout", "failed to drain node: n1", 600, 30, 4),
        event("e2", "Node", "n1", "Drained", "drained for rendered-worker-1", 300, 300, 1),
        event("e3", "Node", "n2", "Drained", "about n2 only", 10, 10, 1),
        event("e4", "MachineConfigPool", "n1", "NodeWaiting", "a pool named n1", 10, 10, 1),
        {
            // About an earlier n1, deleted since: not this one's.
            let mut e = event("e5", "Node", "n1", "Drained", "about an earlier n1", 20, 20, 1);
            e["involvedObject"]["uid"] = "an-earlier-uid".into();
            e
        },
    ] {
        admin.post("/api/v1/namespaces/default/events", &e).await.unwrap().into_result().unwrap();
    }
    let desc = ok(&c, &["describe", "node", "n1"]);
    let section = desc.split_once("Events:\n").map(|(_, s)| s).unwrap_or_else(|| panic!("no Events: {desc}"));
    let lines: Vec<Vec<&str>> = section
        .lines()
        .filter(|l| !l.is_empty())
        .map(|l| l.split("  ").filter(|c| !c.is_empty()).map(str::trim).collect())
        .collect();
    assert_eq!(lines[0], ["Type", "Reason", "Age", "From", "Message"], "{desc}");
    // Its time was 300 s before `now` (cut to the second), plus however long describe took:
    // kubectl's age prints seconds under ten minutes ("5m", then "5m1s", ...).
    let took = (chrono::Utc::now() - now).num_seconds();
    let ages: Vec<String> = (0..=took + 1).map(|s| if s == 0 { "5m".to_string() } else { format!("5m{s}s") }).collect();
    assert!(ages.iter().any(|a| a == lines[2][2]), "{desc}");
    assert_eq!(
        [lines[2][0], lines[2][1], lines[2][3], lines[2][4]],
        ["Normal", "Drained", "drain-controller", "drained for rendered-worker-1"],
        "{desc}"
    );
    // Its last time was 30 s before `now`: 30 s and however long describe took.
    let most = 32 + took;
    let (last, rest) = lines[3][2].split_once("s ").unwrap_or_else(|| panic!("{desc}"));
    assert!(last.parse::<i64>().is_ok_and(|s| (30..=most).contains(&s)) && rest == "(x4 over 10m)", "{desc}");
    assert_eq!(
        [lines[3][0], lines[3][1], lines[3][3], lines[3][4]],
        ["Warning", "DrainTimeout", "drain-controller", "failed to drain node: n1"],
        "{desc}"
    );
    assert_eq!(lines.len(), 4, "only this n1's Node events: {desc}");

    let desc = ok(&c, &["describe", "no/n2"]);
    assert!(desc.contains("\n  Normal  Drained") && desc.contains("about n2 only"), "{desc}");
    assert!(!desc.contains("rendered-worker-1") && !desc.contains("DrainTimeout"), "only n2's: {desc}");

    // An object no Event is about (a MachineConfig: a new pool's Updating Event may land
    // before describe reads, or after).
    create_pool(&c, aloft_tests::machine_config_pool("quiet", "quiet")).await;
    let desc = ok(&c, &["describe", "mc", "00-quiet"]);
    assert!(desc.trim_end().ends_with("Events:  <none>"), "{desc}");
}

/// What nodes write (annotations, Event messages, a reason in a table cell) reaches the admin's
/// terminal without its control sequences: ESC as `^[`, BEL as `^G`, a C1 CSI as `\u{9b}`, as
/// kubectl escapes them. The object is still described when its Events cannot be listed.
#[tokio::test]
async fn node_written_text_cannot_drive_the_terminal() {
    let c = Coordinator::start();
    let admin = c.client();
    let hostile = "ok\u{1b}]0;pwned\u{7}\u{1b}[2J\u{9b}31m";
    let node = serde_json::json!({"apiVersion": "v1", "kind": "Node",
        "metadata": {"name": "n1", "annotations": {"machineconfiguration.openshift.io/reason": hostile,
                                                   "machineconfiguration.openshift.io/state": "Degraded"}}});
    let made = admin.post("/api/v1/nodes", &node).await.unwrap().into_result().unwrap();
    let uid = made["metadata"]["uid"].as_str().unwrap_or_default().to_string();
    let event = serde_json::json!({"apiVersion": "v1", "kind": "Event", "metadata": {"name": "e1"},
        "involvedObject": {"apiVersion": "v1", "kind": "Node", "name": "n1", "uid": uid},
        "type": "Warning", "reason": "Hostile", "message": hostile, "source": {"component": "x"},
        "count": 1});
    admin.post("/api/v1/namespaces/default/events", &event).await.unwrap().into_result().unwrap();
    let escaped = "ok^[]0;pwned^G^[[2J\\u{9b}31m";
    for args in [&["describe", "node", "n1"][..], &["get", "nodes"][..], &["get", "nodes", "-o", "wide"][..]] {
        let out = ok(&c, args);
        assert!(!out.contains('\u{1b}') && !out.contains('\u{7}') && !out.contains('\u{9b}'), "{args:?}: {out:?}");
        assert!(out.contains(escaped), "{args:?} shows the text escaped: {out}");
    }
    // -o json keeps the data as it is (JSON escapes it).
    let json = ok(&c, &["get", "node", "n1", "-o", "json"]);
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["metadata"]["annotations"]["machineconfiguration.openshift.io/reason"], hostile);
}

/// A coordinator restart during `rollout status` (here: killed, down for a few polls, started
/// again) is waited through with a warning, as kubectl's reflector re-lists through it; the
/// command ends with the rollout, exit 0, not with the first refused connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rollout_status_waits_through_a_coordinator_restart() {
    let mut c = Coordinator::start_with(aloft_tests::Options { fixed_port: true, ..Default::default() });
    let mut pool = aloft_tests::machine_config_pool("worker", "worker");
    pool["spec"]["paused"] = true.into();
    create_pool(&c, pool).await;
    let mut n1 = worker_node("n1", "rendered-worker-old", "Done");
    n1["status"] = serde_json::json!({"conditions": [{"type": "Ready", "status": "True"}]});
    c.client().post("/api/v1/nodes", &n1).await.unwrap().into_result().unwrap();
    let admin = c.client();
    let target = eventually(Duration::from_secs(30), "the pool to render", || {
        let a = admin.clone();
        async move {
            let p = a.get(&format!("{POOLS}/worker")).await?.into_result()?;
            Ok(p.pointer("/spec/configuration/name").and_then(|v| v.as_str()).map(str::to_string))
        }
    })
    .await;
    let mut follow = spawn_ctl(&c, &["rollout", "status", "mcp/worker", "--timeout", "60"]);
    std::thread::sleep(Duration::from_millis(1000));
    assert!(follow.try_wait().unwrap().is_none(), "rollout status waits while n1 is behind");
    c.kill9();
    std::thread::sleep(Duration::from_millis(1500)); // several 300 ms polls refused
    c.restart();
    let annotations = serde_json::json!({"metadata": {"annotations": {
        "machineconfiguration.openshift.io/currentConfig": target,
        "machineconfiguration.openshift.io/desiredConfig": target}}});
    // n1 reports Done on the target, and the pool is resumed: the rollout is over.
    let unpause = serde_json::json!({"spec": {"paused": false}});
    let resumed = eventually(Duration::from_secs(30), "the restarted coordinator to resume the pool", || {
        let a = c.client();
        let unpause = unpause.clone();
        async move {
            Ok(a.patch(&format!("{POOLS}/worker"), "application/merge-patch+json", &unpause).await?.ok().then_some(()))
        }
    });
    resumed.await;
    let patched = eventually(Duration::from_secs(30), "the restarted coordinator to take n1's report", || {
        let a = c.client();
        let annotations = annotations.clone();
        async move {
            Ok(a.patch("/api/v1/nodes/n1", "application/merge-patch+json", &annotations).await?.ok().then_some(()))
        }
    });
    patched.await;
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while follow.try_wait().unwrap().is_none() {
        assert!(std::time::Instant::now() < deadline, "rollout status did not end with the rollout");
        std::thread::sleep(Duration::from_millis(100));
    }
    let out = follow.wait_with_output().unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "stdout: {stdout}\nstderr: {stderr}");
    assert!(stdout.contains("pool worker is updated: 1/1 nodes"), "{stdout}");
    assert!(stderr.contains("warning:") && stderr.contains("still waiting"), "the outage was said: {stderr}");
}

/// An empty `ALOFT_KUBECONFIG` counts as unset (as kubectl treats an empty KUBECONFIG): it does
/// not make an explicit `--kubeconfig` an error. A set one is the client config, and is not shown
/// in usage lines as a flag that must be given (as clap shows an argument it reads from the
/// environment).
#[tokio::test]
async fn an_empty_aloft_kubeconfig_counts_as_unset_and_a_set_one_is_no_flag_to_give() {
    let c = Coordinator::start();
    let out = Command::new(bin("aloftctl"))
        .arg("--kubeconfig")
        .arg(c.kubeconfig_path())
        .args(["get", "mcp"])
        .env("ALOFT_KUBECONFIG", "")
        .env("ALOFT_SERVER", "")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    // Set, it is the client config; and a usage error does not show it as a flag to give.
    let with_env = |args: &[&str]| {
        Command::new(bin("aloftctl")).args(args).env("ALOFT_KUBECONFIG", c.kubeconfig_path()).output().unwrap()
    };
    let out = with_env(&["get", "mcp"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    // $KUBECONFIG too, as kubectl reads it (its first file that exists).
    let list = std::env::join_paths(["/nonexistent/config".into(), c.kubeconfig_path()]).unwrap();
    let out = Command::new(bin("aloftctl")).args(["get", "mcp"]).env("KUBECONFIG", list).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let out = with_env(&["get"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("Usage: aloftctl get <ARGS>...") && !stderr.contains("--kubeconfig"), "{stderr}");
}

/// `--server http://` pointed at the coordinator's HTTPS port says the server speaks HTTPS and
/// which URL to use (h2 alone said "frame with invalid size"); a scheme that is neither, or none,
/// is refused naming --server.
#[tokio::test]
async fn a_wrong_scheme_in_server_says_which_url_to_use() {
    let c = Coordinator::start();
    let https = c.url().trim_end_matches('/').to_string();
    let plain = https.replacen("https://", "http://", 1);
    assert_ne!(plain, https, "the coordinator serves HTTPS: {https}");
    let with_server = |server: &str| {
        let out = Command::new(bin("aloftctl"))
            .args(["--kubeconfig"])
            .arg(c.kubeconfig_path())
            .args(["--server", server, "get", "nodes"])
            .env_remove("ALOFT_KUBECONFIG")
            .env_remove("ALOFT_SERVER")
            .output()
            .expect("run aloftctl");
        assert!(!out.status.success(), "aloftctl --server {server} get nodes should fail");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    // The kubeconfig names a CA: plain HTTP is refused before anything is sent (the token
    // would go out unencrypted), with the address to use.
    let err = with_server(&plain);
    assert!(err.contains("a CA was given") && err.contains(&format!("use {https}")), "{err}");
    assert_eq!(err.matches("the coordinator's address").count(), 1, "the address named once: {err}");
    let ftp = https.replacen("https://", "ftp://", 1);
    let err = with_server(&ftp);
    assert!(err.contains("--server") && err.contains("not ftp://"), "{err}");
    let bare = https.trim_start_matches("https://").to_string();
    let err = with_server(&bare);
    assert!(err.contains("--server") && err.contains(&format!("e.g. https://{bare}")), "{err}");
    // The right URL works.
    ok(&c, &["--server", &https, "get", "nodes"]);
}

/// Every program aloft ships answers `--help` with its usage and does nothing else: the sandbox
/// host took `--help` for its root directory, created `./--help` and served a sandbox in it.
#[test]
fn every_program_answers_help_and_does_nothing_else() {
    let cwd = tempfile::tempdir().unwrap();
    for program in ["aloft-coordinator", "aloftctl", "aloft-agent", "aloft-sandbox-host", "aloft-os-helper"] {
        for flag in ["--help", "-h"] {
            let mut child = Command::new(bin(program))
                .arg(flag)
                .current_dir(cwd.path())
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap();
            // A program that takes the flag for something else may serve forever.
            exits_within(&mut child, Duration::from_secs(30), &format!("{program} {flag}"));
            let out = child.wait_with_output().unwrap();
            let stdout = String::from_utf8_lossy(&out.stdout);
            assert!(out.status.success(), "{program} {flag}: {}", String::from_utf8_lossy(&out.stderr));
            assert!(stdout.contains("Usage:"), "{program} {flag}: {stdout}");
        }
    }
    let left: Vec<_> = std::fs::read_dir(cwd.path()).unwrap().flatten().map(|e| e.file_name()).collect();
    assert!(left.is_empty(), "--help created {left:?}");
}

/// `aloftctl get nodes -w | head -1`: when the reader goes, aloftctl ends as kubectl does, killed
/// by SIGPIPE at its next row, not with a panic (exit 101) on a broken pipe.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_that_goes_ends_a_watch_quietly() {
    use std::io::{BufRead, BufReader};
    use std::os::unix::process::ExitStatusExt;
    let c = Coordinator::start();
    let admin = c.client();
    admin.post("/api/v1/nodes", &worker_node("n1", "rendered-worker-a", "Done")).await.unwrap().into_result().unwrap();
    let mut child = Command::new(bin("aloftctl"))
        .arg("--kubeconfig")
        .arg(c.kubeconfig_path())
        .args(["get", "nodes", "-w"])
        .env_remove("ALOFT_KUBECONFIG")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run aloftctl");
    let mut out = BufReader::new(child.stdout.take().expect("stdout"));
    let mut first = String::new();
    out.read_line(&mut first).expect("the header");
    assert!(first.starts_with("NAME"), "{first}");
    drop(out);
    // Rows until aloftctl writes one into the closed pipe.
    for i in 0..30 {
        let patch = serde_json::json!({"metadata": {"labels": {"step": i.to_string()}}});
        admin.patch("/api/v1/nodes/n1", "application/merge-patch+json", &patch).await.unwrap().into_result().unwrap();
        if child.try_wait().expect("wait").is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let status = eventually(Duration::from_secs(30), "aloftctl to end", || {
        let done = child.try_wait().map_err(anyhow::Error::from);
        async move { done }
    })
    .await;
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().expect("stderr"), &mut stderr).expect("stderr");
    assert!(!stderr.contains("panicked"), "{stderr}");
    const SIGPIPE: i32 = 13;
    assert_eq!(status.signal(), Some(SIGPIPE), "{status:?}: {stderr}");
}

/// A MachineConfig too large to keep its applied configuration in an annotation (Kubernetes
/// caps all annotations at 256 KiB, and the coordinator now does too) is applied without it,
/// with a warning saying what that means; an earlier record is removed rather than left stale.
#[tokio::test]
async fn apply_of_a_config_too_large_for_its_record_goes_through_and_says_so() {
    let c = Coordinator::start();
    let dir = tempfile::tempdir().unwrap();
    let mc = |data: &str| {
        format!(
            "apiVersion: machineconfiguration.openshift.io/v1\nkind: MachineConfig\nmetadata:\n  name: 60-worker-big\n  labels: {{machineconfiguration.openshift.io/role: worker}}\nspec:\n  config:\n    ignition: {{version: 3.4.0}}\n    storage: {{files: [{{path: /etc/big.conf, mode: 420, contents: {{source: \"data:,{data}\"}}}}]}}\n"
        )
    };
    let path = dir.path().join("big.yaml");
    std::fs::write(&path, mc("small")).unwrap();
    let file = path.display().to_string();
    ok(&c, &["apply", "-f", &file]);
    let admin = c.client();
    let p = "/apis/machineconfiguration.openshift.io/v1/machineconfigs/60-worker-big";
    let got = admin.get(p).await.unwrap().into_result().unwrap();
    assert!(got["metadata"]["annotations"].get("kubectl.kubernetes.io/last-applied-configuration").is_some());
    std::fs::write(&path, mc(&"x".repeat(300 * 1024))).unwrap();
    let out = ctl(&c, &["apply", "-f", &file]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("too large to keep its applied configuration"), "{stderr}");
    let got = admin.get(p).await.unwrap().into_result().unwrap();
    assert!(
        got["metadata"]
            .get("annotations")
            .and_then(|a| a.get("kubectl.kubernetes.io/last-applied-configuration"))
            .is_none(),
        "the stale record is gone"
    );
    let source = got["spec"]["config"]["storage"]["files"][0]["contents"]["source"].as_str().unwrap_or_default();
    assert_eq!(source.len(), "data:,".len() + 300 * 1024);
}

/// Which build answers, after upgrading aloft: `aloftctl version` prints aloftctl's build and the
/// coordinator's (from `/version`, whose gitCommit, gitTreeState and buildDate carry it, as does
/// `aloft_build_info` on `/metrics`), `--client` asks no coordinator, and each binary's
/// `--version` says the same. The binaries and this test were built from one tree in one
/// environment: with `scripts/build-env.sh` sourced (as scripts/test.sh does) that is the
/// checkout's commit, without it every one of them says the commit was not recorded.
#[tokio::test]
async fn version_names_the_build_of_each_side() {
    let c = Coordinator::start();
    let build = aloft_api::build_info!();
    let long = build.long_version();
    assert_eq!(
        ok(&c, &["version"]),
        format!("Client Version: {long}\nServer Version: {long} (Kubernetes API v1.32.0)\n")
    );
    // No coordinator, and no client config, needed for the client's own.
    let alone = Command::new(bin("aloftctl"))
        .args(["version", "--client", "--kubeconfig", "/nonexistent/kubeconfig"])
        .env_remove("ALOFT_KUBECONFIG")
        .output()
        .expect("run aloftctl");
    assert!(alone.status.success(), "{}", String::from_utf8_lossy(&alone.stderr));
    assert_eq!(String::from_utf8_lossy(&alone.stdout), format!("Client Version: {long}\n"));
    for name in ["aloftctl", "aloft-coordinator", "aloft-agent"] {
        let out = Command::new(bin(name)).arg("--version").output().expect("run --version");
        assert!(out.status.success(), "{name} --version: {}", String::from_utf8_lossy(&out.stderr));
        assert_eq!(String::from_utf8_lossy(&out.stdout), format!("{name} {long}\n"));
    }
    let v = c.client().get("/version").await.expect("GET /version").into_result().expect("/version");
    assert_eq!(v["gitVersion"], format!("v1.32.0+aloft-{}", build.version), "{v}");
    assert_eq!(v["gitCommit"], build.git_commit, "{v}");
    assert_eq!(v["gitTreeState"], build.git_tree_state, "{v}");
    assert_eq!(v["buildDate"], build.build_date, "{v}");
    let metrics = ok(&c, &["get", "--raw", "/metrics"]);
    let info = format!(
        "aloft_build_info{{version=\"{}\",git_commit=\"{}\",git_tree_state=\"{}\",build_date=\"{}\"}} 1",
        build.version, build.git_commit, build.git_tree_state, build.build_date
    );
    assert!(metrics.lines().any(|l| l == info), "no line {info:?} in:\n{metrics}");
    // Under scripts/test.sh (which exports the commit for the build and the run) the commit is
    // really there.
    if std::env::var_os("ALOFT_GIT_COMMIT").is_some() {
        assert!(!build.git_commit.is_empty(), "built with ALOFT_GIT_COMMIT set, yet no commit recorded");
        assert!(long.contains(build.short_commit()), "{long}");
    }
}

/// A file exported with `get -o yaml` carries the store's resourceVersion, which a create refuses
/// (as kube-apiserver does): `aloftctl apply` of such a file after the object is gone (or onto
/// another coordinator) creates it, clearing the version as kubectl's create and apply do; the
/// server still refuses a POST with one from a client that does not.
#[tokio::test]
async fn apply_recreates_an_exported_object() {
    let c = Coordinator::start();
    let dir = tempfile::tempdir().unwrap();
    ok(&c, &["apply", "-f", &example("worker-pool.yaml")]);
    let exported = ok(&c, &["get", "mcp", "worker", "-o", "yaml"]);
    assert!(exported.contains("resourceVersion:"), "{exported}");
    let file = write_in(dir.path(), "exported.yaml", &exported);
    ok(&c, &["delete", "mcp", "worker"]);
    let out = ok(&c, &["apply", "-f", &file]);
    assert!(out.contains("created"), "{out}");
    let back = ok(&c, &["get", "mcp", "worker", "-o", "yaml"]);
    assert!(back.contains("name: worker"), "{back}");
    let raw = c
        .client()
        .post(
            "/apis/machineconfiguration.openshift.io/v1/machineconfigpools",
            &serde_json::json!({"apiVersion": "machineconfiguration.openshift.io/v1", "kind": "MachineConfigPool",
                "metadata": {"name": "other", "resourceVersion": "1"}, "spec": {}}),
        )
        .await
        .expect("POST");
    assert_eq!(raw.code, 400, "{}", raw.body);
}
