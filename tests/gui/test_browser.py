"""The GUI in headless Chromium (playwright-core) against the real server on real profiles:
every view, search, focus, hide, sort/expand, source at the hot line, diff, findings; the name
column's width, short file paths, the partial-profile banner; how a merged profile's statistics
and wall time across threads combine; one screenshot per view in tests/gui/screenshots/."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from deepcontext.gui_server import GuiServer

from .conftest import PROGRAM, ROOT, SCREENSHOTS, browser_available, gui_built, run_profiler

why = browser_available()
pytestmark = pytest.mark.skipif(why is not None, reason=why or "")


# A custom analyzer rule (the analyzer's public API) that names square_sum, so the findings view
# has a finding to show and link; a file, as the server's analyzer runs in a child process.
HOT_FUNCTION_RULE = """
from deepcontext.analyzer import Finding, rule


@rule("gui-test-hot-function", "square_sum is hot", needs=("cpu_time",))
def check(q):
    nodes = q.profile.find(name="square_sum")
    if nodes:
        n = max(nodes, key=lambda x: x.inclusive("cpu_time"))
        t = n.inclusive("cpu_time")
        yield Finding(
            summary="square_sum holds most of the CPU time",
            suggestion="vectorize the loop",
            metric="cpu_time",
            time=t,
            saving=t / 2,
            estimate="half of its time",
            node=n.id,
        )
