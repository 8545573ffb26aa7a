#include "wmap/mapping/rename_table.h"

#include <re2/re2.h>
#include <re2/set.h>

#include <algorithm>
#include <atomic>
#include <exception>
#include <system_error>
#include <thread>

#include "literal_suffix.h"
#include "wmap/util/error.h"

namespace wmap {

// All regexes are compiled here, once. Matching a key runs one RE2::Set (a single DFA over every
// rename and ignore pattern, anchored at both ends) that tells which rules match and whether the key
// is ignored; only a renamed key then re-runs its one rule to extract the groups. Keys no rule
// matches (most keys of most checkpoints) cost one DFA pass.
struct RenameTable::Impl {
  std::filesystem::path file;
  std::vector<MappingRule> rules;
  std::vector<std::unique_ptr<RE2>> rename;
  std::vector<int> submatches;  // 1 + highest \N used by each rule's replace
  std::vector<IgnoreRule> ignore_rules;
  std::vector<std::unique_ptr<RE2>> ignore;
  // Set index i < rename.size() is rename rule i, the rest are ignore patterns. Null when there are
  // no patterns, or when the set could not be built (its DFA over the memory budget): matching then
  // tries each regex in order, with the same results.
  std::unique_ptr<RE2::Set> set;
  // The literal text each rename and ignore pattern's matches end with (required_literal_suffix),
  // when every pattern has one: a key that ends with none of them matches no pattern, and is
  // answered without running RE2. Empty when some pattern has no such suffix.
  std::vector<std::string> suffixes;

  struct Verdict {
    bool ignored = false;
    int rule = -1;  // first matching rename rule
  };

  // file:line of a rule: the file it is written in (a rule set a mapping includes, or the mapping).
  template <typename Rule>
  std::string where(const Rule& rule) const {
    return (rule.file.empty() ? file.string() : rule.file) + ":" + std::to_string(rule.line);
  }

  static RE2::Options options() {
    RE2::Options o;
    o.set_log_errors(false);  // errors are reported through wmap::Error, never on stderr
    return o;
  }

  template <typename Rule>
  std::unique_ptr<RE2> compile(const Rule& rule, const char* what) const {
    const std::string& pattern = rule.pattern;
    auto re = std::make_unique<RE2>(pattern, options());
    if (!re->ok()) {
      throw Error(ErrorCode::kMalformedInput,
                  where(rule) + ": " + what + " regex '" + pattern + "' does not compile: " + re->error());
    }
    return re;
  }

  void build_set() {
    if (rename.empty() && ignore.empty()) return;
    auto s = std::make_unique<RE2::Set>(options(), RE2::ANCHOR_BOTH);
    for (const auto& r : rules) {
      if (s->Add(r.pattern, nullptr) < 0) return;
    }
    for (const auto& r : ignore_rules) {
      if (s->Add(r.pattern, nullptr) < 0) return;
    }
    if (s->Compile()) set = std::move(s);
  }

  Verdict classify(std::string_view key, std::vector<int>& hits) const {
    Verdict v;
    if (rename.empty() && ignore.empty()) return v;
    if (!suffixes.empty() &&
        std::none_of(suffixes.begin(), suffixes.end(), [&](const std::string& s) { return key.ends_with(s); })) {
      return v;
    }
    const re2::StringPiece text(key.data(), key.size());
    if (set != nullptr) {
      hits.clear();
      RE2::Set::ErrorInfo info{};
      if (set->Match(text, &hits, &info)) {
        const int n_rename = static_cast<int>(rename.size());
        for (int h : hits) {
          if (h >= n_rename) {
            v.ignored = true;
          } else if (v.rule < 0 || h < v.rule) {
            v.rule = h;
          }
        }
        return v;
      }
      if (info.kind == RE2::Set::kNoError) return v;
      // kOutOfMemory and friends: answer with the individual regexes below.
    }
    for (const auto& re : ignore) {
      if (re->Match(text, 0, text.size(), RE2::ANCHOR_BOTH, nullptr, 0)) {
        v.ignored = true;
        break;
      }
    }
    for (size_t i = 0; i < rename.size(); ++i) {
      if (rename[i]->Match(text, 0, text.size(), RE2::ANCHOR_BOTH, nullptr, 0)) {
        v.rule = static_cast<int>(i);
        break;
      }
    }
    return v;
  }

