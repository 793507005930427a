"""backward-imbalance on built trees with the shapes measured on this project's CPU runs
(tests/analyzer/programs/backward_imbalance.py): which backward compositions it reports. Timings of
real programs swing on a loaded machine; these trees hold the ratios fixed."""

from __future__ import annotations

import gpu_trees as T
from dctx_writer import ProfileBuilder
from deepcontext.analyzer import analyze


def _tree(tmp_path, op: str, forward_ns: float, backward: list[tuple[str, float]]) -> str:
    """A training step whose line runs `op` (forward_ns) with an autograd backward made of
    `backward` (operator, ns), next to a matmul of the same cost as the whole op so the op is a
    visible share of the profile."""
    b = ProfileBuilder()
    line = b.path(
        ("thread", "MainThread"),
        ("python", "<module>", T.TRAIN, 40),
        ("python", "transmittance", T.MODEL, 15),
    )
    fwd = b.node(line, "operator", op)
    b.add(fwd, "op_time", forward_ns, count=20)
    node = b.path(("backward", "backward"), ("operator", "GradNode"), parent=fwd)
    total = forward_ns
    for name, ns in backward:
        b.add(b.node(node, "operator", name), "op_time", ns, count=20)
        total += ns
    mm = b.node(b.node(line, "operator", "aten::linear"), "operator", "aten::addmm")
    b.add(mm, "op_time", total, count=20)
    return b.write(tmp_path / "bi.dctx")


def test_reports_a_scan_whose_backward_is_other_work(tmp_path):
    """cumprod's CPU backward as measured: flips around a cumsum, a division, masks: 9x."""
    bwd = [
        ("aten::mul", 21e6),
        ("aten::eq", 7e6),
        ("aten::any", 7e6),
        ("aten::flip", 113e6),
        ("aten::cumsum", 56e6),
        ("aten::div", 84e6),
    ]
    found = analyze(_tree(tmp_path, "aten::cumprod", 32e6, bwd)).by_rule("backward-imbalance")
    assert len(found) == 1
    assert found[0].evidence["operator"] == "aten::cumprod"
    assert abs(found[0].evidence["backward_over_forward"] - 288 / 32) < 1e-6
    assert found[0].evidence["heaviest_backward_ops"][0]["name"] == "aten::flip"


def test_silent_on_an_elementwise_op_with_elementwise_backward(tmp_path):
    """log1p's backward (an add and a float64 division) measured 4.4-7.6x its forward: the
    operator's nature, not a formulation to change."""
    bwd = [("aten::add", 56e6), ("aten::div", 104e6), ("aten::_to_copy", 1e6)]
    assert not analyze(_tree(tmp_path, "aten::log1p", 21e6, bwd)).by_rule("backward-imbalance")


def test_reports_an_elementwise_op_whose_backward_is_not(tmp_path):
    """The exemption is for elementwise backwards only: the same ratio made of a reduction and a
    sort is reported."""
    bwd = [("aten::sort", 104e6), ("aten::sum", 56e6)]
    found = analyze(_tree(tmp_path, "aten::log1p", 21e6, bwd)).by_rule("backward-imbalance")
    assert [f.evidence["operator"] for f in found] == ["aten::log1p"]


def test_silent_on_a_scan_whose_backward_is_itself(tmp_path):
    """cumsum's backward is cumsum between two flips (6-8x on a loaded machine)."""
    bwd = [("aten::flip", 120e6), ("aten::cumsum", 41e6), ("aten::empty_like", 1e6)]
    assert not analyze(_tree(tmp_path, "aten::cumsum", 25e6, bwd)).by_rule("backward-imbalance")
