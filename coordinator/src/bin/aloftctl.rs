//! aloftctl: the command-line client of an aloft coordinator.

fn main() {
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
        std::process::exit(1);
    }
}

#[tokio::main]
async fn run() -> anyhow::Result<()> {
    aloft_coordinator::ctl::main().await
}
