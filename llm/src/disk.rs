//! The CPU executor's disk tier under a budget: the streamed bytes of the weight matrices are read
//! from the model file with positioned reads (`pread`, `O_DIRECT` where the file system allows
//! it, buffered `pread` where it does not, e.g. tmpfs: [`DirectFile`]), never through the memory
//! map, by a reader thread that runs ahead of the forward pass: while layer L computes, layer
//! L+1's bytes are being read into a ring of page-aligned memory.
//!
//! The reader follows a fixed schedule: the streamed parts of the matrices in the order a forward
//! pass stages them ([`crate::cpu::Weights::disk_schedule`]), over and over. The executor takes the
//! pieces in that same order ([`Reader::take`]) and hands each back when the matrix is done with
//! it ([`Reader::give_back`]). The ring is one page-aligned mapping of fixed size (the plan's
//! ring, at least the largest piece), allocated once: pieces are placed one after the other in
//! it, wrapping at its end, so reads run ahead as far as the ring holds.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, Sender, TryRecvError, channel};
use std::time::{Duration, Instant};

use tensorlane_offload::device::tiers::{DIRECT_ALIGN, DirectFile};

/// One streamed read: the bytes `offset..offset + len` of the model file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Piece {
    /// The first byte in the file.
    pub offset: u64,
    /// Bytes.
    pub len: usize,
}

impl Piece {
    /// The ring bytes a piece is read into: from the aligned byte at or before `offset` to the
    /// aligned byte at or after its end (so that `O_DIRECT` reads straight into the ring).
    pub(crate) fn capacity(&self) -> usize {
        let skip = (self.offset % DIRECT_ALIGN as u64) as usize;
        (skip + self.len).div_ceil(DIRECT_ALIGN) * DIRECT_ALIGN
    }
}

/// The ring's memory: one anonymous mapping (page-aligned, as `O_DIRECT` wants; unmapped, so
/// returned to the system, when the last piece and the reader let go of it).
struct Ring {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: `Ring` is a plain allocation; which thread writes or reads which bytes of it is ruled
// by the reader's bookkeeping (a region is written only while no `Filled` refers to it).
unsafe impl Send for Ring {}
// SAFETY: as above: shared references only read regions no one writes.
unsafe impl Sync for Ring {}

impl Ring {
    fn new(len: usize) -> std::io::Result<Ring> {
        let len = len.max(DIRECT_ALIGN).div_ceil(DIRECT_ALIGN) * DIRECT_ALIGN;
        // SAFETY: an anonymous private mapping with no address hint; the result is checked.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        Ok(Ring { ptr: ptr.cast(), len })
    }

    /// The bytes `start..start + len`, writable.
    ///
    /// # Safety
    /// No other slice of these bytes may be alive while the result is (the reader writes only
    /// regions that no `Filled` holds).
    #[allow(clippy::mut_from_ref)]
    unsafe fn region_mut(&self, start: usize, len: usize) -> &mut [u8] {
        assert!(start + len <= self.len, "ring region out of bounds");
        // SAFETY: in bounds (checked) of a live mapping; exclusivity is the caller's promise.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.add(start), len) }
    }
}

impl Drop for Ring {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `Ring::new`, unmapped once (nothing refers to it any more:
        // every `Filled` holds an `Arc` of the ring).
        unsafe {
            libc::munmap(self.ptr.cast(), self.len);
        }
    }
}

/// A piece read by the reader: its bytes sit at `start + skip..start + skip + len` of the ring,
/// which no one writes until the piece is handed back ([`Reader::give_back`]).
pub(crate) struct Filled {
    ring: Option<Arc<Ring>>,
    /// Its place in the schedule's order of allocation (what [`Reader::give_back`] releases).
    seq: u64,
    start: usize,
    skip: usize,
    len: usize,
    /// Why the read failed (the bytes are zeros then).
    pub error: Option<String>,
    /// When the reader thread read it: from its first byte's request to its last's arrival.
    pub read: Option<(Instant, Instant)>,
}

impl std::fmt::Debug for Filled {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Filled")
            .field("len", &self.len)
            .field("error", &self.error)
            .finish()
    }
}

impl Filled {
    /// The piece's bytes.
    pub(crate) fn bytes(&self) -> &[u8] {
        match &self.ring {
            // SAFETY: in bounds of the ring (the reader placed the piece there); the reader does
            // not write these bytes until the piece comes back through `give_back`, which takes
            // `self` by value, ending this borrow first.
            Some(r) => unsafe { std::slice::from_raw_parts(r.ptr.add(self.start + self.skip), self.len) },
            None => &[],
        }
    }
}

/// The reader thread and the executor's ends of its two channels.
pub(crate) struct Reader {
    full: Receiver<Filled>,
    free: Option<Sender<u64>>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
    /// Whether reads bypass the page cache (`O_DIRECT`).
    pub direct: bool,
    /// The ring's bytes.
    pub ring_bytes: usize,
}

