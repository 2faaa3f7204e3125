// Shared by the `tensorlane serve` suites (not a test file itself): starts the CLI's server on
// 127.0.0.1 (a free port) and asks its /ws endpoint for tensors with the WebSocket that Node (22+,
// or 20 with --experimental-websocket) and browsers have.
//
// Run as a script (`node --experimental-websocket tests/js/_serve.mjs WS_URL REQUEST_JSON`) it
// prints the answer as JSON, binary messages in base64: how Node 20 suites use a WebSocket.
import { spawn, execFileSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';

const ROOT = fileURLToPath(new URL('../../', import.meta.url));
/** The CLI binary: $TENSORLANE_BIN, else target/debug/tensorlane (built by `cargo test`/`cargo build`). */
export const BIN = process.env.TENSORLANE_BIN ?? `${ROOT}target/debug/tensorlane`;
/** Why the serve suites cannot run here, or null (with CI=true a missing binary is an error). */
export let missing = existsSync(BIN) ? null : `${BIN} not built (cargo build -p tensorlane-cli)`;
if (missing && process.env.CI === 'true') throw new Error(`${missing} (CI=true: failing, not skipping)`);

/** Starts `tensorlane serve ARGS --bind 127.0.0.1:0 --web ROOT`; resolves to { base, stop }. */
export function startServe(args) {
  const child = spawn(BIN, ['serve', ...args, '--bind', '127.0.0.1:0', '--web', ROOT], { stdio: ['ignore', 'pipe', 'ignore'] });
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => { child.kill(); reject(new Error('tensorlane serve printed no URL within 60 s')); }, 60000);
    child.on('error', reject);
    createInterface({ input: child.stdout }).once('line', (line) => {
      clearTimeout(timer);
      const base = line.trim().replace(/^(http:\/\/[^/]+).*$/, '$1');
      const stop = () => new Promise((done) => { child.once('exit', done); child.kill('SIGINT'); });
      resolve({ base, stop });
    });
  });
}

/**
 * Sends each request of `requests` (JSON objects) over one WebSocket to `wsUrl` and collects the
 * answers: per request an array of { meta, bytes? } (bytes: Uint8Array of the packet) and the final
 * `done` message. Times out after 60 s.
 */
export function askOverWs(wsUrl, requests, WS = globalThis.WebSocket) {
  return new Promise((resolve, reject) => {
    const ws = new WS(wsUrl);
    ws.binaryType = 'arraybuffer';
    const answers = [];
    let current = [];
    let pending = null;
    const timer = setTimeout(() => { ws.close(); reject(new Error('no answer within 60 s')); }, 60000);
    const next = () => {
      if (answers.length === requests.length) { clearTimeout(timer); ws.close(); resolve(answers); return; }
      current = [];
      ws.send(JSON.stringify(requests[answers.length]));
    };
    ws.onopen = next;
    ws.onerror = (e) => { clearTimeout(timer); reject(new Error(`WebSocket error: ${e.message ?? e.type}`)); };
    ws.onmessage = (ev) => {
      if (typeof ev.data === 'string') {
        const m = JSON.parse(ev.data);
        if (m.done || (m.error && m.index === undefined)) { answers.push({ items: current, end: m }); next(); return; }
        pending = { meta: m };
        current.push(pending);
        if (m.error) pending = null;
      } else {
        if (!pending) { reject(new Error('a binary message without its header')); return; }
        pending.bytes = new Uint8Array(ev.data);
        pending = null;
      }
    };
  });
}

/** `askOverWs` in whatever Node runs this: in-process with a global WebSocket, else in a child
 * `node --experimental-websocket` (Node 20). */
export async function askOverWsFromNode(wsUrl, requests) {
  if (globalThis.WebSocket) return askOverWs(wsUrl, requests);
  const out = execFileSync(process.execPath, ['--experimental-websocket', '--no-warnings', fileURLToPath(import.meta.url), wsUrl, JSON.stringify(requests)], { maxBuffer: 1 << 30 });
  return JSON.parse(out).map((a) => ({ end: a.end, items: a.items.map((i) => ({ meta: i.meta, bytes: i.bytes && new Uint8Array(Buffer.from(i.bytes, 'base64')) })) }));
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  const answers = await askOverWs(process.argv[2], JSON.parse(process.argv[3]));
  process.stdout.write(JSON.stringify(answers.map((a) => ({ end: a.end, items: a.items.map((i) => ({ meta: i.meta, bytes: i.bytes && Buffer.from(i.bytes).toString('base64') })) }))));
}
