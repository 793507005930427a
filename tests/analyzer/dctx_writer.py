"""Test helper over deepcontext.writer.ProfileWriter: paths given as (kind, name[, file, line,
module]) tuples, for analyzer tests that need a tree a CPU-only machine cannot record (GPU kernels,
copies, syncs). Real-program tests profile with `deepcontext run` instead."""

from __future__ import annotations

import os

from deepcontext.writer import ProfileWriter


class ProfileBuilder(ProfileWriter):
    def node(
        self, parent: int, kind: str, name: str, file: str = "", line: int = 0, module: str = ""
    ) -> int:
        return self.child(parent, self.frame(kind, name, file, line, module))

    def path(self, *frames: tuple, parent: int = 0) -> int:
        n = parent
        for fr in frames:
            n = self.node(n, *fr)
        return n

    def add(self, node: int, metric: str, value: float, count: int = 1) -> None:
        self.metric(
            metric, "count" if metric in ("api_calls",) else None if "time" not in metric else "ns"
        )
        super().add(node, metric, value, count)

    def prop(self, node: int, key: str, value: str) -> None:
        self.set_prop(node, key, value)

    def write(self, path: str | os.PathLike) -> str:
        super().write(path)
        return os.fspath(path)
