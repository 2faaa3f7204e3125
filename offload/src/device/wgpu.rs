//! A [`wgpu`] device for tensor bytes: uploads from byte slices, chunked through a staging ring,
//! downloads, an f32 matmul compute shader and a bandwidth probe.
//!
//! Any adapter will do, CPU ones included: [`GpuDevice::new`] asks for a hardware adapter first
//! and then for the fallback adapter, which on a CPU-only Linux machine is Mesa's lavapipe
//! (`apt-get install mesa-vulkan-drivers libvulkan1`). When there is none it returns
//! [`Error::NoDevice`], never a panic. Lavapipe timings are for correctness and CI; they
//! say nothing about a real GPU.
//!
//! ```no_run
//! use tensorlane_offload::device::wgpu::GpuDevice;
//! use tensorlane::source::MmapSource;
//!
//! let dev = GpuDevice::new()?;
//! let file = MmapSource::open("weights.bin")?;
//! let buf = dev.upload(&file.bytes()[..4096])?; // straight from the mapping
//! assert_eq!(dev.download(&buf)?, &file.bytes()[..4096]);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! wgpu has one queue per device: uploads, downloads and kernels run in submission order.
//! Buffers are allocated with their size rounded up to 4 bytes (wgpu's copy alignment); the
//! padding is zero and [`GpuBuffer::size`] is the logical size.

use std::fmt;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;

use wgpu::util::DeviceExt;

use crate::error::Error;

/// wgpu's copy alignment (`COPY_BUFFER_ALIGNMENT`).
const ALIGN: u64 = wgpu::COPY_BUFFER_ALIGNMENT;

/// Default size of one staging-ring slot (8 MiB).
pub const DEFAULT_CHUNK: usize = 8 << 20;
/// Default number of staging-ring slots.
pub const DEFAULT_SLOTS: usize = 4;

/// The end of `len` bytes at `offset` in `buf`: refused past the buffer's logical end or at an
/// offset that is not a multiple of the copy alignment.
fn checked_range(buf: &GpuBuffer, offset: u64, len: u64) -> Result<u64, Error> {
    let end = offset
        .checked_add(len)
        .filter(|&e| e <= buf.size)
        .ok_or_else(|| Error::Range(format!("{len} bytes at {offset} past a {}-byte buffer", buf.size)))?;
    if !offset.is_multiple_of(ALIGN) {
        return Err(Error::Range(format!("offset {offset} is not a multiple of {ALIGN}")));
    }
    Ok(end)
}

/// A buffer in device memory (usable as storage, copy source and copy destination).
#[derive(Debug)]
pub struct GpuBuffer {
    buffer: wgpu::Buffer,
    /// Logical size in bytes (the allocation is rounded up to 4 bytes).
    pub size: u64,
}

impl GpuBuffer {
    /// The underlying wgpu buffer, for binding it in one's own pipelines.
    pub fn raw(&self) -> &wgpu::Buffer {
        &self.buffer
    }
}

/// Adapter facts worth printing next to a measurement.
#[derive(Debug, Clone)]
pub struct AdapterSummary {
    /// Adapter name (for instance `llvmpipe (LLVM 15.0.6, 256 bits)`).
    pub name: String,
    /// Device type (`Cpu`, `DiscreteGpu`, …).
    pub device_type: String,
    /// Backend (`Vulkan`, …).
    pub backend: String,
    /// Driver name and version.
    pub driver: String,
    /// Largest buffer the device accepts, in bytes.
    pub max_buffer_size: u64,
    /// Largest storage binding, in bytes (the matmul's per-operand limit).
    pub max_storage_binding: u64,
}

/// Map state of a staging slot.
const MAPPED: u8 = 0;
const PENDING: u8 = 1;
const FAILED: u8 = 2;

struct Slot {
    buffer: wgpu::Buffer,
    state: Arc<AtomicU8>,
}

/// Persistent `MAP_WRITE | COPY_SRC` buffers that are filled on the CPU while earlier chunks are
/// copied on the device: slot `i % n` is reused once its previous copy has completed and it has
/// been mapped again.
struct StagingRing {
    chunk: u64,
    slots: Vec<Slot>,
    next: usize,
}

/// A wgpu device and queue, with a staging ring for large uploads and a lazily built matmul
/// pipeline. Shareable across threads (`&self` methods).
pub struct GpuDevice {
    device: wgpu::Device,
    queue: wgpu::Queue,
    summary: AdapterSummary,
    ring: Mutex<StagingRing>,
    matmul: OnceLock<MatmulPipeline>,
}

