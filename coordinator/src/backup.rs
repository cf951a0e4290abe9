//! `aloft-coordinator backup` and `restore`: the data directory copied whole and consistent
//! while the coordinator serves, and put back while it is stopped, without the `sqlite3` tool
//! (an RHCOS-like host has none). OpenShift's counterpart is `cluster-backup.sh` (an etcd
//! snapshot and the static pods' resources); a store on etcd is backed up with `etcdctl snapshot
//! save`, and this copies the rest of its data directory (the CA, the admin token).
//!
//! The databases are copied by SQLite's `VACUUM INTO`: one read transaction, so the copy is the
//! store at one revision, taken while the writer goes on (a reader does not block it in WAL
//! mode). The store is copied before the tokens, so every node credential of a Node in the copy
//! is in the tokens' copy too (a token made between the two is there as well, and harmless).
//! A restore checks the backup (its databases, the store with its tokens, the CA certificate
//! with its key) and copies it in before it touches the data directory's files, and moves
//! what was there aside (WAL files included: one left beside a restored database would be
//! replayed into it) rather than deleting it.

use anyhow::{bail, Context, Result};
use rusqlite::{Connection, OpenFlags};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// The store's file, then the tokens' file: the order they are copied in.
const DATABASES: [&str; 2] = ["aloft.db", "aloft-tokens.db"];

/// The data directory's other files, and whether each holds a secret (kept 0600). The serving
/// certificate (and the names it was issued for) is issued again at start when missing; it is
/// copied so that a restore serves the same one.
const FILES: [(&str, bool); 7] = [
    ("ca.crt", false),
    ("ca.key", true),
    ("admin.token", true),
    ("admin.kubeconfig", true),
    ("serving.crt", false),
    ("serving.key", true),
    ("serving.names", false),
];

/// Present in a data directory while a restore swaps its files: `serve` refuses to start on
/// it (see [`refuse_interrupted_restore`]). Holds the path of the files the restore moved aside.
pub const RESTORING: &str = "restore-in-progress";

/// An error when a restore of `data` was interrupted (a power cut, a kill) between moving the
/// old files aside and putting the backup's in: serving it would make an empty store and a new
/// CA, which no agent trusts.
pub fn refuse_interrupted_restore(data: &Path) -> Result<()> {
    let marker = data.join(RESTORING);
    if let Ok(aside) = std::fs::read_to_string(&marker) {
        bail!(
            "a restore of {} was interrupted: run `aloft-coordinator restore` again, or move the files in {} back \
             and delete {}",
            data.display(),
            aside.trim(),
            marker.display()
        );
    }
    Ok(())
}

/// What a backup or a restore copied: a line a file.
#[derive(Debug, Default)]
pub struct Report {
    pub lines: Vec<String>,
    /// Where a restore moved the files it replaced.
    pub moved_aside: Option<PathBuf>,
}

/// Copy the coordinator's data directory `data` into `to`, a new or empty directory (made
/// 0700: the copy holds every secret the data directory does). Works while `serve` runs.
pub fn backup(data: &Path, to: &Path) -> Result<Report> {
    let has_store = data.join(DATABASES[0]).is_file();
    if !has_store && !data.join("ca.crt").is_file() {
        bail!(
            "{} holds no coordinator data (no aloft.db, no ca.crt): give the --data-dir of `aloft-coordinator serve`",
            data.display()
        );
    }
    let made = !to.exists();
    empty_target(to)?;
    backup_into(data, to, has_store).inspect_err(|_| {
        // Nothing half-made left behind: a retry into the same directory would be refused.
        if made {
            let _ = std::fs::remove_dir_all(to);
        } else if let Ok(entries) = std::fs::read_dir(to) {
            for e in entries.flatten() {
                let _ = std::fs::remove_file(e.path());
            }
        }
    })
}

