//! Bounded byte access for the HDF5 reader: the file context (base address, offset and length
//! sizes, a work budget), a little-endian cursor over one structure, and the two checksums HDF5
//! uses (Jenkins lookup3 for metadata, Fletcher-32 for chunks).

use alloc::borrow::Cow;
use alloc::string::String;
use core::cell::Cell;

use super::super::{ErrorKind, FormatError, bytes_at};
use crate::source::ReadAt;

/// The format name in errors.
pub(super) const FMT: &str = "hdf5";

/// The most structure reads one open (or one chunked read) may do: a file that needs more is
/// either enormous or built to make the reader spin.
const MAX_STEPS: u64 = 1 << 22;

/// A new error of this format.
pub(super) fn err(kind: ErrorKind, msg: impl Into<String>) -> FormatError {
    FormatError::new(FMT, kind, msg)
}

/// The file: the source, where the superblock is (all addresses are relative to it), and the
/// sizes of encoded offsets and lengths.
pub(super) struct Ctx<'s, S: ReadAt + ?Sized> {
    pub src: &'s S,
    pub base: u64,
    /// Size of an encoded address, in bytes (2, 4 or 8).
    pub so: u8,
    /// Size of an encoded length, in bytes (2, 4 or 8).
    pub sl: u8,
    steps: Cell<u64>,
}

impl<'s, S: ReadAt + ?Sized> Ctx<'s, S> {
    pub fn new(src: &'s S, base: u64, so: u8, sl: u8) -> Self {
        Ctx {
            src,
            base,
            so,
            sl,
            steps: Cell::new(0),
        }
    }

    /// The file size.
    pub fn size(&self) -> u64 {
        self.src.size()
    }

    /// Counts one unit of work; refuses once the budget is spent.
    pub fn step(&self) -> Result<(), FormatError> {
        let n = self.steps.get() + 1;
        self.steps.set(n);
        if n > MAX_STEPS {
            return Err(err(
                ErrorKind::Limit,
                alloc::format!("the file needs more than {MAX_STEPS} metadata reads; refusing to go on"),
            ));
        }
        Ok(())
    }

    /// The absolute file offset of relative address `addr`.
    pub fn abs(&self, addr: u64) -> Result<u64, FormatError> {
        self.base.checked_add(addr).filter(|a| *a < self.size()).ok_or_else(|| {
            err(
                ErrorKind::OutOfBounds,
                alloc::format!(
                    "address {addr} (+ base {}) points past the end of the file ({} bytes)",
                    self.base,
                    self.size()
                ),
            )
        })
    }

    /// `len` bytes at relative address `addr`, checked against the file size first.
    pub fn read(&self, addr: u64, len: u64) -> Result<Cow<'s, [u8]>, FormatError> {
        self.step()?;
        let at = self.abs(addr)?;
        if at.checked_add(len).is_none_or(|e| e > self.size()) {
            return Err(err(
                ErrorKind::Truncated,
                alloc::format!(
                    "a structure at byte {at} needs {len} bytes, but the file has {} bytes",
                    self.size()
                ),
            )
            .at(at));
        }
        bytes_at(FMT, self.src, at, len)
    }

    /// At most `len` bytes at `addr` (fewer at the end of the file): for structures whose size is
    /// only known once their start is parsed.
    pub fn read_upto(&self, addr: u64, len: u64) -> Result<Cow<'s, [u8]>, FormatError> {
        let at = self.abs(addr)?;
        self.read(addr, len.min(self.size() - at))
    }

    /// A cursor over `len` bytes at relative address `addr`.
    pub fn cur(&self, addr: u64, len: u64) -> Result<Cur<'s>, FormatError> {
        let at = self.abs(addr)?;
        Ok(Cur::new(self.read(addr, len)?, at))
    }

    /// A cursor over at most `len` bytes at `addr`.
    pub fn cur_upto(&self, addr: u64, len: u64) -> Result<Cur<'s>, FormatError> {
        let at = self.abs(addr)?;
        Ok(Cur::new(self.read_upto(addr, len)?, at))
    }

    /// Whether `addr` is the undefined address (all bits set in `so` bytes).
    pub fn undefined(&self, addr: u64) -> bool {
        addr == undef(self.so)
    }
}

