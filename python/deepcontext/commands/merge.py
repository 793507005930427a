"""`deepcontext merge IN... -o OUT`: one profile from the per-process profiles of one job."""

from __future__ import annotations

import sys

from ..errors import UserError


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "merge",
        help="merge per-process profiles (workers, ranks) with per-node statistics",
        description="Merge profiles by call path: per node the sum of each metric, and its mean, "
        "min, max, standard deviation and imbalance (max/mean) across the inputs as metrics "
        "M:mean, M:min, M:max, M:std, M:imbalance. The inputs' metadata is kept.",
    )
    p.add_argument("inputs", nargs="+", metavar="IN", help="input .dctx profiles")
    p.add_argument("-o", "--output", required=True, metavar="OUT", help="the merged profile")
    p.add_argument(
        "-j", "--jobs", type=int, default=None, metavar="N", help="reader processes (default: CPUs)"
    )
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=main)


def main(args) -> int:
    from ..merge import merge_files

    if args.jobs is not None and args.jobs < 1:
        raise UserError("--jobs must be >= 1")
    if args.quiet:
        merger = merge_files(args.inputs, args.output, jobs=args.jobs)
    else:
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

        console = Console(stderr=True)
        with Progress(
            "merging",
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=console,
            transient=not console.is_terminal,
        ) as bar:
            task = bar.add_task("merge", total=len(args.inputs) + 1)

            def step(done: int, total: int, path: str) -> None:
                bar.update(task, completed=done)

            merger = merge_files(args.inputs, args.output, jobs=args.jobs, progress=step)
            bar.update(task, completed=len(args.inputs) + 1)
    print(
        f"deepcontext: merged {len(args.inputs)} profiles ({merger.n} nodes) into {args.output}",
        file=sys.stderr,
    )
    return 0
