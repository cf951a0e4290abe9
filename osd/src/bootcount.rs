//! The bootloader's boot counting, in GRUB's environment block ([`aloft_api::os::grubenv`]).
//!
//! The block is written in place, as GRUB's own `save_env` writes it: the same bytes of the same
//! file, then `fdatasync`. Why not a new file renamed over it: GRUB reads the file system without
//! replaying its journal, so a rename the journal holds but the disk does not yet would leave
//! GRUB reading the old file; an overwrite of blocks the file already has changes no metadata.
//!
//! A host without the block has no boot counting: nothing is written, and calls say `None`. A
//! block GRUB could not read either (no signature) counts nothing: the status says `None` with a
//! warning, and a change is refused naming the file.

use aloft_api::os::grubenv::{self, EnvBlock};
use aloft_api::os::{BootCount, BootCounting, OsError};
use std::io::{Seek, SeekFrom, Write};
use std::path::Path;

/// The default place under the sysroot (GRUB on BIOS, and on EFI hosts that keep it in /boot).
pub const DEFAULT_GRUBENV: &str = "boot/grub2/grubenv";
/// A file an OS carries when its agent disarms the counting once a boot is judged. Only a
/// deployment that has it is armed: an OS whose agent predates boot counting (a downgrade
/// across it) would leave the counter armed, and a few unrelated reboots later the bootloader
/// would fall back to the deployment before it.
pub const DISARMS_MARKER: &str = "usr/lib/aloft/boot-counting";

fn counting(path: &Path, env: &EnvBlock) -> BootCounting {
    BootCounting {
        grubenv: path.display().to_string(),
        boot_counter: env.get(grubenv::BOOT_COUNTER).map(str::to_string),
        boot_success: env.get(grubenv::BOOT_SUCCESS).map(str::to_string),
    }
}

fn load(path: &Path) -> Result<Option<EnvBlock>, OsError> {
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(OsError::ostree(format!("reading {}", path.display()), e)),
    };
    EnvBlock::parse(&bytes).map(Some).map_err(|e| OsError::Invalid(format!("{}: {e}", path.display())))
}

/// The counting as it is, for the status; `None` without a block (or with one GRUB cannot read).
pub fn read(path: Option<&Path>) -> Option<BootCounting> {
    let path = path?;
    match load(path) {
        Ok(env) => env.map(|env| counting(path, &env)),
        Err(e) => {
            tracing::warn!(error = %e, "the GRUB environment block cannot be read: no boot counting");
            None
        }
    }
}

/// Arm or disarm; the counting afterwards. Writes only when something changes.
pub fn change(path: Option<&Path>, change: BootCount) -> Result<Option<BootCounting>, OsError> {
    let Some(path) = path else { return Ok(None) };
    let Some(mut env) = load(path)? else { return Ok(None) };
    let before = env.clone();
    let invalid = |e: grubenv::GrubEnvError| OsError::Invalid(format!("{}: {e}", path.display()));
    match change {
        BootCount::Arm(n) => grubenv::arm(&mut env, n).map_err(invalid)?,
        BootCount::Disarm => {
            grubenv::disarm(&mut env).map_err(invalid)?;
        }
    }
    if env != before {
        let bytes = env.to_bytes().map_err(invalid)?;
        write_in_place(path, &bytes).map_err(|e| OsError::ostree(format!("writing {}", path.display()), e))?;
        tracing::info!(grubenv = %path.display(), ?change, counter = ?env.get(grubenv::BOOT_COUNTER), "boot counting changed");
    }
    Ok(Some(counting(path, &env)))
}

/// Overwrite the file's bytes where they are (same length, so no block is allocated or freed).
fn write_in_place(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let mut f = std::fs::OpenOptions::new().write(true).open(path)?;
    if f.metadata()?.len() != bytes.len() as u64 {
        return Err(std::io::Error::other("its size changed under the helper"));
    }
    f.seek(SeekFrom::Start(0))?;
    f.write_all(bytes)?;
    f.sync_data()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    fn block(lines: &str) -> Vec<u8> {
        let mut b = format!("{}{lines}", grubenv::SIGNATURE).into_bytes();
        b.resize(1024, b'#');
        b
    }

    #[test]
    fn arms_and_disarms_in_place_and_keeps_other_variables() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("grubenv");
        std::fs::write(&path, block("saved_entry=x\n")).unwrap();
        let inode = std::fs::metadata(&path).unwrap().ino();
        let c = change(Some(&path), BootCount::Arm(3)).unwrap().unwrap();
        assert_eq!((c.boot_counter.as_deref(), c.boot_success.as_deref()), (Some("3"), Some("0")));
        assert_eq!(std::fs::read(&path).unwrap(), block("saved_entry=x\nboot_counter=3\nboot_success=0\n"));
        assert_eq!(std::fs::metadata(&path).unwrap().ino(), inode, "the same file, written in place");
        assert_eq!(read(Some(&path)), Some(c));
        let c = change(Some(&path), BootCount::Disarm).unwrap().unwrap();
        assert!(!c.fell_back());
        assert_eq!(std::fs::read(&path).unwrap(), block("saved_entry=x\nboot_success=1\n"));
    }

    #[test]
    fn without_a_block_nothing_is_counted_or_written() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("grubenv");
        assert_eq!(change(Some(&path), BootCount::Arm(3)), Ok(None));
        assert_eq!(change(None, BootCount::Disarm), Ok(None));
        assert!(!path.exists(), "no block is created");
        assert_eq!(read(Some(&path)), None);
    }

    /// A file GRUB would not read either is refused by name and left as it was.
    #[test]
    fn a_corrupt_block_is_refused_and_left_alone() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("grubenv");
        std::fs::write(&path, b"boot_counter=3\n").unwrap();
        let e = change(Some(&path), BootCount::Arm(3)).unwrap_err().to_string();
        assert!(e.starts_with(&format!("{}: not a GRUB environment block", path.display())), "{e}");
        assert_eq!(std::fs::read(&path).unwrap(), b"boot_counter=3\n");
        assert_eq!(read(Some(&path)), None, "the status says no counting");
    }
}
