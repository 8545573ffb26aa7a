#include "wmap/mapping/mapping_file.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <set>

#include "wmap/util/error.h"

namespace wmap {
namespace {

// Each check below reports `label:line: message`; lines are 1-based (yaml-cpp's marks are 0-based).
class Parser {
 public:
  explicit Parser(const std::string& label) : label_(label) {}

  [[noreturn]] void fail(int line, const std::string& message) const {
    throw Error(ErrorCode::kMalformedInput, label_ + ":" + std::to_string(line) + ": " + message);
  }

  // Aliases and synthesised nodes may carry a null mark; fall back to the enclosing node's line.
  // A missing value (`plugin:`) is marked where the NEXT token starts; report its key's line instead.
  static int line_of(const YAML::Node& node, int fallback) {
    const YAML::Mark m = node.Mark();
    return (m.is_null() || node.IsNull()) ? fallback : m.line + 1;
  }

  static std::string kind_of(const YAML::Node& node) {
    switch (node.Type()) {
      case YAML::NodeType::Null: return "nothing";
      case YAML::NodeType::Scalar: return "a string";
      case YAML::NodeType::Sequence: return "a list";
      case YAML::NodeType::Map: return "a mapping";
      case YAML::NodeType::Undefined: break;
    }
    return "an undefined value";
  }

  std::string scalar(const YAML::Node& node, int line, const std::string& what) const {
    if (!node.IsScalar()) fail(line, what + " must be a string, got " + kind_of(node));
    std::string s = node.Scalar();
    if (s.empty()) fail(line, what + " must not be empty");
    return s;
  }

  // Line of a document marker that starts a second document ("---" after content, or anything
  // after "..."), 0 when there is none. Markers sit at column 0; block scalars are indented.
  static int second_document_line(std::string_view text) {
    bool content = false, ended = false;
    int line = 0;
    for (size_t at = 0; at <= text.size();) {
      const size_t nl = text.find('\n', at);
      const std::string_view l = text.substr(at, nl == std::string_view::npos ? std::string_view::npos : nl - at);
      ++line;
      auto marker = [&l](std::string_view m) {
        return l.substr(0, 3) == m && (l.size() == 3 || l[3] == ' ' || l[3] == '\t' || l[3] == '\r' || l[3] == '#');
      };
      const size_t first = l.find_first_not_of(" \t\r");
      const bool blank = first == std::string_view::npos || l[first] == '#';
      if (marker("---")) {
        if (content || ended) return line;
        content =
            l.find_first_not_of(" \t\r", 3) != std::string_view::npos && l[l.find_first_not_of(" \t\r", 3)] != '#';
      } else if (marker("...")) {
        ended = true;
      } else if (!blank) {
        if (ended) return line;
        content = true;
      }
      if (nl == std::string_view::npos) break;
      at = nl + 1;
    }
    return 0;
  }

