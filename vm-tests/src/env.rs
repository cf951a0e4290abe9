//! The test environment: required tools, directories, the accelerator.

use anyhow::{bail, Result};
use std::path::{Path, PathBuf};

/// Commands the VM tests need, with the Debian package that has each
/// (`bash scripts/install-vm-deps.sh` installs them all).
pub const TOOLS: &[(&str, &str)] = &[
    ("qemu-system-x86_64", "qemu-system-x86"),
    ("qemu-img", "qemu-utils"),
    ("mmdebstrap", "mmdebstrap"),
    ("ostree", "ostree"),
    ("debugfs", "e2fsprogs"),
    ("socat", "socat"),
    ("jq", "jq"),
];

/// Whether `cmd` is an executable on `PATH`.
pub fn on_path(cmd: &str) -> bool {
    std::env::var_os("PATH").map(|p| std::env::split_paths(&p).any(|d| is_executable(&d.join(cmd)))).unwrap_or(false)
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    p.metadata().map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0).unwrap_or(false)
}

/// What is missing to run VM tests here (tools by package, root for images/build).
pub fn missing() -> Vec<String> {
    let mut out: Vec<String> =
        TOOLS.iter().filter(|(c, _)| !on_path(c)).map(|(c, pkg)| format!("{c} (Debian package {pkg})")).collect();
    if !nix::unistd::Uid::effective().is_root() {
        out.push("root (images/build runs mmdebstrap in root mode)".into());
    }
    out
}

/// Decide whether a VM test runs: `Ok(true)` when everything is there; `Ok(false)` (after a loud
/// message on stderr) when something is missing and `ALOFT_REQUIRE_VM` is not set; an error when
/// something is missing and `ALOFT_REQUIRE_VM` is set (CI: a missing tool must fail, not skip).
pub fn prerequisites(test: &str) -> Result<bool> {
    let missing = missing();
    if missing.is_empty() {
        return Ok(true);
    }
    let list = missing.join(", ");
    if std::env::var_os("ALOFT_REQUIRE_VM").is_some_and(|v| !v.is_empty() && v != "0") {
        bail!("{test}: ALOFT_REQUIRE_VM is set but VM tests cannot run here: missing {list}; run `bash scripts/install-vm-deps.sh` as root");
    }
    let bar = "!".repeat(100);
    eprintln!(
        "\n{bar}\n!! SKIPPED VM TEST {test}: missing {list}.\n!! Run `bash scripts/install-vm-deps.sh` as root \
         (set ALOFT_REQUIRE_VM=1 to make this a failure).\n{bar}\n"
    );
    Ok(false)
}

/// The workspace root.
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("vm-tests/ has a parent").to_path_buf()
}

/// The cargo target directory (`CARGO_TARGET_DIR`, else `<workspace>/target`).
pub fn target_dir() -> PathBuf {
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(d) if Path::new(&d).is_absolute() => PathBuf::from(d),
        Some(d) => workspace_root().join(d),
        None => workspace_root().join("target"),
    }
}

/// Where a test keeps its VMs' overlays and logs: `target/vm-tests/<test>`.
pub fn test_dir(test: &str) -> PathBuf {
    target_dir().join("vm-tests").join(test)
}

/// QEMU's CPU model: `qemu64` unless `ALOFT_VM_CPU` says otherwise (e.g. `max`, `host` with KVM).
///
/// Under TCG every instruction is emulated; `max` offers the guest every extension TCG knows
/// (AVX2 among them), `qemu64` only x86-64's baseline. Measured on this
/// machine, scenario e booted in 32-36 s with `qemu64` against 35-43 s with `max`, 180 s against
/// 214 s in all (BENCHMARKS.md); why (which emulated instructions cost more) is not measured.
/// The OS needs nothing above x86-64's baseline (Debian 12's, and rustc's default target).
pub fn cpu() -> String {
    std::env::var("ALOFT_VM_CPU").ok().filter(|s| !s.is_empty()).unwrap_or_else(|| "qemu64".into())
}

/// QEMU's accelerator: `tcg` unless `ALOFT_VM_ACCEL` says otherwise (e.g. `kvm`).
pub fn accel() -> String {
    std::env::var("ALOFT_VM_ACCEL").ok().filter(|s| !s.is_empty()).unwrap_or_else(|| "tcg".into())
}

/// Log to stderr directly (not captured by the test harness: a VM test runs for many minutes and
/// its progress should be visible). `ALOFT_VM_LOG` filters (default `info`).
pub fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("ALOFT_VM_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false)
        .with_ansi(false)
        .try_init();
}