fn backup_into(data: &Path, to: &Path, has_store: bool) -> Result<Report> {
    let mut report = Report::default();
    for name in DATABASES {
        let from = data.join(name);
        if !from.is_file() {
            continue;
        }
        let copy = to.join(name);
        let tmp = to.join(format!(".{name}.tmp"));
        copy_database(&from, &tmp).with_context(|| format!("copying {}", from.display()))?;
        let what = check_database(name, &tmp).with_context(|| format!("checking the copy of {}", from.display()))?;
        finish(&tmp, &copy, is_secret(name))?;
        report.lines.push(format!("{name}: {what}"));
    }
    for (name, _) in FILES {
        let from = data.join(name);
        if !from.is_file() {
            continue;
        }
        let tmp = to.join(format!(".{name}.tmp"));
        std::fs::copy(&from, &tmp).with_context(|| format!("copying {}", from.display()))?;
        finish(&tmp, &to.join(name), is_secret(name))?;
        report.lines.push(format!("{name}: {} bytes", std::fs::metadata(to.join(name))?.len()));
    }
    sync_dir(to)?;
    if !has_store {
        report.lines.push(
            "no aloft.db: the store is on etcd (--etcd-servers); take `etcdctl snapshot save` of it as well".into(),
        );
    }
    Ok(report)
}

/// Put the backup in `from` into the data directory `data`, which no coordinator may be
/// serving from (its lock is taken for the whole restore). The backup is checked and copied in
/// first; the files it replaces are moved into `data/pre-restore-<time>/`.
pub fn restore(from: &Path, data: &Path) -> Result<Report> {
    restore_with(from, data, &mut |a, b| std::fs::rename(a, b))
}

