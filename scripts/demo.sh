#!/usr/bin/env bash
# The main job: install what is needed, start a coordinator on the embedded store (HTTPS, CA and
# admin token generated into a temp dir) and a local fleet of three aloft-agents on SANDBOXED
# roots, declare OpenShift's worker pool and MachineConfigs with aloftctl and kubectl, and watch
# the rollout converge. Leaves nothing running.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
# The binaries record which commit they were built from (`--version`, /version, the Nodes).
source scripts/build-env.sh
echo "== building (debug) ==" >&2
cargo build -q --bins -p aloft-coordinator -p aloft-agent --features aloft-agent/test-support
bin=$PWD/target/debug
work=$(mktemp -d /tmp/aloft-demo.XXXXXX)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT

"$bin/aloft-coordinator" serve --data-dir "$work/coordinator" --listen 127.0.0.1:0 \
  >"$work/coordinator.out" 2>"$work/coordinator.log" &
pids+=($!)
for _ in $(seq 100); do grep -q listening "$work/coordinator.out" 2>/dev/null && break; sleep 0.1; done
cat "$work/coordinator.out"
url=$(sed -n 's/^aloft-coordinator listening on //p' "$work/coordinator.out")
export ALOFT_KUBECONFIG=$work/coordinator/admin.kubeconfig
ctl() { echo "+ aloftctl $*" >&2; "$bin/aloftctl" "$@"; }
kc() { echo "+ kubectl $*" >&2; kubectl --kubeconfig "$ALOFT_KUBECONFIG" "$@"; }

echo
echo "== 1. A fleet of three hosts =="
echo "   These hosts are SANDBOXED ROOT DIRECTORIES under $work/hosts, each with its own private"
echo "   D-Bus serving a test systemd/logind: files really are written there, unit calls and"
echo "   reboots are only recorded. Real hosts are the VM tests (vm-tests/)."
"$bin/aloft-coordinator" token create --data-dir "$work/coordinator" --name demo-fleet --role bootstrap >"$work/bootstrap.token"
for i in 0 1 2; do
  root=$work/hosts/worker-$i
  mkdir -p "$root"
  "$bin/aloft-sandbox-host" "$root" >"$work/bus-$i" 2>"$work/sandbox-$i.log" &
  pids+=($!)
  for _ in $(seq 100); do [ -s "$work/bus-$i" ] && break; sleep 0.1; done
  "$bin/aloft-agent" --coordinator "$url" --ca "$work/coordinator/ca.crt" \
    --bootstrap-token-file "$work/bootstrap.token" --node-name "worker-$i" \
    --labels "node-role.kubernetes.io/worker=,topology.kubernetes.io/zone=zone-$((i % 2))" \
    --root "$root" --bus-address "$(cat "$work/bus-$i")" --metrics-listen "127.0.0.1:0" \
    2>"$work/agent-$i.log" &
  pids+=($!)
done
for _ in $(seq 200); do
  [ "$("$bin/aloftctl" get nodes -o name 2>/dev/null | wc -l)" = 3 ] && break; sleep 0.1
done
ctl get nodes

config_of() { "$bin/aloftctl" get mcp worker -o json | tr -d ' \n' | sed -n 's/.*"status":{.*"configuration":{"name":"\(rendered-[^"]*\)".*/\1/p'; }

echo
echo "== 2. OpenShift's worker pool and SSH config, applied unchanged with aloftctl =="
ctl apply -f ../shared/testdata/mco/bootstrap/worker.machineconfigpool.yaml \
          -f ../shared/testdata/mco/bootstrap/99_openshift-machineconfig_worker.yaml
ctl rollout status mcp/worker --timeout 120
first=$(config_of)
echo "   (SSH keys changed: no reboot, by MCO's default node disruption policy)"

echo
echo "== 3. A day-2 change with kubectl: the image policy (policy: reload crio, no reboot) =="
kc apply -f examples/60-worker-image-policy.yaml
ctl rollout status mcp/worker --timeout 120 --not-config "$first"
ctl get mcp
ctl get nodes -o wide
echo "   on disk in worker-0's root:"
ls -l "$work/hosts/worker-0/etc/containers/policy.json" "$work/hosts/worker-0/home/core/.ssh/authorized_keys.d/ignition"
echo "   worker-0 agent status:"
"$bin/aloft-agent" status --root "$work/hosts/worker-0" --bus-address "$(cat "$work/bus-0")"

echo
echo "== 4. Bad input is refused and changes nothing =="
printf 'apiVersion: machineconfiguration.openshift.io/v1\nkind: MachineConfig\nmetadata: {name: bad-version}\nspec: {config: {ignition: {version: 9.9.9}}}\n' >"$work/bad.yaml"
ctl apply -f "$work/bad.yaml" || true
ctl get mcp worker

echo
echo "== 5. Rendered configs nothing uses any more, pruned as oc adm prune does =="
ctl adm prune renderedmachineconfigs list
ctl adm prune renderedmachineconfigs --pool-name worker
ctl adm prune renderedmachineconfigs --pool-name worker --confirm

echo
echo "== 6. The coordinator's own health, the pool's metrics, and what the agents asked of the API =="
ctl get --raw '/readyz?verbose'
ctl get --raw /metrics | grep -E '^aloft_(pool_(machine|updated_machine|degraded_machine)_count|controller_restarts_total)'
ctl get --raw /metrics | grep -E '^apiserver_(request_total\{verb="PATCH".*resource="nodes"|longrunning_requests\{verb="WATCH".*resource="nodes")'
echo
echo "Coordinator state: $work/coordinator/aloft.db and aloft-tokens.db (SQLite, WAL). Logs: $work/*.log"
