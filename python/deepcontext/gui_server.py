"""The GUI's local HTTP server: the built web app plus a small JSON/binary API over loaded profiles.

Security model (docs/gui.md):
- it listens on 127.0.0.1 only (reach it from another machine through an SSH port-forward);
- every request path starts with a random per-run token (`/<token>/...`); anything else gets 403,
  so another local user or a web page in the browser cannot read the profile without the URL;
- it answers only requests whose Host is a loopback name (localhost, 127.0.0.1, [::1]) and
  whose Origin, when sent, is one too, so a web page cannot reach it through DNS rebinding;
- the source endpoint serves only source files that the profile's frames name and that lie, after
  resolving symlinks, under the profiled program's folders or a Python import tree, never in
  /proc, /sys or /dev (SourcePolicy: the profile is a file people send each other);
- connections are bounded in number, time out when idle, and request bodies are read and
  dropped (or refused when large or chunked); the analyzer runs in a child process with a time
  limit, so neither a slow client nor a crashing rule takes the server down;
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
- findings: the analyzer's findings for the profile (`deepcontext analyze --format json` in a
  child process; "error" says why there are none when it fails or runs out of time);
- diff?metric=&import_frames=1: the ranked path differences (deepcontext.diff.diff_profiles,
  baseline -> profile; Python's import-system frames kept with import_frames=1).
"""

from __future__ import annotations

import json
import mimetypes
import os
import re
import secrets
import signal
import site
import stat
import subprocess
import sys
import sysconfig
import threading
from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, unquote, urlsplit

from .errors import UserError
from .reader import FRAME_KINDS, Profile, load

STATIC_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "gui_static")
MAX_SOURCE_BYTES = 8 * 1024 * 1024
# Source files by name: Python, Cython, C/C++/CUDA (the languages of the frames the profiler records).
SOURCE_SUFFIXES = frozenset(
    ".py .pyi .pyx .pxd .pxi .c .cc .cpp .cxx .c++ .h .hh .hpp .hxx .h++ .inl .ipp .tcc .cu .cuh".split()
)
# Kernel and device trees: never source, and /proc/self/environ holds the viewer's secrets.
SYSTEM_TREES = ("/proc", "/sys", "/dev")
# A Python installation's import tree, recognised by shape: the profile's Python may be another
# venv or conda env than the viewer's, and a profile does not record its prefix.
PYTHON_TREE = re.compile(r"/(?:lib(?:64)?/python3(?:\.\d+)?t?|site-packages|dist-packages)/")
LOOPBACK_HOSTS = frozenset({"localhost", "127.0.0.1", "[::1]"})


@dataclass(frozen=True)
class ServerLimits:
    """What one client, or one profile, may cost the server."""

    max_connections: int = 64  # a browser opens about 6 per host
    idle_timeout_s: float = 30.0  # an idle keep-alive connection is closed after this
    max_body_bytes: int = 64 * 1024  # GET carries no body; a larger one is refused
    analyzer_timeout_s: float = 300.0  # the findings' child process is killed after this


class Refused(Exception):
    """A request the server will not answer: (HTTP status, one-line reason)."""

    def __init__(self, status: int, reason: str):
        super().__init__(reason)
        self.status = status
        self.reason = reason


