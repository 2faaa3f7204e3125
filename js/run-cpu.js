// The wasm CPU executor of a GGUF language model: tensorlane-llm's CPU executor (the code
// `tensorlane run` runs on the CPU, wasm/src/llm.rs `LlmCpu`) compiled to wasm32 with simd128
// kernels, on one thread. The resident weights (all of them, or under a plan each matrix's
// resident prefix, `LlmModel.cpuReads`) are read from the source once, in the session's order,
// and copied into wasm memory; the bytes the plan streams are read at each forward pass, a weight
// at a time in the plan's order, through a synchronous reader (a Worker's FileReaderSync for a
// File, a synchronous HTTP Range request for a URL): the forward pass is one wasm call, which
// cannot wait for a promise.
//
// Why one thread: wasm threads need the standard library rebuilt with atomics (`-Z build-std`, a
// nightly toolchain) and a cross-origin isolated page for SharedArrayBuffer; the project builds
// on stable Rust (llm/src/par.rs).
//
// Runs in a module Worker (js/run-worker.js): synchronous reads are not allowed on a page's
// main thread.

/**
 * A synchronous reader of `input` (a Blob/File, a `RemoteFile` of js/http.js or a Uint8Array):
 * `read(offset, len) -> Uint8Array`, counting into `counter.bytes` what it read.
 */
export function syncReader(input, counter) {
  if (typeof Blob !== 'undefined' && input instanceof Blob) {
    if (typeof FileReaderSync === 'undefined') throw new Error('streaming a File on the wasm device needs a Worker (FileReaderSync)');
    const reader = new FileReaderSync();
    return (offset, len) => {
      const b = new Uint8Array(reader.readAsArrayBuffer(input.slice(offset, offset + len)));
      counter.bytes += b.byteLength;
      return b;
    };
  }
  if (input instanceof Uint8Array) {
    return (offset, len) => {
      counter.bytes += len;
      return input.subarray(offset, offset + len);
    };
  }
  if (input && typeof input.url === 'string') {
    return (offset, len) => {
      const xhr = new XMLHttpRequest();
      xhr.open('GET', input.url, false);
      xhr.responseType = 'arraybuffer';
      xhr.setRequestHeader('Range', `bytes=${offset}-${offset + len - 1}`);
      if (input.etag && !input.etag.startsWith('W/')) xhr.setRequestHeader('If-Match', input.etag);
      xhr.send();
      if (xhr.status !== 206) throw new Error(`${input.url}: bytes [${offset}, +${len}): HTTP ${xhr.status}${xhr.status === 200 ? ' (the server ignored the Range)' : xhr.status === 412 ? ' (the file changed on the server; open it again)' : ''}`);
      const b = new Uint8Array(xhr.response);
      if (b.byteLength !== len) throw new Error(`${input.url}: the server sent ${b.byteLength} bytes for [${offset}, +${len})`);
      counter.bytes += len;
      if (input.bytesFetched !== undefined) input.bytesFetched += len;
      return b;
    };
  }
  throw new TypeError('the wasm device streams from a File/Blob, a URL or a Uint8Array');
}

export class CpuRunner {
  /**
   * Reads the resident weights of `prep` (`prepareModel`'s `{model, spec, tensors}`) from
   * `source` (a byte source of js/run-model.js) under `plan` (parsed `LlmModel.plan()` JSON, or
   * null: everything resident) and opens the executor. `input`: what the source reads (File,
   * RemoteFile, Uint8Array), read synchronously for the streamed bytes. `cacheType`: how the
   * KV cache keeps keys and values, 'f16' (the default, as `tensorlane run` on the CPU), 'f32'
   * or 'q8_0'.
   */
  static async create({ glue, source, input, prep, plan, context, cacheType = 'f16', onProgress = () => {} }) {
    const r = new CpuRunner();
    const planJson = plan ? JSON.stringify(plan) : '';
    const reads = JSON.parse(prep.model.cpuReads(planJson));
    const total = reads.reduce((a, x) => a + x.len, 0);
    const loader = new glue.LlmCpuLoader();
    let loaded = 0;
    try {
      for (const { name, offset, len } of reads) {
        loader.add(name, len === 0 ? new Uint8Array(0) : await source.read(offset, len));
        loaded += len;
        onProgress({ phase: 'load', loaded, total });
      }
      r.cpu = prep.model.openCpu(loader, planJson, context, cacheType);
    } finally {
      loader.free();
    }
    r.counter = { bytes: 0 };
    r.read = syncReader(input, r.counter);
    r.residentRead = loaded;
    r.streamedPerForward = r.cpu.streamedBytes();
    r.bindings = null;
    r.streamedTotal = 0;
    r.timing = { encode: 0, wait: 0 };
    // The worker's loop calls streamer.drop() after a generation; nothing is read ahead here.
    r.streamer = { drop() {} };
    return r;
  }

  /** Forgets the KV cache (a new prompt). */
  reset() {
    this.cpu.reset();
  }

  /** Runs `tokens` at the next positions; the last one's logits (Float32Array). */
  async forward(tokens) {
    const streamed = this.streamedPerForward > 0;
    const logits = this.cpu.forward(Uint32Array.from(tokens), streamed ? this.read : undefined);
    this.streamedTotal += this.cpu.streamedLast();
    return logits;
  }

  destroy() {
    this.cpu?.free();
    this.cpu = null;
  }
}
