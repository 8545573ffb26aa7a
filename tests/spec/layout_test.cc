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
  for (const auto& m : {invalid_message([] { make(2, 2).validate(); }), invalid_message([] { make(4, 0, 3).validate(); })}) {
    EXPECT_EQ(m.find("--"), std::string::npos) << m;
  }
}

TEST(Layout, FromOptionsValidates) {
  const Layout l = layout_from_options(8, 5, 2, 3);
  EXPECT_EQ(l.tp_size, 8u);
  EXPECT_EQ(l.tp_rank, 5u);
  EXPECT_EQ(l.ep_size, 2u);
  ASSERT_TRUE(l.mtp_layers.has_value());
  EXPECT_EQ(*l.mtp_layers, 3u);
  EXPECT_FALSE(layout_from_options(1, 0, 1, std::nullopt).mtp_layers.has_value());
  EXPECT_EQ(invalid_message([] { layout_from_options(2, 2, 1, std::nullopt); }), "tp_rank 2 is not below tp_size 2");
  EXPECT_EQ(invalid_message([] { layout_from_options(4, 0, 3, std::nullopt); }), "ep_size 3 must divide tp_size 4");
}

TEST(Layout, TpSliceAtUnevenWidths) {
  // Width 10 over 4 ranks: slices of ceil(10/4) = 3, the last one short.
  const std::vector<Range> ten{{0, 3}, {3, 6}, {6, 9}, {9, 10}};
  for (uint32_t r = 0; r < 4; ++r) {
    EXPECT_EQ(make(4, r).tp_slice(10), ten[r]) << "rank " << r;
    EXPECT_EQ(make(4, r).tp_slice(10), shard_range(10, 4, r)) << "rank " << r;
    EXPECT_EQ(make(4, r).tp_block(10), 3u);
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
  for (uint32_t r = 0; r < 8; ++r) EXPECT_EQ(make(8, r).local_kv_heads(2), (Range{head_of_rank[r], head_of_rank[r] + 1})) << r;
  // The rows helper scales the heads by their rows.
  EXPECT_EQ(spec::kv_head_rows(2, 16, make(8, 5)), (Range{16, 32}));
  EXPECT_EQ(spec::kv_head_rows(4, 16, make(2, 1)), (Range{32, 64}));
  // Neither divides the other.
  EXPECT_FALSE(make(4, 0).kv_heads_error(2).has_value());
  EXPECT_EQ(invalid_message([] { make(4, 0).local_kv_heads(6); }), "6 KV heads cannot be split or replicated over tp_size 4");
  EXPECT_EQ(invalid_message([] { make(4, 0).local_kv_heads(3); }), "3 KV heads cannot be split or replicated over tp_size 4");
  EXPECT_EQ(invalid_message([] { spec::kv_head_rows(3, 16, make(2, 0)); }), "3 KV heads cannot be split or replicated over tp_size 2");
}

TEST(Layout, MoeExpertsUseTheLayoutsExperts) {
  // Layer experts of rank 5 at T 8, P 2: experts 8..15, intermediate rows sliced over moe_tp.
  const auto params = spec::moe_experts("m.experts.backend", "m.experts", 16, 10, 4, make(8, 5, 2), spec::LinearQuant::none());
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
  const ParamSpec col = spec::column_parallel("w", "w", {10, 2}, l);
  EXPECT_EQ(col.shape, (std::vector<uint64_t>{1, 2}));
  EXPECT_EQ(col.pieces.at(0).box.at(0), (Range{9, 10}));
  const ParamSpec row = spec::row_parallel("w", "w", {2, 10}, l);
  EXPECT_EQ(row.shape, (std::vector<uint64_t>{2, 1}));
  const ParamSpec vocab = spec::vocab_parallel("e", "e", {10, 2}, l);
  EXPECT_EQ(vocab.shape, (std::vector<uint64_t>{3, 2}));
  ASSERT_EQ(vocab.pieces.size(), 2u);  // one row, then two rows of zeros
  EXPECT_EQ(vocab.pieces[1].zero_elements, 4u);
}

}  // namespace
}  // namespace wmap
