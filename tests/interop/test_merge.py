"""`deepcontext merge` on four real processes of one job, one of them a straggler: sums equal the
per-input sums path by path, the statistics across inputs are right, the straggler's imbalance is
visible, the inputs' metadata is kept."""

from __future__ import annotations

import json
import re
import shutil
import sqlite3
import subprocess
from pathlib import Path

import numpy as np
import pytest
from deepcontext import merge
from deepcontext.merge import merge_files
from deepcontext.reader import load
from deepcontext.writer import ProfileWriter, meta_json

from .conftest import cli


def by_path(path: Path, metric: str) -> dict[tuple, tuple[float, float]]:
    """Per call path (frames from the root): (inclusive, exclusive), duplicate paths added."""
    p = load(path)
    out: dict[tuple, list[float]] = {}
    for n in p.nodes():
        if n.id == 0:
            key: tuple = ()
        else:
            key = tuple(n.path())
        v = out.setdefault(key, [0.0, 0.0])
        v[0] += n.inclusive(metric)
        v[1] += n.exclusive(metric)
    return {k: (v[0], v[1]) for k, v in out.items()}


@pytest.fixture(scope="module")
def merged(job_profiles, tmp_path_factory) -> tuple[Path, str]:
    out = tmp_path_factory.mktemp("merged") / "job.dctx"
    r = cli("merge", *job_profiles, "-o", out)  # with its progress bar (on stderr)
    assert f"merged {len(job_profiles)} profiles" in r.stderr
    return out, r.stderr


def test_sums_equal_per_input_sums(job_profiles, merged):
    out, _ = merged
    m = load(out)
    inputs = [load(p) for p in job_profiles]
    for metric in ("cpu_time", "wall_time", "samples"):
        assert m.total(metric) == sum(p.total(metric) for p in inputs), metric
        want: dict[tuple, list[float]] = {}
        for path in job_profiles:
            for key, (inc, exc) in by_path(path, metric).items():
                w = want.setdefault(key, [0.0, 0.0])
                w[0] += inc
                w[1] += exc
        got = by_path(out, metric)
        for key, (inc, exc) in want.items():
            if inc == 0 and exc == 0:
                continue
            assert got[key] == (inc, exc), (metric, key)
        assert all(v == (0.0, 0.0) or k in want for k, v in got.items())


def test_statistics_across_inputs(job_profiles, merged):
    out, _ = merged
    m = load(out)
    inputs = [load(p) for p in job_profiles]
    per_input = np.array([p.total("cpu_time") for p in inputs])
    root = m.root
    assert root.inclusive("cpu_time:mean") == pytest.approx(per_input.mean(), rel=1e-12)
    assert root.inclusive("cpu_time:min") == per_input.min()
    assert root.inclusive("cpu_time:max") == per_input.max()
    assert root.inclusive("cpu_time:std") == pytest.approx(per_input.std(), rel=1e-9)
    assert root.inclusive("cpu_time:imbalance") == pytest.approx(
        per_input.max() / per_input.mean(), rel=1e-12
    )
    assert m.metrics["cpu_time:imbalance"].unit == "ratio"
    assert json.loads(m.meta["merged_totals"])["cpu_time"] == per_input.tolist()


def test_straggler_imbalance_visible(job_profiles, merged):
    out, _ = merged
    m = load(out)
    straggler = load(job_profiles[2])
    hot = [n for n in m.nodes() if n.frame.name == "straggle"]
    assert hot, "the straggler's extra function is in the merged tree"
    node = max(hot, key=lambda n: n.inclusive("cpu_time"))
    # only one of four inputs ran it: max/mean is 4
    assert node.inclusive("cpu_time:imbalance") == pytest.approx(4.0)
    assert node.inclusive("cpu_time:max") == node.inclusive("cpu_time")
    assert node.inclusive("cpu_time:min") == 0
    assert node.props.get("cpu_time:max_input") == f"pid {straggler.meta['pid']}"
    # the whole job: the straggler is the slowest input and makes the root imbalanced
    totals = [load(p).total("cpu_time") for p in job_profiles]
    assert int(np.argmax(totals)) == 2
    assert m.root.inclusive("cpu_time:imbalance") > 1.2
    # the report shows the statistic
    r = cli("report", out, "--metric", "cpu_time:imbalance", "--format", "json")
    assert "straggle" in r.stdout


def test_metadata_kept(job_profiles, merged):
    out, _ = merged
    m = load(out)
    kept = json.loads(m.meta["merged_inputs"])
    assert [k["path"] for k in kept] == [str(p) for p in job_profiles]
    for k, path in zip(kept, job_profiles, strict=True):
        assert k["meta"] == load(path).meta
        assert k["label"] == f"pid {k['meta']['pid']}"
    assert m.meta["merged_count"] == "4"
    metas = [load(p).meta for p in job_profiles]
    assert m.meta["start_time"] == min(x["start_time"] for x in metas)
    assert m.meta["end_time"] == max(x["end_time"] for x in metas)
    assert m.meta["host"] == metas[0]["host"]


