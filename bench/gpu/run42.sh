#!/usr/bin/env bash
# Issue 42 ON the GPU machine (nvidia-h200), from the repo root:  bash bench/gpu/run42.sh PHASE
# Here first: `bash bench/gpu/prepare.sh` (vLLM kit .gpu/c1..c6, wheels, the SmolLM2 GGUF in two parts, GSM8K
# and TRL's bench scripts in .gpu_carry/data; the word_chain learning workload is made there by `warm`). The device calls, back to back (the
# machine goes back after 30 s idle):
#   1-5  bash .gpu/cN/move.sh N                                                 carry [.gpu/cN]
#   6    bash .gpu/c6/move.sh 6 && source .gpu/c6/install.sh && cp .gpu/c6/install.sh /tmp/vllm_kit/install.sh
#                                                                               carry [.gpu/c6]
#        (with py-spy, c6 + .gpu_carry/whl are over 64 MiB: the next call starts with `bash bench/gpu/run42.sh
#        wheels;` and carries .gpu_carry/whl as well)
#   7    source /tmp/vllm_kit/install.sh && bash bench/gpu/run42.sh handoff    carry [.gpu_carry/m1]
#   8    source /tmp/vllm_kit/install.sh && bash bench/gpu/run42.sh warm       carry [.gpu_carry/m2, .gpu_carry/data]
#   9    source /tmp/vllm_kit/install.sh && bash bench/gpu/run42.sh learn      carry [.gpu_carry/data]
#   10   source /tmp/vllm_kit/install.sh && bash bench/gpu/run42.sh match      carry [.gpu_carry/data]
#   11   (optional) source /tmp/vllm_kit/install.sh && bash bench/gpu/run42.sh anchor  carry [.gpu_carry/data]
# Issue 46 (speculation at one fixed policy; needs 1-8, not 9-11), each call <= 590 s, right after warm:
#   12   source /tmp/vllm_kit/install.sh && bash bench/gpu/run42.sh spec       carry [.gpu_carry/data]
#   13   (if time is left) source /tmp/vllm_kit/install.sh && NAME=spec46_group
#        VARIANTS=off,group:tail64,off:sync,group bash bench/gpu/run42.sh spec  carry [.gpu_carry/data]
# Issues 42/44 (where generation's host time goes, ~250 s, needs 1-6 only):
#   14   source /tmp/vllm_kit/install.sh && PYSPY=1 bash bench/gpu/run42.sh mode               carry []
#        (inproc vs mp vs mp2 = two engine processes on the one GPU vs busy = the in-process engine beside an
#        update process on the same GPU; each mode in its own process, ~60-90 s each on the GPU)
# The next session's plan (issue 42 first): 1-6, 14, then the anchor for the ratio (no py-spy: it samples TRL too)
#   15   source /tmp/vllm_kit/install.sh && bash bench/gpu/run42.sh wheels; PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
#        SCHEDULE=ours:plan,trl:off:64,ours:plan,trl:off:32 STEPS=3 BUDGET=560 bash bench/gpu/run42.sh anchor
#                                                         carry [.gpu_carry/m1, .gpu_carry/data, .gpu_carry/whl]
#        (ours:plan = the product's default micro-batch, the memory plan's largest for the card; on an H100 80GB TRL's
#        candidates are off:32 and off:16, mb64 does not fit, and ours:mb2 runs out of memory beside the engine)
#   16   (if 14 showed mp2 >> inproc) SCHEDULE=ours:mb2 STEPS=3 PYSPY=1 ... run42.sh anchor: where our step's host
#        time goes, for the data-parallel-engines design
#   or without warm, on GSM8K (the SmolLM2 GGUF): 1-7, then
#        source /tmp/vllm_kit/install.sh && bash bench/gpu/run42.sh spec-hard  carry [.gpu_carry/m2, .gpu_carry/data]
# Issue 42, after 2026-12-07 (5) (RESULTS.md): our generation alternates 1.7 / 2.4 s from batch to batch where vLLM
# decodes distinct prompts' 65,536 tokens in 1.2-1.5 s; first what makes a batch slow (after 1-6, ~4 min):
#   17   source /tmp/vllm_kit/install.sh && MODES=inproc EM_ARGS="--prompts anchor --rounds 4" EM_NAME=em_anchor
#        bash bench/gpu/run42.sh mode && MODES=inproc EM_ARGS="--prompts anchor --prefix-cache off --rounds 4"
#        EM_NAME=em_anchor_nocache bash bench/gpu/run42.sh mode                             carry []
#   then the anchor (15) with SCHEDULE=ours:proc,trl:off:64,ours:plan,trl:off:32 on an H200 (ours:proc =
#   rollout.engine_process, 1.045x ours:plan on the last H100 call), and what 17 found turned into a setting.
# Issue 42 after 2026-12-08 (rollout.engine_cores; the call with it was lost when the machine was taken back):
# after 1-6, first the anchor with two engine cores (ours:proc2 = engine_process + engine_cores 2), ~560 s:
#   18   source /tmp/vllm_kit/install.sh && bash bench/gpu/run42.sh wheels >/dev/null 2>&1; if nvidia-smi -L | grep -q
#        H200; then S=ours:proc2,trl:off:64,ours:proc,trl:off:32; else S=ours:proc2,trl:off:32,ours:proc,trl:off:16;
#        fi; PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True SCHEDULE=$S STEPS=3 BUDGET=575 bash bench/gpu/run42.sh
#        anchor                                     carry [.gpu_carry/m1, .gpu_carry/data, .gpu_carry/whl]
#   19   (decode alone, the anchor's batches; mp2 deals one prompt's samples to one core as engine_cores does)
#        source /tmp/vllm_kit/install.sh && MODES=inproc,mp2,mp EM_ARGS="--prompts anchor --rounds 4"
#        EM_NAME=em_anchor bash bench/gpu/run42.sh mode                                    carry []
# Issue 44 (continuous rollouts with the engine on the trainer's GPU in a process of its own, resources.share_gpus;
# needs 1-6, Ray, wheels, warm): after call 6,
#   R1   bash bench/gpu/run42.sh ray1                                       carry [.gpu_carry/ray1]
#   R2   source /tmp/vllm_kit/install.sh && bash bench/gpu/run42.sh wheels && bash bench/gpu/run42.sh ray2
#                                                                           carry [.gpu_carry/ray2, .gpu_carry/whl]
#   8    warm, as above                                                     carry [.gpu_carry/m2, .gpu_carry/data]
#   L1   source /tmp/vllm_kit/install.sh && SCHEDULE=ours:sync,ours:share1,ours:share0,ours:share2 BUDGET=570
#        bash bench/gpu/run42.sh match                                      carry [.gpu_carry/data]
#        (presets: interleave.py REAL_PRESETS; shareK = split placement on the one GPU at rollout.max_lag=K)
#   L2   (if time is left) SCHEDULE=ours:share1,trl:off:32,ours:sync ... match
# Measured 2026-12-05 on one H200: kit 1-7 ~100 s of device time once a machine starts, warm 285 s, our 21-step
# learning run ~300 s (step 1 with compile 39 s, then ~8.5 s a step), TRL ~60 s to start then ~25 s a step.
# Phases:
#   wheels  install the carried wheels (TRL, datasets, gguf, the math grader's parser) into /tmp/site
#   handoff (GGUF part 1 to /tmp/smol first) the anchor's hand-off and freshness check alone, in place vs vLLM's
#           layer-wise reload, grouped vs per-tensor fingerprints (bench/gpu/handoff.py, ~90 s; ROUNDS=5 rounds)
#   anchor  (GGUF part 1 to /tmp/smol first) the fixed-length anchor, ours and TRL 1.16 interleaved (interleave.py)
#   warm    (GGUF reassembled) the learning workload: word_chain rows with 2-48 operations (RL rows, and SFT rows
#           of other problems, datasets/recipes/word_chain.py), `rrl sft` of SmolLM2 on the SFT rows
#           (bench/gpu/warm_sft.yaml), then step-1 statistics of the export at a few temperatures
#           (workload_probe.py): the first that learns (reward 0.2-0.8, p50 >= 200 tokens, >= 10 % at the cap,
#           <= 50 % zero-spread groups) is the learning workload's temperature
#   learn   the learning workload from the warm start at REAL_LR: our 20-step learning run (its reward curve), then
#           TRL's run (its reward curve); one call cannot hold the matched comparison as well
#   match   the same workload, interleaved, short runs: ours without the zero-advantage skip (the work TRL does),
#           TRL 1.16 (IS off), ours with the skip: Σtokens/Σtime of each
#   hard    the same on GSM8K (the "hard" workload)
# PYSPY=1 (phases anchor, mode): the phase's Python processes under py-spy (its wheel is in .gpu_carry/whl),
#           sampled stacks in $OUT/pyspy_PHASE.txt.gz; `python bench/gpu/stacks_report.py FILE --within ...` sums them
#   mode    bench/gpu/engine_mode.py: vLLM's host time per request-step, engine core in this process (ours) vs
#           its own process vs two engine processes (mp2) vs ours beside an update process (busy: what overlapping
#           the update with generation can win), per-token log-probs off/on (SHAPE=qwen: the anchor's model,
#           256 x 256 tokens; MODES=inproc,mp picks modes)
#   spec    issue 46: the warm start, generation only (bench/gpu/speculative.py): off, then ngram in the tail
#           (max_batch 64, 128) and always, each in its own process: 6 rounds of 64 x 8 up to 1,024 tokens and a
#           one-sample pass over the other 960 rows, so ~125 s a variant (engine start ~50 s); BUDGET 540 skips
#           what would not fit. spec-hard: the same on GSM8K with the SmolLM2 GGUF (converted first)
# Every result JSON lists its raw runs (name, steps_s, tokens): `python bench/gpu/throughput.py FILE` recomputes it.
set -uo pipefail
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PYTHONPATH=/tmp/site:$PWD:${PYTHONPATH:-}
py() {  # py SECONDS ARGS: timeout SECONDS (0: none) python3 ARGS, under py-spy with PYSPY=1 ($OUT/pyspy_PHASE.txt.gz)
    local t=$1; shift
    if [ -n "${PYSPY:-}" ]; then
        timeout "$t" /tmp/site/bin/py-spy record --rate "${PYSPY_RATE:-50}" --subprocesses --nonblocking \
            --format raw -o "/tmp/pyspy_$PHASE.txt" -- python3 "$@"
        local rc=$?; gzip -c "/tmp/pyspy_$PHASE.txt" > "$OUT/pyspy_$PHASE.txt.gz"; return $rc
    fi
    timeout "$t" python3 "$@"
}
PHASE=${1:-none}
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
real() {  # $1 data file, $2 result name, $3 schedule, $4 model (GGUF file or HF dir)
    [ -f /tmp/site/.done ] || { echo "no /tmp/site: the machine went cold; start again from call 1"; exit 3; }
    nvidia-smi --query-gpu=name,memory.used,clocks.sm,temperature.gpu --format=csv,noheader
    python3 bench/gpu/interleave.py --workload realistic --model "$4" --data "$1" \
        --trl-bench bench/gpu/trl_realistic.py --trl-phases "$D/trl_phases.py" --schedule "$3" \
        --steps "${STEPS:-4}" --trl-steps "${TRL_STEPS:-4}" --learn-steps "${LEARN_STEPS:-20}" \
        --budget "${BUDGET:-575}" --run-timeout "${RUN_TIMEOUT:-330}" --work /tmp/rrl_il --out "$OUT/$2.json" 2>&1 | quiet
    logs /tmp/rrl_il "$2_logs.tgz"
}
temperature() {  # the warm phase's chosen temperature (1.0 when the probe chose none)
    python3 -c "import json; r=json.load(open('/tmp/probe.json')); c=r['chosen'] or min(r['results'],
key=lambda x: abs(x['reward_mean'] - 0.5)); print(c['temperature'])" 2>/dev/null || echo 1.0
}
spec() {  # $1 model (HF dir or GGUF file), $2 data, $3 temperature, $4 result name
    [ -f /tmp/site/.done ] || { echo "no /tmp/site: the machine went cold; start again from call 1"; exit 3; }
    nvidia-smi --query-gpu=name,memory.used,clocks.sm,temperature.gpu --format=csv,noheader
    timeout 590 python3 bench/gpu/speculative.py --model "$1" --data "$2" --temperature "$3" \
        --variants "${VARIANTS:-off,ngram:tail64,ngram:tail128,ngram}" --budget "${BUDGET:-540}" \
        --work /tmp/rrl_spec --out "$OUT/$4.json" 2>&1 | quiet
}
case "$1" in
wheels)
    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .gpu_carry/whl/*.whl \
        && touch /tmp/site/.done && python3 -c "import trl, vllm; print('trl', trl.__version__, 'vllm', vllm.__version__)"
    nvidia-smi --query-gpu=name,memory.total,power.limit,clocks.sm,clocks.max.sm --format=csv
    ;;
handoff)
    [ -f /tmp/site/.done ] || { echo "no /tmp/site: the machine went cold; start again from call 1"; exit 3; }
    mkdir -p /tmp/smol && { [ -f .gpu_carry/m1/gg.0 ] && mv .gpu_carry/m1/gg.0 /tmp/smol/ || true; }
    timeout 300 python3 bench/gpu/handoff.py --rounds "${ROUNDS:-5}" --out "$OUT/handoff.json" 2>&1 | quiet
    ;;
anchor)
    [ -f /tmp/site/.done ] || { echo "no /tmp/site: the machine went cold; start again from call 1"; exit 3; }
    mkdir -p /tmp/smol && { [ -f .gpu_carry/m1/gg.0 ] && mv .gpu_carry/m1/gg.0 /tmp/smol/ || true; }
    nvidia-smi --query-gpu=name,memory.used,clocks.sm,temperature.gpu --format=csv,noheader
    py 0 bench/gpu/interleave.py --trl-bench "$D/trl_bench.py" --trl-phases "$D/trl_phases.py" \
        --schedule "${SCHEDULE:-ours,trl:off:64,ours,trl:off:32}" \
        --steps "${STEPS:-4}" --budget "${BUDGET:-570}" --work /tmp/rrl_ia --out "$OUT/anchor.json" 2>&1 | quiet
    logs /tmp/rrl_ia anchor_logs.tgz
    ;;
warm)
    [ -f /tmp/site/.done ] || { echo "no /tmp/site: the machine went cold; start again from call 1"; exit 3; }
    gguf || exit 1
    python3 datasets/recipes/word_chain.py /tmp/word_chain.jsonl --max-steps 48 --sft /tmp/word_chain_sft.jsonl \
        --sft-size "${SFT_ROWS:-4000}"
    timeout 300 python3 -m reasoning_rl.cli sft bench/gpu/warm_sft.yaml data.train=/tmp/word_chain_sft.jsonl \
        run.dir=/tmp/rrl_warm 2>&1 | quiet | grep -vE "^step [0-9]*[1-9]/" | tail -20
    M=$(ls -d /tmp/rrl_warm/export/step_* | tail -1); rm -rf /tmp/warm_model && cp -r "$M" /tmp/warm_model
    cp /tmp/rrl_warm/metrics.jsonl "$OUT/warm_sft_metrics.jsonl"
    timeout 300 python3 bench/gpu/workload_probe.py /tmp/warm_model --data /tmp/word_chain.jsonl \
        --temperatures "${TEMPERATURES:-1.0}" --out "$OUT/probe.json" 2>&1 | quiet | grep -E "PROBE|CHOSEN|Error|error"
    cp "$OUT/probe.json" /tmp/probe.json
    ;;
learn|match)
    T=$(temperature)
    echo "word_chain from the warm start at temperature $T, lr ${REAL_LR:=1e-5}"
    export REAL_TEMPERATURE=$T REAL_LR
    if [ "$1" = learn ]; then  # the learning run needs ~300 s on its own (2026-12-05: 300 s was not enough)
        RUN_TIMEOUT=${RUN_TIMEOUT:-420} TRL_STEPS=${TRL_STEPS:-6} \
            real /tmp/word_chain.jsonl learn "${SCHEDULE:-ours:sync,trl:off:32}" /tmp/warm_model
    else
        # all three in one call: ours ~150 s a run at 2 + 1 steps, TRL ~60 s to start then 30-39 s a step
        # (2026-12-06: at 3 + 1 steps TRL hit a 210-s run timeout and ours:sync did not fit the budget)
        LEARN_STEPS=0 STEPS=${STEPS:-2} TRL_STEPS=${TRL_STEPS:-2} RUN_TIMEOUT=${RUN_TIMEOUT:-240} \
            BUDGET=${BUDGET:-560} \
            real /tmp/word_chain.jsonl match "${SCHEDULE:-ours:noskip,trl:off:32,ours:sync}" /tmp/warm_model
    fi
    ;;
ray1)  # part 0 of Ray's wheel and its dependencies, kept in /tmp/ray_kit until part 1 arrives
    mkdir -p /tmp/ray_kit && mv .gpu_carry/ray1/ray.0 /tmp/ray_kit/ && cp -r .gpu_carry/ray1/deps /tmp/ray_kit/
    ls /tmp/ray_kit /tmp/ray_kit/deps | wc -l
    ;;
ray2)  # Ray into /tmp/site (after `wheels`): its wheel reassembled, and only the dependencies not importable here
    [ -f /tmp/site/.done ] || { echo "no /tmp/site: run the wheels phase first"; exit 3; }
    [ -f /tmp/ray_kit/ray.0 ] || { echo "no /tmp/ray_kit/ray.0: the machine went cold; run ray1 again"; exit 3; }
    W=/tmp/ray_kit/$(cut -d' ' -f3 .gpu_carry/ray2/sha256)
    cat /tmp/ray_kit/ray.0 .gpu_carry/ray2/ray.1 > "$W" && (cd /tmp/ray_kit && sha256sum -c "$OLDPWD/.gpu_carry/ray2/sha256") || exit 1
    missing=()
    for whl in /tmp/ray_kit/deps/*.whl; do
        mod=$(basename "$whl" | cut -d- -f1 | tr 'A-Z' 'a-z')
        case "$mod" in pyyaml) mod=yaml ;; protobuf) mod=google.protobuf ;; attrs) mod=attr ;; rpds_py) mod=rpds ;; esac
        python3 -c "import $mod" 2>/dev/null || missing+=("$whl")
    done
    echo "Ray's dependencies installed here: ${missing[*]:-none}"
    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site "$W" "${missing[@]}" || exit 1
    python3 -c "import ray; ray.init(num_cpus=2, include_dashboard=False); print('ray', ray.__version__,
ray.cluster_resources()); ray.shutdown()" 2>&1 | grep -E "^ray |Error"
    ;;
mode) py 590 bench/gpu/engine_mode.py --shape "${SHAPE:-qwen}" --modes "${MODES:-inproc,mp,mp2,busy}" ${EM_ARGS:-} \
        --out "$OUT/${EM_NAME:-engine_mode}.json" 2>&1 | quiet ;;
hard) gguf || exit 1; real "$D/gsm8k_test.jsonl" hard "${SCHEDULE:-ours:sync,trl:off:32,ours:noskip}" $GGUF ;;
spec)
    [ -d /tmp/warm_model ] || { echo "no /tmp/warm_model: run the warm phase first"; exit 3; }
    spec /tmp/warm_model /tmp/word_chain.jsonl "$(temperature)" "${NAME:-spec46}"
    ;;
spec-hard) gguf || exit 1; spec $GGUF "$D/gsm8k_test.jsonl" 1.0 "${NAME:-spec46_gsm8k}" ;;
*) echo "unknown phase $1"; exit 2 ;;
esac
