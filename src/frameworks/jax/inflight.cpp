// The executions that JAX dispatched and that have not completed, oldest first, each with the
// call path that dispatched it; XLA's threads work for the oldest one.
//
// Dispatch is asynchronous: a jitted call returns once its execution is enqueued, and the program
// goes on to the next line (an eager `jax.random.split`, the next step) while XLA's threads still
// run it. The worker context (dctx_set_worker_context) is therefore the call path of the oldest
// execution in flight, not of the latest call: XLA:CPU completes a device's executions in the
// order they were enqueued (each waits for the one before), so the oldest one not done is the one
// running. An execution is done when an output array of it is ready (all outputs of one execution
// become ready together); the core's sampler asks at each tick (dctx_register_tick_hook, GIL held)
// before it places the CPU time of the threads without Python, and a dispatch only appends.
//
// Everything here runs with the GIL held (dispatches are Python calls, the tick hook holds it), so
// the queue needs no lock of its own; a call into jax or Python may let the GIL go to the other
// thread, so no queue position is kept across one.
#include <Python.h>
#include <structmember.h>

#include <cstddef>
#include <cstdint>

#include "deepcontext/monitor.h"

namespace {

constexpr size_t kCapacity = 4096;  // beyond it, the oldest is taken as done
constexpr int kLeafDepth = 4;       // how deep into nested tuples/lists/dicts an output is sought

struct Entry {
  dctx_node node;
  PyObject *leaf;  // one output array (strong reference)
  bool op;         // an eager op (one primitive: short), else a jitted function
};

Entry g_queue[kCapacity];
size_t g_head = 0, g_size = 0;
dctx_node g_pin = 0;  // while nonzero (a compilation), the worker context is left alone
PyObject *g_array_type = nullptr;  // jax.Array's implementation type
PyObject *g_leaf_of = nullptr;     // Python: an output array of any other result, or None
PyObject *g_on_cpu = nullptr;      // Python: whether an output array lives on XLA:CPU
PyObject *g_is_ready = nullptr;    // "is_ready"
PyObject *g_base_array = nullptr;  // "_base_array"
int g_hook = 0;
// Tracking is for XLA:CPU, where XLA's threads run the execution itself. On a GPU the threads
// without Python only launch it, at dispatch: the worker context stays the latest call's there.
enum class Mode { kUnknown, kTrack, kLatestCall } g_mode = Mode::kUnknown;
uint64_t g_stats[3];     // executions tracked, outputs without an array, taken as done when full
uint64_t g_taken = 0;    // entries removed so far (tells a poll that the front changed meanwhile)
bool g_polling = false;  // a poll is running (on this thread or on one that gave up the GIL in it)

Entry &front() { return g_queue[g_head]; }

// Whether the execution that produced `leaf` completed. A deleted array (donated to a later
// execution) can no longer say: taken as done, the later one is queued behind it anyway.
bool ready(PyObject *leaf) {
  PyObject *r = PyObject_CallMethodNoArgs(leaf, g_is_ready);
  if (!r) {
    PyErr_Clear();
    return true;
  }
  const bool done = r == Py_True || PyObject_IsTrue(r) > 0;
  Py_DECREF(r);
  return done;
}

// Removes the oldest entry; returns its array for the caller to release once the queue is
// consistent again (a release may run code and let another thread take the GIL).
PyObject *take_front() {
  PyObject *leaf = front().leaf;
  g_head = (g_head + 1) % kCapacity;
  --g_size;
  ++g_taken;
  return leaf;
}

// Drops the completed executions at the front and sets the worker context for the tick's CPU
// time: the oldest execution left ran at the tick, and the ones completed since the last poll ran
// in it too. Of these the first jitted function, else the first eager op, gets it: an eager op is
// one primitive, usually short, and the time the pool spends on a few of them between two steps
// (or spinning down after a step) would otherwise go to whichever small op is next at the tick.
// With none left, the context stays on a completed one (its threads may still spin down).
// The scan stops at the first entry not done; a bisection would not do: an op may return an array
// that was ready before it ran (random_wrap's key), so readiness is not ordered like the queue.
// Nothing is kept across a call into jax: the GIL may change hands inside it (the sampler's tick
// and a dispatch on the main thread both poll), so each round reads the queue afresh.
void poll() {
  if (g_polling) return;
  g_polling = true;
  dctx_node owner = 0;
  bool owner_op = true;
  auto consider = [&](const Entry &e) {
    if (!owner || (owner_op && !e.op)) {
      owner = e.node;
      owner_op = e.op;
    }
  };
  while (g_size) {
    const uint64_t seq = g_taken;
    PyObject *leaf = Py_NewRef(front().leaf);
    const bool done = ready(leaf);
    PyObject *taken = nullptr;
    if (done && g_size && g_taken == seq) {
      consider(front());
      taken = take_front();
    }
    Py_DECREF(leaf);
    Py_XDECREF(taken);
    if (!done) break;
  }
  g_polling = false;
  if (g_size) consider(front());
  if (owner && !g_pin) dctx_set_worker_context(owner);
}

void on_tick(void *) {
  if (g_size && dctx_is_active()) poll();
}

bool is_array(PyObject *o) {
  return g_array_type && PyObject_TypeCheck(o, reinterpret_cast<PyTypeObject *>(g_array_type));
}

// An output array of a result: the last one found in nested tuples, lists and dicts (the last is
// rarely donated: `return params, loss`), borrowed.
PyObject *find_leaf(PyObject *o, int depth) {
  if (is_array(o)) return o;
  if (depth == 0) return nullptr;
  if (PyTuple_Check(o) || PyList_Check(o)) {
    for (Py_ssize_t i = PySequence_Fast_GET_SIZE(o); i-- > 0;)
      if (PyObject *leaf = find_leaf(PySequence_Fast_GET_ITEM(o, i), depth - 1)) return leaf;
    return nullptr;
  }
  if (PyDict_Check(o)) {
    PyObject *key, *value, *found = nullptr;
    Py_ssize_t pos = 0;
    while (PyDict_Next(o, &pos, &key, &value))
      if (PyObject *leaf = find_leaf(value, depth - 1)) found = leaf;
    return found;
  }
  return nullptr;
}

// Before a dispatch from `node`: with nothing in flight, XLA's threads work for it from now on.
void dispatching(dctx_node node) {
  if ((g_size == 0 || g_mode == Mode::kLatestCall) && !g_pin) dctx_set_worker_context(node);
}

// The first output array decides the mode.
Mode mode_of(PyObject *leaf) {
  if (!g_on_cpu) return Mode::kTrack;
  PyObject *r = PyObject_CallOneArg(g_on_cpu, leaf);
  if (!r) {
    PyErr_Clear();
    return Mode::kUnknown;
  }
  const Mode m = PyObject_IsTrue(r) > 0 ? Mode::kTrack : Mode::kLatestCall;
  Py_DECREF(r);
  return m;
}

// After a dispatch from `node` returned `result`: its execution is in flight until an output
// array of it is ready. A result without arrays (nothing dispatched, a tracer) is not tracked.
void dispatched(dctx_node node, PyObject *result, bool op) {
  if (g_mode == Mode::kLatestCall) return;
  PyObject *leaf = find_leaf(result, kLeafDepth);
  PyObject *other = nullptr;  // a new reference
  if (!leaf && result != Py_None) {
    // A typed PRNG key (jax.random ops' eager results) holds its array as _base_array; anything
    // else goes to the Python search.
    other = PyObject_GetAttr(result, g_base_array);
    if (!other) {
      PyErr_Clear();
      if (g_leaf_of) other = PyObject_CallOneArg(g_leaf_of, result);
      if (!other) PyErr_Clear();
    }
    if (other && is_array(other)) leaf = other;
  }
  if (leaf && g_mode == Mode::kUnknown) g_mode = mode_of(leaf);
  if (leaf && g_mode == Mode::kTrack) {
    if (g_size == kCapacity || !g_hook) poll();
    PyObject *dropped = nullptr;
    if (g_size == kCapacity) {  // the sampler is not polling: the oldest goes
      dropped = take_front();
      ++g_stats[2];
    }
    g_queue[(g_head + g_size) % kCapacity] = {node, Py_NewRef(leaf), op};
    ++g_size;
    ++g_stats[0];
    Py_XDECREF(dropped);
  } else if (!leaf) {
    ++g_stats[1];
  }
  Py_XDECREF(other);
}

// What `jax.jit` returns while profiling (jax_support's _Jitted derives from it) and what runs
// an eager op (EvalTrace.process_primitive): a call is a dispatch from the caller's call path. In
// C because a jitted call costs a few microseconds.
struct DispatchCall {
  PyObject_HEAD PyObject *fn;
  vectorcallfunc vectorcall;
  int op;  // the wrapped callable runs eager ops (EvalTrace.process_primitive)
};

PyObject *dispatch_call(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
  PyObject *fn = reinterpret_cast<DispatchCall *>(self)->fn;
  if (!dctx_is_active()) return PyObject_Vectorcall(fn, args, nargsf, kwnames);
  const dctx_node node = dctx_current();
  dispatching(node);
  PyObject *result = PyObject_Vectorcall(fn, args, nargsf, kwnames);
  if (result) dispatched(node, result, reinterpret_cast<DispatchCall *>(self)->op != 0);
  return result;
}

PyObject *dispatch_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
  PyObject *fn = nullptr;
  if (kwargs && PyDict_GET_SIZE(kwargs) != 0) {
    PyErr_SetString(PyExc_TypeError, "DispatchCall() takes no keyword arguments");
    return nullptr;
  }
  int op = 0;
  if (!PyArg_ParseTuple(args, "O|p:DispatchCall", &fn, &op)) return nullptr;
  if (!PyCallable_Check(fn)) {
    PyErr_SetString(PyExc_TypeError, "DispatchCall: the wrapped object is not callable");
    return nullptr;
  }
  auto *self = reinterpret_cast<DispatchCall *>(type->tp_alloc(type, 0));
  if (!self) return nullptr;
  Py_INCREF(fn);
  self->fn = fn;
  self->vectorcall = dispatch_call;
  self->op = op;
  return reinterpret_cast<PyObject *>(self);
}

