//! `--config FILE`: the environment file the systemd unit names, read before the flags.

use std::process::Command;

/// A config file named on the command line that is not there is an error naming it, in either
/// spelling of the flag (it was skipped, and the agent then blamed a missing --coordinator).
#[test]
fn a_missing_config_file_is_an_error_naming_it() {
    for args in [vec!["--config", "/nonexistent/agent.env"], vec!["--config=/nonexistent/agent.env"]] {
        let out = Command::new(env!("CARGO_BIN_EXE_aloft-agent"))
            .args(&args)
            .env_remove("ALOFT_COORDINATOR")
            .output()
            .expect("run aloft-agent");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?}: {err}");
        assert!(err.contains("/nonexistent/agent.env"), "{args:?}: {err}");
    }
}

/// `--config=FILE` reads the file as `--config FILE` does, and quoted values lose their quotes
/// as systemd's EnvironmentFile= reads them: the agent gets as far as the CA the file names.
#[test]
fn the_config_file_is_read_in_either_spelling_with_quotes_removed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let env = dir.path().join("agent.env");
    std::fs::write(
        &env,
        "ALOFT_COORDINATOR=\"https://127.0.0.1:1\"\nALOFT_CA='/nonexistent/ca.crt'\nALOFT_NODE_NAME=n1\n",
    )
    .expect("write agent.env");
    let flag = format!("--config={}", env.display());
    let out = Command::new(env!("CARGO_BIN_EXE_aloft-agent"))
        .args([flag.as_str(), "--root"])
        .arg(dir.path())
        .env_remove("ALOFT_COORDINATOR")
        .env_remove("ALOFT_CA")
        .env_remove("ALOFT_NODE_NAME")
        .output()
        .expect("run aloft-agent");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(!err.contains("--coordinator"), "the file was read: {err}");
    assert!(!err.contains("'/nonexistent"), "quotes removed: {err}");
}
