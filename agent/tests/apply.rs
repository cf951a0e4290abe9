//! The apply engine end to end on temp roots: files with owners, modes and MCO backups; units,
//! drop-ins, masks and batched enablement; SSH keys and the password hash; removal restoring
//! originals; rollback on failure; on-disk verification with MCO's messages; MCO fixtures.

mod support;

use aloft_agent::apply::{self, ApplyError, Recovery};
use aloft_agent::journal::{Journal, Phase};
use aloft_agent::ondisk;
use aloft_agent::validate::RefusalKind;
use aloft_api::MachineConfigSpec;
use serde_json::json;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use support::*;

const AGENT_STATE: &str = "var/lib/aloft";

fn read(root: &Path, rel: &str) -> String {
    std::fs::read_to_string(root.join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

fn meta(root: &Path, rel: &str) -> (u32, u32, u32) {
    let m = std::fs::symlink_metadata(root.join(rel)).unwrap();
    (m.mode() & 0o7777, m.uid(), m.gid())
}

fn exists(root: &Path, rel: &str) -> bool {
    std::fs::symlink_metadata(root.join(rel)).is_ok()
}

/// A node on `old_config()`.
fn node_on_old() -> (tempfile::TempDir, aloft_agent::host::Root, Journal) {
    let (dir, root) = node();
    let journal = Journal::new(&root);
    let svc = RecordingServices::on(dir.path());
    block_on(apply::apply(&root, &journal, &MachineConfigSpec::default(), &old_config(), &svc)).unwrap();
    (dir, root, journal)
}

#[test]
fn applies_files_units_and_ssh_like_mco() {
    let (dir, root, journal) = node_on_old();
    let r = dir.path();
    // The first apply backed up the OS's chrony.conf and stamped the paths that were new.
    assert_eq!(read(r, "etc/machine-config-daemon/orig/etc/chrony.conf.mcdorig"), "pool 2.rhel.pool.ntp.org iburst\n");
    assert!(exists(r, "etc/machine-config-daemon/noorig/etc/aloft-test/gone.conf.mcdnoorig"));
    assert_eq!(meta(r, "etc/aloft-test/gone.conf"), (0o600, 0, 0));

    let svc = RecordingServices::on(r);
    let report = block_on(apply::apply(&root, &journal, &old_config(), &new_config(), &svc)).unwrap();

    // Files: contents, modes, owners (by name from the root's /etc/passwd, by id), parents 0755.
    assert_eq!(read(r, "etc/aloft-test/change.conf"), "after\n");
    assert_eq!(meta(r, "etc/aloft-test/change.conf"), (0o600, CORE_UID, CORE_UID));
    assert_eq!(read(r, "etc/aloft-test/new/deep/added.conf"), "added\n");
    assert_eq!(meta(r, "etc/aloft-test/new/deep/added.conf"), (0o644, 0, 0));
    assert_eq!(meta(r, "etc/aloft-test/new"), (0o755, 0, 0));
    assert_eq!(read(r, "etc/aloft-test/gz.conf"), "compressed\n");
    assert_eq!(meta(r, "etc/aloft-test/gz.conf"), (0o640, CORE_UID, 10));
    assert_eq!(read(r, "etc/hosts"), "127.0.0.1 localhost node1\n");
    // Backups: the OS's /etc/hosts saved, new paths stamped; paths leaving the config restored
    // (chrony.conf) or deleted (gone.conf, its stamp too).
    assert_eq!(read(r, "etc/machine-config-daemon/orig/etc/hosts.mcdorig"), "127.0.0.1 localhost\n");
    assert!(exists(r, "etc/machine-config-daemon/noorig/etc/aloft-test/new/deep/added.conf.mcdnoorig"));
    assert_eq!(read(r, "etc/chrony.conf"), "pool 2.rhel.pool.ntp.org iburst\n");
    assert!(!exists(r, "etc/machine-config-daemon/orig/etc/chrony.conf.mcdorig"));
    assert!(!exists(r, "etc/aloft-test/gone.conf"));
    assert!(!exists(r, "etc/machine-config-daemon/noorig/etc/aloft-test/gone.conf.mcdnoorig"));

    // Units: contents, drop-ins (changed, added, emptied -> removed with its original saved),
    // masks, removed units deleted; enablement links made by the service manager.
    let sd = "etc/systemd/system";
    assert!(read(r, &format!("{sd}/common.service")).contains("/bin/new"));
    assert_eq!(read(r, &format!("{sd}/common.service.d/10-a.conf")), "[Service]\nEnvironment=A=2\n");
    assert_eq!(read(r, &format!("{sd}/common.service.d/30-c.conf")), "[Service]\nEnvironment=C=1\n");
    assert!(!exists(r, &format!("{sd}/common.service.d/20-b.conf")));
    assert!(!exists(r, &format!("{sd}/common.service.d/40-empty.conf")));
    assert_eq!(
        read(r, "etc/machine-config-daemon/orig/etc/systemd/system/common.service.d/40-empty.conf.mcdorig"),
        "[Service]\nNice=5\n"
    );
    assert_eq!(std::fs::read_link(r.join(format!("{sd}/masked-later.service"))).unwrap(), Path::new("/dev/null"));
    assert!(!exists(r, &format!("{sd}/old-only.service")));
    assert!(exists(r, &format!("{sd}/multi-user.target.wants/new.service")));
    assert!(exists(r, &format!("{sd}/multi-user.target.wants/common.service")));
    assert!(!exists(r, &format!("{sd}/multi-user.target.wants/old-only.service")));

    // Service manager: the removed unit preset while its file existed, one reload, one batch per kind.
    let calls = svc.calls();
    let ops: Vec<&str> = calls.iter().map(|c| c.op).collect();
    assert_eq!(ops, ["preset", "daemon-reload", "enable", "preset"], "{calls:?}");
    assert_eq!(calls[0].units, ["old-only.service"]);
    assert_eq!(calls[2].units, ["common.service", "new.service", "os-unit.service"]);
    assert_eq!(calls[3].units, ["preset-me.service"]);

    // SSH keys (dir 0700, file 0600, owner core through the /home -> var/home symlink), password.
    let keys = "home/core/.ssh/authorized_keys.d/ignition";
    assert_eq!(read(r, keys), "ssh-ed25519 AAAAold old@example\nssh-rsa AAAAnew new@example\n");
    assert_eq!(meta(r, "var/home/core/.ssh/authorized_keys.d/ignition"), (0o600, CORE_UID, CORE_UID));
    assert_eq!(meta(r, "var/home/core/.ssh"), (0o700, CORE_UID, CORE_UID));
    assert_eq!(meta(r, "var/home/core/.ssh/authorized_keys.d"), (0o700, CORE_UID, CORE_UID));
    // The date of the last change is today's, as `usermod -p` (MCO's way) sets it.
    assert_eq!(
        read(r, "etc/shadow"),
        format!("root:!locked::0:99999:7:::\ncore:$6$salt$hash:{}:0:99999:7:::\n", days_since_epoch())
    );
    assert_eq!(meta(r, "etc/shadow").0, 0);

    // The report the disruption policy reads.
    assert_eq!(report.files_added, ["/etc/aloft-test/new/deep/added.conf", "/etc/hosts", "/etc/aloft-test/gz.conf"]);
    assert_eq!(report.files_changed, ["/etc/aloft-test/change.conf"]);
    assert_eq!(report.files_removed, ["/etc/aloft-test/gone.conf", "/etc/chrony.conf"]);
    assert_eq!(
        report.units_changed,
        [
            "common.service",
            "masked-later.service",
            "new.service",
            "old-only.service",
            "os-unit.service",
            "preset-me.service"
        ]
    );
    assert!(report.ssh_changed && report.passwd_changed && report.daemon_reload);
    assert!(report.warnings.is_empty(), "{:?}", report.warnings);

    // The journal says committed; the disk matches the new config and not the old one.
    assert_eq!(journal.load().unwrap().unwrap().phase, Phase::Committed);
    ondisk::verify(&root, &new_config()).unwrap();
    let drift = ondisk::verify(&root, &old_config()).unwrap_err();
    assert_eq!(
        drift.message,
        "mode mismatch for file: \"/etc/aloft-test/change.conf\"; expected: -rw-r--r--/420/0644; received: -rw-------/384/0600"
    );
}

#[test]
fn applying_the_old_config_again_restores_originals_and_deletes_noorig_files() {
    let (dir, root, journal) = node_on_old();
    let r = dir.path();
    let on_old = snapshot(r, &[AGENT_STATE]);
    let svc = RecordingServices::on(r);
    block_on(apply::apply(&root, &journal, &old_config(), &new_config(), &svc)).unwrap();
    assert_ne!(snapshot(r, &[AGENT_STATE]), on_old);
    block_on(apply::apply(&root, &journal, &new_config(), &old_config(), &svc)).unwrap();
    // Everything is back; only directories created for the new files stay (MCO never removes
    // directories), so compare without empty ones; and core's password changed back, on today's
    // date.
    shadow_date_back(r);
    let back = snapshot(r, &[AGENT_STATE]);
    assert_eq!(without_empty_dirs(back.clone()), without_empty_dirs(on_old.clone()), "{}", diff(&on_old, &back));
    assert_eq!(read(r, "etc/hosts"), "127.0.0.1 localhost\n");
    assert!(!exists(r, "etc/aloft-test/new/deep/added.conf"));
    assert!(!exists(r, "etc/machine-config-daemon/noorig/etc/aloft-test/new/deep/added.conf.mcdnoorig"));
    assert!(!exists(r, "etc/machine-config-daemon/orig/etc/hosts.mcdorig"));
    assert_eq!(read(r, "etc/systemd/system/common.service.d/40-empty.conf"), "[Service]\nNice=5\n");
    ondisk::verify(&root, &old_config()).unwrap();

    // And down to nothing: every file goes back to what the OS had.
    block_on(apply::apply(&root, &journal, &old_config(), &MachineConfigSpec::default(), &svc)).unwrap();
    let (fresh, _) = node();
    shadow_date_back(r);
    let bare = without_empty_dirs(snapshot(r, &[AGENT_STATE, "var/home/core/.ssh"]));
    let orig = without_empty_dirs(snapshot(fresh.path(), &[AGENT_STATE]));
    assert_eq!(bare, orig, "{}", diff(&orig, &bare));
}

#[test]
fn reapplying_the_same_config_changes_nothing() {
    let (dir, root, journal) = node_on_old();
    let svc = RecordingServices::on(dir.path());
    block_on(apply::apply(&root, &journal, &old_config(), &new_config(), &svc)).unwrap();
    let before = snapshot(dir.path(), &[AGENT_STATE]);
    let report = block_on(apply::apply(&root, &journal, &new_config(), &new_config(), &svc)).unwrap();
    assert_eq!(snapshot(dir.path(), &[AGENT_STATE]), before);
    assert!(report.changed_paths().is_empty() && report.units_changed.is_empty() && !report.passwd_changed);
    assert!(!report.daemon_reload);
}

#[test]
fn a_failing_step_rolls_back_to_exactly_the_old_config() {
    let (dir, root, journal) = node_on_old();
    let before = snapshot(dir.path(), &[AGENT_STATE]);
    let svc = RecordingServices::on(dir.path()).failing_enable_of("new.service");
    let err = block_on(apply::apply(&root, &journal, &old_config(), &new_config(), &svc)).unwrap_err();
    let ApplyError::RolledBack { reason } = &err else { panic!("{err}") };
    assert!(reason.contains("new.service: injected failure"), "{reason}");
    let after = snapshot(dir.path(), &[AGENT_STATE]);
    assert_eq!(after, before, "{}", diff(&before, &after));
    assert!(matches!(journal.load().unwrap().unwrap().phase, Phase::RolledBack { .. }));
    ondisk::verify(&root, &old_config()).unwrap();
    // Recovery reports the same outcome and changes nothing.
    match block_on(apply::recover(&root, &journal, &svc)).unwrap() {
        Recovery::RolledBack { reason: r, .. } => assert_eq!(&r, reason),
        other => panic!("{other:?}"),
    }
    assert_eq!(snapshot(dir.path(), &[AGENT_STATE]), before);
    // A rolled-back record is finished: the retry is not refused as an unfinished apply (every
    // later update of the node would be).
    block_on(apply::apply(&root, &journal, &old_config(), &new_config(), &RecordingServices::on(dir.path()))).unwrap();
}

/// Small contents and pre-images ride inline in the journal record; a file above the inline
/// limit goes through blobs. A rollback puts both back exactly, including a managed file edited
/// by hand since the last apply: its pre-image is what was on disk, not what the old config said.
#[test]
fn small_contents_are_inline_large_ones_blobs_and_both_roll_back() {
    use aloft_agent::journal::{Content, Step, INLINE_MAX};
    let (dir, root, journal) = node_on_old();
    let r = dir.path();
    std::fs::write(r.join("etc/aloft-test/change.conf"), "edited by hand\n").unwrap();
    std::fs::write(r.join("etc/aloft-test/big.bin"), vec![b'o'; INLINE_MAX + 1]).unwrap();
    let before = snapshot(r, &[AGENT_STATE]);
    let mut new = new_config();
    let big = json!({"path": "/etc/aloft-test/big.bin", "mode": 420,
                     "contents": {"source": gzip_url(&vec![b'n'; INLINE_MAX + 1]), "compression": "gzip"}});
    new.config.pointer_mut("/storage/files").and_then(|f| f.as_array_mut()).unwrap().push(big);
    let svc = RecordingServices::on(r).failing_enable_of("new.service");
    let err = block_on(apply::apply(&root, &journal, &old_config(), &new, &svc)).unwrap_err();
    assert!(matches!(err, ApplyError::RolledBack { .. }), "{err}");
    let after = snapshot(r, &[AGENT_STATE]);
    assert_eq!(after, before, "{}", diff(&before, &after));

    let rec = journal.load().unwrap().unwrap();
    let content = |steps: &[Step], want: &str| -> Content {
        steps
            .iter()
            .find_map(|s| match s {
                Step::Write { path, content, .. } | Step::Restore { path, content } if path == want => {
                    Some(content.clone())
                }
                _ => None,
            })
            .unwrap_or_else(|| panic!("no step for {want}"))
    };
    match content(&rec.forward, "/etc/aloft-test/change.conf") {
        Content::Inline { data, mode, uid, .. } => {
            assert_eq!((&data[..], mode, uid), (&b"after\n"[..], 0o600, CORE_UID))
        }
        other => panic!("{other:?}"),
    }
    match content(&rec.rollback, "/etc/aloft-test/change.conf") {
        Content::Inline { data, mode, .. } => assert_eq!((&data[..], mode), (&b"edited by hand\n"[..], 0o644)),
        other => panic!("{other:?}"),
    }
    assert!(matches!(content(&rec.forward, "/etc/aloft-test/big.bin"), Content::File { .. }));
    assert!(matches!(content(&rec.rollback, "/etc/aloft-test/big.bin"), Content::File { .. }));
    // The finished apply's blobs are collected.
    let blobs = journal.dir().join("blobs");
    assert_eq!(std::fs::read_dir(&blobs).map(|d| d.count()).unwrap_or(0), 0);
}

/// What `check` validated before a drain can be applied without validating again, with the
/// same result as `apply`; an unfinished journal still blocks it.
#[test]
fn applying_what_check_validated_matches_apply() {
    let (dir_a, root_a, journal_a) = node_on_old();
    let (dir_b, root_b, journal_b) = node_on_old();
    let report_a =
        block_on(apply::apply(&root_a, &journal_a, &old_config(), &new_config(), &RecordingServices::on(dir_a.path())))
            .unwrap();
    let checked = apply::check(&root_b, &old_config(), &new_config()).unwrap();
    let report_b =
        block_on(apply::apply_checked(&root_b, &journal_b, &checked, &RecordingServices::on(dir_b.path()))).unwrap();
    assert_eq!(report_a, report_b);
    assert_eq!(checked.report.changed_paths(), report_b.changed_paths());
    let (a, b) = (snapshot(dir_a.path(), &[AGENT_STATE]), snapshot(dir_b.path(), &[AGENT_STATE]));
    assert_eq!(a, b, "{}", diff(&a, &b));
    let mut rec = journal_b.load().unwrap().unwrap();
    rec.phase = Phase::Forward;
    rec.forward.clear();
    journal_b.save(&rec).unwrap();
    let err = block_on(apply::apply_checked(&root_b, &journal_b, &checked, &RecordingServices::on(dir_b.path())))
        .unwrap_err();
    assert!(matches!(err, ApplyError::Unfinished { .. }), "{err}");
}

#[test]
fn an_unfinished_journal_blocks_a_new_apply_until_recovered() {
    let (dir, root, journal) = node_on_old();
    // A record left in the forward phase (its blobs are gone with the commit, so keep only the
    // steps that need none).
    let mut rec = journal.load().unwrap().unwrap();
    rec.phase = Phase::Forward;
    rec.forward
        .retain(|s| matches!(s, aloft_agent::journal::Step::Service { .. } | aloft_agent::journal::Step::DaemonReload));
    journal.save(&rec).unwrap();
    let svc = RecordingServices::on(dir.path());
    let err = block_on(apply::apply(&root, &journal, &old_config(), &new_config(), &svc)).unwrap_err();
    assert!(matches!(err, ApplyError::Unfinished { .. }), "{err}");
    assert!(matches!(block_on(apply::recover(&root, &journal, &svc)).unwrap(), Recovery::Applied { .. }));
    block_on(apply::apply(&root, &journal, &old_config(), &new_config(), &svc)).unwrap();
    journal.clear().unwrap();
    assert_eq!(block_on(apply::recover(&root, &journal, &svc)).unwrap(), Recovery::Nothing);
}

#[test]
fn ondisk_verification_reports_drift_like_mco() {
    let (dir, root, journal) = node_on_old();
    let r = dir.path();
    let svc = RecordingServices::on(r);
    block_on(apply::apply(&root, &journal, &old_config(), &new_config(), &svc)).unwrap();
    ondisk::verify(&root, &new_config()).unwrap();

    let f = r.join("etc/hosts");
    std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o755)).unwrap();
    let drift = ondisk::verify(&root, &new_config()).unwrap_err();
    assert_eq!(
        drift.message,
        "mode mismatch for file: \"/etc/hosts\"; expected: -rw-r--r--/420/0644; received: -rwxr-xr-x/493/0755"
    );
    assert_eq!(
        drift.reason("rendered-worker-1"),
        "unexpected on-disk state validating against rendered-worker-1: mode mismatch for file: \"/etc/hosts\"; expected: -rw-r--r--/420/0644; received: -rwxr-xr-x/493/0755"
    );
    std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o644)).unwrap();
    std::fs::write(&f, "drifted\n").unwrap();
    assert_eq!(ondisk::verify(&root, &new_config()).unwrap_err().message, "content mismatch for file \"/etc/hosts\"");
    std::fs::remove_file(&f).unwrap();
    std::fs::create_dir(&f).unwrap();
    std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o755)).unwrap();
    assert_eq!(
        ondisk::verify(&root, &new_config()).unwrap_err().message,
        "mode mismatch for file: \"/etc/hosts\"; expected: -rw-r--r--/420/0644; received: drwxr-xr-x/2147484141/020000000755"
    );
    std::fs::remove_dir(&f).unwrap();
    std::fs::write(&f, "127.0.0.1 localhost node1\n").unwrap();
    std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o644)).unwrap();
    ondisk::verify(&root, &new_config()).unwrap();

    let sd = r.join("etc/systemd/system");
    std::fs::write(sd.join("common.service.d/30-c.conf"), "x").unwrap();
    assert_eq!(
        ondisk::verify(&root, &new_config()).unwrap_err().message,
        "content mismatch for file \"/etc/systemd/system/common.service.d/30-c.conf\""
    );
    std::fs::write(sd.join("common.service.d/30-c.conf"), "[Service]\nEnvironment=C=1\n").unwrap();
    std::fs::remove_file(sd.join("masked-later.service")).unwrap();
    std::fs::write(sd.join("masked-later.service"), "").unwrap();
    let m = ondisk::verify(&root, &new_config()).unwrap_err().message;
    assert!(m.starts_with("state validation: invalid unit masked setting. path: \"/etc/systemd/system/masked-later.service\"; expected: /dev/null; received:"), "{m}");
    std::fs::remove_file(sd.join("masked-later.service")).unwrap();
    std::os::unix::fs::symlink("/dev/null", sd.join("masked-later.service")).unwrap();
    std::fs::remove_file(sd.join("multi-user.target.wants/new.service")).unwrap();
    assert_eq!(
        ondisk::verify(&root, &new_config()).unwrap_err().message,
        "unit \"new.service\" is not enabled: no symlink to it in /etc/systemd/system/*.wants"
    );
    // enabled: false must have no link.
    let mut disabled = new_config();
    disabled.config["systemd"]["units"][0]["enabled"] = json!(false);
    assert_eq!(
        ondisk::verify(&root, &disabled).unwrap_err().message,
        "unit \"common.service\" is enabled (/etc/systemd/system/multi-user.target.wants/common.service) but the config disables it"
    );
    // A unit enabled through `UpheldBy=` is linked in `<target>.upholds/`, and is enabled there.
    std::fs::create_dir(sd.join("multi-user.target.upholds")).unwrap();
    std::os::unix::fs::symlink("/etc/systemd/system/new.service", sd.join("multi-user.target.upholds/new.service"))
        .unwrap();
    ondisk::verify(&root, &new_config()).unwrap();
}

