"""JAX integration: jitted call sites, compiled HLO modules, XLA worker threads, GPU HLO ops.

`activate(options)` is cheap and never imports jax: if jax is not imported yet, a one-shot import
hook finishes the work right after `import jax` completes. Then:

- Every compilation (``jax._src.compiler.compile_or_get_cached``: jit, pjit, AOT ``.compile()``,
  persistent-cache hits) is observed once: the optimized HLO text of each module is parsed into
  ``instruction -> (op_name, source file, source line)``, HLO-op frames are interned, and the
  module is recorded under an ``xla_compile(<module>)`` node at the call site that compiled it.
  Work that XLA's compiler threads do meanwhile lands under that node.
- ``jax.jit`` returns functions whose calls are *dispatches* from the caller's call path
  (``deepcontext._core.current()``); ops run eagerly are dispatches from their line too. Dispatch
  is asynchronous: an execution runs on XLA's threads (Eigen intra-op pool, the CPU client's
  threads) after its call returned, while the program dispatches the next ones. The JAX adapter
  (src/frameworks/jax/inflight.cpp) keeps the executions in flight, oldest first, each until an
  output array of it is ready; the core's worker context is the call path of the oldest one
  (XLA:CPU completes them in order), checked at each sampler tick. So XLA's CPU time lands under
  the line whose execution runs, not under the latest call (an eager ``jax.random.split`` made
  while the previous step still runs).
- On NVIDIA GPUs, XLA's NVTX ranges (domain "TSL": ``XlaModule:#...#`` and
  ``Thunk:#...hlo_op=...#``) are read by the CUPTI layer (src/gpu/cupti/nvtx.cpp) at each kernel
  launch: kernels go under ``call site -> op_name path -> HLO op (model source line)``. For that
  this module points ``NVTX_INJECTION64_PATH`` at the GPU layer itself (its own NVTX injection,
  src/gpu/cupti/nvtx_injection.cpp; ``DEEPCONTEXT_NVTX_INJECTION=cupti`` names the CUPTI library
  instead, whose NVTX callbacks cost about 2 ms per step of a small MLP on an H200). XLA's
  command buffers (CUDA graphs) stay on: XLA captures each graph inside its thunk ranges, so the
  CUPTI layer puts every graph node, and the kernels replayed from it, under the HLO op of its
  capture. ``--no-jax-command-buffers`` turns them off while profiling (``XLA_FLAGS``
  ``--xla_gpu_enable_command_buffer=``: each thunk launched on its own, slower); the profile's
  meta says which.
- With ``--native`` on XLA:CPU, samples in JIT-compiled kernels (registered through the GDB JIT
  interface) are named after their HLO instruction and op_name (named scopes included), with the
  model's source line, when the core offers a symbolizer hook (``dctx_register_symbolizer``).
  Work that XLA:CPU's runtime does in its own library code (dots and convolutions through
  Eigen/oneDNN, copies, sorts: thunks that are not JIT code) has no HLO op: a pc in
  libjax_common.so is shared by every instruction of that kind, and the thunk running is not
  recorded anywhere a sample can read it (only jax.profiler's TraceMe annotations name it). The
  profile's meta ``jax_cpu_hlo_ops`` says so.
- Reads of a ``jax.Array``'s value on the host (``float()``, ``bool()``, ``.item()``,
  ``np.asarray``, printing: ``ArrayImpl._value``) that fetch it are counted (``jax_host_reads``)
  at the caller's call path: each waits for its computation (the analyzer's host-sync rule).
- ``jax.profiler.start_trace`` while we profile: one clear message; both keep running.
"""

from __future__ import annotations

import ctypes
import json
import os
import re
import struct
import sys
import time

from . import _core, capi
from .import_hook import AfterImport

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))
_CUPTI_LIBRARY = os.path.join(_PACKAGE_DIR, "libdeepcontext_cupti.so")
_COMMAND_BUFFER_FLAG = "--xla_gpu_enable_command_buffer="

# dctx_frame_kind values (include/deepcontext/monitor.h).
KIND_SCOPE = 2
KIND_HLO_OP = 13
KIND_JAX_OP = 14

_options: dict | None = None
_finder = AfterImport("jax", lambda: _on_jax_imported(), before=lambda: _before_jax_import())
_installed = False
_patches: list = []  # (object, attribute, original, replacement)
_api = None
_modules: dict = {}  # (module name, program id) -> ModuleInfo
_said: set = set()
_env_changes: dict = {}  # variable -> value we set (restored on deactivate if still ours)
_stats = {"compiles": 0, "hlo_ops": 0, "parse_errors": 0}
_jit_symbols = None
_inflight = None  # libdeepcontext_jax.so through ctypes.PyDLL (GIL held): in-flight executions
_CPU_HLO_OPS = (
    "XLA:CPU: samples in JIT-compiled kernels (fusions, elementwise and reduction code) are "
    "named after their HLO op and op_name (named scopes) with --native; time in XLA:CPU's "
    "runtime library (dots and convolutions through Eigen/oneDNN, copies, sorts) stays under "
    "the jitted call site without an HLO op: that code is shared by all instructions of its "
    "kind and no sample can read which thunk runs it"
)


# ------------------------------------------------------------------------------------------------
# Options
# ------------------------------------------------------------------------------------------------


