"""Fixtures for the GUI tests: real profiles made by `deepcontext run`, a running GUI server."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
PROGRAM = HERE / "programs" / "work.py"
CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
SCREENSHOTS = HERE / "screenshots"


def run_profiler(out: Path, *args: str, cwd: Path | None = None) -> Path:
    """Profiles `args` with `python -m deepcontext run -o out` and returns the profile path."""
    cmd = [sys.executable, "-m", "deepcontext", "run", "-o", str(out), *args]
    r = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, f"deepcontext run failed: {r.stderr}"
    assert out.exists()
    return out


@pytest.fixture(scope="session")
def work_dir(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("gui-work")
    shutil.copy(PROGRAM, d / "work.py")
    shutil.copy(PROGRAM.parent / "tables.py", d / "tables.py")
    return d


@pytest.fixture(scope="session")
def profile_a(work_dir) -> Path:
    return run_profiler(work_dir / "a.dctx", "work.py", "a", cwd=work_dir)


@pytest.fixture(scope="session")
def profile_b(work_dir) -> Path:
    return run_profiler(work_dir / "b.dctx", "work.py", "b", cwd=work_dir)


@pytest.fixture(scope="session")
def deep_profile(tmp_path_factory) -> Path:
    """A profile of programs/deep.py: a deep hot path, work in the standard library and in a
    package under a site-packages folder (a real file there, imported by path)."""
    d = tmp_path_factory.mktemp("gui-deep")
    shutil.copy(PROGRAM.parent / "deep.py", d / "deep.py")
    site = d / "venv" / "lib" / "python3.11" / "site-packages"
    (site / "squares").mkdir(parents=True)
    (site / "squares" / "__init__.py").write_text("")
    (site / "squares" / "core.py").write_text(
        "def square_sum(n):\n    s = 0\n    for i in range(n):\n        s += i * i\n    return s\n"
    )
    return run_profiler(d / "deep.dctx", "deep.py", str(site), cwd=d)


@pytest.fixture(scope="session")
def partial_profile(tmp_path_factory) -> Path:
    """The checkpoint of programs/partial.py, which writes it and then dies by SIGKILL."""
    d = tmp_path_factory.mktemp("gui-partial")
    shutil.copy(PROGRAM.parent / "partial.py", d / "partial.py")
    out = d / "partial.dctx"
    cmd = [sys.executable, "-m", "deepcontext", "run", "-o", str(out), "partial.py"]
    r = subprocess.run(cmd, cwd=d, capture_output=True, text=True, timeout=120)
    assert r.returncode == -9, f"partial.py was not killed: {r.returncode} {r.stderr}"
    return out


def browser_available() -> str | None:
    """Why the browser tests cannot run here, or None when they can."""
    if not os.path.exists(CHROMIUM):
        return f"{CHROMIUM} not installed (apt-get install chromium)"
    if not shutil.which("node"):
        return "node not installed"
    if not (ROOT / "gui" / "node_modules" / "playwright-core").is_dir():
        return "gui/node_modules missing (run scripts/build-gui.sh)"
    return None


def gui_built() -> bool:
    from deepcontext import gui_server

    return os.path.isfile(os.path.join(gui_server.STATIC_DIR, "index.html"))