#[test]
fn core_missing_from_passwd_gives_root_owned_keys_and_a_warning() {
    let (dir, root) = node();
    std::fs::write(dir.path().join("etc/passwd"), "root:x:0:0:root:/root:/bin/bash\n").unwrap();
    let journal = Journal::new(&root);
    let cfg = spec(json!({"passwd": {"users": [{"name": "core", "sshAuthorizedKeys": ["ssh-rsa K"]}]}}));
    let report =
        block_on(apply::apply(&root, &journal, &MachineConfigSpec::default(), &cfg, &RecordingServices::new()))
            .unwrap();
    assert_eq!(meta(dir.path(), "var/home/core/.ssh/authorized_keys.d/ignition"), (0o600, 0, 0));
    assert_eq!(report.warnings.len(), 1);
    assert!(report.warnings[0].contains("user core is not in /etc/passwd"), "{:?}", report.warnings);
}

#[test]
fn removing_all_keys_removes_the_keys_file() {
    let (dir, root, journal) = node_on_old();
    let svc = RecordingServices::on(dir.path());
    let mut no_keys = old_config();
    no_keys.config["passwd"]["users"][0]["sshAuthorizedKeys"] = json!([]);
    let report = block_on(apply::apply(&root, &journal, &old_config(), &no_keys, &svc)).unwrap();
    assert!(report.ssh_changed);
    assert!(!exists(dir.path(), "var/home/core/.ssh/authorized_keys.d/ignition"));
}

