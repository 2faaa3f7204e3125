// The inspector's architecture view (web-demo/arch-view.js: architecture(), a pure function of
// tensor names, shapes and metadata) on checkpoints named as llama.cpp, Hugging Face, GPT-2 and
// a mixture of experts name them: the parts, the blocks and their parameters (issue 26).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { architecture, blockPart, outerPart } from '../../web-demo/arch-view.js';

const T = (name, shape, dtype = 'float32') => ({ name, shape, dtype, numel: shape.reduce((a, b) => a * b, 1), nbytes: 4 * shape.reduce((a, b) => a * b, 1) });

test('GPT-2 names: wte/wpe embeddings, h.N blocks with ln_1/attn and ln_2/mlp, ln_f', () => {
  const list = [T('transformer.wte.weight', [50, 8]), T('transformer.wpe.weight', [16, 8])];
  for (let i = 0; i < 3; i++) {
    for (const [n, s] of [['ln_1.weight', [8]], ['attn.c_attn.weight', [8, 24]], ['attn.c_proj.weight', [8, 8]], ['ln_2.weight', [8]], ['mlp.c_fc.weight', [8, 32]], ['mlp.c_proj.weight', [32, 8]]]) list.push(T(`transformer.h.${i}.${n}`, s));
  }
  list.push(T('transformer.ln_f.weight', [8]));
  const a = architecture(list);
  assert.equal(a.prefix, 'transformer.h');
  assert.equal(a.layers, 3);
  assert.deepEqual(a.embedding.tensors.map((t) => t.name), ['transformer.wte.weight', 'transformer.wpe.weight']);
  assert.deepEqual(a.block.parts.map((p) => [p.id, p.tensors.length, p.params]), [['attention', 3, 8 + 192 + 64], ['mlp', 3, 8 + 256 + 256]]);
  assert.deepEqual(a.norm.tensors.map((t) => t.name), ['transformer.ln_f.weight']);
  assert.equal(a.head.tensors.length, 0);
  assert.ok(a.notes.some((n) => /tied to the embedding/.test(n)));
});

test('a mixture of experts: 8 experts of a block are one row ×8 with their parameters', () => {
  const list = [T('model.embed_tokens.weight', [64, 8])];
  for (let i = 0; i < 4; i++) {
    list.push(T(`model.layers.${i}.input_layernorm.weight`, [8]), T(`model.layers.${i}.self_attn.q_proj.weight`, [8, 8]), T(`model.layers.${i}.post_attention_layernorm.weight`, [8]), T(`model.layers.${i}.block_sparse_moe.gate.weight`, [8, 8]));
    for (let e = 0; e < 8; e++) for (const w of ['w1', 'w2', 'w3']) list.push(T(`model.layers.${i}.block_sparse_moe.experts.${e}.${w}.weight`, w === 'w2' ? [8, 16] : [16, 8]));
  }
  list.push(T('model.norm.weight', [8]), T('lm_head.weight', [64, 8]));
  const a = architecture(list);
  assert.equal(a.layers, 4);
  const mlp = a.block.parts.find((p) => p.id === 'mlp');
  const w1 = mlp.tensors.find((t) => t.name === 'block_sparse_moe.experts.{0..7}.w1.weight');
  assert.ok(w1, JSON.stringify(mlp.tensors.map((t) => t.name)));
  assert.equal(w1.count, 8);
  assert.equal(w1.params, 8 * 128);
  assert.equal(w1.first, 'block_sparse_moe.experts.0.w1.weight');
  assert.equal(mlp.params, 8 + 64 + 3 * 8 * 128);
  assert.equal(a.block.params, 8 + 64 + 8 + 64 + 3 * 8 * 128);
});

test('no numbered blocks: no architecture; the word rules', () => {
  assert.equal(architecture([T('w', [2, 2]), T('b', [2])]), null);
  assert.equal(blockPart('self_attn.k_proj.bias'), 'attention');
  assert.equal(blockPart('ffn_norm.weight'), 'mlp');
  assert.equal(blockPart('attn_norm.weight'), 'attention');
  assert.equal(outerPart('output_norm.weight'), 'norm');
  assert.equal(outerPart('output.weight'), 'head');
  assert.equal(outerPart('token_embd.weight'), 'embedding');
});

test('Gemma 3 GGUF names and metadata: the head size is attention.key_length, not hidden / heads; the norms after attention and after the FFN sit in their parts', () => {
  // The shapes of the real Gemma 3 270M GGUF (640 wide, 4 heads of 256, 1 KV head, FFN 2048).
  const list = [T('token_embd.weight', [262144, 640])];
  for (let i = 0; i < 2; i++) {
    for (const [n, s] of [
      ['attn_norm.weight', [640]], ['attn_q.weight', [1024, 640]], ['attn_k.weight', [256, 640]], ['attn_v.weight', [256, 640]],
      ['attn_q_norm.weight', [256]], ['attn_k_norm.weight', [256]], ['attn_output.weight', [640, 1024]], ['post_attention_norm.weight', [640]],
      ['ffn_norm.weight', [640]], ['ffn_gate.weight', [2048, 640]], ['ffn_up.weight', [2048, 640]], ['ffn_down.weight', [640, 2048]], ['post_ffw_norm.weight', [640]],
    ]) list.push(T(`blk.${i}.${n}`, s));
  }
  list.push(T('output_norm.weight', [640]));
  const meta = [['general.architecture', '"gemma3"'], ['gemma3.embedding_length', '640'], ['gemma3.attention.head_count', '4'], ['gemma3.attention.head_count_kv', '1'], ['gemma3.attention.key_length', '256'], ['gemma3.attention.value_length', '256']].map(([key, value]) => ({ key, value }));
  const a = architecture(list, meta);
  const hyper = Object.fromEntries(a.hyper);
  assert.equal(hyper['head size'], 256);
  assert.equal(hyper['value head size'], undefined, 'the value head size is shown only where it differs');
  const part = (id) => a.block.parts.find((p) => p.id === id)?.tensors.map((t) => t.name) ?? [];
  assert.ok(part('attention').includes('attn_q_norm.weight') && part('attention').includes('post_attention_norm.weight'), part('attention').join());
  assert.ok(part('mlp').includes('post_ffw_norm.weight'), part('mlp').join());
  assert.deepEqual(part('other'), []);
  assert.equal(blockPart('post_feedforward_layernorm.weight'), 'mlp');
  assert.equal(blockPart('pre_feedforward_layernorm.weight'), 'mlp');
});
