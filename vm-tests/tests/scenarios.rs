//! The whole system on real VMs: the coordinator on the host, nodes booted from images/ under
//! QEMU, each running the real aloft-agent of the image.
//!
//!     cargo test -p aloft-vm-tests -- --test-threads=1
//!
//! Each scenario starts its own coordinator and VMs; run them one at a time (each VM is a TCG
//! process that wants a core). README.md lists how long each takes.

use aloft_api::annotations as ann;
use aloft_vm_tests::cluster::{self, file, machine_config, wait_converged, worker_pool, Sampler};
use aloft_vm_tests::vm::UP_WAIT;
use aloft_vm_tests::{Fleet, FleetOptions, Vm};
use anyhow::{ensure, Context, Result};
use serde_json::json;
use std::time::{Duration, Instant};

const BOOT: Duration = Duration::from_secs(900);
const ROLLOUT_REBOOTLESS: Duration = Duration::from_secs(600);
const OS_ROLLOUT_PER_NODE: Duration = Duration::from_secs(1200);
/// The unit the rebootless scenario restarts through the node disruption policy.
const UNIT: &str = "aloft-vmtest.service";
const UNIT_FILE: &str = "[Unit]\nDescription=aloft vm-tests unit (restarted by the disruption policy)\n\
    [Service]\nExecStart=/bin/sleep infinity\n[Install]\nWantedBy=multi-user.target\n";
const KARG: &str = "aloft.vmtest=os-v2";
/// A file of the first config outside /etc: the agent's unit must let it write /var.
const VAR_FILE: &str = "/var/lib/aloft-vmtest/state.conf";
/// Masked and stopped by scenario e so that the agent's reboot request is refused.
const LOGIND: &str = "systemd-logind.service";
/// Scenario e's delay inhibitor (a transient service holding `systemd-inhibit --mode=delay`):
/// logind takes the agent's reboot request and waits for it to let go.
const INHIBITOR: &str = "aloft-vmtest-inhibit";
/// The agent's `--reboot-timeout-seconds` while scenario e holds a reboot (900 s by default).
const REBOOT_OVERDUE_AFTER_S: u64 = 20;

/// Boot the fleet, enroll the nodes, and render a first (rebootless) config so every node is
/// Done on something before the scenario's change; returns (boot ids, that config).
async fn enrolled_and_done(
    fleet: &Fleet,
    max_unavailable: i64,
    pool_extra: serde_json::Value,
) -> Result<(Vec<String>, String)> {
    let boot_ids = fleet.wait_ready(BOOT).await?;
    cluster::wait_enrolled(fleet, fleet.vms.len(), Duration::from_secs(300)).await?;
    // Files under /etc/aloft-vmtest need nothing (no reboot, no restart).
    cluster::apply(
        fleet,
        "/apis/operator.openshift.io/v1/machineconfigurations",
        &json!({"apiVersion": "operator.openshift.io/v1", "kind": "MachineConfiguration",
                "metadata": {"name": "cluster"},
                "spec": {"nodeDisruptionPolicy": {
                    "files": [{"path": "/etc/aloft-vmtest/none.conf", "actions": [{"type": "None"}]},
                              {"path": VAR_FILE, "actions": [{"type": "None"}]},
                              {"path": "/etc/aloft-vmtest/restart.conf",
                               "actions": [{"type": "Restart", "restart": {"serviceName": UNIT}}]}],
                    "units": [{"name": UNIT, "actions": [{"type": "DaemonReload"},
                                                          {"type": "Restart", "restart": {"serviceName": UNIT}}]}]}}}),
    )
    .await?;
    worker_pool(fleet, max_unavailable, pool_extra).await?;
    machine_config(
        fleet,
        "50-worker-vmtest",
        json!({"config": {
            "storage": {"files": [file("/etc/aloft-vmtest/none.conf", "none 1\n"),
                                  file("/etc/aloft-vmtest/restart.conf", "restart 1\n"),
                                  file(VAR_FILE, "var 1\n")]},
            "systemd": {"units": [{"name": UNIT, "enabled": true, "contents": UNIT_FILE}]}}}),
    )
    .await?;
    let first = wait_converged(fleet, "", ROLLOUT_REBOOTLESS).await.context("the first config")?;
    Ok((boot_ids, first))
}

/// Every VM still on its first boot, with the boot id it came up with.
async fn no_reboot(fleet: &Fleet, boot_ids: &[String]) -> Result<()> {
    for (vm, boot_id) in fleet.vms.iter().zip(boot_ids) {
        ensure!(vm.reboots() == 0 && vm.status().boot == 1, "{} rebooted: {:?}", vm.name, vm.boots());
        let now = vm.sh("cat /proc/sys/kernel/random/boot_id").await?;
        ensure!(now.trim() == boot_id, "{}: boot id {} is not the first boot's {boot_id}", vm.name, now.trim());
    }
    Ok(())
}

// ---------------------------------------------------------------- a: rebootless

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_rebootless_change_reaches_every_node() -> Result<()> {
    let Some(fleet) = Fleet::start("a_rebootless", FleetOptions { vms: 3, ..Default::default() }).await? else {
        return Ok(());
    };
    let result = rebootless(&fleet).await;
    fleet.finish(result).await
}

async fn rebootless(fleet: &Fleet) -> Result<()> {
    let (boot_ids, first) = enrolled_and_done(fleet, 1, json!({})).await?;
    let pool = fleet
        .admin
        .get(&aloft_tests::path_of(&aloft_tests::MACHINE_CONFIG_POOL, Some("worker")))
        .await?
        .into_result()?;
    ensure!(
        pool.pointer("/status/machineCount") == Some(&json!(3)),
        "the pool counts the three VMs: {}",
        pool["status"]
    );
    let mut before = Vec::new();
    for vm in &fleet.vms {
        let files =
            vm.sh(&format!("cat /etc/aloft-vmtest/none.conf /etc/aloft-vmtest/restart.conf {VAR_FILE}")).await?;
        ensure!(files == "none 1\nrestart 1\nvar 1\n", "{}: files of the first config: {files:?}", vm.name);
        before.push(cluster::unit_invocation(vm, UNIT).await?);
    }

    // A file whose policy is None: written, nothing restarted.
    let config = |none: &str, restart: &str| {
        json!({"config": {
            "storage": {"files": [file("/etc/aloft-vmtest/none.conf", none), file("/etc/aloft-vmtest/restart.conf", restart),
                                  file(VAR_FILE, "var 1\n")]},
            "systemd": {"units": [{"name": UNIT, "enabled": true, "contents": UNIT_FILE}]}}})
    };
    machine_config(fleet, "50-worker-vmtest", config("none 2\n", "restart 1\n")).await?;
    let second = wait_converged(fleet, &first, ROLLOUT_REBOOTLESS).await.context("the None-policy change")?;
    for (vm, b) in fleet.vms.iter().zip(&before) {
        let files = vm.sh("cat /etc/aloft-vmtest/none.conf").await?;
        ensure!(files == "none 2\n", "{}: none.conf {files:?}", vm.name);
        let now = cluster::unit_invocation(vm, UNIT).await?;
        ensure!(&now == b, "{}: {UNIT} was restarted by a None-policy change: {b:?} -> {now:?}", vm.name);
    }

    // A file whose policy restarts the unit.
    machine_config(fleet, "50-worker-vmtest", config("none 2\n", "restart 2\n")).await?;
    let third = wait_converged(fleet, &second, ROLLOUT_REBOOTLESS).await.context("the Restart-policy change")?;
    for (vm, b) in fleet.vms.iter().zip(&before) {
        let files = vm.sh("cat /etc/aloft-vmtest/restart.conf").await?;
        ensure!(files == "restart 2\n", "{}: restart.conf {files:?}", vm.name);
        let now = cluster::unit_invocation(vm, UNIT).await?;
        ensure!(now.0 != b.0 && now.1 != b.1, "{}: {UNIT} was not restarted: {b:?} -> {now:?}", vm.name);
    }
    read_only_file_refused(fleet, &third).await?;
    drift_repaired_by_the_force_file(fleet).await?;
    no_reboot(fleet, &boot_ids).await?;
    for n in fleet.nodes().await? {
        ensure!(!cluster::is_cordoned(&n), "{} left cordoned", cluster::name(&n));
    }
    Ok(())
}

// ---------------------------------------------------------------- b: OS update v1 -> v2

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn b_os_update_one_node_at_a_time() -> Result<()> {
    os_update_scenario("b_os_update", true).await
}

/// The same rollout with pre-staging turned off (`spec.rollout.prestage: false`): only for the
/// unavailable-window comparison in BENCHMARKS.md.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "benchmark: run with --ignored to compare with b_os_update_one_node_at_a_time"]
async fn b_os_update_without_prestage() -> Result<()> {
    os_update_scenario("b_os_update_no_prestage", false).await
}

async fn os_update_scenario(test: &str, prestage: bool) -> Result<()> {
    let Some(fleet) = Fleet::start(test, FleetOptions { vms: 3, ..Default::default() }).await? else {
        return Ok(());
    };
    let result = os_update(&fleet, prestage).await;
    fleet.finish(result).await
}

