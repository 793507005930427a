"""Profiles shaped like the CUPTI layer's output (src/gpu/cupti/processor.cpp): kernels under the
launch API node under the operator, memcpy nodes named `memcpy HtoD (pageable)`, sync frames with
sync_time, gpu_idle_time charged to the launch the device waited for, device metadata. Used until
GPU fixtures recorded on the GPU machine replace them."""

from __future__ import annotations

import json

from dctx_writer import ProfileBuilder

TRAIN = "/home/u/proj/train.py"
MODEL = "/home/u/proj/model.py"
TORCH = "/venv/lib/python3.12/site-packages/torch"
H200 = {"ordinal": 0, "name": "NVIDIA H200", "compute_capability": "9.0", "sm_count": 132}


def base(devices=(H200,)) -> tuple[ProfileBuilder, int]:
    b = ProfileBuilder()
    b.meta["gpu_devices"] = json.dumps(list(devices))
    step = b.path(
        ("thread", "MainThread"), ("python", "<module>", TRAIN, 40), ("python", "main", TRAIN, 31)
    )
    return b, step


def launch(b, parent, kernel, ns, launches=1, idle=0.0, props=None, api="cudaLaunchKernel"):
    api_node = b.node(parent, "gpu_api", api)
    if idle:
        b.add(api_node, "gpu_idle_time", idle, count=launches)
    k = b.node(api_node, "kernel", kernel)
    b.add(k, "gpu_time", ns, count=launches)
    b.add(k, "launches", launches, count=launches)
    for key, v in (props or {}).items():
        b.prop(k, key, v)
    return k


def conv_unet(channels_last: bool) -> ProfileBuilder:
    b, step = base()
    fwd = b.path(("python", "UNet.forward", MODEL, 22), ("module", "model.down1.conv"), parent=step)
    conv = b.path(
        ("operator", "aten::conv2d"),
        ("operator", "aten::convolution"),
        ("operator", "aten::cudnn_convolution"),
        parent=fwd,
    )
    launch(b, conv, "sm90_xmma_fprop_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nhwc", 4e9, 1000)
    if not channels_last:
        launch(
            b, conv, "void cudnn::engines_precompiled::nchwToNhwcKernel<__nv_bfloat16>", 1.2e9, 2000
        )
        launch(
            b, conv, "void cudnn::engines_precompiled::nhwcToNchwKernel<__nv_bfloat16>", 0.6e9, 1000
        )
    other = b.path(("python", "UNet.forward", MODEL, 30), ("operator", "aten::relu"), parent=step)
    launch(b, other, "elementwise_kernel", 1e9, 1000)
    return b


def small_kernels(optimizer: bool, fused: bool = False) -> ProfileBuilder:
    b, step = base()
    if optimizer:
        line = b.node(step, "python", "main", TRAIN, 35)
        target = b.path(("python", "AdamW.step", f"{TORCH}/optim/adamw.py", 200), parent=line)
    else:
        target = b.path(("python", "gelu_tanh", MODEL, 12), parent=step)
    if fused:
        op = b.node(target, "operator", "aten::_fused_adamw_")
        launch(b, op, "fused_adamw_kernel", 3e8, 100, idle=1e6)
    else:
        for i, name in enumerate(("aten::mul", "aten::add", "aten::tanh", "aten::pow")):
            op = b.node(target, "operator", name)
            launch(b, op, f"vectorized_elementwise_kernel<{i}>", 2e8, 40000, idle=1.5e8)
    big = b.path(
        ("python", "main", TRAIN, 33),
        ("operator", "aten::linear"),
        ("operator", "aten::addmm"),
        parent=step,
    )
    launch(b, big, "sm90_xmma_gemm_bf16bf16_bf16f32", 2e9, 1000)
    return b


def jax_small_kernels() -> ProfileBuilder:
    """A jitted call whose HLO ops (below the JAX op_name path) launch many short kernels, as the
    CUPTI layer places XLA's kernels (docs/jax.md)."""
    b, step = base()
    call = b.path(("python", "main", TRAIN, 36), ("python", "update", MODEL, 50), parent=step)
    op = b.path(
        ("jax_op", "jit(update)"),
        ("jax_op", "sgd"),
        ("hlo_op", "loop_multiply_fusion.3", MODEL, 52),
        parent=call,
    )
    launch(b, op, "loop_multiply_fusion_3", 2e8, 40000, idle=1.5e8, api="cuLaunchKernel")
    return b


