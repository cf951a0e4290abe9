//! The ClusterVersion controller: the Cluster Version Operator's update half, for a fleet whose
//! release is its OS.
//!
//! It polls the update service named in `spec.upstream` for `spec.channel` (the Cincinnati
//! graph protocol OpenShift's update service and Fedora CoreOS's speak), shows what the graph
//! offers from the current release in `status.availableUpdates` and `status.conditionalUpdates`,
//! and, when `spec.desiredUpdate` names another release, checks the CVO's preconditions, writes
//! the release's `osImageURL` into the release MachineConfigs (`00-<role>-release` for the
//! master and worker roles) and follows the pools until every node runs it. The rollout itself
//! is the pools' (maxUnavailable, budgets, canaries, windows): a release takes the same path as
//! any config change, so there is one policy and one status chain.
//!
//! The graph is fetched from this runtime (the API server's), not the rollout controllers'
//! thread: a slow update service must never delay a pick.

use super::events::{EventType, Involved, Recorder};
use crate::release_signature::{self, Keyring};
use crate::resources::{CLUSTER_SERVICE_VERSION, CLUSTER_VERSION, MACHINE_CONFIG, MACHINE_CONFIG_POOL, NODE};
use crate::server::objects;
use crate::store::{revision_of, Key, Store, StoreError};
use aloft_api::clusterversion::{
    self as cv, ClusterVersion, ClusterVersionStatus, ConditionalUpdate, Release, UpdateHistory,
};
use aloft_api::meta::{find_condition, set_condition, Condition, ObjectMeta};
use aloft_api::update_graph::{self, Graph, Recommendation};
use aloft_api::MachineConfigPool;
use serde_json::{json, Value};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;

/// How often the graph is fetched again while nothing changes (the CVO polls every 2-4 min).
pub const DEFAULT_POLL: Duration = Duration::from_secs(180);
/// How soon a failed fetch is tried again (passes come with every pool status write in a
/// rollout: each must not ask a failing update service again).
const RETRY: Duration = Duration::from_secs(30);
/// How long a fetch may take.
const FETCH_TIMEOUT: Duration = Duration::from_secs(30);
/// How long the last good graph is kept through failed fetches (the CVO's 24 h); past that, its
/// lists describe a service no longer heard from, and are dropped.
const KEEP_GOOD: Duration = Duration::from_secs(24 * 3600);
/// The largest graph read (OpenShift's biggest channels serve a few MB).
const MAX_GRAPH_BYTES: usize = 64 << 20;
/// The component named in the ClusterVersion's Events.
pub const COMPONENT: &str = "aloft-cluster-version";
/// The roles whose pools get the release (MCO's two standard roles; custom pools usually
/// select the worker role's configs as well).
pub const ROLES: [&str; 2] = ["master", "worker"];
/// The annotation naming the release a release MachineConfig carries.
pub const RELEASE_ANNOTATION: &str = "aloft.dev/release";

/// The MachineConfig that carries the release to a role's pools. Named `00-` so that a
/// MachineConfig of the user's that sets `osImageURL` (sorted after it) overrides the release,
/// as an OS layering MachineConfig does in OpenShift.
pub fn release_config_name(role: &str) -> String {
    format!("00-{role}-release")
}

/// What the controller keeps between passes: the last graph and what it was fetched for.
#[derive(Default)]
struct GraphCache {
    fetched_for: Option<Query>,
    fetched_at: Option<Instant>,
    /// The last good graph (kept when a fetch fails, as the CVO keeps it, for [`KEEP_GOOD`]).
    graph: Option<Arc<Graph>>,
    /// When `graph` was fetched.
    good_at: Option<Instant>,
    /// The last fetch asked for the coordinator's own architecture, no Node reporting one: the
    /// Nodes are looked at again on every pass until one does.
    arch_guessed: bool,
    /// The lists in the status are not this query's (its upstream or channel changed, or the
    /// fleet runs two architectures): a failed fetch clears them rather than keep them.
    lists_stale: bool,
    /// Why the last fetch failed: (reason, message).
    failure: Option<(&'static str, String)>,
    /// Releases checked against the keyring, by payload: a verified one for good (a commit is
    /// its checksum), one that failed until [`RETRY`] has passed (the repository may have been
    /// unreachable).
    verified: std::collections::HashMap<String, Verdict>,
    /// Releases being checked now, by a task of their own (a repository that does not answer
    /// takes up to two reads of 10 s: the pass does not wait for it).
    verifying: std::collections::HashSet<String>,
}

/// A release's verification as the cache keeps it.
struct Verdict {
    /// When it was made, or first read by a pass (for a failure's RETRY).
    at: Instant,
    outcome: Verification,
    /// Whether a pass has judged the request by it yet.
    read: bool,
}

/// The cache, also after a panic elsewhere poisoned its lock: what it holds is still what was
/// known, and a controller that stopped reading it would fetch every pass and judge nothing.
fn lock(cache: &Mutex<GraphCache>) -> std::sync::MutexGuard<'_, GraphCache> {
    cache.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// What a graph is fetched for; a change of any field fetches again at once.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Query {
    upstream: String,
    channel: String,
    arch: String,
    id: String,
    version: String,
}

/// The controller's settings.
#[derive(Clone)]
pub struct Options {
    pub poll: Duration,
    /// The architecture asked for (`amd64`, `arm64`, ... as the update service names them).
    pub arch: String,
    /// The keys a release's OS commit must be signed by before it is taken (`serve
    /// --release-keyring`); None takes releases unverified (history `verified: false`).
    pub keyring: Option<Arc<Keyring>>,
}

impl Default for Options {
    fn default() -> Self {
        Options { poll: DEFAULT_POLL, arch: graph_arch(std::env::consts::ARCH).to_string(), keyring: None }
    }
}

/// What checking a release's signatures found: the signing key's fingerprint, or why it
/// cannot be verified.
type Verification = Result<String, String>;

/// Rust's name of an architecture as the update service names it (Go's).
pub fn graph_arch(rust: &str) -> &str {
    match rust {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "powerpc64" => "ppc64le",
        other => other,
    }
}

/// Run forever: a pass after each change of the ClusterVersion or of a CSV (whose platform
/// limit sets Upgradeable), and of a pool while a release rolls out, and at least every [`super::RESYNC`] (which is also how often a due poll is
/// noticed).
pub async fn run(store: Arc<dyn Store>, events: Recorder, opts: Options, passes: super::passes::Passes) {
    let http = match http_client() {
        Ok(c) => c,
        Err(e) => {
            tracing::error!(error = %e, "cannot build the update service's HTTP client");
            return;
        }
    };
    let cache = Arc::new(Mutex::new(GraphCache::default()));
    let watched = [CLUSTER_VERSION.store_key(), MACHINE_CONFIG_POOL.store_key(), CLUSTER_SERVICE_VERSION.store_key()];
    // Pools wake it only while a release is rolling out.
    let following = Arc::new(AtomicBool::new(false));
    let relevant = super::pools_wake_while(following.clone());
    // A poll shorter than the resync (a test's, a lab's) is honoured by a wake of its own: the
    // resync alone noticed a due fetch up to 30 s late, and a fleet's architecture (its Nodes,
    // which do not wake this controller) only at a fetch.
    // At least a second: a pass lists the Nodes while the architecture is guessed.
    let every = opts.poll.min(RETRY).max(Duration::from_secs(1));
    // Also woken when a release's verification, which runs apart, has its outcome.
    let wake = Arc::new(tokio::sync::Notify::new());
    if every < super::RESYNC {
        tokio::spawn(wake_every(Arc::downgrade(&wake), every));
    }
    let woken = wake.clone();
    super::run_loop_woken("cluster-version", store, &watched, relevant, passes, Some(woken), move |s| {
        let (http, cache, events, opts) = (http.clone(), cache.clone(), events.clone(), opts.clone());
        let (following, wake) = (following.clone(), wake.clone());
        async move {
            let rolling_out = reconcile(&s, &http, &cache, &events, &opts, &wake).await?;
            following.store(rolling_out, Ordering::Relaxed);
            Ok(())
        }
    })
    .await
}

/// Notify `wake` every `every`, until the controller that holds it is gone.
async fn wake_every(wake: std::sync::Weak<tokio::sync::Notify>, every: Duration) {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    loop {
        tick.tick().await;
        let Some(wake) = wake.upgrade() else { return };
        wake.notify_one();
    }
}

fn http_client() -> Result<reqwest::Client, reqwest::Error> {
    crate::client::install_crypto();
    reqwest::Client::builder().timeout(FETCH_TIMEOUT).build()
}

