//! Weight tiers on the host: where a tensor's bytes come from before they reach a device.
//!
//! * [`Tier::Ram`] — bytes already in process memory (a `Vec`, an `Arc<[u8]>`, pinned staging):
//!   reading is a `memcpy`.
//! * [`Tier::PageCache`] — a memory map of the file ([`MmapSource`]): warm pages read at memcpy
//!   speed, cold pages fault in one at a time.
//! * [`Tier::Disk`] — [`DirectFile`]: `pread` with `O_DIRECT` into page-aligned buffers, bypassing
//!   the page cache (Linux). File systems that refuse `O_DIRECT` (tmpfs, some overlays) fall back
//!   to buffered `pread`, and [`DirectFile::note`] says so.
//!
//! [`WeightSource`] puts the three behind one `read_into(offset, dst)` call, and [`probe`] measures
//! each tier's throughput on a given file. Errors are the crate's [`Error`]: `Io` naming the file,
//! `Range` for a read past the end.
//!
//! Aligned buffers are over-allocated `Vec<u8>`s viewed from their first aligned byte
//! ([`AlignedBuf`]), so no `unsafe` is needed here.
//!
//! **The page-cache tier keeps its map, and with it the rule for mapped files** (issue 15): the
//! point of [`Tier::PageCache`] is to measure and use reads through a memory map (zero-copy
//! [`WeightSource::view`]s, pages faulted in on demand), which `pread` would turn into the disk
//! tier. A mapped file that another process truncates while it is mapped kills this process with
//! SIGBUS when a vanished page is touched, and nothing in a map-based reader can turn that into an
//! error. So open a file in [`Tier::PageCache`] only when it is yours and stays as it is while the
//! source lives (weights written before the run, not a checkpoint still being written or a file
//! in a shared folder that others rewrite); for files that may change, use [`Tier::Disk`] or
//! [`Tier::Ram`] (both read with `read`/`pread`: a truncated file is an `Io` or `Range` error).
//! `offload run` itself never maps: it reads only a model file's catalog, with `pread`
//! ([`crate::Workload::from_model`]).

use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use tensorlane::source::MmapSource;

use crate::error::Error;

/// Alignment used for `O_DIRECT` offsets, lengths and buffers (the page size, which is a multiple
/// of every common logical block size).
pub const DIRECT_ALIGN: usize = 4096;

/// Where a tensor's bytes are read from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Tier {
    /// Process memory (plain or pinned): a `memcpy`.
    Ram,
    /// The OS page cache through a memory map.
    PageCache,
    /// The disk through `O_DIRECT` `pread` (or buffered `pread` where `O_DIRECT` is refused).
    Disk,
}

impl Tier {
    /// A short lowercase name (`ram`, `page-cache`, `disk`).
    pub fn name(self) -> &'static str {
        match self {
            Tier::Ram => "ram",
            Tier::PageCache => "page-cache",
            Tier::Disk => "disk",
        }
    }
}

/// A byte buffer whose start is aligned to [`DIRECT_ALIGN`] and whose capacity is a multiple of
/// it, as `O_DIRECT` requires. Built from an over-allocated `Vec<u8>` (safe code only).
#[derive(Clone)]
pub struct AlignedBuf {
    storage: Vec<u8>,
    start: usize,
    len: usize,
}

impl std::fmt::Debug for AlignedBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AlignedBuf").field("len", &self.len).finish()
    }
}

impl AlignedBuf {
    /// A zeroed buffer of `len` bytes (capacity rounded up to [`DIRECT_ALIGN`]).
    pub fn zeroed(len: usize) -> Self {
        let cap = round_up(len, DIRECT_ALIGN);
        let storage = vec![0u8; cap + DIRECT_ALIGN];
        let start = storage.as_ptr().align_offset(DIRECT_ALIGN);
        debug_assert!(start < DIRECT_ALIGN);
        AlignedBuf { storage, start, len }
    }

    /// The buffer's bytes.
    pub fn as_slice(&self) -> &[u8] {
        &self.storage[self.start..self.start + self.len]
    }

