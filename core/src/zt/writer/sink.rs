//! Where a [`Writer`](super::Writer) puts bytes: the [`Sink`] trait and its in-memory implementation.

use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;

/// Why a [`Sink`] operation failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SinkError(pub String);

impl fmt::Display for SinkError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Where a [`Writer`] puts bytes: an append-only byte stream that knows its position.
///
/// `read_back` and `truncate` are optional; the writer uses them only to confirm a hash match
/// before two parts share a blob, and to take back a streamed part that turned out to duplicate an
/// earlier one. Without them a match is never trusted (the parts are stored twice), which a
/// canonical writer reports as an error because canonical form requires sharing.
pub trait Sink {
    /// Appends all of `buf`.
    fn write_all(&mut self, buf: &[u8]) -> core::result::Result<(), SinkError>;
    /// Absolute offset of the next byte written (the current file length).
    fn position(&self) -> u64;
    /// Reads bytes written earlier, at absolute `offset`.
    fn read_back(&mut self, offset: u64, buf: &mut [u8]) -> core::result::Result<(), SinkError> {
        let _ = (offset, buf);
        Err(SinkError("this sink cannot read back what it wrote".into()))
    }
    /// Drops everything from `len` on. The writer only ever truncates bytes it wrote itself in this
    /// session (never bytes that were there before an append).
    fn truncate(&mut self, len: u64) -> core::result::Result<(), SinkError> {
        let _ = len;
        Err(SinkError("this sink cannot truncate".into()))
    }
}

impl Sink for Vec<u8> {
    fn write_all(&mut self, buf: &[u8]) -> core::result::Result<(), SinkError> {
        self.extend_from_slice(buf);
        Ok(())
    }
    fn position(&self) -> u64 {
        self.len() as u64
    }
    fn read_back(&mut self, offset: u64, buf: &mut [u8]) -> core::result::Result<(), SinkError> {
        let end = offset.checked_add(buf.len() as u64).filter(|&e| e <= self.len() as u64);
        match end {
            Some(end) => {
                buf.copy_from_slice(&self[offset as usize..end as usize]);
                Ok(())
            }
            None => Err(SinkError(format!(
                "read back of {} bytes at {offset} is past the end ({})",
                buf.len(),
                self.len()
            ))),
        }
    }
    fn truncate(&mut self, len: u64) -> core::result::Result<(), SinkError> {
        Vec::truncate(self, len as usize);
        Ok(())
    }
}

impl<S: Sink + ?Sized> Sink for &mut S {
    fn write_all(&mut self, buf: &[u8]) -> core::result::Result<(), SinkError> {
        (**self).write_all(buf)
    }
    fn position(&self) -> u64 {
        (**self).position()
    }
    fn read_back(&mut self, offset: u64, buf: &mut [u8]) -> core::result::Result<(), SinkError> {
        (**self).read_back(offset, buf)
    }
    fn truncate(&mut self, len: u64) -> core::result::Result<(), SinkError> {
        (**self).truncate(len)
    }
}
