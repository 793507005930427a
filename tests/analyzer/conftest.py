"""Shared fixtures: profiling the real test programs with `deepcontext run` (once per session)."""

from __future__ import annotations

from pathlib import Path

import pytest
from analyzer_helpers import profile_program


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
