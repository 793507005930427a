#include "analyzer/engine.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <set>

#include "analyzer/text.h"

namespace dctx::analyzer {

const std::vector<RuleInfo> &builtin_rules() {
  static const std::vector<RuleInfo> rules = [] {
    std::vector<RuleInfo> r;
    add_backward_imbalance(r);
    add_data_loader(r);
    add_distributed(r);
    add_gpu_kernels(r);
    add_gpu_launch(r);
    add_host_sync(r);
    add_index_backward(r);
    add_jax(r);
    add_threads(r);
    return r;
  }();
  return rules;
}

const RuleInfo *find_builtin(const std::string &id) {
  for (const auto &r : builtin_rules()) {
    if (r.id == id) return &r;
  }
  return nullptr;
}

Analyzer::Analyzer(const std::string &path, Context ctx)
    : profile_(std::make_unique<Profile>(load_profile(path))),
      query_(std::make_unique<Query>(*profile_, ctx.pkg_dir)),
      ctx_(std::move(ctx)) {}

RuleStatus Analyzer::run_builtin(const std::string &id) {
  RuleStatus st;
  const RuleInfo *r = find_builtin(id);
  if (!r) {
    st.state = RuleStatus::State::kError;
    st.message = "unknown built-in rule " + id;
    return st;
  }
  if (!r->needs.empty() && std::none_of(r->needs.begin(), r->needs.end(),
                                        [&](const std::string &m) { return query_->has(m); })) {
    st.state = RuleStatus::State::kSkipped;
    st.message = "profile has none of: ";
    for (size_t i = 0; i < r->needs.size(); ++i) st.message += (i ? ", " : "") + r->needs[i];
    return st;
  }
  std::vector<Finding> mine;
  try {
    r->check(*query_, ctx_, mine);
  } catch (const NotApplicable &e) {
    st.state = RuleStatus::State::kSkipped;
    st.message = e.what();
    return st;
  } catch (const ProfileError &e) {
    st.state = RuleStatus::State::kError;
    st.message = std::string("ProfileError: ") + e.what() + " (rule " + id + ")";
    return st;
  } catch (const std::exception &e) {
    st.state = RuleStatus::State::kError;
    st.message = std::string("RuntimeError: ") + e.what() + " (rule " + id + ")";
    return st;
  }
  for (Finding &f : mine) {
    if (f.rule.empty()) f.rule = r->id;
    if (f.title.empty()) f.title = r->title;
    found_.emplace_back(std::move(f), r->generic);
  }
  st.findings = mine.size();
  return st;
}

void Analyzer::add_external(Finding f, bool generic) {
  auto valid = [&](int n) { return n >= 0 && n < query_->size(); };
  if (f.node && !valid(*f.node)) {
    throw std::out_of_range("finding of rule " + f.rule + ": no node " + std::to_string(*f.node));
  }
  for (int n : f.nodes) {
    if (!valid(n))
      throw std::out_of_range("finding of rule " + f.rule + ": no node " + std::to_string(n));
  }
  found_.emplace_back(std::move(f), generic);
}

bool Analyzer::mostly_covered(const Finding &f, const std::vector<char> &covered) const {
  if (f.nodes.empty()) return false;
  size_t inside = 0;
  for (int n : f.nodes) {
    bool in = covered[static_cast<size_t>(n)] != 0;
    for (int a = query_->parent(n); !in && a != 0; a = query_->parent(a)) {
      in = covered[static_cast<size_t>(a)] != 0;
    }
    inside += in;
  }
  return inside * 2 > f.nodes.size();
}

Value Analyzer::location(const Finding &f) const {
  const Query &q = *query_;
  Value loc = Value::dict();
  if (!f.node) {
    loc.set("node", Value())
        .set("path", Value::list())
        .set("source", Value())
        .set("module", Value())
        .set("operators", Value::list())
        .set("kernels", Value::list());
    return loc;
  }
  int n = *f.node;
  Value path = Value::list();
  for (auto &l : q.path_labels(n)) path.push(std::move(l));
  Value ops = Value::list();
  for (auto &o : q.operators(n)) ops.push(std::move(o));
  const std::string *mod = q.module_path(n);
  loc.set("node", n)
      .set("path", std::move(path))
      .set("source", q.source_value(n))
      .set("module", mod ? Value(*mod) : Value())
      .set("operators", std::move(ops))
      .set("kernels", q.has("gpu_time") ? q.kernels(n) : Value::list());
  return loc;
}

std::vector<Finding> Analyzer::finish(double min_share) {
  const Query &q = *query_;
  std::set<int> specific;
  std::vector<char> covered(static_cast<size_t>(q.size()), 0);
  bool any_covered = false;
  for (const auto &[f, generic] : found_) {
    if (generic) continue;
    if (f.node) specific.insert(*f.node);
    for (int n : f.nodes) {
      int k = q.kind[n];
      if (k != kPython && k != kThread && k != kModule && k != kRoot) {
        covered[static_cast<size_t>(n)] = 1;
        any_covered = true;
      }
    }
  }
  std::vector<Finding> out;
  for (auto &[f, generic] : found_) {
    if (generic &&
        ((f.node && specific.count(*f.node)) || (any_covered && mostly_covered(f, covered)))) {
      continue;
    }
    // A saving is part of the region it removes, and the region part of the whole.
    f.time = std::max(0.0, f.time);
    f.saving = std::min(std::max(0.0, f.saving), f.time);
    double total = f.total && *f.total != 0 ? *f.total : q.denominator(f.metric);
    f.total = std::max(total, f.time);
    f.share = *f.total > 0 ? f.time / *f.total : 0.0;
    f.saving_share = *f.total > 0 ? f.saving / *f.total : 0.0;
    if (f.share < min_share) continue;
    f.location = location(f);
    if (f.node && std::find(f.nodes.begin(), f.nodes.end(), *f.node) == f.nodes.end()) {
      f.nodes.insert(f.nodes.begin(), *f.node);
    }
    out.push_back(std::move(f));
  }
  found_.clear();
  // By the time a finding would save: findings measured in different metrics (GPU timeline, wall
  // time, CPU time) have shares of different wholes, and a JAX program's 30 ms of host reads
  // (1 % of a wall time spent mostly compiling) outweigh 2 ms of launch idle (6 % of a short GPU
  // timeline). Findings in metrics that are not times follow, by share.
  auto timed = [&](const Finding &f) {
    const MetricValues *mv = q.values(f.metric);
    return mv == nullptr || mv->unit == "ns";
  };
  std::stable_sort(out.begin(), out.end(), [&](const Finding &a, const Finding &b) {
    bool ta = timed(a), tb = timed(b);
    if (ta != tb) return ta;
    if (ta && a.saving != b.saving) return a.saving > b.saving;
    if (a.saving_share != b.saving_share) return a.saving_share > b.saving_share;
    if (a.share != b.share) return a.share > b.share;
    return a.rule < b.rule;
  });
  return out;
}

// -- formatting --------------------------------------------------------------------------------

std::string fixed(double v, int prec) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v < 0 ? "-inf" : "inf";
  char buf[512];
  std::snprintf(buf, sizeof buf, "%.*f", prec, v);
  return buf;
}