#[test]
fn check_refuses_before_a_drain_and_reports_the_diff() {
    let (dir, root, _journal) = node_on_old();
    let before = snapshot(dir.path(), &[]);
    let mut fips = new_config();
    fips.fips = Some(true);
    let r = apply::check(&root, &old_config(), &fips).unwrap_err();
    assert_eq!((r.kind, r.field.as_str()), (RefusalKind::Unreconcilable, "spec.fips"));
    let mut kargs = new_config();
    kargs.kernel_arguments = vec!["nosmt".into()];
    let checked = apply::check(&root, &old_config(), &kargs).unwrap();
    let d = &checked.diff;
    assert!(d.kargs && d.files && d.units && d.passwd && !d.os_update);
    assert_eq!(snapshot(dir.path(), &[]), before, "check() wrote something");
    // The same report the apply gives, before anything is written.
    let svc = RecordingServices::on(dir.path());
    let report = block_on(apply::apply(&root, &Journal::new(&root), &old_config(), &new_config(), &svc)).unwrap();
    assert_eq!(checked.report, report);
}

#[test]
fn a_password_hash_core_has_no_shadow_line_for_fails_before_anything_is_written() {
    let (dir, root) = node();
    for shadow in [Some("root:*:19000:0:99999:7:::\n"), None] {
        match shadow {
            Some(s) => std::fs::write(dir.path().join("etc/shadow"), s).unwrap(),
            None => std::fs::remove_file(dir.path().join("etc/shadow")).unwrap(),
        }
        let before = snapshot(dir.path(), &[]);
        let r = apply::check(&root, &MachineConfigSpec::default(), &new_config()).unwrap_err();
        assert_eq!((r.kind, r.field.as_str()), (RefusalKind::Degraded, "spec.config.passwd.users[0].passwordHash"));
        assert!(r.message.starts_with("user core has no entry in /etc/shadow"), "{}", r.message);
        let svc = RecordingServices::on(dir.path());
        let e = block_on(apply::apply(&root, &Journal::new(&root), &MachineConfigSpec::default(), &new_config(), &svc));
        assert!(e.is_err(), "the apply must fail, not report the hash as set");
        assert_eq!(snapshot(dir.path(), &[]), before, "nothing written");
    }
}

