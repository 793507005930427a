"""The GPU layer's buffer processing on real CUPTI traffic recorded on an H200
(tests/data/gpu/*.jsonl, captured by capture_fixtures.py), replayed without a GPU through the same
C++ code the tracer runs, into a real profile. Expectations are computed here from the raw records.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections import defaultdict

import pytest
from gpu_replay import DATA, HERE, load_events, replay_to_profile

FIXTURES = ("eager", "graph", "threads")
SYNC_APIS = re.compile(
    r"^(cudaDeviceSynchronize|cudaStreamSynchronize|cudaEventSynchronize|"
    r"cuCtxSynchronize|cuStreamSynchronize|cuEventSynchronize)"
)


def api_name(cupti_name: str) -> str:
    return re.sub(r"_v\d+$", "", cupti_name)


def frame_key(name, file, line):
    return (name, file, line)


def expected_contexts(events):
    """Per kernel/memcpy/memset record: the launch context path (frame keys, API frame last),
    worked out from the recorded callbacks alone."""
    depth = defaultdict(int)
    current: dict[int, tuple] = {}
    corr: dict[int, tuple] = {}
    graph: dict[int, tuple] = {}
    for ev in events:
        e = ev["e"]
        if e == "api":
            tid = ev["tid"]
            if depth[tid] == 0:
                path = tuple(frame_key(n, f, ln) for _, n, f, ln, _ in ev["path"])
                current[tid] = path + (frame_key(api_name(ev["api"]), "", 0),)
            depth[tid] += 1
            corr[ev["corr"]] = current[tid]
        elif e == "exit":
            depth[ev["tid"]] = max(0, depth[ev["tid"]] - 1)
        elif e == "graph_node":
            if ev["original"]:
                if ev["original"] in graph:
                    graph[ev["id"]] = graph[ev["original"]]
            elif "path" in ev:
                graph[ev["id"]] = tuple(frame_key(n, f, ln) for _, n, f, ln, _ in ev["path"])
            else:
                graph[ev["id"]] = current[ev["tid"]]
    return corr, graph


def records(events, kind=None):
    for ev in events:
        if ev["e"] == "buffer":
            for r in ev["records"]:
                if kind is None or r["kind"] == kind:
                    yield r


def node_key(node):
    return tuple(frame_key(f.name, f.file, f.line) for f in node.path())


def kernel_nodes(prof):
    return [n for n in prof.nodes() if n.frame.kind == "kernel"]


@pytest.mark.parametrize("name", FIXTURES)
def test_total_gpu_time_is_the_sum_of_kernel_records(replayed, name):
    events, prof = replayed(name)
    expected = sum(r["end"] - r["start"] for r in records(events, 1))
    assert expected > 0
    assert prof.total("gpu_time") == pytest.approx(expected, rel=1e-9)
    assert prof.total("launches") == sum(1 for _ in records(events, 1))


@pytest.mark.parametrize("name", FIXTURES)
def test_every_kernel_sits_under_its_launch_context(replayed, name):
    events, prof = replayed(name)
    corr, graph = expected_contexts(events)
    want = defaultdict(float)
    for r in records(events, 1):
        ctx = graph.get(r["graph_node"]) if r["graph_node"] else None
        want[ctx or corr[r["correlation"]]] += r["end"] - r["start"]
    got = defaultdict(float)
    for n in kernel_nodes(prof):
        got[node_key(n.parent)] += n.exclusive("gpu_time")
    assert dict(got) == pytest.approx(dict(want))
    # The launch contexts are full paths: on the program's own threads, the workload's source
    # lines are in every one (autograd threads depend on the torch layer's backward placement).
    own = [key for key in want if not key[0][0].startswith("thread ")]
    assert own and all(any(f[1].endswith(f"{name}.py") for f in key) for key in own)


def test_graph_kernels_are_under_the_capture_site_and_the_replay_site_is_recorded(replayed):
    events, prof = replayed("graph")
    graph_kernels = [r for r in records(events, 1) if r["graph_node"]]
    assert len(graph_kernels) >= 4 * 4  # 4 replays of a graph of at least 4 kernels
    replayed_time = sum(r["end"] - r["start"] for r in graph_kernels)
    under_capture = sum(
        n.exclusive("gpu_time")
        for n in kernel_nodes(prof)
        if any(f.name == "capture_model" for f in n.path())
    )
    # Warm-up kernels also run inside capture_model, eagerly; the replayed ones are on top.
    assert under_capture >= replayed_time
    replay_sites = [n for n in prof.nodes() if n.exclusive("graph_kernel_time") > 0]
    assert replay_sites and all(
        any(f.name == "replay_model" for f in n.path()) for n in replay_sites
    )
    assert sum(n.exclusive("graph_kernel_time") for n in replay_sites) == pytest.approx(
        replayed_time
    )
    stats = json.loads(prof.meta["gpu_stats"])
    assert stats["graph_kernels"] == len(graph_kernels)


def test_interleaved_threads_and_streams_never_swap_contexts(replayed):
    events, prof = replayed("threads")
    streams = {r["stream"] for r in records(events, 1)}
    assert len(streams) >= 2
    adds = matmul = 0
    for n in kernel_nodes(prof):
        names = {f.name for f in n.path()}
        if "worker_add" in names:
            assert "gemm" not in n.frame.name, n.frame.name
            adds += "add" in n.frame.name
        if "worker_matmul" in names:
            assert "CUDAFunctor_add" not in n.frame.name
            matmul += 1
    assert adds and matmul


def test_memcpy_bytes_by_direction_and_host_memory(replayed):
    events, prof = replayed("eager")
    names = {1: "memcpy HtoD", 2: "memcpy DtoH", 8: "memcpy DtoD"}
    want = defaultdict(float)
    for r in records(events, 2):
        name = names.get(r["copy_kind"], "memcpy")
        host = r["src_kind"] if r["copy_kind"] == 1 else r["dst_kind"] if r["copy_kind"] == 2 else 0
        name += {1: " (pageable)", 2: " (pinned)"}.get(host, "")
        want[name] += r["bytes"]
    got = defaultdict(float)
    for n in prof.nodes():
        if n.frame.kind == "memcpy":
            got[n.frame.name] += n.exclusive("memcpy_bytes")
    assert dict(got) == pytest.approx(dict(want))
    assert "memcpy HtoD (pageable)" in got and "memcpy HtoD (pinned)" in got


def test_memset_under_the_user_call(replayed):
    events, prof = replayed("eager")
    sets = list(records(events, 3))
    assert sets
    nodes = [n for n in prof.nodes() if n.frame.kind == "memset"]
    assert sum(n.exclusive("memset_bytes") for n in nodes) == sum(r["bytes"] for r in sets)
    assert any(any(f.name == "clear_with_memset" for f in n.path()) for n in nodes)


def test_sync_time_is_the_time_spent_in_sync_calls(replayed):
    events, prof = replayed("eager")
    depth = defaultdict(int)
    open_sync: dict[int, int] = {}
    total = 0
    for ev in events:
        if ev["e"] == "api":
            if depth[ev["tid"]] == 0 and SYNC_APIS.match(api_name(ev["api"])):
                open_sync[ev["tid"]] = ev["t"]
            depth[ev["tid"]] += 1
        elif ev["e"] == "exit":
            depth[ev["tid"]] -= 1
            if depth[ev["tid"]] == 0 and ev["tid"] in open_sync:
                total += ev["t"] - open_sync.pop(ev["tid"])
    assert total > 0
    assert prof.total("sync_time") == pytest.approx(total)
    assert all(n.frame.kind == "sync" for n in prof.nodes() if n.exclusive("sync_time") > 0)


@pytest.mark.parametrize("name", FIXTURES)
def test_idle_time_is_the_gaps_between_kernels(replayed, name):
    events, prof = replayed(name)
    idle = 0
    busy = 0
    for r in sorted(records(events, 1), key=lambda r: r["start"]):
        if busy and r["start"] > busy:
            idle += r["start"] - busy
        busy = max(busy, r["end"])
    devices = json.loads(prof.meta["gpu_devices"])
    assert sum(d["idle_ns"] for d in devices) == pytest.approx(idle, rel=1e-6, abs=1)
    assert prof.total("gpu_idle_time") == pytest.approx(idle, rel=1e-6, abs=1)


def test_device_metadata_and_occupancy(replayed):
    events, prof = replayed("eager")
    (dev,) = json.loads(prof.meta["gpu_devices"])
    recorded = next(ev for ev in events if ev["e"] == "device")
    assert dev["name"] == recorded["name"] and dev["sm_count"] == recorded["sm_count"] > 0
    for n in kernel_nodes(prof):
        occ = float(n.props["theoretical_occupancy"])
        assert 0 < occ <= 1, (n.frame.name, n.props)
        st = n.stats("occupancy")
        assert st["count"] == n.exclusive("launches") and st["max"] <= 1
        assert re.fullmatch(r"\(\d+, \d+, \d+\)", n.props["grid"])


@pytest.mark.parametrize("name", FIXTURES)
def test_counters_show_every_launch_received(replayed, name):
    events, prof = replayed(name)
    stats = json.loads(prof.meta["gpu_stats"])
    assert stats["unattributed"] == 0 and stats["dropped"] == 0
    assert stats["launches_received"] == stats["launches_expected"] > 0
    assert not [m for m in prof.notes if "GPU" in m or "CUPTI" in m or "kernel" in m]


def test_lost_context_and_dropped_records_are_counted_and_noted(tmp_path):
    from deepcontext import reader as profile

    events = load_events(os.path.join(DATA, "eager.jsonl"))
    kernels = list(records(events, 1))
    lost = {kernels[0]["correlation"], kernels[1]["correlation"]}
    damaged = [ev for ev in events if not (ev["e"] == "api" and ev["corr"] in lost)]
    next(ev for ev in damaged if ev["e"] == "buffer")["dropped"] = 7
    src, out = tmp_path / "damaged.jsonl", tmp_path / "damaged.dctx"
    src.write_text("".join(json.dumps(ev) + "\n" for ev in damaged))
    replay_to_profile(str(src), str(out))
    prof = profile.load(out)
    stats = json.loads(prof.meta["gpu_stats"])
    assert stats["unattributed"] == 2 and stats["dropped"] == 7
    assert prof.total("gpu_time") == pytest.approx(sum(r["end"] - r["start"] for r in kernels))
    (orphans,) = prof.find("<no launch context>")
    assert orphans.inclusive("launches") == 2
    notes = prof.notes
    assert any("dropped 7" in m for m in notes) and any(
        "2 GPU activity records" in m for m in notes
    )


def test_cuda_graphs_option_reaches_the_tracer(tmp_path):
    """--cuda-graphs graph is read by the tracer from DEEPCONTEXT_CUPTI_GRAPHS at its start
    (graph-level CUPTI records must be on before any graph launches); a bad value is one line."""
    script = tmp_path / "g.py"
    script.write_text("import os, torch\nprint(os.environ.get('DEEPCONTEXT_CUPTI_GRAPHS'))\n")
    cmd = [sys.executable, "-m", "deepcontext", "run", "-q", "-o", str(tmp_path / "g.dctx")]
    res = subprocess.run(
        [*cmd, "--cuda-graphs", "graph", str(script)], capture_output=True, text=True
    )
    assert res.returncode == 0, res.stderr
    assert res.stdout.split() == ["graph"]
    res = subprocess.run(
        [*cmd, "--cuda-graphs", "nodes", str(script)], capture_output=True, text=True
    )
    assert res.returncode != 0 and "invalid choice: 'nodes'" in res.stderr


def test_gpu_tracing_of_jax_is_sampled_by_default(tmp_path):
    """The GPU tracing starts when the first GPU framework is imported: sampled when that is JAX
    (XLA's command buffers cost a launch-bound step 1.55x with every graph node traced, 1.11x
    sampled: H100, docs/benchmarks.md), per node for torch; --cuda-graphs reaches the tracer."""
    cmd = [sys.executable, "-m", "deepcontext", "run", "-q", "-o", str(tmp_path / "j.dctx")]
    shown = "import os, sys\nprint(os.environ.get('DEEPCONTEXT_CUPTI_GRAPHS'))\n"
    for imports, extra, want in (
        ("jax", [], "sample"),
        ("torch", [], "None"),
        ("jax", ["--cuda-graphs", "node"], "node"),
    ):
        script = tmp_path / f"{imports}_{len(extra)}.py"
        script.write_text(f"import {imports}\n" + shown)
        env = {k: v for k, v in os.environ.items() if k != "DEEPCONTEXT_CUPTI_GRAPHS"}
        res = subprocess.run([*cmd, *extra, str(script)], capture_output=True, text=True, env=env)
        assert res.returncode == 0, res.stderr
        assert res.stdout.split()[-1:] == [want], (imports, extra, res.stdout)


def test_without_a_driver_cpu_profiling_goes_on_with_one_line(tmp_path):
    if os.path.exists("/dev/nvidiactl"):
        pytest.skip("this machine has an NVIDIA driver")
    script = tmp_path / "cpu.py"
    script.write_text("import torch\nprint(sum(range(10**5)))\n")
    out = tmp_path / "cpu.dctx"
    res = subprocess.run(
        [sys.executable, "-m", "deepcontext", "run", "-o", str(out), str(script)],
        capture_output=True,
        text=True,
        cwd=HERE,
    )
    assert res.returncode == 0, res.stderr
    lines = [ln for ln in res.stderr.splitlines() if "GPU metrics off" in ln]
    assert len(lines) == 1 and "driver" in lines[0]
    from deepcontext import reader as profile

    assert any("GPU metrics off" in m for m in profile.load(out).notes)


def driver_only(events):
    """The recorded stream as the tracer sees it with DEEPCONTEXT_CUPTI_API_DOMAINS=driver: the
    runtime's callbacks are gone and the driver call inside each runtime call is the outermost,
    taking the launch context there (recorded only at the outermost call)."""
    out, stacks = [], defaultdict(list)
    for ev in events:
        e = ev["e"]
        if e == "api":
            stack = stacks[ev["tid"]]
            if ev["domain"] == 2:  # runtime: dropped, its context handed to the call inside
                stack.append(("dropped", ev.get("path")))
                continue
            ev = dict(ev)
            if stack and stack[-1][0] == "dropped" and stack[-1][1] is not None:
                ev["path"] = stack[-1][1]
                stack[-1] = ("dropped", None)
            stack.append(("kept", None))
        elif e == "exit":
            stack = stacks[ev["tid"]]
            if stack and stack.pop()[0] == "dropped":
                continue
        out.append(ev)
    return out


@pytest.mark.parametrize("name", FIXTURES)
def test_driver_callbacks_alone_attribute_every_kernel(tmp_path, name):
    """Each runtime call reached the driver under its own correlation id (CUPTI 13 on the H200),
    so driver callbacks alone place every kernel, under the same Python and operator path."""
    from deepcontext import reader as profile

    events = load_events(os.path.join(DATA, f"{name}.jsonl"))
    runtime = {(ev["tid"], ev["corr"]) for ev in events if ev["e"] == "api" and ev["domain"] == 2}
    driver = {(ev["tid"], ev["corr"]) for ev in events if ev["e"] == "api" and ev["domain"] == 1}
    assert runtime and runtime <= driver
    stream = driver_only(events)
    src = tmp_path / f"{name}-driver.jsonl"
    src.write_text("".join(json.dumps(ev) + "\n" for ev in stream))
    out = str(tmp_path / f"{name}-driver.dctx")
    replay_to_profile(str(src), out)
    prof = profile.load(out)
    assert prof.total("launches") == sum(1 for _ in records(events, 1))
    corr, graph = expected_contexts(stream)
    corr_all, graph_all = expected_contexts(events)
    want = defaultdict(float)
    for r in records(events, 1):
        ctx = graph.get(r["graph_node"]) if r["graph_node"] else None
        ctx = ctx or corr[r["correlation"]]
        full = (graph_all.get(r["graph_node"]) if r["graph_node"] else None) or corr_all[
            r["correlation"]
        ]
        assert ctx[:-1] == full[:-1]  # the same path; only the API frame is the driver's
        want[ctx] += r["end"] - r["start"]
    got = defaultdict(float)
    for n in kernel_nodes(prof):
        got[node_key(n.parent)] += n.exclusive("gpu_time")
    assert dict(got) == pytest.approx(dict(want))


def _graph_level(events, calibrated_launches):
    """The graph fixture as CUPTI delivers it once graph-level tracing is on: launches after the
    first calibrated_launches are one whole-graph record (kind 4) each, spanning their kernels."""
    launches = sorted({r["correlation"] for r in records(events, 1) if r["graph_node"]})
    whole = set(launches[calibrated_launches:])
    out = []
    for ev in events:
        if ev["e"] != "buffer":
            out.append(ev)
            continue
        kept, spans = [], {}
        for r in ev["records"]:
            if r["kind"] == 1 and r["graph_node"] and r["correlation"] in whole:
                s = spans.setdefault(r["correlation"], dict(r, kind=4, graph_node=0, name=""))
                s["start"], s["end"] = min(s["start"], r["start"]), max(s["end"], r["end"])
            else:
                kept.append(r)
        out.append(dict(ev, records=kept + list(spans.values())))
    return out, launches


def _replay_events(events, tmp_path, name):
    from deepcontext import reader as profile

    src, out = tmp_path / f"{name}.jsonl", tmp_path / f"{name}.dctx"
    src.write_text("".join(json.dumps(ev) + "\n" for ev in events))
    replay_to_profile(str(src), str(out))
    return profile.load(str(out))


def test_whole_graph_records_are_split_by_the_measured_kernel_times(replayed, tmp_path):
    events, truth = replayed("graph")
    derived, launches = _graph_level(events, calibrated_launches=1)
    prof = _replay_events(derived, tmp_path, "graph-level")
    graph_kernels = [r for r in records(events, 1) if r["graph_node"]]
    first = [r for r in graph_kernels if r["correlation"] == launches[0]]
    first_span = max(r["end"] for r in first) - min(r["start"] for r in first)
    spans = [r["end"] - r["start"] for r in records(derived, 4)]
    assert len(spans) == len(launches) - 1
    # Expected from the raw records: launch 1 as measured, later launches split by launch 1's
    # share of its span.
    want = sum((r["end"] - r["start"]) * (1 + sum(spans) / first_span) for r in first)
    under_capture = {
        node_key(n): n.exclusive("gpu_time")
        for n in kernel_nodes(prof)
        if any(f.name == "capture_model" for f in n.path())
    }
    truth_capture = {
        node_key(n): n.exclusive("gpu_time")
        for n in kernel_nodes(truth)
        if any(f.name == "capture_model" for f in n.path())
    }
    assert under_capture.keys() == truth_capture.keys()
    # The replays run the same kernels (each within 4 % of the others): the split is within 5 %
    # of what each kernel context measured when every kernel had its own record.
    assert under_capture == pytest.approx(truth_capture, rel=0.05)
    replayed_truth = sum(r["end"] - r["start"] for r in graph_kernels)
    stats = json.loads(prof.meta["gpu_stats"])
    assert stats["graph_launches_timed"] == len(launches) - 1
    replay_sites = [n for n in prof.nodes() if n.exclusive("graph_kernel_time") > 0]
    assert replay_sites and all(
        any(f.name == "replay_model" for f in n.path()) for n in replay_sites
    )
    assert sum(n.exclusive("graph_kernel_time") for n in replay_sites) == pytest.approx(
        want, rel=1e-9
    )
    assert want == pytest.approx(replayed_truth, rel=0.03)
    # Launch counts stay whole: each kernel once per launch.
    for n in kernel_nodes(prof):
        if any(f.name == "capture_model" for f in n.path()):
            t = next(m for m in kernel_nodes(truth) if node_key(m) == node_key(n))
            assert n.exclusive("launches") == pytest.approx(t.exclusive("launches"))
    assert any("timed whole" in note for note in json.loads(prof.meta["notes"]))


def test_whole_graph_records_before_any_kernel_was_measured_stay_at_the_launch(replayed, tmp_path):
    events, _ = replayed("graph")
    derived, launches = _graph_level(events, calibrated_launches=0)
    prof = _replay_events(derived, tmp_path, "graph-uncalibrated")
    spans = sum(r["end"] - r["start"] for r in records(derived, 4))
    graphs = [n for n in prof.nodes() if "kernels not traced one by one" in n.frame.name]
    assert len(graphs) == 1
    assert graphs[0].exclusive("gpu_time") == pytest.approx(spans)
    assert graphs[0].exclusive("launches") == len(launches)
    assert any(f.name == "replay_model" for f in graphs[0].path())
    stats = json.loads(prof.meta["gpu_stats"])
    assert stats["graph_launches_uncalibrated"] == len(launches)


def _windowed(events, scale):
    """The recorded traffic with two sampling windows (--cuda-graphs sample): the first from
    before any record to a moment inside a kernel (that kernel is cut by the edge), the second
    from 60 % to 80 % of the records' span; the run ends after the last record. The marks come
    after every launch call, so no window saw a launch and weights go by time. Returns (events,
    windows as (open, close, weight), the cut kernel)."""
    kernels = sorted(records(events, 1), key=lambda r: r["start"])
    t0 = kernels[0]["start"] - 1
    end = max(r["end"] for r in kernels) + 1
    span = end - t0
    cut = next(r for r in kernels if r["start"] > t0 + 0.4 * span and r["end"] > r["start"] + 1)
    t1 = (cut["start"] + cut["end"]) // 2
    t2 = max(t0 + int(0.6 * span), cut["end"] + 1)
    t3 = t2 + int(0.2 * span)
    # Each window stands for the time from its opening to the next one's (or the run's end).
    windows = [(t0, t1, (t2 - t0) / (t1 - t0)), (t2, t3, (end - t2) / (t3 - t2))]
    marks = [
        {"e": "window", "open": 1, "t": t0, "scale": scale},
        {"e": "window", "open": 0, "t": t1, "scale": scale},
        {"e": "window", "open": 1, "t": t2, "scale": scale},
        {"e": "window", "open": 0, "t": t3, "scale": scale},
    ]
    first_buffer = next(i for i, ev in enumerate(events) if ev["e"] == "buffer")
    last = {"e": "window", "open": 0, "t": end, "scale": 0}  # the end of the run
    return events[:first_buffer] + marks + events[first_buffer:] + [last], windows, cut


@pytest.mark.parametrize("name", ("graph", "eager"))
def test_sampled_records_count_inside_their_window_and_weigh_its_period(replayed, tmp_path, name):
    events, _ = replayed(name)
    derived, windows, cut = _windowed(events, scale=10)
    prof = _replay_events(derived, tmp_path, f"sampled-{name}")

    def weight(r):
        for a, b, w in windows:
            if a <= r["start"] and max(r["start"], r["end"]) <= b:
                return w
        return 0

    kernels = list(records(events, 1))
    kept = [r for r in kernels if weight(r)]
    assert cut not in kept and 0 < len(kept) < len(kernels)
    want = sum(weight(r) * max(0, r["end"] - r["start"]) for r in kept)
    assert prof.total("gpu_time") == pytest.approx(want, rel=1e-9)
    assert sum(n.exclusive("launches") for n in kernel_nodes(prof)) == pytest.approx(
        sum(weight(r) for r in kept)
    )
    others = [r for r in records(events) if r["kind"] in (1, 2, 3) and not weight(r)]
    stats = json.loads(prof.meta["gpu_stats"])
    assert stats["outside_windows"] == len(others) > 0
    # Idle time: gaps between kernels of one window only, weighted like the records.
    idle = 0
    for a, b, w in windows:
        busy = 0
        for r in sorted((r for r in kept if a <= r["start"] <= b), key=lambda r: r["start"]):
            if busy and r["start"] > busy:
                idle += w * (r["start"] - busy)
            busy = max(busy, r["end"])
    assert prof.total("gpu_idle_time") == pytest.approx(idle, rel=1e-6, abs=1)
    assert any("sampling windows" in note for note in prof.notes)
    assert not any("produced no activity record" in note for note in prof.notes)
    # The analyzer says its GPU numbers are estimates.
    from deepcontext.analyzer import analyze
    from deepcontext.analyzer.report import render_text

    analysis = analyze(prof.path)
    assert analysis.to_dict()["meta"]["gpu_sampling_windows"] == "2"
    assert "GPU activity was sampled (2 windows" in render_text(analysis)


def test_windows_that_saw_launches_weigh_the_launches_they_stand_for(replayed, tmp_path):
    """Tracing slows the launches made inside a window, so a window stands for the launches from
    its opening to the next one's over those it saw: the weighted launch count is the launches
    made, whatever the windows' lengths in time."""
    events, truth = replayed("eager")
    # The outermost launch calls (a runtime launch nests its driver call) in order, with the
    # correlation ids of their nest (a kernel record carries one of them).
    depth, outer, launches = {}, {}, []
    for i, ev in enumerate(events):
        if ev["e"] == "api":
            tid = ev["tid"]
            if depth.get(tid, 0) == 0:
                outer[tid] = len(launches) if "Launch" in ev["api"] else None
                if outer[tid] is not None:
                    launches.append((i, set()))
            if outer[tid] is not None:
                launches[outer[tid]][1].add(ev["corr"])
            depth[tid] = depth.get(tid, 0) + 1
        elif ev["e"] == "exit":
            depth[ev["tid"]] -= 1
    n = len(launches)
    assert n == json.loads(truth.meta["gpu_stats"])["launches_expected"] > 8
    by_corr = {r["correlation"]: r for r in records(events, 1)}
    kernel = [next(by_corr[c] for c in corrs if c in by_corr) for _, corrs in launches]
    a, b, c = n // 4, n // 2, 3 * n // 4
    # Window 1 traces launches [0, a), window 2 [b, c); the kernels run on one stream, in order.
    marks = {
        launches[0][0]: {"open": 1, "t": kernel[0]["start"]},
        launches[a][0]: {"open": 0, "t": kernel[a - 1]["end"]},
        launches[b][0]: {"open": 1, "t": kernel[b]["start"]},
        launches[c][0]: {"open": 0, "t": kernel[c - 1]["end"]},
    }
    derived = []
    for i, ev in enumerate(events):
        if i in marks:
            derived.append({"e": "window", "scale": 10, **marks[i]})
        derived.append(ev)
    end = max(r["end"] for r in records(events)) + 1
    derived.append({"e": "window", "open": 0, "t": end, "scale": 0})
    prof = _replay_events(derived, tmp_path, "sampled-launches")

    w1, w2 = b / a, (n - b) / (c - b)
    want = w1 * sum(k["end"] - k["start"] for k in kernel[:a])
    want += w2 * sum(k["end"] - k["start"] for k in kernel[b:c])
    assert prof.total("gpu_time") == pytest.approx(want, rel=1e-9)
    assert sum(nd.exclusive("launches") for nd in kernel_nodes(prof)) == pytest.approx(n)
    assert json.loads(prof.meta["gpu_stats"])["launch_calls"] == n
    # Not the wall-time weights: the fixture's launches are not evenly spread in time.
    by_time = (kernel[b]["start"] - kernel[0]["start"]) / (
        kernel[a - 1]["end"] - kernel[0]["start"]
    )
    assert abs(by_time - w1) > 0.05 * w1


