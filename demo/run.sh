#!/usr/bin/env bash
# The two-device walkthrough on one machine: builds sharesync, starts node A and node B as separate
# processes (each with its own home folder and port on 127.0.0.1), and runs demo/walkthrough.py against
# them. Both daemons are stopped on every exit path, failures and Ctrl-C included.
#
# Usage: demo/run.sh [--keep] [--timeout SECONDS]
#   --keep             keep the temporary homes and daemon logs (the path is printed)
#   --timeout SECONDS  how long to wait for each expected result (default 10)
# Environment: SHARESYNC_BIN=/path/to/sharesync skips the build and uses that binary.
# Exit status: 0 if the walkthrough passed, non-zero otherwise.
set -euo pipefail

DEMO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=demo/lib.sh
source "$DEMO_ROOT/demo/lib.sh"

demo_parse_arguments "demo/run.sh" "${BASH_SOURCE[0]}" 2,10 "$@"

command -v python3 >/dev/null 2>&1 || { demo_log "demo/run.sh: python3 is needed (apt-get install python3)"; exit 69; }
demo_build

# Short paths: a Unix socket path must fit in about 100 bytes.
WORK="$(mktemp -d /tmp/sharesync-demo.XXXXXX)"
trap demo_cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

echo "== sharesync two-device walkthrough: two processes on 127.0.0.1 (homes in $WORK)"
"$SHARESYNC_BIN" init --home "$WORK/a" --name Alice --email alice@example.org --listen 127.0.0.1:0 --json >"$WORK/a.init.json"
"$SHARESYNC_BIN" init --home "$WORK/b" --name Bob --email bob@example.org --listen 127.0.0.1:0 --json >"$WORK/b.init.json"
demo_start_daemon a "$WORK/a"
echo "node A listening on $DEMO_ADDRESS (pid ${DEMO_PIDS[0]})"
demo_start_daemon b "$WORK/b"
echo "node B listening on $DEMO_ADDRESS (pid ${DEMO_PIDS[1]})"

python3 "$DEMO_ROOT/demo/walkthrough.py" --bin "$SHARESYNC_BIN" --a "$WORK/a" --b "$WORK/b" --timeout "$timeout" &
walkthrough=$!
DEMO_PIDS=("$walkthrough" "${DEMO_PIDS[@]}")
wait "$walkthrough"
