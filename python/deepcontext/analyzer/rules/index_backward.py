"""Backward of advanced indexing (`table[idx]`: aten::index -> index_put_ with accumulate, atomics
on the GPU) dominating: use index_select (or nn.Embedding) instead."""

from __future__ import annotations

from ..engine import rule
from ..finding import Finding
from ..query import Query
from ._common import by_line, fmt_ns, op_metric

MIN_SHARE = 0.02
# index_select's backward (index_add_) measured 1.6x faster than index's on an H200 (1M x 128
# table, 65,536 rows: 0.373 -> 0.230 ms forward+backward) and 1.5-2.5x on CPU; 40 % of the backward
# is the conservative end of that.
SAVING_FRACTION = 0.4


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
    for site in by_line(q, ops):
        fwd = bwd = 0.0
        calls = 0
        put_nodes = []
        for op in site.nodes:
            b_nodes = [c for c in q.children(op) if q.kind[c] == "backward"]
            b = sum(q.inc(c, m) for c in b_nodes)
            bwd += b
            fwd += q.inc(op, m) - b
            calls += q.calls(op)
            for c in b_nodes:
                put_nodes += q.descendants(c, regex=r"index_put|IndexBackward|indexing_backward")
        if bwd < MIN_SHARE * q.total(m) or bwd < fwd:
            continue
        src = q.source_label(site.nodes[0])
        saving = SAVING_FRACTION * bwd
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
                "index_add_/embedding_backward instead of a sorted, atomic index_put_ with accumulate. "
                "For a multi-dimensional idx: `table.index_select(0, idx.flatten()).view(*idx.shape, -1)`."
            ),
            metric=m,
            time=bwd,
            saving=saving,
            estimate=(
                f"{int(SAVING_FRACTION * 100)}% of the measured backward time: index_select's backward "
                "measured 1.6x faster than index's on an H200 and 1.5-2.5x on CPU (docs/case-studies.md)"
            ),
            evidence={
                "forward_time": fwd,
                "backward_time": bwd,
                "backward_over_forward": bwd / fwd if fwd > 0 else None,
                "calls": calls,
                "backward_ops": sorted({q.name(n) for n in put_nodes})[:8],
            },
            node=site.nodes[0],
            nodes=site.nodes + put_nodes[:20],
        )
