"""Captures the CUPTI fixtures of tests/data/gpu/ on a machine with an NVIDIA GPU.

Each workload of tests/gpu/workloads/ runs under `deepcontext run` with DEEPCONTEXT_CUPTI_RECORD
set, so the GPU layer writes every intercepted callback and decoded activity record, with the
launching context's full path, as JSON lines. tests/gpu/test_replay.py replays them without a GPU.

    python tests/gpu/capture_fixtures.py [--out DIR]     (scripts/gpu-check.sh runs it)
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
WORKLOADS = ("eager", "graph", "threads", "steps")


def capture(name: str, out_dir: str) -> str:
    fixture = os.path.join(out_dir, f"{name}.jsonl")
    with tempfile.TemporaryDirectory() as tmp:
        # Both API domains, so that the fixtures hold the runtime's calls too: tests/gpu/
        # test_replay.py checks on them that the driver's callbacks alone (the default) suffice.
        env = dict(
            os.environ,
            DEEPCONTEXT_CUPTI_RECORD=fixture,
            DEEPCONTEXT_CUPTI_API_DOMAINS="runtime,driver",
        )
        cmd = [sys.executable, "-m", "deepcontext", "run", "-q", "-o", os.path.join(tmp, "p.dctx")]
        cmd.append(os.path.join(HERE, "workloads", f"{name}.py"))
        subprocess.run(cmd, env=env, check=True, cwd=tmp)
        if name == "steps":  # what the schedule decided, for the replay test's weights
            sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))
            from deepcontext import reader

            meta = reader.load(os.path.join(tmp, "p.dctx")).meta
            with open(os.path.join(out_dir, "steps.meta.json"), "w") as f:
                json.dump(
                    {k: v for k, v in meta.items() if k.startswith(("trace_", "steps_"))}
                    | {"gpu_stats": meta.get("gpu_stats", "{}")},
                    f,
                    indent=1,
                )
    return fixture


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.path.join(HERE, "..", "data", "gpu"))
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    for name in WORKLOADS:
        path = capture(name, args.out)
        print(f"{path}: {os.path.getsize(path)} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
