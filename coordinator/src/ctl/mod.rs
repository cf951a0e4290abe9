//! aloftctl: the command-line client. Reads the client config that `aloft-coordinator serve`
//! writes (a kubeconfig), or --server/--token/--certificate-authority, or ALOFT_* variables.

pub mod apply;
pub mod print;
pub mod prune;

use crate::client::{resource_path, Client, ClientConfig};
use crate::resources::{self, ResourceType};
use anyhow::{anyhow, bail, Context, Result};
use clap::{Parser, Subcommand};
use print::Output;
use serde_json::Value;
use std::path::PathBuf;

const TABLE_ACCEPT: &str = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json";

/// Talk to an aloft coordinator: pools, machine configs, nodes.
///
/// Resource types take kubectl's names: machineconfigpools (mcp), machineconfigs (mc), nodes (no),
/// events (ev), nodedisruptionbudgets (ndb), also as TYPE/NAME.
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
    /// Client config (kubeconfig format). Default: $ALOFT_KUBECONFIG, ~/.config/aloft/kubeconfig,
    /// then /var/lib/aloft-coordinator/admin.kubeconfig.
    #[arg(long, global = true, env = "ALOFT_KUBECONFIG")]
    kubeconfig: Option<PathBuf>,
    /// Coordinator URL, overriding the client config.
    #[arg(long, global = true, env = "ALOFT_SERVER")]
    server: Option<String>,
    /// Bearer token, overriding the client config.
    #[arg(long, global = true, env = "ALOFT_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// CA certificate file, overriding the client config.
    #[arg(long, global = true, env = "ALOFT_CA")]
    certificate_authority: Option<PathBuf>,
    /// Namespace, for namespaced kinds (events).
    #[arg(short = 'n', long, global = true, default_value = "default")]
    namespace: String,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// List objects or show one (tables by default; -o yaml|json|wide|name).
    Get {
        /// TYPE, TYPE/NAME, or TYPE NAME...
        #[arg(required_unless_present = "raw")]
        args: Vec<String>,
        /// Print what the server answers at this path, as it is (e.g. `/readyz?verbose`,
        /// `/metrics`, `/apis/machineconfiguration.openshift.io/v1/machineconfigpools`).
        #[arg(long, value_name = "PATH", conflicts_with_all = ["args", "output", "selector", "watch"])]
        raw: Option<String>,
        #[arg(short = 'o', long, value_enum)]
        output: Option<Output>,
        /// Label selector, e.g. `machineconfiguration.openshift.io/role=worker`.
        #[arg(short = 'l', long)]
        selector: Option<String>,
        /// After listing, watch for changes and print them.
        #[arg(short = 'w', long)]
        watch: bool,
    },
    /// Show an object in detail: metadata, spec, conditions.
    Describe {
        #[arg(required = true)]
        args: Vec<String>,
    },
    /// Create or update objects from files (YAML/JSON, multi-document, directories, - for stdin).
    Apply {
        #[arg(short = 'f', long = "filename", required = true)]
        files: Vec<String>,
        /// Validate on the server without storing.
        #[arg(long)]
        dry_run: bool,
    },
    /// Delete objects by TYPE NAME... or from files.
    Delete {
        args: Vec<String>,
        #[arg(short = 'f', long = "filename")]
        files: Vec<String>,
        /// Succeed when the object is already gone.
        #[arg(long)]
        ignore_not_found: bool,
    },
    /// Change fields of one object with a merge patch or a JSON patch.
    Patch {
        #[arg(required = true)]
        args: Vec<String>,
        /// merge (RFC 7386) or json (RFC 6902).
        #[arg(long = "type", default_value = "merge")]
        patch_type: String,
        #[arg(short = 'p', long)]
        patch: String,
        /// Patch the status subresource.
        #[arg(long)]
        subresource: Option<String>,
    },
    /// List the resource types the coordinator serves.
    ApiResources,
    /// Follow a pool's rollout (`status`), or resume one its circuit breaker stopped (`resume`).
    Rollout {
        #[command(subcommand)]
        cmd: RolloutCmd,
    },
    /// Administration: `adm prune renderedmachineconfigs`.
    Adm {
        #[command(subcommand)]
        cmd: AdmCmd,
    },
}

