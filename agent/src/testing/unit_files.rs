//! What `systemctl enable/disable/mask/unmask/preset` do to the files, beneath a test root.
//!
//! The agent's on-disk verification (drift checks) looks for enablement symlinks, so the fake
//! systemd must leave the same links a real one would, or every test of enablement would report
//! drift. Only what the agent's checks can see is emulated: `[Install]` `WantedBy=`,
//! `RequiredBy=` and `UpheldBy=` links in /etc/systemd/system, masks, and template instances.
//! `Alias=`, `Also=` and `DefaultInstance=` are not.

use super::fake_systemd::FakeError;
use std::path::{Path, PathBuf};

/// The admin's unit directory, where links are written.
const ETC_UNITS: &str = "etc/systemd/system";
/// Where unit files are looked up, in systemd's order of precedence.
const SEARCH: &[&str] = &["etc/systemd/system", "run/systemd/system", "usr/lib/systemd/system", "lib/systemd/system"];
/// The link directories an `[Install]` key creates.
const INSTALL_KEYS: &[(&str, &str)] = &[("WantedBy", "wants"), ("RequiredBy", "requires"), ("UpheldBy", "upholds")];

/// `(type, file, destination)`, as systemd reports unit-file changes.
pub(crate) type Change = (String, String, String);

/// The unit files beneath a host root.
#[derive(Debug, Clone)]
pub(crate) struct UnitFiles {
    root: PathBuf,
}

fn io_err(what: &str, path: &Path, e: std::io::Error) -> FakeError {
    FakeError::Failed(format!("{what} {}: {e}", path.display()))
}

/// The template a unit instance comes from: `getty@tty1.service` -> `getty@.service`.
fn template_of(unit: &str) -> Option<String> {
    let (prefix, rest) = unit.split_once('@')?;
    let (instance, suffix) = rest.rsplit_once('.')?;
    (!instance.is_empty()).then(|| format!("{prefix}@.{suffix}"))
}

impl UnitFiles {
    pub(crate) fn new(root: impl Into<PathBuf>) -> Self {
        UnitFiles { root: root.into() }
    }

    fn etc(&self) -> PathBuf {
        self.root.join(ETC_UNITS)
    }

    /// A host path (`/etc/...`) beneath the root.
    fn host(&self, abs: &str) -> PathBuf {
        self.root.join(abs.trim_start_matches('/'))
    }

    /// The units in `<unit>.wants/` directories on the search path (what systemd's `Wants`
    /// property lists for links; `Wants=` lines in the unit file are not read), sorted.
    pub(crate) fn wants(&self, unit: &str) -> Vec<String> {
        let mut out: Vec<String> = SEARCH
            .iter()
            .filter_map(|dir| std::fs::read_dir(self.root.join(dir).join(format!("{unit}.wants"))).ok())
            .flatten()
            .filter_map(|e| e.ok().map(|e| e.file_name().to_string_lossy().into_owned()))
            .collect();
        out.sort();
        out.dedup();
        out
    }

    /// Whether `/etc/systemd/system/<unit>` is a link to /dev/null.
    pub(crate) fn is_masked(&self, unit: &str) -> bool {
        std::fs::read_link(self.etc().join(unit)).is_ok_and(|t| t == Path::new("/dev/null"))
    }

    /// The unit file's text and its path as systemd names it (`/etc/systemd/system/x.service`),
    /// following links within the root (a link in /etc to /usr/lib is read beneath the root).
    fn find(&self, unit: &str) -> Option<(String, String)> {
        let names: Vec<String> = std::iter::once(unit.to_string()).chain(template_of(unit)).collect();
        for name in &names {
            for dir in SEARCH {
                let abs = format!("/{dir}/{name}");
                let mut path = self.host(&abs);
                for _ in 0..8 {
                    match std::fs::read_link(&path) {
                        Ok(t) if t == Path::new("/dev/null") => return None,
                        Ok(t) if t.is_absolute() => path = self.host(&t.to_string_lossy()),
                        Ok(t) => path = path.parent().map(|p| p.join(&t)).unwrap_or(t),
                        Err(_) => break,
                    }
                }
                if let Ok(text) = std::fs::read_to_string(&path) {
                    return Some((text, abs));
                }
            }
        }
        None
    }

