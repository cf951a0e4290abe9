//! Whether each node's agent is still there, and its Node's Ready condition to say so.
//!
//! kubelet renews a Lease every 10 s and the node lifecycle controller sets `Ready` to `Unknown`
//! ("Kubelet stopped posting node status.") after `--node-monitor-grace-period` (40 s) without
//! one, so a dead host shows NotReady and is not picked. An aloft agent holds one long-lived watch
//! of its own Node, reopened every 5 minutes, so the coordinator already knows without a
//! heartbeat write: a node whose agent has had no watch open for the grace period is marked
//! `Ready=Unknown` (reason `NodeStatusUnknown`), and `Ready=True` again once its agent is back.
//! Any request by the agent restarts the grace period too (its writes after a reboot come before
//! its watch is open again). Watches and requests are counted in memory, so a rollout's path
//! gains no store write.
//!
//! Only Nodes whose Ready condition an agent wrote (reason `AloftAgentReady`) are judged: a Node
//! an administrator created by hand, with no agent, is left as it is. A hung agent whose
//! connection stays open is not noticed (a Lease renewed by the agent would be): the limit is
//! written in docs/design-notes.md ("Node liveness without heartbeat writes").

use crate::store::{Store, StoreError};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// kube-controller-manager's `--node-monitor-grace-period` default. An agent reopens its watch
/// every 5 minutes, within a second or so, and after a failure within 10 s.
pub const DEFAULT_GRACE: Duration = Duration::from_secs(40);

/// The Ready reason an agent writes.
pub const AGENT_READY: &str = "AloftAgentReady";
/// The Ready reason of a node whose agent stopped reporting, as the node lifecycle controller's.
pub const STATUS_UNKNOWN: &str = "NodeStatusUnknown";

/// The open watches of each node's agent, counted as they open and close.
pub struct Presence {
    seen: Mutex<HashMap<String, Seen>>,
    started: Instant,
}

#[derive(Debug, Clone, Copy)]
struct Seen {
    open: usize,
    /// When `open` last fell to zero, or the agent's last request while none was open.
    since: Instant,
}

/// A watch of a node's agent, counted while it is held (it lives in the watch's response body).
pub struct Open {
    presence: Arc<Presence>,
    node: String,
}

impl Drop for Open {
    fn drop(&mut self) {
        let mut seen = self.presence.lock();
        if let Some(s) = seen.get_mut(&self.node) {
            s.open = s.open.saturating_sub(1);
            if s.open == 0 {
                s.since = Instant::now();
            }
        }
    }
}

impl Default for Presence {
    fn default() -> Self {
        Presence { seen: Mutex::new(HashMap::new()), started: Instant::now() }
    }
}

impl Presence {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Seen>> {
        self.seen.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Counts a watch opened by `node`'s agent until the returned value is dropped; None, and
    /// nothing counted, when `node` has `most` open already.
    pub fn open(self: &Arc<Self>, node: &str, most: usize) -> Option<Open> {
        let mut seen = self.lock();
        let s = seen.entry(node.to_string()).or_insert(Seen { open: 0, since: Instant::now() });
        if s.open >= most {
            return None;
        }
        s.open += 1;
        Some(Open { presence: self.clone(), node: node.to_string() })
    }

    /// Counts a request by `node`'s agent as a sign of life, as the node lifecycle controller
    /// counts a kubelet's status post: after a reboot an agent writes its Node (Ready=True, its
    /// update Done) before its watch is open again, and judged by watches alone it was marked
    /// Unknown again a round later, out of service just as the rollout had picked the next node
    /// on its word (two unavailable under `maxUnavailable: 1`).
    pub fn heard_from(&self, node: &str) {
        let now = Instant::now();
        let mut seen = self.lock();
        match seen.get_mut(node) {
            Some(s) if s.open == 0 => s.since = now,
            Some(_) => {}
            None => {
                seen.insert(node.to_string(), Seen { open: 0, since: now });
            }
        }
    }

    /// How long ago `node`'s agent was last there at `now`: zero while it has a watch open, the
    /// time since its last one closed; `None` when it has not been seen since the coordinator
    /// started (presence is kept in memory).
    pub fn seen_ago(&self, node: &str, now: Instant) -> Option<Duration> {
        self.lock().get(node).map(|s| if s.open > 0 { Duration::ZERO } else { now.saturating_duration_since(s.since) })
    }

