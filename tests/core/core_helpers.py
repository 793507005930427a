"""Helpers of the core tests (a module name no other test folder uses)."""

from __future__ import annotations

import textwrap


def line_of(source: str, marker: str) -> int:
    """1-based line number of the line containing marker in the dedented source."""
    for i, line in enumerate(textwrap.dedent(source).splitlines(), 1):
        if marker in line:
            return i
    raise AssertionError(marker)