def add_arguments(parser) -> None:
    g = parser.add_argument_group("JAX")
    g.add_argument(
        "--no-jax",
        dest="jax",
        action="store_false",
        default=True,
        help="do not record jitted call sites, compiled HLO modules and XLA ops",
    )
    g.add_argument(
        "--no-jax-hlo-ops",
        dest="jax_hlo_ops",
        action="store_false",
        default=True,
        help="GPU: do not read XLA's NVTX thunk ranges (kernels then go under the jitted call "
        "site without op path and HLO op; XLA's flags are left alone)",
    )
    g.add_argument(
        "--no-jax-command-buffers",
        dest="jax_command_buffers",
        action="store_false",
        default=True,
        help="GPU: turn XLA's command buffers (CUDA graphs) off while profiling (each thunk then "
        "launches its kernels itself; slower, same attribution: graph kernels are attributed "
        "where XLA captured them)",
    )


# ------------------------------------------------------------------------------------------------
# The core's C API through ctypes (frames, nodes, props)
# ------------------------------------------------------------------------------------------------


class _Api:
    def __init__(self):
        self.core = _core
        self.lib = lib = capi.library()
        # Per compilation, exact (not sampled): what the jax-recompile rule counts.
        self.m_compiles = lib.dctx_metric_id(
            b"xla_compiles",
            b"count",
            b"XLA compilations (or persistent-cache loads) of jitted code",
        )
        self.m_compile_time = lib.dctx_metric_id(
            b"xla_compile_time", b"ns", b"wall time of XLA compilations, measured per compilation"
        )
        self.m_host_reads = lib.dctx_metric_id(
            b"jax_host_reads",
            b"count",
            b"reads of a jax.Array's value on the host that fetched it (float(), bool(), "
            b".item(), np.asarray, printing): each waits for the computation that makes it",
        )

    def frame(self, kind: int, name: str, file: str = "", line: int = 0, module: str = "") -> int:
        f = capi.Frame(kind, name.encode(), file.encode(), int(line), module.encode())
        return self.lib.dctx_frame_id(ctypes.byref(f))

    def child(self, parent: int, frame: int) -> int:
        return self.lib.dctx_child(parent, frame)

    def set_prop(self, node: int, key: str, value: str) -> None:
        self.lib.dctx_set_prop(node, key.encode(), value.encode())


# ------------------------------------------------------------------------------------------------
# HLO text: instruction -> (op_name, file, line)
# ------------------------------------------------------------------------------------------------

_INSTR = re.compile(r"^\s*(ROOT\s+)?%?([A-Za-z_][\w.\-]*)\s*=\s*(.*)$")
_COMPUTATION = re.compile(r"^\s*(?:ENTRY\s+)?%?([A-Za-z_][\w.\-]*)\s*(?:\(.*\))?.*\{\s*$")
_METADATA = re.compile(r"metadata=\{([^{}]*)\}")
_OP_NAME = re.compile(r'op_name="((?:[^"\\]|\\.)*)"')
_SOURCE_FILE = re.compile(r'source_file="((?:[^"\\]|\\.)*)"')
_SOURCE_LINE = re.compile(r"source_line=(\d+)")
_STACK_FRAME = re.compile(r"stack_frame_id=(\d+)")
_CALLS = re.compile(r"calls=%?([A-Za-z_][\w.\-]*)")
_TABLE_ROW = re.compile(r"^\s*(\d+)\s+(.*)$")
_KV = re.compile(r'(\w+)=("(?:[^"\\]|\\.)*"|[^\s}]+)')


def _unquote(s: str) -> str:
    if len(s) >= 2 and s[0] == '"' and s[-1] == '"':
        s = s[1:-1]
    return s.replace('\\"', '"').replace("\\\\", "\\")


def parse_hlo(text: str) -> dict[str, tuple[str, str, int]]:
    """Instruction name -> (op_name, source file, source line) of an HLO module's text; source
    from ``source_file``/``source_line`` or, in newer XLA, the module's StackFrames tables
    (innermost frame). Fusions without metadata of their own take their fused root's."""
    tables: dict[str, dict[int, dict]] = {}
    section = None
    comp = None
    roots: dict[str, str] = {}  # computation -> metadata text of its root (or first with op_name)
    raw: dict[str, tuple[str | None, str | None]] = {}  # instruction -> (metadata, calls)
    for line in text.splitlines():
        stripped = line.strip()
        if stripped in ("FileNames", "FunctionNames", "FileLocations", "StackFrames"):
            section = stripped
            tables[section] = {}
            continue
        if section is not None:
            m = _TABLE_ROW.match(line)
            if m and not stripped.startswith("%"):
                tables[section][int(m.group(1))] = m.group(2)
                continue
            section = None
        if not stripped or stripped == "}":
            continue
        m = _INSTR.match(line)
        if m and comp is not None:
            rest = m.group(3)
            md = _METADATA.search(rest)
            calls = _CALLS.search(rest)
            meta = md.group(1) if md and "op_name=" in md.group(1) else None
            raw[m.group(2)] = (meta, calls.group(1) if calls else None)
            if meta and (m.group(1) or comp not in roots):
                roots[comp] = meta
            continue
        m = _COMPUTATION.match(line)
        if m:
            comp = m.group(1)

    files = {k: _unquote(v) for k, v in tables.get("FileNames", {}).items()}
    locations = {}
    for k, v in tables.get("FileLocations", {}).items():
        kv = {a: b for a, b in _KV.findall(v)}
        try:
            locations[k] = (files.get(int(kv.get("file_name_id", 0)), ""), int(kv.get("line", 0)))
        except ValueError:
            pass
    frames = {}
    for k, v in tables.get("StackFrames", {}).items():
        kv = {a: b for a, b in _KV.findall(v)}
        try:
            frames[k] = int(kv.get("file_location_id", 0))
        except ValueError:
            pass

    def source(meta: str) -> tuple[str, int]:
        f = _SOURCE_FILE.search(meta)
        ln = _SOURCE_LINE.search(meta)
        if f:
            return _unquote('"' + f.group(1) + '"'), int(ln.group(1)) if ln else 0
        s = _STACK_FRAME.search(meta)
        if s:
            loc = locations.get(frames.get(int(s.group(1)), 0))
            if loc:
                return loc
        return "", 0

    out: dict[str, tuple[str, str, int]] = {}
    for name, (meta, calls) in raw.items():
        if meta is None and calls is not None:
            meta = roots.get(calls)
        if meta is None:
            continue
        op = _OP_NAME.search(meta)
        if not op:
            continue
        file, line_no = source(meta)
        out[name] = (_unquote('"' + op.group(1) + '"'), file, line_no)
    return out


