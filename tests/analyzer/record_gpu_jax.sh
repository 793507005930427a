#!/usr/bin/env bash
# Records the JAX analyzer programs (tests/analyzer/programs/jax_*.py, with and without --fixed)
# under `deepcontext run` with GPU tracing on the GPU machine, the real JAX GPU profiles that
# tests/analyzer/test_gpu_jax.py reads from tests/data/gpu_jax/. Run through scripts/gpu-check.sh
# (STEPS="build jaxrules"), which builds the package first; results go to $OUT (or ./out-jaxrules).
# With FIXTURES=<repo>/tests/data/gpu_jax it copies each profile there (commit with `git add -f`:
# *.dctx is ignored).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${OUT:-$PWD/out-jaxrules}
py=${PYTHON:-python3}
mkdir -p "$out"
status=0
for p in jax_sync_in_loop jax_recompile jax_jit_in_loop; do
  for v in problem fixed; do
    name=${p}_$v
    flag=$([ "$v" = fixed ] && echo --fixed)
    # shellcheck disable=SC2086
    if timeout "${RUN_TIMEOUT:-120}" "$py" -m deepcontext run -q -o "$out/$name.dctx" \
      "$here/programs/$p.py" $flag >"$out/$name.out" 2>"$out/$name.err"; then
      "$py" -m deepcontext analyze "$out/$name.dctx" >"$out/$name.findings.txt" 2>&1
      echo "$name: $(du -b "$out/$name.dctx" | cut -f1) bytes; $(grep -cE '^ *[0-9]+\.' "$out/$name.findings.txt") findings"
      if [ -n "${FIXTURES:-}" ]; then mkdir -p "$FIXTURES" && cp "$out/$name.dctx" "$FIXTURES/"; fi
    else
      echo "$name: FAIL"; tail -5 "$out/$name.err"; status=1
    fi
  done
done
exit $status
