//! [`ReadAt`]: "give me bytes `[offset, offset + len)`" — the one way readers touch a file.
//!
//! The same reader runs over memory (a slice, an mmap), a file descriptor, a browser `File` or
//! HTTP Range requests: whoever implements `ReadAt`. When the bytes are in memory,
//! [`ReadAt::slice`] hands out a borrowed view and nothing is copied.

use alloc::vec::Vec;
use core::fmt;

/// Why a range could not be read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SourceError {
    /// The range runs past the end of the source.
    OutOfBounds {
        /// Requested start.
        offset: u64,
        /// Requested length.
        len: u64,
        /// Size of the source.
        size: u64,
    },
    /// The underlying I/O failed (the text comes from the host).
    Io(alloc::string::String),
}

impl fmt::Display for SourceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SourceError::OutOfBounds { offset, len, size } => {
                write!(
                    f,
                    "range [{offset}, {offset}+{len}) runs past the end of a {size}-byte source"
                )
            }
            SourceError::Io(e) => write!(f, "read failed: {e}"),
        }
    }
}

#[cfg(feature = "std")]
impl std::error::Error for SourceError {}

/// Random-access, read-only bytes.
pub trait ReadAt {
    /// Total size in bytes.
    fn size(&self) -> u64;

    /// Fills `buf` with the bytes at `offset..offset + buf.len()`.
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<(), SourceError>;

    /// The bytes at `offset..offset + len` without copying, when the source is in memory.
    fn slice(&self, offset: u64, len: u64) -> Option<&[u8]> {
        let _ = (offset, len);
        None
    }

    /// Reads `offset..offset + len` into a new buffer, after checking the range against the size
    /// (so a length the input merely claims is never allocated).
    fn read_vec(&self, offset: u64, len: u64) -> Result<Vec<u8>, SourceError> {
        check_range(offset, len, self.size())?;
        let mut v = alloc::vec![0u8; len as usize];
        self.read_at(offset, &mut v)?;
        Ok(v)
    }
}

/// Checks that `[offset, offset + len)` lies within `size` bytes (and fits this machine's `usize`).
pub fn check_range(offset: u64, len: u64, size: u64) -> Result<(), SourceError> {
    match offset.checked_add(len) {
        Some(end) if end <= size && usize::try_from(len).is_ok() => Ok(()),
        _ => Err(SourceError::OutOfBounds { offset, len, size }),
    }
}

impl ReadAt for [u8] {
    fn size(&self) -> u64 {
        self.len() as u64
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<(), SourceError> {
        let s = ReadAt::slice(self, offset, buf.len() as u64).ok_or(SourceError::OutOfBounds {
            offset,
            len: buf.len() as u64,
            size: self.len() as u64,
        })?;
        buf.copy_from_slice(s);
        Ok(())
    }

    fn slice(&self, offset: u64, len: u64) -> Option<&[u8]> {
        check_range(offset, len, self.len() as u64).ok()?;
        Some(&self[offset as usize..(offset + len) as usize])
    }
}

impl ReadAt for Vec<u8> {
    fn size(&self) -> u64 {
        self.len() as u64
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<(), SourceError> {
        self.as_slice().read_at(offset, buf)
    }
    fn slice(&self, offset: u64, len: u64) -> Option<&[u8]> {
        ReadAt::slice(self.as_slice(), offset, len)
    }
}

impl<T: ReadAt + ?Sized> ReadAt for &T {
    fn size(&self) -> u64 {
        (**self).size()
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<(), SourceError> {
        (**self).read_at(offset, buf)
    }
    fn slice(&self, offset: u64, len: u64) -> Option<&[u8]> {
        (**self).slice(offset, len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slices_and_bounds() {
        let v: Vec<u8> = (0..10).collect();
        assert_eq!(ReadAt::slice(&v, 2, 3), Some(&[2u8, 3, 4][..]));
        assert_eq!(ReadAt::slice(&v, 8, 3), None);
        assert!(v.read_vec(u64::MAX, 2).is_err());
        let mut b = [0u8; 2];
        v.read_at(8, &mut b).unwrap();
        assert_eq!(b, [8, 9]);
    }
}
