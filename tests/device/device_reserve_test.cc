// Device::reserve on the host: a load larger than the machine's memory is refused before anything
// is allocated, naming the need and the machine's memory; a load that fits passes. Host buffers of
// 2 MiB or more are huge-page mappings (2 MiB aligned, advised MADV_HUGEPAGE); smaller ones are
// 64-byte aligned heap blocks.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

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
    EXPECT_NE(
        m.find("host: the load needs 1.00 EiB (1152921504606846976 bytes) for 3 parameters but this machine has "),
        std::string::npos)
        << m;
    EXPECT_NE(m.find("of memory; nothing was read"), std::string::npos) << m;
  }
  EXPECT_NO_THROW(host->reserve(uint64_t{1} << 20, 10));
}

// The VmFlags line of the /proc/self/smaps entry that holds `p` ("" when none does).
std::string vm_flags_of(const void* p) {
  std::ifstream in("/proc/self/smaps");
  const auto addr = reinterpret_cast<uintptr_t>(p);
  bool inside = false;
  for (std::string line; std::getline(in, line);) {
    uintptr_t lo = 0, hi = 0;
    char dash = 0;
    std::istringstream head(line);
    if (head >> std::hex >> lo >> dash >> hi && dash == '-') {
      inside = lo <= addr && addr < hi;
    } else if (inside && line.rfind("VmFlags:", 0) == 0) {
      return line;
    }
  }
  return "";
}

TEST(HostDevice, LargeBuffersAreHugePageMappingsSmallOnesHeapBlocks) {
  const char* opt = std::getenv("WMAP_HUGE_PAGES");
  if (opt != nullptr && std::strcmp(opt, "0") == 0) GTEST_SKIP() << "WMAP_HUGE_PAGES=0";
  auto host = make_device("host");
  for (const uint64_t bytes : {uint64_t{2} << 20, (uint64_t{5} << 20) + 3}) {
    auto buf = host->allocate(bytes);
    std::byte* p = buf->host_data();
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % (uint64_t{2} << 20), 0u) << bytes;
    EXPECT_EQ(buf->size(), bytes);
    std::memset(p, 0x5a, bytes);  // every byte is writable
    std::vector<std::byte> back(bytes);
    host->copy_to_host(*buf, back);
    EXPECT_EQ(back.front(), std::byte{0x5a});
    EXPECT_EQ(back.back(), std::byte{0x5a});
    const std::string flags = vm_flags_of(p);
    ASSERT_FALSE(flags.empty()) << "no smaps entry holds the buffer";
    EXPECT_NE(flags.find(" hg"), std::string::npos) << bytes << " bytes: " << flags;
  }
  auto small = host->allocate(1000);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(small->host_data()) % 64, 0u);
  std::memset(small->host_data(), 1, 1000);
}

}  // namespace
}  // namespace wmap
