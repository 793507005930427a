"""Models in plain JAX, with named scopes so that the profile shows them in the op path:
an MLP (`mlp/layer<i>/...`) and a small pre-norm transformer encoder (`transformer/block<i>/...`).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp


def init_mlp(key, width: int = 512, layers: int = 4, classes: int = 10):
    params = []
    dims = [width] * layers + [classes]
    for i in range(layers):
        key, k = jax.random.split(key)
        w = jax.random.normal(k, (dims[i], dims[i + 1])) * (1.0 / dims[i]) ** 0.5
        params.append((w, jnp.zeros((dims[i + 1],))))
    return params


def mlp(params, x):
    with jax.named_scope("mlp"):
        for i, (w, b) in enumerate(params):
            with jax.named_scope(f"layer{i}"):
                x = x @ w + b
                if i + 1 < len(params):
                    x = jax.nn.relu(x)
    return x


def init_transformer(key, width=256, heads=4, blocks=2, vocab=1000, classes=10):
    def dense(k, n, m):
        return jax.random.normal(k, (n, m)) * (1.0 / n) ** 0.5

    keys = iter(jax.random.split(key, 4 + 6 * blocks))
    params = {
        "embed": jax.random.normal(next(keys), (vocab, width)) * 0.02,
        "head": dense(next(keys), width, classes),
        "blocks": [],
    }
    for _ in range(blocks):
        params["blocks"].append(
            {
                "qkv": dense(next(keys), width, 3 * width),
                "out": dense(next(keys), width, width),
                "up": dense(next(keys), width, 4 * width),
                "down": dense(next(keys), 4 * width, width),
                "ln1": jnp.ones((width,)),
                "ln2": jnp.ones((width,)),
            }
        )
    params["heads"] = heads
    return params


def _layer_norm(x, scale):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) * jax.lax.rsqrt(var + 1e-5) * scale


def transformer(params, tokens, heads: int = 4):
    with jax.named_scope("transformer"):
        x = params["embed"][tokens]
        b, t, d = x.shape
        for i, p in enumerate(params["blocks"]):
            with jax.named_scope(f"block{i}"):
                with jax.named_scope("attention"):
                    h = _layer_norm(x, p["ln1"])
                    q, k, v = jnp.split(h @ p["qkv"], 3, axis=-1)
                    q = q.reshape(b, t, heads, d // heads)
                    k = k.reshape(b, t, heads, d // heads)
                    v = v.reshape(b, t, heads, d // heads)
                    s = jnp.einsum("bqhd,bkhd->bhqk", q, k) / (d // heads) ** 0.5
                    a = jax.nn.softmax(s, axis=-1)
                    o = jnp.einsum("bhqk,bkhd->bqhd", a, v).reshape(b, t, d)
                    x = x + o @ p["out"]
                with jax.named_scope("mlp"):
                    h = _layer_norm(x, p["ln2"])
                    x = x + jax.nn.gelu(h @ p["up"]) @ p["down"]
        return x.mean(1) @ params["head"]


def cross_entropy(logits, labels):
    logp = jax.nn.log_softmax(logits)
    return -jnp.take_along_axis(logp, labels[:, None], axis=1).mean()
