#pragma once
// The subcommands of the `wmap` CLI. Each registers its options on the app and returns the
// function that runs it (returning the process exit code).

#include <CLI/CLI.hpp>

#include <functional>

namespace wmap::cli {

using Runner = std::function<int()>;

Runner add_inspect(CLI::App& app);
Runner add_synth(CLI::App& app);
Runner add_plan(CLI::App& app);
Runner add_load(CLI::App& app);

}  // namespace wmap::cli
