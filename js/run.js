// `run(source, options)`: a GGUF language model generating text in the browser on WebGPU, its
// weights streamed under a device-memory budget from a File (slices) or a URL (HTTP Range). All
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
 * Opens `source` (a File/Blob, a URL or URL string, or a Uint8Array) for generation. Options:
 * `budget` (device bytes for weights, KV cache and activations; absent: everything resident),
 * `context` (KV cache positions; default the model's, at most 4096), `policy` (offload policy,
 * default 'scheduler'), `device` ('webgpu', the only one in the browser), `onProgress({phase,
 * loaded, total})`, `bindLimit` (bind weights in parts of at most this many bytes, below the
 * adapter's `maxStorageBufferBindingSize`: what a weight over the limit gets). Resolves to a `RunSession` once the resident weights are on the device.
 */
export async function run(source, options = {}) {
  const { budget, context, policy, device = 'webgpu', onProgress, bindLimit } = options;
  if (device !== 'webgpu') throw new RunError(`device '${device}' is not available in the browser (only 'webgpu')`, 'unsupported');
  if (typeof Worker === 'undefined') throw new RunError('run() needs a browser with module Workers and WebGPU', 'no-webgpu');
  if (budget != null && !(Number.isFinite(budget) && budget > 0)) throw new RunError(`budget ${budget}: not a number of bytes`);
  const worker = new Worker(new URL('./run-worker.js', import.meta.url), { type: 'module' });
  const session = new RunSession(worker);
  const input = source instanceof URL ? source.href : source;
  try {
    session.info = await session.request({ op: 'open', input, options: { budget, context, policy, bindLimit } }, 'ready', (m) => onProgress?.(m));
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
      this.#worker.onerror = (ev) => reject(new RunError(`the run worker failed: ${ev.message ?? ev}`));
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
