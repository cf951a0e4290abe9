//! The helper's socket server: accept, check who is asking, read one request line, run it,
//! write one reply line, close ([`aloft_api::os::wire`]).
//!
//! - **Who may ask**: only root, or the helper's own uid (tests run both as one user), checked
//!   with `SO_PEERCRED` on every connection — the socket's 0600 mode is the first fence, this the
//!   second, since the helper deploys operating systems for whoever gets through.
//! - **Concurrency**: a thread per connection; calls that write the repository or the sysroot
//!   run one at a time (a pre-stage pull and an update's stage must not interleave), reads run
//!   beside them so a status query never waits behind a long download.
//! - **A client that goes away cancels its pull**: a download holds the write lock for up to an
//!   hour, so a pull's connection is watched while it runs, and a hangup (the agent cancelled a
//!   pre-stage for an update, timed out, or was restarted) cancels the pull, as `rpm-ostree
//!   cancel` stops a transaction. Other calls run to the end: a stage or a rollback stopped
//!   half-way would leave more to clean up than it saves.
//! - **Pulls run in a worker process** ([`PullWorker`]: this binary again, `--pull-worker`),
//!   killed on cancel. libostree 2022.7 looks at a pull's `GCancellable` only when one of its
//!   HTTP requests completes, so a cancelled pull from a server that stopped sending kept the
//!   write lock for good (seen with `tests/cancel.rs`'s server, which holds its answers). A
//!   killed pull leaves the repository as it was (objects land in it only whole, and the
//!   repository lock is a file lock the kernel drops): the next pull completes.
//! - **A stalled pull is stopped**: the worker writes its libostree progress on stdout as it
//!   moves, and a worker silent for [`PullWorker::stall`] is killed and answered with a Pull
//!   error, since libostree's libsoup fetcher waits for a mirror that stopped sending for ever.
//!   Silence, not duration: a slow mirror that keeps sending finishes.
//! - **Bad input** gets an `invalid` reply naming what was wrong, and the helper keeps serving.
//! - **Idle exit**: with `idle_exit`, the loop returns once no connection has been open for that
//!   long; under socket activation systemd keeps the listening socket and starts the helper
//!   again on the next connection (connections arriving meanwhile wait in the backlog).

use crate::ostree::{OstreeBackend, PullProgress};
use aloft_api::os::wire::{self, Call, Counting, Dropped, Reply, Request, RequestMsg, PROTOCOL_VERSION};
use aloft_api::os::{Cancel, Download, OsBackend, OsError};
use nix::poll::{PollFd, PollFlags, PollTimeout};
use std::cell::RefCell;
use std::ffi::OsString;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::fd::AsFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long a client may take to send its request line, or to read its reply.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// Why the server stopped other than by idling out.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("waiting for connections on the OS helper's socket: {0}")]
    Poll(nix::Error),
    #[error("accepting a connection on the OS helper's socket: {0}")]
    Accept(std::io::Error),
}

/// Whether a peer with `peer_uid` may use a helper running as `own_uid`: root always, and the
/// helper's own user (a helper run unprivileged for tests serves its own test process).
pub fn authorize(peer_uid: u32, own_uid: u32) -> Result<(), String> {
    if peer_uid == 0 || peer_uid == own_uid {
        Ok(())
    } else {
        Err(format!(
            "permission denied: the OS helper serves only root (uid 0){}; peer uid {peer_uid} refused",
            if own_uid == 0 { String::new() } else { format!(" and its own uid {own_uid}") }
        ))
    }
}

/// The peer's (uid, pid) from `SO_PEERCRED`.
pub fn peer_credentials(stream: &UnixStream) -> std::io::Result<(u32, i32)> {
    let cred = nix::sys::socket::getsockopt(stream, nix::sys::socket::sockopt::PeerCredentials)
        .map_err(std::io::Error::from)?;
    Ok((cred.uid(), cred.pid()))
}

/// Connections in flight and when the last one ended, for the idle exit.
struct Activity {
    open: usize,
    last: Instant,
}

