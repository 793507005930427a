"""Step ends, for the layers that work by training step (the bounded timeline, step-sampled
tracing): `deepcontext.step()` (and `profile.step()`, `deepcontext.timeline.step()`) marks one
explicitly; with PyTorch, each `optimizer.step()` of the first optimizer that steps does too (a
global optimizer step post hook), until the first explicit mark turns that detection off, so
steps are never counted twice.

`listen(fn)` never imports torch: the hook waits for `import torch`. fn(explicit) runs at each
step end on the thread that ended it.
"""

from __future__ import annotations

import sys
import threading
import weakref

from .import_hook import AfterImport

_lock = threading.Lock()
_listeners: list = []
_manual = False
_owner = None  # weak reference to the optimizer whose steps are counted
_hook_handle = None
_finder = AfterImport("torch", lambda: _after_torch_import())


def listen(fn) -> None:
    """Calls fn(explicit: bool) at each step end from now on. The first listener of a session
    starts the detection afresh (no optimizer seen, no explicit mark)."""
    global _manual, _owner
    with _lock:
        if not _listeners:
            _manual = False
            _owner = None
        if fn not in _listeners:
            _listeners.append(fn)
    _watch_torch()


def unlisten(fn) -> None:
    """Stops calling fn; the optimizer hook goes with the last listener."""
    global _hook_handle
    with _lock:
        if fn in _listeners:
            _listeners.remove(fn)
        if _listeners:
            return
        handle, _hook_handle = _hook_handle, None
    _finder.remove()
    if handle is not None:
        try:
            handle.remove()
        except Exception:
            pass


def mark() -> None:
    """An explicit step end: optimizer.step() detection stops for the rest of the session."""
    global _manual
    _manual = True
    _notify(True)


def _notify(explicit: bool) -> None:
    for fn in list(_listeners):
        fn(explicit)


def _on_optimizer_step(optimizer, args, kwargs) -> None:
    global _owner
    if _manual or not _listeners:
        return
    owner = _owner() if _owner is not None else None
    if owner is None:
        _owner = weakref.ref(optimizer)
    elif owner is not optimizer:
        return  # a second optimizer (GAN, multi-task): the first one's steps are the steps
    _notify(False)


def _register_optimizer_hook() -> None:
    global _hook_handle
    with _lock:
        if _hook_handle is not None or not _listeners:
            return
        try:
            from torch.optim.optimizer import register_optimizer_step_post_hook
        except ImportError:  # torch < 2.0: only explicit steps
            return
        _hook_handle = register_optimizer_step_post_hook(_on_optimizer_step)


def _after_torch_import() -> None:
    try:
        _register_optimizer_hook()
    except Exception as exc:  # never break the program
        try:
            from . import _core

            _core.note(f"optimizer.step() detection disabled: {exc}")
        except Exception:
            pass


def _watch_torch() -> None:
    torch = sys.modules.get("torch")
    if torch is not None and hasattr(torch, "optim"):
        _register_optimizer_hook()
        return
    _finder.install()
