//! `aloftctl describe`: one object in detail, laid out as `kubectl describe` lays it out:
//! metadata, spec, status, conditions, and the Events about it.

use super::{list_in_pages, print, targets, with_query, Usage};
use crate::client::{resource_path, Client};
use crate::resources::{self, ResourceType};
use anyhow::Result;
use serde_json::Value;

pub(super) async fn describe(client: &Client, ns: &str, args: &[String]) -> Result<()> {
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

/// The longest nested status value `describe` prints.
const DESCRIBE_LINES: usize = 40;

#[cfg(test)]
mod tests {
    use super::*;

    use serde_json::json;

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