class ProfileData:
    """One loaded profile with its API payloads built once and cached."""

    def __init__(
        self,
        profile: Profile,
        analyzer_timeout_s: float = ServerLimits.analyzer_timeout_s,
        rules_files: tuple[str, ...] = (),
    ):
        self.profile = profile
        self.rules_files = rules_files
        self._lock = threading.Lock()
        self._findings_lock = threading.Lock()  # held while the analyzer runs: not the payloads'
        self.analyzer_timeout_s = analyzer_timeout_s
        self._frames_json: bytes | None = None
        self._nodes_bin: bytes | None = None
        self._metrics_bin: bytes | None = None
        self.frame_index: dict[int, int] = {}
        fids = sorted(profile.frames)
        self.frame_ids = fids
        self.frame_index = {fid: i for i, fid in enumerate(fids)}
        self.files = {f.file for f in profile.frames.values() if f.file}
        self.source_policy = SourcePolicy(profile.meta)
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
        with self._findings_lock:
            if self._findings is None:
                self._findings = _run_analyzer(
                    self.profile.path, self.analyzer_timeout_s, self.rules_files
                )
            return self._findings

    def source(self, requested: str) -> dict:
        """The text of a source file named by the profile; Refused for anything else."""
        if not requested:
            raise Refused(400, "no file given")
        if requested not in self.files:
            raise Refused(403, "file is not referenced by this profile")
        real = self.source_policy.check(requested)
        try:
            with open(real, "rb") as f:  # the size again: the file may have grown since
                data = f.read(MAX_SOURCE_BYTES + 1)
        except OSError:
            raise Refused(404, "file cannot be read on this machine") from None
        if len(data) > MAX_SOURCE_BYTES:
            raise Refused(413, "file too large to show")
        return {"file": requested, "path": real, "text": data.decode("utf-8", errors="replace")}


class SourcePolicy:
    """Which files the source endpoint may read for one profile. A profile is a file people send
    each other, so its names, its cwd and its command are untrusted: a file is served only when,
    on its real path (symlinks resolved), it is a regular file of at most MAX_SOURCE_BYTES outside
    /proc, /sys and /dev, a source file (SOURCE_SUFFIXES, or a script whose first line is a
    python #! line), and lies under the program's folders (the profile's cwd and its script's
    folder) or a Python import tree (the viewer's stdlib and site-packages, or any
    lib/python3.X, site-packages or dist-packages folder: the profile's own Python's)."""

    def __init__(self, meta: dict):
        cwd = meta.get("cwd") or ""
        self.cwd = cwd if os.path.isabs(cwd) else ""
        roots = [self.cwd] if self.cwd else []
        script = _script(meta.get("command"))
        if script and self.cwd:
            roots.append(os.path.dirname(os.path.join(self.cwd, script)))
        roots += _python_dirs()
        self.roots = sorted({os.path.realpath(r) for r in roots if r} - {"/"})

    def check(self, requested: str) -> str:
        """The real path to read for `requested`, or Refused."""
        if "\x00" in requested:
            raise Refused(400, "file name with a NUL byte refused")
        if ".." in requested.replace("\\", "/").split("/"):
            raise Refused(403, "path with '..' refused")
        if not os.path.isabs(requested) and not self.cwd:
            raise Refused(403, "relative file name in a profile without its program's cwd")
        path = os.path.normpath(os.path.join(self.cwd, requested))
        real = os.path.realpath(path)
        if any(_inside(real, t) for t in SYSTEM_TREES):
            raise Refused(403, "system file refused (/proc, /sys, /dev)")
        if not (any(_inside(real, r) for r in self.roots) or PYTHON_TREE.search(real)):
            what = "symlink to a file" if real != path else "file"
            raise Refused(
                403, f"{what} outside the profiled program's folders and Python's import path"
            )
        try:
            st = os.stat(real)
        except OSError:
            raise Refused(404, "file not found on this machine") from None
        if not stat.S_ISREG(st.st_mode):
            raise Refused(403, "not a regular file")
        if st.st_size > MAX_SOURCE_BYTES:
            raise Refused(413, "file too large to show")
        if os.path.splitext(real)[1].lower() not in SOURCE_SUFFIXES and not _python_script(real):
            raise Refused(403, "not a source file (by its suffix or a python #! line)")
        return real


def _script(command) -> str:
    """The program file of the profile's command (a JSON list of the program's argv), or ""."""
    try:
        argv = json.loads(command) if isinstance(command, str) else command
    except ValueError:
        return ""
    if not isinstance(argv, list) or not argv or not isinstance(argv[0], str):
        return ""
    return "" if argv[0] in ("", "-c", "-m") or "\x00" in argv[0] else argv[0]


