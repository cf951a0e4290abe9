//! Enrollment: the first start trades the fleet's bootstrap token for this node's own credential,
//! kept in `<root>/var/lib/aloft/credential.json` (0600). Later starts reuse it. When the Node is
//! deleted (which revokes the credential) the agent enrolls again with the bootstrap token, as a
//! kubelet registers its Node again: a host without the token stays out until it is given one.

use crate::host::Root;
use aloft_client::{install_crypto, Client, ClientConfig, Reply};
use anyhow::{anyhow, bail, Context, Result};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// What the node keeps after enrolling.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Credential {
    pub server: String,
    pub node_name: String,
    pub token: String,
}

/// Whether the agent can keep its state (the credential among it) under `root`: made and
/// written to before enrolling, since an enrollment whose credential then cannot be saved left a
/// Node no later start could claim (another host "holds its credential").
pub fn check_state_dir(root: &Root) -> Result<()> {
    let dir = root.state_dir();
    std::fs::create_dir_all(&dir).with_context(|| format!("creating the agent's state dir {}", dir.display()))?;
    let probe = dir.join(".write-check");
    std::fs::write(&probe, b"").with_context(|| format!("writing in the agent's state dir {}", dir.display()))?;
    std::fs::remove_file(&probe).with_context(|| format!("removing {}", probe.display()))?;
    Ok(())
}

pub fn credential_path(root: &Root) -> PathBuf {
    root.state_dir().join("credential.json")
}

fn write_private(path: &Path, data: &[u8]) -> Result<()> {
    let dir = path.parent().ok_or_else(|| anyhow!("{} has no parent", path.display()))?;
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let tmp = dir.join(".credential.tmp");
    // A leftover of a write cut short is removed, and the file made anew (O_EXCL): whatever is
    // at that name, a symlink among it, is never written through.
    match std::fs::remove_file(&tmp) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e).with_context(|| format!("removing {}", tmp.display())),
    }
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)
        .with_context(|| format!("creating {}", tmp.display()))?;
    f.write_all(data).with_context(|| format!("writing {}", tmp.display()))?;
    f.sync_all().with_context(|| format!("writing {}", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("renaming {} to {}", tmp.display(), path.display()))?;
    std::fs::File::open(dir)?.sync_all()?;
    Ok(())
}

/// The stored credential, `None` when there is none yet. Any other failure to read it (its
/// permissions, an I/O error) is an error: taken for "none", it sent the node to enroll again
/// under a name its own Node already held, and the coordinator refused it for good (409).
fn read_credential(path: &Path) -> Result<Option<Credential>> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e).with_context(|| format!("reading this node's credential {}", path.display())),
    };
    let cred = serde_json::from_str(&text)
        .with_context(|| format!("{} is corrupt; delete it to enroll again", path.display()))?;
    Ok(Some(cred))
}

/// Parse `k=v,k2=v2` (values may be empty: `node-role.kubernetes.io/worker=`).
pub fn parse_labels(s: &str) -> Result<BTreeMap<String, String>> {
    let mut out = BTreeMap::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        // As kubelet's --node-labels: `key=value`, the value may be empty (`node-role...=`);
        // a bare `key` is a typo more often than a label (it gave an empty-valued one).
        let Some((k, v)) = part.split_once('=') else {
            bail!("--labels: {part:?} has no '=' (want key=value; an empty value is written key=)");
        };
        if k.is_empty() {
            bail!("--labels: {part:?} has an empty key (want key=value)");
        }
        out.insert(k.to_string(), v.to_string());
    }
    Ok(out)
}

/// Who this node enrolls as, and with which coordinator: what both a first enrollment and a
/// later one (after the credential stopped working) need.
#[derive(Debug, Clone, Copy)]
pub struct Enrollment<'a> {
    /// The coordinator's URL.
    pub server: &'a str,
    /// The coordinator's CA (PEM), when it is not in the system's trust store.
    pub ca_pem: Option<&'a [u8]>,
    /// The bootstrap token: needed only to enroll, never to run.
    pub bootstrap_token: Option<&'a str>,
    pub node_name: &'a str,
    /// The Node's labels at enrollment.
    pub labels: &'a BTreeMap<String, String>,
    /// The agent's D-Bus status, when served: while an enrollment waits for its coordinator,
    /// `aloft-agent status` says so, and why, instead of finding no agent.
    pub status: Option<&'a tokio::sync::watch::Sender<crate::dbus_status::AgentStatus>>,
}

