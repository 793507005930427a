"""The CUPTI layer's handling of XLA's NVTX ranges, without a GPU: a real jitted function is
compiled on XLA:CPU (its HLO tables registered as on the GPU), then XLA's range strings for its
instructions are fed through the layer's replay entry points (the same code the CUPTI NVTX
callbacks call) and the launch context is read back from the written profile."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from deepcontext.reader import load
from program_helpers import line_of, write_program

LIB = os.path.join(os.path.dirname(__import__("deepcontext").__file__), "libdeepcontext_cupti.so")


def _has_nvtx_layer() -> bool:
    if not os.path.exists(LIB):
        return False
    import ctypes

    return hasattr(ctypes.CDLL(LIB), "dctx_cupti_nvtx_replay_context")


pytestmark = pytest.mark.skipif(
    not _has_nvtx_layer(), reason="this build has no CUPTI layer (no CUPTI headers at build time)"
)

PROGRAM = """
import ctypes, os, sys
import deepcontext
from deepcontext import _core, jax_support

out = sys.argv[1]
deepcontext.start(out)
import jax, jax.numpy as jnp

@jax.jit
def step(x, w):
    with jax.named_scope("layer0"):
        h = jnp.tanh(x @ w)  # model line
    return h.sum()

x, w = jnp.ones((64, 32)), jnp.ones((32, 16))
step(x, w).block_until_ready()  # call line
info = [m for m in jax_support.modules() if m.name == "jit_step"][0]

lib = ctypes.CDLL(jax_support._CUPTI_LIBRARY)
lib.dctx_cupti_hlo_module.argtypes = [ctypes.c_char_p, ctypes.c_int64, ctypes.c_char_p]
lib.dctx_cupti_nvtx_replay_string.argtypes = [ctypes.c_uint64, ctypes.c_uint64, ctypes.c_char_p]
lib.dctx_cupti_nvtx_replay_push.argtypes = [ctypes.c_uint64, ctypes.c_uint64]
lib.dctx_cupti_nvtx_replay_pop.argtypes = [ctypes.c_uint64]
lib.dctx_cupti_nvtx_replay_context.argtypes = [ctypes.c_uint32]
lib.dctx_cupti_nvtx_replay_context.restype = ctypes.c_uint32
rows = "".join(f"{k}\\t{','.join(map(str, v))}\\n" for k, v in info.chains.items())
lib.dctx_cupti_hlo_module(info.name.encode(), info.program_id, rows.encode())

api = jax_support._api
core = deepcontext._core
metric = api.lib.dctx_metric_id
metric.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p]
metric.restype = ctypes.c_uint32
add = api.lib.dctx_add
add.argtypes = [ctypes.c_uint32, ctypes.c_uint32, ctypes.c_double]
m = metric(b"replayed_launches", b"count", b"launches replayed in the NVTX test")

if os.environ.get("REPLAY_XLA_DOMAIN"):
    # As on a GPU machine: XLA's nvtxDomainCreateA("TSL") reached the CUPTI callback first.
    class NvtxData(ctypes.Structure):
        _fields_ = [("fn", ctypes.c_char_p), ("params", ctypes.c_void_p), ("ret", ctypes.c_void_p)]

    name = ctypes.c_char_p(b"TSL")
    domain = ctypes.c_void_p(int(os.environ["REPLAY_XLA_DOMAIN"], 16))
    data = NvtxData(b"nvtxDomainCreateA", ctypes.addressof(name), ctypes.addressof(domain))
    lib.dctx_cupti_nvtx_replay_callback(41, ctypes.byref(data))  # CUPTI_CBID_NVTX_nvtxDomainCreateA

# On a GPU machine XLA has created its real TSL domain by now (the layer takes the first one it
# sees as XLA's): replay in that one, else in a made-up one.
get_domain = getattr(lib, "dctx_cupti_nvtx_replay_domain", None)
if get_domain is not None:
    get_domain.restype = ctypes.c_uint64
TSL = (get_domain() if get_domain is not None else 0) or 0x1000
OTHER = TSL + 0x1000
replay_launch = getattr(lib, "dctx_cupti_nvtx_replay_launch", None)
if replay_launch is not None:
    replay_launch.restype = ctypes.c_uint32
dot = [k for k, v in info.ops.items() if "layer0" in v[0] and v[2]]
assert dot, info.ops
op = sorted(dot)[0]
lib.dctx_cupti_nvtx_replay_string(TSL, 11, f"XlaModule:#prefix=,hlo_module=jit_step,program_id={info.program_id}#".encode())
lib.dctx_cupti_nvtx_replay_string(TSL, 12, f"Thunk:#name={info.ops[op][0]},hlo_op={op},unique_hlo_op_id=7#".encode())
lib.dctx_cupti_nvtx_replay_string(TSL, 13, b"Thunk:#name=jit(step)/layer9/unknown_op,hlo_op=fusion.999#")
lib.dctx_cupti_nvtx_replay_string(OTHER, 21, b"my range")

def launch(tag):
    node = lib.dctx_cupti_nvtx_replay_context(core.current())
    add(node, m, 1.0)
    api.set_prop(node, "tag", tag)

