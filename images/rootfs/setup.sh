#!/bin/sh
# mmdebstrap customize hook for the aloft base rootfs: $1 = the rootfs directory.
# Everything here is generic OS setup; aloft's own files come later (images/overlay).
set -eu
R="$1"
echo aloft > "$R/etc/hostname"
printf '127.0.0.1 localhost\n127.0.1.1 aloft\n::1 localhost ip6-localhost ip6-loopback\n' > "$R/etc/hosts"
: > "$R/etc/fstab"
# The first boot of every machine makes its own machine-id.
: > "$R/etc/machine-id"; rm -f "$R/var/lib/dbus/machine-id"

# RHCOS-like: an unprivileged 'core' user (MachineConfigs' sshAuthorizedKeys land in its home,
# which lives in /var like every home on an ostree system). Root stays locked.
chroot "$R" useradd --no-create-home --home-dir /var/home/core --shell /bin/bash \
  --comment "aloft core user" --uid 1000 --user-group core

# Networking: systemd-networkd, DHCP on every ethernet link; wait-online for any one link only.
mkdir -p "$R/etc/systemd/network"
cat > "$R/etc/systemd/network/20-wired.network" <<'N'
[Match]
Name=en* eth*
[Network]
DHCP=ipv4
N
chroot "$R" systemctl enable systemd-networkd.service systemd-networkd-wait-online.service
mkdir -p "$R/etc/systemd/system/systemd-networkd-wait-online.service.d"
cat > "$R/etc/systemd/system/systemd-networkd-wait-online.service.d/10-any.conf" <<'N'
[Service]
ExecStart=
ExecStart=/lib/systemd/systemd-networkd-wait-online --any --timeout=60
N

# A persistent journal helps post-mortems across the reboots of an update.
mkdir -p "$R/etc/systemd/journald.conf.d"
printf '[Journal]\nStorage=persistent\n' > "$R/etc/systemd/journald.conf.d/10-aloft.conf"

# Nothing a VM needs: a getty on a display that does not exist, periodic apt and fs jobs.
for u in getty@tty1.service apt-daily.timer apt-daily-upgrade.timer e2scrub_all.timer \
         e2scrub_reap.service fstrim.timer dpkg-db-backup.timer; do
  chroot "$R" systemctl mask "$u" >/dev/null 2>&1 || true
done

# Debian's /usr/share/doc, man pages and locales are not needed on a node.
rm -rf "$R"/usr/share/doc/* "$R"/usr/share/man/* "$R"/usr/share/info/* "$R"/usr/share/locale/*
rm -rf "$R"/var/lib/apt/lists/* "$R"/var/cache/apt/*.bin
