"""Helpers of the analyzer tests: profile the real test programs with `deepcontext run`, run the CLI.
(A module of its own: test files import it by a name no other test folder uses.)"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).parent
PROGRAMS = HERE / "programs"
REPO = HERE.parent.parent


def _env() -> dict:
    # The installed package (scripts/test.sh installs it): the source tree has no compiled core.
    return dict(os.environ)


def profile_program(tmp: Path, program: str, *args: str) -> Path:
    out = tmp / f"{program}{'-' + '-'.join(a.strip('-') for a in args) if args else ''}.dctx"
    # --trace all: the rules' evidence is checked against exact counts (calls per line, bytes),
    # which step-sampled tracing would estimate from a sample of the steps.
    cmd = [sys.executable, "-m", "deepcontext", "run", "--no-gpu", "--trace", "all", "-q"]
    cmd += ["-o", str(out)]
    cmd += [str(PROGRAMS / f"{program}.py"), *args]
    r = subprocess.run(cmd, env=_env(), capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, f"{' '.join(cmd)} failed ({r.returncode}):\n{r.stdout}\n{r.stderr}"
    return out


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "deepcontext", *args],
        env=_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
