//! The OS helper as a process and a socket: who may talk to it, what it does with bad or hostile
//! requests (refuses them by name and keeps serving), socket activation and the idle exit.
//! Real `aloft-os-helper` processes on real directory sysroots; requests are written by hand
//! here where the agent's client would refuse to send them.

use aloft_agent::os::{OsBackend, OsError};
use aloft_osd::testkit::{self, GpgKey, HelperProcess, ServerRepo, REF};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn helper_bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_aloft-os-helper"))
}

struct Fx {
    dir: tempfile::TempDir,
    sysroot: PathBuf,
    keyring: PathBuf,
    base: String,
}

fn fixture() -> Fx {
    let dir = tempfile::tempdir().unwrap();
    let key = GpgKey::generate(dir.path(), "k").unwrap();
    let server = ServerRepo::create(&dir.path().join("srv/repo")).unwrap();
    let tree = dir.path().join("tree");
    testkit::write_tree(&tree, "1", 3).unwrap();
    let base = server.commit(&tree, REF, "v1", Some(&key)).unwrap();
    let sysroot = dir.path().join("sysroot");
    testkit::init_sysroot(&sysroot, &server, &base, &["root=/dev/vda"]).unwrap();
    Fx { keyring: key.keyring.clone(), dir, sysroot, base }
}

/// Send `line` raw and read the one reply line. The helper may answer and close before it has
/// read all of an over-long line: the rest of the write then fails with a broken pipe, and the
/// answer is still there to read.
fn raw(socket: &Path, line: &str) -> serde_json::Value {
    let mut s = UnixStream::connect(socket).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let sent = s.write_all(line.as_bytes()).and_then(|()| s.write_all(b"\n"));
    if let Err(e) = sent {
        assert!(
            matches!(e.kind(), std::io::ErrorKind::BrokenPipe | std::io::ErrorKind::ConnectionReset),
            "sending the request: {e}"
        );
    }
    let mut reply = String::new();
    BufReader::new(&s).read_line(&mut reply).unwrap();
    serde_json::from_str(&reply).unwrap_or_else(|e| panic!("reply {reply:?}: {e}"))
}

