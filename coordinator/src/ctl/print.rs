//! Printing what the server returns: aligned tables from server-side Table responses (one column
//! definition for kubectl and aloftctl alike), YAML, JSON and names.

use super::jsonpath::Template;
use crate::resources::ResourceType;
use serde_json::Value;

/// Output formats of `get`, as kubectl's `-o`.
#[derive(Debug, Clone, PartialEq)]
pub enum Output {
    Yaml,
    Json,
    Wide,
    Name,
    /// `jsonpath=TEMPLATE` or `jsonpath-file=FILE`: the template over the object asked for by
    /// name, or over the `List` of all of them, as kubectl applies it.
    JsonPath(Template),
    /// `custom-columns=HEADER:PATH,...` or `custom-columns-file=FILE`: a table of the paths.
    CustomColumns(Vec<(String, Template)>),
}

/// What `-o` takes, for its error and help.
pub const OUTPUT_FORMATS: &str =
    "yaml, json, wide, name, jsonpath=TEMPLATE, jsonpath-file=FILE, custom-columns=HEADER:PATH,..., custom-columns-file=FILE";

impl Output {
    /// Reads `-o`'s value; a template is parsed here, so a bad one fails before any request.
    pub fn parse(value: &str) -> Result<Self, String> {
        let read = |file: &str| std::fs::read_to_string(file).map_err(|e| format!("cannot read {file}: {e}"));
        let template = |t: &str| Template::parse(t).map_err(|e| e.to_string());
        match value.split_once('=') {
            None => match value {
                "yaml" => Ok(Output::Yaml),
                "json" => Ok(Output::Json),
                "wide" => Ok(Output::Wide),
                "name" => Ok(Output::Name),
                "jsonpath" | "jsonpath-file" | "custom-columns" | "custom-columns-file" => {
                    Err(format!("{value} needs a value: -o {value}=..."))
                }
                _ => Err(format!("unknown output format {value:?}; one of {OUTPUT_FORMATS}")),
            },
            Some(("jsonpath", t)) => template(t).map(Output::JsonPath),
            Some(("jsonpath-file", f)) => template(&read(f)?).map(Output::JsonPath),
            Some(("custom-columns", spec)) => custom_columns(spec).map(Output::CustomColumns),
            Some(("custom-columns-file", f)) => custom_columns_file(&read(f)?).map(Output::CustomColumns),
            Some((other, _)) => Err(format!("unknown output format {other:?}; one of {OUTPUT_FORMATS}")),
        }
    }
}

/// `HEADER:PATH,HEADER:PATH`, split as kubectl splits it (at every comma, then at the first
/// colon).
fn custom_columns(spec: &str) -> Result<Vec<(String, Template)>, String> {
    if spec.trim().is_empty() {
        return Err("custom-columns needs at least one HEADER:PATH".into());
    }
    spec.split(',')
        .map(|col| {
            let (header, path) = col
                .split_once(':')
                .ok_or_else(|| format!("custom-columns: {col:?} is not HEADER:PATH (e.g. NAME:.metadata.name)"))?;
            let t = Template::parse_relaxed(path).map_err(|e| format!("custom-columns {header}: {e}"))?;
            Ok((header.to_string(), t))
        })
        .collect()
}

/// kubectl's column file: the headers on its first line, their paths on the second, each
/// separated by blanks (what follows is not read).
fn custom_columns_file(text: &str) -> Result<Vec<(String, Template)>, String> {
    let mut lines = text.lines();
    let (Some(headers), Some(paths)) = (lines.next(), lines.next()) else {
        return Err("a custom-columns file has two lines: the headers, then their paths".into());
    };
    let (headers, paths): (Vec<&str>, Vec<&str>) =
        (headers.split_whitespace().collect(), paths.split_whitespace().collect());
    if headers.len() != paths.len() {
        return Err(format!("custom-columns file: {} headers and {} paths", headers.len(), paths.len()));
    }
    headers
        .iter()
        .zip(paths)
        .map(|(h, p)| {
            let t = Template::parse_relaxed(p).map_err(|e| format!("custom-columns {h}: {e}"))?;
            Ok((h.to_string(), t))
        })
        .collect()
}

