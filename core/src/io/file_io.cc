#include "wmap/io/file_io.h"

#include <fcntl.h>
#include <limits.h>
#include <setjmp.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <limits>
#include <mutex>
#include <vector>

#include "wmap/util/error.h"
#include "logger.h"

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22
#endif

namespace wmap {
namespace {

uint64_t page_size() {
  static const uint64_t size = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  return size;
}

// Kernels before 5.14 answer MADV_POPULATE_READ with EINVAL; from then on we use WILLNEED.
std::atomic<bool> g_populate_unsupported{false};

// Where the batch that starts at segments[first] ends: following segments join it while the gap
// before them holds no whole page (reading through it brings no extra page into the page cache),
// they do not overlap, and the iovec count stays under IOV_MAX (gaps take an iovec each).
size_t batch_end(std::span<const ReadSegment> s, size_t first) {
  const uint64_t page = page_size();
  size_t i = first + 1;
  size_t iovs = 1;
  for (; i < s.size(); ++i) {
    const uint64_t end = s[i - 1].offset + s[i - 1].len;
    if (s[i].offset < end) break;
    const uint64_t last_page = (end - 1) / page, next_page = s[i].offset / page;
    if (next_page > last_page + 1) break;
    iovs += s[i].offset > end ? 2 : 1;
    if (iovs + 2 > IOV_MAX) break;
  }
  return i;
}

FileSignature signature_of(const struct stat& st) {
  FileSignature sig;
  sig.size = static_cast<uint64_t>(st.st_size);
  sig.mtime_ns = static_cast<int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec;
  sig.inode = static_cast<uint64_t>(st.st_ino);
  return sig;
}

// One open file. In kMmap and kAuto modes the whole file is mapped read-only on the first view()
// (reads are preads in every mode); in kPread mode view() returns nothing and every read goes through pread. Strided
// reads use a second descriptor marked POSIX_FADV_RANDOM so the kernel reads no pages around them.
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
    signature_ = signature_of(st);
  }
  ~PosixFile() override {
    if (std::byte* m = mapped(); m != nullptr) ::munmap(m, size_);
    if (random_fd_ >= 0) ::close(random_fd_);
    ::close(fd_);
  }

  const std::string& path() const override { return path_; }
  uint64_t size() const override { return size_; }
  FileSignature signature() const override { return signature_; }

  void read(uint64_t offset, std::span<std::byte> dst) const override {
    check_range("read", offset, dst.size());
    pread_all(fd_, offset, dst.data(), dst.size());
  }
  void read_random(uint64_t offset, std::span<std::byte> dst) const override {
    check_range("read", offset, dst.size());
    pread_all(random_fd(), offset, dst.data(), dst.size());
  }

  uint64_t read_segments(std::span<const ReadSegment> s) const override {
    if (s.empty()) return 0;
    for (const auto& seg : s) check_range("read", seg.offset, seg.len);
    // One batch is a plain sequential read (readahead helps); several are a strided pattern.
    const size_t first_end = batch_end(s, 0);
    const int fd = first_end == s.size() ? fd_ : random_fd();
    thread_local std::vector<std::byte> scratch;
    if (scratch.size() < 2 * page_size()) scratch.resize(2 * page_size());
    std::vector<iovec> iov;
    uint64_t bytes = 0;
    for (size_t b = 0, e = first_end; b < s.size(); b = e, e = b < s.size() ? batch_end(s, b) : b) {
      if (e == b + 1) {
        pread_all(fd, s[b].offset, s[b].dst, s[b].len);
        bytes += s[b].len;
        continue;
      }
      iov.clear();
      for (size_t i = b; i < e; ++i) {
        if (i > b) {
          const uint64_t gap = s[i].offset - (s[i - 1].offset + s[i - 1].len);
          if (gap > 0) iov.push_back({scratch.data(), gap});
        }
        iov.push_back({s[i].dst, s[i].len});
      }
      const uint64_t begin = s[b].offset, len = s[e - 1].offset + s[e - 1].len - begin;
      preadv_all(fd, begin, len, iov);
      bytes += len;
    }
    return bytes;
  }

  std::span<const std::byte> view(uint64_t offset, uint64_t len) const override {
    if (mode_ == IoMode::kPread || len == 0) return {};
    if (offset > size_ || len > size_ - offset) {
      throw Error(ErrorCode::kIo, path_ + ": view of " + std::to_string(len) + " bytes at offset " +
                                      std::to_string(offset) + " runs past the end of the file");
    }
    return {ensure_mapped() + offset, len};
  }

