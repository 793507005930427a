"""Helpers for the PyTorch tests: run a program under `deepcontext run` with the tests' thread
count and look nodes up in the profile it writes."""

from __future__ import annotations

import os
from pathlib import Path

import program_helpers

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "torch"


def run_deepcontext(cwd, *args, timeout: float = 300, check: bool = True):
    """program_helpers.run_deepcontext with two intra-op threads unless the caller's environment
    sets OMP_NUM_THREADS (the tests' programs are small; 2 cores in CI)."""
    threads = {"OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "2")}
    return program_helpers.run_deepcontext(cwd, *args, timeout=timeout, check=check, env=threads)


def python_frames(node):
    return [f for f in node.path() if f.kind == "python"]


def has_line(node, file: str, line: int) -> bool:
    return any(
        f.kind == "python" and os.path.basename(f.file) == file and f.line == line
        for f in node.path()
    )


def user_line(node, files=("train.py", "model.py", "prog.py")) -> bool:
    return any(f.kind == "python" and os.path.basename(f.file) in files for f in node.path())
