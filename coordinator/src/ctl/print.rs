//! Printing what the server returns: aligned tables from server-side Table responses (one column
//! definition for kubectl and aloftctl alike), YAML, JSON and names.

use serde_json::Value;

/// Output formats of `get`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Output {
    Yaml,
    Json,
    Wide,
    Name,
}

/// Render a `meta.k8s.io/v1` Table as aligned text. `wide` shows priority > 0 columns too.
pub fn table_text(t: &Value, wide: bool, headers: bool) -> String {
    let defs = t.get("columnDefinitions").and_then(Value::as_array).cloned().unwrap_or_default();
    let shown: Vec<usize> = defs
        .iter()
        .enumerate()
        .filter(|(_, d)| wide || d.get("priority").and_then(Value::as_u64).unwrap_or(0) == 0)
        .map(|(i, _)| i)
        .collect();
    let mut rows: Vec<Vec<String>> = Vec::new();
    if headers {
        rows.push(
            shown
                .iter()
                .map(|&i| defs[i].get("name").and_then(Value::as_str).unwrap_or("").to_ascii_uppercase())
                .collect(),
        );
    }
    for r in t.get("rows").and_then(Value::as_array).into_iter().flatten() {
        let cells = r.get("cells").and_then(Value::as_array).cloned().unwrap_or_default();
        rows.push(
            shown
                .iter()
                .map(|&i| match cells.get(i) {
                    Some(Value::String(s)) => s.clone(),
                    Some(Value::Null) | None => String::new(),
                    Some(v) => v.to_string(),
                })
                .collect(),
        );
    }
    let ncols = shown.len();
    let widths: Vec<usize> = (0..ncols).map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0)).collect();
    let mut out = String::new();
    for r in rows {
        let mut line = String::new();
        for (c, cell) in r.iter().enumerate() {
            if c + 1 == ncols {
                line.push_str(cell);
            } else {
                line.push_str(&format!("{cell:<w$}   ", w = widths[c]));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

pub fn yaml(v: &Value) -> String {
    yaml_serde::to_string(v).unwrap_or_else(|e| format!("# cannot print as YAML: {e}\n"))
}

pub fn json(v: &Value) -> String {
    let mut s = serde_json::to_string_pretty(v).unwrap_or_default();
    s.push('\n');
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn aligned_and_wide() {
        let t = json!({
            "columnDefinitions": [{"name": "Name", "priority": 0}, {"name": "Config", "priority": 0}, {"name": "Extra", "priority": 1}],
            "rows": [{"cells": ["worker", "rendered-worker-abc", "x"]}, {"cells": ["master-long-name", "", "y"]}],
        });
        let narrow = table_text(&t, false, true);
        assert_eq!(narrow, "NAME               CONFIG\nworker             rendered-worker-abc\nmaster-long-name\n");
        assert!(table_text(&t, true, true).contains("EXTRA"));
        assert!(!table_text(&t, false, false).contains("NAME"));
    }
}