  void populate(uint64_t offset, uint64_t len) const override {
    if (mode_ == IoMode::kPread || len == 0) return will_need(offset, len);
    check_range("populate", offset, len);
    std::byte* const map = ensure_mapped();
    const uint64_t begin = offset / page_size() * page_size();
    const uint64_t end = std::min(size_, offset + len);
    if (!g_populate_unsupported.load(std::memory_order_relaxed)) {
      while (::madvise(map + begin, end - begin, MADV_POPULATE_READ) != 0) {
        const int err = errno;
        if (err == EINTR || err == EAGAIN) continue;
        if (err == EINVAL) {
          g_populate_unsupported = true;
          break;
        }
        // EFAULT: the pages are no longer backed by the file (it shrank); EIO/ENOMEM as they say.
        throw Error(ErrorCode::kIo, path_ + ": cannot map " + std::to_string(len) + " bytes at offset " +
                                        std::to_string(offset) + " (" + std::strerror(err) +
                                        "; was the file truncated during the load?)");
      }
      if (!g_populate_unsupported) return;
    }
    advise(offset, len, true);
  }

  void release(uint64_t offset, uint64_t len) const override {
    std::byte* const map = mapped();
    if (len == 0 || map == nullptr) return;
    // Only whole pages inside the range: a neighbour may still be copying out of the edges.
    const uint64_t begin = (offset + page_size() - 1) / page_size() * page_size();
    const uint64_t end = std::min(size_, offset + len) / page_size() * page_size();
    if (end > begin && ::madvise(map + begin, end - begin, MADV_DONTNEED) != 0) {
      log().debug("{}: madvise(DONTNEED) failed: {}", path_, std::strerror(errno));  // advisory only
    }
  }
  void will_need(uint64_t offset, uint64_t len) const override { advise(offset, len, true); }

 private:
  void check_range(const char* what, uint64_t offset, uint64_t len) const {
    if (offset > size_ || len > size_ - offset) {
      throw Error(ErrorCode::kIo, path_ + ": " + what + " of " + std::to_string(len) + " bytes at offset " +
                                      std::to_string(offset) + " runs past the end of the file (" +
                                      std::to_string(size_) + " bytes)");
    }
  }

  // The mapping is made once, by whichever reader needs it first; release() and advise() on other
  // workers may look at it meanwhile, so the pointer is published atomically (TSan saw the race).
  std::byte* ensure_mapped() const {
    std::call_once(map_once_, [this] {
      void* p = ::mmap(nullptr, size_, PROT_READ, MAP_SHARED, fd_, 0);
      if (p == MAP_FAILED) throw_errno(path_, "mmap", errno);
      map_.store(static_cast<std::byte*>(p), std::memory_order_release);
    });
    return mapped();
  }
  std::byte* mapped() const { return map_.load(std::memory_order_acquire); }

  int random_fd() const {
    std::call_once(random_once_, [this] {
      const int fd = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
      if (fd < 0) {
        random_fd_ = fd_;  // reads still work, only with readahead
        return;
      }
      if (::posix_fadvise(fd, 0, 0, POSIX_FADV_RANDOM) != 0) log().debug("{}: posix_fadvise(RANDOM) failed", path_);
      random_fd_ = fd;
    });
    return random_fd_;
  }

  void eof_error(uint64_t at) const {
    throw Error(ErrorCode::kIo, path_ + ": unexpected end of file at offset " + std::to_string(at) +
                                    " (file shrank below " + std::to_string(size_) + " bytes while reading?)");
  }

  void pread_all(int fd, uint64_t offset, std::byte* dst, uint64_t len) const {
    uint64_t done = 0;
    while (done < len) {
      const ssize_t n = ::pread(fd, dst + done, len - done, static_cast<off_t>(offset + done));
      if (n < 0) {
        if (errno == EINTR) continue;
        throw_errno(path_, "pread at offset " + std::to_string(offset + done), errno);
      }
      if (n == 0) eof_error(offset + done);
      done += static_cast<uint64_t>(n);
    }
  }

