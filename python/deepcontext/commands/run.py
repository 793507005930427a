"""`deepcontext run [options] script.py args...` (or a directory or zip file with __main__.py, or
`-m module`, or `-- python script.py`).

The program runs in this interpreter, with profiling started first, exactly as `python script.py`
would run it (sys.argv, sys.path[0], __main__); its exit status is ours, and an uncaught
KeyboardInterrupt ends us by SIGINT as it ends python. Before it starts, the
output's directory must be writable; a program or module that cannot be found is one line of
error with python's exit status, and no profile.
"""

from __future__ import annotations

import argparse
import os
import pkgutil
import runpy
import shutil
import sys
import tempfile
import traceback

from ..errors import UserError


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "run",
        help="profile a Python program",
        description="Profile a Python program and write a .dctx profile.",
    )
    p.add_argument("-o", "--output", help="profile path (default: <script>-<host>-<pid>.dctx)")
    p.add_argument(
        "--interval",
        dest="interval_ms",
        type=float,
        default=10.0,
        metavar="MS",
        help="sampling interval in milliseconds (default 10)",
    )
    p.add_argument("--native", action="store_true", help="record native frames (libunwind)")
    p.add_argument("--no-wall", dest="wall", action="store_false", help="do not record wall time")
    p.add_argument(
        "--no-counters",
        dest="counters",
        action="store_false",
        help="do not read hardware counters (perf_event)",
    )
    p.add_argument(
        "--checkpoint",
        dest="checkpoint_s",
        type=float,
        default=60.0,
        metavar="S",
        help="write a checkpoint (a partial profile, kept if the program is killed) 5 s after "
        "the start, then every S seconds (0: never; default 60)",
    )
    p.add_argument(
        "--fork-children",
        choices=["off", "profile"],
        default="off",
        help="forked children (e.g. DataLoader workers): not profiled, or each writes "
        "<output>.<pid>.dctx",
    )
    p.add_argument(
        "--metrics",
        metavar="LIST",
        help="sampled metrics to record, comma-separated, of "
        + ", ".join(SAMPLED_METRICS)
        + " (default: all that the machine allows; cpu_time is always recorded)",
    )
    p.add_argument("-q", "--quiet", action="store_true", help="print nothing but errors")
    p.add_argument("-m", dest="module", metavar="MODULE", help="run a library module as a script")
    from ..session import integration_modules

    for module in integration_modules():
        add = getattr(module, "add_arguments", None)
        if add is not None:
            add(p)
    p.add_argument("program", nargs=argparse.REMAINDER, help="script and its arguments")
    p.set_defaults(func=main)


SAMPLED_METRICS = ("cpu_time", "wall_time", "cycles", "instructions")


def _apply_metrics(args) -> None:
    """--metrics: wall_time off unless listed, hardware counters off unless one is listed."""
    if not args.metrics:
        return
    wanted = {m.strip() for m in args.metrics.split(",") if m.strip()}
    unknown = sorted(wanted - set(SAMPLED_METRICS))
    if unknown:
        raise UserError(
            f"unknown metric {', '.join(unknown)}: choose from {', '.join(SAMPLED_METRICS)}"
        )
    args.wall = args.wall and "wall_time" in wanted
    args.counters = args.counters and bool(wanted & {"cycles", "instructions"})


def _split_program(args) -> tuple[str | None, str | None, list[str]]:
    """Returns (script, module, argv rest) from `script.py a b`, `-m mod a`, `-- python x.py a`."""
    prog = list(args.program)
    if prog and prog[0] == "--":
        prog = prog[1:]
    if args.module:
        return None, args.module, prog
    if prog and os.path.basename(prog[0]).startswith("python") and not prog[0].endswith(".py"):
        prog = prog[1:]
        if prog and prog[0] == "-m":
            if len(prog) < 2:
                raise UserError("-m needs a module name")
            return None, prog[1], prog[2:]
    if not prog:
        raise UserError("no program given: deepcontext run script.py [args...]")
    script = prog[0]
    if not os.path.exists(script):
        found = shutil.which(script) if os.sep not in script else None
        if not found:
            raise UserError(f"no such file: {script}")
        script = found
    return script, None, prog[1:]


