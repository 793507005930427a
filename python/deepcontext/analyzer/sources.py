"""Facts read from the profiled program's source files for the built-in rules (the C++ rules call
back into these): the line ranges of its loops."""

from __future__ import annotations

import ast
import functools


@functools.lru_cache(maxsize=64)
def loops(path: str) -> tuple[tuple[int, int], ...]:
    """(first, last) line of every for/while loop of a Python source file (empty if unreadable)."""
    try:
        with open(path, encoding="utf-8") as fh:
            tree = ast.parse(fh.read(), path)
    except (OSError, SyntaxError, ValueError):
        return ()
    return tuple(
        (n.lineno, n.end_lineno or n.lineno)
        for n in ast.walk(tree)
        if isinstance(n, ast.For | ast.While | ast.AsyncFor)
    )
