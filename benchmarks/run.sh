#!/usr/bin/env bash
# The benchmark suite: builds sharesync and sharesync-bench in release mode, then runs every scenario
# on loopback with real `sharesync run` daemons, next to this machine's limits measured in the same run.
# Prints a table; writes bench-results/results.json. The options are `sharesync-bench suite`'s
# (`.build/release/sharesync-bench suite --help`):
#
#   benchmarks/run.sh            # full suite (100k records, 1,000 changes, fan-out to 100 and 1,000)
#   benchmarks/run.sh --quick    # smoke test: smaller counts
#   benchmarks/run.sh --scale    # also the 1,000,000-record daemon-to-daemon sync (several more minutes)
#   benchmarks/run.sh --scale-only
#   benchmarks/run.sh --only initial-sync [--records N]  # only the owner import and the two initial syncs
#   benchmarks/run.sh --out FILE # where the JSON goes (default bench-results/results.json)
#   benchmarks/run.sh --compare FILE  # also each figure's change against an earlier results file
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p bench-results
# --static-swift-stdlib: the Swift runtime and Foundation linked into the binary, as a deployed
# daemon should be built (README, "Operating a node"). The dynamic loader's symbol lookups across
# the Swift libraries were half of `sharesync run`'s main-thread CPU from spawn to listening (perf),
# and calls into the Swift runtime no longer go through the PLT: a daemon-to-daemon sync used 8-11 %
# less CPU on the owner and about 6 % less on the participant. Both products take the same flag: a build with other flags compiles everything again.
for product in sharesync sharesync-bench; do
  echo "building $product (release)..." >&2
  if ! swift build -c release --static-swift-stdlib --product "$product" > bench-results/build.log 2>&1; then
    tail -40 bench-results/build.log >&2; echo "build failed (bench-results/build.log)" >&2; exit 1
  fi
done
bin="$(swift build -c release --show-bin-path)"
export SHARESYNC_BINARY="$bin/sharesync"
exec "$bin/sharesync-bench" suite "$@"
