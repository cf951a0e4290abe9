//! The `osImageURL` form aloft agents can apply: an ostree commit pinned by checksum, with the
//! repository to fetch it from and the ref it belongs to.
//!
//! ```text
//! ostree+http://HOST[:PORT]/PATH#REF@CHECKSUM
//! ostree+https://HOST[:PORT]/PATH#REF@CHECKSUM      (CHECKSUM: 64 lowercase hex digits)
//! ```
//!
//! Why a pinned checksum and not just a ref: a rendered config must name exactly one OS, so
//! that every node of a pool converges on the same bits and the agent can verify after boot that
//! it runs them. The ref is kept so the deployment's origin names where updates come from (as
//! `rpm-ostree status` and `ostree admin status` show it), and the repository URL so the agent
//! needs no out-of-band configuration besides the trusted GPG keys.
//!
//! The empty string means "no OS management": the node keeps the OS it booted. Anything else
//! (container references such as `quay.io/...@sha256:...` that OpenShift YAML carries) is not
//! refused here: the coordinator renders it unchanged and only the agent refuses to apply it,
//! with the error below naming what is wrong. Parsing is pure, shared by both sides.

use std::fmt;

/// The longest `osImageURL` accepted (a URL longer than this is a mistake or an attack).
pub const MAX_LEN: usize = 2048;
/// The longest ref, as libostree limits ref names in practice.
const MAX_REF_LEN: usize = 255;

/// The transport of the repository URL.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scheme {
    Http,
    Https,
}

impl Scheme {
    pub fn as_str(self) -> &'static str {
        match self {
            Scheme::Http => "http",
            Scheme::Https => "https",
        }
    }
}

/// A parsed, validated `ostree+http(s)://...#REF@CHECKSUM`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OstreeImage {
    pub scheme: Scheme,
    /// Host name, IPv4 address, or IPv6 address in brackets (`[::1]`).
    pub host: String,
    pub port: Option<u16>,
    /// The repository's path on the server, starting with `/`.
    pub path: String,
    /// The ostree ref, e.g. `aloft/stable/x86_64`.
    pub ref_name: String,
    /// The commit checksum: 64 lowercase hex digits.
    pub checksum: String,
}

impl OstreeImage {
    /// The repository URL as libostree's remote `url=` wants it: `http://host:port/path`.
    pub fn repo_url(&self) -> String {
        match self.port {
            Some(p) => format!("{}://{}:{p}{}", self.scheme.as_str(), self.host, self.path),
            None => format!("{}://{}{}", self.scheme.as_str(), self.host, self.path),
        }
    }
}

impl fmt::Display for OstreeImage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ostree+{}#{}@{}", self.repo_url(), self.ref_name, self.checksum)
    }
}

/// What is wrong with an `osImageURL`. Every message starts with the field name and quotes the
/// offending value (cut to 200 characters), so a Degraded reason says what to fix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OsImageError {
    #[error("osImageURL {value:?}: longer than {MAX_LEN} characters")]
    TooLong { value: String },
    #[error("osImageURL {value:?}: contains whitespace or control characters")]
    ControlCharacters { value: String },
    #[error(
        "osImageURL {value:?}: not an ostree commit reference; aloft-agent applies only \
         ostree+http(s)://HOST[:PORT]/PATH#REF@CHECKSUM (container image references are not supported)"
    )]
    NotOstree { value: String },
    #[error("osImageURL {value:?}: the host is missing or invalid: {why}")]
    Host { value: String, why: &'static str },
    #[error("osImageURL {value:?}: the port is invalid (want 1-65535)")]
    Port { value: String },
    #[error("osImageURL {value:?}: the repository path is invalid: {why}")]
    Path { value: String, why: &'static str },
    #[error("osImageURL {value:?}: missing #REF@CHECKSUM after the repository URL")]
    MissingFragment { value: String },
    #[error("osImageURL {value:?}: the ref is invalid: {why}")]
    Ref { value: String, why: &'static str },
    #[error("osImageURL {value:?}: the commit checksum must be 64 lowercase hex digits")]
    Checksum { value: String },
}

use crate::json_words::shown;

/// Parse an `osImageURL`: `Ok(None)` for the empty string (no OS management), `Ok(Some(_))`
/// for a valid ostree reference, an error naming the defect otherwise.
pub fn parse(value: &str) -> Result<Option<OstreeImage>, OsImageError> {
    if value.is_empty() {
        return Ok(None);
    }
    let v = || shown(value);
    if value.len() > MAX_LEN {
        return Err(OsImageError::TooLong { value: v() });
    }
    if value.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(OsImageError::ControlCharacters { value: v() });
    }
    let (scheme, rest) = if let Some(r) = value.strip_prefix("ostree+http://") {
        (Scheme::Http, r)
    } else if let Some(r) = value.strip_prefix("ostree+https://") {
        (Scheme::Https, r)
    } else {
        return Err(OsImageError::NotOstree { value: v() });
    };
    let (location, fragment) = rest.split_once('#').ok_or_else(|| OsImageError::MissingFragment { value: v() })?;
    let (authority, path) = match location.find('/') {
        Some(i) => location.split_at(i),
        None => return Err(OsImageError::Path { value: v(), why: "it must start with / (e.g. /repo)" }),
    };
    let (host, port) = split_host_port(authority).map_err(|e| e.with_value(v()))?;
    check_path(path).map_err(|why| OsImageError::Path { value: v(), why })?;
    let (ref_name, checksum) = fragment.rsplit_once('@').ok_or_else(|| OsImageError::Checksum { value: v() })?;
    check_ref(ref_name).map_err(|why| OsImageError::Ref { value: v(), why })?;
    if checksum.len() != 64 || !checksum.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)) {
        return Err(OsImageError::Checksum { value: v() });
    }
    Ok(Some(OstreeImage {
        scheme,
        host: host.to_string(),
        port,
        path: path.to_string(),
        ref_name: ref_name.to_string(),
        checksum: checksum.to_string(),
    }))
}

