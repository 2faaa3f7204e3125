//! [`ReadAt`] sources over files: a memory map (zero-copy views) and positioned reads (`pread`),
//! for files that cannot or should not be mapped; and [`Source`], a local map or (feature
//! `remote`) a [`crate::remote::RemoteSource`], opened from a path or a URL alike.

use std::fs::File;
use std::io;
use std::path::Path;
use std::sync::Arc;

use tensorlane_core::source::{ReadAt, SourceError, check_range};

/// What a file's contents are known by without reading them: its size, modification and
/// status-change times and inode, from `fstat` of an open descriptor. A write in place changes
/// the times (and the size when it truncates or extends); a file replaced by a rename keeps the
/// open descriptor on the old inode, whose bytes stay as they were. Not detectable: a write
/// that restores both times, or one within the file system's timestamp granularity of the
/// open (nanoseconds on ext4, xfs and btrfs; 2 s on FAT).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FileId {
    /// Size in bytes.
    pub len: u64,
    /// Modification time, nanoseconds since the epoch (0 where the platform has none).
    pub mtime_ns: i128,
    /// Status-change time, nanoseconds since the epoch (unix; 0 elsewhere).
    pub ctime_ns: i128,
    /// Inode number (unix; 0 elsewhere).
    pub ino: u64,
}

impl FileId {
    /// The identity of the open `file` now.
    pub fn of(file: &File) -> io::Result<FileId> {
        let m = file.metadata()?;
        #[cfg(unix)]
        {
            use std::os::unix::fs::MetadataExt;
            Ok(FileId {
                len: m.len(),
                mtime_ns: i128::from(m.mtime()) * 1_000_000_000 + i128::from(m.mtime_nsec()),
                ctime_ns: i128::from(m.ctime()) * 1_000_000_000 + i128::from(m.ctime_nsec()),
                ino: m.ino(),
            })
        }
        #[cfg(not(unix))]
        {
            let mtime_ns = m
                .modified()
                .ok()
                .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                .map_or(0, |d| d.as_nanos() as i128);
            Ok(FileId {
                len: m.len(),
                mtime_ns,
                ctime_ns: 0,
                ino: 0,
            })
        }
    }

    /// An error saying how `now` differs from `self` (the identity at open), or `Ok` when it
    /// does not.
    pub fn check(&self, now: &FileId) -> Result<(), SourceError> {
        if self == now {
            return Ok(());
        }
        let what = if now.len != self.len {
            format!("{} bytes now, {} when it was opened", now.len, self.len)
        } else if now.ino != self.ino {
            "another file now".into()
        } else {
            "written in place: its modification time moved".into()
        };
        Err(SourceError::Io(format!(
            "the file changed while it was read ({what}), so what was read may mix two versions; \
             run again once nothing writes to it"
        )))
    }
}

/// A read-only memory map of a whole file. Cloning shares the mapping.
#[derive(Clone, Debug)]
pub struct MmapSource {
    map: Option<Arc<memmap2::Mmap>>,
    /// The open file and its identity at open (none for [`MmapSource::empty`]).
    file: Option<Arc<(File, FileId)>>,
}

impl MmapSource {
    /// Maps `path` read-only. An empty file needs no mapping (and cannot have one).
    pub fn open(path: impl AsRef<Path>) -> io::Result<Self> {
        let f = File::open(path.as_ref())?;
        let id = FileId::of(&f)?;
        if id.len == 0 {
            return Ok(MmapSource {
                map: None,
                file: Some(Arc::new((f, id))),
            });
        }
        // SAFETY: the mapping is read-only and private to this process's view. Another process
        // truncating the file while it is mapped makes a later access raise SIGBUS, which no
        // mmap-based reader can turn into an error: callers that read files which may change use
        // FileSource (pread) instead (the CLI's streaming reads, `Model` with `mmap: false`).
        // tensorlane never writes through the map.
        let map = unsafe { memmap2::Mmap::map(&f)? };
        Ok(MmapSource {
            map: Some(Arc::new(map)),
            file: Some(Arc::new((f, id))),
        })
    }

    /// A source of no bytes (what stands in for a file that is not there).
    pub fn empty() -> Self {
        MmapSource { map: None, file: None }
    }

    /// The whole file's bytes.
    pub fn bytes(&self) -> &[u8] {
        self.map.as_deref().map_or(&[], |m| &m[..])
    }
}