def split_op_name(op_name: str) -> list[str]:
    """'jit(step)/transpose(jvp(layer0))/dot_general' -> its components, '/' inside
    parentheses kept."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(op_name):
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth = max(0, depth - 1)
        elif ch == "/" and depth == 0:
            if i > start:
                parts.append(op_name[start:i])
            start = i + 1
    if start < len(op_name):
        parts.append(op_name[start:])
    return parts


def _program_id(module) -> int:
    """HloModuleProto.id (field 5): the program_id in XLA's GPU annotations. 0 if unknown."""
    try:
        data = module.as_serialized_hlo_module_proto()
    except Exception:
        return 0
    pos, n = 0, len(data)

    def varint(p):
        shift = value = 0
        while p < n:
            b = data[p]
            p += 1
            value |= (b & 0x7F) << shift
            if not b & 0x80:
                return value, p
            shift += 7
        raise ValueError("truncated")

    try:
        while pos < n:
            key, pos = varint(pos)
            field, wire = key >> 3, key & 7
            if wire == 0:
                value, pos = varint(pos)
                if field == 5:
                    return value
            elif wire == 2:
                length, pos = varint(pos)
                pos += length
            elif wire == 1:
                pos += 8
            elif wire == 5:
                pos += 4
            else:
                return 0
    except ValueError:
        return 0
    return 0


class ModuleInfo:
    __slots__ = ("name", "program_id", "ops", "chains")

    def __init__(self, name, program_id, ops):
        self.name = name
        self.program_id = program_id
        self.ops = ops  # instruction -> (op_name, file, line)
        self.chains: dict[str, list[int]] = {}  # instruction -> frame ids (op path, HLO op)


def op_chain(api, module: str, instr: str, op: tuple[str, str, int]) -> list[int]:
    """Frame ids for `op_name components -> HLO op` of one instruction."""
    op_name, file, line = op
    ids = [api.frame(KIND_JAX_OP, part) for part in split_op_name(op_name)]
    ids.append(api.frame(KIND_HLO_OP, instr, file, line, module))
    return ids


def modules() -> list:
    """The modules compiled so far in this session (ModuleInfo)."""
    return list(_modules.values())


# ------------------------------------------------------------------------------------------------
# Hooks: compilation, jitted calls, jax.profiler
# ------------------------------------------------------------------------------------------------


def _say(message: str, key: str | None = None) -> None:
    key = key or message
    if key in _said:
        return
    _said.add(key)
    print(f"deepcontext: {message}", file=sys.stderr, flush=True)
    try:
        _api.core.note(message)
    except Exception:
        pass


_ENTRY = re.compile(r"^ENTRY\s+\S+\s+\((.*)\)\s*->", re.MULTILINE)
_PARAM_TYPE = re.compile(r":\s*([a-z]\w*\[[^\]]*\])")
_MAX_SIGNATURES = 8
_signatures: dict = {}  # xla_compile node -> distinct entry signatures, first _MAX_SIGNATURES


def entry_signature(text: str) -> str:
    """The entry computation's parameter types of an HLO module's text, e.g. 'f32[32,40], s32[32]'
    (layouts dropped): what differs between two compilations of one jitted function."""
    m = _ENTRY.search(text)
    return ", ".join(_PARAM_TYPE.findall(m.group(1))) if m else ""


def _record_compile(executable, node: int) -> None:
    api = _api
    for mod in executable.hlo_modules():
        name = mod.name
        pid = _program_id(mod)
        text = ""
        try:
            text = mod.to_string()
            ops = parse_hlo(text)
        except Exception as exc:  # an unexpected text format must not break the program
            _stats["parse_errors"] += 1
            _say(f"jax: could not read the HLO of {name}: {exc}", key="parse")
            ops = {}
        signature = entry_signature(text)
        seen = _signatures.setdefault(node, [])
        if node and signature and signature not in seen and len(seen) < _MAX_SIGNATURES:
            seen.append(signature)
            api.set_prop(node, "input_types", " | ".join(seen))
        info = ModuleInfo(name, pid, ops)
        _modules[(name, pid)] = info
        _stats["hlo_ops"] += len(ops)
        for instr, op in ops.items():
            info.chains[instr] = op_chain(api, name, instr, op)
        if node:
            api.set_prop(node, "hlo_module", name)
            api.set_prop(node, "program_id", str(pid))
            api.set_prop(node, "hlo_ops_with_source", str(sum(1 for o in ops.values() if o[2])))
        _register_gpu_module(info)
        if _jit_symbols is not None:
            _add_jit_ranges(info, _jit_symbols.refresh(info))


