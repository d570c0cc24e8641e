#!/usr/bin/env bash
# The code-sandbox image, built once offline (debootstrap -> docker import) and cached by tag.
set -euo pipefail
cd "$(dirname "$0")/../.."
echo "[services] sandbox image: rrl sandbox build (skipped when the tag exists)"
.venv/bin/python -m reasoning_rl.cli sandbox build
