// The ModelSpec builders shared by every plugin.
#include "wmap/spec/model_spec.h"

#include <algorithm>

#include "wmap/spec/config_bounds.h"

namespace wmap {

namespace spec {

Piece whole(std::string source, std::vector<uint64_t> shape) {
  Piece p;
  p.source = std::move(source);
  p.source_shape = std::move(shape);
  return p;
}

Piece rows(std::string source, std::vector<uint64_t> shape, Range r) {
  Piece p = whole(std::move(source), std::move(shape));
  p.box.resize(p.source_shape.size());
  for (size_t d = 0; d < p.box.size(); ++d) p.box[d] = {0, p.source_shape[d]};
  if (!p.box.empty()) p.box[0] = r;
  return p;
}

Piece cols(std::string source, std::vector<uint64_t> shape, Range c) {
  const Range all_rows{0, shape.empty() ? 0 : shape[0]};
  Piece p = rows(std::move(source), std::move(shape), all_rows);
  if (p.box.size() >= 2) p.box[1] = c;
  return p;
}

Piece zeros(uint64_t elements) {
  Piece p;
  p.zero_elements = elements;
  return p;
}

ParamSpec replicated(std::string name, std::string source, std::vector<uint64_t> shape) {
  ParamSpec s;
  s.name = std::move(name);
  s.shape = shape;
  s.pieces.push_back(whole(std::move(source), std::move(shape)));
  return s;
}

ParamSpec column_parallel(std::string name, std::string source, std::vector<uint64_t> shape, const Split& sp) {
  const Range r = sp.slice(shape.at(0), source);
  ParamSpec s;
  s.name = std::move(name);
  s.shape = shape;
  s.shape[0] = r.size();
  s.pieces.push_back(rows(std::move(source), std::move(shape), r));
  return s;
}

ParamSpec row_parallel(std::string name, std::string source, std::vector<uint64_t> shape, const Split& sp) {
  if (shape.size() < 2) return replicated(std::move(name), std::move(source), std::move(shape));
  const Range c = sp.slice(shape[1], source);
  ParamSpec s;
  s.name = std::move(name);
  s.shape = shape;
  s.shape[1] = c.size();
  s.pieces.push_back(cols(std::move(source), std::move(shape), c));
  return s;
}

ParamSpec vocab_parallel(std::string name, std::string source, std::vector<uint64_t> shape, const Layout& l,
                         const Split& sp) {
  const VocabShard v = l.vocab_shard(shape.at(0), sp);
  uint64_t row_elements = 1;
  for (size_t d = 1; d < shape.size(); ++d)
    row_elements = checked_mul(row_elements, shape[d], source + ": a row's elements");
  const uint64_t padding = v.rows - v.source.size();
  const uint64_t padding_elements = padding ? checked_mul(padding, row_elements, source + ": padding elements") : 0;
  ParamSpec s;
  s.name = std::move(name);
  s.shape = shape;
  s.shape[0] = v.rows;
  s.pieces.push_back(rows(std::move(source), std::move(shape), v.source));
  if (padding) s.pieces.push_back(zeros(padding_elements));
  return s;
}

ParamSpec vocab_parallel(std::string name, std::string source, std::vector<uint64_t> shape, const Layout& l) {
  return vocab_parallel(std::move(name), std::move(source), std::move(shape), l, l.tp());
}

ParamSpec fused_column_parallel(std::string name,
                                const std::vector<std::pair<std::string, std::vector<uint64_t>>>& sources,
                                const Split& sp) {
  ParamSpec s;
  s.name = std::move(name);
  for (const auto& [source, shape] : sources) {
    const Range r = sp.slice(shape.at(0), source);
    if (s.shape.empty()) {
      s.shape = shape;
      s.shape[0] = 0;
    }
    s.shape[0] += r.size();
    s.pieces.push_back(rows(source, shape, r));
  }
  return s;
}

ParamSpec alias(std::string name, std::string of, std::vector<uint64_t> shape) {
  ParamSpec s;
  s.name = std::move(name);
  s.alias_of = std::move(of);
  s.shape = std::move(shape);
  return s;
}

void add_lm_head(ModelSpec& m, const std::string& embed_param, uint64_t vocab, uint64_t hidden, bool tie,
                 const Layout& l, const Split& s) {
  if (!tie) {
    m.modules.push_back({"lm_head", {vocab_parallel("lm_head.weight", "lm_head.weight", {vocab, hidden}, l, s)}, {}});
    return;
  }
  m.skipped_keys.push_back("lm_head.weight");  // some tied checkpoints still carry a copy
  if (l.target == Target::kVllm) return;
  m.modules.push_back({"lm_head", {alias("lm_head.weight", embed_param, {l.vocab_shard(vocab, s).rows, hidden})}, {}});
}

void add_lm_head(ModelSpec& m, const std::string& embed_param, uint64_t vocab, uint64_t hidden, bool tie,
                 const Layout& l) {
  add_lm_head(m, embed_param, vocab, hidden, tie, l, l.tp());
}

Range kv_head_rows(uint64_t kv_heads, uint64_t unit_rows, const Layout& l) {
  const Range heads = l.local_kv_heads(kv_heads);
  return {heads.begin * unit_rows, heads.end * unit_rows};
}

}  // namespace spec
}  // namespace wmap