def _compile_wrapper(original):
    def compile_or_get_cached(backend, computation, *args, **kwargs):
        api = _api
        if _options is None or api is None:
            return original(backend, computation, *args, **kwargs)
        core = api.core
        try:
            name = str(computation.operation.attributes["sym_name"]).strip('"')
        except Exception:
            name = "module"
        # A scope on this thread (its samples and the kernels it launches while autotuning go
        # under it) that is also the worker context (XLA's compiler threads work for it).
        node = core.scope_enter(f"xla_compile({name})")
        previous = api.lib.dctx_worker_context()
        lib = _inflight
        outer = lib.dctx_jax_pin(node) if lib is not None else core.set_worker_context(node)
        start = time.perf_counter_ns()
        try:
            executable = original(backend, computation, *args, **kwargs)
        finally:
            if lib is not None:
                lib.dctx_jax_unpin(outer, previous)
            else:
                core.set_worker_context(previous)
            core.scope_exit()
        api.lib.dctx_add(node, api.m_compiles, 1.0)
        api.lib.dctx_add(node, api.m_compile_time, float(time.perf_counter_ns() - start))
        _stats["compiles"] += 1
        try:
            _record_compile(executable, node)
        except Exception as exc:
            _say(f"jax: compiled-module metadata not recorded: {exc}", key="record")
        return executable

    compile_or_get_cached.__wrapped__ = original
    return compile_or_get_cached


_JAX_LIBRARY = os.path.join(_PACKAGE_DIR, "libdeepcontext_jax.so")


def inflight_library():
    """libdeepcontext_jax.so's in-flight executions through ctypes.PyDLL (its functions take
    Python objects and need the GIL), or None when this build has none."""
    global _inflight
    if _inflight is None and os.path.exists(_JAX_LIBRARY):
        try:
            lib = ctypes.PyDLL(_JAX_LIBRARY)
            lib.dctx_jax_dispatch_type.restype = ctypes.py_object
            lib.dctx_jax_dispatch_type.argtypes = []
        except (OSError, AttributeError):
            return None
        lib.dctx_jax_inflight_init.argtypes = [ctypes.py_object] * 3
        lib.dctx_jax_inflight_init.restype = ctypes.c_int
        lib.dctx_jax_pin.argtypes = [ctypes.c_uint32]
        lib.dctx_jax_pin.restype = ctypes.c_uint32
        lib.dctx_jax_unpin.argtypes = [ctypes.c_uint32, ctypes.c_uint32]
        lib.dctx_jax_unpin.restype = None
        lib.dctx_jax_inflight_clear.argtypes = []
        lib.dctx_jax_inflight_clear.restype = None
        lib.dctx_jax_inflight.argtypes = [ctypes.POINTER(ctypes.c_uint64), ctypes.c_size_t]
        lib.dctx_jax_inflight.restype = ctypes.c_long
        _inflight = lib
    return _inflight


def _dispatch_base():
    """The adapter's DispatchCall (a call is a dispatch, in flight until its outputs are ready);
    the core's ContextCall (the worker context is the latest call's) in a build without it."""
    lib = inflight_library()
    try:
        return lib.dctx_jax_dispatch_type() if lib is not None else _core.ContextCall
    except Exception:  # a library that cannot make its type: the older behaviour, not no jax
        return _core.ContextCall


_DispatchCall = _dispatch_base()


class _Jitted(_DispatchCall):
    """What ``jax.jit`` returns while profiling: a call is a dispatch from the caller's call path
    (module docstring), then goes to jax's own jitted function (its C++ fast path); both in C, in
    the base class. Everything else (``lower``, ``trace``, ``eval_shape``, attributes, method
    binding) is the original's, whose object is ``_dctx_fn``."""

    __slots__ = ("__weakref__",)

    def __getattr__(self, name):
        return getattr(self._dctx_fn, name)

    def __setattr__(self, name, value):
        setattr(self._dctx_fn, name, value)

    def __get__(self, obj, objtype=None):
        if obj is None:
            return self
        return _BoundJitted(self, obj)

    def __repr__(self):
        return repr(self._dctx_fn)

    def __hash__(self):
        return hash(self._dctx_fn)

    def __eq__(self, other):
        if isinstance(other, _Jitted):
            other = other._dctx_fn
        return self._dctx_fn == other

    @property
    def __wrapped__(self):
        return getattr(self._dctx_fn, "__wrapped__", None)


class _BoundJitted:
    __slots__ = ("_jitted", "_obj")

    def __init__(self, jitted, obj):
        self._jitted = jitted
        self._obj = obj

    def __call__(self, *args, **kwargs):
        return self._jitted(self._obj, *args, **kwargs)

    def __getattr__(self, name):
        return getattr(self._jitted._dctx_fn.__get__(self._obj), name)


_current = None
_set_worker = None


def _jit_wrapper(original):
    def jit(*args, **kwargs):
        out = original(*args, **kwargs)
        if args and callable(out) and not isinstance(out, _Jitted):
            return _Jitted(out)
        if not args and callable(out):  # jax.jit(static_argnums=...)(f)
            return lambda fun: _Jitted(out(fun))
        return out

    jit.__wrapped__ = original
    jit.__doc__ = original.__doc__
    jit.__name__ = getattr(original, "__name__", "jit")
    jit.__qualname__ = getattr(original, "__qualname__", "jit")
    jit.__module__ = getattr(original, "__module__", "jax")
    return jit


