//! What a node writes from a config, checked before anything is stored: systemd unit and drop-in
//! names, file contents (inline `data:` URLs, optionally gzip-compressed and hash-verified) and
//! kernel arguments. The API server refuses what an agent would refuse, so a bad config fails
//! at `kubectl apply` instead of degrading nodes minutes later; the agent can call the same
//! functions (it has its own copies in `units.rs` and `dataurl.rs` until it switches).
//!
//! Nothing is ever fetched: a node that downloads what a config points at can be made to
//! download anything, so MCO, and aloft, accept inline `data:` URLs only.

use crate::machineconfig::MachineConfigSpec;
use crate::reconcile::FieldError;
use serde_json::Value;
use sha2::{Digest, Sha256, Sha512};
use std::io::Read;

/// Largest decoded file an agent writes: 10 MiB.
pub const MAX_FILE_SIZE: u64 = 10 * 1024 * 1024;
/// Largest total of decoded file contents in one config.
pub const MAX_TOTAL_SIZE: u64 = 64 * 1024 * 1024;

/// The suffixes systemd knows (systemd.unit(5)); Ignition refuses any other extension.
const UNIT_TYPES: &[&str] =
    &["service", "socket", "device", "mount", "automount", "swap", "target", "path", "timer", "slice", "scope"];

/// systemd's own limit on unit names (UNIT_NAME_MAX - 1).
const MAX_UNIT_NAME: usize = 255;

/// Checks a unit name the way systemd's `unit_name_is_valid` does: `prefix[@instance].type`
/// with only `[A-Za-z0-9:_.\-]` in prefix and instance. A name with `/` would be a path, and a
/// path is how a config escapes `/etc/systemd/system`.
pub fn check_unit_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("unit name is empty".into());
    }
    if name.len() > MAX_UNIT_NAME {
        return Err(format!("unit name is longer than {MAX_UNIT_NAME} bytes"));
    }
    if let Some(m) = crate::node_limits::name_length_error(name) {
        return Err(format!("unit {m}"));
    }
    if name.contains('/') {
        return Err(format!("unit name {name:?} contains '/'"));
    }
    let (stem, ty) = name.rsplit_once('.').ok_or_else(|| format!("unit name {name:?} has no type suffix"))?;
    if !UNIT_TYPES.contains(&ty) {
        return Err(format!("unit name {name:?} has an unknown type {ty:?} (one of {})", UNIT_TYPES.join(", ")));
    }
    let valid = |s: &str| s.chars().all(|c| c.is_ascii_alphanumeric() || ":_.\\-".contains(c));
    let (prefix, instance) = match stem.split_once('@') {
        Some((p, i)) => (p, Some(i)),
        None => (stem, None),
    };
    if prefix.is_empty() || !valid(prefix) || instance.is_some_and(|i| !valid(i)) {
        return Err(format!("{name:?} is not a valid systemd unit name"));
    }
    Ok(())
}

/// Checks a drop-in name: a plain `*.conf` file name (Ignition's rule), never a path.
pub fn check_dropin_name(name: &str) -> Result<(), String> {
    if name.contains('/') {
        return Err(format!("drop-in name {name:?} contains '/'"));
    }
    if name.contains('\0') || name.len() > MAX_UNIT_NAME {
        return Err(format!("drop-in name {name:?} is not a valid file name"));
    }
    if let Some(m) = crate::node_limits::name_length_error(name) {
        return Err(format!("drop-in {m}"));
    }
    if !name.ends_with(".conf") || name == ".conf" {
        return Err(format!("drop-in name {name:?} must be <name>.conf"));
    }
    Ok(())
}

