"""The query layer, the rule engine (custom rules, ranking, filtering, failure isolation), the
JSON output against its schema, and the `deepcontext analyze` command's errors."""

from __future__ import annotations

import json

import gpu_trees as T
import pytest
from analyzer_helpers import run_cli
from dctx_writer import ProfileBuilder
from deepcontext import load
from deepcontext.analyzer import (
    REGISTRY,
    Finding,
    NotApplicable,
    Query,
    analyze,
    is_user_file,
    rule,
)
from deepcontext.analyzer.schema import SCHEMA
from deepcontext.errors import UserError


def _validate(value, schema, where="$"):
    """The subset of JSON Schema that SCHEMA uses: type, const, required, properties, items."""
    types = schema.get("type")
    if types is not None:
        names = types if isinstance(types, list) else [types]
        py = {
            "object": dict,
            "array": list,
            "string": str,
            "integer": int,
            "number": (int, float),
            "null": type(None),
        }
        ok = any(
            isinstance(value, py[t])
            and not (t in ("integer", "number") and isinstance(value, bool))
            for t in names
        )
        assert ok, f"{where}: {value!r} is not {types}"
    if "const" in schema:
        assert value == schema["const"], f"{where}: {value!r} != {schema['const']!r}"
    if isinstance(value, dict):
        for k in schema.get("required", []):
            assert k in value, f"{where}: missing {k}"
        for k, sub in schema.get("properties", {}).items():
            if k in value:
                _validate(value[k], sub, f"{where}.{k}")
    if isinstance(value, list) and "items" in schema:
        for i, v in enumerate(value):
            _validate(v, schema["items"], f"{where}[{i}]")


def cpu_tree(tmp_path):
    b = ProfileBuilder()
    main = b.path(("thread", "MainThread"), ("python", "<module>", T.TRAIN, 40))
    a = b.path(
        ("python", "main", T.TRAIN, 31),
        ("python", "Model.forward", T.MODEL, 10),
        ("module", "model.fc"),
        ("operator", "aten::linear"),
        ("operator", "aten::addmm"),
        parent=main,
    )
    b.add(a, "op_time", 6e8, count=100)
    b.add(a, "op_count", 100, count=100)
    s = b.path(
        ("python", "main", T.TRAIN, 31),
        ("python", "Model.forward", T.MODEL, 11),
        ("operator", "aten::softmax"),
        parent=main,
    )
    b.add(s, "op_time", 3e8, count=100)
    b.add(s, "op_count", 100, count=100)
    lib = b.path(
        ("python", "main", T.TRAIN, 32),
        ("python", "helper", f"{T.TORCH}/nn/functional.py", 99),
        ("operator", "aten::relu"),
        parent=main,
    )
    b.add(lib, "op_time", 1e8, count=100)
    return b.write(tmp_path / "cpu.dctx"), a, s, lib


def test_query_context_and_grouping(tmp_path):
    path, addmm, softmax, relu = cpu_tree(tmp_path)
    q = Query(load(path))
    assert q.source(addmm) == {"file": T.MODEL, "line": 10, "function": "Model.forward"}
    # a library frame is skipped: the user line is the caller in train.py
    assert q.source(relu) == {"file": T.TRAIN, "line": 32, "function": "main"}
    assert q.module_path(addmm) == "model.fc"
    assert q.operators(addmm) == ["aten::linear", "aten::addmm"]
    by_line = {g.key: g for g in q.group_by("line", "op_time")}
    assert by_line[(T.MODEL, 10, "Model.forward")].value == 6e8
    assert by_line[(T.MODEL, 10, "Model.forward")].share == pytest.approx(0.6)
    ops = q.group_by("operator", "op_time")
    assert [g.key for g in ops] == ["aten::linear", "aten::softmax", "aten::relu"]
    assert [g.key for g in q.group_by("leaf_operator", "op_time")][0] == "aten::addmm"
    assert [g.key for g in q.group_by("module", "op_time")] == ["model.fc"]
    assert [g.key for g in q.group_by("function", "op_time")][0] == (T.MODEL, "Model.forward")
    assert q.find("aten::softmax") == [softmax]
    assert q.find(regex=r"^aten::(relu|softmax)$") == sorted([softmax, relu])
    assert q.calls(addmm) == 100
    with pytest.raises(ValueError):
        q.group_by("nope", "op_time")


def test_is_user_file():
    assert is_user_file("/home/u/proj/train.py")
    assert not is_user_file("/venv/lib/python3.11/site-packages/torch/nn/modules/module.py")
    assert not is_user_file("/usr/lib/python3.11/threading.py")
    assert not is_user_file("<frozen runpy>")
    assert not is_user_file("")


