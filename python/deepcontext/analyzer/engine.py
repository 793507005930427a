"""The rule engine: a registry of rules, running them over a profile, and ranking their findings.

A rule is an object with `id`, `title`, `needs` (metrics of which at least one must be in the
profile, else the rule is skipped with a reason) and `check(query) -> iterable of Finding`. The
built-in rules are C++ (deepcontext._analyzer, src/analyzer/): they are registered here as Rule
objects with `builtin=True` and run over the profile in C++. Custom rules are Python functions over
a Query, registered with the `@rule(...)` decorator. The C++ engine ranks the findings of both.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import traceback
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, fields

from ..errors import ProfileError, UserError
from ..reader import Profile, load
from . import sources
from .finding import Finding
from .query import _PKG_DIR, Query

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
    builtin: bool = False
    """A built-in rule: implemented in C++, `check` runs it there."""

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


def native():
    """The compiled analyzer module; a one-line UserError when this installation lacks it."""
    try:
        from .. import _analyzer
    except ImportError as exc:
        raise UserError(
            "the analyzer's compiled module deepcontext._analyzer is missing "
            f"({exc}); install the package (pip install .) or build it (cmake, target _analyzer)"
        ) from None
    return _analyzer


class _NativeCheck:
    """`check` of a built-in rule: runs the C++ rule over the query's profile (the findings come
    back ranked and complete, as analyze() returns them)."""

    def __init__(self, rule_id: str):
        self.rule_id = rule_id

    def __call__(self, q: Query) -> list[Finding]:
        a = _open(native(), q.profile.path)
        st = a.run(self.rule_id)
        if st["state"] == "skipped":
            raise NotApplicable(st["message"])
        if st["state"] == "error":
            raise RuntimeError(st["message"])
        return [_finding(d) for d in a.finish(0.0)]


_BUILTIN: list[Rule] = []


def builtin_rules() -> list[Rule]:
    """The built-in (C++) rules, registered ahead of custom ones on first use."""
    if not _BUILTIN:
        for d in native().rules():
            _BUILTIN.append(
                Rule(
                    d["id"],
                    d["title"],
                    _NativeCheck(d["id"]),
                    tuple(d["needs"]),
                    d["description"],
                    d["generic"],
                    builtin=True,
                )
            )
        # The built-in rules come first; a custom rule registered under a built-in id before
        # this point keeps replacing it, in its place.
        ordered = {r.id: REGISTRY.get(r.id, r) for r in _BUILTIN}
        ordered.update({k: v for k, v in REGISTRY.items() if k not in ordered})
        REGISTRY.clear()
        REGISTRY.update(ordered)
    return [r for r in _BUILTIN if REGISTRY.get(r.id) is r]


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

    path: str
    findings: list[Finding]
    totals: dict[str, float]
    rules_run: list[str] = field(default_factory=list)
    skipped: list[dict] = field(default_factory=list)
    errors: list[dict] = field(default_factory=list)
    min_share: float = 0.0
    meta: dict[str, str] = field(default_factory=dict)
    units: dict[str, str] = field(default_factory=dict)
    _profile: Profile | None = field(default=None, repr=False)

    @property
    def profile(self) -> Profile:
        """The analyzed profile (loaded by the Python reader on first use)."""
        if self._profile is None:
            self._profile = load(self.path)
        return self._profile

    def to_dict(self) -> dict:
        meta_keys = (
            "command",
            "host",
            "pid",
            "start_time",
            "end_time",
            "torch_version",
            "jax_version",
            "gpu_sampling_windows",
            "trace_mode",
            "steps_total",
            "steps_traced",
            "trace_weight",
        )
        return {
            "format": FORMAT,
            "version": VERSION,
            "profile": self.path,
            "meta": {k: self.meta[k] for k in meta_keys if k in self.meta},
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


def _finding(d: dict) -> Finding:
    # Every field but `node` is a key of the C++ engine's dict; `node` is inside its location.
    f = Finding(**{k.name: d[k.name] for k in fields(Finding) if k.name != "node"})
    f.node = d["location"]["node"]
    return f


def _open(mod, path: str):
    try:
        return mod.Analyzer(path, _PKG_DIR, sources.loops)
    except mod.ProfileError as exc:
        raise ProfileError(str(exc)) from None


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
    given = profile if isinstance(profile, Profile) else None
    path = given.path if given is not None else os.fspath(profile)
    mod = native()
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
    engine = _open(mod, path)
    analysis = Analysis(
        path, [], {}, min_share=min_share, meta=engine.meta(), units=engine.units(), _profile=given
    )
    q: Query | None = None
    custom: list[Finding] = []
    for r in selected:
        if r.builtin:
            st = engine.run(r.id)
            if st["state"] == "skipped":
                analysis.skipped.append({"rule": r.id, "reason": st["message"]})
            elif st["state"] == "error":
                analysis.errors.append({"rule": r.id, "message": st["message"]})
            else:
                analysis.rules_run.append(r.id)
            continue
        if q is None:
            q = Query(analysis.profile)
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
            engine.add(
                len(custom),
                f.rule,
                r.generic,
                f.metric,
                float(f.time),
                float(f.saving),
                float(f.total) if f.total else None,
                f.node,
                list(f.nodes),
            )
            custom.append(f)
        analysis.rules_run.append(r.id)
    for d in engine.finish(min_share):
        if "external" in d:
            f = custom[d["external"]]
            for k in ("time", "saving", "total", "share", "saving_share", "location", "nodes"):
                setattr(f, k, d[k])
        else:
            f = _finding(d)
        analysis.findings.append(f)
    analysis.totals = engine.totals()
    return analysis
