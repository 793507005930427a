#!/usr/bin/env bash
# Downloads (here, once) the Debian packages that the GPU machine lacks for building the package:
# sqlite3, libunwind and nlohmann/json headers, libunwind itself, pkg-config. scripts/gpu-check.sh
# unpacks them there. .gpu-deps/ is ignored through .git/info/exclude and travels with `carry`.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
grep -qx '/.gpu-deps/' .git/info/exclude 2>/dev/null || echo '/.gpu-deps/' >>.git/info/exclude
mkdir -p .gpu-deps
cd .gpu-deps
apt-get download libsqlite3-dev libunwind-dev libunwind8 pkgconf pkgconf-bin libpkgconf3 nlohmann-json3-dev
ls -1
