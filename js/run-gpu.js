// The WebGPU executor of a GGUF language model, weights streamed under a budget: the forward pass
// of llm/src/wgpu.rs (the native wgpu executor) on `navigator.gpu`, dispatch for dispatch, with
// the same WGSL sources (llm/src/wgsl/*.wgsl, bundled by scripts/build-js.sh). Weights are
// uploaded in stored form (F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q6_K; the kernels decode f16 with
// unpack2x16float, so no `shader-f16` is needed). Under a plan (wasm `LlmModel.plan`) each
// matrix keeps its resident rows in buffers of its own, read once; its streamed rows are read
// from the source (File slices or HTTP Range) in plan order every forward pass, one weight ahead
// of the one computing (double-buffered), and written into their slot of the ring buffer the plan
// sizes. A weight over the adapter's binding limit is bound in parts of whole rows.
//
// Runs wherever WebGPU is (a module Worker in the browser: js/run-worker.js).

/** Positions per batch (llm/src/plan.rs BATCH: the activation buffers hold this many). */
export const BATCH = 32;
/** Most workgroups along x in one dispatch (the rest along y), as llm/src/wgpu.rs. */
const GRID_X = 65535;
/** Inputs one matmul workgroup takes for a batch (JPER in llm/src/wgsl/matmul.wgsl). */
const MATMUL_INPUTS_PER_GROUP = 8;

function grid(count) {
  const c = Math.max(1, count);
  const x = Math.min(c, GRID_X);
  return [x, Math.ceil(c / x)];
}
function gcd(a, b) {
  return b === 0 ? a : gcd(b, a % b);
}
const pad4 = (n) => Math.ceil(n / 4) * 4;

/** f16 bits -> number. */
function halfToFloat(h) {
  const s = h & 0x8000 ? -1 : 1;
  const e = (h >> 10) & 0x1f;
  const m = h & 0x3ff;
  if (e === 0) return s * m * 2 ** -24;
  if (e === 31) return m ? NaN : s * Infinity;
  return s * (1 + m / 1024) * 2 ** (e - 15);
}

/**
 * Rows of a stored tensor as f32 (`t` from `LlmModel.tensors()`): plain F32/F16/BF16 here, ggml
 * blocks with the core's dequantizer (`glue.ggmlDequantize`).
 */
export function rowsToF32(glue, t, bytes) {
  const b = bytes.byteOffset % 4 === 0 ? bytes : bytes.slice();
  if (t.kind === 0) return new Float32Array(b.buffer, b.byteOffset, b.byteLength / 4).slice();
  if (t.kind === 1 || t.kind === 2) {
    const u = new Uint16Array(b.buffer, b.byteOffset, b.byteLength / 2);
    const out = new Float32Array(u.length);
    if (t.kind === 1) for (let i = 0; i < u.length; i++) out[i] = halfToFloat(u[i]);
    else {
      const v = new Uint32Array(1);
      const f = new Float32Array(v.buffer);
      for (let i = 0; i < u.length; i++) {
        v[0] = u[i] << 16;
        out[i] = f[0];
      }
    }
    return out;
  }
  if (t.ggml == null) throw new Error(`tensor ${t.name}: ${t.dtype} rows cannot be decoded here`);
  return glue.ggmlDequantize(t.ggml, b);
}

/**
 * Reads the plan's streamed rows in order, at most `depth` weights ahead of the one being
 * computed: `next()` hands out the bytes of the next streamed matrix (cycling through the
 * forward pass), `ahead` says how far reads may run past the current forward.
 */
