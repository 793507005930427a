"""GPU kernel rules: layout conversions around convolutions (channels_last), fp32 GEMM/conv kernels
that do not use tensor cores, and heavy kernels with tiny grids or low occupancy."""

from __future__ import annotations

import re

from ..engine import rule
from ..finding import Finding
from ..query import Query
from ._common import by_line, device_prop, fmt_ns

LAYOUT_KERNEL = re.compile(
    r"nchwToNhwc|nhwcToNchw|nchw2nhwc|nhwc2nchw|NCHW.?to.?NHWC|NHWC.?to.?NCHW|convertTensor|"
    r"transpose_readWrite|tensorTransformGeneric",
    re.I,
)
CONV_OP = re.compile(r"conv|cudnn", re.I)


@rule("channels-last", "Layout conversions around convolutions", needs=("gpu_time",))
def channels_last(q: Query):
    kernels = [n for n in q.nodes_of_kind("kernel") if LAYOUT_KERNEL.search(q.name(n))]
    kernels = [n for n in kernels if any(CONV_OP.search(o) for o in q.operators(n))]
    if not kernels:
        return
    t = sum(q.inc(n, "gpu_time") for n in kernels)
    conv_nodes = sorted({q.top_op[n] for n in kernels if q.top_op[n] >= 0})
    conv_t = sum(q.inc(n, "gpu_time") for n in conv_nodes)
    if q.share(t, "gpu_time") < 0.01:
        return
    anchor = q.common_ancestor(conv_nodes) if conv_nodes else kernels[0]
    if anchor == 0:
        anchor = conv_nodes[0]
    names: dict[str, float] = {}
    for n in kernels:
        names[q.name(n)] = names.get(q.name(n), 0.0) + q.inc(n, "gpu_time")
    yield Finding(
        summary=(
            f"{fmt_ns(t)} of GPU time ({q.share(t, 'gpu_time'):.1%}) converts tensors between NCHW and "
            f"NHWC around {len(conv_nodes)} convolution call sites"
        ),
        suggestion=(
            "Keep activations in channels_last: `model = model.to(memory_format=torch.channels_last)` "
            "and `x = x.to(memory_format=torch.channels_last)` for the input (with "
            "`torch.autocast('cuda', dtype=torch.bfloat16)` the convolutions then run on tensor cores "
            "without transposes)."
        ),
        metric="gpu_time",
        time=t,
        saving=t,
        estimate="the layout-conversion kernels' time, which channels_last removes (conv kernels may speed up too)",
        evidence={
            "conversion_time": t,
            "conversion_launches": sum(q.launches(n) for n in kernels),
            "conversion_kernels": [
                {"name": k, "time": v} for k, v in sorted(names.items(), key=lambda kv: -kv[1])[:5]
            ],
            "convolution_time": conv_t,
        },
        node=anchor,
        nodes=conv_nodes + kernels[:20],
    )


GEMM_CONV = re.compile(r"gemm|gemv|conv|cutlass|xmma|wgrad|dgrad|fprop", re.I)
FP32_SIMT = re.compile(
    r"sgemm|_s\d*gemm|gemmSN|simt|fp32|f32f32|implicit_convolve_sgemm|scudnn|sgemv|gemv2T|convolve_sgemm",
    re.I,
)
TENSOR_CORE = re.compile(
    r"tf32|h\d{3,4}|s\d{4}gemm|hmma|imma|bf16|f16|fp16|half|tensorop|_tc_|sm90_xmma|gmma|wgmma",
    re.I,
)
TC_SAVING = 0.5


def _capability(q: Query) -> float | None:
    cc = device_prop(q, "compute_capability", "capability", "cc")
    if cc is None:
        major = device_prop(q, "major", "cc_major")
        minor = device_prop(q, "minor", "cc_minor") or 0
        if major is None:
            return None
        return float(major) + float(minor) / 10
    try:
        return float(str(cc).replace(",", "."))
    except ValueError:
        return None


