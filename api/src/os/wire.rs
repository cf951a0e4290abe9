//! The protocol between `aloft-agent` and `aloft-os-helper` on the helper's Unix socket.
//!
//! One request per connection: the client connects, writes one JSON line, reads one JSON line,
//! and both sides close. Why not a persistent connection: with socket activation the helper
//! exits when idle, and an OS update makes a handful of calls minutes apart, so reconnecting
//! costs nothing measurable (a connect on a local socket is microseconds) and no side has to
//! notice a half-dead connection.
//!
//! ```text
//! -> {"v":1,"op":"pull","image":"ostree+http://10.0.2.100/repo#aloft/stable/x86_64@<64 hex>"}
//! <- {"v":1,"ok":{"alreadyPresent":false}}
//! <- {"v":1,"error":{"kind":"untrusted","detail":{"checksum":"…","url":"…","reason":"…"}}}
//! ```
//!
//! `v` is [`PROTOCOL_VERSION`]; a helper refuses any other version with an `invalid` error
//! naming both, and a client refuses a reply of another version, so an agent and a helper from
//! different releases fail loudly instead of misreading each other. Images travel as their
//! `osImageURL` text and are parsed again by the helper ([`Request::into_call`]): the helper
//! runs as root with the sysroot in its hands and trusts nothing its client validated.

use super::{kargs, BootCount, OsError, StageRequest, MAX_BOOT_ATTEMPTS};
use crate::osimage::{self, OstreeImage};
use serde::{Deserialize, Serialize};

/// The protocol version both sides speak.
pub const PROTOCOL_VERSION: u32 = 1;
/// Where the helper listens on a node (systemd's `aloft-os-helper.socket`).
pub const DEFAULT_SOCKET: &str = "/run/aloft/os-helper.sock";
/// The longest request line the helper reads: a request carries one URL and two short lists, so
/// anything longer is a mistake or an attack.
pub const MAX_REQUEST_LEN: usize = 64 * 1024;
/// At most this many kernel arguments per list, each at most [`MAX_KARG_LEN`] bytes.
pub const MAX_KARGS: usize = 256;
/// The longest single kernel argument accepted.
pub const MAX_KARG_LEN: usize = 4096;

/// One operation of [`super::OsBackend`], as it travels.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "camelCase", deny_unknown_fields)]
pub enum Request {
    // Variants without fields are written `{}` so that unknown fields are refused on them too.
    Status {},
    HasVerifiedCommit {
        image: String,
    },
    Pull {
        image: String,
    },
    #[serde(rename_all = "camelCase")]
    Stage {
        /// `None`: redeploy the merge deployment's commit with new kernel arguments.
        #[serde(default)]
        image: Option<String>,
        old_kargs: Vec<String>,
        new_kargs: Vec<String>,
    },
    Rollback {},
    DropStaged {},
    BootedCmdline {},
    /// `arm`: boots for the staged deployment; absent: disarm.
    BootCounter {
        #[serde(default)]
        arm: Option<u32>,
    },
    KeepBooted {},
}

/// A request with its protocol version: one line on the socket.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RequestMsg {
    pub v: u32,
    #[serde(flatten)]
    pub request: Request,
}

/// The answer: `ok` with the operation's result, or `error`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Reply {
    pub v: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ok: Option<serde_json::Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<OsError>,
}

impl Reply {
    /// A successful reply carrying `value`.
    pub fn ok(value: serde_json::Value) -> Reply {
        Reply { v: PROTOCOL_VERSION, ok: Some(value), error: None }
    }

    /// A failed reply.
    pub fn error(e: OsError) -> Reply {
        Reply { v: PROTOCOL_VERSION, ok: None, error: Some(e) }
    }
}

/// The answer to `dropStaged`: the deployment dropped, if one was staged. An object, not a bare
/// `null`, which the reply's `ok` could not carry (an absent `ok` is an empty reply).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Dropped {
    pub dropped: Option<super::DeploymentInfo>,
}

