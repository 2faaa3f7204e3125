// What every consumer of the installed package checks (Node ESM, CJS, and the bundled pages in
// Chromium): a golden tenso 0.24.0 packet decodes to its JSON sidecar, and a safetensors file
// written by safetensors 0.8.0 opens with the tensors tests/data/fixtures/manifest.json lists
// (names, dtypes, shapes, SHA-256 of the bytes). Returns { backend, problems: [...] }.
const hex = async (view) => {
  const bytes = new Uint8Array(view.buffer, view.byteOffset, view.byteLength);
  const digest = new Uint8Array(await crypto.subtle.digest('SHA-256', bytes.slice()));
  return Array.from(digest, (b) => b.toString(16).padStart(2, '0')).join('');
};

/**
 * tl: the module `tensorlane` as the consumer got it; packet: the .tenso bytes; packetMeta: its
 * JSON sidecar; model: what to give open() (a path, bytes or a File); expected: the manifest entry.
 */
export async function check(tl, { packet, packetMeta, model, expected }) {
  const problems = [];
  const want = packetMeta.expected;
  const d = tl.decode(packet);
  if (d.kind !== 'dense' || d.dtype !== want.dtype || JSON.stringify(d.shape) !== JSON.stringify(want.shape)) problems.push(`packet decoded to ${d.kind} ${d.dtype} ${JSON.stringify(d.shape)}, want dense ${want.dtype} ${JSON.stringify(want.shape)}`);
  else if ((await hex(d.data)) !== want.data_sha256) problems.push('packet data differs from the sidecar (sha256)');

  const m = await tl.open(model);
  if (m.format !== 'safetensors') problems.push(`open() says format ${m.format}, want safetensors`);
  const names = m.tensors.map((t) => t.name).sort();
  const wantNames = expected.tensors.map((t) => t.name).sort();
  if (JSON.stringify(names) !== JSON.stringify(wantNames)) problems.push(`tensors ${names} , want ${wantNames}`);
  for (const t of expected.tensors) {
    const e = m.tensors.find((x) => x.name === t.name);
    if (!e) continue;
    if (e.dtype !== t.dtype || JSON.stringify(e.shape) !== JSON.stringify(t.shape)) problems.push(`${t.name}: ${e.dtype} ${JSON.stringify(e.shape)}, want ${t.dtype} ${JSON.stringify(t.shape)}`);
    const data = await m.tensor(t.name);
    if ((await hex(data)) !== t.sha256) problems.push(`${t.name}: bytes differ from the manifest (sha256)`);
  }
  m.close?.();
  return { backend: tl.backendName, problems, tensors: names.length };
}
