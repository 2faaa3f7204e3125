// compare() on both backends against NumPy (tests/python/compare_ref.py): two safetensors
// checkpoints written by the safetensors package that differ the ways checkpoints do (names only
// in one, changed dtype/shape, noise in float32/float16/bfloat16/float64/int32, NaN/Inf, an
// all-zero side), opened from paths, from bytes and from Blobs read in 16 KiB slices; and two GGUF
// files holding the same values quantized differently (gguf-py's quantize/dequantize).
// Counts and max |a-b| exact, mean |a-b| and relative L2 within 1e-10, cosine within 1e-12; the
// result is sorted by the largest change; an AbortSignal stops it.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { openAsBlob, readFileSync } from 'node:fs';
import { loadBackends } from './_helpers.mjs';
import { assertCompare, checkpointPair, ggufPair } from './_graph_compare_reference.mjs';

const backends = await loadBackends();
const pair = checkpointPair();
const gguf = ggufPair();

for (const { name, api } of backends) {
  test(`${name}: compare() of two checkpoints from paths matches NumPy`, async () => {
    const progress = [];
    const got = await api.compare(api.open(pair.a), api.open(pair.b), { onProgress: (p) => progress.push(p) });
    assertCompare(got, pair.ref, `${name} paths`);
    const last = progress.at(-1);
    assert.equal(last.bytesDone, last.bytesTotal, 'progress ends at the total');
    assert.equal(last.tensorsDone, got.tensors.length);
  });

  test(`${name}: compare() from bytes and from Blobs read in 16 KiB slices matches NumPy`, async () => {
    const bytes = await api.compare(api.open(new Uint8Array(readFileSync(pair.a))), api.open(new Uint8Array(readFileSync(pair.b))), { chunkBytes: 1 << 16 });
    assertCompare(bytes, pair.ref, `${name} bytes`);
    const reads = [];
    const blobA = await openAsBlob(pair.a);
    const counting = new (class extends Blob {
      slice(s, e) {
        reads.push(e - s);
        return blobA.slice(s, e);
      }
      get size() {
        return blobA.size;
      }
    })([]);
    const ra = await api.open(counting);
    const rb = await api.open(await openAsBlob(pair.b));
    reads.length = 0;
    const blobs = await api.compare(ra, rb, { chunkBytes: 16384 });
    assertCompare(blobs, pair.ref, `${name} blobs`);
    assert.ok(reads.length > 100 && reads.every((n) => n <= 16384), `Blob read in bounded slices (${reads.length} reads, max ${Math.max(...reads)})`);
  });

  test(`${name}: compare() of two GGUF quantizations (Q8_0/Q4_0, F32/Q8_0, F16/Q5_0, Q4_1/F32) matches gguf-py's dequantized values`, async () => {
    const got = await api.compare(api.open(gguf.a), api.open(gguf.b), { chunkBytes: 700 });
    assertCompare(got, gguf.ref, `${name} gguf`);
  });

  test(`${name}: compare() stops on an AbortSignal`, async () => {
    const ctl = new AbortController();
    const ra = await api.open(await openAsBlob(pair.a));
    const rb = await api.open(await openAsBlob(pair.b));
    let calls = 0;
    await assert.rejects(
      api.compare(ra, rb, {
        chunkBytes: 4096,
        signal: ctl.signal,
        onProgress: () => {
          if (++calls === 3) ctl.abort();
        },
      }),
      (e) => e.name === 'AbortError',
    );
    assert.ok(calls < 10, `stopped right after the abort (${calls} progress calls)`);
  });
}
