//! aloft-os-helper: serves libostree operations (status, pull, stage, rollback) to aloft-agent
//! on a Unix socket. See the crate documentation for why it is a process of its own.

use aloft_osd::ostree::{self, OstreeBackend, OstreeConfig};
use aloft_osd::server::{self, Server};
use anyhow::{bail, Context, Result};
use clap::Parser;
use std::os::fd::FromRawFd;
use std::os::unix::net::UnixListener;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// The aloft OS helper: owns the ostree sysroot and pulls, verifies, stages and rolls back OS
/// deployments for aloft-agent, which asks over a Unix socket (root only).
///
/// On a node systemd starts it on the first connection to /run/aloft/os-helper.sock
/// (aloft-os-helper.socket) and it exits after --idle-exit-seconds without requests.
/// With --listen it binds the socket itself (tests, debugging) and does not exit when idle.
///
/// Logs go to stderr (the journal under systemd), filtered by ALOFT_LOG (RUST_LOG syntax,
/// default info; a lone word must be a level: `warn`, `debug`, ...).
#[derive(Parser)]
#[command(name = "aloft-os-helper", version = aloft_api::long_version!(), verbatim_doc_comment)]
struct Cli {
    /// The ostree sysroot: / on a booted node (libostree finds /sysroot), a directory in tests.
    #[arg(long, default_value = "/")]
    sysroot: PathBuf,
    /// The stateroot (osname) deployments go to.
    #[arg(long, default_value = ostree::DEFAULT_OSNAME)]
    osname: String,
    /// The ostree remote pointed at each osImageURL's repository (gpg-verify=true).
    #[arg(long, default_value = ostree::DEFAULT_REMOTE)]
    remote: String,
    /// GPG keyring whose keys may sign OS commits.
    #[arg(long, default_value = "/usr/share/ostree/trusted.gpg.d/aloft.gpg")]
    keyring: PathBuf,
    /// The running boot's kernel command line.
    #[arg(long, default_value = "/proc/cmdline")]
    cmdline: PathBuf,
    /// GRUB's environment block, where boot attempts are counted as greenboot counts them: armed
    /// before the reboot into an update, so that a GRUB with greenboot's fallback-counting script
    /// boots the previous deployment once they run out (a kernel that panics and reboots, with
    /// panic=N). Default: boot/grub2/grubenv under --sysroot. No file there, or an empty value: no
    /// boot counting.
    #[arg(long)]
    grubenv: Option<PathBuf>,
    /// Bind and listen on this socket (mode 0600) instead of taking systemd's (LISTEN_FDS).
    #[arg(long)]
    listen: Option<PathBuf>,
    /// Exit after this many seconds without a connection (0: never). Default: 60 under socket
    /// activation, never with --listen (nobody would start it again).
    #[arg(long)]
    idle_exit_seconds: Option<u64>,
    /// Stop a pull that gets no progress from the mirror for this many seconds (a mirror or proxy
    /// that accepted the connection and stopped sending); the agent reports the error and tries
    /// again. What arrived is kept.
    #[arg(long, default_value_t = server::DEFAULT_PULL_STALL.as_secs(), value_parser = clap::value_parser!(u64).range(1..))]
    pull_stall_seconds: u64,
    /// Internal: run one pull read from stdin and answer on stdout (the helper runs each pull
    /// in such a worker, so that cancelling it is a kill).
    #[arg(long, hide = true)]
    pull_worker: bool,
}

fn init_logging() {
    // The words every aloft daemon reads alike (aloft_api::log_spec); one refused is said, and
    // `info` used (tracing read `warning` as a target, and logged nothing, warnings included).
    let value = std::env::var("ALOFT_LOG").unwrap_or_default();
    let (filter, refused) = match aloft_api::log_spec::normalized(&value)
        .and_then(|w| tracing_subscriber::EnvFilter::try_new(w).map_err(|e| e.to_string()))
    {
        Ok(f) => (f, None),
        Err(e) => (tracing_subscriber::EnvFilter::new("info"), Some(e)),
    };
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()));
    // Under systemd stderr goes to the journal, which has its own timestamps.
    if std::env::var_os("JOURNAL_STREAM").is_some() {
        builder.without_time().init();
    } else {
        builder.init();
    }
    if let Some(e) = refused {
        tracing::warn!("ALOFT_LOG={value:?} is not a log filter ({e}); logging at info");
    }
}

