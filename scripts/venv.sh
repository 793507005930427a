#!/usr/bin/env bash
# Creates (once) and prints the path of the shared test virtualenv, keyed by the hash of
# requirements-test.txt so CI and later sessions reuse it. Usage: VENV=$(scripts/venv.sh)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
hash=$(sha256sum "$root/requirements-test.txt" | cut -c1-12)
venv="${DEEPCONTEXT_VENV_ROOT:-$HOME/.cache/deepcontext}/venv-$hash"
if [ ! -x "$venv/bin/python" ] || [ ! -f "$venv/.complete" ]; then
  echo "creating test virtualenv $venv (first time only; torch is large)" >&2
  rm -rf "$venv"
  python3 -m venv "$venv"
  "$venv/bin/python" -m pip install -q --upgrade pip >&2
  "$venv/bin/python" -m pip install -q -r "$root/requirements-test.txt" >&2
  touch "$venv/.complete"
fi
echo "$venv"
