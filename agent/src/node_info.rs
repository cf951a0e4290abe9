//! The Node's `status.nodeInfo`, as a kubelet reports it: which OS image and kernel the node
//! booted, its machine and boot IDs. An OS-update fleet wants to see at a glance which image each
//! node runs (`kubectl get nodes -o wide`, `aloftctl describe node`), and the boot ID tells an
//! operator whether a node really rebooted. Read at every start of the agent, which follows every
//! reboot, so the values are those of the running boot.

use crate::host::Root;
use aloft_api::build::BuildInfo;
use serde_json::{json, Value};
use std::path::Path;

/// What `osImage` says when the root has no readable os-release (cAdvisor, which the kubelet
/// reads it from, says the same).
const UNKNOWN_OS: &str = "Linux";

/// The `status.nodeInfo` of the host at `root`, run by the agent build `agent`. A file under the
/// root wins over the running system's (a sandboxed root stands for its own host); unreadable
/// values are empty, never an error: the node must report Ready whatever its DMI tables say.
///
/// The agent plays the kubelet's part, so its version is `kubeletVersion` (`kubectl get nodes`
/// shows it as VERSION): which nodes run which agent build while aloft itself is upgraded.
pub fn of(root: &Root, agent: &BuildInfo) -> Value {
    let r = root.path();
    json!({
        "kubeletVersion": agent.node_version(),
        "machineID": first_line(&[&r.join("etc/machine-id")]),
        "systemUUID": first_line(&[&r.join("sys/class/dmi/id/product_uuid")]),
        "bootID": crate::state::boot_id(root),
        "kernelVersion": first_line(&[&r.join("proc/sys/kernel/osrelease"), Path::new("/proc/sys/kernel/osrelease")]),
        "osImage": os_image(r),
        "operatingSystem": "linux",
        "architecture": architecture(std::env::consts::ARCH),
    })
}

/// os-release's PRETTY_NAME (RHCOS: "Red Hat Enterprise Linux CoreOS 418.94…"), from
/// `/etc/os-release` or else `/usr/lib/os-release` (os-release(5)); else NAME, else "Linux".
fn os_image(root: &Path) -> String {
    for path in [root.join("etc/os-release"), root.join("usr/lib/os-release")] {
        match rs_release::parse_os_release(&path) {
            Ok(fields) => {
                let pick = |k: &str| fields.get(k).filter(|v| !v.is_empty()).cloned();
                return pick("PRETTY_NAME").or_else(|| pick("NAME")).unwrap_or_else(|| UNKNOWN_OS.to_string());
            }
            Err(rs_release::OsReleaseError::Io(e)) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => tracing::warn!(path = %path.display(), error = %e, "cannot read the OS name"),
        }
    }
    UNKNOWN_OS.to_string()
}

fn first_line(paths: &[&Path]) -> String {
    paths
        .iter()
        .find_map(|p| std::fs::read_to_string(p).ok())
        .and_then(|s| s.lines().next().map(|l| l.trim().to_string()))
        .unwrap_or_default()
}

/// Go's name of the architecture, which Kubernetes reports (`kubernetes.io/arch`).
fn architecture(rust: &str) -> &str {
    match rust {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "powerpc64" if cfg!(target_endian = "little") => "ppc64le",
        "powerpc64" => "ppc64",
        "x86" => "386",
        "loongarch64" => "loong64",
        "mips" if cfg!(target_endian = "little") => "mipsle",
        "mips64" if cfg!(target_endian = "little") => "mips64le",
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_what_a_kubelet_reports() {
        let dir = tempfile::tempdir().unwrap();
        let root = Root::new(dir.path());
        std::fs::create_dir_all(dir.path().join("etc")).unwrap();
        std::fs::write(dir.path().join("etc/machine-id"), "0123456789abcdef0123456789abcdef\n").unwrap();
        std::fs::write(
            dir.path().join("etc/os-release"),
            "# written by the image build\nNAME=\"Red Hat Enterprise Linux CoreOS\"\n\n\
             PRETTY_NAME=\"Red Hat Enterprise Linux CoreOS 418.94.202410090804-0 (Plow)\"\nID=rhcos\n",
        )
        .unwrap();
        let build = BuildInfo::new("0.1.0", Some("0123456789abcdef0123"), Some("clean"), None);
        let info = of(&root, &build);
        assert_eq!(info["kubeletVersion"], "v0.1.0+0123456789ab");
        assert_eq!(info["osImage"], "Red Hat Enterprise Linux CoreOS 418.94.202410090804-0 (Plow)");
        assert_eq!(info["machineID"], "0123456789abcdef0123456789abcdef");
        assert_eq!(info["operatingSystem"], "linux");
        assert!(!info["kernelVersion"].as_str().unwrap_or("").is_empty(), "{info}");
        assert_eq!(info["bootID"], crate::state::boot_id(&root));
    }

    #[test]
    fn falls_back_to_usr_lib_then_name_then_linux() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(os_image(dir.path()), "Linux", "no os-release at all");
        std::fs::create_dir_all(dir.path().join("usr/lib")).unwrap();
        std::fs::write(dir.path().join("usr/lib/os-release"), "NAME=Fedora\nID=fedora\n").unwrap();
        assert_eq!(os_image(dir.path()), "Fedora", "NAME without PRETTY_NAME, from /usr/lib");
        std::fs::create_dir_all(dir.path().join("etc")).unwrap();
        std::fs::write(dir.path().join("etc/os-release"), "this is not an assignment\n").unwrap();
        assert_eq!(os_image(dir.path()), "Fedora", "a malformed /etc/os-release: the next one");
    }

    #[test]
    fn go_architecture_names() {
        assert_eq!(architecture("x86_64"), "amd64");
        assert_eq!(architecture("aarch64"), "arm64");
        assert_eq!(architecture("s390x"), "s390x");
        assert_eq!(architecture("loongarch64"), "loong64");
        assert_eq!(architecture("riscv64"), "riscv64");
    }
}
