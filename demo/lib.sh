# Shared by demo/run.sh and demo/netns.sh (sourced, not run): building, starting and stopping daemons.
# Callers set DEMO_ROOT (the repository) and WORK (a folder for homes and logs) and install
#   trap demo_cleanup EXIT
# so every daemon started with demo_start_daemon is stopped on every exit path.

DEMO_PIDS=()
DEMO_KEEP=${DEMO_KEEP:-0}
DEMO_CLEANUP_HOOK=${DEMO_CLEANUP_HOOK:-}

demo_log() { printf '%s\n' "$*" >&2; }

# The options both demos take: --keep, --timeout SECONDS, --help (prints lines FIRST,LAST of the
# calling script's header). Sets DEMO_KEEP and timeout.
demo_parse_arguments() {
    local name=$1 script=$2 lines=$3
    shift 3
    timeout=10
    while (($# > 0)); do
        case "$1" in
            --keep) DEMO_KEEP=1 ;;
            --timeout) timeout=${2:?--timeout needs a number of seconds}; shift ;;
            -h | --help) sed -n "${lines}p" "$script" | sed 's/^# \{0,1\}//'; exit 0 ;;
            *) demo_log "$name: unknown argument $1 (try --help)"; exit 64 ;;
        esac
        shift
    done
}

# Puts swift on PATH (CI machines keep it in /opt/swift/usr/bin).
demo_find_swift() {
    if ! command -v swift >/dev/null 2>&1 && [[ -x /opt/swift/usr/bin/swift ]]; then
        export PATH="/opt/swift/usr/bin:$PATH"
    fi
    command -v swift >/dev/null 2>&1
}

# Sets SHARESYNC_BIN: $SHARESYNC_BIN if given, else builds the sharesync product (debug) and uses it.
demo_build() {
    if [[ -n "${SHARESYNC_BIN:-}" ]]; then
        [[ -x "$SHARESYNC_BIN" ]] || { demo_log "SHARESYNC_BIN=$SHARESYNC_BIN is not an executable"; return 1; }
        return 0
    fi
    demo_find_swift || { demo_log "swift not found on PATH or in /opt/swift/usr/bin"; return 1; }
    demo_log "building sharesync (swift build --product sharesync; the first build takes a few minutes)"
    (cd "$DEMO_ROOT" && swift build --product sharesync) >&2
    SHARESYNC_BIN="$(cd "$DEMO_ROOT" && swift build --show-bin-path)/sharesync"
    [[ -x "$SHARESYNC_BIN" ]] || { demo_log "the build left no $SHARESYNC_BIN"; return 1; }
}

# demo_start_daemon LABEL HOME [PREFIX...]: runs `PREFIX sharesync run --home HOME` in the background,
# waits (up to 30 s) for its "listening on" line and sets DEMO_ADDRESS to the address (call it directly,
# not in $(...), so its pid is recorded). Output goes to WORK/LABEL.out and WORK/LABEL.log.
demo_start_daemon() {
    local label=$1 home=$2
    shift 2
    local out="$WORK/$label.out" log="$WORK/$label.log"
    : >"$out"
    "$@" "$SHARESYNC_BIN" run --home "$home" >"$out" 2>"$log" </dev/null &
    local pid=$!
    DEMO_PIDS+=("$pid")
    local waited=0
    while ((waited < 1500)); do   # 1500 x 20 ms = 30 s
        if grep -q '^listening on ' "$out"; then
            DEMO_ADDRESS=$(sed -n 's/^listening on //p' "$out" | head -n 1)
            return 0
        fi
        if ! kill -0 "$pid" 2>/dev/null; then
            demo_log "node $label: the daemon exited before listening; its log:"
            sed 's/^/    /' "$log" >&2
            return 1
        fi
        sleep 0.02
        waited=$((waited + 1))
    done
    demo_log "node $label: no 'listening on' line within 30 s; its log:"
    sed 's/^/    /' "$log" >&2
    return 1
}

# Stops every daemon (SIGTERM, then SIGKILL after 5 s), runs DEMO_CLEANUP_HOOK, removes WORK unless kept.
demo_cleanup() {
    local status=$?
    trap - EXIT INT TERM
    local pid
    for pid in "${DEMO_PIDS[@]}"; do
        kill -TERM "$pid" 2>/dev/null || true
    done
    local tries=0
    for pid in "${DEMO_PIDS[@]}"; do
        while kill -0 "$pid" 2>/dev/null && ((tries < 250)); do
            sleep 0.02
            tries=$((tries + 1))
        done
        if kill -0 "$pid" 2>/dev/null; then
            demo_log "daemon $pid did not stop on SIGTERM; killing it"
            kill -KILL "$pid" 2>/dev/null || true
        fi
        wait "$pid" 2>/dev/null || true
    done
    if [[ -n "$DEMO_CLEANUP_HOOK" ]]; then
        "$DEMO_CLEANUP_HOOK" || true
    fi
    if [[ -n "${WORK:-}" && -d "$WORK" ]]; then
        if [[ "$DEMO_KEEP" == 1 ]]; then
            demo_log "kept the homes and daemon logs in $WORK"
        elif ((status != 0)); then
            demo_log "daemon logs (the folder is removed; --keep keeps it):"
            local log
            for log in "$WORK"/*.log; do
                [[ -f "$log" ]] || continue
                demo_log "--- $(basename "$log") (last 40 lines)"
                tail -n 40 "$log" >&2 || true
            done
            rm -rf "$WORK"
        else
            rm -rf "$WORK"
        fi
    fi
    exit "$status"
}
