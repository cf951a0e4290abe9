//! The agent's side of the coordinator protocol: its own Node (get, watch, MCO annotations,
//! Ready condition) and the rendered MachineConfigs it is told to apply. Only calls a node
//! credential is allowed to make.

use aloft_api::annotations as ann;
use aloft_api::MachineConfig;
use aloft_client::{resource_path, Client, ResourceRef};
use anyhow::{anyhow, bail, Context, Result};
use futures::StreamExt;
use serde::Deserialize;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{watch, OnceCell};

const NODES: ResourceRef<'static> = ResourceRef { group: "", version: "v1", plural: "nodes", namespaced: false };
const MACHINE_CONFIGS: ResourceRef<'static> =
    ResourceRef { group: aloft_api::MCO_GROUP, version: "v1", plural: "machineconfigs", namespaced: false };

const MACHINE_CONFIGURATIONS: ResourceRef<'static> =
    ResourceRef { group: "operator.openshift.io", version: "v1", plural: "machineconfigurations", namespaced: false };

/// MCO's `reason` annotation is cut at this length.
pub const MAX_REASON: usize = 2000;

/// This node, as the coordinator sees it.
#[derive(Clone)]
pub struct NodeApi {
    client: Client,
    name: String,
    /// The newest view of the Node, kept current by one long-lived watch (started by the first
    /// wait). Opening a watch per wait cost a request, an authentication and a log replay on
    /// the coordinator for every step of every update; across a fleet that was a third of the
    /// coordinator's requests.
    latest: Arc<OnceCell<watch::Receiver<Option<Followed>>>>,
    /// The highest revision handed out since the coordinator's store last went back in time
    /// (see [`Followed::resets`]): a caller's revision above it is from before, and waiting for
    /// a newer one would wait for numbers the restored store reaches only much later.
    issued: Arc<AtomicU64>,
    /// A write sent without waiting for it ([`NodeApi::report_working`]); every later write
    /// waits for it first, so the coordinator sees this node's writes in the order they were made.
    pending: Arc<tokio::sync::Mutex<Option<Background>>>,
    /// What the coordinator sent on the watch ahead of a new desiredConfig (`UPDATE_INPUTS`):
    /// the update then reads neither object over the network.
    delivered: Arc<std::sync::Mutex<Option<Delivered>>>,
    /// How many times the watch of this Node has been opened: each time the coordinator was
    /// reached again. A step that failed while the coordinator was away is retried when this
    /// moves ([`NodeApi::wait_reached`]) rather than after the run loop's whole backoff.
    links: Arc<watch::Sender<u64>>,
    /// What the follower's last read of the Node found when it was refused for good (401: the
    /// credential revoked; 404: the Node deleted); `None` once a read succeeds. Waiters wake on
    /// it: a Node deleted before the watch ever delivered it (right after the agent started)
    /// left the follower retrying the refusal as an outage while the run loop waited on the
    /// watch for the 5-minute idle timeout, its node gone.
    refused: Arc<watch::Sender<Option<Standing>>>,
}

/// The inputs of an update as the watch delivered them, and when.
struct Delivered {
    config: MachineConfig,
    /// MachineConfiguration/cluster, None when the coordinator has none.
    policy: Option<Value>,
    at: std::time::Instant,
}

/// Delivered inputs older than this are read again: the policy may have changed since.
const DELIVERED_FOR: Duration = Duration::from_secs(30);

/// How long the coordinator keeps the follower's watch open before the follower reopens it (and
/// so authenticates again: a revoked node credential stops getting updates within this).
const FOLLOW_SECONDS: u64 = 300;

/// The follower's newest view, and how many times it found the coordinator's store older than
/// what it had seen (a data directory restored from a backup): revisions from before such a
/// reset say nothing about the ones after it.
#[derive(Clone)]
struct Followed {
    view: Arc<NodeView>,
    resets: u64,
}

/// What the agent reads of its Node (MCO's annotations) and the revision it was read at.
#[derive(Debug, Clone, Default)]
pub struct NodeView {
    pub annotations: BTreeMap<String, String>,
    pub revision: String,
}

impl NodeView {
    pub fn annotation(&self, key: &str) -> &str {
        self.annotations.get(key).map(String::as_str).unwrap_or("")
    }

    /// The revision as a number (the coordinator's are; anything else orders first).
    fn rev(&self) -> u64 {
        self.revision.parse().unwrap_or(0)
    }
}

