//! Hostile and unreconcilable configs are refused before anything is touched.
//!
//! Every file in `tests/hostile/` is a MachineConfig (YAML, Ignition 3.x under `spec.config`)
//! with header comments: `# tries:` what it attempts, `# expect: <Kind> <field>` the refusal,
//! and optionally `# message:` a substring of the refusal's message. Each is applied over a node
//! on `old_config()` whose host has traps planted (symlinks out of the root, a directory and a
//! file in the way, a dangling link); the refusal must have the expected kind and field, and the
//! whole root — and the directory outside it the symlinks point to — must be byte-identical
//! before and after.

mod support;

use aloft_agent::apply::{self, ApplyError};
use aloft_agent::host::Root;
use aloft_agent::journal::Journal;
use aloft_agent::validate::RefusalKind;
use aloft_api::MachineConfigSpec;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::process::Command;
use support::*;

struct Case {
    name: String,
    tries: String,
    kind: RefusalKind,
    field: String,
    message: Option<String>,
    spec: MachineConfigSpec,
}

fn corpus() -> Vec<Case> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/hostile");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()).collect();
    files.retain(|p| p.extension().is_some_and(|e| e == "yaml"));
    files.sort();
    files
        .into_iter()
        .map(|p| {
            let text = std::fs::read_to_string(&p).unwrap();
            let header =
                |key: &str| text.lines().find_map(|l| l.strip_prefix(&format!("# {key}: ")).map(str::to_string));
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            let expect = header("expect").unwrap_or_else(|| panic!("{name}: no '# expect:' line"));
            let (kind, field) = expect.split_once(' ').unwrap();
            let kind = match kind {
                "Degraded" => RefusalKind::Degraded,
                "Unreconcilable" => RefusalKind::Unreconcilable,
                k => panic!("{name}: unknown kind {k}"),
            };
            Case {
                tries: header("tries").unwrap_or_else(|| panic!("{name}: no '# tries:' line")),
                kind,
                field: field.to_string(),
                message: header("message"),
                spec: machine_config(&text).spec,
                name,
            }
        })
        .collect()
}

/// A node on `old_config()`, built once and copied per case (`cp -a` keeps owners and links).
fn template() -> tempfile::TempDir {
    let (dir, root) = node();
    let svc = RecordingServices::on(dir.path());
    block_on(apply::apply(&root, &Journal::new(&root), &MachineConfigSpec::default(), &old_config(), &svc)).unwrap();
    dir
}

fn copy_of(template: &Path) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let st = Command::new("cp").arg("-a").arg(format!("{}/.", template.display())).arg(dir.path()).status().unwrap();
    assert!(st.success());
    dir
}

/// Traps on the host: symlinks leading out of the root (absolute and relative), one where MCO
/// keeps backups, one for a unit's drop-in directory, a directory and a file where a config
/// might want a file, a dangling link; with `ssh_trap`, core's ~/.ssh points outside too.
fn plant_traps(root: &Path, outside: &Path, ssh_trap: bool) {
    let etc = root.join("etc");
    symlink(outside, etc.join("evil")).unwrap();
    symlink("../../../../../../../../..", etc.join("up")).unwrap();
    std::fs::create_dir_all(etc.join("machine-config-daemon/orig/etc")).unwrap();
    symlink(outside, etc.join("machine-config-daemon/orig/etc/escape")).unwrap();
    symlink(outside, etc.join("systemd/system/evil.service.d")).unwrap();
    std::fs::create_dir(etc.join("adir")).unwrap();
    std::fs::write(etc.join("afile"), "a file\n").unwrap();
    symlink("nonexistent", etc.join("dangling")).unwrap();
    // RHCOS' own alias: /var/run is /run, which string checks of paths cannot see.
    std::fs::create_dir_all(root.join("run")).unwrap();
    symlink("../run", root.join("var/run")).unwrap();
    std::fs::create_dir_all(root.join("var/lib/aloft")).unwrap();
    symlink("../var/lib/aloft", etc.join("agent-state")).unwrap();
    if ssh_trap {
        std::fs::remove_dir_all(root.join("var/home/core/.ssh")).unwrap();
        symlink(outside, root.join("var/home/core/.ssh")).unwrap();
    }
}

