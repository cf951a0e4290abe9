//! The OS backend on libostree (the `ostree` crate, libostree 2022.7 as in Debian 12).
//!
//! - **Remote**: one remote (default `aloft`) whose `url` follows the `osImageURL` of the config
//!   being applied, with `gpg-verify=true` and, as its own keyring (`<repo>/aloft.trustedkeys.gpg`),
//!   a copy of the trusted keyring the OS ships (`/usr/share/ostree/trusted.gpg.d/aloft.gpg` by
//!   default), which turns libostree's global keyring directory off for it. The remote is
//!   rewritten only when its URL, verification or a `gpgkeypath` differs, and the keyring only
//!   when its bytes do, so the OS's own `/etc/ostree/remotes.d/aloft.conf` is left alone when it
//!   agrees.
//! - **Pull**: exactly the pinned checksum (`override-commit-ids`), GPG verification required in
//!   the pull options too, then the signature verified again against the remote's keys before
//!   anything is deployed: a commit that was already in the repository (from another source)
//!   gets the same check as a downloaded one. Cancellable ([`aloft_api::os::Cancel`], bridged to
//!   a `GCancellable`, which libostree 2022.7 checks only as the pull's HTTP requests complete: the
//!   helper runs pulls in a worker process it can kill instead, see `server`).
//! - **Stage**: on a booted host `stage_tree` (the /etc merge and bootloader switch happen at
//!   shutdown in `ostree-finalize-staged.service`, which is started right away, see
//!   [`FINALIZE_UNIT`]); on a directory sysroot (tests, image builds)
//!   `deploy_tree` + `simple_write_deployment`, which writes the new default at once. Kernel
//!   arguments come from the merge deployment's boot entry by MCO's rule ([`aloft_api::os::kargs`]).
//! - **Rollback**: reorder the deployments so the previous one boots next, as
//!   `ostree admin rollback`/`bootc rollback` do. After the bootloader fell back to the previous
//!   deployment by itself (boot counting, see `bootcount`), the booted one is made the default,
//!   as greenboot's `rpm-ostree rollback` does then.
//!
//! libostree objects are not `Send`: every method opens and loads the sysroot on the calling
//! thread (the helper runs each request on its own thread); a load is a few milliseconds.
//!
//! This runs inside `aloft-os-helper` (root, the host's mount namespace), never in the agent.

use aloft_api::os::{
    kargs, BootCount, BootCounting, Cancel, DeploymentInfo, OsBackend, OsError, OsStatus, PullReport, StageRequest,
};
use aloft_api::osimage::OstreeImage;
use ostree::gio::{self, prelude::CancellableExt};
use ostree::glib;
use std::path::{Path, PathBuf};

/// The stateroot aloft's OS images deploy into.
pub const DEFAULT_OSNAME: &str = "aloft";
/// The remote the agent configures.
pub const DEFAULT_REMOTE: &str = "aloft";
/// The keyring the OS ships for its commits' signatures.
pub const DEFAULT_KEYRING: &str = "usr/share/ostree/trusted.gpg.d/aloft.gpg";

pub use aloft_api::os::PullProgress;

/// Where and how.
#[derive(Debug, Clone)]
pub struct OstreeConfig {
    /// The sysroot: `/` on a booted node (libostree finds `/sysroot` itself), a directory in tests.
    pub sysroot: PathBuf,
    pub osname: String,
    pub remote: String,
    /// Absolute path of the GPG keyring whose keys may sign OS commits.
    pub keyring: PathBuf,
    /// The running boot's command line: `/proc/cmdline` on a node.
    pub cmdline_path: PathBuf,
    /// GRUB's environment block, where boot attempts are counted; `None`, or no file there: the
    /// host has no boot counting.
    pub grubenv: Option<PathBuf>,
}

impl OstreeConfig {
    /// Defaults for a host whose root is `root`.
    pub fn for_root(root: &Path, sysroot: PathBuf) -> Self {
        OstreeConfig {
            grubenv: Some(sysroot.join(crate::bootcount::DEFAULT_GRUBENV)),
            sysroot,
            osname: DEFAULT_OSNAME.into(),
            remote: DEFAULT_REMOTE.into(),
            keyring: root.join(DEFAULT_KEYRING),
            cmdline_path: PathBuf::from("/proc/cmdline"),
        }
    }
}

