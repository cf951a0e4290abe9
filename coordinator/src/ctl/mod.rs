//! aloftctl: the command-line client. Reads the client config that `aloft-coordinator serve`
//! writes (a kubeconfig), or --server/--token/--certificate-authority, or ALOFT_* variables.

pub mod apply;
pub mod jsonpath;
pub mod print;
pub mod prune;
pub mod upgrade;

use crate::client::{resource_path, Client, ClientConfig};
use crate::resources::{self, ResourceType};
use aloft_api::build::BuildInfo;
use anyhow::{anyhow, bail, Context, Result};
use clap::{Parser, Subcommand};
use print::Output;
use serde_json::Value;
use std::path::PathBuf;

const TABLE_ACCEPT: &str = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json";

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
}

#[derive(Subcommand)]
enum UpgradeCmd {
    /// Follow another channel of the update service (an empty string: none).
    Channel {
        /// The channel, e.g. stable-1.
        channel: String,
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

/// The pool argument of `rollout status|resume`, as [`pool_target`] parses it.
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
    let client = Client::new(&client_config(&cli)?)?.on_warning(print_warnings());
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
        Cmd::Adm { cmd: AdmCmd::Upgrade { cmd: Some(UpgradeCmd::Channel { channel }), .. } } => {
            upgrade::channel(&client, &channel).await
        }
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

/// `get --raw PATH`: the body on stdout as it came; an answer other than 2xx is an error carrying
/// the body (a failing `/readyz` lists its checks there).
async fn get_raw(client: &Client, path: &str) -> Result<()> {
    if !path.starts_with('/') {
        return Err(Usage(format!(
            "--raw takes a path from the server's root, starting with '/' (e.g. /readyz?verbose), not {path:?}"
        ))
        .into());
    }
    let (code, body) = client.get_raw(path).await?;
    let text = String::from_utf8_lossy(&body);
    if !(200..300).contains(&code) {
        bail!("the server answered {code} for {path}: {}", text.trim_end());
    }
    print!("{text}");
    Ok(())
}

/// `get`'s arguments by resource type, in the order given: `TYPE[,TYPE...] [NAME...]` or
/// `TYPE/NAME...`. A type without names stands for its whole collection.
fn get_targets(args: &[String]) -> Result<Vec<(&'static ResourceType, Vec<String>)>> {
    let mut groups: Vec<(&'static ResourceType, Vec<String>)> = Vec::new();
    let mut add = |rt: &'static ResourceType, name: Option<&str>| {
        let i = groups.iter().position(|(g, _)| g.plural == rt.plural).unwrap_or_else(|| {
            groups.push((rt, Vec::new()));
            groups.len() - 1
        });
        groups[i].1.extend(name.map(str::to_string));
    };
    if args.iter().all(|a| a.contains('/')) {
        for a in args {
            let (t, n) = a.split_once('/').unwrap_or((a, ""));
            if n.is_empty() {
                bail!("{a:?}: no name after the '/' (TYPE/NAME)");
            }
            add(resolve(t)?, Some(n));
        }
    } else {
        let first = args.first().ok_or_else(|| anyhow!("get needs a TYPE (see `aloftctl api-resources`)"))?;
        for t in first.split(',') {
            let rt = resolve(t)?;
            add(rt, None);
            for n in &args[1..] {
                add(rt, Some(n));
            }
        }
    }
    Ok(groups)
}

/// The errors of the objects a command could not read or delete, after it did the others (as
/// kubectl), each on its line.
fn objects_failed(errors: Vec<String>) -> Result<()> {
    if errors.is_empty() {
        return Ok(());
    }
    Err(anyhow!(errors.join("\n")))
}

fn resource_version(v: &Value) -> String {
    v.pointer("/metadata/resourceVersion").and_then(Value::as_str).unwrap_or("0").to_string()
}

/// What `--sort-by` found in an object, ordered as [`jsonpath::sort_order`] orders it.
struct SortKey(Option<Value>);

impl PartialEq for SortKey {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == std::cmp::Ordering::Equal
    }
}

impl Eq for SortKey {}

impl Ord for SortKey {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        jsonpath::sort_order(self.0.as_ref(), other.0.as_ref())
    }
}

impl PartialOrd for SortKey {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

/// The path of `rt`'s objects in namespace `ns` (of every namespace when `ns` is empty, as
/// Kubernetes' NamespaceAll), or of the one named.
fn ns_path(rt: &ResourceType, ns: &str, name: Option<&str>) -> String {
    let mut r = rt.path_ref();
    if ns.is_empty() {
        r.namespaced = false;
    }
    resource_path(r, Some(ns), name)
}

/// How `get` prints what it reads.
struct Listing {
    output: Option<Output>,
    no_headers: bool,
    sort_by: Option<jsonpath::Template>,
    all_namespaces: bool,
}

impl Listing {
    /// The table printer for objects of `rt`.
    fn table_printer(&self, rt: &ResourceType) -> print::TablePrinter {
        let mut p = print::TablePrinter::new(self.output == Some(Output::Wide));
        if self.no_headers {
            p = p.without_header();
        }
        if self.all_namespaces && rt.namespaced {
            p = p.with_namespace();
        }
        p
    }

    /// Asks table rows to carry their objects when they are to be sorted by them.
    fn table_query<'a>(&self, q: &[(&'a str, String)]) -> Vec<(&'a str, String)> {
        let mut q = q.to_vec();
        if self.sort_by.is_some() {
            q.push(("includeObject", "Object".into()));
        }
        q
    }

    /// A Table's rows in `--sort-by`'s order.
    fn sort_rows(&self, t: &mut Value) -> Result<()> {
        static NONE: Value = Value::Null;
        match t.get_mut("rows").and_then(Value::as_array_mut) {
            Some(rows) => self.sort_objects(rows, |r| r.get("object").unwrap_or(&NONE)),
            None => Ok(()),
        }
    }

    /// Objects in `--sort-by`'s order; as kubectl, a path none of them has is an error (a
    /// typo would otherwise print the list unsorted, as if it were).
    fn sort_objects<T>(&self, items: &mut [T], object: impl Fn(&T) -> &Value) -> Result<()> {
        let Some(key) = &self.sort_by else { return Ok(()) };
        let mut found_any = false;
        for item in items.iter() {
            found_any |= !key.find(object(item))?.is_empty();
        }
        if !items.is_empty() && !found_any {
            bail!("couldn't find any field with path {:?} in the list of objects", key.text());
        }
        // Stable: objects with equal keys keep the server's order.
        items.sort_by_cached_key(|item| {
            SortKey(key.find(object(item)).ok().and_then(|found| found.first().map(|v| Value::clone(v))))
        });
        Ok(())
    }
}

async fn get(
    client: &Client,
    ns: &str,
    args: &[String],
    how: Listing,
    selector: Option<String>,
    watch: bool,
) -> Result<()> {
    let mut q = Vec::new();
    if let Some(s) = &selector {
        q.push(("labelSelector", s.clone()));
    }
    let groups = get_targets(args)?;
    if how.all_namespaces && groups.iter().any(|(rt, names)| rt.namespaced && !names.is_empty()) {
        // kubectl's refusal: a name is one object, in one namespace.
        return Err(Usage("a resource cannot be retrieved by name across all namespaces".into()).into());
    }
    if selector.is_some() && groups.iter().any(|(_, names)| !names.is_empty()) {
        // kubectl's refusal: a name would be read whether or not it matched, which looks like a
        // match.
        return Err(Usage("name cannot be provided when a selector is specified".into()).into());
    }
    if watch {
        return match groups.as_slice() {
            [(rt, names)] if names.len() <= 1 => {
                watch_get(client, ns, rt, names.first().map(String::as_str), &q, &how).await
            }
            _ => Err(Usage(format!(
                "watch is only supported on one object or one type's collection, not {:?}",
                args.join(" ")
            ))
            .into()),
        };
    }
    match &how.output {
        None | Some(Output::Wide) => get_tables(client, ns, &groups, &how.table_query(&q), &how).await,
        Some(fmt) => get_objects(client, ns, &groups, &q, fmt, &how).await,
    }
}

