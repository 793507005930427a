"""`deepcontext diff` on real profiles: a profile against itself is empty; the dedupe job before
and after its fix (a list replaced by a set) puts the fixed function's path first."""

from __future__ import annotations

import json

from deepcontext.diff import diff_profiles
from deepcontext.reader import load
from deepcontext.render import frame_label

from .conftest import cli


def test_self_diff_is_empty(dedupe_profiles, train_profile):
    for path in (dedupe_profiles["slow"], train_profile):
        p, again = load(path), load(path)
        for m in p.metrics:
            assert not diff_profiles(p, again, m).entries, m
        r = cli("diff", path, path)
        assert r.stdout == ""
        doc = json.loads(cli("diff", path, path, "--format", "json").stdout)
        assert doc["entries"] == [] and doc["total_a"] == doc["total_b"]


def test_fixed_path_first(dedupe_profiles):
    slow, fixed = dedupe_profiles["slow"], dedupe_profiles["fixed"]
    a, b = load(slow), load(fixed)
    # the fix is real: dedupe was the larger part of the slow run and is (nearly) gone
    dedupe_a = sum(n.exclusive("cpu_time") for n in a.nodes() if n.frame.name == "dedupe")
    assert dedupe_a > 0.5 * a.total("cpu_time")
    res = diff_profiles(a, b, "cpu_time")
    first = res.entries[0]
    assert first.path[-1].name == "dedupe"
    assert first.delta_exclusive < 0
    assert first.a_node >= 0
    # the CLI ranks the same way, text and JSON
    doc = json.loads(cli("diff", slow, fixed, "--format", "json").stdout)
    assert doc["metric"]["name"] == "cpu_time"
    top = doc["entries"][0]
    assert top["path"][-1]["name"] == "dedupe" and top["delta_exclusive"] < 0
    assert top["labels"] == [frame_label(f) for f in first.path]
    assert doc["total_b"] - doc["total_a"] == res.total_b - res.total_a
    text = cli("diff", slow, fixed).stdout.splitlines()
    assert text[0].startswith("cpu_time: A ")
    rows = [line for line in text[2:] if not line.startswith("...")]
    assert "dedupe" in rows[1].rsplit(" > ", 1)[-1]  # rows[0] is the header
    # reversed, the same path comes first as a gain
    back = diff_profiles(b, a, "cpu_time").entries[0]
    assert back.path == first.path and back.delta_exclusive == -first.delta_exclusive


def test_diff_new_and_vanished(dedupe_profiles):
    a, b = load(dedupe_profiles["slow"]), load(dedupe_profiles["fixed"])
    res = diff_profiles(a, b, "cpu_time")
    statuses = {e.status for e in res.entries}
    assert statuses <= {"changed", "new", "vanished"}
    for e in res.entries:
        if e.status == "vanished":
            assert e.b_node == -1 and e.b_inclusive == 0 and e.relative == -1.0
        if e.status == "new":
            assert e.a_node == -1 and e.relative is None
    # every path's delta adds up: the sum of exclusive deltas is the change of the total
    assert sum(e.delta_exclusive for e in res.entries) == res.total_b - res.total_a


def test_diff_errors(dedupe_profiles):
    r = cli("diff", dedupe_profiles["slow"], dedupe_profiles["fixed"], "-m", "nope", check=False)
    assert r.returncode != 0 and "unknown metric" in r.stderr and "Traceback" not in r.stderr


def test_import_system_frames_are_spliced_out_of_the_paths(dedupe_profiles, train_profile):
    """The training program imports torch: hundreds of paths through Python's import system.
    By default they are spliced out (as in `deepcontext report`), their time kept on the
    import line's path; with import_frames they are there."""
    a, b = load(dedupe_profiles["slow"]), load(train_profile)
    spliced = diff_profiles(a, b, "cpu_time", import_time=True)
    kept = diff_profiles(a, b, "cpu_time", import_frames=True)
    assert not [e for e in spliced.entries if any(f.import_system() for f in e.path)]
    assert [e for e in kept.entries if any(f.import_system() for f in e.path)]
    for res in (spliced, kept):
        total = sum(e.delta_exclusive for e in res.entries)
        assert abs(total - (res.total_b - res.total_a)) <= 1e-6 * res.total_b
    # A path outside the import system has the same values either way.
    top = max(
        (e for e in kept.entries if not any(f.import_system() for f in e.path)),
        key=lambda e: e.b_inclusive,
    )
    same = [e for e in spliced.entries if e.path == top.path]
    assert same and same[0].b_inclusive == top.b_inclusive
    r = cli("diff", dedupe_profiles["slow"], train_profile, "--format", "json", "--import-frames")
    files = {f["file"] for e in json.loads(r.stdout)["entries"] for f in e["path"]}
    assert any(f.startswith("<frozen importlib.") for f in files)


def test_diff_ranks_the_work_not_the_start_up(work_profiles):
    """Two runs of a torch program, one with `transform` made slower: importing torch varies by
    more than that from run to run, yet the changed function comes first, as import time is left
    out by default; --import-time puts it back."""
    fast, slow = work_profiles["fast"], work_profiles["slow"]
    doc = json.loads(cli("diff", fast, slow, "--format", "json").stdout)

    def through(entry, name) -> bool:
        return any(f["name"] == name for f in entry["path"])

    assert through(doc["entries"][0], "transform") and doc["entries"][0]["delta_exclusive"] > 0
    torch_init = [
        e for e in doc["entries"] if any(f["file"].endswith("torch/__init__.py") for f in e["path"])
    ]
    assert not torch_init
    left_out = doc["import_time_left_out"]
    assert left_out["a"] > 0 and left_out["b"] > 0
    a, b = load(fast), load(slow)
    assert doc["total_a"] == a.total("cpu_time") - left_out["a"]
    # with the import time: the torch import's paths are there, and the totals are the whole runs
    full = json.loads(cli("diff", fast, slow, "--format", "json", "--import-time").stdout)
    files = {f["file"] for e in full["entries"] for f in e["path"]}
    assert any(f.endswith("torch/__init__.py") for f in files)
    assert full["total_a"] == a.total("cpu_time") and full["total_b"] == b.total("cpu_time")
    assert full["import_time_left_out"] == {"a": 0.0, "b": 0.0}
    text = cli("diff", fast, slow).stdout.splitlines()
    assert text[1].startswith("import time left out (--import-time): A ")
    assert "transform" in text[4]  # the first row after the header
