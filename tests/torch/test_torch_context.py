"""PyTorch operator context, backward attribution, module paths, memory, forks, coexistence.

Every test runs a real program under `deepcontext run` and reads the profile it wrote."""

from __future__ import annotations

import glob
import os
import subprocess
import sys

import deepcontext.reader as dprof
import pytest
from program_helpers import line_of, write_program
from torch_helpers import EXAMPLES, has_line, run_deepcontext, user_line

TRAIN = EXAMPLES / "train.py"
MODEL = EXAMPLES / "model.py"


def _index(path, pred) -> int:
    for i, f in enumerate(path):
        if pred(f):
            return i
    return -1


def test_forward_path_and_backward_under_forward_line(torch_example_profiles):
    p = dprof.load(torch_example_profiles["mlp"])
    step_line = line_of(TRAIN, "out = model(x)")
    fc1_line = line_of(MODEL, "x = self.act(self.fc1(x))")

    # train.py:<step line> -> model.py:<forward line> -> aten::linear -> aten::addmm
    fwd = [
        n
        for n in p.find("aten::addmm")
        if has_line(n, "train.py", step_line) and has_line(n, "model.py", fc1_line)
    ]
    assert fwd, "no aten::addmm under train.py:model(x) -> model.py:fc1 line"
    path = fwd[0].path()
    i_train = _index(path, lambda f: f.file.endswith("train.py") and f.line == step_line)
    i_model = _index(path, lambda f: f.file.endswith("model.py") and f.line == fc1_line)
    i_linear = _index(path, lambda f: f.name == "aten::linear")
    assert 0 <= i_train < i_model < i_linear == len(path) - 2
    assert fwd[0].inclusive("op_count") >= 20  # one per step at least

    # AddmmBackward0 (with its aten children) under the same forward line, marked backward.
    bwd = [n for n in p.find("AddmmBackward0") if has_line(n, "model.py", fc1_line)]
    assert bwd, "AddmmBackward0 is not under model.py's fc1 line"
    node = bwd[0]
    assert node.parent.frame.kind == "backward"
    assert node.parent.parent.frame.name in ("aten::addmm", "aten::linear")
    kids = {c.frame.name for c in node.children}
    assert "aten::mm" in kids, kids
    assert node.inclusive("op_time") > 0
    assert node.exclusive("op_count") >= 20


def test_operator_time_sits_under_user_lines(torch_example_profiles):
    p = dprof.load(torch_example_profiles["mlp"])
    total = p.total("op_time")
    assert total > 0
    under = sum(n.exclusive("op_time") for n in p.nodes() if user_line(n))
    assert under / total >= 0.95, f"only {under / total:.1%} of operator time under a user line"
    # Every backward op is attributed under a forward op, none is left at the engine's frames.
    matched = int(p.meta.get("torch_backward_matched", "0"))
    unmatched = int(p.meta.get("torch_backward_unmatched", "0"))
    assert matched > 0 and unmatched <= matched * 0.05, (matched, unmatched)


def test_module_paths(torch_example_profiles):
    p = dprof.load(torch_example_profiles["mlp"])
    modules = {n.frame.name for n in p.find(kind="module")}
    assert {"model.fc1", "model.fc2", "model.head", "loss_fn"} <= modules, modules
    fc1 = p.find("model.fc1", kind="module")
    assert any(c.frame.name == "aten::linear" for n in fc1 for c in n.children)
    # the module frame sits below the Python line that called it
    forward_line = line_of(MODEL, "x = self.act(self.fc1(x))")
    assert all(has_line(n, "model.py", forward_line) for n in fc1)


def test_index_backward_under_indexing_line(torch_example_profiles):
    p = dprof.load(torch_example_profiles["gather"])
    index_line = line_of(MODEL, "rows = self.table[idx]")
    nodes = [n for n in p.find("IndexBackward0") if has_line(n, "model.py", index_line)]
    assert nodes, "IndexBackward0 is not under the line that did the indexing"
    below = {d.frame.name for n in nodes for d in n.walk()}
    assert below & {"aten::index_put_", "aten::_index_put_impl_"}, below
    assert all(n.parent.frame.kind == "backward" for n in nodes)
    fwd = [n for n in p.find("aten::index") if has_line(n, "model.py", index_line)]
    assert fwd


