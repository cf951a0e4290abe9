//! aloftctl: the command-line client. Reads the client config that `aloft-coordinator serve`
//! writes (a kubeconfig), or --server/--token/--certificate-authority, or ALOFT_* variables.
//!
//! The commands are in modules named for them (get, describe, apply, delete, patch, rollout,
//! upgrade, prune); this one holds the command line, the client config, and what they share.

pub mod apply;
pub mod jsonpath;
pub mod pointer;
pub mod print;
pub mod prune;
pub mod upgrade;

mod delete;
mod describe;
mod get;
mod patch;
mod rollout;

use crate::client::{Client, ClientConfig};
use crate::resources::{self, ResourceType};
use aloft_api::build::BuildInfo;
use anyhow::{anyhow, bail, Context, Result};
use apply::apply_files;
use clap::{Parser, Subcommand};
use delete::delete;
use describe::describe;
use get::{get, get_raw, Listing};
use patch::patch_cmd;
use print::Output;
use prune::{list_rendered, prune_rendered};
use rollout::{pool_target, rollout_resume, rollout_status};
use serde_json::Value;
use std::path::PathBuf;

/// Talk to an aloft coordinator: pools, machine configs, nodes.
///
/// Resource types take kubectl's names: machineconfigpools (mcp), machineconfigs (mc), nodes (no),
/// events (ev), nodedisruptionbudgets (ndb), fleetlocks (flk), also as TYPE/NAME.
///
/// Examples:
///   aloftctl apply -f worker-pool.yaml
///   aloftctl get mcp
///   aloftctl get mc -l machineconfiguration.openshift.io/role=worker -o wide
///   aloftctl get mcp worker -o yaml
///   aloftctl patch mcp worker --type merge -p '{"spec":{"paused":true}}'
///   aloftctl describe mcp/worker
///   aloftctl rollout status mcp/worker
///   aloftctl rollout resume mcp/worker
///   aloftctl delete mc 99-worker-ssh
///   aloftctl adm prune renderedmachineconfigs --pool-name worker --confirm
#[derive(Parser)]
#[command(name = "aloftctl", version, verbatim_doc_comment)]
pub struct Cli {
    // The ALOFT_* variables are read in `client_config`, not by clap: an argument clap takes from
    // the environment is shown in every usage line as if it had to be given.
    /// Client config (kubeconfig format). Default: $ALOFT_KUBECONFIG, $KUBECONFIG (its first
    /// file that exists), ~/.config/aloft/kubeconfig, then /var/lib/aloft-coordinator/admin.kubeconfig.
    #[arg(long, global = true)]
    kubeconfig: Option<PathBuf>,
    /// Coordinator URL, overriding the client config [env: ALOFT_SERVER].
    #[arg(long, global = true)]
    server: Option<String>,
    /// Bearer token, overriding the client config [env: ALOFT_TOKEN].
    #[arg(long, global = true)]
    token: Option<String>,
    /// CA certificate file, overriding the client config [env: ALOFT_CA].
    #[arg(long, global = true)]
    certificate_authority: Option<PathBuf>,
    /// Namespace, for namespaced kinds (events).
    #[arg(short = 'n', long, global = true, default_value = "default")]
    namespace: String,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// List objects or show one (tables by default; -o yaml|json|wide|name|jsonpath=|custom-columns=).
    ///
    /// Templates are kubectl's JSONPath: `-o jsonpath='{.status.machineCount}'`,
    /// `-o jsonpath='{range .items[*]}{.metadata.name}{"\n"}{end}'`, a dot in a key escaped
    /// (`{.metadata.annotations.machineconfiguration\.openshift\.io/state}`), a condition by
    /// its type (`{.status.conditions[?(@.type=="Updated")].status}`). A path that finds
    /// nothing prints nothing (`<none>` in a column).
    Get {
        /// TYPE, TYPE,TYPE, TYPE/NAME, or TYPE NAME...
        #[arg(required_unless_present = "raw")]
        args: Vec<String>,
        /// Print what the server answers at this path, as it is (e.g. `/readyz?verbose`,
        /// `/metrics`, `/apis/machineconfiguration.openshift.io/v1/machineconfigpools`).
        #[arg(long, value_name = "PATH", conflicts_with_all = ["args", "output", "selector", "watch"])]
        raw: Option<String>,
        /// Output format: a table (the default), a wider table, the objects as YAML or JSON,
        /// TYPE/NAME per line, a JSONPath template (`jsonpath=TEMPLATE`, `jsonpath-file=FILE`),
        /// or columns of your own (`custom-columns=NAME:.metadata.name,STATE:.metadata.annotations.machineconfiguration\.openshift\.io/state`,
        /// `custom-columns-file=FILE`: headers on its first line, paths on its second).
        #[arg(short = 'o', long, value_parser = Output::parse, value_name = "FORMAT")]
        output: Option<Output>,
        /// Print tables and custom columns without their header line.
        #[arg(long)]
        no_headers: bool,
        /// With -o jsonpath: =false fails the template where an object lacks a field it names,
        /// instead of printing nothing there (kubectl's flag; true by default).
        #[arg(long, default_value_t = true, action = clap::ArgAction::Set, num_args = 0..=1,
              default_missing_value = "true", require_equals = true, value_name = "BOOL")]
        allow_missing_template_keys: bool,
        /// List the objects of every namespace (namespaced kinds: events, OLM's), with a
        /// NAMESPACE column first in tables.
        #[arg(short = 'A', long)]
        all_namespaces: bool,
        /// Sort what is listed by a JSONPath (`.metadata.name`, `{.status.machineCount}`,
        /// `.metadata.creationTimestamp`): numbers by value, text as text, objects without the
        /// field first. With -w, changes come in the order they happen.
        #[arg(long, value_name = "JSONPATH", value_parser = |s: &str| jsonpath::Template::parse_relaxed(s).map_err(|e| e.to_string()))]
        sort_by: Option<jsonpath::Template>,
        /// Label selector, e.g. `machineconfiguration.openshift.io/role=worker`.
        #[arg(short = 'l', long)]
        selector: Option<String>,
        /// After listing, watch for changes and print them.
        #[arg(short = 'w', long)]
        watch: bool,
    },
    /// Show an object in detail: metadata, spec, status, conditions, and the Events about it.
    Describe {
        /// TYPE NAME..., or TYPE/NAME..., e.g. `mcp worker` or `node/worker-0`.
        #[arg(required = true, value_name = "OBJECT")]
        args: Vec<String>,
    },
    /// Create or update objects from files (YAML/JSON, multi-document, directories, - for stdin).
    ///
    /// Objects are applied one by one; one the server refuses does not stop the others, and the
    /// errors (naming the file and document) come at the end, as with kubectl.
    Apply {
        /// A file, a directory (its .yaml, .yml and .json files), or - for stdin; repeatable.
        #[arg(short = 'f', long = "filename", required = true)]
        files: Vec<String>,
        /// Validate on the server without storing: `--dry-run` or `--dry-run=server`
        /// (`client` is taken as `server`: the coordinator checks more than a client could, and
        /// still stores nothing; `none`, the default, applies).
        #[arg(long, value_enum, value_name = "STRATEGY", num_args = 0..=1, require_equals = true,
              default_value = "none", default_missing_value = "server")]
        dry_run: DryRun,
        #[command(flatten)]
        validate: ValidateArg,
    },
    /// Delete objects by TYPE NAME... or from files.
    Delete {
        /// TYPE NAME..., or TYPE/NAME... (or -f).
        #[arg(value_name = "OBJECT")]
        args: Vec<String>,
        /// The objects of a file, a directory, or - for stdin; repeatable.
        #[arg(short = 'f', long = "filename")]
        files: Vec<String>,
        /// Succeed when the object is already gone.
        #[arg(long)]
        ignore_not_found: bool,
    },
    /// Change fields of one object with a merge patch or a JSON patch.
    Patch {
        /// The object: TYPE NAME or TYPE/NAME, e.g. `mcp worker`.
        #[arg(required = true, value_name = "OBJECT")]
        args: Vec<String>,
        /// merge (RFC 7386) or json (RFC 6902).
        #[arg(long = "type", default_value = "merge")]
        patch_type: String,
        /// The patch, as JSON or YAML, e.g. `{"spec":{"paused":true}}`.
        #[arg(short = 'p', long)]
        patch: String,
        /// Patch this subresource of the object instead of the object: `status` (the only one
        /// the coordinator serves).
        #[arg(long, value_parser = ["status"])]
        subresource: Option<String>,
        #[command(flatten)]
        validate: ValidateArg,
    },
    /// List the resource types the coordinator serves.
    ApiResources,
    /// Print aloftctl's version and the coordinator's (its /version), each with the commit it
    /// was built from: after upgrading aloft, which build answers.
    ///
    /// The nodes' agents report theirs as the Node's kubeletVersion (the VERSION column of
    /// `aloftctl get nodes -o wide` and `kubectl get nodes -o wide`).
    Version {
        /// Only aloftctl's own version: no coordinator asked.
        #[arg(long)]
        client: bool,
    },
    /// Follow a pool's rollout (`status`), or resume one its circuit breaker stopped (`resume`).
    Rollout {
        #[command(subcommand)]
        cmd: RolloutCmd,
    },
    /// Administration: `adm upgrade` (the fleet's release and its updates), `adm prune
    /// renderedmachineconfigs`.
    Adm {
        #[command(subcommand)]
        cmd: AdmCmd,
    },
}

