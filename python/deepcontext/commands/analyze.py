"""`deepcontext analyze FILE`: run the analyzer's rules and print ranked findings (text or JSON)."""

from __future__ import annotations

import argparse
import json
import sys

from ..errors import UserError
from ..partial import COMPLETE, partial_note


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "analyze",
        help="ranked findings: what is slow, why, what to change, and the estimated gain",
        description="Run the analyzer's rules over a profile and print findings ranked by estimated saving.",
    )
    p.add_argument("file", metavar="FILE", nargs="?", help="a .dctx profile")
    p.add_argument(
        "--format", choices=("text", "json"), default="text", help="output format (default: text)"
    )
    p.add_argument(
        "--rule",
        action="append",
        dest="rules",
        metavar="ID",
        help="run only this rule (repeatable)",
    )
    p.add_argument(
        "--min-share",
        type=float,
        default=0.0,
        metavar="PCT",
        help="hide findings whose region is below PCT %% of the total time (default: 0)",
    )
    p.add_argument(
        "--rules-file",
        action="append",
        default=[],
        metavar="PY",
        help="load custom rules from a Python file (repeatable); they run with the built-in rules",
    )
    p.add_argument("--list-rules", action="store_true", help="list the rules and exit")
    p.add_argument(
        "-o", "--output", metavar="PATH", help="write to PATH instead of standard output"
    )
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    from ..analyzer import (
        REGISTRY,
        analyze,
        builtin_rules,
        load_rules_file,
        render_json,
        render_text,
    )

    builtin_rules()
    custom = []
    for path in args.rules_file:
        custom += load_rules_file(path)
    if args.list_rules:
        for r in REGISTRY.values():
            print(f"{r.id:26} {r.title}")
        return 0
    if not args.file:
        raise UserError("analyze: a profile FILE is required")
    if not 0 <= args.min_share <= 100:
        raise UserError(f"--min-share {args.min_share}: expected a percentage between 0 and 100")
    result = analyze(args.file, rules=args.rules, min_share=args.min_share / 100.0)
    partial = partial_note(result.meta)
    if args.format == "json" and partial:  # a checkpoint: meta.complete "0", and the note
        doc = result.to_dict()
        doc["meta"][COMPLETE] = result.meta[COMPLETE]
        doc["partial"] = partial
        out = json.dumps(doc, indent=2, default=str) + "\n"
    elif args.format == "json":
        out = render_json(result)
    else:
        from ..render import printable

        text = (f"note: {partial}\n" if partial else "") + render_text(result)
        out = "\n".join(printable(line) for line in text.split("\n"))
    if args.output:
        try:
            with open(args.output, "w") as f:
                f.write(out)
        except OSError as e:
            raise UserError(f"{args.output}: cannot write ({e.strerror})") from None
    else:
        sys.stdout.write(out)
    return 0