MEMORY_PROGRAM = """
import torch

def make():
    big = torch.ones(48 << 20, dtype=torch.uint8)  # BIG
    return int(big[0])

for _ in range(3):
    make()
small = torch.ones(16)  # SMALL
"""


def test_large_allocation_is_that_lines_peak(tmp_path):
    prog = write_program(tmp_path, MEMORY_PROGRAM)
    out = tmp_path / "mem.dctx"
    run_deepcontext(tmp_path, "-q", "-o", str(out), str(prog))
    p = dprof.load(out)
    big_line = line_of(prog, "# BIG")
    lines = [n for n in p.find(file="prog.py", kind="python", line=big_line)]
    assert lines
    peak = max(n.inclusive("peak_bytes") for n in lines)
    assert peak >= 48 << 20, peak
    assert sum(n.inclusive("alloc_bytes") for n in lines) >= 3 * (48 << 20)
    assert sum(n.inclusive("alloc_count") for n in lines) >= 3
    # the allocation sits at the operator that made it
    ops = [n for n in p.nodes() if n.frame.kind == "operator" and has_line(n, "prog.py", big_line)]
    assert max(n.exclusive("peak_bytes") for n in ops) >= 48 << 20
    small_line = line_of(prog, "# SMALL")
    small = p.find(file="prog.py", kind="python", line=small_line)
    assert small and max(n.inclusive("peak_bytes") for n in small) < 1 << 20


def test_input_shapes(tmp_path):
    prog = write_program(
        tmp_path,
        """
        import torch
        m = torch.nn.Linear(64, 16)
        for b in (32, 8):
            m(torch.randn(b, 64))  # CALL
        """,
    )
    out = tmp_path / "shapes.dctx"
    run_deepcontext(tmp_path, "-q", "--shapes", "-o", str(out), str(prog))
    p = dprof.load(out)
    shapes = sorted(n.props.get("input_shapes", "") for n in p.find("aten::linear"))
    assert len(shapes) == 2, shapes
    assert (
        "[32, 64] Float" in shapes[0]
        and "[8, 64] Float" in shapes[1]
        or ("[8, 64] Float" in shapes[0] and "[32, 64] Float" in shapes[1])
    ), shapes


@pytest.mark.parametrize("mode", ["off", "profile"])
def test_dataloader_workers_fork(tmp_path, mode):
    out = tmp_path / "dl.dctx"
    proc = run_deepcontext(
        tmp_path,
        "-q",
        "--fork-children",
        mode,
        "-o",
        str(out),
        str(TRAIN),
        "--workers",
        "2",
        "--steps",
        "12",
        timeout=240,
    )
    assert "12 steps" in proc.stdout
    p = dprof.load(out)
    assert p.meta.get("complete") == "1"
    assert p.find("aten::addmm")
    workers = sorted(glob.glob(str(tmp_path / "dl.*.dctx")))
    if mode == "off":
        assert workers == []
        return
    assert len(workers) >= 2, workers
    for w in workers:
        wp = dprof.load(w)
        # a worker runs the dataset's __getitem__ (torch.randn): its operators are there
        assert wp.find("aten::randn") or wp.find("aten::normal_"), w


COEXIST_PROGRAM = """
import torch
from torch.profiler import ProfilerActivity, profile

m = torch.nn.Linear(64, 64)
x = torch.randn(32, 64)
with profile(activities=[ProfilerActivity.CPU], profile_memory=True, with_stack=WITH_STACK) as prof:
    for _ in range(5):
        m(x).sum().backward()  # INSIDE
events = prof.key_averages()
names = {e.key for e in events}
assert "aten::addmm" in names, names
assert any(e.cpu_memory_usage != 0 for e in events)
print("TORCH_PROFILER_OK")
after = torch.ones(32 << 20, dtype=torch.uint8)  # AFTER
m(x).sum().backward()  # AGAIN
"""


