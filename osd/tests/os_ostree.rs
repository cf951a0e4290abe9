//! The OS backend on real libostree, asked the way the agent asks it: the agent's socket client
//! talking to a real `aloft-os-helper` process serving a temp directory sysroot. Small bootable
//! commits are built here, signed with a throwaway GPG key and served over HTTP on loopback.
//! Nothing is mocked: these are the calls a node makes, on a sysroot that is not booted.

use aloft_agent::host::Root;
use aloft_agent::os::client::HelperClient;
use aloft_agent::os::denylist::Denylist;
use aloft_agent::os::health::HealthChecks;
use aloft_agent::os::{OsBackend, OsError, StageRequest};
use aloft_api::osimage::{self, OstreeImage};
use aloft_osd::testkit::{self, GpgKey, HelperProcess, ServerRepo, StaticServer, REF};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Kernel arguments of the first deployment: machine-local ones plus the old config's `nosmt
/// audit=1`.
const BOOT_KARGS: [&str; 4] = ["root=/dev/vda", "console=ttyS0", "nosmt", "audit=1"];

struct Fixture {
    dir: tempfile::TempDir,
    key: GpgKey,
    server: ServerRepo,
    http: StaticServer,
    base: String,
    sysroot: PathBuf,
    /// Kept alive for the test (killed when dropped).
    _helper: HelperProcess,
    backend: HelperClient,
}

/// The helper binary of this package.
fn helper_bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_aloft-os-helper"))
}

impl Fixture {
    fn new() -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let key = GpgKey::generate(dir.path(), "trusted").unwrap();
        let server = ServerRepo::create(&dir.path().join("srv/repo")).unwrap();
        let base = server.commit(&tree(dir.path(), "1"), REF, "v1", Some(&key)).unwrap();
        let http = StaticServer::start(&dir.path().join("srv")).unwrap();
        let sysroot = dir.path().join("sysroot");
        testkit::init_sysroot(&sysroot, &server, &base, &BOOT_KARGS).unwrap();
        std::fs::write(dir.path().join("cmdline"), "root=/dev/vda console=ttyS0 nosmt audit=1\n").unwrap();
        let cmdline = dir.path().join("cmdline");
        let helper = HelperProcess::start_with(
            helper_bin(),
            &dir.path().join("run"),
            &sysroot,
            &key.keyring,
            &["--cmdline", cmdline.to_str().unwrap()],
        )
        .unwrap();
        let backend = helper.client();
        Fixture { dir, key, server, http, base, sysroot, _helper: helper, backend }
    }

    fn commit(&self, version: &str, key: Option<&GpgKey>) -> String {
        self.server.commit(&tree(self.dir.path(), version), REF, version, key).unwrap()
    }

    fn image(&self, checksum: &str) -> OstreeImage {
        osimage::parse(&format!("ostree+{}#{REF}@{checksum}", self.http.url("repo"))).unwrap().unwrap()
    }

    fn order(&self) -> Vec<String> {
        testkit::deployment_order(&self.sysroot).unwrap()
    }

    /// Every deployment checkout on disk (to prove a refusal deployed nothing).
    fn deploy_dirs(&self) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(self.sysroot.join("ostree/deploy/aloft/deploy"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
            .collect();
        v.sort();
        v
    }

    fn deployed_file(&self, checksum: &str, path: &str) -> String {
        std::fs::read_to_string(self.sysroot.join(format!("ostree/deploy/aloft/deploy/{checksum}.0/{path}"))).unwrap()
    }

    fn stage(&self, checksum: &str, old: &[&str], new: &[&str]) -> Result<aloft_agent::os::DeploymentInfo, OsError> {
        self.backend.stage(&StageRequest {
            image: Some(self.image(checksum)),
            old_kargs: old.iter().map(|s| s.to_string()).collect(),
            new_kargs: new.iter().map(|s| s.to_string()).collect(),
        })
    }
}

/// A tree for `version` in its own directory.
fn tree(dir: &Path, version: &str) -> PathBuf {
    let t = dir.join(format!("tree-{version}"));
    testkit::write_tree(&t, version, 20).unwrap();
    t
}

fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

/// Pull over HTTP with GPG verification, deploy with MCO's kernel-argument rule: the old
/// config's args deleted, the new ones appended, machine-local ones kept; the new deployment is
/// the default and the old one the rollback; a second pull downloads nothing.
#[test]
fn pull_and_stage_with_kernel_arguments() {
    let fx = Fixture::new();
    let v2 = fx.commit("2", Some(&fx.key));
    let report = fx.backend.pull(&fx.image(&v2)).unwrap();
    assert!(!report.already_present);
    assert_eq!(fx.order(), vec![fx.base.clone()], "pulling deploys nothing");

    let info = fx.stage(&v2, &["nosmt", "audit=1"], &["audit=0", "mitigations=off"]).unwrap();
    assert_eq!(info.checksum, v2);
    assert_eq!(info.kernel_arguments, strings(&["root=/dev/vda", "console=ttyS0", "audit=0", "mitigations=off"]));
    assert_eq!(info.origin.as_deref(), Some("aloft:aloft/stable/x86_64"));
    assert_eq!(fx.order(), vec![v2.clone(), fx.base.clone()], "new default first, previous second");
    assert!(fx.deployed_file(&v2, "usr/bin/aloft-version").contains("echo 2"));

    let st = fx.backend.status().unwrap();
    assert_eq!(st.booted, None, "a directory sysroot boots nothing");
    assert_eq!(st.next_boot().map(|d| d.checksum.as_str()), Some(v2.as_str()));
    assert_eq!(st.rollback.as_ref().map(|d| d.checksum.as_str()), Some(fx.base.as_str()));
    assert_eq!(st.rollback.unwrap().kernel_arguments, strings(&BOOT_KARGS), "the rollback keeps its own args");
    let json = serde_json::to_value(fx.backend.status().unwrap()).unwrap();
    assert!(json["deployments"][0]["kernelArguments"].is_array() && json.get("rollbackQueued").is_some(), "{json}");

    assert!(fx.backend.pull(&fx.image(&v2)).unwrap().already_present, "second pull: no download");
    assert!(fx.backend.has_verified_commit(&fx.image(&v2)).unwrap());
}

/// A kernel-argument change alone redeploys the running commit with the new arguments.
#[test]
fn kernel_arguments_only_change_redeploys_the_same_commit() {
    let fx = Fixture::new();
    let info = fx
        .backend
        .stage(&StageRequest { image: None, old_kargs: strings(&["audit=1"]), new_kargs: strings(&["audit=0"]) })
        .unwrap();
    assert_eq!(info.checksum, fx.base);
    assert_eq!(info.kernel_arguments, strings(&["root=/dev/vda", "console=ttyS0", "nosmt", "audit=0"]));
    assert_eq!(fx.order(), vec![fx.base.clone(), fx.base.clone()]);
}

/// With nothing staged, dropping the staged deployment changes nothing and says so (a directory
/// sysroot cannot stage: the staged case is VM scenario f's first step).
#[test]
fn dropping_without_a_staged_deployment_changes_nothing() {
    let fx = Fixture::new();
    let v2 = fx.commit("2", Some(&fx.key));
    fx.backend.pull(&fx.image(&v2)).unwrap();
    fx.stage(&v2, &[], &[]).unwrap();
    let before = fx.backend.status().unwrap();
    assert_eq!(fx.backend.drop_staged().unwrap(), None);
    assert_eq!(fx.backend.status().unwrap(), before, "the deployments are as they were");
    assert_eq!(fx.order(), vec![v2.clone(), fx.base.clone()]);
}

/// Rollback makes the previous deployment the default again.
#[test]
fn rollback_makes_the_previous_deployment_the_default() {
    let fx = Fixture::new();
    let v2 = fx.commit("2", Some(&fx.key));
    fx.backend.pull(&fx.image(&v2)).unwrap();
    fx.stage(&v2, &[], &[]).unwrap();
    assert_eq!(fx.order(), vec![v2.clone(), fx.base.clone()]);
    let back = fx.backend.rollback().unwrap();
    assert_eq!(back.checksum, fx.base);
    assert_eq!(fx.order(), vec![fx.base.clone(), v2.clone()]);
    assert_eq!(back.kernel_arguments, strings(&BOOT_KARGS));
}

