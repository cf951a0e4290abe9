//! Putting a node back into service after it is Done on the config it was drained for: the
//! edit, and the rule that lets the API server make it inside the agent's own Done report.
//!
//! A pick in a pool without drain hooks cordons the node and answers its drain in one write, and
//! leaves a grant ([`ann::UNCORDON_AT_DONE`], the pick's target). The agent's Done report on that
//! target then comes back uncordoned ([`at_done`]): one write per node update instead of two
//! (Done, then the node controller's uncordon), one watch event less to the agent (it reads
//! nothing of the uncordon), and the slot is free as soon as Done is committed, not one
//! controller pass and commit later. Everything else (pools with hooks, a Done report without the
//! grant, nodes that fail before their drain) still goes through the node or drain controller,
//! which use the same [`uncordon_edit`].

use super::set_annotations;
use aloft_api::annotations as ann;
use serde_json::Value;

fn annotation<'a>(node: &'a Value, key: &str) -> &'a str {
    node.get("metadata")
        .and_then(|m| m.get("annotations"))
        .and_then(|a| a.get(key))
        .and_then(Value::as_str)
        .unwrap_or("")
}

/// Back into service after Done on `config`: no cordon, the handshake answered
/// (`uncordon-<config>`, whether or not the agent asked), and no grant left standing. Returns
/// whether a cordon made before the drain was kept (see [`end_drain`]).
pub(crate) fn uncordon_edit(node: &mut Value, config: &str) -> bool {
    let r = format!("uncordon-{config}");
    set_annotations(node, &[(ann::DESIRED_DRAIN, Some(&r))]);
    end_drain(node, Some(&r))
}

/// The `CordonKept` Event's message, the same whichever path ended the drain (the drain
/// controller, the node controller, a Done report): the admin reading it learns why the node is
/// still out of service and how to bring it back. `answer` as given to [`end_drain`].
pub(crate) fn cordon_kept_message(answer: Option<&str>) -> String {
    let ended = match answer {
        Some(r) => format!("{r} answered"),
        None => "the drain taken back (the node failed before it)".to_string(),
    };
    format!(
        "{ended} and the node left cordoned: it was cordoned before its drain, not by it (uncordon it with kubectl \
         uncordon)"
    )
}

/// The drain's end, answering `answer` (None: the answer taken back, for a node that failed
/// before the drain the pick made): its cordon lifted, unless someone else's cordon was there
/// before it ([`ann::CORDONED_BEFORE_DRAIN`]), and its marks gone. Returns whether a cordon was
/// kept.
pub(crate) fn end_drain(node: &mut Value, answer: Option<&str>) -> bool {
    // Kept only while there is a cordon to keep: one lifted meanwhile (`kubectl uncordon` during
    // the drain) stays lifted, and nothing says it was kept.
    let kept = !annotation(node, ann::CORDONED_BEFORE_DRAIN).is_empty() && is_cordoned(node);
    if !kept {
        if let Some(spec) = node.get_mut("spec").and_then(Value::as_object_mut) {
            spec.remove("unschedulable");
        }
    }
    set_annotations(
        node,
        &[
            (ann::LAST_APPLIED_DRAIN, answer),
            (ann::DRAIN_STARTED, None),
            (ann::DRAIN_FAILURE, None),
            (ann::UNCORDON_AT_DONE, None),
            (ann::DRAIN_POOL, None),
            (ann::CORDONED_BEFORE_DRAIN, None),
        ],
    );
    kept
}

fn is_cordoned(node: &Value) -> bool {
    node.get("spec").and_then(|s| s.get("unschedulable")) == Some(&Value::Bool(true))
}