@pytest.mark.parametrize("with_stack", [False, True])
def test_coexists_with_torch_profiler(tmp_path, with_stack):
    prog = write_program(tmp_path, COEXIST_PROGRAM.replace("WITH_STACK", str(with_stack)))
    out = tmp_path / "co.dctx"
    proc = run_deepcontext(tmp_path, "-q", "-o", str(out), str(prog))
    assert "TORCH_PROFILER_OK" in proc.stdout
    p = dprof.load(out)
    inside = line_of(prog, "# INSIDE")
    assert [n for n in p.find("aten::addmm") if has_line(n, "prog.py", inside)]
    assert [n for n in p.find("AddmmBackward0") if has_line(n, "prog.py", inside)]
    # memory attribution resumes once torch.profiler has stopped, and we said what we paused
    after = p.find(file="prog.py", kind="python", line=line_of(prog, "# AFTER"))
    assert after and max(n.inclusive("peak_bytes") for n in after) >= 32 << 20
    assert any("torch.profiler" in note for note in p.notes), p.notes


FLAT_PROGRAM = """
import ctypes, sys, torch
sys.path.insert(0, EXAMPLES)
import train
from deepcontext import session, torch_support

session.start("flat.dctx", checkpoint_s=0, gpu=False)
torch.manual_seed(0)
model = train.make_model("mlp")
opt = torch.optim.SGD(model.parameters(), lr=0.01)
loss_fn = torch.nn.CrossEntropyLoss()
x, y = torch.randn(16, 256), torch.randint(0, 10, (16,))
from deepcontext import _core
counts = []
for step in range(400):
    train.train_step(model, opt, loss_fn, x, y)
    if step in (49, 399):
        session.flush()
        import deepcontext.reader as P
        counts.append((len(P.load("flat.dctx")), torch_support._lib.dctx_torch_live_allocations()))
session.stop()
print("COUNTS", counts)
"""


def test_tree_and_tracking_do_not_grow_with_steps(tmp_path):
    prog = write_program(tmp_path, FLAT_PROGRAM.replace("EXAMPLES", repr(str(EXAMPLES))))
    proc = subprocess.run(
        [sys.executable, str(prog)], cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("COUNTS")][0]
    (n50, live50), (n400, live400) = eval(line.split(" ", 1)[1])
    assert n400 <= n50 * 1.02 + 10, (n50, n400)  # CPU samples may still find a new line or two
    assert live400 <= live50 + 16, (live50, live400)


def test_adapter_builds_on_first_use_into_cache(tmp_path):
    code = (
        "import ctypes, torch\n"
        "from deepcontext import torch_support as ts\n"
        "p = ts.build_adapter()\n"
        "lib = ctypes.CDLL(p)\n"
        "lib.dctx_torch_built_for.restype = ctypes.c_char_p\n"
        "assert lib.dctx_torch_built_for().decode() == torch.__version__\n"
        "print(p)\n"
    )
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path)}
    runs = [
        subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300
        )
        for _ in range(2)
    ]
    for r in runs:
        assert r.returncode == 0, r.stderr
    first, second = runs
    path = first.stdout.strip()
    assert path.startswith(str(tmp_path / "deepcontext" / "torch-adapter-"))
    assert first.stderr.count("compiling the PyTorch adapter") == 1
    assert "compiling" not in second.stderr and second.stdout.strip() == path


THREAD_PROGRAM = """
import threading
import torch

m = torch.nn.Linear(32, 32)
out = {}

def forward():
    out["y"] = m(torch.randn(8, 32))  # FORWARD

t = threading.Thread(target=forward, name="fwd")
t.start()
t.join()
out["y"].sum().backward()  # BACKWARD
"""


def test_backward_on_another_thread_goes_under_its_forward(tmp_path):
    prog = write_program(tmp_path, THREAD_PROGRAM)
    out = tmp_path / "thr.dctx"
    run_deepcontext(tmp_path, "-q", "-o", str(out), str(prog))
    p = dprof.load(out)
    fwd_line = line_of(prog, "# FORWARD")
    nodes = [n for n in p.find("AddmmBackward0") if has_line(n, "prog.py", fwd_line)]
    assert nodes and nodes[0].parent.frame.kind == "backward"
    # the engine's own frames stay under the line that called backward()
    bwd_line = line_of(prog, "# BACKWARD")
    engine = [n for n in p.find(regex=r"^autograd::engine::evaluate_function: AddmmBackward0")]
    assert engine and all(has_line(n, "prog.py", bwd_line) for n in engine)


