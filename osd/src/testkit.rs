//! Real ostree fixtures for tests and the OS benchmark (feature `test-support`): a throwaway GPG
//! key, an archive repository with small bootable commits built on the fly, a static HTTP server
//! on loopback serving it, a directory sysroot with a first deployment, and the OS helper
//! process serving that sysroot on a socket in a temp directory ([`HelperProcess`]).
//!
//! Fixtures use the `ostree` and `gpg` command-line tools (what an image build uses); the code
//! under test uses libostree through [`super::ostree::OstreeBackend`], inside `aloft-os-helper`.

use anyhow::{bail, Context, Result};
use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The kernel version of the fake kernel in test commits.
pub const KVER: &str = "6.1.0-aloft-test";
/// The ref test commits go to (the images engineer's ref).
pub const REF: &str = "aloft/stable/x86_64";

fn run(cmd: &mut Command) -> Result<String> {
    let out = cmd.output().with_context(|| format!("running {cmd:?}"))?;
    if !out.status.success() {
        bail!("{cmd:?} failed: {}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// A throwaway GPG key in its own GNUPGHOME.
pub struct GpgKey {
    pub home: PathBuf,
    pub key_id: String,
    /// The public key, exported (binary): what a node's trusted keyring holds.
    pub keyring: PathBuf,
}

impl GpgKey {
    /// Generate an ed25519 signing key under `dir` (no passphrase).
    pub fn generate(dir: &Path, name: &str) -> Result<GpgKey> {
        let home = dir.join(format!("gnupg-{name}"));
        std::fs::create_dir_all(&home)?;
        std::fs::set_permissions(&home, std::os::unix::fs::PermissionsExt::from_mode(0o700))?;
        let gpg = || {
            let mut c = Command::new("gpg");
            c.env("GNUPGHOME", &home).args(["--batch", "--quiet", "--pinentry-mode", "loopback", "--passphrase", ""]);
            c
        };
        run(gpg().args([
            "--quick-gen-key",
            &format!("aloft test {name} <{name}@aloft.invalid>"),
            "ed25519",
            "sign",
            "never",
        ]))?;
        let listing = run(gpg().args(["--with-colons", "--list-secret-keys"]))?;
        let key_id = listing
            .lines()
            .find_map(|l| l.strip_prefix("fpr:").map(|r| r.trim_matches(':').to_string()))
            .context("no fingerprint in gpg's listing")?;
        let keyring = dir.join(format!("{name}.gpg"));
        let exported = gpg().args(["--export", &key_id]).output()?;
        std::fs::write(&keyring, exported.stdout)?;
        Ok(GpgKey { home, key_id, keyring })
    }
}

/// An archive repository, as the image build publishes it.
pub struct ServerRepo {
    pub path: PathBuf,
}

impl ServerRepo {
    pub fn create(path: &Path) -> Result<ServerRepo> {
        std::fs::create_dir_all(path)?;
        run(Command::new("ostree").arg(format!("--repo={}", path.display())).args(["init", "--mode=archive"]))?;
        Ok(ServerRepo { path: path.to_path_buf() })
    }

    /// Commit `tree` to `branch`, signed by `key` when given; returns the checksum.
    pub fn commit(&self, tree: &Path, branch: &str, subject: &str, key: Option<&GpgKey>) -> Result<String> {
        let mut c = Command::new("ostree");
        c.arg(format!("--repo={}", self.path.display()))
            .args(["commit", "--branch", branch, "--subject", subject, "--owner-uid=0", "--owner-gid=0"])
            .arg(format!("--tree=dir={}", tree.display()));
        if let Some(k) = key {
            c.arg(format!("--gpg-sign={}", k.key_id)).arg(format!("--gpg-homedir={}", k.home.display()));
        }
        let sum = run(&mut c)?;
        run(Command::new("ostree").arg(format!("--repo={}", self.path.display())).args(["summary", "-u"]))?;
        Ok(sum)
    }

    /// Path of an object file of this archive repository.
    pub fn object_path(&self, checksum: &str, kind: &str) -> PathBuf {
        self.path.join("objects").join(&checksum[..2]).join(format!("{}.{kind}", &checksum[2..]))
    }
}

/// A minimal bootable OS tree: a fake kernel and initramfs where libostree looks for them,
/// `/usr/etc`, and `files` small files under /usr/share/aloft-test (the bulk of an update).
pub fn write_tree(dir: &Path, version: &str, files: usize) -> Result<()> {
    let modules = dir.join("usr/lib/modules").join(KVER);
    std::fs::create_dir_all(&modules)?;
    std::fs::write(modules.join("vmlinuz"), format!("fake kernel {KVER}\n"))?;
    std::fs::write(modules.join("initramfs.img"), format!("fake initramfs {KVER}\n"))?;
    std::fs::create_dir_all(dir.join("usr/etc"))?;
    std::fs::write(dir.join("usr/etc/os-release"), format!("ID=aloft\nVERSION_ID={version}\n"))?;
    std::fs::create_dir_all(dir.join("usr/bin"))?;
    std::fs::write(dir.join("usr/bin/aloft-version"), format!("#!/bin/sh\necho {version}\n"))?;
    // An aloft OS: its agent disarms the bootloader's boot counting.
    std::fs::create_dir_all(dir.join("usr/lib/aloft"))?;
    std::fs::write(dir.join(crate::bootcount::DISARMS_MARKER), "1\n")?;
    let share = dir.join("usr/share/aloft-test");
    std::fs::create_dir_all(&share)?;
    for i in 0..files {
        std::fs::write(share.join(format!("f{i:05}")), format!("file {i} of the test OS {}\n", "x".repeat(i % 4096)))?;
    }
    Ok(())
}

/// A static HTTP/1.1 server on 127.0.0.1 serving a directory (keep-alive, GET and HEAD), as a
/// plain web server serves an archive repository. Runs until the process exits.
pub struct StaticServer {
    pub port: u16,
}

impl StaticServer {
    pub fn start(dir: &Path) -> Result<StaticServer> {
        Self::start_gated(dir, None)
    }

    /// [`Self::start`] whose answers under an `objects/` directory wait while `gate` is shut: a download that
    /// stays in flight for as long as a test needs, as on a slow link.
    pub fn start_gated(dir: &Path, gate: Option<Gate>) -> Result<StaticServer> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let port = listener.local_addr()?.port();
        let dir = dir.to_path_buf();
        std::thread::spawn(move || {
            for conn in listener.incoming().flatten() {
                let dir = dir.clone();
                let gate = gate.clone();
                std::thread::spawn(move || {
                    let _ = serve_conn(conn, &dir, gate.as_ref());
                });
            }
        });
        Ok(StaticServer { port })
    }

    /// `http://127.0.0.1:PORT/<path>`.
    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}/{}", self.port, path.trim_start_matches('/'))
    }
}