impl fmt::Debug for GpuDevice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GpuDevice").field("adapter", &self.summary).finish()
    }
}

/// Opens the first wgpu adapter this machine has (hardware first, then the fallback adapter, e.g.
/// Mesa lavapipe) and a device with the adapter's own limits, named `label`. No adapter is
/// [`Error::NoDevice`], with what to install on a CPU-only machine; a refused device request is
/// [`Error::Device`]. Shared by every wgpu user of the project (this transfer device, the offload
/// executor, `tensorlane-llm`'s executor).
pub fn open_device(label: &str) -> Result<(wgpu::Adapter, wgpu::Device, wgpu::Queue), Error> {
    let instance = wgpu::Instance::new(wgpu::InstanceDescriptor::new_without_display_handle_from_env());
    let mut last_err = String::from("no adapter tried");
    let mut adapter = None;
    for fallback in [false, true] {
        let opts = wgpu::RequestAdapterOptions {
            power_preference: wgpu::PowerPreference::HighPerformance,
            force_fallback_adapter: fallback,
            compatible_surface: None,
            ..Default::default()
        };
        match pollster::block_on(instance.request_adapter(&opts)) {
            Ok(a) => {
                adapter = Some(a);
                break;
            }
            Err(e) => last_err = e.to_string(),
        }
    }
    let adapter = adapter.ok_or_else(|| {
        Error::NoDevice(format!(
            "wgpu: no adapter: {last_err} (on a CPU-only Linux machine install Mesa lavapipe: \
         apt-get install mesa-vulkan-drivers libvulkan1)"
        ))
    })?;
    let limits = adapter.limits();
    let desc = wgpu::DeviceDescriptor {
        label: Some(label),
        required_limits: limits.clone(),
        ..Default::default()
    };
    let (device, queue) = pollster::block_on(adapter.request_device(&desc))
        .map_err(|e| Error::Device(format!("wgpu device request failed: {e}")))?;
    Ok((adapter, device, queue))
}

impl GpuDevice {
    /// Opens the first usable adapter (hardware first, then the fallback/CPU adapter) with the
    /// adapter's own limits and the default staging ring ([`DEFAULT_SLOTS`] × [`DEFAULT_CHUNK`]).
    pub fn new() -> Result<Self, Error> {
        Self::with_staging(DEFAULT_SLOTS, DEFAULT_CHUNK)
    }

    /// Like [`new`](Self::new) with a staging ring of `slots` buffers of `chunk` bytes each
    /// (`chunk` is rounded up to 4 bytes; both at least 1).
    pub fn with_staging(slots: usize, chunk: usize) -> Result<Self, Error> {
        let (adapter, device, queue) = open_device("tensorlane")?;
        let info = adapter.get_info();
        let dl = device.limits();
        let summary = AdapterSummary {
            name: info.name.clone(),
            device_type: format!("{:?}", info.device_type),
            backend: format!("{:?}", info.backend),
            driver: format!("{} {}", info.driver, info.driver_info).trim().to_owned(),
            max_buffer_size: dl.max_buffer_size,
            max_storage_binding: dl.max_storage_buffer_binding_size,
        };
        let chunk = round4((chunk.max(1) as u64).min(dl.max_buffer_size));
        let slots = (0..slots.max(1))
            .map(|i| Slot {
                buffer: device.create_buffer(&wgpu::BufferDescriptor {
                    label: Some(&format!("tensorlane staging {i}")),
                    size: chunk,
                    usage: wgpu::BufferUsages::MAP_WRITE | wgpu::BufferUsages::COPY_SRC,
                    mapped_at_creation: true,
                }),
                state: Arc::new(AtomicU8::new(MAPPED)),
            })
            .collect();
        Ok(GpuDevice {
            device,
            queue,
            summary,
            ring: Mutex::new(StagingRing { chunk, slots, next: 0 }),
            matmul: OnceLock::new(),
        })
    }

    /// The adapter in use.
    pub fn adapter(&self) -> &AdapterSummary {
        &self.summary
    }

    /// The underlying wgpu device and queue, for one's own pipelines.
    pub fn raw(&self) -> (&wgpu::Device, &wgpu::Queue) {
        (&self.device, &self.queue)
    }

    /// Size of one staging-ring slot in bytes.
    pub fn staging_chunk(&self) -> u64 {
        self.lock_ring().chunk
    }

