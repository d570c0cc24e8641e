#!/usr/bin/env bash
# Issue 45 ON the GPU machine (nvidia-h200), from the repo root:  bash bench/gpu/run45.sh PHASE
# Here first: `bash bench/gpu/prepare.sh` (the vLLM kit .gpu/c1..c6, the wheels in .gpu_carry/whl, TRL's
# trl_phases.py in .gpu_carry/data; the GGUF parts are not needed: every model here is random-init, made there).
# The device calls, back to back (the machine goes back after 30 s idle):
#   1-5  bash .gpu/cN/move.sh N                                                 carry [.gpu/cN]
#   6    bash .gpu/c6/move.sh 6 && source .gpu/c6/install.sh && cp .gpu/c6/install.sh /tmp/vllm_kit/install.sh
#        && bash bench/gpu/run42.sh wheels                                      carry [.gpu/c6, .gpu_carry/whl]
#   7    source /tmp/vllm_kit/install.sh && bash bench/gpu/run45.sh 8k         carry [.gpu_carry/data]
#   8    source /tmp/vllm_kit/install.sh && bash bench/gpu/run45.sh 16k        carry [.gpu_carry/data]
#   9    source /tmp/vllm_kit/install.sh && bash bench/gpu/run45.sh 7b         carry [.gpu_carry/data]
# Each phase, in one call: ours (bench/gpu/e2e45.py: check -> run -> table), then TRL 1.16 at the same shape and
# settings (bench/gpu/trl45.py under trl_phases.py: IS off, PEFT for 7B), reading ours' JSON for its batch, steps,
# vLLM share and micro-batch. One call runs <= 600 s: the 64 prompts x 8 at 8k/16k do not fit one (estimated
# from issue 36/42's rates: ~100 s of generation and ~60 s of update per 8k step at 64 x 8), so the defaults below
# are what one call holds, and PROMPTS / STEPS override them (64 / 5, or 3 for 7B, is the size):
#   8k   Qwen2.5-1.5B shape, full fine-tuning, responses up to 8,192     PROMPTS=16 STEPS=3
#   16k  the same up to 16,384                                           PROMPTS=8  STEPS=3
#   7b   Qwen2.5-7B shape, LoRA r=32 alpha 64 all-linear, up to 4,096     PROMPTS=16 STEPS=3
# OURS_TIMEOUT / TRL_TIMEOUT (seconds) bound each side (default 330 / 240). Lengths: lengths.lognormal_lengths (the
# learning workload's shape scaled to the cap), enforced per vLLM request on both sides.
# Results under $OUT: e2e45_<variant>.json (ours), trl45_<variant>.json (TRL, with ours' run: the ratio), logs
# (<phase>_logs.tgz); `python bench/gpu/throughput.py FILE` recomputes every Σtokens/Σtime and ratio.
set -uo pipefail
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PYTHONPATH=/tmp/site:$PWD:${PYTHONPATH:-}
D=$PWD/.gpu_carry/data
quiet() { grep -vE "^(INFO|WARNING|DEBUG)|^\(MainProcess|it/s\]|s/it\]"; }
pair() {  # $1 variant, $2 default prompts, $3 default steps
    [ -f /tmp/site/.done ] || { echo "no /tmp/site: the machine went cold; start again from call 1"; exit 3; }
    local work=/tmp/e2e45_$1 logs=/tmp/e2e45_logs_$1
    mkdir -p "$logs"
    nvidia-smi --query-gpu=name,memory.used,clocks.sm,temperature.gpu --format=csv,noheader
    timeout "${OURS_TIMEOUT:-330}" python3 bench/gpu/e2e45.py --variant "$1" --prompts "${PROMPTS:-$2}" \
        --steps "${STEPS:-$3}" --work "$work" --out "$OUT" 2>&1 | tee "$logs/ours.log" | quiet | grep -vE "^step [0-9]"
    [ -f "$work/run/metrics.jsonl" ] && cp "$work/run/metrics.jsonl" "$logs/ours_metrics.jsonl"
    if [ -f "$OUT/e2e45_$1.json" ]; then
        timeout "${TRL_TIMEOUT:-240}" python3 "$D/trl_phases.py" bench/gpu/trl45.py --variant "$1" \
            --ours "$OUT/e2e45_$1.json" --work "$work" --out "$OUT" 2>&1 | tee "$logs/trl.log" | quiet \
            | grep -E "^(side|ours|trl|ratio|TRL|wrote|Traceback|.*Error)"
    else
        echo "ours wrote no result (see $1_logs.tgz): TRL not run"
    fi
    for f in "$logs"/*.log; do tail -c 40000 "$f" > "$f.tail" && mv "$f.tail" "$f"; done
    tar czf "$OUT/$1_logs.tgz" -C "$logs" .
}
case "$1" in
8k) pair 1.5b-8k 16 3 ;;
16k) pair 1.5b-16k 8 3 ;;
7b) pair 7b-lora-4k 16 3 ;;
*) echo "unknown phase $1 (8k, 16k, 7b)"; exit 2 ;;
esac
