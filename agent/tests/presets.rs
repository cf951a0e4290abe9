//! Unit presets during an apply and its rollback, against the test systemd on a private bus (it
//! refuses a preset of a unit file that does not exist, or of a masked unit, as systemd does):
//! as in MCO, a preset that systemd refuses is logged and skipped; it never fails an update or
//! blocks its rollback. Likewise (MCO since OCPBUGS-70259), enabling or disabling a unit the
//! config gives no contents for and the host does not have is skipped with a warning.

use aloft_agent::apply::{self, ApplyError};
use aloft_agent::host::Root;
use aloft_agent::journal::{Journal, Phase};
use aloft_agent::systemd::SystemdDbus;
use aloft_agent::testing::{FakeSystemd, TestBus};
use aloft_api::MachineConfigSpec;
use serde_json::{json, Value};
use std::path::Path;

struct Host {
    dir: tempfile::TempDir,
    root: Root,
    journal: Journal,
    fake: FakeSystemd,
    services: SystemdDbus,
    _bus: TestBus,
}

async fn host() -> Host {
    let dir = tempfile::tempdir().unwrap();
    for d in ["etc/systemd/system", "usr/lib/systemd/system", "var/lib"] {
        std::fs::create_dir_all(dir.path().join(d)).unwrap();
    }
    std::fs::write(dir.path().join("etc/passwd"), "root:x:0:0:root:/root:/bin/bash\n").unwrap();
    std::fs::write(dir.path().join("etc/group"), "root:x:0:\n").unwrap();
    let bus = TestBus::start().expect("dbus-daemon");
    let fake = FakeSystemd::serve(&bus, dir.path()).await.expect("test systemd");
    let services = SystemdDbus::connect(bus.address()).await.expect("client");
    let root = Root::new(dir.path());
    let journal = Journal::new(&root);
    Host { dir, root, journal, fake, services, _bus: bus }
}

fn spec(units: Value) -> MachineConfigSpec {
    MachineConfigSpec {
        config: json!({"ignition": {"version": "3.4.0"}, "systemd": {"units": units}}),
        ..Default::default()
    }
}

fn exists(root: &Path, rel: &str) -> bool {
    std::fs::symlink_metadata(root.join(rel)).is_ok()
}

const DROPIN: &str = "etc/systemd/system/notinstalled.service.d/10-x.conf";

fn dropin_config() -> MachineConfigSpec {
    spec(json!([{"name": "notinstalled.service",
                 "dropins": [{"name": "10-x.conf", "contents": "[Service]\nEnvironment=X=1\n"}]}]))
}

/// A drop-in for a unit the host does not ship is written (its preset is refused: no such unit)
/// and, when the config goes, removed.
#[tokio::test]
async fn a_dropin_for_a_unit_the_host_lacks_is_applied_and_removed() {
    let h = host().await;
    let empty = MachineConfigSpec::default();
    apply::apply(&h.root, &h.journal, &empty, &dropin_config(), &h.services).await.expect("applied");
    assert!(exists(h.dir.path(), DROPIN));
    assert!(h.fake.call_strings().iter().any(|c| c.contains("PresetUnitFiles")), "{:?}", h.fake.call_strings());

    apply::apply(&h.root, &h.journal, &dropin_config(), &empty, &h.services).await.expect("removed");
    assert!(!exists(h.dir.path(), DROPIN));
}

/// An update that fails after writing such a drop-in rolls back fully: the rollback's preset of
/// the added unit is refused and skipped, the drop-in goes, and the journal says RolledBack.
#[tokio::test]
async fn a_refused_preset_does_not_block_the_rollback() {
    let h = host().await;
    let base = spec(json!([]));
    let new = spec(json!([
        {"name": "notinstalled.service", "dropins": [{"name": "10-x.conf", "contents": "[Service]\nEnvironment=X=1\n"}]},
        {"name": "a.service", "enabled": true, "contents": "[Service]\nExecStart=/bin/true\n[Install]\nWantedBy=multi-user.target\n"}
    ]));
    h.fake.fail_calls("EnableUnitFiles", Some("a.service"));
    let err = apply::apply(&h.root, &h.journal, &base, &new, &h.services).await.unwrap_err();
    assert!(matches!(err, ApplyError::RolledBack { .. }), "{err}");
    assert!(matches!(h.journal.load().unwrap().unwrap().phase, Phase::RolledBack { .. }));
    assert!(!exists(h.dir.path(), DROPIN));
    assert!(!exists(h.dir.path(), "etc/systemd/system/a.service"));
}

