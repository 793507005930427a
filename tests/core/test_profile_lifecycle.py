"""The .dctx profile is complete however the program ends; checkpoints bound what a crash loses;
bad files give one clear line; memory and file size stay flat in the number of iterations."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time

import deepcontext
import pytest
from deepcontext.reader import ProfileError

WORK = """
def spin(n):
    x = 0
    for i in range(n):
        x += i
    return x
spin(1_000_000)
"""


@pytest.mark.parametrize(
    "ending, code",
    [
        ("", 0),
        ("import sys; sys.exit(3)", 3),
        ("raise RuntimeError('boom')", 1),
        ("raise KeyboardInterrupt", -signal.SIGINT),  # python ends by the signal too
    ],
)
def test_profile_is_complete_on_every_normal_ending(run_program, ending, code):
    proc, out = run_program(WORK + ending + "\n", check=False)
    assert proc.returncode == code, proc.stderr
    p = deepcontext.load(out)
    assert p.meta["complete"] == "1"
    assert p.total("cpu_time") > 0
    for key in ("command", "host", "pid", "start_time", "end_time", "python_version"):
        assert p.meta.get(key), key
    if "boom" in ending:
        assert "RuntimeError: boom" in proc.stderr  # the traceback is shown as Python shows it


def _start(tmp_path, source, *options):
    script = tmp_path / "prog.py"
    script.write_text(textwrap.dedent(source))
    out = tmp_path / "prog.dctx"
    cmd = [sys.executable, "-m", "deepcontext", "run", "-q", "-o", str(out), *options, str(script)]
    return subprocess.Popen(
        cmd, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    ), out


LOOP = """
import faulthandler, signal, sys, time
faulthandler.register(signal.SIGUSR2, all_threads=True)  # the test's stack dump if it hangs
# A test run started in the background (`cmd &` in a script) passes SIGINT down ignored, and Python
# then keeps it ignored; this program wants Ctrl-C's KeyboardInterrupt wherever it runs.
signal.signal(signal.SIGINT, signal.default_int_handler)
x = 0
while time.process_time() < 0.3:  # CPU time of its own, however loaded the machine
    x += 1
print("ready", flush=True)
while True:
    x += 1
