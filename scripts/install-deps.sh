#!/usr/bin/env bash
# Install what building and testing aloft needs on Debian 12, as root (dbus-daemon: the agent's
# tests run a private bus; libostree-dev/ostree/gpg/gpg-agent: the OS helper (osd/) links libostree
# 2022.7 and its tests build, sign and deploy real commits; systemd: its systemd-socket-activate
# starts the OS helper as systemd's socket activation would; tzdata: the time zones of pools'
# maintenance windows; protobuf-compiler: the etcd client's build compiles etcd's gRPC API; etcd-server: the
# etcd store backend's tests run a real etcd on loopback; grub-common: grub-editenv, which the OS
# helper's boot-counting test reads and writes GRUB's environment block with). Idempotent and quick when
# everything is already there. The Rust toolchain (stable 1.95) is expected on the machine.
set -euo pipefail

need=()
for pkg in build-essential pkg-config ca-certificates dbus-daemon libostree-dev ostree gpg gpg-agent systemd tzdata protobuf-compiler etcd-server grub-common; do
  # Installed, not merely known to dpkg (`dpkg -s` also succeeds for a package removed with its
  # configuration files left behind).
  [[ "$(dpkg-query -W -f='${db:Status-Status}' "$pkg" 2>/dev/null)" == installed ]] || need+=("$pkg")
done
# kubectl is a test client. Machine images may already carry one (the `kubectl` package); Debian's
# kubernetes-client conflicts with it, so install that only when there is none.
if ! command -v kubectl >/dev/null 2>&1; then
  need+=(kubernetes-client)
fi
if ((${#need[@]})); then
  echo "installing: ${need[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  # Another apt (an image build) may hold the lock: wait for it rather than fail.
  apt-get -o DPkg::Lock::Timeout=600 update -qq
  apt-get -o DPkg::Lock::Timeout=600 install -y -qq "${need[@]}" >/dev/null
fi
if ! command -v cargo >/dev/null 2>&1; then
  echo "cargo not found: aloft needs a Rust toolchain (stable 1.95) on PATH" >&2
  exit 1
fi
