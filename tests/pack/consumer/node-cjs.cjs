// Node CommonJS consumer: `require` of the installed package (synchronous). argv: tests/data.
const tl = require('tensorlane');
const { readFileSync } = require('node:fs');

const data = process.argv[2];
const manifest = JSON.parse(readFileSync(`${data}/fixtures/manifest.json`, 'utf8'));
// require() gave a ready module: decode works before anything is awaited.
const first = tl.decode(new Uint8Array(readFileSync(`${data}/vectors/tenso/align_16_float32.tenso`)));
import('./check.js').then(async ({ check }) => {
  const result = await check(tl, {
    packet: new Uint8Array(readFileSync(`${data}/vectors/tenso/align_16_float32.tenso`)),
    packetMeta: JSON.parse(readFileSync(`${data}/vectors/tenso/align_16_float32.json`, 'utf8')),
    model: new Uint8Array(readFileSync(`${data}/fixtures/sample.safetensors`)),
    expected: manifest.files.find((f) => f.file === 'sample.safetensors'),
  });
  console.log(JSON.stringify({ ...result, syncShape: first.shape, defaultBackend: tl.default.backend }));
});
