//! Executors that run a [`Plan`] for real (offload.md §3.5 "one plan, three executors", §4.4–4.5).
//!
//! [`execute`] is a faithful interpreter of a plan: it walks every stream's program forward by
//! forward, honouring each `Wait { event, lag }` against the `Record`s seen so far, copies every
//! chunk into the arena exactly at its planned `dev_offset` (and every resident part at its
//! planned offset, once, before the first forward), and runs every `Exec` reading each weight
//! from the arena regions the plan assigned (resident prefix and ring slot(s)). Among the streams
//! that can run, copy streams always go first: copies run as far ahead as the plan's waits allow,
//! so a missing `SlotFree` wait or an overlapping slot overwrites bytes still needed and changes
//! the output (or, with poisoning, turns it into NaN).
//!
//! A [`Backend`] supplies the device: [`CpuBackend`] (a host `Vec<u8>` arena, ops computed in
//! plain Rust; always built), `wgpu::WgpuBackend` (feature `wgpu`; one GPU buffer per region,
//! WGSL kernels) and `cuda::CudaBackend` (feature `cuda`; a device arena, staged uploads, cuBLAS).
//! The device executors share [`buffers`]: their activations, gather scratch, and where each
//! weight of an op is read from.
//!
//! The model that runs is [`ExecModel`]: a Llama-shaped [`Workload`] with deterministic weights from
//! a seed. Its math (see [`OpKind`]) uses **integer-valued** f32 weights and activations with every
//! intermediate below 2^24 in magnitude, so every f32 sum is exact whatever the accumulation order
//! or tiling: each executor's output equals the all-resident reference ([`ExecModel::reference`])
//! bit for bit, and any difference means wrong bytes were read.

use std::time::Instant;

use crate::error::Error;
use crate::plan::{EventKind, Home, Instr, Plan, Region, StreamKind};
use crate::workload::{Access, LlamaShape, Phase, Workload};

pub mod buffers;

#[cfg(feature = "wgpu")]
pub mod wgpu;

#[cfg(feature = "cuda")]
pub mod cuda;

fn bad_plan(m: impl Into<String>) -> Error {
    Error::InvalidPlan(m.into())
}

/// What an op computes. Activations per token: `x` (hidden state, `h`), `a` (normed input),
/// `q` (`h`), `k`, `v` (`kv`), `s` (`h`), `b` (normed, `h`), `g`, `u` (`ffn`), `logits` (`vocab`).
/// Weights are stored `[in, out]` row-major, so `y = x · W` is a `(T × in) · (in × out)` matmul.
/// `wrap(v) = v − 16·⌊(v + 8) / 16⌋` folds an integer into `[−8, 8)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpKind {
    /// `x[t] = E[token_t]` (gathered from host memory).
    Embed,
    /// `a = n1 ⊙ x; q = a · Wq`.
    QProj,
    /// `k = a · Wk`.
    KProj,
    /// `v = a · Wv`.
    VProj,
    /// `s[i] = wrap(q[i] + k[i mod kv] + v[i mod kv])` (a weightless mixing step).
    Attn,
    /// `x = wrap(x + s · Wo)`.
    OProj,
    /// `b = n2 ⊙ x; g = b · Wg`.
    Gate,
    /// `u = b · Wu`.
    Up,
    /// `m = wrap(max(wrap(g), 0) · wrap(u)); x = wrap(x + m · Wd)`.
    Down,
    /// `logits = (nf ⊙ x) · Wlm`.
    LmHead,
}

impl OpKind {
    /// The kind of an op of [`LlamaShape::build`] by its name.
    pub fn of(name: &str) -> Option<OpKind> {
        let last = name.rsplit('.').next().unwrap_or(name);
        Some(match last {
            "embed" => OpKind::Embed,
            "q_proj" => OpKind::QProj,
            "k_proj" => OpKind::KProj,
            "v_proj" => OpKind::VProj,
            "attn" => OpKind::Attn,
            "o_proj" => OpKind::OProj,
            "gate_proj" => OpKind::Gate,
            "up_proj" => OpKind::Up,
            "down_proj" => OpKind::Down,
            "lm_head" => OpKind::LmHead,
            _ => return None,
        })
    }
}

