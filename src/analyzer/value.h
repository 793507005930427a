// A JSON-like value: evidence of findings, parsed metadata. Insertion-ordered objects, integers
// kept apart from floats, so what reaches Python (and its JSON output) has the types a rule gave
// it.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace dctx::analyzer {

class Value {
 public:
  enum class Type { kNull, kBool, kInt, kFloat, kString, kList, kDict };
  using Item = std::pair<std::string, Value>;

  Value() = default;
  Value(std::nullptr_t) {}
  Value(bool b) : type_(Type::kBool), int_(b ? 1 : 0) {}
  Value(int i) : type_(Type::kInt), int_(i) {}
  Value(int64_t i) : type_(Type::kInt), int_(i) {}
  Value(double f) : type_(Type::kFloat), float_(f) {}
  Value(const char *s) : type_(Type::kString), str_(s) {}
  Value(std::string s) : type_(Type::kString), str_(std::move(s)) {}

  static Value list() {
    Value v;
    v.type_ = Type::kList;
    return v;
  }
  static Value dict() {
    Value v;
    v.type_ = Type::kDict;
    return v;
  }

  Type type() const { return type_; }
  bool is_null() const { return type_ == Type::kNull; }
  bool is_number() const {
    return type_ == Type::kInt || type_ == Type::kFloat || type_ == Type::kBool;
  }
  bool is_string() const { return type_ == Type::kString; }
  bool is_list() const { return type_ == Type::kList; }
  bool is_dict() const { return type_ == Type::kDict; }
  bool as_bool() const { return int_ != 0; }
  int64_t as_int() const { return type_ == Type::kFloat ? static_cast<int64_t>(float_) : int_; }
  double as_float() const { return type_ == Type::kFloat ? float_ : static_cast<double>(int_); }
  const std::string &as_string() const { return str_; }
  const std::vector<Value> &items() const { return list_; }
  const std::vector<Item> &fields() const { return dict_; }

  // Python truthiness.
  bool truthy() const;

  // List append; dict set (an existing key keeps its place and takes the new value).
  Value &push(Value v) {
    list_.push_back(std::move(v));
    return *this;
  }
  Value &set(std::string_view key, Value v);
  // Dict lookup; nullptr when absent (or not a dict).
  const Value *get(std::string_view key) const;
  bool has(std::string_view key) const { return get(key) != nullptr; }

  // Python str(): ints in decimal, floats as repr, strings as they are, True/False/None.
  std::string str() const;

  // Parses JSON (nlohmann/json, objects in their order); false on a syntax error, which
  // includes Python's non-standard NaN and Infinity.
  static bool parse(std::string_view text, Value &out);

 private:
  Type type_ = Type::kNull;
  int64_t int_ = 0;
  double float_ = 0.0;
  std::string str_;
  std::vector<Value> list_;
  std::vector<Item> dict_;
};

// Python repr() of a float (shortest round-trip digits, Python's exponent rules).
std::string float_repr(double v);

}  // namespace dctx::analyzer
