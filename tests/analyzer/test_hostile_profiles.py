"""Profiles are files people send each other: `deepcontext analyze` (the C++ loader and rules) must
answer a hostile .dctx with one line and exit status 2, or analyze it, never crash, hang or
allocate what the file does not hold (issue 31)."""

from __future__ import annotations

import sqlite3

import gpu_trees as T
import pytest
from analyzer_helpers import run_cli
from dctx_writer import ProfileBuilder

# Rebuilds nodes without INTEGER PRIMARY KEY, so an id can be any SQLite value.
UNTYPED_NODES = [
    "ALTER TABLE nodes RENAME TO nodes_old",
    "CREATE TABLE nodes (id, parent, frame)",
    "INSERT INTO nodes SELECT * FROM nodes_old",
    "DROP TABLE nodes_old",
]


def _profile(tmp_path, *sql: str) -> str:
    b = ProfileBuilder()
    main = b.path(("thread", "MainThread"), ("python", "<module>", T.TRAIN, 40))
    op = b.path(("python", "main", T.TRAIN, 31), ("operator", "aten::addmm"), parent=main)
    b.add(op, "op_time", 6e8, count=100)
    path = b.write(tmp_path / "p.dctx")
    con = sqlite3.connect(path)
    for s in sql:
        con.execute(s)
    con.commit()
    con.close()
    return path


def _refused(path: str, message: str) -> None:
    r = run_cli("analyze", path)
    assert r.returncode == 2, (r.returncode, r.stderr[-2000:])
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "corrupt profile" in lines[0] and message in lines[0], r.stderr


@pytest.mark.parametrize(
    "sql,message",
    [
        # A TEXT id sorts last and read as 0: the tree was sized for one node and written past.
        (UNTYPED_NODES + ["INSERT INTO nodes VALUES ('x', 0, 1)"], "nodes.id is not an integer"),
        (UNTYPED_NODES + ["UPDATE nodes SET parent = 1.5 WHERE id = 2"], "nodes.parent is not"),
        # One id of 2^31 in a small file must not size arrays for 2^31 nodes.
        (["INSERT INTO nodes VALUES (2147483648, 0, 1)"], "node ids are not 0..5"),
        (["DELETE FROM nodes WHERE id = 3"], "node ids are not 0..3 (found 4)"),
        (["UPDATE nodes SET parent = -1 WHERE id = 2"], "node 2 has parent -1"),
        (["UPDATE nodes SET parent = 4 WHERE id = 2"], "node 2 has parent 4"),
        (["UPDATE nodes SET frame = 99 WHERE id = 2"], "node 2 has no frame 99"),
        (["INSERT INTO frames VALUES (1073741824, 1, 0, 0, 0, 0)"], "frame id 1073741824"),
        (["DELETE FROM frames WHERE id = 2"], "outside 0..3"),  # a node's frame is gone
        (["UPDATE node_metrics SET inc = 9e999 WHERE node = 0"], "inc is not a finite number"),
        (["UPDATE node_metrics SET sum = 'x' WHERE node = 4"], "sum is not a finite number"),
        (["UPDATE node_metrics SET count = -3 WHERE node = 4"], "node 4 has a negative count"),
    ],
    ids=[
        "text-id",
        "real-parent",
        "huge-node-id",
        "node-gap",
        "negative-parent",
        "later-parent",
        "no-frame",
        "huge-frame-id",
        "frame-gap",
        "infinite",
        "text-value",
        "negative-count",
    ],
)
def test_bad_tree_or_values_are_one_line_errors(tmp_path, sql, message):
    _refused(_profile(tmp_path, *sql), message)


def test_a_table_replaced_by_a_recursive_view_is_refused_not_read(tmp_path):
    path = _profile(
        tmp_path,
        "DROP TABLE nodes",
        "CREATE VIEW nodes AS WITH RECURSIVE r(id, parent, frame) AS "
        "(SELECT 0, 0, 0 UNION ALL SELECT id + 1, id, 1 FROM r) SELECT * FROM r",
    )
    _refused(path, "nodes is a view, not a table")


@pytest.mark.parametrize(
    "where", ["python file", "metadata", "kernel name", "grid prop", "gpu api name"]
)
def test_long_untrusted_strings_do_not_crash_the_rules(tmp_path, where):
    # A profiled program can name a file anything (compile()); a pattern matcher that recursed per
    # character (std::regex) overflowed the stack on such a name and killed the process (and the
    # GUI server). Each case reaches one pattern with an unbounded repetition.
    long = "1" * 300_000
    b, step = T.base()
    b.meta["cpu_count"] = "x" + long if where == "metadata" else "8"
    b.meta["torch_num_threads"] = "8"
    if where == "python file":
        step = b.node(step, "python", "f", f"/lib/python{long}/x.py", 3)
    op = b.path(("python", "main", T.TRAIN, 33), ("operator", "aten::mm"), parent=step)
    b.add(op, "op_time", 1e9, count=10)
    kernel = f"gemm_s{long}x" if where == "kernel name" else "sm90_xmma_gemm_bf16bf16_bf16f32"
    grid = {"grid": f"({long}, 2, 1)", "theoretical_occupancy": "0.1"}
    api = "cudaMalloc" + "x" * 300_000 if where == "gpu api name" else "cudaLaunchKernel"
    T.launch(b, op, kernel, 5e9, 100, props=grid if where == "grid prop" else None, api=api)
    path = b.write(tmp_path / "long.dctx")
    r = run_cli("analyze", path, "--format", "json")
    assert r.returncode == 0, (r.returncode, r.stderr[-2000:])
