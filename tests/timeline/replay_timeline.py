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

import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "gpu"))

import gpu_replay  # noqa: E402
from deepcontext import session, timeline  # noqa: E402

STEP_END_OP = "aten::_local_scalar_dense"


def in_step_end(ev: dict) -> bool:
    return any(frame[0] == 3 and frame[1] == STEP_END_OP for frame in ev["path"])


def replay(events: list[dict]) -> tuple[dict[int, list[int]], dict[int, list[str]]]:
    launched: dict[int, list[int]] = {}
    calls: dict[int, list[str]] = {}
    depth: dict[int, int] = {}
    step = 0
    in_item = False

    def observe(ev: dict) -> None:
        nonlocal step, in_item
        if ev["e"] == "api":
            if "path" in ev:  # a runtime call (the driver calls nested in it have no path)
                if in_item and not in_step_end(ev):
                    step = timeline.step()
                in_item = in_step_end(ev)
            launched.setdefault(step, []).append(ev["corr"])
            if depth.get(ev["tid"], 0) == 0:
                calls.setdefault(step, []).append(ev["api"])
            depth[ev["tid"]] = depth.get(ev["tid"], 0) + 1
        elif ev["e"] == "exit":
            depth[ev["tid"]] -= 1

    gpu_replay.replay(events, observe)
    return launched, calls


def main(argv: list[str]) -> int:
    fixture, output, steps = argv
    events = gpu_replay.load_events(fixture)
    session.start(
        output, gpu=False, torch=False, interval_ms=1000.0, wall=False, timeline=int(steps)
    )
    launched, calls = replay(events)
    session.stop()
    print(json.dumps({"launched": launched, "calls": calls}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