/// Activation sizes of an [`ExecModel`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Dims {
    /// Tokens per forward (rows of every activation).
    pub t: usize,
    /// Hidden size.
    pub h: usize,
    /// Key/value width.
    pub kv: usize,
    /// MLP width.
    pub ffn: usize,
    /// Vocabulary.
    pub vocab: usize,
}

/// A Llama-shaped model with real deterministic f32 weights (integer-valued, see the module docs).
#[derive(Clone, Debug)]
pub struct ExecModel {
    /// The op/tensor list (what plans are compiled from).
    pub workload: Workload,
    /// Activation sizes.
    pub dims: Dims,
    /// Input token ids (one per row).
    pub tokens: Vec<u32>,
    /// Each tensor's bytes (f32 little-endian), indexed like [`Workload::tensors`].
    pub weights: Vec<Vec<u8>>,
    /// Each op's kind, indexed like [`Workload::ops`].
    pub kinds: Vec<OpKind>,
}

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        // xorshift64*
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn int(&mut self, lo: i64, n: u64) -> f32 {
        (lo + (self.next() >> 33).rem_euclid(n.max(1)) as i64) as f32
    }
}

/// Largest number of elements of a synthetic model (keeps host memory bounded): 2^28.
pub const MAX_ELEMS: u64 = 1 << 28;

impl ExecModel {
    /// The `tiny` preset (8 layers, hidden 256, ffn 688, vocab 1024, f32), one decode token,
    /// weights from `seed`.
    pub fn tiny(seed: u64) -> Result<ExecModel, Error> {
        Self::synthetic("tiny", &LlamaShape::tiny(), Phase::DECODE, seed)
    }

    /// A model of `shape` with weights from `seed`: matrices in {−2..2}, norm weights ±1, the
    /// embedding in [−8, 8). Needs f32 (`dtype_bytes == 4`), `kv ≤ hidden` and at most
    /// [`MAX_ELEMS`] weight elements; `T` = the phase's tokens (at most 4096).
    pub fn synthetic(name: &str, shape: &LlamaShape, phase: Phase, seed: u64) -> Result<ExecModel, Error> {
        let workload = shape.build(name, phase);
        let inv = |m: &str| Error::InvalidWorkload(m.to_string());
        if shape.dtype_bytes != 4 {
            return Err(inv("executors run f32 models (dtype_bytes = 4)"));
        }
        let h = shape.hidden as usize;
        let kv = if shape.heads == 0 {
            h
        } else {
            (shape.hidden / shape.heads.max(1) * shape.kv_heads) as usize
        };
        let dims = Dims {
            t: workload.tokens as usize,
            h,
            kv,
            ffn: shape.intermediate as usize,
            vocab: shape.vocab as usize,
        };
        if h == 0 || kv == 0 || kv > h || dims.ffn == 0 || dims.vocab == 0 || dims.t == 0 || dims.t > 4096 {
            return Err(inv("shape: need 0 < kv <= hidden, ffn, vocab > 0, 1..=4096 tokens"));
        }
        let elems: u64 = workload.tensors.iter().map(|t| t.bytes / 4).sum();
        if elems > MAX_ELEMS {
            return Err(inv(&format!(
                "{elems} weight elements; executors take at most {MAX_ELEMS}"
            )));
        }
        let mut rng = Rng(seed ^ 0x9E37_79B9_7F4A_7C15 | 1);
        let weights = workload
            .tensors
            .iter()
            .map(|t| {
                let n = (t.bytes / 4) as usize;
                let norm = t.name.contains("norm");
                let embed = t.access == Access::Gather;
                let mut out = Vec::with_capacity(n * 4);
                for _ in 0..n {
                    let v = if embed {
                        rng.int(-8, 16)
                    } else if norm {
                        if rng.next() >> 63 == 0 { 1.0 } else { -1.0 }
                    } else {
                        rng.int(-2, 5)
                    };
                    out.extend_from_slice(&v.to_le_bytes());
                }
                out
            })
            .collect();
        let kinds = workload
            .ops
            .iter()
            .map(|o| OpKind::of(&o.name).ok_or_else(|| inv(&format!("op {}: unknown kind", o.name))))
            .collect::<Result<Vec<_>, _>>()?;
        let tokens = (0..dims.t).map(|_| (rng.next() % dims.vocab as u64) as u32).collect();
        Ok(ExecModel {
            workload,
            dims,
            tokens,
            weights,
            kinds,
        })
    }

