"""JAX on XLA:CPU under `deepcontext run`: real runs of the example training loop and of small
programs, read back with deepcontext.reader."""

from __future__ import annotations

import os

import jax
import jax.numpy as jnp
import pytest
from deepcontext import jax_support
from deepcontext.reader import load
from jax_helpers import EXAMPLES, has_line, xla_execution
from program_helpers import line_of, run_deepcontext, write_program

STEP_MARK = "# the jitted step's call site"


def _user(node) -> bool:
    return any(
        f.kind == "python" and os.path.basename(f.file) in ("train.py", "model.py")
        for f in node.path()
    )


def _in_import(node) -> bool:
    return any(f.kind == "python" and f.name == "_find_and_load" for f in node.path())


def test_xla_execution_time_goes_to_the_jitted_call_site(mlp_profile):
    p = load(mlp_profile)
    line = line_of(EXAMPLES / "train.py", STEP_MARK)
    threads = xla_execution(p)
    total = sum(v for _, v in threads)
    assert total > 100e6, f"too little XLA execution time to judge: {total / 1e6:.1f} ms"
    # All of XLA's execution time is under a line of the program: the jitted step's call site,
    # the eager setup op that ran it, or `import jax` (jaxlib's pools starting); none at the root.
    user = sum(v for n, v in threads if _user(n))
    assert user / total >= 0.99, [(n.frame.name, v / 1e6) for n, v in threads if not _user(n)]
    # Apart from jaxlib's start-up, the program's XLA work is its jitted steps (the eager setup
    # is small), and at least 90 % of it is under the line that calls the step, although
    # dispatch is asynchronous (most of a step runs after its call returned).
    run = [(n, v) for n, v in threads if not _in_import(n)]
    run_total = sum(v for _, v in run)
    at_site = sum(v for n, v in run if has_line(n, "train.py", line))
    share = at_site / run_total
    print(
        f"XLA execution cpu_time {total / 1e6:.0f} ms ({user / total:.1%} under a program line); "
        f"after import {run_total / 1e6:.0f} ms, {share:.1%} under train.py:{line}"
    )
    assert share >= 0.90, [
        ([f.name for f in n.path()[-4:-1]], n.frame.name, v / 1e6)
        for n, v in run
        if not has_line(n, "train.py", line)
    ]


def test_each_module_is_recorded_once_at_the_call_site_that_compiled_it(mlp_profile):
    p = load(mlp_profile)
    line = line_of(EXAMPLES / "train.py", STEP_MARK)
    compiles = [
        n
        for n in p.root.walk()
        if n.frame.kind == "scope" and n.frame.name == "xla_compile(jit_train_step)"
    ]
    assert len(compiles) == 1, "many calls, one compilation"
    node = compiles[0]
    assert has_line(node, "train.py", line)
    assert node.props["hlo_module"] == "jit_train_step"
    assert int(node.props["program_id"]) >= 0
    assert int(node.props["hlo_ops_with_source"]) > 5
    assert int(p.meta["jax_compiled_modules"]) >= 1
    assert int(p.meta["jax_hlo_ops"]) > 5
    assert p.meta.get("jax_integration") == "on"


def test_hlo_metadata_names_scopes_and_source_lines():
    @jax.jit
    def f(x, w):
        with jax.named_scope("block"):
            h = jnp.tanh(x @ w)  # the dot's line
        with jax.named_scope("head"):
            return (h * 2.0).sum()

    compiled = f.lower(jnp.ones((8, 16)), jnp.ones((16, 4))).compile()
    ops = jax_support.parse_hlo(compiled.as_text())
    here = os.path.abspath(__file__)
    dot_line = line_of(here, "# the dot's line")
    assert ops, compiled.as_text()[:2000]
    scoped = {k: v for k, v in ops.items() if "/block/" in v[0]}
    assert scoped, ops
    assert any(os.path.abspath(v[1]) == here and v[2] == dot_line for v in scoped.values()), scoped
    assert any("/head/" in v[0] for v in ops.values()), ops
    # Components of the op path, the parenthesised transforms kept whole.
    assert jax_support.split_op_name("jit(step)/transpose(jvp(layer0/sub))/dot_general") == [
        "jit(step)",
        "transpose(jvp(layer0/sub))",
        "dot_general",
    ]