/// One pass over the ClusterVersion named `version`; whether a release is rolling out (its
/// history's first entry Partial) once it is done.
async fn reconcile(
    store: &Arc<dyn Store>,
    http: &reqwest::Client,
    cache: &Arc<Mutex<GraphCache>>,
    events: &Recorder,
    opts: &Options,
    wake: &Arc<tokio::sync::Notify>,
) -> Result<bool, StoreError> {
    let key = Key::cluster(&CLUSTER_VERSION.store_key(), cv::NAME);
    let Some(stored) = store.get(&key).await? else { return Ok(false) };
    let raw = (*stored.object).clone();
    let cv: ClusterVersion = match serde_json::from_value(raw.clone()) {
        Ok(cv) => cv,
        Err(e) => {
            tracing::warn!(error = %e, "the stored ClusterVersion does not read");
            return Ok(false);
        }
    };
    let now = objects::now();
    let mut status = cv.status.clone().unwrap_or_default();

    let graph = refresh_graph(store, http, cache, &cv, opts).await;
    show_updates(&cv, &mut status, graph.as_deref(), cache, &now);
    let blocked = match cv.current() {
        Some(current) => incompatible_operators(store, &current.version).await?,
        None => None,
    };
    match blocked {
        Some(message) => {
            let c = Condition::new(cv::UPGRADEABLE, "False", cv::INCOMPATIBLE_OPERATORS, message);
            set_condition(&mut status.conditions, c, &now);
        }
        None => status.conditions.retain(|c| c.type_ != cv::UPGRADEABLE),
    }
    let mut pending = None;
    let verification = match &opts.keyring {
        Some(keyring) => match resolve(&cv, &status, graph.as_deref()) {
            Some(Ok(target))
                if !cv.current().is_some_and(|c| c.version == target.version && c.image == target.image) =>
            {
                let known = verify_release(http, cache, keyring, &target.image, wake);
                if known.is_none() {
                    pending = Some(target);
                }
                known
            }
            _ => None,
        },
        None => None,
    };
    // While the requested release is being verified it is neither taken nor refused (the
    // CVO's payload is retrieved before it is judged); the outcome wakes the next pass.
    let accepted = match &pending {
        Some(target) => {
            tracing::debug!(version = %target.version, "waiting for the release's verification");
            retrieving(&mut status, target, events, &now);
            None
        }
        None => consider_desired_update(&cv, &mut status, graph.as_deref(), verification.as_ref(), &now),
    };
    // Every pass, as the CVO applies its manifests again and again: a release MachineConfig
    // deleted or edited by hand is put back.
    if let Some(desired) = &status.desired {
        write_release_configs(store, desired).await?;
    }
    if let Some(accepted) = accepted {
        events.emit(
            &involved(),
            EventType::Normal,
            "UpdateAccepted",
            &format!("accepted release {} ({}){}", accepted.version, accepted.image, risks_note(&status)),
        );
    }
    if let Some(done) = follow_progress(store, &mut status, &now).await? {
        events.emit(&involved(), EventType::Normal, "UpdateCompleted", &format!("every pool runs release {done}"));
    }
    // A request whose release is still being checked is not acted on yet: clients waiting for
    // observedGeneration read its verdict, not the previous request's.
    if pending.is_none() {
        status.observed_generation = cv.metadata.generation.unwrap_or(0);
    }

    let rolling_out = status.history.first().is_some_and(|h| h.state == cv::PARTIAL);
    let mut next = raw.clone();
    next["status"] = serde_json::to_value(&status).unwrap_or(Value::Null);
    // In the same write as the status it was chosen from: the write wakes the next pass, which
    // takes it as any desiredUpdate (verified, preconditions checked). With a keyring, only a
    // release that verifies is asked for: one that does not is passed over (and said so), not
    // asked for and refused, which would hold automatic updates until an admin stepped in.
    let mut automatic = None;
    for candidate in automatic_candidates(&cv, &status) {
        let verified = match &opts.keyring {
            Some(keyring) => match verify_release(http, cache, keyring, &candidate.image, wake) {
                Some(known) => known,
                // The newest is asked for only once its outcome is known, not passed over
                // for an older one meanwhile.
                None => break,
            },
            None => Ok(String::new()),
        };
        match verified {
            Ok(_) => {
                automatic = Some(candidate);
                break;
            }
            Err(why) => events.emit(
                &involved(),
                EventType::Warning,
                "AutomaticUpdateSkipped",
                &format!("spec.automaticUpdates: {} is passed over: it cannot be verified: {why}", candidate.version),
            ),
        }
    }
    if let Some(target) = &automatic {
        if let Some(spec) = next.get_mut("spec").and_then(Value::as_object_mut) {
            spec.insert("desiredUpdate".into(), json!({"version": target.version, "image": target.image}));
        }
        // A spec change, as an admin's would be: a new generation.
        objects::set_generation(&raw, &mut next);
    }
    if next == raw {
        return Ok(rolling_out);
    }
    match store.update(&key, next, revision_of(&raw)).await {
        Ok(_) => {
            if let (Some(target), Some(current)) = (&automatic, cv.current()) {
                events.emit(
                    &involved(),
                    EventType::Normal,
                    "AutomaticUpdate",
                    &format!(
                        "spec.automaticUpdates: {} completed; asking for {}, the newest recommended update",
                        current.version, target.version
                    ),
                );
            }
            Ok(rolling_out)
        }
        Err(StoreError::Conflict { .. }) | Err(StoreError::NotFound(_)) => Ok(rolling_out),
        Err(e) => Err(e),
    }
}

/// The updates `spec.automaticUpdates` may ask for now, newest first: once the current
/// release has completed (nothing rolling out, nothing refused, invalid or failing), those of
/// `status.availableUpdates` (recommended ones only) newer than every release in the history
/// that pass the preconditions. Newer than the history, so that a release rolled back from by
/// hand is not taken again, nor any older one: a rollback holds until the graph offers
/// something newer, as Zincati never goes back to a release it left.
fn automatic_candidates(cv: &ClusterVersion, status: &ClusterVersionStatus) -> Vec<Release> {
    if !cv.spec.automatic_updates.as_ref().is_some_and(|a| a.enabled) {
        return Vec::new();
    }
    let Some(current) = status.desired.as_ref().filter(|d| !d.version.is_empty()) else { return Vec::new() };
    // The lists are the current release's only once it was current before this pass.
    let Some(last) = status.history.first().filter(|_| cv.current() == Some(current)) else { return Vec::new() };
    if last.state != cv::COMPLETED || last.version != current.version || last.image != current.image {
        return Vec::new();
    }
    let holding = |t: &str, s: &str| find_condition(&status.conditions, t).is_some_and(|c| c.status == s);
    if holding(cv::RELEASE_ACCEPTED, "False") || holding(cv::FAILING, "True") || holding(cv::INVALID, "True") {
        return Vec::new();
    }
    let Some(newest_run) = newest_run(status) else { return Vec::new() };
    let mut out: Vec<(semver::Version, &Release)> = status
        .available_updates
        .iter()
        .filter_map(|r| semver::Version::parse(&r.version).ok().map(|v| (v, r)))
        .filter(|(v, r)| *v > newest_run && precondition_failures(status, current, r).is_empty())
        .collect();
    out.sort_by(|a, b| b.0.cmp(&a.0));
    out.into_iter().map(|(_, r)| r.clone()).collect()
}

/// The newest release of the history: automatic updates take only releases newer than it.
pub fn newest_run(status: &ClusterVersionStatus) -> Option<semver::Version> {
    status.history.iter().filter_map(|h| semver::Version::parse(&h.version).ok()).max()
}

fn involved() -> Involved {
    Involved {
        api_version: cv::API_VERSION.into(),
        kind: "ClusterVersion".into(),
        namespace: String::new(),
        name: cv::NAME.into(),
        uid: None,
    }
}

fn risks_note(status: &ClusterVersionStatus) -> String {
    match status.history.first() {
        Some(h) if !h.accepted_risks.is_empty() => format!("; accepted risks: {}", h.accepted_risks),
        _ => String::new(),
    }
}

/// The graph for the ClusterVersion's channel, fetched again when its inputs changed or the poll
/// is due (a failed fetch is tried again on the next pass); None when there is nothing to fetch
/// or no fetch has worked yet.
async fn refresh_graph(
    store: &Arc<dyn Store>,
    http: &reqwest::Client,
    cache: &Mutex<GraphCache>,
    cv: &ClusterVersion,
    opts: &Options,
) -> Option<Arc<Graph>> {
    let spec = &cv.spec;
    if spec.upstream.is_empty() || spec.channel.is_empty() {
        // The graph's state goes; what is known of releases' signatures stays (a release
        // asked for by image, with no channel, is checked all the same).
        let mut c = lock(cache);
        let verified = std::mem::take(&mut c.verified);
        let verifying = std::mem::take(&mut c.verifying);
        *c = GraphCache { verified, verifying, ..GraphCache::default() };
        return None;
    }
    let mut query = Query {
        upstream: spec.upstream.clone(),
        channel: spec.channel.clone(),
        arch: String::new(),
        id: spec.cluster_id.clone(),
        version: cv.current().map(|r| r.version.clone()).unwrap_or_default(),
    };
    // The architecture is read from the Nodes when a fetch is due anyway (a fleet's Nodes are
    // many; the passes while a release rolls out are frequent), or while the last fetch had to
    // guess it (a graph of the coordinator's architecture must not be offered for long to a
    // fleet that reports another).
    let (mut due, guessed) = {
        let c = lock(cache);
        let every = if c.failure.is_some() { opts.poll.min(RETRY) } else { opts.poll };
        let same = c.fetched_for.as_ref().is_some_and(|q| Query { arch: String::new(), ..q.clone() } == query);
        (!same || c.fetched_at.is_none_or(|at| at.elapsed() >= every), c.arch_guessed)
    };
    let mut arch = None;
    if !due && guessed {
        let now = fleet_arch(store).await;
        due = !matches!(now, Ok(Ok(None)));
        arch = Some(now);
    }
    if due {
        let arch = match arch {
            Some(known) => known,
            None => fleet_arch(store).await,
        };
        let mut guessed = false;
        let outcome = match arch {
            Ok(Ok(arch)) => {
                guessed = arch.is_none();
                query.arch = arch.unwrap_or_else(|| opts.arch.clone());
                fetch(http, &query).await
            }
            Ok(Err(mixed)) => Err(("MultipleArchitectures", mixed)),
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the Nodes' architecture; asking for the coordinator's");
                query.arch = opts.arch.clone();
                fetch(http, &query).await
            }
        };
        {
            let mut c = lock(cache);
            if c.fetched_for.as_ref().is_some_and(|q| q.upstream != query.upstream || q.channel != query.channel) {
                // Another service or channel: the old graph says nothing of this one.
                c.graph = None;
                c.lists_stale = true;
            }
            c.fetched_for = Some(query);
            c.fetched_at = Some(Instant::now());
            c.arch_guessed = guessed;
            match outcome {
                Ok(g) => {
                    c.graph = Some(Arc::new(g));
                    c.good_at = Some(Instant::now());
                    c.failure = None;
                    c.lists_stale = false;
                }
                Err((reason, message)) => {
                    tracing::warn!(%reason, %message, "fetching the update graph failed");
                    if reason == "MultipleArchitectures" {
                        // No graph fits the fleet: none of another architecture's lists stay.
                        c.graph = None;
                        c.good_at = None;
                        c.lists_stale = true;
                    }
                    c.failure = Some((reason, message));
                }
            }
        }
    }
    let mut c = lock(cache);
    // Kept through failed fetches for a day, then dropped with its lists; a graph that is
    // merely old (a long poll interval) is fetched again when due, not dropped.
    if c.failure.is_some() && c.good_at.is_some_and(|at| at.elapsed() >= KEEP_GOOD) {
        c.graph = None;
        c.good_at = None;
        c.lists_stale = true;
    }
    c.graph.clone()
}

