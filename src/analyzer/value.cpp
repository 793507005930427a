#include "analyzer/value.h"

#include <charconv>
#include <cmath>
#include <cstdlib>

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

class Parser {
 public:
  explicit Parser(std::string_view s) : s_(s) {}

  bool document(Value &out) {
    if (!value(out)) return false;
    ws();
    return pos_ == s_.size();
  }

 private:
  void ws() {
    while (pos_ < s_.size() &&
           (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\n' || s_[pos_] == '\r')) {
      ++pos_;
    }
  }
  bool lit(std::string_view w) {
    if (s_.substr(pos_, w.size()) != w) return false;
    pos_ += w.size();
    return true;
  }
  bool value(Value &out) {
    if (++depth_ > 512) return false;
    ws();
    if (pos_ >= s_.size()) return false;
    bool ok = false;
    char c = s_[pos_];
    if (c == '{') {
      ok = object(out);
    } else if (c == '[') {
      ok = array(out);
    } else if (c == '"') {
      std::string str;
      ok = string(str);
      if (ok) out = Value(std::move(str));
    } else if (lit("true")) {
      out = Value(true), ok = true;
    } else if (lit("false")) {
      out = Value(false), ok = true;
    } else if (lit("null")) {
      out = Value(), ok = true;
    } else if (lit("NaN")) {
      out = Value(std::nan("")), ok = true;
    } else if (lit("Infinity")) {
      out = Value(HUGE_VAL), ok = true;
    } else if (lit("-Infinity")) {
      out = Value(-HUGE_VAL), ok = true;
    } else {
      ok = number(out);
    }
    --depth_;
    return ok;
  }
  bool object(Value &out) {
    out = Value::dict();
    ++pos_;
    ws();
    if (pos_ < s_.size() && s_[pos_] == '}') return ++pos_, true;
    while (true) {
      ws();
      std::string key;
      if (pos_ >= s_.size() || s_[pos_] != '"' || !string(key)) return false;
      ws();
      if (pos_ >= s_.size() || s_[pos_] != ':') return false;
      ++pos_;
      Value v;
      if (!value(v)) return false;
      out.set(key, std::move(v));
      ws();
      if (pos_ >= s_.size()) return false;
      if (s_[pos_] == ',') {
        ++pos_;
        continue;
      }
      if (s_[pos_] == '}') return ++pos_, true;
      return false;
    }
  }
  bool array(Value &out) {
    out = Value::list();
    ++pos_;
    ws();
    if (pos_ < s_.size() && s_[pos_] == ']') return ++pos_, true;
    while (true) {
      Value v;
      if (!value(v)) return false;
      out.push(std::move(v));
      ws();
      if (pos_ >= s_.size()) return false;
      if (s_[pos_] == ',') {
        ++pos_;
        continue;
      }
      if (s_[pos_] == ']') return ++pos_, true;
      return false;
    }
  }
  static void utf8(std::string &out, uint32_t cp) {
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      out += static_cast<char>(0xC0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      out += static_cast<char>(0xE0 | (cp >> 12));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      out += static_cast<char>(0xF0 | (cp >> 18));
      out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }
  bool hex4(uint32_t &cp) {
    if (pos_ + 4 > s_.size()) return false;
    cp = 0;
    for (int i = 0; i < 4; ++i) {
      char c = s_[pos_++];
      cp <<= 4;
      if (c >= '0' && c <= '9') {
        cp |= static_cast<uint32_t>(c - '0');
      } else if (c >= 'a' && c <= 'f') {
        cp |= static_cast<uint32_t>(c - 'a' + 10);
      } else if (c >= 'A' && c <= 'F') {
        cp |= static_cast<uint32_t>(c - 'A' + 10);
      } else {
        return false;
      }
    }
    return true;
  }
  bool string(std::string &out) {
    ++pos_;
    while (pos_ < s_.size()) {
      char c = s_[pos_++];
      if (c == '"') return true;
      if (c != '\\') {
        out += c;
        continue;
      }
      if (pos_ >= s_.size()) return false;
      char e = s_[pos_++];
      switch (e) {
        case '"':
        case '\\':
        case '/':
          out += e;
          break;
        case 'b':
          out += '\b';
          break;
        case 'f':
          out += '\f';
          break;
        case 'n':
          out += '\n';
          break;
        case 'r':
          out += '\r';
          break;
        case 't':
          out += '\t';
          break;
        case 'u': {
          uint32_t cp = 0;
          if (!hex4(cp)) return false;
          if (cp >= 0xD800 && cp < 0xDC00 && s_.substr(pos_, 2) == "\\u") {
            size_t save = pos_;
            pos_ += 2;
            uint32_t lo = 0;
            if (hex4(lo) && lo >= 0xDC00 && lo < 0xE000) {
              cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            } else {
              pos_ = save;
            }
          }
          utf8(out, cp);
          break;
        }
        default:
          return false;
      }
    }
    return false;
  }
  bool number(Value &out) {
    size_t start = pos_;
    if (pos_ < s_.size() && s_[pos_] == '-') ++pos_;
    bool is_float = false;
    while (pos_ < s_.size()) {
      char c = s_[pos_];
      if (c >= '0' && c <= '9') {
        ++pos_;
      } else if (c == '.' || c == 'e' || c == 'E' || c == '+' || (c == '-' && pos_ > start)) {
        is_float = true;
        ++pos_;
      } else {
        break;
      }
    }
    std::string_view tok = s_.substr(start, pos_ - start);
    if (tok.empty() || tok == "-") return false;
    if (!is_float) {
      int64_t i = 0;
      auto r = std::from_chars(tok.data(), tok.data() + tok.size(), i);
      if (r.ec == std::errc() && r.ptr == tok.data() + tok.size()) {
        out = Value(i);
        return true;
      }
    }
    double d = 0;
    auto r = std::from_chars(tok.data(), tok.data() + tok.size(), d);
    if (r.ec != std::errc() || r.ptr != tok.data() + tok.size()) return false;
    out = Value(d);
    return true;
  }

  std::string_view s_;
  size_t pos_ = 0;
  int depth_ = 0;
};

}  // namespace

bool Value::parse(std::string_view text, Value &out) { return Parser(text).document(out); }

}  // namespace dctx::analyzer