#[test]
fn mco_fixture_worker_ssh_key() {
    let text = mco_fixture("bootstrap/99_openshift-machineconfig_worker.yaml");
    let mc = machine_config(&text);
    assert_eq!(mc.metadata.name, "99-worker-ssh");
    let (dir, root) = node();
    let journal = Journal::new(&root);
    let report =
        block_on(apply::apply(&root, &journal, &MachineConfigSpec::default(), &mc.spec, &RecordingServices::new()))
            .unwrap();
    assert!(report.ssh_changed);
    assert_eq!(read(dir.path(), "home/core/.ssh/authorized_keys.d/ignition"), "ssh-rsa SSH-AUTHORIZED-KEY\n");
    assert_eq!(meta(dir.path(), "var/home/core/.ssh/authorized_keys.d/ignition"), (0o600, CORE_UID, CORE_UID));
    ondisk::verify(&root, &mc.spec).unwrap();
}

#[test]
fn mco_fixture_spec_2_2_units_and_dropins() {
    let text = mco_fixture("server/machine-configs/test-config.yaml");
    let mc = machine_config(&text);
    let (dir, root) = node();
    // docker.service comes with the OS; the config only enables it and adds a drop-in.
    let docker = dir.path().join("usr/lib/systemd/system/docker.service");
    std::fs::write(docker, "[Service]\nExecStart=/usr/bin/dockerd\n[Install]\nWantedBy=multi-user.target\n").unwrap();
    let journal = Journal::new(&root);
    let svc = RecordingServices::on(dir.path());
    let report = block_on(apply::apply(&root, &journal, &MachineConfigSpec::default(), &mc.spec, &svc)).unwrap();
    let r = dir.path();
    assert_eq!(read(r, "etc/coreos/update.conf"), "GROUP=stable\nSERVER=http://localhost:32003/v1/update\n");
    assert_eq!(
        read(r, "etc/systemd/system/docker.service.d/10-dockeropts.conf"),
        "[Service]\nEnvironment=\"DOCKER_OPTS=--log-opt max-size=50m --log-opt max-file=3\n"
    );
    assert!(!exists(r, "etc/systemd/system/docker.service"), "docker.service has no contents: not written");
    assert!(read(r, "etc/systemd/system/kubelet.service").starts_with("[Unit]\nDescription=Kubernetes Kubelet\n"));
    assert_eq!(std::fs::read_link(r.join("etc/systemd/system/locksmith.service")).unwrap(), Path::new("/dev/null"));
    assert!(exists(r, "etc/systemd/system/multi-user.target.wants/kubelet.service"));
    assert_eq!(
        report.units_changed,
        [
            "docker.service",
            "etcd-member-tls.service",
            "etcd-member.service",
            "kubelet-workaround.service",
            "kubelet.service",
            "locksmith.service"
        ]
    );
    let enable = svc.calls().into_iter().find(|c| c.op == "enable").unwrap();
    assert_eq!(enable.units, ["docker.service", "etcd-member-tls.service", "etcd-member.service", "kubelet.service"]);
    ondisk::verify(&root, &mc.spec).unwrap();
}