/// Checks unit or drop-in contents the way Ignition does before MCO accepts a config
/// (`validateUnitContent`: go-systemd's `unit.Deserialize`): section headers `[Name]` closed on
/// their line with nothing after them, every other non-blank, non-comment line a `Key=value`
/// (a trailing `\` continues it on the next line), no NUL byte. Only the syntax: what the keys
/// mean is systemd's business, as it is Ignition's. No maintained Rust crate parses unit files
/// to this grammar, hence this small parser.
pub fn check_unit_contents(contents: &str) -> Result<(), String> {
    if contents.contains('\0') {
        return Err("invalid unit content: contains a NUL byte".into());
    }
    let mut continued = false;
    for (i, raw) in contents.lines().enumerate() {
        let n = i + 1;
        let line = raw.trim_start();
        let was_continued = std::mem::replace(&mut continued, false);
        if was_continued {
            // The rest of a value: anything goes.
            continued = line.ends_with('\\');
            continue;
        }
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        if let Some(rest) = line.strip_prefix('[') {
            let Some((name, after)) = rest.split_once(']') else {
                return Err(format!("invalid unit content: line {n}: section header {line:?} has no closing ']'"));
            };
            if name.is_empty() {
                return Err(format!("invalid unit content: line {n}: empty section name"));
            }
            if !after.trim().is_empty() {
                return Err(format!("invalid unit content: line {n}: text after the section header {line:?}"));
            }
            continue;
        }
        if !line.contains('=') {
            return Err(format!(
                "invalid unit content: line {n}: {:?} is neither a [Section] header nor a Key=value line",
                line.chars().take(40).collect::<String>()
            ));
        }
        continued = line.ends_with('\\');
    }
    Ok(())
}

/// Why file contents could not be decoded. Each names the sub-field of `contents` it is about.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    #[error("only inline data: URLs are supported (no remote fetch), got a {scheme:?} source")]
    NotDataUrl { scheme: String },
    #[error("malformed data URL: {0}")]
    BadUrl(String),
    #[error("invalid base64 in data URL")]
    BadBase64,
    #[error("unsupported compression {0:?} (only \"\" and \"gzip\")")]
    BadCompression(String),
    #[error("invalid gzip data: {0}")]
    BadGzip(String),
    #[error("decoded contents exceed {MAX_FILE_SIZE} bytes")]
    TooLarge,
    #[error("verification hash {0:?} is not sha256-<hex> or sha512-<hex>")]
    BadHashSpec(String),
    #[error("contents do not match the verification hash {0:?}")]
    HashMismatch(String),
}

impl DecodeError {
    /// The sub-field of `contents` the error is about.
    pub fn field(&self) -> &'static str {
        match self {
            DecodeError::BadCompression(_) | DecodeError::BadGzip(_) => "compression",
            DecodeError::BadHashSpec(_) | DecodeError::HashMismatch(_) => "verification.hash",
            _ => "source",
        }
    }
}

/// Decodes `source` (a data URL), then decompresses per `compression` and checks `hash`
/// (Ignition's `sha512-<hex>`/`sha256-<hex>`; with a compression, of the decompressed contents,
/// as Ignition's spec says and its fetcher checks: the hash a Butane or `ignition-validate`
/// config carries for a gzip file was refused; one of the compressed bytes is still taken).
/// Bounded: at most [`MAX_FILE_SIZE`] bytes come out, so a small gzip bomb cannot exhaust memory.
pub fn decode(source: &str, compression: Option<&str>, hash: Option<&str>) -> Result<Vec<u8>, DecodeError> {
    let scheme = source.split_once(':').map(|(s, _)| s).unwrap_or("");
    if !scheme.eq_ignore_ascii_case("data") {
        return Err(DecodeError::NotDataUrl { scheme: scheme.to_string() });
    }
    let url = data_url::DataUrl::process(source).map_err(|e| DecodeError::BadUrl(e.to_string()))?;
    let (raw, _) = url.decode_to_vec().map_err(|_| DecodeError::BadBase64)?;
    match compression.unwrap_or("") {
        "" if raw.len() as u64 > MAX_FILE_SIZE => Err(DecodeError::TooLarge),
        "" => {
            if let Some(h) = hash {
                verify_hash(&raw, h)?;
            }
            Ok(raw)
        }
        "gzip" => {
            let contents = gunzip(&raw)?;
            if let Some(h) = hash {
                // A hash of the compressed bytes, the rule aloft followed before, is still
                // taken: configs stored then keep applying on upgraded agents.
                verify_hash(&contents, h).or_else(|e| verify_hash(&raw, h).map_err(|_| e))?;
            }
            Ok(contents)
        }
        other => Err(DecodeError::BadCompression(other.to_string())),
    }
}

