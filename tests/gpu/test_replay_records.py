"""Launches read from CUPTI activity records (DEEPCONTEXT_CUPTI_LAUNCH=records, docs/gpu.md) on real
traffic recorded on an H200 (tests/data/gpu/*_records.jsonl, captured by capture_fixtures.py): each
operator pushed its node as CUPTI's external correlation id, CUPTI wrote an external-correlation
record and the driver's API record for each launch, copy and set, and the buffer processor joined
them to the kernels. Expectations are worked out here from the raw records, and compared with the
fixtures of the same workloads captured with launch callbacks.
"""

from __future__ import annotations

import json
import os
import re
from collections import defaultdict

import pytest
from gpu_replay import DATA, load_events

WORKLOADS = ("eager", "graph", "threads")
KERNEL, MEMCPY, MEMSET, EXTERNAL, API = 1, 2, 3, 4, 5


def records(events, kind=None):
    for ev in events:
        if ev["e"] == "buffer":
            for r in ev["records"]:
                if kind is None or r["kind"] == kind:
                    yield r


def key(name, file, line):
    return (name, file, line)


def path_key(path):
    return tuple(key(n, f, ln) for _, n, f, ln, _ in path)


def expected_contexts(events):
    """correlation id -> launch context (operator path, then the driver API frame), from the
    external-correlation and API records; graph node -> capture site, from the callbacks."""
    pushed = {r["correlation"]: path_key(r["path"]) for r in records(events, EXTERNAL)}
    corr = {}
    for r in records(events, API):
        base = pushed.get(r["correlation"], (key("<no launch context>", "", 0),))
        corr[r["correlation"]] = base + (key(re.sub(r"_v\d+$", "", r["name"]), "", 0),)
    graph = {}
    for ev in events:
        if ev["e"] == "graph_node":
            if ev["original"]:
                if ev["original"] in graph:
                    graph[ev["id"]] = graph[ev["original"]]
            elif "path" in ev:
                graph[ev["id"]] = path_key(ev["path"])
    return corr, graph


def node_key(node):
    return tuple(key(f.name, f.file, f.line) for f in node.path())


def kernel_nodes(prof):
    return [n for n in prof.nodes() if n.frame.kind == "kernel"]


@pytest.mark.parametrize("name", WORKLOADS)
def test_the_fixture_holds_launch_records(replayed, name):
    events, prof = replayed(f"{name}_records")
    assert any(ev["e"] == "launch_mode" and ev["launch"] == "records" for ev in events)
    # no launch callbacks: only syncs and graph launches come as callbacks
    apis = {re.sub(r"_v\d+$", "", ev["api"]) for ev in events if ev["e"] == "api"}
    assert not [a for a in apis if "Launch" in a and "Graph" not in a], apis
    assert sum(1 for _ in records(events, EXTERNAL)) > 0
    assert sum(1 for _ in records(events, API)) >= sum(
        1 for r in records(events, KERNEL) if not r["graph_node"]
    )


@pytest.mark.parametrize("name", WORKLOADS)
def test_total_gpu_time_and_every_kernel_under_its_operator(replayed, name):
    events, prof = replayed(f"{name}_records")
    kernels = list(records(events, KERNEL))
    assert prof.total("gpu_time") == pytest.approx(sum(r["end"] - r["start"] for r in kernels))
    assert prof.total("launches") == len(kernels)
    corr, graph = expected_contexts(events)
    want = defaultdict(float)
    for r in kernels:
        ctx = graph.get(r["graph_node"]) if r["graph_node"] else None
        want[ctx or corr[r["correlation"]]] += r["end"] - r["start"]
    got = defaultdict(float)
    for n in kernel_nodes(prof):
        got[node_key(n.parent)] += n.exclusive("gpu_time")
    assert dict(got) == pytest.approx(dict(want))
    # every kernel of the workload's own code ran inside an aten operator, so all are placed
    own = [ctx for ctx in want if ctx[0][0] != "<no launch context>"]
    assert own and sum(want[c] for c in own) == pytest.approx(sum(want.values()))
    assert all(any(f[0].startswith("aten::") for f in ctx) or ctx in graph.values() for ctx in own)


