"""Profiles are files people send each other: every command that reads one (report, export in
each format, diff, merge, analyze, view) must answer a hostile .dctx with exit status 2 and one
line `deepcontext: error: FILE: ...`, never a traceback, a hang or an allocation the file does not
back -- and must handle a valid but extreme one (a call path 100,000 frames deep) in bounded time
and memory (issue 31). The hostile files are a real profile edited with sqlite3, as in
tests/analyzer/test_hostile_profiles.py, whose messages the Python loaders share."""

from __future__ import annotations

import json
import resource
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import env

# Rebuilds nodes without INTEGER PRIMARY KEY, so an id can be any SQLite value.
UNTYPED_NODES = [
    "ALTER TABLE nodes RENAME TO nodes_old",
    "CREATE TABLE nodes (id, parent, frame)",
    "INSERT INTO nodes SELECT * FROM nodes_old",
    "DROP TABLE nodes_old",
]
RECURSIVE_VIEW = [
    "DROP TABLE nodes",
    "CREATE VIEW nodes AS WITH RECURSIVE r(id, parent, frame) AS "
    "(SELECT 0, 0, 0 UNION ALL SELECT id + 1, id, 1 FROM r) SELECT * FROM r",
]
FORMATS = ("hatchet", "pprof", "speedscope", "collapsed", "csv", "chrome")
MEMORY_LIMIT = 4 << 30  # address space of each command (numpy and torch reserve some)
DEEP = 100_000


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))


def run(*args, timeout: float = 60) -> subprocess.CompletedProcess:
    """`deepcontext ARGS` under the memory limit; a hang or a run past `timeout` fails the test
    (subprocess.TimeoutExpired)."""
    return subprocess.run(
        [sys.executable, "-m", "deepcontext", *map(str, args)],
        env=env(),
        capture_output=True,
        text=True,
        timeout=timeout,
        preexec_fn=_limit_memory,
    )


def commands(path: Path, good: Path, out: Path) -> list[list]:
    """Every command that reads a profile, over `path` (`good`: the other side of a diff)."""
    cmds = [
        ["report", path],
        ["report", path, "--format", "json"],
        ["report", path, "--view", "bottom-up"],
        ["report", path, "--view", "flat", "--format", "json"],
        *(["export", path, "--format", f, "-o", out / f"x.{f}"] for f in FORMATS),
        ["diff", good, path],
        ["diff", path, good, "--format", "json"],
        ["merge", "-q", path, good, "-o", out / "merged.dctx"],
        ["analyze", path],
        ["view", "--no-browser", path],  # serves forever once loaded: a timeout fails the test
    ]
    return cmds


def edited(src: Path, dst: Path, *sql: str) -> Path:
    shutil.copy(src, dst)
    con = sqlite3.connect(dst)
    for s in sql:
        con.execute(s)
    con.commit()
    con.close()
    return dst


@pytest.fixture(scope="module")
def base(dedupe_profiles) -> Path:
    return dedupe_profiles["slow"]


def _count(path: Path, table: str) -> int:
    con = sqlite3.connect(path)
    try:
        return con.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0]
    finally:
        con.close()


def _refused_everywhere(path: Path, good: Path, out: Path, message: str) -> None:
    for cmd in commands(path, good, out):
        r = run(*cmd)
        lines = r.stderr.strip().splitlines()
        where = f"deepcontext {' '.join(map(str, cmd))}: {r.returncode}\n{r.stderr[-3000:]}"
        assert r.returncode == 2, where
        assert len(lines) == 1, where
        assert lines[0].startswith(f"deepcontext: error: {path}: "), where
        assert message in lines[0], where