    /// The buffer's bytes, writable.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        &mut self.storage[self.start..self.start + self.len]
    }

    /// The whole aligned capacity (a multiple of [`DIRECT_ALIGN`], at least `len`).
    fn capacity_mut(&mut self) -> &mut [u8] {
        let cap = round_up(self.len, DIRECT_ALIGN);
        &mut self.storage[self.start..self.start + cap]
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the buffer holds no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

fn round_up(x: usize, a: usize) -> usize {
    x.div_ceil(a) * a
}

/// A file opened for reads that bypass the page cache (`O_DIRECT`) where the file system allows
/// it, and for buffered `pread` otherwise.
#[derive(Debug)]
pub struct DirectFile {
    path: PathBuf,
    direct: Option<File>,
    buffered: File,
    size: u64,
    note: Option<String>,
}

impl DirectFile {
    /// Opens `path`. `O_DIRECT` is tried first (Linux); if the open is refused (`EINVAL`, as on
    /// tmpfs), reads go through the page cache and [`note`](Self::note) says why.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, Error> {
        let path = path.as_ref();
        let buffered = File::open(path).map_err(|e| io_error(path, "cannot open", e))?;
        let size = buffered
            .metadata()
            .map_err(|e| io_error(path, "cannot read the size of", e))?
            .len();
        let (direct, note) = match open_direct(path) {
            Ok(f) => (Some(f), None),
            Err(e) => (None, Some(format!("O_DIRECT refused ({e}); using buffered pread"))),
        };
        Ok(DirectFile {
            path: path.to_path_buf(),
            direct,
            buffered,
            size,
            note,
        })
    }

    /// File size in bytes.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// Whether reads currently bypass the page cache.
    pub fn is_direct(&self) -> bool {
        self.direct.is_some()
    }

    /// Why `O_DIRECT` is not in use, when it is not.
    pub fn note(&self) -> Option<&str> {
        self.note.as_deref()
    }

    /// Reads `len` bytes at `offset` into a fresh aligned buffer.
    pub fn read_at(&mut self, offset: u64, len: usize) -> Result<AlignedBuf, Error> {
        let mut out = AlignedBuf::zeroed(len);
        self.read_into(offset, out.as_mut_slice())?;
        Ok(out)
    }

    /// Reads exactly `dst.len()` bytes at `offset` into `dst`.
    ///
    /// With `O_DIRECT`, an aligned request (offset, length and `dst` address multiples of
    /// [`DIRECT_ALIGN`]) is read straight into `dst`; any other request is widened to aligned
    /// bounds, read into a bounce buffer and copied. A read that the kernel refuses with `EINVAL`
    /// switches this file to buffered reads (see [`note`](Self::note)) and is retried.
    pub fn read_into(&mut self, offset: u64, dst: &mut [u8]) -> Result<(), Error> {
        let end = offset
            .checked_add(dst.len() as u64)
            .filter(|&e| e <= self.size)
            .ok_or_else(|| past_end(&self.path, offset, dst.len(), self.size))?;
        if let Some(f) = &self.direct {
            match direct_read(f, offset, end, self.size, dst) {
                Ok(()) => return Ok(()),
                Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                    self.direct = None;
                    self.note = Some(format!("O_DIRECT read refused ({e}); using buffered pread"));
                }
                Err(e) => return Err(read_error(&self.path, offset, dst.len(), e)),
            }
        }
        pread_exact(&self.buffered, dst, offset).map_err(|e| read_error(&self.path, offset, dst.len(), e))
    }
}

/// An I/O failure on `path`, as the offload error.
fn io_error(path: &Path, what: &str, e: io::Error) -> Error {
    Error::Io(format!("{what} {}: {e}", path.display()))
}

/// A failed read of `len` bytes at `offset` of `path`.
fn read_error(path: &Path, offset: u64, len: usize, e: io::Error) -> Error {
    io_error(path, &format!("read of {len} bytes at {offset} failed in"), e)
}

/// A read that would pass the end of a source of `size` bytes.
fn past_end(path: &Path, offset: u64, len: usize, size: u64) -> Error {
    Error::Range(format!(
        "{}: read of {len} bytes at {offset} past the end ({size} bytes); read within the file",
        path.display()
    ))
}

/// `O_DIRECT` read of `[offset, end)` into `dst`, via a bounce buffer unless everything is aligned.
fn direct_read(f: &File, offset: u64, end: u64, size: u64, dst: &mut [u8]) -> io::Result<()> {
    let a = DIRECT_ALIGN as u64;
    let aligned = offset.is_multiple_of(a)
        && dst.len().is_multiple_of(DIRECT_ALIGN)
        && dst.as_ptr().align_offset(DIRECT_ALIGN) == 0;
    if aligned {
        return pread_direct_full(f, dst, offset, dst.len());
    }
    let lo = offset / a * a;
    let hi = end.div_ceil(a) * a;
    let mut bounce = AlignedBuf::zeroed((hi - lo) as usize);
    // The file may end before `hi`: O_DIRECT returns a short read there, which is expected.
    let want = (size.min(hi) - lo) as usize;
    pread_direct_full(f, bounce.capacity_mut(), lo, want)?;
    let skip = (offset - lo) as usize;
    dst.copy_from_slice(&bounce.as_slice()[skip..skip + dst.len()]);
    Ok(())
}

