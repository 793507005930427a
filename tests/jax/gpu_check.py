"""The JAX check on an NVIDIA GPU (scripts/gpu-check.sh step `jax`; needs jax with CUDA).

    python tests/jax/gpu_check.py --out DIR [--steps 100] [--repeat 2] [--split-steps 60000]

1. Attribution: the example MLP (4 layers) and the small transformer, each profiled by
   `deepcontext run`; of all kernel gpu_time, the share under an HLO op node with a source line
   (through its op_name path) and the share under a line of the model file; cuBLAS/cuDNN-style
   kernels under a dot/conv op; the XLA NVTX counters; the same with command buffers off.
2. Overhead: the MLP's time per step (100 steps after warm-up), each configuration in its own
   process, best of --repeat: no profiler, deepcontext, jax.profiler; peak RSS of deepcontext at
   N and 4N steps (flat in the number of steps). bench/jax_overhead.py (step jaxbench) compares
   more configurations, and its --diagnose shows where deepcontext's own time goes.
   With the default (sampled) GPU tracing, also the MLP's kernel time split by HLO op over
   --split-steps steps against a run with every record (--cuda-graphs node).
3. Coexistence: jax.profiler.start_trace inside a deepcontext run: no crash, one message.

Prints one PASS/FAIL line per check and a summary table; writes DIR/jax_gpu.json.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import textwrap
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TRAIN = os.path.join(ROOT, "examples", "jax", "train.py")
GEMM = re.compile(r"gemm|cublas|cutlass|xmma|sm\d+_|ampere|hopper|cudnn|conv", re.I)


def run(cmd, env=None, timeout=900):
    """(returncode, stdout+stderr, seconds) of one process."""
    full = dict(os.environ)
    full.update(env or {})
    t0 = time.perf_counter()
    proc = subprocess.run(
        cmd, capture_output=True, text=True, env=full, cwd=ROOT, timeout=timeout, check=False
    )
    return proc.returncode, proc.stdout + proc.stderr, time.perf_counter() - t0


def run_rss(cmd, env=None):
    """(returncode, output, seconds, peak RSS in MiB of that process alone)."""
    full = dict(os.environ)
    full.update(env or {})
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=full, cwd=ROOT
    )
    out = proc.stdout.read().decode(errors="replace")
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return proc.returncode, out, time.perf_counter() - t0, usage.ru_maxrss / 1024.0


def ms_per_step(out: str) -> float | None:
    m = re.search(r"\(([\d.]+) ms/step\)", out)
    return float(m.group(1)) if m else None


JAXPROF = """
import os, runpy, sys, tempfile, jax
d = tempfile.mkdtemp(prefix="jaxprof-")
sys.argv = [sys.argv[1]] + sys.argv[2:]
sys.path.insert(0, os.path.dirname(os.path.abspath(sys.argv[0])))
jax.profiler.start_trace(d)
try:
    runpy.run_path(sys.argv[0], run_name="__main__")
finally:
    jax.profiler.stop_trace()
"""


def compiling(frames) -> bool:
    """Under an XLA compilation (its autotuning kernels), not the program's execution."""
    return any(f.kind == "scope" and f.name.startswith("xla_compile(") for f in frames)