/// kubectl's `--validate`: what the server does about fields the kind does not have, sent as
/// `fieldValidation`. Strict by default, as kubectl's (1.27+): a typo such as
/// `spec.maxUnavailble` is refused rather than stored and silently ignored.
#[derive(clap::Args)]
struct ValidateArg {
    /// What the server does with an unknown field (a typo, e.g. spec.maxUnavailble): strict
    /// refuses the write, warn stores it and prints a warning, ignore stores it silently (true =
    /// strict, false = ignore).
    #[arg(
        long = "validate",
        value_enum,
        value_name = "MODE",
        default_value = "strict",
        num_args = 0..=1,
        default_missing_value = "strict",
        ignore_case = true
    )]
    mode: Validate,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum Validate {
    #[value(alias = "true")]
    Strict,
    Warn,
    #[value(alias = "false")]
    Ignore,
}

impl Validate {
    /// The `fieldValidation` query parameter's value.
    fn param(self) -> &'static str {
        match self {
            Validate::Strict => "Strict",
            Validate::Warn => "Warn",
            Validate::Ignore => "Ignore",
        }
    }
}

/// `apply --dry-run[=STRATEGY]`, kubectl's values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum DryRun {
    None,
    Server,
    Client,
}

#[derive(Subcommand)]
enum AdmCmd {
    /// Show the fleet's release and the updates its update graph offers, or start one, as `oc
    /// adm upgrade` does. The ClusterVersion named "version" holds it all.
    ///
    /// Examples:
    ///   aloftctl adm upgrade
    ///   aloftctl adm upgrade --include-not-recommended
    ///   aloftctl adm upgrade --to 1.2.0
    ///   aloftctl adm upgrade --to-image 'ostree+http://repo/os#aloft/x86_64@<sha256>' --to 1.2.0 --allow-explicit-upgrade
    ///   aloftctl adm upgrade channel stable-1
    ///   aloftctl rollout status mcp/worker        (follow the rollout the update starts)
    #[command(verbatim_doc_comment, args_conflicts_with_subcommands = true)]
    Upgrade {
        #[command(subcommand)]
        cmd: Option<UpgradeCmd>,
        /// Update to this version, one of the available updates (or, with --to-image, the
        /// version of that image).
        #[arg(long, value_name = "VERSION")]
        to: Option<String>,
        /// Update to this payload (an osImageURL), which the graph need not offer.
        #[arg(long, value_name = "IMAGE")]
        to_image: Option<String>,
        /// Needed with --to-image: the release may not be one the graph offers from this one.
        #[arg(long)]
        allow_explicit_upgrade: bool,
        /// Update to a release the graph offers only with risks that apply (or could not be
        /// evaluated).
        #[arg(long)]
        allow_not_recommended: bool,
        /// Take the release although the coordinator's preconditions fail (a rollback, a hop over
        /// a minor release); what was overridden is kept in the history.
        #[arg(long)]
        force: bool,
        /// Also list the updates the graph offers with risks that apply.
        #[arg(long)]
        include_not_recommended: bool,
    },
    /// Delete objects nothing needs any more.
    Prune {
        #[command(subcommand)]
        cmd: PruneCmd,
    },
    /// Print the Ignition config a new host boots with: it fetches POOL's config from the
    /// coordinator's /config/POOL at first boot (the pool's files, units and SSH keys, and the
    /// agent's enrollment settings), pinning the coordinator's CA and sending the bootstrap
    /// token, as OpenShift's worker.ign points at the machine-config-server. The token is
    /// checked first: it must be one whose nodes join POOL.
    ///
    /// Examples:
    ///   aloft-coordinator token create --name fleet --role bootstrap > bootstrap.token
    ///   aloftctl adm pointer-ignition worker --bootstrap-token-file bootstrap.token > worker.ign
    ///   aloftctl adm pointer-ignition infra --bootstrap-token-file infra.token \
    ///       --host-server https://fleet.example:6443 > infra.ign
    #[command(verbatim_doc_comment)]
    PointerIgnition {
        /// The pool whose config the host takes.
        pool: String,
        /// A bootstrap token whose nodes join the pool (written into the config: keep the
        /// output as secret as the token).
        #[arg(long, value_name = "FILE")]
        bootstrap_token_file: PathBuf,
        /// The coordinator's URL as new hosts reach it (default: this client's server), e.g.
        /// a name in the coordinator's --tls-san.
        #[arg(long, value_name = "URL")]
        host_server: Option<String>,
        /// Make it for a coordinator on plain HTTP (serve --insecure-http): the token and the
        /// pool's config then travel unencrypted.
        #[arg(long)]
        insecure_http: bool,
    },
}