/// Reads until `want` bytes have arrived into the aligned `buf` (whose length is aligned and at
/// least `want`), issuing aligned `pread`s.
fn pread_direct_full(f: &File, buf: &mut [u8], offset: u64, want: usize) -> io::Result<()> {
    use std::os::unix::fs::FileExt;
    let mut done = 0usize;
    while done < want {
        let n = f.read_at(&mut buf[done..], offset + done as u64)?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!("O_DIRECT read ended at {} of {want} bytes", done),
            ));
        }
        done += n;
        if done < want && !done.is_multiple_of(DIRECT_ALIGN) {
            // A short read off an alignment boundary can only be the end of the file.
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!("short O_DIRECT read ({done} of {want} bytes)"),
            ));
        }
    }
    Ok(())
}

fn pread_exact(f: &File, buf: &mut [u8], offset: u64) -> io::Result<()> {
    std::os::unix::fs::FileExt::read_exact_at(f, buf, offset)
}

#[cfg(target_os = "linux")]
fn open_direct(path: &Path) -> io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECT)
        .open(path)
}

#[cfg(not(target_os = "linux"))]
fn open_direct(_path: &Path) -> io::Result<File> {
    Err(io::Error::new(
        io::ErrorKind::Unsupported,
        "O_DIRECT is Linux-only here",
    ))
}

/// One source of weight bytes, in one of the three [`Tier`]s.
#[derive(Debug)]
pub enum WeightSource {
    /// Bytes in process memory.
    Ram(Arc<[u8]>),
    /// A memory-mapped file (page cache): for files that stay as they are while it lives (see
    /// the module docs: a truncated mapped file raises SIGBUS).
    PageCache(MmapSource),
    /// A file read with `O_DIRECT` (or buffered `pread`, see [`DirectFile::note`]).
    Disk(DirectFile),
}

impl WeightSource {
    /// The tier this source reads from.
    pub fn tier(&self) -> Tier {
        match self {
            WeightSource::Ram(_) => Tier::Ram,
            WeightSource::PageCache(_) => Tier::PageCache,
            WeightSource::Disk(_) => Tier::Disk,
        }
    }

    /// Opens `path` in `tier`: [`Tier::Ram`] reads the whole file into memory, [`Tier::PageCache`]
    /// maps it, [`Tier::Disk`] opens it for `O_DIRECT` reads.
    pub fn open(path: impl AsRef<Path>, tier: Tier) -> Result<Self, Error> {
        let path = path.as_ref();
        Ok(match tier {
            Tier::Ram => WeightSource::Ram(
                std::fs::read(path)
                    .map_err(|e| io_error(path, "cannot read", e))?
                    .into(),
            ),
            Tier::PageCache => {
                WeightSource::PageCache(MmapSource::open(path).map_err(|e| io_error(path, "cannot map", e))?)
            }
            Tier::Disk => WeightSource::Disk(DirectFile::open(path)?),
        })
    }

    /// Total size in bytes.
    pub fn size(&self) -> u64 {
        match self {
            WeightSource::Ram(b) => b.len() as u64,
            WeightSource::PageCache(m) => m.bytes().len() as u64,
            WeightSource::Disk(d) => d.size(),
        }
    }

    /// The bytes `[offset, offset + len)` without copying, when they are in memory (RAM or a
    /// mapping); `None` for disk sources or out-of-range requests.
    pub fn view(&self, offset: u64, len: usize) -> Option<&[u8]> {
        let bytes: &[u8] = match self {
            WeightSource::Ram(b) => b,
            WeightSource::PageCache(m) => m.bytes(),
            WeightSource::Disk(_) => return None,
        };
        let start = usize::try_from(offset).ok()?;
        bytes.get(start..start.checked_add(len)?)
    }

