//! A node's identity over its life: a deleted Node registers again (as a kubelet's does), and an
//! agent whose credential is revoked, with no way to enroll again, says so and stops.

use aloft_coordinator::resources::NODE;
use aloft_tests::sandbox::Host;
use aloft_tests::{bin, eventually, path_of, Coordinator};
use serde_json::Value;
use std::process::Command;
use std::time::Duration;

/// The uid of Node `name` once it is there and its agent has set it Ready.
async fn ready_uid(c: &Coordinator, name: &str, not: Option<&str>, what: &str) -> String {
    let admin = c.client();
    let not = not.map(str::to_string);
    eventually(Duration::from_secs(60), what, || {
        let (admin, not) = (admin.clone(), not.clone());
        async move {
            let r = admin.get(&path_of(&NODE, Some(name))).await?;
            if r.code == 404 {
                return Ok(None);
            }
            let node = r.into_result()?;
            let uid = node.pointer("/metadata/uid").and_then(Value::as_str).unwrap_or_default().to_string();
            let ready = aloft_tests::condition(&node, "Ready").is_some_and(|c| c["status"] == "True");
            let worker = node.pointer("/metadata/labels/node-role.kubernetes.io~1worker").is_some();
            Ok((ready && worker && Some(&uid) != not.as_ref()).then_some(uid))
        }
    })
    .await
}

fn token(c: &Coordinator, args: &[&str]) -> String {
    let out = Command::new(bin("aloft-coordinator"))
        .arg("token")
        .args(args)
        .arg("--data-dir")
        .arg(c.data_dir())
        .args(c.store_args())
        .env("ALOFT_LOG", "warn")
        .output()
        .expect("run aloft-coordinator token");
    assert!(out.status.success(), "token {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_node_registers_again_and_a_revoked_agent_says_why_it_stops() {
    let c = Coordinator::start();
    let admin = c.client();
    let bootstrap = c.create_token("fleet", "bootstrap");
    let token_file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(token_file.path(), &bootstrap).unwrap();
    let mut h = Host::new("n1").await;
    h.start_agent(&c, token_file.path());
    let first = ready_uid(&c, "n1", None, "n1 enrolled and Ready").await;

    // `kubectl delete node` while the agent runs: it enrolls again and its Node comes back.
    admin.delete(&path_of(&NODE, Some("n1"))).await.unwrap().into_result().unwrap();
    let second = ready_uid(&c, "n1", Some(&first), "n1 registered again by the running agent").await;

    // The same while the agent is stopped: the next start enrolls again instead of exiting.
    h.stop_agent();
    admin.delete(&path_of(&NODE, Some("n1"))).await.unwrap().into_result().unwrap();
    h.start_agent(&c, token_file.path());
    ready_uid(&c, "n1", Some(&second), "n1 registered again at the agent's start").await;

    // Credential and bootstrap token revoked: the agent cannot rejoin, and says why and what to do.
    h.stop_agent();
    assert!(token(&c, &["list"]).contains("node:n1"), "the node's credential is listed");
    token(&c, &["revoke", "--name", "node:n1"]);
    token(&c, &["revoke", "--name", "fleet"]);
    assert!(!token(&c, &["list"]).contains("node:n1"));
    h.start_agent(&c, token_file.path());
    eventually(Duration::from_secs(60), "the agent's ERROR about its revoked credential", || async {
        let log = h.log();
        let said = log.lines().any(|l| l.contains("ERROR") && l.contains("credential no longer works"));
        let exited = log.lines().any(|l| l.starts_with("error: ") && l.contains("credential no longer works"));
        Ok((said && exited).then_some(()))
    })
    .await;
}

/// `token create` refuses an empty name and the names other parts of aloft own (`admin`, the
/// token `serve` writes; `node:<name>`, enrolled nodes' credentials), which it would silently
/// replace; those credentials keep working.
#[tokio::test]
async fn token_create_refuses_reserved_names() {
    let c = Coordinator::start();
    let node = c.node_client("n1", serde_json::json!({"node-role.kubernetes.io/worker": ""})).await;
    for (name, says) in [("", "empty"), ("  ", "empty"), ("admin", "reserved"), ("node:n1", "reserved")] {
        let out = Command::new(bin("aloft-coordinator"))
            .args(["token", "create", "--role", "viewer", "--name", name, "--data-dir"])
            .arg(c.data_dir())
            .env("ALOFT_LOG", "warn")
            .output()
            .expect("run token create");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "--name {name:?} accepted");
        assert!(stderr.contains("--name") && stderr.contains(says), "--name {name:?}: {stderr}");
    }
    assert_eq!(c.client().get("/api/v1/nodes").await.unwrap().code, 200, "the admin token still works");
    assert_eq!(node.get(&path_of(&NODE, Some("n1"))).await.unwrap().code, 200, "the node's credential still works");
}

