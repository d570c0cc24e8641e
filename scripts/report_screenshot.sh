#!/usr/bin/env bash
# Screenshot a run's HTML report with headless Chromium (for the README).
# Usage: scripts/report_screenshot.sh RUN_DIR OUT.png [WIDTHxHEIGHT]
# Needs chromium (apt-get install -y chromium); writes RUN_DIR/report/report.html first via `rrl report`.
set -euo pipefail

if [[ $# -lt 2 ]]; then
    echo "usage: $0 RUN_DIR OUT.png [WIDTHxHEIGHT]" >&2
    exit 2
fi
run_dir=$1
out=$2
size=${3:-1400x2000}

repo=$(cd "$(dirname "$0")/.." && pwd)
rrl="$repo/.venv/bin/rrl"
[[ -x $rrl ]] || rrl=rrl

browser=$(command -v chromium || command -v chromium-browser || command -v google-chrome || true)
if [[ -z $browser ]]; then
    echo "error: no chromium found; install it with: apt-get install -y chromium" >&2
    exit 1
fi

"$rrl" report "$run_dir"
html=$(cd "$run_dir" && pwd)/report/report.html
mkdir -p "$(dirname "$out")"
out_abs=$(cd "$(dirname "$out")" && pwd)/$(basename "$out")
"$browser" --headless --no-sandbox --disable-gpu --hide-scrollbars \
    --screenshot="$out_abs" --window-size="${size/x/,}" "file://$html" 2>/dev/null
echo "screenshot: $out_abs"