/// A MachineConfig that masks a unit can be removed: the mask link goes first, then the unit
/// is reset to its preset (the test systemd's preset enables it), instead of a preset refused
/// because the unit was still masked.
#[tokio::test]
async fn removing_a_mask_unmasks_then_presets_the_unit() {
    let h = host().await;
    let r = h.dir.path();
    std::fs::write(
        r.join("usr/lib/systemd/system/m.service"),
        "[Service]\nExecStart=/bin/true\n[Install]\nWantedBy=multi-user.target\n",
    )
    .unwrap();
    let empty = MachineConfigSpec::default();
    let masked = spec(json!([{"name": "m.service", "mask": true}]));
    apply::apply(&h.root, &h.journal, &empty, &masked, &h.services).await.expect("masked");
    assert_eq!(std::fs::read_link(r.join("etc/systemd/system/m.service")).unwrap(), Path::new("/dev/null"));

    h.fake.clear_calls();
    apply::apply(&h.root, &h.journal, &masked, &empty, &h.services).await.expect("mask removed");
    assert!(!exists(r, "etc/systemd/system/m.service"), "the mask link stayed");
    assert!(
        exists(r, "etc/systemd/system/multi-user.target.wants/m.service"),
        "m.service was not reset to its preset: {:?}",
        h.fake.call_strings()
    );
}

/// `enabled: true` / `false` with no contents names a unit the OS should ship. One the host
/// lacks is skipped with a warning (systemd would refuse the whole batch: "Unit file ... does not
/// exist"), the shipped one in the same config is enabled, the on-disk check passes, and going
/// back to no config skips it again.
#[tokio::test]
async fn enabling_a_unit_the_host_lacks_is_skipped_with_a_warning() {
    let h = host().await;
    let r = h.dir.path();
    std::fs::write(
        r.join("usr/lib/systemd/system/shipped.service"),
        "[Service]\nExecStart=/bin/true\n[Install]\nWantedBy=multi-user.target\n",
    )
    .unwrap();
    let empty = MachineConfigSpec::default();
    let new = spec(json!([
        {"name": "notinstalled.service", "enabled": true},
        {"name": "gone.service", "enabled": false},
        {"name": "shipped.service", "enabled": true}
    ]));
    let report = apply::apply(&h.root, &h.journal, &empty, &new, &h.services).await.expect("applied");
    let calls = h.fake.call_strings();
    assert!(exists(r, "etc/systemd/system/multi-user.target.wants/shipped.service"), "{calls:?}");
    assert!(!calls.iter().any(|c| c.contains("notinstalled.service") || c.contains("gone.service")), "{calls:?}");
    assert_eq!(
        report.warnings,
        [
            "unit \"notinstalled.service\" is not installed on this host: skipped enabling it",
            "unit \"gone.service\" is not installed on this host: skipped disabling it"
        ]
    );
    aloft_agent::ondisk::verify(&h.root, &new).expect("nothing to verify for the skipped units");
    // The shipped unit's enablement is still verified.
    std::fs::remove_file(r.join("etc/systemd/system/multi-user.target.wants/shipped.service")).unwrap();
    let drift = aloft_agent::ondisk::verify(&h.root, &new).expect_err("disabled by hand").to_string();
    assert!(drift.contains("\"shipped.service\" is not enabled"), "{drift}");

    apply::apply(&h.root, &h.journal, &new, &empty, &h.services).await.expect("config removed");
}
