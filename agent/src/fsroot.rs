//! Every filesystem operation of the apply engine, beneath the host root and nowhere else.
//!
//! Paths are resolved with cap-std's openat-style lookup from a directory handle on the root, so a
//! symlink on the host (absolute, or relative with enough `..`) can never make the agent read or
//! write outside the root: cap-std refuses such lookups instead of following them. The final
//! component of a path is never followed: writes replace it with `rename`, reads use `O_NOFOLLOW`.
//! Writes are atomic and durable (temp file in the same directory, fsync, rename, fsync of the
//! directory), so a crash leaves either the old or the new bytes at every path.

use crate::host::Root;
use cap_std::ambient_authority;
use cap_std::fs::{Dir, DirBuilder, DirBuilderExt, MetadataExt, OpenOptions, OpenOptionsExt};
use nix::unistd::{Gid, Uid};
use std::io::{self, Read, Write};
use std::path::{Component, Path, PathBuf};

/// An I/O error with the operation and the root-relative path it happened on. The message
/// quotes the I/O error and it is not also the error's source: a reason formatted with its
/// chain (`{:#}`) would say it twice.
#[derive(Debug, thiserror::Error)]
#[error("{op} /{}: {error}", path.strip_prefix("/").unwrap_or(path).display())]
pub struct FsError {
    pub op: &'static str,
    pub path: PathBuf,
    pub error: io::Error,
}

impl FsError {
    /// `op` failed on the root-relative `path`.
    pub fn new(op: &'static str, path: impl Into<PathBuf>, source: io::Error) -> Self {
        FsError { op, path: path.into(), error: source }
    }

    /// Whether cap-std refused the lookup because it would have left the root.
    pub fn is_escape(&self) -> bool {
        is_escape(&self.error)
    }
}

/// cap-std reports an escape attempt as PermissionDenied with this text; as root nothing else in
/// a lookup returns PermissionDenied, but match the text to be sure.
pub fn is_escape(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::PermissionDenied && e.to_string().contains("outside of the filesystem")
}

/// What keeps root from replacing a path ([`HostFs::lock_on`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lock {
    /// `chattr +i`: no rename over it, no removal, and in a directory no new entry.
    Immutable,
    /// `chattr +a`: no rename over it, no removal.
    AppendOnly,
    /// Something is mounted over it (a bind mount): a rename over it fails with EBUSY.
    MountPoint,
}

impl Lock {
    /// What it is and how an admin lifts it, for a refusal.
    pub fn describe(self) -> &'static str {
        match self {
            Lock::Immutable => "is immutable (chattr +i; lift it with chattr -i)",
            Lock::AppendOnly => "is append-only (chattr +a; lift it with chattr -a)",
            Lock::MountPoint => "has a file system mounted over it (unmount it first)",
        }
    }
}

/// What is at a path (the final component not followed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Entry {
    Absent,
    File {
        mode: u32,
        uid: u32,
        gid: u32,
        len: u64,
    },
    Symlink {
        target: PathBuf,
    },
    Dir {
        mode: u32,
        uid: u32,
        gid: u32,
    },
    /// A device, socket or fifo: never touched by the agent.
    Other {
        mode: u32,
    },
}

/// Ancestors already resolved by [`HostFs::missing_ancestors_cached`]: true for a directory,
/// false for a missing one.
#[derive(Debug, Default)]
pub struct Ancestors(std::collections::HashMap<PathBuf, bool>);

/// The host filesystem beneath a root directory.
#[derive(Debug)]
pub struct HostFs {
    dir: Dir,
    root: PathBuf,
}

/// Converts an absolute config path (`/etc/foo`) to the root-relative path used here (`etc/foo`).
/// Validation has made sure the path is absolute and clean before anything calls this.
pub fn rel(abs: &str) -> PathBuf {
    PathBuf::from(abs.trim_start_matches('/'))
}

/// The deterministic temp name used when writing `rel`: a crash leaves at most this one file
/// behind, and the journal knows its name so recovery can remove it.
pub fn temp_name(rel: &Path) -> PathBuf {
    let name = rel.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let tmp = format!(".{name}.aloft-tmp");
    match rel.parent() {
        Some(p) => p.join(tmp),
        None => PathBuf::from(tmp),
    }
}

fn split(rel: &Path) -> io::Result<(&Path, &std::ffi::OsStr)> {
    let name = rel.file_name().ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "path has no file name"))?;
    Ok((rel.parent().unwrap_or(Path::new("")), name))
}

fn dot(p: &Path) -> &Path {
    if p.as_os_str().is_empty() {
        Path::new(".")
    } else {
        p
    }
}

