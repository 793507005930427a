"""Helpers for the JAX tests: where the CPU time of XLA's threads went in a profile (running the
programs: tests/program_helpers.py)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "jax"


def under_compile(node) -> bool:
    return any(f.kind == "scope" and f.name.startswith("xla_compile(") for f in node.path())


def xla_execution(profile, python_threads=("MainThread",)):
    """Thread frames of the threads that run no Python (XLA's pools), outside compilation, with
    their inclusive cpu_time: [(thread node, cpu_time)]. Python threads hang off the root under
    their own names (ours, ``deepcontext-*``, too); a pool thread sits under the worker context a
    layer set, or under the root when none was set (counted too: that time is unattributed)."""
    out = []
    for n in profile.root.walk():
        f = n.frame
        if f.kind != "thread" or n.parent is None:
            continue
        if n.parent.id == 0 and (f.name in python_threads or f.name.startswith("deepcontext")):
            continue
        if under_compile(n) or f.name.startswith("llvm-worker"):
            continue
        out.append((n, n.inclusive("cpu_time")))
    return out


def has_line(node, file: str, line: int) -> bool:
    return any(
        f.kind == "python" and os.path.basename(f.file) == file and f.line == line
        for f in node.path()
    )


def python_exe() -> str:
    return sys.executable
