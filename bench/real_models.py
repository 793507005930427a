"""Real-model yardstick: deepcontext's cost and accuracy on launch-bound PyTorch training steps.

Eight models built from installed packages' configurations (no downloads): GPT-2, BERT and Llama
from transformers, ViT-S/16 and ResNet-50 from timm, a 3-layer GCN from torch_geometric on a
random graph, a DLRM-like model written here, and the GPT-2 under torch.compile. Small batches,
bf16 autocast where it fits, AdamW: eager steps of about 5-20 ms, most of them bound by the CPU's
kernel launches rather than by the GPU, where a profiler's per-operator and per-launch costs show.

Six configurations, every (model, configuration, round) its own process of this script:
none (no profiler), deepcontext (the default session), deepcontext-all (every-op tracing),
torch.profiler (CPU+CUDA activities), floor-observer (an empty global RecordFunction observer:
the floor of any operator tracer) and floor-cupti (deepcontext with only CUPTI's kernel records:
the floor of any kernel tracer). Each run times --steps steps after --warmup steps (a
synchronize after each; also the CPU's issue time, until the step returns) and records its peak
RSS and an RSS curve. The torch.profiler run counts kernels and aten operators per step and the
GPU's kernel time; the deepcontext runs read their profile: total gpu_time, its share under a
source line and an aten operator, its shares by model source line, which the default session's
sampled tracing must match against the every-op run. Step-time ratios are paired against the
`none` run of the same round and model, the configurations' order rotating from round to round,
so that the host's drift cancels. Models run one after the other, so a run cut by --budget-s
still has complete models; --json is rewritten after every run.

    python bench/real_models.py [--models gpt2,bert] [--configs none,deepcontext] [--rounds 1]
        [--steps 50] [--warmup 10] [--budget-s 420] [--json out.json] [--keep DIR] [--list]
        [--device cpu]   (cpu: to try the models and the plumbing where there is no GPU)
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from subprocess import PIPE
from typing import NamedTuple

CONFIGS = (
    "none",
    "deepcontext",
    "deepcontext-all",
    "torch.profiler",
    "floor-observer",
    "floor-cupti",
)
# session.start options of the configurations that run deepcontext
SESSION_OPTIONS: dict[str, dict] = {
    "deepcontext": {},
    "deepcontext-all": {"trace": "all"},
    # CUPTI's kernel records and nothing else: no torch layer, no sampling, no counters
    "floor-cupti": {
        "torch": False,
        "interval_ms": 1e6,
        "wall": False,
        "counters": False,
        "trace": "all",
    },
}
# The deepcontext sessions start BEFORE the warm-up, as `deepcontext run` would: the start-up
# (cuBLAS setup, torch.compile's compilation) and the first steps, which the step-sampled tracing
# traces in full, fall in the warm-up; the profile holds them, the timing leaves them out (only
# the steps after the warm-up are timed). torch.profiler and the two floors start after the
# warm-up, around the timed steps only.
SESSION_BEFORE_WARMUP = ("deepcontext", "deepcontext-all")
WARMUP = 10
STEPS = 50
TOP_LINES = 30
SKIP_RC = 3  # a child's exit status when its model's package is not installed
# GPU-side ranges of record_function scopes: they span kernels and are none themselves
ANNOTATIONS = ("Optimizer.", "Torch-Compiled Region", "CompiledFunction", "ProfilerStep", "## ")


# --------------------------------------------------------------------------------------------
# Models (built in the child). Each builder returns (model on the device, loss(model), autocast).
# --------------------------------------------------------------------------------------------


def build_gpt2(dev: str):
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    cfg = GPT2Config(n_layer=6, n_embd=512, n_head=8, vocab_size=8192, n_positions=128)
    model = GPT2LMHeadModel(cfg).to(dev)
    ids = torch.randint(0, cfg.vocab_size, (4, 128), device=dev)
    return model, lambda m: m(input_ids=ids, labels=ids).loss, True


def build_gpt2_compile(dev: str):
    import torch

    model, loss, amp = build_gpt2(dev)
    return torch.compile(model), loss, amp  # default mode; compiled in the first warm-up step


def build_bert(dev: str):
    import torch
    from transformers import BertConfig, BertForSequenceClassification

    cfg = BertConfig(
        vocab_size=8192,
        hidden_size=512,
        num_hidden_layers=6,
        num_attention_heads=8,
        intermediate_size=2048,
        max_position_embeddings=128,
        num_labels=2,
    )
    model = BertForSequenceClassification(cfg).to(dev)
    ids = torch.randint(0, cfg.vocab_size, (8, 128), device=dev)
    mask = torch.ones_like(ids)
    labels = torch.randint(0, 2, (8,), device=dev)
    return model, lambda m: m(input_ids=ids, attention_mask=mask, labels=labels).loss, True


def build_llama(dev: str):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(
        vocab_size=8192,
        hidden_size=512,
        intermediate_size=1408,
        num_hidden_layers=4,
        num_attention_heads=8,
        num_key_value_heads=2,  # grouped-query attention
        max_position_embeddings=256,
    )
    model = LlamaForCausalLM(cfg).to(dev)
    ids = torch.randint(0, cfg.vocab_size, (4, 128), device=dev)
    return model, lambda m: m(input_ids=ids, labels=ids).loss, True


def _timm_classifier(name: str, batch: int, dev: str):
    import timm
    import torch
    import torch.nn.functional as F

    model = timm.create_model(name, pretrained=False, num_classes=1000).to(dev)
    x = torch.randn(batch, 3, 224, 224, device=dev)
    y = torch.randint(0, 1000, (batch,), device=dev)
    return model, lambda m: F.cross_entropy(m(x), y), True


def build_vit(dev: str):
    return _timm_classifier("vit_small_patch16_224", 8, dev)


def build_convnet(dev: str):
    return _timm_classifier("resnet50", 16, dev)


def build_gnn(dev: str):
    import torch
    import torch.nn.functional as F
    from torch_geometric.nn import GCNConv

    nodes, edges, feats, hidden, classes = 10_000, 100_000, 128, 128, 16

    class GCN(torch.nn.Module):
        def __init__(self):
            super().__init__()
            # cached: the normalised adjacency is computed once (transductive training), so the
            # step has no boolean-mask indexing that waits for the GPU
            sizes = [feats, hidden, hidden, classes]
            self.convs = torch.nn.ModuleList(
                GCNConv(a, b, cached=True) for a, b in zip(sizes[:-1], sizes[1:], strict=True)
            )

        def forward(self, x, edge_index):
            for i, conv in enumerate(self.convs):
                x = conv(x, edge_index)
                if i < len(self.convs) - 1:
                    x = F.dropout(F.relu(x), 0.5, self.training)
            return x

    model = GCN().to(dev)
    x = torch.randn(nodes, feats, device=dev)
    edge_index = torch.randint(0, nodes, (2, edges), device=dev)
    y = torch.randint(0, classes, (nodes,), device=dev)
    train = torch.randperm(nodes, device=dev)[: nodes // 2]  # an index, not a mask: no sync
    # fp32: PyG's scatter aggregation is not autocast-aware, bf16 sums of 10 edges lose digits
    return model, lambda m: F.cross_entropy(m(x, edge_index)[train], y[train]), False


def build_dlrm(dev: str):
    import torch
    import torch.nn.functional as F
    from torch import nn

    tables, rows, dim, dense_in, bag, batch = 8, 100_000, 64, 13, 8, 256

    def mlp(sizes):
        layers: list[nn.Module] = []
        for a, b in zip(sizes[:-1], sizes[1:], strict=True):
            layers += [nn.Linear(a, b), nn.ReLU()]
        return nn.Sequential(*layers[:-1])

    class DLRM(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.ModuleList(nn.EmbeddingBag(rows, dim, mode="sum") for _ in range(tables))
            self.bottom = mlp([dense_in, 512, 256, dim])
            n = tables + 1
            li, lj = torch.triu_indices(n, n, offset=1)  # each pair of features once
            self.register_buffer("li", li)
            self.register_buffer("lj", lj)
            self.top = mlp([dim + n * (n - 1) // 2, 512, 256, 1])

        def forward(self, dense, sparse):
            x = self.bottom(dense)
            feats = torch.stack([x, *(e(s) for e, s in zip(self.emb, sparse, strict=True))], 1)
            dots = torch.bmm(feats, feats.transpose(1, 2))[:, self.li, self.lj]
            return self.top(torch.cat([x, dots], dim=1))

    model = DLRM().to(dev)
    dense = torch.randn(batch, dense_in, device=dev)
    sparse = [torch.randint(0, rows, (batch, bag), device=dev) for _ in range(tables)]
    label = torch.rand(batch, 1, device=dev)

    def loss(m):
        return F.binary_cross_entropy_with_logits(m(dense, sparse).float(), label)

    return model, loss, True


class Model(NamedTuple):
    packages: tuple[str, ...]  # besides torch
    build: Callable[[str], tuple]  # device -> (model, loss(model), autocast)
    what: str


MODELS: dict[str, Model] = {
    "gpt2": Model(
        ("transformers",), build_gpt2, "GPT2LMHeadModel 6x512, vocab 8192, batch 4x128, causal LM"
    ),
    "bert": Model(
        ("transformers",),
        build_bert,
        "BertForSequenceClassification 6x512, batch 8x128, 2 classes",
    ),
    "llama": Model(
        ("transformers",),
        build_llama,
        "LlamaForCausalLM 4x512, 8 heads / 2 KV heads, batch 4x128, causal LM",
    ),
    "vit": Model(("timm",), build_vit, "timm vit_small_patch16_224, batch 8, 1000 classes"),
    "convnet": Model(("timm",), build_convnet, "timm resnet50, batch 16, 1000 classes"),
    "gnn": Model(
        ("torch_geometric",),
        build_gnn,
        "torch_geometric GCN, 3 layers of 128, 10k nodes, 100k random edges (fp32)",
    ),
    "dlrm": Model(
        (),
        build_dlrm,
        "DLRM-like: 8 EmbeddingBag 100k x 64, bottom/top MLPs, dot interaction, batch 256",
    ),
    "gpt2-compile": Model(("transformers",), build_gpt2_compile, "the gpt2 model, torch.compile"),
}


def make_step(name: str, dev: str):
    """The model's training step: forward under autocast, backward, AdamW step, zero_grad."""
    import torch

    torch.manual_seed(0)
    model, loss_fn, amp = MODELS[name].build(dev)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    device_type = "cuda" if dev.startswith("cuda") else "cpu"

    def step():
        with torch.autocast(device_type, dtype=torch.bfloat16, enabled=amp):
            loss = loss_fn(model)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return step


