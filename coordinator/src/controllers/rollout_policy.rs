//! The pool's rollout policy (`spec.rollout`: canary batch, soak time, circuit breaker) as a
//! state machine over the stored `status.rollout` record. Pure: the same stored pool, nodes and
//! clock give the same answer, so a restarted coordinator continues where the last one stopped
//! (the soak counts from `soakStartTime`, a tripped breaker stays tripped until resumed, a new
//! config, or every member updated on the config).
//!
//! Why a controller-owned record and not `spec.paused`: the spec belongs to the user. A breaker
//! that rewrote it could not tell its own pause from the user's, and a `kubectl apply` of the
//! user's manifest would silently undo it. The record names the config it is about, so a new
//! rendered config starts afresh; `aloft.dev/resumeRollout` (any new value) closes the breaker.

use super::config_name::ConfigName;
use super::pools::NodeHot;
use aloft_api::{RolloutPhase, RolloutPolicy, RolloutStatus};
use chrono::{DateTime, Utc};

/// What the policy allows the node controller to do for the pool now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Gate {
    /// Pick nodes, at most `limit` more (None: as many as maxUnavailable allows).
    Pick { limit: Option<usize> },
    /// Pick nothing, because of this.
    Hold(HoldReason),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HoldReason {
    /// The canary nodes are picked and have not all finished.
    Canary {
        canaries: usize,
    },
    /// The canaries are finished; nothing is picked `until` then (None: a soak that ends past
    /// the last representable time, which never ends). `failed`: the nodes that failed on the
    /// config, within `maxFailures` or forgiven by a resume (a soak after a failed canary must not
    /// read as a proven one).
    Soaking {
        until: Option<DateTime<Utc>>,
        failed: Vec<String>,
    },
    CircuitBroken {
        failed: Vec<String>,
        max_failures: usize,
    },
}

/// The policy's answer and the record to store.
#[derive(Debug, Clone, PartialEq)]
pub struct Evaluation {
    pub gate: Gate,
    pub status: RolloutStatus,
}

fn parse_time(s: &str) -> Option<DateTime<Utc>> {
    DateTime::parse_from_rfc3339(s).ok().map(|t| t.with_timezone(&Utc))
}

/// To the millisecond (as a MicroTime is written): a start cut to the second ended every soak
/// up to a second early.
fn rfc3339(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

/// When a soak of `seconds` from `start` ends; None when that is past the last time chrono can
/// represent. `soakSeconds` is the user's and may be any i64 (or stored before admission bounded
/// it): the sum must never panic the controller, and such a soak never ends.
fn soak_end(start: DateTime<Utc>, seconds: i64) -> Option<DateTime<Utc>> {
    chrono::Duration::try_seconds(seconds).and_then(|d| start.checked_add_signed(d))
}

/// A pool's members as the policy reads them: indexes into the fleet's facts, and the name of
/// a node by its index. Names are asked for only for failing nodes: a 10,000-node pool is
/// evaluated on every pass, and collecting every member's name loaded every Node of the fleet.
pub struct Members<'a> {
    pub index: &'a [usize],
    /// The packed facts of the fleet (see [`NodeHot`]).
    pub hot: &'a [NodeHot],
    pub name: &'a dyn Fn(usize) -> &'a str,
}

impl Members<'_> {
    fn iter(&self) -> impl Iterator<Item = &NodeHot> + '_ {
        self.index.iter().map(|&i| &self.hot[i])
    }
}

/// Where a rollout goes on once its breaker closes (a resume, or the breaker turned off): the
/// soak it was in, else its canaries, else batches.
fn reopened(st: &RolloutStatus, canary: usize) -> RolloutPhase {
    if st.soak_start_time.is_some() {
        RolloutPhase::Soaking
    } else if canary > 0 {
        RolloutPhase::Canary
    } else {
        RolloutPhase::Batches
    }
}

