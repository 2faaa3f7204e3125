// Small llama-shaped checkpoints for the inspector's layer tree and architecture view (issue 26),
// written in memory: a GGUF with llama.cpp's names (`token_embd`, `blk.N.attn_q`, …, `output`) and
// its metadata, and a safetensors with Hugging Face's names (`model.embed_tokens`,
// `model.layers.N.self_attn.q_proj`, …, `lm_head`). Shapes as llm/src/arch.rs describes them.
// Not a test file itself.
import { ggufFile, safetensorsFile } from './_model_files.mjs';

/** The shapes: vocabulary, hidden size, feed-forward size, layers, heads, KV heads. */
export const LLM = { vocab: 64, hidden: 16, ff: 32, layers: 4, heads: 4, kvHeads: 2 };
const headDim = LLM.hidden / LLM.heads;
const kv = LLM.kvHeads * headDim;

/** One layer's tensors, row-major shapes, by part: [part, gguf suffix, hf suffix, shape]. */
export const LAYER = [
  ['attention', 'attn_norm.weight', 'input_layernorm.weight', [LLM.hidden]],
  ['attention', 'attn_q.weight', 'self_attn.q_proj.weight', [LLM.hidden, LLM.hidden]],
  ['attention', 'attn_k.weight', 'self_attn.k_proj.weight', [kv, LLM.hidden]],
  ['attention', 'attn_v.weight', 'self_attn.v_proj.weight', [kv, LLM.hidden]],
  ['attention', 'attn_output.weight', 'self_attn.o_proj.weight', [LLM.hidden, LLM.hidden]],
  ['mlp', 'ffn_norm.weight', 'post_attention_layernorm.weight', [LLM.hidden]],
  ['mlp', 'ffn_gate.weight', 'mlp.gate_proj.weight', [LLM.ff, LLM.hidden]],
  ['mlp', 'ffn_up.weight', 'mlp.up_proj.weight', [LLM.ff, LLM.hidden]],
  ['mlp', 'ffn_down.weight', 'mlp.down_proj.weight', [LLM.hidden, LLM.ff]],
];
const numel = (shape) => shape.reduce((a, b) => a * b, 1);
/** Parameters per layer and per part (attention: its norm, Q, K, V, output; mlp: its norm, gate, up, down). */
export const PARAMS = {
  layer: LAYER.reduce((n, [, , , s]) => n + numel(s), 0),
  attention: LAYER.filter(([p]) => p === 'attention').reduce((n, [, , , s]) => n + numel(s), 0),
  mlp: LAYER.filter(([p]) => p === 'mlp').reduce((n, [, , , s]) => n + numel(s), 0),
  embedding: LLM.vocab * LLM.hidden,
  norm: LLM.hidden,
  head: LLM.vocab * LLM.hidden,
};
PARAMS.total = PARAMS.embedding + LLM.layers * PARAMS.layer + PARAMS.norm + PARAMS.head;

function f32(shape, seed) {
  const a = new Float32Array(numel(shape));
  for (let i = 0; i < a.length; i++) a[i] = Math.sin(seed * 131 + i * 0.7) * 0.5;
  return new Uint8Array(a.buffer);
}

/**
 * The GGUF: F32 everywhere except blk.1.ffn_down.weight in F16 (a quantizer's mixed types: the
 * same architecture), with `general.architecture` llama and its hyperparameters.
 */
export function llamaGguf() {
  const tensors = [];
  let seed = 1;
  const add = (name, shape, type = 0) => {
    const data = type === 1 ? new Uint8Array(numel(shape) * 2).fill(0x3c) : f32(shape, seed++);
    tensors.push([name, { type, ne: [...shape].reverse(), data }]);
  };
  add('token_embd.weight', [LLM.vocab, LLM.hidden]);
  for (let l = 0; l < LLM.layers; l++) for (const [, g, , s] of LAYER) add(`blk.${l}.${g}`, s, l === 1 && g === 'ffn_down.weight' ? 1 : 0);
  add('output_norm.weight', [LLM.hidden]);
  add('output.weight', [LLM.vocab, LLM.hidden]);
  const u = (value) => ({ type: 'UINT32', value });
  const kvs = [
    ['general.architecture', { type: 'STRING', value: 'llama' }],
    ['general.name', { type: 'STRING', value: 'tiny llama' }],
    ['llama.block_count', u(LLM.layers)],
    ['llama.context_length', u(128)],
    ['llama.embedding_length', u(LLM.hidden)],
    ['llama.feed_forward_length', u(LLM.ff)],
    ['llama.attention.head_count', u(LLM.heads)],
    ['llama.attention.head_count_kv', u(LLM.kvHeads)],
  ];
  return ggufFile(kvs, tensors);
}

/**
 * The same model with Hugging Face's names, float32 (`tied`: no lm_head, the embedding serves;
 * `nudge`: {name, by}, one value of one tensor moved).
 */
export function llamaSafetensors({ tied = false, nudge = null } = {}) {
  const tensors = [];
  let seed = 1;
  const add = (name, shape) => {
    const data = f32(shape, seed++);
    // `nudge`: {name, by}: that tensor's first value moved by `by` (a fine-tune's tiny change).
    if (nudge?.name === name) new Float32Array(data.buffer)[0] += nudge.by;
    tensors.push([name, { dtype: 'F32', shape, data }]);
  };
  add('model.embed_tokens.weight', [LLM.vocab, LLM.hidden]);
  for (let l = 0; l < LLM.layers; l++) for (const [, , h, s] of LAYER) add(`model.layers.${l}.${h}`, s);
  add('model.norm.weight', [LLM.hidden]);
  if (!tied) add('lm_head.weight', [LLM.vocab, LLM.hidden]);
  return safetensorsFile(tensors, { format: 'pt' });
}
