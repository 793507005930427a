"""--native on a jitted training loop (the reproducer of the heap corruption): oneDNN's JIT gemm
runs with rsp inside a malloc'd workspace, so a signal delivered there wrote its frame into the
heap. Every thread now gets an alternate signal stack before it is sampled; XLA's pool threads
are unwound again, under the jitted call site."""

from __future__ import annotations

import re

import deepcontext
from jax_helpers import EXAMPLES
from program_helpers import run_deepcontext


def test_native_jitted_training_loop_runs_to_completion(tmp_path):
    out = tmp_path / "native.dctx"
    proc = run_deepcontext(
        tmp_path,
        "-q",
        "--native",
        "-o",
        str(out),
        str(EXAMPLES / "train.py"),
        "--steps",
        "20",
        "--width",
        "384",
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    p = deepcontext.load(str(out))
    assert p.meta["complete"] == "1"
    m = re.fullmatch(
        r"armed (\d+), arm raced (\d+), arm unsafe (\d+), lost (\d+), forced (\d+)",
        p.meta["native_unwind"],
    )
    assert m and int(m[1]) > 0 and int(m[3]) == 0, p.meta["native_unwind"]
    pools = [n for n in p.nodes() if n.frame.kind == "thread" and n.frame.name != "MainThread"]
    assert pools and sum(n.inclusive("cpu_time") for n in pools) > 0
    # The pool threads' own native frames (Eigen/oneDNN/XLA runtime) below their thread frame.
    native_under_pools = [
        n
        for n in p.nodes()
        if n.frame.kind == "native"
        and any(f.kind == "thread" and f.name != "MainThread" for f in n.path())
    ]
    assert native_under_pools, "no native frames under XLA's threads"
    assert any("libjax_common" in (n.frame.module or "") for n in native_under_pools) or any(
        "xla" in n.frame.name.lower() or "eigen" in n.frame.name.lower() for n in native_under_pools
    )