def attribution(path: str) -> dict:
    from deepcontext.reader import load

    p = load(path)
    total = sourced = model = gemm = gemm_dot = compile_time = 0.0
    kernels = launches = 0
    top_unsourced: dict[str, float] = {}
    by_hlo_op: dict[str, float] = {}
    for n in p.root.walk():
        if n.frame.kind != "kernel":
            continue
        t = n.exclusive("gpu_time")
        if not t:
            continue
        path_frames = n.path()
        if compiling(path_frames):
            compile_time += t  # autotuning while compiling: not the program's execution
            continue
        kernels += 1
        launches += n.exclusive("launches")
        total += t
        hlo = [f for f in path_frames if f.kind == "hlo_op"]
        ops = [f.name for f in path_frames if f.kind == "jax_op"]
        key = hlo[-1].name if hlo else "<no hlo op>"
        by_hlo_op[key] = by_hlo_op.get(key, 0.0) + t
        if hlo and hlo[-1].line > 0:
            sourced += t
            if os.path.basename(hlo[-1].file) in ("model.py", "train.py"):
                model += t
        else:
            key = n.frame.name[:60] + (" [no hlo op]" if not hlo else " [no source]")
            top_unsourced[key] = top_unsourced.get(key, 0.0) + t
        if GEMM.search(n.frame.name):
            gemm += t
            if any("dot" in o or "conv" in o for o in ops) or any(
                "dot" in f.name or "gemm" in f.name or "conv" in f.name for f in hlo
            ):
                gemm_dot += t
    worst = sorted(top_unsourced.items(), key=lambda kv: -kv[1])[:5]
    return {
        "kernels": kernels,
        "launches": launches,
        "gpu_time_ms": total / 1e6,
        "compile_gpu_time_ms": compile_time / 1e6,
        "share_hlo_op_with_source": sourced / total if total else 0.0,
        "share_model_source_line": model / total if total else 0.0,
        "gemm_time_ms": gemm / 1e6,
        "share_gemm_under_dot": gemm_dot / gemm if gemm else None,
        "unsourced_top": [(k, v / 1e6) for k, v in worst],
        "by_hlo_op": by_hlo_op,  # kernel gpu_time of the run (ns) by HLO op
        "meta": {
            k: p.meta.get(k)
            for k in (
                "jax_command_buffers",
                "jax_nvtx",
                "jax_nvtx_stats",
                "gpu_stats",
                "cupti_library",
                "cupti_graph_tracing",
                "notes",
            )
        },
    }


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT", "out-gpu"))
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument(
        "--cuda-graphs",
        choices=("node", "graph", "sample"),
        help="passed to every deepcontext run (default: JAX's, sampled); when sampled, the "
        "MLP's split of kernel time by HLO op is also checked against a run with every record",
    )
    ap.add_argument(
        "--split-steps", type=int, default=60000, help="MLP steps of the sampled split check"
    )
    args = ap.parse_args()
    graphs = ["--cuda-graphs", args.cuda_graphs] if args.cuda_graphs else []
    os.makedirs(args.out, exist_ok=True)
    py = args.python
    results: dict = {"checks": []}
    lines = []

    def check(name: str, ok: bool, detail: str) -> None:
        results["checks"].append({"name": name, "ok": bool(ok), "detail": detail})
        lines.append(f"{'PASS' if ok else 'FAIL'}  {name}: {detail}")
        print("check:", lines[-1], flush=True)

    rc, out, _ = run([py, "-c", "import jax; print(jax.__version__, jax.devices())"])
    print("jax:", out.strip().splitlines()[-1] if out.strip() else out, flush=True)

    # 1. Attribution.
    configs = [
        ("mlp", ["--model", "mlp"], []),
        ("transformer", ["--model", "transformer", "--batch", "32", "--width", "512"], []),
        ("mlp, command buffers off", ["--model", "mlp"], ["--no-jax-command-buffers"]),
        (
            "transformer, command buffers off",
            ["--model", "transformer", "--batch", "32", "--width", "512"],
            ["--no-jax-command-buffers"],
        ),
    ]
    for label, model_args, dc_args in configs:
        prof = os.path.join(args.out, f"jax-{label.split(',')[0]}{'-cb' if dc_args else ''}.dctx")
        cmd = [py, "-m", "deepcontext", "run", "-q", *graphs, *dc_args, "-o", prof, TRAIN]
        rc, out, _ = run([*cmd, *model_args, "--steps", str(args.steps)])
        if rc != 0:
            check(f"attribution {label}", False, f"run failed rc={rc}: {out[-1500:]}")
            continue
        a = attribution(prof)
        results[f"attribution {label}"] = a
        print(json.dumps(a, indent=1), flush=True)
        want = 0.95
        check(
            f"attribution {label}",
            # Every training step launches kernels: a sampled run whose windows missed the steps
            # (2026-12-06, MLP: 1 kernel record in 7 windows) must not pass on what it traced.
            a["share_hlo_op_with_source"] >= want and a["launches"] >= args.steps,
            f"{a['kernels']} kernels, {a['launches']:.0f} launches, "
            f"{a['gpu_time_ms']:.1f} ms gpu_time "
            f"(+{a['compile_gpu_time_ms']:.1f} ms while compiling); "
            f"{a['share_hlo_op_with_source']:.1%} under an HLO op with a source line, "
            f"{a['share_model_source_line']:.1%} under a model-file line; "
            f"gemm under dot: {a['share_gemm_under_dot']}; nvtx {a['meta'].get('jax_nvtx_stats')}",
        )

    # 2. Overhead (MLP, 4 layers, --steps steps), each configuration in its own process.
    base = [TRAIN, "--model", "mlp", "--steps", str(args.steps)]
    modes = {
        "none": [py, *base],
        "deepcontext": [
            py,
            "-m",
            "deepcontext",
            "run",
            "-q",
            *graphs,
            "-o",
            os.path.join(args.out, "ovh.dctx"),
            *base,
        ],
        "deepcontext, no HLO ops": [
            py,
            "-m",
            "deepcontext",
            "run",
            "-q",
            *graphs,
            "--no-jax-hlo-ops",
            "-o",
            os.path.join(args.out, "ovh-nohlo.dctx"),
            *base,
        ],
        "jax.profiler": [py, "-c", JAXPROF, *base],
    }
    times: dict[str, list] = {m: [] for m in modes}
    rss: dict[str, float] = {}
    for _ in range(args.repeat):
        for mode, cmd in modes.items():
            rc, out, _, peak = run_rss(cmd)
            t = ms_per_step(out)
            if rc == 0 and t:
                times[mode].append(t)
                rss[mode] = max(rss.get(mode, 0.0), peak)
            else:
                print(f"{mode} failed rc={rc}: {out[-800:]}", flush=True)
    best = {m: min(v) for m, v in times.items() if v}
    results["overhead_ms_per_step"] = times
    results["peak_rss_mib"] = rss
    if "none" in best and "deepcontext" in best:
        ratio = best["deepcontext"] / best["none"]
        jp = best.get("jax.profiler")
        nohlo = best.get("deepcontext, no HLO ops")
        check(
            "overhead mlp",
            ratio <= 1.10,
            f"{best['none']:.3f} ms/step alone, {best['deepcontext']:.3f} with deepcontext "
            f"({ratio:.2f}x)"
            + (f", {nohlo:.3f} without NVTX/HLO ops ({nohlo / best['none']:.2f}x)" if nohlo else "")
            + (f", {jp:.3f} with jax.profiler ({jp / best['none']:.2f}x)" if jp else ""),
        )
    long_cmd = list(modes["deepcontext"])
    long_cmd[long_cmd.index("--steps") + 1] = str(args.steps * 4)
    rc, out, _, peak_long = run_rss(long_cmd)
    if rc == 0 and "deepcontext" in rss:
        growth = peak_long - rss["deepcontext"]
        results["rss_growth_mib_4x_steps"] = growth
        check(
            "rss flat in steps",
            growth < 32,
            f"peak RSS {rss['deepcontext']:.0f} MiB at {args.steps} steps, {peak_long:.0f} MiB "
            f"at {args.steps * 4} (jax.profiler: {rss.get('jax.profiler', 0):.0f} MiB)",
        )

    # 2b. Sampled records against every record: the MLP's kernel time split by HLO op.
    if args.cuda_graphs in (None, "sample"):
        runs, windows = {}, 0
        for mode in ("sample", "node"):
            prof = os.path.join(args.out, f"split-{mode}.dctx")
            rc, out, _ = run(
                [py, "-m", "deepcontext", "run", "-q", "--cuda-graphs", mode, "-o", prof]
                + [TRAIN, "--model", "mlp", "--steps", str(args.split_steps)]
            )
            if rc == 0:
                runs[mode] = attribution(prof)["by_hlo_op"]
                if mode == "sample":
                    from deepcontext.reader import load

                    windows = int(load(prof).meta.get("gpu_sampling_windows") or 0)
        s, n = runs.get("sample", {}), runs.get("node", {})
        ts, tn = sum(s.values()), sum(n.values())
        if ts > 0 and tn > 0:
            worst = max(abs(s.get(k, 0) / ts - n.get(k, 0) / tn) for k in set(s) | set(n))
            results["sampled_split"] = {
                "sample_ms": ts / 1e6,
                "node_ms": tn / 1e6,
                "worst": worst,
                "windows": windows,
            }
            # The split, and the weighted total against the real one: wall-time weights kept the
            # split and undercounted launch-bound steps, which tracing slows inside a window
            # (H100, 2026-12-06: 249 ms sampled, 709 ms with every record; docs/gpu.md); windows
            # now weigh launches. A run traced in one window proves nothing (2026-12-06 21:35 UTC:
            # graph launches were not counted and the first window never closed).
            check(
                "sampled split by HLO op",
                worst <= 0.02 and 0.8 <= ts / tn <= 1.25 and windows >= 3,
                f"largest difference of an HLO op's share of kernel time {worst:.2%}; kernel "
                f"time {ts / 1e6:.1f} ms sampled in {windows} windows, {tn / 1e6:.1f} ms with "
                "every record",
            )
        else:
            check("sampled split by HLO op", False, f"no kernel time: runs {sorted(runs)}")

    # 3. Coexistence with jax.profiler.
    prog = os.path.join(args.out, "coexist.py")
    with open(prog, "w") as f:
        f.write(
            textwrap.dedent(
                f"""
                import jax, jax.numpy as jnp
                f = jax.jit(lambda x: (x @ x).sum())
                x = jnp.ones((512, 512))
                f(x).block_until_ready()
                jax.profiler.start_trace({os.path.join(args.out, "coexist-trace")!r})
                for _ in range(10):
                    y = f(x)
                y.block_until_ready()
                jax.profiler.stop_trace()
                print("coexist done", float(y))
                """
            )
        )
    prof = os.path.join(args.out, "coexist.dctx")
    rc, out, _ = run([py, "-m", "deepcontext", "run", "-o", prof, prog])
    said = "jax.profiler.start_trace called while deepcontext profiles" in out
    check(
        "coexistence jax.profiler",
        rc == 0 and "coexist done" in out and said,
        f"rc={rc}, message {'shown' if said else 'missing'}; "
        + out.strip()[-600:].replace("\n", " | "),
    )

    with open(os.path.join(args.out, "jax_gpu.json"), "w") as f:
        json.dump(results, f, indent=1, default=str)
    print("\n== jax GPU check")
    print("\n".join(lines))
    return 0 if all(c["ok"] for c in results["checks"]) else 1


if __name__ == "__main__":
    sys.exit(main())
