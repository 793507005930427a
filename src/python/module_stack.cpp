// The nn.Modules running on the calling thread, read from its Python frames: each module call
// runs torch's Module._call_impl, whose first local is the module (self). Reading the frames of
// the calling thread needs no GIL: they cannot change while this thread is inside an operator.
#define Py_BUILD_CORE 1
#include <Python.h>
#if PY_VERSION_HEX >= 0x030B0000 && PY_VERSION_HEX < 0x030E0000
#include <internal/pycore_frame.h>
#endif
#undef Py_BUILD_CORE

#include "python/module_stack.h"

namespace dctx {

bool module_stack_supported() {
  // Tested on 3.11 and 3.12. 3.13's frames are read the same way but untested here, and 3.14
  // keeps tagged stack references in them: the hooks are used there.
#if PY_VERSION_HEX >= 0x030B0000 && PY_VERSION_HEX < 0x030D0000
  return true;
#else
  return false;
#endif
}

size_t stack_modules(const void *call_impl_code, PyObject **out, size_t max) {
  size_t n = 0;
#if PY_VERSION_HEX >= 0x030B0000 && PY_VERSION_HEX < 0x030E0000
  PyThreadState *ts = PyGILState_GetThisThreadState();
  if (ts == nullptr || call_impl_code == nullptr) return 0;
#if PY_VERSION_HEX >= 0x030D0000
  _PyInterpreterFrame *f = ts->current_frame;
#else
  _PyInterpreterFrame *f = ts->cframe ? ts->cframe->current_frame : nullptr;
#endif
  for (int depth = 0; f != nullptr && n < max && depth < 4096; f = f->previous, ++depth) {
#if PY_VERSION_HEX >= 0x030C0000
    if (f->owner == FRAME_OWNED_BY_CSTACK) continue;
#endif
#if PY_VERSION_HEX >= 0x030D0000
    const void *code = f->f_executable;
#else
    const void *code = f->f_code;
#endif
    if (code != call_impl_code) continue;
    PyObject *self = f->localsplus[0];
    // _call_impl's inner closure captures self, so its slot holds a cell once the frame runs.
    if (self != nullptr && PyCell_Check(self)) self = PyCell_GET(self);
    if (self != nullptr) out[n++] = self;
  }
#else
  (void)call_impl_code;
  (void)out;
  (void)max;
#endif
  return n;
}

}  // namespace dctx
