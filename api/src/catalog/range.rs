//! Versions and version ranges as OLM reads them: `olm.package` versions, `skipRange` and
//! `olm.package.required` ranges, all parsed by blang/semver in opm and in OLM.
//!
//! A skipRange decides which installed versions an entry replaces, so it must mean here exactly
//! what it means to OLM, quirks included, or a fleet would upgrade differently from a cluster on
//! the same catalog. Two differences from the `semver` crate's `VersionReq` matter: blang
//! compares every version by plain semver precedence (`<2.0.0` includes `2.0.0-rc.1`, which
//! `VersionReq` excludes), and its syntax is its own (space-separated comparators ANDed, `||`
//! ORed, `1.x` and `1.2.x` wildcards, no `~` or `^`). Versions are parsed by blang's rules, so a
//! version opm refuses is refused here with blang's words, then held as [`semver::Version`] and
//! compared by precedence (build metadata ignored, as blang ignores it).

use semver::{BuildMetadata, Prerelease, Version};
use std::cmp::Ordering;
use std::fmt;

/// Why a range (or a version in it) is not one blang accepts, in blang's words, so the message
/// matches what `opm validate` says about the same `skipRange`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct RangeError(String);

/// A parsed range: alternatives (`||`), each a list of comparators that must all hold. The text
/// it was read from is kept, since OLM shows ranges as written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Range {
    text: String,
    any_of: Vec<Vec<Comparator>>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Comparator {
    op: Op,
    version: Version,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Eq,
    Ne,
    Gt,
    Ge,
    Lt,
    Le,
}

impl Range {
    /// Read a range as blang's `ParseRange` does, step for step (tokens split on spaces that do
    /// not follow an operator, wildcards expanded into comparators, then each comparator read).
    /// Its quirks are kept on purpose: a one-character token is dropped, an empty range is
    /// refused as "Last element in range is '||'", `1.x.x` means `1.0.x`, and an unknown
    /// operator before a wildcard is dropped (`~1.x` is `=1.0.0`).
    pub fn parse(text: &str) -> Result<Range, RangeError> {
        let tokens = split_and_trim(text);
        let alternatives = split_or(&tokens)?;
        let mut any_of = Vec::with_capacity(alternatives.len());
        for alternative in alternatives {
            let mut expanded = Vec::new();
            for token in alternative {
                expand_wildcard(token, &mut expanded)?;
            }
            let mut all_of = Vec::with_capacity(expanded.len());
            for token in &expanded {
                let (op, version) = split_comparator(token)?;
                all_of.push(comparator(token, op, version)?);
            }
            any_of.push(all_of);
        }
        Ok(Range { text: text.to_string(), any_of })
    }

    /// Whether `version` is in the range, by semver precedence alone: pre-releases are ordered
    /// like any version (blang has no special rule for them) and build metadata is ignored.
    pub fn contains(&self, version: &Version) -> bool {
        self.any_of.iter().any(|all_of| all_of.iter().all(|c| c.matches(version)))
    }

    /// The range as it was written.
    pub fn as_str(&self) -> &str {
        &self.text
    }
}

