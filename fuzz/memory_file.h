#pragma once
// A RandomAccessFile over the fuzzer's input bytes, shared by the fuzz targets that exercise
// readers through the I/O interface. Reads past the end throw wmap::Error like a real file.

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>

#include "wmap/util/error.h"
#include "wmap/io/file_io.h"

namespace wmap::fuzz {

class MemoryFile final : public RandomAccessFile {
 public:
  MemoryFile(const uint8_t* data, size_t size, std::string path) : data_(data), size_(size), path_(std::move(path)) {}
  const std::string& path() const override { return path_; }
  uint64_t size() const override { return size_; }
  void read(uint64_t offset, std::span<std::byte> dst) const override {
    if (offset > size_ || dst.size() > size_ - offset) throw Error(ErrorCode::kIo, "read past end");
    if (!dst.empty()) std::memcpy(dst.data(), data_ + offset, dst.size());
  }
  std::span<const std::byte> view(uint64_t, uint64_t) const override { return {}; }
  void release(uint64_t, uint64_t) const override {}
  void will_need(uint64_t, uint64_t) const override {}

 private:
  const uint8_t* data_;
  size_t size_;
  std::string path_;
};

}  // namespace wmap::fuzz
