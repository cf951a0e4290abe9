#!/usr/bin/env bash
# ostreeify.sh TREE: reshape a Debian rootfs in place into an ostree commit tree:
# kernel + initramfs into /usr/lib/modules/$KVER, /etc -> /usr/etc (ostree merges it at deploy
# time), empty /var (per stateroot, recreated by tmpfiles), the usual ostree symlinks. Prints KVER.
set -euo pipefail
cd "$1"
kvers=(usr/lib/modules/*); [ ${#kvers[@]} = 1 ] || { echo "ostreeify: want exactly one kernel, found: ${kvers[*]}" >&2; exit 1; }
KVER=$(basename "${kvers[0]}")
[ -f "boot/vmlinuz-$KVER" ] && [ -f "boot/initrd.img-$KVER" ] || { echo "ostreeify: boot/vmlinuz-$KVER or boot/initrd.img-$KVER missing" >&2; exit 1; }
mv "boot/vmlinuz-$KVER" "usr/lib/modules/$KVER/vmlinuz"
mv "boot/initrd.img-$KVER" "usr/lib/modules/$KVER/initramfs.img"
rm -rf boot && mkdir boot
rm -f vmlinuz* initrd.img*
mv etc usr/etc
rm -rf var && mkdir var
rm -rf home root opt srv mnt media usr/local tmp
ln -s var/home home; ln -s var/roothome root; ln -s var/opt opt; ln -s var/srv srv
ln -s var/mnt mnt; ln -s run/media media; ln -s ../var/usrlocal usr/local
mkdir -m 1777 tmp
# mmdebstrap's root mode leaves device nodes in /dev: ostree refuses them
rm -rf dev run proc sys && mkdir dev run proc sys
mkdir sysroot; ln -s sysroot/ostree ostree
echo "$KVER"