#[derive(Subcommand)]
enum AdmCmd {
    /// Delete objects nothing needs any more.
    Prune {
        #[command(subcommand)]
        cmd: PruneCmd,
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

#[derive(Subcommand)]
enum RolloutCmd {
    /// e.g. `aloftctl rollout status mcp/worker`
    Status {
        /// mcp/NAME (or machineconfigpool/NAME)
        target: String,
        /// Give up after this many seconds.
        #[arg(long, default_value_t = 3600)]
        timeout: u64,
        /// Wait for a target other than this rendered config (e.g. the one before a change).
        #[arg(long)]
        not_config: Option<String>,
    },
    /// Close a pool's circuit breaker: the nodes that failed so far are forgiven and the
    /// rollout of the same config continues. e.g. `aloftctl rollout resume mcp/worker`
    Resume {
        /// mcp/NAME (or machineconfigpool/NAME)
        target: String,
    },
}

fn default_kubeconfig() -> Option<PathBuf> {
    let home = std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".config/aloft/kubeconfig"));
    let system = PathBuf::from("/var/lib/aloft-coordinator/admin.kubeconfig");
    home.filter(|p| p.exists()).or_else(|| system.exists().then_some(system))
}

fn client_config(cli: &Cli) -> Result<ClientConfig> {
    let mut cfg = match cli.kubeconfig.clone().or_else(default_kubeconfig) {
        Some(p) => ClientConfig::from_kubeconfig(&p)?,
        None => ClientConfig::default(),
    };
    if let Some(s) = &cli.server {
        cfg.server = s.clone();
    }
    if let Some(t) = &cli.token {
        cfg.token = Some(t.clone());
    }
    if let Some(ca) = &cli.certificate_authority {
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
                Ok((resolve(t)?, Some(n.to_string())))
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

/// Run aloftctl with the process arguments.
pub async fn main() -> Result<()> {
    crate::client::install_crypto();
    let cli = Cli::parse();
    let client = Client::new(&client_config(&cli)?)?;
    let ns = cli.namespace.clone();
    match cli.cmd {
        Cmd::Get { raw: Some(path), .. } => get_raw(&client, &path).await,
        Cmd::Get { args, output, selector, watch, raw: None } => {
            get(&client, &ns, &args, output, selector, watch).await
        }
        Cmd::Describe { args } => describe(&client, &ns, &args).await,
        Cmd::Apply { files, dry_run } => apply_files(&client, &ns, &files, dry_run).await,
        Cmd::Delete { args, files, ignore_not_found } => delete(&client, &ns, &args, &files, ignore_not_found).await,
        Cmd::Patch { args, patch_type, patch, subresource } => {
            patch_cmd(&client, &ns, &args, &patch_type, &patch, subresource).await
        }
        Cmd::Rollout { cmd: RolloutCmd::Status { target, timeout, not_config } } => {
            rollout_status(&client, &target, timeout, not_config.as_deref()).await
        }
        Cmd::Rollout { cmd: RolloutCmd::Resume { target } } => rollout_resume(&client, &target).await,
        Cmd::Adm {
            cmd: AdmCmd::Prune { cmd: PruneCmd::RenderedMachineConfigs { cmd, pool_name, count, confirm } },
        } => match cmd {
            Some(RenderedCmd::List { pool_name, in_use }) => list_rendered(&client, pool_name.as_deref(), in_use).await,
            None => prune_rendered(&client, pool_name.as_deref(), count, confirm).await,
        },
        Cmd::ApiResources => {
            println!("{:<20} {:<12} {:<42} {:<11} KIND", "NAME", "SHORTNAMES", "APIVERSION", "NAMESPACED");
            for r in resources::ALL {
                println!(
                    "{:<20} {:<12} {:<42} {:<11} {}",
                    r.plural,
                    r.short_names.join(","),
                    r.api_version(),
                    r.namespaced,
                    r.kind
                );
            }
            Ok(())
        }
    }
}

/// `get --raw PATH`: the body on stdout as it came; an answer other than 2xx is an error carrying
/// the body (a failing `/readyz` lists its checks there).
async fn get_raw(client: &Client, path: &str) -> Result<()> {
    if !path.starts_with('/') {
        bail!("--raw takes a path from the server's root, starting with '/' (e.g. /readyz?verbose), not {path:?}");
    }
    let (code, body) = client.get_raw(path).await?;
    let text = String::from_utf8_lossy(&body);
    if !(200..300).contains(&code) {
        bail!("the server answered {code} for {path}: {}", text.trim_end());
    }
    print!("{text}");
    Ok(())
}

async fn get(
    client: &Client,
    ns: &str,
    args: &[String],
    output: Option<Output>,
    selector: Option<String>,
    watch: bool,
) -> Result<()> {
    let mut q = Vec::new();
    if let Some(s) = &selector {
        q.push(("labelSelector", s.clone()));
    }
    let mut first = true;
    for (rt, name) in targets(args)? {
        let path = with_query(resource_path(rt.path_ref(), Some(ns), name.as_deref()), &q);
        match output {
            None | Some(Output::Wide) => {
                let t = match name {
                    Some(_) => {
                        client.call(reqwest::Method::GET, &path, None, Some(TABLE_ACCEPT)).await?.into_result()?
                    }
                    None => list_in_pages(client, &path, Some(TABLE_ACCEPT)).await?,
                };
                let text = print::table_text(&t, output == Some(Output::Wide), first);
                if t.get("rows").and_then(Value::as_array).is_some_and(Vec::is_empty) && name.is_none() {
                    eprintln!("No resources found.");
                } else {
                    print!("{text}");
                }
                first = false;
                if watch {
                    let rv = t.pointer("/metadata/resourceVersion").and_then(Value::as_str).unwrap_or("0").to_string();
                    follow(client, rt, ns, name.as_deref(), &q, &rv, output == Some(Output::Wide)).await?;
                }
            }
            Some(fmt) => {
                let v = match name {
                    Some(_) => client.get(&path).await?.into_result()?,
                    None => list_in_pages(client, &path, None).await?,
                };
                let v = if name.is_none() && fmt != Output::Name {
                    serde_json::json!({"apiVersion": "v1", "kind": "List", "items": v.get("items").cloned().unwrap_or_default()})
                } else {
                    v
                };
                match fmt {
                    Output::Yaml => print!("{}", print::yaml(&v)),
                    Output::Json => print!("{}", print::json(&v)),
                    Output::Name => {
                        let items = match v.get("items").and_then(Value::as_array) {
                            Some(items) => items.clone(),
                            None => vec![v],
                        };
                        for i in items {
                            println!(
                                "{}/{}",
                                rt.singular_qualified(),
                                i.pointer("/metadata/name").and_then(Value::as_str).unwrap_or("")
                            );
                        }
                    }
                    Output::Wide => {}
                }
            }
        }
    }
    Ok(())
}

/// Print rows as watch events arrive, reconnecting from the last version when the server ends
/// the watch.
async fn follow(
    client: &Client,
    rt: &ResourceType,
    ns: &str,
    name: Option<&str>,
    q: &[(&str, String)],
    rv: &str,
    wide: bool,
) -> Result<()> {
    use futures::StreamExt;
    let mut rv = rv.to_string();
    loop {
        let mut query = q.to_vec();
        query.push(("watch", "true".into()));
        query.push(("resourceVersion", rv.clone()));
        if let Some(n) = name {
            query.push(("fieldSelector", format!("metadata.name={n}")));
        }
        let path = with_query(resource_path(rt.path_ref(), Some(ns), None), &query);
        let resp = client.watch(&path, Some(TABLE_ACCEPT)).await?;
        let mut stream = resp.bytes_stream();
        let mut buf = Vec::new();
        while let Some(chunk) = stream.next().await {
            buf.extend_from_slice(&chunk?);
            while let Some(pos) = buf.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = buf.drain(..=pos).collect();
                let ev: Value = serde_json::from_slice(&line).context("malformed watch event")?;
                if ev.get("type").and_then(Value::as_str) == Some("ERROR") {
                    bail!(
                        "watch failed: {}",
                        ev.pointer("/object/message").and_then(Value::as_str).unwrap_or("unknown error")
                    );
                }
                let obj = ev.get("object").cloned().unwrap_or_default();
                if let Some(r) = obj.pointer("/metadata/resourceVersion").and_then(Value::as_str) {
                    rv = r.to_string();
                }
                print!("{}", print::table_text(&obj, wide, false));
            }
        }
    }
}

async fn describe(client: &Client, ns: &str, args: &[String]) -> Result<()> {
    for (rt, name) in targets(args)? {
        let name = name.ok_or_else(|| anyhow!("describe needs a name: aloftctl describe {} NAME", rt.singular))?;
        let obj = client.get(&resource_path(rt.path_ref(), Some(ns), Some(&name))).await?.into_result()?;
        println!("Name:         {name}");
        println!("Kind:         {}", rt.kind);
        let meta = obj.get("metadata").cloned().unwrap_or_default();
        for (title, key) in [("Labels:", "labels"), ("Annotations:", "annotations")] {
            let map = meta.get(key).and_then(Value::as_object).cloned().unwrap_or_default();
            if map.is_empty() {
                println!("{title:<13} <none>");
            }
            for (i, (k, v)) in map.iter().enumerate() {
                let v = v.as_str().unwrap_or("");
                let v = if v.len() > 100 { format!("{}...", &v[..v.floor_char_boundary(100)]) } else { v.to_string() };
                println!("{:<13} {k}={v}", if i == 0 { title } else { "" });
            }
        }
        println!("Created:      {}", meta.get("creationTimestamp").and_then(Value::as_str).unwrap_or(""));
        if let Some(spec) = obj.get("spec") {
            println!("Spec:");
            for line in print::yaml(spec).lines() {
                println!("  {line}");
            }
        }
        let conds = obj.pointer("/status/conditions").and_then(Value::as_array).cloned().unwrap_or_default();
        if let Some(status) = obj.get("status").and_then(Value::as_object) {
            println!("Status:");
            for (k, v) in status.iter().filter(|(k, _)| *k != "conditions") {
                println!("  {k}: {}", if v.is_string() { v.as_str().unwrap_or("").to_string() } else { v.to_string() });
            }
        }
        if !conds.is_empty() {
            println!("Conditions:\n  {:<16} {:<7} {:<22} MESSAGE", "TYPE", "STATUS", "LAST TRANSITION");
            for c in conds {
                let s = |k: &str| c.get(k).and_then(Value::as_str).unwrap_or("").to_string();
                println!("  {:<16} {:<7} {:<22} {}", s("type"), s("status"), s("lastTransitionTime"), s("message"));
            }
        }
        println!();
    }
    Ok(())
}

async fn apply_files(client: &Client, ns: &str, files: &[String], dry_run: bool) -> Result<()> {
    let mut objects = Vec::new();
    for f in files {
        objects.extend(apply::read_objects(f)?);
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
        plan.push((rt, name, obj));
    }
    let dry = if dry_run { "?dryRun=All" } else { "" };
    let suffix = if dry_run { " (server dry run)" } else { "" };
    for (rt, name, mut obj) in plan {
        let obj_ns = obj.pointer("/metadata/namespace").and_then(Value::as_str).unwrap_or(ns).to_string();
        apply::annotate_last_applied(&mut obj)?;
        let path = resource_path(rt.path_ref(), Some(&obj_ns), Some(&name));
        let live = client.get(&path).await?;
        let what = format!("{}/{}", rt.singular_qualified(), name);
        if live.code == 404 {
            client
                .post(&format!("{}{dry}", resource_path(rt.path_ref(), Some(&obj_ns), None)), &obj)
                .await?
                .into_result()?;
            println!("{what} created{suffix}");
            continue;
        }
        let live = live.into_result()?;
        let last = apply::last_applied(&live);
        let patch = apply::three_way_patch(last.as_ref(), &obj);
        // As kubectl: a patch that changes nothing on the live object is not sent.
        let mut patched = live.clone();
        json_patch::merge(&mut patched, &patch);
        if patched == live {
            println!("{what} unchanged{suffix}");
            continue;
        }
        client.patch(&format!("{path}{dry}"), "application/merge-patch+json", &patch).await?.into_result()?;
        println!("{what} configured{suffix}");
    }
    Ok(())
}

async fn delete(client: &Client, ns: &str, args: &[String], files: &[String], ignore_not_found: bool) -> Result<()> {
    let mut items: Vec<(&'static ResourceType, String, String)> = Vec::new();
    for f in files {
        for (origin, obj) in apply::read_objects(f)? {
            let av = obj.get("apiVersion").and_then(Value::as_str).unwrap_or("");
            let kind = obj.get("kind").and_then(Value::as_str).unwrap_or("");
            let rt = resources::by_kind(av, kind).ok_or_else(|| anyhow!("{origin}: no resource for {av} {kind}"))?;
            let name = obj.pointer("/metadata/name").and_then(Value::as_str).unwrap_or("").to_string();
            let n = obj.pointer("/metadata/namespace").and_then(Value::as_str).unwrap_or(ns).to_string();
            items.push((rt, name, n));
        }
    }
    if !args.is_empty() {
        for (rt, name) in targets(args)? {
            let name = name.ok_or_else(|| anyhow!("delete needs names: aloftctl delete {} NAME", rt.singular))?;
            items.push((rt, name, ns.to_string()));
        }
    }
    if items.is_empty() {
        bail!("nothing to delete: give TYPE NAME... or -f FILE");
    }
    let mut failed = false;
    for (rt, name, n) in items {
        let r = client.delete(&resource_path(rt.path_ref(), Some(&n), Some(&name))).await?;
        if r.ok() {
            println!("{} {name:?} deleted", rt.singular_qualified());
        } else if r.code == 404 && ignore_not_found {
            continue;
        } else {
            eprintln!("{}", r.into_result().err().map(|e| e.to_string()).unwrap_or_default());
            failed = true;
        }
    }
    if failed {
        bail!("some objects were not deleted");
    }
    Ok(())
}

async fn patch_cmd(
    client: &Client,
    ns: &str,
    args: &[String],
    patch_type: &str,
    patch: &str,
    sub: Option<String>,
) -> Result<()> {
    let ctype = match patch_type {
        "merge" => "application/merge-patch+json",
        "json" => "application/json-patch+json",
        "strategic" => bail!("--type strategic is not supported by aloft: use merge or json"),
        other => bail!("--type {other:?}: want merge or json"),
    };
    let body: Value = serde_json::from_str(patch).map_err(|e| anyhow!("--patch is not JSON: {e}"))?;
    for (rt, name) in targets(args)? {
        let name = name.ok_or_else(|| anyhow!("patch needs a name: aloftctl patch {} NAME -p ...", rt.singular))?;
        let mut path = resource_path(rt.path_ref(), Some(ns), Some(&name));
        if let Some(s) = &sub {
            path.push('/');
            path.push_str(s);
        }
        let before = client.get(&path).await?.into_result()?;
        let after = client.patch(&path, ctype, &body).await?.into_result()?;
        let changed = after.pointer("/metadata/resourceVersion") != before.pointer("/metadata/resourceVersion");
        println!("{}/{name} {}", rt.singular_qualified(), if changed { "patched" } else { "patched (no change)" });
    }
    Ok(())
}

fn condition_of<'a>(pool: &'a Value, type_: &str) -> Option<&'a Value> {
    pool.pointer("/status/conditions")?
        .as_array()?
        .iter()
        .find(|c| c.get("type").and_then(Value::as_str) == Some(type_))
}

