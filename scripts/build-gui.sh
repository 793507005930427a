#!/usr/bin/env bash
# Builds the web GUI (gui/) into python/deepcontext/gui_static/, which the Python package ships.
# Installs the pinned npm dependencies from gui/package-lock.json with `npm ci` first (skipped when
# gui/node_modules already matches the lock file). Needs Node.js >= 20 and npm.
#   scripts/build-gui.sh            install + type-check + build
#   scripts/build-gui.sh --test     also run the Vitest unit tests and eslint
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root/gui"
if ! command -v npm >/dev/null 2>&1; then
  echo "build-gui.sh: npm not found (Node.js >= 20 is needed to build the GUI)" >&2
  exit 1
fi
stamp=node_modules/.deepcontext-lock.sha256
want="$(sha256sum package-lock.json | cut -d' ' -f1)"
if [[ ! -f "$stamp" || "$(cat "$stamp")" != "$want" ]]; then
  npm ci --no-audit --no-fund --loglevel=error
  echo "$want" >"$stamp"
fi
npx tsc --noEmit
npx vite build --logLevel warn
if [[ "${1:-}" == "--test" ]]; then
  npx eslint .
  npx vitest run
fi
test -f "$root/python/deepcontext/gui_static/index.html"
echo "build-gui.sh: built $root/python/deepcontext/gui_static"