/// The libostree backend: what the helper serves on its socket.
#[derive(Debug, Clone)]
pub struct OstreeBackend {
    cfg: OstreeConfig,
}

/// Whether `dir` holds an ostree sysroot (`ostree/repo` and `ostree/deploy`).
pub fn is_sysroot(dir: &Path) -> bool {
    dir.join("ostree/repo/config").is_file() && dir.join("ostree/deploy").is_dir()
}

/// The unit whose stop, at shutdown, finalizes a staged deployment (the /etc merge and the
/// bootloader switch).
pub const FINALIZE_UNIT: &str = "ostree-finalize-staged.service";

/// Start [`FINALIZE_UNIT`] and wait for it, right after staging.
///
/// libostree 2022.7 (Debian 12) leaves that to `ostree-finalize-staged.path`, which systemd may
/// not have acted on yet when a reboot follows the staging quickly: the shutdown then runs
/// without the finalizing unit, the staged deployment is dropped and the node boots the old one
/// again (seen in VM scenario f; OCPBUGS-51150, after which ostree 2025.2 starts the unit from
/// the staging call itself, as this does). Where the unit runs already this is a no-op. An
/// error here fails the staging: the agent must not reboot into an update that would be lost.
fn start_finalize_unit(checksum: &str) -> Result<(), OsError> {
    let out = std::process::Command::new("systemctl")
        .args(["start", "--quiet", FINALIZE_UNIT])
        .output()
        .map_err(|e| OsError::ostree(format!("running systemctl start {FINALIZE_UNIT}"), e))?;
    if out.status.success() {
        tracing::info!(unit = FINALIZE_UNIT, checksum, "the staged deployment's finalizing unit runs");
        return Ok(());
    }
    Err(OsError::ostree(
        format!(
            "starting {FINALIZE_UNIT} after staging OS commit {checksum} (a reboot without it would drop the staged deployment)"
        ),
        format!("systemctl exited with {}: {}", out.status, String::from_utf8_lossy(&out.stderr).trim()),
    ))
}

/// Drop the staged deployment (under the caller's lock): libostree keeps a staged deployment
/// only when it stays first in the list written, and otherwise removes it, its
/// `/run/ostree/staged-deployment` record and its directory (ostree has no other call for it;
/// `ostree admin undeploy 0` does the same).
fn remove_staged(sysroot: &ostree::Sysroot) -> Result<(), glib::Error> {
    sysroot.load(no_cancel())?;
    let kept: Vec<ostree::Deployment> = sysroot.deployments().into_iter().filter(|d| !d.is_staged()).collect();
    sysroot.write_deployments(&kept, no_cancel())?;
    tracing::warn!("dropped the staged deployment");
    Ok(())
}

/// Write `path` whole or not at all (a temp file beside it, synced, renamed over it).
fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let dir = path.parent().unwrap_or(Path::new("."));
    let mut tmp = tempfile_in(dir)?;
    tmp.1.write_all(bytes)?;
    tmp.1.sync_all()?;
    std::fs::rename(&tmp.0, path)?;
    Ok(())
}

/// A new file in `dir` no other writer names.
fn tempfile_in(dir: &Path) -> std::io::Result<(PathBuf, std::fs::File)> {
    for n in 0..100u32 {
        let p = dir.join(format!(".aloft-keyring.{}.{n}.tmp", std::process::id()));
        match std::fs::OpenOptions::new().write(true).create_new(true).open(&p) {
            Ok(f) => return Ok((p, f)),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e),
        }
    }
    Err(std::io::Error::other("no temporary name left"))
}

fn no_cancel() -> Option<&'static gio::Cancellable> {
    None
}

/// Holds the sysroot lock (as `ostree admin` commands take it) for a write.
struct Locked<'a>(&'a ostree::Sysroot);
impl Drop for Locked<'_> {
    fn drop(&mut self) {
        self.0.unlock();
    }
}

impl OstreeBackend {
    pub fn new(cfg: OstreeConfig) -> Self {
        OstreeBackend { cfg }
    }

    pub fn config(&self) -> &OstreeConfig {
        &self.cfg
    }