/// The pull under way (pulls are writes: one at a time), for the status.
#[derive(Default)]
struct CurrentDownload(Mutex<Option<(String, Instant, PullProgress)>>);

impl CurrentDownload {
    fn begin(&self, checksum: &str) {
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) =
            Some((checksum.to_string(), Instant::now(), PullProgress::default()));
    }

    fn update(&self, progress: &PullProgress) {
        if let Some((_, _, p)) = self.0.lock().unwrap_or_else(|p| p.into_inner()).as_mut() {
            *p = *progress;
        }
    }

    fn end(&self) {
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) = None;
    }

    fn get(&self) -> Option<Download> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).as_ref().map(|(checksum, started, progress)| Download {
            checksum: checksum.clone(),
            progress: *progress,
            elapsed_seconds: started.elapsed().as_secs(),
        })
    }
}

/// Serves one backend.
pub struct Server {
    backend: Arc<dyn OsBackend>,
    pull_worker: PullWorker,
    download: CurrentDownload,
    writes: Mutex<()>,
    own_uid: u32,
    activity: Mutex<Activity>,
}

/// Decrements the open count when a connection's thread ends, however it ends.
struct Open<'a>(&'a Server);
impl Drop for Open<'_> {
    fn drop(&mut self) {
        let mut a = self.0.activity.lock().unwrap_or_else(|p| p.into_inner());
        a.open = a.open.saturating_sub(1);
        a.last = Instant::now();
    }
}

impl Server {
    /// A server for `backend` whose pulls run in `pull_worker` processes, accepting root and the
    /// current effective uid.
    pub fn new(backend: Arc<dyn OsBackend>, pull_worker: PullWorker) -> Arc<Server> {
        Arc::new(Server {
            backend,
            pull_worker,
            download: CurrentDownload::default(),
            writes: Mutex::new(()),
            own_uid: nix::unistd::geteuid().as_raw(),
            activity: Mutex::new(Activity { open: 0, last: Instant::now() }),
        })
    }

    /// Accept connections until `idle_exit` passes without any (never, with `None`).
    pub fn serve(self: &Arc<Self>, listener: &UnixListener, idle_exit: Option<Duration>) -> Result<(), ServeError> {
        loop {
            let wait = {
                let a = self.activity.lock().unwrap_or_else(|p| p.into_inner());
                match idle_exit {
                    Some(idle) if a.open == 0 => {
                        let left = idle.saturating_sub(a.last.elapsed());
                        if left.is_zero() {
                            return Ok(());
                        }
                        left.min(Duration::from_secs(5))
                    }
                    _ => Duration::from_secs(5),
                }
            };
            let mut fds = [PollFd::new(listener.as_fd(), PollFlags::POLLIN)];
            let ms = PollTimeout::try_from(wait.as_millis().max(1) as u64).unwrap_or(PollTimeout::MAX);
            match nix::poll::poll(&mut fds, ms) {
                Ok(0) => continue,
                Ok(_) => {}
                Err(nix::Error::EINTR) => continue,
                Err(e) => return Err(ServeError::Poll(e)),
            }
            let stream = match listener.accept() {
                Ok((s, _)) => s,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(ServeError::Accept(e)),
            };
            {
                let mut a = self.activity.lock().unwrap_or_else(|p| p.into_inner());
                a.open += 1;
                a.last = Instant::now();
            }
            let me = self.clone();
            let spawned = std::thread::Builder::new().name("os-helper-conn".into()).spawn(move || {
                let _open = Open(&me);
                me.connection(stream);
            });
            if let Err(e) = spawned {
                // The closure (and its Open guard) never ran: undo the count ourselves.
                let mut a = self.activity.lock().unwrap_or_else(|p| p.into_inner());
                a.open = a.open.saturating_sub(1);
                tracing::error!(error = %e, "cannot start a thread for a connection; dropped it");
            }
        }
    }