    /// Copies the bytes `[offset, offset + dst.len())` into `dst` (for instance pinned staging).
    pub fn read_into(&mut self, offset: u64, dst: &mut [u8]) -> Result<(), Error> {
        if let WeightSource::Disk(d) = self {
            return d.read_into(offset, dst);
        }
        let size = self.size();
        let src = self.view(offset, dst.len()).ok_or_else(|| {
            Error::Range(format!(
                "{} weights: read of {} bytes at {offset} past the end ({size} bytes); read within the source",
                self.tier().name(),
                dst.len()
            ))
        })?;
        dst.copy_from_slice(src);
        Ok(())
    }
}

/// One tier's measured throughput.
#[derive(Clone, Debug)]
pub struct TierProbe {
    /// The tier measured.
    pub tier: Tier,
    /// Chunk size of each read, in bytes.
    pub chunk: usize,
    /// Bytes read in total.
    pub bytes: u64,
    /// Wall time of the timed pass, in seconds.
    pub secs: f64,
    /// Throughput in GB/s (10^9 bytes per second).
    pub gbps: f64,
    /// Anything that qualifies the figure (for instance `O_DIRECT` refused).
    pub note: Option<String>,
}

/// Measures reading all of `path` in `chunk`-byte reads into one aligned destination, per tier:
/// RAM (the file read into memory first, then `memcpy`), page cache (mapped; one untimed pass
/// warms the pages) and disk (`O_DIRECT`). Files must fit in memory for the RAM tier.
pub fn probe(path: impl AsRef<Path>, chunk: usize) -> Result<Vec<TierProbe>, Error> {
    let path = path.as_ref();
    let chunk = chunk.max(1);
    let mut dst = AlignedBuf::zeroed(chunk);
    let mut out = Vec::new();
    for tier in [Tier::Ram, Tier::PageCache, Tier::Disk] {
        let mut src = WeightSource::open(path, tier)?;
        let size = src.size();
        if tier == Tier::PageCache {
            read_all(&mut src, dst.as_mut_slice())?;
        }
        let t = Instant::now();
        read_all(&mut src, dst.as_mut_slice())?;
        let secs = t.elapsed().as_secs_f64().max(1e-9);
        let note = match &src {
            WeightSource::Disk(d) => d.note().map(str::to_owned),
            _ => None,
        };
        out.push(TierProbe {
            tier,
            chunk,
            bytes: size,
            secs,
            gbps: size as f64 / secs / 1e9,
            note,
        });
    }
    Ok(out)
}

/// Measures the disk tier alone ([`Tier::Disk`]: `O_DIRECT` `pread`, or buffered `pread` where
/// the file system refuses it, which [`TierProbe::note`] then says) over the first `limit` bytes
/// of `path` (all of it when smaller), in `chunk`-byte reads into one aligned buffer. Unlike
/// [`probe`] it never reads the whole file into memory nor maps it, so it suits a file bigger
/// than memory: the rate a runtime that streams weights from disk is measured against.
pub fn probe_disk(path: impl AsRef<Path>, chunk: usize, limit: u64) -> Result<TierProbe, Error> {
    let path = path.as_ref();
    let chunk = round_up(chunk.max(1), DIRECT_ALIGN);
    let mut dst = AlignedBuf::zeroed(chunk);
    let mut src = WeightSource::open(path, Tier::Disk)?;
    let bytes = src.size().min(limit);
    let t = Instant::now();
    read_range(&mut src, dst.as_mut_slice(), bytes)?;
    let secs = t.elapsed().as_secs_f64().max(1e-9);
    let note = match &src {
        WeightSource::Disk(d) => d.note().map(str::to_owned),
        _ => None,
    };
    Ok(TierProbe {
        tier: Tier::Disk,
        chunk,
        bytes,
        secs,
        gbps: bytes as f64 / secs / 1e9,
        note,
    })
}

fn read_all(src: &mut WeightSource, dst: &mut [u8]) -> Result<(), Error> {
    let size = src.size();
    read_range(src, dst, size)
}

/// Reads the first `size` bytes of `src` in `dst.len()`-byte reads.
fn read_range(src: &mut WeightSource, dst: &mut [u8], size: u64) -> Result<(), Error> {
    let mut off = 0u64;
    let mut sink = 0u8;
    while off < size {
        let n = (size - off).min(dst.len() as u64) as usize;
        src.read_into(off, &mut dst[..n])?;
        sink ^= dst[n - 1];
        off += n as u64;
    }
    std::hint::black_box(sink);
    Ok(())
}
