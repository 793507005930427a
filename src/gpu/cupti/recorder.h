/* Fixture capture: writes every intercepted callback and decoded activity record as one JSON line,
 * with the launching context as its full path, so tests can replay real CUPTI traffic without a
 * GPU (tests/gpu/replay.py). Any thread; serialised by one mutex (capture runs only). */
#ifndef DEEPCONTEXT_GPU_CUPTI_RECORDER_H
#define DEEPCONTEXT_GPU_CUPTI_RECORDER_H

#include <cstdint>
#include <cstdio>
#include <functional>
#include <mutex>
#include <nlohmann/json_fwd.hpp>
#include <set>
#include <string>

#include "deepcontext/monitor.h"
#include "records.h"

namespace dctx::gpu {

/* JSON text of a fixture line or of the layer's metadata (gpu_devices, gpu_stats). Kernel, file
 * and device names come from the program and the driver: bytes that are not UTF-8 are replaced
 * (U+FFFD), not refused. */
std::string json_text(const nlohmann::ordered_json &j);

class Recorder {
 public:
  using DeviceQuery = std::function<bool(uint32_t ordinal, dctx_gpu_device *out)>;
  Recorder(const char *path, DeviceQuery query);
  ~Recorder();
  void api_enter(const std::string &name, int domain, uint32_t correlation, bool outermost,
                 dctx_node context, uint64_t now_ns);
  void api_exit(uint64_t now_ns, bool failed);
  void graph_node(uint64_t id, uint64_t original, bool with_context, dctx_node context);
  void buffer(const dctx_gpu_activity *records, size_t count, uint64_t dropped);
  /* Sampled tracing: a window opens or closes at ts (CUPTI's clock); records weigh `scale`. */
  void window(bool open, uint64_t ts, uint32_t scale);
  /* Step-sampled tracing: a traced span begins (mode 1: weight 1, 2: sampled) or tracing stops. */
  void span(int mode);
  void close();

 private:
  static nlohmann::ordered_json path(dctx_node node);
  void write_line(const nlohmann::ordered_json &record);
  std::mutex mutex_;
  FILE *file_ = nullptr;
  DeviceQuery query_;
  std::set<uint32_t> devices_;
};

}  // namespace dctx::gpu

#endif
