//! aloftctl: the command-line client of an aloft coordinator.

#[tokio::main]
async fn main() {
    if let Err(e) = aloft_coordinator::ctl::main().await {
        eprintln!("error: {e:#}");
        std::process::exit(1);
    }
}
