//! os-bench: time to pull and stage an OS commit with a small change over HTTP on loopback,
//! as aloft-agent does it — its socket client asking a real `aloft-os-helper` process, so the IPC
//! is counted — against `ostree pull` + `ostree admin deploy` doing the same (same server, same
//! commits, same kind of sysroot) in the same run.
//!
//! ```text
//! cargo build --release -p aloft-osd --features test-support --bins
//! target/release/os-bench [--files N] [--rounds R]      # finds aloft-os-helper beside itself
//! ```
//!
//! Each round commits a new signed version (one file changed, one added) on top of a base of N
//! files; both sides pull it with GPG verification and write a deployment with one kernel
//! argument appended. The order of the two sides alternates per round. A third sysroot gets each
//! commit pulled ahead (pre-staged) and times only the update. Prints each round, the medians and
//! the ratio (target: aloft / baseline <= 1.2).

use aloft_agent::os::{OsBackend, StageRequest};
use aloft_osd::testkit::{self, GpgKey, HelperProcess, ServerRepo, StaticServer, REF};
use anyhow::{bail, Context, Result};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

fn arg(name: &str, default: usize) -> Result<usize> {
    let args: Vec<String> = std::env::args().collect();
    match args.iter().position(|a| a == name) {
        Some(i) => args.get(i + 1).context("missing value")?.parse().with_context(|| format!("{name} wants a number")),
        None => Ok(default),
    }
}

fn sh(cmd: &mut Command) -> Result<()> {
    let out = cmd.output()?;
    if !out.status.success() {
        bail!("{cmd:?}: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(())
}

/// The baseline: what an admin would type.
fn baseline(sysroot: &Path, checksum: &str) -> Result<Duration> {
    let started = Instant::now();
    let repo = format!("--repo={}", sysroot.join("ostree/repo").display());
    sh(Command::new("ostree").args([repo.as_str(), "pull", "aloft", &format!("{REF}@{checksum}")]))?;
    sh(Command::new("ostree").args([
        "admin",
        "deploy",
        &format!("--sysroot={}", sysroot.display()),
        "--os=aloft",
        "--karg-append=mitigations=off",
        &format!("aloft:{REF}"),
    ]))?;
    Ok(started.elapsed())
}

fn median(v: &mut [Duration]) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn main() -> Result<()> {
    if std::env::args().any(|a| a == "-h" || a == "--help") {
        println!(
            "os-bench [--files N] [--rounds R]: pull + stage of a small OS update through aloft-os-helper \
             against ostree pull + ostree admin deploy, R rounds (5) on a base of N files (3000)"
        );
        return Ok(());
    }
    let files = arg("--files", 3000)?;
    let rounds = arg("--rounds", 5)?;
    let dir = tempfile::tempdir()?;
    let d = dir.path();
    let key = GpgKey::generate(d, "bench")?;
    let server = ServerRepo::create(&d.join("srv/repo"))?;
    let tree = d.join("tree");
    testkit::write_tree(&tree, "0", files)?;
    let base = server.commit(&tree, REF, "base", Some(&key))?;
    let http = StaticServer::start(&d.join("srv"))?;
    let url = http.url("repo");
    let kargs = ["root=/dev/vda", "console=ttyS0"];
    let (ours, theirs, pre) = (d.join("sysroot-aloft"), d.join("sysroot-ostree"), d.join("sysroot-prestaged"));
    testkit::init_sysroot(&ours, &server, &base, &kargs)?;
    testkit::init_sysroot(&pre, &server, &base, &kargs)?;
    testkit::init_sysroot(&theirs, &server, &base, &kargs)?;
    // The baseline's remote, configured as an image would ship it (not timed).
    sh(Command::new("ostree").args([
        &format!("--repo={}", theirs.join("ostree/repo").display()),
        "remote",
        "add",
        &format!("--set=gpgkeypath={}", key.keyring.display()),
        "--set=gpg-verify=true",
        "--set=gpg-verify-summary=false",
        "aloft",
        &url,
    ]))?;
    let helper_bin = std::env::current_exe()?.with_file_name("aloft-os-helper");
    anyhow::ensure!(
        helper_bin.exists(),
        "{} not found: build it with `cargo build --release -p aloft-osd --features test-support --bins`",
        helper_bin.display()
    );
    let helper = HelperProcess::start(&helper_bin, &d.join("helper-aloft"), &ours, &key.keyring)?;
    let helper_pre = HelperProcess::start(&helper_bin, &d.join("helper-prestaged"), &pre, &key.keyring)?;
    let (backend, prestaged) = (helper.client(), helper_pre.client());
    println!("os-bench: {files} files in the base commit, {rounds} rounds, server {url}, through aloft-os-helper");
    println!("{:>5} {:>12} {:>14} {:>7} {:>16}", "round", "aloft ms", "ostree CLI ms", "ratio", "prestaged ms");
    let (mut a, mut b, mut c) = (Vec::new(), Vec::new(), Vec::new());
    for r in 1..=rounds {
        // A small change: one file rewritten, one added.
        std::fs::write(tree.join("usr/share/aloft-test/f00000"), format!("changed in round {r}\n"))?;
        std::fs::write(tree.join(format!("usr/share/aloft-test/new-{r}")), format!("new in round {r}\n"))?;
        let sum = server.commit(&tree, REF, &format!("round {r}"), Some(&key))?;
        let image = aloft_api::osimage::parse(&format!("ostree+{url}#{REF}@{sum}"))?.context("parsed")?;
        let ours_run = || -> Result<Duration> {
            let started = Instant::now();
            backend.pull(&image)?;
            backend.stage(&StageRequest {
                image: Some(image.clone()),
                old_kargs: vec![],
                new_kargs: vec!["mitigations=off".into()],
            })?;
            Ok(started.elapsed())
        };
        let (ta, tb) = if r % 2 == 1 {
            let ta = ours_run()?;
            (ta, baseline(&theirs, &sum)?)
        } else {
            let tb = baseline(&theirs, &sum)?;
            (ours_run()?, tb)
        };
        // Pre-staged: the same kind of update on a third sysroot whose commit was pulled ahead
        // (as `aloft.dev/prestageConfig` makes the agent do): the update itself is timed.
        let pre_image = image.clone();
        prestaged.pull(&pre_image)?;
        let started = Instant::now();
        let report = prestaged.pull(&pre_image)?;
        prestaged.stage(&StageRequest {
            image: Some(pre_image),
            old_kargs: vec![],
            new_kargs: vec!["mitigations=off".into()],
        })?;
        let tc = started.elapsed();
        anyhow::ensure!(report.already_present, "the pre-staged commit was downloaded again");
        println!(
            "{r:>5} {:>12.1} {:>14.1} {:>7.2} {:>16.1}",
            ms(ta),
            ms(tb),
            ta.as_secs_f64() / tb.as_secs_f64(),
            ms(tc)
        );
        a.push(ta);
        b.push(tb);
        c.push(tc);
    }
    let (ma, mb, mc) = (median(&mut a), median(&mut b), median(&mut c));
    println!(
        "median: aloft pull+stage {:.1} ms, ostree pull + ostree admin deploy {:.1} ms, ratio {:.2} (target <= 1.2)",
        ms(ma),
        ms(mb),
        ma.as_secs_f64() / mb.as_secs_f64()
    );
    println!("median: update of a pre-staged commit (no download) {:.1} ms", ms(mc));
    Ok(())
}
