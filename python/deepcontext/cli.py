"""The `deepcontext` command: dispatches to one module per subcommand (deepcontext.commands)."""

from __future__ import annotations

import argparse
import importlib
import sys

from . import __version__
from .commands import COMMANDS
from .errors import ProfileError, UserError


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The parser; with `only`, just that subcommand's module is imported (so `run` starts the
    profiled program without importing the readers, numpy and the GUI server)."""
    parser = argparse.ArgumentParser(
        prog="deepcontext",
        description="Profile PyTorch/JAX programs by Python line, operator, native frame and GPU kernel.",
    )
    parser.add_argument("--version", action="version", version=f"deepcontext {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name in COMMANDS:
        if only is not None and name != only:
            continue
        try:
            module = importlib.import_module(f"deepcontext.commands.{name}")
        except ModuleNotFoundError as exc:
            if exc.name == f"deepcontext.commands.{name}":
                continue  # command not built yet in this checkout
            raise
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    first = next((a for a in argv if not a.startswith("-")), None)
    parser = build_parser(first if first in COMMANDS else None)
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except (UserError, ProfileError) as exc:
        print(f"deepcontext: error: {exc}", file=sys.stderr)
        return getattr(exc, "status", 2)
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    raise SystemExit(main())
