"""Each CPU-exercisable rule fires on a real profiled program with the problem, names the line
that causes it, and stays silent on the fixed version of the same program."""

from __future__ import annotations

import os

import pytest
from deepcontext import load
from deepcontext.analyzer import analyze

# program, rule, the source line (substring of the program text) the finding must point at
CASES = [
    ("sync_in_loop", "host-sync", 'print(f"step {step} loss", loss, file=log)'),
    ("index_backward", "index-backward", "rows = self.table[idx]"),
    ("backward_imbalance", "backward-imbalance", "return torch.cumprod(1 - alpha, dim=-1)"),
    ("loader_stall", "data-loader-stall", "for x, y in loader:"),
    ("jax_sync_in_loop", "host-sync", 'print(f"step {step} loss {float(loss):.4f}", file=log)'),
    ("jax_recompile", "jax-recompile", "params, loss = train_step(params, tokens, mask, labels)"),
    ("jax_jit_in_loop", "jax-recompile", "x = jax.jit(lambda a: jnp.tanh(a * 2))(x)"),
]


def _line_of(program: str, text: str) -> int:
    from analyzer_helpers import PROGRAMS

    for i, line in enumerate((PROGRAMS / f"{program}.py").read_text().splitlines(), 1):
        if line.strip().startswith(text):
            return i
    raise AssertionError(f"{text!r} not in {program}.py")


@pytest.mark.parametrize("program,rule_id,line_text", CASES, ids=[c[0] for c in CASES])
def test_rule_fires_on_problem(profiles, program, rule_id, line_text):
    result = analyze(profiles(program))
    found = result.by_rule(rule_id)
    assert found, f"{rule_id} did not fire on {program}: {[f.summary for f in result.findings]}"
    top = found[0]
    src = top.location["source"]
    assert src["file"].endswith(f"{program}.py")
    assert src["line"] == _line_of(program, line_text)
    assert top.share > 0 and top.saving > 0
    assert top.evidence and top.suggestion and top.estimate
    # the problem is the program's top finding
    assert result.findings[0].rule == rule_id, [f.rule for f in result.findings]


@pytest.mark.parametrize("program,rule_id,line_text", CASES, ids=[c[0] for c in CASES])
def test_rule_silent_on_fix(profiles, program, rule_id, line_text):
    result = analyze(profiles(program, fixed=True))
    assert not result.by_rule(rule_id), [f.summary for f in result.by_rule(rule_id)]


def test_backward_imbalance_silent_on_a_plain_scan(profiles):
    """cumsum's backward is cumsum between two flips: several times its forward (6-7x here), but
    the operator's own cost, so not reported; the scan is still seen with its backward."""
    prof = profiles("scan_backward")
    assert not analyze(prof).by_rule("backward-imbalance")
    scans = [
        n
        for n in load(prof).nodes()
        if n.frame.name == "aten::cumsum" and n.parent.frame.kind == "python"
    ]
    assert scans and any(c.frame.kind == "backward" for c in scans[0].children)


def test_host_sync_counts_calls(profiles):
    f = analyze(profiles("sync_in_loop"), rules=["host-sync"]).findings
    by_line = {x.location["source"]["line"]: x for x in f}
    cond = by_line[_line_of("sync_in_loop", "if loss < best:")]
    # one bool(tensor) per step: the program runs 200 steps
    assert cond.evidence["calls"] == 200


def test_host_sync_counts_jax_array_reads(profiles):
    """The JAX layer counts each read of a jax.Array's value that fetched it at the reading line:
    float(loss) once per step over 200 steps; `if loss < best:` reads a new array each step too."""
    prof = profiles("jax_sync_in_loop")
    f = analyze(prof, rules=["host-sync"]).findings
    by_line = {x.location["source"]["line"]: x for x in f}
    read = by_line[_line_of("jax_sync_in_loop", 'print(f"step {step} loss {float(loss):.4f}"')]
    assert read.evidence["calls"] == 200
    assert read.evidence["by_kind"] == {"float(x) of a jax.Array": 200}
    assert read.evidence["host_metric"] == "wall_time" and read.evidence["host_time"] > 0
    assert "jnp.minimum" in read.suggestion
    cond = by_line[_line_of("jax_sync_in_loop", "if loss < best:")]
    assert cond.evidence["by_kind"] == {"bool(x) of a jax.Array": 200}


