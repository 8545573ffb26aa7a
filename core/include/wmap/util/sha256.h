#pragma once
// SHA-256 digests as lowercase hex (OpenSSL's libcrypto, which uses the CPU's SHA extensions
// where present). Thread-safe: one Sha256 object per stream.

#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "wmap/util/export.h"

WMAP_PUBLIC_BEGIN
namespace wmap {

std::string sha256_hex(std::string_view data);

// An incremental SHA-256: update() in order, then hex() once.
class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(Sha256&&) noexcept;
  Sha256& operator=(Sha256&&) noexcept;
  void update(std::span<const std::byte> bytes);
  std::string hex();  // finishes the stream; update() after it throws
  uint64_t bytes() const { return bytes_; }

 private:
  struct Ctx;
  std::unique_ptr<Ctx> ctx_;
  uint64_t bytes_ = 0;
  bool done_ = false;
};

// True for 64 lowercase or uppercase hex digits (what a SHA-256 digest looks like).
bool looks_like_sha256(std::string_view text);

}  // namespace wmap
WMAP_PUBLIC_END
