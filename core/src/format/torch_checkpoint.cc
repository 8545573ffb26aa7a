// Catalogues a torch.save zip checkpoint from its zip directory and data.pkl alone.
#include "wmap/format/torch_checkpoint.h"

#include <unordered_map>

#include "wmap/format/tensor_record.h"
#include "wmap/util/error.h"

namespace wmap {
namespace {

constexpr uint64_t kMaxPickleBytes = 1ull << 30;  // a data.pkl of a state dict is a few MB

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

bool mul_overflows(uint64_t a, uint64_t b, uint64_t& out) { return __builtin_mul_overflow(a, b, &out); }

}  // namespace

bool torch_is_contiguous(const std::vector<uint64_t>& shape, const std::vector<int64_t>& strides) {
  if (shape.size() != strides.size()) return false;
  for (uint64_t n : shape) {
    if (n == 0) return true;  // no element: any strides describe it
  }
  uint64_t expected = 1;
  for (size_t d = shape.size(); d-- > 0;) {
    if (shape[d] != 1 && (strides[d] < 0 || static_cast<uint64_t>(strides[d]) != expected)) return false;
    if (mul_overflows(expected, shape[d], expected)) return false;
  }
  return true;
}

bool is_torch_checkpoint_name(std::string_view name) {
  return ends_with(name, ".bin") || ends_with(name, ".pth") || ends_with(name, ".pt");
}

TorchCheckpoint read_torch_checkpoint(const RandomAccessFile& file, const std::string& label) {
  // The legacy (pre-1.6) format is a bare pickle stream starting with the magic number: refuse
  // it by name instead of calling it a broken zip.
  if (file.size() >= 2) {
    unsigned char head[2];
    file.read(0, std::as_writable_bytes(std::span<unsigned char>(head, 2)));
    if (head[0] == 0x80 && head[1] <= 5) {
      throw Error(ErrorCode::kUnsupported, label +
                                               ": legacy (pre-zip, torch < 1.6) serialization is not supported; "
                                               "re-save it with a current torch.save or convert it to safetensors");
    }
  }
  const ZipArchive zip = ZipArchive::read(file, label);
  // `<archive>/data.pkl` with a single-component archive name.
  const ZipEntry* pkl = nullptr;
  for (const auto& e : zip.entries()) {
    const auto slash = e.name.find('/');
    if (slash != std::string::npos && e.name.compare(slash, std::string::npos, "/data.pkl") == 0) {
      if (pkl)
        throw Error(ErrorCode::kMalformedInput,
                    label + ": two data.pkl entries ('" + pkl->name + "', '" + e.name + "')");
      pkl = &e;
    }
  }
  if (!pkl)
    throw Error(ErrorCode::kMalformedInput,
                label + ": zip archive holds no '<archive>/data.pkl' (not a torch.save checkpoint)");
  const std::string prefix = pkl->name.substr(0, pkl->name.size() - std::string_view("data.pkl").size());
  const std::string pickle = zip.read_entry(file, *pkl, kMaxPickleBytes);
  std::vector<TorchTensorRef> refs =
      parse_torch_pickle(std::as_bytes(std::span<const char>(pickle.data(), pickle.size())), label);

  std::unordered_map<std::string, const ZipEntry*> by_name;
  for (const auto& e : zip.entries()) by_name.emplace(e.name, &e);
  std::unordered_map<std::string, std::pair<uint64_t, uint64_t>> storages;  // key -> (data start, bytes)

  TorchCheckpoint out;
  out.pickle_bytes = pickle.size();
  out.tensors.reserve(refs.size());
  for (auto& ref : refs) {
    const std::string where = label + ": tensor '" + ref.name + "'";
    auto it = storages.find(ref.storage_key);
    if (it == storages.end()) {
      const std::string entry_name = prefix + "data/" + ref.storage_key;
      auto e = by_name.find(entry_name);
      if (e == by_name.end())
        throw Error(ErrorCode::kMalformedInput, where + ": its storage '" + entry_name + "' is not in the archive");
      const uint64_t start = zip.data_offset(file, *e->second);
      it = storages.emplace(ref.storage_key, std::make_pair(start, e->second->uncompressed_size)).first;
    }
    const auto [start, entry_bytes] = it->second;
    const uint64_t item = dtype_bits(ref.dtype) / 8;
    uint64_t numel = 1;
    for (uint64_t d : ref.shape) {
      if (mul_overflows(numel, d, numel)) throw Error(ErrorCode::kOverflow, where + ": shape overflows 64 bits");
    }
    if (ref.strides.size() != ref.shape.size()) {
      throw Error(ErrorCode::kMalformedInput, where + ": " + std::to_string(ref.shape.size()) + "-d shape with " +
                                                  std::to_string(ref.strides.size()) + " strides");
    }
    // The view's elements lie at storage_offset + sum(i[d] * stride[d]); the last one bounds it.
    const bool contiguous = torch_is_contiguous(ref.shape, ref.strides);
    uint64_t span_elems = numel;
    std::vector<uint64_t> strides;
    if (!contiguous && numel > 0) {
      for (size_t d = 0; d < ref.strides.size(); ++d) {
        if (ref.strides[d] < 0) {
          throw Error(ErrorCode::kMalformedInput,
                      where + ": negative stride " + std::to_string(ref.strides[d]) + " in dim " + std::to_string(d));
        }
        strides.push_back(static_cast<uint64_t>(ref.strides[d]));
      }
      const std::optional<uint64_t> extent = strided_extent(ref.shape, strides);
      if (!extent) throw Error(ErrorCode::kOverflow, where + ": strided extent overflows 64 bits");
      span_elems = *extent;
    }
    uint64_t nbytes = 0, span_bytes = 0, begin = 0, end_elem = 0;
    if (mul_overflows(numel, item, nbytes) || mul_overflows(span_elems, item, span_bytes) ||
        mul_overflows(ref.storage_offset, item, begin) ||
        __builtin_add_overflow(ref.storage_offset, span_elems, &end_elem)) {
      throw Error(ErrorCode::kOverflow, where + ": byte range overflows 64 bits");
    }
    if (numel > 0 && (end_elem > ref.storage_numel || begin + span_bytes > entry_bytes)) {
      throw Error(ErrorCode::kMalformedInput,
                  where + ": view of " + std::to_string(numel) + " elements" +
                      (contiguous ? "" : " (strided, spanning " + std::to_string(span_elems) + ")") +
                      " at element offset " + std::to_string(ref.storage_offset) + " runs past its storage '" +
                      ref.storage_key + "' (" + std::to_string(ref.storage_numel) + " elements declared, " +
                      std::to_string(entry_bytes) + " bytes stored)");
    }
    TorchCatalogTensor t;
    t.name = std::move(ref.name);
    t.dtype = ref.dtype;
    t.shape = std::move(ref.shape);
    t.offset = numel > 0 ? start + begin : start;
    t.nbytes = nbytes;
    t.strides = std::move(strides);  // empty when contiguous
    out.tensors.push_back(std::move(t));
  }
  return out;
}

}  // namespace wmap
