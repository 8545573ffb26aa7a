// Pins the canonical JSON bytes that the catalog content id and the plan id hash (json_text.h,
// Catalog::to_json, LoadPlan::to_json): saved catalogs and plans name these ids, so any change to
// the text (key order, number format, escaping) must be deliberate, with the pins updated here.
#include <gtest/gtest.h>

#include <functional>
#include <vector>

#include "wmap/catalog/catalog.h"
#include "wmap/mapping/rename_table.h"
#include "wmap/plan/load_plan.h"
#include "wmap/spec/model_spec.h"
#include "wmap/util/sha256.h"

namespace wmap {
namespace {

// The exact canonical bytes: each shard, tensor and parameter record on a line of its own.
const std::string kCatalogCanonical =
    R"({"format":"wmap-catalog","version":1,"shards":[)"
    "\n"
    R"({"file":"model.safetensors","size":112,"header_bytes":80,"tensors":2,"metadata":{"format":"pt"}}],"t)"
    R"(ensors":[)"
    "\n"
    R"({"name":"m.bias","dtype":"BF16","shape":[4],"file":"model.safetensors","offset":104,"nbytes":8},)"
    "\n"
    R"({"name":"m.weight","dtype":"F32","shape":[2,2],"file":"model.safetensors","offset":88,"nbytes":16}]})"
    "\n";
const std::string kCatalogId = "14a8fd23af26df1930b0d02843baa9b0719c7968848d077bb17bc440773f474a";
const std::string kPlanJson =
    R"({"format":"wmap-plan","version":10,"plan_id":"8b8e9b5f4ba5d04eafdcf9555b79c734c2b4ef71894a6fc3bc6223c23c866cd0)"
    R"(","catalog_id":"14a8fd23af26df1930b0d02843baa9b0719c7968848d077bb17bc440773f474a","plugin":)"
    R"("pin","architecture":"PinForCausalLM","layout":{"tp_size":1,"tp_rank":0,"ep_size":1,"pp_size":1,"pp_rank":0,"pp_partition":null,"mtp_layers":null,"target":"trtllm")"
    R"(,"attention_dp":false,"gpus_per_node":8,"moe_backend":null},"quantization":null,"ok":true,"cove)"
    R"(rage":"complete: 2 parameters (24 bytes) from 2 of 2 checkpoint tensors","bytes_to_load":24,"bytes_t)"
    R"(o_read":24,"certificate":{"params":2,"certified":2,"ranges":2,"bytes":24,"scaled":0,"ok":true},"prob)"
    R"(lems":[],"params":[)"
    "\n"
    R"({"name":"m.weight","module":"m","dtype":"F32","shape":[2,2],"nbytes":16,"coverage":{"ranges":1,"bytes")"
    R"(:16,"ok":true},"pieces":[{"source":"m.weigh)"
    R"(t","key":"m.weight","shard":0,"span":[88,104],"bytes":16,"view":[2,2],"box":[[0,2],[0,2]],"perm":[0,)"
    R"(1]}]},)"
    "\n"
    R"({"name":"m.bias","module":"m","dtype":"BF16","shape":[4],"nbytes":8,"coverage":{"ranges":1,"bytes":8,)"
    R"("ok":true},"pieces":[{"source":"m.bias","ke)"
    R"(y":"m.bias","shard":0,"span":[104,112],"bytes":8,"view":[4],"box":[[0,4]],"perm":[0]}]}],"read_order)"
    R"(":[0,1],"schedule":{"chunk_bytes":16777216,"max_read_gap":65536,"unit_fields":["kind","shard","begin","end","segments","p)"
    R"(aram","piece","releases"],"units":[)"
    "\n"
    R"(["read",0,88,112,2,null,null,[88,112]]]}})"
    "\n";
const std::string kPlanId = "8b8e9b5f4ba5d04eafdcf9555b79c734c2b4ef71894a6fc3bc6223c23c866cd0";

Catalog tiny_catalog() {
  ShardRecord shard;
  shard.file = "model.safetensors";
  shard.signature = {.size = 112, .mtime_ns = 5, .inode = 7, .etag = {}};
  shard.header_bytes = 80;
  shard.tensor_count = 2;
  shard.metadata = {{"format", "pt"}};
  TensorRecord w{
      .name = "m.weight", .shard = 0, .dtype = DType::kF32, .shape = {2, 2}, .offset = 88, .nbytes = 16, .strides = {}};
  TensorRecord b{
      .name = "m.bias", .shard = 0, .dtype = DType::kBF16, .shape = {4}, .offset = 104, .nbytes = 8, .strides = {}};
  return Catalog::from_parts("/nowhere", {shard}, {w, b});
}

TEST(CanonicalJson, CatalogTextAndContentIdArePinned) {
  const Catalog cat = tiny_catalog();
  const std::string canonical = cat.to_json(false);
  EXPECT_EQ(canonical, kCatalogCanonical);
  EXPECT_EQ(cat.content_id(), sha256_hex(canonical));
  EXPECT_EQ(cat.content_id(), kCatalogId);
}

TEST(CanonicalJson, PlanTextAndPlanIdArePinned) {
  const auto cat = std::make_shared<const Catalog>(tiny_catalog());
  ModelSpec spec;
  spec.plugin = "pin";
  spec.architecture = "PinForCausalLM";
  ModuleSpec m;
  m.name = "m";
  m.params.push_back(spec::replicated("m.weight", "m.weight", {2, 2}));
  m.params.push_back(spec::replicated("m.bias", "m.bias", {4}));
  spec.modules.push_back(m);
  const LoadPlan plan = LoadPlan::build(spec, cat, RenameTable());
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan.to_json(), kPlanJson);
  EXPECT_EQ(plan.plan_id(), kPlanId);

  // The target and the layout options are part of the plan and of its id.
  for (auto edit : std::vector<std::function<void(Layout&)>>{[](Layout& l) { l.target = Target::kVllm; },
                                                             [](Layout& l) { l.attention_dp = true; },
                                                             [](Layout& l) { l.gpus_per_node = 4; }}) {
    ModelSpec other = spec;
    edit(other.layout);
    const LoadPlan p = LoadPlan::build(other, cat, RenameTable());
    EXPECT_NE(p.plan_id(), kPlanId);
  }
  ModelSpec v = spec;
  v.layout.target = Target::kVllm;
  EXPECT_NE(LoadPlan::build(v, cat, RenameTable()).to_json().find(R"("target":"vllm")"), std::string::npos);
}

}  // namespace
}  // namespace wmap
