// A sharded .zt opened as a Blob (a browser's picked or dropped files) finds its shards among
// {companions} by the names the path reader tries (`<stem>-<name>.zt`, `<name>`, `<name>.zt`):
// every tensor equals what the path reader gives; a shard not given leaves the file listed and its
// tensors fail with kind 'companion' saying what to pass; a resized shard is the ShardIdentity
// error at open, as for a path.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { openAsBlob } from 'node:fs';
import * as tensorlane from '../../js/node.js';
import { fixturePath } from './_stats_reference.mjs';

const bytesOf = (a) => new Uint8Array(a.buffer, a.byteOffset, a.byteLength);
const named = async (f) => new File([await openAsBlob(fixturePath(f))], f);

describe('.zt from Blobs: shards as companions', () => {
  it('reads parts in shards from the companion Blobs', async () => {
    const local = tensorlane.open(fixturePath('sharded.zt'));
    const companions = { 'sharded-00001.zt': await named('sharded-00001.zt'), 'sharded-data.zt': await named('sharded-data.zt') };
    const r = await tensorlane.open(await named('sharded.zt'), { companions });
    assert.equal(r.format, 'zt');
    const sources = r.tensors.map((t) => t.layout.source);
    assert.ok(sources.includes('00001') && sources.includes('data'), 'parts in both shards');
    for (const name of r.keys()) assert.deepEqual(bytesOf(await r.tensor(name)), bytesOf(local.tensor(name)), name);
    assert.equal((await r.verify()).shardsChecked, 2);
    const bare = await tensorlane.open(await named('sharded.zt'));
    assert.deepEqual(bare.keys(), r.keys());
    await assert.rejects(bare.tensor('layer.weight'), (e) => e.kind === 'companion' && /pass the shard file as \{companions/.test(e.message));
    await assert.rejects(
      tensorlane.open(await named('sharded.zt'), { companions: { 'sharded-00001.zt': new File([new Uint8Array(10)], 'x') } }),
      (e) => e.rule === 'ShardIdentity' && /10 bytes/.test(e.message),
    );
  });
});