def test_sampling_windows_count_graph_launches(replayed):
    """The windows' unit is a launch call, of a kernel or of a graph (a JAX step is one or a few
    graph launches of XLA's command buffers); launches captured into a graph launch nothing."""
    events, prof = replayed("graph")
    depth, calls, graphs, nest = {}, 0, 0, {}
    for ev in events:
        tid = ev.get("tid")
        if ev["e"] == "api":
            if depth.get(tid, 0) == 0:
                nest[tid] = {"launch": "Launch" in ev["api"], "graph": "Graph" in ev["api"]}
                nest[tid]["captured"] = False
            depth[tid] = depth.get(tid, 0) + 1
        elif ev["e"] == "graph_node" and depth.get(tid, 0) > 0:
            nest[tid]["captured"] = True
        elif ev["e"] == "exit":
            depth[tid] -= 1
            if depth[tid] == 0 and nest[tid]["launch"] and not nest[tid]["captured"]:
                calls += 1
                graphs += nest[tid]["graph"]
    stats = json.loads(prof.meta["gpu_stats"])
    assert graphs == 4
    assert stats["launch_calls"] == calls == stats["launches_expected"] + graphs


def test_graph_node_records_weigh_graph_launches(replayed, tmp_path):
    """A record weighs the launch calls of its own kind: a window that opens on setup work sees
    kernel launches (XLA's autotuning, the model's first copies) in proportions the steps do not
    repeat. Graph fixture: window 1 holds every eager launch and the first of 4 graph launches,
    window 2 the last; the first graph launch's kernels stand for 3 graph launches, the eager
    kernels for themselves."""
    events, truth = replayed("graph")
    recs = list(records(events, 1))
    graph_apis = [
        i for i, ev in enumerate(events) if ev["e"] == "api" and ev["api"] == "cudaGraphLaunch"
    ]
    corrs = [events[i]["corr"] for i in graph_apis]
    assert len(corrs) == 4
    of = {c: [r for r in recs if r["correlation"] == c] for c in corrs}
    plain = [r for r in recs if r["graph_node"] == 0]
    t0 = min(r["start"] for r in events[-1]["records"] if r["start"] > 0) - 1
    marks = {
        0: {"open": 1, "t": t0},
        graph_apis[1]: {"open": 0, "t": max(r["end"] for r in of[corrs[0]]) + 1},
        graph_apis[3]: {"open": 1, "t": min(r["start"] for r in of[corrs[3]]) - 1},
    }
    derived = []
    for i, ev in enumerate(events):
        if i in marks:
            derived.append({"e": "window", "scale": 10, **marks[i]})
        derived.append(ev)
    end = max(r["end"] for r in recs) + 1
    derived.append({"e": "window", "open": 0, "t": end, "scale": 0})
    prof = _replay_events(derived, tmp_path, "sampled-graph-kinds")

    def time(rs):
        return sum(r["end"] - r["start"] for r in rs)

    want = time(plain) + 3 * time(of[corrs[0]]) + time(of[corrs[3]])
    assert prof.total("gpu_time") == pytest.approx(want, rel=1e-9)
    # both kinds counted together would weigh all of window 1 (eager + 3) / (eager + 1) launches
    eager = json.loads(truth.meta["gpu_stats"])["launches_expected"]
    both = (eager + 3) / (eager + 1) * (time(plain) + time(of[corrs[0]])) + time(of[corrs[3]])
    assert abs(both - want) > 0.05 * want