class Streamer {
  constructor(source, order, depth) {
    this.source = source;
    this.order = order; // [{m, offset, len}]
    this.depth = depth;
    this.queue = []; // [{i, promise, ready}]
    this.issued = 0; // reads issued (an ever-growing index; order[issued % n])
    this.allowed = 0; // reads allowed to be issued (grows by order.length per forward)
    this.pass = -1; // the forward pass under way
    this.error = null;
  }
  /** Starts a forward pass: reads up to the end of this pass (`passes` 1) or the next (2) may be issued. */
  allowPasses(passes) {
    this.pass = (this.pass ?? -1) + 1;
    this.allowed = Math.max(this.allowed, (this.pass + passes) * this.order.length);
    this.fill();
  }
  fill() {
    while (this.queue.length < this.depth && this.issued < this.allowed) {
      const o = this.order[this.issued % this.order.length];
      const item = { i: this.issued, ready: false };
      item.promise = this.source.read(o.offset, o.len).then((b) => {
        item.ready = true;
        return b;
      });
      item.promise.catch(() => {});
      this.queue.push(item);
      this.issued++;
    }
  }
  /** Whether the next weight's bytes are already here. */
  nextReady() {
    return this.queue.length > 0 && this.queue[0].ready;
  }
  async next() {
    this.fill();
    const item = this.queue.shift();
    if (!item) throw new Error('internal: a streamed weight was asked for beyond the plan');
    const bytes = await item.promise;
    this.fill();
    return bytes;
  }
  /** Drops reads not consumed (a cancelled or finished run) and starts over at the first weight. */
  drop() {
    this.queue = [];
    this.issued = 0;
    this.allowed = 0;
    this.pass = -1;
  }
}

