"""The Python API: deepcontext.profile() as context manager and decorator, step windows."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import deepcontext
import pytest
from core_helpers import line_of
from deepcontext.errors import UserError

WINDOW = """
import sys
import deepcontext

def spin(n):
    x = 0
    for i in range(n):
        x += i
    return x

def warm():
    return spin(300_000)  # WARM

def hot():
    return spin(300_000)  # HOT

def cold():
    return spin(300_000)  # COLD

with deepcontext.profile(sys.argv[1], steps=range(3, 6)) as prof:
    for i in range(12):
        if 3 <= i < 6:
            hot()
        else:
            warm()
        prof.step()
assert prof.path == sys.argv[1], prof.path
assert not deepcontext.is_active()

@deepcontext.profile(sys.argv[2], interval_ms=1)
def main(work):
    for _ in range(10):  # long enough for samples on a busy machine (the GIL hand-off waits)
        work()

main(warm)
main(cold)  # each call writes a fresh profile
"""


def _lines(p, suffix):
    return {
        n.frame.line
        for n in p.nodes()
        if n.frame.file.endswith(suffix) and n.inclusive("wall_time")
    }


def test_step_window_profiles_only_its_steps_and_decorator_profiles_each_call(tmp_path):
    script = tmp_path / "prog.py"
    script.write_text(textwrap.dedent(WINDOW))
    win, dec = tmp_path / "window.dctx", tmp_path / "decorated.dctx"
    subprocess.run(
        [sys.executable, str(script), str(win), str(dec)], check=True, cwd=tmp_path, timeout=120
    )
    src = textwrap.dedent(WINDOW)
    p = deepcontext.load(str(win))
    assert p.meta["complete"] == "1"
    assert p.meta["step_window"] == "3-6"
    lines = _lines(p, "prog.py")
    assert line_of(src, "HOT") in lines
    assert line_of(src, "WARM") not in lines, "steps outside the window are not profiled"
    d = deepcontext.load(str(dec))
    lines = _lines(d, "prog.py")
    # The second call's profile holds that call only, not the first call's samples too.
    assert line_of(src, "COLD") in lines
    assert line_of(src, "WARM") not in lines and line_of(src, "HOT") not in lines


@pytest.mark.parametrize("steps", [range(5, 5), range(0, 10, 2), [1, 3]])
def test_step_window_must_be_contiguous(steps):
    with pytest.raises(UserError):
        deepcontext.profile("x.dctx", steps=steps)


def test_metrics_option_limits_the_sampled_metrics(run_program):
    _, out = run_program("x = sum(i * i for i in range(3_000_000))\n", "--metrics", "cpu_time")
    p = deepcontext.load(out)
    assert p.total("cpu_time") > 0
    assert p.total("wall_time") == 0
    assert p.meta["metrics_enabled"] == '["cpu_time", "samples"]'


def test_non_finite_values_of_a_producer_are_left_out(run_program):
    """A producer that adds NaN or infinity through the C API (dctx_add) loses neither the
    node's finite values nor the profile."""
    source = """
from deepcontext import capi
lib = capi.library()
m = lib.dctx_metric_id(b"user_metric", b"count", b"a producer's metric")
for v in (float("nan"), 1.0, float("inf"), 2.5):
    lib.dctx_add(0, m, v)
"""
    _, out = run_program(source)
    assert deepcontext.load(out).total("user_metric") == 3.5


def test_unknown_metric_is_one_line(run_program):
    proc, _ = run_program("pass\n", "--metrics", "cpu_time,bogus", check=False)
    assert proc.returncode == 2
    assert proc.stderr.strip() == (
        "deepcontext: error: unknown metric bogus: choose from cpu_time, wall_time, cycles, "
        "instructions"
    )


STEPS = """
import sys
import deepcontext

with deepcontext.profile(sys.argv[1], timeline=2) as prof:
    for i in range(6):
        with deepcontext.scope("work"):
            sum(j * j for j in range(20_000))
        prof.step()
"""


def test_profile_steps_mark_the_timeline(tmp_path):
    import sqlite3

    script = tmp_path / "prog.py"
    script.write_text(textwrap.dedent(STEPS))
    out = tmp_path / "steps.dctx"
    subprocess.run([sys.executable, str(script), str(out)], check=True, cwd=tmp_path, timeout=120)
    con = sqlite3.connect(out)
    steps = [r[0] for r in con.execute("SELECT step FROM timeline_steps ORDER BY step")]
    assert steps == [4, 5], steps  # the last two complete steps of six
    scopes = con.execute("SELECT count(*) FROM timeline WHERE step IN (4, 5)").fetchone()[0]
    assert scopes >= 2


DEEP = """
import sys
sys.setrecursionlimit(5000)
def r(n):
    if n == 0:
        return sum(i * i for i in range(2_000_000))
    return r(n - 1)
r(900)
"""


def test_json_report_of_a_deep_recursion(run_program):
    import json as _json

    _, out = run_program(DEEP)
    proc = subprocess.run(
        [sys.executable, "-m", "deepcontext", "report", str(out), "--format", "json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-500:]
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))  # the decoder recurses too
    node, depth = _json.loads(proc.stdout)["tree"], 0
    while node["children"]:
        node, depth = node["children"][0], depth + 1
    assert depth > 500  # stacks are cut at their innermost 512 Python frames
