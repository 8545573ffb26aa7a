#include "checkpoint_edit.h"

#include <algorithm>
#include <cstring>
#include <map>

#include "test_util.h"
#include "wmap/catalog/catalog.h"
#include "wmap/util/json_text.h"
#include "wmap/format/safetensors_writer.h"
#include "wmap/catalog/shard_set.h"

namespace wmap::test {

void copy_checkpoint(const std::filesystem::path& src, const std::filesystem::path& dst,
                     const std::function<TensorEdit(const std::string&)>& edit,
                     const std::function<std::string(std::string)>& config_edit,
                     const std::vector<std::string>& extra) {
  const Catalog cat = Catalog::build(discover_shards(src));
  std::filesystem::create_directories(dst);
  std::map<uint32_t, std::vector<TensorToWrite>> shards;
  std::string index = "{\"metadata\":{},\"weight_map\":{";
  bool first = true;
  for (const auto& t : cat.tensors()) {
    const TensorEdit e = edit(t.name);
    if (e.drop) continue;
    const std::string name = e.rename.value_or(t.name);
    const auto path = cat.shard_path(t.shard);
    const uint64_t offset = t.offset;
    const std::optional<std::string> replacement = e.bytes;
    shards[t.shard].push_back(
        {name, t.dtype, e.reshape.value_or(t.shape), t.nbytes, [path, offset, replacement](std::span<std::byte> d) {
           if (replacement) {
             std::memcpy(d.data(), replacement->data(), std::min(d.size(), replacement->size()));
             return;
           }
           const std::string bytes = read_file(path);
           std::memcpy(d.data(), bytes.data() + offset, d.size());
         }});
    index += std::string(first ? "" : ",") + json_string(name) + ":" + json_string(cat.shards()[t.shard].file);
    first = false;
  }
  for (const auto& name : extra) {
    shards[0].push_back({name, DType::kF32, {4}, 16, {}});
    index += std::string(first ? "" : ",") + json_string(name) + ":" + json_string(cat.shards()[0].file);
    first = false;
  }
  for (auto& [shard, tensors] : shards) write_safetensors(dst / cat.shards()[shard].file, tensors);
  write_file(dst / "model.safetensors.index.json", index + "}}");
  std::string config = read_file(src / "config.json");
  if (config_edit) config = config_edit(config);
  write_file(dst / "config.json", config);
}

}  // namespace wmap::test
