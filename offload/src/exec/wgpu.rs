//! The wgpu executor (feature `wgpu`): the arena is one GPU buffer, or one per region (resident
//! part, ring) when it exceeds a buffer or storage-binding limit; copies go through
//! [`GpuDevice::upload_into`] at the plan's offsets; each op binds its weights in place in the
//! arena when a weight is one aligned piece, and gathers the others (a resident prefix plus a
//! streamed rest) into a scratch buffer with a byte-exact WGSL kernel (pieces may start
//! mid-element), then runs [`GpuDevice::matmul_f32_into`] and small elementwise WGSL kernels.
//! Submission order on the one queue is the plan's interleaving, so the waits are honoured by
//! [`execute`](super::execute)'s walk.

use wgpu::util::DeviceExt;

use super::buffers::{Activations, Place, alloc_scratch, places, prepared};
use super::{Backend, Dims, ExecOp, OpKind, TensorRef, to_f32};
use crate::device::wgpu::{GpuBuffer, GpuDevice};
use crate::error::Error;
use crate::plan::{Plan, Region};

const GATHER_WGSL: &str = r#"
struct P { src_off: u32, dst_off: u32, len: u32, gx: u32 };
@group(0) @binding(0) var<storage, read> src: array<u32>;
@group(0) @binding(1) var<storage, read_write> dst: array<u32>;
@group(0) @binding(2) var<uniform> p: P;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let first = p.dst_off / 4u;
    let last = (p.dst_off + p.len + 3u) / 4u;
    let w = first + gid.x + gid.y * p.gx * 64u;
    if (w >= last) { return; }
    var out = dst[w];
    for (var j = 0u; j < 4u; j = j + 1u) {
        let q = w * 4u + j;
        if (q >= p.dst_off && q < p.dst_off + p.len) {
            let s = p.src_off + (q - p.dst_off);
            let b = (src[s / 4u] >> ((s % 4u) * 8u)) & 0xffu;
            out = (out & ~(0xffu << (j * 8u))) | (b << (j * 8u));
        }
    }
    dst[w] = out;
}
"#;

const ELEM_WGSL: &str = r#"
struct P { mode: u32, n: u32, h: u32, kv: u32, gx: u32, p1: u32, p2: u32, p3: u32 };
@group(0) @binding(0) var<storage, read> a: array<f32>;
@group(0) @binding(1) var<storage, read> b: array<f32>;
@group(0) @binding(2) var<storage, read> c: array<f32>;
@group(0) @binding(3) var<storage, read_write> o: array<f32>;
@group(0) @binding(4) var<uniform> p: P;
fn wrap(v: f32) -> f32 { return v - 16.0 * floor((v + 8.0) / 16.0); }
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = gid.x + gid.y * p.gx * 64u;
    if (i >= p.n) { return; }
    if (p.mode == 0u) {
        o[i] = a[i] * b[i % p.h];
    } else if (p.mode == 1u) {
        let j = (i / p.h) * p.kv + (i % p.h) % p.kv;
        o[i] = wrap(a[i] + b[j] + c[j]);
    } else if (p.mode == 2u) {
        o[i] = wrap(a[i] + b[i]);
    } else {
        o[i] = wrap(max(wrap(a[i]), 0.0) * wrap(b[i]));
    }
}
"#;

struct Kernel {
    layout: wgpu::BindGroupLayout,
    pipeline: wgpu::ComputePipeline,
}

fn kernel(device: &wgpu::Device, src: &str, reads: u32, label: &str) -> Kernel {
    let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
        label: Some(label),
        source: wgpu::ShaderSource::Wgsl(src.into()),
    });
    let entry = |binding, ty| wgpu::BindGroupLayoutEntry {
        binding,
        visibility: wgpu::ShaderStages::COMPUTE,
        ty: wgpu::BindingType::Buffer {
            ty,
            has_dynamic_offset: false,
            min_binding_size: None,
        },
        count: None,
    };
    let mut entries: Vec<_> = (0..reads)
        .map(|i| entry(i, wgpu::BufferBindingType::Storage { read_only: true }))
        .collect();
    entries.push(entry(reads, wgpu::BufferBindingType::Storage { read_only: false }));
    entries.push(entry(reads + 1, wgpu::BufferBindingType::Uniform));
    let layout = device.create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
        label: Some(label),
        entries: &entries,
    });
    let pl = device.create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
        label: Some(label),
        bind_group_layouts: &[Some(&layout)],
        immediate_size: 0,
    });
    let pipeline = device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
        label: Some(label),
        layout: Some(&pl),
        module: &module,
        entry_point: Some("main"),
        compilation_options: Default::default(),
        cache: None,
    });
    Kernel { layout, pipeline }
}