/// A Table of `columns` over `objects`, for a [`TablePrinter`] that keeps the headers as
/// given: what a column finds, joined by commas, or `<none>`, as kubectl's custom columns print
/// it (each value as Go's `%v`: `map[key:value ...]`, `[a b]`).
pub fn custom_table(columns: &[(String, Template)], objects: &[&Value]) -> Result<Value, super::jsonpath::Error> {
    let defs: Vec<Value> = columns.iter().map(|(h, _)| serde_json::json!({"name": h})).collect();
    let mut rows = Vec::with_capacity(objects.len());
    for o in objects {
        let mut cells = Vec::with_capacity(columns.len());
        for (_, t) in columns {
            let found = t.values(o)?;
            cells.push(if found.is_empty() { "<none>".to_string() } else { found.join(",") });
        }
        rows.push(serde_json::json!({"cells": cells}));
    }
    Ok(serde_json::json!({"columnDefinitions": defs, "rows": rows}))
}

/// A table printed in parts: a listing, then a row per watch event. kube-apiserver sends a
/// watch's column definitions in its first event only, so they are kept from the first part that
/// has them; and the first part's column widths are kept, so that later rows line up under its
/// header, as kubectl's do (a wider cell only pushes the rest of its own row right).
#[derive(Debug, Default)]
pub struct TablePrinter {
    wide: bool,
    /// Headers as given (custom columns), not upper-cased as a server's Table's are.
    as_given: bool,
    /// A NAMESPACE column first, from each row's object (`-A`), as kubectl adds it.
    namespace: bool,
    /// The names of the columns shown (priority 0, or all with `wide`) and their indexes.
    columns: Vec<(usize, String)>,
    widths: Vec<usize>,
    headed: bool,
}

impl TablePrinter {
    /// `wide` shows priority > 0 columns too.
    pub fn new(wide: bool) -> Self {
        TablePrinter { wide, ..Default::default() }
    }

    /// Rows only (`--no-headers`), for scripts.
    pub fn without_header(mut self) -> Self {
        self.headed = true;
        self
    }

    /// A NAMESPACE column first, read from the metadata each row carries (`--all-namespaces`).
    pub fn with_namespace(mut self) -> Self {
        self.namespace = true;
        self
    }

    /// For custom columns: headers as the user named them (kubectl prints
    /// `name:.metadata.name` under `name`), and none with `no_headers`.
    pub fn for_custom_columns(no_headers: bool) -> Self {
        TablePrinter { as_given: true, headed: no_headers, ..Default::default() }
    }

    /// The text of the rows of `t` (a `meta.k8s.io/v1` Table), after the header if none was
    /// printed yet. Nothing for no rows.
    pub fn rows(&mut self, t: &Value) -> String {
        if let Some(defs) = t.get("columnDefinitions").and_then(Value::as_array).filter(|d| !d.is_empty()) {
            self.set_columns(defs);
        }
        let rows: Vec<Vec<String>> = t
            .get("rows")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .map(|r| {
                let cells = r.get("cells").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
                let ns = self.namespace.then(|| cell_text(r.pointer("/object/metadata/namespace")));
                ns.into_iter().chain(self.columns.iter().map(|(i, _)| cell_text(cells.get(*i)))).collect()
            })
            .collect();
        if rows.is_empty() || self.columns.is_empty() {
            return String::new();
        }
        let mut lines = Vec::new();
        if !self.headed {
            self.headed = true;
            let ns = self.namespace.then(|| "NAMESPACE".to_string());
            lines.push(ns.into_iter().chain(self.columns.iter().map(|(_, n)| n.clone())).collect());
        }
        lines.extend(rows);
        if self.widths.is_empty() {
            self.widths =
                (0..lines[0].len()).map(|c| lines.iter().map(|r| r[c].chars().count()).max().unwrap_or(0)).collect();
        }
        lines.iter().map(|r| self.line(r)).collect()
    }