/// Holds a [`StaticServer`]'s object downloads while shut; counts the requests it held.
#[derive(Clone, Default)]
pub struct Gate(std::sync::Arc<(std::sync::Mutex<GateState>, std::sync::Condvar)>);

#[derive(Default)]
struct GateState {
    open: bool,
    held: usize,
    /// While shut, let one request through every this long (a slow link that still moves).
    trickle: Option<Duration>,
    next: Option<std::time::Instant>,
}

impl Gate {
    /// A shut gate.
    pub fn shut() -> Gate {
        Gate::default()
    }

    /// A gate that lets one request through every `interval` until opened: a mirror that is
    /// slow but keeps sending.
    pub fn trickle(interval: Duration) -> Gate {
        let gate = Gate::default();
        gate.0 .0.lock().unwrap_or_else(|p| p.into_inner()).trickle = Some(interval);
        gate
    }

    /// Let every held request and all later ones through.
    pub fn open(&self) {
        let (state, cv) = &*self.0;
        state.lock().unwrap_or_else(|p| p.into_inner()).open = true;
        cv.notify_all();
    }

    /// Wait until at least one request is being held; false after `timeout`.
    pub fn wait_held(&self, timeout: Duration) -> bool {
        let (state, cv) = &*self.0;
        let guard = state.lock().unwrap_or_else(|p| p.into_inner());
        let (guard, _) = cv.wait_timeout_while(guard, timeout, |s| s.held == 0).unwrap_or_else(|p| p.into_inner());
        guard.held > 0
    }

