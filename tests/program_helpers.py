"""Helpers shared by the test folders (tests/conftest.py puts this folder on sys.path): run a
program under `deepcontext run` in a fresh interpreter, write a test program, find a line."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path


def run_deepcontext(cwd, *args, timeout: float = 600, check: bool = True, env=None):
    """`python -m deepcontext run ARGS...` with env's variables added; returns the
    CompletedProcess, asserting a zero exit status unless check is false."""
    full_env = dict(os.environ)
    full_env.update(env or {})
    proc = subprocess.run(
        [sys.executable, "-m", "deepcontext", "run", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=full_env,
    )
    if check:
        assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


def write_program(tmp_path, source: str, name: str = "prog.py") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(source))
    return path


def line_of(path, marker: str) -> int:
    """1-based number of the first line of the file that contains marker."""
    for i, line in enumerate(Path(path).read_text().splitlines(), 1):
        if marker in line:
            return i
    raise AssertionError(f"{marker!r} not in {path}")
