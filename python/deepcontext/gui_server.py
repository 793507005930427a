"""The GUI's local HTTP server: the built web app plus a small JSON/binary API over loaded profiles.

Security model (docs/gui.md):
- it listens on 127.0.0.1 only (reach it from another machine through an SSH port-forward);
- every request path starts with a random per-run token (`/<token>/...`); anything else gets 403,
  so another local user or a web page in the browser cannot read the profile without the URL;
- the source endpoint reads only files that the profile's frames name, with no `..` component,
  as regular files, and follows a symlink only when its target stays in the link's own directory
  or under the profiled program's working directory;
- the app itself comes from the installed package (deepcontext/gui_static); nothing is fetched.

API (all under /<token>/api/, `p` = 0 for the profile, 1 for the baseline):
- info: profiles' paths, meta, metrics, node and frame counts, default metric, whether findings
  and a diff are available;
- frames?p=: {"kind": [...], "name": [...], "file": [...], "line": [...], "module": [...]}, one entry
  per frame, indexed by the dense frame index the node arrays use;
- nodes?p=: binary, little-endian int32 parent[n] then int32 frame[n] (parent[0] = -1);
- metrics?p=: binary, for each metric of info's order that is not "empty" (no value anywhere):
  float64 inclusive[n] then exclusive[n];
- source?p=&file=: {"file", "text"} for a file named by the profile;
- findings: the analyzer's findings for the profile (empty when the analyzer is not installed);
- diff?metric=&import_frames=1: the ranked path differences (deepcontext.diff.diff_profiles,
  baseline -> profile; Python's import-system frames kept with import_frames=1).
"""

from __future__ import annotations

import json
import mimetypes
import os
import secrets
import stat
import sys
import threading
from array import array
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, unquote, urlsplit

from .errors import UserError
from .reader import FRAME_KINDS, Profile, load

STATIC_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "gui_static")
MAX_SOURCE_BYTES = 8 * 1024 * 1024


class Refused(Exception):
    """A request the server will not answer: (HTTP status, one-line reason)."""

    def __init__(self, status: int, reason: str):
        super().__init__(reason)
        self.status = status
        self.reason = reason


class ProfileData:
    """One loaded profile with its API payloads built once and cached."""

    def __init__(self, profile: Profile):
        self.profile = profile
        self._lock = threading.Lock()
        self._frames_json: bytes | None = None
        self._nodes_bin: bytes | None = None
        self._metrics_bin: bytes | None = None
        self.frame_index: dict[int, int] = {}
        fids = sorted(profile.frames)
        self.frame_ids = fids
        self.frame_index = {fid: i for i, fid in enumerate(fids)}
        self.files = {f.file for f in profile.frames.values() if f.file}
        self._findings: dict | None = None
        values = getattr(profile, "_values", None)
        # metrics with no value anywhere (e.g. hardware counters the kernel refused) are not sent
        self.empty_metrics = {
            m
            for m in profile.metrics
            if isinstance(values, dict)
            and not any(v[4] or v[0] for v in values.get(m, {}).values())
        }

    def info(self) -> dict:
        p = self.profile
        return {
            "path": os.path.abspath(p.path),
            "meta": p.meta,
            "notes": _notes(p),
            "metrics": [
                {
                    "name": m.name,
                    "unit": m.unit,
                    "description": m.description,
                    "empty": m.name in self.empty_metrics,
                }
                for m in p.metrics.values()
            ],
            "nodes": len(p),
            "frames": len(self.frame_ids),
            "default_metric": p.default_metric(),
        }

    def frames_json(self) -> bytes:
        with self._lock:
            if self._frames_json is None:
                cols: dict[str, list] = {
                    "kind": [],
                    "name": [],
                    "file": [],
                    "line": [],
                    "module": [],
                }
                for fid in self.frame_ids:
                    f = self.profile.frames[fid]
                    cols["kind"].append(f.kind)
                    cols["name"].append(f.name)
                    cols["file"].append(f.file)
                    cols["line"].append(f.line)
                    cols["module"].append(f.module)
                self._frames_json = json.dumps(cols, separators=(",", ":")).encode()
            return self._frames_json

    def nodes_bin(self) -> bytes:
        with self._lock:
            if self._nodes_bin is None:
                p = self.profile
                parent = array("i", p.node_parent)
                parent[0] = -1
                idx = self.frame_index
                frame = array("i", [idx.get(f, 0) for f in p.node_frame])
                if sys.byteorder != "little":
                    parent.byteswap()
                    frame.byteswap()
                self._nodes_bin = parent.tobytes() + frame.tobytes()
            return self._nodes_bin

    def metrics_bin(self) -> bytes:
        with self._lock:
            if self._metrics_bin is None:
                p = self.profile
                n = len(p)
                parts = []
                for name in p.metrics:
                    if name in self.empty_metrics:
                        continue
                    inc = array("d", bytes(8 * n))
                    exc = array("d", bytes(8 * n))
                    values = getattr(p, "_values", None)
                    if isinstance(values, dict) and name in values:
                        for node, v in values[name].items():
                            if 0 <= node < n:
                                exc[node] = v[0]
                                inc[node] = v[4]
                    else:  # a reader without the internal table: the public, slower way
                        for node in range(n):
                            s = p.stats(node, name)
                            inc[node] = s["inclusive"]
                            exc[node] = s["exclusive"]
                    if sys.byteorder != "little":
                        inc.byteswap()
                        exc.byteswap()
                    parts.append(inc.tobytes())
                    parts.append(exc.tobytes())
                self._metrics_bin = b"".join(parts)
            return self._metrics_bin

    def findings(self) -> dict:
        with self._lock:
            if self._findings is None:
                self._findings = _run_analyzer(self.profile)
            return self._findings

    def source(self, requested: str) -> dict:
        """The text of a source file named by the profile; Refused for anything else."""
        if not requested or "\x00" in requested:
            raise Refused(400, "no file given")
        if requested not in self.files:
            raise Refused(403, "file is not referenced by this profile")
        parts = requested.replace("\\", "/").split("/")
        if ".." in parts:
            raise Refused(403, "path with '..' refused")
        cwd = self.profile.meta.get("cwd") or ""
        path = (
            requested if os.path.isabs(requested) else os.path.join(cwd or os.getcwd(), requested)
        )
        path = os.path.normpath(path)
        real = os.path.realpath(path)
        if real != path:
            allowed = [os.path.realpath(os.path.dirname(path))]
            if cwd and os.path.realpath(cwd) != "/":
                allowed.append(os.path.realpath(cwd))
            if not any(_inside(real, root) for root in allowed):
                raise Refused(
                    403, "symlink to a file outside the profiled program's folders refused"
                )
        try:
            st = os.stat(real)
        except OSError:
            raise Refused(404, "file not found on this machine") from None
        if not stat.S_ISREG(st.st_mode):
            raise Refused(403, "not a regular file")
        if st.st_size > MAX_SOURCE_BYTES:
            raise Refused(413, "file too large to show")
        with open(real, "rb") as f:
            text = f.read().decode("utf-8", errors="replace")
        return {"file": requested, "path": real, "text": text}