/// A Node as the agent reads it off the wire: the annotations and the revision, every other
/// field skipped (a full `Node` keeps unknown fields at every level, which costs a JSON tree
/// and a second pass for each of the several reads an update makes).
#[derive(Deserialize)]
struct WireNode {
    #[serde(default)]
    metadata: WireMeta,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct WireMeta {
    #[serde(default)]
    annotations: Option<BTreeMap<String, String>>,
    #[serde(default)]
    resource_version: Option<String>,
}

impl From<WireNode> for NodeView {
    fn from(n: WireNode) -> Self {
        NodeView {
            annotations: n.metadata.annotations.unwrap_or_default(),
            revision: n.metadata.resource_version.unwrap_or_else(|| "0".into()),
        }
    }
}

impl From<WireObject> for NodeView {
    fn from(o: WireObject) -> Self {
        WireNode { metadata: o.metadata }.into()
    }
}

/// One line of a watch of the Node: a Node event, or the inputs of an update (`UPDATE_INPUTS`,
/// whose object has the other two fields). One struct for both, so each line is parsed once.
#[derive(Deserialize)]
struct WireEvent {
    #[serde(rename = "type")]
    kind: String,
    object: Option<WireObject>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireObject {
    #[serde(default)]
    metadata: WireMeta,
    #[serde(default)]
    machine_config: Option<Box<MachineConfig>>,
    #[serde(default)]
    machine_configuration: Option<Value>,
}

/// The Node `name` as the agent reads it (`get`), or an error naming it.
async fn read_node(client: &Client, name: &str) -> Result<NodeView> {
    let n: Option<WireNode> = client.get_as(&resource_path(NODES, None, Some(name))).await?;
    Ok(n.with_context(|| format!("the coordinator has no Node {name:?}"))?.into())
}

/// Whether this node's credential still works for its Node ([`NodeApi::standing`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Standing {
    /// The Node is there and the credential reads it.
    Enrolled,
    /// 401: the credential was revoked (the Node was deleted, or `aloft-coordinator token
    /// revoke` ran).
    Revoked,
    /// 404: the Node is gone (deleted; its credential is revoked right after).
    NodeGone,
}

impl Standing {
    /// What a status code of a read of the own Node says when it is a refusal retrying never
    /// mends.
    fn refused(code: u16) -> Option<Standing> {
        match code {
            401 => Some(Standing::Revoked),
            404 => Some(Standing::NodeGone),
            _ => None,
        }
    }
}

impl NodeApi {
    /// Read the own Node to tell a lost credential or a deleted Node (which retrying never
    /// mends) from a transient failure (an `Err`: the coordinator unreachable, a 5xx).
    pub async fn standing(&self) -> Result<Standing> {
        let reply = self.client.get(&resource_path(NODES, None, Some(&self.name))).await?;
        match Standing::refused(reply.code) {
            Some(lost) => Ok(lost),
            None => reply.into_result().map(|_| Standing::Enrolled),
        }
    }

    pub fn new(client: Client, name: &str) -> Self {
        NodeApi {
            client,
            name: name.to_string(),
            latest: Arc::default(),
            issued: Arc::default(),
            pending: Arc::default(),
            delivered: Arc::default(),
            links: Arc::new(watch::channel(0).0),
            refused: Arc::new(watch::channel(None).0),
        }
    }

    /// How many times this node's watch reached the coordinator so far (for
    /// [`NodeApi::wait_reached`]).
    pub fn links(&self) -> u64 {
        *self.links.borrow()
    }

