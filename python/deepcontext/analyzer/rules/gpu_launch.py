"""Launch-bound GPU work: many small kernels from one source line with the GPU idle between them
(fuse them), pageable host-to-device copies, and device allocator churn inside the step."""

from __future__ import annotations

import re

from ..engine import rule
from ..finding import Finding
from ..query import Query
from ._common import by_line, fmt_ns

SMALL_KERNEL_NS = 20_000
MIN_LAUNCHES = 100
MIN_SHARE = 0.03
OPTIM_FILE = re.compile(r"torch/optim/")
# Fusion keeps the intermediates in registers: assume a quarter of the small kernels' own time
# was memory traffic for them.
FUSED_FRACTION = 0.25


@rule("small-kernels", "Many small kernels from one source line: fuse them", needs=("gpu_time",))
def small_kernels(q: Query):
    kernels = q.nodes_of_kind("kernel")
    idle_m = "gpu_idle_time" if q.has("gpu_idle_time") else None
    sites = by_line(q, kernels)
    total = q.total("gpu_time") + (q.total(idle_m) if idle_m else 0.0)
    for site in sites:
        t = sum(q.inc(n, "gpu_time") for n in site.nodes)
        launches = sum(q.launches(n) for n in site.nodes)
        if launches < MIN_LAUNCHES:
            continue
        mean = t / launches
        if mean > SMALL_KERNEL_NS:
            continue
        line_node = q.user_line[site.nodes[0]]
        idle = q.inc(line_node, idle_m) if idle_m and line_node >= 0 else 0.0
        region = t + idle
        if total <= 0 or region / total < MIN_SHARE:
            continue
        distinct = len({q.name(n) for n in site.nodes})
        optimizer = any(OPTIM_FILE.search(f.file) for f in q.path(site.nodes[0]))
        if optimizer:
            suggestion = (
                "Use the fused or multi-tensor optimizer: `torch.optim.AdamW(params, fused=True)` (or "
                "`foreach=True`), which updates all parameters in a few kernels."
            )
        else:
            suggestion = (
                "Fuse the elementwise chain: `torch.compile` the function or module (mode="
                "'max-autotune' or 'reduce-overhead' for CUDA graphs when shapes are static), or use a "
                "fused op (F.scaled_dot_product_attention, fused LayerNorm/GELU, foreach ops)."
            )
        yield Finding(
            summary=(
                f"{launches} launches of {distinct} kernels at {q.source_label(site.nodes[0])} average "
                f"{fmt_ns(mean)} each"
                + (f", with the GPU idle {fmt_ns(idle)} in between" if idle else "")
            ),
            suggestion=suggestion,
            metric="gpu_time",
            time=region,
            saving=idle + FUSED_FRACTION * t,
            estimate=(
                "the GPU idle time attributed to this line (fewer launches keep the GPU fed) plus a "
                "quarter of the kernels' time (intermediates stay in registers)"
            ),
            evidence={
                "launches": launches,
                "distinct_kernels": distinct,
                "kernel_time": t,
                "mean_kernel_time": mean,
                "gpu_idle": idle if idle_m else None,
                "optimizer": optimizer,
            },
            node=line_node if line_node >= 0 else site.nodes[0],
            nodes=site.nodes[:50],
        )


PAGEABLE = re.compile(r"pageable", re.I)
HTOD = re.compile(r"HtoD|H2D|host.?to.?device", re.I)


def _pageable(q: Query, n: int) -> bool:
    props = q.node(n).props
    for k in ("src_kind", "memory", "host_memory", "kind", "pinned"):
        v = props.get(k)
        if v is None:
            continue
        if k == "pinned":
            return v in ("0", "false", "False")
        if PAGEABLE.search(v):
            return True
    return bool(PAGEABLE.search(q.name(n)))


@rule("pageable-memcpy", "Pageable host-to-device copies", needs=("memcpy_time",))
def pageable_memcpy(q: Query):
    copies = [n for n in q.nodes_of_kind("memcpy") if HTOD.search(q.name(n)) and _pageable(q, n)]
    for site in by_line(q, copies):
        t = sum(q.inc(n, "memcpy_time") for n in site.nodes)
        if q.share(t, "gpu_time") < 0.01:
            continue
        nbytes = sum(q.inc(n, "memcpy_bytes") for n in site.nodes)
        yield Finding(
            summary=(
                f"pageable host-to-device copies at {q.source_label(site.nodes[0])}: {fmt_ns(t)}"
                + (f", {nbytes / 2**20:.1f} MiB" if nbytes else "")
            ),
            suggestion=(
                "Copy from pinned memory without blocking: `DataLoader(..., pin_memory=True)` or "
                "`t.pin_memory()`, then `t.to('cuda', non_blocking=True)`."
            ),
            metric="gpu_time",
            time=t,
            saving=0.5 * t,
            estimate="half the copy time: pinned copies run at about twice the bandwidth of pageable ones and can overlap compute",
            evidence={
                "copy_time": t,
                "bytes": nbytes or None,
                "copies": sum(q.count(n, "memcpy_time") for n in site.nodes),
            },
            node=site.nodes[0],
            nodes=site.nodes,
        )


ALLOC_API = re.compile(
    r"^(cudaMalloc|cudaFree|cuMemAlloc|cuMemFree|cudaMallocAsync|cudaFreeAsync|cuMemCreate|cuMemMap)\w*$"
)
MIN_ALLOC_CALLS = 20


def _api_calls(q: Query, n: int) -> int:
    """Calls of a GPU API node: its `api_calls` metric when the GPU layer records one, else the
    number of host samples that landed in it (a lower bound)."""
    v = q.values("api_calls").get(n)
    if v:
        return int(v[0])
    return max(q.count(n, "wall_time"), q.count(n, "cpu_time"))


def _api_time(q: Query, n: int) -> tuple[str, float]:
    for m in ("api_time", "wall_time", "cpu_time"):
        if q.has(m):
            return m, q.inc(n, m)
    return "gpu_time", 0.0


@rule("allocator-churn", "Device malloc/free inside the step", needs=("gpu_time",))
def allocator_churn(q: Query):
    apis = [n for n in q.nodes_of_kind("gpu_api") if ALLOC_API.match(q.name(n))]
    for site in by_line(q, apis):
        calls = sum(_api_calls(q, n) for n in site.nodes)
        if calls < MIN_ALLOC_CALLS:
            continue
        time_m = _api_time(q, site.nodes[0])[0]
        t = sum(_api_time(q, n)[1] for n in site.nodes)
        yield Finding(
            summary=(
                f"{calls} device malloc/free calls at {q.source_label(site.nodes[0])}, "
                f"{fmt_ns(t)} in the API"
            ),
            suggestion=(
                "Let the caching allocator reuse memory: do not call `torch.cuda.empty_cache()` in the "
                "loop, keep shapes static (pad variable-length batches to a few bucket sizes), and set "
                "`PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True` against fragmentation."
            ),
            metric=time_m,
            time=t,
            saving=t,
            estimate="the time spent in the allocation API calls (cudaFree also synchronizes the device)",
            evidence={
                "calls": calls,
                "api_time": t,
                "apis": sorted({q.name(n) for n in site.nodes}),
            },
            node=site.nodes[0],
            nodes=site.nodes,
        )
