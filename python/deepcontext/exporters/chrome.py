"""Chrome trace events (Perfetto, chrome://tracing) from a profile's bounded timeline.

The trace-event JSON object format: one complete event ("ph": "X") per timeline event, named as
in the report, with its full call path, step and node id in `args`. CPU events sit in the
profiled process (one track per thread), GPU events in one process per device (one track per
stream), and the steps on a track of their own. Times are microseconds from the first step's start
(`otherData.t0_ns` holds that instant on CLOCK_MONOTONIC). An event that overlaps another of its
track without nesting in it goes to an extra track ("... (overlapping, N)"): Perfetto drops such
events. tests/timeline/test_chrome_viewers.py checks the output in Perfetto and catapult.
"""

from __future__ import annotations

import io
import json
import sqlite3

from ..errors import UserError
from ..reader import (
    FRAME_KINDS,
    TIMELINE_TABLES,
    _open,
    check_table,
    corrupt,
    read_meta_json,
    table_type,
)
from ..render import Tree, frame_label

GPU_PID_BASE = 1 << 30  # GPU d is process GPU_PID_BASE + d (no real pid is that large)
# The steps' track: a thread id no OS thread has (Linux ids stay below 2**22). Not 0: Perfetto's
# JSON importer takes tid 0 for the process's main thread, so the steps landed on the main
# thread's track there and slices that cross a step boundary were dropped as overlapping.
STEP_TID = 1 << 29
_KERNEL_PROPS = ("grid", "block", "registers_per_thread", "theoretical_occupancy", "input_shapes")


def read_timeline(path: str) -> tuple[list[tuple], list[tuple]]:
    """(events, steps) of the profile: events as (step, kind, node, start_ns, end_ns, tid,
    device, stream) by start time, steps as (step, start_ns, end_ns)."""
    con = _open(path)
    try:
        kinds = {t: table_type(con, t) for t in TIMELINE_TABLES}
        if kinds["timeline"] != "table":
            raise UserError(
                f"{path}: no timeline in this profile (record one with "
                "`deepcontext run --timeline N ...` or deepcontext.start(timeline=N))"
            )
        for table, cols in TIMELINE_TABLES.items():  # as every reader checks (reader.py)
            if kinds[table] is not None:
                check_table(con, path, table, cols)
        events = con.execute(
            "SELECT step, kind, node, start_ns, end_ns, tid, device, stream FROM timeline "
            "ORDER BY start_ns, end_ns DESC"
        ).fetchall()
        steps = []
        if kinds["timeline_steps"] is not None:
            steps = con.execute(
                "SELECT step, start_ns, end_ns FROM timeline_steps ORDER BY step"
            ).fetchall()
    except sqlite3.DatabaseError as e:
        raise corrupt(path, f"timeline: {e}") from None
    finally:
        con.close()
    return events, steps


def _us(ns: int) -> float:
    """Microseconds with three decimals: the exact nanoseconds, which Perfetto reads back."""
    return round(ns / 1000.0, 3)


class _Track:
    """Lanes of one track: an event goes to the first lane where it nests in the open events
    (lane 0 unless it overlaps one without nesting). Events come by start, longest first."""

    def __init__(self) -> None:
        self.stacks: list[list[int]] = []  # per lane, the end times of its open events

    def lane(self, start: int, end: int) -> int:
        for k, stack in enumerate(self.stacks):
            while stack and stack[-1] <= start:
                stack.pop()
            if not stack or end <= stack[-1]:
                stack.append(end)
                return k
        self.stacks.append([end])
        return len(self.stacks) - 1