    fn open(&self) -> Result<ostree::Sysroot, OsError> {
        let sysroot = ostree::Sysroot::new(Some(&gio::File::for_path(&self.cfg.sysroot)));
        sysroot
            .load(no_cancel())
            .map_err(|e| OsError::ostree(format!("loading the ostree sysroot {}", self.cfg.sysroot.display()), e))?;
        Ok(sysroot)
    }

    fn lock<'a>(&self, sysroot: &'a ostree::Sysroot) -> Result<Locked<'a>, OsError> {
        sysroot.lock().map_err(|e| OsError::ostree("locking the ostree sysroot", e))?;
        Ok(Locked(sysroot))
    }

    fn info(&self, sysroot: &ostree::Sysroot, d: &ostree::Deployment) -> DeploymentInfo {
        let booted = sysroot.booted_deployment().is_some_and(|b| b.equal(d));
        DeploymentInfo {
            stateroot: d.osname().to_string(),
            checksum: d.csum().to_string(),
            deploy_serial: d.deployserial(),
            index: d.index(),
            origin: d.origin().and_then(|o| o.string("origin", "refspec").ok()).map(|s| s.to_string()),
            kernel_arguments: entry_kargs(d),
            booted,
            staged: d.is_staged(),
            pinned: d.is_pinned(),
        }
    }

    /// Make the remote say what `image` needs; leave it alone when it already does.
    ///
    /// The trusted keys are the remote's own keyring (`<repo>/<remote>.trustedkeys.gpg`, a copy
    /// of `--keyring`), not named by `gpgkeypath`: libostree trusts every keyring in its global
    /// directory (`/usr/share/ostree/trusted.gpg.d`, or `$OSTREE_GPG_HOME`) besides a remote's
    /// `gpgkeypath`, and stops only for a remote with a keyring of its own. So a `--keyring`
    /// narrowed after a key leaked still let that key's commits in. A keyring that differs from
    /// `--keyring` is written again whole, so a key taken out of it is distrusted too.
    fn ensure_remote(&self, repo: &ostree::Repo, image: &OstreeImage) -> Result<(), OsError> {
        let url = image.repo_url();
        let keyring = self.cfg.keyring.to_string_lossy().to_string();
        let keys = std::fs::read(&self.cfg.keyring).map_err(|e| {
            let what = match e.kind() {
                std::io::ErrorKind::NotFound => "does not exist".to_string(),
                _ => format!("cannot be read ({e})"),
            };
            OsError::Invalid(format!(
                "the trusted keyring {keyring} {what}: OS commits cannot be verified, so none is pulled"
            ))
        })?;
        if keys.is_empty() {
            return Err(OsError::Invalid(format!(
                "the trusted keyring {keyring} is empty: OS commits cannot be verified, so none is pulled"
            )));
        }
        let name = self.cfg.remote.as_str();
        let own = gio::prelude::FileExt::path(&repo.path()).map(|dir| dir.join(format!("{name}.trustedkeys.gpg")));
        let Some(own) = own else {
            return Err(OsError::Invalid(format!("the ostree repository of remote {name} has no local path")));
        };
        let exists = repo.remote_list().iter().any(|r| r.as_str() == name);
        let same_url = exists && repo.remote_get_url(name).map(|u| u.as_str() == url).unwrap_or(false);
        let same_keys = std::fs::read(&own).is_ok_and(|k| k == keys);
        let remote_ok = exists && same_url && repo.remote_get_gpg_verify(name).unwrap_or(false) && {
            let named = repo.remote_list_option(name, "gpgkeypath").map(|v| !v.is_empty()).unwrap_or(false);
            !named
        };
        if remote_ok && same_keys {
            return Ok(());
        }
        if remote_ok {
            // Only the keys differ: the remote and its other options (a private CA's
            // `tls-ca-path`, a `proxy`) stay as they are.
            write_atomically(&own, &keys).map_err(|e| {
                OsError::Invalid(format!("cannot write remote {name}'s keyring {}: {e}", own.display()))
            })?;
            tracing::info!(remote = name, keyring = %keyring, "ostree remote's keyring written");
            return Ok(());
        }
        // A remote the OS shipped verifying its summary keeps doing so at its own URL (a plain
        // `ostree admin upgrade` follows refs the summary lists); pointed at another URL (a
        // mirror) or made here, it pulls commits by checksum, whose own signatures are checked,
        // and needs no signed summary.
        let verify_summary = same_url && repo.remote_get_gpg_verify_summary(name).unwrap_or(false);
        let opts = glib::VariantDict::new(None);
        opts.insert("gpg-verify", true);
        opts.insert("gpg-verify-summary", verify_summary);
        let change = if exists { ostree::RepoRemoteChange::Replace } else { ostree::RepoRemoteChange::Add };
        repo.remote_change(None::<&gio::File>, change, name, Some(&url), Some(&opts.end()), no_cancel())
            .map_err(|e| OsError::ostree(format!("configuring ostree remote {name} for {url}"), e))?;
        if !same_keys {
            write_atomically(&own, &keys).map_err(|e| {
                OsError::Invalid(format!("cannot write remote {name}'s keyring {}: {e}", own.display()))
            })?;
        }
        tracing::info!(remote = name, %url, keyring = %keyring, "ostree remote configured");
        Ok(())
    }

    /// The commit is complete in `repo` (not a partial pull).
    fn complete(repo: &ostree::Repo, checksum: &str) -> bool {
        match repo.load_commit(checksum) {
            Ok((_, state)) => !state.contains(ostree::RepoCommitState::PARTIAL),
            Err(_) => false,
        }
    }

    /// The commit has at least one valid signature from the remote's trusted keys.
    fn verify(&self, repo: &ostree::Repo, image: &OstreeImage) -> Result<(), OsError> {
        let untrusted =
            |reason: String| OsError::Untrusted { checksum: image.checksum.clone(), url: image.repo_url(), reason };
        let result = repo
            .verify_commit_for_remote(&image.checksum, &self.cfg.remote, no_cancel())
            .map_err(|e| untrusted(explain_gpg(&e.to_string(), &self.cfg.keyring)))?;
        if result.count_valid() == 0 {
            return Err(untrusted(format!(
                "none of its {} signature(s) is valid and from a key in {}",
                result.count_all(),
                self.cfg.keyring.display()
            )));
        }
        match Self::ref_bindings(repo, &image.checksum) {
            Some(refs) if !refs.contains(&image.ref_name) => Err(untrusted(wrong_ref(&image.ref_name, &refs))),
            _ => Ok(()),
        }
    }

    /// The refs a commit is bound to (its signed `ostree.ref-binding` metadata), when it has
    /// any. libostree's pull refuses a commit bound to other refs than the one asked for (what
    /// the binding exists for: a signed commit of another branch, or an old one, served under
    /// this ref); a commit already in the repository is checked here the same way, so that one
    /// config gives one answer whatever a node's repository holds.
    fn ref_bindings(repo: &ostree::Repo, checksum: &str) -> Option<Vec<String>> {
        let (commit, _) = repo.load_commit(checksum).ok()?;
        let metadata = glib::VariantDict::new(Some(&commit.child_value(0)));
        metadata.lookup_value("ostree.ref-binding", Some(glib::VariantTy::STRING_ARRAY))?.get::<Vec<String>>()
    }

    /// The deployment the next boot starts (the staged one, else the first) carries
    /// [`crate::bootcount::DISARMS_MARKER`]; else arming is refused, naming the commit.
    fn next_boot_disarms(&self) -> Result<(), OsError> {
        let sysroot = self.open()?;
        let all = sysroot.deployments();
        let next = all
            .iter()
            .find(|d| d.is_staged())
            .or_else(|| all.first())
            .ok_or_else(|| OsError::Invalid("no deployment to count boots for".into()))?;
        let dir = sysroot.deployment_directory(next);
        let marker = gio::prelude::FileExt::path(&dir).map(|p| p.join(crate::bootcount::DISARMS_MARKER));
        if marker.as_deref().is_some_and(Path::exists) {
            return Ok(());
        }
        Err(OsError::Invalid(format!(
            "boot counting not armed: OS commit {} lacks /{} (its agent would never disarm it, and the \
             bootloader would fall back after a few reboots)",
            next.csum(),
            crate::bootcount::DISARMS_MARKER
        )))
    }

    /// Write the deployments `all` (none staged) with `target` first, under the caller's lock;
    /// returns the new default. `what` names `target` in the error.
    fn make_default(
        &self,
        sysroot: &ostree::Sysroot,
        all: Vec<ostree::Deployment>,
        target: &ostree::Deployment,
        what: &str,
    ) -> Result<DeploymentInfo, OsError> {
        // The same objects, reordered: libostree finds the booted deployment in the new order by
        // identity and refuses an order without it ("Attempting to remove booted deployment").
        // `Deployment::clone` is ostree_deployment_clone, a new object, hence `Clone::clone`.
        let mut order = vec![Clone::clone(target)];
        order.extend(all.into_iter().filter(|d| !d.equal(target)));
        sysroot
            .write_deployments(&order, no_cancel())
            .map_err(|e| OsError::ostree(format!("making {what} {} the default", target.csum()), e))?;
        sysroot.load(no_cancel()).map_err(|e| OsError::ostree("reloading the ostree sysroot", e))?;
        let first = sysroot
            .deployments()
            .into_iter()
            .next()
            .ok_or_else(|| OsError::Invalid(format!("no deployments after making {what} the default")))?;
        Ok(self.info(sysroot, &first))
    }

    /// The bootloader fell back (`boot_counter=-1`) and the deployment it gave up on is still
    /// ostree's default: disarmed now, the next reboot would start it again, uncounted.
    fn fallback_not_kept(&self) -> Result<bool, OsError> {
        if !crate::bootcount::read(self.cfg.grubenv.as_deref()).is_some_and(|c| c.fell_back()) {
            return Ok(false);
        }
        let sysroot = self.open()?;
        let Some(booted) = sysroot.booted_deployment() else { return Ok(false) };
        Ok(sysroot.deployments().iter().find(|d| !d.is_staged()).is_some_and(|d| !d.equal(&booted)))
    }

    fn deployments(&self, sysroot: &ostree::Sysroot) -> Vec<ostree::Deployment> {
        sysroot.deployments().into_iter().filter(|d| d.osname().as_str() == self.cfg.osname).collect()
    }
}

