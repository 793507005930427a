"""--native on a jitted training loop: XLA's pool threads are sampled (under the call site) but
never sent the unwinding signal, which aborted the program there (heap corruption)."""

from __future__ import annotations

import deepcontext
from jax_helpers import EXAMPLES, run_deepcontext


def test_native_jitted_training_loop_runs_to_completion(tmp_path):
    out = tmp_path / "native.dctx"
    proc = run_deepcontext(
        tmp_path,
        "-q",
        "--native",
        "-o",
        str(out),
        str(EXAMPLES / "train.py"),
        "--steps",
        "20",
        "--width",
        "384",
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    p = deepcontext.load(str(out))
    assert p.meta["complete"] == "1"
    assert any(n.frame.kind == "native" for n in p.nodes())  # the Python threads' native frames
    pools = [n for n in p.nodes() if n.frame.kind == "thread" and n.frame.name != "MainThread"]
    assert pools and sum(n.inclusive("cpu_time") for n in pools) > 0
