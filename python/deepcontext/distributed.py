"""torch.distributed: one profile per rank, collectives with bytes and wait time, launchers.

Per-rank profiles. Under a launcher that sets RANK and WORLD_SIZE (torchrun, torch.distributed.launch,
SLURM wrappers that export them) a session's output `<stem>.dctx` becomes
`<stem>.rank<r>-of<w>.dctx` (`rank_output`, called by session.start). The profile's metadata says
`rank`, `world_size`, `local_rank`, `local_world_size`, `node_rank`, `host`, `dist_backend`,
`dist_launcher`, and `distributed` (a JSON summary of the rank's communication).

Launched ranks profile themselves:
- `deepcontext run -- torchrun ... train.py`: the launcher runs under the profiler; before it starts
  workers, `activate` puts `_bootstrap/` (whose sitecustomize.py calls `_autostart`) at the front of
  PYTHONPATH and the session's options in DEEPCONTEXT_DIST_CHILD. A Python child that has RANK and
  WORLD_SIZE starts its own session at interpreter start-up, writing `<stem>.rank<r>-of<w>.dctx`
  next to the launcher's `<stem>.dctx`, and removes both variables again, so its own children
  (compile workers, data-loader workers) are not profiled as ranks. Children without RANK ignore it.
- `torch.multiprocessing.spawn(fn, nprocs=N)` inside a profiled program: `fn` is wrapped so that
  process i starts a session writing `<stem>.rank<i>-of<N>.dctx` and stops it when fn returns
  (those processes leave through os._exit, where atexit does not run).

Collectives. The torch.distributed functions (all_reduce, all_gather, reduce_scatter, broadcast,
barrier, all_to_all, send/recv, ...) are wrapped: each call is a `dist.<name>` operator frame under
its call site, holding comm_calls, comm_bytes (the larger of the call's input and output, as
nccl-tests counts message sizes) and comm_time (wall time in the call). Work.wait() is a
`dist.wait` frame holding comm_wait_time (the blocking part; inside a synchronous collective it sits
below that collective). DistributedDataParallel's bucketed all-reduce runs in C++: its c10d ops
(`c10d::allreduce_`, and on GPU their NCCL kernels) appear under the backward of the parameters, and
the wait for the buckets at the end of backward is a `dist.ddp_wait` frame under the backward call
site (comm_wait_time, comm_bytes = the gradient bytes all-reduced, comm_calls = 1 per sync).
"""

from __future__ import annotations

import functools
import json
import os
import re
import socket
import sys
import threading
import time
import types

from . import capi
from .writer import meta_json

ENV_CHILD = "DEEPCONTEXT_DIST_CHILD"
BOOTSTRAP_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_bootstrap")

# torch.distributed functions that communicate; wrapped where present.
COLLECTIVES = (
    "all_reduce",
    "all_reduce_coalesced",
    "all_gather",
    "all_gather_into_tensor",
    "all_gather_coalesced",
    "all_gather_object",
    "reduce_scatter",
    "reduce_scatter_tensor",
    "broadcast",
    "broadcast_object_list",
    "reduce",
    "gather",
    "gather_object",
    "scatter",
    "scatter_object_list",
    "all_to_all",
    "all_to_all_single",
    "barrier",
    "monitored_barrier",
    "send",
    "recv",
    "isend",
    "irecv",
    "batch_isend_irecv",
)

# ... and any other function of distributed_c10d named like one (all_gather_single, ...)
_COLLECTIVE_NAME = re.compile(
    r"^(all_reduce|all_gather|reduce_scatter|broadcast|reduce|gather|scatter|all_to_all|barrier"
    r"|monitored_barrier|send|recv|isend|irecv|batch_isend_irecv)(_\w+)?$"
)
_DOMAIN_OPERATOR = 0
_KIND_OPERATOR = 3
_RANK_SUFFIX = re.compile(r"\.rank\d+-of\d+(\.|$)")