impl fmt::Display for Range {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl std::str::FromStr for Range {
    type Err = RangeError;
    fn from_str(s: &str) -> Result<Range, RangeError> {
        Range::parse(s)
    }
}

impl Comparator {
    fn matches(&self, v: &Version) -> bool {
        let order = v.cmp_precedence(&self.version);
        match self.op {
            Op::Eq => order == Ordering::Equal,
            Op::Ne => order != Ordering::Equal,
            Op::Gt => order == Ordering::Greater,
            Op::Ge => order != Ordering::Less,
            Op::Lt => order == Ordering::Less,
            Op::Le => order != Ordering::Greater,
        }
    }
}

/// blang's `splitAndTrim`: split on spaces, except a space right after `>`, `<` or `=` (so
/// `>= 1.0.0` is one token), then drop the spaces inside tokens. Its bounds drop any token of a
/// single character; kept, since opm reads ranges through it.
fn split_and_trim(s: &str) -> Vec<String> {
    let bytes = s.as_bytes();
    let mut tokens = Vec::new();
    let mut last = 0usize;
    let mut last_char = 0u8;
    for (i, &c) in bytes.iter().enumerate() {
        if c == b' ' && !matches!(last_char, b'>' | b'<' | b'=') {
            if last + 1 < i {
                tokens.push(&s[last..i]);
            }
            last = i + 1;
        } else if c != b' ' {
            last_char = c;
        }
    }
    if last + 1 < bytes.len() {
        tokens.push(&s[last..]);
    }
    tokens.into_iter().map(|t| t.replace(' ', "")).collect()
}

/// blang's `splitORParts`.
fn split_or(tokens: &[String]) -> Result<Vec<&[String]>, RangeError> {
    let mut parts = Vec::new();
    let mut last = 0;
    for (i, t) in tokens.iter().enumerate() {
        if t == "||" {
            if i == 0 {
                return Err(RangeError("First element in range is '||'".into()));
            }
            parts.push(&tokens[last..i]);
            last = i + 1;
        }
    }
    if last == tokens.len() {
        return Err(RangeError("Last element in range is '||'".into()));
    }
    parts.push(&tokens[last..]);
    Ok(parts)
}

/// blang's `splitComparatorVersion`: the operator is whatever comes before the first digit.
fn split_comparator(token: &str) -> Result<(&str, &str), RangeError> {
    match token.find(|c: char| c.is_numeric()) {
        Some(i) => Ok((token[..i].trim(), &token[i..])),
        None => Err(RangeError(format!("Could not get version from string: {}", go_quote(token)))),
    }
}

fn comparator(token: &str, op: &str, version: &str) -> Result<Comparator, RangeError> {
    let op_parsed = match op {
        "" | "=" | "==" => Op::Eq,
        "!" | "!=" => Op::Ne,
        ">" => Op::Gt,
        ">=" => Op::Ge,
        "<" => Op::Lt,
        "<=" => Op::Le,
        _ => {
            return Err(RangeError(format!(
                "Could not parse Range {}: Could not parse comparator {} in {}",
                go_quote(token),
                go_quote(op),
                go_quote(&format!("{op}{version}"))
            )))
        }
    };
    let parsed = parse_version(version).map_err(|e| {
        RangeError(format!(
            "Could not parse Range {}: Could not parse version {} in {}: {e}",
            go_quote(token),
            go_quote(version),
            go_quote(&format!("{op}{version}"))
        ))
    })?;
    Ok(Comparator { op: op_parsed, version: parsed })
}

/// blang's `expandWildcardVersion` for one token: any token with an `x` in it goes through the
/// wildcard path (as in blang, even `1.0.0-x1`), which may turn it into two comparators.
fn expand_wildcard(token: &str, out: &mut Vec<String>) -> Result<(), RangeError> {
    if !token.contains('x') {
        out.push(token.to_string());
        return Ok(());
    }
    let (op, version) = split_comparator(token)?;
    let parts: Vec<&str> = version.split('.').collect();
    let wildcard = match (parts.len(), parts.last()) {
        (2, Some(&"x")) => Wildcard::Minor,
        (3, Some(&"x")) => Wildcard::Patch,
        _ => Wildcard::None,
    };
    let flat = flat_version(version);
    let (result_op, increment) = match op {
        ">" => (">=", true),
        ">=" => (">=", false),
        "<" => ("<", false),
        "<=" => ("<", true),
        "" | "=" | "==" => {
            out.push(format!(">={flat}"));
            ("<", true)
        }
        "!=" | "!" => {
            out.push(format!("<{flat}"));
            (">=", true)
        }
        _ => ("", false),
    };
    let result_version = if !increment {
        flat
    } else {
        match wildcard {
            Wildcard::Patch => increment_part(&flat, 1),
            Wildcard::Minor => increment_part(&flat, 0),
            Wildcard::None => String::new(),
        }
    };
    out.push(format!("{result_op}{result_version}"));
    Ok(())
}

enum Wildcard {
    None,
    Minor,
    Patch,
}

/// blang's `createVersionFromWildcard`: `1.x.x` -> `1.x` -> `1.0` -> `1.0.0`, `1.2.x` -> `1.2.0`.
fn flat_version(version: &str) -> String {
    let v = version.replacen(".x.x", ".x", 1).replacen(".x", ".0", 1);
    if v.split('.').count() == 2 {
        format!("{v}.0")
    } else {
        v
    }
}

/// blang's `incrementMajorVersion`/`incrementMinorVersion` (Go's `Atoi`, so a sign is allowed;
/// a part that is not a number gives an empty version, as blang's ignored error does).
fn increment_part(version: &str, index: usize) -> String {
    let mut parts: Vec<String> = version.split('.').map(str::to_string).collect();
    let Some(n) = parts.get(index).and_then(|p| p.parse::<i64>().ok()) else { return String::new() };
    parts[index] = n.wrapping_add(1).to_string();
    parts.join(".")
}

fn alphanum(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '-'
}

/// Read a version as blang's `semver.ParseTolerant` does (what OLM's CEL `semver_compare`
/// uses): surrounding spaces and a leading `v` are dropped, leading zeroes of each part are
/// dropped, and a short `1` or `1.2` is filled up with zeroes (a short one cannot carry a
/// pre-release or build); the rest is [`parse_version`].
pub fn parse_version_tolerant(s: &str) -> Result<Version, String> {
    let s = s.trim();
    let s = s.strip_prefix('v').unwrap_or(s);
    let mut parts: Vec<String> = s
        .splitn(3, '.')
        .map(|p| {
            if p.len() > 1 {
                let trimmed = p.trim_start_matches('0');
                if trimmed.chars().next().is_some_and(|c| c.is_ascii_digit()) {
                    trimmed.to_string()
                } else {
                    format!("0{trimmed}")
                }
            } else {
                p.to_string()
            }
        })
        .collect();
    if parts.len() < 3 {
        if parts.last().is_some_and(|p| p.contains(['+', '-'])) {
            return Err("Short version cannot contain PreRelease/Build meta data".into());
        }
        while parts.len() < 3 {
            parts.push("0".into());
        }
    }
    parse_version(&parts.join("."))
}

/// Read a version as blang's `semver.Parse` does (what opm uses for `olm.package` versions and
/// inside ranges), with its error messages; the result is a [`semver::Version`].
pub fn parse_version(s: &str) -> Result<Version, String> {
    if s.is_empty() {
        return Err("Version string empty".into());
    }
    let parts: Vec<&str> = s.splitn(3, '.').collect();
    let [major, minor, rest] = parts[..] else { return Err("No Major.Minor.Patch elements found".into()) };
    let major = number(major, "major", "Major")?;
    let minor = number(minor, "minor", "Minor")?;
    let mut patch = rest;
    let mut build = None;
    if let Some(i) = patch.find('+') {
        build = Some(&patch[i + 1..]);
        patch = &patch[..i];
    }
    let mut pre = None;
    if let Some(i) = patch.find('-') {
        pre = Some(&patch[i + 1..]);
        patch = &patch[..i];
    }
    let patch = number(patch, "patch", "Patch")?;
    let mut version = Version::new(major, minor, patch);
    if let Some(pre) = pre {
        for id in pre.split('.') {
            prerelease_identifier(id)?;
        }
        version.pre = Prerelease::new(pre).map_err(|e| e.to_string())?;
    }
    if let Some(build) = build {
        for id in build.split('.') {
            if id.is_empty() {
                return Err("Build meta data is empty".into());
            }
            if !id.chars().all(alphanum) {
                return Err(format!("Invalid character(s) found in build meta data {}", go_quote(id)));
            }
        }
        version.build = BuildMetadata::new(build).map_err(|e| e.to_string())?;
    }
    Ok(version)
}

/// A check of one pre-release identifier (blang's `NewPRVersion`); also how opm checks each
/// segment of an `olm.package` release.
pub(crate) fn prerelease_identifier(id: &str) -> Result<(), String> {
    if id.is_empty() {
        return Err("Prerelease is empty".into());
    }
    if id.chars().all(|c| c.is_ascii_digit()) {
        if id.len() > 1 && id.starts_with('0') {
            return Err(format!("Numeric PreRelease version must not contain leading zeroes {}", go_quote(id)));
        }
        parse_uint(id)?;
    } else if !id.chars().all(alphanum) {
        return Err(format!("Invalid character(s) found in prerelease {}", go_quote(id)));
    }
    Ok(())
}

fn number(s: &str, lower: &str, upper: &str) -> Result<u64, String> {
    if !s.chars().all(|c| c.is_ascii_digit()) {
        return Err(format!("Invalid character(s) found in {lower} number {}", go_quote(s)));
    }
    if s.len() > 1 && s.starts_with('0') {
        return Err(format!("{upper} number must not contain leading zeroes {}", go_quote(s)));
    }
    parse_uint(s)
}

/// Go's `strconv.ParseUint(s, 10, 64)` on digits only, with its error text.
fn parse_uint(s: &str) -> Result<u64, String> {
    s.parse::<u64>().map_err(|_| {
        let why = if s.is_empty() { "invalid syntax" } else { "value out of range" };
        format!("strconv.ParseUint: parsing {}: {why}", go_quote(s))
    })
}

/// A string quoted as Go's `%q` quotes it (cut to a readable length first, since the values
/// come from catalogs), so messages read as opm's do.
pub(crate) fn go_quote(s: &str) -> String {
    let s = crate::json_words::shown(s);
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{7}' => out.push_str("\\a"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{b}' => out.push_str("\\v"),
            c if (c as u32) < 0x20 || c == '\u{7f}' => out.push_str(&format!("\\x{:02x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &str) -> Version {
        Version::parse(s).unwrap()
    }

    fn holds(range: &str, version: &str) -> bool {
        Range::parse(range).unwrap_or_else(|e| panic!("{range}: {e}")).contains(&v(version))
    }

    fn error(range: &str) -> String {
        Range::parse(range).unwrap_err().to_string()
    }

    #[test]
    fn range_comparators_and_or() {
        for (range, yes, no) in [
            (">=4.1.0 <4.2.0", &["4.1.0", "4.1.9", "4.2.0-rc.1"][..], &["4.0.9", "4.2.0", "4.1.0-rc.1"][..]),
            ("<0.2.0", &["0.1.0", "0.2.0-alpha", "0.0.0"], &["0.2.0", "1.0.0"]),
            (">1.0.0", &["1.0.1", "2.0.0"], &["1.0.0", "1.0.0-rc.1", "0.9.0"]),
            ("<=1.0.0", &["1.0.0", "0.1.0"], &["1.0.1"]),
            ("1.2.3", &["1.2.3", "1.2.3+build.5"], &["1.2.4", "1.2.3-rc.1"]),
            ("=1.2.3", &["1.2.3"], &["1.2.2"]),
            ("==1.2.3", &["1.2.3"], &["1.2.2"]),
            ("!=1.2.3", &["1.2.2", "1.2.4"], &["1.2.3"]),
            ("!1.2.3", &["1.2.2"], &["1.2.3"]),
            ("<2.0.0 || >=3.0.0", &["1.9.9", "3.0.0", "4.0.0"], &["2.0.0", "2.5.0"]),
            (">1.0.0 <2.0.0 || >3.0.0 !4.2.1", &["1.2.3", "1.9.9", "3.1.1"], &["4.2.1", "2.1.1", "1.0.0"]),
            (">= 1.0.0 < 2.0.0", &["1.0.0", "1.5.0"], &["2.0.0", "0.9.0"]),
            ("  >=1.0.0   <2.0.0  ", &["1.5.0"], &["2.0.0"]),
            (">=1.0.0-rc.1 <1.0.0", &["1.0.0-rc.1", "1.0.0-rc.2"], &["1.0.0", "1.0.0-beta"]),
            (">=4.12.0 <4.13.0-nightly-2023-01-01", &["4.12.5", "4.13.0-nightly-2022-12-31"], &["4.13.0"]),
        ] {
            for y in yes {
                assert!(holds(range, y), "{range} should hold {y}");
            }
            for n in no {
                assert!(!holds(range, n), "{range} should not hold {n}");
            }
        }
        assert_eq!(Range::parse(">=1.0.0 <2.0.0").unwrap().to_string(), ">=1.0.0 <2.0.0");
        assert_eq!(">=1.0.0".parse::<Range>().unwrap().as_str(), ">=1.0.0");
    }

    #[test]
    fn range_wildcards_as_blang_expands_them() {
        for (range, yes, no) in [
            ("1.2.x", &["1.2.0", "1.2.99"][..], &["1.3.0", "1.1.9"][..]),
            ("1.x", &["1.0.0", "1.99.0"], &["2.0.0", "0.9.0"]),
            (">=1.2.x", &["1.2.0", "5.0.0"], &["1.1.9"]),
            (">1.2.x", &["1.3.0"], &["1.2.9"]),
            ("<1.2.x", &["1.1.9"], &["1.2.0"]),
            ("<=1.2.x", &["1.2.9"], &["1.3.0"]),
            // blang ANDs the two halves of a negated wildcard, so it holds nothing.
            ("!=1.2.x", &[], &["1.1.0", "1.2.0", "1.2.5", "1.3.0"]),
            (">=2.1.x <2.2.1", &["2.1.0", "2.2.0"], &["2.0.9", "2.2.1"]),
            (">=3.6.x <3.9.9", &["3.6.0", "3.9.8"], &["3.5.0", "3.9.9"]),
            (">1.x", &["2.0.0"], &["1.9.9"]),
            // blang: "1.x.x" is read as a patch wildcard over 1.0, so it means 1.0.x.
            ("1.x.x", &["1.0.0", "1.0.7"], &["1.1.0"]),
            // An operator blang does not know, before a wildcard, is dropped.
            ("~1.x", &["1.0.0"], &["1.0.1"]),
        ] {
            for y in yes {
                assert!(holds(range, y), "{range} should hold {y}");
            }
            for n in no {
                assert!(!holds(range, n), "{range} should not hold {n}");
            }
        }
    }

    #[test]
    fn range_errors_in_blangs_words() {
        assert_eq!(error(""), "Last element in range is '||'");
        assert_eq!(error("|| >1.0.0"), "First element in range is '||'");
        assert_eq!(error(">1.0.0 ||"), "Last element in range is '||'");
        assert_eq!(error("abc"), "Could not get version from string: \"abc\"");
        assert_eq!(error("~1.2.3"), "Could not parse Range \"~1.2.3\": Could not parse comparator \"~\" in \"~1.2.3\"");
        assert_eq!(error("^1.2.3"), "Could not parse Range \"^1.2.3\": Could not parse comparator \"^\" in \"^1.2.3\"");
        assert_eq!(error("v0.1.0"), "Could not parse Range \"v0.1.0\": Could not parse comparator \"v\" in \"v0.1.0\"");
        assert_eq!(
            error(">=1.0"),
            "Could not parse Range \">=1.0\": Could not parse version \"1.0\" in \">=1.0\": No Major.Minor.Patch elements found"
        );
        assert_eq!(
            error("<01.0.0"),
            "Could not parse Range \"<01.0.0\": Could not parse version \"01.0.0\" in \"<01.0.0\": Major number must not \
             contain leading zeroes \"01\""
        );
        assert_eq!(
            error(">=1.0.0 <2.0.0-"),
            "Could not parse Range \"<2.0.0-\": Could not parse version \"2.0.0-\" in \"<2.0.0-\": Prerelease is empty"
        );
        // The pre-release contains an x, so blang takes the wildcard path and loses the version.
        assert_eq!(error("1.0.0-x1"), "Could not get version from string: \"<\"");
        assert!(Range::parse(">=1.0.0-x1").is_ok());
        // A one-character token is dropped by blang's splitting.
        assert_eq!(error("1"), "Last element in range is '||'");
        assert!(holds("1 >=2.0.0", "3.0.0"));
        assert_eq!(
            error(">=1.0.0\t<2.0.0"),
            "Could not parse Range \">=1.0.0\\t<2.0.0\": Could not parse version \"1.0.0\\t<2.0.0\" in \
             \">=1.0.0\\t<2.0.0\": Invalid character(s) found in patch number \"0\\t<2.0.0\""
        );
    }

    #[test]
    fn versions_as_blang_parses_them() {
        assert_eq!(parse_version("1.2.3-rc.1+b.2").unwrap(), v("1.2.3-rc.1+b.2"));
        for (s, why) in [
            ("", "Version string empty"),
            ("1.2", "No Major.Minor.Patch elements found"),
            ("v1.2.3", "Invalid character(s) found in major number \"v1\""),
            ("1.02.3", "Minor number must not contain leading zeroes \"02\""),
            ("1.2.03", "Patch number must not contain leading zeroes \"03\""),
            ("1.2.x", "Invalid character(s) found in patch number \"x\""),
            (".1.2", "strconv.ParseUint: parsing \"\": invalid syntax"),
            ("99999999999999999999.0.0", "strconv.ParseUint: parsing \"99999999999999999999\": value out of range"),
            ("1.2.3-01", "Numeric PreRelease version must not contain leading zeroes \"01\""),
            ("1.2.3-a_b", "Invalid character(s) found in prerelease \"a_b\""),
            ("1.2.3-a..b", "Prerelease is empty"),
            ("1.2.3+", "Build meta data is empty"),
            ("1.2.3+a_b", "Invalid character(s) found in build meta data \"a_b\""),
            ("1.2.3 ", "Invalid character(s) found in patch number \"3 \""),
        ] {
            assert_eq!(parse_version(s).unwrap_err(), why, "{s:?}");
        }
        // Build metadata takes part in neither equality nor order.
        assert!(holds("=1.0.0+a", "1.0.0+b"));
    }
}