export class GpuRunner {
  /**
   * Builds the executor. `prep`: `prepareModel`'s `{model, spec, tensors}`; `plan`: the parsed
   * `LlmModel.plan()` JSON or null (everything resident); `wgsl`: the bundled sources;
   * `bindLimit`: bind weights in parts of at most this many bytes (default: the adapter's limit);
   * `onStream({tensor, slot, bytes})` as each streamed weight is written into its ring slot;
   * `onProgress({phase, loaded, total})` while resident weights are read.
   */
  static async create({ device, glue, source, prep, plan, context, wgsl, bindLimit, onProgress = () => {}, onStream = () => {} }) {
    const r = new GpuRunner();
    r.device = device;
    r.glue = glue;
    r.source = source;
    r.spec = prep.spec;
    r.context = context;
    r.onStream = onStream;
    r.plan = plan;
    const limits = device.limits;
    // `bindLimit` lowers the binding size below the adapter's (tests split weights with it).
    r.maxBind = Math.min(limits.maxStorageBufferBindingSize, limits.maxBufferSize, bindLimit ?? Infinity);
    r.align = Math.max(4, limits.minStorageBufferOffsetAlignment);
    await r.pipelines(wgsl);
    const h = r.spec;
    const byRole = new Map();
    for (const t of prep.tensors) byRole.set(`${t.role}:${t.layer ?? ''}`, t);
    const get = (role, layer = '') => byRole.get(`${role}:${layer}`);
    const planT = new Map((plan?.tensors ?? []).map((t) => [t.name, t]));
    const slots = new Map((plan?.chunks ?? []).map((c) => [c.tensor, c.slot]));

    if (plan && plan.ring_bytes > 0) {
      if (plan.ring_bytes > limits.maxBufferSize) throw new Error(`the plan's ring of ${plan.ring_bytes} bytes is over the adapter's maxBufferSize ${limits.maxBufferSize} (pick a larger budget or the flexgen-like policy)`);
      r.ring = device.createBuffer({ label: 'streamed weights ring', size: pad4(plan.ring_bytes), usage: GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_DST });
    }
    // Resident bytes to read: every vector, the embedding (host lookups), each matrix's resident rows.
    const mats = prep.tensors.filter((t) => ['wq', 'wk', 'wv', 'wo', 'gate', 'up', 'down', 'output'].includes(t.role));
    const tied = !get('output');
    const total = prep.tensors.filter((t) => !mats.includes(t)).reduce((a, t) => a + t.bytes, 0) + mats.reduce((a, t) => a + (planT.get(t.name)?.resident_bytes ?? t.bytes), 0);
    let loaded = 0;
    const read = async (offset, len) => {
      const b = await source.read(offset, len);
      loaded += len;
      onProgress({ phase: 'load', loaded, total });
      return b;
    };
    const vec = async (t) => {
      if (!t) return null;
      const v = rowsToF32(glue, t, await read(t.offset, t.bytes));
      return r.f32Buffer(t.name, v);
    };
    const embd = get('token_embd');
    r.embd = embd;
    r.embdBytes = await read(embd.offset, embd.bytes);
    /** Weights on the device and the bindings they take (more parts than weights: some are split). */
    r.bindings = { weights: 0, parts: 0, limit: r.maxBind };
    r.streamOrder = [];
    const gmat = async (t, fromHost) => {
      const p = planT.get(t.name);
      const rowBytes = t.row_bytes;
      const slot = slots.get(t.name);
      let residentRows = t.rows;
      if (p && slot !== undefined && p.resident_bytes < t.bytes) {
        if (p.resident_bytes % rowBytes !== 0) throw new Error(`the plan keeps ${p.resident_bytes} bytes of ${t.name} resident, not whole rows of ${rowBytes} bytes`);
        residentRows = p.resident_bytes / rowBytes;
      }
      const fit = Math.floor((r.maxBind - 3) / rowBytes);
      const unit = r.align / gcd(r.align, rowBytes);
      const rowsPer = Math.floor(fit / unit) * unit;
      if (rowsPer === 0) throw new Error(`tensor ${t.name}: rows of ${rowBytes} bytes, over the adapter's maxStorageBufferBindingSize (${r.maxBind} bytes)`);
      const g = { name: t.name, kind: t.kind, rows: t.rows, cols: t.cols, rowBytes, parts: [], stream: null };
      const resBytes = residentRows * rowBytes;
      const bytes = resBytes === 0 ? null : fromHost ? fromHost.subarray(0, resBytes) : await read(t.offset, resBytes);
      for (let row0 = 0; row0 < residentRows; ) {
        const rows = Math.min(rowsPer, residentRows - row0);
        const buf = device.createBuffer({ label: t.name, size: pad4(rows * rowBytes), usage: GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_DST, mappedAtCreation: true });
        new Uint8Array(buf.getMappedRange()).set(bytes.subarray(row0 * rowBytes, (row0 + rows) * rowBytes));
        buf.unmap();
        g.parts.push({ buf, offset: 0, size: buf.size, row0, rows });
        row0 += rows;
      }
      if (residentRows < t.rows) {
        if (!r.ring) throw new Error('the plan streams weights but has no ring');
        for (let row0 = residentRows; row0 < t.rows; ) {
          const rows = Math.min(rowsPer, t.rows - row0);
          const offset = slot + (row0 - residentRows) * rowBytes;
          const size = pad4(rows * rowBytes);
          if (offset + size > r.ring.size) throw new Error(`the plan's ring slot of ${t.name} at ${slot} leaves the ring (${r.ring.size} bytes)`);
          g.parts.push({ buf: r.ring, offset, size, row0, rows });
          row0 += rows;
        }
        g.stream = { slot, len: (t.rows - residentRows) * rowBytes };
        r.streamOrder.push({ m: t.name, offset: t.offset + resBytes, len: g.stream.len });
      }
      r.bindings.parts += g.parts.length;
      r.bindings.weights += 1;
      return g;
    };
    r.layers = [];
    for (let l = 0; l < h.n_layer; l++) {
      const bq = get('bq', l);
      const layer = { attn_norm: await vec(get('attn_norm', l)) };
      layer.wq = await gmat(get('wq', l));
      layer.wk = await gmat(get('wk', l));
      layer.wv = await gmat(get('wv', l));
      layer.bias = bq ? [await vec(bq), await vec(get('bk', l)), await vec(get('bv', l))] : null;
      const qn = get('q_norm', l);
      layer.qkNorm = qn ? [await vec(qn), await vec(get('k_norm', l))] : null;
      layer.wo = await gmat(get('wo', l));
      layer.ffn_norm = await vec(get('ffn_norm', l));
      layer.gate = await gmat(get('gate', l));
      layer.up = await gmat(get('up', l));
      layer.down = await gmat(get('down', l));
      r.layers.push(layer);
    }
    r.output = tied ? await gmat(embd, r.embdBytes) : await gmat(get('output'));
    r.output_norm = await vec(get('output_norm'));
    const freqsT = get('rope_freqs');
    const freqs = freqsT ? rowsToF32(glue, freqsT, await read(freqsT.offset, freqsT.bytes)) : undefined;
    r.ropeTable = r.f32Buffer('rope', prep.model.ropeTable(context, freqs));
    // The streamed matrices in the order the forward pass uses them: the plan's chunk order.
    const chunkOrder = (plan?.chunks ?? []).map((c) => c.tensor);
    const pos = new Map(chunkOrder.map((n, i) => [n, i]));
    r.streamOrder.sort((a, b) => (pos.get(a.m) ?? 0) - (pos.get(b.m) ?? 0));
    r.streamer = new Streamer(source, r.streamOrder, 2);
    r.streamedPerForward = r.streamOrder.reduce((a, o) => a + o.len, 0);
    r.residentRead = loaded;

    const qDim = h.n_head * h.head_dim;
    const kvDim = h.n_head_kv * h.head_dim;
    const alloc = (label, floats, extra = 0) => {
      const size = Math.max(1, floats) * 4;
      if (size > r.maxBind) throw new Error(`the ${label} buffer needs ${size} bytes, over the adapter's maxStorageBufferBindingSize ${r.maxBind} (lower the context)`);
      return device.createBuffer({ label, size, usage: GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_DST | GPUBufferUsage.COPY_SRC | extra });
    };
    r.kc = [];
    r.vc = [];
    for (let l = 0; l < h.n_layer; l++) {
      r.kc.push(alloc('k cache', context * kvDim));
      r.vc.push(alloc('v cache', context * kvDim));
    }
    const widest = Math.max(h.n_ff, qDim, h.n_embd);
    r.acts = {
      x: alloc('x', BATCH * h.n_embd),
      xn: alloc('xn', BATCH * h.n_embd),
      xr: alloc('rounded inputs', BATCH * widest),
      q_raw: alloc('q', BATCH * qDim),
      k_raw: alloc('k', BATCH * kvDim),
      v_raw: alloc('v', BATCH * kvDim),
      q: alloc('q', BATCH * qDim),
      attn: alloc('attention', BATCH * qDim),
      proj: alloc('projection', BATCH * h.n_embd),
      g: alloc('gate', BATCH * h.n_ff),
      u: alloc('up', BATCH * h.n_ff),
      scores: alloc('scores', BATCH * h.n_head * context),
      logits: alloc('logits', BATCH * h.n_vocab),
      readback: device.createBuffer({ label: 'logits readback', size: BATCH * Math.max(1, h.n_vocab) * 4, usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST }),
    };
    r.cacheLen = 0;
    r.streamedTotal = 0;
    /** Milliseconds spent recording passes (including waits for streamed reads) and waiting for the device. */
    r.timing = { encode: 0, wait: 0 };
    return r;
  }

