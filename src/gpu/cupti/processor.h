/* Turns GPU API callbacks and decoded activity records into calling-context nodes and metrics.
 * The launching thread calls api_enter/api_exit/graph_node_* (lock-free map stores, no I/O); the
 * buffer thread calls process() and finish(). Knows nothing of CUPTI: the tracer and the replay
 * entry points feed it, so the same logic runs on recorded records without a GPU. */
#ifndef DEEPCONTEXT_GPU_CUPTI_PROCESSOR_H
#define DEEPCONTEXT_GPU_CUPTI_PROCESSOR_H

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "deepcontext/monitor.h"
#include "records.h"

namespace dctx::gpu {

/* What the tracer knows of one API callback id. */
struct ApiInfo {
  dctx_gpu_api_kind kind = DCTX_GPU_API_OTHER;
  std::string name;   /* cudaLaunchKernel, without CUPTI's _vNNNN suffix */
  uint32_t frame = 0; /* dctx frame id of the API node */
};

dctx_gpu_api_kind classify_api(std::string_view name);
/* "cudaLaunchKernel_v7000" -> "cudaLaunchKernel"; "cuLaunchKernel_ptsz" stays. */
std::string api_display_name(std::string_view cupti_name);

/* Per launching thread: the outermost intercepted API call in progress (a runtime call's driver
 * calls are nested in it and share its node). */
struct ThreadState {
  uint32_t depth = 0;
  dctx_node node = 0;
  const ApiInfo *info = nullptr;
  uint64_t enter_ns = 0;
  uint32_t enter_step = 0; /* timeline step at entry */
  bool captured = false; /* a launch recorded into a graph under stream capture: no record comes */
  int64_t span = 0;      /* step-sampled tracing: the span of the last call entered here */
  /* Launches repeat from one context (an operator's kernels): the last (context, API) -> node. */
  dctx_node cached_context = 0;
  uint32_t cached_frame = 0;
  dctx_node cached_node = 0;
};

/* correlation id -> node, bounded: a fixed ring indexed by the id, each slot one atomic word
 * holding (id, node). A lookup matches only its own id, so an evicted entry is a miss, never a
 * wrong context. */
class CorrelationMap {
 public:
  explicit CorrelationMap(size_t capacity_pow2 = size_t{1} << 20);
  void put(uint32_t correlation, dctx_node node) {
    slots_[correlation & mask_].store((uint64_t{correlation} << 32) | node,
                                      std::memory_order_release);
  }
  bool get(uint32_t correlation, dctx_node *node) const {
    const uint64_t v = slots_[correlation & mask_].load(std::memory_order_acquire);
    if ((v >> 32) != correlation || v == 0) return false;
    *node = static_cast<dctx_node>(v & 0xffffffffu);
    return true;
  }

 private:
  std::unique_ptr<std::atomic<uint64_t>[]> slots_;
  size_t mask_;
};

struct ProcessorStats {
  uint64_t kernels = 0, memcpys = 0, memsets = 0;
  uint64_t graph_kernels = 0; /* kernels replayed from a graph, placed at their capture site */
  uint64_t graph_launches_timed = 0; /* graph launches timed whole, split by their calibration */
  uint64_t graph_launches_uncalibrated = 0; /* timed whole before any per-kernel calibration */
  uint64_t unattributed = 0;                /* records whose correlation id had no launch context */
  uint64_t dropped = 0;                     /* records CUPTI reported as dropped */
  uint64_t launches_expected = 0; /* kernel launch calls that must produce one record each */
  uint64_t launches_received = 0; /* kernel records (not from graphs) that matched a launch */
  uint64_t outside_windows = 0;   /* sampling: records not wholly inside a tracing window */
  double gpu_time_ns = 0;         /* traced at weight 1 */
  double sampled_gpu_time_ns = 0; /* traced in sampled spans, before the writer's weight */
};

class Processor {
 public:
  using DeviceQuery = std::function<bool(uint32_t ordinal, dctx_gpu_device *out)>;
  /* Registers metrics and frames: the core must be active. */
  explicit Processor(DeviceQuery query);
  ~Processor();
  Processor(const Processor &) = delete;
  Processor &operator=(const Processor &) = delete;

  ApiInfo make_api(std::string_view cupti_name) const;

  /* context: the thread's unified call path, read by the caller only when state.depth == 0. */
  void api_enter(ThreadState &state, const ApiInfo &api, uint32_t correlation, dctx_node context,
                 uint64_t now_ns);
  void api_exit(ThreadState &state, uint64_t now_ns, bool failed);
  /* context as in api_enter (used when no intercepted API call is in progress). */
  void graph_node_created(ThreadState &state, uint64_t graph_node, dctx_node context);
  void graph_node_cloned(uint64_t graph_node, uint64_t original);

  /* One activity buffer's records (any order). Serialised internally. */
  void process(const dctx_gpu_activity *records, size_t count);
  void add_dropped(uint64_t count);
  /* Writes device metadata and counters into the profile's meta; with final, also the notes on
   * dropped, unattributed or missing records. */
  void finish(bool final);

