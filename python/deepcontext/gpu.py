"""NVIDIA GPU integration through CUPTI: kernels, copies, memsets and syncs under the full context.

`activate(options)` is cheap and imports no framework: it starts tracing when the first GPU
framework (torch, jax, cupy, ...) is imported, or at once if one already is. The native half is
libdeepcontext_cupti.so (src/gpu/cupti/), which loads libcupti with dlopen from the candidates
that `cupti_candidates()` lists: DEEPCONTEXT_CUPTI_PATH, the nvidia cupti wheel in this
environment (the one torch's CUDA build uses), then CUDA_HOME and the system CUDA. Without CUPTI
or a GPU, CPU profiling goes on and one line says why.
"""

from __future__ import annotations

import ctypes
import glob
import os
import re
import sys
import threading

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))
_LIBRARY = os.path.join(_PACKAGE_DIR, "libdeepcontext_cupti.so")
# Importing one of these means the program may use the GPU.
_TRIGGERS = ("torch", "jax", "jaxlib", "cupy", "numba", "triton", "tensorflow")

_lock = threading.Lock()
_options: dict | None = None
_finder = None
_lib = None
_started = False
_message = ""


def add_arguments(parser) -> None:
    g = parser.add_argument_group("NVIDIA GPU (CUPTI)")
    g.add_argument(
        "--no-gpu",
        dest="gpu",
        action="store_false",
        default=True,
        help="do not trace GPU kernels, copies and synchronizations",
    )
    g.add_argument(
        "--cuda-graphs",
        choices=("node", "graph", "sample"),
        default=None,
        help="node (default, except for JAX): every kernel a CUDA graph replays, timed and placed "
        "where it was captured; graph: each graph launch timed whole at its launch site; sample "
        "(default when JAX starts the GPU tracing): as node, but GPU activity traced 100 ms of "
        "every second, each record weighted by the launches its window stands for "
        "(DEEPCONTEXT_CUPTI_SAMPLE=on_ms:period_ms); graph and sample are far cheaper for graphs "
        "of many small kernels such as XLA's command buffers (docs/gpu.md)",
    )


def _torch_cuda_major() -> str | None:
    """CUDA major version of the installed torch, read from torch/version.py without importing
    it (and without the import system, whose hooks include ours)."""
    torch = sys.modules.get("torch")
    if torch is not None:
        cuda = getattr(getattr(torch, "version", None), "cuda", None)
        return cuda.split(".")[0] if cuda else None
    for entry in sys.path:
        try:
            with open(os.path.join(entry or ".", "torch", "version.py")) as f:
                m = re.search(r"^cuda\b[^=]*=\s*['\"](\d+)", f.read(), re.M)
        except OSError:
            continue
        return m.group(1) if m else None
    return None


def cupti_candidates() -> list[str]:
    """Where libcupti is looked for, in order."""
    out: list[str] = []
    explicit = os.environ.get("DEEPCONTEXT_CUPTI_PATH")
    if explicit:
        out.append(explicit)
    wheel: list[str] = []
    for entry in sys.path:
        nvidia = os.path.join(entry or ".", "nvidia")
        if os.path.isdir(nvidia):
            wheel += sorted(glob.glob(os.path.join(nvidia, "*", "lib", "libcupti.so*")))
    major = _torch_cuda_major()
    if major:
        wheel.sort(key=lambda p: not p.endswith(f".so.{major}"))
    out += wheel
    roots = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"]
    for root in filter(None, roots):
        for sub in (
            "extras/CUPTI/lib64",
            "lib64",
            "targets/x86_64-linux/lib",
            "targets/sbsa-linux/lib",
        ):
            out += sorted(glob.glob(os.path.join(root, sub, "libcupti.so*")), reverse=True)
    out += ["libcupti.so.13", "libcupti.so.12", "libcupti.so"]
    seen: set[str] = set()
    return [p for p in out if not (p in seen or seen.add(p))]


class _ImportHook:  # a meta path finder (importlib.abc costs 60 ms to import)
    """Starts tracing when a GPU framework is first imported; removes itself."""

    def find_spec(self, fullname, path, target=None):
        if fullname.partition(".")[0] in _TRIGGERS:
            _remove_finder()
            _start(fullname.partition(".")[0])
        return None


def _remove_finder() -> None:
    global _finder
    with _lock:
        if _finder is not None:
            try:
                sys.meta_path.remove(_finder)
            except ValueError:
                pass
            _finder = None