def _check_output(output: str) -> None:
    """The profile can be written where asked: found before the program runs, not after."""
    path = os.path.abspath(output)
    if os.path.isdir(path):
        raise UserError(f"cannot write the profile to {output}: it is a directory")
    folder = os.path.dirname(path)
    try:
        fd, probe = tempfile.mkstemp(dir=folder, prefix=".deepcontext-probe-")
    except OSError as exc:
        raise UserError(f"cannot write the profile to {output}: {folder}: {exc.strerror}") from None
    os.close(fd)
    os.remove(probe)


def _not_found(exc: ImportError) -> bool:
    """The ImportError is runpy's own (no such module, no __main__), raised before any of the
    program's code ran: the traceback below our call is all in runpy."""
    tb = exc.__traceback__.tb_next if exc.__traceback__ else None
    if tb is None:
        return False
    while tb is not None:
        if tb.tb_frame.f_globals.get("__name__") != "runpy":
            return False
        tb = tb.tb_next
    return True


def _is_native(path: str) -> bool:
    if path.endswith(".py") or os.path.isdir(path):
        return False
    with open(path, "rb") as fh:
        return fh.read(4) == b"\x7fELF"


def _exec_native(exe: str, argv: list[str], output: str, args) -> int:
    """Replace this process by the native program with the core preloaded into it
    (src/preload/preload.cpp): its exit status and signals are the program's own."""
    lib = os.path.join(
        os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "libdeepcontext_preload.so"
    )
    if not os.path.exists(lib):
        raise UserError(f"{exe} is a native executable and {lib} is missing: reinstall deepcontext")
    env = dict(os.environ)
    env["LD_PRELOAD"] = lib + (":" + env["LD_PRELOAD"] if env.get("LD_PRELOAD") else "")
    env["DEEPCONTEXT_PRELOAD_OUTPUT"] = os.path.abspath(output)
    env["DEEPCONTEXT_PRELOAD_INTERVAL_MS"] = str(args.interval_ms)
    env["DEEPCONTEXT_PRELOAD_CHECKPOINT_S"] = str(args.checkpoint_s)
    if args.quiet:
        env["DEEPCONTEXT_PRELOAD_QUIET"] = "1"
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execve(exe, [exe, *argv], env)
    except OSError as exc:
        raise UserError(f"cannot run {exe}: {exc.strerror}") from None
    return 127  # not reached


def main(args) -> int:
    from .. import session

    _apply_metrics(args)
    script, module, rest = _split_program(args)
    stem = (
        os.path.splitext(os.path.basename(os.path.normpath(script)))[0]
        if script
        else (module or "").split(".")[-1]
    )
    output = args.output or session.default_output(stem or "deepcontext")
    _check_output(output)
    if script and _is_native(script):
        return _exec_native(script, rest, output, args)
    options = {
        k: v
        for k, v in vars(args).items()
        if k not in ("func", "program", "module", "output", "command", "metrics")
    }
    if script:
        sys.argv = [script, *rest]
        # A directory or zip file is run by its __main__ and is itself sys.path[0], as in
        # `python DIR` (runpy.run_path tells them apart the same way).
        top = os.path.abspath(script)
        sys.path[0] = top if pkgutil.get_importer(top) is not None else os.path.dirname(top)
    else:
        sys.argv = [module, *rest]
        sys.path[0] = os.getcwd()
    options["command"] = list(sys.argv)
    output = session.start(output, **options)
    status = 0
    not_found = None
    interrupted = None
    try:
        if script:
            runpy.run_path(script, run_name="__main__")
        else:
            runpy.run_module(module, run_name="__main__", alter_sys=True)
    except SystemExit as exc:
        code = exc.code
        if code is None:
            status = 0
        elif isinstance(code, int):
            status = code
        else:
            print(code, file=sys.stderr)
            status = 1
    except KeyboardInterrupt as exc:
        # Re-raised below once the profile is written: python then prints it and ends by SIGINT
        # (after the program's atexit handlers), as `python script.py` would.
        interrupted = exc
    except ImportError as exc:
        if _not_found(exc):
            not_found = exc
        else:
            traceback.print_exc()
        status = 1
    except BaseException:
        traceback.print_exc()
        status = 1
    finally:
        try:
            written = session.stop(write=not_found is None)
        except RuntimeError as exc:  # not even the fallback paths could be written
            print(f"deepcontext: error: {exc}", file=sys.stderr)
            written = None
    if not_found is not None:
        raise UserError(str(not_found), status=1)
    if written == output and not args.quiet:  # (a fallback path has been said by stop())
        print(f"deepcontext: wrote {written}", file=sys.stderr)
    if interrupted is not None:
        raise interrupted
    return status