CASES = {
    # ids and values of the wrong type: a TEXT id sorted last and sized the tree for one node
    "text-id": (UNTYPED_NODES + ["INSERT INTO nodes VALUES ('x', 0, 1)"], "nodes.id is not an integer"),
    "real-parent": (UNTYPED_NODES + ["UPDATE nodes SET parent = 1.5 WHERE id = 2"], "nodes.parent is not an integer"),
    "blob-frame-name": (
        ["CREATE TABLE f2 AS SELECT * FROM frames", "DROP TABLE frames",
         "CREATE TABLE frames (id, kind, name, file, line, module)",
         "INSERT INTO frames SELECT * FROM f2", "DROP TABLE f2",
         "UPDATE frames SET name = x'0102' WHERE id = 1"],
        "frames.name is not an integer",
    ),
    "text-value": (["UPDATE node_metrics SET sum = 'x' WHERE node = 1"], "node_metrics.sum is not a finite number"),
    "blob-value": (["UPDATE node_metrics SET inc = x'00ff' WHERE node = 1"], "node_metrics.inc is not a finite number"),
    "infinite": (["UPDATE node_metrics SET inc = 9e999 WHERE node = 0"], "node_metrics.inc is not a finite number"),
    "negative-count": (["UPDATE node_metrics SET count = -3 WHERE node = 1"], "node 1 has a negative count"),
    # tree structure: one id of 2^31 in a small file asked for 16 GiB; a negative parent looped
    "huge-node-id": (["INSERT INTO nodes VALUES (2147483648, 0, 1)"], "node ids are not 0..{nodes} (found 2147483648)"),
    "node-gap": (["DELETE FROM nodes WHERE id = 3"], "node ids are not 0..{nodes_less2} (found 4)"),
    "negative-parent": (["UPDATE nodes SET parent = -1 WHERE id = 2"], "node 2 has parent -1"),
    "later-parent": (["UPDATE nodes SET parent = 4 WHERE id = 2"], "node 2 has parent 4"),
    "no-frame": (["UPDATE nodes SET frame = 999999 WHERE id = 2"], "node 2 has no frame 999999"),
    "huge-frame-id": (["INSERT INTO frames VALUES (1073741824, 1, 0, 0, 0, 0)"], "frame id 1073741824 outside"),
    "frame-gap": (["DELETE FROM frames WHERE id = 2"], "frame id {frames_less1} outside 0..{frames_less2}"),
    # tables that are not tables: a recursive view hung every reader
    "recursive-view": (RECURSIVE_VIEW, "nodes is a view, not a table"),
    "meta-view": (
        ["DROP TABLE meta", "CREATE VIEW meta AS SELECT 'complete' AS key, '1' AS value"],
        "meta is a view, not a table",
    ),
}  # fmt: skip


@pytest.mark.parametrize("case", list(CASES))
def test_hostile_profile_is_one_line_error_in_every_command(base, tmp_path, case):
    sql, message = CASES[case]
    nodes, frames = _count(base, "nodes"), _count(base, "frames")
    message = message.format(nodes=nodes, nodes_less2=nodes - 2, frames_less1=frames - 1,
                             frames_less2=frames - 2)  # fmt: skip
    path = edited(base, tmp_path / f"{case}.dctx", *sql)
    _refused_everywhere(path, base, tmp_path, message)


def test_integrity_check_failure_is_one_line(base, tmp_path):
    """SQLite's integrity report spans several lines; the error is one."""
    path = tmp_path / "torn.dctx"
    shutil.copy(base, path)
    con = sqlite3.connect(path)
    page = con.execute("PRAGMA page_size").fetchone()[0]
    root = con.execute("SELECT rootpage FROM sqlite_master WHERE name = 'strings'").fetchone()[0]
    con.close()
    data = bytearray(path.read_bytes())
    # the strings table's root page: its cell pointers point past the page
    at = (root - 1) * page
    data[at + 8 : at + 8 + 16] = b"\xff\xf0" * 8
    path.write_bytes(bytes(data))
    _refused_everywhere(path, base, tmp_path, "corrupt profile (")


def _timeline(src: Path, dst: Path, *sql: str) -> Path:
    """`src` with a small timeline over its first nodes, then `sql`."""
    return edited(
        src,
        dst,
        "CREATE TABLE timeline (step INTEGER NOT NULL, kind INTEGER NOT NULL, node INTEGER NOT "
        "NULL, start_ns INTEGER NOT NULL, end_ns INTEGER NOT NULL, tid INTEGER NOT NULL, device "
        "INTEGER NOT NULL, stream INTEGER NOT NULL)",
        "CREATE TABLE timeline_steps (step INTEGER PRIMARY KEY, start_ns INTEGER NOT NULL, "
        "end_ns INTEGER NOT NULL)",
        "INSERT INTO timeline SELECT 0, 1, id, 1000 + id, 2000 + id, 7, -1, 0 FROM nodes "
        "WHERE id BETWEEN 1 AND 5",
        "INSERT INTO timeline_steps VALUES (0, 1000, 3000)",
        *sql,
    )