    /// Wait until the coordinator is reached again after `since` (this node's watch opened once
    /// more: it was away and answers again), or until `timeout`; whether it was reached. Starts
    /// following the Node if nothing did yet. A coordinator restart breaks every node's watch and
    /// fails the reports in flight: retried after the run loop's backoff (5 s at least), they
    /// cost each of those nodes' turns the backoff instead of the restart.
    pub async fn wait_reached(&self, since: u64, timeout: Duration) -> bool {
        let _ = self.latest.get_or_init(|| async { self.start_follower() }).await;
        let mut rx = self.links.subscribe();
        let reached = tokio::time::timeout(timeout, rx.wait_for(|n| *n > since)).await;
        matches!(reached, Ok(Ok(_)))
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub async fn get(&self) -> Result<NodeView> {
        read_node(&self.client, &self.name).await.map(|v| self.issue(v))
    }

    /// `v`, its revision noted as handed out.
    fn issue(&self, v: NodeView) -> NodeView {
        self.issued.fetch_max(v.rev(), Ordering::Relaxed);
        v
    }

    /// Set (or, with `None`, remove) MCO annotations in one merge patch, after any write still
    /// under way in the background.
    pub async fn annotate(&self, values: &[(&str, Option<&str>)]) -> Result<NodeView> {
        let mut pending = self.pending.lock().await;
        let lost = settle(pending.take()).await;
        self.annotate_now(&carried(&lost, values)).await
    }

    /// Report Working on `current`, with the drain request `drain` when the update drains, and
    /// go on without waiting for the write: the update needs nothing from its answer. Either no
    /// drain is asked for, or the coordinator answered `drain` already, when it picked this node
    /// (it cordons and acknowledges in the pick's write when the pool has no drain hooks, and it
    /// never takes that answer back while the node is updating). The next write of this node
    /// waits for this one. Saves the node's turn one round trip and one commit of the
    /// coordinator before the apply starts.
    pub async fn report_working(&self, current: &str, drain: Option<&str>) {
        let mut pending = self.pending.lock().await;
        let lost = settle(pending.take()).await;
        let values: Vec<(&'static str, Option<String>)> =
            carried(&lost, &working(current, drain)).into_iter().map(|(k, v)| (k, v.map(str::to_string))).collect();
        let api = self.clone();
        let sent = values.clone();
        let write = tokio::spawn(async move {
            let values: Vec<(&str, Option<&str>)> = values.iter().map(|(k, v)| (*k, v.as_deref())).collect();
            api.annotate_now(&values).await
        });
        *pending = Some((write, sent));
    }

    async fn annotate_now(&self, values: &[(&str, Option<&str>)]) -> Result<NodeView> {
        let patch = annotations_patch(values);
        let n: Option<WireNode> = self
            .client
            .patch_as(&resource_path(NODES, None, Some(&self.name)), "application/merge-patch+json", &patch)
            .await
            .context("updating the node's annotations")?;
        let v =
            n.with_context(|| format!("updating the node's annotations: the coordinator has no Node {:?}", self.name))?;
        Ok(self.issue(v.into()))
    }

    /// Report that the update to `failed_on` failed (`state` Degraded or Unreconcilable, for
    /// `reason`) while the node runs `current`; see [`failure`].
    pub async fn report_failure(&self, state: &str, reason: &str, current: &str, failed_on: &str) -> Result<NodeView> {
        self.annotate(&failure(state, reason, current, failed_on)).await
    }

    /// Report Working on `current` (no drain request) and wait for the write: before a reboot,
    /// the report must be in before the node goes down.
    pub async fn report_working_now(&self, current: &str) -> Result<NodeView> {
        self.annotate(&working(current, None)).await
    }

    /// Set the Ready condition (the node controller counts a node as available only when Ready).
    pub async fn set_ready(&self, ready: bool, message: &str) -> Result<()> {
        self.ready_request(ready, message, None).await?.into_result()?;
        Ok(())
    }

    /// [`NodeApi::set_ready`], waiting for the coordinator while it cannot be reached (or
    /// answers 5xx), with back-off up to 10 s and the follower's warnings about the outage. An
    /// agent started while its coordinator was down (a host rebooting during a coordinator
    /// upgrade) exited at once, and its node stayed cordoned on its unfinished update. A
    /// refusal (4xx) is returned: waiting would not change it. `node_info` goes in the same
    /// write (`status.nodeInfo`, see [`crate::node_info`]).
    pub async fn set_ready_waiting(&self, ready: bool, message: &str, node_info: Option<&Value>) -> Result<()> {
        let mut outage = Outage::default();
        let mut wait = Duration::from_millis(500);
        loop {
            let failure = match self.ready_request(ready, message, node_info).await {
                Ok(reply) if reply.ok() => {
                    outage.over();
                    return Ok(());
                }
                Ok(reply) if reply.code < 500 => return reply.into_result().map(|_| ()),
                Ok(reply) => {
                    anyhow::anyhow!("{}", reply.into_result().err().map(|e| format!("{e:#}")).unwrap_or_default())
                }
                Err(e) => e,
            };
            let jittered = crate::backoff::jittered(wait);
            outage.failed(&failure, jittered);
            tokio::time::sleep(jittered).await;
            wait = (wait * 2).min(Duration::from_secs(10));
        }
    }

    async fn ready_request(
        &self,
        ready: bool,
        message: &str,
        node_info: Option<&Value>,
    ) -> Result<aloft_client::Reply> {
        let now = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
        let cond = json!({"type": "Ready", "status": if ready { "True" } else { "False" }, "reason": "AloftAgentReady",
                          "message": message, "lastHeartbeatTime": now, "lastTransitionTime": now});
        let path = format!("{}/status", resource_path(NODES, None, Some(&self.name)));
        let mut status = json!({"conditions": [cond]});
        if let Some(info) = node_info {
            status["nodeInfo"] = info.clone();
        }
        self.client.patch(&path, "application/merge-patch+json", &json!({"status": status})).await
    }

    /// Fetch a rendered config by name.
    pub async fn machine_config(&self, name: &str) -> Result<MachineConfig> {
        let mc: Option<MachineConfig> = self
            .client
            .get_as(&resource_path(MACHINE_CONFIGS, None, Some(name)))
            .await
            .with_context(|| format!("fetching rendered config {name:?}"))?;
        mc.with_context(|| format!("rendered config {name:?} does not exist on the coordinator"))
    }

    /// The cluster's node disruption policy (`MachineConfiguration/cluster`, as in OpenShift)
    /// over MCO's defaults; the defaults alone when the coordinator has none.
    pub async fn disruption_policy(&self) -> Result<crate::disruption::Policy> {
        let reply = self.client.get(&resource_path(MACHINE_CONFIGURATIONS, None, Some("cluster"))).await?;
        if reply.code == 404 {
            return Ok(crate::disruption::Policy::mco_defaults());
        }
        let v = reply.into_result().context("reading MachineConfiguration/cluster")?;
        policy_of(Some(&v))
    }

    /// What an update reads before it plans: the rendered config `target` and the disruption
    /// policy. When the watch delivered both with the pick (`UPDATE_INPUTS`, less than
    /// [`DELIVERED_FOR`] ago), from there, once; otherwise two reads at once. The daemon and the
    /// fleet simulator (`rollout-bench`) both go through here, so the simulated fleet gets its
    /// inputs as a real one does.
    pub async fn update_inputs(&self, target: &str) -> (Result<MachineConfig>, Result<crate::disruption::Policy>) {
        let delivered = {
            let mut d = self.delivered.lock().unwrap_or_else(|e| e.into_inner());
            d.take_if(|d| d.config.metadata.name == target && d.at.elapsed() < DELIVERED_FOR)
        };
        if let Some(d) = delivered {
            tracing::debug!(target, "update inputs delivered with the pick");
            return (Ok(d.config), policy_of(d.policy.as_ref()));
        }
        tokio::join!(self.machine_config(target), self.disruption_policy())
    }

    /// Wait until the Node changes after `revision` (or `timeout` passes); returns the newest view.
    /// `None` when nothing newer arrived in time (the caller re-reads the Node).
    /// After the coordinator's store went back in time (restored from a backup), a wait from a
    /// revision of before it ends with the view read since: newer than anything before, whatever
    /// its number.
    pub async fn wait_change(&self, revision: &str, timeout: Duration) -> Result<Option<NodeView>> {
        let want: u64 = revision.parse().unwrap_or(0);
        let mut rx = self.latest.get_or_init(|| async { self.start_follower() }).await.clone();
        let resets_before = rx.borrow().as_ref().map_or(0, |f| f.resets);
        let issued = self.issued.clone();
        let newer = async {
            rx.wait_for(|f| {
                f.as_ref().is_some_and(|f| {
                    f.view.rev() > want
                        || f.resets > resets_before
                        || (f.resets > 0 && want > issued.load(Ordering::Relaxed))
                })
            })
            .await
            .ok()
            .and_then(|f| f.clone())
        };
        // The follower's read refused for good: no change comes; the caller's next read says why.
        let mut refused = self.refused.subscribe();
        let newer = async {
            tokio::select! {
                v = newer => v,
                _ = refused.wait_for(Option::is_some) => None,
            }
        };
        // None: time is up, the follower's read was refused, or the follower stopped (only when
        // every NodeApi is gone).
        let v = tokio::time::timeout(timeout, newer).await.ok().flatten().map(|f| NodeView::clone(&f.view));
        Ok(v.map(|v| self.issue(v)))
    }

    fn start_follower(&self) -> watch::Receiver<Option<Followed>> {
        let (tx, rx) = watch::channel(None);
        tokio::spawn(follow(
            self.client.clone(),
            self.name.clone(),
            tx,
            self.delivered.clone(),
            self.issued.clone(),
            self.links.clone(),
            self.refused.clone(),
        ));
        rx
    }

    /// Ask the drain controller for `request` (`drain-<cfg>` / `uncordon-<cfg>`) and wait until it
    /// answers with the same value in `lastAppliedDrain`.
    pub async fn drain_handshake(&self, request: &str, timeout: Duration) -> Result<()> {
        let node = self.annotate(&[(ann::DESIRED_DRAIN, Some(request))]).await?;
        self.await_drain(node, request, None, timeout).await
    }

    /// Report Working (on `current`) and ask for the drain `request` in one write, then wait for
    /// the answer: the update's first write is also its drain request, so the node's turn costs
    /// the coordinator one commit less on the rollout's critical path. With `update_of`, the
    /// wait ends as soon as `desiredConfig` names another config: a drain for an update taken
    /// back (an admin's edit of `desiredConfig` while the drain waited) would otherwise be waited
    /// for for good, or until the agent's own drain timeout, and then reported as a failure. (The
    /// node controller itself does not move a node cordoned for its drain, as MCO's does not.)
    /// A zero `timeout` sets no limit of the agent's own: the pool's drain timeout applies at the
    /// coordinator.
    pub async fn working_and_drain(
        &self,
        current: &str,
        request: &str,
        update_of: Option<&str>,
        timeout: Duration,
    ) -> Result<()> {
        let node = self.annotate(&working(current, Some(request))).await?;
        self.await_drain(node, request, update_of, timeout).await
    }

    /// Report Done on `current`, and when the node is drained for it, ask for the uncordon in the
    /// same write (`uncordon-<current>`). The coordinator uncordons after Done, as aloft's rollout
    /// contract says; the node counts as unavailable until it has, so nothing waits on the agent
    /// for it, and a restart cannot leave a Done node cordoned with nobody asking.
    pub async fn report_done(&self, current: &str, uncordon: bool) -> Result<NodeView> {
        let request = format!("uncordon-{current}");
        self.annotate(&done(current, uncordon.then_some(request.as_str()))).await
    }

    /// Wait until the coordinator answers `request` in `lastAppliedDrain`; `node` is the view the
    /// request was written in. With `update_of`, give up once `desiredConfig` names another config.
    async fn await_drain(
        &self,
        mut node: NodeView,
        request: &str,
        update_of: Option<&str>,
        timeout: Duration,
    ) -> Result<()> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            if node.annotation(ann::LAST_APPLIED_DRAIN) == request {
                return Ok(());
            }
            // Only the agent asks; the coordinator takes a request back when it picks the node
            // for another config (the pick answers that config's drain instead). Waited for with
            // no limit of the agent's own, such a request was waited for forever.
            let asked = node.annotation(ann::DESIRED_DRAIN);
            if asked != request {
                bail!(
                    "not waiting for {request}: the coordinator took the request back (desiredDrain is now {asked:?}, \
                     lastAppliedDrain {:?})",
                    node.annotation(ann::LAST_APPLIED_DRAIN)
                );
            }
            let desired = node.annotation(ann::DESIRED_CONFIG);
            if let Some(target) = update_of.filter(|t| !desired.is_empty() && desired != *t) {
                bail!("not waiting for {request}: the coordinator no longer asks for {target} (desiredConfig is now {desired})");
            }
            // No limit (zero): the pool's drain timeout is the coordinator's to apply.
            let left = match timeout.is_zero() {
                true => Duration::from_secs(60),
                false => deadline.saturating_duration_since(tokio::time::Instant::now()),
            };
            if left.is_zero() {
                bail!(
                    "failed to drain node: {} after {}: the coordinator did not acknowledge {request}",
                    self.name,
                    humanize(timeout)
                );
            }
            node = match self.wait_change(&node.revision, left.min(Duration::from_secs(60))).await? {
                Some(n) => n,
                None => self.get().await?,
            };
        }
    }
}

/// The annotations of a Working report on `current`, with the drain request `drain` if any. No
/// failure stands while the node works: its `failedConfig` goes in the same write.
fn working<'a>(current: &'a str, drain: Option<&'a str>) -> Vec<(&'static str, Option<&'a str>)> {
    let mut values = vec![
        (ann::STATE, Some("Working")),
        (ann::REASON, Some("")),
        (ann::CURRENT_CONFIG, Some(current)),
        (ann::FAILED_CONFIG, None),
        // The download is over once the update reports Working (one left by an agent stopped
        // in it goes too).
        (ann::PROGRESS, None),
    ];
    if let Some(d) = drain {
        values.push((ann::DESIRED_DRAIN, Some(d)));
    }
    values
}

