#!/usr/bin/env python3
"""Small GGUF files of the `bert` and `gpt2` architectures, for tfbench's
tests of the `gguf` benchmark beyond `llama` (run by scripts/fetch-test-data.sh
into DATA/arch/, with the gguf, numpy and safetensors PyPI packages):

- minilm-l6.{f32,f16,q8_0}.gguf: the real MiniLM-L6 (DATA/minilm, a Hugging
  Face BERT in safetensors) converted as llama.cpp's convert_hf_to_gguf.py
  does for `BertModel` (conversion/bert.py: tensor names, the pooler
  dropped, the WordPiece vocabulary in llama.cpp's "phantom space" form,
  token type count, causal attention off, mean pooling); matrices and the
  token embedding in the file's type, norms, biases and the position and
  type tables in F32.
- gpt2-tiny.{f32,f16,q8_0,q4_1}.gguf: a seeded random GPT-2 (2 layers,
  hidden 128, 4 heads, FFN 512, vocabulary 512, context 256) with llama.cpp's
  tensor names (the fused `attn_qkv`, biases everywhere, tied output), no
  tokenizer (`tokenizer.ggml.model = none`, llama.cpp's dummy vocabulary).
  Weights are scaled so the logits spread over several units (a greedy
  continuation of random weights at GPT-2's init would be all near ties).
- gpt2-tiny-hf/: the same GPT-2 weights as a Hugging Face directory
  (config.json, model.safetensors with GPT-2's Conv1D `[in, out]` layout).
- tokenizer.json in both directories: a byte-level BPE of exactly the
  models' 512 ids (the 256 bytes, then 256 merges learned here, in pure
  Python, from Genesis 1-3, src/suites/inference/text/genesis.txt: the most
  frequent adjacent pair, ties to the smallest pair, over the whole text as
  one sequence), no pre-tokenizer regex, ByteLevel decoder; what tfbench's
  `tokenize` case times for a directory (its reference ids:
  scripts/hf_tokens_reference.py).
- llama-tiny-hf/ and llama-tiny.f32.gguf: a seeded random LLaMA (2 layers,
  hidden 128, 4 heads / 2 KV heads, FFN 256, vocabulary 512, untied head)
  as a Hugging Face directory and as the GGUF llama.cpp's converter makes of
  it (Q and K rows permuted for ggml's adjacent-pair RoPE, as
  `LlamaModel.permute` in conversion/llama.py does).

- qwen2-tiny.f32.gguf, qwen3-tiny.f32.gguf, phi3-tiny.f32.gguf,
  gemma3-tiny.{f16,q5_0}.gguf: seeded random decoders of the LLaMA family's
  other GGUF architectures (2 layers, 6 for gemma3; width 64), each with
  llama.cpp's tensor names and the parts its graph reads: qwen2's Q/K/V
  biases; qwen3's QK norms and a head width (32) that is not width/heads;
  phi3's fused `attn_qkv` and gate+up `ffn_up`; gemma3's QK norms, post-
  attention and post-FFN norms, head width 48, sliding window of 8 on
  layers 0-4 (the default pattern of 6) with its own RoPE base, a final
  logit soft-cap of 30, GeGLU, embedding scaled by sqrt(64) (done by
  llama.cpp, not stored). Each carries a real tokenizer, copied whole
  (every `tokenizer.*` key) from a file of its family: llama.cpp's
  ggml-vocab-qwen2.gguf and ggml-vocab-phi-3.gguf (DATA/arch, copied there
  by scripts/fetch-test-data.sh), and Gemma 3 270M (DATA/gemma3), so the vocabulary is the real one and the
  embedding as wide. gemma3-tiny.q5_0.gguf stores the matrices in Q5_0 and
  the (tied) embedding in Q8_0, as llama.cpp's Q4_K_M mix does for Gemma 3
  270M's 640-wide rows.

Deterministic: the same bytes every run, so the llama.cpp fixtures
(tests/fixtures/llamacpp_*.json) stay valid.

    python3 scripts/make_arch_models.py DATA [family]   # family: only those five files
"""
import json
import os
import sys

import numpy as np
from gguf import GGMLQuantizationType as T
from gguf import GGUFWriter, PoolingType, TokenType
from gguf.quants import quantize
from safetensors.numpy import load_file, save_file
from tokref import byte_chars, merge_pair

