"""Helpers for the PyTorch tests: run a program under `deepcontext run` in a fresh interpreter and
look nodes up in the profile it writes."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "torch"


def run_deepcontext(cwd, *args, timeout: float = 300, check: bool = True):
    """`python -m deepcontext run ARGS...`; returns the CompletedProcess."""
    env = dict(os.environ)
    env.setdefault("OMP_NUM_THREADS", "2")
    proc = subprocess.run(
        [sys.executable, "-m", "deepcontext", "run", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
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


def python_frames(node):
    return [f for f in node.path() if f.kind == "python"]


def has_line(node, file: str, line: int) -> bool:
    return any(
        f.kind == "python" and os.path.basename(f.file) == file and f.line == line
        for f in node.path()
    )


def user_line(node, files=("train.py", "model.py", "prog.py")) -> bool:
    return any(f.kind == "python" and os.path.basename(f.file) in files for f in node.path())
