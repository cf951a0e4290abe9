//! The agent unit's red-boot hook (`systemd/aloft-agent-stopped`, its `ExecStopPost`), run as
//! systemd runs it (`SERVICE_RESULT` in the environment), on GRUB environment blocks written by
//! aloft's own block writer, the one the OS helper arms the counting with. `systemctl` is a
//! stand-in on `PATH` that records its arguments: the real one would reboot the machine running
//! the tests. VM scenario j runs the hook for real, in the image's unit.

use aloft_api::os::grubenv::{self, EnvBlock};
use std::path::{Path, PathBuf};
use std::process::Command;

struct Host {
    dir: tempfile::TempDir,
}

impl Host {
    fn new() -> Host {
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join("bin");
        std::fs::create_dir(&bin).unwrap();
        let fake = bin.join("systemctl");
        let log = dir.path().join("systemctl.log");
        std::fs::write(&fake, format!("#!/bin/sh\necho \"$*\" >> '{}'\n", log.display())).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
        Host { dir }
    }

    fn grubenv(&self) -> PathBuf {
        self.dir.path().join("grubenv")
    }

    fn count_file(&self) -> PathBuf {
        self.dir.path().join("failures")
    }

    /// A block as the bootloader leaves it for this boot.
    fn write_env(&self, env: &EnvBlock) {
        std::fs::write(self.grubenv(), env.to_bytes().unwrap()).unwrap();
    }

    /// The hook after a stop of the agent that ended with `result`; its output.
    fn stopped(&self, result: &str) -> String {
        let path = format!("{}:{}", self.dir.path().join("bin").display(), std::env::var("PATH").unwrap_or_default());
        let out = Command::new("sh")
            .arg(hook())
            .env("PATH", path)
            .env("SERVICE_RESULT", result)
            .env("ALOFT_GRUBENV", self.grubenv())
            .env("ALOFT_RED_BOOT_COUNT_FILE", self.count_file())
            .env_remove("ALOFT_RED_BOOT_FAILURES")
            .output()
            .unwrap();
        assert!(out.status.success(), "the hook failed: {out:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// What `systemctl` was asked, one call a line.
    fn systemctl_calls(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("systemctl.log")).unwrap_or_default()
    }
}

fn hook() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../systemd/aloft-agent-stopped")
}

/// The first boot of an update: armed for 3 before the reboot, then one taken off by GRUB.
fn counted_boot() -> EnvBlock {
    let mut env = EnvBlock::default();
    env.set("saved_entry", "ostree-1-aloft").unwrap();
    grubenv::arm(&mut env, 3).unwrap();
    assert_eq!(grubenv::bootloader_pass(&mut env).unwrap(), grubenv::BootChoice::Default);
    assert_eq!(env.get(grubenv::BOOT_COUNTER), Some("2"));
    env
}

#[test]
fn a_counted_boot_reboots_after_the_fifth_failure() {
    let host = Host::new();
    host.write_env(&counted_boot());
    for n in 1..5 {
        let out = host.stopped(if n == 2 { "watchdog" } else { "exit-code" });
        assert!(out.contains(&format!("failure {n} of 5 before a reboot")), "{out}");
        assert_eq!(host.systemctl_calls(), "", "no reboot after {n} failures");
    }
    let out = host.stopped("exit-code");
    assert!(out.contains("aloft-agent failed 5 times during a counted boot (boot_counter=2"), "{out}");
    assert_eq!(host.systemctl_calls(), "reboot\n");
}

/// Failures counted under one arming do not carry into another (a new counter value): the
/// count starts again from none.
#[test]
fn each_arming_counts_its_own_failures() {
    let host = Host::new();
    host.write_env(&counted_boot());
    for _ in 0..4 {
        host.stopped("exit-code");
    }
    let mut again = counted_boot();
    grubenv::arm(&mut again, 3).unwrap();
    host.write_env(&again);
    let out = host.stopped("exit-code");
    assert!(out.contains("(boot_counter=3): failure 1 of 5 before a reboot"), "{out}");
    assert_eq!(host.systemctl_calls(), "");
}

#[test]
fn a_clean_stop_counts_nothing() {
    let host = Host::new();
    host.write_env(&counted_boot());
    for _ in 0..6 {
        assert_eq!(host.stopped("success"), "");
    }
    assert!(!host.count_file().exists());
    assert_eq!(host.systemctl_calls(), "");
}

/// Outside a counted boot the hook does nothing, however often the agent fails: no counter (the
/// usual boot, or one the agent judged and disarmed), GRUB fell back already (-1: a reboot would
/// gain nothing), a counter that is no number, no block at all.
#[test]
fn outside_a_counted_boot_nothing_reboots() {
    let mut judged = counted_boot();
    grubenv::disarm(&mut judged).unwrap();
    let mut fell_back = counted_boot();
    for _ in 0..3 {
        grubenv::bootloader_pass(&mut fell_back).unwrap();
    }
    assert!(grubenv::fell_back(&fell_back), "{fell_back:?}");
    let mut garbled = EnvBlock::default();
    garbled.set(grubenv::BOOT_COUNTER, "x1").unwrap();
    let mut judged_good = counted_boot();
    judged_good.set(grubenv::BOOT_SUCCESS, "1").unwrap();
    for (what, env) in [
        ("never armed", Some(EnvBlock::default())),
        ("disarmed", Some(judged)),
        ("fell back", Some(fell_back)),
        ("garbled", Some(garbled)),
        ("no block", None),
    ] {
        let host = Host::new();
        if let Some(env) = env {
            host.write_env(&env);
        }
        for _ in 0..6 {
            assert_eq!(host.stopped("exit-code"), "", "{what}");
        }
        assert!(!host.count_file().exists(), "{what}");
        assert_eq!(host.systemctl_calls(), "", "{what}");
    }
}
