"""Our own NVTX injection (src/gpu/cupti/nvtx_injection.cpp), without a GPU: the real NVTX
library of the CUDA wheels (libnvtx3interop, the same NVTX v3 code that XLA links) loads the GPU
layer through NVTX_INJECTION64_PATH, as XLA's copy does under `deepcontext run`; XLA-style domain,
string and range calls then reach our per-thread range stack, and a launch inside a thunk range
goes under the thunk's op path and HLO op in the written profile."""

from __future__ import annotations

import glob
import os
import subprocess
import sys

import pytest
from deepcontext.reader import load
from program_helpers import line_of, write_program

LIB = os.path.join(os.path.dirname(__import__("deepcontext").__file__), "libdeepcontext_cupti.so")


def _nvtx_library() -> str | None:
    for site in sys.path:
        hits = sorted(glob.glob(os.path.join(site, "nvidia", "*", "lib", "libnvtx3interop.so*")))
        hits += sorted(
            glob.glob(os.path.join(site, "nvidia", "nvtx", "lib", "libnvtx3interop.so*"))
        )
        if hits:
            return hits[0]
    return None


def _has_injection() -> bool:
    if not os.path.exists(LIB):
        return False
    import ctypes

    return hasattr(ctypes.CDLL(LIB), "InitializeInjectionNvtx2")


NVTX = _nvtx_library()
pytestmark = [
    pytest.mark.skipif(not _has_injection(), reason="this build has no CUPTI layer"),
    pytest.mark.skipif(NVTX is None, reason="no libnvtx3interop (NVIDIA NVTX wheel) here"),
]

PROGRAM = """
import ctypes, os, sys
import deepcontext
from deepcontext import jax_support

out, nvtx_path = sys.argv[1], sys.argv[2]
deepcontext.start(out)
import jax  # noqa: F401  (jax_support finishes its set-up after jax is imported)
layer = ctypes.CDLL(jax_support._CUPTI_LIBRARY)
nvtx = ctypes.CDLL(nvtx_path)  # NVTX initialises on its first call and dlopens the injection
nvtx.nvtxDomainCreateA.restype = ctypes.c_void_p
nvtx.nvtxDomainCreateA.argtypes = [ctypes.c_char_p]
nvtx.nvtxDomainRegisterStringA.restype = ctypes.c_void_p
nvtx.nvtxDomainRegisterStringA.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
nvtx.nvtxDomainRangePop.argtypes = [ctypes.c_void_p]

class Attributes(ctypes.Structure):  # nvtxEventAttributes_t v2 (nvToolsExt.h)
    _fields_ = [("version", ctypes.c_uint16), ("size", ctypes.c_uint16),
                ("category", ctypes.c_uint32), ("colorType", ctypes.c_int32),
                ("color", ctypes.c_uint32), ("payloadType", ctypes.c_int32),
                ("reserved0", ctypes.c_int32), ("payload", ctypes.c_uint64),
                ("messageType", ctypes.c_int32), ("message", ctypes.c_void_p)]

nvtx.nvtxDomainRangePushEx.argtypes = [ctypes.c_void_p, ctypes.POINTER(Attributes)]

def attrs(handle=None, ascii=None):
    a = Attributes(version=3, size=ctypes.sizeof(Attributes))
    a.messageType, a.message = (3, handle) if handle else (1, ctypes.cast(ascii, ctypes.c_void_p).value)
    return a

tsl = nvtx.nvtxDomainCreateA(b"TSL")
assert tsl and nvtx.nvtxDomainCreateA(b"TSL") == tsl
other = nvtx.nvtxDomainCreateA(b"user")
module = nvtx.nvtxDomainRegisterStringA(tsl, b"XlaModule:#hlo_module=jit_step,program_id=7#")
thunk = nvtx.nvtxDomainRegisterStringA(tsl, b"Thunk:#name=jit(step)/layer0/dot_general,hlo_op=dot.3#")
assert module and thunk and module != thunk
assert nvtx.nvtxDomainRegisterStringA(tsl, b"Thunk:#name=jit(step)/layer0/dot_general,hlo_op=dot.3#") == thunk
mine = nvtx.nvtxDomainRegisterStringA(other, b"my range")

layer.dctx_cupti_nvtx_replay_launch.restype = ctypes.c_uint32
api = jax_support._api
metric = api.lib.dctx_metric_id
metric.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p]
metric.restype = ctypes.c_uint32
add = api.lib.dctx_add
add.argtypes = [ctypes.c_uint32, ctypes.c_uint32, ctypes.c_double]
m = metric(b"replayed_launches", b"count", b"launches in the NVTX injection test")

def launch(tag):
    node = layer.dctx_cupti_nvtx_replay_launch()  # what the tracer does at each kernel launch
    add(node, m, 1.0)
    api.set_prop(node, "tag", tag)

levels = []
levels.append(nvtx.nvtxDomainRangePushEx(tsl, attrs(module)))
levels.append(nvtx.nvtxDomainRangePushEx(tsl, attrs(thunk)))
levels.append(nvtx.nvtxDomainRangePushEx(other, attrs(mine)))  # another domain: not ours
for _ in range(3):
    launch("thunk")  # launch line
nvtx.nvtxDomainRangePop(other)
levels.append(nvtx.nvtxDomainRangePushEx(tsl, attrs(ascii=b"ThunkExecutor::Execute")))
launch("ascii")
levels.append(nvtx.nvtxDomainRangePop(tsl))
levels.append(nvtx.nvtxDomainRangePop(tsl))
levels.append(nvtx.nvtxDomainRangePop(tsl))
launch("after")
counters = (ctypes.c_uint64 * 10)()
layer.dctx_cupti_nvtx_counters.restype = ctypes.c_uint32
n = layer.dctx_cupti_nvtx_counters(counters, 10)
print("LEVELS", levels, "COUNTERS", n, list(counters))
deepcontext.stop()
"""


