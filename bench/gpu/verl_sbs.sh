#!/usr/bin/env bash
# verl 0.9.1 vs ours vs TRL 1.16 on one H200 (issue 22). HERE first: `bash bench/gpu/verl_prepare.sh`. Then nine
# device calls, issued back to back (the machine stays warm only ~30 s between calls), each from the repo root:
#   1-5  bash .gpu/cN/move.sh N                                carry [".gpu/cN"]        (vLLM kit, N = 1..5)
#   6    bash .gpu/c6/move.sh 6 && source .gpu/c6/install.sh    carry [".gpu/c6"]
#   7    bash bench/gpu/verl_sbs.sh stage                       carry [".verl/p1", ".gpu_carry"]
#   8    bash bench/gpu/verl_sbs.sh sweep                       carry [".verl/p2"]
#   9    bash bench/gpu/verl_sbs.sh compare
#   10   bash bench/gpu/verl_sbs.sh pair                        (ours, then verl SETTING=S3, in one call)
# Measured 2026-12-01: a verl run takes 250-335 s of wall time, 218-292 s of it before its first step, so one
# call holds one verl run next to ours + TRL, or about 1.5 verl runs alone: the sweep ran S2 only.
# stage: half of verl's ray wheel to /tmp, our + TRL's wheels into /tmp/site, TRL's bench script to /tmp.
# sweep: installs verl (verl kit), writes its data (verl_data.py), runs verl settings while the call lasts
#        (verl_runs.py sweep; SETTINGS, default "S2 S1 S3"); results stay in /tmp/verl_sweep for the next call.
# compare: ours, TRL, then verl's fastest sweep setting, back to back; then the settings the sweep skipped while
#          the call lasts; prints the table, writes compare.json.
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
CALL_S=${CALL_S:-585}   # the device call's limit is 600 s; leave room for the files to come back
case "${1:-}" in
stage)
    [ -f /tmp/vllm_kit/site/vllm/__init__.py ] || { echo "FRESH MACHINE: the vLLM kit's six calls come first"; exit 1; }
    mkdir -p /tmp/verlk && mv .verl/p1/ray.part.0 /tmp/verlk/ || exit 1
    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .gpu_carry/whl/*.whl || exit 1
    cp .gpu_carry/data/trl_bench.py /tmp/trl_bench.py
    nvidia-smi --query-gpu=name,memory.total,memory.used,clocks.sm,clocks.max.sm,power.limit --format=csv
    ;;
sweep)
    bash .verl/p2/install.sh || exit 1
    python3 bench/gpu/verl_data.py qwen /tmp/verl_bench 2>&1 | grep -v "Writing model shards" || exit 1
    # shellcheck disable=SC2086
    python3 bench/gpu/verl_runs.py sweep ${SETTINGS:-S2 S1 S3} --budget $((CALL_S - SECONDS - 20)) --out-dir /tmp/verl_sweep
    cp /tmp/verl_sweep/sweep.json "$OUT/"
    (cd /tmp/verl_sweep && tar czf "$OUT/sweep_logs.tgz" ./*.log)
    python3 -c "import json; [print(r.get('setting'), r.get('step_s_median'), r.get('tokens_per_s'), r.get('medians'), r.get('skipped') or r.get('error') or '') for r in json.load(open('/tmp/verl_sweep/sweep.json'))]"
    ;;
compare)
    [ -f /tmp/vsite/verl/__init__.py ] || { echo "FRESH MACHINE: verl is not installed (calls 7 and 8 first)"; exit 1; }
    # shellcheck disable=SC2086
    python3 bench/gpu/verl_runs.py compare --sweep /tmp/verl_sweep/sweep.json --trl /tmp/trl_bench.py \
        --budget $((CALL_S - SECONDS - 15)) --out-dir /tmp/verl_cmp --extra ${EXTRA:-S3 S2_rmpad}
    cp /tmp/verl_cmp/compare.json "$OUT/"
    (cd /tmp/verl_cmp && tar czf "$OUT/compare_logs.tgz" ./*.log)
    ;;
pair)
    [ -f /tmp/vsite/verl/__init__.py ] || { echo "FRESH MACHINE: verl is not installed (calls 7 and 8 first)"; exit 1; }
    python3 bench/gpu/verl_runs.py pair "${SETTING:-S3}" --budget $((CALL_S - SECONDS - 15)) --out-dir /tmp/verl_pair
    cp /tmp/verl_pair/pair.json "$OUT/"
    (cd /tmp/verl_pair && tar czf "$OUT/pair_logs.tgz" ./*.log)
    ;;
*) echo "usage: bash bench/gpu/verl_sbs.sh stage|sweep|compare|pair (see the header)"; exit 2 ;;
esac