    /// Total bytes of the dense (device) weights.
    pub fn dense_bytes(&self) -> u64 {
        self.workload
            .tensors
            .iter()
            .filter(|t| t.access == Access::Dense)
            .map(|t| t.bytes)
            .sum()
    }

    /// The all-resident reference forward in plain Rust: the logits (`T × vocab`).
    pub fn reference(&self) -> Vec<f32> {
        let mut acts = Acts::new(self.dims);
        for (i, op) in self.workload.ops.iter().enumerate() {
            let ws: Vec<Vec<f32>> = op.reads.iter().map(|&t| to_f32(&self.weights[t])).collect();
            let refs: Vec<&[f32]> = ws.iter().map(|w| w.as_slice()).collect();
            // The weights come straight from the model, so shapes always match.
            let _ = cpu_op(self.kinds[i], self.dims, &self.tokens, &mut acts, &refs);
        }
        acts.logits
    }
}

/// f32 values from little-endian bytes (a trailing partial element is dropped).
pub fn to_f32(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// `v − 16·⌊(v + 8) / 16⌋`: folds an integer-valued f32 into `[−8, 8)` exactly.
pub fn wrap(v: f32) -> f32 {
    v - 16.0 * ((v + 8.0) / 16.0).floor()
}

/// The activations of one forward on the host.
#[derive(Clone, Debug)]
pub struct Acts {
    /// Hidden state.
    pub x: Vec<f32>,
    a: Vec<f32>,
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
    s: Vec<f32>,
    b: Vec<f32>,
    g: Vec<f32>,
    u: Vec<f32>,
    /// Output.
    pub logits: Vec<f32>,
}

impl Acts {
    /// Zeroed activations.
    pub fn new(d: Dims) -> Acts {
        let z = |n: usize| vec![0.0f32; d.t * n];
        Acts {
            x: z(d.h),
            a: z(d.h),
            q: z(d.h),
            k: z(d.kv),
            v: z(d.kv),
            s: z(d.h),
            b: z(d.h),
            g: z(d.ffn),
            u: z(d.ffn),
            logits: z(d.vocab),
        }
    }
}

/// `(T × k) · (k × n)` in plain Rust (in-order accumulation; exact for the integer model).
fn matmul(x: &[f32], w: &[f32], t: usize, k: usize, n: usize) -> Vec<f32> {
    let mut y = vec![0.0f32; t * n];
    for r in 0..t {
        for i in 0..k {
            let xv = x[r * k + i];
            if xv == 0.0 {
                continue;
            }
            let row = &w[i * n..(i + 1) * n];
            for (o, wv) in y[r * n..(r + 1) * n].iter_mut().zip(row) {
                *o += xv * wv;
            }
        }
    }
    y
}

fn scale(x: &[f32], g: &[f32], h: usize) -> Vec<f32> {
    x.iter().enumerate().map(|(i, v)| v * g[i % h]).collect()
}

/// Runs one op on host activations with the given weights (in the op's read order).
pub fn cpu_op(kind: OpKind, d: Dims, tokens: &[u32], a: &mut Acts, w: &[&[f32]]) -> Result<(), Error> {
    let need = |n: usize, sizes: &[usize]| -> Result<(), Error> {
        if w.len() != n || w.iter().zip(sizes).any(|(w, &s)| w.len() != s) {
            return Err(bad_plan(format!("{kind:?}: weights do not match the model's shapes")));
        }
        Ok(())
    };
    let (t, h, kv, ffn, vocab) = (d.t, d.h, d.kv, d.ffn, d.vocab);
    match kind {
        OpKind::Embed => {
            need(1, &[vocab * h])?;
            for (r, &tok) in tokens.iter().enumerate().take(t) {
                let tok = (tok as usize).min(vocab - 1);
                a.x[r * h..(r + 1) * h].copy_from_slice(&w[0][tok * h..(tok + 1) * h]);
            }
        }
        OpKind::QProj => {
            need(2, &[h, h * h])?;
            a.a = scale(&a.x, w[0], h);
            a.q = matmul(&a.a, w[1], t, h, h);
        }
        OpKind::KProj => {
            need(1, &[h * kv])?;
            a.k = matmul(&a.a, w[0], t, h, kv);
        }
        OpKind::VProj => {
            need(1, &[h * kv])?;
            a.v = matmul(&a.a, w[0], t, h, kv);
        }
        OpKind::Attn => {
            need(0, &[])?;
            for i in 0..t * h {
                let j = (i / h) * kv + (i % h) % kv;
                a.s[i] = wrap(a.q[i] + a.k[j] + a.v[j]);
            }
        }
        OpKind::OProj => {
            need(1, &[h * h])?;
            let y = matmul(&a.s, w[0], t, h, h);
            for (x, y) in a.x.iter_mut().zip(y) {
                *x = wrap(*x + y);
            }
        }
        OpKind::Gate => {
            need(2, &[h, h * ffn])?;
            a.b = scale(&a.x, w[0], h);
            a.g = matmul(&a.b, w[1], t, h, ffn);
        }
        OpKind::Up => {
            need(1, &[h * ffn])?;
            a.u = matmul(&a.b, w[0], t, h, ffn);
        }
        OpKind::Down => {
            need(1, &[ffn * h])?;
            let m: Vec<f32> =
                a.g.iter()
                    .zip(&a.u)
                    .map(|(g, u)| wrap(wrap(*g).max(0.0) * wrap(*u)))
                    .collect();
            let y = matmul(&m, w[0], t, ffn, h);
            for (x, y) in a.x.iter_mut().zip(y) {
                *x = wrap(*x + y);
            }
        }
        OpKind::LmHead => {
            need(2, &[h, h * vocab])?;
            let n = scale(&a.x, w[0], h);
            a.logits = matmul(&n, w[1], t, h, vocab);
        }
    }
    Ok(())
}

/// One contiguous piece of a tensor in the arena.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Segment {
    /// Arena offset of the piece.
    pub dev_offset: u64,
    /// Offset of the piece inside the tensor.
    pub tensor_offset: u64,
    /// Bytes.
    pub bytes: u64,
}