TYPES = {"f32": T.F32, "f16": T.F16, "q8_0": T.Q8_0, "q4_1": T.Q4_1, "q5_0": T.Q5_0}


def put(w, name, a, ty):
    """A tensor in `ty` (matrices) or F32 (everything 1-D)."""
    a = np.ascontiguousarray(a, dtype=np.float32)
    if a.ndim == 1 or ty == T.F32:
        w.add_tensor(name, a)
    elif ty == T.F16:
        w.add_tensor(name, a.astype(np.float16))
    else:
        w.add_tensor(name, quantize(a, ty), raw_dtype=ty)


def finish(w, path):
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    os.replace(path + ".partial", path)


def minilm(src, dst, tyname):
    ty = TYPES[tyname]
    cfg = json.load(open(os.path.join(src, "config.json")))
    st = load_file(os.path.join(src, "model.safetensors"))
    g = lambda n: st[n].astype(np.float32)  # noqa: E731
    path = os.path.join(dst, f"minilm-l6.{tyname}.gguf")
    w = GGUFWriter(path + ".partial", "bert")
    w.add_name(f"MiniLM-L6 {tyname.upper()} (tfbench test file)")
    w.add_context_length(cfg["max_position_embeddings"])
    w.add_embedding_length(cfg["hidden_size"])
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_block_count(cfg["num_hidden_layers"])
    w.add_head_count(cfg["num_attention_heads"])
    w.add_layer_norm_eps(cfg["layer_norm_eps"])
    w.add_causal_attention(False)
    w.add_pooling_type(PoolingType.MEAN)  # mean, as sentence-transformers' 1_Pooling
    w.add_file_type({"f32": 0, "f16": 1, "q8_0": 7, "q4_1": 3}[tyname])
    vocab = [line.rstrip("\n") for line in open(os.path.join(src, "vocab.txt"), encoding="utf-8")]
    special = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"}
    types = [TokenType.CONTROL if t in special else TokenType.NORMAL for t in vocab]
    phantom = [t if t in special else (t[2:] if t.startswith("##") else "\u2581" + t) for t in vocab]
    w.add_token_type_count(cfg["type_vocab_size"])
    w.add_tokenizer_model("bert")
    w.add_tokenizer_pre("default")
    w.add_token_list(phantom)
    w.add_token_types(types)
    ix = {t: i for i, t in enumerate(vocab)}
    w.add_unk_token_id(ix["[UNK]"])
    w.add_sep_token_id(ix["[SEP]"])
    w.add_pad_token_id(ix["[PAD]"])
    # BERT's [CLS] and [SEP] are GGUF's BOS and EOS (llama.cpp's WPM vocabulary).
    w.add_bos_token_id(ix["[CLS]"])
    w.add_eos_token_id(ix["[SEP]"])
    w.add_mask_token_id(ix["[MASK]"])
    put(w, "token_embd.weight", g("embeddings.word_embeddings.weight"), ty)
    put(w, "token_types.weight", g("embeddings.token_type_embeddings.weight"), T.F32)
    put(w, "position_embd.weight", g("embeddings.position_embeddings.weight"), T.F32)
    put(w, "token_embd_norm.weight", g("embeddings.LayerNorm.weight"), ty)
    put(w, "token_embd_norm.bias", g("embeddings.LayerNorm.bias"), ty)
    for i in range(cfg["num_hidden_layers"]):
        p = f"encoder.layer.{i}."
        names = [("attn_q", "attention.self.query"), ("attn_k", "attention.self.key"),
                 ("attn_v", "attention.self.value"), ("attn_output", "attention.output.dense"),
                 ("attn_output_norm", "attention.output.LayerNorm"), ("ffn_up", "intermediate.dense"),
                 ("ffn_down", "output.dense"), ("layer_output_norm", "output.LayerNorm")]
        for ours, hf in names:
            put(w, f"blk.{i}.{ours}.weight", g(p + hf + ".weight"), ty)
            put(w, f"blk.{i}.{ours}.bias", g(p + hf + ".bias"), ty)
    finish(w, path)