/// A table per type (one for all the names of a type), separated by a blank line as kubectl does.
async fn get_tables(
    client: &Client,
    ns: &str,
    groups: &[(&'static ResourceType, Vec<String>)],
    q: &[(&str, String)],
    how: &Listing,
) -> Result<()> {
    let mut errors = Vec::new();
    let mut printed = false;
    for (rt, names) in groups {
        let mut t = if names.is_empty() {
            // One type that cannot be listed (a token without access to it) does not hide the
            // others' tables: its error comes at the end, as kubectl's does.
            let path = with_query(ns_path(rt, ns, None), q);
            match list_in_pages(client, &path, Some(TABLE_ACCEPT)).await {
                Ok(t) => t,
                Err(e) => {
                    errors.push(format!("{e:#}"));
                    continue;
                }
            }
        } else {
            named_table(client, ns, rt, names, q, &mut errors).await?
        };
        how.sort_rows(&mut t)?;
        let text = how.table_printer(rt).rows(&t);
        if text.is_empty() {
            continue;
        }
        if printed {
            println!();
        }
        print!("{text}");
        printed = true;
    }
    if !printed && errors.is_empty() {
        eprintln!("No resources found.");
    }
    objects_failed(errors)
}

/// One Table of the named objects: the first answer's columns and every answer's rows. What
/// cannot be read goes to `errors`.
async fn named_table(
    client: &Client,
    ns: &str,
    rt: &ResourceType,
    names: &[String],
    q: &[(&str, String)],
    errors: &mut Vec<String>,
) -> Result<Value> {
    let mut whole: Option<Value> = None;
    for n in names {
        let path = with_query(ns_path(rt, ns, Some(n)), q);
        let mut t = match client.call(reqwest::Method::GET, &path, None, Some(TABLE_ACCEPT)).await?.into_result() {
            Ok(t) => t,
            Err(e) => {
                errors.push(format!("{e:#}"));
                continue;
            }
        };
        match whole.as_mut().and_then(|w| w.get_mut("rows")).and_then(Value::as_array_mut) {
            Some(rows) => {
                if let Some(Value::Array(more)) = t.get_mut("rows").map(Value::take) {
                    rows.extend(more);
                }
            }
            None => whole = Some(t),
        }
    }
    Ok(whole.unwrap_or_default())
}

/// Objects as YAML, JSON, names or a template's text: one object asked for by name as itself,
/// anything else as one `List`, as kubectl prints them; custom columns a row per object.
async fn get_objects(
    client: &Client,
    ns: &str,
    groups: &[(&'static ResourceType, Vec<String>)],
    q: &[(&str, String)],
    fmt: &Output,
    how: &Listing,
) -> Result<()> {
    let mut errors = Vec::new();
    let mut items: Vec<(&'static ResourceType, Value)> = Vec::new();
    for (rt, names) in groups {
        if names.is_empty() {
            let path = with_query(ns_path(rt, ns, None), q);
            let mut list = match list_in_pages(client, &path, None).await {
                Ok(l) => l,
                Err(e) => {
                    errors.push(format!("{e:#}"));
                    continue;
                }
            };
            if let Some(Value::Array(all)) = list.get_mut("items").map(Value::take) {
                items.extend(all.into_iter().map(|mut o| {
                    with_kind(rt, &mut o);
                    (*rt, o)
                }));
            }
            continue;
        }
        for n in names {
            let path = with_query(ns_path(rt, ns, Some(n)), q);
            match client.get(&path).await?.into_result() {
                Ok(o) => items.push((*rt, o)),
                Err(e) => errors.push(format!("{e:#}")),
            }
        }
    }
    let single = matches!(groups, [(_, names)] if names.len() == 1);
    how.sort_objects(&mut items, |(_, o)| o)?;
    if let Output::CustomColumns(cols) = fmt {
        let objects: Vec<&Value> = items.iter().map(|(_, o)| o).collect();
        let mut printer = print::TablePrinter::for_custom_columns(how.no_headers);
        print!("{}", printer.rows(&print::custom_table(cols, &objects)?));
        if items.is_empty() && errors.is_empty() {
            eprintln!("No resources found.");
        }
    } else if single || *fmt == Output::Name {
        let mut printer = print::ObjectPrinter::new(fmt.clone(), how.no_headers);
        for (rt, o) in &items {
            print!("{}", printer.text(rt, o)?);
        }
    } else if !items.is_empty() || errors.is_empty() {
        let items: Vec<Value> = items.into_iter().map(|(_, o)| o).collect();
        let list = serde_json::json!({"apiVersion": "v1", "kind": "List", "items": items});
        match fmt {
            Output::Json => print!("{}", print::json(&list)),
            Output::JsonPath(t) => print!("{}", print::term_safe(&t.render(&list)?)),
            _ => print!("{}", print::yaml_document(&list)),
        }
    }
    objects_failed(errors)
}

/// Items of a list carry no `apiVersion` and `kind` in Kubernetes; a `List` of several types
/// needs them, and kubectl prints them.
fn with_kind(rt: &ResourceType, obj: &mut Value) {
    if let Some(m) = obj.as_object_mut() {
        m.entry("apiVersion").or_insert_with(|| rt.api_version().into());
        m.entry("kind").or_insert_with(|| rt.kind.into());
    }
}

/// `get -w`: the object or collection, then each change as it comes, in the output's form.
async fn watch_get(
    client: &Client,
    ns: &str,
    rt: &'static ResourceType,
    name: Option<&str>,
    q: &[(&str, String)],
    how: &Listing,
) -> Result<()> {
    use std::io::Write;
    match &how.output {
        None | Some(Output::Wide) => {
            let path = with_query(ns_path(rt, ns, name), &how.table_query(q));
            let mut t = match name {
                Some(_) => client.call(reqwest::Method::GET, &path, None, Some(TABLE_ACCEPT)).await?.into_result()?,
                None => list_in_pages(client, &path, Some(TABLE_ACCEPT)).await?,
            };
            how.sort_rows(&mut t)?;
            let mut printer = how.table_printer(rt);
            let text = printer.rows(&t);
            if text.is_empty() {
                eprintln!("No resources found.");
            }
            print!("{text}");
            std::io::stdout().flush()?;
            follow(client, rt, ns, name, q, &resource_version(&t), Some(TABLE_ACCEPT), |ev| Ok(printer.rows(ev))).await
        }
        Some(fmt) => {
            let path = with_query(ns_path(rt, ns, name), q);
            let (mut objects, rv) = match name {
                Some(_) => {
                    let o = client.get(&path).await?.into_result()?;
                    let rv = resource_version(&o);
                    (vec![o], rv)
                }
                None => {
                    let mut list = list_in_pages(client, &path, None).await?;
                    let rv = resource_version(&list);
                    match list.get_mut("items").map(Value::take) {
                        Some(Value::Array(items)) => (items, rv),
                        _ => (Vec::new(), rv),
                    }
                }
            };
            how.sort_objects(&mut objects, |o| o)?;
            let mut printer = print::ObjectPrinter::new(fmt.clone(), how.no_headers);
            for mut o in objects {
                with_kind(rt, &mut o);
                print!("{}", printer.text(rt, &o)?);
            }
            std::io::stdout().flush()?;
            follow(client, rt, ns, name, q, &rv, None, |o| Ok(printer.text(rt, o)?)).await
        }
    }
}

/// Print each watch event's object with `show` as it arrives, reconnecting from the last version
/// when the server ends the watch; a connection that breaks ends it.
#[allow(clippy::too_many_arguments)]
async fn follow(
    client: &Client,
    rt: &ResourceType,
    ns: &str,
    name: Option<&str>,
    q: &[(&str, String)],
    rv: &str,
    accept: Option<&str>,
    mut show: impl FnMut(&Value) -> Result<String>,
) -> Result<()> {
    use futures::StreamExt;
    use std::io::Write;
    let mut rv = rv.to_string();
    loop {
        let mut query = q.to_vec();
        query.push(("watch", "true".into()));
        query.push(("resourceVersion", rv.clone()));
        if let Some(n) = name {
            query.push(("fieldSelector", format!("metadata.name={n}")));
        }
        let path = with_query(ns_path(rt, ns, None), &query);
        let resp = client.watch(&path, accept).await?;
        let mut stream = resp.bytes_stream();
        let mut buf = Vec::new();
        while let Some(chunk) = stream.next().await {
            // The connection cut (a coordinator stopped or restarted): the watch ends quietly,
            // as kubectl's does, instead of with the TLS library's words.
            let Ok(chunk) = chunk else { return Ok(()) };
            buf.extend_from_slice(&chunk);
            while let Some(pos) = buf.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = buf.drain(..=pos).collect();
                let ev: Value = serde_json::from_slice(&line).context("malformed watch event")?;
                match ev.get("type").and_then(Value::as_str) {
                    Some("ERROR") => bail!(
                        "watch failed: {}",
                        ev.pointer("/object/message").and_then(Value::as_str).unwrap_or("unknown error")
                    ),
                    Some("BOOKMARK") => continue,
                    _ => {}
                }
                let obj = ev.get("object").cloned().unwrap_or_default();
                if let Some(r) = obj.pointer("/metadata/resourceVersion").and_then(Value::as_str) {
                    rv = r.to_string();
                }
                print!("{}", show(&obj)?);
                std::io::stdout().flush()?;
            }
        }
    }
}

async fn describe(client: &Client, ns: &str, args: &[String]) -> Result<()> {
    for (rt, name) in targets(args)? {
        let name =
            name.ok_or_else(|| Usage(format!("describe needs a name: aloftctl describe {} NAME", rt.singular)))?;
        let obj = client.get(&resource_path(rt.path_ref(), Some(ns), Some(&name))).await?.into_result()?;
        use std::fmt::Write as _;
        let mut out = String::new();
        let _ = writeln!(out, "Name:         {name}");
        let _ = writeln!(out, "Kind:         {}", rt.kind);
        let meta = obj.get("metadata").cloned().unwrap_or_default();
        for (title, key) in [("Labels:", "labels"), ("Annotations:", "annotations")] {
            let map = meta.get(key).and_then(Value::as_object).cloned().unwrap_or_default();
            if map.is_empty() {
                let _ = writeln!(out, "{title:<13} <none>");
            }
            for (i, (k, v)) in map.iter().enumerate() {
                let v = v.as_str().unwrap_or("");
                let v = if v.len() > 100 { format!("{}...", &v[..v.floor_char_boundary(100)]) } else { v.to_string() };
                let _ = writeln!(out, "{:<13} {k}={v}", if i == 0 { title } else { "" });
            }
        }
        let _ = writeln!(out, "Created:      {}", meta.get("creationTimestamp").and_then(Value::as_str).unwrap_or(""));
        if let Some(spec) = obj.get("spec") {
            out.push_str("Spec:\n");
            for line in print::yaml(spec).lines() {
                let _ = writeln!(out, "  {line}");
            }
        }
        let conds = obj.pointer("/status/conditions").and_then(Value::as_array).cloned().unwrap_or_default();
        if let Some(status) = obj.get("status").and_then(Value::as_object) {
            out.push_str("Status:\n");
            for (k, v) in status.iter().filter(|(k, _)| *k != "conditions") {
                out.push_str(&status_field(k, v));
            }
        }
        if !conds.is_empty() {
            out.push_str(&conditions_section(&conds));
        }
        let uid = meta.get("uid").and_then(Value::as_str).unwrap_or("");
        // As kubectl: the object is described even when its Events cannot be listed.
        match list_in_pages(client, &events_path(rt, ns, &name, uid), None).await {
            Ok(events) => {
                let items = events.get("items").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
                out.push_str(&events_section(items, chrono::Utc::now()));
            }
            Err(e) => {
                let _ = writeln!(out, "Events:       <cannot be listed: {e:#}>");
            }
        }
        out.push('\n');
        // Labels, annotations, messages and Events are written by nodes too: no terminal
        // control sequences of theirs reach the admin's terminal.
        print!("{}", print::term_safe(&out));
    }
    Ok(())
}

/// `Conditions:` as a table whose columns fit their contents: type, status, reason (where MCO
/// puts e.g. "1 nodes are reporting degraded status on sync", and a budget's name), last
/// transition and message.
fn conditions_section(conds: &[Value]) -> String {
    let header = ["TYPE", "STATUS", "REASON", "LAST TRANSITION", "MESSAGE"];
    let mut rows = vec![header.map(String::from).to_vec()];
    for c in conds {
        let s = |k: &str| c.get(k).and_then(Value::as_str).unwrap_or("").to_string();
        rows.push(vec![s("type"), s("status"), s("reason"), s("lastTransitionTime"), s("message")]);
    }
    format!("Conditions:\n{}", indented_table(&rows))
}

/// Rows as describe prints its tables: indented two spaces, columns as wide as their widest
/// cell, two spaces apart, no trailing blanks.
fn indented_table(rows: &[Vec<String>]) -> String {
    let columns = rows.first().map_or(0, Vec::len);
    let widths: Vec<usize> =
        (0..columns).map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0)).collect();
    let mut out = String::new();
    for r in rows {
        let cells: Vec<String> = r.iter().zip(&widths).map(|(cell, w)| format!("{cell:<w$}")).collect();
        out.push_str(&format!("  {}\n", cells.join("  ").trim_end()));
    }
    out
}

/// The Events about object `name` (with `uid`) of kind `rt`, selected by the server
/// (`involvedObject` field selectors, as `kubectl describe` asks): a fleet's Events are many,
/// the object's few. By uid too, so that an object deleted and created again under its name does
/// not show its predecessor's Events. Events of cluster-scoped objects live in the coordinator's
/// events namespace, as Kubernetes keeps them.
fn events_path(rt: &ResourceType, ns: &str, name: &str, uid: &str) -> String {
    let mut fields = format!("involvedObject.name={name},involvedObject.kind={}", rt.kind);
    if !uid.is_empty() {
        fields.push_str(&format!(",involvedObject.uid={uid}"));
    }
    let events_ns = if rt.namespaced {
        fields.push_str(&format!(",involvedObject.namespace={ns}"));
        ns
    } else {
        crate::controllers::events::NAMESPACE
    };
    let path = resource_path(resources::EVENT.path_ref(), Some(events_ns), None);
    with_query(path, &[("fieldSelector", fields)])
}

/// `kubectl describe`'s closing section: `Events:  <none>`, or a table of Type, Reason, Age
/// (`3m (x5 over 10m)` for a repeated Event), From and Message, newest last.
fn events_section(events: &[Value], now: chrono::DateTime<chrono::Utc>) -> String {
    if events.is_empty() {
        return "Events:  <none>\n".into();
    }
    let s = |e: &Value, p: &str| e.pointer(p).and_then(Value::as_str).unwrap_or("").to_string();
    let last = |e: &Value| {
        ["/lastTimestamp", "/eventTime", "/firstTimestamp", "/metadata/creationTimestamp"]
            .iter()
            .map(|p| s(e, p))
            .find(|t| !t.is_empty())
            .unwrap_or_default()
    };
    let mut sorted: Vec<&Value> = events.iter().collect();
    // Within a second (the timestamps' resolution), in the order the Events were last written.
    let written = |e: &Value| s(e, "/metadata/resourceVersion").parse::<u64>().unwrap_or(0);
    sorted.sort_by_key(|e| (chrono::DateTime::parse_from_rfc3339(&last(e)).ok(), written(e)));
    let age = |t: &str| crate::server::table::age(t, now);
    let rows: Vec<Vec<String>> = sorted
        .iter()
        .map(|e| {
            let count = e.get("count").and_then(Value::as_i64).unwrap_or(1);
            let first = [s(e, "/firstTimestamp"), last(e)].into_iter().find(|t| !t.is_empty()).unwrap_or_default();
            let when =
                if count > 1 { format!("{} (x{count} over {})", age(&last(e)), age(&first)) } else { age(&last(e)) };
            let from = [s(e, "/source/component"), s(e, "/reportingComponent"), s(e, "/reportingController")]
                .into_iter()
                .find(|t| !t.is_empty())
                .unwrap_or_default();
            vec![s(e, "/type"), s(e, "/reason"), when, from, s(e, "/message")]
        })
        .collect();
    // kubectl's own rule line (its Age rule is four dashes).
    let header = ["Type", "Reason", "Age", "From", "Message"];
    let rule = ["----", "------", "----", "----", "-------"];
    let mut all = vec![header.map(String::from).to_vec(), rule.map(String::from).to_vec()];
    all.extend(rows);
    format!("Events:\n{}", indented_table(&all))
}

/// Nested values print as YAML, as `Spec` does, up to [`DESCRIBE_LINES`] lines; a longer one
/// says where to see it whole.
fn status_field(key: &str, v: &Value) -> String {
    match v {
        Value::String(s) => format!("  {key}: {s}\n"),
        Value::Object(_) | Value::Array(_) => {
            let text = print::yaml(&serde_json::json!({ key: v }));
            let lines: Vec<&str> = text.lines().collect();
            if lines.len() > DESCRIBE_LINES {
                return format!("  {key}: ({} lines: see `get -o yaml`)\n", lines.len() - 1);
            }
            lines.iter().map(|l| format!("  {l}\n")).collect()
        }
        other => format!("  {key}: {other}\n"),
    }
}

/// `apply --dry-run[=STRATEGY]`, kubectl's values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum DryRun {
    None,
    Server,
    Client,
}

/// The longest nested status value `describe` prints.
const DESCRIBE_LINES: usize = 40;

async fn apply_files(client: &Client, ns: &str, files: &[String], dry_run: bool, validate: Validate) -> Result<()> {
    let mut objects = Vec::new();
    for f in files {
        objects.extend(apply::read_objects(f)?);
    }
    if objects.is_empty() {
        bail!("no objects passed to apply");
    }
    // Check every document before changing anything.
    let mut plan = Vec::new();
    for (origin, obj) in objects {
        let av = obj.get("apiVersion").and_then(Value::as_str).unwrap_or("");
        let kind = obj.get("kind").and_then(Value::as_str).unwrap_or("");
        let rt = resources::by_kind(av, kind).ok_or_else(|| {
            anyhow!("{origin}: no resource for apiVersion {av:?} kind {kind:?} (see `aloftctl api-resources`)")
        })?;
        let name = obj.pointer("/metadata/name").and_then(Value::as_str).unwrap_or("").to_string();
        if name.is_empty() {
            bail!("{origin}: {kind} has no metadata.name");
        }
        plan.push((origin, rt, name, obj));
    }
    let mut q = vec![("fieldValidation", validate.param().to_string())];
    if dry_run {
        q.push(("dryRun", "All".to_string()));
    }
    let suffix = if dry_run { " (server dry run)" } else { "" };
    // As kubectl: one by one, a refused object does not stop the others; errors at the end.
    let total = plan.len();
    let (mut applied, mut errors) = (Vec::new(), Vec::new());
    for (origin, rt, name, obj) in plan {
        let what = format!("{}/{}", rt.singular_qualified(), name);
        match apply_one(client, ns, rt, &name, obj, &q).await {
            Ok(verb) => {
                println!("{what} {verb}{suffix}");
                applied.push(what);
            }
            Err(e) => errors.push(format!("{origin}, {what}: {e:#}")),
        }
    }
    not_applied(total, &applied, errors)
}

/// The errors of the objects apply could not apply, and (of several) which it did apply.
fn not_applied(total: usize, applied: &[String], errors: Vec<String>) -> Result<()> {
    if errors.is_empty() {
        return Ok(());
    }
    let mut msg = errors.join("\n");
    if total > 1 {
        let done = if applied.is_empty() { "none".to_string() } else { applied.join(", ") };
        msg.push_str(&format!("\n{} of {total} objects not applied; applied: {done}", errors.len()));
    }
    Err(anyhow!(msg))
}

/// Create `obj`, or patch the live object to it (three-way, as kubectl); what was done
/// (`created`, `configured`, `unchanged`). `q` is the writes' query (fieldValidation, dryRun).
async fn apply_one(
    client: &Client,
    ns: &str,
    rt: &ResourceType,
    name: &str,
    mut obj: Value,
    q: &[(&str, String)],
) -> Result<&'static str> {
    let obj_ns = obj.pointer("/metadata/namespace").and_then(Value::as_str).unwrap_or(ns).to_string();
    let recorded = apply::annotate_last_applied(&mut obj)?;
    if !recorded {
        eprintln!(
            "Warning: {} {name:?} is too large to keep its applied configuration in an annotation \
             (256 KiB for all of them): applied without it, so a field later removed from the file \
             is not removed from the object (use `kubectl replace`, or patch it away)",
            rt.kind
        );
    }
    let path = resource_path(rt.path_ref(), Some(&obj_ns), Some(name));
    let live = client.get(&path).await?;
    if live.code == 404 {
        // A file exported from a coordinator (`get -o yaml`) carries that store's
        // resourceVersion, which a create refuses: it means nothing for an object made here,
        // and kubectl's create and apply clear it too.
        if let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
            meta.remove("resourceVersion");
        }
        client.post(&with_query(resource_path(rt.path_ref(), Some(&obj_ns), None), q), &obj).await?.into_result()?;
        return Ok("created");
    }
    let live = live.into_result()?;
    let last = apply::last_applied(&live);
    let mut patch = apply::three_way_patch(last.as_ref(), &obj);
    if !recorded && last.is_some() {
        // An earlier, smaller record would now be stale: it goes.
        patch["metadata"]["annotations"][apply::LAST_APPLIED] = Value::Null;
    }
    // As kubectl: a patch that changes nothing on the live object is not sent.
    let mut patched = live.clone();
    json_patch::merge(&mut patched, &patch);
    if patched == live {
        return Ok("unchanged");
    }
    client.patch(&with_query(path, q), "application/merge-patch+json", &patch).await?.into_result()?;
    Ok("configured")
}