/// Where an op finds one of its weights.
#[derive(Clone, Debug, PartialEq)]
pub enum TensorRef<'a> {
    /// A gathered tensor, read from host memory (the embedding).
    Host(&'a [u8]),
    /// A dense tensor of `bytes` bytes, in the arena as these pieces (resident prefix, slots).
    Arena {
        /// Tensor size.
        bytes: u64,
        /// Its pieces, covering `[0, bytes)` exactly once.
        segments: Vec<Segment>,
    },
}

/// An op to execute: its kind and where each weight it reads lives.
#[derive(Clone, Debug)]
pub struct ExecOp<'a> {
    /// Index into [`Plan::ops`].
    pub index: usize,
    /// What it computes.
    pub kind: OpKind,
    /// Its weights in the op's read order.
    pub weights: Vec<TensorRef<'a>>,
}

/// A device the interpreter drives.
pub trait Backend {
    /// A short name (`cpu`, `wgpu (llvmpipe ...)`, `cuda`).
    fn name(&self) -> String;
    /// Allocates the arena (`plan.arena_bytes`, per region where needed) and the activations.
    fn prepare(&mut self, plan: &Plan, dims: Dims, tokens: &[u32]) -> Result<(), Error>;
    /// Host-to-device copy of `bytes` into the arena at `dev_offset`.
    fn copy_in(&mut self, dev_offset: u64, bytes: &[u8]) -> Result<(), Error>;
    /// Overwrites a freed region with a sentinel (NaN) so reads after eviction show (§4.5).
    /// Backends without poisoning ignore it.
    fn poison(&mut self, _region: Region) -> Result<(), Error> {
        Ok(())
    }
    /// Runs one op, reading its weights from the arena.
    fn exec(&mut self, op: &ExecOp<'_>) -> Result<(), Error>;
    /// Waits for the forward to finish and returns its logits (`T × vocab`).
    fn finish_forward(&mut self) -> Result<Vec<f32>, Error>;
}

/// Bytes of the largest dense weight a device executor must gather into scratch before an op
/// can read it: one split into several arena pieces (a resident prefix and a streamed rest), or
/// whose one piece does not start on an `align`-byte boundary. Others are read in place. At
/// least 4, so a scratch buffer can always be allocated.
pub fn largest_gathered_weight(plan: &Plan, align: u64) -> u64 {
    let mut offsets: Vec<Vec<u64>> = vec![Vec::new(); plan.tensors.len()];
    let pieces = plan.resident.iter().map(|r| (r.tensor, r.offset));
    for (t, off) in pieces.chain(plan.chunks.iter().map(|c| (c.tensor, c.dev_offset))) {
        if let Some(v) = offsets.get_mut(t as usize) {
            v.push(off);
        }
    }
    plan.tensors
        .iter()
        .zip(&offsets)
        .filter(|(t, o)| t.access == Access::Dense && (o.len() > 1 || o.iter().any(|x| !x.is_multiple_of(align))))
        .map(|(t, _)| t.bytes)
        .max()
        .unwrap_or(0)
        .max(4)
}

/// Knobs for [`execute`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ExecOptions {
    /// Forwards to run (at least 1).
    pub forwards: usize,
    /// Poison each slot with NaN when its `SlotFree` event is recorded.
    pub poison: bool,
    /// Which runnable stream goes first: copy streams (copies run as far ahead as the waits
    /// allow: exposes missing `SlotFree` waits) or compute (copies as late as allowed: exposes
    /// missing `Loaded` waits).
    pub copies_first: bool,
}