  // classify() of every record. A match costs ~60-100 ns a key whatever the rules (RE2's set-up
  // per call; 40 ms for the 409k keys of a 1,152-expert MoE checkpoint), so large catalogs are
  // split over up to 8 threads, in blocks taken in turn. Read-only: RE2 is thread-safe.
  std::vector<Verdict> classify_all(std::span<const TensorRecord> records) const {
    std::vector<Verdict> verdicts(records.size());
    if (rename.empty() && ignore.empty()) return verdicts;
    constexpr size_t kBlock = 8192;
    const size_t blocks = (records.size() + kBlock - 1) / kBlock;
    const unsigned threads =
        static_cast<unsigned>(std::min<size_t>({blocks, 8, std::max(1u, std::thread::hardware_concurrency())}));
    std::atomic<size_t> next{0};
    std::exception_ptr failure;
    std::atomic<bool> failed{false};
    auto work = [&] {
      try {
        std::vector<int> hits;
        for (size_t b; !failed.load(std::memory_order_relaxed) && (b = next.fetch_add(1)) < blocks;) {
          const size_t end = std::min(records.size(), (b + 1) * kBlock);
          for (size_t i = b * kBlock; i < end; ++i) verdicts[i] = classify(records[i].name, hits);
        }
      } catch (...) {
        if (!failed.exchange(true)) failure = std::current_exception();
      }
    };
    {
      std::vector<std::jthread> pool;
      try {
        for (unsigned t = 1; t < threads; ++t) pool.emplace_back(work);
      } catch (const std::system_error&) {
        // Fewer threads: this one takes the blocks the others would have.
      }
      work();
    }
    if (failure) std::rethrow_exception(failure);
    return verdicts;
  }