fn gunzip(raw: &[u8]) -> Result<Vec<u8>, DecodeError> {
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(raw)
        .take(MAX_FILE_SIZE + 1)
        .read_to_end(&mut out)
        .map_err(|e| DecodeError::BadGzip(e.to_string()))?;
    if out.len() as u64 > MAX_FILE_SIZE {
        return Err(DecodeError::TooLarge);
    }
    Ok(out)
}

fn verify_hash(raw: &[u8], spec: &str) -> Result<(), DecodeError> {
    let bad = || DecodeError::BadHashSpec(spec.to_string());
    let (algo, want) = spec.split_once('-').ok_or_else(bad)?;
    let want = hex::decode(want).map_err(|_| bad())?;
    let got: Vec<u8> = match algo {
        "sha256" => Sha256::digest(raw).to_vec(),
        "sha512" => Sha512::digest(raw).to_vec(),
        _ => return Err(bad()),
    };
    if got != want {
        return Err(DecodeError::HashMismatch(spec.to_string()));
    }
    Ok(())
}

/// Why one kernel argument entry is refused, or `None`. An entry may hold several arguments
/// separated by spaces (`"a=1 b=2"`): MCO splits entries the way the kernel splits its command
/// line, and so does aloft. The limits are the OS helper's ([`crate::os::wire`]): a control
/// character would end the boot entry's `options` line, an unpaired quote would swallow the
/// arguments after it.
pub fn kernel_argument_error(arg: &str) -> Option<String> {
    use crate::os::wire::MAX_KARG_LEN;
    if arg.trim().is_empty() {
        return Some("a kernel argument may not be empty".into());
    }
    if arg.len() > MAX_KARG_LEN {
        return Some(format!("a kernel argument may be at most {MAX_KARG_LEN} bytes"));
    }
    if arg.chars().any(char::is_control) {
        return Some(format!("kernel argument {arg:?} contains a control character"));
    }
    if crate::os::kargs::split(arg).iter().any(|a| a.matches('"').count() % 2 == 1) {
        return Some(format!("kernel argument {arg:?} has an unpaired double quote"));
    }
    if crate::os::kargs::split(arg).iter().any(|a| a.starts_with("ostree=")) {
        // libostree writes its own `ostree=` for each deployment; a node asked for another
        // would never find it on its command line after the reboot (Degraded, restaged).
        return Some(format!("kernel argument {arg:?}: ostree= is libostree's own, set for every deployment"));
    }
    None
}