/// Bind `path` with mode 0600 from the start (umask), replacing a stale socket file.
fn bind(path: &std::path::Path) -> Result<UnixListener> {
    use std::os::unix::fs::FileTypeExt;
    if let Ok(meta) = std::fs::symlink_metadata(path) {
        if !meta.file_type().is_socket() {
            bail!("--listen {}: exists and is not a socket", path.display());
        }
        // Stale only if nobody answers: taking over a live helper's socket left that helper
        // running, unreachable, and two processes writing one sysroot.
        if std::os::unix::net::UnixStream::connect(path).is_ok() {
            bail!("--listen {}: another aloft-os-helper is serving this socket", path.display());
        }
        std::fs::remove_file(path).with_context(|| format!("removing the stale socket {}", path.display()))?;
    }
    let old = nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(0o177));
    let bound = UnixListener::bind(path);
    nix::sys::stat::umask(old);
    bound.with_context(|| format!("binding {}", path.display()))
}

fn main() -> std::process::ExitCode {
    aloft_api::exit::report(run())
}

fn run() -> Result<()> {
    let cli = Cli::parse();
    // Before any thread exists: take systemd's socket and keep LISTEN_* from gpg's children.
    // SAFETY: single-threaded here (clap does not spawn threads; logging is not set up yet).
    let activated: Vec<i32> = unsafe { sd_notify::listen_fds_and_unset_env() }
        .context("reading the sockets passed by systemd (LISTEN_FDS)")?
        .collect();
    init_logging();
    let backend = OstreeBackend::new(OstreeConfig {
        sysroot: cli.sysroot.clone(),
        osname: cli.osname.clone(),
        remote: cli.remote.clone(),
        keyring: cli.keyring.clone(),
        cmdline_path: cli.cmdline.clone(),
        grubenv: match &cli.grubenv {
            Some(p) if p.as_os_str().is_empty() => None,
            Some(p) => Some(p.clone()),
            None => Some(cli.sysroot.join(aloft_osd::bootcount::DEFAULT_GRUBENV)),
        },
    });
    if cli.pull_worker {
        return server::pull_worker_main(&backend, std::io::stdin().lock(), std::io::stdout().lock())
            .context("answering the helper as its pull worker");
    }
    let worker = server::PullWorker {
        program: std::env::current_exe().context("finding the helper's own binary for its pull worker")?,
        args: vec![
            "--sysroot".into(),
            cli.sysroot.clone().into(),
            "--osname".into(),
            cli.osname.clone().into(),
            "--remote".into(),
            cli.remote.clone().into(),
            "--keyring".into(),
            cli.keyring.clone().into(),
            "--cmdline".into(),
            cli.cmdline.clone().into(),
        ],
        stall: Duration::from_secs(cli.pull_stall_seconds),
    };
    let (listener, idle_default) = match (&cli.listen, activated.first()) {
        (Some(path), _) => (bind(path)?, None),
        (None, Some(&fd)) => {
            if activated.len() > 1 {
                tracing::warn!(count = activated.len(), "systemd passed several sockets; serving the first");
            }
            // SAFETY: systemd passed this descriptor to this process (LISTEN_PID matched), it is
            // open, and nothing else in the process owns it.
            (unsafe { UnixListener::from_raw_fd(fd) }, Some(60))
        }
        (None, None) => bail!(
            "no socket to serve: start aloft-os-helper through aloft-os-helper.socket (systemd socket \
             activation) or pass --listen PATH"
        ),
    };
    let idle = cli.idle_exit_seconds.or(idle_default).filter(|s| *s > 0).map(Duration::from_secs);
    if !ostree::is_sysroot(&cli.sysroot) {
        tracing::warn!(sysroot = %cli.sysroot.display(), "not an ostree sysroot (no ostree/repo and ostree/deploy): every OS call will fail");
    }
    tracing::info!(
        sysroot = %cli.sysroot.display(),
        keyring = %cli.keyring.display(),
        socket = %cli.listen.as_ref().map_or("systemd".to_string(), |p| p.display().to_string()),
        idle_exit_seconds = idle.map_or(0, |d| d.as_secs()),
        "aloft-os-helper serving"
    );
    Server::new(Arc::new(backend), worker).serve(&listener, idle)?;
    tracing::info!("idle: exiting (systemd starts the helper again on the next connection)");
    Ok(())
}