/// The cordon a drain is about to make (the drain controller's, or the pick's), on `node` as
/// stored: when the node is cordoned already and not by a drain (none answered, none with hooks
/// under way), the cordon is someone else's and is marked to outlast the drain
/// ([`ann::CORDONED_BEFORE_DRAIN`]). An uncordoned node loses a mark an earlier drain left (the
/// admin lifted that cordon since): kept, it would hold this drain's own cordon for good.
pub(crate) fn cordon_for_drain(node: &mut Value) {
    let cordoned = is_cordoned(node);
    let by_a_drain = annotation(node, ann::LAST_APPLIED_DRAIN).starts_with("drain-")
        || !annotation(node, ann::DRAIN_POOL).is_empty();
    if cordoned && !by_a_drain {
        set_annotations(node, &[(ann::CORDONED_BEFORE_DRAIN, Some("true"))]);
    } else if !cordoned && !annotation(node, ann::CORDONED_BEFORE_DRAIN).is_empty() {
        set_annotations(node, &[(ann::CORDONED_BEFORE_DRAIN, None)]);
    }
    node["spec"]["unschedulable"] = true.into();
}

/// What a Done report's write did with the drain its pick made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AtDone {
    /// Nothing ended here (no grant, not Done on it, or a drain left to the drain controller).
    Unchanged,
    /// The drain ended and the node is back in service.
    Uncordoned,
    /// The drain ended but the node stays cordoned: the cordon was someone else's, made before
    /// the drain ([`ann::CORDONED_BEFORE_DRAIN`]).
    CordonKept,
}

/// Applied by the API server to every Node about to be written: when `next` carries a grant and
/// is Done on its config, still cordoned by the pick's drain, end that drain in the same write
/// (uncordoned, unless the cordon was there before the drain). The test is the node
/// controller's own for a node due for its uncordon
/// ([`super::pools::NodeFacts::uncordon_due`]), read from the JSON (this runs on the request
/// path), with the grant's config in place of the node's current one; a drain made with a
/// pool's hooks is left to the drain controller, which calls them. A node Done on that config
/// that someone uncordoned meanwhile loses the grant instead (nothing else changes).
pub fn at_done(next: &mut Value) -> AtDone {
    let grant = annotation(next, ann::UNCORDON_AT_DONE);
    if grant.is_empty() {
        return AtDone::Unchanged;
    }
    let cordoned = is_cordoned(next);
    let request = annotation(next, ann::DESIRED_DRAIN);
    let answer = annotation(next, ann::LAST_APPLIED_DRAIN);
    let due = cordoned
        && annotation(next, ann::STATE) == "Done"
        && annotation(next, ann::CURRENT_CONFIG) == grant
        && annotation(next, ann::DESIRED_CONFIG) == grant
        && answer.strip_prefix("drain-") == Some(grant)
        && (request.is_empty() || request == answer || request.strip_prefix("uncordon-") == Some(grant));
    if due && !annotation(next, ann::DRAIN_POOL).is_empty() {
        // Drained with a pool's hooks (before the node moved to a pool without): that drain ends
        // with those hooks, in the drain controller, as the node controller leaves it. A node
        // that did not ask for its uncordon is asked for here, or nobody would end its cordon.
        if request.is_empty() || request == answer {
            let r = format!("uncordon-{grant}");
            set_annotations(next, &[(ann::DESIRED_DRAIN, Some(&r))]);
        }
        return AtDone::Unchanged;
    }
    if due {
        let config = grant.to_string();
        return if uncordon_edit(next, &config) { AtDone::CordonKept } else { AtDone::Uncordoned };
    }
    if !cordoned && annotation(next, ann::STATE) == "Done" && annotation(next, ann::CURRENT_CONFIG) == grant {
        // Uncordoned by someone else before its Done report: the grant is void, and must not
        // end a cordon made later for another reason (nor a mark of a cordon since lifted keep
        // one).
        set_annotations(next, &[(ann::UNCORDON_AT_DONE, None), (ann::CORDONED_BEFORE_DRAIN, None)]);
    }
    AtDone::Unchanged
}

/// The annotations only the coordinator writes on a Node, which a node's own token may not
/// change: a node granting itself an uncordon could end a drain that was never its to end; one
/// answering its own drain (`lastAppliedDrain`) would skip the budgets and the drain hooks; one
/// naming its own desired or pre-stage config could read another pool's rendered config, secrets
/// included (a node may read the configs these name), and held its pool Updating; one clearing
/// the drain controller's marks hid a stuck drain from the pool and its circuit breaker.
pub const COORDINATOR_ONLY: &[&str] = &[
    ann::UNCORDON_AT_DONE,
    ann::DESIRED_CONFIG,
    ann::LAST_APPLIED_DRAIN,
    ann::PRESTAGE_CONFIG,
    ann::DRAIN_STARTED,
    ann::DRAIN_FAILURE,
    ann::DRAIN_POOL,
    ann::CORDONED_BEFORE_DRAIN,
];

