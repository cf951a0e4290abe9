//! aloft-agent: the node daemon (run) and its local status command.

use aloft_agent::daemon::{self, Options};
use aloft_agent::enroll;
use anyhow::{Context, Result};
use clap::{Parser, Subcommand};
use std::path::PathBuf;
use std::time::Duration;

/// The aloft node agent: applies the rendered MachineConfig the coordinator assigns to this node
/// (files, systemd units, SSH keys), takes the rebootless action or reboots, and reports with
/// MCO's annotations (state Done / Working / Degraded / Unreconcilable).
///
/// First start enrolls with a bootstrap token and keeps the node's own credential in
/// <root>/var/lib/aloft/credential.json (0600); later starts need no bootstrap token.
///
/// Logs go to the journal (else stderr), filtered by ALOFT_LOG (RUST_LOG syntax, default info;
/// a lone word must be a level: `warn`, `debug`, ...).
#[derive(Parser)]
#[command(version = aloft_api::long_version!(), verbatim_doc_comment, args_conflicts_with_subcommands = true)]
struct Cli {
    #[command(subcommand)]
    cmd: Option<Cmd>,
    #[command(flatten)]
    run: RunArgs,
}

#[derive(clap::Args, Clone)]
struct RunArgs {
    /// Coordinator URL, e.g. https://coordinator.example:6443.
    #[arg(long, env = "ALOFT_COORDINATOR")]
    coordinator: Option<String>,
    /// CA certificate of the coordinator (its data dir's ca.crt). Without it, an https:// coordinator
    /// must have a certificate the system's trusted roots accept.
    #[arg(long, env = "ALOFT_CA")]
    ca: Option<PathBuf>,
    /// File holding the fleet's bootstrap token (needed only until the node has enrolled).
    #[arg(long, env = "ALOFT_BOOTSTRAP_TOKEN_FILE")]
    bootstrap_token_file: Option<PathBuf>,
    /// Node name; default: the host name.
    #[arg(long, env = "ALOFT_NODE_NAME")]
    node_name: Option<String>,
    /// Labels to enroll with, e.g. node-role.kubernetes.io/worker=,topology.kubernetes.io/zone=a
    #[arg(long, env = "ALOFT_LABELS", default_value = "node-role.kubernetes.io/worker=")]
    labels: String,
    /// The host's root directory: / on a node; a sandbox directory in tests.
    #[arg(long, env = "ALOFT_ROOT", default_value = "/")]
    root: PathBuf,
    /// D-Bus address of systemd and logind; default: the system bus.
    #[arg(long, env = "ALOFT_BUS_ADDRESS")]
    bus_address: Option<String>,
    /// Serve Prometheus metrics here (empty to disable).
    #[arg(long, env = "ALOFT_METRICS_LISTEN", default_value = "127.0.0.1:9101")]
    metrics_listen: String,
    /// How long to wait for the coordinator to drain this node before reporting Degraded
    /// itself. 0 (the default): as long as the coordinator asks for the update; the pool's own
    /// drain timeout (`spec.drain.timeoutSeconds`, default 1 h) applies there, which marks the
    /// node and raises a condition on the pool (and keeps retrying). A limit of the agent's own
    /// below a pool's made the node Degraded on the config, counted by the circuit breaker,
    /// while its pool still allowed the drain.
    #[arg(long, env = "ALOFT_DRAIN_TIMEOUT_SECONDS", default_value_t = 0)]
    drain_timeout_seconds: u64,
    /// How long the units wanted by aloft-workloads.target may take to stop before a drained
    /// update gives up (Degraded; retried).
    #[arg(long, env = "ALOFT_WORKLOAD_STOP_TIMEOUT_SECONDS", default_value_t = 300)]
    workload_stop_timeout_seconds: u64,
    /// How long the host may stay up after logind took a reboot request before the agent says
    /// so (Degraded) and asks again: a shutdown cancelled (`systemctl cancel`) or stuck before
    /// it stopped the agent.
    #[arg(long, env = "ALOFT_REBOOT_TIMEOUT_SECONDS", default_value_t = 900,
          value_parser = clap::value_parser!(u64).range(1..))]
    reboot_timeout_seconds: u64,
    /// The OS helper that pulls, stages and rolls back ostree deployments for the agent
    /// (aloft-os-helper, socket-activated by aloft-os-helper.socket): `auto` (its socket
    /// <root>/run/aloft/os-helper.sock when <root>/run/ostree-booted exists: a booted ostree host),
    /// a socket path, or `none` (files and units only; osImageURL and kernelArguments must then stay empty).
    #[arg(long, env = "ALOFT_OS_HELPER", default_value = "auto")]
    os_helper: String,
    /// Units that must be active after an OS-update boot (comma-separated), besides the
    /// executables in /usr/lib/aloft/health.d and /etc/aloft/health.d.
    #[arg(long, env = "ALOFT_HEALTH_REQUIRED_UNITS", default_value = "")]
    health_required_units: String,
    /// How long each health check may take; also how long, after an OS update's boot, the agent
    /// waits for the OS helper before the Node says `cannot verify the booted OS`.
    #[arg(long, env = "ALOFT_HEALTH_TIMEOUT_SECONDS", default_value_t = 300)]
    health_timeout_seconds: u64,
    /// How long a new OS deployment has, from the agent's start in its first boot, to let the
    /// agent reach the coordinator. Past it the update is rolled back as a failed health check
    /// (the commit denylisted, the previous deployment booted, the node Degraded saying why): an
    /// OS that broke the network would otherwise keep the node out of reach for good. 0: wait
    /// for the coordinator however long it takes.
    #[arg(long, env = "ALOFT_OS_REACH_TIMEOUT_SECONDS", default_value_t = 900)]
    os_reach_timeout_seconds: u64,
    /// How many boots a new OS deployment gets from the bootloader before it boots the previous
    /// one (greenboot's boot counting: armed in GRUB's environment block before the reboot into
    /// an update, disarmed once the boot is judged; a kernel that panics and reboots, with
    /// panic=N, is then rolled back). Takes effect on hosts whose bootloader counts (the OS helper's
    /// --grubenv). 0: not armed.
    #[arg(long, env = "ALOFT_BOOT_ATTEMPTS", default_value_t = 3,
          value_parser = clap::value_parser!(u32).range(0..=aloft_api::os::MAX_BOOT_ATTEMPTS as i64))]
    boot_attempts: u32,
    /// How often an update's OS download, once it has run this long, writes how far it is to
    /// the Node (the aloft.dev/progress annotation: `aloftctl get nodes` shows it in REASON while
    /// the node updates); the agent's own status shows it every 3 s. 0: never.
    #[arg(long, env = "ALOFT_OS_PROGRESS_REPORT_SECONDS", default_value_t = 30)]
    os_progress_report_seconds: u64,
    /// Environment-style config file (KEY=value lines for the ALOFT_* options above).
    #[arg(long)]
    config: Option<PathBuf>,
}

