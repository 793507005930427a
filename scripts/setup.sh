#!/usr/bin/env bash
# Sets up a fresh machine: system packages, the pinned test virtualenv (shared, keyed by the hash
# of requirements-test.txt), the GUI build, and deepcontext installed into that virtualenv.
# Prints the virtualenv path on stdout. Usage: VENV=$(scripts/setup.sh)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

packages=(build-essential pkg-config libunwind-dev libsqlite3-dev nlohmann-json3-dev googletest chromium)
missing=()
for p in "${packages[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing system packages: ${missing[*]}" >&2
  sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >&2
fi

venv=$(scripts/venv.sh)

if [ -x scripts/build-gui.sh ]; then
  scripts/build-gui.sh >&2
fi
# speedscope and playwright-core for the interop tests (pinned in their lock file)
if [ -f tests/interop/node/package-lock.json ] && [ ! -d tests/interop/node/node_modules ] &&
  command -v npm >/dev/null 2>&1; then
  (cd tests/interop/node && npm ci --no-audit --no-fund --loglevel=error) >&2
fi

# No build isolation: the build uses the pinned nanobind/scikit-build-core/cmake of the venv, and
# the framework layers compile against the torch installed there.
"$venv/bin/python" -m pip install -q --no-build-isolation --no-deps "$root" >&2
echo "$venv"