    /// One connection: credentials, one request, one reply.
    fn connection(&self, mut stream: UnixStream) {
        let (uid, pid) = match peer_credentials(&stream) {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the peer's credentials; connection refused");
                return;
            }
        };
        if let Err(why) = authorize(uid, self.own_uid) {
            tracing::warn!(peer_uid = uid, peer_pid = pid, "{why}");
            write_reply(&mut stream, &Reply::error(OsError::Invalid(why)));
            return;
        }
        // Bounded both ways: a client that never sends its request, or never reads its reply,
        // must not hold a thread (and the idle exit) forever.
        let bounded = stream
            .set_read_timeout(Some(REQUEST_TIMEOUT))
            .and_then(|()| stream.set_write_timeout(Some(REQUEST_TIMEOUT)));
        if let Err(e) = bounded {
            tracing::warn!(error = %e, "cannot set a timeout on a connection; dropped it");
            return;
        }
        let mut line = String::new();
        let limit = wire::MAX_REQUEST_LEN as u64 + 1;
        match BufReader::new((&stream).take(limit)).read_line(&mut line) {
            // A probe (connect and close): nothing to answer.
            Ok(0) => return,
            Ok(_) => {}
            Err(e) => {
                let e = OsError::Invalid(format!("malformed request to the OS helper: {e}"));
                tracing::warn!(peer_pid = pid, error = %e, "request refused");
                write_reply(&mut stream, &Reply::error(e));
                return;
            }
        }
        let reply = if line.len() > wire::MAX_REQUEST_LEN {
            Reply::error(OsError::Invalid(format!(
                "malformed request to the OS helper: longer than {} bytes",
                wire::MAX_REQUEST_LEN
            )))
        } else {
            self.handle_line(line.trim_end(), pid, &stream)
        };
        write_reply(&mut stream, &reply);
    }

    /// Parse, validate and run one request line read from `conn` (whose hangup cancels a pull);
    /// always a reply.
    fn handle_line(&self, line: &str, peer_pid: i32, conn: &UnixStream) -> Reply {
        let call = match wire::parse_request(line).and_then(|r| r.into_call()) {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(peer_pid, error = %e, "request refused");
                return Reply::error(e);
            }
        };
        let op = call.name();
        let started = Instant::now();
        let cancel = Cancel::new();
        let _watch = match &call {
            Call::Pull(_) => HangupWatch::start(conn, cancel.clone(), peer_pid),
            _ => None,
        };
        let result = self.run(call, &cancel);
        let elapsed_ms = started.elapsed().as_millis() as u64;
        match result {
            Ok(v) => {
                tracing::info!(op, peer_pid, elapsed_ms, "done");
                Reply::ok(v)
            }
            Err(e) => {
                tracing::warn!(op, peer_pid, elapsed_ms, error = %e, "failed");
                Reply::error(e)
            }
        }
    }

    fn run(&self, call: Call, cancel: &Cancel) -> Result<serde_json::Value, OsError> {
        let _serial = call.writes().then(|| self.writes.lock().unwrap_or_else(|p| p.into_inner()));
        if cancel.is_cancelled() {
            // The client left while this call waited for another write.
            return Err(OsError::Cancelled { operation: call.name().to_string() });
        }
        let b = self.backend.as_ref();
        let json = |v: Result<serde_json::Value, serde_json::Error>| {
            v.map_err(|e| OsError::Invalid(format!("encoding the OS helper's reply: {e}")))
        };
        match call {
            Call::Status => {
                let mut status = b.status()?;
                status.download = self.download.get();
                json(serde_json::to_value(status))
            }
            Call::HasVerifiedCommit(image) => json(serde_json::to_value(b.has_verified_commit(&image)?)),
            Call::Pull(image) => {
                self.download.begin(&image.checksum);
                let result = self.pull_worker.pull(&image, cancel, &|p| self.download.update(p));
                self.download.end();
                result
            }
            Call::Stage(req) => json(serde_json::to_value(b.stage(&req)?)),
            Call::Rollback => json(serde_json::to_value(b.rollback()?)),
            Call::DropStaged => json(serde_json::to_value(Dropped { dropped: b.drop_staged()? })),
            Call::BootedCmdline => json(serde_json::to_value(b.booted_cmdline()?)),
            Call::BootCounter(change) => json(serde_json::to_value(Counting { counting: b.boot_counter(change)? })),
            Call::KeepBooted => json(serde_json::to_value(b.keep_booted()?)),
        }
    }
}

