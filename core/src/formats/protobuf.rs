//! A small protobuf wire-format walker over [`ReadAt`], for ONNX.
//!
//! Hand-written rather than generated: the protobuf crates need a code generator and `std`, and
//! they parse a message into memory, `bytes` fields included. An ONNX model embeds its weights
//! in `raw_data` fields, so a generated parser reads (and copies) the whole file to list its
//! tensors. This walker reads only tags, lengths and the small fields the caller asks for: a
//! length-delimited field comes back as `offset..offset + len` and its bytes are skipped, not
//! read.
//!
//! Rules enforced on every field: a tag is a varint of at most 5 bytes with a field number in
//! `1..=2^29-1`; a varint is at most 10 bytes and fits 64 bits; a field (and a length-delimited
//! payload) ends within its parent message; wire types 3 and 4 (groups) and 6 and 7 (invalid)
//! are refused as [`ErrorKind::Syntax`]. Nesting is the caller's: it descends only into the
//! messages it knows and counts the depth against [`super::MAX_DEPTH`].
//!
//! When the source is in memory ([`ReadAt::slice`]), bytes are looked at in place. Otherwise
//! they are fetched through a small window: 4 KiB after a jump (a skipped payload), doubling up
//! to 256 KiB while reading goes on sequentially, so listing a model reads little more than its
//! tags.

use alloc::borrow::Cow;
use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;

use super::{ErrorKind, FormatError};
use crate::source::ReadAt;

/// The window read after a jump (bytes).
const WINDOW_MIN: usize = 4 << 10;
/// The largest window, reached while reading sequentially (bytes).
const WINDOW_MAX: usize = 256 << 10;
/// The longest varint: 10 bytes hold 64 bits.
const MAX_VARINT: u64 = 10;

/// A field's value as it is on the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Value {
    /// Wire type 0.
    Varint(u64),
    /// Wire type 1 (little-endian).
    Fixed64(u64),
    /// Wire type 5 (little-endian).
    Fixed32(u32),
    /// Wire type 2: the payload is at `offset..offset + len` of the source; it has not been read.
    Bytes {
        /// Absolute offset of the payload.
        offset: u64,
        /// Payload length.
        len: u64,
    },
}

/// One field of a message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Field {
    /// The field number.
    pub number: u32,
    /// Absolute offset of the field's tag (for error messages).
    pub at: u64,
    /// The value.
    pub value: Value,
}

impl Field {
    /// The payload range of a length-delimited field, `None` for other wire types.
    pub fn bytes(&self) -> Option<(u64, u64)> {
        match self.value {
            Value::Bytes { offset, len } => Some((offset, len)),
            _ => None,
        }
    }

    /// The end of the field (the offset after its payload), for a length-delimited field.
    pub fn end(&self) -> Option<u64> {
        self.bytes().and_then(|(o, l)| o.checked_add(l))
    }
}

/// Walks protobuf messages in a [`ReadAt`] source.
pub struct Wire<'s, S: ReadAt + ?Sized> {
    format: &'static str,
    src: &'s S,
    mem: Option<&'s [u8]>,
    size: u64,
    win: Vec<u8>,
    win_at: u64,
    fetched: u64,
}

impl<'s, S: ReadAt + ?Sized> Wire<'s, S> {
    /// A walker over `src`; errors name `format`.
    pub fn new(format: &'static str, src: &'s S) -> Self {
        let size = src.size();
        Wire {
            format,
            src,
            mem: src.slice(0, size),
            size,
            win: Vec::new(),
            win_at: 0,
            fetched: 0,
        }
    }

    /// Size of the source.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// Bytes fetched with [`ReadAt::read_at`] so far (0 when the source is in memory).
    pub fn fetched(&self) -> u64 {
        self.fetched
    }

    fn err(&self, kind: ErrorKind, msg: String) -> FormatError {
        FormatError::new(self.format, kind, msg)
    }

