// The wasm side of text generation (wasm/src/llm.rs through js/run-model.js) against the native
// CLI on the same files: prompt token ids, decoded text, the offload plan's resident and streamed
// bytes and the budget error (with its minimum) must be what `tensorlane run --json` says.
// Models: tests/python/llm_gen.py's random-weight GGUFs (several weight types and tokenizers) and
// the bundled tests/data/llm/tiny-llama-Q4_K.gguf.
import { describe, it, before } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync, spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import '../../js/wasm-node.js';
import { glue } from '../../js/wasm-backend.js';
import { byteSource, prepareModel } from '../../js/run-model.js';

const ROOT = fileURLToPath(new URL('../../', import.meta.url));
const BIN = process.env.TENSORLANE_BIN ?? join(ROOT, 'target/debug/tensorlane');
const PY = join(ROOT, 'tests/.venv-formats/bin/python');
const CI = process.env.CI === 'true';
const missing = !existsSync(BIN) ? `${BIN} not built (cargo build -p tensorlane-cli)` : !existsSync(PY) ? `${PY} missing (scripts/setup.sh)` : null;
if (missing && CI) throw new Error(`${missing} (CI=true: failing, not skipping)`);

/** Writes llm_gen.py's models once: name -> path. */
function models() {
  const dir = mkdtempSync(join(tmpdir(), 'tl-llm-'));
  const out = JSON.parse(execFileSync(PY, [join(ROOT, 'tests/python/llm_gen.py'), dir, '11'], { encoding: 'utf8' }));
  return { ...Object.fromEntries(out.models.map((m) => [m.name, m.path])), ...out.broken };
}

/** `tensorlane run ARGS --json` parsed, or `{error}` with its stderr when it fails. */
function native(args) {
  const r = spawnSync(BIN, ['run', ...args, '--json'], { encoding: 'utf8' });
  if (r.status !== 0) return { error: r.stderr };
  return JSON.parse(r.stdout);
}

async function prepare(path) {
  return prepareModel(glue, byteSource(new Uint8Array(readFileSync(path)), path.split('/').pop()));
}

describe('llm prepare (wasm) against tensorlane run', { skip: missing ?? false }, () => {
  let M;
  before(() => {
    M = { ...models(), 'tiny-llama-Q4_K': join(ROOT, 'tests/data/llm/tiny-llama-Q4_K.gguf') };
  });

  const PROMPTS = ['hello world', 'The tensor data 123 éü', ' leading  spaces\nand a newline'];

  it('tokenizes, decodes and plans as the CLI does (llama SentencePiece and byte-level BPE vocabularies, several weight types)', async () => {
    for (const name of ['llama-Q8_0', 'llama-F16', 'llama-Q4_K', 'qwen2-bpe-F32', 'gpt2-bpe-F32', 'llama-tied-F32', 'tiny-llama-Q4_K']) {
      const { model, spec, tensors } = await prepare(M[name]);
      try {
        assert.ok(spec.n_layer >= 1 && tensors.some((t) => t.role === 'wq'), name);
        for (const prompt of PROMPTS) {
          const n = native([M[name], '--prompt', prompt, '--max-new-tokens', '4']);
          assert.ok(!n.error, n.error);
          assert.deepEqual([...model.encode(prompt, true)], n.prompt_tokens, `${name}: ids of ${JSON.stringify(prompt)}`);
          // The CLI's text is its tokens' pieces, concatenated; decode() is the tokenizer's text.
          const pieces = Buffer.concat(n.tokens.map((t) => model.piece(t)));
          assert.equal(new TextDecoder().decode(pieces), n.text, `${name}: pieces of ${n.tokens}`);
          assert.equal(model.decode(Uint32Array.from(n.tokens)).trim(), n.text.trim(), `${name}: text of ${n.tokens}`);
        }
        // The plan under a budget a little above the minimum: the same bytes the CLI reports.
        const min = model.minimumBudget(64, '');
        assert.ok(min > 0, name);
        for (const budget of [min, Math.round(min * 1.2), Math.round(model.weightBytes() * 2 + model.workingSet(64))]) {
          const plan = JSON.parse(model.plan(budget, 64, ''));
          // The wasm plans for the WebGPU runner's f32 KV cache: the CLI with the same cache.
          const n = native([M[name], '--tokens', '1,2,3', '--max-new-tokens', '1', '--context', '64', '--cache-type', 'f32', '--budget', String(budget)]);
          assert.ok(!n.error, `${name} budget ${budget}: ${n.error}`);
          assert.equal(plan.streamed_bytes, n.stats.plan_streamed_bytes_per_token, `${name} budget ${budget}: streamed bytes`);
          assert.equal(plan.resident_bytes, n.stats.resident_bytes, `${name} budget ${budget}: resident bytes`);
          assert.equal(plan.working_set_bytes, n.stats.working_set_bytes, `${name} budget ${budget}: working set`);
          assert.equal(plan.chunks.reduce((a, c) => a + c.bytes, 0), plan.streamed_bytes, `${name}: chunks add up to the streamed bytes`);
        }
        // One byte below the minimum: refused with the CLI's own words.
        const n = native([M[name], '--tokens', '1', '--max-new-tokens', '1', '--context', '64', '--cache-type', 'f32', '--budget', String(min - 300)]);
        assert.ok(n.error, `${name}: the CLI refused ${min - 300}`);
        assert.throws(() => model.plan(min - 300, 64, ''), (e) => {
          assert.match(e.message, new RegExp(`smallest budget the scheduler policy accepts is ${min} bytes`));
          assert.ok(n.error.includes(e.message), `${name}: CLI says ${n.error}, wasm says ${e.message}`);
          return true;
        });
      } finally {
        model.free();
      }
    }
  });

  it('end-of-generation ids and the vocabulary size match the GGUF', async () => {
    const { model, spec } = await prepare(M['llama-Q8_0']);
    try {
      assert.equal(model.isEog(2), true, '</s> ends generation');
      assert.equal(model.isEog(1), false, '<s> does not');
      assert.ok(model.vocabSize() <= spec.n_vocab);
      assert.equal(new TextDecoder().decode(model.piece(3 + 0x41)), 'A', 'the byte token <0x41> is the byte A');
    } finally {
      model.free();
    }
  });

  it('explains models it cannot run: another architecture, a missing tensor, a non-GGUF file', async () => {
    await assert.rejects(prepare(M['bad-arch']), /unsupported architecture 'gptj'/);
    await assert.rejects(prepare(M['missing-tensor']), /tensor blk\.1\.ffn_up\.weight is missing/);
    await assert.rejects(prepareModel(glue, byteSource(new Uint8Array(64), 'x.gguf')), (e) => e instanceof Error && e.message.length > 0);
  });
});
