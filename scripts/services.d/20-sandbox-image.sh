#!/usr/bin/env bash
# The code-sandbox images, built once offline (debootstrap -> docker import, root fs kept for the local backend)
# and cached by tag: the stdlib one (code grader) and the scientific one (python tool: sympy, numpy, mpmath).
# From scratch on this 2-core machine: the scientific one took 2 min 36 s (mostly downloading and unpacking).
set -euo pipefail
cd "$(dirname "$0")/../.."
echo "[services] sandbox image: rrl sandbox build (skipped when the tag exists)"
.venv/bin/python -m reasoning_rl.cli sandbox build
.venv/bin/python -m reasoning_rl.cli sandbox build --sci
