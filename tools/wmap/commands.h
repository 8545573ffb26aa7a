#pragma once
// The subcommands of the `wmap` CLI. Each registers its options on the app and returns the
// function that runs it (returning the process exit code).

#include <CLI/CLI.hpp>

#include <functional>
#include <optional>
#include <vector>

#include "wmap/catalog/shard_digests.h"
#include "wmap/catalog/shard_set.h"

namespace wmap::cli {

using Runner = std::function<int()>;

// Thrown once a failure has been printed (by every rank of an MPI job, see rank_context.h): the
// process exits with exit_code and prints nothing more.
struct ReportedFailure {
  int exit_code = 1;
};

// Called by main once it printed an error: under MPI, when the error escaped without the other
// ranks' agreement, ends the whole job (they may be waiting for this rank); else returns exit_code.
int after_error(int exit_code);

// Every shard of `set` hashed whole (verify_files) with a progress line on stderr: `wmap verify`
// and `inspect --digests`. jobs 0: the hardware threads.
std::vector<ShardCheck> hash_shards(const ShardSet& set, const std::vector<std::optional<ExpectedDigest>>& expected,
                                    unsigned jobs, const char* label);

Runner add_inspect(CLI::App& app);
Runner add_synth(CLI::App& app);
Runner add_plan(CLI::App& app);
Runner add_load(CLI::App& app);
Runner add_verify(CLI::App& app);

}  // namespace wmap::cli
