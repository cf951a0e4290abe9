//! aloftctl: the command-line client of an aloft coordinator.

fn main() {
    // `aloftctl get nodes -w | grep -m1 Degraded`, `... | head`: when the reader goes, end quietly
    // as kubectl and every Unix filter do (killed by SIGPIPE), not with a panic of `println!` on
    // EPIPE (Rust ignores SIGPIPE by default).
    // SAFETY: restoring a signal's default disposition installs no handler, before any thread.
    unsafe {
        let _ = nix::sys::signal::signal(nix::sys::signal::Signal::SIGPIPE, nix::sys::signal::SigHandler::SigDfl);
    }
    if let Err(e) = run() {
        // As kubectl: the server's errors as the server said them (`Error from server
        // (NotFound): ...`), the client's own after `error: `.
        let message = format!("{e:#}");
        if message.starts_with("Error from server") {
            eprintln!("{message}");
        } else {
            eprintln!("error: {message}");
        }
        let usage = e.downcast_ref::<aloft_coordinator::ctl::Usage>().is_some();
        std::process::exit(if usage { 2 } else { 1 });
    }
}

#[tokio::main]
async fn run() -> anyhow::Result<()> {
    aloft_coordinator::ctl::main(aloft_api::build_info!()).await
}