/// [`restore`], renaming with `rename` (see [`swap_in`]).
fn restore_with(
    from: &Path,
    data: &Path,
    rename: &mut dyn FnMut(&Path, &Path) -> std::io::Result<()>,
) -> Result<Report> {
    if !from.is_dir() {
        bail!("{} is not a directory: give the directory `aloft-coordinator backup` wrote", from.display());
    }
    if !from.join(DATABASES[0]).is_file() && !from.join("ca.crt").is_file() {
        bail!(
            "{} holds no backup (no aloft.db, no ca.crt): give the directory `aloft-coordinator backup` wrote",
            from.display()
        );
    }
    if from.join("ca.crt").is_file() != from.join("ca.key").is_file() {
        bail!(
            "{} has one of ca.crt and ca.key without the other: every agent pins the CA, and a restored CA \
             certificate without its key (or a key without its certificate) cannot sign the serving certificate",
            from.display()
        );
    }
    if from.join(DATABASES[0]).is_file() != from.join(DATABASES[1]).is_file() {
        bail!(
            "{} has one of aloft.db and aloft-tokens.db without the other: a store without its tokens (or tokens \
             without their store) is no backup to restore",
            from.display()
        );
    }
    if let (Ok(a), Ok(b)) = (from.canonicalize(), data.canonicalize()) {
        if a == b {
            bail!(
                "{} is the data directory itself: give the directory `aloft-coordinator backup` wrote",
                from.display()
            );
        }
    }
    let mut report = Report::default();
    for name in DATABASES {
        let path = from.join(name);
        if path.is_file() {
            let what = check_database(name, &path).with_context(|| format!("checking {}", path.display()))?;
            report.lines.push(format!("{name}: {what}"));
        }
    }
    if !data.exists() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(data)
            .with_context(|| format!("creating {}", data.display()))?;
    }
    let _lock = crate::serve::DataDirLock::take(data).map_err(|e| {
        anyhow::anyhow!(
            "{e:#}\na restore needs the coordinator stopped: stop it (systemctl stop aloft-coordinator), then restore"
        )
    })?;
    // What the restore replaces: what the backup has, and a database's WAL and shared-memory
    // files with it. A file the backup lacks stays as it is.
    let mut replaced: Vec<String> = Vec::new();
    for name in DATABASES.into_iter().filter(|n| from.join(n).is_file()) {
        for suffix in ["", "-wal", "-shm"] {
            replaced.push(format!("{name}{suffix}"));
        }
    }
    replaced.extend(FILES.iter().map(|(n, _)| n.to_string()).filter(|n| from.join(n).is_file()));
    // Everything copied in under temporary names first: a copy that fails (a full disk) leaves
    // the data directory as it was. A database is copied as SQLite reads it, WAL included (a
    // `pre-restore-*` directory restored back has its databases' WAL files beside them).
    let mut staged: Vec<(PathBuf, PathBuf)> = Vec::new();
    let staging = (|| -> Result<()> {
        for name in DATABASES.iter().copied().chain(FILES.iter().map(|(n, _)| *n)) {
            let path = from.join(name);
            if !path.is_file() {
                continue;
            }
            let tmp = data.join(format!(".{name}.restore.tmp"));
            staged.push((tmp.clone(), data.join(name)));
            if DATABASES.contains(&name) {
                copy_database(&path, &tmp).with_context(|| format!("copying {}", path.display()))?;
            } else {
                std::fs::copy(&path, &tmp).with_context(|| format!("copying {}", path.display()))?;
                report.lines.push(format!("{name}: {} bytes", std::fs::metadata(&tmp)?.len()));
            }
            seal(&tmp, is_secret(name))?;
        }
        Ok(())
    })();
    if let Err(e) = staging {
        for (tmp, _) in &staged {
            let _ = std::fs::remove_file(tmp);
        }
        return Err(e.context(format!("nothing in {} was changed", data.display())));
    }
    let present: Vec<&String> = replaced.iter().filter(|n| data.join(n).exists()).collect();
    let aside = new_dir_beside(data, &format!("pre-restore-{}", chrono::Utc::now().format("%Y%m%dT%H%M%SZ")))?;
    // From here the directory is between two states: a marker says so, and `serve` refuses to
    // start on it (it would make an empty store and a new CA) until a restore has finished.
    let marker = data.join(RESTORING);
    crate::fsutil::write_private(&marker, format!("{}\n", aside.display()).as_bytes())?;
    sync_dir(data)?;
    swap_in(data, &aside, &present, &staged, &marker, rename)?;
    std::fs::remove_file(&marker).with_context(|| format!("removing {}", marker.display()))?;
    sync_dir(data)?;
    if present.is_empty() {
        let _ = std::fs::remove_dir(&aside);
    } else {
        report.moved_aside = Some(aside);
    }
    Ok(report)
}

/// Move `present` (names in `data`) into `aside`, then each staged (temporary, final) file
/// into place. When a rename fails, puts everything back as it was (the backup's files out, the
/// moved ones in, the marker gone) and says nothing was changed; when even that fails, says
/// which files are left where. `rename` is `std::fs::rename` but in the tests, which make each
/// rename in turn fail: no failing rename can be made on demand on a real file system.
fn swap_in(
    data: &Path,
    aside: &Path,
    present: &[&String],
    staged: &[(PathBuf, PathBuf)],
    marker: &Path,
    rename: &mut dyn FnMut(&Path, &Path) -> std::io::Result<()>,
) -> Result<()> {
    let mut moved: Vec<&String> = Vec::new();
    let mut put_in: Vec<&PathBuf> = Vec::new();
    let swapped = (|| -> Result<()> {
        for name in present {
            rename(&data.join(name), &aside.join(name))
                .with_context(|| format!("moving {} into {}", name, aside.display()))?;
            moved.push(name);
        }
        sync_dir(aside)?;
        for (tmp, path) in staged {
            rename(tmp, path).with_context(|| format!("renaming {} to {}", tmp.display(), path.display()))?;
            put_in.push(path);
        }
        sync_dir(data)
    })();
    let Err(e) = swapped else { return Ok(()) };
    // Back as it was: the backup's files out (staged or put in), the moved files in.
    for (tmp, _) in staged {
        let _ = std::fs::remove_file(tmp);
    }
    for path in &put_in {
        let _ = std::fs::remove_file(path);
    }
    let mut stuck = Vec::new();
    for name in &moved {
        if rename(&aside.join(name), &data.join(name)).is_err() {
            stuck.push(name.as_str());
        }
    }
    if stuck.is_empty() {
        let _ = std::fs::remove_file(marker);
        let _ = std::fs::remove_dir(aside);
        return Err(e.context(format!("nothing in {} was changed", data.display())));
    }
    Err(e.context(format!(
        "the restore stopped half-way and {} could not be moved back from {}: move them back into {} by hand \
         (then delete {}), or run the restore again",
        stuck.join(", "),
        aside.display(),
        data.display(),
        marker.display()
    )))
}

