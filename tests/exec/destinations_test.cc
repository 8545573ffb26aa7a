// Loads into caller-owned buffers (execute_into, LoaderSession::load_into): bit-exact against a
// load into wmap's own buffers, every destination problem named at once with nothing written,
// tied aliases, engine-owned and ignored names, and a refit after the shards were rewritten.
#include "wmap/exec/destinations.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <map>

#include "checkpoint_edit.h"
#include "test_util.h"
#include "wmap/exec/expected_params.h"
#include "wmap/loader/loader.h"
#include "wmap/util/sha256.h"

namespace wmap::test {
namespace {

constexpr std::byte kSentinel{0xAB};

// One rank's prepared load plus a host buffer (sentinel-filled) and a destination per parameter.
class Destinations : public ::testing::Test {
 protected:
  void prepare(const std::string& family, const std::string& synth_flags = "", uint32_t tp = 2, uint32_t rank = 1,
               Target target = Target::kTrtllm) {
    ckpt_ = dir_ / family;
    auto r = run_wmap("synth " + family + " " + shell_quote(ckpt_.string()) + " " + synth_flags);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    session_ = std::make_unique<LoaderSession>(rank_options(ckpt_, tp, rank, 1, target));
    prepared_ = session_->prepare();
    ASSERT_TRUE(prepared_->plan->ok());
    buffers_.clear();
    dests_.clear();
    for (const PlannedParam& p : prepared_->plan->params()) {
      if (p.absent || !p.alias_of.empty()) continue;
      buffers_[p.name].assign(p.nbytes, kSentinel);
    }
    for (const PlannedParam& p : prepared_->plan->params()) {
      if (p.absent || !p.alias_of.empty()) continue;
      dests_.push_back(
          {p.name, buffers_[p.name].data(), p.nbytes, p.shape, dtype_bits(p.dtype) / 8, p.dtype, "host", true});
    }
  }

  // The parameters a plain load (wmap's own buffers) gives, by name.
  std::map<std::string, std::vector<std::byte>> own_load() {
    auto device = make_device("host");
    LoadedModel m = session_->load(*prepared_, *device, ExecOptions{});
    std::map<std::string, std::vector<std::byte>> out;
    for (const auto& p : m.params) {
      out[p.name].assign(p.buffer->host_data(), p.buffer->host_data() + p.buffer->size());
    }
    return out;
  }

  LoadIntoReport load_into(const DestinationOptions& o = {}) {
    auto device = make_device("host");
    return session_->load_into(*prepared_, *device, dests_, ExecOptions{}, o);
  }

  Destination& dest(const std::string& name) {
    for (auto& d : dests_) {
      if (d.name == name) return d;
    }
    throw std::runtime_error("no destination " + name);
  }

  // The kValidation message of a refused load_into; checks that nothing was written.
  std::string refused(const DestinationOptions& o = {}) {
    try {
      load_into(o);
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kValidation) << e.what();
      for (const auto& [name, bytes] : buffers_) {
        EXPECT_TRUE(std::all_of(bytes.begin(), bytes.end(), [](std::byte b) { return b == kSentinel; }))
            << name << " was written";
      }
      return e.what();
    }
    ADD_FAILURE() << "load_into was not refused";
    return "";
  }

  // The message of the kInvalidArgument error load_into(o) throws (a failure when it does not).
  std::string invalid_argument(const DestinationOptions& o) {
    try {
      load_into(o);
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
      return e.what();
    }
    ADD_FAILURE() << "load_into accepted the options";
    return "";
  }

