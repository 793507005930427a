// Plain string scanning for the rules' name and file patterns and for numbers in metadata. The
// strings come from profiles people send each other, so nothing here backtracks or recurses over
// the input: std::regex does, and a long enough frame name overflows the stack.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string_view>

namespace dctx::analyzer::text {

inline char lower(char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; }
inline bool is_digit(char c) { return c >= '0' && c <= '9'; }
// A character of regex \w: [A-Za-z0-9_].
inline bool is_word(char c) {
  return is_digit(c) || c == '_' || (lower(c) >= 'a' && lower(c) <= 'z');
}

// s[i..] starts with w (icase: ASCII case-insensitively).
inline bool at(std::string_view s, size_t i, std::string_view w, bool icase = false) {
  if (i > s.size() || s.size() - i < w.size()) return false;
  for (size_t k = 0; k < w.size(); ++k) {
    char a = s[i + k], b = w[k];
    if (icase ? lower(a) != lower(b) : a != b) return false;
  }
  return true;
}

// The first position at or after i where w starts, or npos.
inline size_t find(std::string_view s, std::string_view w, bool icase = false, size_t i = 0) {
  if (!icase) return s.find(w, i);
  for (; i + w.size() <= s.size(); ++i)
    if (at(s, i, w, true)) return i;
  return std::string_view::npos;
}

inline bool contains_any(std::string_view s, std::initializer_list<std::string_view> words,
                         bool icase = false) {
  for (std::string_view w : words)
    if (find(s, w, icase) != std::string_view::npos) return true;
  return false;
}

inline bool equals_any(std::string_view s, std::initializer_list<std::string_view> words) {
  for (std::string_view w : words)
    if (s == w) return true;
  return false;
}

inline bool ends_with_any(std::string_view s, std::initializer_list<std::string_view> words) {
  for (std::string_view w : words)
    if (s.ends_with(w)) return true;
  return false;
}

// s is one of the prefixes followed by word characters only (regex ^(a|b)\w*$).
inline bool prefix_then_word(std::string_view s, std::initializer_list<std::string_view> prefixes) {
  for (std::string_view p : prefixes) {
    if (!s.starts_with(p)) continue;
    bool word = true;
    for (size_t i = p.size(); i < s.size() && word; ++i) word = is_word(s[i]);
    if (word) return true;
  }
  return false;
}

// s is w or ends with "." + w (regex (^|\.)w$).
inline bool dotted_name_is(std::string_view s, std::initializer_list<std::string_view> words) {
  for (std::string_view w : words) {
    if (s == w || (s.size() > w.size() && s.ends_with(w) && s[s.size() - w.size() - 1] == '.')) {
      return true;
    }
  }
  return false;
}

// The length of the run of digits at s[i..].
inline size_t digits_at(std::string_view s, size_t i) {
  size_t k = i;
  while (k < s.size() && is_digit(s[k])) ++k;
  return k - i;
}

// prefix, then lo..hi digits, then suffix, somewhere in s (regex prefix\d{lo,hi}suffix). A
// suffix starts with a non-digit, so the digits are the whole run; without one, any run of at
// least lo digits will do.
inline bool digits_between(std::string_view s, std::string_view prefix, size_t lo, size_t hi,
                           std::string_view suffix, bool icase) {
  for (size_t i = find(s, prefix, icase); i != std::string_view::npos;
       i = find(s, prefix, icase, i + 1)) {
    size_t start = i + prefix.size();
    size_t k = digits_at(s, start);
    if (suffix.empty() ? k >= lo : k >= lo && k <= hi && at(s, start + k, suffix, icase)) {
      return true;
    }
  }
  return false;
}

// a, at most one character, b, at most one character, c (regex a.?b.?c) somewhere in s.
inline bool joined(std::string_view s, std::string_view a, std::string_view b, std::string_view c,
                   bool icase) {
  for (size_t i = find(s, a, icase); i != std::string_view::npos; i = find(s, a, icase, i + 1)) {
    for (size_t g1 = 0; g1 < 2; ++g1) {
      size_t j = i + a.size() + g1;
      if (!at(s, j, b, icase)) continue;
      for (size_t g2 = 0; g2 < 2; ++g2)
        if (at(s, j + b.size() + g2, c, icase)) return true;
    }
  }
  return false;
}

// w where it starts a word: at the start of s or after a non-word character (regex \bw).
inline bool word_start(std::string_view s, std::string_view w, bool icase) {
  for (size_t i = find(s, w, icase); i != std::string_view::npos; i = find(s, w, icase, i + 1))
    if (i == 0 || !is_word(s[i - 1])) return true;
  return false;
}

// The digits as a number; nullopt when they do not fit in int64 (or there are none).
inline std::optional<int64_t> to_int(std::string_view digits) {
  if (digits.empty()) return std::nullopt;
  int64_t v = 0;
  for (char c : digits) {
    if (!is_digit(c) || v > (INT64_MAX - (c - '0')) / 10) return std::nullopt;
    v = v * 10 + (c - '0');
  }
  return v;
}

// The first run of digits in s (regex \d+), or empty.
inline std::string_view first_digits(std::string_view s) {
  for (size_t i = 0; i < s.size(); ++i)
    if (is_digit(s[i])) return s.substr(i, digits_at(s, i));
  return {};
}

}  // namespace dctx::analyzer::text
