//! aloft-sandbox-host: a sandboxed host for demos and manual testing. It prepares a root
//! directory (an /etc/passwd with user core, a boot id) and serves the TEST implementation of
//! systemd and logind on a private dbus-daemon for it, then prints the bus address. Point an
//! aloft-agent at it with `--root DIR --bus-address ADDR`. Nothing here touches the real host:
//! unit enablement becomes symlinks under DIR, and a reboot request is only recorded.

use aloft_agent::testing::{FakeSystemd, TestBus};
use anyhow::{Context, Result};
use std::io::Write;
use std::path::PathBuf;

/// A sandboxed host for demos and manual testing: prepares ROOT_DIR (an /etc/passwd with user
/// core, a boot id), serves a TEST systemd and logind for it on a private dbus-daemon, and prints
/// the bus address. Run an agent on it with `aloft-agent --root ROOT_DIR --bus-address ADDR`.
/// Nothing touches the real host: unit enablement becomes symlinks under ROOT_DIR, a reboot is
/// only recorded. Stops on Ctrl-C or SIGTERM.
#[derive(clap::Parser)]
#[command(name = "aloft-sandbox-host", version)]
struct Args {
    /// The sandbox's root directory (created if missing).
    root_dir: PathBuf,
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<()> {
    // clap: `--help` prints usage instead of becoming a directory named `--help`.
    let root = <Args as clap::Parser>::parse().root_dir;
    for d in ["etc/systemd/system", "home/core", "var/lib", "proc/sys/kernel/random"] {
        std::fs::create_dir_all(root.join(d)).with_context(|| format!("creating {}", root.join(d).display()))?;
    }
    let passwd = root.join("etc/passwd");
    if !passwd.exists() {
        std::fs::write(&passwd, "root:x:0:0:root:/root:/bin/sh\ncore:x:1000:1000:core:/home/core:/bin/sh\n")?;
        std::fs::write(root.join("etc/group"), "root:x:0:\ncore:x:1000:\n")?;
    }
    let boot_id = root.join("proc/sys/kernel/random/boot_id");
    if !boot_id.exists() {
        std::fs::write(&boot_id, format!("sandbox-{}\n", std::process::id()))?;
    }
    let bus = TestBus::start().context("starting a private dbus-daemon")?;
    let fake = FakeSystemd::serve(&bus, &root).await.context("serving the test systemd/logind")?;
    println!("{}", bus.address());
    std::io::stdout().flush()?;
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
    eprintln!("sandbox host {}: systemd calls {:?}", root.display(), fake.call_strings());
    drop(fake);
    drop(bus);
    Ok(())
}
