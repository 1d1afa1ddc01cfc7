#!/usr/bin/env bash
# The two-device walkthrough across two network namespaces: node A in one, node B in another, joined by
# a veth link with private test addresses (10.200.0.1/24 and 10.200.0.2/24 by default) that exist only
# inside the namespaces this script creates. Each daemon listens on and advertises its own namespace
# address, so B reaches A only over the veth link. demo/walkthrough.py runs in the root namespace and
# talks to each daemon through the control socket in its home (a file, reachable from any namespace).
# The daemons and the namespaces (with the veth pair) are removed on every exit path.
#
# Usage: demo/netns.sh [--keep] [--timeout SECONDS]
# Environment: SHARESYNC_BIN=/path/to/sharesync skips the build; NETNS_SUBNET=10.200.0 picks the /24.
# Needs root and iproute2; where namespaces cannot be made it prints "skipped: ..." and exits 0.
set -euo pipefail

DEMO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=demo/lib.sh
source "$DEMO_ROOT/demo/lib.sh"

demo_parse_arguments "demo/netns.sh" "${BASH_SOURCE[0]}" 2,11 "$@"

skip() { echo "demo/netns.sh skipped: $*"; exit 0; }

[[ "$(id -u)" -eq 0 ]] || skip "network namespaces need root"
command -v ip >/dev/null 2>&1 || skip "no 'ip' command (Debian package iproute2)"
command -v python3 >/dev/null 2>&1 || skip "python3 is needed (apt-get install python3)"

subnet=${NETNS_SUBNET:-10.200.0}
address_a="$subnet.1"
address_b="$subnet.2"
port=7420
suffix=$$
ns_a="ss-demo-a-$suffix"
ns_b="ss-demo-b-$suffix"
veth_a="ssa$suffix"   # interface names: at most 15 characters
veth_b="ssb$suffix"
veth_a=${veth_a:0:15}
veth_b=${veth_b:0:15}

remove_namespaces() {
    ip netns del "$ns_a" 2>/dev/null || true   # deleting a namespace deletes its end of the veth pair,
    ip netns del "$ns_b" 2>/dev/null || true   # and with it the other end
    ip link del "$veth_a" 2>/dev/null || true  # in case it never moved into its namespace
}
DEMO_CLEANUP_HOOK=remove_namespaces

# Probe before building: can this machine make a namespace at all (containers often cannot)?
if ! ip netns add "$ns_a" 2>"/tmp/ss-netns-probe.$$"; then
    reason=$(head -n 1 "/tmp/ss-netns-probe.$$")
    rm -f "/tmp/ss-netns-probe.$$"
    skip "cannot create a network namespace (${reason:-ip netns add failed})"
fi
rm -f "/tmp/ss-netns-probe.$$"
WORK=""
trap demo_cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

if ! ip netns add "$ns_b" 2>/dev/null || ! ip link add "$veth_a" type veth peer name "$veth_b" 2>/dev/null; then
    remove_namespaces
    trap - EXIT
    skip "cannot create a second namespace or a veth pair"
fi
ip link set "$veth_a" netns "$ns_a"
ip link set "$veth_b" netns "$ns_b"
ip -n "$ns_a" link set lo up
ip -n "$ns_b" link set lo up
ip -n "$ns_a" addr add "$address_a/24" dev "$veth_a"
ip -n "$ns_b" addr add "$address_b/24" dev "$veth_b"
ip -n "$ns_a" link set "$veth_a" up
ip -n "$ns_b" link set "$veth_b" up

demo_build
WORK="$(mktemp -d /tmp/sharesync-netns.XXXXXX)"

echo "== sharesync two-device walkthrough: two network namespaces ($ns_a $address_a, $ns_b $address_b; homes in $WORK)"
"$SHARESYNC_BIN" init --home "$WORK/a" --name Alice --email alice@example.org \
    --listen "$address_a:$port" --advertise "$address_a:$port" --json >"$WORK/a.init.json"
"$SHARESYNC_BIN" init --home "$WORK/b" --name Bob --email bob@example.org \
    --listen "$address_b:$port" --advertise "$address_b:$port" --json >"$WORK/b.init.json"
demo_start_daemon a "$WORK/a" ip netns exec "$ns_a"
echo "node A listening on $DEMO_ADDRESS in $ns_a (pid ${DEMO_PIDS[0]})"
demo_start_daemon b "$WORK/b" ip netns exec "$ns_b"
echo "node B listening on $DEMO_ADDRESS in $ns_b (pid ${DEMO_PIDS[1]})"
# B's namespace must reach A's port over the veth link (a bare TCP connect; A logs a closed handshake).
if ! ip netns exec "$ns_b" timeout 5 bash -c "exec 3<>/dev/tcp/$address_a/$port" 2>/dev/null; then
    demo_log "demo/netns.sh: $ns_b cannot open a TCP connection to $address_a:$port over the veth link"
    exit 1
fi
echo "$ns_b reaches $address_a:$port over the veth link"

python3 "$DEMO_ROOT/demo/walkthrough.py" --bin "$SHARESYNC_BIN" --a "$WORK/a" --b "$WORK/b" --timeout "$timeout" &
walkthrough=$!
DEMO_PIDS=("$walkthrough" "${DEMO_PIDS[@]}")
wait "$walkthrough"