def bpe512():
    """The vocabulary (token -> id) and merges of the module doc's BPE."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src", "suites", "inference", "text",
                        "genesis.txt")
    chars = byte_chars()
    seq = [chars[b] for b in open(path, "rb").read()]
    vocab = {chars[b]: b for b in range(256)}
    merges = []
    while len(vocab) < 512:
        counts = {}
        for pair in zip(seq, seq[1:]):
            counts[pair] = counts.get(pair, 0) + 1
        (a, b), _ = min(counts.items(), key=lambda kv: (-kv[1], kv[0]))
        merges.append((a, b))
        vocab.setdefault(a + b, len(vocab))
        seq = merge_pair(seq, a, b)
    return vocab, merges


def write_tokenizer(d, bpe):
    vocab, merges = bpe
    level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}
    tok = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": [], "normalizer": None,
           "pre_tokenizer": level, "post_processor": None, "decoder": level,
           "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                     "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                     "vocab": vocab, "merges": [[a, b] for a, b in merges]}}
    with open(os.path.join(d, "tokenizer.json.partial"), "w", encoding="utf-8") as fh:
        json.dump(tok, fh, ensure_ascii=False, indent=1)
    os.replace(os.path.join(d, "tokenizer.json.partial"), os.path.join(d, "tokenizer.json"))


GPT2 = dict(layers=2, hidden=128, heads=4, ffn=512, vocab=512, ctx=256, eps=1e-5)


def gpt2_weights():
    """GPT-2 tensors by llama.cpp name, `[rows, cols]` = `[out, in]`."""
    rng = np.random.default_rng(20261125)
    c = GPT2
    h, f, v = c["hidden"], c["ffn"], c["vocab"]
    n = lambda *s, sd=1.0: (rng.standard_normal(s) * sd).astype(np.float32)  # noqa: E731
    t = {"token_embd.weight": n(v, h, sd=0.3), "position_embd.weight": n(c["ctx"], h, sd=0.1)}
    for i in range(c["layers"]):
        p = f"blk.{i}."
        for nm in ["attn_norm", "ffn_norm"]:
            t[p + nm + ".weight"] = 1 + n(h, sd=0.1)
            t[p + nm + ".bias"] = n(h, sd=0.05)
        for nm, out, inp in [("attn_qkv", 3 * h, h), ("attn_output", h, h), ("ffn_up", f, h), ("ffn_down", h, f)]:
            t[p + nm + ".weight"] = n(out, inp, sd=2.0 / np.sqrt(inp))
            t[p + nm + ".bias"] = n(out, sd=0.02)
    t["output_norm.weight"] = 1 + n(h, sd=0.1)
    t["output_norm.bias"] = n(h, sd=0.05)
    return t


def gpt2_gguf(dst, tyname, t):
    ty = TYPES[tyname]
    c = GPT2
    path = os.path.join(dst, f"gpt2-tiny.{tyname}.gguf")
    w = GGUFWriter(path + ".partial", "gpt2")
    w.add_name(f"gpt2-tiny {tyname.upper()} (tfbench test file)")
    w.add_context_length(c["ctx"])
    w.add_embedding_length(c["hidden"])
    w.add_feed_forward_length(c["ffn"])
    w.add_block_count(c["layers"])
    w.add_head_count(c["heads"])
    w.add_layer_norm_eps(c["eps"])
    w.add_vocab_size(c["vocab"])
    w.add_tokenizer_model("none")
    for name, a in t.items():
        # Positions stay F32 as in llama.cpp's converter; the rest follows the type.
        put(w, name, a, T.F32 if name == "position_embd.weight" else ty)
    finish(w, path)


def gpt2_hf(dst, t):
    """The same weights as a Hugging Face GPT2LMHeadModel directory."""
    c = GPT2
    d = os.path.join(dst, "gpt2-tiny-hf")
    os.makedirs(d, exist_ok=True)
    hf = {"transformer.wte.weight": t["token_embd.weight"], "transformer.wpe.weight": t["position_embd.weight"],
          "transformer.ln_f.weight": t["output_norm.weight"], "transformer.ln_f.bias": t["output_norm.bias"]}
    for i in range(c["layers"]):
        p, q = f"blk.{i}.", f"transformer.h.{i}."
        for ours, theirs in [("attn_norm", "ln_1"), ("ffn_norm", "ln_2")]:
            hf[q + theirs + ".weight"] = t[p + ours + ".weight"]
            hf[q + theirs + ".bias"] = t[p + ours + ".bias"]
        # Conv1D stores [in, out]: the transpose of llama.cpp's [out, in].
        for ours, theirs in [("attn_qkv", "attn.c_attn"), ("attn_output", "attn.c_proj"),
                             ("ffn_up", "mlp.c_fc"), ("ffn_down", "mlp.c_proj")]:
            hf[q + theirs + ".weight"] = np.ascontiguousarray(t[p + ours + ".weight"].T)
            hf[q + theirs + ".bias"] = t[p + ours + ".bias"]
    save_file(hf, os.path.join(d, "model.safetensors.partial"))
    os.replace(os.path.join(d, "model.safetensors.partial"), os.path.join(d, "model.safetensors"))
    cfg = {"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "n_layer": c["layers"], "n_embd": c["hidden"],
           "n_head": c["heads"], "n_inner": c["ffn"], "vocab_size": c["vocab"], "n_positions": c["ctx"],
           "n_ctx": c["ctx"], "layer_norm_epsilon": c["eps"], "activation_function": "gelu_new",
           "tie_word_embeddings": True}
    with open(os.path.join(d, "config.json"), "w") as fh:
        json.dump(cfg, fh, indent=1)


LLAMA = dict(layers=2, hidden=128, heads=4, kv_heads=2, ffn=256, vocab=512, ctx=256, eps=1e-5, theta=10000.0)


def llama_tiny(dst):
    """The tiny LLaMA as a Hugging Face directory and its F32 GGUF twin."""
    rng = np.random.default_rng(20261126)
    c = LLAMA
    h, f, v, hd = c["hidden"], c["ffn"], c["vocab"], c["hidden"] // c["heads"]
    kvd = c["kv_heads"] * hd
    n = lambda *s, sd=1.0: (rng.standard_normal(s) * sd).astype(np.float32)  # noqa: E731
    hf = {"model.embed_tokens.weight": n(v, h, sd=0.3), "model.norm.weight": 1 + n(h, sd=0.1),
          "lm_head.weight": n(v, h, sd=0.3)}
    for i in range(c["layers"]):
        p = f"model.layers.{i}."
        for nm, out, inp in [("self_attn.q_proj", h, h), ("self_attn.k_proj", kvd, h), ("self_attn.v_proj", kvd, h),
                             ("self_attn.o_proj", h, h), ("mlp.gate_proj", f, h), ("mlp.up_proj", f, h),
                             ("mlp.down_proj", h, f)]:
            hf[p + nm + ".weight"] = n(out, inp, sd=2.0 / np.sqrt(inp))
        hf[p + "input_layernorm.weight"] = 1 + n(h, sd=0.1)
        hf[p + "post_attention_layernorm.weight"] = 1 + n(h, sd=0.1)
    d = os.path.join(dst, "llama-tiny-hf")
    os.makedirs(d, exist_ok=True)
    save_file(hf, os.path.join(d, "model.safetensors.partial"))
    os.replace(os.path.join(d, "model.safetensors.partial"), os.path.join(d, "model.safetensors"))
    cfg = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "num_hidden_layers": c["layers"],
           "hidden_size": h, "num_attention_heads": c["heads"], "num_key_value_heads": c["kv_heads"],
           "intermediate_size": f, "vocab_size": v, "max_position_embeddings": c["ctx"], "rms_norm_eps": c["eps"],
           "rope_theta": c["theta"], "hidden_act": "silu", "tie_word_embeddings": False, "rope_scaling": None}
    with open(os.path.join(d, "config.json"), "w") as fh:
        json.dump(cfg, fh, indent=1)

    def permute(w, heads):
        # conversion/llama.py LlamaModel.permute: HF's rotate-half rows to
        # ggml's adjacent pairs.
        return w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)

    path = os.path.join(dst, "llama-tiny.f32.gguf")
    w = GGUFWriter(path + ".partial", "llama")
    w.add_name("llama-tiny F32 (tfbench test file)")
    w.add_context_length(c["ctx"])
    w.add_embedding_length(h)
    w.add_feed_forward_length(f)
    w.add_block_count(c["layers"])
    w.add_head_count(c["heads"])
    w.add_head_count_kv(c["kv_heads"])
    w.add_layer_norm_rms_eps(c["eps"])
    w.add_rope_freq_base(c["theta"])
    w.add_rope_dimension_count(hd)
    w.add_vocab_size(v)
    w.add_tokenizer_model("none")
    put(w, "token_embd.weight", hf["model.embed_tokens.weight"], T.F32)
    put(w, "output_norm.weight", hf["model.norm.weight"], T.F32)
    put(w, "output.weight", hf["lm_head.weight"], T.F32)
    for i in range(c["layers"]):
        p = f"model.layers.{i}."
        g = lambda nm: hf[p + nm + ".weight"]  # noqa: E731
        put(w, f"blk.{i}.attn_q.weight", permute(g("self_attn.q_proj"), c["heads"]), T.F32)
        put(w, f"blk.{i}.attn_k.weight", permute(g("self_attn.k_proj"), c["kv_heads"]), T.F32)
        put(w, f"blk.{i}.attn_v.weight", g("self_attn.v_proj"), T.F32)
        put(w, f"blk.{i}.attn_output.weight", g("self_attn.o_proj"), T.F32)
        put(w, f"blk.{i}.ffn_gate.weight", g("mlp.gate_proj"), T.F32)
        put(w, f"blk.{i}.ffn_up.weight", g("mlp.up_proj"), T.F32)
        put(w, f"blk.{i}.ffn_down.weight", g("mlp.down_proj"), T.F32)
        put(w, f"blk.{i}.attn_norm.weight", g("input_layernorm"), T.F32)
        put(w, f"blk.{i}.ffn_norm.weight", g("post_attention_layernorm"), T.F32)
    finish(w, path)


def copy_tokenizer(w, src):
    """Every `tokenizer.*` key of the GGUF file `src`, as it is there; the
    vocabulary size."""
    from gguf import GGUFReader, GGUFValueType

    r = GGUFReader(src)
    n = 0
    for k, f in r.fields.items():
        if not k.startswith("tokenizer."):
            continue
        vt = f.types[0]
        if vt == GGUFValueType.ARRAY:
            w.add_key_value(k, f.contents(), vt, sub_type=f.types[-1])
        else:
            w.add_key_value(k, f.contents(), vt)
        if k == "tokenizer.ggml.tokens":
            n = len(f.data)
    return n


FAMILY = {
    # name: arch, tokenizer source, layers, hidden, heads, kv heads, head width, ffn
    "qwen2": ("qwen2", "arch/ggml-vocab-qwen2.gguf", 2, 64, 4, 2, 16, 128),
    "qwen3": ("qwen3", "arch/ggml-vocab-qwen2.gguf", 2, 64, 4, 2, 32, 128),
    "phi3": ("phi3", "arch/ggml-vocab-phi-3.gguf", 2, 64, 4, 4, 16, 128),
    "gemma3": ("gemma3", "gemma3/gemma-3-270m-q4_k_m.gguf", 6, 64, 2, 1, 48, 128),
}


def family_tiny(data, dst, name, tyname, seed):
    """One tiny decoder of FAMILY; False when its tokenizer source is absent."""
    arch, tok, layers, h, heads, kvh, hd, f = FAMILY[name]
    src = os.path.join(data, tok)
    if not os.path.exists(src):
        print(f"make_arch_models: {src} absent, no {name}-tiny", file=sys.stderr)
        return False
    ty = TYPES[tyname]
    rng = np.random.default_rng(seed)
    n = lambda *s, sd=1.0: (rng.standard_normal(s) * sd).astype(np.float32)  # noqa: E731
    path = os.path.join(dst, f"{name}-tiny.{tyname}.gguf")
    w = GGUFWriter(path + ".partial", arch)
    w.add_name(f"{name}-tiny {tyname.upper()} (tfbench test file)")
    v = copy_tokenizer(w, src)
    qd, kvd = heads * hd, kvh * hd
    w.add_context_length(256)
    w.add_embedding_length(h)
    w.add_feed_forward_length(f)
    w.add_block_count(layers)
    w.add_head_count(heads)
    w.add_head_count_kv(kvh)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_rope_freq_base(1e6 if arch == "gemma3" else 10000.0)
    if qd != h:
        w.add_key_length(hd)
        w.add_value_length(hd)
    w.add_rope_dimension_count(hd)
    if arch == "gemma3":
        w.add_sliding_window(8)
        w.add_rope_freq_base_swa(10000.0)
        w.add_final_logit_softcapping(30.0)
    # The embedding (tied output) spreads logits over several units. A
    # Gemma multiplies it by sqrt(64) on the way in: drawn at 0.3, the input
    # token's own row would dominate its logits (a greedy run repeating one
    # token), so it is drawn at 0.05 and the final norm's scale is 6x.
    emb_ty = T.Q8_0 if ty == T.Q5_0 else ty
    gemma = arch == "gemma3"
    put(w, "token_embd.weight", n(v, h, sd=0.05 if gemma else 0.3), emb_ty)
    put(w, "output_norm.weight", (6.0 if gemma else 1.0) * (1 + n(h, sd=0.1)), T.F32)
    mat = lambda out, inp: n(out, inp, sd=2.0 / np.sqrt(inp))  # noqa: E731
    for i in range(layers):
        p = f"blk.{i}."
        if arch == "phi3":
            put(w, p + "attn_qkv.weight", mat(qd + 2 * kvd, h), ty)
            put(w, p + "ffn_up.weight", mat(2 * f, h), ty)
        else:
            put(w, p + "attn_q.weight", mat(qd, h), ty)
            put(w, p + "attn_k.weight", mat(kvd, h), ty)
            put(w, p + "attn_v.weight", mat(kvd, h), ty)
            put(w, p + "ffn_gate.weight", mat(f, h), ty)
            put(w, p + "ffn_up.weight", mat(f, h), ty)
        if arch == "qwen2":
            for nm, d in [("attn_q", qd), ("attn_k", kvd), ("attn_v", kvd)]:
                put(w, p + nm + ".bias", n(d, sd=0.5), T.F32)
        put(w, p + "attn_output.weight", mat(h, qd), ty)
        put(w, p + "ffn_down.weight", mat(h, f), ty)
        put(w, p + "attn_norm.weight", 1 + n(h, sd=0.1), T.F32)
        put(w, p + "ffn_norm.weight", 1 + n(h, sd=0.1), T.F32)
        if arch in ("qwen3", "gemma3"):
            put(w, p + "attn_q_norm.weight", 1 + n(hd, sd=0.1), T.F32)
            put(w, p + "attn_k_norm.weight", 1 + n(hd, sd=0.1), T.F32)
        if arch == "gemma3":
            put(w, p + "post_attention_norm.weight", 1 + n(h, sd=0.1), T.F32)
            put(w, p + "post_ffw_norm.weight", 1 + n(h, sd=0.1), T.F32)
    finish(w, path)
    return True


def family(data, dst, only=None):
    """The tiny decoders of FAMILY."""
    for name, tyname, seed in [("qwen2", "f32", 20261128), ("qwen3", "f32", 20261129), ("phi3", "f32", 20261130),
                               ("gemma3", "f16", 20261131), ("gemma3", "q5_0", 20261131)]:
        if only is None or name == only:
            family_tiny(data, dst, name, tyname, seed)


def main(data, only_family=False):
    dst = os.path.join(data, "arch")
    os.makedirs(dst, exist_ok=True)
    if only_family:
        family(data, dst)
        return
    src = os.path.join(data, "minilm")
    if os.path.exists(os.path.join(src, "model.safetensors")):
        for ty in ["f32", "f16", "q8_0"]:
            minilm(src, dst, ty)
    else:
        print(f"make_arch_models: {src} absent, no MiniLM GGUF files", file=sys.stderr)
    t = gpt2_weights()
    for ty in ["f32", "f16", "q8_0", "q4_1"]:
        gpt2_gguf(dst, ty, t)
    gpt2_hf(dst, t)
    llama_tiny(dst)
    family(data, dst)
    bpe = bpe512()
    for d in ["gpt2-tiny-hf", "llama-tiny-hf"]:
        write_tokenizer(os.path.join(dst, d), bpe)
    print(f"make_arch_models: written to {dst}", file=sys.stderr)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:] == ["family"])
