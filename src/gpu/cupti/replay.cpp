// Replay of recorded CUPTI callbacks and records through the same Processor the tracer uses.
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>

#include "deepcontext_cupti.h"
#include "processor.h"

struct dctx_cupti_replay {
  std::unordered_map<uint32_t, dctx_gpu_device> devices;
  std::unique_ptr<dctx::gpu::Processor> processor;
  std::map<std::string, dctx::gpu::ApiInfo> apis;
  std::unordered_map<uint64_t, dctx::gpu::ThreadState> threads;
};

extern "C" {

dctx_cupti_replay *dctx_cupti_replay_open(void) {
  if (!dctx_is_active()) return nullptr;
  auto *r = new dctx_cupti_replay;
  r->processor =
      std::make_unique<dctx::gpu::Processor>([r](uint32_t ordinal, dctx_gpu_device *out) {
        auto it = r->devices.find(ordinal);
        if (it == r->devices.end()) return false;
        *out = it->second;
        return true;
      });
  // Recorded traffic may mix per-node and whole-graph records of one graph (tests/gpu).
  r->processor->set_graph_calibration(true);
  return r;
}

void dctx_cupti_replay_device(dctx_cupti_replay *r, const dctx_gpu_device *device) {
  r->devices[device->ordinal] = *device;
}

void dctx_cupti_replay_api_enter(dctx_cupti_replay *r, uint64_t thread, const char *cupti_name,
                                 uint32_t correlation, dctx_node context, uint64_t now_ns) {
  auto it = r->apis.find(cupti_name);
  if (it == r->apis.end())
    it = r->apis.emplace(cupti_name, r->processor->make_api(cupti_name)).first;
  r->processor->api_enter(r->threads[thread], it->second, correlation, context, now_ns);
}

void dctx_cupti_replay_api_exit(dctx_cupti_replay *r, uint64_t thread, uint64_t now_ns,
                                int failed) {
  r->processor->api_exit(r->threads[thread], now_ns, failed != 0);
}

void dctx_cupti_replay_graph_node(dctx_cupti_replay *r, uint64_t thread, uint64_t graph_node,
                                  uint64_t original, dctx_node context) {
  if (original != 0)
    r->processor->graph_node_cloned(graph_node, original);
  else
    r->processor->graph_node_created(r->threads[thread], graph_node, context);
}

void dctx_cupti_replay_buffer(dctx_cupti_replay *r, const dctx_gpu_activity *records, size_t n,
                              uint64_t dropped) {
  r->processor->process(records, n);
  if (dropped) r->processor->add_dropped(dropped);
}

void dctx_cupti_replay_window(dctx_cupti_replay *r, int open, uint64_t ts, double scale) {
  if (open) {
    r->processor->set_sampling(scale);
    r->processor->window_open(ts);
  } else if (scale > 0) {
    r->processor->window_close(ts);
  } else {
    r->processor->end_sampling(ts);
  }
}

void dctx_cupti_replay_span(dctx_cupti_replay *r, int mode) {
  if (mode != 0) r->processor->begin_span(mode == 2);
}

void dctx_cupti_replay_close(dctx_cupti_replay *r) {
  if (!r) return;
  r->processor->finish(true);
  delete r;
}

}  // extern "C"
