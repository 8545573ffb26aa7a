#pragma once
// The literal text every whole-key match of an RE2 pattern must end with, read from the pattern's
// syntax: a prefilter that spares the regex engine the keys no rule can match (RE2 costs 60-100 ns
// per call whatever the pattern; 40 ms over the 409k keys of a 1,152-expert MoE checkpoint).
//
// Conservative by construction: the answer is a suffix of the pattern's trailing run of plain
// literals, and "" whenever the pattern's tail is anything else (a class, a group, a quantifier, an
// escape that is not a punctuation literal, a flag group that could make it case-insensitive, or an
// alternation outside every group). "" means "no prefilter": the caller then runs the regex.

#include <string>
#include <string_view>

#include "wmap/util/export.h"

namespace wmap {

// For a pattern RE2 accepted (default options: case-sensitive, UTF-8), matched against the whole
// key: a string every matching key ends with, or "" when none can be read off the pattern.
// Exported for tests/mapping/literal_suffix_test.cc, which checks it against RE2.
WMAP_API std::string required_literal_suffix(std::string_view pattern);

}  // namespace wmap