async fn os_update(fleet: &Fleet, prestage: bool) -> Result<()> {
    let (_, first) = enrolled_and_done(fleet, 1, json!({"rollout": {"prestage": prestage}})).await?;
    let v2 = fleet.images.commit("v2")?.to_string();
    let sampler = Sampler::start(fleet);
    let started = Instant::now();
    machine_config(
        fleet,
        "60-worker-os",
        json!({"osImageURL": fleet.images.os_image_url("v2")?, "kernelArguments": [KARG]}),
    )
    .await?;
    // 1,200 s for the three nodes (153-274 s measured): a VM that hangs after its ready line is
    // not seen by the harness, and a longer wait would outlast CI's 90 minutes, report and all.
    let converged = wait_converged(fleet, &first, OS_ROLLOUT_PER_NODE).await.context("the OS rollout");
    let (samples, errors) = sampler.stop();
    let target = converged?;
    let rollout = started.elapsed();

    // Never two nodes down at once (maxUnavailable 1), and the sampling saw every node go down.
    let (max_cordoned, max_unavailable) = cluster::max_concurrent(&samples);
    tracing::info!(samples = samples.len(), errors, max_cordoned, max_unavailable, "budget over the rollout");
    ensure!(samples.len() > 60, "too few samples of the Nodes ({}, {errors} failed)", samples.len());
    ensure!(max_cordoned <= 1, "{max_cordoned} nodes were cordoned at once");
    ensure!(
        max_unavailable <= 1,
        "{max_unavailable} nodes were unavailable at once:{}",
        cluster::first_over_budget(&samples, 1)
    );
    let windows = cluster::windows(&samples);
    let mut report = Vec::new();
    for vm in &fleet.vms {
        let (cordoned, unavailable) = windows.get(&vm.name).cloned().unwrap_or((None, None));
        ensure!(cordoned.is_some(), "{} was never seen cordoned: it cannot have been drained for its reboot", vm.name);
        report.push(format!(
            "{}: cordoned {:.0} s, unavailable {:.0} s",
            vm.name,
            cordoned.map_or(0.0, |d| d.as_secs_f64()),
            unavailable.map_or(0.0, |d| d.as_secs_f64())
        ));
    }
    let prestaged: Vec<&String> = fleet
        .vms
        .iter()
        .map(|vm| &vm.name)
        .filter(|n| samples.iter().any(|s| s.nodes.get(*n).is_some_and(|x| x.prestaged == target)))
        .collect();
    let asked: Vec<&String> = fleet
        .vms
        .iter()
        .map(|vm| &vm.name)
        .filter(|n| samples.iter().any(|s| s.nodes.get(*n).is_some_and(|x| x.prestage == target)))
        .collect();
    if prestage {
        ensure!(prestaged.len() >= 2, "the nodes waiting for their turn pre-staged {target}: only {prestaged:?}");
    } else {
        ensure!(asked.is_empty(), "pre-staging is off in the pool, yet {asked:?} were asked to pre-stage");
    }
    tracing::info!(
        "BENCH os rollout v1->v2, 3 VMs, maxUnavailable 1, prestage {prestage}: {:.0} s; {}; pre-staged: {prestaged:?}",
        rollout.as_secs_f64(),
        report.join("; ")
    );
    std::fs::write(
        fleet.dir.join("windows.txt"),
        format!("prestage {prestage}\nrollout {:.0} s\n{}\n", rollout.as_secs_f64(), report.join("\n")),
    )?;

    for vm in &fleet.vms {
        ensure!(vm.reboots() == 1, "{} rebooted {} times, not once: {:?}", vm.name, vm.reboots(), vm.boots());
        let (_, _, release) = vm.wait_ready(2, UP_WAIT).await?;
        ensure!(release == "2", "{}: ALOFT-READY says release {release}", vm.name);
        os_is(vm, "2", &v2).await?;
        let cmdline = vm.sh("cat /proc/cmdline").await?;
        ensure!(cmdline.split_whitespace().any(|a| a == KARG), "{}: {KARG} not on /proc/cmdline: {cmdline}", vm.name);
        // Finalized at shutdown by the unit the OS helper started right after staging: the images
        // mask ostree 2022.7's path unit, which a reboot soon after the staging can outrun (the
        // one reboot above shows the staged deployment was not lost).
        let masked = vm.sh("systemctl is-enabled ostree-finalize-staged.path || true").await?;
        ensure!(masked.trim() == "masked", "{}: ostree-finalize-staged.path is {masked:?}, not masked", vm.name);
        // The remote the OS shipped verified its summary; the helper's reconfiguration (its
        // keyring) kept that, rather than turning it off for good.
        let remote = vm.sh("cat /etc/ostree/remotes.d/aloft.conf").await?;
        ensure!(
            remote.lines().any(|l| l.trim() == "gpg-verify-summary=true"),
            "{}: the node's remote no longer verifies its summary:\n{remote}",
            vm.name
        );
        // v2's health check sees the host's disk: it ran as a transient unit of systemd, not in
        // the agent's sandbox (a private /dev), and its output is where an admin looks for it.
        let check = vm.sh("cat /run/aloft/health/40-disk-visible.log").await?;
        ensure!(
            check.contains("aloft health: disk /dev/vda visible"),
            "{}: v2's health check did not see the disk: {check:?}",
            vm.name
        );
        let started = vm.sh("journalctl -u aloft-os-helper -o cat | grep -cF 'finalizing unit runs' || true").await?;
        ensure!(
            started.trim().parse::<u32>().unwrap_or(0) >= 1,
            "{}: the OS helper never said it started ostree-finalize-staged.service ({started:?})",
            vm.name
        );
    }
    // Each Node says which OS image and kernel it runs, as of its boot into v2.
    let nodes = fleet.nodes().await?;
    for vm in &fleet.vms {
        let node =
            nodes.iter().find(|n| cluster::name(n) == vm.name).with_context(|| format!("no Node {}", vm.name))?;
        let info = &node["status"]["nodeInfo"];
        let facts =
            vm.sh(". /etc/os-release; echo \"$PRETTY_NAME\"; uname -r; cat /proc/sys/kernel/random/boot_id").await?;
        let facts: Vec<&str> = facts.lines().map(str::trim).collect();
        let reported = [&info["osImage"], &info["kernelVersion"], &info["bootID"]].map(|v| v.as_str().unwrap_or(""));
        ensure!(
            facts.get(..3) == Some(&reported[..]),
            "{}: status.nodeInfo {info} is not the boot's {facts:?}",
            vm.name
        );
    }
    Ok(())
}

/// The guest booted `checksum` (ostree admin status) and runs release `release`.
async fn os_is(vm: &Vm, release: &str, checksum: &str) -> Result<()> {
    let out = vm
        .sh("cat /usr/lib/aloft/release; test -e /usr/share/aloft/v2-marker && echo v2-marker; ostree admin status")
        .await?;
    ensure!(out.lines().next() == Some(release), "{}: /usr/lib/aloft/release is not {release}:\n{out}", vm.name);
    ensure!(
        out.lines().any(|l| l.starts_with("* ") && l.contains(checksum)),
        "{}: the booted deployment is not {checksum}:\n{out}",
        vm.name
    );
    if release == "2" {
        ensure!(out.lines().any(|l| l == "v2-marker"), "{}: /usr/share/aloft/v2-marker missing", vm.name);
    }
    Ok(())
}

// ---------------------------------------------------------------- c: a bad OS rolls back

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn c_bad_os_rolls_back_and_stops_the_rollout() -> Result<()> {
    let Some(fleet) = Fleet::start("c_bad_os", FleetOptions { vms: 2, ..Default::default() }).await? else {
        return Ok(());
    };
    let result = bad_os(&fleet).await;
    fleet.finish(result).await
}

async fn bad_os(fleet: &Fleet) -> Result<()> {
    // Both nodes on v2 first (in parallel: maxUnavailable 2).
    let (_, first) = enrolled_and_done(fleet, 2, json!({})).await?;
    let (v2, v3) = (fleet.images.commit("v2")?.to_string(), fleet.images.commit("v3")?.to_string());
    machine_config(fleet, "60-worker-os", json!({"osImageURL": fleet.images.os_image_url("v2")?})).await?;
    let on_v2 = wait_converged(fleet, &first, OS_ROLLOUT_PER_NODE * 2).await.context("v1 -> v2")?;
    for vm in &fleet.vms {
        os_is(vm, "2", &v2).await?;
    }
    // Boot numbers, not boot records: a boot the harness retried after a hang has two records.
    let boots_before: Vec<u32> = fleet.vms.iter().map(|vm| vm.status().boot).collect();

    // v3 fails its health check: one node at a time.
    worker_pool(fleet, 1, json!({})).await?;
    machine_config(fleet, "60-worker-os", json!({"osImageURL": fleet.images.os_image_url("v3")?})).await?;
    let deadline = Instant::now() + OS_ROLLOUT_PER_NODE;
    let (bad, reason) = loop {
        let nodes = fleet.nodes().await?;
        if let Some(n) = nodes.iter().find(|n| cluster::annotation(n, ann::STATE) == "Degraded") {
            break (cluster::name(n).to_string(), cluster::annotation(n, ann::REASON).to_string());
        }
        ensure!(Instant::now() < deadline, "no node went Degraded on v3 within {OS_ROLLOUT_PER_NODE:?}");
        tokio::time::sleep(Duration::from_secs(2)).await;
    };
    tracing::info!(node = %bad, %reason, "Degraded on v3");
    ensure!(
        reason.contains("intentional failure in v3"),
        "{bad}: the Degraded reason carries the health check's output: {reason:?}"
    );
    let vm = fleet.vm(&bad)?;
    let i = fleet.vms.iter().position(|v| v.name == bad).expect("the VM of the node");
    // v3 booted once, failed, and the node went back to v2 by itself: two more boots.
    let (boot, _, release) = vm.wait_ready(boots_before[i] + 2, Duration::from_secs(900)).await?;
    ensure!(release == "2", "{bad}: back on release 2 after the rollback, got {release} (boot {boot})");
    os_is(vm, "2", &v2).await?;
    // v3 keeps v2's release file: that v3 was booted and checked is the agent's own account
    // (it ran the health check on the booted v3 and rolled back from it). Until the reboot into
    // v2 the reason says the rollback is under way; once the agent runs on v2, that it is done.
    ensure!(
        reason.contains(&format!("rolling back from OS commit {v3} to {v2}"))
            || reason.contains(&format!("rolled back from OS commit {v3} to {v2}")),
        "{bad}: the reason names the rollback from v3 to v2: {reason:?}"
    );
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        let node = fleet.nodes().await?.into_iter().find(|n| cluster::name(n) == bad).context("the node")?;
        let (state, reason) = (cluster::annotation(&node, ann::STATE), cluster::annotation(&node, ann::REASON));
        if state == "Degraded" && reason.contains(&format!("rolled back from OS commit {v3} to {v2}")) {
            ensure!(reason.contains("intentional failure in v3") && !reason.contains("rolling back"), "{reason:?}");
            break;
        }
        ensure!(
            Instant::now() < deadline,
            "{bad}: back on v2, but not Degraded for the rollback done: {state} {reason:?}"
        );
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    let denylist = vm.sh("cat /var/lib/aloft/os-denylist.json").await?;
    ensure!(denylist.contains(&v3), "{bad}: v3 is not on the node's OS denylist: {denylist}");

    // The rollout stops: the other node is not asked to take v3 (watched for three minutes).
    let watch_until = Instant::now() + Duration::from_secs(180);
    while Instant::now() < watch_until {
        for n in fleet.nodes().await? {
            if cluster::name(&n) != bad {
                ensure!(
                    cluster::annotation(&n, ann::DESIRED_CONFIG) == on_v2,
                    "{} was moved on while {bad} is Degraded on v3: desired {}",
                    cluster::name(&n),
                    cluster::annotation(&n, ann::DESIRED_CONFIG)
                );
            }
        }
        tokio::time::sleep(Duration::from_secs(5)).await;
    }
    for (j, other) in fleet.vms.iter().enumerate() {
        if j != i {
            ensure!(other.status().boot == boots_before[j], "{} booted again: {:?}", other.name, other.boots());
            os_is(other, "2", &v2).await?;
        }
    }
    let node = fleet.nodes().await?.into_iter().find(|n| cluster::name(n) == bad).expect("node");
    ensure!(cluster::annotation(&node, ann::STATE) == "Degraded", "{bad} still reports Degraded");
    Ok(())
}