impl Default for ExecOptions {
    fn default() -> Self {
        ExecOptions {
            forwards: 2,
            poison: true,
            copies_first: true,
        }
    }
}

/// What a run did.
#[derive(Clone, Debug, PartialEq)]
pub struct ExecReport {
    /// The backend.
    pub backend: String,
    /// Logits of every forward.
    pub outputs: Vec<Vec<f32>>,
    /// Host-to-device weight bytes copied for each forward (counted at each `Copy`).
    pub h2d_bytes: Vec<u64>,
    /// Copies per forward.
    pub copies: Vec<u64>,
    /// Resident bytes loaded once before the first forward.
    pub resident_load_bytes: u64,
    /// Bytes read into host staging (disk chunks) per forward.
    pub disk_bytes: Vec<u64>,
    /// Wall time of each forward, seconds (forward 0 includes its copies; a later forward's
    /// copies that ran ahead are counted in the forward that ran them).
    pub forward_s: Vec<f64>,
    /// Time to load the resident set, seconds.
    pub load_s: f64,
}

impl ExecReport {
    /// Median forward time over forwards after the first (the first when there is only one).
    pub fn steady_forward_s(&self) -> f64 {
        let mut v: Vec<f64> = if self.forward_s.len() > 1 {
            self.forward_s[1..].to_vec()
        } else {
            self.forward_s.clone()
        };
        v.sort_by(|a, b| a.total_cmp(b));
        v.get(v.len() / 2).copied().unwrap_or(0.0)
    }
}

