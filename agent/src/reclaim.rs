//! Releasing what an update no longer needs once it is reported, not during it: the storage
//! of the files it replaced, and the heap memory it used.
//!
//! Every atomic write renames a new file over an old one, and the old file's last link goes with
//! the rename: the kernel frees its inode and blocks inside that `rename` call. On some
//! filesystems this is slow and scales with the disk's load rather than with our work: ext4
//! without a journal (and mounted with `discard`) issues the discard of the freed blocks
//! synchronously, measured here at 0.2 ms per file on an idle disk and 3 to 7 ms per file while
//! another process was building (100 renames: 20 ms idle, 320 to 740 ms loaded, against 2 ms
//! when the old files were still open). None of it is needed for the new state to be durable.
//!
//! So before a rename replaces a file, the writer opens the old file and hands the descriptor
//! to [`hold`]: the rename then only moves a name, and the kernel frees the old inode when the
//! descriptor is closed, by [`release`] once the update has been reported (the daemon runs it
//! off the critical path). Nothing about crash safety changes: an open descriptor keeps bytes
//! nobody can reach by name, and a crash simply drops them (the filesystem reclaims orphans).
//! At most [`MAX_HELD`] descriptors are held, so an agent never runs out of them: past that,
//! everything held is released at once, as it would have been without this module.

use std::os::fd::OwnedFd;
use std::sync::Mutex;

/// Descriptors held at most (the agent's own soft limit is typically 1024).
pub const MAX_HELD: usize = 256;

static HELD: Mutex<Vec<OwnedFd>> = Mutex::new(Vec::new());

/// Keeps `fd` (a file about to be replaced) open until the next [`release`].
pub fn hold(fd: OwnedFd) {
    let overflow = {
        let mut held = HELD.lock().unwrap_or_else(|p| p.into_inner());
        held.push(fd);
        if held.len() > MAX_HELD {
            std::mem::take(&mut *held)
        } else {
            Vec::new()
        }
    };
    // Closed outside the lock: closing may be the slow part.
    drop(overflow);
}

/// Opens the regular file at `path` (if there is one) and holds it: call right before renaming
/// over it. Best effort: any failure just means the kernel frees the file during the rename.
/// Returns whether a file was held.
pub fn hold_path(path: &std::path::Path) -> bool {
    use std::os::unix::fs::OpenOptionsExt;
    // O_NONBLOCK: never wait on a fifo that took the file's place; O_NOFOLLOW: never hold a
    // symlink's target, which the rename does not free.
    let opened =
        std::fs::OpenOptions::new().read(true).custom_flags(nix::libc::O_NOFOLLOW | nix::libc::O_NONBLOCK).open(path);
    match opened {
        Ok(f) if f.metadata().is_ok_and(|m| m.is_file()) => {
            hold(f.into());
            true
        }
        _ => false,
    }
}

/// Closes every held descriptor, letting the kernel free the replaced files.
pub fn release() {
    let held = std::mem::take(&mut *HELD.lock().unwrap_or_else(|p| p.into_inner()));
    drop(held);
}

/// Limits the C allocator to one arena: glibc gives threads arenas of their own (up to eight
/// per core), each keeping freed memory resident, and the agent's few threads (two runtime
/// workers, blocking-pool and fsync threads) never contend enough to need them. Call before
/// any thread is started.
pub fn limit_heap_arenas() {
    #[cfg(target_env = "gnu")]
    // SAFETY: mallopt only sets a tunable of the allocator; it is called before other threads
    // exist.
    unsafe {
        nix::libc::mallopt(nix::libc::M_ARENA_MAX, 1);
    }
}

/// Returns the heap memory an update freed to the system: decoding two configs, planning and
/// journaling a hundred files leaves megabytes of free but resident heap behind, which glibc
/// would keep for a next update that may come in days. Takes a millisecond or so.
pub fn trim_heap() {
    #[cfg(target_env = "gnu")]
    // SAFETY: malloc_trim takes the allocator's own locks; it has no preconditions.
    unsafe {
        nix::libc::malloc_trim(0);
    }
}

/// How many descriptors are held (for tests).
pub fn held() -> usize {
    HELD.lock().unwrap_or_else(|p| p.into_inner()).len()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    #[test]
    fn a_held_file_lives_until_released_and_the_count_is_bounded() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, b"old").unwrap();
        let ino = std::fs::metadata(&path).unwrap().ino();
        assert!(hold_path(&path));
        std::fs::write(dir.path().join("t"), b"new").unwrap();
        std::fs::rename(dir.path().join("t"), &path).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"new");
        // The old inode is still open here (visible through /proc/self/fd).
        let open_inos: Vec<u64> = std::fs::read_dir("/proc/self/fd")
            .unwrap()
            .filter_map(|e| std::fs::metadata(e.ok()?.path()).ok())
            .map(|m| m.ino())
            .collect();
        assert!(open_inos.contains(&ino));
        // A symlink, a directory and a missing path are not held.
        std::os::unix::fs::symlink(&path, dir.path().join("l")).unwrap();
        assert!(!hold_path(&dir.path().join("l")));
        assert!(!hold_path(dir.path()));
        assert!(!hold_path(&dir.path().join("missing")));
        // Other tests of this process hold and release too: only the bound is certain.
        for _ in 0..MAX_HELD + 1 {
            hold_path(&path);
            assert!(held() <= MAX_HELD);
        }
        release();
    }
}
