// Hardware counters (cycles, instructions) per thread through perf_event_open, read by the sampler.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>

namespace dctx {

struct ThreadCounters {
  int fd_cycles = -1, fd_instructions = -1;
  uint64_t last_cycles = 0, last_instructions = 0;
  // Opens the counters for thread tid; on failure returns a one-line reason ("" on success).
  std::string open(pid_t tid);
  // Deltas since the last read.
  void read(uint64_t *cycles, uint64_t *instructions);
  void close();
};

}  // namespace dctx
