// The profiling session as the Python package drives it (deepcontext._core).
#pragma once

#include <string>

#include "collect/sampler.h"

namespace dctx {

struct SessionOptions {
  std::string output;
  std::string hidden_prefix;  // our package directory: its frames are left out of paths
  unsigned long main_thread_id = 0;
  bool sample = true;
  SamplerOptions sampler;
  double checkpoint_s = 60;
  // The first checkpoint comes this early (if checkpoint_s is longer), so that a program killed
  // in its first minute still leaves a (partial) profile.
  double first_checkpoint_s = 5;
};

// Each returns "" on success or a one-line error.
std::string session_start(const SessionOptions &opts);
std::string session_flush();
// Stops the session; writes the final profile unless `write` is false (the run never started).
std::string session_stop(bool write = true);
// After session_stop failed to write: the final profile to another path.
std::string session_write_final_to(const std::string &path);
void session_after_fork_child();
const std::string &session_output();

}  // namespace dctx
