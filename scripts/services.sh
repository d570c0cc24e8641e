#!/usr/bin/env bash
# Prepare what the tests need, once: the Docker daemon and the sandbox image, and the Lean kernel launcher.
# Each step says what it does and is skipped when already done.
set -euo pipefail
cd "$(dirname "$0")/.."
for step in scripts/services.d/*.sh; do
    [[ -e "$step" ]] || continue
    bash "$step"
done
