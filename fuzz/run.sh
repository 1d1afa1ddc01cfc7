#!/usr/bin/env bash
# Runs every fuzz target (issue 10) under libFuzzer for SECONDS each and prints a table of executions,
# executions per second, coverage and crashes.
#
#   fuzz/run.sh [SECONDS] [TARGET...]      SECONDS defaults to 60; TARGET: frame handshake message record
#
# It builds `sharesync-fuzz` in release with `-sanitize=fuzzer` into .build-fuzz (FUZZ_SCRATCH overrides),
# installs nothing, and reads the committed seeds in fuzz/corpus/<target>/ without writing to them: new
# corpus entries go to a scratch directory (FUZZ_WORK, default a temporary one, removed afterwards).
# A crashing input is copied to fuzz/crashes/<target>/ (where `swift test` replays it, FuzzRegressionTests)
# and the script exits 1. Each target's libFuzzer log is kept in FUZZ_WORK while the script runs, and its
# last lines are printed on a crash. Environment: FUZZ_MAX_LEN (default 8192), FUZZ_TIMEOUT (seconds one
# input may take, default 10), FUZZ_RSS_MB (default 2048), FUZZ_SANITIZERS (default `fuzzer`;
# `fuzzer,address` adds AddressSanitizer, about half the speed; use its own FUZZ_SCRATCH).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

if ! command -v swift >/dev/null 2>&1; then
    export PATH="/opt/swift/usr/bin:$PATH"
fi

seconds="${1:-60}"
if [[ $# -gt 0 ]]; then shift; fi
targets=("$@")
if ((${#targets[@]} == 0)); then
    targets=(frame handshake message record)
fi
if ! [[ "$seconds" =~ ^[0-9]+$ ]] || ((seconds < 1)); then
    echo "usage: fuzz/run.sh [SECONDS] [frame|handshake|message|record ...]" >&2
    exit 2
fi

scratch="${FUZZ_SCRATCH:-.build-fuzz}"
started=$(date +%s)
echo "fuzz/run.sh: building sharesync-fuzz with -sanitize=fuzzer in $scratch"
swift build -c release --scratch-path "$scratch" \
    -Xswiftc -sanitize="${FUZZ_SANITIZERS:-fuzzer}" -Xswiftc -DFUZZING --product sharesync-fuzz
echo "fuzz/run.sh: built in $(($(date +%s) - started)) s"
binary="$scratch/release/sharesync-fuzz"

keep_work=1
work="${FUZZ_WORK:-}"
if [[ -z "$work" ]]; then
    work="$(mktemp -d "${TMPDIR:-/tmp}/sharesync-fuzz.XXXXXX")"
    keep_work=0
fi
cleanup() { if ((keep_work == 0)); then rm -rf "$work"; fi; }
trap cleanup EXIT

rows=()
total_runs=0
total_crashes=0
for target in "${targets[@]}"; do
    if [[ ! -d "fuzz/corpus/$target" ]]; then
        echo "fuzz/run.sh: unknown target $target (no fuzz/corpus/$target)" >&2
        exit 2
    fi
    mkdir -p "$work/corpus/$target" "$work/artifacts/$target"
    log="$work/$target.log"
    echo "fuzz/run.sh: $target for $seconds s"
    status=0
    # SWIFT_BACKTRACE=enable=no: Swift's own crash handler would otherwise catch the trap first, and
    # libFuzzer would not save the crashing input.
    SWIFT_BACKTRACE=enable=no SHARESYNC_FUZZ_TARGET="$target" "$binary" \
        -max_total_time="$seconds" -print_final_stats=1 \
        -max_len="${FUZZ_MAX_LEN:-8192}" -timeout="${FUZZ_TIMEOUT:-10}" -rss_limit_mb="${FUZZ_RSS_MB:-2048}" \
        -artifact_prefix="$work/artifacts/$target/" -detect_leaks=0 \
        "$work/corpus/$target" "fuzz/corpus/$target" >"$log" 2>&1 || status=$?

    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
    rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -n 1)
    last=$(grep -E '^#[0-9]+.*cov: ' "$log" | tail -n 1 || true)
    cov=$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<<"$last")
    ft=$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<<"$last")
    corp=$(sed -n 's/.* corp: \([0-9]*\).*/\1/p' <<<"$last")
    if [[ -z "$runs" ]]; then runs=$(sed -n 's/^#\([0-9]*\).*/\1/p' <<<"$last"); fi

    crashes=0
    shopt -s nullglob
    for artifact in "$work/artifacts/$target"/*; do
        mkdir -p "fuzz/crashes/$target"
        cp "$artifact" "fuzz/crashes/$target/"
        echo "fuzz/run.sh: $target crashed; input saved as fuzz/crashes/$target/$(basename "$artifact")"
        crashes=$((crashes + 1))
    done
    shopt -u nullglob
    if ((status != 0)) && ((crashes == 0)); then
        crashes=1 # libFuzzer failed without leaving an input (it could not start, say)
    fi
    if ((crashes > 0)); then
        echo "fuzz/run.sh: last lines of the $target log:"
        tail -n 40 "$log"
    fi
    total_runs=$((total_runs + ${runs:-0}))
    total_crashes=$((total_crashes + crashes))
    rows+=("$(printf '%-10s %12s %9s %7s %7s %7s %8s' "$target" "${runs:-?}" "${rate:-?}" "${cov:-?}" "${ft:-?}" "${corp:-?}" "$crashes")")
done

echo
printf '%-10s %12s %9s %7s %7s %7s %8s\n' target executions exec/s cov ft corpus crashes
for row in "${rows[@]}"; do echo "$row"; done
printf '%-10s %12s %9s %7s %7s %7s %8s\n' total "$total_runs" "" "" "" "" "$total_crashes"

if ((total_crashes > 0)); then
    echo "fuzz/run.sh: $total_crashes crash(es); replay with: swift run sharesync-fuzz TARGET fuzz/crashes/TARGET" >&2
    exit 1
fi