def copies(pinned: bool) -> ProfileBuilder:
    b, step = base()
    line = b.path(
        ("python", "main", TRAIN, 29),
        ("operator", "aten::to"),
        ("operator", "aten::_to_copy"),
        ("operator", "aten::copy_"),
        parent=step,
    )
    api = b.node(line, "gpu_api", "cudaMemcpyAsync")
    cp = b.node(api, "memcpy", f"memcpy HtoD ({'pinned' if pinned else 'pageable'})")
    b.add(cp, "memcpy_time", 8e8, count=500)
    b.add(cp, "memcpy_bytes", 500 * 2**22, count=500)
    work = b.path(("python", "main", TRAIN, 33), ("operator", "aten::mm"), parent=step)
    launch(b, work, "sm90_xmma_gemm_f32f32_tf32f32", 4e9, 500)
    return b


def gemms(tf32: bool, devices=(H200,)) -> ProfileBuilder:
    b, step = base(devices)
    mm = b.path(
        ("python", "Block.forward", MODEL, 50),
        ("module", "model.blocks.0.mlp"),
        ("operator", "aten::linear"),
        ("operator", "aten::addmm"),
        parent=step,
    )
    name = (
        "sm90_xmma_gemm_f32f32_tf32f32_f32_tn_n_tilesize128x128x32"
        if tf32
        else "ampere_sgemm_128x64_tn"
    )
    launch(b, mm, name, 5e9, 2000)
    other = b.path(("python", "Block.forward", MODEL, 52), ("operator", "aten::gelu"), parent=step)
    launch(b, other, "vectorized_elementwise_kernel", 1e9, 2000)
    return b


def tiny_grid(grid: str, occupancy: str) -> ProfileBuilder:
    b, step = base()
    op = b.path(("python", "loss_fn", MODEL, 70), ("operator", "aten::sum"), parent=step)
    launch(
        b,
        op,
        "reduce_kernel<512, 1>",
        3e9,
        100,
        props={"grid": grid, "block": "(512, 1, 1)", "theoretical_occupancy": occupancy},
    )
    other = b.path(("python", "main", TRAIN, 33), ("operator", "aten::mm"), parent=step)
    launch(
        b,
        other,
        "sm90_xmma_gemm_bf16bf16_bf16f32",
        5e9,
        100,
        props={"grid": "(528, 1, 1)", "block": "(256, 1, 1)", "theoretical_occupancy": "0.500"},
    )
    return b


def syncs(in_loop: bool) -> ProfileBuilder:
    b, step = base()
    work = b.path(("python", "main", TRAIN, 33), ("operator", "aten::mm"), parent=step)
    launch(b, work, "sm90_xmma_gemm_bf16bf16_bf16f32", 5e9, 1000)
    calls = 1000 if in_loop else 1
    item = b.path(
        ("python", "main", TRAIN, 36 if in_loop else 60),
        ("operator", "aten::item"),
        ("operator", "aten::_local_scalar_dense"),
        parent=step,
    )
    b.add(item, "op_count", calls, count=calls)
    b.add(item, "op_time", 2e4 * calls, count=calls)
    api = b.node(item, "gpu_api", "cudaMemcpyAsync")
    sync = b.node(api, "sync", "cudaStreamSynchronize")
    b.add(sync, "sync_time", 1.5e6 * calls, count=calls)
    cp = b.node(api, "memcpy", "memcpy DtoH (pageable)")
    b.add(cp, "memcpy_time", 2e3 * calls, count=calls)
    return b


def allocs(calls: int) -> ProfileBuilder:
    b, step = base()
    work = b.path(("python", "main", TRAIN, 33), ("operator", "aten::mm"), parent=step)
    launch(b, work, "sm90_xmma_gemm_bf16bf16_bf16f32", 5e9, 1000)
    line = b.path(
        ("python", "main", TRAIN, 38),
        ("python", "empty_cache", f"{TORCH}/cuda/memory.py", 222),
        parent=step,
    )
    for api in ("cudaFree", "cudaMalloc"):
        n = b.node(line, "gpu_api", api)
        b.add(n, "api_calls", calls, count=calls)
        b.add(n, "wall_time", 3e5 * calls, count=max(1, calls // 10))
    return b