def test_program_id_matches_the_module(tmp_path):
    @jax.jit
    def g(x):
        return x + 1

    compiled = g.lower(jnp.ones(3)).compile()
    mods = compiled.runtime_executable().hlo_modules()
    assert mods and jax_support._program_id(mods[0]) >= 0


def test_jit_forms_keep_working_while_profiled(tmp_path):
    prog = write_program(
        tmp_path,
        """
        import functools
        import jax, jax.numpy as jnp

        class Model:
            def __init__(self):
                self.scale = 3.0

            @functools.partial(jax.jit, static_argnums=0)
            def apply(self, x):
                return x * self.scale

        @jax.jit
        def f(x):
            return jnp.sin(x).sum()

        g = jax.jit(static_argnames="n")(lambda x, n: x * n)
        x = jnp.arange(4.0)
        assert float(f(x)) == float(jnp.sin(x).sum())
        assert f.lower(x).compile() is not None
        assert "sin" in f.lower(x).as_text()
        assert float(Model().apply(x)[1]) == 3.0
        assert float(g(x, n=2)[3]) == 6.0
        assert f.__name__ == "f"
        print("ok", type(f).__name__)
        """,
    )
    proc = run_deepcontext(tmp_path, "-o", str(tmp_path / "p.dctx"), str(prog))
    assert "ok _Jitted" in proc.stdout, proc.stdout + proc.stderr


def test_jax_profiler_alongside_gives_a_message_and_no_crash(tmp_path):
    prog = write_program(
        tmp_path,
        f"""
        import jax, jax.numpy as jnp

        @jax.jit
        def f(x):
            return (x @ x).sum()

        x = jnp.ones((128, 128))
        jax.profiler.start_trace({str(tmp_path / "trace")!r})
        for _ in range(5):
            y = f(x)
        y.block_until_ready()
        jax.profiler.stop_trace()
        with jax.profiler.trace({str(tmp_path / "trace2")!r}):
            f(x).block_until_ready()
        print("done", float(y))
        """,
    )
    out = tmp_path / "p.dctx"
    proc = run_deepcontext(tmp_path, "-o", str(out), str(prog))
    assert "done" in proc.stdout
    assert proc.stderr.count("jax.profiler.start_trace called while deepcontext profiles") == 1
    p = load(out)
    assert any("jax.profiler.start_trace" in n for n in p.notes)
    assert os.listdir(tmp_path / "trace"), "jax.profiler wrote its trace"


def test_no_jax_flag_leaves_jax_alone(tmp_path):
    prog = write_program(
        tmp_path,
        """
        import jax, jax.numpy as jnp
        f = jax.jit(lambda x: x + 1)
        f(jnp.ones(3))
        print(type(f).__name__)
        """,
    )
    out = tmp_path / "p.dctx"
    proc = run_deepcontext(tmp_path, "--no-jax", "-o", str(out), str(prog))
    assert "_Jitted" not in proc.stdout
    p = load(out)
    assert "jax_integration" not in p.meta
    assert not [n for n in p.root.walk() if n.frame.name.startswith("xla_compile(")]


@pytest.mark.parametrize("late", [False, True])
def test_jax_imported_before_or_after_start(tmp_path, late):
    prog = write_program(
        tmp_path,
        f"""
        import deepcontext
        {"import jax" if late else ""}
        path = deepcontext.start({str(tmp_path / "p.dctx")!r})
        import jax, jax.numpy as jnp
        f = jax.jit(lambda x: x * 2)
        for _ in range(3):
            f(jnp.ones(8)).block_until_ready()
        deepcontext.stop()
        """,
    )
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, str(prog)], capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    p = load(tmp_path / "p.dctx")
    assert p.meta.get("jax_integration") == "on"
    assert [n for n in p.root.walk() if n.frame.name == "xla_compile(jit__lambda)"]