/// A buffer bound from a byte offset.
type W<'a> = (&'a GpuBuffer, u64);

/// The wgpu executor (see the module docs).
pub struct WgpuBackend {
    dev: GpuDevice,
    /// `(base, len, buffer)` per arena region.
    regions: Vec<(u64, u64, GpuBuffer)>,
    scratch: Vec<GpuBuffer>,
    /// The device's storage-binding offset alignment.
    align: u64,
    acts: Option<Activations<GpuBuffer>>,
    dims: Option<Dims>,
    tokens: Vec<u32>,
    gather: Kernel,
    elem: Kernel,
}

impl WgpuBackend {
    /// Opens the first adapter ([`GpuDevice::new`]).
    pub fn new() -> Result<WgpuBackend, Error> {
        let dev = GpuDevice::new()?;
        let (d, _) = dev.raw();
        let gather = kernel(d, GATHER_WGSL, 1, "tensorlane offload gather");
        let elem = kernel(d, ELEM_WGSL, 3, "tensorlane offload elementwise");
        Ok(WgpuBackend {
            dev,
            regions: Vec::new(),
            scratch: Vec::new(),
            align: 256,
            acts: None,
            dims: None,
            tokens: Vec::new(),
            gather,
            elem,
        })
    }

    /// Bytes of gather scratch on top of the arena (two buffers of the largest weight that is
    /// split into pieces; weights in one aligned piece are read in place).
    pub fn scratch_bytes(&self) -> u64 {
        self.scratch.iter().map(|b| b.size).sum()
    }

    /// Number of GPU buffers the arena was split into.
    pub fn arena_buffers(&self) -> usize {
        self.regions.len()
    }

    fn region(&self, off: u64, len: u64) -> Result<(&GpuBuffer, u64), Error> {
        self.regions
            .iter()
            .find(|(b, l, _)| off >= *b && off.saturating_add(len) <= b + l)
            .map(|(b, _, buf)| (buf, off - b))
            .ok_or_else(|| Error::Device(format!("{len} bytes at {off} span arena regions")))
    }

    /// Runs kernel `k` over `n` words with the given buffers, each bound from a byte offset (a
    /// multiple of the storage-binding offset alignment) to its end.
    fn dispatch(&self, k: &Kernel, bufs: &[(&GpuBuffer, u64)], params: &[u32], n: u32) {
        let (d, q) = self.dev.raw();
        let groups = n.div_ceil(64).max(1);
        let gx = groups.min(65535);
        let gy = groups.div_ceil(gx);
        let mut p = params.to_vec();
        p.push(gx);
        while !p.len().is_multiple_of(4) {
            p.push(0);
        }
        // The shader reads gx at a fixed index: gather has 3 params + gx, elem 4 + gx (+3 pad).
        let uni = d.create_buffer_init(&wgpu::util::BufferInitDescriptor {
            label: Some("tensorlane offload params"),
            contents: &p.iter().flat_map(|v| v.to_le_bytes()).collect::<Vec<u8>>(),
            usage: wgpu::BufferUsages::UNIFORM,
        });
        let mut entries: Vec<wgpu::BindGroupEntry> = bufs
            .iter()
            .enumerate()
            .map(|(i, (b, offset))| wgpu::BindGroupEntry {
                binding: i as u32,
                resource: wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                    buffer: b.raw(),
                    offset: *offset,
                    size: None,
                }),
            })
            .collect();
        entries.push(wgpu::BindGroupEntry {
            binding: bufs.len() as u32,
            resource: uni.as_entire_binding(),
        });
        let group = d.create_bind_group(&wgpu::BindGroupDescriptor {
            label: None,
            layout: &k.layout,
            entries: &entries,
        });
        let mut enc = d.create_command_encoder(&Default::default());
        {
            let mut pass = enc.begin_compute_pass(&Default::default());
            pass.set_pipeline(&k.pipeline);
            pass.set_bind_group(0, &group, &[]);
            pass.dispatch_workgroups(gx, gy, 1);
        }
        q.submit([enc.finish()]);
    }

    fn elem(&self, mode: u32, a: &GpuBuffer, b: W<'_>, c: W<'_>, o: &GpuBuffer, n: usize) -> Result<(), Error> {
        let d = prepared(self.dims)?;
        self.dispatch(
            &self.elem,
            &[(a, 0), b, c, (o, 0)],
            &[mode, n as u32, d.h as u32, d.kv as u32],
            n as u32,
        );
        Ok(())
    }

    fn copy(&self, src: &GpuBuffer, dst: &GpuBuffer, bytes: u64) {
        let (d, q) = self.dev.raw();
        let mut enc = d.create_command_encoder(&Default::default());
        enc.copy_buffer_to_buffer(src.raw(), 0, dst.raw(), 0, bytes.div_ceil(4) * 4);
        q.submit([enc.finish()]);
    }
}

