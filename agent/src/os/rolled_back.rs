//! The kernel arguments aloft's configs put on the deployment a rollback went back to.
//!
//! An OS update's kernel arguments are worked out from the deployment it starts from: the old
//! config's arguments taken out, the new config's put in (MCO's arithmetic, `kargs`). After a
//! rollback the node runs the deployment of the config *before* the failed one, while its current
//! config is the failed one: taking the failed config's arguments out of that deployment left the
//! arguments of the config before it in place (a `nosmt` two configs had removed stayed for good,
//! and one both configs named was added twice, with a needless reboot). The rollback records here
//! which arguments that deployment carries from aloft (the failed update's "old" ones), and the
//! next update starts from them. The record holds until the node boots a deployment staged after
//! it (verified), which carries the arguments its update computed. A staged deployment lost for
//! good (the power went before ostree finalized it, at every try) leaves the node on the
//! deployment from before the update the same way, and is recorded the same way. While a record
//! holds, the OS check requires the config's arguments to be the recorded ones.

use crate::host::Root;
use crate::os::DeploymentInfo;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Record {
    kernel_arguments: Vec<String>,
    /// The deployment rolled back to: the record holds only while the node runs it (a reboot
    /// that came up on another deployment, or a newer one, voids it).
    checksum: String,
    deploy_serial: i32,
}

fn path(root: &Root) -> PathBuf {
    root.state_dir().join("os-rolled-back-kargs.json")
}

/// Record that deployment `to` (rolled back to) carries `kargs` from aloft.
pub fn save(root: &Root, to: &DeploymentInfo, kargs: &[String]) -> std::io::Result<()> {
    let record =
        Record { kernel_arguments: kargs.to_vec(), checksum: to.checksum.clone(), deploy_serial: to.deploy_serial };
    let bytes = serde_json::to_vec(&record).map_err(std::io::Error::other)?;
    crate::durable::replace_private(&path(root), &bytes)
        .map_err(|e| std::io::Error::new(e.kind(), format!("writing {}: {e}", path(root).display())))
}

/// The arguments a rollback recorded, if the node still runs (`running`: the booted deployment,
/// or the default one of a sysroot that boots nothing) the deployment it went back to. A record
/// that cannot be read is said and ignored (the configs' arguments are used, as before there was
/// a record).
pub fn load(root: &Root, running: &DeploymentInfo) -> Option<Vec<String>> {
    kargs_for(root, &running.checksum, running.deploy_serial)
}

/// [`load`], for the deployment `checksum`.`deploy_serial`.
pub fn kargs_for(root: &Root, checksum: &str, deploy_serial: i32) -> Option<Vec<String>> {
    let bytes = match std::fs::read(path(root)) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
        Err(e) => {
            tracing::warn!(file = %path(root).display(), error = %e, "cannot read the rolled-back deployment's kernel arguments");
            return None;
        }
    };
    match serde_json::from_slice::<Record>(&bytes) {
        Ok(r) if r.checksum == checksum && r.deploy_serial == deploy_serial => Some(r.kernel_arguments),
        Ok(_) => None,
        Err(e) => {
            tracing::warn!(file = %path(root).display(), error = %e, "ignoring a corrupt record of the rolled-back deployment's kernel arguments");
            None
        }
    }
}

/// Whether a record is on disk (for whichever deployment): a cheap test before asking the
/// helper which deployment runs.
pub fn recorded(root: &Root) -> bool {
    path(root).exists()
}

/// The node runs a deployment staged since the rollback: the record is void.
pub fn clear(root: &Root) -> std::io::Result<()> {
    match std::fs::remove_file(path(root)) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn deployment(checksum: &str, serial: i32) -> DeploymentInfo {
        serde_json::from_value(serde_json::json!({"stateroot": "aloft", "checksum": checksum,
            "deploySerial": serial, "index": 0, "origin": "", "kernelArguments": [],
            "booted": true, "staged": false, "pinned": false}))
        .unwrap()
    }

    #[test]
    fn a_record_holds_for_the_deployment_rolled_back_to_only() {
        let dir = tempfile::tempdir().unwrap();
        let root = Root::new(dir.path());
        let (v2, v3, v2_again) = (deployment("v2", 0), deployment("v3", 0), deployment("v2", 1));
        assert_eq!(load(&root, &v2), None);
        assert!(!recorded(&root));
        save(&root, &v2, &["nosmt".to_string()]).unwrap();
        assert!(recorded(&root));
        assert_eq!(load(&root, &v2), Some(vec!["nosmt".to_string()]));
        assert_eq!(load(&root, &v3), None, "another commit runs");
        assert_eq!(load(&root, &v2_again), None, "a newer deployment of the same commit runs");
        save(&root, &v2, &[]).unwrap();
        assert_eq!(load(&root, &v2), Some(vec![]), "an empty list is a record too");
        clear(&root).unwrap();
        assert_eq!(load(&root, &v2), None);
        clear(&root).unwrap();
        std::fs::write(path(&root), "{nope").unwrap();
        assert_eq!(load(&root, &v2), None, "a corrupt record is ignored");
    }
}