def _inside(path: str, root: str) -> bool:
    root = root.rstrip("/")
    if not root:  # "/" holds everything: never a root that lets a symlink out
        return False
    return path == root or path.startswith(root + "/")


def _notes(p: Profile) -> list:
    try:
        return list(p.notes)
    except (ValueError, TypeError):
        return []


def _run_analyzer(profile: Profile) -> dict:
    try:
        from .analyzer import analyze
    except ImportError as exc:
        return {"available": False, "findings": [], "error": f"analyzer not installed ({exc})"}
    try:
        result = analyze(profile)
        data = result.to_dict()
        return {
            "available": True,
            "findings": data.get("findings", []),
            "errors": data.get("errors", []),
        }
    except Exception as exc:  # the GUI must still open when a rule breaks
        return {"available": True, "findings": [], "error": f"{type(exc).__name__}: {exc}"}


def _diff(
    cur: Profile, base: Profile, metric: str | None, import_frames: bool, limit: int = 200
) -> dict:
    try:
        from .diff import diff_profiles
    except ImportError:
        return {"available": False, "entries": []}
    res = diff_profiles(base, cur, metric, import_frames=import_frames)
    entries = []
    for e in res.entries[:limit]:
        entries.append(
            {
                "path": [f.label() for f in e.path],
                "status": e.status,
                "base_inclusive": e.a_inclusive,
                "inclusive": e.b_inclusive,
                "base_exclusive": e.a_exclusive,
                "exclusive": e.b_exclusive,
                "base_node": e.a_node,
                "node": e.b_node,
            }
        )
    return {
        "available": True,
        "metric": res.metric,
        "unit": res.unit,
        "total": res.total_b,
        "base_total": res.total_a,
        "count": len(res.entries),
        "entries": entries,
    }


