// JAX: a jitted function compiled again and again at one call site (jax-recompile). It reads what
// deepcontext/jax_support.py records at each compilation: an `xla_compile(<module>)` scope at the
// call site, the exact xla_compiles count and xla_compile_time, and the entry computation's
// parameter types of each distinct compilation (prop `input_types`, " | " between compilations).
#include <algorithm>
#include <string>
#include <string_view>
#include <vector>

#include "analyzer/engine.h"

namespace dctx::analyzer {

namespace {

constexpr double kMinCompiles = 5;  // a few bucket sizes are fine
constexpr double kMinShare = 0.02;

std::vector<std::string> split(const std::string &s, const std::string &sep) {
  std::vector<std::string> out;
  size_t at = 0;
  for (size_t next; (next = s.find(sep, at)) != std::string::npos; at = next + sep.size())
    out.push_back(s.substr(at, next - at));
  out.push_back(s.substr(at));
  return out;
}

// The parameters whose types differ between the recorded compilations: "#4: s32[32,40],
// s32[32,46], ..." (1-based position), or the whole signatures when their counts differ.
Value varying_inputs(const std::vector<std::string> &signatures) {
  Value out = Value::list();
  std::vector<std::vector<std::string>> params;
  params.reserve(signatures.size());
  for (const std::string &s : signatures) params.push_back(split(s, ", "));
  const bool same_arity = std::all_of(params.begin(), params.end(), [&](const auto &p) {
    return p.size() == params.front().size();
  });
  if (!same_arity) {
    for (const std::string &s : signatures) out.push(Value(s));
    return out;
  }
  for (size_t i = 0; !params.empty() && i < params.front().size(); ++i) {
    std::vector<std::string> types;
    for (const auto &p : params) {
      if (std::find(types.begin(), types.end(), p[i]) == types.end()) types.push_back(p[i]);
    }
    if (types.size() < 2) continue;
    std::string text = "#" + std::to_string(i + 1) + ":";
    for (size_t t = 0; t < types.size(); ++t) text += (t ? ", " : " ") + types[t];
    out.push(Value(text));
  }
  return out;
}

void jax_recompile(const Query &q, const Context &, std::vector<Finding> &out) {
  std::string metric = "xla_compile_time";  // the share of all compile time, without sampling
  for (const char *m : {"wall_time", "cpu_time"}) {
    if (q.has(m)) {
      metric = m;
      break;
    }
  }
  std::vector<int> compiles;
  for (int n : q.nodes_of_kind({kScope})) {
    if (q.name(n).starts_with(kCompileScope) && q.exc(n, "xla_compiles") > 0) compiles.push_back(n);
  }
  // One site per (call line, module): the same jitted function compiled from the same line.
  for (const Site &site : by_line(q, compiles, [&](int n) { return q.name(n); })) {
    double count = 0, time = 0;
    std::vector<std::string> signatures;
    for (int n : site.nodes) {
      count += q.exc(n, "xla_compiles");
      time += q.exc(n, "xla_compile_time");
      if (const std::string *types = q.profile().prop(n, "input_types")) {
        for (const std::string &s : split(*types, " | ")) {
          if (std::find(signatures.begin(), signatures.end(), s) == signatures.end())
            signatures.push_back(s);
        }
      }
    }
    if (count < kMinCompiles) continue;
    const double total = q.total(metric);
    if (total > 0 && time / total < kMinShare) continue;
    const std::string &scope = q.name(site.nodes[0]);
    const std::string module =
        scope.substr(kCompileScope.size(), scope.size() - kCompileScope.size() - 1);
    Finding f;
    f.summary = module + " compiled " + std::to_string(static_cast<int64_t>(count)) + " times at " +
                q.source_label(site.nodes[0]) + ", " + fmt_ns(time) + " compiling";
    Value varying = varying_inputs(signatures);
    if (!varying.items().empty()) {
      f.summary += ": its input shapes or types change";
    } else if (signatures.size() == 1) {
      // Same inputs, compiled anew: jax.jit's cache is per function object.
      f.summary +=
          " with the same input types: a new function each time (a lambda or nested "
          "function jitted inside the loop), or changing static arguments";
    }
    f.suggestion =
        "Give the jitted function a few shapes only: pad the varying dimension to a few bucket "
        "sizes (with a mask) or to one maximum; keep the same dtypes (no Python scalars that "
        "become weak types one call and arrays the next); make `static_argnums` values take few "
        "distinct values; create the `jax.jit` function once, outside the loop. "
        "`jax.config.update('jax_explain_cache_misses', True)` says why each call missed the "
        "cache.";
    f.metric = metric;
    f.time = time;
    f.saving = count > 1 ? time * (count - 1) / count : 0;
    f.estimate =
        "the compile time of all compilations but one (measured per compilation); the tracing "
        "and lowering repeated with each is not counted";
    f.evidence.set("module", module)
        .set("compiles", static_cast<int64_t>(count))
        .set("compile_time", time)
        .set("varying_inputs", std::move(varying));
    f.node = site.nodes[0];
    f.nodes = site.nodes;
    out.push_back(std::move(f));
  }
}

}  // namespace

void add_jax(std::vector<RuleInfo> &r) {
  r.push_back({"jax-recompile",
               "A jitted function is compiled again and again",
               {"xla_compiles"},
               "",
               false,
               jax_recompile});
}

}  // namespace dctx::analyzer
