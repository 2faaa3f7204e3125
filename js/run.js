// `run(source, options)`: a GGUF language model generating text in the browser on WebGPU or on
// the wasm CPU executor (`device`: 'auto', the default, takes WebGPU only on a hardware adapter),
// its weights streamed under a memory budget from a File (slices) or a URL (HTTP Range). All
// the work happens in a module Worker (js/run-worker.js); this module is the page's handle on it.

/** Why a run failed: `code` is 'no-webgpu', 'budget' (then `minimum`: the smallest budget), 'unsupported', 'cancelled' or 'error'. */
export class RunError extends Error {
  constructor(message, code = 'error', minimum) {
    super(message);
    this.name = 'RunError';
    this.code = code;
    if (minimum !== undefined) this.minimum = minimum;
  }
}

/**
 * Why the module at `url` or one of its static imports does not load (`'PATH: HTTP 404 Not
 * Found'`, a network error, a type that is not JavaScript), or null when each one does. What a
 * failed module Worker's error event does not say.
 */
async function whyNotLoaded(url, seen = new Set()) {
  if (seen.has(url.href)) return null;
  seen.add(url.href);
  let text;
  try {
    const r = await fetch(url, { cache: 'no-store' });
    if (!r.ok) return `${url.pathname}: HTTP ${r.status} ${r.statusText}`.trimEnd();
    const type = r.headers.get('content-type') ?? '';
    if (!/javascript|ecmascript/i.test(type)) return `${url.pathname}: served as '${type}', which a browser does not run as a module`;
    text = await r.text();
  } catch (e) {
    return `${url.pathname}: ${e.message}`;
  }
  for (const m of text.matchAll(/^\s*(?:import|export)\s(?:[^'";]*?\sfrom\s*)?['"]([^'"]+)['"]/gm)) {
    if (!/^(\.{1,2})?\//.test(m[1])) continue;
    const why = await whyNotLoaded(new URL(m[1], url), seen);
    if (why) return why;
  }
  return null;
}

/**
 * Opens `source` (a File/Blob, a URL or URL string, or a Uint8Array) for generation. Options:
 * `budget` (device bytes for weights, KV cache and activations; absent: everything resident),
 * `context` (KV cache positions; default the model's, at most 4096), `policy` (offload policy,
 * default 'scheduler'), `device` ('auto' (default): WebGPU on a hardware adapter, else the wasm
 * CPU executor (no WebGPU, no adapter, or a software/fallback adapter such as SwiftShader);
 * 'webgpu'; 'wasm': tensorlane-llm's CPU executor in wasm, one thread, simd128; `info.device`
 * says which one runs and `info.deviceWhy` why), `onProgress({phase,
 * loaded, total})`, `bindLimit` (bind weights in parts of at most this many bytes, below the
 * adapter's `maxStorageBufferBindingSize`: what a weight over the limit gets), `cacheType` (how
 * the KV cache keeps keys and values: 'f16' (the wasm executor's default), 'f32' (WebGPU's, the
 * only one it keeps: another sends 'auto' to wasm) or 'q8_0'). Resolves to a `RunSession` once the resident weights are on the device.
 */
export async function run(source, options = {}) {
  const { budget, context, policy, device = 'auto', onProgress, bindLimit, cacheType } = options;
  if (!['auto', 'webgpu', 'wasm'].includes(device)) throw new RunError(`device '${device}' is not available in the browser (one of: auto, webgpu, wasm)`, 'unsupported');
  if (typeof Worker === 'undefined') throw new RunError('run() needs a browser with module Workers', 'unsupported');
  if (budget != null && !(Number.isFinite(budget) && budget > 0)) throw new RunError(`budget ${budget}: not a number of bytes`);
  // Inline, in the form bundlers (Vite, webpack) recognise as a worker entry.
  const worker = new Worker(new URL('./run-worker.js', import.meta.url), { type: 'module' });
  const session = new RunSession(worker);
  const input = source instanceof URL ? source.href : source;
  try {
    session.info = await session.request({ op: 'open', input, options: { budget, context, policy, bindLimit, device, cacheType } }, 'ready', (m) => onProgress?.(m));
  } catch (e) {
    worker.terminate();
    throw e;
  }
  return session;
}

/** A model opened by `run()`: `generate()` streams tokens, `cancel()` stops, `close()` ends the worker. */
export class RunSession {
  #worker;
  #busy = false;
  constructor(worker) {
    this.#worker = worker;
    /** The architecture, plan, budget figures and adapter limits (set when open). */
    this.info = null;
    /** The last generation's figures: tokens/s, bytes streamed and fetched (set when it ends). */
    this.stats = null;
  }

  /** Sends `msg` and resolves with the `want` answer's payload; `on` sees other messages. */
  request(msg, want, on = () => {}) {
    return new Promise((resolve, reject) => {
      this.#worker.onmessage = (ev) => {
        const m = ev.data;
        if (m.op === want) resolve(m.info ?? m.stats ?? m);
        else if (m.op === 'error') reject(new RunError(m.message, m.code, m.minimum));
        else on(m);
      };
      this.#worker.onerror = (ev) => {
        ev.preventDefault?.();
        // A script error carries its message and place; a module that did not load carries
        // nothing (an Event): find which file of the worker's imports failed, and why.
        if (ev.message) reject(new RunError(`the run worker failed: ${ev.message}${ev.filename ? ` (${ev.filename}:${ev.lineno})` : ''}`));
        else whyNotLoaded(new URL('./run-worker.js', import.meta.url)).then((why) => reject(new RunError(`the run worker could not start: ${why ?? 'its modules load, so the browser refused the worker itself (a Content-Security-Policy, or module workers unsupported)'}`)));
      };
      this.#worker.postMessage(msg);
    });
  }

  /**
   * Generates from `prompt` (text, tokenized with BOS, or an array of token ids): yields
   * `{id, piece (Uint8Array), text}` per token. `sampling`: `{temperature, topK, topP, seed,
   * maxTokens (default 64), stopAtEog (default true), onStream({tensor, slot, bytes}) (each
 * streamed weight as it enters its ring slot)}`; greedy by default.
   */
  async *generate(prompt, sampling = {}) {
    if (this.#busy) throw new RunError('this session is already generating (await it or cancel() first)');
    this.#busy = true;
    const queue = [];
    let wake = null;
    let end = null;
    const done = this.request({ op: 'generate', prompt: typeof prompt === 'string' ? prompt : Array.from(prompt), sampling: { ...sampling, onStream: undefined }, max: sampling.maxTokens ?? 64 }, 'done', (m) => {
      if (m.op === 'token') {
        queue.push(m);
        wake?.();
      } else if (m.op === 'stream') sampling.onStream?.(m);
    }).then(
      (stats) => {
        this.stats = stats;
        end = { ok: true };
        wake?.();
      },
      (error) => {
        end = { error };
        wake?.();
      },
    );
    const decoder = new TextDecoder();
    try {
      for (;;) {
        if (queue.length) {
          const m = queue.shift();
          yield { id: m.id, piece: m.piece, text: decoder.decode(m.piece, { stream: true }) };
          continue;
        }
        if (end) break;
        await new Promise((r) => (wake = r));
        wake = null;
      }
      if (end.error) throw end.error;
    } finally {
      if (!end) this.cancel();
      await done;
      this.#busy = false;
    }
  }

  /** Stops the generation under way: no further weight is fetched, no further pass computed. */
  cancel() {
    this.#worker.postMessage({ op: 'cancel' });
  }

  /** Ends the worker (device memory freed). */
  close() {
    this.#worker.terminate();
  }
}

/**
 * `run()` for Node on the N-API addon's CPU executor: the same options, session and errors as the
 * browser's, the model opened and generated on a Rust thread of the addon (`addon.LlmSession`),
 * whose events each resolve a promise, so Node's event loop is never held by a forward pass.
 * `resolveSource(source)` (js/node.js) turns the source into `{path, done()}`: a path or file:
 * URL as is; bytes, a Blob or an http(s) URL written to a temporary file, removed by `done()`.
 */
export function nodeRun(addon, resolveSource) {
  return async function run(source, options = {}) {
    const { budget, context, policy, device = 'cpu', onProgress, threads, cacheType } = options;
    if (device !== 'cpu') throw new RunError(`device '${device}' is not available in Node (only 'cpu', the addon's CPU executor; 'webgpu' is the browser's)`, 'unsupported');
    if (budget != null && !(Number.isFinite(budget) && budget > 0)) throw new RunError(`budget ${budget}: not a number of bytes`);
    for (const [k, v] of [['context', context], ['threads', threads]]) {
      if (v != null && !(Number.isInteger(v) && v > 0 && v < 2 ** 32)) throw new RunError(`${k} ${v}: not a positive integer`);
    }
    const { path, done } = await resolveSource(source);
    let native;
    try {
      native = new addon.LlmSession(path, { budget: budget == null ? undefined : Math.round(budget), context, policy: policy ?? undefined, threads, cacheType: cacheType ?? undefined });
      for (;;) {
        const ev = await native.next();
        if (ev.op === 'progress') onProgress?.({ phase: 'load', loaded: ev.loaded, total: ev.total });
        else if (ev.op === 'ready') return new NodeRunSession(native, JSON.parse(ev.json));
        else if (ev.op === 'error') throw new RunError(ev.message, ev.code, ev.minimum ?? undefined);
        else throw new RunError(`the session ended while opening ${path}`);
      }
    } catch (e) {
      native?.close();
      throw e instanceof RunError ? e : new RunError(e.message);
    } finally {
      await done();
    }
  };
}

/** A model opened by `run()` in Node: `generate()` streams tokens, `cancel()` stops, `close()` ends its thread. */
export class NodeRunSession {
  #native;
  #busy = false;
  constructor(native, info) {
    this.#native = native;
    /** The architecture, context, weight/resident/streamed bytes, policy and threads. */
    this.info = info;
    /** The last generation's figures (set when it ends). */
    this.stats = null;
  }

  /**
   * Generates from `prompt` (text, tokenized with BOS, or token ids): yields `{id, piece, text}`
   * per token, as the browser's session does. `sampling`: `{temperature, topK, topP, seed,
   * maxTokens (default 64), stopAtEog (default true)}`; greedy by default.
   */
  async *generate(prompt, sampling = {}) {
    if (this.#busy) throw new RunError('this session is already generating (await it or cancel() first)');
    const { temperature, topK, topP, seed, maxTokens = 64, stopAtEog } = sampling;
    if (!(Number.isInteger(maxTokens) && maxTokens >= 0 && maxTokens < 2 ** 32)) throw new RunError(`maxTokens ${maxTokens}: not a count of tokens`);
    const ids = typeof prompt === 'string' ? prompt : Array.from(prompt);
    if (typeof ids !== 'string' && !ids.every((t) => Number.isInteger(t) && t >= 0 && t < 2 ** 32)) throw new RunError('the prompt is neither text nor an array of token ids (integers 0..2^32)');
    try {
      this.#native.generate(ids, { temperature, topK, topP, seed, stopAtEog, maxTokens });
    } catch (e) {
      throw new RunError(e.message);
    }
    this.#busy = true;
    const decoder = new TextDecoder();
    let finished = false;
    try {
      for (;;) {
        const ev = await this.#native.next();
        if (ev.op === 'token') {
          const piece = new Uint8Array(ev.piece);
          yield { id: ev.id, piece, text: decoder.decode(piece, { stream: true }) };
        } else if (ev.op === 'done') {
          finished = true;
          this.stats = JSON.parse(ev.json);
          return;
        } else if (ev.op === 'error') {
          finished = true;
          throw new RunError(ev.message, ev.code, ev.minimum ?? undefined);
        } else if (ev.op === 'closed') {
          finished = true;
          throw new RunError('the session was closed while generating', 'cancelled');
        }
      }
    } finally {
      if (!finished) {
        // The loop was left early (break, return, a throw in its body): stop and read to the end.
        this.#native.cancel();
        for (;;) {
          const ev = await this.#native.next();
          if (ev.op === 'done') this.stats = JSON.parse(ev.json);
          if (ev.op === 'done' || ev.op === 'error' || ev.op === 'closed') break;
        }
      }
      this.#busy = false;
    }
  }

  /** Stops the generation under way after the token being computed (its stats say `cancelled`). */
  cancel() {
    this.#native.cancel();
  }

  /** Ends the session's thread (after the token being computed); the model is unmapped. */
  close() {
    this.#native.close();
  }
}
