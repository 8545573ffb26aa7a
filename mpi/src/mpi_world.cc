#include "wmap/mpi/mpi_world.h"

#include <cstdio>

#include "wmap/util/error.h"

namespace wmap::mpi {

namespace {
bool g_unagreed = false;  // set by ~MpiWorld on the main thread, read by abort_if_unagreed
}  // namespace

void abort_if_unagreed(int exit_code) {
  if (!g_unagreed) return;
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  std::fprintf(stderr, "wmap[rank %d/%d]: the error above was not agreed with the other ranks: aborting the MPI job\n",
               rank, size);
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, exit_code);
}

MpiWorld::MpiWorld() {
  MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &thread_level_);
  // Failures of MPI calls come back as codes and end in agree()/abort, not in MPI's default abort
  // with no context.
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &size_);
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &node_);
  MPI_Comm_rank(node_, &node_rank_);
  MPI_Comm_size(node_, &node_size_);
  int leader = rank_;  // the node's first world rank names the node
  MPI_Bcast(&leader, 1, MPI_INT, 0, node_);
  node_of_.assign(static_cast<size_t>(size_), 0);
  MPI_Allgather(&leader, 1, MPI_INT, node_of_.data(), 1, MPI_INT, MPI_COMM_WORLD);
  uncaught_at_start_ = std::uncaught_exceptions();
}

MpiWorld::~MpiWorld() {
  if (std::uncaught_exceptions() > uncaught_at_start_ && !agreed_failure_) {
    // An error escaped without an agreement: the other ranks may be waiting in a collective, so
    // MPI_Finalize could hang. Keep MPI up until the error is printed (abort_if_unagreed).
    g_unagreed = true;
    return;
  }
  if (node_ != MPI_COMM_NULL) MPI_Comm_free(&node_);
  MPI_Finalize();
}

std::string MpiWorld::thread_level_name() const {
  switch (thread_level_) {
    case MPI_THREAD_SINGLE: return "MPI_THREAD_SINGLE";
    case MPI_THREAD_FUNNELED: return "MPI_THREAD_FUNNELED";
    case MPI_THREAD_SERIALIZED: return "MPI_THREAD_SERIALIZED";
    case MPI_THREAD_MULTIPLE: return "MPI_THREAD_MULTIPLE";
  }
  return "thread level " + std::to_string(thread_level_);
}

std::string MpiWorld::tag() const { return "wmap[rank " + std::to_string(rank_) + "/" + std::to_string(size_) + "]"; }

std::vector<uint64_t> MpiWorld::allgather(uint64_t mine, MPI_Comm comm) const {
  int n = 0;
  MPI_Comm_size(comm, &n);
  std::vector<uint64_t> all(static_cast<size_t>(n));
  if (MPI_Allgather(&mine, 1, MPI_UINT64_T, all.data(), 1, MPI_UINT64_T, comm) != MPI_SUCCESS) {
    throw Error(ErrorCode::kIo, tag() + ": MPI_Allgather failed");
  }
  return all;
}

std::vector<std::string> MpiWorld::allgather(const std::string& mine, MPI_Comm comm) const {
  const std::vector<uint64_t> sizes = allgather(static_cast<uint64_t>(mine.size()), comm);
  std::vector<int> counts(sizes.size()), displs(sizes.size());
  uint64_t total = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (total + sizes[i] > static_cast<uint64_t>(INT32_MAX))
      throw Error(ErrorCode::kUnsupported, tag() + ": over 2 GiB to allgather");
    counts[i] = static_cast<int>(sizes[i]);
    displs[i] = static_cast<int>(total);
    total += sizes[i];
  }
  std::string joined(total, '\0');
  if (MPI_Allgatherv(mine.data(), static_cast<int>(mine.size()), MPI_CHAR, joined.data(), counts.data(), displs.data(),
                     MPI_CHAR, comm) != MPI_SUCCESS) {
    throw Error(ErrorCode::kIo, tag() + ": MPI_Allgatherv failed");
  }
  std::vector<std::string> all(sizes.size());
  for (size_t i = 0; i < sizes.size(); ++i) all[i] = joined.substr(static_cast<size_t>(displs[i]), sizes[i]);
  return all;
}

void MpiWorld::agree(std::string_view phase, std::exception_ptr error) {
  // Each rank's verdict: "" (ok) or "<exit code> <message>".
  std::string mine;
  if (error) {
    try {
      std::rethrow_exception(error);
    } catch (const Error& e) {
      mine = std::to_string(exit_code_for(e.code())) + " " + e.what();
    } catch (const AgreedFailure& e) {
      mine = std::to_string(e.exit_code) + " (reported above)";
    } catch (const std::bad_alloc&) {
      mine = "1 out of memory";
    } catch (const std::exception& e) {
      mine = std::string("1 ") + e.what();
    } catch (...) {
      mine = "1 unknown error";  // never agreed as success
    }
  }
  const std::vector<std::string> all = allgather(mine, MPI_COMM_WORLD);
  int first = -1, failed = 0;
  bool alike = true;
  for (int r = 0; r < size_; ++r) {
    if (all[r].empty()) continue;
    ++failed;
    if (first < 0) first = r;
    alike = alike && all[r] == all[first];
  }
  if (first < 0) return;
  auto code_of = [](const std::string& v) { return std::atoi(v.c_str()); };
  auto text_of = [](const std::string& v) { return v.substr(v.find(' ') + 1); };
  agreed_failure_ = true;
  if (failed == size_ && alike) {
    if (rank_ == 0)
      std::fprintf(stderr, "wmap: error: %s (all %d ranks, %.*s)\n", text_of(all[0]).c_str(), size_,
                   static_cast<int>(phase.size()), phase.data());
    throw AgreedFailure{code_of(all[0])};
  }
  if (!mine.empty()) {
    std::fprintf(stderr, "%s: error during %.*s: %s\n", tag().c_str(), static_cast<int>(phase.size()), phase.data(),
                 text_of(mine).c_str());
    throw AgreedFailure{code_of(mine)};
  }
  const std::string others = failed > 1 ? " and " + std::to_string(failed - 1) + " other rank(s)" : "";
  std::fprintf(stderr, "%s: stopping: rank %d%s failed during %.*s: %s\n", tag().c_str(), first, others.c_str(),
               static_cast<int>(phase.size()), phase.data(), text_of(all[first]).c_str());
  throw AgreedFailure{1};
}

}  // namespace wmap::mpi
