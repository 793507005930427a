"""PyTorch integration: operator context, backward attribution, nn.Module paths, memory.

`activate(options)` is cheap and never imports torch: if torch is not imported yet, a one-shot
import hook finishes the work right after `import torch` completes. The native half is
libdeepcontext_torch.so (src/frameworks/torch/torch_adapter.cpp), compiled against the installed
torch: built with the package when torch was importable then, else compiled here on first use into
~/.cache/deepcontext/torch-adapter-<torch version>-<hash>/ (one message, about 10 s, once).

nn.Module paths: at each outermost operator the adapter asks _core for the innermost nn.Module
running on the thread, read from its Python frames (src/python/module_stack.cpp; global forward
hooks written in C, src/python/module_hooks.cpp, where those frames cannot be read). It places that
module's path (a frame such as `model.encoder.layers.3`) between the Python frames and the
operator; Python only names a module the first time it is seen.
"""

from __future__ import annotations

import ctypes
import hashlib
import importlib.util
import math
import os
import subprocess
import sys
import sysconfig
import tempfile

from .import_hook import AfterImport

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))
_REPO_ROOT = os.path.dirname(os.path.dirname(_PACKAGE_DIR))

FLAG_SHAPES = 1
FLAG_MEMORY = 2
FLAG_MODULES = 4

_options: dict | None = None
_finder = AfterImport("torch", lambda: _on_torch_imported())  # activation after `import torch`
_lib = None
_installed = False
_hook_handles: list = []
_fork_registered = False
_in_forked_child = False
_said = False


# ------------------------------------------------------------------------------------------------
# Options
# ------------------------------------------------------------------------------------------------


def add_arguments(parser) -> None:
    g = parser.add_argument_group("PyTorch")
    g.add_argument(
        "--no-torch",
        dest="torch",
        action="store_false",
        default=True,
        help="do not record PyTorch operators, modules and memory",
    )
    g.add_argument(
        "--shapes",
        dest="torch_shapes",
        action="store_true",
        default=False,
        help="record operator input shapes and dtypes (one node per shape signature)",
    )
    g.add_argument(
        "--no-modules",
        dest="torch_modules",
        action="store_false",
        default=True,
        help="do not insert nn.Module path frames (model.encoder.layers.3) above operators",
    )
    g.add_argument(
        "--no-torch-memory",
        dest="torch_memory",
        action="store_false",
        default=True,
        help="do not attribute PyTorch allocations (alloc_bytes, alloc_count, peak_bytes)",
    )
    from . import distributed

    distributed.add_arguments(parser)


def _flags(options: dict) -> int:
    flags = 0
    if options.get("torch_shapes"):
        flags |= FLAG_SHAPES
    if options.get("torch_memory", True):
        flags |= FLAG_MEMORY
    if options.get("torch_modules", True):
        flags |= FLAG_MODULES
    return flags


# ------------------------------------------------------------------------------------------------
# Activation (deferred until torch is imported)
# ------------------------------------------------------------------------------------------------


def _remove_finder() -> None:
    _finder.remove()


def activate(options: dict) -> None:
    global _options, _fork_registered
    from . import distributed

    distributed.activate(options)  # per-rank profiles, launcher children, collectives
    if not options.get("torch", True):
        return
    _options = dict(options)
    if not _fork_registered and hasattr(os, "register_at_fork"):
        os.register_at_fork(after_in_child=_after_fork_child)
        _fork_registered = True
    if "torch" in sys.modules and hasattr(sys.modules["torch"], "autograd"):
        _on_torch_imported()
        return
    _finder.install()


def deactivate() -> None:
    global _options, _installed
    from . import distributed

    distributed.deactivate()
    _remove_finder()
    _options = None
    for h in _hook_handles:
        try:
            h.remove()
        except Exception:
            pass
    _hook_handles.clear()
    if _core_loaded():
        _core().module_hooks_enable(False)
    _unpatch_torch_profiler()
    _record_threads()
    if _installed and _lib is not None:
        ops, matched, unmatched = stats()
        _core().set_meta("torch_backward_matched", str(matched))
        _core().set_meta("torch_backward_unmatched", str(unmatched))
        _lib.dctx_torch_uninstall()
    _installed = False


# The most DataLoader workers any loader of the session started (its iterators read num_workers).
_loader_workers = 0
_loader_patch: tuple | None = None  # (DataLoader class, original _get_iterator, our wrapper)


