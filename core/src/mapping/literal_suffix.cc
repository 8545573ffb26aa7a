#include "literal_suffix.h"

namespace wmap {
namespace {

bool is_ascii_punct(unsigned char c) {
  return (c >= 0x21 && c <= 0x2f) || (c >= 0x3a && c <= 0x40) || (c >= 0x5b && c <= 0x60) || (c >= 0x7b && c <= 0x7e);
}
bool is_digit(char c) { return c >= '0' && c <= '9'; }

// The end of the `[...]` class opening at `open` (one past its `]`), or npos when it does not close.
size_t class_end(std::string_view p, size_t open) {
  size_t j = open + 1;
  if (j < p.size() && p[j] == '^') ++j;
  if (j < p.size() && p[j] == ']') ++j;  // a `]` first in the class is a literal
  while (j < p.size()) {
    if (p[j] == '\\') {
      j += 2;
    } else if (p[j] == '[' && j + 1 < p.size() && p[j + 1] == ':') {
      const size_t close = p.find(":]", j + 2);
      if (close == std::string_view::npos) return std::string_view::npos;
      j = close + 2;
    } else if (p[j] == ']') {
      return j + 1;
    } else {
      ++j;
    }
  }
  return std::string_view::npos;
}

// The end of a counted repetition `{n}`, `{n,}` or `{n,m}` opening at `open`, or npos when the `{`
// starts none (RE2 then reads it as a literal).
size_t repetition_end(std::string_view p, size_t open) {
  size_t j = open + 1;
  const size_t digits = j;
  while (j < p.size() && is_digit(p[j])) ++j;
  if (j == digits) return std::string_view::npos;
  if (j < p.size() && p[j] == ',') {
    ++j;
    while (j < p.size() && is_digit(p[j])) ++j;
  }
  return j < p.size() && p[j] == '}' ? j + 1 : std::string_view::npos;
}

// One past the escape sequence whose letter is at `letter` (`\x2e`, `\x{2e}`, `\pN`, `\p{Greek}`,
// `\012`, `\Q...\E`, `\d`, ...), or npos when it runs off the pattern.
size_t escape_end(std::string_view p, size_t letter) {
  const char e = p[letter];
  size_t j = letter + 1;
  auto braced = [&]() -> size_t {
    const size_t close = p.find('}', j);
    return close == std::string_view::npos ? close : close + 1;
  };
  switch (e) {
    case 'x':
      if (j < p.size() && p[j] == '{') return braced();
      return j + 2 <= p.size() ? j + 2 : std::string_view::npos;
    case 'p':
    case 'P':
      if (j < p.size() && p[j] == '{') return braced();
      return j + 1 <= p.size() ? j + 1 : std::string_view::npos;
    case 'Q': {
      const size_t close = p.find("\\E", j);
      return close == std::string_view::npos ? p.size() : close + 2;  // \Q runs to the end when unclosed
    }
    default:
      if (e >= '0' && e <= '7') {
        for (int k = 0; k < 2 && j < p.size() && p[j] >= '0' && p[j] <= '7'; ++k) ++j;
      }
      return j;
  }
}

}  // namespace

std::string required_literal_suffix(std::string_view p) {
  std::string suffix;  // the literals read since the last thing that was not one
  int depth = 0;
  size_t i = 0;
  while (i < p.size()) {
    const auto c = static_cast<unsigned char>(p[i]);
    if (c == '\\') {
      if (i + 1 >= p.size()) return "";
      const auto e = static_cast<unsigned char>(p[i + 1]);
      if (is_ascii_punct(e)) {  // `\.`, `\-`, `\\`: the character itself
        suffix += static_cast<char>(e);
        i += 2;
        continue;
      }
      suffix.clear();  // a class, an assertion, a coded or quoted literal: not read as text here
      i = escape_end(p, i + 1);
      if (i == std::string_view::npos) return "";
      continue;
    }
    switch (c) {
      case '[':
        suffix.clear();
        i = class_end(p, i);
        if (i == std::string_view::npos) return "";
        continue;
      case '(':
        suffix.clear();
        if (i + 1 < p.size() && p[i + 1] == '?') {
          size_t j = i + 2;
          if (j < p.size() && p[j] == 'P') {  // (?P<name>...)
            j = p.find('>', j);
            if (j == std::string_view::npos) return "";
            ++depth;
            i = j + 1;
            continue;
          }
          // (?flags) or (?flags:...): any `i` among the flags may make the literals that follow
          // match either case.
          while (j < p.size() && p[j] != ':' && p[j] != ')') {
            if (p[j] == 'i') return "";
            ++j;
          }
          if (j >= p.size()) return "";
          if (p[j] == ':') ++depth;
          i = j + 1;
          continue;
        }
        ++depth;
        ++i;
        continue;
      case ')':
        suffix.clear();
        --depth;
        ++i;
        continue;
      case '|':
        if (depth <= 0) return "";  // another branch of the whole pattern ends with other text
        suffix.clear();
        ++i;
        continue;
      case '$':
        if (i + 1 == p.size()) return suffix;  // the end anchor (matching is whole-key anyway)
        suffix.clear();
        ++i;
        continue;
      case '{': {
        suffix.clear();
        const size_t end = repetition_end(p, i);
        i = end == std::string_view::npos ? i + 1 : end;
        continue;
      }
      case '*':
      case '+':
      case '?':
      case '.':
      case '^':
        suffix.clear();
        ++i;
        continue;
      default:
        suffix += static_cast<char>(c);
        ++i;
        continue;
    }
  }
  return suffix;
}

}  // namespace wmap
