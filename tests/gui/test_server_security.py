"""Security of the GUI server: token required, only the profile's own source files, loopback only."""

from __future__ import annotations

import http.client
import json
import os
import socket
from pathlib import Path

import pytest
from deepcontext.gui_server import GuiServer
from deepcontext.writer import ProfileWriter


def request(server: GuiServer, path: str, host: str = "127.0.0.1") -> tuple[int, bytes]:
    c = http.client.HTTPConnection(host, server.port, timeout=10)
    try:
        c.request("GET", path)
        r = c.getresponse()
        return r.status, r.read()
    finally:
        c.close()


def make_profile(path: Path, files: list[str], cwd: str) -> Path:
    w = ProfileWriter({"cwd": cwd})
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
    from urllib.parse import quote

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