def test_flags_turn_parts_off(tmp_path):
    prog = write_program(tmp_path, MEMORY_PROGRAM)
    out = tmp_path / "off.dctx"
    run_deepcontext(tmp_path, "-q", "--no-torch-memory", "--no-modules", "-o", str(out), str(prog))
    p = dprof.load(out)
    assert p.find("aten::ones") and not p.find(kind="module")
    assert "peak_bytes" not in p.metric_names() or p.total("peak_bytes") == 0
    out2 = tmp_path / "none.dctx"
    run_deepcontext(tmp_path, "-q", "--no-torch", "-o", str(out2), str(prog))
    assert not dprof.load(out2).find("aten::ones")


MODULES_PROGRAM = """
import torch
from torch import nn


class Fails(nn.Module):
    def forward(self, x):
        torch.relu(x)
        raise ValueError("no")


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(8, 8) for _ in range(3)])
        self.bad = Fails()

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        try:
            self.bad(x)
        except ValueError:
            pass
        return torch.tanh(x)  # AFTER


net = Net()
for _ in range(20):
    net(torch.randn(4, 8)).sum().backward()
"""


# Module frames come from the Python stack where its frames are read (3.11 and 3.12), else
# from global forward hooks; DEEPCONTEXT_MODULE_HOOKS=1 forces the hooks, so both are tested.
MODULE_MODES = pytest.mark.parametrize("module_mode", ["stack", "hooks"])


def set_module_mode(monkeypatch, mode):
    if mode == "hooks":
        monkeypatch.setenv("DEEPCONTEXT_MODULE_HOOKS", "1")
    else:
        monkeypatch.delenv("DEEPCONTEXT_MODULE_HOOKS", raising=False)


@MODULE_MODES
def test_module_frames_name_list_items_and_unwind_after_an_exception(
    tmp_path, monkeypatch, module_mode
):
    set_module_mode(monkeypatch, module_mode)
    prog = write_program(tmp_path, MODULES_PROGRAM)
    out = tmp_path / "mods.dctx"
    run_deepcontext(tmp_path, "-q", "-o", str(out), str(prog))
    p = dprof.load(out)
    modules = {n.frame.name for n in p.find(kind="module")}
    assert {"net.layers.0", "net.layers.1", "net.layers.2", "net.bad"} <= modules, modules
    relu = [n for n in p.find("aten::relu") if n.parent.frame.kind == "module"]
    assert relu and all(n.parent.frame.name == "net.bad" for n in relu)
    # The module that raised is closed: what its parent runs next is under the parent's path.
    tanh = p.find("aten::tanh")
    assert tanh and all(
        n.parent.frame.kind != "module" or n.parent.frame.name == "net" for n in tanh
    ), [n.parent.frame.name for n in tanh]
    assert all(has_line(n, "prog.py", line_of(prog, "# AFTER")) for n in tanh)
    assert sum(n.exclusive("op_count") for n in tanh) == 20


COMPILE_PROGRAM = """
import torch
import torch._dynamo.utils as du
from torch import nn

model = nn.Sequential(nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 4))
compiled = torch.compile(model, backend="eager")
x = torch.randn(8, 16)
assert torch.allclose(compiled(x), model(x))
print("graph breaks", sum(du.counters["graph_break"].values()))
print("graphs", du.counters["stats"]["unique_graphs"])
"""


@MODULE_MODES
def test_torch_compile_traces_through_the_module_frames(tmp_path, monkeypatch, module_mode):
    # The hooks are C functions that Dynamo cannot trace: while it traces they must do nothing,
    # or every module call would be a graph break and the compiled model would run eagerly.
    # (From the stack there are no hooks at all.)
    set_module_mode(monkeypatch, module_mode)
    prog = write_program(tmp_path, COMPILE_PROGRAM)
    proc = run_deepcontext(tmp_path, "-q", "-o", str(tmp_path / "c.dctx"), str(prog))
    assert "graph breaks 0" in proc.stdout, proc.stdout + proc.stderr[-3000:]
    assert "graphs 1" in proc.stdout, proc.stdout
    p = dprof.load(tmp_path / "c.dctx")
    assert p.meta["complete"] == "1"


