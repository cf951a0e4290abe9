//! sd_notify against a datagram socket standing in for systemd's notify socket: READY/STATUS
//! arrive as systemd would read them, WATCHDOG=1 repeats at half of WATCHDOG_USEC, and nothing
//! happens without NOTIFY_SOCKET. One test per binary: it sets the process environment.

use aloft_agent::notify;
use std::os::unix::net::UnixDatagram;
use std::time::{Duration, Instant};

fn recv(sock: &UnixDatagram) -> String {
    let mut buf = [0u8; 4096];
    let n = sock.recv(&mut buf).expect("a notification");
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

#[test]
fn notifies_systemd_and_pings_the_watchdog() {
    // Without NOTIFY_SOCKET (not run by systemd) everything is a no-op.
    if std::env::var_os("NOTIFY_SOCKET").is_none() && std::env::var_os("WATCHDOG_USEC").is_none() {
        notify::ready("no systemd here");
        notify::status("still none");
        assert_eq!(notify::watchdog_interval(), None);
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async { assert!(notify::spawn_watchdog().is_none()) });
    }

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("notify");
    let sock = UnixDatagram::bind(&path).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    // Set before any runtime (or other thread) exists.
    std::env::set_var("NOTIFY_SOCKET", &path);
    std::env::set_var("WATCHDOG_USEC", "200000");
    std::env::set_var("WATCHDOG_PID", std::process::id().to_string());

    notify::ready("enrolled as node-1");
    assert_eq!(recv(&sock), "READY=1\nSTATUS=enrolled as node-1\n");
    notify::status("applying rendered-worker-2\nstep 2");
    assert_eq!(recv(&sock), "STATUS=applying rendered-worker-2 step 2\n", "one line");
    notify::stopping();
    assert_eq!(recv(&sock), "STOPPING=1\n");

    assert_eq!(notify::watchdog_interval(), Some(Duration::from_millis(100)));
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
    let task = rt.block_on(async { notify::spawn_watchdog() }).expect("watchdog enabled");
    let start = Instant::now();
    for _ in 0..3 {
        assert_eq!(recv(&sock), "WATCHDOG=1\n");
    }
    let took = start.elapsed();
    assert!(took >= Duration::from_millis(180) && took < Duration::from_secs(3), "3 pings took {took:?}");
    task.abort();

    // A watchdog meant for another process is not ours to ping.
    std::env::set_var("WATCHDOG_PID", "1");
    assert_eq!(notify::watchdog_interval(), None);
}
