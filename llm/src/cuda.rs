//! The CUDA executor ([`Device::Cuda`](crate::Device::Cuda), feature `cuda`): the forward pass
//! of the wgpu executor in CUDA kernels (`llm/src/cuda/kernels.cu`, the WGSL kernels' twins,
//! compiled at run time with NVRTC), through cudarc with `libcuda` loaded at run time, so the
//! crate builds without the CUDA toolkit and a machine without a driver gets
//! [`Error::Device`] naming what is missing.
//!
//! Weights are uploaded in their stored form (F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q6_K) and
//! dequantized inside the matrix-product kernel; the inputs of each product are rounded as the
//! CPU executor rounds them. Under a plan, each matrix keeps its planned resident rows in a
//! device buffer of its own and its streamed rows are copied into their slot of the plan's ring
//! before each use. Everything runs in order on one stream, so a slot is rewritten only after
//! the kernels that read its earlier occupant (the copies are not yet overlapped with compute:
//! the plan's two-stream schedule is the GPU issue's).
//!
//! Not run on hardware in this repository's CI (no GPU there): its kernels are checked to
//! compile with NVRTC, and `llm/tests/cuda.rs` compares it with the CPU executor on a machine
//! with a GPU (`TENSORLANE_EXPECT_CUDA=1` makes a missing device a failure).

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cudarc::driver::{CudaFunction, CudaModule, CudaSlice, CudaStream, LaunchConfig, PushKernelArg};
use tensorlane::model::Model;
use tensorlane_offload::device::cuda::CudaDevice;

use crate::arch::{RopeStyle, Spec, TensorSpec};
use crate::bind::{self, missing, read};
use crate::cpu::KvCache;
use crate::kernels::Matrix;
use crate::plan::{BATCH, Budgeted};
use crate::{Error, Result};

/// The kernels' source (compiled with NVRTC when a session opens).
pub(crate) const KERNELS: &str = include_str!("cuda/kernels.cu");
/// The most blocks along x in one launch (the rest goes along y).
const GRID_X: u32 = 32768;

fn device_err(what: impl std::fmt::Display) -> Error {
    Error::Device(format!("cuda: {what}"))
}

/// `(x, y)` blocks for `count` along one logical dimension.
fn grid(count: usize) -> (u32, u32) {
    let count = count.max(1) as u32;
    let x = count.min(GRID_X);
    (x, count.div_ceil(x))
}

struct Kernels {
    matmul: CudaFunction,
    round: CudaFunction,
    rms_norm: CudaFunction,
    rope: CudaFunction,
    attention: CudaFunction,
    add_rows: CudaFunction,
    swiglu: CudaFunction,
    add: CudaFunction,
}

/// A weight matrix on the device in stored form: its resident rows, and (under a budget) where
/// its streamed rows go in the ring.
struct CMat<'m> {
    kind: u32,
    rows: usize,
    cols: usize,
    row_bytes: usize,
    /// Rows `0..resident_rows`.
    resident: Option<CudaSlice<u8>>,
    resident_rows: usize,
    /// The stored bytes (the model's map) and the ring slot of rows `resident_rows..`.
    stream: Option<(Cow<'m, [u8]>, usize)>,
}

struct CLayer<'m> {
    attn_norm: CudaSlice<f32>,
    wq: CMat<'m>,
    wk: CMat<'m>,
    wv: CMat<'m>,
    bias: Option<[CudaSlice<f32>; 3]>,
    /// Per-head RMSNorm weights of the queries and keys (qwen3).
    qk_norm: Option<[CudaSlice<f32>; 2]>,
    wo: CMat<'m>,
    ffn_norm: CudaSlice<f32>,
    gate: CMat<'m>,
    up: CMat<'m>,
    down: CMat<'m>,
}

