"""`deepcontext run` never loses a run: a bad output path, program or module is one line of error
before the program starts (and no profile); an output that cannot be written at the end goes to a
fallback path, the program's exit status kept."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import deepcontext
from program_helpers import run_deepcontext, write_program

WORK = """
import os, sys
open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "ran"), "w").close()
def spin(n):
    x = 0
    for i in range(n):
        x += i
    return x
spin(300_000)
"""


def _error_line(stderr: str) -> str:
    """The one line of stderr (asserted to be one, and no traceback)."""
    lines = [ln for ln in stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in stderr, stderr
    return lines[0]


def _profiles(folder) -> list:
    return sorted(p for p in folder.rglob("*.dctx*"))


def test_output_in_a_missing_directory_is_refused_before_the_program_runs(tmp_path):
    prog = write_program(tmp_path, WORK)
    out = tmp_path / "missing" / "x.dctx"
    proc = run_deepcontext(tmp_path, "-o", str(out), str(prog), check=False)
    assert proc.returncode == 2
    line = _error_line(proc.stderr)
    assert line.startswith("deepcontext: error:") and str(tmp_path / "missing") in line, line
    assert not (tmp_path / "ran").exists()  # the program did not run
    assert _profiles(tmp_path) == []


def test_output_that_is_a_directory_is_refused(tmp_path):
    prog = write_program(tmp_path, WORK)
    proc = run_deepcontext(tmp_path, "-o", str(tmp_path), str(prog), check=False)
    assert proc.returncode == 2
    assert "is a directory" in _error_line(proc.stderr)
    assert not (tmp_path / "ran").exists()


def test_output_directory_gone_at_the_end_falls_back_to_the_current_directory(tmp_path):
    folder = tmp_path / "out"
    folder.mkdir()
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    prog = write_program(
        tmp_path,
        WORK + f"import shutil; shutil.rmtree({str(folder)!r}); sys.exit(3)\n",
    )
    proc = run_deepcontext(cwd, "-q", "-o", str(folder / "x.dctx"), str(prog), check=False)
    assert proc.returncode == 3  # the program's
    fallback = cwd / "x.dctx"
    line = _error_line(proc.stderr)
    assert str(folder / "x.dctx") in line and f"wrote {fallback} instead" in line, line
    p = deepcontext.load(fallback)
    assert p.meta["complete"] == "1"
    assert p.total("cpu_time") > 0
    assert _profiles(tmp_path) == [fallback]


def test_a_profile_that_cannot_be_written_anywhere_keeps_the_exit_status(tmp_path):
    # A file size limit stands for a full disk: every write of the profile fails (EFBIG).
    prog = write_program(
        tmp_path,
        WORK
        + """
