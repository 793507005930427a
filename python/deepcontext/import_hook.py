"""Run code right after a framework's own module code has run, without importing it first.

The integrations (torch_support, timeline, jax_support) must not import torch or jax themselves:
`AfterImport(name, after).install()` puts a meta path finder in front that finds nothing itself,
wraps `name`'s loader so that `before()` and `after()` run around its module code, and takes
itself out of sys.meta_path then. It stays in place until the module is really executed: other
code may only probe with importlib.util.find_spec(name) (the spec it gets is thrown away). Not a
subclass of importlib.abc.MetaPathFinder: importing importlib.abc costs 60 ms of start-up.
"""

from __future__ import annotations

import importlib.util
import sys
import threading


class AfterImport:
    def __init__(self, name: str, after, before=None):
        # per finder: our own find_spec call below must not find this finder again, but must
        # still let another one (timeline's and torch_support's both watch torch) wrap the loader
        self._busy = threading.local()
        self.name = name
        self.after = after
        self.before = before
        self._lock = threading.Lock()
        self._installed = False

    def install(self) -> None:
        with self._lock:
            if not self._installed:
                # Twice: a finder placed before ours that removes itself from sys.meta_path
                # inside its find_spec makes the import machinery skip the entry that follows it.
                sys.meta_path[0:0] = [self, self]
                self._installed = True

    def remove(self) -> None:
        with self._lock:
            if self._installed:
                sys.meta_path[:] = [f for f in sys.meta_path if f is not self]
                self._installed = False

    def find_spec(self, fullname, path, target=None):
        if fullname != self.name or getattr(self._busy, "on", False):
            return None
        self._busy.on = True
        try:
            spec = importlib.util.find_spec(self.name)
        finally:
            self._busy.on = False
        loader = getattr(spec, "loader", None) if spec is not None else None
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        original = loader.exec_module

        def exec_module(module):
            self.remove()
            if self.before is not None:
                self.before()
            original(module)
            self.after()

        loader.exec_module = exec_module
        return spec
