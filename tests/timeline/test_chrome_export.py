"""`deepcontext export FILE --format chrome`: a trace-event JSON (the format Perfetto and
chrome://tracing open) of the timeline, checked for structure, names and nesting."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import defaultdict

import deepcontext
import pytest
from deepcontext.render import frame_label
from timeline_helpers import PROGRAMS, read, run

pytest.importorskip("torch")


def export(path, out) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "deepcontext",
            "export",
            str(path),
            "--format",
            "chrome",
            "-o",
            str(out),
        ],
        capture_output=True,
        text=True,
    )


@pytest.fixture(scope="module")
def traced(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("chrome")
    path = tmp / "loop.dctx"
    run(tmp, "-q", "--timeline", 3, "-o", path, PROGRAMS / "torch_loop.py", 30)
    out = tmp / "loop.trace.json"
    proc = export(path, out)
    assert proc.returncode == 0, proc.stderr
    with open(out) as f:
        return path, json.load(f)


def test_trace_event_format(traced):
    path, doc = traced
    assert isinstance(doc, dict) and isinstance(doc["traceEvents"], list)
    assert doc["displayTimeUnit"] in ("ms", "ns")
    complete = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    meta = [e for e in doc["traceEvents"] if e["ph"] == "M"]
    assert all(e["ph"] in ("X", "M") for e in doc["traceEvents"])
    for e in complete:
        assert isinstance(e["name"], str) and e["name"]
        assert isinstance(e["ts"], (int, float)) and e["ts"] >= 0
        assert isinstance(e["dur"], (int, float)) and e["dur"] >= 0
        assert isinstance(e["pid"], int) and isinstance(e["tid"], int)
        assert isinstance(e["cat"], str) and isinstance(e["args"], dict)
    t = read(path)
    ops = [e for e in complete if e["cat"] == "operator"]
    steps = [e for e in complete if e["cat"] == "step"]
    assert len(ops) == len(t["events"])
    assert [e["name"] for e in steps] == ["step 27", "step 28", "step 29"]
    assert {e["args"]["step"] for e in ops} == {27, 28, 29}
    names = {(e["name"], e["args"]["name"]) for e in meta if e["name"] == "thread_name"}
    assert ("thread_name", "steps") in names
    assert any(v.startswith("main thread") for _, v in names)
    assert doc["otherData"]["steps_kept"] == [27, 28, 29]
    # Durations in microseconds, from the table's nanoseconds.
    rows = sorted(e["end_ns"] - e["start_ns"] for e in t["events"])
    assert sorted(round(e["dur"] * 1000) for e in ops) == pytest.approx(rows, abs=1)


def test_names_and_paths_as_in_the_report(traced):
    path, doc = traced
    prof = deepcontext.load(path)
    for e in doc["traceEvents"]:
        if e.get("cat") != "operator":
            continue
        node = prof.node(e["args"]["node"])
        assert e["name"] == frame_label(node.frame)
        assert e["args"]["path"] == [frame_label(f) for f in node.path()]
        assert e["args"]["path"][-1] == e["name"]


def test_slices_nest_on_each_track(traced):
    _, doc = traced
    tracks = defaultdict(list)
    for e in doc["traceEvents"]:
        if e["ph"] == "X":
            tracks[(e["pid"], e["tid"])].append((e["ts"], e["ts"] + e["dur"]))
    eps = 0.002  # rounding to the nanosecond on both ends
    for spans in tracks.values():
        stack: list[float] = []
        for start, end in sorted(spans, key=lambda s: (s[0], -s[1])):
            while stack and stack[-1] <= start + eps:
                stack.pop()
            assert not stack or end <= stack[-1] + eps, "overlapping slices on one track"
            stack.append(end)


def test_profile_without_timeline_is_a_clear_error(tmp_path):
    path = tmp_path / "plain.dctx"
    run(tmp_path, "-q", "-o", path, PROGRAMS / "torch_loop.py", 2)
    proc = export(path, tmp_path / "x.json")
    assert proc.returncode == 2
    assert "no timeline in this profile" in proc.stderr and "--timeline" in proc.stderr
    assert not (tmp_path / "x.json").exists()