/// The undefined address for `so`-byte addresses.
pub(super) fn undef(so: u8) -> u64 {
    if so >= 8 {
        u64::MAX
    } else {
        (1u64 << (8 * so as u32)) - 1
    }
}

/// A little-endian cursor over one structure's bytes; `at` is the file offset of byte 0 (for
/// error messages).
pub(super) struct Cur<'a> {
    b: Cow<'a, [u8]>,
    pos: usize,
    at: u64,
}

impl<'a> Cur<'a> {
    pub fn new(b: Cow<'a, [u8]>, at: u64) -> Self {
        Cur { b, pos: 0, at }
    }

    /// A cursor over a copy of `b` (message data).
    pub fn of(b: &'a [u8], at: u64) -> Self {
        Cur::new(Cow::Borrowed(b), at)
    }

    /// The file offset of the next byte.
    pub fn offset(&self) -> u64 {
        self.at.saturating_add(self.pos as u64)
    }

    pub fn pos(&self) -> usize {
        self.pos
    }

    pub fn len(&self) -> usize {
        self.b.len()
    }

    pub fn remaining(&self) -> usize {
        self.b.len() - self.pos
    }

    /// All bytes of the structure.
    pub fn all(&self) -> &[u8] {
        &self.b
    }

    fn short(&self, n: usize) -> FormatError {
        err(
            ErrorKind::Truncated,
            alloc::format!(
                "a structure ends after {} bytes but needs {n} more at byte {}",
                self.b.len(),
                self.offset()
            ),
        )
        .at(self.offset())
    }