    fn lock_ring(&self) -> std::sync::MutexGuard<'_, StagingRing> {
        self.ring.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Allocates a zeroed device buffer of `size` bytes.
    pub fn alloc(&self, size: u64) -> Result<GpuBuffer, Error> {
        let padded = round4(size).max(ALIGN);
        let limit = self.summary.max_buffer_size;
        if padded > limit {
            return Err(Error::TooLarge {
                size,
                limit,
                which: "max_buffer_size",
            });
        }
        let buffer = self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("tensorlane tensor"),
            size: padded,
            usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST | wgpu::BufferUsages::COPY_SRC,
            mapped_at_creation: false,
        });
        Ok(GpuBuffer { buffer, size })
    }

    /// Allocates a device buffer and uploads `bytes` into it (for instance a tensor's bytes
    /// straight from a memory map). Large inputs go through the staging ring in chunks. The upload
    /// is submitted when this returns; later submissions (kernels, downloads) see it.
    pub fn upload(&self, bytes: &[u8]) -> Result<GpuBuffer, Error> {
        let buf = self.alloc(bytes.len() as u64)?;
        self.upload_into(&buf, 0, bytes)?;
        Ok(buf)
    }

    /// Writes `bytes` into `dst` at `offset`.
    ///
    /// `offset` must be a multiple of 4, and so must `bytes.len()` unless the write ends exactly
    /// at the buffer's logical end (the padding after it is zeroed). Writes up to one staging
    /// chunk use `Queue::write_buffer`; longer ones stream through the staging ring: each chunk
    /// is copied on the CPU into a mapped slot while earlier slots are being copied on the device.
    pub fn upload_into(&self, dst: &GpuBuffer, offset: u64, bytes: &[u8]) -> Result<(), Error> {
        let len = bytes.len() as u64;
        let end = checked_range(dst, offset, len)?;
        if !len.is_multiple_of(ALIGN) && end != dst.size {
            return Err(Error::Range(format!(
                "length {len} is not a multiple of {ALIGN} and does not end the buffer"
            )));
        }
        if bytes.is_empty() {
            return Ok(());
        }
        let mut ring = self.lock_ring();
        if len <= ring.chunk {
            self.write_small(dst, offset, bytes);
            return Ok(());
        }
        let chunk = ring.chunk as usize;
        for (i, part) in bytes.chunks(chunk).enumerate() {
            self.ring_copy(&mut ring, part, dst, offset + (i * chunk) as u64)?;
        }
        Ok(())
    }

    /// `Queue::write_buffer` with the tail padded to 4 bytes.
    fn write_small(&self, dst: &GpuBuffer, offset: u64, bytes: &[u8]) {
        let whole = bytes.len() / ALIGN as usize * ALIGN as usize;
        if whole > 0 {
            self.queue.write_buffer(&dst.buffer, offset, &bytes[..whole]);
        }
        if whole < bytes.len() {
            let mut tail = [0u8; ALIGN as usize];
            tail[..bytes.len() - whole].copy_from_slice(&bytes[whole..]);
            self.queue.write_buffer(&dst.buffer, offset + whole as u64, &tail);
        }
        self.queue.submit([]);
    }

    /// Copies one chunk through the next ring slot.
    fn ring_copy(&self, ring: &mut StagingRing, part: &[u8], dst: &GpuBuffer, at: u64) -> Result<(), Error> {
        let idx = ring.next;
        ring.next = (idx + 1) % ring.slots.len();
        let slot = &ring.slots[idx];
        self.wait_mapped(slot)?;
        let padded = round4(part.len() as u64);
        {
            let mut view = slot
                .buffer
                .get_mapped_range_mut(0..padded)
                .map_err(|e| Error::Device(format!("wgpu buffer mapping failed: {e}")))?;
            let whole = part.len() / ALIGN as usize * ALIGN as usize;
            view.slice(..whole).copy_from_slice(&part[..whole]);
            if whole < part.len() {
                let mut tail = [0u8; ALIGN as usize];
                tail[..part.len() - whole].copy_from_slice(&part[whole..]);
                view.slice(whole..).copy_from_slice(&tail);
            }
        }
        slot.buffer.unmap();
        let mut enc = self.device.create_command_encoder(&Default::default());
        enc.copy_buffer_to_buffer(&slot.buffer, 0, &dst.buffer, at, padded);
        self.queue.submit([enc.finish()]);
        // Ask for the slot back; the mapping completes once the copy above has run.
        slot.state.store(PENDING, Ordering::Release);
        let state = slot.state.clone();
        slot.buffer.map_async(wgpu::MapMode::Write, .., move |r| {
            state.store(if r.is_ok() { MAPPED } else { FAILED }, Ordering::Release);
        });
        Ok(())
    }

    fn wait_mapped(&self, slot: &Slot) -> Result<(), Error> {
        loop {
            match slot.state.load(Ordering::Acquire) {
                MAPPED => return Ok(()),
                FAILED => {
                    // Try again once; a failed map leaves the buffer unmapped.
                    slot.state.store(PENDING, Ordering::Release);
                    let state = slot.state.clone();
                    slot.buffer.map_async(wgpu::MapMode::Write, .., move |r| {
                        state.store(if r.is_ok() { MAPPED } else { FAILED }, Ordering::Release);
                    });
                    self.synchronize()?;
                    if slot.state.load(Ordering::Acquire) != MAPPED {
                        return Err(Error::Device("wgpu staging slot could not be mapped".into()));
                    }
                    return Ok(());
                }
                _ => self.synchronize()?,
            }
        }
    }

    /// Blocks until all submitted work (uploads, kernels, copies) has finished.
    pub fn synchronize(&self) -> Result<(), Error> {
        self.device
            .poll(wgpu::PollType::wait_indefinitely())
            .map(|_| ())
            .map_err(|e| Error::Device(format!("wgpu device poll failed (device lost or timed out): {e}")))
    }

    /// Copies a whole buffer back to the host (its logical size).
    pub fn download(&self, src: &GpuBuffer) -> Result<Vec<u8>, Error> {
        self.download_range(src, 0, src.size)
    }

    /// Copies `len` bytes from `src` at `offset` back to the host. `offset` must be a multiple
    /// of 4. Long ranges are read back in staging-chunk pieces.
    pub fn download_range(&self, src: &GpuBuffer, offset: u64, len: u64) -> Result<Vec<u8>, Error> {
        let end = checked_range(src, offset, len)?;
        let mut out = Vec::with_capacity(len as usize);
        if len == 0 {
            return Ok(out);
        }
        let chunk = self.staging_chunk();
        let readback = self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("tensorlane readback"),
            size: round4(chunk.min(len)),
            usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        let mut at = offset;
        while at < end {
            let n = (end - at).min(chunk);
            let padded = round4(n);
            let mut enc = self.device.create_command_encoder(&Default::default());
            enc.copy_buffer_to_buffer(&src.buffer, at, &readback, 0, padded);
            self.queue.submit([enc.finish()]);
            let (tx, rx) = std::sync::mpsc::channel();
            readback.map_async(wgpu::MapMode::Read, 0..padded, move |r| {
                let _ = tx.send(r);
            });
            self.synchronize()?;
            rx.recv()
                .map_err(|_| Error::Device("wgpu buffer mapping: the map callback never ran".into()))?
                .map_err(|e| Error::Device(format!("wgpu buffer mapping failed: {e}")))?;
            {
                let view = readback
                    .get_mapped_range(0..padded)
                    .map_err(|e| Error::Device(format!("wgpu buffer mapping failed: {e}")))?;
                out.extend_from_slice(&view[..n as usize]);
            }
            readback.unmap();
            at += n;
        }
        Ok(out)
    }

    /// Row-major f32 matrix product `C = A · B` on the device: `a` holds `m × k` values, `b`
    /// holds `k × n`; returns a new buffer of `m × n` values.
    pub fn matmul_f32(&self, a: &GpuBuffer, b: &GpuBuffer, m: u32, k: u32, n: u32) -> Result<GpuBuffer, Error> {
        let c = self.alloc(u64::from(m) * u64::from(n) * 4)?;
        self.matmul_f32_into(a, b, &c, m, k, n)?;
        Ok(c)
    }

    /// [`matmul_f32`](Self::matmul_f32) into an existing buffer `c` of at least `m × n` f32.
    /// Each operand must fit one storage binding
    /// ([`AdapterSummary::max_storage_binding`], 128 MiB on lavapipe).
    pub fn matmul_f32_into(
        &self,
        a: &GpuBuffer,
        b: &GpuBuffer,
        c: &GpuBuffer,
        m: u32,
        k: u32,
        n: u32,
    ) -> Result<(), Error> {
        self.matmul_f32_into_at(a, (b, 0), c, m, k, n)
    }

    /// [`matmul_f32_into`](Self::matmul_f32_into) with `b` read from byte `offset` of its buffer
    /// (a weight in place inside a larger arena). The offset must be a multiple of the device's
    /// storage-binding offset alignment (256 on every adapter tensorlane has met).
    pub fn matmul_f32_into_at(
        &self,
        a: &GpuBuffer,
        (b, b_offset): (&GpuBuffer, u64),
        c: &GpuBuffer,
        m: u32,
        k: u32,
        n: u32,
    ) -> Result<(), Error> {
        let need = |rows: u32, cols: u32| u64::from(rows) * u64::from(cols) * 4;
        let align = u64::from(self.device.limits().min_storage_buffer_offset_alignment);
        if !b_offset.is_multiple_of(align) {
            return Err(Error::Range(format!("offset {b_offset} is not a multiple of {align}")));
        }
        for (name, buf, off, want) in [
            ("a", a, 0, need(m, k)),
            ("b", b, b_offset, need(k, n)),
            ("c", c, 0, need(m, n)),
        ] {
            if buf.size.saturating_sub(off) < want {
                return Err(Error::Shape(format!(
                    "{name} holds {} bytes from {off}, {m}x{k}x{n} needs {want}",
                    buf.size
                )));
            }
            if want > self.summary.max_storage_binding {
                return Err(Error::TooLarge {
                    size: want,
                    limit: self.summary.max_storage_binding,
                    which: "max_storage_buffer_binding_size",
                });
            }
        }
        if m == 0 || n == 0 {
            return Ok(());
        }
        let gx = n.div_ceil(TILE);
        let gy = m.div_ceil(TILE);
        let max = self.device.limits().max_compute_workgroups_per_dimension;
        if gx > max || gy > max {
            return Err(Error::Shape(format!(
                "{m}x{n} output needs {gy}x{gx} workgroups, the device allows {max} per dimension"
            )));
        }
        let p = self.matmul.get_or_init(|| MatmulPipeline::new(&self.device));
        let dims = self.device.create_buffer_init(&wgpu::util::BufferInitDescriptor {
            label: Some("tensorlane matmul dims"),
            contents: &[m, k, n, 0].map(u32::to_le_bytes).concat(),
            usage: wgpu::BufferUsages::UNIFORM,
        });
        fn binding(buf: &GpuBuffer, offset: u64, size: u64) -> wgpu::BufferBinding<'_> {
            wgpu::BufferBinding {
                buffer: &buf.buffer,
                offset,
                size: wgpu::BufferSize::new(round4(size).max(ALIGN).min(buf.size.saturating_sub(offset))),
            }
        }
        let group = self.device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: Some("tensorlane matmul"),
            layout: &p.layout,
            entries: &[
                wgpu::BindGroupEntry {
                    binding: 0,
                    resource: wgpu::BindingResource::Buffer(binding(a, 0, need(m, k))),
                },
                wgpu::BindGroupEntry {
                    binding: 1,
                    resource: wgpu::BindingResource::Buffer(binding(b, b_offset, need(k, n))),
                },
                wgpu::BindGroupEntry {
                    binding: 2,
                    resource: wgpu::BindingResource::Buffer(binding(c, 0, need(m, n))),
                },
                wgpu::BindGroupEntry {
                    binding: 3,
                    resource: dims.as_entire_binding(),
                },
            ],
        });
        let mut enc = self.device.create_command_encoder(&Default::default());
        {
            let mut pass = enc.begin_compute_pass(&Default::default());
            pass.set_pipeline(&p.pipeline);
            pass.set_bind_group(0, &group, &[]);
            pass.dispatch_workgroups(gx, gy, 1);
        }
        self.queue.submit([enc.finish()]);
        Ok(())
    }

    /// Measures upload (host slice → device buffer) and download bandwidth with a `size`-byte
    /// buffer, best of `iters` timed runs after one warm-up. Uploads are timed to completion
    /// ([`synchronize`](Self::synchronize)); downloads include the readback copy into a `Vec`.
    pub fn measure_bandwidth(&self, size: usize, iters: usize) -> Result<Bandwidth, Error> {
        let host: Vec<u8> = (0..size)
            .map(|i| (i as u32).wrapping_mul(2_654_435_761) as u8)
            .collect();
        let buf = self.alloc(size as u64)?;
        let mut up = f64::INFINITY;
        let mut down = f64::INFINITY;
        for i in 0..=iters.max(1) {
            let t = Instant::now();
            self.upload_into(&buf, 0, &host)?;
            self.synchronize()?;
            let tu = t.elapsed().as_secs_f64();
            let t = Instant::now();
            let back = self.download(&buf)?;
            let td = t.elapsed().as_secs_f64();
            if back != host {
                return Err(Error::Device(
                    "wgpu bandwidth probe read back different bytes than it wrote".into(),
                ));
            }
            if i > 0 {
                up = up.min(tu);
                down = down.min(td);
            }
        }
        Ok(Bandwidth {
            bytes: size as u64,
            upload_gbps: size as f64 / up.max(1e-9) / 1e9,
            download_gbps: size as f64 / down.max(1e-9) / 1e9,
            upload_secs: up,
            download_secs: down,
        })
    }
}

