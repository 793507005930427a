"""The built-in rules; importing this package registers them with the engine."""

from . import (
    backward_imbalance,
    data_loader,
    distributed,
    gpu_kernels,
    gpu_launch,
    host_sync,
    index_backward,
    threads,
)

__all__ = [
    "backward_imbalance",
    "data_loader",
    "distributed",
    "gpu_kernels",
    "gpu_launch",
    "host_sync",
    "index_backward",
    "threads",
]
