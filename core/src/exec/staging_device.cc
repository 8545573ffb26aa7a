#include "staging_device.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <exception>
#include <thread>

#include "wmap/util/error.h"

namespace wmap::exec_detail {

std::shared_ptr<DeviceBuffer> StagingDevice::allocate(uint64_t bytes, const std::string& label) {
  auto buffer = host_.allocate(bytes, label);
  std::lock_guard lock(mu_);
  staged_.emplace_back(label, buffer);
  return buffer;
}

uint64_t StagingDevice::staged_bytes() const {
  std::lock_guard lock(mu_);
  uint64_t n = 0;
  for (const auto& [name, b] : staged_) n += b->size();
  return n;
}

double StagingDevice::commit(Device& device, const std::map<std::string, const Destination*>& by_name,
                             unsigned workers) {
  const auto t0 = std::chrono::steady_clock::now();
  // Pieces of at most 64 MiB, so a device that stages writes (CUDA: a ring of pinned slabs)
  // takes each as one region and the workers share a large parameter.
  constexpr uint64_t kPiece = uint64_t{64} << 20;
  struct Piece {
    DeviceBuffer* dst;
    const std::byte* src;
    uint64_t offset, bytes;
  };
  std::vector<std::shared_ptr<DeviceBuffer>> targets;
  std::vector<Piece> pieces;
  for (const auto& [name, staged] : staged_) {
    auto it = by_name.find(name);
    if (it == by_name.end())
      throw Error(ErrorCode::kInternal, name + ": staged but no destination (the check should have refused the load)");
    targets.push_back(device.adopt(it->second->data, staged->size(), name));
    for (uint64_t off = 0; off < staged->size(); off += kPiece) {
      pieces.push_back({targets.back().get(), staged->host_data(), off, std::min(kPiece, staged->size() - off)});
    }
  }
  std::atomic<size_t> next{0};
  std::exception_ptr failure;
  std::mutex failure_mu;
  auto work = [&] {
    for (size_t i; (i = next.fetch_add(1)) < pieces.size();) {
      try {
        const Piece& p = pieces[i];
        StagedRegion region = device.begin_region(*p.dst, p.offset, p.bytes);
        std::memcpy(region.host.data(), p.src + p.offset, p.bytes);
        device.end_region(*p.dst, region);
      } catch (...) {
        std::lock_guard lock(failure_mu);
        if (!failure) failure = std::current_exception();
        next = pieces.size();
      }
    }
  };
  std::vector<std::thread> threads;
  const unsigned n = static_cast<unsigned>(std::min<size_t>(std::max(1u, workers), pieces.size()));
  for (unsigned t = 1; t < n; ++t) threads.emplace_back(work);
  work();
  for (auto& t : threads) t.join();
  device.synchronize();
  if (failure) std::rethrow_exception(failure);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace wmap::exec_detail
