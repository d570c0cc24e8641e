#!/usr/bin/env bash
# Issue 41's check that CI never flakes: RUNS consecutive CI runs (`bash .ci/run`), each from a fresh clone of
# REV, with LOAD busy processes beside them the whole time (plain `while :; do :; done` shells at the caller's
# nice value, so they take their full share of the cores). Stops at the first red run.
#   bash scripts/ci_under_load.sh [RUNS=3] [LOAD=2] [REV=HEAD]      (from the repo; logs in $LOGDIR, default /tmp)
# Prints one line a run: its rc, wall time and pytest's summary line.
set -uo pipefail
RUNS=${1:-3}
LOAD=${2:-2}
REV=$(git -C "$(dirname "$0")/.." rev-parse "${3:-HEAD}")
REPO=$(git -C "$(dirname "$0")/.." rev-parse --show-toplevel)
LOGDIR=${LOGDIR:-/tmp}
busy=()
for _ in $(seq "$LOAD"); do
    bash -c 'while :; do :; done' &
    busy+=($!)
done
trap 'kill "${busy[@]}" 2>/dev/null' EXIT
echo "load: ${#busy[@]} busy processes (${busy[*]}); commit $REV"
for i in $(seq "$RUNS"); do
    dir=$LOGDIR/ci_load_$i
    log=$LOGDIR/ci_load_$i.log
    rm -rf "$dir" && git clone -q "$REPO" "$dir" && git -C "$dir" checkout -q "$REV" || exit 1
    start=$(date +%s)
    (cd "$dir" && CI=true bash .ci/run) > "$log" 2>&1
    rc=$?
    summary=$(grep -E "^=+ .*(passed|failed|error).* in [0-9.]+s" "$log" | tail -1)
    echo "run $i: rc=$rc wall=$(( $(date +%s) - start ))s $summary (log $log)"
    [ "$rc" -eq 0 ] || exit "$rc"
done
