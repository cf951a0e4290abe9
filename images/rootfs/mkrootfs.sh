#!/usr/bin/env bash
# mkrootfs.sh OUTDIR [APT_ARCHIVES_CACHE]: the aloft base rootfs (not yet ostree-shaped) with
# mmdebstrap from Debian 12 packages (packages.txt), a slim dracut initramfs in /boot.
# Called by images/build; its inputs (this file, setup.sh, dracut.conf, packages.txt) key the cache.
set -euo pipefail
OUT=$1 APTC=${2:-}
HERE=$(cd "$(dirname "$0")" && pwd)
PKGS=$(sed -e 's/#.*//' "$HERE/../packages.txt" | xargs | tr ' ' ,)
[ -n "$PKGS" ] || { echo "mkrootfs: empty package list" >&2; exit 1; }
q() { printf '%q' "$1"; }
HOOKS=(
  # the dracut config must be in place before the kernel's postinst builds the first initramfs
  --essential-hook="mkdir -p \"\$1/etc/dracut.conf.d\" && cp $(q "$HERE/dracut.conf") \"\$1/etc/dracut.conf.d/10-aloft.conf\""
  --customize-hook="$(q "$HERE/setup.sh") \"\$1\""
  --customize-hook='k=$(ls "$1/usr/lib/modules"); chroot "$1" dracut -q -f "/boot/initrd.img-$k" "$k"'
)
if [ -n "$APTC" ]; then   # keep downloaded .debs between builds of changed package lists
  mkdir -p "$APTC"
  HOOKS+=(--skip=essential/unlink --skip=cleanup/apt/cache
    --setup-hook="mkdir -p \"\$1/var/cache/apt/archives\"; cp -al $(q "$APTC")/. \"\$1/var/cache/apt/archives/\" 2>/dev/null || true"
    --customize-hook="cp -al \"\$1/var/cache/apt/archives/.\" $(q "$APTC")/ 2>/dev/null || true; rm -rf \"\$1\"/var/cache/apt/archives/*.deb")
fi
rm -rf "$OUT"
# No mirror given: mmdebstrap uses this machine's apt sources (Debian's archive).
mmdebstrap --quiet --variant=minbase --include="$PKGS" "${HOOKS[@]}" bookworm "$OUT"