def _python_dirs() -> list[str]:
    """The viewer's own Python import trees: stdlib and site-packages."""
    paths = sysconfig.get_paths()
    dirs = [paths.get(k, "") for k in ("stdlib", "platstdlib", "purelib", "platlib")]
    try:
        dirs += site.getsitepackages() + [site.getusersitepackages()]
    except AttributeError:  # a virtualenv's old site.py lacks them
        pass
    return [d for d in dirs if d and os.path.isdir(d)]


def _python_script(path: str) -> bool:
    try:
        with open(path, "rb") as f:
            first = f.readline(256)
    except OSError:
        return False
    return first.startswith(b"#!") and b"python" in first


def _loopback_host(host: str) -> bool:
    """Whether a Host header (or an Origin's host part) names this machine's loopback: localhost,
    127.0.0.1 or [::1], with any port (ssh -L may forward another local port to ours)."""
    name, sep, port = host.rpartition(":") if not host.endswith("]") else (host, "", "")
    if not sep:
        name = host
    elif not port.isdigit():
        return False
    return name.lower() in LOOPBACK_HOSTS


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


def _run_analyzer(path: str, timeout_s: float, rules_files: tuple[str, ...] = ()) -> dict:
    """The analyzer's findings for the profile at `path` (built-in rules plus those of
    `rules_files`), computed by `deepcontext analyze` in a child process: a rule that crashes,
    hangs or eats memory on a hostile profile costs the findings view, not the server."""
    # an absolute path: a relative one starting with "-" would read as an option
    cmd = [
        sys.executable,
        "-m",
        "deepcontext",
        "analyze",
        "--format",
        "json",
        os.path.abspath(path),
    ]
    for f in rules_files:
        cmd += ["--rules-file", f]
    try:
        r = subprocess.run(
            cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout_s
        )
    except subprocess.TimeoutExpired:
        return _no_findings(f"the analyzer did not finish within {timeout_s:g} s")
    except OSError as exc:
        return _no_findings(f"the analyzer could not start ({exc.strerror})")
    if r.returncode != 0:
        if r.returncode < 0:
            why = f"killed by {_signal_name(-r.returncode)}"
        else:
            lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
            why = lines[-1].strip() if lines else f"exit status {r.returncode}"
        return _no_findings(f"the analyzer failed: {why}")
    try:
        data = json.loads(r.stdout)
    except ValueError:
        return _no_findings("the analyzer's output is not JSON")
    return {
        "available": True,
        "findings": data.get("findings", []),
        "errors": data.get("errors", []),
    }


def _signal_name(num: int) -> str:
    try:
        return signal.Signals(num).name
    except ValueError:
        return f"signal {num}"


def _no_findings(error: str) -> dict:
    return {"available": True, "findings": [], "errors": [], "error": error}


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
    """Serves the GUI for `profile` (and `baseline`, for the diff view) on 127.0.0.1:port; the
    findings view runs the analyzer's built-in rules plus those of `rules_files`."""

    def __init__(
        self,
        profile: Profile | str,
        baseline: Profile | str | None = None,
        *,
        port: int = 0,
        static_dir: str = STATIC_DIR,
        token: str | None = None,
        limits: ServerLimits = ServerLimits(),
        rules_files: Sequence[str] = (),
    ):
        prof = profile if isinstance(profile, Profile) else load(profile)
        base = baseline if isinstance(baseline, Profile) or baseline is None else load(baseline)
        self.limits = limits
        rules = tuple(os.path.abspath(f) for f in rules_files)
        self.data = [
            ProfileData(p, limits.analyzer_timeout_s, rules) for p in (prof, base) if p is not None
        ]
        self.static_dir = os.path.realpath(static_dir)
        self.token = token or secrets.token_urlsafe(18)
        self._diff_cache: dict[tuple[str, bool], dict] = {}
        handler = type("Handler", (_Handler,), {"app": self, "timeout": limits.idle_timeout_s})
        try:
            self.httpd = _BoundedServer(("127.0.0.1", port), handler, limits.max_connections)
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