async fn delete(client: &Client, ns: &str, args: &[String], files: &[String], ignore_not_found: bool) -> Result<()> {
    let mut items: Vec<(&'static ResourceType, String, String)> = Vec::new();
    for f in files {
        for (origin, obj) in apply::read_objects(f)? {
            let av = obj.get("apiVersion").and_then(Value::as_str).unwrap_or("");
            let kind = obj.get("kind").and_then(Value::as_str).unwrap_or("");
            let rt = resources::by_kind(av, kind).ok_or_else(|| anyhow!("{origin}: no resource for {av} {kind}"))?;
            let name = obj.pointer("/metadata/name").and_then(Value::as_str).unwrap_or("").to_string();
            if name.is_empty() {
                bail!("{origin}: {kind} has no metadata.name: nothing to delete by");
            }
            let n = obj.pointer("/metadata/namespace").and_then(Value::as_str).unwrap_or(ns).to_string();
            items.push((rt, name, n));
        }
    }
    if !args.is_empty() {
        for (rt, name) in targets(args)? {
            let name =
                name.ok_or_else(|| Usage(format!("delete needs names: aloftctl delete {} NAME", rt.singular)))?;
            items.push((rt, name, ns.to_string()));
        }
    }
    if items.is_empty() {
        return Err(Usage("nothing to delete: give TYPE NAME... or -f FILE".into()).into());
    }
    // As kubectl: every object is tried, and the errors of those not deleted end the command,
    // each on its line, after the others were deleted.
    let mut errors = Vec::new();
    for (rt, name, n) in items {
        let r = match client.delete(&resource_path(rt.path_ref(), Some(&n), Some(&name))).await {
            Ok(r) => r,
            // The server out of reach: nothing more is tried, and the errors so far are said too.
            Err(e) if errors.is_empty() => return Err(e),
            Err(e) => {
                errors.push(format!("error: {e:#}"));
                break;
            }
        };
        if r.ok() {
            println!("{} {name:?} deleted", rt.singular_qualified());
        } else if r.code == 404 && ignore_not_found {
            continue;
        } else {
            errors.extend(r.into_result().err().map(|e| e.to_string()));
        }
    }
    objects_failed(errors)
}

async fn patch_cmd(
    client: &Client,
    ns: &str,
    args: &[String],
    (patch_type, patch): (&str, &str),
    sub: Option<String>,
    validate: Validate,
) -> Result<()> {
    let ctype = match patch_type {
        "merge" => "application/merge-patch+json",
        "json" => "application/json-patch+json",
        "strategic" => return Err(Usage("--type strategic is not supported by aloft: use merge or json".into()).into()),
        other => return Err(Usage(format!("--type {other:?}: want merge or json")).into()),
    };
    let body = patch_body(patch, patch_type == "json")?;
    for (rt, name) in targets(args)? {
        let name =
            name.ok_or_else(|| Usage(format!("patch needs a name: aloftctl patch {} NAME -p ...", rt.singular)))?;
        let mut path = resource_path(rt.path_ref(), Some(ns), Some(&name));
        if let Some(s) = &sub {
            path.push('/');
            path.push_str(s);
        }
        let before = client.get(&path).await?.into_result()?;
        let q = [("fieldValidation", validate.param().to_string())];
        let after = client.patch(&with_query(path, &q), ctype, &body).await?.into_result()?;
        let changed = after.pointer("/metadata/resourceVersion") != before.pointer("/metadata/resourceVersion");
        println!("{}/{name} {}", rt.singular_qualified(), if changed { "patched" } else { "patched (no change)" });
    }
    Ok(())
}

/// `--patch` as kubectl reads it: JSON, or YAML (`spec: {paused: true}`), which is turned into
/// the same JSON (YAML 1.1 octal file modes included, as for `apply`). A merge patch must be a
/// mapping and a JSON patch a list: `-p foo` reads as a YAML string, which is no patch.
fn patch_body(patch: &str, json_patch: bool) -> Result<Value> {
    let body = match serde_json::from_str(patch) {
        Ok(v) => v,
        Err(json) => crate::yaml::from_str(patch)
            .map_err(|yaml| Usage(format!("--patch is neither JSON ({json}) nor YAML ({yaml})")))?,
    };
    let (fits, want) =
        if json_patch { (body.is_array(), "a list of operations") } else { (body.is_object(), "a mapping") };
    if !fits {
        let example = if json_patch {
            r#"'[{"op":"replace","path":"/spec/paused","value":true}]'"#
        } else {
            r#"'{"spec":{"paused":true}}' or 'spec: {paused: true}'"#
        };
        return Err(Usage(format!("--patch {patch:?} is not {want} (want e.g. {example})")).into());
    }
    Ok(body)
}

fn condition_of<'a>(pool: &'a Value, type_: &str) -> Option<&'a Value> {
    pool.pointer("/status/conditions")?
        .as_array()?
        .iter()
        .find(|c| c.get("type").and_then(Value::as_str) == Some(type_))
}

