// Fuzzes the safetensors header reader with the input as a whole file: the length prefix checks
// of read_safetensors_header (padded, in-place parse) and parse_safetensors_header on the same
// bytes (unpadded, copying parse). Any exception other than wmap::Error is a bug.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "wmap/error.h"
#include "wmap/file_io.h"
#include "wmap/safetensors_header.h"

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
  std::string path_ = "fuzz.safetensors";
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  MemoryFile file(data, size);
  try {
    wmap::read_safetensors_header(file);
  } catch (const wmap::Error&) {
  }
  if (size < 8) return 0;
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | data[i];
  if (n > size - 8) return 0;
  try {
    wmap::parse_safetensors_header(std::string_view(reinterpret_cast<const char*>(data) + 8, n), size, "fuzz");
  } catch (const wmap::Error&) {
  }
  return 0;
}