/// The kernel arguments of a deployment's boot entry, without libostree's own `ostree=` (it
/// names the deployment and libostree rewrites it for every new one).
fn entry_kargs(d: &ostree::Deployment) -> Vec<String> {
    d.bootconfig()
        .and_then(|b| b.get("options"))
        .map(|o| kargs::split(o.as_str()))
        .unwrap_or_default()
        .into_iter()
        .filter(|a| !a.starts_with("ostree="))
        .collect()
}

/// Why a commit bound to `bound` is refused for `wanted`.
fn wrong_ref(wanted: &str, bound: &[String]) -> String {
    format!(
        "it is bound to {} (its signed ostree.ref-binding), not to {wanted:?}, the ref the osImageURL names: fix the ref after '#'",
        bound.iter().map(|r| format!("{r:?}")).collect::<Vec<_>>().join(", ")
    )
}

/// libostree's GPG errors, said plainly (the original text follows, on one line: a reason is
/// an annotation that tables print in a cell, and gpg's text has two; without libostree's hint
/// to set `gpg-verify=false`, which the helper sets back before every pull and stage).
fn explain_gpg(message: &str, keyring: &Path) -> String {
    let original = message
        .replace(" (use gpg-verify=false in remote config to disable)", "")
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join("; ");
    let message = original.as_str();
    let why = if message.contains("no signatures found") {
        "the commit is not signed".to_string()
    } else if message.contains("none are in trusted keyring") || message.contains("public key not found") {
        format!("it is not signed by a key in the trusted keyring {}", keyring.display())
    } else {
        "its signature does not verify".to_string()
    };
    format!("{why} ({message})")
}

