#!/usr/bin/env python3
"""Self-test of tests/python/reference.py.

Builds tiny checkpoints with numpy (own safetensors writer, independent of reference.py's)
and checks hand-computed expectations: GQA duplication, vocabulary padding, Qwen2 biases,
Qwen3 tied embeddings, GPT-2 transposes (with and without `transformer.`), MoE expert
placement, DeepSeek-V3 MLA/FP8/MTP, NVFP4 renames and inversions, and the CLI exit codes.

Run: /usr/bin/python3 tests/python/reference_selftest.py   (exit 0 on success)
"""

import json
import os
import struct
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import reference as ref  # noqa: E402

REF = os.path.join(HERE, "reference.py")
FAILS = []
CHECKS = [0]


def check(cond, what):
    CHECKS[0] += 1
    if not cond:
        FAILS.append(what)
        print("FAIL:", what)


def eq(got, want, what):
    """got: reference Tensor; want: (dtype, ndarray)."""
    dt, arr = want
    ok = (got.dtype == dt and tuple(got.shape) == tuple(arr.shape)
          and got.to_bytes() == np.ascontiguousarray(arr).tobytes())
    if not ok:
        what += " (got %s %s, want %s %s)" % (got.dtype, list(got.shape), dt, list(arr.shape))
    check(ok, what)


# ---- own minimal safetensors writer ---------------------------------------------------

def write_st(path, tensors):
    hdr, blobs, off = {}, [], 0
    for name, (dt, arr) in tensors.items():
        b = np.ascontiguousarray(arr).tobytes()
        hdr[name] = {"dtype": dt, "shape": list(arr.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    hdr["__metadata__"] = {"format": "pt"}
    hj = json.dumps(hdr).encode()
    hj += b" " * (-len(hj) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hj)) + hj + b"".join(blobs))


def write_ckpt(d, cfg, tensors, shards=1):
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f)
    names = list(tensors)
    if shards == 1:
        write_st(os.path.join(d, "model.safetensors"), tensors)
        return
    wm = {}
    for s in range(shards):
        fn = "model-%05d-of-%05d.safetensors" % (s + 1, shards)
        part = {n: tensors[n] for n in names[s::shards]}
        write_st(os.path.join(d, fn), part)
        for n in part:
            wm[n] = fn
    with open(os.path.join(d, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {}, "weight_map": wm}, f)


_counter = [1]


def bf16(*shape):
    """Distinct uint16 patterns (stand-ins for BF16 bits)."""
    n = int(np.prod(shape))
    a = (np.arange(_counter[0], _counter[0] + n) % 65521 + 1).astype(np.uint16)
    _counter[0] += n
    return ("BF16", a.reshape(shape))


def u8(dt, *shape):
    n = int(np.prod(shape))
    a = ((np.arange(n) + _counter[0]) % 251 + 1).astype(np.uint8)
    _counter[0] += n
    return (dt, a.reshape(shape))


def f32(vals, shape=None):
    a = np.asarray(vals, dtype=np.float32)
    if shape is not None:
        a = a.reshape(shape)
    return ("F32", a.view(np.uint32))


def expect(d, T, r, **kw):
    return ref.expected_params(d, T, r, kw.get("ep", 1), kw.get("mtp"),
                               target=kw.get("target", "trtllm"), attention_dp=kw.get("adp", False),
                               gpus_per_node=kw.get("G", 8))


def run_cli(*args):
    p = subprocess.run([sys.executable, REF] + list(args), stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, universal_newlines=True)
    return p.returncode, p.stdout, p.stderr


# ---- Llama: kv_heads < T, vocab not divisible by T, two shards + index ------------------