def _watch_loader_workers() -> None:
    """Counts DataLoader workers for the thread-oversubscription rule: one wrapper call per
    epoch (DataLoader._get_iterator makes each epoch's iterator)."""
    global _loader_patch, _loader_workers
    _loader_workers = 0
    data = sys.modules.get("torch.utils.data")
    loader = getattr(data, "DataLoader", None)
    original = getattr(loader, "_get_iterator", None)
    if original is None or _loader_patch is not None:
        return

    def _get_iterator(self, __orig=original):
        global _loader_workers
        _loader_workers = max(_loader_workers, int(getattr(self, "num_workers", 0) or 0))
        return __orig(self)

    loader._get_iterator = _get_iterator
    _loader_patch = (loader, original, _get_iterator)


def _record_threads() -> None:
    """The thread counts the analyzer compares with the cores: cores this process may run on,
    torch's intra-op threads at the end of the session, the most loader workers seen."""
    global _loader_patch
    if _loader_patch is not None:
        loader, original, wrapper = _loader_patch
        if loader.__dict__.get("_get_iterator") is wrapper:
            loader._get_iterator = original
        _loader_patch = None
    torch = sys.modules.get("torch")
    if not _installed or torch is None or not _core_loaded():
        return
    try:
        core = _core()
        cores, quota = _usable_cpus()
        core.set_meta("cpu_count", str(cores))
        if quota is not None:
            core.set_meta("cpu_quota", f"{quota:.2f}")
        core.set_meta("torch_num_threads", str(torch.get_num_threads()))
        core.set_meta("dataloader_workers", str(_loader_workers))
    except Exception:
        pass


def _usable_cpus(cpu_max: str = "/sys/fs/cgroup/cpu.max") -> tuple[int, float | None]:
    """Cores this process can keep busy: the CPUs it may run on, capped by a cgroup v2 CPU
    quota (containers often allow fewer CPUs' worth of time than they show); and the quota."""
    affinity = getattr(os, "sched_getaffinity", None)
    cores = len(affinity(0)) if affinity else os.cpu_count() or 1
    try:
        with open(cpu_max) as f:
            limit, period = f.read().split()[:2]
    except (OSError, ValueError):
        return cores, None
    if limit == "max":
        return cores, None
    quota = int(limit) / int(period)
    return max(1, min(cores, math.ceil(quota))), quota


def _core():
    from . import _core as core

    return core


def _core_loaded() -> bool:
    return "deepcontext._core" in sys.modules  # never import it from a fork handler


def _on_torch_imported() -> None:
    global _installed
    options = _options
    if options is None or _installed:
        return
    from . import distributed

    distributed.on_torch_imported()  # collectives, mp.spawn, DDP (does not need the adapter)
    try:
        lib = load_adapter()
        flags = _flags(options)
        if lib.dctx_torch_install(flags) != 0:
            raise RuntimeError("could not register the RecordFunction callback")
        _installed = True
        from . import step_sampling

        if step_sampling.mode() != step_sampling.FULL:
            lib.dctx_torch_set_tracing(step_sampling.mode())
        if flags & FLAG_MODULES:
            _install_module_hooks(lib)
        if flags & FLAG_MEMORY:
            _patch_torch_profiler(lib)
        _watch_loader_workers()
    except Exception as exc:  # never break the user's program
        msg = f"torch: operator context disabled: {exc}"
        try:
            _core().note(msg)
        except Exception:
            pass
        global _said
        if not _said:  # once per process, however many sessions
            _said = True
            print(f"deepcontext: {msg}", file=sys.stderr)


def _after_fork_child() -> None:
    # A forked child (DataLoader worker) is not profiled unless the session restarts in it, which
    # calls activate() again. Until then the adapter records nothing; this takes no torch lock.
    global _installed, _in_forked_child
    _in_forked_child = True
    if _lib is not None and _installed:
        _lib.dctx_torch_disable_in_child()
    _installed = False  # the module hooks stay registered (inert); a restart reuses them
    if _core_loaded():
        _core().module_hooks_enable(False)


def set_tracing(mode: int) -> None:
    """Step-sampled tracing (deepcontext.step_sampling): 0 removes the operator callback and
    stops recording allocations until the next call; 1 traces at weight 1; 2 traces a step that
    stands for untraced ones."""
    if _installed and _lib is not None:
        _lib.dctx_torch_set_tracing(mode)


def stats() -> tuple[int, int, int]:
    """(operators seen, backward records placed under their forward op, not placed)."""
    if _lib is None:
        return (0, 0, 0)
    a, b, c = ctypes.c_uint64(), ctypes.c_uint64(), ctypes.c_uint64()
    _lib.dctx_torch_stats(ctypes.byref(a), ctypes.byref(b), ctypes.byref(c))
    return (a.value, b.value, c.value)


