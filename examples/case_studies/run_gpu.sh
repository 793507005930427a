#!/usr/bin/env bash
# Runs every case study before and after on the GPU machine: plain (timed) and under
# `deepcontext run` (then `deepcontext analyze --format json`). Results go to $OUT (or ./out-cases):
# <case>_<variant>.time.json, <case>_<variant>.dctx, <case>_<variant>.findings.json, summary.txt.
# Needs the package installed (scripts/gpu-check.sh with STEPS=build). CASES= to pick cases,
# CASE_ARGS= for the scripts (e.g. "--steps 6 --warmup 2"), RUN_TIMEOUT= seconds per run (120).
#
# This is also the script that regenerates the analyzer's real GPU fixtures (tests/data/gpu_cases,
# tested by tests/analyzer/test_gpu_cases.py): with FIXTURES=<repo>/tests/data/gpu_cases it copies
# each <case>_<variant>.dctx and .time.json there; commit them with `git add -f` (*.dctx is
# ignored). The committed ones: CASE_ARGS="--steps 6 --warmup 2" on an H200 (docs/case-studies.md).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${OUT:-$PWD/out-cases}
py=${PYTHON:-python3}
cases=${CASES:-dlrm_small gnn unet transformer loader_threads}
mkdir -p "$out"
cd "$here"
for c in $cases; do
  for v in before after; do
    t=${RUN_TIMEOUT:-120}
    timeout "$t" "$py" "${c}_$v.py" --json ${CASE_ARGS:-} >"$out/${c}_$v.time.json" 2>"$out/${c}_$v.time.err" || tail -5 "$out/${c}_$v.time.err"
    timeout "$t" "$py" -m deepcontext run -q -o "$out/${c}_$v.dctx" "${c}_$v.py" ${CASE_ARGS:-} >/dev/null 2>"$out/${c}_$v.run.err" || tail -5 "$out/${c}_$v.run.err"
    timeout "$t" "$py" -m deepcontext analyze "$out/${c}_$v.dctx" --format json >"$out/${c}_$v.findings.json" 2>>"$out/${c}_$v.run.err"
    if [ -n "${FIXTURES:-}" ] && [ -s "$out/${c}_$v.dctx" ]; then
      mkdir -p "$FIXTURES" && cp "$out/${c}_$v.dctx" "$out/${c}_$v.time.json" "$FIXTURES/"
    fi
  done
done
"$py" - "$out" $cases <<'PY' | tee "$out/summary.txt"
import json, sys, os
out, cases = sys.argv[1], sys.argv[2:]
print(f"{'case':16} {'before ms':>10} {'after ms':>10} {'speedup':>8}  top finding before -> after")
for c in cases:
    t, top = {}, {}
    for v in ("before", "after"):
        try:
            t[v] = json.loads(open(f"{out}/{c}_{v}.time.json").read().splitlines()[-1])["step_s"] * 1e3
        except Exception:
            t[v] = float("nan")
        try:
            f = json.load(open(f"{out}/{c}_{v}.findings.json"))["findings"]
            top[v] = f"{f[0]['rule']} ({f[0]['saving_share']:.1%})" if f else "-"
        except Exception as e:
            top[v] = f"error {type(e).__name__}"
    print(f"{c:16} {t['before']:10.2f} {t['after']:10.2f} {t['before'] / t['after']:8.2f}x  {top['before']} -> {top['after']}")
PY
