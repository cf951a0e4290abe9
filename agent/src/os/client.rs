//! The agent's [`OsBackend`]: a client of the privileged OS helper (`aloft-os-helper`, crate
//! `aloft-osd`) on its Unix socket, `/run/aloft/os-helper.sock` on a node.
//!
//! Why a separate process: libostree drags 62 shared libraries into whatever links it (11 MiB of
//! resident pages in an otherwise 14 MiB daemon), and an ostree deploy on a booted host needs
//! what the hardened agent unit forbids (the host's mount namespace, /sysroot and /boot
//! writable, CAP_SYS_ADMIN). So the agent asks, and the helper — socket-activated, idle-exiting
//! — does; the split is rpm-ostreed's (MCD) and bootc's.
//!
//! One request per connection ([`aloft_api::os::wire`]), each with its own timeout: short for
//! reads, long for a pull. A pull is cancelled by shutting its connection: the helper watches a
//! pull's connection and cancels the download when its client hangs up. Transport failures are
//! [`OsError::Helper`] naming the socket, so a Degraded reason tells the admin which unit to look
//! at; the helper's own errors arrive with their variant intact.

use super::{Cancel, DeploymentInfo, OsBackend, OsError, OsStatus, PullReport, StageRequest};
use aloft_api::os::wire::{self, Call, Reply, Request, RequestMsg, PROTOCOL_VERSION};
use aloft_api::os::{BootCount, BootCounting};
use aloft_api::osimage::OstreeImage;
use serde::de::DeserializeOwned;
use std::io::{BufRead, BufReader, ErrorKind, Read, Write};
use std::net::Shutdown;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The longest reply read (a status of a few deployments is a few KiB).
const MAX_REPLY_LEN: u64 = 16 * 1024 * 1024;

/// How long the helper may take per operation, including its start by socket activation. A
/// pull downloads an OS (hundreds of MiB on a slow link); a stage checks out and writes a
/// deployment; reads are quick.
pub fn timeout_for(call: &Call) -> Duration {
    Duration::from_secs(match call {
        Call::Status | Call::BootedCmdline => 30,
        Call::HasVerifiedCommit(_) => 120,
        Call::Pull(_) => 3600,
        Call::Stage(_) => 1800,
        Call::Rollback | Call::KeepBooted => 600,
        Call::BootCounter(_) => 30,
        // Waits for the sysroot's lock, which a stage in progress holds.
        Call::DropStaged => 1800,
    })
}

/// Talks to the OS helper at `socket`.
#[derive(Debug, Clone)]
pub struct HelperClient {
    socket: PathBuf,
}

impl HelperClient {
    /// A client of the helper listening at `socket` (nothing is connected until a call).
    pub fn new(socket: impl Into<PathBuf>) -> Self {
        HelperClient { socket: socket.into() }
    }

    /// The socket this client connects to.
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    fn err(&self, message: String) -> OsError {
        OsError::Helper { socket: self.socket.display().to_string(), message }
    }

    /// Send `call`, wait for its reply (at most [`timeout_for`]), decode the result.
    pub fn call<T: DeserializeOwned>(&self, call: &Call) -> Result<T, OsError> {
        self.call_with_timeout(call, timeout_for(call))
    }

    /// [`Self::call`] with an explicit timeout.
    pub fn call_with_timeout<T: DeserializeOwned>(&self, call: &Call, timeout: Duration) -> Result<T, OsError> {
        self.call_cancellable(call, timeout, None)
    }