/// Where each weight tensor of each op lives, checked against the model.
fn op_refs<'a>(plan: &Plan, m: &'a ExecModel) -> Result<Vec<ExecOp<'a>>, Error> {
    if plan.ops.len() != m.workload.ops.len() || plan.tensors.len() != m.workload.tensors.len() {
        return Err(bad_plan("the plan was not compiled from this model"));
    }
    let mut out = Vec::with_capacity(plan.ops.len());
    for (i, (pop, mop)) in plan.ops.iter().zip(&m.workload.ops).enumerate() {
        let mut weights = Vec::new();
        for &t in &mop.reads {
            let info = m
                .workload
                .tensors
                .get(t)
                .ok_or_else(|| bad_plan(format!("op {i}: tensor {t} out of range")))?;
            if info.access == Access::Gather {
                weights.push(TensorRef::Host(&m.weights[t]));
                continue;
            }
            let mut segments = Vec::new();
            for &r in &pop.resident {
                let r = plan
                    .resident
                    .get(r as usize)
                    .ok_or_else(|| bad_plan(format!("op {i}: resident {r} out of range")))?;
                if r.tensor as usize == t {
                    segments.push(Segment {
                        dev_offset: r.offset,
                        tensor_offset: 0,
                        bytes: r.bytes,
                    });
                }
            }
            for &c in &pop.chunks {
                let c = plan
                    .chunks
                    .get(c as usize)
                    .ok_or_else(|| bad_plan(format!("op {i}: chunk {c} out of range")))?;
                if c.tensor as usize == t {
                    segments.push(Segment {
                        dev_offset: c.dev_offset,
                        tensor_offset: c.tensor_offset,
                        bytes: c.bytes,
                    });
                }
            }
            segments.sort_by_key(|s| s.tensor_offset);
            let mut at = 0u64;
            for s in &segments {
                if s.tensor_offset != at || s.dev_offset.saturating_add(s.bytes) > plan.arena_bytes {
                    return Err(bad_plan(format!(
                        "op {} ({}): tensor {} pieces do not tile it or leave the arena",
                        i, pop.name, info.name
                    )));
                }
                at = at.saturating_add(s.bytes);
            }
            if at != info.bytes {
                return Err(bad_plan(format!(
                    "op {} ({}): tensor {} covered {at} of {} bytes",
                    i, pop.name, info.name, info.bytes
                )));
            }
            weights.push(TensorRef::Arena {
                bytes: info.bytes,
                segments,
            });
        }
        out.push(ExecOp {
            index: i,
            kind: m.kinds[i],
            weights,
        });
    }
    Ok(out)
}

