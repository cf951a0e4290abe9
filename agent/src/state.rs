//! The agent's life as one explicit state machine. Each phase maps to MCO's node `state`
//! annotation (Done / Working / Degraded / Unreconcilable), and the phase is persisted before
//! every step that has effects, so a restart (crash, or the reboot the agent asked for) resumes
//! where it was: the apply journal says how far files and units got; this says what came next.

use crate::host::Root;
use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};
use std::io::Write;
use std::path::PathBuf;

/// What an OS update staged, kept with the phase until the deployment is verified.
///
/// Why: ostree writes a staged deployment's boot entry only while the system shuts down
/// (`ostree-finalize-staged.service`). A node that loses power (or crashes) between staging and
/// that shutdown boots its old deployment again, with the new config's files already written
/// and saved: the update cannot be redone from the configs, whose difference is gone. With the
/// request kept here the agent stages it again, as it was, and reboots; after
/// [`MAX_RESTAGES`] such attempts the node is Degraded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Staged {
    /// The `osImageURL` staged; absent for a kernel-arguments-only change.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    pub old_kargs: Vec<String>,
    pub new_kargs: Vec<String>,
    /// How many times it was staged again after a boot that did not come up on it.
    #[serde(default)]
    pub restaged: u32,
    /// The deploy serial ostree gave the staged deployment (it keeps it through finalization):
    /// the boot after the reboot must run that deployment. The commit alone does not tell: an
    /// update that changes only kernel arguments deploys the running commit again, and one that
    /// only removes arguments has none to look for on the command line, so a boot that lost it
    /// looked like the update done. Absent in a record an older agent saved (or before staging).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub serial: Option<i32>,
    /// The deployment the node ran when the update was first staged: the one a lost staging
    /// (or a rollback) goes back to, and the only one known to carry the update's `old_kargs`
    /// from aloft. A node that comes up on yet another (a boot-menu choice, a rollback that a
    /// pinned deployment sent elsewhere) gets no such record. Absent in a record an older agent
    /// saved, or where nothing is booted (a directory sysroot).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<DeploymentId>,
}

/// One deployment: its commit and ostree's deploy serial (two deployments of one commit differ
/// by serial only).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DeploymentId {
    pub checksum: String,
    pub serial: i32,
}

/// How many times a staged deployment lost with its boot is staged again before the node is
/// Degraded (each costs a reboot; a deployment that never comes up must not reboot forever).
pub const MAX_RESTAGES: u32 = 2;

impl Staged {
    pub fn of(req: &aloft_api::os::StageRequest) -> Self {
        Staged {
            image: req.image.as_ref().map(ToString::to_string),
            old_kargs: req.old_kargs.clone(),
            new_kargs: req.new_kargs.clone(),
            restaged: 0,
            serial: None,
            from: None,
        }
    }

    /// The request to stage it again.
    pub fn request(&self) -> Result<aloft_api::os::StageRequest, String> {
        let image = match &self.image {
            Some(url) => aloft_api::osimage::parse(url).map_err(|e| e.to_string())?,
            None => None,
        };
        Ok(aloft_api::os::StageRequest { image, old_kargs: self.old_kargs.clone(), new_kargs: self.new_kargs.clone() })
    }
}

/// Where the agent is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "phase", rename_all = "camelCase")]
pub enum Phase {
    /// Done on the current config; watching the Node and the disk.
    Idle,
    /// Fetching and validating `target`.
    Preparing { target: String },
    /// Asked the coordinator to drain (`request`), waiting for `lastAppliedDrain`.
    Draining { target: String, request: String },
    /// Writing files and units (the apply journal holds the details).
    Applying { target: String },
    /// Running the rebootless actions of the disruption policy.
    Acting { target: String },
    /// Pulling (unless pre-staged) and staging the OS deployment of `target`; files and units
    /// are written, the current config is not saved yet (a crash here redoes the update).
    Staging { target: String },
    /// `target` is on disk and a reboot the agent decided on (a restart interrupted the apply or
    /// the rebootless actions) waits for the drain handshake (`request`): a reboot always drains
    /// first, as in MCO, with the workloads stopped.
    DrainingForReboot { target: String, request: String },
    /// Asked logind to reboot, from the boot with `boot_id`.
    Rebooting { target: String, boot_id: String },
    /// Asked logind to reboot into the staged OS deployment of commit `checksum`, from the boot
    /// with `boot_id`; the next boot verifies it and runs the health checks. `staged` is what was
    /// staged (absent in a phase saved by an older agent).
    RebootingStaged {
        target: String,
        boot_id: String,
        checksum: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        staged: Option<Staged>,
    },
    /// Booted after an OS update: checking the booted commit and kernel arguments, then the
    /// health checks.
    Verifying {
        target: String,
        checksum: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        staged: Option<Staged>,
    },
    /// Health checks failed on commit `checksum` (its deployment `serial`, when known): the
    /// previous deployment is the default and logind was asked (from `boot_id`) to reboot into
    /// it; then Degraded with `reason`.
    RollingBack {
        target: String,
        boot_id: String,
        checksum: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        serial: Option<i32>,
        reason: String,
    },
    /// Asked the coordinator to uncordon (`request`), waiting for the answer. No longer entered
    /// (the uncordon request now goes with the Done report); kept so that a phase saved by an
    /// older agent still loads, and then finishes as Done with the uncordon request.
    Uncordoning { target: String, request: String },
    /// Failed on `target`; retried with backoff.
    Degraded { target: String, reason: String },
    /// `target` cannot be applied to this node; waits for a different desired config.
    Unreconcilable { target: String, reason: String },
}