impl ReadAt for MmapSource {
    fn size(&self) -> u64 {
        self.bytes().len() as u64
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<(), SourceError> {
        self.bytes().read_at(offset, buf)
    }
    fn slice(&self, offset: u64, len: u64) -> Option<&[u8]> {
        ReadAt::slice(self.bytes(), offset, len)
    }
}

/// Positioned reads from an open file (`pread`); nothing is mapped and nothing borrowed.
///
/// Use it where the file may change while it is read (a model being rewritten, a download in
/// place): a file truncated underneath gives [`SourceError::OutOfBounds`] with its new size, where
/// a mapping would kill the process with SIGBUS. [`MmapSource`] is for files that stay as they
/// are while mapped.
#[derive(Debug)]
pub struct FileSource {
    file: File,
    size: u64,
    id: FileId,
}

impl FileSource {
    /// Opens `path` for positioned reads.
    pub fn open(path: impl AsRef<Path>) -> io::Result<Self> {
        let file = File::open(path.as_ref())?;
        let id = FileId::of(&file)?;
        Ok(FileSource { file, size: id.len, id })
    }
}

impl ReadAt for FileSource {
    fn size(&self) -> u64 {
        self.size
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<(), SourceError> {
        check_range(offset, buf.len() as u64, self.size)?;
        read_exact_at(&self.file, buf, offset).map_err(|e| {
            // A file truncated after it was opened: say so, with its size now (an error, where a
            // mapping would have raised SIGBUS).
            match self.file.metadata() {
                Ok(m) if e.kind() == io::ErrorKind::UnexpectedEof && m.len() < self.size => SourceError::OutOfBounds {
                    offset,
                    len: buf.len() as u64,
                    size: m.len(),
                },
                _ => SourceError::Io(format!("{e} (reading {} bytes at offset {offset})", buf.len())),
            }
        })
    }
}

/// The whole of `src` in a new buffer, read in pieces of 16 MiB: a file cut short while it is
/// read fails at the next piece ([`SourceError::OutOfBounds`] from [`FileSource`]), not after one
/// long read. The caller checks the size against its own limit first; the allocation is the
/// source's real size, not a size the input claims.
pub fn read_whole<S: ReadAt + ?Sized>(src: &S) -> Result<Vec<u8>, SourceError> {
    const PIECE: usize = 16 << 20;
    let size = src.size();
    check_range(0, size, size)?;
    let mut out = vec![0u8; size as usize];
    for (i, piece) in out.chunks_mut(PIECE).enumerate() {
        src.read_at((i * PIECE) as u64, piece)?;
    }
    Ok(out)
}

/// A file to read: mapped from the local disk, or (feature `remote`) an object on a remote store
/// read by range. Readers take it as any [`ReadAt`]; cloning shares the map or the connection.
#[derive(Clone, Debug)]
pub enum Source {
    /// A local file, memory-mapped.
    Mapped(MmapSource),
    /// A local file read with `pread` ([`FileSource`]): reads copy, and a file truncated
    /// underneath gives an error where a map would raise SIGBUS.
    Read(Arc<FileSource>),
    /// An object store or HTTP(S) object ([`crate::remote`]).
    #[cfg(feature = "remote")]
    Remote(crate::remote::RemoteSource),
}

impl Source {
    /// Opens `location`: a URL ([`crate::remote::is_url`]: `s3://`, `gs://`, `az://`,
    /// `http(s)://`) with [`crate::remote::default_options`], else a local path, mapped.
    /// The error names the location.
    pub fn open(location: impl AsRef<Path>) -> Result<Source, SourceError> {
        Source::open_with(location, true)
    }

    /// [`open`](Self::open), a local path mapped (`mmap`) or read with `pread` (see
    /// [`FileSource`] for which to choose).
    pub fn open_with(location: impl AsRef<Path>, mmap: bool) -> Result<Source, SourceError> {
        let location = location.as_ref();
        #[cfg(feature = "remote")]
        if let Some(url) = location.to_str().filter(|s| crate::remote::is_url(s)) {
            let opts = crate::remote::default_options()?;
            return crate::remote::RemoteSource::open(url, &opts).map(Source::Remote);
        }
        Source::open_local(location, mmap)
            .map_err(|e| SourceError::Io(format!("cannot read {}: {e}", location.display())))
    }

    /// Opens the local file `path`, mapped (`mmap`) or for `pread`.
    pub fn open_local(path: impl AsRef<Path>, mmap: bool) -> io::Result<Source> {
        Ok(if mmap {
            Source::Mapped(MmapSource::open(path)?)
        } else {
            Source::Read(Arc::new(FileSource::open(path)?))
        })
    }

    /// The map, when the source is a local file.
    pub fn mapped(&self) -> Option<&MmapSource> {
        match self {
            Source::Mapped(m) => Some(m),
            Source::Read(_) => None,
            #[cfg(feature = "remote")]
            Source::Remote(_) => None,
        }
    }

