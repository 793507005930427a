"""CPU microbenchmark of the CUPTI layer's NVTX path (no GPU needed).

    python bench/jax_nvtx/run.py [--layer build-x/src/gpu/cupti/libdeepcontext_cupti.so]
                                 [--iters 200000] [--thunks 50] [--extra 250] [--depth 12]

Registers XLA-like strings (`XlaModule:#hlo_module=jit_step,program_id=7#` and `--thunks`
`Thunk:#name=jit(step)/.../dot_general,hlo_op=fusion.K,unique_hlo_op_id=K#`, handles spaced like
heap pointers) and the module's frame chains (as jax_support does at compile time) in the layer,
then times, on one thread, from a Python stack `--depth` frames deep (the launch path reads the
launching thread's call path):

- push+pop of a thunk range (through the CUPTI NVTX callback when the layer exports the replay
  callback, else the push/pop handlers it calls), and of a range in another domain;
- the launch-side lookup for a kernel launched inside a thunk: alone (fixed call-site node) and
  as the tracer does it per launch (call path + lookup);
- dctx_current() alone; a whole simulated step (module range, one launch per thunk, `--extra`
  more ranges: the MLP step measured on the H200 had ~300 pushes and ~50 launches).

Allocations and locks are counted on the timing thread (the benchmark library is preloaded and
wraps malloc and pthread locking). Prints a table and one JSON line.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import shutil
import subprocess
import sys
import tempfile

from deepcontext.capi import Frame
from deepcontext.reader import FRAME_KINDS

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
CASES = [
    ("push+pop, TSL thunk range", "pair"),
    ("push+pop, other domain", "pair"),
    ("launch: thunk lookup alone", "launch"),
    ("launch: as the tracer does it", "launch"),
    ("dctx_current() (call path)", "call"),
    ("step (module, thunks+launches, extra)", "step"),
]


def build(out_dir: str) -> str:
    lib = os.path.join(out_dir, "libnvtx_bench.so")
    cxx = os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++") or "c++"
    subprocess.run(
        [cxx, "-O2", "-std=c++17", "-shared", "-fPIC", "-o", lib,
         os.path.join(HERE, "nvtx_bench.cpp"), "-ldl", "-lpthread"],
        check=True,
    )  # fmt: skip
    return lib


HLO_OP, JAX_OP = FRAME_KINDS.index("hlo_op"), FRAME_KINDS.index("jax_op")


def prepare(layer: ctypes.CDLL, domain: int, hbase: int, hstride: int, thunks: int) -> None:
    layer.dctx_frame_id.argtypes = [ctypes.POINTER(Frame)]
    layer.dctx_frame_id.restype = ctypes.c_uint32
    layer.dctx_cupti_hlo_module.argtypes = [ctypes.c_char_p, ctypes.c_int64, ctypes.c_char_p]
    layer.dctx_cupti_nvtx_replay_string.argtypes = [ctypes.c_uint64, ctypes.c_uint64]
    layer.dctx_cupti_nvtx_replay_string.argtypes += [ctypes.c_char_p]

    def frame(kind: int, name: str, file: str = "", line: int = 0, module: str = "") -> int:
        f = Frame(kind, name.encode(), file.encode(), line, module.encode())
        return layer.dctx_frame_id(ctypes.byref(f))

    handle = lambda i: hbase + hstride * i  # noqa: E731
    rows = []
    layer.dctx_cupti_nvtx_replay_string(
        domain, handle(1), b"XlaModule:#prefix=,hlo_module=jit_step,program_id=7#"
    )
    for k in range(thunks):
        op_name = f"jit(step)/transpose(jvp(mlp))/layer{k % 4}/dot_general"
        hlo = f"fusion.{k}"
        text = f"Thunk:#name={op_name},hlo_op={hlo},unique_hlo_op_id={1000 + k}#"
        layer.dctx_cupti_nvtx_replay_string(domain, handle(2 + k), text.encode())
        chain = [frame(JAX_OP, c) for c in op_name.split("/")]
        chain.append(frame(HLO_OP, hlo, "model.py", 20 + k % 4, "jit_step"))
        rows.append(f"{hlo}\t{','.join(map(str, chain))}\n")
    layer.dctx_cupti_hlo_module(b"jit_step", 7, "".join(rows).encode())


def at_depth(depth: int, fn):
    if depth <= 1:
        return fn()
    return at_depth(depth - 1, fn)


def child(args) -> int:
    bench = ctypes.CDLL(os.environ["NVTX_BENCH_LIB"])
    layer = ctypes.CDLL(os.path.abspath(args.layer))
    domain, hbase, hstride = 0x7F10_0000_1000, 0x5600_0000_2000, 48
    prepare(layer, domain, hbase, hstride, args.thunks)
    bench.nvtx_bench.argtypes = [
        ctypes.c_char_p, ctypes.c_uint64, ctypes.c_uint64, ctypes.c_uint64,
        ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.POINTER(ctypes.c_double),
    ]  # fmt: skip
    out = (ctypes.c_double * 18)()
    best = None
    for _ in range(args.repeat):
        rc = at_depth(
            args.depth,
            lambda: bench.nvtx_bench(
                os.path.abspath(args.layer).encode(),
                domain,
                hbase,
                hstride,
                args.thunks,
                args.extra,
                args.iters,
                out,
            ),  # fmt: skip
        )
        if rc < 0:
            print(f"benchmark failed ({rc}): layer lacks the replay entry points", file=sys.stderr)
            return 1
        vals = list(out)
        best = vals if best is None else [min(a, b) for a, b in zip(best, vals, strict=True)]
    res = {
        "layer": os.path.abspath(args.layer),
        "through_callback_and_launch_entry": bool(rc == 1),
        "depth": args.depth,
        "thunks": args.thunks,
        "extra": args.extra,
        "cases": {},
    }
    print(f"layer: {res['layer']} (callback/launch entry points: {bool(rc == 1)})")
    print(f"{'case':42s} {'ns/op':>10s} {'allocs/op':>10s} {'locks/op':>9s}")
    for i, (name, unit) in enumerate(CASES):
        ns, allocs, locks = best[3 * i : 3 * i + 3]
        res["cases"][name] = {"ns": round(ns, 1), "allocs": allocs, "locks": locks, "per": unit}
        print(f"{name:42s} {ns:10.1f} {allocs:10.3f} {locks:9.3f}   per {unit}")
    print("JSON " + json.dumps(res))
    return 0


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument(
        "--layer",
        default=os.path.join(ROOT, "python", "deepcontext", "libdeepcontext_cupti.so"),
        help="libdeepcontext_cupti.so to measure",
    )
    ap.add_argument("--iters", type=int, default=200_000)
    ap.add_argument("--thunks", type=int, default=50)
    ap.add_argument("--extra", type=int, default=250)
    ap.add_argument("--depth", type=int, default=12)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    if os.environ.get("NVTX_BENCH_LIB"):
        return child(args)
    with tempfile.TemporaryDirectory(prefix="nvtx-bench-") as d:
        lib = build(d)
        env = dict(os.environ, NVTX_BENCH_LIB=lib, LD_PRELOAD=lib)
        return subprocess.run([sys.executable, *sys.argv], env=env, check=False).returncode


if __name__ == "__main__":
    sys.exit(main())
