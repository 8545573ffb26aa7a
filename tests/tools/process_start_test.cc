// What a wmap process loads (issue 42, item 5): the remote stack (libcurl and its ~30 TLS,
// Kerberos, LDAP and SSH libraries) only when a remote path is read, MPI only under an MPI
// launcher; no library is looked for in the current directory. Each cost local commands
// milliseconds of every start (`wmap plan` lost a third of its lead over Python's parse).
#include <gtest/gtest.h>

#include <string>

#include "test_util.h"

namespace wmap::test {
namespace {

// The dynamic loader's account of the run (LD_DEBUG=libs,files, on stderr).
CommandResult run_traced(const std::string& args, const std::string& cwd = "") {
  return run_command((cwd.empty() ? std::string() : "cd " + shell_quote(cwd) + " && ") + "LD_DEBUG=libs,files " +
                     shell_quote(WMAP_CLI_PATH) + " -q " + args);
}

TEST(ProcessStart, LocalCommandsLoadNeitherLibcurlNorMpi) {
  TempDir dir;
  const auto ckpt = synth_checkpoint(dir.path(), "llama", "ck");
  for (const std::string& args : {std::string("--version"), "plan " + shell_quote(ckpt.string()) + " --tp-size 2",
                                  "load " + shell_quote(ckpt.string()) + " --json"}) {
    const auto r = run_traced(args);
    ASSERT_EQ(r.exit_code, 0) << args << "\n" << r.err.substr(0, 2000);
    EXPECT_EQ(r.err.find("libcurl"), std::string::npos) << args;
    EXPECT_EQ(r.err.find("libmpi"), std::string::npos) << args;
    EXPECT_EQ(r.err.find("libssl"), std::string::npos) << args;
  }
}

TEST(ProcessStart, NoLibraryIsLookedForInTheCurrentDirectory) {
  // An empty RUNPATH entry (CMake pads build-tree RPATHs with them) is the current directory:
  // the loader then tries every dependency there first.
  TempDir dir;
  const auto r = run_traced("--version", dir.path().string());
  ASSERT_EQ(r.exit_code, 0) << r.err.substr(0, 2000);
  // A relative candidate ("trying file=libstdc++.so.6", "trying file=tls/...") is one looked for in $PWD.
  for (size_t at = r.err.find("trying file="); at != std::string::npos; at = r.err.find("trying file=", at + 1)) {
    const size_t name = at + std::string("trying file=").size();
    ASSERT_LT(name, r.err.size());
    EXPECT_EQ(r.err[name], '/') << r.err.substr(at, r.err.find('\n', at) - at);
  }
}

}  // namespace
}  // namespace wmap::test
