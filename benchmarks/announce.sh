#!/bin/sh
# The scale test's command: announce "ready TOKEN PID PPID 0" on FIFO, then
# become `sleep`, which dies of SIGTERM like most programs. A shell and a
# sleep cost a few hundred KiB, so hundreds of them measure the supervisors,
# not the commands.  Usage: announce.sh TOKEN FIFO
echo "ready $1 $$ $PPID 0" > "$2"
exec sleep 3600
