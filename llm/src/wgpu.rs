//! The wgpu executor ([`Device::Wgpu`](crate::Device::Wgpu)): the same forward pass as the CPU
//! executor (RMSNorm, RoPE, grouped-query attention with a causal mask over a KV cache held on
//! the device, SwiGLU, residual adds, final norm, logits; f32 accumulation) in WGSL compute
//! shaders (`llm/src/wgsl/*.wgsl`, one set of sources, so a browser can reuse them).
//!
//! The weight matrices are uploaded in their stored form (F32, F16, BF16, Q8_0, Q4_0, Q4_K,
//! Q6_K) and dequantized inside the matrix-product kernel; other types are refused with an
//! error naming the type. A matrix larger than the adapter's `max_storage_buffer_binding_size`
//! is split by rows into several buffers (a single row larger than that is refused). The inputs
//! of each product are rounded as the CPU executor (and llama.cpp's CPU backend) rounds them,
//! so both executors agree to float rounding. The token embedding is looked up on the CPU.
//! The prompt is evaluated in batches of [`BATCH`] positions.
//!
//! For the continuous-batching engine ([`crate::batch`]) the executor holds several KV caches
//! (slots, [`Wgpu::with_slots`]) and [`Wgpu::step`] runs the rows of several sequences through
//! each product together, RoPE, the cache append and attention per sequence on its own slot.

use std::borrow::Cow;

use tensorlane::model::Model;
use wgpu::util::DeviceExt;

use crate::arch::{RopeStyle, Spec, TensorSpec};
use crate::bind::{self, missing, read};
use crate::cpu::KvCache;
use crate::kernels::Matrix;
use crate::plan::{BATCH, Budgeted};
use crate::{Error, Result};

/// The most workgroups along x in one dispatch (the rest goes along y).
const GRID_X: u32 = 32768;

const MATMUL_WGSL: &str = include_str!("wgsl/matmul.wgsl");
/// Inputs one matmul workgroup takes for a batch (`JPER` in `matmul.wgsl`): each weight row is read
/// once per this many inputs. One input (decode) runs the kernel specialised to `JPER = 1`.
const MATMUL_INPUTS_PER_GROUP: u32 = 8;
const ROUND_WGSL: &str = include_str!("wgsl/round.wgsl");
const RMS_NORM_WGSL: &str = include_str!("wgsl/rms_norm.wgsl");
const ROPE_WGSL: &str = include_str!("wgsl/rope.wgsl");
const ATTENTION_WGSL: &str = include_str!("wgsl/attention.wgsl");
const ELEMENTWISE_WGSL: &str = include_str!("wgsl/elementwise.wgsl");

fn device_err(what: impl std::fmt::Display) -> Error {
    Error::Device(format!("wgpu: {what}"))
}

/// `(x, y)` workgroups for `count` along one logical dimension.
fn grid(count: usize) -> (u32, u32) {
    let count = count.max(1) as u32;
    let x = count.min(GRID_X);
    (x, count.div_ceil(x))
}

/// Rows `row0..row0 + rows` of a matrix in a device buffer, at `offset` (`size` bytes bound).
struct Part {
    buf: wgpu::Buffer,
    offset: u64,
    size: u64,
    row0: usize,
    rows: usize,
}

/// The streamed rows of a matrix: copied from the model into their slot of the plan's ring
/// before each use.
struct Streamed<'m> {
    /// The matrix's stored bytes (the model's map).
    data: Cow<'m, [u8]>,
    /// Where the streamed rows start in `data`.
    from: usize,
    /// Their slot in the ring.
    slot: u64,
}

/// A weight matrix on the device, in stored form: resident rows in buffers of their own,
/// streamed rows (under a budget) in the ring.
struct GMat<'m> {
    /// The kernel's kind code (see `matmul.wgsl`).
    kind: u32,
    rows: usize,
    cols: usize,
    row_bytes: usize,
    parts: Vec<Part>,
    stream: Option<Streamed<'m>>,
}

/// A command encoder and the ring regions written since it was started: a write to a region
/// already written must wait for the commands that read the first one (they are submitted
/// first), since a queue's writes land before the next submission's commands.
struct Pending {
    enc: wgpu::CommandEncoder,
    written: Vec<(u64, u64)>,
    /// Bytes streamed and time spent handing them to the queue.
    bytes: u64,
    copy: std::time::Duration,
}

struct GLayer<'m> {
    attn_norm: wgpu::Buffer,
    wq: GMat<'m>,
    wk: GMat<'m>,
    wv: GMat<'m>,
    bias: Option<[wgpu::Buffer; 3]>,
    /// Per-head RMSNorm weights of the queries and keys (qwen3).
    qk_norm: Option<[wgpu::Buffer; 2]>,
    wo: GMat<'m>,
    ffn_norm: wgpu::Buffer,
    gate: GMat<'m>,
    up: GMat<'m>,
    down: GMat<'m>,
}

struct Pipelines {
    /// The product for a batch: [`MATMUL_INPUTS_PER_GROUP`] inputs per workgroup.
    matmul: wgpu::ComputePipeline,
    /// The product for one input (decode): one input per workgroup.
    matmul_one: wgpu::ComputePipeline,
    round: wgpu::ComputePipeline,
    rms_norm: wgpu::ComputePipeline,
    rope: wgpu::ComputePipeline,
    attention: wgpu::ComputePipeline,
    add_rows: wgpu::ComputePipeline,
    swiglu: wgpu::ComputePipeline,
    add: wgpu::ComputePipeline,
}