fn days_since_epoch() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs() / 86_400
}

/// A changed core password carries today's date of last change in /etc/shadow (as `usermod -p`
/// sets it; checked in `applies_files_units_and_ssh_like_mco`): set back to the fixture's, so
/// that the rest of the tree compares byte for byte.
fn shadow_date_back(r: &std::path::Path) {
    let path = r.join("etc/shadow");
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::write(&path, text.replace(&format!(":{}:", days_since_epoch()), ":19000:")).unwrap();
}

/// Runs `chattr <flag> path` (root, on a file system with inode flags: ext4 here).
fn chattr(path: &Path, flag: &str) {
    let out = std::process::Command::new("chattr").arg(flag).arg(path).output().expect("chattr");
    assert!(out.status.success(), "chattr {flag} {}: {}", path.display(), String::from_utf8_lossy(&out.stderr));
}

/// The inode flags and bind mounts a test puts on its root, lifted when it ends, passed or not:
/// an immutable file left behind keeps the temp root from being removed.
#[derive(Default)]
struct HostLocks {
    flagged: Vec<std::path::PathBuf>,
    mounts: Vec<std::path::PathBuf>,
}

impl HostLocks {
    fn flag(&mut self, path: &Path, flag: &str) {
        self.flagged.push(path.to_path_buf());
        chattr(path, flag);
    }
    /// Registers a path something else flags, to be lifted here.
    fn lifts(&mut self, path: &Path) {
        self.flagged.push(path.to_path_buf());
    }
    fn bind(&mut self, from: &Path, to: &Path) {
        let out = std::process::Command::new("mount").arg("--bind").arg(from).arg(to).output().expect("mount");
        assert!(out.status.success(), "mount --bind: {}", String::from_utf8_lossy(&out.stderr));
        self.mounts.push(to.to_path_buf());
    }
    fn lift(&mut self) {
        for m in self.mounts.drain(..) {
            let _ = std::process::Command::new("umount").arg(&m).output();
        }
        for p in self.flagged.drain(..) {
            let _ = std::process::Command::new("chattr").args(["-i", "-a"]).arg(&p).output();
        }
    }
}

