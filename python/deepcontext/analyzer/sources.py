"""Facts read from the profiled program's source files for the built-in rules (the C++ rules call
back into these): the line ranges of its loops."""

from __future__ import annotations

import ast
import functools
import os
import stat

# A profile names the files; it may name a FIFO, a device or a huge file: read regular files of a
# source file's size only.
MAX_SOURCE_BYTES = 8 << 20


def read_source(path: str) -> str | None:
    """The text of a regular file of at most MAX_SOURCE_BYTES, else None (never blocks on a FIFO)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except (OSError, ValueError):
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_SOURCE_BYTES:
            return None
        with os.fdopen(fd, "rb", closefd=False) as fh:
            data = fh.read(MAX_SOURCE_BYTES + 1)
    except OSError:
        return None
    finally:
        os.close(fd)
    if len(data) > MAX_SOURCE_BYTES:
        return None
    return data.decode("utf-8", errors="replace")


@functools.lru_cache(maxsize=64)
def loops(path: str) -> tuple[tuple[int, int], ...]:
    """(first, last) line of every for/while loop of a Python source file (empty if unreadable)."""
    text = read_source(path)
    if text is None:
        return ()
    try:
        tree = ast.parse(text, path)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return ()
    return tuple(
        (n.lineno, n.end_lineno or n.lineno)
        for n in ast.walk(tree)
        if isinstance(n, ast.For | ast.While | ast.AsyncFor)
    )
