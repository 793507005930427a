// deepcontext._analyzer: the analyzer's built-in rules and ranking in C++ (nanobind). The Python
// package (deepcontext.analyzer) runs them through an Analyzer handle, adds the findings of custom
// Python rules and renders the result. Call from one thread (the GIL is held throughout).
#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <string>
#include <utility>
#include <vector>

#include "analyzer/engine.h"

namespace nb = nanobind;
using namespace dctx::analyzer;

namespace {

nb::object to_py(const Value &v) {
  switch (v.type()) {
    case Value::Type::kNull:
      return nb::none();
    case Value::Type::kBool:
      return nb::bool_(v.as_bool());
    case Value::Type::kInt:
      return nb::int_(v.as_int());
    case Value::Type::kFloat:
      return nb::float_(v.as_float());
    case Value::Type::kString:
      return nb::str(v.as_string().c_str(), v.as_string().size());
    case Value::Type::kList: {
      nb::list l;
      for (const Value &x : v.items()) l.append(to_py(x));
      return std::move(l);
    }
    case Value::Type::kDict: {
      nb::dict d;
      for (const auto &[k, x] : v.fields()) d[nb::str(k.c_str(), k.size())] = to_py(x);
      return std::move(d);
    }
  }
  return nb::none();
}

nb::dict finding_dict(const Finding &f) {
  nb::dict d;
  d["rule"] = f.rule;
  d["title"] = f.title;
  d["summary"] = f.summary;
  d["metric"] = f.metric;
  d["time"] = f.time;
  d["share"] = f.share;
  d["total"] = f.total ? nb::object(nb::float_(*f.total)) : nb::none();
  d["saving"] = f.saving;
  d["saving_share"] = f.saving_share;
  d["estimate"] = f.estimate;
  d["suggestion"] = f.suggestion;
  d["location"] = to_py(f.location);
  d["evidence"] = to_py(f.evidence);
  nb::list nodes;
  for (int n : f.nodes) nodes.append(n);
  d["nodes"] = nodes;
  if (f.external >= 0) d["external"] = f.external;
  return d;
}

Context make_context(const std::string &pkg_dir, const nb::object &source_loops) {
  Context ctx;
  ctx.pkg_dir = pkg_dir;
  if (!source_loops.is_none()) {
    ctx.source_loops = [fn = nb::borrow<nb::callable>(source_loops)](const std::string &path) {
      std::vector<std::pair<int64_t, int64_t>> out;
      for (nb::handle lp : fn(path)) {
        nb::sequence t = nb::borrow<nb::sequence>(lp);
        out.emplace_back(nb::cast<int64_t>(t[0]), nb::cast<int64_t>(t[1]));
      }
      return out;
    };
  }
  return ctx;
}

nb::dict status_dict(const RuleStatus &st) {
  nb::dict d;
  d["state"] = st.state == RuleStatus::State::kRun       ? "run"
               : st.state == RuleStatus::State::kSkipped ? "skipped"
                                                         : "error";
  d["message"] = st.message;
  d["findings"] = st.findings;
  return d;
}

}  // namespace

NB_MODULE(_analyzer, m) {
  m.doc() = "The analyzer's profile loader, query layer, built-in rules and ranking (C++).";
  static const nb::exception<ProfileError> profile_error(m, "ProfileError");

  m.def(
      "rules",
      [] {
        nb::list out;
        for (const RuleInfo &r : builtin_rules()) {
          nb::dict d;
          d["id"] = r.id;
          d["title"] = r.title;
          d["needs"] = nb::tuple(nb::cast(r.needs));
          d["description"] = r.description;
          d["generic"] = r.generic;
          out.append(d);
        }
        return out;
      },
      "The built-in rules in registration order: [{id, title, needs, description, generic}].");

  nb::class_<Analyzer>(m, "Analyzer",
                       "One profile loaded for analysis: run built-in rules, add custom rules' "
                       "findings, rank them.")
      .def(
          "__init__",
          [](Analyzer *self, const std::string &path, const std::string &pkg_dir,
             const nb::object &source_loops) {
            new (self) Analyzer(path, make_context(pkg_dir, source_loops));
          },
          nb::arg("path"), nb::arg("pkg_dir") = "", nb::arg("source_loops") = nb::none())
      .def(
          "run", [](Analyzer &a, const std::string &id) { return status_dict(a.run_builtin(id)); },
          nb::arg("rule"),
          "Run one built-in rule: {state: run|skipped|error, message, findings (count)}.")
      .def(
          "add",
          [](Analyzer &a, int index, const std::string &rule, bool generic,
             const std::string &metric, double time, double saving, std::optional<double> total,
             std::optional<int> node, const std::vector<int> &nodes) {
            Finding f;
            f.external = index;
            f.rule = rule;
            f.metric = metric;
            f.time = time;
            f.saving = saving;
            f.total = total;
            f.node = node;
            f.nodes = nodes;
            a.add_external(std::move(f), generic);
          },
          nb::arg("index"), nb::arg("rule"), nb::arg("generic"), nb::arg("metric"), nb::arg("time"),
          nb::arg("saving"), nb::arg("total").none(), nb::arg("node").none(), nb::arg("nodes"),
          "Add a custom rule's finding (what ranking needs) in rule order.")
      .def(
          "finish",
          [](Analyzer &a, double min_share) {
            nb::list out;
            for (const Finding &f : a.finish(min_share)) out.append(finding_dict(f));
            return out;
          },
          nb::arg("min_share") = 0.0,
          "The ranked findings as dicts (custom ones carry `external`, their index).")
      .def("totals",
           [](const Analyzer &a) {
             nb::dict d;
             for (const MetricValues &mv : a.profile().metrics)
               d[mv.name.c_str()] = a.query().total(mv.name);
             return d;
           })
      .def("units",
           [](const Analyzer &a) {
             nb::dict d;
             for (const MetricValues &mv : a.profile().metrics) d[mv.name.c_str()] = mv.unit;
             return d;
           })
      .def("meta",
           [](const Analyzer &a) {
             nb::dict d;
             for (const auto &[k, v] : a.profile().meta) d[k.c_str()] = v;
             return d;
           })
      .def_prop_ro("nodes", [](const Analyzer &a) { return a.profile().size(); });

  m.def(
      "run_builtin_rules",
      [](const std::string &path, std::optional<std::vector<std::string>> rule_ids,
         double min_share, const std::string &pkg_dir) {
        Analyzer a(path, make_context(pkg_dir, nb::none()));
        std::vector<std::string> ids;
        if (rule_ids) {
          ids = *rule_ids;
        } else {
          for (const RuleInfo &r : builtin_rules()) ids.push_back(r.id);
        }
        for (const std::string &id : ids) {
          if (!find_builtin(id)) throw nb::value_error(("unknown rule " + id).c_str());
          a.run_builtin(id);
        }
        nb::list out;
        for (const Finding &f : a.finish(min_share)) out.append(finding_dict(f));
        return out;
      },
      nb::arg("path"), nb::arg("rule_ids") = nb::none(), nb::arg("min_share") = 0.0,
      nb::arg("pkg_dir") = "",
      "Run built-in rules (default: all) over a .dctx and return the ranked findings as dicts.");
}