impl Drop for HostLocks {
    fn drop(&mut self) {
        self.lift();
    }
}

/// A path even root cannot replace (an immutable or append-only file or directory, a file
/// system mounted over it) is refused by the check made before the drain, naming the field and
/// how to lift it, and nothing is written. The apply replaces every file with a rename, which
/// such a path fails after the drain.
#[test]
fn a_path_root_cannot_replace_is_refused_before_anything_is_written() {
    let (dir, root, journal) = node_on_old();
    let r = dir.path();
    let spare = r.join("spare");
    std::fs::write(&spare, "mounted\n").unwrap();
    let before = snapshot(r, &[]);
    let mut locks = HostLocks::default();
    type Lock = Box<dyn Fn(&mut HostLocks)>;
    let change = r.join("etc/aloft-test/change.conf");
    let (test_dir, hosts) = (r.join("etc/aloft-test"), r.join("etc/hosts"));
    let cases: [(Lock, &str, &str); 3] = [
        (
            Box::new(move |l| l.flag(&change, "+i")),
            "spec.config.storage.files[1].path",
            "\"/etc/aloft-test/change.conf\" cannot be replaced: it is immutable (chattr +i; lift it with chattr -i)",
        ),
        (
            Box::new(move |l| l.flag(&test_dir, "+a")),
            "spec.config.storage.files[0].path",
            "\"/etc/aloft-test/keep.conf\" cannot be written: directory /etc/aloft-test is append-only",
        ),
        (
            Box::new(move |l| l.bind(&spare, &hosts)),
            "spec.config.storage.files[3].path",
            "\"/etc/hosts\" cannot be replaced: it has a file system mounted over it",
        ),
    ];
    for (lock, field, said) in cases {
        lock(&mut locks);
        let refusal = apply::check(&root, &old_config(), &new_config()).unwrap_err();
        assert_eq!((refusal.kind, refusal.field.as_str()), (RefusalKind::Degraded, field), "{}", refusal.message);
        assert!(refusal.message.contains(said), "{}", refusal.message);
        let svc = RecordingServices::on(r);
        let err = block_on(apply::apply(&root, &journal, &old_config(), &new_config(), &svc)).unwrap_err();
        assert!(matches!(err, ApplyError::Refused(_)), "{err}");
        assert!(svc.calls().is_empty(), "{:?}", svc.calls());
        locks.lift();
        assert_eq!(snapshot(r, &[]), before, "something was written");
    }
    // An immutable root (an ostree deployment's) takes no new top-level directory; the
    // refusal does not tell the admin to lift it.
    let top = spec(json!({"storage": {"files": [{"path": "/newtop/f.conf", "contents": {"source": "data:,f"}}]}}));
    locks.flag(r, "+i");
    let refusal = apply::check(&root, &old_config(), &top).unwrap_err();
    assert_eq!(refusal.field, "spec.config.storage.files[0].path", "{}", refusal.message);
    assert!(
        refusal.message.contains("the root directory is immutable") && !refusal.message.contains("chattr"),
        "{}",
        refusal.message
    );
    locks.lift();
    // Lifted, the same config applies.
    block_on(apply::apply(&root, &journal, &old_config(), &new_config(), &RecordingServices::on(r))).unwrap();
}