/// An authority error before the value is attached.
enum AuthorityError {
    Host(&'static str),
    Port,
}

impl AuthorityError {
    fn with_value(self, value: String) -> OsImageError {
        match self {
            AuthorityError::Host(why) => OsImageError::Host { value, why },
            AuthorityError::Port => OsImageError::Port { value },
        }
    }
}

fn split_host_port(authority: &str) -> Result<(&str, Option<u16>), AuthorityError> {
    if authority.contains('@') {
        return Err(AuthorityError::Host("credentials in the URL are not allowed"));
    }
    let (host, port) = if let Some(inner) = authority.strip_prefix('[') {
        let end = inner.find(']').ok_or(AuthorityError::Host("unclosed [ in an IPv6 address"))?;
        let addr = &inner[..end];
        if addr.is_empty() || !addr.bytes().all(|b| b.is_ascii_hexdigit() || b == b':' || b == b'.') {
            return Err(AuthorityError::Host("invalid IPv6 address"));
        }
        let after = &inner[end + 1..];
        let port = match after {
            "" => None,
            p => Some(p.strip_prefix(':').ok_or(AuthorityError::Host("unexpected text after ]"))?),
        };
        (&authority[..end + 2], port)
    } else {
        match authority.split_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (authority, None),
        }
    };
    if host.is_empty() {
        return Err(AuthorityError::Host("empty"));
    }
    if !host.starts_with('[') {
        if host.len() > 253 {
            return Err(AuthorityError::Host("longer than 253 characters"));
        }
        let label_ok = |l: &str| {
            !l.is_empty()
                && l.len() <= 63
                && !l.starts_with('-')
                && !l.ends_with('-')
                && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
        };
        if !host.split('.').all(label_ok) {
            return Err(AuthorityError::Host("want a DNS name or an IP address"));
        }
    }
    let port = match port {
        None => None,
        Some(p) => {
            if p.is_empty() || p.len() > 5 || !p.bytes().all(|b| b.is_ascii_digit()) {
                return Err(AuthorityError::Port);
            }
            match p.parse::<u16>() {
                Ok(0) | Err(_) => return Err(AuthorityError::Port),
                Ok(n) => Some(n),
            }
        }
    };
    Ok((host, port))
}

fn check_path(path: &str) -> Result<(), &'static str> {
    if path.contains('?') {
        return Err("query strings are not allowed");
    }
    if path.contains("//") {
        return Err("empty path segments (//) are not allowed");
    }
    if path.split('/').any(|s| s == "." || s == "..") {
        return Err(". and .. segments are not allowed");
    }
    if !path.bytes().all(|b| b.is_ascii_alphanumeric() || b"-._~/+".contains(&b)) {
        return Err("only letters, digits and -._~/+ are allowed");
    }
    Ok(())
}