/// The answer to `bootCounter`: the counting after the change, `None` when the host has none.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counting {
    pub counting: Option<super::BootCounting>,
}

/// A request after validation: what the helper actually runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Call {
    Status,
    HasVerifiedCommit(OstreeImage),
    Pull(OstreeImage),
    Stage(StageRequest),
    Rollback,
    DropStaged,
    BootedCmdline,
    BootCounter(BootCount),
    KeepBooted,
}

impl Call {
    /// Whether the call writes the repository or the sysroot (remote config, objects,
    /// deployments). The helper runs those one at a time; status reads run beside them.
    pub fn writes(&self) -> bool {
        !matches!(self, Call::Status | Call::BootedCmdline)
    }

    /// The operation's name, for logs.
    pub fn name(&self) -> &'static str {
        match self {
            Call::Status => "status",
            Call::HasVerifiedCommit(_) => "hasVerifiedCommit",
            Call::Pull(_) => "pull",
            Call::Stage(_) => "stage",
            Call::Rollback => "rollback",
            Call::DropStaged => "dropStaged",
            Call::BootedCmdline => "bootedCmdline",
            Call::BootCounter(_) => "bootCounter",
            Call::KeepBooted => "keepBooted",
        }
    }
}

impl Request {
    /// The request for `call` (what the agent sends).
    pub fn from_call(call: &Call) -> Request {
        match call {
            Call::Status => Request::Status {},
            Call::HasVerifiedCommit(i) => Request::HasVerifiedCommit { image: i.to_string() },
            Call::Pull(i) => Request::Pull { image: i.to_string() },
            Call::Stage(r) => Request::Stage {
                image: r.image.as_ref().map(ToString::to_string),
                old_kargs: r.old_kargs.clone(),
                new_kargs: r.new_kargs.clone(),
            },
            Call::Rollback => Request::Rollback {},
            Call::DropStaged => Request::DropStaged {},
            Call::BootedCmdline => Request::BootedCmdline {},
            Call::BootCounter(BootCount::Arm(n)) => Request::BootCounter { arm: Some(*n) },
            Call::BootCounter(BootCount::Disarm) => Request::BootCounter { arm: None },
            Call::KeepBooted => Request::KeepBooted {},
        }
    }

    /// Validate as the helper must: the image parses as an ostree `osImageURL` (the same rules
    /// the agent applied) and kernel arguments are bounded plain text. A refusal is
    /// [`OsError::Invalid`] naming the field.
    pub fn into_call(self) -> Result<Call, OsError> {
        let image = |s: &str| -> Result<OstreeImage, OsError> {
            osimage::parse(s)
                .map_err(|e| OsError::Invalid(format!("refused by the OS helper: {e}")))?
                .ok_or_else(|| OsError::Invalid("refused by the OS helper: osImageURL is empty".into()))
        };
        Ok(match self {
            Request::Status {} => Call::Status,
            Request::HasVerifiedCommit { image: i } => Call::HasVerifiedCommit(image(&i)?),
            Request::Pull { image: i } => Call::Pull(image(&i)?),
            Request::Stage { image: i, old_kargs, new_kargs } => {
                check_kargs("oldKargs", &old_kargs)?;
                check_kargs("newKargs", &new_kargs)?;
                Call::Stage(StageRequest { image: i.as_deref().map(image).transpose()?, old_kargs, new_kargs })
            }
            Request::Rollback {} => Call::Rollback,
            Request::DropStaged {} => Call::DropStaged,
            Request::BootedCmdline {} => Call::BootedCmdline,
            Request::BootCounter { arm: None } => Call::BootCounter(BootCount::Disarm),
            Request::BootCounter { arm: Some(n) } if (1..=MAX_BOOT_ATTEMPTS).contains(&n) => {
                Call::BootCounter(BootCount::Arm(n))
            }
            Request::BootCounter { arm: Some(n) } => {
                return Err(OsError::Invalid(format!(
                    "refused by the OS helper: arm: {n} boot attempts (1 to {MAX_BOOT_ATTEMPTS})"
                )))
            }
            Request::KeepBooted {} => Call::KeepBooted,
        })
    }
}