    /// [`Self::call_with_timeout`] that `cancel` ends with [`OsError::Cancelled`]: it shuts the
    /// connection, which makes the helper cancel the call (a pull) and this side stop waiting.
    pub fn call_cancellable<T: DeserializeOwned>(
        &self,
        call: &Call,
        timeout: Duration,
        cancel: Option<&Cancel>,
    ) -> Result<T, OsError> {
        let op = call.name();
        let cancelled = || OsError::Cancelled { operation: format!("the OS helper's {op}") };
        if cancel.is_some_and(Cancel::is_cancelled) {
            return Err(cancelled());
        }
        let stream = UnixStream::connect(&self.socket).map_err(|e| {
            self.err(match e.kind() {
                ErrorKind::NotFound | ErrorKind::ConnectionRefused => format!(
                    "is not running: {e} (start aloft-os-helper.socket, or run aloft-agent with --os-helper none \
                     on a host without an ostree sysroot)"
                ),
                ErrorKind::PermissionDenied => format!("refused the connection: {e} (aloft-agent must run as root)"),
                _ => format!("cannot be reached: {e}"),
            })
        })?;
        let set = |s: &UnixStream| -> std::io::Result<()> {
            s.set_read_timeout(Some(timeout))?;
            s.set_write_timeout(Some(timeout))
        };
        set(&stream).map_err(|e| self.err(format!("cannot be reached: {e}")))?;
        if let Some(cancel) = cancel {
            let shut = stream.try_clone().map_err(|e| self.err(format!("cannot be reached: {e}")))?;
            cancel.on_cancel(move || {
                let _ = shut.shutdown(Shutdown::Both);
            });
        }
        let mut line = serde_json::to_string(&RequestMsg { v: PROTOCOL_VERSION, request: Request::from_call(call) })
            .map_err(|e| self.err(format!("cannot be sent the {op} request: {e}")))?;
        line.push('\n');
        let reply = match self.exchange(&stream, &line, op, timeout) {
            Err(_) if cancel.is_some_and(Cancel::is_cancelled) => return Err(cancelled()),
            r => r?,
        };
        let reply: Reply =
            serde_json::from_str(&reply).map_err(|e| self.err(format!("sent a malformed reply to {op}: {e}")))?;
        if reply.v != PROTOCOL_VERSION {
            return Err(self.err(format!(
                "speaks protocol version {}, this aloft-agent {PROTOCOL_VERSION}: install matching versions",
                reply.v
            )));
        }
        match (reply.ok, reply.error) {
            (_, Some(e)) => Err(e),
            (Some(v), None) => {
                serde_json::from_value(v).map_err(|e| self.err(format!("sent a malformed reply to {op}: {e}")))
            }
            (None, None) => Err(self.err(format!("sent an empty reply to {op}"))),
        }
    }

    /// Write one request line and read the one reply line on a connected stream.
    fn exchange(&self, stream: &UnixStream, line: &str, op: &str, timeout: Duration) -> Result<String, OsError> {
        // A helper that refuses this client answers at once and closes, possibly before the
        // request is written: its answer says why, so it is read even when the write failed.
        let mut writer = stream;
        let sent = writer.write_all(line.as_bytes());
        let mut reply = String::new();
        let read = BufReader::new(stream.take(MAX_REPLY_LEN)).read_line(&mut reply);
        if let Err(e) = sent {
            if !matches!(read, Ok(n) if n > 0) {
                return Err(self.err(format!("closed the connection before {op}: {e}")));
            }
        }
        match read {
            Ok(0) => Err(self.err(format!(
                "closed the connection without answering {op} (did it crash or refuse this client? see \
                 journalctl -u aloft-os-helper)"
            ))),
            Ok(_) => Ok(reply),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                Err(self.err(format!("did not answer {op} within {} s", timeout.as_secs())))
            }
            Err(e) => Err(self.err(format!("failed while answering {op}: {e}"))),
        }
    }
}

impl OsBackend for HelperClient {
    fn status(&self) -> Result<OsStatus, OsError> {
        self.call(&Call::Status)
    }

    fn has_verified_commit(&self, image: &OstreeImage) -> Result<bool, OsError> {
        self.call(&Call::HasVerifiedCommit(image.clone()))
    }

    fn pull_cancellable(&self, image: &OstreeImage, cancel: &Cancel) -> Result<PullReport, OsError> {
        let call = Call::Pull(image.clone());
        self.call_cancellable(&call, timeout_for(&call), Some(cancel))
    }

    fn stage(&self, req: &StageRequest) -> Result<DeploymentInfo, OsError> {
        self.call(&Call::Stage(req.clone()))
    }

    fn rollback(&self) -> Result<DeploymentInfo, OsError> {
        self.call(&Call::Rollback)
    }

    fn drop_staged(&self) -> Result<Option<DeploymentInfo>, OsError> {
        self.call::<wire::Dropped>(&Call::DropStaged).map(|d| d.dropped)
    }

    fn booted_cmdline(&self) -> Result<String, OsError> {
        self.call(&Call::BootedCmdline)
    }

    fn boot_counter(&self, change: BootCount) -> Result<Option<BootCounting>, OsError> {
        self.call::<wire::Counting>(&Call::BootCounter(change)).map(|c| c.counting)
    }

