"""The CUPTI layer's NVTX hot paths take no lock and allocate nothing (bench/jax_nvtx/run.py,
which counts both on the timing thread; times are printed, not asserted: CI machines vary)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LIB = os.path.join(os.path.dirname(__import__("deepcontext").__file__), "libdeepcontext_cupti.so")


def _layer_has_launch_entry() -> bool:
    if not os.path.exists(LIB):
        return False
    import ctypes

    return hasattr(ctypes.CDLL(LIB), "dctx_cupti_nvtx_replay_launch")


pytestmark = [
    pytest.mark.skipif(
        not _layer_has_launch_entry(), reason="no CUPTI layer with the replay launch entry point"
    ),
    pytest.mark.skipif(
        not (os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++")),
        reason="no C++ compiler for the benchmark library",
    ),
]


def test_push_pop_and_launch_lookup_take_no_lock_and_no_allocation():
    bench = os.path.join(ROOT, "bench", "jax_nvtx", "run.py")
    args = ["--layer", LIB, "--iters", "20000", "--repeat", "1"]
    proc = subprocess.run(
        [sys.executable, bench, *args], capture_output=True, text=True, timeout=300, check=False
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    print(proc.stdout)
    line = next(x for x in proc.stdout.splitlines() if x.startswith("JSON "))
    res = json.loads(line[5:])
    assert res["through_callback_and_launch_entry"]
    cases = res["cases"]
    for name in (
        "push+pop, TSL thunk range",
        "push+pop, other domain",
        "launch: thunk lookup alone",
        "launch: as the tracer does it",
    ):
        assert cases[name]["allocs"] == 0 and cases[name]["locks"] == 0, (name, cases[name])
    # A whole step walks the Python call path once (the module range's first launch), not once
    # per launch: its locks are those of one dctx_current() call.
    step, current = (
        cases["step (module, thunks+launches, extra)"],
        cases["dctx_current() (call path)"],
    )
    assert step["locks"] <= current["locks"] + 1, (step, current)
    assert step["allocs"] <= current["allocs"] + 1, (step, current)