#[derive(Subcommand)]
enum UpgradeCmd {
    /// Follow another channel of the update service (none given, or an empty string: none).
    ///
    /// The channels the current release is in (`status.desired.channels`, from the update
    /// graph) are the ones it can be followed on: another is refused, as `oc adm upgrade
    /// channel` refuses it, unless --allow-explicit-channel (a channel the fleet's release
    /// joins later, say). Clearing a channel the release is in needs the flag too.
    Channel {
        /// The channel, e.g. stable-1.
        #[arg(default_value = "")]
        channel: String,
        /// Set the channel even when the current release is not in it.
        #[arg(long)]
        allow_explicit_channel: bool,
    },
}

#[derive(Subcommand)]
enum PruneCmd {
    /// Delete rendered MachineConfigs no pool and no node uses, oldest first, as `oc adm prune
    /// renderedmachineconfigs` does. A dry run unless --confirm. `list` shows them all.
    ///
    /// Examples:
    ///   aloftctl adm prune renderedmachineconfigs list --in-use false
    ///   aloftctl adm prune renderedmachineconfigs --pool-name worker
    ///   aloftctl adm prune renderedmachineconfigs --pool-name worker --count 2 --confirm
    #[command(name = "renderedmachineconfigs", verbatim_doc_comment, args_conflicts_with_subcommands = true)]
    RenderedMachineConfigs {
        #[command(subcommand)]
        cmd: Option<RenderedCmd>,
        /// Only this pool's rendered configs.
        #[arg(long)]
        pool_name: Option<String>,
        /// Delete at most this many (the oldest unused ones).
        #[arg(long)]
        count: Option<usize>,
        /// Delete; without it, only say what would be deleted.
        #[arg(long)]
        confirm: bool,
    },
}

