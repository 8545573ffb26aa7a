#!/usr/bin/python3
"""Rebuild a real checkpoint layout as sparse safetensors files.

    sparse_layout.py LAYOUT_DIR OUT_DIR

LAYOUT_DIR is one folder of tests/data/layouts: a real checkpoint's config.json and
either its model.safetensors.index.json (names and shard assignment), or tensors.json (every
tensor as [name, shape, dtype, ...], reconstructed or derived where no index is public: gpt-oss,
Llama 4; shards of at most 4.8e9 bytes named as the family's converter names them), or
tensor_inventory.json (name patterns with {a-b} ranges, from a header inventory: Kimi K2; as many
shards of about equal bytes as its `files` names), or, for Qwen3-Next, nothing (the tensor list is
generated from config.json, section 2.1 of its family doc), or, for
deepseek-r1, shard_sizes.tsv (the tensor list is then generated from config.json, DeepSeek-V3 style).

Every shard gets a real header (dtype, shape, contiguous data_offsets) and its data section as a
hole (truncate), so a 689 GB checkpoint costs a few MB of disk. Shapes and dtypes are derived
from config.json and the tensor name by the per-family tables below; a name no table knows is
an error naming the key. Where the index states metadata.total_size, the derived shapes must add
up to it exactly, which checks the tables against the real checkpoint.

Prints `tensors N`, `shards N`, `apparent_bytes N`, `data_bytes N` and `disk_bytes N`.
Stdlib only.
"""

import json
import math
import os
import re
import shutil
import struct
import sys

INDEX_NAME = "model.safetensors.index.json"

DTYPE_BYTES = {"BOOL": 1, "U8": 1, "I8": 1, "F8_E4M3": 1, "F8_E5M2": 1, "I16": 2, "U16": 2,
               "F16": 2, "BF16": 2, "I32": 4, "U32": 4, "F32": 4, "I64": 8, "U64": 8, "F64": 8}
TORCH_DTYPES = {"bfloat16": "BF16", "float16": "F16", "float32": "F32"}


class LayoutError(Exception):
    pass


def config_dtype(cfg):
    name = cfg.get("torch_dtype") or cfg.get("dtype") or "bfloat16"
    if name not in TORCH_DTYPES:
        raise LayoutError(f"config.json: torch_dtype {name!r} is not one of {sorted(TORCH_DTYPES)}")
    return TORCH_DTYPES[name]


class Rules:
    """An ordered table of (regex, shape function); the first full match wins."""

    def __init__(self, dtype):
        self.dtype = dtype
        self.rules = []
        self.approximate = None  # why total_size may not match exactly, when it may not

    def add(self, pattern, shape, dtype=None):
        self.rules.append((re.compile(pattern), shape, dtype or self.dtype))

    def spec(self, key):
        for regex, shape, dtype in self.rules:
            m = regex.fullmatch(key)
            if m:
                s = shape(m) if callable(shape) else shape
                return dtype, [int(d) for d in s]
        raise LayoutError(f"no shape rule for tensor {key!r}")


