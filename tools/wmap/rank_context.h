#pragma once
// How one `wmap load` process relates to its peers: alone (no MPI launcher: exactly the
// single-process load, rank from --tp-rank) or one rank of an MPI job (rank from MPI, --tp-size
// checked against the world size, every phase agreed so no rank hangs or succeeds alone, and the
// --io-policy step run before the load). Owns MPI for the command's lifetime. Not thread-safe:
// use it on the command's thread.

#include <nlohmann/json.hpp>

#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "wmap/device/device.h"
#include "wmap/exec/executor.h"
#include "wmap/spec/layout.h"
#include "wmap/loader/loader.h"

namespace wmap::cli {

class RankContext {
 public:
  // `requested` is the layout the options ask for; under MPI this rank's layout() takes its
  // tp_rank from MPI (an explicit tp_rank must match it) and, unless given, gpus_per_node from its
  // node's rank count. The layout is validated here (under MPI, agreed by every rank).
  RankContext(const std::string& io_policy, const LayoutOptions& requested);
  ~RankContext();

  // The layout this process loads: `requested` with this rank's tp_rank.
  const Layout& layout() const;

  // Runs one phase; under MPI every rank then agrees on its success (a failure anywhere ends
  // every rank, each printing one line, via ReportedFailure).
  template <class Fn>
  auto phase(std::string_view name, Fn&& fn) -> decltype(fn());
  // The --device spec this rank loads onto: `cuda` without an index is the GPU at this rank's
  // position on its node (cuda:<node-local rank>; cuda:0 for a single process).
  DeviceSpec device_spec(const DeviceSpec& requested) const;
  // The I/O policy's step before the load; points exec.fs at the exchanged bytes when needed.
  // `device`: where the parameters land (the exchange's memory check counts them on the host).
  void before_load(const PreparedLoad& prepared, const Device& device, ExecOptions& exec);
  void after_load(const LoadStats& stats);
  // The rank and I/O policy fields of --json (appended to `out` in order), and the human summary
  // line (stderr, every rank).
  void add_json_fields(nlohmann::ordered_json& out, const LoadStats& stats) const;
  void print_summary(const LoadStats& stats) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  bool multi_rank() const;
  void agree(std::string_view phase, std::exception_ptr error);
};

template <class Fn>
auto RankContext::phase(std::string_view name, Fn&& fn) -> decltype(fn()) {
  if (!multi_rank()) return fn();
  std::optional<decltype(fn())> out;
  std::exception_ptr error;
  try {
    out.emplace(fn());
  } catch (...) {
    error = std::current_exception();
  }
  agree(name, error);
  return std::move(*out);
}

}  // namespace wmap::cli