/// `mcp/NAME` or `mcp NAME` into the pool's path, its name, and the pool as the user wrote it
/// (`mcp/NAME`), for messages.
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

fn pool_target(args: &[String], verb: &str) -> Result<(String, String, String)> {
    pool_target_of(args, verb).map_err(|e| Usage(format!("{e:#}")).into())
}

fn pool_target_of(args: &[String], verb: &str) -> Result<(String, String, String)> {
    let (kind, name) = match args {
        [one] => one.split_once('/').ok_or_else(|| match resolve(one) {
            // A type without a name (`rollout resume mcp`).
            Ok(_) => anyhow!("rollout {verb}: no pool name in {one:?} (try: aloftctl rollout {verb} {one}/NAME)"),
            Err(_) => anyhow!(
                "rollout {verb}: want mcp/NAME or mcp NAME, got {one:?} (try: aloftctl rollout {verb} mcp/{one})"
            ),
        })?,
        [kind, name] if !kind.contains('/') => (kind.as_str(), name.as_str()),
        _ => bail!("rollout {verb} takes one pool, as mcp/NAME or mcp NAME, not {:?}", args.join(" ")),
    };
    if name.is_empty() {
        bail!("rollout {verb}: no pool name in {:?}", args.join(" "));
    }
    let rt = resolve(kind)?;
    if rt.kind != "MachineConfigPool" {
        bail!("rollout {verb} works on MachineConfigPools (mcp/NAME), not {}", rt.plural);
    }
    Ok((resource_path(rt.path_ref(), None, Some(name)), name.to_string(), format!("{kind}/{name}")))
}

/// The message of the pool's condition `type_` when it is True.
fn condition_true(pool: &Value, type_: &str) -> Option<String> {
    condition_of(pool, type_)
        .filter(|c| c.get("status").and_then(Value::as_str) == Some("True"))
        .map(|c| c.get("message").and_then(Value::as_str).unwrap_or("").to_string())
}

/// As `kubectl rollout resume` of a deployment that is not paused: an error, nothing written.
async fn rollout_resume(client: &Client, target: &[String]) -> Result<()> {
    let (path, name, shown) = pool_target(target, "resume")?;
    let pool = client.get(&path).await?.into_result()?;
    if condition_true(&pool, aloft_api::machineconfig::conditions::CIRCUIT_BROKEN).is_none() {
        if pool.pointer("/spec/paused").and_then(Value::as_bool) == Some(true) {
            bail!(
                "{shown}: the circuit breaker is not open; nothing to resume. The pool is paused (spec.paused): \
                 unpause it with `aloftctl patch mcp {name} -p '{{\"spec\":{{\"paused\":false}}}}'`"
            );
        }
        bail!("{shown}: the circuit breaker is not open; nothing to resume");
    }
    // Any new value resumes once; a timestamp is new every time.
    let token = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Nanos, true);
    let patch = serde_json::json!({"metadata": {"annotations": {aloft_api::annotations::RESUME_ROLLOUT: token}}});
    client.patch(&path, "application/merge-patch+json", &patch).await?.into_result()?;
    // Said once the node controller has acted on it, so that `resume && rollout status` reads
    // the pool after the resume (an annotation moves no generation to wait for).
    let deadline = tokio::time::Instant::now() + RESUME_WAIT;
    loop {
        let pool = client.get(&path).await?.into_result()?;
        if resume_honoured(&pool, &token) {
            println!(
                "machineconfigpool/{name} resumed: the circuit breaker is closed, the nodes that failed so far are forgiven"
            );
            return Ok(());
        }
        if tokio::time::Instant::now() >= deadline {
            println!(
                "machineconfigpool/{name}: resume requested ({} {token}); the coordinator has not acted on it yet \
                 (`aloftctl rollout status {shown}` waits for it)",
                aloft_api::annotations::RESUME_ROLLOUT
            );
            return Ok(());
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
}

/// How long `rollout resume` waits for the node controller to act on the resume.
const RESUME_WAIT: std::time::Duration = std::time::Duration::from_secs(15);

/// Whether the node controller has acted on the resume `token`: recorded it, or the breaker is
/// not open any more (the rollout finished meanwhile, or its limit was lifted).
fn resume_honoured(pool: &Value, token: &str) -> bool {
    pool.pointer("/status/rollout/resumeToken").and_then(Value::as_str) == Some(token)
        || condition_true(pool, aloft_api::machineconfig::conditions::CIRCUIT_BROKEN).is_none()
}

/// A resume asked for (the pool's annotation) that the node controller has not acted on yet,
/// while the breaker shows open: what the pool says of the breaker is from before it.
fn resume_pending(pool: &Value) -> bool {
    let asked = pool
        .pointer("/metadata/annotations")
        .and_then(|a| a.get(aloft_api::annotations::RESUME_ROLLOUT))
        .and_then(Value::as_str)
        .filter(|t| !t.is_empty());
    asked.is_some_and(|t| !resume_honoured(pool, t))
}

/// Why a pool that looks updated may not be yet: the render controller has not caught up with a
/// change. Two things tell from the client: a status older than the spec
/// (`status.observedGeneration` below `metadata.generation`, where reported), and a
/// MachineConfig the pool selects (by the render's own selection) that its target was not
/// rendered from, i.e. a new one. A config changed under its old name cannot be told.
fn render_pending(pool: &Value, mcs: &[Value]) -> Option<String> {
    let generation = pool.pointer("/metadata/generation").and_then(Value::as_i64);
    let observed = pool.pointer("/status/observedGeneration").and_then(Value::as_i64);
    if let (Some(g), Some(o)) = (generation, observed) {
        if o < g {
            return Some(format!("waiting for the status of generation {g} (it shows {o})"));
        }
    }
    let parsed: aloft_api::MachineConfigPool = serde_json::from_value(pool.clone()).ok()?;
    let configs: Vec<aloft_api::MachineConfig> =
        mcs.iter().filter_map(|m| serde_json::from_value(m.clone()).ok()).collect();
    let selected = aloft_api::render::select_and_order(&parsed, &configs).ok()?;
    let sources: Vec<&str> = pool
        .pointer("/spec/configuration/source")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|r| r.get("name").and_then(Value::as_str))
        .collect();
    let selected: Vec<&str> = selected.iter().map(|m| m.metadata.name.as_str()).collect();
    let new: Vec<&str> = selected.iter().copied().filter(|n| !sources.contains(n)).collect();
    // A MachineConfig deleted (or no longer selected) that the target was rendered from: the
    // usual revert, as pending as a new one.
    let gone: Vec<&str> = sources.iter().copied().filter(|n| !selected.contains(n)).collect();
    let list = |names: &[&str]| match names {
        [one] => format!("MachineConfig {one}"),
        many => format!("MachineConfigs {}", many.join(", ")),
    };
    match (new.is_empty(), gone.is_empty()) {
        (true, true) => None,
        (false, true) => Some(format!("waiting for the render of {}", list(&new))),
        (true, false) => Some(format!("waiting for the render without {}", list(&gone))),
        (false, false) => Some(format!("waiting for the render of {} and without {}", list(&new), list(&gone))),
    }
}

/// One look at a pool during `rollout status`.
#[derive(Debug, PartialEq)]
enum Progress {
    /// Still going: the line to show, and what holds the pool back when its status says (for
    /// the timeout's error).
    Waiting(String, Option<String>),
    /// A failure the pool shows that a change just made may have made stale, within
    /// [`STALE_GRACE`]: waited through as [`Progress::Waiting`] (the same line and reason),
    /// and not taken as where the rollout stands by a `--watch=false` look until the grace or
    /// the timeout ends (then the failure, the third field, is).
    Settling(String, Option<String>, String),
    Done(String),
    Failed(String),
}

/// How long `rollout status` takes a failure that a later change may have made stale as not yet
/// known: a failed render after a MachineConfig change (the render controller renders within
/// seconds of a change, and writes the pool if the outcome changed), or nodes degraded on a
/// config the pool's target no longer is (the node controller moves them and their agents report
/// within seconds). Past this, the failure stands.
const STALE_GRACE: std::time::Duration = std::time::Duration::from_secs(10);

/// When one `rollout status` first saw each kind of possibly stale failure ([`STALE_GRACE`]).
#[derive(Debug, Default)]
struct Grace {
    render: Option<std::time::Instant>,
    nodes: Option<std::time::Instant>,
}

impl Grace {
    /// Whether a stale failure first seen in `slot` is still within its grace.
    fn within(slot: &mut Option<std::time::Instant>) -> bool {
        slot.get_or_insert_with(std::time::Instant::now).elapsed() < STALE_GRACE
    }
}

/// Every pool and Node, typed, for the pool membership the controllers compute (objects that do
/// not read as their type are left out, as the controllers leave them).
async fn pools_and_nodes(client: &Client) -> Result<(Vec<aloft_api::MachineConfigPool>, Vec<aloft_api::Node>)> {
    fn typed<T: serde::de::DeserializeOwned>(list: &Value) -> Vec<T> {
        let items = list.get("items").and_then(Value::as_array).into_iter().flatten();
        items.filter_map(|v| serde_json::from_value(v.clone()).ok()).collect()
    }
    let pools_path = resource_path(resources::MACHINE_CONFIG_POOL.path_ref(), None, None);
    let pools = typed(&list_in_pages(client, &pools_path, None).await?);
    let nodes = typed(&list_in_pages(client, &resource_path(resources::NODE.path_ref(), None, None), None).await?);
    Ok((pools, nodes))
}

/// The pool's degraded nodes, when every one of them failed on a config other than `target`
/// (the config its agent's failure report names): a failure the target no longer asks for, as
/// right after a bad MachineConfig is deleted to revert it. The pool still counts those nodes
/// degraded (MCO's status reads the agent's state) until the node controller moves them and their
/// agents report. None: no such node, or one failing on the target, stuck in its drain, or not
/// saying which config it failed on; that degradation stands.
async fn degraded_elsewhere(client: &Client, pool: &Value, target: &str) -> Result<Option<Vec<String>>> {
    use crate::controllers::pools::{failing_state, membership, NodeFacts};
    let Ok(this) = serde_json::from_value::<aloft_api::MachineConfigPool>(pool.clone()) else { return Ok(None) };
    let (pools, nodes) = pools_and_nodes(client).await?;
    let (members, _) = membership(&pools, &nodes);
    let mut names = Vec::new();
    for &i in members.get(&this.metadata.name).into_iter().flatten() {
        let facts = NodeFacts::of(&nodes[i]);
        if !facts.status_degraded() {
            continue;
        }
        let elsewhere = facts.drain_failure.is_empty()
            && failing_state(&facts.state)
            && !facts.failed_config.is_empty()
            && facts.failed_config != target
            // Drift names the config the node runs: found on its disk, it goes nowhere by itself.
            && facts.failed_config != facts.current;
        if !elsewhere {
            return Ok(None);
        }
        names.push(nodes[i].metadata.name.clone());
    }
    Ok((!names.is_empty()).then_some(names))
}

/// The MachineConfigs `pool` selects that were written after the pool last was (by
/// resourceVersion): changes its status may not have caught up with.
fn written_after_pool(pool: &Value, mcs: &[Value]) -> Vec<String> {
    let rv = |v: &Value| v.pointer("/metadata/resourceVersion").and_then(Value::as_str)?.parse::<u64>().ok();
    let Some(pool_rv) = rv(pool) else { return Vec::new() };
    let Ok(parsed) = serde_json::from_value::<aloft_api::MachineConfigPool>(pool.clone()) else { return Vec::new() };
    let later: Vec<Value> = mcs.iter().filter(|m| rv(m).is_some_and(|r| r > pool_rv)).cloned().collect();
    let configs: Vec<aloft_api::MachineConfig> =
        later.into_iter().filter_map(|m| serde_json::from_value(m).ok()).collect();
    aloft_api::render::select_and_order(&parsed, &configs)
        .map(|s| s.into_iter().map(|m| m.metadata.name).collect())
        .unwrap_or_default()
}