# --------------------------------------------------------------------------------------------
# Measurements (child)
# --------------------------------------------------------------------------------------------


def torch_events(prof) -> dict:
    """Kernels (count, time) and aten operators of a finished torch.profiler, from its raw events:
    GPU user annotations, copies and memsets are not kernels."""
    from torch.autograd import DeviceType

    out = {"kernels": 0, "kernel_ns": 0.0, "copies": 0, "copy_ns": 0.0, "aten_ops": 0}
    for e in prof.profiler.kineto_results.events():
        name = e.name()
        if e.device_type() == DeviceType.CPU:
            out["aten_ops"] += name.startswith("aten::")
            continue
        if e.device_type() != DeviceType.CUDA:
            continue
        if getattr(e, "is_user_annotation", lambda: False)() or name.startswith(ANNOTATIONS):
            continue
        if name.startswith(("Memcpy", "Memset")):
            out["copies"] += 1
            out["copy_ns"] += e.duration_ns()
        else:
            out["kernels"] += 1
            out["kernel_ns"] += e.duration_ns()
    return out


def _short(path: str) -> str:
    """A source file as the tables show it: from the package down, or the last two parts."""
    for marker in ("site-packages/", "dist-packages/"):
        if marker in path:
            return path.split(marker, 1)[1]
    return "/".join(path.split("/")[-2:])


