//! The CUDA executor (feature `cuda`): the plan runs on two CUDA streams.
//!
//! * **Copy stream**: every `copy_in` goes through [`CudaDevice::upload_staged`] (a pinned staging
//!   ring) into the device arena at the plan's offset, asynchronously; an event marks its end.
//! * **Compute stream**: each op first makes the stream wait for the copies issued before it
//!   (the interpreter issues a copy only once the plan's waits allow it), then reads its weights
//!   straight out of the arena — in place when the weight is one piece, else gathered into a
//!   scratch buffer with device-to-device copies — and runs cuBLAS SGEMM for the matmuls and
//!   small NVRTC-compiled kernels for the elementwise steps (the same arithmetic as
//!   [`cpu_op`](super::cpu_op), so the integer-valued model stays bit-exact).
//! * Freed slots are poisoned with NaN on the compute stream, after the op that freed them.
//!
//! The copy stream waits for the compute work issued before each copy, so a slot is never
//! overwritten while an issued op may still read it. cudarc's automatic per-buffer event tracking
//! is turned off for this context: it would serialise the two streams on the one arena buffer;
//! the events above are the synchronisation instead.
//!
//! Without an NVIDIA driver, cuBLAS or NVRTC, [`CudaBackend::new`] returns a clean error. Status:
//! this machine has no NVIDIA GPU, so the executor is built and its error paths tested in CI; it
//! has not been run on hardware here.

use std::sync::Arc;

use cudarc::cublas::sys::cublasOperation_t;
use cudarc::cublas::{CudaBlas, Gemm, GemmConfig};
use cudarc::driver::{CudaEvent, CudaFunction, CudaSlice, CudaStream, CudaView, LaunchConfig, PushKernelArg};

use super::buffers::{Activations, Place, alloc_scratch, places, prepared};
use super::{Backend, Dims, ExecOp, OpKind, TensorRef};
use crate::device::cuda::{CudaDevice, HostMem, Staging, guarded};
use crate::error::Error;
use crate::plan::{Plan, Region};

/// The elementwise steps of [`OpKind`], in CUDA C (compiled with NVRTC when the backend opens).
const KERNELS: &str = r#"
__device__ float wrapf(float v) { return v - 16.0f * floorf((v + 8.0f) / 16.0f); }
extern "C" __global__ void scale_rows(float* out, const float* x, const float* g, unsigned h, unsigned n) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = x[i] * g[i % h];
}
extern "C" __global__ void attn_mix(float* s, const float* q, const float* k, const float* v,
                                    unsigned h, unsigned kv, unsigned n) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) { unsigned j = (i / h) * kv + (i % h) % kv; s[i] = wrapf(q[i] + k[j] + v[j]); }
}
extern "C" __global__ void add_wrap(float* x, const float* y, unsigned n) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = wrapf(x[i] + y[i]);
}
extern "C" __global__ void mlp_mix(float* m, const float* g, const float* u, unsigned n) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) { float a = wrapf(g[i]); m[i] = wrapf((a > 0.0f ? a : 0.0f) * wrapf(u[i])); }
}
extern "C" __global__ void fill_nan(unsigned* p, unsigned n) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) p[i] = 0x7fc00000u;
}
"#;

struct Kernels {
    scale_rows: CudaFunction,
    attn_mix: CudaFunction,
    add_wrap: CudaFunction,
    mlp_mix: CudaFunction,
    fill_nan: CudaFunction,
}

/// The CUDA executor (see the module docs).
pub struct CudaBackend {
    dev: CudaDevice,
    copy: Arc<CudaStream>,
    compute: Arc<CudaStream>,
    blas: CudaBlas,
    kernels: Kernels,
    staging: Vec<Staging>,
    arena: Option<CudaSlice<u8>>,
    /// Two gather buffers of the largest weight that is not one aligned piece (bytes).
    scratch: Vec<CudaSlice<u8>>,
    acts: Option<Activations<CudaSlice<f32>>>,
    dims: Option<Dims>,
    tokens: Vec<u32>,
    last_copy: Option<CudaEvent>,
    last_compute: Option<CudaEvent>,
}

/// Runs `f` (driver calls) with panics caught ([`guarded`]).
fn cuda<T>(f: impl FnOnce() -> Result<T, Error>) -> Result<T, Error> {
    guarded(f)
}

