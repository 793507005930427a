// The bounded timeline behind include/deepcontext/timeline.h: per-thread rings of fixed-size
// records, and what the writer reads out of them (the events of the last N complete steps).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace dctx::timeline {

// One record of a ring (32 bytes, plain data).
struct Event {
  int64_t start_ns, end_ns;  // CLOCK_MONOTONIC
  uint32_t node;             // CCT node: the event's full calling context
  uint32_t step;             // the step the event started in (GPU: the step of its launch)
  uint32_t lane;             // CPU: OS thread id; GPU: stream id
  uint16_t kind;             // dctx_frame_kind of node
  uint16_t device;           // GPU: device ordinal + 1; CPU: 0
};
static_assert(sizeof(Event) == 32);

struct Step {
  uint32_t step;
  int64_t start_ns, end_ns;
};

// What one write of the profile stores.
struct Window {
  bool enabled = false;  // configured with steps > 0 for this session
  uint32_t steps_requested = 0;
  uint32_t current_step = 0;  // the running step (not written unless no step ever ended)
  uint32_t events_per_thread = 0;
  std::vector<Step> steps;    // the steps kept, oldest first
  std::vector<Event> events;  // their events, by start time
  uint64_t recorded = 0, overwritten = 0, dropped = 0;
  uint32_t threads = 0;
  std::vector<std::pair<uint32_t, std::string>> thread_names;  // (OS thread id, name) per ring
  uint32_t incomplete_steps = 0;  // steps of the window whose oldest events a full ring lost
  std::vector<std::string> notes;
};

// Reads the rings without stopping their writers (records being overwritten while read are left
// out). Events whose node is >= node_count (made after the tree snapshot) are left out.
Window collect(size_t node_count);

}  // namespace dctx::timeline
