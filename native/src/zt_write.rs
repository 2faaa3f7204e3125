//! Writing `.zt` files on disk: the file side of [`tensorlane_core::zt::writer`].
//!
//! * [`ZtFile::create`] writes straight to a path; [`ZtFile::publish`] writes to a temporary name in
//!   the destination directory and, on [`ZtFile::finish`], fsyncs and renames it into place (and
//!   fsyncs the directory), so a reader sees the old file or the new one, never half of one. A
//!   publishing writer dropped without finishing removes its temporary file.
//! * [`ZtFile::append`] adds a generation to an existing file (§2.3): new blobs, manifest and footer
//!   go past the old EOF; nothing is truncated or overwritten (the sink refuses to truncate below
//!   the old size). Not atomic: until `finish` the footer is not at EOF.
//! * [`add_compressed`] stores a dense tensor as `zt.zstd-seekable/1` (non-canonical writers).
//! * Shards (§12): [`shard_path`] (`<stem>-<name>.zt` next to the root, the reference convention),
//!   [`file_digest`], and [`ZtFile::add_shard_file`] to register a written shard by its identity.
//!
//! ZtFile dereferences to [`Writer`], so every core method (`add`, `add_object`, streaming, ...)
//! is available on it.
//!
//! ```no_run
//! use tensorlane::zt_write::ZtFile;
//! use tensorlane_core::{DType, zt::writer::Options};
//!
//! let mut w = ZtFile::publish("model.zt", Options::default())?;
//! w.add("w", DType::F32, &[2], &[0, 0, 128, 63, 0, 0, 0, 64])?;
//! w.finish()?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::fs::{File, OpenOptions};
use std::io::{self, Read};
use std::ops::{Deref, DerefMut};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, mpsc};
use std::thread;

use tensorlane_core::DType;
use tensorlane_core::zt::Error as ZtError;
use tensorlane_core::zt::writer::{
    DigestAlgo, DigestHasher, ENCODING_ZSTD_SEEKABLE, Finished, ObjectSpec, Options, PartSpec, Sink, Writer,
};

use crate::Error;
use crate::publish::Pending;
use crate::source::FileSource;
use crate::zt_encode::{CompressionLevel, DEFAULT_FRAME_SIZE, encode_seekable};

const BUF: usize = 4 << 20;
/// Buffers in flight between the writer and its I/O thread.
const IN_FLIGHT: usize = 4;

enum Msg {
    Write(u64, Vec<u8>),
    Sync(mpsc::SyncSender<io::Result<()>>),
}

/// A buffered file [`Sink`] that can read back and truncate what it wrote, but never below the
/// length the file had when it was opened.
///
/// Writes are copied into 4 MiB buffers that a background thread `pwrite`s, so hashing the next
/// part overlaps with the kernel copy of the previous one. Errors surface at the next
/// `read_back`, `truncate` or `sync`, at the latest when the writer finishes.
#[derive(Debug)]
pub struct FileSink {
    file: Arc<File>,
    buf: Vec<u8>,
    /// Bytes handed to the I/O thread (excluding `buf`).
    flushed: u64,
    /// Never truncate below this.
    floor: u64,
    tx: Option<mpsc::SyncSender<Msg>>,
    recycled: mpsc::Receiver<Vec<u8>>,
    worker: Option<thread::JoinHandle<()>>,
    /// Write large chunks straight from the caller's memory on the calling thread (set while
    /// [`ZtFile::add_many`] hashes on a second thread, so no third thread competes for the cores).
    direct: Arc<AtomicBool>,
}

impl FileSink {
    /// Wraps `file`, positioned at its end (`len` bytes). Writes go after `len`.
    pub fn new(file: File, len: u64) -> Self {
        let file = Arc::new(file);
        let (tx, rx) = mpsc::sync_channel::<Msg>(IN_FLIGHT);
        let (back_tx, recycled) = mpsc::sync_channel::<Vec<u8>>(IN_FLIGHT + 2);
        let f = Arc::clone(&file);
        let worker = thread::spawn(move || {
            let mut failed: Option<io::Error> = None;
            for msg in rx {
                match msg {
                    Msg::Write(off, mut b) => {
                        if failed.is_none()
                            && let Err(e) = f.write_all_at(&b, off)
                        {
                            failed = Some(e);
                        }
                        b.clear();
                        let _ = back_tx.try_send(b);
                    }
                    Msg::Sync(ack) => {
                        let _ = ack.send(match failed.take() {
                            Some(e) => Err(e),
                            None => Ok(()),
                        });
                    }
                }
            }
        });
        FileSink {
            file,
            buf: Vec::with_capacity(BUF),
            flushed: len,
            floor: len,
            tx: Some(tx),
            recycled,
            worker: Some(worker),
            direct: Arc::new(AtomicBool::new(false)),
        }
    }