def test_a_run_shorter_than_its_first_window_is_weighted_one(replayed, tmp_path):
    """Sampling that never closed a window traced everything: weight 1, the plain totals."""
    events, truth = replayed("eager")
    kernels = list(records(events, 1))
    first_buffer = next(i for i, ev in enumerate(events) if ev["e"] == "buffer")
    t0 = min(r["start"] for r in kernels) - 1
    end = max(r["end"] for r in kernels) + 1
    derived = (
        events[:first_buffer]
        + [{"e": "window", "open": 1, "t": t0, "scale": 10}]
        + events[first_buffer:]
        + [{"e": "window", "open": 0, "t": end, "scale": 0}]
    )
    prof = _replay_events(derived, tmp_path, "sampled-short")
    assert prof.total("gpu_time") == pytest.approx(truth.total("gpu_time"), rel=1e-9)
    assert prof.total("gpu_idle_time") == pytest.approx(truth.total("gpu_idle_time"), rel=1e-9)


def test_step_spans_weigh_sampled_steps_and_keep_the_first_steps_whole(tmp_path):
    """tests/data/gpu/steps.jsonl: 60 AdamW steps recorded with step-sampled tracing on the GPU
    machine (tests/gpu/workloads/steps.py); steps.meta.json: what its schedule decided."""
    from deepcontext import reader as profile

    if not os.path.exists(os.path.join(DATA, "steps.jsonl")):
        pytest.skip("steps.jsonl not captured yet (scripts/gpu-check.sh STEPS='build fixtures')")
    events = load_events(os.path.join(DATA, "steps.jsonl"))
    with open(os.path.join(DATA, "steps.meta.json")) as f:
        meta = json.load(f)
    weight = float(meta["trace_weight"])
    out = tmp_path / "steps.dctx"
    replay_to_profile(os.path.join(DATA, "steps.jsonl"), str(out), weight)
    prof = profile.load(out)
    # each launch's span mode, in the order the tracer saw them
    mode, span, mode_of, span_of, spans = 1, 0, {}, {}, []
    for ev in events:
        if ev["e"] == "span":
            mode = ev["mode"]
            spans.append(mode)
            span += 1
        elif ev["e"] == "api":
            mode_of[ev["corr"]], span_of[ev["corr"]] = mode, span
    assert spans.count(2) >= 1 and spans.count(0) >= 1  # sampled steps and untraced ones
    kernels = list(records(events, 1))
    # only traced steps delivered records, each with its launch's context
    assert kernels and all(r["correlation"] in mode_of for r in kernels)
    assert {mode_of[r["correlation"]] for r in kernels} == {1, 2}
    want = sum(
        (weight if mode_of[r["correlation"]] == 2 else 1) * (r["end"] - r["start"]) for r in kernels
    )
    assert prof.total("gpu_time") == pytest.approx(want, rel=1e-9)
    # idle time: gaps between kernels of one span only
    idle = 0.0
    by_span = defaultdict(list)
    for r in kernels:
        by_span[span_of[r["correlation"]]].append(r)
    for rs in by_span.values():
        busy = 0
        w = weight if mode_of[rs[0]["correlation"]] == 2 else 1
        for r in sorted(rs, key=lambda r: r["start"]):
            if busy and r["start"] > busy:
                idle += w * (r["start"] - busy)
            busy = max(busy, r["end"])
    assert prof.total("gpu_idle_time") == pytest.approx(idle, rel=1e-6, abs=1)
    stats = json.loads(prof.meta["gpu_stats"])
    assert stats["unattributed"] == 0
    assert stats["sampled_gpu_time_ns"] > 0
