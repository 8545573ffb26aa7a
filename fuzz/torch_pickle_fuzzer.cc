// Fuzzes the restricted pickle interpreter of PyTorch checkpoints (parse_torch_pickle) with the
// input as a data.pkl, and the zip + catalog path (read_torch_checkpoint) with the input as a
// whole .bin file. Any exception other than wmap::Error, any crash or leak is a bug.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>

#include "wmap/error.h"
#include "wmap/file_io.h"
#include "wmap/torch_checkpoint.h"

namespace {

class MemoryFile final : public wmap::RandomAccessFile {
 public:
  MemoryFile(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  const std::string& path() const override { return path_; }
  uint64_t size() const override { return size_; }
  void read(uint64_t offset, std::span<std::byte> dst) const override {
    if (offset > size_ || dst.size() > size_ - offset) throw wmap::Error(wmap::ErrorCode::kIo, "read past end");
    if (!dst.empty()) std::memcpy(dst.data(), data_ + offset, dst.size());
  }
  std::span<const std::byte> view(uint64_t, uint64_t) const override { return {}; }
  void release(uint64_t, uint64_t) const override {}
  void will_need(uint64_t, uint64_t) const override {}

 private:
  const uint8_t* data_;
  size_t size_;
  std::string path_ = "fuzz.bin";
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    auto tensors = wmap::parse_torch_pickle(std::as_bytes(std::span<const uint8_t>(data, size)), "fuzz.pkl");
    for (const auto& t : tensors) (void)wmap::torch_is_contiguous(t.shape, t.strides);
  } catch (const wmap::Error&) {
  }
  MemoryFile file(data, size);
  try {
    wmap::read_torch_checkpoint(file, "fuzz.bin");
  } catch (const wmap::Error&) {
  }
  return 0;
}
