//! The two text formats of `/metrics`, chosen by the scraper's `Accept` header as Prometheus'
//! own client libraries choose (client_golang's `expfmt.Negotiate`): OpenMetrics for a scraper
//! that asks for it (Prometheus does, first), the classic text format 0.0.4 for anything else
//! (curl's `*/*`, a scraper that asks for `text/plain; version=0.0.4` and parses it strictly).
//! The coordinator and the agent encode OpenMetrics (prometheus-client's only format) and turn
//! it into the classic form here.

use std::collections::HashMap;

/// The OpenMetrics content type.
pub const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// The classic text format's content type.
pub const TEXT: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Whether an `Accept` header asks for OpenMetrics before the classic format: its media ranges
/// by quality (highest first, the header's order among equals), the first that is OpenMetrics or
/// `text/plain` decides; none of them (`*/*`, nothing): the classic format.
pub fn wants_openmetrics(accept: &str) -> bool {
    let mut ranges: Vec<(f32, String)> = accept
        .split(',')
        .filter_map(|range| {
            let mut parts = range.split(';').map(str::trim);
            let media = parts.next().unwrap_or("").to_ascii_lowercase();
            let q = parts.find_map(|p| p.strip_prefix("q=")).map_or(Some(1.0), |q| q.trim().parse::<f32>().ok())?;
            (q > 0.0).then_some((q, media))
        })
        .collect();
    ranges.sort_by(|a, b| b.0.total_cmp(&a.0));
    ranges
        .iter()
        .find_map(|(_, media)| match media.as_str() {
            "application/openmetrics-text" => Some(true),
            "text/plain" => Some(false),
            _ => None,
        })
        .unwrap_or(false)
}

/// OpenMetrics text as the classic text format: no `# EOF` and no `# UNIT`; a counter family
/// is named by its `_total` sample (`# TYPE x_total counter`), without `_created` samples;
/// `unknown` is `untyped`; info and stateset are gauges, a gauge histogram a histogram; HELP
/// text keeps only the escapes 0.0.4 has (backslash, newline); exemplars are dropped.
pub fn to_text_format(openmetrics: &str) -> String {
    let mut types: HashMap<&str, &str> = HashMap::new();
    for line in openmetrics.lines() {
        if let Some((name, ty)) = line.strip_prefix("# TYPE ").and_then(|r| r.split_once(' ')) {
            types.insert(name, ty);
        }
    }
    let renamed = |name: &str| -> String {
        match types.get(name).copied() {
            Some("counter") => format!("{name}_total"),
            Some("info") => format!("{name}_info"),
            _ => name.to_string(),
        }
    };
    let mut out = String::with_capacity(openmetrics.len());
    for line in openmetrics.lines() {
        if line == "# EOF" || line.starts_with("# UNIT ") {
            continue;
        }
        if let Some((name, ty)) = line.strip_prefix("# TYPE ").and_then(|r| r.split_once(' ')) {
            let ty = match ty {
                "unknown" => "untyped",
                "info" | "stateset" => "gauge",
                "gaugehistogram" => "histogram",
                other => other,
            };
            out.push_str(&format!("# TYPE {} {ty}\n", renamed(name)));
            continue;
        }
        if let Some((name, help)) = line.strip_prefix("# HELP ").and_then(|r| r.split_once(' ')) {
            out.push_str(&format!("# HELP {} {}\n", renamed(name), help.replace("\\\"", "\"")));
            continue;
        }
        if line.starts_with('#') {
            continue;
        }
        let sample = without_exemplar(line);
        let name = sample.split(['{', ' ']).next().unwrap_or("");
        if let Some(family) = name.strip_suffix("_created") {
            if types.get(family) == Some(&"counter") {
                continue;
            }
        }
        out.push_str(&go_bucket_bounds(sample));
        out.push('\n');
    }
    out
}

/// A sample's `le` (histogram bucket) and `quantile` values as Go's client writes them, the
/// shortest form of the number (`le="1"`, not OpenMetrics' `le="1.0"`): Prometheus 2 keeps the
/// classic format's label values as they are written, so a query or rule written against
/// kube-apiserver's metrics (`le="1"`) matched no series of ours.
fn go_bucket_bounds(sample: &str) -> std::borrow::Cow<'_, str> {
    let mut out = std::borrow::Cow::Borrowed(sample);
    // A label's name starts the set or follows a comma; inside a value a quote is escaped.
    for start in ["{le=\"", ",le=\"", "{quantile=\"", ",quantile=\""] {
        let Some(at) = out.find(start) else { continue };
        let from = at + start.len();
        let Some(len) = out[from..].find('"') else { continue };
        let value = &out[from..from + len];
        let Some(shortest) = value.parse::<f64>().ok().filter(|v| v.is_finite()).map(|v| v.to_string()) else {
            continue;
        };
        if shortest != value {
            out = std::borrow::Cow::Owned(format!("{}{shortest}{}", &out[..from], &out[from + len..]));
        }
    }
    out
}