/// A cuBLAS or NVRTC error as a device error.
fn drv(e: impl std::fmt::Debug) -> Error {
    Error::Device(format!("CUDA library call: {e:?}"))
}

fn launch_cfg(n: usize) -> LaunchConfig {
    LaunchConfig::for_num_elems(n as u32)
}

impl CudaBackend {
    /// Opens device 0, a copy and a compute stream, cuBLAS on the compute stream and the
    /// elementwise kernels (NVRTC). `Err(Error::Device(..))` when any of them is missing.
    pub fn new() -> Result<CudaBackend, Error> {
        let dev = CudaDevice::new(0)?;
        // SAFETY: from here on this backend synchronises its streams with explicit events (see
        // the module docs): the arena and activations are allocated and zeroed before any use,
        // written by one stream at a time under those events, and freed only after both streams
        // are synchronised (`Drop`).
        unsafe { dev.context().disable_event_tracking() };
        let copy = dev.new_stream()?;
        let compute = dev.new_stream()?;
        let blas = cuda(|| CudaBlas::new(compute.clone()).map_err(drv))?;
        let kernels = cuda(|| {
            let ptx = cudarc::nvrtc::compile_ptx(KERNELS).map_err(drv)?;
            let module = dev.context().load_module(ptx)?;
            Ok(Kernels {
                scale_rows: module.load_function("scale_rows")?,
                attn_mix: module.load_function("attn_mix")?,
                add_wrap: module.load_function("add_wrap")?,
                mlp_mix: module.load_function("mlp_mix")?,
                fill_nan: module.load_function("fill_nan")?,
            })
        })?;
        let staging = (0..2)
            .map(|_| dev.alloc_staging(4 << 20, HostMem::Pinned))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(CudaBackend {
            dev,
            copy,
            compute,
            blas,
            kernels,
            staging,
            arena: None,
            scratch: Vec::new(),
            acts: None,
            dims: None,
            tokens: Vec::new(),
            last_copy: None,
            last_compute: None,
        })
    }

    /// `y (t × n) = x (t × k) · w (k × n)`, all row-major, on the compute stream. cuBLAS is
    /// column-major: the same bytes are `yᵀ = wᵀ · xᵀ`, an (n × k)·(k × t) product.
    fn matmul(
        blas: &CudaBlas,
        x: &CudaView<'_, f32>,
        w: &CudaView<'_, f32>,
        y: &mut CudaSlice<f32>,
        (t, k, n): (usize, usize, usize),
    ) -> Result<(), Error> {
        if x.len() < t * k || w.len() < k * n || y.len() < t * n {
            return Err(Error::Device(format!("matmul {t}x{k}x{n}: operand too small")));
        }
        let cfg = GemmConfig {
            transa: cublasOperation_t::CUBLAS_OP_N,
            transb: cublasOperation_t::CUBLAS_OP_N,
            m: n as i32,
            n: t as i32,
            k: k as i32,
            alpha: 1.0f32,
            lda: n as i32,
            ldb: k as i32,
            beta: 0.0f32,
            ldc: n as i32,
        };
        // SAFETY: the sizes were checked against every operand above; lda/ldb/ldc are the
        // row lengths of the row-major operands, so cuBLAS reads and writes within them.
        cuda(|| unsafe { blas.gemm(cfg, w, x, y) }.map_err(drv))
    }
}

impl Backend for CudaBackend {
    fn name(&self) -> String {
        format!("cuda ({})", self.dev.name().unwrap_or_default())
    }

    fn prepare(&mut self, plan: &Plan, d: Dims, tokens: &[u32]) -> Result<(), Error> {
        let n = usize::try_from(plan.arena_bytes).map_err(|_| Error::Device("arena too large".into()))?;
        let s = &self.compute;
        self.arena = Some(self.dev.alloc_device(s, n.max(4))?);
        // Weights in one 4-byte-aligned piece are read in place; scratch holds the others.
        self.scratch = alloc_scratch(plan, 4, |bytes| self.dev.alloc_device(s, bytes as usize))?;
        self.acts = Some(Activations::alloc(d, |n| cuda(|| Ok(s.alloc_zeros::<f32>(n)?)))?);
        cuda(|| Ok(s.synchronize()?))?;
        self.dims = Some(d);
        self.tokens = tokens.to_vec();
        self.last_copy = None;
        self.last_compute = None;
        Ok(())
    }