impl Phase {
    /// MCO's state annotation value.
    pub fn mco_state(&self) -> &'static str {
        match self {
            Phase::Idle => "Done",
            Phase::Degraded { .. } | Phase::RollingBack { .. } => "Degraded",
            Phase::Unreconcilable { .. } => "Unreconcilable",
            _ => "Working",
        }
    }

    pub fn target(&self) -> Option<&str> {
        match self {
            Phase::Idle => None,
            Phase::Preparing { target }
            | Phase::Draining { target, .. }
            | Phase::Applying { target }
            | Phase::Acting { target }
            | Phase::Staging { target }
            | Phase::DrainingForReboot { target, .. }
            | Phase::Rebooting { target, .. }
            | Phase::RebootingStaged { target, .. }
            | Phase::Verifying { target, .. }
            | Phase::RollingBack { target, .. }
            | Phase::Uncordoning { target, .. }
            | Phase::Degraded { target, .. }
            | Phase::Unreconcilable { target, .. } => Some(target),
        }
    }

    pub fn reason(&self) -> &str {
        match self {
            Phase::Degraded { reason, .. }
            | Phase::Unreconcilable { reason, .. }
            | Phase::RollingBack { reason, .. } => reason,
            _ => "",
        }
    }

    /// A short word for status output and metrics.
    pub fn name(&self) -> &'static str {
        match self {
            Phase::Idle => "idle",
            Phase::Preparing { .. } => "preparing",
            Phase::Draining { .. } => "draining",
            Phase::Applying { .. } => "applying",
            Phase::Acting { .. } => "acting",
            Phase::Staging { .. } => "staging",
            Phase::DrainingForReboot { .. } => "draining-for-reboot",
            Phase::Rebooting { .. } => "rebooting",
            Phase::RebootingStaged { .. } => "rebooting-staged",
            Phase::Verifying { .. } => "verifying",
            Phase::RollingBack { .. } => "rolling-back",
            Phase::Uncordoning { .. } => "uncordoning",
            Phase::Degraded { .. } => "degraded",
            Phase::Unreconcilable { .. } => "unreconcilable",
        }
    }
}

fn phase_path(root: &Root) -> PathBuf {
    root.state_dir().join("phase.json")
}

/// The persisted phase; Idle when none was saved.
///
/// A phase this agent cannot read but that names one (`{"phase": "...", ...}`) was written by
/// another version of the agent: a newer one, before an OS rollback booted the deployment with
/// the older agent, or before the agent was downgraded. That is resumed as Idle, deciding again
/// from the Node and the disk as MCO's daemon does at every start, with a WARN naming it:
/// exiting left the node stuck, its unit restarting, on the very path meant to recover it. A
/// file that is not such a record is corrupt, and an error.
pub fn load(root: &Root) -> Result<Phase> {
    match std::fs::read_to_string(phase_path(root)) {
        Ok(s) => match serde_json::from_str(&s) {
            Ok(phase) => Ok(phase),
            Err(e) => match serde_json::from_str::<serde_json::Value>(&s).ok().as_ref().and_then(|v| v.get("phase")) {
                Some(serde_json::Value::String(name)) => {
                    tracing::warn!(path = %phase_path(root).display(), phase = name.as_str(), error = %e,
                        "the saved phase was written by another version of aloft-agent and is not one this one reads; \
                         resuming as idle, deciding again from the Node and the disk");
                    Ok(Phase::Idle)
                }
                _ => Err(e).with_context(|| format!("{} is corrupt", phase_path(root).display())),
            },
        },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Phase::Idle),
        Err(e) => Err(e).with_context(|| format!("reading {}", phase_path(root).display())),
    }
}

/// Persist atomically (temp, fsync, rename, fsync dir) before acting on the phase.
pub fn save(root: &Root, phase: &Phase) -> Result<()> {
    let path = phase_path(root);
    let dir = root.state_dir();
    std::fs::create_dir_all(&dir)?;
    let tmp = dir.join(".phase.json.tmp");
    let mut f = std::fs::File::create(&tmp)?;
    f.write_all(serde_json::to_string_pretty(phase)?.as_bytes())?;
    f.sync_all()?;
    crate::reclaim::hold_path(&path);
    std::fs::rename(&tmp, &path)?;
    std::fs::File::open(&dir)?.sync_all()?;
    Ok(())
}

