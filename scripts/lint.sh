#!/usr/bin/env bash
# Format and lint checks (CI runs them through scripts/test.sh): ruff, clang-format, clang-tidy,
# and eslint for the GUI when its packages are installed.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
venv=${VENV:-$(scripts/venv.sh)}
"$venv/bin/ruff" check python tests bench examples scripts 2>/dev/null || "$venv/bin/ruff" check python tests bench examples
"$venv/bin/ruff" format --check python tests bench examples
mapfile -t cxx < <(git ls-files 'src/*.cpp' 'src/*.h' 'include/*.h' 'tests/cpp/*.cpp')
if [ ${#cxx[@]} -gt 0 ]; then
  "$venv/bin/clang-format" --dry-run --Werror "${cxx[@]}"
  cmake -S . -B build/lint -G Ninja -DPython_EXECUTABLE="$venv/bin/python" >/dev/null
  mapfile -t core < <(git ls-files 'src/tree/*.cpp' 'src/context/*.cpp' 'src/collect/*.cpp' 'src/store/*.cpp' 'src/monitor/*.cpp' 'src/preload/*.cpp' 'src/timeline/*.cpp' 'src/analyzer/*.cpp')
  "$venv/bin/clang-tidy" -p build/lint --quiet "${core[@]}" 2>/dev/null
fi
if [ -f gui/package.json ] && [ -d gui/node_modules ] && grep -q '"lint"' gui/package.json; then
  (cd gui && npm run --silent lint)
fi