#[test]
fn every_hostile_config_is_refused_with_nothing_written() {
    let cases = corpus();
    assert!(cases.len() >= 30, "the corpus has only {} cases", cases.len());
    let template = template();
    let mut failures = Vec::new();
    for case in &cases {
        let dir = copy_of(template.path());
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("precious"), "outside the root\n").unwrap();
        plant_traps(dir.path(), outside.path(), case.name.contains("ssh-dir-escape"));
        let root = Root::new(dir.path());
        let journal = Journal::new(&root);
        let before = (snapshot(dir.path(), &[]), snapshot(outside.path(), &[]));
        let svc = RecordingServices::on(dir.path());

        let checked = apply::check(&root, &old_config(), &case.spec);
        let applied = block_on(apply::apply(&root, &journal, &old_config(), &case.spec, &svc));
        let after = (snapshot(dir.path(), &[]), snapshot(outside.path(), &[]));

        let what = format!("{} ({})", case.name, case.tries);
        match &applied {
            Err(ApplyError::Refused(r)) => {
                eprintln!("{}: {:?} {}: {}", case.name, r.kind, r.field, r.message);
                if (r.kind, r.field.as_str()) != (case.kind, case.field.as_str()) {
                    failures.push(format!(
                        "{what}: refused as {:?} at {} ({}), expected {:?} at {}",
                        r.kind, r.field, r.message, case.kind, case.field
                    ));
                }
                if let Some(m) = &case.message {
                    if !r.message.contains(m.as_str()) {
                        failures.push(format!("{what}: message {:?} does not contain {m:?}", r.message));
                    }
                }
                if checked.as_ref().err() != Some(r) {
                    failures.push(format!("{what}: check() said {checked:?}, apply() said {r:?}"));
                }
            }
            other => failures.push(format!("{what}: not refused: {other:?}")),
        }
        if before != after {
            failures.push(format!(
                "{what}: the host changed:\n{}{}",
                diff(&before.0, &after.0),
                diff(&before.1, &after.1)
            ));
        }
        if !svc.calls().is_empty() {
            failures.push(format!("{what}: systemd was called: {:?}", svc.calls()));
        }
    }
    assert!(failures.is_empty(), "{} of {} cases failed:\n{}", failures.len(), cases.len(), failures.join("\n"));
}

/// The traps alone do not make a benign update fail: the refusals above come from the configs.
#[test]
fn a_benign_update_passes_the_same_traps() {
    let template = template();
    let dir = copy_of(template.path());
    let outside = tempfile::tempdir().unwrap();
    plant_traps(dir.path(), outside.path(), false);
    let root = Root::new(dir.path());
    let svc = RecordingServices::on(dir.path());
    block_on(apply::apply(&root, &Journal::new(&root), &old_config(), &new_config(), &svc)).unwrap();
    assert_eq!(std::fs::read_dir(outside.path()).unwrap().count(), 0);
}