#[derive(Subcommand)]
enum RenderedCmd {
    /// List rendered MachineConfigs by pool, with whether they are in use.
    List {
        /// Only this pool's rendered configs.
        #[arg(long)]
        pool_name: Option<String>,
        /// Only those in use (true) or unused (false).
        #[arg(long)]
        in_use: Option<bool>,
    },
}

/// The pool argument of `rollout status|resume`, as [`rollout::pool_target`] parses it.
const POOL_HELP: &str = "The pool: mcp/NAME or mcp NAME (e.g. mcp/worker)";
const POOL_LONG_HELP: &str = "The pool, as TYPE/NAME or TYPE NAME, e.g. mcp/worker or mcp worker. TYPE is mcp, \
machineconfigpool or machineconfigpools (any case, also with .machineconfiguration.openshift.io).";

#[derive(Subcommand)]
enum RolloutCmd {
    /// Follow a pool's rollout, e.g. `aloftctl rollout status mcp/worker`.
    ///
    /// Waits until every node of the pool runs its target. A pool whose render has not caught up
    /// with a change is not taken as updated: neither while its status is older than its spec,
    /// nor while it selects a MachineConfig its target was not rendered from (a new one). A
    /// MachineConfig changed under its old name cannot be told from the client: for that, name
    /// the pool's target before the change with --not-config, e.g.
    ///   OLD=$(aloftctl get mcp worker -o json | jq -r .spec.configuration.name)
    ///   aloftctl apply -f 99-worker-edited.yaml
    ///   aloftctl rollout status mcp/worker --not-config "$OLD"
    /// Fails when the pool is degraded or its circuit breaker is open (unless the target is
    /// still the --not-config one); says so and waits while the pool is paused. Once the
    /// coordinator has answered, waits through connection errors and server errors (a
    /// coordinator restart), with a warning, until the timeout; fails after 10 s when no request
    /// has reached a coordinator yet (a wrong --server, a CA it does not match), and at once on
    /// an unknown pool or a token without access. The timeout bounds the whole wait, a
    /// coordinator that stops answering included. With --watch=false, prints where the rollout
    /// stands once and exits (0 unless it failed), as `kubectl rollout status --watch=false`.
    /// Exit status: 0 once updated, 1 on a failure or a timeout (the message says which), 2 on a
    /// usage error.
    #[command(
        verbatim_doc_comment,
        override_usage = "aloftctl rollout status [OPTIONS] mcp/NAME\n       aloftctl rollout status [OPTIONS] mcp NAME"
    )]
    Status {
        #[arg(required = true, num_args = 1..=2, value_name = "POOL", help = POOL_HELP, long_help = POOL_LONG_HELP)]
        target: Vec<String>,
        /// Give up after this long: seconds (`300`) or a duration (`90s`, `5m`, `1h30m`); 0 (the
        /// default, as `kubectl rollout status`) waits for good: a 50-node pool of 4-minute
        /// reboots, one at a time, takes over three hours.
        #[arg(long, default_value = "0", value_parser = parse_timeout, value_name = "DURATION")]
        timeout: u64,
        /// Wait for a target other than this rendered config (the one before a change), and
        /// do not fail on a degradation while the target is still this one.
        #[arg(long, value_name = "OLD")]
        not_config: Option<String>,
        /// Follow the rollout until it ends (the default); `--watch=false` prints where it
        /// stands once and exits (a failure a change just made may have made stale is looked
        /// at again for up to 10 s first).
        #[arg(short = 'w', long, default_value_t = true, action = clap::ArgAction::Set, value_name = "BOOL")]
        watch: bool,
    },
    /// Close a pool's circuit breaker: the nodes that failed so far are forgiven and the
    /// rollout of the same config continues. e.g. `aloftctl rollout resume mcp/worker`. A pool
    /// whose circuit breaker is not open is an error, and nothing is written.
    #[command(
        override_usage = "aloftctl rollout resume [OPTIONS] mcp/NAME\n       aloftctl rollout resume [OPTIONS] mcp NAME"
    )]
    Resume {
        #[arg(required = true, num_args = 1..=2, value_name = "POOL", help = POOL_HELP, long_help = POOL_LONG_HELP)]
        target: Vec<String>,
    },
}

