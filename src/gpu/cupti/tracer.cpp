// The CUPTI subscriber: libcupti loaded with dlopen, launch/copy/sync callbacks feeding the
// Processor on the launching thread, activity buffers decoded and processed on CUPTI's thread.
#include <cupti.h>
#include <dlfcn.h>
#include <pthread.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "deepcontext_cupti.h"
#include "nvtx.h"
#include "processor.h"
#include "recorder.h"

namespace dctx::gpu {
namespace {

// Entry points of libcupti, resolved once at start; cupti.h only provides their types.
struct CuptiApi {
  decltype(&cuptiSubscribe) subscribe = nullptr;
  decltype(&cuptiUnsubscribe) unsubscribe = nullptr;
  decltype(&cuptiEnableCallback) enable_callback = nullptr;
  decltype(&cuptiGetCallbackName) callback_name = nullptr;
  decltype(&cuptiActivityEnable) activity_enable = nullptr;
  decltype(&cuptiActivityDisable) activity_disable = nullptr;
  decltype(&cuptiActivityRegisterCallbacks) register_callbacks = nullptr;
  decltype(&cuptiActivityFlushAll) flush_all = nullptr;
  decltype(&cuptiActivityGetNextRecord) next_record = nullptr;
  decltype(&cuptiActivityGetNumDroppedRecords) dropped_records = nullptr;
  decltype(&cuptiGetResultString) result_string = nullptr;
  decltype(&cuptiGetGraphNodeId) graph_node_id = nullptr;
  decltype(&cuptiGetTimestamp) timestamp = nullptr;

  bool load(void *lib) {
    bool ok = true;
    auto sym = [&](auto &fn, const char *name) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(lib, name));
      ok = ok && fn != nullptr;
    };
    sym(subscribe, "cuptiSubscribe");
    sym(unsubscribe, "cuptiUnsubscribe");
    sym(enable_callback, "cuptiEnableCallback");
    sym(callback_name, "cuptiGetCallbackName");
    sym(activity_enable, "cuptiActivityEnable");
    sym(activity_disable, "cuptiActivityDisable");
    sym(register_callbacks, "cuptiActivityRegisterCallbacks");
    sym(flush_all, "cuptiActivityFlushAll");
    sym(next_record, "cuptiActivityGetNextRecord");
    sym(dropped_records, "cuptiActivityGetNumDroppedRecords");
    sym(result_string, "cuptiGetResultString");
    sym(graph_node_id, "cuptiGetGraphNodeId");
    sym(timestamp, "cuptiGetTimestamp");
    return ok;
  }
  std::string describe(CUptiResult r) const {
    const char *s = nullptr;
    if (result_string && result_string(r, &s) == CUPTI_SUCCESS && s) return s;
    return "CUPTI error " + std::to_string(static_cast<int>(r));
  }
};

// Device properties from the driver, read on the buffer thread the first time a device appears
// (the driver is initialised by then: it ran the kernel).
class DriverQuery {
 public:
  bool operator()(uint32_t ordinal, dctx_gpu_device *out) {
    std::call_once(once_, [this] { load(); });
    if (!get_ || !attr_) return false;
    CUdevice dev = 0;
    if (get_(&dev, static_cast<int>(ordinal)) != CUDA_SUCCESS) return false;
    auto a = [&](CUdevice_attribute attr) {
      int v = 0;
      return attr_(&v, attr, dev) == CUDA_SUCCESS && v > 0 ? static_cast<uint32_t>(v) : 0u;
    };
    out->ordinal = ordinal;
    if (!name_ || name_(out->name, sizeof out->name, dev) != CUDA_SUCCESS) out->name[0] = 0;
    out->cc_major = a(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR);
    out->cc_minor = a(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR);
    out->sm_count = a(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT);
    out->max_threads_per_sm = a(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR);
    out->max_blocks_per_sm = a(CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR);
    out->regs_per_sm = a(CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR);
    out->smem_per_sm = a(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR);
    out->reserved_smem_per_block = a(CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK);
    out->warp_size = a(CU_DEVICE_ATTRIBUTE_WARP_SIZE);
    out->clock_khz = a(CU_DEVICE_ATTRIBUTE_CLOCK_RATE);
    out->mem_clock_khz = a(CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE);
    size_t bytes = 0;
    if (mem_ && mem_(&bytes, dev) == CUDA_SUCCESS) out->total_mem = bytes;
    return true;
  }