/// The MachineConfigs a render failure's `message` names ("MachineConfig NAME") that are not in
/// `mcs` any more: the failure is about a set of configs there no longer is (the one at fault was
/// deleted to fix it), and the render has not said so yet.
fn named_and_gone(message: &str, mcs: &[Value]) -> Vec<String> {
    let exists = |n: &str| mcs.iter().any(|m| m.pointer("/metadata/name").and_then(Value::as_str) == Some(n));
    let mut gone: Vec<String> = message
        .split("MachineConfig ")
        .skip(1)
        .filter_map(|rest| {
            let name: String =
                rest.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '.').collect();
            let name = name.trim_end_matches('.');
            (!name.is_empty() && !exists(name)).then(|| name.to_string())
        })
        .collect();
    gone.sort();
    gone.dedup();
    gone
}

/// What the pool says failed: Degraded, or its circuit breaker open. Nodes failing make the pool
/// Degraded by them, and the breaker they tripped is said too, with how to go on (its message
/// ends with the resume command).
fn pool_failure(pool: &Value, name: &str) -> Option<String> {
    let breaker = condition_true(pool, aloft_api::machineconfig::conditions::CIRCUIT_BROKEN);
    if let Some(m) = condition_true(pool, aloft_api::machineconfig::conditions::DEGRADED) {
        // Degraded by the breaker alone points at the breaker's condition: its message instead.
        let by_breaker = condition_of(pool, aloft_api::machineconfig::conditions::DEGRADED)
            .and_then(|c| c.get("reason"))
            .and_then(Value::as_str)
            == Some(aloft_api::machineconfig::conditions::CIRCUIT_BROKEN);
        let m = match &breaker {
            Some(b) if by_breaker && !b.is_empty() => return Some(format!("pool {name} is degraded: {b}")),
            _ => m,
        };
        return Some(match breaker.filter(|b| !b.is_empty() && !m.contains(b.as_str())) {
            Some(b) => format!("pool {name} is degraded: {m}; {b}"),
            None => format!("pool {name} is degraded: {m}"),
        });
    }
    breaker.map(|m| {
        let m = if m.is_empty() { "circuit breaker open".to_string() } else { m };
        format!("pool {name}: {m}")
    })
}

/// Where the pool stands, from its object and (only once it looks updated) the MachineConfigs.
/// `grace`: when this wait first saw failures that may be stale.
async fn pool_progress(
    client: &Client,
    pool: &Value,
    name: &str,
    not_config: Option<&str>,
    grace: &mut Grace,
) -> Result<Progress> {
    let want = pool.pointer("/spec/configuration/name").and_then(Value::as_str).unwrap_or("");
    let have = pool.pointer("/status/configuration/name").and_then(Value::as_str).unwrap_or("");
    // A degradation while the target is still the old one is about the old one: the wait is for
    // a new target.
    let on_old = not_config.is_some_and(|old| old == want);
    if !on_old && resume_pending(pool) {
        let why = "waiting for the coordinator to act on the resume of the circuit breaker".to_string();
        return Ok(Progress::Waiting(format!("pool {name}: {why}"), Some(why)));
    }
    let failed = if on_old { None } else { pool_failure(pool, name) };
    let looks_updated = condition_true(pool, "Updated").is_some() && !want.is_empty() && want == have;
    if failed.is_none() && (!looks_updated || on_old) {
        let held = (!on_old).then(|| held_by(pool)).flatten();
        return Ok(Progress::Waiting(progress_line(pool, name, not_config.filter(|_| on_old)), held));
    }
    let mcs = list_in_pages(client, &resource_path(resources::MACHINE_CONFIG.path_ref(), None, None), None).await?;
    let items = mcs.get("items").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
    // A render that failed is about the MachineConfigs there are now: the target will not catch
    // up with them, so the failure stands (it names the config). Unless a MachineConfig the pool
    // selects changed after the pool's last write (the one just applied to fix it): the render
    // has a few seconds to say otherwise.
    if let Some(f) = &failed {
        if let Some(message) = condition_true(pool, aloft_api::machineconfig::conditions::RENDER_DEGRADED) {
            let later = written_after_pool(pool, items);
            let gone = named_and_gone(&message, items);
            if (!later.is_empty() || !gone.is_empty()) && Grace::within(&mut grace.render) {
                let why = match (later.is_empty(), gone.is_empty()) {
                    (false, true) => format!("waiting for the render of MachineConfig {}", later.join(", ")),
                    (true, false) => format!("waiting for the render without MachineConfig {}", gone.join(", ")),
                    _ => format!(
                        "waiting for the render of MachineConfig {} and without {}",
                        later.join(", "),
                        gone.join(", ")
                    ),
                };
                return Ok(Progress::Settling(format!("pool {name}: {why}"), Some(why), f.clone()));
            }
            return Ok(Progress::Failed(f.clone()));
        }
    }
    // Updated or failed, as the pool shows it: unless its target is not rendered from the
    // MachineConfigs there are now (one just applied, or deleted to revert a bad one, whose
    // degradation the pool still shows until the render).
    if let Some(why) = render_pending(pool, items) {
        return Ok(Progress::Waiting(format!("pool {name}: {why}"), Some(why)));
    }
    if let Some(f) = failed {
        // Nodes degraded on the config before (a revert's render is out, and the node that failed
        // on the bad config is not moved back yet, or its agent has not reported): not a failure
        // of this target, for the few seconds it takes them to say so.
        let by_nodes = condition_true(pool, aloft_api::machineconfig::conditions::DEGRADED).is_some()
            && condition_true(pool, aloft_api::machineconfig::conditions::NODE_DEGRADED).is_some();
        if by_nodes {
            if let Some(nodes) = degraded_elsewhere(client, pool, want).await? {
                if Grace::within(&mut grace.nodes) {
                    let why = format!(
                        "waiting for degraded {} {} to take {want}: {} on another config",
                        if nodes.len() == 1 { "node" } else { "nodes" },
                        crate::controllers::pick::names_text(&nodes),
                        if nodes.len() == 1 { "it failed" } else { "they failed" }
                    );
                    return Ok(Progress::Settling(format!("pool {name}: {why}"), Some(why), f));
                }
            }
        }
        return Ok(Progress::Failed(f));
    }
    let n = |p: &str| pool.pointer(p).and_then(Value::as_i64).unwrap_or(0);
    Ok(Progress::Done(format!(
        "pool {name} is updated: {}/{} nodes on {want}",
        n("/status/updatedMachineCount"),
        n("/status/machineCount")
    )))
}

/// The progress bar and counts; `old` when the target is still the --not-config one.
fn progress_line(pool: &Value, name: &str, old: Option<&str>) -> String {
    let n = |p: &str| pool.pointer(p).and_then(Value::as_i64).unwrap_or(0);
    let want = pool.pointer("/spec/configuration/name").and_then(Value::as_str).unwrap_or("");
    let (total, updated, degraded) =
        (n("/status/machineCount"), n("/status/updatedMachineCount"), n("/status/degradedMachineCount"));
    // Paused, the rollout's phase is not progress.
    let phase = if pool.pointer("/spec/paused").and_then(Value::as_bool) == Some(true) {
        ", paused"
    } else {
        match pool.pointer("/status/rollout/phase").and_then(Value::as_str) {
            Some("Canary") => ", canary",
            Some("Soaking") => ", soaking",
            _ => "",
        }
    };
    let width = 30usize;
    let filled = match usize::try_from(total) {
        Ok(t) if t > 0 => usize::try_from(updated).unwrap_or(0).min(t) * width / t,
        _ => width,
    };
    let waiting = old.map(|o| format!(" (waiting for a target other than {o})")).unwrap_or_default();
    // Waiting for another target, the pool's state is not what the wait is about.
    let (ready, held) = match old {
        Some(_) => (String::new(), String::new()),
        None => (
            not_all_ready(pool).map(|r| format!(", {r}")).unwrap_or_default(),
            held_by_conditions(pool).map(|h| format!("; {h}")).unwrap_or_default(),
        ),
    };
    format!(
        "pool {name}: [{}{}] {updated}/{total} updated{ready}, {degraded} degraded{phase}, target {}{waiting}{held}",
        "#".repeat(filled),
        "-".repeat(width - filled),
        if want.is_empty() { "<rendering>" } else { want }
    )
}

/// `3 ready, 1 unavailable` when every node is updated but the pool is not Updated for it: MCO's
/// Updated needs updated == ready == total and none unavailable, so a node cordoned by hand or
/// NotReady holds the pool although the bar is full.
fn not_all_ready(pool: &Value) -> Option<String> {
    let n = |p: &str| pool.pointer(p).and_then(Value::as_i64).unwrap_or(0);
    let (total, updated) = (n("/status/machineCount"), n("/status/updatedMachineCount"));
    let (ready, unavailable) = (n("/status/readyMachineCount"), n("/status/unavailableMachineCount"));
    let held = total > 0 && updated >= total && (ready < total || unavailable > 0);
    (held && condition_true(pool, "Updated").is_none()).then(|| format!("{ready} ready, {unavailable} unavailable"))
}

/// The pool's True `MaintenanceWindowClosed`, `BudgetBlocked` and `NodeDrainTimeout` conditions,
/// shortened: what holds a rollout beyond slots to free (a window to open, a budget that may
/// block for good, a drain that is stuck).
fn held_by_conditions(pool: &Value) -> Option<String> {
    use aloft_api::machineconfig::conditions as cond;
    let parts: Vec<String> = [
        (cond::MAINTENANCE_WINDOW_CLOSED, "held"),
        (cond::BUDGET_BLOCKED, "blocked"),
        (cond::NODE_DRAIN_TIMEOUT, "drain timed out"),
    ]
    .into_iter()
    .filter_map(|(type_, what)| condition_true(pool, type_).map(|m| format!("{what}: {}", shortened(&m))))
    .collect();
    (!parts.is_empty()).then(|| parts.join("; "))
}

/// What [`held_by`] says of the nodes that hold an updated pool, until they are named.
const SEE_NODES: &str = "(cordoned or NotReady nodes: aloftctl get nodes)";

