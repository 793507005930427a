"""`deepcontext view FILE [BASELINE]`: open the web GUI for a profile on 127.0.0.1."""

from __future__ import annotations

import os
import sys
import webbrowser

from ..errors import UserError


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "view",
        help="open the web GUI for a profile (flame graph, tables, source, diff, findings)",
        description=(
            "Serve the web GUI for FILE on 127.0.0.1 and print its URL (with a per-run token). "
            "Give BASELINE to compare FILE against it in the diff view. Over SSH, forward the "
            "port (ssh -L PORT:127.0.0.1:PORT host) and open the printed URL locally."
        ),
    )
    p.add_argument("file", metavar="FILE", help="profile to show (.dctx)")
    p.add_argument(
        "baseline", metavar="BASELINE", nargs="?", help="baseline profile for the diff view"
    )
    p.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (default: a free one)")
    p.add_argument(
        "--no-browser", action="store_true", help="print the URL only; do not open a browser"
    )
    p.add_argument(
        "--rules-file",
        action="append",
        default=[],
        dest="rules_files",
        metavar="PY",
        help="custom analyzer rules for the findings view, as for deepcontext analyze (repeatable)",
    )
    p.set_defaults(func=main)


def _has_display() -> bool:
    if sys.platform in ("darwin", "win32"):
        return True
    return bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))


def main(args) -> int:
    from ..gui_server import GuiServer

    if not 0 <= args.port <= 65535:
        raise UserError(f"--port {args.port}: not a port number")
    for f in args.rules_files:
        if not os.path.isfile(f):
            raise UserError(f"{f}: no such rules file")
    server = GuiServer(args.file, args.baseline, port=args.port, rules_files=args.rules_files)
    if not server.info()["static_built"]:
        server.close()
        raise UserError("the GUI is not built in this install (run scripts/build-gui.sh)")
    print(f"DeepContext GUI: {server.url}", flush=True)
    print(
        f"(serving on 127.0.0.1 only; from another machine: ssh -L {server.port}:127.0.0.1:"
        f"{server.port} <this host>, then open the URL; Ctrl-C stops)",
        flush=True,
    )
    if not args.no_browser and _has_display():
        try:
            webbrowser.open(server.url)
        except webbrowser.Error:
            pass
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.httpd.server_close()
    return 0