/// `mcp/NAME` into the pool's path and name.
fn pool_target(target: &str, verb: &str) -> Result<(String, String)> {
    let (kind, name) = target.split_once('/').ok_or_else(|| anyhow!("want mcp/NAME, got {target:?}"))?;
    let rt = resolve(kind)?;
    if rt.kind != "MachineConfigPool" {
        bail!("rollout {verb} works on MachineConfigPools (mcp/NAME), not {}", rt.plural);
    }
    Ok((resource_path(rt.path_ref(), None, Some(name)), name.to_string()))
}

async fn rollout_resume(client: &Client, target: &str) -> Result<()> {
    let (path, name) = pool_target(target, "resume")?;
    let pool = client.get(&path).await?.into_result()?;
    let broken = condition_of(&pool, aloft_api::machineconfig::conditions::CIRCUIT_BROKEN)
        .is_some_and(|c| c.get("status").and_then(Value::as_str) == Some("True"));
    // Any new value resumes once; a timestamp is new every time.
    let token = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Nanos, true);
    let patch = serde_json::json!({"metadata": {"annotations": {aloft_api::annotations::RESUME_ROLLOUT: token}}});
    client.patch(&path, "application/merge-patch+json", &patch).await?.into_result()?;
    if broken {
        println!("machineconfigpool/{name} resumed: the circuit breaker is closed, the nodes that failed so far are forgiven");
    } else {
        println!("machineconfigpool/{name} resumed (its circuit breaker was not open)");
    }
    Ok(())
}

