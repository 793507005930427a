// DeepContext PyTorch adapter: operator context through RecordFunction, backward work placed under
// the forward operator that created it, nn.Module path frames, and allocator reports by context.
//
// Compiled against the torch installed in the environment (only ATen/record_function.h and the
// few c10/profiler headers it needs), loaded by deepcontext.torch_support with ctypes after torch
// is imported. Talks to the core only through include/deepcontext/monitor.h.
//
// Hot-path rules (docs/design.md): per-thread state only; the Python stack is captured by the core
// once at the outermost operator entry; nothing here takes the GIL; every map is bounded.

#include <ATen/record_function.h>
#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>
#include <c10/core/GradMode.h>
#include <c10/util/ThreadLocalDebugInfo.h>

#if __has_include(<torch/csrc/profiler/orchestration/observer.h>)
#include <torch/csrc/profiler/orchestration/observer.h>
#define DCTX_HAVE_PROFILER_STATE_BASE 1
#else
#define DCTX_HAVE_PROFILER_STATE_BASE 0
#endif

#if __has_include(<c10/core/impl/alloc_cpu.h>)
#include <c10/core/impl/alloc_cpu.h>
#define DCTX_HAVE_CPU_ALLOCATOR_WRAPPER 1
#else
#define DCTX_HAVE_CPU_ALLOCATOR_WRAPPER 0
#endif

#include <pthread.h>
#include <time.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "deepcontext/monitor.h"
#include "deepcontext/timeline.h"
#include "live_table.h"  // beside this file, also in the package's copy for on-demand builds

#ifndef DCTX_TORCH_VERSION
#define DCTX_TORCH_VERSION "unknown"
#endif

#define DCTX_EXPORT extern "C" __attribute__((visibility("default")))

namespace {

// ---------------------------------------------------------------------------------------------
// Global configuration
// ---------------------------------------------------------------------------------------------

enum : int {
  kFlagShapes = 1,   // record input shapes/dtypes (needsInputs: boxing cost)
  kFlagMemory = 2,   // attribute allocator reports
  kFlagModules = 4,  // insert nn.Module path frames (the Python side pushes them)
};

std::atomic<bool> g_enabled{false};
std::atomic<bool> g_mem_enabled{false};
// Step-sampled tracing (deepcontext.step_sampling): between traced steps the RecordFunction
// callback is removed and allocations are not recorded (frees still are, so that live bytes stay
// right); inside a traced step of the sampled phase, values go to the core's sampled accumulators,
// which the writer scales by the steps each traced one stands for.
std::atomic<bool> g_tracing{true};
std::atomic<bool> g_sampled{false};
std::atomic<uint32_t> g_generation{1};  // bumped on install and in a forked child
int g_flags = 0;
at::CallbackHandle g_handle = 0;

dctx_metric g_m_op_count = 0;
dctx_metric g_m_op_time = 0;
dctx_metric g_m_alloc_bytes[2] = {0, 0};
dctx_metric g_m_alloc_count[2] = {0, 0};
dctx_metric g_m_peak_bytes[2] = {0, 0};
uint32_t g_backward_frame = 0;
int g_flush_handle = 0;

using ModuleFrameFn = uint32_t (*)();
std::atomic<ModuleFrameFn> g_module_frame_fn{nullptr};  // _core's, in stack mode

std::atomic<uint64_t> g_bwd_matched{0};
std::atomic<uint64_t> g_bwd_unmatched{0};
std::atomic<uint64_t> g_ops{0};

int64_t now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

// ---------------------------------------------------------------------------------------------
// Forward map: (forward thread id, sequence number) -> context node of the outermost forward
// operator that recorded that sequence number. One fixed-size ring per forward thread, indexed by
// seq; an entry packs (seq low 32 bits, node). Old entries are overwritten by newer sequence
// numbers, so memory is fixed however many iterations run; entries stay valid for a second
// backward through a retained graph.
// ---------------------------------------------------------------------------------------------

constexpr size_t kRingBits = 16;
constexpr size_t kRingSize = size_t(1) << kRingBits;
constexpr size_t kMaxThreads = 1024;

struct Ring {
  uint64_t tid;
  std::atomic<uint64_t> slots[kRingSize];
};

std::atomic<Ring *> g_rings[kMaxThreads];

uint64_t pack(int64_t seq, dctx_node node) {
  return (uint64_t(uint32_t(seq)) << 32) | uint64_t(node);
}

Ring *ring_for(uint64_t tid, bool create) {
  auto &cell = g_rings[tid % kMaxThreads];
  Ring *r = cell.load(std::memory_order_acquire);
  if (r != nullptr) return r->tid == tid ? r : nullptr;
  if (!create) return nullptr;
  auto *fresh = new Ring();
  fresh->tid = tid;
  for (auto &s : fresh->slots) s.store(0, std::memory_order_relaxed);
  Ring *expected = nullptr;
  if (cell.compare_exchange_strong(expected, fresh, std::memory_order_acq_rel)) return fresh;
  delete fresh;
  return expected->tid == tid ? expected : nullptr;
}

void ring_put(Ring *r, int64_t seq, dctx_node node) {
  r->slots[size_t(seq) & (kRingSize - 1)].store(pack(seq, node), std::memory_order_release);
}

dctx_node ring_get(uint64_t tid, int64_t seq) {
  Ring *r = ring_for(tid, false);
  if (r == nullptr) return 0;
  uint64_t v = r->slots[size_t(seq) & (kRingSize - 1)].load(std::memory_order_acquire);
  if ((v >> 32) != uint64_t(uint32_t(seq))) return 0;
  return dctx_node(v & 0xffffffffu);
}

void rings_clear() {
  for (auto &cell : g_rings) {
    Ring *r = cell.load(std::memory_order_acquire);
    if (r == nullptr) continue;
    for (auto &s : r->slots) s.store(0, std::memory_order_relaxed);
  }
}

// ---------------------------------------------------------------------------------------------
// Per-thread operator stack
// ---------------------------------------------------------------------------------------------

struct OpEntry {
  const at::RecordFunction *rf;
  dctx_node node;
  int64_t start_ns;
  int64_t child_ns;
  int64_t seq;    // -1 when not recorded in the forward map
  uint32_t step;  // timeline step at entry
  bool sampled;   // entered in a traced step of the sampled phase
  bool scope;     // a user scope (record_function): Python code runs inside it
};

struct NameSlot {
  const char *ptr = nullptr;
  std::string name;
  uint32_t frame = 0;
};

constexpr size_t kNameSlots = 512;

// Lookup by string_view without building a std::string (names of backward functions live in the
// record itself, so their pointer changes from call to call and the slot cache misses).
struct NameHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>()(s); }
};