/// The OS options from the flags: `None` when the agent does not manage the OS.
fn os_options(a: &RunArgs) -> Result<Option<daemon::OsOptions>> {
    let helper_socket = match a.os_helper.as_str() {
        "none" => return Ok(None),
        "auto" => match aloft_agent::os::client::auto_socket(&a.root) {
            Some(s) => s,
            None => return Ok(None),
        },
        "" => anyhow::bail!("--os-helper: want auto, none or the helper's socket path"),
        path => PathBuf::from(path),
    };
    Ok(Some(daemon::OsOptions {
        helper_socket,
        required_units: a
            .health_required_units
            .split(',')
            .map(str::trim)
            .filter(|u| !u.is_empty())
            .map(String::from)
            .collect(),
        health_timeout: Duration::from_secs(a.health_timeout_seconds.max(1)),
        reach_timeout: Duration::from_secs(a.os_reach_timeout_seconds),
        progress_report: Duration::from_secs(a.os_progress_report_seconds),
        boot_attempts: a.boot_attempts,
    }))
}

#[derive(Subcommand)]
enum Cmd {
    /// Show this node's agent state: phase, current and desired config, last error, progress.
    Status {
        /// Machine-readable JSON.
        #[arg(long)]
        json: bool,
        /// The host's root directory, as given to the agent (its state is read under it).
        #[arg(long, env = "ALOFT_ROOT", default_value = "/")]
        root: PathBuf,
        /// D-Bus address where the agent serves org.aloft.Agent1 (default: the system bus).
        #[arg(long, env = "ALOFT_BUS_ADDRESS")]
        bus_address: Option<String>,
    },
}

/// Read KEY=value lines into the environment (only keys not already set), so the systemd unit
/// can point at /etc/aloft/agent.env and flags still win.
fn load_env_file(path: &std::path::Path) -> Result<()> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (k, v) = line.split_once('=').with_context(|| format!("{}:{}: want KEY=value", path.display(), n + 1))?;
        if std::env::var_os(k.trim()).is_none() {
            // SAFETY: single-threaded at this point (before the runtime starts).
            unsafe { std::env::set_var(k.trim(), unquote(v.trim())) };
        }
    }
    Ok(())
}

