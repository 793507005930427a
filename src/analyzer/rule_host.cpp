// Host-side rules: host-device synchronization in the step (host-sync), the step waiting for the
// data loader (data-loader-stall), more busy threads than cores (thread-oversubscription).
#include <algorithm>
#include <map>
#include <stdexcept>
#include <unordered_map>
#include <unordered_set>

#include "analyzer/engine.h"
#include "analyzer/text.h"

namespace dctx::analyzer {

namespace {

// Python sum() of floats: the int 0 when nothing was summed.
Value py_sum(double s, size_t n) { return n ? Value(s) : Value(int64_t{0}); }

// -- host-sync ----------------------------------------------------------------------------------

constexpr int64_t kMinSyncCalls = 10;

const FrameMatch &print_file() {
  static const FrameMatch re(
      [](std::string_view s) {
        return text::ends_with_any(s, {"torch/_tensor.py", "torch/_tensor_str.py"});
      },
      FrameMatch::Field::kFile);
  return re;
}

bool is_print_func(const std::string &name) {
  return name == "Tensor.__repr__" || name == "Tensor.__format__" || name == "__repr__" ||
         name == "__format__" || name == "_str";
}

// JAX: the JAX layer counts each read of a jax.Array's value that fetched it (jax_host_reads,
// from its wrapper of ArrayImpl._value) at the caller's node: the jax.Array method called.
constexpr const char *kJaxReads = "jax_host_reads";

bool is_jax_read(const Query &q, int n) {
  return q.kind[n] == kPython && q.has(kJaxReads) && q.exc(n, kJaxReads) > 0;
}

int64_t sync_calls(const Query &q, int n) {
  if (q.kind[n] == kOperator) return q.calls(n);
  if (is_jax_read(q, n)) return static_cast<int64_t>(q.exc(n, kJaxReads));
  return std::max(
      {q.count(n, "sync_time"), q.count(n, "sync_count"), q.count(n, "wall_time"), int64_t{1}});
}

// What the program called: the outermost jax.Array method above the read.
std::string jax_read_label(const Query &q, int n) {
  static const std::vector<std::pair<std::string, std::string>> kCalls = {
      {"__float__", "float(x)"},
      {"__int__", "int(x)"},
      {"__bool__", "bool(x)"},
      {"__index__", "index(x)"},
      {"item", "x.item()"},
      {"tolist", "x.tolist()"},
      {"__array__", "np.asarray(x)"},
      {"__format__", "print(x)"},
      {"__repr__", "print(x)"},
      {"__str__", "print(x)"},
      {"device_get", "jax.device_get()"}};
  static const FrameMatch jax_internal(
      [](std::string_view s) { return text::contains_any(s, {"jax/_src/"}); },
      FrameMatch::Field::kFile);
  std::string label = "a read";
  std::vector<int> path = q.ancestors(n);
  path.insert(path.begin(), n);  // the read's node is the jax.Array method that called _value
  for (int a : path) {
    if (q.kind[a] != kPython || !jax_internal.search(q.profile(), a)) break;
    const std::string &name = q.name(a);
    const std::string method = name.substr(name.rfind('.') + 1);
    for (const auto &[m, text] : kCalls) {
      if (method == m) label = text;
    }
  }
  return label + " of a jax.Array";
}

std::string sync_label(const Query &q, int n) {
  int k = q.kind[n];
  if (k == kSync) return q.name(n);
  if (is_jax_read(q, n)) return jax_read_label(q, n);
  if (k == kPython) return print_file().search(q.profile(), n) ? "print(tensor)" : "synchronize()";
  const std::string &name = q.name(n);
  if (name == "aten::_local_scalar_dense" || name == "aten::item" || name == "aten::is_nonzero") {
    return ".item() / bool(t) / float(t)";
  }
  return name;
}

void host_sync(const Query &q, const Context &, std::vector<Finding> &out) {
  // Operators that copy a value to the host (and so wait for the device).
  static const FrameMatch sync_ops([](std::string_view s) {
    return text::equals_any(s, {"aten::_local_scalar_dense", "aten::item", "aten::is_nonzero",
                                "aten::nonzero", "aten::nonzero_static", "aten::masked_select",
                                "aten::equal", "aten::allclose", "aten::tolist"}) ||
           text::prefix_then_word(s, {"aten::unique", "aten::_unique"});
  });
  static const FrameMatch sync_funcs([](std::string_view s) {
    return text::equals_any(s, {"synchronize", "current_stream_synchronize"});
  });
  static const FrameMatch sync_func_file(
      [](std::string_view s) {
        return text::contains_any(s, {"torch/cuda/", "torch/xpu/", "torch/mps/"});
      },
      FrameMatch::Field::kFile);
  bool gpu = q.has("gpu_time");
  bool waits = q.has("sync_time");
  std::string cost_metric;
  for (const char *m : {"op_time", "wall_time", "cpu_time"}) {
    if (q.has(m)) {
      cost_metric = m;
      break;
    }
  }
  std::string metric = gpu && waits ? "gpu_time" : cost_metric;
  if (metric.empty()) return;
  std::vector<int> ops, wrappers;
  const Profile &p = q.profile();
  for (int n = 1; n < q.size(); ++n) {
    int k = q.kind[n];
    if (k == kSync || is_jax_read(q, n)) {
      ops.push_back(n);
    } else if (k == kOperator) {
      if (q.backward[n] < 0 && sync_ops.search(p, n)) ops.push_back(n);
    } else if (k == kPython) {
      bool prints = print_file().search(p, n) && is_print_func(q.name(n));
      if (prints || (sync_funcs.search(p, n) && sync_func_file.search(p, n))) wrappers.push_back(n);
    }
  }
  // Not the step's: moving the model to the device (nn.Module.to/.cuda) synchronizes once per
  // parameter, and XLA's autotuning after each candidate kernel while it compiles.
  auto setup = [&](int n) { return in_model_transfer(q, n) || q.compiling(n); };
  std::erase_if(ops, setup);
  std::erase_if(wrappers, setup);
  std::unordered_set<int> op_set(ops.begin(), ops.end());
  std::vector<int> all = ops;
  all.insert(all.end(), wrappers.begin(), wrappers.end());
  for (const Site &site : by_line(q, outermost(q, all))) {
    int64_t calls = 0;
    double wait = 0, cost = 0;
    Value kinds = Value::dict();
    std::vector<std::pair<std::string, int64_t>> kind_counts;
    for (int n : site.nodes) {
      // .item() -> _local_scalar_dense -> cudaStreamSynchronize is one synchronization: count each
      // outermost one by the largest call count along its chain.
      std::vector<int> in_ops;
      for (int d : q.subtree(n)) {
        if (op_set.count(d)) in_ops.push_back(d);
      }
      int64_t c = 0;
      for (int o : outermost(q, in_ops)) {
        int64_t best = 0;
        bool first = true;
        for (int d : q.subtree(o)) {
          if (!op_set.count(d)) continue;
          int64_t x = sync_calls(q, d);
          best = first ? x : std::max(best, x);
          first = false;
        }
        c += best;
      }
      if (c == 0) c = sync_calls(q, n);
      std::string label = sync_label(q, n);
      auto it = std::find_if(kind_counts.begin(), kind_counts.end(),
                             [&](const auto &kv) { return kv.first == label; });
      if (it == kind_counts.end()) {
        kind_counts.emplace_back(label, c);
      } else {
        it->second += c;
      }
      calls += c;
      if (waits) wait += q.inc(n, "sync_time");
      if (!cost_metric.empty()) cost += q.inc(n, cost_metric);
    }
    if (calls < kMinSyncCalls) continue;
    // A jax.Array read waits for its computation whether or not a CUDA sync call shows it.
    const bool jax =
        std::any_of(site.nodes.begin(), site.nodes.end(), [&](int n) { return is_jax_read(q, n); });
    if (gpu && waits && wait <= 0 && !jax) {
      bool any_sync = false;
      for (int n : site.nodes) {
        for (int d : q.subtree(n)) any_sync = any_sync || q.kind[d] == kSync;
      }
      // no device wait measured under them: `.item()` of CPU tensors, which do not wait
      if (!any_sync) continue;
    }
    for (const auto &[k, v] : kind_counts) kinds.set(k, v);
    auto sorted = kind_counts;
    std::stable_sort(sorted.begin(), sorted.end(),
                     [](const auto &a, const auto &b) { return a.second > b.second; });
    std::string what;
    for (const auto &[k, v] : sorted) {
      what += (what.empty() ? "" : ", ") + k + " x" + std::to_string(v);
    }
    Finding f;
    double time = 0;
    f.metric = cost_metric;
    // jax.Array reads with no sync frame under them: their host time is the wait
    if (gpu && waits && (wait > 0 || !jax)) {
      time = wait;
      f.metric = metric;
      f.estimate =
          "upper bound: the time the host waited at these synchronizations (sync_time); without "
          "them the host queues the next kernels while the device works";
    } else if (jax) {
      time = cost;
      f.estimate = "host time of these reads (" + cost_metric +
                   "), which includes waiting for the device to finish the computation that "
                   "makes each value";
    } else {
      time = cost;
      f.estimate = "host time of the synchronizing calls (" +
                   (cost_metric.empty() ? std::string("None") : cost_metric) +
                   "); on a GPU each call also drains the device queue, which a profile without "
                   "GPU sync times cannot measure";
    }
    f.summary = std::to_string(calls) + " host-device synchronizations at " +
                q.source_label(site.nodes[0]) + " (" + what + "), " + fmt_ns(time) + " in all";
    if (jax) {
      f.suggestion =
          "Keep values on the device inside the loop: accumulate in a jax.Array (`total = total "
          "+ loss`) and read it (`float()`, `print`, `.item()`, `np.asarray`) once per N steps or "
          "at the end; replace `if loss < best:` with `jnp.minimum` / `jnp.where`; call "
          "`block_until_ready()` only in timing code. Each read waits for the step that makes "
          "the value, so the host cannot dispatch the next step meanwhile.";
    } else {
      f.suggestion =
          "Keep values on the device inside the loop: accumulate `running += loss.detach()` and "
          "call `.item()` / `print` once per N steps or at the end; replace `if t.any():` / "
          "`bool(t)` with `torch.where`; avoid data-dependent shapes (nonzero, masked_select) in "
          "the step; drop explicit `torch.cuda.synchronize()` outside timing code.";
    }
    f.time = time;
    f.saving = time;
    f.evidence.set("calls", calls)
        .set("by_kind", std::move(kinds))
        .set("wait_time", waits ? Value(wait) : Value())
        .set("host_time", cost)
        .set("host_metric", cost_metric.empty() ? Value() : Value(cost_metric));
    f.node = site.nodes[0];
    f.nodes = site.nodes;
    out.push_back(std::move(f));
  }
}

// -- data-loader-stall ---------------------------------------------------------------------------

constexpr double kLoaderMinShare = 0.15;

const char *const kSuggestWorkers =
    "Load in worker processes and overlap with the step: `DataLoader(..., num_workers=N, "
    "pin_memory=True, persistent_workers=True, prefetch_factor=2)` with N about the free cores; "
    "move per-sample work out of `__getitem__` (pre-decode, batch transforms on the device).";
const char *const kSuggestMore =
    "The workers do not keep up: raise `num_workers` (not beyond the free cores) and "
    "`prefetch_factor`, use `persistent_workers=True` and `pin_memory=True`, and make "
    "`__getitem__` cheaper (the heaviest lines in the evidence).";
const char *const kSuggestIpc =
    "Receiving batches from the workers dominates (tensors passed as file descriptors): use "
    "larger batches, return one tensor per batch, or "
    "`torch.multiprocessing.set_sharing_strategy('file_system')`.";

void data_loader(const Query &q, const Context &, std::vector<Finding> &out) {
  using Field = FrameMatch::Field;
  static const FrameMatch loader_file(
      [](std::string_view s) { return s.ends_with("torch/utils/data/dataloader.py"); },
      Field::kFile);
  static const FrameMatch fetch_file(
      [](std::string_view s) { return s.ends_with("torch/utils/data/_utils/fetch.py"); },
      Field::kFile);
  static const FrameMatch wait_file(
      [](std::string_view s) {
        return text::ends_with_any(
            s, {"/selectors.py", "/threading.py", "multiprocessing/connection.py"});
      },
      Field::kFile);
  static const FrameMatch wait_func([](std::string_view s) {
    return text::dotted_name_is(s, {"select", "wait", "_poll", "poll"});
  });
  static const FrameMatch ipc_file(
      [](std::string_view s) {
        return text::ends_with_any(
            s, {"torch/multiprocessing/reductions.py", "multiprocessing/resource_sharer.py"});
      },
      Field::kFile);
  const Profile &p = q.profile();
  std::vector<int> found;
  for (int n : q.nodes_of_kind({kPython})) {
    if (q.name(n).ends_with("__next__") && loader_file.search(p, n)) found.push_back(n);
  }
  std::vector<int> loaders = outermost(q, found);
  std::string m = cpu_metric(q);
  if (loaders.empty() || m.empty()) return;
  bool idle = q.has(kIdleMetric);
  // One finding per loop: the loader calls grouped by the function call that iterates them, from
  // the `for` line on (setup code before the loop does not count).
  std::vector<std::pair<std::vector<int>, std::vector<int>>> loops;
  std::map<std::vector<int>, size_t> index;
  for (int n : loaders) {
    std::vector<int> call = enclosing_call(q, n, true);
    auto [it, fresh] = index.try_emplace(call, loops.size());
    if (fresh) loops.emplace_back(call, std::vector<int>{});
    loops[it->second].second.push_back(n);
  }
  for (const auto &[loop, nodes] : loops) {
    double load = 0, loop_t = 0;
    for (int n : nodes) load += q.inc(n, m);
    for (int n : loop) loop_t += q.inc(n, m);
    if (loop_t <= 0) continue;
    std::vector<int> inner;
    for (int n : nodes) {
      for (int d : q.descendants(n, kPython)) inner.push_back(d);
    }
    bool in_process =
        std::any_of(inner.begin(), inner.end(), [&](int d) { return fetch_file.search(p, d); });
    std::vector<int> waits, ipcs;
    for (int d : inner) {
      if (wait_file.search(p, d) && wait_func.search(p, d)) waits.push_back(d);
      if (ipc_file.search(p, d)) ipcs.push_back(d);
    }
    std::vector<int> wait_nodes = outermost(q, waits), ipc_nodes = outermost(q, ipcs);
    double wait_t = 0, ipc_t = 0;
    for (int d : wait_nodes) wait_t += q.inc(d, m);
    for (int d : ipc_nodes) ipc_t += q.inc(d, m);
    std::string cause;
    double basis = 0;
    const char *suggestion = nullptr;
    if (in_process) {
      cause = "loading in the main process", basis = load, suggestion = kSuggestWorkers;
    } else if (wait_t >= ipc_t) {
      // With workers, only blocked waiting says they do not keep up.
      cause = "waiting for workers", basis = wait_t, suggestion = kSuggestMore;
    } else {
      cause = "receiving batches from workers", basis = ipc_t, suggestion = kSuggestIpc;
    }
    double share = basis / loop_t;
    if (share < kLoaderMinShare) continue;
    // Loading that overlaps the rest of the step hides behind it.
    double rest = loop_t - load;
    double saving = rest > 0 ? std::min(basis, rest) : 0.5 * basis;
    std::vector<Group> heavy = q.group_by(GroupBy::kLine, m, &nodes);
    Value lines = Value::list();
    for (size_t i = 0; i < heavy.size() && i < 3; ++i) {
      const Group &g = heavy[i];
      Value l = Value::dict();
      l.set("line", g.key[0] + ":" + g.key[1] + " (" + g.key[2] + ")").set("time", g.value);
      lines.push(std::move(l));
    }
    Finding f;
    f.summary = pct(share, 0) + " of the loop's " + m + " is spent in DataLoader.__next__ (";
    f.summary += cause + ")";
    if (idle) f.summary += "; the GPU was idle " + fmt_ns(q.total(kIdleMetric)) + " in all";
    f.suggestion = suggestion;
    f.metric = m;
    f.time = basis;
    f.saving = saving;
    f.estimate =
        "loading fully overlapped with the rest of the step: min(load time, rest of the loop)";
    f.evidence.set("metric", m)
        .set("loader_time", load)
        .set("loop_time", loop_t)
        .set("share_of_loop", share)
        .set("loading_in_main_process", in_process)
        .set("blocked_waiting", py_sum(wait_t, wait_nodes.size()))
        .set("ipc_time", py_sum(ipc_t, ipc_nodes.size()))
        .set("gpu_idle_total", idle ? Value(q.total(kIdleMetric)) : Value())
        .set("heaviest_lines", std::move(lines));
    f.node = nodes[0];
    f.nodes = nodes;
    out.push_back(std::move(f));
  }
}

// -- thread-oversubscription ---------------------------------------------------------------------

// Measured by the prototype (U-Net, 16 -> 8 loader threads, 54 -> 47 s): 13 % of the run for a
// 2x over-subscription. The saving scales with the over-subscribed fraction of the threads. Used
// for profiles without a run-queue measurement (cpu_wait).
constexpr double kPrototypeSavingAt2x = 0.13;
// Below this share of the Python threads' CPU time spent waiting for a core, the cores keep up
// with the threads in practice (they are idle often enough), whatever the thread counts say.
constexpr double kMinWaitShare = 0.02;

void threads(const Query &q, const Context &, std::vector<Finding> &out) {
  auto ncores = meta_int(q, {"cpu_count", "cpus_available", "affinity_cpus", "nproc"});
  auto intra = meta_int(q, {"torch_num_threads", "torch_intra_op_threads"});
  if (!ncores || !intra)
    throw NotApplicable("profile metadata lacks cpu_count / torch_num_threads");
  int64_t workers = meta_int(q, {"dataloader_workers", "num_workers"}).value_or(0);
  int64_t demand = *intra + workers;
  if (demand <= *ncores) return;
  if (*ncores == 0) throw std::runtime_error("division by zero");
  std::string m;
  for (const char *x : {"wall_time", "cpu_time", "op_time"}) {
    if (q.has(x)) {
      m = x;
      break;
    }
  }
  if (m.empty()) throw std::runtime_error("no time metric");
  double total = q.denominator(m);  // for wall_time the elapsed time, not the threads' sum
  double over = 1.0 - static_cast<double>(*ncores) / static_cast<double>(demand);
  // The kernel's run-queue delay of the Python threads (the step's critical path): what the
  // over-subscription cost them, measured. Not exact either way: an intra-op region also waits for
  // its preempted pool threads (not counted), and some waiting may remain after the fix (on the
  // 16-thread test program: 2.50 s estimated, 2.15 s gained).
  const bool measured = q.profile().meta_value("cpu_wait_source") != nullptr;
  const double wait = q.total("cpu_wait");
  const double cpu = q.total("cpu_time");
  if (measured && cpu > 0 && wait < kMinWaitShare * cpu) return;
  double saving = measured ? std::min(wait, total) : total * kPrototypeSavingAt2x * over / 0.5;
  int64_t target =
      workers ? std::max<int64_t>(1, *ncores - std::min(workers, *ncores / 2)) : *ncores;
  double ratio = static_cast<double>(demand) / static_cast<double>(*ncores);
  Finding f;
  f.summary = std::to_string(*intra) + " intra-op threads" +
              (workers ? " + " + std::to_string(workers) + " data-loader workers" : "") + " on " +
              std::to_string(*ncores) + " CPU cores: the CPU is over-subscribed " +
              fixed(ratio, 1) + "x" +
              (measured ? ", and the Python threads waited " + fmt_ns(wait) + " for a core (" +
                              pct(cpu > 0 ? wait / cpu : 0, 0) + " of the CPU time)"
                        : "");
  f.suggestion = "Use no more threads than cores: `torch.set_num_threads(" +
                 std::to_string(target) + ")` (or OMP_NUM_THREADS=" + std::to_string(target) + ")" +
                 (workers ? " and fewer loader workers (`num_workers=" +
                                std::to_string(std::max<int64_t>(1, *ncores - target)) +
                                "`); each worker also needs a core"
                          : "") +
                 ".";
  f.metric = m;
  f.time = total;
  f.saving = saving;
  f.estimate = measured
                   ? "the run-queue delay of the Python threads (time they were ready to run "
                     "but had no core, from the kernel's schedstat), which the step would not "
                     "wait with a core per thread"
                   : "scaled from the prototype's U-Net case (" + pct(kPrototypeSavingAt2x, 0) +
                         " of the run for 2x over-subscription) by the over-subscribed "
                         "fraction of threads (" +
                         pct(over, 0) + ")";
  f.evidence.set("cpu_cores", *ncores)
      .set("intra_op_threads", *intra)
      .set("loader_workers", workers)
      .set("oversubscription", ratio);
  if (measured) f.evidence.set("cpu_wait", wait).set("cpu_time", cpu);
  out.push_back(std::move(f));
}

}  // namespace

void add_host_sync(std::vector<RuleInfo> &r) {
  r.push_back(
      {"host-sync", "Host-device synchronization inside the step", {}, "", false, host_sync});
}

void add_data_loader(std::vector<RuleInfo> &r) {
  r.push_back({"data-loader-stall",
               "The step waits for the data loader",
               {"wall_time", "cpu_time", kIdleMetric},
               "",
               false,
               data_loader});
}

void add_threads(std::vector<RuleInfo> &r) {
  r.push_back({"thread-oversubscription",
               "More busy threads than CPU cores",
               {"cpu_time", "wall_time", "op_time"},
               "",
               false,
               threads});
}

}  // namespace dctx::analyzer
