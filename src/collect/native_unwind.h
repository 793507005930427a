// Native stacks: a signal handler that unwinds the interrupted thread with libunwind into a
// preallocated buffer (no allocation), on the thread's alternate signal stack, and
// symbolization of the program counters.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>

#include "deepcontext/monitor.h"

namespace dctx {

bool native_unwind_install();
// Signals the thread with kernel id tid and waits up to timeout for its stack; returns the number
// of pcs (innermost first) copied into out, 0 on failure.
// A thread is signalled only once it has an alternate signal stack: the first call for a thread
// arms it (only while it is blocked in a system call or preempted in a loaded object's code) and
// may return 0; may_force arms a thread that never stops after 3 tries (native executables'
// threads, Python threads).
// Sampler thread only.
size_t native_unwind_thread(pid_t tid, uintptr_t *out, size_t max, bool may_force = false);
// The thread with kernel id tid is gone: free its alternate signal stack.
void native_unwind_forget(pid_t tid);
// In a forked child: forget the parent's threads (their kernel ids mean other threads here).
void native_unwind_after_fork();

struct NativeUnwindStats {
  uint64_t armed;       // threads given an alternate signal stack
  uint64_t arm_raced;   // arming signals that found the thread out of its call, on its stack
  uint64_t arm_unsafe;  // ... with rsp outside its stack (the frame may have hit memory)
  uint64_t lost;        // signals to armed threads that got no answer in time
  uint64_t forced;      // threads armed where they ran (native executables)
};
NativeUnwindStats native_unwind_stats();

struct NativeFrame {
  uint32_t frame_id;
  bool interpreter;     // the CPython eval loop: where Python frames are spliced in
  bool python_runtime;  // inside libpython/the interpreter binary
  bool libc;            // inside the C library (futex/condition waits, memcpy, ...)
  uint8_t extra_count;  // frames a symbolizer gave below frame_id (JIT code: op path, HLO op)
  uint32_t extra[7];
};
NativeFrame symbolize(uintptr_t pc);
// node's child for pc's frame, and below it a symbolizer's further frames; returns the deepest.
dctx_node append_native(dctx_node node, uintptr_t pc);

}  // namespace dctx
