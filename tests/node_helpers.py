"""Node.js for the tests that open our exports in real viewers: the packages of
tests/interop/node (speedscope, playwright-core; pinned by its lock file), or the copies the GUI
and its bench install."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
NODE_DIR = REPO / "tests" / "interop" / "node"


def node_with(packages: dict[str, tuple[str, ...]]) -> str:
    """The node executable once every package is installed under one of its folders (relative to
    the repository), after `npm ci` in tests/interop/node when one is missing; skips the test when
    Node.js or npm cannot provide them."""
    node = shutil.which("node")
    if node is None:
        pytest.skip("Node.js is not installed")
    found = all(
        any((REPO / d / "node_modules" / pkg).is_dir() for d in dirs)
        for pkg, dirs in packages.items()
    )
    if not found:
        npm = shutil.which("npm")
        if npm is None:
            pytest.skip("npm packages missing: run (cd tests/interop/node && npm ci)")
        r = subprocess.run(
            [npm, "ci", "--no-audit", "--no-fund", "--loglevel=error"],
            cwd=NODE_DIR,
            capture_output=True,
            text=True,
            timeout=600,
        )
        if r.returncode != 0:
            pytest.skip(f"(cd tests/interop/node && npm ci) failed: {r.stderr.strip()[-300:]}")
    return node