fn assert_untrusted(e: &OsError, want: &str) {
    assert!(matches!(e, OsError::Untrusted { .. }), "{e:?}");
    let msg = e.to_string();
    eprintln!("refusal: {msg}");
    assert!(msg.starts_with("refusing OS commit "), "{msg}");
    assert!(msg.contains(want), "want {want:?} in {msg}");
}

/// An unsigned commit is refused with a clear reason and nothing is deployed, even when the
/// caller tries to stage it anyway.
#[test]
fn unsigned_commit_is_refused_and_nothing_deployed() {
    let fx = Fixture::new();
    let (order, dirs) = (fx.order(), fx.deploy_dirs());
    let v2 = fx.commit("2", None);
    let e = fx.backend.pull(&fx.image(&v2)).unwrap_err();
    assert_untrusted(&e, "the commit is not signed");
    assert!(fx.stage(&v2, &[], &["x=1"]).is_err(), "staging an unverified commit is refused too");
    assert_eq!((fx.order(), fx.deploy_dirs()), (order, dirs));
}

/// A signed commit bound to another ref than the osImageURL names (`ostree commit --branch`
/// binds it) is refused as untrusted, whether it has to be downloaded (libostree's pull checks
/// the binding) or is in the repository already (it was accepted there: one config was Done on
/// nodes that held the commit and Degraded on the others).
#[test]
fn a_commit_bound_to_another_ref_is_refused_downloaded_or_present() {
    let fx = Fixture::new();
    let (order, dirs) = (fx.order(), fx.deploy_dirs());
    let v2 = fx.commit("2", Some(&fx.key));
    let other_ref = |sum: &str| {
        osimage::parse(&format!("ostree+{}#aloft/testing/x86_64@{sum}", fx.http.url("repo"))).unwrap().unwrap()
    };
    let e = fx.backend.pull(&other_ref(&v2)).unwrap_err();
    assert_untrusted(&e, "not bound to \"aloft/testing/x86_64\"");
    fx.backend.pull(&fx.image(&v2)).unwrap();
    let e = fx.backend.pull(&other_ref(&v2)).unwrap_err();
    assert_untrusted(
        &e,
        &format!("it is bound to \"{REF}\" (its signed ostree.ref-binding), not to \"aloft/testing/x86_64\""),
    );
    assert!(!fx.backend.has_verified_commit(&other_ref(&v2)).unwrap(), "not a verified commit for that ref");
    assert!(fx.backend.has_verified_commit(&fx.image(&v2)).unwrap());
    assert_eq!((fx.order(), fx.deploy_dirs()), (order, dirs), "nothing deployed");
}

/// A commit signed by a key that is not in the trusted keyring is refused.
#[test]
fn commit_signed_by_another_key_is_refused() {
    let fx = Fixture::new();
    let other = GpgKey::generate(fx.dir.path(), "other").unwrap();
    let (order, dirs) = (fx.order(), fx.deploy_dirs());
    let v2 = fx.commit("2", Some(&other));
    let e = fx.backend.pull(&fx.image(&v2)).unwrap_err();
    assert_untrusted(&e, "not signed by a key in the trusted keyring");
    assert_eq!((fx.order(), fx.deploy_dirs()), (order, dirs));
}