impl HostFs {
    /// Opens the root directory; every later lookup is relative to this handle.
    pub fn open(root: &Root) -> Result<Self, FsError> {
        let dir = Dir::open_ambient_dir(root.path(), ambient_authority())
            .map_err(|e| FsError::new("open root", root.path(), e))?;
        Ok(HostFs { dir, root: root.path().to_path_buf() })
    }

    /// The root on the ambient filesystem, for messages only.
    pub fn root_path(&self) -> &Path {
        &self.root
    }

    /// The directory `rel`'s final component lives in, opened safely ([`HostFs::open_dir_safely`]),
    /// and that component's name: every write, removal and rename goes through it.
    fn parent_dir(&self, rel: &Path) -> io::Result<(Dir, std::ffi::OsString)> {
        let (parent, name) = split(rel)?;
        Ok((self.open_dir_safely(parent)?, name.to_os_string()))
    }

    /// Opens the directory `rel` one component at a time, each opened with `O_NOFOLLOW` beneath
    /// the one before, following only symlinks root owns. A symlink another user owns is refused
    /// ([`unsafe_symlink`]): the agent runs as root and chowns what it writes, so a user's
    /// `~/.config -> /etc/sudoers.d` would have turned a MachineConfig's dotfile for that user
    /// into a file of theirs in /etc (root at the next boot), and the config's removal into a
    /// removal there. Holding each directory open, a symlink swapped in after a check is not
    /// followed either. `..` never leaves the root (cap-std's escape error, as before).
    fn open_dir_safely(&self, rel: &Path) -> io::Result<Dir> {
        let mut stack: Vec<Dir> = vec![self.dir.try_clone()?];
        let mut todo: std::collections::VecDeque<std::ffi::OsString> = std::collections::VecDeque::new();
        let push_all = |todo: &mut std::collections::VecDeque<std::ffi::OsString>, p: &Path, front: bool| {
            let comps: Vec<std::ffi::OsString> = p
                .components()
                .filter_map(|c| match c {
                    Component::Normal(n) => Some(n.to_os_string()),
                    Component::ParentDir => Some("..".into()),
                    _ => None,
                })
                .collect();
            if front {
                for c in comps.into_iter().rev() {
                    todo.push_front(c);
                }
            } else {
                todo.extend(comps);
            }
        };
        push_all(&mut todo, rel, false);
        let mut seen = PathBuf::new();
        let mut hops = 0;
        while let Some(c) = todo.pop_front() {
            if c == ".." {
                if stack.len() == 1 {
                    return Err(io::Error::new(
                        io::ErrorKind::PermissionDenied,
                        "a path led outside of the filesystem (the host root)",
                    ));
                }
                stack.pop();
                seen.pop();
                continue;
            }
            let cur = stack.last().ok_or_else(|| io::Error::other("no directory"))?;
            let meta = cur.symlink_metadata(&c)?;
            if meta.file_type().is_symlink() {
                if meta.uid() != 0 {
                    return Err(unsafe_symlink(&seen.join(&c), meta.uid()));
                }
                hops += 1;
                if hops > 40 {
                    return Err(io::Error::other(format!("too many symlinks in {}", rel.display())));
                }
                let target = cur.read_link_contents(&c)?;
                if target.is_absolute() {
                    stack.truncate(1);
                    seen = PathBuf::new();
                }
                push_all(&mut todo, &target, true);
                continue;
            }
            let f = cur.open_with(
                &c,
                OpenOptions::new().read(true).custom_flags(nix::libc::O_DIRECTORY | nix::libc::O_NOFOLLOW),
            )?;
            let next = Dir::from_std_file(f.into_std());
            seen.push(&c);
            stack.push(next);
        }
        stack.pop().ok_or_else(|| io::Error::other("no directory"))
    }

    /// What is at `rel`, without following its final component. Ancestors are resolved safely:
    /// an ancestor symlink leading out of the root is an error ([`FsError::is_escape`]).
    pub fn entry(&self, rel: &Path) -> Result<Entry, FsError> {
        match self.dir.symlink_metadata(rel) {
            Ok(m) => {
                let ft = m.file_type();
                Ok(if ft.is_symlink() {
                    Entry::Symlink { target: self.read_link(rel)? }
                } else if ft.is_file() {
                    Entry::File { mode: m.mode() & 0o7777, uid: m.uid(), gid: m.gid(), len: m.len() }
                } else if ft.is_dir() {
                    Entry::Dir { mode: m.mode() & 0o7777, uid: m.uid(), gid: m.gid() }
                } else {
                    Entry::Other { mode: m.mode() }
                })
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Entry::Absent),
            Err(e) => Err(FsError::new("stat", rel, e)),
        }
    }

