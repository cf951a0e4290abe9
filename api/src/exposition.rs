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

/// Whether an `Accept` header asks for OpenMetrics (with a quality above zero).
pub fn wants_openmetrics(accept: &str) -> bool {
    accept.split(',').any(|range| {
        let mut parts = range.split(';').map(str::trim);
        let media = parts.next().unwrap_or("");
        let refused =
            parts.any(|p| p.strip_prefix("q=").is_some_and(|q| q.trim().parse::<f32>().is_ok_and(|q| q <= 0.0)));
        media.eq_ignore_ascii_case("application/openmetrics-text") && !refused
    })
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
        let sample = match line.find(" # ") {
            Some(at) => &line[..at],
            None => line,
        };
        let name = sample.split(['{', ' ']).next().unwrap_or("");
        if let Some(family) = name.strip_suffix("_created") {
            if types.get(family) == Some(&"counter") {
                continue;
            }
        }
        out.push_str(sample);
        out.push('\n');
    }
    out
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