def test_host_sync_leaves_out_one_long_read(profiles):
    """One read at the end of a run waits long (the whole queued computation) but is one call."""
    prof = profiles("jax_final_read")
    reads = [n for n in load(prof).nodes() if n.frame.name == "ArrayImpl._value"]
    assert sum(n.inclusive("wall_time") for n in reads) >= 2e7  # it waited (>= 20 ms here)
    assert load(prof).total("jax_host_reads") == 1
    assert not analyze(prof, rules=["host-sync"]).findings


def test_jax_recompile_counts_each_compilation_and_names_what_varied(profiles):
    """The step sees 8 batch lengths: 8 compilations, counted and timed one by one at the call
    site, and the two inputs whose shapes changed (tokens and mask, after the 3 parameters)."""
    prof = profiles("jax_recompile")
    f = analyze(prof, rules=["jax-recompile"]).findings[0]
    assert f.evidence["module"] == "jit_train_step" and f.evidence["compiles"] == 8
    varying = f.evidence["varying_inputs"]
    assert [v.split(":")[0] for v in varying] == ["#4", "#5"]
    assert all(v.count("[32,") == 8 for v in varying)
    assert f.saving == pytest.approx(f.evidence["compile_time"] * 7 / 8)
    nodes = [n for n in load(prof).nodes() if n.frame.name == "xla_compile(jit_train_step)"]
    assert sum(n.exclusive("xla_compiles") for n in nodes) == 8
    assert sum(n.exclusive("xla_compile_time") for n in nodes) == f.evidence["compile_time"]


def test_jax_recompile_of_the_same_inputs_names_a_new_function_each_time(profiles):
    f = analyze(profiles("jax_jit_in_loop"), rules=["jax-recompile"]).findings[0]
    assert f.evidence["compiles"] == 20 and f.evidence["varying_inputs"] == []
    assert "a new function each time" in f.summary


def test_index_backward_evidence(profiles):
    f = analyze(profiles("index_backward"), rules=["index-backward"]).findings[0]
    assert f.evidence["backward_time"] > f.evidence["forward_time"] > 0
    assert any("index_put" in op for op in f.evidence["backward_ops"])
    assert f.location["module"] == "model"
    assert f.location["operators"][0] == "aten::index"


def test_thread_oversubscription(profiles):
    before = load(profiles("threads"))
    # The torch layer records the thread counts the rule compares with the cores.
    assert before.meta["torch_num_threads"] == "16"
    assert int(before.meta["cpu_count"]) == len(os.sched_getaffinity(0))
    assert before.meta.get("cpu_wait_source") == "schedstat"  # Linux gives run-queue delays
    found = analyze(before).by_rule("thread-oversubscription")
    assert found
    # The cost is measured: the main thread waited for a core (run-queue delay) while 16 intra-op
    # threads shared the cores, and the estimate is that wait.
    wait = found[0].evidence["cpu_wait"]
    assert wait > 0.02 * found[0].evidence["cpu_time"]
    assert found[0].saving == pytest.approx(wait)
    # The finding is about the whole run: in wall time, the run's elapsed time, not the threads'
    # wall times added up (which made it "100 % of wall time (39.75 s)" for a 16 s run).
    if found[0].metric == "wall_time":
        elapsed = float(before.meta["elapsed_ns"])
        assert found[0].time == elapsed and found[0].total == elapsed
    fixed = load(profiles("threads", fixed=True))
    assert int(fixed.meta["torch_num_threads"]) == len(os.sched_getaffinity(0))
    assert not analyze(fixed).by_rule("thread-oversubscription")


def test_docs_custom_rule_example(profiles, tmp_path):
    """The worked example of docs/analyzer.md, run as a rules file on a real profiled program."""
    from analyzer_helpers import REPO, run_cli

    text = (REPO / "docs" / "analyzer.md").read_text()
    start = text.index("```python\n# my_rules.py") + len("```python\n")
    code = text[start : text.index("```", start)]
    rules = tmp_path / "my_rules.py"
    rules.write_text(code)
    r = run_cli(
        "analyze",
        str(profiles("softmax_log")),
        "--rules-file",
        str(rules),
        "--rule",
        "softmax-then-log",
    )
    assert r.returncode == 0, r.stderr
    assert "[softmax-then-log]" in r.stdout
    assert f"softmax_log.py:{_line_of('softmax_log', 'logp = torch.log(')}" in r.stdout
