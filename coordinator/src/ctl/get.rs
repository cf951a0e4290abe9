//! `aloftctl get`: objects as tables (the server's Table rows), YAML, JSON, names, a JSONPath
//! template or custom columns, sorted by `--sort-by`, followed with `-w`; `get --raw` prints what
//! the server answers at a path, as it is.

use super::print::{self, Output};
use super::{jsonpath, list_in_pages, objects_failed, resolve, with_query, Usage};
use crate::client::{resource_path, Client};
use crate::resources::ResourceType;
use anyhow::{bail, Context, Result};
use serde_json::Value;

const TABLE_ACCEPT: &str = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json";

/// `get --raw PATH`: the body on stdout as it came; an answer other than 2xx is an error carrying
/// the body (a failing `/readyz` lists its checks there).
pub(super) async fn get_raw(client: &Client, path: &str) -> Result<()> {
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
                // A usage error (exit 2), as describe, delete and patch answer it.
                return Err(Usage(format!("{a:?}: no name after the '/' (TYPE/NAME)")).into());
            }
            add(resolve(t)?, Some(n));
        }
    } else {
        let first = args.first().ok_or_else(|| Usage("get needs a TYPE (see `aloftctl api-resources`)".into()))?;
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
pub(super) struct Listing {
    pub(super) output: Option<Output>,
    pub(super) no_headers: bool,
    pub(super) sort_by: Option<jsonpath::Template>,
    pub(super) all_namespaces: bool,
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

pub(super) async fn get(
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