/// The path whose write failed the apply (made immutable between the check and the apply, as
/// during a drain) still holds its old bytes: the rollback leaves it as it is, and the node is
/// back on exactly the old config. Written back, it failed the same way, and the journal stayed
/// rolling back, refusing every later config.
#[test]
fn a_path_the_apply_could_not_replace_is_left_by_the_rollback() {
    let (dir, root, journal) = node_on_old();
    let r = dir.path();
    let checked = apply::check(&root, &old_config(), &new_config()).unwrap();
    let mut locks = HostLocks::default();
    locks.flag(&r.join("etc/aloft-test/change.conf"), "+i");
    let before = snapshot(r, &[AGENT_STATE]);
    let err = block_on(apply::apply_checked(&root, &journal, &checked, &RecordingServices::on(r))).unwrap_err();
    let ApplyError::RolledBack { reason } = &err else { panic!("{err}") };
    assert!(reason.contains("rename /etc/aloft-test/change.conf") && reason.contains("not permitted"), "{reason}");
    let after = snapshot(r, &[AGENT_STATE]);
    assert_eq!(after, before, "{}", diff(&before, &after));
    assert!(matches!(journal.load().unwrap().unwrap().phase, Phase::RolledBack { .. }));
    ondisk::verify(&root, &old_config()).unwrap();
}