# ------------------------------------------------------------------------------------------------
# Coexistence with torch.profiler: it keeps its allocator reports in the same thread-local slot as
# ours and refuses to start while the slot is taken, so we step aside on that thread while it runs.
# ------------------------------------------------------------------------------------------------

_PROFILER_ENTRY_POINTS = (
    ("torch.autograd.profiler", "_enable_profiler", "_disable_profiler"),
    ("torch.autograd.profiler_legacy", "_enable_profiler_legacy", "_disable_profiler_legacy"),
    ("torch.autograd", "_enable_profiler", "_disable_profiler"),
    ("torch.autograd", "_enable_profiler_legacy", "_disable_profiler_legacy"),
)
_patched: list = []  # (module, name, original, wrapper)


def _patch_torch_profiler(lib) -> None:
    if _patched:
        return
    for mod_name, enable_name, disable_name in _PROFILER_ENTRY_POINTS:
        mod = sys.modules.get(mod_name)
        if mod is None:
            try:
                mod = importlib.import_module(mod_name)
            except Exception:
                continue
        enable, disable = getattr(mod, enable_name, None), getattr(mod, disable_name, None)
        if enable is None or disable is None:
            continue

        def enable_wrapper(*args, __orig=enable, **kwargs):
            lib.dctx_torch_memory_yield()
            try:
                return __orig(*args, **kwargs)
            except BaseException:
                lib.dctx_torch_memory_resume()
                raise

        def disable_wrapper(*args, __orig=disable, **kwargs):
            try:
                return __orig(*args, **kwargs)
            finally:
                lib.dctx_torch_memory_resume()

        for name, orig, wrapper in (
            (enable_name, enable, enable_wrapper),
            (disable_name, disable, disable_wrapper),
        ):
            setattr(mod, name, wrapper)
            _patched.append((mod, name, orig, wrapper))


def _unpatch_torch_profiler() -> None:
    for mod, name, orig, wrapper in reversed(_patched):
        if getattr(mod, name, None) is wrapper:
            setattr(mod, name, orig)
    _patched.clear()


# ------------------------------------------------------------------------------------------------
# nn.Module paths
# ------------------------------------------------------------------------------------------------


def _root_name(module) -> str:
    """The name the calling code holds the root module under (`model`), else its class name."""
    try:
        torch_dir = os.path.dirname(sys.modules["torch"].__file__) + os.sep
        f = sys._getframe(2)
        # Start outside the module's own call: the frame that called its outermost _call_impl
        # (a hook runs just inside it; in stack mode the operator that asks may be deep inside).
        call_impl = getattr(sys.modules["torch"].nn.Module, "_call_impl", None)
        code = getattr(call_impl, "__code__", None)
        g = f
        while g is not None:
            if g.f_code is code and g.f_locals.get("self") is module:
                f = g.f_back
            g = g.f_back
        while f is not None:
            file = f.f_code.co_filename
            if not file.startswith(torch_dir) and not file.startswith(_PACKAGE_DIR):
                for scope in (f.f_locals, f.f_globals):
                    for k, v in scope.items():
                        if v is module and k != "self" and not k.startswith("_"):
                            return k
                break
            f = f.f_back
    except Exception:
        pass
    return type(module).__name__


def _resolve_module(module, parent, parent_path):
    """(frame id, path) of module called inside parent (None: a root). _core calls this the
    first time it sees a module under a given parent (from the stack or the hooks) and caches the
    answer."""
    if parent is None:
        path = _root_name(module)
    else:
        name = None
        for k, v in parent._modules.items():
            if v is module:
                name = k
                break
        if name is None:  # held by a container that is not called (ModuleList, ModuleDict)
            try:
                name = next((k for k, v in parent.named_modules() if v is module and k), None)
            except Exception:
                name = None
        path = f"{parent_path}.{name}" if name is not None else type(module).__name__
    return (_lib.dctx_torch_module_frame(path.encode()), path)