impl Backend for WgpuBackend {
    fn name(&self) -> String {
        let a = self.dev.adapter();
        format!("wgpu ({}, {})", a.name, a.backend)
    }

    fn prepare(&mut self, plan: &Plan, d: Dims, tokens: &[u32]) -> Result<(), Error> {
        let lim = {
            let a = self.dev.adapter();
            a.max_buffer_size.min(a.max_storage_binding)
        };
        let mut spans = vec![(0u64, plan.arena_bytes)];
        if plan.arena_bytes > lim {
            // One buffer per region: the resident part, then the ring.
            spans = vec![(0, plan.ring.base), (plan.ring.base, plan.arena_bytes - plan.ring.base)];
        }
        self.regions.clear();
        for (base, len) in spans {
            if len == 0 {
                continue;
            }
            if len > lim {
                return Err(Error::Device(format!(
                    "arena region of {len} bytes exceeds the device's buffer/binding limit {lim}"
                )));
            }
            let buf = self.dev.alloc(len.div_ceil(4) * 4)?;
            self.regions.push((base, len, buf));
        }
        // Weights whose one piece starts at an aligned arena offset are bound in place; only the
        // others (split into a resident prefix and a streamed rest) are gathered, so scratch is
        // sized by the largest split weight, not the largest weight.
        let align = u64::from(self.dev.raw().0.limits().min_storage_buffer_offset_alignment);
        self.align = align;
        self.scratch = alloc_scratch(plan, align, |bytes| self.dev.alloc(bytes.div_ceil(4) * 4))?;
        self.acts = Some(Activations::alloc(d, |n| self.dev.alloc((n * 4) as u64))?);
        self.dims = Some(d);
        self.tokens = tokens.to_vec();
        Ok(())
    }

    fn copy_in(&mut self, dev_offset: u64, bytes: &[u8]) -> Result<(), Error> {
        let (buf, at) = self.region(dev_offset, bytes.len() as u64)?;
        if bytes.len().is_multiple_of(4) {
            return self.dev.upload_into(buf, at, bytes);
        }
        // A piece ending mid-word: pad the last word. Every planned offset is 256-aligned, so the
        // padding bytes belong to no other tensor.
        let mut padded = bytes.to_vec();
        padded.resize(bytes.len().div_ceil(4) * 4, 0);
        let (buf, at) = self.region(dev_offset, padded.len() as u64)?;
        self.dev.upload_into(buf, at, &padded)
    }