struct NodeMem;  // memory by context (below)

struct ThreadState {
  uint32_t generation = 0;
  std::vector<OpEntry> ops;
  // Frame of the innermost nn.Module running on this thread (0: none), written by the Python
  // forward hooks through a ctypes view of this field (dctx_torch_module_cell).
  uint32_t module_frame = 0;
  NameSlot name_cache[kNameSlots];
  std::unordered_map<std::string, uint32_t, NameHash, std::equal_to<>> names;
  std::unordered_map<uint64_t, uint32_t> shape_frames;   // (name frame, shapes hash) -> frame
  std::unordered_map<uint32_t, std::string> shape_text;  // shaped frame -> its signature
  std::unordered_map<dctx_node, bool> shaped_nodes;      // nodes that have their "shapes" prop
  Ring *ring = nullptr;
  bool debug_info_pushed = false;
  bool yielded = false;    // torch.profiler holds the allocator-report slot on this thread
  dctx_node mem_node = 0;  // the node whose NodeMem this thread last allocated under
  NodeMem *mem = nullptr;

  void reset(uint32_t gen) {
    generation = gen;
    ops.clear();
    module_frame = 0;
    for (auto &s : name_cache) s = NameSlot();
    names.clear();
    shape_frames.clear();
    shape_text.clear();
    shaped_nodes.clear();
    ring = nullptr;
    mem_node = 0;
    mem = nullptr;
  }
};

ThreadState &tls() {
  static thread_local ThreadState state;
  uint32_t gen = g_generation.load(std::memory_order_relaxed);
  if (state.generation != gen) state.reset(gen);
  return state;
}

uint32_t frame_for(dctx_frame_kind kind, const char *name, const char *module) {
  dctx_frame f{kind, name, nullptr, 0, module};
  return dctx_frame_id(&f);
}

constexpr std::string_view kEvaluatePrefix = "autograd::engine::evaluate_function: ";

uint32_t op_frame(ThreadState &ts, const char *name) {
  if (name == nullptr) name = "<unnamed>";
  size_t h = (reinterpret_cast<uintptr_t>(name) >> 3) & (kNameSlots - 1);
  NameSlot &slot = ts.name_cache[h];
  const std::string_view key(name);
  if (slot.ptr == name && slot.frame != 0 && slot.name == key) return slot.frame;
  uint32_t frame;
  auto it = ts.names.find(key);
  if (it != ts.names.end()) {
    frame = it->second;
  } else {
    frame = frame_for(DCTX_FRAME_OPERATOR, name, nullptr);
    if (ts.names.size() > 65536) ts.names.clear();  // dynamic names (user scopes): stay bounded
    ts.names.emplace(std::string(key), frame);
  }
  slot.ptr = name;
  slot.name.assign(key);  // reuses the slot's buffer
  slot.frame = frame;
  return frame;
}