    /// `(link directory suffix, target)` for each `[Install]` entry, e.g. `("wants",
    /// "multi-user.target")`. An empty assignment resets the list, as in systemd.
    fn install_targets(text: &str) -> Vec<(&'static str, String)> {
        let mut out: Vec<(&'static str, String)> = Vec::new();
        let mut in_install = false;
        for line in text.lines() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
                continue;
            }
            if line.starts_with('[') {
                in_install = line == "[Install]";
                continue;
            }
            if !in_install {
                continue;
            }
            let Some((key, value)) = line.split_once('=') else { continue };
            let Some((_, suffix)) = INSTALL_KEYS.iter().find(|(k, _)| *k == key.trim()) else { continue };
            if value.trim().is_empty() {
                out.retain(|(s, _)| s != suffix);
            }
            for target in value.split_whitespace() {
                if !out.iter().any(|(s, t)| s == suffix && t == target) {
                    out.push((suffix, target.to_string()));
                }
            }
        }
        out
    }

    /// Links to `unit` in any `/etc/systemd/system/*.{wants,requires,upholds}`, as host paths.
    fn links_to(&self, unit: &str) -> Vec<(PathBuf, String)> {
        let mut out = Vec::new();
        let Ok(dir) = std::fs::read_dir(self.etc()) else { return out };
        let mut dirs: Vec<_> = dir.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect();
        dirs.sort();
        for d in dirs {
            if !INSTALL_KEYS.iter().any(|(_, s)| d.ends_with(&format!(".{s}"))) {
                continue;
            }
            let link = self.etc().join(&d).join(unit);
            if std::fs::symlink_metadata(&link).is_ok_and(|m| m.file_type().is_symlink()) {
                out.push((link, format!("/{ETC_UNITS}/{d}/{unit}")));
            }
        }
        out
    }

    /// `systemctl enable <unit>`.
    pub(crate) fn enable(&self, unit: &str, force: bool) -> Result<(bool, Vec<Change>), FakeError> {
        if self.is_masked(unit) {
            return Err(FakeError::UnitMasked(format!("Unit file {unit} is masked.")));
        }
        let (text, fragment) =
            self.find(unit).ok_or_else(|| FakeError::NoSuchUnit(format!("Unit file {unit} does not exist.")))?;
        let targets = Self::install_targets(&text);
        let mut changes = Vec::new();
        for (suffix, target) in &targets {
            let dir = self.etc().join(format!("{target}.{suffix}"));
            std::fs::create_dir_all(&dir).map_err(|e| io_err("creating", &dir, e))?;
            let link = dir.join(unit);
            match std::fs::read_link(&link) {
                Ok(t) if t == Path::new(&fragment) => continue,
                Ok(_) if force => std::fs::remove_file(&link).map_err(|e| io_err("replacing", &link, e))?,
                Ok(_) => return Err(FakeError::Failed(format!("File exists: {}", link.display()))),
                Err(_) => {}
            }
            std::os::unix::fs::symlink(&fragment, &link).map_err(|e| io_err("linking", &link, e))?;
            changes.push(("symlink".to_string(), format!("/{ETC_UNITS}/{target}.{suffix}/{unit}"), fragment.clone()));
        }
        Ok((!targets.is_empty(), changes))
    }

    /// `systemctl disable <unit>`: removes its links, and link directories left empty.
    pub(crate) fn disable(&self, unit: &str) -> Result<Vec<Change>, FakeError> {
        let mut changes = Vec::new();
        for (link, name) in self.links_to(unit) {
            std::fs::remove_file(&link).map_err(|e| io_err("removing", &link, e))?;
            if let Some(dir) = link.parent() {
                if std::fs::read_dir(dir).is_ok_and(|mut d| d.next().is_none()) {
                    let _ = std::fs::remove_dir(dir);
                }
            }
            changes.push(("unlink".to_string(), name, String::new()));
        }
        Ok(changes)
    }

    /// `systemctl mask <unit>`: `/etc/systemd/system/<unit>` -> /dev/null. Without `force` an
    /// existing unit file there is refused, as systemd does.
    pub(crate) fn mask(&self, unit: &str, force: bool) -> Result<Vec<Change>, FakeError> {
        if self.is_masked(unit) {
            return Ok(Vec::new());
        }
        let path = self.etc().join(unit);
        if std::fs::symlink_metadata(&path).is_ok() {
            if !force {
                return Err(FakeError::Failed(format!("File exists: /{ETC_UNITS}/{unit}")));
            }
            std::fs::remove_file(&path).map_err(|e| io_err("replacing", &path, e))?;
        }
        std::fs::create_dir_all(self.etc()).map_err(|e| io_err("creating", &self.etc(), e))?;
        std::os::unix::fs::symlink("/dev/null", &path).map_err(|e| io_err("masking", &path, e))?;
        Ok(vec![("symlink".to_string(), format!("/{ETC_UNITS}/{unit}"), "/dev/null".to_string())])
    }

    /// `systemctl unmask <unit>`: removes the /dev/null link (nothing else).
    pub(crate) fn unmask(&self, unit: &str) -> Result<Vec<Change>, FakeError> {
        if !self.is_masked(unit) {
            return Ok(Vec::new());
        }
        let path = self.etc().join(unit);
        std::fs::remove_file(&path).map_err(|e| io_err("unmasking", &path, e))?;
        Ok(vec![("unlink".to_string(), format!("/{ETC_UNITS}/{unit}"), String::new())])
    }

    /// `systemctl is-enabled <unit>`: masked, enabled, disabled or static.
    pub(crate) fn state(&self, unit: &str) -> Result<String, FakeError> {
        if self.is_masked(unit) {
            return Ok("masked".into());
        }
        let (text, _) =
            self.find(unit).ok_or_else(|| FakeError::NoSuchUnit(format!("Unit file {unit} does not exist.")))?;
        Ok(if !self.links_to(unit).is_empty() {
            "enabled"
        } else if Self::install_targets(&text).is_empty() {
            "static"
        } else {
            "disabled"
        }
        .into())
    }

    /// Whether a unit file exists (for LoadState).
    pub(crate) fn exists(&self, unit: &str) -> bool {
        self.find(unit).is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn root() -> PathBuf {
        let d = std::env::temp_dir().join(format!(
            "aloft-unitfiles-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(d.join(ETC_UNITS)).unwrap();
        std::fs::create_dir_all(d.join("usr/lib/systemd/system")).unwrap();
        d
    }

    #[test]
    fn install_section_is_parsed_like_systemd() {
        let t = "[Unit]\nWantedBy=ignored.target\n[Install]\n# c\nWantedBy=a.target b.target\nRequiredBy=c.target\nWantedBy=\nWantedBy=d.target\n";
        assert_eq!(
            UnitFiles::install_targets(t),
            vec![("requires", "c.target".to_string()), ("wants", "d.target".to_string())]
        );
        assert_eq!(template_of("getty@tty1.service").as_deref(), Some("getty@.service"));
        assert_eq!(template_of("getty@.service"), None);
    }

    #[test]
    fn enable_disable_mask_unmask() {
        let r = root();
        let u = UnitFiles::new(&r);
        std::fs::write(r.join(ETC_UNITS).join("x.service"), "[Install]\nWantedBy=multi-user.target\n").unwrap();
        std::fs::write(r.join("usr/lib/systemd/system/y.service"), "[Service]\nExecStart=/bin/true\n").unwrap();
        assert_eq!(u.state("x.service").unwrap(), "disabled");
        assert_eq!(u.state("y.service").unwrap(), "static");
        assert!(matches!(u.state("z.service"), Err(FakeError::NoSuchUnit(_))));
        let (carries, changes) = u.enable("x.service", true).unwrap();
        assert!(carries);
        assert_eq!(changes[0].1, "/etc/systemd/system/multi-user.target.wants/x.service");
        let link = r.join(ETC_UNITS).join("multi-user.target.wants/x.service");
        assert_eq!(std::fs::read_link(&link).unwrap(), Path::new("/etc/systemd/system/x.service"));
        assert_eq!(u.state("x.service").unwrap(), "enabled");
        assert!(u.enable("x.service", true).unwrap().1.is_empty(), "idempotent");
        u.disable("x.service").unwrap();
        assert!(!r.join(ETC_UNITS).join("multi-user.target.wants").exists(), "empty .wants removed");
        u.mask("y.service", false).unwrap();
        assert_eq!(u.state("y.service").unwrap(), "masked");
        assert!(matches!(u.enable("y.service", true), Err(FakeError::UnitMasked(_))));
        assert!(u.mask("x.service", false).is_err(), "a unit file is not replaced without force");
        u.unmask("y.service").unwrap();
        assert_eq!(u.state("y.service").unwrap(), "static");
        std::fs::remove_dir_all(&r).unwrap();
    }
}