def _meta_value(v: str):
    try:
        return json.loads(v)
    except (TypeError, ValueError):
        return v


def attribution(path: str, not_model: tuple[str, ...], metric: str = "gpu_time") -> dict:
    """What a deepcontext profile says of its kernel time: total, the share under a source line
    and an aten operator, and the shares by model source line (the innermost Python frame of a
    kernel's path outside `not_model`: torch's own package and generated code)."""
    from deepcontext import reader

    prof = reader.load(path)
    out: dict = {
        "profile_mb": os.path.getsize(path) / 2**20,
        "nodes": len(prof),
        "notes": prof.notes,
        # what the step-sampled tracing traced, and its weight (trace_*, steps_*, step_time_*)
        "sampling_meta": {
            k: _meta_value(v)
            for k, v in prof.meta.items()
            if k.startswith(("trace_", "steps_", "step_time_"))
        },
        "gpu_stats": _meta_value(prof.meta.get("gpu_stats", "{}")),
    }
    if "op_count" in prof.metrics:
        out["op_count"] = prof.total("op_count")
    if metric not in prof.metrics:
        out.update(gpu_time_ns=0.0, kernel_ns=0.0, line_and_aten=0.0, line_shares={})
        out["top_lines"] = []
        return out
    total = prof.total(metric)
    kernel = line_and_aten = 0.0
    by_line: dict[str, float] = {}
    for n in prof.nodes():
        t = n.exclusive(metric)
        if not t:
            continue
        if n.frame.kind == "kernel":
            kernel += t
        frames = n.path()
        py = [f for f in frames if f.kind == "python"]
        if py and any(f.kind == "operator" and f.name.startswith("aten::") for f in frames):
            line_and_aten += t
        user = next((f for f in reversed(py) if not f.file.startswith(not_model)), None)
        key = f"{_short(user.file)}:{user.line} {user.name}" if user else "(no model line)"
        by_line[key] = by_line.get(key, 0.0) + t
    shares = sorted(((t / total, k) for k, t in by_line.items()), reverse=True) if total else []
    out.update(
        gpu_time_ns=total,
        kernel_ns=kernel,
        line_and_aten=line_and_aten / total if total else 0.0,
        # every line above 0.01 %, so that a line just outside one run's top 30 still compares
        line_shares={k: s for s, k in shares if s >= 1e-4},
        top_lines=[[k, s] for s, k in shares[:TOP_LINES]],
    )
    return out