/// The annotations of a Done report on `current`, with the uncordon request `uncordon` if any;
/// as with Working, no failure stands any more.
fn done<'a>(current: &'a str, uncordon: Option<&'a str>) -> Vec<(&'static str, Option<&'a str>)> {
    let mut values = vec![
        (ann::STATE, Some("Done")),
        (ann::REASON, Some("")),
        (ann::CURRENT_CONFIG, Some(current)),
        (ann::FAILED_CONFIG, None),
        (ann::PROGRESS, None),
    ];
    if let Some(u) = uncordon {
        values.push((ann::DESIRED_DRAIN, Some(u)));
    }
    values
}

/// The annotations of a failure report: `state` and `reason` as MCO has them, and the config the
/// failure is about (`failedConfig`), which they do not say. The coordinator's circuit breaker
/// counts the failure for that config only: a node retargeted while failing carries the old
/// config's failure until this agent reports on the new one, perhaps with the very same reason.
fn failure<'a>(
    state: &'a str,
    reason: &'a str,
    current: &'a str,
    failed_on: &'a str,
) -> Vec<(&'static str, Option<&'a str>)> {
    vec![
        (ann::STATE, Some(state)),
        (ann::REASON, Some(reason)),
        (ann::CURRENT_CONFIG, Some(current)),
        (ann::FAILED_CONFIG, Some(failed_on)),
        (ann::PROGRESS, None),
    ]
}