    pub fn bytes(&mut self, n: usize) -> Result<&[u8], FormatError> {
        if n > self.remaining() {
            return Err(self.short(n));
        }
        let s = &self.b[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    pub fn skip(&mut self, n: usize) -> Result<(), FormatError> {
        self.bytes(n).map(|_| ())
    }

    /// Moves to position `p` (not past the end).
    pub fn seek(&mut self, p: usize) -> Result<(), FormatError> {
        if p > self.b.len() {
            return Err(self.short(p - self.pos.min(p)));
        }
        self.pos = p;
        Ok(())
    }

    pub fn u8(&mut self) -> Result<u8, FormatError> {
        Ok(self.bytes(1)?[0])
    }

    pub fn u16(&mut self) -> Result<u16, FormatError> {
        Ok(self.uv(2)? as u16)
    }

    pub fn u32(&mut self) -> Result<u32, FormatError> {
        Ok(self.uv(4)? as u32)
    }

    pub fn u64(&mut self) -> Result<u64, FormatError> {
        self.uv(8)
    }

    /// An `n`-byte little-endian unsigned integer (`n` ≤ 8).
    pub fn uv(&mut self, n: usize) -> Result<u64, FormatError> {
        let b = self.bytes(n.min(8))?;
        Ok(b.iter().rev().fold(0u64, |acc, &x| (acc << 8) | x as u64))
    }

    /// Checks a 4-byte signature.
    pub fn sig(&mut self, want: &[u8; 4], what: &str) -> Result<(), FormatError> {
        let at = self.offset();
        if self.bytes(4)? != want {
            return Err(err(
                ErrorKind::Syntax,
                alloc::format!(
                    "expected the {what} signature '{}' here; an address in the file is wrong",
                    String::from_utf8_lossy(want)
                ),
            )
            .at(at));
        }
        Ok(())
    }

    /// Checks the lookup3 checksum of the bytes before the cursor against the next 4 bytes.
    pub fn checksum(&mut self, what: &str) -> Result<(), FormatError> {
        let at = self.offset();
        let want = lookup3(&self.b[..self.pos]);
        let got = self.u32()?;
        if want != got {
            return Err(err(
                ErrorKind::Checksum,
                alloc::format!(
                    "the {what} checksum is {got:#010x} but its bytes hash to {want:#010x}; the file is corrupt"
                ),
            )
            .at(at));
        }
        Ok(())
    }
}

/// Jenkins' lookup3 `hashlittle` with initial value 0, as HDF5's `H5_checksum_lookup3`.
pub(super) fn lookup3(k: &[u8]) -> u32 {
    fn rot(x: u32, k: u32) -> u32 {
        x.rotate_left(k)
    }
    fn le(b: &[u8]) -> u32 {
        let mut a = [0u8; 4];
        a[..b.len()].copy_from_slice(b);
        u32::from_le_bytes(a)
    }
    let init = 0xdead_beefu32.wrapping_add(k.len() as u32);
    let (mut a, mut b, mut c) = (init, init, init);
    let mut k = k;
    while k.len() > 12 {
        a = a.wrapping_add(le(&k[0..4]));
        b = b.wrapping_add(le(&k[4..8]));
        c = c.wrapping_add(le(&k[8..12]));
        // mix
        a = a.wrapping_sub(c);
        a ^= rot(c, 4);
        c = c.wrapping_add(b);
        b = b.wrapping_sub(a);
        b ^= rot(a, 6);
        a = a.wrapping_add(c);
        c = c.wrapping_sub(b);
        c ^= rot(b, 8);
        b = b.wrapping_add(a);
        a = a.wrapping_sub(c);
        a ^= rot(c, 16);
        c = c.wrapping_add(b);
        b = b.wrapping_sub(a);
        b ^= rot(a, 19);
        a = a.wrapping_add(c);
        c = c.wrapping_sub(b);
        c ^= rot(b, 4);
        b = b.wrapping_add(a);
        k = &k[12..];
    }
    if k.is_empty() {
        return c;
    }
    a = a.wrapping_add(le(&k[..k.len().min(4)]));
    if k.len() > 4 {
        b = b.wrapping_add(le(&k[4..k.len().min(8)]));
    }
    if k.len() > 8 {
        c = c.wrapping_add(le(&k[8..]));
    }
    // final
    c ^= b;
    c = c.wrapping_sub(rot(b, 14));
    a ^= c;
    a = a.wrapping_sub(rot(c, 11));
    b ^= a;
    b = b.wrapping_sub(rot(a, 25));
    c ^= b;
    c = c.wrapping_sub(rot(b, 16));
    a ^= c;
    a = a.wrapping_sub(rot(c, 4));
    b ^= a;
    b = b.wrapping_sub(rot(a, 14));
    c ^= b;
    c = c.wrapping_sub(rot(b, 24));
    c
}

/// HDF5's Fletcher-32 (`H5_checksum_fletcher32`): big-endian 16-bit words, an odd last byte as
/// the high byte of a word.
pub(super) fn fletcher32(data: &[u8]) -> u32 {
    let (mut s1, mut s2) = (0u32, 0u32);
    let mut words = data.chunks_exact(2);
    loop {
        let mut n = 0;
        for w in words.by_ref() {
            s1 += ((w[0] as u32) << 8) | w[1] as u32;
            s2 += s1;
            n += 1;
            if n == 360 {
                break;
            }
        }
        if n == 0 {
            break;
        }
        s1 = (s1 & 0xffff) + (s1 >> 16);
        s2 = (s2 & 0xffff) + (s2 >> 16);
    }
    if let [last] = words.remainder() {
        s1 += (*last as u32) << 8;
        s2 += s1;
        s1 = (s1 & 0xffff) + (s1 >> 16);
        s2 = (s2 & 0xffff) + (s2 >> 16);
    }
    s1 = (s1 & 0xffff) + (s1 >> 16);
    s2 = (s2 & 0xffff) + (s2 >> 16);
    (s2 << 16) | s1
}

/// Bytes needed to encode `n` (HDF5's `H5VM_limit_enc_size`: floor(log2 n) / 8 + 1).
pub(super) fn enc_size(n: u64) -> usize {
    (log2(n) / 8 + 1) as usize
}

/// floor(log2 n), 0 for 0.
pub(super) fn log2(n: u64) -> u32 {
    if n == 0 { 0 } else { 63 - n.leading_zeros() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lookup3_vectors() {
        // From Bob Jenkins' lookup3.c driver5: hashlittle("", 0) and of "Four score...".
        assert_eq!(lookup3(b""), 0xdeadbeef);
        assert_eq!(lookup3(b"Four score and seven years ago"), 0x17770551);
    }

    #[test]
    fn fletcher_small() {
        // sum1 = 0x0102 + 0x0300 = 0x0402, sum2 = 0x0102 + 0x0402 = 0x0504.
        assert_eq!(fletcher32(&[1, 2, 3]), (0x0504 << 16) | 0x0402);
    }
}
