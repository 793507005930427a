"""Fixtures for the JAX tests: the example training loop profiled once per session."""

from __future__ import annotations

import pytest

pytest.importorskip("jax")

from jax_helpers import EXAMPLES  # noqa: E402
from program_helpers import run_deepcontext  # noqa: E402


@pytest.fixture(scope="session")
def mlp_profile(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("jax-mlp")
    path = tmp / "mlp.dctx"
    run_deepcontext(
        tmp,
        "-q",
        "-o",
        str(path),
        str(EXAMPLES / "train.py"),
        "--steps",
        "300",
        "--width",
        "384",
        "--batch",
        "256",
    )
    return path
