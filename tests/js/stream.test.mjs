// StreamDecoder: packets written back to back come out whole under any chunking.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { data, VECTORS, loadBackends, vectorCases } from './_helpers.mjs';

data(VECTORS);
const backends = await loadBackends();

function rng(seed) {
  let s = seed >>> 0;
  return () => ((s = (s * 1664525 + 1013904223) >>> 0) / 2 ** 32);
}

function concat(parts) {
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let at = 0;
  for (const p of parts) {
    out.set(p, at);
    at += p.length;
  }
  return out;
}

function packetsFor(api) {
  const made = [
    api.encode({ data: new Float32Array(100).fill(2) }),
    api.encode({ a: Int8Array.from([1, 2]), b: { kind: 'string', strings: ['s'] } }, { integrity: true }),
    api.encode({ kind: 'string', strings: ['x', 'yy'] }),
    api.encode({ data: new Uint8Array(70000) }, { alignment: 1 }),
  ];
  // Golden vectors a stream can frame: everything but compressed top-level packets.
  const golden = vectorCases('.').filter((c) => (c.meta.header.flags & 4) === 0).map((c) => c.bytes());
  return [...made, ...golden];
}

for (const { name, api } of backends) {
  describe(`${name} backend: StreamDecoder`, () => {
    it('random chunkings yield the same packets', () => {
      const all = packetsFor(api);
      for (let seed = 1; seed <= 12; seed++) {
        const rand = rng(seed);
        const maxChunk = [1, 7, 64, 1000, 100000][seed % 5];
        // byte-sized chunks over the small packets only (keeps the suite fast)
        const packets = maxChunk < 64 ? all.filter((p) => p.length < 20000) : all;
        const stream = concat(packets);
        const s = new api.StreamDecoder();
        const out = [];
        for (let at = 0; at < stream.length; ) {
          const n = Math.min(stream.length - at, 1 + Math.floor(rand() * maxChunk));
          s.push(stream.subarray(at, at + n));
          at += n;
          for (let p = s.next(); p !== null; p = s.next()) out.push(p);
        }
        assert.equal(s.buffered, 0);
        assert.equal(out.length, packets.length, `seed ${seed}`);
        out.forEach((p, i) => {
          assert.ok(p.constructor === Uint8Array);
          assert.deepEqual(p, packets[i], `seed ${seed} packet ${i}`);
        });
        // every popped packet decodes
        for (const p of out) api.decode(p);
      }
    });

    it('async iteration helpers', async () => {
      const packets = packetsFor(api).slice(0, 4);
      async function* chunks() {
        const all = concat(packets);
        for (let i = 0; i < all.length; i += 999) yield all.subarray(i, i + 999);
      }
      const got = [];
      for await (const p of new api.StreamDecoder().packets(chunks())) got.push(p);
      assert.deepEqual(got, packets);
      const decoded = [];
      for await (const v of api.decodeStream(chunks())) decoded.push(v.kind);
      assert.deepEqual(decoded, ['dense', 'bundle', 'string', 'dense']);
      async function* truncated() {
        yield packets[0].subarray(0, 50);
      }
      await assert.rejects(async () => {
        for await (const _ of api.decodeStream(truncated()));
      }, /stream ended inside a packet/);
    });

    it('limits and errors', () => {
      const big = api.encode({ data: new Uint8Array(5000) });
      const s = new api.StreamDecoder({ maxPacketBytes: 1000 });
      s.push(big.subarray(0, 20));
      assert.throws(() => s.next(), (e) => e instanceof api.TensorlaneError && /exceeds the limit of 1000/.test(e.message));
      assert.throws(() => s.next(), /out of sync/);
      const t = new api.StreamDecoder({ maxBufferedBytes: 100 });
      assert.throws(() => t.push(new Uint8Array(101)), /limit of 100/);
      const g = new api.StreamDecoder();
      g.push(Uint8Array.from([1, 2, 3, 4, 5, 6, 7, 8, 9, 10]));
      assert.throws(() => g.next(), /not a tenso packet/);
      const c = new api.StreamDecoder();
      c.push(api.encode({ data: new Uint8Array(10) }, { compress: true }));
      assert.throws(() => c.next(), /compressed packet in a stream/);
    });
  });
}
