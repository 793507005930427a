"""A finding: what a rule found, where, why, what to change, and the estimated gain."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class Finding:
    """Built by a rule's check(); the engine fills rule, title, share, saving_share and location.

    metric: the time metric the finding's numbers are in (gpu_time, cpu_time, ...).
    time: the time of the problem region (e.g. the backward of the index op), in metric units.
    saving: the estimated saving in metric units; estimate says how it was estimated.
    evidence: the metric values that triggered the rule (plain JSON values).
    total: the whole that share and saving_share are fractions of, in metric units; left None,
    the engine takes Query.denominator(metric) (the metric's profile total; for gpu_time the
    kernels' time plus the launch-overhead idle between them).
    node: the calling-context node the finding is about (its path is reported); nodes: more nodes
    (for the GUI to highlight).
    """

    summary: str
    suggestion: str
    metric: str
    time: float
    saving: float
    estimate: str
    evidence: dict[str, Any] = field(default_factory=dict)
    node: int | None = None
    total: float | None = None
    nodes: list[int] = field(default_factory=list)
    rule: str = ""
    title: str = ""
    share: float = 0.0
    saving_share: float = 0.0
    location: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "rule": self.rule,
            "title": self.title,
            "summary": self.summary,
            "metric": self.metric,
            "time": self.time,
            "share": self.share,
            "total": self.total,
            "saving": self.saving,
            "saving_share": self.saving_share,
            "estimate": self.estimate,
            "suggestion": self.suggestion,
            "location": self.location,
            "evidence": self.evidence,
            "nodes": list(self.nodes),
        }