_options: dict | None = None
_active = False
_patched = False
_env_saved: dict | None = None
_metrics: dict[str, int] = {}
_tls = threading.local()
_stats_lock = threading.Lock()
_stats: dict = {}
_ddp_bytes: dict[int, int] = {}
_open_ddp: dict[int, dict] = {}  # thread id -> the DDP wait whose frame is open on it
_spawn_rank: tuple[int, int] | None = None  # (index, nprocs) in a process made by mp.spawn


# ------------------------------------------------------------------------------------------------
# Options and per-rank output names
# ------------------------------------------------------------------------------------------------


def add_arguments(parser) -> None:
    g = parser.add_argument_group("torch.distributed")
    g.add_argument(
        "--no-distributed",
        dest="distributed",
        action="store_false",
        default=True,
        help="do not instrument collectives, and do not profile ranks started by a launcher "
        "(torchrun, mp.spawn) run under the profiler",
    )


def env_rank() -> tuple[int, int] | None:
    """(rank, world size) from the launcher's environment, or None."""
    try:
        return int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    except (KeyError, ValueError):
        return None


def rank_output(path: str, rank: int | None = None, world: int | None = None) -> str:
    """`<stem>.rank<r>-of<w><ext>` for a rank of a distributed job (from RANK/WORLD_SIZE unless
    given); `path` unchanged outside one or when its name already carries a rank."""
    if rank is None or world is None:
        rw = env_rank()
        if rw is None:
            return path
        rank, world = rw
    if _RANK_SUFFIX.search(os.path.basename(path)):
        return path
    stem, ext = os.path.splitext(path)
    return f"{stem}.rank{rank}-of{world}{ext or '.dctx'}"


# ------------------------------------------------------------------------------------------------
# Activation
# ------------------------------------------------------------------------------------------------


def activate(options: dict) -> None:
    """Called by torch_support.activate at session start (cheap; does not import torch)."""
    global _options, _active
    if not options.get("distributed", True):
        return
    _options = dict(options)
    _active = True
    with _stats_lock:
        _stats.clear()
    _set_rank_meta()
    _export_child_env(options)
    if "torch" in sys.modules and hasattr(sys.modules["torch"], "autograd"):
        on_torch_imported()


def on_torch_imported() -> None:
    """Called by torch_support once torch is imported (or at activation if it already was)."""
    if not _active:
        return
    try:
        _patch()
    except Exception as exc:  # never break the user's program
        _core().note(f"distributed: collectives not instrumented: {exc}")


def deactivate() -> None:
    global _active
    if not _active:
        return
    try:
        _close_open_ddp_wait()
        _set_rank_meta()
        summary = summary_dict()
        if summary["comm_calls"] or "rank" in summary:
            _core().set_meta("distributed", meta_json(summary))
        if _env_saved is not None:
            _hint_rank_files()
    finally:
        _active = False
        _restore_child_env()


def _core():
    from . import _core as core

    return core


def _set_rank_meta() -> None:
    core = _core()
    meta = {}
    rw = env_rank()
    if rw is not None:
        meta["rank"], meta["world_size"] = str(rw[0]), str(rw[1])
    for env, key in (
        ("LOCAL_RANK", "local_rank"),
        ("LOCAL_WORLD_SIZE", "local_world_size"),
        ("GROUP_RANK", "node_rank"),
        ("MASTER_ADDR", "master_addr"),
    ):
        if env in os.environ:
            meta[key] = os.environ[env]
    dist = sys.modules.get("torch.distributed")
    try:
        if dist is not None and dist.is_available() and dist.is_initialized():
            meta["rank"] = str(dist.get_rank())
            meta["world_size"] = str(dist.get_world_size())
            meta["dist_backend"] = str(dist.get_backend())
    except Exception:
        pass
    if _spawn_rank is not None:
        meta.setdefault("rank", str(_spawn_rank[0]))
        meta.setdefault("world_size", str(_spawn_rank[1]))
        meta.setdefault("local_rank", str(_spawn_rank[0]))
    if "rank" in meta:
        meta["host"] = socket.gethostname()
    for k, v in meta.items():
        core.set_meta(k, v)
    _stats.update({k: v for k, v in meta.items() if k in ("rank", "world_size", "dist_backend")})


