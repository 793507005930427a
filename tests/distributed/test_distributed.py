"""Distributed training on CPU (gloo): per-rank profiles under `deepcontext run -- torchrun` and
mp.spawn, collectives with call sites, bytes and waits, merge across ranks, and the straggler rule.

One 2-rank torchrun job of examples/distributed/train_ddp.py with rank 1 sleeping in its input
pipeline is profiled once (module fixture); the tests read its real profiles."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
if not torch.distributed.is_available():
    pytest.skip("torch.distributed is not available", allow_module_level=True)

from deepcontext.distributed import rank_output  # noqa: E402
from deepcontext.reader import load  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "distributed" / "train_ddp.py"
STEPS = 12
HIDDEN = 256
LAYERS = 2
STRAGGLER_MS = 40


def _env() -> dict:
    env = dict(os.environ)
    env.setdefault("OMP_NUM_THREADS", "1")
    return env


def _deepcontext(cwd, *args, timeout=240):
    proc = subprocess.run(
        [sys.executable, "-m", "deepcontext", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=_env(),
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


def _line(marker: str, path: Path = EXAMPLE) -> int:
    for i, text in enumerate(path.read_text().splitlines(), 1):
        if marker in text:
            return i
    raise AssertionError(marker)


def _at_line(node, line: int, file: str = "train_ddp.py") -> bool:
    return any(
        f.kind == "python" and os.path.basename(f.file) == file and f.line == line
        for f in node.path()
    )


def _nodes(prof, name: str):
    return [n for n in prof.nodes() if n.frame.name == name]


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    """deepcontext run -- torchrun --nproc_per_node 2 train_ddp.py --straggler-rank 1, merged."""
    tmp = tmp_path_factory.mktemp("ddp")
    torchrun = Path(sys.executable).with_name("torchrun")
    launcher = (
        [str(torchrun)] if torchrun.exists() else [sys.executable, "-m", "torch.distributed.run"]
    )
    run = _deepcontext(
        tmp,
        "run",
        "-o",
        "ddp.dctx",
        "--",
        *launcher,
        "--standalone",
        "--nproc_per_node",
        "2",
        str(EXAMPLE),
        "--steps",
        str(STEPS),
        "--warmup",
        "0",
        "--hidden",
        str(HIDDEN),
        "--layers",
        str(LAYERS),
        "--straggler-rank",
        "1",
        "--straggler-ms",
        str(STRAGGLER_MS),
    )
    ranks = [tmp / "ddp.rank0-of2.dctx", tmp / "ddp.rank1-of2.dctx"]
    merged = tmp / "ddp.merged.dctx"
    if all(r.exists() for r in ranks):
        _deepcontext(tmp, "merge", "-q", ranks[0].name, ranks[1].name, "-o", merged.name)
    return {"dir": tmp, "run": run, "ranks": ranks, "merged": merged}


def test_rank_output_names():
    assert rank_output("/a/x.dctx", 1, 4) == "/a/x.rank1-of4.dctx"
    assert rank_output("/a/x", 0, 2) == "/a/x.rank0-of2.dctx"
    assert rank_output("/a/x.rank3-of4.dctx", 1, 4) == "/a/x.rank3-of4.dctx"


def test_each_rank_writes_its_profile_with_rank_metadata(job):
    assert (job["dir"] / "ddp.dctx").exists(), job["run"].stderr  # the launcher's own profile
    for r, path in enumerate(job["ranks"]):
        assert path.exists(), job["run"].stderr
        meta = load(str(path)).meta
        assert meta["rank"] == str(r)
        assert meta["world_size"] == "2"
        assert meta["local_rank"] == str(r)
        assert meta["host"]
        assert meta["dist_backend"] == "gloo"
        assert meta["complete"] == "1"
        summary = json.loads(meta["distributed"])
        assert summary["rank"] == str(r)
        assert summary["by_collective"]["ddp_all_reduce"]["comm_calls"] == STEPS
    assert "merge them with: deepcontext merge" in job["run"].stderr


def test_collective_call_sites_types_and_bytes(job):
    prof = load(str(job["ranks"][0]))
    grad_bytes = 4 * (LAYERS * (HIDDEN * HIDDEN + HIDDEN) + HIDDEN * 10 + 10)
    # the loss all-reduce in the loop: call site, calls, 4 bytes each, its blocking wait below it
    [ar] = [
        n
        for n in _nodes(prof, "dist.all_reduce")
        if _at_line(n, _line("dist.all_reduce(loss, op=op)"))
    ]
    assert ar.frame.kind == "operator"
    assert ar.inclusive("comm_calls") == STEPS
    assert ar.inclusive("comm_bytes") == 4 * STEPS
    assert ar.inclusive("comm_time") > 0
    assert any(c.frame.name == "c10d::allreduce_" for c in ar.walk())
    waits = [c for c in ar.walk() if c.frame.name == "dist.wait"]
    assert waits and sum(w.exclusive("comm_wait_time") for w in waits) > 0
    # the other collectives once each, with their message sizes
    for name, line_marker, nbytes in (
        ("dist.all_gather", "dist.all_gather(", 2 * 1024 * 4),
        ("dist.broadcast", "dist.broadcast(", 1024 * 4),
        ("dist.reduce_scatter_tensor", "dist.reduce_scatter_tensor(", 1024 * 4),
        ("dist.barrier", "dist.barrier()", 0),
    ):
        [n] = [n for n in _nodes(prof, name) if _at_line(n, _line(line_marker))]
        assert n.inclusive("comm_calls") == 1, name
        assert n.inclusive("comm_bytes") == nbytes, name
    # DDP's bucketed all-reduce: c10d ops in the backward of the parameters ...
    ddp_ops = [
        n
        for n in _nodes(prof, "c10d::allreduce_")
        if _at_line(n, _line("loss.backward()"))
        and not any(f.name == "dist.all_reduce" for f in n.path())
    ]
    assert ddp_ops and sum(n.exclusive("op_count") for n in ddp_ops) >= STEPS
    # ... and the wait for the buckets, under the backward call site, with the gradient bytes
    [ddp] = _nodes(prof, "dist.ddp_wait")
    assert _at_line(ddp, _line("loss.backward()"))
    assert ddp.inclusive("comm_calls") == STEPS
    assert ddp.inclusive("comm_bytes") == STEPS * grad_bytes
    assert ddp.inclusive("comm_wait_time") > 0


def test_the_other_rank_waits_for_the_straggler(job):
    w0, w1 = (load(str(p)).total("comm_wait_time") for p in job["ranks"])
    # rank 1 sleeps STRAGGLER_MS per step: rank 0 waits for it in DDP's all-reduce
    assert w0 - w1 > 0.5 * STEPS * STRAGGLER_MS * 1e6, (w0, w1)
    ddp0 = _nodes(load(str(job["ranks"][0])), "dist.ddp_wait")[0]
    assert ddp0.inclusive("wall_time") > 0  # the samples of the wait land in its frame


def test_merge_keeps_ranks_and_sums(job):
    merged = load(str(job["merged"]))
    assert merged.meta["merged_count"] == "2"
    labels = [i["label"] for i in json.loads(merged.meta["merged_inputs"])]
    assert labels == ["rank 0", "rank 1"]
    ranks = [load(str(p)) for p in job["ranks"]]
    for m in ("comm_bytes", "comm_calls", "comm_wait_time"):
        assert merged.total(m) == pytest.approx(sum(r.total(m) for r in ranks)), m
    [ddp] = _nodes(merged, "dist.ddp_wait")
    assert ddp.inclusive("comm_wait_time:max") == pytest.approx(
        max(_nodes(r, "dist.ddp_wait")[0].inclusive("comm_wait_time") for r in ranks)
    )


def _analyze(cwd, path):
    proc = _deepcontext(cwd, "analyze", str(path), "--format", "json", "--rule", "rank-straggler")
    return json.loads(proc.stdout)


def test_analyzer_names_the_straggler_and_its_slow_path(job):
    out = _analyze(job["dir"], job["merged"].name)
    [f] = [f for f in out["findings"] if f["rule"] == "rank-straggler"]
    assert f["evidence"]["straggler_rank"] == "rank 1"
    assert f["evidence"]["slow_path_from"] == "per-rank profiles"
    src = f["location"]["source"]
    assert os.path.basename(src["file"]) == "train_ddp.py"
    assert src["line"] == _line("time.sleep(")
    assert "rank 1 is a straggler" in f["summary"]
    assert f["evidence"]["waits"]["rank 0"] > f["evidence"]["waits"]["rank 1"]


def test_analyzer_without_the_rank_profiles(job, tmp_path):
    shutil.copy(job["merged"], tmp_path / "m.dctx")
    out = _analyze(tmp_path, "m.dctx")
    [f] = [f for f in out["findings"] if f["rule"] == "rank-straggler"]
    assert f["evidence"]["straggler_rank"] == "rank 1"
    assert f["evidence"]["slow_path_from"].startswith("merged maxima")
    assert f["location"]["source"]["line"] == _line("time.sleep(")


def test_single_rank_profile_is_not_a_straggler_case(job):
    out = _analyze(job["dir"], job["ranks"][0].name)
    assert "rank-straggler" in [s["rule"] for s in out["rules_skipped"]]


def test_communication_bound_only_where_every_rank_communicates(job):
    def comm_bound(path):
        proc = _deepcontext(
            job["dir"], "analyze", path, "--format", "json", "--rule", "communication-bound"
        )
        return [
            f for f in json.loads(proc.stdout)["findings"] if f["rule"] == "communication-bound"
        ]

    # the straggler itself hardly waits: the merged job is not communication-bound
    assert comm_bound(job["merged"].name) == []
    # rank 0 alone mostly waits; its finding says a single profile cannot tell why
    [f] = comm_bound(job["ranks"][0].name)
    assert f["evidence"]["comm_share"]["rank 0"] >= 0.3
    assert f["location"]["path"][-1] == "dist.ddp_wait"
    assert "merge the ranks' profiles" in f["suggestion"]


SPAWN = """
import os, socket, sys
import torch, torch.distributed as dist, torch.multiprocessing as mp

