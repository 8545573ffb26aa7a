// Fuzzes config.json parsing (ModelConfig::parse) and every typed accessor the plugins use, on
// the fields the llama and deepseek_v3 plugins read. Any exception other than wmap::Error, and any
// sanitizer report, is a bug.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "wmap/util/error.h"
#include "wmap/spec/model_config.h"

namespace {

const char* const kFields[] = {"architectures",
                               "model_type",
                               "hidden_size",
                               "num_attention_heads",
                               "num_key_value_heads",
                               "head_dim",
                               "intermediate_size",
                               "vocab_size",
                               "num_hidden_layers",
                               "tie_word_embeddings",
                               "num_local_experts",
                               "num_experts",
                               "moe_intermediate_size",
                               "decoder_sparse_step",
                               "mlp_only_layers",
                               "attention_bias",
                               "use_qk_norm",
                               "q_lora_rank",
                               "kv_lora_rank",
                               "qk_nope_head_dim",
                               "qk_rope_head_dim",
                               "v_head_dim",
                               "n_routed_experts",
                               "n_shared_experts",
                               "first_k_dense_replace",
                               "moe_layer_freq",
                               "num_nextn_predict_layers",
                               "quantization_config.quant_method",
                               "quantization_config.weight_block_size",
                               "quantization_config.config_groups.group_0.weights.num_bits",
                               "rope_scaling.factor",
                               "a.b.c.d.e",
                               "",
                               ".",
                               "..",
                               "a..b"};

template <typename Fn>
void guarded(Fn&& fn) {
  try {
    fn();
  } catch (const wmap::Error&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view json(reinterpret_cast<const char*>(data), size);
  wmap::ModelConfig config;
  try {
    config = wmap::ModelConfig::parse(json, "fuzz/config.json");
  } catch (const wmap::Error&) {
    return 0;
  }
  guarded([&] { (void)config.architecture(); });
  for (const char* f : kFields) {
    guarded([&] { (void)config.has(f); });
    guarded([&] { (void)config.require_int(f); });
    guarded([&] { (void)config.get_int(f, 7); });
    guarded([&] { (void)config.find_int(f); });
    guarded([&] { (void)config.require_number(f); });
    guarded([&] { (void)config.get_bool(f, false); });
    guarded([&] { (void)config.require_string(f); });
    guarded([&] { (void)config.get_string(f, "x"); });
    guarded([&] { (void)config.get_int_list(f); });
    guarded([&] { (void)config.require_positive(f); });
  }
  const wmap::ModelConfig copy = config;  // copies share the parsed document
  guarded([&] { (void)copy.require_positive("hidden_size"); });
  (void)copy.text();
  return 0;
}