    fn set_columns(&mut self, defs: &[Value]) {
        let columns: Vec<(usize, String)> = defs
            .iter()
            .enumerate()
            .filter(|(_, d)| self.wide || d.get("priority").and_then(Value::as_u64).unwrap_or(0) == 0)
            .map(|(i, d)| {
                let name = d.get("name").and_then(Value::as_str).unwrap_or("");
                (i, if self.as_given { name.to_string() } else { name.to_ascii_uppercase() })
            })
            .collect();
        if columns != self.columns {
            self.columns = columns;
            self.widths.clear();
        }
    }

    fn line(&self, cells: &[String]) -> String {
        let mut line = String::new();
        for (c, cell) in cells.iter().enumerate() {
            if c + 1 == cells.len() {
                line.push_str(cell);
            } else {
                // kubectl's tabwriter: three blanks after the widest cell, and a column six
                // wide at least (its minimum width, padding included).
                let w = self.widths.get(c).copied().unwrap_or(0).max(3);
                line.push_str(&format!("{cell:<w$}   "));
            }
        }
        let mut line = line.trim_end().to_string();
        line.push('\n');
        line
    }
}

/// `text` with the terminal's control characters shown instead of sent: C0 controls other than
/// newline and tab, DEL and the C1 controls, in caret notation (`^[` for ESC) or as `\u{9b}`.
/// Node agents write their own annotations, conditions and Events, so what aloftctl prints for
/// a human may come from a compromised host: an escape sequence there could retitle the
/// terminal, hide lines or (on some terminals) write to the admin's clipboard. kubectl escapes
/// them too (kubernetes#112553).
pub fn term_safe(text: &str) -> std::borrow::Cow<'_, str> {
    let unsafe_char = |c: char| (c.is_control() && c != '\n' && c != '\t') || c == '\u{7f}';
    if !text.chars().any(unsafe_char) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c {
            c if !unsafe_char(c) => out.push(c),
            '\u{7f}' => out.push_str("^?"),
            c if (c as u32) < 0x20 => {
                out.push('^');
                out.push(char::from(b'@' + c as u8));
            }
            c => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
        }
    }
    std::borrow::Cow::Owned(out)
}

/// A cell's text on one line: as kubectl's table printer, a string is cut at its first line
/// break and marked `...` (a multi-line reason, gpg's two lines in an OS refusal, broke the row
/// in two).
fn cell_text(v: Option<&Value>) -> String {
    match v {
        Some(Value::String(s)) => match s.find(['\n', '\r', '\x0c']) {
            Some(at) => format!("{}...", term_safe(&s[..at])),
            None => term_safe(s).into_owned(),
        },
        Some(Value::Null) | None => String::new(),
        Some(v) => v.to_string(),
    }
}

/// Rows (`cells` of strings) as aligned text with `header`, for tables aloftctl makes itself.
pub fn plain_table(header: &[&str], rows: &[Vec<String>]) -> String {
    let defs: Vec<Value> = header.iter().map(|h| serde_json::json!({"name": h})).collect();
    let rows: Vec<Value> = rows.iter().map(|r| serde_json::json!({"cells": r})).collect();
    TablePrinter::new(false).rows(&serde_json::json!({"columnDefinitions": defs, "rows": rows}))
}

/// Objects one after another, as `get -w` prints them (and `get` several names with `-o name`):
/// YAML documents separated by `---`, JSON objects, `TYPE/NAME` lines, a template's text for
/// each, or a row of custom columns each (under one header).
#[derive(Debug)]
pub struct ObjectPrinter {
    fmt: Output,
    printed: usize,
    table: TablePrinter,
}

impl ObjectPrinter {
    /// `no_headers`: custom columns without their header.
    pub fn new(fmt: Output, no_headers: bool) -> Self {
        ObjectPrinter { fmt, printed: 0, table: TablePrinter::for_custom_columns(no_headers) }
    }

