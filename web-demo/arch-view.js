// The inspector's Architecture view: what a decoder-only LLM checkpoint is made of, derived from its
// tensor names and metadata alone (no config.json needed): embedding → N × block (attention, MLP)
// → final norm → head, each part with its tensors' shapes and dtypes and its parameter count.
// The names are the ones llm/src/arch.rs reads: llama.cpp's GGUF (`token_embd`, `blk.N.attn_q`,
// `ffn_gate`, `output_norm`, `output`) and Hugging Face's (`model.embed_tokens`,
// `model.layers.N.self_attn.q_proj`, `mlp.gate_proj`, `model.norm`, `lm_head`); other names with
// a numbered block (GPT-2's `h.N.attn`, ONNX initializers named after the module) are classified
// by the same word rules. Pure functions over the inspector's tensor list; the page draws HTML.

const esc = (s) => String(s).replace(/[&<>"]/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;' })[c]);
const count = (n) => (n >= 1e9 ? `${(n / 1e9).toFixed(2)} B` : n >= 1e6 ? `${(n / 1e6).toFixed(2)} M` : n >= 1e4 ? `${(n / 1e3).toFixed(1)} k` : String(n));
const dtypeOf = (t) => t.quant ?? t.dtype;

/** Which part of a block a tensor (its name relative to the block) belongs to. */
export function blockPart(rel) {
  // The norm before the MLP belongs to the MLP, the one before attention to attention.
  // Gemma's norms after the FFN (GGUF post_ffw_norm, HF post_feedforward_layernorm) close the MLP.
  if (/post_attention_layernorm|ffn_norm|ln_?2|post_attn|pre_feedforward|post_feedforward|_ffw_norm|mlp_norm/i.test(rel)) return 'mlp';
  if (/input_layernorm|attn_norm|ln_?1|attention_norm/i.test(rel)) return 'attention';
  if (/attn|attention|q_proj|k_proj|v_proj|o_proj|qkv|query|key|value/i.test(rel)) return 'attention';
  if (/mlp|ffn|feed_forward|fc1|fc2|gate|up_proj|down_proj|experts|w1|w2|w3|dense_h_to_4h|dense_4h_to_h/i.test(rel)) return 'mlp';
  return 'other';
}
/** What a tensor outside the blocks is: embedding, norm, head or other. */
export function outerPart(name) {
  if (/lm_head|embed_out|^output\.weight$|^output\.bias$/i.test(name)) return 'head';
  if (/embed|tok_embeddings|token_embd|wte|wpe|position_embd/i.test(name)) return 'embedding';
  if (/norm|ln_f/i.test(name)) return 'norm';
  return 'other';
}

const LABELS = { embedding: 'Embedding', attention: 'Attention', mlp: 'MLP', norm: 'Final norm', head: 'Head', other: 'Other' };

/**
 * The architecture of a checkpoint, or null when its tensors have no numbered blocks.
 * `tensors`: [{name, dtype, quant?, shape, numel, nbytes}]; `metadata`: [{key, value}] (strings).
 * Returns {scheme, arch, name, prefix, layers, hyper: [[key, value]], notes: [],
 *   embedding, norm, head, other: {label, tensors: [{name, shape, dtype, params}], params, bytes},
 *   block: {params, tensors, dtypes, parts: [{id, label, tensors, params}], total, first, last}}.
 */
export function architecture(tensors, metadata = []) {
  const meta = new Map(metadata.map((r) => [r.key, r.value]));
  // The numbered blocks: the prefix before the first all-digit name part that most tensors share.
  const byPrefix = new Map();
  for (const t of tensors) {
    const m = /^(.*?)\.?(\d+)\.(.+)$/.exec(t.name);
    if (!m || /\d+$/.test(m[1]) || (m[1] && !t.name.startsWith(`${m[1]}.`))) continue;
    const e = byPrefix.get(m[1]) ?? { prefix: m[1], layers: new Map(), n: 0 };
    const layer = Number(m[2]);
    if (!e.layers.has(layer)) e.layers.set(layer, []);
    e.layers.get(layer).push({ t, rel: m[3] });
    e.n++;
    byPrefix.set(m[1], e);
  }
  const best = [...byPrefix.values()].filter((e) => e.layers.size >= 1).sort((a, b) => b.n - a.n)[0];
  if (!best) return null;
  const ids = [...best.layers.keys()].sort((a, b) => a - b);
  const inBlocks = new Set([...best.layers.values()].flat().map((x) => x.t));
  const row = (t, name = t.name) => ({ name, shape: t.shape, dtype: dtypeOf(t), params: t.numel, bytes: t.nbytes ?? 0 });
  const group = (id, list) => ({ id, label: LABELS[id], tensors: list, params: list.reduce((n, x) => n + x.params, 0), bytes: list.reduce((n, x) => n + x.bytes, 0) });
  const outer = { embedding: [], norm: [], head: [], other: [] };
  for (const t of tensors) if (!inBlocks.has(t)) outer[outerPart(t.name)].push(row(t));
  // One layer stands for all: the first; the others are checked against it (names and shapes).
  const first = best.layers.get(ids[0]);
  const sig = (list) => list.map((x) => `${x.rel}:${x.t.shape.join('x')}`).sort().join('|');
  const firstSig = sig(first);
  const unlike = ids.filter((i) => sig(best.layers.get(i)) !== firstSig);
  const parts = { attention: [], mlp: [], other: [] };
  for (const x of first) parts[blockPart(x.rel)].push(row(x.t, x.rel));
  for (const k of Object.keys(parts)) parts[k] = collapseNumbered(parts[k]);
  const dtypes = new Set([...best.layers.values()].flat().map((x) => dtypeOf(x.t)));
  const perLayer = first.reduce((n, x) => n + x.t.numel, 0);
  const total = [...best.layers.values()].flat().reduce((n, x) => n + x.t.numel, 0);
  const str = (k) => {
    if (!meta.has(k)) return null;
    try {
      return String(JSON.parse(meta.get(k)));
    } catch {
      return String(meta.get(k));
    }
  };
  const arch = str('general.architecture');
  const scheme = best.prefix === 'blk' ? 'gguf (llama.cpp names)' : /(^|\.)layers$/.test(best.prefix) && tensors.some((t) => /self_attn|mlp\./.test(t.name)) ? 'Hugging Face names' : 'numbered blocks';
  // Hyperparameters: from the GGUF keys of its architecture, else read off the shapes.
  const hyper = [];
  const notes = [];
  const num = (k) => (meta.has(k) ? Number(meta.get(k)) : null);
  const key = (k) => (arch ? num(`${arch}.${k}`) : null);
  const emb = outer.embedding.find((x) => x.shape.length === 2);
  const hidden = key('embedding_length') ?? emb?.shape[1] ?? null;
  const vocab = emb?.shape[0] ?? null;
  const gate = parts.mlp.find((x) => /gate|up|fc1|w1|w3|h_to_4h/.test(x.name) && x.shape.length === 2);
  const ff = key('feed_forward_length') ?? gate?.shape[0] ?? null;
  const heads = key('attention.head_count');
  const kvHeads = key('attention.head_count_kv');
  if (arch) hyper.push(['architecture', arch]);
  hyper.push(['blocks', `${ids.length}${key('block_count') !== null && key('block_count') !== ids.length ? ` (metadata says ${key('block_count')})` : ''}`]);
  if (hidden !== null) hyper.push(['hidden size', hidden]);
  if (ff !== null) hyper.push(['feed-forward size', ff]);
  if (vocab !== null) hyper.push(['vocabulary', vocab]);
  if (heads !== null) hyper.push(['attention heads', heads]);
  if (kvHeads !== null) hyper.push(['KV heads', `${kvHeads}${heads ? ` (${heads / kvHeads} query heads share each)` : ''}`]);
  // The file's own head size where it has one (Gemma, Qwen3: wider than hidden / heads), else the quotient.
  const headSize = key('attention.key_length') ?? (heads && hidden ? hidden / heads : null);
  if (headSize !== null) hyper.push(['head size', headSize]);
  const vSize = key('attention.value_length');
  if (vSize !== null && vSize !== headSize) hyper.push(['value head size', vSize]);
  const ctx = key('context_length');
  if (ctx !== null) hyper.push(['context length', ctx]);
  if (key('block_count') !== null && key('block_count') !== ids.length) notes.push(`the metadata says ${key('block_count')} blocks; the file has ${ids.length}`);
  if (unlike.length) notes.push(`blocks ${unlike.join(', ')} differ from block ${ids[0]} in names or shapes`);
  if (ids.some((id, i) => id !== ids[0] + i)) notes.push('the block numbers have gaps');
  if (!outer.head.length && emb) notes.push('no head tensor: the head is tied to the embedding (it reuses its matrix)');
  if (dtypes.size > 1) notes.push(`the blocks store their tensors in several dtypes: ${[...dtypes].join(', ')}`);
  return {
    scheme,
    arch,
    name: str('general.name'),
    prefix: best.prefix,
    layers: ids.length,
    hyper,
    notes,
    embedding: group('embedding', outer.embedding),
    norm: group('norm', outer.norm),
    head: group('head', outer.head),
    other: group('other', outer.other),
    block: {
      first: ids[0],
      last: ids[ids.length - 1],
      params: perLayer,
      tensors: first.length,
      total,
      dtypes: [...dtypes],
      parts: ['attention', 'mlp', 'other'].map((id) => group(id, parts[id])).filter((g) => g.tensors.length),
    },
    params: tensors.reduce((n, t) => n + t.numel, 0),
  };
}

/**
 * Rows whose names differ only in a number (a mixture of experts' `experts.0..63.w1.weight`) with
 * the same shape and dtype become one row `experts.{0..63}.w1.weight` with `count` and the params
 * of all of them; the first member's name stays in `first` (what a click opens).
 */
export function collapseNumbered(rows) {
  const key = (r) => {
    const m = /^(.*?)(\d+)(\..*)$/.exec(r.name);
    return m ? { k: `${m[1]}#${m[3]}:${r.shape.join('x')}:${r.dtype}`, pre: m[1], id: Number(m[2]), post: m[3] } : null;
  };
  const groups = new Map();
  for (const r of rows) {
    const m = key(r);
    if (m) (groups.get(m.k) ?? groups.set(m.k, []).get(m.k)).push({ r, ...m });
  }
  const out = [];
  const done = new Set();
  for (const r of rows) {
    const m = key(r);
    const list = m && groups.get(m.k);
    if (!list || list.length < 3) {
      out.push(r);
      continue;
    }
    if (done.has(m.k)) continue;
    done.add(m.k);
    const ids = list.map((x) => x.id);
    out.push({
      name: `${m.pre}{${Math.min(...ids)}..${Math.max(...ids)}}${m.post}`,
      first: r.name,
      shape: r.shape,
      dtype: r.dtype,
      count: list.length,
      params: list.reduce((n, x) => n + x.r.params, 0),
      bytes: list.reduce((n, x) => n + x.r.bytes, 0),
    });
  }
  return out;
}

function partCard(g, { times = 1, path = '' } = {}) {
  const rows = g.tensors
    .map((x) => `<tr data-part-tensor="${esc(x.first ?? x.name)}"${x.count ? ` data-count="${x.count}"` : ''}><td>${esc(x.name)}${x.count ? ` <span class="muted">×${x.count}</span>` : ''}</td><td>[${x.shape.join(', ')}]</td><td>${esc(x.dtype)}</td><td class="num">${count(x.params)}</td></tr>`)
    .join('');
  const tot = times > 1 ? ` · ×${times} = ${count(g.params * times)}` : '';
  return `<div class="arch-part" data-part="${esc(path || g.id)}" data-params="${g.params}" data-tensors="${g.tensors.length}">
    <div class="arch-head"><b>${esc(g.label)}</b><span class="muted">${count(g.params)} params${tot}</span></div>
    <table class="kv arch-tensors">${rows || '<tr><td class="muted">none</td></tr>'}</table></div>`;
}

/** HTML of the architecture `a` (architecture()'s result). */
export function renderArchitecture(a) {
  const arrow = '<div class="arch-arrow">↓</div>';
  const hyper = a.hyper.map(([k, v]) => `<tr><th>${esc(k)}</th><td data-hyper="${esc(k)}">${esc(v)}</td></tr>`).join('');
  const notes = a.notes.map((n) => `<li>${esc(n)}</li>`).join('');
  const b = a.block;
  const where = a.prefix ? `${a.prefix}.${b.first}..${b.last}` : `${b.first}..${b.last}`;
  const head = a.head.tensors.length ? partCard(a.head) : `<div class="arch-part" data-part="head" data-params="0" data-tied="true"><div class="arch-head"><b>Head</b><span class="muted">tied to the embedding</span></div></div>`;
  return `<div class="arch" data-layers="${a.layers}" data-prefix="${esc(a.prefix)}" data-params="${a.params}">
    <div class="card"><h2>${esc(a.name ?? a.arch ?? 'Architecture')}</h2>
      <div class="muted">${esc(a.scheme)} · ${count(a.params)} parameters · derived from the tensor names${a.arch ? ' and the metadata' : ''}</div>
      <table class="kv arch-hyper">${hyper}</table>${notes ? `<ul class="arch-notes">${notes}</ul>` : ''}</div>
    ${partCard(a.embedding)}${arrow}
    <div class="arch-block" data-part="block" data-repeat="${a.layers}" data-params="${b.params}" data-total="${b.total}">
      <div class="arch-head"><b>${a.layers} × block</b><span class="muted">${esc(where)} · ${b.tensors} tensors, ${count(b.params)} params each · ${count(b.total)} in all${b.dtypes.length > 1 ? ` · ${esc(b.dtypes.join(', '))}` : ''}</span></div>
      <div class="arch-row">${b.parts.map((p) => partCard(p, { times: a.layers, path: `block.${p.id}` })).join('<div class="arch-plus">→</div>')}</div>
    </div>${arrow}
    ${partCard(a.norm)}${arrow}${head}
    ${a.other.tensors.length ? partCard(a.other) : ''}
  </div>`;
}
