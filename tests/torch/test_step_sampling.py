"""Step-sampled tracing (deepcontext.step_sampling): the schedule on its own, then real torch loops
on the CPU under `deepcontext run`, the default against `--trace all`."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from deepcontext import reader
from deepcontext.errors import UserError
from deepcontext.step_sampling import FULL, OFF, SAMPLED, Schedule, Settings, parse_range
from program_helpers import line_of, run_deepcontext, write_program


def drive(schedule: Schedule, steps: int, traced_s: float, untraced_s: float) -> list[int]:
    """Runs `steps` step ends, each step taking the time of its mode; returns the modes."""
    now = 0.0
    modes = []
    for _ in range(steps):
        modes.append(schedule.mode)
        now += traced_s if schedule.mode != OFF else untraced_s
        schedule.step_end(now)
    return modes


def test_warmup_is_traced_whole_then_one_step_in_a_period():
    s = Schedule(Settings(), start=0.0)
    modes = drive(s, 1000, traced_s=0.02, untraced_s=0.01)  # a traced step costs 2x
    assert modes[:3] == [FULL] * 3
    assert modes[3] == SAMPLED  # the first step after warm-up: its cost sets the period
    traced = modes.count(SAMPLED)
    # 100 % extra per traced step within a 3 % budget: one step in 34
    assert s.period == 34
    assert 1000 / 34 * 0.7 < traced < 1000 / 34 * 1.4
    # what the traced steps stand for: every step after warm-up, no more, no less
    assert s.sampled_steps == 997 and s.sampled_traced == traced
    assert s.weight() * traced == pytest.approx(997)
    # the traced steps are spread, not periodic (a loop's own period must not alias)
    gaps = {b - a for a, b in zip(s.traced_ids, s.traced_ids[1:], strict=False)}
    assert len(gaps) > 5


def test_period_follows_the_cost_of_a_traced_step():
    cheap = Schedule(Settings(), start=0.0)
    drive(cheap, 300, traced_s=0.0101, untraced_s=0.01)  # GPU-bound: tracing is hidden
    assert cheap.period == Settings.min_period
    dear = Schedule(Settings(), start=0.0)
    drive(dear, 300, traced_s=0.1, untraced_s=0.01)
    assert dear.period == Settings.max_period


def test_a_tail_after_the_last_step_is_not_a_step():
    s = Schedule(Settings(), start=0.0)
    drive(s, 50, traced_s=0.01, untraced_s=0.01)
    s.mode = SAMPLED  # the program ends just after a traced step started
    steps = s.sampled_steps / s.sampled_traced
    # however long the exit takes, what the traced steps stand for stays the steps that ended
    assert s.weight(now=s.step_start + 0.001) == steps
    assert s.weight(now=s.step_start + 10.0) == steps
    meta = s.meta(s.step_start + 10.0)
    assert int(meta["trace_sampled_steps"]) == s.sampled_steps == 47


def test_a_long_step_is_traced_from_then_on():
    s = Schedule(Settings(), start=0.0)
    drive(s, 40, traced_s=0.01, untraced_s=0.01)
    while s.mode != OFF:
        s.step_end(s.step_start + 0.01)
    assert s.tick(s.step_start + 0.2) is None  # 20 usual steps, under 0.5 s: not yet
    assert s.tick(s.step_start + 0.6) == FULL
    counted = s.sampled_steps
    s.step_end(s.step_start + 0.7)
    assert s.sampled_steps == counted  # a step traced at weight 1 stands for nothing more
    assert s.mode == SAMPLED  # and the step after it is traced


def test_a_program_without_steps_is_traced_in_time_windows():
    s = Schedule(Settings(no_steps_s=1.0, window_s=0.1, window_period_s=1.0), start=0.0)
    assert s.tick(0.5) is None
    assert s.tick(1.0) == SAMPLED
    assert s.tick(1.05) is None
    assert s.tick(1.1) == OFF
    assert s.tick(2.01) == SAMPLED
    assert s.weight(now=2.06) == pytest.approx((1.01 + 0.05) / (0.1 + 0.05))
    assert s.meta(2.06)["trace_mode"] == "time windows"


def test_a_chosen_range_is_traced_whole_and_nothing_else():
    s = Schedule(Settings(trace_steps=(5, 8)), start=0.0)
    modes = drive(s, 12, traced_s=0.01, untraced_s=0.01)
    assert modes == [OFF] * 5 + [FULL] * 3 + [OFF] * 4
    assert s.weight() == 1.0
    assert s.tick(100.0) is None
    assert parse_range("5:8") == (5, 8) and parse_range(range(2, 4)) == (2, 4)
    for bad in ("8:5", "x", "1:2:3", "-1:4"):
        with pytest.raises(UserError):
            parse_range(bad)


LOOP = """
import sys
import torch
from torch import nn

torch.manual_seed(0)
torch.set_num_threads(1)
steps = int(sys.argv[1])
x = torch.randn(16, 64)
model = nn.Sequential(nn.Linear(64, 128), nn.GELU(), nn.Linear(128, 64))
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
for _ in range(steps):
    loss = model(x).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
