"""`deepcontext diff A B`: call paths whose metric changed between two profiles, ranked."""

from __future__ import annotations

import json
import sys


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "diff",
        help="compare two profiles path by path",
        description="Per call path: the change of the metric from A to B (absolute and relative), "
        "new and vanished paths, ranked by the change of the exclusive value. A profile diffed "
        "against itself prints nothing.",
    )
    p.add_argument("a", metavar="A", help="the baseline profile")
    p.add_argument("b", metavar="B", help="the profile to compare with A")
    p.add_argument("--metric", "-m", metavar="M", help="metric (default: A's main metric)")
    p.add_argument("--format", choices=("text", "json"), default="text")
    p.add_argument("--limit", type=int, default=30, metavar="N", help="text: N paths at most")
    p.add_argument(
        "--min-share",
        type=float,
        default=0.0,
        metavar="PCT",
        help="leave out paths whose change is below PCT percent of the larger total",
    )
    p.add_argument(
        "--import-frames",
        action="store_true",
        help="keep the frames of Python's import system in the paths (spliced out by default); "
        "implies --import-time",
    )
    p.add_argument(
        "--import-time",
        action="store_true",
        help="include the time spent importing modules (start-up), left out by default so that "
        "the ranking is of changes in the program's work",
    )
    p.set_defaults(func=main)


def main(args) -> int:
    from ..diff import diff_profiles
    from ..reader import load
    from ..render import format_value, frame_dict, frame_label, printable

    a, b = load(args.a), load(args.b)
    res = diff_profiles(
        a, b, args.metric, import_frames=args.import_frames, import_time=args.import_time
    )
    if args.min_share > 0:
        cut = max(abs(res.total_a), abs(res.total_b)) * args.min_share / 100.0
        res.entries = [
            e for e in res.entries if max(abs(e.delta_exclusive), abs(e.delta_inclusive)) >= cut
        ]
    if args.format == "json":
        doc = {
            "format": "deepcontext-diff",
            "version": 1,
            "a": args.a,
            "b": args.b,
            "metric": {"name": res.metric, "unit": res.unit},
            "total_a": res.total_a,
            "total_b": res.total_b,
            "import_time_left_out": {"a": res.import_a, "b": res.import_b},
            "entries": [
                {
                    "status": e.status,
                    "path": [frame_dict(f) for f in e.path],
                    "labels": [frame_label(f) for f in e.path],
                    "a": {"inclusive": e.a_inclusive, "exclusive": e.a_exclusive},
                    "b": {"inclusive": e.b_inclusive, "exclusive": e.b_exclusive},
                    "delta_inclusive": e.delta_inclusive,
                    "delta_exclusive": e.delta_exclusive,
                    "relative": e.relative,
                    "a_node": e.a_node,
                    "b_node": e.b_node,
                }
                for e in res.entries
            ],
        }
        sys.stdout.write(json.dumps(doc, separators=(",", ":")) + "\n")
        return 0
    if not res.entries:
        return 0
    unit = res.unit

    def fv(v: float) -> str:
        return ("+" if v > 0 else "") + format_value(v, unit)

    total_change = res.total_b - res.total_a
    rel = f" ({total_change / res.total_a:+.1%})" if res.total_a else ""
    print(
        f"{res.metric}: A {format_value(res.total_a, unit)} -> B {format_value(res.total_b, unit)}"
        f", {fv(total_change)}{rel}; {len(res.entries)} paths changed"
    )
    if res.import_a or res.import_b:
        print(
            f"import time left out (--import-time): A {format_value(res.import_a, unit)}, "
            f"B {format_value(res.import_b, unit)}"
        )
    print()
    rows = []
    for e in res.entries[: args.limit]:
        r = e.relative
        rows.append(
            [
                fv(e.delta_exclusive),
                fv(e.delta_inclusive),
                "new" if e.status == "new" else ("gone" if r == -1.0 else f"{r:+.0%}"),
                format_value(e.a_inclusive, unit),
                format_value(e.b_inclusive, unit),
                " > ".join(printable(frame_label(f)) for f in e.path),
            ]
        )
    header = ["d excl", "d incl", "rel", "A incl", "B incl"]
    widths = [max(len(h), *(len(r[k]) for r in rows)) for k, h in enumerate(header)]
    print("  ".join(h.rjust(w) for h, w in zip(header, widths, strict=True)) + "  path")
    for r in rows:
        print("  ".join(c.rjust(w) for c, w in zip(r[:5], widths, strict=True)) + "  " + r[5])
    if len(res.entries) > args.limit:
        print(f"... {len(res.entries) - args.limit} more (--limit)")
    return 0