def module_run(tag, inner=None):
    # As XLA runs a module: module range, thunk range, launch. The tracer's per-launch function
    # (replay_launch) must give the node that the call path at the launch line gives.
    lib.dctx_cupti_nvtx_replay_push(TSL, 11)
    lib.dctx_cupti_nvtx_replay_push(TSL, 12)
    node, ref = replay_launch(), lib.dctx_cupti_nvtx_replay_context(core.current())
    assert node == ref, (tag, node, ref)
    if inner:  # Python run inside the range (a host callback) that runs a module itself
        inner()
        again, ref = replay_launch(), lib.dctx_cupti_nvtx_replay_context(core.current())
        assert again == ref, (tag, again, ref)
    lib.dctx_cupti_nvtx_replay_pop(TSL)
    lib.dctx_cupti_nvtx_replay_pop(TSL)
    add(node, m, 1.0)
    api.set_prop(node, "tag", tag)
    return node

launch("outside")  # no range open: the Python line
lib.dctx_cupti_nvtx_replay_push(TSL, 11)
launch("module only")  # a launch in the module range but in no thunk
lib.dctx_cupti_nvtx_replay_push(TSL, 12)
lib.dctx_cupti_nvtx_replay_push(OTHER, 21)  # another domain: ignored
for _ in range(3):
    launch("thunk")  # launch line
lib.dctx_cupti_nvtx_replay_pop(OTHER)
lib.dctx_cupti_nvtx_replay_pop(TSL)
lib.dctx_cupti_nvtx_replay_push(TSL, 13)
launch("no table")
lib.dctx_cupti_nvtx_replay_pop(TSL)
lib.dctx_cupti_nvtx_replay_pop(TSL)
launch("after")
if replay_launch is not None:
    # The call path is taken once per module range: a later range from another line goes there.
    a = module_run("run a")  # run a line
    b = module_run("run b")  # run b line
    inner = []
    c = module_run("run c", lambda: inner.append(module_run("inner")))  # run c line
    assert len({a, b, c, inner[0]}) == 4, (a, b, c, inner)
print("OP", op, info.ops[op])
deepcontext.stop()
"""


@pytest.mark.parametrize("xla_domain", [None, "7f3a5c001230"], ids=["no-domain", "xla-domain"])
def test_thunk_ranges_become_op_path_and_hlo_op_with_source(tmp_path, xla_domain):
    """xla-domain: XLA created its TSL domain before the replay, as on a GPU machine (the replay
    used a made-up domain there and its pushes were ignored: kernels stayed at the Python line)."""
    if xla_domain and not hasattr(
        __import__("ctypes").CDLL(LIB), "dctx_cupti_nvtx_replay_callback"
    ):
        pytest.skip("this layer has no replay callback entry point")
    prog = write_program(tmp_path, PROGRAM)
    out = tmp_path / "nvtx.dctx"
    env = dict(os.environ, REPLAY_XLA_DOMAIN=xla_domain) if xla_domain else None
    proc = subprocess.run(
        [sys.executable, str(prog), str(out)], capture_output=True, text=True, cwd=tmp_path, env=env
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    p = load(out)
    model_line = line_of(prog, "# model line")
    launch_line = line_of(prog, "# launch line")
    by_tag: dict[str, list] = {}
    for n in p.root.walk():
        if "tag" in n.props:
            by_tag.setdefault(n.props["tag"], []).append(n)
    thunk = by_tag["thunk"]
    assert len(thunk) == 1 and thunk[0].inclusive("replayed_launches") == 3
    path = thunk[0].path()
    hlo = path[-1]
    assert hlo.kind == "hlo_op" and hlo.module == "jit_step"
    assert os.path.basename(hlo.file) == "prog.py" and hlo.line == model_line
    ops = [f.name for f in path if f.kind == "jax_op"]
    assert ops[0] == "jit(step)" and "layer0" in ops, ops
    assert any(f.kind == "python" and f.line == launch_line for f in path)
    # The op path sits between the Python call path and the HLO op.
    first_op = next(i for i, f in enumerate(path) if f.kind == "jax_op")
    assert all(f.kind in ("python", "thread") for f in path[:first_op])
    # Outside a thunk (no range, a module range alone, after the pops): the Python line only.
    for tag in ("outside", "module only", "after"):
        assert all(f.kind in ("python", "thread") for f in by_tag[tag][0].path()), tag
    # No table for the instruction: op path and HLO op from the range string, no source line.
    fallback = by_tag["no table"][0].path()
    assert fallback[-1].kind == "hlo_op" and fallback[-1].name == "fusion.999"
    assert fallback[-1].line == 0
    assert [f.name for f in fallback if f.kind == "jax_op"] == ["jit(step)", "layer9", "unknown_op"]
    if "run a" in by_tag:  # a layer with the tracer's launch entry point
        for tag in ("run a", "run b", "run c"):
            (node,) = by_tag[tag]
            path = node.path()
            assert path[-1].kind == "hlo_op" and path[-1].line == model_line, tag
            assert any(
                f.kind == "python" and f.line == line_of(prog, f"# {tag} line") for f in path
            )
        assert by_tag["run a"][0].id != by_tag["run b"][0].id
