"""Step-sampled tracing on a real NVIDIA GPU (skipped elsewhere; scripts/gpu-check.sh runs these
on the GPU machine): the default against `--trace all` on the same CUDA training loop."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("no CUDA device", allow_module_level=True)

from deepcontext import reader as profile  # noqa: E402

LOOP = """
import torch
from torch import nn

def build():
    model = nn.Sequential(*[nn.Sequential(nn.Linear(256, 256), nn.GELU()) for _ in range(6)]).cuda()
    return model, torch.optim.AdamW(model.parameters(), lr=1e-3)

def train(model, opt, x, steps):
    for _ in range(steps):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(x).float().pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()

model, opt = build()
x = torch.randn(32, 256, device="cuda")
train(model, opt, x, 300)
torch.cuda.synchronize()
"""


@pytest.fixture(scope="module")
def profiles(tmp_path_factory):
    """(default, --trace all) profiles of the same loop."""
    tmp = tmp_path_factory.mktemp("steps")
    return run(tmp, "sampled"), run(tmp, "full", "--trace", "all")


def run(tmp_path, name: str, *opts: str):
    script = tmp_path / "loop.py"
    script.write_text(textwrap.dedent(LOOP))
    out = tmp_path / f"{name}.dctx"
    res = subprocess.run(
        [sys.executable, "-m", "deepcontext", "run", "-q", "-o", str(out), *opts, str(script)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=300,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    return profile.load(out)


def by_line(prof, metric: str) -> dict[str, float]:
    """metric of kernels by the innermost line of loop.py above them (share of the total)."""
    total = prof.total(metric)
    out: dict[str, float] = {}
    for n in prof.nodes():
        if n.frame.kind != "kernel":
            continue
        lines = [f for f in n.path() if f.kind == "python" and f.file.endswith("loop.py")]
        key = f"{lines[-1].line}" if lines else "?"
        out[key] = out.get(key, 0.0) + n.exclusive(metric) / total
    return out


def test_sampled_steps_estimate_every_step(profiles):
    sampled, full = profiles
    meta = sampled.meta
    assert meta["trace_mode"] == "steps" and full.meta["trace_mode"] == "all"
    assert int(meta["steps_total"]) == 300
    assert int(meta["steps_traced"]) < 150, meta
    stats = json.loads(meta["gpu_stats"])
    # every record of a traced step came, with its launch's context, and no other
    assert stats["unattributed"] == 0, stats
    assert stats["launches_received"] == stats["launches_expected"], stats
    assert stats["sampled_gpu_time_ns"] > 0
    ratio = sampled.total("gpu_time") / full.total("gpu_time")
    assert 0.97 < ratio < 1.03, ratio
    ops = sampled.total("op_count") / full.total("op_count")
    assert 0.95 < ops < 1.05, ops
    a, b = by_line(sampled, "gpu_time"), by_line(full, "gpu_time")
    for line in set(a) | set(b):
        assert abs(a.get(line, 0) - b.get(line, 0)) < 0.02, (line, a, b)
    assert any("estimated from" in n for n in sampled.notes), sampled.notes


def test_idle_time_is_not_counted_across_untraced_steps(profiles):
    sampled, full = profiles
    idle = sampled.total("gpu_idle_time") / max(full.total("gpu_idle_time"), 1.0)
    # untraced steps between traced ones would read as idle time many times the real one
    assert idle < 1.5, (sampled.total("gpu_idle_time"), full.total("gpu_idle_time"))
