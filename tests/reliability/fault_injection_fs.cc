#include "reliability/fault_injection_fs.h"

#include <filesystem>

#include "wmap/util/error.h"

namespace wmap::test {

class FaultFile final : public RandomAccessFile {
 public:
  FaultFile(const FaultInjectionFs& fs, std::unique_ptr<RandomAccessFile> base) : fs_(fs), base_(std::move(base)) {
    ++fs_.open_files_;
  }
  ~FaultFile() override { --fs_.open_files_; }
  const std::string& path() const override { return base_->path(); }
  uint64_t size() const override { return base_->size(); }
  FileSignature signature() const override {
    ++fs_.signatures_;
    return base_->signature();
  }
  void read(uint64_t offset, std::span<std::byte> dst) const override {
    ++fs_.reads_;
    fs_.check(path(), offset, dst.size(), false);
    base_->read(offset, dst);
  }
  std::span<const std::byte> view(uint64_t offset, uint64_t len) const override {
    ++fs_.views_;
    fs_.check(path(), offset, len, true);
    return base_->view(offset, len);
  }
  void release(uint64_t offset, uint64_t len) const override { base_->release(offset, len); }
  void will_need(uint64_t offset, uint64_t len) const override { base_->will_need(offset, len); }
  // Bringing a mapped range in is a read of it: faults apply; the base file's own checks too
  // (a shrunk file). read_segments() keeps its default, so every segment goes through read().
  void populate(uint64_t offset, uint64_t len) const override {
    ++fs_.views_;
    fs_.check(path(), offset, len, true);
    base_->populate(offset, len);
  }

 private:
  const FaultInjectionFs& fs_;
  std::unique_ptr<RandomAccessFile> base_;
};

void FaultInjectionFs::fail_one_in(uint32_t n, uint64_t seed, int err) {
  std::lock_guard lock(mu_);
  one_in_ = n;
  one_in_err_ = err;
  rng_.seed(seed);
}

void FaultInjectionFs::fail_at(std::string file, uint64_t offset, int err) {
  std::lock_guard lock(mu_);
  faults_list_.push_back({Fault::kError, std::move(file), offset, err});
}

void FaultInjectionFs::short_read_at(std::string file, uint64_t offset) {
  std::lock_guard lock(mu_);
  faults_list_.push_back({Fault::kShortRead, std::move(file), offset, 0});
}

void FaultInjectionFs::fail_open(std::string file, int err) {
  std::lock_guard lock(mu_);
  faults_list_.push_back({Fault::kOpen, std::move(file), 0, err});
}

void FaultInjectionFs::truncate_after_open(std::string file, uint64_t size) {
  std::lock_guard lock(mu_);
  faults_list_.push_back({Fault::kTruncate, std::move(file), size, 0});
}

void FaultInjectionFs::replace_after_open(std::string file) {
  std::lock_guard lock(mu_);
  faults_list_.push_back({Fault::kReplace, std::move(file), 0, 0});
}

void FaultInjectionFs::clear() {
  std::lock_guard lock(mu_);
  faults_list_.clear();
  one_in_ = 0;
}

std::string FaultInjectionFs::read_whole_file(const std::filesystem::path& path, uint64_t max_bytes,
                                              size_t padding) const {
  ++whole_reads_;
  return FileSystem::read_whole_file(path, max_bytes, padding);
}

std::unique_ptr<RandomAccessFile> FaultInjectionFs::open(const std::filesystem::path& path, IoMode mode) const {
  ++opens_;
  const std::string p = path.string();
  std::optional<uint64_t> truncate_to;
  bool replace = false;
  {
    std::lock_guard lock(mu_);
    for (const auto& f : faults_list_) {
      if (p.find(f.file) == std::string::npos) continue;
      if (f.kind == Fault::kOpen) {
        ++faults_;
        throw_errno(p, "open", f.err);
      }
      if (f.kind == Fault::kTruncate) truncate_to = f.offset;
      if (f.kind == Fault::kReplace) replace = true;
    }
  }
  auto file = std::make_unique<FaultFile>(*this, base_.open(path, mode));
  if (truncate_to) {
    ++faults_;
    std::filesystem::resize_file(path, *truncate_to);
  }
  if (replace) {
    ++faults_;
    const std::filesystem::path tmp = path.string() + ".replacing";
    std::filesystem::copy_file(path, tmp, std::filesystem::copy_options::overwrite_existing);
    std::filesystem::resize_file(tmp, std::filesystem::file_size(tmp) + 1);
    std::filesystem::rename(tmp, path);
  }
  return file;
}

void FaultInjectionFs::check(const std::string& path, uint64_t offset, uint64_t len, bool view) const {
  std::lock_guard lock(mu_);
  const char* what = view ? "read of mapped range at offset " : "pread at offset ";
  for (const auto& f : faults_list_) {
    if (path.find(f.file) == std::string::npos) continue;
    const bool covers = f.offset >= offset && f.offset - offset < len;
    if (f.kind == Fault::kError && covers) {
      ++faults_;
      throw_errno(path, what + std::to_string(f.offset), f.err);
    }
    if (f.kind == Fault::kShortRead && (covers || (len > 0 && offset >= f.offset))) {
      ++faults_;
      const uint64_t at = std::max(offset, f.offset);
      throw Error(ErrorCode::kIo, path + ": unexpected end of file at offset " + std::to_string(at) + " (short read: " +
                                      std::to_string(at - offset) + " of " + std::to_string(len) + " bytes)");
    }
  }
  if (one_in_ > 0 && rng_() % one_in_ == 0) {
    ++faults_;
    throw_errno(path, what + std::to_string(offset), one_in_err_);
  }
}

}  // namespace wmap::test