    /// Hands the buffer to the I/O thread.
    fn flush_buf(&mut self) -> io::Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let next = self.recycled.try_recv().unwrap_or_else(|_| Vec::with_capacity(BUF));
        let full = std::mem::replace(&mut self.buf, next);
        let n = full.len() as u64;
        self.tx
            .as_ref()
            .expect("open")
            .send(Msg::Write(self.flushed, full))
            .map_err(|_| io::Error::other("the write thread stopped"))?;
        self.flushed += n;
        Ok(())
    }

    /// Flushes and waits until every byte is in the file; reports the first write error.
    fn drain(&mut self) -> io::Result<()> {
        self.flush_buf()?;
        let (ack_tx, ack) = mpsc::sync_channel(1);
        self.tx
            .as_ref()
            .expect("open")
            .send(Msg::Sync(ack_tx))
            .map_err(|_| io::Error::other("the write thread stopped"))?;
        ack.recv().map_err(|_| io::Error::other("the write thread stopped"))?
    }

    /// Flushes and fsyncs the file.
    pub fn sync(mut self) -> io::Result<()> {
        self.drain()?;
        self.file.sync_all()
    }

    /// Flushes without fsync, waiting for the I/O thread.
    pub fn flush(mut self) -> io::Result<()> {
        self.drain()
    }
}

impl Drop for FileSink {
    fn drop(&mut self) {
        self.tx = None;
        if let Some(w) = self.worker.take() {
            let _ = w.join();
        }
    }
}

fn io_err(what: &str, e: io::Error) -> ZtError {
    ZtError::sink(format!("{what}: {e}"))
}

impl Sink for FileSink {
    fn write_all(&mut self, mut data: &[u8]) -> Result<(), ZtError> {
        if data.len() >= BUF && self.direct.load(Ordering::Relaxed) {
            // Everything queued must land first: the I/O thread writes at earlier offsets.
            self.drain().map_err(|e| io_err("write", e))?;
            self.file
                .write_all_at(data, self.flushed)
                .map_err(|e| io_err("write", e))?;
            self.flushed += data.len() as u64;
            return Ok(());
        }
        while !data.is_empty() {
            let room = BUF - self.buf.len();
            let n = room.min(data.len());
            self.buf.extend_from_slice(&data[..n]);
            data = &data[n..];
            if self.buf.len() == BUF {
                self.flush_buf().map_err(|e| io_err("write", e))?;
            }
        }
        Ok(())
    }
    fn position(&self) -> u64 {
        self.flushed + self.buf.len() as u64
    }
    fn read_back(&mut self, offset: u64, out: &mut [u8]) -> Result<(), ZtError> {
        self.drain().map_err(|e| io_err("write", e))?;
        self.file.read_exact_at(out, offset).map_err(|e| io_err("read back", e))
    }
    fn truncate(&mut self, len: u64) -> Result<(), ZtError> {
        if len < self.floor {
            return Err(ZtError::sink(format!(
                "refusing to truncate to {len}: the file held {} bytes before this writer (an append never truncates)",
                self.floor
            )));
        }
        self.drain().map_err(|e| io_err("write", e))?;
        self.file.set_len(len).map_err(|e| io_err("truncate", e))?;
        self.flushed = len;
        Ok(())
    }
}

/// How a [`ZtFile`] ends.
#[derive(Debug)]
enum Mode {
    /// Written in place.
    Direct,
    /// Written to a temporary file, renamed to `dest` on finish.
    Publish(Pending),
    /// A generation appended to an existing file.
    Append,
}

