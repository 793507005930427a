"""Shared fixtures: profiling the real test programs with `deepcontext run` (once per session)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).parent
PROGRAMS = HERE / "programs"
REPO = HERE.parent.parent


def _env() -> dict:
    env = dict(os.environ)
    py = str(REPO / "python")
    env["PYTHONPATH"] = py + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def profile_program(tmp: Path, program: str, *args: str) -> Path:
    out = tmp / f"{program}{'-' + '-'.join(a.strip('-') for a in args) if args else ''}.dctx"
    cmd = [sys.executable, "-m", "deepcontext", "run", "--no-gpu", "-q", "-o", str(out)]
    cmd += [str(PROGRAMS / f"{program}.py"), *args]
    r = subprocess.run(cmd, env=_env(), capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, f"{' '.join(cmd)} failed ({r.returncode}):\n{r.stdout}\n{r.stderr}"
    return out


@pytest.fixture(scope="session")
def profiles(tmp_path_factory):
    """profiles(program, fixed) -> path of its .dctx, profiled on first use."""
    tmp = tmp_path_factory.mktemp("profiles")
    cache: dict[tuple, Path] = {}

    def get(program: str, fixed: bool = False) -> Path:
        key = (program, fixed)
        if key not in cache:
            cache[key] = profile_program(tmp, program, *(["--fixed"] if fixed else []))
        return cache[key]

    return get


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "deepcontext", *args],
        env=_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