/// The nodes that hold an updated pool (read again at `path`): `(cordoned: a, b; NotReady: c)`.
/// Every member runs the pool's target by then, and a rendered config belongs to one pool, so
/// the members are the nodes on it. None when the pool is not so held, or the nodes cannot be
/// read (the counts then stand alone).
async fn named_holders(client: &Client, path: &str) -> Option<String> {
    let pool = client.get(path).await.ok()?.into_result().ok()?;
    not_all_ready(&pool)?;
    let target = pool.pointer("/spec/configuration/name").and_then(Value::as_str).filter(|t| !t.is_empty())?;
    let nodes = list_in_pages(client, &resource_path(resources::NODE.path_ref(), None, None), None).await.ok()?;
    let items = nodes.get("items").and_then(Value::as_array)?;
    let (mut cordoned, mut not_ready, mut pressure) = (Vec::new(), Vec::new(), Vec::new());
    for n in items {
        let current = n.pointer("/metadata/annotations").and_then(|a| a.get(aloft_api::annotations::CURRENT_CONFIG));
        if current.and_then(Value::as_str) != Some(target) {
            continue;
        }
        let name = n.pointer("/metadata/name").and_then(Value::as_str).unwrap_or("").to_string();
        let ready = n
            .pointer("/status/conditions")
            .and_then(Value::as_array)
            .is_some_and(|cs| cs.iter().any(|c| c["type"] == "Ready" && c["status"] == "True"));
        // MCO's isNodeReady: disk or network trouble makes a Ready node unavailable too, which
        // `get nodes` (Ready) does not show: name the condition.
        let troubled: Vec<&str> = n
            .pointer("/status/conditions")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter(|c| {
                matches!(c["type"].as_str(), Some("DiskPressure" | "NetworkUnavailable")) && c["status"] == "True"
            })
            .filter_map(|c| c["type"].as_str())
            .collect();
        if n.pointer("/spec/unschedulable").and_then(Value::as_bool) == Some(true) {
            cordoned.push(name);
        } else if !ready {
            not_ready.push(name);
        } else if !troubled.is_empty() {
            pressure.push(format!("{name} ({})", troubled.join(", ")));
        }
    }
    let parts: Vec<String> = [("cordoned", cordoned), ("NotReady", not_ready), ("under pressure", pressure)]
        .into_iter()
        .filter(|(_, names)| !names.is_empty())
        .map(|(what, names)| format!("{what}: {}", crate::controllers::pick::names_text(&names)))
        .collect();
    (!parts.is_empty()).then(|| format!("({})", parts.join("; ")))
}

/// What a rollout that its status says nothing about is waiting for, read at its timeout: how
/// many nodes are updated, and the members taking the pool's `maxUnavailable` slots with why
/// (`worker-1 updating, worker-0 cordoned and NotReady`), as the NodeWaiting Event says it but
/// without looking for it. None when the pool or the nodes cannot be read.
async fn slots_taken(client: &Client, path: &str) -> Option<String> {
    use crate::controllers::pools::{max_unavailable, membership, NodeFacts};
    let pool: aloft_api::MachineConfigPool =
        serde_json::from_value(client.get(path).await.ok()?.into_result().ok()?).ok()?;
    let (pools, nodes) = pools_and_nodes(client).await.ok()?;
    let (members, _) = membership(&pools, &nodes);
    let members = members.get(&pool.metadata.name).cloned().unwrap_or_default();
    let target: crate::controllers::config_name::ConfigName =
        pool.spec.configuration.as_ref().map(|c| c.name.as_str()).unwrap_or("").into();
    let mut updated = 0;
    let mut taken = Vec::new();
    for &i in &members {
        let (node, f) = (&nodes[i], NodeFacts::of(&nodes[i]));
        // Counted as the pool's status counts it (updatedMachineCount), readiness aside.
        if !target.is_empty() && f.updated_to(&target) {
            updated += 1;
        }
        // The rollout's reading of a slot taken (cordoned nodes are not Ready for it).
        if !f.disrupted() {
            continue;
        }
        let mut why = Vec::new();
        if f.degraded() {
            why.push("degraded");
        } else if f.state == "Working" || (!f.desired.is_empty() && f.desired != f.current) {
            why.push("updating");
        }
        if f.cordoned {
            why.push("cordoned");
        }
        if !node.is_ready() {
            why.push("NotReady");
        } else if !node.is_ready_for_update() {
            why.push("under pressure");
        }
        taken.push(format!("{} {}", node.metadata.name, why.join(" and ")));
    }
    let max = max_unavailable(pool.spec.max_unavailable.as_ref(), members.len());
    let mut out = format!("{updated} of {} updated", members.len());
    if !taken.is_empty() {
        out.push_str(&format!(
            "; unavailable ({} of maxUnavailable {max}): {}",
            taken.len(),
            crate::controllers::pick::names_text(&taken)
        ));
    }
    Some(out)
}

/// What holds a pool that is not Updated, from its status (None: nothing it says, e.g. nodes
/// still updating): the not-ready counts and the conditions of [`held_by_conditions`].
fn held_by(pool: &Value) -> Option<String> {
    // A paused pool moves no node: the first thing a timeout should say.
    let paused = (pool.pointer("/spec/paused").and_then(Value::as_bool) == Some(true))
        .then(|| "the pool is paused (spec.paused)".to_string());
    let parts: Vec<String> =
        [paused, not_all_ready(pool).map(|r| format!("{r} {SEE_NODES}")), held_by_conditions(pool)]
            .into_iter()
            .flatten()
            .collect();
    (!parts.is_empty()).then(|| parts.join("; "))
}

/// A condition's message for one line: its first `; `-separated part, at most 160 characters.
fn shortened(message: &str) -> String {
    const MAX: usize = 160;
    let (first, more) = match message.split_once("; ") {
        Some((first, _)) => (first, true),
        None => (message, false),
    };
    let mut out: String = first.chars().take(MAX).collect();
    if more || first.chars().count() > MAX {
        out.push_str(" …");
    }
    out
}

/// How long `rollout status` tries a coordinator that has not answered yet before it says so and
/// fails (once answered, it waits through outages until --timeout).
const FIRST_CONTACT_GRACE: std::time::Duration = std::time::Duration::from_secs(10);

/// `line` cut to fit in `width` columns (as the terminal draws it: a wide character, CJK or an
/// emoji, takes two; the last column kept an ellipsis where it is cut), for a line redrawn in
/// place.
fn fit_to_width(line: &str, width: usize) -> std::borrow::Cow<'_, str> {
    use unicode_width::UnicodeWidthChar;
    let width = width.max(2);
    // Measured as it is cut, a character at a time (a whole string's width can differ where a
    // selector joins an emoji to the character before it).
    let columns = |s: &str| s.chars().map(|c| c.width().unwrap_or(0)).sum::<usize>();
    if columns(line) < width {
        return std::borrow::Cow::Borrowed(line);
    }
    // One column short of the width: a line that fills the last column wraps on some terminals.
    let room = width - 2;
    let mut used = 0;
    let mut kept = String::new();
    for c in line.chars() {
        let w = c.width().unwrap_or(0);
        if used + w > room {
            break;
        }
        used += w;
        kept.push(c);
    }
    std::borrow::Cow::Owned(format!("{kept}…"))
}

/// How long the names of the nodes holding a pool back are looked for once `rollout status`
/// has timed out: the timeout is the user's, a coordinator that stopped answering must not
/// stretch it.
const AFTER_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(3);

async fn rollout_status(
    client: &Client,
    target: &[String],
    timeout: u64,
    not_config: Option<&str>,
    watch: bool,
) -> Result<()> {
    use std::io::Write;
    use std::time::{Duration, Instant};
    let (path, name, _) = pool_target(target, "status")?;
    // 0 waits for good, as kubectl's `--timeout=0`.
    let deadline = (timeout > 0).then(|| Instant::now() + Duration::from_secs(timeout));
    // On a terminal one line is redrawn in place; to a pipe, each new line is printed.
    let interactive = std::io::IsTerminal::is_terminal(&std::io::stdout());
    let mut last = String::new();
    // Ends the line being redrawn, so that what follows starts on a line of its own.
    let end_line = |last: &str| {
        if interactive && !last.is_empty() {
            println!();
        }
    };
    // The last error asking the coordinator, while it lasts (printed once per distinct error).
    let mut unreachable: Option<String> = None;
    // What the pool's status last said holds it back.
    let mut held: Option<String> = None;
    let mut grace = Grace::default();
    // With --watch=false, the failure last seen within its grace.
    let mut stale_failure: Option<String> = None;
    // Whether the coordinator has answered at all: requests that reach none for
    // FIRST_CONTACT_GRACE from the start are a setup mistake (a wrong address, a CA the server's
    // certificate does not match), not a restart to wait out for an hour; the grace covers a
    // coordinator still starting when the command is run.
    let mut answered = false;
    let started = Instant::now();
    loop {
        // A connection error or a 5xx is waited through until the timeout, as kubectl's
        // reflector re-lists through them: a coordinator restart does not end a rollout, so it
        // must not fail the command following it. Anything else (no such pool, no access) fails
        // at once.
        // Every request is bounded by the timeout (and, before a first answer, by the grace): a
        // coordinator that hangs (stopped, its host cut off) holds a request until the client's
        // own keepalive gives up, over a minute.
        let first_contact = (!answered).then(|| started + FIRST_CONTACT_GRACE);
        let limit = match (deadline, first_contact) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        // Set once the pool's GET answers: a follow-up request that is slow (the
        // MachineConfigs' list) is not a coordinator never reached.
        let reached = std::cell::Cell::new(false);
        let ask = async {
            let got = client.get(&path).await;
            reached.set(got.is_ok());
            match got {
                Ok(r) if r.code >= 500 || r.code == 429 => {
                    let code = r.code;
                    Ok(Err(r.into_result().err().map_or_else(|| format!("HTTP {code}"), |e| format!("{e:#}"))))
                }
                Ok(r) => {
                    let p = pool_progress(client, &r.into_result()?, &name, not_config, &mut grace).await;
                    Ok(p.map_err(|e| format!("{e:#}")))
                }
                Err(e) => anyhow::Ok(Err(format!("{e:#}"))),
            }
        };
        let asked = match limit {
            Some(at) => tokio::time::timeout_at(at.into(), ask).await.ok().transpose()?,
            None => Some(ask.await?),
        };
        answered |= reached.get();
        let no_answer = || format!("no answer from the coordinator at {} in time", client.server());
        // None: cut at the deadline after an answer, when what the last answer said stands.
        let progress = match asked {
            Some(progress) => Some(progress),
            None if answered => None,
            None => Some(Err(no_answer())),
        };
        if let Some(Err(e)) = &progress {
            if !answered && started.elapsed() >= FIRST_CONTACT_GRACE {
                bail!(
                    "cannot reach the coordinator at {} (tried for {} s): {e}",
                    client.server(),
                    FIRST_CONTACT_GRACE.as_secs()
                );
            }
        }
        if !watch {
            // Where it stands, once: a failure fails, anything else is said and is not one. A
            // failure that may be stale is looked at again until its grace is over (seconds),
            // within the timeout: said as waiting, it read as a rollout going on (exit 0) where
            // the pool had failed.
            let settled_by = |d: Option<Instant>| d.is_some_and(|d| Instant::now() >= d);
            match progress {
                Some(Ok(Progress::Settling(line, _, failure))) => {
                    if settled_by(deadline) {
                        bail!("{failure}");
                    }
                    tracing::debug!(%line, "a failure that may be stale; looking again");
                    stale_failure = Some(failure);
                }
                Some(Ok(Progress::Done(line) | Progress::Waiting(line, _))) => {
                    println!("{}", print::term_safe(&line));
                    return Ok(());
                }
                Some(Ok(Progress::Failed(why))) => bail!("{why}"),
                other => {
                    // Cut at the timeout (or no answer) while a failure was being looked at
                    // again: it stood until then, and is the answer.
                    if let Some(failure) = stale_failure {
                        bail!("{failure}");
                    }
                    let e = match other {
                        Some(Err(e)) => e,
                        _ => no_answer(),
                    };
                    bail!("could not tell whether pool {name} is updated: {e}")
                }
            }
            tokio::time::sleep(std::time::Duration::from_millis(300)).await;
            continue;
        }
        if let Some(progress) = progress {
            let progress = match progress {
                Ok(p) => {
                    if unreachable.take().is_some() {
                        eprintln!("reached the coordinator again");
                    }
                    p
                }
                Err(e) => {
                    if unreachable.as_deref() != Some(e.as_str()) {
                        end_line(&last);
                        last.clear();
                        // `--timeout 0` waits for good, as kubectl's; a coordinator never reached
                        // is tried for the first contact's grace only.
                        let until = match (answered, timeout) {
                            (false, t) => {
                                let grace = FIRST_CONTACT_GRACE.as_secs();
                                format!("retrying for up to {} s", if t > 0 { t.min(grace) } else { grace })
                            }
                            (true, 0) => "no timeout".to_string(),
                            (true, t) => format!("--timeout {t} s"),
                        };
                        eprintln!("warning: {e}; still waiting ({until})");
                    }
                    unreachable = Some(e);
                    Progress::Waiting(String::new(), None)
                }
            };
            match progress {
                Progress::Done(line) => {
                    end_line(&last);
                    println!("{}", print::term_safe(&line));
                    return Ok(());
                }
                Progress::Failed(why) => {
                    end_line(&last);
                    bail!("{why}");
                }
                Progress::Waiting(line, why) | Progress::Settling(line, why, _) if line != last && !line.is_empty() => {
                    held = why;
                    let shown = print::term_safe(&line);
                    if interactive {
                        // Within the terminal's width: a line that wraps is redrawn from its last
                        // row only, and every redraw left the rows above behind.
                        let width = terminal_size::terminal_size().map_or(80, |(w, _)| usize::from(w.0));
                        print!("\r{}\x1b[K", fit_to_width(&shown, width));
                    } else {
                        println!("{shown}");
                    }
                    std::io::stdout().flush()?;
                    last = line;
                }
                Progress::Waiting(_, why) | Progress::Settling(_, why, _) => {
                    if unreachable.is_none() {
                        held = why;
                    }
                }
            }
        }
        if deadline.is_some_and(|d| Instant::now() >= d) {
            end_line(&last);
            match unreachable {
                Some(e) => bail!("timed out after {timeout} s: could not tell whether pool {name} is updated: {e}"),
                None => match held {
                    Some(why) => {
                        // Named once, here: listing the fleet on every redraw would cost a big
                        // fleet's coordinator a list every 300 ms.
                        let names = tokio::time::timeout(AFTER_TIMEOUT, named_holders(client, &path)).await;
                        let why = match names {
                            Ok(Some(names)) => why.replace(SEE_NODES, &names),
                            _ => why,
                        };
                        bail!("timed out after {timeout} s: pool {name} is not updated: {why}")
                    }
                    None => {
                        match tokio::time::timeout(AFTER_TIMEOUT, slots_taken(client, &path)).await.ok().flatten() {
                            Some(what) => bail!("timed out after {timeout} s: pool {name} is not updated: {what}"),
                            None => bail!("timed out after {timeout} s: pool {name} is not updated"),
                        }
                    }
                },
            }
        }
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    }
}

