"""`deepcontext report FILE`: the profile as a top-down, bottom-up or flat tree, as text or JSON."""

from __future__ import annotations

import contextlib
import json
import sys

import numpy as np

from ..errors import UserError
from ..partial import partial_note
from ..reader import read_meta_json
from ..render import (
    ProfileInfo,
    Tree,
    combine_notes,
    flat_rows,
    format_share,
    format_value,
    frame_dict,
    frame_label,
    invert,
    json_tree_text,
    load_tree,
    min_share_value,
    printable,
    text_tree,
    view,
)

VIEWS = ("top-down", "bottom-up", "flat")


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "report",
        help="print a profile as a tree (top-down, bottom-up, flat)",
        description="Print a .dctx profile as an indented tree with inclusive share, inclusive and "
        "exclusive values, or as JSON (docs/format.md, 'JSON report').",
    )
    p.add_argument("file", help="a .dctx profile")
    p.add_argument(
        "--metric",
        "-m",
        action="append",
        default=[],
        metavar="M",
        help="metric to show (repeat or comma-separate; the first one orders and prunes the tree; "
        "default: gpu_time, cpu_time, op_time or wall_time, the first that has values)",
    )
    p.add_argument("--view", choices=VIEWS, default="top-down")
    p.add_argument("--depth", type=int, default=None, metavar="N", help="show N levels at most")
    p.add_argument(
        "--min-share",
        "--threshold",
        dest="min_share",
        type=float,
        default=None,
        metavar="PCT",
        help="hide nodes below PCT percent of the total (default 1 for text, 0 for json)",
    )
    p.add_argument("--format", choices=("text", "json"), default="text")
    p.add_argument(
        "--focus",
        "--include",
        dest="focus",
        metavar="REGEX",
        help="only the subtrees under frames whose label (or file) matches, merged",
    )
    p.add_argument(
        "--hide",
        action="append",
        default=[],
        metavar="KIND",
        help="splice out frames of these kinds (python, native, operator, ...; repeatable)",
    )
    p.add_argument(
        "--exclude", metavar="REGEX", help="splice out frames whose label matches (children stay)"
    )
    p.add_argument(
        "--import-frames",
        action="store_true",
        help="keep the frames of Python's import system (<frozen importlib._bootstrap>), which "
        "are spliced out by default: an import's time shows under its import line either way",
    )
    p.add_argument("--limit", type=int, default=None, metavar="N", help="flat view: N rows at most")
    p.add_argument("-o", "--output", metavar="OUT", help="write to OUT instead of stdout")
    p.set_defaults(func=main)


def _metrics(args, profile) -> list[str]:
    names = [m.strip() for v in args.metric for m in v.split(",") if m.strip()]
    if not names:
        if not profile.metrics:
            raise UserError(f"{profile.path}: the profile has no metrics")
        names = [profile.default_metric()]
    for m in names:
        if m not in profile.metrics:
            known = ", ".join(profile.metrics) or "none"
            raise UserError(f"unknown metric {m!r} (this profile has: {known})")
    return list(dict.fromkeys(names))


def build_view(tree: Tree, args) -> Tree:
    """The top-down tree after --focus, --hide, --exclude and --import-frames."""
    return view(
        tree,
        import_frames=args.import_frames,
        hide_kinds=args.hide,
        exclude=args.exclude,
        focus=args.focus,
    )


def main(args) -> int:
    if args.depth is not None and args.depth < 0:
        raise UserError("--depth must be >= 0")
    with _progress(f"reading {args.file}"):
        tree = load_tree(args.file, lambda info: _metrics(args, info))
    profile: ProfileInfo = tree.profile
    metrics = list(tree.metrics)
    units = {m: profile.metrics[m].unit for m in metrics}
    min_share = args.min_share
    if min_share is None:
        min_share = 1.0 if args.format == "text" else 0.0
    tree = build_view(tree, args)
    primary = metrics[0]
    if args.view == "bottom-up":
        tree = invert(
            tree, primary, max_depth=args.depth, min_value=min_share_value(tree, primary, min_share)
        )
    if args.view == "flat":
        tree.per_thread = False  # a frame's row adds up its time in every thread
    total = tree.share_total(primary)
    min_value = min_share_value(tree, primary, min_share)
    if args.format == "json":
        doc = {
            "format": "deepcontext-report",
            "version": 1,
            "view": args.view,
            "meta": profile.meta,
            "metrics": [
                {"name": m, "unit": units[m], "combine": tree.metrics[m].rule.value, "total": t}
                for m in metrics
                for t in [tree.share_total(m)]
            ],
            "notes": combine_notes(tree, metrics),
        }
        if args.view == "flat":
            doc["rows"] = _flat_json(tree, metrics, min_value, args.limit)
            text = json.dumps(doc, separators=(",", ":"))
        else:
            # "tree" is the last key; the nested tree is written piece by piece (render)
            head = json.dumps(doc, separators=(",", ":"))[:-1]
            tree_text = json_tree_text(tree, metrics, max_depth=args.depth, min_share=min_share)
            text = head + ',"tree":' + "".join(tree_text) + "}"
        lines = [text]
    else:
        lines = _header(profile, tree, metrics, units, args.view)
        if args.view == "flat":
            lines += _flat_text(tree, metrics, units, total, min_value, args.limit)
        else:
            lines += text_tree(
                tree, metrics, max_depth=args.depth, min_share=min_share, units=units
            )
        lines = [printable(line) for line in lines]  # names from the program, shown safely
    out = "\n".join(lines) + "\n"
    if args.output:
        with open(args.output, "w") as f:
            f.write(out)
    elif args.format == "text" and sys.stdout.isatty():
        _print_rich(lines)
    else:
        sys.stdout.write(out)
    return 0


