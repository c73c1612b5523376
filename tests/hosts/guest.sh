#!/bin/sh
# The VM host matrix's driver inside a guest (scripts/host-matrix puts it on the guest's second
# disk, /mnt/share, with the context list in contexts.txt). Run as root by the guest's runner
# service; everything it prints goes to the second serial port, which the host parses.
# Each line of contexts.txt: NAME EXPECT (EXPECT: enforce, refuse or either).
S=/mnt/share
TLIMIT=$(cat $S/context-timeout 2>/dev/null || echo 900)
echo "=== guest $(. /etc/os-release; echo "$PRETTY_NAME") kernel $(uname -r) systemd $(systemctl --version | head -1 | cut -d' ' -f2)"
echo "=== guest cgroup mounts: $(grep cgroup /proc/mounts | cut -d' ' -f2,3 | tr '\n' ';')"
echo "=== guest cgroup.controllers: $(cat /sys/fs/cgroup/cgroup.controllers 2>/dev/null || cat /sys/fs/cgroup/unified/cgroup.controllers 2>/dev/null)"
in_ctx="/bin/sh $S/inside.sh"
while read -r name expect; do
    [ -n "$name" ] || continue
    echo "=== context $name begin uptime=$(cut -d' ' -f1 /proc/uptime)"
    t0=$(date +%s)
    case "$name" in
    root-service)  # root in a system service of its own (no Delegate)
        timeout "$TLIMIT" systemd-run --wait --pipe --quiet --collect --unit="matrix-$name" \
            -p TimeoutStartSec=infinity $in_ctx "$name" "$expect" </dev/null ;;
    root-login)    # root in a login session: pam_systemd puts it in a session-N.scope
        timeout "$TLIMIT" su -l root -c "$in_ctx $name $expect" </dev/null ;;
    root-delegate) # the documented remedy: a scope with Delegate=yes that also holds the caller
        timeout "$TLIMIT" systemd-run --scope -p Delegate=yes --quiet $in_ctx "$name" "$expect" </dev/null ;;
    alice)         # a non-root user in a login session, with her systemd manager (linger)
        loginctl enable-linger alice
        systemctl start user@1000.service
        timeout "$TLIMIT" su -l alice -c "$in_ctx $name $expect" </dev/null ;;
    podman|podman-privileged)
        priv=""; [ "$name" = podman-privileged ] && priv=--privileged
        timeout "$TLIMIT" podman run --rm --network none $priv \
            -v /opt/tv:/opt/tv:ro -v /opt/src:/opt/src:ro -v $S:$S:ro \
            --rootfs /srv/ctr /bin/sh $S/inside.sh "$name" "$expect" </dev/null ;;
    *) echo "unknown context $name"; false ;;
    esac
    rc=$?
    echo "=== context $name end rc=$rc secs=$(( $(date +%s) - t0 ))"
done < $S/contexts.txt