/// Evaluate the policy for `target` over the pool's members; `resume` is the pool's
/// `aloft.dev/resumeRollout` annotation, `completed` its `status.configuration` (the last config
/// every member ran).
pub fn evaluate(
    policy: Option<&RolloutPolicy>,
    previous: Option<&RolloutStatus>,
    resume: Option<&str>,
    completed: Option<&str>,
    target: &ConfigName,
    members: &Members<'_>,
    now: DateTime<Utc>,
) -> Evaluation {
    let canary = policy.and_then(|p| p.canary).unwrap_or(0).max(0) as usize;
    let soak = policy.and_then(|p| p.soak_seconds).unwrap_or(0).max(0);
    let max_failures = policy.and_then(|p| p.max_failures).filter(|k| *k >= 0).map(|k| k as usize);
    let mut st = match previous {
        Some(p) if *target == *p.config => p.clone(),
        _ => RolloutStatus {
            config: target.to_string(),
            // A config the pool completed (the config it ran before a bad one, when the bad one
            // is reverted) is proven: soaking it again would only keep the nodes that failed on
            // the bad one out of service. Only completed: a config some members run may be one
            // whose soak a newer config cut short (reverted to, it would skip the rest of its
            // soak), or the pool was made again mid-rollout; such a config goes through its
            // canaries (the members that run it count) and its whole soak again. And completed
            // by members that run it: an empty pool "completes" every config it renders, and
            // the nodes labelled into it next are that config's rollout, canaries included.
            phase: if canary > 0 && !(completed == Some(&**target) && members.iter().any(|f| f.runs(target))) {
                RolloutPhase::Canary
            } else {
                RolloutPhase::Batches
            },
            // Keep the last honoured resume value: it must not resume the next config's breaker.
            resume_token: previous.map(|p| p.resume_token.clone()).unwrap_or_default(),
            ..Default::default()
        },
    };
    // The failed nodes are those failing on this config now (as MCO counts degraded machines),
    // remembered while they retry (a flapping node must not reset the count) and forgotten once
    // Done on it and not stuck in a drain (a node whose uncordon is past the drain timeout
    // reported Done before it, and has failed). A failure whose report names another config (one
    // the node was asked for before this one, its agent has not reported on this one yet) does
    // not count: a new config starts afresh (see `NodeFacts::failing_on_desired`).
    for &i in members.index {
        let f = &members.hot[i];
        if f.failing_on_desired() && f.desires(target) {
            let name = (members.name)(i);
            if !st.failed_nodes.iter().any(|n| n == name) {
                st.failed_nodes.push(name.to_string());
            }
        }
    }
    if !st.failed_nodes.is_empty() {
        // A failed node that left the pool is not failing in it: the breaker's message named
        // it as "failing now" (its record keeps it out of the count until it comes back).
        let names: std::collections::HashSet<&str> = members.index.iter().map(|&i| (members.name)(i)).collect();
        st.failed_nodes.retain(|n| names.contains(n.as_str()));
        for &i in members.index {
            if members.hot[i].updated_to(target) && !members.hot[i].drain_failed() {
                let name = (members.name)(i);
                st.failed_nodes.retain(|n| n != name);
            }
        }
    }
    st.failed_nodes.sort();
    // Every member is updated on the config: the rollout is over and nothing is left for the
    // breaker to stop, so it closes. Held open, it would show a finished pool as stopped and
    // hold back a node that joins later, for a config every other node runs (an empty pool is
    // not finished: there is no node that proves the config, and the nodes labelled into it
    // next are its rollout, canary and breaker included).
    if !members.index.is_empty() && members.iter().all(|f| f.updated_to(target) && !f.drain_failed()) {
        st.phase = RolloutPhase::Complete;
    }
    if st.phase == RolloutPhase::Complete {
        // Over: a node failing on the config since (drift found on it, a node that joined) is a
        // degraded node, not a rollout to stop; counting it re-opened the breaker over a
        // finished pool.
        st.failed_nodes.clear();
        // A resume asked for now has nothing to resume; taken as seen, so that it does not
        // resume a later config's breaker the moment that one trips (`rollout resume` sent
        // just as the rollout finished, or the annotation set by hand).
        if let Some(token) = resume.filter(|t| !t.is_empty()) {
            st.resume_token = token.to_string();
        }
        return Evaluation { gate: Gate::Pick { limit: None }, status: st };
    }
    if let Some(token) = resume.filter(|t| !t.is_empty() && *t != st.resume_token) {
        st.resume_token = token.to_string();
        let mut forgiven = st.forgiven_nodes.clone();
        forgiven.extend(st.failed_nodes.iter().cloned());
        forgiven.sort();
        forgiven.dedup();
        st.forgiven_nodes = forgiven;
        if st.phase == RolloutPhase::CircuitBroken {
            st.phase = reopened(&st, canary);
        }
    }
    if let Some(k) = max_failures {
        let counted: Vec<String> = st.failed_nodes.iter().filter(|n| !st.forgiven_nodes.contains(n)).cloned().collect();
        if counted.len() > k {
            st.phase = RolloutPhase::CircuitBroken;
        }
        if st.phase == RolloutPhase::CircuitBroken {
            return Evaluation {
                gate: Gate::Hold(HoldReason::CircuitBroken { failed: counted, max_failures: k }),
                status: st,
            };
        }
    }
    if st.phase == RolloutPhase::CircuitBroken {
        // The breaker was turned off (maxFailures removed) while tripped: carry on where a
        // resume would, so a canary that tripped it still soaks.
        st.phase = reopened(&st, canary);
    }
    if st.phase == RolloutPhase::Canary && canary == 0 {
        // The canary turned off mid-canary: batches, as for a config that started without one
        // (it waited for "the 0 canary node(s)", then soaked).
        st.phase = RolloutPhase::Batches;
    }
    if st.phase == RolloutPhase::Canary {
        // The canaries are finished when updated, or failed within maxFailures (or forgiven by
        // a resume): a failed canary the breaker tolerates must not hold the rollout forever.
        // The soak starts only when no node that took the config is still on its way: a canary
        // is updated once it is back in service (its uncordon hooks done), so that the soak
        // watches it serving.
        let wanted = canary.min(members.index.len());
        let updated = members.iter().filter(|f| f.in_service_on(target)).count();
        let failed = st.failed_nodes.len();
        let picked = members.iter().filter(|f| f.desires(target)).count();
        let on_the_way = picked.saturating_sub(updated + failed);
        if updated + failed < wanted || on_the_way > 0 {
            let limit = wanted.saturating_sub(picked);
            let gate = if limit == 0 {
                Gate::Hold(HoldReason::Canary { canaries: wanted })
            } else {
                Gate::Pick { limit: Some(limit) }
            };
            return Evaluation { gate, status: st };
        }
        let nothing_left = members.iter().all(|f| f.desires(target));
        if soak > 0 && !nothing_left {
            st.phase = RolloutPhase::Soaking;
            st.soak_start_time = Some(rfc3339(now));
        } else {
            st.phase = RolloutPhase::Batches;
        }
    }
    if st.phase == RolloutPhase::Soaking {
        // An unreadable start time soaks from now: waiting longer is the safe side.
        let start = st.soak_start_time.as_deref().and_then(parse_time).unwrap_or(now);
        if st.soak_start_time.as_deref().and_then(parse_time).is_none() {
            st.soak_start_time = Some(rfc3339(now));
        }
        let until = soak_end(start, soak);
        if until.is_none_or(|u| now < u) {
            let failed = st.failed_nodes.clone();
            return Evaluation { gate: Gate::Hold(HoldReason::Soaking { until, failed }), status: st };
        }
        st.phase = RolloutPhase::Batches;
    }
    Evaluation { gate: Gate::Pick { limit: None }, status: st }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controllers::pick::Wait;
    use crate::controllers::pools::NodeFacts;

    fn facts(desired: &str, current: &str, state: &str) -> NodeFacts {
        NodeFacts {
            current: current.into(),
            desired: desired.into(),
            state: state.into(),
            reason: String::new(),
            ready: true,
            drain_failure: String::new(),
            ..Default::default()
        }
    }

    fn eval(
        policy: Option<&RolloutPolicy>,
        previous: Option<&RolloutStatus>,
        resume: Option<&str>,
        target: &ConfigName,
        names: &[&str],
        facts: &[NodeFacts],
        now: DateTime<Utc>,
    ) -> Evaluation {
        eval_completed(policy, previous, resume, None, target, names, facts, now)
    }

    /// [`eval`] for a pool whose `status.configuration` is `completed`.
    #[allow(clippy::too_many_arguments)]
    fn eval_completed(
        policy: Option<&RolloutPolicy>,
        previous: Option<&RolloutStatus>,
        resume: Option<&str>,
        completed: Option<&str>,
        target: &ConfigName,
        names: &[&str],
        facts: &[NodeFacts],
        now: DateTime<Utc>,
    ) -> Evaluation {
        let index: Vec<usize> = (0..facts.len()).collect();
        let hot: Vec<NodeHot> = facts.iter().map(NodeHot::of).collect();
        let name = |i: usize| names[i];
        evaluate(policy, previous, resume, completed, target, &Members { index: &index, hot: &hot, name: &name }, now)
    }

    fn policy(canary: i64, soak: i64, max_failures: Option<i64>) -> RolloutPolicy {
        RolloutPolicy { canary: Some(canary), soak_seconds: Some(soak), max_failures, ..Default::default() }
    }

    fn t(s: &str) -> DateTime<Utc> {
        parse_time(s).unwrap()
    }

    #[test]
    fn canary_then_soak_then_batches() {
        let names = ["a", "b", "c"];
        let p = policy(1, 600, None);
        let old: Vec<NodeFacts> = (0..3).map(|_| facts("r1", "r1", "Done")).collect();
        let e = eval(Some(&p), None, None, &ConfigName::new("r2"), &names, &old, t("2026-01-01T00:00:00Z"));
        assert_eq!(e.gate, Gate::Pick { limit: Some(1) });
        assert_eq!(e.status.phase, RolloutPhase::Canary);

        let mut f = old.clone();
        f[0] = facts("r2", "r1", "Working");
        let e = eval(Some(&p), Some(&e.status), None, &ConfigName::new("r2"), &names, &f, t("2026-01-01T00:01:00Z"));
        assert_eq!(e.gate, Gate::Hold(HoldReason::Canary { canaries: 1 }));

        f[0] = facts("r2", "r2", "Done");
        let e = eval(Some(&p), Some(&e.status), None, &ConfigName::new("r2"), &names, &f, t("2026-01-01T00:02:00Z"));
        assert_eq!(e.gate, Gate::Hold(HoldReason::Soaking { until: Some(t("2026-01-01T00:12:00Z")), failed: vec![] }));
        assert_eq!(e.status.soak_start_time.as_deref(), Some("2026-01-01T00:02:00.000Z"));

        // A restart re-evaluates from the stored record: same deadline.
        let e = eval(Some(&p), Some(&e.status), None, &ConfigName::new("r2"), &names, &f, t("2026-01-01T00:11:59Z"));
        assert!(matches!(e.gate, Gate::Hold(HoldReason::Soaking { .. })));
        let e = eval(Some(&p), Some(&e.status), None, &ConfigName::new("r2"), &names, &f, t("2026-01-01T00:12:00Z"));
        assert_eq!(e.gate, Gate::Pick { limit: None });
        assert_eq!(e.status.phase, RolloutPhase::Batches);

        // A new config starts over.
        let e = eval(Some(&p), Some(&e.status), None, &ConfigName::new("r3"), &names, &f, t("2026-01-01T00:13:00Z"));
        assert_eq!(e.status.phase, RolloutPhase::Canary);
        assert_eq!(e.status.config, "r3");
    }

    /// Changes made mid-rollout, as the audit made them: a finished rollout's config failing on
    /// a node later (drift) does not re-open the breaker; maxFailures removed from a breaker a
    /// canary tripped goes back to the canary, not past the soak; canary 0 mid-canary is batches.
    #[test]
    fn a_finished_rollout_a_removed_breaker_and_a_canary_turned_off() {
        let names = ["a", "b"];
        let r2 = ConfigName::new("r2");
        let now = t("2026-01-01T00:00:00Z");
        // A rollout that finished (every node Done on r2) is over: a node found drifted on r2
        // later is degraded, and the breaker stays closed.
        let p = policy(0, 0, Some(0));
        let updated = vec![facts("r2", "r2", "Done"), facts("r2", "r2", "Done")];
        let done = eval(Some(&p), None, None, &r2, &names, &updated, now);
        assert_eq!(done.status.phase, RolloutPhase::Complete);
        let drifted = vec![facts("r2", "r2", "Degraded"), facts("r2", "r2", "Done")];
        let later = eval(Some(&p), Some(&done.status), None, &r2, &names, &drifted, now);
        assert_eq!((later.status.phase, later.gate), (RolloutPhase::Complete, Gate::Pick { limit: None }));
        assert!(later.status.failed_nodes.is_empty(), "{:?}", later.status);
        // Not finished when the pool had no node (it just rendered): nodes labelled into it next
        // are its rollout, and their failures trip the breaker.
        let empty = eval(Some(&p), None, None, &r2, &[], &[], now);
        assert_ne!(empty.status.phase, RolloutPhase::Complete);
        let moved = vec![facts("r2", "r1", "Degraded"), facts("r1", "r1", "Done")];
        let e = eval(Some(&p), Some(&empty.status), None, &r2, &names, &moved, now);
        assert!(matches!(e.gate, Gate::Hold(HoldReason::CircuitBroken { .. })), "{:?}", e.gate);

        // A canary trips the breaker, then maxFailures is removed: back to the canary phase, whose
        // failed canary is finished, so the config soaks (it went straight to batches).
        let p = policy(1, 600, Some(0));
        let f = vec![facts("r2", "r1", "Degraded"), facts("r1", "r1", "Done")];
        let e = eval(Some(&p), None, None, &r2, &names, &f, now);
        assert_eq!(e.status.phase, RolloutPhase::CircuitBroken);
        let e = eval(Some(&policy(1, 600, None)), Some(&e.status), None, &r2, &names, &f, now);
        assert_eq!(e.status.phase, RolloutPhase::Soaking, "{:?}", e.gate);

        // Canary turned off while the canary updates: batches, no soak.
        let f = vec![facts("r2", "r1", "Working"), facts("r1", "r1", "Done")];
        let e = eval(Some(&policy(1, 600, None)), None, None, &r2, &names, &f, now);
        assert_eq!(e.status.phase, RolloutPhase::Canary);
        let e = eval(Some(&policy(0, 600, None)), Some(&e.status), None, &r2, &names, &f, now);
        assert_eq!((e.status.phase, e.gate), (RolloutPhase::Batches, Gate::Pick { limit: None }));
    }

    #[test]
    fn circuit_breaker_trips_sticks_and_resumes() {
        let names = ["a", "b", "c", "d"];
        let p = policy(0, 0, Some(1));
        let mut f: Vec<NodeFacts> = (0..4).map(|_| facts("r1", "r1", "Done")).collect();
        f[0] = facts("r2", "r1", "Degraded");
        let now = t("2026-01-01T00:00:00Z");
        let e = eval(Some(&p), None, None, &ConfigName::new("r2"), &names, &f, now);
        assert_eq!(e.gate, Gate::Pick { limit: None }, "one failure is not more than maxFailures=1");
        f[1] = facts("r2", "r1", "Unreconcilable");
        let e = eval(Some(&p), Some(&e.status), None, &ConfigName::new("r2"), &names, &f, now);
        assert_eq!(
            e.gate,
            Gate::Hold(HoldReason::CircuitBroken { failed: vec!["a".into(), "b".into()], max_failures: 1 })
        );
        // Resumed once per new token: the failures so far are forgiven.
        let e2 = eval(Some(&p), Some(&e.status), Some("t0"), &ConfigName::new("r2"), &names, &f, now);
        assert_eq!(e2.gate, Gate::Pick { limit: None });
        assert_eq!(e2.status.forgiven_nodes, vec!["a".to_string(), "b".to_string()]);
        // The nodes recover: they are no longer failed nodes, and the breaker stays open.
        f[0] = facts("r2", "r2", "Done");
        f[1] = facts("r2", "r2", "Done");
        let e = eval(Some(&p), Some(&e.status), None, &ConfigName::new("r2"), &names, &f, now);
        assert_eq!(e.gate, Gate::Hold(HoldReason::CircuitBroken { failed: vec![], max_failures: 1 }));
        assert!(e.status.failed_nodes.is_empty());
        let e = eval(Some(&p), Some(&e.status), Some("t1"), &ConfigName::new("r2"), &names, &f, now);
        assert_eq!(e.gate, Gate::Pick { limit: None });
        f[2] = facts("r2", "r1", "Degraded");
        f[3] = facts("r2", "r1", "Degraded");
        let e = eval(Some(&p), Some(&e.status), Some("t1"), &ConfigName::new("r2"), &names, &f, now);
        assert!(matches!(e.gate, Gate::Hold(HoldReason::CircuitBroken { ref failed, .. }) if failed == &["c", "d"]));
        // A new config closes it.
        let e = eval(Some(&p), Some(&e.status), Some("t1"), &ConfigName::new("r3"), &names, &f, now);
        assert_eq!(e.gate, Gate::Pick { limit: None });
    }

    /// A resume that arrives when the rollout is over is taken as seen: the next config's
    /// breaker, once tripped, stays open (it was resumed at once by the stale annotation).
    #[test]
    fn a_resume_after_the_rollout_finished_does_not_resume_the_next_trip() {
        let names = ["a", "b"];
        let p = policy(0, 0, Some(0));
        let now = t("2026-01-01T00:00:00Z");
        let done: Vec<NodeFacts> = (0..2).map(|_| facts("r2", "r2", "Done")).collect();
        let e = eval(Some(&p), None, Some("late"), &ConfigName::new("r2"), &names, &done, now);
        assert_eq!(e.status.phase, RolloutPhase::Complete);
        assert_eq!(e.status.resume_token, "late");
        let mut f = done.clone();
        f[0] = facts("r3", "r2", "Degraded");
        let e = eval(Some(&p), Some(&e.status), Some("late"), &ConfigName::new("r3"), &names, &f, now);
        assert!(matches!(e.gate, Gate::Hold(HoldReason::CircuitBroken { .. })), "{:?}", e.gate);
        // A new resume does.
        let e = eval(Some(&p), Some(&e.status), Some("now"), &ConfigName::new("r3"), &names, &f, now);
        assert_eq!(e.gate, Gate::Pick { limit: None });
    }

    /// A canary that fails within maxFailures is a finished canary: the rollout goes on to the
    /// soak (it held "waiting for the canary to finish updating" forever); with the breaker
    /// tripped by it, a resume forgives it and the rollout goes on too.
    #[test]
    fn a_failed_canary_the_breaker_tolerates_or_a_resume_forgives_ends_the_canary_phase() {
        let names = ["a", "b", "c"];
        let now = t("2026-01-01T00:00:00Z");
        let mut f: Vec<NodeFacts> = (0..3).map(|_| facts("r1", "r1", "Done")).collect();
        f[0] = facts("r2", "r1", "Degraded");
        let tolerant = policy(1, 60, Some(1));
        let canary = RolloutStatus { config: "r2".into(), phase: RolloutPhase::Canary, ..Default::default() };
        let e = eval(Some(&tolerant), Some(&canary), None, &ConfigName::new("r2"), &names, &f, now);
        assert_eq!(e.status.failed_nodes, vec!["a".to_string()]);
        assert_eq!(e.status.phase, RolloutPhase::Soaking, "{e:?}");
        assert!(matches!(e.gate, Gate::Hold(HoldReason::Soaking { .. })));
        let e =
            eval(Some(&tolerant), Some(&e.status), None, &ConfigName::new("r2"), &names, &f, t("2026-01-01T00:01:01Z"));
        assert_eq!(e.gate, Gate::Pick { limit: None }, "after the soak, batches");

        let strict = policy(1, 0, Some(0));
        let e = eval(Some(&strict), Some(&canary), None, &ConfigName::new("r2"), &names, &f, now);
        assert!(matches!(e.gate, Gate::Hold(HoldReason::CircuitBroken { .. })));
        let e = eval(Some(&strict), Some(&e.status), Some("resume-1"), &ConfigName::new("r2"), &names, &f, now);
        assert_eq!(e.status.forgiven_nodes, vec!["a".to_string()]);
        assert_eq!(e.gate, Gate::Pick { limit: None }, "resumed: the forgiven canary is finished: {e:?}");
    }

    /// The soak starts only when no node that took the config in the canary phase is still on
    /// its way (one canary Done while another still updates held the rest back too briefly).
    #[test]
    fn the_soak_waits_for_every_node_that_took_the_config() {
        let names = ["a", "b", "c", "d"];
        let now = t("2026-01-01T00:00:00Z");
        let mut f: Vec<NodeFacts> = (0..4).map(|_| facts("r1", "r1", "Done")).collect();
        f[0] = facts("r2", "r2", "Done");
        f[1] = facts("r2", "r1", "Working");
        let canary = RolloutStatus { config: "r2".into(), phase: RolloutPhase::Canary, ..Default::default() };
        let e = eval(Some(&policy(1, 60, None)), Some(&canary), None, &ConfigName::new("r2"), &names, &f, now);
        assert_eq!(e.gate, Gate::Hold(HoldReason::Canary { canaries: 1 }), "{e:?}");
        f[1] = facts("r2", "r2", "Done");
        let e = eval(Some(&policy(1, 60, None)), Some(&e.status), None, &ConfigName::new("r2"), &names, &f, now);
        assert_eq!(e.status.phase, RolloutPhase::Soaking);
    }

    /// A canary is proven once back in service, not at its Done report (which comes before its
    /// uncordon): cordoned while its uncordon hooks run, the soak has not started; past the
    /// drain timeout on its uncordon, it has failed, and the breaker counts it (it tripped on
    /// nothing: the node was Done, so its failure was forgotten on the pass that counted it).
    #[test]
    fn a_canary_counts_once_back_in_service_and_a_stuck_uncordon_is_a_failure() {
        let names = ["a", "b", "c"];
        let now = t("2026-01-01T00:00:00Z");
        let target = ConfigName::new("r2");
        let mut f: Vec<NodeFacts> = (0..3).map(|_| facts("r1", "r1", "Done")).collect();
        let canary = RolloutStatus { config: "r2".into(), phase: RolloutPhase::Canary, ..Default::default() };
        // Done, still cordoned: its uncordon hooks have not succeeded yet.
        f[0] = NodeFacts { cordoned: true, ready: false, ..facts("r2", "r2", "Done") };
        let e = eval(Some(&policy(1, 60, Some(0))), Some(&canary), None, &target, &names, &f, now);
        assert_eq!(e.gate, Gate::Hold(HoldReason::Canary { canaries: 1 }), "{e:?}");
        assert_eq!(e.status.phase, RolloutPhase::Canary);
        // Its uncordon is past the drain timeout: a failure, and the breaker (maxFailures 0) trips.
        f[0].drain_failure = "failed to uncordon node: a after 10 seconds: hook answered HTTP 500".into();
        let e = eval(Some(&policy(1, 60, Some(0))), Some(&e.status), None, &target, &names, &f, now);
        assert_eq!(e.status.failed_nodes, vec!["a".to_string()]);
        assert_eq!(
            e.gate,
            Gate::Hold(HoldReason::CircuitBroken { failed: vec!["a".into()], max_failures: 0 }),
            "{e:?}"
        );
        // Within maxFailures the canary phase ends, and the soak says the canary failed.
        let e = eval(Some(&policy(1, 60, Some(1))), Some(&canary), None, &target, &names, &f, now);
        let want = Gate::Hold(HoldReason::Soaking { until: Some(t("2026-01-01T00:01:00Z")), failed: vec!["a".into()] });
        assert_eq!(e.gate, want, "{e:?}");
        assert_eq!(
            Wait::Policy(HoldReason::Soaking { until: Some(t("2026-01-01T00:01:00Z")), failed: vec!["a".into()] })
                .to_string(),
            "canary nodes are finished, 1 of them failed (a); soaking until 2026-01-01T00:01:00Z"
        );
        // Back in service: the failure is forgotten, and the soak is a proven canary's.
        f[0] = facts("r2", "r2", "Done");
        let e = eval(Some(&policy(1, 60, Some(0))), Some(&canary), None, &target, &names, &f, now);
        assert!(e.status.failed_nodes.is_empty(), "{e:?}");
        assert_eq!(e.gate, Gate::Hold(HoldReason::Soaking { until: Some(t("2026-01-01T00:01:00Z")), failed: vec![] }));
    }

    /// A config the pool completed when it becomes the target again (the config before a bad
    /// one, reverted) is proven: no canary and no soak, so the nodes that failed on the bad one
    /// are moved back at once.
    #[test]
    fn a_reverted_config_the_pool_completed_is_not_soaked_again() {
        let names = ["a", "b", "c"];
        let mut f: Vec<NodeFacts> = (0..3).map(|_| facts("r1", "r1", "Done")).collect();
        f[0] = facts("r2", "r1", "Degraded");
        let bad = RolloutStatus { config: "r2".into(), phase: RolloutPhase::CircuitBroken, ..Default::default() };
        let p = policy(1, 600, Some(0));
        let eval =
            |p: Option<&RolloutPolicy>,
             prev: Option<&RolloutStatus>,
             resume: Option<&str>,
             target: &ConfigName,
             names: &[&str],
             f: &[NodeFacts],
             now: DateTime<Utc>| eval_completed(p, prev, resume, Some("r1"), target, names, f, now);
        let e = eval(Some(&p), Some(&bad), None, &ConfigName::new("r1"), &names, &f, t("2026-01-01T00:00:00Z"));
        assert_eq!(e.status.phase, RolloutPhase::Batches, "{e:?}");
        assert_eq!(e.gate, Gate::Pick { limit: None });
        // A new config nobody runs yet still starts with its canary.
        let e = eval(Some(&p), Some(&e.status), None, &ConfigName::new("r3"), &names, &f, t("2026-01-01T00:00:00Z"));
        assert_eq!(e.gate, Gate::Pick { limit: Some(1) });
        // Reverted after the bad config reached most of the pool: the members still running r1
        // are all asked for r2 (one failed on it), none is "updated to" r1, and r1 is proven.
        let f = vec![facts("r2", "r2", "Done"), facts("r2", "r2", "Done"), facts("r2", "r1", "Degraded")];
        let bad = RolloutStatus { config: "r2".into(), phase: RolloutPhase::Batches, ..Default::default() };
        let e = eval(Some(&p), Some(&bad), None, &ConfigName::new("r1"), &names, &f, t("2026-01-01T00:00:00Z"));
        assert_eq!(e.status.phase, RolloutPhase::Batches, "{e:?}");
        assert_eq!(e.gate, Gate::Pick { limit: None });
        // Completed is what proves it, whatever the canary batch and however few run it now.
        let p3 = policy(3, 600, None);
        let e = eval(Some(&p3), Some(&bad), None, &ConfigName::new("r1"), &names, &f, t("2026-01-01T00:00:00Z"));
        assert_eq!(e.status.phase, RolloutPhase::Batches, "{e:?}");
        // Not completed (the pool's last complete config is another): canaried as any config.
        let e = eval_completed(
            Some(&p3),
            Some(&bad),
            None,
            Some("r0"),
            &ConfigName::new("r1"),
            &names,
            &f,
            t("2026-01-01T00:00:00Z"),
        );
        assert_eq!(e.status.phase, RolloutPhase::Canary, "{e:?}");
    }

    /// A config that some members run but the pool never completed (its soak cut short by a
    /// newer config, now reverted; or the pool made again mid-soak) is not proven: it goes
    /// through its canaries and soaks in full, rather than going on in batches at once.
    #[test]
    fn a_config_reverted_to_in_the_middle_of_its_soak_soaks_again() {
        let names = ["a", "b", "c", "d"];
        let now = t("2026-01-01T00:00:09Z");
        let p = policy(1, 3600, Some(0));
        // r1 completed; a ran r2 as its canary (soaking), then was r3's canary and failed on it.
        let mut f: Vec<NodeFacts> = (0..4).map(|_| facts("r1", "r1", "Done")).collect();
        f[0] = NodeFacts { failed_config: "r3".into(), ..facts("r3", "r2", "Degraded") };
        let bad = RolloutStatus { config: "r3".into(), phase: RolloutPhase::CircuitBroken, ..Default::default() };
        let e = eval_completed(Some(&p), Some(&bad), None, Some("r1"), &ConfigName::new("r2"), &names, &f, now);
        assert_eq!(e.status.phase, RolloutPhase::Canary, "{e:?}");
        assert_eq!(e.gate, Gate::Pick { limit: Some(1) }, "one canary, not every node at once");
        // An empty pool "completed" r2 when it rendered it; nodes labelled into it since do not
        // run it: they are its canaries.
        let fresh: Vec<NodeFacts> = (0..4).map(|_| facts("", "", "")).collect();
        let e = eval_completed(Some(&p), None, None, Some("r2"), &ConfigName::new("r2"), &names, &fresh, now);
        assert_eq!(e.status.phase, RolloutPhase::Canary, "{e:?}");
        // The pool made again mid-soak: no status at all, and a runs r2.
        let f: Vec<NodeFacts> = vec![
            facts("r2", "r2", "Done"),
            facts("r1", "r1", "Done"),
            facts("r1", "r1", "Done"),
            facts("r1", "r1", "Done"),
        ];
        let e = eval_completed(Some(&p), None, None, None, &ConfigName::new("r2"), &names, &f, now);
        assert_eq!(e.status.phase, RolloutPhase::Soaking, "its canary runs it: the soak starts, in full: {e:?}");
        assert_eq!(e.gate, Gate::Hold(HoldReason::Soaking { until: Some(t("2026-01-01T01:00:09Z")), failed: vec![] }));
    }

    #[test]
    fn a_soak_past_the_end_of_time_never_ends_and_never_panics() {
        let names = ["a", "b"];
        let mut f: Vec<NodeFacts> = (0..2).map(|_| facts("r1", "r1", "Done")).collect();
        f[0] = facts("r2", "r2", "Done");
        let now = t("2026-01-01T00:00:00Z");
        // a was r2's canary (a record from before: a config already run by a canary's worth of
        // nodes when it becomes the target is proven and not soaked).
        let canary = RolloutStatus { config: "r2".into(), phase: RolloutPhase::Canary, ..Default::default() };
        for soak in [i64::MAX, 10_000_000_000_000, 9_223_372_036_854_775, i64::MIN] {
            let p = policy(1, soak, None);
            let e = eval(Some(&p), Some(&canary), None, &ConfigName::new("r2"), &names, &f, now);
            if soak < 0 {
                assert_eq!(e.gate, Gate::Pick { limit: None }, "a negative soak is no soak");
                continue;
            }
            assert_eq!(e.gate, Gate::Hold(HoldReason::Soaking { until: None, failed: vec![] }), "soakSeconds {soak}");
            // Much later, and from a stored start at the edge of the representable range.
            let mut st = e.status.clone();
            let e = eval(Some(&p), Some(&st), None, &ConfigName::new("r2"), &names, &f, t("9999-01-01T00:00:00Z"));
            assert_eq!(e.gate, Gate::Hold(HoldReason::Soaking { until: None, failed: vec![] }), "soakSeconds {soak}");
            st.soak_start_time = Some("9999-12-31T23:59:59Z".into());
            let e = eval(Some(&p), Some(&st), None, &ConfigName::new("r2"), &names, &f, now);
            assert!(matches!(e.gate, Gate::Hold(HoldReason::Soaking { .. })), "soakSeconds {soak}");
        }
        // A long soak that fits ends when it says.
        let p = policy(1, 86_400 * 365 * 1000, None);
        let e = eval(Some(&p), Some(&canary), None, &ConfigName::new("r2"), &names, &f, now);
        assert_eq!(e.gate, Gate::Hold(HoldReason::Soaking { until: Some(t("3025-05-04T00:00:00Z")), failed: vec![] }));
    }

    /// Config A breaks the rollout; the fix B starts afresh although the node that failed on A
    /// is retargeted to B first and still says Degraded (its report names A) until its agent
    /// reports on B; the very same failure reported on B counts for B; and a node that fails on a
    /// config and then reaches Done there no longer counts.
    #[test]
    fn a_failure_counts_only_on_the_config_it_is_about() {
        let names = ["a", "b", "c", "d"];
        let failed_on = |c: &str, f: NodeFacts| NodeFacts { failed_config: c.into(), reason: "boom".into(), ..f };
        let now = t("2026-01-01T00:00:00Z");
        for (p, broken_on_a) in [(policy(0, 0, Some(0)), vec!["a"]), (policy(2, 0, Some(1)), vec!["a", "b"])] {
            let mut f: Vec<NodeFacts> = (0..4).map(|_| facts("r0", "r0", "Done")).collect();
            for x in f.iter_mut().take(broken_on_a.len()) {
                *x = failed_on("rA", facts("rA", "r0", "Degraded"));
            }
            let e = eval(Some(&p), None, None, &ConfigName::new("rA"), &names, &f, now);
            assert!(matches!(e.gate, Gate::Hold(HoldReason::CircuitBroken { .. })), "{p:?}: {e:?}");
            assert_eq!(e.status.failed_nodes, broken_on_a);
            // The fix: the failed nodes are picked for rB first; their state is still A's.
            let e = eval(Some(&p), Some(&e.status), None, &ConfigName::new("rB"), &names, &f, now);
            assert!(matches!(e.gate, Gate::Pick { .. }), "{p:?}: {e:?}");
            for x in f.iter_mut().take(broken_on_a.len()) {
                *x = failed_on("rA", facts("rB", "r0", "Degraded"));
            }
            let e = eval(Some(&p), Some(&e.status), None, &ConfigName::new("rB"), &names, &f, now);
            assert!(!matches!(e.gate, Gate::Hold(HoldReason::CircuitBroken { .. })), "{p:?}: {e:?}");
            assert!(e.status.failed_nodes.is_empty(), "{p:?}: {:?}", e.status);
            assert_ne!(e.status.phase, RolloutPhase::CircuitBroken);
            // Had they failed on rB the same way (same state and reason, no drain asked), that
            // would have counted for rB.
            let same: Vec<NodeFacts> = f
                .iter()
                .map(|x| if x.failed_config == "rA" { failed_on("rB", x.clone()) } else { x.clone() })
                .collect();
            let again = eval(Some(&p), Some(&e.status), None, &ConfigName::new("rB"), &names, &same, now);
            assert!(matches!(again.gate, Gate::Hold(HoldReason::CircuitBroken { .. })), "{p:?}: {again:?}");
            assert_eq!(again.status.failed_nodes, broken_on_a);
            // They report on rB: Working, then Done; the rollout goes on.
            for x in f.iter_mut().take(broken_on_a.len()) {
                *x = facts("rB", "r0", "Working");
            }
            let e = eval(Some(&p), Some(&e.status), None, &ConfigName::new("rB"), &names, &f, now);
            for x in f.iter_mut().take(broken_on_a.len()) {
                *x = facts("rB", "rB", "Done");
            }
            let e = eval(Some(&p), Some(&e.status), None, &ConfigName::new("rB"), &names, &f, now);
            assert!(matches!(e.gate, Gate::Pick { .. }), "{p:?}: {e:?}");
            assert!(e.status.failed_nodes.is_empty());
        }
        // A real failure on rB counts; once that node is Done on rB it is no longer a failed node
        // (the breaker it tripped stays open until resumed).
        let p = policy(0, 0, Some(0));
        let mut f: Vec<NodeFacts> = (0..4).map(|_| facts("rB", "r0", "Working")).collect();
        f[0] = facts("rB", "r0", "Degraded");
        let e = eval(Some(&p), None, None, &ConfigName::new("rB"), &names, &f, now);
        assert_eq!(e.status.failed_nodes, ["a"]);
        assert!(matches!(e.gate, Gate::Hold(HoldReason::CircuitBroken { .. })));
        f[0] = facts("rB", "rB", "Done");
        let e = eval(Some(&p), Some(&e.status), None, &ConfigName::new("rB"), &names, &f, now);
        assert!(e.status.failed_nodes.is_empty(), "{:?}", e.status);
        assert_eq!(e.gate, Gate::Hold(HoldReason::CircuitBroken { failed: vec![], max_failures: 0 }));
        // A failing node retried (Working again) still counts: a flapping node does not reset it.
        let p = policy(0, 0, Some(1));
        f[1] = facts("rB", "r0", "Degraded");
        let e = eval(Some(&p), None, None, &ConfigName::new("rB"), &names, &f, now);
        f[1] = facts("rB", "r0", "Working");
        f[2] = facts("rB", "r0", "Degraded");
        let e = eval(Some(&p), Some(&e.status), None, &ConfigName::new("rB"), &names, &f, now);
        assert_eq!(e.status.failed_nodes, ["b", "c"]);
        assert!(matches!(e.gate, Gate::Hold(HoldReason::CircuitBroken { .. })));
    }

    /// The breaker opened with every node picked already; the failed node recovers and every
    /// node ends updated on the config: the rollout is over and the breaker closes, so the pool
    /// is not shown stopped and a node that joins later is not held. While a node is still
    /// behind, it stays open although the failed node recovered.
    #[test]
    fn the_breaker_closes_once_every_node_is_updated() {
        let names = ["a", "b", "c"];
        let p = policy(0, 0, Some(0));
        let now = t("2026-01-01T00:00:00Z");
        let mut f = vec![facts("r2", "r1", "Degraded"), facts("r2", "r1", "Working"), facts("r1", "r1", "Done")];
        let e = eval(Some(&p), None, None, &ConfigName::new("r2"), &names, &f, now);
        assert!(matches!(e.gate, Gate::Hold(HoldReason::CircuitBroken { .. })), "{e:?}");
        f[0] = facts("r2", "r2", "Done");
        f[1] = facts("r2", "r2", "Done");
        let e = eval(Some(&p), Some(&e.status), None, &ConfigName::new("r2"), &names, &f, now);
        assert_eq!(e.gate, Gate::Hold(HoldReason::CircuitBroken { failed: vec![], max_failures: 0 }), "c is behind");
        assert_eq!(e.status.phase, RolloutPhase::CircuitBroken);
        // Only a and b are members now (c left the pool): both are updated.
        let e = eval(Some(&p), Some(&e.status), None, &ConfigName::new("r2"), &names[..2], &f[..2], now);
        assert_eq!(e.gate, Gate::Pick { limit: None });
        assert_eq!(e.status.phase, RolloutPhase::Complete);
        // c joins later: it is picked.
        let e = eval(Some(&p), Some(&e.status), None, &ConfigName::new("r2"), &names, &f, now);
        assert_eq!(e.gate, Gate::Pick { limit: None });
        // An empty pool proves nothing: a breaker open there stays open.
        let mut open = e.status.clone();
        open.phase = RolloutPhase::CircuitBroken;
        let e = eval(Some(&p), Some(&open), None, &ConfigName::new("r2"), &[], &[], now);
        assert!(matches!(e.gate, Gate::Hold(HoldReason::CircuitBroken { .. })), "{e:?}");
    }

    #[test]
    fn no_policy_means_batches() {
        let f = [facts("r1", "r1", "Done")];
        let e = eval(None, None, None, &ConfigName::new("r2"), &["a"], &f, t("2026-01-01T00:00:00Z"));
        assert_eq!(e.gate, Gate::Pick { limit: None });
        assert_eq!(e.status.phase, RolloutPhase::Batches);
    }
}
