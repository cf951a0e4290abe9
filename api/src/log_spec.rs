//! The words of a log filter (`ALOFT_LOG`, RUST_LOG syntax), read alike by every aloft daemon.
//! tracing reads a lone word that is not a level (`warning`, `debg`) as a target of that name,
//! which logs nothing at all, errors included: a typo silenced a daemon. Here a lone word must be
//! a level, and `warning` (what syslog and journald call it) is `warn`.

/// The levels a lone word may name.
pub const LEVELS: [&str; 6] = ["trace", "debug", "info", "warn", "error", "off"];

/// `value` as the filter to hand to tracing: empty is `info`, `warning` is `warn`, a lone word
/// must be a level (the error says which words are). Filters with targets pass as they are;
/// tracing's own parser judges them.
pub fn normalized(value: &str) -> Result<&str, String> {
    let value = match value.trim() {
        "" => "info",
        w if w.eq_ignore_ascii_case("warning") => "warn",
        v => v,
    };
    let lone = !value.contains(['=', ',', ':', '[']);
    if lone && !LEVELS.contains(&value.to_ascii_lowercase().as_str()) {
        return Err(format!("a lone word must be a level: {}", LEVELS.join(", ")));
    }
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lone_word_is_a_level_or_refused() {
        assert_eq!(normalized(""), Ok("info"));
        assert_eq!(normalized(" warning "), Ok("warn"));
        assert_eq!(normalized("WARNING"), Ok("warn"));
        assert_eq!(normalized("WARN"), Ok("WARN"));
        assert_eq!(normalized("aloft_agent=debug,info"), Ok("aloft_agent=debug,info"));
        for bad in ["debg", "verbose"] {
            assert!(normalized(bad).is_err_and(|e| e.contains("trace, debug, info, warn, error, off")), "{bad:?}");
        }
    }
}
