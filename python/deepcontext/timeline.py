"""Bounded timeline: the events of the last N steps, written into the profile's `timeline` table.

    deepcontext run --timeline 5 train.py          # or deepcontext.start(timeline=5)

While it is on, every operator (PyTorch RecordFunction), user scope, GPU API call (launch, copy,
sync) and GPU kernel, memcpy and memset (CUPTI) is also kept as one 32-byte record, with its start and end, thread or device and
stream, and the step it started in, in a fixed-size ring per thread (libdeepcontext.so,
src/timeline/). Each write of the profile keeps the events of the last N complete steps; the
running step is left out. `deepcontext export FILE --format chrome` turns them into a trace for
Perfetto or chrome://tracing.

Steps: `step()` (also `deepcontext.step()`, and `dctx_step()` in C) ends the running step. With
PyTorch, each `optimizer.step()` of the first optimizer that steps does it too, until an explicit
step turns that detection off (deepcontext.steps), unless `--no-auto-step`.
"""

from __future__ import annotations

import ctypes
import os

from . import steps
from .errors import UserError

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))
DEFAULT_EVENTS = 1 << 17
MAX_STEPS = 1 << 20  # as in src/timeline/timeline.cpp
MAX_EVENTS = 1 << 24

_lib = None
_on = False
_auto = False  # optimizer.step() ends a step too
_step = 0  # the step that runs, as dctx_step() last returned it


def _bounded(limit: int):
    def parse(text: str) -> int:
        import argparse

        try:
            n = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
        if not 0 <= n <= limit:
            raise argparse.ArgumentTypeError(f"must be between 0 and {limit}, not {n}")
        return n

    return parse


def add_arguments(parser) -> None:
    g = parser.add_argument_group("Timeline")
    g.add_argument(
        "--timeline",
        type=_bounded(MAX_STEPS),
        metavar="LAST_N_STEPS",
        default=None,
        help="keep the events of the last N steps (operators, scopes, GPU kernels and copies, per "
        "thread and stream) in fixed-size rings and write them into the profile; export with "
        "`deepcontext export FILE --format chrome`. Steps end at deepcontext.timeline.step() or "
        "torch's optimizer.step()",
    )
    g.add_argument(
        "--timeline-events",
        type=_bounded(MAX_EVENTS),
        metavar="N",
        default=None,
        help=f"ring size per thread, in events of 32 bytes (default {DEFAULT_EVENTS})",
    )
    g.add_argument(
        "--no-auto-step",
        dest="timeline_auto_step",
        action="store_false",
        default=None,
        help="do not end a step at each torch optimizer.step(); only at deepcontext.timeline.step()",
    )


def _library():
    global _lib
    if _lib is None:
        from . import _core  # noqa: F401  (loads libdeepcontext.so: one copy in the process)

        lib = ctypes.CDLL(os.path.join(_PACKAGE_DIR, "libdeepcontext.so"))
        lib.dctx_timeline_configure.argtypes = [ctypes.c_uint32, ctypes.c_uint32]
        lib.dctx_timeline_configure.restype = ctypes.c_int
        lib.dctx_step.argtypes = []
        lib.dctx_step.restype = ctypes.c_uint32
        p64 = ctypes.POINTER(ctypes.c_uint64)
        lib.dctx_timeline_stats.argtypes = [p64, p64, p64, ctypes.POINTER(ctypes.c_uint32)]
        lib.dctx_timeline_stats.restype = None
        _lib = lib
    return _lib


def _count(options: dict, key: str, default: int, limit: int) -> int:
    value = options.get(key)
    if value is None:
        return default
    try:
        n = int(value)
    except (TypeError, ValueError):
        raise UserError(f"{key} must be a whole number, not {value!r}") from None
    if n < 0 or n > limit:
        raise UserError(f"{key} must be between 0 and {limit}, not {n}")
    return n


def activate(options: dict) -> None:
    """Configures the rings for this session (off unless options["timeline"] > 0)."""
    global _on, _auto
    count = _count(options, "timeline", 0, MAX_STEPS)
    events = _count(options, "timeline_events", DEFAULT_EVENTS, MAX_EVENTS)
    if count == 0 and not _on and _lib is None:
        return  # never on in this process: nothing to switch off
    if _library().dctx_timeline_configure(count, events) != 0:
        raise RuntimeError(f"could not configure the timeline ({count} steps, {events} events)")
    _on = count > 0
    _auto = _on and options.get("timeline_auto_step", True) is not False
    if _on:
        steps.listen(_on_step)


def deactivate() -> None:
    """Stops ending steps. The rings stay on: the final write, after this, reads them."""
    global _auto
    _auto = False
    steps.unlisten(_on_step)


def step() -> int:
    """Ends the running step (for every layer that counts steps: deepcontext.steps); returns the
    number of the step that starts now (the first call returns 1: step 0 is everything before
    it). Turns the optimizer.step() detection off."""
    steps.mark()  # _on_step ends the timeline's step when it listens
    return _step if _on else int(_library().dctx_step())


def _on_step(explicit: bool) -> None:
    global _step
    if explicit or _auto:
        _step = int(_library().dctx_step())


def stats() -> dict:
    """Counters of the rings: events recorded, overwritten, dropped; threads with a ring."""
    if _lib is None:
        return {"recorded": 0, "overwritten": 0, "dropped": 0, "threads": 0}
    r, o, d = ctypes.c_uint64(), ctypes.c_uint64(), ctypes.c_uint64()
    t = ctypes.c_uint32()
    _lib.dctx_timeline_stats(ctypes.byref(r), ctypes.byref(o), ctypes.byref(d), ctypes.byref(t))
    return {"recorded": r.value, "overwritten": o.value, "dropped": d.value, "threads": t.value}
