"""Replays a CUPTI fixture (tests/data/gpu/*.jsonl, recorded on an H200) through the GPU layer's
buffer processor with the timeline on, ending a step (dctx_step) after each training step's
`loss.item()` (its device-to-host copy and sync run under aten::_local_scalar_dense): at the first
API call outside that operator that follows calls inside it.

    python tests/timeline/replay_timeline.py FIXTURE.jsonl OUT.dctx LAST_N_STEPS

Everything after the launch contexts (correlation, kernel nodes, the launch step of each record,
the timeline records) is the layer's own code, as on the GPU. Prints one JSON line: the
correlation ids launched in each step and the names of its outermost API calls (those the
timeline records on the CPU side).
"""

from __future__ import annotations

import ctypes
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "gpu"))

from deepcontext import session, timeline  # noqa: E402
from gpu_replay import Activity, Device, Frame, _libraries, load_events  # noqa: E402

STEP_END_OP = "aten::_local_scalar_dense"


def in_step_end(ev: dict) -> bool:
    return any(frame[0] == 3 and frame[1] == STEP_END_OP for frame in ev["path"])


def replay(events: list[dict]) -> tuple[dict[int, list[int]], dict[int, list[str]]]:
    core, gpu = _libraries()
    nodes: dict[tuple, int] = {}

    def context(path) -> int:
        node = 0
        for kind, name, file, line, module in path:
            key = (node, kind, name, file, line, module)
            if key not in nodes:
                frame = Frame(kind, name.encode(), file.encode(), line, module.encode())
                nodes[key] = core.dctx_child(node, core.dctx_frame_id(ctypes.byref(frame)))
            node = nodes[key]
        return node

    launched: dict[int, list[int]] = {}
    calls: dict[int, list[str]] = {}
    depth: dict[int, int] = {}
    step = 0
    in_item = False
    r = gpu.dctx_cupti_replay_open()
    assert r, "the core is not active"
    for ev in events:
        e = ev["e"]
        if e == "device":
            d = Device(ordinal=ev["ordinal"], name=ev["name"].encode())
            for field, _ in Device._fields_[2:]:
                setattr(d, field, ev[field])
            gpu.dctx_cupti_replay_device(r, ctypes.byref(d))
        elif e == "api":
            if "path" in ev:  # a runtime call (the driver calls nested in it have no path)
                if in_item and not in_step_end(ev):
                    step = timeline.step()
                in_item = in_step_end(ev)
            ctx = context(ev["path"]) if "path" in ev else 0
            launched.setdefault(step, []).append(ev["corr"])
            if depth.get(ev["tid"], 0) == 0:
                calls.setdefault(step, []).append(ev["api"])
            depth[ev["tid"]] = depth.get(ev["tid"], 0) + 1
            gpu.dctx_cupti_replay_api_enter(
                r, ev["tid"], ev["api"].encode(), ev["corr"], ctx, ev["t"]
            )
        elif e == "exit":
            gpu.dctx_cupti_replay_api_exit(r, ev["tid"], ev["t"], ev["failed"])
            depth[ev["tid"]] -= 1
        elif e == "graph_node":
            ctx = context(ev["path"]) if "path" in ev else 0
            gpu.dctx_cupti_replay_graph_node(r, ev["tid"], ev["id"], ev["original"], ctx)
        elif e == "buffer":
            recs = ev["records"]
            arr = (Activity * max(len(recs), 1))()
            for a, rec in zip(arr[: len(recs)], recs, strict=True):
                for field, _ in Activity._fields_:
                    v = rec[field]
                    if field in ("grid", "block"):
                        getattr(a, field)[:] = v
                    elif field == "name":
                        a.name = v.encode()
                    else:
                        setattr(a, field, v)
            gpu.dctx_cupti_replay_buffer(r, arr, len(recs), ev["dropped"])
    gpu.dctx_cupti_replay_close(r)
    return launched, calls


def main(argv: list[str]) -> int:
    fixture, output, steps = argv
    events = load_events(fixture)
    session.start(
        output, gpu=False, torch=False, interval_ms=1000.0, wall=False, timeline=int(steps)
    )
    launched, calls = replay(events)
    session.stop()
    print(json.dumps({"launched": launched, "calls": calls}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