/// Activation buffers for one batch of [`BATCH`] positions.
struct Acts {
    x: wgpu::Buffer,
    xn: wgpu::Buffer,
    /// A product's rounded inputs.
    xr: wgpu::Buffer,
    q_raw: wgpu::Buffer,
    k_raw: wgpu::Buffer,
    v_raw: wgpu::Buffer,
    q: wgpu::Buffer,
    attn: wgpu::Buffer,
    proj: wgpu::Buffer,
    g: wgpu::Buffer,
    u: wgpu::Buffer,
    scores: wgpu::Buffer,
    logits: wgpu::Buffer,
    readback: wgpu::Buffer,
}

/// The wgpu executor over a model's weights uploaded in stored form.
pub(crate) struct Wgpu<'m> {
    spec: Spec,
    device: wgpu::Device,
    queue: wgpu::Queue,
    p: Pipelines,
    /// The embedding on the host, for the row lookups.
    embd: Matrix<'m>,
    /// The output projection (the embedding when tied).
    output: GMat<'m>,
    output_norm: wgpu::Buffer,
    /// `(cos, sin)` per position and pair, `context` positions.
    rope: wgpu::Buffer,
    layers: Vec<GLayer<'m>>,
    /// Keys and values per slot, then per layer: `context` positions of `kv_dim` floats each.
    kc: Slots,
    vc: Slots,
    acts: Acts,
    /// The plan's ring for streamed rows (none when every weight is resident).
    ring: Option<wgpu::Buffer>,
    context: usize,
    stored: u64,
    streamed: u64,
    /// Weight bytes the last forward pass streamed.
    pub(crate) streamed_last: u64,
    /// Passes over the weights the last [`Wgpu::step`] made (one per [`BATCH`] rows).
    pub(crate) passes_last: u64,
    /// Time it spent handing them to the queue.
    pub(crate) copy_last: std::time::Duration,
}

impl<'m> Wgpu<'m> {
    /// Opens an adapter (hardware first, then the fallback one, e.g. Mesa lavapipe), uploads
    /// every weight `spec` needs from `model` and allocates a KV cache of `context` positions.
    ///
    /// Under a plan, each matrix keeps its planned resident rows in buffers of its own and its
    /// streamed rows get their slot in one ring buffer of the plan's ring size.
    pub(crate) fn new(model: &'m Model, spec: Spec, context: usize, plan: Option<&Budgeted>) -> Result<Wgpu<'m>> {
        Wgpu::with_slots(model, spec, context, plan, 1)
    }

    /// [`Wgpu::new`] with `slots` KV caches of `context` positions each (at least 1), one per
    /// sequence [`Wgpu::step`] may run; [`Wgpu::forward`] uses slot 0. Caches that do not fit
    /// the adapter (a buffer over its binding limit, or out of device memory) are an error
    /// naming their sizes.
    pub(crate) fn with_slots(
        model: &'m Model,
        spec: Spec,
        context: usize,
        plan: Option<&Budgeted>,
        slots: usize,
    ) -> Result<Wgpu<'m>> {
        if slots == 0 {
            return Err(device_err("at least one KV cache slot is needed"));
        }
        if let Some(why) = spec.beyond_device_executors(context) {
            return Err(device_err(format!("{why}: not computed by this device executor yet (use --device cpu)")));
        }
        let (_adapter, device, queue) =
            tensorlane_offload::device::wgpu::open_device("tensorlane-llm").map_err(|e| {
                device_err(match e {
                    // "no adapter" is what callers (and the tests' skip rule) match on.
                    tensorlane_offload::Error::NoDevice(m) => m.replacen("wgpu: ", "", 1),
                    other => other.to_string(),
                })
            })?;
        let limits = device.limits();
        let max_bind = limits.max_storage_buffer_binding_size.min(limits.max_buffer_size);
        let p = Pipelines::new(&device);

        let h = spec.hparams.clone();
        // The KV caches first: when they do not fit, say so before uploading anything.
        let (kc, vc) = kv_slots(
            &device,
            max_bind,
            slots,
            spec.layers.len(),
            context,
            h.n_head_kv * h.head_dim,
        )?;
        let ring = match plan {
            Some(b) if b.plan.ring.len > 0 => {
                let len = b.plan.ring.len;
                if len > limits.max_buffer_size {
                    return Err(device_err(format!(
                        "the plan's ring of {len} bytes is over the adapter's max_buffer_size {} (pick a \
                         policy with a smaller ring, e.g. flexgen-like, or a larger budget)",
                        limits.max_buffer_size
                    )));
                }
                Some(device.create_buffer(&wgpu::BufferDescriptor {
                    label: Some("streamed weights ring"),
                    size: len,
                    usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST,
                    mapped_at_creation: false,
                }))
            }
            _ => None,
        };
        let split = plan.map(Budgeted::placement).unwrap_or_default();
        let placement = Placement {
            device: &device,
            max_bind,
            offset_align: u64::from(limits.min_storage_buffer_offset_alignment).max(4),
            ring: ring.as_ref(),
        };
        let stored = std::cell::Cell::new(0u64);
        let streamed = std::cell::Cell::new(0u64);
        let upload = |spec: &TensorSpec, m: Option<(Cow<'m, [u8]>, Matrix<'m>)>| -> Result<GMat<'m>> {
            let (bytes, m) = m.ok_or_else(|| missing(spec))?;
            stored.set(stored.get() + bytes.len() as u64);
            let g = placement.gmat(bytes, &m, split.get(&m.name).copied())?;
            streamed.set(streamed.get() + g.stream.as_ref().map_or(0, |s| (g.rows * g.row_bytes - s.from) as u64));
            Ok(g)
        };
        let vector = |spec: &TensorSpec, required: bool| -> Result<Option<wgpu::Buffer>> {
            match bind::vector(model, spec)? {
                Some(v) => Ok(Some(f32_buffer(&device, &spec.name, &v))),
                None if required => Err(missing(spec)),
                None => Ok(None),
            }
        };
        let mut layers = Vec::with_capacity(spec.layers.len());
        for l in &spec.layers {
            let b = [
                vector(&l.biases[0], false)?,
                vector(&l.biases[1], false)?,
                vector(&l.biases[2], false)?,
            ];
            let bias = match b {
                [Some(q), Some(k), Some(v)] => Some([q, k, v]),
                [None, None, None] if !l.biases_required => None,
                b => {
                    let i = b.iter().position(Option::is_none).unwrap_or(0);
                    return Err(missing(&l.biases[i]));
                }
            };
            layers.push(GLayer {
                attn_norm: vector(&l.attn_norm, true)?.ok_or_else(|| missing(&l.attn_norm))?,
                wq: upload(&l.wq, read(model, &l.wq)?)?,
                wk: upload(&l.wk, read(model, &l.wk)?)?,
                wv: upload(&l.wv, read(model, &l.wv)?)?,
                bias,
                qk_norm: match &l.qk_norm {
                    Some([q, k]) => Some([
                        vector(q, true)?.ok_or_else(|| missing(q))?,
                        vector(k, true)?.ok_or_else(|| missing(k))?,
                    ]),
                    None => None,
                },
                wo: upload(&l.wo, read(model, &l.wo)?)?,
                ffn_norm: vector(&l.ffn_norm, true)?.ok_or_else(|| missing(&l.ffn_norm))?,
                gate: upload(&l.gate, read(model, &l.gate)?)?,
                up: upload(&l.up, read(model, &l.up)?)?,
                down: upload(&l.down, read(model, &l.down)?)?,
            });
        }
        let (embd_bytes, embd) = read(model, &spec.token_embd)?.ok_or_else(|| missing(&spec.token_embd))?;
        stored.set(stored.get() + embd_bytes.len() as u64);
        let output = match read(model, &spec.output)? {
            Some(o) => upload(&spec.output, Some(o))?,
            // Tied: the plan's entry for the embedding is this product's.
            None => {
                let g = placement.gmat(embd_bytes, &embd, split.get(&embd.name).copied())?;
                streamed.set(streamed.get() + g.stream.as_ref().map_or(0, |s| (g.rows * g.row_bytes - s.from) as u64));
                g
            }
        };
        let output_norm = vector(&spec.output_norm, true)?.ok_or_else(|| missing(&spec.output_norm))?;

