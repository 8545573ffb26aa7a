#pragma once
// The CLI comes as two binaries (issue 42, item 5): `wmap`, which links no MPI, and its MPI build
// (<libexec>/wmap/wmap-mpi, same sources plus the multi-rank code of rank_context.cc). Open MPI's
// libraries (libmpi, open-pal, open-rte, hwloc, libevent, pmix) cost every process start about
// 1.5 ms, which a local `wmap plan` or `inspect` should not pay; a process an MPI launcher started
// (mpi::launched_under_mpi) replaces itself with the MPI build, same arguments and environment,
// same PID (so the launcher still tracks it), before doing anything else.

namespace wmap::cli {

// Whether this binary has the multi-rank code (defined in rank_context.cc).
bool built_with_mpi();

// Under an MPI launcher, in the binary without MPI: exec()s the MPI build. Returns when there is
// nothing to do, or when the MPI build is absent (a WMAP_MPI=OFF build: RankContext then warns
// and loads as one process) or cannot be executed (a warning names it and why).
void hand_over_to_mpi_build(char** argv);

}  // namespace wmap::cli