/// Activation buffers for one batch of [`BATCH`] positions.
struct Acts {
    x: CudaSlice<f32>,
    xn: CudaSlice<f32>,
    xr: CudaSlice<f32>,
    q_raw: CudaSlice<f32>,
    k_raw: CudaSlice<f32>,
    v_raw: CudaSlice<f32>,
    q: CudaSlice<f32>,
    attn: CudaSlice<f32>,
    proj: CudaSlice<f32>,
    g: CudaSlice<f32>,
    u: CudaSlice<f32>,
    scores: CudaSlice<f32>,
    logits: CudaSlice<f32>,
}

/// The CUDA executor over a model's weights uploaded in stored form.
pub(crate) struct Cuda<'m> {
    spec: Spec,
    stream: Arc<CudaStream>,
    k: Kernels,
    /// Keeps the module of `k` loaded.
    _module: Arc<CudaModule>,
    embd: Matrix<'m>,
    output: CMat<'m>,
    output_norm: CudaSlice<f32>,
    rope: CudaSlice<f32>,
    layers: Vec<CLayer<'m>>,
    kc: Vec<CudaSlice<f32>>,
    vc: Vec<CudaSlice<f32>>,
    acts: Acts,
    ring: Option<CudaSlice<u8>>,
    context: usize,
    stored: u64,
    streamed: u64,
    /// Weight bytes the last forward pass streamed.
    pub(crate) streamed_last: u64,
    /// Time it spent copying them.
    pub(crate) copy_last: Duration,
}

/// A driver call's error as [`Error::Device`].
fn drv(e: impl std::fmt::Debug) -> Error {
    device_err(format!("{e:?}"))
}

