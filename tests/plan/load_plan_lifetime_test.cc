// A plan shares the catalog it was built from (review F3): on 63affe4 a LoadPlan kept a raw
// pointer to the caller's Catalog, and moving that Catalog after building the plan made
// plan.catalog_id() read freed memory (segfault). Now the caller's handle can be moved or dropped
// and the plan still answers and runs; PreparedLoad cannot be moved into a broken state.
#include <gtest/gtest.h>

#include <type_traits>

#include "checkpoint_edit.h"
#include "test_util.h"
#include "wmap/catalog/shard_set.h"
#include "wmap/device/device.h"
#include "wmap/exec/executor.h"
#include "wmap/mapping/rename_table.h"
#include "wmap/plan/load_plan.h"
#include "wmap/spec/model_spec.h"

namespace wmap {
namespace {

static_assert(!std::is_move_constructible_v<PreparedLoad>, "a PreparedLoad is held where prepare() put it");
static_assert(!std::is_move_assignable_v<PreparedLoad>);
static_assert(!std::is_copy_constructible_v<PreparedLoad>);

TEST(LoadPlanLifetime, PlanOutlivesEveryCallerHandleOfItsCatalog) {
  test::TempDir dir;
  test::write_file(
      dir / "model.safetensors",
      test::safetensors_bytes(R"({"w":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]}})",
                              std::string("\x01\x00\x00\x00\x02\x00\x00\x00\x03\x00\x00\x00\x04\x00\x00\x00", 16)));
  ModelSpec spec;
  spec.plugin = "t";
  spec.architecture = "T";
  spec.modules.push_back({"m", {spec::replicated("w", "w", {2, 2})}, {}});

  auto catalog = std::make_shared<const Catalog>(Catalog::build(discover_shards(dir.path())));
  const std::string id = catalog->content_id();
  LoadPlan plan = LoadPlan::build(spec, catalog, RenameTable());
  // The scenario of the review: the caller's catalog moves away, then goes away entirely.
  std::shared_ptr<const Catalog> moved = std::move(catalog);
  moved.reset();
  LoadPlan moved_plan = std::move(plan);

  EXPECT_EQ(moved_plan.catalog_id(), id);
  EXPECT_EQ(moved_plan.catalog().size(), 1u);
  EXPECT_FALSE(moved_plan.plan_id().empty());
  auto device = make_device("host");
  const LoadedModel m = execute_plan(moved_plan, *device, ExecOptions{});
  ASSERT_EQ(m.params.size(), 1u);
  const std::byte* data = m.params[0].buffer->host_data();
  EXPECT_EQ(static_cast<int>(data[12]), 4);
}

TEST(LoadPlanLifetime, BuildingWithoutACatalogIsRefused) {
  ModelSpec spec;
  EXPECT_THROW(LoadPlan::build(spec, nullptr, RenameTable()), Error);
}

}  // namespace
}  // namespace wmap
