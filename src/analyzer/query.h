// The query layer the built-in rules are written against: per-node context computed in one pass
// (innermost user source line, nn.Module, outermost/innermost operator, backward marker), metric
// look-ups, navigation, find, group-by and the launch-overhead idle model. Mirrors
// deepcontext.analyzer.Query (docs/analyzer.md), which custom Python rules use.
#pragma once

#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "analyzer/profile.h"
#include "analyzer/value.h"

namespace dctx::analyzer {

// Host time to issue one eager kernel (calibrated on the H200 machine, docs/case-studies.md).
inline constexpr double kLaunchHostNs = 10000.0;
inline constexpr const char *kIdleMetric = "gpu_idle_time";
// The scope deepcontext/jax_support.py opens around each XLA compilation: xla_compile(<module>).
inline constexpr std::string_view kCompileScope = "xla_compile(";

struct Source {
  std::string file;
  int64_t line = 0;
  std::string function;
};

// One row of Query::group_by.
struct Group {
  std::vector<std::string> key;  // e.g. {file, line, function} for "line"
  double value = 0;
  int64_t count = 0;
  double share = 0;
  std::vector<int> nodes;
  std::vector<int> anchors;
};

enum class GroupBy { kLine, kFunction, kOperator, kLeafOperator, kModule, kKernel, kFrame };

// A rule's pattern (a plain string test, analyzer/text.h) over one field of a node's frame,
// cached per frame.
class FrameMatch {
 public:
  enum class Field { kName, kFile };
  using Test = bool (*)(std::string_view);
  explicit FrameMatch(Test test, Field field = Field::kName) : test_(test), field_(field) {}
  bool search(const Profile &p, int node) const;
  bool search(std::string_view s) const { return test_(s); }

 private:
  Test test_;
  Field field_;
  mutable uint64_t cache_uid_ = 0;
  mutable std::vector<int8_t> cache_;
};

// os.path.abspath: the path joined to the working directory, normalized lexically.
std::string abspath(const std::string &path);

// True for a source file of the profiled program (not the standard library, installed packages,
// DeepContext itself under pkg_dir, nor synthetic `<...>` files).
bool is_user_file(const std::string &path, const std::string &pkg_dir);

class Query {
 public:
  Query(const Profile &profile, std::string pkg_dir);

  const Profile &profile() const { return p_; }
  const std::string &pkg_dir() const { return pkg_dir_; }
  int size() const { return static_cast<int>(p_.size()); }
  const Frame &frame(int n) const { return p_.frame_of(n); }
  const std::string &name(int n) const { return p_.frame_of(n).name; }
  int parent(int n) const { return p_.parent[n]; }
  std::span<const int32_t> children(int n) const {
    return {p_.child_list.data() + p_.child_begin[n],
            static_cast<size_t>(p_.child_begin[n + 1] - p_.child_begin[n])};
  }
  bool is_op(int n) const { return kind[n] == kOperator || kind[n] == kHloOp; }
  // Inside an XLA compilation: XLA's GPU autotuning runs and synchronizes candidate kernels
  // there, work of the compiler, not of the program's steps (the GPU rules leave it out).
  bool compiling(int n) const { return compile[n] >= 0; }

  // -- metrics
  const MetricValues *values(const std::string &m) const { return p_.metric(m); }
  const MetricValue *value(int n, const std::string &m) const {
    const MetricValues *mv = values(m);
    return mv ? mv->at(n) : nullptr;
  }
  bool has(const std::string &m) const { return values(m) && total(m) > 0; }
  double inc(int n, const std::string &m) const {
    const MetricValue *v = value(n, m);
    return v ? v->inc : 0.0;
  }
  double exc(int n, const std::string &m) const {
    const MetricValue *v = value(n, m);
    return v ? v->sum : 0.0;
  }
  int64_t count(int n, const std::string &m) const {
    const MetricValue *v = value(n, m);
    return v ? v->count : 0;
  }
  double total(const std::string &m) const { return inc(0, m); }
  double share(double v, const std::string &m) const {
    double t = total(m);
    return t > 0 ? v / t : 0.0;
  }
  int64_t launches(int n) const;
  int64_t calls(int n) const;

  // -- launch-overhead idle
  double launch_idle(int api_node) const;
  double idle(int n) const;
  double denominator(const std::string &m) const;

  // -- navigation
  std::vector<int> subtree(int n) const;  // n first, then depth-first (last child first)
  std::vector<int> descendants(int n, int kind_filter = -1, const FrameMatch *re = nullptr) const;
  std::vector<int> ancestors(int n) const;  // nearest first, root excluded
  bool in_subtree(int n, int ancestor) const;
  std::vector<std::string> path_labels(int n) const;
  std::vector<int> find(const std::string &name, int kind_filter) const;
  std::vector<int> nodes_of_kind(std::initializer_list<int> kinds) const;
  int common_ancestor(const std::vector<int> &nodes) const;

  // -- context of a node
  std::optional<Source> source(int n) const;
  std::string source_label(int n) const;
  Value source_value(int n) const;
  const std::string *module_path(int n) const;
  std::vector<std::string> operators(int n) const;
  int forward_operator(int n) const;
  Value kernels(int n, const std::string &metric = "gpu_time", size_t limit = 5) const;

  // -- grouping: exclusive values of the metric by a key of each measured node, heaviest first
  std::vector<Group> group_by(GroupBy by, const std::string &metric,
                              const std::vector<int> *within = nullptr,
                              const std::function<bool(int)> &where = {}) const;

  std::vector<int> kind, depth, user_line, module, top_op, leaf_op, backward, thread, python,
      compile;

 private:
  bool key_of(GroupBy by, int n, std::vector<std::string> &key) const;
  int anchor(GroupBy by, int n) const;
  void compute_launch_idle() const;

  const Profile &p_;
  std::string pkg_dir_;
  mutable bool idle_done_ = false;
  mutable std::vector<std::pair<int, double>> idle_list_;  // in the idle metric's node order
  mutable std::unordered_map<int, double> idle_map_;
};

}  // namespace dctx::analyzer
