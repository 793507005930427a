"""Security of the GUI server: token required, only the profile's own source files, loopback only,
bounded connections."""

from __future__ import annotations

import http.client
import json
import os
import socket
import sysconfig
import time
from pathlib import Path
from urllib.parse import quote

import deepcontext
import pytest
from deepcontext.gui_server import GuiServer, ServerLimits
from deepcontext.writer import ProfileWriter


def request(server: GuiServer, path: str, host: str = "127.0.0.1") -> tuple[int, bytes]:
    c = http.client.HTTPConnection(host, server.port, timeout=10)
    try:
        c.request("GET", path)
        r = c.getresponse()
        return r.status, r.read()
    finally:
        c.close()


def make_profile(path: Path, files: list[str], cwd: str, command: str | None = None) -> Path:
    w = ProfileWriter({"cwd": cwd} | ({"command": command} if command else {}))
    node = 0
    for i, f in enumerate(files):
        node = w.child(node, w.frame("python", f"fn{i}", f, 1))
        w.add(node, "cpu_time", 1000.0 * (i + 1))
    w.write(path)
    return path


@pytest.fixture
def layout(tmp_path):
    """A project folder with a real source file, a symlink inside it to a file in the same folder,
    a symlink to a secret outside it, and a profile naming all of them (plus a '..' path)."""
    proj = tmp_path / "proj"
    proj.mkdir()
    secret_dir = tmp_path / "secret"
    secret_dir.mkdir()
    (secret_dir / "key.txt").write_text("TOP SECRET\n")
    (proj / "main.py").write_text("print('hello')\n")
    os.symlink(proj / "main.py", proj / "alias.py")
    os.symlink(secret_dir / "key.txt", proj / "evil.py")
    (proj / "sub").mkdir()
    os.symlink(proj / "main.py", proj / "sub" / "up.py")  # target under the program's cwd
    files = [
        str(proj / "sub" / "up.py"),
        str(proj / "main.py"),
        str(proj / "alias.py"),
        str(proj / "evil.py"),
        str(proj / "sub" / ".." / ".." / "secret" / "key.txt"),
        "main.py",  # relative: resolved against the profile's cwd
        str(proj / "missing.py"),
    ]
    prof = make_profile(tmp_path / "p.dctx", files, str(proj))
    server = GuiServer(str(prof)).start()
    yield server, proj, secret_dir
    server.close()


def source(server: GuiServer, file: str) -> tuple[int, dict]:
    status, body = request(server, f"/{server.token}/api/source?file={quote(file, safe='')}")
    return status, json.loads(body)


def test_requests_without_the_token_are_refused(layout):
    server, _, _ = layout
    t = server.token
    for path in [
        "/",
        "/index.html",
        "/api/info",
        "/api/source?file=/etc/passwd",
        f"/{t[:-1]}/api/info",  # a wrong token
        f"/{t}x/api/info",  # the token as a mere prefix
        f"/x{t}/api/info",
        f"/api/{t}/info",
        f"/?token={t}",
    ]:
        status, body = request(server, path)
        assert status == 403, path
        assert b"profile" not in body and b"cpu_time" not in body
    status, body = request(server, f"/{t}/api/info")
    assert status == 200
    assert json.loads(body)["profiles"][0]["nodes"] == 8


def test_each_run_gets_its_own_token(tmp_path):
    prof = make_profile(tmp_path / "p.dctx", ["/a.py"], str(tmp_path))
    a, b = GuiServer(str(prof)), GuiServer(str(prof))
    try:
        assert a.token != b.token and len(a.token) >= 20
    finally:
        a.httpd.server_close()
        b.httpd.server_close()


def test_only_files_named_by_the_profile_are_served(layout):
    server, proj, _ = layout
    status, body = source(server, str(proj / "main.py"))
    assert status == 200 and body["text"] == "print('hello')\n"
    status, body = source(server, "main.py")  # relative to the profiled program's cwd
    assert status == 200 and body["text"] == "print('hello')\n"
    for f in ["/etc/passwd", str(proj / "other.py"), str(proj), ""]:
        status, body = source(server, f)
        assert status in (400, 403), f
        assert "root:" not in json.dumps(body)
    status, _ = source(server, str(proj / "missing.py"))
    assert status == 404


def test_dotdot_and_symlinks_outside_are_refused(layout):
    server, proj, _ = layout
    status, body = source(server, str(proj / "sub" / ".." / ".." / "secret" / "key.txt"))
    assert status == 403 and "'..'" in body["error"]
    status, body = source(server, str(proj / "evil.py"))
    assert status == 403 and "symlink" in body["error"]
    assert "SECRET" not in json.dumps(body)
    # a symlink that stays in its own folder, or under the profiled program's cwd, is fine
    for f in (proj / "alias.py", proj / "sub" / "up.py"):
        status, body = source(server, str(f))
        assert status == 200 and body["text"] == "print('hello')\n"


