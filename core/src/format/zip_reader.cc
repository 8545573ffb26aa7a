// A bounded zip central-directory reader (the container of torch.save checkpoints).
#include <algorithm>
#include <cstring>

#include "wmap/util/error.h"
#include "wmap/format/torch_checkpoint.h"

namespace wmap {
namespace {

constexpr uint32_t kEocdSig = 0x06054b50;
constexpr uint32_t kZip64LocatorSig = 0x07064b50;
constexpr uint32_t kZip64EocdSig = 0x06064b50;
constexpr uint32_t kCentralSig = 0x02014b50;
constexpr uint32_t kLocalSig = 0x04034b50;
constexpr uint64_t kEocdSize = 22;
constexpr uint64_t kMaxComment = 0xFFFF;
constexpr uint64_t kMaxCentralDirectory = 1ull << 30;  // 1 GiB of directory is not a checkpoint

uint16_t le16(const unsigned char* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }
uint32_t le32(const unsigned char* p) {
  return static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8) | (static_cast<uint32_t>(p[2]) << 16) |
         (static_cast<uint32_t>(p[3]) << 24);
}
uint64_t le64(const unsigned char* p) { return le32(p) | (static_cast<uint64_t>(le32(p + 4)) << 32); }

std::string read_bytes(const RandomAccessFile& file, uint64_t offset, uint64_t len) {
  std::string out(len, '\0');
  if (len) file.read(offset, std::as_writable_bytes(std::span<char>(out.data(), out.size())));
  return out;
}

[[noreturn]] void bad(const std::string& label, const std::string& msg) {
  throw Error(ErrorCode::kMalformedInput, label + ": " + msg);
}

}  // namespace

ZipArchive ZipArchive::read(const RandomAccessFile& file, const std::string& label) {
  ZipArchive zip;
  zip.label_ = label;
  const uint64_t size = file.size();
  if (size < kEocdSize) bad(label, "not a zip archive (" + std::to_string(size) + " bytes; truncated?)");
  const uint64_t tail_len = std::min<uint64_t>(size, kEocdSize + kMaxComment);
  const uint64_t tail_start = size - tail_len;
  const std::string tail = read_bytes(file, tail_start, tail_len);
  const auto* t = reinterpret_cast<const unsigned char*>(tail.data());
  // The last end-of-central-directory signature whose comment runs exactly to the end.
  int64_t eocd = -1;
  for (int64_t i = static_cast<int64_t>(tail_len - kEocdSize); i >= 0; --i) {
    if (le32(t + i) == kEocdSig && static_cast<uint64_t>(i) + kEocdSize + le16(t + i + 20) == tail_len) {
      eocd = i;
      break;
    }
  }
  if (eocd < 0) bad(label, "not a zip archive or truncated (no end-of-central-directory record)");
  const unsigned char* e = t + eocd;
  uint64_t entries = le16(e + 10);
  uint64_t cd_size = le32(e + 12);
  uint64_t cd_offset = le32(e + 16);
  if (le16(e + 4) != 0 || le16(e + 6) != 0) bad(label, "multi-disk zip archives are not supported");
  const uint64_t eocd_abs = tail_start + static_cast<uint64_t>(eocd);
  if (entries == 0xFFFF || cd_size == 0xFFFFFFFF || cd_offset == 0xFFFFFFFF) {
    if (eocd_abs < 20) bad(label, "ZIP64 end-of-central-directory locator missing (truncated?)");
    const std::string loc = read_bytes(file, eocd_abs - 20, 20);
    const auto* l = reinterpret_cast<const unsigned char*>(loc.data());
    if (le32(l) != kZip64LocatorSig) bad(label, "ZIP64 end-of-central-directory locator missing");
    const uint64_t z64 = le64(l + 8);
    if (z64 > eocd_abs - 20 || eocd_abs - 20 - z64 < 56)
      bad(label, "ZIP64 end-of-central-directory offset out of range");
    const std::string rec = read_bytes(file, z64, 56);
    const auto* r = reinterpret_cast<const unsigned char*>(rec.data());
    if (le32(r) != kZip64EocdSig) bad(label, "bad ZIP64 end-of-central-directory signature");
    entries = le64(r + 32);
    cd_size = le64(r + 40);
    cd_offset = le64(r + 48);
  }
  if (cd_offset > eocd_abs || cd_size > eocd_abs - cd_offset) {
    bad(label, "central directory (offset " + std::to_string(cd_offset) + ", " + std::to_string(cd_size) +
                   " bytes) runs past the end of the archive (truncated?)");
  }
  if (cd_size > kMaxCentralDirectory)
    bad(label, "central directory of " + std::to_string(cd_size) + " bytes is too large");
  if (entries > cd_size / 46)
    bad(label,
        "central directory claims " + std::to_string(entries) + " entries in " + std::to_string(cd_size) + " bytes");
  const std::string cd = read_bytes(file, cd_offset, cd_size);
  const auto* c = reinterpret_cast<const unsigned char*>(cd.data());
  uint64_t pos = 0;
  zip.entries_.reserve(entries);
  for (uint64_t i = 0; i < entries; ++i) {
    if (cd_size - pos < 46 || le32(c + pos) != kCentralSig)
      bad(label, "central directory entry " + std::to_string(i) + " is malformed");
    const unsigned char* h = c + pos;
    ZipEntry entry;
    entry.flags = le16(h + 8);
    entry.method = le16(h + 10);
    entry.compressed_size = le32(h + 20);
    entry.uncompressed_size = le32(h + 24);
    const uint64_t name_len = le16(h + 28), extra_len = le16(h + 30), comment_len = le16(h + 32);
    entry.local_header_offset = le32(h + 42);
    if (cd_size - pos - 46 < name_len + extra_len + comment_len)
      bad(label, "central directory entry " + std::to_string(i) + " runs past the directory");
    entry.name.assign(reinterpret_cast<const char*>(h + 46), name_len);
    // ZIP64 extended information: only the fields saturated in the fixed record, in order.
    const unsigned char* x = h + 46 + name_len;
    for (uint64_t xp = 0; xp + 4 <= extra_len;) {
      const uint16_t id = le16(x + xp), len = le16(x + xp + 2);
      if (xp + 4 + len > extra_len) bad(label, "entry '" + entry.name + "': extra field runs past its record");
      if (id == 0x0001) {
        const unsigned char* f = x + xp + 4;
        uint64_t left = len;
        auto take = [&](uint64_t& field) {
          if (field != 0xFFFFFFFF) return;
          if (left < 8) bad(label, "entry '" + entry.name + "': ZIP64 extra field too short");
          field = le64(f);
          f += 8;
          left -= 8;
        };
        take(entry.uncompressed_size);
        take(entry.compressed_size);
        take(entry.local_header_offset);
      }
      xp += 4 + len;
    }
    pos += 46 + name_len + extra_len + comment_len;
    zip.entries_.push_back(std::move(entry));
  }
  return zip;
}