// "[64, 784] float, [10] float" for the tensor inputs of an operator (scalars as their type).
std::string describe_inputs(const at::RecordFunction &fn) {
  std::string out;
  for (const c10::IValue &v : fn.inputs()) {
    if (!out.empty()) out += ", ";
    if (v.isTensor()) {
      const at::Tensor &t = v.toTensor();
      if (!t.defined()) {
        out += "undefined";
        continue;
      }
      out += '[';
      bool first = true;
      for (int64_t d : t.sizes()) {
        if (!first) out += ", ";
        out += std::to_string(d);
        first = false;
      }
      out += "] ";
      out += std::string(c10::toString(t.scalar_type()));
    } else if (v.isTensorList()) {
      out += "tensor list[" + std::to_string(v.toTensorList().size()) + "]";
    } else if (v.isNone()) {
      out += "None";
    } else {
      out += v.tagKind();
    }
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// Memory: a MemoryReportingInfoBase installed in the thread-local PROFILER_STATE slot, the slot
// torch.profiler's profile_memory uses. The slot is also read as a ProfilerStateBase by torch
// (profilerEnabled(), "profiler already enabled" checks), so where that class exists we derive
// from it with a disabled config: torch sees "no profiler", torch.profiler can still start on top
// of us (while it runs, reports go to it, and we say so in a note).
// ---------------------------------------------------------------------------------------------

struct NodeMem {
  int64_t live[2] = {0, 0};
  int64_t peak[2] = {0, 0};
  int64_t reported_peak[2] = {0, 0};
  int64_t pending_bytes[2] = {0, 0};
  int64_t pending_count[2] = {0, 0};
  int64_t sampled_bytes[2] = {0, 0};  // in traced steps of the sampled phase
  int64_t sampled_count[2] = {0, 0};
};

using LiveTable = dctx::LiveTable<NodeMem>;

std::mutex g_mem_mu;
LiveTable *g_live = nullptr;
// Element addresses of an unordered_map are stable: live entries and the threads' caches point
// at them. Cleared only in a forked child, where every thread state starts over.
std::unordered_map<dctx_node, NodeMem> *g_node_mem = nullptr;
std::atomic<bool> g_noted_shadowed{false};

void report_alloc(void *ptr, int64_t size, c10::Device device) {
  if (!g_mem_enabled.load(std::memory_order_relaxed) || ptr == nullptr || size == 0) return;
  const int dev = device.is_cpu() ? 0 : 1;
  const uintptr_t key = reinterpret_cast<uintptr_t>(ptr) ^ (uintptr_t(dev) << 63);
  if (size > 0) {
    if (!g_tracing.load(std::memory_order_relaxed)) return;
    const bool sampled = g_sampled.load(std::memory_order_relaxed);
    ThreadState &ts = tls();
    const dctx_node node =
        !ts.ops.empty() && !ts.ops.back().scope ? ts.ops.back().node : dctx_current();
    std::lock_guard<std::mutex> lock(g_mem_mu);
    // Allocations inside one operator come from one node: remember its NodeMem on the thread.
    if (ts.mem_node != node || ts.mem == nullptr) {
      ts.mem = &(*g_node_mem)[node];
      ts.mem_node = node;
    }
    NodeMem &m = *ts.mem;
    g_live->put(key, &m, size);
    m.live[dev] += size;
    m.peak[dev] = std::max(m.peak[dev], m.live[dev]);
    (sampled ? m.sampled_bytes : m.pending_bytes)[dev] += size;
    (sampled ? m.sampled_count : m.pending_count)[dev] += 1;
  } else {
    std::lock_guard<std::mutex> lock(g_mem_mu);
    LiveTable::Slot s;
    if (g_live->take(key, &s)) s.mem->live[dev] -= s.size;
  }
}

#if DCTX_HAVE_PROFILER_STATE_BASE
using ReporterBase = torch::profiler::impl::ProfilerStateBase;
#else
using ReporterBase = c10::MemoryReportingInfoBase;
#endif

struct MemoryReporter final : ReporterBase {
#if DCTX_HAVE_PROFILER_STATE_BASE
  MemoryReporter()
      : ReporterBase(
            torch::profiler::impl::ProfilerConfig(torch::profiler::impl::ProfilerState::Disabled)) {
  }
  torch::profiler::impl::ActiveProfilerType profilerType() override {
    return torch::profiler::impl::ActiveProfilerType::NONE;
  }
#endif
  void reportMemoryUsage(void *ptr, int64_t alloc_size, size_t, size_t,
                         c10::Device device) override {
    report_alloc(ptr, alloc_size, device);
  }
  void reportOutOfMemory(int64_t alloc_size, size_t, size_t, c10::Device device) override {
    if (!g_mem_enabled.load(std::memory_order_relaxed)) return;
    std::string msg =
        "out of memory on " + device.str() + " allocating " + std::to_string(alloc_size) + " bytes";
    dctx_note(msg.c_str());
  }
  bool memoryProfilingEnabled() const override {
    return g_mem_enabled.load(std::memory_order_relaxed);
  }
};

std::shared_ptr<MemoryReporter> *g_reporter = nullptr;

// Whether this thread's allocator reports reach our reporter (and not torch.profiler's).
bool reporter_holds_slot() {
  return g_reporter != nullptr &&
         c10::ThreadLocalDebugInfo::get(c10::DebugInfoKind::PROFILER_STATE) == g_reporter->get();
}

#if DCTX_HAVE_CPU_ALLOCATOR_WRAPPER
// CPU allocations reach us without torch's ProfiledCPUMemoryReporter: while our reporter is on,
// torch's default CPU allocator also keeps every block in its own mutex-guarded hash map (a node
// allocated and freed per tensor) and looks up the thread's debug info twice per report; that
// was about 0.5 us of the ~2.8 us deepcontext added per eager operator (bench/torch_op_cost.py,
// CPU "ops" loop). This allocator does what torch's default one does (c10::alloc_cpu /
// c10::free_cpu) and reports to us directly, on the threads where torch would have reported to
// us; elsewhere (our reporter not installed, torch.profiler holding the slot, memory off) it
// hands the call to the default allocator, whose reports then go where they always went.
// Installed over torch's default CPU allocator only (not over a custom one) while memory is on.
bool reporting_here() {
  return g_mem_enabled.load(std::memory_order_relaxed) && reporter_holds_slot();
}

void cpu_delete(void *ptr) {
  if (ptr != nullptr && reporting_here()) report_alloc(ptr, -1, c10::Device(c10::kCPU));
  c10::free_cpu(ptr);
}

struct CpuAllocator final : at::Allocator {
  at::Allocator *base = nullptr;  // torch's default CPU allocator
  at::DataPtr allocate(size_t nbytes) override {
    if (!reporting_here()) return base->allocate(nbytes);
    void *data = nullptr;
    try {
      data = c10::alloc_cpu(nbytes);
    } catch (c10::Error &) {
      (*g_reporter)->reportOutOfMemory(int64_t(nbytes), 0, 0, c10::Device(c10::kCPU));
      throw;
    }
    report_alloc(data, int64_t(nbytes), c10::Device(c10::kCPU));
    return {data, data, &cpu_delete, c10::Device(c10::kCPU)};
  }
  at::DeleterFnPtr raw_deleter() const override { return &cpu_delete; }
  void copy_data(void *dest, const void *src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }
};

CpuAllocator *g_cpu_allocator = nullptr;

void wrap_cpu_allocator() {
  at::Allocator *def = c10::GetDefaultCPUAllocator();
  if (c10::GetCPUAllocator() != def) return;  // someone else's allocator: torch's path reports
  g_cpu_allocator->base = def;
  c10::SetCPUAllocator(g_cpu_allocator);
}

void unwrap_cpu_allocator() {
  // Blocks allocated meanwhile keep cpu_delete: it still frees them, and stops reporting once
  // memory is off.
  if (c10::GetCPUAllocator() == g_cpu_allocator) c10::SetCPUAllocator(g_cpu_allocator->base);
}
#else
void wrap_cpu_allocator() {}
void unwrap_cpu_allocator() {}
#endif

// Installs the reporter on this thread if its PROFILER_STATE slot is free. Returns false when
// another profiler (torch.profiler) holds the slot.
void ensure_reporter(ThreadState &ts) {
  if (ts.yielded) return;
  c10::DebugInfoBase *cur = c10::ThreadLocalDebugInfo::get(c10::DebugInfoKind::PROFILER_STATE);
  if (cur == nullptr) {
    c10::ThreadLocalDebugInfo::_push(c10::DebugInfoKind::PROFILER_STATE, *g_reporter);
    ts.debug_info_pushed = true;
    return;
  }
  if (cur != g_reporter->get() && !g_noted_shadowed.exchange(true)) {
    dctx_note(
        "torch: another profiler (torch.profiler) held the allocator-report slot on a thread; "
        "memory by call path is not recorded there while it runs");
  }
}

void flush_memory(int /*final*/, void * /*user*/) {
  struct Out {
    dctx_node node;
    int dev;
    int64_t bytes, count, peak_delta, sampled_bytes, sampled_count;
  };
  std::vector<Out> out;
  {
    std::lock_guard<std::mutex> lock(g_mem_mu);
    if (g_node_mem == nullptr) return;
    for (auto &[node, m] : *g_node_mem) {
      for (int dev = 0; dev < 2; ++dev) {
        int64_t dp = m.peak[dev] - m.reported_peak[dev];
        if (m.pending_count[dev] == 0 && m.sampled_count[dev] == 0 && dp <= 0) continue;
        out.push_back(Out{node, dev, m.pending_bytes[dev], m.pending_count[dev], dp,
                          m.sampled_bytes[dev], m.sampled_count[dev]});
        m.pending_bytes[dev] = m.sampled_bytes[dev] = 0;
        m.pending_count[dev] = m.sampled_count[dev] = 0;
        if (dp > 0) m.reported_peak[dev] = m.peak[dev];
      }
    }
  }
  for (const Out &o : out) {
    if (o.count > 0) {
      dctx_add(o.node, g_m_alloc_bytes[o.dev], double(o.bytes));
      dctx_add(o.node, g_m_alloc_count[o.dev], double(o.count));
    }
    if (o.sampled_count > 0) {
      dctx_add_sampled(o.node, g_m_alloc_bytes[o.dev], double(o.sampled_bytes));
      dctx_add_sampled(o.node, g_m_alloc_count[o.dev], double(o.sampled_count));
    }
    if (o.peak_delta > 0) dctx_add(o.node, g_m_peak_bytes[o.dev], double(o.peak_delta));
  }
}

// ---------------------------------------------------------------------------------------------
// RecordFunction callbacks
// ---------------------------------------------------------------------------------------------

std::unique_ptr<at::ObserverContext> on_start(const at::RecordFunction &fn) {
  if (!g_enabled.load(std::memory_order_relaxed) || fn.isAsync()) return nullptr;
  ThreadState &ts = tls();
  if (g_mem_enabled.load(std::memory_order_relaxed) && ts.ops.empty()) ensure_reporter(ts);

  const at::RecordScope scope = fn.scope();
  const int64_t seq = fn.seqNr();
  uint32_t frame = op_frame(ts, fn.name());
  if ((g_flags & kFlagShapes) && fn.needsInputs() && scope != at::RecordScope::BACKWARD_FUNCTION) {
    std::string shapes;
    try {
      shapes = describe_inputs(fn);
    } catch (...) {
      shapes = "?";
    }
    uint64_t key = (uint64_t(frame) << 32) ^ std::hash<std::string>()(shapes);
    auto it = ts.shape_frames.find(key);
    uint32_t shaped;
    if (it != ts.shape_frames.end()) {
      shaped = it->second;
    } else {
      // The signature is part of the frame, so calls with different shapes get their own nodes.
      shaped = frame_for(DCTX_FRAME_OPERATOR, fn.name(), shapes.c_str());
      if (ts.shape_frames.size() > 65536) {
        ts.shape_frames.clear();
        ts.shape_text.clear();
      }
      ts.shape_frames.emplace(key, shaped);
      ts.shape_text.emplace(shaped, std::move(shapes));
    }
    frame = shaped;
  }

  dctx_node node = 0;
  if (scope == at::RecordScope::BACKWARD_FUNCTION && seq >= 0) {
    dctx_node fwd = ring_get(fn.forwardThreadId(), seq);
    if (fwd != 0) {
      dctx_node marker = dctx_child(fwd, g_backward_frame);
      // The engine's record around this function (`autograd::engine::evaluate_function: X`)
      // also runs work outside it: the sum that reduces a broadcast gradient, the add_ that
      // accumulates a gradient used twice. That open record becomes the backward marker itself,
      // so its work lands beside the function, under the forward path.
      if (!ts.ops.empty() && ts.ops.back().node != 0 &&
          std::string_view(ts.ops.back().rf->name()).starts_with(kEvaluatePrefix) &&
          dctx_current() == ts.ops.back().node) {
        ts.ops.back().node = marker;
        dctx_retarget(marker);
      }
      node = dctx_enter_node(DCTX_DOMAIN_OPERATOR, dctx_child(marker, frame));
      g_bwd_matched.fetch_add(1, std::memory_order_relaxed);
    } else {
      g_bwd_unmatched.fetch_add(1, std::memory_order_relaxed);
    }
  }
  const bool user_scope = scope == at::RecordScope::USER_SCOPE;
  // Outermost: no operator open on this thread (a user scope around Python code is not one).
  const bool outermost = ts.ops.empty() || ts.ops.back().scope;
  if (node == 0 && user_scope) {
    // record_function from Python: the code inside is Python, and the operators it calls go
    // below the lines that call them, not below the line that opened the scope.
    node = dctx_enter_scope_id(DCTX_DOMAIN_OPERATOR, frame);
  } else if (node == 0) {
    uint32_t module_frame = 0;
    if (outermost) {
      // The innermost running nn.Module: read from the Python stack (_core's module frame
      // function) or, where that cannot be read, set by the forward hooks into the cell.
      ModuleFrameFn from_stack = g_module_frame_fn.load(std::memory_order_acquire);
      module_frame = from_stack != nullptr ? from_stack() : ts.module_frame;
    }
    if (module_frame != 0) {
      // Outermost operator inside an nn.Module: python frames -> module path -> operator.
      dctx_node base = dctx_current();
      dctx_node mod = dctx_child(base, module_frame);
      node = dctx_enter_node(DCTX_DOMAIN_OPERATOR, dctx_child(mod, frame));
    } else {
      node = dctx_enter_id(DCTX_DOMAIN_OPERATOR, frame);
    }
  }

  if ((g_flags & kFlagShapes) && frame != 0) {
    auto st = ts.shape_text.find(frame);
    if (st != ts.shape_text.end() && ts.shaped_nodes.emplace(node, true).second) {
      if (ts.shaped_nodes.size() > (1u << 20)) ts.shaped_nodes.clear();
      dctx_set_prop(node, "input_shapes", st->second.c_str());
    }
  }

  int64_t recorded_seq = -1;
  if (seq >= 0 && scope == at::RecordScope::FUNCTION && c10::GradMode::is_enabled()) {
    // Keep the outermost operator among nested ones that share this sequence number.
    bool ancestor_has = false;
    for (auto it = ts.ops.rbegin(); it != ts.ops.rend(); ++it) {
      if (it->seq == seq) {
        ancestor_has = true;
        break;
      }
    }
    if (!ancestor_has) {
      if (ts.ring == nullptr) ts.ring = ring_for(at::RecordFunction::currentThreadId(), true);
      if (ts.ring != nullptr) {
        ring_put(ts.ring, seq, node);
        recorded_seq = seq;
      }
    }
  }
  ts.ops.push_back(OpEntry{&fn, node, now_ns(), 0, recorded_seq, dctx_timeline_step(),
                           g_sampled.load(std::memory_order_relaxed), user_scope});
  // Intra-op pool threads (at::parallel_for, OpenMP) run no Python and no RecordFunction: the
  // sampler puts their CPU time under the operator running meanwhile.
  dctx_set_worker_context(node);
  return nullptr;
}

void on_end(const at::RecordFunction &fn, at::ObserverContext * /*ctx*/) {
  ThreadState &ts = tls();
  if (ts.ops.empty()) return;
  // Normally the top; tolerate out-of-order ends (e.g. a record_function left open by a generator)
  // by closing everything above the matching entry.
  size_t idx = ts.ops.size();
  while (idx > 0 && ts.ops[idx - 1].rf != &fn) --idx;
  if (idx == 0) return;
  const int64_t t = now_ns();
  while (ts.ops.size() >= idx) {
    OpEntry e = ts.ops.back();
    ts.ops.pop_back();
    int64_t elapsed = t - e.start_ns;
    int64_t excl = elapsed - e.child_ns;
    if (excl < 0) excl = 0;
    if (g_enabled.load(std::memory_order_relaxed)) {
      if (e.sampled)
        dctx_add2_sampled(e.node, g_m_op_time, double(excl), g_m_op_count, 1.0);
      else
        dctx_add2(e.node, g_m_op_time, double(excl), g_m_op_count, 1.0);
      if (dctx_timeline_on())
        dctx_timeline_record(DCTX_FRAME_OPERATOR, e.node, e.start_ns, t, e.step);
    }
    if (!ts.ops.empty()) ts.ops.back().child_ns += elapsed;
    dctx_exit(DCTX_DOMAIN_OPERATOR);
  }
  // After the outermost operator the pool may still spin-wait for a while: that time stays with
  // the operator whose parallel region left it spinning.
  if (!ts.ops.empty()) dctx_set_worker_context(ts.ops.back().node);
  g_ops.fetch_add(1, std::memory_order_relaxed);
}

bool add_callback() {
  try {
    auto cb = at::RecordFunctionCallback(on_start, on_end)
                  .scopes({at::RecordScope::FUNCTION, at::RecordScope::BACKWARD_FUNCTION,
                           at::RecordScope::USER_SCOPE})
                  .needsInputs((g_flags & kFlagShapes) != 0);
    g_handle = at::addGlobalCallback(cb);
    return true;
  } catch (...) {
    return false;
  }
}

void remove_callback() {
  if (g_handle == 0) return;
  try {
    at::removeCallback(g_handle);
  } catch (...) {
  }
  g_handle = 0;
}

void fork_prepare() { g_mem_mu.lock(); }
void fork_parent() { g_mem_mu.unlock(); }
void fork_child() {
  g_mem_mu.unlock();
  // The child starts a new profile (or none): node ids and frames of the parent are not its own.
  g_generation.fetch_add(1, std::memory_order_relaxed);
  rings_clear();
  if (g_live != nullptr) g_live->clear();
  if (g_node_mem != nullptr) g_node_mem->clear();
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// C interface used by deepcontext.torch_support (ctypes)
// ---------------------------------------------------------------------------------------------

DCTX_EXPORT const char *dctx_torch_built_for(void) { return DCTX_TORCH_VERSION; }

DCTX_EXPORT int dctx_torch_api_version(void) { return DCTX_API_VERSION; }

/* Installs the RecordFunction callback (and, with flag 2, the allocator reporter on the calling
 * thread; other threads get it at their first operator). Returns 0, or -1 on failure. */
DCTX_EXPORT int dctx_torch_install(int flags) {
  if (g_enabled.load()) return 0;
  static std::once_flag once;
  std::call_once(once, [] {
    g_live = new LiveTable();
    g_node_mem = new std::unordered_map<dctx_node, NodeMem>();
    g_reporter = new std::shared_ptr<MemoryReporter>(std::make_shared<MemoryReporter>());
#if DCTX_HAVE_CPU_ALLOCATOR_WRAPPER
    g_cpu_allocator = new CpuAllocator();  // never freed: blocks keep its deleter
#endif
    pthread_atfork(fork_prepare, fork_parent, fork_child);
    // record_function opens its scope through these frames: the scope belongs to their caller.
    dctx_add_scope_opener("torch/autograd/profiler.py");
    dctx_add_scope_opener("torch/_ops.py");
  });
  g_flags = flags;
  g_generation.fetch_add(1);
  g_m_op_count = dctx_metric_id("op_count", "count", "operator calls");
  g_m_op_time = dctx_metric_id("op_time", "ns",
                               "operator time on its CPU thread (exclusive at the operator node)");
  g_m_alloc_bytes[0] = dctx_metric_id("alloc_bytes", "bytes", "bytes allocated (CPU allocator)");
  g_m_alloc_count[0] = dctx_metric_id("alloc_count", "count", "allocations (CPU allocator)");
  g_m_peak_bytes[0] =
      dctx_metric_id("peak_bytes", "bytes", "highest live bytes allocated here (CPU allocator)");
  g_m_alloc_bytes[1] =
      dctx_metric_id("gpu_alloc_bytes", "bytes", "bytes allocated (GPU caching allocator)");
  g_m_alloc_count[1] =
      dctx_metric_id("gpu_alloc_count", "count", "allocations (GPU caching allocator)");
  g_m_peak_bytes[1] = dctx_metric_id("gpu_peak_bytes", "bytes",
                                     "highest live bytes allocated here (GPU caching allocator)");
  g_backward_frame = frame_for(DCTX_FRAME_BACKWARD, "backward", nullptr);
  // In a forked child that restarts profiling the parent's callback is still registered (and
  // inert since dctx_torch_disable_in_child): reuse it instead of adding a second one.
  g_tracing.store(true);
  g_sampled.store(false);
  if (g_handle == 0 && !add_callback()) return -1;
  g_enabled.store(true);
  if (flags & kFlagMemory) {
    g_mem_enabled.store(true);
    if (g_flush_handle == 0) g_flush_handle = dctx_register_flush_hook(flush_memory, nullptr);
    wrap_cpu_allocator();
    ensure_reporter(tls());
  }
  return 0;
}

/* Stops recording. The callback is removed; the reporter stays in the threads' debug-info chains
 * but reports nothing (memoryProfilingEnabled() turns false), and is popped on the calling thread
 * when it is on top. */
DCTX_EXPORT void dctx_torch_uninstall(void) {
  if (!g_enabled.exchange(false)) return;
  flush_memory(0, nullptr);
  g_mem_enabled.store(false);
  unwrap_cpu_allocator();
  remove_callback();
  g_tracing.store(true);
  g_sampled.store(false);
  if (g_flush_handle != 0) {
    dctx_unregister_flush_hook(g_flush_handle);
    g_flush_handle = 0;
  }
  ThreadState &ts = tls();
  if (ts.debug_info_pushed && g_reporter != nullptr &&
      c10::ThreadLocalDebugInfo::get(c10::DebugInfoKind::PROFILER_STATE) == g_reporter->get()) {
    try {
      c10::ThreadLocalDebugInfo::_pop(c10::DebugInfoKind::PROFILER_STATE);
      ts.debug_info_pushed = false;
    } catch (...) {
    }
  }
}

/* Step-sampled tracing: mode 0 removes the RecordFunction callback and stops recording
 * allocations (a step that is not traced costs the program nothing of ours); 1 traces at weight
 * 1 (warm-up, a run without steps); 2 traces a step that stands for others (sampled values).
 * RecordFunction keeps the callbacks a record started with, so the operators open at a switch
 * still end through on_end. Called between steps by one thread. */
DCTX_EXPORT int dctx_torch_set_tracing(int mode) {
  if (!g_enabled.load()) return -1;
  g_sampled.store(mode == 2);
  const bool on = mode != 0;
  if (g_tracing.exchange(on) == on) return 0;
  if (!on) {
    remove_callback();
    return 0;
  }
  return add_callback() ? 0 : -1;
}

/* In a forked child that is not profiled: stop without touching torch's callback registry (its
 * lock may have been held by another thread of the parent at fork time). */
DCTX_EXPORT void dctx_torch_disable_in_child(void) {
  g_enabled.store(false);
  g_mem_enabled.store(false);
}

/* nn.Module path frames (kind MODULE) for the Python forward hooks. */
DCTX_EXPORT uint32_t dctx_torch_module_frame(const char *path) {
  return frame_for(DCTX_FRAME_MODULE, path, nullptr);
}

/* Address of the calling thread's current-module frame id; the Python hooks set it. */
DCTX_EXPORT uint32_t *dctx_torch_module_cell(void) { return &tls().module_frame; }

/* Stack mode: fn() gives the innermost running module's frame at each outermost operator (no
 * module hooks); nullptr goes back to the cell the hooks write. */
DCTX_EXPORT void dctx_torch_set_module_frame_fn(void *fn) {
  g_module_frame_fn.store(reinterpret_cast<ModuleFrameFn>(fn), std::memory_order_release);
}

/* Counters for tests and notes: operators seen, backward records matched / not matched. */
DCTX_EXPORT void dctx_torch_stats(uint64_t *ops, uint64_t *bwd_matched, uint64_t *bwd_unmatched) {
  if (ops) *ops = g_ops.load();
  if (bwd_matched) *bwd_matched = g_bwd_matched.load();
  if (bwd_unmatched) *bwd_unmatched = g_bwd_unmatched.load();
}

/* Live allocations tracked right now (for the memory-flatness test). */
DCTX_EXPORT uint64_t dctx_torch_live_allocations(void) {
  std::lock_guard<std::mutex> lock(g_mem_mu);
  return g_live ? g_live->size() : 0;
}

/* Before torch.profiler starts on this thread: leave the PROFILER_STATE slot to it (it refuses to
 * start while the slot is taken). Returns 1 when our reporter was removed. */
DCTX_EXPORT int dctx_torch_memory_yield(void) {
  ThreadState &ts = tls();
  ts.yielded = true;
  if (g_reporter == nullptr) return 0;
  if (c10::ThreadLocalDebugInfo::get(c10::DebugInfoKind::PROFILER_STATE) != g_reporter->get())
    return 0;
  try {
    c10::ThreadLocalDebugInfo::_pop(c10::DebugInfoKind::PROFILER_STATE);
  } catch (...) {
    return 0;  // another kind of debug info is on top: leave the chain alone
  }
  ts.debug_info_pushed = false;
  if (g_mem_enabled.load() && !g_noted_shadowed.exchange(true)) {
    dctx_note(
        "torch: memory by call path was paused on the thread that ran torch.profiler, "
        "while it ran (both use PyTorch's one allocator-report slot); operators were "
        "recorded throughout");
  }
  return 1;
}

/* After torch.profiler stopped on this thread: take the slot back. */
DCTX_EXPORT void dctx_torch_memory_resume(void) {
  ThreadState &ts = tls();
  ts.yielded = false;
  if (g_mem_enabled.load() && g_reporter != nullptr) ensure_reporter(ts);
}

/* 1 when this thread's allocator reports reach us. */
DCTX_EXPORT int dctx_torch_memory_reporting_here(void) { return reporter_holds_slot(); }