@pytest.mark.parametrize("name", WORKLOADS)
def test_same_operator_paths_as_with_launch_callbacks(replayed, name):
    """The two ways of taking a launch's context place the same kernels under the same Python,
    module and operator path (the API frame aside: the driver's in both)."""
    rec_events, rec = replayed(f"{name}_records")
    cb_events, cb = replayed(name)

    def placements(prof):
        out = set()
        for n in kernel_nodes(prof):
            # threads without a Python name are named by their id, which differs between runs
            path = tuple(
                ("thread", "", 0) if re.fullmatch(r"thread \d+", f[0]) else f
                for f in node_key(n.parent)
            )
            # up to the operator: the API frame and anything below the last aten frame differ
            ops = [i for i, f in enumerate(path) if f[0].startswith("aten::")]
            out.add((path[: ops[-1] + 1] if ops else path[:-1], n.frame.name))
        return out

    assert placements(rec) == placements(cb)


def test_graph_kernels_under_the_capture_site_with_launch_records(replayed):
    events, prof = replayed("graph_records")
    graph_kernels = [r for r in records(events, KERNEL) if r["graph_node"]]
    assert len(graph_kernels) >= 4 * 4
    replayed_time = sum(r["end"] - r["start"] for r in graph_kernels)
    under_capture = sum(
        n.exclusive("gpu_time")
        for n in kernel_nodes(prof)
        if any(f.name == "capture_model" for f in n.path())
    )
    assert under_capture >= replayed_time
    replay_sites = [n for n in prof.nodes() if n.exclusive("graph_kernel_time") > 0]
    assert replay_sites and all(
        any(f.name == "replay_model" for f in n.path()) for n in replay_sites
    )


@pytest.mark.parametrize("name", WORKLOADS)
def test_every_launch_is_accounted_for(replayed, name):
    events, prof = replayed(f"{name}_records")
    stats = json.loads(prof.meta["gpu_stats"])
    assert stats["dropped"] == 0
    assert stats["launches_received"] == stats["launches_expected"] > 0
    assert not [m for m in prof.notes if "produced no activity record" in m]


def test_a_kernel_whose_launch_record_comes_later_still_finds_it(tmp_path):
    """Kernel records can reach the buffer thread before their launch's API record: the fixture
    with every buffer's launch records moved into the next buffer places everything the same."""
    from deepcontext import reader as profile
    from gpu_replay import replay_to_profile

    events = load_events(os.path.join(DATA, "eager_records.jsonl"))
    late, carried = [], []
    for ev in events:
        if ev["e"] != "buffer":
            late.append(ev)
            continue
        launch = [r for r in ev["records"] if r["kind"] in (EXTERNAL, API)]
        rest = [r for r in ev["records"] if r["kind"] not in (EXTERNAL, API)]
        late.append({**ev, "records": rest + carried})
        carried = launch
    if carried:
        late.append({"e": "buffer", "dropped": 0, "records": carried})
    src, out = tmp_path / "late.jsonl", tmp_path / "late.dctx"
    src.write_text("".join(json.dumps(ev) + "\n" for ev in late))
    replay_to_profile(str(src), str(out))
    prof = profile.load(out)
    corr, graph = expected_contexts(events)
    want = defaultdict(float)
    for r in records(events, KERNEL):
        want[
            (graph.get(r["graph_node"]) if r["graph_node"] else None) or corr[r["correlation"]]
        ] += r["end"] - r["start"]
    got = defaultdict(float)
    for n in kernel_nodes(prof):
        got[node_key(n.parent)] += n.exclusive("gpu_time")
    assert dict(got) == pytest.approx(dict(want))
