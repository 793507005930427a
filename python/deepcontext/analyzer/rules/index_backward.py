"""Backward of advanced indexing (`table[idx]`: aten::index -> index_put_ with accumulate: a sort
of the indices and a serial sum of each row's duplicates on the GPU) dominating: use index_select
(or nn.Embedding), whose backward is an atomic scatter-add, instead."""

from __future__ import annotations

import re

from ..engine import rule
from ..finding import Finding
from ..query import Query
from ._common import by_line, fmt_ns, op_metric, outermost

MIN_SHARE = 0.02
# CPU profiles: index_select's backward (index_add_) measured 1.5-2.5x faster than index's
# (index_put_ with accumulate); 40 % of the backward is the conservative end of that.
SAVING_FRACTION = 0.4
# GPU profiles: index's backward sorts the indices and accumulates each row's duplicates in one
# warp (indexing_backward_kernel); index_select's backward is an atomic scatter (index_add_) of
# the same rows, measured on the H200 at 1.5x the forward gather's time (dlrm_small case, torch
# 2.11: index_add_ 69 us vs index 47 us per 131,072-row lookup). Both first zero a gradient of
# the table's size and may copy the incoming gradient; those parts stay.
SCATTER_OVER_GATHER = 1.5
KEPT_OPS = re.compile(r"^aten::(new_zeros|zeros|zeros_like|zero_|fill_|contiguous|clone)$")


def _gpu_saving(q: Query, op: int, b_nodes: list[int], fwd: float) -> tuple[float, dict]:
    """(saving, evidence) of index -> index_select on a GPU profile, from the backward's kernels:
    what index_select would not run (sort, the duplicate-accumulating kernel, the index helpers)
    minus an atomic scatter costing SCATTER_OVER_GATHER x the forward gather."""
    bwd = sum(q.inc(c, "gpu_time") for c in b_nodes)
    kept = 0.0
    kept_ops = []
    for c in b_nodes:
        found = [d for d in q.descendants(c, kind="operator") if KEPT_OPS.match(q.name(d))]
        kept_ops += outermost(q, found)
    kept = sum(q.inc(d, "gpu_time") for d in kept_ops)
    kept_set = set(kept_ops)
    # the launch-overhead idle of the kernels that go away (sort passes, index helpers)
    idle = sum(
        q.launch_idle(a)
        for c in b_nodes
        for a in q.descendants(c, kind="gpu_api")
        if not any(x in kept_set for x in q.ancestors(a))
    )
    sort = accumulate = 0.0
    for c in b_nodes:
        for k in q.descendants(c, kind="kernel"):
            name = q.name(k)
            if SORT_KERNEL.search(name):
                sort += q.inc(k, "gpu_time")
            elif ACC_KERNEL.search(name):
                accumulate += q.inc(k, "gpu_time")
    removable = bwd - kept
    return removable - SCATTER_OVER_GATHER * fwd + idle, {
        "launch_idle": idle,
        "sort_time": sort,
        "accumulate_time": accumulate,
        "kept_time": kept,
        "replacement_time": SCATTER_OVER_GATHER * fwd,
    }


SORT_KERNEL = re.compile(r"RadixSort|radix_sort|segmented_sort|sort", re.I)
ACC_KERNEL = re.compile(r"indexing_backward|index_put|put_kernel", re.I)


@rule(
    "index-backward",
    "Backward of advanced indexing dominates",
    needs=("gpu_time", "op_time", "cpu_time"),
)
def check(q: Query):
    m = op_metric(q)
    ops = []
    for op in q.find("aten::index", kind="operator"):
        if q.backward[op] >= 0:
            continue
        if any(q.kind[c] == "backward" for c in q.children(op)):
            ops.append(op)
    gpu = m == "gpu_time"
    for site in by_line(q, ops):
        fwd = bwd = saving = 0.0
        calls = 0
        put_nodes = []
        gpu_evidence: dict = {}
        for op in site.nodes:
            b_nodes = [c for c in q.children(op) if q.kind[c] == "backward"]
            b = sum(q.inc(c, m) for c in b_nodes)
            bwd += b
            fwd += q.inc(op, m) - b
            calls += q.calls(op)
            for c in b_nodes:
                put_nodes += q.descendants(c, regex=r"index_put|IndexBackward|indexing_backward")
            if gpu:
                s, ev = _gpu_saving(q, op, b_nodes, q.inc(op, m) - b)
                saving += s
                for k, v in ev.items():
                    gpu_evidence[k] = gpu_evidence.get(k, 0.0) + v
        if bwd < MIN_SHARE * q.total(m) or bwd < fwd:
            continue
        if not gpu:
            saving = SAVING_FRACTION * bwd
        elif saving <= 0:
            # an atomic scatter of the same rows would cost as much: index_select does not help
            continue
        src = q.source_label(site.nodes[0])
        if gpu:
            estimate = (
                "the backward's sort, duplicate-accumulating kernel and index helpers (their time and "
                "the launch-overhead idle between them), less an "
                f"atomic scatter (index_select's backward) at {SCATTER_OVER_GATHER}x the forward "
                "gather's time (measured on an H200); the gradient's zero-fill and copies stay"
            )
        else:
            estimate = (
                f"{int(SAVING_FRACTION * 100)}% of the measured backward time: index_select's "
                "backward measured 1.5-2.5x faster than index's on CPU (docs/case-studies.md)"
            )
        yield Finding(
            summary=(
                f"the backward of `x[idx]` (aten::index) at {src} takes {fmt_ns(bwd)}, "
                f"{bwd / fwd:.1f}x its forward"
                if fwd > 0
                else f"the backward of aten::index at {src}"
            ),
            suggestion=(
                "Gather rows with `table.index_select(0, idx)` (or `torch.nn.functional.embedding(idx, "
                "table)` / nn.Embedding for lookup tables) instead of `table[idx]`: their backward is an "
                "index_add_/embedding_backward scatter instead of index_put_ with accumulate, which sorts "
                "the indices and adds up each row's duplicates serially (slow when rows repeat). "
                "For a multi-dimensional idx: `table.index_select(0, idx.flatten()).view(*idx.shape, -1)`."
            ),
            metric=m,
            time=bwd,
            saving=saving,
            estimate=estimate,
            evidence={
                "forward_time": fwd,
                "backward_time": bwd,
                "backward_over_forward": bwd / fwd if fwd > 0 else None,
                "calls": calls,
                "backward_ops": sorted({q.name(n) for n in put_nodes})[:8],
                **gpu_evidence,
            },
            node=site.nodes[0],
            nodes=site.nodes + put_nodes[:20],
        )
