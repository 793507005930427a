"""The analyzer's JAX rules on real GPU profiles: the JAX programs of tests/analyzer/programs
profiled with `deepcontext run` and GPU tracing on the GPU machine by
tests/analyzer/record_gpu_jax.sh (through `STEPS="build jaxrules" JAXRULES_FIXTURES=1
scripts/gpu-check.sh`), committed in tests/data/gpu_jax/. The same rules as on the CPU profiles of
test_programs.py, now with the kernels the programs ran under their lines."""

from __future__ import annotations

from pathlib import Path

import pytest
from deepcontext import load
from deepcontext.analyzer import analyze
from test_programs import CASES, _line_of

DATA = Path(__file__).resolve().parent.parent / "data" / "gpu_jax"
JAX_CASES = [
    c for c in CASES if c[0].startswith("jax_") and (DATA / f"{c[0]}_problem.dctx").exists()
]

pytestmark = pytest.mark.skipif(not JAX_CASES, reason="no JAX GPU profiles in tests/data/gpu_jax")


def profile(program: str, variant: str) -> Path:
    return DATA / f"{program}_{variant}.dctx"


@pytest.mark.parametrize("program,rule_id,line_text", JAX_CASES, ids=[c[0] for c in JAX_CASES])
def test_profile_has_kernels_under_the_program(program, rule_id, line_text):
    """Recorded on a GPU: the steps' kernels are there, under the program's own lines."""
    prof = load(profile(program, "problem"))
    assert prof.total("gpu_time") > 0
    in_program = [
        n
        for n in prof.nodes()
        if n.frame.kind == "python" and n.frame.file.endswith(f"{program}.py")
    ]
    assert sum(n.exclusive("gpu_time") for n in prof.nodes()) == prof.total("gpu_time")
    assert max(n.inclusive("gpu_time") for n in in_program) >= 0.9 * prof.total("gpu_time")


@pytest.mark.parametrize("program,rule_id,line_text", JAX_CASES, ids=[c[0] for c in JAX_CASES])
def test_rule_fires_on_the_gpu_profile(program, rule_id, line_text):
    result = analyze(profile(program, "problem"))
    found = result.by_rule(rule_id)
    assert found, f"{rule_id} did not fire on {program}"
    assert found[0].location["source"]["line"] == _line_of(program, line_text)
    assert found[0].saving > 0
    # first, by the time it would save: the reads' 30 ms of wall time (1 % of a run spent mostly
    # compiling) outrank 2 ms of launch idle (6 % of its short GPU timeline)
    assert result.findings[0] is found[0], [(f.rule, f.saving) for f in result.findings]


@pytest.mark.parametrize("program,rule_id,line_text", JAX_CASES, ids=[c[0] for c in JAX_CASES])
def test_rule_silent_on_the_fixed_gpu_profile(program, rule_id, line_text):
    assert not analyze(profile(program, "fixed")).by_rule(rule_id)


def test_autotuning_while_compiling_is_left_out():
    """XLA autotunes GEMM fusions on the GPU while compiling: candidate kernels (and
    RedzoneAllocator checks) with a stream synchronization after each, all under the
    xla_compile(<module>) scope at the first call's line. That is the compiler's work, once:
    no GPU rule reports it, and the launch-overhead idle model leaves its gaps out."""
    from deepcontext.analyzer import Query

    prof = profile("jax_sync_in_loop", "fixed")
    p = load(prof)
    q = Query(p)
    compiling = [n for n in range(1, len(q.kind)) if q.compiling(n)]
    sync = sum(p.node(n).exclusive("sync_time") for n in compiling)
    assert sync > 0 and sync == p.total("sync_time")  # every synchronization is the compiler's
    gpu = sum(p.node(n).exclusive("gpu_time") for n in compiling)
    assert gpu > 0.3 * p.total("gpu_time")
    result = analyze(prof)
    assert not result.by_rule("host-sync")
    for f in result.findings:
        for k in f.location["kernels"]:
            assert "Redzone" not in k["name"] and "DelayKernel" not in k["name"], f.summary


def test_small_kernels_on_a_jax_profile_suggests_jax_fixes():
    """The fixed program's per-step `running + loss` and `jnp.minimum` run eagerly: one tiny
    kernel each, 200 times, from one line. small-kernels names them with JAX's remedies."""
    result = analyze(profile("jax_sync_in_loop", "fixed"))
    line = _line_of("jax_sync_in_loop", "running, best_t = running + loss")
    found = [f for f in result.by_rule("small-kernels") if f.location["source"]["line"] == line]
    assert found, [(f.rule, f.location.get("source")) for f in result.findings]
    f = found[0]
    assert f.evidence["launches"] == 400
    assert "jax.jit" in f.suggestion and "torch.compile" not in f.suggestion
