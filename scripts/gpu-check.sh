#!/usr/bin/env bash
# The GPU check, in one `device` call on the lent NVIDIA machine (docs/gpu.md):
#   run(command="scripts/gpu-check.sh", carry=[".gpu-deps"])
# It brings what that machine lacks (sqlite3/libunwind headers, pkg-config: Debian packages that
# scripts/gpu-deps.sh downloads into .gpu-deps/, unpacked into a prefix, never into /), builds and
# installs the package into the machine's Python, captures the CUPTI fixtures, runs the GPU tests
# and the GPU benchmark, and prints a summary table. Logs and results go to $OUT (or ./out-gpu).
# Steps: STEPS="build fixtures tests bench" (default all); BENCH_ARGS passes options to the bench.
# STEPS="build distributed": DDP with NCCL under the profiler (examples/distributed/gpu_check.py).
# STEPS="build timeline": the bounded timeline on a CUDA loop (tests/timeline/gpu_check.py).
# STEPS="build jaxbench": bench/jax_overhead.py; STEPS="build torchcpu": bench/torch_cpu_overhead.py;
# STEPS="build stepcost": bench/torch_step_cost.py; STEPS="build jaxrules": the JAX analyzer programs
# profiled on the GPU (tests/analyzer/record_gpu_jax.sh); STEPS="build realmodels":
# bench/real_models.py (REALMODELS_ARGS passes options to it).
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
out=${OUT:-$root/out-gpu}
mkdir -p "$out"
py=${PYTHON:-python3}
steps=${STEPS:-build fixtures tests bench}
prefix=/tmp/deepcontext-gpu-deps
declare -a summary=()
row() { summary+=("$(printf '| %-10s | %-6s | %6ss | %s |' "$1" "$2" "$3" "$4")"); }
want() { [[ " $steps " == *" $1 "* ]]; }

echo "== inventory"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
"$py" -c 'import sys, torch; print(sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.is_available())'
cmake --version | head -1 || "$py" -m cmake --version | head -1
echo "tools: $(for t in perf gdb py-spy valgrind nsys; do command -v $t >/dev/null && printf '%s ' $t; done)"

