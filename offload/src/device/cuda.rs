//! A CUDA device through [`cudarc`] (driver API, `libcuda` loaded at run time): pinned host
//! staging, asynchronous host-to-device copies on streams with events, and a bandwidth probe by
//! chunk size and host-memory kind.
//!
//! The crate builds without the CUDA toolkit. At run time cudarc's loader *panics* when
//! `libcuda` is missing, so every entry point here first checks that the library can be loaded
//! ([`driver_available`]) and then calls the driver inside `catch_unwind`: a machine without CUDA
//! gets [`Error::NoDevice`] (or [`Error::Panicked`]), never a panic.
//!
//! Host memory kinds ([`HostMem`]), see `specs/offload.md` §2.2:
//! * [`HostMem::Pageable`] — ordinary memory; the driver stages it itself and the copy blocks.
//! * [`HostMem::Pinned`] — page-locked (`cuMemHostAlloc` flags 0): asynchronous, link speed,
//!   fast for the CPU to read back.
//! * [`HostMem::WriteCombined`] — page-locked and write-combined (cudarc's default): fine for
//!   CPU-write/GPU-read uploads, very slow for CPU reads, and on some systems slower H2D.

use std::fmt;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;

use cudarc::driver::{CudaContext, CudaEvent, CudaSlice, CudaStream, PinnedHostSlice, sys};

use crate::error::Error;

/// Runs `f` (which calls into the driver) turning a panic into [`Error::Panicked`].
pub(crate) fn guarded<T>(f: impl FnOnce() -> Result<T, Error>) -> Result<T, Error> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(p) => {
            let msg = p
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "unknown panic".into());
            Err(Error::Panicked(msg))
        }
    }
}

/// Whether the CUDA driver library can be loaded and initialised; returns the number of devices.
///
/// Never panics: without `libcuda` it returns [`Error::NoDevice`].
pub fn driver_available() -> Result<usize, Error> {
    // SAFETY: `is_culib_present` only tries to dlopen the driver library by its usual names and
    // drops the handle; it touches no CUDA state.
    if !unsafe { sys::is_culib_present() } {
        return Err(Error::NoDevice(
            "CUDA: libcuda could not be loaded (no NVIDIA driver on this machine, or libcuda.so.1 not on the library path; install the driver or use --device cpu/wgpu)".into(),
        ));
    }
    guarded(|| {
        cudarc::driver::result::init()?;
        let n = cudarc::driver::result::device::get_count()?;
        Ok(usize::try_from(n).unwrap_or(0))
    })
}

/// Kind of host memory a copy starts from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum HostMem {
    /// Ordinary (pageable) memory.
    Pageable,
    /// Page-locked memory, `cuMemHostAlloc` flags 0.
    Pinned,
    /// Page-locked, write-combined memory (`CU_MEMHOSTALLOC_WRITECOMBINED`).
    WriteCombined,
}

impl HostMem {
    /// A short lowercase name (`pageable`, `pinned`, `write-combined`).
    pub fn name(self) -> &'static str {
        match self {
            HostMem::Pageable => "pageable",
            HostMem::Pinned => "pinned",
            HostMem::WriteCombined => "write-combined",
        }
    }
}

/// A host staging buffer of one [`HostMem`] kind.
pub struct Staging {
    kind: HostMem,
    mem: StagingMem,
}

enum StagingMem {
    Pageable(Vec<u8>),
    Pinned(PinnedHostSlice<u8>),
}

impl fmt::Debug for Staging {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Staging")
            .field("kind", &self.kind)
            .field("len", &self.len())
            .finish()
    }
}

impl Staging {
    /// The memory kind.
    pub fn kind(&self) -> HostMem {
        self.kind
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        match &self.mem {
            StagingMem::Pageable(v) => v.len(),
            StagingMem::Pinned(p) => p.len(),
        }
    }

