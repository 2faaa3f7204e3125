// The module Worker behind `run()` (js/run.js) in the browser: the wasm reader and plan compiler,
// the executor (WebGPU, js/run-gpu.js, or the wasm CPU executor, js/run-cpu.js: `options.device`
// 'auto' takes WebGPU only on a hardware adapter) and the generation loop all run here, off the
// page's main thread. Messages in: {op: 'open', input, options}, {op: 'generate', prompt, sampling, max},
// {op: 'cancel'}. Messages out: {op: 'progress', ...}, {op: 'ready', info}, {op: 'token', ...},
// {op: 'done', stats}, {op: 'error', message, minimum?}.
import * as glue from '../wasm/pkg/tensorlane_wasm.js';
import { WGSL } from '../wasm/pkg/llm_wgsl.js';
import { RemoteFile } from './http.js';
import { byteSource, prepareModel } from './run-model.js';
import { GpuRunner } from './run-gpu.js';
import { CpuRunner } from './run-cpu.js';

let ready = null;
let state = null;
let cancelled = false;
const now = () => performance.now() / 1000;

function post(m) {
  self.postMessage(m);
}

/** The budget error's minimum (bytes), when the message names one. */
function minimumOf(message) {
  const m = /smallest budget the \S+ policy accepts is (\d+) bytes/.exec(message);
  return m ? Number(m[1]) : undefined;
}

async function open(input, options) {
  await (ready ??= glue.default({ module_or_path: new URL('../wasm/pkg/tensorlane_wasm_bg.wasm', import.meta.url) }));
  const chosen = await pickDevice(options.device ?? 'auto');
  if (chosen.device === 'wasm') return openCpu(input, options, chosen);
  // The WebGPU kernels keep an f32 KV cache: another type runs on the wasm CPU executor.
  const cacheType = options.cacheType ?? 'f32';
  if (cacheType !== 'f32') {
    const why = `the WebGPU kernels keep an f32 KV cache, and cacheType '${cacheType}' was asked for`;
    if ((options.device ?? 'auto') !== 'auto') throw Object.assign(new Error(`${why}: use device 'wasm' or cacheType 'f32'`), { code: 'unsupported' });
    return openCpu(input, options, { device: 'wasm', why, adapterInfo: chosen.adapterInfo });
  }
  const { adapter } = chosen;
  const device = await adapter.requestDevice({
    requiredLimits: {
      maxStorageBufferBindingSize: adapter.limits.maxStorageBufferBindingSize,
      maxBufferSize: adapter.limits.maxBufferSize,
      maxStorageBuffersPerShaderStage: Math.min(8, adapter.limits.maxStorageBuffersPerShaderStage),
    },
  });
  let remote = null;
  let src;
  if (typeof input === 'string' || input instanceof URL) {
    remote = await RemoteFile.open(input);
    src = byteSource(remote, String(input).split('/').pop().split('?')[0]);
  } else src = byteSource(input);
  const prep = await prepareModel(glue, src);
  const { model } = prep;
  // A weight type the WGSL kernels lack: 'auto' goes to wasm, 'webgpu' says why.
  const gpuWhy = model.webgpuError();
  if (gpuWhy) {
    device.destroy();
    if ((options.device ?? 'auto') !== 'auto') throw Object.assign(new Error(gpuWhy), { code: 'unsupported' });
    return openCpu(input, options, { device: 'wasm', why: `the WebGPU kernels cannot run this model: ${gpuWhy}`, adapterInfo: chosen.adapterInfo, prepared: { prep, src, remote } });
  }
  const context = options.context ?? Math.min(prep.spec.n_ctx_train, 4096);
  // What the WebGPU kernels do not compute (Gemma, a sliding window narrower than the context)
  // is refused by name before anything is uploaded.
  const refusal = model.deviceRefusal?.(context);
  if (refusal) throw new Error(refusal);
  const policy = options.policy ?? '';
  const weightBytes = model.weightBytes();
  const workingSet = model.workingSet(context);
  let plan = null;
  if (options.budget != null) plan = JSON.parse(model.plan(options.budget, context, policy));
  const info = {
    spec: prep.spec,
    tensors: prep.tensors,
    context,
    weightBytes,
    workingSet,
    fileBytes: src.size,
    minimumBudget: model.minimumBudget(context, policy) ?? null,
    plan,
    cacheType,
    adapter: { maxStorageBufferBindingSize: device.limits.maxStorageBufferBindingSize, maxBufferSize: device.limits.maxBufferSize, features: [...adapter.features] },
  };
  const runner = await GpuRunner.create({ device, glue, source: src, prep, plan, context, wgsl: WGSL, bindLimit: options.bindLimit, onProgress: (p) => post({ op: 'progress', ...p }), onStream: (m) => post({ op: 'stream', ...m }) });
  const loadFetched = remote ? remote.bytesFetched : src.bytesRead;
  state = { model, runner, src, remote, info, loadFetched };
  info.headerBytes = prep.headerBytes;
  info.residentRead = runner.residentRead;
  info.streamedPerForward = runner.streamedPerForward;
  info.bindings = runner.bindings;
  info.loadFetched = loadFetched;
  info.device = 'webgpu';
  info.deviceWhy = chosen.why;
  info.adapterInfo = chosen.adapterInfo;
  return info;
}

