//! What a host's first boot left when its Ignition config came from the coordinator's machine
//! config server (`/config/<pool>`): MCO's node-annotations file naming the rendered config it
//! wrote, and that config itself. Why the config too: the pool's target may have moved on by the
//! time the agent enrolls (or the server served the pool's last complete config while a rollout
//! had reached no node, as MCO's does), and the node's first update must then go from what the
//! first boot wrote, as MCO's daemon goes from the node-annotations' config: files and units
//! only that config had are taken away, not left behind unmanaged. A node credential may read
//! only the configs it is asked to run, so the server hands the config over with the host's
//! first boot, where MCO's daemon reads it from the cluster.

use crate::host::Root;
use aloft_api::MachineConfig;

/// MCO's file saying which rendered config a host's first boot wrote (the machine config
/// server adds it to the Ignition config it serves), beneath the root.
pub const NODE_ANNOTATIONS_FILE: &str = "etc/machine-config-daemon/node-annotations.json";

/// The rendered config the first boot wrote, as a MachineConfig holding only its Ignition
/// config (what Ignition applies: the OS image and kernel arguments are the agent's first
/// update's to apply), beneath the root. Read-only for root: the config holds the pool's
/// secrets.
pub const CONFIG_FILE: &str = "etc/aloft/first-boot-config.json";

/// What the first boot wrote.
#[derive(Debug, Clone)]
pub struct FirstBoot {
    /// The rendered config's name, from [`NODE_ANNOTATIONS_FILE`]'s `currentConfig`.
    pub name: String,
    /// That config from [`CONFIG_FILE`], when it is there, reads, and has that name.
    pub config: Option<MachineConfig>,
}

/// What the first boot wrote, if [`NODE_ANNOTATIONS_FILE`] is there and reads. A config file
/// that does not read, or that names another config, is not used (and said): the first update
/// then goes from no config, as on a host provisioned without the server.
pub fn read(root: &Root) -> Option<FirstBoot> {
    let text = std::fs::read_to_string(root.path().join(NODE_ANNOTATIONS_FILE)).ok()?;
    let v: serde_json::Value = serde_json::from_str(&text).ok()?;
    let name = v.get(aloft_api::annotations::CURRENT_CONFIG)?.as_str()?.to_string();
    let path = root.path().join(CONFIG_FILE);
    let config = match std::fs::read(&path) {
        Ok(bytes) => match serde_json::from_slice::<MachineConfig>(&bytes) {
            Ok(mc) if mc.metadata.name == name => match crate::engine::normalize(&mc.spec) {
                Ok(_) => Some(mc),
                // Used, it would fail every update the same way.
                Err(e) => {
                    tracing::warn!(path = %path.display(), error = %e, "the first boot's config does not read: not used");
                    None
                }
            },
            Ok(mc) => {
                tracing::warn!(
                    path = %path.display(),
                    names = %mc.metadata.name,
                    node_annotations = %name,
                    "the first boot's config file names another config than its node annotations: not used"
                );
                None
            }
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %e, "the first boot's config file does not read: not used");
                None
            }
        },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => {
            tracing::warn!(path = %path.display(), error = %e, "cannot read the first boot's config file: not used");
            None
        }
    };
    Some(FirstBoot { name, config })
}

/// The config the first update goes from: the first boot's config file; without it (a host
/// served by an older coordinator, or a file that did not read), when the node annotations
/// name the config the node is given (`given`) and the disk holds its files and units, that
/// config's Ignition part: the disk is that config's, and the update from it writes nothing
/// the first boot did not. Otherwise none: the update writes all of `given`'s files.
pub fn base(fb: &FirstBoot, given: &MachineConfig, root: &Root) -> Option<MachineConfig> {
    if let Some(c) = &fb.config {
        return Some(c.clone());
    }
    if fb.name != given.metadata.name || crate::engine::verify_files(root, given).is_err() {
        return None;
    }
    let mut base =
        MachineConfig { api_version: given.api_version.clone(), kind: given.kind.clone(), ..Default::default() };
    base.metadata.name = given.metadata.name.clone();
    base.spec.config = given.spec.config.clone();
    Some(base)
}

/// Removes [`CONFIG_FILE`] once the node has a config of its own: from then on the agent's
/// saved current config is what the disk holds, and the file (the pool's secrets) has no use.
pub fn forget_config(root: &Root) {
    let path = root.path().join(CONFIG_FILE);
    match std::fs::remove_file(&path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            tracing::warn!(path = %path.display(), error = %e, "cannot remove the first boot's config file");
        }
        _ => {}
    }
}
