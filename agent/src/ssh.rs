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
/// removed); `None` when core has no line.
pub fn shadow_with_hash(shadow: &str, hash: Option<&str>) -> Option<String> {
    let hash = hash.unwrap_or("*");
    let mut found = false;
    let mut out = String::with_capacity(shadow.len() + hash.len());
    for line in shadow.split_inclusive('\n') {
        let body = line.trim_end_matches('\n');
        match body.split_once(':') {
            Some(("core", rest)) if !found => {
                found = true;
                let (old, tail) = rest.split_once(':').unwrap_or((rest, ""));
                // A changed password changes the date of the last change (field 3, days since
                // the epoch), as `usermod -p` (MCO's way) does: with password aging on, the
                // old date made the new password expired at once.
                let tail = match tail.split_once(':') {
                    Some((_, rest)) if old != hash => format!("{}:{rest}", days_since_epoch()),
                    _ => tail.to_string(),
                };
                out.push_str(&format!("core:{hash}:{tail}"));
                if line.ends_with('\n') {
                    out.push('\n');
                }
            }
            _ => out.push_str(line),
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
        let s = "root:!:19000:0:99999:7:::\ncore:*:19000:0:99999:7:::\n";
        let today = days_since_epoch();
        assert_eq!(
            shadow_with_hash(s, Some("$6$x$y")).unwrap(),
            format!("root:!:19000:0:99999:7:::\ncore:$6$x$y:{today}:0:99999:7:::\n")
        );
        // The same hash again: the date of the last change stays.
        let same = "core:$6$x$y:19000:0:90:7:::\n";
        assert_eq!(shadow_with_hash(same, Some("$6$x$y")).unwrap(), same);
        assert_eq!(shadow_with_hash("root:!:1::::::\n", Some("h")), None);
        assert_eq!(keys_file(&["ssh-rsa A".into(), "ssh-ed25519 B c".into()]), b"ssh-rsa A\nssh-ed25519 B c\n");
    }
}
