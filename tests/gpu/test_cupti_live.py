"""The GPU layer on a real NVIDIA GPU (skipped elsewhere; scripts/gpu-check.sh runs these on the
GPU machine): real programs under `deepcontext run`, profiles read back."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("no CUDA device", allow_module_level=True)

from deepcontext import reader as profile  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


def run(tmp_path, code: str, *opts: str):
    script = tmp_path / "prog.py"
    script.write_text(textwrap.dedent(code))
    out = tmp_path / "prog.dctx"
    res = subprocess.run(
        [sys.executable, "-m", "deepcontext", "run", "-o", str(out), *opts, str(script)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=300,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    return profile.load(out), res


def under(node, name):
    return any(f.name == name for f in node.path())


def test_kernels_are_under_the_launching_line_and_operator(tmp_path):
    prof, _ = run(
        tmp_path,
        """
        import torch
        def compute(a):
            for _ in range(20):
                a = torch.mm(a, a).relu_()
            return a
        x = torch.randn(512, 512, device="cuda")
        compute(x)
        torch.cuda.synchronize()
    """,
    )
    kernels = [n for n in prof.nodes() if n.frame.kind == "kernel"]
    total = prof.total("gpu_time")
    assert total > 0 and kernels
    in_compute = sum(n.exclusive("gpu_time") for n in kernels if under(n, "compute"))
    assert in_compute / total > 0.9
    mm = sum(
        n.exclusive("gpu_time") for n in kernels if under(n, "compute") and under(n, "aten::mm")
    )
    assert mm > 0
    stats = json.loads(prof.meta["gpu_stats"])
    assert stats["launches_received"] == stats["launches_expected"] and stats["dropped"] == 0
    (dev,) = json.loads(prof.meta["gpu_devices"])
    assert dev["sm_count"] > 0 and dev["name"]


def test_cuda_graph_kernels_are_under_the_capture_site(tmp_path):
    with open(os.path.join(HERE, "workloads", "graph.py")) as f:
        prof, _ = run(tmp_path, f.read())
    kernels = [n for n in prof.nodes() if n.frame.kind == "kernel"]
    captured = sum(n.exclusive("gpu_time") for n in kernels if under(n, "capture_model"))
    replay = [n for n in prof.nodes() if n.exclusive("graph_kernel_time") > 0]
    assert replay and all(under(n, "replay_model") for n in replay)
    replayed = sum(n.exclusive("graph_kernel_time") for n in replay)
    assert replayed > 0 and captured >= replayed  # warm-up kernels run eagerly in there too
    assert not [n for n in kernels if under(n, "replay_model")]
    assert json.loads(prof.meta["gpu_stats"])["graph_kernels"] > 0


def test_torch_compile_reduce_overhead_kernels_are_under_the_capture_site(tmp_path):
    prof, _ = run(
        tmp_path,
        """
        import torch
        def f(x):
            return torch.nn.functional.gelu(x @ x).sum(0)
        g = torch.compile(f, mode="reduce-overhead")
        x = torch.randn(256, 256, device="cuda")
        def replay_steps():
            for _ in range(10):
                g(x)
        replay_steps()
        torch.cuda.synchronize()
    """,
    )
    stats = json.loads(prof.meta["gpu_stats"])
    assert stats["graph_kernels"] > 0
    replay = [n for n in prof.nodes() if n.exclusive("graph_kernel_time") > 0]
    assert replay and all(under(n, "replay_steps") for n in replay)


def test_torch_compile_kernels_are_under_the_calling_line(tmp_path):
    """Inductor's Triton kernels run outside any aten operator: the launch takes the Python path."""
    prof, _ = run(
        tmp_path,
        """
        import torch
        def f(x):
            return torch.nn.functional.gelu(x @ x).sin().sum(0)
        g = torch.compile(f)
        x = torch.randn(512, 512, device="cuda")
        def compiled_steps():
            for _ in range(20):
                g(x)
        compiled_steps()
        torch.cuda.synchronize()
    """,
    )
    kernels = [n for n in prof.nodes() if n.frame.kind == "kernel"]
    total = prof.total("gpu_time")
    steps = sum(n.exclusive("gpu_time") for n in kernels if under(n, "compiled_steps"))
    assert total > 0 and steps / total > 0.9, (steps, total)


def test_another_subscriber_first_turns_gpu_metrics_off_with_one_line(tmp_path):
    prof_path = tmp_path / "inner.dctx"
    script = tmp_path / "conflict.py"
    script.write_text(
        textwrap.dedent(f"""
        import torch
        from deepcontext import session
        x = torch.randn(256, 256, device="cuda")
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as p:
            session.start({str(prof_path)!r})
            y = (x @ x).sum().item()
            session.stop()
        assert any(e.device_type.name == "CUDA" for e in p.events())
        print("ok", y == y)
    """)
    )
    res = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "ok True" in res.stdout
    assert len([ln for ln in res.stderr.splitlines() if "another CUPTI client" in ln]) == 1
    assert any("another CUPTI client" in m for m in profile.load(prof_path).notes)


def test_torch_profiler_started_under_us_leaves_the_program_unharmed(tmp_path):
    prof, res = run(
        tmp_path,
        """
        import torch
        x = torch.randn(256, 256, device="cuda")
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as p:
            y = (x @ x).sum().item()
        print("ok", y == y, len(p.events()))
    """,
    )
    assert "ok True" in res.stdout
    stats = json.loads(prof.meta["gpu_stats"])
    missing = stats["launches_expected"] - stats["launches_received"]
    assert missing == 0 or any("another CUPTI client" in m for m in prof.notes)


def test_cuda_caching_allocator_bytes_and_peak_by_line(tmp_path):
    # The CUDA caching allocator reports to our memory observer like the CPU one: a 256 MiB
    # tensor made on one line is that line's gpu_peak_bytes; a small one elsewhere stays small.
    prof, _ = run(
        tmp_path,
        """
        import torch
        def make():
            big = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")  # BIG
            big.fill_(1)
            return int(big[0])
        for _ in range(3):
            make()
        small = torch.ones(16, device="cuda")  # SMALL
        torch.cuda.synchronize()
        """,
    )
    src = (tmp_path / "prog.py").read_text().splitlines()
    big_line = next(i for i, s in enumerate(src, 1) if "# BIG" in s)
    small_line = next(i for i, s in enumerate(src, 1) if "# SMALL" in s)
    big = list(prof.find(file="prog.py", kind="python", line=big_line))
    assert big
    assert max(n.inclusive("gpu_peak_bytes") for n in big) >= 256 << 20
    assert sum(n.inclusive("gpu_alloc_bytes") for n in big) >= 3 * (256 << 20)
    assert sum(n.inclusive("gpu_alloc_count") for n in big) >= 3
    small = list(prof.find(file="prog.py", kind="python", line=small_line))
    assert small and max(n.inclusive("gpu_peak_bytes") for n in small) < 1 << 20
    # CPU allocator metrics stay apart from the GPU ones
    assert max(n.inclusive("peak_bytes") for n in big) < 256 << 20