# ------------------------------------------------------------------------------------------------
# Children of a profiled launcher (torchrun): environment + sitecustomize bootstrap
# ------------------------------------------------------------------------------------------------


def _export_child_env(options: dict) -> None:
    global _env_saved
    if env_rank() is not None or _env_saved is not None:
        return  # a rank itself: its own children are not ranks
    child = {
        k: v
        for k, v in options.items()
        if k not in ("output", "command") and isinstance(v, str | int | float | bool | type(None))
    }
    spec = {"output": options.get("output"), "options": child, "launcher_pid": os.getpid()}
    _env_saved = {k: os.environ.get(k) for k in (ENV_CHILD, "PYTHONPATH")}
    os.environ[ENV_CHILD] = json.dumps(spec)
    old = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = BOOTSTRAP_DIR + (os.pathsep + old if old else "")


def _restore_child_env() -> None:
    global _env_saved
    if _env_saved is None:
        return
    for k, v in _env_saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
    _env_saved = None


def _drop_bootstrap_from_env() -> None:
    os.environ.pop(ENV_CHILD, None)
    parts = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    kept = [p for p in parts if os.path.abspath(p) != BOOTSTRAP_DIR]
    if kept:
        os.environ["PYTHONPATH"] = os.pathsep.join(kept)
    else:
        os.environ.pop("PYTHONPATH", None)


def _autostart() -> None:
    """From _bootstrap/sitecustomize.py at interpreter start-up of a launcher's child."""
    spec = os.environ.get(ENV_CHILD)
    if not spec or env_rank() is None:
        return  # not a rank (leave the variables: it may be a nested launcher)
    if "--multiprocessing-fork" in sys.argv:
        return  # a multiprocessing child (mp.spawn's are profiled by SpawnedRank, with their index)
    _drop_bootstrap_from_env()
    try:
        cfg = json.loads(spec)
        from . import session

        if session.is_active():
            return
        output = cfg.get("output") or session.default_output("deepcontext")
        session.start(output, **cfg.get("options", {}))
        _core().set_meta("dist_launcher", "launcher child (torchrun)")
    except Exception as exc:
        print(f"deepcontext: could not profile this rank: {exc}", file=sys.stderr)


def _hint_rank_files() -> None:
    out = (_options or {}).get("output")
    if not out:
        return
    stem, ext = os.path.splitext(out)
    d = os.path.dirname(out) or "."
    base = os.path.basename(stem)
    try:
        names = sorted(
            n
            for n in os.listdir(d)
            if n.startswith(base + ".rank") and _RANK_SUFFIX.search(n) and n.endswith(ext)
        )
    except OSError:
        return
    if names:
        files = [os.path.join(d, n) for n in names]
        _core().set_meta("dist_rank_profiles", json.dumps(files))
        rel = [os.path.relpath(f) for f in files]
        print(
            f"deepcontext: ranks wrote {len(files)} profiles; merge them with: deepcontext merge "
            f"{' '.join(rel)} -o {os.path.relpath(stem)}.merged{ext}",
            file=sys.stderr,
        )


# ------------------------------------------------------------------------------------------------
# mp.spawn
# ------------------------------------------------------------------------------------------------