impl OstreeBackend {
    /// [`OsBackend::pull_cancellable`] that tells `progress` what the download has done each time
    /// it moves (libostree's pull progress, at most about once a second): the helper's stall
    /// guard reads it, since libostree 2022.7 has no timeout for a mirror that stops sending.
    pub fn pull_observed(
        &self,
        image: &OstreeImage,
        cancel: &Cancel,
        progress: impl Fn(&PullProgress) + 'static,
    ) -> Result<PullReport, OsError> {
        let cancelled = || OsError::Cancelled { operation: format!("pulling OS commit {}", image.checksum) };
        if cancel.is_cancelled() {
            return Err(cancelled());
        }
        let sysroot = self.open()?;
        let repo = sysroot.repo();
        self.ensure_remote(&repo, image)?;
        let already_present = Self::complete(&repo, &image.checksum);
        if !already_present {
            let started = std::time::Instant::now();
            let opts = glib::VariantDict::new(None);
            opts.insert("refs", vec![image.ref_name.as_str()]);
            opts.insert("override-commit-ids", vec![image.checksum.as_str()]);
            opts.insert("gpg-verify", true);
            let gcancel = gio::Cancellable::new();
            let hook = gcancel.clone();
            cancel.on_cancel(move || hook.cancel());
            // libostree calls this from the pull's own main loop, when the counts moved since
            // its last call (a tick a second at most) and once at the end.
            let observer = ostree::AsyncProgress::new();
            observer.connect_changed(move |p| {
                progress(&PullProgress {
                    bytes: p.uint64("bytes-transferred"),
                    fetched: p.uint("fetched"),
                    requested: p.uint("requested"),
                })
            });
            let result = repo.pull_with_options(&self.cfg.remote, &opts.end(), Some(&observer), Some(&gcancel));
            observer.finish();
            result.map_err(|e| {
                let message = e.to_string();
                if e.matches(gio::IOErrorEnum::Cancelled) || cancel.is_cancelled() {
                    tracing::info!(checksum = %image.checksum, elapsed_ms = started.elapsed().as_millis() as u64, "pull cancelled");
                    cancelled()
                } else if message.contains("ref binding") {
                    // The config names the wrong ref: no retry fixes that (as for a signature).
                    OsError::Untrusted {
                        checksum: image.checksum.clone(),
                        url: image.repo_url(),
                        reason: format!(
                            "it is not bound to {:?}, the ref the osImageURL names: fix the ref after '#' ({message})",
                            image.ref_name
                        ),
                    }
                } else if message.contains("GPG") || message.contains("signature") {
                    OsError::Untrusted {
                        checksum: image.checksum.clone(),
                        url: image.repo_url(),
                        reason: explain_gpg(&message, &self.cfg.keyring),
                    }
                } else {
                    OsError::Pull { checksum: image.checksum.clone(), url: image.repo_url(), message }
                }
            })?;
            tracing::info!(checksum = %image.checksum, url = %image.repo_url(), elapsed_ms = started.elapsed().as_millis() as u64, "pulled OS commit");
        }
        self.verify(&repo, image)?;
        Ok(PullReport { already_present })
    }
}