/// The architecture the update graph is asked for: the one every Node that takes the release
/// reports (`status.nodeInfo.architecture`; a Node in a pool that selects a release role's
/// configs); None while no such Node reports one (the coordinator's own is asked for then). The
/// CVO asks for the cluster's, which it runs on; a coordinator may well run on another (an amd64
/// server for arm64 edge hosts), and its own would offer the fleet releases it cannot boot.
/// Ok(Err(why)) when those Nodes run more than one: an aloft release is one OS commit, for one
/// architecture. A Node in no such pool gets no release, so its architecture cannot hold the
/// fleet's graph back.
async fn fleet_arch(store: &Arc<dyn Store>) -> Result<Result<Option<String>, String>, StoreError> {
    let pools: Vec<MachineConfigPool> = store
        .list(&MACHINE_CONFIG_POOL.store_key(), None)
        .await?
        .items
        .into_iter()
        .filter_map(|raw| serde_json::from_value(Value::clone(&raw)).ok())
        .collect();
    if !pools.iter().any(takes_release) {
        return Ok(Ok(None));
    }
    let mut nodes = Vec::new();
    for raw in store.list(&NODE.store_key(), None).await?.items {
        let arch = raw.pointer(crate::auth::NODE_ARCH_POINTER).and_then(Value::as_str).unwrap_or_default();
        if arch.is_empty() {
            continue;
        }
        // Only what pool membership reads: a whole Node's status is not needed here.
        let Some(metadata) = raw.get("metadata").and_then(|m| serde_json::from_value(m.clone()).ok()) else {
            continue;
        };
        nodes.push((aloft_api::Node { metadata, ..Default::default() }, arch.to_string()));
    }
    Ok(arch_of(&pools, &nodes))
}

/// [`fleet_arch`]'s judgement over parsed pools and (Node, architecture) pairs. When they
/// disagree, the message names the Nodes of every architecture but the most common one (up to
/// five each; all of them in a tie): those are the ones an admin looks at (a host enrolled into the wrong pool, a
/// machine replaced by another kind).
fn arch_of(pools: &[MachineConfigPool], nodes: &[(aloft_api::Node, String)]) -> Result<Option<String>, String> {
    let rules = super::pools::Membership::new(pools);
    let mut seen: std::collections::BTreeMap<&str, Vec<&str>> = std::collections::BTreeMap::new();
    for (node, arch) in nodes {
        if let Ok(Some(p)) = rules.pool_of(node) {
            if takes_release(&pools[p]) {
                seen.entry(arch.as_str()).or_default().push(node.metadata.name.as_str());
            }
        }
    }
    let mut archs = seen.keys();
    match (archs.next(), archs.next()) {
        (None, _) => return Ok(None),
        (Some(one), None) => return Ok(Some(one.to_string())),
        _ => {}
    }
    let most = seen.values().map(Vec::len).max().unwrap_or(0);
    let unique_most = seen.values().filter(|n| n.len() == most).count() == 1;
    let parts: Vec<String> = seen
        .iter()
        .map(|(arch, names)| {
            let mut part = format!("{} {arch}", names.len());
            // The most common architecture is counted, not named (it may be thousands); in a
            // tie, none is the fleet's, and every one is named.
            if unique_most && names.len() == most {
                return part;
            }
            let mut names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
            names.sort_unstable();
            part.push_str(&format!(": {}", super::pick::names_text(&names)));
            part
        })
        .collect();
    Err(format!(
        "The fleet's nodes run more than one architecture ({}): an aloft release is one OS commit, for one \
         architecture; no update graph fits the fleet. Move the nodes of the other architecture to a pool \
         that does not take the release, or delete their Nodes",
        parts.join("; ")
    ))
}

/// `GET <upstream>?channel=&arch=&id=&version=` with `Accept: application/json`, as the CVO asks.
async fn fetch(http: &reqwest::Client, q: &Query) -> Result<Graph, (&'static str, String)> {
    let mut url = reqwest::Url::parse(&q.upstream)
        .map_err(|e| ("InvalidURI", format!("spec.upstream {:?} is not a URL: {e}", q.upstream)))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(("InvalidURI", format!("spec.upstream {:?}: only http and https are supported", q.upstream)));
    }
    {
        let mut pairs = url.query_pairs_mut();
        pairs.append_pair("channel", &q.channel).append_pair("arch", &q.arch);
        if !q.id.is_empty() {
            pairs.append_pair("id", &q.id);
        }
        if !q.version.is_empty() {
            pairs.append_pair("version", &q.version);
        }
    }
    let shown = url.to_string();
    let response = http.get(url).header(reqwest::header::ACCEPT, "application/json").send().await.map_err(|e| {
        ("RemoteFailed", format!("Unable to retrieve available updates: {shown}: {}", super::error_chain(&e)))
    })?;
    let code = response.status();
    let body = read_limited(response)
        .await
        .map_err(|e| ("RemoteFailed", format!("Unable to retrieve available updates: {shown}: {e}")))?;
    if !code.is_success() {
        // The update service's errors are `{kind, value}`.
        let said = serde_json::from_slice::<Value>(&body)
            .ok()
            .and_then(|v| Some(format!("{}: {}", v.get("kind")?.as_str()?, v.get("value")?.as_str()?)))
            .unwrap_or_else(|| String::from_utf8_lossy(&body).chars().take(200).collect());
        return Err(("ResponseFailed", format!("Unable to retrieve available updates: {shown}: HTTP {code}: {said}")));
    }
    update_graph::parse(&body)
        .map_err(|e| ("ResponseInvalid", format!("Unable to retrieve available updates: {shown}: {e}")))
}

