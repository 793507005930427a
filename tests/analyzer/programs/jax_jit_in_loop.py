"""A function jitted inside the loop: each iteration makes a new lambda, so jax.jit's cache (per
function object) misses and the same computation compiles every time. Fixed (--fixed): jitted
once, before the loop."""

import argparse

import jax
import jax.numpy as jnp


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--fixed", action="store_true")
    args = ap.parse_args()
    x = jnp.ones((64, 64))
    scale = jax.jit(lambda a: jnp.tanh(a * 2))
    for _ in range(20):
        if args.fixed:
            x = scale(x)
        else:
            x = jax.jit(lambda a: jnp.tanh(a * 2))(x)
    print(f"sum {float(x.sum()):.3f}")


if __name__ == "__main__":
    main()