/// The first of [`COORDINATOR_ONLY`] that differs between `stored` and `next`.
/// Set to empty counts as a change: an empty mark left by a node would stand for the
/// coordinator's.
pub fn coordinator_only_changed(stored: &Value, next: &Value) -> Option<&'static str> {
    fn raw<'a>(n: &'a Value, k: &str) -> Option<&'a Value> {
        n.get("metadata").and_then(|m| m.get("annotations")).and_then(|a| a.get(k))
    }
    COORDINATOR_ONLY.iter().copied().find(|k| raw(stored, k) != raw(next, k))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controllers::cache::Derive;
    use crate::controllers::pools::NodeFacts;
    use serde_json::json;

    /// A node picked for r2 (cordoned, drain answered, granted), in `state` on `current`, asking
    /// `request`.
    fn node(state: &str, current: &str, request: &str) -> Value {
        json!({"metadata": {"name": "a", "annotations": {
                ann::DESIRED_CONFIG: "r2", ann::CURRENT_CONFIG: current, ann::STATE: state,
                ann::DESIRED_DRAIN: request, ann::LAST_APPLIED_DRAIN: "drain-r2",
                ann::UNCORDON_AT_DONE: "r2", ann::DRAIN_STARTED: "drain-r2@2026-01-01T00:00:00Z"}},
            "spec": {"unschedulable": true},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]}})
    }

    fn facts(v: &Value) -> NodeFacts {
        <aloft_api::Node as Derive>::parse(v).unwrap().derive()
    }

    #[test]
    fn done_on_the_granted_config_comes_back_uncordoned() {
        for request in ["uncordon-r2", "", "drain-r2"] {
            let mut n = node("Done", "r2", request);
            assert!(facts(&n).uncordon_due(), "the controller's rule agrees ({request:?})");
            assert_eq!(at_done(&mut n), AtDone::Uncordoned, "{request:?}");
            let f = facts(&n);
            assert!(!f.cordoned && f.ready && f.done() && !f.unavailable(), "{f:?}");
            assert_eq!((f.drain_request.as_str(), f.drain_answer.as_str()), ("uncordon-r2", "uncordon-r2"));
            assert_eq!(annotation(&n, ann::UNCORDON_AT_DONE), "", "the grant is used up");
            assert_eq!(annotation(&n, ann::DRAIN_STARTED), "");
            assert_eq!(at_done(&mut n), AtDone::Unchanged, "and a second write changes nothing");
        }
    }

    #[test]
    fn nothing_else_is_uncordoned() {
        let cases: Vec<(&str, Value)> = vec![
            ("Working", node("Working", "r1", "drain-r2")),
            ("Done on the old config", node("Done", "r1", "uncordon-r1")),
            ("Degraded", node("Degraded", "r1", "drain-r2")),
            ("asking for another drain", node("Done", "r2", "drain-r3")),
            ("no grant", {
                let mut n = node("Done", "r2", "uncordon-r2");
                n["metadata"]["annotations"].as_object_mut().unwrap().remove(ann::UNCORDON_AT_DONE);
                n
            }),
            ("a grant for another config", {
                let mut n = node("Done", "r2", "uncordon-r2");
                n["metadata"]["annotations"][ann::UNCORDON_AT_DONE] = "r3".into();
                n
            }),
            ("drained by someone else's answer", {
                let mut n = node("Done", "r2", "uncordon-r2");
                n["metadata"]["annotations"][ann::LAST_APPLIED_DRAIN] = "drain-r1".into();
                n
            }),
            ("drained with another pool's hooks", {
                let mut n = node("Done", "r2", "uncordon-r2");
                n["metadata"]["annotations"][ann::DRAIN_POOL] = "infra".into();
                n
            }),
            ("retargeted", {
                let mut n = node("Done", "r2", "uncordon-r2");
                n["metadata"]["annotations"][ann::DESIRED_CONFIG] = "r3".into();
                n
            }),
        ];
        for (what, mut n) in cases {
            let before = n.clone();
            assert_eq!(at_done(&mut n), AtDone::Unchanged, "{what}");
            assert_eq!(n, before, "{what}: unchanged");
        }
    }

    /// Drained with another pool's hooks before the pick (a node that failed there, then moved
    /// to a pool without hooks): its Done report is not uncordoned, so the drain controller ends
    /// the drain with those hooks; a node that did not ask is asked for.
    #[test]
    fn a_drain_made_with_hooks_is_left_to_the_drain_controller() {
        for request in ["", "drain-r2", "uncordon-r2"] {
            let mut n = node("Done", "r2", request);
            n["metadata"]["annotations"][ann::DRAIN_POOL] = "infra".into();
            assert_eq!(at_done(&mut n), AtDone::Unchanged, "{request:?}");
            assert!(facts(&n).cordoned, "{request:?}: still cordoned");
            assert_eq!(annotation(&n, ann::DRAIN_POOL), "infra");
            assert_eq!(
                crate::controllers::drain::pending(&n),
                Some(crate::controllers::drain::Request::Uncordon("uncordon-r2".into())),
                "{request:?}: an uncordon the drain controller answers"
            );
        }
    }

    #[test]
    fn a_grant_outlived_by_an_uncordon_is_dropped_at_done() {
        let mut n = node("Done", "r2", "uncordon-r2");
        n["spec"] = json!({});
        assert_eq!(at_done(&mut n), AtDone::Unchanged, "nothing to uncordon");
        assert_eq!(annotation(&n, ann::UNCORDON_AT_DONE), "", "but the grant is void: {n}");
        assert_eq!(annotation(&n, ann::LAST_APPLIED_DRAIN), "drain-r2", "nothing else changes");
        // Cordoned again later, for another reason: that cordon stays.
        n["spec"]["unschedulable"] = true.into();
        let before = n.clone();
        assert_eq!(at_done(&mut n), AtDone::Unchanged);
        assert_eq!(n, before);
        // Not yet Done: the grant stays for the Done report.
        let mut w = node("Working", "r1", "drain-r2");
        w["spec"] = json!({});
        assert_eq!(at_done(&mut w), AtDone::Unchanged);
        assert_eq!(annotation(&w, ann::UNCORDON_AT_DONE), "r2");
    }

    #[test]
    fn only_the_coordinator_may_change_the_grant() {
        let stored = node("Working", "r1", "drain-r2");
        assert_eq!(coordinator_only_changed(&stored, &stored), None);
        let mut n = stored.clone();
        n["metadata"]["annotations"][ann::STATE] = "Done".into();
        assert_eq!(coordinator_only_changed(&stored, &n), None, "other annotations are the node's");
        n["metadata"]["annotations"][ann::UNCORDON_AT_DONE] = "r9".into();
        assert_eq!(coordinator_only_changed(&stored, &n), Some(ann::UNCORDON_AT_DONE));
        n["metadata"]["annotations"].as_object_mut().unwrap().remove(ann::UNCORDON_AT_DONE);
        assert_eq!(coordinator_only_changed(&stored, &n), Some(ann::UNCORDON_AT_DONE), "nor drop it");
    }

    /// A cordon someone made before the drain (after the pick, before the drain controller's
    /// cordon) is marked by the drain and outlasts its end, on every path that ends a drain; a
    /// drain of an uncordoned node, or a drain again over its own cordon, marks nothing.
    #[test]
    fn a_cordon_made_before_the_drain_outlasts_it() {
        let picked = || {
            json!({"metadata": {"name": "a", "annotations": {
                    ann::DESIRED_CONFIG: "r2", ann::CURRENT_CONFIG: "r1", ann::STATE: "Working",
                    ann::DESIRED_DRAIN: "drain-r2"}},
                "spec": {},
                "status": {"conditions": [{"type": "Ready", "status": "True"}]}})
        };
        let mut plain = picked();
        cordon_for_drain(&mut plain);
        assert_eq!(annotation(&plain, ann::CORDONED_BEFORE_DRAIN), "", "{plain}");
        assert!(!end_drain(&mut plain, Some("uncordon-r2")), "nothing kept");
        assert!(!facts(&plain).cordoned);

        let mut admin = picked();
        admin["spec"]["unschedulable"] = true.into();
        cordon_for_drain(&mut admin);
        assert_eq!(annotation(&admin, ann::CORDONED_BEFORE_DRAIN), "true", "{admin}");
        // The drain's own retry (its pool recorded with the first cordon) marks no more, and
        // unmarks nothing.
        set_annotations(&mut admin, &[(ann::DRAIN_POOL, Some("worker"))]);
        cordon_for_drain(&mut admin);
        assert_eq!(annotation(&admin, ann::CORDONED_BEFORE_DRAIN), "true");
        set_annotations(&mut admin, &[(ann::LAST_APPLIED_DRAIN, Some("drain-r2"))]);
        // Done, the agent asks for its uncordon.
        set_annotations(&mut admin, &[(ann::DESIRED_DRAIN, Some("uncordon-r2")), (ann::CURRENT_CONFIG, Some("r2"))]);
        let mut ended = admin.clone();
        assert!(end_drain(&mut ended, Some("uncordon-r2")), "kept");
        let f = facts(&ended);
        assert!(f.cordoned && f.cordoned_by_hand(), "{f:?}");
        assert_eq!(annotation(&ended, ann::CORDONED_BEFORE_DRAIN), "", "the mark goes with the drain");
        assert_eq!(annotation(&ended, ann::DRAIN_POOL), "");

        // A drain the node's own earlier drain cordoned is no one else's.
        let mut again = picked();
        again["spec"]["unschedulable"] = true.into();
        set_annotations(&mut again, &[(ann::LAST_APPLIED_DRAIN, Some("drain-r1"))]);
        cordon_for_drain(&mut again);
        assert_eq!(annotation(&again, ann::CORDONED_BEFORE_DRAIN), "");

        // The uncordon inside a Done report keeps it too.
        let mut done = node("Done", "r2", "uncordon-r2");
        set_annotations(&mut done, &[(ann::CORDONED_BEFORE_DRAIN, Some("true"))]);
        assert_eq!(at_done(&mut done), AtDone::CordonKept);
        let f = facts(&done);
        assert!(f.cordoned && f.cordoned_by_hand() && f.done(), "{f:?}");
        assert!(!f.uncordon_due(), "and nothing is due any more");
    }

    /// A mark whose cordon is gone (the admin lifted it) keeps nothing: the next drain drops it,
    /// a drain's end reports nothing kept, and a Done report voiding its grant drops it.
    #[test]
    fn a_mark_of_a_lifted_cordon_keeps_nothing() {
        let mut n = node("Working", "r1", "drain-r2");
        n["spec"] = json!({});
        set_annotations(&mut n, &[(ann::CORDONED_BEFORE_DRAIN, Some("true")), (ann::LAST_APPLIED_DRAIN, None)]);
        let mut drained = n.clone();
        cordon_for_drain(&mut drained);
        assert_eq!(annotation(&drained, ann::CORDONED_BEFORE_DRAIN), "", "{drained}");
        let mut ended = n.clone();
        assert!(!end_drain(&mut ended, Some("uncordon-r2")), "nothing to keep: {ended}");
        assert_eq!(annotation(&ended, ann::CORDONED_BEFORE_DRAIN), "");
        let mut done = node("Done", "r2", "uncordon-r2");
        done["spec"] = json!({});
        set_annotations(&mut done, &[(ann::CORDONED_BEFORE_DRAIN, Some("true"))]);
        assert_eq!(at_done(&mut done), AtDone::Unchanged);
        assert_eq!(annotation(&done, ann::CORDONED_BEFORE_DRAIN), "", "{done}");
        assert_eq!(annotation(&done, ann::UNCORDON_AT_DONE), "");
    }

    #[test]
    fn only_the_coordinator_may_mark_a_cordon_as_made_before_the_drain() {
        let stored = node("Working", "r1", "drain-r2");
        let mut n = stored.clone();
        n["metadata"]["annotations"][ann::CORDONED_BEFORE_DRAIN] = "true".into();
        assert_eq!(coordinator_only_changed(&stored, &n), Some(ann::CORDONED_BEFORE_DRAIN));
    }
}