/// The Ready status of Node `name`: (status, reason).
async fn ready_of(c: &Coordinator, name: &str) -> (String, String) {
    let node = c.client().get(&path_of(&NODE, Some(name))).await.unwrap().into_result().unwrap();
    let cond = aloft_tests::condition(&node, "Ready").cloned().unwrap_or_default();
    let s = |k: &str| cond[k].as_str().unwrap_or_default().to_string();
    (s("status"), s("reason"))
}

/// A node whose agent is gone (killed: no connection left) turns Ready=Unknown after the grace
/// period, as the node lifecycle controller marks a node whose kubelet stopped posting its
/// status, and Ready=True again once its agent is back; a Node nobody's agent wrote Ready for is
/// left as it is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_whose_agent_is_gone_turns_ready_unknown_and_back() {
    let args = vec!["--node-monitor-grace-period".to_string(), "3s".to_string()];
    let c = Coordinator::start_with(aloft_tests::Options { args, ..Default::default() });
    let admin = c.client();
    let by_hand = serde_json::json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "by-hand"},
        "status": {"conditions": [{"type": "Ready", "status": "True", "reason": "ByHand"}]}});
    admin.post("/api/v1/nodes", &by_hand).await.unwrap().into_result().unwrap();
    let bootstrap = c.create_token("fleet", "bootstrap");
    let token_file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(token_file.path(), &bootstrap).unwrap();
    let mut h = Host::new("n1").await;
    h.start_agent(&c, token_file.path());
    ready_uid(&c, "n1", None, "n1 enrolled and Ready").await;
    // Connected, it stays Ready past the grace period.
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(ready_of(&c, "n1").await, ("True".into(), "AloftAgentReady".into()));

    h.stop_agent();
    let c2 = &c;
    eventually(Duration::from_secs(30), "n1 Ready=Unknown once its agent is gone", || async move {
        Ok((ready_of(c2, "n1").await == ("Unknown".to_string(), "NodeStatusUnknown".to_string())).then_some(()))
    })
    .await;
    h.start_agent(&c, token_file.path());
    eventually(Duration::from_secs(60), "n1 Ready=True once its agent is back", || async move {
        Ok((ready_of(c2, "n1").await.0 == "True").then_some(()))
    })
    .await;
    assert_eq!(ready_of(&c, "by-hand").await, ("True".into(), "ByHand".into()), "no agent's Node: left alone");
}

/// An agent that writes its Node is there, watch or not, as a kubelet's status post is a
/// heartbeat: after a reboot an agent writes Ready=True and its Done before its watch is open
/// again, and judged by watches alone it was marked Unknown a round later, just after the
/// rollout had picked the next node on its word (the VM test saw two nodes unavailable under
/// `maxUnavailable: 1`). Once it stops, it is marked Unknown as before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_writing_its_node_without_a_watch_stays_ready() {
    let args = vec!["--node-monitor-grace-period".to_string(), "3s".to_string()];
    let c = Coordinator::start_with(aloft_tests::Options { args, ..Default::default() });
    let node = c.node_client("n1", serde_json::json!({"node-role.kubernetes.io/worker": ""})).await;
    let ready = serde_json::json!({"status": {"conditions": [
        {"type": "Ready", "status": "True", "reason": "AloftAgentReady", "message": "aloft-agent is running"}]}});
    let path = path_of(&NODE, Some("n1"));
    node.patch(&format!("{path}/status"), "application/merge-patch+json", &ready).await.unwrap().into_result().unwrap();
    // Three grace periods of writes (an annotation each half second), no watch open.
    let start = std::time::Instant::now();
    let mut writes = 0;
    while start.elapsed() < Duration::from_secs(9) {
        let note = serde_json::json!({"metadata": {"annotations": {
            "machineconfiguration.openshift.io/state": "Done",
            "machineconfiguration.openshift.io/reason": format!("write {writes}")}}});
        node.patch(&path, "application/merge-patch+json", &note).await.unwrap().into_result().unwrap();
        writes += 1;
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert_eq!(ready_of(&c, "n1").await, ("True".into(), "AloftAgentReady".into()), "after {writes} writes");
    // Silent, it is marked gone.
    let c2 = &c;
    eventually(Duration::from_secs(30), "n1 Ready=Unknown once its agent is silent", || async move {
        Ok((ready_of(c2, "n1").await == ("Unknown".to_string(), "NodeStatusUnknown".to_string())).then_some(()))
    })
    .await;
    // Its requests bring it back, watch or not (a Done report written before the watch is open
    // again left it Unknown until the watch came).
    let node = &node;
    eventually(Duration::from_secs(30), "n1 Ready=True again on its agent's requests", || async move {
        node.get(&path_of(&NODE, Some("n1"))).await?.into_result()?;
        Ok((ready_of(c2, "n1").await == ("True".to_string(), "AloftAgentReady".to_string())).then_some(()))
    })
    .await;
}