 private:
  void load() {
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
    if (!lib) lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) return;
    get_ = reinterpret_cast<decltype(get_)>(dlsym(lib, "cuDeviceGet"));
    attr_ = reinterpret_cast<decltype(attr_)>(dlsym(lib, "cuDeviceGetAttribute"));
    name_ = reinterpret_cast<decltype(name_)>(dlsym(lib, "cuDeviceGetName"));
    mem_ = reinterpret_cast<decltype(mem_)>(dlsym(lib, "cuDeviceTotalMem_v2"));
  }
  std::once_flag once_;
  CUresult (*get_)(CUdevice *, int) = nullptr;
  CUresult (*attr_)(int *, CUdevice_attribute, CUdevice) = nullptr;
  CUresult (*name_)(char *, int, CUdevice) = nullptr;
  CUresult (*mem_)(size_t *, CUdevice) = nullptr;
};

// 1 MiB holds about 5,000 kernel records. Small buffers come back (and get reused) often, so the
// pages touched reach their bound within a few steps instead of after hundreds of steps of 8 MiB
// buffers filling up. DEEPCONTEXT_CUPTI_BUFFER_KB overrides it (64 KiB to 64 MiB).
size_t buffer_size() {
  static const size_t size = [] {
    const char *env = std::getenv("DEEPCONTEXT_CUPTI_BUFFER_KB");
    const long kb = env ? std::strtol(env, nullptr, 10) : 0;
    return kb >= 64 && kb <= 65536 ? static_cast<size_t>(kb) << 10 : size_t{1} << 20;
  }();
  return size;
}

// Activity buffers come from mmap and go back to a small free list: reusing the same pages keeps
// RSS flat over a long run (through malloc, glibc's dynamic mmap threshold moved 8 MiB buffers
// onto the heap, which kept the peak of buffers ever in flight and grew with the run's length).
class BufferPool {
 public:
  uint8_t *get() {
    {
      std::lock_guard lock(mu_);
      if (!free_.empty()) {
        uint8_t *b = free_.back();
        free_.pop_back();
        return b;
      }
    }
    void *p =
        mmap(nullptr, buffer_size(), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return p == MAP_FAILED ? nullptr : static_cast<uint8_t *>(p);
  }
  void put(uint8_t *buffer) {
    if (buffer == nullptr) return;
    {
      std::lock_guard lock(mu_);
      if (free_.size() < kKeep) {
        free_.push_back(buffer);
        return;
      }
    }
    munmap(buffer, buffer_size());
  }

 private:
  static constexpr size_t kKeep = 4;
  std::mutex mu_;
  std::vector<uint8_t *> free_;
};

BufferPool &buffer_pool() {
  static auto *pool = new BufferPool();  // CUPTI may complete buffers during exit
  return *pool;
}
constexpr CUpti_ActivityKind kActivityKinds[] = {
    CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY, CUPTI_ACTIVITY_KIND_MEMSET};
// Sampling: the launch calls the first window waits for by default (duty_loop).
constexpr unsigned long long kFirstWindowCalls = 5000;

uint64_t now_ns() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count());
}

class Tracer {
 public:
  int start(const char *candidates, const char *record_path);
  void stop();
  void flush(bool final);
  /* Step-sampled tracing: mode 0 turns the API callbacks and activity records off; 1 and 2 turn
   * them on for a span traced at weight 1 or one that stands for untraced steps (sampled). */
  int set_tracing(int mode);
  const std::string &message() const { return message_; }
  const std::string &library() const { return library_path_; }

 private:
  static void CUPTIAPI on_callback(void *user, CUpti_CallbackDomain domain, CUpti_CallbackId cbid,
                                   const void *data);
  static void CUPTIAPI on_buffer_requested(uint8_t **buffer, size_t *size, size_t *max_records);
  static void CUPTIAPI on_buffer_completed(CUcontext ctx, uint32_t stream, uint8_t *buffer,
                                           size_t size, size_t valid);
  static void on_flush(int final, void *user);

  bool load_library(const char *candidates);
  bool driver_present();
  void enable_api_callbacks(CUpti_CallbackDomain domain, uint32_t count,
                            std::vector<std::unique_ptr<ApiInfo>> &table);
  void api_callback(CUpti_CallbackDomain domain, CUpti_CallbackId cbid,
                    const CUpti_CallbackData *data);
  void resource_callback(CUpti_CallbackId cbid, const CUpti_ResourceData *data);
  void buffer_completed(CUcontext ctx, uint32_t stream, uint8_t *buffer, size_t valid);
  void wait_for_records();
  void duty_loop(uint32_t on_ms, uint32_t period_ms, uint64_t first_calls);
  void switch_api_callbacks(uint32_t enable);
  bool tracing_ = true;
  std::vector<CUpti_ActivityKind> enabled_kinds_;