/// The rendered configs (of `pool`, when given) and what uses them; an unknown pool is an error.
async fn rendered_inventory(client: &Client, pool: Option<&str>) -> Result<Vec<prune::Rendered>> {
    let items = |v: Value| v.get("items").and_then(Value::as_array).cloned().unwrap_or_default();
    let list = |rt: &'static ResourceType| async move {
        Ok::<_, anyhow::Error>(items(client.get(&resource_path(rt.path_ref(), None, None)).await?.into_result()?))
    };
    let pools = list(&resources::MACHINE_CONFIG_POOL).await?;
    if let Some(p) = pool {
        if !pools.iter().any(|v| v.pointer("/metadata/name").and_then(Value::as_str) == Some(p)) {
            bail!("machineconfigpool {p:?} not found (aloftctl get mcp lists them)");
        }
    }
    let (mcs, nodes) = (list(&resources::MACHINE_CONFIG).await?, list(&resources::NODE).await?);
    let mut inv = prune::inventory(&mcs, &pools, &nodes);
    inv.retain(|r| pool.is_none_or(|p| r.pool == p));
    Ok(inv)
}

async fn list_rendered(client: &Client, pool: Option<&str>, in_use: Option<bool>) -> Result<()> {
    let inv = rendered_inventory(client, pool).await?;
    let mut last_pool = None;
    for r in inv.iter().filter(|r| in_use.is_none_or(|u| r.in_use() == u)) {
        if last_pool != Some(&r.pool) {
            println!("{}", r.pool);
            last_pool = Some(&r.pool);
        }
        println!("  {} -- {} (Currently in use: {})", r.name, r.created, r.in_use());
    }
    if last_pool.is_none() {
        eprintln!("No rendered MachineConfigs found.");
    }
    Ok(())
}