impl OsBackend for OstreeBackend {
    fn status(&self) -> Result<OsStatus, OsError> {
        let sysroot = self.open()?;
        let all: Vec<DeploymentInfo> = sysroot.deployments().iter().map(|d| self.info(&sysroot, d)).collect();
        let booted = all.iter().find(|d| d.booted).cloned();
        let staged = all.iter().find(|d| d.staged).cloned();
        // The rollback is the first one that is neither booted nor staged, and (on a directory
        // sysroot, where nothing is booted) not the default either.
        let rollback = all
            .iter()
            .find(|d| !d.booted && !d.staged && (booted.is_some() || d.index != 0))
            .filter(|d| d.stateroot == self.cfg.osname)
            .cloned();
        // The first deployment that is not staged boots next when nothing is staged.
        let rollback_queued = booted.is_some() && all.iter().find(|d| !d.staged).is_some_and(|d| !d.booted);
        // The download under way is the server's to add: the backend does not know of it.
        let boot_counting = crate::bootcount::read(self.cfg.grubenv.as_deref());
        Ok(OsStatus { booted, staged, rollback, rollback_queued, deployments: all, download: None, boot_counting })
    }

    fn has_verified_commit(&self, image: &OstreeImage) -> Result<bool, OsError> {
        let sysroot = self.open()?;
        let repo = sysroot.repo();
        if !Self::complete(&repo, &image.checksum) {
            return Ok(false);
        }
        self.ensure_remote(&repo, image)?;
        Ok(self.verify(&repo, image).is_ok())
    }

    fn pull_cancellable(&self, image: &OstreeImage, cancel: &Cancel) -> Result<PullReport, OsError> {
        self.pull_observed(image, cancel, |_| {})
    }