  CuptiApi api_;
  void *lib_ = nullptr;
  std::string library_path_;
  std::string message_;
  CUpti_SubscriberHandle subscriber_ = nullptr;
  std::unique_ptr<Processor> processor_;
  std::unique_ptr<Recorder> recorder_;
  std::vector<std::unique_ptr<ApiInfo>> runtime_apis_, driver_apis_;
  std::atomic<bool> running_{false};
  int flush_hook_ = 0;
  std::mutex lifecycle_;
  // --cuda-graphs sample: a thread that turns the activity records on for on_ms of every
  // period_ms (duty_loop). A plain pthread, joined only by the process that started it: a forked
  // child has the handle but not the thread, and a std::thread left joinable would terminate the
  // program at exit.
  pthread_t duty_{};
  bool duty_running_ = false;
  pid_t duty_pid_ = 0;
  uint32_t duty_on_ms_ = 0, duty_period_ms_ = 0;
  uint64_t duty_first_calls_ = 0;
  std::mutex duty_mu_;
  std::condition_variable duty_cv_;
  bool duty_stop_ = false;
  bool sampling_ = false;
};

Tracer g_tracer;
thread_local ThreadState t_state;

bool Tracer::load_library(const char *candidates) {
  std::string tried;
  const std::string all = candidates ? candidates : "";
  size_t pos = 0;
  while (pos <= all.size()) {
    size_t end = all.find('\n', pos);
    if (end == std::string::npos) end = all.size();
    const std::string path = all.substr(pos, end - pos);
    pos = end + 1;
    if (path.empty()) continue;
    void *lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
      if (path.find('/') != std::string::npos) tried += (tried.empty() ? "" : ", ") + path;
      continue;
    }
    if (!api_.load(lib)) {
      dlclose(lib);
      tried += (tried.empty() ? "" : ", ") + path + " (too old)";
      continue;
    }
    lib_ = lib;
    char resolved[4096] = {};
    Dl_info info{};
    if (dladdr(reinterpret_cast<void *>(api_.subscribe), &info) && info.dli_fname)
      std::snprintf(resolved, sizeof resolved, "%s", info.dli_fname);
    library_path_ = resolved[0] ? resolved : path;
    return true;
  }
  message_ = "GPU metrics off: no CUPTI library found (set DEEPCONTEXT_CUPTI_PATH" +
             std::string(tried.empty() ? ")" : "; tried " + tried + ")");
  return false;
}

// libcupti dereferences the driver's tables unchecked: without libcuda it crashes in subscribe.
bool Tracer::driver_present() {
  void *cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  using VersionFn = CUresult (*)(int *);
  auto version = cuda ? reinterpret_cast<VersionFn>(dlsym(cuda, "cuDriverGetVersion")) : nullptr;
  int v = 0;
  if (version && version(&v) == CUDA_SUCCESS && v > 0) return true;
  message_ = cuda ? "GPU metrics off: the NVIDIA driver does not answer (cuDriverGetVersion)"
                  : "GPU metrics off: no NVIDIA driver (libcuda.so.1 not found)";
  return false;
}

void Tracer::enable_api_callbacks(CUpti_CallbackDomain domain, uint32_t count,
                                  std::vector<std::unique_ptr<ApiInfo>> &table) {
  table.clear();
  table.resize(count);
  for (uint32_t cbid = 1; cbid < count; ++cbid) {
    const char *name = nullptr;
    if (api_.callback_name(domain, cbid, &name) != CUPTI_SUCCESS || !name) continue;
    ApiInfo info = processor_->make_api(name);
    if (info.kind == DCTX_GPU_API_OTHER) continue;
    if (api_.enable_callback(1, subscriber_, domain, cbid) != CUPTI_SUCCESS) continue;
    table[cbid] = std::make_unique<ApiInfo>(std::move(info));
  }
}