const ZipEntry* ZipArchive::find(std::string_view name) const {
  for (const auto& e : entries_) {
    if (e.name == name) return &e;
  }
  return nullptr;
}

uint64_t ZipArchive::data_offset(const RandomAccessFile& file, const ZipEntry& entry) const {
  if (entry.flags & 1)
    throw Error(ErrorCode::kMalformedInput, label_ + ": zip entry '" + entry.name + "' is encrypted");
  if (entry.method != 0) {
    throw Error(ErrorCode::kMalformedInput, label_ + ": zip entry '" + entry.name + "' is compressed (method " +
                                                std::to_string(entry.method) +
                                                "); only stored entries can be loaded "
                                                "(torch.save writes them uncompressed)");
  }
  if (entry.compressed_size != entry.uncompressed_size) {
    bad(label_, "stored zip entry '" + entry.name + "' has compressed size " + std::to_string(entry.compressed_size) +
                    " != uncompressed size " + std::to_string(entry.uncompressed_size));
  }
  const uint64_t size = file.size();
  if (entry.local_header_offset > size || size - entry.local_header_offset < 30) {
    bad(label_, "zip entry '" + entry.name + "': local header at " + std::to_string(entry.local_header_offset) +
                    " is past the end of the file (truncated?)");
  }
  const std::string lh = read_bytes(file, entry.local_header_offset, 30);
  const auto* l = reinterpret_cast<const unsigned char*>(lh.data());
  if (le32(l) != kLocalSig) bad(label_, "zip entry '" + entry.name + "': bad local header signature");
  const uint64_t start = entry.local_header_offset + 30 + le16(l + 26) + le16(l + 28);
  if (start > size || size - start < entry.compressed_size) {
    bad(label_, "zip entry '" + entry.name + "': " + std::to_string(entry.compressed_size) + " bytes at offset " +
                    std::to_string(start) + " run past the end of the file (" + std::to_string(size) +
                    " bytes; truncated?)");
  }
  return start;
}

std::string ZipArchive::read_entry(const RandomAccessFile& file, const ZipEntry& entry, uint64_t max_bytes) const {
  const uint64_t start = data_offset(file, entry);
  if (entry.uncompressed_size > max_bytes) {
    bad(label_, "zip entry '" + entry.name + "' is " + std::to_string(entry.uncompressed_size) + " bytes (limit " +
                    std::to_string(max_bytes) + ")");
  }
  return read_bytes(file, start, entry.uncompressed_size);
}

}  // namespace wmap