if want build; then
  t0=$SECONDS
  rm -rf "$prefix" && mkdir -p "$prefix"
  for deb in .gpu-deps/*.deb; do dpkg -x "$deb" "$prefix"; done
  pcdir=$prefix/usr/lib/x86_64-linux-gnu/pkgconfig
  sed -i "s|^prefix=.*|prefix=$prefix/usr|" "$pcdir"/*.pc
  export PKG_CONFIG_PATH=$pcdir
  export PKG_CONFIG=$prefix/usr/bin/pkgconf
  export LD_LIBRARY_PATH=$prefix/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  # The machine's own libsqlite3.so.0 with the carried headers (Debian's .a is not PIC).
  export CMAKE_ARGS="-DSQLite3_INCLUDE_DIR=$prefix/usr/include -DSQLite3_LIBRARY=/lib/x86_64-linux-gnu/libsqlite3.so.0 -DPKG_CONFIG_EXECUTABLE=$PKG_CONFIG -Dnlohmann_json_DIR=$prefix/usr/share/cmake/nlohmann_json"
  export CMAKE_BUILD_PARALLEL_LEVEL=16
  if "$py" -m pip install --no-build-isolation --no-deps -q . >"$out/build.log" 2>&1; then
    row build ok $((SECONDS - t0)) "$(cd /tmp && "$py" -c 'import deepcontext, os; d=os.path.dirname(deepcontext.__file__); print(" ".join(sorted(f for f in os.listdir(d) if f.endswith(".so"))))')"
  else
    tail -40 "$out/build.log"
    row build FAIL $((SECONDS - t0)) "see build.log"
    printf '%s\n' "${summary[@]}"
    exit 1
  fi
else
  export LD_LIBRARY_PATH=$prefix/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
fi

if want fixtures; then
  t0=$SECONDS
  if (cd /tmp && "$py" "$root/tests/gpu/capture_fixtures.py" --out "$root/tests/data/gpu") >"$out/fixtures.log" 2>&1; then
    tar -C "$root/tests/data/gpu" -czf "$out/fixtures.tar.gz" .
    row fixtures ok $((SECONDS - t0)) "$(du -b "$out/fixtures.tar.gz" | cut -f1) bytes (tar.gz)"
  else
    tail -30 "$out/fixtures.log"
    row fixtures FAIL $((SECONDS - t0)) "see fixtures.log"
  fi
fi

if want tests; then
  t0=$SECONDS
  # TESTS_ARGS is parsed as shell words, so -k 'a or b' stays one expression.
  eval "tests_args=(${TESTS_ARGS:-})"
  (cd /tmp && timeout "${TESTS_TIMEOUT:-300}" "$py" -m pytest -q -p no:cacheprovider "$root/tests/gpu" "${tests_args[@]}" 2>&1) | tee "$out/tests.log" | tail -25
  row tests "$( [ "${PIPESTATUS[0]}" = 0 ] && echo ok || echo FAIL)" $((SECONDS - t0)) "$(grep -E 'passed|failed' "$out/tests.log" | tail -1)"
fi

if want cases; then
  t0=$SECONDS
  # The analyzer's case studies before/after (docs/case-studies.md); CASE_ARGS e.g. "--steps 10".
  (cd /tmp && OUT="$out/cases" PYTHON="$py" timeout "${CASES_TIMEOUT:-240}" \
    bash "$root/examples/case_studies/run_gpu.sh" 2>&1) | tee "$out/cases.log" | tail -12
  row cases "$( [ "${PIPESTATUS[0]}" = 0 ] && echo ok || echo FAIL)" $((SECONDS - t0)) "cases/summary.txt"
fi

if want distributed; then
  t0=$SECONDS
  # torch.distributed with NCCL (docs/distributed.md): 1-GPU DDP (world_size 1) without/with the
  # profiler, NCCL kernels under the all-reduce call site; 2 ranks + straggler when 2+ GPUs.
  (cd /tmp && NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 \
    timeout "${DIST_TIMEOUT:-300}" "$py" "$root/examples/distributed/gpu_check.py" \
    --out "$out/distributed" ${DIST_ARGS:-} 2>&1) | tee "$out/distributed.log" | tail -12
  row distributed "$( [ "${PIPESTATUS[0]}" = 0 ] && echo ok || echo FAIL)" $((SECONDS - t0)) \
    "$(grep -E '^distributed: (ok|FAIL):' "$out/distributed.log" | tail -1 | cut -c14-)"
fi

if want timeline; then
  t0=$SECONDS
  # The bounded timeline (docs/format.md "Timeline"): a CUDA loop under --timeline 3 (last steps,
  # kernels per stream, GPU clock vs CPU clock, chrome export, loop times), then tests/timeline.
  (cd /tmp && timeout "${TIMELINE_TIMEOUT:-300}" "$py" "$root/tests/timeline/gpu_check.py" \
    --out "$out/timeline" 2>&1) | tee "$out/timeline.log" | tail -8
  status=${PIPESTATUS[0]}
  (cd /tmp && timeout 300 "$py" -m pytest -q -p no:cacheprovider "$root/tests/timeline" 2>&1) \
    | tee -a "$out/timeline.log" | tail -3
  [ "${PIPESTATUS[0]}" = 0 ] || status=1
  row timeline "$( [ "$status" = 0 ] && echo ok || echo FAIL)" $((SECONDS - t0)) \
    "$(grep -E '^timeline: (ok|FAIL):' "$out/timeline.log" | tail -1 | cut -c11-)"
fi

if want jax; then
  t0=$SECONDS
  # JAX on the GPU (docs/jax.md): the example MLP and transformer profiled (share of kernel
  # gpu_time under an HLO op with a source line, through XLA's NVTX thunk ranges), step-time
  # overhead vs no profiler and jax.profiler (MLP, 4 layers, 100 steps), RSS at 100/400 steps,
  # jax.profiler alongside; the MLP's sampled kernel time split by HLO op against every record
  # (--split-steps, 60,000); then the NVTX replay test. JAX_ARGS e.g. "--steps 50 --repeat 1";
  # "--cuda-graphs node" runs everything with every record (no split check).
  # shellcheck disable=SC2086
  (cd /tmp && PYTHONUNBUFFERED=1 timeout "${JAX_TIMEOUT:-420}" "$py" "$root/tests/jax/gpu_check.py" \
    --out "$out/jax" ${JAX_ARGS:-} 2>&1) | tee "$out/jax.log" | tail -14
  status=${PIPESTATUS[0]}
  (cd /tmp && timeout 120 "$py" -m pytest -q -p no:cacheprovider "$root/tests/jax/test_nvtx_replay.py" 2>&1) \
    | tee -a "$out/jax.log" | tail -2
  [ "${PIPESTATUS[0]}" = 0 ] || status=1
  row jax "$( [ "$status" = 0 ] && echo ok || echo FAIL)" $((SECONDS - t0)) \
    "$(grep -cE '^PASS ' "$out/jax.log") pass, $(grep -cE '^FAIL ' "$out/jax.log") fail (jax/jax_gpu.json)"
fi

if want jaxrules; then
  t0=$SECONDS
  # The JAX analyzer programs on the GPU (tests/analyzer/record_gpu_jax.sh); with
  # JAXRULES_FIXTURES=1 the profiles replace the committed ones in tests/data/gpu_jax (and come back
  # in $out/jaxrules either way).
  (cd /tmp && OUT="$out/jaxrules" PYTHON="$py" FIXTURES="${JAXRULES_FIXTURES:+$root/tests/data/gpu_jax}" \
    timeout "${JAXRULES_TIMEOUT:-300}" bash "$root/tests/analyzer/record_gpu_jax.sh" 2>&1) | tee "$out/jaxrules.log" | tail -8
  row jaxrules "$( [ "${PIPESTATUS[0]}" = 0 ] && echo ok || echo FAIL)" $((SECONDS - t0)) "jaxrules/*.findings.txt"
fi

if want jaxbench; then
  t0=$SECONDS
  # bench/jax_overhead.py: JAX step time vs no profiler and jax.profiler, RSS in steps; with
  # JAXBENCH_DIAGNOSE=1 also deepcontext's own --native profile of the deepcontext run.
  # shellcheck disable=SC2086
  (cd /tmp && PYTHONUNBUFFERED=1 timeout "${JAXBENCH_TIMEOUT:-300}" "$py" "$root/bench/jax_overhead.py" \
    --json "$out/jax_overhead.json" --markdown "$out/jax_overhead.md" \
    ${JAXBENCH_DIAGNOSE:+--diagnose "$out/jaxdiag"} ${JAXBENCH_ARGS:-} 2>&1) | tee "$out/jaxbench.log" | tail -60
  row jaxbench "$( [ "${PIPESTATUS[0]}" = 0 ] && echo ok || echo FAIL)" $((SECONDS - t0)) "jax_overhead.md"
fi

if want torchcpu; then
  t0=$SECONDS
  # bench/torch_cpu_overhead.py on this (quieter, larger) host: the PyTorch CPU loop.
  # shellcheck disable=SC2086
  (cd /tmp && timeout "${TORCHCPU_TIMEOUT:-300}" "$py" "$root/bench/torch_cpu_overhead.py" \
    --markdown "$out/torch_cpu.md" ${TORCHCPU_ARGS:-} 2>&1) | tee "$out/torchcpu.log" | tail -20
  row torchcpu "$( [ "${PIPESTATUS[0]}" = 0 ] && echo ok || echo FAIL)" $((SECONDS - t0)) "torch_cpu.md"
fi

if want stepcost; then
  t0=$SECONDS
  # bench/torch_step_cost.py: what each part of the torch layer costs per step on this host's CPU.
  # shellcheck disable=SC2086
  (cd /tmp && timeout "${STEPCOST_TIMEOUT:-200}" "$py" "$root/bench/torch_step_cost.py" \
    ${STEPCOST_ARGS:-} 2>&1) | tee "$out/stepcost.log" | tail -12
  row stepcost "$( [ "${PIPESTATUS[0]}" = 0 ] && echo ok || echo FAIL)" $((SECONDS - t0)) "stepcost.log"
fi

if want realmodels; then
  t0=$SECONDS
  # bench/real_models.py: eight real models' launch-bound training steps (transformers, timm,
  # torch_geometric, a DLRM, GPT-2 compiled), each configuration its own process: step time
  # against no profiler, deepcontext's sampled gpu_time against every-op tracing, torch.profiler
  # and the floors. It starts no run past --budget-s (420 s) and still prints its table; the JSON
  # is rewritten after every run. REALMODELS_ARGS e.g. "--models gpt2,dlrm --rounds 2
  # --budget-s 300"; REALMODELS_KEEP=1 brings the deepcontext profiles back in $out/realmodels.
  # shellcheck disable=SC2086
  (cd /tmp && PYTHONUNBUFFERED=1 timeout "${REALMODELS_TIMEOUT:-540}" "$py" "$root/bench/real_models.py" \
    --json "$out/real_models.json" ${REALMODELS_KEEP:+--keep "$out/realmodels"} ${REALMODELS_ARGS:-} 2>&1) \
    | tee "$out/realmodels.log" | tail -40
  status=${PIPESTATUS[0]}
  detail=$(grep -E '^deepcontext: median' "$out/realmodels.log" | tail -1)
  row realmodels "$( [ "$status" = 0 ] && echo ok || echo FAIL)" $((SECONDS - t0)) "${detail:-real_models.json}"
fi

if want bench; then
  t0=$SECONDS
  # shellcheck disable=SC2086
  (cd /tmp && PYTHONUNBUFFERED=1 timeout "${BENCH_TIMEOUT:-300}" "$py" "$root/bench/gpu_overhead.py" --json "$out/bench.json" ${BENCH_ARGS:-} 2>&1) | tee "$out/bench.log" | tail -30
  row bench "$( [ "${PIPESTATUS[0]}" = 0 ] && echo ok || echo FAIL)" $((SECONDS - t0)) "bench.json"
fi

echo
echo "| step       | result | time    | detail |"
echo "| ---------- | ------ | ------- | ------ |"
printf '%s\n' "${summary[@]}"
