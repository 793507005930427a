"""Rendering an Analysis as terminal text or JSON (the schema is in schema.py and docs/analyzer.md)."""

from __future__ import annotations

import json
import textwrap

from .engine import Analysis


def fmt_ns(ns: float) -> str:
    a = abs(ns)
    if a >= 1e9:
        return f"{ns / 1e9:.2f} s"
    if a >= 1e6:
        return f"{ns / 1e6:.2f} ms"
    if a >= 1e3:
        return f"{ns / 1e3:.1f} us"
    return f"{ns:.0f} ns"


METRIC_WORDS = {
    "gpu_time": "GPU timeline",  # kernel time + launch-overhead idle (Query.denominator)
    "cpu_time": "CPU time",
    "wall_time": "wall time",
    "op_time": "operator time",
    "gpu_idle": "GPU idle time",
}


def _value(v: float, metric: str, unit: str) -> str:
    return fmt_ns(v) if unit == "ns" else f"{v:g} {unit}"


def render_text(a: Analysis, width: int = 100) -> str:
    lines = []
    units = a.units
    n = len(a.findings)
    lines.append(
        f"{n} finding{'s' if n != 1 else ''} in {a.path}"
        + (" (ranked by estimated saving)" if n > 1 else "")
    )
    if a.meta.get("gpu_sampling_windows"):
        lines.append(
            f"GPU activity was sampled ({a.meta['gpu_sampling_windows']} windows, "
            "--cuda-graphs sample): GPU times and savings are estimates"
        )
    if a.meta.get("steps_traced") and a.meta.get("trace_weight", "1") != "1":
        lines.append(
            f"Step-sampled tracing: operator, memory and GPU values estimated from "
            f"{a.meta['steps_traced']} of {a.meta.get('steps_total', '?')} steps "
            "(--trace all traces every step)"
        )
    wrap = textwrap.TextWrapper(width=width, initial_indent="    ", subsequent_indent="    ")
    for i, f in enumerate(a.findings, 1):
        unit = units.get(f.metric, "ns")
        word = METRIC_WORDS.get(f.metric, f.metric)
        lines.append("")
        lines.append(f"{i}. [{f.rule}] {f.title}")
        lines.extend(wrap.wrap(f.summary))
        loc = f.location
        if loc.get("source"):
            s = loc["source"]
            lines.append(f"    where:    {s['file']}:{s['line']} ({s['function']})")
        if loc.get("module"):
            lines.append(f"    module:   {loc['module']}")
        if loc.get("operators"):
            lines.append(f"    operator: {' -> '.join(loc['operators'][:6])}")
        for k in loc.get("kernels", [])[:3]:
            lines.append(
                f"    kernel:   {k['name'][:80]} ({fmt_ns(k['time'])}, {k['launches']} launches)"
            )
        lines.append(f"    share:    {f.share:.1%} of {word} ({_value(f.time, f.metric, unit)})")
        lines.append(
            f"    saving:   ~{_value(f.saving, f.metric, unit)} ({f.saving_share:.1%} of {word}); {f.estimate}"
        )
        ev = ", ".join(
            f"{k}={_fmt_ev(v)}" for k, v in f.evidence.items() if v not in (None, [], {})
        )
        lines.extend(
            textwrap.wrap(
                "evidence: " + ev,
                width=width,
                initial_indent="    ",
                subsequent_indent="              ",
            )
        )
        lines.extend(
            textwrap.wrap(
                "fix: " + f.suggestion,
                width=width,
                initial_indent="    ",
                subsequent_indent="         ",
            )
        )
    if a.skipped:
        lines.append("")
        lines.append(
            "not applicable: " + ", ".join(f"{s['rule']} ({s['reason']})" for s in a.skipped)
        )
    for e in a.errors:
        lines.append(f"rule {e['rule']} failed: {e['message']}")
    return "\n".join(lines) + "\n"


def _fmt_ev(v) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    if isinstance(v, list):
        return (
            "["
            + ", ".join(_fmt_ev(x) if not isinstance(x, dict) else _fmt_dict(x) for x in v[:5])
            + "]"
        )
    if isinstance(v, dict):
        return _fmt_dict(v)
    return str(v)


def _fmt_dict(d: dict) -> str:
    if "name" in d and len(d) <= 3:
        rest = ", ".join(f"{_fmt_ev(v)}" for k, v in d.items() if k != "name")
        return f"{str(d['name'])[:60]} ({rest})"
    return "{" + ", ".join(f"{k}: {_fmt_ev(v)}" for k, v in d.items()) + "}"


def render_json(a: Analysis) -> str:
    return json.dumps(a.to_dict(), indent=2, default=str) + "\n"