def test_progress_per_input(job_profiles, tmp_path):
    """The progress bar's callback: once per input read (the CLI draws it on a terminal)."""
    calls = []
    merge_files(
        [str(p) for p in job_profiles],
        str(tmp_path / "o.dctx"),
        jobs=2,
        progress=lambda done, total, path: calls.append((done, total, path)),
    )
    assert [c[:2] for c in calls] == [(i + 1, 4) for i in range(4)]
    assert sorted(c[2] for c in calls) == sorted(str(p) for p in job_profiles)


def tables(path: Path) -> dict[str, list]:
    con = sqlite3.connect(path)
    try:
        return {
            t: con.execute(f"SELECT * FROM {t} ORDER BY 1, 2").fetchall()
            for t in ("meta", "strings", "frames", "nodes", "metrics", "node_metrics", "node_props")
        }
    finally:
        con.close()


def test_parallel_merge_equals_sequential(job_profiles, tmp_path, monkeypatch):
    """Workers merging shares of the inputs (absorbed in order) and the split write give the
    same profile as adding the inputs one by one in one process."""
    paths = [str(p) for p in job_profiles] * 2  # 8 inputs
    merge_files(paths, str(tmp_path / "seq.dctx"), jobs=1)
    monkeypatch.setattr(merge, "_PART_MIN_ROWS", 10)  # split the write even for a small tree
    merge_files(paths, str(tmp_path / "par.dctx"), jobs=3)
    a, b = tables(tmp_path / "seq.dctx"), tables(tmp_path / "par.dctx")
    for t in ("meta", "strings", "frames", "nodes", "metrics", "node_props"):
        assert a[t] == b[t], t
    assert [r[:2] for r in a["node_metrics"]] == [r[:2] for r in b["node_metrics"]]
    for ra, rb in zip(a["node_metrics"], b["node_metrics"], strict=True):
        assert ra[3] == rb[3]  # counts
        assert rb[2:] == pytest.approx(ra[2:], rel=1e-9, abs=1e-9), ra[:2]


def test_merge_exact_for_fractional_and_huge_values(tmp_path):
    """Values that are not integers, or beyond 2**53, merge exactly (the column reader's slow
    path) and equal what the reader reads."""
    vals = [[0.1, 2.5, 1e20], [0.2, 3.25, 3e20], [7.0, 1.0, 5.0]]
    paths = []
    for k, row in enumerate(vals):
        w = ProfileWriter({"pid": str(100 + k)})
        a = w.path([w.frame("python", "a", "x.py", 1), w.frame("python", "b", "x.py", 2)])
        c = w.path([w.frame("python", "c", "x.py", 3)])
        w.add(a, "cpu_time", row[0])
        w.add(c, "cpu_time", row[1])
        w.add(0, "cpu_time", row[2])
        p = tmp_path / f"in{k}.dctx"
        w.write(p)
        paths.append(p)
    out = tmp_path / "out.dctx"
    merge_files([str(p) for p in paths], str(out), jobs=1)
    got = by_path(out, "cpu_time")
    for key in {k for p in paths for k in by_path(p, "cpu_time")}:
        want_exc = sum(by_path(p, "cpu_time").get(key, (0, 0))[1] for p in paths)
        assert got[key][1] == want_exc, key
    assert load(out).root.exclusive("cpu_time") == 1e20 + 3e20 + 5.0


def test_non_finite_values_left_out(tmp_path):
    """A NaN or infinite measurement is left out (SQLite would store NaN as NULL, which the format
    refuses, and it would poison the sums): the finite values at the node merge as usual, and the
    merged metadata stays strict JSON, which the analyzer's parser requires."""
    paths = []
    for k, values in enumerate([[float("nan"), 1.0], [float("inf"), 2.0]]):
        w = ProfileWriter({"pid": str(100 + k)})
        node = w.path([w.frame("python", "step", "x.py", 1)])
        for v in values:
            w.add(node, "user_metric", v)
        p = tmp_path / f"in{k}.dctx"
        w.write(p)
        paths.append(p)
    out = tmp_path / "out.dctx"
    merge_files([str(p) for p in paths], str(out), jobs=1)
    assert load(out).root.inclusive("user_metric") == 3.0

    def refuse(constant):
        raise ValueError(f"non-standard JSON constant {constant}")

    meta = load(out).meta
    assert json.loads(meta["merged_totals"], parse_constant=refuse)["user_metric"] == [1.0, 2.0]
    assert json.loads(meta_json({"a": [float("nan"), 1.5]}), parse_constant=refuse) == {
        "a": [None, 1.5]
    }


