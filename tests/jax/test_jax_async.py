"""Asynchronous dispatch on XLA:CPU: a training loop that never blocks, under `deepcontext run`.

Each iteration makes a batch with eager ops (`jax.random.split`, `jax.random.normal`) and calls a
jitted step; every call returns before its execution ran. XLA's threads must be charged to the
execution they run (the step), not to whichever line dispatched last (the next batch's split)."""

from __future__ import annotations

import json
import os

from deepcontext.reader import load
from jax_helpers import has_line, xla_execution
from program_helpers import line_of, run_deepcontext, write_program

LOOP = """
import jax, jax.numpy as jnp

WIDTH, LAYERS, BATCH = 384, 6, 128


def init(key):
    keys = jax.random.split(key, LAYERS)
    return [jax.random.normal(k, (WIDTH, WIDTH)) / WIDTH**0.5 for k in keys]


def make_batch(key):
    key, kx = jax.random.split(key)  # the split line
    x = jax.random.normal(kx, (BATCH, WIDTH))
    return key, x, x[:, :8]


def loss_fn(params, x, y):
    h = x
    for i, w in enumerate(params):
        with jax.named_scope(f"layer{i}"):
            h = jnp.tanh(h @ w)
    return ((h[:, :8] - jnp.sin(y)) ** 2).mean()


@jax.jit
def train_step(params, x, y):
    with jax.named_scope("mlp_step"):
        loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
        with jax.named_scope("sgd"):
            params = [p - 0.05 * g for p, g in zip(params, grads)]
    return params, loss


params = init(jax.random.PRNGKey(0))
key = jax.random.PRNGKey(1)
for step in range(STEPS):
    key, x, y = make_batch(key)  # the batch line
    params, loss = train_step(params, x, y)  # the step line
print("loss", float(loss))
"""


def _pool_threads(profile):
    """XLA's threads outside compilation and the importing of jax, with their cpu_time."""
    return [
        (n, v)
        for n, v in xla_execution(profile)
        if not any(f.kind == "python" and f.name == "_find_and_load" for f in n.path())
    ]


def test_unblocked_loop_charges_xla_threads_to_the_running_step(tmp_path):
    prog = write_program(tmp_path, LOOP.replace("STEPS", "200"))
    out = tmp_path / "p.dctx"
    proc = run_deepcontext(tmp_path, "--native", "-o", str(out), str(prog))
    assert "loss" in proc.stdout, proc.stdout + proc.stderr
    p = load(out)
    step_line, split_line = line_of(prog, "# the step line"), line_of(prog, "# the split line")
    batch_line = line_of(prog, "# the batch line")
    # The loop's share of the pool: the setup (init's eager ops, compilations) is left out, and
    # with it the CPU time a pool thread used before the sampler first found it, which goes to
    # whatever context is set at that moment (on a loaded host, a line of init).
    threads = [
        (n, v)
        for n, v in _pool_threads(p)
        if has_line(n, "prog.py", step_line) or has_line(n, "prog.py", batch_line)
    ]
    total = sum(v for _, v in threads)
    assert total > 200e6, f"too little XLA execution time in the loop: {total / 1e6:.0f} ms"
    at_step = sum(v for n, v in threads if has_line(n, "prog.py", step_line))
    at_split = sum(v for n, v in threads if has_line(n, "prog.py", split_line))
    print(
        f"XLA pool cpu_time in the loop {total / 1e6:.0f} ms: {at_step / total:.1%} under the step line, "
        f"{at_split / total:.1%} under the split line"
    )
    # The steps are nearly all of the pool's work (the batches are small); before the fix most
    # of it went to the split line, the latest call while each step still ran.
    assert at_step / total >= 0.90, [
        ([f"{f.name}:{f.line}" for f in n.path() if f.kind == "python"][-3:], n.frame.name, v / 1e6)
        for n, v in threads
        if not has_line(n, "prog.py", step_line) and v > 0.01 * total
    ]
    assert at_split / total <= 0.05
    assert p.meta["jax_worker_context"].startswith("oldest execution in flight")
    dispatches = json.loads(p.meta["jax_dispatches"])
    assert dispatches["tracked"] >= 400 and dispatches["dropped"] == 0, dispatches

    # HLO ops on XLA:CPU: samples in the step's JIT-compiled kernels are named after their HLO op
    # below the op path, named scopes included, under the step's line.
    hlo = [
        n
        for n in p.root.walk()
        if n.frame.kind == "hlo_op"
        and n.inclusive("cpu_time")
        and has_line(n, "prog.py", step_line)
        and any(f.kind == "jax_op" and f.name == "jit(train_step)" for f in n.path())
    ]
    assert hlo, "no sample in the step's JIT kernels named after its HLO op"
    scopes = {f.name for n in hlo for f in n.path() if f.kind == "jax_op"}
    assert "mlp_step" in scopes, scopes
    # Scopes inside a transformation stay in its component: jvp(layer0), transpose(jvp(layer3)).
    assert any(s == "sgd" or "layer" in s for s in scopes), scopes
    assert any(os.path.basename(n.frame.file) == "prog.py" and n.frame.line > 0 for n in hlo), (
        "HLO ops carry the model's source line"
    )
    # Where no HLO op can be named (XLA:CPU's runtime library: dots, copies), the profile says why.
    assert "no sample can read which thunk runs it" in p.meta["jax_cpu_hlo_ops"]