def _eager_wrapper(original):
    """EvalTrace.process_primitive: an op run eagerly (outside jit) dispatches its own small
    executable, a dispatch from the Python line of the op (the adapter's DispatchCall, which
    binds as a method)."""
    if _DispatchCall is not _core.ContextCall:
        return _DispatchCall(original, True)

    def process_primitive(self, *args, **kwargs):
        if _options is not None:
            _set_worker(_current())
        return original(self, *args, **kwargs)

    process_primitive.__wrapped__ = original
    return process_primitive


class _Property(property):
    """A property that can carry ``__wrapped__`` (for _patch's bookkeeping)."""


def _value_wrapper(original):
    """ArrayImpl._value: where every read of a jax.Array's value on the host goes (float(),
    bool(), int(), .item(), .tolist(), np.asarray, printing). A read that fetches (the value not
    cached yet) waits for the computation: counted at the caller's call path, exactly, for the
    analyzer's host-sync rule (samples alone cannot tell ten reads from one long one)."""
    fget = original.fget

    def _value(self):
        if _options is not None and self._npy_value is None:
            _api.lib.dctx_add(_current(), _api.m_host_reads, 1.0)
        return fget(self)

    replacement = _Property(_value, doc=original.__doc__)
    replacement.__wrapped__ = original
    return replacement


def _backend_wrapper(original):
    """xla_bridge._init_backend: creating a client starts XLA's thread pools; their start-up
    work goes to the line that first needed the backend."""

    def _init_backend(platform, *args, **kwargs):
        if _options is None or _api is None:
            return original(platform, *args, **kwargs)
        node = _api.child(_current(), _api.frame(KIND_SCOPE, f"xla_backend_init({platform})"))
        _set_worker(node)
        return original(platform, *args, **kwargs)

    _init_backend.__wrapped__ = original
    return _init_backend


def _profiler_wrapper(original):
    def start_trace(*args, **kwargs):
        gpu = sys.modules.get("deepcontext.gpu")
        on_gpu = gpu is not None and getattr(gpu, "_started", False) and not gpu.status()
        detail = (
            "its GPU trace may stay empty and GPU kernels keep going to deepcontext (CUPTI "
            "takes one client per process)"
            if on_gpu
            else "both run; the profiler's own work shows in deepcontext's numbers"
        )
        _say(f"jax.profiler.start_trace called while deepcontext profiles: {detail}", key="prof")
        return original(*args, **kwargs)

    start_trace.__wrapped__ = original
    return start_trace


def _patch(obj, attr, make) -> None:
    original = getattr(obj, attr, None)
    if (
        original is None
        or getattr(original, "__wrapped__", None) is not None
        and any(p[0] is obj and p[1] == attr for p in _patches)
    ):
        return
    replacement = make(original)
    setattr(obj, attr, replacement)
    _patches.append((obj, attr, original, replacement))


def _unpatch() -> None:
    for obj, attr, original, replacement in reversed(_patches):
        if getattr(obj, attr, None) is replacement:
            setattr(obj, attr, original)
    _patches.clear()


# ------------------------------------------------------------------------------------------------
# GPU: NVTX ranges through the CUPTI layer, command buffers
# ------------------------------------------------------------------------------------------------

_gpu_lib = None


def _cuda_plugin_present() -> bool:
    """A CUDA build of jaxlib is installed (its plugin package), checked without importing."""
    for entry in sys.path:
        base = os.path.join(entry or ".", "jax_plugins")
        try:
            if any(n.startswith("xla_cuda") for n in os.listdir(base)):
                return True
        except OSError:
            pass
        try:
            if any(n.startswith("jax_cuda") and n.endswith("_plugin") for n in os.listdir(entry)):
                return True
        except OSError:
            pass
    return False


def _prepare_gpu_environment(options: dict) -> None:
    """Before jax creates its GPU client: our NVTX injection, and command buffers off if asked."""
    if not options.get("gpu", True) or not options.get("jax_hlo_ops", True):
        return
    if not _cuda_plugin_present():
        return
    _early_nvtx_injection()
    flags = os.environ.get("XLA_FLAGS", "")
    if "xla_gpu_enable_command_buffer" in flags:
        _meta("jax_command_buffers", "user (XLA_FLAGS)")
        return
    if options.get("jax_command_buffers", True):
        _meta("jax_command_buffers", "on (graph nodes attributed where XLA captured them)")
        return
    if "jax" in sys.modules and _jax_backend_started():
        _meta("jax_command_buffers", "on (jax's GPU client already started)")
        return
    value = (flags + " " + _COMMAND_BUFFER_FLAG).strip()
    os.environ["XLA_FLAGS"] = value
    _env_changes["XLA_FLAGS"] = value
    _meta("jax_command_buffers", f"off while profiling (XLA_FLAGS {_COMMAND_BUFFER_FLAG})")


def _nvtx_via_cupti() -> bool:
    return os.environ.get("DEEPCONTEXT_NVTX_INJECTION", "").lower() == "cupti"


def _early_nvtx_injection() -> None:
    """NVTX decides on its injection at its first call, which XLA may make while jax loads its
    CUDA plugin: name our GPU layer (or, with DEEPCONTEXT_NVTX_INJECTION=cupti, the CUPTI
    library it will load: its first candidate file) before jax is imported; _prepare_nvtx checks
    it against the one really loaded."""
    if os.environ.get("NVTX_INJECTION64_PATH"):
        _meta(
            "jax_nvtx",
            "NVTX_INJECTION64_PATH set by the user: " + os.environ["NVTX_INJECTION64_PATH"],
        )
        return
    path = _CUPTI_LIBRARY if os.path.isfile(_CUPTI_LIBRARY) else None
    if _nvtx_via_cupti():
        try:
            from . import gpu

            path = next((c for c in gpu.cupti_candidates() if os.path.isfile(c)), None)
        except Exception:
            return
    if path:
        os.environ["NVTX_INJECTION64_PATH"] = path
        _env_changes["NVTX_INJECTION64_PATH"] = path


