// Native stacks: a signal handler that unwinds the interrupted thread with libunwind into a
// preallocated buffer (no allocation, no locks), and symbolization of the program counters.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>

namespace dctx {

bool native_unwind_install();
// Signals the thread with kernel id tid and waits up to timeout for its stack; returns the number
// of pcs (innermost first) copied into out, 0 on failure.
size_t native_unwind_thread(pid_t tid, uintptr_t *out, size_t max);

struct NativeFrame {
  uint32_t frame_id;
  bool interpreter;     // the CPython eval loop: where Python frames are spliced in
  bool python_runtime;  // inside libpython/the interpreter binary
  bool libc;            // inside the C library (futex/condition waits, memcpy, ...)
};
NativeFrame symbolize(uintptr_t pc);

}  // namespace dctx
