"""The GUI server's API over real profiles made by `deepcontext run`."""

from __future__ import annotations

import http.client
import json
import os
import re
import shutil
import subprocess
import sys
import time
from array import array

import pytest
from deepcontext.gui_server import GuiServer, ServerLimits
from deepcontext.reader import load


def get(server: GuiServer, path: str) -> tuple[int, bytes, str]:
    c = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    try:
        c.request("GET", f"/{server.token}/{path}")
        r = c.getresponse()
        return r.status, r.read(), r.getheader("Content-Type") or ""
    finally:
        c.close()


@pytest.fixture
def server(profile_a, profile_b):
    s = GuiServer(str(profile_b), str(profile_a)).start()
    yield s
    s.close()


def test_info_frames_nodes_metrics_match_the_profile(server, profile_b):
    prof = load(profile_b)
    status, body, _ = get(server, "api/info")
    assert status == 200
    info = json.loads(body)
    p0 = info["profiles"][0]
    assert info["baseline"] is True
    assert p0["nodes"] == len(prof)
    assert [m["name"] for m in p0["metrics"]] == list(prof.metrics)
    assert "cpu_time" in prof.metrics

    status, body, _ = get(server, "api/frames?p=0")
    frames = json.loads(body)
    assert len(frames["kind"]) == p0["frames"]

    status, body, ctype = get(server, "api/nodes?p=0")
    assert ctype == "application/octet-stream"
    ints = array("i")
    ints.frombytes(body)
    n = len(prof)
    parent, frame = ints[:n], ints[n:]
    assert parent[0] == -1
    assert list(parent[1:]) == prof.node_parent[1:]
    fids = sorted(prof.frames)
    for node in range(1, n):
        f = prof.frames[fids[frame[node]]]
        assert (frames["name"][frame[node]], frames["file"][frame[node]]) == (f.name, f.file)
        assert f == prof.node(node).frame

    status, body, _ = get(server, "api/metrics?p=0")
    vals = array("d")
    vals.frombytes(body)
    sent = [m["name"] for m in p0["metrics"] if not m["empty"]]
    for m in p0["metrics"]:  # a metric is left out only when it has no value anywhere
        assert m["empty"] == (prof.total(m["name"]) == 0 and m["name"] not in sent)
    assert len(vals) == 2 * n * len(sent)
    k = sent.index("cpu_time")
    inc = vals[2 * n * k : 2 * n * k + n]
    exc = vals[2 * n * k + n : 2 * n * (k + 1)]
    for node in range(n):
        assert inc[node] == prof.inclusive(node, "cpu_time")
        assert exc[node] == prof.exclusive(node, "cpu_time")
    assert inc[0] > 0


def test_source_of_the_profiled_program(server, profile_b):
    prof = load(profile_b)
    files = {f.file for f in prof.frames.values() if f.file.endswith("work.py")}
    assert files, "the profile names the program's file"
    from urllib.parse import quote

    status, body, _ = get(server, f"api/source?file={quote(files.pop(), safe='')}")
    assert status == 200
    assert "s += i * i  # the hot line" in json.loads(body)["text"]


def test_findings_come_from_the_analyzer(server):
    status, body, _ = get(server, "api/findings")
    assert status == 200
    data = json.loads(body)
    assert data["available"] is True
    assert isinstance(data["findings"], list)
    for f in data["findings"]:
        assert {"rule", "title", "summary", "suggestion", "nodes"} <= set(f)


def test_findings_include_the_rules_files_given(profile_b, tmp_path):
    rules = tmp_path / "rules.py"
    rules.write_text(
        "from deepcontext.analyzer import Finding, rule\n\n\n"
        '@rule("test-always", "always", needs=("cpu_time",))\n'
        "def check(q):\n"
        '    yield Finding(summary="hello from a rules file", suggestion="-", metric="cpu_time",\n'
        '                  time=1.0, saving=0.5, estimate="half")\n'
    )
    s = GuiServer(str(profile_b), rules_files=[str(rules)]).start()
    try:
        status, body, _ = get(s, "api/findings")
        data = json.loads(body)
        assert status == 200 and "error" not in data
        assert [f["summary"] for f in data["findings"] if f["rule"] == "test-always"] == [
            "hello from a rules file"
        ]
    finally:
        s.close()