  async pipelines(wgsl) {
    const d = this.device;
    const make = async (src, entry, constants = {}) => {
      const module = d.createShaderModule({ label: entry, code: src });
      const errors = (await module.getCompilationInfo()).messages.filter((m) => m.type === 'error');
      if (errors.length) throw new Error(`the WGSL kernel for ${entry} does not compile on this WebGPU: ${errors.map((m) => `${m.lineNum}:${m.linePos} ${m.message}`).join('; ')}`);
      return d.createComputePipelineAsync({ label: entry, layout: 'auto', compute: { module, entryPoint: entry, constants } });
    };
    this.p = {
      // A batch: MATMUL_INPUTS_PER_GROUP inputs per workgroup; one input (decode): the kernel
      // specialised to one (llm/src/wgpu.rs does the same).
      matmul: await make(wgsl.matmul, 'main', { JPER: MATMUL_INPUTS_PER_GROUP }),
      matmul_one: await make(wgsl.matmul, 'main', { JPER: 1 }),
      round: await make(wgsl.round, 'main'),
      rms_norm: await make(wgsl.rms_norm, 'main'),
      rope: await make(wgsl.rope, 'main'),
      attention: await make(wgsl.attention, 'main'),
      add_rows: await make(wgsl.elementwise, 'add_rows'),
      swiglu: await make(wgsl.elementwise, 'swiglu'),
      add: await make(wgsl.elementwise, 'add'),
    };
  }

