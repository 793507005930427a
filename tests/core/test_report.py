"""`deepcontext report`: its views (top-down, bottom-up, flat) and transforms (--focus, --exclude,
--hide, the import system's frames), checked on the profile of a real program."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from core_helpers import line_of
from program_helpers import run_deepcontext, write_program

PROGRAM = """
import slowmod  # IMPORT

def leaf(n):
    x = 0
    for i in range(n):
        x += i
    return x

def big():
    return leaf(3_000_000)  # BIG

def small():
    return leaf(1_000_000)  # SMALL

big()
small()
"""

MODULE = """
TOTAL = sum(i * i for i in range(1_500_000))  # MODWORK
"""


@pytest.fixture(scope="module")
def profile(tmp_path_factory):
    d = tmp_path_factory.mktemp("report")
    (d / "prog.py").write_text(textwrap.dedent(PROGRAM))
    (d / "slowmod.py").write_text(textwrap.dedent(MODULE))
    out = d / "prog.dctx"
    subprocess.run(
        [sys.executable, "-m", "deepcontext", "run", "-q", "--interval", "1", "-o", str(out)]
        + ["prog.py"],
        cwd=d,
        check=True,
        timeout=120,
    )
    return out


def report(path, *args: str) -> dict:
    r = subprocess.run(
        [sys.executable, "-m", "deepcontext", "report", str(path), "--format", "json", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def nodes(tree: dict, depth: int = 0):
    """(node, parent, depth) for every node of a JSON report tree."""
    stack = [(tree, None, depth)]
    while stack:
        n, p, d = stack.pop()
        yield n, p, d
        stack.extend((c, n, d + 1) for c in n["children"])


def cpu(n: dict, which: str = "inclusive") -> float:
    return n["metrics"]["cpu_time"][which]


def at_line(tree: dict, file: str, marker: str, source: str) -> list[dict]:
    line = line_of(source, marker)
    return [
        n
        for n, _, _ in nodes(tree)
        if n["frame"]["file"].endswith(file) and n["frame"]["line"] == line
    ]


def test_import_system_frames_are_spliced_out_unless_asked_for(profile):
    plain = report(profile, "--metric", "cpu_time")["tree"]
    kept = report(profile, "--metric", "cpu_time", "--import-frames")["tree"]
    system = ("<frozen importlib.", "<frozen zipimport>")
    assert not [n for n, _, _ in nodes(plain) if n["frame"]["file"].startswith(system)]
    assert [n for n, _, _ in nodes(kept) if n["frame"]["file"].startswith(system)]
    # Spliced: the imported module's code is a child of the import line itself.
    (imp,) = at_line(plain, "prog.py", "IMPORT", PROGRAM)
    assert [c for c in imp["children"] if c["frame"]["file"].endswith("slowmod.py")]
    assert sum(cpu(n) for n in at_line(plain, "slowmod.py", "MODWORK", MODULE)) > 0
    # Kept: one or more import-system frames between the two.
    (imp_kept,) = at_line(kept, "prog.py", "IMPORT", PROGRAM)
    assert all(c["frame"]["file"].startswith(system) for c in imp_kept["children"])
    # Splicing moves no time: the import line and the whole profile keep their totals.
    assert cpu(imp) == pytest.approx(cpu(imp_kept))
    assert cpu(plain) == pytest.approx(cpu(kept))


def test_bottom_up_puts_the_callers_under_the_function_that_spent_the_time(profile):
    tree = report(profile, "--metric", "cpu_time", "--view", "bottom-up")["tree"]
    leaves = [n for n in tree["children"] if n["frame"]["name"] == "leaf"]
    assert leaves, [n["label"] for n in tree["children"]]
    callers: dict[str, float] = {}
    for leaf in leaves:
        for c in leaf["children"]:
            callers[c["frame"]["name"]] = callers.get(c["frame"]["name"], 0) + cpu(c)
    assert set(callers) == {"big", "small"}
    # leaf() runs three times as long for big() as for small().
    assert callers["big"] > 1.5 * callers["small"]
    # The first level holds exclusive time only: it sums to the profile's total.
    assert sum(cpu(n) for n in tree["children"]) == pytest.approx(cpu(tree))


def test_flat_rows_hold_each_frame_once_and_sum_to_the_total(profile):
    doc = report(profile, "--metric", "cpu_time", "--view", "flat")
    rows = doc["rows"]
    total = report(profile, "--metric", "cpu_time", "--depth", "0")["tree"]
    assert sum(r["metrics"]["cpu_time"]["exclusive"] for r in rows) == pytest.approx(cpu(total))
    keys = [(r["frame"]["kind"], r["frame"]["file"], r["frame"]["line"], r["label"]) for r in rows]
    assert len(keys) == len(set(keys))
    excl = [r["metrics"]["cpu_time"]["exclusive"] for r in rows]
    assert excl == sorted(excl, reverse=True)
    assert rows[0]["frame"]["name"] in ("leaf", "<genexpr>", "<module>")


def test_focus_keeps_only_the_matching_subtree_and_exclude_splices_frames(profile):
    full = report(profile, "--metric", "cpu_time")["tree"]
    (small,) = at_line(full, "prog.py", "SMALL", PROGRAM)
    focused = report(profile, "--metric", "cpu_time", "--focus", r" small$")["tree"]
    assert cpu(focused) == pytest.approx(cpu(small))
    names = {n["frame"]["name"] for n, _, _ in nodes(focused)}
    assert "big" not in names and "leaf" in names

    spliced = report(profile, "--metric", "cpu_time", "--exclude", r" leaf$")["tree"]
    assert cpu(spliced) == pytest.approx(cpu(full))
    assert "leaf" not in {n["frame"]["name"] for n, _, _ in nodes(spliced)}
    (big_full,) = at_line(full, "prog.py", "BIG", PROGRAM)
    (big,) = at_line(spliced, "prog.py", "BIG", PROGRAM)
    assert cpu(big, "exclusive") == pytest.approx(cpu(big_full))

    unthreaded = report(profile, "--metric", "cpu_time", "--hide", "thread")["tree"]
    assert not [n for n, _, _ in nodes(unthreaded) if n["frame"]["kind"] == "thread"]
    assert cpu(unthreaded) == pytest.approx(cpu(full))


def test_bad_transform_arguments_are_one_line_errors(profile):
    for args in (["--focus", "("], ["--hide", "nonsense"], ["--focus", "no-such-frame-xyz"]):
        r = subprocess.run(
            [sys.executable, "-m", "deepcontext", "report", str(profile), *args],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert r.returncode != 0
        lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
        assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr


def _canonical(tree, mapping, parent, frame, origin) -> dict:
    """A spliced tree as {path of frames: (summed exclusive cpu_time, origin or -1)}: equal for
    two node mappings that build the same tree whatever their node numbering."""
    exc = np.zeros(len(parent))
    keep = mapping >= 0
    np.add.at(exc, mapping[keep], tree.metrics["cpu_time"].exc[keep])
    paths: list[tuple] = [()]
    for j in range(1, len(parent)):
        paths.append(paths[int(parent[j])] + (int(frame[j]),))
    assert len(set(paths)) == len(paths), "two nodes with one path: siblings not merged"
    return {p: (round(float(exc[j]), 3), int(origin[j])) for j, p in enumerate(paths)}


def test_vectorized_splice_matches_the_node_by_node_transform(profile):
    """Tree.transformed splices hidden frames with numpy (`_splice`) unless the tree is deep and
    thin, else node by node (`_remap`); on a real profile both build the same tree, with and
    without siblings that meet and merge."""
    from deepcontext.render import load_tree

    tree = load_tree(str(profile))
    imports = tree.frame_mask(lambda f: f.import_system())
    # Hiding the module's lines and big/small makes leaf()'s lines meet under the thread from
    # both callers: they merge.
    callers = tree.frame_mask(lambda f: f.name in ("<module>", "big", "small"))
    assert imports.any() and callers.any()
    for mask in (imports, callers):
        fast = tree._splice(mask)
        assert fast is not None
        assert _canonical(tree, *fast) == _canonical(tree, *tree._remap(mask, None))
    merged = tree.transformed(hide=callers)
    assert len(merged) < len(tree) - int(callers.sum())  # some nodes merged
    assert merged.metrics["cpu_time"].inc[0] == pytest.approx(tree.metrics["cpu_time"].inc[0])


ESCAPING = """
import time
def work():
    t = time.process_time()
    while time.process_time() - t < 0.3:
        pass
# a name with a terminal escape sequence (set the window title) and a bell
evil = "evil\\x1b]0;pwned\\x07"
work.__code__ = work.__code__.replace(co_name=evil, co_qualname=evil)
work()
"""


def test_text_outputs_escape_control_characters_in_names(tmp_path):
    a = tmp_path / "a.dctx"
    b = tmp_path / "b.dctx"
    run_deepcontext(tmp_path, "-q", "-o", str(a), str(write_program(tmp_path, "x = 1\n", "a.py")))
    run_deepcontext(tmp_path, "-q", "-o", str(b), str(write_program(tmp_path, ESCAPING)))
    outputs = {
        "report": [str(b)],
        "report flat": [str(b), "--view", "flat"],
        "diff": [str(a), str(b)],
    }
    for what, args in outputs.items():
        cmd = [sys.executable, "-m", "deepcontext", what.split()[0], *args]
        text = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
        assert "evil\\x1b]0;pwned\\x07" in text, (what, text)
        assert "\x1b" not in text and "\x07" not in text, what
    # JSON keeps the name as it is
    cmd = [sys.executable, "-m", "deepcontext", "report", str(b), "--format", "json"]
    doc = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    assert '"evil\\u001b]0;pwned\\u0007"' in doc
