"""GPU rules on trees shaped like the CUPTI layer's output: each fires on the problem with the
right location and evidence, and is silent on the fixed shape."""

from __future__ import annotations

import gpu_trees as T
import pytest
from deepcontext.analyzer import analyze


@pytest.fixture
def write(tmp_path):
    def w(builder, name="p"):
        return builder.write(tmp_path / f"{name}.dctx")

    return w


def test_channels_last(write):
    before = analyze(write(T.conv_unet(channels_last=False)))
    f = before.by_rule("channels-last")
    assert len(f) == 1
    f = f[0]
    assert f.time == pytest.approx(1.8e9)
    assert f.location["source"]["line"] == 22 and f.location["module"] == "model.down1.conv"
    assert f.location["operators"] == ["aten::conv2d"]
    assert any("nchwToNhwc" in k["name"] for k in f.location["kernels"])
    assert "channels_last" in f.suggestion
    assert before.findings[0].rule == "channels-last"
    assert not analyze(write(T.conv_unet(channels_last=True), "after")).by_rule("channels-last")


def test_small_kernels_elementwise(write):
    f = analyze(write(T.small_kernels(optimizer=False))).by_rule("small-kernels")
    assert len(f) == 1
    f = f[0]
    assert f.evidence["launches"] == 160000 and f.evidence["distinct_kernels"] == 4
    assert f.evidence["gpu_idle"] == pytest.approx(6e8)
    assert f.location["source"]["function"] == "gelu_tanh"
    assert "torch.compile" in f.suggestion
    assert f.saving == pytest.approx(6e8 + 0.25 * 8e8)


def test_small_kernels_of_jax_suggest_jax_changes(write):
    f = analyze(write(T.jax_small_kernels(), "jax")).by_rule("small-kernels")
    assert len(f) == 1 and f[0].evidence["launches"] == 40000
    assert "jax.lax.scan" in f[0].suggestion and "torch" not in f[0].suggestion


def test_small_kernels_optimizer_and_fused(write):
    f = analyze(write(T.small_kernels(optimizer=True))).by_rule("small-kernels")
    assert f and "fused=True" in f[0].suggestion and f[0].evidence["optimizer"]
    assert f[0].location["source"]["line"] == 35
    assert not analyze(write(T.small_kernels(optimizer=True, fused=True), "f")).by_rule(
        "small-kernels"
    )


def test_pageable_memcpy(write):
    f = analyze(write(T.copies(pinned=False))).by_rule("pageable-memcpy")
    assert len(f) == 1 and f[0].location["source"]["line"] == 29
    assert f[0].evidence["bytes"] == 500 * 2**22 and f[0].evidence["copies"] == 500
    assert "non_blocking=True" in f[0].suggestion
    assert not analyze(write(T.copies(pinned=True), "pinned")).by_rule("pageable-memcpy")


def test_tensor_cores(write):
    f = analyze(write(T.gemms(tf32=False))).by_rule("tensor-cores")
    assert len(f) == 1
    assert f[0].evidence["compute_capability"] == 9.0
    assert f[0].location["module"] == "model.blocks.0.mlp"
    assert not analyze(write(T.gemms(tf32=True), "tf32")).by_rule("tensor-cores")
    turing = [{**T.H200, "compute_capability": "7.5"}]
    assert not analyze(write(T.gemms(tf32=False, devices=turing), "t4")).by_rule("tensor-cores")


def test_low_occupancy(write):
    f = analyze(write(T.tiny_grid("(4, 1, 1)", "0.125"))).by_rule("low-occupancy")
    assert len(f) == 1 and f[0].location["source"]["function"] == "loss_fn"
    assert f[0].evidence["sm_count"] == 132 and f[0].evidence["occupancy"] == 0.125
    assert not analyze(write(T.tiny_grid("(1024, 1, 1)", "0.750"), "ok")).by_rule("low-occupancy")


def test_host_sync_measures_wait(write):
    a = analyze(write(T.syncs(in_loop=True)))
    f = a.by_rule("host-sync")
    assert len(f) == 1
    f = f[0]
    assert f.location["source"]["line"] == 36
    assert f.evidence["calls"] == 1000
    assert f.evidence["wait_time"] == pytest.approx(1.5e9)
    assert f.metric == "gpu_time" and f.time == pytest.approx(1.5e9)
    assert not analyze(write(T.syncs(in_loop=False), "once")).by_rule("host-sync")


def test_allocator_churn(write):
    f = analyze(write(T.allocs(200))).by_rule("allocator-churn")
    assert len(f) == 1 and f[0].evidence["calls"] == 400
    assert "empty_cache" in f[0].suggestion
    assert not analyze(write(T.allocs(2), "few")).by_rule("allocator-churn")


def test_gpu_rules_skipped_on_cpu_profile(write):
    from dctx_writer import ProfileBuilder

    b = ProfileBuilder()
    n = b.path(("thread", "MainThread"), ("python", "main", T.TRAIN, 3))
    b.add(n, "cpu_time", 1e9)
    a = analyze(write(b))
    skipped = {s["rule"] for s in a.skipped}
    assert {"channels-last", "small-kernels", "tensor-cores", "low-occupancy"} <= skipped
    assert not a.findings and not a.errors
