// run() in Node (the addon's CPU executor) beside `tensorlane run` (release CLI) on the same model
// and tokens, rounds alternating: decode and prefill tokens/s, streamed bytes, same tokens.
//   node scripts/bench_run_node.mjs MODEL.gguf [BUDGET_BYTES]
// (after scripts/build-js.sh and cargo build --release -p tensorlane-cli). Models:
// tests/python/llm_gen.py DIR 11 writes the random-weight GGUFs the tests use.
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { run } from '../js/node.js';

const BIN = process.env.TENSORLANE_BIN ?? fileURLToPath(new URL('../target/release/tensorlane', import.meta.url));
const [model, budgetArg] = process.argv.slice(2);
if (!model) throw new Error('usage: node scripts/bench_run_node.mjs MODEL.gguf [BUDGET_BYTES]');
const budget = budgetArg ? Number(budgetArg) : undefined;
const tokens = [1, 5, 9, 13, 2, 7];
const N = 64;
const ROUNDS = Number(process.env.ROUNDS ?? 3);
const rows = [];
for (let round = 0; round < ROUNDS; round++) {
  const args = ['run', model, '--tokens', tokens.join(','), '--max-new-tokens', String(N), '--context', '256', '--json', ...(budget ? ['--budget', String(budget)] : [])];
  const r = spawnSync(BIN, args, { encoding: 'utf8' });
  if (r.status !== 0) throw new Error(`${BIN} ${args.join(' ')}: ${r.stderr}`);
  const c = JSON.parse(r.stdout);
  const s = await run(model, { context: 256, budget });
  const ids = [];
  for await (const t of s.generate(tokens, { maxTokens: N, stopAtEog: false })) ids.push(t.id);
  s.close();
  rows.push({ round, sameTokens: JSON.stringify(ids) === JSON.stringify(c.tokens), cliDecodeTokS: +c.stats.decode_tokens_per_s.toFixed(1), nodeDecodeTokS: +s.stats.decodeTokensPerS.toFixed(1), cliPrefillTokS: +c.stats.prefill_tokens_per_s.toFixed(1), nodePrefillTokS: +s.stats.prefillTokensPerS.toFixed(1), cliStreamed: c.stats.streamed_bytes_total, nodeStreamed: s.stats.streamedBytes, threads: `${c.stats.threads}/${s.stats.threads}` });
}
console.table(rows);
const median = (k) => rows.map((r) => r[k]).sort((a, b) => a - b)[rows.length >> 1];
console.log(`median decode tok/s: cli ${median('cliDecodeTokS')}, node ${median('nodeDecodeTokS')}`);