  ProcessorStats stats() const;

  /* Launches of a graph whose kernels are measured one by one to split later whole-graph records
   * by (Processor::graph). */
  static constexpr uint32_t kCalibrationLaunches = 50;
  /* Experiment (tracer.cpp, DEEPCONTEXT_CUPTI_GRAPHS=switch): true while every graph launched
   * among the last kRecentGraphLaunches graph launches has been measured over
   * kCalibrationLaunches launches. */
  static constexpr uint64_t kRecentGraphLaunches = 500;
  bool graphs_calibrated() const { return graphs_calibrated_.load(std::memory_order_relaxed); }
  /* Keep per-kernel measurements of graph launches (only worth their memory, about 100 bytes per
   * graph node, when whole-graph records may follow). Set before the first record. */
  void set_graph_calibration(bool on) { calibrate_graphs_.store(on, std::memory_order_relaxed); }
  uint64_t launches_expected() const { return expected_.load(std::memory_order_relaxed); }

  /* Sampled tracing (tracer.cpp, --cuda-graphs sample): activity records are on only inside
   * windows. A record counts only if it starts and ends inside one window (a graph launch cut by
   * a window's end gets its unfinished nodes' end times from the next window: seen on the H100),
   * and weighs the launch calls of its kind (graph launches for a graph node's record, the other
   * launches for the rest) from its window's opening to the next one's over those made inside the
   * window (of either kind when it saw none of its own; by wall time, nominally period / on, when
   * it saw no launch). The newest window's additions wait until that is known: the next window's
   * opening, or end_sampling at the end of the run. Windows open and close on CUPTI's clock.
   * set_sampling before the first record; scale: the nominal weight. */
  void set_sampling(double scale);
  void window_open(uint64_t cupti_ts);
  void window_close(uint64_t cupti_ts);
  void end_sampling(uint64_t cupti_ts);
  /* Launch calls (kernels and graphs) made since the newest window opened (all before the first).
   */
  uint64_t calls_in_window() const;

  /* Step-sampled tracing (tracer.cpp set_tracing, deepcontext.step_sampling): the API callbacks
   * and activity records are on only in traced steps. Each traced span starts at the correlation
   * id after the last one seen, so a record finds its span by its launch's id whenever it
   * arrives; a sampled span's values go to the core's sampled accumulators (dctx_add_sampled),
   * which the writer scales by the steps each traced one stands for. Idle gaps are measured
   * within a span. Called by the thread that switches, between launches. */
  void begin_span(bool sampled);

 private:
  struct Interval {
    uint64_t start, end;
    dctx_node node;
    int64_t window;       /* sampling: gaps between two windows are not idle time */
    bool graph;           /* a graph node's work: weighed by graph launches */
    bool sampled = false; /* in a sampled span of step-sampled tracing */
  };
  struct DeviceState {
    bool known = false;
    dctx_gpu_device props{};
    uint64_t busy_until = 0;
    int64_t window = -1;
    double idle_ns = 0;
    std::vector<Interval> pending;
  };
  /* A graph's kernels as measured per node while CUPTI traced them one by one: what a later
   * whole-graph record (start to end of the launch) is split by. */
  struct GraphKernel {
    dctx_node node = 0; /* the kernel's node under its capture site */
    double time = 0;    /* summed over the calibration launches */
    double count = 0;
    double occupancy = 0; /* theoretical, of its last launch */
  };
  struct GraphCalibration {
    std::vector<GraphKernel> kernels;
    std::unordered_map<uint64_t, size_t> by_graph_node; /* CUPTI graph node id -> kernels index */
    std::unordered_map<uint32_t, std::pair<uint64_t, uint64_t>> spans; /* launch -> first, last */
    double kernel_time = 0;
    uint32_t last_launch = 0; /* correlation id of the last launch seen */
    uint64_t last_seen = 0;   /* graph_launches_ when it was seen */
    bool full() const { return spans.size() >= kCalibrationLaunches; }
  };
  struct KernelShape {
    int32_t grid[3], block[3];
    uint32_t registers;
    int32_t static_smem, dynamic_smem;
    bool operator==(const KernelShape &) const = default;
  };

  dctx_node base_node(const dctx_gpu_activity &record, bool *from_graph);
  /* Counts a record whose correlation id had no launch context; the node it goes under. */
  dctx_node unattributed();
  void kernel(const dctx_gpu_activity &record);
  void memcpy(const dctx_gpu_activity &record);
  void memset(const dctx_gpu_activity &record);
  void calibrate(const dctx_gpu_activity &record, dctx_node node, double duration,
                 double occupancy);
  void graph(const dctx_gpu_activity &record);
  GraphCalibration &graph_seen(uint32_t graph_id, uint32_t correlation);
  void update_graphs_calibrated();
  DeviceState &device(uint32_t ordinal);
  uint32_t kernel_frame(const char *mangled);
  uint32_t named_frame(dctx_frame_kind kind, const std::string &name);
  void sweep_idle(bool all);
  /* 16384 kernel intervals (384 KiB per device): more than one 1 MiB activity buffer holds. */
  static constexpr size_t kIdleWindow = size_t{1} << 14;
  void sweep_device(DeviceState &dev, bool all);
  void publish_devices();
  /* The bounded timeline (include/deepcontext/timeline.h): the record's interval on
   * CLOCK_MONOTONIC, under the step its launch was made in. */
  void timeline_event(dctx_frame_kind kind, dctx_node node, const dctx_gpu_activity &record,
                      bool launched_here);

