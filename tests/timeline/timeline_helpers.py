"""Helpers for the timeline tests: run `deepcontext run` in a fresh interpreter (with its peak RSS)
and read the timeline tables back."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
PROGRAMS = HERE / "programs"


def run(cwd, *args) -> tuple[str, int]:
    """`python -m deepcontext run ARGS...` -> (its stderr, its peak RSS in bytes, from wait4)."""
    env = dict(os.environ)
    env.setdefault("OMP_NUM_THREADS", "1")
    proc = subprocess.Popen(
        [sys.executable, "-m", "deepcontext", "run", *map(str, args)],
        cwd=cwd,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    err = proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    assert proc.returncode == 0, err
    return err, usage.ru_maxrss * 1024


def read(path) -> dict:
    """{'events': [dict per row], 'steps': [(step, start, end)], 'meta': {...}, 'tables': set}."""
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        meta = dict(con.execute("SELECT key, value FROM meta"))
        events, steps = [], []
        if "timeline" in tables:
            cols = ("step", "kind", "node", "start_ns", "end_ns", "tid", "device", "stream")
            events = [
                dict(zip(cols, row, strict=True))
                for row in con.execute(f"SELECT {', '.join(cols)} FROM timeline ORDER BY start_ns")
            ]
            steps = con.execute("SELECT step, start_ns, end_ns FROM timeline_steps ORDER BY step")
            steps = steps.fetchall()
    finally:
        con.close()
    return {"events": events, "steps": steps, "meta": meta, "tables": tables}


def notes(meta: dict) -> list[str]:
    return json.loads(meta.get("notes", "[]"))
