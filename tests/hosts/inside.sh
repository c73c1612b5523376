#!/bin/sh
# One context of the VM host matrix, run inside it (as its user, in its cgroup): the black-box
# check, then the cgroup test files (tests.txt on the share disk) from a private copy of the
# source tree. Usage: inside.sh NAME EXPECT
S=/mnt/share
name=$1 expect=$2
echo "--- whoami $(id -un) uid=$(id -u) cgroup=$(grep '^0::' /proc/self/cgroup) XDG_RUNTIME_DIR=${XDG_RUNTIME_DIR:-} DBUS=${DBUS_SESSION_BUS_ADDRESS:-}"
w=$(mktemp -d /tmp/matrix-XXXXXX)
cp -a /opt/src/. "$w/"
cd "$w" || exit 99
PATH=/opt/tv/bin:$PATH
export PATH
t0=$(date +%s)
python3 $S/blackbox.py --context "$name" --expect "$expect"
echo "--- blackbox rc=$? secs=$(( $(date +%s) - t0 ))"
if [ -s $S/tests.txt ]; then
    t0=$(date +%s)
    # shellcheck disable=SC2046
    python3 -m pytest -q -rfEs --color=no -p no:cacheprovider --timeout=300 $(cat $S/tests.txt)
    echo "--- pytest rc=$? secs=$(( $(date +%s) - t0 ))"
fi
cd / && rm -rf "$w"