    fn keep_booted(&self) -> Result<DeploymentInfo, OsError> {
        self.call(&Call::KeepBooted)
    }
}

/// Where `--os-helper auto` looks: the default socket when the root is a booted ostree system
/// (libostree's marker `/run/ostree-booted` exists under it), else no OS management.
pub fn auto_socket(root: &Path) -> Option<PathBuf> {
    root.join("run/ostree-booted").exists().then(|| root.join(wire::DEFAULT_SOCKET.trim_start_matches('/')))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixListener;

    #[test]
    fn a_missing_helper_is_named_by_its_socket() {
        let dir = tempfile::tempdir().unwrap();
        let sock = dir.path().join("os-helper.sock");
        let e = HelperClient::new(&sock).status().unwrap_err();
        assert!(matches!(e, OsError::Helper { .. }), "{e:?}");
        let msg = e.to_string();
        assert!(msg.starts_with(&format!("OS helper at {} is not running: ", sock.display())), "{msg}");
    }

    /// A peer that accepts and answers with the wrong version, garbage, or nothing.
    fn serve_once(reply: &'static str) -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let sock = dir.path().join("s");
        let listener = UnixListener::bind(&sock).unwrap();
        std::thread::spawn(move || {
            if let Ok((mut s, _)) = listener.accept() {
                let mut line = String::new();
                let _ = BufReader::new(&s).read_line(&mut line);
                let _ = s.write_all(reply.as_bytes());
            }
        });
        (dir, sock)
    }

    #[test]
    fn bad_replies_are_helper_errors() {
        let (_d, s) = serve_once("{\"v\":2,\"ok\":true}\n");
        assert!(HelperClient::new(&s).status().unwrap_err().to_string().contains("protocol version 2"));
        let (_d, s) = serve_once("garbage\n");
        assert!(HelperClient::new(&s).status().unwrap_err().to_string().contains("malformed reply to status"));
        let (_d, s) = serve_once("");
        assert!(HelperClient::new(&s).status().unwrap_err().to_string().contains("without answering status"));
        let (_d, s) = serve_once("{\"v\":1,\"error\":{\"kind\":\"invalid\",\"detail\":\"no previous deployment\"}}\n");
        assert_eq!(HelperClient::new(&s).rollback().unwrap_err(), OsError::Invalid("no previous deployment".into()));
    }

    /// The helper refuses a peer with the wrong uid before reading its request, and closes: the
    /// client's write then fails (EPIPE), but the refusal is what the agent must report.
    #[test]
    fn a_refusal_sent_before_the_request_is_reported() {
        let client = HelperClient::new(Path::new("/run/aloft/os-helper.sock"));
        let (ours, mut helper) = UnixStream::pair().unwrap();
        let refusal = "{\"v\":1,\"error\":{\"kind\":\"invalid\",\"detail\":\"peer uid 1 refused\"}}\n";
        helper.write_all(refusal.as_bytes()).unwrap();
        drop(helper);
        assert!((&ours).write_all(b"x").is_err(), "the write must fail for this test to mean anything");
        let reply = client.exchange(&ours, "{}\n", "status", Duration::from_secs(1)).unwrap();
        assert_eq!(reply, refusal);
        // Closed with nothing said: the write's error is the one reported.
        let (ours, helper) = UnixStream::pair().unwrap();
        drop(helper);
        let e = client.exchange(&ours, "{}\n", "status", Duration::from_secs(1)).unwrap_err();
        assert!(e.to_string().contains("closed the connection before status"), "{e}");
    }

    #[test]
    fn a_silent_helper_times_out() {
        let dir = tempfile::tempdir().unwrap();
        let sock = dir.path().join("s");
        let _listener = UnixListener::bind(&sock).unwrap();
        let e = HelperClient::new(&sock)
            .call_with_timeout::<OsStatus>(&Call::Status, Duration::from_millis(200))
            .unwrap_err();
        assert!(e.to_string().contains("did not answer status within"), "{e}");
    }

    #[test]
    fn auto_needs_a_booted_ostree_root() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(auto_socket(dir.path()), None);
        std::fs::create_dir_all(dir.path().join("run")).unwrap();
        std::fs::write(dir.path().join("run/ostree-booted"), "").unwrap();
        assert_eq!(auto_socket(dir.path()), Some(dir.path().join("run/aloft/os-helper.sock")));
    }
}
