#!/usr/bin/env bash
# Build .phoenix-venv (git-ignored): a real Arize Phoenix server from the package index, in its own virtual
# environment so its many pins never touch the project's .venv. The live Phoenix test
# (tests/ragtrace_collector/exporter/test_phoenix_live.py) starts it on loopback and skips when it is absent.
#
#   bash scripts/phoenix/build.sh      # or: make test-phoenix (builds, then runs the test)
#
# Rebuilt only when scripts/phoenix/requirements.txt changed; the resolved set goes to .phoenix-venv/freeze.txt.
# uv (pinned, the peers' copy in .peers/.uv when there is one) installs; pip is the fallback.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$(pwd)
DIR="$ROOT/.phoenix-venv"
REQ="$ROOT/scripts/phoenix/requirements.txt"
PYTHON=${PYTHON:-python3.11}
UV_VERSION=0.13.9
UV_DIR="$ROOT/.peers/.uv"

sum=$(sha256sum "$REQ" | cut -d' ' -f1)
if [ -f "$DIR/.requirements.sha256" ] && [ "$(cat "$DIR/.requirements.sha256")" = "$sum" ] && [ -x "$DIR/bin/phoenix" ]; then
    echo "phoenix: up to date"
    exit 0
fi
if [ ! -x "$UV_DIR/bin/uv" ]; then
    mkdir -p "$(dirname "$UV_DIR")"
    "$PYTHON" -m venv "$UV_DIR"
    "$UV_DIR/bin/pip" install -q "uv==$UV_VERSION" || true
fi
echo "phoenix: building $DIR"
rm -rf "$DIR"
"$PYTHON" -m venv "$DIR"
if [ -x "$UV_DIR/bin/uv" ]; then
    VIRTUAL_ENV="$DIR" "$UV_DIR/bin/uv" pip install --quiet --python "$DIR/bin/python" -r "$REQ"
    "$UV_DIR/bin/uv" pip freeze --python "$DIR/bin/python" >"$DIR/freeze.txt"
else
    "$DIR/bin/pip" install -q -r "$REQ"
    "$DIR/bin/pip" freeze >"$DIR/freeze.txt"
fi
echo "$sum" >"$DIR/.requirements.sha256"
echo "phoenix: ready ($(grep -i '^arize-phoenix==' "$DIR/freeze.txt"))"
