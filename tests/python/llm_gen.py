"""Writes small random-weight GGUF language models for llm/tests (the llama.cpp reference test) and
prints, as JSON on stdout, the list of models written.

    llm_gen.py OUT_DIR SEED
    llm_gen.py --bench SHAPE TYPE OUT.gguf     (a random llama of a real shape, for timing)
    llm_gen.py --types OUT_DIR SEED T1,T2,...  (llama-<T> for the given weight types only)

Every model has 2 blocks, embedding length 256, feed-forward length 512 (in-dimensions are
multiples of 256, so every K-quant fits) and the same small SentencePiece-style vocabulary:
<unk>, <s>, </s>, the 256 byte tokens <0x00>..<0xFF>, single characters and merged pieces with
scores (the llama tokenizer merges the highest-scoring pair first). output.weight is scaled up so
the logits are peaked and greedy decoding is stable under quantization.

Models (name: architecture, weight type):
  llama-<T>      llama, heads 8 / kv heads 4, T in F32 F16 BF16 Q8_0 Q4_0 Q4_K Q6_K
  llama-tied-F32 llama without output.weight (tied embeddings)
  mistral-<T>    llama tensors with Mistral's shapes (kv heads 2, rope base 1e6), T in F32 Q4_K
  qwen2-<T>      qwen2: Q/K/V biases, NeoX rope, T in F32 F16 Q8_0
  qwen3-<T>      qwen3: per-head RMSNorm of Q and K before rope (attn_q_norm/attn_k_norm), NeoX
                 rope, head size 64 (key_length: twice embedding / heads, as Qwen3-0.6B), T in F32
                 F16 Q8_0
  gemma3-<T>      gemma3 (write_gemma): embedding scaled by sqrt(embd), norms stored as 1+w, post-attention
                 and post-FFN norms, per-head Q/K norms, GELU-tanh FFN, heads 4 / kv heads 2, head size
                 128 (key_length), tied embeddings, sliding window 8 on layer 0 (pattern 2) with rope
                 base 10000, layer 1 global with rope base 1e6 and linear rope scaling 8; T in F32 F16
                 Q8_0 (gemma3-F32 also as a Hugging Face checkpoint: "gemma_hf")
  gemma2-<T>     gemma2: the same without Q/K norms, attention logits soft-capped at 3 and final logits
                 at 30, sliding window 8 on layer 0 (gemma2's alternation); T in F32 F16 Q8_0
                 (gemma2-F32 also as a Hugging Face checkpoint)
  qwen2-bpe-F32, llama-bpe-F32, gpt2-bpe-F32: a byte-level BPE vocabulary (tokenizer.ggml.model
                 gpt2, 41 merges) with the qwen2, llama-bpe (Llama 3) and gpt-2 pre-tokenizers
llama-F32, llama-tied-F32, qwen2-bpe-F32 and qwen3-F32 also as Hugging Face checkpoints ("hf": the file to
open in a folder with model.safetensors, config.json and tokenizer.json; llama-tied-F32's is
sharded: two shards and model.safetensors.index.json): the same weights, Q/K rows in HF order.
phi3-<T> (F32 F16 Q8_0), phi3-short-F32, llama-yarn-F32, qwen2-yarn-F32, llama3-F32 (+ "hf_scaled"
copies): phi3 and rope scaling, see rope_scaling_models.
Broken files for the error tests ("broken" in the JSON): bad-arch (gptj), missing-tensor (no
blk.1.ffn_up.weight), misshapen-tensor (blk.0.attn_k.weight half as wide), qwen2-no-bias.

Weights are drawn as floats and quantized with gguf.quants where it can (Q8_0, Q4_0, F16, BF16);
gguf.quants cannot quantize K-quants, so K-quant, IQ4_XS and IQ4_NL tensors (Q2_K to Q6_K; Q2_K,
Q3_K, Q5_K, IQ4_XS and IQ4_NL through --types only) are random blocks whose super-block
scale is set so the dequantized values have the standard deviation asked for. Norm weights and
biases are F32, as llama.cpp's converter writes them. Q and K rows are random, so they need no
permutation: a GGUF llama's adjacent-pair rotation is what llama.cpp applies to them.
Used by llm/tests/llama_reference.rs.
"""
import json
import sys
from pathlib import Path

import gguf
import numpy as np
from gguf import GGUFWriter, GGMLQuantizationType as Q, TokenType, quants
from gguf.constants import GGML_QUANT_SIZES

HIDDEN = 256
FFN = 512
LAYERS = 2

# Pieces beyond single characters, highest score first (the order a BPE would have learned them).
MERGES = [
    "▁t", "he", "▁the", "in", "er", "▁a", "on", "re", "at", "en", "▁s", "or", "▁w", "an", "is",
    "ed", "▁o", "it", "ing", "▁c", "ar", "▁th", "es", "al", "ou", "le", "▁b", "▁f", "▁h", "▁m",
    "▁in", "▁is", "▁wor", "ld", "▁world", "ll", "ello", "▁hello", "▁he", "lo", "▁1", "12", "23",
    "▁12", "▁123", "▁é", "é", "ü", "ö", "ér", "▁ü", "▁da", "ta", "▁data", "ten", "sor", "▁ten",
    "▁tensor", "▁▁", "▁▁▁", "▁▁▁▁", "▁model", "ode", "▁mod", "el", "ing▁",
]
CHARS = list("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.,!?'-:;()\"") + ["▁"]


def vocab():
    tokens, scores, types = [], [], []
    for t, ty in (("<unk>", TokenType.UNKNOWN), ("<s>", TokenType.CONTROL), ("</s>", TokenType.CONTROL)):
        tokens.append(t)
        scores.append(0.0)
        types.append(ty)
    for b in range(256):
        tokens.append(f"<0x{b:02X}>")
        scores.append(0.0)
        types.append(TokenType.BYTE)
    for i, p in enumerate(MERGES):
        tokens.append(p)
        scores.append(-float(i))
        types.append(TokenType.NORMAL)
    for i, c in enumerate(CHARS):
        if c in tokens:
            continue
        tokens.append(c)
        scores.append(-1000.0 - i)
        types.append(TokenType.NORMAL)
    assert len(set(tokens)) == len(tokens)
    return tokens, scores, types


