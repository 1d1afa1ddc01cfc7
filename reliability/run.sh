#!/usr/bin/env bash
# The reliability harness with large counts (issue 10): SIGKILL of a participant daemon at random
# moments of its initial sync, SIGKILL of the owner daemon during a stream of acknowledged saves, and
# connections cut at random byte offsets by a proxy. `swift test` runs the same tests with small counts.
#
#   reliability/run.sh [KILLS] [CUTS]     defaults: 100 kills of each daemon, 30 cuts per seed, 4 seeds
#
# Prints a table: scenario, runs, kills/cuts, failures, records lost. Exits non-zero on any failure.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
if ! command -v swift >/dev/null 2>&1; then export PATH="/opt/swift/usr/bin:$PATH"; fi

kills="${1:-100}"
cuts="${2:-30}"
seeds="${SEEDS:-4}"
per_run="${KILLS_PER_RUN:-10}"
runs=$(( (kills + per_run - 1) / per_run ))
log="$(mktemp -d)/reliability.log"

swift build --build-tests >/dev/null || { echo "reliability/run.sh: build failed" >&2; exit 1; }

failures=0
run_filter() {  # filter, environment...
    local filter="$1"; shift
    env "$@" swift test --skip-build --filter "$filter" >>"$log" 2>&1 || failures=$((failures + 1))
}

echo "reliability/run.sh: ${runs} runs of ${per_run} kills per daemon, ${seeds} seeds of ${cuts} cuts (log: $log)"
for ((run = 1; run <= runs; run++)); do
    run_filter "aParticipantKilledAtRandomMoments" SHARESYNC_KILLS="$per_run" SHARESYNC_CRASH_SEED="$run"
    run_filter "everySaveAcknowledgedBeforeTheOwnerIsKilled" SHARESYNC_KILLS="$per_run" SHARESYNC_CRASH_SEED="$run"
    echo "  run $run of $runs done"
done
run_filter "ConnectionCutTests" SHARESYNC_CUTS="$cuts" SHARESYNC_CUT_SEEDS="$seeds"

summary() {  # prefix key
    grep -o "reliability: $1 .*" "$log" | awk -v key="$2" '
        { runs++; for (i = 1; i <= NF; i++) { split($i, kv, "="); v[kv[1]] += kv[2]; if ((kv[1] == "ok" || kv[1] == "converged") && kv[2] != "true") bad++ } }
        END { printf "%d %d %d %d\n", runs, v[key], bad, v["lost"] }'
}
read -r p_runs p_kills p_bad p_lost < <(summary participant-kill kills)
read -r o_runs o_kills o_bad o_lost < <(summary owner-kill kills)
o_acks=$(grep -o "reliability: owner-kill .*" "$log" | grep -o "acknowledged=[0-9]*" | cut -d= -f2 | paste -sd+ - | bc 2>/dev/null || echo "?")
c_runs=$(grep -c "connection cuts: seed" "$log")
c_cuts=$(grep -o "connection cuts: seed [0-9]*, [0-9]* cuts" "$log" | awk '{ s += $5 } END { print s + 0 }')
c_failed=$(grep -c "✘ Test \"after cuts" "$log")

printf '\n%-44s %6s %12s %9s %13s\n' "scenario" "runs" "kills/cuts" "failures" "records lost"
printf '%-44s %6s %12s %9s %13s\n' "participant SIGKILLed during initial sync" "$p_runs" "$p_kills" "$p_bad" "$p_lost"
printf '%-44s %6s %12s %9s %13s\n' "owner SIGKILLed during acknowledged saves" "$o_runs" "$o_kills" "$o_bad" "$o_lost (of $o_acks acked)"
printf '%-44s %6s %12s %9s %13s\n' "connections cut at random byte offsets" "$c_runs" "$c_cuts" "$c_failed" "0 if converged"
echo
if ((failures > 0)); then
    echo "reliability/run.sh: $failures test runs failed; see $log" >&2
    grep -E "✘|Expectation failed" "$log" | head -20 >&2
    exit 1
fi
echo "reliability/run.sh: no failures"
