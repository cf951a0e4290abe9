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
