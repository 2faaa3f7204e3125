// Where the files a model or .zt names live on disk (Node only): shared by both Node entries
// (js/node.js for the addon, js/wasm-node.js for the wasm build).
import { existsSync } from 'node:fs';
import { basename, dirname, extname, join } from 'node:path';

/**
 * Where shard `name` of the root file `root` is: `<stem>-<name>.zt` next to it (the reference
 * convention), else `<name>` or `<name>.zt` in the same directory (shard names are single path
 * components by the spec's naming rule).
 */
export function shardPath(root, name) {
  const dir = dirname(root);
  const stem = basename(root, extname(root));
  for (const f of [join(dir, `${stem}-${name}.zt`), join(dir, name), join(dir, `${name}.zt`)]) if (existsSync(f)) return f;
  return null;
}