class Scale(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.ps = torch.nn.ParameterList([torch.zeros(2048) for _ in range(96)])

    def forward(self, x):
        return x * torch.stack([p.sum() for p in self.ps]).sum()

def work(i, world, port):
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=i, world_size=world)
    t = torch.ones(256)
    dist.all_reduce(t)  # SPAWN-ALLREDUCE
    # a communication-bound DDP loop: 96 small gradients, one 8 KB bucket each, and almost no
    # compute: 96 all-reduces per step, latency-bound, which stays so on a loaded 2-core machine
    torch.set_num_threads(1)
    ddp = torch.nn.parallel.DistributedDataParallel(Scale(), bucket_cap_mb=0.008)
    for _ in range(8):
        ddp(torch.randn(1, 1024)).sum().backward()
    # FSDP2: parameters all-gathered before forward/backward, gradients reduce-scattered
    from torch.distributed.fsdp import fully_shard
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))
    fully_shard(model)
    for _ in range(2):
        model(torch.randn(8, 64)).sum().backward()  # SPAWN-FSDP-STEP
    dist.barrier()
    dist.destroy_process_group()

if __name__ == "__main__":
    s = socket.socket(); s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]; s.close()
    mp.spawn(work, args=(2, port), nprocs=2)
"""


def test_mp_spawn_ranks_profile_themselves(tmp_path):
    prog = tmp_path / "spawn_prog.py"
    prog.write_text(textwrap.dedent(SPAWN))
    _deepcontext(tmp_path, "run", "-q", "-o", "sp.dctx", str(prog))
    line = _line("SPAWN-ALLREDUCE", prog)
    for r in range(2):
        prof = load(str(tmp_path / f"sp.rank{r}-of2.dctx"))
        assert prof.meta["rank"] == str(r) and prof.meta["world_size"] == "2"
        assert prof.meta["dist_launcher"] == "torch.multiprocessing.spawn"
        [ar] = [n for n in _nodes(prof, "dist.all_reduce") if _at_line(n, line, "spawn_prog.py")]
        assert ar.inclusive("comm_bytes") == 256 * 4
        # FSDP's gathers and reduce-scatters, under the training step's line
        step = _line("SPAWN-FSDP-STEP", prog)
        comm = [
            n
            for n in prof.nodes()
            if n.frame.kind == "operator"
            and n.frame.name.startswith("dist.")
            and ("gather" in n.frame.name or "reduce_scatter" in n.frame.name)
            and _at_line(n, step, "spawn_prog.py")
        ]
        names = {n.frame.name for n in comm}
        assert any("gather" in x for x in names) and any("reduce_scatter" in x for x in names), (
            names
        )
        params = 4 * (64 * 64 + 64 + 64 * 4 + 4)
        gathered = sum(n.inclusive("comm_bytes") for n in comm if "gather" in n.frame.name)
        assert gathered >= 2 * params  # the full parameters, at least once per step
    assert (tmp_path / "sp.dctx").exists()
    # both ranks mostly communicate: the merged profile is communication-bound, not a straggler
    ranks = [f"sp.rank{r}-of2.dctx" for r in range(2)]
    _deepcontext(tmp_path, "merge", "-q", *ranks, "-o", "sp.merged.dctx")
    proc = _deepcontext(tmp_path, "analyze", "sp.merged.dctx", "--format", "json")
    found = {f["rule"]: f for f in json.loads(proc.stdout)["findings"]}
    f = found["communication-bound"]
    assert min(f["evidence"]["comm_share"].values()) >= 0.3
    assert f["location"]["path"][-1] == "dist.ddp_wait"


CHILDREN = """
import os, subprocess, sys
code = "import os; print(os.environ.get('DEEPCONTEXT_DIST_CHILD') is not None)"
# not a rank: not profiled
subprocess.run([sys.executable, "-c", "pass"], check=True)
# a rank (RANK/WORLD_SIZE as a launcher sets them) that starts a child of its own
rank_code = (
    "import subprocess, sys, os; "
    "subprocess.run([sys.executable, '-c', 'pass'], check=True, env=dict(os.environ, RANK='0'));"
    "print('grandchild-env', os.environ.get('DEEPCONTEXT_DIST_CHILD') is not None)"
)
subprocess.run([sys.executable, "-c", rank_code], check=True,
               env=dict(os.environ, RANK="0", WORLD_SIZE="1", LOCAL_RANK="0"))
"""


def test_only_ranks_among_children_profile(tmp_path):
    prog = tmp_path / "launch.py"
    prog.write_text(textwrap.dedent(CHILDREN))
    proc = _deepcontext(tmp_path, "run", "-q", "-o", "l.dctx", str(prog), timeout=120)
    assert "grandchild-env False" in proc.stdout
    files = sorted(p.name for p in tmp_path.glob("*.dctx"))
    assert files == ["l.dctx", "l.rank0-of1.dctx"], files
    meta = load(str(tmp_path / "l.rank0-of1.dctx")).meta
    assert meta["rank"] == "0" and meta["world_size"] == "1"