def _jax_backend_started() -> bool:
    xb = sys.modules.get("jax._src.xla_bridge")
    return bool(getattr(xb, "_backends", None))


def _meta(key: str, value: str) -> None:
    try:
        from . import _core

        _core.set_meta(key, value)
    except Exception:
        pass


def _gpu_layer():
    """The CUPTI layer's library when GPU tracing runs, else None."""
    global _gpu_lib
    gpu = sys.modules.get("deepcontext.gpu")
    lib = getattr(gpu, "_lib", None) if gpu is not None else None
    if lib is None or not getattr(gpu, "_started", False) or gpu.status().startswith("GPU metrics"):
        return None
    if _gpu_lib is None:
        if not hasattr(lib, "dctx_cupti_hlo_module"):
            return None
        lib.dctx_cupti_hlo_module.argtypes = [ctypes.c_char_p, ctypes.c_int64, ctypes.c_char_p]
        lib.dctx_cupti_hlo_module.restype = None
        lib.dctx_cupti_nvtx_stats.argtypes = [ctypes.POINTER(ctypes.c_uint64)]
        lib.dctx_cupti_nvtx_stats.restype = None
        _gpu_lib = lib
    return _gpu_lib


def _prepare_nvtx() -> None:
    """Point NVTX at our GPU layer (or the CUPTI library we trace with), so XLA's ranges reach
    our handlers. NVTX reads the variable at its first call (XLA's first annotation, after jax is
    imported)."""
    lib = _gpu_layer()
    if lib is None:
        return
    path = (
        lib.dctx_cupti_library().decode(errors="replace") if _nvtx_via_cupti() else _CUPTI_LIBRARY
    )
    current = os.environ.get("NVTX_INJECTION64_PATH")
    ours = _env_changes.get("NVTX_INJECTION64_PATH")
    if current and current != ours:
        _meta("jax_nvtx", f"NVTX_INJECTION64_PATH set by the user: {current}")
        return
    if not path:
        return
    if current and os.path.realpath(current) != os.path.realpath(path):
        _say(
            f"jax: NVTX was pointed at {current} but the GPU layer loaded {path}: XLA's thunk "
            "ranges may not arrive (kernels then go under the jitted call site without HLO ops)",
            key="nvtx",
        )
    if not current:
        os.environ["NVTX_INJECTION64_PATH"] = path
        _env_changes["NVTX_INJECTION64_PATH"] = path
    _meta("jax_nvtx", f"XLA's NVTX ranges through {os.environ['NVTX_INJECTION64_PATH']}")


def _register_gpu_module(info: ModuleInfo) -> None:
    lib = _gpu_layer()
    if lib is None:
        return
    rows = "".join(
        f"{instr}\t{','.join(map(str, chain))}\n" for instr, chain in info.chains.items()
    )
    lib.dctx_cupti_hlo_module(info.name.encode(), info.program_id, rows.encode())


_NVTX_STATS = (
    "pushes",
    "strings",
    "launches",
    "launches_in_thunk",
    "thunks_with_source",
    # dctx_cupti_nvtx_counters only (older layers have the five above):
    "thunk_lookups",  # misses of the per-thread (call path, thunk) table
    "unregistered_pushes",  # TSL pushes whose message XLA built for that push
    "other_domain_pushes",
    "call_paths",  # call paths walked inside an XLA range (once per module run when all is well)
    "injections",  # NVTX copies that took our own injection (0: CUPTI's, or none)
)


def nvtx_stats() -> dict:
    """Counters of the CUPTI layer's NVTX handling (pushes, launches in a thunk, ...)."""
    lib = _gpu_layer()
    if lib is None:
        return {}
    v = (ctypes.c_uint64 * len(_NVTX_STATS))()
    counters = getattr(lib, "dctx_cupti_nvtx_counters", None)
    if counters is None:
        lib.dctx_cupti_nvtx_stats(v)
        return dict(zip(_NVTX_STATS[:5], v[:5], strict=True))
    counters.argtypes = [ctypes.POINTER(ctypes.c_uint64), ctypes.c_uint32]
    counters.restype = ctypes.c_uint32
    n = min(counters(v, len(_NVTX_STATS)), len(_NVTX_STATS))
    return dict(zip(_NVTX_STATS[:n], v[:n], strict=True))


# ------------------------------------------------------------------------------------------------
# XLA:CPU JIT code: kernels registered through the GDB JIT interface
# ------------------------------------------------------------------------------------------------


