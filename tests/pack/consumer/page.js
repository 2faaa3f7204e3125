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
  return check(tl, {
    packet: new Uint8Array(await (await get('vectors/tenso/align_16_float32.tenso')).arrayBuffer()),
    packetMeta: await (await get('vectors/tenso/align_16_float32.json')).json(),
    model: new File([st], 'sample.safetensors'),
    expected: manifest.files.find((f) => f.file === 'sample.safetensors'),
  });
})().catch((e) => ({ problems: [`page failed: ${e.stack ?? e}`] }));
