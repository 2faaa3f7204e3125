// run() in Node (the N-API addon's CPU executor, js/run.js nodeRun) against the native CLI on the
// same files: greedy tokens equal `tensorlane run --tokens ... --json` for several weight types,
// resident and under a budget below half the model (streamed bytes = passes x the plan's streamed
// bytes, the CLI's streamed_bytes_total); cancel() stops after the current token; a budget below
// the minimum is RunError 'budget' with the CLI's minimum; the event loop keeps running while a
// long prompt is evaluated. Models: tests/python/llm_gen.py's random-weight GGUFs.
import { describe, it, before } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync, spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { run, RunError, backendName } from '../../js/node.js';

const ROOT = fileURLToPath(new URL('../../', import.meta.url));
const BIN = process.env.TENSORLANE_BIN ?? join(ROOT, 'target/debug/tensorlane');
const PY = join(ROOT, 'tests/.venv-formats/bin/python');
const CI = process.env.CI === 'true';
const missing = !existsSync(BIN) ? `${BIN} not built (cargo build -p tensorlane-cli)` : !existsSync(PY) ? `${PY} missing (scripts/setup.sh)` : backendName !== 'addon' ? 'the N-API addon is not built (scripts/build-js.sh)' : null;
if (missing && CI) throw new Error(`${missing} (CI=true: failing, not skipping)`);

/** `tensorlane run ARGS --json` parsed, or `{error}` with its stderr when it fails. */
function native(args) {
  const r = spawnSync(BIN, ['run', ...args, '--json'], { encoding: 'utf8' });
  if (r.status !== 0) return { error: r.stderr };
  return JSON.parse(r.stdout);
}

/** Every token of a generation and the session's stats after it. */
async function tokens(session, prompt, sampling) {
  const out = [];
  for await (const t of session.generate(prompt, sampling)) out.push(t);
  return out;
}

const PROMPT = [1, 5, 9, 13, 2, 7];