  DeviceQuery query_;
  CorrelationMap correlations_;
  std::atomic<uint64_t> expected_{0};
  /* Launch calls of kernels and of graphs, and of graphs alone: the units of the sampling
   * windows (a window closes after enough calls; a record weighs the calls of its own kind). */
  std::atomic<uint64_t> calls_{0};
  std::atomic<uint64_t> graph_calls_{0};
  void count_launch(dctx_gpu_api_kind kind, bool add);
  /* Timeline step of each correlation id's launch, indexed like the correlation map. Mapped
   * anonymous memory: no page is touched unless the timeline records. */
  static constexpr size_t kLaunchSteps = size_t{1} << 20;
  uint32_t *launch_steps_ = nullptr;
  int64_t clock_offset_ = 0; /* CUPTI clock (wall-clock based) minus CLOCK_MONOTONIC, per buffer */

  std::mutex graph_mutex_;
  std::unordered_map<uint64_t, dctx_node> graph_nodes_;

  mutable std::mutex mutex_;  // everything below: buffer processing
  ProcessorStats stats_;
  std::unordered_map<uint32_t, DeviceState> devices_;
  std::unordered_map<std::string, uint32_t> kernel_frames_;
  std::unordered_map<std::string, uint32_t> named_frames_;
  std::unordered_map<dctx_node, KernelShape> shapes_;
  std::unordered_map<uint32_t, GraphCalibration> graphs_; /* by CUPTI graph id */
  uint64_t graph_launches_ = 0; /* launches of any graph seen, by either kind of record */
  std::atomic<bool> graphs_calibrated_{false};
  std::atomic<bool> calibrate_graphs_{false};
  dctx_node unattributed_node_ = 0;

  /* Sampling windows, the newest last: times on CUPTI's clock and the launch calls (all, and
   * of graphs) at opening and closing; the closing ones UINT64_MAX while open. */
  struct Calls {
    uint64_t all, graphs;
  };
  struct Window {
    int64_t index;
    uint64_t open, close;
    Calls at_open, at_close;
  };
  Calls calls_now() const;
  static constexpr size_t kMaxWindows = 256; /* records arrive within seconds of their window */
  mutable std::mutex windows_mutex_;         /* after mutex_ when both are held */
  std::vector<Window> windows_;
  int64_t windows_opened_ = 0;
  double scale_ = 1.0;
  bool sampling_ = false;
  /* The newest window's additions, unweighted: (node << 32 | graph << 31 | metric) -> sum. */
  std::unordered_map<uint64_t, double> pending_;
  /* sampling: false for a record outside every window (counted); else its window and weight
   * (0: the newest window, weight not known yet). Without sampling: window 0, weight 1. */
  bool sampled(const dctx_gpu_activity &record, int64_t *window, double *weight);
  /* What window w stands for until the next opening (or the end of the run) at time `until`
   * with `calls_until` counted, for a record of a graph node (graph) or not: the launch calls of
   * that kind then over those inside the window; of either kind when it saw none of its own; by
   * wall time when it saw no launch at all. */
  double window_weight(const Window &w, uint64_t until, Calls calls_until, bool graph) const;
  /* Weight of window `index` (0 for the newest); windows_mutex_ held. */
  double weight_of(int64_t index, bool graph) const;
  /* Step-sampled spans, the newest last: the first correlation id of each. Records may wait in
   * CUPTI's buffers until a flush (every checkpoint, 60 s): kMaxSpans spans are kept (1 MiB). */
  static constexpr size_t kMaxSpans = size_t{1} << 16;
  struct Span {
    uint32_t first;
    int64_t index;
    bool sampled;
  };
  std::vector<Span> spans_; /* under windows_mutex_ */
  std::atomic<int64_t> spans_begun_{0};
  std::atomic<bool> spans_on_{false};
  std::atomic<bool> span_sampled_{false}; /* the span now open: the launching threads' sync time */
  std::atomic<uint32_t> last_correlation_{0};
  bool record_sampled_ = false; /* the record being processed lies in a sampled span (mutex_) */
  /* dctx_add of raw * weight, or into pending_ (as a graph node's or not) when weight is 0. */
  void add(dctx_node node, dctx_metric metric, double raw, double weight, bool graph = false);
  void flush_pending(const Window &w, uint64_t until, Calls calls_until);

  dctx_metric m_gpu_time_, m_launches_, m_occupancy_, m_idle_, m_sync_, m_graph_time_;
  dctx_metric m_memcpy_time_, m_memcpy_bytes_, m_memset_time_, m_memset_bytes_;
};

}  // namespace dctx::gpu

#endif