print(f"loss {loss.item():.8f}")
"""


@pytest.fixture(scope="module")
def loops(tmp_path_factory):
    """(plain run's output, default profile and output, --trace all profile)."""
    tmp = tmp_path_factory.mktemp("loop")
    prog = write_program(tmp, LOOP)
    plain = subprocess.run([sys.executable, str(prog), "400"], capture_output=True, text=True)
    sampled = run_deepcontext(tmp, "-o", "s.dctx", str(prog), "400")
    run_deepcontext(tmp, "-q", "-o", "a.dctx", "--trace", "all", str(prog), "400")
    return plain.stdout, reader.load(tmp / "s.dctx"), sampled.stdout, reader.load(tmp / "a.dctx")


def test_sampled_steps_estimate_what_every_step_records(loops):
    plain_out, sampled, sampled_out, full = loops
    assert sampled_out == plain_out  # the program computes the same
    meta = sampled.meta
    assert meta["trace_mode"] == "steps" and full.meta["trace_mode"] == "all"
    assert int(meta["steps_total"]) == 400
    traced = int(meta["steps_traced"])
    # some steps untraced whatever the host's load: the period is 2 or more (a loaded host hides
    # the cost of tracing and the period falls to 2: half the steps)
    assert 3 < traced < 300, meta
    sampled_steps = float(meta["trace_sampled_steps"])
    assert float(meta["trace_sampled_traced"]) * float(meta["trace_weight"]) == pytest.approx(
        sampled_steps, rel=1e-4
    )
    assert sampled_steps + int(meta["trace_warmup_steps"]) == pytest.approx(400, abs=1)
    assert json.loads(meta["trace_traced_step_ids"])[0] == 3
    ops = sampled.total("op_count") / full.total("op_count")
    assert 0.95 < ops < 1.05, ops
    allocs = sampled.total("alloc_count") / full.total("alloc_count")
    assert 0.9 < allocs < 1.1, allocs

    # operators sit where they did (the top operators' shares of op_count)
    def shares(p):
        out = {}
        for n in p.nodes():
            if n.frame.kind == "operator":
                out[n.frame.name] = out.get(n.frame.name, 0.0) + n.exclusive("op_count")
        total = sum(out.values())
        return {k: v / total for k, v in out.items()}

    a, b = shares(sampled), shares(full)
    for name in sorted(b, key=b.get, reverse=True)[:10]:
        assert abs(a.get(name, 0.0) - b[name]) < 0.02, name
    assert any(note.startswith("estimated from") for note in sampled.notes), sampled.notes
    # The schedule's watchdog thread is the profiler's, not the program's.
    threads = {n.frame.name for n in sampled.nodes() if n.frame.kind == "thread"}
    assert "deepcontext-steps" not in threads, threads


def test_a_short_program_without_steps_is_traced_whole(tmp_path):
    # A minute-long start-up (a compile, loading data) and then a short burst of work: every
    # operator of the burst is in the profile, not left between time windows.
    prog = write_program(
        tmp_path,
        """
        import time
        import torch
        time.sleep(12)  # START-UP
        x = torch.randn(64, 64)
        for i in range(20):
            y = torch.mm(x, x)  # BURST
        """,
    )
    run_deepcontext(tmp_path, "-q", "-o", "p.dctx", str(prog))
    p = reader.load(tmp_path / "p.dctx")
    line = line_of(prog, "# BURST")
    mm = [n for n in p.find("aten::mm") if any(f.line == line for f in n.path())]
    assert sum(n.exclusive("op_count") for n in mm) == 20, p.meta.get("trace_mode")


def test_explicit_steps_and_a_step_range(tmp_path):
    prog = write_program(
        tmp_path,
        """
        import torch
        import deepcontext
        x = torch.randn(64, 64)
        for i in range(60):
            y = torch.mm(x, x).relu()
            deepcontext.step()
        """,
    )
    run_deepcontext(tmp_path, "-q", "-o", "r.dctx", "--trace-steps", "10:20", str(prog))
    ranged = reader.load(tmp_path / "r.dctx")
    assert ranged.meta["trace_mode"] == "step range" and ranged.meta["steps_total"] == "60"
    mm = sum(n.exclusive("op_count") for n in ranged.nodes() if n.frame.name == "aten::mm")
    assert mm == 10
    run_deepcontext(tmp_path, "-q", "-o", "d.dctx", str(prog))
    default = reader.load(tmp_path / "d.dctx")
    mm = sum(n.exclusive("op_count") for n in default.nodes() if n.frame.name == "aten::mm")
    assert int(default.meta["steps_traced"]) < 60
    assert mm == pytest.approx(60, rel=0.05)


def test_bad_trace_steps_is_one_line_error(tmp_path):
    prog = write_program(tmp_path, "print('ran')\n")
    proc = run_deepcontext(tmp_path, "--trace-steps", "9:3", str(prog), check=False)
    assert proc.returncode != 0 and "ran" not in proc.stdout
    assert "trace steps must be A:B" in proc.stderr and "Traceback" not in proc.stderr