/// The merge patch that sets `values` (`None`: removes the annotation), each cut to
/// [`MAX_REASON`] bytes: the coordinator refuses longer annotations, and a reason can be a
/// whole error chain.
fn annotations_patch(values: &[(&str, Option<&str>)]) -> Value {
    let mut a = serde_json::Map::new();
    for (k, v) in values {
        let v = v.map(|s| if s.len() > MAX_REASON { &s[..s.floor_char_boundary(MAX_REASON)] } else { s });
        a.insert(k.to_string(), v.map(Value::from).unwrap_or(Value::Null));
    }
    json!({"metadata": {"annotations": a}})
}

/// The policy an agent applies: MachineConfiguration/cluster's over MCO's defaults, or the
/// defaults alone when there is none.
fn policy_of(machine_configuration: Option<&Value>) -> Result<crate::disruption::Policy> {
    let Some(v) = machine_configuration else {
        return Ok(crate::disruption::Policy::mco_defaults());
    };
    let user = crate::disruption::NodeDisruptionPolicy::from_machine_configuration(v)
        .context("MachineConfiguration/cluster is invalid")?;
    Ok(crate::disruption::Policy::from_user(&user))
}

/// A write sent without waiting for it, and the annotations it sets.
type Background = (tokio::task::JoinHandle<Result<NodeView>>, Vec<(&'static str, Option<String>)>);

/// Wait for a background write (see [`NodeApi::report_working`]) before the next one. Returns
/// what it set if it failed, for the next write to carry ([`carried`]); the failure is logged.
async fn settle(write: Option<Background>) -> Vec<(&'static str, Option<String>)> {
    let Some((write, values)) = write else { return Vec::new() };
    match write.await {
        Ok(Ok(_)) => return Vec::new(),
        Ok(Err(e)) => tracing::warn!(error = %format!("{e:#}"), "a background report failed; the next one carries it"),
        Err(e) => tracing::warn!(error = %e, "a background report did not finish; the next one carries it"),
    }
    values
}

/// `values`, with what a failed background write (`lost`) set that `values` does not: the
/// next write says it too. A Working report's drain request lost that way, then a failure
/// report without it, read as a node that failed before its drain, and the coordinator put a
/// drained node with its workloads stopped back into service.
fn carried<'k, 'v>(
    lost: &'v [(&'static str, Option<String>)],
    values: &[(&'k str, Option<&'v str>)],
) -> Vec<(&'k str, Option<&'v str>)> {
    let mut out: Vec<(&str, Option<&str>)> =
        lost.iter().filter(|(k, _)| !values.iter().any(|(v, _)| v == k)).map(|(k, v)| (*k, v.as_deref())).collect();
    out.extend_from_slice(values);
    out
}

/// How long the coordinator may be out of reach before the agent says so: a coordinator restart
/// is seconds, and is no news.
const OUTAGE_WARN_AFTER: Duration = Duration::from_secs(10);
/// How often a lasting outage is said again.
const OUTAGE_WARN_EVERY: Duration = Duration::from_secs(300);

/// The follower's failures to reach the coordinator, for the log: at debug level only, a
/// fleet cut off from its coordinator (a CA the agents do not trust, a firewall, an address
/// that moved) showed nothing on its nodes, as a kubelet's "Error updating node status" does.
#[derive(Default)]
struct Outage {
    since: Option<std::time::Instant>,
    said: Option<std::time::Instant>,
}

