// The inspector's Run view: the open GGUF generating text on WebGPU or on the wasm CPU executor
// in a Worker (js/run.js; a device selector, `auto` by default: WebGPU only on a hardware adapter;
// `data-run-device` on the view says which one ran: `wasm` or `webgpu`), its
// weights streamed from the File or URL under a budget. Prompt box, streamed output, prefill and
// decode tokens/s, the plan (what stays resident, the ring the rest streams through, bytes per
// token against the plan's), a budget control and cancel. Checks read `data-run-state`
// (loading|running|done|error) on the view and `[data-run-tokens]` (the generated ids as JSON);
// `?view=run&tokens=1,2,3&max=16&budget=SIZE&device=wasm|webgpu|auto&cache=f16|f32|q8_0` runs greedy on load
// (cache: the KV cache type; absent, the device's default).
import { run } from '../js/run.js';

const esc = (s) => String(s).replace(/[&<>"]/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;' })[c]);

/** Bytes from `2MiB`, `1.5 GB`, `900000` (null when not a size). */
export function parseSize(s) {
  const m = /^\s*([\d.]+)\s*([kmgt]?i?b?)?\s*$/i.exec(String(s ?? ''));
  if (!m) return null;
  const unit = (m[2] ?? '').toLowerCase().replace(/b$/, '');
  const mul = { '': 1, k: 1e3, m: 1e6, g: 1e9, t: 1e12, ki: 1024, mi: 1024 ** 2, gi: 1024 ** 3, ti: 1024 ** 4 }[unit];
  const v = Number(m[1]) * (mul ?? NaN);
  return Number.isFinite(v) && v > 0 ? Math.round(v) : null;
}
/** `n` to three significant digits (0.036, 1.25, 118): a slow rate is not rounded to 0.0. */
export function sig(n) {
  if (!Number.isFinite(n)) return String(n);
  return n >= 1000 ? n.toFixed(0) : String(Number(n.toPrecision(3)));
}

export function fmtBytes(n) {
  if (n == null) return '–';
  const u = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  while (n >= 1024 && i < u.length - 1) {
    n /= 1024;
    i++;
  }
  return `${n.toFixed(i ? 1 : 0)} ${u[i]}`;
}

const STYLE = `
.run-view { display: grid; gap: 10px; }
.run-view .rv-row { display: flex; gap: 8px; align-items: center; flex-wrap: wrap; }
.run-view textarea { width: 100%; min-height: 4em; font: 13px ui-monospace, monospace; }
.run-view .rv-out { white-space: pre-wrap; font: 13px ui-monospace, monospace; min-height: 3em; padding: 8px; border: 1px solid #ccc; border-radius: 4px; background: #fafafa; }
.run-view .rv-msg { padding: 8px; border-radius: 4px; }
.run-view .rv-msg.err { background: #fde8e8; color: #8a1c1c; }
.run-view .rv-msg.info { background: #eef4fb; }
.run-view .rv-stats { display: grid; grid-template-columns: repeat(auto-fill, minmax(170px, 1fr)); gap: 6px; font-size: 12px; }
.run-view .rv-stats div b { display: block; font-size: 15px; }
.run-view svg text { font: 11px system-ui, sans-serif; }
`;

/** Mounts the view for `ctx.sources[0]` ({name, file, url}); returns {unmount}. */
export function mount(host, ctx) {
  const src = ctx.sources?.[0];
  const params = ctx.params ?? new URLSearchParams();
  host.innerHTML = `<style>${STYLE}</style><div class="run-view" data-run-state="loading">
    <div class="rv-row"><b>${esc(src?.name ?? 'no model')}</b>
      <label>budget <input class="rv-budget" size="10" placeholder="all resident" title="device memory for weights, KV cache and activations: 2MiB, 1.5GB, bytes; empty: everything resident"></label>
      <label>context <input class="rv-context" size="5" value="${esc(params.get('context') ?? '256')}"></label>
      <label>max tokens <input class="rv-max" size="4" value="${esc(params.get('max') ?? '32')}"></label>
      <label>device <select class="rv-device" title="auto: WebGPU on a hardware adapter, else the CPU executor in wasm (no WebGPU, or a software adapter such as SwiftShader)"><option value="auto">auto</option><option value="webgpu">WebGPU</option><option value="wasm">wasm (CPU)</option></select></label>
      <label>KV cache <select class="rv-cache" title="how the KV cache keeps keys and values: the device's default (f16 on wasm, f32 on WebGPU), f16, f32, or q8_0 (8 bits and a scale per 32 values: about half of f16, the smallest budget; wasm only)"><option value="">default</option><option value="f16">f16</option><option value="f32">f32</option><option value="q8_0">q8_0</option></select></label>
      <span class="rv-device-now"></span></div>
    <textarea class="rv-prompt" placeholder="prompt (text, or token ids as 1,2,3)">${esc(params.get('prompt') ?? (params.get('tokens') ? params.get('tokens') : 'Once upon a time'))}</textarea>
    <div class="rv-row"><button class="rv-go">Run</button><button class="rv-stop" disabled>Cancel</button><span class="rv-phase"></span></div>
    <div class="rv-msg" hidden></div>
    <div class="rv-out" aria-live="polite"></div>
    <div class="rv-stats"></div>
    <div class="rv-plan"></div>
    <pre data-run-tokens hidden>[]</pre>
  </div>`;
  const root = host.querySelector('.run-view');
  const q = (s) => root.querySelector(s);
  q('.rv-budget').value = params.get('budget') ?? '';
  q('.rv-device').value = ['auto', 'webgpu', 'wasm'].includes(params.get('device')) ? params.get('device') : 'auto';
  q('.rv-cache').value = ['f16', 'f32', 'q8_0'].includes(params.get('cache')) ? params.get('cache') : '';
  let session = null;
  let opened = null; // the budget/context the session was opened with
  let alive = true;
  const setState = (s) => (root.dataset.runState = s);
  const message = (html, kind = 'err') => {
    const m = q('.rv-msg');
    m.hidden = !html;
    m.className = `rv-msg ${kind}`;
    m.innerHTML = html ?? '';
  };

  function drawPlan(info, streamedPerToken) {
    const W = 640;
    const plan = info.plan;
    const weights = info.weightBytes;
    const budget = plan ? plan.budget_bytes : weights + info.workingSet;
    const scale = (b) => (b / Math.max(budget, weights + info.workingSet)) * W;
    const resident = plan ? plan.device_resident_bytes : weights;
    const ring = plan ? plan.ring_bytes : 0;
    const ws = info.workingSet;
    const seg = (x, w, color, label) => `<rect x="${x}" y="18" width="${Math.max(1, w)}" height="22" fill="${color}"><title>${esc(label)}</title></rect>`;
    let x = 0;
    const parts = [
      [resident, '#3b7dd8', `resident weights ${fmtBytes(resident)}`],
      [ring, '#e8a33d', `ring ${fmtBytes(ring)}: streamed rows pass through it every token`],
      [ws, '#9aa5b1', `KV cache, norms and activations ${fmtBytes(ws)}`],
    ];
    const rects = parts.map(([b, c, l]) => {
      const r = seg(x, scale(b), c, l);
      x += scale(b);
      return r;
    });
    // Where the ring is drawn: the live marker of the slot being filled moves in it.
    ringAt = { x: scale(resident), w: scale(ring), bytes: ring };
    // Per tensor: the share of its bytes that stays resident.
    const ts = (plan?.tensors ?? []).filter((t) => !t.gather);
    const tw = ts.length ? W / ts.length : 0;
    const strip = ts.map((t, i) => `<rect x="${i * tw}" y="58" width="${Math.max(1, tw - 1)}" height="14" fill="#e8a33d"><title>${esc(t.name)}: ${fmtBytes(t.resident_bytes)} resident, ${fmtBytes(t.streamed_bytes)} streamed</title></rect><rect x="${i * tw}" y="${58 + 14 * (1 - t.resident_bytes / Math.max(1, t.bytes))}" width="${Math.max(1, tw - 1)}" height="${14 * (t.resident_bytes / Math.max(1, t.bytes))}" fill="#3b7dd8"/>`).join('');
    q('.rv-plan').innerHTML = `<svg width="${W}" height="${ts.length ? 90 : 50}" role="img" aria-label="the offload plan">
      <text x="0" y="12">device budget ${fmtBytes(budget)} · weights ${fmtBytes(weights)} · <tspan fill="#3b7dd8">resident</tspan> · <tspan fill="#c07a10">ring</tspan> · <tspan fill="#6b7682">working set</tspan></text>
      ${rects.join('')}<rect class="rv-slot" x="0" y="16" width="0" height="26" fill="none" stroke="#b3261e" stroke-width="2"/>${ts.length ? `<text x="0" y="54">each weight: resident share (blue) of its rows; the rest streams through the ring</text>${strip}` : ''}
    </svg><div>streamed per token: <b>${fmtBytes(streamedPerToken ?? (plan?.streamed_bytes ?? 0))}</b> · the plan's floor: ${fmtBytes(plan?.streamed_bytes ?? 0)} <span class="rv-now"></span></div>`;
    placeSlot();
  }

  // The ring slot being filled, drawn once per frame however many weights stream in between.
  let ringAt = null;
  let lastStream = null;
  let frame = 0;
  function onStream(m) {
    lastStream = m;
    frame ||= requestAnimationFrame(() => {
      frame = 0;
      placeSlot();
    });
  }
  function placeSlot() {
    const r = q('.rv-slot');
    if (!r || !ringAt || !lastStream || !ringAt.bytes) return;
    r.setAttribute('x', ringAt.x + (lastStream.slot / ringAt.bytes) * ringAt.w);
    r.setAttribute('width', Math.max(2, (lastStream.bytes / ringAt.bytes) * ringAt.w));
    q('.rv-now').textContent = `· last streamed: ${lastStream.tensor} (${fmtBytes(lastStream.bytes)}) into the ring at ${fmtBytes(lastStream.slot)}`;
  }

  function showStats(s, info) {
    const per = s.passes ? s.fetchedBytes / s.passes : 0;
    q('.rv-stats').innerHTML = [
      ['prefill', `${sig(s.prefillTokensPerS)} tok/s`, `${s.prefillTokens} tokens in ${sig(s.prefillS)} s`],
      ['decode', `${sig(s.decodeTokensPerS)} tok/s`, `${s.decodeTokens} tokens in ${sig(s.decodeS)} s`],
      ['read per pass', fmtBytes(per), `plan: ${fmtBytes(info.plan?.streamed_bytes ?? 0)}`],
      ['loaded', fmtBytes(info.loadFetched), `of a ${fmtBytes(info.fileBytes)} file`],
    ].map(([k, v, t]) => `<div title="${esc(t)}">${esc(k)}<b>${esc(v)}</b>${esc(t)}</div>`).join('');
    drawPlan(info, per);
  }

  function explain(e) {
    if (e.code === 'no-webgpu') return message(`<b>No WebGPU here.</b> ${esc(e.message)}`);
    if (e.code === 'budget') {
      message(`<b>Budget too small (minimum ${esc(fmtBytes(e.minimum))}, ${e.minimum} bytes).</b> ${esc(e.message)} <button class="rv-use-min">Use the minimum</button>`);
      q('.rv-use-min').onclick = () => {
        q('.rv-budget').value = String(e.minimum);
        go();
      };
      return;
    }
    if (e.code === 'unsupported') return message(`<b>This model does not run here.</b> ${esc(e.message)}`);
    message(esc(e.message));
  }

  async function go() {
    if (!src) return message('Open a GGUF model first.');
    message(null);
    const budgetText = q('.rv-budget').value.trim();
    const budget = budgetText ? parseSize(budgetText) : undefined;
    if (budgetText && !budget) return message(`budget '${esc(budgetText)}' is not a size (2MiB, 1.5GB, bytes)`);
    const context = Number(q('.rv-context').value) || undefined;
    const max = Math.max(1, Number(q('.rv-max').value) || 32);
    const text = q('.rv-prompt').value;
    const prompt = /^\s*\d+(\s*,\s*\d+)*\s*$/.test(text) ? text.split(',').map(Number) : text;
    q('.rv-go').disabled = true;
    q('.rv-stop').disabled = false;
    q('.rv-out').textContent = '';
    const tokens = [];
    q('[data-run-tokens]').textContent = '[]';
    try {
      const device = q('.rv-device').value;
      const cacheType = q('.rv-cache').value || undefined;
      const key = `${budget}|${context}|${device}|${cacheType}`;
      if (!session || opened !== key) {
        session?.close();
        session = null;
        setState('loading');
        q('.rv-phase').textContent = 'reading the header…';
        delete root.dataset.runDevice;
        q('.rv-device-now').textContent = '';
        session = await run(src.file ?? src.url, { budget, context, device, cacheType, onProgress: (p) => (q('.rv-phase').textContent = `loading resident weights ${fmtBytes(p.loaded)} / ${fmtBytes(p.total)}`) });
        opened = key;
        root.dataset.runDevice = session.info.device;
        const dn = q('.rv-device-now');
        dn.textContent = `running on ${session.info.device === 'wasm' ? 'wasm (CPU, 1 thread)' : 'WebGPU'}, ${session.info.cacheType} KV cache`;
        dn.title = session.info.deviceWhy ?? '';
        drawPlan(session.info);
      }
      if (!alive) return;
      setState('running');
      q('.rv-phase').textContent = 'generating…';
      for await (const t of session.generate(prompt, { maxTokens: max, onStream })) {
        tokens.push(t.id);
        q('.rv-out').textContent += t.text;
        q('[data-run-tokens]').textContent = JSON.stringify(tokens);
      }
      showStats(session.stats, session.info);
      q('.rv-phase').textContent = session.stats.cancelled ? 'cancelled' : 'done';
      setState('done');
    } catch (e) {
      session?.close();
      session = null;
      opened = null;
      explain(e);
      q('.rv-phase').textContent = '';
      setState('error');
    } finally {
      q('.rv-go').disabled = false;
      q('.rv-stop').disabled = true;
    }
  }
  q('.rv-go').onclick = go;
  q('.rv-stop').onclick = () => session?.cancel();
  if (params.get('tokens')) go();
  else setState('done');
  return {
    unmount() {
      alive = false;
      session?.close();
    },
  };
}
