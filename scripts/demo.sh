#!/usr/bin/env bash
# The main job: set up, profile the example training script, print the report and the findings.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
venv=$("$root/scripts/setup.sh")
out=${DEEPCONTEXT_DEMO_OUT:-$root/out}
mkdir -p "$out"
cd "$out"
example="$root/examples/torch/train.py"
[ -f "$example" ] || example="$root/examples/cpu/train_numpy.py"
"$venv/bin/deepcontext" run -o "$out/train.dctx" "$example"
"$venv/bin/deepcontext" report "$out/train.dctx" --depth 14 --min-share 2
if "$venv/bin/deepcontext" analyze --help >/dev/null 2>&1; then
  "$venv/bin/deepcontext" analyze "$out/train.dctx"
fi