class GuiServer:
    """Serves the GUI for `profile` (and `baseline`, for the diff view) on 127.0.0.1:port."""

    def __init__(
        self,
        profile: Profile | str,
        baseline: Profile | str | None = None,
        *,
        port: int = 0,
        static_dir: str = STATIC_DIR,
        token: str | None = None,
    ):
        prof = profile if isinstance(profile, Profile) else load(profile)
        base = baseline if isinstance(baseline, Profile) or baseline is None else load(baseline)
        self.data = [ProfileData(prof)] + ([ProfileData(base)] if base is not None else [])
        self.static_dir = os.path.realpath(static_dir)
        self.token = token or secrets.token_urlsafe(18)
        self._diff_cache: dict[tuple[str, bool], dict] = {}
        handler = type("Handler", (_Handler,), {"app": self})
        try:
            self.httpd = ThreadingHTTPServer(("127.0.0.1", port), handler)
        except OSError as exc:
            raise UserError(f"cannot listen on 127.0.0.1:{port} ({exc.strerror})") from None
        self.httpd.daemon_threads = True
        self._thread: threading.Thread | None = None
        for d in self.data:  # build the payloads now, so the browser's first load waits for none
            d.frames_json()
            d.nodes_bin()
            d.metrics_bin()

    @property
    def port(self) -> int:
        return self.httpd.server_address[1]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/{self.token}/"

    def serve_forever(self) -> None:
        self.httpd.serve_forever(poll_interval=0.2)

    def start(self) -> GuiServer:
        """Serve from a background thread (tests, notebooks)."""
        self._thread = threading.Thread(
            target=self.serve_forever, name="deepcontext-gui", daemon=True
        )
        self._thread.start()
        return self

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        if self._thread:
            self._thread.join(timeout=5)

    # -- request routing -----------------------------------------------------------------
    def info(self) -> dict:
        return {
            "kinds": FRAME_KINDS,
            "profiles": [d.info() for d in self.data],
            "baseline": len(self.data) > 1,
            "static_built": os.path.isfile(os.path.join(self.static_dir, "index.html")),
        }

    def profile_data(self, query: dict) -> ProfileData:
        p = query.get("p", ["0"])[0]
        if p not in ("0", "1") or int(p) >= len(self.data):
            raise Refused(404, "no such profile")
        return self.data[int(p)]

    def diff(self, metric: str | None, import_frames: bool = False) -> dict:
        if len(self.data) < 2:
            raise Refused(404, "no baseline profile given")
        key = (metric or "", import_frames)
        if key not in self._diff_cache:
            try:
                self._diff_cache[key] = _diff(
                    self.data[0].profile, self.data[1].profile, metric, import_frames
                )
            except UserError as exc:
                raise Refused(400, str(exc)) from None
        return self._diff_cache[key]

    def static_file(self, rel: str) -> tuple[bytes, str]:
        rel = rel or "index.html"
        parts = rel.split("/")
        if any(p in ("", ".", "..") for p in parts):
            raise Refused(404, "not found")
        path = os.path.realpath(os.path.join(self.static_dir, *parts))
        if not _inside(path, self.static_dir) or not os.path.isfile(path):
            if rel == "index.html":
                raise Refused(
                    500, "the GUI is not built in this install (run scripts/build-gui.sh)"
                )
            raise Refused(404, "not found")
        ctype = mimetypes.guess_type(path)[0] or "application/octet-stream"
        if ctype.startswith("text/") or ctype in ("application/javascript", "image/svg+xml"):
            ctype += "; charset=utf-8"
        with open(path, "rb") as f:
            return f.read(), ctype


class _Handler(BaseHTTPRequestHandler):
    app: GuiServer
    server_version = "deepcontext-gui"
    sys_version = ""
    protocol_version = "HTTP/1.1"

    def log_message(self, format, *args):  # quiet: one line per refused request only
        pass

    def _send(self, status: int, body: bytes, ctype: str, cache: bool = False) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "private, max-age=3600" if cache else "no-store")
        self.send_header("X-Content-Type-Options", "nosniff")
        self.send_header("Referrer-Policy", "no-referrer")
        self.send_header("X-Frame-Options", "DENY")
        self.send_header(
            "Content-Security-Policy",
            "default-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
            "connect-src 'self'; frame-ancestors 'none'",
        )
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _json(self, obj, status: int = 200) -> None:
        self._send(status, json.dumps(obj, separators=(",", ":")).encode(), "application/json")

    def do_HEAD(self):
        self.do_GET()

    def do_POST(self):
        self._send(405, b"method not allowed\n", "text/plain; charset=utf-8")

    do_PUT = do_DELETE = do_PATCH = do_POST

    def do_GET(self):
        app = self.app
        url = urlsplit(self.path)
        path = unquote(url.path)
        prefix = f"/{app.token}"
        if not secrets.compare_digest(path[: len(prefix)], prefix) or (
            len(path) > len(prefix) and path[len(prefix)] != "/"
        ):
            self._send(
                403,
                b"forbidden: this URL needs the token printed by deepcontext view\n",
                "text/plain; charset=utf-8",
            )
            return
        if path == prefix:
            self.send_response(301)
            self.send_header("Location", prefix + "/")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        rel = path[len(prefix) + 1 :]
        query = parse_qs(url.query)
        try:
            if rel.startswith("api/"):
                self._api(rel[4:], query)
            else:
                body, ctype = app.static_file(rel)
                self._send(200, body, ctype, cache=rel.startswith("assets/"))
        except Refused as r:
            self._json({"error": r.reason}, r.status)
        except (BrokenPipeError, ConnectionResetError):
            pass

    def _api(self, name: str, query: dict) -> None:
        app = self.app
        if name == "info":
            self._json(app.info())
        elif name == "frames":
            self._send(200, app.profile_data(query).frames_json(), "application/json")
        elif name == "nodes":
            self._send(200, app.profile_data(query).nodes_bin(), "application/octet-stream")
        elif name == "metrics":
            self._send(200, app.profile_data(query).metrics_bin(), "application/octet-stream")
        elif name == "source":
            file = query.get("file", [""])[0]
            self._json(app.profile_data(query).source(file))
        elif name == "findings":
            self._json(app.data[0].findings())
        elif name == "diff":
            imports = query.get("import_frames", ["0"])[0] == "1"
            self._json(app.diff(query.get("metric", [None])[0], imports))
        else:
            raise Refused(404, "no such API")
