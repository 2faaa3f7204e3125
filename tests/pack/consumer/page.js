// Browser consumer, bundled by esbuild and by Vite: decodes a packet and opens a safetensors
// `File` with the installed package; the test reads window.result. The server maps /data/ to the
// repository's tests/data.
import * as tl from 'tensorlane';
import { check } from './check.js';

const get = async (path) => {
  const r = await fetch(`/data/${path}`);
  if (!r.ok) throw new Error(`GET /data/${path}: ${r.status}`);
  return r;
};
window.result = (async () => {
  const manifest = await (await get('fixtures/manifest.json')).json();
  const st = await (await get('fixtures/sample.safetensors')).arrayBuffer();
  // run()'s Worker is in the bundle: it answers (no WebGPU here, or one token on SwiftShader)
  // rather than failing to load (a missing run-worker file is the Worker's 'error').
  const gguf = new Uint8Array(await (await get('llm/tiny-llama-Q4_K.gguf')).arrayBuffer());
  const run = await tl.run(gguf, { context: 32 }).then(
    async (s) => {
      const ids = [];
      for await (const t of s.generate([1, 2, 3], { maxTokens: 1 })) ids.push(t.id);
      s.close();
      return `ran ${ids.length}`;
    },
    (e) => `${e.code}: ${e.message}`,
  );
  const result = await check(tl, {
    packet: new Uint8Array(await (await get('vectors/tenso/align_16_float32.tenso')).arrayBuffer()),
    packetMeta: await (await get('vectors/tenso/align_16_float32.json')).json(),
    model: new File([st], 'sample.safetensors'),
    expected: manifest.files.find((f) => f.file === 'sample.safetensors'),
  });
  return { ...result, run };
})().catch((e) => ({ problems: [`page failed: ${e.stack ?? e}`] }));
