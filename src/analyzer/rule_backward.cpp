// Backward work of operators: advanced indexing's backward dominating (index-backward) and an
// operator whose backward is far slower than its forward (backward-imbalance).
#include <algorithm>
#include <map>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include "analyzer/engine.h"
#include "analyzer/text.h"

namespace dctx::analyzer {

namespace {

// -- backward-imbalance -------------------------------------------------------------------------

// A scan's backward is a reversed scan between two flips: 3-4x its forward on CPU, measured, and
// not something to fix; 5x leaves that out. Contention stretches such ratios (a cumsum measured
// 7.8x on a loaded 2-core machine), so a backward that is mostly the forward's own operator and
// data movement is left out too (kOwnShare).
constexpr double kMinRatio = 5.0;
constexpr double kOwnShare = 0.8;
constexpr double kImbalanceMinShare = 0.05;
// A matmul's backward is two matmuls, an elementwise op's about one: 2x covers the usual ops.
constexpr double kTypicalRatio = 2.0;

bool is_view_op(const std::string &name) {
  static const std::unordered_set<std::string> ops = {
      "aten::view",       "aten::reshape",   "aten::_unsafe_view",
      "aten::expand",     "aten::permute",   "aten::transpose",
      "aten::t",          "aten::squeeze",   "aten::unsqueeze",
      "aten::as_strided", "aten::slice",     "aten::select",
      "aten::alias",      "aten::flatten",   "aten::unflatten",
      "aten::narrow",     "aten::split",     "aten::chunk",
      "aten::unbind",     "aten::expand_as", "aten::view_as",
      "aten::movedim"};
  return ops.count(name) > 0;
}

// Copies and allocations: what a backward spends besides computing.
bool is_data_movement(const std::string &name) {
  static const std::unordered_set<std::string> ops = {
      "aten::flip",  "aten::copy_",         "aten::clone",      "aten::contiguous",
      "aten::to",    "aten::_to_copy",      "aten::empty",      "aten::empty_like",
      "aten::zeros", "aten::empty_strided", "aten::zeros_like", "aten::fill_",
      "aten::zero_", "aten::new_empty",     "aten::new_zeros",  "aten::new_empty_strided"};
  return ops.count(name) > 0 || is_view_op(name);
}

// Elementwise math: the backward of an elementwise operator is a few elementwise operators
// (log1p's is an add and a division), each as costly as the forward or more (a float64 division
// costs several multiplications), so ratios of 4-5x are the operator's nature, nothing to
// reformulate. In-place variants count as their operator.
bool is_pointwise(std::string name) {
  static const std::unordered_set<std::string> ops = {"add",
                                                      "sub",
                                                      "rsub",
                                                      "mul",
                                                      "div",
                                                      "neg",
                                                      "reciprocal",
                                                      "exp",
                                                      "exp2",
                                                      "expm1",
                                                      "log",
                                                      "log1p",
                                                      "log2",
                                                      "log10",
                                                      "sqrt",
                                                      "rsqrt",
                                                      "pow",
                                                      "square",
                                                      "abs",
                                                      "sign",
                                                      "sgn",
                                                      "sigmoid",
                                                      "tanh",
                                                      "sin",
                                                      "cos",
                                                      "tan",
                                                      "asin",
                                                      "acos",
                                                      "atan",
                                                      "sinh",
                                                      "cosh",
                                                      "erf",
                                                      "erfc",
                                                      "relu",
                                                      "clamp",
                                                      "clamp_min",
                                                      "clamp_max",
                                                      "where",
                                                      "eq",
                                                      "ne",
                                                      "gt",
                                                      "lt",
                                                      "ge",
                                                      "le",
                                                      "masked_fill",
                                                      "threshold_backward",
                                                      "sigmoid_backward",
                                                      "tanh_backward",
                                                      "logit",
                                                      "xlogy",
                                                      "lerp",
                                                      "addcmul",
                                                      "addcdiv",
                                                      "maximum",
                                                      "minimum"};
  if (name.rfind("aten::", 0) != 0) return false;
  name.erase(0, 6);
  if (!name.empty() && name.back() == '_') name.pop_back();
  return ops.count(name) > 0;
}

std::vector<int> backward_children(const Query &q, int op) {
  std::vector<int> out;
  for (int c : q.children(op)) {
    if (q.kind[c] == kBackward) out.push_back(c);
  }
  return out;
}

void backward_imbalance(const Query &q, const Context &, std::vector<Finding> &out) {
  std::string m = op_metric(q);
  double total = q.total(m);
  std::set<int> opset;
  for (int b : q.nodes_of_kind({kBackward})) {
    int p = q.parent(b);
    if (q.is_op(p) && q.backward[p] < 0 && !is_view_op(q.name(p))) opset.insert(p);
  }
  std::vector<int> ops(opset.begin(), opset.end());
  for (const Site &site : by_line(q, ops, [&](int n) { return q.name(n); })) {
    double fwd = 0, bwd = 0;
    for (int op : site.nodes) {
      double b = 0;
      for (int c : backward_children(q, op)) b += q.inc(c, m);
      bwd += b;
      fwd += q.inc(op, m) - b;
    }
    if (fwd <= 0 || bwd < kMinRatio * fwd || bwd < kImbalanceMinShare * total) continue;
    const std::string &op_name = site.key.back();
    double ratio = bwd / fwd;
    std::vector<std::string> order;
    std::unordered_map<std::string, double> bwd_ops;
    for (int op : site.nodes) {
      for (int c : backward_children(q, op)) {
        for (int d : q.descendants(c, kOperator)) {
          auto [it, fresh] = bwd_ops.try_emplace(q.name(d), 0.0);
          if (fresh) order.push_back(q.name(d));
          it->second += q.exc(d, m);
        }
      }
    }
    // The forward's own operator between copies (cumsum's backward: flip, cumsum, flip): the
    // operator's natural cost, nothing to reformulate.
    double own = 0, pointwise = 0;
    for (const auto &[name, t] : bwd_ops) {
      if (name == op_name || is_data_movement(name)) own += t;
      if (is_pointwise(name) || is_data_movement(name)) pointwise += t;
    }
    if (own >= kOwnShare * bwd) continue;
    // An elementwise operator whose backward is elementwise arithmetic: its natural cost.
    if (is_pointwise(op_name) && pointwise >= kOwnShare * bwd) continue;
    std::stable_sort(order.begin(), order.end(), [&](const std::string &a, const std::string &b) {
      return bwd_ops[a] > bwd_ops[b];
    });
    Value heaviest = Value::list();
    for (size_t i = 0; i < order.size() && i < 5; ++i) {
      Value h = Value::dict();
      h.set("name", order[i]).set("time", bwd_ops[order[i]]);
      heaviest.push(std::move(h));
    }
    int64_t calls = 0;
    for (int op : site.nodes) calls += q.calls(op);
    Finding f;
    f.summary = op_name + " at " + q.source_label(site.nodes[0]) + ": backward " + fmt_ns(bwd) +
                " is " + fixed(ratio, 1) + "x its forward " + fmt_ns(fwd);
    f.suggestion =
        "Look for a formulation of " + op_name +
        " whose gradient is cheap (e.g. a matmul-based expression instead of torch.cdist, a "
        "log-space cumsum instead of cumprod, index_select instead of indexing), stop gradients "
        "that are not needed (`.detach()`, `requires_grad_(False)` on inputs that are not "
        "trained), or a fused kernel for the pair.";
    f.metric = m;
    f.time = bwd;
    f.saving = bwd - kTypicalRatio * fwd;
    f.estimate = "backward brought down to " + fixed(kTypicalRatio, 0) +
                 "x the forward, typical for common operators";
    f.evidence.set("operator", op_name)
        .set("forward_time", fwd)
        .set("backward_time", bwd)
        .set("backward_over_forward", ratio)
        .set("calls", calls)
        .set("heaviest_backward_ops", std::move(heaviest));
    f.node = site.nodes[0];
    f.nodes = site.nodes;
    out.push_back(std::move(f));
  }
}

// -- index-backward -----------------------------------------------------------------------------

constexpr double kIndexMinShare = 0.02;
// CPU profiles: index_select's backward (index_add_) measured 1.5-2.5x faster than index's
// (index_put_ with accumulate); 40 % of the backward is the conservative end of that.
constexpr double kSavingFraction = 0.4;
// GPU profiles: index_select's backward is an atomic scatter of the same rows, measured on the
// H200 at 1.5x the forward gather's time (dlrm_small case). Both first zero a gradient of the
// table's size and may copy the incoming gradient; those parts stay.
constexpr double kScatterOverGather = 1.5;

struct GpuSaving {
  double saving = 0;
  double launch_idle = 0, sort_time = 0, accumulate_time = 0, kept_time = 0, replacement_time = 0;
};

// What index_select would not run (sort, the duplicate-accumulating kernel, the index helpers)
// minus an atomic scatter costing kScatterOverGather x the forward gather.
GpuSaving gpu_saving(const Query &q, const std::vector<int> &b_nodes, double fwd) {
  static const FrameMatch kept_re([](std::string_view s) {
    return text::equals_any(s, {"aten::new_zeros", "aten::zeros", "aten::zeros_like", "aten::zero_",
                                "aten::fill_", "aten::contiguous", "aten::clone"});
  });
  static const FrameMatch sort_re([](std::string_view s) {  // RadixSort, segmented_sort, ...
    return text::contains_any(s, {"sort"}, true);
  });
  static const FrameMatch acc_re([](std::string_view s) {
    return text::contains_any(s, {"indexing_backward", "index_put", "put_kernel"}, true);
  });
  GpuSaving g;
  double bwd = 0;
  for (int c : b_nodes) bwd += q.inc(c, "gpu_time");
  std::vector<int> kept_ops;
  for (int c : b_nodes) {
    std::vector<int> found;
    for (int d : q.descendants(c, kOperator)) {
      if (kept_re.search(q.profile(), d)) found.push_back(d);
    }
    for (int d : outermost(q, found)) kept_ops.push_back(d);
  }
  for (int d : kept_ops) g.kept_time += q.inc(d, "gpu_time");
  std::unordered_set<int> kept_set(kept_ops.begin(), kept_ops.end());
  for (int c : b_nodes) {
    for (int a : q.descendants(c, kGpuApi)) {
      bool kept = false;
      for (int x = q.parent(a); x != 0 && !kept; x = q.parent(x)) kept = kept_set.count(x) > 0;
      if (!kept) g.launch_idle += q.launch_idle(a);
    }
  }
  for (int c : b_nodes) {
    for (int k : q.descendants(c, kKernel)) {
      if (sort_re.search(q.profile(), k)) {
        g.sort_time += q.inc(k, "gpu_time");
      } else if (acc_re.search(q.profile(), k)) {
        g.accumulate_time += q.inc(k, "gpu_time");
      }
    }
  }
  g.replacement_time = kScatterOverGather * fwd;
  g.saving = (bwd - g.kept_time) - kScatterOverGather * fwd + g.launch_idle;
  return g;
}

void index_backward(const Query &q, const Context &, std::vector<Finding> &out) {
  static const FrameMatch put_re([](std::string_view s) {
    return text::contains_any(s, {"index_put", "IndexBackward", "indexing_backward"});
  });
  std::string m = op_metric(q);
  std::vector<int> ops;
  for (int op : q.find("aten::index", kOperator)) {
    if (q.backward[op] >= 0) continue;
    if (!backward_children(q, op).empty()) ops.push_back(op);
  }
  bool gpu = m == "gpu_time";
  for (const Site &site : by_line(q, ops)) {
    double fwd = 0, bwd = 0, saving = 0;
    int64_t calls = 0;
    std::vector<int> put_nodes;
    GpuSaving ev;
    for (int op : site.nodes) {
      std::vector<int> b_nodes = backward_children(q, op);
      double b = 0;
      for (int c : b_nodes) b += q.inc(c, m);
      bwd += b;
      fwd += q.inc(op, m) - b;
      calls += q.calls(op);
      for (int c : b_nodes) {
        for (int d : q.descendants(c, -1, &put_re)) put_nodes.push_back(d);
      }
      if (gpu) {
        GpuSaving s = gpu_saving(q, b_nodes, q.inc(op, m) - b);
        saving += s.saving;
        ev.launch_idle += s.launch_idle;
        ev.sort_time += s.sort_time;
        ev.accumulate_time += s.accumulate_time;
        ev.kept_time += s.kept_time;
        ev.replacement_time += s.replacement_time;
      }
    }
    if (bwd < kIndexMinShare * q.total(m) || bwd < fwd) continue;
    if (!gpu) {
      saving = kSavingFraction * bwd;
    } else if (saving <= 0) {
      continue;  // an atomic scatter of the same rows would cost as much
    }
    std::string src = q.source_label(site.nodes[0]);
    Finding f;
    f.estimate =
        gpu ? "the backward's sort, duplicate-accumulating kernel and index helpers (their time "
              "and the launch-overhead idle between them), less an atomic scatter (index_select's "
              "backward) at " +
                  float_repr(kScatterOverGather) +
                  "x the forward gather's time (measured on an H200); the gradient's zero-fill "
                  "and copies stay"
            : std::to_string(static_cast<int>(kSavingFraction * 100)) +
                  "% of the measured backward time: index_select's backward measured 1.5-2.5x "
                  "faster than index's on CPU (docs/case-studies.md)";
    f.summary = fwd > 0 ? "the backward of `x[idx]` (aten::index) at " + src + " takes " +
                              fmt_ns(bwd) + ", " + fixed(bwd / fwd, 1) + "x its forward"
                        : "the backward of aten::index at " + src;
    f.suggestion =
        "Gather rows with `table.index_select(0, idx)` (or `torch.nn.functional.embedding(idx, "
        "table)` / nn.Embedding for lookup tables) instead of `table[idx]`: their backward is an "
        "index_add_/embedding_backward scatter instead of index_put_ with accumulate, which sorts "
        "the indices and adds up each row's duplicates serially (slow when rows repeat). For a "
        "multi-dimensional idx: `table.index_select(0, idx.flatten()).view(*idx.shape, -1)`.";
    f.metric = m;
    f.time = bwd;
    f.saving = saving;
    std::set<std::string> names;
    for (int n : put_nodes) names.insert(q.name(n));
    Value bops = Value::list();
    for (const auto &n : names) {
      if (bops.items().size() == 8) break;
      bops.push(n);
    }
    f.evidence.set("forward_time", fwd)
        .set("backward_time", bwd)
        .set("backward_over_forward", fwd > 0 ? Value(bwd / fwd) : Value())
        .set("calls", calls)
        .set("backward_ops", std::move(bops));
    if (gpu) {
      f.evidence.set("launch_idle", ev.launch_idle)
          .set("sort_time", ev.sort_time)
          .set("accumulate_time", ev.accumulate_time)
          .set("kept_time", ev.kept_time)
          .set("replacement_time", ev.replacement_time);
    }
    f.node = site.nodes[0];
    f.nodes = site.nodes;
    for (size_t i = 0; i < put_nodes.size() && i < 20; ++i) f.nodes.push_back(put_nodes[i]);
    out.push_back(std::move(f));
  }
}

}  // namespace

void add_backward_imbalance(std::vector<RuleInfo> &r) {
  r.push_back({"backward-imbalance",
               "Backward of an operator far slower than its forward",
               {"gpu_time", "op_time", "cpu_time"},
               "",
               true,
               backward_imbalance});
}

void add_index_backward(std::vector<RuleInfo> &r) {
  r.push_back({"index-backward",
               "Backward of advanced indexing dominates",
               {"gpu_time", "op_time", "cpu_time"},
               "",
               false,
               index_backward});
}

}  // namespace dctx::analyzer