  // `rule_set`: an included file, which holds only rename and ignore rules.
  MappingFile parse(std::string_view text, bool rule_set = false) {
    if (text.size() > kMaxMappingFileBytes) {
      fail(1, "is " + std::to_string(text.size()) + " bytes, over the limit of " +
                  std::to_string(kMaxMappingFileBytes) + " bytes for a mapping file");
    }
    // A second document is found by its marker, not by YAML::LoadAll: yaml-cpp 0.7's LoadAll can
    // loop forever on some malformed inputs (found by fuzz/mapping_fuzzer).
    if (const int second = second_document_line(text)) fail(second, "holds more than one YAML document; expected one");
    YAML::Node root;
    try {
      root = YAML::Load(std::string(text));
    } catch (const YAML::Exception& e) {
      // e.mark is where the parser gave up; e.msg is the reason without the position prefix.
      const int line = e.mark.is_null() ? 1 : e.mark.line + 1;
      fail(line, "not valid YAML: " + e.msg +
                     (e.mark.is_null() ? "" : " (column " + std::to_string(e.mark.column + 1) + ")"));
    }
    const std::string expected = rule_set ? "rename, ignore" : "architectures, plugin, rename, ignore, include";
    if (!root.IsDefined() || root.IsNull())
      fail(1, std::string(rule_set ? "empty rule set" : "empty mapping file") + " (expected keys " + expected + ")");
    if (!root.IsMap()) fail(line_of(root, 1), "top level must be a mapping of keys, got " + kind_of(root));

    MappingFile out;
    out.file = label_;
    std::set<std::string> seen;
    std::vector<std::string> unknown;
    int first_unknown_line = 0;
    bool have_arch = false, have_plugin = false;
    for (const auto& kv : root) {
      const int key_line = line_of(kv.first, 1);
      if (!kv.first.IsScalar()) fail(key_line, "top-level keys must be strings, got " + kind_of(kv.first));
      const std::string key = kv.first.Scalar();
      if (!seen.insert(key).second) fail(key_line, "key '" + key + "' appears twice");
      const YAML::Node& value = kv.second;
      const int line = line_of(value, key_line);
      if (rule_set && (key == "architectures" || key == "plugin" || key == "include")) {
        fail(key_line, "key '" + key + "' in a rule set (an included file holds only rename and ignore)");
      } else if (key == "architectures") {
        have_arch = true;
        out.line_of_architectures = key_line;
        parse_architectures(value, line, out);
      } else if (key == "plugin") {
        have_plugin = true;
        out.plugin = scalar(value, line, "'plugin'");
      } else if (key == "rename") {
        parse_rename(value, line, out);
      } else if (key == "ignore") {
        parse_ignore(value, line, out);
      } else if (key == "include") {
        parse_include(value, line, out);
      } else {
        if (unknown.empty()) first_unknown_line = key_line;
        unknown.push_back("'" + key + "' (line " + std::to_string(key_line) + ")");
      }
    }
    if (!unknown.empty()) {
      std::string list;
      for (const auto& u : unknown) list += (list.empty() ? "" : ", ") + u;
      fail(first_unknown_line,
           "unknown key" + std::string(unknown.size() > 1 ? "s " : " ") + list + "; expected " + expected);
    }
    if (rule_set) return out;
    if (!have_arch) fail(line_of(root, 1), "missing key 'architectures' (a non-empty list of architecture names)");
    if (!have_plugin) fail(line_of(root, 1), "missing key 'plugin' (the name of the plugin that builds the modules)");
    return out;
  }

 private:
  void parse_architectures(const YAML::Node& value, int line, MappingFile& out) const {
    if (!value.IsSequence()) fail(line, "'architectures' must be a list of strings, got " + kind_of(value));
    if (value.size() == 0) fail(line, "'architectures' must not be empty");
    std::set<std::string> seen;
    for (const auto& item : value) {
      const int item_line = line_of(item, line);
      std::string arch = scalar(item, item_line, "each entry of 'architectures'");
      if (!seen.insert(arch).second) fail(item_line, "architecture '" + arch + "' is listed twice");
      out.architectures.push_back(std::move(arch));
    }
  }

  // A key written with no value (`rename:`) reads as an empty list.
  void parse_rename(const YAML::Node& value, int line, MappingFile& out) const {
    if (value.IsNull()) return;
    if (!value.IsSequence()) fail(line, "'rename' must be a list of {match, replace}, got " + kind_of(value));
    for (const auto& item : value) {
      const int item_line = line_of(item, line);
      if (!item.IsMap())
        fail(item_line, "each 'rename' entry must be a mapping {match, replace}, got " + kind_of(item));
      MappingRule rule;
      rule.line = item_line;
      rule.file = label_;
      bool have_match = false, have_replace = false;
      for (const auto& kv : item) {
        const int key_line = line_of(kv.first, item_line);
        const std::string key = kv.first.IsScalar() ? kv.first.Scalar() : std::string();
        if (key == "match" && !have_match) {
          have_match = true;
          rule.pattern = scalar(kv.second, line_of(kv.second, key_line), "'match'");
        } else if (key == "replace" && !have_replace) {
          have_replace = true;
          // An empty replacement would produce an empty key; refuse it like an empty pattern.
          rule.replace = scalar(kv.second, line_of(kv.second, key_line), "'replace'");
        } else if (key == "match" || key == "replace") {
          fail(key_line, "key '" + key + "' appears twice in one 'rename' entry");
        } else {
          fail(key_line, "unknown key '" + (key.empty() ? kind_of(kv.first) : key) +
                             "' in a 'rename' entry; expected match, replace");
        }
      }
      if (!have_match) fail(item_line, "'rename' entry lacks 'match'");
      if (!have_replace) fail(item_line, "'rename' entry lacks 'replace'");
      out.rename.push_back(std::move(rule));
      check_rule_count(out, item_line);
    }
  }