impl Outage {
    fn failed(&mut self, e: &anyhow::Error, retry: Duration) {
        let since = *self.since.get_or_insert_with(std::time::Instant::now);
        let due = match self.said {
            None => since.elapsed() >= OUTAGE_WARN_AFTER,
            Some(t) => t.elapsed() >= OUTAGE_WARN_EVERY,
        };
        if due {
            tracing::warn!(
                error = %format!("{e:#}"),
                for_s = since.elapsed().as_secs(),
                retry_s = retry.min(Duration::from_secs(10)).as_secs_f32(),
                "cannot reach the coordinator; retrying (this node gets no new config meanwhile)"
            );
            self.said = Some(std::time::Instant::now());
        }
    }

    fn over(&mut self) {
        if let (Some(since), Some(_)) = (self.since, self.said) {
            tracing::info!(after_s = since.elapsed().as_secs(), "reached the coordinator again");
        }
        *self = Outage::default();
    }
}

/// A node watch the coordinator ended sooner than this after it was opened is reopened after a
/// back-off, not at once.
const QUICK_END: Duration = Duration::from_secs(1);

/// Keeps `tx` at the newest view of node `name`: a GET, then one watch from its revision,
/// reopened from the last revision seen when the coordinator ends it, and re-read from scratch
/// when the coordinator refuses the watch: compacted past it (410 Gone), or not there yet (504
/// "Too large resource version": its data directory was restored from an older backup). A
/// fresh read older than what the follower had is such a reset: it is published all the same,
/// and `issued` (see [`NodeApi`]) starts again from it. Ends when every receiver is gone.
async fn follow(
    client: Client,
    name: String,
    tx: watch::Sender<Option<Followed>>,
    delivered: Arc<std::sync::Mutex<Option<Delivered>>>,
    issued: Arc<AtomicU64>,
    links: Arc<watch::Sender<u64>>,
    refused: Arc<watch::Sender<Option<Standing>>>,
) {
    let mut from: Option<String> = None;
    let mut backoff = Duration::from_millis(200);
    // Shared with the watch, which says when it is connected: a watch that works may run for
    // minutes before it ends.
    let outage = std::sync::Mutex::new(Outage::default());
    loop {
        let opened = tokio::time::Instant::now();
        let step = async {
            let rev = match from.take() {
                Some(r) => r,
                None => {
                    let reply = client.get(&resource_path(NODES, None, Some(&name))).await?;
                    let lost = Standing::refused(reply.code);
                    refused.send_if_modified(|r| std::mem::replace(r, lost) != lost);
                    let v: WireNode = serde_json::from_value(reply.into_result()?)
                        .context("the coordinator's answer is malformed")?;
                    let v = NodeView::from(v);
                    let r = v.revision.clone();
                    let had = tx.borrow().as_ref().map_or(0, |f| f.view.rev());
                    if v.rev() < had {
                        tracing::warn!(
                            seen = had,
                            now = v.rev(),
                            "the coordinator's store is older than what this node saw (restored from a backup?); following it from now"
                        );
                        issued.store(v.rev(), Ordering::Relaxed);
                        tx.send_modify(|cur| {
                            let resets = cur.as_ref().map_or(0, |f| f.resets) + 1;
                            *cur = Some(Followed { view: Arc::new(v), resets });
                        });
                    } else {
                        publish(&tx, v);
                    }
                    r
                }
            };
            follow_watch(&client, &name, &tx, &delivered, rev, || {
                outage.lock().unwrap_or_else(|e| e.into_inner()).over();
                links.send_modify(|n| *n += 1);
            })
            .await
        };
        let outcome = tokio::select! {
            _ = tx.closed() => return,
            o = step => o,
        };
        match outcome {
            // The coordinator ended the watch: carry on from where it got to.
            Ok(Some(rev)) => {
                outage.lock().unwrap_or_else(|e| e.into_inner()).over();
                from = Some(rev);
                if opened.elapsed() >= QUICK_END {
                    backoff = Duration::from_millis(200);
                    continue;
                }
                // Ended as soon as it was opened (a proxy that cuts streams, a coordinator going
                // down): reopened at once, the agent spun on it, a request at a time.
                tracing::debug!("the node watch ended as soon as it was opened; reopening after a pause");
                backoff = (backoff * 2).min(Duration::from_secs(10));
            }
            // Gone: start again from a fresh read.
            Ok(None) => {
                outage.lock().unwrap_or_else(|e| e.into_inner()).over();
                backoff = Duration::from_millis(200);
            }
            Err(e) => {
                tracing::debug!(error = %format!("{e:#}"), "node watch failed; retrying");
                outage.lock().unwrap_or_else(|e| e.into_inner()).failed(&e, backoff * 2);
                backoff = (backoff * 2).min(Duration::from_secs(10));
            }
        }
        tokio::select! {
            _ = tx.closed() => return,
            _ = tokio::time::sleep(crate::backoff::jittered(backoff)) => {}
        }
    }
}

fn publish(tx: &watch::Sender<Option<Followed>>, v: NodeView) {
    tx.send_if_modified(|cur| {
        // Never move back: a fresh read can race a newer event already published.
        if cur.as_ref().is_some_and(|c| c.view.rev() >= v.rev()) {
            return false;
        }
        let resets = cur.as_ref().map_or(0, |f| f.resets);
        *cur = Some(Followed { view: Arc::new(v), resets });
        true
    });
}