/// The token commands refuse what would be silently wrong: a node's role (only enrollment makes
/// a node's credential, which deleting the Node revokes), a name a table cannot show on one line
/// or that differs from a reserved one by case, revoking the admin token (`serve` puts it back
/// from admin.token; the error says how to rotate it), and a directory that is no data dir (a
/// new empty store there held tokens no coordinator knew). Nothing is written.
#[tokio::test]
async fn token_commands_refuse_what_would_be_silently_wrong() {
    let c = Coordinator::start();
    let run = |args: &[&str], dir: &std::path::Path| {
        Command::new(bin("aloft-coordinator"))
            .arg("token")
            .args(args)
            .arg("--data-dir")
            .arg(dir)
            .env("ALOFT_LOG", "warn")
            .output()
            .expect("run aloft-coordinator token")
    };
    let before = token(&c, &["list"]);
    for (args, says) in [
        (&["create", "--name", "sidekick", "--role", "node:n1"][..], "enrollment"),
        (&["create", "--name", "two\nlines", "--role", "viewer"][..], "a token's name is"),
        (&["create", "--name", "Admin", "--role", "viewer"][..], "reserved"),
        (&["create", "--name", "Node:n1", "--role", "viewer"][..], "reserved"),
        (&["revoke", "--name", "admin"][..], "To rotate it"),
        (
            &["create", "--name", "x", "--role", "viewer", "--labels", "node-role.kubernetes.io/master="][..],
            "--role bootstrap",
        ),
        (
            &["create", "--name", "x", "--role", "bootstrap", "--labels", "node-role.kubernetes.io/master"][..],
            "key=value",
        ),
        (&["create", "--name", "x", "--role", "bootstrap", "--labels", "bad key=v"][..], "label \"bad key=v\""),
        // Labels any node may carry: listing them would only take away the worker role.
        (
            &[
                "create",
                "--name",
                "x",
                "--role",
                "bootstrap",
                "--labels",
                "example.com/x=y,topology.kubernetes.io/zone=a",
            ][..],
            "\"example.com/x\", \"topology.kubernetes.io/zone\" need no allowing",
        ),
    ] {
        let out = run(args, &c.data_dir());
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && stderr.contains(says), "{args:?}: {stderr}");
    }
    assert_eq!(token(&c, &["list"]), before, "nothing written");
    assert_eq!(c.client().get("/api/v1/nodes").await.unwrap().code, 200, "the admin token still works");

    let elsewhere = tempfile::tempdir().unwrap();
    for args in [&["create", "--name", "fleet", "--role", "bootstrap"][..], &["list"][..]] {
        let out = run(args, elsewhere.path());
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && stderr.contains("is no coordinator data dir"), "{args:?}: {stderr}");
    }
    assert_eq!(std::fs::read_dir(elsewhere.path()).unwrap().count(), 0, "nothing created there");

    if aloft_tests::stores_on_etcd() {
        eprintln!("the rest not run with ALOFT_TEST_STORE=etcd: it reads the SQLite store's tokens");
        return;
    }
    // The data dir read-only (a mounted backup; here a read-only bind mount in a mount namespace
    // of its own): `list` reads the tokens and writes nothing (it opened the store for writing:
    // "attempt to write a readonly database").
    let out = Command::new("unshare")
        .args(["-m", "sh", "-c", "mount --bind -o ro \"$0\" \"$0\" && exec \"$1\" token list --data-dir \"$0\""])
        .arg(c.data_dir())
        .arg(bin("aloft-coordinator"))
        .env("ALOFT_LOG", "warn")
        .output()
        .expect("run unshare");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), before, "{stderr}");
}

