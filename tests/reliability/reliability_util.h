#pragma once
// Shared by the reliability tests: a library-level LoaderSession over a synthetic checkpoint,
// a Device that counts live buffers (to prove a failed load hands nothing out and leaks nothing),
// and process resource probes (RSS, open descriptors).
#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <memory>
#include <string>

#include "test_util.h"
#include "wmap/device/device.h"
#include "wmap/util/error.h"
#include "wmap/loader/loader.h"

namespace wmap::test {

// The build tree's plugin folder (lib/wmap/plugins or lib/<multiarch>/wmap/plugins).
inline std::filesystem::path build_plugin_dir() {
  const std::filesystem::path build = WMAP_BUILD_DIR;
  for (const auto& e : std::filesystem::recursive_directory_iterator(build / "lib")) {
    if (e.is_directory() && e.path().filename() == "plugins" && e.path().parent_path().filename() == "wmap")
      return e.path();
  }
  return build / "lib" / "wmap" / "plugins";
}

inline LoaderOptions loader_options(const std::filesystem::path& checkpoint) {
  LoaderOptions o;
  o.checkpoint = checkpoint;
  o.plugin_dir = build_plugin_dir();
  o.progress = false;
  return o;
}

inline void synth(const std::string& family, const std::filesystem::path& dir, const std::string& flags = "") {
  auto r = run_wmap("synth " + family + " " + shell_quote(dir.string()) + " " + flags);
  ASSERT_EQ(r.exit_code, 0) << r.err;
}

// Wraps a device; counts buffers alive and allocated.
class CountingDevice final : public Device {
 public:
  explicit CountingDevice(std::unique_ptr<Device> base) : base_(std::move(base)) {}
  DeviceSpec spec() const override { return base_->spec(); }
  std::shared_ptr<DeviceBuffer> allocate(uint64_t bytes) override {
    auto b = base_->allocate(bytes);
    ++allocated_;
    ++live_;
    auto* live = &live_;
    return std::shared_ptr<DeviceBuffer>(b.get(), [b, live](DeviceBuffer*) mutable {
      b.reset();
      --*live;
    });
  }
  std::span<std::byte> begin_write(DeviceBuffer& buffer) override { return base_->begin_write(buffer); }
  void end_write(DeviceBuffer& buffer, std::span<std::byte> written) override { base_->end_write(buffer, written); }
  void copy_to_host(DeviceBuffer& buffer, std::span<std::byte> dst) override { base_->copy_to_host(buffer, dst); }
  void synchronize() override { base_->synchronize(); }
  int live() const { return live_; }
  int allocated() const { return allocated_; }

 private:
  std::unique_ptr<Device> base_;
  std::atomic<int> live_{0}, allocated_{0};
};

// Runs `fn`, expects a wmap::Error whose message contains every needle; returns the message.
template <typename Fn>
std::string expect_wmap_error(Fn&& fn, std::initializer_list<std::string> needles) {
  try {
    fn();
  } catch (const Error& e) {
    const std::string msg = e.what();
    for (const auto& n : needles) EXPECT_NE(msg.find(n), std::string::npos) << "'" << n << "' not in: " << msg;
    return msg;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "not a wmap::Error: " << e.what();
    return e.what();
  }
  ADD_FAILURE() << "no error thrown";
  return {};
}

// Resident set size in pages and open descriptors of this process.
uint64_t rss_pages();
int open_fds();

}  // namespace wmap::test