/// One watch from `rev`, without the events of this node's own writes (`skipOwnWrites`: their
/// answers carried them already), and with an update's inputs ahead of the event that picks this
/// node for it (`includeUpdateInputs`). `Ok(Some(last revision))` when the coordinator ended it
/// normally, `Ok(None)` when it answered with an ERROR event (410 Gone: too old to resume).
async fn follow_watch(
    client: &Client,
    name: &str,
    tx: &watch::Sender<Option<Followed>>,
    delivered: &std::sync::Mutex<Option<Delivered>>,
    mut rev: String,
    connected: impl FnOnce(),
) -> Result<Option<String>> {
    let q = format!(
        "{}?watch=true&resourceVersion={rev}&fieldSelector=metadata.name%3D{name}&timeoutSeconds={FOLLOW_SECONDS}&skipOwnWrites=true&includeUpdateInputs=true",
        resource_path(NODES, None, None),
    );
    let mut stream = client.watch(&q, None).await?.bytes_stream();
    connected();
    let mut buf = Vec::new();
    while let Some(chunk) = stream.next().await {
        buf.extend_from_slice(&chunk?);
        while let Some(pos) = buf.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = buf.drain(..=pos).collect();
            if line.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            let ev: WireEvent = serde_json::from_slice(&line).context("malformed watch event")?;
            match ev.kind.as_str() {
                "ERROR" => return Ok(None),
                "BOOKMARK" => {}
                // Before the event that needs them: kept for the update that event starts.
                "UPDATE_INPUTS" => {
                    let o = ev.object.ok_or_else(|| anyhow!("UPDATE_INPUTS event without object"))?;
                    let config =
                        *o.machine_config.ok_or_else(|| anyhow!("UPDATE_INPUTS event without machineConfig"))?;
                    let d = Delivered { config, policy: o.machine_configuration, at: std::time::Instant::now() };
                    *delivered.lock().unwrap_or_else(|e| e.into_inner()) = Some(d);
                }
                _ => {
                    let o = ev.object.ok_or_else(|| anyhow!("watch event without object"))?;
                    let v = NodeView::from(o);
                    rev = v.revision.clone();
                    publish(tx, v);
                }
            }
        }
    }
    Ok(Some(rev))
}

/// `1 hour`, `90 seconds`, as MCO words drain timeouts.
pub fn humanize(d: Duration) -> String {
    let s = d.as_secs();
    if s >= 3600 && s.is_multiple_of(3600) {
        let h = s / 3600;
        format!("{h} hour{}", if h == 1 { "" } else { "s" })
    } else if s >= 60 && s.is_multiple_of(60) {
        let m = s / 60;
        format!("{m} minute{}", if m == 1 { "" } else { "s" })
    } else {
        format!("{s} second{}", if s == 1 { "" } else { "s" })
    }
}