    fn stage(&self, req: &StageRequest) -> Result<DeploymentInfo, OsError> {
        let sysroot = self.open()?;
        let _lock = self.lock(&sysroot)?;
        // Reload under the lock: another writer may have changed the deployments.
        sysroot.load(no_cancel()).map_err(|e| OsError::ostree("reloading the ostree sysroot", e))?;
        let repo = sysroot.repo();
        let osname = self.cfg.osname.as_str();
        let merge = sysroot.merge_deployment(Some(osname));
        let (checksum, origin) = match &req.image {
            Some(image) => {
                // Never deploy what was not verified, whoever put it in the repository.
                if !Self::complete(&repo, &image.checksum) {
                    return Err(OsError::Invalid(format!(
                        "OS commit {} is not in the repository: pull it first",
                        image.checksum
                    )));
                }
                self.ensure_remote(&repo, image)?;
                self.verify(&repo, image)?;
                let origin = sysroot.origin_new_from_refspec(&format!("{}:{}", self.cfg.remote, image.ref_name));
                // `ostree admin upgrade` must not move a pinned deployment to the ref's tip.
                origin.set_string("origin", "override-commit", &image.checksum);
                (image.checksum.clone(), origin)
            }
            None => {
                let m = merge.as_ref().ok_or_else(|| {
                    OsError::Invalid(format!("no deployment of stateroot {osname} to change the kernel arguments of"))
                })?;
                let origin =
                    m.origin().ok_or_else(|| OsError::Invalid(format!("deployment {} has no origin", m.csum())))?;
                (m.csum().to_string(), origin)
            }
        };
        let current = merge.as_ref().map(entry_kargs).unwrap_or_default();
        let new_kargs = kargs::compute(&current, &req.old_kargs, &req.new_kargs);
        let argv: Vec<&str> = new_kargs.iter().map(String::as_str).collect();
        let opts = ostree::SysrootDeployTreeOpts { override_kernel_argv: Some(&argv), ..Default::default() };
        let deployment = if sysroot.is_booted() {
            let d = sysroot
                .stage_tree_with_options(Some(osname), &checksum, Some(&origin), merge.as_ref(), &opts, no_cancel())
                .map_err(|e| OsError::ostree(format!("staging OS commit {checksum}"), e))?;
            if let Err(e) = start_finalize_unit(&checksum) {
                // The agent undoes the update on this error: the deployment must not stay staged,
                // where a later start of the unit (its path unit, on a host that keeps it) would
                // finalize it and a reboot would boot the update the node reported as failed.
                return Err(match remove_staged(&sysroot) {
                    Ok(()) => e,
                    Err(drop) => OsError::ostree(format!("{e}; dropping the staged deployment"), drop),
                });
            }
            d
        } else {
            let d = sysroot
                .deploy_tree_with_options(
                    Some(osname),
                    &checksum,
                    Some(&origin),
                    merge.as_ref(),
                    Some(&opts),
                    no_cancel(),
                )
                .map_err(|e| OsError::ostree(format!("deploying OS commit {checksum}"), e))?;
            sysroot
                .simple_write_deployment(
                    Some(osname),
                    &d,
                    merge.as_ref(),
                    ostree::SysrootSimpleWriteDeploymentFlags::NONE,
                    no_cancel(),
                )
                .map_err(|e| OsError::ostree(format!("writing the deployment of OS commit {checksum}"), e))?;
            d
        };
        sysroot.load(no_cancel()).map_err(|e| OsError::ostree("reloading the ostree sysroot", e))?;
        let info = sysroot
            .deployments()
            .into_iter()
            .find(|d| d.csum() == deployment.csum() && d.deployserial() == deployment.deployserial())
            .map(|d| self.info(&sysroot, &d))
            .unwrap_or_else(|| self.info(&sysroot, &deployment));
        tracing::info!(checksum = %info.checksum, staged = info.staged, kargs = %new_kargs.join(" "), "OS deployment written");
        Ok(info)
    }

