#!/usr/bin/env bash
# Create the project's virtual environment (.venv at the repository root) and install the SDK and the
# collector with its dev extra into it:  pip install -e . -e "./collector[dev]"
#
# Called by every Makefile target, so it is fast once done: the stamp file .venv/.installed holds a
# hash of pyproject.toml and collector/pyproject.toml (and the Python version); while they match,
# nothing is installed again. Nothing goes into the system Python, so Debian's
# "externally-managed-environment" never applies.
#
#   scripts/bootstrap.sh            # create/refresh .venv when needed
#   scripts/bootstrap.sh --force    # reinstall
#
# Environment: PYTHON (interpreter to create the venv with, default python3), VENV (default .venv).
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
VENV=${VENV:-.venv}
STAMP="$VENV/.installed"
FORCE=0
[ "${1:-}" = "--force" ] && FORCE=1

say() { printf '==> %s\n' "$*"; }
die() { printf 'error: %s\n' "$*" >&2; exit 1; }

command -v "$PYTHON" >/dev/null 2>&1 || die "$PYTHON not found; install Python 3.10 or newer (Debian: apt-get install python3)"
"$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 10))' \
  || die "$("$PYTHON" -V 2>&1) is too old: ragtrace needs Python 3.10 or newer"

# What the installed environment depends on: both distributions' metadata and the interpreter.
want="$(cat pyproject.toml collector/pyproject.toml | sha256sum | cut -d' ' -f1) $("$PYTHON" -V 2>&1)"

venv_ok() { [ -x "$VENV/bin/python" ] && "$VENV/bin/python" -c 'import pip' >/dev/null 2>&1; }

if [ "$FORCE" = 0 ] && venv_ok && [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$want" ]; then
  exit 0  # up to date
fi

create_venv() {
  rm -rf "$VENV"
  "$PYTHON" -m venv "$VENV"
}

if ! venv_ok; then
  say "creating the virtual environment $VENV ($("$PYTHON" -V 2>&1))"
  if ! create_venv; then
    # Debian/Ubuntu ship venv's ensurepip separately (python3-venv).
    pyver=$("$PYTHON" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
      say "python3 -m venv failed (ensurepip missing): installing Debian's python3-venv"
      export DEBIAN_FRONTEND=noninteractive
      apt-get update
      apt-get install -y --no-install-recommends python3-venv \
        || apt-get install -y --no-install-recommends "python${pyver}-venv" \
        || die "could not install python3-venv with apt-get"
      say "creating the virtual environment $VENV (retry)"
      create_venv || { rm -rf "$VENV"; die "$PYTHON -m venv still fails after installing python3-venv; try: apt-get install python${pyver}-venv"; }
    else
      rm -rf "$VENV"
      die "$PYTHON -m venv failed. On Debian/Ubuntu install the venv module first:
    sudo apt-get install python3-venv      (or python${pyver}-venv)
then run make again."
    fi
  fi
  venv_ok || die "$VENV was created without pip; on Debian/Ubuntu: sudo apt-get install python3-venv"
fi

rm -f "$STAMP"
say "installing ragtrace + ragtrace-collector[dev] into $VENV (first time: a few minutes)"
"$VENV/bin/python" -m pip install -e . -e "./collector[dev]"
echo "$want" > "$STAMP"
say "$VENV is ready ($("$VENV/bin/python" -V 2>&1)); run tools as $VENV/bin/python, $VENV/bin/ragtrace-collector"