def activate(options: dict) -> None:
    global _options, _finder
    if not options.get("gpu", True):
        return
    _options = dict(options)
    present = [name for name in _TRIGGERS if name in sys.modules]
    if present:
        _start("jax" if set(present) <= {"jax", "jaxlib"} else present[0])
        return
    with _lock:
        if _finder is None:
            _finder = _ImportHook()
            sys.meta_path.insert(0, _finder)


def _load():
    lib = ctypes.CDLL(_LIBRARY)
    lib.dctx_cupti_start.argtypes = [ctypes.c_char_p, ctypes.c_char_p]
    lib.dctx_cupti_start.restype = ctypes.c_int
    lib.dctx_cupti_stop.argtypes = []
    lib.dctx_cupti_stop.restype = None
    lib.dctx_cupti_message.restype = ctypes.c_char_p
    lib.dctx_cupti_library.restype = ctypes.c_char_p
    lib.dctx_cupti_set_tracing.argtypes = [ctypes.c_int]
    lib.dctx_cupti_set_tracing.restype = ctypes.c_int
    return lib


def set_tracing(mode: int) -> None:
    """Step-sampled tracing (deepcontext.step_sampling): 0 turns CUPTI's launch callbacks and
    activity records off until the next call; 1 traces at weight 1; 2 traces a step that stands
    for untraced ones. Ignored until tracing has started (then it starts in the current mode)."""
    if _started and _lib is not None:
        _lib.dctx_cupti_set_tracing(mode)


def _say(message: str) -> None:
    """One line on stderr (the same text is a note in the profile); nothing under run -q."""
    if (_options or {}).get("quiet"):
        return
    print(f"deepcontext: {message}", file=sys.stderr, flush=True)


def _graph_mode(framework: str) -> str | None:
    """How CUDA graphs are traced (src/gpu/cupti/tracer.cpp): the user's choice, else sampled for
    a JAX program (XLA's command buffers are graphs of many small kernels, whose per-node records
    cost a launch-bound step up to 1.8x; docs/jax.md), else per node."""
    if _options.get("cuda_graphs"):
        return _options["cuda_graphs"]
    if os.environ.get("DEEPCONTEXT_CUPTI_GRAPHS"):
        return None  # read by the tracer itself
    return "sample" if framework in ("jax", "jaxlib") else None


def _start(framework: str = "") -> None:
    global _lib, _started, _message
    with _lock:
        if _started or _options is None:
            return
        _started = True
        if not os.path.exists(_LIBRARY):
            _message = "GPU metrics off: this build of deepcontext has no CUPTI layer"
            _say(_message)
            return
        try:
            _lib = _load()
        except OSError as exc:
            _message = f"GPU metrics off: cannot load {os.path.basename(_LIBRARY)} ({exc})"
            _say(_message)
            return
        mode = _graph_mode(framework)
        if mode:  # read by the tracer at start (src/gpu/cupti/tracer.cpp)
            os.environ["DEEPCONTEXT_CUPTI_GRAPHS"] = mode
        record = _options.get("gpu_record") or os.environ.get("DEEPCONTEXT_CUPTI_RECORD")
        code = _lib.dctx_cupti_start(
            "\n".join(cupti_candidates()).encode(), record.encode() if record else None
        )
        _message = _lib.dctx_cupti_message().decode(errors="replace")
        if code != 0:
            _say(_message)
            return
    from . import step_sampling

    if step_sampling.mode() != step_sampling.FULL:  # started inside an untraced step
        set_tracing(step_sampling.mode())


def _synchronize_devices() -> None:
    torch = sys.modules.get("torch")
    cuda = getattr(torch, "cuda", None)
    try:
        if cuda is not None and cuda.is_initialized():
            for device in range(cuda.device_count()):
                cuda.synchronize(device)
    except Exception:  # a broken CUDA state must not stop the profile from being written
        pass


def deactivate() -> None:
    """Waits for the outstanding GPU work and adds its records to the profile."""
    global _started, _options
    _remove_finder()
    with _lock:
        started, lib = _started, _lib
        _started = False
        _options = None
    if started and lib is not None:
        _synchronize_devices()
        lib.dctx_cupti_stop()


def status() -> str:
    """The last message of the GPU layer (e.g. why GPU metrics are off), or ""."""
    return _message