/// Only `--keyring` is trusted: a key in libostree's global keyring directory (here
/// `$OSTREE_GPG_HOME`; on a host `/usr/share/ostree/trusted.gpg.d`) is not, so a keyring narrowed
/// after a key leaked keeps that key's commits out. The remote's own keyring holds the trusted
/// keys, and a changed `--keyring` replaces them (the old key's commits are refused too).
#[test]
fn only_the_helpers_keyring_is_trusted() {
    let fx = Fixture::new();
    let other = GpgKey::generate(fx.dir.path(), "global").unwrap();
    let global = fx.dir.path().join("global-keyrings");
    std::fs::create_dir_all(&global).unwrap();
    std::fs::copy(&other.keyring, global.join("global.gpg")).unwrap();
    let (order, dirs) = (fx.order(), fx.deploy_dirs());
    let v2 = fx.commit("2", Some(&other));
    let helper = HelperProcess::start_with_env(
        helper_bin(),
        &fx.dir.path().join("run-global"),
        &fx.sysroot,
        &fx.key.keyring,
        &[],
        &[("OSTREE_GPG_HOME", &global)],
    )
    .unwrap();
    let e = helper.client().pull(&fx.image(&v2)).unwrap_err();
    assert_untrusted(&e, "not signed by a key in the trusted keyring");
    assert_eq!((fx.order(), fx.deploy_dirs()), (order.clone(), dirs.clone()));
    // The keyring switched to the other key: its commits are trusted, the first key's no more.
    let v3 = fx.commit("3", Some(&fx.key));
    let switched =
        HelperProcess::start(helper_bin(), &fx.dir.path().join("run-switched"), &fx.sysroot, &other.keyring).unwrap();
    switched.client().pull(&fx.image(&v2)).unwrap();
    let e = switched.client().pull(&fx.image(&v3)).unwrap_err();
    assert!(matches!(e, OsError::Untrusted { .. }), "{e:?}");
    drop(helper);
}

/// Tampering on the server is caught: a commit object replaced by another (its bytes no longer
/// hash to the pinned checksum), and a valid signature copied onto a different commit.
#[test]
fn tampered_commits_are_refused() {
    let fx = Fixture::new();
    let (order, dirs) = (fx.order(), fx.deploy_dirs());
    let v2 = fx.commit("2", Some(&fx.key));
    let v3 = fx.commit("3", Some(&fx.key));
    // Serve v3's commit object under v2's name.
    std::fs::copy(fx.server.object_path(&v3, "commit"), fx.server.object_path(&v2, "commit")).unwrap();
    let e = fx.backend.pull(&fx.image(&v2)).unwrap_err();
    let msg = e.to_string();
    assert!(msg.contains(&v2) && (msg.contains("checksum") || msg.contains("Corrupted")), "{msg}");
    // An unsigned commit wearing v3's signature.
    let v4 = fx.commit("4", None);
    std::fs::copy(fx.server.object_path(&v3, "commitmeta"), fx.server.object_path(&v4, "commitmeta")).unwrap();
    let e = fx.backend.pull(&fx.image(&v4)).unwrap_err();
    assert!(matches!(e, OsError::Untrusted { .. }), "{e:?}");
    // A checksum the repository does not have.
    let missing = "0".repeat(64);
    let e = fx.backend.pull(&fx.image(&missing)).unwrap_err();
    assert!(matches!(e, OsError::Pull { .. }), "{e:?}");
    assert_eq!((fx.order(), fx.deploy_dirs()), (order, dirs));
}

/// Pre-staging pulls and verifies without deploying; the later stage needs no download.
#[test]
fn prestage_pulls_without_deploying() {
    let fx = Fixture::new();
    let v2 = fx.commit("2", Some(&fx.key));
    assert!(!fx.backend.has_verified_commit(&fx.image(&v2)).unwrap());
    fx.backend.pull(&fx.image(&v2)).unwrap();
    assert_eq!(fx.order(), vec![fx.base.clone()], "nothing deployed");
    assert!(fx.backend.has_verified_commit(&fx.image(&v2)).unwrap());
    // The server goes away: the update still stages, from the local repository.
    std::fs::rename(fx.dir.path().join("srv/repo"), fx.dir.path().join("srv/gone")).unwrap();
    assert!(fx.backend.pull(&fx.image(&v2)).unwrap().already_present);
    fx.stage(&v2, &[], &[]).unwrap();
    assert_eq!(fx.order(), vec![v2, fx.base.clone()]);
}

/// A missing trusted keyring refuses every pull (never pull unverifiable commits).
#[test]
fn missing_keyring_refuses_pulls() {
    let fx = Fixture::new();
    let v2 = fx.commit("2", Some(&fx.key));
    let other =
        HelperProcess::start(helper_bin(), &fx.dir.path().join("run2"), &fx.sysroot, &fx.dir.path().join("nope.gpg"))
            .unwrap();
    let e = other.client().pull(&fx.image(&v2)).unwrap_err();
    assert!(matches!(e, OsError::Invalid(_)), "{e:?}");
    assert!(e.to_string().contains("does not exist"), "{e}");
}