def document(tree: Tree) -> dict:
    info = tree.profile
    meta = info.meta
    events, steps = read_timeline(info.path)
    parent = tree.parent.tolist()
    frame = tree.frame.tolist()
    labels: dict[int, str] = {}
    paths: dict[int, list[str]] = {0: []}

    def label(node: int) -> str:
        if node not in labels:
            labels[node] = frame_label(tree.frames[frame[node]])
        return labels[node]

    def path(node: int) -> list[str]:
        """The node's labels from the root's child down, built by walking up for the events'
        nodes only (keeping every ancestor's path was quadratic in the depth)."""
        if node not in paths:
            chain = []
            n = node
            while n:
                chain.append(label(n))
                n = parent[n]
            paths[node] = chain[::-1]
        return paths[node]

    starts = [s[1] for s in steps] + [e[3] for e in events]
    t0 = min(starts) if starts else 0
    pid = int(meta["pid"]) if meta.get("pid", "").isdigit() else 0
    out: list[dict] = []
    threads: set[int] = set()
    streams: set[tuple[int, int]] = set()
    tracks: dict[tuple[int, int], _Track] = {}
    # the events name nodes of the profile; the tree may be a view of it (import frames spliced
    # out): an event's name and path are those of its node in the view
    node_map = tree.node_map
    size = len(parent) if node_map is None else len(node_map)
    for step, kind, node, start, end, tid, device, stream in events:
        if not 0 <= node < size:
            continue
        shown = node if node_map is None else int(node_map[node])
        if shown < 0:
            continue
        gpu = device >= 0
        end = max(end, start)
        args = {"step": step, "node": node, "path": path(shown)}
        for key in _KERNEL_PROPS:
            value = info.props.get(node, {}).get(key)
            if value is not None:
                args[key] = value
        p, t = (GPU_PID_BASE + device, stream) if gpu else (pid, tid)
        lane = tracks.setdefault((p, t), _Track()).lane(start, end)
        ev = {
            "name": label(shown),
            "cat": FRAME_KINDS[kind] if 0 <= kind < len(FRAME_KINDS) else f"kind{kind}",
            "ph": "X",
            "ts": _us(start - t0),
            "dur": _us(end - start),
            "pid": p,
            "tid": t,
            "args": args,
        }
        if lane:
            ev["args"]["lane"] = lane
        if gpu:
            streams.add((device, stream))
        else:
            threads.add(tid)
        out.append((ev, lane))
    # Events that overlap an event of their track without nesting in it (Perfetto drops them)
    # go to extra tracks of the same process, one per lane, with thread ids past STEP_TID.
    lane_tids: dict[tuple[int, int, int], int] = {}  # (pid, tid, lane) -> its track's tid
    next_tid: dict[int, int] = {}
    for ev, lane in out:
        if lane:
            key = (ev["pid"], ev["tid"], lane)
            if key not in lane_tids:
                lane_tids[key] = next_tid[ev["pid"]] = next_tid.get(ev["pid"], STEP_TID) + 1
            ev["tid"] = lane_tids[key]
    out = [ev for ev, _ in out]
    for step, start, end in steps:
        out.append(
            {
                "name": f"step {step}",
                "cat": "step",
                "ph": "X",
                "ts": _us(start - t0),
                "dur": _us(max(end - start, 0)),
                "pid": pid,
                "tid": STEP_TID,
                "args": {"step": step},
            }
        )
    out.sort(key=lambda e: (e["ts"], -e["dur"]))
    out[0:0] = _metadata(meta, pid, threads, streams, lane_tids)
    return {
        "traceEvents": out,
        "displayTimeUnit": "ns",
        "otherData": {
            "exporter": "deepcontext",
            "profile": info.path,
            "clock": meta.get("timeline_clock", "CLOCK_MONOTONIC"),
            "t0_ns": t0,
            "steps_kept": [s[0] for s in steps],
            "steps_requested": meta.get("timeline_steps", ""),
        },
    }


def _metadata(
    meta: dict,
    pid: int,
    threads: set[int],
    streams: set[tuple[int, int]],
    lane_tids: dict[tuple[int, int, int], int],
) -> list:
    def m(name: str, p: int, tid: int, value, key: str = "name") -> dict:
        return {"name": name, "ph": "M", "pid": p, "tid": tid, "args": {key: value}}

    threads_meta = read_meta_json(meta, "timeline_threads", dict)
    names = {}
    if isinstance(threads_meta, dict):
        for k, v in threads_meta.items():
            if isinstance(k, str) and k.lstrip("-").isdigit() and isinstance(v, str):
                names[int(k)] = v
    gpus = {}
    for d in read_meta_json(meta, "gpu_devices") or []:
        ordinal = str(d.get("ordinal")) if isinstance(d, dict) else ""
        if ordinal.isdigit():
            gpus[int(ordinal)] = str(d.get("name", ""))
    argv = read_meta_json(meta, "command")
    command = " ".join(map(str, argv)) if argv is not None else ""
    out = [
        # the viewers add " (pid N)" / " N" to the name themselves
        m("process_name", pid, 0, command or "python"),
        m("process_sort_index", pid, 0, 0, "sort_index"),
        m("thread_name", pid, STEP_TID, "steps"),
        m("thread_sort_index", pid, STEP_TID, -1, "sort_index"),
    ]
    titles: dict[tuple[int, int], str] = {}
    for tid in sorted(threads):
        name = names.get(tid) or f"thread {tid}"
        titles[(pid, tid)] = f"main thread ({name})" if tid == pid else name
    for device in sorted({d for d, _ in streams}):
        p = GPU_PID_BASE + device
        title = f"GPU {device}" + (f" ({gpus[device]})" if gpus.get(device) else "")
        out.append(m("process_name", p, 0, title))
        out.append(m("process_sort_index", p, 0, 1 + device, "sort_index"))
    for device, stream in sorted(streams):
        titles[(GPU_PID_BASE + device, stream)] = f"stream {stream}"
    for (p, tid), title in titles.items():
        out.append(m("thread_name", p, tid, title))
    for (p, tid, lane), lane_tid in sorted(lane_tids.items()):
        out.append(m("thread_name", p, lane_tid, f"{titles[(p, tid)]} (overlapping, {lane})"))
    return out


def export(tree: Tree, metrics: list[str], out: io.BufferedIOBase) -> None:
    doc = document(tree)
    out.write(json.dumps(doc, separators=(",", ":")).encode())
