// Shared helpers for the node:test suites (not a test file itself).
import { createHash } from 'node:crypto';
import { existsSync, readFileSync, readdirSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

/** The repository's test data (`tests/data`, see its README for where each file came from). */
export const DATA = new URL('../data/', import.meta.url);
export const VECTORS = new URL('vectors/tenso/', DATA);
export const CI = process.env.CI === 'true';

/** `url` (inside `DATA`), after checking it exists: the data is part of the repository. */
export function data(url) {
  if (!existsSync(fileURLToPath(url))) throw new Error(`test data missing at ${fileURLToPath(url)} (it is part of the repository: is the checkout complete?)`);
  return url;
}

/** The backends under test: the addon (when built) and the wasm build, or TENSORLANE_BACKEND only. */
export async function loadBackends() {
  const only = process.env.TENSORLANE_BACKEND;
  const out = [];
  if (only !== 'wasm') {
    const addon = await import('../../js/node.js');
    if (addon.backendName === 'addon') out.push({ name: 'addon', api: addon });
    else if (CI || only === 'addon') throw new Error(`the N-API addon did not load: ${addon.addonLoadError?.message}; run scripts/build-js.sh`);
    else console.warn(`# addon not built (${addon.addonLoadError?.message}); testing the wasm backend only`);
  }
  if (only !== 'addon') out.push({ name: 'wasm', api: await import('../../js/wasm-node.js') });
  return out;
}

/** Every vector case: { name, dir, file (Uint8Array, own ArrayBuffer), meta }. */
export function vectorCases(dir = '.') {
  const base = new URL(dir === '.' ? '' : `${dir}/`, VECTORS);
  return readdirSync(base)
    .filter((f) => f.endsWith('.tenso'))
    .sort()
    .map((f) => {
      const name = f.slice(0, -6);
      const meta = JSON.parse(readFileSync(new URL(`${name}.json`, base), 'utf8'));
      return { name, dir, bytes: () => new Uint8Array(readFileSync(new URL(f, base))), meta };
    });
}

export function bytesOf(a) {
  return new Uint8Array(a.buffer, a.byteOffset, a.byteLength);
}
export const hex = (a) => Buffer.from(bytesOf(a)).toString('hex');
export const sha256 = (a) => createHash('sha256').update(bytesOf(a)).digest('hex');

/** A fresh buffer holding `bytes` at byte offset `shift` (to make views misaligned on purpose). */
export function shifted(bytes, shift) {
  const buf = new ArrayBuffer(bytes.length + shift);
  const out = new Uint8Array(buf, shift, bytes.length);
  out.set(bytes);
  return out;
}

/** Encode options tenso used for a vector, parsed from its `produced_by`. */
export function producedOptions(meta) {
  const p = meta.produced_by ?? '';
  const o = {};
  const a = /alignment=(\d+)/.exec(p);
  if (a) o.alignment = Number(a[1]);
  if (/check_integrity=True/.test(p)) o.integrity = true;
  if (/compress=True/.test(p)) o.compress = true;
  return o;
}

/** A structural, comparable form of a decoded value (TypedArrays become type + hex). */
export function plain(v) {
  if (ArrayBuffer.isView(v)) return { type: v.constructor.name, hex: hex(v) };
  if (Array.isArray(v)) return v.map(plain);
  if (v && typeof v === 'object') {
    const o = { proto: Object.getPrototypeOf(v)?.constructor?.name };
    for (const k of Object.keys(v)) o[k] = plain(v[k]);
    return o;
  }
  return typeof v === 'bigint' ? `${v}n` : v;
}