    /// How long `node`'s agent has been silent at `now`: no watch open and no request (since the
    /// coordinator started, for an agent not seen since); `None` while it has a watch open.
    pub fn absent_for(&self, node: &str, now: Instant) -> Option<Duration> {
        match self.lock().get(node) {
            Some(s) if s.open > 0 => None,
            Some(s) => Some(now.saturating_duration_since(s.since)),
            None => Some(now.saturating_duration_since(self.started)),
        }
    }
}

/// What to write on a node's Ready condition, if anything.
#[derive(Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Its agent is gone: Ready=Unknown.
    Lost,
    /// Its agent is back after a Lost (a watch open, or a request within the last round):
    /// Ready=True.
    Back,
}

/// The verdict on `node` (a Node object) given how long its agent has been away.
pub fn judge(node: &Value, absent: Option<Duration>, grace: Duration) -> Option<Verdict> {
    let ready = node.pointer("/status/conditions")?.as_array()?.iter().find(|c| c["type"] == "Ready")?;
    let (status, reason) = (ready["status"].as_str()?, ready["reason"].as_str().unwrap_or(""));
    match (status, reason, absent) {
        ("True", AGENT_READY, Some(away)) if away >= grace => Some(Verdict::Lost),
        // Back on a request too, not only on a watch: an agent that writes (its Done report)
        // before its watch is open again was left Unknown until the watch came. A request
        // within one round's interval is seen by the round after it.
        ("Unknown", STATUS_UNKNOWN, away) if away.is_none_or(|a| a < round_every(grace)) => Some(Verdict::Back),
        _ => None,
    }
}

/// How often the Nodes are judged: every quarter of the grace period, at least once a second.
fn round_every(grace: Duration) -> Duration {
    (grace / 4).max(Duration::from_secs(1))
}

/// `node` with its Ready condition set for `verdict` (the other conditions kept).
fn with_ready(mut node: Value, verdict: &Verdict, grace: Duration) -> Value {
    let now = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let cond = match verdict {
        Verdict::Lost => json!({"type": "Ready", "status": "Unknown", "reason": STATUS_UNKNOWN,
            "message": format!("aloft-agent stopped posting node status: no watch and no request from it for {} s", grace.as_secs()),
            "lastHeartbeatTime": now, "lastTransitionTime": now}),
        Verdict::Back => json!({"type": "Ready", "status": "True", "reason": AGENT_READY,
            "message": "aloft-agent is running", "lastHeartbeatTime": now, "lastTransitionTime": now}),
    };
    if let Some(conds) = node.pointer_mut("/status/conditions").and_then(Value::as_array_mut) {
        match conds.iter_mut().find(|c| c["type"] == "Ready") {
            Some(c) => *c = cond,
            None => conds.push(cond),
        }
    }
    node
}

/// Judges every Node every quarter of `grace` (at least once a second) and writes the verdicts;
/// a zero `grace` turns it off. A write that loses a race is judged again on the next round.
pub async fn run(store: Arc<dyn Store>, presence: Arc<Presence>, grace: Duration) {
    if grace.is_zero() {
        tracing::info!("node presence is not watched (--node-monitor-grace-period 0)");
        return std::future::pending().await;
    }
    let every = round_every(grace);
    loop {
        tokio::time::sleep(every).await;
        if let Err(e) = round(&*store, &presence, grace).await {
            tracing::warn!(error = %e, "checking the nodes' agents failed; trying again later");
        }
    }
}

