"""User scopes: `with deepcontext.scope("load"):` and `@deepcontext.scope` / `@scope("name")`.

A scope is a frame of its own in the calling context, placed under the Python line that opened it;
everything measured inside it (samples, operators, kernels) sits below it. Outside a profiling
session a scope costs one check.
"""

from __future__ import annotations

import functools
import threading

_local = threading.local()


def _core():
    from . import _core as core

    return core


class scope:
    __slots__ = ("name",)

    def __new__(cls, name_or_function=None):
        if callable(name_or_function):  # bare @scope
            fn = name_or_function
            return scope(getattr(fn, "__qualname__", getattr(fn, "__name__", "scope")))(fn)
        return super().__new__(cls)

    def __init__(self, name_or_function=None):
        self.name = str(name_or_function) if name_or_function is not None else "scope"

    def __enter__(self):
        stack = getattr(_local, "stack", None)
        if stack is None:
            stack = _local.stack = []
        core = _core()
        entered = core.is_active()
        if entered:
            core.scope_enter(self.name)
        stack.append(entered)
        return self

    def __exit__(self, *exc):
        stack = getattr(_local, "stack", None)
        if stack and stack.pop():
            _core().scope_exit()
        return False

    def __call__(self, fn):
        name = self.name

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with scope(name):
                return fn(*args, **kwargs)

        return wrapper