def test_real_nvtx_loads_our_injection_and_thunk_ranges_reach_launches(tmp_path):
    prog = write_program(tmp_path, PROGRAM)
    out = tmp_path / "inj.dctx"
    env = dict(os.environ, NVTX_INJECTION64_PATH=LIB)
    proc = subprocess.run(
        [sys.executable, str(prog), str(out), NVTX],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    line = next(x for x in proc.stdout.splitlines() if x.startswith("LEVELS"))
    levels = eval(line.split("LEVELS", 1)[1].split("COUNTERS")[0])  # a printed list of ints
    counters = [int(v) for v in line.split("[")[-1].rstrip("]").split(",")]
    # push levels as NVTX defines them (0 outermost); another domain is not counted in ours
    assert levels == [0, 1, 0, 2, 2, 1, 0], levels
    names = ["pushes", "strings", "launches", "in_thunk", "sourced", "lookups", "unregistered"]
    stats = dict(zip(names + ["other", "paths", "injections"], counters, strict=True))
    assert stats["injections"] == 1, stats  # NVTX called our InitializeInjectionNvtx2
    assert stats["pushes"] == 3 and stats["unregistered"] == 1 and stats["other"] == 1, stats
    assert stats["strings"] == 2, stats  # the module and thunk strings, parsed once each
    p = load(out)
    by_tag: dict[str, list] = {}
    for n in p.root.walk():
        if "tag" in n.props:
            by_tag.setdefault(n.props["tag"], []).append(n)
    (thunk,) = by_tag["thunk"]
    assert thunk.inclusive("replayed_launches") == 3
    path = thunk.path()
    assert path[-1].kind == "hlo_op" and path[-1].name == "dot.3" and path[-1].module == "jit_step"
    assert [f.name for f in path if f.kind == "jax_op"] == ["jit(step)", "layer0", "dot_general"]
    assert any(f.kind == "python" and f.line == line_of(prog, "# launch line") for f in path)
    # An ascii range on top (no registered string) is no thunk: the launch stays at its line.
    for tag in ("ascii", "after"):
        assert all(f.kind in ("python", "thread") for f in by_tag[tag][0].path()), tag