def _install_module_hooks(lib) -> None:
    """Module frames. Where this Python's frames are read (3.11 and 3.12), the adapter asks
    _core at each outermost operator for the innermost running module, found in the thread's
    Python stack (the self of torch's Module._call_impl frames): no hooks, so a module call costs
    nothing more and torch.compile sees nothing of ours. Elsewhere (or with
    DEEPCONTEXT_MODULE_HOOKS=1): global forward pre/post hooks implemented in the core
    (_core.module_pre_hook/post_hook) keep each thread's running modules and set the adapter's
    module cell. Either way Python only names a module the first time it is seen."""
    core = _core()
    from torch.nn.modules import module as nn_module

    setter = getattr(lib, "dctx_torch_set_module_frame_fn", None)
    if setter is not None:
        setter.argtypes = [ctypes.c_void_p]
        setter.restype = None
    call_impl = getattr(nn_module.Module, "_call_impl", None)
    if (
        setter is not None
        and call_impl is not None
        and not _hook_handles
        and os.environ.get("DEEPCONTEXT_MODULE_HOOKS") != "1"
    ):
        fn = core.module_stack_configure(call_impl, _resolve_module)
        if fn:
            setter(fn)
            return
    if setter is not None:
        setter(None)
    cell_fn = ctypes.cast(lib.dctx_torch_module_cell, ctypes.c_void_p).value
    core.module_hooks_configure(cell_fn, _resolve_module)
    if _hook_handles:
        return
    import torch

    # While torch.compile traces, the hooks do nothing: Dynamo cannot trace a C function, and a
    # graph break at every module call would leave the compiled model running eagerly. The Python
    # wrapper's check is one that Dynamo folds to a constant.
    compiler = getattr(torch, "compiler", None)
    compiling = (
        getattr(compiler, "is_dynamo_compiling", None)  # returns False; Dynamo makes it True
        or getattr(compiler, "is_compiling", None)
        or (lambda: False)
    )

    def pre_hook(module, args, _hook=core.module_pre_hook, _compiling=compiling):
        if not _compiling():
            _hook(module, args)

    def post_hook(module, args, output, _hook=core.module_post_hook, _compiling=compiling):
        if not _compiling():
            _hook(module, args, output)

    _hook_handles.append(nn_module.register_module_forward_pre_hook(pre_hook))
    try:
        _hook_handles.append(nn_module.register_module_forward_hook(post_hook, always_call=True))
    except TypeError:  # torch < 2.0
        _hook_handles.append(nn_module.register_module_forward_hook(post_hook))


# ------------------------------------------------------------------------------------------------
# Finding or building the adapter
# ------------------------------------------------------------------------------------------------


def _adapter_sources() -> tuple[str, str]:
    """(adapter .cpp, include dir holding deepcontext/monitor.h)."""
    candidates = [
        (
            os.path.join(_PACKAGE_DIR, "_torch_adapter", "torch_adapter.cpp"),
            os.path.join(_PACKAGE_DIR, "_torch_adapter"),
        ),
        (
            os.path.join(_REPO_ROOT, "src", "frameworks", "torch", "torch_adapter.cpp"),
            os.path.join(_REPO_ROOT, "include"),
        ),
    ]
    for src, inc in candidates:
        if os.path.exists(src) and os.path.exists(os.path.join(inc, "deepcontext", "monitor.h")):
            return src, inc
    raise RuntimeError("the PyTorch adapter source (torch_adapter.cpp) is not in the package")


def _core_library() -> str:
    path = os.path.join(_PACKAGE_DIR, "libdeepcontext.so")
    if not os.path.exists(path):
        raise RuntimeError(f"{path} is missing")
    return path


def _bind(lib) -> None:
    u32, i32 = ctypes.c_uint32, ctypes.c_int
    lib.dctx_torch_built_for.restype = ctypes.c_char_p
    lib.dctx_torch_built_for.argtypes = []
    lib.dctx_torch_install.restype = i32
    lib.dctx_torch_install.argtypes = [i32]
    lib.dctx_torch_uninstall.restype = None
    lib.dctx_torch_uninstall.argtypes = []
    lib.dctx_torch_disable_in_child.restype = None
    lib.dctx_torch_set_tracing.restype = i32
    lib.dctx_torch_set_tracing.argtypes = [i32]
    lib.dctx_torch_disable_in_child.argtypes = []
    lib.dctx_torch_module_frame.restype = u32
    lib.dctx_torch_module_frame.argtypes = [ctypes.c_char_p]
    lib.dctx_torch_module_cell.restype = ctypes.c_void_p
    lib.dctx_torch_module_cell.argtypes = []
    p64 = ctypes.POINTER(ctypes.c_uint64)
    lib.dctx_torch_stats.restype = None
    lib.dctx_torch_stats.argtypes = [p64, p64, p64]
    lib.dctx_torch_live_allocations.restype = ctypes.c_uint64
    lib.dctx_torch_live_allocations.argtypes = []
    lib.dctx_torch_memory_yield.restype = i32
    lib.dctx_torch_memory_yield.argtypes = []
    lib.dctx_torch_memory_resume.restype = None
    lib.dctx_torch_memory_resume.argtypes = []
    lib.dctx_torch_memory_reporting_here.restype = i32
    lib.dctx_torch_memory_reporting_here.argtypes = []


