// Per-tensor and per-channel FP8 for the llama family, as the hub ships them: ModelOpt exports
// (hf_quant_config.json, 0-d weight_scale / input_scale, KV-cache k_scale / v_scale), AutoFP8
// (quant_method fp8 without blocks), compressed-tensors float-quantized strategy tensor ([1]
// scales) and strategy channel (weight_scale [out, 1], dynamic per-token activations). Every rank
// at T 1/2/4 and EP, under both targets where the engine serves the format, bit for bit against
// the independent numpy reference (tests/python/reference.py, written from fp8.md): vLLM keeps
// one scale per fused part; TensorRT-LLM requantises fused parts to their largest scale inside
// its load_weights and stores the reductions. Each engine refusal names its reason before any read.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <nlohmann/json.hpp>

#include "checkpoint_edit.h"
#include "plan_json.h"
#include "test_util.h"

namespace wmap::test {
namespace {

const std::string kDims = "--fp8 --hidden 256 --heads 4 --kv-heads 2 --head-dim 128 --intermediate 512";
const std::string kMoe = " --experts 4 --moe-intermediate 256";

struct ScaledCase {
  std::string family;
  std::string format;  // synth --fp8-format
  std::string extra;   // --scale-dtype, --kv-scales
};

bool moe_family(const std::string& f) { return f == "qwen3_moe" || f == "mixtral"; }

// Whether TensorRT-LLM loads it at all, and at T 4 (2 KV heads: per-channel scales are not
// duplicated with their head; experts have no per-channel method).
bool trtllm_serves(const ScaledCase& c) {
  if (c.format == "ct-tensor" || c.format == "autofp8") return false;
  return !(c.format == "ct-channel" && moe_family(c.family));
}

class Fp8ScaledFamilies : public ::testing::TestWithParam<ScaledCase> {};

TEST_P(Fp8ScaledFamilies, EveryRankBitExactWhereTheEngineServesIt) {
  TempDir dir;
  const auto& c = GetParam();
  const bool moe = moe_family(c.family);
  const auto ckpt = synth_checkpoint(dir.path(), c.family, "ckpt",
                                     kDims + " --fp8-format " + c.format + " " + c.extra + (moe ? kMoe : ""));
  for (const std::string target : {"trtllm", "vllm"}) {
    if (target == "trtllm" && !trtllm_serves(c)) continue;
    const std::string t = "--target " + target;
    expect_every_rank_matches(ckpt, 1, t);
    expect_every_rank_matches(ckpt, 2, t);
    if (target == "trtllm" && c.format == "ct-channel") continue;  // refused at 2 KV heads over 4 ranks
    expect_every_rank_matches(ckpt, 4, t);
    if (moe) expect_every_rank_matches(ckpt, 4, t + " --ep-size 4");
    if (moe && target == "trtllm") expect_every_rank_matches(ckpt, 4, t + " --ep-size 2");
  }
}

INSTANTIATE_TEST_SUITE_P(
    Formats, Fp8ScaledFamilies,
    ::testing::Values(ScaledCase{"qwen3", "modelopt", "--kv-scales"}, ScaledCase{"qwen3_moe", "modelopt", ""},
                      ScaledCase{"mixtral", "modelopt", "--kv-scales"}, ScaledCase{"llama", "modelopt", ""},
                      ScaledCase{"qwen3", "autofp8", "--kv-scales"}, ScaledCase{"qwen3_moe", "autofp8", ""},
                      ScaledCase{"qwen3", "ct-tensor", "--scale-dtype BF16 --kv-scales"},
                      ScaledCase{"qwen3_moe", "ct-tensor", ""}, ScaledCase{"qwen3", "ct-channel", "--scale-dtype BF16"},
                      ScaledCase{"qwen3_moe", "ct-channel", "--scale-dtype F16"},
                      ScaledCase{"qwen2", "ct-channel", ""}),
    [](const auto& info) {
      std::string f = info.param.format;
      f.erase(std::remove(f.begin(), f.end(), '-'), f.end());
      return info.param.family + "_" + f;
    });

// The plan names the format and each quantised weight's companions; the certificate proves them.
TEST(Fp8Scaled, PlanNamesTheFormatAndEachWeightsCompanions) {
  TempDir dir;
  const auto ckpt =
      synth_checkpoint(dir.path(), "qwen3_moe", "ckpt", kDims + " --fp8-format modelopt --kv-scales" + kMoe);
  const auto trt = plan_json(ckpt, "--tp-size 2");
  EXPECT_EQ(trt["quantization"]["method"], "modelopt");
  EXPECT_EQ(trt["quantization"]["scheme"], "ModelOpt per-tensor FP8");
  EXPECT_TRUE(trt["certificate"]["ok"].get<bool>()) << trt["certificate"];
  EXPECT_GT(trt["certificate"]["scaled"].get<uint64_t>(), 0u);
  auto p = params_of(trt);
  const std::string a = "model.layers.0.self_attn.", e = "model.layers.1.mlp.experts.backend.";
  EXPECT_EQ(p.at(a + "qkv_proj.weight")["convert"]["kind"], "fp8_requant");
  EXPECT_EQ(
      p.at(a + "qkv_proj.weight")["scales"],
      nlohmann::json::array({a + "qkv_proj.weight_scale", a + "qkv_proj.input_scale", a + "qkv_proj.inv_input_scale"}));
  EXPECT_EQ(p.at(a + "qkv_proj.weight_scale")["shape"], nlohmann::json::array());
  EXPECT_EQ(p.at(a + "qkv_proj.kv_scales")["shape"], nlohmann::json::array({3}));
  EXPECT_EQ(p.at(a + "o_proj.weight").count("convert"), 0u) << "an unfused weight is copied as it is";
  EXPECT_EQ(p.at(e + "w3_w1_weight")["scales"], nlohmann::json::array({e + "fc31_dequant", e + "fc31_input_dequant"}));
  EXPECT_EQ(p.at(e + "fc31_dequant")["shape"], nlohmann::json::array({4}));
  EXPECT_EQ(p.at(e + "fc2_quant")["shape"], nlohmann::json::array());
  EXPECT_EQ(p.at("model.layers.1.mlp.gate.weight")["dtype"], "BF16");  // the router stays unquantised

  const auto vllm = plan_json(ckpt, "--tp-size 2 --target vllm");
  EXPECT_TRUE(vllm["certificate"]["ok"].get<bool>());
  p = params_of(vllm);
  EXPECT_EQ(p.at(a + "qkv_proj.weight_scale")["shape"], nlohmann::json::array({3}));
  EXPECT_EQ(p.at(a + "qkv_proj.input_scale")["shape"], nlohmann::json::array({3}));
  EXPECT_EQ(p.at(a + "o_proj.weight_scale")["shape"], nlohmann::json::array({1}));
  EXPECT_EQ(p.at(a + "attn.k_scale")["shape"], nlohmann::json::array());
  EXPECT_EQ(p.at("model.layers.1.mlp.experts.w13_weight_scale")["shape"], nlohmann::json::array({4, 2}));
  EXPECT_EQ(p.at("model.layers.1.mlp.experts.w13_input_scale")["shape"], nlohmann::json::array({4}));
  EXPECT_EQ(p.at("model.layers.1.mlp.experts.w13_input_scale")["must_match"].size(), 4u);

  const auto channel = synth_checkpoint(dir.path(), "qwen3", "channel", kDims + " --fp8-format ct-channel");
  EXPECT_EQ(plan_json(channel, "")["quantization"]["scheme"], "compressed-tensors per-channel FP8");
  EXPECT_EQ(params_of(plan_json(channel, ""))[a + "qkv_proj.weight_scale"]["shape"], nlohmann::json::array({1024}));
  EXPECT_EQ(params_of(plan_json(channel, "--target vllm"))[a + "qkv_proj.weight_scale"]["shape"],
            nlohmann::json::array({1024, 1}));
}

// The requantisation is real work: TensorRT-LLM's fused q/k/v differs from the raw bytes vLLM
// keeps wherever a part's scale is below the maximum, and equals them where it is the maximum.
TEST(Fp8Scaled, TrtllmRequantisesOnlyThePartsBelowTheMaximumScale) {
  TempDir dir;
  const auto ckpt = synth_checkpoint(dir.path(), "qwen3", "ckpt", kDims + " --fp8-format modelopt");
  const auto trt = dir / "trt.safetensors", vllm = dir / "vllm.safetensors";
  ASSERT_EQ(run_wmap("load " + shell_quote(ckpt.string()) + " --dump " + shell_quote(trt.string())).exit_code, 0);
  ASSERT_EQ(
      run_wmap("load " + shell_quote(ckpt.string()) + " --target vllm --dump " + shell_quote(vllm.string())).exit_code,
      0);
  const auto r = run_command(python() + " -c " +
                             shell_quote("import sys; sys.path.insert(0, " +
                                         nlohmann::json((source_dir() / "tests/python").string()).dump() +
                                         ")\n"
                                         "import reference as R, numpy as np\n"
                                         "t = R.SafetensorsFile(sys.argv[1]); v = R.SafetensorsFile(sys.argv[2])\n"
                                         "n = 'model.layers.0.self_attn.qkv_proj.'\n"
                                         "s = v.get(n + 'weight_scale').data.view(np.float32)\n"
                                         "a, b = t.get(n + 'weight').data, v.get(n + 'weight').data\n"
                                         "at = 0; out = []\n"
                                         "for i, k in enumerate([512, 256, 256]):\n"
                                         "    same = np.array_equal(a[at:at + k], b[at:at + k]); at += k\n"
                                         "    out.append('%s:%s' % ('max' if s[i] == s.max() else 'below', same))\n"
                                         "print(' '.join(out))\n") +
                             " " + shell_quote(trt.string()) + " " + shell_quote(vllm.string()));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // Exactly one part holds the maximum scale and comes back unchanged; the others do not.
  EXPECT_NE(r.out.find("max:True"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("max:False"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("below:False"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("below:True"), std::string::npos) << r.out;
}

// From a saved catalog and config.json alone: ModelOpt's hf_quant_config.json beside it is read.
TEST(Fp8Scaled, PlansOfflineFromASavedCatalog) {
  TempDir dir;
  const auto ckpt = synth_checkpoint(dir.path(), "qwen3_moe", "ckpt", kDims + " --fp8-format modelopt" + kMoe);
  const auto catalog = dir / "ckpt.catalog";
  ASSERT_EQ(
      run_wmap("inspect " + shell_quote(ckpt.string()) + " --save-catalog " + shell_quote(catalog.string())).exit_code,
      0);
  for (const char* target : {"trtllm", "vllm"}) {
    const std::string layout = std::string(" --target ") + target + " --tp-size 4 --tp-rank 1 --ep-size 4 --json";
    const auto online = run_wmap("plan " + shell_quote(ckpt.string()) + layout);
    const auto offline = run_wmap("plan --catalog " + shell_quote(catalog.string()) + " --config " +
                                  shell_quote((ckpt / "config.json").string()) + layout);
    ASSERT_EQ(offline.exit_code, 0) << offline.err;
    EXPECT_EQ(nlohmann::json::parse(online.out)["plan_id"], nlohmann::json::parse(offline.out)["plan_id"]) << target;
  }
}

// The other places a ModelOpt export states its format: inlined in config.json (ModelOpt >= 0.31,
// no hf_quant_config.json) and the flat hf_quant_config.json of ModelOpt 1.0 (quant_algo at the top).
TEST(Fp8Scaled, ModelOptInlinedAndFlatConfigsLoadTheSame) {
  TempDir dir;
  const auto ckpt = synth_checkpoint(dir.path(), "qwen3_moe", "ckpt", kDims + " --fp8-format modelopt" + kMoe);
  const auto inlined = dir / "inlined", flat = dir / "flat";
  std::filesystem::copy(ckpt, inlined);
  std::filesystem::remove(inlined / "hf_quant_config.json");
  auto cfg = nlohmann::json::parse(read_file(inlined / "config.json"));
  cfg["quantization_config"] = {{"quant_method", "modelopt"}, {"quant_algo", "FP8"}, {"exclude_modules", {"lm_head"}}};
  write_file(inlined / "config.json", cfg.dump());
  std::filesystem::copy(ckpt, flat);
  write_file(flat / "hf_quant_config.json",
             R"({"producer": {"name": "modelopt", "version": "1.0.0"}, "quant_algo": "FP8", "ignore": ["lm_head"]})");
  for (const auto& c : {inlined, flat}) {
    expect_rank_matches(c, 2, 1, "--target trtllm");
    expect_rank_matches(c, 2, 0, "--target vllm");
  }
}

// `plan --expect` with each engine's parameter list (names, shapes, dtypes from the reference).
TEST(Fp8Scaled, PlanMatchesEachEnginesParameterList) {
  TempDir dir;
  const auto ckpt =
      synth_checkpoint(dir.path(), "qwen3_moe", "ckpt", kDims + " --fp8-format modelopt --kv-scales" + kMoe);
  const auto channel = synth_checkpoint(dir.path(), "qwen3", "channel", kDims + " --fp8-format ct-channel");
  for (const auto& [ck, layout] : {std::pair{ckpt, std::string("--tp-size 2 --tp-rank 1")},
                                   std::pair{ckpt, std::string("--tp-size 4 --tp-rank 2 --ep-size 4 --target vllm")},
                                   std::pair{channel, std::string("--tp-size 2 --tp-rank 0")},
                                   std::pair{channel, std::string("--tp-size 4 --tp-rank 3 --target vllm")}}) {
    const auto list = dir / "params.json";
    const auto dump = run_command(python() + " " + shell_quote((source_dir() / "tests/python/reference.py").string()) +
                                  " list --json " + shell_quote(ck.string()) + " " + layout);
    ASSERT_EQ(dump.exit_code, 0) << dump.err;
    write_file(list, dump.out);
    const auto r =
        run_wmap("plan " + shell_quote(ck.string()) + " " + layout + " --expect " + shell_quote(list.string()));
    EXPECT_EQ(r.exit_code, 0) << layout << "\n" << r.err;
  }
}

std::filesystem::path with_config(const std::filesystem::path& src, const std::filesystem::path& dst,
                                  const std::function<void(nlohmann::json&)>& edit) {
  std::filesystem::copy(src, dst, std::filesystem::copy_options::recursive);
  auto cfg = nlohmann::json::parse(read_file(dst / "config.json"));
  edit(cfg);
  write_file(dst / "config.json", cfg.dump());
  return dst;
}

void refused(const std::filesystem::path& ckpt, const std::string& layout, const std::string& words) {
  const auto r = run_wmap("load " + shell_quote(ckpt.string()) + " " + layout);
  EXPECT_EQ(r.exit_code, 2) << layout << "\n" << r.err;
  EXPECT_NE(r.err.find(words), std::string::npos) << layout << "\n" << r.err;
  EXPECT_EQ(r.err.find("not consumed"), std::string::npos) << r.err;
}

TEST(Fp8Scaled, EngineRefusalsNameTheirReasonBeforeAnyRead) {
  TempDir dir;
  const auto tensor = synth_checkpoint(dir.path(), "qwen3", "tensor", kDims + " --fp8-format ct-tensor");
  refused(tensor, "", "compressed-tensors per-tensor FP8 (strategy 'tensor') does not load under TensorRT-LLM");
  const auto autofp8 = synth_checkpoint(dir.path(), "qwen3", "autofp8", kDims + " --fp8-format autofp8");
  refused(autofp8, "--tp-size 2",
          "quant_method 'fp8' without weight_block_size (AutoFP8 per-tensor) does not load "
          "under TensorRT-LLM");
  const auto channel_moe =
      synth_checkpoint(dir.path(), "qwen3_moe", "channel_moe", kDims + " --fp8-format ct-channel" + kMoe);
  refused(channel_moe, "", "TensorRT-LLM has no per-channel FP8 method for fused MoE experts");
  const auto channel = synth_checkpoint(dir.path(), "qwen3", "channel", kDims + " --fp8-format ct-channel --kv-scales");
  refused(channel, "--tp-size 4 --tp-rank 3",
          "2 KV heads under tp_size 4: TensorRT-LLM's weight mapper for Qwen3ForCausalLM does not duplicate a KV "
          "head's FP8 per-channel scales");
  refused(channel, "", "which TensorRT-LLM keeps only on per-tensor FP8 (FP8QDQ) linears");
  // Variants no building block serves, by name.
  const auto modelopt = synth_checkpoint(dir.path(), "qwen3", "modelopt", kDims + " --fp8-format modelopt");
  const auto nvfp4 = dir / "nvfp4";
  std::filesystem::copy(modelopt, nvfp4);
  std::string hq = read_file(nvfp4 / "hf_quant_config.json");
  hq.replace(hq.find("\"FP8\""), 5, "\"NVFP4\"");
  write_file(nvfp4 / "hf_quant_config.json", hq);
  refused(nvfp4, "",
          "model.layers.0.self_attn.q_proj.weight: stored as F8_E4M3, but quantization_config (ModelOpt NVFP4) "
          "packs NVFP4 weights as U8");
  refused(with_config(
              tensor, dir / "block",
              [](auto& c) { c["quantization_config"]["config_groups"]["group_0"]["weights"]["strategy"] = "block"; }),
          "--target vllm", "compressed-tensors block FP8 is not served yet");
  refused(
      with_config(tensor, dir / "targets",
                  [](auto& c) { c["quantization_config"]["config_groups"]["group_0"]["targets"] = {"re:.*mlp.*"}; }),
      "--target vllm", "only [\"Linear\"] is served");
  // The ignore list and the checkpoint must agree: an engine decides from the list.
  refused(with_config(tensor, dir / "ignored",
                      [](auto& c) { c["quantization_config"]["ignore"].push_back("re:.*\\.down_proj"); }),
          "--target vllm",
          "model.layers.0.mlp.down_proj.weight_scale: the checkpoint quantises model.layers.0.mlp.down_proj, but "
          "quantization_config.ignore leaves it unquantised");
  const auto excluded = dir / "excluded";
  std::filesystem::copy(modelopt, excluded);
  hq = read_file(excluded / "hf_quant_config.json");
  hq.replace(hq.find("\"lm_head\""), 9, "\"lm_head\", \"model.layers.*.self_attn*\"");
  write_file(excluded / "hf_quant_config.json", hq);
  refused(excluded, "--target vllm", "leaves it unquantised");
  // vLLM's fused MoE keeps one input scale for gate and up: differing ones are refused.
  const auto moe = synth_checkpoint(dir.path(), "qwen3_moe", "moe", kDims + " --fp8-format modelopt" + kMoe);
  const auto unequal = dir / "unequal";
  copy_checkpoint(moe, unequal, [](const std::string& name) {
    TensorEdit e;
    if (name == "model.layers.1.mlp.experts.2.up_proj.input_scale") {
      const float v = 0.75f;
      e.bytes = std::string(reinterpret_cast<const char*>(&v), 4);
    }
    return e;
  });
  std::filesystem::copy_file(moe / "hf_quant_config.json", unequal / "hf_quant_config.json");
  const auto r = run_wmap("load " + shell_quote(unequal.string()) + " --target vllm");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("model.layers.1.mlp.experts.2.gate_proj.input_scale"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("model.layers.1.mlp.experts.2.up_proj.input_scale"), std::string::npos) << r.err;
  // TensorRT-LLM takes the max over all experts instead: the same checkpoint loads, bit-exact.
  expect_rank_matches(unequal, 2, 1, "--target trtllm --ep-size 2");
}

}  // namespace
}  // namespace wmap::test