    /// Whether the local file is still what it was when it was opened ([`FileId`]): an error
    /// saying what changed when it was written in place, truncated or extended since. Call it
    /// after a pass that read the file, before trusting what the pass computed. Remote objects
    /// are checked by their ETag on every request instead, and always pass here.
    pub fn check_unchanged(&self) -> Result<(), SourceError> {
        let (file, id) = match self {
            Source::Mapped(m) => match &m.file {
                Some(f) => (&f.0, &f.1),
                None => return Ok(()),
            },
            Source::Read(f) => (&f.file, &f.id),
            #[cfg(feature = "remote")]
            Source::Remote(_) => return Ok(()),
        };
        let now = FileId::of(file).map_err(|e| SourceError::Io(format!("cannot stat the file again: {e}")))?;
        id.check(&now)
    }

    /// The whole file's bytes: borrowed from the map, or (remote) fetched in parallel parts.
    pub fn bytes(&self) -> Result<std::borrow::Cow<'_, [u8]>, SourceError> {
        match self {
            Source::Mapped(m) => Ok(std::borrow::Cow::Borrowed(m.bytes())),
            Source::Read(f) => f.read_vec(0, f.size()).map(std::borrow::Cow::Owned),
            #[cfg(feature = "remote")]
            Source::Remote(r) => r.read_vec(0, r.size()).map(std::borrow::Cow::Owned),
        }
    }
}

impl From<MmapSource> for Source {
    fn from(m: MmapSource) -> Source {
        Source::Mapped(m)
    }
}

impl ReadAt for Source {
    fn size(&self) -> u64 {
        match self {
            Source::Mapped(m) => m.size(),
            Source::Read(f) => f.size(),
            #[cfg(feature = "remote")]
            Source::Remote(r) => r.size(),
        }
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<(), SourceError> {
        match self {
            Source::Mapped(m) => m.read_at(offset, buf),
            Source::Read(f) => f.read_at(offset, buf),
            #[cfg(feature = "remote")]
            Source::Remote(r) => r.read_at(offset, buf),
        }
    }
    fn slice(&self, offset: u64, len: u64) -> Option<&[u8]> {
        match self {
            Source::Mapped(m) => m.slice(offset, len),
            Source::Read(_) => None,
            #[cfg(feature = "remote")]
            Source::Remote(_) => None,
        }
    }
}

/// `pread` until `buf` is full; a file that ends first is `UnexpectedEof`.
#[cfg(unix)]
pub(crate) fn read_exact_at(f: &File, buf: &mut [u8], offset: u64) -> io::Result<()> {
    std::os::unix::fs::FileExt::read_exact_at(f, buf, offset)
}

/// `pread` until `buf` is full; a file that ends first is `UnexpectedEof`.
#[cfg(windows)]
pub(crate) fn read_exact_at(f: &File, mut buf: &mut [u8], mut offset: u64) -> io::Result<()> {
    while !buf.is_empty() {
        let n = std::os::windows::fs::FileExt::seek_read(f, buf, offset)?;
        if n == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        buf = &mut buf[n..];
        offset += n as u64;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pread_of_a_truncated_file_is_an_error() {
        let dir = std::env::temp_dir().join(format!("tl-source-trunc-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("f.bin");
        std::fs::write(&p, vec![7u8; 100_000]).unwrap();
        let f = FileSource::open(&p).unwrap();
        std::fs::OpenOptions::new()
            .write(true)
            .open(&p)
            .unwrap()
            .set_len(10_000)
            .unwrap();
        let e = f.read_vec(50_000, 1000).unwrap_err();
        assert_eq!(
            e,
            SourceError::OutOfBounds {
                offset: 50_000,
                len: 1000,
                size: 10_000
            }
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn mmap_and_pread_agree() {
        let dir = std::env::temp_dir().join(format!("tl-source-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("f.bin");
        let data: Vec<u8> = (0..10_000u32).map(|i| (i * 7) as u8).collect();
        std::fs::write(&p, &data).unwrap();
        let m = MmapSource::open(&p).unwrap();
        let f = FileSource::open(&p).unwrap();
        assert_eq!(m.size(), 10_000);
        assert_eq!(f.size(), 10_000);
        assert_eq!(m.slice(100, 5), Some(&data[100..105]));
        assert_eq!(f.slice(100, 5), None);
        assert_eq!(f.read_vec(9_990, 10).unwrap(), &data[9_990..]);
        assert!(f.read_vec(9_995, 10).is_err());
        let empty = dir.join("empty");
        std::fs::write(&empty, b"").unwrap();
        assert_eq!(MmapSource::open(&empty).unwrap().size(), 0);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