    /// The raw mode (type and permission bits) of `rel`, final component not followed.
    pub fn raw_mode(&self, rel: &Path) -> Result<Option<u32>, FsError> {
        match self.dir.symlink_metadata(rel) {
            Ok(m) => Ok(Some(m.mode())),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(FsError::new("stat", rel, e)),
        }
    }

    /// The ancestors of `rel` that do not exist yet, outermost first. Fails when an ancestor
    /// exists but is not a directory, or when resolving one would leave the root.
    pub fn missing_ancestors(&self, rel: &Path) -> Result<Vec<PathBuf>, FsError> {
        self.missing_ancestors_cached(rel, &mut Ancestors::default())
    }

    /// [`HostFs::missing_ancestors`] for many paths in one read-only pass (validation, planning):
    /// `seen` remembers every ancestor already resolved, so paths that share their directories
    /// (a config's files live in a few) cost one lookup each instead of one per ancestor, each
    /// of which cap-std resolves component by component. Errors are not remembered. Nothing may
    /// create or remove directories beneath the root while `seen` is in use.
    pub fn missing_ancestors_cached(&self, rel: &Path, seen: &mut Ancestors) -> Result<Vec<PathBuf>, FsError> {
        let mut missing = Vec::new();
        let mut prefix = PathBuf::new();
        let comps: Vec<Component> = rel.components().collect();
        for c in comps.iter().take(comps.len().saturating_sub(1)) {
            prefix.push(c);
            if !missing.is_empty() {
                missing.push(prefix.clone());
                continue;
            }
            match seen.0.get(&prefix) {
                Some(true) => continue,
                Some(false) => {
                    missing.push(prefix.clone());
                    continue;
                }
                None => {}
            }
            // An ancestor may be a symlink to a dir (RHCOS' /home -> var/home), if root owns it:
            // one a user owns is refused here, before anything is changed, as the write would.
            if let Ok(m) = self.dir.symlink_metadata(&prefix) {
                if m.file_type().is_symlink() && m.uid() != 0 {
                    return Err(FsError::new("resolve", &prefix, unsafe_symlink(&prefix, m.uid())));
                }
            }
            // Follows symlinks (within the root only).
            match self.dir.metadata(&prefix) {
                Ok(m) if m.is_dir() => {
                    seen.0.insert(prefix.clone(), true);
                }
                Ok(_) => {
                    return Err(FsError::new(
                        "resolve",
                        &prefix,
                        io::Error::new(io::ErrorKind::NotADirectory, "exists and is not a directory"),
                    ))
                }
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    // A dangling symlink is "not found" too; creating the dir would fail later.
                    if let Ok(Entry::Symlink { target }) = self.entry(&prefix) {
                        return Err(FsError::new(
                            "resolve",
                            &prefix,
                            io::Error::new(
                                io::ErrorKind::NotFound,
                                format!("is a dangling symlink to {}", target.display()),
                            ),
                        ));
                    }
                    seen.0.insert(prefix.clone(), false);
                    missing.push(prefix.clone());
                }
                Err(e) => return Err(FsError::new("resolve", &prefix, e)),
            }
        }
        Ok(missing)
    }

    /// Where `rel` lands on this host: its deepest existing ancestor resolved through symlinks
    /// (inside the root), then the rest as written; the last component itself is not followed
    /// (a symlink there is replaced, not written through). Two paths a config names apart can
    /// be one file on the host (RHCOS' `/var/run -> ../run`, `/home -> var/home`), which checks
    /// of the strings cannot see.
    pub fn resolved(&self, rel: &Path) -> Result<PathBuf, FsError> {
        let mut rest: Vec<&std::ffi::OsStr> = rel.file_name().into_iter().collect();
        let mut existing = rel.parent().unwrap_or(Path::new(""));
        while !existing.as_os_str().is_empty() {
            match self.dir.canonicalize(existing) {
                Ok(mut real) => {
                    // cap-std says "." for the root itself.
                    if real == Path::new(".") {
                        real = PathBuf::new();
                    }
                    real.extend(rest.iter().rev());
                    return Ok(real);
                }
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    rest.extend(existing.file_name());
                    existing = existing.parent().unwrap_or(Path::new(""));
                }
                Err(e) => return Err(FsError::new("resolve", existing, e)),
            }
        }
        Ok(rest.iter().rev().collect())
    }

    /// Whether the existing directory `rel` ("" for the root) is on a file system mounted
    /// read-only as this process sees it: an image-based host's /usr, and what the agent's unit
    /// leaves read-only (ProtectSystem=strict). A write there would fail in the middle of an
    /// update, after the drain.
    pub fn read_only_dir(&self, rel: &Path) -> Result<bool, FsError> {
        let dir = if rel.as_os_str().is_empty() { self.dir.try_clone() } else { self.dir.open_dir(rel) }
            .map_err(|e| FsError::new("open", rel, e))?;
        let st = nix::sys::statvfs::fstatvfs(&dir).map_err(|e| FsError::new("statvfs", rel, io::Error::from(e)))?;
        Ok(st.flags().contains(nix::sys::statvfs::FsFlags::ST_RDONLY))
    }

    /// What keeps even root from replacing or removing the existing `rel` ("" for the root): an
    /// inode flag (`chattr +i` / `+a`) or something mounted over it. None when nothing does,
    /// when `rel` does not exist, or when the kernel or file system cannot say. Why: the apply
    /// replaces every file with a rename, and such a path fails it after the drain, with half
    /// the files written.
    pub fn lock_on(&self, rel: &Path) -> Result<Option<Lock>, FsError> {
        use rustix::fs::{statx, AtFlags, StatxAttributes, StatxFlags};
        let flags = AtFlags::SYMLINK_NOFOLLOW;
        let found = if rel.as_os_str().is_empty() {
            statx(&self.dir, "", flags | AtFlags::EMPTY_PATH, StatxFlags::BASIC_STATS)
        } else {
            let (parent, name) = match self.parent_dir(rel) {
                Ok(p) => p,
                Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
                Err(e) => return Err(FsError::new("open parent", rel, e)),
            };
            statx(&parent, name.as_os_str(), flags, StatxFlags::BASIC_STATS)
        };
        let st = match found {
            Ok(st) => st,
            // The kernel, a seccomp filter or the file system cannot say (older container
            // runtimes answer statx with EPERM): not refused on that account.
            Err(
                rustix::io::Errno::NOENT
                | rustix::io::Errno::NOSYS
                | rustix::io::Errno::PERM
                | rustix::io::Errno::ACCESS
                | rustix::io::Errno::OPNOTSUPP
                | rustix::io::Errno::INVAL,
            ) => return Ok(None),
            Err(e) => return Err(FsError::new("statx", rel, e.into())),
        };
        let has = |a: StatxAttributes| st.stx_attributes_mask.contains(a) && st.stx_attributes.contains(a);
        Ok(if has(StatxAttributes::IMMUTABLE) {
            Some(Lock::Immutable)
        } else if has(StatxAttributes::APPEND) {
            Some(Lock::AppendOnly)
        } else if has(StatxAttributes::MOUNT_ROOT) && !rel.as_os_str().is_empty() {
            Some(Lock::MountPoint)
        } else {
            None
        })
    }

    /// Creates the missing ancestors of `rel` with `mode` (0755 for config files, as MCO),
    /// owned by root, each made durable in its parent.
    pub fn ensure_parent(&self, rel: &Path) -> Result<(), FsError> {
        for dir in self.missing_ancestors(rel)? {
            self.create_dir(&dir, 0o755, 0, 0)?;
        }
        Ok(())
    }

    fn create_dir(&self, rel: &Path, mode: u32, uid: u32, gid: u32) -> Result<(), FsError> {
        let mut b = DirBuilder::new();
        b.mode(mode);
        let (parent, name) = self.parent_dir(rel).map_err(|e| FsError::new("open parent", rel, e))?;
        match parent.create_dir_with(&name, &b) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(FsError::new("mkdir", rel, e)),
        }
        self.set_dir_meta(rel, mode, uid, gid)?;
        self.sync_parent(rel)
    }

    /// Makes `rel` a directory with exactly this mode and owner (creating it if missing; its own
    /// ancestors must exist).
    pub fn mkdir(&self, rel: &Path, mode: u32, uid: u32, gid: u32) -> Result<(), FsError> {
        self.create_dir(rel, mode, uid, gid)
    }

    /// chmod + chown of a directory (through an fd opened for reading, not O_PATH).
    pub fn set_dir_meta(&self, rel: &Path, mode: u32, uid: u32, gid: u32) -> Result<(), FsError> {
        let (parent, name) = self.parent_dir(rel).map_err(|e| FsError::new("open parent", rel, e))?;
        let f = parent
            .open_with(
                &name,
                OpenOptions::new().read(true).custom_flags(nix::libc::O_DIRECTORY | nix::libc::O_NOFOLLOW),
            )
            .map_err(|e| FsError::new("open dir", rel, e))?;
        nix::unistd::fchown(&f, Some(Uid::from_raw(uid)), Some(Gid::from_raw(gid)))
            .map_err(|e| FsError::new("chown", rel, e.into()))?;
        nix::sys::stat::fchmod(&f, nix::sys::stat::Mode::from_bits_truncate(mode))
            .map_err(|e| FsError::new("chmod", rel, e.into()))?;
        f.sync_all().map_err(|e| FsError::new("fsync", rel, e))
    }

    /// fsync the directory containing `rel`, so a rename/create/unlink in it is durable.
    pub fn sync_parent(&self, rel: &Path) -> Result<(), FsError> {
        let parent = dot(rel.parent().unwrap_or(Path::new("")));
        self.sync_dir(parent)
    }

    fn sync_dir(&self, rel: &Path) -> Result<(), FsError> {
        let f = self
            .dir
            .open_with(rel, OpenOptions::new().read(true).custom_flags(nix::libc::O_DIRECTORY))
            .map_err(|e| FsError::new("open dir", rel, e))?;
        f.sync_all().map_err(|e| FsError::new("fsync dir", rel, e))
    }

    /// Writes `rel` atomically: the deterministic temp name in the same directory, contents,
    /// owner, mode, fsync, rename over the target, fsync of the directory. Parents must exist.
    pub fn write_atomic(&self, rel: &Path, src: &mut dyn Read, mode: u32, uid: u32, gid: u32) -> Result<(), FsError> {
        let f = self.write_temp(rel, src, mode, uid, gid)?;
        f.sync_all().map_err(|e| FsError::new("fsync", temp_name(rel), e))?;
        drop(f);
        self.commit_temp(rel)?;
        self.sync_parent(rel)
    }

    /// First half of an atomic write: the contents, owner and mode at `rel`'s deterministic temp
    /// name, not yet durable. A batch of writes calls this for every file, fsyncs the returned
    /// files together ([`crate::durable::fsync_all`]), then [`HostFs::commit_temp`]s each and
    /// syncs each directory once: the same guarantee as one atomic write after the other (a crash
    /// leaves every path with its old or its new bytes, and at most the known temp file beside
    /// it), at a fraction of the flushes.
    pub fn write_temp(
        &self,
        rel: &Path,
        src: &mut dyn Read,
        mode: u32,
        uid: u32,
        gid: u32,
    ) -> Result<cap_std::fs::File, FsError> {
        let (parent, _) = self.parent_dir(rel).map_err(|e| FsError::new("open parent", rel, e))?;
        let tmp_rel = temp_name(rel);
        let tmp = tmp_rel.file_name().map(|n| n.to_os_string()).unwrap_or_default();
        match parent.remove_file(&tmp) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(FsError::new("remove stale temp", &tmp_rel, e)),
        }
        let mut f = parent
            .open_with(&tmp, OpenOptions::new().write(true).create_new(true).mode(0o600))
            .map_err(|e| FsError::new("create", &tmp_rel, e))?;
        io::copy(src, &mut f).map_err(|e| FsError::new("write", &tmp_rel, e))?;
        f.flush().map_err(|e| FsError::new("write", &tmp_rel, e))?;
        nix::unistd::fchown(&f, Some(Uid::from_raw(uid)), Some(Gid::from_raw(gid)))
            .map_err(|e| FsError::new("chown", &tmp_rel, e.into()))?;
        // After chown: chown clears set-id bits (never wanted here anyway).
        nix::sys::stat::fchmod(&f, nix::sys::stat::Mode::from_bits_truncate(mode))
            .map_err(|e| FsError::new("chmod", &tmp_rel, e.into()))?;
        fail::fail_point!(crate::apply::points::FS_AFTER_TEMP);
        Ok(f)
    }

    /// Second half of an atomic write: renames the temp file [`HostFs::write_temp`] made over
    /// `rel`. Durable only after the caller syncs the directory (or the filesystem).
    pub fn commit_temp(&self, rel: &Path) -> Result<(), FsError> {
        let (parent, name) = self.parent_dir(rel).map_err(|e| FsError::new("open parent", rel, e))?;
        let tmp = temp_name(rel).file_name().map(|n| n.to_os_string()).unwrap_or_default();
        Self::hold_replaced(&parent, &name);
        parent.rename(&tmp, &parent, &name).map_err(|e| FsError::new("rename", rel, e))?;
        fail::fail_point!(crate::apply::points::FS_AFTER_RENAME);
        Ok(())
    }

    /// Keeps the regular file `name` of `parent` open across the rename that replaces it, so
    /// that the kernel frees it later, off the update's critical path (see [`crate::reclaim`]).
    fn hold_replaced(parent: &Dir, name: &std::ffi::OsStr) {
        let opened = parent
            .open_with(name, OpenOptions::new().read(true).custom_flags(nix::libc::O_NOFOLLOW | nix::libc::O_NONBLOCK));
        if let Ok(f) = opened {
            if f.metadata().is_ok_and(|m| m.is_file()) {
                crate::reclaim::hold(std::os::fd::OwnedFd::from(f.into_std()));
            }
        }
    }

    /// fsyncs the directories holding `rels`, each once.
    pub fn sync_parents<'a>(&self, rels: impl IntoIterator<Item = &'a Path>) -> Result<(), FsError> {
        let dirs: std::collections::BTreeSet<&Path> =
            rels.into_iter().map(|r| dot(r.parent().unwrap_or(Path::new("")))).collect();
        for d in dirs {
            self.sync_dir(d)?;
        }
        Ok(())
    }

    /// Points `rel` at `target` atomically (a temp symlink renamed over it). The target is
    /// stored as given and never resolved here (it may be `/dev/null`).
    pub fn symlink_atomic(&self, rel: &Path, target: &Path) -> Result<(), FsError> {
        let (parent, name) = self.parent_dir(rel).map_err(|e| FsError::new("open parent", rel, e))?;
        let tmp_rel = temp_name(rel);
        let tmp = tmp_rel.file_name().map(|n| n.to_os_string()).unwrap_or_default();
        match parent.remove_file(&tmp) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(FsError::new("remove stale temp", &tmp_rel, e)),
        }
        parent.symlink_contents(target, &tmp).map_err(|e| FsError::new("symlink", &tmp_rel, e))?;
        fail::fail_point!(crate::apply::points::FS_AFTER_TEMP);
        parent.rename(&tmp, &parent, &name).map_err(|e| FsError::new("rename", rel, e))?;
        fail::fail_point!(crate::apply::points::FS_AFTER_RENAME);
        self.sync_parent(rel)
    }

    /// Removes a file or symlink; `Ok(false)` when nothing was there. Durable.
    pub fn remove(&self, rel: &Path) -> Result<bool, FsError> {
        let (parent, name) = match self.parent_dir(rel) {
            Ok(p) => p,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
            Err(e) => return Err(FsError::new("open parent", rel, e)),
        };
        match parent.remove_file(&name) {
            Ok(()) => {
                self.sync_parent(rel)?;
                Ok(true)
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(FsError::new("remove", rel, e)),
        }
    }

    /// Removes the directory `rel` if it is empty; anything else is left alone.
    pub fn remove_dir_if_empty(&self, rel: &Path) -> Result<bool, FsError> {
        let (parent, name) = match self.parent_dir(rel) {
            Ok(p) => p,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
            Err(e) => return Err(FsError::new("open parent", rel, e)),
        };
        match parent.remove_dir(&name) {
            Ok(()) => {
                self.sync_parent(rel)?;
                Ok(true)
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
            Err(e) if e.kind() == io::ErrorKind::DirectoryNotEmpty => Ok(false),
            Err(e) if e.kind() == io::ErrorKind::NotADirectory => Ok(false),
            Err(e) => Err(FsError::new("rmdir", rel, e)),
        }
    }

    /// Renames `from` to `to` (both beneath the root) and makes both directories durable.
    /// Fails with `CrossesDevices` when they are on different filesystems.
    pub fn rename(&self, from: &Path, to: &Path) -> Result<(), FsError> {
        let (from_dir, from_name) = self.parent_dir(from).map_err(|e| FsError::new("open parent", from, e))?;
        let (to_dir, to_name) = self.parent_dir(to).map_err(|e| FsError::new("open parent", to, e))?;
        from_dir.rename(&from_name, &to_dir, &to_name).map_err(|e| FsError::new("rename", from, e))?;
        self.sync_parent(to)?;
        self.sync_parent(from)
    }

    /// Opens a regular file for reading; refuses to follow a symlink at the final component.
    pub fn open_read(&self, rel: &Path) -> Result<cap_std::fs::File, FsError> {
        self.dir
            .open_with(rel, OpenOptions::new().read(true).custom_flags(nix::libc::O_NOFOLLOW))
            .map_err(|e| FsError::new("open", rel, e))
    }

    /// Reads at most `limit` bytes of a regular file (an error when it is longer).
    pub fn read_limited(&self, rel: &Path, limit: u64) -> Result<Vec<u8>, FsError> {
        read_bounded(self.open_read(rel)?, rel, limit)
    }

    /// Reads at most `limit` bytes of a file, following symlinks (within the root only): for
    /// files the agent reads but never writes, such as /etc/passwd.
    pub fn read_following(&self, rel: &Path, limit: u64) -> Result<Vec<u8>, FsError> {
        read_bounded(self.dir.open(rel).map_err(|e| FsError::new("open", rel, e))?, rel, limit)
    }

    /// Reads a symlink's target as stored (absolute targets included: nothing is resolved).
    pub fn read_link(&self, rel: &Path) -> Result<PathBuf, FsError> {
        self.dir.read_link_contents(rel).map_err(|e| FsError::new("readlink", rel, e))
    }

    /// Names in the directory `rel` (empty when it does not exist).
    pub fn list_dir(&self, rel: &Path) -> Result<Vec<std::ffi::OsString>, FsError> {
        let rd = match self.dir.read_dir(dot(rel)) {
            Ok(rd) => rd,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(FsError::new("readdir", rel, e)),
        };
        let mut names = Vec::new();
        for ent in rd {
            names.push(ent.map_err(|e| FsError::new("readdir", rel, e))?.file_name());
        }
        names.sort();
        Ok(names)
    }
}

/// The refusal of a symlink another user than root owns, on the way to a path the agent writes.
fn unsafe_symlink(path: &Path, uid: u32) -> io::Error {
    io::Error::new(
        io::ErrorKind::PermissionDenied,
        format!(
            "/{} is a symlink owned by uid {uid}, not root: the agent follows only root's symlinks on the way to what it writes",
            path.display()
        ),
    )
}

/// At most `limit` bytes of `f` (an error when it is longer).
fn read_bounded(f: cap_std::fs::File, rel: &Path, limit: u64) -> Result<Vec<u8>, FsError> {
    let mut buf = Vec::new();
    f.take(limit + 1).read_to_end(&mut buf).map_err(|e| FsError::new("read", rel, e))?;
    if buf.len() as u64 > limit {
        return Err(FsError::new(
            "read",
            rel,
            io::Error::new(io::ErrorKind::FileTooLarge, format!("longer than {limit} bytes")),
        ));
    }
    Ok(buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Where a path lands: its existing ancestors resolved through symlinks inside the root (one
    /// to the root itself is the root, not "."), the missing rest and the name as written, the
    /// name itself not followed.
    #[test]
    fn a_path_resolves_through_its_existing_ancestors_only() {
        let dir = tempfile::tempdir().unwrap();
        for d in ["run", "var", "etc"] {
            std::fs::create_dir_all(dir.path().join(d)).unwrap();
        }
        std::os::unix::fs::symlink("../run", dir.path().join("var/run")).unwrap();
        std::os::unix::fs::symlink("..", dir.path().join("etc/top")).unwrap();
        std::os::unix::fs::symlink("/etc/hosts", dir.path().join("etc/name-link")).unwrap();
        let fs = HostFs::open(&Root::new(dir.path())).unwrap();
        let resolved = |p: &str| fs.resolved(Path::new(p)).unwrap();
        assert_eq!(resolved("var/run/force"), Path::new("run/force"));
        assert_eq!(resolved("var/run/new/dir/x"), Path::new("run/new/dir/x"), "missing directories kept as written");
        assert_eq!(resolved("etc/top/x"), Path::new("x"), "a link to the root");
        assert_eq!(resolved("etc/name-link"), Path::new("etc/name-link"), "the name itself is not followed");
        assert_eq!(resolved("x"), Path::new("x"));
        assert_eq!(resolved("no/such/dir/x"), Path::new("no/such/dir/x"));
    }

    #[test]
    fn refuses_symlinks_that_leave_the_root_and_writes_atomically() {
        let outside = tempfile::tempdir().unwrap();
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("etc")).unwrap();
        std::os::unix::fs::symlink(outside.path(), dir.path().join("etc/evil")).unwrap();
        std::os::unix::fs::symlink("../../..", dir.path().join("etc/up")).unwrap();
        let fs = HostFs::open(&Root::new(dir.path())).unwrap();
        let err = fs.missing_ancestors(Path::new("etc/evil/x/y")).unwrap_err();
        assert!(err.is_escape(), "{err}");
        let err = fs.missing_ancestors(Path::new("etc/up/x")).unwrap_err();
        assert!(err.is_escape(), "{err}");
        assert_eq!(
            fs.missing_ancestors(Path::new("etc/a/b/c")).unwrap(),
            vec![PathBuf::from("etc/a"), "etc/a/b".into()]
        );
        fs.ensure_parent(Path::new("etc/a/b/c")).unwrap();
        fs.write_atomic(Path::new("etc/a/b/c"), &mut &b"hi"[..], 0o640, 0, 0).unwrap();
        assert_eq!(fs.entry(Path::new("etc/a/b/c")).unwrap(), Entry::File { mode: 0o640, uid: 0, gid: 0, len: 2 });
        assert_eq!(fs.entry(Path::new("etc/a")).unwrap(), Entry::Dir { mode: 0o755, uid: 0, gid: 0 });
        fs.symlink_atomic(Path::new("etc/a/b/c"), Path::new("/dev/null")).unwrap();
        assert_eq!(fs.entry(Path::new("etc/a/b/c")).unwrap(), Entry::Symlink { target: "/dev/null".into() });
        assert!(fs.open_read(Path::new("etc/evil")).is_err());
        assert_eq!(std::fs::read_dir(outside.path()).unwrap().count(), 0);
    }

    /// The audit's escalation: a user points a directory of theirs at /etc (`~/.config ->
    /// ../../etc/tmpfiles.d`), and a MachineConfig's file for that user, written and chowned by
    /// the agent as root, lands in /etc, or its removal removes a file there. A symlink a user
    /// owns is not followed on the way to any write, removal, rename or directory change, nor in
    /// validation; root's symlinks are (RHCOS' `/home -> var/home`), `..` in them included.
    #[test]
    fn a_users_symlink_is_not_followed_to_a_write() {
        let dir = tempfile::tempdir().unwrap();
        let p = |s: &str| dir.path().join(s);
        for d in ["etc/tmpfiles.d", "var/home/core/real"] {
            std::fs::create_dir_all(p(d)).unwrap();
        }
        std::fs::write(p("etc/tmpfiles.d/app.conf"), "root's").unwrap();
        std::os::unix::fs::symlink("var/home", p("home")).unwrap();
        std::os::unix::fs::symlink("../../../etc/tmpfiles.d", p("var/home/core/.config")).unwrap();
        std::os::unix::fs::lchown(p("var/home/core/.config"), Some(1000), Some(1000)).unwrap();
        std::os::unix::fs::symlink("../../../etc/tmpfiles.d", p("var/home/core/roots")).unwrap();
        let fs = HostFs::open(&Root::new(dir.path())).unwrap();
        let bad = Path::new("home/core/.config/app.conf");
        let says = |e: FsError| {
            let m = e.to_string();
            assert!(m.contains("/home/core/.config is a symlink owned by uid 1000, not root"), "{m}");
        };
        says(fs.write_atomic(bad, &mut &b"mine"[..], 0o644, 1000, 1000).unwrap_err());
        says(fs.missing_ancestors(Path::new("home/core/.config/sub/app.conf")).unwrap_err());
        says(fs.remove(bad).unwrap_err());
        says(fs.mkdir(Path::new("home/core/.config/d"), 0o755, 1000, 1000).unwrap_err());
        says(fs.symlink_atomic(bad, Path::new("/dev/null")).unwrap_err());
        says(fs.rename(Path::new("etc/tmpfiles.d/app.conf"), bad).unwrap_err());
        assert_eq!(std::fs::read_to_string(p("etc/tmpfiles.d/app.conf")).unwrap(), "root's", "nothing changed");
        assert_eq!(std::fs::read_dir(p("etc/tmpfiles.d")).unwrap().count(), 1);
        // Root's symlinks are followed, relative ones with `..` too; the user's real directory is
        // written in as before.
        fs.write_atomic(Path::new("home/core/real/x"), &mut &b"x"[..], 0o600, 1000, 1000).unwrap();
        assert_eq!(std::fs::read_to_string(p("var/home/core/real/x")).unwrap(), "x");
        fs.write_atomic(Path::new("home/core/roots/y.conf"), &mut &b"y"[..], 0o644, 0, 0).unwrap();
        assert_eq!(std::fs::read_to_string(p("etc/tmpfiles.d/y.conf")).unwrap(), "y");
        assert!(fs.remove(Path::new("home/core/roots/y.conf")).unwrap());
        // `..` past the root is still an escape.
        std::os::unix::fs::symlink("../../../../..", p("etc/up")).unwrap();
        let e = fs.write_atomic(Path::new("etc/up/z"), &mut &b"z"[..], 0o644, 0, 0).unwrap_err();
        assert!(e.is_escape(), "{e}");
    }
}