@rule("tensor-cores", "fp32 GEMM/conv kernels not using tensor cores", needs=("gpu_time",))
def tensor_cores(q: Query):
    cc = _capability(q)
    if cc is not None and cc < 8.0:
        return
    kernels = [
        n
        for n in q.nodes_of_kind("kernel")
        if GEMM_CONV.search(q.name(n))
        and FP32_SIMT.search(q.name(n))
        and not TENSOR_CORE.search(q.name(n))
    ]
    for site in by_line(q, kernels):
        t = sum(q.inc(n, "gpu_time") for n in site.nodes)
        if q.share(t, "gpu_time") < 0.05:
            continue
        names = sorted({q.name(n) for n in site.nodes})[:5]
        yield Finding(
            summary=(
                f"fp32 GEMM/conv kernels without tensor cores at {q.source_label(site.nodes[0])}: "
                f"{fmt_ns(t)} ({q.share(t, 'gpu_time'):.1%} of GPU time)"
            ),
            suggestion=(
                "Allow TF32 for fp32 matmuls and convolutions: `torch.backends.cuda.matmul.allow_tf32 = "
                "True` / `torch.set_float32_matmul_precision('high')` and `torch.backends.cudnn.allow_tf32 "
                "= True`, or run the step under `torch.autocast('cuda', dtype=torch.bfloat16)`."
            ),
            metric="gpu_time",
            time=t,
            saving=TC_SAVING * t,
            estimate=(
                "half of these kernels' time: TF32/bf16 tensor-core peak is 7-15x fp32 SIMT on "
                "Ampere/Hopper; a 2x gain allows for memory-bound parts"
            ),
            evidence={
                "kernels": names,
                "time": t,
                "launches": sum(q.launches(n) for n in site.nodes),
                "compute_capability": cc,
            },
            node=q.top_op[site.nodes[0]] if q.top_op[site.nodes[0]] >= 0 else site.nodes[0],
            nodes=site.nodes,
        )


def _blocks(v: str | None) -> int | None:
    if not v:
        return None
    nums = [int(x) for x in re.findall(r"\d+", v)]
    if not nums:
        return None
    out = 1
    for x in nums[:3]:
        out *= x
    return out


def _float(v) -> float | None:
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


@rule("low-occupancy", "Heavy kernels with tiny grids or low occupancy", needs=("gpu_time",))
def low_occupancy(q: Query):
    sms = device_prop(q, "sm_count", "multiprocessor_count", "multiProcessorCount", "sms")
    sms = int(sms) if sms else None
    for n in q.nodes_of_kind("kernel"):
        t = q.inc(n, "gpu_time")
        if q.share(t, "gpu_time") < 0.03:
            continue
        props = q.node(n).props
        blocks = _blocks(props.get("grid"))
        occ = _float(props.get("occupancy") or props.get("theoretical_occupancy"))
        if occ is not None and occ > 1:
            occ /= 100.0
        reasons = []
        saving = 0.0
        if sms and blocks is not None and blocks < sms:
            reasons.append(f"grid of {blocks} blocks on {sms} SMs")
            saving = max(saving, 0.5 * t * (1 - blocks / sms))
        if occ is not None and occ < 0.25:
            reasons.append(f"theoretical occupancy {occ:.0%}")
            saving = max(saving, 0.25 * t)
        if not reasons:
            continue
        yield Finding(
            summary=f"kernel {q.name(n)[:80]} takes {fmt_ns(t)} with {' and '.join(reasons)}",
            suggestion=(
                "Give the kernel more parallel work: batch the calls (larger batch, torch.vmap, "
                "grouped GEMM), let torch.compile fuse and retile it, or, for a custom kernel, use "
                "smaller blocks / fewer registers per thread (launch bounds) so more blocks fit per SM."
            ),
            metric="gpu_time",
            time=t,
            saving=saving,
            estimate=(
                "half the idle SM fraction of the kernel's time for a tiny grid; a quarter of its time "
                "for low occupancy (latency hiding improves, not linearly)"
            ),
            evidence={
                "grid": props.get("grid"),
                "block": props.get("block"),
                "registers": props.get("registers"),
                "occupancy": occ,
                "sm_count": sms,
                "launches": q.launches(n),
            },
            node=n,
        )