#[cfg(test)]
mod tests {
    /// A coordinator (here, what a proxy in front of it makes of it) that ends every watch as
    /// soon as it opens: the follower reopens it after a growing pause, not in a loop.
    #[tokio::test]
    async fn a_watch_ended_as_soon_as_it_opens_is_reopened_after_a_pause() {
        use std::sync::atomic::AtomicUsize;
        let watches = Arc::new(AtomicUsize::new(0));
        let counted = watches.clone();
        let app = axum::Router::new().route(
            "/api/v1/nodes/n1",
            axum::routing::get(|| async {
                axum::Json(json!({"apiVersion": "v1", "kind": "Node",
                    "metadata": {"name": "n1", "resourceVersion": "5"}}))
            }),
        );
        let app = app.route(
            "/api/v1/nodes",
            axum::routing::get(move || {
                counted.fetch_add(1, Ordering::Relaxed);
                async { "" }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let server = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await });
        let client = Client::new(&aloft_client::ClientConfig { server, ca_pem: None, token: None }).unwrap();
        let api = NodeApi::new(client, "n1");
        let changed = api.wait_change("5", Duration::from_secs(3)).await.unwrap();
        assert!(changed.is_none(), "nothing changed");
        let opened = watches.load(Ordering::Relaxed);
        assert!((1..=8).contains(&opened), "{opened} watches opened in 3 s");
    }

    /// A lost Working report's drain request goes with the failure report that follows; what
    /// the later report says itself wins.
    #[test]
    fn a_failed_background_report_is_carried_by_the_next() {
        let lost: Vec<(&'static str, Option<String>)> =
            super::working("r1", Some("drain-r2")).into_iter().map(|(k, v)| (k, v.map(str::to_string))).collect();
        let failure = super::failure("Degraded", "staging failed", "r1", "r2");
        let next = super::carried(&lost, &failure);
        let get = |k: &str| next.iter().rev().find(|(n, _)| *n == k).map(|(_, v)| *v);
        assert_eq!(get(ann::DESIRED_DRAIN), Some(Some("drain-r2")), "{next:?}");
        assert_eq!(get(ann::STATE), Some(Some("Degraded")), "{next:?}");
        let keys: Vec<&str> = next.iter().map(|(k, _)| *k).collect();
        let mut unique = keys.clone();
        unique.sort_unstable();
        unique.dedup();
        assert_eq!(unique.len(), keys.len(), "each annotation once: {keys:?}");
        assert_eq!(super::carried(&[], &failure), failure, "nothing lost, nothing added");
    }

    use super::*;

    #[test]
    fn a_watch_line_is_a_node_event_or_an_update_s_inputs() {
        let node: WireEvent = serde_json::from_value(json!({"type": "MODIFIED", "object": {"apiVersion": "v1",
            "kind": "Node", "metadata": {"name": "a", "resourceVersion": "9", "annotations": {ann::STATE: "Done"}},
            "status": {"conditions": []}}}))
        .unwrap();
        let o = node.object.unwrap();
        assert!(o.machine_config.is_none() && o.machine_configuration.is_none());
        assert_eq!(NodeView::from(o).revision, "9");
        let inputs: WireEvent = serde_json::from_value(json!({"type": "UPDATE_INPUTS", "object": {
            "machineConfig": {"apiVersion": "machineconfiguration.openshift.io/v1", "kind": "MachineConfig",
                "metadata": {"name": "rendered-worker-2"}, "spec": {"config": {"ignition": {"version": "3.4.0"}}}},
            "machineConfiguration": null}}))
        .unwrap();
        assert_eq!(inputs.kind, "UPDATE_INPUTS");
        let o = inputs.object.unwrap();
        assert_eq!(o.machine_config.unwrap().metadata.name, "rendered-worker-2");
        assert!(o.machine_configuration.is_none());
        assert_eq!(policy_of(None).unwrap(), crate::disruption::Policy::mco_defaults());
        let bad =
            json!({"spec": {"nodeDisruptionPolicy": {"files": [{"path": "relative", "actions": [{"type": "None"}]}]}}});
        assert!(format!("{:#}", policy_of(Some(&bad)).unwrap_err()).contains("MachineConfiguration/cluster"));
    }

    #[test]
    fn the_node_is_read_off_the_wire_as_the_agent_needs_it() {
        let full = json!({"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": "a", "resourceVersion": "42", "uid": "u", "labels": {"x": "y"},
                "annotations": {ann::DESIRED_CONFIG: "r2", ann::STATE: "Done"}},
            "spec": {"unschedulable": true, "taints": [{"key": "k"}]},
            "status": {"conditions": [{"type": "Ready", "status": "True"}], "nodeInfo": {"osImage": "x"}}});
        let v = NodeView::from(serde_json::from_value::<WireNode>(full.clone()).unwrap());
        assert_eq!(
            (v.annotation(ann::DESIRED_CONFIG), v.annotation(ann::STATE), v.revision.as_str()),
            ("r2", "Done", "42")
        );
        assert_eq!(v.annotation(ann::CURRENT_CONFIG), "", "absent reads empty");
        let bare =
            NodeView::from(serde_json::from_value::<WireNode>(json!({"metadata": {"annotations": null}})).unwrap());
        assert!(bare.annotations.is_empty() && bare.revision == "0");
        assert!(
            serde_json::from_value::<WireNode>(json!({"metadata": {"annotations": {"a": 1}}})).is_err(),
            "a non-string annotation is refused"
        );
        let ev: WireEvent = serde_json::from_value(json!({"type": "MODIFIED", "object": full})).unwrap();
        assert_eq!((ev.kind.as_str(), ev.object.map(|o| NodeView::from(o).revision)), ("MODIFIED", Some("42".into())));
        let gone: WireEvent = serde_json::from_value(json!({"type": "ERROR",
            "object": {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "code": 410}}))
        .unwrap();
        assert_eq!(gone.kind, "ERROR");
        assert!(serde_json::from_value::<WireEvent>(json!({"object": {}})).is_err(), "an event needs a type");
    }

    /// Every failure report names the config it is about; Working and Done remove that name in
    /// their own write (null in the merge patch), so no failure outlives the report that ends it.
    #[test]
    fn a_failure_report_names_its_config_and_working_or_done_clears_it() {
        let annotations =
            |values: &[(&str, Option<&str>)]| annotations_patch(values)["metadata"]["annotations"].clone();
        for state in ["Degraded", "Unreconcilable"] {
            let a = annotations(&failure(state, "boom", "r1", "r2"));
            assert_eq!(
                a,
                json!({ann::STATE: state, ann::REASON: "boom", ann::CURRENT_CONFIG: "r1", ann::FAILED_CONFIG: "r2",
                    ann::PROGRESS: null})
            );
        }
        // Drift on the current config is a failure on that config.
        assert_eq!(annotations(&failure("Degraded", "drift", "r1", "r1"))[ann::FAILED_CONFIG], "r1");
        for a in [
            annotations(&working("r1", None)),
            annotations(&working("r1", Some("drain-r2"))),
            annotations(&done("r2", None)),
            annotations(&done("r2", Some("uncordon-r2"))),
        ] {
            assert_eq!(a.get(ann::FAILED_CONFIG), Some(&Value::Null), "{a}");
            assert_eq!(a[ann::REASON], "", "{a}");
        }
        assert_eq!(annotations(&done("r2", Some("uncordon-r2")))[ann::DESIRED_DRAIN], "uncordon-r2");
        // A download's progress an agent stopped in it left is taken off by every state report.
        for a in [annotations(&working("r1", None)), annotations(&done("r2", None))] {
            assert_eq!(a.get(ann::PROGRESS), Some(&Value::Null), "{a}");
        }
        let long = "x".repeat(MAX_REASON + 10);
        assert_eq!(
            annotations(&failure("Degraded", &long, "r1", "r2"))[ann::REASON].as_str().unwrap().len(),
            MAX_REASON
        );
    }

    #[test]
    fn durations_read_like_mco() {
        assert_eq!(humanize(Duration::from_secs(3600)), "1 hour");
        assert_eq!(humanize(Duration::from_secs(7200)), "2 hours");
        assert_eq!(humanize(Duration::from_secs(600)), "10 minutes");
        assert_eq!(humanize(Duration::from_secs(5)), "5 seconds");
        assert_eq!(humanize(Duration::from_secs(60)), "1 minute");
        assert_eq!(humanize(Duration::from_secs(1)), "1 second");
    }
}