/// Every check of this module on one spec: `spec.kernelArguments`, and the units, drop-ins and
/// file contents of `spec.config` (any accepted Ignition version; read as 3.5). Field paths
/// index the config as sent. All errors are returned, so a user fixes them in one round.
pub fn spec_errors(spec: &MachineConfigSpec) -> Vec<FieldError> {
    let mut out = Vec::new();
    let err = |field: String, message: String| FieldError { field, message };
    if spec.kernel_arguments.len() > crate::os::wire::MAX_KARGS {
        out.push(err(
            "spec.kernelArguments".into(),
            format!("at most {} kernel arguments are allowed", crate::os::wire::MAX_KARGS),
        ));
    }
    for (i, a) in spec.kernel_arguments.iter().enumerate() {
        if let Some(m) = kernel_argument_error(a) {
            out.push(err(format!("spec.kernelArguments[{i}]"), m));
        }
    }
    let cfg = crate::ignition::parse_config(&spec.config).unwrap_or_else(|_| spec.config.clone());
    for (i, u) in list(&cfg, "/systemd/units").iter().enumerate() {
        let field = format!("spec.config.systemd.units[{i}]");
        let name = u.get("name").and_then(Value::as_str).unwrap_or("");
        if let Err(m) = check_unit_name(name) {
            out.push(err(format!("{field}.name"), m));
        }
        if let Some(Err(m)) = u.get("contents").and_then(Value::as_str).map(check_unit_contents) {
            out.push(err(format!("{field}.contents"), m));
        }
        for (k, d) in list(u, "/dropins").iter().enumerate() {
            let dname = d.get("name").and_then(Value::as_str).unwrap_or("");
            if let Err(m) = check_dropin_name(dname) {
                out.push(err(format!("{field}.dropins[{k}].name"), m));
            }
            if let Some(Err(m)) = d.get("contents").and_then(Value::as_str).map(check_unit_contents) {
                out.push(err(format!("{field}.dropins[{k}].contents"), m));
            }
        }
    }
    out.extend(node_limit_errors(&spec.config, &cfg));
    let mut total = 0u64;
    for (i, f) in list(&cfg, "/storage/files").iter().enumerate() {
        let Some(c) = f.get("contents").filter(|c| c.is_object()) else { continue };
        let Some(source) = c.get("source").and_then(Value::as_str) else { continue };
        let compression = c.get("compression").and_then(Value::as_str);
        if compression.is_some_and(|c| !c.is_empty() && c != "gzip") {
            // The Ignition check names an unsupported compression; one cause is enough.
            continue;
        }
        let hash = c.pointer("/verification/hash").and_then(Value::as_str);
        let field = format!("spec.config.storage.files[{i}].contents");
        match decode(source, compression, hash) {
            Ok(bytes) => {
                total += bytes.len() as u64;
                if total > MAX_TOTAL_SIZE {
                    out.push(err(
                        format!("{field}.source"),
                        format!("the decoded contents of all files exceed {MAX_TOTAL_SIZE} bytes"),
                    ));
                    break;
                }
            }
            Err(e) => out.push(err(format!("{field}.{}", e.field()), e.to_string())),
        }
    }
    out
}

/// What every node would refuse ([`crate::node_limits`]) in `raw` (the config as sent) and
/// `cfg` (read as 3.5): refused at admission with the agent's own messages.
fn node_limit_errors(raw: &Value, cfg: &Value) -> Vec<FieldError> {
    use crate::node_limits as limits;
    let mut out = Vec::new();
    let mut err = |field: String, message: String| out.push(FieldError { field, message });
    for key in limits::fetched_configs(raw) {
        err(format!("spec.config.ignition.config.{key}"), limits::FETCH_REFUSED.into());
    }
    for (i, f) in list(cfg, "/storage/files").iter().enumerate() {
        let field = format!("spec.config.storage.files[{i}]");
        if let Some(m) = f.get("path").and_then(Value::as_str).and_then(limits::path_error) {
            err(format!("{field}.path"), m);
        }
        for key in ["user", "group"] {
            if let Some((under, m)) = f.get(key).and_then(Value::as_object).and_then(limits::owner_error) {
                let at = if under.is_empty() { format!("{field}.{key}") } else { format!("{field}.{key}.{under}") };
                err(at, m);
            }
        }
        let contents = f.get("contents");
        let compressed =
            contents.and_then(|c| c.get("compression")).and_then(Value::as_str).is_some_and(|c| !c.is_empty());
        if compressed && contents.and_then(|c| c.get("source")).is_none_or(Value::is_null) {
            err(format!("{field}.contents.compression"), limits::COMPRESSION_WITHOUT_SOURCE.into());
        }
    }
    if let Some((_, field, message)) = limits::storage_collision(cfg) {
        err(field, message);
    }
    for (i, u) in list(cfg, "/passwd/users").iter().enumerate() {
        if u.get("name").and_then(Value::as_str) != Some("core") {
            continue; // other users are unreconcilable: the render names them
        }
        let field = format!("spec.config.passwd.users[{i}]");
        for (k, key) in list(u, "/sshAuthorizedKeys").iter().enumerate() {
            if let Some(m) = key.as_str().and_then(limits::ssh_key_error) {
                err(format!("{field}.sshAuthorizedKeys[{k}]"), m.into());
            }
        }
        if let Some(m) = u.get("passwordHash").and_then(Value::as_str).and_then(limits::password_hash_error) {
            err(format!("{field}.passwordHash"), m.into());
        }
    }
    out
}

