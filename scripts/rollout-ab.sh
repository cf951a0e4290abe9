#!/usr/bin/env bash
# Interleaved A/B runs of the fleet simulator: the host's speed drifts between runs by more than
# most single changes gain, so builds are compared in alternation, in one sitting.
#
#   scripts/rollout-ab.sh ROUNDS NODES LABEL=COORDINATOR:BENCH [LABEL=COORDINATOR:BENCH ...]
#
# COORDINATOR and BENCH are release binaries of `aloft-coordinator` and `rollout-bench` (keep
# copies of each build outside target/, e.g. /tmp/a/...). Each round runs every build once: its
# binaries are copied to target/release/, then
#   rollout-bench --nodes NODES --max-unavailable 10% --per-node-ms 500
# runs (PER_NODE_MS overrides the 500). One line per run: ratio, coordinator and simulator CPU,
# the steal ticks of /proc/stat (the hypervisor taking the CPU) and the host speed the bench timed
# before and after the run (ms, lower is faster); at the end, per build, the
# mean ratio and the mean quotient of coordinator over simulator CPU. With AB_LOG=DIR each run's
# whole output is kept as DIR/ROUND-LABEL.out. The binaries that were in
# target/release/ are put back afterwards, with their times (cargo would otherwise take the last
# build's copies there for up to date).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ $# -lt 3 ]; then
  sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
fi
rounds=$1 nodes=$2
shift 2
for spec in "$@"; do
  IFS=: read -r coord bench <<<"${spec#*=}"
  for f in "$coord" "$bench"; do
    [ -x "$f" ] || { echo "rollout-ab: $f is not an executable (in $spec)" >&2; exit 2; }
  done
done
saved=$(mktemp -d)
restore() {
  for b in aloft-coordinator rollout-bench; do
    if [ -e "$saved/$b" ]; then cp -p "$saved/$b" "target/release/$b"; fi
  done
  rm -rf "$saved"
}
trap restore EXIT
for b in aloft-coordinator rollout-bench; do
  if [ -e "target/release/$b" ]; then cp -p "target/release/$b" "$saved/$b"; fi
done
steal() { awk '/^cpu /{print $9}' /proc/stat; }
for r in $(seq 1 "$rounds"); do
  for spec in "$@"; do
    label=${spec%%=*}
    IFS=: read -r coord bench <<<"${spec#*=}"
    install -m 0755 "$coord" target/release/aloft-coordinator
    install -m 0755 "$bench" target/release/rollout-bench
    s0=$(steal)
    out=$(ALOFT_TEST_NO_BUILD=1 target/release/rollout-bench --nodes "$nodes" --max-unavailable 10% \
      --per-node-ms "${PER_NODE_MS:-500}" 2>&1) || { echo "$out" | tail -20 >&2; exit 1; }
    s1=$(steal)
    if [ -n "${AB_LOG:-}" ]; then mkdir -p "$AB_LOG" && echo "$out" >"$AB_LOG/$r-$label.out"; fi
    ratio=$(grep -o 'ratio [0-9.]*' <<<"$out" | cut -d' ' -f2)
    coord_cpu=$(grep -o 'coordinator CPU [0-9.]*' <<<"$out" | cut -d' ' -f3)
    sim_cpu=$(grep -o "fleet's CPU [0-9.]*" <<<"$out" | cut -d' ' -f3)
    # Builds from before the host speed line print none.
    speed=$(grep -o 'Node in [0-9.]* ms before the run, [0-9.]* ms after' <<<"$out" | awk '{print $3 "/" $8}' || true)
    echo "round $r $label: ratio $ratio, coordinator CPU $coord_cpu s, simulator CPU $sim_cpu s, steal $((s1 - s0)) ticks${speed:+, host speed $speed ms}"
    echo "$label $ratio $coord_cpu $sim_cpu" >>"$saved/runs"
  done
done
# Per build: the mean ratio, and the mean of coordinator CPU over simulator CPU, which cancels
# most of the host's drift (both run on the same cores at the same time).
awk '{ if (!($1 in n)) order[++k] = $1; n[$1]++; ratio[$1] += $2; q[$1] += $3 / $4 }
  END { for (i = 1; i <= k; i++) { b = order[i]
        printf "%s: %d runs, mean ratio %.3f, coordinator/simulator CPU %.3f\n", b, n[b], ratio[b] / n[b], q[b] / n[b] } }' \
  "$saved/runs"