def add_decoder_rules(r, cfg, prefix, layer_kind=None):
    """Llama / Mistral / Mixtral / Qwen2 / Qwen3 / DeepSeek-V2 (no MLA) / Qwen3.5 decoder names
    under `prefix` (e.g. `model.`). layer_kind(i) -> 'linear_attention' | 'full_attention'."""
    p = re.escape(prefix)
    h = cfg["hidden_size"]
    nh = cfg["num_attention_heads"]
    nkv = cfg.get("num_key_value_heads") or nh
    hd = cfg.get("head_dim") or h // nh
    inter = cfg.get("intermediate_size")
    vocab = cfg["vocab_size"]
    experts = cfg.get("num_local_experts") or cfg.get("n_routed_experts") or cfg.get("num_experts")
    moe_inter = cfg.get("moe_intermediate_size")
    q_rows = nh * hd * (2 if cfg.get("attn_output_gate") else 1)
    L = p + r"layers\.\d+\."
    r.add(p + r"embed_tokens\.weight", [vocab, h])
    r.add(r"lm_head\.weight", [vocab, h])
    r.add(p + r"norm\.weight", [h])
    r.add(L + r"(input_layernorm|post_attention_layernorm)\.weight", [h])
    r.add(L + r"self_attn\.q_proj\.weight", [q_rows, h])
    r.add(L + r"self_attn\.(k|v)_proj\.weight", [nkv * hd, h])
    r.add(L + r"self_attn\.o_proj\.weight", [h, nh * hd])
    r.add(L + r"self_attn\.q_proj\.bias", [nh * hd])
    r.add(L + r"self_attn\.(k|v)_proj\.bias", [nkv * hd])
    r.add(L + r"self_attn\.(q|k)_norm\.weight", [hd])
    # Phi-3: rows [q; k; v] and [gate; up] fused in the checkpoint.
    r.add(L + r"self_attn\.qkv_proj\.weight", [q_rows + 2 * nkv * hd, h])
    if inter:
        r.add(L + r"mlp\.gate_up_proj\.weight", [2 * inter, h])
        r.add(L + r"mlp\.(gate|up)_proj\.weight", [inter, h])
        r.add(L + r"mlp\.down_proj\.weight", [h, inter])
    if experts:
        # Mixtral: block_sparse_moe.{gate, experts.j.w1/w3/w2}
        r.add(L + r"block_sparse_moe\.gate\.weight", [experts, h])
        r.add(L + r"block_sparse_moe\.experts\.\d+\.w(1|3)\.weight", [inter, h])
        r.add(L + r"block_sparse_moe\.experts\.\d+\.w2\.weight", [h, inter])
        r.add(L + r"mlp\.gate\.weight", [experts, h])
    if moe_inter:
        r.add(L + r"mlp\.experts\.\d+\.(gate|up)_proj\.weight", [moe_inter, h])
        r.add(L + r"mlp\.experts\.\d+\.down_proj\.weight", [h, moe_inter])
        shared = cfg.get("shared_expert_intermediate_size") or moe_inter * (cfg.get("n_shared_experts") or 1)
        r.add(L + r"mlp\.shared_experts?\.(gate|up)_proj\.weight", [shared, h])
        r.add(L + r"mlp\.shared_experts?\.down_proj\.weight", [h, shared])
        r.add(L + r"mlp\.shared_expert_gate\.weight", [1, h])
    if "linear_num_value_heads" in cfg:
        # Qwen3-Next / Qwen3.5 gated delta-net layers.
        nk, dk = cfg["linear_num_key_heads"], cfg["linear_key_head_dim"]
        nv, dv = cfg["linear_num_value_heads"], cfg["linear_value_head_dim"]
        conv = 2 * nk * dk + nv * dv
        LA = L + r"linear_attn\."
        r.add(LA + r"in_proj_qkv\.weight", [conv, h])
        r.add(LA + r"in_proj_z\.weight", [nv * dv, h])
        r.add(LA + r"in_proj_(a|b)\.weight", [nv, h])
        r.add(LA + r"conv1d\.weight", [conv, 1, cfg["linear_conv_kernel_dim"]])
        r.add(LA + r"(dt_bias|A_log)", [nv])
        r.add(LA + r"norm\.weight", [dv])
        r.add(LA + r"out_proj\.weight", [h, nv * dv])


