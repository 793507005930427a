// The rule engine: the built-in rules' registry, running a rule over a Query, and ranking findings
// (the built-in ones and those of custom Python rules, passed in as records) by estimated saving.
// Semantics of deepcontext.analyzer.engine (docs/analyzer.md); one Analyzer per profile, one
// thread.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "analyzer/profile.h"
#include "analyzer/query.h"
#include "analyzer/value.h"

namespace dctx::analyzer {

// What a rule found: the engine fills rule, title, share, saving_share and location.
struct Finding {
  std::string rule, title, summary, suggestion, metric, estimate;
  double time = 0, saving = 0;
  std::optional<double> total;
  Value evidence = Value::dict();
  std::optional<int> node;
  std::vector<int> nodes;
  double share = 0, saving_share = 0;
  Value location;
  int external = -1;  // index of a custom (Python) rule's finding, -1 for a built-in one
};

// Thrown by a rule when the profile lacks what it needs (the rule is then listed as skipped).
class NotApplicable : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Services a rule may need from outside the profile.
struct Context {
  // (first, last) line of every for/while loop of a Python source file; empty when unreadable.
  std::function<std::vector<std::pair<int64_t, int64_t>>(const std::string &)> source_loops;
  std::string pkg_dir;  // DeepContext's own package directory (not user code)
};

using Check = std::function<void(const Query &, const Context &, std::vector<Finding> &)>;

struct RuleInfo {
  std::string id, title;
  std::vector<std::string> needs;
  std::string description;
  bool generic = false;  // its finding is dropped when a specific rule reports the same node
  Check check;
};

// The built-in rules in registration order.
const std::vector<RuleInfo> &builtin_rules();
const RuleInfo *find_builtin(const std::string &id);

struct RuleStatus {
  enum class State { kRun, kSkipped, kError } state = State::kRun;
  std::string message;  // the reason (skipped) or the error
  size_t findings = 0;
};

class Analyzer {
 public:
  // Loads the profile; throws ProfileError.
  Analyzer(const std::string &path, Context ctx);

  const Profile &profile() const { return *profile_; }
  const Query &query() const { return *query_; }

  // Runs one built-in rule; its findings join the ones to rank.
  RuleStatus run_builtin(const std::string &id);
  // A custom rule's finding (only what ranking needs), in the order the rules ran.
  void add_external(Finding f, bool generic);
  // Drops generic findings that specific ones cover, bounds saving <= time <= total, computes
  // shares and locations, drops those below min_share, ranks by saving share.
  std::vector<Finding> finish(double min_share);

 private:
  Value location(const Finding &f) const;
  bool mostly_covered(const Finding &f, const std::vector<char> &covered) const;

  std::unique_ptr<Profile> profile_;
  std::unique_ptr<Query> query_;
  Context ctx_;
  std::vector<std::pair<Finding, bool>> found_;  // finding, from a generic rule
};

// Python-compatible number formatting for summaries: f"{v:.{prec}f}", f"{v:.{prec}%}".
std::string fixed(double v, int prec);
std::string pct(double v, int prec);
std::string fmt_ns(double ns);
// The first n code points of a UTF-8 string (Python s[:n]).
std::string head(const std::string &s, size_t n);

// Shared helpers of the built-in rules (rules/_common.py).
std::string op_metric(const Query &q);   // "" when none
std::string cpu_metric(const Query &q);  // "" when none
struct Site {
  std::vector<std::string> key;
  std::vector<int> nodes;
};
// Nodes grouped by (file, line) of their source, plus an optional extra key, in first-seen order.
std::vector<Site> by_line(const Query &q, const std::vector<int> &nodes,
                          const std::function<std::string(int)> &extra = {});
std::vector<int> outermost(const Query &q, const std::vector<int> &nodes);
bool in_model_transfer(const Query &q, int node);
// Nodes of a kind that the program's own execution made: those inside an XLA compilation (GPU
// autotuning of candidate kernels, with a synchronization after each) are left out.
std::vector<int> executed_nodes(const Query &q, int kind);
// meta_json: the parsed JSON value of a meta key, the raw string when it is not JSON.
std::optional<Value> meta_json(const Query &q, const std::string &key);
std::optional<int64_t> meta_int(const Query &q, std::initializer_list<const char *> keys);
std::optional<Value> device_prop(const Query &q, std::initializer_list<const char *> names);
std::vector<int> enclosing_call(const Query &q, int node, bool from_line);
// Python float(v) of a JSON value or string; nullopt where Python raises.
std::optional<double> py_float(const Value &v);

// Rule registration, one function per rules file.
void add_backward_imbalance(std::vector<RuleInfo> &r);
void add_data_loader(std::vector<RuleInfo> &r);
void add_distributed(std::vector<RuleInfo> &r);
void add_gpu_kernels(std::vector<RuleInfo> &r);
void add_gpu_launch(std::vector<RuleInfo> &r);
void add_host_sync(std::vector<RuleInfo> &r);
void add_index_backward(std::vector<RuleInfo> &r);
void add_jax(std::vector<RuleInfo> &r);
void add_threads(std::vector<RuleInfo> &r);

}  // namespace dctx::analyzer
