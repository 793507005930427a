"""GPU events in the timeline, from real CUPTI records of an H200 (tests/data/gpu/*.jsonl) replayed
through the GPU layer's buffer processor (replay_timeline.py): each kernel, memcpy and memset lands
with its device, stream and duration, under the step its launch was made in. Expectations are
worked out here from the raw records."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections import Counter

import deepcontext
import pytest
from timeline_helpers import HERE, read

DATA = HERE.parent / "data" / "gpu"
KIND = {1: 6, 2: 7, 3: 8}  # activity kind -> frame kind (kernel, memcpy, memset)
GPU_API, SYNC = 5, 12
SYNC_API = re.compile(r"^cu(da)?(Device|Stream|Event|Ctx)Synchroni[sz]e")
PACKAGE = os.path.dirname(deepcontext.__file__)

pytestmark = pytest.mark.skipif(
    not os.path.exists(os.path.join(PACKAGE, "libdeepcontext_cupti.so")),
    reason="the NVIDIA GPU layer is not built",
)


def records(fixture: str) -> list[dict]:
    with open(DATA / f"{fixture}.jsonl") as f:
        events = [json.loads(line) for line in f if line.strip()]
    return [r for e in events if e["e"] == "buffer" for r in e["records"]]


def replay(tmp_path, fixture: str, steps: int):
    out = tmp_path / f"{fixture}.dctx"
    proc = subprocess.run(
        [
            sys.executable,
            str(HERE / "replay_timeline.py"),
            str(DATA / f"{fixture}.jsonl"),
            out,
            str(steps),
        ],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout.splitlines()[-1])
    launched = {int(k): set(v) for k, v in doc["launched"].items()}
    calls = {int(k): v for k, v in doc["calls"].items()}
    t = read(out)
    gpu = [e for e in t["events"] if e["kind"] in KIND.values()]
    api = [e for e in t["events"] if e["kind"] in (GPU_API, SYNC)]
    assert len(gpu) + len(api) == len(t["events"])
    return t, gpu, api, deepcontext.load(out), launched, calls


def shape(e: dict) -> tuple:
    return (e["kind"], e["device"], e["stream"], e["end_ns"] - e["start_ns"])


def test_kernels_of_the_last_steps_with_their_stream(tmp_path):
    t, gpu, _, prof, launched, _ = replay(tmp_path, "eager", 2)
    # The fixture trains 3 steps; the memset after the loop runs in the 4th (running) step.
    assert t["meta"]["timeline_current_step"] == "3"
    assert [s[0] for s in t["steps"]] == [1, 2]
    recs = records("eager")
    for step in (1, 2):
        want = Counter(
            (KIND[r["kind"]], r["device"], r["stream"], r["end"] - r["start"])
            for r in recs
            if r["correlation"] in launched[step]
        )
        got = Counter(shape(e) for e in gpu if e["step"] == step)
        assert got == want and sum(k == 6 for k, *_ in want.elements()) >= 10
    assert {e["step"] for e in gpu} == {1, 2}
    for e in gpu:
        assert e["tid"] == 0 and e["stream"] == 7 and e["device"] == 0
        node = prof.node(e["node"])
        assert node.frame.kind == {6: "kernel", 7: "memcpy", 8: "memset"}[e["kind"]]
        # Under the launching call and the operator that made it (the full context).
        kinds = [f.kind for f in node.path()]
        assert "gpu_api" in kinds or "sync" in kinds
        assert "operator" in kinds


def test_api_calls_on_the_cpu_side(tmp_path):
    t, _, api, prof, _, calls = replay(tmp_path, "eager", 2)
    for step in (1, 2):
        names = [prof.node(e["node"]).frame.name for e in api if e["step"] == step]
        want = [re.sub(r"_v\d+$", "", c) for c in calls[step]]
        assert sorted(names) == sorted(want)
        syncs = [e for e in api if e["step"] == step and e["kind"] == SYNC]
        assert len(syncs) == sum(bool(SYNC_API.match(c)) for c in calls[step]) > 0
    for e in api:
        assert e["device"] == -1 and e["stream"] == -1 and e["tid"] > 0
        assert e["end_ns"] >= e["start_ns"]  # the recorded steady-clock times of the callbacks
        assert prof.node(e["node"]).frame.kind == ("sync" if e["kind"] == SYNC else "gpu_api")


@pytest.mark.parametrize("fixture", ["threads", "graph"])
def test_every_record_lands_on_its_stream(tmp_path, fixture):
    # No step boundary in these workloads: the timeline keeps the running step 0, all of it.
    _, gpu, _, prof, _, _ = replay(tmp_path, fixture, 3)
    recs = records(fixture)
    want = Counter((KIND[r["kind"]], r["device"], r["stream"], r["end"] - r["start"]) for r in recs)
    assert Counter(shape(e) for e in gpu) == want
    streams = {e["stream"] for e in gpu}
    assert len(streams) >= 2  # threads: one stream per worker; graph: capture and replay streams
    for e in gpu:
        assert prof.node(e["node"]).frame.kind in ("kernel", "memcpy", "memset")


def test_chrome_trace_has_a_track_per_stream(tmp_path):
    replay(tmp_path, "threads", 3)
    out = tmp_path / "threads.trace.json"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "deepcontext",
            "export",
            str(tmp_path / "threads.dctx"),
            "-f",
            "chrome",
            "-o",
            str(out),
        ],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    with open(out) as f:
        doc = json.load(f)
    kernels = [e for e in doc["traceEvents"] if e.get("cat") == "kernel"]
    assert len(kernels) == sum(r["kind"] == 1 for r in records("threads"))
    names = {
        (e["pid"], e["tid"]): e["args"]["name"]
        for e in doc["traceEvents"]
        if e["ph"] == "M" and e["name"] == "thread_name"
    }
    for e in kernels:
        assert names[(e["pid"], e["tid"])] == f"stream {e['tid']}"
    processes = [
        e["args"]["name"]
        for e in doc["traceEvents"]
        if e["ph"] == "M" and e["name"] == "process_name" and e["pid"] == kernels[0]["pid"]
    ]
    assert processes and processes[0].startswith("GPU 0") and "H200" in processes[0]
