#!/bin/sh
# mmdebstrap --customize-hook for the VM host matrix (scripts/host-matrix): run on the host with
# the guest's root directory as $1. Part of the rootfs cache key: any change rebuilds the image.
set -eu
R="$1"
echo tether-guest > "$R/etc/hostname"
printf '127.0.0.1 localhost\n127.0.1.1 tether-guest\n' > "$R/etc/hosts"
printf '/dev/vda / ext4 rw,errors=remount-ro 0 1\n' > "$R/etc/fstab"
chroot "$R" passwd -d root >/dev/null
chroot "$R" useradd -m -u 1000 -s /bin/bash alice
chroot "$R" passwd -d alice >/dev/null
# The runner: a Type=simple service (a oneshot WantedBy multi-user.target would make
# `systemctl is-system-running --wait` wait for itself). It mounts the second disk, runs its
# run.sh with the results on the second serial port, prints the end marker, powers off.
cat > "$R/usr/local/sbin/host-matrix-runner" <<'EOS'
#!/bin/sh
out=/dev/ttyS1
exec 3>"$out"
systemctl is-system-running --wait >/dev/null 2>&1
echo "=== tether-matrix begin $(date -u +%s) uptime=$(cut -d' ' -f1 /proc/uptime)" >&3
rc=99
if [ -b /dev/vdb ]; then
    mkdir -p /mnt/share && mount -o ro /dev/vdb /mnt/share && sh /mnt/share/run.sh >&3 2>&1
    rc=$?
fi
echo "=== tether-matrix end rc=$rc uptime=$(cut -d' ' -f1 /proc/uptime)" >&3
sync
grep -qw tether.stay /proc/cmdline || systemctl poweroff
EOS
chmod 755 "$R/usr/local/sbin/host-matrix-runner"
cat > "$R/etc/systemd/system/host-matrix.service" <<'EOS'
[Unit]
Description=the VM host matrix runner (scripts/host-matrix)

[Service]
Type=simple
ExecStart=/usr/local/sbin/host-matrix-runner
StandardOutput=journal+console

[Install]
WantedBy=multi-user.target
EOS
mkdir -p "$R/etc/systemd/system/multi-user.target.wants"
ln -sf /etc/systemd/system/host-matrix.service "$R/etc/systemd/system/multi-user.target.wants/host-matrix.service"
# Nothing the matrix does not need slows the boot.
for u in apt-daily.timer apt-daily-upgrade.timer e2scrub_all.timer e2scrub_reap.service fstrim.timer podman-auto-update.timer podman-restart.service podman-clean-transient.service; do
    ln -sf /dev/null "$R/etc/systemd/system/$u"
done
rm -f "$R/etc/machine-id" && : > "$R/etc/machine-id"