class SpawnedRank:
    """The function given to torch.multiprocessing.spawn, profiled in each spawned process."""

    def __init__(self, fn, nprocs: int, output: str, options: dict):
        self.fn = fn
        self.nprocs = nprocs
        self.output = output
        self.options = options
        functools.update_wrapper(self, fn, updated=())

    def __call__(self, i, *args):
        global _spawn_rank
        from . import session

        started = False
        if not session.is_active():
            try:
                session.start(rank_output(self.output, i, self.nprocs), **self.options)
                started = True
                _spawn_rank = (i, self.nprocs)
                _core().set_meta("dist_launcher", "torch.multiprocessing.spawn")
                _set_rank_meta()
            except Exception as exc:
                print(f"deepcontext: could not profile spawned process {i}: {exc}", file=sys.stderr)
        try:
            return self.fn(i, *args)
        finally:
            if started:
                session.stop()


def _wrap_start_processes(orig):
    @functools.wraps(orig)
    def start_processes(fn, args=(), nprocs=1, *rest, **kwargs):
        from . import session

        opts = session.options()
        if _active and opts and not isinstance(fn, SpawnedRank):
            child = {
                k: v
                for k, v in opts.items()
                if k not in ("output", "command") and isinstance(v, str | int | float | bool)
            }
            fn = SpawnedRank(fn, nprocs, opts["output"], child)
        return orig(fn, args, nprocs, *rest, **kwargs)

    start_processes.__deepcontext_wrapped__ = orig
    return start_processes


# ------------------------------------------------------------------------------------------------
# Collective instrumentation
# ------------------------------------------------------------------------------------------------


METRICS = (
    ("comm_calls", "count", "collective calls (torch.distributed functions; DDP gradient syncs)"),
    ("comm_bytes", "bytes", "bytes of the collective (larger of its input and output)"),
    ("comm_time", "ns", "wall time inside torch.distributed collective calls"),
    ("comm_wait_time", "ns", "wall time blocked waiting for collectives (Work.wait, DDP buckets)"),
)


def _metric(name: str) -> int:
    m = _metrics.get(name)
    if m is None:
        for n, unit, desc in METRICS:
            if n == name:
                m = _metrics[n] = capi.library().dctx_metric_id(
                    n.encode(), unit.encode(), desc.encode()
                )
    return m


def _add(node: int, values: dict[str, float]) -> None:
    lib = capi.library()
    for k, v in values.items():
        if v:
            lib.dctx_add(node, _metric(k), float(v))


def _count(kind: str, **values: float) -> None:
    with _stats_lock:
        per = _stats.setdefault("by_collective", {}).setdefault(kind, {})
        for k, v in values.items():
            per[k] = per.get(k, 0) + v
            _stats[k] = _stats.get(k, 0) + v


def summary_dict() -> dict:
    """This rank's communication totals (the `distributed` metadata): comm_calls, comm_bytes,
    comm_time (inside collective calls), comm_wait_time (all waits, also those inside calls),
    comm_total_time (time spent communicating, each moment once: collective calls + waits outside
    them + DDP's bucket wait), by_collective (the same per collective), rank, world_size, and
    ddp_loop_time (from the first DDP forward to the last gradient sync: the training loop) and
    ddp_loop_comm_time (comm_total_time within it)."""
    with _stats_lock:
        out = json.loads(json.dumps(_stats))
    for k in ("comm_calls", "comm_bytes", "comm_time", "comm_wait_time", "comm_total_time"):
        out.setdefault(k, 0)
    out.pop("comm_total_at_first_step", None)
    first, last = out.pop("first_step_ns", None), out.pop("last_sync_ns", None)
    if first is not None and last is not None and last > first:
        out["ddp_loop_time"] = last - first
    return out


def _nbytes(x) -> int:
    nb = getattr(x, "nbytes", None)
    if isinstance(nb, int) and hasattr(x, "element_size"):
        return nb
    t = getattr(x, "tensor", None)  # P2POp
    if t is not None and hasattr(t, "element_size"):
        return t.nbytes
    if isinstance(x, list | tuple):
        return sum(_nbytes(v) for v in x)
    return 0


