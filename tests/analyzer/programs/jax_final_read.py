"""One long read of a jax.Array at the end of a run: the host waits for the whole queued
computation once. Not a synchronization inside the step, whatever the time it waits."""

import jax
import jax.numpy as jnp


@jax.jit
def heavy(x):
    for _ in range(32):
        x = jnp.tanh(x @ x)
    return x.sum()


def main():
    x = jnp.ones((512, 512)) / 512
    heavy(x).block_until_ready()  # compiled and run once, outside the measured read
    total = heavy(x)
    print(f"total {float(total):.3f}")


if __name__ == "__main__":
    main()
