#!/bin/sh
# A node's container entry point (docker-compose.yml): creates the node home on first start, then runs
# the daemon in the foreground (exec, so `docker stop` sends SIGTERM straight to sharesync).
#
# Usage: node.sh HOME NAME LISTEN ADVERTISE    e.g. node.sh /nodes/a Alice 0.0.0.0:7420 a:7420
set -eu
home=$1 name=$2 listen=$3 advertise=$4
if [ ! -e "$home/identity.key" ]; then
    mkdir -p "$home"
    sharesync init --home "$home" --name "$name" --listen "$listen" --advertise "$advertise"
fi
# A control socket left by a killed container is stale: the daemon finds nobody answering and replaces it.
exec sharesync run --home "$home"