async fn read_limited(mut response: reqwest::Response) -> Result<Vec<u8>, String> {
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(|e| super::error_chain(&e))? {
        if body.len() + chunk.len() > MAX_GRAPH_BYTES {
            return Err(format!("the graph is larger than {} MiB", MAX_GRAPH_BYTES >> 20));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// `RetrievedUpdates`, `availableUpdates` and `conditionalUpdates`, from the graph.
fn show_updates(
    cv: &ClusterVersion,
    status: &mut ClusterVersionStatus,
    graph: Option<&Graph>,
    cache: &Mutex<GraphCache>,
    now: &str,
) {
    let spec = &cv.spec;
    let (failure, stale) = {
        let c = lock(cache);
        (c.failure.clone(), c.lists_stale)
    };
    let retrieved = if spec.upstream.is_empty() {
        status.available_updates.clear();
        status.conditional_updates.clear();
        Condition::new(
            cv::RETRIEVED_UPDATES,
            "False",
            "NoUpstream",
            "No upstream server has been set to retrieve updates.",
        )
    } else if spec.channel.is_empty() {
        status.available_updates.clear();
        status.conditional_updates.clear();
        Condition::new(cv::RETRIEVED_UPDATES, "False", "NoChannel", "The update channel has not been configured.")
    } else if let Some((reason, message)) = failure {
        // The last good graph's lists stay, as the CVO keeps them, computed again for the
        // release current now; none when they are another query's (a new upstream or channel,
        // two architectures, or kept past a day). With no graph fetched since the coordinator
        // started, the stored lists stay as they are.
        let listed = match (graph, cv.current()) {
            (Some(graph), Some(current)) => list_updates(status, graph, &current.version, now).is_ok(),
            _ => !stale,
        };
        if !listed {
            status.available_updates.clear();
            status.conditional_updates.clear();
        }
        Condition::new(cv::RETRIEVED_UPDATES, "False", reason, message)
    } else if let (Some(graph), Some(current)) = (graph, cv.current()) {
        match list_updates(status, graph, &current.version, now) {
            Ok(()) => Condition::new(cv::RETRIEVED_UPDATES, "True", "", ""),
            Err(e) => {
                status.available_updates.clear();
                status.conditional_updates.clear();
                let message = match &e {
                    update_graph::GraphError::VersionNotFound { .. } => format!(
                        "Unable to retrieve available updates: currently reconciling cluster version {} not found in the {:?} channel",
                        current.version, spec.channel
                    ),
                    other => format!("Unable to retrieve available updates: {other}"),
                };
                Condition::new(cv::RETRIEVED_UPDATES, "False", e.reason(), message)
            }
        }
    } else if cv.current().is_none() {
        Condition::new(
            cv::RETRIEVED_UPDATES,
            "False",
            "NoCurrentVersion",
            "No release has been accepted yet: set spec.desiredUpdate to the release the fleet runs.",
        )
    } else {
        Condition::new(
            cv::RETRIEVED_UPDATES,
            "Unknown",
            "NotRetrievedYet",
            "The update graph has not been fetched yet.",
        )
    };
    set_condition(&mut status.conditions, retrieved, now);
}

/// `availableUpdates` and `conditionalUpdates` from `graph`, for the fleet at `current`.
fn list_updates(
    status: &mut ClusterVersionStatus,
    graph: &Graph,
    current: &str,
    now: &str,
) -> Result<(), update_graph::GraphError> {
    let updates = graph.updates_from(current)?;
    let mut available: Vec<Release> = updates.available.iter().map(Release::from_graph).collect();
    status.conditional_updates = updates
        .conditional
        .iter()
        .map(|c| {
            let (st, reason, message) = match update_graph::evaluate(&c.risks) {
                Recommendation::Recommended => (
                    "True",
                    "AsExpected".to_string(),
                    "The update is recommended, because none of the conditional update risks apply to this cluster."
                        .to_string(),
                ),
                Recommendation::NotRecommended { reason, message } => ("False", reason, message),
                Recommendation::Unknown { reason, message } => ("Unknown", reason, message),
            };
            let release = Release::from_graph(&c.release);
            if st == "True" {
                available.push(release.clone());
            }
            let mut conditions = previous_conditions(status, &release.version);
            set_condition(&mut conditions, Condition::new(cv::RECOMMENDED, st, &reason, message), now);
            ConditionalUpdate { release, risks: c.risks.clone(), conditions, extra: Default::default() }
        })
        .collect();
    status.available_updates = available;
    Ok(())
}

/// The conditions an entry had in the last status (kept so their transition times hold).
fn previous_conditions(status: &ClusterVersionStatus, version: &str) -> Vec<Condition> {
    status
        .conditional_updates
        .iter()
        .find(|c| c.release.version == version)
        .map(|c| c.conditions.clone())
        .unwrap_or_default()
}

/// The reason of a request the CVO calls invalid (its `Invalid` condition), not merely refused.
const INVALID_REASON: &str = "InvalidClusterVersion";

/// The release `spec.desiredUpdate` asks for, resolved against the graph and `status` (the lists
/// this pass computed): Err(reason, message) for a request that cannot be taken as it is.
fn resolve(
    cv: &ClusterVersion,
    status: &ClusterVersionStatus,
    graph: Option<&Graph>,
) -> Option<Result<Release, (&'static str, String)>> {
    let want = cv.spec.desired_update.as_ref()?;
    if want.version.is_empty() && want.image.is_empty() {
        return None;
    }
    let where_from = || match graph {
        Some(_) => format!("the update graph of channel {:?}", cv.spec.channel),
        None => "the update graph (none has been retrieved: see the RetrievedUpdates condition)".to_string(),
    };
    let release = if want.image.is_empty() && cv.current().is_some() {
        // As the CVO validates it: a version alone names a recommended update or a release in
        // the history, never any node of the graph (an edge the graph's maintainers blocked,
        // or a conditional update whose risks were not looked at, would otherwise be one
        // patch away).
        match by_version_only(status, &want.version) {
            Ok(r) => r,
            Err(message) => return Some(Err((INVALID_REASON, message))),
        }
    } else if want.image.is_empty() {
        // The first release: the fleet runs it already, the graph gives its image.
        match graph.and_then(|g| g.find(&want.version)) {
            Some(n) => Release::from_graph(n),
            None => {
                return Some(Err((
                    "RetrievePayload",
                    format!(
                        "Retrieving payload failed version={:?}: the version is not in {}; set spec.desiredUpdate.image to update to a release the graph does not offer",
                        want.version,
                        where_from()
                    ),
                )))
            }
        }
    } else {
        if let Err(e) = aloft_api::osimage::parse(&want.image) {
            return Some(Err((
                "RetrievePayload",
                format!("spec.desiredUpdate.image: {e} (an aloft release is an OS commit agents can deploy)"),
            )));
        }
        let by_image = graph.and_then(|g| g.nodes.iter().find(|n| n.payload == want.image));
        match (by_image, want.version.is_empty()) {
            (Some(n), true) => Release::from_graph(n),
            (Some(n), false) if n.version == want.version => Release::from_graph(n),
            (Some(n), false) => {
                return Some(Err((
                    "VerifyPayloadVersion",
                    format!(
                    "Verifying payload failed version={:?} image={:?}: the update graph says that image is release {}",
                    want.version, want.image, n.version
                ),
                )))
            }
            (None, true) => {
                return Some(Err((
                    "RetrievePayload",
                    format!(
                        "spec.desiredUpdate.image {:?} is not in {}: give its spec.desiredUpdate.version too",
                        want.image,
                        where_from()
                    ),
                )))
            }
            (None, false) => {
                if semver::Version::parse(&want.version).is_err() {
                    return Some(Err((
                        "VerifyPayloadVersion",
                        format!("spec.desiredUpdate.version {:?} is not a semantic version", want.version),
                    )));
                }
                Release { version: want.version.clone(), image: want.image.clone(), ..Default::default() }
            }
        }
    };
    if let Err(e) = aloft_api::osimage::parse(&release.image) {
        return Some(Err((
            "RetrievePayload",
            format!(
                "the update graph's payload of {}: {e} (an aloft release is an OS commit agents can deploy)",
                release.version
            ),
        )));
    }
    Some(Ok(release))
}

/// The release a version alone names once the fleet has a release: one of `availableUpdates`, or
/// one in the history. Err: the CVO's `Invalid` message, and what to do instead.
fn by_version_only(status: &ClusterVersionStatus, version: &str) -> Result<Release, String> {
    if let Some(r) = status.available_updates.iter().find(|r| r.version == version && !r.image.is_empty()) {
        return Ok(r.clone());
    }
    if let Some(h) = status.history.iter().find(|h| h.version == version && !h.image.is_empty()) {
        return Ok(Release { version: h.version.clone(), image: h.image.clone(), ..Default::default() });
    }
    let invalid = format!(
        "The cluster version is invalid: spec.desiredUpdate.version: Invalid value: {version:?}: when image is empty the update must be a previous version or an available update"
    );
    Err(match status.conditional_updates.iter().find(|c| c.release.version == version) {
        Some(c) => {
            let why = find_condition(&c.conditions, cv::RECOMMENDED)
                .map(|r| format!("{}: {}", r.reason, r.message))
                .unwrap_or_default();
            format!(
                "{invalid}; {version} is a conditional update, not recommended ({why}); to take it anyway, set spec.desiredUpdate.image to {:?} too (aloftctl adm upgrade --to {version} --allow-not-recommended)",
                c.release.image
            )
        }
        None => format!(
            "{invalid}; to update to a release the graph does not recommend from this one, set spec.desiredUpdate.image too (aloftctl adm upgrade --to-image IMAGE --allow-explicit-upgrade)"
        ),
    })
}

/// Why the installed operators keep the fleet on `current`'s minor, as OLM tells the CVO
/// (its ClusterOperator's Upgradeable=False): each CSV whose `olm.maxOpenShiftVersion` is older
/// than the next minor, or cannot be read. None when nothing blocks, or `current` is no semver.
async fn incompatible_operators(store: &Arc<dyn Store>, current: &str) -> Result<Option<String>, StoreError> {
    let Ok(now) = semver::Version::parse(current) else { return Ok(None) };
    let next = (now.major, now.minor + 1);
    let mut blocking = Vec::new();
    for raw in store.list(&CLUSTER_SERVICE_VERSION.store_key(), None).await?.items {
        let Ok(meta) = serde_json::from_value::<ObjectMeta>(raw.get("metadata").cloned().unwrap_or_default()) else {
            continue;
        };
        if meta.deletion_timestamp.is_some() {
            continue;
        }
        let who = format!("{}/{}", meta.namespace.as_deref().unwrap_or(""), meta.name);
        match aloft_api::olm::max_platform_version(&meta.name, &meta) {
            Ok(Some(max)) if max < next => {
                blocking.push(format!("maximum supported version for {who} is {}.{}", max.0, max.1));
            }
            Ok(_) => {}
            Err(e) => blocking.push(format!("{who}: {e}")),
        }
    }
    Ok((!blocking.is_empty()).then(|| {
        format!(
            "ClusterServiceVersions blocking minor version updates to {}.{} or higher: {}",
            next.0,
            next.1,
            blocking.join("; ")
        )
    }))
}

/// The CVO's preconditions for moving from `current` to `target`, in its order: what fails.
fn precondition_failures(status: &ClusterVersionStatus, current: &Release, target: &Release) -> Vec<String> {
    let (Ok(from), Ok(to)) = (semver::Version::parse(&current.version), semver::Version::parse(&target.version)) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    if to < from {
        let previous = status.history.iter().skip(1).find(|h| h.version != current.version);
        let back_one = previous.is_some_and(|p| p.version == target.version);
        let same_minor = to.major == from.major && to.minor == from.minor;
        if back_one && !same_minor {
            out.push(format!(
                "Rollback: release {} is older than {} and is the previous release, but a rollback may not change the major or minor version",
                target.version, current.version
            ));
        } else if !back_one {
            out.push(format!(
                "Rollback: release {} is older than {}, and the only rollback allowed is to the previous release ({}) within the same minor",
                target.version,
                current.version,
                previous.map(|p| p.version.as_str()).unwrap_or("none")
            ));
        }
    }
    if to.major != from.major || to.minor > from.minor + 1 {
        out.push(format!(
            "GiantHop: {} to {} skips a minor release; update one minor at a time",
            current.version, target.version
        ));
    }
    // Upgradeable=False holds back a new minor or major, never a patch.
    if (to.major, to.minor) > (from.major, from.minor) {
        if let Some(c) = find_condition(&status.conditions, cv::UPGRADEABLE).filter(|c| c.status == "False") {
            out.push(format!("Upgradeable: {}: {}", c.reason, c.message));
        }
    }
    out
}

/// Why the graph does not recommend `target` from the current release, if it does not.
fn not_recommended(status: &ClusterVersionStatus, target: &Release) -> Option<String> {
    if status.available_updates.iter().any(|r| r.version == target.version) {
        return None;
    }
    match status.conditional_updates.iter().find(|c| c.release.version == target.version) {
        Some(c) => {
            let why = find_condition(&c.conditions, cv::RECOMMENDED).map(|r| r.message.clone()).unwrap_or_default();
            Some(format!("RecommendedUpdate: {} is not recommended: {why}", target.version))
        }
        None => Some(format!("RecommendedUpdate: {} is not a recommended update from this release", target.version)),
    }
}

/// What is known of `image`'s signatures against `keyring` (see [`GraphCache::verified`]);
/// None while it is being checked, by a task started here if none is, which wakes the
/// controller with the outcome.
fn verify_release(
    http: &reqwest::Client,
    cache: &Arc<Mutex<GraphCache>>,
    keyring: &Arc<Keyring>,
    image: &str,
    wake: &Arc<tokio::sync::Notify>,
) -> Option<Verification> {
    {
        // A poisoned lock still holds what was known: a panic elsewhere must not leave every
        // release waiting for a check that never starts.
        let mut c = lock(cache);
        if let Some(v) = c.verified.get_mut(image) {
            // A failure counts its RETRY from the pass that first reads it: a pass that spent
            // long on the graph must still judge the request by it, not start another check.
            if !v.read {
                v.read = true;
                v.at = Instant::now();
                return Some(v.outcome.clone());
            }
            if v.outcome.is_ok() || v.at.elapsed() < RETRY {
                return Some(v.outcome.clone());
            }
        }
        if !c.verifying.insert(image.to_string()) {
            return None;
        }
    }
    let (http, cache, keyring, wake, image) =
        (http.clone(), cache.clone(), keyring.clone(), wake.clone(), image.to_string());
    tokio::spawn(async move {
        use futures::FutureExt;
        // The commit and its signatures are untrusted input: a panic in reading them is a
        // failed check (tried again after RETRY), not a release waiting for good.
        let checked = std::panic::AssertUnwindSafe(release_signature::verify(&http, &keyring, &image)).catch_unwind();
        let outcome = match checked.await {
            Ok(done) => done.map_err(|e| e.to_string()),
            Err(_) => Err("the check of its signatures failed unexpectedly (see the coordinator's log)".to_string()),
        };
        match &outcome {
            Ok(signer) => tracing::info!(%image, %signer, "release verified"),
            Err(why) => tracing::warn!(%image, %why, "the release cannot be verified"),
        }
        {
            let mut c = lock(&cache);
            c.verifying.remove(&image);
            // Bounded: a graph names a few hundred releases at most, but a spec edited in a
            // loop could name any number.
            if c.verified.len() >= 256 {
                c.verified.retain(|_, v| v.outcome.is_ok());
                if c.verified.len() >= 256 {
                    c.verified.clear();
                }
            }
            c.verified.insert(image, Verdict { at: Instant::now(), outcome, read: false });
        }
        wake.notify_one();
    });
    None
}

/// Take `spec.desiredUpdate` when it names another release and passes (or `force`s) the
/// checks: its signatures (`verification`, when a keyring is configured), then the
/// preconditions. Sets the new `status.desired` and history entry; Some(the release) when one
/// was accepted in this pass.
fn consider_desired_update(
    cv: &ClusterVersion,
    status: &mut ClusterVersionStatus,
    graph: Option<&Graph>,
    verification: Option<&Verification>,
    now: &str,
) -> Option<Release> {
    let resolved = resolve(cv, status, graph);
    if !matches!(&resolved, Some(Err((INVALID_REASON, _)))) {
        status.conditions.retain(|c| c.type_ != cv::INVALID);
    }
    let target = match resolved {
        None => {
            loaded_current(status, now);
            return None;
        }
        Some(Ok(t)) => t,
        Some(Err((reason, message))) => {
            if cv.current().is_some_and(|c| same_request(cv, c)) {
                loaded_current(status, now);
            } else if reason == INVALID_REASON {
                // Ignored, as the CVO ignores an invalid request: what was loaded stays loaded.
                set_condition(&mut status.conditions, Condition::new(cv::INVALID, "True", reason, message), now);
                loaded_current(status, now);
            } else {
                set_condition(
                    &mut status.conditions,
                    Condition::new(cv::RELEASE_ACCEPTED, "False", reason, message),
                    now,
                );
            }
            return None;
        }
    };
    if let Some(current) = cv.current() {
        if current.version == target.version && current.image == target.image {
            loaded_current(status, now);
            return None;
        }
    }
    let force = cv.spec.desired_update.as_ref().is_some_and(|u| u.force);
    let mut risks = Vec::new();
    // The CVO's order: the payload is retrieved and verified before the preconditions.
    if let Some(Err(why)) = verification {
        if !force {
            let message = format!(
                "Retrieving payload failed version={:?} image={:?} failure=The update cannot be verified: {why} (set \
                 spec.desiredUpdate.force to take it anyway)",
                target.version, target.image
            );
            set_condition(
                &mut status.conditions,
                Condition::new(cv::RELEASE_ACCEPTED, "False", "RetrievePayload", message),
                now,
            );
            return None;
        }
        risks.push(format!("The update cannot be verified: {why}"));
    }
    if let Some(current) = cv.current() {
        let failures = precondition_failures(status, current, &target);
        if !failures.is_empty() && !force {
            let message = format!(
                "Preconditions failed for payload loaded version={:?} image={:?}: {} (set spec.desiredUpdate.force to take it anyway)",
                target.version,
                target.image,
                failures.join("; ")
            );
            set_condition(
                &mut status.conditions,
                Condition::new(cv::RELEASE_ACCEPTED, "False", "PreconditionChecks", message),
                now,
            );
            return None;
        }
        risks.extend(failures);
        risks.extend(not_recommended(status, &target));
    }
    // A release superseded before it completed stays Partial, with the time it was left.
    if let Some(h) = status.history.first_mut() {
        if h.completion_time.is_none() {
            h.completion_time = Some(now.to_string());
        }
    }
    status.history.insert(
        0,
        UpdateHistory {
            state: cv::PARTIAL.into(),
            started_time: now.into(),
            completion_time: None,
            version: target.version.clone(),
            image: target.image.clone(),
            verified: matches!(verification, Some(Ok(_))),
            accepted_risks: risks.join("\n"),
            extra: Default::default(),
        },
    );
    status.history.truncate(cv::MAX_HISTORY);
    status.desired = Some(target.clone());
    set_condition(
        &mut status.conditions,
        Condition::new(
            cv::RELEASE_ACCEPTED,
            "True",
            "PayloadLoaded",
            format!("Payload loaded version={:?} image={:?}", target.version, target.image),
        ),
        now,
    );
    Some(target)
}

/// `ReleaseAccepted=Unknown` while the requested release's check waits on its repository, as the
/// CVO shows a payload it is still retrieving: without it a slow repository looks like a
/// request nobody saw. One `RetrievePayload` Event when the wait starts, as the CVO records one.
fn retrieving(status: &mut ClusterVersionStatus, target: &Release, events: &Recorder, now: &str) {
    let message = format!("Retrieving and verifying payload version={:?} image={:?}", target.version, target.image);
    let shown = find_condition(&status.conditions, cv::RELEASE_ACCEPTED)
        .is_some_and(|c| c.status == "Unknown" && c.message == message);
    if !shown {
        events.emit(&involved(), EventType::Normal, "RetrievePayload", &message);
    }
    set_condition(
        &mut status.conditions,
        Condition::new(cv::RELEASE_ACCEPTED, "Unknown", "RetrievePayload", message),
        now,
    );
}

/// `ReleaseAccepted` back to the release that is loaded, once nothing else is asked for (a
/// refused request reverted or cleared): the refusal no longer describes the request.
fn loaded_current(status: &mut ClusterVersionStatus, now: &str) {
    let Some(current) = status.desired.clone() else { return };
    // Not True: refused (False), or still being retrieved (Unknown) when the request was
    // taken back meanwhile.
    if find_condition(&status.conditions, cv::RELEASE_ACCEPTED).is_some_and(|c| c.status != "True") {
        let message = format!("Payload loaded version={:?} image={:?}", current.version, current.image);
        set_condition(
            &mut status.conditions,
            Condition::new(cv::RELEASE_ACCEPTED, "True", "PayloadLoaded", message),
            now,
        );
    }
}

/// Whether `spec.desiredUpdate` asks for the release already current (an unresolvable request
/// for it changes nothing).
fn same_request(cv: &ClusterVersion, current: &Release) -> bool {
    cv.spec.desired_update.as_ref().is_some_and(|u| {
        (u.version.is_empty() || u.version == current.version) && (u.image.is_empty() || u.image == current.image)
    })
}

/// Create or update the release MachineConfigs with the release's `osImageURL` (nothing is
/// written when they already say it).
async fn write_release_configs(store: &Arc<dyn Store>, release: &Release) -> Result<(), StoreError> {
    for role in ROLES {
        let name = release_config_name(role);
        let key = Key::cluster(&MACHINE_CONFIG.store_key(), &name);
        let want_spec = json!({"config": {"ignition": {"version": "3.2.0"}}, "osImageURL": release.image});
        for _ in 0..3 {
            let result = match store.get(&key).await? {
                Some(existing) => {
                    let mut next = (*existing.object).clone();
                    next["spec"] = want_spec.clone();
                    super::set_annotations(&mut next, &[(RELEASE_ANNOTATION, Some(&release.version))]);
                    if !next["metadata"]["labels"].is_object() {
                        next["metadata"]["labels"] = json!({});
                    }
                    next["metadata"]["labels"][aloft_api::annotations::ROLE_LABEL] = json!(role);
                    if next == *existing.object {
                        break;
                    }
                    objects::set_generation(&existing.object, &mut next);
                    store.update(&key, next, revision_of(&existing.object)).await.map(|_| ())
                }
                None => {
                    let mut obj = json!({
                        "apiVersion": aloft_api::MCO_API_VERSION,
                        "kind": "MachineConfig",
                        "metadata": {
                            "name": name,
                            "labels": {aloft_api::annotations::ROLE_LABEL: role},
                            "annotations": {RELEASE_ANNOTATION: release.version},
                        },
                        "spec": want_spec,
                    });
                    objects::prepare_create(&mut obj, "");
                    store.create(&key, obj).await.map(|_| ())
                }
            };
            match result {
                Ok(()) => break,
                Err(StoreError::Conflict { .. }) | Err(StoreError::AlreadyExists(_)) | Err(StoreError::NotFound(_)) => {
                }
                Err(e) => return Err(e),
            }
        }
    }
    Ok(())
}

/// Whether a pool selects the release MachineConfigs (by their role labels), as the render
/// controller selects configs for it (an empty selector renders nothing).
fn takes_release(pool: &MachineConfigPool) -> bool {
    let selector = pool.spec.machine_config_selector.as_ref().filter(|s| !s.is_empty());
    let Some(selector) = selector.and_then(|s| s.to_selector().ok()) else {
        return false;
    };
    ROLES.iter().any(|role| {
        let labels =
            std::collections::BTreeMap::from([(aloft_api::annotations::ROLE_LABEL.to_string(), role.to_string())]);
        selector.matches(&labels)
    })
}

/// How far the pools are with the desired release: `Progressing`, `Available`, `Failing`, and
/// the history entry completed once every pool runs it. Some(version) when it completed in this
/// pass.
async fn follow_progress(
    store: &Arc<dyn Store>,
    status: &mut ClusterVersionStatus,
    now: &str,
) -> Result<Option<String>, StoreError> {
    let Some(desired) = status.desired.clone() else {
        set_condition(
            &mut status.conditions,
            Condition::new(cv::AVAILABLE, "False", "NoRelease", "No release has been accepted yet."),
            now,
        );
        return Ok(None);
    };
    let mut total = 0i64;
    let mut updated = 0i64;
    let mut waiting = Vec::new();
    let mut degraded = Vec::new();
    for raw in store.list(&MACHINE_CONFIG_POOL.store_key(), None).await?.items {
        let Ok(pool) = serde_json::from_value::<MachineConfigPool>(raw) else { continue };
        if !takes_release(&pool) {
            // A pool of a role of its own (say, only `role: infra` configs) never renders the
            // release: waiting on it would keep every release Partial for good.
            continue;
        }
        let name = pool.metadata.name.clone();
        let st = pool.status.clone().unwrap_or_default();
        total += st.machine_count;
        let target = pool.spec.configuration.as_ref().map(|c| c.name.clone()).unwrap_or_default();
        let target_image = match target.as_str() {
            "" => None,
            // Only the one field of a rendered config that may be a megabyte.
            t => store
                .get(&Key::cluster(&MACHINE_CONFIG.store_key(), t))
                .await?
                .map(|o| o.object.pointer("/spec/osImageURL").and_then(Value::as_str).unwrap_or("").to_string()),
        };
        if find_condition(&st.conditions, "Degraded").is_some_and(Condition::is_true) {
            let why = find_condition(&st.conditions, "Degraded").map(|c| c.message.clone()).unwrap_or_default();
            degraded.push(format!("pool {name} is degraded: {why}"));
        }
        match target_image {
            Some(img) if img == desired.image => {
                let at_target = st.configuration.as_ref().is_some_and(|c| c.name == target);
                let done = if at_target { st.updated_machine_count } else { 0 };
                updated += done;
                if done < st.machine_count || !at_target {
                    waiting.push(if pool.spec.paused {
                        format!("{name} (paused)")
                    } else {
                        format!("{name} ({done} of {})", st.machine_count)
                    });
                }
            }
            Some(img) if !img.is_empty() && target.starts_with("rendered-") => {
                waiting.push(format!("{name} (its config {target} has osImageURL {img})"));
            }
            _ => waiting.push(format!("{name} (not rendered with the release yet)")),
        }
    }
    let failing = if degraded.is_empty() {
        Condition::new(cv::FAILING, "False", "", "")
    } else {
        Condition::new(cv::FAILING, "True", "MachineConfigPoolDegraded", degraded.join("; "))
    };
    set_condition(&mut status.conditions, failing, now);
    let partial = status.history.first().is_some_and(|h| h.state == cv::PARTIAL && h.version == desired.version);
    if waiting.is_empty() {
        let mut completed = None;
        if let Some(h) = status.history.first_mut() {
            if partial {
                h.state = cv::COMPLETED.into();
                h.completion_time = Some(now.to_string());
                completed = Some(desired.version.clone());
            }
        }
        set_condition(
            &mut status.conditions,
            Condition::new(cv::PROGRESSING, "False", "", format!("Cluster version is {}", desired.version)),
            now,
        );
        set_condition(
            &mut status.conditions,
            Condition::new(cv::AVAILABLE, "True", "", format!("Done applying {}", desired.version)),
            now,
        );
        return Ok(completed);
    }
    let percent = if total > 0 { updated * 100 / total } else { 0 };
    let message = format!(
        "Working towards {}: {updated} of {total} nodes updated ({percent}%); waiting on {}",
        desired.version,
        waiting.join(", ")
    );
    set_condition(&mut status.conditions, Condition::new(cv::PROGRESSING, "True", "", message), now);
    if find_condition(&status.conditions, cv::AVAILABLE).is_none_or(|c| c.reason == "NoRelease") {
        set_condition(
            &mut status.conditions,
            Condition::new(
                cv::AVAILABLE,
                "False",
                "Progressing",
                format!("Applying {} for the first time", desired.version),
            ),
            now,
        );
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rel(version: &str, image: &str) -> Release {
        Release { version: version.into(), image: image.into(), ..Default::default() }
    }

    fn image(n: u8) -> String {
        format!("ostree+http://repo.example/os#aloft/x86_64@{}", format!("{n}").repeat(64))
    }

    fn history(versions: &[&str]) -> ClusterVersionStatus {
        ClusterVersionStatus {
            history: versions
                .iter()
                .map(|v| UpdateHistory { state: cv::COMPLETED.into(), version: v.to_string(), ..Default::default() })
                .collect(),
            ..Default::default()
        }
    }

    #[test]
    fn preconditions_allow_patches_the_next_minor_and_a_rollback_to_the_previous_patch_only() {
        let st = history(&["4.8.3", "4.8.2", "4.7.9"]);
        let fails = |from: &str, to: &str| precondition_failures(&st, &rel(from, ""), &rel(to, ""));
        assert_eq!(fails("4.8.3", "4.8.9"), Vec::<String>::new());
        assert_eq!(fails("4.8.3", "4.9.0"), Vec::<String>::new());
        assert_eq!(fails("4.8.3", "4.8.2"), Vec::<String>::new(), "back to the previous release, same minor");
        let giant = fails("4.8.3", "4.10.0");
        assert!(giant.len() == 1 && giant[0].starts_with("GiantHop: 4.8.3 to 4.10.0"), "{giant:?}");
        assert!(fails("4.8.3", "5.0.0")[0].starts_with("GiantHop"), "a new major is a giant hop");
        let back = fails("4.8.3", "4.8.1");
        assert!(
            back.len() == 1
                && back[0]
                    .contains("the only rollback allowed is to the previous release (4.8.2) within the same minor"),
            "{back:?}"
        );
        let across = precondition_failures(&history(&["4.8.0", "4.7.9"]), &rel("4.8.0", ""), &rel("4.7.9", ""));
        assert!(
            across.len() == 1
                && across[0]
                    == "Rollback: release 4.7.9 is older than 4.8.0 and is the previous release, but a rollback may not change the major or minor version",
            "the release asked for is the previous one; the rule it breaks is the minor: {across:?}"
        );
        // Not semantic versions (an explicit image's version is checked before): no opinion.
        assert_eq!(fails("4.8.3", "latest"), Vec::<String>::new());

        // Upgradeable=False (an operator that supports no newer minor) holds back a minor or a
        // major, named after GiantHop as the CVO orders them; never a patch or a rollback.
        let mut held = history(&["4.8.3", "4.8.2"]);
        let why = "ClusterServiceVersions blocking minor version updates to 4.9 or higher: maximum supported version for operators/a.v1 is 4.8";
        held.conditions.push(Condition::new(cv::UPGRADEABLE, "False", cv::INCOMPATIBLE_OPERATORS, why));
        let fails = |from: &str, to: &str| precondition_failures(&held, &rel(from, ""), &rel(to, ""));
        assert_eq!(fails("4.8.3", "4.9.0"), [format!("Upgradeable: IncompatibleOperatorsInstalled: {why}")]);
        assert_eq!(fails("4.8.3", "4.8.9"), Vec::<String>::new(), "a patch goes on");
        assert_eq!(fails("4.8.3", "4.8.2"), Vec::<String>::new(), "so does the rollback");
        let both = fails("4.8.3", "5.0.0");
        assert!(both.len() == 2 && both[0].starts_with("GiantHop") && both[1].starts_with("Upgradeable"), "{both:?}");
    }

    fn graph() -> Graph {
        let body = json!({"version": 1, "nodes": [
            {"version": "1.0.0", "payload": image(1), "metadata": {"url": "https://notes/1.0.0"}},
            {"version": "1.1.0", "payload": image(2)},
            {"version": "1.2.0", "payload": "quay.io/ocp/release@sha256:abc"},
        ], "edges": [[0, 1], [0, 2]]});
        update_graph::parse(body.to_string().as_bytes()).expect("a graph")
    }

    fn asking(version: &str, img: &str) -> ClusterVersion {
        let mut c = ClusterVersion::default();
        c.spec.channel = "stable-1".into();
        c.spec.desired_update = Some(cv::Update { version: version.into(), image: img.into(), ..Default::default() });
        c
    }

    #[test]
    fn a_desired_update_is_resolved_against_the_graph_or_refused_saying_why() {
        let g = graph();
        // No release yet: a version alone is looked up in the graph (the fleet's first).
        let none = ClusterVersionStatus::default();
        let ok = |v: &str, i: &str| resolve(&asking(v, i), &none, Some(&g)).expect("asked").expect("resolved");
        let r = ok("1.0.0", "");
        assert_eq!((r.image.as_str(), r.url.as_str()), (image(1).as_str(), "https://notes/1.0.0"));
        assert_eq!(ok("", &image(2)).version, "1.1.0", "an image the graph has gives its version");
        assert_eq!(ok("1.5.0", &image(5)), rel("1.5.0", &image(5)), "explicit: off the graph");
        let refused = |v: &str, i: &str, g: Option<&Graph>| {
            resolve(&asking(v, i), &none, g).expect("asked").expect_err("refused")
        };
        let (reason, message) = refused("1.5.0", "", Some(&g));
        assert_eq!(reason, "RetrievePayload");
        assert!(
            message.contains("not in the update graph of channel \"stable-1\"")
                && message.contains("set spec.desiredUpdate.image"),
            "{message}"
        );
        let (_, message) = refused("1.5.0", "", None);
        assert!(message.contains("none has been retrieved"), "{message}");
        let (reason, message) = refused("1.1.0", &image(1), Some(&g));
        assert_eq!(reason, "VerifyPayloadVersion");
        assert!(message.contains("the update graph says that image is release 1.0.0"), "{message}");
        let (_, message) = refused("", &image(7), Some(&g));
        assert!(message.contains("give its spec.desiredUpdate.version too"), "{message}");
        let (_, message) = refused("1.2.0", "", Some(&g));
        assert!(
            message.contains("the update graph's payload of 1.2.0") && message.contains("not an ostree"),
            "{message}"
        );
        let (_, message) = refused("", "quay.io/x@sha256:abc", Some(&g));
        assert!(message.starts_with("spec.desiredUpdate.image"), "{message}");
        assert!(resolve(&ClusterVersion::default(), &none, Some(&g)).is_none(), "nothing asked");
    }

    #[test]
    fn automatic_updates_take_the_newest_recommended_update_once_the_release_completed() {
        let entry = |version: &str, n: u8, state: &str| UpdateHistory {
            state: state.into(),
            version: version.into(),
            image: image(n),
            ..Default::default()
        };
        let mut st = ClusterVersionStatus {
            desired: Some(rel("1.0.0", &image(1))),
            history: vec![entry("1.0.0", 1, cv::COMPLETED)],
            available_updates: vec![rel("1.0.1", &image(2)), rel("1.1.0", &image(4)), rel("2.0.0", &image(5))],
            ..Default::default()
        };
        // As a pass sees it: the stored status, and the one the pass made.
        let auto = |c: &ClusterVersion, st: &ClusterVersionStatus| {
            automatic_candidates(&with_status(c.clone(), st), st).into_iter().next()
        };
        let mut c = asking("1.0.0", "");
        assert_eq!(auto(&c, &st), None, "off unless asked for");
        c.spec.automatic_updates = Some(cv::AutomaticUpdates { enabled: true });
        // The newest that passes the preconditions: 2.0.0 is a hop over minors.
        assert_eq!(auto(&c, &st), Some(rel("1.1.0", &image(4))));
        // Newest first, the next ones in order (a release that does not verify is passed over).
        let all = automatic_candidates(&with_status(c.clone(), &st), &st);
        assert_eq!(all.iter().map(|r| r.version.as_str()).collect::<Vec<_>>(), ["1.1.0", "1.0.1"]);
        // The lists are of the release current before this pass only.
        let mut moved = st.clone();
        moved.desired = Some(rel("1.0.1", &image(2)));
        moved.history.insert(0, entry("1.0.1", 2, cv::COMPLETED));
        assert!(automatic_candidates(&with_status(c.clone(), &st), &moved).is_empty(), "accepted in this pass");

        // Not while a release rolls out, is refused, or a pool fails.
        let mut partial = st.clone();
        partial.history[0].state = cv::PARTIAL.into();
        assert_eq!(auto(&c, &partial), None, "rolling out");
        for (type_, status) in [(cv::RELEASE_ACCEPTED, "False"), (cv::FAILING, "True"), (cv::INVALID, "True")] {
            let mut held = st.clone();
            set_condition(&mut held.conditions, Condition::new(type_, status, "X", "y"), "2026-12-07T10:00:00Z");
            assert_eq!(auto(&c, &held), None, "{type_}={status}");
        }
        // Nothing newer offered: nothing asked.
        let mut none = st.clone();
        none.available_updates.clear();
        assert_eq!(auto(&c, &none), None);

        // Rolled back by hand from 1.1.0 to 1.0.0: neither 1.1.0 nor 1.0.1 (older than a release
        // already run) is taken again; a newer release is.
        st.history =
            vec![entry("1.0.0", 1, cv::COMPLETED), entry("1.1.0", 4, cv::COMPLETED), entry("1.0.0", 1, cv::COMPLETED)];
        assert_eq!(auto(&c, &st), None, "a rollback holds");
        st.available_updates.push(rel("1.1.1", &image(6)));
        assert_eq!(auto(&c, &st), Some(rel("1.1.1", &image(6))));
    }

    #[test]
    fn a_release_that_cannot_be_verified_is_refused_unless_forced() {
        let g = graph();
        let now = "2026-12-07T10:00:00Z";
        let unverified: Verification = Err("commit 11 has no signatures".into());
        let mut st = ClusterVersionStatus::default();
        assert!(consider_desired_update(&asking("1.0.0", ""), &mut st, Some(&g), Some(&unverified), now).is_none());
        let c = find_condition(&st.conditions, cv::RELEASE_ACCEPTED).expect("ReleaseAccepted").clone();
        assert_eq!((c.status.as_str(), c.reason.as_str()), ("False", "RetrievePayload"));
        assert!(
            c.message.starts_with("Retrieving payload failed version=\"1.0.0\"")
                && c.message.contains("failure=The update cannot be verified: commit 11 has no signatures")
                && c.message.contains("spec.desiredUpdate.force"),
            "{}",
            c.message
        );
        assert!(st.history.is_empty() && st.desired.is_none(), "nothing taken: {st:?}");
        // Forced: taken, unverified, the failure among the accepted risks.
        let mut forced = asking("1.0.0", "");
        if let Some(u) = forced.spec.desired_update.as_mut() {
            u.force = true;
        }
        let mut st = ClusterVersionStatus::default();
        consider_desired_update(&forced, &mut st, Some(&g), Some(&unverified), now).expect("forced");
        assert!(!st.history[0].verified);
        assert_eq!(st.history[0].accepted_risks, "The update cannot be verified: commit 11 has no signatures");
        // Verified: history says so; without a keyring it says not.
        let mut st = ClusterVersionStatus::default();
        consider_desired_update(&asking("1.0.0", ""), &mut st, Some(&g), Some(&Ok("ABCD".into())), now).expect("taken");
        assert!(st.history[0].verified && st.history[0].accepted_risks.is_empty(), "{:?}", st.history[0]);
        let mut st = ClusterVersionStatus::default();
        consider_desired_update(&asking("1.0.0", ""), &mut st, Some(&g), None, now).expect("taken");
        assert!(!st.history[0].verified);
    }

    #[test]
    fn a_taken_release_goes_first_in_the_history_and_a_superseded_one_stays_partial() {
        let g = graph();
        let now = "2026-12-04T10:00:00Z";
        let mut first = ClusterVersionStatus::default();
        let taken = consider_desired_update(&asking("1.0.0", ""), &mut first, Some(&g), None, now).expect("taken");
        assert_eq!(taken.version, "1.0.0");
        assert_eq!(first.history[0].state, cv::PARTIAL);
        assert_eq!(first.history[0].accepted_risks, "", "the first release has nothing to be checked against");
        // Asked again: nothing new.
        let mut c = asking("1.0.0", "");
        c.status = Some(first.clone());
        let mut again = first.clone();
        assert!(consider_desired_update(&c, &mut again, Some(&g), None, now).is_none());
        assert_eq!(again.history.len(), 1);
        // The next one, before the first completed, off the graph's recommendations (so named
        // by its image: a version alone must be an available update).
        let mut c = asking("1.1.0", &image(2));
        c.status = Some(first.clone());
        let mut next = first.clone();
        consider_desired_update(&c, &mut next, Some(&g), None, "2026-12-04T11:00:00Z").expect("taken");
        assert_eq!(next.history.len(), 2);
        assert_eq!(
            (next.history[1].state.as_str(), next.history[1].completion_time.as_deref()),
            (cv::PARTIAL, Some("2026-12-04T11:00:00Z"))
        );
        assert!(next.history[0].accepted_risks.starts_with("RecommendedUpdate: 1.1.0 is not a recommended update"));
        assert_eq!(
            find_condition(&next.conditions, cv::RELEASE_ACCEPTED).map(|c| c.reason.as_str()),
            Some("PayloadLoaded")
        );
    }

    /// 1.0.0 → 1.0.1; 1.0.9 in the graph with its edge blocked; 1.1.0 a conditional update with
    /// a risk that applies.
    fn blocked_graph() -> Graph {
        let body = json!({"version": 1, "nodes": [
            {"version": "1.0.0", "payload": image(1)},
            {"version": "1.0.1", "payload": image(2)},
            {"version": "1.0.9", "payload": image(3)},
            {"version": "1.1.0", "payload": image(4)},
        ], "edges": [[0, 1]], "conditionalEdges": [{"edges": [{"from": "1.0.0", "to": "1.1.0"}],
            "risks": [{"name": "DataLoss", "message": "Nodes may lose /var.", "url": "https://bugs.example/1",
                       "matchingRules": [{"type": "Always"}]}]}]});
        update_graph::parse(body.to_string().as_bytes()).expect("a graph")
    }

    /// The status of a fleet that took 1.0.0, with the lists the graph gives it there.
    fn at_first_release(g: &Graph, now: &str) -> ClusterVersionStatus {
        let mut st = ClusterVersionStatus::default();
        consider_desired_update(&asking("1.0.0", ""), &mut st, Some(g), None, now).expect("the first release");
        list_updates(&mut st, g, "1.0.0", now).expect("1.0.0 is in the graph");
        st
    }

    fn with_status(mut c: ClusterVersion, st: &ClusterVersionStatus) -> ClusterVersion {
        c.status = Some(st.clone());
        c
    }

    #[test]
    fn a_version_alone_names_an_available_update_or_a_past_release_and_anything_else_is_invalid() {
        let g = blocked_graph();
        let now = "2026-12-06T10:00:00Z";
        let st = at_first_release(&g, now);
        assert_eq!(st.available_updates.iter().map(|r| r.version.as_str()).collect::<Vec<_>>(), ["1.0.1"]);

        // A node of the graph whose edge was blocked: invalid, ignored, nothing else moves.
        let mut next = st.clone();
        assert!(
            consider_desired_update(&with_status(asking("1.0.9", ""), &st), &mut next, Some(&g), None, now).is_none()
        );
        let invalid = find_condition(&next.conditions, cv::INVALID).expect("Invalid set").clone();
        assert_eq!((invalid.status.as_str(), invalid.reason.as_str()), ("True", INVALID_REASON));
        assert!(
            invalid.message.starts_with(
                "The cluster version is invalid: spec.desiredUpdate.version: Invalid value: \"1.0.9\": when image is empty the update must be a previous version or an available update"
            ),
            "{}",
            invalid.message
        );
        assert_eq!((next.history.len(), next.desired.as_ref().map(|d| d.version.as_str())), (1, Some("1.0.0")));
        assert_eq!(find_condition(&next.conditions, cv::RELEASE_ACCEPTED).map(|c| c.status.as_str()), Some("True"));

        // A conditional update asked by version: invalid too, saying how to take it knowingly.
        let mut next = st.clone();
        assert!(
            consider_desired_update(&with_status(asking("1.1.0", ""), &st), &mut next, Some(&g), None, now).is_none()
        );
        let message = &find_condition(&next.conditions, cv::INVALID).expect("Invalid set").message;
        assert!(
            message.contains("1.1.0 is a conditional update, not recommended (DataLoss: Nodes may lose /var. https://bugs.example/1)")
                && message.contains(&format!("set spec.desiredUpdate.image to {:?}", image(4)))
                && message.contains("--allow-not-recommended"),
            "{message}"
        );
        // ... and with its image it is taken, the risk recorded.
        let mut taken = st.clone();
        consider_desired_update(&with_status(asking("1.1.0", &image(4)), &st), &mut taken, Some(&g), None, now)
            .expect("taken with its image");
        assert!(taken.history[0].accepted_risks.contains("1.1.0 is not recommended"), "{:?}", taken.history[0]);

        // An available update: taken, and the Invalid condition goes.
        let mut next2 = next.clone();
        let c = with_status(asking("1.0.1", ""), &next);
        assert_eq!(consider_desired_update(&c, &mut next2, Some(&g), None, now), Some(rel("1.0.1", &image(2))));
        assert!(find_condition(&next2.conditions, cv::INVALID).is_none(), "{:?}", next2.conditions);

        // Back to the previous release by version alone: it is in the history.
        let mut back = next2.clone();
        let c = with_status(asking("1.0.0", ""), &next2);
        let to = consider_desired_update(&c, &mut back, Some(&g), None, now).expect("a rollback to the previous patch");
        assert_eq!(to.image, image(1));
    }

    #[test]
    fn a_refusal_is_lifted_once_the_request_is_reverted_or_cleared() {
        let g = blocked_graph();
        let now = "2026-12-06T10:00:00Z";
        let st = at_first_release(&g, now);
        let refused = |st: &ClusterVersionStatus| {
            let mut next = st.clone();
            // Two minors up, off the graph: a GiantHop.
            let c = with_status(asking("1.2.5", &image(5)), st);
            assert!(consider_desired_update(&c, &mut next, Some(&g), None, now).is_none());
            let a = find_condition(&next.conditions, cv::RELEASE_ACCEPTED).expect("ReleaseAccepted").clone();
            assert_eq!((a.status.as_str(), a.reason.as_str()), ("False", "PreconditionChecks"), "{}", a.message);
            next
        };
        let loaded = |st: &ClusterVersionStatus| {
            let a = find_condition(&st.conditions, cv::RELEASE_ACCEPTED).expect("ReleaseAccepted").clone();
            (a.status, a.reason, a.message)
        };
        let want = (
            "True".to_string(),
            "PayloadLoaded".to_string(),
            format!("Payload loaded version=\"1.0.0\" image={:?}", image(1)),
        );
        // Reverted to the release that runs.
        let no = refused(&st);
        let mut next = no.clone();
        assert!(
            consider_desired_update(&with_status(asking("1.0.0", ""), &no), &mut next, Some(&g), None, now).is_none()
        );
        assert_eq!(loaded(&next), want);
        // Cleared.
        let no = refused(&st);
        let mut next = no.clone();
        let mut cleared = with_status(asking("", ""), &no);
        cleared.spec.desired_update = None;
        assert!(consider_desired_update(&cleared, &mut next, Some(&g), None, now).is_none());
        assert_eq!(loaded(&next), want);
        assert_eq!(next.history.len(), 1, "nothing else moved");
    }

    #[test]
    fn after_a_failed_fetch_the_lists_are_the_kept_graphs_for_the_release_that_runs_now() {
        let g = blocked_graph();
        let now = "2026-12-06T10:00:00Z";
        let st = at_first_release(&g, now);
        let mut c = with_status(asking("1.0.0", ""), &st);
        c.spec.upstream = "http://127.0.0.1:9/graph.json".into();
        let failed = Mutex::new(GraphCache {
            failure: Some(("RemoteFailed", "Unable to retrieve available updates: refused".into())),
            lists_stale: true,
            ..Default::default()
        });
        // No graph kept of this query (another upstream or channel): no lists, however old.
        let mut next = st.clone();
        show_updates(&c, &mut next, None, &failed, now);
        assert!(next.available_updates.is_empty() && next.conditional_updates.is_empty(), "{next:?}");
        // None fetched yet since the coordinator started (an outage across a restart): the
        // stored lists stay.
        let restarted = Mutex::new(GraphCache {
            failure: Some(("RemoteFailed", "Unable to retrieve available updates: refused".into())),
            ..Default::default()
        });
        let mut next = st.clone();
        show_updates(&c, &mut next, None, &restarted, now);
        assert_eq!(next.available_updates, st.available_updates);
        let r = find_condition(&next.conditions, cv::RETRIEVED_UPDATES).expect("RetrievedUpdates");
        assert_eq!((r.status.as_str(), r.reason.as_str()), ("False", "RemoteFailed"));
        // The same upstream's graph kept, the fleet since moved to 1.0.1: its lists, not 1.0.0's.
        let mut moved = st.clone();
        moved.desired = Some(rel("1.0.1", &image(2)));
        let c = with_status(c.clone(), &moved);
        let mut next = moved.clone();
        show_updates(&c, &mut next, Some(&g), &failed, now);
        assert!(next.available_updates.is_empty(), "1.0.1 has no edge out: {:?}", next.available_updates);
        assert!(next.conditional_updates.is_empty(), "{:?}", next.conditional_updates);
        // And at 1.0.0 again, the kept graph's lists for it.
        let c = with_status(c, &st);
        let mut next = st.clone();
        next.available_updates.clear();
        show_updates(&c, &mut next, Some(&g), &failed, now);
        assert_eq!(next.available_updates, vec![rel("1.0.1", &image(2))]);
        assert_eq!(next.conditional_updates.len(), 1);
    }

    #[test]
    fn only_pools_that_select_a_release_role_wait_for_the_release() {
        let pool = |selector: Value| -> MachineConfigPool {
            serde_json::from_value(json!({"metadata": {"name": "p"}, "spec": {"machineConfigSelector": selector}}))
                .expect("a pool")
        };
        let role = aloft_api::annotations::ROLE_LABEL;
        assert!(takes_release(&pool(json!({"matchLabels": {role: "worker"}}))));
        assert!(takes_release(&pool(json!({"matchLabels": {role: "master"}}))));
        assert!(takes_release(&pool(
            json!({"matchExpressions": [{"key": role, "operator": "In", "values": ["worker", "infra"]}]})
        )));
        assert!(!takes_release(&pool(json!({"matchLabels": {role: "infra"}}))), "a role of its own");
        let none: MachineConfigPool = serde_json::from_value(json!({"metadata": {"name": "p"}})).expect("a pool");
        assert!(!takes_release(&none), "no selector selects nothing");
        assert!(!takes_release(&pool(json!({}))), "an empty selector renders nothing");
    }

    #[test]
    fn the_graphs_architecture_is_that_of_the_nodes_that_take_the_release() {
        let role = aloft_api::annotations::ROLE_LABEL;
        let pool = |name: &str, roles: Value, node_role: &str| -> MachineConfigPool {
            serde_json::from_value(json!({"metadata": {"name": name}, "spec": {
                "machineConfigSelector": {"matchExpressions": [{"key": role, "operator": "In", "values": roles}]},
                "nodeSelector": {"matchLabels": {format!("node-role.kubernetes.io/{node_role}"): ""}}}}))
            .expect("a pool")
        };
        let pools = [pool("worker", json!(["worker"]), "worker"), pool("lab", json!(["lab"]), "lab")];
        let node = |name: &str, node_role: Option<&str>, arch: &str| {
            let labels = node_role.map(|r| json!({format!("node-role.kubernetes.io/{r}"): ""})).unwrap_or(json!({}));
            let n: aloft_api::Node =
                serde_json::from_value(json!({"metadata": {"name": name, "labels": labels}})).expect("a node");
            (n, arch.to_string())
        };
        assert_eq!(arch_of(&pools, &[]), Ok(None), "no node reports one");
        let mut fleet = vec![node("w1", Some("worker"), "arm64"), node("w2", Some("worker"), "arm64")];
        assert_eq!(arch_of(&pools, &fleet), Ok(Some("arm64".into())));
        // A node in no pool, or in a pool of a role of its own, gets no release: it does not count.
        fleet.push(node("stray", None, "amd64"));
        fleet.push(node("bench", Some("lab"), "s390x"));
        assert_eq!(arch_of(&pools, &fleet), Ok(Some("arm64".into())));
        assert_eq!(arch_of(&pools[1..], &fleet), Ok(None), "no pool takes the release");
        // One that does disagrees: no graph, and the message names it, not the many.
        fleet.push(node("w9", Some("worker"), "amd64"));
        let why = arch_of(&pools, &fleet).expect_err("two architectures");
        assert!(why.contains("(1 amd64: w9; 2 arm64)"), "{why}");
        // A tie: none is the fleet's; all are named.
        fleet.push(node("w8", Some("worker"), "amd64"));
        let why = arch_of(&pools, &fleet).expect_err("two architectures");
        assert!(why.contains("(2 amd64: w8, w9; 2 arm64: w1, w2)"), "{why}");
        // Many of another: five named, then a count.
        for i in 0..7 {
            fleet.push(node(&format!("x{i}"), Some("worker"), "ppc64le"));
        }
        let why = arch_of(&pools, &fleet).expect_err("three architectures");
        assert!(why.contains("(2 amd64: w8, w9; 2 arm64: w1, w2; 7 ppc64le)"), "{why}");
        fleet.push(node("w3", Some("worker"), "arm64"));
        fleet.extend((0..5).map(|i| node(&format!("y{i}"), Some("worker"), "arm64")));
        let why = arch_of(&pools, &fleet).expect_err("three architectures");
        assert!(why.contains("(2 amd64: w8, w9; 8 arm64; 7 ppc64le: x0, x1, x2, x3, x4, and 2 more)"), "{why}");
    }

    #[test]
    fn architectures_are_named_as_the_update_service_names_them() {
        assert_eq!(graph_arch("x86_64"), "amd64");
        assert_eq!(graph_arch("aarch64"), "arm64");
        assert_eq!(graph_arch("s390x"), "s390x");
    }
}