"""


def _plain_python_status(tmp_path, sig) -> int:
    """How `python prog.py` ends on the signal (an uncaught KeyboardInterrupt: by SIGINT itself)."""
    prog = tmp_path / "plain.py"
    prog.write_text(textwrap.dedent(LOOP))
    proc = subprocess.Popen(
        [sys.executable, str(prog)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    assert proc.stdout.readline().strip() == "ready"
    proc.send_signal(sig)
    proc.communicate(timeout=30)
    return proc.returncode


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_profile_is_complete_after_sigterm_and_sigint(tmp_path, sig):
    expect = _plain_python_status(tmp_path, sig)
    assert expect == -sig
    proc, out = _start(tmp_path, LOOP)
    assert proc.stdout.readline().strip() == "ready"
    time.sleep(0.5)
    proc.send_signal(sig)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:  # say where it waits
        proc.send_signal(signal.SIGUSR2)
        time.sleep(1)
        proc.kill()
        pytest.fail(f"no exit 30 s after signal {sig}; its threads:\n{proc.communicate()[1]}")
    assert proc.returncode == expect
    p = deepcontext.load(out)
    assert p.meta["complete"] == "1"
    assert p.total("cpu_time") > 0.2e9
    assert not [f for f in os.listdir(tmp_path) if ".tmp-" in f]


def test_checkpoint_survives_os_exit(tmp_path):
    proc, out = _start(
        tmp_path,
        """
        import os, time
        t = time.time()
        x = 0
        while time.time() - t < 2.5:
            x += 1
        os._exit(7)
    """,
        "--checkpoint",
        "1",
    )
    proc.wait(timeout=60)
    assert proc.returncode == 7
    p = deepcontext.load(out)
    assert p.meta["complete"] == "0"  # a checkpoint, not the final write
    # At most about one checkpoint period (1 s) of the 2.5 s of work is lost (wall time: the
    # CPU share depends on what else the machine runs).
    assert p.total("wall_time") > 1.0e9


def _deepcontext(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "deepcontext", *args], capture_output=True, text=True, check=True
    )


def test_sigkill_leaves_an_early_checkpoint_that_report_and_analyze_flag(tmp_path):
    # Default settings: the first checkpoint comes a few seconds in, not after the 60 s period.
    proc, out = _start(tmp_path, LOOP)
    assert proc.stdout.readline().strip() == "ready"
    deadline = time.monotonic() + 30
    while not out.exists() and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.2)
    proc.kill()
    proc.wait(timeout=30)
    assert out.exists(), "no checkpoint within 30 s"
    assert proc.returncode == -signal.SIGKILL
    p = deepcontext.load(out)
    assert p.meta["complete"] == "0"
    assert p.total("cpu_time") > 0
    note = "partial profile: the program did not finish"
    report = _deepcontext("report", str(out)).stdout.splitlines()
    assert note in report[2] and p.meta["end_time"] in report[2], report[:4]
    assert note in _deepcontext("analyze", str(out)).stdout.splitlines()[0]
    doc = json.loads(_deepcontext("analyze", "--format", "json", str(out)).stdout)
    assert doc["meta"]["complete"] == "0" and note in doc["partial"]
    # A complete profile says nothing of the kind.
    src = tmp_path / "w.py"
    src.write_text(WORK)
    done = tmp_path / "done.dctx"
    subprocess.run([sys.executable, "-m", "deepcontext", "run", "-q", "-o", str(done), str(src)])
    assert "partial" not in _deepcontext("report", str(done)).stdout
    assert "partial" not in _deepcontext("analyze", "--format", "json", str(done)).stdout


def test_corrupt_and_foreign_files_give_one_clear_line(tmp_path):
    junk = tmp_path / "junk.dctx"
    junk.write_bytes(b"this is not a profile" * 100)
    with pytest.raises(ProfileError):
        deepcontext.load(junk)
    other = tmp_path / "other.dctx"
    con = sqlite3.connect(other)
    con.execute("CREATE TABLE t (x)")
    con.commit()
    con.close()
    with pytest.raises(ProfileError):
        deepcontext.load(other)
    # A truncated real profile.
    src = tmp_path / "w.py"
    src.write_text(WORK)
    subprocess.run(
        [
            sys.executable,
            "-m",
            "deepcontext",
            "run",
            "-q",
            "-o",
            str(tmp_path / "ok.dctx"),
            str(src),
        ],
        check=True,
    )
    data = (tmp_path / "ok.dctx").read_bytes()
    cut = tmp_path / "cut.dctx"
    cut.write_bytes(data[: len(data) // 3])
    with pytest.raises(ProfileError):
        deepcontext.load(cut)
    for bad in (junk, other, cut, tmp_path / "missing.dctx"):
        r = subprocess.run(
            [sys.executable, "-m", "deepcontext", "report", str(bad)],
            capture_output=True,
            text=True,
        )
        if "invalid choice" in r.stderr:
            pytest.skip("report command not built yet")
        assert r.returncode != 0
        lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
        assert len(lines) == 1 and "error" in lines[0], r.stderr
        assert "Traceback" not in r.stderr


GROWTH = """
import resource, sys, json
def step(i):
    x = 0
    for k in range(20_000):
        x += k * i
    return x
n = int(sys.argv[1])
for i in range(n):
    step(i)
print(json.dumps({"rss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}))
"""


def test_memory_and_file_size_are_flat_in_iterations(tmp_path):
    script = tmp_path / "grow.py"
    script.write_text(GROWTH)
    results = {}
    for n in (300, 3000):
        out = tmp_path / f"g{n}.dctx"
        r = subprocess.run(
            [sys.executable, "-m", "deepcontext", "run", "-q", "-o", str(out), str(script), str(n)],
            capture_output=True,
            text=True,
            check=True,
        )
        import json

        results[n] = (
            json.loads(r.stdout)["rss_kb"],
            out.stat().st_size,
            deepcontext.load(out).total("cpu_time"),
        )
    (rss1, size1, cpu1), (rss2, size2, cpu2) = results[300], results[3000]
    assert cpu2 > 5 * cpu1  # the long run really did ten times the work
    assert size2 <= 1.10 * size1, results
    assert (rss2 - rss1) < 10 * 1024, results
