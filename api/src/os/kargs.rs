//! Kernel arguments: MCO's arithmetic for a new boot entry, and its after-boot checks.
//!
//! MCO deletes every kernel argument of the old rendered config and appends every argument of
//! the new one; anything else on the command line (`root=`, `console=`, what an admin added by
//! hand) is machine-local and kept. Pure functions, so the rules are unit-tested apart from
//! libostree.

/// Split a boot entry's `options` line (or `/proc/cmdline`) into arguments. Double quotes group
/// (`dyndbg="file x +p"`), as the kernel parses them.
pub fn split(cmdline: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut quoted = false;
    let mut any = false;
    for c in cmdline.chars() {
        match c {
            '"' => {
                quoted = !quoted;
                cur.push(c);
                any = true;
            }
            c if c.is_whitespace() && !quoted => {
                if any {
                    out.push(std::mem::take(&mut cur));
                    any = false;
                }
            }
            c => {
                cur.push(c);
                any = true;
            }
        }
    }
    if any {
        out.push(cur);
    }
    out
}

/// The arguments of the new boot entry: `current` minus one occurrence of each of the old
/// config's arguments, plus the new config's arguments in order.
pub fn compute(current: &[String], old_config: &[String], new_config: &[String]) -> Vec<String> {
    let mut out: Vec<String> = current.to_vec();
    for old in old_config.iter().flat_map(|a| split(a)) {
        if let Some(i) = out.iter().rposition(|a| *a == old) {
            out.remove(i);
        }
    }
    out.extend(new_config.iter().flat_map(|a| split(a)));
    out
}

/// MCO's after-boot check: every argument of the config is on the running command line.
/// The error is MCO's: `missing expected kernel arguments: [a b]`.
pub fn verify(cmdline: &str, expected: &[String]) -> Result<(), String> {
    let have = split(cmdline);
    let missing: Vec<String> = expected.iter().flat_map(|a| split(a)).filter(|a| !have.contains(a)).collect();
    if missing.is_empty() {
        Ok(())
    } else {
        Err(format!("missing expected kernel arguments: [{}]", missing.join(" ")))
    }
}

/// MCO's after-boot check of the OS: the booted commit is the one the config names. The error is
/// MCO's wording with the ostree commit in place of the container digest.
pub fn verify_booted(os_image_url: &str, expected_checksum: &str, booted_checksum: Option<&str>) -> Result<(), String> {
    match booted_checksum {
        Some(b) if b == expected_checksum => Ok(()),
        Some(b) => Err(format!("expected target osImageURL {os_image_url:?}, have {:?}", format!("ostree commit {b}"))),
        None => Err(format!("expected target osImageURL {os_image_url:?}, have \"no booted ostree deployment\"")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &[&str]) -> Vec<String> {
        s.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn old_config_args_go_new_ones_come_machine_local_stay() {
        let current = v(&["root=UUID=1", "rw", "nosmt", "console=ttyS0", "audit=1", "nosmt"]);
        let out = compute(&current, &v(&["nosmt", "audit=1"]), &v(&["mitigations=off", "nosmt"]));
        assert_eq!(out, v(&["root=UUID=1", "rw", "nosmt", "console=ttyS0", "mitigations=off", "nosmt"]));
        assert_eq!(compute(&current, &[], &[]), current, "no config args: entry unchanged");
        assert_eq!(compute(&v(&["rw"]), &v(&["gone=1"]), &[]), v(&["rw"]), "an old arg already absent is fine");
        assert_eq!(compute(&v(&["rw"]), &[], &v(&["a=1 b=2"])), v(&["rw", "a=1", "b=2"]), "MCO splits on spaces");
    }

    #[test]
    fn splits_like_the_kernel() {
        assert_eq!(split("  a=1  b=\"x y\" c\n"), v(&["a=1", "b=\"x y\"", "c"]));
        assert!(split("").is_empty());
    }

    #[test]
    fn after_boot_checks_use_mco_messages() {
        assert!(verify("root=/dev/vda rw nosmt audit=1", &v(&["nosmt", "audit=1"])).is_ok());
        assert_eq!(
            verify("root=/dev/vda rw", &v(&["nosmt", "audit=1"])).unwrap_err(),
            "missing expected kernel arguments: [nosmt audit=1]"
        );
        let url = "ostree+http://h/repo#r@aa";
        assert!(verify_booted(url, "aa", Some("aa")).is_ok());
        assert_eq!(
            verify_booted(url, "aa", Some("bb")).unwrap_err(),
            "expected target osImageURL \"ostree+http://h/repo#r@aa\", have \"ostree commit bb\""
        );
        assert!(verify_booted(url, "aa", None).unwrap_err().contains("no booted ostree deployment"));
    }
}
