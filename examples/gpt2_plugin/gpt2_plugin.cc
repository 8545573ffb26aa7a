// An out-of-tree wmap plugin for GPT-2 (GPT2LMHeadModel), built against an installed wmap.
//
// Canonical checkpoint keys are prefix-free (`wte.weight`, `h.3.attn.c_attn.weight`): the mapping
// file gpt2.yaml strips the optional `transformer.` prefix and ignores the attention mask buffers.
// Parameters are named as the engine expects them (`transformer.h.3.attn.qkv_proj.weight`).
//
// GPT-2 stores its linear layers as Conv1D, i.e. [in, out]; the engine wants [out, in]. Every
// transposition is expressed as a Piece that views the source as is, boxes the rank's slice and
// permutes the two dims ({1, 0}), so only this rank's bytes are read and no copy is made on the side.
//
//   wte (vocabulary-parallel), lm_head (alias of wte when tied, else vocabulary-parallel)
//   wpe, ln_1, ln_2, ln_f, attn.o_proj.bias, mlp.proj.bias           replicated
//   attn.qkv_proj.{weight,bias} = concat over q, k, v of that third's column-parallel slice
//   attn.o_proj.weight = attn.c_proj^T, row-parallel
//   mlp.fc.{weight,bias} = mlp.c_fc^T, column-parallel
//   mlp.proj.weight = mlp.c_proj^T, row-parallel

#include <string>
#include <vector>

#include "wmap/abi/plugin_api.h"
#include "wmap/spec/config_bounds.h"

