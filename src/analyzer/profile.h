// An in-memory .dctx profile (docs/format.md) for the analyzer: frames, the tree as parallel arrays
// indexed by node id, per-metric values, node properties and metadata. Loaded once, then read-only.
#pragma once

#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

namespace dctx::analyzer {

// A profile that cannot be read; the message is one line naming the file.
class ProfileError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

enum Kind : int {
  kRoot = 0,
  kPython = 1,
  kScope = 2,
  kOperator = 3,
  kNative = 4,
  kGpuApi = 5,
  kKernel = 6,
  kMemcpy = 7,
  kMemset = 8,
  kBackward = 9,
  kModule = 10,
  kThread = 11,
  kSync = 12,
  kHloOp = 13,
  kJaxOp = 14,
  kStep = 15,
};

struct Frame {
  int kind = kRoot;
  std::string kind_name = "root";
  std::string name;
  std::string file;
  int64_t line = 0;
  std::string module;

  // How reports name the frame (reader.Frame.label).
  std::string label() const;
  bool operator==(const Frame &) const = default;
};

// One node's value of a metric: exclusive sum, count, min, max and inclusive sum.
struct MetricValue {
  double sum = 0, min = 0, max = 0, inc = 0;
  int64_t count = 0;
};

// The values of one metric, in the order the profile stores them (by node id).
struct MetricValues {
  std::string name;
  std::string unit;
  std::vector<int32_t> slot;  // node -> index into nodes/values, -1 = no value
  std::vector<int32_t> nodes;
  std::vector<MetricValue> values;

  const MetricValue *at(int node) const {
    if (node < 0 || static_cast<size_t>(node) >= slot.size() || slot[node] < 0) return nullptr;
    return &values[slot[node]];
  }
};

struct Profile {
  uint64_t uid = 0;  // distinct for every loaded profile (keys per-frame caches)
  std::string path;
  std::map<std::string, std::string> meta;
  std::vector<Frame> frames;  // by frame id (below the row count: the loader checks)
  std::vector<int32_t> parent;
  std::vector<int32_t> frame;
  std::vector<int32_t>
      child_begin;  // children of n: child_list[child_begin[n] .. child_begin[n+1])
  std::vector<int32_t> child_list;
  std::vector<MetricValues> metrics;  // in the profile's metric-id order
  std::unordered_map<int, std::map<std::string, std::string>> props;

  size_t size() const { return parent.size(); }
  const Frame &frame_of(int node) const { return frames[frame[node]]; }
  // nullptr when the profile has no such metric.
  const MetricValues *metric(const std::string &name) const;
  const std::string *meta_value(const std::string &key) const {
    auto it = meta.find(key);
    return it == meta.end() ? nullptr : &it->second;
  }
  const std::string *prop(int node, const std::string &key) const;
  // Inclusive value; throws ProfileError for a metric the profile lacks (reader.Profile.inclusive).
  double inclusive(int node, const std::string &metric) const;
};

// Loads a profile; throws ProfileError with the same one-line messages as deepcontext.reader.
Profile load_profile(const std::string &path);

}  // namespace dctx::analyzer
