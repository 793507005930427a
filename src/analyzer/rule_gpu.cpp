// GPU rules: layout conversions around convolutions (channels-last), fp32 GEMM/conv kernels without
// tensor cores, heavy kernels with tiny grids or low occupancy, many small kernels from one line
// (small-kernels), pageable host-to-device copies, device allocator churn.
#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <stdexcept>
#include <unordered_map>

#include "analyzer/engine.h"
#include "analyzer/text.h"

namespace dctx::analyzer {

namespace {

Value py_sum(double s, size_t n) { return n ? Value(s) : Value(int64_t{0}); }

// -- channels-last ------------------------------------------------------------------------------

void channels_last(const Query &q, const Context &, std::vector<Finding> &out) {
  static const FrameMatch layout([](std::string_view s) {
    return text::contains_any(s,
                              {"nchw2nhwc", "nhwc2nchw", "convertTensor", "transpose_readWrite",
                               "tensorTransformGeneric"},
                              true) ||
           text::joined(s, "nchw", "to", "nhwc", true) ||
           text::joined(s, "nhwc", "to", "nchw", true);
  });
  static const FrameMatch conv_op(
      [](std::string_view s) { return text::contains_any(s, {"conv", "cudnn"}, true); });
  const Profile &p = q.profile();
  std::vector<int> kernels;
  for (int n : executed_nodes(q, kKernel)) {
    if (!layout.search(p, n)) continue;
    bool under_conv = false;
    for (int a = n; a != 0 && !under_conv; a = q.parent(a)) {
      under_conv = q.is_op(a) && conv_op.search(p, a);
    }
    if (under_conv) kernels.push_back(n);
  }
  if (kernels.empty()) return;
  double t = 0;
  for (int n : kernels) t += q.inc(n, "gpu_time");
  std::set<int> convs;
  for (int n : kernels) {
    if (q.top_op[n] >= 0) convs.insert(q.top_op[n]);
  }
  std::vector<int> conv_nodes(convs.begin(), convs.end());
  double conv_t = 0;
  for (int n : conv_nodes) conv_t += q.inc(n, "gpu_time");
  if (q.share(t, "gpu_time") < 0.01) return;
  int anchor = conv_nodes.empty() ? kernels[0] : q.common_ancestor(conv_nodes);
  if (anchor == 0) anchor = conv_nodes[0];
  std::vector<std::string> order;
  std::unordered_map<std::string, double> names;
  int64_t launches = 0;
  for (int n : kernels) {
    auto [it, fresh] = names.try_emplace(q.name(n), 0.0);
    if (fresh) order.push_back(q.name(n));
    it->second += q.inc(n, "gpu_time");
    launches += q.launches(n);
  }
  std::stable_sort(order.begin(), order.end(),
                   [&](const std::string &a, const std::string &b) { return names[a] > names[b]; });
  Value conv_kernels = Value::list();
  for (size_t i = 0; i < order.size() && i < 5; ++i) {
    Value k = Value::dict();
    k.set("name", order[i]).set("time", names[order[i]]);
    conv_kernels.push(std::move(k));
  }
  Finding f;
  f.summary = fmt_ns(t) + " of GPU time (" + pct(q.share(t, "gpu_time"), 1) +
              ") converts tensors between NCHW and NHWC around " +
              std::to_string(conv_nodes.size()) + " convolution call sites";
  f.suggestion =
      "Keep activations in channels_last: `model = model.to(memory_format=torch.channels_last)` "
      "and `x = x.to(memory_format=torch.channels_last)` for the input (with "
      "`torch.autocast('cuda', dtype=torch.bfloat16)` the convolutions then run on tensor cores "
      "without transposes).";
  f.metric = "gpu_time";
  f.time = t;
  f.saving = t;
  f.estimate =
      "the layout-conversion kernels' time, which channels_last removes (conv kernels may speed "
      "up too)";
  f.evidence.set("conversion_time", t)
      .set("conversion_launches", launches)
      .set("conversion_kernels", std::move(conv_kernels))
      .set("convolution_time", py_sum(conv_t, conv_nodes.size()));
  f.node = anchor;
  f.nodes = conv_nodes;
  for (size_t i = 0; i < kernels.size() && i < 20; ++i) f.nodes.push_back(kernels[i]);
  out.push_back(std::move(f));
}

// -- tensor-cores -------------------------------------------------------------------------------

constexpr double kTcSaving = 0.5;

std::optional<double> capability(const Query &q) {
  auto cc = device_prop(q, {"compute_capability", "capability", "cc"});
  if (!cc || cc->is_null()) {
    auto major = device_prop(q, {"major", "cc_major"});
    auto minor = device_prop(q, {"minor", "cc_minor"});
    if (!major || major->is_null()) return std::nullopt;
    auto ma = py_float(*major);
    auto mi = minor && minor->truthy() ? py_float(*minor) : std::optional<double>(0.0);
    if (!ma || !mi) throw std::runtime_error("compute capability is not a number");
    return *ma + *mi / 10;
  }
  if (cc->type() == Value::Type::kBool) return std::nullopt;
  if (cc->is_number()) return cc->as_float();
  if (!cc->is_string()) return std::nullopt;
  std::string s = cc->as_string();
  std::replace(s.begin(), s.end(), ',', '.');
  return py_float(Value(s));
}

void tensor_cores(const Query &q, const Context &, std::vector<Finding> &out) {
  static const FrameMatch gemm_conv([](std::string_view s) {
    return text::contains_any(
        s, {"gemm", "gemv", "conv", "cutlass", "xmma", "wgrad", "dgrad", "fprop"}, true);
  });
  static const FrameMatch fp32_simt([](std::string_view s) {  // convolve_sgemm: sgemm
    return text::contains_any(
               s, {"sgemm", "gemmSN", "simt", "fp32", "f32f32", "scudnn", "sgemv", "gemv2T"},
               true) ||
           text::digits_between(s, "_s", 0, SIZE_MAX, "gemm", true);
  });
  static const FrameMatch tensor_core([](std::string_view s) {
    return text::contains_any(s,
                              {"tf32", "hmma", "imma", "bf16", "f16", "fp16", "half", "tensorop",
                               "_tc_", "sm90_xmma", "gmma", "wgmma"},
                              true) ||
           text::digits_between(s, "h", 3, 4, "", true) ||
           text::digits_between(s, "s", 4, 4, "gemm", true);
  });
  auto cc = capability(q);
  if (cc && *cc < 8.0) return;
  const Profile &p = q.profile();
  std::vector<int> kernels;
  for (int n : executed_nodes(q, kKernel)) {
    if (gemm_conv.search(p, n) && fp32_simt.search(p, n) && !tensor_core.search(p, n)) {
      kernels.push_back(n);
    }
  }
  for (const Site &site : by_line(q, kernels)) {
    double t = 0;
    int64_t launches = 0;
    std::set<std::string> names;
    for (int n : site.nodes) {
      t += q.inc(n, "gpu_time");
      launches += q.launches(n);
      names.insert(q.name(n));
    }
    if (q.share(t, "gpu_time") < 0.05) continue;
    Value kn = Value::list();
    for (const auto &n : names) {
      if (kn.items().size() == 5) break;
      kn.push(n);
    }
    Finding f;
    f.summary = "fp32 GEMM/conv kernels without tensor cores at " + q.source_label(site.nodes[0]) +
                ": " + fmt_ns(t) + " (" + pct(q.share(t, "gpu_time"), 1) + " of GPU time)";
    f.suggestion =
        "Allow TF32 for fp32 matmuls and convolutions: `torch.backends.cuda.matmul.allow_tf32 = "
        "True` / `torch.set_float32_matmul_precision('high')` and `torch.backends.cudnn.allow_tf32 "
        "= True`, or run the step under `torch.autocast('cuda', dtype=torch.bfloat16)`.";
    f.metric = "gpu_time";
    f.time = t;
    f.saving = kTcSaving * t;
    f.estimate =
        "half of these kernels' time: TF32/bf16 tensor-core peak is 7-15x fp32 SIMT on "
        "Ampere/Hopper; a 2x gain allows for memory-bound parts";
    f.evidence.set("kernels", std::move(kn))
        .set("time", t)
        .set("launches", launches)
        .set("compute_capability", cc ? Value(*cc) : Value());
    int top = q.top_op[site.nodes[0]];
    f.node = top >= 0 ? top : site.nodes[0];
    f.nodes = site.nodes;
    out.push_back(std::move(f));
  }
}

// -- low-occupancy ------------------------------------------------------------------------------

// Blocks of a grid prop such as "(528, 1, 1)": the product of its first three numbers; nullopt
// when it has none or they overflow (a grid no device runs).
std::optional<int64_t> grid_blocks(const std::string *v) {
  if (!v) return std::nullopt;
  int64_t out = 1;
  int seen = 0;
  std::string_view rest = *v;
  for (std::string_view d = text::first_digits(rest); !d.empty() && seen < 3;
       d = text::first_digits(rest), ++seen) {
    auto x = text::to_int(d);
    if (!x || (*x && out > INT64_MAX / *x)) return std::nullopt;
    out *= *x;
    rest = rest.substr(static_cast<size_t>(d.data() + d.size() - rest.data()));
  }
  if (!seen) return std::nullopt;
  return out;
}

std::optional<int64_t> py_int(const Value &v) {
  if (v.type() == Value::Type::kFloat) return static_cast<int64_t>(v.as_float());
  if (v.is_number()) return v.as_int();
  if (v.is_string()) {  // int(" 132 "): digits with an optional sign, spaces around
    std::string_view s = v.as_string();
    auto space = [](char c) { return c == ' ' || (c >= '\t' && c <= '\r'); };
    while (!s.empty() && space(s.front())) s.remove_prefix(1);
    while (!s.empty() && space(s.back())) s.remove_suffix(1);
    bool neg = !s.empty() && s.front() == '-';
    if (!s.empty() && (s.front() == '+' || s.front() == '-')) s.remove_prefix(1);
    if (auto x = text::to_int(s)) return neg ? -*x : *x;
  }
  throw std::runtime_error("SM count is not an integer: " + v.str());
}

void low_occupancy(const Query &q, const Context &, std::vector<Finding> &out) {
  auto sm_value =
      device_prop(q, {"sm_count", "multiprocessor_count", "multiProcessorCount", "sms"});
  std::optional<int64_t> sms;
  if (sm_value && sm_value->truthy()) sms = py_int(*sm_value);
  const Profile &p = q.profile();
  auto prop_value = [&](int n, const char *k) {
    const std::string *v = p.prop(n, k);
    return v ? Value(*v) : Value();
  };
  for (int n : executed_nodes(q, kKernel)) {
    double t = q.inc(n, "gpu_time");
    if (q.share(t, "gpu_time") < 0.03) continue;
    auto blocks = grid_blocks(p.prop(n, "grid"));
    const std::string *occ_s = p.prop(n, "occupancy");
    if (!occ_s || occ_s->empty()) occ_s = p.prop(n, "theoretical_occupancy");
    std::optional<double> occ = occ_s ? py_float(Value(*occ_s)) : std::nullopt;
    if (occ && *occ > 1) *occ /= 100.0;
    std::vector<std::string> reasons;
    double saving = 0;
    if (sms && *sms && blocks && *blocks < *sms) {
      reasons.push_back("grid of " + std::to_string(*blocks) + " blocks on " +
                        std::to_string(*sms) + " SMs");
      saving = std::max(saving,
                        0.5 * t * (1 - static_cast<double>(*blocks) / static_cast<double>(*sms)));
    }
    if (occ && *occ < 0.25) {
      reasons.push_back("theoretical occupancy " + pct(*occ, 0));
      saving = std::max(saving, 0.25 * t);
    }
    if (reasons.empty()) continue;
    std::string why;
    for (const auto &r : reasons) why += (why.empty() ? "" : " and ") + r;
    Finding f;
    f.summary = "kernel " + head(q.name(n), 80) + " takes " + fmt_ns(t) + " with " + why;
    f.suggestion =
        "Give the kernel more parallel work: batch the calls (larger batch, torch.vmap, grouped "
        "GEMM), let torch.compile fuse and retile it, or, for a custom kernel, use smaller blocks "
        "/ fewer registers per thread (launch bounds) so more blocks fit per SM.";
    f.metric = "gpu_time";
    f.time = t;
    f.saving = saving;
    f.estimate =
        "half the idle SM fraction of the kernel's time for a tiny grid; a quarter of its time "
        "for low occupancy (latency hiding improves, not linearly)";
    f.evidence.set("grid", prop_value(n, "grid"))
        .set("block", prop_value(n, "block"))
        .set("registers", prop_value(n, "registers"))
        .set("occupancy", occ ? Value(*occ) : Value())
        .set("sm_count", sms ? Value(*sms) : Value())
        .set("launches", q.launches(n));
    f.node = n;
    out.push_back(std::move(f));
  }
}

// -- small-kernels ------------------------------------------------------------------------------

constexpr double kSmallKernelNs = 20000;
constexpr int64_t kMinLaunches = 100;
constexpr double kSmallMinShare = 0.03;
// Fusion keeps the intermediates of an elementwise/reduction chain in registers: assume a quarter
// of those kernels' own time was memory traffic for them.
constexpr double kFusedFraction = 0.25;

void small_kernels(const Query &q, const Context &, std::vector<Finding> &out) {
  static const FrameMatch fusible_re([](std::string_view s) {  // reduce_kernel: Reduce
    return text::contains_any(s,
                              {"elementwise", "Reduce", "Functor", "_foreach", "multi_tensor_apply",
                               "softmax", "norm", "copy_kernel", "CatArray", "where", "masked"},
                              true) ||
           text::word_start(s, "fill", true);
  });
  static const FrameMatch optim_file(
      [](std::string_view s) { return text::contains_any(s, {"torch/optim/"}); },
      FrameMatch::Field::kFile);
  const Profile &p = q.profile();
  std::vector<int> kernels;
  for (int n : executed_nodes(q, kKernel)) {
    if (q.launches(n) > 0) kernels.push_back(n);
  }
  for (const Site &site : by_line(q, kernels)) {
    std::vector<int> short_k;
    for (int n : site.nodes) {
      if (q.inc(n, "gpu_time") / static_cast<double>(q.launches(n)) <= kSmallKernelNs) {
        short_k.push_back(n);
      }
    }
    int64_t launches = 0;
    for (int n : short_k) launches += q.launches(n);
    if (launches < kMinLaunches) continue;
    double t = 0, fusible = 0;
    std::set<int> apis;
    size_t nfusible = 0;
    std::set<std::string> distinct;
    for (int n : short_k) {
      t += q.inc(n, "gpu_time");
      if (q.kind[q.parent(n)] == kGpuApi) apis.insert(q.parent(n));
      if (fusible_re.search(p, n)) fusible += q.inc(n, "gpu_time"), ++nfusible;
      distinct.insert(q.name(n));
    }
    double mean = t / static_cast<double>(launches);
    double idle = 0, gaps = 0;
    for (int a : apis) idle += q.launch_idle(a), gaps += q.exc(a, kIdleMetric);
    double region = t + idle;
    double saving = idle + kFusedFraction * fusible;
    double total = q.denominator("gpu_time");
    if (total <= 0 || region / total < kSmallMinShare || saving / total < kSmallMinShare / 3) {
      continue;
    }
    int line_node = q.user_line[short_k[0]];
    bool optimizer = false;
    for (int a = short_k[0]; a != 0 && !optimizer; a = q.parent(a)) {
      optimizer = optim_file.search(p, a);
    }
    // JAX kernels come from HLO ops: XLA already fused what one module holds.
    bool jax = false;
    for (int a = short_k[0]; a != 0 && !jax; a = q.parent(a)) {
      jax = q.kind[a] == kHloOp || q.kind[a] == kJaxOp;
    }
    Finding f;
    if (jax) {
      f.suggestion =
          "Give XLA more to fuse per launch: `jax.jit` the whole step rather than small pieces "
          "called from Python, turn Python loops over arrays into `jax.vmap` or `jax.lax.scan`, "
          "and batch small per-parameter updates into one flat array (`optax.flatten`). Keep XLA's "
          "command buffers on (the default), which replay runs of kernels as one CUDA graph.";
    } else if (optimizer) {
      f.suggestion =
          "Use the fused or multi-tensor optimizer: `torch.optim.AdamW(params, fused=True)` (or "
          "`foreach=True`), which updates all parameters in a few kernels.";
    } else {
      f.suggestion =
          "Fuse the elementwise chain: `torch.compile` the function or module (mode="
          "'max-autotune' or 'reduce-overhead' for CUDA graphs when shapes are static), or use a "
          "fused op (F.scaled_dot_product_attention, fused LayerNorm/GELU, foreach ops).";
    }
    f.summary = std::to_string(launches) + " launches of " + std::to_string(distinct.size()) +
                " short kernels at " + q.source_label(short_k[0]) + " average " + fmt_ns(mean) +
                " each" +
                (idle != 0 ? ", with the GPU idle " + fmt_ns(idle) + " between them" : "");
    f.metric = "gpu_time";
    f.time = region;
    f.saving = saving;
    f.estimate =
        "the launch-overhead idle between these kernels (the measured gaps, each bounded by the " +
        fixed(kLaunchHostNs / 1e3, 0) +
        " us host cost of an eager launch minus the kernel's time), which fewer launches remove, "
        "plus a quarter of the elementwise/reduction kernels' time (intermediates stay in "
        "registers)";
    f.evidence.set("launches", launches)
        .set("distinct_kernels", static_cast<int64_t>(distinct.size()))
        .set("kernel_time", t)
        .set("mean_kernel_time", mean)
        .set("gpu_idle", py_sum(idle, apis.size()))
        .set("measured_gaps", py_sum(gaps, apis.size()))
        .set("fusible_kernel_time", py_sum(fusible, nfusible))
        .set("optimizer", optimizer);
    f.node = line_node >= 0 ? line_node : short_k[0];
    f.nodes = short_k;
    out.push_back(std::move(f));
  }
}

// -- pageable-memcpy ----------------------------------------------------------------------------

bool pageable(const Query &q, int n) {
  for (const char *k : {"src_kind", "memory", "host_memory", "kind", "pinned"}) {
    const std::string *v = q.profile().prop(n, k);
    if (!v) continue;
    if (std::string(k) == "pinned") return *v == "0" || *v == "false" || *v == "False";
    if (text::contains_any(*v, {"pageable"}, true)) return true;
  }
  return text::contains_any(q.name(n), {"pageable"}, true);
}

void pageable_memcpy(const Query &q, const Context &, std::vector<Finding> &out) {
  static const FrameMatch htod([](std::string_view s) {
    return text::contains_any(s, {"HtoD", "H2D"}, true) ||
           text::joined(s, "host", "to", "device", true);
  });
  std::vector<int> copies;
  for (int n : executed_nodes(q, kMemcpy)) {
    if (htod.search(q.profile(), n) && pageable(q, n) && !in_model_transfer(q, n)) {
      copies.push_back(n);
    }
  }
  // Copies are device time outside gpu_time (kernels only): the whole they are a share of is the
  // kernels' timeline plus every copy.
  double total = q.denominator("gpu_time") + q.total("memcpy_time");
  for (const Site &site : by_line(q, copies)) {
    double t = 0, nbytes = 0;
    int64_t count = 0;
    for (int n : site.nodes) {
      t += q.inc(n, "memcpy_time");
      nbytes += q.inc(n, "memcpy_bytes");
      count += q.count(n, "memcpy_time");
    }
    if (total <= 0 || t / total < 0.01) continue;
    Finding f;
    f.summary = "pageable host-to-device copies at " + q.source_label(site.nodes[0]) + ": " +
                fmt_ns(t) + (nbytes != 0 ? ", " + fixed(nbytes / 1048576.0, 1) + " MiB" : "");
    f.suggestion =
        "Copy from pinned memory without blocking: `DataLoader(..., pin_memory=True)` or "
        "`t.pin_memory()`, then `t.to('cuda', non_blocking=True)`.";
    f.metric = "gpu_time";
    f.time = t;
    f.total = total;
    f.saving = 0.5 * t;
    f.estimate =
        "half the copy time: pinned copies run at about twice the bandwidth of pageable ones and "
        "can overlap compute";
    f.evidence.set("copy_time", t)
        .set("bytes", nbytes != 0 ? Value(nbytes) : Value())
        .set("copies", count);
    f.node = site.nodes[0];
    f.nodes = site.nodes;
    out.push_back(std::move(f));
  }
}

// -- allocator-churn ----------------------------------------------------------------------------

constexpr int64_t kMinAllocCalls = 20;

int64_t api_calls(const Query &q, int n) {
  if (const MetricValue *v = q.value(n, "api_calls")) return static_cast<int64_t>(v->sum);
  return std::max(q.count(n, "wall_time"), q.count(n, "cpu_time"));
}

std::string api_time_metric(const Query &q) {
  for (const char *m : {"api_time", "wall_time", "cpu_time"}) {
    if (q.has(m)) return m;
  }
  return "gpu_time";
}

void allocator_churn(const Query &q, const Context &, std::vector<Finding> &out) {
  static const FrameMatch alloc_api([](std::string_view s) {  // cudaMallocAsync: cudaMalloc
    return text::prefix_then_word(
        s, {"cudaMalloc", "cudaFree", "cuMemAlloc", "cuMemFree", "cuMemCreate", "cuMemMap"});
  });
  std::vector<int> apis;
  for (int n : executed_nodes(q, kGpuApi)) {
    if (alloc_api.search(q.profile(), n)) apis.push_back(n);
  }
  std::string time_m = api_time_metric(q);
  bool timed = time_m != "gpu_time";
  for (const Site &site : by_line(q, apis)) {
    int64_t calls = 0;
    double t = 0;
    std::set<std::string> names;
    for (int n : site.nodes) {
      calls += api_calls(q, n);
      if (timed) t += q.inc(n, time_m);
      names.insert(q.name(n));
    }
    if (calls < kMinAllocCalls) continue;
    Value an = Value::list();
    for (const auto &n : names) an.push(n);
    Finding f;
    f.summary = std::to_string(calls) + " device malloc/free calls at " +
                q.source_label(site.nodes[0]) + ", " + fmt_ns(t) + " in the API";
    f.suggestion =
        "Let the caching allocator reuse memory: do not call `torch.cuda.empty_cache()` in the "
        "loop, keep shapes static (pad variable-length batches to a few bucket sizes), and set "
        "`PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True` against fragmentation.";
    f.metric = time_m;
    f.time = t;
    f.saving = t;
    f.estimate =
        "the time spent in the allocation API calls (cudaFree also synchronizes the device)";
    f.evidence.set("calls", calls).set("api_time", t).set("apis", std::move(an));
    f.node = site.nodes[0];
    f.nodes = site.nodes;
    out.push_back(std::move(f));
  }
}

}  // namespace

void add_gpu_kernels(std::vector<RuleInfo> &r) {
  r.push_back({"channels-last",
               "Layout conversions around convolutions",
               {"gpu_time"},
               "",
               false,
               channels_last});
  r.push_back({"tensor-cores",
               "fp32 GEMM/conv kernels not using tensor cores",
               {"gpu_time"},
               "",
               false,
               tensor_cores});
  r.push_back({"low-occupancy",
               "Heavy kernels with tiny grids or low occupancy",
               {"gpu_time"},
               "",
               false,
               low_occupancy});
}

void add_gpu_launch(std::vector<RuleInfo> &r) {
  r.push_back({"small-kernels",
               "Many small kernels from one source line: fuse them",
               {"gpu_time"},
               "Short kernels leave the device idle while the host issues the next one. The idle "
               "charged to a line is Query.launch_idle of its launches (measured gaps, bounded by "
               "the host issue cost of each kernel): not the raw gaps, which hold first-call and "
               "setup waits and the profiler's own overhead.",
               true,
               small_kernels});
  r.push_back({"pageable-memcpy",
               "Pageable host-to-device copies",
               {"memcpy_time"},
               "",
               false,
               pageable_memcpy});
  r.push_back({"allocator-churn",
               "Device malloc/free inside the step",
               {"gpu_time"},
               "",
               false,
               allocator_churn});
}

}  // namespace dctx::analyzer