def test_static_files_cannot_escape_the_app_folder(layout):
    server, _, _ = layout
    t = server.token
    for path in [
        f"/{t}/../../../../etc/passwd",
        f"/{t}/%2e%2e/%2e%2e/%2e%2e/etc/passwd",
        f"/{t}/assets/..%2f..%2f..%2fgui_server.py",
        f"/{t}//etc/passwd",
    ]:
        status, body = request(server, path)
        assert status in (403, 404), path
        assert b"root:" not in body and b"import" not in body


def test_listens_on_loopback_only(layout):
    server, _, _ = layout
    assert server.httpd.server_address[0] == "127.0.0.1"
    port = server.port
    # the kernel's table of listening sockets: bound to 127.0.0.1, not to every address
    local = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        if not os.path.exists(table):
            continue
        with open(table) as f:
            for line in f.readlines()[1:]:
                cols = line.split()
                addr, p = cols[1].rsplit(":", 1)
                if int(p, 16) == port and cols[3] == "0A":  # LISTEN
                    local.add(addr)
    assert local == {"0100007F"}, local
    # another loopback address of this machine gets no answer
    s = socket.socket()
    s.settimeout(3)
    with pytest.raises(OSError):
        s.connect(("127.0.0.2", port))
    s.close()


def test_only_get_is_allowed(layout):
    server, _, _ = layout
    c = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    c.request("POST", f"/{server.token}/api/info", body=b"x")
    r = c.getresponse()
    assert r.status == 405
    c.close()


def test_responses_forbid_framing_and_leaking_the_token(layout):
    server, _, _ = layout
    c = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    c.request("GET", f"/{server.token}/api/info")
    r = c.getresponse()
    r.read()
    assert r.getheader("Referrer-Policy") == "no-referrer"
    assert "frame-ancestors 'none'" in r.getheader("Content-Security-Policy")
    assert r.getheader("X-Content-Type-Options") == "nosniff"
    c.close()


def serve(tmp_path: Path, files: list[str], cwd: str, command: str | None = None, **limits):
    prof = make_profile(tmp_path / "p.dctx", files, cwd, command)
    return GuiServer(str(prof), limits=ServerLimits(**limits)).start()


