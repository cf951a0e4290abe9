//! What a resource request's `Accept` header asks the answer to be written in, as kube-apiserver
//! negotiates it: JSON (also for `*/*`, `application/*` and no header) or YAML
//! (`application/yaml`, what `curl -H 'Accept: application/yaml'` and client-go's YAML
//! serializer ask for); the media types are weighed by their `q`, the first of the highest wins.
//! A header that names only what aloft cannot write (protobuf, `text/html`, a `PartialObjectMetadata`
//! conversion) is refused with 406 before anything is read or written: answering JSON to a
//! client that cannot read it made its decoder fail on bytes it never asked for. A watch is a
//! JSON stream only (kube-apiserver has no YAML stream either).

use super::error::ApiError;
use axum::body::Body;
use axum::http::{header, HeaderValue};
use axum::response::{IntoResponse, Response};

/// How the answer's body is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Output {
    Json,
    Yaml,
}

/// What the chosen media range asks for: the body's encoding and, with `as=Table`, the Table's
/// version. One reading of the header decides both: the Table used to be decided apart, by any
/// range naming `as=Table`, so `application/json;as=Table;g=foo;v=v9` got a Table and
/// `…;v=v1beta1` a v1 one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Negotiated {
    pub output: Output,
    pub table: Option<crate::server::table::TableVersion>,
}

/// One media range of an `Accept` header, `q` in thousandths.
struct Range<'a> {
    essence: String,
    params: Vec<(String, &'a str)>,
    q: u16,
}

fn parse_range(part: &str) -> Option<Range<'_>> {
    let mut pieces = part.split(';');
    let essence = pieces.next()?.trim().to_ascii_lowercase();
    if essence.is_empty() {
        return None;
    }
    let mut params = Vec::new();
    let mut q = 1000;
    for p in pieces {
        let (k, v) = p.split_once('=').unwrap_or((p, ""));
        let k = k.trim().to_ascii_lowercase();
        let v = v.trim().trim_matches('"');
        if k == "q" {
            // An unreadable weight counts as the default, as Go's parser leaves it.
            // A weight under a thousandth still counts: only 0 refuses a range.
            q = v.parse::<f64>().ok().filter(|q| (0.0..=1.0).contains(q)).map_or(1000, |q| {
                if q > 0.0 {
                    ((q * 1000.0).round() as u16).max(1)
                } else {
                    0
                }
            });
        } else if !k.is_empty() {
            params.push((k, v));
        }
    }
    Some(Range { essence, params, q })
}

/// What this media range gets from aloft, if anything.
fn serves(range: &Range<'_>, watching: bool) -> Option<Negotiated> {
    use crate::server::table::TableVersion;
    // A Table (`as=Table`) is a conversion kube-apiserver makes to meta.k8s.io's v1 or v1beta1
    // only, written as JSON or YAML; any other conversion is one aloft does not make, and
    // `stream=watch` is only for a watch.
    let param = |name: &str| range.params.iter().find(|(k, _)| k == name).map(|(_, v)| *v);
    let table = match param("as") {
        None => None,
        Some("Table") if param("g") == Some("meta.k8s.io") => match param("v") {
            Some("v1") => Some(TableVersion::V1),
            Some("v1beta1") => Some(TableVersion::V1beta1),
            _ => return None,
        },
        Some(_) => return None,
    };
    if param("stream").is_some_and(|v| !(watching && v == "watch")) {
        return None;
    }
    let output = match range.essence.as_str() {
        "*/*" | "application/*" if table.is_none() => Output::Json,
        "application/json" => Output::Json,
        "application/yaml" if !watching => Output::Yaml,
        _ => return None,
    };
    Some(Negotiated { output, table })
}

/// What to answer for `accept` (absent: JSON), or 406 naming what aloft can write.
pub fn output(accept: Option<&HeaderValue>, watching: bool) -> Result<Negotiated, ApiError> {
    choose(accept, watching, true)
}

/// [`output`] for an answer that has no Table form (the pod list, a node's Lease): a range
/// asking for a Table is not one it can meet, and one asking for nothing else is a 406.
pub fn output_plain(accept: Option<&HeaderValue>) -> Result<Output, ApiError> {
    choose(accept, false, false).map(|n| n.output)
}

