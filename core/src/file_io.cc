#include "wmap/file_io.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <mutex>

#include "wmap/error.h"
#include "wmap/log.h"

namespace wmap {
namespace {

uint64_t page_size() {
  static const uint64_t size = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  return size;
}

// One open file. In kMmap mode the whole file is mapped read-only on the first view(); in
// kPread mode view() returns nothing and every read goes through pread.
class PosixFile final : public RandomAccessFile {
 public:
  PosixFile(std::string path, IoMode mode) : path_(std::move(path)), mode_(mode) {
    fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd_ < 0) throw_errno(path_, "open", errno);
    struct stat st;
    if (::fstat(fd_, &st) != 0) {
      const int err = errno;
      ::close(fd_);
      throw_errno(path_, "fstat", err);
    }
    if (!S_ISREG(st.st_mode)) {
      ::close(fd_);
      throw Error(ErrorCode::kIo, path_ + ": not a regular file");
    }
    size_ = static_cast<uint64_t>(st.st_size);
  }
  ~PosixFile() override {
    if (map_ != nullptr) ::munmap(map_, size_);
    ::close(fd_);
  }

  const std::string& path() const override { return path_; }
  uint64_t size() const override { return size_; }

  void read(uint64_t offset, std::span<std::byte> dst) const override {
    if (offset > size_ || dst.size() > size_ - offset) {
      throw Error(ErrorCode::kIo, path_ + ": read of " + std::to_string(dst.size()) + " bytes at offset " +
                                      std::to_string(offset) + " runs past the end of the file (" +
                                      std::to_string(size_) + " bytes)");
    }
    size_t done = 0;
    while (done < dst.size()) {
      const ssize_t n = ::pread(fd_, dst.data() + done, dst.size() - done, static_cast<off_t>(offset + done));
      if (n < 0) {
        if (errno == EINTR) continue;
        throw_errno(path_, "pread at offset " + std::to_string(offset + done), errno);
      }
      if (n == 0) {
        throw Error(ErrorCode::kIo, path_ + ": unexpected end of file at offset " + std::to_string(offset + done) +
                                        " (file shrank below " + std::to_string(size_) + " bytes while reading?)");
      }
      done += static_cast<size_t>(n);
    }
  }

  std::span<const std::byte> view(uint64_t offset, uint64_t len) const override {
    if (mode_ != IoMode::kMmap || len == 0) return {};
    if (offset > size_ || len > size_ - offset) {
      throw Error(ErrorCode::kIo, path_ + ": view of " + std::to_string(len) + " bytes at offset " +
                                      std::to_string(offset) + " runs past the end of the file");
    }
    std::call_once(map_once_, [this] {
      void* p = ::mmap(nullptr, size_, PROT_READ, MAP_SHARED, fd_, 0);
      if (p == MAP_FAILED) throw_errno(path_, "mmap", errno);
      map_ = static_cast<std::byte*>(p);
    });
    return {map_ + offset, len};
  }

  void release(uint64_t offset, uint64_t len) const override { advise(offset, len, false); }
  void will_need(uint64_t offset, uint64_t len) const override { advise(offset, len, true); }

 private:
  void advise(uint64_t offset, uint64_t len, bool need) const {
    if (len == 0) return;
    if (map_ != nullptr) {
      const uint64_t begin = offset / page_size() * page_size();
      const uint64_t end = std::min(size_, offset + len);
      if (::madvise(map_ + begin, end - begin, need ? MADV_WILLNEED : MADV_DONTNEED) != 0) {
        log().debug("{}: madvise failed: {}", path_, std::strerror(errno));  // advisory only
      }
    }
    if (::posix_fadvise(fd_, static_cast<off_t>(offset), static_cast<off_t>(len),
                        need ? POSIX_FADV_WILLNEED : POSIX_FADV_DONTNEED) != 0) {
      log().debug("{}: posix_fadvise failed", path_);  // advisory only
    }
  }

  std::string path_;
  IoMode mode_;
  int fd_ = -1;
  uint64_t size_ = 0;
  mutable std::once_flag map_once_;
  mutable std::byte* map_ = nullptr;
};

class PosixFileSystem final : public FileSystem {
 public:
  std::unique_ptr<RandomAccessFile> open(const std::filesystem::path& path, IoMode mode) const override {
    return std::make_unique<PosixFile>(path.string(), mode);
  }
};

}  // namespace

const FileSystem& FileSystem::posix() {
  static const PosixFileSystem fs;
  return fs;
}

FileSignature stat_signature(const std::filesystem::path& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) throw_errno(path.string(), "stat", errno);
  FileSignature sig;
  sig.size = static_cast<uint64_t>(st.st_size);
  sig.mtime_ns = static_cast<int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec;
  sig.inode = static_cast<uint64_t>(st.st_ino);
  return sig;
}

}  // namespace wmap
