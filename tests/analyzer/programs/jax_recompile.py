"""A jitted training step fed batches of varying length, as batches of text come: every new
length is a new input shape, so jax.jit traces and compiles the step again and most of the loop
is compilation. Fixed (--fixed): each batch is padded to one of two bucket lengths with a mask,
so the step compiles twice."""

import argparse
import time

import jax
import jax.numpy as jnp
import numpy as np


def loss_fn(params, tokens, mask, labels):
    emb = params["emb"][tokens]  # (batch, length, width)
    pooled = (emb * mask[..., None]).sum(1) / mask.sum(1, keepdims=True)
    logits = jnp.tanh(pooled @ params["w1"]) @ params["w2"]
    return -jnp.mean(jax.nn.log_softmax(logits)[jnp.arange(labels.shape[0]), labels])


@jax.jit
def train_step(params, tokens, mask, labels):
    loss, grads = jax.value_and_grad(loss_fn)(params, tokens, mask, labels)
    return jax.tree_util.tree_map(lambda p, g: p - 0.1 * g, params, grads), loss


def pad_to(a, length):
    return np.pad(a, ((0, 0), (0, length - a.shape[1])))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--fixed", action="store_true")
    ap.add_argument("--steps", type=int, default=24)
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    key = jax.random.PRNGKey(0)
    k1, k2, k3 = jax.random.split(key, 3)
    params = {
        "emb": jax.random.normal(k1, (1000, 64)) * 0.1,
        "w1": jax.random.normal(k2, (64, 64)) * 0.1,
        "w2": jax.random.normal(k3, (64, 10)) * 0.1,
    }
    t0 = time.perf_counter()
    for step in range(args.steps):
        length = 40 + (step % 8) * 6  # 8 lengths, 40..82 tokens
        tokens = rng.integers(0, 1000, (32, length))
        mask = np.ones((32, length), np.float32)
        labels = rng.integers(0, 10, 32)
        if args.fixed:
            bucket = 64 if length <= 64 else 96
            tokens, mask = pad_to(tokens, bucket), pad_to(mask, bucket)
        params, loss = train_step(params, tokens, mask, labels)
    print(f"loss {float(loss):.4f} in {time.perf_counter() - t0:.2f} s")


if __name__ == "__main__":
    main()
