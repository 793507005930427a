// The nn.Modules whose forward runs on the calling thread, innermost first (module_stack.cpp).
#pragma once

#include <Python.h>

#include <cstddef>

namespace dctx {
// Whether this Python's frames are read for it (3.11 and 3.12).
bool module_stack_supported();
// Up to max modules, innermost first: the self of each frame running call_impl_code
// (torch.nn.Module._call_impl.__code__). Borrowed references, valid while the caller's frames
// run. The calling thread need not hold the GIL.
size_t stack_modules(const void *call_impl_code, PyObject **out, size_t max);
}  // namespace dctx
