"""Chrome trace events (Perfetto, chrome://tracing) from a profile's bounded timeline."""

from __future__ import annotations

import io

from ..errors import UserError
from ..render import Tree


def export(tree: Tree, metrics: list[str], out: io.BufferedIOBase) -> None:
    raise UserError(
        f"{tree.profile.path}: no timeline in this profile; the chrome format exports the bounded "
        "timeline, which this version of deepcontext does not record yet"
    )