fn list<'a>(v: &'a Value, pointer: &str) -> &'a [Value] {
    v.pointer(pointer).and_then(Value::as_array).map(Vec::as_slice).unwrap_or(&[])
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn unit_names_follow_systemd() {
        for ok in ["kubelet.service", "foo@.service", "getty@tty1.service", "a:b-c_d.e.timer", "x\\x2d.mount"] {
            assert_eq!(check_unit_name(ok), Ok(()), "{ok}");
        }
        for bad in ["", "foo", "foo.exe", "../x.service", "a/b.service", "@.service", "foo bar.service", "é.service"] {
            assert!(check_unit_name(bad).is_err(), "{bad}");
        }
        assert!(check_unit_name(&format!("{}.service", "a".repeat(250))).is_err());
        assert!(check_dropin_name("10-x.conf").is_ok());
        for bad in ["../x.conf", "x", ".conf", "a/b.conf"] {
            assert!(check_dropin_name(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn unit_contents_must_parse_as_unit_files() {
        let ok = [
            "",
            "[Unit]\nDescription=x\n\n# comment\n; comment\n[Service]\nExecStart=/bin/sh -c \\\n  'echo [x'\n  Environment=A=1\n",
            "[Service]\nExecStart=\n[Install]\nWantedBy=multi-user.target",
            "[X-Custom]  \nKey = value with = signs\n",
        ];
        for c in ok {
            assert_eq!(check_unit_contents(c), Ok(()), "{c:?}");
        }
        let bad = [
            ("this is not\n a [unit file\n", "line 1: \"this is not\" is neither"),
            ("[Service]\nEnvironment=NOSECTION\n[broken", "line 3: section header \"[broken\" has no closing ']'"),
            ("[Unit] junk\n", "text after the section header"),
            ("[]\n", "empty section name"),
            ("[Unit]\nA=1\n\u{0}", "NUL"),
        ];
        for (c, want) in bad {
            let e = check_unit_contents(c).unwrap_err();
            assert!(e.starts_with("invalid unit content: ") && e.contains(want), "{c:?}: {e}");
        }
        let spec: MachineConfigSpec = serde_json::from_value(json!({"config": {"ignition": {"version": "3.4.0"},
            "systemd": {"units": [
                {"name": "bad.service", "contents": "this is not\n a [unit file\n\u{0}"},
                {"name": "good.service", "contents": "[Unit]\n", "dropins": [
                    {"name": "10-a.conf", "contents": "[Service]\nEnvironment=A=1\n"},
                    {"name": "20-b.conf", "contents": "Environment=NOSECTION\n[broken"}]}]}}}))
        .unwrap();
        let fields: Vec<String> = spec_errors(&spec).into_iter().map(|e| e.field).collect();
        assert_eq!(
            fields,
            ["spec.config.systemd.units[0].contents", "spec.config.systemd.units[1].dropins[1].contents"]
        );
    }

    #[test]
    fn contents_are_inline_and_decodable() {
        assert_eq!(decode("data:,GROUP%3Dstable%0A", None, None).unwrap(), b"GROUP=stable\n");
        assert_eq!(decode("data:text/plain;charset=utf-8;base64,aGk=", Some(""), None).unwrap(), b"hi");
        assert!(matches!(decode("http://evil/x", None, None), Err(DecodeError::NotDataUrl { .. })));
        assert_eq!(decode("data:;base64,!!!notbase64", None, None), Err(DecodeError::BadBase64));
        let no_comma = decode("data:text/plain", None, None).unwrap_err().to_string();
        assert_eq!(no_comma, "malformed data URL: data url is missing comma delimiting attributes and body");
        assert!(matches!(decode("data:,x", Some("bzip2"), None), Err(DecodeError::BadCompression(_))));
        assert!(matches!(decode("data:,notgzip", Some("gzip"), None), Err(DecodeError::BadGzip(_))));
        let h = format!("sha256-{}", hex::encode(Sha256::digest(b"hi")));
        assert_eq!(decode("data:,hi", None, Some(&h)).unwrap(), b"hi");
        assert!(matches!(decode("data:,ho", None, Some(&h)), Err(DecodeError::HashMismatch(_))));
        assert!(matches!(decode("s3://bucket/x", None, None), Err(DecodeError::NotDataUrl { .. })));
        assert!(matches!(decode("data:,hi", None, Some("md5-00")), Err(DecodeError::BadHashSpec(_))));
    }

    /// With a compression, the hash is of the decompressed contents (Ignition's spec; its
    /// fetcher decompresses, then hashes what it writes), or, for configs stored before, of the
    /// compressed bytes.
    #[test]
    fn the_hash_of_a_gzip_file_is_of_its_decompressed_contents() {
        use base64::Engine;
        use std::io::Write;
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        e.write_all(b"hello\n").unwrap();
        let gz = e.finish().unwrap();
        let url = format!("data:;base64,{}", base64::engine::general_purpose::STANDARD.encode(&gz));
        let of_contents = format!("sha512-{}", hex::encode(Sha512::digest(b"hello\n")));
        let of_gzip = format!("sha512-{}", hex::encode(Sha512::digest(&gz)));
        assert_eq!(decode(&url, Some("gzip"), Some(&of_contents)).unwrap(), b"hello\n");
        // The hash of the compressed bytes, which aloft took before, still is (stored configs).
        assert_eq!(decode(&url, Some("gzip"), Some(&of_gzip)).unwrap(), b"hello\n");
        let other = format!("sha512-{}", hex::encode(Sha512::digest(b"other")));
        assert_eq!(decode(&url, Some("gzip"), Some(&other)), Err(DecodeError::HashMismatch(other)));
    }

    #[test]
    fn a_gzip_bomb_stops_at_the_file_limit() {
        use std::io::Write;
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        e.write_all(&vec![0u8; (MAX_FILE_SIZE + 1) as usize]).unwrap();
        use base64::Engine;
        let b64 = base64::engine::general_purpose::STANDARD.encode(e.finish().unwrap());
        assert_eq!(decode(&format!("data:;base64,{b64}"), Some("gzip"), None), Err(DecodeError::TooLarge));
        let plain = base64::engine::general_purpose::STANDARD.encode(b"zipped");
        assert_eq!(decode(&format!("data:;base64,{plain}"), None, None).unwrap(), b"zipped");
    }

    #[test]
    fn spec_errors_name_each_field() {
        let spec: MachineConfigSpec = serde_json::from_value(json!({
            "kernelArguments": ["a=1 b=2", "", "x\ny", "q=\"open", "quiet ostree=/ostree/boot.1/x"],
            "config": {"ignition": {"version": "3.2.0"},
                "systemd": {"units": [{"name": "ok.service", "dropins": [{"name": "../x.conf"}]},
                                      {"name": "../../x.service"}]},
                "storage": {"files": [{"path": "/etc/a", "contents": {"source": "data:;base64,!!!notbase64"}},
                                      {"path": "/etc/b", "contents": {"source": "http://evil/x"}},
                                      {"path": "/etc/c", "contents": {"source": "data:,fine"}},
                                      {"path": "/etc/d"},
                                      {"path": "/etc/e", "contents": {"source": "data:,x", "compression": "bzip2"}}]}}}))
        .unwrap();
        let fields: Vec<String> = spec_errors(&spec).into_iter().map(|e| e.field).collect();
        assert_eq!(
            fields,
            [
                "spec.kernelArguments[1]",
                "spec.kernelArguments[2]",
                "spec.kernelArguments[3]",
                "spec.kernelArguments[4]",
                "spec.config.systemd.units[0].dropins[0].name",
                "spec.config.systemd.units[1].name",
                "spec.config.storage.files[0].contents.source",
                "spec.config.storage.files[1].contents.source",
            ]
        );
    }
}