class _BoundedServer(ThreadingHTTPServer):
    """A thread per connection, at most `max_connections` of them: one more is answered 503 and
    closed at once, so idle or slow clients cannot pile up threads without bound."""

    def __init__(self, address, handler, max_connections: int):
        self._slots = threading.BoundedSemaphore(max_connections)
        super().__init__(address, handler)

    def process_request(self, request, client_address):
        if not self._slots.acquire(blocking=False):
            try:
                request.settimeout(1.0)
                request.sendall(
                    b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\n"
                    b"Content-Length: 22\r\nConnection: close\r\n\r\ntoo many connections\r\n"
                )
            except OSError:
                pass
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._slots.release()
            raise

    def process_request_thread(self, request, client_address):
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()


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

    def _text(self, status: int, message: str, close: bool = False) -> None:
        if close:  # what follows on the connection cannot be trusted to start a request
            self.close_connection = True
        self._send(status, (message + "\n").encode(), "text/plain; charset=utf-8")

    def _admit(self) -> bool:
        """Reads the request's body and checks its Host and Origin; False when it was refused
        (and answered)."""
        if self.headers.get("Transfer-Encoding"):
            self._text(501, "request bodies with a Transfer-Encoding are not accepted", close=True)
            return False
        lengths = self.headers.get_all("Content-Length") or []
        if lengths:
            if len(set(lengths)) > 1 or not lengths[0].strip().isdigit():
                self._text(400, "bad Content-Length", close=True)
                return False
            left = int(lengths[0])
            if left > self.app.limits.max_body_bytes:
                self._text(413, "request body too large", close=True)
                return False
            while left > 0:  # dropped: no endpoint takes a body
                chunk = self.rfile.read(min(left, 65536))
                if not chunk:
                    self.close_connection = True
                    return False
                left -= len(chunk)
        # DNS rebinding: a page of evil.example re-pointed at 127.0.0.1 still sends its own name
        if not _loopback_host(self.headers.get("Host", "")):
            self._text(403, "forbidden: the Host is not a loopback name (localhost, 127.0.0.1)")
            return False
        origin = self.headers.get("Origin")
        if origin is not None and not (
            origin.startswith("http://") and _loopback_host(origin[len("http://") :])
        ):
            self._text(403, "forbidden: cross-origin request")
            return False
        return True

    def do_HEAD(self):
        self.do_GET()

    def do_GET(self):
        self._answer(self._get)

    def do_POST(self):
        self._answer(lambda: self._text(405, "method not allowed"))

    do_PUT = do_DELETE = do_PATCH = do_OPTIONS = do_POST

    def _answer(self, respond) -> None:
        try:
            if self._admit():
                respond()
        except (BrokenPipeError, ConnectionResetError, TimeoutError):
            self.close_connection = True
        except Exception as exc:  # one bad request must not cost the others their answers
            self.close_connection = True
            sys.stderr.write(f"deepcontext view: {self.command} failed: {type(exc).__name__}\n")
            try:
                self._json({"error": f"internal error ({type(exc).__name__})"}, 500)
            except OSError:
                pass

    def _get(self) -> None:
        app = self.app
        url = urlsplit(self.path)
        path = unquote(url.path)
        query = parse_qs(url.query)
        if "\x00" in path or any("\x00" in v for vs in query.values() for v in vs):
            self._text(400, "bad request: NUL byte in the URL")
            return
        prefix = f"/{app.token}"
        if not secrets.compare_digest(path[: len(prefix)], prefix) or (
            len(path) > len(prefix) and path[len(prefix)] != "/"
        ):
            self._text(403, "forbidden: this URL needs the token printed by deepcontext view")
            return
        if path == prefix:
            self.send_response(301)
            self.send_header("Location", prefix + "/")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        rel = path[len(prefix) + 1 :]
        try:
            if rel.startswith("api/"):
                self._api(rel[4:], query)
            else:
                body, ctype = app.static_file(rel)
                self._send(200, body, ctype, cache=rel.startswith("assets/"))
        except Refused as r:
            self._json({"error": r.reason}, r.status)

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