def test_an_analyzer_that_fails_leaves_the_server_answering(profile_a, tmp_path):
    """The analyzer runs apart from the server: when it hangs (here its profile path became a FIFO
    with no writer, so its read never returns) or fails, the findings view gets a clear error and
    the other endpoints keep answering."""
    copy = tmp_path / "p.dctx"
    shutil.copy(profile_a, copy)
    s = GuiServer(str(copy), limits=ServerLimits(analyzer_timeout_s=3.0)).start()
    try:
        os.unlink(copy)
        os.mkfifo(copy)
        status, body, _ = get(s, "api/findings")
        assert status == 200
        data = json.loads(body)
        assert data["findings"] == [] and "did not finish within 3 s" in data["error"]
        assert get(s, "api/frames?p=0")[0] == 200 and get(s, "api/info")[0] == 200
    finally:
        s.close()
    os.unlink(copy)
    shutil.copy(profile_a, copy)
    s = GuiServer(str(copy), limits=ServerLimits(analyzer_timeout_s=3.0)).start()
    try:
        copy.write_bytes(b"SQLite format 3\x00 but not a database")  # changed since it was loaded
        status, body, _ = get(s, "api/findings")
        data = json.loads(body)
        assert status == 200 and data["findings"] == []
        assert "corrupt profile" in data["error"] and "\n" not in data["error"]
        assert get(s, "api/frames?p=0")[0] == 200
    finally:
        s.close()


def test_diff_ranks_the_grown_function(server):
    status, body, _ = get(server, "api/diff?metric=cpu_time")
    assert status == 200
    d = json.loads(body)
    assert d["available"] and d["count"] > 0
    # variant b sorts four times as many strings: sort_strings' subtree grew
    grown = [e for e in d["entries"] if any("sort_strings" in p for p in e["path"])]
    assert grown
    assert (
        sum(e["inclusive"] - e["base_inclusive"] for e in grown if "sort_strings" in e["path"][-1])
        > 0
    )
    status, body, _ = get(server, "api/diff?metric=nope")
    assert status == 400 and "unknown metric" in json.loads(body)["error"]


def test_index_and_assets_are_served_from_the_package(server):
    status, body, ctype = get(server, "")
    assert status == 200 and ctype.startswith("text/html")
    assets = re.findall(rb'(?:src|href)="\./(assets/[^"]+)"', body)
    assert assets
    for a in assets:
        status, data, ctype = get(server, a.decode())
        assert status == 200 and len(data) > 100
    assert b"http://" not in body and b"https://" not in body


def test_view_command_prints_a_tokened_loopback_url(profile_a):
    proc = subprocess.Popen(
        [sys.executable, "-m", "deepcontext", "view", str(profile_a), "--no-browser"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = proc.stdout.readline()
        m = re.search(r"http://127\.0\.0\.1:(\d+)/([\w-]{20,})/", line)
        assert m, line
        port, token = int(m.group(1)), m.group(2)
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        c.request("GET", f"/{token}/api/info")
        assert c.getresponse().status == 200
        c.close()
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        c.request("GET", "/api/info")
        assert c.getresponse().status == 403
        c.close()
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_view_command_refuses_a_missing_rules_file(profile_a, tmp_path):
    r = subprocess.run(
        [sys.executable, "-m", "deepcontext", "view", str(profile_a), "--no-browser"]
        + ["--rules-file", str(tmp_path / "nope.py")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 2
    assert r.stderr.strip().count("\n") == 0 and "nope.py: no such rules file" in r.stderr


def test_view_command_reports_a_bad_file_in_one_line(tmp_path):
    bad = tmp_path / "x.dctx"
    bad.write_text("not a profile")
    t0 = time.time()
    r = subprocess.run(
        [sys.executable, "-m", "deepcontext", "view", str(bad), "--no-browser"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert r.returncode == 2
    assert r.stderr.strip().count("\n") == 0 and "not a DeepContext profile" in r.stderr
    assert time.time() - t0 < 30