  // Writes rule `rule`'s rewrite of `key` (which the rule matches) into `out`.
  void rewrite(std::string_view key, int rule, std::string& out) const {
    const RE2& re = *rename[rule];
    const int n = submatches[rule];
    re2::StringPiece groups[10];
    const re2::StringPiece text(key.data(), key.size());
    out.clear();
    out.reserve(key.size() + 16);  // one allocation for typical rewrites
    if (!re.Match(text, 0, text.size(), RE2::ANCHOR_BOTH, groups, n) ||
        !re.Rewrite(&out, rules[rule].replace, groups, n)) {
      // The set said this rule matches and the rewrite string was checked at construction.
      throw Error(ErrorCode::kInternal,
                  where(rules[rule]) + ": rule matched key '" + std::string(key) + "' in the set but not on its own");
    }
  }
};

RenameTable::RenameTable() : impl_(std::make_shared<Impl>()) {}

RenameTable::RenameTable(const MappingFile& mapping) {
  auto impl = std::make_shared<Impl>();
  impl->file = mapping.file;
  impl->rules = mapping.rename;
  impl->ignore_rules = mapping.ignore;
  for (const auto& rule : mapping.rename) {
    auto re = impl->compile(rule, "rename");
    const int wanted = RE2::MaxSubmatch(rule.replace);
    if (wanted > re->NumberOfCapturingGroups()) {
      throw Error(ErrorCode::kMalformedInput, impl->where(rule) + ": replace '" + rule.replace + "' uses \\" +
                                                  std::to_string(wanted) + " but the regex '" + rule.pattern +
                                                  "' has only " + std::to_string(re->NumberOfCapturingGroups()) +
                                                  " group(s)");
    }
    std::string why;
    if (!re->CheckRewriteString(rule.replace, &why)) {
      throw Error(ErrorCode::kMalformedInput, impl->where(rule) + ": replace '" + rule.replace + "' is invalid: " +
                                                  why + " (use \\0..\\9 for groups and \\\\ for a backslash)");
    }
    impl->submatches.push_back(wanted + 1);
    impl->rename.push_back(std::move(re));
  }
  for (const auto& rule : mapping.ignore) impl->ignore.push_back(impl->compile(rule, "ignore"));
  impl->build_set();
  for (const auto& rule : mapping.rename) impl->suffixes.push_back(required_literal_suffix(rule.pattern));
  for (const auto& rule : mapping.ignore) impl->suffixes.push_back(required_literal_suffix(rule.pattern));
  if (std::any_of(impl->suffixes.begin(), impl->suffixes.end(), [](const std::string& s) { return s.empty(); }))
    impl->suffixes.clear();
  impl_ = std::move(impl);
}

bool RenameTable::empty() const { return impl_->rename.empty() && impl_->ignore.empty(); }
size_t RenameTable::rule_count() const { return impl_->rename.size(); }
const std::filesystem::path& RenameTable::file() const { return impl_->file; }

std::string RenameTable::canonical(std::string_view key) const {
  std::vector<int> hits;
  const Impl::Verdict v = impl_->classify(key, hits);
  if (v.rule < 0) return std::string(key);
  std::string out;
  impl_->rewrite(key, v.rule, out);
  return out;
}

bool RenameTable::ignored(std::string_view key) const {
  std::vector<int> hits;
  return impl_->classify(key, hits).ignored;
}

RenamedCatalog RenameTable::apply(const Catalog& catalog) const {
  const Impl& impl = *impl_;
  RenamedCatalog out;
  out.rewritten_ = std::make_shared<std::deque<std::string>>();
  const auto records = catalog.tensors();
  // Sorting ~100k long, prefix-sharing names dominates the cost, so avoid a global sort: keys that
  // pass through keep the catalog's (sorted, unique) order, and each rule's outputs are bucketed by
  // rule. A rule's outputs almost always come out in its inputs' order (it rewrites fixed parts of
  // the key), so a bucket is checked and sorted only when it is not; the sorted runs are then merged
  // pairwise (n log(rules) comparisons instead of n log n).
  std::vector<std::vector<RenamedTensor>> runs(impl.rename.size() + 1);
  std::vector<RenamedTensor>& passed = runs.back();
  passed.reserve(records.size());
  const std::vector<Impl::Verdict> verdicts = impl.classify_all(records);
  for (size_t i = 0; i < records.size(); ++i) {
    const TensorRecord& rec = records[i];
    const Impl::Verdict v = verdicts[i];
    if (v.ignored) {
      out.ignored_.push_back(&rec);
    } else if (v.rule < 0) {
      passed.push_back({rec.name, &rec, -1});
    } else {
      std::string& name = out.rewritten_->emplace_back();
      impl.rewrite(rec.name, v.rule, name);
      runs[v.rule].push_back({name, &rec, v.rule});
    }
  }
  auto by_name = [](const RenamedTensor& a, const RenamedTensor& b) { return a.name < b.name; };
  std::erase_if(runs, [](const auto& run) { return run.empty(); });
  for (auto& run : runs) {
    if (!std::is_sorted(run.begin(), run.end(), by_name)) std::sort(run.begin(), run.end(), by_name);
  }
  while (runs.size() > 1) {
    std::vector<std::vector<RenamedTensor>> merged;
    merged.reserve(runs.size() / 2 + 1);
    for (size_t i = 0; i + 1 < runs.size(); i += 2) {
      std::vector<RenamedTensor> m;
      m.reserve(runs[i].size() + runs[i + 1].size());
      std::merge(std::make_move_iterator(runs[i].begin()), std::make_move_iterator(runs[i].end()),
                 std::make_move_iterator(runs[i + 1].begin()), std::make_move_iterator(runs[i + 1].end()),
                 std::back_inserter(m), by_name);
      merged.push_back(std::move(m));
    }
    if (runs.size() % 2 == 1) merged.push_back(std::move(runs.back()));
    runs = std::move(merged);
  }
  if (!runs.empty()) out.tensors_ = std::move(runs.front());

  // Collisions: report every one in a single message (capped), so one run shows the whole problem.
  auto origin = [&](const RenamedTensor& t) {
    return "'" + t.source->name + "' (" +
           (t.rule < 0 ? std::string("not renamed") : "rule at " + impl.where(impl.rules[t.rule])) + ")";
  };
  std::string message;
  size_t collisions = 0;
  constexpr size_t kShown = 8;
  for (size_t i = 1; i < out.tensors_.size(); ++i) {
    const auto& a = out.tensors_[i - 1];
    const auto& b = out.tensors_[i];
    if (a.name != b.name) continue;
    if (collisions++ < kShown) {
      message += (message.empty() ? "" : "; ") + std::string("canonical key '") + std::string(a.name) +
                 "' comes from both " + origin(a) + " and " + origin(b);
    }
  }
  if (collisions > 0) {
    if (collisions > kShown) message += "; and " + std::to_string(collisions - kShown) + " more";
    const std::string file = impl.file.empty() ? std::string("<no mapping file>") : impl.file.string();
    throw Error(ErrorCode::kDuplicateTensor,
                file + ": " + std::to_string(collisions) + " rename collision(s): " + message);
  }
  return out;
}

const RenamedTensor* RenamedCatalog::find(std::string_view canonical) const {
  auto it = std::lower_bound(tensors_.begin(), tensors_.end(), canonical,
                             [](const RenamedTensor& t, std::string_view n) { return t.name < n; });
  return (it != tensors_.end() && it->name == canonical) ? &*it : nullptr;
}

std::span<const RenamedTensor> RenamedCatalog::prefix(std::string_view canonical_prefix) const {
  const std::string p = std::string(canonical_prefix) + ".";
  auto lo = std::lower_bound(tensors_.begin(), tensors_.end(), p,
                             [](const RenamedTensor& t, const std::string& n) { return t.name < n; });
  // Names starting with "x." sort before "x/" ('/' follows '.'), so the range ends at "x/".
  const std::string end = std::string(canonical_prefix) + "/";
  auto hi = std::lower_bound(lo, tensors_.end(), end,
                             [](const RenamedTensor& t, const std::string& n) { return t.name < n; });
  return {lo, hi};
}

}  // namespace wmap