impl<'m> Cuda<'m> {
    /// Opens device 0 (an error without `libcuda` or a device), compiles the kernels, uploads
    /// every weight `spec` needs from `model` (under a plan: the resident rows) and allocates a
    /// KV cache of `context` positions.
    pub(crate) fn new(model: &'m Model, spec: Spec, context: usize, plan: Option<&Budgeted>) -> Result<Cuda<'m>> {
        if let Some(why) = spec.beyond_device_executors(context) {
            return Err(device_err(format!("{why}: not computed by this device executor yet (use --device cpu)")));
        }
        let dev = CudaDevice::new(0).map_err(|e| {
            device_err(match e {
                tensorlane_offload::Error::NoDevice(m) => m,
                other => other.to_string(),
            })
        })?;
        let stream = dev.context().default_stream();
        let ptx = cudarc::nvrtc::compile_ptx(KERNELS).map_err(|e| device_err(format!("NVRTC: {e:?}")))?;
        let module = dev.context().load_module(ptx).map_err(drv)?;
        let f = |name: &str| module.load_function(name).map_err(drv);
        let k = Kernels {
            matmul: f("matmul")?,
            round: f("round_inputs")?,
            rms_norm: f("rms_norm")?,
            rope: f("rope")?,
            attention: f("attention")?,
            add_rows: f("add_rows")?,
            swiglu: f("swiglu")?,
            add: f("add")?,
        };
        let h = spec.hparams.clone();
        let split: HashMap<String, (u64, Option<u64>)> = plan.map(Budgeted::placement).unwrap_or_default();
        let ring = match plan {
            Some(b) if b.plan.ring.len > 0 => Some(stream.alloc_zeros::<u8>(b.plan.ring.len as usize).map_err(drv)?),
            _ => None,
        };
        let stored = std::cell::Cell::new(0u64);
        let streamed = std::cell::Cell::new(0u64);
        let upload = |spec: &TensorSpec, m: Option<(Cow<'m, [u8]>, Matrix<'m>)>| -> Result<CMat<'m>> {
            let (bytes, m) = m.ok_or_else(|| missing(spec))?;
            stored.set(stored.get() + bytes.len() as u64);
            let c = cmat(
                &stream,
                bytes,
                &m,
                split.get(&m.name).copied(),
                ring.as_ref().map(|r| r.len()),
            )?;
            streamed.set(streamed.get() + c.streamed_bytes());
            Ok(c)
        };
        let vector = |spec: &TensorSpec| -> Result<Option<CudaSlice<f32>>> {
            match bind::vector(model, spec)? {
                Some(v) => Ok(Some(stream.clone_htod(&v).map_err(drv)?)),
                None => Ok(None),
            }
        };
        let required = |spec: &TensorSpec| vector(spec)?.ok_or_else(|| missing(spec));
        let mut layers = Vec::with_capacity(spec.layers.len());
        for l in &spec.layers {
            let bias = match [vector(&l.biases[0])?, vector(&l.biases[1])?, vector(&l.biases[2])?] {
                [Some(q), Some(k), Some(v)] => Some([q, k, v]),
                [None, None, None] if !l.biases_required => None,
                b => {
                    let i = b.iter().position(Option::is_none).unwrap_or(0);
                    return Err(missing(&l.biases[i]));
                }
            };
            layers.push(CLayer {
                attn_norm: required(&l.attn_norm)?,
                wq: upload(&l.wq, read(model, &l.wq)?)?,
                wk: upload(&l.wk, read(model, &l.wk)?)?,
                wv: upload(&l.wv, read(model, &l.wv)?)?,
                bias,
                qk_norm: match &l.qk_norm {
                    Some([q, k]) => Some([required(q)?, required(k)?]),
                    None => None,
                },
                wo: upload(&l.wo, read(model, &l.wo)?)?,
                ffn_norm: required(&l.ffn_norm)?,
                gate: upload(&l.gate, read(model, &l.gate)?)?,
                up: upload(&l.up, read(model, &l.up)?)?,
                down: upload(&l.down, read(model, &l.down)?)?,
            });
        }
        let (embd_bytes, embd) = read(model, &spec.token_embd)?.ok_or_else(|| missing(&spec.token_embd))?;
        let output = match read(model, &spec.output)? {
            Some(o) => {
                stored.set(stored.get() + embd_bytes.len() as u64);
                upload(&spec.output, Some(o))?
            }
            // Tied: the embedding's plan entry is this product's (and its bytes count once).
            None => upload(&spec.token_embd, read(model, &spec.token_embd)?)?,
        };
        let output_norm = required(&spec.output_norm)?;
        let rope = stream
            .clone_htod(&bind::rope_table(model, &spec, context)?)
            .map_err(drv)?;
        let q_dim = h.n_head * h.head_dim;
        let kv_dim = h.n_head_kv * h.head_dim;
        let zeros = |n: usize| stream.alloc_zeros::<f32>(n.max(1)).map_err(drv);
        let mut kc = Vec::with_capacity(h.n_layer);
        let mut vc = Vec::with_capacity(h.n_layer);
        for _ in 0..spec.layers.len() {
            kc.push(zeros(context * kv_dim)?);
            vc.push(zeros(context * kv_dim)?);
        }
        let widest = h.n_ff.max(q_dim).max(h.n_embd);
        let acts = Acts {
            x: zeros(BATCH * h.n_embd)?,
            xn: zeros(BATCH * h.n_embd)?,
            xr: zeros(BATCH * widest)?,
            q_raw: zeros(BATCH * q_dim)?,
            k_raw: zeros(BATCH * kv_dim)?,
            v_raw: zeros(BATCH * kv_dim)?,
            q: zeros(BATCH * q_dim)?,
            attn: zeros(BATCH * q_dim)?,
            proj: zeros(BATCH * h.n_embd)?,
            g: zeros(BATCH * h.n_ff)?,
            u: zeros(BATCH * h.n_ff)?,
            scores: zeros(BATCH * h.n_head * context)?,
            logits: zeros(BATCH * h.n_vocab)?,
        };
        stream.synchronize().map_err(drv)?;
        Ok(Cuda {
            spec,
            stream,
            k,
            _module: module,
            embd,
            output,
            output_norm,
            rope,
            layers,
            kc,
            vc,
            acts,
            ring,
            context,
            stored: stored.get(),
            streamed: streamed.get(),
            streamed_last: 0,
            copy_last: Duration::ZERO,
        })
    }

    pub(crate) fn spec(&self) -> &Spec {
        &self.spec
    }

    /// Stored bytes of every weight matrix.
    pub(crate) fn stored_bytes(&self) -> u64 {
        self.stored
    }

