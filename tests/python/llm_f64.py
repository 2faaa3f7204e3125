#!/usr/bin/env python3
"""A llama forward pass in float64, the yardstick both tensorlane and llama.cpp are held to
(llm/tests/llama_reference.rs, `logits_against_a_float64_forward_pass`).

    llm_f64.py MODEL.gguf IDS OUT.f64

MODEL: a GGUF of architecture `llama` (token_embd, blk.N.{attn_norm, attn_q, attn_k, attn_v,
attn_output, ffn_norm, ffn_gate, ffn_up, ffn_down}, output_norm, output or a tied embedding).
IDS: the prompt's token ids, comma-separated. OUT: the log-probabilities of every token at
every position (positions x vocabulary, little-endian float64).

Every weight is dequantized by gguf-py (exact: a block's scale times its integers) and every
operation is taken in float64 with no rounding of activations: RMS norm, RoPE in ggml's normal
mode (adjacent pairs, theta = position * base^(-2i/head_dim)), causal grouped-query attention
scaled by 1/sqrt(head_dim), SwiGLU, the output projection, a log-softmax.
"""
import sys

import numpy as np
from gguf import GGUFReader
from gguf import quants


def main() -> None:
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    r = GGUFReader(sys.argv[1])
    ids = np.array([int(t) for t in sys.argv[2].split(",")])

    def field(key):
        f = r.fields[key]
        return f.parts[f.data[0]][0]

    arch = bytes(r.fields["general.architecture"].parts[-1]).decode()
    if arch != "llama":
        sys.exit(f"llm_f64.py: architecture {arch!r}: only llama")
    n_layer = int(field("llama.block_count"))
    n_head = int(field("llama.attention.head_count"))
    n_kv = int(field("llama.attention.head_count_kv"))
    eps = float(field("llama.attention.layer_norm_rms_epsilon"))
    base = float(field("llama.rope.freq_base")) if "llama.rope.freq_base" in r.fields else 10000.0
    tensors = {t.name: t for t in r.tensors}

    def weight(name):
        t = tensors[name]
        rows = int(t.shape[1]) if len(t.shape) > 1 else 1
        a = quants.dequantize(np.asarray(t.data), t.tensor_type)
        return np.asarray(a, dtype=np.float64).reshape(rows, -1) if len(t.shape) > 1 else np.asarray(a, dtype=np.float64).ravel()

    def rms(x, w):
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w

    emb = weight("token_embd.weight")
    x = emb[ids]
    n = len(ids)
    hd = weight("blk.0.attn_q.weight").shape[0] // n_head
    inv = base ** (-np.arange(0, hd, 2, dtype=np.float64) / hd)
    ang = np.arange(n, dtype=np.float64)[:, None] * inv[None, :]
    cos, sin = np.cos(ang), np.sin(ang)

    def rope(v):  # v: n x heads x hd, adjacent pairs rotated
        a, b = v[..., 0::2], v[..., 1::2]
        c, s = cos[:, None, :], sin[:, None, :]
        out = np.empty_like(v)
        out[..., 0::2] = a * c - b * s
        out[..., 1::2] = a * s + b * c
        return out

    mask = np.triu(np.full((n, n), -np.inf), 1)
    for i in range(n_layer):
        p = f"blk.{i}"
        h = rms(x, weight(f"{p}.attn_norm.weight"))
        q = rope((h @ weight(f"{p}.attn_q.weight").T).reshape(n, n_head, hd))
        k = rope((h @ weight(f"{p}.attn_k.weight").T).reshape(n, n_kv, hd))
        v = (h @ weight(f"{p}.attn_v.weight").T).reshape(n, n_kv, hd)
        out = np.empty((n, n_head, hd))
        for j in range(n_head):
            kv = j // (n_head // n_kv)
            s = q[:, j, :] @ k[:, kv, :].T / np.sqrt(hd) + mask
            s = np.exp(s - s.max(axis=-1, keepdims=True))
            out[:, j, :] = (s / s.sum(axis=-1, keepdims=True)) @ v[:, kv, :]
        x = x + out.reshape(n, n_head * hd) @ weight(f"{p}.attn_output.weight").T
        h = rms(x, weight(f"{p}.ffn_norm.weight"))
        g = h @ weight(f"{p}.ffn_gate.weight").T
        u = h @ weight(f"{p}.ffn_up.weight").T
        x = x + (g / (1.0 + np.exp(-g)) * u) @ weight(f"{p}.ffn_down.weight").T
    x = rms(x, weight("output_norm.weight"))
    out_w = weight("output.weight") if "output.weight" in tensors else emb
    logits = x @ out_w.T
    m = logits.max(axis=-1, keepdims=True)
    logp = logits - m - np.log(np.exp(logits - m).sum(axis=-1, keepdims=True))
    logp.astype("<f8").tofile(sys.argv[3])


if __name__ == "__main__":
    main()
