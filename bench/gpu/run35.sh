#!/usr/bin/env bash
# Issue 35 ON the GPU machine (nvidia-h200): the anchor, ours and TRL 1.16 interleaved in one call.
# Here first (from the session's checkout that the device tool sends):
#   bash ../shared/gpu/vllm_kit.sh prepare                        -> .gpu/c1..c6
#   pip download --no-deps trl==1.16.0 datasets==5.2.0 multiprocess==0.70.19 -> .gpu_carry/whl (prepare.sh's line)
#   mkdir -p .h35/bench/gpu .h35/shared && cp -r reasoning_rl .h35/ && cp bench/gpu/*.py bench/gpu/run35.sh .h35/bench/gpu/
#   cp ../shared/gpu/trl_bench.py ../shared/gpu/trl_phases.py .h35/shared/          (.h35/ git-ignored)
# The device calls, back to back (< 30 s apart; the machine goes back after 30 s idle), as run on 2026-12-02:
#   1-5  bash .gpu/cN/move.sh N                                                    carry [.gpu/cN]
#   6    bash .gpu/c6/move.sh 6 && source .gpu/c6/install.sh && cp .gpu/c6/install.sh /tmp/vllm_kit/install.sh
#        && bash .h35/bench/gpu/run35.sh wheels                                    carry [.gpu/c6, .gpu_carry/whl, .h35]
#   7,8  source /tmp/vllm_kit/install.sh && SCHEDULE=... bash .h35/bench/gpu/run35.sh anchor   carry [.h35]
set -uo pipefail
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
H=$PWD/.h35
export PYTHONPATH=/tmp/site:$H:$PWD:${PYTHONPATH:-}  # graders/, sandboxes/ from the checkout (unchanged)
case "$1" in
wheels)
    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .gpu_carry/whl/*.whl \
        && touch /tmp/site/.done && python3 -c "import trl, vllm; print('trl', trl.__version__, 'vllm', vllm.__version__)"
    nvidia-smi --query-gpu=name,memory.total,power.limit,clocks.sm,clocks.max.sm --format=csv
    ;;
anchor)
    [ -f /tmp/site/.done ] || { echo "no /tmp/site: the machine went cold; start again from call 1"; exit 3; }
    nvidia-smi --query-gpu=name,memory.used,clocks.sm,temperature.gpu --format=csv,noheader
    python3 "$H/bench/gpu/interleave.py" --trl-bench "$H/shared/trl_bench.py" --trl-phases "$H/shared/trl_phases.py" \
        --schedule "${SCHEDULE:-ours,trl:off:32,trl:off:64,trl:def:32,ours,trl:off:best,ours}" \
        --steps "${STEPS:-5}" --budget "${BUDGET:-555}" --out "$OUT/interleave.json" 2>&1 \
        | grep -vE "^(INFO|WARNING|DEBUG)|^\(MainProcess|it/s\]|s/it\]"
    # the run logs, for the record (last 40 kB each)
    mkdir -p "$OUT/logs" && for f in /tmp/rrl_interleave/run*.log; do tail -c 40000 "$f" > "$OUT/logs/$(basename "$f")"; done
    tar czf "$OUT/logs.tgz" -C "$OUT" logs && rm -rf "$OUT/logs"
    ;;
*) echo "unknown phase $1"; exit 2 ;;
esac