int Tracer::start(const char *candidates, const char *record_path) {
  std::lock_guard lock(lifecycle_);
  if (running_) return DCTX_CUPTI_ACTIVE;
  if (!dctx_is_active()) {
    message_ = "GPU metrics off: the profiler core is not active";
    return DCTX_CUPTI_NO_CORE;
  }
  if (!driver_present()) {
    dctx_note(message_.c_str());
    return DCTX_CUPTI_NO_GPU;
  }
  if (!lib_ && !load_library(candidates)) {
    dctx_note(message_.c_str());
    return DCTX_CUPTI_NOT_FOUND;
  }
  auto driver = std::make_shared<DriverQuery>();
  auto query = [driver](uint32_t ordinal, dctx_gpu_device *out) { return (*driver)(ordinal, out); };
  processor_ = std::make_unique<Processor>(query);
  if (record_path && *record_path) recorder_ = std::make_unique<Recorder>(record_path, query);

  const CUptiResult sub = api_.subscribe(&subscriber_, &Tracer::on_callback, this);
  if (sub != CUPTI_SUCCESS) {
    subscriber_ = nullptr;
    processor_.reset();
    recorder_.reset();
    if (sub == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED) {
      message_ =
          "GPU metrics off: another CUPTI client is active (torch.profiler, nsys, ncu or "
          "a second profiler); the program runs unprofiled on the GPU";
      dctx_note(message_.c_str());
      return DCTX_CUPTI_CONFLICT;
    }
    message_ = "GPU metrics off: CUPTI refused to start (" + api_.describe(sub) + ")";
    dctx_note(message_.c_str());
    return DCTX_CUPTI_NO_GPU;
  }
  // API callbacks on the driver only, by default: a runtime call reaches the driver under its
  // own correlation id, so its kernels match all the same, and each launch costs CUPTI two
  // callbacks instead of four (about 1 us less per launch on the H200; docs/gpu.md). The API
  // frame is then the driver's name (cuLaunchKernel). DEEPCONTEXT_CUPTI_API_DOMAINS=runtime,driver
  // adds the runtime's (its names, e.g. cudaLaunchKernel, as the outermost call); "none" leaves
  // out both (diagnostic: activity records only, kernels go unattributed).
  const char *domains_env = std::getenv("DEEPCONTEXT_CUPTI_API_DOMAINS");
  const std::string domains = domains_env ? domains_env : "driver";
  if (domains.find("runtime") != std::string::npos)
    enable_api_callbacks(CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_SIZE, runtime_apis_);
  if (domains.find("driver") != std::string::npos)
    enable_api_callbacks(CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_SIZE, driver_apis_);
  dctx_set_meta("cupti_api_domains", domains.c_str());
  api_.enable_callback(1, subscriber_, CUPTI_CB_DOMAIN_RESOURCE,
                       CUPTI_CBID_RESOURCE_GRAPHNODE_CREATED);
  api_.enable_callback(1, subscriber_, CUPTI_CB_DOMAIN_RESOURCE,
                       CUPTI_CBID_RESOURCE_GRAPHNODE_CLONED);
  // XLA's thunk ranges (nvtx.cpp); they arrive only when CUPTI is the NVTX injection.
  // DEEPCONTEXT_CUPTI_NVTX=0 leaves them off (diagnostic: XLA and CUPTI's NVTX injection still
  // run, our handlers do not; tests/jax/gpu_check.py measures the difference).
  nvtx_reset();
  const char *nvtx_env = std::getenv("DEEPCONTEXT_CUPTI_NVTX");
  if (!nvtx_env || std::strcmp(nvtx_env, "0") != 0)
    for (uint32_t cbid : kNvtxCallbacks)
      api_.enable_callback(1, subscriber_, CUPTI_CB_DOMAIN_NVTX, cbid);

  CUptiResult r =
      api_.register_callbacks(&Tracer::on_buffer_requested, &Tracer::on_buffer_completed);
  // Diagnostic (bench/jax_overhead.py): DEEPCONTEXT_CUPTI_KERNELS=off records no kernels, =graph
  // one record per graph launch instead of one per kernel, to measure what per-kernel records
  // cost the program (kernels are then not attributed).
  const char *kernels_env = std::getenv("DEEPCONTEXT_CUPTI_KERNELS");
  const std::string_view kernels = kernels_env ? kernels_env : "";
  uint64_t enabled_at = 0;  // CUPTI's clock before the records are on (sampling's first window)
  api_.timestamp(&enabled_at);
  enabled_kinds_.clear();
  for (CUpti_ActivityKind kind : kActivityKinds) {
    if (kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL && (kernels == "off" || kernels == "graph"))
      kind = kernels == "graph" ? CUPTI_ACTIVITY_KIND_GRAPH_TRACE : CUPTI_ACTIVITY_KIND_MEMSET;
    if (r == CUPTI_SUCCESS) r = api_.activity_enable(kind);
    enabled_kinds_.push_back(kind);
  }
  tracing_ = true;
  // DEEPCONTEXT_CUPTI_GRAPHS=graph: CUDA graph launches as one record each (CUPTI graph-level
  // tracing), kernels outside graphs as before. CUPTI instruments every node of a launch to time
  // it, which for graphs of many small kernels (XLA's command buffers) costs more than the
  // kernels: a JAX MLP step ran 0.17 ms with per-node records, 0.10 ms with graph-level ones (H200,
  // docs/gpu.md). The price: a graph's kernels are not timed one by one. Set before any graph is
  // launched; switching mid-run crashed the program inside CUPTI.
  const char *graphs_env = std::getenv("DEEPCONTEXT_CUPTI_GRAPHS");
  std::string_view graphs = graphs_env && kernels.empty() ? graphs_env : "node";
  if (graphs == "switch") {
    // Graph-level records turned on mid-run crashed the JAX MLP inside CUPTI, from another thread
    // (H200) and from the launching thread's cuGraphLaunch callback (H100, 2026-12-06): the
    // experiment stays off so that the program is never harmed.
    dctx_note(
        "DEEPCONTEXT_CUPTI_GRAPHS=switch is disabled (switching CUPTI to graph-level records "
        "mid-run crashed programs): CUDA graphs traced per kernel");
    graphs = "node";
  } else if (graphs != "node" && graphs != "graph" && graphs != "sample") {
    const std::string note = "DEEPCONTEXT_CUPTI_GRAPHS=" + std::string(graphs) +
                             " is not node, graph or sample: CUDA graphs traced per kernel";
    dctx_note(note.c_str());
    graphs = "node";
  }
  if (r == CUPTI_SUCCESS && graphs == "graph")
    r = api_.activity_enable(CUPTI_ACTIVITY_KIND_GRAPH_TRACE);
  uint32_t sample_on = 0, sample_period = 0;
  unsigned long long first_calls = kFirstWindowCalls;
  if (graphs == "sample") {
    // Per-kernel records in windows of on_ms every period_ms (DEEPCONTEXT_CUPTI_SAMPLE,
    // on_ms:period_ms[:first_window_calls], default 100:1000:5000), each record weighted by what
    // its window stands for (nominally period / on): the per-node instrumentation of graph
    // launches is paid a tenth of the time (docs/gpu.md).
    const char *env = std::getenv("DEEPCONTEXT_CUPTI_SAMPLE");
    const int fields =
        env ? std::sscanf(env, "%u:%u:%llu", &sample_on, &sample_period, &first_calls) : 0;
    if (fields < 2 || sample_on == 0 || sample_period <= sample_on) {
      if (env) {
        dctx_note(
            "DEEPCONTEXT_CUPTI_SAMPLE is not on_ms:period_ms[:first_window_calls] (on < period): "
            "100:1000:5000");
      }
      sample_on = 100;
      sample_period = 1000;
      first_calls = kFirstWindowCalls;
    }
    processor_->set_sampling(double(sample_period) / double(sample_on));
    processor_->window_open(enabled_at);
    if (recorder_) recorder_->window(true, enabled_at, sample_period / sample_on);
    const std::string windows = std::to_string(sample_on) + ":" + std::to_string(sample_period);
    dctx_set_meta("cupti_sample_windows_ms", windows.c_str());
    dctx_set_meta("cupti_sample_first_window_calls", std::to_string(first_calls).c_str());
  }
  dctx_set_meta("cupti_graph_tracing", std::string(graphs).c_str());
  if (r != CUPTI_SUCCESS) {
    for (CUpti_ActivityKind kind : kActivityKinds) api_.activity_disable(kind);
    api_.unsubscribe(subscriber_);
    subscriber_ = nullptr;
    processor_.reset();
    recorder_.reset();
    message_ = "GPU metrics off: CUPTI activity tracing unavailable (" + api_.describe(r) + ")";
    dctx_note(message_.c_str());
    return DCTX_CUPTI_NO_GPU;
  }
  if (!flush_hook_) flush_hook_ = dctx_register_flush_hook(&Tracer::on_flush, this);
  dctx_set_meta("cupti_library", library_path_.c_str());
  sampling_ = sample_on > 0;
  if (sample_on > 0) {
    duty_stop_ = false;
    duty_on_ms_ = sample_on;
    duty_period_ms_ = sample_period;
    duty_first_calls_ = first_calls;
    duty_pid_ = getpid();
    auto body = [](void *self) -> void * {
      auto *t = static_cast<Tracer *>(self);
      t->duty_loop(t->duty_on_ms_, t->duty_period_ms_, t->duty_first_calls_);
      return nullptr;
    };
    duty_running_ = pthread_create(&duty_, nullptr, body, this) == 0;
    if (!duty_running_) {
      dctx_note("GPU sampling thread could not start: every record is traced, at weight 1");
      processor_->set_sampling(1.0);
    }
  }
  message_ = "GPU tracing on (" + library_path_ + ")";
  running_ = true;
  return DCTX_CUPTI_OK;
}