  f32Buffer(label, v) {
    const size = Math.max(4, v.length * 4);
    const buf = this.device.createBuffer({ label, size, usage: GPUBufferUsage.STORAGE, mappedAtCreation: true });
    new Float32Array(buf.getMappedRange()).set(v);
    buf.unmap();
    return buf;
  }

  /** One compute pass: `bound` ({buffer, offset?, size?} or a GPUBuffer) at bindings 0.., then `params` as a uniform. */
  dispatch(enc, pipe, bound, params, groups) {
    const ub = this.device.createBuffer({ size: pad4(params.length * 4), usage: GPUBufferUsage.UNIFORM, mappedAtCreation: true });
    new Uint32Array(ub.getMappedRange()).set(params);
    ub.unmap();
    const entries = bound.map((b, i) => ({ binding: i, resource: b instanceof GPUBuffer ? { buffer: b } : b }));
    entries.push({ binding: bound.length, resource: { buffer: ub } });
    const group = this.device.createBindGroup({ layout: pipe.getBindGroupLayout(0), entries });
    const pass = enc.beginComputePass();
    pass.setPipeline(pipe);
    pass.setBindGroup(0, group);
    pass.dispatchWorkgroups(groups[0], groups[1], groups[2]);
    pass.end();
  }

  /** Writes `w`'s streamed rows into its ring slot (submitting first what reads the slot's previous occupant). */
  async streamIn(p, w) {
    if (!w.stream) return;
    if (!this.streamer.nextReady()) {
      // The read is still on its way: let the device work on what is recorded meanwhile.
      this.device.queue.submit([p.enc.finish()]);
      p.enc = this.device.createCommandEncoder();
      p.written = [];
    }
    const bytes = await this.streamer.next();
    const region = [w.stream.slot, w.stream.slot + bytes.byteLength];
    if (p.written.some(([a, b]) => a < region[1] && region[0] < b)) {
      this.device.queue.submit([p.enc.finish()]);
      p.enc = this.device.createCommandEncoder();
      p.written = [];
    }
    const body = Math.floor(bytes.byteLength / 4) * 4;
    if (body > 0) this.device.queue.writeBuffer(this.ring, w.stream.slot, bytes, 0, body);
    if (body < bytes.byteLength) {
      const tail = new Uint8Array(4);
      tail.set(bytes.subarray(body));
      this.device.queue.writeBuffer(this.ring, w.stream.slot + body, tail);
    }
    p.bytes += bytes.byteLength;
    p.written.push(region);
    this.onStream({ tensor: w.name, slot: w.stream.slot, bytes: bytes.byteLength });
  }

