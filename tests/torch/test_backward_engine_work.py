"""Work the autograd engine does around a backward function (reducing a broadcast gradient,
accumulating a gradient used twice) belongs under the forward operator, like the function."""

from __future__ import annotations

import deepcontext
from program_helpers import line_of, write_program
from torch_helpers import run_deepcontext

PROGRAM = """
import torch
w = torch.randn(128, 128, requires_grad=True)
b = torch.randn(128, requires_grad=True)
x = torch.randn(256, 128)
for _ in range(50):
    h = x @ w
    y = h + b  # BROADCAST
    z = y * y + y  # TWICE
    z.sum().backward()
"""


def _under(p, op, line):
    out = []
    for n in p.nodes():
        if n.frame.kind != "operator" or n.frame.name != op or not n.inclusive("op_count"):
            continue
        path = n.path()
        if any(f.kind == "python" and f.line == line for f in path) and path[-2].kind == "backward":
            out.append(n)
    return out


def test_engine_work_of_a_backward_function_is_under_the_forward_line(tmp_path):
    prog = write_program(tmp_path, PROGRAM)
    out = tmp_path / "p.dctx"
    run_deepcontext(tmp_path, "-q", "-o", str(out), str(prog))
    p = deepcontext.load(str(out))
    # the sum reducing b's broadcast gradient: under `h + b`, below the backward marker
    sums = _under(p, "aten::sum", line_of(prog, "BROADCAST"))
    assert sums and sum(n.inclusive("op_count") for n in sums) >= 50
    assert all(any(f.kind == "backward" for f in n.path()) for n in sums)
    # the add_ accumulating y's two gradients: under the line that used y twice
    adds = _under(p, "aten::add_", line_of(prog, "TWICE"))
    assert adds and sum(n.inclusive("op_count") for n in adds) >= 50
