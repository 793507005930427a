// What started a thread that has no name of its own (its comm is the process's): found from the
// start routine and argument glibc keeps in the thread's descriptor (struct pthread), so that a
// profile says "OpenMP worker (libgomp.so.1)" or "c10::ThreadPool (libtorch_cpu.so)" instead of
// "native thread".
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace dctx {

// For each thread id of this process, a short description of the code that started it, or "" when
// it cannot be told (another C library, a stack the program allocated itself, a thread gone).
// Reads /proc/self/maps and the descriptors' memory with process_vm_readv (a vanished mapping is
// an error return, never a fault). Sampler thread only; no GIL needed.
std::vector<std::string> thread_origins(const std::vector<pid_t> &tids);

// The description of a start routine and its argument (exposed for tests).
std::string describe_start_routine(const void *start_routine, const void *arg);

}  // namespace dctx