void Tracer::wait_for_records() {
  // Records of finished work arrive after a flush; those of work still running need more time.
  // Stop waiting when every launch has its record, or when nothing new came for a while.
  const uint64_t begin = now_ns();
  uint64_t last_progress = begin;
  uint64_t received = processor_->stats().launches_received;
  for (;;) {
    api_.flush_all(0);
    const ProcessorStats s = processor_->stats();
    if (s.launches_received >= s.launches_expected) break;
    const uint64_t now = now_ns();
    if (s.launches_received != received) {
      received = s.launches_received;
      last_progress = now;
    }
    if (now - last_progress > 500'000'000ull || now - begin > 5'000'000'000ull) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  api_.flush_all(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
}

// Sampled tracing: records on for on_ms, off for the rest of each period. Turning the activity
// kinds off and on is what torch.profiler's schedule does too; unlike switching CUPTI to
// graph-level records mid-run (which crashed, see start), it ran cleanly on the H100. The window
// edges are taken on CUPTI's clock before each switch: the processor keeps a record only if it
// lies wholly inside a window.
//
// A window stays open past on_ms until it has seen a number of launch calls, of kernels or of
// graphs (the first window more): tracing costs per launch, so a program that launches rarely is
// traced nearly whole at little cost, and a short run is traced whole instead of falling between
// windows (10,000 JAX MLP steps on the H100 ran in the off time after windows spent on import and
// compilation, and left one kernel record). Graph launches count: a JAX step is one or a few of
// them, and counting kernel launches alone kept the first window open for a whole 60,000-step run.
void Tracer::duty_loop(uint32_t on_ms, uint32_t period_ms, uint64_t first_calls) {
  constexpr uint64_t kMinWindowCalls = 200;
  std::unique_lock lock(duty_mu_);
  bool on = true, first = true;
  while (!duty_stop_) {
    const uint32_t wait = on ? on_ms : period_ms - on_ms;
    if (duty_cv_.wait_for(lock, std::chrono::milliseconds(wait), [this] { return duty_stop_; }))
      break;
    const uint64_t need = first ? first_calls : kMinWindowCalls;
    if (on && processor_->calls_in_window() < need) continue;
    first = false;
    on = !on;
    uint64_t ts = 0;
    api_.timestamp(&ts);
    if (recorder_) recorder_->window(on, ts, period_ms / on_ms);
    if (on) {
      processor_->window_open(ts);
      for (CUpti_ActivityKind kind : kActivityKinds) api_.activity_enable(kind);
    } else {
      processor_->window_close(ts);
      for (CUpti_ActivityKind kind : kActivityKinds) api_.activity_disable(kind);
    }
  }
}

void Tracer::switch_api_callbacks(uint32_t enable) {
  for (auto *table : {&runtime_apis_, &driver_apis_}) {
    const CUpti_CallbackDomain domain =
        table == &runtime_apis_ ? CUPTI_CB_DOMAIN_RUNTIME_API : CUPTI_CB_DOMAIN_DRIVER_API;
    for (size_t cbid = 1; cbid < table->size(); ++cbid)
      if ((*table)[cbid])
        api_.enable_callback(enable, subscriber_, domain, static_cast<CUpti_CallbackId>(cbid));
  }
}

// Callbacks go on before the records and off after them, so that every record has its launch's
// context. A kernel launched in a traced span may finish after the records are turned off: that
// its record still comes is what tests/gpu/test_step_sampling_live.py checks (launches received
// against expected); a record's span is found by its launch, whenever it arrives.
int Tracer::set_tracing(int mode) {
  std::lock_guard lock(lifecycle_);
  if (!running_ || sampling_) return -1;
  const bool on = mode != 0;
  if (on) processor_->begin_span(mode == 2);
  if (recorder_) recorder_->span(mode);
  if (on == tracing_) return 0;
  tracing_ = on;
  if (on) {
    switch_api_callbacks(1);
    for (CUpti_ActivityKind kind : enabled_kinds_) api_.activity_enable(kind);
  } else {
    for (CUpti_ActivityKind kind : enabled_kinds_) api_.activity_disable(kind);
    switch_api_callbacks(0);
  }
  return 0;
}

void Tracer::stop() {
  uint64_t stopped_at = 0;  // sampling: the last window stands for the time up to here
  if (api_.timestamp) api_.timestamp(&stopped_at);
  if (duty_running_) {
    duty_running_ = false;
    if (getpid() == duty_pid_) {
      {
        std::lock_guard l(duty_mu_);
        duty_stop_ = true;
      }
      duty_cv_.notify_all();
      pthread_join(duty_, nullptr);
    }
  }
  std::lock_guard lock(lifecycle_);
  if (!running_) return;
  wait_for_records();
  for (CUpti_ActivityKind kind : kActivityKinds) api_.activity_disable(kind);
  api_.activity_disable(CUPTI_ACTIVITY_KIND_GRAPH_TRACE);
  api_.flush_all(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  running_ = false;
  api_.unsubscribe(subscriber_);
  subscriber_ = nullptr;
  if (sampling_) {
    processor_->end_sampling(stopped_at);
    if (recorder_) recorder_->window(false, stopped_at, 0);  // scale 0: the end of sampling
  }
  processor_->finish(true);
  if (recorder_) recorder_->close();
}

void Tracer::flush(bool final) {
  if (final) {
    stop();
    return;
  }
  std::lock_guard lock(lifecycle_);
  if (!running_) return;
  api_.flush_all(0);
  processor_->finish(false);
}

void Tracer::on_flush(int final, void *user) { static_cast<Tracer *>(user)->flush(final != 0); }

void CUPTIAPI Tracer::on_callback(void *user, CUpti_CallbackDomain domain, CUpti_CallbackId cbid,
                                  const void *data) {
  auto *self = static_cast<Tracer *>(user);
  if (!self->running_.load(std::memory_order_relaxed)) return;
  if (domain == CUPTI_CB_DOMAIN_RUNTIME_API || domain == CUPTI_CB_DOMAIN_DRIVER_API)
    self->api_callback(domain, cbid, static_cast<const CUpti_CallbackData *>(data));
  else if (domain == CUPTI_CB_DOMAIN_RESOURCE)
    self->resource_callback(cbid, static_cast<const CUpti_ResourceData *>(data));
  else if (domain == CUPTI_CB_DOMAIN_NVTX)
    nvtx_callback(cbid, data);
}

// The launching thread's context: its call path (a worker context when it runs no Python, e.g.
// a per-device thread of a multi-device jitted call), below the XLA thunk range open there
// (nvtx.cpp: inside an XLA module range the call path is taken once per range).
dctx_node launch_context() { return nvtx_launch_context(); }

void Tracer::api_callback(CUpti_CallbackDomain domain, CUpti_CallbackId cbid,
                          const CUpti_CallbackData *data) {
  auto &table = domain == CUPTI_CB_DOMAIN_RUNTIME_API ? runtime_apis_ : driver_apis_;
  if (cbid >= table.size() || !table[cbid]) return;
  const ApiInfo &api = *table[cbid];
  ThreadState &state = t_state;
  const uint64_t now = now_ns();
  if (data->callbackSite == CUPTI_API_ENTER) {
    const bool outermost = state.depth == 0;
    const dctx_node context = outermost ? launch_context() : 0;
    if (recorder_)
      recorder_->api_enter(api.name, domain, data->correlationId, outermost, context, now);
    processor_->api_enter(state, api, data->correlationId, context, now);
  } else {
    const int status =
        data->functionReturnValue ? *static_cast<const int *>(data->functionReturnValue) : 0;
    if (recorder_) recorder_->api_exit(now, status != 0);
    processor_->api_exit(state, now, status != 0);
  }
}

void Tracer::resource_callback(CUpti_CallbackId cbid, const CUpti_ResourceData *data) {
  if (cbid != CUPTI_CBID_RESOURCE_GRAPHNODE_CREATED && cbid != CUPTI_CBID_RESOURCE_GRAPHNODE_CLONED)
    return;
  const auto *graph = static_cast<const CUpti_GraphData *>(data->resourceDescriptor);
  if (!graph || !graph->node) return;
  uint64_t id = 0, original = 0;
  if (api_.graph_node_id(graph->node, &id) != CUPTI_SUCCESS) return;
  if (cbid == CUPTI_CBID_RESOURCE_GRAPHNODE_CLONED) {
    if (!graph->originalNode || api_.graph_node_id(graph->originalNode, &original) != CUPTI_SUCCESS)
      return;
    if (recorder_) recorder_->graph_node(id, original, false, 0);
    processor_->graph_node_cloned(id, original);
    return;
  }
  ThreadState &state = t_state;
  const dctx_node context = state.depth == 0 ? launch_context() : 0;
  if (recorder_) recorder_->graph_node(id, 0, state.depth == 0, context);
  processor_->graph_node_created(state, id, context);
}

void CUPTIAPI Tracer::on_buffer_requested(uint8_t **buffer, size_t *size, size_t *max_records) {
  *buffer = buffer_pool().get();
  *size = *buffer ? buffer_size() : 0;
  *max_records = 0;
}

void CUPTIAPI Tracer::on_buffer_completed(CUcontext ctx, uint32_t stream, uint8_t *buffer, size_t,
                                          size_t valid) {
  g_tracer.buffer_completed(ctx, stream, buffer, valid);
  buffer_pool().put(buffer);
}

// The fields that every activity record decoded here carries (kernel, copy, memset, graph launch).
template <typename Record>
void common_fields(const Record *r, dctx_gpu_activity_kind kind, dctx_gpu_activity &a) {
  a.kind = kind;
  a.correlation = r->correlationId;
  a.start = r->start;
  a.end = r->end;
  a.device = r->deviceId;
  a.context = r->contextId;
  a.stream = r->streamId;
  a.graph_id = r->graphId;
}

void Tracer::buffer_completed(CUcontext ctx, uint32_t stream, uint8_t *buffer, size_t valid) {
  if (!processor_) return;
  // Diagnostic (bench/gpu_overhead.py's deepcontext-cupti-discard): records taken and dropped
  // unread, to tell CUPTI's own memory and time from ours.
  static const bool discard = std::getenv("DEEPCONTEXT_CUPTI_DISCARD") != nullptr;
  if (discard) return;
  thread_local std::vector<dctx_gpu_activity> decoded;
  decoded.clear();
  CUpti_Activity *record = nullptr;
  while (valid > 0 && api_.next_record(buffer, valid, &record) == CUPTI_SUCCESS) {
    dctx_gpu_activity a{};
    switch (record->kind) {
      case CUPTI_ACTIVITY_KIND_KERNEL:
      case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
        // Kernel10 (CUPTI 13.0) and Kernel11 (13.1+) share every field read here; 13.0 headers
        // lack Kernel11.
        const auto *k = reinterpret_cast<const CUpti_ActivityKernel10 *>(record);
        common_fields(k, DCTX_GPU_KERNEL, a);
        a.graph_node = k->graphNodeId;
        a.grid[0] = k->gridX, a.grid[1] = k->gridY, a.grid[2] = k->gridZ;
        a.block[0] = k->blockX, a.block[1] = k->blockY, a.block[2] = k->blockZ;
        a.registers = k->registersPerThread;
        a.static_smem = k->staticSharedMemory;
        a.dynamic_smem = k->dynamicSharedMemory;
        a.name = k->name;
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMCPY: {
        const auto *m = reinterpret_cast<const CUpti_ActivityMemcpy6 *>(record);
        common_fields(m, DCTX_GPU_MEMCPY, a);
        a.graph_node = m->graphNodeId;
        a.bytes = m->bytes;
        a.copy_kind = m->copyKind;
        a.src_kind = m->srcKind;
        a.dst_kind = m->dstKind;
        break;
      }
      case CUPTI_ACTIVITY_KIND_GRAPH_TRACE: {
        const auto *g = reinterpret_cast<const CUpti_ActivityGraphTrace2 *>(record);
        common_fields(g, DCTX_GPU_GRAPH, a);
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMSET: {
        const auto *m = reinterpret_cast<const CUpti_ActivityMemset4 *>(record);
        common_fields(m, DCTX_GPU_MEMSET, a);
        a.graph_node = m->graphNodeId;
        a.bytes = m->bytes;
        break;
      }
      default:
        continue;
    }
    decoded.push_back(a);
  }
  size_t dropped = 0;
  api_.dropped_records(ctx, stream, &dropped);
  if (recorder_) recorder_->buffer(decoded.data(), decoded.size(), dropped);
  processor_->process(decoded.data(), decoded.size());
  if (dropped) processor_->add_dropped(dropped);
}

}  // namespace
}  // namespace dctx::gpu

extern "C" {

int dctx_cupti_start(const char *candidates, const char *record_path) {
  return dctx::gpu::g_tracer.start(candidates, record_path);
}
void dctx_cupti_stop(void) { dctx::gpu::g_tracer.stop(); }
int dctx_cupti_set_tracing(int mode) { return dctx::gpu::g_tracer.set_tracing(mode); }
const char *dctx_cupti_message(void) { return dctx::gpu::g_tracer.message().c_str(); }
const char *dctx_cupti_library(void) { return dctx::gpu::g_tracer.library().c_str(); }

}  // extern "C"