def _progress(what: str):
    """A transient status line on a terminal while a large profile loads; nothing otherwise."""
    if not sys.stderr.isatty():
        return contextlib.nullcontext()
    from rich.console import Console

    return Console(stderr=True).status(what)


def _print_rich(lines: list[str]) -> None:
    """On a terminal: the header bold, notes yellow, tree rows cropped to the width."""
    from rich.console import Console
    from rich.text import Text

    console = Console(highlight=False)
    for i, line in enumerate(lines):
        style = "bold" if i < 2 else "yellow"
        if i < 2 or line.startswith("note: "):
            console.print(Text(line, style=style or ""))  # wrapped, never cut
        else:
            console.print(Text(line), overflow="crop", no_wrap=True)


def _header(profile, tree, metrics, units, view) -> list[str]:
    argv = read_meta_json(profile.meta, "command")
    cmd = " ".join(map(str, argv)) if argv is not None else profile.meta.get("command", "")
    totals = ", ".join(
        f"{m} {format_value(float(tree.metrics[m].inc[0]), units[m])}" for m in metrics
    )
    lines = [f"{profile.path}: {cmd}" if cmd else profile.path, f"{view}; total {totals}"]
    partial = partial_note(profile.meta)
    if partial:
        lines.append(f"note: {partial}")
    for note in profile.notes + combine_notes(tree, metrics):
        lines.append(f"note: {note}")
    lines.append("")
    return lines


def _flat_selected(tree, metrics, min_value, limit):
    primary = metrics[0]
    rows = flat_rows(tree)

    def values(r) -> tuple[float, float]:  # unknown values (None) sort as the largest
        pm = r["metrics"][primary]
        return tuple(  # type: ignore[return-value]
            np.inf if pm[k] is None else pm[k] for k in ("exclusive", "inclusive")
        )

    rows.sort(key=lambda r: tuple(-v for v in values(r)))
    if min_value > 0:
        rows = [r for r in rows if max(values(r)) >= min_value]
    if limit is not None:
        rows = rows[:limit]
    return rows


def _flat_text(tree, metrics, units, total, min_value, limit) -> list[str]:
    rows = _flat_selected(tree, metrics, min_value, 50 if limit is None else limit)
    primary = metrics[0]
    header = ["excl %", "incl %"] + [f"{m} {p}" for m in metrics for p in ("excl", "incl")]
    table = []
    for r in rows:
        pm = r["metrics"][primary]
        cells = [format_share(_nan(pm["exclusive"]), total)]
        cells.append(format_share(_nan(pm["inclusive"]), total))
        for m in metrics:
            cells.append(format_value(_nan(r["metrics"][m]["exclusive"]), units[m]))
            cells.append(format_value(_nan(r["metrics"][m]["inclusive"]), units[m]))
        table.append((cells, frame_label(tree.frames[r["frame"]])))
    widths = [len(h) for h in header]
    for cells, _ in table:
        widths = [max(w, len(c)) for w, c in zip(widths, cells, strict=True)]
    lines = ["  ".join(h.rjust(w) for h, w in zip(header, widths, strict=True)) + "  frame"]
    for cells, label in table:
        lines.append(
            "  ".join(c.rjust(w) for c, w in zip(cells, widths, strict=True)) + "  " + label
        )
    return lines


def _nan(v: float | None) -> float:
    return float("nan") if v is None else v


def _flat_json(tree, metrics, min_value, limit) -> list[dict]:
    out = []
    for r in _flat_selected(tree, metrics, min_value, limit):
        f = tree.frames[r["frame"]]
        out.append({"frame": frame_dict(f), "label": frame_label(f), "metrics": r["metrics"]})
    return out