// ---------------------------------------------------------------- d: power cut mid-update

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn d_power_cut_during_os_update() -> Result<()> {
    let opts = FleetOptions { vms: 1, durable_disk: true, ..Default::default() };
    let Some(fleet) = Fleet::start("d_power_cut", opts).await? else {
        return Ok(());
    };
    let result = power_cut(&fleet).await;
    fleet.finish(result).await
}

/// Cut the power, power on, and wait for the next boot to be ready: (boot, boot id, release).
async fn power_cycle(vm: &Vm, what: &str) -> Result<(u32, String, String)> {
    vm.power_cut().await?;
    let cut_at = vm.status().boot;
    vm.power_on().await?;
    vm.wait_ready(cut_at + 1, BOOT).await.with_context(|| format!("booting after {what}"))
}

/// What the held shutdown prints on the serial console (see [`power_cut`]).
const HELD_AFTER_FINALIZE: &str = "ALOFT-VMTEST-HELD-AFTER-FINALIZE";

/// Two power cuts in OS updates, v1 -> v2 and back to v1.
///
/// 1. Unheld, as a power failure comes: as soon as v2 is staged, while the agent goes on to save
///    its phase and ask for the reboot (or, if the guest is already going down when the test
///    looks, right then). The VM boots v1 or v2 and the agent converges on v2.
/// 2. Held at the worst moment for a bootloader that reads the disk without replaying the file
///    system's journal, as GRUB and this harness's bootloader do: in the shutdown into v1, right
///    after ostree finalized it (swapped `/boot/loader`, deleted the old `/ostree/boot.N` links)
///    and aloft-boot-sync checkpointed /boot's journal. A test drop-in holds the shutdown there.
///    The VM must boot the new entry, v1.
///
/// Then, without a cut, an update to v2 whose finalizing unit cannot be started (masked for
/// this boot): the staging fails, the OS helper drops the staged deployment (a later start of
/// the unit would otherwise finalize an update the agent undid and reported as failed), the node
/// is Degraded saying why and does not reboot; unmasked, the agent's retry goes through.
///
/// Held cuts before finalizing are scenario f's.
async fn power_cut(fleet: &Fleet) -> Result<()> {
    let (_, first) = enrolled_and_done(fleet, 1, json!({})).await?;
    let (v1, v2) = (fleet.images.commit("v1")?.to_string(), fleet.images.commit("v2")?.to_string());
    let vm = &fleet.vms[0];

    // (1) Unheld.
    machine_config(
        fleet,
        "60-worker-os",
        json!({"osImageURL": fleet.images.os_image_url("v2")?, "kernelArguments": [KARG]}),
    )
    .await?;
    let deadline = Instant::now() + OS_ROLLOUT_PER_NODE;
    let moment = loop {
        ensure!(Instant::now() < deadline, "the agent never staged v2");
        match vm.exec_timeout("test -e /run/ostree/staged-deployment && echo staged", Duration::from_secs(30)).await {
            Ok(o) if o.out.trim() == "staged" => break "v2 staged, before the reboot",
            Ok(_) => tokio::time::sleep(Duration::from_millis(500)).await,
            Err(e) => {
                // The channel closes as the guest goes down for its reboot, a moment before
                // QEMU exits: give the supervisor time to see it. A guest still up after that
                // was too busy to answer (staging, or a slow shutdown with the command service
                // stopped): asked again, until the deadline.
                let down = vm
                    .wait_for("down for the reboot", Duration::from_secs(30), |s| {
                        s.boot > 1 || !matches!(s.phase, aloft_vm_tests::Phase::Ready { .. })
                    })
                    .await;
                if down.is_err() {
                    tracing::warn!(error = %format!("{e:#}"), "no answer, and the VM is still up: asking again");
                    continue;
                }
                break "during the reboot into v2";
            }
        }
    };
    tracing::info!(moment, "power cut");
    let (boot, _, release) = power_cycle(vm, "the power cut").await?;
    ensure!(release == "1" || release == "2", "after the power cut the VM booted release {release}");
    tracing::info!(boot, %release, moment, "booted after the power cut");
    let on_v2 = wait_converged(fleet, &first, OS_ROLLOUT_PER_NODE).await.context("converging after the power cut")?;
    let (boot, _, release) = vm.wait_ready(boot, UP_WAIT).await?;
    ensure!(release == "2", "converged on {on_v2} but running release {release}");
    os_is(vm, "2", &v2).await?;
    let cmdline = vm.sh("cat /proc/cmdline").await?;
    ensure!(cmdline.split_whitespace().any(|a| a == KARG), "{KARG} not on /proc/cmdline: {cmdline}");

    // (2) Held right after finalizing. The drop-in is in /run: gone with the boot it holds.
    vm.sh(&format!(
        "mkdir -p /run/systemd/system/aloft-boot-sync.service.d && \
         printf '%s\\n' '[Service]' \"ExecStop=/bin/sh -c 'echo {HELD_AFTER_FINALIZE} >/dev/console; exec sleep 900'\" \
           'TimeoutStopSec=infinity' > /run/systemd/system/aloft-boot-sync.service.d/50-vmtest-hold.conf && \
         systemctl daemon-reload && systemctl show -p ExecStop aloft-boot-sync.service"
    ))
    .await
    .and_then(|units| {
        ensure!(units.contains(HELD_AFTER_FINALIZE), "the hold drop-in is not in aloft-boot-sync.service: {units}");
        Ok(())
    })?;
    machine_config(
        fleet,
        "60-worker-os",
        json!({"osImageURL": fleet.images.os_image_url("v1")?, "kernelArguments": [KARG]}),
    )
    .await?;
    vm.wait_serial(boot, HELD_AFTER_FINALIZE, OS_ROLLOUT_PER_NODE)
        .await
        .context("waiting for the shutdown into v1 to finalize it")?;
    tracing::info!("power cut: v1 finalized, /boot checkpointed, the shutdown held");
    let (boot, _, release) = power_cycle(vm, "the power cut after finalizing").await?;
    ensure!(release == "1", "after the power cut that followed finalizing v1, the VM booted release {release}");
    let back = wait_converged(fleet, &on_v2, OS_ROLLOUT_PER_NODE).await.context("converging after the second cut")?;
    let (_, _, release) = vm.wait_ready(boot, UP_WAIT).await?;
    ensure!(release == "1", "converged on {back} but running release {release}");
    os_is(vm, "1", &v1).await?;

    // (3) The finalizing unit masked for this boot (`--runtime`: nothing of it reaches a
    // deployment's /etc).
    const FINALIZE: &str = "ostree-finalize-staged.service";
    vm.sh(&format!("systemctl mask --runtime {FINALIZE} && systemctl daemon-reload")).await?;
    let boots = vm.status().boot;
    machine_config(
        fleet,
        "60-worker-os",
        json!({"osImageURL": fleet.images.os_image_url("v2")?, "kernelArguments": [KARG]}),
    )
    .await?;
    let node = wait_node(fleet, "Degraded for the masked finalizing unit", OS_ROLLOUT_PER_NODE, |n| {
        cluster::annotation(n, ann::STATE) == "Degraded" && cluster::annotation(n, ann::REASON).contains(FINALIZE)
    })
    .await?;
    tracing::info!(reason = cluster::annotation(&node, ann::REASON), "Degraded: the finalizing unit cannot start");
    // The agent retries with backoff, staging for a moment each time: without the drop the
    // deployment stays staged between the tries.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let staged = vm.sh("test -e /run/ostree/staged-deployment && echo staged || echo none").await?;
        if staged.trim() == "none" {
            break;
        }
        ensure!(Instant::now() < deadline, "the failed staging left the deployment staged:\n{}", {
            vm.sh("ostree admin status").await?
        });
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    ensure!(vm.status().boot == boots, "the node rebooted although its staging failed");
    let dropped =
        vm.sh("journalctl -b -u aloft-os-helper -o cat | grep -cF 'dropped the staged deployment' || true").await?;
    ensure!(dropped.trim() != "0", "the OS helper never said it dropped a staged deployment");
    vm.sh(&format!("systemctl unmask --runtime {FINALIZE} && systemctl daemon-reload")).await?;
    let on_v2 =
        wait_converged(fleet, &back, OS_ROLLOUT_PER_NODE).await.context("converging once the unit can start")?;
    let (_, _, release) = vm.wait_ready(boots + 1, UP_WAIT).await?;
    ensure!(release == "2", "converged on {on_v2} but running release {release}");
    os_is(vm, "2", &v2).await?;
    Ok(())
}

// ---------------------------------------------------------------- f: power cuts at named moments

/// Where [`arm`] puts the drop-in that arms the agent's failpoints.
#[derive(Clone, Copy)]
enum Armed {
    /// `/run`: gone with the next boot.
    ThisBoot,
    /// `/etc`: kept across boots (and carried into a new deployment's `/etc`).
    Persistent,
}

impl Armed {
    fn dir(self) -> &'static str {
        match self {
            Armed::ThisBoot => "/run/systemd/system",
            Armed::Persistent => "/etc/systemd/system",
        }
    }
}

const FAILPOINT_DROPIN: &str = "aloft-agent.service.d/50-vmtest-failpoints.conf";

/// Arm the agent's failpoints (`ALOFT_FAILPOINTS`, see `aloft_agent::failpoints`) through a unit
/// drop-in, and restart the agent so that it runs with them.
async fn arm(vm: &Vm, spec: &str, armed: Armed) -> Result<()> {
    write_dropin(vm, spec, armed, "systemctl restart aloft-agent").await
}

/// Move an agent held at a failpoint to another: the drop-ins replaced, the held agent killed (a
/// paused agent need not stop on SIGTERM), and systemd starts it again (`Restart=on-failure`)
/// with the new one. It then resumes from its saved phase, as after a crash.
async fn rearm(vm: &Vm, spec: &str, armed: Armed) -> Result<()> {
    write_dropin(vm, spec, armed, "systemctl kill -s KILL aloft-agent").await
}

async fn write_dropin(vm: &Vm, spec: &str, armed: Armed, then: &str) -> Result<()> {
    let dir = armed.dir();
    vm.sh(&format!(
        "rm -f {etc}/{FAILPOINT_DROPIN} {run}/{FAILPOINT_DROPIN} && mkdir -p {dir}/aloft-agent.service.d && \
         printf '[Service]\\nEnvironment=ALOFT_FAILPOINTS={spec}\\n' > {dir}/{FAILPOINT_DROPIN} && \
         systemctl daemon-reload && {then}",
        etc = Armed::Persistent.dir(),
        run = Armed::ThisBoot.dir(),
    ))
    .await?;
    let env = vm.sh("systemctl show -p Environment aloft-agent").await?;
    ensure!(env.contains(spec), "{}: the agent's unit does not carry the failpoints: {env}", vm.name);
    Ok(())
}