std::string pct(double v, int prec) { return fixed(v * 100.0, prec) + "%"; }

std::string fmt_ns(double ns) {
  double a = std::fabs(ns);
  if (a >= 1e9) return fixed(ns / 1e9, 2) + " s";
  if (a >= 1e6) return fixed(ns / 1e6, 2) + " ms";
  if (a >= 1e3) return fixed(ns / 1e3, 1) + " us";
  return fixed(ns, 0) + " ns";
}

std::string head(const std::string &s, size_t n) {
  size_t i = 0, cps = 0;
  while (i < s.size() && cps < n) {
    auto c = static_cast<unsigned char>(s[i]);
    i += c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
    ++cps;
  }
  return s.substr(0, std::min(i, s.size()));
}

// -- rules/_common.py ----------------------------------------------------------------------------

std::string op_metric(const Query &q) {
  for (const char *m : {"gpu_time", "op_time", "cpu_time", "wall_time"}) {
    if (q.has(m)) return m;
  }
  return "";
}

std::string cpu_metric(const Query &q) {
  for (const char *m : {"wall_time", "cpu_time", "op_time"}) {
    if (q.has(m)) return m;
  }
  return "";
}

std::vector<Site> by_line(const Query &q, const std::vector<int> &nodes,
                          const std::function<std::string(int)> &extra) {
  std::vector<Site> sites;
  std::map<std::vector<std::string>, size_t> index;
  for (int n : nodes) {
    auto s = q.source(n);
    std::vector<std::string> key = s ? std::vector<std::string>{s->file, std::to_string(s->line)}
                                     : std::vector<std::string>{"", "0"};
    if (extra) key.push_back(extra(n));
    auto [it, fresh] = index.try_emplace(key, sites.size());
    if (fresh) sites.push_back(Site{key, {}});
    sites[it->second].nodes.push_back(n);
  }
  return sites;
}