int dispatch_traverse(PyObject *self, visitproc visit, void *arg) {
  Py_VISIT(reinterpret_cast<DispatchCall *>(self)->fn);
  Py_VISIT(Py_TYPE(self));  // heap type
  return 0;
}

int dispatch_clear(PyObject *self) {
  Py_CLEAR(reinterpret_cast<DispatchCall *>(self)->fn);
  return 0;
}

void dispatch_dealloc(PyObject *self) {
  PyTypeObject *type = Py_TYPE(self);
  PyObject_GC_UnTrack(self);
  dispatch_clear(self);
  type->tp_free(self);
  Py_DECREF(type);
}

// As a class attribute (EvalTrace.process_primitive), a DispatchCall binds like a function.
PyObject *dispatch_get(PyObject *self, PyObject *obj, PyObject *) {
  if (!obj || obj == Py_None) return Py_NewRef(self);
  return PyMethod_New(self, obj);
}

PyMemberDef dispatch_members[] = {
    {"_dctx_fn", T_OBJECT_EX, offsetof(DispatchCall, fn), READONLY, "the wrapped callable"},
    {"__vectorcalloffset__", T_PYSSIZET, offsetof(DispatchCall, vectorcall), READONLY, nullptr},
    {nullptr, 0, 0, 0, nullptr},
};