def _message_bytes(args, kwargs) -> int:
    best = 0
    for v in list(args) + list(kwargs.values()):
        b = _nbytes(v)
        if b > best:
            best = b
    return best


def _enter(name: str) -> int:
    return _core().enter(_DOMAIN_OPERATOR, _KIND_OPERATOR, name)


def _exit() -> None:
    _core().exit(_DOMAIN_OPERATOR)


def _wrap_collective(name: str, orig):
    frame = f"dist.{name}"

    @functools.wraps(orig)
    def wrapper(*args, **kwargs):
        if not _active or getattr(_tls, "depth", 0) or not _core().is_active():
            return orig(*args, **kwargs)
        nbytes = _message_bytes(args, kwargs)
        _tls.depth = 1
        node = _enter(frame)
        t0 = time.perf_counter_ns()
        try:
            return orig(*args, **kwargs)
        finally:
            dt = time.perf_counter_ns() - t0
            _exit()
            _tls.depth = 0
            _add(node, {"comm_calls": 1, "comm_bytes": nbytes, "comm_time": dt})
            _count(name, comm_calls=1, comm_bytes=nbytes, comm_time=dt, comm_total_time=dt)

    wrapper.__deepcontext_wrapped__ = orig
    return wrapper


def _wrap_wait(orig):
    @functools.wraps(orig)
    def wait(self, *args, **kwargs):
        if not _active or getattr(_tls, "in_wait", False) or not _core().is_active():
            return orig(self, *args, **kwargs)
        _tls.in_wait = True
        node = _enter("dist.wait")
        t0 = time.perf_counter_ns()
        try:
            return orig(self, *args, **kwargs)
        finally:
            dt = time.perf_counter_ns() - t0
            _exit()
            _tls.in_wait = False
            _add(node, {"comm_wait_time": dt})
            if getattr(_tls, "depth", 0):  # inside a synchronous collective: part of its time
                _count("wait_in_collective", comm_wait_time=dt)
            else:
                _count("wait", comm_wait_time=dt, comm_total_time=dt)

    wait.__deepcontext_wrapped__ = orig
    return wait


def _ddp_grad_bytes(ddp) -> int:
    key = id(ddp)
    b = _ddp_bytes.get(key)
    if b is None:
        b = sum(p.numel() * p.element_size() for p in ddp.module.parameters() if p.requires_grad)
        if len(_ddp_bytes) > 64:
            _ddp_bytes.clear()
        _ddp_bytes[key] = b
    return b


def _wrap_ddp_forward(orig):
    """After DDP's forward, a hook on one output's gradient (it fires early in backward) queues an
    engine callback before DDP's own finalize callback, which queues a second one after it: the
    time between the two is the wait for the gradient buckets' all-reduce (plus the copy-back)."""

    @functools.wraps(orig)
    def forward(self, *args, **kwargs):
        t0 = time.perf_counter_ns()
        if _open_ddp:
            _close_open_ddp_wait()
        out = orig(self, *args, **kwargs)
        try:
            if _active and _core().is_active() and getattr(self, "require_backward_grad_sync", 0):
                if "first_step_ns" not in _stats:
                    _stats["first_step_ns"] = t0
                    _stats["comm_total_at_first_step"] = _stats.get("comm_total_time", 0)
                _hook_ddp_output(self, out)
        except Exception:
            pass
        return out

    forward.__deepcontext_wrapped__ = orig
    return forward


def _first_grad_tensor(out):
    import torch

    stack = [out]
    while stack:
        x = stack.pop()
        if isinstance(x, torch.Tensor):
            if x.requires_grad:
                return x
        elif isinstance(x, dict):
            stack.extend(x.values())
        elif isinstance(x, list | tuple):
            stack.extend(reversed(x))
    return None


def _close_open_ddp_wait() -> None:
    """A dist.ddp_wait frame left open on this thread (its backward failed before DDP's finalize
    callback ran) is closed here."""
    if _open_ddp.pop(threading.get_ident(), None) is not None:
        _exit()


