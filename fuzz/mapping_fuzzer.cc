// Fuzzes YAML mapping compilation: parse_mapping_text, then RenameTable (RE2 compilation of every
// rename and ignore pattern, `replace` group checks) applied to a small catalog. Any exception
// other than wmap::Error, and any sanitizer report, is a bug.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "wmap/catalog/catalog.h"
#include "wmap/util/error.h"
#include "wmap/mapping/mapping_file.h"
#include "wmap/mapping/rename_table.h"

namespace {

const wmap::Catalog& catalog() {
  static const wmap::Catalog cat = [] {
    const char* const names[] = {"model.embed_tokens.weight",
                                 "model.layers.0.self_attn.q_proj.weight",
                                 "model.layers.0.block_sparse_moe.gate.weight",
                                 "model.layers.0.block_sparse_moe.experts.3.w1.weight",
                                 "model.layers.1.mlp.experts.0.weight_packed",
                                 "model.layers.1.self_attn.rotary_emb.inv_freq",
                                 "lm_head.weight",
                                 "w1",
                                 ""};
    std::vector<wmap::TensorRecord> tensors;
    uint64_t offset = 0;
    for (const char* n : names) {
      wmap::TensorRecord r;
      r.name = n;
      r.dtype = wmap::DType::kF32;
      r.shape = {1};
      r.offset = offset;
      r.nbytes = 4;
      offset += 4;
      tensors.push_back(r);
    }
    wmap::ShardRecord shard;
    shard.file = "model.safetensors";
    shard.tensor_count = tensors.size();
    shard.signature.size = offset;
    return wmap::Catalog::from_parts("/nonexistent", {shard}, std::move(tensors));
  }();
  return cat;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view yaml(reinterpret_cast<const char*>(data), size);
  try {
    const wmap::MappingFile mapping = wmap::parse_mapping_text(yaml, "fuzz/mapping.yaml");
    const wmap::RenameTable table(mapping);
    for (const auto& t : catalog().tensors()) {
      (void)table.canonical(t.name);
      (void)table.ignored(t.name);
    }
    const wmap::RenamedCatalog renamed = table.apply(catalog());
    for (const auto& t : renamed.tensors()) (void)renamed.find(t.name);
    (void)renamed.prefix("model.layers.0");
  } catch (const wmap::Error&) {
  }
  return 0;
}
