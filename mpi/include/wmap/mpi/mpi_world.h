#pragma once
// One process's view of an MPI job: MPI is initialised by the constructor and finalised by the
// destructor, except when the process unwinds from an error the other ranks were never told
// about: MPI is then left running so the error can be printed, and abort_if_unagreed() must end
// the whole job (MPI_Abort) so no rank hangs in a collective. Only the thread that built it
// may call it (MPI_THREAD_FUNNELED). Everything that decides which collectives run next goes
// through agree(), so every rank takes the same branch.

#include <mpi.h>

#include <cstdint>
#include <exception>
#include <string>
#include <string_view>
#include <vector>

namespace wmap::mpi {

// Thrown by agree() once the failure has been printed on this rank: the caller exits with
// exit_code and prints nothing more.
struct AgreedFailure {
  int exit_code = 1;
};

// Ends the whole job with `exit_code` when an MpiWorld was left by an error that was not agreed
// (call it once that error is printed); returns otherwise.
void abort_if_unagreed(int exit_code);

class MpiWorld {
 public:
  MpiWorld();
  ~MpiWorld();
  MpiWorld(const MpiWorld&) = delete;
  MpiWorld& operator=(const MpiWorld&) = delete;

  int rank() const { return rank_; }
  // What MPI_Init_thread granted (MPI_THREAD_FUNNELED was asked for), and its name.
  int thread_level() const { return thread_level_; }
  std::string thread_level_name() const;
  int size() const { return size_; }
  MPI_Comm world() const { return MPI_COMM_WORLD; }
  // The ranks sharing this node's memory (and page cache).
  MPI_Comm node() const { return node_; }
  int node_rank() const { return node_rank_; }
  int node_size() const { return node_size_; }
  // This rank's node, named by the world rank of that node's first rank, and whether two world
  // ranks share a node.
  int node_id() const { return node_of_[static_cast<size_t>(rank_)]; }
  bool same_node(int a, int b) const { return node_of_[static_cast<size_t>(a)] == node_of_[static_cast<size_t>(b)]; }

  // Every rank's string, in rank order.
  std::vector<std::string> allgather(const std::string& mine, MPI_Comm comm) const;
  std::vector<uint64_t> allgather(uint64_t mine, MPI_Comm comm) const;

  // A phase boundary: each rank passes its error (null: it succeeded). When any rank failed,
  // every rank prints one line (the failing rank its own error; the others which rank failed
  // and why; one line on rank 0 only when every rank failed alike) and throws AgreedFailure.
  void agree(std::string_view phase, std::exception_ptr error);

  // "wmap[rank R/N]" for messages.
  std::string tag() const;

 private:
  int rank_ = 0, size_ = 1, node_rank_ = 0, node_size_ = 1, thread_level_ = MPI_THREAD_SINGLE;
  MPI_Comm node_ = MPI_COMM_NULL;
  std::vector<int> node_of_;  // every world rank's node id
  int uncaught_at_start_ = 0;
  bool agreed_failure_ = false;
};

}  // namespace wmap::mpi
