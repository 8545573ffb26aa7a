// Load-time check that fused sources carry identical companion tensors (NVFP4 global scales, a
// GPTQ g_idx):
// the plan can name the pairs from headers, only the data can tell whether they agree.
#include <cmath>
#include <cstring>

#include "must_match.h"

#include "wmap/util/error.h"

namespace wmap {
namespace {

constexpr uint64_t kMaxCompared = 1 << 20;  // global scales are a few bytes; refuse anything huge

std::string describe(const std::vector<std::byte>& bytes, DType dtype) {
  if (dtype == DType::kF32 && bytes.size() == 4) {
    float f;
    std::memcpy(&f, bytes.data(), 4);
    return std::to_string(f);
  }
  static constexpr char kHex[] = "0123456789abcdef";
  std::string s = "0x";
  for (size_t i = 0; i < bytes.size() && i < 16; ++i) {
    s += kHex[static_cast<uint8_t>(bytes[i]) >> 4];
    s += kHex[static_cast<uint8_t>(bytes[i]) & 15];
  }
  return s + (bytes.size() > 16 ? "..." : "");
}

// A (small) tensor's bytes in row-major order, gathered when the record is a strided view.
std::vector<std::byte> read_tensor(const RandomAccessFile& file, const TensorRecord& r) {
  std::vector<std::byte> span(r.span_bytes());
  file.read(r.offset, span);
  if (!r.strided()) return span;
  std::vector<std::byte> out(r.nbytes);
  gather_tensor(r, span.data(), out.data());
  return out;
}

// torch.allclose(a, b) with its defaults, element by element: |a-b| <= 1e-8 + 1e-5*|b|; NaN is
// close to nothing. TensorRT-LLM asserts this of an expert's w3/w1 global scales before fusing.
bool close_f32(const std::vector<std::byte>& va, const std::vector<std::byte>& vb, DType dtype) {
  if (dtype != DType::kF32 || va.size() != vb.size() || va.size() % 4 != 0) return false;
  for (size_t i = 0; i < va.size(); i += 4) {
    float a, b;
    std::memcpy(&a, va.data() + i, 4);
    std::memcpy(&b, vb.data() + i, 4);
    if (!(std::fabs(double{a} - double{b}) <= 1e-8 + 1e-5 * std::fabs(double{b}))) return false;
  }
  return true;
}

}  // namespace

void verify_must_match(const PlannedParam& param,
                       const std::function<const RandomAccessFile&(uint32_t shard)>& file_for) {
  for (const auto& [a, b] : param.must_match) {
    if (a->nbytes > kMaxCompared || b->nbytes != a->nbytes) {
      throw Error(ErrorCode::kValidation, param.name + ": '" + a->name + "' and '" + b->name +
                                              "' cannot be compared (" + std::to_string(a->nbytes) + " vs " +
                                              std::to_string(b->nbytes) + " bytes)");
    }
    const std::vector<std::byte> va = read_tensor(file_for(a->shard), *a), vb = read_tensor(file_for(b->shard), *b);
    if (va != vb && !(param.must_match_close && close_f32(va, vb, a->dtype))) {
      throw Error(ErrorCode::kValidation,
                  param.name + ": the engine keeps one value for these fused sources, but they differ: '" + a->name +
                      "' = " + describe(va, a->dtype) + " but '" + b->name + "' = " + describe(vb, b->dtype) +
                      (param.must_match_close ? " (beyond |a-b| <= 1e-8 + 1e-5*|b|)" : ""));
    }
  }
}

}  // namespace wmap