/// Wait until the agent of the VM's current boot logs that it reached failpoint `name` (where a
/// `pause` holds it). The guest may reboot meanwhile: its command channel is gone for a while.
/// Fails at once when the VM fails or a node goes Degraded on the pool's target with a reason it
/// did not have when the wait began (the agent will not get there then; a Degraded node keeps
/// its old reason for a moment after it is moved to a new target).
async fn wait_failpoint(fleet: &Fleet, vm: &Vm, name: &str, timeout: Duration) -> Result<()> {
    let deadline = Instant::now() + timeout;
    let query = format!("journalctl -b -u aloft-agent -o cat | grep -F 'failpoint {name} reached' || true");
    let before: Vec<String> =
        fleet.nodes().await?.iter().map(|n| cluster::annotation(n, ann::REASON).to_string()).collect();
    loop {
        ensure!(Instant::now() < deadline, "{}: the agent never reached failpoint {name}", vm.name);
        if let aloft_vm_tests::Phase::Failed(msg) = vm.status().phase {
            anyhow::bail!("{}: the VM failed while waiting for failpoint {name}: {msg}", vm.name);
        }
        let target = cluster::pool_target(fleet, "worker").await?;
        for n in fleet.nodes().await? {
            let (state, desired) = (cluster::annotation(&n, ann::STATE), cluster::annotation(&n, ann::DESIRED_CONFIG));
            let reason = cluster::annotation(&n, ann::REASON);
            ensure!(
                !(state == "Degraded" && desired == target && !before.iter().any(|r| r == reason)),
                "{} went Degraded on {target} before failpoint {name}: {reason}",
                cluster::name(&n)
            );
        }
        match vm.exec_timeout(&query, Duration::from_secs(30)).await {
            Ok(o) if o.out.contains(&format!("failpoint {name} reached")) => return Ok(()),
            Ok(_) => {}
            Err(e) => tracing::debug!(error = %e, "waiting for failpoint {name}"),
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
}

/// Lines of the agent's journal that contain `text`: of the current boot, or of every boot.
async fn agent_log(vm: &Vm, text: &str, this_boot: bool) -> Result<String> {
    let boot = if this_boot { "-b" } else { "" };
    vm.sh(&format!("journalctl {boot} -u aloft-agent -o cat | grep -F {text:?} || true")).await
}

/// A file under /usr (read-only on the image, and to the agent's unit) is refused at validation
/// on the first node picked, before the agent drains or writes anything: Degraded naming the
/// field, nothing written, and the cordon of its pick released (it failed before its drain).
/// Withdrawn, the pool goes back to `previous` and the node to Done.
async fn read_only_file_refused(fleet: &Fleet, previous: &str) -> Result<()> {
    const USR_FILE: &str = "/usr/lib/aloft-vmtest.conf";
    machine_config(fleet, "51-worker-vmtest-usr", json!({"config": {"storage": {"files": [file(USR_FILE, "usr\n")]}}}))
        .await?;
    let refused = wait_node(fleet, "a node Degraded on the /usr file", ROLLOUT_REBOOTLESS, |n| {
        cluster::annotation(n, ann::STATE) == "Degraded"
    })
    .await?;
    let reason = cluster::annotation(&refused, ann::REASON).to_string();
    ensure!(
        reason.contains("spec.config.storage.files[") && reason.contains("is on a read-only file system (/usr"),
        "the refusal names the field and the read-only file system: {reason:?}"
    );
    let node = cluster::name(&refused).to_string();
    let vm = fleet.vms.iter().find(|v| v.name == node).with_context(|| format!("no VM {node}"))?;
    let there = vm.sh(&format!("test -e {USR_FILE} && echo there || echo absent")).await?;
    ensure!(there.trim() == "absent", "{node}: {USR_FILE} is {there:?}");
    wait_node(fleet, "the refused node uncordoned", ROLLOUT_REBOOTLESS, |n| {
        cluster::name(n) == node && !cluster::is_cordoned(n)
    })
    .await?;
    tracing::info!(%node, %reason, "a file on the read-only /usr: refused before the drain");
    fleet
        .admin
        .delete(&aloft_tests::path_of(&aloft_tests::MACHINE_CONFIG, Some("51-worker-vmtest-usr")))
        .await?
        .into_result()?;
    let back = wait_converged(fleet, cluster::annotation(&refused, ann::DESIRED_CONFIG), ROLLOUT_REBOOTLESS)
        .await
        .context("the pool back on its config after the /usr file is withdrawn")?;
    ensure!(back == previous, "withdrawn, the pool renders {back}, not {previous}");
    Ok(())
}

/// A managed file edited by hand shows as Degraded (`content mismatch`) within moments; MCO's
/// force file in /run (which the agent's unit must let it remove) writes the config again, and
/// the node is Done with the file restored and the force file gone, no reboot.
async fn drift_repaired_by_the_force_file(fleet: &Fleet) -> Result<()> {
    let vm = &fleet.vms[0];
    let expected = vm.sh("cat /etc/aloft-vmtest/none.conf").await?;
    vm.sh("echo tampered > /etc/aloft-vmtest/none.conf").await?;
    let name = vm.name.clone();
    wait_node(fleet, "the hand edit seen as drift", ROLLOUT_REBOOTLESS, |n| {
        cluster::name(n) == name
            && cluster::annotation(n, ann::STATE) == "Degraded"
            && cluster::annotation(n, ann::REASON).contains("content mismatch")
    })
    .await?;
    vm.sh("touch /run/machine-config-daemon-force").await?;
    wait_node(fleet, "the force file's repair", ROLLOUT_REBOOTLESS, |n| {
        cluster::name(n) == name && cluster::annotation(n, ann::STATE) == "Done"
    })
    .await?;
    let now = vm.sh("cat /etc/aloft-vmtest/none.conf").await?;
    ensure!(now == expected, "{name}: after the repair none.conf is {now:?}, not {expected:?}");
    let force = vm.sh("test -e /run/machine-config-daemon-force && echo there || echo gone").await?;
    ensure!(force.trim() == "gone", "{name}: the force file stayed");
    Ok(())
}

/// Wait until the (first) Node satisfies `pred`; returns it.
async fn wait_node(
    fleet: &Fleet,
    what: &str,
    timeout: Duration,
    pred: impl Fn(&serde_json::Value) -> bool,
) -> Result<serde_json::Value> {
    let deadline = Instant::now() + timeout;
    loop {
        let nodes = fleet.nodes().await?;
        if let Some(n) = nodes.into_iter().find(|n| pred(n)) {
            return Ok(n);
        }
        ensure!(Instant::now() < deadline, "{what}: not within {timeout:?}");
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
}

/// Moments of an OS update and its rollback, each held by a failpoint of the real agent and
/// ended by a power cut: (0) right after staging (first the held agent is killed instead: the
/// restarted one drops the staged deployment, which no saved phase says the node reboots into,
/// and stages it again), and right after the phase RebootingStaged is saved:
/// the node boots the old OS, and the agent does the update again (held at the same point again);
/// (1) the deployment staged and both durable writes made
/// (phase RebootingStaged, current config saved), the reboot not asked for: the staged deployment
/// is lost (ostree finalizes it at shutdown), the node boots the old OS, and the agent stages
/// again; the same in an update that only removes a kernel argument (the boot after the cut
/// runs the config's commit, and no argument is left to look for: the deploy serial tells); (2)
/// a rollback cut short: v3 failed its health check and is denylisted, and the power
/// goes before v2 is made the default: the node boots v3 again, and the agent rolls back again
/// rather than leaving the node on the failing commit; (3) the power goes after the rollback made
/// v2 the default and before it saved its phase: the node boots v2, and the agent reports the
/// rollback's reason. Then (4), without a cut, a file-only config that still names the commit the
/// node rolled back from deploys that commit again.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn f_power_cuts_at_named_moments() -> Result<()> {
    let opts = FleetOptions { vms: 1, durable_disk: true, ..Default::default() };
    let Some(fleet) = Fleet::start("f_named_cuts", opts).await? else {
        return Ok(());
    };
    let result = named_cuts(&fleet).await;
    fleet.finish(result).await
}

/// Wait for the (only) node to report Degraded on the pool's target, then require the rollback's
/// reason: v3's health check output and "rolled back from OS commit v3 to v2" (not the OS check's
/// "expected target osImageURL ...").
async fn rolled_back_from_v3(fleet: &Fleet, v2: &str, v3: &str) -> Result<()> {
    let target = cluster::pool_target(fleet, "worker").await?;
    let deadline = Instant::now() + OS_ROLLOUT_PER_NODE;
    loop {
        let node = fleet.nodes().await?.into_iter().next().context("no node")?;
        let (state, reason) = (cluster::annotation(&node, ann::STATE), cluster::annotation(&node, ann::REASON));
        // "rolling back from ..." is said before the reboot into v2: the rollback is not done yet.
        let going = reason.contains(&format!("rolling back from OS commit {v3} to {v2}"));
        if state == "Degraded" && cluster::annotation(&node, ann::DESIRED_CONFIG) == target && !going {
            ensure!(
                reason.contains(&format!("rolled back from OS commit {v3} to {v2}"))
                    && reason.contains("intentional failure in v3"),
                "Degraded after the rollback, with the rollback's reason and the check's output: {reason:?}"
            );
            return Ok(());
        }
        ensure!(Instant::now() < deadline, "not Degraded on {target}: {state} {reason:?}");
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
}

async fn named_cuts(fleet: &Fleet) -> Result<()> {
    use aloft_agent::daemon::os_points;
    ensure!(
        fleet.images.manifest.agent_failpoints,
        "the images' agent has no failpoints (images/build --with-failpoints)"
    );
    let (_, first) = enrolled_and_done(fleet, 1, json!({})).await?;
    let (v2, v3) = (fleet.images.commit("v2")?.to_string(), fleet.images.commit("v3")?.to_string());
    let vm = &fleet.vms[0];

    let staged_now = || async {
        let staged = vm.sh("test -e /run/ostree/staged-deployment && echo staged || echo none").await?;
        anyhow::Ok(staged.trim() == "staged")
    };

    // (0) Right after staging (phase Staging, nothing else saved), then right after the phase
    // RebootingStaged is saved (the current config not yet). Armed in /etc: v1's agent after each
    // cut is held at the same point again, which shows that it did the update again.
    arm(vm, &format!("{}=pause", os_points::AFTER_STAGE), Armed::Persistent).await?;
    machine_config(
        fleet,
        "60-worker-os",
        json!({"osImageURL": fleet.images.os_image_url("v2")?, "kernelArguments": [KARG]}),
    )
    .await?;
    for (point, cut) in
        [(os_points::AFTER_STAGE, "after staging"), (os_points::AFTER_REBOOTING_STAGED, "after RebootingStaged")]
    {
        if point != os_points::AFTER_STAGE {
            rearm(vm, &format!("{point}=pause"), Armed::Persistent).await?;
        }
        wait_failpoint(fleet, vm, point, OS_ROLLOUT_PER_NODE).await?;
        ensure!(staged_now().await?, "held at {point}, yet nothing is staged");
        if point == os_points::AFTER_STAGE {
            // A crash here: no saved phase says the node reboots into v2, so the restarted agent
            // drops the staged deployment before anything else, then does the update again,
            // which stages it anew (and is held at the same point).
            rearm(vm, &format!("{point}=pause"), Armed::Persistent).await?;
            let held_again = || async {
                let lines = agent_log(vm, &format!("failpoint {point} reached"), true).await?;
                anyhow::Ok(lines.lines().count() >= 2)
            };
            let deadline = Instant::now() + OS_ROLLOUT_PER_NODE;
            while !held_again().await? {
                ensure!(Instant::now() < deadline, "the restarted agent was not held at {point} again");
                tokio::time::sleep(Duration::from_secs(2)).await;
            }
            let dropped = agent_log(vm, "dropped the staged OS deployment", true).await?;
            ensure!(
                dropped.contains("(at start)"),
                "restarted after staging, but nothing dropped at start: {dropped:?}"
            );
            ensure!(staged_now().await?, "held at {point} again, yet nothing is staged");
        }
        tracing::info!("power cut: v2 staged, held at {point}");
        let (_, _, release) = power_cycle(vm, &format!("the cut {cut}")).await?;
        ensure!(release == "1", "the staged deployment was never finalized, yet the VM booted release {release}");
        wait_failpoint(fleet, vm, point, OS_ROLLOUT_PER_NODE)
            .await
            .with_context(|| format!("the update done again after the cut {cut}"))?;
        ensure!(staged_now().await?, "held at {point} again, yet nothing is staged");
    }

    // (1) After both writes, before the reboot.
    rearm(vm, &format!("{}=pause", os_points::AFTER_CURRENT_SAVED), Armed::ThisBoot).await?;
    wait_failpoint(fleet, vm, os_points::AFTER_CURRENT_SAVED, OS_ROLLOUT_PER_NODE).await?;
    ensure!(staged_now().await?, "held after the current config was saved, yet nothing is staged");
    tracing::info!("power cut: v2 staged, phase and current config saved, reboot not asked for");
    let (boot, _, release) = power_cycle(vm, "the first cut").await?;
    ensure!(release == "1", "the staged deployment was never finalized, yet the VM booted release {release}");
    let on_v2 = wait_converged(fleet, &first, OS_ROLLOUT_PER_NODE).await.context("converging after the first cut")?;
    let (_, _, release) = vm.wait_ready(boot + 1, UP_WAIT).await?;
    ensure!(release == "2", "converged on {on_v2} but running release {release}");
    os_is(vm, "2", &v2).await?;
    let cmdline = vm.sh("cat /proc/cmdline").await?;
    ensure!(cmdline.split_whitespace().any(|a| a == KARG), "{KARG} not on /proc/cmdline: {cmdline}");
    let restaged = agent_log(vm, "staging it again", false).await?;
    ensure!(!restaged.trim().is_empty(), "the agent converged without staging again after the cut");

    // (1b) The same cut in an update that only removes the kernel argument: it deploys v2 again
    // without it. The boot after the cut runs the deployment from before (v2, with the
    // argument), whose commit is the config's and whose command line the config (no arguments)
    // says nothing against: only the deploy serial tells that the staged one did not come up.
    // Before, the node reported Done with the argument still set.
    let restages = restaged.lines().count();
    arm(vm, &format!("{}=pause", os_points::AFTER_CURRENT_SAVED), Armed::ThisBoot).await?;
    machine_config(fleet, "60-worker-os", json!({"osImageURL": fleet.images.os_image_url("v2")?})).await?;
    wait_failpoint(fleet, vm, os_points::AFTER_CURRENT_SAVED, OS_ROLLOUT_PER_NODE).await?;
    ensure!(staged_now().await?, "held after the argument's removal was staged, yet nothing is staged");
    tracing::info!("power cut: v2 without {KARG} staged, phase and current config saved, reboot not asked for");
    let (boot, boot_id, release) = power_cycle(vm, "the cut in the argument's removal").await?;
    ensure!(release == "2", "after the cut in the argument's removal the VM booted release {release}");
    // That boot's command line, from its journal (whose `-b` takes the boot id without dashes):
    // the agent may already have staged again and rebooted when the test asks.
    let boot_id = boot_id.replace('-', "");
    let cmdline = vm.sh(&format!("journalctl -b {boot_id} -k -o cat | grep -m1 'Command line:'")).await?;
    ensure!(
        cmdline.split_whitespace().any(|a| a == KARG),
        "the staged deployment was never finalized, yet {KARG} is gone from the boot after the cut: {cmdline}"
    );
    let without = wait_converged(fleet, &on_v2, OS_ROLLOUT_PER_NODE).await.context("converging after that cut")?;
    vm.wait_ready(boot + 1, UP_WAIT).await.context("the reboot into the deployment staged again")?;
    os_is(vm, "2", &v2).await?;
    let cmdline = vm.sh("cat /proc/cmdline").await?;
    ensure!(
        !cmdline.split_whitespace().any(|a| a == KARG),
        "converged on {without}, yet {KARG} is still on /proc/cmdline: {cmdline}"
    );
    let restaged = agent_log(vm, "staging it again", false).await?;
    ensure!(
        restaged.lines().count() > restages,
        "the agent converged on the removal without staging it again after the cut:\n{restaged}"
    );

    // (2) A rollback cut short. Armed in /etc: the boot that fails the health check is v3's.
    arm(vm, &format!("{}=pause", os_points::AFTER_DENYLIST), Armed::Persistent).await?;
    let boots_on_v2 = vm.status().boot;
    machine_config(
        fleet,
        "60-worker-os",
        json!({"osImageURL": fleet.images.os_image_url("v3")?, "kernelArguments": [KARG]}),
    )
    .await?;
    vm.wait_ready(boots_on_v2 + 1, OS_ROLLOUT_PER_NODE).await.context("booting v3")?;
    wait_failpoint(fleet, vm, os_points::AFTER_DENYLIST, OS_ROLLOUT_PER_NODE).await?;
    os_is(vm, "2", &v3).await.context("v3 (which keeps v2's release file) booted when its check failed")?;
    let denylist = vm.sh("cat /var/lib/aloft/os-denylist.json").await?;
    ensure!(denylist.contains(&v3), "held after the denylist was saved, yet it lacks v3: {denylist}");
    tracing::info!("power cut: v3 failed its health check and is denylisted, v2 not made the default yet");
    let (boot, _, _) = power_cycle(vm, "the second cut").await?;
    os_is(vm, "2", &v3).await.context("the default deployment is still v3 after the cut")?;
    // The agent finds itself on the denylisted commit and rolls back again: the failpoint holds it
    // once more, right after the denylist save, in this boot.
    wait_failpoint(fleet, vm, os_points::AFTER_DENYLIST, OS_ROLLOUT_PER_NODE).await.context("rolling back again")?;
    let again = agent_log(vm, "rolling back again", true).await?;
    ensure!(!again.trim().is_empty(), "held in a rollback, but not the one a restart on v3 makes");
    // Disarm and crash the held agent; systemd starts it again (Restart=on-failure), and it rolls
    // back for good. (v2's /etc keeps the drop-in: its agent finishes the rollback without passing
    // the point.)
    vm.sh(&format!(
        "rm /etc/systemd/system/{FAILPOINT_DROPIN} && systemctl daemon-reload && systemctl kill -s KILL aloft-agent"
    ))
    .await?;
    let (boot, _, release) =
        vm.wait_ready(boot + 1, OS_ROLLOUT_PER_NODE).await.context("rebooting into v2 after the rollback")?;
    ensure!(release == "2", "after the rollback the VM booted release {release} (boot {boot})");
    os_is(vm, "2", &v2).await?;
    rolled_back_from_v3(fleet, &v2, &v3).await?;

    // (3) A rollback whose reorder is done, its phase not saved. A new config (v3 with another
    // kernel argument) is the way out of a Degraded node, and v3 is tried again under it.
    arm(vm, &format!("{}=pause", os_points::AFTER_ROLLBACK), Armed::Persistent).await?;
    let boots_on_v2 = vm.status().boot;
    machine_config(
        fleet,
        "60-worker-os",
        json!({"osImageURL": fleet.images.os_image_url("v3")?, "kernelArguments": [KARG, "aloft.vmtest=again"]}),
    )
    .await?;
    vm.wait_ready(boots_on_v2 + 1, OS_ROLLOUT_PER_NODE).await.context("booting v3 again")?;
    wait_failpoint(fleet, vm, os_points::AFTER_ROLLBACK, OS_ROLLOUT_PER_NODE).await?;
    let status = vm.sh("ostree admin status").await?;
    let default = status.lines().find(|l| l.contains("aloft ")).unwrap_or_default().to_string();
    ensure!(default.contains(&v2), "held after the rollback, yet v2 is not the default deployment:\n{status}");
    tracing::info!("power cut: v3 failed its health check again, v2 made the default, the rollback's phase not saved");
    let (boot, _, release) = power_cycle(vm, "the third cut").await?;
    ensure!(release == "2", "after the third cut the VM booted release {release} (boot {boot})");
    os_is(vm, "2", &v2).await?;
    rolled_back_from_v3(fleet, &v2, &v3).await?;
    let done = agent_log(vm, "the rollback is done", true).await?;
    ensure!(!done.trim().is_empty(), "Degraded, but not by the restart that finds the rollback done");

    // (4) No cut: a new config that changes only a file and still names v3, which the node
    // rolled back from. Its commit is not the running one, so the update deploys it (a new config
    // tries a denylisted commit again): v3 boots, fails its check, and the node rolls back to v2,
    // Degraded with the rollback's reason, the file written. Before, the agent saw no OS change
    // between the two configs, wrote the file, rebooted into v2 and went Degraded on the drift
    // check ("expected target osImageURL").
    vm.sh(&format!("rm /etc/systemd/system/{FAILPOINT_DROPIN} && systemctl daemon-reload")).await?;
    let boots_on_v2 = vm.status().boot;
    machine_config(
        fleet,
        "60-worker-os",
        json!({"osImageURL": fleet.images.os_image_url("v3")?, "kernelArguments": [KARG, "aloft.vmtest=again"],
            "config": {"storage": {"files": [cluster::file("/etc/aloft-vmtest-fixed.conf", "fixed")]}}}),
    )
    .await?;
    vm.wait_ready(boots_on_v2 + 1, OS_ROLLOUT_PER_NODE).await.context("booting v3 under the file-only config")?;
    let (_, _, release) =
        vm.wait_ready(boots_on_v2 + 2, OS_ROLLOUT_PER_NODE).await.context("rolling back to v2 once more")?;
    ensure!(release == "2", "after the file-only config the VM runs release {release}");
    os_is(vm, "2", &v2).await?;
    rolled_back_from_v3(fleet, &v2, &v3).await?;
    let fixed = vm.sh("cat /etc/aloft-vmtest-fixed.conf").await?;
    ensure!(fixed.trim() == "fixed", "the file-only config's file: {fixed:?}");
    Ok(())
}

// ---------------------------------------------------------------- e: a change that reboots

/// A file no disruption policy covers: the node is drained and rebooted through logind; the
/// harness boots the same (v1) entry again and the agent reports Done after the reboot. This is
/// the reboot path of scenarios b-d without an OS change. logind is masked and stopped first, so
/// the agent's first requests are refused: the node is Degraded saying so, keeps its config and
/// its rebooting phase, and asks again; once logind is started again the next request reboots it.
/// Then a second such change, with a delay inhibitor holding the shutdown: logind takes the
/// request and the host stays up, so the agent says so once its reboot timeout has passed
/// (Degraded, asked again) and the node reboots when the inhibitor lets go.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn e_file_without_policy_reboots_through_logind() -> Result<()> {
    let Some(fleet) = Fleet::start("e_reboot", FleetOptions { vms: 1, ..Default::default() }).await? else {
        return Ok(());
    };
    let result = reboot_for_file(&fleet).await;
    fleet.finish(result).await
}

async fn reboot_for_file(fleet: &Fleet) -> Result<()> {
    let (boot_ids, first) = enrolled_and_done(fleet, 1, json!({})).await?;
    let vm = &fleet.vms[0];
    // logind away, as a real refusal: the unit masked and stopped, so the agent's Reboot() call
    // fails (D-Bus cannot start logind) and the node must say so and ask again.
    vm.sh(&format!("systemctl mask --runtime {LOGIND} && systemctl stop {LOGIND}")).await?;
    machine_config(
        fleet,
        "70-worker-reboot",
        json!({"config": {"storage": {"files": [file("/etc/aloft-reboot.conf", "after reboot\n")]}}}),
    )
    .await?;
    let node = wait_node(fleet, "Degraded for the refused reboot", OS_ROLLOUT_PER_NODE, |n| {
        cluster::annotation(n, ann::STATE) == "Degraded"
            && cluster::annotation(n, ann::REASON).starts_with("reboot failed (retrying)")
    })
    .await?;
    let target = cluster::pool_target(fleet, "worker").await?;
    ensure!(
        cluster::annotation(&node, ann::CURRENT_CONFIG) == first
            && cluster::annotation(&node, ann::DESIRED_CONFIG) == target
            && target != first,
        "the node still runs {first} and is asked for {target}: {}",
        node["metadata"]
    );
    ensure!(vm.reboots() == 0, "{} rebooted although logind was away: {:?}", vm.name, vm.boots());
    let written = vm.sh("cat /etc/aloft-reboot.conf").await?;
    ensure!(written == "after reboot\n", "the file is written before the reboot: {written:?}");
    let status: serde_json::Value = serde_json::from_str(&vm.sh("aloft-agent status --json").await?)?;
    ensure!(
        status["state"] == "Degraded" && status["progress"].as_str().unwrap_or("").starts_with("rebooting"),
        "the agent keeps its rebooting phase: {status}"
    );
    // Asked again (after 5 s, doubling to 60 s), each refusal in the journal.
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let refusals = agent_log(vm, "the reboot did not happen; asking again", true).await?;
        if refusals.lines().count() >= 2 {
            break;
        }
        ensure!(Instant::now() < deadline, "the reboot was not asked for again within 120 s: {refusals:?}");
        tokio::time::sleep(Duration::from_secs(5)).await;
    }
    ensure!(vm.reboots() == 0, "{} rebooted although logind was away: {:?}", vm.name, vm.boots());

    // logind back: the next attempt (at most 60 s later) reboots the node, which is then Done.
    vm.sh(&format!("systemctl unmask --runtime {LOGIND} && systemctl start {LOGIND}")).await?;
    vm.wait_ready(2, BOOT).await.context("the reboot once logind is back")?;
    wait_node(fleet, "Done after the reboot", OS_ROLLOUT_PER_NODE, |n| {
        cluster::annotation(n, ann::STATE) != "Degraded"
    })
    .await?;
    wait_converged(fleet, &first, OS_ROLLOUT_PER_NODE).await.context("the rebooting change")?;
    ensure!(vm.reboots() == 1, "{} rebooted {} times, not once: {:?}", vm.name, vm.reboots(), vm.boots());
    let (boot, boot_id, release) = vm.wait_ready(2, UP_WAIT).await?;
    ensure!(boot == 2 && boot_id != boot_ids[0], "a new boot: boot {boot}, boot id {boot_id}");
    ensure!(release == "1", "the same OS after the reboot, got release {release}");
    let now = vm.sh("cat /proc/sys/kernel/random/boot_id; cat /etc/aloft-reboot.conf").await?;
    ensure!(now == format!("{boot_id}\nafter reboot\n"), "in the guest: {now:?}");
    let node = fleet.nodes().await?.into_iter().next().context("the node")?;
    ensure!(!cluster::is_cordoned(&node), "the node is uncordoned after the reboot");
    let second = cluster::pool_target(fleet, "worker").await?;
    overdue_reboot(fleet, vm, &second).await
}

/// The reboot logind took and did not carry out: a delay inhibitor held longer than logind waits
/// (`InhibitDelayMaxSec` raised to an hour, a runtime drop-in; 5 s by default), and the agent's
/// reboot timeout lowered to [`REBOOT_OVERDUE_AFTER_S`]. The agent must notice that the host is
/// still up, say so (Degraded) and ask again, and the node must reboot into its update once
/// the inhibitor lets go. `previous` is the config the node is Done on.
async fn overdue_reboot(fleet: &Fleet, vm: &Vm, previous: &str) -> Result<()> {
    vm.sh(&format!(
        "mkdir -p /run/systemd/logind.conf.d /run/systemd/system/aloft-agent.service.d && \
         printf '[Login]\\nInhibitDelayMaxSec=3600\\n' > /run/systemd/logind.conf.d/50-aloft-vmtest.conf && \
         printf '[Service]\\nEnvironment=ALOFT_REBOOT_TIMEOUT_SECONDS={REBOOT_OVERDUE_AFTER_S}\\n' \
             > /run/systemd/system/aloft-agent.service.d/50-aloft-vmtest.conf && \
         systemctl daemon-reload && systemctl restart {LOGIND} aloft-agent.service && \
         systemd-run --unit {INHIBITOR} systemd-inhibit --what=shutdown --mode=delay --who=aloft-vmtest \
             --why='scenario e holds the reboot' sleep infinity"
    ))
    .await?;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let locks = vm.sh("systemd-inhibit --list --no-pager --no-legend || true").await?;
        if locks.contains("aloft-vmtest") && locks.contains("delay") {
            break;
        }
        ensure!(Instant::now() < deadline, "the delay inhibitor is not held within 60 s: {locks:?}");
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let boots = vm.reboots();
    machine_config(
        fleet,
        "70-worker-reboot",
        json!({"config": {"storage": {"files": [file("/etc/aloft-reboot.conf", "after a held reboot\n")]}}}),
    )
    .await?;
    // The agent's first word on this reboot: logind took the request and it has not happened
    // (not a refusal).
    let deadline = Instant::now() + OS_ROLLOUT_PER_NODE;
    while agent_log(vm, "the reboot did not happen; asking again", true).await?.is_empty() {
        ensure!(
            Instant::now() < deadline,
            "the agent did not notice its reboot was held within {OS_ROLLOUT_PER_NODE:?}"
        );
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    let said = vm
        .sh("journalctl -b -u aloft-agent -o verbose | grep -E 'has not happened|reboot failed [(]retrying[)]' || true")
        .await?;
    ensure!(
        said.lines().next().is_some_and(|l| l.contains("s ago has not happened (was the shutdown cancelled?)")),
        "the agent's first word on the held reboot is that logind took it and it has not happened: {said:?}"
    );
    let node = wait_node(fleet, "Degraded for the held reboot", Duration::from_secs(60), |n| {
        cluster::annotation(n, ann::STATE) == "Degraded"
    })
    .await?;
    let target = cluster::pool_target(fleet, "worker").await?;
    ensure!(
        target != previous
            && cluster::annotation(&node, ann::CURRENT_CONFIG) == previous
            && cluster::annotation(&node, ann::DESIRED_CONFIG) == target,
        "the node still runs {previous} and is asked for {target}: {}",
        node["metadata"]
    );
    let reason = cluster::annotation(&node, ann::REASON);
    tracing::info!(%reason, "the held reboot: the Node's reason");
    // logind refuses the request asked again while it holds the first (systemd 252 does), and
    // the reason says so; one that took it again would leave the overdue reason.
    ensure!(
        reason.contains("has not happened")
            || (reason.starts_with("reboot failed (retrying): logind holds a shutdown it has not carried out")
                && reason.contains("`systemd-inhibit --list`")
                && reason.contains("org.freedesktop.login1.OperationInProgress")),
        "the Degraded reason says logind holds the reboot: {reason:?}"
    );
    let status: serde_json::Value = serde_json::from_str(&vm.sh("aloft-agent status --json").await?)?;
    ensure!(
        status["progress"].as_str().unwrap_or("").starts_with("rebooting"),
        "the agent keeps its rebooting phase while the reboot is held: {status}"
    );
    ensure!(vm.reboots() == boots, "{} rebooted while the inhibitor held: {:?}", vm.name, vm.boots());

    // The inhibitor lets go: logind carries out the reboot it took, and the node finishes. (A
    // timer stops it a moment later: the VM goes down before a direct stop could answer.)
    vm.sh(&format!("systemd-run --on-active=2 --unit {INHIBITOR}-release systemctl stop {INHIBITOR}.service")).await?;
    vm.wait_ready(u32::try_from(boots + 2)?, BOOT).await.context("the held reboot once the inhibitor let go")?;
    wait_node(fleet, "Done after the held reboot", OS_ROLLOUT_PER_NODE, |n| {
        cluster::annotation(n, ann::STATE) != "Degraded"
    })
    .await?;
    wait_converged(fleet, previous, OS_ROLLOUT_PER_NODE).await.context("the change with the held reboot")?;
    ensure!(vm.reboots() == boots + 1, "{} rebooted {} times, not once more: {:?}", vm.name, vm.reboots(), vm.boots());
    let written = vm.sh("cat /etc/aloft-reboot.conf").await?;
    ensure!(written == "after a held reboot\n", "the file after the held reboot: {written:?}");
    Ok(())
}

// ---------------------------------------------------------------- g: a new OS out of reach

/// The agent's time for a new OS to reach the coordinator, lowered for scenario g (900 s by
/// default).
const REACH_TIMEOUT_S: u64 = 60;

/// An OS update whose new OS cannot reach the coordinator is rolled back by the node itself. A
/// unit in /etc (carried into the new deployment's /etc) runs only on v2 (its marker file) and
/// unbinds the virtio network device before the agent starts, as a new OS with a broken NIC
/// driver would: the agent on v2 never reaches the coordinator. After its reach timeout
/// (lowered to [`REACH_TIMEOUT_S`] by a drop-in) it rolls back to v1 as it does for a failed
/// health check; v1 reaches the coordinator, and the node is Degraded saying why. Before, the
/// node stayed on v2 for good, out of reach, cordoned and holding the pool's only slot.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn g_new_os_out_of_reach_rolls_back() -> Result<()> {
    let Some(fleet) = Fleet::start("g_out_of_reach", FleetOptions { vms: 1, ..Default::default() }).await? else {
        return Ok(());
    };
    let result = out_of_reach(&fleet).await;
    fleet.finish(result).await
}

async fn out_of_reach(fleet: &Fleet) -> Result<()> {
    let (_, first) = enrolled_and_done(fleet, 1, json!({})).await?;
    let (v1, v2) = (fleet.images.commit("v1")?.to_string(), fleet.images.commit("v2")?.to_string());
    let vm = &fleet.vms[0];
    // The unit and its script in /etc: kept across the update (ostree merges /etc into the new
    // deployment), and run only where v2's marker file is.
    // The driver may bind the device after this unit starts (udev loads virtio_net): wait for it.
    let script = "dir=/sys/bus/virtio/drivers/virtio_net\n\
                  for i in $(seq 120); do\n\
                  \x20 for d in $dir/virtio*; do [ -e \"$d\" ] && echo \"${d##*/}\" > $dir/unbind && exit 0; done\n\
                  \x20 sleep 0.5\n\
                  done\n\
                  exit 0\n";
    let unit = "[Unit]\n\
                ConditionPathExists=/usr/share/aloft/v2-marker\n\
                DefaultDependencies=no\n\
                After=systemd-udevd.service systemd-udev-trigger.service\n\
                Before=aloft-agent.service network-online.target\n\
                [Service]\n\
                Type=oneshot\n\
                RemainAfterExit=yes\n\
                ExecStart=/bin/sh /etc/aloft-vmtest-nonet.sh\n\
                [Install]\n\
                WantedBy=multi-user.target\n";
    let dropin = format!("[Service]\nEnvironment=ALOFT_OS_REACH_TIMEOUT_SECONDS={REACH_TIMEOUT_S}\n");
    let b64 = |text: &str| {
        use base64::Engine;
        base64::engine::general_purpose::STANDARD.encode(text)
    };
    vm.sh(&format!(
        "mkdir -p /etc/systemd/system/aloft-agent.service.d && \
         echo {} | base64 -d > /etc/aloft-vmtest-nonet.sh && \
         echo {} | base64 -d > /etc/systemd/system/aloft-vmtest-nonet.service && \
         echo {} | base64 -d > /etc/systemd/system/aloft-agent.service.d/60-aloft-vmtest-reach.conf && \
         systemctl daemon-reload && systemctl enable aloft-vmtest-nonet.service && \
         systemctl is-enabled aloft-vmtest-nonet.service",
        b64(script),
        b64(unit),
        b64(&dropin)
    ))
    .await?;
    let boots_on_v1 = vm.status().boot;
    machine_config(
        fleet,
        "60-worker-os",
        json!({"osImageURL": fleet.images.os_image_url("v2")?, "kernelArguments": [KARG]}),
    )
    .await?;
    let (_, _, release) = vm.wait_ready(boots_on_v1 + 1, OS_ROLLOUT_PER_NODE).await.context("booting v2")?;
    ensure!(release == "2", "the update's boot runs release {release}");
    let nics = vm.sh("ls /sys/bus/virtio/drivers/virtio_net/ | grep -c '^virtio' || true").await?;
    ensure!(nics.trim() == "0", "v2 boots with its network device still bound ({nics:?}): the test unit did not run");
    tracing::info!("v2 booted without its network; waiting for the agent to roll back");
    let (_, _, release) = vm
        .wait_ready(boots_on_v1 + 2, Duration::from_secs(REACH_TIMEOUT_S) + OS_ROLLOUT_PER_NODE)
        .await
        .context("the rollback's reboot")?;
    ensure!(release == "1", "after the rollback the VM runs release {release}");
    os_is(vm, "1", &v1).await?;
    let target = cluster::pool_target(fleet, "worker").await?;
    ensure!(target != first, "the pool's target is still {first}");
    let node = wait_node(fleet, "Degraded after the rollback", OS_ROLLOUT_PER_NODE, |n| {
        cluster::annotation(n, ann::STATE) == "Degraded" && cluster::annotation(n, ann::DESIRED_CONFIG) == target
    })
    .await?;
    let reason = cluster::annotation(&node, ann::REASON);
    ensure!(
        reason.contains(&format!("rolled back from OS commit {v2} to {v1}"))
            && reason.contains("did not reach the coordinator within 60 s"),
        "Degraded with the rollback's reason: {reason:?}"
    );
    // As after a failed health check: the node keeps the failed config's files, so that is its
    // currentConfig (what the next update diffs against).
    ensure!(cluster::annotation(&node, ann::CURRENT_CONFIG) == target, "currentConfig is not {target}: {node}");
    rolled_back_records(vm, &v2, &v1).await
}

/// After a rollback from commit `failed` to `to` (v1, under a first config without kernel
/// arguments): `failed` is on the node's OS denylist, and the rollback recorded which kernel
/// arguments aloft had put on the deployment gone back to (none), as a failed health check's
/// does: without the record, the config before taken again would add them a second time, and a
/// fix would keep the failed config's.
async fn rolled_back_records(vm: &Vm, failed: &str, to: &str) -> Result<()> {
    let denylist = vm.sh("cat /var/lib/aloft/os-denylist.json").await?;
    ensure!(denylist.contains(failed), "{failed} is not denylisted after the rollback: {denylist}");
    let record = vm.sh("cat /var/lib/aloft/os-rolled-back-kargs.json").await?;
    let record: serde_json::Value =
        serde_json::from_str(&record).with_context(|| format!("the kernel-argument record: {record:?}"))?;
    ensure!(
        record["checksum"] == to && record["kernelArguments"] == json!([]),
        "the kernel-argument record is not {to}'s with none: {record}"
    );
    Ok(())
}

/// A release from an update graph, on a real VM: the ClusterVersion takes release 1.0.0 (the
/// image's v1, which the VM runs) from a graph aloft's update service builds from a graph-data
/// directory and serves on the host's loopback, then 1.1.0 (v2);
/// the release MachineConfig carries v2 to the worker pool, the VM reboots once into it, and the
/// release completes once the pool runs it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn h_release_from_the_update_graph() -> Result<()> {
    let Some(fleet) = Fleet::start("h_release", FleetOptions { vms: 1, ..Default::default() }).await? else {
        return Ok(());
    };
    let result = release_from_graph(&fleet).await;
    fleet.finish(result).await
}