    /// The `n` bytes at `pos` (`pos + n` within the source, `n` at most the largest window).
    fn view(&mut self, pos: u64, n: usize) -> Result<&[u8], FormatError> {
        let end = pos.checked_add(n as u64).filter(|e| *e <= self.size).ok_or_else(|| {
            self.err(
                ErrorKind::Truncated,
                format!("needs bytes [{pos}, {pos}+{n}) of a {}-byte file", self.size),
            )
            .at(pos)
        })?;
        if let Some(m) = self.mem {
            // In bounds: checked against the size above, and `m` is the whole source.
            return m.get(pos as usize..end as usize).ok_or_else(|| {
                FormatError::new(self.format, ErrorKind::Truncated, "the source is shorter than it says").at(pos)
            });
        }
        let win_end = self.win_at + self.win.len() as u64;
        if !(pos >= self.win_at && end <= win_end) {
            // Reading on from the window grows it; a jump (a skipped payload) starts small.
            let chunk = if pos >= self.win_at && pos <= win_end && !self.win.is_empty() {
                (self.win.len() * 2).clamp(WINDOW_MIN, WINDOW_MAX)
            } else {
                WINDOW_MIN
            };
            let len = (chunk.max(n) as u64).min(self.size - pos) as usize;
            self.win.resize(len, 0);
            self.src
                .read_at(pos, &mut self.win)
                .map_err(|e| FormatError::source(self.format, e))?;
            self.win_at = pos;
            self.fetched += len as u64;
        }
        let start = (pos - self.win_at) as usize;
        Ok(&self.win[start..start + n])
    }