@pytest.mark.parametrize(
    "meta",
    [
        {"command": "[1, 2]", "timeline_threads": "[]", "gpu_devices": '{"a": 1}'},
        {"command": "{", "timeline_threads": '{"x": 1}', "gpu_devices": "[1, {}]", "pid": "-"},
        {"command": '"text"', "timeline_threads": "[" * 100_000, "gpu_devices": "null"},
    ],
)
def test_chrome_export_with_metadata_that_is_not_the_profilers(base, tmp_path, meta):
    sql = [f"INSERT OR REPLACE INTO meta VALUES ('{k}', '{v}')" for k, v in meta.items()]
    path = _timeline(base, tmp_path / "t.dctx", *sql)
    out = tmp_path / "t.json"
    r = run("export", path, "--format", "chrome", "-o", out)
    assert r.returncode == 0, r.stderr[-3000:]
    doc = json.loads(out.read_text())
    assert len([e for e in doc["traceEvents"] if e["ph"] == "X" and e["cat"] != "step"]) == 5


@pytest.mark.parametrize(
    "meta",
    [
        {"notes": "5", "command": "[1, 2]", "elapsed_ns": "inf"},
        {"notes": "[" * 100_000, "command": "{", "merged_inputs": "[1]"},
        {"notes": '{"a": 1}', "merged_inputs": '[{"meta": {"elapsed_ns": [1]}}]'},
    ],
)
def test_metadata_that_is_not_the_profilers_is_ignored(base, tmp_path, meta):
    """Metadata the profiler writes as JSON (notes, command, merged_inputs) may be anything in
    a file from elsewhere: the commands read on without it."""
    sql = [f"INSERT OR REPLACE INTO meta VALUES ('{k}', '{v}')" for k, v in meta.items()]
    path = edited(base, tmp_path / "meta.dctx", *sql)
    for cmd in commands(path, base, tmp_path):
        if cmd[0] == "view" or "chrome" in cmd:  # view serves forever; no timeline to export
            continue
        r = run(*cmd, "-m", "wall_time") if cmd[0] == "report" else run(*cmd)
        assert r.returncode == 0, (cmd, r.stderr[-3000:])


def test_chrome_export_of_a_bad_timeline_is_one_line(base, tmp_path):
    path = _timeline(
        base,
        tmp_path / "t.dctx",
        "CREATE TABLE t2 AS SELECT * FROM timeline",
        "DROP TABLE timeline",
        "CREATE TABLE timeline (step, kind, node, start_ns, end_ns, tid, device, stream)",
        "INSERT INTO timeline SELECT * FROM t2",
        "UPDATE timeline SET start_ns = 'soon' WHERE node = 2",
    )
    r = run("export", path, "--format", "chrome", "-o", tmp_path / "t.json")
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1, r.stderr[-3000:]
    assert lines[0] == (
        f"deepcontext: error: {path}: corrupt profile (timeline.start_ns is not an integer)"
    )


def test_text_that_is_not_utf8_or_not_text_is_read(base, tmp_path):
    """Text reads as the C++ loader reads it: bytes that are not UTF-8 with U+FFFD (a frame
    name), a BLOB as its bytes (a metric name), NULL as "" (a metadata value)."""
    path = edited(
        base,
        tmp_path / "odd-text.dctx",
        "UPDATE strings SET s = CAST(x'6465647570ff65' AS TEXT) WHERE s = 'dedupe'",
        "UPDATE metrics SET name = CAST('wall_time' AS BLOB) WHERE name = 'wall_time'",
        "CREATE TABLE m2 AS SELECT * FROM meta",
        "DROP TABLE meta",
        "CREATE TABLE meta (key, value)",
        "INSERT INTO meta SELECT * FROM m2",
        "DROP TABLE m2",
        "INSERT INTO meta VALUES ('note', NULL)",
    )
    for cmd in commands(path, base, tmp_path):
        if cmd[0] == "view" or "chrome" in cmd:  # view serves forever; no timeline to export
            continue
        r = run(*cmd)
        assert r.returncode == 0, (cmd, r.stderr[-3000:])
    assert "dedup\ufffde" in run("report", path, "--min-share", "0").stdout
    assert "wall_time" in run("report", path, "-m", "wall_time").stdout