/// One dense tensor for [`ZtFile::add_many`].
#[derive(Clone, Copy, Debug)]
pub struct DenseItem<'a> {
    /// Object name.
    pub name: &'a str,
    /// Element dtype.
    pub dtype: DType,
    /// Shape, outermost first.
    pub shape: &'a [u64],
    /// C-order little-endian bytes.
    pub data: &'a [u8],
}

/// A `.zt` file being written. Dereferences to the core [`Writer`].
#[derive(Debug)]
pub struct ZtFile {
    writer: Option<Writer<FileSink>>,
    dest: PathBuf,
    mode: Mode,
}

/// What [`ZtFile::finish`] wrote.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Written {
    /// The final path.
    pub path: PathBuf,
    /// File size.
    pub size: u64,
    /// Manifest offset (0 for a data shard).
    pub manifest_offset: u64,
    /// The manifest bytes (empty for a data shard).
    pub manifest: Vec<u8>,
}

fn at<'a>(p: &'a Path, op: &'static str) -> impl FnOnce(io::Error) -> Error + 'a {
    Error::at(p, op)
}

impl ZtFile {
    /// Creates (or replaces) `path` and writes into it directly.
    pub fn create(path: impl AsRef<Path>, opts: Options) -> Result<Self, Error> {
        let dest = path.as_ref().to_path_buf();
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&dest)
            .map_err(at(&dest, "create"))?;
        let writer = Writer::new(FileSink::new(file, 0), opts)?;
        Ok(ZtFile {
            writer: Some(writer),
            dest,
            mode: Mode::Direct,
        })
    }

    /// Writes to a temporary name in `path`'s directory; [`finish`](Self::finish) fsyncs it and
    /// renames it to `path` (durable publication, §2.3).
    pub fn publish(path: impl AsRef<Path>, opts: Options) -> Result<Self, Error> {
        let dest = path.as_ref().to_path_buf();
        let (pending, file) = Pending::create(&dest)?;
        // On error `pending` is dropped here, which removes the temporary file.
        let writer = Writer::new(FileSink::new(file, 0), opts)?;
        Ok(ZtFile {
            writer: Some(writer),
            dest,
            mode: Mode::Publish(pending),
        })
    }

    /// Appends a generation to the existing file at `path` (§2.3; needs
    /// [`Options::non_canonical`]). Only the old footer and manifest are read.
    pub fn append(path: impl AsRef<Path>, opts: Options) -> Result<Self, Error> {
        let dest = path.as_ref().to_path_buf();
        let source = FileSource::open(&dest).map_err(at(&dest, "open"))?;
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(&dest)
            .map_err(at(&dest, "open for appending"))?;
        let len = file.metadata().map_err(at(&dest, "stat"))?.len();
        let writer = Writer::append(FileSink::new(file, len), &source, opts)?;
        Ok(ZtFile {
            writer: Some(writer),
            dest,
            mode: Mode::Append,
        })
    }

    /// Registers the shard file at `path` under `name`: its exact size and whole-file digest.
    pub fn add_shard_file(&mut self, name: &str, path: impl AsRef<Path>, algo: DigestAlgo) -> Result<(), Error> {
        let path = path.as_ref();
        let (size, digest) = file_digest(path, algo)?;
        self.add_shard(name, size, &digest)?;
        Ok(())
    }

    fn finished(&mut self, done: Finished<FileSink>) -> Result<Written, Error> {
        // Durability is promised by publish (and an append, which cannot be undone otherwise);
        // a plain create only flushes, like any buffered file write.
        let mut sink = done.sink;
        match std::mem::replace(&mut self.mode, Mode::Direct) {
            // A plain create only flushes, like any buffered file write.
            Mode::Direct => sink.drain().map_err(at(&self.dest, "write"))?,
            // Durability is promised by publish ...
            Mode::Publish(pending) => {
                sink.drain().map_err(at(&self.dest, "write"))?;
                pending.commit(&sink.file)?;
            }
            // ... and by an append, which cannot be undone otherwise.
            Mode::Append => {
                sink.drain().map_err(at(&self.dest, "write"))?;
                sink.file.sync_all().map_err(at(&self.dest, "fsync"))?;
            }
        }
        Ok(Written {
            path: self.dest.clone(),
            size: done.size,
            manifest_offset: done.manifest_offset,
            manifest: done.manifest,
        })
    }

    /// Adds dense tensors in order, hashing each next tensor on a second thread while the current
    /// one is written: the xxh3 pass that canonical form needs overlaps the write instead of
    /// preceding it. The same file as calling [`Writer::add`] for each, in order.
    pub fn add_many(&mut self, items: &[DenseItem<'_>]) -> Result<(), Error> {
        let w = self.writer.as_mut().expect("writer present until finish");
        if items.len() < 2 {
            for it in items {
                w.add(it.name, it.dtype, it.shape, it.data)?;
            }
            return Ok(());
        }
        let direct = Arc::clone(&w.sink().direct);
        direct.store(true, Ordering::Relaxed);
        let r = std::thread::scope(|s| {
            let (tx, rx) = std::sync::mpsc::sync_channel::<u64>(2);
            s.spawn(move || {
                for it in items {
                    // The receiver hangs up on error: stop hashing.
                    if tx.send(tensorlane_core::hash::xxh3_64(it.data)).is_err() {
                        break;
                    }
                }
            });
            for it in items {
                let h = rx.recv().expect("the hashing thread sends one hash per item");
                w.add_prehashed(it.name, it.dtype, it.shape, it.data, h)?;
            }
            Ok(())
        });
        direct.store(false, Ordering::Relaxed);
        r
    }

    /// Writes the manifest and footer; when publishing or appending, fsyncs (and renames the
    /// temporary file into place, then fsyncs the directory).
    pub fn finish(mut self) -> Result<Written, Error> {
        let w = self.writer.take().expect("writer present until finish");
        let done = w.finish()?;
        self.finished(done)
    }

    /// Like [`finish`](Self::finish), for a data shard (see [`Writer::finish_data_shard`]).
    pub fn finish_data_shard(mut self) -> Result<Written, Error> {
        let w = self.writer.take().expect("writer present until finish");
        let done = w.finish_data_shard()?;
        self.finished(done)
    }
}