def test_xla_cpu_jit_kernels_are_found_and_named_after_hlo_ops():
    """XLA:CPU registers its JIT-compiled kernels through the GDB JIT interface; their symbols
    are HLO instruction names, which the module's metadata turns into op paths and lines."""
    syms = jax_support.JitSymbols.find()
    assert syms is not None, "no __jit_debug_descriptor in jaxlib"
    syms.refresh()  # what earlier tests compiled

    @jax.jit
    def fused(x):
        with jax.named_scope("scoped_block"):
            return jnp.tanh(x * 3.0 + 1.0)  # the fused line

    compiled = fused.lower(jnp.ones((4096,))).compile()
    mod = compiled.runtime_executable().hlo_modules()[0]
    info = jax_support.ModuleInfo(mod.name, 0, jax_support.parse_hlo(mod.to_string()))
    new = syms.refresh(info)
    assert new, "no JIT kernels registered for the compiled module"
    named = [r for r in new if syms.ops.get((info.name, r[2]))]
    assert named, (new, sorted(info.ops))
    start, end, name, module = named[0]
    mod_name, sym, op = syms.resolve((start + end) // 2)
    assert (mod_name, sym) == (info.name, name)
    assert "scoped_block" in op[0]
    assert op[2] == line_of(__file__, "# the fused line")
    assert syms.resolve(end + 10**9) is None


def test_jit_kernel_table_gives_the_op_path_and_hlo_op(tmp_path):
    """The native table the core's unwinder asks for pcs in JIT code (libdeepcontext_jax.so)."""
    lib = jax_support.jax_library()
    if lib is None:
        pytest.skip("this build has no libdeepcontext_jax.so")
    prog = write_program(
        tmp_path,
        """
        import ctypes, deepcontext
        from deepcontext import jax_support
        deepcontext.start(OUT_PATH, native=True)
        import jax, jax.numpy as jnp

        @jax.jit
        def f(x):
            with jax.named_scope("jit_scope"):
                return jnp.tanh(x * 3.0 + 1.0)  # kernel line

        f(jnp.ones((4096,))).block_until_ready()
        syms, lib = jax_support._jit_symbols, jax_support.jax_library()
        info = [m for m in jax_support.modules() if m.name == "jit_f"][0]
        hits = [r for r in syms.ranges if r[3] == "jit_f" and info.chains.get(r[2])]
        assert hits, syms.ranges
        start, end, name, _ = hits[0]
        out = (ctypes.c_uint32 * 32)()
        n = lib.dctx_jax_lookup((start + end) // 2, out, 32)
        assert list(out[:n]) == info.chains[name], (list(out[:n]), info.chains[name])
        assert lib.dctx_jax_lookup(end + 10**9, out, 32) == 0
        print("op", info.ops[name][0], info.ops[name][2])
        deepcontext.stop()
        """.replace("OUT_PATH", repr(str(tmp_path / "p.dctx"))),
    )
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, str(prog)], capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "jit_scope" in proc.stdout
    assert f" {line_of(prog, '# kernel line')}" in proc.stdout
    assert "jax_cpu_jit_frames" in load(tmp_path / "p.dctx").meta


def _core_has_symbolizer() -> bool:
    import ctypes

    from deepcontext import _core

    return hasattr(ctypes.CDLL(_core.library_path()), "dctx_register_symbolizer")


@pytest.mark.skipif(
    not _core_has_symbolizer() or jax_support.jax_library() is None,
    reason="the core has no dctx_register_symbolizer (src/frameworks/jax/core-symbolizer.patch)",
)
def test_native_samples_in_xla_cpu_kernels_get_op_path_and_hlo_op(tmp_path):
    prog = write_program(
        tmp_path,
        """
        import time
        import jax, jax.numpy as jnp

        @jax.jit
        def f(x):
            with jax.named_scope("heavy_block"):
                for _ in range(30):
                    x = jnp.sin(x) * 1.0001 + jnp.cos(x)  # the fused line
                return x

        x = jnp.ones((1000000,))
        f(x).block_until_ready()
        t = time.time()
        while time.time() - t < 2:
            f(x).block_until_ready()  # call line
        """,
    )
    out = tmp_path / "p.dctx"
    run_deepcontext(tmp_path, "--native", "-o", str(out), str(prog))
    p = load(out)
    assert p.meta.get("jax_cpu_jit_frames") == "JIT kernels named after their HLO op"
    fused, call = line_of(prog, "# the fused line"), line_of(prog, "# call line")
    hlo = [n for n in p.root.walk() if n.frame.kind == "hlo_op" and n.frame.line == fused]
    assert hlo, "no sample named after the fused kernel's HLO op"
    at_call = [n for n in hlo if has_line(n, "prog.py", call)]
    assert sum(n.inclusive("cpu_time") for n in at_call) > 100e6
    path = at_call[0].path()
    ops = [f.name for f in path if f.kind == "jax_op"]
    assert ops[:2] == ["jit(f)", "heavy_block"], ops
    assert any(f.kind == "thread" for f in path)
