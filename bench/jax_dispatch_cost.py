"""What tracking JAX's in-flight executions costs a dispatch, paired in one profiled process.

    deepcontext run -q -o /tmp/b.dctx bench/jax_dispatch_cost.py [--rounds 20]

Alternates blocks with the wrappers of before (the core's ContextCall for jitted calls, a Python
wrapper of EvalTrace.process_primitive: the worker context is the latest call's) and the current
ones (the JAX adapter's DispatchCall for both: each dispatch is queued until its output is ready)
and prints the medians of the main thread's CPU time (thread_time: less sensitive to a busy host
than wall time) for a tiny jitted call, an eager op, and a step of the unblocked training loop
of tests/jax/test_jax_async.py (with its eager batch ops), and the loop's wall time per step.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
from deepcontext import _core
from jax import lax
from jax._src import core as jax_core

_TESTS = Path(__file__).resolve().parents[1] / "tests"
sys.path[:0] = [str(_TESTS / "jax"), str(_TESTS)]
from test_jax_async import LOOP  # noqa: E402

loop = {}
exec(LOOP.split("params = init")[0], loop)  # init, make_batch, train_step


@jax.jit
def tiny(x):
    return x + 1.0


NEW_PRIMITIVE = jax_core.EvalTrace.process_primitive
_original = NEW_PRIMITIVE._dctx_fn


def old_primitive(self, *args, **kwargs):  # the wrapper before in-flight tracking
    _core.set_worker_context(_core.current())
    return _original(self, *args, **kwargs)


def wrappers(new: bool):
    jax_core.EvalTrace.process_primitive = NEW_PRIMITIVE if new else old_primitive
    if new:
        return tiny, loop["train_step"]
    return _core.ContextCall(tiny._dctx_fn), _core.ContextCall(loop["train_step"]._dctx_fn)


state = {"params": loop["init"](jax.random.PRNGKey(0)), "key": jax.random.PRNGKey(1)}


def block(new: bool, calls: int = 2000, steps: int = 25) -> tuple[float, float, float, float]:
    call, step = wrappers(new)
    y = jnp.ones(4)
    t = time.thread_time()
    for _ in range(calls):
        y = call(y)
    per_call = (time.thread_time() - t) / calls
    y.block_until_ready()
    t = time.thread_time()
    for _ in range(calls // 10):
        y = lax.add(y, y)
    per_op = (time.thread_time() - t) / (calls // 10)
    y.block_until_ready()
    params, key = state["params"], state["key"]
    wall, cpu = time.perf_counter(), time.thread_time()
    for _ in range(steps):
        key, x, yb = loop["make_batch"](key)
        params, loss = step(params, x, yb)
    cpu = (time.thread_time() - cpu) / steps
    loss.block_until_ready()
    wall = (time.perf_counter() - wall) / steps
    state.update(params=params, key=key)
    return per_call, per_op, cpu, wall


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rounds", type=int, default=20)
    args = ap.parse_args()
    block(True), block(False)  # compiled and warm
    old, new = [], []
    for _ in range(args.rounds):
        old.append(block(False))
        new.append(block(True))
    jax_core.EvalTrace.process_primitive = NEW_PRIMITIVE
    names = ("tiny jitted call (CPU)", "eager op (CPU)", "loop step (CPU)", "loop step (wall)")
    for i, name in enumerate(names):
        a = statistics.median(r[i] for r in old)
        b = statistics.median(r[i] for r in new)
        print(f"{name}: before {a * 1e6:.2f} us, now {b * 1e6:.2f} us ({b / a - 1:+.1%})")


if __name__ == "__main__":
    main()
