"""The rule engine: a registry of rules, running them over a profile, and ranking their findings.

A rule is an object with `id`, `title`, `needs` (metrics of which at least one must be in the
profile, else the rule is skipped with a reason) and `check(query) -> iterable of Finding`. The
`@rule(...)` decorator turns a function into one and registers it, which is how both the built-in
rules and custom rules are written.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import traceback
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from ..errors import UserError
from ..reader import Profile, load
from .finding import Finding
from .query import Query

FORMAT = "deepcontext-findings"
VERSION = 1


class NotApplicable(Exception):
    """Raised by a rule's check when the profile lacks what the rule needs (the message says
    what); the rule is then listed as skipped, not as run."""


@dataclass
class Rule:
    id: str
    title: str
    check: Callable[[Query], Iterable[Finding]]
    needs: tuple[str, ...] = ()
    description: str = ""
    generic: bool = False
    """A generic rule's finding is dropped when a specific rule reports the same node."""

    def applies(self, q: Query) -> str | None:
        """None if the rule can run on this profile, else the reason it cannot."""
        if self.needs and not any(q.has(m) for m in self.needs):
            return "profile has none of: " + ", ".join(self.needs)
        return None


REGISTRY: dict[str, Rule] = {}


def register(r: Rule) -> Rule:
    REGISTRY[r.id] = r
    return r


def rule(
    id: str, title: str, *, needs: Iterable[str] = (), description: str = "", generic: bool = False
) -> Callable[[Callable[[Query], Iterable[Finding]]], Rule]:
    """Decorator: `@rule("my-id", "Title", needs=("cpu_time",))` over `def check(q): yield Finding(...)`
    registers the rule (replacing one with the same id) and returns it."""

    def deco(fn: Callable[[Query], Iterable[Finding]]) -> Rule:
        return register(
            Rule(id, title, fn, tuple(needs), description or (fn.__doc__ or "").strip(), generic)
        )

    return deco


def builtin_rules() -> list[Rule]:
    from . import rules  # noqa: F401  (registers the built-in rules)

    return [r for r in REGISTRY.values() if r.check.__module__.startswith(rules.__name__)]


def load_rules_file(path: str) -> list[Rule]:
    """Import a Python file of custom rules; returns the rules it registered."""
    if not os.path.isfile(path):
        raise UserError(f"{path}: no such rules file")
    before = dict(REGISTRY)
    name = "deepcontext_user_rules_" + os.path.splitext(os.path.basename(path))[0].replace("-", "_")
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:  # a broken rules file is the user's input, report it in one line
        raise UserError(f"{path}: cannot load rules ({type(exc).__name__}: {exc})") from None
    new = [r for rid, r in REGISTRY.items() if before.get(rid) is not r]
    if not new:
        raise UserError(f"{path}: defines no rules (use @deepcontext.analyzer.rule)")
    return new


@dataclass
class Analysis:
    """The result of analyze(): ranked findings plus which rules ran, were skipped or failed."""

    profile: Profile
    findings: list[Finding]
    totals: dict[str, float]
    rules_run: list[str] = field(default_factory=list)
    skipped: list[dict] = field(default_factory=list)
    errors: list[dict] = field(default_factory=list)
    min_share: float = 0.0

    def to_dict(self) -> dict:
        meta_keys = (
            "command",
            "host",
            "pid",
            "start_time",
            "end_time",
            "torch_version",
            "jax_version",
        )
        return {
            "format": FORMAT,
            "version": VERSION,
            "profile": self.profile.path,
            "meta": {k: self.profile.meta[k] for k in meta_keys if k in self.profile.meta},
            "totals": self.totals,
            "min_share": self.min_share,
            "rules_run": self.rules_run,
            "rules_skipped": self.skipped,
            "errors": self.errors,
            "findings": [f.to_dict() for f in self.findings],
        }

    def top(self) -> Finding | None:
        return self.findings[0] if self.findings else None

    def by_rule(self, rule_id: str) -> list[Finding]:
        return [f for f in self.findings if f.rule == rule_id]