    /// Whether the buffer is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The bytes, writable. For pinned memory this first waits until the last copy out of this
    /// buffer has completed (the buffer's own event), so refilling it is always safe.
    pub fn as_mut_slice(&mut self) -> Result<&mut [u8], Error> {
        match &mut self.mem {
            StagingMem::Pageable(v) => Ok(v.as_mut_slice()),
            StagingMem::Pinned(p) => guarded(|| Ok(p.as_mut_slice()?)),
        }
    }

    /// Copies `self[..len]` to `dst` on `stream`: asynchronous for pinned memory when `len` is
    /// the whole buffer; a partial pinned buffer or pageable memory completes before returning.
    fn copy_to(&self, stream: &Arc<CudaStream>, len: usize, dst: &mut CudaSlice<u8>, at: usize) -> Result<(), Error> {
        let mut view = dst
            .try_slice_mut(at..at + len)
            .ok_or_else(|| Error::Range(format!("{len} bytes at {at} past the device buffer")))?;
        match &self.mem {
            StagingMem::Pageable(v) => stream.memcpy_htod(&v[..len], &mut view)?,
            StagingMem::Pinned(p) if p.len() == len => stream.memcpy_htod(p, &mut view)?,
            StagingMem::Pinned(p) => stream.memcpy_htod(&p.as_slice()?[..len], &mut view)?,
        }
        Ok(())
    }
}

/// A copy (or a series of copies) in flight; [`wait`](Self::wait) blocks until it has landed.
#[derive(Debug)]
pub struct Transfer {
    done: CudaEvent,
    /// Bytes copied.
    pub bytes: usize,
}

impl Transfer {
    /// Blocks the calling thread until the copies have completed.
    pub fn wait(&self) -> Result<(), Error> {
        guarded(|| Ok(self.done.synchronize()?))
    }

    /// Whether the copies have completed (non-blocking).
    pub fn is_complete(&self) -> bool {
        self.done.is_complete()
    }

    /// The completion event, for `stream.wait(event)` on a compute stream.
    pub fn event(&self) -> &CudaEvent {
        &self.done
    }
}

/// One CUDA device (primary context).
#[derive(Debug)]
pub struct CudaDevice {
    ctx: Arc<CudaContext>,
}

impl CudaDevice {
    /// Opens device `ordinal`. Without `libcuda`, or without such a device, returns an error.
    pub fn new(ordinal: usize) -> Result<Self, Error> {
        let count = driver_available()?;
        if ordinal >= count {
            return Err(Error::NoDevice(format!(
                "CUDA device {ordinal} requested, {count} present (pick an ordinal below {count})"
            )));
        }
        guarded(|| {
            Ok(CudaDevice {
                ctx: CudaContext::new(ordinal)?,
            })
        })
    }

    /// The cudarc context, for kernels, cuBLAS and streams of one's own.
    pub fn context(&self) -> &Arc<CudaContext> {
        &self.ctx
    }

    /// The device's name.
    pub fn name(&self) -> Result<String, Error> {
        guarded(|| Ok(self.ctx.name()?))
    }

    /// A new non-default stream.
    pub fn new_stream(&self) -> Result<Arc<CudaStream>, Error> {
        guarded(|| Ok(self.ctx.new_stream()?))
    }

    /// A zeroed device buffer of `len` bytes.
    pub fn alloc_device(&self, stream: &Arc<CudaStream>, len: usize) -> Result<CudaSlice<u8>, Error> {
        guarded(|| Ok(stream.alloc_zeros::<u8>(len)?))
    }

    /// A host staging buffer of `len` bytes and the given kind (zeroed).
    pub fn alloc_staging(&self, len: usize, kind: HostMem) -> Result<Staging, Error> {
        let flags = match kind {
            HostMem::Pageable => {
                return Ok(Staging {
                    kind,
                    mem: StagingMem::Pageable(vec![0; len]),
                });
            }
            HostMem::Pinned => 0,
            HostMem::WriteCombined => sys::CU_MEMHOSTALLOC_WRITECOMBINED,
        };
        guarded(|| {
            // SAFETY: `alloc_pinned_with_flags` is unsafe only because the memory starts
            // uninitialised; it is zeroed below before anyone can read it.
            let mut p = unsafe { self.ctx.alloc_pinned_with_flags::<u8>(len, flags)? };
            p.as_mut_slice()?.fill(0);
            Ok(Staging {
                kind,
                mem: StagingMem::Pinned(p),
            })
        })
    }