def byte_chars():
    """GPT-2's printable character for each byte."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


# Byte-level BPE merges (GPT-2 characters: Ġ is a space, Ċ a newline, Ã© is é's two bytes), in rank
# order; each merge's result is a token, after the 256 byte tokens.
BPE_MERGES = [
    ("Ġ", "t"), ("h", "e"), ("Ġt", "he"), ("i", "n"), ("e", "n"), ("e", "r"), ("Ġ", "a"), ("o", "n"), ("r", "e"),
    ("Ġ", "w"), ("o", "r"), ("Ġw", "or"), ("l", "d"), ("Ġwor", "ld"), ("l", "l"), ("e", "l"),
    ("Ġ", "h"), ("Ġh", "el"), ("l", "o"), ("Ġhel", "lo"), ("1", "2"), ("12", "3"), ("Ã", "©"),
    ("Ġ", "d"), ("a", "t"), ("Ġd", "at"), ("Ġdat", "a"), ("Ġ", "Ġ"), ("ĠĠ", "Ġ"), ("Ċ", "Ċ"),
    ("in", "g"), ("Ġt", "en"), ("s", "or"), ("Ġten", "sor"), ("'", "s"), ("H", "el"), ("Hel", "lo"),
    ("Ġ", "m"), ("o", "d"), ("Ġm", "od"), ("Ġmod", "el"),
]


def bpe_vocab():
    """tokens, types, merges of a small byte-level BPE vocabulary; <|endoftext|> last."""
    bc = byte_chars()
    tokens = [bc[b] for b in range(256)]
    types = [TokenType.NORMAL] * 256
    for a, b in BPE_MERGES:
        assert a in tokens and b in tokens, (a, b)
        tokens.append(a + b)
        types.append(TokenType.NORMAL)
    tokens += ["<|endoftext|>", "<|im_start|>"]
    types += [TokenType.CONTROL, TokenType.CONTROL]
    assert len(set(tokens)) == len(tokens)
    return tokens, types, [f"{a} {b}" for a, b in BPE_MERGES]


class Gen:
    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)

    def normal(self, shape, std):
        return (self.rng.standard_normal(shape) * std).astype(np.float32)

    def kquant(self, qtype: Q, rows: int, cols: int, std: float) -> np.ndarray:
        """Random K-quant blocks (rows x cols values) whose values have about `std`."""
        block, size = GGML_QUANT_SIZES[qtype]
        n = rows * cols // block
        raw = self.rng.integers(0, 256, size=(n, size), dtype=np.uint8)
        one = np.frombuffer(np.float16(1.0).tobytes(), dtype=np.uint8)
        if qtype in (Q.Q4_K, Q.Q5_K):
            # d, dmin (f16) then 12 bytes of 6-bit scales and mins, then (Q5_K: 32 bytes of fifth
            # bits and) 128 bytes of nibbles; Q5_K's values average twice Q4_K's, so twice the dmin.
            raw[:, 0:2] = one
            dmin = 67.5 if qtype == Q.Q4_K else 139.5
            raw[:, 2:4] = np.frombuffer(np.float16(dmin).tobytes(), dtype=np.uint8)
            # scales 16..47 (never 0), mins 0..15: keep each sub-block's offset near zero
            sc = self.rng.integers(16, 48, size=(n, 8))
            mn = self.rng.integers(0, 8, size=(n, 8))
            s = np.zeros((n, 12), dtype=np.uint8)
            s[:, 0:4] = (sc[:, 0:4] & 63) | ((sc[:, 4:8] >> 4) << 6)
            s[:, 4:8] = (mn[:, 0:4] & 63) | ((mn[:, 4:8] >> 4) << 6)
            s[:, 8:12] = (sc[:, 4:8] & 15) | ((mn[:, 4:8] & 15) << 4)
            raw[:, 4:16] = s
            d_off, dmin_off = 0, 2
        elif qtype == Q.Q6_K:
            # 128 bytes low nibbles, 64 bytes high bits, 16 int8 scales, d (f16)
            raw[:, 192:208] = self.rng.integers(-40, 41, size=(n, 16)).astype(np.int8).view(np.uint8)
            raw[:, 208:210] = one
            d_off, dmin_off = 208, None
        elif qtype == Q.Q2_K:
            # 16 bytes of 4-bit scale (low) and min (high) per 16 values, 64 bytes of 2-bit
            # values, d, dmin (f16): scales 4..15, mins 0..7, dmin so the offsets average zero
            sc = self.rng.integers(4, 16, size=(n, 16))
            mn = self.rng.integers(0, 8, size=(n, 16))
            raw[:, 0:16] = (sc | (mn << 4)).astype(np.uint8)
            raw[:, 80:82] = one
            raw[:, 82:84] = np.frombuffer(np.float16(1.5 * 9.5 / 3.5).tobytes(), dtype=np.uint8)
            d_off, dmin_off = 80, 82
        elif qtype == Q.Q3_K:
            # 32 bytes of high bits, 64 of low 2 bits, 12 of 6-bit scales (offset 32: random
            # bytes give scales of either sign), d (f16)
            raw[:, 108:110] = one
            d_off, dmin_off = 108, None
        elif qtype == Q.IQ4_XS:
            # d (f16), 2 + 4 bytes of 6-bit scales (offset 32: either sign), 128 bytes of nibbles
            # standing for kvalues_iq4nl
            raw[:, 0:2] = one
            d_off, dmin_off = 0, None
        elif qtype == Q.IQ4_NL:
            # d (f16), 16 bytes of nibbles standing for kvalues_iq4nl (blocks of 32: gguf-py
            # dequantizes IQ4_NL but cannot quantize it)
            raw[:, 0:2] = one
            d_off, dmin_off = 0, None
        else:
            raise ValueError(qtype)
        vals = quants.dequantize(raw, qtype)
        scale = std / float(np.std(vals))
        if dmin_off is not None:
            dmin = np.frombuffer(raw[0, dmin_off:dmin_off + 2].tobytes(), dtype=np.float16)[0]
            raw[:, dmin_off:dmin_off + 2] = np.frombuffer(np.float16(float(dmin) * scale).tobytes(), dtype=np.uint8)
        raw[:, d_off:d_off + 2] = np.frombuffer(np.float16(scale).tobytes(), dtype=np.uint8)
        return raw.reshape(rows, -1)


def stored(g: Gen, w: np.ndarray, qtype: Q):
    """(array, raw_dtype) for GGUFWriter.add_tensor: w (rows x cols float32) in qtype."""
    if qtype == Q.F32:
        return w, None
    if qtype in (Q.Q2_K, Q.Q3_K, Q.Q4_K, Q.Q5_K, Q.Q6_K, Q.IQ4_XS, Q.IQ4_NL):
        return g.kquant(qtype, w.shape[0], w.shape[1], float(np.std(w))), qtype
    return quants.quantize(w, qtype), qtype


def write_model(path: Path, g: Gen, arch: str, qtype: Q, *, kv_heads: int, rope_base: float,
                bias: bool, tied: bool, out_std: float, drop: str = "", narrow: str = "", bpe: str = "",
                head_dim: int = HIDDEN // 8, qk_norm: bool = False, moe: dict = None, ffn: int = FFN,
                ctx: int = 256):
    """moe: {"experts": N, "used": K, "ff": expert feed-forward length, "qk_whole": OLMoE's Q/K norm
    over the whole projection, "expert_ff_key": write <arch>.expert_feed_forward_length}: stacked
    expert tensors and an F32 router (llama.cpp's converter keeps ffn_gate_inp in F32)."""
    heads = 8
    if bpe:
        tokens, types, merges = bpe_vocab()
    else:
        tokens, scores, types = vocab()
    n_vocab = len(tokens)
    w = GGUFWriter(str(path), arch)
    w.add_name(path.stem)
    w.add_block_count(LAYERS)
    w.add_context_length(ctx)
    w.add_embedding_length(HIDDEN)
    w.add_feed_forward_length(ffn)
    if moe:
        w.add_expert_count(moe["experts"])
        w.add_expert_used_count(moe["used"])
        if moe.get("expert_ff_key"):
            w.add_expert_feed_forward_length(moe["ff"])
    w.add_head_count(heads)
    w.add_head_count_kv(kv_heads)
    if head_dim != HIDDEN // heads:
        w.add_key_length(head_dim)
        w.add_value_length(head_dim)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_freq_base(rope_base)
    w.add_file_type(int(qtype) if qtype != Q.F32 else 0)
    if bpe:
        w.add_tokenizer_model("gpt2")
        w.add_tokenizer_pre(bpe)
        w.add_token_list(tokens)
        w.add_token_types(types)
        w.add_token_merges(merges)
        w.add_bos_token_id(len(tokens) - 2)
        w.add_eos_token_id(len(tokens) - 2)
        w.add_add_bos_token(True)
    else:
        w.add_tokenizer_model("llama")
        w.add_tokenizer_pre("default")
        w.add_token_list(tokens)
        w.add_token_scores(scores)
        w.add_token_types(types)
        w.add_unk_token_id(0)
        w.add_bos_token_id(1)
        w.add_eos_token_id(2)
        w.add_add_bos_token(True)
    w.add_add_eos_token(False)

    floats = {}

    def mat(name, rows, cols, std):
        if name == drop:
            return
        if name == narrow:
            cols //= 2
        f = g.normal((rows, cols), std)
        floats[name] = f
        arr, raw = stored(g, f, qtype)
        w.add_tensor(name, arr, raw_dtype=raw)

    def vec(name, n, mean, std):
        f = (mean + g.normal((n,), std)).astype(np.float32)
        floats[name] = f
        w.add_tensor(name, f)

    mat("token_embd.weight", n_vocab, HIDDEN, 1.0)
    for i in range(LAYERS):
        p = f"blk.{i}"
        vec(f"{p}.attn_norm.weight", HIDDEN, 1.0, 0.1)
        mat(f"{p}.attn_q.weight", heads * head_dim, HIDDEN, 0.08)
        mat(f"{p}.attn_k.weight", kv_heads * head_dim, HIDDEN, 0.08)
        mat(f"{p}.attn_v.weight", kv_heads * head_dim, HIDDEN, 0.08)
        if bias:
            vec(f"{p}.attn_q.bias", heads * head_dim, 0.0, 0.2)
            vec(f"{p}.attn_k.bias", kv_heads * head_dim, 0.0, 0.2)
            vec(f"{p}.attn_v.bias", kv_heads * head_dim, 0.0, 0.2)
        if qk_norm and moe and moe.get("qk_whole"):
            vec(f"{p}.attn_q_norm.weight", heads * head_dim, 1.0, 0.2)
            vec(f"{p}.attn_k_norm.weight", kv_heads * head_dim, 1.0, 0.2)
        elif qk_norm:
            vec(f"{p}.attn_q_norm.weight", head_dim, 1.0, 0.2)
            vec(f"{p}.attn_k_norm.weight", head_dim, 1.0, 0.2)
        mat(f"{p}.attn_output.weight", HIDDEN, heads * head_dim, 0.08)
        vec(f"{p}.ffn_norm.weight", HIDDEN, 1.0, 0.1)
        if moe:
            n_exp, ff = moe["experts"], moe["ff"]
            router = g.normal((n_exp, HIDDEN), 0.1)
            floats[f"{p}.ffn_gate_inp.weight"] = router
            w.add_tensor(f"{p}.ffn_gate_inp.weight", router)
            for part, shape, std in (("gate", (n_exp, ff, HIDDEN), 0.1), ("up", (n_exp, ff, HIDDEN), 0.1),
                                     ("down", (n_exp, HIDDEN, ff), 0.08)):
                f = g.normal(shape, std)
                floats[f"{p}.ffn_{part}_exps.weight"] = f
                arr, raw = stored(g, f, qtype)
                w.add_tensor(f"{p}.ffn_{part}_exps.weight", arr, raw_dtype=raw)
            continue_ffn = False
        else:
            continue_ffn = True
        if continue_ffn:
            mat(f"{p}.ffn_gate.weight", ffn, HIDDEN, 0.1)
            mat(f"{p}.ffn_up.weight", ffn, HIDDEN, 0.1)
            mat(f"{p}.ffn_down.weight", HIDDEN, ffn, 0.08)
    vec("output_norm.weight", HIDDEN, 1.0, 0.1)
    if not tied:
        mat("output.weight", n_vocab, HIDDEN, out_std)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return floats, dict(heads=heads, kv_heads=kv_heads, rope_base=rope_base, tied=tied, bias=bias, head_dim=head_dim,
                        moe=moe, ffn=ffn)


# Benchmark shapes: (layers, embedding, heads, kv heads, feed-forward, vocabulary).
BENCH_SHAPES = {
    "smollm-135m": (30, 576, 9, 3, 1536, 49152),
    "tinyllama-1.1b": (22, 2048, 32, 4, 5632, 32000),
}


def bench_model(path: Path, shape: str, qtype: Q, seed: int):
    """A random-weight llama of a real model's shape for timing (scripts/bench_llm.sh); written
    tensor by tensor so memory stays at one tensor."""
    layers, embd, heads, kv, ff, n_vocab = BENCH_SHAPES[shape]
    g = Gen(seed)
    base, _, _ = vocab()
    tokens = base + [f"<extra_{i}>" for i in range(n_vocab - len(base))]
    scores = [0.0] * n_vocab
    types = [TokenType.CONTROL, TokenType.CONTROL, TokenType.CONTROL] + [TokenType.BYTE] * 256
    types += [TokenType.NORMAL] * (n_vocab - len(types))
    w = GGUFWriter(str(path), "llama")
    w.add_block_count(layers)
    w.add_context_length(2048)
    w.add_embedding_length(embd)
    w.add_feed_forward_length(ff)
    w.add_head_count(heads)
    w.add_head_count_kv(kv)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_freq_base(10000.0)
    w.add_tokenizer_model("llama")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    hd = embd // heads

    def mat(name, rows, cols, std):
        arr, raw = stored(g, g.normal((rows, cols), std), qtype)
        w.add_tensor(name, arr, raw_dtype=raw)

    mat("token_embd.weight", n_vocab, embd, 1.0)
    for i in range(layers):
        p = f"blk.{i}"
        w.add_tensor(f"{p}.attn_norm.weight", np.ones(embd, dtype=np.float32))
        mat(f"{p}.attn_q.weight", embd, embd, 0.02)
        mat(f"{p}.attn_k.weight", kv * hd, embd, 0.02)
        mat(f"{p}.attn_v.weight", kv * hd, embd, 0.02)
        mat(f"{p}.attn_output.weight", embd, embd, 0.02)
        w.add_tensor(f"{p}.ffn_norm.weight", np.ones(embd, dtype=np.float32))
        mat(f"{p}.ffn_gate.weight", ff, embd, 0.02)
        mat(f"{p}.ffn_up.weight", ff, embd, 0.02)
        mat(f"{p}.ffn_down.weight", embd, ff, 0.02)
    w.add_tensor("output_norm.weight", np.ones(embd, dtype=np.float32))
    mat("output.weight", n_vocab, embd, 0.05)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


# Mixture-of-experts benchmark shapes (qwen3moe): (layers, embedding, heads, kv heads, experts, used,
# expert feed-forward, vocabulary).
BENCH_MOE_SHAPES = {
    "qwen3moe-mini": (8, 1024, 16, 4, 16, 4, 512, 32000),
}


def bench_moe_model(path: Path, shape: str, qtype: Q, seed: int):
    """A random-weight qwen3moe of a BENCH_MOE_SHAPES shape for timing, tensor by tensor."""
    layers, embd, heads, kv, n_exp, used, ff, n_vocab = BENCH_MOE_SHAPES[shape]
    g = Gen(seed)
    base, _, _ = vocab()
    tokens = base + [f"<extra_{i}>" for i in range(n_vocab - len(base))]
    types = [TokenType.CONTROL, TokenType.CONTROL, TokenType.CONTROL] + [TokenType.BYTE] * 256
    types += [TokenType.NORMAL] * (n_vocab - len(types))
    w = GGUFWriter(str(path), "qwen3moe")
    w.add_block_count(layers)
    w.add_context_length(2048)
    w.add_embedding_length(embd)
    w.add_feed_forward_length(ff * used)
    w.add_expert_feed_forward_length(ff)
    w.add_expert_count(n_exp)
    w.add_expert_used_count(used)
    w.add_head_count(heads)
    w.add_head_count_kv(kv)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_rope_freq_base(1e6)
    w.add_tokenizer_model("llama")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_scores([0.0] * n_vocab)
    w.add_token_types(types)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    hd = embd // heads

    def mat(name, shape, std):
        arr, raw = stored(g, g.normal(shape, std), qtype)
        w.add_tensor(name, arr, raw_dtype=raw)

    mat("token_embd.weight", (n_vocab, embd), 1.0)
    for i in range(layers):
        p = f"blk.{i}"
        w.add_tensor(f"{p}.attn_norm.weight", np.ones(embd, dtype=np.float32))
        mat(f"{p}.attn_q.weight", (heads * hd, embd), 0.02)
        mat(f"{p}.attn_k.weight", (kv * hd, embd), 0.02)
        mat(f"{p}.attn_v.weight", (kv * hd, embd), 0.02)
        w.add_tensor(f"{p}.attn_q_norm.weight", np.ones(hd, dtype=np.float32))
        w.add_tensor(f"{p}.attn_k_norm.weight", np.ones(hd, dtype=np.float32))
        mat(f"{p}.attn_output.weight", (embd, heads * hd), 0.02)
        w.add_tensor(f"{p}.ffn_norm.weight", np.ones(embd, dtype=np.float32))
        w.add_tensor(f"{p}.ffn_gate_inp.weight", g.normal((n_exp, embd), 0.05))
        mat(f"{p}.ffn_gate_exps.weight", (n_exp, ff, embd), 0.02)
        mat(f"{p}.ffn_up_exps.weight", (n_exp, ff, embd), 0.02)
        mat(f"{p}.ffn_down_exps.weight", (n_exp, embd, ff), 0.02)
    w.add_tensor("output_norm.weight", np.ones(embd, dtype=np.float32))
    mat("output.weight", (n_vocab, embd), 0.05)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def unpermute(w: np.ndarray, n_head: int) -> np.ndarray:
    """The inverse of convert_hf_to_gguf's LlamaModel.permute: GGUF Q/K rows back to HF order."""
    return w.reshape(n_head, w.shape[0] // n_head // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def spm_merges(tokens, scores):
    """tokenizer.json merges for a SentencePiece vocabulary, as transformers' SpmConverter makes
    them: for every piece by descending score, every split into two pieces of the vocabulary."""
    ids = {t: i for i, t in enumerate(tokens)}
    order = sorted(range(len(tokens)), key=lambda i: -scores[i])
    merges = []
    for i in order:
        t = tokens[i]
        if len(t) < 2 or t.startswith("<"):
            continue
        splits = [(t[:k], t[k:]) for k in range(1, len(t)) if t[:k] in ids and t[k:] in ids]
        splits.sort(key=lambda ab: (ids[ab[0]], ids[ab[1]]))
        merges += [f"{a} {b}" for a, b in splits]
    return merges


def write_hf(folder: Path, arch: str, floats: dict, info: dict, bpe: str, sharded: bool = False) -> Path:
    """The same weights as a Hugging Face checkpoint: model.safetensors (HF names, Q/K rows in HF
    order for llama), config.json and tokenizer.json; `sharded`: two shards
    (model-0000N-of-00002.safetensors) and model.safetensors.index.json instead. Returns the
    file to open."""
    from safetensors.numpy import save_file
    folder.mkdir(parents=True, exist_ok=True)
    names = {"token_embd.weight": "model.embed_tokens.weight", "output_norm.weight": "model.norm.weight",
             "output.weight": "lm_head.weight"}
    parts = {"attn_norm.weight": "input_layernorm.weight", "ffn_norm.weight": "post_attention_layernorm.weight",
             "attn_q.weight": "self_attn.q_proj.weight", "attn_k.weight": "self_attn.k_proj.weight",
             "attn_v.weight": "self_attn.v_proj.weight", "attn_output.weight": "self_attn.o_proj.weight",
             "attn_q.bias": "self_attn.q_proj.bias", "attn_k.bias": "self_attn.k_proj.bias",
             "attn_v.bias": "self_attn.v_proj.bias", "ffn_gate.weight": "mlp.gate_proj.weight",
             "ffn_up.weight": "mlp.up_proj.weight", "ffn_down.weight": "mlp.down_proj.weight",
             "attn_q_norm.weight": "self_attn.q_norm.weight", "attn_k_norm.weight": "self_attn.k_norm.weight"}
    out = {}
    moe_block = "block_sparse_moe" if arch == "llama" else "mlp"
    expert_parts = {"gate": "gate_proj", "up": "up_proj", "down": "down_proj"}
    if arch == "llama":  # mixtral's expert names
        expert_parts = {"gate": "w1", "up": "w3", "down": "w2"}
    for name, f in floats.items():
        if name.endswith("ffn_gate_inp.weight") or "_exps." in name:
            # the router; the stacked experts, one tensor per expert as transformers names them
            _, i, rest = name.split(".", 2)
            if rest == "ffn_gate_inp.weight":
                out[f"model.layers.{i}.{moe_block}.gate.weight"] = np.ascontiguousarray(f)
            else:
                part = rest.split("_")[1]
                for e in range(f.shape[0]):
                    out[f"model.layers.{i}.{moe_block}.experts.{e}.{expert_parts[part]}.weight"] = np.ascontiguousarray(f[e])
            continue
        if name in names:
            hf = names[name]
        else:
            _, i, rest = name.split(".", 2)
            hf = f"model.layers.{i}.{parts[rest]}"
        if arch == "llama" and name.endswith("attn_q.weight"):
            f = unpermute(f, info["heads"])
        if arch == "llama" and name.endswith("attn_k.weight"):
            f = unpermute(f, info["kv_heads"])
        out[hf] = np.ascontiguousarray(f)
    if sharded:
        names = sorted(out)
        weight_map = {}
        for k, part in enumerate((names[: len(names) // 2], names[len(names) // 2:])):
            shard = f"model-{k + 1:05d}-of-00002.safetensors"
            save_file({n: out[n] for n in part}, str(folder / shard), metadata={"format": "pt"})
            weight_map.update({n: shard for n in part})
        root = folder / "model.safetensors.index.json"
        root.write_text(json.dumps({"metadata": {}, "weight_map": weight_map}, indent=1))
    else:
        root = folder / "model.safetensors"
        save_file(out, str(root), metadata={"format": "pt"})
    n_vocab = floats["token_embd.weight"].shape[0]
    moe = info.get("moe")
    model_type = {"qwen3moe": "qwen3_moe", "llama": "mixtral" if moe else "llama"}.get(arch, arch)
    config = {
        "architectures": [{"qwen2": "Qwen2ForCausalLM", "qwen3": "Qwen3ForCausalLM", "qwen3_moe": "Qwen3MoeForCausalLM",
                           "olmoe": "OlmoeForCausalLM", "mixtral": "MixtralForCausalLM"}.get(model_type, "LlamaForCausalLM")],
        "model_type": model_type, "hidden_size": HIDDEN, "intermediate_size": info.get("ffn", FFN),
        "num_hidden_layers": LAYERS,
        "num_attention_heads": info["heads"], "num_key_value_heads": info["kv_heads"],
        "max_position_embeddings": 256, "rms_norm_eps": 1e-5, "rope_theta": info["rope_base"],
        "vocab_size": n_vocab, "tie_word_embeddings": info["tied"], "torch_dtype": "float32",
        "head_dim": info["head_dim"],
        "bos_token_id": 1 if not bpe else n_vocab - 2, "eos_token_id": 2 if not bpe else n_vocab - 2,
    }
    if moe:
        config["num_local_experts" if model_type == "mixtral" else "num_experts"] = moe["experts"]
        config["num_experts_per_tok"] = moe["used"]
        if model_type == "qwen3_moe":
            config["moe_intermediate_size"] = moe["ff"]
        # llama.cpp normalises qwen3moe's top-k weights (Qwen3-MoE checkpoints say so), not olmoe's
        config["norm_topk_prob"] = model_type == "qwen3_moe"
    (folder / "config.json").write_text(json.dumps(config, indent=1))
    if bpe:
        tokens, types, merges = bpe_vocab()
        # the pre-tokenizer regex as Qwen2's tokenizer.json has it
        pattern = {"qwen2": r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"}[bpe]
        tok = {
            "version": "1.0",
            "added_tokens": [{"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False,
                              "normalized": False, "special": True}
                             for i, t in enumerate(tokens) if t.startswith("<|")],
            "normalizer": None,
            "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
                {"type": "Split", "pattern": {"Regex": pattern}, "behavior": "Isolated", "invert": False},
                {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}]},
            # BOS first, as the GGUF's add_bos_token says
            "post_processor": {"type": "TemplateProcessing",
                               "single": [{"SpecialToken": {"id": "<|endoftext|>", "type_id": 0}},
                                          {"Sequence": {"id": "A", "type_id": 0}}],
                               "pair": [], "special_tokens": {"<|endoftext|>": {
                                   "id": "<|endoftext|>", "ids": [len(tokens) - 2], "tokens": ["<|endoftext|>"]}}},
            "decoder": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False},
            "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                      "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                      "vocab": {t: i for i, t in enumerate(tokens) if not t.startswith("<|")},
                      "merges": merges},
        }
    else:
        tokens, scores, types = vocab()
        tok = {
            "version": "1.0",
            "added_tokens": [{"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False,
                              "normalized": False, "special": True} for i, t in enumerate(tokens[:3])],
            "normalizer": {"type": "Sequence", "normalizers": [
                {"type": "Prepend", "prepend": "\u2581"},
                {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}]},
            "pre_tokenizer": None,
            "post_processor": {"type": "TemplateProcessing",
                               "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
                               "pair": [], "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}},
            "decoder": {"type": "Sequence", "decoders": [
                {"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "}, {"type": "ByteFallback"},
                {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
            "model": {"type": "BPE", "dropout": None, "unk_token": "<unk>", "continuing_subword_prefix": None,
                      "end_of_word_suffix": None, "fuse_unk": True, "byte_fallback": True, "ignore_merges": False,
                      "vocab": {t: i for i, t in enumerate(tokens)}, "merges": spm_merges(tokens, scores)},
        }
    (folder / "tokenizer.json").write_text(json.dumps(tok, ensure_ascii=False, indent=1))
    return root


def main():
    if sys.argv[1] == "--bench-phi3":
        # llm_gen.py --bench-phi3 SHAPE TYPE OUT.gguf
        bench_phi3(Path(sys.argv[4]), sys.argv[2], Q[sys.argv[3]], 1)
        return
    if sys.argv[1] == "--types":
        types_main(Path(sys.argv[2]), int(sys.argv[3]), sys.argv[4].split(","),
                   int(sys.argv[5]) if len(sys.argv) > 5 else 256)
        return
    if sys.argv[1] == "--bench":
        # llm_gen.py --bench SHAPE TYPE OUT.gguf
        if sys.argv[2] in BENCH_MOE_SHAPES:
            bench_moe_model(Path(sys.argv[4]), sys.argv[2], Q[sys.argv[3]], 1)
            return
        bench_model(Path(sys.argv[4]), sys.argv[2], Q[sys.argv[3]], 1)
        return
    out = Path(sys.argv[1])
    seed = int(sys.argv[2])
    out.mkdir(parents=True, exist_ok=True)
    g = Gen(seed)
    models = []
    specs = [("llama", t, dict(kv_heads=4, rope_base=10000.0, bias=False, tied=False))
             for t in ("F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_K", "Q6_K")]
    specs.append(("llama-tied", "F32", dict(kv_heads=4, rope_base=10000.0, bias=False, tied=True)))
    specs += [("mistral", t, dict(kv_heads=2, rope_base=1e6, bias=False, tied=False)) for t in ("F32", "Q4_K")]
    specs += [("qwen2", t, dict(kv_heads=2, rope_base=1e6, bias=True, tied=False)) for t in ("F32", "F16", "Q8_0")]
    # Byte-level BPE vocabularies (tokenizer.ggml.model gpt2) with each pre-tokenizer.
    specs += [("qwen2-bpe", "F32", dict(kv_heads=2, rope_base=1e6, bias=True, tied=False, bpe="qwen2")),
              ("llama-bpe", "F32", dict(kv_heads=4, rope_base=5e5, bias=False, tied=False, bpe="llama-bpe")),
              ("gpt2-bpe", "F32", dict(kv_heads=4, rope_base=1e4, bias=False, tied=False, bpe="gpt-2"))]
    # Last, so the models above keep the bytes they had before these were added.
    specs += [("qwen3", t, dict(kv_heads=4, rope_base=1e6, bias=False, tied=False, head_dim=2 * HIDDEN // 8, qk_norm=True))
              for t in ("F32", "F16", "Q8_0")]
    # Mixture-of-experts models, last (8 experts, 2 used per token, stacked expert tensors): qwen3moe
    # (qwen3's attention, expert_feed_forward_length), olmoe (Q/K norm over the whole projection,
    # kv heads = heads as OLMoE has, weights not normalised), mixtral (llama with expert_count).
    moe = dict(experts=8, used=2, ff=256)
    specs += [("qwen3moe", t, dict(kv_heads=4, rope_base=1e6, bias=False, tied=False, head_dim=2 * HIDDEN // 8,
                                   qk_norm=True, moe=dict(moe, expert_ff_key=True)))
              for t in ("F32", "F16", "Q8_0")]
    specs += [("olmoe", t, dict(kv_heads=8, rope_base=1e4, bias=False, tied=False, qk_norm=True, ffn=256,
                                moe=dict(moe, qk_whole=True)))
              for t in ("F32", "F16", "Q8_0")]
    specs += [("mixtral", t, dict(kv_heads=4, rope_base=1e6, bias=False, tied=False, ffn=256, moe=moe))
              for t in ("F32", "F16", "Q8_0")]
    # The mixture-of-experts models draw from a stream of their own (seed + 1): the broken files
    # after them keep the bytes they had.
    g_moe = Gen(seed + 1)
    for name, t, kw in specs:
        arch = next((a for a in ("qwen2", "qwen3moe", "qwen3", "olmoe") if name.startswith(a)), "llama")
        path = out / f"{name}-{t}.gguf"
        floats, info = write_model(path, g_moe if kw.get("moe") else g, arch, Q[t], out_std=0.6, **kw)
        entry = {"name": f"{name}-{t}", "arch": arch, "type": t, "path": str(path)}
        if f"{name}-{t}" in ("llama-F32", "qwen2-bpe-F32", "llama-tied-F32", "qwen3-F32", "qwen3moe-F32", "olmoe-F32",
                             "mixtral-F32"):
            hf = out / f"{name}-{t}-hf"
            # the tied one as a sharded checkpoint (two shards and an index)
            root = write_hf(hf, arch, floats, info, kw.get("bpe", ""), sharded=name == "llama-tied")
            entry["hf"] = str(root)
        models.append(entry)
    # Last, so the models above keep the bytes they had before these were added.
    for name, t in [(a, t) for a in ("gemma3", "gemma2") for t in ("F32", "F16", "Q8_0")]:
        models.append(write_gemma(out, g, name, t))
    # Broken files for the error tests: an architecture outside the supported list, a missing and
    # a misshapen tensor.
    broken = {}
    base = dict(kv_heads=4, rope_base=10000.0, bias=False, tied=False, out_std=0.6)
    for name, arch, kw in (("bad-arch", "gptj", {}),
                           ("missing-tensor", "llama", {"drop": "blk.1.ffn_up.weight"}),
                           ("misshapen-tensor", "llama", {"narrow": "blk.0.attn_k.weight"}),
                           ("qwen2-no-bias", "qwen2", {})):
        path = out / f"{name}.gguf"
        write_model(path, g, arch, Q.F32, **base, **kw)
        broken[name] = str(path)
    models += rope_scaling_models(out, seed, broken)
    json.dump({"models": models, "broken": broken}, sys.stdout)


def bench_phi3(path: Path, shape: str, qtype: Q, seed: int):
    """bench_model's shape as phi3 (fused attn_qkv and ffn_up, long-RoPE factors chosen at any
    context over 64, the converter's attention factor), to time the fused tensors against the
    llama of the same shape: `llm_gen.py --bench-phi3 SHAPE TYPE OUT.gguf`."""
    layers, embd, heads, kv, ff, n_vocab = BENCH_SHAPES[shape]
    g = Gen(seed)
    base, _, _ = vocab()
    tokens = base + [f"<extra_{i}>" for i in range(n_vocab - len(base))]
    types = [TokenType.CONTROL, TokenType.CONTROL, TokenType.CONTROL] + [TokenType.BYTE] * 256
    types += [TokenType.NORMAL] * (n_vocab - len(types))
    hd = embd // heads
    w = GGUFWriter(str(path), "phi3")
    w.add_name("random-weight bench model")
    w.add_block_count(layers)
    w.add_context_length(2048)
    w.add_rope_scaling_orig_ctx_len(64)
    w.add_rope_scaling_attn_factors(float(np.sqrt(1 + np.log(2048 / 64) / np.log(64))))
    w.add_embedding_length(embd)
    w.add_feed_forward_length(ff)
    w.add_head_count(heads)
    w.add_head_count_kv(kv)
    w.add_rope_dimension_count(hd)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_freq_base(10000.0)
    w.add_tokenizer_model("llama")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_scores([0.0] * n_vocab)
    w.add_token_types(types)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)

    def mat(name, rows, cols, std):
        arr, raw = stored(g, g.normal((rows, cols), std), qtype)
        w.add_tensor(name, arr, raw_dtype=raw)

    mat("token_embd.weight", n_vocab, embd, 1.0)
    for i in range(layers):
        p = f"blk.{i}"
        w.add_tensor(f"{p}.attn_norm.weight", np.ones(embd, dtype=np.float32))
        mat(f"{p}.attn_qkv.weight", embd + 2 * kv * hd, embd, 0.02)
        mat(f"{p}.attn_output.weight", embd, embd, 0.02)
        w.add_tensor(f"{p}.ffn_norm.weight", np.ones(embd, dtype=np.float32))
        mat(f"{p}.ffn_up.weight", 2 * ff, embd, 0.02)
        mat(f"{p}.ffn_down.weight", embd, ff, 0.02)
    w.add_tensor("output_norm.weight", np.ones(embd, dtype=np.float32))
    mat("output.weight", n_vocab, embd, 0.05)
    w.add_tensor("rope_factors_long.weight", (1.0 + g.rng.uniform(0, 6, hd // 2)).astype(np.float32))
    w.add_tensor("rope_factors_short.weight", (1.0 + g.rng.uniform(0, 0.5, hd // 2)).astype(np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def llama3_factors(rope_dim: int, base: float, factor: float, low: float, high: float, old_ctx: int) -> np.ndarray:
    """rope_freqs.weight as llama.cpp's converter computes it from rope_scaling llama3 (its torch
    float32 arithmetic, step by step in numpy float32)."""
    f32 = np.float32
    out = []
    low_wavelen, high_wavelen = old_ctx / low, old_ctx / high
    for i in range(0, rope_dim, 2):
        freq = f32(1.0) / np.power(f32(base), f32(i) / f32(rope_dim), dtype=np.float32)
        wavelen = f32(2 * np.pi) / freq
        if wavelen < high_wavelen:
            out.append(f32(1.0))
        elif wavelen > low_wavelen:
            out.append(f32(factor))
        else:
            smooth = (f32(old_ctx) / wavelen - f32(low)) / f32(high - low)
            out.append(f32(1.0) / ((f32(1.0) - smooth) / f32(factor) + smooth))
    return np.array(out, dtype=np.float32)


def write_scaled(path: Path, g: Gen, arch: str, qtype: Q, *, kv_heads: int, rope_base: float, ctx: int,
                 rope_dim: int = HIDDEN // 8, kv: dict | None = None, extra: dict | None = None):
    """A model for the rope-scaling and phi3 tests (write_model's layout): `kv` is a dict of
    GGUFWriter method name -> argument (the rope scaling keys), `extra` more F32 tensors
    (rope_freqs.weight, rope_factors_long/short.weight). phi3 stores Q, K, V as one attn_qkv
    tensor [q + 2 kv, embd] and gate, up as one ffn_up tensor [2 ff, embd] (gate rows first), as
    llama.cpp's converter does from qkv_proj and gate_up_proj; its rotated dimensions are
    rope.dimension_count. Returns the float weights by GGUF name (fused tensors split into the
    llama names, for the Hugging Face copy) and the info write_hf takes."""
    heads, head_dim = 8, HIDDEN // 8
    tokens, scores, types = vocab()
    n_vocab = len(tokens)
    w = GGUFWriter(str(path), arch)
    # not "phi3-F32": llama.cpp gives a model named phi-3/phi3 the token attributes of Phi-3's
    # vocabulary, and fails on one without <|endoftext|>
    w.add_name("random-weight test model")
    w.add_block_count(LAYERS)
    w.add_context_length(ctx)
    w.add_embedding_length(HIDDEN)
    w.add_feed_forward_length(FFN)
    w.add_head_count(heads)
    w.add_head_count_kv(kv_heads)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_freq_base(rope_base)
    if rope_dim != head_dim or arch == "phi3":
        w.add_rope_dimension_count(rope_dim)
    for method, value in (kv or {}).items():
        getattr(w, method)(value)
    w.add_file_type(int(qtype) if qtype != Q.F32 else 0)
    w.add_tokenizer_model("llama")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_unk_token_id(0)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)
    floats = {}

    def mat(name, rows, cols, std, parts=()):
        f = g.normal((rows, cols), std)
        r0 = 0
        for part, n in parts:
            floats[part] = f[r0:r0 + n]
            r0 += n
        if not parts:
            floats[name] = f
        arr, raw = stored(g, f, qtype)
        w.add_tensor(name, arr, raw_dtype=raw)

    def vec(name, n, mean, std):
        f = (mean + g.normal((n,), std)).astype(np.float32)
        floats[name] = f
        w.add_tensor(name, f)

    q, kvd = heads * head_dim, kv_heads * head_dim
    mat("token_embd.weight", n_vocab, HIDDEN, 1.0)
    for i in range(LAYERS):
        p = f"blk.{i}"
        vec(f"{p}.attn_norm.weight", HIDDEN, 1.0, 0.1)
        if arch == "phi3":
            mat(f"{p}.attn_qkv.weight", q + 2 * kvd, HIDDEN, 0.08,
                ((f"{p}.attn_q.weight", q), (f"{p}.attn_k.weight", kvd), (f"{p}.attn_v.weight", kvd)))
        else:
            mat(f"{p}.attn_q.weight", q, HIDDEN, 0.08)
            mat(f"{p}.attn_k.weight", kvd, HIDDEN, 0.08)
            mat(f"{p}.attn_v.weight", kvd, HIDDEN, 0.08)
        if arch == "qwen2":
            vec(f"{p}.attn_q.bias", q, 0.0, 0.2)
            vec(f"{p}.attn_k.bias", kvd, 0.0, 0.2)
            vec(f"{p}.attn_v.bias", kvd, 0.0, 0.2)
        mat(f"{p}.attn_output.weight", HIDDEN, q, 0.08)
        vec(f"{p}.ffn_norm.weight", HIDDEN, 1.0, 0.1)
        if arch == "phi3":
            mat(f"{p}.ffn_up.weight", 2 * FFN, HIDDEN, 0.1, ((f"{p}.ffn_gate.weight", FFN), (f"{p}.ffn_up.weight", FFN)))
        else:
            mat(f"{p}.ffn_gate.weight", FFN, HIDDEN, 0.1)
            mat(f"{p}.ffn_up.weight", FFN, HIDDEN, 0.1)
        mat(f"{p}.ffn_down.weight", HIDDEN, FFN, 0.08)
    vec("output_norm.weight", HIDDEN, 1.0, 0.1)
    mat("output.weight", n_vocab, HIDDEN, 0.6)
    for name, f in (extra or {}).items():
        w.add_tensor(name, np.asarray(f, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return floats, dict(heads=heads, kv_heads=kv_heads, rope_base=rope_base, tied=False, bias=arch == "qwen2",
                        head_dim=head_dim)


def write_hf_phi3(folder: Path, floats: dict, info: dict, config: dict) -> Path:
    """A Hugging Face Phi-3 checkpoint of phi3 weights: write_hf's files, then Q, K, V fused as
    self_attn.qkv_proj and gate, up as mlp.gate_up_proj (gate first), `config` merged into
    config.json (model_type phi3, rope_scaling, original_max_position_embeddings, ...)."""
    from safetensors.numpy import load_file, save_file
    root = write_hf(folder, "phi3", floats, info, "")
    t = load_file(str(root))
    for i in range(LAYERS):
        p = f"model.layers.{i}"
        t[f"{p}.self_attn.qkv_proj.weight"] = np.concatenate(
            [t.pop(f"{p}.self_attn.{x}_proj.weight") for x in "qkv"])
        t[f"{p}.mlp.gate_up_proj.weight"] = np.concatenate([t.pop(f"{p}.mlp.gate_proj.weight"), t.pop(f"{p}.mlp.up_proj.weight")])
    save_file(t, str(root), metadata={"format": "pt"})
    cfg = json.loads((folder / "config.json").read_text())
    cfg.update(config)
    (folder / "config.json").write_text(json.dumps(cfg, indent=1))
    return root


def rope_scaling_models(out: Path, seed: int, broken: dict) -> list:
    """phi3 and rope-scaling models, from a generator of their own (the models above keep their
    bytes): phi3-<T> (T in F32 F16 Q8_0): fused QKV and gate/up, long-RoPE factors and the
    attention factor llama.cpp's converter writes for a 256-position model trained at 64
    (sqrt(1 + ln 4 / ln 64)): every test context (128, 256) is over 64, so the long factors are
    used; phi3's F32 also as a Hugging Face checkpoint (qkv_proj, gate_up_proj, rope_scaling
    longrope with long_factor/short_factor). phi3-short-F32: 24 of 32 dimensions rotated (Phi-4-mini's
    partial rotary), trained at 4096 of 131072, so the short factors are used. llama-yarn-F32 and
    qwen2-yarn-F32: rope.scaling.type yarn, factor 4, original context 64 (qwen2's with
    yarn_beta_fast/slow keys, which llama.cpp does not read for these families, and
    rope.scaling.attn_factor). llama3-F32: Llama 3's rope_freqs.weight from rope_scaling llama3
    (factor 8, low 1, high 4, original context 64), with its Hugging Face checkpoint ("hf_scaled":
    config.json's rope_scaling, no rope_freqs tensor). Adds to `broken`: rope-dynamic (a llama
    with rope.scaling.type dynamic, which llama.cpp does not know either)."""
    from types import SimpleNamespace
    from gguf import RopeScalingType
    g = Gen(seed + 1000)
    models = []
    pairs = HIDDEN // 8 // 2
    long_f = (1.0 + g.rng.uniform(0.0, 6.0, pairs)).astype(np.float32)
    short_f = (1.0 + g.rng.uniform(0.0, 0.5, pairs)).astype(np.float32)
    attn = float(np.sqrt(1 + np.log(256 / 64) / np.log(64)))
    phi3_kv = {"add_rope_scaling_orig_ctx_len": 64, "add_rope_scaling_attn_factors": attn, "add_sliding_window": 0}
    for t in ("F32", "F16", "Q8_0"):
        path = out / f"phi3-{t}.gguf"
        floats, info = write_scaled(path, g, "phi3", Q[t], kv_heads=4, rope_base=10000.0, ctx=256, kv=phi3_kv,
                                    extra={"rope_factors_long.weight": long_f, "rope_factors_short.weight": short_f})
        entry = {"name": f"phi3-{t}", "arch": "phi3", "type": t, "path": str(path)}
        if t == "F32":
            entry["hf_scaled"] = str(write_hf_phi3(out / "phi3-F32-hf", floats, info, {
                "architectures": ["Phi3ForCausalLM"], "max_position_embeddings": 256,
                "original_max_position_embeddings": 64, "tie_word_embeddings": False,
                "rope_scaling": {"type": "longrope", "long_factor": [float(x) for x in long_f],
                                 "short_factor": [float(x) for x in short_f]}}))
        models.append(entry)
    pairs = 24 // 2
    long_f = (1.0 + g.rng.uniform(0.0, 6.0, pairs)).astype(np.float32)
    short_f = (1.0 + g.rng.uniform(0.0, 0.5, pairs)).astype(np.float32)
    attn = float(np.sqrt(1 + np.log(131072 / 4096) / np.log(4096)))
    path = out / "phi3-short-F32.gguf"
    write_scaled(path, g, "phi3", Q.F32, kv_heads=8, rope_base=10000.0, ctx=131072, rope_dim=24,
                 kv={"add_rope_scaling_orig_ctx_len": 4096, "add_rope_scaling_attn_factors": attn},
                 extra={"rope_factors_long.weight": long_f, "rope_factors_short.weight": short_f})
    models.append({"name": "phi3-short-F32", "arch": "phi3", "type": "F32", "path": str(path)})
    yarn = {"add_rope_scaling_type": RopeScalingType.YARN, "add_rope_scaling_factor": 4.0,
            "add_rope_scaling_orig_ctx_len": 64}
    for name, arch, base, kv in (
            ("llama-yarn", "llama", 10000.0, yarn),
            ("qwen2-yarn", "qwen2", 1e6, {**yarn, "add_rope_scaling_yarn_beta_fast": 16.0,
                                          "add_rope_scaling_yarn_beta_slow": 2.0,
                                          "add_rope_scaling_attn_factors": 1.1})):
        path = out / f"{name}-F32.gguf"
        write_scaled(path, g, arch, Q.F32, kv_heads=4 if arch == "llama" else 2, rope_base=base, ctx=256, kv=kv)
        models.append({"name": f"{name}-F32", "arch": arch, "type": "F32", "path": str(path)})
    rs = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "original_max_position_embeddings": 64}
    path = out / "llama3-F32.gguf"
    freqs = llama3_factors(HIDDEN // 8, 5e5, rs["factor"], rs["low_freq_factor"], rs["high_freq_factor"], 64)
    floats, info = write_scaled(path, g, "llama", Q.F32, kv_heads=4, rope_base=5e5, ctx=256,
                                extra={"rope_freqs.weight": freqs})
    root = write_hf(out / "llama3-F32-hf", "llama", floats, info, "")
    cfg = json.loads((root.parent / "config.json").read_text())
    cfg["rope_scaling"] = rs
    (root.parent / "config.json").write_text(json.dumps(cfg, indent=1))
    models.append({"name": "llama3-F32", "arch": "llama", "type": "F32", "path": str(path), "hf_scaled": str(root)})
    path = out / "rope-dynamic.gguf"
    write_scaled(path, g, "llama", Q.F32, kv_heads=4, rope_base=1e4, ctx=256,
                 kv={"add_rope_scaling_type": SimpleNamespace(value="dynamic"), "add_rope_scaling_factor": 2.0})
    broken["rope-dynamic"] = str(path)
    return models


GEMMA_HEADS, GEMMA_KV_HEADS, GEMMA_HEAD_DIM, GEMMA_WINDOW = 4, 2, 128, 8


def write_gemma(out: Path, g: Gen, arch: str, t: str) -> dict:
    """A random-weight gemma2/gemma3 GGUF as llama.cpp's converter writes one (norm weights as
    1 + w, no Q/K permutation, tied embeddings), and for F32 the same weights as a Hugging Face
    checkpoint (norms as w, HF names, config.json). Returns the manifest entry."""
    qtype = Q[t]
    path = out / f"{arch}-{t}.gguf"
    tokens, scores, types = vocab()
    n_vocab = len(tokens)
    heads, kv, hd = GEMMA_HEADS, GEMMA_KV_HEADS, GEMMA_HEAD_DIM
    w = GGUFWriter(str(path), arch)
    w.add_name(path.stem)
    w.add_block_count(LAYERS)
    w.add_context_length(256)
    w.add_embedding_length(HIDDEN)
    w.add_feed_forward_length(FFN)
    w.add_head_count(heads)
    w.add_head_count_kv(kv)
    w.add_key_length(hd)
    w.add_value_length(hd)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_sliding_window(GEMMA_WINDOW)
    w.add_sliding_window_pattern(2)
    if arch == "gemma3":
        w.add_rope_freq_base(1e6)
        w.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
        w.add_rope_scaling_factor(8.0)
    else:
        w.add_rope_freq_base(10000.0)
        w.add_attn_logit_softcapping(3.0)
        w.add_final_logit_softcapping(30.0)
    w.add_file_type(int(qtype) if qtype != Q.F32 else 0)
    w.add_tokenizer_model("llama")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_unk_token_id(0)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)
    floats = {}

    def mat(name, rows, cols, std):
        f = g.normal((rows, cols), std)
        floats[name] = f
        arr, raw = stored(g, f, qtype)
        w.add_tensor(name, arr, raw_dtype=raw)

    def vec(name, n, mean, std):
        f = (mean + g.normal((n,), std)).astype(np.float32)
        floats[name] = f
        w.add_tensor(name, f)

    # The embedding is scaled by sqrt(256) = 16: std 1/16 gives unit activations.
    mat("token_embd.weight", n_vocab, HIDDEN, 1.0 / 16)
    for i in range(LAYERS):
        p = f"blk.{i}"
        vec(f"{p}.attn_norm.weight", HIDDEN, 1.0, 0.1)
        mat(f"{p}.attn_q.weight", heads * hd, HIDDEN, 0.08)
        mat(f"{p}.attn_k.weight", kv * hd, HIDDEN, 0.08)
        mat(f"{p}.attn_v.weight", kv * hd, HIDDEN, 0.08)
        if arch == "gemma3":
            vec(f"{p}.attn_q_norm.weight", hd, 1.0, 0.2)
            vec(f"{p}.attn_k_norm.weight", hd, 1.0, 0.2)
        mat(f"{p}.attn_output.weight", HIDDEN, heads * hd, 0.08)
        vec(f"{p}.post_attention_norm.weight", HIDDEN, 1.0, 0.1)
        vec(f"{p}.ffn_norm.weight", HIDDEN, 1.0, 0.1)
        mat(f"{p}.ffn_gate.weight", FFN, HIDDEN, 0.1)
        mat(f"{p}.ffn_up.weight", FFN, HIDDEN, 0.1)
        mat(f"{p}.ffn_down.weight", HIDDEN, FFN, 0.08)
        vec(f"{p}.post_ffw_norm.weight", HIDDEN, 1.0, 0.1)
    # Tied embeddings of std 1/16: a final norm of ~4 makes the logits peaked (std ~4).
    vec("output_norm.weight", HIDDEN, 4.0, 0.4)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    entry = {"name": f"{arch}-{t}", "arch": arch, "type": t, "path": str(path)}
    if t == "F32":
        entry["gemma_hf"] = str(write_gemma_hf(out / f"{arch}-{t}-hf", arch, floats))
    return entry


def write_gemma_hf(folder: Path, arch: str, floats: dict) -> Path:
    """The gemma weights as Hugging Face stores them: norms as w (the model multiplies by 1 + w),
    pre_feedforward_layernorm for the FFN norm, no lm_head; config.json of Gemma2ForCausalLM or
    Gemma3ForCausalLM (model_type gemma3_text) with the GGUF's hyperparameters."""
    from safetensors.numpy import save_file
    # tokenizer.json as write_hf writes it for this vocabulary (its model.safetensors and
    # config.json are replaced below)
    write_hf(folder, "llama", {"token_embd.weight": floats["token_embd.weight"]},
             dict(heads=GEMMA_HEADS, kv_heads=GEMMA_KV_HEADS, rope_base=1e4, tied=True, head_dim=GEMMA_HEAD_DIM), "")
    parts = {"attn_norm.weight": "input_layernorm.weight", "ffn_norm.weight": "pre_feedforward_layernorm.weight",
             "post_attention_norm.weight": "post_attention_layernorm.weight",
             "post_ffw_norm.weight": "post_feedforward_layernorm.weight",
             "attn_q.weight": "self_attn.q_proj.weight", "attn_k.weight": "self_attn.k_proj.weight",
             "attn_v.weight": "self_attn.v_proj.weight", "attn_output.weight": "self_attn.o_proj.weight",
             "ffn_gate.weight": "mlp.gate_proj.weight", "ffn_up.weight": "mlp.up_proj.weight",
             "ffn_down.weight": "mlp.down_proj.weight",
             "attn_q_norm.weight": "self_attn.q_norm.weight", "attn_k_norm.weight": "self_attn.k_norm.weight"}
    out = {}
    for name, f in floats.items():
        if name == "token_embd.weight":
            hf = "model.embed_tokens.weight"
        elif name == "output_norm.weight":
            hf = "model.norm.weight"
        else:
            _, i, rest = name.split(".", 2)
            hf = f"model.layers.{i}.{parts[rest]}"
        if name.endswith("norm.weight"):
            f = f - np.float32(1.0)
        out[hf] = np.ascontiguousarray(f)
    root = folder / "model.safetensors"
    save_file(out, str(root), metadata={"format": "pt"})
    config = {
        "architectures": ["Gemma3ForCausalLM" if arch == "gemma3" else "Gemma2ForCausalLM"],
        "model_type": "gemma3_text" if arch == "gemma3" else "gemma2",
        "hidden_size": HIDDEN, "intermediate_size": FFN, "num_hidden_layers": LAYERS,
        "num_attention_heads": GEMMA_HEADS, "num_key_value_heads": GEMMA_KV_HEADS, "head_dim": GEMMA_HEAD_DIM,
        "query_pre_attn_scalar": GEMMA_HEAD_DIM, "max_position_embeddings": 256, "rms_norm_eps": 1e-6,
        "vocab_size": floats["token_embd.weight"].shape[0], "tie_word_embeddings": True,
        "hidden_activation": "gelu_pytorch_tanh", "sliding_window": GEMMA_WINDOW, "torch_dtype": "float32",
        "bos_token_id": 1, "eos_token_id": 2,
    }
    if arch == "gemma3":
        config.update({"rope_theta": 1e6, "rope_local_base_freq": 10000.0, "sliding_window_pattern": 2,
                       "rope_scaling": {"rope_type": "linear", "factor": 8.0}, "final_logit_softcapping": None})
    else:
        config.update({"rope_theta": 10000.0, "attn_logit_softcapping": 3.0, "final_logit_softcapping": 30.0})
    (folder / "config.json").write_text(json.dumps(config, indent=1))
    return root


def types_main(out: Path, seed: int, types: list, ctx: int = 256):
    """`llm_gen.py --types OUT_DIR SEED T1,T2,... [CONTEXT]`: llama-<T> for each weight type T (any type
    gguf-py quantizes, e.g. Q4_1 Q5_0 Q5_1, and the K-quants and IQ4_XS as random blocks, e.g.
    Q2_K Q3_K Q5_K IQ4_XS, which the default set leaves out because the device executors' tests
    run every model of it), the default set's shapes and vocabulary, a context of CONTEXT
    positions (256); prints {"models": [...]} as the default mode does."""
    out.mkdir(parents=True, exist_ok=True)
    g = Gen(seed)
    models = []
    for t in types:
        path = out / f"llama-{t}.gguf"
        write_model(path, g, "llama", Q[t], out_std=0.6, kv_heads=4, rope_base=10000.0, bias=False, tied=False,
                    ctx=ctx)
        models.append({"name": f"llama-{t}", "arch": "llama", "type": t, "path": str(path)})
    json.dump({"models": models}, sys.stdout)


if __name__ == "__main__":
    main()