    /// How many requests were held so far.
    pub fn held(&self) -> usize {
        self.0 .0.lock().unwrap_or_else(|p| p.into_inner()).held
    }

    fn pass(&self) {
        let (state, cv) = &*self.0;
        let mut s = state.lock().unwrap_or_else(|p| p.into_inner());
        if s.open {
            return;
        }
        s.held += 1;
        cv.notify_all();
        while !s.open {
            let Some(interval) = s.trickle else {
                s = cv.wait(s).unwrap_or_else(|p| p.into_inner());
                continue;
            };
            let now = std::time::Instant::now();
            let at = s.next.unwrap_or(now);
            if now >= at {
                s.next = Some(now + interval);
                return;
            }
            s = cv.wait_timeout(s, at - now).unwrap_or_else(|p| p.into_inner()).0;
        }
    }
}

fn serve_conn(conn: TcpStream, dir: &Path, gate: Option<&Gate>) -> std::io::Result<()> {
    conn.set_nodelay(true)?;
    let mut reader = BufReader::new(conn.try_clone()?);
    let mut out = conn;
    loop {
        let mut request = String::new();
        if reader.read_line(&mut request)? == 0 {
            return Ok(());
        }
        let mut close = false;
        loop {
            let mut h = String::new();
            if reader.read_line(&mut h)? == 0 {
                return Ok(());
            }
            if h.trim().is_empty() {
                break;
            }
            if h.to_ascii_lowercase().starts_with("connection:") && h.to_ascii_lowercase().contains("close") {
                close = true;
            }
        }
        let mut parts = request.split_whitespace();
        let (method, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or("/"));
        let rel = target.split('?').next().unwrap_or("").trim_start_matches('/');
        if let Some(gate) = gate.filter(|_| rel.split('/').any(|seg| seg == "objects")) {
            gate.pass();
        }
        let body = if rel.split('/').any(|s| s == "..") { None } else { std::fs::read(dir.join(rel)).ok() };
        match body {
            Some(b) => {
                write!(
                    out,
                    "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nContent-Type: application/octet-stream\r\n\r\n",
                    b.len()
                )?;
                if method != "HEAD" {
                    out.write_all(&b)?;
                }
            }
            None => write!(out, "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")?,
        }
        out.flush()?;
        if close {
            return Ok(());
        }
    }
}

/// A directory sysroot with stateroot `aloft` and a first deployment of `checksum` (from
/// `server`), booted with `kargs`, as an image build leaves a disk.
pub fn init_sysroot(sysroot: &Path, server: &ServerRepo, checksum: &str, kargs: &[&str]) -> Result<()> {
    std::fs::create_dir_all(sysroot)?;
    let s = format!("--sysroot={}", sysroot.display());
    run(Command::new("ostree").args(["admin", "init-fs"]).arg(sysroot))?;
    run(Command::new("ostree").args(["admin", "os-init", "aloft", &s]))?;
    let repo = format!("--repo={}", sysroot.join("ostree/repo").display());
    run(Command::new("ostree").args([repo.as_str(), "pull-local"]).arg(&server.path).arg(checksum))?;
    let mut deploy = Command::new("ostree");
    deploy.args(["admin", "deploy", &s, "--os=aloft"]);
    for k in kargs {
        deploy.arg(format!("--karg={k}"));
    }
    run(deploy.arg(checksum))?;
    Ok(())
}