def resident_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def child(args) -> int:
    import torch

    cfg, dev = args.config, args.device
    try:
        step = make_step(args.model, dev)
    except ModuleNotFoundError as e:
        if e.name and e.name.split(".")[0] in MODELS[args.model].packages:
            print(f"SKIP {e.name} is not installed", flush=True)
            return SKIP_RC
        raise
    cuda = dev.startswith("cuda")
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    # deepcontext is imported only by the runs that use it
    session = importlib.import_module("deepcontext.session") if cfg in SESSION_OPTIONS else None
    result: dict = {
        "device": torch.cuda.get_device_name(0) if cuda else "cpu",
        "torch": torch.__version__,
        "python": sys.version.split()[0],
        "versions": {
            m: getattr(sys.modules[m], "__version__", "?")
            for m in ("transformers", "timm", "torch_geometric", "deepcontext")
            if m in sys.modules
        },
    }

    if cfg in SESSION_BEFORE_WARMUP:
        session.start(args.output, **SESSION_OPTIONS[cfg])
    for _ in range(args.warmup):
        step()
    sync()

    times: list[float] = []
    cpu_times: list[float] = []  # until step() returns: the CPU's issue time of the step
    rss_curve: list[tuple[int, float]] = []  # (steps done, resident MiB) at each tenth

    def measured():
        for i in range(args.steps):
            t0 = time.perf_counter()
            step()
            t1 = time.perf_counter()
            sync()
            times.append(time.perf_counter() - t0)
            cpu_times.append(t1 - t0)
            if (i + 1) % max(1, args.steps // 10) == 0:
                rss_curve.append((i + 1, resident_mb()))

    prof = None
    if cfg == "torch.profiler":
        from torch.profiler import ProfilerActivity, profile

        acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
        with profile(activities=acts) as prof:
            measured()
    elif cfg == "floor-observer":
        # a global RecordFunction observer that does nothing: what any operator tracer pays
        torch._C._autograd._set_empty_test_observer(True, 1.0)
        measured()
        torch._C._autograd._set_empty_test_observer(False, 1.0)
    elif cfg == "floor-cupti":
        session.start(args.output, **SESSION_OPTIONS[cfg])
        measured()
    else:
        measured()
    if session is not None:
        session.stop()
    # before the profile is read: reading it is ours, not the run's
    result["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    result["rss_curve"] = rss_curve
    result["median_step_s"] = statistics.median(times)
    result["median_cpu_s"] = statistics.median(cpu_times)
    result["steps"] = args.steps
    result["warmup"] = args.warmup
    if prof is not None:
        result.update(torch_events(prof))
    if session is not None:
        result["output"] = args.output
        # the steps the session saw: the warm-up's too when it started before them
        result["session_steps"] = args.steps + (args.warmup if cfg in SESSION_BEFORE_WARMUP else 0)
        tdir = os.path.dirname(torch.__file__)
        # torch's own code and generated code (<eval_with_key>, <string>) are not the model's
        not_model = (tdir + os.sep, os.path.realpath(tdir) + os.sep, "<")
        result.update(attribution(args.output, not_model))
    print("RESULT " + json.dumps(result), flush=True)
    return 0


# --------------------------------------------------------------------------------------------
# Orchestration (parent)
# --------------------------------------------------------------------------------------------


def missing_packages(model: str) -> list[str]:
    """Without importing them (transformers alone takes seconds)."""
    need = ("torch", *MODELS[model].packages)
    return [p for p in need if importlib.util.find_spec(p) is None]


def run_child(args, model: str, cfg: str, rnd: int, tmp: str, timeout: float) -> dict:
    """One run in its own process: its result, or {"skip": why} or {"error": stderr's tail}."""
    out = os.path.join(tmp, f"{model}-{cfg}-r{rnd}.dctx")
    cmd = [sys.executable, os.path.abspath(__file__), "--child", model, "--config", cfg]
    cmd += ["--steps", str(args.steps), "--warmup", str(args.warmup), "--device", args.device]
    cmd += ["--output", out]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}  # no downloads
    t0 = time.monotonic()
    # its own process group: torch.compile's worker processes hold the pipes too, and go with it
    with subprocess.Popen(
        cmd, stdout=PIPE, stderr=PIPE, text=True, env=env, start_new_session=True
    ) as p:
        try:
            stdout, stderr = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            stdout, stderr = p.communicate()
            return {"error": f"timed out after {timeout:.0f} s\n{stderr[-3000:]}"}
    wall = time.monotonic() - t0
    for line in stdout.splitlines():
        if line.startswith("RESULT ") and p.returncode == 0:
            r = json.loads(line[7:])
            r["process_s"] = wall
            if args.keep and "output" in r:
                os.makedirs(args.keep, exist_ok=True)
                shutil.copy(r["output"], os.path.join(args.keep, os.path.basename(out)))
            return r
        if line.startswith("SKIP ") and p.returncode == SKIP_RC:
            return {"skip": line[5:]}
    return {"error": f"exit status {p.returncode}\n{stderr[-3000:]}"}


def report(model: str, cfg: str, rnd: int, r: dict) -> None:
    """One line per child as it ends, so a run cut by a time limit still tells something."""
    if "error" in r or "skip" in r:
        return
    extra = ""
    if "kernels" in r:
        n = r["steps"]
        extra += (
            f", {r['kernels'] / n:.0f} kernels and {r['aten_ops'] / n:.0f} aten ops/step, "
            f"GPU {r['kernel_ns'] / n / 1e6:.2f} ms/step"
        )
    if "gpu_time_ns" in r:
        meta = r["sampling_meta"]
        traced = f", {meta['steps_traced']} traced" if "steps_traced" in meta else ""
        extra += (
            f", gpu_time {r['gpu_time_ns'] / 1e6:.1f} ms over {r['session_steps']} steps, "
            f"{r['line_and_aten'] * 100:.2f}% under line+aten, "
            f"trace_mode {meta.get('trace_mode', '(none)')}{traced}"
        )
    print(
        f"  {model} {cfg} r{rnd}: step {r['median_step_s'] * 1e3:.2f} ms "
        f"(CPU issue {r['median_cpu_s'] * 1e3:.2f}), peak RSS {r['peak_rss_mb']:.0f} MiB"
        f"{extra} [{r['process_s']:.1f} s]",
        flush=True,
    )


def _ok(r) -> bool:
    return bool(r) and "error" not in r and "skip" not in r


def _median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def _paired(rounds: dict, cfg: str, f) -> float | None:
    """Median over the rounds of f(run of cfg, run of `none`) in the same round."""
    a, b = rounds.get(cfg, []), rounds.get("none", [])
    return _median(f(x, y) for x, y in zip(a, b, strict=False) if _ok(x) and _ok(y))


def _in_rounds(rounds: dict, cfg: str, f):
    return _median(f(r) for r in rounds.get(cfg, []) if _ok(r))


def accuracy(d: dict, a: dict) -> dict:
    """The default session (sampled) against the every-op session of the same round: both cover
    the warm-up and the timed steps, so their totals compare directly."""
    if not (d["gpu_time_ns"] and a["gpu_time_ns"]):  # no GPU layer, or no kernel seen
        return {"gpu_time_ratio": None, "max_line_diff_pp": None, "line_and_aten": None}
    keys = {k for k, _ in d["top_lines"]} | {k for k, _ in a["top_lines"]}
    ds, als = d["line_shares"], a["line_shares"]
    return {
        "gpu_time_ratio": d["gpu_time_ns"] / a["gpu_time_ns"],
        "max_line_diff_pp": max((abs(ds.get(k, 0) - als.get(k, 0)) * 100 for k in keys), default=0),
        "line_and_aten": [d["line_and_aten"], a["line_and_aten"]],
    }


def model_summary(rounds: dict, configs: list[str]) -> dict:
    s: dict = {"ratios": {}}
    s["step_ms"] = _in_rounds(rounds, "none", lambda r: r["median_step_s"] * 1e3)
    s["cpu_issue_ms"] = _in_rounds(rounds, "none", lambda r: r["median_cpu_s"] * 1e3)
    for c in configs:
        if c != "none":
            s["ratios"][c] = _paired(
                rounds, c, lambda x, y: x["median_step_s"] / y["median_step_s"]
            )
    s["rss_delta_mb"] = {
        c: _paired(rounds, c, lambda x, y: x["peak_rss_mb"] - y["peak_rss_mb"])
        for c in configs
        if c != "none"
    }
    s["kernels_per_step"] = _in_rounds(
        rounds, "torch.profiler", lambda r: r["kernels"] / r["steps"]
    )
    s["ops_per_step"] = _in_rounds(rounds, "torch.profiler", lambda r: r["aten_ops"] / r["steps"])
    s["gpu_ms"] = _in_rounds(rounds, "torch.profiler", lambda r: r["kernel_ns"] / r["steps"] / 1e6)
    s["launch_bound"] = (
        s["cpu_issue_ms"] >= s["gpu_ms"]
        if s["cpu_issue_ms"] is not None and s["gpu_ms"] is not None
        else None
    )
    pairs = zip(rounds.get("deepcontext", []), rounds.get("deepcontext-all", []), strict=False)
    checks = [accuracy(d, a) for d, a in pairs if _ok(d) and _ok(a)]
    checks = [c for c in checks if c["gpu_time_ratio"] is not None]
    if checks:
        s["accuracy"] = {
            "gpu_time_ratio": _median(c["gpu_time_ratio"] for c in checks),
            "max_line_diff_pp": _median(c["max_line_diff_pp"] for c in checks),
            "line_and_aten": [_median(c["line_and_aten"][i] for c in checks) for i in (0, 1)],
            "rounds": checks,
        }
    # per step, since the windows differ: the every-op session covers warm-up and timed steps,
    # torch.profiler the timed steps only
    pairs = zip(rounds.get("deepcontext-all", []), rounds.get("torch.profiler", []), strict=False)
    per_step = [
        (a["kernel_ns"] / a["session_steps"]) / (t["kernel_ns"] / t["steps"])
        for a, t in pairs
        if _ok(a) and _ok(t) and t["kernel_ns"]
    ]
    s["all_vs_torch_profiler_per_step"] = _median(per_step)
    dc = [r for r in rounds.get("deepcontext", []) if _ok(r)]
    if dc:
        s["top_lines"] = dc[0]["top_lines"]
    return s


def _f(v, fmt: str, none: str = "-") -> str:
    return none if v is None else format(v, fmt)


def table(results: dict) -> str:
    configs = [c for c in results["configs"] if c != "none"]
    head = ["model", "step ms (none)", *configs, "kernels/step", "ops/step"]
    head += ["CPU issue / GPU ms", "launch-bound", "RSS +MiB deepcontext"]
    head += ["gpu_time default/all", "max line diff pp", "line+aten default / all"]
    head += ["all/torch.profiler gpu per step"]
    rows = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for model, s in results["summary"]["models"].items():
        acc = s.get("accuracy") or {}
        la = acc.get("line_and_aten")
        cells = [model, _f(s["step_ms"], ".2f")]
        cells += [
            _f(s["ratios"].get(c), ".3f") + ("x" if s["ratios"].get(c) else "") for c in configs
        ]
        cells += [_f(s["kernels_per_step"], ".0f"), _f(s["ops_per_step"], ".0f")]
        cells.append(f"{_f(s['cpu_issue_ms'], '.2f')} / {_f(s['gpu_ms'], '.2f')}")
        cells.append({True: "yes", False: "no", None: "?"}[s["launch_bound"]])
        cells.append(_f(s["rss_delta_mb"].get("deepcontext"), "+.0f"))
        cells += [_f(acc.get("gpu_time_ratio"), ".4f"), _f(acc.get("max_line_diff_pp"), ".2f")]
        cells.append(f"{la[0] * 100:.2f}% / {la[1] * 100:.2f}%" if la else "-")
        cells.append(_f(s["all_vs_torch_profiler_per_step"], ".4f"))
        rows.append("| " + " | ".join(cells) + " |")
    return "\n".join(rows)


def summary_lines(results: dict) -> list[str]:
    models = results["summary"]["models"]

    def ratios(cfg, only=None):
        return {
            m: s["ratios"][cfg]
            for m, s in models.items()
            if s["ratios"].get(cfg) is not None and (only is None or only(s))
        }

    lines = []
    dc = ratios("deepcontext")
    if dc:
        worst = max(dc, key=dc.get)
        lines.append(
            f"deepcontext: median {statistics.median(dc.values()):.3f}x, worst {dc[worst]:.3f}x "
            f"({worst}) over {len(dc)} models"
        )
    al = ratios("deepcontext-all", only=lambda s: s["launch_bound"])
    if al:
        lines.append(
            f"deepcontext-all: median {statistics.median(al.values()):.3f}x over {len(al)} "
            f"launch-bound models ({', '.join(al)})"
        )
    for cfg in ("torch.profiler", "floor-observer", "floor-cupti"):
        r = ratios(cfg)
        if r:
            lines.append(f"{cfg}: median {statistics.median(r.values()):.3f}x over {len(r)} models")
    return lines


def top_lines_text(results: dict, n: int = 3) -> list[str]:
    out = []
    for model, s in results["summary"]["models"].items():
        if s.get("top_lines"):
            top = ", ".join(f"{k} {v * 100:.1f}%" for k, v in s["top_lines"][:n])
            out.append(f"  {model}: {top}")
    return out


def summarize(results: dict) -> None:
    results["summary"] = {
        "models": {
            m: model_summary(rounds, results["configs"])
            for m, rounds in results["runs"].items()
            if any(_ok(r) for rs in rounds.values() for r in rs)
        }
    }
    results["summary"]["lines"] = summary_lines(results)


def write_json(path: str | None, results: dict) -> None:
    if not path:
        return
    summarize(results)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(results, f, indent=1)
    os.replace(tmp, path)  # a time limit never leaves half a file


def list_models() -> None:
    print("models:")
    for name, m in MODELS.items():
        missing = missing_packages(name)
        state = f"  [missing: {', '.join(missing)}]" if missing else ""
        print(f"  {name:13} {m.what}{state}")
    print("configurations:")
    for c in CONFIGS:
        opts = f"session.start({json.dumps(SESSION_OPTIONS[c])})" if c in SESSION_OPTIONS else ""
        print(f"  {c:16} {opts}".rstrip())


def _names(text: str, known, what: str) -> list[str]:
    names = [n for n in text.split(",") if n]
    unknown = [n for n in names if n not in known]
    if unknown:
        raise SystemExit(f"unknown {what}: {', '.join(unknown)} (known: {', '.join(known)})")
    return names


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=",".join(MODELS), help="comma list (default: all)")
    ap.add_argument(
        "--configs",
        default=",".join(CONFIGS),
        help="comma list (default: all); none always runs: every ratio is paired against it",
    )
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--steps", type=int, default=STEPS, help="timed steps per run")
    ap.add_argument("--warmup", type=int, default=WARMUP)
    ap.add_argument(
        "--budget-s",
        type=float,
        default=420,
        help="start no new run past this many seconds (the table is printed all the same)",
    )
    ap.add_argument("--json", help="write all results here, rewritten after every run")
    ap.add_argument("--keep", metavar="DIR", help="copy the deepcontext profiles here")
    ap.add_argument("--device", default="cuda", help="cuda (default), or cpu to try the script")
    ap.add_argument("--list", action="store_true", help="list the models and configurations")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--config", help=argparse.SUPPRESS)
    ap.add_argument("--output", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        args.model = args.child
        return child(args)
    if args.list:
        list_models()
        return 0
    models = _names(args.models, MODELS, "models")
    configs = _names(args.configs, CONFIGS, "configurations")
    if "none" not in configs:
        configs.insert(0, "none")  # every ratio is paired against it
    results: dict = {
        "started": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
        "args": {k: v for k, v in vars(args).items() if k not in ("child", "config", "output")},
        "configs": configs,
        "machine": None,
        "runs": {},
        "failures": [],
    }
    start = time.monotonic()
    cut = False
    with tempfile.TemporaryDirectory(prefix="real_models-") as tmp:
        for model in models:
            missing = missing_packages(model)
            if missing:
                print(f"SKIP {model}: {', '.join(missing)} not installed", flush=True)
                results.setdefault("skipped", {})[model] = f"{', '.join(missing)} not installed"
                continue
            rounds: dict[str, list] = {c: [] for c in configs}
            results["runs"][model] = rounds
            skipped = False
            for rnd in range(args.rounds):
                # rotated, so that position and drift hit every configuration alike
                k = rnd % len(configs)
                for cfg in configs[k:] + configs[:k]:
                    elapsed = time.monotonic() - start
                    if elapsed > args.budget_s:
                        cut = True
                        break
                    # the last run may end a minute past the budget, never much more
                    timeout = min(600.0, max(60.0, args.budget_s + 60 - elapsed))
                    r = run_child(args, model, cfg, rnd, tmp, timeout)
                    if "skip" in r:
                        print(f"SKIP {model}: {r['skip']}", flush=True)
                        results.setdefault("skipped", {})[model] = r["skip"]
                        skipped = True
                        break
                    rounds[cfg].append(r)
                    if "error" in r:
                        print(f"  {model} {cfg} r{rnd}: FAILED, {r['error']}", flush=True)
                        results["failures"].append([model, cfg, rnd, r["error"]])
                    else:
                        results["machine"] = results["machine"] or {
                            k: r[k] for k in ("device", "torch", "python", "versions")
                        }
                        report(model, cfg, rnd, r)
                    write_json(args.json, results)
                if skipped or cut:
                    break
            if skipped:
                del results["runs"][model]
            if cut:
                print(f"budget of {args.budget_s:.0f} s spent: no more runs", flush=True)
                break
    results["elapsed_s"] = time.monotonic() - start
    results["cut"] = cut
    summarize(results)
    write_json(args.json, results)
    machine = results["machine"] or {}
    print(
        f"\n{machine.get('device', '?')}, torch {machine.get('torch', '?')}, "
        f"{args.steps} steps after {args.warmup} warm-up, {args.rounds} round(s), "
        f"{results['elapsed_s']:.0f} s"
    )
    print(table(results))
    print(
        "ratios: median over rounds of the step time against `none` of the same round; "
        "launch-bound: the CPU's issue time (none) >= torch.profiler's kernel time per step; "
        "default/all: the default session against every-op tracing, both over warm-up and timed "
        "steps; all/torch.profiler: kernel gpu_time per step of deepcontext-all (warm-up and timed "
        "steps) against torch.profiler's per timed step (the windows differ)"
    )
    print("\n".join(["", *summary_lines(results)]))
    top = top_lines_text(results)
    if top:
        print("\ntop source lines of gpu_time (deepcontext, default session):")
        print("\n".join(top))
    if results["failures"]:
        print(f"\n{len(results['failures'])} run(s) failed (see above)")
    return 1 if results["failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