@pytest.mark.parametrize(
    "cpu_max, expected",
    [("max 100000\n", None), ("400000 100000\n", 4.0), ("150000 100000\n", 1.5)],
)
def test_cpu_count_honours_cgroup_quota(tmp_path, cpu_max, expected):
    """A container's CPU quota caps the cores the oversubscription rule compares threads with."""
    from deepcontext.torch_support import _usable_cpus

    path = tmp_path / "cpu.max"
    path.write_text(cpu_max)
    visible = len(os.sched_getaffinity(0))
    cores, quota = _usable_cpus(str(path))
    assert quota == expected
    if expected is None:
        assert cores == visible
    else:
        assert cores == min(visible, -(-expected // 1))
    assert _usable_cpus(str(tmp_path / "missing")) == (visible, None)


SCOPED_PROGRAM = """
import torch
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 4))
opt = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=False)
data = DataLoader(TensorDataset(torch.randn(2048, 64), torch.randint(0, 4, (2048,))), batch_size=32)
for epoch in range(3):
    for x, y in data:  # NEXT
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()  # STEP
        with torch.profiler.record_function("user-block"):
            z = torch.relu(x @ x.T).sum()  # INNER
print(float(loss))
"""


def test_record_function_scopes_keep_python_above_their_operators(tmp_path):
    """Inside record_function scopes (the optimizer's, the DataLoader's, the user's own), the
    operators go below the Python lines that call them, and record_function's own frames are not
    ancestors of the work in the scope."""
    prog = write_program(tmp_path, SCOPED_PROGRAM)
    out = tmp_path / "scoped.dctx"
    run_deepcontext(tmp_path, "-q", "--trace", "all", "-o", str(out), str(prog))
    p = dprof.load(out)
    measured = [n for n in p.nodes() if n.exclusive("cpu_time") > 0 or n.exclusive("op_count") > 0]
    assert measured
    for n in measured:
        path = n.path()
        openers = ("record_function.__enter__", "OpOverloadPacket.__call__")
        last_op = max((i for i, f in enumerate(path) if f.kind == "operator"), default=0)
        assert not any(f.kind == "python" and f.name in openers for f in path[:last_op]), [
            f.label() for f in path
        ]
        # No Python frame below an aten operator: Python runs above the operators it calls.
        first_op = _index(path, lambda f: f.kind == "operator" and f.name.startswith("aten::"))
        if first_op >= 0:
            below = [f.label() for f in path[first_op:] if f.kind == "python"]
            assert not below, [f.label() for f in path]

    def scoped_ops(scope: str, op: str) -> list:
        return [
            n
            for n in p.find(op)
            if any(f.kind == "operator" and f.name.startswith(scope) for f in n.path()[:-1])
        ]

    # AdamW's single-tensor path: the scope, then adam.py's lines, then the operator.
    muls = scoped_ops("Optimizer.step#AdamW.step", "aten::mul_")
    assert muls
    for n in muls:
        path = n.path()
        s = _index(path, lambda f: f.name.startswith("Optimizer.step#AdamW.step"))
        assert any(os.path.basename(f.file) == "adam.py" for f in path[s + 1 : -1]), [
            f.label() for f in path
        ]
        assert has_line(n, "prog.py", line_of(prog, "# STEP"))
    # The user's own scope: the line inside it holds the matmul.
    inner = scoped_ops("user-block", "aten::matmul")
    assert inner and all(has_line(n, "prog.py", line_of(prog, "# INNER")) for n in inner)
    # The DataLoader's scope: collation's operator under the DataLoader's Python, under the loop.
    stacks = scoped_ops("enumerate(DataLoader)", "aten::stack")
    assert stacks
    for n in stacks:
        assert has_line(n, "prog.py", line_of(prog, "# NEXT"))
        assert any(os.path.basename(f.file) == "collate.py" for f in n.path()), [
            f.label() for f in n.path()
        ]
