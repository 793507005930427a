"""A jitted training loop that reads the loss back to the host every step (`float(loss)` for a log
line, `if loss < best:`): each waits for the step to finish, so the host cannot queue the next
step while the device runs this one. Fixed (--fixed): the loss is accumulated on the device and
read once at the end."""

import argparse
import io

import jax
import jax.numpy as jnp


def init(key, width=256, depth=3):
    keys = jax.random.split(key, depth)
    return [jax.random.normal(k, (width, width)) / width**0.5 for k in keys]


def loss_fn(params, x, y):
    for w in params:
        x = jnp.tanh(x @ w)
    return jnp.mean((x - y) ** 2)


@jax.jit
def train_step(params, x, y):
    loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
    return jax.tree_util.tree_map(lambda p, g: p - 0.01 * g, params, grads), loss


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--fixed", action="store_true")
    ap.add_argument("--steps", type=int, default=200)
    args = ap.parse_args()
    key = jax.random.PRNGKey(0)
    params = init(key)
    x = jax.random.normal(key, (256, 256))
    y = jnp.zeros((256, 256))
    log = io.StringIO()
    best = float("inf")
    running, best_t = jnp.zeros(()), jnp.full((), jnp.inf)
    for step in range(args.steps):
        params, loss = train_step(params, x, y)
        if args.fixed:
            running, best_t = running + loss, jnp.minimum(best_t, loss)
        else:
            print(f"step {step} loss {float(loss):.4f}", file=log)
            if loss < best:
                best = loss.item()
    if args.fixed:
        best = float(best_t)
        print(f"mean loss {float(running) / args.steps:.4f}", file=log)
    print(f"final {float(loss):.4f} best {best:.4f}")


if __name__ == "__main__":
    main()