fn default_kubeconfig() -> Option<PathBuf> {
    let home = std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".config/aloft/kubeconfig"));
    let system = PathBuf::from("/var/lib/aloft-coordinator/admin.kubeconfig");
    home.filter(|p| p.exists()).or_else(|| system.exists().then_some(system))
}

/// An ALOFT_* variable's value; an empty one counts as unset, as kubectl treats an empty
/// KUBECONFIG.
fn env_value(var: &str) -> Option<std::ffi::OsString> {
    std::env::var_os(var).filter(|v| !v.is_empty())
}

fn client_config(cli: &Cli) -> Result<ClientConfig> {
    let text = |v: std::ffi::OsString| v.to_string_lossy().into_owned();
    let server = cli.server.clone().or_else(|| env_value("ALOFT_SERVER").map(text));
    let token = cli.token.clone().or_else(|| env_value("ALOFT_TOKEN").map(text));
    let ca = cli.certificate_authority.clone().or_else(|| env_value("ALOFT_CA").map(PathBuf::from));
    // Then $KUBECONFIG, as kubectl reads it (the first file of its list that exists): the file
    // `serve` writes is for both, and README's kubectl examples export KUBECONFIG; without it, a
    // coordinator host's default file could be another coordinator's.
    let kubeconfig =
        cli.kubeconfig.clone().or_else(|| env_value("ALOFT_KUBECONFIG").map(PathBuf::from)).or_else(|| {
            let list = env_value("KUBECONFIG")?;
            std::env::split_paths(&list).find(|p| !p.as_os_str().is_empty() && p.exists())
        });
    let mut cfg = match kubeconfig.or_else(default_kubeconfig) {
        Some(p) => ClientConfig::from_kubeconfig(&p)?,
        None => ClientConfig::default(),
    };
    let from = match &server {
        Some(s) => {
            cfg.server = s.clone();
            "--server (or ALOFT_SERVER)".to_string()
        }
        None => "the client config's server".to_string(),
    };
    // Said here, naming where the address came from; the client would only say the scheme is
    // wrong.
    if !cfg.server.is_empty() {
        let want = "https:// (or http:// for a coordinator started with --insecure-http)";
        match cfg.server.split_once("://") {
            Some((scheme, _)) if scheme.eq_ignore_ascii_case("https") || scheme.eq_ignore_ascii_case("http") => {}
            Some((scheme, _)) => bail!("{from} is {:?}: its scheme must be {want}, not {scheme}://", cfg.server),
            None => {
                bail!("{from} is {:?}: it must be a URL starting with {want}, e.g. https://{}", cfg.server, cfg.server)
            }
        }
    }
    if let Some(t) = &token {
        cfg.token = Some(t.clone());
    }
    if let Some(ca) = &ca {
        cfg.ca_pem = Some(std::fs::read(ca).with_context(|| format!("reading CA {}", ca.display()))?);
    }
    if cfg.server.is_empty() {
        bail!("no coordinator to talk to: pass --kubeconfig DIR/admin.kubeconfig (written by `aloft-coordinator serve`), or --server and --token");
    }
    Ok(cfg)
}