    /// Weight bytes streamed per forward pass.
    pub(crate) fn streamed_bytes(&self) -> u64 {
        self.streamed
    }

    /// The host-to-device copy rate in GB/s: the best of three copies of `bytes` from ordinary
    /// (pageable) host memory, as the streamed rows are copied (0 when the device fails).
    pub(crate) fn probe_link_gbps(&self, bytes: usize) -> f64 {
        let host = vec![1u8; bytes];
        let Ok(mut dev) = self.stream.alloc_zeros::<u8>(bytes) else {
            return 0.0;
        };
        let mut best = f64::INFINITY;
        for _ in 0..3 {
            let t = Instant::now();
            if self.stream.memcpy_htod(&host, &mut dev).is_err() || self.stream.synchronize().is_err() {
                return 0.0;
            }
            best = best.min(t.elapsed().as_secs_f64());
        }
        bytes as f64 / best.max(1e-9) / 1e9
    }

    /// Copies `w`'s streamed rows into their ring slot (on the stream, after every kernel
    /// launched so far, so the slot's earlier occupant has been read); returns the bytes.
    fn stream_in(&mut self, which: Which) -> Result<u64> {
        let w = mat_of(&self.layers, &self.output, which);
        let Some((data, slot)) = &w.stream else { return Ok(0) };
        let bytes = &data[w.resident_rows * w.row_bytes..w.rows * w.row_bytes];
        let (slot, len) = (*slot, bytes.len());
        let ring = self
            .ring
            .as_mut()
            .ok_or_else(|| device_err("the plan streams weights but has no ring"))?;
        let mut view = ring
            .try_slice_mut(slot..slot + len)
            .ok_or_else(|| device_err("a ring slot leaves the ring"))?;
        let t = Instant::now();
        self.stream.memcpy_htod(bytes, &mut view).map_err(drv)?;
        self.copy_last += t.elapsed();
        Ok(len as u64)
    }

