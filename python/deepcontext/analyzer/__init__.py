"""The analyzer: rules over a loaded profile that produce ranked findings (docs/analyzer.md).

    from deepcontext.analyzer import analyze
    result = analyze("run.dctx")            # every built-in and registered custom rule
    for f in result.findings:               # ranked by estimated saving
        print(f.rule, f.share, f.saving, f.suggestion)

A custom rule is a function over a Query, registered with the `@rule` decorator:

    from deepcontext.analyzer import Finding, rule

    @rule("softmax-heavy", "Softmax dominates", needs=("op_time",))
    def softmax_heavy(q):
        for g in q.group_by("operator", "op_time"):
            if g.key == "aten::softmax" and g.share > 0.2:
                yield Finding(summary=..., suggestion=..., metric="op_time", time=g.value,
                              saving=g.value / 2, estimate="half", node=g.anchors[0])
"""

from .engine import (
    REGISTRY,
    Analysis,
    NotApplicable,
    Rule,
    analyze,
    builtin_rules,
    load_rules_file,
    register,
    rule,
)
from .finding import Finding
from .query import Group, Query, is_user_file
from .report import render_json, render_text

__all__ = [
    "REGISTRY",
    "Analysis",
    "Finding",
    "Group",
    "NotApplicable",
    "Query",
    "Rule",
    "analyze",
    "builtin_rules",
    "is_user_file",
    "load_rules_file",
    "register",
    "render_json",
    "render_text",
    "rule",
]