    fn rollback(&self) -> Result<DeploymentInfo, OsError> {
        let sysroot = self.open()?;
        let _lock = self.lock(&sysroot)?;
        sysroot.load(no_cancel()).map_err(|e| OsError::ostree("reloading the ostree sysroot", e))?;
        let booted = sysroot.booted_deployment();
        // A staged deployment is dropped: rolling back means not moving forward either.
        let all: Vec<ostree::Deployment> = sysroot.deployments().into_iter().filter(|d| !d.is_staged()).collect();
        let ours = self.deployments(&sysroot);
        let target = match &booted {
            Some(b) => ours.iter().find(|d| !d.is_staged() && !d.equal(b)),
            None => ours.iter().filter(|d| !d.is_staged()).nth(1),
        }
        .cloned()
        .ok_or_else(|| {
            OsError::Invalid(format!("no previous deployment of stateroot {} to roll back to", self.cfg.osname))
        })?;
        let first = self.make_default(&sysroot, all, &target, "deployment")?;
        tracing::warn!(checksum = %first.checksum, "rolled back: the previous deployment boots next");
        Ok(first)
    }

    fn drop_staged(&self) -> Result<Option<DeploymentInfo>, OsError> {
        let sysroot = self.open()?;
        // Under the lock, read again: a stage that held it has finished, and is what is dropped.
        let _lock = self.lock(&sysroot)?;
        sysroot.load(no_cancel()).map_err(|e| OsError::ostree("reloading the ostree sysroot", e))?;
        let Some(staged) = sysroot.deployments().into_iter().find(|d| d.is_staged()) else {
            return Ok(None);
        };
        let info = self.info(&sysroot, &staged);
        remove_staged(&sysroot).map_err(|e| {
            OsError::ostree(format!("dropping the staged deployment of OS commit {}", info.checksum), e)
        })?;
        Ok(Some(info))
    }

    fn booted_cmdline(&self) -> Result<String, OsError> {
        std::fs::read_to_string(&self.cfg.cmdline_path)
            .map_err(|e| OsError::ostree(format!("reading {}", self.cfg.cmdline_path.display()), e))
    }

    fn boot_counter(&self, change: BootCount) -> Result<Option<BootCounting>, OsError> {
        if matches!(change, BootCount::Arm(_)) && self.cfg.grubenv.as_deref().is_some_and(Path::exists) {
            self.next_boot_disarms()?;
        }
        if change == BootCount::Disarm && self.fallback_not_kept()? {
            tracing::warn!("not disarmed: the deployment the bootloader fell back from is still the default");
            return Ok(crate::bootcount::read(self.cfg.grubenv.as_deref()));
        }
        crate::bootcount::change(self.cfg.grubenv.as_deref(), change)
    }

    fn keep_booted(&self) -> Result<DeploymentInfo, OsError> {
        let sysroot = self.open()?;
        let _lock = self.lock(&sysroot)?;
        sysroot.load(no_cancel()).map_err(|e| OsError::ostree("reloading the ostree sysroot", e))?;
        let booted = sysroot.booted_deployment().ok_or_else(|| {
            OsError::Invalid("no deployment is booted (not an ostree-booted host): nothing to keep".into())
        })?;
        let all: Vec<ostree::Deployment> = sysroot.deployments().into_iter().filter(|d| !d.is_staged()).collect();
        if all.first().is_some_and(|d| d.equal(&booted)) {
            return Ok(self.info(&sysroot, &booted));
        }
        let first = self.make_default(&sysroot, all, &booted, "the booted deployment")?;
        tracing::warn!(checksum = %first.checksum, "the booted deployment boots next again (the bootloader fell back to it)");
        Ok(first)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A refusal is one line (gpg says two) and does not pass on libostree's advice to turn
    /// verification off, which the helper undoes.
    #[test]
    fn gpg_refusals_are_one_line_without_libostrees_hint() {
        let keyring = Path::new("/k.gpg");
        let unsigned = explain_gpg(
            "Commit 70: GPG verification enabled, but no signatures found (use gpg-verify=false in remote config to disable)",
            keyring,
        );
        assert_eq!(unsigned, "the commit is not signed (Commit 70: GPG verification enabled, but no signatures found)");
        let untrusted = explain_gpg(
            "Signature made Mon 30 Nov using RSA key ID 67\nCan't check signature: public key not found\n",
            keyring,
        );
        assert!(!untrusted.contains('\n'), "{untrusted}");
        assert!(untrusted.ends_with("key ID 67; Can't check signature: public key not found)"), "{untrusted}");
        assert!(untrusted.starts_with("it is not signed by a key in the trusted keyring /k.gpg"), "{untrusted}");
    }
}
