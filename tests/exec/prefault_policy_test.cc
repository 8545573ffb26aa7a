// When the executor faults a destination in before writing it (core/src/exec/prefault_policy.h,
// issue 42 item 1): by default only 4 KiB buffers wmap allocated, and only where this machine's
// page faults are expensive; never huge-page or caller-owned buffers; --prefault on|off force it.
#include <gtest/gtest.h>

#include "prefault_policy.h"
#include "test_util.h"
#include "wmap/device/device.h"
#include "wmap/util/env.h"

namespace wmap::test {
namespace {

using exec_detail::PrefaultPolicy;

constexpr uint64_t kSmall = 4096, kHuge = uint64_t{2} << 20, kCallers = 0;

TEST(PrefaultPolicy, AutoPopulatesSmallPagesOnlyWhereFaultsAreExpensive) {
  const PrefaultPolicy pvm(std::nullopt, 12.0);  // a PVM guest: 11-15 us a fault
  EXPECT_TRUE(pvm.applies(kSmall));
  EXPECT_FALSE(pvm.applies(kHuge));
  EXPECT_FALSE(pvm.applies(kCallers));
  EXPECT_NE(pvm.decision().find("auto: 4 KiB buffers on (a fresh page faults in 12.0 us"), std::string::npos)
      << pvm.decision();
  const PrefaultPolicy cheap(std::nullopt, 1.4);  // the 2-vCPU VM: 1.4 us
  EXPECT_FALSE(cheap.applies(kSmall));
  EXPECT_FALSE(cheap.applies(kHuge));
  EXPECT_NE(cheap.decision().find("4 KiB buffers off (a fresh page faults in 1.4 us"), std::string::npos)
      << cheap.decision();
}

TEST(PrefaultPolicy, OnAndOffAreObeyedForEveryBuffer) {
  const PrefaultPolicy on(true, 1.0), off(false, 50.0);
  for (uint64_t page : {kSmall, kHuge, kCallers}) {
    EXPECT_TRUE(on.applies(page)) << page;
    EXPECT_FALSE(off.applies(page)) << page;
  }
  EXPECT_EQ(on.decision(), "on (requested)");
  EXPECT_EQ(off.decision(), "off (requested)");
}

TEST(PrefaultPolicy, TheMachinesFaultCostIsMeasured) {
  const double us = exec_detail::fresh_page_fault_micros();
  EXPECT_GT(us, 0.0);
  EXPECT_LT(us, 10000.0);
  EXPECT_EQ(exec_detail::fresh_page_fault_micros(), us) << "measured once";
}

TEST(PrefaultPolicy, HostBuffersReportTheirPages) {
  auto host = make_device("host");
  EXPECT_EQ(host->allocate(uint64_t{8} << 20)->page_bytes(), env_switch_on("WMAP_HUGE_PAGES") ? kHuge : kSmall);
  EXPECT_EQ(host->allocate(1000)->page_bytes(), kSmall);
  std::vector<std::byte> mine(1 << 20);
  EXPECT_EQ(host->adopt(mine.data(), mine.size(), "mine")->page_bytes(), kCallers);
}

}  // namespace
}  // namespace wmap::test
