//! Where a [`Writer`](super::Writer) puts bytes: the [`Sink`] trait and its in-memory implementation.

use alloc::format;
use alloc::vec::Vec;

use crate::zt::Error;

/// Where a [`Writer`](super::Writer) puts bytes: an append-only byte stream that knows its
/// position. A failing operation returns [`Error::sink`] (rule `Io`, saying what failed).
///
/// `read_back` and `truncate` are optional; the writer uses them only to confirm a hash match
/// before two parts share a blob, and to take back a streamed part that turned out to duplicate an
/// earlier one. Without them a match is never trusted (the parts are stored twice), which a
/// canonical writer reports as an error because canonical form requires sharing.
pub trait Sink {
    /// Appends all of `buf`.
    fn write_all(&mut self, buf: &[u8]) -> core::result::Result<(), Error>;
    /// Absolute offset of the next byte written (the current file length).
    fn position(&self) -> u64;
    /// Reads bytes written earlier, at absolute `offset`.
    fn read_back(&mut self, offset: u64, buf: &mut [u8]) -> core::result::Result<(), Error> {
        let _ = (offset, buf);
        Err(Error::sink("this sink cannot read back what it wrote"))
    }
    /// Drops everything from `len` on. The writer only ever truncates bytes it wrote itself in this
    /// session (never bytes that were there before an append).
    fn truncate(&mut self, len: u64) -> core::result::Result<(), Error> {
        let _ = len;
        Err(Error::sink("this sink cannot truncate"))
    }
}

impl Sink for Vec<u8> {
    fn write_all(&mut self, buf: &[u8]) -> core::result::Result<(), Error> {
        self.extend_from_slice(buf);
        Ok(())
    }
    fn position(&self) -> u64 {
        self.len() as u64
    }
    fn read_back(&mut self, offset: u64, buf: &mut [u8]) -> core::result::Result<(), Error> {
        let end = offset.checked_add(buf.len() as u64).filter(|&e| e <= self.len() as u64);
        match end {
            Some(end) => {
                buf.copy_from_slice(&self[offset as usize..end as usize]);
                Ok(())
            }
            None => Err(Error::sink(format!(
                "read back of {} bytes at {offset} is past the end ({})",
                buf.len(),
                self.len()
            ))),
        }
    }
    fn truncate(&mut self, len: u64) -> core::result::Result<(), Error> {
        Vec::truncate(self, len as usize);
        Ok(())
    }
}

impl<S: Sink + ?Sized> Sink for &mut S {
    fn write_all(&mut self, buf: &[u8]) -> core::result::Result<(), Error> {
        (**self).write_all(buf)
    }
    fn position(&self) -> u64 {
        (**self).position()
    }
    fn read_back(&mut self, offset: u64, buf: &mut [u8]) -> core::result::Result<(), Error> {
        (**self).read_back(offset, buf)
    }
    fn truncate(&mut self, len: u64) -> core::result::Result<(), Error> {
        (**self).truncate(len)
    }
}
