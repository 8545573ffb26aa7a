#pragma once
// Whether this process was started by an MPI launcher (mpirun, or srun/hydra with PMI/PMIx),
// judged from the environment the launcher sets, so MPI_Init is never called otherwise.
// Header-only and free of MPI, so a CLI built without MPI can still warn about such a launch.
// Also the host name a rank reports.

#include <unistd.h>

#include <cstdlib>
#include <string>

namespace wmap::mpi {

// The host this rank runs on (gethostname): how the ranks tell nodes apart in reports and in the
// I/O policy decision.
inline std::string host_name() {
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  return host;
}

inline bool launched_under_mpi() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_SIZE", "PMI_RANK"}) {
    if (std::getenv(v) != nullptr) return true;
  }
  return false;
}

}  // namespace wmap::mpi