/// One look at every Node. The names come from the store's rows and each Node from its memory
/// (shared, not copied): a list copied every round (tens of MB at 10,000 nodes) left the
/// allocator holding that much more after each rollout.
async fn round(store: &dyn Store, presence: &Presence, grace: Duration) -> Result<(), StoreError> {
    let resource = crate::resources::NODE.store_key();
    let now = Instant::now();
    for (key, _) in store.written_by(&resource, u64::MAX).await? {
        let Some(stored) = store.get(&key).await? else { continue };
        let Some(verdict) = judge(&stored.object, presence.absent_for(&key.name, now), grace) else { continue };
        let revision = crate::store::revision_of(&stored.object);
        let node = with_ready((*stored.object).clone(), &verdict, grace);
        match store.update(&key, node, revision).await {
            Ok(_) if verdict == Verdict::Lost => {
                tracing::warn!(node = %key.name, grace_seconds = grace.as_secs(), "node's agent has not been connected; Ready=Unknown")
            }
            Ok(_) => tracing::info!(node = %key.name, "node's agent is connected again; Ready=True"),
            Err(StoreError::Conflict { .. }) | Err(StoreError::NotFound(_)) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(status: &str, reason: &str) -> Value {
        json!({"metadata": {"name": "n1"}, "status": {"conditions": [
            {"type": "MemoryPressure", "status": "False"},
            {"type": "Ready", "status": status, "reason": reason}]}})
    }

    #[test]
    fn an_agent_away_for_the_grace_period_is_lost_and_back_when_it_connects() {
        let grace = Duration::from_secs(40);
        let ready = node("True", AGENT_READY);
        assert_eq!(judge(&ready, Some(Duration::from_secs(39)), grace), None);
        assert_eq!(judge(&ready, Some(grace), grace), Some(Verdict::Lost));
        assert_eq!(judge(&ready, None, grace), None, "connected");
        let lost = node("Unknown", STATUS_UNKNOWN);
        assert_eq!(judge(&lost, None, grace), Some(Verdict::Back));
        assert_eq!(judge(&lost, Some(Duration::from_secs(2)), grace), Some(Verdict::Back), "a request just now");
        assert_eq!(judge(&lost, Some(Duration::from_secs(20)), grace), None, "nothing for half the grace period");
        assert_eq!(judge(&lost, Some(grace * 2), grace), None, "still away: nothing to write");
        // A Node no agent wrote Ready for, or an agent's own NotReady, is left alone.
        assert_eq!(judge(&node("True", "ByHand"), Some(grace * 2), grace), None);
        assert_eq!(judge(&node("False", AGENT_READY), Some(grace * 2), grace), None);
        assert_eq!(judge(&json!({"metadata": {"name": "n1"}}), Some(grace * 2), grace), None);
    }

    #[test]
    fn the_ready_condition_is_replaced_and_the_others_kept() {
        let grace = Duration::from_secs(40);
        let lost = with_ready(node("True", AGENT_READY), &Verdict::Lost, grace);
        let conds = lost["status"]["conditions"].as_array().cloned().unwrap_or_default();
        assert_eq!(conds.len(), 2);
        assert_eq!(conds[0]["type"], "MemoryPressure");
        assert_eq!((conds[1]["status"].as_str(), conds[1]["reason"].as_str()), (Some("Unknown"), Some(STATUS_UNKNOWN)));
        assert!(conds[1]["message"].as_str().is_some_and(|m| m.contains("40 s")), "{lost}");
        let back = with_ready(lost, &Verdict::Back, grace);
        assert_eq!(back["status"]["conditions"][1]["status"], "True");
        assert_eq!(back["status"]["conditions"][1]["reason"], AGENT_READY);
    }

    #[test]
    fn watches_are_counted_until_the_last_one_closes() {
        let p = Arc::new(Presence::default());
        let now = Instant::now();
        assert!(p.absent_for("n1", now).is_some(), "never seen: away since the start");
        let a = p.open("n1", 2).unwrap();
        let b = p.open("n1", 2).unwrap();
        assert!(p.open("n1", 2).is_none(), "two at most");
        assert_eq!(p.absent_for("n1", Instant::now()), None);
        drop(a);
        assert_eq!(p.absent_for("n1", Instant::now()), None, "one still open");
        drop(b);
        assert!(p.absent_for("n1", Instant::now()).is_some());
    }

    #[test]
    fn a_request_restarts_the_clock_of_an_agent_without_a_watch() {
        let p = Arc::new(Presence::default());
        let later = Instant::now() + Duration::from_secs(60);
        assert!(p.absent_for("n1", later).is_some_and(|d| d >= Duration::from_secs(60)), "never seen");
        p.heard_from("n1");
        let away = p.absent_for("n1", later).unwrap_or_default();
        assert!(away < Duration::from_secs(61) && away > Duration::from_secs(59), "{away:?}");
        let just_now = p.absent_for("n1", Instant::now()).unwrap_or(Duration::MAX);
        assert!(just_now < Duration::from_secs(5), "heard from just now: {just_now:?}");
        let open = p.open("n1", 1).unwrap();
        p.heard_from("n1");
        assert_eq!(p.absent_for("n1", later), None, "a request does not close an open watch");
        drop(open);
    }
}