/// A value without the one pair of double or single quotes around it, as systemd's
/// `EnvironmentFile=` reads it (the unit feeds the same file to both).
fn unquote(v: &str) -> &str {
    for q in ['"', '\''] {
        if let Some(inner) = v.strip_prefix(q).and_then(|r| r.strip_suffix(q)) {
            return inner;
        }
    }
    v
}

/// The file `--config FILE` or `--config=FILE` names, if any.
fn config_arg(args: &[String]) -> Option<&str> {
    args.iter().enumerate().find_map(|(i, a)| match a.strip_prefix("--config") {
        Some("") => args.get(i + 1).map(String::as_str),
        Some(rest) => rest.strip_prefix('='),
        None => None,
    })
}

fn main() -> std::process::ExitCode {
    aloft_api::exit::report(run())
}

fn run() -> Result<()> {
    aloft_agent::reclaim::limit_heap_arenas();
    // A config file feeds the environment before clap reads it.
    let args: Vec<String> = std::env::args().collect();
    // A file named on the command line must be there: one that is not would leave the agent
    // with an error about a missing option instead of the missing file.
    if let Some(p) = config_arg(&args) {
        load_env_file(std::path::Path::new(p)).context("--config")?;
    }
    let cli = Cli::parse();
    if cli.cmd.is_none() {
        if let Err(e) = aloft_agent::logging::init() {
            eprintln!("aloft-agent: logging: {e}");
        }
    }
    if cli.cmd.is_none() {
        if let Some(spec) = std::env::var_os(aloft_agent::failpoints::ENV) {
            let armed = aloft_agent::failpoints::arm(&spec.to_string_lossy())?;
            if !armed.is_empty() {
                tracing::warn!(failpoints = %armed.join(", "), "failpoints armed: this agent stops where they say");
            }
        }
    }
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    match cli.cmd {
        Some(Cmd::Status { json, root, bus_address }) => {
            rt.block_on(daemon::print_status(&root, json, bus_address.as_deref()))
        }
        None => {
            let a = cli.run;
            let os = os_options(&a)?;
            let coordinator = a.coordinator.context("--coordinator URL is required (or ALOFT_COORDINATOR)")?;
            let node_name = match a.node_name {
                Some(n) => n,
                None => nix::unistd::gethostname()?.to_string_lossy().to_lowercase(),
            };
            let opts = Options {
                coordinator,
                ca_pem: a
                    .ca
                    .as_ref()
                    .map(|p| std::fs::read(p).with_context(|| format!("reading CA {}", p.display())))
                    .transpose()?,
                bootstrap_token: a
                    .bootstrap_token_file
                    .as_ref()
                    .map(|p| {
                        std::fs::read_to_string(p)
                            .map(|s| s.trim().to_string())
                            .with_context(|| format!("reading {}", p.display()))
                    })
                    .transpose()?,
                node_name,
                labels: enroll::parse_labels(&a.labels)?,
                root: a.root,
                bus_address: a.bus_address,
                metrics_listen: Some(a.metrics_listen).filter(|s| !s.is_empty()),
                drain_timeout: Duration::from_secs(a.drain_timeout_seconds),
                workload_stop_timeout: Duration::from_secs(a.workload_stop_timeout_seconds),
                reboot_timeout: Duration::from_secs(a.reboot_timeout_seconds),
                os,
                build: aloft_api::build_info!(),
            };
            rt.block_on(daemon::run(opts))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_config_file_is_found_in_either_spelling() {
        let args = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(config_arg(&args(&["aloft-agent", "--config", "a.env"])), Some("a.env"));
        assert_eq!(config_arg(&args(&["aloft-agent", "--config=a.env"])), Some("a.env"));
        assert_eq!(config_arg(&args(&["aloft-agent", "--configx=a.env"])), None);
        assert_eq!(config_arg(&args(&["aloft-agent", "status"])), None);
    }

    #[test]
    fn values_lose_one_pair_of_quotes_as_systemd_reads_them() {
        assert_eq!(unquote("'/etc/aloft/ca.crt'"), "/etc/aloft/ca.crt");
        assert_eq!(unquote("\"https://c:6443\""), "https://c:6443");
        assert_eq!(unquote("plain"), "plain");
        assert_eq!(unquote("'unbalanced"), "'unbalanced");
    }
}
