#!/usr/bin/env python3
"""What a stored MachineConfig costs the coordinator's memory, as its allocator counts it.

Starts `aloft-coordinator serve` (plain HTTP on loopback, a temp data dir), creates COUNT
MachineConfigs in no pool twice over, and prints the bytes jemalloc has allocated per config
over the second batch (the first fills the store's page caches). Two shapes: FILES small files
(a map per file entry; the worst case for a parsed JSON tree) and MCO's own e2e template with
100 files of ~12 KB of base64 each (`shared/testdata/mco/e2e-templates/bz1866117-*.yaml`).

    python3 scripts/mc-memory.py [--coordinator target/release/aloft-coordinator] [--count 200]
"""
import argparse, json, os, re, subprocess, sys, tempfile, time, urllib.request

ap = argparse.ArgumentParser()
ap.add_argument("--coordinator", default="target/release/aloft-coordinator")
ap.add_argument("--count", type=int, default=200)
ap.add_argument("--files", type=int, default=100)
ap.add_argument("--port", type=int, default=16443)
a = ap.parse_args()

d = tempfile.mkdtemp(prefix="aloft-mc-memory-")
url = f"http://127.0.0.1:{a.port}"
p = subprocess.Popen([a.coordinator, "serve", "--data-dir", f"{d}/data", "--listen", f"127.0.0.1:{a.port}",
                      "--insecure-http"], stdout=subprocess.DEVNULL, stderr=open(f"{d}/log", "w"))
try:
    for _ in range(100):
        if os.path.exists(f"{d}/data/admin.token"):
            break
        time.sleep(0.1)
    time.sleep(1)
    tok = open(f"{d}/data/admin.token").read().strip()
    hdr = {"Authorization": "Bearer " + tok}

    def allocated():
        time.sleep(1)
        m = urllib.request.urlopen(urllib.request.Request(url + "/metrics", headers=hdr)).read().decode()
        return int(re.search(r'^aloft_allocator_bytes\{kind="allocated"\} (\d+)', m, re.M).group(1))

    def post(mc):
        body = json.dumps(mc).encode()
        r = urllib.request.Request(url + "/apis/machineconfiguration.openshift.io/v1/machineconfigs", data=body,
                                   headers={**hdr, "Content-Type": "application/json"}, method="POST")
        urllib.request.urlopen(r).read()
        return len(body)

    def small(i):
        files = [{"path": f"/etc/f{i}-{j}.conf", "mode": 420, "contents": {"source": "data:,rollout"}}
                 for j in range(a.files)]
        return {"apiVersion": "machineconfiguration.openshift.io/v1", "kind": "MachineConfig",
                "metadata": {"name": f"small-{i}", "labels": {"role": "none"}},
                "spec": {"config": {"ignition": {"version": "3.4.0"}, "storage": {"files": files}}}}

    here = os.path.dirname(os.path.abspath(__file__))
    tpl = os.path.join(here, "../../shared/testdata/mco/e2e-templates/bz1866117-add-dummy-files.yaml")
    import yaml  # PyYAML (Debian: python3-yaml)
    big_tpl = yaml.safe_load(open(tpl))["objects"][0]

    def big(i):
        mc = json.loads(json.dumps(big_tpl))
        mc["metadata"] = {"name": f"big-{i}", "labels": {"role": "none"}}
        return mc

    for shape, make, count in [("small files", small, a.count), ("MCO e2e bz1866117", big, max(a.count // 10, 1))]:
        for i in range(count):
            post(make(i))
        before = allocated()
        size = 0
        for i in range(count, 2 * count):
            size = post(make(i))
        per = (allocated() - before) / count
        print(f"{shape}: {size} bytes of JSON each, {per / 1024:.1f} KiB allocated each ({per / size:.2f}x), "
              f"{count} configs")
finally:
    p.kill()