describe('run() in Node against tensorlane run', { skip: missing ?? false }, () => {
  let M;
  before(() => {
    const dir = mkdtempSync(join(tmpdir(), 'tl-run-node-'));
    const out = JSON.parse(execFileSync(PY, [join(ROOT, 'tests/python/llm_gen.py'), dir, '11'], { encoding: 'utf8' }));
    M = { ...Object.fromEntries(out.models.map((m) => [m.name, m.path])), ...out.broken };
  });

  // F32 and F16 under a budget below half the model; the small quantized files' minimum (mostly
  // the KV cache, vectors and activations) is above half of them, so they run at 1.05x it.
  it('gives the CLI greedy tokens and streamed bytes, resident and under a budget (below half the model for F32, F16)', async () => {
    for (const name of ['llama-F32', 'llama-F16', 'llama-Q8_0', 'llama-Q4_K']) {
      const path = M[name];
      const resident = await run(path, { context: 64 });
      try {
        const got = await tokens(resident, PROMPT, { maxTokens: 6, stopAtEog: false });
        const n = native([path, '--tokens', PROMPT.join(','), '--max-new-tokens', '6', '--context', '64']);
        assert.ok(!n.error, n.error);
        assert.deepEqual(got.map((t) => t.id), n.tokens, `${name} resident`);
        assert.equal(new TextDecoder().decode(Buffer.concat(got.map((t) => t.piece))), n.text, `${name}: pieces`);
        // text: a streaming UTF-8 decode (a split character waits for its next byte)
        assert.equal(got.map((t) => t.text).join(''), new TextDecoder().decode(Buffer.concat(got.map((t) => t.piece)), { stream: true }), `${name}: text`);
        assert.deepEqual(resident.stats.tokens, n.tokens);
        assert.equal(resident.stats.streamedBytes, 0, `${name}: nothing streamed when resident`);
        assert.equal(resident.info.weightBytes, n.stats.weight_bytes);
      } finally {
        resident.close();
      }
      // A budget below half the file (F32, F16), or 1.05x the plan's minimum.
      const min = native([path, '--tokens', '1', '--max-new-tokens', '1', '--context', '64', '--budget', '1']).error;
      const minimum = Number(/smallest budget the scheduler policy accepts is (\d+) bytes/.exec(min)?.[1]);
      assert.ok(minimum > 0, `${name}: the CLI names a minimum (${min})`);
      const weight = statSync(path).size;
      const half = name.endsWith('F32') || name.endsWith('F16');
      const budget = half ? Math.round(weight * 0.45) : Math.round(minimum * 1.05);
      assert.ok(budget >= minimum, `${name}: budget ${budget} at least the minimum ${minimum}`);
      let progress = 0;
      const s = await run(pathToFileURL(path), { context: 64, budget, onProgress: (p) => (progress = p.total) });
      try {
        const got = await tokens(s, PROMPT, { maxTokens: 6, stopAtEog: false });
        const n = native([path, '--tokens', PROMPT.join(','), '--max-new-tokens', '6', '--context', '64', '--budget', String(budget)]);
        assert.ok(!n.error, n.error);
        assert.deepEqual(got.map((t) => t.id), n.tokens, `${name} budget ${budget}`);
        assert.ok(n.stats.plan_streamed_bytes_per_token > 0, `${name}: the plan streams`);
        assert.equal(s.info.streamedPerForward, n.stats.plan_streamed_bytes_per_token);
        assert.equal(s.info.residentBytes, n.stats.resident_bytes);
        assert.equal(progress, n.stats.resident_bytes, `${name}: onProgress total = the resident bytes`);
        assert.equal(s.stats.passes, 1 + s.stats.decodeTokens);
        assert.equal(s.stats.streamedBytes, s.stats.passes * n.stats.plan_streamed_bytes_per_token, `${name}: streamed = passes x plan`);
        assert.equal(s.stats.streamedBytes, n.stats.streamed_bytes_total, `${name}: streamed as the CLI`);
      } finally {
        s.close();
      }
    }
  });

  it("cacheType 'q8_0' and 'f32': the CLI's tokens with the same --cache-type, a smaller minimum budget for q8_0, a clear error for another name", async () => {
    const path = M['llama-F32'];
    const minimum = {};
    for (const cacheType of ['q8_0', 'f32', 'f16']) {
      const s = await run(path, { context: 64, cacheType });
      try {
        assert.equal(s.info.cacheType, cacheType);
        const got = await tokens(s, PROMPT, { maxTokens: 6, stopAtEog: false });
        const n = native([path, '--tokens', PROMPT.join(','), '--max-new-tokens', '6', '--context', '64', '--cache-type', cacheType]);
        assert.ok(!n.error, n.error);
        assert.deepEqual(got.map((t) => t.id), n.tokens, cacheType);
      } finally {
        s.close();
      }
      // a budget of 1 byte: refused with the minimum for this cache type
      const e = await run(path, { context: 64, cacheType, budget: 1 }).then(() => null, (err) => err);
      assert.equal(e?.code, 'budget', cacheType);
      minimum[cacheType] = e.minimum;
    }
    assert.ok(minimum.q8_0 < minimum.f16 && minimum.f16 < minimum.f32, JSON.stringify(minimum));
    await assert.rejects(run(path, { cacheType: 'q4' }), /cacheType 'q4' is not a KV cache type \(use one of: f16, f32, q8_0\)/);
  });

  it('opens bytes (a Uint8Array) as a path, with the same tokens', async () => {
    const path = M['qwen2-Q8_0'];
    const s = await run(new Uint8Array(readFileSync(path)), { context: 64 });
    try {
      const got = await tokens(s, PROMPT, { maxTokens: 4, stopAtEog: false });
      const n = native([path, '--tokens', PROMPT.join(','), '--max-new-tokens', '4', '--context', '64']);
      assert.deepEqual(got.map((t) => t.id), n.tokens);
    } finally {
      s.close();
    }
  });

  it('cancel() stops after the current token; the session generates again afterwards', async () => {
    const s = await run(M['llama-Q4_K'], { context: 128 });
    try {
      const got = [];
      for await (const t of s.generate(PROMPT, { maxTokens: 50, stopAtEog: false })) {
        got.push(t.id);
        if (got.length === 2) s.cancel();
      }
      // The token being computed when cancel() came still arrives (the thread is at most one
      // token ahead: it hands each over when the next is asked for), then nothing more.
      assert.equal(got.length, 3, `${got.length} tokens after cancel at 2`);
      assert.equal(s.stats.cancelled, true);
      assert.equal(s.stats.tokens.length, got.length);
      const again = await tokens(s, PROMPT, { maxTokens: 3, stopAtEog: false });
      const k = Math.min(3, got.length);
      assert.deepEqual(again.slice(0, k).map((t) => t.id), got.slice(0, k), 'greedy again: the same first tokens');
      assert.equal(s.stats.cancelled, false);
    } finally {
      s.close();
    }
  });

  it("refuses a budget below the minimum with code 'budget' and the CLI's minimum, and an unsupported architecture", async () => {
    const path = M['llama-Q8_0'];
    const cli = native([path, '--tokens', '1', '--max-new-tokens', '1', '--context', '64', '--budget', '1000']);
    const minimum = Number(/smallest budget the scheduler policy accepts is (\d+) bytes/.exec(cli.error)?.[1]);
    assert.ok(minimum > 1000, cli.error);
    await assert.rejects(run(path, { context: 64, budget: 1000 }), (e) => {
      assert.ok(e instanceof RunError);
      assert.equal(e.code, 'budget');
      assert.equal(e.minimum, minimum);
      assert.ok(cli.error.includes(e.message), `the CLI's words: ${e.message} in ${cli.error}`);
      return true;
    });
    const bad = native([M['bad-arch'], '--tokens', '1']);
    await assert.rejects(run(M['bad-arch']), (e) => {
      assert.equal(e.code, 'unsupported');
      assert.match(e.message, /unsupported architecture/);
      assert.ok(bad.error.includes(e.message), `the CLI's words: ${e.message} in ${bad.error}`);
      return true;
    });
    await assert.rejects(run(path, { device: 'webgpu' }), (e) => e.code === 'unsupported' && /only 'cpu'/.test(e.message));
  });

  it('keeps the event loop running while a long prompt is evaluated on the session thread', async () => {
    const s = await run(M['llama-F32'], { context: 512, threads: 1 });
    try {
      const prompt = Array.from({ length: 480 }, (_, i) => 3 + ((i * 7) % 50));
      let ticks = 0;
      let longest = 0;
      let last = performance.now();
      const timer = setInterval(() => {
        const now = performance.now();
        longest = Math.max(longest, now - last);
        last = now;
        ticks++;
      }, 2);
      const t0 = performance.now();
      await tokens(s, prompt, { maxTokens: 1 });
      const wall = performance.now() - t0;
      clearInterval(timer);
      console.log(`prefill ${s.stats.prefillS.toFixed(3)} s, wall ${wall.toFixed(1)} ms, ${ticks} ticks, longest gap ${longest.toFixed(1)} ms`);
      // The prompt's one forward pass runs off the event loop: the timer ticks during it, and no
      // gap between ticks is as long as the pass.
      assert.ok(s.stats.prefillS > 0.02, `the prompt takes long enough to see (${s.stats.prefillS} s)`);
      assert.ok(ticks >= 3, `${ticks} ticks in ${wall} ms`);
      assert.ok(longest < (s.stats.prefillS * 1000) / 2, `longest gap ${longest} ms vs a ${s.stats.prefillS * 1000} ms pass`);
    } finally {
      s.close();
    }
  });
});