  TempDir dir_;
  std::filesystem::path ckpt_;
  std::unique_ptr<LoaderSession> session_;
  std::unique_ptr<PreparedLoad> prepared_;
  std::map<std::string, std::vector<std::byte>> buffers_;
  std::vector<Destination> dests_;
};

TEST_F(Destinations, LlamaAndDeepseekFp8BitExactAsTheOwnLoadUnderBothTargets) {
  struct Case {
    std::string family, flags;
    uint32_t tp, rank;
    Target target;
  };
  for (const auto& c :
       {Case{"llama", "", 2, 1, Target::kTrtllm}, Case{"llama", "", 4, 3, Target::kVllm},
        Case{"deepseek_v3", "--fp8", 2, 0, Target::kTrtllm},
        Case{"deepseek_v3", "--fp8 --heads 8 --intermediate 512 --moe-intermediate 512", 2, 1, Target::kVllm},
        Case{"qwen3_moe", "--nvfp4 --nvfp4-format modelopt", 2, 1, Target::kTrtllm},
        Case{"qwen3_moe", "--nvfp4", 2, 0, Target::kVllm}}) {
    prepare(c.family, c.flags, c.tp, c.rank, c.target);
    const auto want = own_load();
    const LoadIntoReport r = load_into();
    EXPECT_EQ(r.params, dests_.size());
    EXPECT_EQ(r.device, "host");
    EXPECT_EQ(r.stats.bytes_loaded, prepared_->plan->bytes_to_load());
    for (const auto& [name, bytes] : buffers_) EXPECT_EQ(bytes, want.at(name)) << c.family << " " << name;
    std::filesystem::remove_all(ckpt_);
  }
}

TEST_F(Destinations, EveryProblemIsNamedAtOnceAndNothingIsWritten) {
  prepare("llama");
  const std::string qkv = "model.layers.0.self_attn.qkv_proj.weight", o = "model.layers.0.self_attn.o_proj.weight";
  const std::string gate_up = "model.layers.1.mlp.gate_up_proj.weight", down = "model.layers.1.mlp.down_proj.weight";
  const std::string norm = "model.norm.weight";
  // missing
  dests_.erase(
      std::find_if(dests_.begin(), dests_.end(), [](const Destination& d) { return d.name == "lm_head.weight"; }));
  dest(qkv).shape = {1, 2, 3};           // wrong shape
  dest(o).element_bytes = 4;             // wrong element size
  dest(gate_up).contiguous = false;      // a transposed view
  dest(down).data = dest(gate_up).data;  // overlapping
  std::vector<std::byte> extra(8);
  dests_.push_back({"model.layers.0.mlp.bogus", extra.data(), 8, {4}, 2, DType::kBF16, "host", true});  // not planned
  const std::string m = refused();
  EXPECT_NE(m.find("6 problem(s)"), std::string::npos) << m;
  EXPECT_NE(m.find("missing: lm_head.weight: planned [125, 64] BF16 but no destination of that name was given"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("shape: " + qkv + ": destination shape [1, 2, 3] but the plan builds [48, 64]"), std::string::npos)
      << m;
  EXPECT_NE(m.find("dtype: " + o + ": destination elements of 4 byte(s) but the plan builds BF16 (2 byte(s))"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find(gate_up + ": destination is not contiguous"), std::string::npos) << m;
  EXPECT_NE(m.find(": overlaps the destination of '"), std::string::npos) << m;
  EXPECT_NE(m.find("model.layers.0.mlp.bogus: a destination the plan does not fill"), std::string::npos) << m;
  (void)norm;
}

// Each problem alone refuses the load, naming it, with nothing written: one test each.
struct OneProblem {
  std::string name, want;
  std::function<void(std::vector<Destination>&)> edit;
};

class DestinationProblem : public Destinations, public ::testing::WithParamInterface<OneProblem> {};

TEST_P(DestinationProblem, RefusesTheLoadNamingItAndWritesNothing) {
  prepare("llama");
  GetParam().edit(dests_);
  const std::string m = refused();
  EXPECT_NE(m.find(GetParam().want), std::string::npos) << GetParam().want << "\n" << m;
  EXPECT_NE(m.find("1 problem(s)"), std::string::npos) << m;
}

INSTANTIATE_TEST_SUITE_P(
    Each, DestinationProblem,
    ::testing::Values(OneProblem{"Missing", "missing: lm_head.weight: planned [125, 64] BF16 but no destination",
                                 [](auto& d) { d.pop_back(); }},
                      OneProblem{"Extra", "model.bogus: a destination the plan does not fill",
                                 [](auto& d) {
                                   d.push_back({"model.bogus", d[0].data, 2, {1}, 2, DType::kBF16, "host", true});
                                   d.back().data = nullptr;
                                 }},
                      OneProblem{"WrongShape", "model.embed_tokens.weight: destination shape [125, 64, 1]",
                                 [](auto& d) { d.front().shape.push_back(1); }},
                      OneProblem{"WrongElementSize", "destination elements of 1 byte(s) but the plan builds BF16",
                                 [](auto& d) { d.front().element_bytes = 1; }},
                      OneProblem{"NotContiguous", "model.embed_tokens.weight: destination is not contiguous",
                                 [](auto& d) { d.front().contiguous = false; }},
                      OneProblem{"Overlapping", "overlaps the destination of", [](auto& d) { d[1].data = d[0].data; }},
                      OneProblem{
                          "WrongDevice",
                          "lm_head.weight: on cuda:0 but 'model.embed_tokens.weight' is on host (one device per load)",
                          [](auto& d) { d.back().device = "cuda:0"; }},
                      OneProblem{"TooSmall", "model.embed_tokens.weight: destination holds 2 bytes",
                                 [](auto& d) { d.front().bytes = 2; }},
                      OneProblem{"GivenTwice", "given twice", [](auto& d) { d.push_back(d.front()); }}),
    [](const auto& info) { return info.param.name; });

TEST_F(Destinations, EngineOwnedAndIgnoredNamesAreLeftUntouched) {
  // TensorRT-LLM's FP8 block-scale linears initialise input_scale to 1.0 at construction: engine-owned.
  prepare("deepseek_v3", "--fp8");
  std::vector<std::byte> scale(4, kSentinel), mine(4, kSentinel);
  dests_.push_back({"model.layers.0.self_attn.o_proj.input_scale", scale.data(), 4, {}, 4, DType::kF32, "host", true});
  dests_.push_back({"model.my_adapter.weight", mine.data(), 4, {2}, 2, DType::kBF16, "host", true});
  EXPECT_NE(refused().find("model.my_adapter.weight: a destination the plan does not fill"), std::string::npos);
  DestinationOptions o;
  o.ignore = {R"(model\.my_adapter\..*)"};
  const LoadIntoReport r = load_into(o);
  EXPECT_EQ(r.engine_owned, std::vector<std::string>{"model.layers.0.self_attn.o_proj.input_scale"});
  EXPECT_EQ(r.ignored, std::vector<std::string>{"model.my_adapter.weight"});
  EXPECT_TRUE(std::all_of(scale.begin(), scale.end(), [](std::byte b) { return b == kSentinel; }));
  EXPECT_TRUE(std::all_of(mine.begin(), mine.end(), [](std::byte b) { return b == kSentinel; }));
  o.ignore = {"(unclosed"};
  EXPECT_NE(invalid_argument(o).find("ignore pattern '(unclosed' does not compile"), std::string::npos);
}

// The same name is not engine-owned where the engine does not have it (a BF16 model), or creates
// it empty and fills it in its own load_weights (an unfused NVFP4 linear): never left unwritten.
// A fused NVFP4 linear's inv_input_scale is torch.empty and never written: left to the engine.
TEST_F(Destinations, AnInputScaleOutsideFp8IsNotEngineOwned) {
  const std::string o_proj = "model.layers.0.self_attn.o_proj.inv_input_scale";
  prepare("llama", "");
  std::vector<std::byte> scale(4, kSentinel);
  dests_.push_back({o_proj, scale.data(), 4, {}, 4, DType::kF32, "host", true});
  EXPECT_NE(refused().find(o_proj + ": a destination the plan does not fill"), std::string::npos);
  std::filesystem::remove_all(ckpt_);

  prepare("llama", "--nvfp4");
  const auto want = own_load();
  ASSERT_EQ(want.count(o_proj), 1u) << "planned: load_weights_vanilla writes input_scale / 6";
  std::vector<std::byte> fused(4, kSentinel), kv(12, kSentinel);
  const std::string qkv = "model.layers.0.self_attn.qkv_proj.";
  dests_.push_back({qkv + "inv_input_scale", fused.data(), 4, {1}, 4, DType::kF32, "host", true});
  dests_.push_back({qkv + "kv_scales", kv.data(), 12, {3}, 4, DType::kF32, "host", true});
  const LoadIntoReport r = load_into();
  EXPECT_EQ(r.engine_owned, (std::vector<std::string>{qkv + "inv_input_scale", qkv + "kv_scales"}));
  EXPECT_TRUE(std::all_of(fused.begin(), fused.end(), [](std::byte b) { return b == kSentinel; }));
  for (const auto& [name, bytes] : buffers_) EXPECT_EQ(bytes, want.at(name)) << name;
}

TEST_F(Destinations, AnIgnorePatternOverAPlannedParameterIsRefused) {
  prepare("llama");
  DestinationOptions o;
  o.ignore = {R"(lm_head\..*)"};
  EXPECT_NE(invalid_argument(o).find("an ignore pattern matches planned parameter 'lm_head.weight'"),
            std::string::npos);
}

TEST_F(Destinations, AFloatDestinationOfAnotherDtypeIsRefusedAnIntegerContainerIsNot) {
  prepare("llama");
  dest("model.norm.weight").dtype = DType::kF16;  // same size, other meaning
  EXPECT_NE(refused().find("dtype: model.norm.weight: destination is F16 but the plan builds BF16"), std::string::npos);
  dest("model.norm.weight").dtype = DType::kU16;  // numpy's container for BF16 bits
  EXPECT_NO_THROW(load_into());
}

TEST_F(Destinations, AnAbsentOptionalParameterLeavesItsDestinationUntouched) {
  // A V3-style checkpoint without the router's score-correction bias (an optional parameter).
  prepare("deepseek_v3", "", 1, 0);
  const std::string bias = "model.layers.1.mlp.gate.e_score_correction_bias";
  const auto dropped = dir_ / "no_bias";
  copy_checkpoint(ckpt_, dropped, [&](const std::string& n) { return TensorEdit{.drop = n == bias}; });
  LoaderOptions lo;
  lo.checkpoint = dropped;
  lo.progress = false;
  LoaderSession session(lo);
  auto prepared = session.prepare();
  ASSERT_TRUE(prepared->plan->ok());
  auto device = make_device("host");
  const LoadIntoReport r = session.load_into(*prepared, *device, dests_, ExecOptions{});
  ASSERT_EQ(r.unfilled.size(), 1u);
  EXPECT_EQ(r.unfilled[0], bias + ": absent from the checkpoint (an optional parameter)");
  EXPECT_TRUE(std::all_of(buffers_[bias].begin(), buffers_[bias].end(), [](std::byte b) { return b == kSentinel; }));
}

TEST_F(Destinations, TiedLmHeadNeedsNoDestinationAndAGivenOneMustBeTheSameMemory) {
  prepare("qwen3");  // tied: lm_head.weight aliases model.embed_tokens.weight
  ASSERT_EQ(buffers_.count("lm_head.weight"), 0u);
  EXPECT_EQ(load_into().params, dests_.size());
  const Destination embed = dest("model.embed_tokens.weight");
  Destination same = embed;
  same.name = "lm_head.weight";
  dests_.push_back(same);
  EXPECT_NO_THROW(load_into());
  std::vector<std::byte> other(embed.bytes);
  dests_.back().data = other.data();
  for (auto& [name, bytes] : buffers_) std::fill(bytes.begin(), bytes.end(), kSentinel);
  EXPECT_NE(refused().find("lm_head.weight: tied to 'model.embed_tokens.weight' but given other memory"),
            std::string::npos);
}

// A load into the caller's buffers that fails half way (here an I/O error on the second shard,
// after the first shard's parameters landed) names every destination it wrote: they now hold a
// mixture (review F9.6; only a digest mismatch used to say so).
class FailingSecondShard final : public FileSystem {
 public:
  std::unique_ptr<RandomAccessFile> open(const std::filesystem::path& path, IoMode mode) const override {
    auto f = FileSystem::posix().open(path, mode);
    if (path.filename().string().find("-00002-") == std::string::npos) return f;
    return std::make_unique<Failing>(std::move(f));
  }

 private:
  class Failing final : public RandomAccessFile {
   public:
    explicit Failing(std::unique_ptr<RandomAccessFile> f) : f_(std::move(f)) {}
    const std::string& path() const override { return f_->path(); }
    uint64_t size() const override { return f_->size(); }
    FileSignature signature() const override { return f_->signature(); }
    void read(uint64_t offset, std::span<std::byte>) const override {
      throw Error(ErrorCode::kIo, path() + ": read failed at offset " + std::to_string(offset) + ": injected");
    }
    std::span<const std::byte> view(uint64_t, uint64_t) const override { return {}; }
    void release(uint64_t, uint64_t) const override {}
    void will_need(uint64_t, uint64_t) const override {}

   private:
    std::unique_ptr<RandomAccessFile> f_;
  };
};

TEST_F(Destinations, AFailedLoadNamesTheDestinationsItWrote) {
  prepare("llama", "", 1, 0);
  const FailingSecondShard failing;
  ExecOptions exec;
  exec.fs = &failing;
  exec.io = IoMode::kPread;
  exec.read_workers = 1;  // the schedule's order: the first shard's units land first
  exec.load_workers = 1;
  auto device = make_device("host");
  try {
    session_->load_into(*prepared_, *device, dests_, exec);
    ADD_FAILURE() << "the load did not fail";
  } catch (const PartialWriteError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("read failed at offset"), std::string::npos) << msg;
    EXPECT_NE(msg.find("destinations already written ("), std::string::npos) << msg;
    ASSERT_FALSE(e.written().empty());
    for (const auto& name : e.written()) EXPECT_NE(msg.find(name), std::string::npos) << name;
    size_t changed = 0;
    for (const auto& [name, bytes] : buffers_) {
      changed += std::any_of(bytes.begin(), bytes.end(), [](std::byte b) { return b != kSentinel; });
    }
    EXPECT_LE(changed, e.written().size()) << "a destination changed that the error does not name";
  }
}

// atomic: the same failures (an I/O error in the second shard, a digest mismatch found once a
// shard is hashed) leave every destination as it was; without atomic they leave a mixture.
TEST_F(Destinations, AnAtomicLoadThatFailsHalfWayChangesNoDestination) {
  prepare("llama", "--shards 3", 1, 0);
  auto all_sentinel = [&] {
    for (const auto& [name, bytes] : buffers_) {
      if (std::any_of(bytes.begin(), bytes.end(), [](std::byte b) { return b != kSentinel; })) return false;
    }
    return true;
  };
  DestinationOptions atomic;
  atomic.atomic = true;
  auto device = make_device("host");
  const FailingSecondShard failing;
  ExecOptions io_error;
  io_error.fs = &failing;
  io_error.io = IoMode::kPread;
  io_error.read_workers = 1;
  io_error.load_workers = 1;
  ExecOptions bad_digest;
  bad_digest.verify = ExecOptions::Verify::kFull;
  const auto files = shard_files(ckpt_);
  for (size_t i = 0; i < files.size(); ++i) {
    const std::string hex = sha256_hex(read_file(ckpt_ / files[i]));
    bad_digest.expected_sha256.push_back(
        ExpectedDigest{i + 1 == files.size() ? std::string(64, '0') : hex, "test manifest"});
  }
  for (const auto& [label, exec] : {std::pair{"I/O error", io_error}, std::pair{"digest mismatch", bad_digest}}) {
    try {
      session_->load_into(*prepared_, *device, dests_, exec, atomic);
      ADD_FAILURE() << label << ": the load did not fail";
    } catch (const PartialWriteError& e) {
      ADD_FAILURE() << label << ": an atomic load named written destinations: " << e.what();
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("(atomic load_into: no destination was changed)"), std::string::npos)
          << label << ": " << e.what();
    }
    EXPECT_TRUE(all_sentinel()) << label << ": an atomic load that failed changed a destination";
    EXPECT_THROW(session_->load_into(*prepared_, *device, dests_, exec), PartialWriteError) << label;
    EXPECT_FALSE(all_sentinel()) << label << ": the plain load wrote nothing before failing (the test proves nothing)";
    for (auto& [name, bytes] : buffers_) std::fill(bytes.begin(), bytes.end(), kSentinel);
  }
}

TEST_F(Destinations, AnAtomicLoadEqualsAPlainOneAndReportsItsStaging) {
  prepare("deepseek_v3", "--fp8", 2, 1);
  const auto own = own_load();
  DestinationOptions atomic;
  atomic.atomic = true;
  const LoadIntoReport r = load_into(atomic);
  uint64_t planned = 0;
  for (const auto& [name, bytes] : buffers_) {
    EXPECT_EQ(bytes, own.at(name)) << name;
    planned += bytes.size();
  }
  EXPECT_TRUE(r.atomic);
  EXPECT_EQ(r.staged_bytes, planned);
  EXPECT_EQ(r.params, buffers_.size());
  EXPECT_GE(r.commit_seconds, 0.0);
}

TEST_F(Destinations, AnAtomicLoadBeyondItsLimitIsRefusedBeforeAnyRead) {
  prepare("llama");
  DestinationOptions atomic;
  atomic.atomic = true;
  atomic.atomic_max_bytes = 1024;
  const std::string msg = refused(atomic);
  EXPECT_NE(msg.find("more than the limit of 1.00 KiB (1024 bytes) (WMAP_ATOMIC_MAX_BYTES)"), std::string::npos) << msg;
  EXPECT_NE(msg.find("nothing was read or written"), std::string::npos) << msg;
}

TEST_F(Destinations, RefitLandsRewrittenShardsInTheSameBuffers) {
  prepare("llama");
  load_into();
  std::map<std::string, const std::byte*> addresses;
  for (const auto& d : dests_) addresses[d.name] = static_cast<const std::byte*>(d.data);
  const auto first = buffers_;
  // The trainer writes new weights: same names and shapes, other values.
  std::filesystem::remove_all(ckpt_);
  auto r = run_wmap("synth llama " + shell_quote(ckpt_.string()) + " --seed 7");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  prepared_ = session_->prepare();
  const auto want = own_load();
  load_into();
  for (const auto& d : dests_) EXPECT_EQ(static_cast<const std::byte*>(d.data), addresses[d.name]);
  size_t changed = 0;
  for (const auto& [name, bytes] : buffers_) {
    EXPECT_EQ(bytes, want.at(name)) << name;
    changed += bytes != first.at(name);
  }
  EXPECT_GT(changed, buffers_.size() / 2) << "the new values landed";
}

}  // namespace
}  // namespace wmap::test

