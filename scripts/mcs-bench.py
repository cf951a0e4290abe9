#!/usr/bin/env python3
"""Time a new host's first-boot fetch of its pool's config (GET /config/worker with a bootstrap
token, as Ignition asks) against an admin's GET of the pool object in the same run: a
coordinator on a fresh data directory, OpenShift's worker pool and SSH MachineConfig, and one
MachineConfig of 100 files of 3 KiB. Each request is a new TLS connection (urllib).

    python3 scripts/mcs-bench.py target/release/aloft-coordinator target/debug/aloftctl \
        ../shared/testdata/mco/bootstrap
"""
import json, ssl, statistics, subprocess, sys, time, urllib.request, os, tempfile, re
D = tempfile.mkdtemp()
coord = sys.argv[1]; ctl = sys.argv[2]; td = sys.argv[3]
p = subprocess.Popen([coord, "serve", "--data-dir", D, "--listen", "127.0.0.1:0"], stdout=subprocess.PIPE, stderr=open(D + "/log", "w"), text=True)
url = None
for line in p.stdout:
    m = re.search(r"listening on (https://\S+)", line)
    if m:
        url = m.group(1); break
kc = D + "/admin.kubeconfig"
def ctlrun(*a):
    subprocess.run([ctl, "--kubeconfig", kc, *a], check=True, capture_output=True)
for f in ["worker.machineconfigpool.yaml", "99_openshift-machineconfig_worker.yaml"]:
    ctlrun("apply", "-f", os.path.join(td, f))
import base64
files = [{"path": "/etc/bench/file-%03d.conf" % i, "mode": 420, "contents": {"source": "data:;base64," + base64.b64encode(os.urandom(3072)).decode()}} for i in range(100)]
mc = {"apiVersion": "machineconfiguration.openshift.io/v1", "kind": "MachineConfig", "metadata": {"name": "50-worker-bench", "labels": {"machineconfiguration.openshift.io/role": "worker"}}, "spec": {"config": {"ignition": {"version": "3.2.0"}, "storage": {"files": files}}}}
open(D + "/mc.json", "w").write(json.dumps(mc))
ctlrun("apply", "-f", D + "/mc.json")
tok = subprocess.run([coord, "token", "create", "--data-dir", D, "--name", "fleet", "--role", "bootstrap"], capture_output=True, text=True, check=True).stdout.strip()
admin = open(D + "/admin.token").read().strip()
ctx = ssl.create_default_context(cafile=D + "/ca.crt")
def get(path, token, accept="application/json"):
    r = urllib.request.Request(url + path, headers={"Authorization": "Bearer " + token, "Accept": accept})
    with urllib.request.urlopen(r, context=ctx) as resp:
        return resp.status, resp.read()
for _ in range(100):
    try:
        s, b = get("/config/worker", tok)
        if b"file-099" not in b:
            raise Exception("not rendered yet")
        break
    except Exception as e:
        time.sleep(0.1)
print("config bytes", len(b))
def bench(path, token, accept="application/json", n=300):
    ts = []
    for _ in range(n):
        t = time.perf_counter(); get(path, token, accept); ts.append(time.perf_counter() - t)
    ts.sort()
    return statistics.median(ts) * 1000, ts[int(n * 0.99) - 1] * 1000
base = bench("/apis/machineconfiguration.openshift.io/v1/machineconfigpools/worker", admin)
ign = bench("/config/worker", tok, "application/vnd.coreos.ignition+json;version=3.4.0, */*;q=0.1")
ign31 = bench("/config/worker", tok, "application/vnd.coreos.ignition+json;version=3.1.0, */*;q=0.1")
print("baseline GET pool (admin JSON read): median %.3f ms p99 %.3f ms" % base)
print("/config/worker as 3.4.0: median %.3f ms p99 %.3f ms (%.2fx)" % (ign[0], ign[1], ign[0] / base[0]))
print("/config/worker as 3.1.0: median %.3f ms p99 %.3f ms (%.2fx)" % (ign31[0], ign31[1], ign31[0] / base[0]))
p.terminate()