async fn release_from_graph(fleet: &Fleet) -> Result<()> {
    use aloft_tests::graph_service::{write, Service};
    let (_, first) = enrolled_and_done(fleet, 1, json!({})).await?;
    let v2 = fleet.images.commit("v2")?.to_string();
    let (url1, url2) = (fleet.images.os_image_url("v1")?, fleet.images.os_image_url("v2")?);
    // The graph as a publisher of releases writes it: a graph-data directory served by
    // aloft's update service.
    let gd = tempfile::tempdir()?;
    write(gd.path(), "version", "1.1.0\n");
    write(gd.path(), "channels/stable-1.yaml", "name: stable-1\nversions: [1.0.0, 1.1.0]\n");
    write(gd.path(), "releases/1.0.0.json", &json!({"version": "1.0.0", "payload": url1}).to_string());
    let second = json!({"version": "1.1.0", "payload": url2, "previous": ["1.0.0"]});
    write(gd.path(), "releases/1.1.0.json", &second.to_string());
    let svc = Service::start(gd.path(), &gd.path().join("releases"), "5m");
    let path = "/apis/config.openshift.io/v1/clusterversions/version";
    let cv = json!({"apiVersion": "config.openshift.io/v1", "kind": "ClusterVersion", "metadata": {"name": "version"},
        "spec": {"upstream": svc.url, "channel": "stable-1", "desiredUpdate": {"version": "1.0.0"}}});
    cluster::apply(fleet, "/apis/config.openshift.io/v1/clusterversions", &cv).await?;
    let completed = |v: &serde_json::Value, version: &str| {
        v.pointer("/status/history/0").is_some_and(|h| h["state"] == "Completed" && h["version"] == version)
    };
    // 1.0.0 is v1, which the VM runs: its config changes (the osImageURL), its OS does not.
    let deadline = Instant::now() + ROLLOUT_REBOOTLESS;
    loop {
        let v = fleet.admin.get(path).await?.into_result()?;
        if completed(&v, "1.0.0") && v.pointer("/status/availableUpdates/0/version").is_some_and(|x| x == "1.1.0") {
            break;
        }
        ensure!(Instant::now() < deadline, "1.0.0 did not complete with 1.1.0 offered: {v}");
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    let on_v1 = wait_converged(fleet, &first, ROLLOUT_REBOOTLESS).await.context("the config naming v1")?;
    let vm = &fleet.vms[0];
    ensure!(vm.reboots() == 0, "{} rebooted for a release it already ran: {:?}", vm.name, vm.boots());

    let patch = json!({"spec": {"desiredUpdate": {"version": "1.1.0"}}});
    fleet.admin.patch(path, "application/merge-patch+json", &patch).await?.into_result()?;
    wait_converged(fleet, &on_v1, OS_ROLLOUT_PER_NODE).await.context("the release's OS rollout")?;
    let deadline = Instant::now() + Duration::from_secs(120);
    let v = loop {
        let v = fleet.admin.get(path).await?.into_result()?;
        if completed(&v, "1.1.0") {
            break v;
        }
        ensure!(Instant::now() < deadline, "1.1.0 did not complete: {v}");
        tokio::time::sleep(Duration::from_secs(2)).await;
    };
    ensure!(v["status"]["history"][1]["version"] == "1.0.0", "the history: {}", v["status"]["history"]);
    ensure!(vm.reboots() == 1, "{} rebooted {} times, not once: {:?}", vm.name, vm.reboots(), vm.boots());
    let (_, _, release) = vm.wait_ready(2, UP_WAIT).await?;
    ensure!(release == "2", "{}: ALOFT-READY says release {release}", vm.name);
    os_is(vm, "2", &v2).await?;
    // The reboot into v2 was counted (the harness's bootloader took one off the 3 the agent
    // armed), and the verified boot disarmed the counting.
    let boot2 = vm.boots().into_iter().find(|b| b.boot == 2).context("boot 2")?;
    ensure!(boot2.entry.contains("boot_counter 3 -> 2"), "the reboot into v2 was not counted: {:?}", boot2.entry);
    let grubenv = vm.sh("grep -a = /boot/grub2/grubenv").await?;
    ensure!(
        !grubenv.contains("boot_counter") && grubenv.lines().any(|l| l == "boot_success=1"),
        "the counting is not disarmed after the verified boot: {grubenv:?}"
    );
    Ok(())
}

// ---------------------------------------------------------------- i, j: boot counting

/// A new OS whose kernel panics at every boot (v4: its initramfs holds no init), so the agent
/// never runs in it and no health check can roll it back. The agent armed the bootloader's boot
/// counting before the reboot (3 boots, greenboot's default, in /boot/grub2/grubenv); the
/// harness's bootloader counts as GRUB with greenboot's script does: three boots of v4, each a
/// panic that reboots (`panic=10`, a kernel argument of the update's config), then the previous
/// entry. The agent on v1 finds the fallback: v4 denylisted, v1 made the default again (ostree's
/// order, which the next boot follows), the counting disarmed, and the node Degraded saying
/// the new OS never came up. The admin then names v1 again, and the node is Done on it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn i_kernel_panic_falls_back_by_boot_counting() -> Result<()> {
    let Some(fleet) = Fleet::start("i_boot_counting", FleetOptions { vms: 1, ..Default::default() }).await? else {
        return Ok(());
    };
    let result = boot_counting(&fleet, BadOs::Panics).await;
    fleet.finish(result).await
}

