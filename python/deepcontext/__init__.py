"""DeepContext: a calling-context profiler for PyTorch and JAX programs.

`deepcontext.load(path)` reads a .dctx profile; `deepcontext.scope(name)` marks a user scope (as a
context manager or decorator); `deepcontext.start()/stop()` profile a region of a program. The
native core (deepcontext._core) is imported lazily so reading profiles needs no compiled code.
"""

from __future__ import annotations

from .profile import Profile, load
from .scope import scope
from .session import start, stop, is_active, flush

__version__ = "0.1.0"
__all__ = ["Profile", "load", "scope", "start", "stop", "is_active", "flush", "__version__"]
