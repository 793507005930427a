"""GUI benchmark: a real profile grown to 200,000 nodes, loaded and driven in headless Chromium.

    python bench/gui/run.py [--nodes 200000] [--repeats 5] [--json out.json]

Steps: profile tests/gui/programs/work.py with `deepcontext run` (a real profile), grow it with
grow_profile.py, serve it with deepcontext.gui_server, and run bench.mjs (playwright-core driving
/usr/bin/chromium): navigation -> first view drawn, then zoom / expand / sort / view switches,
each timed from the input to the next painted frame. Targets (issue 7): first view <= 2000 ms,
zoom, expand and sort <= 100 ms each.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))

from deepcontext.gui_server import GuiServer  # noqa: E402
from deepcontext.reader import load  # noqa: E402
from grow_profile import grow  # noqa: E402


def to_speedscope(path: str, out: str, metric: str = "cpu_time") -> None:
    """The profile as a speedscope evented profile: each node opens at its start and closes after
    its inclusive value, its own (exclusive) part first, then its children in order."""
    p = load(path)
    # integer nanoseconds, inclusive re-added from the rounded exclusive values, so a child never
    # closes after its parent through floating-point rounding
    exc = [round(p.exclusive(i, metric)) for i in range(len(p))]
    inc = list(exc)
    for i in range(len(p) - 1, 0, -1):
        inc[p.node_parent[i]] += inc[i]
    frame_ix: dict[int, int] = {}
    frames = []
    events = []
    stack = [(0, 0, False)]
    while stack:
        n, t, closing = stack.pop()
        fid = p.node_frame[n]
        if closing:
            events.append({"type": "C", "frame": frame_ix[fid], "at": t})
            continue
        if n != 0:
            if inc[n] <= 0:
                continue
            if fid not in frame_ix:
                f = p.frames[fid]
                frame_ix[fid] = len(frames)
                frames.append({"name": f.label(), "file": f.file, "line": f.line})
            events.append({"type": "O", "frame": frame_ix[fid], "at": t})
            stack.append((n, t + inc[n], True))
        cur = t + exc[n]
        kids = []
        for c in p.node_children[n]:
            kids.append((c, cur, False))
            cur += inc[c]
        stack.extend(reversed(kids))
    doc = {
        # speedscope recognises its own format by this key (a name, not fetched)
        "$schema": "https://www.speedscope.app/file-format-schema.json",
        "exporter": "deepcontext bench/gui",
        "name": "bench",
        "activeProfileIndex": 0,
        "shared": {"frames": frames},
        "profiles": [
            {
                "type": "evented",
                "name": "bench",
                "unit": "nanoseconds",
                "startValue": 0,
                "endValue": inc[0],
                "events": events,
            }
        ],
    }
    Path(out).write_text(json.dumps(doc, separators=(",", ":")))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=200_000)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--json", help="also write the results here")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        d = Path(d)
        for name in ("work.py", "tables.py"):  # work.py imports tables.py
            shutil.copy(ROOT / "tests" / "gui" / "programs" / name, d / name)
        subprocess.run(
            [sys.executable, "-m", "deepcontext", "run", "-o", "real.dctx", "work.py"],
            cwd=d,
            check=True,
            capture_output=True,
        )
        t0 = time.perf_counter()
        n = grow(str(d / "real.dctx"), str(d / "big.dctx"), args.nodes)
        grow_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        server = GuiServer(str(d / "big.dctx")).start()
        server_s = time.perf_counter() - t0
        try:
            r = subprocess.run(
                ["node", str(HERE / "bench.mjs"), server.url, str(args.repeats)],
                cwd=ROOT / "gui",
                capture_output=True,
                text=True,
                timeout=900,
            )
        finally:
            server.close()
        if r.returncode != 0:
            print(r.stderr, file=sys.stderr)
            return 1
        res = json.loads(r.stdout.strip().splitlines()[-1])
        res["profile_nodes"] = n
        res["profile_bytes"] = os.path.getsize(d / "big.dctx")
        res["grow_s"] = round(grow_s, 2)
        res["server_start_s"] = round(server_s, 2)
        if (HERE / "node_modules" / "speedscope").is_dir():
            to_speedscope(str(d / "big.dctx"), str(d / "big.speedscope.json"))
            res["speedscope_json_bytes"] = os.path.getsize(d / "big.speedscope.json")
            r = subprocess.run(
                ["node", str(HERE / "speedscope.mjs"), str(d / "big.speedscope.json"), "3"],
                cwd=ROOT / "gui",
                capture_output=True,
                text=True,
                timeout=900,
            )
            if r.returncode == 0:
                res["speedscope"] = json.loads(r.stdout.strip().splitlines()[-1])
            else:
                res["speedscope_error"] = r.stderr[-1000:]
        res["load_average"] = os.getloadavg()
        res["cpus"] = os.cpu_count()
    fv = res["firstView"]["readyAtMs"]
    lines = [
        f"profile: {n} nodes ({res['profile_bytes'] / 2**20:.1f} MiB), server start (load + payloads)"
        f" {res['server_start_s']:.2f} s, load average {res['load_average'][0]:.1f} on"
        f" {res['cpus']} CPUs",
        f"first view (navigation -> flame graph drawn): median {fv['median']:.0f} ms,"
        f" max {fv['max']:.0f} ms  (target <= 2000)",
    ]
    for k in ("zoom", "unzoom", "expand", "sort"):
        s = res[k]
        lines.append(f"{k:7s}: median {s['median']:.0f} ms, max {s['max']:.0f} ms (n={s['n']})")
    for k, s in res["viewSwitch"].items():
        lines.append(f"switch to {k:6s}: median {s['median']:.0f} ms, max {s['max']:.0f} ms")
    if "speedscope" in res:
        sp = res["speedscope"]
        lines.append(
            f"speedscope 1.25.0, same profile ({res['speedscope_json_bytes'] / 2**20:.1f} MiB"
            f" evented JSON): first view median {sp['firstView']['median']:.0f} ms"
            f" ({sp['firstView']['median'] / fv['median']:.1f}x DeepContext's), switch to its"
            f" Left Heavy flame graph median {sp['leftHeavy']['median']:.0f} ms"
        )
    elif "speedscope_error" in res:
        lines.append(f"speedscope run failed: {res['speedscope_error']}")
    else:
        lines.append("speedscope not installed (cd bench/gui && npm ci): no side-by-side numbers")
    print("\n".join(lines))
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
