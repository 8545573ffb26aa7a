#include "wmap/util/sha256.h"

#include <openssl/evp.h>

#include <cctype>

#include "wmap/util/error.h"

namespace wmap {
namespace {

std::string to_hex(const unsigned char* digest, unsigned len) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(len * 2);
  for (unsigned i = 0; i < len; ++i) {
    out.push_back(kHex[digest[i] >> 4]);
    out.push_back(kHex[digest[i] & 15]);
  }
  return out;
}

}  // namespace

std::string sha256_hex(std::string_view data) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (EVP_Digest(data.data(), data.size(), digest, &len, EVP_sha256(), nullptr) != 1) {
    throw Error(ErrorCode::kInternal, "SHA-256 computation failed");
  }
  return to_hex(digest, len);
}

struct Sha256::Ctx {
  EVP_MD_CTX* md = EVP_MD_CTX_new();
  ~Ctx() { EVP_MD_CTX_free(md); }
};

Sha256::Sha256() : ctx_(std::make_unique<Ctx>()) {
  if (ctx_->md == nullptr || EVP_DigestInit_ex(ctx_->md, EVP_sha256(), nullptr) != 1) {
    throw Error(ErrorCode::kInternal, "SHA-256: OpenSSL could not start a digest");
  }
}
Sha256::~Sha256() = default;
Sha256::Sha256(Sha256&&) noexcept = default;
Sha256& Sha256::operator=(Sha256&&) noexcept = default;

void Sha256::update(std::span<const std::byte> bytes) {
  if (done_) throw Error(ErrorCode::kInternal, "SHA-256: update after the digest was taken");
  if (bytes.empty()) return;
  if (EVP_DigestUpdate(ctx_->md, bytes.data(), bytes.size()) != 1) {
    throw Error(ErrorCode::kInternal, "SHA-256 computation failed");
  }
  bytes_ += bytes.size();
}

std::string Sha256::hex() {
  if (done_) throw Error(ErrorCode::kInternal, "SHA-256: the digest was already taken");
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (EVP_DigestFinal_ex(ctx_->md, digest, &len) != 1) throw Error(ErrorCode::kInternal, "SHA-256 computation failed");
  done_ = true;
  return to_hex(digest, len);
}

bool looks_like_sha256(std::string_view text) {
  if (text.size() != 64) return false;
  for (char c : text) {
    if (!std::isxdigit(static_cast<unsigned char>(c))) return false;
  }
  return true;
}

}  // namespace wmap
