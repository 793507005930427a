#include "analyzer/query.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <unordered_set>

#include "analyzer/text.h"

namespace dctx::analyzer {

std::string abspath(const std::string &path) {
  std::string p = path;
  if (p.empty() || p[0] != '/') {
    char buf[4096];
    std::string cwd = getcwd(buf, sizeof buf) ? buf : "";
    p = cwd + "/" + p;
  }
  size_t lead = 0;
  while (lead < p.size() && p[lead] == '/') ++lead;
  std::string prefix = lead == 2 ? "//" : "/";
  std::vector<std::string> parts;
  size_t i = 0;
  while (i <= p.size()) {
    size_t j = p.find('/', i);
    if (j == std::string::npos) j = p.size();
    std::string part = p.substr(i, j - i);
    if (part == "..") {
      if (!parts.empty()) parts.pop_back();
    } else if (!part.empty() && part != ".") {
      parts.push_back(part);
    }
    i = j + 1;
  }
  std::string out = prefix;
  for (size_t k = 0; k < parts.size(); ++k) out += (k ? "/" : "") + parts[k];
  return out;
}

namespace {

// A file of Python's standard library: /lib/python3/ or /lib/python3.11/ in its path.
bool in_stdlib(std::string_view p) {
  constexpr std::string_view kLib = "/lib/python";
  for (size_t i = p.find(kLib); i != std::string_view::npos; i = p.find(kLib, i + 1)) {
    size_t k = i + kLib.size();
    size_t major = text::digits_at(p, k);
    if (major == 0) continue;
    k += major;
    if (k < p.size() && p[k] == '.') {
      size_t minor = text::digits_at(p, k + 1);
      if (minor == 0) continue;
      k += 1 + minor;
    }
    if (k < p.size() && p[k] == '/') return true;
  }
  return false;
}

}  // namespace

bool FrameMatch::search(const Profile &p, int node) const {
  size_t f = static_cast<size_t>(p.frame[node]);
  if (cache_uid_ != p.uid) {
    cache_.assign(p.frames.size(), -1);
    cache_uid_ = p.uid;
  }
  if (cache_[f] < 0) {
    const Frame &fr = p.frames[f];
    cache_[f] = test_(field_ == Field::kName ? fr.name : fr.file) ? 1 : 0;
  }
  return cache_[f] == 1;
}

bool is_user_file(const std::string &path, const std::string &pkg_dir) {
  if (path.empty() || path[0] == '<') return false;
  std::string p = path;
  std::replace(p.begin(), p.end(), '\\', '/');
  if (p.find("/site-packages/") != std::string::npos ||
      p.find("/dist-packages/") != std::string::npos) {
    return false;
  }
  if (in_stdlib(p)) return false;
  if (!pkg_dir.empty() && abspath(path).starts_with(pkg_dir + "/")) return false;
  return true;
}

Query::Query(const Profile &profile, std::string pkg_dir)
    : p_(profile), pkg_dir_(std::move(pkg_dir)) {
  size_t n = p_.size();
  kind.assign(n, kRoot);
  for (size_t i = 0; i < n; ++i) kind[i] = p_.frame_of(static_cast<int>(i)).kind;
  depth.assign(n, 0);
  for (auto *a : {&user_line, &module, &top_op, &leaf_op, &backward, &thread, &python, &compile}) {
    a->assign(n, -1);
  }
  std::vector<int8_t> user_frame(p_.frames.size(), -1);
  for (size_t i = 1; i < n; ++i) {
    int par = p_.parent[i];
    int k = kind[i];
    int id = static_cast<int>(i);
    depth[i] = depth[par] + 1;
    user_line[i] = user_line[par];
    module[i] = module[par];
    top_op[i] = top_op[par];
    leaf_op[i] = leaf_op[par];
    backward[i] = backward[par];
    thread[i] = thread[par];
    python[i] = python[par];
    compile[i] = compile[par];
    if (k == kPython) {
      python[i] = id;
      int8_t &u = user_frame[static_cast<size_t>(p_.frame[i])];
      if (u < 0) u = is_user_file(p_.frame_of(id).file, pkg_dir_) ? 1 : 0;
      if (u) user_line[i] = id;
    } else if (k == kModule) {
      module[i] = id;
    } else if (k == kOperator || k == kHloOp) {
      if (top_op[i] < 0) top_op[i] = id;
      leaf_op[i] = id;
    } else if (k == kBackward) {
      backward[i] = id;
    } else if (k == kThread) {
      thread[i] = id;
    } else if (k == kScope && compile[i] < 0 && p_.frame_of(id).name.starts_with(kCompileScope)) {
      compile[i] = id;
    }
  }
}

int64_t Query::launches(int n) const {
  if (const MetricValues *mv = values("launches")) {
    if (const MetricValue *v = mv->at(n)) {
      return v->sum != 0 ? static_cast<int64_t>(v->sum) : v->count;
    }
  }
  return count(n, "gpu_time");
}

int64_t Query::calls(int n) const {
  if (const MetricValue *v = value(n, "op_count")) {
    return v->sum != 0 ? static_cast<int64_t>(v->sum) : v->count;
  }
  return count(n, "op_time");
}

void Query::compute_launch_idle() const {
  idle_done_ = true;
  const MetricValues *mv = values(kIdleMetric);
  if (!mv) return;
  for (size_t i = 0; i < mv->nodes.size(); ++i) {
    int n = mv->nodes[i];
    double measured = mv->values[i].sum;
    if (measured <= 0 || kind[n] != kGpuApi || compiling(n)) continue;
    double model = 0.0;
    for (int k : children(n)) {
      if (kind[k] != kKernel) continue;
      int64_t l = launches(k);
      if (l > 0) {
        double mean = inc(k, "gpu_time") / static_cast<double>(l);
        model += static_cast<double>(l) * std::max(0.0, kLaunchHostNs - mean);
      }
    }
    if (model > 0) {
      double v = std::min(measured, model);
      idle_list_.emplace_back(n, v);
      idle_map_[n] = v;
    }
  }
}

double Query::launch_idle(int n) const {
  if (!idle_done_) compute_launch_idle();
  auto it = idle_map_.find(n);
  return it == idle_map_.end() ? 0.0 : it->second;
}

double Query::idle(int n) const {
  if (!idle_done_) compute_launch_idle();
  double s = 0;
  for (const auto &[a, v] : idle_list_) {
    if (n == 0 || in_subtree(a, n)) s += v;
  }
  return s;
}

double Query::denominator(const std::string &m) const {
  double t = total(m);
  if (m == "gpu_time") t += idle(0);
  // The root's wall_time is the threads' wall times added up (threads x elapsed for threads that
  // lived through the run): the whole of wall time is the run's elapsed time, where recorded.
  if (m == "wall_time" && t > 0) {
    if (const std::string *e = p_.meta_value("elapsed_ns")) {
      char *end = nullptr;
      const double elapsed = std::strtod(e->c_str(), &end);
      if (end != e->c_str() && elapsed > 0) t = elapsed;
    }
  }
  return t;
}

std::vector<int> Query::subtree(int n) const {
  std::vector<int> out, stack{n};
  while (!stack.empty()) {
    int x = stack.back();
    stack.pop_back();
    out.push_back(x);
    for (int c : children(x)) stack.push_back(c);
  }
  return out;
}

std::vector<int> Query::descendants(int n, int kind_filter, const FrameMatch *re) const {
  std::vector<int> out, stack{n};
  while (!stack.empty()) {
    int x = stack.back();
    stack.pop_back();
    for (int c : children(x)) stack.push_back(c);
    if (x == n) continue;
    if (kind_filter >= 0 && kind[x] != kind_filter) continue;
    if (re && !re->search(p_, x)) continue;
    out.push_back(x);
  }
  return out;
}

std::vector<int> Query::ancestors(int n) const {
  std::vector<int> out;
  int a = p_.parent[n];
  while (a != 0) {
    out.push_back(a);
    a = p_.parent[a];
  }
  return out;
}

bool Query::in_subtree(int n, int ancestor) const {
  while (n > ancestor) n = p_.parent[n];
  return n == ancestor;
}

std::vector<std::string> Query::path_labels(int n) const {
  std::vector<std::string> out;
  while (n != 0) {
    out.push_back(frame(n).label());
    n = p_.parent[n];
  }
  std::reverse(out.begin(), out.end());
  return out;
}

std::vector<int> Query::find(const std::string &name, int kind_filter) const {
  std::vector<int8_t> want(p_.frames.size(), 0);
  for (size_t f = 0; f < p_.frames.size(); ++f) {
    const Frame &fr = p_.frames[f];
    want[f] = fr.name == name && (kind_filter < 0 || fr.kind == kind_filter);
  }
  std::vector<int> out;
  for (int i = 1; i < size(); ++i) {
    if (want[static_cast<size_t>(p_.frame[i])]) out.push_back(i);
  }
  return out;
}

std::vector<int> Query::nodes_of_kind(std::initializer_list<int> kinds) const {
  std::vector<int> out;
  for (int i = 1; i < size(); ++i) {
    if (std::find(kinds.begin(), kinds.end(), kind[i]) != kinds.end()) out.push_back(i);
  }
  return out;
}

int Query::common_ancestor(const std::vector<int> &nodes) const {
  if (nodes.empty()) return 0;
  int acc = nodes[0];
  for (size_t i = 1; i < nodes.size(); ++i) {
    int a = acc, b = nodes[i];
    while (a != b) {
      if (a > b) {
        a = p_.parent[a];
      } else {
        b = p_.parent[b];
      }
    }
    acc = a;
  }
  return acc;
}

std::optional<Source> Query::source(int n) const {
  int u = user_line[n];
  if (u < 0) {
    if (python[n] < 0) return std::nullopt;
    u = python[n];
  }
  const Frame &f = frame(u);
  return Source{f.file, f.line, f.name};
}

std::string Query::source_label(int n) const {
  auto s = source(n);
  if (!s) return "(no Python source line)";
  return s->file + ":" + std::to_string(s->line) + " (" + s->function + ")";
}

Value Query::source_value(int n) const {
  auto s = source(n);
  if (!s) return Value();
  Value v = Value::dict();
  v.set("file", s->file).set("line", s->line).set("function", s->function);
  return v;
}

const std::string *Query::module_path(int n) const {
  return module[n] >= 0 ? &name(module[n]) : nullptr;
}

std::vector<std::string> Query::operators(int n) const {
  std::vector<std::string> out;
  while (n != 0) {
    if (is_op(n)) out.push_back(name(n));
    n = p_.parent[n];
  }
  std::reverse(out.begin(), out.end());
  return out;
}

int Query::forward_operator(int n) const {
  int b = backward[n];
  if (b < 0) return -1;
  int par = p_.parent[b];
  return is_op(par) ? par : leaf_op[par];
}

Value Query::kernels(int n, const std::string &metric, size_t limit) const {
  std::vector<std::string> order;
  std::unordered_map<std::string, std::pair<double, int64_t>> agg;
  for (int d : subtree(n)) {
    // XLA's autotuning kernels under a call that compiled: not what the call runs
    if (kind[d] != kKernel || (compiling(d) && !compiling(n))) continue;
    auto [it, fresh] = agg.try_emplace(name(d), 0.0, 0);
    if (fresh) order.push_back(name(d));
    it->second.first += inc(d, metric);
    it->second.second += launches(d);
  }
  std::stable_sort(order.begin(), order.end(), [&](const std::string &a, const std::string &b) {
    return agg[a].first > agg[b].first;
  });
  Value out = Value::list();
  for (size_t i = 0; i < order.size() && i < limit; ++i) {
    Value k = Value::dict();
    k.set("name", order[i]).set("time", agg[order[i]].first).set("launches", agg[order[i]].second);
    out.push(std::move(k));
  }
  return out;
}

bool Query::key_of(GroupBy by, int n, std::vector<std::string> &key) const {
  key.clear();
  switch (by) {
    case GroupBy::kLine:
    case GroupBy::kFunction: {
      auto s = source(n);
      if (!s) return false;
      if (by == GroupBy::kLine) {
        key = {s->file, std::to_string(s->line), s->function};
      } else {
        key = {s->file, s->function};
      }
      return true;
    }
    case GroupBy::kOperator:
      if (top_op[n] < 0) return false;
      key = {name(top_op[n])};
      return true;
    case GroupBy::kLeafOperator:
      if (leaf_op[n] < 0) return false;
      key = {name(leaf_op[n])};
      return true;
    case GroupBy::kModule:
      if (module[n] < 0) return false;
      key = {name(module[n])};
      return true;
    case GroupBy::kKernel:
      if (kind[n] != kKernel) return false;
      key = {name(n)};
      return true;
    case GroupBy::kFrame: {
      const Frame &f = frame(n);
      key = {f.kind_name, f.name, f.file, std::to_string(f.line), f.module};
      return true;
    }
  }
  return false;
}

int Query::anchor(GroupBy by, int n) const {
  switch (by) {
    case GroupBy::kLine:
    case GroupBy::kFunction:
      return user_line[n] >= 0 ? user_line[n] : python[n];
    case GroupBy::kOperator:
      return top_op[n];
    case GroupBy::kLeafOperator:
      return leaf_op[n];
    case GroupBy::kModule:
      return module[n];
    default:
      return n;
  }
}

std::vector<Group> Query::group_by(GroupBy by, const std::string &metric,
                                   const std::vector<int> *within,
                                   const std::function<bool(int)> &where) const {
  std::vector<Group> groups;
  const MetricValues *mv = values(metric);
  if (!mv) return groups;
  std::vector<int> candidates;
  if (!within) {
    candidates.assign(mv->nodes.begin(), mv->nodes.end());
  } else {
    std::unordered_set<int> seen;
    for (int r : *within) {
      for (int d : subtree(r)) {
        if (mv->at(d) && seen.insert(d).second) candidates.push_back(d);
      }
    }
    std::sort(candidates.begin(), candidates.end());
  }
  std::map<std::vector<std::string>, size_t> index;
  std::vector<std::string> key;
  for (int n : candidates) {
    const MetricValue &v = *mv->at(n);
    if (v.count == 0 && v.sum == 0) continue;
    if (where && !where(n)) continue;
    if (!key_of(by, n, key)) continue;
    auto [it, fresh] = index.try_emplace(key, groups.size());
    if (fresh) {
      groups.emplace_back();
      groups.back().key = key;
    }
    Group &g = groups[it->second];
    g.value += v.sum;
    g.count += v.count;
    g.nodes.push_back(n);
    int a = anchor(by, n);
    if (a >= 0 && std::find(g.anchors.begin(), g.anchors.end(), a) == g.anchors.end()) {
      g.anchors.push_back(a);
    }
  }
  std::stable_sort(groups.begin(), groups.end(),
                   [](const Group &a, const Group &b) { return a.value > b.value; });
  double t = total(metric);
  for (Group &g : groups) g.share = t > 0 ? g.value / t : 0.0;
  return groups;
}

}  // namespace dctx::analyzer
