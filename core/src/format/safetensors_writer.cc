#include "wmap/format/safetensors_writer.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "wmap/util/error.h"
#include "wmap/util/json_text.h"

namespace wmap {

std::string make_safetensors_header(const std::vector<TensorToWrite>& tensors,
                                    const std::vector<std::pair<std::string, std::string>>& metadata) {
  std::string h = "{";
  bool first = true;
  if (!metadata.empty()) {
    h += "\"__metadata__\":{";
    for (size_t i = 0; i < metadata.size(); ++i) {
      if (i) h += ",";
      append_json_string(h, metadata[i].first);
      h += ":";
      append_json_string(h, metadata[i].second);
    }
    h += "}";
    first = false;
  }
  uint64_t offset = 0;
  for (const auto& t : tensors) {
    if (!first) h += ",";
    first = false;
    append_json_string(h, t.name);
    h += ":{\"dtype\":\"";
    h += dtype_name(t.dtype);
    h += "\",\"shape\":[";
    for (size_t i = 0; i < t.shape.size(); ++i) {
      if (i) h += ",";
      h += std::to_string(t.shape[i]);
    }
    h += "],\"data_offsets\":[" + std::to_string(offset) + "," + std::to_string(offset + t.nbytes) + "]}";
    offset += t.nbytes;
  }
  h += "}";
  // Pad with spaces so the data section starts 8-byte aligned.
  h.append((8 - h.size() % 8) % 8, ' ');
  return h;
}

namespace {
class OutFile {
 public:
  explicit OutFile(std::string path) : path_(std::move(path)) {
    fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd_ < 0) throw_errno(path_, "open for writing", errno);
    struct stat st;
    regular_ = ::fstat(fd_, &st) == 0 && S_ISREG(st.st_mode);
  }
  // A file not closed successfully is incomplete: remove it (a regular file only, never a device
  // such as /dev/full), so no partial file is left looking like a finished one.
  ~OutFile() {
    if (fd_ >= 0) ::close(fd_);
    if (!complete_ && regular_) ::unlink(path_.c_str());
  }
  void write(const void* data, size_t len) {
    const char* p = static_cast<const char*>(data);
    while (len > 0) {
      const ssize_t n = ::write(fd_, p, len);
      if (n < 0) {
        if (errno == EINTR) continue;
        throw_errno(path_, "write at offset " + std::to_string(written_), errno);
      }
      p += n;
      len -= static_cast<size_t>(n);
      written_ += static_cast<uint64_t>(n);
    }
  }
  void close() {
    const int fd = fd_;
    fd_ = -1;
    if (::close(fd) != 0) throw_errno(path_, "close", errno);
    complete_ = true;
  }
  uint64_t written() const { return written_; }

 private:
  std::string path_;
  int fd_ = -1;
  bool regular_ = false;
  bool complete_ = false;
  uint64_t written_ = 0;
};
}  // namespace

uint64_t write_safetensors(const std::filesystem::path& file, const std::vector<TensorToWrite>& tensors,
                           const std::vector<std::pair<std::string, std::string>>& metadata) {
  const std::string header = make_safetensors_header(tensors, metadata);
  OutFile out(file.string());
  uint8_t len[8];
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) len[i] = static_cast<uint8_t>(n >> (8 * i));
  out.write(len, 8);
  out.write(header.data(), header.size());
  // One reused buffer, grown to the largest tensor, filled in bounded chunks of the file.
  std::vector<std::byte> buf;
  for (const auto& t : tensors) {
    if (t.nbytes == 0) continue;
    if (buf.size() < t.nbytes) buf.resize(t.nbytes);
    std::span<std::byte> dst(buf.data(), t.nbytes);
    if (t.fill) {
      t.fill(dst);
    } else {
      std::fill(dst.begin(), dst.end(), std::byte{0});
    }
    out.write(dst.data(), dst.size());
  }
  out.close();
  return out.written();
}

}  // namespace wmap
