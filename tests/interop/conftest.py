"""Shared fixtures for the interop tests: real profiles made by `deepcontext run` on the programs
in programs/ (each profiled once per session), and a runner for the CLI."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import deepcontext
import pytest

HERE = Path(__file__).parent
PROGRAMS = HERE / "programs"
REPO = HERE.parent.parent


def env(extra: dict | None = None) -> dict:
    """The environment of a child: the same deepcontext package as this test process."""
    e = dict(os.environ)
    pkg_parent = str(Path(deepcontext.__file__).resolve().parent.parent)
    e["PYTHONPATH"] = pkg_parent + (os.pathsep + e["PYTHONPATH"] if e.get("PYTHONPATH") else "")
    e.update(extra or {})
    return e


def cli(
    *args: str, check: bool = True, timeout: float = 120, cwd=None
) -> subprocess.CompletedProcess:
    """`deepcontext ARGS` in a fresh interpreter."""
    cmd = [sys.executable, "-m", "deepcontext", *map(str, args)]
    r = subprocess.run(cmd, env=env(), capture_output=True, text=True, timeout=timeout, cwd=cwd)
    if check:
        assert r.returncode == 0, (
            f"{' '.join(cmd)} failed ({r.returncode}):\n{r.stdout}\n{r.stderr}"
        )
    return r


def profile_program(
    workdir: Path, program: str, out: str, extra_env: dict | None = None
) -> subprocess.Popen:
    """Start `deepcontext run` on programs/<program>.py, copied into `workdir` so that runs of the
    same program share its path (and so its call paths); returns the process."""
    script = workdir / f"{program}.py"
    if not script.exists():
        shutil.copy(PROGRAMS / f"{program}.py", script)
    cmd = [sys.executable, "-m", "deepcontext", "run", "--no-gpu", "-q", "-o", str(workdir / out)]
    return subprocess.Popen(
        [*cmd, str(script)],
        cwd=workdir,
        env=env(extra_env),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def wait_all(procs: list[subprocess.Popen], timeout: float = 300) -> None:
    for p in procs:
        out, err = p.communicate(timeout=timeout)
        assert p.returncode == 0, f"{p.args} failed ({p.returncode}):\n{out}\n{err}"


@pytest.fixture(scope="session")
def workdir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("interop")


@pytest.fixture(scope="session")
def train_profile(workdir) -> Path:
    """A CPU torch training loop: Python, operator and module frames; ns, count and byte metrics."""
    pytest.importorskip("torch")
    wait_all([profile_program(workdir, "train", "train.dctx")])
    return workdir / "train.dctx"


@pytest.fixture(scope="session")
def dedupe_profiles(workdir) -> dict[str, Path]:
    """The dedupe job before and after its fix (same script path, so the same call paths)."""
    procs = [
        profile_program(workdir, "dedupe", "slow.dctx"),
        profile_program(workdir, "dedupe", "fixed.dctx", {"INTEROP_FIXED": "1"}),
    ]
    wait_all(procs)
    return {"slow": workdir / "slow.dctx", "fixed": workdir / "fixed.dctx"}


@pytest.fixture(scope="session")
def job_profiles(workdir) -> list[Path]:
    """Four processes of one job (the fixed dedupe program); the third is a straggler."""
    paths = []
    procs = []
    for i in range(4):
        extra = {"INTEROP_FIXED": "1", "INTEROP_ITEMS": "20000"}
        if i == 2:
            extra["INTEROP_STRAGGLE"] = "1"
        paths.append(workdir / f"job{i}.dctx")
        procs.append(profile_program(workdir, "dedupe", f"job{i}.dctx", extra))
        if len(procs) == 2:  # two at a time on two cores
            wait_all(procs)
            procs = []
    wait_all(procs)
    return paths


@pytest.fixture(scope="session")
def work_profiles(workdir) -> dict[str, Path]:
    """A torch program (start-up: `import torch`) before and after a change that made one of its
    functions, `transform`, slower (same script path, so the same call paths)."""
    pytest.importorskip("torch")
    procs = [
        profile_program(workdir, "work", "work-fast.dctx"),
        profile_program(workdir, "work", "work-slow.dctx", {"INTEROP_SLOW": "1"}),
    ]
    wait_all(procs)
    return {"fast": workdir / "work-fast.dctx", "slow": workdir / "work-slow.dctx"}