def test_custom_rule_ranking_and_min_share(tmp_path):
    path, *_ = cpu_tree(tmp_path)

    @rule("test-softmax-heavy", "Softmax is heavy", needs=("op_time",))
    def softmax_heavy(q):
        for g in q.group_by("operator", "op_time"):
            if g.key == "aten::softmax":
                yield Finding(
                    summary="softmax",
                    suggestion="use log_softmax",
                    metric="op_time",
                    time=g.value,
                    saving=0.5 * g.value,
                    estimate="half",
                    evidence={"calls": g.count},
                    node=g.anchors[0],
                )

    @rule("test-linear", "Linear", needs=("op_time",))
    def linear(q):
        n = q.find("aten::linear")[0]
        yield Finding(
            summary="linear",
            suggestion="-",
            metric="op_time",
            time=q.inc(n, "op_time"),
            saving=0.1 * q.inc(n, "op_time"),
            estimate="10%",
            node=n,
        )

    try:
        a = analyze(path, rules=["test-softmax-heavy", "test-linear"])
        assert [f.rule for f in a.findings] == ["test-softmax-heavy", "test-linear"]  # 15% > 6%
        f = a.findings[0]
        assert f.share == pytest.approx(0.3) and f.saving_share == pytest.approx(0.15)
        assert f.title == "Softmax is heavy" and f.location["source"]["line"] == 11
        assert f.evidence == {"calls": 100}
        a = analyze(path, rules=["test-softmax-heavy", "test-linear"], min_share=0.5)
        assert [f.rule for f in a.findings] == ["test-linear"]
    finally:
        REGISTRY.pop("test-softmax-heavy")
        REGISTRY.pop("test-linear")


def test_failing_and_inapplicable_rules_are_isolated(tmp_path):
    path, *_ = cpu_tree(tmp_path)

    @rule("test-broken", "Broken")
    def broken(q):
        raise KeyError("oops")
        yield

    @rule("test-na", "Not applicable")
    def na(q):
        raise NotApplicable("needs something else")
        yield

    try:
        a = analyze(path)
        assert [e["rule"] for e in a.errors] == ["test-broken"]
        assert "KeyError" in a.errors[0]["message"]
        assert {"rule": "test-na", "reason": "needs something else"} in a.skipped
        assert "test-na" not in a.rules_run and "host-sync" in a.rules_run
    finally:
        REGISTRY.pop("test-broken")
        REGISTRY.pop("test-na")


def test_unknown_rule(tmp_path):
    path, *_ = cpu_tree(tmp_path)
    with pytest.raises(UserError, match="unknown rule 'nope'"):
        analyze(path, rules=["nope"])


def test_json_matches_schema(tmp_path):
    path = T.conv_unet(channels_last=False).write(tmp_path / "unet.dctx")
    r = run_cli("analyze", path, "--format", "json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    _validate(doc, SCHEMA)
    assert doc["findings"] and doc["findings"][0]["rule"] == "channels-last"
    savings = [f["saving"] for f in doc["findings"]]
    assert savings == sorted(savings, reverse=True)


def test_cli_text_rule_filter_and_rules_file(tmp_path):
    path = T.conv_unet(channels_last=False).write(tmp_path / "unet.dctx")
    r = run_cli("analyze", path, "--rule", "channels-last")
    assert r.returncode == 0, r.stderr
    assert (
        "[channels-last]" in r.stdout and "channels_last" in r.stdout and "model.py:22" in r.stdout
    )
    rules = tmp_path / "my_rules.py"
    rules.write_text(
        "from deepcontext.analyzer import Finding, rule\n"
        "@rule('relu-time', 'ReLU kernels', needs=('gpu_time',))\n"
        "def relu(q):\n"
        "    for g in q.group_by('operator', 'gpu_time'):\n"
        "        if g.key == 'aten::relu':\n"
        "            yield Finding(summary='relu', suggestion='fuse it', metric='gpu_time',\n"
        "                          time=g.value, saving=g.value, estimate='all', node=g.anchors[0])\n"
    )
    r = run_cli(
        "analyze", path, "--rules-file", str(rules), "--rule", "relu-time", "--format", "json"
    )
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert [f["rule"] for f in doc["findings"]] == ["relu-time"]
    assert doc["findings"][0]["location"]["source"]["line"] == 30


@pytest.mark.parametrize(
    "args,message",
    [
        (["analyze", "/nonexistent.dctx"], "no such file"),
        (["analyze", "{path}", "--rule", "nope"], "unknown rule 'nope'"),
        (["analyze", "{path}", "--min-share", "150"], "--min-share 150"),
        (["analyze", "{path}", "--rules-file", "/nonexistent.py"], "no such rules file"),
        (["analyze", "{garbage}"], "not a DeepContext profile"),
    ],
)
def test_cli_errors_are_one_line(tmp_path, args, message):
    path = T.conv_unet(channels_last=False).write(tmp_path / "unet.dctx")
    garbage = tmp_path / "garbage.dctx"
    garbage.write_bytes(b"not a profile at all")
    r = run_cli(*[a.format(path=path, garbage=garbage) for a in args])
    assert r.returncode == 2
    assert message in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