namespace {

using wmap::Layout;
using wmap::ModelConfig;
using wmap::ModelSpec;
using wmap::ModuleSpec;
using wmap::ParamSpec;
using wmap::Piece;
using wmap::Range;
namespace spec = wmap::spec;

struct Gpt2Shape {
  uint64_t hidden, heads, layers, positions, vocab, inner;
  bool tie;
};

// Counts and sizes are read through ConfigBounds: bounded by what the checkpoint holds before the
// layer loop runs, products overflow-checked.
Gpt2Shape read_shape(const ModelConfig& c, const Layout& l, const wmap::KeyProbe& probe) {
  Gpt2Shape s{};
  const wmap::ConfigBounds b(c, probe);
  const char* hidden = c.has("n_embd") ? "n_embd" : "hidden_size";
  s.hidden = b.dim(hidden);
  s.heads = c.has("n_head") ? c.require_positive("n_head") : c.require_positive("num_attention_heads");
  s.layers = b.count(c.has("n_layer") ? "n_layer" : "num_hidden_layers", "h.", "layer");
  s.positions = b.dim(c.has("n_positions") ? "n_positions" : "max_position_embeddings");
  s.vocab = b.dim("vocab_size");
  // `n_inner: null` (the usual GPT-2 config) means 4 * n_embd.
  const std::string inner = c.has("n_inner") ? std::string("n_inner") : std::string("4 * ") + hidden;
  s.inner =
      b.dim(inner, c.has("n_inner") ? c.require_positive("n_inner") : b.mul(4, s.hidden, inner));  // c_fc's columns
  b.dim(std::string("3 * ") + hidden, b.mul(3, s.hidden, std::string("3 * ") + hidden));           // c_attn's columns
  // GPT-2 ties its output embedding to wte unless told otherwise.
  s.tie = c.get_bool("tie_word_embeddings", true);
  if (s.hidden % s.heads != 0) {
    c.fail("n_embd", std::to_string(s.hidden) + " is not a multiple of n_head " + std::to_string(s.heads));
  }
  if (auto e = l.heads_error(s.heads)) c.fail("n_head", *e);
  return s;
}

// A Conv1D weight stored [in, out], taken transposed ([out, in]) restricted to `out_rows` of the
// output (columns of the source) and `in_cols` of the input (rows of the source).
Piece transposed(const std::string& source, uint64_t in, uint64_t out, Range out_rows, Range in_cols) {
  Piece p = spec::whole(source, {in, out});
  p.box = {in_cols, out_rows};
  p.perm = {1, 0};
  return p;
}

ParamSpec param(std::string name, std::vector<uint64_t> shape, std::vector<Piece> pieces) {
  ParamSpec p;
  p.name = std::move(name);
  p.shape = std::move(shape);
  p.pieces = std::move(pieces);
  return p;
}

ModuleSpec module(std::string name, std::vector<ParamSpec> params) { return {std::move(name), std::move(params), {}}; }

ModelSpec build_gpt2(const ModelConfig& c, const Layout& l, const wmap::KeyProbe& probe) {
  const Gpt2Shape s = read_shape(c, l, probe);
  const uint64_t h = s.hidden, inner = s.inner;
  const Range all_h{0, h};
  const Range hr = l.tp_slice(h);      // this rank's share of q, k, v, o
  const Range ir = l.tp_slice(inner);  // this rank's share of the MLP

  ModelSpec m;
  m.plugin = "gpt2";
  m.architecture = c.architecture();
  m.modules.push_back(
      module("transformer.wte", {spec::vocab_parallel("transformer.wte.weight", "wte.weight", {s.vocab, h}, l)}));
  m.modules.push_back(
      module("transformer.wpe", {spec::replicated("transformer.wpe.weight", "wpe.weight", {s.positions, h})}));

  auto norm = [&](const std::string& dst, const std::string& src) {
    return module(dst, {spec::replicated(dst + ".weight", src + ".weight", {h}),
                        spec::replicated(dst + ".bias", src + ".bias", {h})});
  };

  for (uint64_t i = 0; i < s.layers; ++i) {
    const std::string src = "h." + std::to_string(i) + ".";
    const std::string dst = "transformer.h." + std::to_string(i) + ".";
    m.modules.push_back(norm(dst + "ln_1", src + "ln_1"));

    // c_attn: weight [H, 3H] (Conv1D), bias [3H]; q, k, v are the three H-wide column blocks.
    std::vector<Piece> qkv_w, qkv_b;
    for (uint64_t k = 0; k < 3; ++k) {
      const Range part{k * h + hr.begin, k * h + hr.end};
      qkv_w.push_back(transposed(src + "attn.c_attn.weight", h, 3 * h, part, all_h));
      qkv_b.push_back(spec::rows(src + "attn.c_attn.bias", {3 * h}, part));
    }
    m.modules.push_back(
        module(dst + "attn.qkv_proj", {param(dst + "attn.qkv_proj.weight", {3 * hr.size(), h}, std::move(qkv_w)),
                                       param(dst + "attn.qkv_proj.bias", {3 * hr.size()}, std::move(qkv_b))}));

    // attn.c_proj: [H(in), H(out)]; o_proj = its transpose, row-parallel (split on the input).
    m.modules.push_back(module(
        dst + "attn.o_proj",
        {param(dst + "attn.o_proj.weight", {h, hr.size()}, {transposed(src + "attn.c_proj.weight", h, h, all_h, hr)}),
         spec::replicated(dst + "attn.o_proj.bias", src + "attn.c_proj.bias", {h})}));

    m.modules.push_back(norm(dst + "ln_2", src + "ln_2"));

    // mlp.c_fc: [H, I]; fc = its transpose [I, H], column-parallel (split on the output).
    m.modules.push_back(module(
        dst + "mlp.fc",
        {param(dst + "mlp.fc.weight", {ir.size(), h}, {transposed(src + "mlp.c_fc.weight", h, inner, ir, all_h)}),
         param(dst + "mlp.fc.bias", {ir.size()}, {spec::rows(src + "mlp.c_fc.bias", {inner}, ir)})}));

    // mlp.c_proj: [I, H]; proj = its transpose [H, I], row-parallel (split on the input).
    const Range all_out{0, h};
    m.modules.push_back(module(
        dst + "mlp.proj",
        {param(dst + "mlp.proj.weight", {h, ir.size()}, {transposed(src + "mlp.c_proj.weight", inner, h, all_out, ir)}),
         spec::replicated(dst + "mlp.proj.bias", src + "mlp.c_proj.bias", {h})}));
  }
  m.modules.push_back(norm("transformer.ln_f", "ln_f"));

  spec::add_lm_head(m, "transformer.wte.weight", s.vocab, h, s.tie, l);
  return m;
}

void register_gpt2(wmap::PluginRegistrar& registrar) { registrar.set_model_builder(build_gpt2); }

}  // namespace

WMAP_DEFINE_PLUGIN("gpt2", "1.0", register_gpt2, ("trtllm"), "GPT2LMHeadModel")