impl Reader {
    /// Opens `path` and starts reading `schedule` ahead, cyclically, into a ring of `ring_bytes`
    /// (at least the largest piece). A piece's bytes are read into again only once it and every
    /// piece taken before it have come back, so pieces should come back in the order they were
    /// taken; and the executor hands each piece back before it waits for the next (the CPU
    /// executor does: one streamed weight at a time), so the next one always fits. An empty
    /// schedule starts no thread.
    pub(crate) fn start(path: &std::path::Path, schedule: Vec<Piece>, ring_bytes: usize) -> crate::Result<Reader> {
        let file = DirectFile::open(path).map_err(|e| {
            crate::Error::Device(format!(
                "the disk tier cannot open {} ({e}); run without --budget or check that the file is readable",
                path.display()
            ))
        })?;
        let direct = file.is_direct();
        let largest = schedule.iter().map(Piece::capacity).max().unwrap_or(0);
        let ring_bytes = if schedule.is_empty() {
            0
        } else {
            ring_bytes.max(largest)
        };
        let (full_tx, full) = channel();
        let (free, free_rx) = channel();
        let stop = Arc::new(AtomicBool::new(false));
        let thread = if schedule.is_empty() {
            None
        } else {
            let ring = Ring::new(ring_bytes).map_err(|e| {
                crate::Error::Device(format!(
                    "cannot map a ring of {ring_bytes} bytes for the disk tier ({e}); give a smaller --budget"
                ))
            })?;
            let stop = stop.clone();
            let name = path.display().to_string();
            Some(
                std::thread::Builder::new()
                    .name("tensorlane-disk".into())
                    .spawn(move || read_ahead(file, &name, &schedule, Arc::new(ring), &full_tx, &free_rx, &stop))
                    .map_err(|e| crate::Error::Device(format!("cannot start the disk reader thread: {e}")))?,
            )
        };
        Ok(Reader {
            full,
            free: Some(free),
            stop,
            thread,
            direct,
            ring_bytes,
        })
    }

    /// The next piece of the schedule and how long the caller waited for it (zero when it was
    /// read already: the read was hidden behind compute).
    pub(crate) fn take(&mut self) -> (Filled, Duration) {
        let t = Instant::now();
        let f = self.full.recv().unwrap_or_else(|_| Filled {
            ring: None,
            seq: u64::MAX,
            start: 0,
            skip: 0,
            len: 0,
            error: Some("the disk reader thread stopped".into()),
            read: None,
        });
        (f, t.elapsed())
    }

    /// Hands a piece back: its bytes of the ring may be read into again.
    pub(crate) fn give_back(&mut self, f: Filled) {
        let seq = f.seq;
        drop(f);
        if let Some(tx) = &self.free {
            // The reader is gone only when the executor is being dropped.
            let _ = tx.send(seq);
        }
    }
}