def _deep_chain(src: Path, dst: Path) -> Path:
    """`src` with a chain of DEEP nodes under its first thread, two frames taking turns (mutual
    recursion), whose last node measured one second of cpu_time (inclusive on the whole chain)."""
    shutil.copy(src, dst)
    con = sqlite3.connect(dst)
    n = con.execute("SELECT COUNT(*) FROM nodes").fetchone()[0]
    f = con.execute("SELECT COUNT(*) FROM frames").fetchone()[0]
    s = con.execute("SELECT max(id) FROM strings").fetchone()[0]
    metric = con.execute("SELECT id FROM metrics WHERE name = 'cpu_time'").fetchone()[0]
    thread = con.execute("SELECT min(id) FROM nodes WHERE parent = 0 AND id > 0").fetchone()[0]
    con.executemany(
        "INSERT INTO strings VALUES (?, ?)", [(s + 1, "ping"), (s + 2, "pong"), (s + 3, "/x.py")]
    )
    con.executemany(
        "INSERT INTO frames VALUES (?, 1, ?, ?, ?, 0)",
        [(f, s + 1, s + 3, 10), (f + 1, s + 2, s + 3, 20)],
    )
    con.execute(
        f"WITH RECURSIVE c(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM c WHERE i < {DEEP - 1}) "
        f"INSERT INTO nodes SELECT {n} + i, CASE i WHEN 0 THEN {thread} ELSE {n} + i - 1 END, "
        f"{f} + i % 2 FROM c"
    )
    con.execute(
        f"INSERT INTO node_metrics SELECT id, {metric}, 0, 0, 0, 0, 1e9 FROM nodes "
        f"WHERE id >= {n} AND id < {n + DEEP - 1}"
    )
    con.execute(
        f"INSERT INTO node_metrics VALUES ({n + DEEP - 1}, {metric}, 1e9, 1, 1e9, 1e9, 1e9)"
    )
    con.execute(
        f"UPDATE node_metrics SET inc = inc + 1e9 WHERE metric = {metric} AND node IN (0, {thread})"
    )
    con.commit()
    con.close()
    return dst


def test_deep_call_path_in_every_command(base, tmp_path):
    """A 100,000-deep call path: the json report's encoder overflowed the C stack (SIGSEGV),
    collapsed and speedscope asked for 20 GB and more, diff ran for minutes. Each command now
    runs in bounded time (the timeout) and memory (RLIMIT_AS)."""
    deep = _deep_chain(base, tmp_path / "deep.dctx")
    other = tmp_path / "other.dctx"  # the same chain, its leaf twice as long: every path changed
    shutil.copy(deep, other)
    con = sqlite3.connect(other)
    con.execute("UPDATE node_metrics SET sum = sum * 2, inc = inc * 2 WHERE count = 1")
    con.commit()
    con.close()
    cmds = [c for c in commands(deep, other, tmp_path) if c[0] != "view" and "chrome" not in c]
    # a json diff lists every changed path whole, here 100,000 paths of up to 100,000 frames:
    # quadratic in the format itself; against itself it has none
    cmds = [c if "json" not in c or c[0] != "diff" else ["diff", deep, deep, "--format", "json"]
            for c in cmds]  # fmt: skip
    for cmd in cmds:
        r = run(*cmd)
        assert r.returncode == 0, (cmd, r.returncode, r.stderr[-3000:])
    text = run("report", deep, "--format", "json").stdout
    assert text.count('"label":"x.py:10 ping"') == DEEP // 2
    assert text.count('"label":"x.py:20 pong"') == DEEP // 2
    lines = (tmp_path / "x.collapsed").read_text().splitlines()
    leaf = [ln for ln in lines if ln.endswith(" 1000000000")]
    assert len(leaf) == 1 and leaf[0].count(";") >= DEEP
    doc = json.loads((tmp_path / "x.speedscope").read_text())
    assert max(len(s) for p in doc["profiles"] for s in p["samples"]) >= DEEP


def test_deep_call_path_in_the_chrome_export(base, tmp_path):
    """Timeline events on a 100,000-deep path: each event's path is written whole (the output's
    size), but no path of every ancestor is kept (quadratic: some 40 GB here)."""
    deep = _deep_chain(base, tmp_path / "deep.dctx")
    n = _count(deep, "nodes")
    path = _timeline(
        deep,
        tmp_path / "deep-timeline.dctx",
        f"INSERT INTO timeline SELECT 0, 1, id, 5000 + id, 5001 + id, 7, -1, 0 FROM nodes "
        f"WHERE id >= {n - 40}",
    )
    out = tmp_path / "deep.json"
    r = run("export", path, "--format", "chrome", "-o", out)
    assert r.returncode == 0, r.stderr[-3000:]
    events = [e for e in json.loads(out.read_text())["traceEvents"] if e["ph"] == "X"]
    assert max(len(e["args"].get("path", [])) for e in events) == DEEP + 1