fn resolve(name: &str) -> Result<&'static ResourceType> {
    resources::by_name(name)
        .ok_or_else(|| anyhow!("the server doesn't have a resource type {name:?} (try `aloftctl api-resources`)"))
}

/// `TYPE NAME...` or `TYPE/NAME ...` into (type, names).
fn targets(args: &[String]) -> Result<Vec<(&'static ResourceType, Option<String>)>> {
    if args.iter().all(|a| a.contains('/')) {
        return args
            .iter()
            .map(|a| {
                let (t, n) = a.split_once('/').unwrap_or((a, ""));
                let rt = resolve(t)?;
                if n.is_empty() || n.contains('/') {
                    return Err(Usage(format!("{a:?}: want TYPE/NAME, e.g. {}/NAME", rt.singular)).into());
                }
                Ok((rt, Some(n.to_string())))
            })
            .collect();
    }
    let rt = resolve(&args[0])?;
    if args.len() == 1 {
        return Ok(vec![(rt, None)]);
    }
    Ok(args[1..].iter().map(|n| (rt, Some(n.clone()))).collect())
}

/// Items per page when listing, as kubectl's default `--chunk-size`.
const PAGE: usize = 500;

/// A whole collection (`path`, a list URL) read in pages of [`PAGE`], as kubectl reads it: the
/// coordinator serves every page from the first one's snapshot, so the joined pages are the list
/// one unpaged request would return, without one response holding a whole fleet. `accept`
/// asks for a Table (its `rows` are joined) or, when None, the list's `items`.
async fn list_in_pages(client: &Client, path: &str, accept: Option<&str>) -> Result<Value> {
    let key = if accept.is_some() { "rows" } else { "items" };
    let sep = if path.contains('?') { '&' } else { '?' };
    let mut whole: Option<Value> = None;
    let mut token = String::new();
    loop {
        let url = format!("{path}{sep}limit={PAGE}&continue={token}");
        let mut page = client.call(reqwest::Method::GET, &url, None, accept).await?.into_result()?;
        let next = page.pointer("/metadata/continue").and_then(Value::as_str).unwrap_or("").to_string();
        match whole.as_mut() {
            None => whole = Some(page),
            Some(w) => {
                // Moved out of the page, not copied.
                let more = match page.get_mut(key).map(Value::take) {
                    Some(Value::Array(more)) => more,
                    _ => Vec::new(),
                };
                if let Some(all) = w.get_mut(key).and_then(Value::as_array_mut) {
                    all.extend(more);
                }
            }
        }
        if next.is_empty() {
            break;
        }
        token = next;
    }
    let mut whole = whole.unwrap_or_default();
    // Joined: nothing remains to continue from.
    if let Some(meta) = whole.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.remove("continue");
        meta.remove("remainingItemCount");
    }
    Ok(whole)
}

fn with_query(path: String, q: &[(&str, String)]) -> String {
    if q.is_empty() {
        return path;
    }
    let enc = |s: &str| percent_encoding::utf8_percent_encode(s, percent_encoding::NON_ALPHANUMERIC).to_string();
    let qs: Vec<String> = q.iter().map(|(k, v)| format!("{k}={}", enc(v))).collect();
    format!("{path}?{}", qs.join("&"))
}