/// A new OS that boots but whose agent fails at every start (v5), so nothing in it can judge
/// the boot or roll it back. The agent unit's hook (`ExecStopPost`, greenboot's red boot) counts
/// the failures while the boot is counted and reboots after the fifth: three such boots of v5,
/// then the previous entry, and on v1 the same fallback as scenario i's.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn j_failing_agent_falls_back_by_boot_counting() -> Result<()> {
    let Some(fleet) = Fleet::start("j_red_boot", FleetOptions { vms: 1, ..Default::default() }).await? else {
        return Ok(());
    };
    let result = boot_counting(&fleet, BadOs::AgentFails).await;
    fleet.finish(result).await
}

/// A new OS (v2) with a kernel argument its initramfs cannot mount the root with (an ext4
/// mount option that does not exist): the initramfs's emergency reboots (the images' kernel
/// arguments `rd.shell=0 rd.emergency=reboot`) instead of waiting at a shell, so the bootloader
/// counts three such boots, then boots the previous entry; on v1 the same fallback as scenario
/// i's. Without those arguments the node stayed at the initramfs's shell for good.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn k_root_that_does_not_mount_falls_back_by_boot_counting() -> Result<()> {
    let Some(fleet) = Fleet::start("k_root_unmountable", FleetOptions { vms: 1, ..Default::default() }).await? else {
        return Ok(());
    };
    let result = boot_counting(&fleet, BadOs::RootDoesNotMount).await;
    fleet.finish(result).await
}

