// Text generation's host side, shared by Node and the browser's run worker: opens a GGUF over a
// byte source with the wasm reader (only the header and metadata are read) and prepares it with
// the wasm `LlmModel` (wasm/src/llm.rs: tensorlane-llm's architecture, tokenizer and offload plan
// compiler, the same code as `tensorlane run`).

/** First read of the header; each further need reads at least this much past it (doubling). */
const FIRST_READ = 256 << 10;
/** The most header reads before giving up (a GGUF header is read in a few). */
const MAX_ROUNDS = 256;

/**
 * A byte source: `{name, size, read(offset, len) -> Promise<Uint8Array>}` with `bytesRead`
 * counting what it handed out. `input`: a Blob/File (slices), a `RemoteFile` (js/http.js: HTTP
 * Range), a Uint8Array, or an object that already is a source.
 */
export function byteSource(input, name) {
  let src;
  if (typeof Blob !== 'undefined' && input instanceof Blob) {
    src = { name: name ?? input.name ?? 'model.gguf', size: input.size, read: async (o, l) => new Uint8Array(await input.slice(o, o + l).arrayBuffer()) };
  } else if (input instanceof Uint8Array) {
    src = { name: name ?? 'model.gguf', size: input.byteLength, read: async (o, l) => input.slice(o, o + l) };
  } else if (input && typeof input.read === 'function' && Number.isFinite(input.size)) {
    src = { name: name ?? input.name ?? 'model.gguf', size: input.size, read: (o, l) => input.read(o, l) };
  } else {
    throw new TypeError('run(): the model must be a File/Blob, a URL (string or URL), a path (Node) or a Uint8Array');
  }
  const counted = {
    name: src.name,
    size: src.size,
    bytesRead: 0,
    reads: 0,
    async read(offset, len) {
      if (offset < 0 || len < 0 || offset + len > src.size) throw new RangeError(`read [${offset}, +${len}) lies outside the ${src.size}-byte model`);
      const b = await src.read(offset, len);
      if (b.byteLength !== len) throw new Error(`${src.name}: asked for ${len} bytes at ${offset}, got ${b.byteLength} (did the file change?)`);
      counted.bytesRead += len;
      counted.reads += 1;
      return b;
    },
  };
  return counted;
}

/** An Error with the reader's message (its `display` text names format, offset and tensor). */
function readerError(st) {
  const e = st.error ?? {};
  const err = new Error(e.display ?? e.message ?? JSON.stringify(st));
  err.kind = e.kind;
  return err;
}

/**
 * Opens `source` (see `byteSource`) with `glue` (the wasm-bindgen module, initialised) and
 * prepares it for generation. Returns `{model, spec, tensors, headerBytes}`: `model` is the wasm
 * `LlmModel` (plan(), encode(), decode(), piece(), isEog(); free() it when done), `spec` the
 * architecture and `tensors` the weights with their byte ranges. Unsupported files throw with the
 * reason (architecture, format, tensor type).
 */
export async function prepareModel(glue, source) {
  const session = new glue.FormatSession(source.size, source.name, '');
  try {
    let window = FIRST_READ;
    for (let round = 0; ; round++) {
      if (session.open() !== undefined) break;
      const st = JSON.parse(session.status());
      if (st.error) throw readerError(st);
      if (!st.need) throw new Error(`the model reader stopped without saying why: ${session.status()}`);
      if (round >= MAX_ROUNDS) throw new Error(`${source.name}: the header was not read after ${MAX_ROUNDS} reads`);
      const { source: which, offset, len } = st.need;
      if (which !== '') throw new Error(`${source.name} needs companion file '${which}': split or multi-file models do not run in the browser yet (GGUF in one file does)`);
      const want = Math.min(source.size - offset, Math.max(len, window));
      session.addPiece('', offset, await source.read(offset, want), false);
      window *= 2;
    }
    const headerBytes = source.bytesRead;
    const model = new glue.LlmModel(session, source.name);
    return { model, spec: JSON.parse(model.spec()), tensors: JSON.parse(model.tensors()), headerBytes };
  } finally {
    session.free();
  }
}
