#!/usr/bin/env bash
# Issue 20 ON the GPU machine (nvidia-h200), from the repo root:  bash bench/gpu/run20.sh PHASE
# Here first: `bash bench/gpu/prepare.sh` (vLLM kit .gpu/c1..c6, wheels, the SmolLM2 GGUF in two parts, GSM8K).
# The device calls, back to back (< 30 s apart; the machine goes back after 30 s idle), as run on 2026-12-01
# (second session; results in bench/RESULTS.md and bench/gpu/results/*_20b.*):
#   1-5  bash .gpu/cN/move.sh N                                                 carry [.gpu/cN]
#   6    bash .gpu/c6/move.sh 6 && source .gpu/c6/install.sh && cp .gpu/c6/install.sh /tmp/vllm_kit/install.sh
#                                                                               carry [.gpu/c6]
#   7    bash bench/gpu/run20.sh model1                                          carry [.gpu_carry/m1]
#   8    source /tmp/vllm_kit/install.sh && bash bench/gpu/run20.sh realfloors
#                                                          carry [.gpu_carry/m2, .gpu_carry/whl, .gpu_carry/data]
#   9    source /tmp/vllm_kit/install.sh && bash bench/gpu/run20.sh real         carry [.gpu_carry/whl, .gpu_carry/data]
#   10   source /tmp/vllm_kit/install.sh && SBS_TIMEOUT=420 FLOORS_TIMEOUT=140 bash bench/gpu/run20.sh anchor
#                                                                               carry [.gpu_carry/whl, .gpu_carry/data]
#   then on a fresh machine: 1-5 again, and
#   6'   bash .gpu/c6/move.sh 6 && source .gpu/c6/install.sh && bash bench/gpu/run20.sh anchorfloors
#                                                          carry [.gpu/c6, .gpu_carry/whl, .gpu_carry/data]
# Issues 31/35/34, 2026-12-02 (third session; results in bench/RESULTS.md, raw JSON bench/gpu/results/*_31*.json):
#   1-6 as above (6: carry [.gpu/c6, .gpu_carry/whl]), 7 model1 (carry [.gpu_carry/m1]), then
#   8,9  source /tmp/vllm_kit/install.sh && SCHEDULE=ours:lag1,ours:sync,trl:off:32 bash bench/gpu/run20.sh interleave
#                                           carry [.gpu_carry/m2 (first time), .gpu_carry/whl, .gpu_carry/data]
#   10   source /tmp/vllm_kit/install.sh && bash bench/gpu/run20.sh spec     carry [.gpu_carry/whl, .gpu_carry/data]
# Phases:
#   interleave  the realistic workload, ours (sync / continuous lagK) and TRL interleaved (interleave.py)
#   spec        (gone: it compared training runs; issue 46's one-policy bench is run42.sh spec / spec-hard)
#   anchor      the fixed-length side by side (side_by_side.py qwen, ours vs TRL), then its stage floors (floors.py)
#   anchorfloors  ours alone on the anchor, then the stage floors on the run's own batches, in its process
#   model1      GGUF part 1 to /tmp/smol
#   real        (GGUF part 2, reassemble + check, when not done yet) the realistic workload, ours vs TRL
#   realfloors  (the same GGUF step) ours alone, then the stage floors on the run's own batches, in its process
# (Before the 2nd 2026-12-01 session realfloors was `floors.py real`, a process of its own: floors_real_20.json.)
set -uo pipefail
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PYTHONPATH=$PWD:${PYTHONPATH:-}
GGUF=/tmp/smol/SmolLM2-135M-Instruct.Q4_1.gguf
DATA=$PWD/.gpu_carry/data/gsm8k_test.jsonl
quiet() { grep -vE "^(INFO|WARNING|DEBUG)|^\(MainProcess|it/s\]|s/it\]"; }
wheels() {
    if [ ! -f /tmp/site/.done ]; then
        python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .gpu_carry/whl/*.whl && touch /tmp/site/.done
    fi
    export PYTHONPATH=/tmp/site:$PYTHONPATH
}
gguf() {  # the SmolLM2 GGUF from its two parts (part 1 moved to /tmp/smol by the model1 call)
    if [ ! -f $GGUF ]; then
        mv .gpu_carry/m2/gg.1 /tmp/smol/ && cat /tmp/smol/gg.0 /tmp/smol/gg.1 > $GGUF
        echo "$(cat .gpu_carry/m2/sha256)  $GGUF" | sha256sum -c - || return 1
        rm -f /tmp/smol/gg.*
    fi
}
case "$1" in
anchor)
    [ -f .gpu/c6/install.sh ] && cp .gpu/c6/install.sh /tmp/vllm_kit/install.sh
    wheels
    nvidia-smi --query-gpu=name,memory.total,power.limit,clocks.sm --format=csv
    # 2026-12-01 ran with 330 s here: TRL's half did not finish inside it (ours' half took ~250 s with the engine
    # start and compile), so give the pair more and the floors less.
    timeout ${SBS_TIMEOUT:-420} python3 bench/gpu/side_by_side.py qwen --steps 4 --trl .gpu_carry/data/trl_bench.py \
        --out "$OUT/sbs_qwen.json" 2>&1 | quiet | tail -25
    timeout ${FLOORS_TIMEOUT:-170} python3 bench/gpu/floors.py anchor --shape qwen --out "$OUT/floors_anchor.json" 2>&1 | quiet | tail -8
    ;;
anchorfloors)
    # ours alone on the anchor, then each stage's floor on the run's own batches in the run's process
    wheels
    timeout 400 python3 bench/gpu/side_by_side.py qwen --steps 4 --floors --out "$OUT/sbs_qwen_floors.json" 2>&1 | quiet | tail -5
    ;;
model1)
    mkdir -p /tmp/smol && mv .gpu_carry/m1/gg.0 /tmp/smol/ && ls -la /tmp/smol
    ;;
real)
    wheels
    gguf || exit 1
    python3 bench/gpu/realistic.py --model $GGUF --data "$DATA" --steps 4 --trl bench/gpu/trl_realistic.py \
        --trl-timeout ${TRL_TIMEOUT:-330} --out "$OUT/real_pair.json" 2>&1 | quiet | tail -30
    cp /tmp/rrl_real/run_real/trace.jsonl "$OUT/real_trace.jsonl"
    tail -c 60000 /tmp/rrl_real/trl.log > "$OUT/real_trl.log"
    ;;
realfloors)
    # ours alone, then each stage's floor on the run's own batches in the run's process (realistic.py --floors)
    wheels
    gguf || exit 1
    python3 bench/gpu/realistic.py --model $GGUF --data "$DATA" --steps 4 --floors \
        --out "$OUT/real_floors.json" 2>&1 | quiet | tail -30
    cp /tmp/rrl_real/run_real/trace.jsonl "$OUT/real_floors_trace.jsonl"
    ;;
interleave)
    wheels
    gguf || exit 1
    nvidia-smi --query-gpu=name,memory.used,clocks.sm,temperature.gpu --format=csv,noheader
    python3 bench/gpu/interleave.py --workload realistic --model $GGUF --data "$DATA" \
        --trl-bench bench/gpu/trl_realistic.py --trl-phases .gpu_carry/data/trl_phases.py \
        --schedule "${SCHEDULE:-ours:lag1,ours:sync,trl:off:32}" --steps "${STEPS:-8}" --trl-steps "${TRL_STEPS:-5}" \
        --budget "${BUDGET:-560}" --run-timeout "${RUN_TIMEOUT:-330}" --work /tmp/rrl_il --out "$OUT/interleave_real.json" 2>&1 | quiet
    mkdir -p "$OUT/logs" && for f in /tmp/rrl_il/run*.log; do tail -c 40000 "$f" > "$OUT/logs/$(basename "$f")"; done
    tar czf "$OUT/logs.tgz" -C "$OUT" logs && rm -rf "$OUT/logs"
    ;;
*) echo "unknown phase $1"; exit 2 ;;
esac
