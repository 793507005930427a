// CPU sampling. A sampler thread wakes every interval, takes the GIL (so every other Python
// thread is stopped at a consistent point), and for each thread adds the CPU time it used since
// the last tick (from its pthread CPU clock), the wall time, and hardware counter deltas to the
// node of its current call path. With native unwinding the thread is signalled and unwinds itself
// into a preallocated buffer; the sampler merges those frames under the Python frames.
#pragma once

#include <cstdint>
#include <string>

namespace dctx {

struct SamplerOptions {
  uint64_t interval_ns = 10'000'000;
  bool native = false;
  bool wall = true;
  bool counters = true;
};

void sampler_start(const SamplerOptions &opts);
void sampler_stop();
// After fork in the child: the sampler thread does not exist there; forget its state.
void sampler_after_fork();
// The calling Python thread is the profiler's own (a watchdog): never sampled. Needs the GIL.
void sampler_hide_current_thread();

}  // namespace dctx
