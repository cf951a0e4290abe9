#!/usr/bin/env bash
# Install what building OS images (images/build) and booting them (images/smoke-boot, vm-tests/)
# needs on Debian 12, as root. Idempotent: installs only what is missing, quick when all is there.
# (scripts/install-deps.sh covers building and testing the Rust code.)
set -euo pipefail

# mmdebstrap: the rootfs; ostree: commits, summary, directory sysroot; libostree-dev: the OS
# helper (osd/) links libostree; e2fsprogs: mkfs.ext4 -d and debugfs (no mounts); gpg: signing;
# qemu-system-x86: boot under TCG; qemu-utils: qemu-img (per-VM qcow2 overlays, reading a VM's
# disk); socat: host end of the virtio-serial command channel;
# jq, bc: scripts; curl: smoke-boot asks its coordinator for the Node; openssl: a test CA in
# images/check; python3: smoke-boot --update serves the repo
# over HTTP (host only, the image has no python); binutils: strip the agent's debuginfo.
pkgs=(mmdebstrap ostree libostree-dev e2fsprogs gpg gpg-agent qemu-system-x86 qemu-utils socat jq bc curl openssl python3 binutils
      ca-certificates coreutils util-linux)
missing() {
  need=()
  for pkg in "${pkgs[@]}"; do
    # Installed, not merely known to dpkg (`dpkg -s` also succeeds for a package removed with its
    # configuration files left behind).
    [[ "$(dpkg-query -W -f='${db:Status-Status}' "$pkg" 2>/dev/null)" == installed ]] || need+=("$pkg")
  done
}
# Twice: an install can remove a package of the list. The machine image carries qemu-utils from
# bookworm-backports, and installing bookworm's qemu-system-x86 removed it (apt's history says
# only "Remove"); the second round installs bookworm's qemu-utils.
updated=
for _ in 1 2; do
  missing
  ((${#need[@]})) || break
  echo "installing: ${need[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  [[ -n "$updated" ]] || { apt-get -o DPkg::Lock::Timeout=600 update -qq; updated=1; }
  apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends "${need[@]}" >/dev/null
done
for cmd in mmdebstrap ostree mkfs.ext4 debugfs gpg qemu-system-x86_64 qemu-img socat jq; do
  command -v "$cmd" >/dev/null 2>&1 || { echo "install-vm-deps: $cmd still missing after install" >&2; exit 1; }
done