def test_merge_errors(job_profiles, tmp_path):
    r = cli("merge", job_profiles[0], "-o", job_profiles[0], check=False)
    assert r.returncode != 0 and "overwrite an input" in r.stderr
    r = cli("merge", tmp_path / "missing.dctx", "-o", tmp_path / "o.dctx", check=False)
    assert r.returncode != 0 and "no such file" in r.stderr and "Traceback" not in r.stderr
    bad = tmp_path / "bad.dctx"
    bad.write_text("x")
    r = cli("merge", job_profiles[0], bad, "-o", tmp_path / "o.dctx", check=False)
    assert r.returncode != 0 and "Traceback" not in r.stderr


@pytest.mark.skipif(shutil.which("go") is None, reason="Go is not installed (go tool pprof)")
def test_merged_profile_exports(merged, tmp_path):
    """pprof of a merged profile: the sums and means (which add up the tree), not min, max, std
    or imbalance (which do not); the sums' totals as in the merged profile."""
    out, _ = merged
    pb = tmp_path / "job.pb.gz"
    cli("export", out, "--format", "pprof", "-o", pb)
    r = subprocess.run(
        ["go", "tool", "pprof", "-raw", str(pb)], capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 0, r.stderr
    types = r.stdout.split("Samples:\n", 1)[1].splitlines()[0].split()
    names = [t.split("/")[0] for t in types]
    assert "cpu_time" in names[0] and "cpu_time:mean" in names
    assert not any(n.endswith((":min", ":max", ":std", ":imbalance")) for n in names)
    r = subprocess.run(
        ["go", "tool", "pprof", "-top", "-unit=ns", "-sample_index=cpu_time", str(pb)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert f"of {round(load(out).total('cpu_time'))}ns total" in r.stdout
    # asked for, a statistic that does not add up is refused, not summed by pprof into nonsense
    r = cli("export", out, "-f", "pprof", "-m", "cpu_time:imbalance", "-o", pb, check=False)
    assert r.returncode != 0 and "does not add up" in r.stderr and "Traceback" not in r.stderr


STATS = ("mean", "min", "max", "std", "imbalance")


def _truth(values: list[float]) -> dict[str, float]:
    """The statistics across inputs of one value (as `deepcontext merge` defines them)."""
    v = np.array(values)
    mean = v.mean()
    return {
        "mean": mean,
        "min": v.min(),
        "max": v.max(),
        "std": v.std(),
        "imbalance": v.max() / mean if mean > 0 else 0.0,
    }


def _view_values(path: Path, metric: str, import_frames: bool) -> dict[tuple, list[float]]:
    """Per call path of the report's view of one input (frames from the root, import-system
    frames spliced out unless `import_frames`): [inclusive, exclusive] of `metric`, the nodes of
    the path added up; a spliced frame's exclusive value goes to its parent's path."""
    p = load(path)
    key = {0: ()}
    out: dict[tuple, list[float]] = {(): [p.inclusive(0, metric), 0.0]}
    for n in range(1, len(p.node_parent)):
        f = p.frames[p.node_frame[n]]
        up = key[p.node_parent[n]]
        if not import_frames and f.import_system():
            key[n] = up
            out[up][1] += p.exclusive(n, metric)
            continue
        key[n] = (*up, (f.kind, f.name, f.file, f.line, f.module))
        v = out.setdefault(key[n], [0.0, 0.0])
        v[0] += p.inclusive(n, metric)
        v[1] += p.exclusive(n, metric)
    return out


@pytest.fixture(scope="module")
def work_merged(work_profiles, tmp_path_factory) -> Path:
    """Two runs of a torch program (its start-up imports hundreds of modules) merged."""
    out = tmp_path_factory.mktemp("merged") / "work.dctx"
    cli("merge", work_profiles["fast"], work_profiles["slow"], "-o", out)
    return out


@pytest.mark.parametrize("import_frames", [False, True])
def test_report_of_a_merge_shows_the_true_statistics(work_profiles, work_merged, import_frames):
    """Every statistic the report shows of a merged profile is the statistic across the inputs
    of that row's values (computed here from the inputs themselves), or n/a (null) where the
    stored statistics do not determine it; never a re-summed maximum or imbalance. With the
    import frames every node is a stored one: nothing is n/a."""
    inputs = [work_profiles["fast"], work_profiles["slow"]]
    per_input = [_view_values(p, "cpu_time", import_frames) for p in inputs]
    metrics = ",".join(f"cpu_time:{s}" for s in STATS)
    extra = ["--import-frames"] if import_frames else []
    doc = json.loads(cli("report", work_merged, "--format", "json", "-m", metrics, *extra).stdout)
    assert [m["total"] for m in doc["metrics"]] == [
        doc["tree"]["metrics"]["cpu_time:mean"]["inclusive"],
        None,
        None,
        None,
        None,
    ]
    checked = unknown = 0
    stack = [(doc["tree"], ())]
    while stack:
        node, key = stack.pop()
        for c in node["children"]:
            f = c["frame"]
            stack.append((c, (*key, (f["kind"], f["name"], f["file"], f["line"], f["module"]))))
        inc = _truth([v.get(key, [0.0, 0.0])[0] for v in per_input])
        exc = _truth([v.get(key, [0.0, 0.0])[1] for v in per_input])
        for s in STATS:
            shown = node["metrics"][f"cpu_time:{s}"]
            for part, want in (("inclusive", inc[s]), ("exclusive", exc[s])):
                if shown[part] is None:
                    unknown += 1
                else:
                    assert shown[part] == pytest.approx(want, rel=1e-9, abs=1e-6), (key, s, part)
                    checked += 1
    assert checked > 1000
    if import_frames:
        assert unknown == 0
    root = doc["tree"]["metrics"]
    totals = [load(p).total("cpu_time") for p in inputs]
    assert root["cpu_time:max"]["inclusive"] == max(totals)
    assert root["cpu_time:imbalance"]["inclusive"] == pytest.approx(
        max(totals) / np.mean(totals), rel=1e-12
    )
    # the flat view: per frame, the statistic of the inputs' values of that frame
    flat = json.loads(
        cli(
            "report", work_merged, "--format", "json", "--view", "flat", "-m", metrics, *extra
        ).stdout
    )["rows"]
    flat_checked = 0
    for row in flat:
        f = row["frame"]
        frame = (f["kind"], f["name"], f["file"], f["line"], f["module"])
        exc = [sum(v[1] for k, v in vi.items() if k and k[-1] == frame) for vi in per_input]
        inc = [
            sum(v[0] for k, v in vi.items() if k and k[-1] == frame and frame not in k[:-1])
            for vi in per_input
        ]
        for s in STATS:
            shown = row["metrics"][f"cpu_time:{s}"]
            for part, want in (("inclusive", _truth(inc)[s]), ("exclusive", _truth(exc)[s])):
                if shown[part] is not None:
                    assert shown[part] == pytest.approx(want, rel=1e-9, abs=1e-6), (frame, s)
                    flat_checked += 1
    assert flat_checked > 100
    # the text report: no % for the statistics that do not add up, n/a where unknown
    text = cli("report", work_merged, "-m", "cpu_time:max,cpu_time", *extra).stdout
    rows = [line.split() for line in text.splitlines() if line.startswith(("-", " "))]
    assert rows and all(r[0] == "-" for r in rows[1:]), text
    assert any("n/a" in r for r in rows) == (not import_frames)
    shares = cli("report", work_merged, "-m", "cpu_time", *extra).stdout
    pct = [float(m.group(1)) for m in re.finditer(r"^\s*([\d.]+)%", shares, re.MULTILINE)]
    assert pct and max(pct) <= 100.0


@pytest.mark.parametrize("jobs", [1, 2])
def test_std_of_large_close_values_is_exact(tmp_path, jobs):
    """Times of 10^12 ns that differ by a few ns: E[x^2] - mean^2 cancels to noise (it read 0 or
    thousands), the merged std must be the values' own. One input lacks the metric (a 0), and
    with jobs=2 the inputs are merged in parts and joined."""
    base = 1e12
    values = [base + 3, base + 7, base + 11, None, base + 1, base + 9]
    paths = []
    for k, v in enumerate(values):
        w = ProfileWriter({"pid": str(100 + k)})
        node = w.path([w.frame("python", "step", "x.py", 1)])
        if v is not None:
            w.add(node, "cpu_time", v)
        else:
            w.add(node, "op_count", 1)
        p = tmp_path / f"in{k}.dctx"
        w.write(p)
        paths.append(str(p))
    out = tmp_path / "out.dctx"
    merge_files(paths, str(out), jobs=jobs)
    merged = load(out)
    step = next(n for n in merged.nodes() if n.frame.name == "step")
    want = np.array([0.0 if v is None else v for v in values])
    assert step.inclusive("cpu_time:std") == pytest.approx(want.std(), rel=1e-12)
    assert step.exclusive("cpu_time:std") == pytest.approx(want.std(), rel=1e-12)
    close = np.array([v for v in values if v is not None])
    assert close.std() < 4  # the case above is dominated by the 0; check close values too
    paths2 = [p for p, v in zip(paths, values, strict=True) if v is not None]
    merge_files(paths2, str(tmp_path / "close.dctx"), jobs=jobs)
    step = next(n for n in load(tmp_path / "close.dctx").nodes() if n.frame.name == "step")
    assert step.inclusive("cpu_time:std") == pytest.approx(close.std(), rel=1e-9)