    /// The text of `obj`, an object of type `rt`; an error where a template cannot be executed
    /// on it.
    pub fn text(&mut self, rt: &ResourceType, obj: &Value) -> Result<String, super::jsonpath::Error> {
        let first = self.printed == 0;
        self.printed += 1;
        Ok(match &self.fmt {
            Output::Yaml if first => yaml_document(obj),
            Output::Yaml => format!("---\n{}", yaml_document(obj)),
            Output::Json => json(obj),
            // What the template writes, as it writes it (kubectl adds no newline either), with
            // the terminal's controls shown: a node's agent writes what it may print.
            Output::JsonPath(t) => term_safe(&t.render(obj)?).into_owned(),
            Output::CustomColumns(cols) => self.table.rows(&custom_table(cols, &[obj])?),
            // Wide is a table: it never comes here; a name is what it would show of an object.
            Output::Name | Output::Wide => format!(
                "{}/{}\n",
                rt.singular_qualified(),
                obj.pointer("/metadata/name").and_then(Value::as_str).unwrap_or("")
            ),
        })
    }
}

/// For people (`describe`): YAML 1.2 as yaml_serde writes it, multi-line strings as blocks.
pub fn yaml(v: &Value) -> String {
    yaml_serde::to_string(v).unwrap_or_else(|e| format!("# cannot print as YAML: {e}\n"))
}

/// For machines (`-o yaml`): what kubectl reads back as it was (see [`crate::yaml_out`]).
pub fn yaml_document(v: &Value) -> String {
    crate::yaml_out::to_string(v)
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
        let narrow = TablePrinter::new(false).rows(&t);
        assert_eq!(narrow, "NAME               CONFIG\nworker             rendered-worker-abc\nmaster-long-name\n");
        assert!(TablePrinter::new(true).rows(&t).contains("EXTRA"));
    }

    /// Watch events after the first carry no column definitions: the row is printed in the
    /// columns and widths of the first table, without a second header.
    #[test]
    fn later_parts_keep_the_columns_and_widths() {
        let first = json!({
            "columnDefinitions": [{"name": "Name", "priority": 0}, {"name": "Config", "priority": 0}, {"name": "Extra", "priority": 1}],
            "rows": [{"cells": ["master-long-name", "rendered-master-abc", "y"]}],
        });
        let mut p = TablePrinter::new(false);
        assert_eq!(p.rows(&first), "NAME               CONFIG\nmaster-long-name   rendered-master-abc\n");
        let later = json!({"columnDefinitions": [], "rows": [{"cells": ["w", "r", "x"]}]});
        assert_eq!(p.rows(&later), "w                  r\n");
        assert_eq!(p.rows(&json!({"rows": []})), "");
        // An empty listing: the header comes with the first row.
        let mut p = TablePrinter::new(false);
        assert_eq!(p.rows(&json!({"columnDefinitions": first["columnDefinitions"], "rows": []})), "");
        assert_eq!(p.rows(&later), "NAME   CONFIG\nw      r\n");
    }

    #[test]
    fn a_cell_is_cut_at_its_first_line_break() {
        let t = json!({"columnDefinitions": [{"name": "Name"}, {"name": "Reason"}],
            "rows": [{"cells": ["n1", "key ID 67\nCan't check signature"]}]});
        assert_eq!(TablePrinter::new(false).rows(&t), "NAME   REASON\nn1     key ID 67...\n");
    }

    /// As kubectl's tabwriter, a narrow column is six wide, its padding included.
    #[test]
    fn a_narrow_column_is_six_wide() {
        let rows = vec![vec!["a".to_string(), "n1".to_string()], vec!["b".into(), "node-three".into()]];
        assert_eq!(plain_table(&["Z", "NAME"], &rows), "Z     NAME\na     n1\nb     node-three\n");
    }

    #[test]
    fn plain() {
        let rows = vec![vec!["nodedisruptionbudgets".to_string(), "ndb".to_string()], vec!["no".into(), String::new()]];
        assert_eq!(
            plain_table(&["NAME", "SHORTNAMES"], &rows),
            "NAME                    SHORTNAMES\nnodedisruptionbudgets   ndb\nno\n"
        );
    }
}