        let table = bind::rope_table(model, &spec, context)?;
        let rope = f32_buffer(&device, "rope", &table);

        let q_dim = h.n_head * h.head_dim;
        let kv_dim = h.n_head_kv * h.head_dim;
        let alloc = |label: &str, floats: usize, extra: wgpu::BufferUsages| -> Result<wgpu::Buffer> {
            let size = (floats.max(1) * 4) as u64;
            if size > max_bind {
                return Err(device_err(format!(
                    "the {label} buffer needs {size} bytes, over the adapter's max_storage_buffer_binding_size \
                     {max_bind} (lower the context)"
                )));
            }
            Ok(device.create_buffer(&wgpu::BufferDescriptor {
                label: Some(label),
                size,
                usage: wgpu::BufferUsages::STORAGE
                    | wgpu::BufferUsages::COPY_DST
                    | wgpu::BufferUsages::COPY_SRC
                    | extra,
                mapped_at_creation: false,
            }))
        };
        let none = wgpu::BufferUsages::empty();
        let widest = h.n_ff.max(q_dim).max(h.n_embd);
        let acts = Acts {
            x: alloc("x", BATCH * h.n_embd, none)?,
            xn: alloc("xn", BATCH * h.n_embd, none)?,
            xr: alloc("rounded inputs", BATCH * widest, none)?,
            q_raw: alloc("q", BATCH * q_dim, none)?,
            k_raw: alloc("k", BATCH * kv_dim, none)?,
            v_raw: alloc("v", BATCH * kv_dim, none)?,
            q: alloc("q", BATCH * q_dim, none)?,
            attn: alloc("attention", BATCH * q_dim, none)?,
            proj: alloc("projection", BATCH * h.n_embd, none)?,
            g: alloc("gate", BATCH * h.n_ff, none)?,
            u: alloc("up", BATCH * h.n_ff, none)?,
            scores: alloc("scores", BATCH * h.n_head * context, none)?,
            logits: alloc("logits", BATCH * h.n_vocab, none)?,
            readback: device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("logits readback"),
                size: (BATCH * h.n_vocab.max(1) * 4) as u64,
                usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            }),
        };
        Ok(Wgpu {
            spec,
            device,
            queue,
            p,
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
            passes_last: 0,
            copy_last: std::time::Duration::ZERO,
        })
    }

    /// Weight bytes streamed per forward pass.
    pub(crate) fn streamed_bytes(&self) -> u64 {
        self.streamed
    }

    /// The queue's write rate in GB/s: the best of three writes of `bytes`, each submitted and
    /// waited for (0 when the device fails).
    pub(crate) fn probe_link_gbps(&self, bytes: usize) -> f64 {
        let buf = self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("link probe"),
            size: bytes.next_multiple_of(4) as u64,
            usage: wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        let data = vec![1u8; bytes.next_multiple_of(4)];
        let mut best = f64::INFINITY;
        for _ in 0..3 {
            let t = std::time::Instant::now();
            self.queue.write_buffer(&buf, 0, &data);
            self.queue.submit([]);
            if self.device.poll(wgpu::PollType::wait_indefinitely()).is_err() {
                return 0.0;
            }
            best = best.min(t.elapsed().as_secs_f64());
        }
        data.len() as f64 / best.max(1e-9) / 1e9
    }

    /// Hands `w`'s streamed rows to the queue for its slot in the ring, first submitting the
    /// commands recorded so far when the slot was written since they started (their reads of
    /// the earlier occupant come first).
    fn stream_in(&self, p: &mut Pending, w: &GMat<'_>) {
        let (Some(s), Some(ring)) = (&w.stream, &self.ring) else {
            return;
        };
        let bytes = &s.data[s.from..w.rows * w.row_bytes];
        let region = (s.slot, s.slot + bytes.len() as u64);
        if p.written.iter().any(|&(a, b)| a < region.1 && region.0 < b) {
            let enc = std::mem::replace(&mut p.enc, self.device.create_command_encoder(&Default::default()));
            self.queue.submit([enc.finish()]);
            p.written.clear();
        }
        let t = std::time::Instant::now();
        // Queue writes take multiples of 4 bytes: the tail goes padded.
        let body = bytes.len() / 4 * 4;
        if body > 0 {
            self.queue.write_buffer(ring, s.slot, &bytes[..body]);
        }
        if body < bytes.len() {
            let mut tail = [0u8; 4];
            tail[..bytes.len() - body].copy_from_slice(&bytes[body..]);
            self.queue.write_buffer(ring, s.slot + body as u64, &tail);
        }
        p.copy += t.elapsed();
        p.bytes += bytes.len() as u64;
        p.written.push(region);
    }

    pub(crate) fn spec(&self) -> &Spec {
        &self.spec
    }

    /// Stored bytes of every weight matrix.
    pub(crate) fn stored_bytes(&self) -> u64 {
        self.stored
    }

    /// One compute pass: `bufs` at bindings `0..`, then `params` as a uniform.
    fn dispatch(
        &self,
        enc: &mut wgpu::CommandEncoder,
        pipe: &wgpu::ComputePipeline,
        bufs: &[&wgpu::Buffer],
        params: &[u32],
        groups: (u32, u32, u32),
    ) {
        let bound: Vec<wgpu::BindingResource<'_>> = bufs.iter().map(|b| b.as_entire_binding()).collect();
        self.dispatch_bound(enc, pipe, bound, params, groups);
    }

    /// [`Wgpu::dispatch`] over buffer ranges.
    fn dispatch_bound(
        &self,
        enc: &mut wgpu::CommandEncoder,
        pipe: &wgpu::ComputePipeline,
        bound: Vec<wgpu::BindingResource<'_>>,
        params: &[u32],
        groups: (u32, u32, u32),
    ) {
        let bytes: Vec<u8> = params.iter().flat_map(|v| v.to_le_bytes()).collect();
        let ub = self.device.create_buffer_init(&wgpu::util::BufferInitDescriptor {
            label: Some("params"),
            contents: &bytes,
            usage: wgpu::BufferUsages::UNIFORM,
        });
        let n = bound.len();
        let mut entries: Vec<wgpu::BindGroupEntry<'_>> = bound
            .into_iter()
            .enumerate()
            .map(|(i, resource)| wgpu::BindGroupEntry {
                binding: i as u32,
                resource,
            })
            .collect();
        entries.push(wgpu::BindGroupEntry {
            binding: n as u32,
            resource: ub.as_entire_binding(),
        });
        let group = self.device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: None,
            layout: &pipe.get_bind_group_layout(0),
            entries: &entries,
        });
        let mut pass = enc.begin_compute_pass(&Default::default());
        pass.set_pipeline(pipe);
        pass.set_bind_group(0, &group, &[]);
        pass.dispatch_workgroups(groups.0, groups.1, groups.2);
    }

    /// `y[j][r] = Σ_c W[r][c] · x[j][c]` for `n` inputs, the inputs rounded first as the CPU
    /// executor rounds them for `w`'s type.
    fn matmul(&self, p: &mut Pending, w: &GMat<'_>, x: &wgpu::Buffer, y: &wgpu::Buffer, n: usize) {
        self.stream_in(p, w);
        let enc = &mut p.enc;
        let input = if w.kind == 0 {
            x
        } else {
            let len = n * w.cols;
            let per = match w.kind {
                1 | 2 => 1,
                3 | 4 => 32,
                _ => 256,
            };
            let (gx, gy) = grid((len / per).div_ceil(64));
            self.dispatch(
                enc,
                &self.p.round,
                &[x, &self.acts.xr],
                &[len as u32, w.kind, gx, 0],
                (gx, gy, 1),
            );
            &self.acts.xr
        };
        let (pipeline, per_group) = if n == 1 {
            (&self.p.matmul_one, 1)
        } else {
            (&self.p.matmul, MATMUL_INPUTS_PER_GROUP)
        };
        for part in &w.parts {
            let (gx, gy) = grid(part.rows);
            let weights = wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                buffer: &part.buf,
                offset: part.offset,
                size: std::num::NonZeroU64::new(part.size),
            });
            self.dispatch_bound(
                enc,
                pipeline,
                vec![weights, input.as_entire_binding(), y.as_entire_binding()],
                &[
                    part.rows as u32,
                    w.cols as u32,
                    w.row_bytes as u32,
                    w.kind,
                    w.rows as u32,
                    part.row0 as u32,
                    gx,
                    n as u32,
                ],
                (gx, gy, (n as u32).div_ceil(per_group)),
            );
        }
    }

    /// RMSNorm of `rows.1` rows of `x` from row `rows.0`, each `n_embd` wide, into `y` from row 0.
    fn rms_norm(
        &self,
        enc: &mut wgpu::CommandEncoder,
        x: &wgpu::Buffer,
        w: &wgpu::Buffer,
        y: &wgpu::Buffer,
        rows: (usize, usize),
    ) {
        self.rms_norm_rows(enc, x, w, y, self.spec.hparams.n_embd, rows);
    }

    /// RMSNorm over rows `d` wide (`w` has `d` values).
    fn rms_norm_rows(
        &self,
        enc: &mut wgpu::CommandEncoder,
        x: &wgpu::Buffer,
        w: &wgpu::Buffer,
        y: &wgpu::Buffer,
        d: usize,
        rows: (usize, usize),
    ) {
        self.dispatch(
            enc,
            &self.p.rms_norm,
            &[x, w, y],
            &[d as u32, self.spec.hparams.rms_eps.to_bits(), rows.0 as u32, 0],
            (rows.1 as u32, 1, 1),
        );
    }

    fn elementwise(
        &self,
        enc: &mut wgpu::CommandEncoder,
        pipe: &wgpu::ComputePipeline,
        a: &wgpu::Buffer,
        b: &wgpu::Buffer,
        len: usize,
        d: usize,
    ) {
        let (gx, gy) = grid(len.div_ceil(64));
        self.dispatch(enc, pipe, &[a, b], &[len as u32, d as u32, gx, 0], (gx, gy, 1));
    }

    #[allow(clippy::too_many_arguments)]
    fn rope(
        &self,
        enc: &mut wgpu::CommandEncoder,
        src: &wgpu::Buffer,
        dst: &wgpu::Buffer,
        n: usize,
        heads: usize,
        pos0: usize,
        row0: usize,
    ) {
        let h = &self.spec.hparams;
        let style = match h.rope_style {
            RopeStyle::Adjacent => 0,
            RopeStyle::Halves => 1,
        };
        let (gx, gy) = grid((n * heads * h.head_dim).div_ceil(64));
        self.dispatch(
            enc,
            &self.p.rope,
            &[src, &self.rope, dst],
            &[
                n as u32,
                heads as u32,
                h.head_dim as u32,
                h.rope_dim as u32,
                pos0 as u32,
                style,
                row0 as u32,
                gx,
            ],
            (gx, gy, 1),
        );
    }

    /// Runs `tokens` at positions `cache.len..` (keys and values kept on the device, in slot 0)
    /// and returns the logits of the positions `want(i)` selects, in order. The caller has
    /// checked the token ids and the context.
    pub(crate) fn forward(
        &mut self,
        tokens: &[u32],
        cache: &mut KvCache,
        want: &dyn Fn(usize) -> bool,
    ) -> Result<Vec<Vec<f32>>> {
        self.streamed_last = 0;
        self.copy_last = std::time::Duration::ZERO;
        bind::in_batches(tokens, cache, want, |chunk, pos, rows| {
            let seg = Segment {
                slot: 0,
                pos0: pos,
                r0: 0,
                len: chunk.len(),
            };
            self.forward_batch(chunk, &[seg], rows)
        })
    }

    /// One step of a continuous batch, as [`Cpu::step`](crate::cpu::Cpu::step): a decode step
    /// of several sequences (`decode[s]`: sequence `s`'s next token, its cache and its KV slot)
    /// and the prompts of sequences joining the batch (each with its own new cache and slot;
    /// only its last position's logits are kept). The rows of all sequences go through each
    /// product together, so each streamed weight is written into the ring once for up to
    /// [`BATCH`] rows; more rows (a long joining prompt, or more than `BATCH` sequences) are run
    /// in passes of `BATCH` rows, in order. RoPE, the cache append and attention run per
    /// sequence on its own slot at its own positions, and every kernel computes a row as it does
    /// for a sequence alone, so each sequence's logits are what [`Wgpu::forward`] of its tokens
    /// alone gives. Returns one `n_vocab` row per decode sequence, then one per prompt, in order.
    /// The caller has checked the token ids; a slot out of range or used twice, or a sequence
    /// past the context, is an error.
    pub(crate) fn step(
        &mut self,
        decode: &mut [(u32, &mut KvCache, usize)],
        prompts: &mut [(&[u32], &mut KvCache, usize)],
    ) -> Result<Vec<Vec<f32>>> {
        self.streamed_last = 0;
        self.copy_last = std::time::Duration::ZERO;
        let slots = self.kc.len();
        let mut used = vec![false; slots];
        let seqs = decode
            .iter()
            .map(|(_, c, slot)| (1, c.len, *slot))
            .chain(prompts.iter().map(|(t, c, slot)| (t.len(), c.len, *slot)));
        for (s, (len, pos0, slot)) in seqs.enumerate() {
            if slot >= slots || used[slot] {
                return Err(device_err(format!(
                    "sequence {s} of the step uses KV slot {slot}, {} (the executor has {slots})",
                    if slot >= slots {
                        "out of range"
                    } else {
                        "already taken by another"
                    }
                )));
            }
            used[slot] = true;
            if pos0 + len > self.context {
                return Err(Error::Context {
                    needed: pos0 + len,
                    context: self.context,
                });
            }
        }
        // Every row: token, sequence, position, slot, whether its logits are returned.
        let mut rows: Vec<(u32, usize, usize, usize, bool)> = Vec::new();
        for (s, (t, c, slot)) in decode.iter().enumerate() {
            rows.push((*t, s, c.len, *slot, true));
        }
        for (j, (tokens, c, slot)) in prompts.iter().enumerate() {
            let s = decode.len() + j;
            for (i, &t) in tokens.iter().enumerate() {
                rows.push((t, s, c.len + i, *slot, i + 1 == tokens.len()));
            }
        }
        let mut out = Vec::with_capacity(decode.len() + prompts.len());
        self.passes_last = rows.len().div_ceil(BATCH) as u64;
        for chunk in rows.chunks(BATCH) {
            let tokens: Vec<u32> = chunk.iter().map(|r| r.0).collect();
            let mut segs: Vec<Segment> = Vec::new();
            for (r, &(_, s, pos, slot, _)) in chunk.iter().enumerate() {
                match segs.last_mut() {
                    Some(g) if chunk[r - 1].1 == s => g.len += 1,
                    _ => segs.push(Segment {
                        slot,
                        pos0: pos,
                        r0: r,
                        len: 1,
                    }),
                }
            }
            let want: Vec<usize> = (0..chunk.len()).filter(|&r| chunk[r].4).collect();
            out.extend(self.forward_batch(&tokens, &segs, &want)?);
        }
        for (_, c, _) in decode.iter_mut() {
            c.len += 1;
        }
        for (t, c, _) in prompts.iter_mut() {
            c.len += t.len();
        }
        Ok(out)
    }

    /// One pass over the weights for `tokens` (at most [`BATCH`]), made of the sequences'
    /// segments `segs` (in row order, covering every row); returns the logits of the rows
    /// `rows` (ascending) asks for. The output projection runs for at least one row whatever is
    /// asked for, so every pass streams the same bytes.
    fn forward_batch(&mut self, tokens: &[u32], segs: &[Segment], rows: &[usize]) -> Result<Vec<Vec<f32>>> {
        let h = self.spec.hparams.clone();
        let n = tokens.len();
        let (d, hd) = (h.n_embd, h.head_dim);
        let q_dim = h.n_head * hd;
        let kv_dim = h.n_head_kv * hd;
        debug_assert!(n <= BATCH && segs.iter().all(|g| g.pos0 + g.len <= self.context));
        let mut x = vec![0f32; n * d];
        for (i, &t) in tokens.iter().enumerate() {
            self.embd.row_into(t as usize, &mut x[i * d..(i + 1) * d]);
        }
        let xb: Vec<u8> = x.iter().flat_map(|v| v.to_le_bytes()).collect();
        self.queue.write_buffer(&self.acts.x, 0, &xb);

        let a = &self.acts;
        let mut pending = Pending {
            enc: self.device.create_command_encoder(&Default::default()),
            written: Vec::new(),
            bytes: 0,
            copy: std::time::Duration::ZERO,
        };
        let p = &mut pending;
        let row_copy =
            |enc: &mut wgpu::CommandEncoder, src: &wgpu::Buffer, dst: &wgpu::Buffer, width: usize, g: &Segment| {
                enc.copy_buffer_to_buffer(src, (g.r0 * width * 4) as u64, dst, 0, (g.len * width * 4) as u64);
            };
        for (li, l) in self.layers.iter().enumerate() {
            self.rms_norm(&mut p.enc, &a.x, &l.attn_norm, &a.xn, (0, n));
            self.matmul(p, &l.wq, &a.xn, &a.q_raw, n);
            self.matmul(p, &l.wk, &a.xn, &a.k_raw, n);
            self.matmul(p, &l.wv, &a.xn, &a.v_raw, n);
            if let Some([bq, bk, bv]) = &l.bias {
                self.elementwise(&mut p.enc, &self.p.add_rows, &a.q_raw, bq, n * q_dim, q_dim);
                self.elementwise(&mut p.enc, &self.p.add_rows, &a.k_raw, bk, n * kv_dim, kv_dim);
                self.elementwise(&mut p.enc, &self.p.add_rows, &a.v_raw, bv, n * kv_dim, kv_dim);
            }
            // qwen3: each query and key head normed before rope, through the attention
            // buffer (free until the attention writes it; a kernel cannot read and write one
            // buffer).
            if let Some([nq, nk]) = &l.qk_norm {
                for (raw, w, heads) in [(&a.q_raw, nq, h.n_head), (&a.k_raw, nk, h.n_head_kv)] {
                    self.rms_norm_rows(&mut p.enc, raw, w, &a.attn, hd, (0, n * heads));
                    p.enc.copy_buffer_to_buffer(&a.attn, 0, raw, 0, (n * heads * hd * 4) as u64);
                }
            }
            // Per sequence: rope of its queries at its positions (a later segment's rows go
            // through the free rounding buffer, the rope kernel reading from row 0), its keys
            // roped into its own cache, its values copied there.
            for g in segs {
                let (kc, vc) = (&self.kc[g.slot][li], &self.vc[g.slot][li]);
                if g.r0 == 0 {
                    self.rope(&mut p.enc, &a.q_raw, &a.q, g.len, h.n_head, g.pos0, 0);
                    self.rope(&mut p.enc, &a.k_raw, kc, g.len, h.n_head_kv, g.pos0, g.pos0);
                } else {
                    row_copy(&mut p.enc, &a.q_raw, &a.xr, q_dim, g);
                    self.rope(&mut p.enc, &a.xr, &a.q, g.len, h.n_head, g.pos0, g.r0);
                    row_copy(&mut p.enc, &a.k_raw, &a.xr, kv_dim, g);
                    self.rope(&mut p.enc, &a.xr, kc, g.len, h.n_head_kv, g.pos0, g.pos0);
                }
                p.enc.copy_buffer_to_buffer(
                    &a.v_raw,
                    (g.r0 * kv_dim * 4) as u64,
                    vc,
                    (g.pos0 * kv_dim * 4) as u64,
                    (g.len * kv_dim * 4) as u64,
                );
            }
            for g in segs {
                let (kc, vc) = (&self.kc[g.slot][li], &self.vc[g.slot][li]);
                self.dispatch(
                    &mut p.enc,
                    &self.p.attention,
                    &[&a.q, kc, vc, &a.scores, &a.attn],
                    &[
                        h.n_head as u32,
                        hd as u32,
                        kv_dim as u32,
                        (h.n_head / h.n_head_kv) as u32,
                        g.pos0 as u32,
                        self.context as u32,
                        (1.0 / (hd as f32).sqrt()).to_bits(),
                        g.r0 as u32,
                    ],
                    (h.n_head as u32, g.len as u32, 1),
                );
            }
            self.matmul(p, &l.wo, &a.attn, &a.proj, n);
            self.elementwise(&mut p.enc, &self.p.add, &a.x, &a.proj, n * d, d);
            self.rms_norm(&mut p.enc, &a.x, &l.ffn_norm, &a.xn, (0, n));
            self.matmul(p, &l.gate, &a.xn, &a.g, n);
            self.matmul(p, &l.up, &a.xn, &a.u, n);
            self.elementwise(&mut p.enc, &self.p.swiglu, &a.g, &a.u, n * h.n_ff, h.n_ff);
            self.matmul(p, &l.down, &a.g, &a.proj, n);
            self.elementwise(&mut p.enc, &self.p.add, &a.x, &a.proj, n * d, d);
        }
        // The logits of the rows asked for (the last row when none is); a run of rows is
        // normalized in place, scattered rows are gathered into the free projection buffer
        // first.
        let picked: Vec<usize> = if rows.is_empty() { vec![n - 1] } else { rows.to_vec() };
        let m = picked.len();
        let vocab = h.n_vocab;
        if picked.windows(2).all(|w| w[1] == w[0] + 1) {
            self.rms_norm(&mut p.enc, &a.x, &self.output_norm, &a.xn, (picked[0], m));
        } else {
            for (j, &r) in picked.iter().enumerate() {
                p.enc
                    .copy_buffer_to_buffer(&a.x, (r * d * 4) as u64, &a.proj, (j * d * 4) as u64, (d * 4) as u64);
            }
            self.rms_norm(&mut p.enc, &a.proj, &self.output_norm, &a.xn, (0, m));
        }
        self.matmul(p, &self.output, &a.xn, &a.logits, m);
        let bytes = (m * vocab * 4) as u64;
        p.enc.copy_buffer_to_buffer(&a.logits, 0, &a.readback, 0, bytes);
        self.streamed_last += pending.bytes;
        self.copy_last += pending.copy;
        self.queue.submit([pending.enc.finish()]);
        if rows.is_empty() {
            self.device
                .poll(wgpu::PollType::wait_indefinitely())
                .map_err(|e| device_err(format!("device poll failed (device lost?): {e}")))?;
            return Ok(Vec::new());
        }
        let (tx, rx) = std::sync::mpsc::channel();
        a.readback.map_async(wgpu::MapMode::Read, 0..bytes, move |r| {
            let _ = tx.send(r);
        });
        self.device
            .poll(wgpu::PollType::wait_indefinitely())
            .map_err(|e| device_err(format!("device poll failed (device lost?): {e}")))?;
        rx.recv()
            .map_err(|_| device_err("the map callback never ran"))?
            .map_err(|e| device_err(format!("buffer mapping failed: {e}")))?;
        let all: Vec<f32> = {
            let view = a
                .readback
                .get_mapped_range(0..bytes)
                .map_err(|e| device_err(format!("buffer mapping failed: {e}")))?;
            view.chunks_exact(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect()
        };
        a.readback.unmap();
        Ok(all.chunks_exact(vocab.max(1)).map(<[f32]>::to_vec).collect())
    }
}