/// Load the credential, or enroll with the bootstrap token and store it.
pub async fn ensure(root: &Root, e: &Enrollment<'_>) -> Result<Credential> {
    let Enrollment { server, ca_pem, bootstrap_token, node_name, labels, status } = *e;
    install_crypto();
    let path = credential_path(root);
    if let Some(mut cred) = read_credential(&path)? {
        if cred.node_name == node_name && cred.server == server {
            return Ok(cred);
        }
        if cred.node_name == node_name {
            // The coordinator's address changed (a new DNS name, an IP for a name): the
            // credential is the Node's, not the address's, and is kept, as a kubelet keeps its
            // credential when its kubeconfig's server changes. Enrolling again was refused (the
            // Node has an enrolled agent: this one) and locked the node out. A coordinator that
            // does not know the credential answers 401, and the agent enrolls again then.
            tracing::info!(from = %cred.server, to = server, "the coordinator's address changed; keeping this node's credential");
            cred.server = server.to_string();
            write_private(&path, serde_json::to_string_pretty(&cred)?.as_bytes())?;
            return Ok(cred);
        }
        tracing::warn!(path = %path.display(), stored = %cred.node_name, "stored credential is for another node name; enrolling again");
    }
    let token = bootstrap_token.ok_or_else(|| {
        anyhow!("this node has no credential yet and no bootstrap token was given (--bootstrap-token-file)")
    })?;
    let client = Client::new(&ClientConfig {
        server: server.to_string(),
        ca_pem: ca_pem.map(<[u8]>::to_vec),
        token: Some(token.to_string()),
    })?;
    let body = serde_json::json!({"nodeName": node_name, "labels": labels});
    let reply = post_until_answered(&client, server, &body, status).await?;
    if reply.code == 401 {
        bail!(
            "the coordinator refused the bootstrap token (401 Unauthorized): check --bootstrap-token-file, and whether \
             the token expired or was revoked (`aloft-coordinator token list`; a bootstrap token expires 24 h after it \
             was made unless made with --ttl, --ttl 0 for never)"
        );
    }
    let v = reply.into_result().context("enrollment refused")?;
    let token =
        v.get("token").and_then(|t| t.as_str()).ok_or_else(|| anyhow!("enrollment answer has no token: {v}"))?;
    let cred = Credential { server: server.to_string(), node_name: node_name.to_string(), token: token.to_string() };
    write_private(&path, serde_json::to_string_pretty(&cred)?.as_bytes())?;
    tracing::info!(node = node_name, "enrolled with the coordinator");
    Ok(cred)
}

/// The state `aloft-agent status` shows while a first enrollment waits for the coordinator
/// (there is no Node yet, so none of MCO's states).
pub const ENROLLING: &str = "Enrolling";

/// How long one enrollment attempt may take, connection and answer.
const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(30);

/// The longest wait between two enrollment attempts.
const MOST_BETWEEN_ATTEMPTS: Duration = Duration::from_secs(60);

/// Whether an answer to the enrollment request is worth asking again for: the coordinator is
/// there but cannot answer now (5xx: starting, its store busy; 429). Any other answer is final.
fn answer_is_transient(code: u16) -> bool {
    code >= 500 || code == 429
}