/// Run aloftctl with the process arguments; `build` is the binary's
/// ([`aloft_api::build_info!`]), for `--version` and `aloftctl version`.
pub async fn main(build: BuildInfo) -> Result<()> {
    use clap::{CommandFactory, FromArgMatches};
    crate::client::install_crypto();
    // clap keeps a version as `&'static str`: one small string, once per run of the command.
    let long: &'static str = Box::leak(build.long_version().into_boxed_str());
    let matches = Cli::command().version(long).get_matches();
    let cli = match Cli::from_arg_matches(&matches) {
        Ok(cli) => cli,
        Err(e) => e.exit(),
    };
    if let Cmd::Version { client: true } = cli.cmd {
        println!("Client Version: {}", build.long_version());
        return Ok(());
    }
    // A usage error is one whatever the configuration: said before a missing one is.
    if let Cmd::Rollout { cmd: RolloutCmd::Status { target, .. } } = &cli.cmd {
        pool_target(target, "status")?;
    }
    if let Cmd::Rollout { cmd: RolloutCmd::Resume { target } } = &cli.cmd {
        pool_target(target, "resume")?;
    }
    let config = client_config(&cli)?;
    let client = Client::new(&config)?.on_warning(print_warnings());
    // `-n ''` is the default namespace, as kubectl takes it (an empty one is every namespace
    // to the API, which is `-A`'s to ask for).
    let ns = if cli.namespace.is_empty() { "default".to_string() } else { cli.namespace.clone() };
    match cli.cmd {
        Cmd::Get { raw: Some(path), .. } => get_raw(&client, &path).await,
        Cmd::Get {
            args,
            output,
            no_headers,
            allow_missing_template_keys,
            all_namespaces,
            sort_by,
            selector,
            watch,
            raw: None,
        } => {
            let output = match output {
                Some(print::Output::JsonPath(t)) if !allow_missing_template_keys => {
                    Some(print::Output::JsonPath(t.missing_keys_fail()))
                }
                o => o,
            };
            let how = Listing { output, no_headers, sort_by, all_namespaces };
            // "" is every namespace, as Kubernetes' NamespaceAll.
            get(&client, if all_namespaces { "" } else { &ns }, &args, how, selector, watch).await
        }
        Cmd::Describe { args } => describe(&client, &ns, &args).await,
        Cmd::Apply { files, dry_run, validate } => {
            apply_files(&client, &ns, &files, dry_run != DryRun::None, validate.mode).await
        }
        Cmd::Delete { args, files, ignore_not_found } => delete(&client, &ns, &args, &files, ignore_not_found).await,
        Cmd::Patch { args, patch_type, patch, subresource, validate } => {
            patch_cmd(&client, &ns, &args, (&patch_type, &patch), subresource, validate.mode).await
        }
        Cmd::Rollout { cmd: RolloutCmd::Status { target, timeout, not_config, watch } } => {
            rollout_status(&client, &target, timeout, not_config.as_deref(), watch).await
        }
        Cmd::Rollout { cmd: RolloutCmd::Resume { target } } => rollout_resume(&client, &target).await,
        Cmd::Adm {
            cmd: AdmCmd::Upgrade { cmd: Some(UpgradeCmd::Channel { channel, allow_explicit_channel }), .. },
        } => upgrade::channel(&client, &channel, allow_explicit_channel).await,
        Cmd::Adm {
            cmd:
                AdmCmd::Upgrade {
                    cmd: None,
                    to,
                    to_image,
                    allow_explicit_upgrade,
                    allow_not_recommended,
                    force,
                    include_not_recommended,
                },
        } => {
            if to.is_none() && to_image.is_none() {
                upgrade::show(&client, include_not_recommended).await
            } else {
                let req = upgrade::Request {
                    to: to.as_deref(),
                    to_image: to_image.as_deref(),
                    allow_explicit_upgrade,
                    allow_not_recommended,
                    force,
                };
                upgrade::start(&client, &req).await
            }
        }
        Cmd::Adm { cmd: AdmCmd::PointerIgnition { pool, bootstrap_token_file, host_server, insecure_http } } => {
            pointer::run(&config, &pool, &bootstrap_token_file, host_server.as_deref(), insecure_http).await
        }
        Cmd::Adm {
            cmd: AdmCmd::Prune { cmd: PruneCmd::RenderedMachineConfigs { cmd, pool_name, count, confirm } },
        } => match cmd {
            Some(RenderedCmd::List { pool_name, in_use }) => list_rendered(&client, pool_name.as_deref(), in_use).await,
            None => prune_rendered(&client, pool_name.as_deref(), count, confirm).await,
        },
        Cmd::Version { .. } => {
            println!("Client Version: {}", build.long_version());
            let server = client.get("/version").await?.into_result()?;
            println!("Server Version: {}", server_version(&server));
            Ok(())
        }
        Cmd::ApiResources => {
            let rows: Vec<Vec<String>> = resources::ALL
                .iter()
                .map(|r| {
                    vec![
                        r.plural.to_string(),
                        r.short_names.join(","),
                        r.api_version(),
                        r.namespaced.to_string(),
                        r.kind.to_string(),
                    ]
                })
                .collect();
            print!("{}", print::plain_table(&["NAME", "SHORTNAMES", "APIVERSION", "NAMESPACED", "KIND"], &rows));
            Ok(())
        }
    }
}

