#include "wmap/spec/layout.h"

#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "wmap/spec/linear_spec.h"
#include "wmap/spec/model_spec.h"
#include "wmap/util/error.h"

namespace wmap {
namespace {

Layout make(uint32_t tp_size, uint32_t tp_rank, uint32_t ep_size = 1) {
  Layout l;
  l.tp_size = tp_size;
  l.tp_rank = tp_rank;
  l.ep_size = ep_size;
  return l;
}

// The message of the kInvalidArgument error `fn` throws ("" and a failure when none).
std::string invalid_message(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "no error thrown";
  return "";
}

TEST(Layout, ValidateNamesTheSettings) {
  EXPECT_NO_THROW(make(4, 3, 2).validate());
  EXPECT_EQ(invalid_message([] { make(2, 2).validate(); }), "tp_rank 2 is not below tp_size 2");
  EXPECT_EQ(invalid_message([] { make(4, 0, 3).validate(); }), "ep_size 3 must divide tp_size 4");
  EXPECT_EQ(invalid_message([] { make(4, 0, 0).validate(); }), "ep_size 0 must divide tp_size 4");
  EXPECT_EQ(invalid_message([] { make(0, 0).validate(); }), "tp_size must be at least 1");
  // No command-line flag in a core message: a Python user never typed one.
  for (const auto& m :
       {invalid_message([] { make(2, 2).validate(); }), invalid_message([] { make(4, 0, 3).validate(); })}) {
    EXPECT_EQ(m.find("--"), std::string::npos) << m;
  }
}

LayoutOptions opts(uint32_t tp_size, uint32_t tp_rank, uint32_t ep_size, std::optional<uint32_t> mtp = std::nullopt,
                   std::string target = "trtllm") {
  LayoutOptions o;
  o.tp_size = tp_size, o.tp_rank = tp_rank, o.ep_size = ep_size, o.mtp_layers = mtp, o.target = std::move(target);
  return o;
}

Layout vllm(uint32_t tp_size, uint32_t tp_rank, uint32_t ep_size = 1) {
  Layout l = make(tp_size, tp_rank, ep_size);
  l.target = Target::kVllm;
  return l;
}

// Each engine's split of L layers over S stages, as their own tests pin it: vLLM's
// tests/distributed/test_pipeline_partition.py (get_pp_indices) and torch.tensor_split's.
TEST(Layout, PipelineStagesSplitLayersAsEachEngineDoes) {
  auto stages = [](Target t, uint64_t layers, uint32_t pp, std::vector<uint32_t> partition = {}) {
    std::vector<std::pair<uint64_t, uint64_t>> out;
    for (uint32_t s = 0; s < pp; ++s) {
      Layout l;
      l.target = t, l.pp_size = pp, l.pp_rank = s, l.pp_partition = partition;
      l.validate();
      const Range r = l.pp_layers(layers);
      out.emplace_back(r.begin, r.end);
    }
    return out;
  };
  using V = std::vector<std::pair<uint64_t, uint64_t>>;
  // vLLM: the remainder goes to the stages before the last, last-but-one first.
  EXPECT_EQ(stages(Target::kVllm, 5, 2), (V{{0, 3}, {3, 5}}));
  EXPECT_EQ(stages(Target::kVllm, 4, 3), (V{{0, 1}, {1, 3}, {3, 4}}));
  EXPECT_EQ(stages(Target::kVllm, 7, 3), (V{{0, 2}, {2, 5}, {5, 7}}));
  EXPECT_EQ(stages(Target::kVllm, 6, 4), (V{{0, 1}, {1, 3}, {3, 5}, {5, 6}}));
  EXPECT_EQ(stages(Target::kVllm, 2, 3), (V{{0, 1}, {1, 2}, {2, 2}}));
  // TensorRT-LLM: torch.tensor_split, the first stages take the remainder.
  EXPECT_EQ(stages(Target::kTrtllm, 4, 3), (V{{0, 2}, {2, 3}, {3, 4}}));
  EXPECT_EQ(stages(Target::kTrtllm, 7, 3), (V{{0, 3}, {3, 5}, {5, 7}}));
  EXPECT_EQ(stages(Target::kTrtllm, 6, 4), (V{{0, 2}, {2, 4}, {4, 5}, {5, 6}}));
  EXPECT_EQ(stages(Target::kTrtllm, 61, 1), (V{{0, 61}}));
  // An explicit partition overrides both; its sum must be the layer count.
  EXPECT_EQ(stages(Target::kVllm, 4, 3, {1, 0, 3}), (V{{0, 1}, {1, 1}, {1, 4}}));
  EXPECT_EQ(stages(Target::kTrtllm, 4, 3, {1, 0, 3}), (V{{0, 1}, {1, 1}, {1, 4}}));
  EXPECT_EQ(invalid_message([&] {
              stages(Target::kVllm, 5, 3, {1, 0, 3});
            }),
            "pp_partition adds up to 4 layers; the model has 5 decoder layers (num_hidden_layers)");
  Layout l;
  l.pp_size = 2, l.pp_rank = 2;
  EXPECT_EQ(invalid_message([&] { l.validate(); }), "pp_rank 2 is not below pp_size 2");
  l.pp_rank = 0, l.pp_partition = {1, 2, 3};
  EXPECT_EQ(invalid_message([&] { l.validate(); }),
            "pp_partition has 3 stages, pp_size is 2: give one layer count per pipeline stage");
  l.pp_size = 0;
  EXPECT_EQ(invalid_message([&] { l.validate(); }), "pp_size must be at least 1");
  EXPECT_EQ(parse_pp_partition(" 3, 2,2", "p"), (std::vector<uint32_t>{3, 2, 2}));
  for (const char* bad : {"", "3,,2", "3;2", "-1,2", "1234567890"}) {
    EXPECT_NE(invalid_message([&] { parse_pp_partition(bad, "pp_partition"); }).find("expected layer counts"),
              std::string::npos)
        << bad;
  }
  // The stage is part of the layout's one JSON form (and so of the plan id).
  Layout j;
  j.pp_size = 3, j.pp_rank = 1, j.pp_partition = {2, 3, 2};
  EXPECT_NE(j.to_json().find("\"pp_size\":3,\"pp_rank\":1,\"pp_partition\":[2,3,2]"), std::string::npos) << j.to_json();
  EXPECT_NE(Layout{}.to_json().find("\"pp_size\":1,\"pp_rank\":0,\"pp_partition\":null"), std::string::npos);
  EXPECT_EQ(j.to_string(), "tp 0/1, ep 1, pp 1/3 (partition 2,3,2), target trtllm");
}

TEST(Layout, FromOptionsValidates) {
  const Layout l = layout_from_options(opts(8, 5, 2, 3));
  EXPECT_EQ(l.tp_size, 8u);
  EXPECT_EQ(l.tp_rank, 5u);
  EXPECT_EQ(l.ep_size, 2u);
  ASSERT_TRUE(l.mtp_layers.has_value());
  EXPECT_EQ(*l.mtp_layers, 3u);
  EXPECT_EQ(l.target, Target::kTrtllm);
  EXPECT_EQ(l.gpus_per_node, 8u);
  EXPECT_FALSE(layout_from_options(opts(1, 0, 1)).mtp_layers.has_value());
  EXPECT_EQ(invalid_message([] { layout_from_options(opts(2, 2, 1)); }), "tp_rank 2 is not below tp_size 2");
  EXPECT_EQ(invalid_message([] { layout_from_options(opts(4, 0, 3)); }), "ep_size 3 must divide tp_size 4");
  EXPECT_EQ(invalid_message([] { layout_from_options(opts(1, 0, 1, std::nullopt, "sglang")); }),
            "target 'sglang' is not one of trtllm, vllm");
  EXPECT_EQ(layout_from_options(opts(4, 1, 4, std::nullopt, "vllm")).target, Target::kVllm);
}

TEST(Layout, TargetRulesAreCheckedAtValidation) {
  // vLLM's expert parallelism is all or nothing.
  EXPECT_EQ(invalid_message([] { vllm(4, 0, 2).validate(); }),
            "ep_size 2 is not allowed with target vllm at tp_size 4: vLLM's expert parallelism is all or nothing "
            "(ep_size 1 or 4)");
  EXPECT_NO_THROW(vllm(4, 0, 1).validate());
  EXPECT_NO_THROW(vllm(4, 0, 4).validate());
  Layout adp = vllm(2, 0);
  adp.attention_dp = true;
  EXPECT_EQ(invalid_message([&] { adp.validate(); }),
            "attention_dp is a TensorRT-LLM layout (target trtllm); target vllm has none");
  Layout mtp = vllm(2, 0);
  mtp.mtp_layers = 1;
  EXPECT_NE(invalid_message([&] { mtp.validate(); }).find("target vllm loads no MTP layers"), std::string::npos);
  mtp.mtp_layers = 0;
  EXPECT_NO_THROW(mtp.validate());
  Layout many = make(2, 0);
  many.mtp_layers = 64;
  EXPECT_NO_THROW(many.validate());
  many.mtp_layers = 200000000;
  EXPECT_EQ(invalid_message([&] { many.validate(); }),
            "mtp_layers 200000000 is more than 64 (each MTP layer is a whole decoder layer; DeepSeek-V3 declares 1)");
  Layout g = make(2, 0);
  g.gpus_per_node = 0;
  EXPECT_EQ(invalid_message([&] { g.validate(); }), "gpus_per_node must be at least 1");
  EXPECT_EQ(target_name(Target::kVllm), "vllm");
  EXPECT_EQ(parse_target("trtllm"), Target::kTrtllm);
  EXPECT_FALSE(parse_target("TRTLLM").has_value());
}

TEST(Layout, VllmSplitsExactlyAndNamesTheTensor) {
  EXPECT_EQ(vllm(4, 1).tp_slice(8, "x.weight"), (Range{2, 4}));
  EXPECT_EQ(
      invalid_message([] { vllm(4, 1).tp_slice(10, "model.layers.0.mlp.gate_proj.weight"); }),
      "model.layers.0.mlp.gate_proj.weight: width 10 is not divisible by tp_size 4 (target vllm splits every tensor "
      "exactly, as vLLM asserts)");
  EXPECT_EQ(make(4, 1).tp_slice(10, "x"), (Range{3, 6}));  // trtllm: the uneven shard rule
  EXPECT_NE(invalid_message([] { vllm(4, 1, 1).moe_tp_slice(6, "e.weight"); }).find("moe_tp_size 4"),
            std::string::npos);
}

TEST(Layout, VocabularyPaddingPerTarget) {
  // trtllm: ceil(V/T) rows per rank, the last block short (zero-padded by the spec).
  EXPECT_EQ(make(4, 3).vocab_shard(250, make(4, 3).tp()).rows, 63u);
  EXPECT_EQ(make(4, 3).vocab_shard(250, make(4, 3).tp()).source, (Range{189, 250}));
  EXPECT_EQ(make(1, 0).vocab_shard(250, make(1, 0).tp()).rows, 250u);
  // vllm: V padded to 64*ceil(V/64) = 256, also unsplit; Vp/T rows per rank.
  EXPECT_EQ(vllm(1, 0).vocab_shard(250, vllm(1, 0).tp()).rows, 256u);
  EXPECT_EQ(vllm(1, 0).vocab_shard(250, vllm(1, 0).tp()).source, (Range{0, 250}));
  EXPECT_EQ(vllm(4, 3).vocab_shard(250, vllm(4, 3).tp()).rows, 64u);
  EXPECT_EQ(vllm(4, 3).vocab_shard(250, vllm(4, 3).tp()).source, (Range{192, 250}));
  EXPECT_EQ(vllm(4, 2).vocab_shard(70, vllm(4, 2).tp()).source, (Range{64, 70}));  // Vp 128: 32 rows per rank
  EXPECT_EQ(vllm(4, 3).vocab_shard(70, vllm(4, 3).tp()).source, (Range{70, 70}));  // all padding
  EXPECT_NE(invalid_message([] { vllm(3, 0).vocab_shard(100, vllm(3, 0).tp()); }).find("padded to 128"),
            std::string::npos);
}

TEST(Layout, VllmExpertsPutTheRemainderOnTheFirstRanks) {
  // E = 5 over ep 2: rank 0 holds 3 (0..2), rank 1 holds 2 (3..4).
  EXPECT_EQ(vllm(2, 0, 2).local_experts(5), (Range{0, 3}));
  EXPECT_EQ(vllm(2, 1, 2).local_experts(5), (Range{3, 5}));
  EXPECT_EQ(vllm(4, 3, 4).local_experts(10), (Range{8, 10}));  // 3, 3, 2, 2
  EXPECT_EQ(vllm(4, 1, 4).local_experts(10), (Range{3, 6}));
  EXPECT_EQ(vllm(4, 2, 1).local_experts(5), (Range{0, 5}));  // ep 1: every expert
  EXPECT_FALSE(vllm(2, 0, 2).experts_error(5).has_value());
}

TEST(Layout, GcdSplitOfTensorRtLlmsDeepseekMlp) {
  // intermediate 384 = 3 blocks of 128 at T = 2: gcd(3, 2) = 1, every rank holds the whole MLP.
  EXPECT_EQ(make(2, 1).gcd_split(3, true).size, 1u);
  EXPECT_EQ(make(2, 1).gcd_split(3, true).slice(384), (Range{0, 384}));
  // R1: 18432 / 128 = 144 blocks at T = 16, G = 8: gcd(144, 16) = 16 > 8 -> gcd(16, 8) = 8; rank 11 is part 3.
  Layout r1 = make(16, 11);
  EXPECT_EQ(r1.gcd_split(144, true).size, 8u);
  EXPECT_EQ(r1.gcd_split(144, true).rank, 3u);
  EXPECT_EQ(r1.gcd_split(144, false).size, 16u);  // the shared experts have no node cap
  // The node cap at T = 4, G = 2: 4 blocks -> gcd 4 > 2 -> 2 parts; ranks 1 and 3 hold the same slice.
  Layout l = make(4, 3);
  l.gpus_per_node = 2;
  EXPECT_EQ(l.gcd_split(4, true).size, 2u);
  EXPECT_EQ(l.gcd_split(4, true).slice(512), (Range{256, 512}));
  l.tp_rank = 1;
  EXPECT_EQ(l.gcd_split(4, true).slice(512), (Range{256, 512}));
}

TEST(Layout, AttentionDpReplicatesAttentionOnly) {
  Layout l = make(4, 2, 4);
  l.attention_dp = true;
  EXPECT_TRUE(l.attention().replicated());
  EXPECT_EQ(l.local_heads(6), (Range{0, 6}));  // every head, even when 6 does not divide over 4
  EXPECT_FALSE(l.heads_error(6).has_value());
  EXPECT_EQ(l.local_experts(8), (Range{4, 6}));  // routed experts keep their split
  EXPECT_NE(l.to_string().find("attention-dp"), std::string::npos);
}

TEST(Layout, TpSliceAtUnevenWidths) {
  // Width 10 over 4 ranks: slices of ceil(10/4) = 3, the last one short.
  const std::vector<Range> ten{{0, 3}, {3, 6}, {6, 9}, {9, 10}};
  for (uint32_t r = 0; r < 4; ++r) {
    EXPECT_EQ(make(4, r).tp_slice(10), ten[r]) << "rank " << r;
    EXPECT_EQ(make(4, r).tp_slice(10), shard_range(10, 4, r)) << "rank " << r;
    EXPECT_EQ(make(4, r).vocab_shard(10, make(4, r).tp()).rows, 3u);
  }
  // Width 5 over 4 ranks: ceil = 2, so rank 3 gets nothing.
  EXPECT_EQ(make(4, 2).tp_slice(5), (Range{4, 5}));
  EXPECT_EQ(make(4, 3).tp_slice(5).size(), 0u);
  EXPECT_EQ(make(1, 0).tp_slice(7), (Range{0, 7}));
}

TEST(Layout, MoeSliceIsOverMoeTp) {
  // T = 8, P = 2: moe_tp = 4, moe_tp_rank = r / 2, moe_ep_rank = r % 2.
  const Layout l = make(8, 5, 2);
  EXPECT_EQ(l.moe_tp_size(), 4u);
  EXPECT_EQ(l.moe_tp_rank(), 2u);
  EXPECT_EQ(l.moe_ep_rank(), 1u);
  EXPECT_EQ(l.moe_tp_slice(10), (Range{6, 9}));
  EXPECT_EQ(l.moe_tp_slice(10), shard_range(10, 4, 2));
  // P = T: the experts' dimensions are whole on every rank.
  EXPECT_EQ(make(4, 3, 4).moe_tp_slice(10), (Range{0, 10}));
}

TEST(Layout, LocalExperts) {
  EXPECT_EQ(make(8, 5, 2).local_experts(16), (Range{8, 16}));  // moe_ep_rank 1 of 2
  EXPECT_EQ(make(8, 4, 2).local_experts(16), (Range{0, 8}));
  EXPECT_EQ(make(4, 3, 4).local_experts(8), (Range{6, 8}));
  EXPECT_EQ(make(4, 3, 1).local_experts(5), (Range{0, 5}));  // ep 1: every expert
  EXPECT_FALSE(make(4, 0, 4).experts_error(8).has_value());
  EXPECT_EQ(make(4, 0, 4).experts_error(6).value_or(""), "6 experts cannot be split over ep_size 4");
  EXPECT_EQ(invalid_message([] { make(2, 0, 2).local_experts(3); }), "3 experts cannot be split over ep_size 2");
}

TEST(Layout, LocalHeads) {
  EXPECT_EQ(make(4, 2).local_heads(8), (Range{4, 6}));
  EXPECT_EQ(make(1, 0).local_heads(3), (Range{0, 3}));
  EXPECT_FALSE(make(4, 0).heads_error(8).has_value());
  EXPECT_EQ(invalid_message([] { make(4, 1).local_heads(6); }), "6 attention heads cannot be split over tp_size 4");
}

TEST(Layout, LocalKvHeadsSplitOrReplicated) {
  // kv_heads >= T: contiguous kv_heads/T heads.
  EXPECT_EQ(make(2, 1).local_kv_heads(4), (Range{2, 4}));
  EXPECT_EQ(make(4, 3).local_kv_heads(4), (Range{3, 4}));
  // kv_heads < T: head r / (T/kv_heads), each repeated on T/kv_heads ranks.
  const std::vector<uint64_t> head_of_rank{0, 0, 0, 0, 1, 1, 1, 1};
  for (uint32_t r = 0; r < 8; ++r)
    EXPECT_EQ(make(8, r).local_kv_heads(2), (Range{head_of_rank[r], head_of_rank[r] + 1})) << r;
  // The rows helper scales the heads by their rows.
  EXPECT_EQ(spec::kv_head_rows(2, 16, make(8, 5)), (Range{16, 32}));
  EXPECT_EQ(spec::kv_head_rows(4, 16, make(2, 1)), (Range{32, 64}));
  // Neither divides the other.
  EXPECT_FALSE(make(4, 0).kv_heads_error(2).has_value());
  EXPECT_EQ(invalid_message([] { make(4, 0).local_kv_heads(6); }),
            "6 KV heads cannot be split or replicated over tp_size 4");
  EXPECT_EQ(invalid_message([] { make(4, 0).local_kv_heads(3); }),
            "3 KV heads cannot be split or replicated over tp_size 4");
  EXPECT_EQ(invalid_message([] { spec::kv_head_rows(3, 16, make(2, 0)); }),
            "3 KV heads cannot be split or replicated over tp_size 2");
}

TEST(Layout, MoeExpertsUseTheLayoutsExperts) {
  // Layer experts of rank 5 at T 8, P 2: experts 8..15, intermediate rows sliced over moe_tp.
  const auto params =
      spec::moe_experts("m.experts.backend", "m.experts", 16, 10, 4, make(8, 5, 2), spec::LinearQuant::none());
  ASSERT_EQ(params.size(), 2u);
  EXPECT_EQ(params[0].name, "m.experts.backend.w3_w1_weight");
  EXPECT_EQ(params[0].shape, (std::vector<uint64_t>{8, 2 * 3, 4}));
  ASSERT_EQ(params[0].pieces.size(), 16u);
  EXPECT_EQ(params[0].pieces[0].source, "m.experts.8.up_proj.weight");
  EXPECT_EQ(params[0].pieces[0].box[0], (Range{6, 9}));
  EXPECT_EQ(params[1].shape, (std::vector<uint64_t>{8, 4, 3}));
  EXPECT_EQ(invalid_message([] { spec::moe_experts("d", "s", 3, 10, 4, make(2, 0, 2), spec::LinearQuant::none()); }),
            "3 experts cannot be split over ep_size 2");
}

TEST(Layout, SpecHelpersSliceByTheLayout) {
  const Layout l = make(4, 3);
  const ParamSpec col = spec::column_parallel("w", "w", {10, 2}, l.tp());
  EXPECT_EQ(col.shape, (std::vector<uint64_t>{1, 2}));
  EXPECT_EQ(col.pieces.at(0).box.at(0), (Range{9, 10}));
  const ParamSpec row = spec::row_parallel("w", "w", {2, 10}, l.tp());
  EXPECT_EQ(row.shape, (std::vector<uint64_t>{2, 1}));
  const ParamSpec vocab = spec::vocab_parallel("e", "e", {10, 2}, l);
  EXPECT_EQ(vocab.shape, (std::vector<uint64_t>{3, 2}));
  ASSERT_EQ(vocab.pieces.size(), 2u);  // one row, then two rows of zeros
  EXPECT_EQ(vocab.pieces[1].zero_elements, 4u);
  // vllm: the padded vocabulary (16 rows for 10) gives 4 rows a rank; rank 3 holds only zeros.
  const ParamSpec padded = spec::vocab_parallel("e", "e", {10, 2}, vllm(4, 3));
  EXPECT_EQ(padded.shape, (std::vector<uint64_t>{16, 2}));
}

TEST(Layout, TiedLmHeadPerTarget) {
  ModelSpec t;
  spec::add_lm_head(t, "model.embed_tokens.weight", 250, 8, true, make(2, 1));
  ASSERT_EQ(t.modules.size(), 1u);
  EXPECT_EQ(t.modules[0].params.at(0).alias_of, "model.embed_tokens.weight");
  EXPECT_EQ(t.modules[0].params.at(0).shape, (std::vector<uint64_t>{125, 8}));
  ModelSpec v;  // vLLM ties lm_head to embed_tokens: no lm_head parameter at all
  spec::add_lm_head(v, "model.embed_tokens.weight", 250, 8, true, vllm(2, 1));
  EXPECT_TRUE(v.modules.empty());
  EXPECT_EQ(v.skipped_keys, (std::vector<std::string>{"lm_head.weight"}));
}

TEST(Layout, VllmFp8PartsMustHoldWholeBlocks) {
  const spec::LinearQuant q = spec::LinearQuant::fp8({128, 128}, "weight_scale_inv", true);
  std::vector<ParamSpec> out;
  // 192 rows at T = 2: 96 a rank, not whole 128-row blocks.
  EXPECT_NE(invalid_message([&] {
              spec::add_linear(out, "d", ".", {spec::linear_rows("q_b_proj", {192, 128}, vllm(2, 1).tp())}, q);
            }).find("q_b_proj.weight: this rank's rows [96, 192)"),
            std::string::npos);
  // A fused part that is not the last must hold whole blocks even unsplit; the last may not.
  EXPECT_NE(
      invalid_message([&] {
        spec::add_linear(out, "d", ".", {spec::whole_linear("a", {64, 128}), spec::whole_linear("b", {256, 128})}, q);
      }).find("a.weight"),
      std::string::npos);
  out.clear();
  spec::add_linear(out, "d", ".", {spec::whole_linear("a", {256, 128}), spec::whole_linear("b", {64, 128})}, q);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[1].name, "d.weight_scale_inv");
  EXPECT_EQ(out[1].shape, (std::vector<uint64_t>{3, 1}));
  // trtllm names the scale weight_scale and takes every block a part touches.
  out.clear();
  spec::add_linear(out, "d", ".", {spec::linear_rows("q_b_proj", {192, 128}, make(2, 1).tp())},
                   spec::LinearQuant::fp8({128, 128}, "weight_scale", false));
  EXPECT_EQ(out[1].name, "d.weight_scale");
  EXPECT_EQ(out[1].shape, (std::vector<uint64_t>{2, 1}));
}

}  // namespace
}  // namespace wmap
