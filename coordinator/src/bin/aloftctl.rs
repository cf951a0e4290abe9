//! aloftctl: the command-line client of an aloft coordinator.

fn main() {
    // `aloftctl get nodes -w | grep -m1 Degraded`, `... | head`: when the reader goes, end quietly
    // as kubectl and every Unix filter do (killed by SIGPIPE), not with a panic of `println!` on
    // EPIPE (Rust ignores SIGPIPE by default).
    // SAFETY: restoring a signal's default disposition installs no handler, before any thread.
    unsafe {
        let _ = nix::sys::signal::signal(nix::sys::signal::Signal::SIGPIPE, nix::sys::signal::SigHandler::SigDfl);
    }
    // An empty ALOFT_* variable counts as unset, as kubectl treats an empty KUBECONFIG: clap
    // would take `ALOFT_KUBECONFIG=` for a flag given without its value, and refuse even an
    // explicit `--kubeconfig`. Done before the runtime starts any thread.
    for (key, value) in std::env::vars_os() {
        if value.is_empty() && key.to_str().is_some_and(|k| k.starts_with("ALOFT_")) {
            std::env::remove_var(key);
        }
    }
    if let Err(e) = run() {
        eprintln!("error: {e:#}");
        let usage = e.downcast_ref::<aloft_coordinator::ctl::Usage>().is_some();
        std::process::exit(if usage { 2 } else { 1 });
    }
}

#[tokio::main]
async fn run() -> anyhow::Result<()> {
    aloft_coordinator::ctl::main().await
}
