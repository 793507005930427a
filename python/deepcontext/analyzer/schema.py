"""JSON Schema (draft 2020-12) of `deepcontext analyze --format json` (also in docs/analyzer.md)."""

_NUM = {"type": "number"}
_STR = {"type": "string"}

FINDING = {
    "type": "object",
    "required": [
        "rule",
        "title",
        "summary",
        "metric",
        "time",
        "share",
        "total",
        "saving",
        "saving_share",
        "estimate",
        "suggestion",
        "location",
        "evidence",
        "nodes",
    ],
    "properties": {
        "rule": {**_STR, "description": "rule id, e.g. index-backward"},
        "title": _STR,
        "summary": {**_STR, "description": "one line: what was found, where, how much"},
        "metric": {
            **_STR,
            "description": "the metric time, share and saving are in (gpu_time, op_time, ...)",
        },
        "time": {**_NUM, "description": "time of the problem region, in the metric's unit (ns)"},
        "share": {**_NUM, "description": "time / total (0..1)"},
        "total": {
            **_NUM,
            "description": "the whole share and saving_share are fractions of, in the metric's "
            "unit: the metric's profile total; for gpu_time the kernels' time plus the "
            "launch-overhead idle between them; >= time",
        },
        "saving": {**_NUM, "description": "estimated saving, in the metric's unit"},
        "saving_share": {
            **_NUM,
            "description": "saving / total (0..1), <= share",
        },
        "estimate": {**_STR, "description": "how the saving was estimated"},
        "suggestion": {**_STR, "description": "the code change to make"},
        "location": {
            "type": "object",
            "required": ["node", "path", "source", "module", "operators", "kernels"],
            "properties": {
                "node": {"type": ["integer", "null"], "description": "node id in the profile"},
                "path": {
                    "type": "array",
                    "items": _STR,
                    "description": "frame labels root -> node",
                },
                "source": {
                    "type": ["object", "null"],
                    "required": ["file", "line", "function"],
                    "properties": {"file": _STR, "line": {"type": "integer"}, "function": _STR},
                },
                "module": {"type": ["string", "null"], "description": "nn.Module path"},
                "operators": {"type": "array", "items": _STR, "description": "outermost first"},
                "kernels": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "required": ["name", "time", "launches"],
                        "properties": {"name": _STR, "time": _NUM, "launches": {"type": "integer"}},
                    },
                },
            },
        },
        "evidence": {
            "type": "object",
            "description": "rule-specific metric values that triggered it",
        },
        "nodes": {"type": "array", "items": {"type": "integer"}},
    },
}

SCHEMA = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "deepcontext analyze --format json",
    "type": "object",
    "required": [
        "format",
        "version",
        "profile",
        "meta",
        "totals",
        "min_share",
        "rules_run",
        "rules_skipped",
        "errors",
        "findings",
    ],
    "properties": {
        "format": {"const": "deepcontext-findings"},
        "version": {"const": 1},
        "profile": _STR,
        "meta": {"type": "object"},
        "totals": {"type": "object", "description": "metric name -> total over the profile"},
        "min_share": _NUM,
        "rules_run": {"type": "array", "items": _STR},
        "rules_skipped": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["rule", "reason"],
                "properties": {"rule": _STR, "reason": _STR},
            },
        },
        "errors": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["rule", "message"],
                "properties": {"rule": _STR, "message": _STR},
            },
        },
        "findings": {
            "type": "array",
            "items": FINDING,
            "description": "ranked by estimated saving (ns), then saving_share",
        },
    },
}