PyType_Slot dispatch_slots[] = {
    {Py_tp_new, reinterpret_cast<void *>(dispatch_new)},
    {Py_tp_dealloc, reinterpret_cast<void *>(dispatch_dealloc)},
    {Py_tp_traverse, reinterpret_cast<void *>(dispatch_traverse)},
    {Py_tp_clear, reinterpret_cast<void *>(dispatch_clear)},
    {Py_tp_call, reinterpret_cast<void *>(PyVectorcall_Call)},
    {Py_tp_descr_get, reinterpret_cast<void *>(dispatch_get)},
    {Py_tp_members, dispatch_members},
    {Py_tp_doc,
     const_cast<char *>("DispatchCall(fn, op=False): calls fn as a dispatch from the caller's "
                        "call path (in flight until an output array is ready)")},
    {0, nullptr},
};

PyType_Spec dispatch_spec = {
    "deepcontext.jax_support.DispatchCall",
    sizeof(DispatchCall),
    0,
    Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    dispatch_slots,
};

}  // namespace

extern "C" {

/* The DispatchCall type (a new reference), created once. Call with the GIL held. */
PyObject *dctx_jax_dispatch_type(void) {
  static PyObject *type = PyType_FromSpec(&dispatch_spec);
  Py_XINCREF(type);
  return type;
}

/* Sets what recognises output arrays: jax.Array's type, `leaf_of(result)` (an output array of a
 * result that is no tuple, list or dict of arrays, or None) and `on_cpu(array)`; registers the
 * tick hook. Returns 1 when the sampler polls the queue, 0 when no hook slot was free (then each
 * dispatch polls it). Call with the GIL held (ctypes.PyDLL). */
int dctx_jax_inflight_init(PyObject *array_type, PyObject *leaf_of, PyObject *on_cpu) {
  Py_XINCREF(array_type);
  Py_XSETREF(g_array_type, array_type);
  Py_XINCREF(leaf_of);
  Py_XSETREF(g_leaf_of, leaf_of);
  Py_XINCREF(on_cpu);
  Py_XSETREF(g_on_cpu, on_cpu);
  g_mode = Mode::kUnknown;
  for (uint64_t &v : g_stats) v = 0;
  if (!g_is_ready) g_is_ready = PyUnicode_InternFromString("is_ready");
  if (!g_base_array) g_base_array = PyUnicode_InternFromString("_base_array");
  if (!g_hook) g_hook = dctx_register_tick_hook(&on_tick, nullptr);
  return g_hook > 0;
}

/* A compilation starts: until dctx_jax_unpin, the worker context is `node` (XLA's compiler
 * threads work for it) whatever completes meanwhile. Returns the pin it replaces (nested). */
dctx_node dctx_jax_pin(dctx_node node) {
  const dctx_node outer = g_pin;
  g_pin = node;
  dctx_set_worker_context(node);
  return outer;
}

/* The compilation ended: the outer pin, else the oldest execution in flight, else `previous`
 * (the worker context before the compilation) owns the workers again. */
void dctx_jax_unpin(dctx_node outer, dctx_node previous) {
  g_pin = outer;
  dctx_set_worker_context(outer ? outer : g_size ? front().node : previous);
}

/* Drops every entry (end of a session). */
void dctx_jax_inflight_clear(void) {
  g_pin = 0;
  while (g_size) Py_DECREF(take_front());
}

/* Executions in flight now; counters: tracked, results without an output array, taken as done
 * when the queue was full. Returns -1 when not tracking (a GPU backend: the latest call's). */
long dctx_jax_inflight(uint64_t *stats, size_t n) {
  for (size_t i = 0; i < n && i < 3; ++i) stats[i] = g_stats[i];
  return g_mode == Mode::kLatestCall ? -1 : static_cast<long>(g_size);
}

}  // extern "C"
