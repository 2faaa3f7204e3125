// The one detection rule (tensorlane_core::detect::identify) seen from JS: every case of the table
// the CLI test also reads (tests/data/detect/identify.json) gets the same answer on both backends,
// opened from a path, from bytes with a name and from a File: a file in no format read here says
// what it looks like (text, raw data, ONNX external data, empty) instead of a parser's complaint,
// and a damaged file with a model extension gets that format's error.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { DATA, data, loadBackends } from './_helpers.mjs';

const table = JSON.parse(readFileSync(fileURLToPath(data(new URL('detect/identify.json', DATA))), 'utf8'));
const backends = await loadBackends();

const bytesOf = (c) => (c.text !== undefined ? new TextEncoder().encode(c.text) : new Uint8Array(Buffer.from(c.hex, 'hex')));

/** Checks that opening threw what the table says for case `c`. */
function expectAnswer(err, c, ctx) {
  assert.ok(err instanceof Error, `${ctx}: threw ${err}`);
  if (c.message !== undefined) {
    assert.equal(err.format, 'formats', `${ctx}: ${err.message}`);
    assert.equal(err.kind, c.unrecognised === 'empty' ? 'truncated' : 'unsupported', `${ctx}: ${err.message}`);
    assert.match(err.message, /not a model file this tool reads/, ctx);
    assert.ok(err.message.includes(c.message), `${ctx}: ${err.message}`);
    assert.doesNotMatch(err.message, /pickle opcode|memo entry|read as .zt/, ctx);
  } else {
    assert.equal(err.format, c.format, `${ctx}: ${err.message}`);
  }
}

for (const { name, api } of backends) {
  test(`${name}: the shared detection table (path, bytes with a name, File)`, async () => {
    const dir = mkdtempSync(join(tmpdir(), 'tl-detect-'));
    try {
      assert.ok(table.cases.length >= 8);
      for (const c of table.cases) {
        const bytes = bytesOf(c);
        const path = join(dir, c.name);
        writeFileSync(path, bytes);
        const ctx = `${name} ${c.name}`;
        assert.throws(() => api.open(path), (e) => (expectAnswer(e, c, `${ctx} (path)`), true));
        assert.throws(() => api.open(bytes, { name: c.name }), (e) => (expectAnswer(e, c, `${ctx} (bytes)`), true));
        await assert.rejects(
          async () => api.open(new File([bytes], c.name)),
          (e) => (expectAnswer(e, c, `${ctx} (File)`), true),
        );
      }
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
}