fn choose(accept: Option<&HeaderValue>, watching: bool, tables: bool) -> Result<Negotiated, ApiError> {
    let json = Negotiated { output: Output::Json, table: None };
    let Some(accept) = accept else { return Ok(json) };
    let accept = accept.to_str().map_err(|_| not_acceptable(watching))?;
    if accept.trim().is_empty() {
        return Ok(json);
    }
    let mut best: Option<(u16, Negotiated)> = None;
    for range in accept.split(',').filter_map(parse_range) {
        if range.q == 0 {
            continue;
        }
        if let Some(out) = serves(&range, watching).filter(|n| tables || n.table.is_none()) {
            if best.is_none_or(|(q, _)| range.q > q) {
                best = Some((range.q, out));
            }
        }
    }
    best.map(|(_, out)| out).ok_or_else(|| not_acceptable(watching))
}

fn not_acceptable(watching: bool) -> ApiError {
    let types =
        if watching { "application/json, application/json;stream=watch" } else { "application/json, application/yaml" };
    ApiError::not_acceptable(format!("only the following media types are accepted: {types}"))
}

/// Rewrite a JSON answer as YAML; any other answer (a stream, a body that is not JSON) is passed
/// on as it is. Never called for a watch: [`output`] gives a watch JSON or a 406.
pub async fn to_yaml(response: Response) -> Response {
    let is_json = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(parse_range)
        .is_some_and(|r| r.essence == "application/json" && !r.params.iter().any(|(k, _)| k == "stream"));
    if !is_json {
        return response;
    }
    let (mut parts, body) = response.into_parts();
    let bytes = match axum::body::to_bytes(body, usize::MAX).await {
        Ok(b) => b,
        Err(e) => return ApiError::internal(format!("reading the answer: {e}")).into_response(),
    };
    // Written so that kubectl (a YAML 1.1 reader) reads back what was sent: `yes` stays a string.
    let yaml = serde_json::from_slice::<serde_json::Value>(&bytes)
        .map_err(|e| e.to_string())
        .map(|v| crate::yaml_out::to_string(&v));
    match yaml {
        Ok(text) => {
            parts.headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/yaml"));
            parts.headers.remove(header::CONTENT_LENGTH);
            Response::from_parts(parts, Body::from(text))
        }
        Err(e) => ApiError::internal(format!("writing the answer as YAML: {e}")).into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::table::TableVersion;

    fn out(accept: &str, watching: bool) -> Result<Output, u16> {
        negotiated(accept, watching).map(|n| n.output)
    }

    fn negotiated(accept: &str, watching: bool) -> Result<Negotiated, u16> {
        output(Some(&HeaderValue::from_str(accept).unwrap()), watching).map_err(|e| e.status.code)
    }

    fn table_of(accept: &str) -> Result<Option<TableVersion>, u16> {
        negotiated(accept, false).map(|n| n.table)
    }

    /// The Table is the chosen range's: meta.k8s.io v1 or v1beta1, JSON or YAML; a Table of
    /// another group or version, or of no media type in particular, is not one aloft writes.
    #[test]
    fn a_table_is_asked_for_by_the_chosen_range() {
        let v1 = "application/json;as=Table;v=v1;g=meta.k8s.io";
        assert_eq!(table_of(v1), Ok(Some(TableVersion::V1)));
        assert_eq!(table_of("application/json;as=Table;v=v1beta1;g=meta.k8s.io"), Ok(Some(TableVersion::V1beta1)));
        assert_eq!(
            negotiated("application/yaml;as=Table;v=v1;g=meta.k8s.io", false).map(|n| n.output),
            Ok(Output::Yaml)
        );
        assert_eq!(table_of(&format!("{v1}, application/json")), Ok(Some(TableVersion::V1)));
        assert_eq!(table_of(&format!("{v1};q=0.5, application/json")), Ok(None), "plain JSON weighs more");
        assert_eq!(table_of("application/json;as=Table;g=foo;v=v9, application/json"), Ok(None));
        for refused in [
            "application/json;as=Table;g=foo;v=v9",
            "application/json;as=Table;g=meta.k8s.io;v=v2",
            "application/json;as=Table",
            "*/*;as=Table;g=meta.k8s.io;v=v1",
        ] {
            assert_eq!(table_of(refused), Err(406), "{refused}");
        }
        assert_eq!(negotiated(&format!("{v1}, application/json"), true).map(|n| n.table), Ok(Some(TableVersion::V1)));
        // What has no Table form takes the plain range, or refuses.
        let plain = |a: &str| output_plain(Some(&HeaderValue::from_str(a).unwrap())).map_err(|e| e.status.code);
        assert_eq!(plain(&format!("{v1}, application/json")), Ok(Output::Json));
        assert_eq!(plain(v1), Err(406));
    }

    /// What kubectl, client-go and curl send keeps working; YAML is served when preferred;
    /// what aloft cannot write is a 406, not JSON the client cannot read.
    #[test]
    fn the_accept_header_chooses_json_or_yaml_or_is_refused() {
        assert_eq!(output(None, false).unwrap().output, Output::Json);
        assert_eq!(out("", false), Ok(Output::Json));
        assert_eq!(out("*/*", false), Ok(Output::Json));
        assert_eq!(out("application/json, */*", false), Ok(Output::Json));
        // kubectl get
        let table = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json";
        assert_eq!(out(table, false), Ok(Output::Json));
        // client-go for built-in kinds, and for watches
        assert_eq!(out("application/vnd.kubernetes.protobuf, */*", false), Ok(Output::Json));
        assert_eq!(out("application/vnd.kubernetes.protobuf;stream=watch, application/json", true), Ok(Output::Json));
        assert_eq!(out("application/json;stream=watch", true), Ok(Output::Json));
        assert_eq!(out("application/yaml", false), Ok(Output::Yaml));
        assert_eq!(out("Application/YAML; charset=utf-8", false), Ok(Output::Yaml));
        assert_eq!(out("application/json;q=0.5, application/yaml", false), Ok(Output::Yaml));
        assert_eq!(out("application/yaml;q=0.5, application/json", false), Ok(Output::Json));
        assert_eq!(out("application/yaml, application/json", false), Ok(Output::Yaml));
        assert_eq!(out("application/yaml;q=0, application/json;q=0.1", false), Ok(Output::Json));
        assert_eq!(out("application/yaml;q=0.0001", false), Ok(Output::Yaml), "small, not 0");
        for refused in [
            "application/vnd.kubernetes.protobuf",
            "text/html",
            "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1",
            "application/json;stream=watch",
            "application/json;q=0",
            ",",
        ] {
            assert_eq!(out(refused, false), Err(406), "{refused}");
        }
        assert_eq!(out("application/yaml", true), Err(406));
        let e = output(Some(&HeaderValue::from_static("text/html")), false).unwrap_err();
        assert_eq!(e.status.reason, "NotAcceptable");
        assert!(e.status.message.contains("application/json, application/yaml"), "{}", e.status.message);
    }

    #[tokio::test]
    async fn a_json_answer_is_written_as_yaml_and_a_stream_is_left_alone() {
        let json = (
            axum::http::StatusCode::CREATED,
            [(header::CONTENT_TYPE, "application/json")],
            r#"{"kind":"Node","metadata":{"name":"a","annotations":{"m":"0644"}}}"#,
        )
            .into_response();
        let yaml = to_yaml(json).await;
        assert_eq!(yaml.status(), axum::http::StatusCode::CREATED);
        assert_eq!(yaml.headers()[header::CONTENT_TYPE], "application/yaml");
        let text = axum::body::to_bytes(yaml.into_body(), usize::MAX).await.unwrap();
        let back: serde_json::Value = yaml_serde::from_slice(&text).unwrap();
        assert_eq!(back["metadata"]["annotations"]["m"], "0644", "{}", String::from_utf8_lossy(&text));
        assert_eq!(back["kind"], "Node");
        let stream = ([(header::CONTENT_TYPE, "application/json;stream=watch")], "{}").into_response();
        let same = to_yaml(stream).await;
        assert_eq!(same.headers()[header::CONTENT_TYPE], "application/json;stream=watch");
    }
}