    /// Reads `len` bytes at `offset` (within the source). Callers bound `len` first: this is
    /// for names, strings and small fields, never for tensor payloads.
    pub fn read(&mut self, offset: u64, len: u64) -> Result<Cow<'s, [u8]>, FormatError> {
        if let Some(m) = self.mem {
            let end = offset.checked_add(len).filter(|e| *e <= self.size);
            return end
                .and_then(|e| m.get(offset as usize..e as usize))
                .map(Cow::Borrowed)
                .ok_or_else(|| {
                    self.err(ErrorKind::Truncated, format!("needs bytes [{offset}, {offset}+{len})"))
                        .at(offset)
                });
        }
        if len <= WINDOW_MAX as u64 {
            return Ok(Cow::Owned(self.view(offset, len as usize)?.to_vec()));
        }
        let v = self
            .src
            .read_vec(offset, len)
            .map_err(|e| FormatError::source(self.format, e))?;
        self.fetched += len;
        Ok(Cow::Owned(v))
    }

    /// The `N` bytes at `*pos`, which must end by `end`; advances `pos`.
    pub fn fixed<const N: usize>(&mut self, pos: &mut u64, end: u64) -> Result<[u8; N], FormatError> {
        let at = *pos;
        let stop = at.checked_add(N as u64).filter(|e| *e <= end);
        let Some(stop) = stop else {
            return Err(self.past_end(at, N as u64, end, "a fixed-size value"));
        };
        let mut out = [0u8; N];
        out.copy_from_slice(self.view(at, N)?);
        *pos = stop;
        Ok(out)
    }

    /// A varint at `*pos` that must end by `end`; advances `pos`.
    pub fn varint(&mut self, pos: &mut u64, end: u64) -> Result<u64, FormatError> {
        let at = *pos;
        let avail = end.saturating_sub(at).min(MAX_VARINT);
        let bytes = self.view(at, avail as usize)?;
        let mut v = 0u64;
        for (i, &b) in bytes.iter().enumerate() {
            if i == 9 && b > 1 {
                return Err(self
                    .err(
                        ErrorKind::Syntax,
                        "a varint is longer than 10 bytes or does not fit 64 bits; the file is not valid protobuf"
                            .into(),
                    )
                    .at(at));
            }
            v |= u64::from(b & 0x7f) << (7 * i);
            if b & 0x80 == 0 {
                *pos = at + i as u64 + 1;
                return Ok(v);
            }
        }
        Err(self.past_end(at, avail + 1, end, "a varint"))
    }

    fn past_end(&self, at: u64, len: u64, end: u64, what: &str) -> FormatError {
        let past_file = at.checked_add(len).is_none_or(|e| e > self.size) && end == self.size;
        if past_file {
            self.err(
                ErrorKind::Truncated,
                format!(
                    "{what} runs past the end of the {}-byte file; it is truncated",
                    self.size
                ),
            )
            .at(at)
        } else {
            self.err(
                ErrorKind::Syntax,
                format!(
                    "{what} of {len} bytes runs past the end of its enclosing message (byte {end}); the file is \
                     not valid protobuf"
                ),
            )
            .at(at)
        }
    }

    /// The next field of the message that ends at `end`, reading from `*pos` (advanced past
    /// the field; a length-delimited payload is skipped, not read). `None` at the end.
    pub fn next(&mut self, pos: &mut u64, end: u64) -> Result<Option<Field>, FormatError> {
        if *pos >= end {
            return Ok(None);
        }
        let at = *pos;
        let tag = self.varint(pos, end)?;
        let number = tag >> 3;
        if number == 0 || number > (1 << 29) - 1 {
            return Err(self
                .err(
                    ErrorKind::Syntax,
                    format!("field number {number} is outside 1..=536870911; the file is not valid protobuf"),
                )
                .at(at));
        }
        let value = match tag & 7 {
            0 => Value::Varint(self.varint(pos, end)?),
            1 => Value::Fixed64(u64::from_le_bytes(self.fixed::<8>(pos, end)?)),
            5 => Value::Fixed32(u32::from_le_bytes(self.fixed::<4>(pos, end)?)),
            2 => {
                let len = self.varint(pos, end)?;
                let offset = *pos;
                match offset.checked_add(len).filter(|e| *e <= end) {
                    Some(e) => *pos = e,
                    None => return Err(self.past_end(offset, len, end, &format!("field {number}"))),
                }
                Value::Bytes { offset, len }
            }
            3 | 4 => {
                return Err(self
                    .err(
                        ErrorKind::Syntax,
                        format!("field {number} is a group (wire type 3/4), which ONNX never uses"),
                    )
                    .at(at));
            }
            w => {
                return Err(self
                    .err(
                        ErrorKind::Syntax,
                        format!(
                            "field {number} has wire type {w}, which does not exist; the file is not valid protobuf"
                        ),
                    )
                    .at(at));
            }
        };
        Ok(Some(Field {
            number: number as u32,
            at,
            value,
        }))
    }

    /// Calls `each` with every value of a repeated varint field (packed or not).
    pub fn varints(
        &mut self,
        f: &Field,
        mut each: impl FnMut(u64) -> Result<(), FormatError>,
    ) -> Result<(), FormatError> {
        match f.value {
            Value::Varint(v) => each(v),
            Value::Bytes { offset, len } => {
                let (mut p, end) = (offset, offset.saturating_add(len));
                while p < end {
                    each(self.varint(&mut p, end)?)?;
                }
                Ok(())
            }
            _ => Err(self.wire_type(f, "varints")),
        }
    }

    /// Calls `each` with the little-endian bytes of every value of a repeated fixed-size field
    /// of `N` bytes (packed or not; `N` is 4 or 8).
    pub fn fixeds<const N: usize>(
        &mut self,
        f: &Field,
        mut each: impl FnMut([u8; N]) -> Result<(), FormatError>,
    ) -> Result<(), FormatError> {
        match (f.value, N) {
            (Value::Fixed32(v), 4) => each(v.to_le_bytes()[..N].try_into().unwrap_or([0; N])),
            (Value::Fixed64(v), 8) => each(v.to_le_bytes()[..N].try_into().unwrap_or([0; N])),
            (Value::Bytes { offset, len }, _) => {
                if len % N as u64 != 0 {
                    return Err(self
                        .err(
                            ErrorKind::Syntax,
                            format!(
                                "packed field {} has {len} bytes, not a whole number of {N}-byte values",
                                f.number
                            ),
                        )
                        .at(f.at));
                }
                let (mut p, end) = (offset, offset.saturating_add(len));
                while p < end {
                    each(self.fixed::<N>(&mut p, end)?)?;
                }
                Ok(())
            }
            _ => Err(self.wire_type(f, if N == 4 { "fixed32 values" } else { "fixed64 values" })),
        }
    }

    /// The error for a known field with the wrong wire type.
    pub fn wire_type(&self, f: &Field, want: &str) -> FormatError {
        let got = match f.value {
            Value::Varint(_) => "a varint",
            Value::Fixed64(_) => "a fixed64",
            Value::Fixed32(_) => "a fixed32",
            Value::Bytes { .. } => "length-delimited bytes",
        };
        self.err(
            ErrorKind::Syntax,
            format!("field {} should hold {want} but holds {got}", f.number),
        )
        .at(f.at)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(b: &[u8]) -> Result<Vec<Field>, FormatError> {
        let mut w = Wire::new("t", b);
        let (mut p, mut out) = (0, Vec::new());
        while let Some(f) = w.next(&mut p, b.len() as u64)? {
            out.push(f);
        }
        Ok(out)
    }

    #[test]
    fn wire_types() {
        // 1: varint 150; 2: bytes "hi"; 3: fixed32; 4: fixed64.
        let b = [
            0x08, 0x96, 0x01, 0x12, 2, b'h', b'i', 0x1d, 1, 0, 0, 0, 0x21, 2, 0, 0, 0, 0, 0, 0, 0,
        ];
        let f = fields(&b).unwrap();
        assert_eq!(f[0].value, Value::Varint(150));
        assert_eq!(f[1].value, Value::Bytes { offset: 5, len: 2 });
        assert_eq!(f[2].value, Value::Fixed32(1));
        assert_eq!(f[3].value, Value::Fixed64(2));
        assert_eq!(f[3].at, 12);
    }

    #[test]
    fn bad_wire() {
        for (bytes, kind) in [
            (&[0x0b][..], ErrorKind::Syntax),          // group start
            (&[0x0c][..], ErrorKind::Syntax),          // group end
            (&[0x0e, 0][..], ErrorKind::Syntax),       // wire type 6
            (&[0x00, 0][..], ErrorKind::Syntax),       // field 0
            (&[0x12, 5, 1][..], ErrorKind::Truncated), // length past the file
            (&[0x08, 0x80][..], ErrorKind::Truncated), // varint cut short
            (
                &[0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f][..],
                ErrorKind::Syntax,
            ),
            (
                &[0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x80, 0][..],
                ErrorKind::Syntax,
            ),
            (&[0x1d, 1, 2][..], ErrorKind::Truncated), // fixed32 cut short
        ] {
            assert_eq!(fields(bytes).unwrap_err().kind, kind, "{bytes:02x?}");
        }
        // The largest varint (10 bytes, last one 1) is fine.
        let max = [0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01];
        assert_eq!(fields(&max).unwrap()[0].value, Value::Varint(u64::MAX));
    }

    #[test]
    fn nested_length_past_parent() {
        // Field 1 (4 bytes) holds field 2 that claims 10 bytes: past the parent, inside the file.
        let b = [0x0a, 4, 0x12, 10, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
        let mut w = Wire::new("t", &b[..]);
        let mut p = 0;
        let outer = w.next(&mut p, b.len() as u64).unwrap().unwrap();
        let (o, l) = outer.bytes().unwrap();
        let mut q = o;
        assert_eq!(w.next(&mut q, o + l).unwrap_err().kind, ErrorKind::Syntax);
    }

    /// A source that is not in memory, counting what it is asked for.
    struct Disk(Vec<u8>, core::cell::Cell<u64>);
    impl ReadAt for Disk {
        fn size(&self) -> u64 {
            self.0.len() as u64
        }
        fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<(), crate::source::SourceError> {
            self.1.set(self.1.get() + buf.len() as u64);
            self.0.read_at(offset, buf)
        }
    }

    #[test]
    fn windowed_reads_skip_payloads() {
        // Two 1 MiB payloads then a varint: only the tags and lengths are read.
        let mut b = Vec::new();
        for _ in 0..2 {
            b.extend_from_slice(&[0x12, 0x80, 0x80, 0x40]);
            b.resize(b.len() + (1 << 20), 7);
        }
        b.extend_from_slice(&[0x08, 5]);
        let d = Disk(b, Default::default());
        let mut w = Wire::new("t", &d);
        let (mut p, end) = (0, d.size());
        let mut n = 0;
        while let Some(f) = w.next(&mut p, end).unwrap() {
            n += 1;
            if n == 3 {
                assert_eq!(f.value, Value::Varint(5));
            }
        }
        assert_eq!(n, 3);
        assert!(d.1.get() < 3 * WINDOW_MIN as u64, "read {} bytes", d.1.get());
        assert_eq!(w.fetched(), d.1.get());
        // The payload itself comes through `read` when asked.
        assert_eq!(&w.read(4, 3).unwrap()[..], &[7, 7, 7]);
        assert_eq!(w.read(4, 1 << 20).unwrap().len(), 1 << 20);
    }

    #[test]
    fn packed_and_unpacked() {
        // Field 1 packed varints [1, 300], then field 1 unpacked 7; field 2 packed fixed32 [1.0].
        let b = [0x0a, 3, 1, 0xac, 0x02, 0x08, 7, 0x12, 4, 0, 0, 0x80, 0x3f];
        let f = fields(&b).unwrap();
        let mut w = Wire::new("t", &b[..]);
        let mut got = Vec::new();
        for x in &f[..2] {
            w.varints(x, |v| {
                got.push(v);
                Ok(())
            })
            .unwrap();
        }
        assert_eq!(got, [1, 300, 7]);
        let mut fl = Vec::new();
        w.fixeds::<4>(&f[2], |b| {
            fl.push(f32::from_le_bytes(b));
            Ok(())
        })
        .unwrap();
        assert_eq!(fl, [1.0]);
        // A packed fixed32 field whose length is not a multiple of 4.
        let bad = [0x12, 3, 0, 0, 0];
        let f = fields(&bad).unwrap();
        let mut w = Wire::new("t", &bad[..]);
        assert_eq!(w.fixeds::<4>(&f[0], |_| Ok(())).unwrap_err().kind, ErrorKind::Syntax);
        assert_eq!(
            w.varints(
                &Field {
                    number: 1,
                    at: 0,
                    value: Value::Fixed32(0)
                },
                |_| Ok(())
            )
            .unwrap_err()
            .kind,
            ErrorKind::Syntax
        );
    }
}