"""


@pytest.fixture
def hot_function_rule(tmp_path) -> str:
    path = tmp_path / "hot_function_rule.py"
    path.write_text(HOT_FUNCTION_RULE)
    return str(path)


def browse(
    script: str, *profiles: str, rules_files: tuple[str, ...] = (), args: tuple[str, ...] = ()
) -> dict:
    """Serves the profiles with the GUI server and runs one of gui/e2e's browser scripts against
    it (screenshots into SCREENSHOTS, then `args`); returns its result line, with no failed
    check."""
    SCREENSHOTS.mkdir(exist_ok=True)
    server = GuiServer(*profiles, rules_files=rules_files).start()
    try:
        r = subprocess.run(
            ["node", script, server.url, str(SCREENSHOTS), *args],
            cwd=ROOT / "gui",
            capture_output=True,
            text=True,
            timeout=300,
        )
    finally:
        server.close()
    out = r.stdout.strip().splitlines()
    assert out, f"no output from the browser script: {r.stderr[-2000:]}"
    result = json.loads(out[-1])
    assert result["failures"] == [], result["failures"]
    assert r.returncode == 0, r.stderr[-2000:]
    return result


def test_every_view_in_a_real_browser(profile_a, profile_b, hot_function_rule):
    assert gui_built(), "the GUI is not built into the package (run scripts/build-gui.sh)"
    result = browse(
        "e2e/views.mjs", str(profile_b), str(profile_a), rules_files=(hot_function_rule,)
    )
    assert len(result["checks"]) >= 30
    for view in [
        "flame",
        "flame-focus",
        "flame-search",
        "top-down",
        "bottom-up",
        "flat",
        "sandwich",
        "source",
        "diff",
        "findings",
    ]:
        assert (SCREENSHOTS / f"{view}.png").stat().st_size > 5000, view


def test_name_column_and_file_paths_in_a_real_browser(deep_profile):
    """The tree tables' name column is half the window by default, resizes by its header's drag
    handle and keeps its width across views and reloads; file paths are short (program-relative,
    `<package>/...`, `<stdlib>/...`) with the full path on hover."""
    assert gui_built(), "the GUI is not built into the package (run scripts/build-gui.sh)"
    result = browse("e2e/names.mjs", str(deep_profile))
    assert len(result["checks"]) == 20
    assert result["widths"]["dragged"] > result["widths"]["default"] >= 600
    for view in ["top-down-names", "top-down-names-wide", "source-paths"]:
        assert (SCREENSHOTS / f"{view}.png").stat().st_size > 5000, view


def test_partial_profile_banner_in_a_real_browser(partial_profile):
    """A checkpoint of a program that did not finish says so above every view."""
    assert gui_built(), "the GUI is not built into the package (run scripts/build-gui.sh)"
    from deepcontext import load

    meta = load(str(partial_profile)).meta
    assert meta["complete"] == "0"
    result = browse("e2e/partial.mjs", str(partial_profile))
    assert len(result["checks"]) >= 10
    assert result["banner"].startswith(
        "Partial profile: the program did not finish; data up to "
        + meta["end_time"].replace("T", " ").replace("Z", " UTC")
    )


REPLAY = ROOT / "tests" / "gpu" / "gpu_replay.py"
EAGER = ROOT / "tests" / "data" / "gpu" / "eager.jsonl"


@pytest.mark.skipif(
    not (REPLAY.exists() and EAGER.exists()), reason="the GPU layer's CUPTI fixtures are absent"
)
def test_gpu_profile_in_a_real_browser(tmp_path):
    """A GPU profile: CUPTI traffic recorded on an H200 (the GPU layer's fixture), replayed
    through the real buffer processing into a .dctx: kernels, operators, derived metrics."""
    assert gui_built(), "the GUI is not built into the package (run scripts/build-gui.sh)"
    out = tmp_path / "gpu.dctx"
    subprocess.run([sys.executable, str(REPLAY), str(EAGER), str(out)], check=True, timeout=120)
    result = browse("e2e/gpu.mjs", str(out))
    assert len(result["checks"]) == 5
    assert (SCREENSHOTS / "gpu-flame.png").stat().st_size > 5000


def format_ns(v: float) -> str:
    """A time as the GUI shows it (gui/src/model.ts formatValue, unit ns)."""
    for scale, unit in ((1e9, "s"), (1e6, "ms"), (1e3, "µs")):
        if abs(v) >= scale:
            return f"{v / scale:.{0 if abs(v) >= 100 * scale else 2}f} {unit}"
    return f"{v:.0f} ns"


@pytest.fixture(scope="session")
def merged_profile(work_dir, profile_a, profile_b):
    """Two real runs of programs/work.py merged with `deepcontext merge`."""
    out = work_dir / "merged.dctx"
    cmd = [sys.executable, "-m", "deepcontext", "merge", "-q", "-o", str(out)]
    subprocess.run([*cmd, str(profile_a), str(profile_b)], check=True, timeout=120)
    return out


def test_merged_statistics_in_a_real_browser(merged_profile):
    """A merge's cpu_time:max is a statistic across the inputs: the root shows the stored value
    (not the nodes' maxima added up through the spliced import frames), with no % column."""
    assert gui_built(), "the GUI is not built into the package (run scripts/build-gui.sh)"
    from deepcontext import load

    p = load(str(merged_profile))
    stored = p.root.inclusive("cpu_time:max")
    assert any(f.import_system() for f in p.frames.values())  # the view splices frames out
    result = browse("e2e/combine.mjs", str(merged_profile), args=("merged",))
    assert len(result["checks"]) == 9
    assert result["root_value"] == stored
    assert result["root_text"] == format_ns(stored)
    assert f"total cpu_time:max {format_ns(stored)}" in result["status"]


def test_wall_time_of_two_threads_in_a_real_browser(tmp_path):
    """Two threads that work at once: wall_time's total is the run's elapsed time (meta
    elapsed_ns), not the threads' wall times added up; each thread keeps its own."""
    assert gui_built(), "the GUI is not built into the package (run scripts/build-gui.sh)"
    from deepcontext import load

    out = run_profiler(tmp_path / "threads.dctx", str(PROGRAM.parent / "threads.py"))
    elapsed = float(load(str(out)).meta["elapsed_ns"])
    result = browse("e2e/combine.mjs", str(out), args=("threads",))
    assert len(result["checks"]) == 9
    assert result["root_value"] == elapsed
    assert result["root_text"] == format_ns(elapsed)
    assert f"total wall_time {format_ns(elapsed)}" in result["status"]
    threads = result["thread_values"]
    assert len(threads) >= 2 and all(0 < t <= elapsed for t in threads)
    assert sum(threads) > 1.5 * elapsed  # they ran at the same time
