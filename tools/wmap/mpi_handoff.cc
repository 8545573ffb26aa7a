#include "mpi_handoff.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "wmap/mpi/launch_env.h"

namespace wmap::cli {

void hand_over_to_mpi_build(char** argv) {
#ifdef WMAP_MPI_BUILD_RELPATH
  if (built_with_mpi() || !mpi::launched_under_mpi()) return;
  std::error_code ec;
  const auto self = std::filesystem::canonical("/proc/self/exe", ec);
  if (ec) return;
  // Relative to this binary: the build tree mirrors the install layout (bin/, libexec/wmap/).
  const auto mpi_build = (self.parent_path() / WMAP_MPI_BUILD_RELPATH).lexically_normal();
  ::execv(mpi_build.c_str(), argv);
  if (errno != ENOENT)
    std::fprintf(stderr, "wmap: warning: cannot run the MPI build %s: %s\n", mpi_build.c_str(), std::strerror(errno));
#else
  (void)argv;
#endif
}

}  // namespace wmap::cli
