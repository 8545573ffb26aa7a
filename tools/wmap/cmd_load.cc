// `wmap load DIR [layout] [--device host|cuda:N] [--catalog FILE] [--dump FILE] [--allow-partial]
//   [--io-policy native|rank-striped|exchange] [--io auto|mmap|pread] [--read-workers N] [--load-workers N] [--prefault
//   auto|on|off] [--prefetch auto|on|off]`
// Worker counts: the flags, else WMAP_READ_WORKERS / WMAP_LOAD_WORKERS, else from the core count.
#include <chrono>
#include <cstdio>

#include "commands.h"
#include "loader_options.h"
#include "rank_context.h"
#include "wmap/io/remote.h"
#include "wmap/util/error.h"
#include "wmap/util/progress.h"
#include "wmap/util/xxh3.h"

namespace wmap::cli {
namespace {

struct LoadOptions {
  CommonLoadOptions common;
  std::string device = "host";
  std::string dump;
  std::string io = "auto";
  std::string prefetch = "auto";
  unsigned workers = 0;
  unsigned read_workers = 0;
  std::string prefault = "auto";
  bool allow_partial = false;
  std::string io_policy = "native";
  std::string verify;    // "", "read" (--verify), "full" or "best-effort"
  std::string manifest;  // expected digests, sha256sum format
  bool digests = false;  // each parameter's XXH3-64 in the report
};

std::string replace_rank(std::string s, uint32_t rank) {
  for (size_t at; (at = s.find("{rank}")) != std::string::npos;) s.replace(at, 6, std::to_string(rank));
  return s;
}

// The executor's options from the flags; flags override the environment, and both are
// validated even when a flag wins. The values were checked when parsing (CLI::IsMember).
ExecOptions exec_options(const LoadOptions& o) {
  ExecOptions exec;
  exec.allow_partial = o.allow_partial;
  exec.io = o.io == "mmap" ? IoMode::kMmap : o.io == "pread" ? IoMode::kPread : IoMode::kAuto;
  exec.prefetch = o.prefetch == "on"    ? ExecOptions::Prefetch::kOn
                  : o.prefetch == "off" ? ExecOptions::Prefetch::kOff
                                        : ExecOptions::Prefetch::kAuto;
  const unsigned env_read = worker_count_from_env("WMAP_READ_WORKERS");
  const unsigned env_load = worker_count_from_env("WMAP_LOAD_WORKERS");
  exec.read_workers = o.read_workers ? o.read_workers : env_read;
  exec.load_workers = o.workers ? o.workers : env_load;
  if (o.prefault != "auto") exec.prefault = o.prefault == "on";
  exec.digests = o.digests;
  exec.verify = o.verify.empty() ? ExecOptions::Verify::kOff : parse_verify_mode(o.verify).value();
  return exec;
}

// What a finished load reports, beside the stats.
struct LoadReport {
  const LoadedModel& model;
  const PreparedLoad& prepared;
  const Device& device;
  const Layout& layout;
  double device_open_seconds = 0;
  double gbps() const {
    const auto& s = model.stats;
    return s.seconds > 0 ? static_cast<double>(s.bytes_loaded) / s.seconds / 1e9 : 0;
  }
  // The load without its set-up (reserving device memory): the rate the bytes streamed at.
  double stream_gbps() const {
    const auto& s = model.stats;
    const double stream_seconds = s.seconds - s.setup_seconds;
    return stream_seconds > 0 ? static_cast<double>(s.bytes_loaded) / stream_seconds / 1e9 : 0;
  }
};

void print_load_json(const LoadReport& r, const RankContext& ranks) {
  const auto& s = r.model.stats;
  nlohmann::ordered_json j;
  j["params"] = r.model.params.size();
  j["bytes_loaded"] = s.bytes_loaded;
  j["bytes_read"] = s.bytes_read;
  j["bytes_needed"] = s.bytes_needed;
  j["reads"] = s.reads;
  j["seconds"] = s.seconds;
  j["gbps"] = r.gbps();
  j["stream_gbps"] = r.stream_gbps();
  j["setup_seconds"] = s.setup_seconds;
  j["device_open_seconds"] = r.device_open_seconds;
  j["peak_rss"] = peak_rss_bytes();
  j["io_path"] = s.io_path;
  j["io_requested"] = s.io_requested;
  j["io_reason"] = s.io_reason;
  j["load_workers"] = {{"requested", s.load_workers_requested}, {"effective", s.load_workers}};
  j["read_workers"] = {{"requested", s.read_workers_requested}, {"effective", s.read_workers}};
  j["prefetch"] = s.prefetch;
  j["prefault"] = s.prefault;
  j["prefault_decision"] = s.prefault_decision;
  j["phases"] = {{"catalog", r.prepared.catalog_seconds},
                 {"plan", r.prepared.plan_seconds},
                 {"load", s.seconds},
                 {"read", s.read_seconds},
                 {"transform", s.transform_seconds},
                 {"copy", s.copy_seconds}};
  j["device"] = r.device.name();
  j["catalog_seconds"] = r.prepared.catalog_seconds;
  j["plan_seconds"] = r.prepared.plan_seconds;
  j["plan_id"] = r.prepared.plan->plan_id();
  j["layout"] = nlohmann::ordered_json::parse(r.prepared.plan->layout().to_json());  // as `wmap plan --json`
  j["verified"] = s.verified;
  j["cache"] = s.cache;
  if (!s.verification.empty()) {
    nlohmann::ordered_json v = nlohmann::ordered_json::array();
    for (const ShardCheck& c : s.verification) v.push_back(nlohmann::ordered_json::parse(c.json()));
    j["verification"] = std::move(v);
    j["verify_extra_bytes"] = s.verify_extra_bytes;
  }
  if (!r.model.digests.empty()) {
    nlohmann::ordered_json d = nlohmann::ordered_json::object();
    for (size_t i = 0; i < r.model.params.size(); ++i) d[r.model.params[i].name] = xxh3_hex(r.model.digests[i]);
    j["digests"] = std::move(d);
  }
  if (const RemoteCounters rc = remote_counters(); rc.requests) {
    // This process's requests to remote storage: catalog (headers) and load together.
    j["remote"] = {{"requests", rc.requests}, {"retries", rc.retries}, {"bytes", rc.bytes}};
  }
  ranks.add_json_fields(j, s);
  print_json_line(j);
}

// One line per shard that is not a match, then a count (the matches are in --json).
void print_verification(const LoadStats& s) {
  if (s.verification.empty()) return;
  size_t ok = 0, partial = 0, none = 0;
  for (const ShardCheck& c : s.verification) {
    ok += c.status == ShardCheck::Status::kMatch;
    partial += c.status == ShardCheck::Status::kPartial;
    none += c.status == ShardCheck::Status::kNoDigest;
    if (c.status != ShardCheck::Status::kMatch) std::printf("  %s\n", c.line().c_str());
  }
  std::printf(
      "  verify: %zu of %zu shards match their expected SHA-256, %zu have no expected digest, %zu not verified "
      "(partial read); %.1f MiB read only to hash\n",
      ok, s.verification.size(), none, partial, static_cast<double>(s.verify_extra_bytes) / (1 << 20));
}

void print_load_text(const LoadReport& r) {
  const auto& s = r.model.stats;
  auto req = [](unsigned n) { return n ? std::to_string(n) : std::string("default"); };
  std::printf("loaded %zu parameters (%.1f MiB) for %s on %s in %.3fs: %.2f GB/s, peak RSS %.1f MiB\n",
              r.model.params.size(), static_cast<double>(s.bytes_loaded) / (1 << 20), r.layout.to_string().c_str(),
              r.device.name().c_str(), s.seconds, r.gbps(), static_cast<double>(peak_rss_bytes()) / (1 << 20));
  std::printf(
      "  io %s (requested %s%s%s), read workers %u (requested %s), load workers %u (requested %s), prefetch %s, "
      "prefault %s (%s)\n",
      s.io_path.c_str(), s.io_requested.c_str(), s.io_reason.empty() ? "" : "; ", s.io_reason.c_str(), s.read_workers,
      req(s.read_workers_requested).c_str(), s.load_workers, req(s.load_workers_requested).c_str(),
      s.prefetch ? "on" : "off", s.prefault ? "on" : "off", s.prefault_decision.c_str());
  std::printf(
      "  bytes read %.1f MiB for %.1f MiB needed in %llu read calls; phases: device open %.3fs, catalog %.3fs, "
      "plan %.3fs, load %.3fs (set-up %.3fs, streaming %.2f GB/s; busy: read %.3fs, transform %.3fs, copy %.3fs)\n",
      static_cast<double>(s.bytes_read) / (1 << 20), static_cast<double>(s.bytes_needed) / (1 << 20),
      static_cast<unsigned long long>(s.reads), r.device_open_seconds, r.prepared.catalog_seconds,
      r.prepared.plan_seconds, s.seconds, s.setup_seconds, r.stream_gbps(), s.read_seconds, s.transform_seconds,
      s.copy_seconds);
  if (const RemoteCounters rc = remote_counters(); rc.requests) {
    std::printf("  remote: %llu requests (%llu retried), %.1f MiB received, headers included\n",
                static_cast<unsigned long long>(rc.requests), static_cast<unsigned long long>(rc.retries),
                static_cast<double>(rc.bytes) / (1 << 20));
  }
  print_verification(s);
  if (!r.model.digests.empty()) {
    for (size_t i = 0; i < r.model.params.size(); ++i) {
      std::printf("  xxh3 %s  %s\n", xxh3_hex(r.model.digests[i]).c_str(), r.model.params[i].name.c_str());
    }
  }
}

int run_load(const LoadOptions& o) {
  if (o.common.checkpoint.empty()) throw Error(ErrorCode::kInvalidArgument, "wmap load needs the checkpoint DIR");
  // Under mpirun: the rank comes from MPI and each phase below is agreed by every rank.
  RankContext ranks(o.io_policy, o.common.layout);
  LoaderOptions lo = to_loader_options(o.common, ranks.layout());
  auto session = ranks.phase("startup", [&] { return std::make_unique<LoaderSession>(lo); });
  // Before the catalog: a rank without its GPU stops every rank at once.
  // Opening a CUDA device pins its staging: set-up, reported apart from the load's streaming.
  const auto device_t0 = std::chrono::steady_clock::now();
  auto device = ranks.phase("device", [&] { return make_device(ranks.device_spec(DeviceSpec::parse(o.device))); });
  const double device_open_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - device_t0).count();
  auto prepared = ranks.phase("catalog/plan", [&] { return session->prepare(); });
  report_plan(*prepared, true);
  ExecOptions exec = exec_options(o);
  if (exec.verify != ExecOptions::Verify::kOff) {
    ranks.phase("verify", [&] {
      exec.expected_sha256 =
          expected_digests(*prepared->catalog, o.manifest, o.common.catalog, &session->file_system());
      require_verification(*prepared->plan, exec);  // before any policy reads a byte
      return 0;
    });
  }
  Progress bar("load", prepared->plan->bytes_to_load(), true, Progress::kBytes);
  exec.progress = [&bar](uint64_t done, uint64_t) { bar.update(done); };
  exec.fs = &session->file_system();  // the session's storage, for the multi-rank policies too
  ranks.before_load(*prepared, *device, exec);
  LoadedModel model =
      ranks.phase("load", [&] { return run_as_load_failure([&] { return session->load(*prepared, *device, exec); }); });
  bar.finish();
  ranks.after_load(model.stats);
  if (!o.dump.empty()) {
    ranks.phase("dump", [&] {
      return run_as_load_failure([&] {
        return dump_safetensors(model, *device,
                                replace_rank(o.dump, lo.layout.pp_rank * lo.layout.tp_size + lo.layout.tp_rank));
      });
    });
  }
  const LoadReport report{model, *prepared, *device, lo.layout, device_open_seconds};
  if (o.common.json) {
    print_load_json(report, ranks);
  } else {
    print_load_text(report);
  }
  ranks.print_summary(model.stats);
  return prepared->plan->ok() ? 0 : 1;
}

}  // namespace

