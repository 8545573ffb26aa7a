#pragma once
// Helpers shared by the format-core tests (tests/<stage>/*_test.cc): capturing a wmap::Error,
// building raw header entries, writing small safetensors files with known bytes.

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "test_util.h"
#include "wmap/util/error.h"
#include "wmap/io/file_io.h"
#include "wmap/format/safetensors_header.h"
#include "wmap/format/safetensors_writer.h"

namespace wmap::test {

// Runs `fn`, expecting it to throw wmap::Error; returns it (or nullopt after recording a failure).
inline std::optional<Error> capture_error(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "threw a non-wmap exception: " << e.what();
    return std::nullopt;
  }
  ADD_FAILURE() << "did not throw";
  return std::nullopt;
}

// Expects `fn` to throw `code` with a message containing every string of `needles`.
#define EXPECT_WMAP_ERROR(stmt, want_code, ...)                                                                       \
  do {                                                                                                                \
    auto wmap_err_ = ::wmap::test::capture_error([&] { stmt; });                                                      \
    if (wmap_err_) {                                                                                                  \
      EXPECT_EQ(::wmap::error_code_name(wmap_err_->code()), ::wmap::error_code_name(want_code)) << wmap_err_->what(); \
      for (const std::string& needle_ : std::vector<std::string>{__VA_ARGS__}) {                                      \
        EXPECT_NE(std::string(wmap_err_->what()).find(needle_), std::string::npos)                                    \
            << "message lacks \"" << needle_ << "\": " << wmap_err_->what();                                          \
      }                                                                                                               \
    }                                                                                                                 \
  } while (0)

inline SafetensorsHeader read_header_file(const std::filesystem::path& path) {
  auto file = FileSystem::posix().open(path, IoMode::kPread);
  return read_safetensors_header(*file);
}

// One tensor entry of a header: "name":{"dtype":..,"shape":[..],"data_offsets":[b,e]}.
inline std::string entry(const std::string& name, const std::string& dtype, const std::string& shape, uint64_t begin,
                         uint64_t end) {
  return "\"" + name + "\":{\"dtype\":\"" + dtype + "\",\"shape\":" + shape + ",\"data_offsets\":[" +
         std::to_string(begin) + "," + std::to_string(end) + "]}";
}

// A tensor with known contents for the writer.
struct KnownTensor {
  std::string name;
  DType dtype;
  std::vector<uint64_t> shape;
  std::string bytes;
};

inline uint64_t write_known(const std::filesystem::path& file, const std::vector<KnownTensor>& tensors,
                            const std::vector<std::pair<std::string, std::string>>& metadata = {}) {
  std::vector<TensorToWrite> out;
  for (const auto& t : tensors) {
    const std::string* data = &t.bytes;
    out.push_back({t.name, t.dtype, t.shape, t.bytes.size(),
                   [data](std::span<std::byte> dst) { std::memcpy(dst.data(), data->data(), dst.size()); }});
  }
  return write_safetensors(file, out, metadata);
}

// `n` deterministic bytes derived from `seed`.
inline std::string pattern_bytes(size_t n, unsigned seed) {
  std::string s(n, '\0');
  uint32_t x = seed * 2654435761u + 1;
  for (auto& c : s) {
    x = x * 1664525u + 1013904223u;
    c = static_cast<char>(x >> 24);
  }
  return s;
}

}  // namespace wmap::test
