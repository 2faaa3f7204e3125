// The official `openai` npm client against `tensorlane serve --model` (run by
// cli/tests/serve_openai.rs, after tests/python/serve_openai_check.py):
//
//     node tests/serve/check.mjs CHAT_URL PLAIN_URL EXPECT.json
//
// Completions and chat, streamed and not, greedy output equal to the library's (EXPECT.json),
// usage, logprobs, the error classes the client maps our error objects to.
import { readFileSync } from 'node:fs';
import assert from 'node:assert/strict';
import OpenAI from 'openai';

const [chatUrl, plainUrl, expectPath] = process.argv.slice(2);
const E = JSON.parse(readFileSync(expectPath, 'utf8'));
const client = new OpenAI({ baseURL: `${chatUrl}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 60_000 });
const plain = new OpenAI({ baseURL: `${plainUrl}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 60_000 });
const MODEL = E.model;
const ok = (what) => console.error(`ok - ${what}`);

const models = await client.models.list();
assert.deepEqual(models.data.map((m) => m.id), [MODEL]);
ok('models.list');

let r = await client.completions.create({ model: MODEL, prompt: E.prompt, max_tokens: E.max_tokens, temperature: 0 });
assert.equal(r.choices[0].text, E.text);
assert.equal(r.choices[0].finish_reason, 'length');
assert.equal(r.usage.completion_tokens, E.max_tokens);
assert.equal(r.usage.prompt_tokens, E.prompt_ids.length);
ok('completions: greedy text equals tensorlane run');

let text = '';
let last;
const stream = await client.completions.create({
  model: MODEL, prompt: E.prompt_ids, max_tokens: E.max_tokens, temperature: 0, stream: true,
  stream_options: { include_usage: true },
});
for await (const chunk of stream) {
  if (chunk.choices.length) text += chunk.choices[0].text;
  last = chunk;
}
assert.equal(text, E.text);
assert.equal(last.usage.total_tokens, E.prompt_ids.length + E.max_tokens);
ok('completions: streamed, token-id prompt, usage chunk');

r = await client.completions.create({ model: MODEL, prompt: E.prompt, max_tokens: E.max_tokens, temperature: 0, logprobs: 3 });
r.choices[0].logprobs.token_logprobs.forEach((lp, i) => {
  assert.ok(Math.abs(lp - E.logprobs[i].token) < 1e-4, `logprob ${i}: ${lp} vs ${E.logprobs[i].token}`);
});
ok('completions: logprobs equal Session::logits');

const C = E.chat;
const messages = [{ role: 'system', content: C.system }, { role: 'user', content: C.user }];
const c = await client.chat.completions.create({ model: MODEL, messages, max_tokens: C.max_tokens, temperature: 0 });
assert.equal(c.choices[0].message.content, C.text);
assert.equal(c.choices[0].message.role, 'assistant');
text = '';
let role;
for await (const chunk of await client.chat.completions.create({ model: MODEL, messages, max_tokens: C.max_tokens, temperature: 0, stream: true })) {
  role ??= chunk.choices[0]?.delta?.role;
  text += chunk.choices[0]?.delta?.content ?? '';
}
assert.equal(text, C.text);
assert.equal(role, 'assistant');
ok('chat: greedy reply, streamed and not');

await assert.rejects(client.completions.create({ model: 'nope', prompt: 'x' }), OpenAI.NotFoundError);
await assert.rejects(
  client.completions.create({ model: MODEL, prompt: 'x', max_tokens: E.context * 2 }),
  (e) => e instanceof OpenAI.BadRequestError && e.code === 'context_length_exceeded',
);
await assert.rejects(plain.chat.completions.create({ model: E.plain_model, messages }), OpenAI.BadRequestError);
ok('errors: 404 unknown model, 400 context, 400 chat without a template');
console.error('check.mjs: all checks passed');