namespace wmap::test {
namespace {

// A refit from a torch.compile-wrapped model passes named_parameters() with "_orig_mod." in each
// name; load_into and `plan --expect` match them without it, as TensorRT-LLM strips the wrapper's
// prefix before loading. And both take the same tables (review F6b): F8 held as uint8 and BF16
// held as uint16 bit containers pass both; another float dtype fails both.
TEST_F(Destinations, TorchCompilePrefixedNamesAndOneDtypeRuleForLoadIntoAndExpect) {
  prepare("deepseek_v3", "--fp8");
  const auto own = own_load();
  std::vector<ExpectedParam> expected;
  for (auto& d : dests_) {
    d.name = "_orig_mod." + d.name;
    if (d.dtype == DType::kF8_E4M3) d.dtype = DType::kU8;
    if (d.dtype == DType::kBF16) d.dtype = DType::kU16;
    expected.push_back({d.name, d.shape, std::string(dtype_name(*d.dtype))});
  }
  const LoadIntoReport r = load_into();
  EXPECT_EQ(r.params, buffers_.size());
  for (const auto& [name, bytes] : buffers_) EXPECT_EQ(bytes, own.at(name)) << name;
  EXPECT_TRUE(check_expected_params(*prepared_->plan, expected).empty());
  // A float dtype the plan does not build: both refuse it, naming the parameter.
  for (auto& [name, bytes] : buffers_) std::fill(bytes.begin(), bytes.end(), kSentinel);
  const std::string norm = "model.norm.weight";
  dest("_orig_mod." + norm).dtype = DType::kF16;
  for (auto& e : expected) {
    if (e.name == "_orig_mod." + norm) e.dtype = "float16";
  }
  EXPECT_NE(refused().find("dtype: " + norm + ": destination is F16 but the plan builds BF16"), std::string::npos);
  const auto problems = check_expected_params(*prepared_->plan, expected);
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_EQ(problems[0].key, norm);
  EXPECT_EQ(problems[0].kind, PlanProblem::Kind::kDtype);
}

}  // namespace
}  // namespace wmap::test
