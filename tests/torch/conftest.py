"""Fixtures for the PyTorch tests."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")

from torch_helpers import EXAMPLES, run_deepcontext  # noqa: E402


@pytest.fixture(scope="session")
def torch_example_profiles(tmp_path_factory):
    """Profiles of the example training loop (MLP and advanced-indexing model), made once."""
    out = {}
    tmp = tmp_path_factory.mktemp("torch-example")
    for model in ("mlp", "gather"):
        path = tmp / f"{model}.dctx"
        run_deepcontext(
            tmp,
            "-q",
            "-o",
            str(path),
            str(EXAMPLES / "train.py"),
            "--model",
            model,
            "--steps",
            "20",
        )
        out[model] = path
    return out