/// How to run a pull in a process of its own: `program args… --pull-worker`, which reads one
/// pull request line on stdin and writes progress lines and then its reply line on stdout
/// ([`pull_worker_main`]).
#[derive(Debug, Clone)]
pub struct PullWorker {
    pub program: PathBuf,
    /// The helper's own options (sysroot, keyring, remote, ...).
    pub args: Vec<OsString>,
    /// How long a pull may go without any progress before it is stopped as stalled: libostree
    /// 2022.7 waits for a mirror that stopped sending for ever (its libcurl backend's low-speed
    /// limit is not in the libsoup build Debian ships), and the pull holds the helper's write
    /// lock, and the node's update, for as long.
    pub stall: Duration,
}

/// The flag that makes the helper binary a pull worker.
pub const PULL_WORKER_FLAG: &str = "--pull-worker";

/// The default of [`PullWorker::stall`]: libostree's progress moves at least once a second while
/// anything arrives, so two minutes without it is a mirror that stopped, not a slow one.
pub const DEFAULT_PULL_STALL: Duration = Duration::from_secs(120);

/// How often a running pull's progress is logged.
const PROGRESS_LOG_EVERY: Duration = Duration::from_secs(10);

/// A worker's progress line, before its reply line.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct ProgressLine {
    progress: PullProgress,
}

/// What a worker's stdout said, line by line.
enum WorkerLine {
    Progress(PullProgress),
    Other(String),
}

