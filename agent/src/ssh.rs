//! The `core` user's credentials: SSH keys in `/home/core/.ssh/authorized_keys.d/ignition`
//! (directories 0700, file 0600, owned by core, as MCO writes them) and the password hash in
//! `/etc/shadow`. core's uid/gid come from the root's own /etc/passwd, never from the agent's
//! host, because in tests (and in a chroot) they differ.

use crate::validate::{CoreUser, Owners};

/// Where core's keys go (MCO writes this file; sshd reads authorized_keys.d via a drop-in).
pub const KEYS_FILE: &str = aloft_api::node_limits::CORE_KEYS_FILE;
/// core's home and the two directories MCO creates 0700 for the keys.
pub const HOME: &str = "/home/core";
pub const SSH_DIRS: [&str; 2] = ["/home/core/.ssh", "/home/core/.ssh/authorized_keys.d"];
/// Modes MCO uses.
pub const DIR_MODE: u32 = 0o700;
pub const KEYS_MODE: u32 = 0o600;
/// Where the password hash lives.
pub const SHADOW: &str = aloft_api::node_limits::SHADOW;

/// The file contents for a set of keys: one per line.
pub fn keys_file(keys: &[String]) -> Vec<u8> {
    let mut out = String::new();
    for k in keys {
        out.push_str(k.trim_end());
        out.push('\n');
    }
    out.into_bytes()
}

/// core's uid/gid from the root's /etc/passwd; root (and a warning) when core is not there.
pub fn core_ids(owners: &Owners, warnings: &mut Vec<String>) -> (u32, u32) {
    match owners.users.get("core") {
        Some(ids) => *ids,
        None => {
            let w = format!("user core is not in /etc/passwd: {KEYS_FILE} and its directories are owned by root");
            tracing::warn!("{w}");
            warnings.push(w);
            (0, 0)
        }
    }
}

/// `/etc/shadow` with core's hash replaced (MCO locks the password with `*` when the hash is
/// removed); `None` when core has no line. Bytes, not text: another user's line that is not
/// UTF-8 (a name or hash in Latin-1) is kept as it is, byte for byte; read as text, it was
/// written back with replacement characters, and that user could no longer log in.
pub fn shadow_with_hash(shadow: &[u8], hash: Option<&str>) -> Option<Vec<u8>> {
    let hash = hash.unwrap_or("*").as_bytes();
    fn split_once(s: &[u8]) -> Option<(&[u8], &[u8])> {
        s.iter().position(|b| *b == b':').map(|i| (&s[..i], &s[i + 1..]))
    }
    let mut found = false;
    let mut out = Vec::with_capacity(shadow.len() + hash.len());
    for line in shadow.split_inclusive(|b| *b == b'\n') {
        let body = line.strip_suffix(b"\n").unwrap_or(line);
        match body.strip_prefix(b"core:") {
            Some(rest) if !found => {
                found = true;
                let (old, tail) = split_once(rest).unwrap_or((rest, &b""[..]));
                out.extend_from_slice(b"core:");
                out.extend_from_slice(hash);
                out.push(b':');
                // A changed password changes the date of the last change (field 3, days since
                // the epoch), as `usermod -p` (MCO's way) does: with password aging on, the
                // old date made the new password expired at once.
                match split_once(tail) {
                    Some((_, after)) if old != hash => {
                        out.extend_from_slice(days_since_epoch().to_string().as_bytes());
                        out.push(b':');
                        out.extend_from_slice(after);
                    }
                    _ => out.extend_from_slice(tail),
                }
                if line.ends_with(b"\n") {
                    out.push(b'\n');
                }
            }
            _ => out.extend_from_slice(line),
        }
    }
    found.then_some(out)
}

fn days_since_epoch() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs() / 86_400)
}

/// Whether the SSH keys differ between two configs.
pub fn keys_changed(old: &CoreUser, new: &CoreUser) -> bool {
    old.ssh_keys != new.ssh_keys
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shadow_edit_keeps_other_lines_and_fields() {
        let s = b"root:!:19000:0:99999:7:::\ncore:*:19000:0:99999:7:::\n";
        let today = days_since_epoch();
        assert_eq!(
            shadow_with_hash(s, Some("$6$x$y")).unwrap(),
            format!("root:!:19000:0:99999:7:::\ncore:$6$x$y:{today}:0:99999:7:::\n").into_bytes()
        );
        // The same hash again: the date of the last change stays.
        let same = b"core:$6$x$y:19000:0:90:7:::\n";
        assert_eq!(shadow_with_hash(same, Some("$6$x$y")).unwrap(), same);
        assert_eq!(shadow_with_hash(b"root:!:1::::::\n", Some("h")), None);
        // Another user's line that is not UTF-8 is kept byte for byte; no final newline stays so.
        let latin1 = b"j\xf6rg:$6$a$b:19000:0:99999:7:::\ncore:*:19000:0:99999:7:::";
        let edited = shadow_with_hash(latin1, Some("h")).unwrap();
        assert!(edited.starts_with(b"j\xf6rg:$6$a$b:19000:0:99999:7:::\ncore:h:"), "{edited:?}");
        assert!(edited.ends_with(b":0:99999:7:::"), "{edited:?}");
        assert_eq!(keys_file(&["ssh-rsa A".into(), "ssh-ed25519 B c".into()]), b"ssh-rsa A\nssh-ed25519 B c\n");
    }
}