def deepencoder_rules(r, cfg):
    """DeepSeek-OCR-2's vision side: SAM ViT-B (DeepEncoder), a Qwen2-0.5B encoder, a linear
    projector. The widths come from config.json's vision_config; the rest (patch 16, window 14,
    MLP ratio 4, 256-channel neck, Qwen2-0.5B's heads) is the fixed DeepEncoder architecture."""
    r.approximate = ("the DeepEncoder vision tower's shapes are reconstructed from its published code, "
                     "not from config.json alone")
    vc = cfg["vision_config"]
    sam = vc["width"]["sam_vit_b"]
    width, heads, layers = sam["width"], sam["heads"], sam["layers"]
    hd = width // heads
    grid = vc["image_size"] // 16
    global_blocks = set(sam["global_attn_indexes"])
    window = 14
    neck = 256
    c2, c3 = sam["downsample_channels"]
    dim = vc["width"]["qwen2-0-5b"]["dim"]
    lm_h = cfg["language_config"]["hidden_size"]
    proj_in = cfg["projector_config"]["input_dim"]
    B = r"model\.sam_model\.blocks\.(\d+)\."

    def rel_pos(m):
        size = grid if int(m.group(1)) in global_blocks else window
        return [2 * size - 1, hd]

    r.add(r"model\.sam_model\.patch_embed\.proj\.weight", [width, 3, 16, 16])
    r.add(r"model\.sam_model\.patch_embed\.proj\.bias", [width])
    r.add(r"model\.sam_model\.pos_embed", [1, grid, grid, width])
    r.add(B + r"norm(1|2)\.(weight|bias)", [width])
    r.add(B + r"attn\.qkv\.weight", [3 * width, width])
    r.add(B + r"attn\.qkv\.bias", [3 * width])
    r.add(B + r"attn\.proj\.weight", [width, width])
    r.add(B + r"attn\.proj\.bias", [width])
    r.add(B + r"attn\.rel_pos_(h|w)", rel_pos)
    r.add(B + r"mlp\.lin1\.weight", [4 * width, width])
    r.add(B + r"mlp\.lin1\.bias", [4 * width])
    r.add(B + r"mlp\.lin2\.weight", [width, 4 * width])
    r.add(B + r"mlp\.lin2\.bias", [width])
    r.add(r"model\.sam_model\.neck\.0\.weight", [neck, width, 1, 1])
    r.add(r"model\.sam_model\.neck\.2\.weight", [neck, neck, 3, 3])
    r.add(r"model\.sam_model\.neck\.(1|3)\.(weight|bias)", [neck])
    r.add(r"model\.sam_model\.net_2\.weight", [c2, neck, 3, 3])
    r.add(r"model\.sam_model\.net_3\.weight", [dim, c2, 3, 3])
    qwen = {"hidden_size": dim, "num_attention_heads": 14, "num_key_value_heads": 2, "intermediate_size": 4864,
            "vocab_size": 151936}
    add_decoder_rules(r, qwen, "model.qwen2_model.model.model.")
    queries = (grid // 4) ** 2
    r.add(r"model\.qwen2_model\.query_1024\.weight", [queries, dim])
    r.add(r"model\.qwen2_model\.query_768\.weight", [(768 // 16 // 4) ** 2, dim])
    r.add(r"model\.projector\.layers\.weight", [lm_h, proj_in])
    r.add(r"model\.projector\.layers\.bias", [lm_h])
    r.add(r"model\.view_seperator", [lm_h])


def rules_for(cfg):
    arch = (cfg.get("architectures") or ["?"])[0]
    dtype = config_dtype(cfg)
    r = Rules(dtype)
    if arch in ("LlamaForCausalLM", "MistralForCausalLM", "MixtralForCausalLM", "Qwen2ForCausalLM",
                "Qwen3ForCausalLM", "Qwen3MoeForCausalLM", "DeepseekV2ForCausalLM", "Phi3ForCausalLM"):
        add_decoder_rules(r, cfg, "model.")
    elif arch == "Qwen3_5MoeForConditionalGeneration":
        add_decoder_rules(r, cfg, "model.language_model.")
    elif arch == "DeepseekOCR2ForCausalLM":
        lc = dict(cfg["language_config"])
        if lc.get("use_mla", True):
            raise LayoutError("DeepSeek-OCR-2 with use_mla=true is not supported")
        add_decoder_rules(r, lc, "model.")
        deepencoder_rules(r, cfg)
    else:
        raise LayoutError(f"config.json: architecture {arch!r} has no shape table")
    return r


# ---------------------------------------------------------------------------------------------
# DeepSeek-V3 / R1: the whole tensor list generated from config.json.

def deepseek_v3_tensors(cfg):
    """(name, dtype, shape) in checkpoint order: embed, layers 0..L-1, norm, lm_head, MTP layers."""
    h = cfg["hidden_size"]
    vocab = cfg["vocab_size"]
    nh = cfg["num_attention_heads"]
    q_lora, kv_lora = cfg["q_lora_rank"], cfg["kv_lora_rank"]
    nope, rope, v = cfg["qk_nope_head_dim"], cfg["qk_rope_head_dim"], cfg["v_head_dim"]
    inter, moe_inter = cfg["intermediate_size"], cfg["moe_intermediate_size"]
    experts = cfg["n_routed_experts"]
    shared = moe_inter * cfg["n_shared_experts"]
    n_layers = cfg["num_hidden_layers"]
    n_mtp = cfg.get("num_nextn_predict_layers", 0)
    first_dense = cfg["first_k_dense_replace"]
    qc = cfg.get("quantization_config") or {}
    fp8 = qc.get("quant_method") == "fp8"
    bm, bn = qc.get("weight_block_size", [128, 128])
    act = config_dtype(cfg)
    out = []

    def tensor(name, shape, dtype=act):
        out.append((name, dtype, list(shape)))

    def linear(name, rows, cols):
        if fp8:
            tensor(name + ".weight", [rows, cols], "F8_E4M3")
            tensor(name + ".weight_scale_inv", [math.ceil(rows / bm), math.ceil(cols / bn)], "F32")
        else:
            tensor(name + ".weight", [rows, cols])

    def mlp(prefix, width):
        linear(prefix + ".gate_proj", width, h)
        linear(prefix + ".up_proj", width, h)
        linear(prefix + ".down_proj", h, width)

    def layer(i):
        p = f"model.layers.{i}"
        a = p + ".self_attn"
        linear(a + ".q_a_proj", q_lora, h)
        tensor(a + ".q_a_layernorm.weight", [q_lora])
        linear(a + ".q_b_proj", nh * (nope + rope), q_lora)
        linear(a + ".kv_a_proj_with_mqa", kv_lora + rope, h)
        tensor(a + ".kv_a_layernorm.weight", [kv_lora])
        linear(a + ".kv_b_proj", nh * (nope + v), kv_lora)
        linear(a + ".o_proj", h, nh * v)
        tensor(p + ".input_layernorm.weight", [h])
        tensor(p + ".post_attention_layernorm.weight", [h])
        if i < first_dense:
            mlp(p + ".mlp", inter)
            return
        tensor(p + ".mlp.gate.weight", [experts, h])
        tensor(p + ".mlp.gate.e_score_correction_bias", [experts], "F32")
        mlp(p + ".mlp.shared_experts", shared)
        for j in range(experts):
            mlp(f"{p}.mlp.experts.{j}", moe_inter)

    tensor("model.embed_tokens.weight", [vocab, h])
    for i in range(n_layers):
        layer(i)
    tensor("model.norm.weight", [h])
    tensor("lm_head.weight", [vocab, h])
    for k in range(n_mtp):
        i = n_layers + k
        p = f"model.layers.{i}"
        tensor(p + ".embed_tokens.weight", [vocab, h])
        tensor(p + ".enorm.weight", [h])
        tensor(p + ".hnorm.weight", [h])
        tensor(p + ".eh_proj.weight", [h, 2 * h])
        layer(i)
        tensor(p + ".shared_head.norm.weight", [h])
        tensor(p + ".shared_head.head.weight", [vocab, h])
    return out


def read_shard_sizes(path):
    sizes = []
    with open(path) as f:
        for line in f:
            cols = line.rstrip("\n").split("\t")
            if cols[0] == "file" or not cols[0]:
                continue
            sizes.append((cols[0], int(cols[1])))
    return sizes


def split_by_sizes(tensors, sizes):
    """Assigns the tensors, in order, to len(sizes) shards so that each shard's share of the data
    follows the real shard sizes: a tensor goes to the shard whose cumulative target range holds
    its midpoint. Every shard gets at least one tensor."""
    total = sum(DTYPE_BYTES[d] * math.prod(s) for _, d, s in tensors)
    real_total = sum(sz for _, sz in sizes)
    bounds, acc = [], 0
    for _, sz in sizes:
        acc += sz
        bounds.append(acc * total / real_total)
    shards = [[] for _ in sizes]
    k, pos = 0, 0
    for t in tensors:
        nbytes = DTYPE_BYTES[t[1]] * math.prod(t[2])
        mid = pos + nbytes / 2
        while k < len(sizes) - 1 and mid >= bounds[k]:
            k += 1
        shards[k].append(t)
        pos += nbytes
    for (name, _), shard in zip(sizes, shards):
        if not shard:
            raise LayoutError(f"shard {name} got no tensor")
    return shards


# ---------------------------------------------------------------------------------------------

def write_sparse_shard(path, tensors, metadata=None):
    """Writes a safetensors header for `tensors` [(name, dtype, shape)], sorted by name, and
    extends the file to its full size with a hole. Returns (file size, data bytes)."""
    header = {}
    if metadata:
        header["__metadata__"] = metadata
    offset = 0
    for name, dtype, shape in sorted(tensors):
        nbytes = DTYPE_BYTES[dtype] * math.prod(shape)
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)  # the safetensors writer pads the header to 8 bytes
    size = 8 + len(text) + offset
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        f.truncate(size)
    return size, offset


def model_order(name):
    """Sort key of a tensor name in a list with no file order: embeddings, then layer by layer,
    then the rest (a stable sort keeps the list's order within each)."""
    m = re.match(r"model\.layers\.(\d+)\.", name)
    if m:
        return (1, int(m.group(1)))
    return (0 if "embed_tokens" in name else 2, 0)


def group_by_bytes(tensors, max_bytes):
    """(name, dtype, shape) in order, cut into groups of at most `max_bytes` of data (a tensor
    larger than that gets a group of its own)."""
    groups, size = [[]], 0
    for t in tensors:
        nbytes = DTYPE_BYTES[t[1]] * math.prod(t[2])
        if groups[-1] and size + nbytes > max_bytes:
            groups.append([])
            size = 0
        groups[-1].append(t)
        size += nbytes
    return groups


def write_index(out_dir, shards):
    """The index of generated shards ([(file, [(name, dtype, shape)])]); returns its total_size."""
    weight_map = {name: file for file, ts in shards for name, _, _ in ts}
    total = sum(DTYPE_BYTES[d] * math.prod(s) for _, ts in shards for _, d, s in ts)
    with open(os.path.join(out_dir, INDEX_NAME), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}, f, indent=2)
    return total


def shards_from_list(path, cfg, max_bytes=4_800_000_000):
    """Shards of a tensors.json list, in list order, each at most `max_bytes` of data (a tensor
    larger than that gets a shard of its own). gpt-oss names them as its converter's
    save_sharded_model (model-{k:05d}-of-{N-1:05d}), others as transformers (model-{k:05d}-of-{N:05d})."""
    with open(path) as f:
        listed = json.load(f)["tensors"]
    expanded = []
    for entry in listed:  # names may be patterns ({a-b} ranges, {x,y} alternatives): GLM-4.5-Air's
        # A dtype marked "BF16?" is assumed, not seen (GLM-4.5-Air's MTP layer): used as given.
        pattern, shape, dtype = entry[0], list(entry[1]), entry[2].rstrip("?")
        if dtype not in DTYPE_BYTES:
            raise LayoutError(f"{path}: {pattern}: unknown dtype {dtype}")
        expanded.extend((name, dtype, shape) for name in expand_pattern(pattern))
    if any("{" in e[0] for e in listed):  # a pattern list is in no file order: model order
        expanded.sort(key=lambda t: model_order(t[0]))
    groups = group_by_bytes(expanded, max_bytes)
    n = len(groups)
    arch = (cfg.get("architectures") or ["?"])[0]
    if arch == "GptOssForCausalLM":
        names = [f"model-{k:05d}-of-{n - 1:05d}.safetensors" for k in range(n)]
    else:
        names = [f"model-{k + 1:05d}-of-{n:05d}.safetensors" for k in range(n)]
    return list(zip(names, groups))


def qwen3_next_tensors(cfg):
    """Qwen3-Next's tensors from its config (no index is public): the names and shapes of
    docs/families/llama4-qwen3next.md section 2.1 (shard 1's header check in the layout's
    SOURCE.md), every layer MoE, full attention every full_attention_interval-th layer, and the
    mtp.* module (fc, norms, one full-attention MoE layer). All BF16."""
    h, V = cfg["hidden_size"], cfg["vocab_size"]
    nk, nv = cfg["linear_num_key_heads"], cfg["linear_num_value_heads"]
    dk, dv, K = cfg["linear_key_head_dim"], cfg["linear_value_head_dim"], cfg["linear_conv_kernel_dim"]
    nh, nkv, hd = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
    E, I, Is = cfg["num_experts"], cfg["moe_intermediate_size"], cfg["shared_expert_intermediate_size"]
    out = [("model.embed_tokens.weight", "BF16", [V, h])]

    def layer(p, full):
        t = [(p + "input_layernorm.weight", [h]), (p + "post_attention_layernorm.weight", [h])]
        if full:
            a = p + "self_attn."
            t += [(a + "q_proj.weight", [2 * nh * hd, h]), (a + "k_proj.weight", [nkv * hd, h]),
                  (a + "v_proj.weight", [nkv * hd, h]), (a + "o_proj.weight", [h, nh * hd]),
                  (a + "q_norm.weight", [hd]), (a + "k_norm.weight", [hd])]
        else:
            a = p + "linear_attn."
            t += [(a + "in_proj_qkvz.weight", [2 * nk * dk + 2 * nv * dv, h]), (a + "in_proj_ba.weight", [2 * nv, h]),
                  (a + "conv1d.weight", [2 * nk * dk + nv * dv, 1, K]), (a + "A_log", [nv]), (a + "dt_bias", [nv]),
                  (a + "norm.weight", [dv]), (a + "out_proj.weight", [h, nv * dv])]
        m = p + "mlp."
        t += [(m + "gate.weight", [E, h]), (m + "shared_expert_gate.weight", [1, h]),
              (m + "shared_expert.gate_proj.weight", [Is, h]), (m + "shared_expert.up_proj.weight", [Is, h]),
              (m + "shared_expert.down_proj.weight", [h, Is])]
        for e in range(E):
            x = m + "experts.%d." % e
            t += [(x + "gate_proj.weight", [I, h]), (x + "up_proj.weight", [I, h]), (x + "down_proj.weight", [h, I])]
        return [(n, "BF16", s) for n, s in t]

    interval = cfg["full_attention_interval"]
    for i in range(cfg["num_hidden_layers"]):
        out += layer("model.layers.%d." % i, (i + 1) % interval == 0)
    out += [("model.norm.weight", "BF16", [h]), ("lm_head.weight", "BF16", [V, h])]
    out += [("mtp.fc.weight", "BF16", [h, 2 * h]), ("mtp.norm.weight", "BF16", [h]),
            ("mtp.pre_fc_norm_embedding.weight", "BF16", [h]), ("mtp.pre_fc_norm_hidden.weight", "BF16", [h])]
    out += layer("mtp.layers.0.", True)
    return out


def expand_pattern(name):
    """`model.layers.{1-60}.mlp.experts.{0-383}.{gate,up}_proj` -> every name: `{a-b}` ranges and
    `{x,y}` alternatives expanded in order."""
    m = re.search(r"\{([^{}]*)\}", name)
    if not m:
        return [name]
    r = re.fullmatch(r"(\d+)-(\d+)", m.group(1))
    choices = [str(i) for i in range(int(r.group(1)), int(r.group(2)) + 1)] if r else m.group(1).split(",")
    out = []
    for c in choices:
        out.extend(expand_pattern(name[:m.start()] + c + name[m.end():]))
    return out


def shards_from_inventory(path, n_files, k_width=1, n_width=1):
    """A tensor_inventory.json (name patterns with `{a-b}` ranges, shape, dtype: a header
    inventory without the per-file map) as `n_files` shards of about equal bytes, in model order
    (embeddings, layer by layer, the rest), named as the inventory's `files` names them
    (model-1-of-61 for Kimi-K2-Instruct, model-00001-of-000163 for DeepSeek-V3.2)."""
    with open(path) as f:
        listed = json.load(f)["tensors"]
    tensors = []
    for entry in listed:
        pattern, shape, dtype = entry[0], list(entry[1]), entry[2]
        if dtype not in DTYPE_BYTES:
            raise LayoutError(f"{path}: {pattern}: unknown dtype {dtype}")
        tensors.extend((name, dtype, shape) for name in expand_pattern(pattern))

    tensors.sort(key=lambda t: model_order(t[0]))  # stable: the inventory's order within a layer
    total = sum(DTYPE_BYTES[d] * math.prod(s) for _, d, s in tensors)
    groups, acc = [[] for _ in range(n_files)], 0
    for t in tensors:
        groups[min(n_files - 1, acc * n_files // total)].append(t)
        acc += DTYPE_BYTES[t[1]] * math.prod(t[2])
    return [(f"model-{k + 1:0{k_width}d}-of-{n_files:0{n_width}d}.safetensors", g) for k, g in enumerate(groups) if g]


def build(layout_dir, out_dir):
    """Builds the sparse checkpoint; returns a summary dict."""
    with open(os.path.join(layout_dir, "config.json")) as f:
        cfg = json.load(f)
    os.makedirs(out_dir, exist_ok=True)
    index_path = os.path.join(layout_dir, INDEX_NAME)
    if os.path.exists(index_path):
        with open(index_path) as f:
            index = json.load(f)
        rules = rules_for(cfg)
        by_shard = {}
        for key, shard in index["weight_map"].items():
            dtype, shape = rules.spec(key)
            by_shard.setdefault(shard, []).append((key, dtype, shape))
        shards = sorted(by_shard.items())
        shutil.copyfile(index_path, os.path.join(out_dir, INDEX_NAME))
        expected_total = (index.get("metadata") or {}).get("total_size")
        approximate = rules.approximate
    elif os.path.exists(os.path.join(layout_dir, "tensor_inventory.json")):
        inventory = os.path.join(layout_dir, "tensor_inventory.json")
        with open(inventory) as f:
            files = re.search(r"model-(\d+)-of-(\d+)\.safetensors", json.load(f).get("files", ""))
        if not files:
            raise LayoutError(f"{inventory}: 'files' does not say how many model-K-of-N.safetensors shards there are")
        shards = shards_from_inventory(inventory, int(files.group(2)), len(files.group(1)), len(files.group(2)))
        expected_total = write_index(out_dir, shards)
        approximate = None
    elif os.path.exists(os.path.join(layout_dir, "tensors.json")):
        shards = shards_from_list(os.path.join(layout_dir, "tensors.json"), cfg)
        expected_total = write_index(out_dir, shards)
        approximate = None
    elif (cfg.get("architectures") or ["?"])[0] == "Qwen3NextForCausalLM":
        groups = group_by_bytes(qwen3_next_tensors(cfg), 4_800_000_000)  # model order
        shards = [(f"model-{k + 1:05d}-of-{len(groups):05d}.safetensors", g) for k, g in enumerate(groups)]
        expected_total = write_index(out_dir, shards)
        approximate = None
    else:
        arch = (cfg.get("architectures") or ["?"])[0]
        if arch != "DeepseekV3ForCausalLM":
            raise LayoutError(f"{layout_dir}: no {INDEX_NAME}, and only DeepSeek-V3 layouts can be generated "
                              f"(architecture {arch!r})")
        sizes = read_shard_sizes(os.path.join(layout_dir, "shard_sizes.tsv"))
        tensors = deepseek_v3_tensors(cfg)
        shards = list(zip([n for n, _ in sizes], split_by_sizes(tensors, sizes)))
        expected_total = write_index(out_dir, shards)
        approximate = None
    shutil.copyfile(os.path.join(layout_dir, "config.json"), os.path.join(out_dir, "config.json"))

    apparent = data = disk = count = 0
    for file, tensors in shards:
        path = os.path.join(out_dir, file)
        size, nbytes = write_sparse_shard(path, tensors, {"format": "pt"})
        apparent += size
        data += nbytes
        count += len(tensors)
        disk += os.stat(path).st_blocks * 512
    if expected_total is not None and expected_total != data:
        msg = (f"{layout_dir}: derived shapes hold {data} data bytes but the index's "
               f"metadata.total_size is {expected_total}")
        if not approximate:
            raise LayoutError(msg)
        print(f"sparse_layout.py: warning: {msg} ({approximate})", file=sys.stderr)
    return {"tensors": count, "shards": len(shards), "apparent_bytes": apparent, "data_bytes": data,
            "disk_bytes": disk}


def main(argv):
    if len(argv) != 3:
        print("usage: sparse_layout.py LAYOUT_DIR OUT_DIR", file=sys.stderr)
        return 2
    try:
        summary = build(argv[1], argv[2])
    except KeyError as e:
        print(f"sparse_layout.py: {argv[1]}: config.json lacks {e}", file=sys.stderr)
        return 1
    except (LayoutError, OSError, ValueError) as e:
        print(f"sparse_layout.py: {e}", file=sys.stderr)
        return 1
    for k, v in summary.items():
        print(k, v)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
