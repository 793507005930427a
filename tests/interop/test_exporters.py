"""Exports of real profiles open in the tools they are for, with the same totals as ours:
hatchet (llnl-hatchet), pprof (`go tool pprof -top`), speedscope (its own app in headless
Chromium), collapsed stacks, CSV."""

from __future__ import annotations

import csv
import gzip
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from deepcontext.exporters import collapsed
from deepcontext.reader import load
from deepcontext.render import frame_label, load_tree
from node_helpers import node_with

from .conftest import HERE, cli, profile_program, wait_all

NODE_DIR = HERE / "node"


@pytest.fixture(scope="module", params=["train", "dedupe"])
def profile(request, train_profile, dedupe_profiles) -> Path:
    return train_profile if request.param == "train" else dedupe_profiles["slow"]


def totals(path: Path) -> dict[str, float]:
    """Each metric's values added up over the nodes (the root's inclusive value as stored; for
    wall_time that is the threads' wall times added up, where Profile.total is the elapsed time)."""
    p = load(path)
    return {m: p.inclusive(0, m) for m in p.metrics}


def export(path: Path, fmt: str, *extra: str) -> Path:
    out = path.with_name(f"{path.stem}-{fmt}-{'-'.join(extra) or 'all'}.out")
    cli("export", path, "--format", fmt, "-o", out, *extra)
    assert out.stat().st_size > 0
    return out


def test_profiles_are_real(train_profile, dedupe_profiles):
    t = totals(train_profile)
    assert t["cpu_time"] > 0 and t["op_count"] > 0 and t["alloc_bytes"] > 0
    p = load(train_profile)
    kinds = {f.kind for f in p.frames.values()}
    assert {"python", "operator"} <= kinds
    assert totals(dedupe_profiles["slow"])["cpu_time"] > 0


def test_hatchet_loads_with_our_totals(profile):
    ht = pytest.importorskip("hatchet")
    out = export(profile, "hatchet", "--import-frames")  # every node of the profile
    gf = ht.GraphFrame.from_literal(json.loads(out.read_text()))
    df = gf.dataframe
    ours = totals(profile)
    p = load(profile)
    assert len(df) == len(p.node_parent)
    roots = gf.graph.roots
    assert len(roots) == 1 and roots[0].frame["name"] == "<root>"
    for m, total in ours.items():
        assert m in gf.exc_metrics and f"{m} (inc)" in gf.inc_metrics
        # the root's inclusive value is ours: for wall_time the elapsed time
        assert df.loc[roots[0], f"{m} (inc)"] == p.total(m), m
        assert df[m].sum() == pytest.approx(total, rel=1e-12, abs=1e-6), m
    # hatchet's own tree: the exclusive values of each top-level subtree it built add up to the
    # inclusive value we wrote for that subtree's root
    for top in [roots[0], *roots[0].children]:
        subtree = list(top.traverse())
        for m in ours:
            if top is roots[0] and m == "wall_time":
                continue  # the elapsed time, not the threads' wall times added up
            assert df.loc[subtree, m].sum() == pytest.approx(
                df.loc[top, f"{m} (inc)"], rel=1e-12, abs=1e-6
            ), (m, top.frame["name"])
    # frames are named as in the report
    labels = {n.frame["name"] for n in gf.graph.traverse()}
    tree = json.loads(cli("report", profile, "--format", "json", "--depth", "3").stdout)

    def walk(node):
        yield node
        for c in node["children"]:
            yield from walk(c)

    report_labels = {n["label"] for n in walk(tree["tree"])}
    assert report_labels <= labels


def test_hatchet_deep_tree(workdir):
    """A call path deeper than Python's recursion limit still exports (written without recursion);
    reading it back needs a higher recursion limit, as json's reader recurses per level."""
    wait_all([profile_program(workdir, "deep", "deep.dctx")])
    out = export(workdir / "deep.dctx", "hatchet")
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(20000)
    try:
        doc = json.loads(out.read_text())
    finally:
        sys.setrecursionlimit(limit)
    # the deepest leaf, found without recursion (other short paths, e.g. start-up, come first)
    depth, node, stack = 0, doc[0], [(doc[0], 0)]
    while stack:
        n, d = stack.pop()
        if d > depth:
            depth, node = d, n
        stack.extend((c, d + 1) for c in n["children"])
    assert depth > 400
    assert node["metrics"]["cpu_time"] > 0