  // Reads `len` bytes at `offset` scattered over `iov`; a short read resumes where it stopped.
  void preadv_all(int fd, uint64_t offset, uint64_t len, std::vector<iovec>& iov) const {
    size_t first = 0;
    uint64_t done = 0;
    while (done < len) {
      const ssize_t n =
          ::preadv(fd, iov.data() + first, static_cast<int>(iov.size() - first), static_cast<off_t>(offset + done));
      if (n < 0) {
        if (errno == EINTR) continue;
        throw_errno(path_, "preadv at offset " + std::to_string(offset + done), errno);
      }
      if (n == 0) eof_error(offset + done);
      done += static_cast<uint64_t>(n);
      for (size_t left = static_cast<size_t>(n); left > 0;) {
        if (left >= iov[first].iov_len) {
          left -= iov[first].iov_len;
          ++first;
        } else {
          iov[first].iov_base = static_cast<std::byte*>(iov[first].iov_base) + left;
          iov[first].iov_len -= left;
          left = 0;
        }
      }
    }
  }

  void advise(uint64_t offset, uint64_t len, bool need) const {
    if (len == 0) return;
    if (std::byte* const map = mapped(); map != nullptr) {
      const uint64_t begin = offset / page_size() * page_size();
      const uint64_t end = std::min(size_, offset + len);
      if (end > begin && ::madvise(map + begin, end - begin, need ? MADV_WILLNEED : MADV_DONTNEED) != 0) {
        log().debug("{}: madvise failed: {}", path_, std::strerror(errno));  // advisory only
      }
      return;
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
  FileSignature signature_;
  mutable std::once_flag map_once_, random_once_;
  mutable std::atomic<std::byte*> map_{nullptr};
  mutable int random_fd_ = -1;
};

class PosixFileSystem final : public FileSystem {
 public:
  std::unique_ptr<RandomAccessFile> open(const std::filesystem::path& path, IoMode mode) const override {
    return std::make_unique<PosixFile>(path.string(), mode);
  }
};

// --- SIGBUS guard ----------------------------------------------------------------------------

thread_local sigjmp_buf* t_guard = nullptr;
thread_local const void* t_fault = nullptr;
struct sigaction g_previous_sigbus;

void on_sigbus(int sig, siginfo_t* info, void* context) {
  if (t_guard != nullptr) {
    t_fault = info->si_addr;
    siglongjmp(*t_guard, 1);
  }
  // Not a guarded copy: hand it to whoever had it, else the default action (the faulting
  // instruction runs again and the process dies as it would have without us).
  if ((g_previous_sigbus.sa_flags & SA_SIGINFO) != 0 && g_previous_sigbus.sa_sigaction != nullptr) {
    g_previous_sigbus.sa_sigaction(sig, info, context);
  } else if (g_previous_sigbus.sa_handler != SIG_DFL && g_previous_sigbus.sa_handler != SIG_IGN) {
    g_previous_sigbus.sa_handler(sig);
  } else {
    ::signal(SIGBUS, SIG_DFL);
  }
}

void install_sigbus_handler() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction sa;
    std::memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_sigbus;
    sa.sa_flags = SA_SIGINFO | SA_NODEFER;
    sigemptyset(&sa.sa_mask);
    if (::sigaction(SIGBUS, &sa, &g_previous_sigbus) != 0)
      log().warn("cannot install the SIGBUS guard: {}", std::strerror(errno));
  });
}

uint64_t read_number_file(const std::string& path) {
  std::ifstream in(path);
  std::string s;
  if (!(in >> s) || s == "max") return 0;
  try {
    return std::stoull(s);
  } catch (...) {
    return 0;
  }
}

}  // namespace

std::string FileSystem::read_whole_file(const std::filesystem::path& path, uint64_t max_bytes, size_t padding) const {
  const auto file = open(path, IoMode::kPread);
  const uint64_t size = file->size();
  if (size > max_bytes) {
    throw Error(ErrorCode::kMalformedInput, path.string() + ": " + std::to_string(size) + " bytes, over the limit of " +
                                                std::to_string(max_bytes) + " bytes for a file read whole");
  }
  if (size > std::numeric_limits<size_t>::max() - padding) {
    throw Error(ErrorCode::kIo, path.string() + ": " + std::to_string(size) + " bytes do not fit in memory");
  }
  std::string text(static_cast<size_t>(size) + padding, '\0');
  file->read(0, std::as_writable_bytes(std::span(text.data(), static_cast<size_t>(size))));
  return text;
}

std::string_view io_mode_name(IoMode mode) {
  switch (mode) {
    case IoMode::kMmap: return "mmap";
    case IoMode::kPread: return "pread";
    case IoMode::kAuto: return "auto";
  }
  return "?";
}

uint64_t RandomAccessFile::read_segments(std::span<const ReadSegment> segments) const {
  uint64_t bytes = 0;
  for (const auto& s : segments) {
    read(s.offset, std::span(s.dst, s.len));
    bytes += s.len;
  }
  return bytes;
}