/// Result of [`GpuDevice::measure_bandwidth`] (GB/s are 10^9 bytes per second).
#[derive(Debug, Clone, Copy)]
pub struct Bandwidth {
    /// Bytes moved each way per run.
    pub bytes: u64,
    /// Host → device.
    pub upload_gbps: f64,
    /// Device → host.
    pub download_gbps: f64,
    /// Best upload time, seconds.
    pub upload_secs: f64,
    /// Best download time, seconds.
    pub download_secs: f64,
}

fn round4(x: u64) -> u64 {
    x.div_ceil(ALIGN) * ALIGN
}

/// Output tile edge (workgroup is TILE × TILE threads).
const TILE: u32 = 16;

const MATMUL_WGSL: &str = r#"
struct Dims { m: u32, k: u32, n: u32, pad: u32 };
@group(0) @binding(0) var<storage, read> a: array<f32>;
@group(0) @binding(1) var<storage, read> b: array<f32>;
@group(0) @binding(2) var<storage, read_write> c: array<f32>;
@group(0) @binding(3) var<uniform> dims: Dims;

const T: u32 = 16u;
var<workgroup> ta: array<array<f32, 16>, 16>;
var<workgroup> tb: array<array<f32, 16>, 16>;

@compute @workgroup_size(16, 16, 1)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    let row = gid.y;
    let col = gid.x;
    var acc = 0.0;
    let tiles = (dims.k + T - 1u) / T;
    for (var t = 0u; t < tiles; t = t + 1u) {
        let ak = t * T + lid.x;
        let bk = t * T + lid.y;
        if (row < dims.m && ak < dims.k) { ta[lid.y][lid.x] = a[row * dims.k + ak]; } else { ta[lid.y][lid.x] = 0.0; }
        if (col < dims.n && bk < dims.k) { tb[lid.y][lid.x] = b[bk * dims.n + col]; } else { tb[lid.y][lid.x] = 0.0; }
        workgroupBarrier();
        for (var i = 0u; i < T; i = i + 1u) {
            acc = acc + ta[lid.y][i] * tb[i][lid.x];
        }
        workgroupBarrier();
    }
    if (row < dims.m && col < dims.n) {
        c[row * dims.n + col] = acc;
    }
}
"#;