/// Rows `r0..r0 + len` of a pass: one sequence's tokens at positions `pos0..`, its keys and
/// values in KV slot `slot`.
#[derive(Clone, Copy, Debug)]
struct Segment {
    slot: usize,
    pos0: usize,
    r0: usize,
    len: usize,
}

/// Per slot, per layer: a KV cache buffer.
type Slots = Vec<Vec<wgpu::Buffer>>;

/// The KV caches of `slots` sequences: per slot, per layer, a key and a value buffer of
/// `context` positions of `kv_dim` floats. An error names the sizes and what to lower when a
/// buffer is over the adapter's binding limit or the device runs out of memory.
fn kv_slots(
    device: &wgpu::Device,
    max_bind: u64,
    slots: usize,
    layers: usize,
    context: usize,
    kv_dim: usize,
) -> Result<(Slots, Slots)> {
    let each = (context.max(1) as u64).saturating_mul((kv_dim.max(1) * 4) as u64);
    let total = each.saturating_mul(2 * layers as u64).saturating_mul(slots as u64);
    let what = || {
        format!(
            "the KV caches of {slots} sequence{} ({slots} x {layers} layers x keys and values x {context} \
             positions x {kv_dim} floats = {total} bytes)",
            if slots == 1 { "" } else { "s" }
        )
    };
    if each > max_bind {
        return Err(device_err(format!(
            "{}: one layer's keys of one sequence take {each} bytes, over the adapter's \
             max_storage_buffer_binding_size {max_bind} (lower the context, --context)",
            what()
        )));
    }
    let scope = device.push_error_scope(wgpu::ErrorFilter::OutOfMemory);
    let buffer = |label: &str| {
        device.create_buffer(&wgpu::BufferDescriptor {
            label: Some(label),
            size: each,
            usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST | wgpu::BufferUsages::COPY_SRC,
            mapped_at_creation: false,
        })
    };
    let mut kc = Vec::with_capacity(slots);
    let mut vc = Vec::with_capacity(slots);
    for _ in 0..slots {
        kc.push((0..layers).map(|_| buffer("k cache")).collect());
        vc.push((0..layers).map(|_| buffer("v cache")).collect());
    }
    // On native backends the scope's future is ready at once.
    let mut popped = std::pin::pin!(scope.pop());
    let polled = std::future::Future::poll(
        popped.as_mut(),
        &mut std::task::Context::from_waker(std::task::Waker::noop()),
    );
    if let std::task::Poll::Ready(Some(e)) = polled {
        return Err(device_err(format!(
            "{} do not fit the device ({e}): lower the number of sequences decoded together \
             (--max-batch) or the context (--context)",
            what()
        )));
    }
    Ok((kc, vc))
}

