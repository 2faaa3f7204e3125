// Files that change underneath (issue 15), addon backend: a Node path is read with pread into an
// owned buffer unless open() is given {mmap: true}, so a file truncated after it was opened, or
// while it is read, gives a TensorlaneError or leaves the reader's bytes as they were, never
// SIGBUS. The wasm backend always reads files (readFileSync) and is not tested here.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, truncateSync, writeFileSync, copyFileSync, openSync, writeSync, closeSync } from 'node:fs';
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

for (const how of ['cut', 'rewritten in place']) test(`a path ${how} while it is read whole: the error says the file changed (child process, stopped mid-read)`, { skip, timeout: 120_000 }, async () => {
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
      // Cut to 1 MiB, or the same size with bytes past the read so far written over.
      if (how === 'cut') truncateSync(p, 2 ** 20);
      else rewriteInPlace(p, header.length + n - 4096, Buffer.alloc(4096, 0x55));
      process.kill(child.pid, 'SIGCONT');
      const { code, signal } = await done;
      if (code === 0) continue; // read before the cut: try again
      outcome = { code, signal, stderr };
    }
    assert.ok(outcome, 'the read finished before the cut three times');
    assert.equal(outcome.signal, null, `killed by ${outcome.signal}: ${outcome.stderr}`);
    assert.equal(outcome.code, 2, outcome.stderr);
    assert.match(outcome.stderr, how === 'cut' ? /changed while it was read: 1048576 bytes now/ : /changed while it was read \(written in place/);
    assert.ok(outcome.stderr.includes(p), outcome.stderr);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

/** A safetensors file of one float32 tensor `w` of `n` elements (values i % 1000); its data offset. */
function safetensorsF32(path, n) {
  let header = JSON.stringify({ w: { dtype: 'F32', shape: [n], data_offsets: [0, 4 * n] } });
  header += ' '.repeat((8 - ((header.length + 8) % 8)) % 8);
  const data = new Float32Array(n).map((_, i) => i % 1000);
  const len = Buffer.alloc(8);
  len.writeBigUInt64LE(BigInt(header.length));
  writeFileSync(path, Buffer.concat([len, Buffer.from(header), Buffer.from(data.buffer)]));
  return 8 + header.length;
}

/** Writes `bytes` over the file at `offset` in place (same size, new modification time). */
function rewriteInPlace(path, offset, bytes) {
  const fd = openSync(path, 'r+');
  try {
    writeSync(fd, bytes, 0, bytes.length, offset);
  } finally {
    closeSync(fd);
  }
}

const changedError = (p) => (e) => e instanceof api.TensorlaneError && /changed while it was read/.test(e.message) && e.message.includes(p);

test('a model rewritten in place (same size) while stats() reads it: stats throws a TensorlaneError naming the file', { skip }, () => {
  const dir = scratch();
  try {
    const p = join(dir, 'm.safetensors');
    const n = 4 * 2 ** 20;
    const base = safetensorsF32(p, n);
    const r = api.open(p);
    const want = r.stats('w', { chunkBytes: 2 ** 20 });
    let rewritten = false;
    const onProgress = ({ bytesDone }) => {
      // Mid-read: half way through the first pass, the second half of the data becomes 1e30.
      if (!rewritten && bytesDone >= 2 * n) {
        rewritten = true;
        rewriteInPlace(p, base + 2 * n, Buffer.from(new Float32Array(n / 2).fill(1e30).buffer));
      }
    };
    assert.throws(() => r.stats('w', { chunkBytes: 2 ** 20, onProgress }), changedError(p));
    assert.ok(rewritten, 'the file was rewritten mid-read');
    // Opened again, the new version is read (and differs from the old).
    const now = api.open(p).stats('w', { chunkBytes: 2 ** 20 });
    assert.equal(now.max, Math.fround(1e30));
    assert.equal(want.max, 999);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('a model rewritten in place (same size) after open(): tensor() and verify() throw a TensorlaneError naming the file', { skip }, () => {
  const dir = scratch();
  try {
    const p = join(dir, 'm.safetensors');
    const base = safetensorsF32(p, 1024);
    const r = api.open(p);
    assert.equal(r.tensor('w')[999], 999);
    assert.equal(r.verify().tensors, 1);
    rewriteInPlace(p, base, Buffer.from(new Float32Array([7]).buffer));
    assert.throws(() => r.tensor('w'), changedError(p));
    assert.throws(() => r.verify(), changedError(p));
    assert.equal(api.open(p).tensor('w')[0], 7);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