std::vector<int> outermost(const Query &q, const std::vector<int> &nodes) {
  std::set<int> chosen(nodes.begin(), nodes.end());
  std::vector<int> out;
  for (int n : nodes) {
    bool inside = false;
    for (int a = q.parent(n); a != 0 && !inside; a = q.parent(a)) inside = chosen.count(a) > 0;
    if (!inside) out.push_back(n);
  }
  return out;
}

std::vector<int> executed_nodes(const Query &q, int kind) {
  std::vector<int> out;
  for (int n = 1; n < q.size(); ++n) {
    if (q.kind[n] == kind && !q.compiling(n)) out.push_back(n);
  }
  return out;
}

bool in_model_transfer(const Query &q, int node) {
  static thread_local uint64_t cached_for = 0;
  static thread_local std::vector<int8_t> cache;
  const Profile &p = q.profile();
  if (cached_for != p.uid) {
    cached_for = p.uid;
    cache.assign(p.frames.size(), -1);
  }
  for (int a = q.parent(node); a != 0; a = q.parent(a)) {
    if (q.kind[a] != kPython) continue;
    int8_t &c = cache[static_cast<size_t>(p.frame[a])];
    if (c < 0) {
      const Frame &f = q.frame(a);
      c = text::equals_any(f.name, {"Module.to", "Module.cuda", "Module._apply", "Module.to_empty",
                                    "Module.xpu", "Module.mps", "Module.cpu", "Module.half",
                                    "Module.float", "Module.bfloat16"}) &&
                  f.file.ends_with("torch/nn/modules/module.py")
              ? 1
              : 0;
    }
    if (c) return true;
  }
  return false;
}

std::optional<Value> meta_json(const Query &q, const std::string &key) {
  const std::string *v = q.profile().meta_value(key);
  if (!v) return std::nullopt;
  Value out;
  if (Value::parse(*v, out)) return out;
  return Value(*v);
}

std::optional<double> py_float(const Value &v) {
  if (v.is_number()) return v.as_float();
  if (!v.is_string()) return std::nullopt;
  std::string s = v.as_string();
  auto space = [](char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
  };
  while (!s.empty() && space(s.back())) s.pop_back();
  size_t b = 0;
  while (b < s.size() && space(s[b])) ++b;
  s = s.substr(b);
  if (s.empty() || s.find('_') != std::string::npos || s.find('x') != std::string::npos ||
      s.find('X') != std::string::npos) {
    return std::nullopt;
  }
  char *end = nullptr;
  double d = std::strtod(s.c_str(), &end);
  if (end != s.c_str() + s.size()) return std::nullopt;
  return d;
}

std::optional<int64_t> meta_int(const Query &q, std::initializer_list<const char *> keys) {
  for (const char *k : keys) {
    const std::string *v = q.profile().meta_value(k);
    if (!v) continue;
    auto f = py_float(Value(*v));
    if (f && std::fabs(*f) < 9.2e18) return static_cast<int64_t>(*f);  // NaN, inf: no
    if (auto d = text::to_int(text::first_digits(*v))) return d;
  }
  return std::nullopt;
}

namespace {

std::vector<Value> gpu_devices(const Query &q) {
  std::vector<Value> out;
  for (const char *k : {"devices", "gpu_devices", "gpus"}) {
    auto v = meta_json(q, k);
    if (!v) continue;
    if (v->is_list()) {
      for (const Value &d : v->items()) {
        if (d.is_dict()) out.push_back(d);
      }
      return out;
    }
    if (v->is_dict()) return {*v};
  }
  return out;
}

}  // namespace

std::optional<Value> device_prop(const Query &q, std::initializer_list<const char *> names) {
  for (const Value &d : gpu_devices(q)) {
    for (const char *n : names) {
      if (const Value *v = d.get(n)) return *v;
    }
  }
  for (const char *n : names) {
    for (const std::string &k :
         {std::string(n), "gpu_" + std::string(n), "device_" + std::string(n)}) {
      if (q.profile().meta_value(k)) return meta_json(q, k);
    }
  }
  return std::nullopt;
}

std::vector<int> enclosing_call(const Query &q, int node, bool from_line) {
  int u = q.user_line[node];
  if (u < 0) u = q.python[node];
  if (u < 0) return {node};
  const Frame &f = q.frame(u);
  std::vector<int> out;
  for (int c : q.children(q.parent(u))) {
    if (q.kind[c] != kPython) continue;
    const Frame &cf = q.frame(c);
    if (cf.name == f.name && cf.file == f.file && (!from_line || cf.line >= f.line)) {
      out.push_back(c);
    }
  }
  return out;
}

}  // namespace dctx::analyzer