fn f32_buffer(device: &wgpu::Device, label: &str, v: &[f32]) -> wgpu::Buffer {
    let mut bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
    if bytes.is_empty() {
        bytes.resize(4, 0);
    }
    device.create_buffer_init(&wgpu::util::BufferInitDescriptor {
        label: Some(label),
        contents: &bytes,
        usage: wgpu::BufferUsages::STORAGE,
    })
}

/// Where matrices go on the device: buffers of their own (at most `max_bind` bytes each) for
/// resident rows, the ring for streamed ones.
struct Placement<'a> {
    device: &'a wgpu::Device,
    max_bind: u64,
    /// The adapter's `min_storage_buffer_offset_alignment`.
    offset_align: u64,
    ring: Option<&'a wgpu::Buffer>,
}

impl Placement<'_> {
    /// Rows per bound part: as many as fit in `max_bind` (less 3 bytes of padding), a multiple
    /// of the rows that keep part offsets `offset_align`-aligned. An error for a single row
    /// over the limit.
    fn rows_per(&self, m: &Matrix<'_>, row_bytes: usize) -> Result<usize> {
        let fit = (self.max_bind.saturating_sub(3) / row_bytes.max(1) as u64) as usize;
        let unit = (self.offset_align / gcd(self.offset_align, row_bytes.max(1) as u64)) as usize;
        let rows = fit / unit * unit;
        if rows == 0 {
            return Err(Error::TensorType {
                name: m.name.clone(),
                ty: format!(
                    "rows of {row_bytes} bytes, over the adapter's max_storage_buffer_binding_size ({} bytes)",
                    self.max_bind
                ),
            });
        }
        Ok(rows)
    }

    /// `m` (stored bytes `bytes`) on the device: its first `split.0` bytes (all without a
    /// split) uploaded now, by rows, into buffers of their own; the rest streamed into the
    /// ring at `split.1` before each use.
    fn gmat<'m>(&self, bytes: Cow<'m, [u8]>, m: &Matrix<'_>, split: Option<(u64, Option<u64>)>) -> Result<GMat<'m>> {
        let kind = bind::kernel_kind(m, "wgpu")?;
        let row_bytes = bytes.len() / m.rows.max(1);
        let rows_per = self.rows_per(m, row_bytes)?;
        let (resident_rows, slot) = bind::resident_rows(m, bytes.len(), row_bytes, split)?;
        let mut parts = Vec::new();
        let mut row0 = 0;
        while row0 < resident_rows {
            let rows = rows_per.min(resident_rows - row0);
            let mut chunk = Cow::Borrowed(&bytes[row0 * row_bytes..(row0 + rows) * row_bytes]);
            if !chunk.len().is_multiple_of(4) {
                let mut v = chunk.into_owned();
                v.resize(v.len().next_multiple_of(4), 0);
                chunk = Cow::Owned(v);
            }
            let buf = self.device.create_buffer_init(&wgpu::util::BufferInitDescriptor {
                label: Some(&m.name),
                contents: &chunk,
                usage: wgpu::BufferUsages::STORAGE,
            });
            parts.push(Part {
                offset: 0,
                size: buf.size(),
                buf,
                row0,
                rows,
            });
            row0 += rows;
        }
        let stream = match (slot, self.ring) {
            (Some(slot), Some(ring)) => {
                while row0 < m.rows {
                    let rows = rows_per.min(m.rows - row0);
                    let offset = slot + ((row0 - resident_rows) * row_bytes) as u64;
                    let size = ((rows * row_bytes) as u64).next_multiple_of(4);
                    if offset + size > ring.size() {
                        return Err(device_err(format!(
                            "the plan's ring slot of {} at {slot} leaves the ring ({} bytes)",
                            m.name,
                            ring.size()
                        )));
                    }
                    parts.push(Part {
                        buf: ring.clone(),
                        offset,
                        size,
                        row0,
                        rows,
                    });
                    row0 += rows;
                }
                Some(Streamed {
                    from: resident_rows * row_bytes,
                    data: bytes,
                    slot,
                })
            }
            (Some(_), None) => return Err(device_err("the plan streams weights but has no ring")),
            _ => None,
        };
        Ok(GMat {
            kind,
            rows: m.rows,
            cols: m.cols,
            row_bytes,
            parts,
            stream,
        })
    }
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 { a } else { gcd(b, a % b) }
}

