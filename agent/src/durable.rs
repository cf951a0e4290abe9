//! Making many small files durable at once.
//!
//! An apply writes a hundred files or more; an fsync each, one after the other, costs a hundred
//! journal commits. `syncfs` costs one flush but of the whole filesystem, which on a node whose
//! workloads write heavily to the same filesystem can take seconds (measured here: 1.7 s while a
//! build was writing). Concurrent fsyncs of only our files let the filesystem group them into a
//! few commits (ext4's jbd2 and XFS both batch concurrent fsyncs) without flushing anyone
//! else's data.

use std::io;
use std::os::fd::AsFd;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Durably replaces the file at `path` with `bytes`, readable by root alone (the agent's own
/// records hold config files' contents, secrets included): written to a temp file beside it,
/// fsynced, renamed over it, the directory fsynced. A crash leaves the old file or the new one.
pub fn replace_private(path: &Path, bytes: &[u8]) -> io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let dir = path.parent().ok_or_else(|| io::Error::other(format!("{} has no directory", path.display())))?;
    std::fs::create_dir_all(dir)?;
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let tmp = dir.join(format!(".{name}.tmp"));
    // Removed first: a temp file left by a crash keeps its mode through an open.
    let _ = std::fs::remove_file(&tmp);
    let mut f = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(&tmp)?;
    f.write_all(bytes)?;
    f.sync_all()?;
    drop(f);
    crate::reclaim::hold_path(path);
    std::fs::rename(&tmp, path)?;
    std::fs::File::open(dir)?.sync_all()
}

/// At most this many fsyncs in flight: enough for group commit, few enough threads.
const WORKERS: usize = 16;

/// fsyncs every file, concurrently. Returns the index of the first file that failed with its
/// error.
pub fn fsync_all<F: AsFd + Sync>(files: &[F]) -> Result<(), (usize, io::Error)> {
    if files.len() <= 1 {
        return files.first().map_or(Ok(()), |f| fsync(f).map_err(|e| (0, e)));
    }
    let next = AtomicUsize::new(0);
    let workers = files.len().min(WORKERS);
    let results: Vec<Result<(), (usize, io::Error)>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..workers)
            .map(|_| {
                s.spawn(|| loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(f) = files.get(i) else { return Ok(()) };
                    fsync(f).map_err(|e| (i, e))?;
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err((0, io::Error::other("fsync worker panicked")))))
            .collect()
    });
    let mut errors: Vec<(usize, io::Error)> = results.into_iter().filter_map(Result::err).collect();
    errors.sort_by_key(|(i, _)| *i);
    match errors.into_iter().next() {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

fn fsync<F: AsFd>(f: &F) -> io::Result<()> {
    nix::unistd::fsync(f.as_fd()).map_err(io::Error::from)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn syncs_every_file_and_reports_the_failing_one() {
        let dir = tempfile::tempdir().unwrap();
        let files: Vec<std::fs::File> =
            (0..40).map(|i| std::fs::File::create(dir.path().join(format!("f{i}"))).unwrap()).collect();
        fsync_all(&files).unwrap();
        fsync_all::<std::fs::File>(&[]).unwrap();
        // fsync of a pipe fails with EINVAL: the error names its index.
        let (r, _w) = nix::unistd::pipe().unwrap();
        let mut mixed: Vec<std::os::fd::OwnedFd> = files.into_iter().map(Into::into).collect();
        mixed.insert(7, r);
        let (i, e) = fsync_all(&mixed).unwrap_err();
        assert_eq!(i, 7);
        assert_eq!(e.raw_os_error(), Some(nix::libc::EINVAL));
        // Two files, the second failing: the boundary between syncing one file on this thread and
        // many at once (a two-file batch once synced its first file only).
        let f = std::fs::File::create(dir.path().join("two")).unwrap();
        let (r2, _w2) = nix::unistd::pipe().unwrap();
        let two: Vec<std::os::fd::OwnedFd> = vec![f.into(), r2];
        assert_eq!(fsync_all(&two).unwrap_err().0, 1);
    }
}