/// A sample line without its exemplar (` # {...} value`), which comes after the label set: a
/// ` # ` inside a quoted label value is the value's.
fn without_exemplar(line: &str) -> &str {
    let mut after_labels = 0;
    if let Some(open) = line.find('{').filter(|o| !line[..*o].contains(' ')) {
        let (mut quoted, mut escaped) = (false, false);
        for (i, c) in line[open..].char_indices() {
            match c {
                _ if escaped => escaped = false,
                '\\' if quoted => escaped = true,
                '"' => quoted = !quoted,
                '}' if !quoted => {
                    after_labels = open + i + 1;
                    break;
                }
                _ => {}
            }
        }
    }
    match line[after_labels..].find(" # ") {
        Some(at) => &line[..after_labels + at],
        None => line,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn negotiation_as_prometheus_clients_do() {
        let prometheus = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
        assert!(wants_openmetrics(prometheus));
        assert!(!wants_openmetrics("*/*"));
        assert!(!wants_openmetrics("text/plain;version=0.0.4"));
        assert!(!wants_openmetrics("application/openmetrics-text;q=0, text/plain"));
        assert!(!wants_openmetrics(""));
        // By quality, not by place: Prometheus with the classic format first in scrape_protocols.
        assert!(!wants_openmetrics("text/plain;version=0.0.4;q=0.5,application/openmetrics-text;version=1.0.0;q=0.4"));
        assert!(wants_openmetrics("text/plain;q=0.2, application/openmetrics-text;q=0.9"));
    }

    #[test]
    fn a_hash_in_a_label_value_is_not_an_exemplar() {
        let om =
            "# TYPE aloft_pool_condition gauge\naloft_pool_condition{condition=\"Custom # x\",pool=\"w\"} 1\n# EOF\n";
        assert_eq!(
            to_text_format(om),
            "# TYPE aloft_pool_condition gauge\naloft_pool_condition{condition=\"Custom # x\",pool=\"w\"} 1\n"
        );
        assert_eq!(without_exemplar(r#"x{a="q\"}"} 1 # {t="1"} 2"#), r#"x{a="q\"}"} 1"#);
        assert_eq!(without_exemplar("x 1 # {t=\"1\"} 2"), "x 1");
    }

    /// Bucket bounds and quantiles in Go's shortest form, as kube-apiserver's `/metrics` has them
    /// (`le="1"`, which the Kubernetes mixin's rules select); `+Inf`, other labels and label
    /// values that only look alike are left as they are.
    #[test]
    fn bucket_bounds_are_written_as_go_writes_them() {
        let om = "# TYPE d histogram\nd_bucket{verb=\"GET\",le=\"1.0\"} 3\nd_bucket{le=\"0.0005\"} 1\n\
                  d_bucket{verb=\"GET\",le=\"60.0\"} 4\nd_bucket{verb=\"GET\",le=\"+Inf\"} 4\n# EOF\n";
        assert_eq!(
            to_text_format(om),
            "# TYPE d histogram\nd_bucket{verb=\"GET\",le=\"1\"} 3\nd_bucket{le=\"0.0005\"} 1\n\
             d_bucket{verb=\"GET\",le=\"60\"} 4\nd_bucket{verb=\"GET\",le=\"+Inf\"} 4\n"
        );
        assert_eq!(go_bucket_bounds(r#"s{quantile="0.50"} 1"#), r#"s{quantile="0.5"} 1"#);
        let alike = r#"g{name="x,le=\"1.0\"",scale="1.0"} 1"#;
        assert_eq!(go_bucket_bounds(alike), alike);
    }

    #[test]
    fn openmetrics_becomes_the_classic_text_format() {
        let om = "# HELP aloft_controller_restarts Times a \\\"controller\\\" was started again.\n\
                  # TYPE aloft_controller_restarts counter\n\
                  aloft_controller_restarts_total{controller=\"node\"} 2\n\
                  aloft_controller_restarts_created{controller=\"node\"} 1700000000.0\n\
                  # HELP aloft_pass_duration_seconds Pass time.\n\
                  # TYPE aloft_pass_duration_seconds histogram\n\
                  # UNIT aloft_pass_duration_seconds seconds\n\
                  aloft_pass_duration_seconds_bucket{le=\"+Inf\"} 3 # {trace_id=\"x\"} 0.5\n\
                  aloft_pass_duration_seconds_sum 0.7\n\
                  aloft_pass_duration_seconds_count 3\n\
                  # HELP aloft_store_revision Newest revision.\n\
                  # TYPE aloft_store_revision gauge\n\
                  aloft_store_revision 42\n\
                  # TYPE thing unknown\n\
                  thing 1\n\
                  # EOF\n";
        assert_eq!(
            to_text_format(om),
            "# HELP aloft_controller_restarts_total Times a \"controller\" was started again.\n\
             # TYPE aloft_controller_restarts_total counter\n\
             aloft_controller_restarts_total{controller=\"node\"} 2\n\
             # HELP aloft_pass_duration_seconds Pass time.\n\
             # TYPE aloft_pass_duration_seconds histogram\n\
             aloft_pass_duration_seconds_bucket{le=\"+Inf\"} 3\n\
             aloft_pass_duration_seconds_sum 0.7\n\
             aloft_pass_duration_seconds_count 3\n\
             # HELP aloft_store_revision Newest revision.\n\
             # TYPE aloft_store_revision gauge\n\
             aloft_store_revision 42\n\
             # TYPE thing untyped\n\
             thing 1\n"
        );
    }
}
