// TypeScript consumer, checked with `tsc --strict --noEmit` against the shipped .d.ts only.
import { decode, encode, open, stats, backendName, run, RunError, type Decoded, type ModelBlobReader } from 'tensorlane';
import tensorlaneWasm from 'tensorlane/esbuild';

const bytes: Uint8Array = encode({ dtype: 'float32', shape: [2], data: new Float32Array([1, 2]) }, { integrity: true });
const d: Decoded = decode(bytes);
if (d.kind === 'dense') {
  const shape: number[] = d.shape;
  console.log(shape, d.dtype);
}
const backend: 'addon' | 'wasm' = backendName;

export async function lazy(file: Blob): Promise<number> {
  const m = await open(file);
  if ('dequantize' in m) {
    const reader: ModelBlobReader = m;
    return reader.tensors.length;
  }
  return 0;
}
// run(): one definition for the browser (WebGPU) and Node (the addon's CPU executor).
export async function generateIds(path: string): Promise<number[]> {
  const session = await run(path, { budget: 1 << 20, context: 64, device: 'cpu', threads: 2, onProgress: (p) => console.log(p.loaded, p.total) });
  const ids: number[] = [];
  try {
    for await (const t of session.generate([1, 2, 3], { maxTokens: 4, stopAtEog: false })) ids.push(t.id);
  } catch (e) {
    if (e instanceof RunError && e.code === 'budget') console.log(e.minimum);
  }
  const info = session.info;
  // Every info says which device ran: the union narrows on it.
  if (info.device === 'cpu') console.log(info.residentBytes, info.streamedPerForward);
  else if (info.device === 'webgpu') console.log(info.adapter.maxBufferSize);
  else console.log(info.residentRead, info.deviceWhy);
  session.close();
  return ids;
}
stats({ dtype: 'float32', shape: [2], data: new Float32Array([1, 2]) });
const plugin: { name: string } = tensorlaneWasm();
console.log(backend, plugin.name);

// The types are real, not `any`: each of these must be an error.
// @ts-expect-error an unknown dtype
encode({ dtype: 'float33', shape: [1], data: new Float32Array(1) });
// @ts-expect-error decode takes bytes
decode('not bytes');
// @ts-expect-error run() has no 'cuda' device
run('m.gguf', { device: 'cuda' });
// @ts-expect-error backendName is a string union
const n: number = backendName;