class JitSymbols:
    """Address ranges of XLA:CPU's JIT-compiled kernels, read from the in-memory objects that
    LLVM registers with the GDB JIT interface (``__jit_debug_descriptor`` in jaxlib). Objects
    registered while a module compiled are that module's: `refresh(info)` right after each
    compilation ties their functions (named after HLO instructions: ``add_tanh_fusion``,
    ``wrapped_reduce``) to the module's ops."""

    def __init__(self, descriptor: int):
        self.descriptor = descriptor
        self.seen: set[int] = set()
        self.ranges: list[tuple[int, int, str, str]] = []  # (start, end, symbol, module), sorted
        self.ops: dict[tuple[str, str], tuple[str, str, int]] = {}  # (module, symbol) -> op

    @classmethod
    def find(cls):
        lib = None
        with open("/proc/self/maps") as maps:
            for line in maps:
                parts = line.split()
                if (
                    len(parts) >= 6
                    and parts[5].endswith("libjax_common.so")
                    and parts[2] == "00000000"
                ):
                    lib = (int(parts[0].split("-")[0], 16), parts[5])
                    break
        if lib is None:
            return None
        offset = _elf_symbol(lib[1], b"__jit_debug_descriptor")
        return cls(lib[0] + offset) if offset else None

    def refresh(self, info: ModuleInfo | None = None) -> list[tuple[int, int, str, str]]:
        new = []
        _version, _flag, _relevant, entry = struct.unpack(
            "IIQQ", ctypes.string_at(self.descriptor, 24)
        )
        module = info.name if info is not None else ""
        guard = 0
        while entry and guard < 1_000_000:
            guard += 1
            nxt, _prev, addr, size = struct.unpack("QQQQ", ctypes.string_at(entry, 32))
            if entry not in self.seen:
                self.seen.add(entry)
                try:
                    new += [
                        (a, b, n, module)
                        for a, b, n in _object_functions(ctypes.string_at(addr, size))
                    ]
                except Exception:
                    pass
            entry = nxt
        if info is not None:
            for _a, _b, name, _m in new:
                op = info.ops.get(name) or info.ops.get(name.replace("_", "."))
                if op is not None:
                    self.ops[(module, name)] = op
        self.ranges = sorted(self.ranges + new)
        return new

    def resolve(self, pc: int):
        """(module, kernel symbol, (op_name, file, line) or None) of a pc in JIT code, or None."""
        import bisect

        i = bisect.bisect_right(self.ranges, (pc, float("inf"))) - 1
        if i < 0:
            return None
        start, end, name, module = self.ranges[i]
        if not start <= pc < end:
            return None
        return module, name, self.ops.get((module, name))


_jax_lib = None


def jax_library():
    """libdeepcontext_jax.so (the JIT-kernel table the core's unwinder asks), or None."""
    global _jax_lib
    if _jax_lib is None and os.path.exists(_JAX_LIBRARY):
        lib = ctypes.CDLL(_JAX_LIBRARY)
        lib.dctx_jax_add_jit_range.argtypes = [
            ctypes.c_uint64,
            ctypes.c_uint64,
            ctypes.POINTER(ctypes.c_uint32),
            ctypes.c_uint32,
        ]
        lib.dctx_jax_add_jit_range.restype = ctypes.c_int
        lib.dctx_jax_lookup.argtypes = [
            ctypes.c_uint64,
            ctypes.POINTER(ctypes.c_uint32),
            ctypes.c_size_t,
        ]
        lib.dctx_jax_lookup.restype = ctypes.c_size_t
        _jax_lib = lib
    return _jax_lib


def _add_jit_ranges(info: ModuleInfo, ranges) -> None:
    lib = jax_library()
    if lib is None:
        return
    named = 0
    for start, end, symbol, _module in ranges:
        chain = info.chains.get(symbol) or info.chains.get(symbol.replace("_", "."))
        if not chain:
            continue
        ids = (ctypes.c_uint32 * len(chain))(*chain)
        named = lib.dctx_jax_add_jit_range(start, end, ids, len(chain))
    if ranges:
        _meta(
            "jax_cpu_jit_frames",
            "JIT kernels named after their HLO op"
            if named
            else "JIT kernels found, but this core has no symbolizer hook to name them",
        )


# The ELF reading below is struct-based on purpose: libjax_common.so's .symtab has about 740,000
# symbols, and a general ELF library parses each one (seconds at jax's import); here the wanted
# name is found in the string table first and only the symbol entries' name fields are compared.


def _elf_sections(data) -> list[tuple[int, int, int, int, int, int]]:
    """(type, address, offset, size, link, entsize) of each section header of a 64-bit ELF
    image (bytes or an mmap)."""
    if data[:4] != b"\x7fELF" or data[4] != 2:
        raise ValueError("not a 64-bit ELF object")
    shoff = struct.unpack_from("<Q", data, 0x28)[0]
    shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
    out = []
    for i in range(shnum):
        name, typ, _flags, addr, off, size, link, _info, _align, entsize = struct.unpack_from(
            "<IIQQQQIIQQ", data, shoff + i * shentsize
        )
        out.append((typ, addr, off, size, link, entsize))
    return out


