// The one place an I/O error during a load becomes a load failure (the CLI and Python both use it).
#include <gtest/gtest.h>

#include "wmap/loader/loader.h"

namespace wmap {
namespace {

TEST(LoadFailure, IoAndNotFoundBecomeValidationWithTheSameMessage) {
  for (ErrorCode code : {ErrorCode::kIo, ErrorCode::kNotFound}) {
    const auto f = as_load_failure(Error(code, "shard.safetensors: pread at offset 8 failed"));
    ASSERT_TRUE(f.has_value());
    EXPECT_EQ(f->code(), ErrorCode::kValidation);
    EXPECT_STREQ(f->what(), "shard.safetensors: pread at offset 8 failed");
  }
  EXPECT_FALSE(as_load_failure(Error(ErrorCode::kInvalidArgument, "bad")).has_value());
}

TEST(LoadFailure, RunRemapsIoErrorsAndPassesOthersThrough) {
  EXPECT_EQ(run_as_load_failure([] { return 7; }), 7);
  try {
    run_as_load_failure([]() -> int { throw Error(ErrorCode::kIo, "x: read failed"); });
    FAIL() << "no throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kValidation);
  }
  try {
    run_as_load_failure([]() -> int { throw Error(ErrorCode::kUnsupported, "y"); });
    FAIL() << "no throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnsupported);
  }
}

}  // namespace
}  // namespace wmap