    fn copy_in(&mut self, dev_offset: u64, bytes: &[u8]) -> Result<(), Error> {
        let arena = prepared(self.arena.as_mut())?;
        if let Some(e) = &self.last_compute {
            cuda(|| Ok(self.copy.wait(e)?))?;
        }
        let at = usize::try_from(dev_offset).map_err(|_| Error::Device("offset too large".into()))?;
        let t = self
            .dev
            .upload_staged(&self.copy, bytes, arena, at, &mut self.staging)?;
        self.last_copy = Some(cuda(|| Ok(self.copy.record_event(None)?))?);
        drop(t);
        Ok(())
    }

    fn poison(&mut self, region: Region) -> Result<(), Error> {
        let base = region.base.div_ceil(4) as usize * 4;
        let words = (region.end() as usize).saturating_sub(base) / 4;
        if words == 0 {
            return Ok(());
        }
        let arena = prepared(self.arena.as_mut())?;
        let mut view = arena
            .try_slice_mut(base..base + words * 4)
            .ok_or_else(|| Error::Device("poisoned region past the arena".into()))?;
        // SAFETY: any 4 bytes are a valid u32; the view is exactly `words` words long.
        let mut words_view = unsafe { view.transmute_mut::<u32>(words) }
            .ok_or_else(|| Error::Device("poisoned region too short".into()))?;
        let n = words as u32;
        let mut b = self.compute.launch_builder(&self.kernels.fill_nan);
        b.arg(&mut words_view).arg(&n);
        // SAFETY: fill_nan writes `n` words of a view that long.
        cuda(|| unsafe { b.launch(launch_cfg(words)) }.map(|_| ()).map_err(Error::from))?;
        self.last_compute = Some(cuda(|| Ok(self.compute.record_event(None)?))?);
        Ok(())
    }