def _object_functions(data: bytes) -> list[tuple[int, int, str]]:
    sections = _elf_sections(data)
    out = []
    for typ, _addr, off, size, link, entsize in sections:
        if typ != 2:  # SHT_SYMTAB
            continue
        stroff = sections[link][2]
        for k in range(size // (entsize or 24)):
            st_name, st_info, _o, st_shndx, st_value, st_size = struct.unpack_from(
                "<IBBHQQ", data, off + k * 24
            )
            if st_info & 0xF != 2 or st_size == 0 or st_shndx == 0 or st_shndx >= len(sections):
                continue
            end = data.index(b"\0", stroff + st_name)
            name = data[stroff + st_name : end].decode(errors="replace")
            start = sections[st_shndx][1] + st_value
            out.append((start, start + st_size, name))
    return out


def _elf_symbol(path: str, wanted: bytes) -> int:
    """Value of a (possibly local) symbol in an ELF file's .symtab, 0 if absent."""
    import mmap

    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
        sections = _elf_sections(data)
        for typ, _addr, off, size, link, entsize in sections:
            if typ != 2:  # SHT_SYMTAB
                continue
            stroff = sections[link][2]
            strsize = sections[link][3]
            pos = data.find(b"\0" + wanted + b"\0", stroff, stroff + strsize)
            if pos < 0:
                continue
            name_off = pos + 1 - stroff
            for k in range(size // (entsize or 24)):
                st_name = struct.unpack_from("<I", data, off + k * 24)[0]
                if st_name == name_off:
                    return struct.unpack_from("<Q", data, off + k * 24 + 8)[0]
    return 0


# ------------------------------------------------------------------------------------------------
# Activation (deferred until jax is imported)
# ------------------------------------------------------------------------------------------------


def _before_jax_import() -> None:
    try:  # threads that jaxlib starts while it loads work for the import's line
        from . import _core

        _core.set_worker_context(_core.current())
    except Exception:
        pass


def _remove_finder() -> None:
    _finder.remove()


def activate(options: dict) -> None:
    global _options
    if not options.get("jax", True):
        return
    _options = dict(options)
    _modules.clear()  # a new session starts from zero
    _signatures.clear()
    _stats.update(compiles=0, hlo_ops=0, parse_errors=0)
    _prepare_gpu_environment(options)
    if "jax" in sys.modules and hasattr(sys.modules["jax"], "jit"):
        _on_jax_imported()
        return
    _finder.install()


def _on_jax_imported() -> None:
    global _installed, _api, _current, _set_worker, _jit_symbols
    if _options is None or _installed:
        return
    try:
        import jax
        from jax._src import compiler
        from jax._src import profiler as jax_profiler

        _api = _Api()
        _current = _api.core.current
        _set_worker = _api.core.set_worker_context
        _start_inflight(jax)
        _patch(compiler, "compile_or_get_cached", _compile_wrapper)
        _patch(jax, "jit", _jit_wrapper)
        from jax._src import core as jax_core
        from jax._src import xla_bridge

        _patch(xla_bridge, "_init_backend", _backend_wrapper)

        if hasattr(jax_core, "EvalTrace"):
            _patch(jax_core.EvalTrace, "process_primitive", _eager_wrapper)
        from jax._src import array as jax_array

        if isinstance(getattr(jax_array.ArrayImpl, "_value", None), property):
            _patch(jax_array.ArrayImpl, "_value", _value_wrapper)
        _patch(jax_profiler, "start_trace", _profiler_wrapper)
        if getattr(jax, "profiler", None) is not None:
            jax.profiler.start_trace = jax_profiler.start_trace
        if _options.get("jax_hlo_ops", True):
            _prepare_nvtx()
        if _options.get("native"):
            try:
                _jit_symbols = JitSymbols.find()
            except Exception:
                _jit_symbols = None
        _installed = True
        _meta("jax_integration", "on")
    except Exception as exc:  # never break the user's program
        _say(f"jax: integration disabled: {exc}", key="disabled")


def _start_inflight(jax) -> None:
    lib = inflight_library()
    if lib is None:
        _meta("jax_worker_context", "latest jitted call (this build has no libdeepcontext_jax.so)")
        return
    from jax._src import array as jax_array
    from jax._src import core as jax_core

    array_type, tracer, tree_leaves = (
        jax_array.ArrayImpl,
        jax_core.Tracer,
        jax.tree_util.tree_leaves,
    )

    def leaf_of(result):
        """An output array of a result that the adapter's quick search (tuples, lists and dicts
        of arrays) misses: a typed PRNG key's base array, a leaf of another pytree."""
        if isinstance(result, tracer):
            return None
        for leaf in reversed(tree_leaves(result)):
            leaf = getattr(leaf, "_base_array", leaf)
            if isinstance(leaf, array_type):
                return leaf
        return None

    def on_cpu(array):
        return all(d.platform == "cpu" for d in array.devices())

    polled = lib.dctx_jax_inflight_init(array_type, leaf_of, on_cpu)
    _meta(
        "jax_worker_context",
        "oldest execution in flight (checked at each sampler tick)"
        if polled
        else "oldest execution in flight (checked at each dispatch: no sampler tick hook free)",
    )
    _meta("jax_cpu_hlo_ops", _CPU_HLO_OPS)


def inflight_stats() -> dict:
    """Executions in flight now, tracked so far, results without an output array, and entries
    taken as done because the queue was full."""
    lib = _inflight
    if lib is None:
        return {}
    v = (ctypes.c_uint64 * 3)()
    now = lib.dctx_jax_inflight(v, 3)
    if now < 0:
        return {"tracked": "no (not XLA:CPU: the worker context is the latest call's)"}
    return {"in_flight": now, "tracked": v[0], "without_array": v[1], "dropped": v[2]}


def deactivate() -> None:
    global _options, _installed, _jit_symbols
    _remove_finder()
    if _installed and _api is not None:
        try:
            _api.core.set_worker_context(0)
        except Exception:
            pass
        stats = inflight_stats()
        if stats:
            _meta("jax_dispatches", json.dumps(stats))
            if "in_flight" not in stats:
                _meta("jax_worker_context", "latest call (executions not on XLA:CPU)")
            _inflight.dctx_jax_inflight_clear()
        _meta("jax_compiled_modules", str(_stats["compiles"]))
        _meta("jax_hlo_ops", str(_stats["hlo_ops"]))
        stats = nvtx_stats()
        if stats:
            _meta("jax_nvtx_stats", json.dumps(stats))
    _unpatch()
    # XLA_FLAGS and NVTX_INJECTION64_PATH stay: jax and NVTX read them once per process.
    _options = None
    _installed = False
    _jit_symbols = None
