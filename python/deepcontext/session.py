"""Starting and stopping a profiling session inside the profiled interpreter.

`start()` starts the native core (sampler, checkpoint thread), then activates the framework and GPU
integrations (deepcontext.torch_support, .gpu, .jax_support: each defers its work until its
framework is imported). The final profile is written by `stop()`, which also runs at interpreter
exit and on SIGTERM (then the signal's default action resumes). A forked child that profiles
(fork_children="profile") writes its own at those points and at os._exit(), the way every
multiprocessing child leaves. If the output cannot be written at the end, the profile goes to the
same name in the current directory or the temp directory instead. A run holds a lock beside its
output until it is written: a second run to the same output writes `<stem>.<pid>.dctx` instead.
os._exit() in the profiled process itself, a crash or SIGKILL leave the last checkpoint
(complete=0; the first after 5 s).
"""

from __future__ import annotations

import atexit
import fcntl
import importlib
import json
import os
import platform
import signal
import socket
import sys
import tempfile
import threading

# step_sampling last: it drives the torch and GPU layers, and stops first (its weights and metadata
# go in before they write their last values).
INTEGRATIONS = ("torch_support", "gpu", "jax_support", "timeline", "step_sampling")

_state: dict | None = None
_atexit_registered = False
_fork_registered = False
_stopping = False  # stop() is running
_pending_signal = 0  # SIGTERM that came while it ran
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
    output, lock = _claim(output)
    opts["output"] = output
    try:
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
    except BaseException:
        _release({"lock": lock}, output)
        raise
    core.set_meta("command", json.dumps(opts["command"]))
    core.set_meta("cwd", os.getcwd())
    core.set_meta("host", socket.gethostname())
    enabled = ["cpu_time", "samples"] + (["wall_time"] if opts["wall"] else [])
    enabled += ["cycles", "instructions"] if opts["counters"] else []
    core.set_meta("metrics_enabled", json.dumps(enabled))
    for k, v in _versions().items():
        core.set_meta(k, v)
    _state = {"options": opts, "integrations": [], "lock": lock}
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


def stop(write: bool = True) -> str | None:
    """Write the final profile and stop; returns its path (None if not profiling or not `write`).
    If the output cannot be written, the profile goes to a fallback path (said on stderr, which is
    returned); RuntimeError if that fails too."""
    global _state, _stopping
    core = _core()
    if _state is None or not core.is_active():
        return None
    state, _state = _state, None
    _stopping = True
    try:
        return _finish(core, state, write)
    finally:
        _release(state, state["options"]["output"])
        _stopping = False
        if _pending_signal:  # a SIGTERM waited for the profile
            _end_by(_pending_signal)


def _finish(core, state: dict, write: bool) -> str | None:
    for module in reversed(state["integrations"]):
        try:
            module.deactivate()
        except Exception as exc:
            core.note(f"{module.__name__}: deactivate failed: {exc}")
    for k, v in _versions().items():
        core.set_meta(k, v)
    output = state["options"]["output"]
    try:
        core.stop(write=write)
        return output if write else None
    except RuntimeError as exc:
        failure = str(exc)
    tried = []
    for path in _fallback_paths(output):
        try:
            core.write_final_to(path)
        except RuntimeError:
            tried.append(path)
            continue
        print(
            f"deepcontext: could not write {output} ({failure}); wrote {path} instead",
            file=sys.stderr,
        )
        return path
    also = f", nor {' or '.join(tried)}" if tried else ""
    raise RuntimeError(f"could not write the profile {output} ({failure}){also}")


def _lock_path(output: str) -> str:
    folder, name = os.path.split(output)
    return os.path.join(folder, f".{name}.lock")


def _claim(output: str) -> tuple[str, int | None]:
    """One run writes a given output at a time: it holds an exclusive lock on `.<name>.lock` beside
    it until its profile is written. A run that finds the lock held writes `<stem>.<pid><ext>`
    instead and says so; without this the last of two runs would silently replace the other's
    profile. Returns the output path and the lock's descriptor (None where no lock can be made:
    then the run goes on as before)."""
    path = _lock_path(output)
    while True:
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError:
            return output, None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            stem, ext = os.path.splitext(output)
            other = f"{stem}.{os.getpid()}{ext or '.dctx'}"
            print(
                f"deepcontext: {output} is being written by another run; this one writes {other}",
                file=sys.stderr,
            )
            return _claim(other)
        except OSError:
            os.close(fd)
            return output, None
        try:
            same = os.path.samestat(os.fstat(fd), os.stat(path))
        except OSError:
            same = False
        if same:
            return output, fd
        os.close(fd)  # its owner removed it as we locked it: the lock is on a new file now


def _release(state: dict, output: str) -> None:
    """The end of the claim: the lock file is removed while still locked, then unlocked."""
    fd = state.pop("lock", None)
    if fd is None:
        return
    try:
        os.unlink(_lock_path(output))
    except OSError:
        pass
    os.close(fd)


def _fallback_paths(output: str) -> list[str]:
    """Where the profile goes when its output cannot be written: the same name in the current
    directory, else in the temp directory; never over an existing file."""
    name = os.path.basename(output)
    paths = []
    for folder in (os.getcwd, tempfile.gettempdir):
        try:
            path = os.path.join(folder(), name)
        except OSError:  # the current directory was removed
            continue
        if path != output and path not in paths and not os.path.exists(path):
            paths.append(path)
    return paths


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
        print(f"deepcontext: error: {exc}", file=sys.stderr)


def _on_sigterm(signum, frame):
    global _pending_signal
    if _stopping:
        # It interrupts stop() (a multiprocessing worker that was ending when Pool.terminate()
        # came): the profile is written first, then stop() ends the process by this signal.
        _pending_signal = signum
        return
    _stop_quietly()
    _end_by(signum)


def _end_by(signum: int) -> None:
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
    if state.get("lock") is not None:
        os.close(state["lock"])  # the parent's: it stays locked and in place while the parent runs
    core = _core()
    core.after_fork_child()
    opts = state["options"]
    if opts.get("fork_children") == "profile":
        stem, ext = os.path.splitext(opts["output"])
        child = {k: v for k, v in opts.items() if k != "output"}
        core.clear_metrics()
        start(f"{stem}.{os.getpid()}{ext or '.dctx'}", **child)
        os._exit = _os_exit_writing_profile


_os_exit = os._exit


def _os_exit_writing_profile(status: int) -> None:
    """os._exit in a forked child that profiles: multiprocessing's children (Process, Pool and
    DataLoader workers) all leave through it, where atexit does not run."""
    try:
        _stop_quietly()
    finally:
        _os_exit(status)
