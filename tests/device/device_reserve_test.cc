// Device::reserve on the host: a load larger than the machine's memory is refused before anything
// is allocated, naming the need and the machine's memory; a load that fits passes.
#include <gtest/gtest.h>

#include "wmap/device/device.h"
#include "wmap/util/error.h"

namespace wmap {
namespace {

TEST(HostDevice, ALoadLargerThanTheMachinesMemoryIsRefusedUpFront) {
  auto host = make_device("host");
  try {
    host->reserve(uint64_t{1} << 60, 3);
    FAIL() << "reserved an exbibyte";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_EQ(e.code(), ErrorCode::kValidation) << m;
    EXPECT_NE(m.find("host: the load needs 1.00 EiB (1152921504606846976 bytes) for 3 parameters but this machine has "),
              std::string::npos) << m;
    EXPECT_NE(m.find("of memory; nothing was read"), std::string::npos) << m;
  }
  EXPECT_NO_THROW(host->reserve(uint64_t{1} << 20, 10));
}

}  // namespace
}  // namespace wmap