impl Pipelines {
    fn new(device: &wgpu::Device) -> Pipelines {
        let make_with = |src: &str, entry: &str, constants: &[(&str, f64)]| {
            let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
                label: Some(entry),
                source: wgpu::ShaderSource::Wgsl(src.into()),
            });
            device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
                label: Some(entry),
                layout: None,
                module: &module,
                entry_point: Some(entry),
                compilation_options: wgpu::PipelineCompilationOptions {
                    constants,
                    ..Default::default()
                },
                cache: None,
            })
        };
        let make = |src: &str, entry: &str| make_with(src, entry, &[]);
        Pipelines {
            matmul: make_with(MATMUL_WGSL, "main", &[("JPER", f64::from(MATMUL_INPUTS_PER_GROUP))]),
            matmul_one: make_with(MATMUL_WGSL, "main", &[("JPER", 1.0)]),
            round: make(ROUND_WGSL, "main"),
            rms_norm: make(RMS_NORM_WGSL, "main"),
            rope: make(ROPE_WGSL, "main"),
            attention: make(ATTENTION_WGSL, "main"),
            add_rows: make(ELEMENTWISE_WGSL, "add_rows"),
            swiglu: make(ELEMENTWISE_WGSL, "swiglu"),
            add: make(ELEMENTWISE_WGSL, "add"),
        }
    }
}
