"""More busy CPU threads than cores: intra-op threads plus data-loader workers over-subscribe the
CPU, so they time-share cores, spin in barriers and thrash caches (the prototype's U-Net case: 16
loader threads -> 8 cut the run 54 -> 47 s)."""

from __future__ import annotations

from ..engine import NotApplicable, rule
from ..finding import Finding
from ..query import Query
from ._common import meta_int

# Measured by the prototype (U-Net, 16 -> 8 loader threads, 54 -> 47 s): 13 % of the run for a
# 2x over-subscription. Scale the saving with the over-subscribed fraction of the threads.
PROTOTYPE_SAVING_AT_2X = 0.13


def cores(q: Query) -> int | None:
    return meta_int(q, "cpu_count", "cpus_available", "affinity_cpus", "nproc")


def intra_op_threads(q: Query) -> int | None:
    return meta_int(q, "torch_num_threads", "torch_intra_op_threads")


def loader_workers(q: Query) -> int:
    return meta_int(q, "dataloader_workers", "num_workers") or 0


@rule(
    "thread-oversubscription",
    "More busy threads than CPU cores",
    needs=("cpu_time", "wall_time", "op_time"),
)
def check(q: Query):
    ncores = cores(q)
    intra = intra_op_threads(q)
    if ncores is None or intra is None:
        raise NotApplicable("profile metadata lacks cpu_count / torch_num_threads")
    workers = loader_workers(q)
    demand = intra + workers
    if demand <= ncores:
        return
    m = next(x for x in ("wall_time", "cpu_time", "op_time") if q.has(x))
    total = q.total(m)
    over = 1.0 - ncores / demand
    saving = total * PROTOTYPE_SAVING_AT_2X * over / 0.5
    target = max(1, ncores - min(workers, ncores // 2)) if workers else ncores
    yield Finding(
        summary=(
            f"{intra} intra-op threads{f' + {workers} data-loader workers' if workers else ''} on "
            f"{ncores} CPU cores: the CPU is over-subscribed {demand / ncores:.1f}x"
        ),
        suggestion=(
            f"Use no more threads than cores: `torch.set_num_threads({target})` (or OMP_NUM_THREADS="
            f"{target})"
            + (
                f" and fewer loader workers (`num_workers={max(1, ncores - target)}`); each worker "
                "also needs a core"
                if workers
                else ""
            )
            + "."
        ),
        metric=m,
        time=total,
        saving=saving,
        estimate=(
            f"scaled from the prototype's U-Net case ({PROTOTYPE_SAVING_AT_2X:.0%} of the run for 2x "
            f"over-subscription) by the over-subscribed fraction of threads ({over:.0%})"
        ),
        evidence={
            "cpu_cores": ncores,
            "intra_op_threads": intra,
            "loader_workers": workers,
            "oversubscription": demand / ncores,
        },
        node=None,
    )