def _location(q: Query, f: Finding) -> dict:
    if f.node is None:
        return {
            "node": None,
            "path": [],
            "source": None,
            "module": None,
            "operators": [],
            "kernels": [],
        }
    return {
        "node": f.node,
        "path": q.path_labels(f.node),
        "source": q.source(f.node),
        "module": q.module_path(f.node),
        "operators": q.operators(f.node),
        "kernels": q.kernels(f.node) if q.has("gpu_time") else [],
    }


def _mostly_covered(q: Query, f: Finding, covered: set[int]) -> bool:
    """True when most of a generic finding's nodes lie inside nodes a specific finding reported
    (e.g. the short sort kernels of an index backward that index-backward already accounts for)."""
    if not f.nodes or not covered:
        return False
    inside = 0
    for n in f.nodes:
        if n in covered or any(a in covered for a in q.ancestors(n)):
            inside += 1
    return inside * 2 > len(f.nodes)


def analyze(
    profile: Profile | str | os.PathLike,
    rules: Iterable[str | Rule] | None = None,
    *,
    min_share: float = 0.0,
) -> Analysis:
    """Run rules over a profile and rank their findings by estimated saving.

    rules: rule ids or Rule objects (default: every registered rule, built-in and custom).
    min_share: drop findings whose region is below this fraction (0..1) of the total time.
    """
    prof = profile if isinstance(profile, Profile) else load(profile)
    builtin_rules()
    if rules is None:
        selected = list(REGISTRY.values())
    else:
        selected = []
        for r in rules:
            if isinstance(r, Rule):
                selected.append(r)
            elif r in REGISTRY:
                selected.append(REGISTRY[r])
            else:
                known = ", ".join(sorted(REGISTRY))
                raise UserError(f"unknown rule {r!r} (known: {known})")
    q = Query(prof)
    found: list[tuple[Rule, Finding]] = []
    analysis = Analysis(prof, [], {}, min_share=min_share)
    for r in selected:
        reason = r.applies(q)
        if reason:
            analysis.skipped.append({"rule": r.id, "reason": reason})
            continue
        try:
            mine = list(r.check(q) or ())
        except NotApplicable as exc:
            analysis.skipped.append({"rule": r.id, "reason": str(exc)})
            continue
        except Exception as exc:  # one broken rule must not hide the others' findings
            tb = traceback.extract_tb(exc.__traceback__)[-1]
            where = f"{os.path.basename(tb.filename)}:{tb.lineno}"
            analysis.errors.append(
                {"rule": r.id, "message": f"{type(exc).__name__}: {exc} ({where})"}
            )
            continue
        for f in mine:
            f.rule = f.rule or r.id
            f.title = f.title or r.title
            found.append((r, f))
        analysis.rules_run.append(r.id)
    specific_nodes = {f.node for r, f in found if not r.generic and f.node is not None}
    # the operators/kernels specific findings are about (not their anchors, which may be a
    # source line or loop high above everything)
    covered = {
        n
        for r, f in found
        if not r.generic
        for n in f.nodes
        if q.kind[n] not in ("python", "thread", "module", "root")
    }
    out = []
    for r, f in found:
        if r.generic and (f.node in specific_nodes or _mostly_covered(q, f, covered)):
            continue
        # A saving is part of the region it removes, and the region part of the whole: a rule's
        # estimate never claims more (a rule measuring outside its metric, e.g. copy or idle time
        # on a GPU profile, gives its own `total`).
        f.time = max(0.0, float(f.time))
        f.saving = min(max(0.0, float(f.saving)), f.time)
        total = f.total if f.total else q.denominator(f.metric)
        f.total = max(float(total), f.time)
        f.share = f.time / f.total if f.total > 0 else 0.0
        f.saving_share = f.saving / f.total if f.total > 0 else 0.0
        if f.share < min_share:
            continue
        f.location = _location(q, f)
        if f.node is not None and f.node not in f.nodes:
            f.nodes.insert(0, f.node)
        out.append(f)
    out.sort(key=lambda f: (-f.saving_share, -f.share, f.rule))
    analysis.findings = out
    for m in prof.metrics:
        analysis.totals[m] = q.total(m)
    return analysis