/// A rollback goes on past a path it cannot put back (made immutable while the apply ran): every
/// other path is back, the error names the one that is not, and the journal keeps the rollback,
/// which recovery finishes once the path can be written.
#[test]
fn a_rollback_puts_back_every_path_it_can_and_names_the_rest() {
    let (dir, root, journal) = node_on_old();
    let r = dir.path();
    let before = snapshot(r, &[AGENT_STATE]);
    let added = r.join("etc/aloft-test/new/deep/added.conf");
    let mut locks = HostLocks::default();
    locks.lifts(&added);
    let flagged = added.clone();
    let svc = RecordingServices::on(r).failing_enable_of("new.service").and_then(move || chattr(&flagged, "+i"));
    let err = block_on(apply::apply(&root, &journal, &old_config(), &new_config(), &svc)).unwrap_err();
    let ApplyError::RollbackFailed { reason, rollback } = &err else { panic!("{err}") };
    assert!(reason.contains("new.service: injected failure"), "{reason}");
    assert!(rollback.starts_with("1 of "), "{rollback}");
    assert!(rollback.contains("restore /etc/aloft-test/new/deep/added.conf: "), "{rollback}");
    // Everything else is as before the apply (the locked file keeps its directories).
    let after = snapshot(r, &[AGENT_STATE, "etc/aloft-test/new"]);
    assert_eq!(after, before, "{}", diff(&before, &after));
    assert!(matches!(journal.load().unwrap().unwrap().phase, Phase::RollingBack { .. }));
    let svc = RecordingServices::on(r);
    let refused = block_on(apply::apply(&root, &journal, &old_config(), &new_config(), &svc)).unwrap_err();
    assert!(matches!(refused, ApplyError::Unfinished { .. }), "{refused}");
    // Recovery retries while the path stays locked, and finishes once it is not.
    let again = block_on(apply::recover(&root, &journal, &svc)).unwrap_err();
    assert!(again.to_string().contains("1 of "), "{again}");
    locks.lift();
    match block_on(apply::recover(&root, &journal, &svc)).unwrap() {
        Recovery::RolledBack { reason: r2, .. } => assert_eq!(&r2, reason),
        other => panic!("{other:?}"),
    }
    let after = snapshot(r, &[AGENT_STATE]);
    assert_eq!(after, before, "{}", diff(&before, &after));
}

/// A config of more files than the agent may have open at once (1024, systemd's default soft
/// limit, set here for this process) applies and rolls back: a batch keeps a bounded number of
/// temp files open. It kept one per file, and such a config failed after the drain.
#[test]
fn a_config_of_more_files_than_open_descriptors_applies_and_rolls_back() {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let (_, hard) = getrlimit(Resource::RLIMIT_NOFILE).unwrap();
    setrlimit(Resource::RLIMIT_NOFILE, 1024.min(hard), hard).unwrap();
    let (dir, root) = node();
    let r = dir.path();
    let journal = Journal::new(&root);
    let many = |text: &str| {
        let files: Vec<_> = (0..1500)
            .map(|i| {
                json!({"path": format!("/etc/many/f{i}.conf"), "mode": 420,
                            "contents": {"source": format!("data:,{text}{i}")}})
            })
            .collect();
        let mut s = spec(json!({"storage": {"files": files}}));
        s.config["systemd"] = json!({"units": [{"name": "new.service", "enabled": true, "contents": UNIT_NEW}]});
        s
    };
    let (first, second) = (many("a"), many("b"));
    block_on(apply::apply(&root, &journal, &MachineConfigSpec::default(), &first, &RecordingServices::on(r))).unwrap();
    assert_eq!(read(r, "etc/many/f1499.conf"), "a1499");
    let before = snapshot(r, &[AGENT_STATE]);
    block_on(apply::apply(&root, &journal, &first, &second, &RecordingServices::on(r))).unwrap();
    assert_eq!(read(r, "etc/many/f0.conf"), "b0");
    // And back, through a rollback of all 1,500.
    let svc = RecordingServices::on(r).failing_enable_of("extra.service");
    let mut third = many("c");
    let extra = json!({"name": "extra.service", "enabled": true, "contents": UNIT_NEW});
    third.config["systemd"]["units"].as_array_mut().unwrap().push(extra);
    block_on(apply::apply(&root, &journal, &second, &first, &RecordingServices::on(r))).unwrap();
    let err = block_on(apply::apply(&root, &journal, &first, &third, &svc)).unwrap_err();
    assert!(matches!(err, ApplyError::RolledBack { .. }), "{err}");
    let after = snapshot(r, &[AGENT_STATE]);
    assert_eq!(after, before, "{}", diff(&before, &after));
}

/// A path the config writes that is a symlink with a target that is not UTF-8 cannot be kept
/// for a rollback (the journal keeps targets as text): the check made before the drain refuses
/// it, naming the field, and nothing is written. (The target was kept with replacement
/// characters, and a rollback put back a link to somewhere else.)
#[test]
fn a_symlink_whose_target_is_not_utf8_stops_the_apply_before_any_write() {
    use std::os::unix::ffi::OsStrExt;
    let (dir, root, journal) = node_on_old();
    let r = dir.path();
    std::fs::remove_file(r.join("etc/hosts")).unwrap();
    std::os::unix::fs::symlink(std::ffi::OsStr::from_bytes(b"/etc/h\xf6sts"), r.join("etc/hosts")).unwrap();
    let before = snapshot(r, &[AGENT_STATE]);
    let svc = RecordingServices::on(r);
    let refusal = apply::check(&root, &old_config(), &new_config()).unwrap_err();
    assert_eq!(refusal.field, "spec.config.storage.files[3].path");
    assert!(refusal.message.contains("\"/etc/hosts\" is a symlink whose target is not UTF-8"), "{}", refusal.message);
    let err = block_on(apply::apply(&root, &journal, &old_config(), &new_config(), &svc)).unwrap_err();
    assert!(matches!(err, ApplyError::Refused(_)), "{err}");
    assert!(svc.calls().is_empty(), "{:?}", svc.calls());
    assert_eq!(snapshot(r, &[AGENT_STATE]), before);
}
