"""Starting and stopping a profiling session inside the profiled interpreter.

`start()` starts the native core (sampler, checkpoint thread), then activates the framework and GPU
integrations (deepcontext.torch_support, .gpu, .jax_support: each defers its work until its
framework is imported). The final profile is written by `stop()`, which also runs at interpreter
exit, on SIGTERM (then the signal's default action resumes) and for a forked child that profiles.
"""

from __future__ import annotations

import atexit
import importlib
import json
import os
import platform
import signal
import socket
import sys
import threading

# step_sampling last: it drives the torch and GPU layers, and stops first (its weights and metadata
# go in before they write their last values).
INTEGRATIONS = ("torch_support", "gpu", "jax_support", "timeline", "step_sampling")

_state: dict | None = None
_atexit_registered = False
_fork_registered = False
_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep


def _core():
    from . import _core as core

    return core


def default_output(stem: str = "deepcontext") -> str:
    return f"{stem}-{socket.gethostname()}-{os.getpid()}.dctx"


def integration_modules() -> list:
    modules = []
    for name in INTEGRATIONS:
        try:
            modules.append(importlib.import_module(f"deepcontext.{name}"))
        except ModuleNotFoundError as exc:
            if exc.name != f"deepcontext.{name}":
                raise
    return modules


def _versions() -> dict[str, str]:
    from . import __version__

    meta = {"python_version": platform.python_version(), "deepcontext_version": __version__}
    for mod in ("torch", "jax", "numpy"):
        m = sys.modules.get(mod)
        if m is not None and getattr(m, "__version__", None):
            meta[f"{mod}_version"] = str(m.__version__)
    return meta


def start(output: str | None = None, **options) -> str:
    """Start profiling this process; returns the output path. Options: interval_ms (10),
    native (False), wall (True), counters (True), checkpoint_s (60), fork_children ("off" or
    "profile"), plus those of the integrations (see `deepcontext run --help`)."""
    global _state, _atexit_registered, _fork_registered
    core = _core()
    if core.is_active():
        raise RuntimeError("deepcontext: profiling is already active in this process")
    output = os.path.abspath(output or default_output())
    from .distributed import rank_output  # <stem>.rank<r>-of<w>.dctx under torchrun & co.

    output = rank_output(output)
    opts = {
        "interval_ms": 10.0,
        "native": False,
        "wall": True,
        "counters": True,
        "checkpoint_s": 60.0,
        "fork_children": "off",
        "command": list(sys.argv),
    }
    opts.update({k: v for k, v in options.items() if v is not None})
    opts["output"] = output
    from .step_sampling import Settings

    Settings.from_options(opts)  # a bad --trace-steps is the caller's error, before we start
    # Import the integrations before sampling starts: their import is ours, not the program's.
    modules = integration_modules()
    core.start(
        output,
        _PACKAGE_DIR,
        threading.main_thread().ident or 0,
        interval_ms=float(opts["interval_ms"]),
        native=bool(opts["native"]),
        wall=bool(opts["wall"]),
        counters=bool(opts["counters"]),
        checkpoint_s=float(opts["checkpoint_s"]),
    )
    core.set_meta("command", json.dumps(opts["command"]))
    core.set_meta("cwd", os.getcwd())
    core.set_meta("host", socket.gethostname())
    enabled = ["cpu_time", "samples"] + (["wall_time"] if opts["wall"] else [])
    enabled += ["cycles", "instructions"] if opts["counters"] else []
    core.set_meta("metrics_enabled", json.dumps(enabled))
    for k, v in _versions().items():
        core.set_meta(k, v)
    _state = {"options": opts, "integrations": []}
    for module in modules:
        activate = getattr(module, "activate", None)
        if activate is not None:
            try:
                activate(opts)
                _state["integrations"].append(module)
            except Exception as exc:  # an integration must never break the program
                core.note(f"{module.__name__} disabled: {exc}")
    if not _atexit_registered:
        atexit.register(_stop_quietly)
        _atexit_registered = True
    if not _fork_registered and hasattr(os, "register_at_fork"):
        os.register_at_fork(after_in_child=_after_fork_child)
        _fork_registered = True
    _install_sigterm()
    return output


def stop() -> str | None:
    """Write the final profile and stop; returns its path (None if not profiling)."""
    global _state
    core = _core()
    if _state is None or not core.is_active():
        return None
    state, _state = _state, None
    for module in reversed(state["integrations"]):
        try:
            module.deactivate()
        except Exception as exc:
            core.note(f"{module.__name__}: deactivate failed: {exc}")
    for k, v in _versions().items():
        core.set_meta(k, v)
    core.stop()
    return state["options"]["output"]


def mark_step() -> None:
    """End a training step (`deepcontext.step()`, `profile.step()`): the bounded timeline keeps
    whole steps, step-sampled tracing counts them (deepcontext.steps; optimizer.step() detection
    stops)."""
    if _state is not None:
        from . import steps

        steps.mark()


def flush() -> None:
    """Write a checkpoint of the profile now (complete=0)."""
    if is_active():
        _core().flush()


def is_active() -> bool:
    return _state is not None and _core().is_active()


def options() -> dict:
    return dict(_state["options"]) if _state else {}


def _stop_quietly() -> None:
    try:
        stop()
    except Exception as exc:
        print(f"deepcontext: error: could not write the profile: {exc}", file=sys.stderr)


def _on_sigterm(signum, frame):
    _stop_quietly()
    # Resume the default action so the program ends exactly as it would have without us.
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


def _install_sigterm() -> None:
    if threading.current_thread() is not threading.main_thread():
        return
    try:
        if signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, None):
            signal.signal(signal.SIGTERM, _on_sigterm)
    except (ValueError, OSError):
        pass


def _after_fork_child() -> None:
    global _state
    if _state is None:
        return
    state, _state = _state, None
    core = _core()
    core.after_fork_child()
    opts = state["options"]
    if opts.get("fork_children") == "profile":
        stem, ext = os.path.splitext(opts["output"])
        child = {k: v for k, v in opts.items() if k != "output"}
        core.clear_metrics()
        start(f"{stem}.{os.getpid()}{ext or '.dctx'}", **child)
