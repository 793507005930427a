// _core.ContextCall: a callable that hands the caller's calling context to the framework's worker
// threads, then calls the callable it wraps with the same arguments. jax_support's `_Jitted`
// (what `jax.jit` returns while profiling) derives from it: a jitted call costs a few microseconds,
// and doing this in Python added an interpreter frame and two binding calls to each one.
#include "python/context_call.h"

#include <Python.h>
#include <structmember.h>

#include "deepcontext/monitor.h"

namespace dctx {
namespace {

struct ContextCall {
  PyObject_HEAD PyObject *fn;
  vectorcallfunc vectorcall;
};

PyObject *call(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
  if (dctx_is_active()) dctx_set_worker_context(dctx_current());
  // The same argument array goes on, so PY_VECTORCALL_ARGUMENTS_OFFSET may go on with it.
  return PyObject_Vectorcall(reinterpret_cast<ContextCall *>(self)->fn, args, nargsf, kwnames);
}

PyObject *create(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
  PyObject *fn = nullptr;
  if (kwargs && PyDict_GET_SIZE(kwargs) != 0) {
    PyErr_SetString(PyExc_TypeError, "ContextCall() takes no keyword arguments");
    return nullptr;
  }
  if (!PyArg_ParseTuple(args, "O:ContextCall", &fn)) return nullptr;
  if (!PyCallable_Check(fn)) {
    PyErr_SetString(PyExc_TypeError, "ContextCall: the wrapped object is not callable");
    return nullptr;
  }
  auto *self = reinterpret_cast<ContextCall *>(type->tp_alloc(type, 0));
  if (!self) return nullptr;
  Py_INCREF(fn);
  self->fn = fn;
  self->vectorcall = call;
  return reinterpret_cast<PyObject *>(self);
}

int traverse(PyObject *self, visitproc visit, void *arg) {
  Py_VISIT(reinterpret_cast<ContextCall *>(self)->fn);
  Py_VISIT(Py_TYPE(self));  // heap type
  return 0;
}

int clear(PyObject *self) {
  Py_CLEAR(reinterpret_cast<ContextCall *>(self)->fn);
  return 0;
}

void dealloc(PyObject *self) {
  PyTypeObject *type = Py_TYPE(self);
  PyObject_GC_UnTrack(self);
  clear(self);
  type->tp_free(self);
  Py_DECREF(type);
}

PyMemberDef members[] = {
    {"_dctx_fn", T_OBJECT_EX, offsetof(ContextCall, fn), READONLY, "the wrapped callable"},
    {"__vectorcalloffset__", T_PYSSIZET, offsetof(ContextCall, vectorcall), READONLY, nullptr},
    {nullptr, 0, 0, 0, nullptr},
};

PyType_Slot slots[] = {
    {Py_tp_new, reinterpret_cast<void *>(create)},
    {Py_tp_dealloc, reinterpret_cast<void *>(dealloc)},
    {Py_tp_traverse, reinterpret_cast<void *>(traverse)},
    {Py_tp_clear, reinterpret_cast<void *>(clear)},
    {Py_tp_call, reinterpret_cast<void *>(PyVectorcall_Call)},
    {Py_tp_members, members},
    {Py_tp_doc, const_cast<char *>("ContextCall(fn): calls fn with the caller's calling context "
                                   "set as the worker threads' context")},
    {0, nullptr},
};

PyType_Spec spec = {
    "deepcontext._core.ContextCall",
    sizeof(ContextCall),
    0,
    Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    slots,
};

}  // namespace

void bind_context_call(nanobind::module_ &m) {
  PyObject *type = PyType_FromSpec(&spec);
  if (!type) throw nanobind::python_error();
  m.attr("ContextCall") = nanobind::steal(type);
}

}  // namespace dctx