/// A coordinator's `/version` in `--version`'s words: aloft's version (after `+aloft-` in
/// gitVersion) and commit, and the Kubernetes API level it follows. Another server's answer
/// (a kube-apiserver) is shown as its gitVersion.
fn server_version(v: &Value) -> String {
    let s = |k: &str| v[k].as_str().unwrap_or("").to_string();
    let git_version = s("gitVersion");
    let Some((kube, aloft)) = git_version.split_once("+aloft-") else {
        return format!("{git_version} (not an aloft coordinator)");
    };
    format!(
        "{} (Kubernetes API {kube})",
        aloft_api::build::describe(aloft, &s("gitCommit"), &s("gitTreeState"), &s("buildDate"))
    )
}

/// Print each warning the coordinator answers with to stderr as kubectl does
/// (`Warning: unknown field "spec.x"`), each text once per run as kubectl's deduplicating
/// warning writer does: a typo repeated in several applied documents is one line.
fn print_warnings() -> crate::client::WarningHandler {
    let seen = std::sync::Mutex::new(std::collections::HashSet::new());
    std::sync::Arc::new(move |text: &str| {
        let new = seen.lock().map(|mut s| s.insert(text.to_string())).unwrap_or(true);
        if new {
            eprintln!("Warning: {text}");
        }
    })
}

/// The errors of the objects a command could not read or delete, after it did the others (as
/// kubectl), each on its line.
fn objects_failed(errors: Vec<String>) -> Result<()> {
    if errors.is_empty() {
        return Ok(());
    }
    Err(anyhow!(errors.join("\n")))
}

/// `--timeout`: whole seconds, or a duration as kubectl and oc take one (`90s`, `5m`, `1h30m`).
fn parse_timeout(s: &str) -> Result<u64, String> {
    if let Ok(secs) = s.parse::<u64>() {
        return Ok(secs);
    }
    // Rounded up: `500ms` is a second, not 0 (which waits for good).
    humantime::parse_duration(s)
        .map(|d| d.as_secs() + u64::from(d.subsec_nanos() > 0))
        .map_err(|e| format!("{e}: want seconds (300) or a duration (90s, 5m, 1h30m)"))
}

/// A command line that does not say what to do, as clap's own errors are: exit status 2, so
/// that a script can tell a typo from a rollout that failed (1).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct Usage(pub String);

#[cfg(test)]
mod tests {
    use super::*;

    use serde_json::json;

    #[test]
    fn a_server_version_is_read_as_aloft_or_shown_as_it_is() {
        let aloft = json!({"gitVersion": "v1.32.0+aloft-0.2.0", "gitCommit": "0123456789abcdef0123",
            "gitTreeState": "dirty", "buildDate": "2026-11-30T19:00:00Z"});
        assert_eq!(
            server_version(&aloft),
            "0.2.0 (commit 0123456789ab, dirty tree, 2026-11-30T19:00:00Z) (Kubernetes API v1.32.0)"
        );
        let unrecorded = json!({"gitVersion": "v1.32.0+aloft-0.1.0", "gitCommit": ""});
        assert!(
            server_version(&unrecorded).starts_with("0.1.0 (source commit not recorded"),
            "{}",
            server_version(&unrecorded)
        );
        let kube = json!({"gitVersion": "v1.31.4", "gitCommit": "abc"});
        assert_eq!(server_version(&kube), "v1.31.4 (not an aloft coordinator)");
    }

    #[test]
    fn timeouts_are_seconds_or_durations() {
        assert_eq!(parse_timeout("300"), Ok(300));
        assert_eq!(parse_timeout("90s"), Ok(90));
        assert_eq!(parse_timeout("5m"), Ok(300));
        assert_eq!(parse_timeout("1h30m"), Ok(5400));
        // Under a second is a second, not 0 (which waits for good).
        assert_eq!(parse_timeout("500ms"), Ok(1));
        assert_eq!(parse_timeout("1500ms"), Ok(2));
        assert_eq!(parse_timeout("0"), Ok(0));
        assert!(parse_timeout("5q").unwrap_err().contains("want seconds (300) or a duration"));
        assert!(parse_timeout("-1").is_err());
        // `rollout status` waits for good unless told otherwise, as kubectl's.
        let cli = Cli::try_parse_from(["aloftctl", "rollout", "status", "mcp/worker"]).unwrap();
        assert!(matches!(cli.cmd, Cmd::Rollout { cmd: RolloutCmd::Status { timeout: 0, .. } }));
    }
}
