"""DeepContext: a calling-context profiler for PyTorch and JAX programs.

`deepcontext.load(path)` reads a .dctx profile; `deepcontext.scope(name)` marks a user scope (as a
context manager or decorator); `deepcontext.profile(path, steps=...)` (context manager or
decorator) and `deepcontext.start()/stop()` profile a region of a program. The
native core (deepcontext._core) is imported lazily so reading profiles needs no compiled code.
"""

from __future__ import annotations

from .scope import scope
from .session import flush, is_active, start, stop
from .session import mark_step as step
from .window import profile

__version__ = "0.1.0"


def __getattr__(name):
    # The reader (sqlite3, dataclasses) loads on first use: `deepcontext run` starts faster.
    if name in ("Profile", "load"):
        from . import reader

        return getattr(reader, name)
    raise AttributeError(name)


__all__ = [
    "Profile",
    "load",
    "profile",
    "scope",
    "step",
    "start",
    "stop",
    "is_active",
    "flush",
    "__version__",
]
