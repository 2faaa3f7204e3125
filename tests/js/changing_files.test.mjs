// Files that change underneath (issue 15), addon backend: a Node path is read with pread into an
// owned buffer unless open() is given {mmap: true}, so a file truncated after it was opened, or
// while it is read, gives a TensorlaneError or leaves the reader's bytes as they were, never
// SIGBUS. The wasm backend always reads files (readFileSync) and is not tested here.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, truncateSync, writeFileSync, copyFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { DATA, data } from './_helpers.mjs';

const api = await import('../../js/node.js');
const skip = api.backendName !== 'addon' && 'the N-API addon is not built (scripts/build-js.sh)';
const NODE_JS = fileURLToPath(new URL('../../js/node.js', import.meta.url));
const FIXTURES = data(new URL('fixtures/', DATA));

function scratch() {
  return mkdtempSync(join(tmpdir(), 'tl-js-changing-'));
}

/** A .npy header for uint8[n] (version 1.0, padded to 64 bytes). */
function npyHeader(n) {
  const body = `{'descr': '|u1', 'fortran_order': False, 'shape': (${n},), }`;
  const total = Math.ceil((10 + body.length + 1) / 64) * 64;
  const dict = body + ' '.repeat(total - 10 - body.length - 1) + '\n';
  const h = Buffer.alloc(10 + dict.length);
  Buffer.from([0x93, 0x4e, 0x55, 0x4d, 0x50, 0x59, 1, 0]).copy(h);
  h.writeUInt16LE(dict.length, 8);
  h.write(dict, 10, 'latin1');
  return h;
}

test('a .zt path cut after open() (opened by the host like any model): tensor() and verify() throw a TensorlaneError instead of SIGBUS', { skip }, () => {
  const dir = scratch();
  try {
    const p = join(dir, 'm.zt');
    copyFileSync(fileURLToPath(new URL('basic-canonical.zt', FIXTURES)), p);
    const want = [...api.open(readFileSync(p)).tensor('embed.weight')];
    const r = api.open(p);
    assert.deepEqual([...r.tensor('embed.weight')], want);
    truncateSync(p, 100);
    const changed = (e) => e instanceof api.TensorlaneError && /runs past the end|truncated|changed/.test(e.message);
    assert.throws(() => r.tensor('embed.weight'), changed);
    assert.throws(() => r.verify(), (e) => e instanceof api.TensorlaneError);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('a model path cut after open(): tensor() throws a TensorlaneError instead of SIGBUS', { skip }, () => {
  const dir = scratch();
  try {
    const p = join(dir, 'm.safetensors');
    copyFileSync(fileURLToPath(new URL('sample.safetensors', FIXTURES)), p);
    const r = api.open(p);
    const names = r.tensors.map((t) => t.name);
    truncateSync(p, 64);
    assert.throws(
      () => { for (const n of names) r.tensor(n); },
      (e) => e instanceof api.TensorlaneError && /runs past the end|truncated|changed/.test(e.message),
    );
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('a path read whole is bounded by maxTensorBytes; {mmap: true} maps it instead', { skip }, () => {
  const p = fileURLToPath(new URL('basic-canonical.zt', FIXTURES));
  // {format} sends the path through the byte-range session, which reads it whole (readFile).
  assert.throws(() => api.open(p, { format: 'zt', maxTensorBytes: 1000 }), (e) => /maxTensorBytes/.test(e.message) && /mmap: true/.test(e.message) && e.message.includes(p));
  const m = api.open(p, { format: 'zt', maxTensorBytes: 1000, mmap: true }).tensor('embed.weight');
  assert.deepEqual([...m], [0, 1, 2, 3, 4, 5]);
  assert.equal(m.buffer.byteLength, readFileSync(p).length, 'a view on the whole mapped file');
});

test('a path cut while it is read whole: the error says the file changed (child process, stopped mid-read)', { skip, timeout: 120_000 }, async () => {
  const dir = scratch();
  try {
    const p = join(dir, 'big.npy');
    const n = 512 * 2 ** 20;
    const header = npyHeader(n);
    let outcome;
    for (let attempt = 0; attempt < 3 && !outcome; attempt++) {
      writeFileSync(p, header);
      truncateSync(p, header.length + n); // sparse zeros
      // {format} sends the path through the byte-range session, which reads it whole (readFile).
      const script = `import api from ${JSON.stringify(NODE_JS)};
        try { api.open(${JSON.stringify(p)}, { format: 'npy', maxTensorBytes: 2 ** 31 }); console.error('read it all'); process.exit(0); }
        catch (e) { console.error(e.message); process.exit(2); }`;
      const child = spawn(process.execPath, ['--input-type=module', '-e', script], { stdio: ['ignore', 'ignore', 'pipe'] });
      let stderr = '';
      child.stderr.on('data', (b) => (stderr += b));
      const done = new Promise((res) => child.on('exit', (code, signal) => res({ code, signal })));
      let exited = false;
      done.then(() => (exited = true));
      const rchar = () => {
        try {
          return Number(/rchar:\s*(\d+)/.exec(readFileSync(`/proc/${child.pid}/io`, 'utf8'))[1]);
        } catch {
          return 0;
        }
      };
      while (!exited && rchar() < 64 * 2 ** 20) await new Promise((r) => setTimeout(r, 1));
      if (exited) continue;
      process.kill(child.pid, 'SIGSTOP');
      truncateSync(p, 2 ** 20);
      process.kill(child.pid, 'SIGCONT');
      const { code, signal } = await done;
      if (code === 0) continue; // read before the cut: try again
      outcome = { code, signal, stderr };
    }
    assert.ok(outcome, 'the read finished before the cut three times');
    assert.equal(outcome.signal, null, `killed by ${outcome.signal}: ${outcome.stderr}`);
    assert.equal(outcome.code, 2, outcome.stderr);
    assert.match(outcome.stderr, /changed while it was read: 1048576 bytes now/);
    assert.ok(outcome.stderr.includes(p), outcome.stderr);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