/** What an adapter says it is: vendor, architecture, device, description, fallback. */
function describeAdapter(adapter) {
  const i = adapter.info ?? {};
  return { vendor: i.vendor ?? '', architecture: i.architecture ?? '', device: i.device ?? '', description: i.description ?? '', isFallbackAdapter: Boolean(i.isFallbackAdapter ?? adapter.isFallbackAdapter) };
}

/**
 * The executor for `want` ('auto' | 'webgpu' | 'wasm'): `{device: 'webgpu', adapter, why}` or
 * `{device: 'wasm', why}`. 'auto' takes WebGPU only on a hardware adapter: none, or one that
 * reports itself as a fallback (software) adapter or is a known CPU emulation (SwiftShader,
 * llvmpipe/lavapipe), goes to wasm. 'webgpu' without an adapter is an error ('no-webgpu').
 */
async function pickDevice(want) {
  if (!['auto', 'webgpu', 'wasm'].includes(want)) throw Object.assign(new Error(`device '${want}' is not one of auto, webgpu, wasm`), { code: 'unsupported' });
  if (want === 'wasm') return { device: 'wasm', why: 'asked for' };
  if (!self.navigator?.gpu) {
    if (want === 'auto') return { device: 'wasm', why: 'this browser has no WebGPU (navigator.gpu is missing)' };
    throw Object.assign(new Error('WebGPU is not available in this browser (navigator.gpu is missing): use a browser with WebGPU enabled, the wasm device, or `tensorlane run` on this machine'), { code: 'no-webgpu' });
  }
  const adapter = await navigator.gpu.requestAdapter();
  if (!adapter) {
    if (want === 'auto') return { device: 'wasm', why: 'WebGPU has no adapter here (the GPU may be disabled or blocklisted)' };
    throw Object.assign(new Error('WebGPU has no adapter here (navigator.gpu.requestAdapter() gave none): the GPU may be disabled or blocklisted'), { code: 'no-webgpu' });
  }
  const adapterInfo = describeAdapter(adapter);
  const soft = adapterInfo.isFallbackAdapter || /swiftshader|llvmpipe|lavapipe|software/i.test(`${adapterInfo.vendor} ${adapterInfo.architecture} ${adapterInfo.device} ${adapterInfo.description}`);
  const name = [adapterInfo.vendor, adapterInfo.architecture, adapterInfo.device].filter(Boolean).join(' ') || 'unnamed';
  if (soft && want === 'auto') return { device: 'wasm', why: `the WebGPU adapter (${name}) is a software one, slower than the CPU executor`, adapterInfo };
  return { device: 'webgpu', adapter, adapterInfo, why: want === 'webgpu' ? 'asked for' : `a hardware WebGPU adapter (${name})` };
}

/** open() on the wasm CPU executor (js/run-cpu.js). */
async function openCpu(input, options, chosen) {
  let remote = null;
  let src;
  let prep;
  if (chosen.prepared) ({ prep, src, remote } = chosen.prepared);
  else {
    if (typeof input === 'string' || input instanceof URL) {
      remote = await RemoteFile.open(input);
      src = byteSource(remote, String(input).split('/').pop().split('?')[0]);
    } else src = byteSource(input);
    prep = await prepareModel(glue, src);
  }
  const raw = remote ?? input;
  const { model } = prep;
  const context = options.context ?? Math.min(prep.spec.n_ctx_train, 4096);
  const policy = options.policy ?? '';
  // The CPU executor keeps an f16 KV cache by default, as `tensorlane run` does on the CPU.
  const cacheType = options.cacheType ?? 'f16';
  const plan = options.budget != null ? JSON.parse(model.plan(options.budget, context, policy, cacheType)) : null;
  const runner = await CpuRunner.create({ glue, source: src, input: raw, prep, plan, context, cacheType, onProgress: (p) => post({ op: 'progress', ...p }) });
  const loadFetched = remote ? remote.bytesFetched : src.bytesRead;
  const info = {
    spec: prep.spec,
    tensors: prep.tensors,
    context,
    weightBytes: model.weightBytes(),
    workingSet: model.workingSet(context, cacheType),
    fileBytes: src.size,
    minimumBudget: model.minimumBudget(context, policy, cacheType) ?? null,
    plan,
    cacheType,
    headerBytes: prep.headerBytes,
    residentRead: runner.residentRead,
    streamedPerForward: runner.streamedPerForward,
    bindings: null,
    loadFetched,
    device: 'wasm',
    deviceWhy: chosen.why,
    adapterInfo: chosen.adapterInfo,
    threads: 1,
  };
  state = { model, runner, src, remote, info, loadFetched, sync: runner.counter };
  return info;
}

