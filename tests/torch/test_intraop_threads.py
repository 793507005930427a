"""Intra-op pool threads (at::parallel_for / OpenMP) run no Python and no RecordFunction: their
CPU time belongs under the operator the calling thread runs meanwhile."""

from __future__ import annotations

import deepcontext
from program_helpers import line_of, write_program
from torch_helpers import run_deepcontext


def torch_uses_openmp() -> bool:
    import torch

    return (
        "OpenMP" in torch.__config__.parallel_info() and "libgomp" in open("/proc/self/maps").read()
    )


PROGRAM = """
import torch
torch.set_num_threads(2)
a = torch.randn(1200, 1200)
for _ in range(12):
    b = a @ a  # MATMUL
"""


def test_intra_op_threads_land_under_the_operator(tmp_path):
    prog = write_program(tmp_path, PROGRAM)
    out = tmp_path / "p.dctx"
    # Every operator traced: on a loaded machine the import alone can outlast the first 10 s, after
    # which a step-less program's operators are traced in windows only.
    run_deepcontext(tmp_path, "-q", "--trace", "all", "-o", str(out), str(prog))
    p = deepcontext.load(str(out))
    line = line_of(prog, "MATMUL")
    ops = [
        n
        for n in p.nodes()
        if n.frame.kind == "operator"
        and n.frame.name == "aten::mm"
        and any(f.kind == "python" and f.line == line for f in n.path())
    ]
    assert ops
    pool = [c for op in ops for c in op.walk() if c.frame.kind == "thread"]
    assert pool, "the intra-op pool's samples are under aten::mm"
    pool_cpu = sum(c.inclusive("cpu_time") for c in pool)
    line_cpu = sum(op.inclusive("cpu_time") for op in ops)
    assert pool_cpu >= 0.25 * line_cpu  # two threads share the products
    # The pool's threads are named by what started them, not lumped as "native thread".
    names = {c.frame.name for c in pool}
    assert "native thread" not in names, names
    if torch_uses_openmp():
        assert all(n.startswith("OpenMP worker (libgomp") for n in names), names
    # (Native threads also work during `import torch`, before any operator: that time is at the
    # root, below its thread frame, and is not checked here.)