    fn mat(&self, which: Which) -> &CMat<'m> {
        mat_of(&self.layers, &self.output, which)
    }

    /// `y[j][r] = Σ_c W[r][c] · x[j][c]` for `n` inputs (the inputs rounded first as the CPU
    /// executor rounds them for `w`'s type): one launch over the resident rows, one over the
    /// streamed rows in the ring.
    fn matmul(&mut self, which: Which, x: Buf, y: Buf, n: usize) -> Result<()> {
        self.streamed_last += self.stream_in(which)?;
        let w = self.mat(which);
        let (kind, rows, cols, row_bytes, resident_rows) = (w.kind, w.rows, w.cols, w.row_bytes, w.resident_rows);
        let input = if kind == 0 {
            x
        } else {
            let len = n * cols;
            let per = match kind {
                1 | 2 => 1,
                3 | 4 => 32,
                _ => 256,
            };
            let (gx, gy) = grid((len / per).div_ceil(64));
            let (src, dst) = (self.buf(x), self.buf(Buf::Xr));
            let mut b = self.stream.launch_builder(&self.k.round);
            let params = [len as u32, kind, gx];
            b.arg(src).arg(dst);
            params.iter().for_each(|p| {
                b.arg(p);
            });
            launch(b, (gx, gy, 1))?;
            Buf::Xr
        };
        let pieces = [(0, resident_rows), (resident_rows, rows - resident_rows)];
        for (row0, count) in pieces {
            if count == 0 {
                continue;
            }
            let w = self.mat(which);
            let weights = match (row0, &w.resident, &w.stream, &self.ring) {
                (0, Some(r), _, _) => r.slice(..),
                (_, _, Some((_, slot)), Some(ring)) => ring.slice(*slot..),
                _ => return Err(device_err("a weight's rows are neither resident nor in the ring")),
            };
            let (gx, gy) = grid(count);
            let (xin, yout) = (self.buf(input), self.buf(y));
            let params = [
                count as u32,
                cols as u32,
                row_bytes as u32,
                kind,
                rows as u32,
                row0 as u32,
                gx,
            ];
            let mut b = self.stream.launch_builder(&self.k.matmul);
            b.arg(&weights).arg(xin).arg(yout);
            params.iter().for_each(|p| {
                b.arg(p);
            });
            launch(b, (gx, gy, n as u32))?;
        }
        Ok(())
    }

    fn buf(&self, b: Buf) -> &CudaSlice<f32> {
        let a = &self.acts;
        match b {
            Buf::X => &a.x,
            Buf::Xn => &a.xn,
            Buf::Xr => &a.xr,
            Buf::QRaw => &a.q_raw,
            Buf::KRaw => &a.k_raw,
            Buf::VRaw => &a.v_raw,
            Buf::Attn => &a.attn,
            Buf::Proj => &a.proj,
            Buf::G => &a.g,
            Buf::U => &a.u,
            Buf::Logits => &a.logits,
        }
    }

    /// RMSNorm of `rows.1` rows of `x` from row `rows.0`, each `n_embd` wide, into `y` from row 0.
    fn rms_norm(&self, x: Buf, w: &CudaSlice<f32>, y: Buf, rows: (usize, usize)) -> Result<()> {
        self.rms_norm_rows(x, w, y, self.spec.hparams.n_embd, rows)
    }

    /// RMSNorm over rows `d` wide (`w` has `d` values); `x` may be `y` (each thread reads and
    /// writes the same elements of its row's block).
    fn rms_norm_rows(&self, x: Buf, w: &CudaSlice<f32>, y: Buf, d: usize, rows: (usize, usize)) -> Result<()> {
        let h = &self.spec.hparams;
        let (d, row0) = (d as u32, rows.0 as u32);
        let mut b = self.stream.launch_builder(&self.k.rms_norm);
        b.arg(self.buf(x))
            .arg(w)
            .arg(self.buf(y))
            .arg(&d)
            .arg(&h.rms_eps)
            .arg(&row0);
        launch(b, (rows.1 as u32, 1, 1))
    }

    fn elementwise(&self, f: &CudaFunction, a: Buf, b: &CudaSlice<f32>, len: usize, d: usize) -> Result<()> {
        let (gx, gy) = grid(len.div_ceil(64));
        let params = [len as u32, d as u32, gx];
        let mut l = self.stream.launch_builder(f);
        l.arg(self.buf(a)).arg(b);
        params.iter().for_each(|p| {
            l.arg(p);
        });
        launch(l, (gx, gy, 1))
    }

    #[allow(clippy::too_many_arguments)]
    fn rope(&self, src: Buf, dst: &CudaSlice<f32>, n: usize, heads: usize, pos0: usize, row0: usize) -> Result<()> {
        let h = &self.spec.hparams;
        let style: u32 = match h.rope_style {
            RopeStyle::Adjacent => 0,
            RopeStyle::Halves => 1,
        };
        let (gx, gy) = grid((n * heads * h.head_dim).div_ceil(64));
        let params = [
            n as u32,
            heads as u32,
            h.head_dim as u32,
            h.rope_dim as u32,
            pos0 as u32,
            style,
            row0 as u32,
            gx,
        ];
        let mut b = self.stream.launch_builder(&self.k.rope);
        b.arg(self.buf(src)).arg(&self.rope).arg(dst);
        params.iter().for_each(|p| {
            b.arg(p);
        });
        launch(b, (gx, gy, 1))
    }

    /// Runs `tokens` at positions `cache.len..` and returns the logits of the positions `want(i)`
    /// selects, in order. The caller has checked the token ids and the context.
    pub(crate) fn forward(
        &mut self,
        tokens: &[u32],
        cache: &mut KvCache,
        want: &dyn Fn(usize) -> bool,
    ) -> Result<Vec<Vec<f32>>> {
        self.streamed_last = 0;
        self.copy_last = Duration::ZERO;
        bind::in_batches(tokens, cache, want, |chunk, pos, rows| {
            self.forward_batch(chunk, pos, rows)
        })
    }

    fn forward_batch(&mut self, tokens: &[u32], pos0: usize, rows: &[usize]) -> Result<Vec<Vec<f32>>> {
        let h = self.spec.hparams.clone();
        let n = tokens.len();
        let (d, hd) = (h.n_embd, h.head_dim);
        let q_dim = h.n_head * hd;
        let kv_dim = h.n_head_kv * hd;
        let mut x = vec![0f32; n * d];
        for (i, &t) in tokens.iter().enumerate() {
            self.embd.row_into(t as usize, &mut x[i * d..(i + 1) * d]);
        }
        let mut xs = self.acts.x.slice_mut(0..n * d);
        self.stream.memcpy_htod(&x, &mut xs).map_err(drv)?;
        for li in 0..self.layers.len() {
            self.rms_norm(Buf::X, &self.layers[li].attn_norm, Buf::Xn, (0, n))?;
            self.matmul(Which::Layer(li, 0), Buf::Xn, Buf::QRaw, n)?;
            self.matmul(Which::Layer(li, 1), Buf::Xn, Buf::KRaw, n)?;
            self.matmul(Which::Layer(li, 2), Buf::Xn, Buf::VRaw, n)?;
            if let Some([bq, bk, bv]) = &self.layers[li].bias {
                self.elementwise(&self.k.add_rows, Buf::QRaw, bq, n * q_dim, q_dim)?;
                self.elementwise(&self.k.add_rows, Buf::KRaw, bk, n * kv_dim, kv_dim)?;
                self.elementwise(&self.k.add_rows, Buf::VRaw, bv, n * kv_dim, kv_dim)?;
            }
            // qwen3: each query and key head normed before rope, in place.
            if let Some([nq, nk]) = &self.layers[li].qk_norm {
                self.rms_norm_rows(Buf::QRaw, nq, Buf::QRaw, hd, (0, n * h.n_head))?;
                self.rms_norm_rows(Buf::KRaw, nk, Buf::KRaw, hd, (0, n * h.n_head_kv))?;
            }
            self.rope(Buf::QRaw, &self.acts.q, n, h.n_head, pos0, 0)?;
            self.rope(Buf::KRaw, &self.kc[li], n, h.n_head_kv, pos0, pos0)?;
            {
                let src = self.acts.v_raw.slice(0..n * kv_dim);
                let mut dst = self.vc[li].slice_mut(pos0 * kv_dim..(pos0 + n) * kv_dim);
                self.stream.memcpy_dtod(&src, &mut dst).map_err(drv)?;
            }
            let params = [
                h.n_head as u32,
                hd as u32,
                kv_dim as u32,
                (h.n_head / h.n_head_kv) as u32,
                pos0 as u32,
                self.context as u32,
            ];
            let scale = 1.0 / (hd as f32).sqrt();
            let mut b = self.stream.launch_builder(&self.k.attention);
            b.arg(&self.acts.q)
                .arg(&self.kc[li])
                .arg(&self.vc[li])
                .arg(&self.acts.scores)
                .arg(&self.acts.attn);
            params.iter().for_each(|p| {
                b.arg(p);
            });
            b.arg(&scale);
            launch(b, (h.n_head as u32, n as u32, 1))?;
            self.matmul(Which::Layer(li, 3), Buf::Attn, Buf::Proj, n)?;
            self.elementwise(&self.k.add, Buf::X, &self.acts.proj, n * d, d)?;
            self.rms_norm(Buf::X, &self.layers[li].ffn_norm, Buf::Xn, (0, n))?;
            self.matmul(Which::Layer(li, 4), Buf::Xn, Buf::G, n)?;
            self.matmul(Which::Layer(li, 5), Buf::Xn, Buf::U, n)?;
            self.elementwise(&self.k.swiglu, Buf::G, &self.acts.u, n * h.n_ff, h.n_ff)?;
            self.matmul(Which::Layer(li, 6), Buf::G, Buf::Proj, n)?;
            self.elementwise(&self.k.add, Buf::X, &self.acts.proj, n * d, d)?;
        }
        // The logits of rows r0..n (all of them, or the last one); the output product runs
        // whatever is asked for, so every forward streams the same bytes.
        let r0 = rows.first().copied().unwrap_or(n - 1);
        let m = n - r0;
        let vocab = h.n_vocab;
        self.rms_norm(Buf::X, &self.output_norm, Buf::Xn, (r0, m))?;
        self.matmul(Which::Output, Buf::Xn, Buf::Logits, m)?;
        let mut all = vec![0f32; m * vocab];
        self.stream
            .memcpy_dtoh(&self.acts.logits.slice(0..m * vocab), &mut all)
            .map_err(drv)?;
        self.stream.synchronize().map_err(drv)?;
        Ok(rows
            .iter()
            .map(|&r| all[(r - r0) * vocab..(r - r0 + 1) * vocab].to_vec())
            .collect())
    }
}

