// deepcontext._core: the Python binding of the native core (nanobind). The Python package drives
// sessions through it; user scopes enter and exit here without any Python-level work.
#include <dlfcn.h>
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>

#include <stdexcept>

#include "collect/sampler.h"
#include "deepcontext/monitor.h"
#include "monitor/session.h"
#include "python/context_call.h"
#include "python/module_hooks.h"
#include "store/writer.h"
#include "tree/cct.h"

namespace nb = nanobind;

namespace {

void check(const std::string &err) {
  if (!err.empty()) throw std::runtime_error(err);
}

std::string library_path() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void *>(&dctx_enter), &info) && info.dli_fname) return info.dli_fname;
  return "";
}

}  // namespace

NB_MODULE(_core, m) {
  m.doc() = "Native core of DeepContext (calling-context tree, sampler, .dctx writer).";
  m.attr("PROFILE_SCHEMA") = dctx::profile_schema();
  dctx::bind_module_hooks(m);
  dctx::bind_context_call(m);
  m.def(
      "start",
      [](const std::string &output, const std::string &hidden_prefix, unsigned long main_thread,
         double interval_ms, bool native, bool wall, bool counters, double checkpoint_s,
         bool sample) {
        dctx::SessionOptions o;
        o.output = output;
        o.hidden_prefix = hidden_prefix;
        o.main_thread_id = main_thread;
        o.sample = sample;
        o.sampler.interval_ns = static_cast<uint64_t>(interval_ms * 1e6);
        o.sampler.native = native;
        o.sampler.wall = wall;
        o.sampler.counters = counters;
        o.checkpoint_s = checkpoint_s;
        check(dctx::session_start(o));
      },
      nb::arg("output"), nb::arg("hidden_prefix"), nb::arg("main_thread"),
      nb::arg("interval_ms") = 10.0, nb::arg("native") = false, nb::arg("wall") = true,
      nb::arg("counters") = true, nb::arg("checkpoint_s") = 60.0, nb::arg("sample") = true);
  m.def("stop", [](bool write) { check(dctx::session_stop(write)); }, nb::arg("write") = true);
  m.def("write_final_to",
        [](const std::string &path) { check(dctx::session_write_final_to(path)); });
  m.def("flush", [] { check(dctx::session_flush()); });
  m.def("is_active", [] { return dctx_is_active() != 0; });
  m.def("after_fork_child", &dctx::session_after_fork_child);
  m.def("clear_metrics", [] { dctx::tree().clear_metrics(); });
  m.def("output", [] { return dctx::session_output(); });
  m.def("library_path", &library_path);
  m.def("node_count", [] { return dctx::tree().node_count(); });
  m.def(
      "enter",
      [](int domain, int kind, const std::string &name, const std::string &file, uint32_t line,
         const std::string &module) {
        dctx_frame f{static_cast<dctx_frame_kind>(kind), name.c_str(), file.c_str(), line,
                     module.c_str()};
        return dctx_enter(static_cast<dctx_domain>(domain), &f);
      },
      nb::arg("domain"), nb::arg("kind"), nb::arg("name"), nb::arg("file") = "",
      nb::arg("line") = 0, nb::arg("module") = "");
  m.def("exit", [](int domain) { dctx_exit(static_cast<dctx_domain>(domain)); });
  m.def("scope_enter", [](const char *name) {
    dctx_frame f{DCTX_FRAME_SCOPE, name, "", 0, ""};
    return dctx_enter(DCTX_DOMAIN_SCOPE, &f);
  });
  m.def("scope_exit", [] { dctx_exit(DCTX_DOMAIN_SCOPE); });
  m.def(
      "hide_current_thread", [] { dctx::sampler_hide_current_thread(); },
      "The calling thread is the profiler's own: never sampled.");
  m.def("current", [] { return dctx_current(); });
  m.def("set_worker_context", [](uint32_t node) { dctx_set_worker_context(node); });
  m.def("stack_depth", [] { return dctx_stack_depth(); });
  m.def("set_meta",
        [](const std::string &k, const std::string &v) { dctx_set_meta(k.c_str(), v.c_str()); });
  m.def("note", [](const std::string &msg) { dctx_note(msg.c_str()); });
}