async fn prune_rendered(client: &Client, pool: Option<&str>, count: Option<usize>, confirm: bool) -> Result<()> {
    let inv = rendered_inventory(client, pool).await?;
    let (delete, keep) = prune::plan(&inv, count);
    let dry = if confirm { "" } else { "DRY RUN: " };
    if !confirm {
        println!("Dry run enabled - no modifications will be made. Add --confirm to remove rendered machine configs.");
    }
    for r in &keep {
        println!(
            "{dry}Skipping deletion of rendered MachineConfig {} as it's currently in use ({})",
            r.name,
            r.used_by()
        );
    }
    let mut failed = 0;
    for r in &delete {
        if confirm {
            let path = resource_path(resources::MACHINE_CONFIG.path_ref(), None, Some(&r.name));
            let reply = client.call(reqwest::Method::DELETE, &path, None, None).await?;
            // Gone already (another prune) is what was wanted.
            if reply.code != 404 {
                if let Err(e) = reply.into_result() {
                    eprintln!("error: deleting rendered MachineConfig {}: {e}", r.name);
                    failed += 1;
                    continue;
                }
            }
        }
        println!("{dry}Deleted rendered MachineConfig {}", r.name);
    }
    if delete.is_empty() {
        println!("No unused rendered MachineConfigs to delete.");
    }
    if failed > 0 {
        bail!("{failed} rendered MachineConfig(s) not deleted");
    }
    Ok(())
}

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

    fn pool(generation: i64, observed: Option<i64>, sources: &[&str]) -> Value {
        let source: Vec<Value> = sources.iter().map(|n| json!({"kind": "MachineConfig", "name": n})).collect();
        let mut p = json!({"metadata": {"name": "worker", "generation": generation},
            "spec": {"machineConfigSelector": {"matchLabels": {"machineconfiguration.openshift.io/role": "worker"}},
                     "configuration": {"name": "rendered-worker-1", "source": source}},
            "status": {}});
        if let Some(o) = observed {
            p["status"]["observedGeneration"] = o.into();
        }
        p
    }

    fn mc(name: &str, role: &str) -> Value {
        json!({"metadata": {"name": name, "labels": {"machineconfiguration.openshift.io/role": role}},
            "spec": {"config": {"ignition": {"version": "3.4.0"}}}})
    }

    /// A new config the pool selects (not one it does not select, nor a rendered one), one the
    /// target was rendered from that is gone, and a status behind the spec each mean the render
    /// has not caught up; an absent observedGeneration is
    /// no sign either way.
    #[test]
    fn render_pending_sees_new_configs_and_old_status() {
        let rendered = json!({"metadata": {"name": "rendered-worker-1", "ownerReferences": [{"kind": "MachineConfigPool", "name": "worker"}],
            "annotations": {"machineconfiguration.openshift.io/generated-by-controller-version": "x"}}, "spec": {}});
        let mcs = vec![mc("00-worker", "worker"), mc("50-infra", "infra"), rendered];
        assert_eq!(render_pending(&pool(2, Some(2), &["00-worker"]), &mcs), None);
        assert_eq!(render_pending(&pool(2, None, &["00-worker"]), &mcs), None);
        assert_eq!(
            render_pending(&pool(3, Some(2), &["00-worker"]), &mcs).as_deref(),
            Some("waiting for the status of generation 3 (it shows 2)")
        );
        let more = [mcs.clone(), vec![mc("99-worker-a", "worker"), mc("99-worker-b", "worker")]].concat();
        assert_eq!(
            render_pending(&pool(2, Some(2), &["00-worker", "99-worker-a"]), &more).as_deref(),
            Some("waiting for the render of MachineConfig 99-worker-b")
        );
        assert_eq!(
            render_pending(&pool(2, Some(2), &["00-worker"]), &more).as_deref(),
            Some("waiting for the render of MachineConfigs 99-worker-a, 99-worker-b")
        );
        // Deleted to revert: the target still names it.
        assert_eq!(
            render_pending(&pool(2, Some(2), &["00-worker", "70-bad"]), &mcs).as_deref(),
            Some("waiting for the render without MachineConfig 70-bad")
        );
        assert_eq!(
            render_pending(&pool(2, Some(2), &["00-worker", "70-bad"]), &more).as_deref(),
            Some("waiting for the render of MachineConfigs 99-worker-a, 99-worker-b and without MachineConfig 70-bad")
        );
    }

    /// A resume the node controller has not acted on leaves the breaker's condition from before
    /// it: pending until the pool records the token or the breaker shows closed. A pool Degraded
    /// by failing nodes says its open breaker too.
    #[test]
    fn a_resume_is_pending_until_honoured_and_the_breaker_is_said_beside_failing_nodes() {
        let open = json!({"type": "CircuitBroken", "status": "True",
            "message": "Rollout of r2 stopped by the circuit breaker: resume with `aloftctl rollout resume mcp/worker`"});
        let mut p = json!({"metadata": {"annotations": {"aloft.dev/resumeRollout": "t2"}},
            "status": {"rollout": {"resumeToken": "t1"}, "conditions": [open]}});
        assert!(resume_pending(&p));
        assert!(!resume_honoured(&p, "t2"));
        p["status"]["rollout"]["resumeToken"] = "t2".into();
        assert!(!resume_pending(&p), "recorded");
        p["status"]["rollout"]["resumeToken"] = "t1".into();
        p["status"]["conditions"][0]["status"] = "False".into();
        assert!(!resume_pending(&p), "the breaker closed (the rollout finished meanwhile)");
        assert!(resume_honoured(&p, "t2"));
        p["status"]["conditions"][0]["status"] = "True".into();
        p["metadata"]["annotations"] = json!({});
        assert!(!resume_pending(&p), "no resume asked for");

        assert_eq!(pool_failure(&p, "worker").unwrap(), format!("pool worker: {}", open["message"].as_str().unwrap()));
        p["status"]["conditions"]
            .as_array_mut()
            .unwrap()
            .push(json!({"type": "Degraded", "status": "True", "message": "Node w1 is reporting: \"boom\""}));
        let f = pool_failure(&p, "worker").unwrap();
        assert!(f.starts_with("pool worker is degraded: Node w1 is reporting: \"boom\"; Rollout of r2 stopped"), "{f}");
        assert!(f.ends_with("aloftctl rollout resume mcp/worker`"), "{f}");
        p["status"]["conditions"][0]["status"] = "False".into();
        assert_eq!(pool_failure(&p, "worker").unwrap(), "pool worker is degraded: Node w1 is reporting: \"boom\"");
        // Degraded by the breaker alone: the breaker's own words, once.
        p["status"]["conditions"][0]["status"] = "True".into();
        p["status"]["conditions"][1] = json!({"type": "Degraded", "status": "True", "reason": "CircuitBroken",
            "message": "Rollout of r2 stopped by the circuit breaker (see the CircuitBroken condition)"});
        assert_eq!(
            pool_failure(&p, "worker").unwrap(),
            format!("pool worker is degraded: {}", open["message"].as_str().unwrap())
        );
    }

    #[test]
    fn a_redrawn_line_fits_the_terminal() {
        assert_eq!(fit_to_width("pool worker: 1/3 updated", 80), "pool worker: 1/3 updated");
        let cut = fit_to_width("pool worker: [####------] 1/3 updated, target rendered-worker-0123456789", 40);
        assert_eq!(cut.chars().count(), 39, "{cut}");
        assert!(cut.starts_with("pool worker: [####------] 1/3 updated,") && cut.ends_with('…'), "{cut}");
        // Exactly the width: cut too (it would fill the last column).
        assert_eq!(fit_to_width("abcd", 4), "ab…");
        assert_eq!(fit_to_width("abc", 4), "abc");
        assert_eq!(fit_to_width("héllo wörld", 0), "…");
        // Wide characters take two columns each: cut by what the terminal draws, not by count.
        use unicode_width::UnicodeWidthStr;
        let wide = "pool 工作节点: 更新中";
        assert_eq!(wide.width(), 21);
        assert_eq!(fit_to_width(wide, 22), wide);
        let cut = fit_to_width(wide, 12);
        assert_eq!((cut.as_ref(), cut.width()), ("pool 工作…", 10), "never half a character");
        let cut = fit_to_width(wide, 13);
        assert_eq!((cut.as_ref(), cut.width()), ("pool 工作节…", 12));
    }

    /// Every node updated but one cordoned (or NotReady): the full bar says what holds the pool;
    /// a budget's condition is shown shortened, and both make the timeout's reason.
    #[test]
    fn progress_line_says_what_holds_the_pool() {
        let mut p = json!({"spec": {"configuration": {"name": "r2"}},
            "status": {"machineCount": 4, "updatedMachineCount": 4, "readyMachineCount": 3,
                "unavailableMachineCount": 1, "degradedMachineCount": 0,
                "conditions": [{"type": "Updated", "status": "False"}]}});
        assert_eq!(
            progress_line(&p, "worker", None),
            "pool worker: [##############################] 4/4 updated, 3 ready, 1 unavailable, 0 degraded, target r2"
        );
        assert_eq!(
            held_by(&p).as_deref(),
            Some("3 ready, 1 unavailable (cordoned or NotReady nodes: aloftctl get nodes)")
        );
        let budget = "w0, w1 wait: NodeDisruptionBudget pct allows 0 of 4 nodes unavailable and 0 already are, which blocks the group for good";
        p["status"] = json!({"machineCount": 4, "updatedMachineCount": 0, "readyMachineCount": 0,
            "conditions": [{"type": "BudgetBlocked", "status": "True", "reason": "NodeDisruptionBudget pct",
                "message": format!("{budget}; w2 waits: NodeDisruptionBudget other allows 0")}]});
        let line = progress_line(&p, "worker", None);
        assert!(line.contains("0/4 updated, 0 degraded, target r2; blocked: "), "{line}");
        assert!(line.ends_with(&format!("{budget} …")), "{line}");
        assert_eq!(held_by(&p), Some(format!("blocked: {budget} …")));
        // While nodes are still updating and nothing holds them, nothing is said.
        p["status"] =
            json!({"machineCount": 4, "updatedMachineCount": 2, "readyMachineCount": 2, "unavailableMachineCount": 1});
        assert_eq!(held_by(&p), None);
        assert!(progress_line(&p, "worker", None).ends_with("2/4 updated, 0 degraded, target r2"));
        // A paused pool: what a timeout says first.
        p["spec"]["paused"] = json!(true);
        assert_eq!(held_by(&p).as_deref(), Some("the pool is paused (spec.paused)"));
        assert_eq!(shortened(&"x".repeat(200)).chars().count(), 162);
    }

    /// Paused is said, and the canary phase is not claimed then.
    #[test]
    fn progress_line_says_paused() {
        let mut p = json!({"spec": {"paused": true, "configuration": {"name": "r2"}},
            "status": {"machineCount": 4, "updatedMachineCount": 1, "degradedMachineCount": 0, "rollout": {"phase": "Canary"}}});
        let line = progress_line(&p, "worker", None);
        assert_eq!(line, "pool worker: [#######-----------------------] 1/4 updated, 0 degraded, paused, target r2");
        p["spec"]["paused"] = false.into();
        assert!(progress_line(&p, "worker", Some("r2"))
            .ends_with(", canary, target r2 (waiting for a target other than r2)"));
    }

    #[test]
    fn get_targets_by_type() {
        let args = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let g = get_targets(&args(&["mcp/a", "mc/b", "mcp/c"])).unwrap();
        let shape: Vec<(&str, Vec<String>)> = g.iter().map(|(rt, n)| (rt.plural, n.clone())).collect();
        assert_eq!(shape, vec![("machineconfigpools", args(&["a", "c"])), ("machineconfigs", args(&["b"]))]);
        let g = get_targets(&args(&["no,mcp"])).unwrap();
        assert_eq!(
            g.iter().map(|(rt, n)| (rt.plural, n.len())).collect::<Vec<_>>(),
            [("nodes", 0), ("machineconfigpools", 0)]
        );
        assert!(get_targets(&args(&["mcp/"])).unwrap_err().to_string().contains("no name"));
    }

    /// kubectl's Events section: `<none>`, or Type, Reason, Age, From, Message, newest last, with
    /// a repeated Event's count.
    #[test]
    fn events_section_as_kubectl_describes() {
        let now = chrono::DateTime::parse_from_rfc3339("2026-01-01T00:10:00Z").unwrap().with_timezone(&chrono::Utc);
        assert_eq!(events_section(&[], now), "Events:  <none>\n");
        let newer = json!({"type": "Warning", "reason": "DrainTimeout", "message": "too slow", "count": 3,
            "firstTimestamp": "2026-01-01T00:00:00Z", "lastTimestamp": "2026-01-01T00:09:00Z",
            "source": {"component": "drain-controller"}});
        let older = json!({"type": "Normal", "reason": "Drained", "message": "cordoned",
            "firstTimestamp": "2026-01-01T00:05:00Z", "lastTimestamp": "2026-01-01T00:05:00Z",
            "reportingComponent": "drain-controller"});
        assert_eq!(
            events_section(&[newer, older], now),
            "Events:\n\
             \x20 Type     Reason        Age                From              Message\n\
             \x20 ----     ------        ----               ----              -------\n\
             \x20 Normal   Drained       5m                 drain-controller  cordoned\n\
             \x20 Warning  DrainTimeout  60s (x3 over 10m)  drain-controller  too slow\n"
        );
    }

    /// A render failure that names a MachineConfig deleted since is about configs there no
    /// longer are.
    #[test]
    fn a_render_failure_naming_a_deleted_config_is_stale() {
        let mcs = vec![mc("30-p", "infra")];
        let msg = "Failed to render configuration for pool infra: MachineConfig 31-pq: spec.config.storage.files[0]: \
                   path /etc/p/q is under the file /etc/p of MachineConfig 30-p.";
        assert_eq!(named_and_gone(msg, &mcs), ["31-pq"]);
        assert!(named_and_gone(msg, &[mc("30-p", "infra"), mc("31-pq", "infra")]).is_empty());
        assert!(named_and_gone("no MachineConfigs found matching spec.machineConfigSelector", &mcs).is_empty());
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

    #[test]
    fn events_are_asked_of_the_server_by_field_selector() {
        assert_eq!(
            events_path(&resources::NODE, "kube-system", "n1", ""),
            "/api/v1/namespaces/default/events?fieldSelector=involvedObject%2Ename%3Dn1%2CinvolvedObject%2Ekind%3DNode"
        );
        let by_uid = events_path(&resources::NODE, "", "n1", "u1");
        assert!(by_uid.ends_with("%2CinvolvedObject%2Euid%3Du1"), "{by_uid}");
        assert!(events_path(&resources::EVENT, "ns1", "e1", "").starts_with("/api/v1/namespaces/ns1/events?"));
    }

    /// The conditions' columns fit their contents, and the reason is shown.
    #[test]
    fn conditions_show_their_reason_in_columns_that_fit() {
        let conds = [
            json!({"type": "DisruptionAllowed", "status": "False", "reason": "InsufficientNodes",
                "lastTransitionTime": "2026-11-29T18:37:52Z", "message": "no disruption allowed"}),
            json!({"type": "Updated", "status": "True", "lastTransitionTime": "2026-11-29T18:37:50Z"}),
        ];
        assert_eq!(
            conditions_section(&conds),
            "Conditions:\n  \
             TYPE               STATUS  REASON             LAST TRANSITION       MESSAGE\n  \
             DisruptionAllowed  False   InsufficientNodes  2026-11-29T18:37:52Z  no disruption allowed\n  \
             Updated            True                       2026-11-29T18:37:50Z\n"
        );
    }

    /// Events of the same second are listed in the order they were written.
    #[test]
    fn events_of_one_second_keep_their_write_order() {
        let e = |rv: &str, msg: &str| {
            json!({"metadata": {"resourceVersion": rv}, "type": "Normal", "reason": "SetDesiredConfig",
                "lastTimestamp": "2026-11-29T18:56:58Z", "message": msg})
        };
        let events = [e("503", "w3"), e("490", "w0"), e("499", "w2"), e("495", "w1")];
        let now = chrono::DateTime::parse_from_rfc3339("2026-11-29T18:57:00Z").unwrap().to_utc();
        let text = events_section(&events, now);
        let order: Vec<&str> = text.lines().skip(3).filter_map(|l| l.split_whitespace().last()).collect();
        assert_eq!(order, ["w0", "w1", "w2", "w3"], "{text}");
    }

    #[test]
    fn status_fields_as_yaml() {
        let v = json!({"name": "r1", "source": [{"kind": "MachineConfig", "name": "00-worker"}]});
        assert_eq!(
            status_field("configuration", &v),
            "  configuration:\n    name: r1\n    source:\n    - kind: MachineConfig\n      name: 00-worker\n"
        );
        assert_eq!(status_field("machineCount", &json!(3)), "  machineCount: 3\n");
        let long: Vec<Value> = (0..50).map(|i| json!(i)).collect();
        assert_eq!(status_field("many", &json!(long)), "  many: (50 lines: see `get -o yaml`)\n");
    }
}

#[cfg(test)]
mod rollout_help_tests {
    use super::*;
    use clap::CommandFactory;

    /// `rollout status --help` teaches the pool forms with an example (it showed only
    /// `<TARGET>...`), and every form it names is one the parser takes.
    #[test]
    fn rollout_help_shows_the_pool_forms_the_parser_accepts() {
        for verb in ["status", "resume"] {
            let mut cli = Cli::command();
            let rollout = cli.find_subcommand_mut("rollout").expect("rollout");
            let sub = rollout.find_subcommand_mut(verb).expect(verb);
            let help = sub.render_long_help().to_string();
            assert!(!help.contains("TARGET"), "{help}");
            assert!(help.contains(&format!("Usage: aloftctl rollout {verb} [OPTIONS] mcp/NAME\n")), "{help}");
            assert!(help.contains(&format!("aloftctl rollout {verb} [OPTIONS] mcp NAME\n")), "{help}");
            assert!(help.contains("e.g. mcp/worker or mcp worker"), "{help}");
            assert!(help.contains("machineconfigpool"), "{help}");
        }
        let forms = [
            vec!["mcp/worker"],
            vec!["mcp", "worker"],
            vec!["machineconfigpool/worker"],
            vec!["machineconfigpools", "worker"],
            vec!["MCP/worker"],
            vec!["machineconfigpools.machineconfiguration.openshift.io/worker"],
            vec!["machineconfigpool.machineconfiguration.openshift.io", "worker"],
        ];
        for form in forms {
            let args: Vec<String> = form.iter().map(|s| s.to_string()).collect();
            let (_, name, _) = pool_target(&args, "status").unwrap_or_else(|e| panic!("{form:?}: {e:#}"));
            assert_eq!(name, "worker", "{form:?}");
        }
    }
}