impl Deref for ZtFile {
    type Target = Writer<FileSink>;
    fn deref(&self) -> &Self::Target {
        self.writer.as_ref().expect("writer present until finish")
    }
}

impl DerefMut for ZtFile {
    fn deref_mut(&mut self) -> &mut Self::Target {
        self.writer.as_mut().expect("writer present until finish")
    }
}

/// Adds a dense tensor stored as `zt.zstd-seekable/1` (1 MiB frames, content checksums, like the
/// reference writer; ruzstd's fastest level). Needs a non-canonical writer.
pub fn add_compressed<S: Sink>(
    w: &mut Writer<S>,
    name: &str,
    dtype: DType,
    shape: &[u64],
    data: &[u8],
) -> Result<(), Error> {
    let stored = encode_seekable(data, DEFAULT_FRAME_SIZE, CompressionLevel::Fastest)?;
    w.add_object(
        name,
        &ObjectSpec::dense(shape),
        &[PartSpec::encoded("data", dtype, ENCODING_ZSTD_SEEKABLE, &stored, data)],
    )?;
    Ok(())
}

/// Where shard `name` of the root file `root` lives by the reference convention:
/// `<stem>-<name>.zt` in the same directory.
pub fn shard_path(root: &Path, name: &str) -> PathBuf {
    let stem = root
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    root.with_file_name(format!("{stem}-{name}.zt"))
}