/// A new directory (0700) in `dir` named `name`, or `name-2`, `name-3`, ... when taken (two
/// restores within a second).
fn new_dir_beside(dir: &Path, name: &str) -> Result<PathBuf> {
    for n in 1..1000 {
        let path = if n == 1 { dir.join(name) } else { dir.join(format!("{name}-{n}")) };
        match std::fs::DirBuilder::new().mode(0o700).create(&path) {
            Ok(()) => return Ok(path),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e).with_context(|| format!("creating {}", path.display())),
        }
    }
    bail!("{} has a thousand directories named {name}-*: move some away", dir.display())
}

/// `to` is made (0700) when missing; one that exists must be an empty directory: a backup never
/// overwrites.
fn empty_target(to: &Path) -> Result<()> {
    match std::fs::read_dir(to) {
        Ok(mut entries) => {
            if entries.next().is_some() {
                bail!(
                    "{} is not empty: a backup goes into a new or empty directory, and overwrites nothing",
                    to.display()
                );
            }
            // It will hold every secret of the data directory.
            std::fs::set_permissions(to, std::fs::Permissions::from_mode(0o700))
                .with_context(|| format!("making {} 0700", to.display()))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(to)
            .with_context(|| format!("creating {}", to.display())),
        Err(e) => Err(e).with_context(|| format!("reading {}", to.display())),
    }
}

/// A consistent copy of the SQLite file `from` at `to`, taken in one read transaction.
fn copy_database(from: &Path, to: &Path) -> Result<()> {
    let _ = std::fs::remove_file(to);
    // Read-write without create: a WAL reader needs the shared-memory file, and a missing
    // database is an error, not a new empty one. Read-only where it may not write (a backup on
    // read-only media).
    let conn = Connection::open_with_flags(from, OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX)
        .or_else(|_| {
        Connection::open_with_flags(from, OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX)
    })?;
    // Closing the last connection would copy the source's WAL into it and delete the WAL: the
    // source (a stopped coordinator's directory, a `pre-restore-*` one) is left as it is.
    conn.set_db_config(rusqlite::config::DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, true)?;
    conn.busy_timeout(std::time::Duration::from_secs(30))?;
    // The copy holds every secret of the store: made 0600 before SQLite writes into it (it
    // keeps an empty file's mode).
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(to)
        .with_context(|| format!("creating {}", to.display()))?;
    conn.execute("VACUUM INTO ?1", [to.to_string_lossy()])?;
    Ok(())
}

/// Whether the SQLite file at `path` is whole and is what `name` holds; what it holds, in
/// words.
fn check_database(name: &str, path: &Path) -> Result<String> {
    let conn = Connection::open_with_flags(path, OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX)?;
    let check: String = conn.query_row("PRAGMA quick_check", [], |r| r.get(0))?;
    if check != "ok" {
        bail!("it is damaged: {check}");
    }
    let has = |table: &str| -> Result<bool> {
        let n: i64 =
            conn.query_row("SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = ?1", [table], |r| {
                r.get(0)
            })?;
        Ok(n > 0)
    };
    if name == DATABASES[0] {
        if !has("objects")? || !has("meta")? {
            bail!("it is not an aloft store (no objects and meta tables)");
        }
        let objects: i64 = conn.query_row("SELECT count(*) FROM objects", [], |r| r.get(0))?;
        let revision: i64 = conn.query_row("SELECT value FROM meta WHERE key = 'revision'", [], |r| r.get(0))?;
        Ok(format!("{objects} objects at revision {revision}"))
    } else {
        if !has("tokens")? {
            bail!("it is not an aloft tokens file (no tokens table)");
        }
        let tokens: i64 = conn.query_row("SELECT count(*) FROM tokens", [], |r| r.get(0))?;
        Ok(format!("{tokens} tokens"))
    }
}

/// Whether the data directory's file `name` holds a secret: the databases (every
/// MachineConfig's files, the tokens' hashes) and the [`FILES`] marked so.
fn is_secret(name: &str) -> bool {
    DATABASES.contains(&name) || FILES.iter().any(|(n, secret)| *n == name && *secret)
}

/// Give a copy its mode (0600 for a secret) and flush it.
fn seal(tmp: &Path, secret: bool) -> Result<()> {
    let mode = if secret { 0o600 } else { 0o644 };
    std::fs::set_permissions(tmp, std::fs::Permissions::from_mode(mode))?;
    std::fs::File::open(tmp)?.sync_all().with_context(|| format!("flushing {}", tmp.display()))
}

/// [`seal`] `tmp`, then rename it to `path`.
fn finish(tmp: &Path, path: &Path, secret: bool) -> Result<()> {
    seal(tmp, secret)?;
    std::fs::rename(tmp, path).with_context(|| format!("renaming {} to {}", tmp.display(), path.display()))
}

/// Make the directory's new entries durable.
fn sync_dir(dir: &Path) -> Result<()> {
    std::fs::File::open(dir)?.sync_all().with_context(|| format!("flushing {}", dir.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store_file(path: &Path, objects: usize) {
        let c = Connection::open(path).unwrap();
        c.execute_batch(
            "PRAGMA journal_mode=WAL;
             CREATE TABLE objects (resource TEXT, namespace TEXT, name TEXT, revision INTEGER, data TEXT);
             CREATE TABLE meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL);
             INSERT INTO meta VALUES ('revision', 42);",
        )
        .unwrap();
        for i in 0..objects {
            c.execute("INSERT INTO objects VALUES ('nodes', '', ?1, 1, '{}')", [format!("n{i}")]).unwrap();
        }
    }

    fn tokens_file(path: &Path, tokens: usize) {
        let c = Connection::open(path).unwrap();
        c.execute_batch("CREATE TABLE tokens (hash TEXT PRIMARY KEY, name TEXT, role TEXT);").unwrap();
        for i in 0..tokens {
            c.execute("INSERT INTO tokens VALUES (?1, ?1, 'admin')", [format!("t{i}")]).unwrap();
        }
    }

    /// Every entry of `dir`, with its bytes' digest (a directory's: its own entries, named).
    fn tree(dir: &Path) -> Vec<(String, String)> {
        use sha2::Digest;
        let mut out = Vec::new();
        for e in std::fs::read_dir(dir).unwrap() {
            let e = e.unwrap();
            let name = e.file_name().to_string_lossy().into_owned();
            if name == "coordinator.lock" {
                // Taken by the restore, as by every coordinator: the lock, not data.
                continue;
            }
            if e.file_type().unwrap().is_dir() {
                for (inner, bytes) in tree(&e.path()) {
                    out.push((format!("{name}/{inner}"), bytes));
                }
                out.push((format!("{name}/"), String::new()));
            } else {
                out.push((name, format!("{:x}", sha2::Sha256::digest(std::fs::read(e.path()).unwrap()))));
            }
        }
        out.sort();
        out
    }

    /// A data directory with a store, its tokens, a CA and an admin token; a backup that
    /// replaces each and adds two files.
    fn directories(root: &Path) -> (PathBuf, PathBuf) {
        let (data, from) = (root.join("data"), root.join("backup"));
        for (dir, objects, word) in [(&data, 2, "old"), (&from, 5, "new")] {
            std::fs::create_dir(dir).unwrap();
            store_file(&dir.join("aloft.db"), objects);
            tokens_file(&dir.join("aloft-tokens.db"), objects);
            for file in ["ca.crt", "ca.key", "admin.token"] {
                std::fs::write(dir.join(file), format!("{word} {file}")).unwrap();
            }
        }
        // Two the data directory lacks: a failure to put in the second must take out the first.
        std::fs::write(from.join("serving.crt"), "new serving.crt").unwrap();
        std::fs::write(from.join("serving.names"), "new serving.names").unwrap();
        (data, from)
    }

    /// A restore whose Nth rename fails, for every N: the data directory is left byte for byte
    /// as it was (the files moved aside back in, the backup's files put in taken out, no
    /// marker, no aside directory), and the error says nothing was changed. When the renames
    /// back fail too, the marker stays (serve refuses the directory) and the error names what
    /// is where.
    #[test]
    fn a_restore_whose_rename_fails_puts_everything_back() {
        let mut renames = None;
        for fail_at in 0.. {
            let root = tempfile::tempdir().unwrap();
            let (data, from) = directories(root.path());
            let before = tree(&data);
            let mut n = 0;
            let result = restore_with(&from, &data, &mut |a, b| {
                n += 1;
                if n == fail_at + 1 {
                    return Err(std::io::Error::other("injected failure"));
                }
                std::fs::rename(a, b)
            });
            match result {
                Ok(_) => {
                    renames = Some(n);
                    assert!(data.join("serving.crt").is_file(), "a whole restore puts the backup in");
                    break;
                }
                Err(e) => {
                    let said = format!("{e:#}");
                    assert!(
                        said.contains("injected failure") && said.contains("nothing in"),
                        "rename {fail_at}: {said}"
                    );
                    assert_eq!(tree(&data), before, "rename {fail_at} failed: the directory is as it was");
                }
            }
        }
        // Five files moved aside (the two databases, the CA's two files, the admin token), then
        // seven put in (those, and two of the serving certificate's files, which the data
        // directory did not have): every one of them failed once.
        assert_eq!(renames, Some(12), "the renames a restore makes");

        // The first rename into place fails, and so does every rename back.
        let root = tempfile::tempdir().unwrap();
        let (data, from) = directories(root.path());
        let mut n = 0;
        let e = restore_with(&from, &data, &mut |a, b| {
            n += 1;
            if n > 5 {
                return Err(std::io::Error::other("injected failure"));
            }
            std::fs::rename(a, b)
        })
        .expect_err("the rename fails");
        let said = format!("{e:#}");
        assert!(said.contains("stopped half-way") && said.contains("aloft.db"), "{said}");
        let refused = format!("{:#}", refuse_interrupted_restore(&data).expect_err("the marker stays"));
        assert!(refused.contains("pre-restore-"), "{refused}");
    }

    /// A copy is the file's content, checked; a file that is not a store is refused by name.
    #[test]
    fn a_database_is_copied_and_checked() {
        let dir = tempfile::tempdir().unwrap();
        store_file(&dir.path().join("aloft.db"), 3);
        let copy = dir.path().join("copy.db");
        copy_database(&dir.path().join("aloft.db"), &copy).unwrap();
        assert_eq!(check_database("aloft.db", &copy).unwrap(), "3 objects at revision 42");
        let err = format!("{:#}", check_database("aloft-tokens.db", &copy).unwrap_err());
        assert!(err.contains("not an aloft tokens file"), "{err}");
        std::fs::write(dir.path().join("junk.db"), vec![7u8; 8192]).unwrap();
        let err = format!("{:#}", check_database("aloft.db", &dir.path().join("junk.db")).unwrap_err());
        assert!(err.contains("not a database"), "{err}");
    }
}