    fn exec(&mut self, op: &ExecOp<'_>) -> Result<(), Error> {
        let d = prepared(self.dims)?;
        if let Some(e) = &self.last_copy {
            cuda(|| Ok(self.compute.wait(e)?))?;
        }
        let arena = prepared(self.arena.as_ref())?;
        // Gather split weights into scratch (device to device); single pieces are used in place.
        let places: Vec<Place<'_>> = places(op, |s| s.dev_offset % 4 == 0)?
            .into_iter()
            .filter(|p| !matches!(p, Place::Host(_)))
            .collect();
        for place in &places {
            if let Place::Scratch { slot, segments, .. } = *place {
                let dst = &mut self.scratch[slot];
                for s in segments {
                    let (src_end, dst_end) = (s.dev_offset + s.bytes, s.tensor_offset + s.bytes);
                    let src = arena
                        .try_slice(s.dev_offset as usize..src_end as usize)
                        .ok_or_else(|| Error::Device("piece past the arena".into()))?;
                    let mut to = dst
                        .try_slice_mut(s.tensor_offset as usize..dst_end as usize)
                        .ok_or_else(|| Error::Device("piece outside its tensor".into()))?;
                    cuda(|| Ok(self.compute.memcpy_dtod(&src, &mut to)?))?;
                }
            }
        }
        let scratch = &self.scratch;
        let weight = |i: usize| -> Result<CudaView<'_, f32>, Error> {
            let (view, bytes) = match places.get(i) {
                Some(&Place::Arena { offset, bytes }) => {
                    (arena.try_slice(offset as usize..(offset + bytes) as usize), bytes)
                }
                Some(&Place::Scratch { slot, bytes, .. }) => (scratch[slot].try_slice(0..bytes as usize), bytes),
                _ => return Err(Error::Device(format!("{:?}: missing weight", op.kind))),
            };
            let view = view.ok_or_else(|| Error::Device("weight past its buffer".into()))?;
            // SAFETY: weights are f32 (the model is f32); the view starts 4-byte aligned (arena
            // offsets are checked above, scratch starts at 0) and holds bytes / 4 floats.
            unsafe { view.transmute::<f32>(bytes as usize / 4) }
                .ok_or_else(|| Error::Device("weight view too short".into()))
        };
        let acts = prepared(self.acts.as_mut())?;
        let blas = &self.blas;
        let k = &self.kernels;
        let (t, h, kv, ffn, vocab) = (d.t, d.h, d.kv, d.ffn, d.vocab);
        let (hu, kvu) = (h as u32, kv as u32);
        // Split borrows so kernels can read some activations while writing others.
        let Activations {
            x,
            a,
            q,
            k: kk,
            v,
            s,
            b,
            g,
            u,
            m,
            y,
            logits,
        } = acts;
        let compute = &self.compute;
        // Launches a KERNELS function over `n` elements with the given arguments, then `n`.
        macro_rules! launch {
            ($f:expr, $n:expr; $($arg:expr),*) => {{
                let n: usize = $n;
                let n32 = n as u32;
                let mut lb = compute.launch_builder($f);
                $( lb.arg($arg); )*
                lb.arg(&n32);
                // SAFETY: every kernel checks `i < n`; each call passes buffers of at least `n`
                // elements (attn_mix's k and v hold `t × kv`, indexed below that bound).
                cuda(|| unsafe { lb.launch(launch_cfg(n)) }.map(|_| ()).map_err(Error::from))
            }};
        }
        match op.kind {
            OpKind::Embed => {
                let Some(TensorRef::Host(table)) = op.weights.first() else {
                    return Err(Error::Device("embed without its host table".into()));
                };
                let mut rows = vec![0.0f32; t * h];
                for (r, &tok) in self.tokens.iter().enumerate().take(t) {
                    let tok = (tok as usize).min(vocab - 1);
                    let src = table
                        .get(tok * h * 4..(tok + 1) * h * 4)
                        .ok_or_else(|| Error::Device("embedding table too short".into()))?;
                    for (o, c) in rows[r * h..(r + 1) * h].iter_mut().zip(src.chunks_exact(4)) {
                        *o = f32::from_le_bytes([c[0], c[1], c[2], c[3]]);
                    }
                }
                cuda(|| Ok(self.compute.memcpy_htod(&rows, x)?))?;
            }
            OpKind::QProj => {
                let (n1, wq) = (weight(0)?, weight(1)?);
                launch!(&k.scale_rows, t * h; &mut *a, &*x, &n1, &hu)?;
                Self::matmul(blas, &a.as_view(), &wq, q, (t, h, h))?;
            }
            OpKind::KProj => Self::matmul(blas, &a.as_view(), &weight(0)?, kk, (t, h, kv))?,
            OpKind::VProj => Self::matmul(blas, &a.as_view(), &weight(0)?, v, (t, h, kv))?,
            OpKind::Attn => {
                launch!(&k.attn_mix, t * h; &mut *s, &*q, &*kk, &*v, &hu, &kvu)?;
            }
            OpKind::OProj => {
                Self::matmul(blas, &s.as_view(), &weight(0)?, y, (t, h, h))?;
                launch!(&k.add_wrap, t * h; &mut *x, &*y)?;
            }
            OpKind::Gate => {
                let (n2, wg) = (weight(0)?, weight(1)?);
                launch!(&k.scale_rows, t * h; &mut *b, &*x, &n2, &hu)?;
                Self::matmul(blas, &b.as_view(), &wg, g, (t, h, ffn))?;
            }
            OpKind::Up => Self::matmul(blas, &b.as_view(), &weight(0)?, u, (t, h, ffn))?,
            OpKind::Down => {
                launch!(&k.mlp_mix, t * ffn; &mut *m, &*g, &*u)?;
                Self::matmul(blas, &m.as_view(), &weight(0)?, y, (t, ffn, h))?;
                launch!(&k.add_wrap, t * h; &mut *x, &*y)?;
            }
            OpKind::LmHead => {
                let (nf, wlm) = (weight(0)?, weight(1)?);
                launch!(&k.scale_rows, t * h; &mut *a, &*x, &nf, &hu)?;
                Self::matmul(blas, &a.as_view(), &wlm, logits, (t, h, vocab))?;
            }
        }
        self.last_compute = Some(cuda(|| Ok(self.compute.record_event(None)?))?);
        Ok(())
    }

    fn finish_forward(&mut self) -> Result<Vec<f32>, Error> {
        let acts = prepared(self.acts.as_ref())?;
        let mut out = vec![0.0f32; acts.logits.len()];
        cuda(|| {
            self.compute.memcpy_dtoh(&acts.logits, &mut out)?;
            self.compute.synchronize()?;
            Ok(())
        })?;
        Ok(out)
    }
}

impl Drop for CudaBackend {
    fn drop(&mut self) {
        // Event tracking is off: make sure no stream still uses a buffer about to be freed.
        let _ = guarded(|| {
            self.copy.synchronize()?;
            self.compute.synchronize()?;
            Ok(())
        });
    }
}