fn deploy_dirs(sysroot: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(sysroot.join("ostree/deploy/aloft/deploy"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
        .collect();
    v.sort();
    v
}

/// Garbage, a foreign protocol version, an unknown operation, an oversized line: each gets an
/// `invalid` reply naming the problem, and the helper answers the next request as usual.
#[test]
fn malformed_requests_are_refused_and_the_helper_keeps_serving() {
    let fx = fixture();
    let mut helper = HelperProcess::start(helper_bin(), &fx.dir.path().join("run"), &fx.sysroot, &fx.keyring).unwrap();
    let cases = [
        ("not json at all".to_string(), "malformed request"),
        (r#"{"v":99,"op":"status"}"#.to_string(), "version 99"),
        (r#"{"v":"1","op":"status"}"#.to_string(), r#"has "v": "1", not an integer"#),
        (r#"{"v":1.0,"op":"status"}"#.to_string(), r#"has "v": 1.0, not an integer"#),
        (r#"{"op":"status"}"#.to_string(), "carries no version"),
        ("[1]".to_string(), "not a JSON object"),
        (r#"{"v":1,"op":"format"}"#.to_string(), "malformed request"),
        (r#"{"v":1,"op":"stage","image":null}"#.to_string(), "malformed request"),
        (format!(r#"{{"v":1,"op":"pull","image":"{}"}}"#, "x".repeat(70_000)), "longer than"),
    ];
    for (line, want) in cases {
        let reply = raw(&helper.socket, &line);
        assert_eq!(reply["v"], 1, "{reply}");
        assert_eq!(reply["error"]["kind"], "invalid", "{reply}");
        let msg = reply["error"]["detail"].as_str().unwrap();
        assert!(msg.contains(want), "{line:.60}: want {want:?} in {msg}");
    }
    // A connection that closes without a request is not an error either.
    drop(UnixStream::connect(&helper.socket).unwrap());
    assert!(helper.is_running(), "the helper survived:\n{}", helper.log_text());
    let st = helper.client().status().unwrap();
    assert_eq!(st.deployments.len(), 1);
    assert_eq!(st.deployments[0].checksum, fx.base);
}

/// A second helper asked to listen on a live helper's socket refuses, and the first keeps
/// serving: it removed the socket and took over, leaving the first running, unreachable.
#[test]
fn a_second_helper_does_not_take_a_live_helpers_socket() {
    let fx = fixture();
    let mut helper = HelperProcess::start(helper_bin(), &fx.dir.path().join("run"), &fx.sysroot, &fx.keyring).unwrap();
    let out = std::process::Command::new(helper_bin())
        .arg("--sysroot")
        .arg(&fx.sysroot)
        .arg("--keyring")
        .arg(&fx.keyring)
        .arg("--listen")
        .arg(&helper.socket)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && stderr.contains("another aloft-os-helper is serving"), "{stderr}");
    assert!(helper.is_running());
    assert_eq!(helper.client().status().unwrap().deployments[0].checksum, fx.base, "the first still answers");
}

/// Defense in depth: a request the agent would never send (its own parser refuses these
/// osImageURLs and kernel arguments) is refused by the helper too, and nothing changes: no
/// remote written, no deployment.
#[test]
fn hostile_requests_are_refused_by_the_helper_and_change_nothing() {
    let fx = fixture();
    let helper = HelperProcess::start(helper_bin(), &fx.dir.path().join("run"), &fx.sysroot, &fx.keyring).unwrap();
    let repo_config = std::fs::read_to_string(fx.sysroot.join("ostree/repo/config")).unwrap();
    let dirs = deploy_dirs(&fx.sysroot);
    let sum = &fx.base;
    let hostile = [
        format!(r#"{{"v":1,"op":"pull","image":"ostree+file:///etc/shadow#{REF}@{sum}"}}"#),
        format!(r#"{{"v":1,"op":"pull","image":"ostree+http://evil/../../sysroot#{REF}@{sum}"}}"#),
        format!(r#"{{"v":1,"op":"pull","image":"ostree+http://h/repo#{REF}@{sum}\nurl=http://evil/"}}"#),
        format!(r#"{{"v":1,"op":"hasVerifiedCommit","image":"ostree+http://h/repo?x=1#{REF}@{sum}"}}"#),
        format!(r#"{{"v":1,"op":"stage","image":"quay.io/evil@sha256:{sum}","oldKargs":[],"newKargs":[]}}"#),
        r#"{"v":1,"op":"stage","oldKargs":[],"newKargs":["quiet\ninit=/bin/sh"]}"#.to_string(),
        r#"{"v":1,"op":"stage","oldKargs":[],"newKargs":["a=\"unterminated"]}"#.to_string(),
    ];
    for line in hostile {
        let reply = raw(&helper.socket, &line);
        assert_eq!(reply["error"]["kind"], "invalid", "{line}: {reply}");
        let msg = reply["error"]["detail"].as_str().unwrap();
        assert!(msg.starts_with("refused by the OS helper"), "{line}: {msg}");
    }
    assert_eq!(std::fs::read_to_string(fx.sysroot.join("ostree/repo/config")).unwrap(), repo_config, "no remote");
    assert_eq!(deploy_dirs(&fx.sysroot), dirs, "nothing deployed");
    assert_eq!(testkit::deployment_order(&fx.sysroot).unwrap(), vec![fx.base.clone()]);
}

/// The pull worker (`--pull-worker`, what the helper runs each pull in) does pulls and nothing
/// else: any other request, or a hostile one, is refused on its stdout and changes nothing.
#[test]
fn the_pull_worker_only_pulls() {
    let fx = fixture();
    let dirs = deploy_dirs(&fx.sysroot);
    let sum = &fx.base;
    let cases = [
        (r#"{"v":1,"op":"dropStaged"}"#.to_string(), "only pulls, not dropStaged"),
        (r#"{"v":1,"op":"rollback"}"#.to_string(), "only pulls, not rollback"),
        (
            format!(r#"{{"v":1,"op":"pull","image":"ostree+file:///etc/shadow#{REF}@{sum}"}}"#),
            "refused by the OS helper",
        ),
        ("garbage".to_string(), "malformed request"),
        (String::new(), "malformed request"),
    ];
    for (line, want) in cases {
        let mut child = Command::new(helper_bin())
            .arg("--sysroot")
            .arg(&fx.sysroot)
            .arg("--keyring")
            .arg(&fx.keyring)
            .arg("--pull-worker")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        child.stdin.take().unwrap().write_all(format!("{line}\n").as_bytes()).unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "{line}: {}", String::from_utf8_lossy(&out.stderr));
        let reply: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(reply["error"]["kind"], "invalid", "{line}: {reply}");
        let msg = reply["error"]["detail"].as_str().unwrap();
        assert!(msg.contains(want), "{line}: want {want:?} in {msg}");
    }
    assert_eq!(deploy_dirs(&fx.sysroot), dirs, "nothing deployed");
    assert_eq!(testkit::deployment_order(&fx.sysroot).unwrap(), vec![fx.base.clone()]);
}

/// A test that cannot run here: a loud skip, or a failure where `ALOFT_REQUIRE_HOST_TOOLS` is
/// set (scripts/test.sh sets it: CI runs as root with scripts/install-deps.sh's packages, so a
/// skip there would hide a test that never ran).
fn skip_or_fail(why: &str) {
    if std::env::var_os("ALOFT_REQUIRE_HOST_TOOLS").is_some_and(|v| !v.is_empty() && v != "0") {
        panic!("{why}, and ALOFT_REQUIRE_HOST_TOOLS is set: run as root after scripts/install-deps.sh");
    }
    eprintln!("SKIPPED: {why} (set ALOFT_REQUIRE_HOST_TOOLS=1 to make this a failure)");
}

/// Run as uid 65534 by `peers_with_another_uid_are_refused` (with `--ignored`): connect, ask for
/// the status, print the reply. Ignored in a normal test run, where it would count as a passing
/// test that checked nothing.
#[test]
#[ignore = "the client of peers_with_another_uid_are_refused, run as another user (with --ignored)"]
fn as_nobody_client() {
    let Some(socket) = std::env::var_os("ALOFT_OSD_TEST_NOBODY_SOCKET") else { return };
    let reply = match UnixStream::connect(&socket) {
        Ok(mut s) => {
            // The helper refuses at once and closes, maybe before this write: the refusal is
            // still there to read, which is what this test checks.
            let _ = s.write_all(b"{\"v\":1,\"op\":\"status\"}\n");
            let mut reply = String::new();
            BufReader::new(&s).read_line(&mut reply).unwrap();
            reply
        }
        Err(e) => format!("connect failed: {e}"),
    };
    println!("NOBODY-REPLY {}", reply.trim());
}

/// SO_PEERCRED: a client running as another user (nobody) gets a refusal naming its uid, even
/// when the socket's file mode would let it connect; root (this test) is served. Needs root to
/// switch users; the credential decision itself is unit-tested in `server.rs` on a socket pair.
#[test]
fn peers_with_another_uid_are_refused() {
    if !nix::unistd::geteuid().is_root() {
        skip_or_fail("needs root to run a client as another user");
        return;
    }
    let fx = fixture();
    let run = fx.dir.path().join("run");
    let helper = HelperProcess::start(helper_bin(), &run, &fx.sysroot, &fx.keyring).unwrap();
    // Open the file-system fences so that only the credential check stands in the way.
    for p in [fx.dir.path(), run.as_path()] {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    std::fs::set_permissions(&helper.socket, std::fs::Permissions::from_mode(0o666)).unwrap();
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "as_nobody_client", "--ignored", "--nocapture", "--test-threads=1"])
        .env("ALOFT_OSD_TEST_NOBODY_SOCKET", &helper.socket)
        .uid(65534)
        .gid(65534)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let reply = stdout
        .lines()
        .find_map(|l| l.split_once("NOBODY-REPLY ").map(|(_, r)| r))
        .unwrap_or_else(|| panic!("no reply from the child: {stdout}\n{}", String::from_utf8_lossy(&out.stderr)));
    assert!(!reply.starts_with("connect failed"), "the socket mode was opened: {reply}");
    let reply: serde_json::Value = serde_json::from_str(reply).unwrap();
    let msg = reply["error"]["detail"].as_str().unwrap_or_default();
    assert!(msg.contains("permission denied") && msg.contains("peer uid 65534 refused"), "{reply}");
    assert!(reply.get("ok").is_none(), "{reply}");
    assert!(helper.log_text().contains("peer uid 65534 refused"), "{}", helper.log_text());
    // Root is served.
    assert_eq!(helper.client().status().unwrap().deployments.len(), 1);
}

/// systemd's socket activation, with systemd's own test launcher: the helper takes the socket
/// from LISTEN_FDS, serves, and exits once idle (systemd would start it again on the next
/// connection).
#[test]
fn socket_activated_and_exits_when_idle() {
    let Ok(launcher) = which("systemd-socket-activate") else {
        skip_or_fail("systemd-socket-activate (Debian's systemd package) is not installed");
        return;
    };
    let fx = fixture();
    let socket = fx.dir.path().join("activated.sock");
    let mut child = Command::new(launcher)
        .arg("-l")
        .arg(&socket)
        .arg(helper_bin())
        .arg("--sysroot")
        .arg(&fx.sysroot)
        .arg("--keyring")
        .arg(&fx.keyring)
        .args(["--idle-exit-seconds", "2"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let started = Instant::now();
    while !socket.exists() {
        assert!(started.elapsed() < Duration::from_secs(20), "no socket");
        std::thread::sleep(Duration::from_millis(20));
    }
    let client = aloft_agent::os::client::HelperClient::new(&socket);
    assert_eq!(client.status().unwrap().deployments[0].checksum, fx.base);
    let e = client.rollback().unwrap_err();
    assert!(matches!(e, OsError::Invalid(_)) && e.to_string().contains("no previous deployment"), "{e:?}");
    assert_eq!(client.drop_staged().unwrap(), None, "nothing staged: nothing dropped, over the socket");
    let exited = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(started.elapsed() < Duration::from_secs(30), "the helper did not exit when idle");
        std::thread::sleep(Duration::from_millis(100));
    };
    let mut log = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut log).unwrap();
    assert!(exited.success(), "{exited}: {log}");
    assert!(log.contains("socket=systemd") && log.contains("idle: exiting"), "{log}");
}

fn which(name: &str) -> Result<PathBuf, ()> {
    std::env::var_os("PATH")
        .and_then(|p| std::env::split_paths(&p).map(|d| d.join(name)).find(|p| p.is_file()))
        .ok_or(())
}

/// Boot counting through the real helper, on an environment block GRUB's own `grub-editenv`
/// created: the agent's client arms it, `grub-editenv list` reads what GRUB would, a fallback
/// written as GRUB writes it shows in the status, disarming ends it; `keepBooted` on a directory
/// sysroot (nothing booted) is refused and changes no order. Without the block nothing is counted.
#[test]
fn boot_counting_is_what_grub_editenv_reads_and_writes() {
    use aloft_api::os::BootCount;
    let Ok(editenv) = which("grub-editenv") else {
        return skip_or_fail("grub-editenv not found (package grub-common)");
    };
    let fx = fixture();
    let grubenv = fx.sysroot.join("boot/grub2/grubenv");
    let helper = HelperProcess::start(helper_bin(), &fx.dir.path().join("run"), &fx.sysroot, &fx.keyring).unwrap();
    let client = helper.client();
    assert_eq!(client.boot_counter(BootCount::Arm(3)).unwrap(), None, "no block: no counting");
    assert_eq!(client.status().unwrap().boot_counting, None);
    assert!(!grubenv.exists(), "no block is created");

    std::fs::create_dir_all(grubenv.parent().unwrap()).unwrap();
    let grub = |args: &[&str]| {
        let out = Command::new(&editenv).arg(&grubenv).args(args).output().unwrap();
        assert!(out.status.success(), "grub-editenv {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap()
    };
    grub(&["create"]);
    grub(&["set", "saved_entry=aloft-1"]);
    let armed = client.boot_counter(BootCount::Arm(3)).unwrap().expect("counting");
    assert_eq!(armed.grubenv, grubenv.display().to_string());
    assert_eq!(grub(&["list"]), "saved_entry=aloft-1\nboot_counter=3\nboot_success=0\n");
    assert_eq!(std::fs::metadata(&grubenv).unwrap().len(), 1024, "the block keeps its size");
    // An OS whose agent would never disarm (no marker in the deployment that boots next) is not
    // armed, and the block is left as it was.
    let deploy = fx.sysroot.join(format!("ostree/deploy/aloft/deploy/{}.0", fx.base));
    let marker = deploy.join(aloft_osd::bootcount::DISARMS_MARKER);
    std::fs::remove_file(&marker).unwrap();
    let before = std::fs::read(&grubenv).unwrap();
    let refused = client.boot_counter(BootCount::Arm(3)).unwrap_err().to_string();
    assert!(refused.contains("lacks /usr/lib/aloft/boot-counting") && refused.contains(&fx.base), "{refused}");
    assert_eq!(std::fs::read(&grubenv).unwrap(), before);
    std::fs::write(&marker, "1\n").unwrap();
    // What GRUB's script leaves once it gave up on the new entry.
    grub(&["set", "boot_counter=-1"]);
    let status = client.status().unwrap().boot_counting.expect("counting in the status");
    assert!(status.fell_back(), "{status:?}");
    let order = testkit::deployment_order(&fx.sysroot).unwrap();
    let refused = client.keep_booted().unwrap_err();
    assert!(matches!(&refused, OsError::Invalid(m) if m.contains("no deployment is booted")), "{refused}");
    assert_eq!(testkit::deployment_order(&fx.sysroot).unwrap(), order, "the order is left alone");
    client.boot_counter(BootCount::Disarm).unwrap().expect("counting");
    assert_eq!(grub(&["list"]), "saved_entry=aloft-1\nboot_success=1\n");
    // A block GRUB would not read: refused by name, the file left as it was.
    std::fs::write(&grubenv, b"boot_counter=3\n").unwrap();
    let e = client.boot_counter(BootCount::Arm(3)).unwrap_err().to_string();
    assert!(e.contains("not a GRUB environment block"), "{e}");
    assert_eq!(std::fs::read(&grubenv).unwrap(), b"boot_counter=3\n");
    assert_eq!(client.status().unwrap().boot_counting, None);
}