def llama_ckpt(d, arch="LlamaForCausalLM", H=8, nh=4, kvh=2, hd=None, V=10, I=12, L=2,
               qkv_bias=False, qk_norm=False, tie=False, extra_cfg=None):
    hd_eff = hd or H // nh
    cfg = {"architectures": [arch], "hidden_size": H, "num_attention_heads": nh,
           "num_key_value_heads": kvh, "vocab_size": V, "intermediate_size": I,
           "num_hidden_layers": L, "tie_word_embeddings": tie}
    if hd:
        cfg["head_dim"] = hd
    cfg.update(extra_cfg or {})
    t = {"model.embed_tokens.weight": bf16(V, H)}
    for i in range(L):
        p = "model.layers.%d." % i
        t[p + "input_layernorm.weight"] = bf16(H)
        t[p + "self_attn.q_proj.weight"] = bf16(nh * hd_eff, H)
        t[p + "self_attn.k_proj.weight"] = bf16(kvh * hd_eff, H)
        t[p + "self_attn.v_proj.weight"] = bf16(kvh * hd_eff, H)
        if qkv_bias:
            t[p + "self_attn.q_proj.bias"] = bf16(nh * hd_eff)
            t[p + "self_attn.k_proj.bias"] = bf16(kvh * hd_eff)
            t[p + "self_attn.v_proj.bias"] = bf16(kvh * hd_eff)
        if qk_norm:
            t[p + "self_attn.q_norm.weight"] = bf16(hd_eff)
            t[p + "self_attn.k_norm.weight"] = bf16(hd_eff)
        t[p + "self_attn.o_proj.weight"] = bf16(H, nh * hd_eff)
        t[p + "self_attn.rotary_emb.inv_freq"] = f32(np.arange(hd_eff // 2))
        t[p + "post_attention_layernorm.weight"] = bf16(H)
        t[p + "mlp.gate_proj.weight"] = bf16(I, H)
        t[p + "mlp.up_proj.weight"] = bf16(I, H)
        t[p + "mlp.down_proj.weight"] = bf16(H, I)
    t["model.norm.weight"] = f32(np.linspace(0.5, 1.5, H))
    if not tie:
        t["lm_head.weight"] = bf16(V, H)
    write_ckpt(d, cfg, t, shards=2)
    return cfg, t


def test_llama(tmp):
    d = os.path.join(tmp, "llama")
    _, t = llama_ckpt(d)
    T, r = 4, 1
    e = expect(d, T, r)
    q = t["model.layers.0.self_attn.q_proj.weight"][1]
    k = t["model.layers.0.self_attn.k_proj.weight"][1]
    v = t["model.layers.0.self_attn.v_proj.weight"][1]
    # q: 8 rows / 4 ranks -> rows 2..3; kv_heads 2 < T 4: each head repeated twice,
    # rank 1 gets head 0 (rows 0..1 with head_dim 2).
    want = np.concatenate([q[2:4], k[0:2], v[0:2]])
    eq(e["model.layers.0.self_attn.qkv_proj.weight"], ("BF16", want), "llama qkv rank1/4")
    e2 = expect(d, T, 2)
    want2 = np.concatenate([q[4:6], k[2:4], v[2:4]])
    eq(e2["model.layers.0.self_attn.qkv_proj.weight"], ("BF16", want2), "llama qkv rank2/4 (head 1)")
    e3 = expect(d, T, 3)
    want3 = np.concatenate([q[6:8], k[2:4], v[2:4]])
    eq(e3["model.layers.0.self_attn.qkv_proj.weight"], ("BF16", want3), "llama qkv rank3/4 (head 1)")
    # o_proj row-parallel: columns 2..3.
    o = t["model.layers.1.self_attn.o_proj.weight"][1]
    eq(e["model.layers.1.self_attn.o_proj.weight"], ("BF16", o[:, 2:4]), "llama o_proj cols")
    # gate_up: I=12/4 = 3 rows each.
    g = t["model.layers.1.mlp.gate_proj.weight"][1]
    u = t["model.layers.1.mlp.up_proj.weight"][1]
    eq(e["model.layers.1.mlp.gate_up_proj.weight"], ("BF16", np.concatenate([g[3:6], u[3:6]])),
       "llama gate_up")
    dn = t["model.layers.1.mlp.down_proj.weight"][1]
    eq(e["model.layers.1.mlp.down_proj.weight"], ("BF16", dn[:, 3:6]), "llama down cols")
    # norms replicated, F32 bits kept.
    eq(e["model.norm.weight"], t["model.norm.weight"], "llama final norm F32 replicated")
    eq(e["model.layers.0.input_layernorm.weight"], t["model.layers.0.input_layernorm.weight"],
       "llama input_layernorm")
    # vocab: V=10, T=4 -> blocks of 3; rank 1 rows 3..5; rank 3 row 9 + 2 zero rows.
    emb = t["model.embed_tokens.weight"][1]
    eq(e["model.embed_tokens.weight"], ("BF16", emb[3:6]), "llama embed rank1")
    pad = np.zeros((3, 8), np.uint16)
    pad[0] = emb[9]
    eq(e3["model.embed_tokens.weight"], ("BF16", pad), "llama embed rank3 zero-padded")
    lm = t["lm_head.weight"][1]
    pad2 = np.zeros((3, 8), np.uint16)
    pad2[0] = lm[9]
    eq(e3["lm_head.weight"], ("BF16", pad2), "llama lm_head rank3 zero-padded (untied)")
    names = set(e)
    check(not any("inv_freq" in n for n in names), "inv_freq not a parameter")
    want_names = {"model.embed_tokens.weight", "model.norm.weight", "lm_head.weight"}
    for i in range(2):
        p = "model.layers.%d." % i
        want_names |= {p + s for s in ("input_layernorm.weight", "self_attn.qkv_proj.weight",
                                        "self_attn.o_proj.weight", "post_attention_layernorm.weight",
                                        "mlp.gate_up_proj.weight", "mlp.down_proj.weight")}
    check(names == want_names, "llama param names: extra %s missing %s"
          % (sorted(names - want_names), sorted(want_names - names)))
    # T=1 is the identity on everything but fusion.
    e1 = expect(d, 1, 0)
    eq(e1["model.embed_tokens.weight"], t["model.embed_tokens.weight"], "llama T=1 embed")
    # kv_heads >= T: T=2, each rank 1 head.
    eT2 = expect(d, 2, 1)
    eq(eT2["model.layers.0.self_attn.qkv_proj.weight"],
       ("BF16", np.concatenate([q[4:8], k[2:4], v[2:4]])), "llama qkv rank1/2 kv>=T")

    # ---- CLI round trip ----
    out = os.path.join(tmp, "llama_r1.safetensors")
    rc, so, se = run_cli("expect", d, "--tp-size", "4", "--tp-rank", "1", "--out", out)
    check(rc == 0, "cli expect rc=%d %s" % (rc, se))
    rc, so, se = run_cli("check", d, out, "--tp-size", "4", "--tp-rank", "1")
    check(rc == 0 and "0 mismatches" in so, "cli check identical: rc=%d %s %s" % (rc, so, se))
    # written file sorted by name and parseable by our own reader
    with open(out, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        hdr = json.loads(f.read(n))
    keys = [k for k in hdr if k != "__metadata__"]
    check(keys == sorted(keys), "expect output sorted by name")
    offs = [hdr[k]["data_offsets"] for k in keys]
    check(all(offs[i][1] == offs[i + 1][0] for i in range(len(offs) - 1)), "offsets contiguous")
    # tamper one byte of qkv_proj
    qn = "model.layers.0.self_attn.qkv_proj.weight"
    data_start = 8 + n
    pos = data_start + hdr[qn]["data_offsets"][0] + 5
    bad = os.path.join(tmp, "llama_bad.safetensors")
    with open(out, "rb") as f:
        blob = bytearray(f.read())
    blob[pos] ^= 0xFF
    with open(bad, "wb") as f:
        f.write(blob)
    rc, so, se = run_cli("check", d, bad, "--tp-size", "4", "--tp-rank", "1")
    check(rc == 1 and (qn + ": bytes differ at offset 5") in so and "1 mismatches" in so,
          "cli check tampered: rc=%d %s" % (rc, so))
    # wrong rank: shapes equal, bytes differ / wrong layout
    rc, so, se = run_cli("check", d, out, "--tp-size", "4", "--tp-rank", "2")
    check(rc == 1, "cli check other rank mismatches rc=%d" % rc)
    # missing + extra + dtype differences
    tens = {}
    for k in keys:
        a, b = hdr[k]["data_offsets"]
        tens[k] = (hdr[k]["dtype"], np.frombuffer(bytes(blob[data_start + a:data_start + b]),
                                                  dtype=np.uint8))
    blob[pos] ^= 0xFF
    mod = {}
    for k in keys:
        a, b = hdr[k]["data_offsets"]
        raw = np.frombuffer(bytes(blob[data_start + a:data_start + b]),
                            dtype=ref.raw_dtype(hdr[k]["dtype"])).reshape(hdr[k]["shape"])
        mod[k] = (hdr[k]["dtype"], raw)
    del mod["model.norm.weight"]
    mod["extra.weight"] = bf16(2)
    mod["lm_head.weight"] = ("F16", mod["lm_head.weight"][1])
    mod["model.layers.0.input_layernorm.weight"] = ("BF16", np.zeros((4,), np.uint16))
    bad2 = os.path.join(tmp, "llama_bad2.safetensors")
    write_st(bad2, mod)
    rc, so, se = run_cli("check", d, bad2, "--tp-size", "4", "--tp-rank", "1")
    check(rc == 1 and "model.norm.weight: missing from dump" in so
          and "extra.weight: unexpected in dump" in so
          and "lm_head.weight: dtype F16, expected BF16" in so
          and "model.layers.0.input_layernorm.weight: shape [4], expected [8]" in so
          and "4 mismatches" in so, "cli check mixed mismatches: rc=%d\n%s" % (rc, so))
    # bad inputs -> 2
    rc, so, se = run_cli("check", d, os.path.join(tmp, "nope.safetensors"), "--tp-size", "4", "--tp-rank", "1")
    check(rc == 2, "cli missing dump rc=%d" % rc)
    rc, so, se = run_cli("expect", os.path.join(tmp, "nodir"), "--tp-size", "1", "--tp-rank", "0",
                         "--out", os.path.join(tmp, "x.safetensors"))
    check(rc == 2, "cli missing dir rc=%d" % rc)
    rc, so, se = run_cli("expect", d, "--tp-size", "4", "--tp-rank", "4", "--out", out)
    check(rc == 2, "cli bad rank rc=%d" % rc)
    rc, so, se = run_cli("expect", d, "--tp-size", "3", "--tp-rank", "0", "--out", out)
    check(rc == 2, "cli T not multiple of kv heads rc=%d" % rc)
    junk = os.path.join(tmp, "junk.safetensors")
    with open(junk, "wb") as f:
        f.write(struct.pack("<Q", 1 << 40) + b"{}")
    rc, so, se = run_cli("check", d, junk, "--tp-size", "4", "--tp-rank", "1")
    check(rc == 2, "cli malformed dump rc=%d" % rc)
    rc, so, se = run_cli("check", d)
    check(rc == 2, "cli bad usage rc=%d" % rc)
    # index naming a missing shard -> 2
    d2 = os.path.join(tmp, "llama_broken")
    llama_ckpt(d2)
    os.remove(os.path.join(d2, "model-00002-of-00002.safetensors"))
    rc, so, se = run_cli("expect", d2, "--tp-size", "1", "--tp-rank", "0", "--out", out)
    check(rc == 2 and "model-00002-of-00002" in se, "cli index missing shard rc=%d %s" % (rc, se))


def test_qwen2(tmp):
    d = os.path.join(tmp, "qwen2")
    _, t = llama_ckpt(d, arch="Qwen2ForCausalLM", H=8, nh=4, kvh=4, V=8, I=8, L=1, qkv_bias=True)
    e = expect(d, 2, 1)
    p = "model.layers.0.self_attn."
    qb, kb, vb = (t[p + x + "_proj.bias"][1] for x in "qkv")
    # kv_heads 4 >= T 2: rank 1 gets heads 2,3 (rows 4..7 with head_dim 2)
    eq(e[p + "qkv_proj.bias"], ("BF16", np.concatenate([qb[4:8], kb[4:8], vb[4:8]])), "qwen2 qkv bias")
    q, k, v = (t[p + x + "_proj.weight"][1] for x in "qkv")
    eq(e[p + "qkv_proj.weight"], ("BF16", np.concatenate([q[4:8], k[4:8], v[4:8]])), "qwen2 qkv weight")
    check(p + "o_proj.bias" not in e, "qwen2 has no o_proj.bias")
    # missing bias -> error
    d2 = os.path.join(tmp, "qwen2_nobias")
    llama_ckpt(d2, arch="Qwen2ForCausalLM", kvh=4, L=1, qkv_bias=False)
    try:
        expect(d2, 2, 0)
        check(False, "qwen2 without biases must fail")
    except ref.BadInput:
        check(True, "")


def test_qwen3(tmp):
    d = os.path.join(tmp, "qwen3")
    # head_dim 4 given explicitly (!= H/nh = 2)
    _, t = llama_ckpt(d, arch="Qwen3ForCausalLM", H=8, nh=4, kvh=2, hd=4, V=7, I=8, L=1,
                      qk_norm=True, tie=True)
    e = expect(d, 2, 1)
    check("lm_head.weight" in e, "qwen3 tied lm_head listed")
    eq(e["lm_head.weight"], ("BF16", e["model.embed_tokens.weight"].data), "qwen3 lm_head == embed data")
    emb = t["model.embed_tokens.weight"][1]
    pad = np.zeros((4, 8), np.uint16)
    pad[:3] = emb[4:7]
    eq(e["model.embed_tokens.weight"], ("BF16", pad), "qwen3 embed rank1 padded")
    p = "model.layers.0.self_attn."
    eq(e[p + "q_norm.weight"], t[p + "q_norm.weight"], "qwen3 q_norm replicated")
    eq(e[p + "k_norm.weight"], t[p + "k_norm.weight"], "qwen3 k_norm replicated")
    q, k, v = (t[p + x + "_proj.weight"][1] for x in "qkv")
    eq(e[p + "qkv_proj.weight"], ("BF16", np.concatenate([q[8:16], k[4:8], v[4:8]])),
       "qwen3 qkv head_dim from config")
    o = t[p + "o_proj.weight"][1]
    eq(e[p + "o_proj.weight"], ("BF16", o[:, 8:16]), "qwen3 o_proj")


def gpt2_ckpt(d, prefix, H=6, V=9, L=2, npos=5, seed_state=None):
    cfg = {"architectures": ["GPT2LMHeadModel"], "n_embd": H, "n_layer": L, "n_head": 3,
           "vocab_size": V, "n_positions": npos}
    t = {}
    t[prefix + "wte.weight"] = bf16(V, H)
    t[prefix + "wpe.weight"] = bf16(npos, H)
    for i in range(L):
        p = "%sh.%d." % (prefix, i)
        t[p + "ln_1.weight"] = bf16(H)
        t[p + "ln_1.bias"] = bf16(H)
        t[p + "attn.bias"] = ("U8", np.ones((1, 1, npos, npos), np.uint8))
        t[p + "attn.c_attn.weight"] = bf16(H, 3 * H)
        t[p + "attn.c_attn.bias"] = bf16(3 * H)
        t[p + "attn.c_proj.weight"] = bf16(H, H)
        t[p + "attn.c_proj.bias"] = bf16(H)
        t[p + "ln_2.weight"] = bf16(H)
        t[p + "ln_2.bias"] = bf16(H)
        t[p + "mlp.c_fc.weight"] = bf16(H, 4 * H)
        t[p + "mlp.c_fc.bias"] = bf16(4 * H)
        t[p + "mlp.c_proj.weight"] = bf16(4 * H, H)
        t[p + "mlp.c_proj.bias"] = bf16(H)
    t[prefix + "ln_f.weight"] = bf16(H)
    t[prefix + "ln_f.bias"] = bf16(H)
    write_ckpt(d, cfg, t)
    return t


def test_gpt2(tmp):
    d1 = os.path.join(tmp, "gpt2_prefix")
    d2 = os.path.join(tmp, "gpt2_bare")
    save = _counter[0]
    t1 = gpt2_ckpt(d1, "transformer.")
    _counter[0] = save
    t2 = gpt2_ckpt(d2, "")
    H = 6
    T = 4  # w = ceil(6/4) = 2: ranks get [0,2) [2,4) [4,6) and an empty slice
    for r in range(T):
        e1 = expect(d1, T, r)
        e2 = expect(d2, T, r)
        check(sorted(e1) == sorted(e2) and all(e1[n].to_bytes() == e2[n].to_bytes() and
                                               e1[n].shape == e2[n].shape for n in e1),
              "gpt2 prefix/no-prefix identical rank %d" % r)
    r = 1
    e = expect(d1, T, r)
    p = "transformer.h.1."
    W = t1[p + "attn.c_attn.weight"][1].T  # [3H, H]
    eq(e[p + "attn.qkv_proj.weight"], ("BF16", np.concatenate([W[2:4], W[8:10], W[14:16]])),
       "gpt2 qkv transposed + split")
    b = t1[p + "attn.c_attn.bias"][1]
    eq(e[p + "attn.qkv_proj.bias"], ("BF16", np.concatenate([b[2:4], b[8:10], b[14:16]])), "gpt2 qkv bias")
    Wo = t1[p + "attn.c_proj.weight"][1].T
    eq(e[p + "attn.o_proj.weight"], ("BF16", Wo[:, 2:4]), "gpt2 o_proj transposed row-split")
    eq(e[p + "attn.o_proj.bias"], t1[p + "attn.c_proj.bias"], "gpt2 o_proj bias replicated")
    Wf = t1[p + "mlp.c_fc.weight"][1].T  # [24, 6]
    eq(e[p + "mlp.fc.weight"], ("BF16", Wf[6:12]), "gpt2 fc transposed col-split")
    eq(e[p + "mlp.fc.bias"], ("BF16", t1[p + "mlp.c_fc.bias"][1][6:12]), "gpt2 fc bias split")
    Wp = t1[p + "mlp.c_proj.weight"][1].T  # [6, 24]
    eq(e[p + "mlp.proj.weight"], ("BF16", Wp[:, 6:12]), "gpt2 proj transposed row-split")
    eq(e[p + "mlp.proj.bias"], t1[p + "mlp.c_proj.bias"], "gpt2 proj bias replicated")
    eq(e["transformer.wpe.weight"], t1["transformer.wpe.weight"], "gpt2 wpe replicated")
    eq(e[p + "ln_2.bias"], t1[p + "ln_2.bias"], "gpt2 ln_2 bias")
    eq(e["transformer.ln_f.weight"], t1["transformer.ln_f.weight"], "gpt2 ln_f")
    wte = t1["transformer.wte.weight"][1]  # V=9, T=4 -> blocks of 3
    eq(e["transformer.wte.weight"], ("BF16", wte[3:6]), "gpt2 wte vocab split")
    eq(e["lm_head.weight"], ("BF16", wte[3:6]), "gpt2 lm_head tied")
    check(not any(n.endswith("attn.bias") for n in e), "gpt2 attn.bias mask ignored")
    e3 = expect(d2, T, 3)
    check(e3[p + "attn.qkv_proj.weight"].shape == (0, H), "gpt2 rank3 empty qkv slice")
    check(e3[p + "attn.o_proj.weight"].shape == (H, 0), "gpt2 rank3 empty o_proj slice")
    pad = np.zeros((3, H), np.uint16)
    eq(e3["transformer.wte.weight"], ("BF16", pad), "gpt2 wte rank3 all padding (V=9,T=4)")
    n_expected = 5 + 2 * 12  # wte wpe ln_f.{w,b} lm_head + 12 per layer
    check(len(e) == n_expected, "gpt2 param count %d != %d" % (len(e), n_expected))
    out = os.path.join(tmp, "gpt2.safetensors")
    rc, so, se = run_cli("expect", d2, "--tp-size", "4", "--tp-rank", "3", "--out", out)
    rc2, so2, _ = run_cli("check", d1, out, "--tp-size", "4", "--tp-rank", "3")
    check(rc == 0 and rc2 == 0, "gpt2 cli with empty tensors rc=%d/%d %s" % (rc, rc2, so2))


def moe_ckpt(d, arch, E=4, I=4, H=8, L=2):
    cfg = {"architectures": [arch], "hidden_size": H, "num_attention_heads": 2,
           "num_key_value_heads": 2, "vocab_size": 8, "num_hidden_layers": L,
           "intermediate_size": 6}
    if arch == "MixtralForCausalLM":
        cfg.update(num_local_experts=E, intermediate_size=I)
    else:
        cfg.update(num_experts=E, moe_intermediate_size=I, mlp_only_layers=[0], head_dim=4)
    t = {"model.embed_tokens.weight": bf16(8, H), "lm_head.weight": bf16(8, H),
         "model.norm.weight": bf16(H)}
    for i in range(L):
        p = "model.layers.%d." % i
        t[p + "input_layernorm.weight"] = bf16(H)
        t[p + "post_attention_layernorm.weight"] = bf16(H)
        for x in "qkv":
            t[p + "self_attn.%s_proj.weight" % x] = bf16(8, H)
        t[p + "self_attn.o_proj.weight"] = bf16(H, 8)
        if arch == "Qwen3MoeForCausalLM":
            t[p + "self_attn.q_norm.weight"] = bf16(4)
            t[p + "self_attn.k_norm.weight"] = bf16(4)
        if arch == "Qwen3MoeForCausalLM" and i == 0:
            t[p + "mlp.gate_proj.weight"] = bf16(6, H)
            t[p + "mlp.up_proj.weight"] = bf16(6, H)
            t[p + "mlp.down_proj.weight"] = bf16(H, 6)
            continue
        if arch == "MixtralForCausalLM":
            t[p + "block_sparse_moe.gate.weight"] = bf16(E, H)
            for j in range(E):
                q = p + "block_sparse_moe.experts.%d." % j
                t[q + "w1.weight"] = bf16(I, H)
                t[q + "w3.weight"] = bf16(I, H)
                t[q + "w2.weight"] = bf16(H, I)
        else:
            t[p + "mlp.gate.weight"] = bf16(E, H)
            for j in range(E):
                q = p + "mlp.experts.%d." % j
                t[q + "gate_proj.weight"] = bf16(I, H)
                t[q + "up_proj.weight"] = bf16(I, H)
                t[q + "down_proj.weight"] = bf16(H, I)
    write_ckpt(d, cfg, t)
    return t


def test_moe(tmp):
    for arch, g, u, dn, gate in (("Qwen3MoeForCausalLM", "mlp.experts.%d.gate_proj", "mlp.experts.%d.up_proj",
                                  "mlp.experts.%d.down_proj", "mlp.gate"),
                                 ("MixtralForCausalLM", "block_sparse_moe.experts.%d.w1",
                                  "block_sparse_moe.experts.%d.w3", "block_sparse_moe.experts.%d.w2",
                                  "block_sparse_moe.gate")):
        d = os.path.join(tmp, arch)
        t = moe_ckpt(d, arch)
        # T=4, P=2: moe_tp=2; rank 1 -> moe_tp_rank 0, moe_ep_rank 1 -> experts 2,3, rows 0..1
        e = expect(d, 4, 1, ep=2)
        p = "model.layers.1."
        w31 = e[p + "mlp.experts.backend.w3_w1_weight"]
        want = np.stack([np.concatenate([t[p + (u % j) + ".weight"][1][0:2],
                                         t[p + (g % j) + ".weight"][1][0:2]]) for j in (2, 3)])
        eq(w31, ("BF16", want), "%s w3_w1 rank1 T4 P2" % arch)
        w2 = e[p + "mlp.experts.backend.w2_weight"]
        want = np.stack([t[p + (dn % j) + ".weight"][1][:, 0:2] for j in (2, 3)])
        eq(w2, ("BF16", want), "%s w2 rank1" % arch)
        eq(e[p + "mlp.gate.weight"], t[p + gate + ".weight"], "%s router replicated" % arch)
        # rank 2 -> moe_tp_rank 1, moe_ep_rank 0: experts 0,1, rows 2..3
        e2 = expect(d, 4, 2, ep=2)
        want = np.stack([np.concatenate([t[p + (u % j) + ".weight"][1][2:4],
                                         t[p + (g % j) + ".weight"][1][2:4]]) for j in (0, 1)])
        eq(e2[p + "mlp.experts.backend.w3_w1_weight"], ("BF16", want), "%s w3_w1 rank2" % arch)
        check(not any(".experts." in n and "backend" not in n for n in e), "%s no raw expert names" % arch)
        if arch == "Qwen3MoeForCausalLM":
            check("model.layers.0.mlp.gate_up_proj.weight" in e
                  and "model.layers.0.mlp.experts.backend.w2_weight" not in e,
                  "qwen3moe mlp_only_layers dense")
        check(w31.shape == (2, 4, 8) and w2.shape == (2, 8, 2), "%s expert shapes" % arch)


def dsv3_ckpt(d, fp8, L=2, n_mtp=1, dense_I=8, qr=4, extra_cfg=None):
    H, nh, nope, rope, vd, R, E, I = 8, 4, 4, 2, 4, 4, 4, 4
    cfg = {"architectures": ["DeepseekV3ForCausalLM"], "hidden_size": H, "num_attention_heads": nh,
           "qk_nope_head_dim": nope, "qk_rope_head_dim": rope, "v_head_dim": vd,
           "kv_lora_rank": R, "q_lora_rank": qr, "num_hidden_layers": L, "vocab_size": 6,
           "intermediate_size": dense_I, "moe_intermediate_size": I, "n_routed_experts": E,
           "n_shared_experts": 1, "first_k_dense_replace": 1, "moe_layer_freq": 1,
           "num_nextn_predict_layers": n_mtp}
    cfg.update(extra_cfg or {})
    if fp8:
        cfg["quantization_config"] = {"quant_method": "fp8", "weight_block_size": [2, 2],
                                      "fmt": "e4m3", "activation_scheme": "dynamic"}
    t = {"model.embed_tokens.weight": bf16(6, H), "model.norm.weight": bf16(H),
         "lm_head.weight": bf16(6, H)}

    def lin(name, o, i):
        if fp8:
            t[name + ".weight"] = u8("F8_E4M3", o, i)
            t[name + ".weight_scale_inv"] = f32(np.arange(-(-o // 2) * -(-i // 2)) + 0.5 + _counter[0],
                                                (-(-o // 2), -(-i // 2)))
            _counter[0] += 7
        else:
            t[name + ".weight"] = bf16(o, i)

    for i in range(L + n_mtp):
        p = "model.layers.%d." % i
        t[p + "input_layernorm.weight"] = bf16(H)
        t[p + "post_attention_layernorm.weight"] = bf16(H)
        lin(p + "self_attn.q_a_proj", qr, H)
        t[p + "self_attn.q_a_layernorm.weight"] = bf16(qr)
        lin(p + "self_attn.q_b_proj", nh * (nope + rope), qr)
        lin(p + "self_attn.kv_a_proj_with_mqa", R + rope, H)
        t[p + "self_attn.kv_a_layernorm.weight"] = bf16(R)
        lin(p + "self_attn.kv_b_proj", nh * (nope + vd), R)
        lin(p + "self_attn.o_proj", H, nh * vd)
        if i == 0:
            lin(p + "mlp.gate_proj", dense_I, H)
            lin(p + "mlp.up_proj", dense_I, H)
            lin(p + "mlp.down_proj", H, dense_I)
        else:
            t[p + "mlp.gate.weight"] = bf16(E, H)
            t[p + "mlp.gate.e_score_correction_bias"] = f32(np.arange(E) * 0.25)
            lin(p + "mlp.shared_experts.gate_proj", I, H)
            lin(p + "mlp.shared_experts.up_proj", I, H)
            lin(p + "mlp.shared_experts.down_proj", H, I)
            for j in range(E):
                lin(p + "mlp.experts.%d.gate_proj" % j, I, H)
                lin(p + "mlp.experts.%d.up_proj" % j, I, H)
                lin(p + "mlp.experts.%d.down_proj" % j, H, I)
        if i >= L:
            t[p + "embed_tokens.weight"] = bf16(6, H)
            t[p + "enorm.weight"] = bf16(H)
            t[p + "hnorm.weight"] = bf16(H)
            t[p + "eh_proj.weight"] = bf16(H, 2 * H)
            t[p + "shared_head.norm.weight"] = bf16(H)
            t[p + "shared_head.head.weight"] = bf16(6, H)
    write_ckpt(d, cfg, t)
    return t


def test_dsv3(tmp):
    for fp8 in (False, True):
        d = os.path.join(tmp, "dsv3_%s" % ("fp8" if fp8 else "bf16"))
        t = dsv3_ckpt(d, fp8)
        dt = "F8_E4M3" if fp8 else "BF16"
        tag = "dsv3 fp8" if fp8 else "dsv3 bf16"
        T, r = 2, 1
        e = expect(d, T, r)
        p = "model.layers.1.self_attn."
        eq(e[p + "kv_a_proj_with_mqa.weight"], (dt, np.concatenate([t[p + "q_a_proj.weight"][1],
                                                                    t[p + "kv_a_proj_with_mqa.weight"][1]])),
           tag + " fused A named kv_a_proj_with_mqa")
        check(not any("fused_a" in n for n in e), tag + " no fused_a name")
        eq(e["model.embed_tokens.weight"], t["model.embed_tokens.weight"], tag + " embed replicated")
        eq(e["lm_head.weight"], ("BF16", t["lm_head.weight"][1][3:6]), tag + " lm_head vocab-parallel")
        kvb = t[p + "kv_b_proj.weight"][1].reshape(4, 8, 4)[2:4]  # heads 2,3
        kn, vv = kvb[:, :4], kvb[:, 4:]
        eq(e[p + "kv_b_proj.weight"], (dt, np.concatenate([kn.reshape(8, 4), vv.reshape(8, 4)])),
           tag + " kv_b_proj")
        eq(e[p + "k_b_proj_trans"], (dt, kn.transpose(0, 2, 1)), tag + " k_b_proj_trans [Hl,R,nope]")
        eq(e[p + "v_b_proj"], (dt, vv), tag + " v_b_proj [Hl,v,R]")
        qb = t[p + "q_b_proj.weight"][1]  # [24, 4] -> rows 12..23
        eq(e[p + "q_b_proj.weight"], (dt, qb[12:24]), tag + " q_b_proj")
        o = t[p + "o_proj.weight"][1]  # [8, 16] -> cols 8..15
        eq(e[p + "o_proj.weight"], (dt, o[:, 8:16]), tag + " o_proj")
        m = "model.layers.1.mlp."
        eq(e[m + "gate.e_score_correction_bias"], t[m + "gate.e_score_correction_bias"], tag + " e_score bias")
        sg, su = t[m + "shared_experts.gate_proj.weight"][1], t[m + "shared_experts.up_proj.weight"][1]
        eq(e[m + "shared_experts.gate_up_proj.weight"], (dt, np.concatenate([sg[2:4], su[2:4]])),
           tag + " shared experts gate_up")
        # experts: T=2, P=1 -> all 4 experts, moe_tp_rank 1 -> rows 2..3
        w31 = np.stack([np.concatenate([t[m + "experts.%d.up_proj.weight" % j][1][2:4],
                                        t[m + "experts.%d.gate_proj.weight" % j][1][2:4]]) for j in range(4)])
        eq(e[m + "experts.backend.w3_w1_weight"], (dt, w31), tag + " experts w3_w1")
        dm = "model.layers.0.mlp."
        eq(e[dm + "down_proj.weight"], (dt, t[dm + "down_proj.weight"][1][:, 4:8]), tag + " dense down")
        if fp8:
            s = t[p + "kv_b_proj.weight_scale_inv"][1].reshape(4, 4, 2)[2:4]  # [H,(nope+v)/2,R/2]
            ks, vs = s[:, :2], s[:, 2:]
            eq(e[p + "kv_b_proj.weight_scale"], ("F32", np.concatenate([ks.reshape(4, 2), vs.reshape(4, 2)])),
               tag + " kv_b scale")
            eq(e[p + "k_b_proj_trans_scale"], ("F32", ks.transpose(0, 2, 1)), tag + " k_b_proj_trans_scale")
            eq(e[p + "v_b_proj_scale"], ("F32", vs), tag + " v_b_proj_scale")
            eq(e[p + "kv_a_proj_with_mqa.weight_scale"],
               ("F32", np.concatenate([t[p + "q_a_proj.weight_scale_inv"][1],
                                       t[p + "kv_a_proj_with_mqa.weight_scale_inv"][1]])), tag + " fused A scale")
            eq(e[p + "q_b_proj.weight_scale"], ("F32", t[p + "q_b_proj.weight_scale_inv"][1][6:12]),
               tag + " q_b scale rows")
            eq(e[p + "o_proj.weight_scale"], ("F32", t[p + "o_proj.weight_scale_inv"][1][:, 4:8]),
               tag + " o_proj scale cols")
            ws = np.stack([np.concatenate([t[m + "experts.%d.up_proj.weight_scale_inv" % j][1][1:2],
                                           t[m + "experts.%d.gate_proj.weight_scale_inv" % j][1][1:2]])
                           for j in range(4)])
            eq(e[m + "experts.backend.w3_w1_weight_scaling_factor"], ("F32", ws), tag + " experts w3_w1 scale")
            w2s = np.stack([t[m + "experts.%d.down_proj.weight_scale_inv" % j][1][:, 1:2] for j in range(4)])
            eq(e[m + "experts.backend.w2_weight_scaling_factor"], ("F32", w2s), tag + " experts w2 scale")
            check(not any(n.endswith("weight_scale_inv") for n in e), tag + " trtllm: no weight_scale_inv names")
        else:
            check(not any(n.endswith("scale_inv") or n.endswith("_scale") for n in e), tag + " no scales")
        # MTP default K=1: model layer 2 from checkpoint layer 2.
        check("model.layers.2.eh_proj.weight" in e and "model.layers.3.eh_proj.weight" not in e,
              tag + " MTP default K")
        check("model.layers.2.shared_head.head.weight" not in e and "model.layers.2.embed_tokens.weight" not in e,
              tag + " MTP embed_tokens / shared_head.head not parameters")
        eq(e["model.layers.2.eh_proj.weight"], ("BF16", t["model.layers.2.eh_proj.weight"][1][:, 8:16]),
           tag + " MTP eh_proj row-parallel")
        eq(e["model.layers.2.enorm.weight"], t["model.layers.2.enorm.weight"], tag + " MTP enorm")
        # K=3 > n_mtp=1: layers 2,3,4 all load checkpoint layer 2.
        e3 = expect(d, T, r, mtp=3)
        same = True
        for n in e3:
            if n.startswith("model.layers.2."):
                for L2 in (3, 4):
                    n2 = "model.layers.%d." % L2 + n[len("model.layers.2."):]
                    same = same and n2 in e3 and e3[n2].to_bytes() == e3[n].to_bytes()
        check(same and "model.layers.5.enorm.weight" not in e3, tag + " MTP sharing K=3")
        e0 = expect(d, T, r, mtp=0)
        check(not any(n.startswith("model.layers.2.") for n in e0), tag + " MTP K=0")
        # P=2 with T=2: moe_tp=1 -> full rows, rank 1 -> experts 2,3
        ep = expect(d, 2, 1, ep=2)
        w31 = np.stack([np.concatenate([t[m + "experts.%d.up_proj.weight" % j][1],
                                        t[m + "experts.%d.gate_proj.weight" % j][1]]) for j in (2, 3)])
        eq(ep[m + "experts.backend.w3_w1_weight"], (dt, w31), tag + " experts EP=2")
        out = os.path.join(tmp, "dsv3.safetensors")
        rc, _, se = run_cli("expect", d, "--tp-size", "2", "--tp-rank", "0", "--mtp-layers", "2", "--out", out)
        rc2, so2, _ = run_cli("check", d, out, "--tp-size", "2", "--tp-rank", "0", "--mtp-layers", "2")
        check(rc == 0 and rc2 == 0, tag + " cli round trip %d %d %s" % (rc, rc2, se))


def test_nvfp4(tmp):
    """compressed-tensors NVFP4: renames, global scale inversion, splits."""
    H, I = 32, 32
    d = os.path.join(tmp, "nvfp4")
    cfg = {"architectures": ["LlamaForCausalLM"], "hidden_size": H, "num_attention_heads": 2,
           "num_key_value_heads": 2, "vocab_size": 4, "intermediate_size": I, "num_hidden_layers": 1,
           "quantization_config": {"quant_method": "compressed-tensors", "format": "nvfp4-pack-quantized"}}
    t = {"model.embed_tokens.weight": bf16(4, H), "lm_head.weight": bf16(4, H), "model.norm.weight": bf16(H)}
    p = "model.layers.0."
    t[p + "input_layernorm.weight"] = bf16(H)
    t[p + "post_attention_layernorm.weight"] = bf16(H)

    def lin(name, o, i, gs=4.0):
        t[name + ".weight_packed"] = u8("U8", o, i // 2)
        t[name + ".weight_scale"] = u8("F8_E4M3", o, i // 16)
        t[name + ".weight_global_scale"] = f32([gs])
        t[name + ".input_global_scale"] = f32([2.0])

    for x in "qkv":
        lin(p + "self_attn.%s_proj" % x, H, H)
    lin(p + "self_attn.o_proj", H, H, gs=8.0)
    lin(p + "mlp.gate_proj", I, H)
    lin(p + "mlp.up_proj", I, H)
    lin(p + "mlp.down_proj", H, I)
    write_ckpt(d, cfg, t)
    e = expect(d, 2, 1)
    a = p + "self_attn."
    qw = [t[a + "%s_proj.weight_packed" % x][1] for x in "qkv"]
    eq(e[a + "qkv_proj.weight"], ("U8", np.concatenate([qw[0][16:32], qw[1][16:32], qw[2][16:32]])),
       "nvfp4 qkv packed rows")
    # TensorRT-LLM: the concatenated F8 scales [48, 2] swizzled 128x4 into a zero-padded 1-D
    # [128 * 4] U8, written here byte by byte from int4-nvfp4.md 6.3's formula.
    qs = np.concatenate([t[a + "%s_proj.weight_scale" % x][1][16:32] for x in "qkv"])
    want = np.zeros(128 * 4, np.uint8)
    for m in range(qs.shape[0]):
        for k in range(qs.shape[1]):
            want[k % 4 + (k // 4) * 512 + (m % 32) * 16 + ((m % 128) // 32) * 4 + (m // 128) * 128 * 4] = qs[m, k]
    eq(e[a + "qkv_proj.weight_scale"], ("U8", want), "nvfp4 qkv scales swizzled 128x4")
    # compressed-tensors globals are 1 / ModelOpt's: weight_scale_2 0.25, input scale 0.5, whose
    # reciprocal TensorRT-LLM stores; alpha = 0.5 x 0.25.
    eq(e[a + "qkv_proj.weight_scale_2"], f32([0.25]), "nvfp4 weight_scale_2 = 1/global")
    eq(e[a + "qkv_proj.input_scale"], f32([2.0]), "nvfp4 input_scale = 1/(1/input_global)")
    eq(e[a + "qkv_proj.alpha"], f32([0.125]), "nvfp4 alpha = input scale x weight_scale_2")
    check(a + "qkv_proj.inv_input_scale" not in e, "nvfp4 fused linear: no inv_input_scale")
    ow = t[a + "o_proj.weight_packed"][1]  # [32, 16] packed bytes -> cols 8..15
    eq(e[a + "o_proj.weight"], ("U8", ow[:, 8:16]), "nvfp4 o_proj packed-byte columns")
    eq(e[a + "o_proj.weight_scale_2"], f32([0.125]), "nvfp4 o_proj global replicated + inverted")
    eq(e[a + "o_proj.inv_input_scale"], f32([np.float32(2.0) * np.float32(1.0 / 6.0)]),
       "nvfp4 o_proj inv_input_scale = input_scale x f32(1/6)")
    v = expect(d, 2, 1, target="vllm")
    eq(v[a + "qkv_proj.weight_packed"], ("U8", np.concatenate([qw[0][16:32], qw[1][16:32], qw[2][16:32]])),
       "nvfp4 vllm keeps the checkpoint's name")
    eq(v[a + "qkv_proj.weight_scale"], ("F8_E4M3", qs), "nvfp4 vllm F8 scales, the parts' rows")
    eq(v[a + "qkv_proj.weight_global_scale"], f32([4.0, 4.0, 4.0]), "nvfp4 vllm one global slot per part, as stored")
    eq(v[a + "qkv_proj.input_global_scale"], f32([2.0, 2.0, 2.0]), "nvfp4 vllm input slots")
    # dense layer with a zero global scale -> error; differing fused scales -> error
    t2 = dict(t)
    t2[a + "o_proj.weight_global_scale"] = f32([0.0])
    d2 = os.path.join(tmp, "nvfp4_bad")
    write_ckpt(d2, cfg, t2)
    rc, _, se = run_cli("list", d2, "--tp-size", "2", "--tp-rank", "0")
    check(rc == 2 and "o_proj.weight_global_scale" in se, "nvfp4 dense zero global scale -> 2 (%s)" % se)
    t3 = dict(t)
    t3[a + "k_proj.weight_global_scale"] = f32([3.0])
    d3 = os.path.join(tmp, "nvfp4_bad2")
    write_ckpt(d3, cfg, t3)
    rc, _, se = run_cli("list", d3, "--tp-size", "2", "--tp-rank", "0")
    check(rc == 2 and "k_proj" in se, "nvfp4 differing fused global scales -> 2 (%s)" % se)
    # MoE experts: non-positive / NaN global scale -> 0 (not an error)
    x = ref.invert_global_scale("k", ref.Tensor("F32", np.array([4.0, 0.0, -1.0, np.nan, np.inf],
                                                              np.float32).view(np.uint32)), strict=False)
    check(list(x.data.view(np.float32)) == [0.25, 0.0, 0.0, 0.0, 0.0], "nvfp4 lenient inversion")


def test_dsv3_trtllm_split_rules(tmp):
    """trtllm DeepSeek-V3: gcd rule (with node cap), shared experts (no cap), attention-DP."""
    # FP8 block [2,2], dense intermediate 6 = 3 blocks: T=2 -> t = gcd(3, 2) = 1: both ranks
    # hold the whole MLP (the 384 = 3 x 128 case of DeepSeek at T=2, scaled down).
    d = os.path.join(tmp, "dsv3_gcd")
    t = dsv3_ckpt(d, True, dense_I=6)
    dm = "model.layers.0.mlp."
    for r in (0, 1):
        e = expect(d, 2, r)
        eq(e[dm + "gate_up_proj.weight"], ("F8_E4M3", np.concatenate([t[dm + "gate_proj.weight"][1],
                                                                     t[dm + "up_proj.weight"][1]])),
           "dsv3 gcd t=1 rank%d whole gate_up" % r)
        eq(e[dm + "down_proj.weight"], t[dm + "down_proj.weight"], "dsv3 gcd t=1 rank%d whole down" % r)
        eq(e[dm + "down_proj.weight_scale"], t[dm + "down_proj.weight_scale_inv"],
           "dsv3 gcd t=1 rank%d whole down scale" % r)
        # shared experts: moe I 4 = 2 blocks, gcd(2, 2) = 2 -> split; rank r rows 2r..2r+1.
        m = "model.layers.1.mlp.shared_experts."
        eq(e[m + "gate_up_proj.weight"],
           ("F8_E4M3", np.concatenate([t[m + "gate_proj.weight"][1][2 * r:2 * r + 2],
                                       t[m + "up_proj.weight"][1][2 * r:2 * r + 2]])),
           "dsv3 shared experts gcd 2 rank%d" % r)
    # BF16, dense I = 8 (b = 1), T=4: gcd(8, 4) = 4; G=2 caps it to gcd(4, 2) = 2, rank 3 -> index 1.
    d = os.path.join(tmp, "dsv3_cap")
    t = dsv3_ckpt(d, False)
    g, u, dn = (t[dm + x + ".weight"][1] for x in ("gate_proj", "up_proj", "down_proj"))
    e = expect(d, 4, 3, G=2)
    eq(e[dm + "gate_up_proj.weight"], ("BF16", np.concatenate([g[4:8], u[4:8]])), "dsv3 node cap T4 G2 rank3")
    eq(e[dm + "down_proj.weight"], ("BF16", dn[:, 4:8]), "dsv3 node cap down T4 G2 rank3")
    e1 = expect(d, 4, 1, G=2)
    check(e1[dm + "gate_up_proj.weight"].to_bytes() == e[dm + "gate_up_proj.weight"].to_bytes(),
          "dsv3 node cap: ranks 1 and 3 hold the same slice")
    e8 = expect(d, 4, 3)  # G = 8: no cap, t = 4
    eq(e8[dm + "gate_up_proj.weight"], ("BF16", np.concatenate([g[6:8], u[6:8]])), "dsv3 no cap T4 G8 rank3")
    # shared experts: gcd(4, 4) = 4, no node cap even with G=2 -> rank 3 row 3.
    m = "model.layers.1.mlp.shared_experts."
    eq(e[m + "gate_up_proj.weight"], ("BF16", np.concatenate([t[m + "gate_proj.weight"][1][3:4],
                                                              t[m + "up_proj.weight"][1][3:4]])),
       "dsv3 shared experts no node cap")
    # attention-DP, T=2 rank 1: attention, dense MLP, shared experts, embed, lm_head, eh_proj
    # replicated; routed experts still split (moe_tp 2 -> rows 2..3).
    e = expect(d, 2, 1, adp=True)
    a = "model.layers.1.self_attn."
    for n in ("q_b_proj.weight", "o_proj.weight", "q_a_layernorm.weight"):
        eq(e[a + n], t[a + n], "dsv3 adp %s replicated" % n)
    kvb = t[a + "kv_b_proj.weight"][1].reshape(4, 8, 4)
    eq(e[a + "kv_b_proj.weight"], ("BF16", np.concatenate([kvb[:, :4].reshape(16, 4),
                                                           kvb[:, 4:].reshape(16, 4)])), "dsv3 adp kv_b all heads")
    eq(e[a + "k_b_proj_trans"], ("BF16", kvb[:, :4].transpose(0, 2, 1)), "dsv3 adp k_b_proj_trans all heads")
    eq(e[dm + "gate_up_proj.weight"], ("BF16", np.concatenate([g, u])), "dsv3 adp dense MLP replicated")
    eq(e[m + "down_proj.weight"], t[m + "down_proj.weight"], "dsv3 adp shared experts replicated")
    eq(e["model.embed_tokens.weight"], t["model.embed_tokens.weight"], "dsv3 adp embed")
    eq(e["lm_head.weight"], t["lm_head.weight"], "dsv3 adp lm_head replicated (no padding)")
    eq(e["model.layers.2.eh_proj.weight"], t["model.layers.2.eh_proj.weight"], "dsv3 adp eh_proj replicated")
    x = "model.layers.1.mlp.experts."
    w31 = np.stack([np.concatenate([t[x + "%d.up_proj.weight" % j][1][2:4],
                                    t[x + "%d.gate_proj.weight" % j][1][2:4]]) for j in range(4)])
    eq(e[x + "backend.w3_w1_weight"], ("BF16", w31), "dsv3 adp routed experts keep moe_tp split")
    # lm_head vocab-parallel T=4: ceil(6/4) = 2 rows; rank 3 rows 6.. -> all zero padding.
    e = expect(d, 4, 3)
    eq(e["lm_head.weight"], ("BF16", np.zeros((2, 8), np.uint16)), "dsv3 lm_head rank3/4 zero block")
    eq(e["model.embed_tokens.weight"], t["model.embed_tokens.weight"], "dsv3 embed replicated T4")


def names_of(e, prefix):
    return sorted(n[len(prefix):] for n in e if n.startswith(prefix))


def test_vllm_llama(tmp):
    # vocabulary: V=250 -> Vp=256 at T=1,2,4.
    d = os.path.join(tmp, "vllm_llama")
    _, t = llama_ckpt(d, V=250, I=12)
    emb, lm = t["model.embed_tokens.weight"][1], t["lm_head.weight"][1]
    for T, r, a, b, rows in ((1, 0, 0, 250, 256), (2, 1, 128, 250, 128), (4, 3, 192, 250, 64),
                             (4, 0, 0, 64, 64)):
        e = expect(d, T, r, target="vllm")
        want = np.zeros((rows, 8), np.uint16)
        want[:b - a] = emb[a:b]
        eq(e["model.embed_tokens.weight"], ("BF16", want), "vllm vocab V250 T%d r%d" % (T, r))
        want = np.zeros((rows, 8), np.uint16)
        want[:b - a] = lm[a:b]
        eq(e["lm_head.weight"], ("BF16", want), "vllm lm_head V250 T%d r%d" % (T, r))
    # same split rules as trtllm elsewhere (GQA duplication), names unchanged.
    e = expect(d, 4, 1, target="vllm")
    q = t["model.layers.0.self_attn.q_proj.weight"][1]
    k = t["model.layers.0.self_attn.k_proj.weight"][1]
    v = t["model.layers.0.self_attn.v_proj.weight"][1]
    eq(e["model.layers.0.self_attn.qkv_proj.weight"], ("BF16", np.concatenate([q[2:4], k[0:2], v[0:2]])),
       "vllm llama qkv rank1/4")
    # Vp=256 not divisible by T=... (64 * 1 = 64 rows at V=10: T=3 -> error)
    d2 = os.path.join(tmp, "vllm_llama_small")
    llama_ckpt(d2, V=10, I=10, nh=4, kvh=4)
    try:
        expect(d2, 4, 0, target="vllm")
        check(False, "vllm inexact split (I=10, T=4) must fail")
    except ref.BadInput as ex:
        check("mlp.gate_proj.weight" in str(ex) and "4" in str(ex), "vllm inexact split names tensor: %s" % ex)
    expect(d2, 4, 0)  # trtllm: shard rule, not exact -> fine
    rc, _, se = run_cli("list", d2, "--tp-size", "4", "--tp-rank", "0", "--target", "vllm")
    check(rc == 2 and "gate_proj" in se, "cli vllm inexact split -> 2 (%s)" % se)
    # tied: only model.embed_tokens.weight under vllm; trtllm lists lm_head.weight.
    d3 = os.path.join(tmp, "vllm_tied")
    _, t3 = llama_ckpt(d3, V=10, tie=True)
    e = expect(d3, 2, 0, target="vllm")
    check("lm_head.weight" not in e and "model.embed_tokens.weight" in e, "vllm tied: no lm_head entry")
    check(e["model.embed_tokens.weight"].shape == (32, 8), "vllm tied embed Vp=64 / 2")
    check("lm_head.weight" in expect(d3, 2, 0), "trtllm tied lists lm_head")
    # biases: Llama with config `bias` true -> q/k/v and o_proj biases under vllm, none under trtllm.
    d4 = os.path.join(tmp, "vllm_llama_bias")
    _, t4 = llama_ckpt(d4, qkv_bias=True, extra_cfg={"bias": True})
    for i in range(2):
        t4["model.layers.%d.self_attn.o_proj.bias" % i] = bf16(8)
    write_ckpt(d4, json.load(open(os.path.join(d4, "config.json"))), t4, shards=2)
    e = expect(d4, 2, 1, target="vllm")
    a = "model.layers.0.self_attn."
    eq(e[a + "qkv_proj.bias"], ("BF16", np.concatenate([t4[a + "q_proj.bias"][1][4:8], t4[a + "k_proj.bias"][1][2:4],
                                                        t4[a + "v_proj.bias"][1][2:4]])), "vllm llama bias=true qkv bias")
    eq(e[a + "o_proj.bias"], t4[a + "o_proj.bias"], "vllm llama o_proj bias replicated")
    et = expect(d4, 2, 1)
    check(not any(n.endswith(".bias") for n in et), "trtllm llama `bias` alone: no biases")
    # Qwen3 with attention_bias: q/k/v bias, no o_proj bias under vllm; Qwen3 without: none.
    d5 = os.path.join(tmp, "vllm_qwen3_bias")
    _, t5 = llama_ckpt(d5, arch="Qwen3ForCausalLM", qkv_bias=True, qk_norm=True,
                       extra_cfg={"attention_bias": True})
    for i in range(2):
        t5["model.layers.%d.self_attn.o_proj.bias" % i] = bf16(8)
    write_ckpt(d5, json.load(open(os.path.join(d5, "config.json"))), t5, shards=2)
    e = expect(d5, 1, 0, target="vllm")
    check(a + "qkv_proj.bias" in e and a + "o_proj.bias" not in e, "vllm qwen3 attention_bias: qkv bias only")
    d6 = os.path.join(tmp, "vllm_qwen3_nobias")
    llama_ckpt(d6, arch="Qwen3ForCausalLM", qkv_bias=True, qk_norm=True)
    e = expect(d6, 1, 0, target="vllm")
    check(not any(n.endswith(".bias") for n in e), "vllm qwen3 without attention_bias: biases skipped")
    # Qwen2: q/k/v biases always.
    d7 = os.path.join(tmp, "vllm_qwen2")
    llama_ckpt(d7, arch="Qwen2ForCausalLM", qkv_bias=True)
    e = expect(d7, 2, 0, target="vllm")
    check(a + "qkv_proj.bias" in e and a + "o_proj.bias" not in e, "vllm qwen2 qkv bias")


def test_vllm_moe(tmp):
    for arch, g, u, dn, mod in (("Qwen3MoeForCausalLM", "mlp.experts.%d.gate_proj", "mlp.experts.%d.up_proj",
                                 "mlp.experts.%d.down_proj", "mlp"),
                                ("MixtralForCausalLM", "block_sparse_moe.experts.%d.w1",
                                 "block_sparse_moe.experts.%d.w3", "block_sparse_moe.experts.%d.w2",
                                 "block_sparse_moe")):
        d = os.path.join(tmp, "vllm_" + arch)
        t = moe_ckpt(d, arch)
        p = "model.layers.1."
        # P=1, T=2, rank 1: all 4 experts, I=4 split -> rows 2..3; gate rows first.
        e = expect(d, 2, 1, target="vllm")
        w13 = np.stack([np.concatenate([t[p + (g % j) + ".weight"][1][2:4], t[p + (u % j) + ".weight"][1][2:4]])
                        for j in range(4)])
        eq(e[p + mod + ".experts.w13_weight"], ("BF16", w13), "vllm %s w13 gate-first P1" % arch)
        eq(e[p + mod + ".experts.w2_weight"], ("BF16", np.stack([t[p + (dn % j) + ".weight"][1][:, 2:4]
                                                                 for j in range(4)])), "vllm %s w2 P1" % arch)
        eq(e[p + mod + ".gate.weight"], t[p + mod + ".gate.weight"], "vllm %s router name" % arch)
        check(not any("backend" in n or "w3_w1" in n for n in e), "vllm %s no trtllm expert names" % arch)
        if arch == "MixtralForCausalLM":
            check(not any(".mlp." in n for n in e), "vllm mixtral keeps block_sparse_moe")
    # EP remainder: E=5, T=P=2 -> rank 0 experts 0,1,2; rank 1 experts 3,4; I_p = I.
    d = os.path.join(tmp, "vllm_moe_e5")
    t = moe_ckpt(d, "Qwen3MoeForCausalLM", E=5)
    p = "model.layers.1.mlp."
    for r, js in ((0, (0, 1, 2)), (1, (3, 4))):
        e = expect(d, 2, r, ep=2, target="vllm")
        w13 = np.stack([np.concatenate([t[p + "experts.%d.gate_proj.weight" % j][1],
                                        t[p + "experts.%d.up_proj.weight" % j][1]]) for j in js])
        eq(e[p + "experts.w13_weight"], ("BF16", w13), "vllm EP E5 T2 rank%d experts %s" % (r, js))
        check(e[p + "experts.w2_weight"].shape == (len(js), 8, 4), "vllm EP rank%d w2 shape" % r)
    try:
        expect(d, 2, 0, ep=2)
        check(False, "trtllm E=5 P=2 must fail")
    except ref.BadInput:
        check(True, "")


def test_vllm_dsv3(tmp):
    for fp8 in (False, True):
        d = os.path.join(tmp, "vllm_dsv3_%s" % ("fp8" if fp8 else "bf16"))
        t = dsv3_ckpt(d, fp8)
        dt = "F8_E4M3" if fp8 else "BF16"
        tag = "vllm dsv3 " + ("fp8" if fp8 else "bf16")
        e = expect(d, 2, 1, target="vllm")
        a = "model.layers.1.self_attn."
        eq(e[a + "fused_qkv_a_proj.weight"], (dt, np.concatenate([t[a + "q_a_proj.weight"][1],
                                                                  t[a + "kv_a_proj_with_mqa.weight"][1]])),
           tag + " fused_qkv_a_proj")
        eq(e[a + "q_b_proj.weight"], (dt, t[a + "q_b_proj.weight"][1][12:24]), tag + " q_b rows")
        eq(e[a + "kv_b_proj.weight"], (dt, t[a + "kv_b_proj.weight"][1][16:32]), tag + " kv_b rows (heads 2,3)")
        eq(e[a + "o_proj.weight"], (dt, t[a + "o_proj.weight"][1][:, 8:16]), tag + " o_proj cols")
        check(not any("k_b_proj_trans" in n or ".v_b_proj" in n for n in e), tag + " no k_b/v_b params")
        # V=6 -> Vp=64, 32 rows each: rank 1 rows [32, 6) -> all zeros; rank 0 rows 0..5 then zeros.
        eq(e["model.embed_tokens.weight"], ("BF16", np.zeros((32, 8), np.uint16)), tag + " embed rank1 zeros")
        e0 = expect(d, 2, 0, target="vllm")
        want = np.zeros((32, 8), np.uint16)
        want[:6] = t["lm_head.weight"][1]
        eq(e0["lm_head.weight"], ("BF16", want), tag + " lm_head rank0 Vp")
        m = "model.layers.1.mlp."
        check(m + "gate.e_score_correction_bias" not in e, tag + " no e_score bias without noaux_tc")
        check(not any(n.startswith("model.layers.2.") for n in e), tag + " no MTP parameters")
        dm = "model.layers.0.mlp."
        eq(e[dm + "gate_up_proj.weight"], (dt, np.concatenate([t[dm + "gate_proj.weight"][1][4:8],
                                                               t[dm + "up_proj.weight"][1][4:8]])),
           tag + " dense MLP split over T")
        s = m + "shared_experts."
        eq(e[s + "down_proj.weight"], (dt, t[s + "down_proj.weight"][1][:, 2:4]), tag + " shared experts over T")
        w13 = np.stack([np.concatenate([t[m + "experts.%d.gate_proj.weight" % j][1][2:4],
                                        t[m + "experts.%d.up_proj.weight" % j][1][2:4]]) for j in range(4)])
        eq(e[m + "experts.w13_weight"], (dt, w13), tag + " experts w13 gate-first")
        if fp8:
            eq(e[a + "fused_qkv_a_proj.weight_scale_inv"],
               ("F32", np.concatenate([t[a + "q_a_proj.weight_scale_inv"][1],
                                       t[a + "kv_a_proj_with_mqa.weight_scale_inv"][1]])), tag + " fused A scale")
            eq(e[a + "kv_b_proj.weight_scale_inv"], ("F32", t[a + "kv_b_proj.weight_scale_inv"][1][8:16]),
               tag + " kv_b scale rows")
            eq(e[a + "o_proj.weight_scale_inv"], ("F32", t[a + "o_proj.weight_scale_inv"][1][:, 4:8]),
               tag + " o_proj scale cols")
            ws = np.stack([np.concatenate([t[m + "experts.%d.gate_proj.weight_scale_inv" % j][1][1:2],
                                           t[m + "experts.%d.up_proj.weight_scale_inv" % j][1][1:2]])
                           for j in range(4)])
            eq(e[m + "experts.w13_weight_scale_inv"], ("F32", ws), tag + " w13 scale")
            w2s = np.stack([t[m + "experts.%d.down_proj.weight_scale_inv" % j][1][:, 1:2] for j in range(4)])
            eq(e[m + "experts.w2_weight_scale_inv"], ("F32", w2s), tag + " w2 scale")
            check(not any(n.endswith(".weight_scale") or "scaling_factor" in n for n in e),
                  tag + " no trtllm scale names")
            # T=4: shared / routed I=4 -> 1 row per rank, not a multiple of the block (2) -> error.
            try:
                expect(d, 4, 0, target="vllm")
                check(False, tag + " T4 unaligned FP8 split must fail")
            except ref.BadInput as ex:
                check("block" in str(ex), tag + " T4 unaligned FP8 split: %s" % ex)
        else:
            expect(d, 4, 0, target="vllm")  # BF16: 1 row per rank is fine
        # EP P=T=2: rank 1 experts 2,3 whole.
        ep = expect(d, 2, 1, ep=2, target="vllm")
        w13 = np.stack([np.concatenate([t[m + "experts.%d.gate_proj.weight" % j][1],
                                        t[m + "experts.%d.up_proj.weight" % j][1]]) for j in (2, 3)])
        eq(ep[m + "experts.w13_weight"], (dt, w13), tag + " EP=T experts")
        eq(ep[s + "down_proj.weight"], (dt, t[s + "down_proj.weight"][1][:, 2:4]),
           tag + " shared experts stay split under EP")
        out = os.path.join(tmp, "vllm_dsv3.safetensors")
        rc, _, se = run_cli("expect", d, "--tp-size", "2", "--tp-rank", "0", "--target", "vllm", "--out", out)
        rc2, so2, _ = run_cli("check", d, out, "--tp-size", "2", "--tp-rank", "0", "--target", "vllm")
        rc3, so3, _ = run_cli("check", d, out, "--tp-size", "2", "--tp-rank", "0")
        check(rc == 0 and rc2 == 0 and rc3 == 1, tag + " cli round trip %d %d %d %s" % (rc, rc2, rc3, se))
    # topk_method noaux_tc -> e_score_correction_bias present.
    d = os.path.join(tmp, "vllm_dsv3_noaux")
    t = dsv3_ckpt(d, False, extra_cfg={"topk_method": "noaux_tc"})
    e = expect(d, 2, 0, target="vllm")
    m = "model.layers.1.mlp."
    eq(e[m + "gate.e_score_correction_bias"], t[m + "gate.e_score_correction_bias"], "vllm dsv3 noaux_tc bias")
    # FP8 fused part not block-aligned: q_a_proj with 3 rows (block 2) -> error under vllm only.
    d = os.path.join(tmp, "vllm_dsv3_qr3")
    dsv3_ckpt(d, True, qr=3)
    try:
        expect(d, 1, 0, target="vllm")
        check(False, "vllm fused FP8 non-final part unaligned must fail")
    except ref.BadInput as ex:
        check("q_a_proj" in str(ex), "vllm fused FP8 unaligned names q_a_proj: %s" % ex)
    expect(d, 1, 0)  # trtllm accepts it


def test_layout_errors(tmp):
    d = os.path.join(tmp, "dsv3_fp8")  # written by test_dsv3
    base = ["list", d, "--tp-size", "4", "--tp-rank", "0"]
    for extra, what in ((["--target", "vllm", "--attention-dp"], "adp with vllm"),
                        (["--target", "vllm", "--ep-size", "2"], "vllm ep 2 of 4"),
                        (["--target", "vllm", "--mtp-layers", "1"], "vllm mtp 1"),
                        (["--target", "sglang"], "unknown target"),
                        (["--gpus-per-node", "0"], "G 0")):
        rc, _, se = run_cli(*(base + extra))
        check(rc == 2, "cli %s -> 2 (rc=%d %s)" % (what, rc, se.strip()[-120:]))
    for extra in (["--target", "vllm", "--ep-size", "4"], ["--target", "vllm", "--mtp-layers", "0"],
                  ["--attention-dp", "--ep-size", "2", "--gpus-per-node", "2"]):
        rc, _, se = run_cli(*(["list", os.path.join(tmp, "dsv3_bf16"), "--tp-size", "4", "--tp-rank", "0"] + extra))
        check(rc == 0, "cli %s -> 0 (rc=%d %s)" % (" ".join(extra), rc, se.strip()[-200:]))
    rc, _, se = run_cli("list", os.path.join(tmp, "llama"), "--tp-size", "2", "--tp-rank", "0", "--attention-dp")
    check(rc == 2 and "attention-dp" in se, "cli llama --attention-dp -> 2 (%s)" % se)
    rc, _, se = run_cli("list", os.path.join(tmp, "gpt2_prefix"), "--tp-size", "2", "--tp-rank", "0",
                        "--target", "vllm")
    check(rc == 2 and "not served" in se, "cli gpt2 vllm -> 2 not served (%s)" % se)


def test_nvfp4_experts(tmp):
    """NVFP4 experts.  vllm: per-slot global scales as stored.  trtllm CUTLASS: fc31_alpha uses
    w1's weight_scale_2 when w3's is close, else the larger; w1/w3 input scales must be close."""
    H, I, E = 128, 32, 2

    def build(name, gate_gs, gate_is=2.0):
        d = os.path.join(tmp, name)
        cfg = {"architectures": ["Qwen3MoeForCausalLM"], "hidden_size": H, "num_attention_heads": 2,
               "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 4, "num_hidden_layers": 1,
               "num_experts": E, "moe_intermediate_size": I, "intermediate_size": I,
               "quantization_config": {"quant_method": "compressed-tensors"}}
        t = {"model.embed_tokens.weight": bf16(4, H), "lm_head.weight": bf16(4, H), "model.norm.weight": bf16(H)}
        p = "model.layers.0."
        for n in ("input_layernorm", "post_attention_layernorm"):
            t[p + n + ".weight"] = bf16(H)
        for x in "qkv":
            t[p + "self_attn.%s_proj.weight" % x] = bf16(32, H)
        t[p + "self_attn.o_proj.weight"] = bf16(H, 32)
        t[p + "self_attn.q_norm.weight"] = bf16(16)
        t[p + "self_attn.k_norm.weight"] = bf16(16)
        t[p + "mlp.gate.weight"] = bf16(E, H)
        for j in range(E):
            for w, o, i, gs, ins in (("gate_proj", I, H, gate_gs, gate_is), ("up_proj", I, H, 4.0, 2.0),
                                     ("down_proj", H, I, 4.0, 2.0)):
                k = p + "mlp.experts.%d.%s." % (j, w)
                t[k + "weight_packed"] = u8("U8", o, i // 2)
                t[k + "weight_scale"] = u8("F8_E4M3", o, i // 16)
                t[k + "weight_global_scale"] = f32([gs])
                t[k + "input_global_scale"] = f32([ins])
        write_ckpt(d, cfg, t)
        return d

    m = "model.layers.0.mlp.experts."
    one = np.float32(1.0)
    fis = one / (one / np.float32(2.0))  # 1 / max over experts of the ModelOpt input scale 0.5
    for name, gate_gs, w in (("nvfp4_moe_close", 4.0 * (1 + 5e-6), one / np.float32(4.0 * (1 + 5e-6))),
                             ("nvfp4_moe_far", 4.001, np.float32(0.25))):
        d = build(name, gate_gs)
        e = expect(d, 1, 0)
        alpha = one / (fis * (one / w))
        eq(e[m + "backend.fc31_alpha"], f32([alpha, alpha]), "nvfp4 trtllm fc31_alpha (%s)" % name)
        eq(e[m + "backend.fc31_input_scale"], ("F32", np.array(fis, np.float32).view(np.uint32)),
           "nvfp4 trtllm fc31_input_scale 0-d")
        check(e[m + "backend.w3_w1_weight"].dtype == "I64" and e[m + "backend.w3_w1_weight"].shape == (2, 128, 8),
              "nvfp4 trtllm w3_w1_weight I64 [E, A=128, H/16]")
        v = expect(d, 1, 0, target="vllm")
        eq(v[m + "w13_weight_global_scale"], f32([gate_gs, 4.0, gate_gs, 4.0], (2, 2)),
           "nvfp4 vllm expert global slots as stored (%s)" % name)
    d = build("nvfp4_moe_far_input", 4.0, gate_is=2.01)
    rc, _, se = run_cli("list", d, "--tp-size", "1", "--tp-rank", "0")
    check(rc == 2 and "input scales not close" in se, "nvfp4 expert input scales beyond tolerance -> 2 (%s)" % se)


def test_gcd_rule():
    """trtllm DeepSeek dense MLP t = gcd(I/b, T), node cap t > G -> gcd(t, G); b from the config."""
    fp8 = {"architectures": ["DeepseekV3ForCausalLM"],
           "quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 128]}}
    bf = {"architectures": ["DeepseekV3ForCausalLM"]}
    nv = {"architectures": ["DeepseekV3ForCausalLM"], "quantization_config": {"quant_method": "compressed-tensors"}}
    for cfg, I, T, r, G, cap, want in (
            (fp8, 384, 2, 1, 8, True, (1, 0)),      # 3 blocks at T=2: both ranks whole MLP
            (fp8, 18432, 16, 11, 8, True, (8, 3)),  # 144 blocks: gcd 16 > 8 -> gcd(16, 8) = 8
            (fp8, 2048, 4, 3, 2, True, (2, 1)),     # 16 blocks, T=4, G=2 -> 2; rank 3 -> index 1
            (fp8, 2048, 4, 3, 2, False, (4, 3)),    # shared experts: no node cap
            (bf, 12, 8, 5, 8, True, (4, 1)),        # b = 1: gcd(12, 8) = 4
            (nv, 48, 4, 2, 8, True, (1, 0))):       # b = 16: gcd(3, 4) = 1
        b = ref.DeepseekV3Builder(None, cfg, ref.Layout(T, r, gpus_per_node=G))
        got = b.gcd_tp(I, cap)
        check(got == want, "gcd rule I=%d T=%d r=%d G=%d cap=%s: %s != %s" % (I, T, r, G, cap, got, want))
    b = ref.DeepseekV3Builder(None, fp8, ref.Layout(4, 3, attention_dp=True))
    check(b.gcd_tp(2048, True) == (1, 0), "gcd rule under attention-DP: replicated")


def test_shard_rule():
    check(ref.shard_range(10, 4, 0) == (0, 3) and ref.shard_range(10, 4, 3) == (9, 10),
          "shard rule 10/4")
    check(ref.shard_range(5, 4, 3) == (5, 5), "shard rule empty last slice")
    check(ref.shard_range(8, 4, 2) == (4, 6), "shard rule even")


def test_fp8_arithmetic():
    """E4M3 rounding, BF16 rounding and TensorRT-LLM's requantisation against exact rational
    arithmetic (fractions.Fraction: round() is ties-to-even)."""
    from fractions import Fraction as Q

    def rne(x, mant_bits, min_exp):
        if x == 0:
            return Q(0)
        a = abs(x)
        e = a.numerator.bit_length() - a.denominator.bit_length()
        if Q(2) ** e > a:
            e -= 1
        ulp = Q(2) ** (max(e, min_exp) - mant_bits)
        return (1 if x > 0 else -1) * round(a / ulp) * ulp

    def e4m3(x):
        r = rne(x, 3, -6)
        return min(abs(r), Q(448)) * (1 if r >= 0 else -1)

    for code in range(256):
        if code & 0x7F == 0x7F:
            continue
        v = np.float32(ref.E4M3[code])
        check(int(ref.e4m3_encode(np.array([v]))[0]) == code, "e4m3 round trip of code 0x%02x" % code)
    # Midpoints between neighbouring codes go to the even code; beyond 448 saturates.
    pos = ref.E4M3[:0x7F]
    mids = ((pos[:-1] + pos[1:]) / 2).astype(np.float32)
    got = ref.e4m3_encode(mids)
    want = [i if i % 2 == 0 else i + 1 for i in range(len(mids))]
    check(list(got) == want, "e4m3 midpoints round to the even code")
    check(list(ref.e4m3_encode(np.array([463.9, 470.0, -1e9, -0.0], np.float32))) == [0x7E, 0x7E, 0xFE, 0x80],
          "e4m3 saturates finite values and keeps the sign of zero")
    rng = np.random.default_rng(5)
    xs = (rng.standard_normal(2000) * 10.0 ** rng.uniform(-3, 2, 2000)).astype(np.float32)
    b = ref.bf16_round(xs)
    check(all(Q(float(bb)) == rne(Q(float(x)), 7, -126) for x, bb in zip(xs, b)), "bf16_round is RNE")
    codes = rng.integers(0, 256, 4000).astype(np.uint8)
    codes = np.where((codes & 0x7F) == 0x7F, codes ^ 1, codes).astype(np.uint8)
    for s, smax in ((0.0123, 0.05), (0.37, 0.3701), (1.5, 1.5), (0.004, 1.9)):
        s32, m32 = np.float32(s), np.float32(smax)
        got = ref.trt_requant(codes, s32, m32)
        sb, mb = rne(Q(float(s32)), 7, -126), rne(Q(float(m32)), 7, -126)
        bad = 0
        for c, g in zip(codes, got):
            t = rne(Q(float(ref.E4M3[c])) * sb, 7, -126)
            u = rne(rne(t / mb, 23, -126), 7, -126)
            w = e4m3(u)
            want_code = int(ref.e4m3_encode(np.array([float(w)], np.float32))[0]) if w != 0 else (c & 0x80)
            bad += int(g) != want_code
        check(bad == 0, "trt_requant s=%g smax=%g: %d codes differ from exact arithmetic" % (s, smax, bad))
    same = ref.trt_requant(codes, np.float32(0.37), np.float32(0.37))
    check(np.array_equal(same, codes), "a part at the maximum scale comes back unchanged")


def test_dsv3_trtllm_kv_b_dequant(tmp):
    """Current TensorRT-LLM: an FP8 kv_b_proj is dequantised to BF16 (f32 product with its block's
    scale, BF16 RNE), then split as before; no scale parameters for it."""
    d = os.path.join(tmp, "dsv3_dequant")
    t = dsv3_ckpt(d, True)
    e = expect(d, 2, 1)
    p = "model.layers.1.self_attn."
    w, s = t[p + "kv_b_proj.weight"][1], t[p + "kv_b_proj.weight_scale_inv"][1]

    def decode(c):
        sign = -1.0 if c & 0x80 else 1.0
        ex, m = (c >> 3) & 15, c & 7
        if ex == 15 and m == 7:
            return float("nan")
        return sign * (m / 8.0 * 2.0 ** -6 if ex == 0 else (1 + m / 8.0) * 2.0 ** (ex - 7))

    def bf16(x):
        b = struct.unpack("<I", struct.pack("<f", x))[0]
        if x != x:
            return 0x7FC0
        return ((b + 0x7FFF + ((b >> 16) & 1)) >> 16) & 0xFFFF

    full = np.zeros(w.shape, np.uint16)
    for i in range(w.shape[0]):
        for j in range(w.shape[1]):
            sc = float(s.view(np.float32)[i // 2, j // 2])  # the self-test's 2x2 blocks
            full[i, j] = bf16(float(np.float32(np.float32(decode(int(w[i, j]))) * np.float32(sc))))
    kvb = full.reshape(4, 8, 4)[2:4]
    kn, vv = kvb[:, :4], kvb[:, 4:]
    eq(e[p + "kv_b_proj.weight"], ("BF16", np.concatenate([kn.reshape(8, 4), vv.reshape(8, 4)])), "dequant kv_b_proj")
    eq(e[p + "k_b_proj_trans"], ("BF16", kn.transpose(0, 2, 1)), "dequant k_b_proj_trans")
    eq(e[p + "v_b_proj"], ("BF16", vv), "dequant v_b_proj")
    check(not any(n.startswith(p) and ("k_b_proj_trans_scale" in n or "v_b_proj_scale" in n or
                                       "kv_b_proj.weight_scale" in n) for n in e), "dequant: no kv_b scales")


def main():
    test_fp8_arithmetic()
    test_shard_rule()
    test_gcd_rule()
    with tempfile.TemporaryDirectory() as tmp:
        test_llama(tmp)
        test_qwen2(tmp)
        test_qwen3(tmp)
        test_gpt2(tmp)
        test_moe(tmp)
        # The layout of TensorRT-LLM releases before kv_b_proj left FP8 (hand-checked above), then
        # the current one.
        ref.DeepseekV3Builder.trtllm_dequant_kv_b = False
        test_dsv3(tmp)
        test_dsv3_trtllm_split_rules(tmp)
        ref.DeepseekV3Builder.trtllm_dequant_kv_b = True
        test_dsv3_trtllm_kv_b_dequant(tmp)
        test_nvfp4(tmp)
        test_vllm_llama(tmp)
        test_vllm_moe(tmp)
        test_vllm_dsv3(tmp)
        test_layout_errors(tmp)
        test_nvfp4_experts(tmp)
    print("%d checks, %d failures" % (CHECKS[0], len(FAILS)))
    return 1 if FAILS else 0


if __name__ == "__main__":
    sys.exit(main())
