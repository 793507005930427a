#include "processor.h"

#include <cxxabi.h>
#include <sys/mman.h>
#include <time.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <nlohmann/json.hpp>

#include "deepcontext/timeline.h"
#include "occupancy.h"
#include "recorder.h"

namespace dctx::gpu {
namespace {

bool starts_with(std::string_view s, std::string_view prefix) {
  return s.substr(0, prefix.size()) == prefix;
}

std::string demangle(const char *mangled) {
  int status = 0;
  char *out = abi::__cxa_demangle(mangled, nullptr, nullptr, &status);
  if (status != 0 || out == nullptr) return mangled;
  std::string s(out);
  std::free(out);
  return s;
}

const char *copy_kind_name(uint32_t kind) {
  static const char *const names[] = {"memcpy",      "memcpy HtoD", "memcpy DtoH", "memcpy HtoA",
                                      "memcpy AtoH", "memcpy AtoA", "memcpy AtoD", "memcpy DtoA",
                                      "memcpy DtoD", "memcpy HtoH", "memcpy PtoP"};
  return kind < sizeof(names) / sizeof(names[0]) ? names[kind] : names[0];
}

// CUPTI's device id of a graph launch whose first node runs on the host (a host node).
constexpr uint32_t kHostDevice = 0x7fffffff;
// CUpti_ActivityMemoryKind values of host memory.
constexpr uint32_t kMemoryPageable = 1;
constexpr uint32_t kMemoryPinned = 2;
// CUpti_ActivityMemcpyKind values with a host side.
constexpr uint32_t kCopyHtoD = 1, kCopyDtoH = 2, kCopyHtoA = 3, kCopyAtoH = 4;

std::string memcpy_name(const dctx_gpu_activity &r) {
  std::string name = copy_kind_name(r.copy_kind);
  uint32_t host = 0;
  if (r.copy_kind == kCopyHtoD || r.copy_kind == kCopyHtoA) host = r.src_kind;
  if (r.copy_kind == kCopyDtoH || r.copy_kind == kCopyAtoH) host = r.dst_kind;
  if (host == kMemoryPageable) name += " (pageable)";
  if (host == kMemoryPinned) name += " (pinned)";
  return name;
}

std::string triple(const int32_t v[3]) {
  return "(" + std::to_string(v[0]) + ", " + std::to_string(v[1]) + ", " + std::to_string(v[2]) +
         ")";
}

}  // namespace

dctx_gpu_api_kind classify_api(std::string_view name) {
  static const std::string_view launch[] = {"cudaLaunchKernel", "cudaLaunchCooperativeKernel",
                                            "cuLaunchKernel", "cuLaunchCooperativeKernel",
                                            "cuLaunchGrid"};
  static const std::string_view graph[] = {"cudaGraphLaunch", "cuGraphLaunch"};
  static const std::string_view copy[] = {"cudaMemcpy", "cuMemcpy"};
  static const std::string_view set[] = {"cudaMemset", "cuMemset"};
  static const std::string_view sync[] = {"cudaDeviceSynchronize", "cudaStreamSynchronize",
                                          "cudaEventSynchronize",  "cuCtxSynchronize",
                                          "cuStreamSynchronize",   "cuEventSynchronize"};
  if (name == "cuLaunch") return DCTX_GPU_API_LAUNCH;
  for (auto p : launch)
    if (starts_with(name, p)) return DCTX_GPU_API_LAUNCH;
  for (auto p : graph)
    if (starts_with(name, p)) return DCTX_GPU_API_GRAPH_LAUNCH;
  for (auto p : copy)
    if (starts_with(name, p)) return DCTX_GPU_API_MEMCPY;
  for (auto p : set)
    if (starts_with(name, p)) return DCTX_GPU_API_MEMSET;
  for (auto p : sync)
    if (starts_with(name, p)) return DCTX_GPU_API_SYNC;
  return DCTX_GPU_API_OTHER;
}

std::string api_display_name(std::string_view cupti_name) {
  const size_t v = cupti_name.rfind("_v");
  if (v != std::string_view::npos && v + 2 < cupti_name.size() &&
      std::all_of(cupti_name.begin() + static_cast<long>(v) + 2, cupti_name.end(),
                  [](char c) { return c >= '0' && c <= '9'; }))
    return std::string(cupti_name.substr(0, v));
  return std::string(cupti_name);
}

CorrelationMap::CorrelationMap(size_t capacity_pow2)
    : slots_(new std::atomic<uint64_t>[capacity_pow2]), mask_(capacity_pow2 - 1) {
  for (size_t i = 0; i < capacity_pow2; ++i) slots_[i].store(0, std::memory_order_relaxed);
}

Processor::Processor(DeviceQuery query) : query_(std::move(query)) {
  m_gpu_time_ = dctx_metric_id("gpu_time", "ns", "GPU kernel execution time");
  m_launches_ = dctx_metric_id("launches", "count", "GPU kernel launches");
  m_occupancy_ = dctx_metric_id("occupancy", "ratio",
                                "theoretical occupancy of the launch (sum over launches; divide by "
                                "count for the mean)");
  m_idle_ = dctx_metric_id("gpu_idle_time", "ns",
                           "time the device ran no kernel before this launch's kernel started, "
                           "charged to the launch the device waited for");
  m_sync_ = dctx_metric_id("sync_time", "ns", "CPU time spent in GPU synchronization calls");
  m_graph_time_ = dctx_metric_id("graph_kernel_time", "ns",
                                 "GPU time of kernels replayed by this graph launch (the kernels "
                                 "themselves sit under their capture site)");
  m_memcpy_time_ = dctx_metric_id("memcpy_time", "ns", "GPU memory copy time");
  m_memcpy_bytes_ = dctx_metric_id("memcpy_bytes", "bytes", "bytes copied");
  m_memset_time_ = dctx_metric_id("memset_time", "ns", "GPU memset time");
  m_memset_bytes_ = dctx_metric_id("memset_bytes", "bytes", "bytes set");
  void *steps = mmap(nullptr, kLaunchSteps * sizeof(uint32_t), PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (steps != MAP_FAILED) launch_steps_ = static_cast<uint32_t *>(steps);
}

Processor::~Processor() {
  if (launch_steps_ != nullptr) munmap(launch_steps_, kLaunchSteps * sizeof(uint32_t));
}

ApiInfo Processor::make_api(std::string_view cupti_name) const {
  ApiInfo info;
  info.name = api_display_name(cupti_name);
  info.kind = classify_api(info.name);
  dctx_frame frame{};
  frame.kind = info.kind == DCTX_GPU_API_SYNC ? DCTX_FRAME_SYNC : DCTX_FRAME_GPU_API;
  frame.name = info.name.c_str();
  info.frame = dctx_frame_id(&frame);
  return info;
}

// A launch call counted (add) or taken back: kernel launches await a record (expected_); launch
// calls of kernels and of graphs are the sampling windows' units (calls_, graph_calls_).
void Processor::count_launch(dctx_gpu_api_kind kind, bool add) {
  auto bump = [add](std::atomic<uint64_t> &counter) {
    if (add)
      counter.fetch_add(1, std::memory_order_relaxed);
    else
      counter.fetch_sub(1, std::memory_order_relaxed);
  };
  if (kind == DCTX_GPU_API_LAUNCH) bump(expected_);
  if (kind == DCTX_GPU_API_LAUNCH || kind == DCTX_GPU_API_GRAPH_LAUNCH) bump(calls_);
  if (kind == DCTX_GPU_API_GRAPH_LAUNCH) bump(graph_calls_);
}

void Processor::api_enter(ThreadState &state, const ApiInfo &api, uint32_t correlation,
                          dctx_node context, uint64_t now_ns) {
  // A call open on this thread when the callbacks went off never reported its exit.
  const int64_t span = spans_begun_.load(std::memory_order_relaxed);
  if (state.span != span) {
    state.span = span;
    state.depth = 0;
  }
  if (state.depth++ == 0) {
    if (state.cached_frame != api.frame || state.cached_context != context ||
        state.cached_node == 0) {
      state.cached_node = dctx_child(context, api.frame);
      state.cached_context = context;
      state.cached_frame = api.frame;
    }
    state.node = state.cached_node;
    state.info = &api;
    state.enter_ns = now_ns;
    state.enter_step = dctx_timeline_step();
    state.captured = false;
    count_launch(api.kind, true);
  }
  if (dctx_timeline_on() && launch_steps_ != nullptr)
    __atomic_store_n(&launch_steps_[correlation & (kLaunchSteps - 1)], dctx_timeline_step(),
                     __ATOMIC_RELAXED);
  correlations_.put(correlation, state.node);
  last_correlation_.store(correlation, std::memory_order_relaxed);
}

void Processor::api_exit(ThreadState &state, uint64_t now_ns, bool failed) {
  if (state.depth == 0 || --state.depth != 0) return;
  if (state.info->kind == DCTX_GPU_API_SYNC && now_ns > state.enter_ns) {
    const double t = static_cast<double>(now_ns - state.enter_ns);
    if (span_sampled_.load(std::memory_order_relaxed))
      dctx_add_sampled(state.node, m_sync_, t);
    else
      dctx_add(state.node, m_sync_, t);
  }
  if (failed || state.captured) count_launch(state.info->kind, false);  // launched nothing
  if (dctx_timeline_on())  // the call on its CPU thread (steady clock: CLOCK_MONOTONIC)
    dctx_timeline_record(
        state.info->kind == DCTX_GPU_API_SYNC ? DCTX_FRAME_SYNC : DCTX_FRAME_GPU_API, state.node,
        static_cast<int64_t>(state.enter_ns), static_cast<int64_t>(now_ns), state.enter_step);
}

void Processor::graph_node_created(ThreadState &state, uint64_t graph_node, dctx_node context) {
  const dctx_node node = state.depth > 0 ? state.node : context;
  if (state.depth > 0) state.captured = true;
  std::lock_guard lock(graph_mutex_);
  graph_nodes_[graph_node] = node;
}

void Processor::graph_node_cloned(uint64_t graph_node, uint64_t original) {
  std::lock_guard lock(graph_mutex_);
  auto it = graph_nodes_.find(original);
  if (it != graph_nodes_.end()) graph_nodes_[graph_node] = it->second;
}

uint32_t Processor::named_frame(dctx_frame_kind kind, const std::string &name) {
  const std::string key = std::to_string(kind) + ":" + name;
  auto it = named_frames_.find(key);
  if (it != named_frames_.end()) return it->second;
  dctx_frame frame{};
  frame.kind = kind;
  frame.name = name.c_str();
  return named_frames_[key] = dctx_frame_id(&frame);
}

uint32_t Processor::kernel_frame(const char *mangled) {
  const char *key = mangled ? mangled : "<unknown kernel>";
  auto it = kernel_frames_.find(key);
  if (it != kernel_frames_.end()) return it->second;
  const std::string name = demangle(key);
  dctx_frame frame{};
  frame.kind = DCTX_FRAME_KERNEL;
  frame.name = name.c_str();
  return kernel_frames_[key] = dctx_frame_id(&frame);
}

dctx_node Processor::base_node(const dctx_gpu_activity &record, bool *from_graph) {
  *from_graph = false;
  dctx_node node = 0;
  if (record.graph_node != 0) {
    std::lock_guard lock(graph_mutex_);
    auto it = graph_nodes_.find(record.graph_node);
    if (it != graph_nodes_.end()) {
      *from_graph = true;
      return it->second;
    }
  }
  if (correlations_.get(record.correlation, &node)) return node;
  return unattributed();
}

dctx_node Processor::unattributed() {
  ++stats_.unattributed;
  if (unattributed_node_ == 0)
    unattributed_node_ = dctx_child(0, named_frame(DCTX_FRAME_GPU_API, "<no launch context>"));
  return unattributed_node_;
}

Processor::DeviceState &Processor::device(uint32_t ordinal) {
  DeviceState &d = devices_[ordinal];
  if (!d.known) {
    d.known = true;
    d.props.ordinal = ordinal;
    // The idle window's whole capacity, touched now: resident memory does not grow as it fills
    // over the first steps (it took hundreds of steps of a small-kernel loop to fill).
    d.pending.resize(kIdleWindow);
    d.pending.clear();
    if (!query_ || !query_(ordinal, &d.props)) {
      d.props = dctx_gpu_device{};
      d.props.ordinal = ordinal;
    }
    publish_devices();
  }
  return d;
}

void Processor::set_sampling(double scale) {
  std::lock_guard lock(windows_mutex_);
  sampling_ = scale > 1.0;
  scale_ = sampling_ ? scale : 1.0;
}

namespace {
// What a window stands for, by wall time: from its opening to `until` (the next opening, or the
// end of the run), over the time it traced.
double span_weight(uint64_t open, uint64_t close, uint64_t until) {
  const uint64_t traced = std::min(close, until) - std::min(open, std::min(close, until));
  return until > open && traced > 0
             ? static_cast<double>(until - open) / static_cast<double>(traced)
             : 1.0;
}
}  // namespace

// By launch calls (of kernels and of graphs: XLA's command buffers launch a step's kernels in one
// graph launch) where the window saw any: tracing slows the launches made inside a window (per-node
// graph tracing most), so a launch-bound program gets fewer steps into a window than into as much
// untraced time and wall-time weights undercount (60,000 JAX MLP steps on the H100: 2.5-2.9 s
// sampled against 4.37 s traced throughout). Kernel time per launch does not change with tracing.
double Processor::window_weight(const Window &w, uint64_t until, Calls calls_until,
                                bool graph) const {
  // Per kind: a window that opens on a compilation sees its autotuning's kernel launches and the
  // first steps' graph launches, in proportions the rest of the run does not repeat (10,000 JAX
  // MLP steps on the H100, one window: 0.73x the kernel time with both kinds counted together).
  auto ratio = [&](uint64_t open, uint64_t close, uint64_t now) {
    close = std::min(close, now);
    return close > open && now >= close
               ? static_cast<double>(now - open) / static_cast<double>(close - open)
               : 0.0;
  };
  const Calls &o = w.at_open, &c = w.at_close;
  double r = graph
                 ? ratio(o.graphs, c.graphs, calls_until.graphs)
                 : ratio(o.all - o.graphs, c.all - c.graphs, calls_until.all - calls_until.graphs);
  if (r == 0.0) r = ratio(o.all, c.all, calls_until.all);
  return r != 0.0 ? r : span_weight(w.open, w.close, until);
}

Processor::Calls Processor::calls_now() const {
  // Two counters read one after the other: never fewer calls in all than of graphs.
  const uint64_t graphs = graph_calls_.load(std::memory_order_relaxed);
  return {std::max(calls_.load(std::memory_order_relaxed), graphs), graphs};
}

void Processor::window_open(uint64_t ts) {
  std::lock_guard lock(mutex_);
  const Calls calls = calls_now();
  std::lock_guard windows(windows_mutex_);
  if (!windows_.empty()) flush_pending(windows_.back(), ts, calls);
  if (windows_.size() >= kMaxWindows) windows_.erase(windows_.begin());
  windows_.push_back({windows_opened_++, ts, UINT64_MAX, calls, {UINT64_MAX, UINT64_MAX}});
}

void Processor::window_close(uint64_t ts) {
  const Calls calls = calls_now();
  std::lock_guard lock(windows_mutex_);
  if (!windows_.empty() && windows_.back().close == UINT64_MAX) {
    windows_.back().close = ts;
    windows_.back().at_close = calls;
  }
}

void Processor::end_sampling(uint64_t ts) {
  std::lock_guard lock(mutex_);
  sweep_idle(true);  // the last window's gaps join its pending additions
  const Calls calls = calls_now();
  std::lock_guard windows(windows_mutex_);
  if (windows_.empty()) return;
  Window &w = windows_.back();
  if (w.close == UINT64_MAX) w.close = ts, w.at_close = calls;
  flush_pending(w, ts, calls);
}

uint64_t Processor::calls_in_window() const {
  const uint64_t calls = calls_.load(std::memory_order_relaxed);
  std::lock_guard lock(windows_mutex_);
  const uint64_t opened = windows_.empty() ? 0 : windows_.back().at_open.all;
  return calls > opened ? calls - opened : 0;
}

double Processor::weight_of(int64_t index, bool graph) const {
  if (windows_.empty() || index == windows_.back().index) return 0.0;
  const int64_t first = windows_.front().index;
  if (index < first) return scale_;  // evicted: nominal
  const Window &next = windows_[static_cast<size_t>(index - first + 1)];
  return window_weight(windows_[static_cast<size_t>(index - first)], next.open, next.at_open,
                       graph);
}

void Processor::begin_span(bool sampled) {
  std::lock_guard lock(windows_mutex_);
  if (spans_.size() >= kMaxSpans) spans_.erase(spans_.begin(), spans_.begin() + kMaxSpans / 2);
  const int64_t index = spans_begun_.fetch_add(1, std::memory_order_relaxed) + 1;
  spans_.push_back({last_correlation_.load(std::memory_order_relaxed) + 1, index, sampled});
  span_sampled_.store(sampled, std::memory_order_relaxed);
  spans_on_.store(true, std::memory_order_release);
}

bool Processor::sampled(const dctx_gpu_activity &r, int64_t *window, double *weight) {
  *window = 0;
  *weight = 1.0;
  record_sampled_ = false;
  if (spans_on_.load(std::memory_order_acquire)) {
    std::lock_guard lock(windows_mutex_);
    // The last span that began at or before the record's launch (spans_ ascend by first id).
    auto after = std::upper_bound(spans_.begin(), spans_.end(), r.correlation,
                                  [](uint32_t c, const Span &s) { return c < s.first; });
    if (after != spans_.begin()) {
      --after;
      *window = after->index;
      record_sampled_ = after->sampled;
    }
  }
  if (!sampling_) return true;
  const uint64_t end = std::max(r.start, r.end);
  std::lock_guard lock(windows_mutex_);
  for (auto w = windows_.rbegin(); w != windows_.rend(); ++w) {
    if (r.start < w->open) continue;
    if (end > w->close) break;
    *window = w->index;
    *weight = weight_of(w->index, r.graph_node != 0);
    return true;
  }
  ++stats_.outside_windows;
  return false;
}

void Processor::add(dctx_node node, dctx_metric metric, double raw, double weight, bool graph) {
  if (weight == 0.0) {
    pending_[(uint64_t(node) << 32) | (graph ? 1u << 31 : 0u) | metric] += raw;
    return;
  }
  if (record_sampled_) {
    dctx_add_sampled(node, metric, raw * weight);
    if (metric == m_gpu_time_) stats_.sampled_gpu_time_ns += raw * weight;
    return;
  }
  dctx_add(node, metric, raw * weight);
  if (metric == m_gpu_time_) stats_.gpu_time_ns += raw * weight;
}

void Processor::flush_pending(const Window &w, uint64_t until, Calls calls_until) {
  const double plain = window_weight(w, until, calls_until, false);
  const double graph = window_weight(w, until, calls_until, true);
  for (const auto &[key, raw] : pending_)
    add(static_cast<dctx_node>(key >> 32), static_cast<dctx_metric>(key & 0x7fffffffu), raw,
        key & (1u << 31) ? graph : plain);
  pending_.clear();
}

void Processor::kernel(const dctx_gpu_activity &r) {
  int64_t window = 0;
  double weight = 1.0;
  if (!sampled(r, &window, &weight)) return;
  bool from_graph = false;
  const dctx_node base = base_node(r, &from_graph);
  const dctx_node node = dctx_child(base, kernel_frame(r.name));
  const double duration = r.end > r.start ? static_cast<double>(r.end - r.start) : 0.0;
  const bool graph = r.graph_node != 0;  // weighed by graph launches (window_weight)
  add(node, m_gpu_time_, duration, weight, graph);
  add(node, m_launches_, 1.0, weight, graph);
  ++stats_.kernels;
  if (from_graph) {
    ++stats_.graph_kernels;
    dctx_node replay = 0;
    if (correlations_.get(r.correlation, &replay))
      add(replay, m_graph_time_, duration, weight, graph);
  } else if (r.graph_node == 0 && base != unattributed_node_) {
    ++stats_.launches_received;
  }

  DeviceState &dev = device(r.device);
  const uint64_t threads = uint64_t(r.block[0]) * uint64_t(r.block[1]) * uint64_t(r.block[2]);
  const uint64_t shared =
      uint64_t(std::max(r.static_smem, 0)) + uint64_t(std::max(r.dynamic_smem, 0));
  const OccupancyLimits occ = theoretical_occupancy(dev.props, threads, r.registers, shared);
  const double occupancy = dev.props.max_threads_per_sm != 0 ? occ.occupancy : 0.0;
  if (dev.props.max_threads_per_sm != 0) add(node, m_occupancy_, occupancy, weight, graph);
  if (calibrate_graphs_.load(std::memory_order_relaxed) && from_graph && r.graph_id != 0)
    calibrate(r, node, duration, occupancy);

  const KernelShape shape{{r.grid[0], r.grid[1], r.grid[2]},
                          {r.block[0], r.block[1], r.block[2]},
                          r.registers,
                          r.static_smem,
                          r.dynamic_smem};
  auto [it, inserted] = shapes_.try_emplace(node, shape);
  if (inserted || !(it->second == shape)) {
    it->second = shape;
    dctx_set_prop(node, "grid", triple(r.grid).c_str());
    dctx_set_prop(node, "block", triple(r.block).c_str());
    dctx_set_prop(node, "registers_per_thread", std::to_string(r.registers).c_str());
    dctx_set_prop(node, "static_shared_bytes", std::to_string(r.static_smem).c_str());
    dctx_set_prop(node, "dynamic_shared_bytes", std::to_string(r.dynamic_smem).c_str());
    if (dev.props.max_threads_per_sm != 0) {
      char buf[32];
      std::snprintf(buf, sizeof buf, "%.3f", occ.occupancy);
      dctx_set_prop(node, "theoretical_occupancy", buf);
      dctx_set_prop(node, "blocks_per_sm", std::to_string(occ.blocks_per_sm).c_str());
    }
  }
  if (r.end > r.start) {
    if (dev.pending.size() >= kIdleWindow) sweep_device(dev, false);  // never past its capacity
    dev.pending.push_back({r.start, r.end, base, window, graph, record_sampled_});
  }
  if (dctx_timeline_on()) timeline_event(DCTX_FRAME_KERNEL, node, r, base != unattributed_node_);
}

void Processor::memcpy(const dctx_gpu_activity &r) {
  int64_t window = 0;
  double weight = 1.0;
  if (!sampled(r, &window, &weight)) return;
  bool from_graph = false;
  const dctx_node base = base_node(r, &from_graph);
  const dctx_node node = dctx_child(base, named_frame(DCTX_FRAME_MEMCPY, memcpy_name(r)));
  const bool graph = r.graph_node != 0;
  add(node, m_memcpy_time_, r.end > r.start ? static_cast<double>(r.end - r.start) : 0.0, weight,
      graph);
  add(node, m_memcpy_bytes_, static_cast<double>(r.bytes), weight, graph);
  ++stats_.memcpys;
  device(r.device);
  if (dctx_timeline_on()) timeline_event(DCTX_FRAME_MEMCPY, node, r, base != unattributed_node_);
}

void Processor::memset(const dctx_gpu_activity &r) {
  int64_t window = 0;
  double weight = 1.0;
  if (!sampled(r, &window, &weight)) return;
  bool from_graph = false;
  const dctx_node base = base_node(r, &from_graph);
  const dctx_node node = dctx_child(base, named_frame(DCTX_FRAME_MEMSET, "memset"));
  const bool graph = r.graph_node != 0;
  add(node, m_memset_time_, r.end > r.start ? static_cast<double>(r.end - r.start) : 0.0, weight,
      graph);
  add(node, m_memset_bytes_, static_cast<double>(r.bytes), weight, graph);
  ++stats_.memsets;
  device(r.device);
  if (dctx_timeline_on()) timeline_event(DCTX_FRAME_MEMSET, node, r, base != unattributed_node_);
}

Processor::GraphCalibration &Processor::graph_seen(uint32_t graph_id, uint32_t correlation) {
  GraphCalibration &g = graphs_[graph_id];
  if (g.last_seen == 0 || g.last_launch != correlation) {
    g.last_launch = correlation;
    g.last_seen = ++graph_launches_;
  }
  return g;
}

void Processor::update_graphs_calibrated() {
  bool any = false, all = true;
  for (const auto &[id, g] : graphs_) {
    if (g.last_seen + kRecentGraphLaunches < graph_launches_) continue;  // not launched lately
    any = true;
    all = all && g.full();
  }
  graphs_calibrated_.store(any && all, std::memory_order_relaxed);
}

// A kernel replayed from a graph, traced on its own: its share of the graph's launches.
void Processor::calibrate(const dctx_gpu_activity &r, dctx_node node, double duration,
                          double occupancy) {
  GraphCalibration &g = graph_seen(r.graph_id, r.correlation);
  auto span = g.spans.find(r.correlation);
  if (span == g.spans.end()) {
    if (g.full()) return;
    span = g.spans.emplace(r.correlation, std::make_pair(r.start, r.end)).first;
  }
  span->second.first = std::min(span->second.first, r.start);
  span->second.second = std::max(span->second.second, r.end);
  auto [it, fresh] = g.by_graph_node.try_emplace(r.graph_node, g.kernels.size());
  if (fresh) g.kernels.push_back({});
  GraphKernel &k = g.kernels[it->second];
  k.node = node;
  k.time += duration;
  k.count += 1;
  k.occupancy = occupancy;
  g.kernel_time += duration;
}

// A whole graph launch (CUPTI graph-level records), timed from its first node's start to its last
// node's end. If the graph's kernels were traced one by one over earlier launches, they get the
// launch's time in the proportions measured then, scaled by how much of a launch's span they
// filled (gaps between nodes are not kernel time). Else the launch stays one "graph N" node at
// its launch site. (With DEEPCONTEXT_CUPTI_GRAPHS=graph every launch is whole from the start;
// turning graph-level records on mid-run, after per-node launches, crashed the JAX MLP inside
// CUPTI on the H200 when done from another thread: DEEPCONTEXT_CUPTI_GRAPHS=switch, an
// experiment, does it on the launching thread instead, tracer.cpp.)
void Processor::graph(const dctx_gpu_activity &r) {
  GraphCalibration &g = graph_seen(r.graph_id, r.correlation);
  const double duration = r.end > r.start ? static_cast<double>(r.end - r.start) : 0.0;
  dctx_node replay = 0;
  const bool launched_here = correlations_.get(r.correlation, &replay);
  if (!launched_here) replay = unattributed();
  double spans = 0;
  for (const auto &[corr, span] : g.spans)
    spans += static_cast<double>(span.second > span.first ? span.second - span.first : 0);
  double kernel_time = 0;
  dctx_node interval_node = replay;
  if (spans > 0 && g.kernel_time > 0) {
    const double launches = static_cast<double>(g.spans.size());
    for (const GraphKernel &k : g.kernels) {
      const double t = duration * k.time / spans;
      dctx_add(k.node, m_gpu_time_, t);
      dctx_add(k.node, m_launches_, k.count / launches);
      if (k.occupancy > 0) dctx_add(k.node, m_occupancy_, k.occupancy * k.count / launches);
      kernel_time += t;
    }
    stats_.kernels += static_cast<uint64_t>(static_cast<double>(g.kernels.size()) + 0.5);
    ++stats_.graph_launches_timed;
  } else {
    // Not measured per kernel yet: the launch's span, under the replay site, named as a graph.
    interval_node =
        dctx_child(replay, named_frame(DCTX_FRAME_KERNEL, "graph " + std::to_string(r.graph_id) +
                                                              " (kernels not traced one by one)"));
    dctx_add(interval_node, m_gpu_time_, duration);
    dctx_add(interval_node, m_launches_, 1);
    kernel_time = duration;
    ++stats_.graph_launches_uncalibrated;
  }
  stats_.gpu_time_ns += kernel_time;
  if (launched_here) dctx_add(replay, m_graph_time_, kernel_time);
  if (r.device != kHostDevice && r.end > r.start) {  // INT_MAX: the graph started on the host
    DeviceState &dev = device(r.device);
    if (dev.pending.size() >= kIdleWindow) sweep_device(dev, false);
    dev.pending.push_back({r.start, r.end, replay, 0, true});
  }
  if (dctx_timeline_on()) timeline_event(DCTX_FRAME_KERNEL, interval_node, r, launched_here);
}

void Processor::timeline_event(dctx_frame_kind kind, dctx_node node, const dctx_gpu_activity &r,
                               bool launched_here) {
  const uint32_t step =
      launched_here && launch_steps_ != nullptr
          ? __atomic_load_n(&launch_steps_[r.correlation & (kLaunchSteps - 1)], __ATOMIC_RELAXED)
          : dctx_timeline_step();
  const int64_t start = static_cast<int64_t>(r.start) - clock_offset_;
  const int64_t end = static_cast<int64_t>(r.end > r.start ? r.end : r.start) - clock_offset_;
  dctx_timeline_record_gpu(kind, node, start, end, step, r.device, r.stream);
}

// Buffers arrive out of order (a flush can deliver older kernels after newer ones), so kernel
// intervals wait in a window sorted by start; the older half of a full window is swept as the
// window fills, the rest at finish. A record older than what was swept only extends the busy time.
void Processor::sweep_device(DeviceState &dev, bool all) {
  if (dev.pending.empty()) return;
  std::sort(dev.pending.begin(), dev.pending.end(),
            [](const Interval &a, const Interval &b) { return a.start < b.start; });
  const size_t n = all ? dev.pending.size() : dev.pending.size() / 2;
  for (size_t i = 0; i < n; ++i) {
    const Interval &k = dev.pending[i];
    if (k.window != dev.window) {
      dev.busy_until = 0;  // sampling: the time between two windows was not traced
      dev.window = k.window;
    }
    if (dev.busy_until != 0 && k.start > dev.busy_until) {
      const double gap = static_cast<double>(k.start - dev.busy_until);
      double weight = 1.0;
      if (sampling_) {
        std::lock_guard windows(windows_mutex_);
        weight = weight_of(k.window, k.graph);
      }
      record_sampled_ = k.sampled;
      add(k.node, m_idle_, gap, weight, k.graph);
      record_sampled_ = false;
      dev.idle_ns += gap * (weight == 0.0 ? scale_ : weight);  // the newest window: nominal
    }
    dev.busy_until = std::max(dev.busy_until, k.end);
  }
  dev.pending.erase(dev.pending.begin(), dev.pending.begin() + static_cast<long>(n));
}

void Processor::sweep_idle(bool all) {
  for (auto &[ordinal, dev] : devices_)
    if (all || dev.pending.size() >= kIdleWindow) sweep_device(dev, all);
}

void Processor::process(const dctx_gpu_activity *records, size_t count) {
  std::lock_guard lock(mutex_);
  if (dctx_timeline_on()) {
    // CUPTI's timestamps follow the wall clock; the timeline's clock is CLOCK_MONOTONIC.
    timespec wall, mono;
    clock_gettime(CLOCK_REALTIME, &wall);
    clock_gettime(CLOCK_MONOTONIC, &mono);
    clock_offset_ = (int64_t(wall.tv_sec) - int64_t(mono.tv_sec)) * 1000000000 +
                    (int64_t(wall.tv_nsec) - int64_t(mono.tv_nsec));
  }
  for (size_t i = 0; i < count; ++i) {
    switch (records[i].kind) {
      case DCTX_GPU_KERNEL:
        kernel(records[i]);
        break;
      case DCTX_GPU_MEMCPY:
        memcpy(records[i]);
        break;
      case DCTX_GPU_MEMSET:
        memset(records[i]);
        break;
      case DCTX_GPU_GRAPH:
        graph(records[i]);
        break;
      default:
        break;
    }
  }
  sweep_idle(false);
  if (calibrate_graphs_.load(std::memory_order_relaxed) && !graphs_.empty())
    update_graphs_calibrated();
}

void Processor::add_dropped(uint64_t count) {
  std::lock_guard lock(mutex_);
  stats_.dropped += count;
}

void Processor::publish_devices() {
  nlohmann::ordered_json list = nlohmann::ordered_json::array();
  for (const auto &[ordinal, dev] : devices_) {
    const dctx_gpu_device &p = dev.props;
    list.push_back(
        {{"ordinal", ordinal},
         {"name", std::string(p.name)},
         {"compute_capability", std::to_string(p.cc_major) + "." + std::to_string(p.cc_minor)},
         {"sm_count", p.sm_count},
         {"max_threads_per_sm", p.max_threads_per_sm},
         {"max_blocks_per_sm", p.max_blocks_per_sm},
         {"registers_per_sm", p.regs_per_sm},
         {"shared_memory_per_sm", p.smem_per_sm},
         {"clock_khz", p.clock_khz},
         {"memory_clock_khz", p.mem_clock_khz},
         {"total_memory", p.total_mem},
         {"idle_ns", std::llround(dev.idle_ns)}});
  }
  dctx_set_meta("gpu_devices", json_text(list).c_str());
}

void Processor::finish(bool final) {
  std::lock_guard lock(mutex_);
  sweep_idle(true);
  publish_devices();
  stats_.launches_expected = expected_.load(std::memory_order_relaxed);
  const ProcessorStats &s = stats_;
  const nlohmann::ordered_json stats = {
      {"kernels", s.kernels},
      {"memcpys", s.memcpys},
      {"memsets", s.memsets},
      {"graph_kernels", s.graph_kernels},
      {"graph_launches_timed", s.graph_launches_timed},
      {"graph_launches_uncalibrated", s.graph_launches_uncalibrated},
      {"unattributed", s.unattributed},
      {"dropped", s.dropped},
      {"launches_expected", s.launches_expected},
      {"launches_received", s.launches_received},
      {"launch_calls", calls_.load(std::memory_order_relaxed)},
      {"outside_windows", s.outside_windows},
      {"gpu_time_ns", std::llround(s.gpu_time_ns)},
      {"sampled_gpu_time_ns", std::llround(s.sampled_gpu_time_ns)}};
  dctx_set_meta("gpu_stats", json_text(stats).c_str());
  char buf[768];
  if (sampling_) {
    // The analyzer says that GPU times and savings are estimates (analyzer/report.py).
    std::snprintf(buf, sizeof buf, "%lld", (long long)windows_opened_);
    dctx_set_meta("gpu_sampling_windows", buf);
  }
  if (!final) return;
  if (s.dropped > 0) {
    std::snprintf(buf, sizeof buf,
                  "CUPTI dropped %llu GPU activity records (its buffers were full): GPU metrics "
                  "are incomplete",
                  (unsigned long long)s.dropped);
    dctx_note(buf);
  }
  if (s.unattributed > 0) {
    std::snprintf(buf, sizeof buf,
                  "%llu GPU activity records had no launch context (launched before profiling "
                  "started); they are under <no launch context>",
                  (unsigned long long)s.unattributed);
    dctx_note(buf);
  }
  if (s.graph_launches_timed > 0) {
    std::snprintf(buf, sizeof buf,
                  "%llu CUDA graph launches were timed whole (CUPTI graph-level tracing, far "
                  "cheaper for graphs of many small kernels) and their time split across the "
                  "graph's kernels as measured one by one over its first %u launches",
                  (unsigned long long)s.graph_launches_timed, kCalibrationLaunches);
    dctx_note(buf);
  }
  if (s.graph_launches_uncalibrated > 0) {
    std::snprintf(buf, sizeof buf,
                  "%llu CUDA graph launches were timed whole before their kernels had been "
                  "measured one by one: their time is under 'graph N (kernels not traced one by "
                  "one)' at the launch site",
                  (unsigned long long)s.graph_launches_uncalibrated);
    dctx_note(buf);
  }
  if (sampling_) {
    std::snprintf(buf, sizeof buf,
                  "GPU activity was traced in %lld sampling windows (--cuda-graphs sample), each "
                  "record standing for the kernel launches its window stands for (by time where "
                  "a window saw none; nominally %.1fx its time and count): GPU totals are "
                  "estimates; %llu records that a window's edge cut were left out",
                  (long long)windows_opened_, scale_, (unsigned long long)s.outside_windows);
    dctx_note(buf);
  } else if (s.launches_expected > s.launches_received) {
    std::snprintf(buf, sizeof buf,
                  "%llu of %llu kernel launches produced no activity record (another CUPTI client "
                  "such as torch.profiler may have taken the activity buffers)",
                  (unsigned long long)(s.launches_expected - s.launches_received),
                  (unsigned long long)s.launches_expected);
    dctx_note(buf);
  }
}

ProcessorStats Processor::stats() const {
  std::lock_guard lock(mutex_);
  ProcessorStats s = stats_;
  s.launches_expected = expected_.load(std::memory_order_relaxed);
  return s;
}

}  // namespace dctx::gpu