def _hook_ddp_output(ddp, out) -> None:
    import torch
    import torch.distributed as dist

    t = _first_grad_tensor(out)
    if t is None or not torch.is_grad_enabled():
        return
    engine = torch.autograd.Variable._execution_engine
    nbytes = _ddp_grad_bytes(ddp)
    state = {"done": False}

    def after():
        if _open_ddp.pop(threading.get_ident(), None) is not state:
            return  # closed already (a deactivated session or a failed backward)
        dt = time.perf_counter_ns() - state["t0"]
        _exit()
        _add(state["node"], {"comm_wait_time": dt, "comm_bytes": nbytes, "comm_calls": 1})
        _count(
            "ddp_all_reduce", comm_wait_time=dt, comm_bytes=nbytes, comm_calls=1, comm_total_time=dt
        )
        _stats["last_sync_ns"] = time.perf_counter_ns()
        _stats["ddp_loop_comm_time"] = _stats.get("comm_total_time", 0) - _stats.get(
            "comm_total_at_first_step", 0
        )
        try:
            if dist.is_initialized():
                _stats["dist_backend"] = str(dist.get_backend())
        except Exception:
            pass

    def before():
        # the frame stays open until `after`, so samples taken meanwhile land in it
        if not (_active and _core().is_active()):
            return
        _close_open_ddp_wait()
        state["node"] = _enter("dist.ddp_wait")
        state["t0"] = time.perf_counter_ns()
        _open_ddp[threading.get_ident()] = state
        engine.queue_callback(after)

    def hook(grad):
        if not state["done"] and _active:
            state["done"] = True
            engine.queue_callback(before)
        return None

    t.register_hook(hook)


def _wrap_init(orig):
    @functools.wraps(orig)
    def init_process_group(*args, **kwargs):
        result = orig(*args, **kwargs)
        if _active and _core().is_active():
            try:
                _set_rank_meta()
            except Exception:
                pass
        return result

    init_process_group.__deepcontext_wrapped__ = orig
    return init_process_group


def _patch() -> None:
    global _patched
    if _patched:
        return
    _patched = True
    import torch

    spawn_mod = sys.modules.get("torch.multiprocessing.spawn")
    if spawn_mod is None:
        import importlib

        spawn_mod = importlib.import_module("torch.multiprocessing.spawn")
    orig_sp = spawn_mod.start_processes
    wrapped_sp = _wrap_start_processes(orig_sp)
    spawn_mod.start_processes = wrapped_sp
    if getattr(torch.multiprocessing, "start_processes", None) is orig_sp:
        torch.multiprocessing.start_processes = wrapped_sp

    import torch.distributed as dist

    if not dist.is_available():
        return
    from torch.distributed import distributed_c10d as c10d

    names = list(COLLECTIVES) + [
        n for n in vars(c10d) if _COLLECTIVE_NAME.match(n) and n not in COLLECTIVES
    ]
    for name in names:
        orig = vars(c10d).get(name)  # not getattr: deprecated names warn (reduce_op)
        # type(), not isinstance: a deprecated alias's __class__ would warn
        if type(orig) is not types.FunctionType or hasattr(orig, "__deepcontext_wrapped__"):
            continue
        w = _wrap_collective(name, orig)
        setattr(c10d, name, w)
        if getattr(dist, name, None) is orig:
            setattr(dist, name, w)
    orig_init = c10d.init_process_group
    w_init = _wrap_init(orig_init)
    c10d.init_process_group = w_init
    if dist.init_process_group is orig_init:
        dist.init_process_group = w_init
    Work = getattr(torch._C._distributed_c10d, "Work", None)
    if Work is not None:
        Work.wait = _wrap_wait(Work.wait)
    from torch.nn.parallel import DistributedDataParallel as DDP

    DDP.forward = _wrap_ddp_forward(DDP.forward)