const FileSystem& FileSystem::posix() {
  static const PosixFileSystem fs;
  return fs;
}

PathStatus FileSystem::status(const std::filesystem::path& path) const {
  std::error_code ec;
  const auto st = std::filesystem::status(path, ec);
  if (ec || !std::filesystem::exists(st)) return {};
  if (std::filesystem::is_regular_file(st)) return {PathStatus::Kind::kFile};
  if (std::filesystem::is_directory(st)) return {PathStatus::Kind::kDirectory};
  throw Error(ErrorCode::kInvalidArgument, path.string() + ": not a file or directory");
}

std::optional<std::vector<std::string>> FileSystem::list(const std::filesystem::path& dir) const {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    std::error_code fec;
    if (entry.is_regular_file(fec)) names.push_back(entry.path().filename().string());
  }
  if (ec) throw Error(ErrorCode::kIo, dir.string() + ": cannot list directory: " + ec.message());
  std::sort(names.begin(), names.end());
  return names;
}

FileSignature FileSystem::signature(const std::filesystem::path& path) const { return stat_signature(path); }

unsigned FileSystem::concurrency(const std::filesystem::path&) const { return 0; }

std::optional<PublishedDigest> FileSystem::published_sha256(const std::filesystem::path&) const { return std::nullopt; }

FileSignature stat_signature(const std::filesystem::path& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) throw_errno(path.string(), "stat", errno);
  return signature_of(st);
}

FileSignature RandomAccessFile::signature() const { return stat_signature(path()); }

std::string signature_change(const FileSignature& then, const FileSignature& now) {
  std::string msg;
  auto add = [&](const char* what, const std::string& a, const std::string& b) {
    if (a != b) msg += (msg.empty() ? "" : "; ") + std::string(what) + " " + a + " -> " + b;
  };
  add("size", std::to_string(then.size), std::to_string(now.size));
  add("mtime_ns", std::to_string(then.mtime_ns), std::to_string(now.mtime_ns));
  add("inode", std::to_string(then.inode), std::to_string(now.inode));
  add("ETag", then.etag.empty() ? "none" : then.etag, now.etag.empty() ? "none" : now.etag);
  return msg;
}

const void* guard_sigbus(void (*fn)(void*), void* ctx) {
  install_sigbus_handler();
  sigjmp_buf buf;
  sigjmp_buf* volatile outer = t_guard;
  if (sigsetjmp(buf, 1) != 0) {
    t_guard = outer;
    return t_fault != nullptr ? t_fault : reinterpret_cast<const void*>(uintptr_t{1});
  }
  t_guard = &buf;
  fn(ctx);
  t_guard = outer;
  return nullptr;
}

uint64_t available_memory_bytes() {
  uint64_t avail = 0;
  {
    std::ifstream in("/proc/meminfo");
    std::string key;
    uint64_t kb;
    std::string unit;
    while (in >> key >> kb) {
      std::getline(in, unit);
      if (key == "MemAvailable:") {
        avail = kb * 1024;
        break;
      }
    }
  }
  // The cgroup this process lives in (v2 unified, then v1 memory controller).
  std::string v2_path, v1_path;
  {
    std::ifstream in("/proc/self/cgroup");
    std::string line;
    while (std::getline(in, line)) {
      if (line.rfind("0::", 0) == 0) v2_path = line.substr(3);
      const auto a = line.find(":memory:");
      if (a != std::string::npos) v1_path = line.substr(a + 8);
    }
  }
  auto limit_left = [](uint64_t limit, uint64_t usage) -> uint64_t {
    if (limit == 0 || limit >= (uint64_t{1} << 60)) return 0;  // "max" or the v1 "unlimited" value
    return limit > usage ? limit - usage : 1;
  };
  uint64_t cg = 0;
  for (const std::string& dir : {"/sys/fs/cgroup" + v2_path, std::string("/sys/fs/cgroup")}) {
    if ((cg = limit_left(read_number_file(dir + "/memory.max"), read_number_file(dir + "/memory.current")))) break;
  }
  if (cg == 0) {
    for (const std::string& dir : {"/sys/fs/cgroup/memory" + v1_path, std::string("/sys/fs/cgroup/memory")}) {
      if ((cg = limit_left(read_number_file(dir + "/memory.limit_in_bytes"),
                           read_number_file(dir + "/memory.usage_in_bytes")))) {
        break;
      }
    }
  }
  if (cg != 0 && (avail == 0 || cg < avail)) avail = cg;
  return avail;
}

}  // namespace wmap
