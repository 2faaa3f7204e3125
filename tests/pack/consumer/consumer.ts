// TypeScript consumer, checked with `tsc --strict --noEmit` against the shipped .d.ts only.
import { decode, encode, open, stats, backendName, type Decoded, type ModelBlobReader } from 'tensorlane';
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
stats({ dtype: 'float32', shape: [2], data: new Float32Array([1, 2]) });
const plugin: { name: string } = tensorlaneWasm();
console.log(backend, plugin.name);

// The types are real, not `any`: each of these must be an error.
// @ts-expect-error an unknown dtype
encode({ dtype: 'float33', shape: [1], data: new Float32Array(1) });
// @ts-expect-error decode takes bytes
decode('not bytes');
// @ts-expect-error backendName is a string union
const n: number = backendName;
