#include "analyzer/value.h"

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <nlohmann/json.hpp>

namespace dctx::analyzer {

bool Value::truthy() const {
  switch (type_) {
    case Type::kNull:
      return false;
    case Type::kBool:
    case Type::kInt:
      return int_ != 0;
    case Type::kFloat:
      return float_ != 0.0;
    case Type::kString:
      return !str_.empty();
    case Type::kList:
      return !list_.empty();
    case Type::kDict:
      return !dict_.empty();
  }
  return false;
}

Value &Value::set(std::string_view key, Value v) {
  for (auto &[k, old] : dict_) {
    if (k == key) {
      old = std::move(v);
      return *this;
    }
  }
  dict_.emplace_back(std::string(key), std::move(v));
  return *this;
}

const Value *Value::get(std::string_view key) const {
  if (type_ != Type::kDict) return nullptr;
  for (const auto &[k, v] : dict_) {
    if (k == key) return &v;
  }
  return nullptr;
}

std::string float_repr(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v < 0 ? "-inf" : "inf";
  if (v == 0.0) return std::signbit(v) ? "-0.0" : "0.0";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::scientific);
  std::string s(buf, res.ptr);
  std::string sign;
  if (s[0] == '-') {
    sign = "-";
    s.erase(0, 1);
  }
  size_t e = s.find('e');
  int exp = static_cast<int>(std::strtol(s.c_str() + e + 1, nullptr, 10));
  std::string digits;
  for (size_t i = 0; i < e; ++i) {
    if (s[i] != '.') digits += s[i];
  }
  // repr switches to exponent notation outside 1e-4 <= |v| < 1e16
  if (exp < -4 || exp >= 16) {
    std::string out = sign + digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    char eb[16];
    std::snprintf(eb, sizeof eb, "e%c%02d", exp < 0 ? '-' : '+', std::abs(exp));
    return out + eb;
  }
  std::string out;
  if (exp < 0) {
    out = "0." + std::string(static_cast<size_t>(-exp - 1), '0') + digits;
  } else if (static_cast<size_t>(exp) + 1 >= digits.size()) {
    out = digits + std::string(static_cast<size_t>(exp) + 1 - digits.size(), '0') + ".0";
  } else {
    out = digits.substr(0, static_cast<size_t>(exp) + 1) + "." +
          digits.substr(static_cast<size_t>(exp) + 1);
  }
  return sign + out;
}

std::string Value::str() const {
  switch (type_) {
    case Type::kNull:
      return "None";
    case Type::kBool:
      return int_ ? "True" : "False";
    case Type::kInt:
      return std::to_string(int_);
    case Type::kFloat:
      return float_repr(float_);
    case Type::kString:
      return str_;
    case Type::kList: {
      std::string out = "[";
      for (size_t i = 0; i < list_.size(); ++i) {
        if (i) out += ", ";
        out += list_[i].is_string() ? "'" + list_[i].str_ + "'" : list_[i].str();
      }
      return out + "]";
    }
    case Type::kDict: {
      std::string out = "{";
      for (size_t i = 0; i < dict_.size(); ++i) {
        if (i) out += ", ";
        const Value &v = dict_[i].second;
        out += "'" + dict_[i].first + "': " + (v.is_string() ? "'" + v.str_ + "'" : v.str());
      }
      return out + "}";
    }
  }
  return "";
}

namespace {

using Json = nlohmann::ordered_json;

// Nesting deeper than any metadata has is refused, which keeps the conversion's recursion shallow
// on a damaged or hostile profile (nlohmann's own parsing does not recurse).
constexpr int kMaxDepth = 512;

bool from_json(const Json &j, Value &out, int depth) {
  if (depth > kMaxDepth) return false;
  switch (j.type()) {
    case Json::value_t::boolean:
      out = Value(j.get<bool>());
      return true;
    case Json::value_t::number_integer:
      out = Value(j.get<int64_t>());
      return true;
    case Json::value_t::number_unsigned: {
      // Above int64's range a count becomes a float, as a Python int would in float arithmetic.
      auto u = j.get<uint64_t>();
      out = u <= static_cast<uint64_t>(INT64_MAX) ? Value(static_cast<int64_t>(u))
                                                  : Value(static_cast<double>(u));
      return true;
    }
    case Json::value_t::number_float:
      out = Value(j.get<double>());
      return true;
    case Json::value_t::string:
      out = Value(j.get<std::string>());
      return true;
    case Json::value_t::array:
      out = Value::list();
      for (const auto &item : j) {
        Value v;
        if (!from_json(item, v, depth + 1)) return false;
        out.push(std::move(v));
      }
      return true;
    case Json::value_t::object:
      out = Value::dict();
      for (const auto &[key, item] : j.items()) {
        Value v;
        if (!from_json(item, v, depth + 1)) return false;
        out.set(key, std::move(v));
      }
      return true;
    default:
      out = Value();
      return true;
  }
}

}  // namespace

bool Value::parse(std::string_view text, Value &out) {
  const Json j = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  return !j.is_discarded() && from_json(j, out, 0);
}

}  // namespace dctx::analyzer