/// `ostree admin status`-like order of a directory sysroot: checksums, default first.
pub fn deployment_order(sysroot: &Path) -> Result<Vec<String>> {
    let s = ostree::Sysroot::new(Some(&ostree::gio::File::for_path(sysroot)));
    s.load(None::<&ostree::gio::Cancellable>)?;
    Ok(s.deployments().iter().map(|d| d.csum().to_string()).collect())
}

/// `aloft-os-helper --listen DIR/os-helper.sock` serving a sysroot, as the tests and the
/// benchmark run it (a node gets it from systemd instead). Killed when dropped.
pub struct HelperProcess {
    child: Option<Child>,
    /// Where it listens.
    pub socket: PathBuf,
    /// Its stderr (the helper's log).
    pub log: PathBuf,
}

impl HelperProcess {
    /// Start the helper binary `bin` on `sysroot`, trusting `keyring`, listening in `dir`; returns
    /// once it accepts connections.
    pub fn start(bin: &Path, dir: &Path, sysroot: &Path, keyring: &Path) -> Result<HelperProcess> {
        Self::start_with(bin, dir, sysroot, keyring, &[])
    }

    /// [`Self::start`] with more flags.
    pub fn start_with(bin: &Path, dir: &Path, sysroot: &Path, keyring: &Path, extra: &[&str]) -> Result<HelperProcess> {
        Self::start_with_env(bin, dir, sysroot, keyring, extra, &[])
    }

    /// [`Self::start_with`] with more environment (e.g. `OSTREE_GPG_HOME`, libostree's global
    /// keyring directory).
    pub fn start_with_env(
        bin: &Path,
        dir: &Path,
        sysroot: &Path,
        keyring: &Path,
        extra: &[&str],
        env: &[(&str, &Path)],
    ) -> Result<HelperProcess> {
        std::fs::create_dir_all(dir)?;
        let socket = dir.join("os-helper.sock");
        let log = dir.join("os-helper.log");
        let stderr = std::fs::OpenOptions::new().create(true).append(true).open(&log)?;
        let child = Command::new(bin)
            .arg("--sysroot")
            .arg(sysroot)
            .arg("--keyring")
            .arg(keyring)
            .arg("--listen")
            .arg(&socket)
            .args(extra)
            .envs(env.iter().map(|(k, v)| (*k, *v)))
            .env("ALOFT_LOG", std::env::var("ALOFT_TEST_HELPER_LOG").unwrap_or_else(|_| "info".into()))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .with_context(|| format!("starting {}", bin.display()))?;
        let mut helper = HelperProcess { child: Some(child), socket, log };
        helper.wait_ready(Duration::from_secs(20))?;
        Ok(helper)
    }

    fn wait_ready(&mut self, timeout: Duration) -> Result<()> {
        let started = Instant::now();
        loop {
            if std::os::unix::net::UnixStream::connect(&self.socket).is_ok() {
                return Ok(());
            }
            if let Some(status) = self.child.as_mut().and_then(|c| c.try_wait().ok().flatten()) {
                bail!("aloft-os-helper exited ({status}) before listening:\n{}", self.log_text());
            }
            if started.elapsed() > timeout {
                bail!(
                    "aloft-os-helper did not listen on {} within {timeout:?}:\n{}",
                    self.socket.display(),
                    self.log_text()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The agent's client of this helper.
    pub fn client(&self) -> aloft_agent::os::client::HelperClient {
        aloft_agent::os::client::HelperClient::new(&self.socket)
    }

    /// The helper's process id.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Whether the process is still running.
    pub fn is_running(&mut self) -> bool {
        self.child.as_mut().is_some_and(|c| matches!(c.try_wait(), Ok(None)))
    }

    /// SIGKILL the helper and reap it.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// What the helper logged so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for HelperProcess {
    fn drop(&mut self) {
        self.kill();
    }
}
