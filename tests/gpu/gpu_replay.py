"""Replays a CUPTI fixture (tests/data/gpu/*.jsonl, written by capture_fixtures.py) through the GPU
layer's buffer processor with the real core active, and writes the resulting profile.

    python tests/gpu/gpu_replay.py FIXTURE.jsonl OUT.dctx

The launch contexts are rebuilt from the recorded paths with the core's own dctx_frame_id and
dctx_child; everything after that (correlation, kernel nodes, metrics, graph nodes, idle time,
notes) is the layer's code, the same that runs on the GPU.
"""

from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys

import deepcontext
from deepcontext import capi, session
from deepcontext.capi import Frame

PACKAGE = os.path.dirname(deepcontext.__file__)
HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "..", "data", "gpu")


class Activity(ctypes.Structure):
    _fields_ = [
        ("kind", ctypes.c_uint32),
        ("correlation", ctypes.c_uint32),
        ("start", ctypes.c_uint64),
        ("end", ctypes.c_uint64),
        ("device", ctypes.c_uint32),
        ("context", ctypes.c_uint32),
        ("stream", ctypes.c_uint32),
        ("graph_id", ctypes.c_uint32),
        ("graph_node", ctypes.c_uint64),
        ("bytes", ctypes.c_uint64),
        ("copy_kind", ctypes.c_uint32),
        ("src_kind", ctypes.c_uint32),
        ("dst_kind", ctypes.c_uint32),
        ("grid", ctypes.c_int32 * 3),
        ("block", ctypes.c_int32 * 3),
        ("registers", ctypes.c_uint32),
        ("static_smem", ctypes.c_int32),
        ("dynamic_smem", ctypes.c_int32),
        ("name", ctypes.c_char_p),
    ]


class Device(ctypes.Structure):
    _fields_ = (
        [("ordinal", ctypes.c_uint32), ("name", ctypes.c_char * 128)]
        + [
            (f, ctypes.c_uint32)
            for f in (
                "cc_major",
                "cc_minor",
                "sm_count",
                "max_threads_per_sm",
                "max_blocks_per_sm",
                "regs_per_sm",
                "smem_per_sm",
                "reserved_smem_per_block",
                "warp_size",
                "clock_khz",
                "mem_clock_khz",
            )
        ]
        + [("total_mem", ctypes.c_uint64)]
    )


def load_events(path: str) -> list[dict]:
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def _libraries():
    core = capi.library()
    gpu = ctypes.CDLL(os.path.join(PACKAGE, "libdeepcontext_cupti.so"))
    gpu.dctx_cupti_replay_open.restype = ctypes.c_void_p
    h = ctypes.c_void_p
    gpu.dctx_cupti_replay_device.argtypes = [h, ctypes.POINTER(Device)]
    gpu.dctx_cupti_replay_api_enter.argtypes = [
        h,
        ctypes.c_uint64,
        ctypes.c_char_p,
        ctypes.c_uint32,
        ctypes.c_uint32,
        ctypes.c_uint64,
    ]
    gpu.dctx_cupti_replay_api_exit.argtypes = [h, ctypes.c_uint64, ctypes.c_uint64, ctypes.c_int]
    gpu.dctx_cupti_replay_graph_node.argtypes = [
        h,
        ctypes.c_uint64,
        ctypes.c_uint64,
        ctypes.c_uint64,
        ctypes.c_uint32,
    ]
    gpu.dctx_cupti_replay_buffer.argtypes = [
        h,
        ctypes.POINTER(Activity),
        ctypes.c_size_t,
        ctypes.c_uint64,
    ]
    gpu.dctx_cupti_replay_window.argtypes = [h, ctypes.c_int, ctypes.c_uint64, ctypes.c_double]
    gpu.dctx_cupti_replay_span.argtypes = [h, ctypes.c_int]
    gpu.dctx_cupti_replay_close.argtypes = [h]
    return core, gpu


def replay(events: list[dict], observe=None) -> None:
    """Feeds the fixture's events to the GPU layer in order; observe(ev), when given, sees each
    event before the layer does (tests/timeline ends its steps from there)."""
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

    r = gpu.dctx_cupti_replay_open()
    assert r, "the core is not active"
    for ev in events:
        if observe:
            observe(ev)
        e = ev["e"]
        if e == "device":
            d = Device(ordinal=ev["ordinal"], name=ev["name"].encode())
            for field, _ in Device._fields_[2:]:
                setattr(d, field, ev[field])
            gpu.dctx_cupti_replay_device(r, ctypes.byref(d))
        elif e == "api":
            ctx = context(ev["path"]) if "path" in ev else 0
            gpu.dctx_cupti_replay_api_enter(
                r, ev["tid"], ev["api"].encode(), ev["corr"], ctx, ev["t"]
            )
        elif e == "exit":
            gpu.dctx_cupti_replay_api_exit(r, ev["tid"], ev["t"], ev["failed"])
        elif e == "graph_node":
            ctx = context(ev["path"]) if "path" in ev else 0
            gpu.dctx_cupti_replay_graph_node(r, ev["tid"], ev["id"], ev["original"], ctx)
        elif e == "window":
            gpu.dctx_cupti_replay_window(r, ev["open"], ev["t"], ev["scale"])
        elif e == "span":
            gpu.dctx_cupti_replay_span(r, ev["mode"])
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


def replay_to_profile(fixture: str, output: str, sample_weight: float | None = None) -> None:
    """Replays in a fresh interpreter (one profiling session per process); sample_weight: the
    step-sampled weight the recorded run's schedule ended with (its profile's trace_weight)."""
    cmd = [sys.executable, os.path.abspath(__file__), fixture, output]
    subprocess.run(cmd + ([str(sample_weight)] if sample_weight else []), check=True)


def main(argv: list[str]) -> int:
    fixture, output = argv[:2]
    events = load_events(fixture)
    session.start(output, gpu=False, torch=False, interval_ms=1000.0, wall=False)
    replay(events)
    if len(argv) > 2:
        from deepcontext import capi

        capi.library().dctx_set_sample_weight(float(argv[2]))
    session.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
