// nn.Module path frames, two ways. Stack mode (Python 3.11 and 3.12): the torch adapter asks at
// each outermost operator for the innermost running module, read from the thread's Python frames
// (module_stack.cpp); no hooks. Hook mode (elsewhere): global forward pre/post hooks, as C
// functions, keep each thread's running modules and write the innermost one's frame id into the
// adapter's per-thread module cell. Either way only a module seen for the first time (or under
// another parent) calls back into Python to name its path.
//
// The hooks run with the GIL held; the stack-mode lookup does not (torch releases the GIL around
// an operator), so the shared cache is guarded by g_known_mu, and naming takes the GIL.
#include "python/module_hooks.h"

#include <Python.h>
#include <nanobind/nanobind.h>
#include <pthread.h>

#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "python/module_stack.h"

namespace nb = nanobind;

namespace dctx {
namespace {

using CellFn = uint32_t *(*)();

struct Known {
  PyObject *weak = nullptr;    // weak reference to the module (owned)
  PyObject *parent = nullptr;  // the enclosing module it was named under (identity only)
  uint32_t frame = 0;
  std::string path;
};

struct Running {
  PyObject *module;  // borrowed: alive while its forward runs
  uint32_t frame;
  uint64_t cache_generation;  // known is valid while the cache has not been cleared since
  const Known *known;
};

struct ThreadModules {
  std::vector<Running> stack;
  uint32_t *cell = nullptr;
  uint64_t generation = 0;
};

bool g_enabled = false;
uint64_t g_generation = 0;  // bumped by configure: thread states start over
CellFn g_cell = nullptr;
PyObject *g_resolve =
    nullptr;  // resolve(module, parent or None, parent path or None) -> (frame, path)
std::unordered_map<PyObject *, Known> *g_known = nullptr;
uint64_t g_cache_generation = 0;  // bumped when g_known is cleared

ThreadModules &thread_modules() {
  thread_local ThreadModules t;
  if (t.generation != g_generation) {
    t.stack.clear();
    t.cell = g_cell != nullptr ? g_cell() : nullptr;
    t.generation = g_generation;
  }
  return t;
}

std::mutex g_known_mu;

// The cached naming of module under parent (nullptr: a root), if it is still that module (the
// weak reference's field is read, no reference taken: identity only; a dead referent is None).
// Caller holds g_known_mu.
const Known *find_known(PyObject *module, PyObject *parent) {
  auto it = g_known->find(module);
  if (it == g_known->end() || it->second.parent != parent ||
      reinterpret_cast<PyWeakReference *>(it->second.weak)->wr_object != module)
    return nullptr;
  return &it->second;
}

// Names module under parent in Python and caches the answer; nullptr when it cannot be named.
// With the GIL and no lock held (the Python call may run anything). The entry stays valid while
// the GIL is held: the cache is cleared only here.
const Known *name_module(PyObject *module, PyObject *parent, const std::string &parent_path) {
  PyObject *res = PyObject_CallFunction(g_resolve, "OOs", module, parent ? parent : Py_None,
                                        parent ? parent_path.c_str() : nullptr);
  unsigned long frame = 0;
  const char *path = nullptr;
  PyObject *weak = nullptr;
  if (res == nullptr || !PyArg_ParseTuple(res, "ks", &frame, &path) ||
      (weak = PyWeakref_NewRef(module, nullptr)) == nullptr) {
    Py_XDECREF(res);
    PyErr_Clear();
    return nullptr;
  }
  std::lock_guard lock(g_known_mu);
  if (g_known->size() > 100000) {
    for (auto &[key, v] : *g_known) Py_XDECREF(v.weak);
    g_known->clear();
    ++g_cache_generation;
  }
  Known &k = (*g_known)[module];
  Py_XDECREF(k.weak);
  k.weak = weak;
  k.parent = parent;
  k.frame = static_cast<uint32_t>(frame);
  k.path = path;
  Py_DECREF(res);
  return &k;
}

// Hook mode: the naming of module inside the running parent (nullptr on error). With the GIL.
const Known *lookup(PyObject *module, const Running *parent) {
  // A parent entered before the cache was last cleared has lost its naming: name this module as
  // a root rather than read freed memory (only around the clear of a huge cache).
  if (parent != nullptr && parent->cache_generation != g_cache_generation) parent = nullptr;
  PyObject *parent_obj = parent != nullptr ? parent->module : nullptr;
  {
    std::lock_guard lock(g_known_mu);
    if (const Known *k = find_known(module, parent_obj)) return k;
  }
  // Copied before the cache may be cleared.
  const std::string parent_path = parent != nullptr ? parent->known->path : std::string();
  return name_module(module, parent_obj, parent_path);
}

void set_cell(ThreadModules &t) {
  if (t.cell != nullptr) *t.cell = t.stack.empty() ? 0 : t.stack.back().frame;
}

void pre_hook(nb::handle module, nb::handle /*args*/) {
  if (!g_enabled) return;
  ThreadModules &t = thread_modules();
  const Known *k = lookup(module.ptr(), t.stack.empty() ? nullptr : &t.stack.back());
  if (k == nullptr) return;  // unnamed: its operators stay under the enclosing module
  t.stack.push_back(Running{module.ptr(), k->frame, g_cache_generation, k});
  set_cell(t);
}

void post_hook(nb::handle module, nb::handle /*args*/, nb::handle /*output*/) {
  ThreadModules &t = thread_modules();
  if (t.stack.empty()) return;
  // Normally the top; after an exception inside a child (always_call), unwind to this module.
  for (size_t i = t.stack.size(); i-- > 0;) {
    if (t.stack[i].module == module.ptr()) {
      t.stack.resize(i);
      break;
    }
  }
  set_cell(t);
}

// ---------------------------------------------------------------------------------------------
// Stack mode: no hooks at all. The adapter asks at each outermost operator for the innermost
// module, read from the thread's Python frames (module_stack.cpp), so a module call costs nothing
// (with any global hook, torch's Module._call_impl takes its slow path: 0.63 -> 1.87 us per call).
// Here the GIL is not held (torch releases it around the operator): g_known is guarded by
// g_known_mu, and only a module seen for the first time takes the GIL, to be named in Python.
// ---------------------------------------------------------------------------------------------

const void *g_call_impl_code = nullptr;  // torch.nn.Module._call_impl.__code__ (owned)
bool g_stack_mode = false;
constexpr size_t kMaxModules = 64;

// Names modules[i] under modules[i + 1] for every unknown one, outermost first. With the GIL.
uint32_t name_chain(PyObject **modules, size_t n) {
  PyGILState_STATE gil = PyGILState_Ensure();
  std::string parent_path;
  uint32_t frame = 0;
  for (size_t i = n; i-- > 0;) {
    PyObject *parent = i + 1 < n ? modules[i + 1] : nullptr;
    const Known *k;
    {
      std::lock_guard lock(g_known_mu);
      k = find_known(modules[i], parent);
    }
    if (k == nullptr) k = name_module(modules[i], parent, parent_path);
    if (k == nullptr) {
      frame = 0;  // unnamed: the operator goes without a module frame
      break;
    }
    parent_path = k->path;  // the GIL is held: the entry stays
    frame = k->frame;
  }
  PyGILState_Release(gil);
  return frame;
}

bool finalizing() {
#if PY_VERSION_HEX >= 0x030D0000
  return Py_IsFinalizing() != 0;
#else
  return _Py_IsFinalizing() != 0;
#endif
}

// The adapter's module-frame function: the frame of the innermost running module, or 0.
uint32_t module_frame_from_stack() {
  if (!g_enabled || !g_stack_mode || finalizing()) return 0;
  PyObject *modules[kMaxModules];
  const size_t n = stack_modules(g_call_impl_code, modules, kMaxModules);
  if (n == 0) return 0;
  PyObject *parent = n > 1 ? modules[1] : nullptr;
  {
    std::lock_guard lock(g_known_mu);
    if (const Known *k = find_known(modules[0], parent)) return k->frame;
  }
  return name_chain(modules, n);
}

// Either mode's configure: the naming function, and the cache on first use.
void set_resolver(nb::object resolve) {
  if (g_known == nullptr) {
    g_known = new std::unordered_map<PyObject *, Known>();
    // A thread holding the lock at fork would leave it held in the child forever.
    pthread_atfork([] { g_known_mu.lock(); }, [] { g_known_mu.unlock(); },
                   [] { g_known_mu.unlock(); });
  }
  Py_XDECREF(g_resolve);
  g_resolve = resolve.release().ptr();
}

}  // namespace

void bind_module_hooks(nb::module_ &m) {
  m.def(
      "module_stack_configure",
      [](nb::object call_impl, nb::object resolve) -> uintptr_t {
        if (!module_stack_supported()) return 0;
        nb::object code = call_impl.attr("__code__");
        set_resolver(std::move(resolve));
        if (g_call_impl_code == nullptr) g_call_impl_code = code.release().ptr();  // kept
        g_stack_mode = true;
        g_enabled = true;
        return reinterpret_cast<uintptr_t>(&module_frame_from_stack);
      },
      "Module frames from the Python stack (no hooks): returns the adapter's frame function, or "
      "0 where this Python's frames cannot be read.");
  m.def(
      "module_hooks_configure",
      [](uintptr_t cell_fn, nb::object resolve) {
        set_resolver(std::move(resolve));
        g_cell = reinterpret_cast<CellFn>(cell_fn);
        ++g_generation;
        g_enabled = true;
      },
      "Route the module hooks' frame ids to the adapter's cell function; resolve names paths.");
  m.def("module_hooks_enable", [](bool on) { g_enabled = on; });
  // Any object may come as args or output (None: a forward that returned nothing or raised).
  m.def("module_pre_hook", &pre_hook, nb::arg("module"), nb::arg("args").none());
  m.def("module_post_hook", &post_hook, nb::arg("module"), nb::arg("args").none(),
        nb::arg("output").none());
}

}  // namespace dctx