Runner add_load(CLI::App& app) {
  auto o = std::make_shared<LoadOptions>();
  auto* sub = app.add_subcommand("load", "Load one rank's parameters (validating the plan first)");
  sub->add_option("DIR", o->common.checkpoint, "Checkpoint directory");
  add_common_load_options(*sub, o->common);
  sub->add_option("--device", o->device, "host, cuda:N, or cuda (under mpirun: the GPU at the rank's node-local index)")
      ->capture_default_str();
  sub->add_option("--dump", o->dump,
                  "Write every loaded parameter to this .safetensors file ({rank} is replaced by the rank, pp_rank x "
                  "tp_size + tp_rank)");
  sub->add_option("--io", o->io, "auto, mmap or pread (auto: chosen per checkpoint, reported)")
      ->check(CLI::IsMember({"auto", "mmap", "pread"}))
      ->capture_default_str();
  sub->add_option("--read-workers", o->read_workers,
                  "Byte ranges read at once (else WMAP_READ_WORKERS, else from the core count)")
      ->check(CLI::PositiveNumber);
  sub->add_option("--load-workers", o->workers,
                  "Pieces copied/transformed at once (else WMAP_LOAD_WORKERS, else from the core count)")
      ->check(CLI::PositiveNumber);
  sub->add_option("--prefault", o->prefault,
                  "on: fault parameter pages in before the read; off: the read or copy faults them; auto: on for "
                  "4 KiB buffers where this machine's page faults are slow (measured), else off")
      ->check(CLI::IsMember({"auto", "on", "off"}))
      ->capture_default_str();
  sub->add_option("--prefetch", o->prefetch, "auto, on or off (auto: when the bytes fit in 90% of available memory)")
      ->check(CLI::IsMember({"auto", "on", "off"}))
      ->capture_default_str();
  sub->add_flag("--verify{read}", o->verify,
                "SHA-256 of each shard from the bytes the load reads, compared with its expected digest (hf cache, "
                "local-dir metadata, the storage's own, --manifest, the --catalog's digests); a mismatch fails the "
                "load, and so does (before any read) a shard this rank reads that cannot be verified: a partial read "
                "(--verify=full reads the rest to hash it) or one without an expected digest. "
                "--verify=best-effort reports those instead")
      ->check(CLI::IsMember({"read", "full", "best-effort"}));
  sub->add_option("--manifest", o->manifest, "With --verify: expected digests in sha256sum format");
  sub->add_flag("--digests", o->digests,
                "Report each parameter's XXH3-64 over its final bytes (after fusion, split, transforms)");
  sub->add_flag("--allow-partial", o->allow_partial, "Load what the plan can, even when it reports problems (exit 1)");
  sub->add_option(
         "--io-policy", o->io_policy,
         "Under mpirun: native (each rank reads its bytes), rank-striped (a node's ranks warm the page cache in "
         "stripes) or exchange (each byte read once, sent over MPI)")
      ->check(CLI::IsMember({"native", "rank-striped", "exchange"}))
      ->capture_default_str();
  return [o] { return run_load(*o); };
}

}  // namespace wmap::cli