def test_system_and_secret_files_named_by_a_profile_are_refused(tmp_path):
    """A profile is a file people send each other: whatever its frames, cwd and command name, the
    viewer's /proc (its environment and secrets), /etc and non-source files stay unread."""
    proj = tmp_path / "proj"
    proj.mkdir()
    (proj / ".env").write_text("API_KEY=hunter2\n")
    (proj / "notes.txt").write_text("API_KEY=hunter2\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "keys.py").write_text("API_KEY = 'hunter2'\n")
    cases = {
        # cwd /proc/self: relative names and the old symlink check both led into /proc/<pid>
        "/proc/self": ["environ", "/proc/self/environ", "/proc/self/cmdline"],
        "/etc": ["passwd", "/etc/passwd", "/etc/hostname"],
        str(proj): [".env", str(proj / "notes.txt"), str(elsewhere / "keys.py"), "/dev/null"],
        "/": ["etc/passwd", "proc/self/environ"],
    }
    for cwd, files in cases.items():
        case = tmp_path / ("case" + str(len(os.listdir(tmp_path))))
        case.mkdir()
        server = serve(case, files, cwd, json.dumps([f"{cwd}/run.py"]))
        try:
            for f in files:
                status, body = source(server, f)
                assert status == 403, (cwd, f, body)
                text = json.dumps(body)
                assert "hunter2" not in text and "root:" not in text and "PATH=" not in text
        finally:
            server.close()


def test_program_and_python_sources_are_served(tmp_path):
    """What the source view is for still opens: the program's files (also a script outside its cwd,
    and one without a suffix but with a python #! line), the stdlib, the viewer's site-packages and
    another Python's import tree."""
    work = tmp_path / "work"
    work.mkdir()
    prog = tmp_path / "prog"
    prog.mkdir()
    (prog / "train.py").write_text("import helper\n")
    (prog / "helper.py").write_text("def f(): pass\n")
    (prog / "tool").write_text("#!/usr/bin/env python3\nprint(1)\n")
    (work / "local.py").write_text("x = 1\n")
    venv_mod = tmp_path / "venv" / "lib" / "python3.11" / "site-packages" / "pkg" / "mod.py"
    venv_mod.parent.mkdir(parents=True)
    venv_mod.write_text("y = 2\n")
    stdlib_os = os.path.join(sysconfig.get_paths()["stdlib"], "os.py")
    own = os.path.join(os.path.dirname(deepcontext.__file__), "gui_server.py")
    files = [
        str(prog / "train.py"),
        str(prog / "helper.py"),
        str(prog / "tool"),
        "local.py",
        str(venv_mod),
        stdlib_os,
        own,
    ]
    server = serve(tmp_path, files, str(work), json.dumps([str(prog / "train.py"), "--x"]))
    try:
        for f in files:
            status, body = source(server, f)
            assert status == 200, (f, body)
            with open(os.path.join(work, f), encoding="utf-8", errors="replace") as fh:
                assert body["text"] == fh.read()
    finally:
        server.close()


def raw_request(server: GuiServer, path: str, headers: dict[str, str]) -> tuple[int, bytes]:
    c = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    try:
        c.putrequest("GET", path, skip_host="Host" in headers)
        for k, v in headers.items():
            c.putheader(k, v)
        c.endheaders()
        r = c.getresponse()
        return r.status, r.read()
    finally:
        c.close()


def test_host_and_origin_must_be_loopback(layout):
    """DNS rebinding: a page of another site re-pointed at 127.0.0.1 sends its own Host/Origin."""
    server, _, _ = layout
    info = f"/{server.token}/api/info"
    port = server.port
    for host in ["evil.example", f"evil.example:{port}", f"127.0.0.1.evil.example:{port}", ""]:
        status, body = raw_request(server, info, {"Host": host})
        assert status == 403 and b"cpu_time" not in body, host
    for origin in ["http://evil.example", f"https://127.0.0.1:{port}", "null"]:
        status, body = raw_request(server, info, {"Origin": origin})
        assert status == 403 and b"cpu_time" not in body, origin
    for host in [f"localhost:{port}", f"127.0.0.1:{port}", f"[::1]:{port}", "LOCALHOST"]:
        status, body = raw_request(server, info, {"Host": host})
        assert status == 200 and b"cpu_time" in body, host
    status, _ = raw_request(server, info, {"Origin": f"http://127.0.0.1:{port}"})
    assert status == 200


def test_nul_in_the_url_is_a_bad_request(layout):
    server, _, _ = layout
    t = server.token
    for path in [f"/{t}/%00", f"/{t}/assets/x%00.js", f"/{t}/api/source?file=%00"]:
        status, _ = request(server, path)
        assert status == 400, path
    assert request(server, f"/{t}/api/info")[0] == 200


def test_a_request_body_is_not_read_as_a_request(layout):
    """A body is read and dropped, so what it holds is never answered as a second request."""
    server, _, _ = layout
    t = server.token
    host = f"127.0.0.1:{server.port}"
    smuggled = f"GET /{t}/api/nosuch HTTP/1.1\r\nHost: {host}\r\n\r\n".encode()
    c = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    for method in ("POST", "GET"):
        c.request(method, f"/{t}/api/info", body=smuggled)
        r = c.getresponse()
        r.read()
        assert r.status == (405 if method == "POST" else 200)
        c.request("GET", f"/{t}/api/info")  # the next answer on this connection is this one's
        r = c.getresponse()
        assert r.status == 200 and b"cpu_time" in r.read()
    c.close()


def test_chunked_and_huge_bodies_are_refused(layout):
    server, _, _ = layout
    path = f"/{server.token}/api/info"
    status, body = raw_request(server, path, {"Content-Length": str(10**12)})
    assert status == 413 and b"cpu_time" not in body
    status, body = raw_request(server, path, {"Content-Length": "12, 13"})
    assert status == 400
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as s:
        s.sendall(
            f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n\r\n"
            f"5\r\nhello\r\n0\r\n\r\n".encode()
        )
        answer = b""
        while chunk := s.recv(65536):  # the server answers once and hangs up
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 501 ") and answer.count(b"HTTP/1.1") == 1


def test_idle_connections_are_closed(tmp_path):
    server = serve(tmp_path, ["/a.py"], str(tmp_path), idle_timeout_s=1.0)
    try:
        s = socket.create_connection(("127.0.0.1", server.port), timeout=30)
        s.sendall(b"GET /")  # a request that never ends
        assert s.recv(100) == b""  # the server hung up; without a timeout this waits forever
        s.close()
    finally:
        server.close()


def test_connections_are_bounded(tmp_path):
    """Idle connections beyond the bound get 503 at once instead of a thread each."""
    server = serve(tmp_path, ["/a.py"], str(tmp_path), max_connections=4, idle_timeout_s=60.0)
    idle = [socket.create_connection(("127.0.0.1", server.port), timeout=10) for _ in range(4)]
    try:
        status, body = request(server, f"/{server.token}/api/info")
        assert status == 503 and b"too many connections" in body
        for s in idle:
            s.close()
        # the slots come back as the server sees the idle ones close
        deadline = time.monotonic() + 30
        while (status := request(server, f"/{server.token}/api/info")[0]) == 503:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert status == 200
    finally:
        for s in idle:
            s.close()
        server.close()
