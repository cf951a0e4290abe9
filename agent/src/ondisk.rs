//! On-disk verification: does the host still hold what a config wrote? MCO runs this before an
//! update (against the current config) and after a reboot (against the desired one), and a
//! mismatch ("drift") degrades the node. Same checks and messages as MCO: every file's mode
//! (type bits included: it must be a regular file) and bytes; unit and drop-in contents; masks;
//! enablement. Ownership is not checked (MCO does not either).

use crate::files::DEFAULT_FILE_MODE;
use crate::fsroot::{self, HostFs};
use crate::host::Root;
use crate::units::{self, UNIT_DIR};
use crate::validate;
use aloft_api::MachineConfigSpec;
use std::fmt;
use std::path::Path;

/// The first difference found between the host and a config.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct Drift {
    /// The path the drift is about (empty when the config itself could not be read).
    pub path: String,
    /// MCO's text, e.g. `content mismatch for file "/etc/foo"`.
    pub message: String,
}

impl fmt::Display for Drift {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl Drift {
    fn new(path: &str, message: String) -> Self {
        Drift { path: path.to_string(), message }
    }

    /// MCO's full reason: `unexpected on-disk state validating against <rendered>: <message>`.
    pub fn reason(&self, rendered: &str) -> String {
        format!("unexpected on-disk state validating against {rendered}: {}", self.message)
    }
}

/// Go's `os.FileMode` bits for a Unix `st_mode`, so messages read exactly like MCO's.
fn go_mode(st_mode: u32) -> u32 {
    let mut m = st_mode & 0o777;
    m |= match st_mode & 0o170000 {
        0o040000 => 1 << 31,
        0o120000 => 1 << 27,
        0o010000 => 1 << 25,
        0o140000 => 1 << 24,
        0o060000 => 1 << 26,
        0o020000 => (1 << 26) | (1 << 21),
        _ => 0,
    };
    if st_mode & 0o4000 != 0 {
        m |= 1 << 23;
    }
    if st_mode & 0o2000 != 0 {
        m |= 1 << 22;
    }
    if st_mode & 0o1000 != 0 {
        m |= 1 << 20;
    }
    m
}

/// `%v/%d/%#o` of a Go FileMode: `-rw-r--r--/420/0644`.
fn fmt_go_mode(m: u32) -> String {
    const TYPES: &[u8] = b"dalTLDpSugct?";
    let mut s = String::new();
    for (i, c) in TYPES.iter().enumerate() {
        if m & (1 << (31 - i)) != 0 {
            s.push(*c as char);
        }
    }
    if s.is_empty() {
        s.push('-');
    }
    for (i, c) in "rwxrwxrwx".chars().enumerate() {
        s.push(if m & (1 << (8 - i)) != 0 { c } else { '-' });
    }
    let oct = if m == 0 { "0".to_string() } else { format!("0{m:o}") };
    format!("{s}/{m}/{oct}")
}

fn check_file(fs: &HostFs, path: &str, contents: &[u8], mode: u32) -> Result<(), Drift> {
    let rel = fsroot::rel(path);
    let st = match fs.raw_mode(&rel) {
        Ok(Some(m)) => m,
        Ok(None) => {
            return Err(Drift::new(
                path,
                format!("could not stat file {path:?}: lstat {path}: no such file or directory"),
            ))
        }
        Err(e) => return Err(Drift::new(path, format!("could not stat file {path:?}: {e}"))),
    };
    let (got, want) = (go_mode(st), mode & 0o777);
    if got != want {
        return Err(Drift::new(
            path,
            format!(
                "mode mismatch for file: {path:?}; expected: {}; received: {}",
                fmt_go_mode(want),
                fmt_go_mode(got)
            ),
        ));
    }
    let on_disk = fs
        .read_limited(&rel, contents.len() as u64)
        .map_err(|_| Drift::new(path, format!("content mismatch for file {path:?}")))?;
    if on_disk != contents {
        return Err(Drift::new(path, format!("content mismatch for file {path:?}")));
    }
    Ok(())
}

/// Symlinks to `unit` in any `<target>.wants/`, `.requires/` or `.upholds/` of
/// /etc/systemd/system: where `systemctl enable` links a unit for its `WantedBy=`, `RequiredBy=`
/// and `UpheldBy=` (a unit enabled by `UpheldBy=` alone read as not enabled: drift, for good).
fn enablement_links(fs: &HostFs, unit: &str) -> Result<Vec<String>, Drift> {
    let dir = fsroot::rel(UNIT_DIR);
    let names = fs.list_dir(&dir).map_err(|e| Drift::new(UNIT_DIR, format!("could not read {UNIT_DIR}: {e}")))?;
    let mut out = Vec::new();
    for n in names {
        let n = n.to_string_lossy();
        if !ENABLEMENT_DIRS.iter().any(|suffix| n.ends_with(suffix)) {
            continue;
        }
        let link = dir.join(n.as_ref()).join(unit);
        if let Ok(fsroot::Entry::Symlink { .. }) = fs.entry(&link) {
            out.push(format!("/{}", link.display()));
        }
    }
    Ok(out)
}

/// The suffixes of the directories `systemctl enable` links units into.
pub(crate) const ENABLEMENT_DIRS: [&str; 3] = [".wants", ".requires", ".upholds"];

/// Where systemd looks for unit files on the host, in its order of precedence.
const UNIT_SEARCH_PATH: &[&str] = &[
    UNIT_DIR,
    "/run/systemd/system",
    "/usr/local/lib/systemd/system",
    "/usr/lib/systemd/system",
    "/lib/systemd/system",
];

/// Whether the host has a unit file for `unit` (for a template instance `a@b.service`, its
/// template `a@.service` counts), in any directory of systemd's search path.
///
/// Why: a config may enable or disable a unit it gives no contents for (one the OS ships); as
/// MCO does since OCPBUGS-70259, such a unit the host lacks is skipped with a warning instead of
/// failing the update (`systemctl enable` of a missing unit fails), and there is then no
/// enablement on disk to verify.
pub(crate) fn unit_installed(fs: &HostFs, unit: &str) -> bool {
    let template = unit.split_once('@').and_then(|(head, rest)| {
        let suffix = rest.rsplit_once('.').map(|(_, s)| s)?;
        Some(format!("{head}@.{suffix}"))
    });
    let names = std::iter::once(unit.to_string()).chain(template);
    names.into_iter().any(|n| {
        UNIT_SEARCH_PATH
            .iter()
            .any(|d| !matches!(fs.entry(&fsroot::rel(&format!("{d}/{n}"))), Ok(fsroot::Entry::Absent) | Err(_)))
    })
}

/// Whether a unit cannot be enabled at all ("static" in systemd's words): its file (from the
/// config, /etc or /usr/lib) has no `WantedBy=`/`RequiredBy=`/`UpheldBy=`, so `enable` links
/// nothing and there is no enablement to verify.
fn is_static(fs: &HostFs, unit: &str, contents: Option<&str>) -> bool {
    let text = contents.map(str::to_string).or_else(|| {
        [UNIT_DIR, "/usr/lib/systemd/system", "/lib/systemd/system"].iter().find_map(|d| {
            let rel = fsroot::rel(&format!("{d}/{unit}"));
            fs.read_limited(&rel, 1 << 20).ok().map(|b| String::from_utf8_lossy(&b).into_owned())
        })
    });
    match text {
        Some(t) => !t
            .lines()
            .map(str::trim)
            .any(|l| l.starts_with("WantedBy=") || l.starts_with("RequiredBy=") || l.starts_with("UpheldBy=")),
        None => false,
    }
}

/// Checks the host beneath `root` against `spec`; the first drift found, in MCO's order
/// (files, then units).
pub fn verify(root: &Root, spec: &MachineConfigSpec) -> Result<(), Drift> {
    let d = validate::parse(spec).map_err(|r| Drift::new("", format!("the config cannot be verified: {r}")))?;
    let fs = HostFs::open(root).map_err(|e| Drift::new("/", e.to_string()))?;
    for f in &d.files {
        check_file(&fs, &f.path, &f.contents, f.mode)?;
    }
    for u in &d.units {
        for dr in &u.dropins {
            let path = units::dropin_path(&u.name, &dr.name);
            match &dr.contents {
                Some(c) => check_file(&fs, &path, c.as_bytes(), DEFAULT_FILE_MODE)?,
                None => {
                    if fs.raw_mode(&fsroot::rel(&path)).ok().flatten().is_some() {
                        return Err(Drift::new(
                            &path,
                            format!("drop-in {path:?} has empty contents in the config but exists"),
                        ));
                    }
                }
            }
        }
        let path = units::unit_path(&u.name);
        if u.mask {
            let link = fs.read_link(&fsroot::rel(&path));
            if !matches!(&link, Ok(t) if t == Path::new("/dev/null")) {
                let got = match link {
                    Ok(t) => t.display().to_string(),
                    Err(e) => e.to_string(),
                };
                return Err(Drift::new(
                    &path,
                    format!("state validation: invalid unit masked setting. path: {path:?}; expected: /dev/null; received: {got}"),
                ));
            }
            continue;
        }
        if let Some(c) = &u.contents {
            check_file(&fs, &path, c.as_bytes(), DEFAULT_FILE_MODE)?;
        }
        if u.enabled.is_some() && u.contents.is_none() && !unit_installed(&fs, &u.name) {
            // Skipped by the apply (see `unit_installed`): nothing to verify.
            continue;
        }
        match u.enabled {
            Some(true)
                if !is_static(&fs, &u.name, u.contents.as_deref()) && enablement_links(&fs, &u.name)?.is_empty() =>
            {
                return Err(Drift::new(
                    &path,
                    format!("unit {:?} is not enabled: no symlink to it in {UNIT_DIR}/*.wants", u.name),
                ))
            }
            Some(false) => {
                if let Some(l) = enablement_links(&fs, &u.name)?.first() {
                    return Err(Drift::new(
                        &path,
                        format!("unit {:?} is enabled ({l}) but the config disables it", u.name),
                    ));
                }
            }
            _ => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A unit counts as installed wherever systemd would find it, and an instance through its
    /// template.
    #[test]
    fn a_unit_is_installed_anywhere_on_the_search_path_or_through_its_template() {
        let dir = tempfile::tempdir().unwrap();
        for (d, f) in [("run/systemd/system", "r.service"), ("lib/systemd/system", "getty@.service")] {
            std::fs::create_dir_all(dir.path().join(d)).unwrap();
            std::fs::write(dir.path().join(d).join(f), "[Service]\n").unwrap();
        }
        let fs = HostFs::open(&Root::new(dir.path())).unwrap();
        assert!(unit_installed(&fs, "r.service"));
        assert!(unit_installed(&fs, "getty@tty3.service"));
        assert!(unit_installed(&fs, "getty@.service"));
        assert!(!unit_installed(&fs, "missing.service"));
        assert!(!unit_installed(&fs, "other@tty3.service"));
    }

    #[test]
    fn go_file_mode_formatting_matches_mco() {
        assert_eq!(fmt_go_mode(go_mode(0o100644)), "-rw-r--r--/420/0644");
        assert_eq!(fmt_go_mode(go_mode(0o040755)), "drwxr-xr-x/2147484141/020000000755");
        assert_eq!(fmt_go_mode(go_mode(0o120777)), "Lrwxrwxrwx/134218239/01000000777");
        assert_eq!(fmt_go_mode(go_mode(0o104755)), "urwxr-xr-x/8389101/040000755");
    }
}
