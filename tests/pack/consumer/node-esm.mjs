// Node ESM consumer: `import` of the installed package. argv: the repository's tests/data folder.
import * as tl from 'tensorlane';
import { readFileSync } from 'node:fs';
import { check } from './check.js';

const data = process.argv[2];
const manifest = JSON.parse(readFileSync(`${data}/fixtures/manifest.json`, 'utf8'));
const result = await check(tl, {
  packet: new Uint8Array(readFileSync(`${data}/vectors/tenso/align_16_float32.tenso`)),
  packetMeta: JSON.parse(readFileSync(`${data}/vectors/tenso/align_16_float32.json`, 'utf8')),
  model: `${data}/fixtures/sample.safetensors`,
  expected: manifest.files.find((f) => f.file === 'sample.safetensors'),
});
console.log(JSON.stringify({ ...result, defaultBackend: tl.default.backend }));