fn mat_of<'a, 'm>(layers: &'a [CLayer<'m>], output: &'a CMat<'m>, which: Which) -> &'a CMat<'m> {
    match which {
        Which::Output => output,
        Which::Layer(l, i) => {
            let l = &layers[l];
            [&l.wq, &l.wk, &l.wv, &l.wo, &l.gate, &l.up, &l.down][i]
        }
    }
}

/// Which weight matrix: the output projection, or `(layer, i)` with i in q, k, v, o, gate, up,
/// down order.
#[derive(Clone, Copy)]
enum Which {
    Output,
    Layer(usize, usize),
}

/// An activation buffer.
#[derive(Clone, Copy)]
enum Buf {
    X,
    Xn,
    Xr,
    QRaw,
    KRaw,
    VRaw,
    Attn,
    Proj,
    G,
    U,
    Logits,
}

fn launch(b: cudarc::driver::LaunchArgs<'_>, grid: (u32, u32, u32)) -> Result<()> {
    let mut b = b;
    let cfg = LaunchConfig {
        grid_dim: grid,
        block_dim: (64, 1, 1),
        shared_mem_bytes: 0,
    };
    // SAFETY: every kernel of kernels.cu bounds its indices by the sizes passed with it, and
    // each launch passes device buffers at least that large (allocated in `Cuda::new` from the
    // same hyperparameters: BATCH positions, `context` cache rows, whole weight rows).
    unsafe { b.launch(cfg) }.map(|_| ()).map_err(drv)
}