  async matmul(p, w, x, y, n) {
    await this.streamIn(p, w);
    let input = x;
    if (w.kind !== 0) {
      const len = n * w.cols;
      const per = w.kind === 1 || w.kind === 2 ? 1 : w.kind === 3 || w.kind === 4 ? 32 : 256;
      const [gx, gy] = grid(Math.ceil(len / per / 64));
      this.dispatch(p.enc, this.p.round, [x, this.acts.xr], [len, w.kind, gx, 0], [gx, gy, 1]);
      input = this.acts.xr;
    }
    const perGroup = n === 1 ? 1 : MATMUL_INPUTS_PER_GROUP;
    for (const part of w.parts) {
      const [gx, gy] = grid(part.rows);
      this.dispatch(p.enc, n === 1 ? this.p.matmul_one : this.p.matmul, [{ buffer: part.buf, offset: part.offset, size: part.size }, input, y], [part.rows, w.cols, w.rowBytes, w.kind, w.rows, part.row0, gx, n], [gx, gy, Math.ceil(n / perGroup)]);
    }
  }

  /** RMSNorm of `rows` rows of `x` from `row0`, each `d` wide (default the embedding), into `y` from row 0. */
  rmsNorm(enc, x, w, y, row0, rows, d = this.spec.n_embd) {
    const f = new Float32Array([this.spec.rms_eps]);
    this.dispatch(enc, this.p.rms_norm, [x, w, y], [d, new Uint32Array(f.buffer)[0], row0, 0], [rows, 1, 1]);
  }

  elementwise(enc, pipe, a, b, len, d) {
    const [gx, gy] = grid(Math.ceil(len / 64));
    this.dispatch(enc, pipe, [a, b], [len, d, gx, 0], [gx, gy, 1]);
  }

  rope(enc, src, dst, n, heads, pos0, row0) {
    const h = this.spec;
    const style = h.rope_style === 'adjacent' ? 0 : 1;
    const [gx, gy] = grid(Math.ceil((n * heads * h.head_dim) / 64));
    this.dispatch(enc, this.p.rope, [src, this.ropeTable, dst], [n, heads, h.head_dim, h.rope_dim, pos0, style, row0, gx], [gx, gy, 1]);
  }

  /** Forgets the KV cache (a new prompt). */
  reset() {
    this.cacheLen = 0;
  }

  /**
   * Runs `tokens` at positions `cacheLen..` and returns the logits of the last position
   * (Float32Array). `more`: another forward pass follows (its first weights may be read ahead).
   */
  async forward(tokens, more) {
    if (this.cacheLen + tokens.length > this.context) throw new Error(`${this.cacheLen + tokens.length} positions are needed but the context holds ${this.context} (raise the context option)`);
    let logits = null;
    this.streamedLast = 0;
    for (let i = 0; i < tokens.length; i += BATCH) {
      const chunk = tokens.slice(i, i + BATCH);
      const last = i + BATCH >= tokens.length;
      logits = await this.forwardBatch(chunk, this.cacheLen, last, more || !last);
      this.cacheLen += chunk.length;
    }
    return logits;
  }

