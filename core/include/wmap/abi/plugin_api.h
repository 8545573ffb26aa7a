#pragma once
// The plugin ABI. A plugin is a shared library exporting one C entry, `wmap_plugin_info`,
// returning a plain struct; the host checks it before running any of the plugin's code and
// reports every mismatch at once. `register_plugin` then registers the plugin's model builder
// and transforms through a PluginRegistrar. Nothing may throw across either entry: use
// WMAP_DEFINE_PLUGIN, which catches everything and reports it as a message.
//
// A plugin must come from the same build as the core it is loaded into. Plugins link against
// libwmap and exchange C++ types with it (std::string, std::function, ModelSpec), so there is no
// forward or backward compatibility: `abi_version` must equal WMAP_PLUGIN_ABI_VERSION and
// `core_build_id` must equal the host's wmap_core_build_id() (a hash of the headers whose types
// cross this boundary), exactly. `struct_size` exists only so that a plugin from another build is
// described in the refusal message without reading past its struct. A plugin's static
// constructors run at dlopen, before any check: do no work in them.

#include <cstddef>
#include <cstdio>
#include <exception>
#include <cstdint>
#include <functional>
#include <span>
#include <string>

#include "wmap/build_info.h"
#include "wmap/spec/config_bounds.h"
#include "wmap/spec/key_probe.h"
#include "wmap/spec/model_config.h"
#include "wmap/spec/model_spec.h"
#include "wmap/spec/transform_fn.h"
#include "wmap/util/export.h"

// Bumped whenever WmapPluginInfo, PluginRegistrar or the types they expose change.
// 2: ModelSpec records its Layout (ModelSpec::layout).
// 3: engine targets (WmapPluginInfo::targets, Layout::target and its splits, ParamSpec::must_match_close).
// 4: KeyProbe is a CheckpointExtent (highest_index, largest_dim) for ConfigBounds.
// 5: Piece::pad (zero padding), Piece::reverse, Layout::moe_backend, TransformFn's shape.
// 6: ParamSpec::convert (Conversion: F32 -> BF16 narrowing, FP8 block dequantization).
// 7: ParamSpec::scales (a quantised weight's scale parameters, checked by the plan).
// 8: Layout::pp_size/pp_rank/pp_partition, ModelSpec::pipeline (PipelineSpec), ModelSpec::other_ranks,
//    KeyProbe::dtype_of, LinearQuant::scale_dtype.
// 9: KeyProbe::shape_of, per-tensor and per-channel FP8 (LinearQuant kinds, Conversion kinds for
//    TensorRT-LLM's requantisation and scale reductions).
// 10: NVFP4 as each engine's load_weights leaves it (LinearQuant NVFP4 fields, Conversion kinds
//     kBlockScaleSwizzle and kNvfp4Scales).
#define WMAP_PLUGIN_ABI_VERSION 10u

WMAP_PUBLIC_BEGIN
extern "C" {

struct WmapPluginInfo {
  uint32_t abi_version;              // WMAP_PLUGIN_ABI_VERSION the plugin was built with
  uint32_t struct_size;              // sizeof(WmapPluginInfo) of the plugin's build
  const char* name;                  // stable identifier used by mapping files ("llama")
  const char* version;               // the plugin's own version
  const char* const* architectures;  // config.json architectures served, null-terminated
  const char* core_build_id;         // WMAP_BUILD_ID the plugin was compiled against
  // Registers the plugin's factories. Returns 0 on success; otherwise writes a message into
  // `error` (at most `error_size` bytes, NUL-terminated) and returns non-zero. Never throws.
  int (*register_plugin)(void* registrar, char* error, size_t error_size);
  // The engine targets (DESIGN.md "Targets") whose parameters the builder produces: "trtllm",
  // "vllm"; null-terminated. A load asking for another target is refused, naming these.
  const char* const* targets;
};

// The entry every plugin exports.
typedef const WmapPluginInfo* (*WmapPluginInfoFn)(void);
}

namespace wmap {

// Builds a rank's ModelSpec for `layout`. Ask the layout what this rank holds (tp_slice,
// local_experts, local_kv_heads, ...) rather than recomputing the shard rule; the host records
// `layout` in the returned spec. May throw wmap::Error (e.g. a config field that does not fit the
// layout: report Layout's *_error() messages against the field with config.fail()); the host
// reports it with the plugin's name and file. Read counts and sizes through
// ConfigBounds(config, probe) before building anything, so a config that cannot fit the
// checkpoint is refused before millions of modules are made.
using ModelBuilder = std::function<ModelSpec(const ModelConfig& config, const Layout& layout, const KeyProbe& probe)>;

class PluginRegistrar {
 public:
  virtual ~PluginRegistrar() = default;
  // The builder used for every architecture this plugin serves (listed or mapped by YAML).
  virtual void set_model_builder(ModelBuilder builder) = 0;
  virtual void add_transform(const std::string& name, TransformFn fn) = 0;
};

}  // namespace wmap

#define WMAP_PLUGIN_EXPAND_(...) __VA_ARGS__

// Defines `wmap_plugin_info` for a plugin whose registration is `void fn(wmap::PluginRegistrar&)`;
// TARGETS is a parenthesised list of the targets it serves, then the architectures.
// Usage: WMAP_DEFINE_PLUGIN("llama", "1.0", register_llama, ("trtllm", "vllm"), "LlamaForCausalLM", "Qwen3ForCausalLM")
#define WMAP_DEFINE_PLUGIN(NAME, VERSION, REGISTER_FN, TARGETS, ...)                                       \
  extern "C" __attribute__((visibility("default"))) const WmapPluginInfo* wmap_plugin_info(void) {         \
    static const char* const kArchitectures[] = {__VA_ARGS__, nullptr};                                    \
    static const char* const kTargets[] = {WMAP_PLUGIN_EXPAND_ TARGETS, nullptr};                          \
    static const WmapPluginInfo kInfo = {WMAP_PLUGIN_ABI_VERSION,                                          \
                                         sizeof(WmapPluginInfo),                                           \
                                         NAME,                                                             \
                                         VERSION,                                                          \
                                         kArchitectures,                                                   \
                                         WMAP_BUILD_ID,                                                    \
                                         [](void* registrar, char* error, size_t error_size) -> int {      \
                                           try {                                                           \
                                             REGISTER_FN(*static_cast<wmap::PluginRegistrar*>(registrar)); \
                                             return 0;                                                     \
                                           } catch (const std::exception& e) {                             \
                                             std::snprintf(error, error_size, "%s", e.what());             \
                                           } catch (...) {                                                 \
                                             std::snprintf(error, error_size, "unknown exception");        \
                                           }                                                               \
                                           return 1;                                                       \
                                         },                                                                \
                                         kTargets};                                                        \
    return &kInfo;                                                                                         \
  }
WMAP_PUBLIC_END
