"""A jitted training loop on synthetic data (CPU: a few seconds):

deepcontext run examples/jax/train.py [--model mlp|transformer] [--steps N] [--batch N]

The model lives in model.py; the jitted step (forward, backward, SGD update) is `train_step`.
"""

from __future__ import annotations

import argparse
import functools
import time

import jax
from model import cross_entropy, init_mlp, init_transformer, mlp, transformer


def make_step(kind: str, lr: float = 0.01, heads: int = 4):
    def loss_fn(params, x, y):
        logits = mlp(params, x) if kind == "mlp" else transformer(params, x, heads)
        return cross_entropy(logits, y)

    @functools.partial(jax.jit, donate_argnums=0)
    def train_step(params, x, y):
        with jax.named_scope("train_step"):
            loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
            with jax.named_scope("sgd"):
                params = jax.tree_util.tree_map(lambda p, g: p - lr * g, params, grads)
        return params, loss

    return train_step


def batch(kind: str, key, size: int, width: int, seq: int):
    kx, ky = jax.random.split(key)
    if kind == "mlp":
        x = jax.random.normal(kx, (size, width))
    else:
        x = jax.random.randint(kx, (size, seq), 0, 1000)
    return x, jax.random.randint(ky, (size,), 0, 10)


def main(argv=None) -> float:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--model", choices=["mlp", "transformer"], default="mlp")
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--width", type=int, default=512)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--seq", type=int, default=64)
    ap.add_argument("--warmup", type=int, default=3)
    args = ap.parse_args(argv)

    key = jax.random.PRNGKey(0)
    if args.model == "mlp":
        params = init_mlp(key, args.width, args.layers)
        step = make_step("mlp")
    else:
        params = init_transformer(key, width=args.width // 2, blocks=args.layers // 2 or 1)
        params.pop("heads")
        step = make_step("transformer")
    x, y = batch(args.model, key, args.batch, args.width, args.seq)

    t0 = time.perf_counter()
    for i in range(args.warmup + args.steps):
        if i == args.warmup:  # compiled and warm: time the remaining steps
            jax.block_until_ready(params)
            t0 = time.perf_counter()
        params, loss = step(params, x, y)  # the jitted step's call site
    loss = float(loss)
    elapsed = time.perf_counter() - t0
    ms = elapsed / max(args.steps, 1) * 1e3
    print(
        f"{args.model}: {args.steps} steps in {elapsed:.4f} s ({ms:.2f} ms/step), loss {loss:.4f}"
    )
    return elapsed


if __name__ == "__main__":
    main()