  async forwardBatch(tokens, pos0, wantLogits, more) {
    const h = this.spec;
    const n = tokens.length;
    const d = h.n_embd;
    const hd = h.head_dim;
    const qDim = h.n_head * hd;
    const kvDim = h.n_head_kv * hd;
    const a = this.acts;
    // The streamed weights of this pass may be read, and, when another pass follows, the first
    // ones of the next (the reader stays at most two weights ahead).
    this.streamer.allowPasses(more ? 2 : 1);
    const tStart = performance.now();
    const x = new Float32Array(n * d);
    const e = this.embd;
    for (let i = 0; i < n; i++) {
      if (tokens[i] >= e.rows) throw new Error(`token id ${tokens[i]} is outside the vocabulary (0..${e.rows})`);
      x.set(rowsToF32(this.glue, e, this.embdBytes.subarray(tokens[i] * e.row_bytes, (tokens[i] + 1) * e.row_bytes)), i * d);
    }
    this.device.queue.writeBuffer(a.x, 0, x);
    const p = { enc: this.device.createCommandEncoder(), written: [], bytes: 0 };
    for (let li = 0; li < this.layers.length; li++) {
      const l = this.layers[li];
      this.rmsNorm(p.enc, a.x, l.attn_norm, a.xn, 0, n);
      await this.matmul(p, l.wq, a.xn, a.q_raw, n);
      await this.matmul(p, l.wk, a.xn, a.k_raw, n);
      await this.matmul(p, l.wv, a.xn, a.v_raw, n);
      if (l.bias) {
        this.elementwise(p.enc, this.p.add_rows, a.q_raw, l.bias[0], n * qDim, qDim);
        this.elementwise(p.enc, this.p.add_rows, a.k_raw, l.bias[1], n * kvDim, kvDim);
        this.elementwise(p.enc, this.p.add_rows, a.v_raw, l.bias[2], n * kvDim, kvDim);
      }
      // qwen3: each query and key head normed before rope, through the attention buffer (free
      // until the attention writes it), as the native wgpu executor does.
      if (l.qkNorm) {
        for (const [raw, w, heads] of [[a.q_raw, l.qkNorm[0], h.n_head], [a.k_raw, l.qkNorm[1], h.n_head_kv]]) {
          this.rmsNorm(p.enc, raw, w, a.attn, 0, n * heads, hd);
          p.enc.copyBufferToBuffer(a.attn, 0, raw, 0, n * heads * hd * 4);
        }
      }
      this.rope(p.enc, a.q_raw, a.q, n, h.n_head, pos0, 0);
      this.rope(p.enc, a.k_raw, this.kc[li], n, h.n_head_kv, pos0, pos0);
      p.enc.copyBufferToBuffer(a.v_raw, 0, this.vc[li], pos0 * kvDim * 4, n * kvDim * 4);
      const scale = new Uint32Array(new Float32Array([1 / Math.sqrt(hd)]).buffer)[0];
      this.dispatch(p.enc, this.p.attention, [a.q, this.kc[li], this.vc[li], a.scores, a.attn], [h.n_head, hd, kvDim, h.n_head / h.n_head_kv, pos0, this.context, scale, 0], [h.n_head, n, 1]);
      await this.matmul(p, l.wo, a.attn, a.proj, n);
      this.elementwise(p.enc, this.p.add, a.x, a.proj, n * d, d);
      this.rmsNorm(p.enc, a.x, l.ffn_norm, a.xn, 0, n);
      await this.matmul(p, l.gate, a.xn, a.g, n);
      await this.matmul(p, l.up, a.xn, a.u, n);
      this.elementwise(p.enc, this.p.swiglu, a.g, a.u, n * h.n_ff, h.n_ff);
      await this.matmul(p, l.down, a.g, a.proj, n);
      this.elementwise(p.enc, this.p.add, a.x, a.proj, n * d, d);
    }
    // The logits of the last row; the output projection runs on every pass, so each streams the same bytes.
    const r0 = n - 1;
    this.rmsNorm(p.enc, a.x, this.output_norm, a.xn, r0, 1);
    await this.matmul(p, this.output, a.xn, a.logits, 1);
    const bytes = h.n_vocab * 4;
    if (wantLogits) p.enc.copyBufferToBuffer(a.logits, 0, a.readback, 0, bytes);
    this.streamedLast += p.bytes;
    this.streamedTotal += p.bytes;
    this.device.queue.submit([p.enc.finish()]);
    const tSubmit = performance.now();
    this.timing.encode += tSubmit - tStart;
    if (!more) this.streamer.drop();
    if (!wantLogits) {
      await this.device.queue.onSubmittedWorkDone();
      return null;
    }
    await a.readback.mapAsync(GPUMapMode.READ, 0, bytes);
    this.timing.wait += performance.now() - tSubmit;
    const out = new Float32Array(a.readback.getMappedRange(0, bytes).slice(0));
    a.readback.unmap();
    return out;
  }

  /** Frees the device buffers. */
  destroy() {
    this.streamer?.drop();
    this.device.destroy?.();
  }
}