/// The enrollment request, sent again while the coordinator cannot be reached or cannot answer
/// now: a host's first boot may come before its network, or while its coordinator is being
/// upgraded, and an agent that exited left its unit failing every 5 s until it was up. Waits 1 s,
/// doubling to a minute (each wait up to half again at random, [`crate::backoff`]), logging each
/// failure and telling systemd what it waits for (STATUS=) and that the start goes on
/// (EXTEND_TIMEOUT_USEC=, past the unit's start timeout). A refusal (401, 403, 409, 422) is final
/// and returned.
async fn post_until_answered(
    client: &Client,
    server: &str,
    body: &serde_json::Value,
    status: Option<&tokio::sync::watch::Sender<crate::dbus_status::AgentStatus>>,
) -> Result<Reply> {
    let mut base = Duration::from_secs(1);
    let mut tries = 0u32;
    loop {
        let failure = match attempt(client, body).await {
            Ok(reply) => return Ok(reply),
            Err(failure) => failure,
        };
        tries += 1;
        let wait = crate::backoff::jittered(base);
        tracing::warn!(coordinator = server, error = %failure, retry_in_s = wait.as_secs(), "cannot enroll yet; retrying");
        // The wait, the next attempt at its longest, and room to spare.
        crate::notify::extend_start(wait + ATTEMPT_TIMEOUT + Duration::from_secs(30));
        crate::notify::status(&format!("enrolling with {server}: {failure}; retrying in {} s", wait.as_secs()));
        if let Some(tx) = status {
            tx.send_modify(|st| {
                st.state = ENROLLING.into();
                st.progress = format!(
                    "waiting to enroll with {server}: {tries} attempt{} failed, the next in {} s",
                    if tries == 1 { "" } else { "s" },
                    wait.as_secs()
                );
                st.reason = failure.clone();
                st.touch();
            });
        }
        tokio::time::sleep(wait).await;
        base = (base * 2).min(MOST_BETWEEN_ATTEMPTS);
    }
}

/// One enrollment request: the answer, or why it is worth asking again (unreachable, no answer
/// in time, a 5xx or 429). Each attempt has its own deadline: a listener that accepts and never
/// answers (a proxy whose backend is down) held the first attempt forever, with nothing logged.
async fn attempt(client: &Client, body: &serde_json::Value) -> Result<Reply, String> {
    match tokio::time::timeout(ATTEMPT_TIMEOUT, client.post("/aloft/v1/enroll", body)).await {
        Err(_) => Err(format!("no answer within {} s", ATTEMPT_TIMEOUT.as_secs())),
        Ok(Ok(reply)) if !answer_is_transient(reply.code) => Ok(reply),
        Ok(Ok(reply)) => {
            let said = reply.body.get("message").and_then(|m| m.as_str()).map(str::to_string);
            let said = said.unwrap_or_else(|| reply.body.to_string());
            // A proxy's error page can be long: its start says enough.
            Err(format!("HTTP {}: {}", reply.code, said.chars().take(200).collect::<String>()))
        }
        Ok(Err(e)) => Err(format!("{e:#}")),
    }
}

