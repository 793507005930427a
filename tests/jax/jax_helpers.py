"""Helpers for the JAX tests: run a program under `deepcontext run` in a fresh interpreter and
measure where the CPU time of XLA's threads went."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "jax"


def run_deepcontext(cwd, *args, timeout: float = 600, check: bool = True, env=None):
    """`python -m deepcontext run ARGS...`; returns the CompletedProcess."""
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
    for i, line in enumerate(Path(path).read_text().splitlines(), 1):
        if marker in line:
            return i
    raise AssertionError(f"{marker!r} not in {path}")


def under_compile(node) -> bool:
    return any(f.kind == "scope" and f.name.startswith("xla_compile(") for f in node.path())


def xla_execution(profile, python_threads=("MainThread",)):
    """Thread frames of the threads that run no Python (XLA's pools), outside compilation, with
    their inclusive cpu_time: [(thread node, cpu_time)]. Python threads hang off the root under
    their own names; a pool thread sits under the worker context a layer set, or under the root
    when none was set (counted too: that time is unattributed)."""
    out = []
    for n in profile.root.walk():
        f = n.frame
        if f.kind != "thread" or n.parent is None:
            continue
        if n.parent.id == 0 and f.name in python_threads:
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
