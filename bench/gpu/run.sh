#!/usr/bin/env bash
# ON the GPU machine (after the vLLM kit's six calls), from the repo root:  bash bench/gpu/run.sh PHASE
#   setup   install carried wheels into /tmp/site (once per machine) and smoke-test the trainer on a tiny shape
#   model   move GGUF part 1 to /tmp (call carrying .gpu_carry/m1), then the update-phase probe (update_probe.py)
#   learn   move part 2, reassemble, then the learning run: eval before -> GRPO -> eval after (+ plots);
#           stops after LEARN_S seconds with checkpoints, and a second `learn` call resumes it
#   sbs     ours vs TRL side by side, SHAPE=${SHAPE:-qwen}
#   fsdp    FSDP2 1 rank vs 2 ranks on the same batches (nvidia-h200-x2; needs no vLLM)
#   packing packed vs padded micro-batches, Qwen2.5-1.5B shape, log-normal lengths (bench/gpu/packing.py; no vLLM)
set -uo pipefail
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PYTHONPATH=$PWD:${PYTHONPATH:-}
wheels() {
    if [ ! -f /tmp/site/.done ]; then
        python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .gpu_carry/whl/*.whl && touch /tmp/site/.done
    fi
    export PYTHONPATH=/tmp/site:$PYTHONPATH
}
case "$1" in
setup)
    wheels
    python3 -c "import torch, vllm, trl, reasoning_rl, graders; print('torch', torch.__version__, 'vllm', vllm.__version__, 'trl', trl.__version__)"
    python3 -m reasoning_rl.cli doctor || true
    ;;
model)
    mkdir -p /tmp/smol && mv .gpu_carry/m1/gg.0 /tmp/smol/ && ls -la /tmp/smol
    wheels
    python3 bench/gpu/update_probe.py "${SHAPE:-qwen}" "$OUT" ${PROBE:-eager:32 compile:32 compile:64} 2>&1 | grep -vE "^(INFO|WARNING)" | tail -12
    head -45 "$OUT/update_profile.txt"
    ;;
learn)  # resumable: a call that runs out of time (LEARN_S) leaves checkpoints; the next call continues
    wheels
    if [ ! -f /tmp/smol/SmolLM2-135M-Instruct.Q4_1.gguf ]; then
        mv .gpu_carry/m2/gg.1 /tmp/smol/ && cat /tmp/smol/gg.0 /tmp/smol/gg.1 > /tmp/smol/SmolLM2-135M-Instruct.Q4_1.gguf
        echo "$(cat .gpu_carry/m2/sha256)  /tmp/smol/SmolLM2-135M-Instruct.Q4_1.gguf" | sha256sum -c - || exit 1
        rm -f /tmp/smol/gg.*
    fi
    timeout ${LEARN_S:-530} python3 -m reasoning_rl.cli train bench/gpu/learn.yaml "data.val.1.path=$PWD/.gpu_carry/data/gsm8k_test.jsonl" data.val.1.limit=${GSM8K_LIMIT:-300} trainer.steps=${STEPS:-250} 2>&1 | grep -vE "^(INFO|WARNING|DEBUG)|it/s\]" | tail -40
    python3 bench/gpu/learn_summary.py /tmp/rrl_runs/gpu_learn "$OUT"
    cp /tmp/rrl_runs/gpu_learn/metrics.jsonl "$OUT/learn_metrics.jsonl"
    python3 -m reasoning_rl.cli report /tmp/rrl_runs/gpu_learn -o "$OUT/learn_report.html" 2>&1 | tail -3
    ;;
sbs)
    wheels
    python3 bench/gpu/side_by_side.py "${SHAPE:-qwen}" --steps ${SBS_STEPS:-4} --trl .gpu_carry/data/trl_bench.py --out "$OUT/sbs_${SHAPE:-qwen}.json" 2>&1 | tail -30
    ;;
fsdp)
    S=${SHAPE:-qwen}
    torchrun --nproc_per_node 1 bench/gpu/fsdp2_parity.py "$S" 6 64 384 "$OUT/fsdp_1rank.json" 2>&1 | grep -E "RESULT|Error" | cut -c1-600
    torchrun --nproc_per_node 2 bench/gpu/fsdp2_parity.py "$S" 6 64 384 "$OUT/fsdp_2rank.json" 2>&1 | grep -E "RESULT|Error" | cut -c1-600
    ;;
packing)  # PACKING_ARGS e.g. "--budget 65536" or "--checkpointing"
    python3 bench/gpu/packing.py --out "$OUT" ${PACKING_ARGS:-} 2>&1 | grep -vE "^(INFO|WARNING)|it/s\]" | tail -40
    ;;
*) echo "unknown phase $1"; exit 2 ;;
esac