    /// Uploads `src` (for instance a memory-mapped tensor) into `dst` at byte `at` on `stream`,
    /// chunk by chunk through the `staging` ring: while chunk `i` is copied to the device, the
    /// CPU fills the next slot; a slot is refilled only after its previous copy completed (its
    /// event). Returns a [`Transfer`] whose event marks the last copy; with pinned slots the call
    /// returns before the final copies land.
    pub fn upload_staged(
        &self,
        stream: &Arc<CudaStream>,
        src: &[u8],
        dst: &mut CudaSlice<u8>,
        at: usize,
        staging: &mut [Staging],
    ) -> Result<Transfer, Error> {
        let chunk = staging.iter().map(Staging::len).min().unwrap_or(0);
        if chunk == 0 && !src.is_empty() {
            return Err(Error::Range("staging ring is empty".into()));
        }
        if at.checked_add(src.len()).is_none_or(|e| e > dst.len()) {
            return Err(Error::Range(format!(
                "{} bytes at {at} past a {}-byte device buffer",
                src.len(),
                dst.len()
            )));
        }
        guarded(|| {
            let n = staging.len();
            for (i, part) in src.chunks(chunk.max(1)).enumerate() {
                let slot = &mut staging[i % n];
                slot.as_mut_slice()?[..part.len()].copy_from_slice(part);
                slot.copy_to(stream, part.len(), dst, at + i * chunk)?;
            }
            let done = stream.record_event(None)?;
            Ok(Transfer { done, bytes: src.len() })
        })
    }

    /// Measures host-to-device bandwidth for each memory kind and chunk size: `total` bytes
    /// (rounded down to a whole number of chunks, at least one) copied from two alternating
    /// staging buffers into one device buffer on one stream, timed with CUDA events. The staging
    /// contents are not refilled, so this is the link (and driver staging for pageable memory),
    /// not the source read.
    pub fn probe_h2d(&self, total: usize, chunks: &[usize], kinds: &[HostMem]) -> Result<Vec<H2dProbe>, Error> {
        let stream = self.new_stream()?;
        let mut out = Vec::new();
        for &kind in kinds {
            for &chunk in chunks {
                let chunk = chunk.max(1);
                let count = (total / chunk).max(1);
                let bytes = count * chunk;
                let mut dst = self.alloc_device(&stream, bytes)?;
                let ring = [self.alloc_staging(chunk, kind)?, self.alloc_staging(chunk, kind)?];
                let ms = guarded(|| {
                    // Warm-up copy (first-touch costs, lazy context work).
                    ring[0].copy_to(&stream, chunk, &mut dst, 0)?;
                    stream.synchronize()?;
                    let start = stream.record_event(Some(sys::CUevent_flags::CU_EVENT_DEFAULT))?;
                    for i in 0..count {
                        ring[i % 2].copy_to(&stream, chunk, &mut dst, i * chunk)?;
                    }
                    let end = stream.record_event(Some(sys::CUevent_flags::CU_EVENT_DEFAULT))?;
                    Ok(start.elapsed_ms(&end)?)
                })?;
                let secs = f64::from(ms).max(1e-6) / 1e3;
                out.push(H2dProbe {
                    kind,
                    chunk,
                    bytes,
                    secs,
                    gbps: bytes as f64 / secs / 1e9,
                });
            }
        }
        Ok(out)
    }
}

/// One row of [`CudaDevice::probe_h2d`] (GB/s are 10^9 bytes per second).
#[derive(Clone, Copy, Debug)]
pub struct H2dProbe {
    /// Host memory kind copied from.
    pub kind: HostMem,
    /// Bytes per copy.
    pub chunk: usize,
    /// Bytes copied in the timed pass.
    pub bytes: usize,
    /// Time of the timed pass (CUDA events), seconds.
    pub secs: f64,
    /// Throughput.
    pub gbps: f64,
}