/// Kernel arguments the helper accepts: at most [`MAX_KARGS`], each at most [`MAX_KARG_LEN`]
/// bytes, without control characters (a newline would end the BLS entry's `options` line and
/// start a directive of the attacker's choosing).
fn check_kargs(field: &str, args: &[String]) -> Result<(), OsError> {
    if args.len() > MAX_KARGS {
        return Err(OsError::Invalid(format!(
            "refused by the OS helper: {field}: {} kernel arguments (at most {MAX_KARGS})",
            args.len()
        )));
    }
    for a in args {
        if a.len() > MAX_KARG_LEN || a.chars().any(char::is_control) {
            let shown: String = a.chars().take(80).collect();
            return Err(OsError::Invalid(format!(
                "refused by the OS helper: {field}: kernel argument {shown:?} is longer than {MAX_KARG_LEN} bytes \
                 or contains control characters"
            )));
        }
    }
    // Quotes must pair up, or the entry's remaining arguments would be swallowed into one.
    if args.iter().flat_map(|a| kargs::split(a)).any(|a| a.matches('"').count() % 2 == 1) {
        return Err(OsError::Invalid(format!("refused by the OS helper: {field}: unbalanced double quote")));
    }
    Ok(())
}

/// Parse one request line. Errors are [`OsError::Invalid`] replies, never a dropped connection:
/// a client gets told what was wrong.
pub fn parse_request(line: &str) -> Result<Request, OsError> {
    let msg: serde_json::Value =
        serde_json::from_str(line).map_err(|e| OsError::Invalid(format!("malformed request to the OS helper: {e}")))?;
    let mut fields = match msg {
        serde_json::Value::Object(m) => m,
        _ => return Err(OsError::Invalid("malformed request to the OS helper: not a JSON object".into())),
    };
    let v = fields.get("v");
    if v.and_then(serde_json::Value::as_u64) != Some(u64::from(PROTOCOL_VERSION)) {
        return Err(OsError::Invalid(format!(
            "the OS helper speaks protocol version {PROTOCOL_VERSION}, the request {}",
            match v {
                None => "carries no version".to_string(),
                Some(serde_json::Value::Number(n)) if n.as_u64().is_some() => format!("version {n}"),
                Some(other) => format!("has \"v\": {other}, not an integer"),
            }
        )));
    }
    fields.remove("v");
    serde_json::from_value(serde_json::Value::Object(fields))
        .map_err(|e| OsError::Invalid(format!("malformed request to the OS helper: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    const SUM: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    fn line(r: Request) -> String {
        serde_json::to_string(&RequestMsg { v: PROTOCOL_VERSION, request: r }).unwrap()
    }

    #[test]
    fn requests_round_trip() {
        let image =
            osimage::parse(&format!("ostree+http://10.0.2.100:8080/repo#aloft/stable/x86_64@{SUM}")).unwrap().unwrap();
        let calls = [
            Call::Status,
            Call::HasVerifiedCommit(image.clone()),
            Call::Pull(image.clone()),
            Call::Stage(StageRequest { image: Some(image), old_kargs: vec!["a=1".into()], new_kargs: vec![] }),
            Call::Stage(StageRequest { image: None, old_kargs: vec![], new_kargs: vec!["b".into()] }),
            Call::Rollback,
            Call::DropStaged,
            Call::BootedCmdline,
            Call::BootCounter(BootCount::Arm(3)),
            Call::BootCounter(BootCount::Disarm),
            Call::KeepBooted,
        ];
        for c in calls {
            let text = line(Request::from_call(&c));
            assert!(!text.contains('\n'));
            assert_eq!(parse_request(&text).unwrap().into_call().unwrap(), c, "{text}");
        }
        assert_eq!(line(Request::Status {}), r#"{"v":1,"op":"status"}"#);
        assert_eq!(line(Request::DropStaged {}), r#"{"v":1,"op":"dropStaged"}"#);
        assert!(Call::DropStaged.writes(), "dropping a staged deployment writes the sysroot");
    }

    /// An answer of "nothing" still travels as an answer: `ok: null` reads as no answer.
    #[test]
    fn nothing_dropped_is_an_answer() {
        let text = serde_json::to_string(&Reply::ok(serde_json::to_value(Dropped { dropped: None }).unwrap())).unwrap();
        let back: Reply = serde_json::from_str(&text).unwrap();
        let ok = back.ok.expect("an ok reply");
        assert_eq!(serde_json::from_value::<Dropped>(ok).unwrap(), Dropped { dropped: None }, "{text}");
    }

    #[test]
    fn errors_keep_their_variant_across_the_wire() {
        let errors = [
            OsError::Untrusted { checksum: SUM.into(), url: "http://h/r".into(), reason: "not signed".into() },
            OsError::Pull { checksum: SUM.into(), url: "http://h/r".into(), message: "404".into() },
            OsError::ostree("staging", "no space"),
            OsError::Invalid("no previous deployment".into()),
            OsError::Cancelled { operation: format!("pulling OS commit {SUM}") },
        ];
        for e in errors {
            let text = serde_json::to_string(&Reply::error(e.clone())).unwrap();
            let back: Reply = serde_json::from_str(&text).unwrap();
            assert_eq!(back.error.as_ref(), Some(&e), "{text}");
            assert_eq!(back.error.unwrap().to_string(), e.to_string());
        }
    }

    #[test]
    fn malformed_and_foreign_requests_are_refused_by_name() {
        let bad = |l: &str| parse_request(l).unwrap_err().to_string();
        assert!(bad("not json").starts_with("malformed request"), "{}", bad("not json"));
        assert!(bad(r#"{"op":"status"}"#).contains("carries no version"));
        assert!(bad(r#"{"v":2,"op":"status"}"#).contains("version 2"));
        assert!(bad(r#"{"v":1,"op":"format-disk"}"#).starts_with("malformed request"));
        assert!(bad(r#"{"v":1,"op":"pull"}"#).starts_with("malformed request"));
        assert!(bad(r#"{"v":1,"op":"status","x":1}"#).starts_with("malformed request"));
    }

    #[test]
    fn hostile_images_and_kargs_are_refused_by_the_helper_too() {
        let refused = |r: Request| r.into_call().unwrap_err().to_string();
        for url in [
            String::new(),
            format!("ostree+file:///etc#r@{SUM}"),
            format!("ostree+http://h/repo#r@{SUM}\nX"),
            format!("ostree+http://h/../../etc#r@{SUM}"),
            "ostree+http://h/repo#r@deadbeef".into(),
            format!("quay.io/x@sha256:{SUM}"),
        ] {
            let msg = refused(Request::Pull { image: url.clone() });
            assert!(msg.starts_with("refused by the OS helper"), "{url:?}: {msg}");
        }
        for args in [vec!["a=1\nlinux /evil".to_string()], vec!["x".repeat(MAX_KARG_LEN + 1)], vec!["a=\"x".into()]] {
            let msg = refused(Request::Stage { image: None, old_kargs: vec![], new_kargs: args });
            assert!(msg.contains("newKargs"), "{msg}");
        }
        let many = vec!["a".to_string(); MAX_KARGS + 1];
        assert!(refused(Request::Stage { image: None, old_kargs: many, new_kargs: vec![] }).contains("oldKargs"));
        for n in [0, MAX_BOOT_ATTEMPTS + 1, u32::MAX] {
            let msg = refused(Request::BootCounter { arm: Some(n) });
            assert!(msg.contains(&format!("arm: {n} boot attempts")), "{msg}");
        }
        let bad = |l: &str| parse_request(l).unwrap_err().to_string();
        assert!(bad(r#"{"v":1,"op":"bootCounter","arm":-1}"#).starts_with("malformed request"));
        assert!(bad(r#"{"v":1,"op":"bootCounter","arm":"3"}"#).starts_with("malformed request"));
    }
}