impl CMat<'_> {
    /// Bytes streamed at each use.
    fn streamed_bytes(&self) -> u64 {
        if self.stream.is_some() {
            ((self.rows - self.resident_rows) * self.row_bytes) as u64
        } else {
            0
        }
    }
}

/// `m` (stored bytes `bytes`) on the device: its first `split.0` bytes (all without a split),
/// whole rows, uploaded now; the rest streamed into the ring at `split.1` (`ring` bytes long)
/// before each use.
fn cmat<'m>(
    stream: &Arc<CudaStream>,
    bytes: Cow<'m, [u8]>,
    m: &Matrix<'_>,
    split: Option<(u64, Option<u64>)>,
    ring: Option<usize>,
) -> Result<CMat<'m>> {
    let kind = bind::kernel_kind(m, "cuda")?;
    let row_bytes = bytes.len() / m.rows.max(1);
    let (resident_rows, slot) = bind::resident_rows(m, bytes.len(), row_bytes, split)?;
    let slot = slot.map(|s| s as usize);
    if let Some(s) = slot
        && s + (resident_rows..m.rows).len() * row_bytes > ring.unwrap_or(0)
    {
        return Err(device_err(format!("the ring slot of {} leaves the ring", m.name)));
    }
    let resident = if resident_rows > 0 {
        Some(stream.clone_htod(&bytes[..resident_rows * row_bytes]).map_err(drv)?)
    } else {
        None
    };
    Ok(CMat {
        kind,
        rows: m.rows,
        cols: m.cols,
        row_bytes,
        resident,
        resident_rows,
        stream: slot.map(|s| (bytes, s)),
    })
}