/// The kernel argument scenario k's v2 boots with.
const UNMOUNTABLE_ROOT: &str = "rootflags=aloft_no_such_option";

/// How the new OS of a boot-counting scenario fails to come up.
#[derive(Clone, Copy, PartialEq)]
enum BadOs {
    /// v4: its kernel panics at every boot (`panic=10` reboots it); the agent never runs.
    Panics,
    /// v5: it boots, and its agent fails at every start; the agent unit's red-boot hook reboots
    /// after its fifth failure.
    AgentFails,
    /// v2 with [`UNMOUNTABLE_ROOT`]: its initramfs cannot mount the root, and reboots.
    RootDoesNotMount,
}

async fn boot_counting(fleet: &Fleet, bad: BadOs) -> Result<()> {
    let (_, first) = enrolled_and_done(fleet, 1, json!({})).await?;
    let (version, release) = match bad {
        BadOs::Panics => ("v4", "4"),
        BadOs::AgentFails => ("v5", "5"),
        BadOs::RootDoesNotMount => ("v2", "2"),
    };
    // The kernel argument the bad boots have and the fallback has not.
    let bad_karg = match bad {
        BadOs::Panics => Some("panic=10"),
        BadOs::AgentFails => None,
        BadOs::RootDoesNotMount => Some(UNMOUNTABLE_ROOT),
    };
    let (v1, failed) = (fleet.images.commit("v1")?.to_string(), fleet.images.commit(version)?.to_string());
    let vm = &fleet.vms[0];
    let grubenv = vm.sh("grep -a = /boot/grub2/grubenv || true").await?;
    ensure!(!grubenv.contains("boot_counter"), "nothing is counted before the update: {grubenv:?}");
    let boots_on_v1 = vm.status().boot;
    let os = match bad {
        BadOs::Panics => json!({"osImageURL": fleet.images.os_image_url(version)?, "kernelArguments": ["panic=10"]}),
        BadOs::AgentFails => json!({"osImageURL": fleet.images.os_image_url(version)?}),
        BadOs::RootDoesNotMount => {
            json!({"osImageURL": fleet.images.os_image_url(version)?, "kernelArguments": [UNMOUNTABLE_ROOT]})
        }
    };
    machine_config(fleet, "60-worker-os", os).await?;
    // Three boots of the bad OS, then the fallback's boot, which comes up as v1.
    let mut boot = 0;
    let mut up_on = String::new();
    while up_on != "1" {
        (boot, _, up_on) =
            vm.wait_ready(boot.max(boots_on_v1 + 1), OS_ROLLOUT_PER_NODE).await.context("the fallback boot")?;
        if up_on != "1" {
            // A bad OS that comes up (its agent fails): the next boot.
            vm.wait_for("its reboot", OS_ROLLOUT_PER_NODE, |s| s.boot > boot).await?;
            boot += 1;
        }
    }
    let boots: Vec<_> = vm.boots().into_iter().filter(|b| b.boot > boots_on_v1).collect();
    let entries: Vec<&str> = boots.iter().map(|b| b.entry.as_str()).collect();
    tracing::info!(?entries, "the boots after the update");
    ensure!(boot == boots_on_v1 + 4, "the fallback came at boot {boot}, not the fourth after the update: {entries:#?}");
    for (i, b) in boots.iter().take(3).enumerate() {
        let counted = format!("[default entry; boot counting: boot_counter {} -> {}]", 3 - i, 2 - i);
        ensure!(b.entry.contains(&counted), "boot {}: {:?}", b.boot, b.entry);
        ensure!(b.end.as_deref() == Some("guest-reset"), "boot {}: {b:?}", b.boot);
        match bad {
            BadOs::Panics => {
                ensure!(b.entry.contains("panic=10") && b.ready_after.is_none(), "boot {}: {b:?}", b.boot);
                let serial = String::from_utf8_lossy(&std::fs::read(&b.serial)?).into_owned();
                ensure!(serial.contains("Kernel panic"), "boot {} did not panic: {}", b.boot, b.serial.display());
            }
            BadOs::RootDoesNotMount => {
                ensure!(b.entry.contains(UNMOUNTABLE_ROOT) && b.ready_after.is_none(), "boot {}: {b:?}", b.boot);
                let serial = String::from_utf8_lossy(&std::fs::read(&b.serial)?).into_owned();
                // ext4's refusal, as the kernel's new mount API words it (or the old one).
                ensure!(
                    serial.contains("Unknown parameter") || serial.contains("Unrecognized mount option"),
                    "boot {} did not fail to mount its root: {}",
                    b.boot,
                    b.serial.display()
                );
            }
            BadOs::AgentFails => {
                ensure!(b.release.as_deref() == Some(release), "boot {} ran release {:?}", b.boot, b.release);
                // Its journal (the stateroot's /var is shared): five failures, then the reboot.
                let id = b.boot_id.as_deref().context("a boot that came up has an id")?.replace('-', "");
                let log = vm.sh(&format!("journalctl -b {id} -u aloft-agent -o cat || true")).await?;
                ensure!(
                    log.contains("aloft-agent: intentional failure in v5")
                        && log.contains("failure 4 of 5 before a reboot")
                        && log.contains("aloft-agent failed 5 times during a counted boot")
                        && log.contains("rebooting, so that the bootloader counts this boot"),
                    "boot {}: the agent's journal does not show the red boot:\n{log}",
                    b.boot
                );
            }
        }
    }
    let fallback = &boots[3];
    ensure!(
        fallback.entry.contains("[previous entry (fallback); boot counting: boot_counter 0 -> -1]")
            && bad_karg.is_none_or(|k| !fallback.entry.contains(k)),
        "the fourth boot is not the previous entry: {:?}",
        fallback.entry
    );
    os_is(vm, "1", &v1).await?;
    let target = cluster::pool_target(fleet, "worker").await?;
    let node = wait_node(fleet, "Degraded after the fallback", Duration::from_secs(300), |n| {
        cluster::annotation(n, ann::STATE) == "Degraded"
            && cluster::annotation(n, ann::REASON).contains(&format!("rolled back from OS commit {failed} to {v1}"))
    })
    .await?;
    let reason = cluster::annotation(&node, ann::REASON);
    ensure!(
        reason.contains(&format!("the new OS deployment of commit {failed} never came up"))
            && reason.contains("after 3 boots (boot counting in /boot/grub2/grubenv)"),
        "the reason says why: {reason:?}"
    );
    ensure!(cluster::annotation(&node, ann::DESIRED_CONFIG) == target, "desired is not {target}: {node}");
    // v1 boots next (ostree's order, the BLS entries the bootloader reads), and nothing is counted.
    let status = vm.sh("ostree admin status").await?;
    let first_deployment = status.lines().find(|l| l.contains(" aloft ")).unwrap_or_default();
    ensure!(
        first_deployment.starts_with("* ") && first_deployment.contains(&v1),
        "v1 is not both booted and the default:\n{status}"
    );
    let grubenv = vm.sh("grep -a = /boot/grub2/grubenv").await?;
    ensure!(
        !grubenv.contains("boot_counter") && grubenv.lines().any(|l| l == "boot_success=1"),
        "the counting is not disarmed: {grubenv:?}"
    );
    rolled_back_records(vm, &failed, &v1).await?;
    // The admin names the OS that runs: the node is Done on it.
    machine_config(fleet, "60-worker-os", json!({"osImageURL": fleet.images.os_image_url("v1")?})).await?;
    let fixed = wait_converged(fleet, &target, OS_ROLLOUT_PER_NODE).await.context("back to v1")?;
    ensure!(fixed != first && fixed != target, "a new target: {fixed}");
    os_is(vm, "1", &v1).await?;
    Ok(())
}
