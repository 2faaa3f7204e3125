// A Worker that only fetches, for the inspector's Workers (inspector-worker.js): they read a
// model by URL through it (`netFetch`), so the responses' bodies keep streaming in while the
// Worker that asked sums the last slice. A fetch's body is pulled by the thread that made the
// fetch; a Worker busy in the statistics' wasm for tens of milliseconds lets its connections'
// buffers fill and the transfers stall (BENCHMARKS.md, "Inspector: issue 26 bars").
//
// Requests `{id, url, init: {headers, cache, credentials}}` -> `{id, status, headers: [[k, v]],
// body: ArrayBuffer | null}` (transferred) or `{id, error: {name, message}}`; `{cancel: id}`
// aborts one. A body is read only for a 200 or 206 (others are answered with no body, as the
// caller only reads their status and headers).

const running = new Map();

self.onmessage = async ({ data }) => {
  if (data.cancel !== undefined) return running.get(data.cancel)?.abort();
  const { id, url, init } = data;
  const ac = new AbortController();
  running.set(id, ac);
  try {
    const res = await fetch(url, { ...init, signal: ac.signal });
    let body = null;
    if (res.status === 200 || res.status === 206) {
      const len = Number(res.headers.get('content-length'));
      if (Number.isSafeInteger(len) && len > 0 && res.body) {
        // Straight into one buffer of the announced length (no list of chunks joined at the end).
        let buf = new Uint8Array(len);
        let at = 0;
        const rd = res.body.getReader();
        for (;;) {
          const { done, value } = await rd.read();
          if (done) break;
          if (at + value.byteLength > buf.byteLength) {
            const bigger = new Uint8Array(Math.max(2 * buf.byteLength, at + value.byteLength));
            bigger.set(buf.subarray(0, at));
            buf = bigger;
          }
          buf.set(value, at);
          at += value.byteLength;
        }
        // A short or long body goes back as it came: the caller checks its length.
        body = at === buf.byteLength ? buf.buffer : buf.slice(0, at).buffer;
      } else body = await res.arrayBuffer();
    } else await res.body?.cancel();
    self.postMessage({ id, status: res.status, headers: [...res.headers], body }, body ? [body] : []);
  } catch (e) {
    self.postMessage({ id, error: { name: e?.name ?? 'TypeError', message: String(e?.message ?? e) } });
  } finally {
    running.delete(id);
  }
};
