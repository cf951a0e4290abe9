//! `aloft-coordinator backup` and `restore` on a real coordinator's data directory: a copy taken
//! while it serves brings back the store, the tokens and the CA; what a restore replaces is kept
//! aside; and bad input (a target with files, a running coordinator, a damaged or partial
//! backup) is refused and changes nothing.

use aloft_tests::{bin, path_of, stores_on_etcd, Coordinator, Options, MACHINE_CONFIG};
use std::path::Path;
use std::process::{Command, Output};

fn coordinator(args: &[&str], dirs: &[&Path]) -> Output {
    Command::new(bin("aloft-coordinator")).args(args).args(dirs).env("ALOFT_LOG", "warn").output().expect("run")
}

fn text(out: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

/// A file's bytes, or nothing for a missing one: what "changes nothing" compares.
fn files_of(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut all: Vec<(String, Vec<u8>)> = std::fs::read_dir(dir)
        .map(|d| {
            d.filter_map(Result::ok)
                .filter(|e| e.path().is_file())
                .map(|e| (e.file_name().to_string_lossy().into_owned(), std::fs::read(e.path()).unwrap_or_default()))
                .collect()
        })
        .unwrap_or_default();
    all.sort();
    all
}

fn mc(name: &str) -> serde_json::Value {
    aloft_tests::machine_config(name, "worker")
}

/// The whole round: a backup taken while the coordinator serves (and writes), changes made
/// after it, a restore with the coordinator stopped, and a start on the restored directory
/// that serves the store as it was at the backup, with its tokens and its CA.
// Multi-threaded: the writer below runs while the test's thread waits for the backup.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backup_taken_while_serving_restores_the_store_tokens_and_ca() {
    if stores_on_etcd() {
        return; // The store is etcd's to back up (`etcdctl snapshot save`).
    }
    let mut c = Coordinator::start_with(Options { fixed_port: true, ..Options::default() });
    let admin = c.client();
    let mcs = path_of(&MACHINE_CONFIG, None);
    admin.post(&mcs, &mc("50-kept")).await.unwrap().into_result().unwrap();
    let viewer = c.create_token("auditor", "viewer");
    let data = c.data_dir();
    let ca = std::fs::read(data.join("ca.crt")).unwrap();
    let root = tempfile::tempdir().unwrap();
    let backup = root.path().join("backup");

    // Writes go on while the copy is taken: it is one revision of the store all the same.
    let writer = {
        let admin = c.client();
        let mcs = mcs.clone();
        tokio::spawn(async move {
            for i in 0..40 {
                let _ = admin.post(&mcs, &mc(&format!("60-during-{i}"))).await;
            }
        })
    };
    let out = coordinator(&["backup", "--data-dir"], &[&data, &backup]);
    assert!(out.status.success(), "{}", text(&out));
    writer.await.unwrap();
    let said = text(&out);
    assert!(said.contains("aloft.db: ") && said.contains("objects at revision"), "{said}");
    assert!(said.contains("aloft-tokens.db: ") && said.contains("ca.key: "), "{said}");
    assert!(said.contains("aloft-coordinator restore --data-dir"), "it says how to restore: {said}");
    use std::os::unix::fs::PermissionsExt;
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&backup), 0o700);
    for secret in ["aloft.db", "aloft-tokens.db", "ca.key", "admin.token", "admin.kubeconfig"] {
        assert_eq!(mode(&backup.join(secret)), 0o600, "{secret}");
    }

    // After the backup: a config deleted, another made, the viewer's token revoked.
    admin.delete(&format!("{mcs}/50-kept")).await.unwrap().into_result().unwrap();
    admin.post(&mcs, &mc("70-after")).await.unwrap().into_result().unwrap();
    c.revoke_token("auditor");

    // Refused while the coordinator serves from the directory; nothing changed.
    let before = files_of(&data);
    let out = coordinator(&["restore", "--data-dir"], &[&data, &backup]);
    assert!(!out.status.success() && text(&out).contains("in use by another aloft-coordinator"), "{}", text(&out));
    assert_eq!(files_of(&data).len(), before.len(), "nothing moved");

    c.kill9();
    let out = coordinator(&["restore", "--data-dir"], &[&data, &backup]);
    assert!(out.status.success(), "{}", text(&out));
    let aside = std::fs::read_dir(&data)
        .unwrap()
        .filter_map(Result::ok)
        .map(|e| e.path())
        .find(|p| p.file_name().is_some_and(|n| n.to_string_lossy().starts_with("pre-restore-")))
        .unwrap_or_else(|| panic!("no pre-restore directory: {}", text(&out)));
    assert!(aside.join("aloft.db").is_file() && text(&out).contains(&aside.display().to_string()));

    c.restart();
    let admin = c.client();
    let names = aloft_tests::list_names(&admin, &MACHINE_CONFIG).await;
    assert!(names.contains(&"50-kept".to_string()), "the config deleted after the backup is back: {names:?}");
    assert!(!names.contains(&"70-after".to_string()), "the config made after it is not: {names:?}");
    let viewer = c.client_with_token(Some(&viewer));
    assert_eq!(viewer.get(&mcs).await.unwrap().code, 200, "the token revoked after the backup works again");
    assert_eq!(std::fs::read(data.join("ca.crt")).unwrap(), ca, "the same CA, which every agent pins");

    // Undone: the files the restore moved aside, restored back. The killed coordinator's last
    // writes are in its WAL file there (no checkpoint ran), and come back with the store.
    c.kill9();
    assert!(aside.join("aloft.db-wal").is_file(), "the WAL was moved aside with its database");
    let out = coordinator(&["restore", "--data-dir"], &[&data, &aside]);
    assert!(out.status.success(), "{}", text(&out));
    c.restart();
    let names = aloft_tests::list_names(&c.client(), &MACHINE_CONFIG).await;
    assert!(names.contains(&"70-after".to_string()) && !names.contains(&"50-kept".to_string()), "{names:?}");
    assert_eq!(viewer.get(&mcs).await.unwrap().code, 401, "the token revoked after the backup is revoked again");
}