def _pprof_total(path: Path, metric: str, unit: str) -> tuple[float, float]:
    args = ["go", "tool", "pprof", "-top", "-nodefraction=0", f"-sample_index={metric}"]
    if unit == "ns":
        args.append("-unit=ns")
    elif unit == "bytes":
        args.append("-unit=B")
    r = subprocess.run([*args, str(path)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    m = re.search(r"Showing nodes accounting for (\S+), ([\d.]+)% of (\S+) total", r.stdout)
    assert m, r.stdout + r.stderr

    def num(s: str) -> float:
        v = re.fullmatch(r"(-?[\d.]+)([a-zA-Z]*)", s)
        assert v, s
        assert v.group(2) in ("", "ns", "B"), s
        return float(v.group(1))

    return num(m.group(1)), num(m.group(3))


@pytest.mark.skipif(shutil.which("go") is None, reason="Go is not installed (go tool pprof)")
def test_pprof_opens_with_our_totals(profile):
    out = export(profile, "pprof")
    p = load(profile)
    checked = 0
    for m, total in totals(profile).items():
        # wall_time is left out: pprof would add the threads' wall times into a "total"
        if total == 0 or m == "wall_time":
            continue
        shown, whole = _pprof_total(out, m, p.metrics[m].unit)
        assert whole == round(total), (m, whole, total)
        assert shown == whole, m
        checked += 1
    assert checked >= 3
    # function names are the report's labels
    r = subprocess.run(
        ["go", "tool", "pprof", "-top", "-nodefraction=0", "-sample_index=cpu_time", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    hot = max(  # import frames are spliced out of the export, as in the report
        (n for n in p.nodes() if n.frame.kind != "root" and not n.frame.import_system()),
        key=lambda n: n.exclusive("cpu_time"),
    )
    assert frame_label(hot.frame) in r.stdout


@pytest.fixture(scope="session")
def node_packages() -> str:
    """Node.js with speedscope and playwright-core: tests/interop/node's own (installed here with
    `npm ci` from its lock file when missing), or the GUI's and its bench's copies."""
    return node_with(
        {
            "speedscope": ("tests/interop/node", "bench/gui"),
            "playwright-core": ("tests/interop/node", "gui"),
        }
    )


def _speedscope(node: str, path: Path) -> dict:
    r = subprocess.run(
        [node, str(NODE_DIR / "speedscope_totals.mjs"), str(path)],
        capture_output=True,
        text=True,
        timeout=180,
    )
    if r.returncode == 3:
        pytest.skip(r.stderr.strip())
    assert r.returncode == 0, r.stdout + r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(not Path("/usr/bin/chromium").exists(), reason="no /usr/bin/chromium")
def test_speedscope_opens_with_our_totals(profile, node_packages):
    out = export(profile, "speedscope")
    doc = json.loads(out.read_text())
    shown = _speedscope(node_packages, out)
    assert shown["errors"] == []
    assert shown["exporter"].startswith("speedscope@")
    names = [pr["name"] for pr in doc["profiles"]]
    assert [pr["name"] for pr in shown["profiles"]] == names
    # a profile per metric and thread with values; each adds up to that thread's values
    ours = _thread_totals(profile)
    assert set(names) == set(ours)
    for pr in shown["profiles"]:
        assert pr["total"] == pytest.approx(ours[pr["name"]], rel=1e-12), pr
    # what speedscope shows: our file's name as its title, the first metric's profile first
    assert profile.name in shown["title"]
    assert f"{names[0]} (1/{len(names)})" in shown["toolbar"]


def _thread_totals(path: Path) -> dict[str, float]:
    """Per speedscope profile name (`metric [thread] name`): the metric's values in that thread,
    import frames spliced out (their values stay in the thread), threads without values left out;
    not the metrics a merged profile's statistics that do not add up."""
    p = load(path)
    out = {}
    for m in p.metrics:
        if m.rpartition(":")[2] in ("min", "max", "std", "imbalance"):
            continue
        for t in p.root.children:
            v = sum(n.exclusive(m) for n in t.walk())
            if v != 0:
                out[f"{m} {frame_label(t.frame)}"] = v
    return out


def test_collapsed_sums_to_totals(profile):
    ours = totals(profile)
    p = load(profile)
    tree = load_tree(profile)
    for m, total in ours.items():
        if total == 0:
            continue
        # the CLI for the main metric, the exporter itself for the others
        if m == "cpu_time":
            lines = export(profile, "collapsed", "--metric", m).read_text().splitlines()
        else:
            lines = "".join(collapsed.stack_lines(tree, m)).splitlines()
        s = 0
        for line in lines:
            stack, _, value = line.rpartition(" ")
            assert stack and value.lstrip("-").isdigit(), line
            s += int(value)
        assert s == round(total), m
    # stacks are the report's labels, root first
    out = export(profile, "collapsed", "--metric", "cpu_time")
    hot = max(  # import frames are spliced out of the export, as in the report
        (n for n in p.nodes() if n.frame.kind != "root" and not n.frame.import_system()),
        key=lambda n: n.exclusive("cpu_time"),
    )
    want = ";".join(frame_label(f).replace(";", ":") for f in hot.path() if not f.import_system())
    assert any(line.startswith(want + " ") for line in out.read_text().splitlines())


def test_csv_sums_to_totals(profile):
    ours = totals(profile)
    out = export(profile, "csv", "--import-frames")  # every node of the profile
    with open(out, newline="") as f:
        rows = list(csv.DictReader(f))
    p = load(profile)
    assert len(rows) == len(p.node_parent)
    assert rows[0]["id"] == "0" and rows[0]["parent"] == ""
    for m, total in ours.items():
        assert float(rows[0][f"{m}_inc"]) == p.total(m)
        assert sum(float(r[f"{m}_exc"]) for r in rows) == pytest.approx(total, rel=1e-12, abs=1e-6)


def test_export_errors_are_one_line(dedupe_profiles, tmp_path):
    r = cli("export", dedupe_profiles["slow"], "--format", "pprof", "--metric", "nope", check=False)
    assert r.returncode != 0
    assert "unknown metric 'nope'" in r.stderr and "Traceback" not in r.stderr
    bad = tmp_path / "bad.dctx"
    bad.write_text("not a profile")
    r = cli("export", bad, "--format", "hatchet", check=False)
    assert r.returncode != 0 and "Traceback" not in r.stderr


def test_exports_splice_import_frames_out_as_report_does(work_profiles):
    """A torch program's start-up runs through hundreds of frames of Python's import system;
    every export leaves them out as the report does (their values stay on the import line), and
    keeps them with --import-frames."""
    path = work_profiles["fast"]
    kept_report = cli("report", path, "--format", "json", "--import-frames").stdout
    assert "<frozen importlib." in kept_report
    for fmt in ("collapsed", "csv", "hatchet", "speedscope", "pprof"):
        spliced = export(path, fmt)
        kept = export(path, fmt, "--import-frames")
        read = gzip.decompress if fmt == "pprof" else (lambda b: b)
        assert b"<frozen importlib." not in read(spliced.read_bytes()), fmt
        assert b"<frozen importlib." in read(kept.read_bytes()), fmt
    # the same values: the collapsed stacks add up to the same total either way
    for extra in ((), ("--import-frames",)):
        lines = export(path, "collapsed", *extra).read_text().splitlines()
        assert sum(int(line.rpartition(" ")[2]) for line in lines) == round(
            load(path).inclusive(0, "cpu_time")
        )


def test_speedscope_has_a_profile_per_thread_with_samples(work_profiles):
    path = work_profiles["fast"]
    doc = json.loads(export(path, "speedscope").read_text())
    assert doc["profiles"] and all(pr["samples"] and pr["endValue"] != 0 for pr in doc["profiles"])
    ours = _thread_totals(path)
    assert {pr["name"] for pr in doc["profiles"]} == set(ours)
    for pr in doc["profiles"]:
        assert sum(pr["weights"]) == pytest.approx(ours[pr["name"]], rel=1e-12)
    # the main metric's largest thread first (what speedscope opens)
    assert doc["profiles"][0]["name"] == "cpu_time [thread] MainThread"
