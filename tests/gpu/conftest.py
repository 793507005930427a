import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="session")
def replayed(tmp_path_factory):
    """fixture name -> (events, loaded profile of its replay)."""
    from deepcontext import reader as profile
    from gpu_replay import DATA, load_events, replay_to_profile

    cache = {}

    def get(name: str):
        if name not in cache:
            src = os.path.join(DATA, f"{name}.jsonl")
            out = str(tmp_path_factory.mktemp("replay") / f"{name}.dctx")
            replay_to_profile(src, out)
            cache[name] = (load_events(src), profile.load(out))
        return cache[name]

    return get