async fn rollout_status(client: &Client, target: &str, timeout: u64, not_config: Option<&str>) -> Result<()> {
    use std::io::Write;
    let (path, name) = pool_target(target, "status")?;
    let name = name.as_str();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(timeout);
    let interactive = std::io::IsTerminal::is_terminal(&std::io::stdout());
    let mut last = String::new();
    loop {
        let pool = client.get(&path).await?.into_result()?;
        let s = |p: &str| pool.pointer(p).and_then(Value::as_str).unwrap_or("").to_string();
        let n = |p: &str| pool.pointer(p).and_then(Value::as_i64).unwrap_or(0);
        let want = s("/spec/configuration/name");
        let have = s("/status/configuration/name");
        let (total, updated, degraded) =
            (n("/status/machineCount"), n("/status/updatedMachineCount"), n("/status/degradedMachineCount"));
        if let Some(c) =
            condition_of(&pool, "Degraded").filter(|c| c.get("status").and_then(Value::as_str) == Some("True"))
        {
            println!();
            bail!("pool {name} is degraded: {}", c.get("message").and_then(Value::as_str).unwrap_or(""));
        }
        if let Some(c) = condition_of(&pool, aloft_api::machineconfig::conditions::CIRCUIT_BROKEN)
            .filter(|c| c.get("status").and_then(Value::as_str) == Some("True"))
        {
            println!();
            bail!("pool {name}: {}", c.get("message").and_then(Value::as_str).unwrap_or("circuit breaker open"));
        }
        let phase = match pool.pointer("/status/rollout/phase").and_then(Value::as_str) {
            Some("Canary") => ", canary",
            Some("Soaking") => ", soaking",
            _ => "",
        };
        let width = 30usize;
        let filled = if total > 0 { (updated as usize * width) / total as usize } else { width };
        let line = format!(
            "pool {name}: [{}{}] {updated}/{total} updated, {degraded} degraded{phase}, target {}",
            "#".repeat(filled),
            "-".repeat(width - filled),
            if want.is_empty() { "<rendering>" } else { &want }
        );
        if line != last {
            if interactive {
                print!("\r{line}");
            } else {
                println!("{line}");
            }
            std::io::stdout().flush()?;
            last = line;
        }
        let is_updated =
            condition_of(&pool, "Updated").and_then(|c| c.get("status")).and_then(Value::as_str) == Some("True");
        if is_updated && !want.is_empty() && want == have && not_config != Some(want.as_str()) {
            if interactive {
                println!();
            }
            println!("pool {name} is updated: {updated}/{total} nodes on {want}");
            return Ok(());
        }
        if std::time::Instant::now() > deadline {
            println!();
            bail!("timed out after {timeout} s: pool {name} is not updated");
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