/// Bad input is refused with a message naming what is wrong, and changes nothing: a target with
/// files in it, a directory that holds no coordinator data, a backup whose store is damaged or
/// that lacks its tokens, the data directory given as the backup.
#[tokio::test]
async fn a_backup_overwrites_nothing_and_a_bad_backup_is_not_restored() {
    if stores_on_etcd() {
        return;
    }
    let mut c = Coordinator::start();
    let data = c.data_dir();
    let root = tempfile::tempdir().unwrap();

    let full = root.path().join("full");
    std::fs::create_dir(&full).unwrap();
    std::fs::write(full.join("notes"), "mine").unwrap();
    let out = coordinator(&["backup", "--data-dir"], &[&data, &full]);
    assert!(!out.status.success() && text(&out).contains("is not empty"), "{}", text(&out));
    assert_eq!(files_of(&full), [("notes".to_string(), b"mine".to_vec())]);

    let nothing = root.path().join("nothing");
    std::fs::create_dir(&nothing).unwrap();
    let out = coordinator(&["backup", "--data-dir"], &[&nothing, &root.path().join("b0")]);
    assert!(!out.status.success() && text(&out).contains("holds no coordinator data"), "{}", text(&out));
    assert!(!root.path().join("b0").exists(), "no backup directory made");

    // A data directory whose store is on etcd: its files, and a word about etcd's snapshot.
    let on_etcd = root.path().join("on-etcd");
    std::fs::create_dir(&on_etcd).unwrap();
    std::fs::copy(data.join("ca.crt"), on_etcd.join("ca.crt")).unwrap();
    let out = coordinator(&["backup", "--data-dir"], &[&on_etcd, &root.path().join("b-etcd")]);
    assert!(out.status.success() && text(&out).contains("etcdctl snapshot save"), "{}", text(&out));
    assert!(root.path().join("b-etcd").join("ca.crt").is_file());

    // An empty directory made beforehand (readable by others) is used, and made 0700.
    let good = root.path().join("good");
    std::fs::create_dir(&good).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&good, std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = coordinator(&["backup", "--data-dir"], &[&data, &good]);
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(std::fs::metadata(&good).unwrap().permissions().mode() & 0o777, 0o700);
    c.kill9();
    let before = files_of(&data);

    // A damaged store: refused before anything is moved.
    let damaged = root.path().join("damaged");
    std::fs::create_dir(&damaged).unwrap();
    for (name, bytes) in files_of(&good) {
        std::fs::write(damaged.join(&name), bytes).unwrap();
    }
    let mut db = std::fs::read(damaged.join("aloft.db")).unwrap();
    let len = db.len();
    db[len / 2..].fill(0xA5);
    std::fs::write(damaged.join("aloft.db"), db).unwrap();
    let out = coordinator(&["restore", "--data-dir"], &[&data, &damaged]);
    assert!(!out.status.success() && text(&out).contains("aloft.db"), "{}", text(&out));
    assert_eq!(files_of(&data), before, "a refused restore changes nothing");

    // A store without its tokens.
    std::fs::remove_file(damaged.join("aloft-tokens.db")).unwrap();
    std::fs::copy(good.join("aloft.db"), damaged.join("aloft.db")).unwrap();
    let out = coordinator(&["restore", "--data-dir"], &[&data, &damaged]);
    assert!(!out.status.success() && text(&out).contains("without the other"), "{}", text(&out));
    // A CA certificate without its key.
    std::fs::copy(good.join("aloft-tokens.db"), damaged.join("aloft-tokens.db")).unwrap();
    std::fs::remove_file(damaged.join("ca.key")).unwrap();
    let out = coordinator(&["restore", "--data-dir"], &[&data, &damaged]);
    assert!(!out.status.success() && text(&out).contains("ca.crt and ca.key without the other"), "{}", text(&out));
    // Not a backup at all, and the data directory itself.
    let out = coordinator(&["restore", "--data-dir"], &[&data, &nothing]);
    assert!(!out.status.success() && text(&out).contains("holds no backup"), "{}", text(&out));
    let out = coordinator(&["restore", "--data-dir"], &[&data, &data]);
    assert!(!out.status.success() && text(&out).contains("is the data directory itself"), "{}", text(&out));
    assert_eq!(files_of(&data), before, "refused restores change nothing");

    // A restore interrupted between moving the old files aside and putting the backup's in
    // leaves its marker: `serve` refuses the directory (it would make an empty store and a new
    // CA) and says what to do.
    std::fs::write(data.join("restore-in-progress"), "/somewhere/pre-restore-x\n").unwrap();
    let out = Command::new(bin("aloft-coordinator"))
        .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(&data)
        .output()
        .unwrap();
    assert!(!out.status.success() && text(&out).contains("was interrupted"), "{}", text(&out));
    assert!(text(&out).contains("/somewhere/pre-restore-x"), "{}", text(&out));
    std::fs::remove_file(data.join("restore-in-progress")).unwrap();
    // (Its lock file took the refused process's pid: the lock is taken before the check.)
    let unlocked = |files: Vec<(String, Vec<u8>)>| -> Vec<String> {
        files.into_iter().filter(|(n, _)| n != "coordinator.lock").map(|(n, b)| format!("{n}:{}", b.len())).collect()
    };
    assert_eq!(unlocked(files_of(&data)), unlocked(before.clone()), "a refused start changes nothing");

    // The good one restores into a data directory that does not exist yet (a new machine).
    let fresh = root.path().join("new-machine").join("data");
    let out = coordinator(&["restore", "--data-dir"], &[&fresh, &good]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(fresh.join("aloft.db").is_file() && fresh.join("ca.key").is_file());
    assert!(!text(&out).contains("replaced"), "nothing to move aside: {}", text(&out));
}