/// Runs `plan` for `opts.forwards` forwards on `backend` (see the module docs).
pub fn execute<B: Backend + ?Sized>(
    plan: &Plan,
    m: &ExecModel,
    backend: &mut B,
    opts: ExecOptions,
) -> Result<ExecReport, Error> {
    let forwards = opts.forwards.max(1);
    let ops = op_refs(plan, m)?;
    let n_ev = plan.events.len();
    for s in &plan.streams {
        for ins in &s.program {
            let ok = match *ins {
                Instr::Wait { event, .. } | Instr::Record { event } => (event as usize) < n_ev,
                Instr::Read { chunk } | Instr::Copy { chunk } => (chunk as usize) < plan.chunks.len(),
                Instr::Exec { op } => (op as usize) < plan.ops.len(),
            };
            if !ok {
                return Err(bad_plan("an instruction's index is out of range"));
            }
        }
    }
    let computes = plan.streams.iter().filter(|s| s.kind == StreamKind::Compute).count();
    if computes != 1 {
        return Err(bad_plan(format!(
            "{computes} compute streams; the executors run exactly one"
        )));
    }
    if plan.arena_bytes > (1u64 << 40) || plan.host_staging.len > (1u64 << 40) {
        return Err(bad_plan("arena or host staging larger than 1 TiB"));
    }
    for c in &plan.chunks {
        let w = m.weights.get(c.tensor as usize).map(|w| w.len() as u64).unwrap_or(0);
        if c.tensor_offset.checked_add(c.bytes).is_none_or(|e| e > w) {
            return Err(bad_plan(format!("chunk of tensor {} past its end", c.tensor)));
        }
        if c.dev_offset.checked_add(c.bytes).is_none_or(|e| e > plan.arena_bytes) {
            return Err(bad_plan(format!("chunk of tensor {} past the arena", c.tensor)));
        }
        if c.home.is_staged() {
            let h = c
                .host_offset
                .ok_or_else(|| bad_plan("staged chunk without a host slot"))?;
            if h.checked_add(c.bytes).is_none_or(|e| e > plan.host_staging.end()) || h < plan.host_staging.base {
                return Err(bad_plan("staged chunk's host slot outside host staging"));
            }
        }
    }
    backend.prepare(plan, m.dims, &m.tokens)?;
    // Resident set, once.
    let t0 = Instant::now();
    let mut resident_load_bytes = 0;
    for r in &plan.resident {
        let w = m
            .weights
            .get(r.tensor as usize)
            .ok_or_else(|| bad_plan("resident tensor out of range"))?;
        let end = r.offset.checked_add(r.bytes);
        if r.bytes > w.len() as u64 || end.is_none_or(|e| e > plan.arena_bytes) {
            return Err(bad_plan(format!("resident part of tensor {} out of range", r.tensor)));
        }
        backend.copy_in(r.offset, &w[..r.bytes as usize])?;
        resident_load_bytes += r.bytes;
    }
    let load_s = t0.elapsed().as_secs_f64();

    let mut staging = vec![0u8; plan.host_staging.len as usize];
    // recorded[e] = number of forwards whose instance of event e is recorded.
    let mut recorded = vec![0usize; n_ev];
    let ns = plan.streams.len();
    let mut pc = vec![0usize; ns];
    let mut fwd = vec![0usize; ns];
    // Copy streams first: they run as far ahead as the plan allows.
    let mut order: Vec<usize> = (0..ns).collect();
    order.sort_by_key(|&s| match (plan.streams[s].kind, opts.copies_first) {
        (StreamKind::Io | StreamKind::Memcpy, _) => 0,
        (StreamKind::H2d, true) | (StreamKind::Compute, false) => 1,
        _ => 2,
    });
    let mut rep = ExecReport {
        backend: backend.name(),
        outputs: Vec::new(),
        h2d_bytes: vec![0; forwards],
        copies: vec![0; forwards],
        resident_load_bytes,
        disk_bytes: vec![0; forwards],
        forward_s: Vec::new(),
        load_s,
    };
    let mut t_fwd = Instant::now();
    loop {
        // Skip empty programs and finished streams.
        let mut progressed = false;
        let mut all_done = true;
        for &s in &order {
            let prog = &plan.streams[s].program;
            if prog.is_empty() || fwd[s] >= forwards {
                continue;
            }
            all_done = false;
            let f = fwd[s];
            let runnable = match prog[pc[s]] {
                Instr::Wait { event, lag } => f < lag as usize || recorded[event as usize] > f - lag as usize,
                _ => true,
            };
            if !runnable {
                continue;
            }
            match prog[pc[s]] {
                Instr::Wait { .. } => {}
                Instr::Record { event } => {
                    let e = event as usize;
                    if recorded[e] != f {
                        return Err(bad_plan(format!("event {e} recorded out of order")));
                    }
                    recorded[e] = f + 1;
                    if opts.poison
                        && let EventKind::SlotFree(c) = plan.events[e]
                        && let Some(c) = plan.chunks.get(c as usize)
                    {
                        backend.poison(c.slot())?;
                    }
                }
                Instr::Read { chunk } => {
                    let c = &plan.chunks[chunk as usize];
                    if let Some(h) = c.host_offset {
                        let src = &m.weights[c.tensor as usize][c.tensor_offset as usize..][..c.bytes as usize];
                        let at = (h - plan.host_staging.base) as usize;
                        staging[at..at + c.bytes as usize].copy_from_slice(src);
                        if c.home == Home::Disk {
                            rep.disk_bytes[f] += c.bytes;
                        }
                    }
                }
                Instr::Copy { chunk } => {
                    let c = &plan.chunks[chunk as usize];
                    let src: &[u8] = match (c.home, c.host_offset) {
                        (Home::Disk | Home::PageCache, Some(h)) => {
                            let at = (h - plan.host_staging.base) as usize;
                            &staging[at..at + c.bytes as usize]
                        }
                        _ => &m.weights[c.tensor as usize][c.tensor_offset as usize..][..c.bytes as usize],
                    };
                    backend.copy_in(c.dev_offset, src)?;
                    rep.h2d_bytes[f] += c.bytes;
                    rep.copies[f] += 1;
                }
                Instr::Exec { op } => backend.exec(&ops[op as usize])?,
            }
            pc[s] += 1;
            if pc[s] == prog.len() {
                pc[s] = 0;
                fwd[s] += 1;
                if plan.streams[s].kind == StreamKind::Compute {
                    rep.outputs.push(backend.finish_forward()?);
                    rep.forward_s.push(t_fwd.elapsed().as_secs_f64());
                    t_fwd = Instant::now();
                }
            }
            progressed = true;
            break;
        }
        if all_done {
            break;
        }
        if !progressed {
            let at: Vec<String> = (0..ns)
                .filter(|&s| fwd[s] < forwards && !plan.streams[s].program.is_empty())
                .map(|s| format!("stream {s} forward {} at {:?}", fwd[s], plan.streams[s].program[pc[s]]))
                .collect();
            return Err(Error::Deadlock(at.join("; ")));
        }
    }
    Ok(rep)
}

