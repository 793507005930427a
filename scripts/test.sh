#!/usr/bin/env bash
# The whole test suite: setup, lint, C++ tests, GUI unit tests, then pytest against the installed
# package (its summary line is the last thing printed).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
venv=$(scripts/setup.sh)
export PATH="$venv/bin:$PATH"

echo "== lint" >&2
scripts/lint.sh

echo "== C++ tests" >&2
cmake -S . -B build/cpp-tests -G Ninja -DDEEPCONTEXT_TESTS=ON -DPython_EXECUTABLE="$venv/bin/python" >/dev/null
ninja -C build/cpp-tests -j2 >/dev/null
ctest --test-dir build/cpp-tests --output-on-failure >&2

if [ -f gui/package.json ] && [ -d gui/node_modules ]; then
  echo "== GUI unit tests" >&2
  (cd gui && npm test --silent) >&2
fi

echo "== pytest" >&2
cd "$root"
exec "$venv/bin/python" -m pytest -q -p no:cacheprovider "$@" tests
