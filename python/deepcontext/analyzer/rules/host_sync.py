"""Host-device synchronization inside the training loop: `.item()`, `.cpu()`, `.tolist()`,
`bool(tensor)`, printing tensors, data-dependent shapes (nonzero, masked_select), explicit
synchronize. Reported per source line with how often and how long."""

from __future__ import annotations

import re

from ..engine import rule
from ..finding import Finding
from ..query import Query
from ._common import by_line, fmt_ns, in_model_transfer, outermost

# Operators that copy a value to the host (and so wait for the device): _local_scalar_dense is
# behind .item(), float(t), bool(t), `if t:` and formatting a 0-d tensor.
SYNC_OPS = re.compile(
    r"^aten::(_local_scalar_dense|item|is_nonzero|nonzero|nonzero_static|masked_select|"
    r"unique\w*|_unique\w*|equal|allclose|tolist)$"
)
PRINT_FILE = re.compile(r"torch/_tensor(_str)?\.py$")
PRINT_FUNCS = ("Tensor.__repr__", "Tensor.__format__", "__repr__", "__format__", "_str")
SYNC_FUNCS = re.compile(r"^(synchronize|current_stream_synchronize)$")
SYNC_FUNC_FILE = re.compile(r"torch/(cuda|xpu|mps)/")
MIN_CALLS = 10


def _classify(q: Query) -> tuple[list[int], list[int]]:
    """(synchronizing operator/sync nodes, Python wrappers that synchronize: print, synchronize)."""
    ops, wrappers = [], []
    for n in range(1, len(q.kind)):
        k = q.kind[n]
        if k == "sync":
            ops.append(n)
        elif k == "operator":
            if q.backward[n] < 0 and SYNC_OPS.match(q.name(n)):
                ops.append(n)
        elif k == "python":
            f = q.frame(n)
            if PRINT_FILE.search(f.file) and f.name in PRINT_FUNCS:
                wrappers.append(n)
            elif SYNC_FUNCS.match(f.name) and SYNC_FUNC_FILE.search(f.file):
                wrappers.append(n)
    return ops, wrappers


def _calls(q: Query, n: int) -> int:
    if q.kind[n] == "operator":
        return q.calls(n)
    return max(q.count(n, "sync_time"), q.count(n, "sync_count"), q.count(n, "wall_time"), 1)


def _label(q: Query, n: int) -> str:
    k = q.kind[n]
    if k == "sync":
        return q.name(n)
    if k == "python":
        return "print(tensor)" if PRINT_FILE.search(q.frame(n).file) else "synchronize()"
    name = q.name(n)
    if name in ("aten::_local_scalar_dense", "aten::item", "aten::is_nonzero"):
        return ".item() / bool(t) / float(t)"
    return name


@rule("host-sync", "Host-device synchronization inside the step")
def check(q: Query):
    gpu = q.has("gpu_time")
    waits = q.has("sync_time")
    cost_metric = next((m for m in ("op_time", "wall_time", "cpu_time") if q.has(m)), None)
    metric = "gpu_time" if gpu and waits else cost_metric
    if metric is None:
        return
    ops, wrappers = _classify(q)
    # moving the model to the device (nn.Module.to/.cuda) synchronizes once per parameter: setup
    ops = [n for n in ops if not in_model_transfer(q, n)]
    wrappers = [n for n in wrappers if not in_model_transfer(q, n)]
    op_set = set(ops)
    for site in by_line(q, outermost(q, ops + wrappers)):
        calls = 0
        wait = cost = 0.0
        kinds: dict[str, int] = {}
        for n in site.nodes:
            # .item() -> _local_scalar_dense -> cudaStreamSynchronize is one synchronization:
            # count each outermost one by the largest call count along its chain.
            inner = outermost(q, [d for d in q.subtree(n) if d in op_set])
            c = sum(max(_calls(q, d) for d in q.subtree(o) if d in op_set) for o in inner)
            c = c or _calls(q, n)
            # an .item() inside print(tensor) counts as the print
            label = _label(q, n)
            kinds[label] = kinds.get(label, 0) + c
            calls += c
            if waits:
                wait += q.inc(n, "sync_time")
            if cost_metric:
                cost += q.inc(n, cost_metric)
        if calls < MIN_CALLS:
            continue
        if (
            gpu
            and waits
            and wait <= 0
            and not any(q.kind[d] == "sync" for n in site.nodes for d in q.subtree(n))
        ):
            # the GPU layer saw no synchronization under these calls: `.item()` of CPU tensors
            # (e.g. an optimizer's step counters), which do not wait for the device
            continue
        src = q.source_label(site.nodes[0])
        what = ", ".join(f"{k} x{v}" for k, v in sorted(kinds.items(), key=lambda kv: -kv[1]))
        if gpu and waits:
            time = wait
            estimate = (
                "upper bound: the time the host waited at these synchronizations (sync_time); without "
                "them the host queues the next kernels while the device works"
            )
        else:
            time = cost
            estimate = (
                f"host time of the synchronizing calls ({cost_metric}); on a GPU each call also drains "
                "the device queue, which a profile without GPU sync times cannot measure"
            )
        yield Finding(
            summary=f"{calls} host-device synchronizations at {src} ({what}), {fmt_ns(time)} in all",
            suggestion=(
                "Keep values on the device inside the loop: accumulate `running += loss.detach()` and "
                "call `.item()` / `print` once per N steps or at the end; replace `if t.any():` / "
                "`bool(t)` with `torch.where`; avoid data-dependent shapes (nonzero, masked_select) "
                "in the step; drop explicit `torch.cuda.synchronize()` outside timing code."
            ),
            metric=metric,
            time=time,
            saving=time,
            estimate=estimate,
            evidence={
                "calls": calls,
                "by_kind": kinds,
                "wait_time": wait if waits else None,
                "host_time": cost,
                "host_metric": cost_metric,
            },
            node=site.nodes[0],
            nodes=site.nodes,
        )