    fn exec(&mut self, op: &ExecOp<'_>) -> Result<(), Error> {
        let d = prepared(self.dims)?;
        // Bind each arena weight in place when it is one aligned piece; gather the others into
        // a scratch buffer.
        let in_place = |s: &super::Segment| {
            self.region(s.dev_offset, s.bytes)
                .is_ok_and(|(_, at)| at.is_multiple_of(self.align))
        };
        let mut ws: Vec<W<'_>> = Vec::new();
        for place in places(op, in_place)? {
            match place {
                Place::Host(_) => {}
                Place::Arena { offset, bytes } => ws.push(self.region(offset, bytes)?),
                Place::Scratch { slot, segments, .. } => {
                    let dst = &self.scratch[slot];
                    for s in segments {
                        let (src, at) = self.region(s.dev_offset, s.bytes)?;
                        let words = (s.tensor_offset + s.bytes).div_ceil(4) - s.tensor_offset / 4;
                        self.dispatch(
                            &self.gather,
                            &[(src, 0), (dst, 0)],
                            &[at as u32, s.tensor_offset as u32, s.bytes as u32],
                            words as u32,
                        );
                    }
                    ws.push((dst, 0));
                }
            }
        }
        let w = |i: usize| {
            ws.get(i)
                .copied()
                .ok_or_else(|| Error::Device(format!("{:?}: missing weight", op.kind)))
        };
        let acts = prepared(self.acts.as_ref())?;
        let (t, h, kv, ffn, vocab) = (d.t as u32, d.h as u32, d.kv as u32, d.ffn as u32, d.vocab as u32);
        let mm = |a: &GpuBuffer, w: W<'_>, c: &GpuBuffer, k: u32, n: u32| self.dev.matmul_f32_into_at(a, w, c, t, k, n);
        let nh = d.t * d.h;
        match op.kind {
            OpKind::Embed => {
                let Some(TensorRef::Host(e)) = op.weights.first() else {
                    return Err(Error::Device("embed without a host table".into()));
                };
                let e = to_f32(e);
                let mut x = Vec::with_capacity(nh * 4);
                for &tok in self.tokens.iter().take(d.t) {
                    let tok = (tok as usize).min(d.vocab - 1);
                    let row = e
                        .get(tok * d.h..(tok + 1) * d.h)
                        .ok_or_else(|| Error::Device("embed row".into()))?;
                    x.extend(row.iter().flat_map(|v| v.to_le_bytes()));
                }
                self.dev.upload_into(&acts.x, 0, &x)?;
            }
            OpKind::QProj => {
                self.elem(0, &acts.x, w(0)?, w(0)?, &acts.a, nh)?;
                mm(&acts.a, w(1)?, &acts.q, h, h)?;
            }
            OpKind::KProj => mm(&acts.a, w(0)?, &acts.k, h, kv)?,
            OpKind::VProj => mm(&acts.a, w(0)?, &acts.v, h, kv)?,
            OpKind::Attn => self.elem(1, &acts.q, (&acts.k, 0), (&acts.v, 0), &acts.s, nh)?,
            OpKind::OProj => {
                mm(&acts.s, w(0)?, &acts.y, h, h)?;
                self.elem(2, &acts.x, (&acts.y, 0), (&acts.y, 0), &acts.a, nh)?;
                self.copy(&acts.a, &acts.x, (nh * 4) as u64);
            }
            OpKind::Gate => {
                self.elem(0, &acts.x, w(0)?, w(0)?, &acts.b, nh)?;
                mm(&acts.b, w(1)?, &acts.g, h, ffn)?;
            }
            OpKind::Up => mm(&acts.b, w(0)?, &acts.u, h, ffn)?,
            OpKind::Down => {
                self.elem(3, &acts.g, (&acts.u, 0), (&acts.u, 0), &acts.m, d.t * d.ffn)?;
                mm(&acts.m, w(0)?, &acts.y, ffn, h)?;
                self.elem(2, &acts.x, (&acts.y, 0), (&acts.y, 0), &acts.a, nh)?;
                self.copy(&acts.a, &acts.x, (nh * 4) as u64);
            }
            OpKind::LmHead => {
                self.elem(0, &acts.x, w(0)?, w(0)?, &acts.a, nh)?;
                mm(&acts.a, w(1)?, &acts.logits, h, vocab)?;
            }
        }
        Ok(())
    }

    /// Fills the freed slot with NaN in every arena buffer it touches, as the CPU executor does,
    /// so a read after eviction shows in the output. Slots start 256-aligned; a tail shorter than
    /// one word is slot padding and left alone.
    fn poison(&mut self, region: Region) -> Result<(), Error> {
        for (base, len, buf) in &self.regions {
            let start = region.base.max(*base);
            let end = region.end().min(base + len);
            if start >= end {
                continue;
            }
            let bytes = (end - start) / 4 * 4;
            if bytes == 0 || !(start - base).is_multiple_of(4) {
                continue;
            }
            let nan: Vec<u8> = std::iter::repeat_n(f32::NAN.to_le_bytes(), (bytes / 4) as usize)
                .flatten()
                .collect();
            self.dev.upload_into(buf, start - base, &nan)?;
        }
        Ok(())
    }

    fn finish_forward(&mut self) -> Result<Vec<f32>, Error> {
        let acts = prepared(self.acts.as_ref())?;
        let bytes = self.dev.download(&acts.logits)?;
        Ok(to_f32(&bytes))
    }
}