/// The size and whole-file digest (`algo:hex`) of the file at `path`, as a shard table entry
/// records them.
pub fn file_digest(path: &Path, algo: DigestAlgo) -> Result<(u64, String), Error> {
    let mut f = File::open(path).map_err(at(path, "open"))?;
    let mut buf = vec![0u8; 1 << 20];
    let mut size = 0u64;
    let mut h = DigestHasher::new(algo);
    loop {
        let n = f.read(&mut buf).map_err(at(path, "read"))?;
        if n == 0 {
            break;
        }
        size += n as u64;
        h.update(&buf[..n]);
    }
    Ok((size, h.finish()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    #[test]
    fn add_many_writes_the_same_file_as_add() {
        let dir = std::env::temp_dir().join(format!("tl-zt-many-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        // Small parts go through the buffered path, parts of 4 MiB or more are written directly;
        // repeats of both are shared.
        let data: Vec<Vec<u8>> = vec![
            vec![0; 70_000],
            vec![1; 5 << 20],
            vec![0; 70_000],
            vec![1; 5 << 20],
            vec![2; (4 << 20) + 3],
        ];
        let shapes: Vec<[u64; 1]> = data.iter().map(|d| [d.len() as u64]).collect();
        let names = ["a", "b", "c", "d", "e"];
        let items: Vec<DenseItem<'_>> = (0..5)
            .map(|i| DenseItem {
                name: names[i],
                dtype: DType::U8,
                shape: &shapes[i],
                data: &data[i],
            })
            .collect();
        let mut v = Writer::new(Vec::new(), Options::default()).unwrap();
        for it in &items {
            v.add(it.name, it.dtype, it.shape, it.data).unwrap();
        }
        let expected = v.finish().unwrap().sink;
        let path = dir.join("many.zt");
        let mut w = ZtFile::create(&path, Options::default()).unwrap();
        w.add_many(&items).unwrap();
        w.finish().unwrap();
        // Identical bytes, the repeated contents shared as in the sequential write.
        assert_eq!(fs::read(&path).unwrap(), expected);
        // sha256 digests cannot be pre-hashed with xxh3: refused, nothing written for it.
        let mut w = ZtFile::create(&path, Options::non_canonical().digest(DigestAlgo::Sha256)).unwrap();
        assert!(w.add_many(&items).is_err());
        // Out-of-order names still fail like add does.
        let mut w = ZtFile::create(&path, Options::default()).unwrap();
        let rev: Vec<DenseItem<'_>> = items.iter().rev().copied().collect();
        assert!(w.add_many(&rev).is_err());
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn publish_append_and_shards() {
        let dir = std::env::temp_dir().join(format!("tl-zt-write-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let root = dir.join("m.zt");
        // A publisher dropped unfinished leaves nothing.
        {
            let mut w = ZtFile::publish(&root, Options::default()).unwrap();
            w.add("a", DType::U8, &[1], &[1]).unwrap();
        }
        assert!(fs::read_dir(&dir).unwrap().next().is_none());

        let mut v = Writer::new(Vec::new(), Options::default()).unwrap();
        v.add("a", DType::U8, &[3], &[1, 2, 3]).unwrap();
        let in_memory = v.finish().unwrap().sink;
        let mut w = ZtFile::publish(&root, Options::default()).unwrap();
        w.add("a", DType::U8, &[3], &[1, 2, 3]).unwrap();
        let done = w.finish().unwrap();
        assert_eq!(fs::read(&root).unwrap(), in_memory);
        assert_eq!(done.size, in_memory.len() as u64);

        let before = fs::read(&root).unwrap();
        let mut w = ZtFile::append(&root, Options::non_canonical()).unwrap();
        w.add("b", DType::U8, &[2], &[4, 5]).unwrap();
        add_compressed(&mut w, "c", DType::F32, &[1000], &[0u8; 4000]).unwrap();
        w.finish().unwrap();
        let after = fs::read(&root).unwrap();
        assert_eq!(&after[..before.len()], &before[..]);

        let sp = shard_path(&root, "00001");
        assert_eq!(sp, dir.join("m-00001.zt"));
        let mut s = ZtFile::publish(&sp, Options::non_canonical().alignment(4096)).unwrap();
        let blob = s.put_blob(&[7u8; 16]).unwrap();
        s.finish_data_shard().unwrap();
        let r2 = dir.join("r.zt");
        let mut w = ZtFile::publish(&r2, Options::non_canonical()).unwrap();
        w.add_shard_file("00001", &sp, DigestAlgo::Sha256).unwrap();
        w.add_object(
            "x",
            &ObjectSpec::dense(&[16]),
            &[PartSpec::external(
                "data",
                DType::U8,
                "00001",
                blob.offset,
                blob.length,
                Some(blob.digest),
            )],
        )
        .unwrap();
        w.finish().unwrap();
        fs::remove_dir_all(&dir).unwrap();
    }
}
