"""An operator whose backward is far slower than its forward."""

from __future__ import annotations

from ..engine import rule
from ..finding import Finding
from ..query import Query
from ._common import by_line, fmt_ns, op_metric

MIN_RATIO = 4.0
MIN_SHARE = 0.05
# Ops whose forward only makes a view: any real backward is "far slower" and says nothing.
VIEW_OPS = {
    "aten::view",
    "aten::reshape",
    "aten::_unsafe_view",
    "aten::expand",
    "aten::permute",
    "aten::transpose",
    "aten::t",
    "aten::squeeze",
    "aten::unsqueeze",
    "aten::as_strided",
    "aten::slice",
    "aten::select",
    "aten::alias",
    "aten::flatten",
    "aten::unflatten",
    "aten::narrow",
    "aten::split",
    "aten::chunk",
    "aten::unbind",
    "aten::expand_as",
    "aten::view_as",
    "aten::movedim",
}
# A matmul's backward is two matmuls, an elementwise op's about one: 2x covers the usual ops.
TYPICAL_RATIO = 2.0


@rule(
    "backward-imbalance",
    "Backward of an operator far slower than its forward",
    needs=("gpu_time", "op_time", "cpu_time"),
    generic=True,
)
def check(q: Query):
    m = op_metric(q)
    total = q.total(m)
    ops = []
    for b in q.nodes_of_kind("backward"):
        p = q.parent(b)
        if q.kind[p] in ("operator", "hlo_op") and q.backward[p] < 0 and q.name(p) not in VIEW_OPS:
            ops.append(p)
    ops = sorted(set(ops))
    for site in by_line(q, ops, extra_key=q.name):
        fwd = bwd = 0.0
        for op in site.nodes:
            b = sum(q.inc(c, m) for c in q.children(op) if q.kind[c] == "backward")
            bwd += b
            fwd += q.inc(op, m) - b
        if fwd <= 0 or bwd < MIN_RATIO * fwd or bwd < MIN_SHARE * total:
            continue
        op_name = site.key[-1]
        ratio = bwd / fwd
        saving = bwd - TYPICAL_RATIO * fwd
        bwd_ops = {}
        for op in site.nodes:
            for c in q.children(op):
                if q.kind[c] == "backward":
                    for d in q.descendants(c, kind="operator"):
                        bwd_ops[q.name(d)] = bwd_ops.get(q.name(d), 0.0) + q.exc(d, m)
        heaviest = sorted(bwd_ops.items(), key=lambda kv: -kv[1])[:5]
        yield Finding(
            summary=(
                f"{op_name} at {q.source_label(site.nodes[0])}: backward {fmt_ns(bwd)} is {ratio:.1f}x "
                f"its forward {fmt_ns(fwd)}"
            ),
            suggestion=(
                f"Look for a formulation of {op_name} whose gradient is cheap (e.g. a matmul-based "
                "expression instead of torch.cdist, a log-space cumsum instead of cumprod, index_select "
                "instead of indexing), stop gradients that are not needed (`.detach()`, "
                "`requires_grad_(False)` on inputs that are not trained), or a fused kernel for the pair."
            ),
            metric=m,
            time=bwd,
            saving=saving,
            estimate=f"backward brought down to {TYPICAL_RATIO:.0f}x the forward, typical for common operators",
            evidence={
                "operator": op_name,
                "forward_time": fwd,
                "backward_time": bwd,
                "backward_over_forward": ratio,
                "calls": sum(q.calls(op) for op in site.nodes),
                "heaviest_backward_ops": [{"name": k, "time": v} for k, v in heaviest],
            },
            node=site.nodes[0],
            nodes=site.nodes,
        )