/// libostree's ref grammar: segments of `[A-Za-z0-9_][A-Za-z0-9_.-]*` joined by `/`.
fn check_ref(r: &str) -> Result<(), &'static str> {
    if r.is_empty() {
        return Err("empty");
    }
    if r.len() > MAX_REF_LEN {
        return Err("longer than 255 characters");
    }
    for seg in r.split('/') {
        let mut bytes = seg.bytes();
        match bytes.next() {
            None => return Err("empty segment"),
            Some(b) if !(b.is_ascii_alphanumeric() || b == b'_') => {
                return Err("each segment must start with a letter, digit or _")
            }
            _ => {}
        }
        if !bytes.all(|b| b.is_ascii_alphanumeric() || b"_.-".contains(&b)) {
            return Err("only letters, digits, _ . - and / are allowed");
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const SUM: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    #[test]
    fn parses_the_forms() {
        assert_eq!(parse("").unwrap(), None, "empty: no OS management");
        let i = parse(&format!("ostree+http://10.0.2.100:8080/repo#aloft/stable/x86_64@{SUM}")).unwrap().unwrap();
        assert_eq!(i.scheme, Scheme::Http);
        assert_eq!((i.host.as_str(), i.port, i.path.as_str()), ("10.0.2.100", Some(8080), "/repo"));
        assert_eq!(i.ref_name, "aloft/stable/x86_64");
        assert_eq!(i.checksum, SUM);
        assert_eq!(i.repo_url(), "http://10.0.2.100:8080/repo");
        assert_eq!(i.to_string(), format!("ostree+http://10.0.2.100:8080/repo#aloft/stable/x86_64@{SUM}"));
        let s = parse(&format!("ostree+https://updates.example.com/os/repo/#fedora/x86_64/coreos/stable@{SUM}"))
            .unwrap()
            .unwrap();
        assert_eq!(
            (s.scheme, s.port, s.repo_url()),
            (Scheme::Https, None, "https://updates.example.com/os/repo/".into())
        );
        let v6 = parse(&format!("ostree+http://[::1]:9000/#r@{SUM}")).unwrap().unwrap();
        assert_eq!((v6.host.as_str(), v6.port, v6.path.as_str()), ("[::1]", Some(9000), "/"));
        assert_eq!(v6.repo_url(), "http://[::1]:9000/");
    }

    /// Hostile and malformed values: each is refused, and the message names the field and the
    /// defect.
    #[test]
    fn refuses_hostile_and_malformed_values() {
        let long = format!("ostree+http://h/{}#r@{SUM}", "a".repeat(MAX_LEN));
        let long_ref = format!("ostree+http://h/r#{}@{SUM}", "a".repeat(300));
        let cases: Vec<(String, &str)> = vec![
            ("quay.io/openshift/okd-content@sha256:".to_string() + SUM, "container image references"),
            (format!("registry.example.com/oscontainer@sha256:{SUM}"), "not an ostree commit reference"),
            (format!("http://host/repo#r@{SUM}"), "not an ostree commit reference"),
            (format!("ostree+ftp://host/repo#r@{SUM}"), "not an ostree commit reference"),
            (format!("OSTREE+HTTP://host/repo#r@{SUM}"), "not an ostree commit reference"),
            (format!("ostree+file:///srv/repo#r@{SUM}"), "not an ostree commit reference"),
            ("ostree+http://host/repo".to_string(), "missing #REF@CHECKSUM"),
            ("ostree+http://host/repo#aloft/stable/x86_64".to_string(), "checksum"),
            (format!("ostree+http://host/repo#r@{}", &SUM[..63]), "checksum"),
            (format!("ostree+http://host/repo#r@{}", SUM.to_uppercase()), "checksum"),
            (format!("ostree+http://host/repo#r@{SUM}0"), "checksum"),
            (format!("ostree+http://host/repo#r@{}g", &SUM[..63]), "checksum"),
            (format!("ostree+http://host/repo#@{SUM}"), "ref is invalid: empty"),
            (format!("ostree+http://host/repo#../../etc@{SUM}"), "ref is invalid"),
            (format!("ostree+http://host/repo#a//b@{SUM}"), "ref is invalid: empty segment"),
            (format!("ostree+http://host/repo#-a@{SUM}"), "ref is invalid"),
            (format!("ostree+http://host/repo#a:b@{SUM}"), "ref is invalid"),
            (long_ref, "ref is invalid: longer"),
            (format!("ostree+http://user:pw@host/repo#r@{SUM}"), "credentials"),
            (format!("ostree+http:///repo#r@{SUM}"), "host is missing or invalid: empty"),
            (format!("ostree+http://ho_st/repo#r@{SUM}"), "host is missing or invalid"),
            (format!("ostree+http://-host/repo#r@{SUM}"), "host is missing or invalid"),
            (format!("ostree+http://[::1/repo#r@{SUM}"), "unclosed"),
            (format!("ostree+http://[zz]/repo#r@{SUM}"), "invalid IPv6"),
            (format!("ostree+http://host:0/repo#r@{SUM}"), "port is invalid"),
            (format!("ostree+http://host:65536/repo#r@{SUM}"), "port is invalid"),
            (format!("ostree+http://host:/repo#r@{SUM}"), "port is invalid"),
            (format!("ostree+http://host:80a/repo#r@{SUM}"), "port is invalid"),
            (format!("ostree+http://host#r@{SUM}"), "must start with /"),
            (format!("ostree+http://host/../etc/repo#r@{SUM}"), ". and .. segments"),
            (format!("ostree+http://host/repo?x=1#r@{SUM}"), "query strings"),
            (format!("ostree+http://host//repo#r@{SUM}"), "empty path segments"),
            (format!("ostree+http://host/re%2e%2epo#r@{SUM}"), "only letters"),
            (format!("ostree+http://host/repo#r@{SUM}\n"), "whitespace or control"),
            (format!("ostree+http://host/re po#r@{SUM}"), "whitespace or control"),
            (format!("ostree+http://host/repo\0#r@{SUM}"), "whitespace or control"),
            (long, "longer than 2048"),
        ];
        assert!(cases.len() >= 10);
        for (value, want) in &cases {
            let err = parse(value).expect_err(value);
            let msg = err.to_string();
            assert!(msg.starts_with("osImageURL "), "{value:?}: {msg}");
            assert!(msg.contains(want), "{value:?}: want {want:?} in {msg:?}");
            assert!(msg.len() < 600, "messages stay readable: {msg}");
        }
    }
}
