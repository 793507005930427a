"""Launch-bound GPU work: many small kernels from one source line with the GPU idle between them
(fuse them), pageable host-to-device copies, and device allocator churn inside the step."""

from __future__ import annotations

import re

from ..engine import rule
from ..finding import Finding
from ..query import IDLE_METRIC, LAUNCH_HOST_NS, Query
from ._common import by_line, fmt_ns, in_model_transfer

SMALL_KERNEL_NS = 20_000
MIN_LAUNCHES = 100
MIN_SHARE = 0.03
OPTIM_FILE = re.compile(r"torch/optim/")
# Fusion keeps the intermediates of an elementwise/reduction chain in registers: assume a quarter
# of those kernels' own time was memory traffic for them. Other short kernels (sorts, gathers,
# GEMMs) are not merged by fusing the chain around them.
FUSED_FRACTION = 0.25
FUSIBLE = re.compile(
    r"elementwise|reduce_kernel|Reduce|Functor|_foreach|multi_tensor_apply|softmax|norm|"
    r"\bfill|copy_kernel|CatArray|where|masked",
    re.I,
)


@rule(
    "small-kernels",
    "Many small kernels from one source line: fuse them",
    needs=("gpu_time",),
    generic=True,
)
def small_kernels(q: Query):
    """Short kernels leave the device idle while the host issues the next one. The idle charged
    to a line is Query.launch_idle of its launches (measured gaps, bounded by the host issue cost
    of each kernel): not the raw gaps, which hold first-call and setup waits and the profiler's
    own overhead."""
    kernels = [n for n in q.nodes_of_kind("kernel") if q.launches(n) > 0]
    for site in by_line(q, kernels):
        short = [n for n in site.nodes if q.inc(n, "gpu_time") / q.launches(n) <= SMALL_KERNEL_NS]
        launches = sum(q.launches(n) for n in short)
        if launches < MIN_LAUNCHES:
            continue
        t = sum(q.inc(n, "gpu_time") for n in short)
        mean = t / launches
        apis = {q.parent(n) for n in short if q.kind[q.parent(n)] == "gpu_api"}
        idle = sum(q.launch_idle(a) for a in apis)
        fusible = sum(q.inc(n, "gpu_time") for n in short if FUSIBLE.search(q.name(n)))
        region = t + idle
        saving = idle + FUSED_FRACTION * fusible
        total = q.denominator("gpu_time")
        if total <= 0 or region / total < MIN_SHARE or saving / total < MIN_SHARE / 3:
            continue
        line_node = q.user_line[short[0]]
        distinct = len({q.name(n) for n in short})
        optimizer = any(OPTIM_FILE.search(f.file) for f in q.path(short[0]))
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
                f"{launches} launches of {distinct} short kernels at "
                f"{q.source_label(short[0])} average {fmt_ns(mean)} each"
                + (f", with the GPU idle {fmt_ns(idle)} between them" if idle else "")
            ),
            suggestion=suggestion,
            metric="gpu_time",
            time=region,
            saving=saving,
            estimate=(
                "the launch-overhead idle between these kernels (the measured gaps, each bounded by "
                f"the {LAUNCH_HOST_NS / 1e3:.0f} us host cost of an eager launch minus the kernel's "
                "time), which fewer launches remove, plus a quarter of the elementwise/reduction "
                "kernels' time (intermediates stay in registers)"
            ),
            evidence={
                "launches": launches,
                "distinct_kernels": distinct,
                "kernel_time": t,
                "mean_kernel_time": mean,
                "gpu_idle": idle,
                "measured_gaps": sum(q.exc(a, IDLE_METRIC) for a in apis),
                "fusible_kernel_time": fusible,
                "optimizer": optimizer,
            },
            node=line_node if line_node >= 0 else short[0],
            nodes=short,
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
    copies = [
        n
        for n in q.nodes_of_kind("memcpy")
        if HTOD.search(q.name(n)) and _pageable(q, n) and not in_model_transfer(q, n)
    ]
    # Copies are device time outside gpu_time (kernels only): the whole they are a share of is
    # the kernels' timeline plus every copy.
    total = q.denominator("gpu_time") + q.total("memcpy_time")
    for site in by_line(q, copies):
        t = sum(q.inc(n, "memcpy_time") for n in site.nodes)
        if total <= 0 or t / total < 0.01:
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
            total=total,
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
