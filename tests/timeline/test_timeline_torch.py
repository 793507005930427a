"""The bounded timeline on a real PyTorch CPU training loop, through `deepcontext run`: exactly the
last N steps are kept, memory does not grow with the number of steps, and the rings' limits are
reported."""

from __future__ import annotations

import textwrap
from collections import Counter

import pytest

pytest.importorskip("torch")

import deepcontext  # noqa: E402
from timeline_helpers import PROGRAMS, notes, read, run  # noqa: E402

LOOP = PROGRAMS / "torch_loop.py"
OPERATOR, SCOPE = 3, 2
MB = 1 << 20


@pytest.fixture(scope="module")
def loops(tmp_path_factory):
    """--timeline 5 runs of 100 and 1000 steps: {steps: (profile path, peak RSS)}."""
    tmp = tmp_path_factory.mktemp("timeline-loop")
    out = {}
    for steps in (100, 1000):
        path = tmp / f"loop{steps}.dctx"
        _, rss = run(tmp, "-q", "--timeline", 5, "-o", path, LOOP, steps)
        out[steps] = (path, rss)
    return out


@pytest.mark.parametrize("steps", [100, 1000])
def test_keeps_exactly_the_last_steps(loops, steps):
    path, _ = loops[steps]
    t = read(path)
    want = list(range(steps - 5, steps))
    assert [s[0] for s in t["steps"]] == want
    assert t["meta"]["timeline_current_step"] == str(steps)  # the running step is not kept
    assert t["meta"]["timeline_steps"] == "5"
    assert t["meta"]["timeline_incomplete_steps"] == "0"
    per_step = Counter(e["step"] for e in t["events"])
    assert sorted(per_step) == want
    # The same work every step: the same number of operator events in each.
    assert len(set(per_step.values())) == 1 and min(per_step.values()) > 20
    bounds = {s: (a, b) for s, a, b in t["steps"]}
    prof = deepcontext.load(path)
    for e in t["events"]:
        assert e["kind"] == OPERATOR and e["device"] == -1 and e["stream"] == -1
        assert e["tid"] == int(t["meta"]["pid"])  # CPU ops run on the main thread
        start, end = bounds[e["step"]]
        assert start <= e["start_ns"] < end and e["start_ns"] <= e["end_ns"]
        # the engine's evaluate_function record is placed as the forward's backward marker
        assert prof.node(e["node"]).frame.kind in ("operator", "backward")
    names = {prof.node(e["node"]).frame.name for e in t["events"]}
    assert {"aten::addmm", "aten::relu"} <= names
    assert any(n.startswith("Optimizer.step#SGD.step") for n in names)


def test_memory_does_not_grow_with_steps(loops):
    (_, rss100), (path1000, rss1000) = loops[100], loops[1000]
    assert abs(rss1000 - rss100) < 10 * MB, (rss100 / MB, rss1000 / MB)
    meta = read(path1000)["meta"]
    recorded, capacity = int(meta["timeline_recorded"]), int(meta["timeline_events_per_thread"])
    assert recorded > 100_000  # every operator of 1000 steps went through the ring
    assert int(meta["timeline_overwritten"]) == max(recorded - capacity, 0)


def test_small_ring_wraps_and_says_so(tmp_path):
    path = tmp_path / "small.dctx"
    run(tmp_path, "-q", "--timeline", 3, "--timeline-events", 64, "-o", path, LOOP, 20)
    t = read(path)
    assert [s[0] for s in t["steps"]] == [17, 18, 19]
    assert t["meta"]["timeline_events_per_thread"] == "64"
    assert int(t["meta"]["timeline_overwritten"]) > 0
    assert int(t["meta"]["timeline_incomplete_steps"]) > 0
    assert len(t["events"]) <= 64
    assert {e["step"] for e in t["events"]} <= {17, 18, 19}
    assert any("--timeline-events" in n for n in notes(t["meta"]))


def test_explicit_steps_and_user_scopes(tmp_path):
    prog = tmp_path / "manual.py"
    prog.write_text(
        textwrap.dedent(
            """
            import sys
            import torch
            import deepcontext
            from deepcontext import timeline

            deepcontext.start(sys.argv[1], timeline=2)
            model = torch.nn.Linear(8, 8)
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            for i in range(6):
                timeline.step()  # explicit steps: optimizer.step() no longer ends one
                with deepcontext.scope("work"):
                    for _ in range(2):
                        opt.zero_grad()
                        model(torch.randn(4, 8)).sum().backward()
                        opt.step()
            deepcontext.stop()
            """
        )
    )
    import subprocess
    import sys

    path = tmp_path / "manual.dctx"
    proc = subprocess.run([sys.executable, str(prog), str(path)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    t = read(path)
    assert t["meta"]["timeline_current_step"] == "6"
    assert [s[0] for s in t["steps"]] == [4, 5]
    scopes = [e for e in t["events"] if e["kind"] == SCOPE]
    assert [e["step"] for e in scopes] == [4, 5]
    prof = deepcontext.load(path)
    assert all(prof.node(e["node"]).frame.name == "work" for e in scopes)
    for s in scopes:  # the scope's operators are inside it, on its thread
        inner = [
            e
            for e in t["events"]
            if e["kind"] == OPERATOR and e["step"] == s["step"] and e["tid"] == s["tid"]
        ]
        assert inner and all(
            s["start_ns"] <= e["start_ns"] <= e["end_ns"] <= s["end_ns"] for e in inner
        )
        assert any(prof.node(e["node"]).frame.name.startswith("Optimizer.step") for e in inner)


def test_checkpoints_while_recording(tmp_path):
    # Checkpoints read the rings while the loop keeps writing them; the final write is exact.
    path = tmp_path / "ckpt.dctx"
    run(tmp_path, "-q", "--timeline", 3, "--checkpoint", 0.05, "-o", path, LOOP, 400)
    t = read(path)
    assert t["meta"]["complete"] == "1"
    assert [s[0] for s in t["steps"]] == [397, 398, 399]
    per_step = Counter(e["step"] for e in t["events"])
    assert sorted(per_step) == [397, 398, 399] and len(set(per_step.values())) == 1


def test_no_step_marked_keeps_the_last_events(tmp_path):
    path = tmp_path / "nostep.dctx"
    run(tmp_path, "-q", "--timeline", 2, "--no-auto-step", "-o", path, LOOP, 10)
    t = read(path)
    assert t["meta"]["timeline_current_step"] == "0"
    assert [s[0] for s in t["steps"]] == [0]
    assert len(t["events"]) > 100 and {e["step"] for e in t["events"]} == {0}
    assert any("no step boundary" in n for n in notes(t["meta"]))


def test_off_without_the_flag(tmp_path):
    path = tmp_path / "off.dctx"
    run(tmp_path, "-q", "-o", path, LOOP, 5)
    assert "timeline" not in read(path)["tables"]


def test_bad_flag_values_are_usage_errors(tmp_path):
    import subprocess
    import sys

    for args in (["--timeline", "-3"], ["--timeline", "5", "--timeline-events", "x"]):
        proc = subprocess.run(
            [sys.executable, "-m", "deepcontext", "run", *args, str(LOOP), "1"],
            capture_output=True,
            text=True,
            cwd=tmp_path,
        )
        assert proc.returncode == 2 and "--timeline" in proc.stderr
