"""The distributed step of scripts/gpu-check.sh: DDP with NCCL under the profiler.

    python examples/distributed/gpu_check.py --out DIR

1. One GPU, world_size 1: train_ddp.py under torchrun with NCCL, without and with
   `deepcontext run`, alternating (best of --repeat each): the profiled ms/step over the plain one
   is the overhead. The rank's profile must hold NCCL kernels (gpu_time) under the c10d all-reduce
   operator of the loss all-reduce's call site. (DDP's own bucket all-reduce is an in-place SUM,
   which NCCL skips with a single rank: no kernel is expected there then.)
2. With two or more GPUs: the same with 2 ranks and rank 1 sleeping in its step; both profiles,
   NCCL kernels under DDP's all-reduce (in the backward), `deepcontext merge`, and the analyzer's
   rank-straggler finding naming rank 1. With one GPU this part prints `blocked`.

Prints `distributed: ...` summary lines and writes DIR/summary.json; exit status 0 when every check
that could run passed.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
TRAIN = HERE / "train_ddp.py"
ENV = {
    # multi-GPU runs on the lent machines must keep NVLink multicast (NVLS) off
    "NCCL_NVLS_ENABLE": "0",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "NVSHMEM_DISABLE_NVLS": "1",
    "OMP_NUM_THREADS": "4",
}


def run(cmd: list[str], cwd: Path, timeout: float) -> tuple[int, str, float]:
    env = dict(os.environ)
    env.update(ENV)
    t0 = time.perf_counter()
    try:
        p = subprocess.run(
            cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False
        )
        out, rc = p.stdout + p.stderr, p.returncode
    except subprocess.TimeoutExpired as e:
        out, rc = f"timeout after {timeout} s\n{e.stdout or ''}{e.stderr or ''}", 124
    return rc, out, time.perf_counter() - t0


def ms_per_step(out: str) -> float | None:
    m = re.search(r"([\d.]+) ms/step", out)
    return float(m.group(1)) if m else None


def torchrun(nproc: int, args: list[str]) -> list[str]:
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node",
        str(nproc),
        str(TRAIN),
        "--backend",
        "nccl",
        *args,
    ]


def profiled(output: Path, cmd: list[str]) -> list[str]:
    return [sys.executable, "-m", "deepcontext", "run", "-q", "-o", str(output), "--", *cmd]


def comm_kernels(path: Path) -> dict:
    """Kernels below c10d collective operators of one rank's profile, split by where the collective
    was called: DDP's bucket all-reduce (below a backward) or an explicit dist.* call."""
    from deepcontext.reader import load

    prof = load(str(path))
    out = {"ddp": {}, "explicit": {}, "ops": {}}
    for n in prof.nodes():
        f = n.frame
        if f.kind == "operator" and f.name.startswith("c10d::"):
            out["ops"][f.name] = out["ops"].get(f.name, 0) + n.exclusive("op_count")
        if f.kind != "kernel":
            continue
        path_frames = n.path()
        c10d = [p for p in path_frames if p.kind == "operator" and p.name.startswith("c10d::")]
        if not c10d:
            continue
        explicit = any(p.kind == "operator" and p.name.startswith("dist.") for p in path_frames)
        where = "explicit" if explicit else "ddp"
        k = out[where].setdefault(f.name, {"gpu_time": 0.0, "launches": 0, "under": c10d[-1].name})
        if "gpu_time" in prof.metric_names():
            k["gpu_time"] += n.inclusive("gpu_time")
            k["launches"] += n.stats("gpu_time")["count"]
    out["meta"] = {k: prof.meta.get(k) for k in ("rank", "world_size", "dist_backend", "host")}
    out["gpu_time_total"] = prof.total("gpu_time") if "gpu_time" in prof.metric_names() else 0.0
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="out-gpu/distributed")
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--hidden", type=int, default=4096)
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--batch", type=int, default=512)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=120)
    args = ap.parse_args()
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    import torch

    ngpu = torch.cuda.device_count()
    train_args = [
        "--steps",
        str(args.steps),
        "--warmup",
        str(args.warmup),
        "--hidden",
        str(args.hidden),
        "--layers",
        str(args.layers),
        "--batch",
        str(args.batch),
    ]
    summary: dict = {"gpus": ngpu, "checks": {}}
    ok = True

    def check(name: str, passed: bool, detail: str) -> None:
        nonlocal ok
        ok &= passed
        summary["checks"][name] = {"ok": passed, "detail": detail}
        print(f"distributed: {name}: {'ok' if passed else 'FAIL'}: {detail}", flush=True)

    if ngpu < 1:
        check("gpu", False, "no CUDA device")
        return 1
    # 1. one GPU, world_size 1
    plain, prof = [], []
    prof_path = out / "nccl1.dctx"
    for i in range(args.repeat):
        rc, log, wall = run(torchrun(1, train_args), out, args.timeout)
        (out / f"plain1-{i}.log").write_text(log)
        if rc == 0 and ms_per_step(log):
            plain.append(ms_per_step(log))
        rc, log, wall_p = run(profiled(prof_path, torchrun(1, train_args)), out, args.timeout)
        (out / f"prof1-{i}.log").write_text(log)
        if rc == 0 and ms_per_step(log):
            prof.append(ms_per_step(log))
        print(
            f"distributed: run {i}: plain {plain[-1:]} ms/step ({wall:.0f} s), profiled "
            f"{prof[-1:]} ms/step ({wall_p:.0f} s)",
            flush=True,
        )
    rank_file = out / "nccl1.rank0-of1.dctx"
    check(
        "1gpu-runs",
        bool(plain and prof and rank_file.exists()),
        f"plain {plain} ms/step, profiled {prof} ms/step, profile {rank_file.name} "
        f"{'written' if rank_file.exists() else 'MISSING'}",
    )
    if plain and prof:
        ratio = min(prof) / min(plain)
        summary["overhead_1gpu"] = ratio
        check(
            "1gpu-overhead",
            ratio <= 1.05,
            f"{ratio:.3f}x (best {min(prof):.2f} vs "
            f"{min(plain):.2f} ms/step, {args.steps} steps, hidden {args.hidden})",
        )
    if rank_file.exists():
        k = comm_kernels(rank_file)
        summary["kernels_1gpu"] = k
        expl = k["explicit"]
        t = sum(v["gpu_time"] for v in expl.values())
        check(
            "1gpu-nccl-kernels",
            t > 0,
            f"explicit all_reduce: {len(expl)} kernel(s) under c10d ops, {t / 1e6:.3f} ms "
            f"({', '.join(sorted(expl)[:3])}); DDP buckets: {len(k['ddp'])} kernel(s) "
            f"(none expected with one rank); c10d ops {k['ops']}; meta {k['meta']}",
        )
    # 2. two GPUs
    if ngpu >= 2:
        base = out / "nccl2.dctx"
        strag = train_args + ["--straggler-rank", "1", "--straggler-ms", "20"]
        rc, log, _ = run(torchrun(2, train_args), out, args.timeout)
        (out / "plain2.log").write_text(log)
        p2 = ms_per_step(log) if rc == 0 else None
        rc, log, _ = run(profiled(base, torchrun(2, train_args)), out, args.timeout)
        (out / "prof2.log").write_text(log)
        q2 = ms_per_step(log) if rc == 0 else None
        if p2 and q2:
            summary["overhead_2gpu"] = q2 / p2
            check(
                "2gpu-overhead", q2 / p2 <= 1.05, f"{q2 / p2:.3f}x ({q2:.2f} vs {p2:.2f} ms/step)"
            )
        else:
            check("2gpu-runs", False, "see plain2.log / prof2.log")
        sbase = out / "strag2.dctx"
        rc, log, _ = run(profiled(sbase, torchrun(2, strag)), out, args.timeout)
        (out / "strag2.log").write_text(log)
        ranks = [out / f"strag2.rank{r}-of2.dctx" for r in range(2)]
        if all(r.exists() for r in ranks):
            k = comm_kernels(ranks[0])
            t = sum(v["gpu_time"] for v in k["ddp"].values())
            check(
                "2gpu-ddp-nccl-kernels",
                t > 0,
                f"{len(k['ddp'])} kernel(s) under DDP's c10d::allreduce_, {t / 1e6:.3f} ms",
            )
            merged = out / "strag2.merged.dctx"
            rc, log, _ = run(
                [
                    sys.executable,
                    "-m",
                    "deepcontext",
                    "merge",
                    "-q",
                    *map(str, ranks),
                    "-o",
                    str(merged),
                ],
                out,
                args.timeout,
            )
            rc, log, _ = run(
                [
                    sys.executable,
                    "-m",
                    "deepcontext",
                    "analyze",
                    str(merged),
                    "--format",
                    "json",
                    "--rule",
                    "rank-straggler",
                ],
                out,
                args.timeout,
            )
            try:
                f = [x for x in json.loads(log)["findings"] if x["rule"] == "rank-straggler"]
            except ValueError:
                f = []
            who = f[0]["evidence"]["straggler_rank"] if f else None
            src = f[0]["location"].get("source") if f else None
            check("2gpu-straggler", who == "rank 1", f"analyzer: {who} at {src}")
        else:
            check("2gpu-straggler", False, "rank profiles missing, see strag2.log")
    else:
        summary["checks"]["2gpu"] = {"ok": None, "detail": f"blocked: {ngpu} GPU on this machine"}
        print(f"distributed: 2gpu: blocked: {ngpu} GPU on this machine", flush=True)
    (out / "summary.json").write_text(json.dumps(summary, indent=1, default=str))
    print(
        f"distributed: {'ok' if ok else 'FAIL'}: overhead "
        f"{summary.get('overhead_1gpu', float('nan')):.3f}x (1 GPU), checks "
        f"{sum(1 for c in summary['checks'].values() if c['ok'])}/"
        f"{sum(1 for c in summary['checks'].values() if c['ok'] is not None)}",
        flush=True,
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