/// A config path that IS a host symlink out of the root (not one below it) is fine: the link
/// is replaced by the file (rename never follows it), kept as the MCO original, and put back
/// when the path leaves the config. Nothing outside the root is read or written.
#[test]
fn a_symlink_at_the_path_itself_is_replaced_not_followed() {
    let template = template();
    let dir = copy_of(template.path());
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("precious"), "outside\n").unwrap();
    let evil = outside.path().join("precious");
    symlink(&evil, dir.path().join("etc/evil-file")).unwrap();
    let before_outside = snapshot(outside.path(), &[]);
    let root = Root::new(dir.path());
    let journal = Journal::new(&root);
    let svc = RecordingServices::on(dir.path());
    let mut cfg = old_config();
    cfg.config["storage"]["files"].as_array_mut().unwrap().push(serde_json::json!(
        {"path": "/etc/evil-file", "contents": {"source": "data:,inside%0A"}}
    ));
    block_on(apply::apply(&root, &journal, &old_config(), &cfg, &svc)).unwrap();
    assert_eq!(std::fs::read_to_string(dir.path().join("etc/evil-file")).unwrap(), "inside\n");
    let orig = dir.path().join("etc/machine-config-daemon/orig/etc/evil-file.mcdorig");
    assert_eq!(std::fs::read_link(&orig).unwrap(), evil);
    block_on(apply::apply(&root, &journal, &cfg, &old_config(), &svc)).unwrap();
    assert_eq!(std::fs::read_link(dir.path().join("etc/evil-file")).unwrap(), evil);
    assert_eq!(snapshot(outside.path(), &[]), before_outside);
}

/// A file on a read-only file system (an image-based host's /usr, or what the agent's unit
/// keeps read-only) is refused at validation, naming the field, before anything is written: the
/// write would otherwise fail in the middle of the update, after the drain. Mounts a read-only
/// tmpfs (needs root, as the tests that mount do).
#[test]
fn a_file_on_a_read_only_file_system_is_refused_with_nothing_written() {
    let template = template();
    let dir = copy_of(template.path());
    let ro = dir.path().join("usr/share/ro");
    std::fs::create_dir_all(&ro).unwrap();
    let out = Command::new("mount").args(["-t", "tmpfs", "-o", "ro,size=1m", "tmpfs"]).arg(&ro).output().unwrap();
    assert!(out.status.success(), "mount a read-only tmpfs (needs root): {}", String::from_utf8_lossy(&out.stderr));
    struct Unmount<'a>(&'a Path);
    impl Drop for Unmount<'_> {
        fn drop(&mut self) {
            let _ = Command::new("umount").arg("-l").arg(self.0).output();
        }
    }
    let _unmount = Unmount(&ro);
    let root = Root::new(dir.path());
    let svc = RecordingServices::on(dir.path());
    for (i, path) in ["/usr/share/ro/aloft.conf", "/usr/share/ro/sub/dir/aloft.conf"].into_iter().enumerate() {
        let mut cfg = old_config();
        let files = cfg.config["storage"]["files"].as_array_mut().unwrap();
        files.push(serde_json::json!({"path": path, "contents": {"source": "data:,x"}}));
        let at = files.len() - 1;
        let before = snapshot(dir.path(), &[]);
        let applied = block_on(apply::apply(&root, &Journal::new(&root), &old_config(), &cfg, &svc));
        match applied {
            Err(ApplyError::Refused(r)) => {
                assert_eq!(
                    (r.kind, r.field.as_str()),
                    (RefusalKind::Degraded, format!("spec.config.storage.files[{at}].path").as_str()),
                    "{i}: {r:?}"
                );
                assert!(r.message.contains("is on a read-only file system (/usr/share/ro)"), "{i}: {}", r.message);
            }
            other => panic!("{path}: not refused: {other:?}"),
        }
        assert_eq!(snapshot(dir.path(), &[]), before, "{path}: the host changed");
        assert!(svc.calls().is_empty(), "{path}: systemd was called: {:?}", svc.calls());
    }
}

#[test]
fn every_corpus_file_says_what_it_tries_and_expects() {
    let cases = corpus();
    let unreconcilable = cases.iter().filter(|c| c.kind == RefusalKind::Unreconcilable).count();
    assert!(unreconcilable >= 10, "{unreconcilable} unreconcilable cases");
    for c in &cases {
        assert!(c.field.starts_with("spec."), "{}: field {}", c.name, c.field);
        assert!(!c.tries.is_empty());
    }
}
