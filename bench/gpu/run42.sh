#!/usr/bin/env bash
# Issue 42 ON the GPU machine (nvidia-h200), from the repo root:  bash bench/gpu/run42.sh PHASE
# Here first: `bash bench/gpu/prepare.sh` (vLLM kit .gpu/c1..c6, wheels, the SmolLM2 GGUF in two parts, GSM8K and
# the word_chain learning workload in .gpu_carry/data, TRL's bench scripts). The device calls, back to back (the
# machine goes back after 30 s idle):
#   1-5  bash .gpu/cN/move.sh N                                                 carry [.gpu/cN]
#   6    bash .gpu/c6/move.sh 6 && source .gpu/c6/install.sh && cp .gpu/c6/install.sh /tmp/vllm_kit/install.sh
#        && bash bench/gpu/run42.sh wheels                                      carry [.gpu/c6, .gpu_carry/whl]
#   7    source /tmp/vllm_kit/install.sh && bash bench/gpu/run42.sh anchor     carry [.gpu_carry/m1, .gpu_carry/data]
#   8    source /tmp/vllm_kit/install.sh && bash bench/gpu/run42.sh probe      carry [.gpu_carry/m2, .gpu_carry/data]
#   9    source /tmp/vllm_kit/install.sh && bash bench/gpu/run42.sh learn      carry [.gpu_carry/data]
# Phases:
#   wheels  install the carried wheels (TRL, datasets, gguf, the math grader's parser) into /tmp/site
#   anchor  (GGUF part 1 to /tmp/smol first) the fixed-length anchor, ours and TRL 1.16 interleaved (interleave.py)
#   probe   (GGUF reassembled, converted as our runs convert it) step-1 statistics of word_chain settings
#           (workload_probe.py): the first that learns (reward 0.2-0.8, p50 >= 200 tokens, >= 10 % at the cap,
#           <= 50 % zero-spread groups) becomes the learning workload's data
#   learn   the learning workload, ours (a 20-step learning run, then the full-pass variant) and TRL interleaved,
#           reward curves of both
#   hard    the same on GSM8K (the "hard" workload)
# Every result JSON lists its raw runs (name, steps_s, tokens): `python bench/gpu/throughput.py FILE` recomputes it.
set -uo pipefail
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PYTHONPATH=/tmp/site:$PWD:${PYTHONPATH:-}
GGUF=/tmp/smol/SmolLM2-135M-Instruct.Q4_1.gguf
D=$PWD/.gpu_carry/data
quiet() { grep -vE "^(INFO|WARNING|DEBUG)|^\(MainProcess|it/s\]|s/it\]"; }
logs() {  # the run logs, for the record (last 40 kB each)
    mkdir -p "$OUT/logs" && for f in "$1"/run*.log; do tail -c 40000 "$f" > "$OUT/logs/$(basename "$f")"; done
    tar czf "$OUT/$2" -C "$OUT" logs && rm -rf "$OUT/logs"
}
gguf() {  # the SmolLM2 GGUF from its two parts (part 1 moved to /tmp/smol by the anchor call)
    if [ ! -f $GGUF ]; then
        mv .gpu_carry/m2/gg.1 /tmp/smol/ && cat /tmp/smol/gg.0 /tmp/smol/gg.1 > $GGUF
        echo "$(cat .gpu_carry/m2/sha256)  $GGUF" | sha256sum -c - || return 1
        rm -f /tmp/smol/gg.*
    fi
}
real() {  # $1 data file, $2 result name, $3 schedule
    [ -f /tmp/site/.done ] || { echo "no /tmp/site: the machine went cold; start again from call 1"; exit 3; }
    gguf || exit 1
    nvidia-smi --query-gpu=name,memory.used,clocks.sm,temperature.gpu --format=csv,noheader
    python3 bench/gpu/interleave.py --workload realistic --gguf $GGUF --data "$1" \
        --trl-bench bench/gpu/trl_realistic.py --trl-phases "$D/trl_phases.py" --schedule "$3" \
        --steps "${STEPS:-4}" --trl-steps "${TRL_STEPS:-4}" --learn-steps "${LEARN_STEPS:-20}" \
        --budget "${BUDGET:-575}" --run-timeout "${RUN_TIMEOUT:-330}" --work /tmp/rrl_il --out "$OUT/$2.json" 2>&1 | quiet
    logs /tmp/rrl_il "$2_logs.tgz"
}
case "$1" in
wheels)
    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .gpu_carry/whl/*.whl \
        && touch /tmp/site/.done && python3 -c "import trl, vllm; print('trl', trl.__version__, 'vllm', vllm.__version__)"
    nvidia-smi --query-gpu=name,memory.total,power.limit,clocks.sm,clocks.max.sm --format=csv
    ;;
anchor)
    [ -f /tmp/site/.done ] || { echo "no /tmp/site: the machine went cold; start again from call 1"; exit 3; }
    mkdir -p /tmp/smol && { [ -f .gpu_carry/m1/gg.0 ] && mv .gpu_carry/m1/gg.0 /tmp/smol/ || true; }
    nvidia-smi --query-gpu=name,memory.used,clocks.sm,temperature.gpu --format=csv,noheader
    python3 bench/gpu/interleave.py --trl-bench "$D/trl_bench.py" --trl-phases "$D/trl_phases.py" \
        --schedule "${SCHEDULE:-ours,trl:off:64,ours,trl:off:32}" \
        --steps "${STEPS:-4}" --budget "${BUDGET:-570}" --work /tmp/rrl_ia --out "$OUT/anchor.json" 2>&1 | quiet
    logs /tmp/rrl_ia anchor_logs.tgz
    ;;
probe)
    [ -f /tmp/site/.done ] || { echo "no /tmp/site: the machine went cold; start again from call 1"; exit 3; }
    gguf || exit 1
    M=$(python3 -c "from reasoning_rl.policy.model import convert_gguf as c; import pathlib as p; g=p.Path('$GGUF');
print(c(g.parent, g.name, p.Path('.cache/converted') / g.stem.lower().replace('.', '-')))" 2>&1 | tail -1)
    echo "model dir: $M"
    timeout 400 python3 bench/gpu/workload_probe.py "$M" --candidates "${CANDIDATES:-1:9:0.7,2:9:0.7,1:20:0.7,2:20:0.8}" \
        --out "$OUT/probe.json" 2>&1 | quiet | grep -E "PROBE|CHOSEN|Error|error" ; cp "$OUT/probe.json" /tmp/probe.json
    ;;
learn)
    C=$(python3 -c "import json; r=json.load(open('/tmp/probe.json')); c=r['chosen'] or max(r['results'],
key=lambda x: -abs(x['reward_mean'] - 0.5)); print(c['steps'], c['max_operand'], c['temperature'])" 2>/dev/null || echo "1 9 0.7")
    set -- $C; echo "word_chain: steps $1, max_operand $2, temperature $3"
    export REAL_TEMPERATURE=$3
    python3 datasets/recipes/word_chain.py /tmp/word_chain.jsonl --steps "$1" --max-operand "$2"
    real /tmp/word_chain.jsonl learn "${SCHEDULE:-ours:sync,trl:off:32,ours:noskip}"
    ;;
hard) real "$D/gsm8k_test.jsonl" hard "${SCHEDULE:-ours:sync,trl:off:32,ours:noskip}" ;;
*) echo "unknown phase $1"; exit 2 ;;
esac