/// An agent that cannot reach its coordinator says so (WARN, after a few seconds: a restart is
/// no news), and says when it reaches it again: at debug level only, a fleet cut off from its
/// coordinator showed nothing on its nodes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_says_when_it_cannot_reach_the_coordinator_and_when_it_can_again() {
    let mut c = Coordinator::start_with(aloft_tests::Options { fixed_port: true, ..Default::default() });
    let token_file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(token_file.path(), c.create_token("fleet", "bootstrap")).unwrap();
    let mut h = Host::new("n1").await;
    h.start_agent(&c, token_file.path());
    ready_uid(&c, "n1", None, "n1 enrolled and Ready").await;
    c.kill9();
    eventually(Duration::from_secs(60), "the agent's WARN that it cannot reach the coordinator", || async {
        Ok(h.log().lines().any(|l| l.contains("WARN") && l.contains("cannot reach the coordinator")).then_some(()))
    })
    .await;
    c.restart();
    eventually(Duration::from_secs(60), "the agent's word that it reached the coordinator again", || async {
        Ok(h.log().lines().any(|l| l.contains("reached the coordinator again")).then_some(()))
    })
    .await;

    // An agent (re)started while the coordinator is down (a host rebooting during an outage)
    // waits for it, and sets its Ready when it is back: it exited at once ("Connection
    // refused"), and its node stayed cordoned on its unfinished update.
    h.stop_agent();
    c.kill9();
    let said = h.log().matches("cannot reach the coordinator").count();
    h.start_agent(&c, token_file.path());
    eventually(Duration::from_secs(60), "the restarted agent's WARN that it waits for the coordinator", || async {
        Ok((h.log().matches("cannot reach the coordinator").count() > said).then_some(()))
    })
    .await;
    assert!(!h.agent_exited(), "the agent waits for the coordinator: {}", h.log());
    c.restart();
    eventually(Duration::from_secs(60), "the restarted agent reaching the coordinator", || async {
        Ok((h.log().matches("reached the coordinator again").count() >= 2).then_some(()))
    })
    .await;
    eventually(Duration::from_secs(60), "n1 Ready", || async {
        Ok((ready_of(&c, "n1").await.0 == "True").then_some(()))
    })
    .await;
    assert!(!h.agent_exited());
    h.stop_agent();
}

/// The data directory's secrets are the owner's alone after a start, also when found readable
/// by others (made so by hand): the store, the admin token, its kubeconfig and the CA's and the
/// serving certificate's keys. `serve` writes the token and kubeconfig only when they change, so
/// it mends their mode instead (the fixes' audit found them left 0644).
#[tokio::test]
async fn a_start_makes_the_data_dirs_secrets_private_again() {
    use std::os::unix::fs::PermissionsExt;
    if aloft_tests::stores_on_etcd() {
        eprintln!("not run with ALOFT_TEST_STORE=etcd: the secrets checked include the SQLite store's files");
        return;
    }
    let mut c = Coordinator::start_with(aloft_tests::Options { fixed_port: true, ..Default::default() });
    c.kill9();
    let secrets = ["aloft.db", "aloft-tokens.db", "admin.token", "admin.kubeconfig", "ca.key", "serving.key"];
    for f in secrets {
        std::fs::set_permissions(c.data_dir().join(f), std::fs::Permissions::from_mode(0o644)).unwrap();
    }
    c.restart();
    assert_eq!(c.client().get("/api/v1/nodes").await.unwrap().code, 200);
    for f in secrets {
        let mode = std::fs::metadata(c.data_dir().join(f)).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "{f}");
    }
    assert_eq!(std::fs::metadata(c.data_dir().join("ca.crt")).unwrap().permissions().mode() & 0o777, 0o644);
}
