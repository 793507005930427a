"""Helpers for the core tests: run a program under `deepcontext run` in a fresh interpreter."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest


def _run(
    tmp_path,
    source: str,
    *options: str,
    name: str = "prog.py",
    timeout: float = 120,
    check: bool = True,
    env: dict | None = None,
):
    script = tmp_path / name
    script.write_text(textwrap.dedent(source))
    out = tmp_path / (script.stem + ".dctx")
    cmd = [sys.executable, "-m", "deepcontext", "run", "-q", "-o", str(out), *options, str(script)]
    proc = subprocess.run(
        cmd,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )
    if check:
        assert proc.returncode == 0, proc.stderr
    return proc, out


@pytest.fixture
def run_program(tmp_path):
    def runner(source: str, *options: str, **kw):
        return _run(tmp_path, source, *options, **kw)

    return runner