/// The parts the daemon's Verifying phase puts together after a failed health check, each on
/// real libostree and a real host directory: the check's failure carries the script's words, the
/// denylist entry keeps the commit from being retried under the same desired config (and a new
/// one clears it), and the helper's rollback makes the previous deployment the default. That the
/// phase calls them in this order on a failed check is tested end to end in
/// `tests/os_fleet.rs` (an agent against a coordinator) and VM scenario c.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_health_check_its_denylist_entry_and_the_rollback_it_takes() {
    let fx = Fixture::new();
    let v2 = fx.commit("2", Some(&fx.key));
    fx.backend.pull(&fx.image(&v2)).unwrap();
    fx.stage(&v2, &[], &[]).unwrap();

    let host = fx.dir.path().join("host");
    let checks_dir = host.join("etc/aloft/health.d");
    std::fs::create_dir_all(&checks_dir).unwrap();
    let script = checks_dir.join("50-app");
    std::fs::write(&script, "#!/bin/sh\necho app does not answer on :8080 >&2\nexit 1\n").unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let root = Root::new(&host);
    let checks = HealthChecks { root: root.clone(), required_units: vec![], timeout: Duration::from_secs(10) };
    let services = NoUnits;
    let failure = checks.run(&services).await.unwrap_err();
    assert!(failure.to_string().contains("app does not answer on :8080"), "{failure}");

    let mut list = Denylist::load(&root).unwrap();
    list.deny("rendered-worker-2", &v2, None, &failure.to_string());
    list.save(&root).unwrap();
    let back = fx.backend.rollback().unwrap();
    assert_eq!(back.checksum, fx.base);
    assert_eq!(fx.order(), vec![fx.base.clone(), v2.clone()]);
    let list = aloft_agent::os::denylist::refresh(&root, "rendered-worker-2").unwrap();
    assert!(list.find(&v2).is_some(), "not retried under the same desired config");
    let list = aloft_agent::os::denylist::refresh(&root, "rendered-worker-3").unwrap();
    assert!(list.find(&v2).is_none(), "a new desired config clears it");
}

/// Health checks here run no units.
struct NoUnits;
#[async_trait::async_trait]
impl aloft_agent::host::ServiceManager for NoUnits {
    async fn daemon_reload(&self) -> Result<(), aloft_agent::host::ServiceError> {
        Ok(())
    }
    async fn enable_units(&self, _: &[String]) -> Result<(), aloft_agent::host::ServiceError> {
        Ok(())
    }
    async fn disable_units(&self, _: &[String]) -> Result<(), aloft_agent::host::ServiceError> {
        Ok(())
    }
    async fn mask_units(&self, _: &[String]) -> Result<(), aloft_agent::host::ServiceError> {
        Ok(())
    }
    async fn unmask_units(&self, _: &[String]) -> Result<(), aloft_agent::host::ServiceError> {
        Ok(())
    }
    async fn preset_units(&self, _: &[String]) -> Result<(), aloft_agent::host::ServiceError> {
        Ok(())
    }
    async fn reload_unit(&self, _: &str) -> Result<(), aloft_agent::host::ServiceError> {
        Ok(())
    }
    async fn restart_unit(&self, _: &str) -> Result<(), aloft_agent::host::ServiceError> {
        Ok(())
    }
    async fn start_unit(&self, _: &str) -> Result<(), aloft_agent::host::ServiceError> {
        Ok(())
    }
    async fn wants(&self, _: &str) -> Result<Vec<String>, aloft_agent::host::ServiceError> {
        Ok(Vec::new())
    }
    async fn stop_unit(&self, _: &str) -> Result<(), aloft_agent::host::ServiceError> {
        Ok(())
    }
    async fn reboot(&self, _: &str) -> Result<(), aloft_agent::host::ServiceError> {
        Ok(())
    }
}
