//! Small file helpers for the data directory: atomic writes with the right modes.

use anyhow::{Context, Result};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

fn write_mode(path: &Path, data: &[u8], mode: u32) -> Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let tmp = dir.join(format!(".{}.tmp", path.file_name().and_then(|n| n.to_str()).unwrap_or("file")));
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(mode)
        .open(&tmp)
        .with_context(|| format!("creating {}", tmp.display()))?;
    f.write_all(data).with_context(|| format!("writing {}", tmp.display()))?;
    f.sync_all()?;
    std::fs::rename(&tmp, path).with_context(|| format!("renaming to {}", path.display()))?;
    Ok(())
}

/// Secrets: 0600.
pub fn write_private(path: &Path, data: &[u8]) -> Result<()> {
    write_mode(path, data, 0o600)
}

/// Certificates and other public files: 0644.
pub fn write_public(path: &Path, data: &[u8]) -> Result<()> {
    write_mode(path, data, 0o644)
}

/// A secret file of the data directory found readable by others (made so by hand, or written
/// before the rule) is made 0600, and that is logged; a missing one is left alone. `serve`
/// writes these files only when they change, so it cannot count on its writes to set the mode.
pub fn keep_private(path: &Path) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let Ok(meta) = std::fs::metadata(path) else { return Ok(()) };
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode & 0o700))
            .with_context(|| format!("making {} readable by its owner alone", path.display()))?;
        tracing::warn!(file = %path.display(), "a secret file was readable by other users (mode {mode:04o}): made 0600");
    }
    Ok(())
}