/// Enroll again after the stored credential stopped working (`why`: its Node was deleted, which
/// revokes it, or it was revoked by hand), as a kubelet registers its Node again when it is
/// deleted. Needs the bootstrap token; without it the error says what to do.
pub async fn enroll_again(root: &Root, e: &Enrollment<'_>, why: &str) -> Result<Credential> {
    let node_name = e.node_name;
    let Some(token) = e.bootstrap_token else {
        bail!(
            "this node's credential no longer works ({why}): its Node was deleted or its credential revoked. \
             To rejoin, give the agent the bootstrap token (--bootstrap-token-file) and restart it"
        );
    };
    let path = credential_path(root);
    match std::fs::remove_file(&path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e).with_context(|| format!("removing {}", path.display())),
    }
    ensure(root, &Enrollment { bootstrap_token: Some(token), ..*e }).await.with_context(|| {
        format!(
            "this node's credential no longer works ({why}) and enrolling again failed \
             (if another host enrolled as {node_name:?} meanwhile, give this host another --node-name)"
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A listener that accepts and never answers: the attempt ends at its deadline (on tokio's
    /// paused clock, at once), worth another. Which deadline says so first (the attempt's, or the
    /// client's handshake limit, both 30 s) is a race on the paused clock; either is an answer
    /// that names the wait, no later than the attempt's.
    #[tokio::test(start_paused = true)]
    async fn an_attempt_that_gets_no_answer_ends_at_its_deadline() {
        install_crypto();
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let client =
            Client::new(&ClientConfig { server: format!("https://{addr}"), ca_pem: None, token: None }).unwrap();
        let started = tokio::time::Instant::now();
        let got = attempt(&client, &serde_json::json!({})).await;
        assert!(started.elapsed() <= ATTEMPT_TIMEOUT, "{:?}", started.elapsed());
        let err = got.err().unwrap_or_default();
        assert!(err.contains("within 30 s"), "{err}");
        drop(listener);
    }

    /// The credential is written through no symlink left at its temporary name, and a credential
    /// that cannot be read is an error, not "none yet" (which enrolled again, into a 409).
    #[test]
    fn the_credential_file_is_written_anew_and_read_failures_are_errors() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state/credential.json");
        assert!(read_credential(&path).unwrap().is_none(), "none yet");
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        let target = dir.path().join("elsewhere");
        std::fs::write(&target, "untouched").unwrap();
        std::os::unix::fs::symlink(&target, path.with_file_name(".credential.tmp")).unwrap();
        let cred = Credential { server: "https://h:1".into(), node_name: "n".into(), token: "t.s".into() };
        write_private(&path, serde_json::to_string(&cred).unwrap().as_bytes()).unwrap();
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "untouched");
        assert!(!path.is_symlink());
        assert_eq!(read_credential(&path).unwrap(), Some(cred));
        let mode = std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&path).unwrap().permissions());
        assert_eq!(mode & 0o777, 0o600);
        // A directory at the credential's name: reading it fails, and that is said.
        std::fs::remove_file(&path).unwrap();
        std::fs::create_dir(&path).unwrap();
        let e = format!("{:#}", read_credential(&path).unwrap_err());
        assert!(e.contains("reading this node's credential"), "{e}");
    }

    /// A new address for the coordinator keeps the node's credential (saved with the new
    /// address), with no bootstrap token and no request: enrolling again was refused with a 409.
    #[tokio::test]
    async fn a_new_coordinator_address_keeps_the_credential() {
        let dir = tempfile::tempdir().unwrap();
        let root = Root::new(dir.path());
        let path = credential_path(&root);
        let cred = Credential { server: "https://10.0.0.1:6443".into(), node_name: "n1".into(), token: "t.s".into() };
        write_private(&path, serde_json::to_string(&cred).unwrap().as_bytes()).unwrap();
        let labels = BTreeMap::new();
        let e = Enrollment {
            server: "https://coordinator.example:6443",
            ca_pem: None,
            bootstrap_token: None,
            node_name: "n1",
            labels: &labels,
            status: None,
        };
        let got = ensure(&root, &e).await.unwrap();
        assert_eq!((got.server.as_str(), got.token.as_str()), ("https://coordinator.example:6443", "t.s"));
        assert_eq!(read_credential(&path).unwrap(), Some(got));
        // Another node name is another node: it needs enrolling (here, a token it lacks).
        let err = ensure(&root, &Enrollment { node_name: "n2", ..e }).await.unwrap_err();
        assert!(format!("{err:#}").contains("no bootstrap token"), "{err:#}");
    }

    #[test]
    fn only_answers_that_may_change_are_asked_again() {
        for code in [500, 502, 503, 504, 429] {
            assert!(answer_is_transient(code), "{code}");
        }
        for code in [200, 201, 400, 401, 403, 404, 409, 422] {
            assert!(!answer_is_transient(code), "{code}");
        }
    }

    #[test]
    fn labels() {
        let l = parse_labels("node-role.kubernetes.io/worker=,zone=a").unwrap();
        assert_eq!(l.get("node-role.kubernetes.io/worker").map(String::as_str), Some(""));
        assert_eq!(l.get("zone").map(String::as_str), Some("a"));
        assert!(parse_labels("=x").is_err());
        assert!(parse_labels("foo").unwrap_err().to_string().contains("has no '='"));
        assert!(parse_labels("").unwrap().is_empty());
    }
}
