#!/usr/bin/env bash
# The notes app in two processes: Alice creates a topic and a note and shares the topic with Bob; Bob
# accepts; both edit the note; the second to sync gets a conflict, which the app merges through the
# sync engine's events; both end with the merged note.
#
# Usage: Examples/Notes/run.sh [embedded|connected|both]   (default: both)
#   embedded   each app runs its node in process
#   connected  each app talks to a `sharesync run` daemon on its home
# It builds the app (sharing the repository's .build, so the library is not built twice) and, for
# connected, the sharesync command. Exit status 0 if every step gave the expected answer.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
MODES="${1:-both}"
[[ "$MODES" == both ]] && MODES="embedded connected"
TIMEOUT=30

if ! command -v swift >/dev/null 2>&1; then export PATH="/opt/swift/usr/bin:$PATH"; fi
echo "== building the notes app (Examples/Notes) and sharesync"
swift build --package-path "$ROOT/Examples/Notes" --scratch-path "$ROOT/.build" >/dev/null
swift build --package-path "$ROOT" --product sharesync >/dev/null
NOTES="$ROOT/.build/debug/notes"
SHARESYNC="$ROOT/.build/debug/sharesync"

WORK=""
PIDS=()
cleanup() {
    for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
    for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
    PIDS=()
    exec 3>&- 4>&- 2>/dev/null || true
    [[ -n "$WORK" ]] && rm -rf "$WORK"
    return 0
}
trap cleanup EXIT

fail() {
    echo "FAILED: $*" >&2
    for who in alice bob; do
        echo "--- $who's output:" >&2
        cat "$WORK/$who.out" >&2 || true
        echo "--- $who's errors:" >&2
        tail -n 20 "$WORK/$who.err" >&2 || true
    done
    exit 1
}

# ask WHO COMMAND: sends a command to an app and prints its answer (the lines up to the closing ".").
ask() {
    local who="$1" command="$2" fd out before deadline
    [[ "$who" == alice ]] && fd=3 || fd=4
    out="$WORK/$who.out"
    before=$(grep -c '^\.$' "$out" || true)
    echo "$command" >&"$fd"
    deadline=$((SECONDS + TIMEOUT))
    while (($(grep -c '^\.$' "$out" || true) <= before)); do
        ((SECONDS < deadline)) || fail "$who did not answer '$command' within ${TIMEOUT}s"
        sleep 0.05
    done
    # The answer: the lines after the previous "." up to this one.
    awk -v n="$before" '/^\.$/ { count++; next } count == n { print }' "$out"
}

# expect WHO COMMAND PATTERN: asks and checks that the answer has a line matching PATTERN (grep -E).
expect() {
    local answer
    answer="$(ask "$1" "$2")"
    grep -qE "$3" <<<"$answer" || fail "$1: '$2' answered '$answer', expected /$3/"
    echo "  $1> $2"
    sed 's/^/      /' <<<"$answer"
}

run_mode() {
    local mode="$1" flags=()
    WORK="$(mktemp -d /tmp/notes-app.XXXXXX)"
    echo "== the notes app, $mode"
    if [[ "$mode" == connected ]]; then
        flags=(--connected)
        for who in alice bob; do
            "$SHARESYNC" init --home "$WORK/$who" --name "${who^}" --listen 127.0.0.1:0 >/dev/null
            "$SHARESYNC" run --home "$WORK/$who" >"$WORK/$who.daemon.out" 2>"$WORK/$who.daemon.err" &
            PIDS+=($!)
        done
        for who in alice bob; do
            local deadline=$((SECONDS + TIMEOUT))
            until grep -q "listening on" "$WORK/$who.daemon.out"; do
                ((SECONDS < deadline)) || fail "the $who daemon did not start"
                sleep 0.05
            done
        done
    fi
    for who in alice bob; do mkfifo "$WORK/$who.in"; done
    "$NOTES" --home "$WORK/alice" --name Alice "${flags[@]}" <"$WORK/alice.in" >"$WORK/alice.out" 2>"$WORK/alice.err" &
    PIDS+=($!)
    exec 3>"$WORK/alice.in"
    "$NOTES" --home "$WORK/bob" --name Bob "${flags[@]}" <"$WORK/bob.in" >"$WORK/bob.out" 2>"$WORK/bob.err" &
    PIDS+=($!)
    exec 4>"$WORK/bob.in"

    local bob_user url
    bob_user="$(ask bob whoami | sed -n 's/^user //p')"
    [[ -n "$bob_user" ]] || fail "bob has no user record name"
    expect alice "topic groceries Groceries" "^topic groceries"
    expect alice "note groceries milk Milk" "^note milk"
    url="$(ask alice "share groceries $bob_user" | sed -n 's/^url //p')"
    [[ "$url" == sharesync://* ]] || fail "alice's share gave no URL"
    echo "  alice> share groceries $bob_user"
    echo "      url $url"
    expect bob "accept $url" "^accepted Groceries from Alice"
    expect bob "list" "^note milk Milk \(shared\)"

    # Both edit the note; Alice syncs first, so Bob's save conflicts and his app merges.
    expect alice "edit milk Milk 2L" "^edited milk"
    expect bob "edit milk Oat milk" "^edited milk"
    expect alice "sync" "^synced"
    expect bob "sync" "^merged milk: Milk 2L \+ Oat milk"
    expect bob "list" "^note milk Milk 2L \+ Oat milk \(shared\)"
    expect alice "sync" "^synced"
    expect alice "list" "^note milk Milk 2L \+ Oat milk$"

    # A note Bob adds in the shared topic reaches Alice.
    expect bob "note groceries eggs Eggs" "^note eggs"
    expect bob "sync" "^synced"
    expect alice "sync" "^synced"
    expect alice "list" "^note eggs Eggs$"

    echo "quit" >&3
    echo "quit" >&4
    cleanup
    echo "== $mode: passed"
}

for mode in $MODES; do
    case "$mode" in
    embedded | connected) run_mode "$mode" ;;
    *) echo "usage: Examples/Notes/run.sh [embedded|connected|both]" >&2; exit 64 ;;
    esac
done
