#!/usr/bin/env bash
# Build one pinned virtual environment per peer family under .peers/<env>/ (git-ignored), so the peer
# apps in scripts/peers/apps/ run the REAL instrumentation packages without touching the project's .venv.
#
#   bash scripts/peers/build.sh                 # every environment in scripts/peers/requirements/
#   bash scripts/peers/build.sh openinference   # just one
#
# Pins are in scripts/peers/requirements/<env>.txt; the fully resolved set is written to
# .peers/<env>/freeze.txt (the capture script copies it into each fixture's versions.json).
# An environment is rebuilt only when its requirements file changed. uv (itself pinned, installed in
# .peers/.uv) resolves and installs; pip is the fallback. Only the package index is reached.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$(pwd)
PEERS="$ROOT/.peers"
REQS="$ROOT/scripts/peers/requirements"
PYTHON=${PYTHON:-python3.11}
UV_VERSION=0.13.9
mkdir -p "$PEERS"

if [ ! -x "$PEERS/.uv/bin/uv" ]; then
    "$PYTHON" -m venv "$PEERS/.uv"
    "$PEERS/.uv/bin/pip" install -q "uv==$UV_VERSION" || true
fi

envs=("$@")
if [ ${#envs[@]} -eq 0 ]; then
    for f in "$REQS"/*.txt; do envs+=("$(basename "$f" .txt)"); done
fi

status=0
for env in "${envs[@]}"; do
    req="$REQS/$env.txt"
    dir="$PEERS/$env"
    stamp="$dir/.requirements.sha256"
    sum=$(sha256sum "$req" | cut -d' ' -f1)
    if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$sum" ] && [ -x "$dir/bin/python" ]; then
        echo "peers: $env up to date"
        continue
    fi
    echo "peers: building $env"
    rm -rf "$dir"
    "$PYTHON" -m venv "$dir"
    if [ -x "$PEERS/.uv/bin/uv" ]; then
        ok=0
        VIRTUAL_ENV="$dir" "$PEERS/.uv/bin/uv" pip install --quiet --python "$dir/bin/python" -r "$req" || ok=$?
    else
        ok=0
        "$dir/bin/pip" install -q -r "$req" || ok=$?
    fi
    if [ "$ok" -ne 0 ]; then
        echo "peers: $env FAILED to install (skipped)" >&2
        status=1
        continue
    fi
    if [ -x "$PEERS/.uv/bin/uv" ]; then
        "$PEERS/.uv/bin/uv" pip freeze --python "$dir/bin/python" >"$dir/freeze.txt"
    else
        "$dir/bin/pip" freeze >"$dir/freeze.txt"
    fi
    echo "$sum" >"$stamp"
    echo "peers: $env ready ($(wc -l <"$dir/freeze.txt") packages)"
done
exit $status