impl PullWorker {
    /// Pull `image` in a worker; `cancel` kills it, and so does a pull without progress for
    /// [`Self::stall`] (an [`OsError::Pull`] that says so: the agent tries again).
    fn pull(
        &self,
        image: &aloft_api::osimage::OstreeImage,
        cancel: &Cancel,
        on_progress: &dyn Fn(&PullProgress),
    ) -> Result<serde_json::Value, OsError> {
        let operation = format!("pulling OS commit {}", image.checksum);
        let failed = |what: String| OsError::Ostree { operation: operation.clone(), message: what };
        let request = RequestMsg { v: PROTOCOL_VERSION, request: Request::Pull { image: image.to_string() } };
        let mut line = serde_json::to_string(&request).map_err(|e| failed(format!("encoding the request: {e}")))?;
        line.push('\n');
        let mut child = Command::new(&self.program)
            .args(&self.args)
            .arg(PULL_WORKER_FLAG)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| failed(format!("starting the pull worker {}: {e}", self.program.display())))?;
        let pid = nix::unistd::Pid::from_raw(child.id() as i32);
        // Killed by pid only until the child is reaped (below), so never another process that
        // got its pid since.
        let exited = Arc::new(Mutex::new(false));
        let kill = {
            let exited = exited.clone();
            Arc::new(move |why: &str| {
                let exited = exited.lock().unwrap_or_else(|p| p.into_inner());
                if !*exited {
                    tracing::info!(pid = pid.as_raw(), "stopping the pull worker: {why}");
                    let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL);
                }
            })
        };
        let on_cancel = kill.clone();
        cancel.on_cancel(move || on_cancel("cancelled"));
        if let Some(mut stdin) = child.stdin.take() {
            // A worker killed already (cancelled) closed its end: the reply says nothing then.
            let _ = stdin.write_all(line.as_bytes());
        }
        let (tx, lines) = std::sync::mpsc::channel();
        let mut read_error = None;
        if let Some(out) = child.stdout.take() {
            let spawned = std::thread::Builder::new().name("os-helper-pull-out".into()).spawn(move || {
                let mut out = BufReader::new(out);
                loop {
                    let mut line = String::new();
                    match (&mut out).take(wire::MAX_REQUEST_LEN as u64 * 16).read_line(&mut line) {
                        Ok(0) => return,
                        Ok(_) => {}
                        Err(e) => {
                            let _ = tx.send(Err(e));
                            return;
                        }
                    }
                    let parsed = match serde_json::from_str::<ProgressLine>(line.trim_end()) {
                        Ok(p) => WorkerLine::Progress(p.progress),
                        Err(_) => WorkerLine::Other(line),
                    };
                    if tx.send(Ok(parsed)).is_err() {
                        return;
                    }
                }
            });
            if let Err(e) = spawned {
                kill("cannot read its answer");
                read_error = Some(e);
            }
        }
        let started = Instant::now();
        let mut reply = String::new();
        let mut stalled = None;
        let (mut last, mut logged) = (PullProgress::default(), Instant::now());
        loop {
            match lines.recv_timeout(self.stall) {
                Ok(Ok(WorkerLine::Progress(p))) => {
                    last = p;
                    on_progress(&p);
                    if logged.elapsed() >= PROGRESS_LOG_EVERY {
                        logged = Instant::now();
                        tracing::info!(
                            checksum = %image.checksum,
                            fetched = p.fetched,
                            requested = p.requested,
                            bytes = p.bytes,
                            elapsed_s = started.elapsed().as_secs(),
                            "downloading OS commit"
                        );
                    }
                }
                Ok(Ok(WorkerLine::Other(l))) => reply = l,
                Ok(Err(e)) => read_error = Some(e),
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                    stalled = Some(last);
                    kill("stalled");
                    // Not waiting for the end of its output: a process it started may hold that.
                    break;
                }
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break,
            }
        }
        *exited.lock().unwrap_or_else(|p| p.into_inner()) = true;
        let status = child.wait().map_err(|e| failed(format!("waiting for the pull worker: {e}")))?;
        if let Some(p) = stalled {
            let message = format!(
                "stalled: nothing arrived from the mirror for {} s ({} of {} objects, {} bytes fetched in {} s); \
                 stopped the download (what arrived is kept for the next try)",
                self.stall.as_secs(),
                p.fetched,
                p.requested,
                p.bytes,
                started.elapsed().as_secs()
            );
            tracing::warn!(checksum = %image.checksum, "{message}");
            return Err(OsError::Pull { checksum: image.checksum.clone(), url: image.repo_url(), message });
        }
        match serde_json::from_str::<Reply>(reply.trim_end()) {
            Ok(Reply { error: Some(e), .. }) => Err(e),
            Ok(Reply { ok: Some(v), .. }) => Ok(v),
            _ if cancel.is_cancelled() => {
                tracing::info!(checksum = %image.checksum, "pull cancelled");
                Err(OsError::Cancelled { operation })
            }
            _ => Err(failed(format!(
                "the pull worker ended ({status}) without an answer{}",
                read_error.map(|e| format!(" ({e})")).unwrap_or_default()
            ))),
        }
    }
}

/// The worker's side ([`PULL_WORKER_FLAG`]): one pull request from `input`, a progress line on
/// `output` each time the download moves, then its reply. Only pulls: the worker is not another
/// door into the helper.
pub fn pull_worker_main(
    backend: &OstreeBackend,
    input: impl Read,
    output: impl Write + 'static,
) -> std::io::Result<()> {
    let mut line = String::new();
    BufReader::new(input.take(wire::MAX_REQUEST_LEN as u64 + 1)).read_line(&mut line)?;
    let output = Rc::new(RefCell::new(output));
    let progress_out = output.clone();
    let progress = move |p: &PullProgress| {
        if let Ok(text) = serde_json::to_string(&ProgressLine { progress: *p }) {
            let mut out = progress_out.borrow_mut();
            // A helper that went away (killed its worker) reads nothing more; the pull ends then.
            let _ = writeln!(out, "{text}").and_then(|()| out.flush());
        }
    };
    let reply = match wire::parse_request(line.trim_end()).and_then(|r| r.into_call()) {
        Ok(Call::Pull(image)) => match backend.pull_observed(&image, &Cancel::new(), progress) {
            Ok(report) => match serde_json::to_value(report) {
                Ok(v) => Reply::ok(v),
                Err(e) => Reply::error(OsError::Invalid(format!("encoding the pull worker's reply: {e}"))),
            },
            Err(e) => Reply::error(e),
        },
        Ok(other) => Reply::error(OsError::Invalid(format!("the pull worker only pulls, not {}", other.name()))),
        Err(e) => Reply::error(e),
    };
    let text = serde_json::to_string(&reply).map_err(std::io::Error::other)?;
    let mut out = output.borrow_mut();
    writeln!(out, "{text}")?;
    out.flush()
}