/// The host executor: the arena is a `Vec<u8>` of `plan.arena_bytes`; ops assemble each weight
/// from its arena pieces and compute in plain Rust ([`cpu_op`]).
#[derive(Debug, Default)]
pub struct CpuBackend {
    arena: Vec<u8>,
    dims: Option<Dims>,
    tokens: Vec<u32>,
    acts: Option<Acts>,
}

impl CpuBackend {
    /// An empty backend (allocates in [`Backend::prepare`]).
    pub fn new() -> CpuBackend {
        CpuBackend::default()
    }
}

fn assemble(arena: &[u8], bytes: u64, segs: &[Segment]) -> Result<Vec<f32>, Error> {
    let mut buf = vec![0u8; bytes as usize];
    for s in segs {
        let src = arena
            .get(s.dev_offset as usize..(s.dev_offset + s.bytes) as usize)
            .ok_or_else(|| bad_plan("piece outside the arena"))?;
        let dst = buf
            .get_mut(s.tensor_offset as usize..(s.tensor_offset + s.bytes) as usize)
            .ok_or_else(|| bad_plan("piece outside its tensor"))?;
        dst.copy_from_slice(src);
    }
    Ok(to_f32(&buf))
}

impl Backend for CpuBackend {
    fn name(&self) -> String {
        "cpu".into()
    }

    fn prepare(&mut self, plan: &Plan, dims: Dims, tokens: &[u32]) -> Result<(), Error> {
        let n = usize::try_from(plan.arena_bytes).map_err(|_| Error::Device("arena too large".into()))?;
        // Unwritten arena bytes read as NaN, like a poisoned slot.
        self.arena = f32::NAN.to_le_bytes().iter().copied().cycle().take(n).collect();
        self.dims = Some(dims);
        self.tokens = tokens.to_vec();
        self.acts = Some(Acts::new(dims));
        Ok(())
    }

    fn copy_in(&mut self, dev_offset: u64, bytes: &[u8]) -> Result<(), Error> {
        let dst = self
            .arena
            .get_mut(dev_offset as usize..)
            .and_then(|d| d.get_mut(..bytes.len()))
            .ok_or_else(|| Error::Device(format!("copy of {} bytes at {dev_offset} past the arena", bytes.len())))?;
        dst.copy_from_slice(bytes);
        Ok(())
    }

    fn poison(&mut self, region: Region) -> Result<(), Error> {
        let nan = f32::NAN.to_le_bytes();
        if let Some(d) = self.arena.get_mut(region.base as usize..region.end() as usize) {
            for (i, b) in d.iter_mut().enumerate() {
                *b = nan[(region.base as usize + i) % 4];
            }
        }
        Ok(())
    }

    fn exec(&mut self, op: &ExecOp<'_>) -> Result<(), Error> {
        let (dims, acts) = (buffers::prepared(self.dims)?, buffers::prepared(self.acts.as_mut())?);
        let ws = op
            .weights
            .iter()
            .map(|w| match w {
                TensorRef::Host(b) => Ok(to_f32(b)),
                TensorRef::Arena { bytes, segments } => assemble(&self.arena, *bytes, segments),
            })
            .collect::<Result<Vec<_>, _>>()?;
        let refs: Vec<&[f32]> = ws.iter().map(|w| w.as_slice()).collect();
        cpu_op(op.kind, dims, &self.tokens, acts, &refs)
    }

    fn finish_forward(&mut self) -> Result<Vec<f32>, Error> {
        buffers::prepared(self.acts.as_ref()).map(|a| a.logits.clone())
    }
}

/// Whether two outputs are bit-for-bit equal (NaN never equals).
pub fn bit_equal(a: &[f32], b: &[f32]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits() && !x.is_nan())
}