// (the wasm device's synchronous reads of a File count in `sync`; of a URL, in the RemoteFile)
const fetched = () => (state.remote ? state.remote.bytesFetched : state.src.bytesRead + (state.sync?.bytes ?? 0));

async function generate(prompt, sampling = {}, max = 64) {
  const { model, runner } = state;
  cancelled = false;
  const ids = typeof prompt === 'string' ? [...model.encode(prompt, true)] : prompt.map(Number);
  if (ids.length === 0) throw new Error('the prompt is empty (give text or at least one token id)');
  for (const id of ids) if (!(Number.isInteger(id) && id >= 0 && id < state.info.spec.n_vocab)) throw new Error(`token id ${id} is outside the vocabulary (0..${state.info.spec.n_vocab})`);
  const sampler = new glue.LlmSampler(sampling.temperature ?? 0, sampling.topK ?? 0, sampling.topP ?? 1, sampling.seed ?? 0);
  const stopAtEog = sampling.stopAtEog ?? true;
  const stats = { promptTokens: ids, prefillTokens: ids.length, prefillS: 0, decodeTokens: 0, decodeS: 0, streamedBytes: 0, fetchedBefore: fetched(), passes: 0 };
  const out = [];
  try {
    runner.reset();
    let t0 = now();
    let logits = await runner.forward(ids, max > 1);
    // (the WebGPU runner takes 32 positions a pass, the CPU executor a whole prompt)
    stats.passes += state.info.device === 'wasm' ? 1 : Math.ceil(ids.length / 32);
    stats.prefillS = now() - t0;
    for (let i = 0; i < max && !cancelled; i++) {
      const id = sampler.pick(logits);
      out.push(id);
      const eog = stopAtEog && model.isEog(id);
      post({ op: 'token', id, piece: model.piece(id), index: i });
      if (eog || i + 1 >= max || cancelled) break;
      t0 = now();
      logits = await runner.forward([id], i + 2 < max);
      stats.passes += 1;
      stats.decodeS += now() - t0;
      stats.decodeTokens += 1;
    }
  } finally {
    runner.streamer.drop();
    sampler.free();
  }
  stats.encodeS = runner.timing.encode / 1000;
  stats.deviceWaitS = runner.timing.wait / 1000;
  runner.timing = { encode: 0, wait: 0 };
  stats.tokens = out;
  stats.text = model.decode(Uint32Array.from(out));
  stats.cancelled = cancelled;
  stats.streamedBytes = runner.streamedTotal;
  runner.streamedTotal = 0;
  stats.fetchedBytes = fetched() - stats.fetchedBefore;
  stats.prefillTokensPerS = stats.prefillS > 0 ? stats.prefillTokens / stats.prefillS : 0;
  stats.decodeTokensPerS = stats.decodeS > 0 ? stats.decodeTokens / stats.decodeS : 0;
  return stats;
}

self.onmessage = async (ev) => {
  const m = ev.data;
  try {
    if (m.op === 'open') post({ op: 'ready', info: await open(m.input, m.options ?? {}) });
    else if (m.op === 'generate') post({ op: 'done', stats: await generate(m.prompt, m.sampling, m.max) });
    else if (m.op === 'cancel') cancelled = true;
  } catch (e) {
    const message = String(e?.message ?? e);
    post({ op: 'error', message, code: e?.code ?? (minimumOf(message) ? 'budget' : /unsupported architecture|models do not run|cannot be computed|WebGPU device/.test(message) ? 'unsupported' : 'error'), minimum: minimumOf(message) });
  }
};