impl Drop for Reader {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        // Closing the return channel wakes a reader waiting for room.
        self.free = None;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A piece in the ring: where, and whether the executor has handed it back.
struct Live {
    seq: u64,
    start: usize,
    end: usize,
    released: bool,
}

/// Where a piece of `need` bytes goes in a ring of `cap` bytes whose pieces in use are `live`
/// (oldest first, placed one after the other, wrapping at the end), or `None` when it does not
/// fit until older pieces come back.
fn place(live: &VecDeque<Live>, cap: usize, need: usize) -> Option<usize> {
    let (Some(front), Some(last)) = (live.front(), live.back()) else {
        return (need <= cap).then_some(0);
    };
    if last.start < front.start {
        // wrapped: free is last.end..front.start
        (last.end + need <= front.start).then_some(last.end)
    } else if last.end + need <= cap {
        Some(last.end)
    } else {
        (need <= front.start).then_some(0)
    }
}

/// The reader thread: reads `schedule` again and again into `ring`, each piece sent on `full`
/// once read, the ring's bytes of a piece reused once its number comes back on `free`.
fn read_ahead(
    mut file: DirectFile,
    name: &str,
    schedule: &[Piece],
    ring: Arc<Ring>,
    full: &Sender<Filled>,
    free: &Receiver<u64>,
    stop: &AtomicBool,
) {
    let mut live: VecDeque<Live> = VecDeque::new();
    let size = file.size();
    let release = |live: &mut VecDeque<Live>, seq: u64| {
        if let Some(l) = live.iter_mut().find(|l| l.seq == seq) {
            l.released = true;
        }
        while live.front().is_some_and(|l| l.released) {
            live.pop_front();
        }
    };
    for (seq, p) in schedule.iter().cycle().enumerate() {
        let seq = seq as u64;
        let need = p.capacity();
        let start = loop {
            if stop.load(Ordering::Relaxed) {
                return;
            }
            loop {
                match free.try_recv() {
                    Ok(s) => release(&mut live, s),
                    Err(TryRecvError::Empty) => break,
                    Err(TryRecvError::Disconnected) => return,
                }
            }
            if let Some(at) = place(&live, ring.len, need) {
                break at;
            }
            match free.recv() {
                Ok(s) => release(&mut live, s),
                Err(_) => return,
            }
        };
        live.push_back(Live {
            seq,
            start,
            end: start + need,
            released: false,
        });
        // SAFETY: `start..start + need` overlaps no live piece (`place`), so no `Filled` refers
        // to these bytes, and this thread is the only writer.
        let region = unsafe { ring.region_mut(start, need) };
        let skip = (p.offset % DIRECT_ALIGN as u64) as usize;
        let at = p.offset - skip as u64;
        let t0 = Instant::now();
        // The aligned span, cut at the end of the file (a short last read, through a bounce buffer).
        let want = (size.saturating_sub(at)).min(need as u64) as usize;
        let error = if skip + p.len > want {
            Some(format!(
                "{name}: {} bytes at {} lie past the end of the file ({size} bytes); the file changed or is damaged",
                p.len, p.offset
            ))
        } else {
            // The aligned whole blocks straight into the ring; a last partial block (the file's
            // end) through the file's small bounce buffer, not the whole piece through a big one.
            let whole = want / DIRECT_ALIGN * DIRECT_ALIGN;
            let (head, tail) = region[..want].split_at_mut(whole);
            file.read_into(at, head)
                .and_then(|()| {
                    if tail.is_empty() {
                        Ok(())
                    } else {
                        file.read_into(at + whole as u64, tail)
                    }
                })
                .err()
                .map(|e| e.to_string())
        };
        if error.is_some() {
            region.fill(0);
        }
        let f = Filled {
            ring: Some(ring.clone()),
            seq,
            start,
            skip,
            len: p.len,
            error,
            read: Some((t0, Instant::now())),
        };
        if full.send(f).is_err() {
            return;
        }
    }
}

/// The disk's read rate in GB/s, measured now with the `offload` crate's disk-tier probe
/// ([`tensorlane_offload::device::tiers::probe_disk`]: 4 MiB `O_DIRECT` reads, or buffered
/// `pread` where refused) over the first 128 MiB of `path`; with the probe's note (why `O_DIRECT`
/// was not used), if any.
pub(crate) fn probe_gbps(path: &std::path::Path) -> crate::Result<(f64, Option<String>)> {
    let p = tensorlane_offload::device::tiers::probe_disk(path, 4 << 20, 128 << 20).map_err(|e| {
        crate::Error::Device(format!(
            "measuring the read rate of {} failed ({e}); check that the file is readable",
            path.display()
        ))
    })?;
    Ok((p.gbps, p.note))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_schedule_in_order_again_and_again() {
        let dir = std::env::temp_dir().join(format!("tensorlane-disk-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("f.bin");
        let bytes: Vec<u8> = (0..100_000u32).map(|i| (i * 7 % 251) as u8).collect();
        std::fs::write(&path, &bytes).unwrap();
        let schedule = vec![
            Piece { offset: 3, len: 5000 },
            Piece {
                offset: 8192,
                len: 4096,
            },
            Piece {
                offset: 99_000,
                len: 1000,
            },
        ];
        // A ring of the largest piece: the reader waits for each piece to come back.
        let mut r = Reader::start(&path, schedule.clone(), 1).unwrap();
        assert_eq!(r.ring_bytes, 8192);
        for _ in 0..3 {
            for p in &schedule {
                let (f, _) = r.take();
                assert_eq!(f.error, None);
                assert_eq!(f.bytes(), &bytes[p.offset as usize..p.offset as usize + p.len]);
                r.give_back(f);
            }
        }
        // Out of order: the first piece held while the next two are handed back newest first.
        let mut r = Reader::start(&path, schedule.clone(), 2 * 8192).unwrap();
        for _ in 0..4 {
            let (first, _) = r.take();
            let (a, _) = r.take();
            let (b, _) = r.take();
            assert_eq!(b.bytes(), &bytes[99_000..100_000]);
            r.give_back(b);
            assert_eq!(a.bytes(), &bytes[8192..12288]);
            r.give_back(a);
            assert_eq!(first.bytes(), &bytes[3..5003]);
            r.give_back(first);
        }
        drop(r);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn places_pieces_one_after_the_other_and_wraps() {
        let l = |start, end| Live {
            seq: 0,
            start,
            end,
            released: false,
        };
        let mut live = VecDeque::new();
        assert_eq!(place(&live, 100, 100), Some(0));
        assert_eq!(place(&live, 100, 101), None);
        live.push_back(l(0, 40));
        assert_eq!(place(&live, 100, 60), Some(40));
        assert_eq!(place(&live, 100, 61), None);
        live.pop_front();
        live.push_back(l(50, 90));
        assert_eq!(place(&live, 100, 20), Some(0));
        assert_eq!(place(&live, 100, 51), None);
        live.push_back(l(0, 20));
        assert_eq!(place(&live, 100, 30), Some(20));
        assert_eq!(place(&live, 100, 31), None);
    }
}
