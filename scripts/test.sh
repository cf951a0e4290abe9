#!/usr/bin/env bash
# Install what the tests need, then run them all: unit tests, API conformance over HTTPS, real
# kubectl against the coordinator, crash recovery, bad input; the fleet's tests again on etcd;
# then the VM tests (real VMs under QEMU booted from images/, scenarios a-j). Exits non-zero on
# any failure.
set -euo pipefail
cd "$(dirname "$0")/.."
# Each phase says how long it took (CI keeps only the tail of the output: the last phase's line
# and the total are what show where a slow run spent its time).
START=$SECONDS PHASE_START=$SECONDS
phase() {
  echo "[test.sh] $1: $((SECONDS - PHASE_START)) s (total $((SECONDS - START)) s)" >&2
  PHASE_START=$SECONDS
}
bash scripts/install-deps.sh
bash scripts/install-vm-deps.sh
phase "installing the dependencies"
export ALOFT_REQUIRE_KUBECTL=1
# Tests that need root or a host tool (systemd-socket-activate) fail here instead of skipping.
export ALOFT_REQUIRE_HOST_TOOLS=1
# The binaries record which commit they were built from (`--version`, /version, the Nodes).
source scripts/build-env.sh
# A run from a clean checkout gains nothing from incremental state (1.4 GB of it); keep the disk
# footprint of a full run near 4 GB plus the VM images.
export CARGO_INCREMENTAL=${CARGO_INCREMENTAL-0}
echo "disk before the build: $(df -h --output=avail . | tail -1 | tr -d ' ') free" >&2
# The integration tests start the real binaries: build them first.
cargo build --workspace --bins
phase "building the binaries"
cargo test --workspace --exclude aloft-vm-tests --no-run 2>&1
phase "building the workspace tests"
# The VM tests' OS images are built while the workspace tests run: those mostly wait on the
# servers and agents they start (13 min of running took ~8 CPU-minutes of the 26 two cores give),
# and the image build (cargo, mmdebstrap, ostree) fills that, niced so that the tests' servers
# and agents come first when both want the CPU. Its own target directory keeps the
# two cargo runs apart (they share no artifacts: other profiles); the scenarios then take the images as they
# are (ALOFT_VM_IMAGES). Its log: target/vm-tests/images-build.log. The arguments are those the
# harness uses when it builds them itself (vm-tests/src/images.rs): keep the two the same.
IMAGES=$PWD/target/vm-tests/images IMAGES_LOG=$PWD/target/vm-tests/images-build.log
mkdir -p "$IMAGES"
CARGO_TARGET_DIR=$PWD/target/vm-image-build nice -n 10 images/build --out "$IMAGES" --with-bad-commit --with-failpoints \
    --cargo-profile vm-image >"$IMAGES_LOG" 2>&1 &
IMAGES_PID=$!
trap 'kill "$IMAGES_PID" 2>/dev/null || true' EXIT
# Four tests of a binary at a time, not one per core: they wait more than they compute (the two
# longest binaries, aloftctl and fleet, took 14-17% less time with four than with two, BENCHMARKS.md).
cargo test --workspace --exclude aloft-vm-tests -- --test-threads=4 2>&1
phase "the workspace tests"
# The fleet's own tests again with every coordinator's store on etcd (an etcd of its own per
# coordinator, on loopback): the API, watches, rollouts, drains and agents through the watch
# cache in front of etcd, as `serve --etcd-servers` runs them.
ALOFT_TEST_STORE=etcd cargo test -p aloft-tests --test kubectl --test node_watch --test rollout --test drain \
    --test fleet -- --test-threads=4 2>&1
phase "the fleet's tests on etcd"
if ! wait "$IMAGES_PID"; then
  echo "images/build failed; the end of $IMAGES_LOG:" >&2
  tail -40 "$IMAGES_LOG" >&2
  exit 1
fi
trap - EXIT
phase "the rest of the image build"
export ALOFT_VM_IMAGES=$IMAGES
# VM tests: a missing QEMU/mmdebstrap is a failure here, not a skip. CI runs the nine scenarios (a-h took 51 minutes
# on 2 cores in the 73rd session, BENCHMARKS.md): a (a rebootless change), b (a rollout with an OS update), c (a bad OS
# rolled back, the rollout stopped), d (a power cut right after staging: it caught an agent that
# went Degraded instead of staging again; then one held right after ostree finalized), e (a file with no policy reboots once), f (power
# cuts at six named moments of an OS update and its rollback, held there by the agent's
# failpoints, then a file-only config after the rollback; a restart after a stage drops the
# staged deployment before staging again), g (a new OS that cannot reach the coordinator rolls back by
# itself), h (a release from an update graph: the ClusterVersion takes v2 and it reaches the VM) and i (a
# kernel that panics: the bootloader's boot counting falls back, the agent keeps the previous OS).
# ALOFT_VM_TESTS names a subset (test-name filters; '' means every test not ignored, the same nine).
export ALOFT_REQUIRE_VM=1
cargo test -p aloft-vm-tests --lib 2>&1
phase "the VM harness's unit tests"
# shellcheck disable=SC2086 # the filters are words
cargo test -p aloft-vm-tests --test scenarios -- --test-threads=1 \
    ${ALOFT_VM_TESTS-a_rebootless b_os_update_one_node_at_a_time c_bad_os d_power_cut e_file_without f_power_cuts g_new_os h_release i_kernel_panic j_failing_agent k_root} 2>&1
phase "the VM scenarios"
