#!/usr/bin/env bash
# HERE (the CPU machine, network to PyPI): stage what bench/gpu/verl_sbs.sh's device calls carry, in git-ignored
# folders, and check each call stays under the 64 MiB that travels with it.
#   .gpu/c1..c6     vLLM 0.24.0 kit (../shared/gpu/vllm_kit.sh)
#   .verl/p1, p2    verl 0.9.1 + ray 2.60 + the wheels verl needs (../shared/gpu/verl_kit.sh)
#   .gpu_carry/whl  wheels for ours and TRL (trl, datasets, multiprocess; gguf, latex2sympy2_extended for us)
#   .gpu_carry/data TRL's bench script (../shared does not travel)
# Then validate verl's overrides without a GPU (verl_runs.py check), and fire the calls listed in verl_sbs.sh.
set -euo pipefail
cd "$(dirname "$0")/../.."
SHARED=${SHARED:-../shared}
for p in /.gpu/ /.gpu_carry/ /.verl/; do grep -qx "$p" .git/info/exclude || echo "$p" >> .git/info/exclude; done
[ -f .gpu/c6/install.sh ] || bash "$SHARED/gpu/vllm_kit.sh" prepare
[ -f .verl/p2/install.sh ] || bash "$SHARED/gpu/verl_kit.sh" prepare
mkdir -p .gpu_carry/whl .gpu_carry/data
for p in trl==1.16.0 datasets==5.2.0 multiprocess==0.70.19 gguf==0.17.1 latex2sympy2_extended==1.11.0 \
         antlr4-python3-runtime==4.13.2; do
    n=${p%%==*}; n=${n//-/_}
    ls .gpu_carry/whl | grep -qi "^${n}-" || python3 -m pip download -q --no-deps --only-binary=:all: \
        --python-version 3.12 --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
        --platform manylinux2014_x86_64 --platform any -d .gpu_carry/whl "$p"
done
cp "$SHARED/gpu/trl_bench.py" .gpu_carry/data/trl_bench.py
tree=$(git ls-files -z --cached --others --exclude-standard | xargs -0 du -cb 2>/dev/null | tail -1 | cut -f1)
limit=$((64 * 1024 * 1024))
for call in ".gpu/c1" ".gpu/c2" ".gpu/c3" ".gpu/c4" ".gpu/c5" ".gpu/c6" ".verl/p1 .gpu_carry" ".verl/p2" ""; do
    # shellcheck disable=SC2086
    size=$((tree + $( [ -n "$call" ] && du -scb $call | tail -1 | cut -f1 || echo 0)))
    printf '%-22s %5d MiB%s\n' "${call:-(tree only)}" $((size / 1024 / 1024)) "$([ $size -gt $limit ] && echo '  OVER 64 MiB')"
done