import resource, signal
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))
sys.exit(6)
""",
    )
    out = tmp_path / "x.dctx"
    proc = run_deepcontext(tmp_path, "-q", "-o", str(out), str(prog), check=False)
    assert proc.returncode == 6
    line = _error_line(proc.stderr)
    assert line.startswith("deepcontext: error: could not write the profile"), line
    assert _profiles(tmp_path) == []  # nor a half-written temporary file


def _python_status(*args: str, cwd) -> int:
    return subprocess.run([sys.executable, *args], cwd=cwd, capture_output=True).returncode


def test_a_directory_runs_its_main_like_python(tmp_path):
    app = tmp_path / "app"
    app.mkdir()
    (app / "helper.py").write_text(
        "def work():\n    x = 0\n    for i in range(2_000_000):\n        x += i\n    return x\n"
    )
    # `python app` puts app/ first on sys.path: helper imports from there
    (app / "__main__.py").write_text("import sys, helper\nhelper.work()\nsys.exit(4)\n")
    out = tmp_path / "app.dctx"
    proc = run_deepcontext(tmp_path, "-q", "-o", str(out), str(app), check=False)
    assert proc.returncode == 4 == _python_status(str(app), cwd=tmp_path), proc.stderr
    assert "Traceback" not in proc.stderr
    p = deepcontext.load(out)
    assert p.meta["complete"] == "1"
    assert p.find("work", file="helper.py")


def test_a_directory_without_main_is_one_line_and_no_profile(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    proc = run_deepcontext(tmp_path, "-o", str(tmp_path / "x.dctx"), str(empty), check=False)
    assert proc.returncode == _python_status(str(empty), cwd=tmp_path) == 1
    assert "__main__" in _error_line(proc.stderr)
    assert _profiles(tmp_path) == []


def test_a_missing_module_is_one_line_and_no_profile(tmp_path):
    out = tmp_path / "x.dctx"
    out.write_bytes(b"an earlier file that must stay as it is")
    proc = run_deepcontext(tmp_path, "-o", str(out), "-m", "no.such.module", check=False)
    assert proc.returncode == _python_status("-m", "no.such.module", cwd=tmp_path) == 1
    assert "no.such.module" in _error_line(proc.stderr) or "'no'" in proc.stderr
    assert out.read_bytes() == b"an earlier file that must stay as it is"
    assert _profiles(tmp_path) == [out]


def test_an_import_error_inside_the_module_is_the_program_s(tmp_path):
    # The module is found and runs: its own ImportError is a traceback, and the profile is kept.
    write_program(tmp_path, WORK + "import no_such_dependency\n", name="mymod.py")
    out = tmp_path / "x.dctx"
    proc = run_deepcontext(tmp_path, "-q", "-o", str(out), "-m", "mymod", check=False)
    assert proc.returncode == 1
    assert "Traceback" in proc.stderr and "no_such_dependency" in proc.stderr
    assert (tmp_path / "ran").exists()
    assert deepcontext.load(out).meta["complete"] == "1"


# A profile larger than SQLite's page cache (4 MB of metadata) under a 1 MiB file size limit: the
# schema is written, then an insert fails in the middle of the transaction (SQLite rolls it back).
FULL_DISK_MID_WRITE = """
import resource, signal
import deepcontext._core
deepcontext._core.set_meta("filler", "x" * 4_000_000)
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, 1 << 20))
sys.exit(5)
"""


def test_a_write_that_fails_midway_names_its_first_cause(tmp_path):
    prog = write_program(tmp_path, WORK + FULL_DISK_MID_WRITE)
    out = tmp_path / "x.dctx"
    proc = run_deepcontext(tmp_path, "-q", "-o", str(out), str(prog), check=False)
    assert proc.returncode == 5
    line = _error_line(proc.stderr)
    assert line.startswith(f"deepcontext: error: could not write the profile {out} ("), line
    # the failed write itself (EFBIG), not what a later call says after SQLite's rollback
    assert "File too large" in line and "no transaction" not in line, line
    assert _profiles(tmp_path) == []


def test_an_existing_profile_is_intact_after_a_failed_write(tmp_path):
    out = tmp_path / "x.dctx"
    first = write_program(tmp_path, WORK)
    run_deepcontext(tmp_path, "-q", "-o", str(out), str(first))
    before = out.read_bytes()
    prog = tmp_path / "again.py"
    prog.write_text(WORK + FULL_DISK_MID_WRITE)
    proc = run_deepcontext(tmp_path, "-q", "-o", str(out), str(prog), check=False)
    assert proc.returncode == 5
    assert "could not write the profile" in _error_line(proc.stderr)
    assert out.read_bytes() == before
    assert deepcontext.load(out).meta["complete"] == "1"
    assert [p.name for p in _profiles(tmp_path)] == ["x.dctx"]  # no temporary file left


def test_a_second_run_to_the_same_output_does_not_replace_the_first(tmp_path):
    out = tmp_path / "x.dctx"
    first = write_program(
        tmp_path,
        """
        import os, time
        def first_program():
            open("first-started", "w").close()
            while not os.path.exists("second-done"):  # the second run starts and ends meanwhile
                time.sleep(0.01)
        first_program()
        """,
        "first.py",
    )
    second = write_program(
        tmp_path,
        """
        import time
        def second_program():
            t = time.process_time()
            while time.process_time() - t < 0.2:
                pass
        second_program()
        """,
        "second.py",
    )
    cmd = [sys.executable, "-m", "deepcontext", "run", "-q", "-o", str(out), str(first)]
    proc = subprocess.Popen(cmd, cwd=tmp_path, stderr=subprocess.PIPE, text=True)
    try:
        for _ in range(6000):
            if (tmp_path / "first-started").exists() or proc.poll() is not None:
                break
            time.sleep(0.01)
        again = run_deepcontext(tmp_path, "-q", "-o", str(out), str(second))
        (tmp_path / "second-done").touch()
        assert proc.wait(timeout=120) == 0, proc.stderr.read()
    finally:
        proc.kill()
    # the second says in one line where its profile goes; the first keeps the output
    line = _error_line(again.stderr)
    assert f"{out} is being written by another run; this one writes" in line, line
    other = line.rsplit(" ", 1)[1]
    assert deepcontext.load(out).find("first_program")
    assert deepcontext.load(other).find("second_program")
    assert sorted(p.name for p in _profiles(tmp_path)) == sorted(
        [out.name, os.path.basename(other)]
    )