  void parse_include(const YAML::Node& value, int line, MappingFile& out) {
    if (!value.IsSequence()) fail(line, "'include' must be a list of rule-set file names, got " + kind_of(value));
    for (const auto& item : value) {
      const int item_line = line_of(item, line);
      std::string name = scalar(item, item_line, "each 'include' entry");
      const std::filesystem::path p(name);
      bool outside = p.is_absolute();
      for (const auto& part : p) outside = outside || part == "..";
      if (outside) fail(item_line, "include '" + name + "' must be a relative path inside the mapping folder");
      if (std::find(out.includes.begin(), out.includes.end(), name) != out.includes.end()) {
        fail(item_line, "include '" + name + "' is listed twice");
      }
      out.includes.push_back(std::move(name));
      include_lines_.push_back(item_line);
    }
  }

 public:
  const std::vector<int>& include_lines() const { return include_lines_; }

 private:
  void parse_ignore(const YAML::Node& value, int line, MappingFile& out) const {
    if (value.IsNull()) return;
    if (!value.IsSequence()) fail(line, "'ignore' must be a list of regexes, got " + kind_of(value));
    for (const auto& item : value) {
      const int item_line = line_of(item, line);
      out.ignore.push_back({scalar(item, item_line, "each 'ignore' entry"), item_line, label_});
      check_rule_count(out, item_line);
    }
  }

  void check_rule_count(const MappingFile& out, int line) const {
    if (out.rename.size() + out.ignore.size() > kMaxMappingRules) {
      fail(line,
           "more than " + std::to_string(kMaxMappingRules) + " rename and ignore rules (the limit of a mapping file)");
    }
  }

  const std::string& label_;
  std::vector<int> include_lines_;  // of out.includes, in order
};

}  // namespace

MappingFile parse_mapping_text(std::string_view yaml, const std::string& label) {
  Parser parser(label);
  MappingFile out = parser.parse(yaml);
  if (!out.includes.empty()) {
    parser.fail(parser.include_lines().front(),
                "'include' names files relative to the mapping file; "
                "this text has no folder (read it with load_mapping_file)");
  }
  return out;
}

MappingFile load_mapping_file(const std::filesystem::path& file, const FileSystem& fs) {
  const std::string label = file.string();
  Parser parser(label);
  MappingFile out = parser.parse(fs.read_whole_file(file, kMaxMappingFileBytes));
  out.file = file;
  for (size_t i = 0; i < out.includes.size(); ++i) {
    const std::filesystem::path path = file.parent_path() / out.includes[i];
    MappingFile set;
    try {
      const std::string set_label = path.string();
      set = Parser(set_label).parse(fs.read_whole_file(path, kMaxMappingFileBytes), /*rule_set=*/true);
    } catch (const Error& e) {
      throw Error(e.code(), label + ":" + std::to_string(parser.include_lines()[i]) + ": include '" + out.includes[i] +
                                "': " + e.what());
    }
    out.rename.insert(out.rename.end(), set.rename.begin(), set.rename.end());
    out.ignore.insert(out.ignore.end(), set.ignore.begin(), set.ignore.end());
    if (out.rename.size() + out.ignore.size() > kMaxMappingRules) {
      parser.fail(parser.include_lines()[i],
                  "more than " + std::to_string(kMaxMappingRules) +
                      " rename and ignore rules with its includes (the limit of a mapping file)");
    }
  }
  return out;
}

}  // namespace wmap
