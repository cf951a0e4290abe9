#!/usr/bin/env bash
# The main job: install what is needed, start a coordinator on the embedded store (HTTPS, a CA
# and an admin token generated into a temp data dir), declare pools and MachineConfigs with
# aloftctl and with kubectl, and watch the pool render. Leaves nothing running.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
echo "== building (debug) ==" >&2
cargo build --bins -q -p aloft-coordinator
bin=target/debug
data=$(mktemp -d /tmp/aloft-demo.XXXXXX)
log=$data/coordinator.log
"$bin/aloft-coordinator" serve --data-dir "$data" --listen 127.0.0.1:0 >"$data/stdout" 2>"$log" &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null || true' EXIT
for _ in $(seq 100); do grep -q listening "$data/stdout" 2>/dev/null && break; sleep 0.1; done
cat "$data/stdout"
export ALOFT_KUBECONFIG=$data/admin.kubeconfig
ctl() { echo "+ aloftctl $*" >&2; "$bin/aloftctl" "$@"; }
kc() { echo "+ kubectl $*" >&2; kubectl --kubeconfig "$data/admin.kubeconfig" "$@"; }
wait_rendered() { # pool, previous config name
  for _ in $(seq 100); do
    cur=$("$bin/aloftctl" get mcp "$1" -o json | sed -n 's/.*"name": "\(rendered-[^"]*\)".*/\1/p' | head -1)
    [ -n "$cur" ] && [ "$cur" != "${2:-}" ] && { echo "$cur"; return; }
    sleep 0.1
  done
  echo "pool $1 did not render" >&2; exit 1
}

echo; echo "== 1. OpenShift's own worker pool and SSH config, applied unchanged =="
ctl apply -f ../shared/testdata/mco/bootstrap/worker.machineconfigpool.yaml \
          -f ../shared/testdata/mco/bootstrap/99_openshift-machineconfig_worker.yaml
first=$(wait_rendered worker)
echo "worker rendered to $first"
ctl get mcp -o wide
echo; echo "== 2. A day-2 MachineConfig, applied with kubectl =="
kc apply -f examples/50-worker-chrony.yaml
second=$(wait_rendered worker "$first")
echo "worker re-rendered: $first -> $second"
kc get mc
ctl describe mcp worker
echo; echo "== 3. Bad input is refused and changes nothing =="
printf 'apiVersion: machineconfiguration.openshift.io/v1\nkind: MachineConfig\nmetadata: {name: bad-version}\nspec: {config: {ignition: {version: 9.9.9}}}\n' >"$data/bad.yaml"
ctl apply -f "$data/bad.yaml" || true
ctl get mc bad-version 2>&1 || true
echo; echo "The coordinator kept its state in $data/aloft.db (SQLite, WAL)."
echo "Nodes join with aloft-agent (the node agent issue); this demo shows the coordinator side."