struct MatmulPipeline {
    layout: wgpu::BindGroupLayout,
    pipeline: wgpu::ComputePipeline,
}

impl MatmulPipeline {
    fn new(device: &wgpu::Device) -> Self {
        let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
            label: Some("tensorlane matmul"),
            source: wgpu::ShaderSource::Wgsl(MATMUL_WGSL.into()),
        });
        let storage = |binding, read_only| wgpu::BindGroupLayoutEntry {
            binding,
            visibility: wgpu::ShaderStages::COMPUTE,
            ty: wgpu::BindingType::Buffer {
                ty: wgpu::BufferBindingType::Storage { read_only },
                has_dynamic_offset: false,
                min_binding_size: None,
            },
            count: None,
        };
        let layout = device.create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
            label: Some("tensorlane matmul"),
            entries: &[
                storage(0, true),
                storage(1, true),
                storage(2, false),
                wgpu::BindGroupLayoutEntry {
                    binding: 3,
                    visibility: wgpu::ShaderStages::COMPUTE,
                    ty: wgpu::BindingType::Buffer {
                        ty: wgpu::BufferBindingType::Uniform,
                        has_dynamic_offset: false,
                        min_binding_size: None,
                    },
                    count: None,
                },
            ],
        });
        let pl = device.create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
            label: Some("tensorlane matmul"),
            bind_group_layouts: &[Some(&layout)],
            immediate_size: 0,
        });
        let pipeline = device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
            label: Some("tensorlane matmul"),
            layout: Some(&pl),
            module: &module,
            entry_point: Some("main"),
            compilation_options: Default::default(),
            cache: None,
        });
        MatmulPipeline { layout, pipeline }
    }
}