def _torch_info():
    import torch

    return (
        str(torch.__version__),
        os.path.dirname(os.path.abspath(torch.__file__)),
        int(bool(torch.compiled_with_cxx11_abi())),
    )


def cache_root() -> str:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "deepcontext")


def _compile_command(src: str, inc: str, out: str, torch_dir: str, abi: int, version: str):
    cxx = os.environ.get("CXX") or sysconfig.get_config_var("CXX") or "c++"
    cxx = cxx.split()[0]
    return [
        cxx,
        "-std=c++20",
        "-O2",
        "-fPIC",
        "-shared",
        "-fvisibility=hidden",
        "-DNDEBUG",  # torch's release headers: same RecordFunction layout, no debug-only asserts
        f"-D_GLIBCXX_USE_CXX11_ABI={abi}",
        f'-DDCTX_TORCH_VERSION="{version}"',
        f"-I{inc}",
        "-isystem",
        os.path.join(torch_dir, "include"),
        src,
        "-o",
        out,
        f"-L{_PACKAGE_DIR}",
        "-ldeepcontext",
        f"-Wl,-rpath,{_PACKAGE_DIR}",
        f"-L{os.path.join(torch_dir, 'lib')}",
        "-lc10",
        "-ltorch_cpu",
        f"-Wl,-rpath,{os.path.join(torch_dir, 'lib')}",
    ]


def build_adapter(quiet: bool = False) -> str:
    """Compiles the adapter for the imported torch into the cache (once); returns its path."""
    version, torch_dir, abi = _torch_info()
    src, inc = _adapter_sources()
    h = hashlib.sha256()
    headers = [os.path.join(inc, "deepcontext", n) for n in ("monitor.h", "timeline.h")]
    for path in (src, *headers):
        if not os.path.exists(path):
            continue
        with open(path, "rb") as fh:
            h.update(fh.read())
    h.update(f"{version}|{torch_dir}|{abi}|{_PACKAGE_DIR}".encode())
    safe_version = version.replace("/", "_").replace("+", "_")
    out_dir = os.path.join(cache_root(), f"torch-adapter-{safe_version}-{h.hexdigest()[:12]}")
    out = os.path.join(out_dir, "libdeepcontext_torch.so")
    if os.path.exists(out):
        return out
    os.makedirs(out_dir, exist_ok=True)
    import fcntl

    with open(os.path.join(out_dir, ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another process may be building the same adapter
        if os.path.exists(out):
            return out
        if not quiet:
            print(
                f"deepcontext: compiling the PyTorch adapter for torch {version} "
                f"(once, about 10 s) into {out_dir}",
                file=sys.stderr,
            )
        fd, tmp = tempfile.mkstemp(dir=out_dir, suffix=".so.tmp")
        os.close(fd)
        cmd = _compile_command(src, inc, tmp, torch_dir, abi, version)
        _core_library()
        try:
            res = subprocess.run(cmd, capture_output=True, text=True)
            if res.returncode != 0:
                tail = (res.stderr or res.stdout).strip().splitlines()[-5:]
                raise RuntimeError("compiling the PyTorch adapter failed: " + " | ".join(tail))
            os.replace(tmp, out)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
    return out


def adapter_path() -> str:
    """The adapter built with the package when it matches the imported torch, else the cached
    build (compiled now if missing)."""
    version, _, _ = _torch_info()
    packaged = os.path.join(_PACKAGE_DIR, "libdeepcontext_torch.so")
    if os.path.exists(packaged):
        try:
            lib = ctypes.CDLL(packaged)
            lib.dctx_torch_built_for.restype = ctypes.c_char_p
            if lib.dctx_torch_built_for().decode() == version:
                return packaged
        except OSError:
            pass
    return build_adapter()


def load_adapter():
    """Loads (building if needed) and returns the adapter library; torch must be imported."""
    global _lib
    if _lib is not None:
        return _lib
    _core()  # loads libdeepcontext.so first, so the adapter binds to the same core
    lib = ctypes.CDLL(adapter_path())
    _bind(lib)
    _lib = lib
    return lib