/// Watches a connection while its call runs, and cancels the call when the client hangs up. The
/// request was read whole and the protocol has the client send nothing more, so the socket turns
/// readable only at its end (or when a client breaks the protocol, which ends its call too); a
/// hangup (POLLHUP) is reported whatever is asked.
/// Stops looking when dropped (within [`HangupWatch::TICK`]).
struct HangupWatch {
    done: Arc<AtomicBool>,
}

impl HangupWatch {
    const TICK: Duration = Duration::from_millis(200);

    fn start(conn: &UnixStream, cancel: Cancel, peer_pid: i32) -> Option<HangupWatch> {
        let conn = match conn.try_clone() {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(error = %e, "cannot watch the connection for a hangup; the call runs to its end");
                return None;
            }
        };
        let done = Arc::new(AtomicBool::new(false));
        let stop = done.clone();
        let spawned = std::thread::Builder::new().name("os-helper-hangup".into()).spawn(move || {
            let flags = PollFlags::POLLIN;
            let tick = PollTimeout::try_from(Self::TICK.as_millis() as u64).unwrap_or(PollTimeout::MAX);
            while !stop.load(Ordering::Acquire) {
                let mut fds = [PollFd::new(conn.as_fd(), flags)];
                match nix::poll::poll(&mut fds, tick) {
                    Ok(0) | Err(nix::Error::EINTR) => continue,
                    Ok(_) => {}
                    Err(e) => {
                        tracing::warn!(error = %e, "cannot watch the connection for a hangup; the call runs to its end");
                        return;
                    }
                }
                if !stop.load(Ordering::Acquire) {
                    tracing::info!(peer_pid, "the client hung up: cancelling its call");
                    cancel.cancel();
                }
                return;
            }
        });
        match spawned {
            Ok(_) => Some(HangupWatch { done }),
            Err(e) => {
                tracing::warn!(error = %e, "cannot watch the connection for a hangup; the call runs to its end");
                None
            }
        }
    }
}

impl Drop for HangupWatch {
    fn drop(&mut self) {
        self.done.store(true, Ordering::Release);
    }
}

fn write_reply(stream: &mut UnixStream, reply: &Reply) {
    let mut text = match serde_json::to_string(reply) {
        Ok(t) => t,
        Err(e) => {
            tracing::error!(error = %e, "cannot encode a reply");
            return;
        }
    };
    text.push('\n');
    if let Err(e) = stream.write_all(text.as_bytes()) {
        tracing::warn!(error = %e, "the client went away before its reply");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_root_and_the_helpers_own_user_may_ask() {
        assert!(authorize(0, 0).is_ok());
        assert!(authorize(0, 1000).is_ok(), "root may ask an unprivileged test helper");
        assert!(authorize(1000, 1000).is_ok());
        let e = authorize(65534, 0).unwrap_err();
        assert!(e.contains("peer uid 65534 refused") && e.contains("only root"), "{e}");
        assert!(authorize(65534, 1000).unwrap_err().contains("its own uid 1000"));
    }

    /// The credential check on a real socket pair: the peer is this process.
    #[test]
    fn peer_credentials_come_from_the_kernel() {
        let (a, _b) = UnixStream::pair().unwrap();
        let (uid, pid) = peer_credentials(&a).unwrap();
        assert_eq!(uid, nix::unistd::geteuid().as_raw());
        assert_eq!(pid as u32, std::process::id());
        assert!(authorize(uid, nix::unistd::geteuid().as_raw()).is_ok());
        // The same peer, judged by a helper running as someone else (not root, not us).
        if uid != 0 {
            assert!(authorize(uid, uid + 1).is_err());
        } else {
            assert!(authorize(uid, 4242).is_ok(), "root is always served");
        }
    }
}
