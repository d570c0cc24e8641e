#!/usr/bin/env bash
# Issue 21 on one H200 (one call; only torch there, no vLLM/Ray): the worker-group trainer at world size 1 with
# NCCL. Here first: pydantic wheels into .gpu_carry/ws1 (see bench/RESULTS.md, issue 21). Device call:
#   bash bench/gpu/ws1_smoke.sh      carry [.gpu_carry/ws1, .gpu_carry/whl]
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .gpu_carry/ws1/*.whl \
    .gpu_carry/whl/latex2sympy2_extended-*.whl .gpu_carry/whl/antlr4_python3_runtime-*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
python3 bench/gpu/ws1_smoke.py --out "$OUT/ws1_smoke.json"