/// The boot this process runs in: changes across a reboot. Read beneath the root so sandboxed
/// hosts in tests have their own.
pub fn boot_id(root: &Root) -> String {
    let own = root.path().join("proc/sys/kernel/random/boot_id");
    std::fs::read_to_string(&own)
        .or_else(|_| std::fs::read_to_string("/proc/sys/kernel/random/boot_id"))
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A phase another version of the agent wrote resumes as Idle; a file that is no phase record
    /// is an error naming it.
    #[test]
    fn a_phase_of_another_version_resumes_as_idle() {
        let dir = tempfile::tempdir().unwrap();
        let root = Root::new(dir.path());
        std::fs::create_dir_all(root.state_dir()).unwrap();
        for other in [
            r#"{"phase": "somethingNewer", "target": "rendered-worker-2"}"#,
            r#"{"phase": "rebooting", "target": "rendered-worker-2"}"#, // a field it does not write any more
        ] {
            std::fs::write(phase_path(&root), other).unwrap();
            assert_eq!(load(&root).unwrap(), Phase::Idle, "{other}");
        }
        for corrupt in ["{\"phase\": \"rebooting\"", "[1, 2]", "{\"target\": \"x\"}", "{\"phase\": 3}"] {
            std::fs::write(phase_path(&root), corrupt).unwrap();
            let err = format!("{:#}", load(&root).unwrap_err());
            assert!(err.contains("phase.json is corrupt"), "{corrupt}: {err}");
        }
    }

    #[test]
    fn phases_persist_and_map_to_mco_states() {
        let dir = tempfile::tempdir().unwrap();
        let root = Root::new(dir.path());
        assert_eq!(load(&root).unwrap(), Phase::Idle);
        let p = Phase::Rebooting { target: "rendered-worker-2".into(), boot_id: "b1".into() };
        save(&root, &p).unwrap();
        assert_eq!(load(&root).unwrap(), p);
        assert_eq!(p.mco_state(), "Working");
        assert_eq!(Phase::Idle.mco_state(), "Done");
        let u = Phase::Unreconcilable { target: "t".into(), reason: "fips".into() };
        assert_eq!((u.mco_state(), u.reason(), u.target()), ("Unreconcilable", "fips", Some("t")));
        let r = Phase::RollingBack {
            target: "t".into(),
            boot_id: "b".into(),
            checksum: "c".into(),
            serial: Some(1),
            reason: "health check x failed".into(),
        };
        save(&root, &r).unwrap();
        assert_eq!(load(&root).unwrap(), r, "OS phases persist too");
        assert_eq!((r.mco_state(), r.reason()), ("Degraded", "health check x failed"));
        std::fs::write(root.state_dir().join("phase.json"), "{nope").unwrap();
        assert!(load(&root).is_err());
    }

    /// What an OS update staged survives with its phase, so that a staged deployment lost with
    /// its boot can be staged again exactly; a phase saved before this was kept still loads.
    #[test]
    fn the_staged_request_persists_with_the_phase_and_can_be_staged_again() {
        let dir = tempfile::tempdir().unwrap();
        let root = Root::new(dir.path());
        let url = format!("ostree+http://10.0.2.100/repo#aloft/stable/x86_64@{}", "ab".repeat(32));
        let req = aloft_api::os::StageRequest {
            image: aloft_api::osimage::parse(&url).unwrap(),
            old_kargs: vec!["a=1".into()],
            new_kargs: vec!["b=2".into(), "quiet".into()],
        };
        let staged = Staged::of(&req);
        assert_eq!(staged.image.as_deref(), Some(url.as_str()));
        assert_eq!(staged.request().unwrap(), req, "staged again, it is the same request");
        let p = Phase::RebootingStaged {
            target: "t".into(),
            boot_id: "b1".into(),
            checksum: "ab".repeat(32),
            staged: Some(Staged {
                restaged: 1,
                serial: Some(4),
                from: Some(DeploymentId { checksum: "cd".repeat(32), serial: 3 }),
                ..staged.clone()
            }),
        };
        save(&root, &p).unwrap();
        assert_eq!(load(&root).unwrap(), p);
        // A record saved before the deployment staged from was kept still loads, without it.
        let older = r#"{"phase":"rebootingStaged","target":"t","boot_id":"b1","checksum":"c",
            "staged":{"oldKargs":[],"newKargs":["x"],"restaged":0,"serial":2}}"#;
        std::fs::write(root.state_dir().join("phase.json"), older).unwrap();
        match load(&root).unwrap() {
            Phase::RebootingStaged { staged: Some(s), .. } => assert_eq!((s.serial, s.from), (Some(2), None)),
            other => panic!("{other:?}"),
        }
        // A kernel-arguments-only change stages no image.
        let kargs_only = aloft_api::os::StageRequest { image: None, old_kargs: vec![], new_kargs: vec!["x".into()] };
        assert_eq!(Staged::of(&kargs_only).request().unwrap(), kargs_only);
        // A phase file from an agent that did not keep the request.
        std::fs::write(root.state_dir().join("phase.json"), r#"{"phase":"verifying","target":"t","checksum":"c"}"#)
            .unwrap();
        assert_eq!(load(&root).unwrap(), Phase::Verifying { target: "t".into(), checksum: "c".into(), staged: None });
        // A recorded image that no longer parses is an error to report, not a panic.
        let bad = Staged { image: Some("http://not-ostree".into()), ..staged };
        assert!(bad.request().is_err());
    }
}
