//! Tenso 0.24 packet files as a [`Catalog`]: each dense packet a tensor, a bundle's entries as
//! tensors, several packets back to back as several tensors (spec: `docs/specs/tenso-wire.md`;
//! the codec: [`crate::wire`]).
//!
//! Opening reads headers only, through [`ReadAt`]: the fixed header, the shape, bundle keys and
//! length prefixes, quantization metadata. Bodies stay where they are:
//!
//! * a raw dense body is a [`Storage::Range`] (zero-copy from a mapped file); an LZ4 body is a
//!   [`Storage::Encoded`] under [`Codec::Lz4Frame`] that decodes to exactly the shape's bytes;
//! * an XXH3 footer (`INTEGRITY`) over a dense body is a [`Check`] over exactly the bytes it
//!   covers (the stored body, compressed or not), checked by [`super::read_limited`],
//!   [`super::read_chunks`] and [`super::check_integrity`] (what `verify` runs);
//! * sparse COO/CSR/CSC packets, quantized packets and string packets are [`Storage::Parts`]
//!   under the layouts [`LAYOUT_SPARSE_COO`], [`LAYOUT_SPARSE_CSR`], [`LAYOUT_SPARSE_CSC`],
//!   [`LAYOUT_QUANTIZED`] and [`LAYOUT_STRINGS`] ([`super::read_part`] reads each part). A string
//!   packet's tensor has the logical shape `[count]` (one element per string) and the element
//!   type `uint8`, the type of its `payload` part: there is no string dtype, and its bytes are
//!   only ever read as its two parts (`offsets`, `payload`), never as one tensor.
//!
//! Names follow the CLI's Tenso → `.zt` conversion: a file that is one bundle packet names its
//! leaves by their key paths joined with `/`; otherwise every name starts with `#<packet index>`
//! (a lone dense packet is `#0`, a bundle at packet `i` gives `#i/key`). After the first packet,
//! bytes that do not start with the magic end the file; they are reported in
//! [`Catalog::skipped`] and as the `trailing_bytes` metadata. A name that repeats (a duplicate
//! bundle key) keeps the last value, as tenso's decoder does; the earlier ones are skipped.
//!
//! The decoder's rules hold: whatever [`crate::wire::decode_with`] (default options) refuses in a
//! packet, [`open`] refuses, or reading the tensor does (a dense body's footer and LZ4 frame are
//! checked when the body is read; the 4 GiB decompression cap is [`super::ReadLimits`]). Where a
//! rule needs more than headers it is checked while opening, in bounded pieces: a quantized
//! packet's footer (it covers the metadata and the body, which are not one range), a string
//! packet's offsets and footer, and a sparse packet's components (indices within the shape),
//! whose packet is decoded whole (at most [`super::DEFAULT_MAX_TENSOR_BYTES`]).

use alloc::borrow::Cow;
use alloc::boxed::Box;
use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec;
use alloc::vec::Vec;

use super::{
    Arrangement, Catalog, Check, Codec, DEFAULT_MAX_TENSOR_BYTES, Digest, ElementType, ErrorKind, FormatError, Meta,
    Part, Parts, Storage, TensorInfo, bytes_at,
};
use crate::detect::Format;
use crate::dtype::DType;
use crate::source::ReadAt;
use crate::wire::{self, DecodeOptions, QDType, QuantScheme, SparseFormat, flags};

/// The format name errors carry.
const FORMAT: &str = "tenso";

/// Layout id of a sparse COO packet (parts `row`, `col`, `values`).
pub const LAYOUT_SPARSE_COO: &str = "tenso.sparse_coo";
/// Layout id of a sparse CSR packet (parts `indices`, `indptr`, `values`).
pub const LAYOUT_SPARSE_CSR: &str = "tenso.sparse_csr";
/// Layout id of a sparse CSC packet (parts `indices`, `indptr`, `values`).
pub const LAYOUT_SPARSE_CSC: &str = "tenso.sparse_csc";
/// Layout id of a quantized packet (parts `data`, `scales`, `zero_points`).
pub const LAYOUT_QUANTIZED: &str = "tenso.quantized";
/// Layout id of a string packet (parts `offsets`: `count + 1` little-endian u64, the first 0,
/// never decreasing; `payload`: the strings' bytes back to back, string `i` being
/// `payload[offsets[i]..offsets[i + 1]]`).
pub const LAYOUT_STRINGS: &str = "tenso.strings";

/// Quantized packets with at most this many scales list them (and their zero points) in the
/// tensor's attributes; the parts `scales` and `zero_points` always hold them.
pub const MAX_ATTRIBUTE_SCALES: u64 = 4096;

/// Every header flag bit with its name, as `inspect` shows them.
pub const FLAG_NAMES: [(u16, &str); 11] = [
    (flags::ALIGNED, "ALIGNED"),
    (flags::INTEGRITY, "INTEGRITY"),
    (flags::COMPRESSION, "COMPRESSION"),
    (flags::SPARSE_COO, "SPARSE_COO"),
    (flags::BUNDLE, "BUNDLE"),
    (flags::SPARSE_CSR, "SPARSE_CSR"),
    (flags::SPARSE_CSC, "SPARSE_CSC"),
    (flags::CUST_ALIGN, "CUST_ALIGN"),
    (flags::STRING, "STRING"),
    (flags::RAGGED, "RAGGED"),
    (flags::GPU_IPC_REF, "GPU_IPC_REF"),
];

/// The names of the flag bits set in `f`, in bit order (unknown bits are left out).
pub fn flag_names(f: u16) -> Vec<&'static str> {
    FLAG_NAMES.iter().filter(|(b, _)| f & b != 0).map(|(_, n)| *n).collect()
}

/// A consumer of pieces of the file with their offsets.
type PieceSink<'a> = dyn FnMut(u64, &[u8]) -> Result<(), FormatError> + 'a;

/// Pieces in which open streams the bytes it must check (footers, string offsets).
const PIECE: u64 = 1 << 20;

fn err(kind: ErrorKind, at: u64, msg: impl Into<String>) -> FormatError {
    FormatError::new(FORMAT, kind, msg).at(at)
}

/// A packet's fixed header, located in the file.
#[derive(Clone, Copy)]
struct Hdr {
    version: u8,
    flags: u16,
    dtype_code: u8,
    ndim: u8,
    /// Header length: 10 (v4) or 8 (v3).
    len: u64,
}

/// A dense packet: where its body is.
struct Dense {
    h: Hdr,
    dtype: DType,
    shape: Vec<u64>,
    body: (u64, u64),
    compressed: bool,
    footer: Option<u64>,
    end: u64,
    align: u64,
}

/// The packets of one file being listed.
struct Lister<'s, S: ?Sized> {
    src: &'s S,
    /// Index of the top-level packet being walked.
    packet: usize,
    /// Its offset in the file.
    packet_offset: u64,
    /// Tensors with names relative to their packet, and the packet index.
    tensors: Vec<(usize, TensorInfo)>,
    checks: Vec<Check>,
}

/// `prefix/key`, or `key` at the root.
fn join(prefix: &str, key: &str) -> String {
    if prefix.is_empty() {
        key.to_string()
    } else {
        format!("{prefix}/{key}")
    }
}

/// The catalog name of leaf `rel` of packet `packet`, given whether the file's names are
/// prefixed by packet index.
fn full_name(prefixed: bool, packet: usize, rel: &str) -> String {
    match (prefixed, rel.is_empty()) {
        (false, _) => rel.to_string(),
        (true, true) => format!("#{packet}"),
        (true, false) => format!("#{packet}/{rel}"),
    }
}

/// A wire decoder error from decoding the packet at `base` as a [`FormatError`].
fn wire_error(e: &wire::Error, base: u64) -> FormatError {
    use wire::ErrorKind as W;
    let kind = match e.kind() {
        W::TooShort { .. } => ErrorKind::Truncated,
        W::UnsupportedVersion(_) => ErrorKind::UnsupportedVersion,
        W::UnknownDType(_) | W::Unsupported(_) => ErrorKind::Unsupported,
        W::TooManyDims(_) | W::TooManyElements | W::TooDeep | W::LimitExceeded { .. } => ErrorKind::Limit,
        W::IntegrityMismatch { .. } => ErrorKind::Checksum,
        W::DecompressedSize { .. } => ErrorKind::SizeMismatch,
        W::DuplicateKey(_) => ErrorKind::Duplicate,
        _ => ErrorKind::Syntax,
    };
    err(
        kind,
        base.saturating_add(e.offset()),
        format!("the packet at byte {base} does not decode: {e} (offsets counted from that packet)"),
    )
}

impl<'s, S: ReadAt + ?Sized> Lister<'s, S> {
    /// Bytes `at..at + len`, which must lie before `bound` (the end of the enclosing packet).
    fn read(&self, at: u64, len: u64, bound: u64, what: &str) -> Result<Cow<'s, [u8]>, FormatError> {
        match at.checked_add(len) {
            Some(end) if end <= bound => bytes_at(FORMAT, self.src, at, len),
            _ => Err(err(
                ErrorKind::Truncated,
                at,
                format!(
                    "{what} needs bytes [{at}, {at}+{len}) but the packet ends at byte {bound}; the file is truncated \
                     or a length in it is wrong"
                ),
            )),
        }
    }

    fn u32_at(&self, at: u64, bound: u64, what: &str) -> Result<u32, FormatError> {
        let b = self.read(at, 4, bound, what)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn u64_at(&self, at: u64, bound: u64, what: &str) -> Result<u64, FormatError> {
        let b = self.read(at, 8, bound, what)?;
        Ok(u64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]))
    }

    /// Ensures `end <= bound` (the packet's bytes exist).
    fn need(&self, end: u64, bound: u64, what: &str) -> Result<(), FormatError> {
        if end > bound {
            return Err(err(
                ErrorKind::Truncated,
                bound,
                format!(
                    "{what} runs to byte {end} but the packet ends at byte {bound}; the file is truncated or a length \
                     in it is wrong"
                ),
            ));
        }
        Ok(())
    }

    /// The fixed header at `at` (spec §3.3: the checks in tenso's order).
    fn header(&self, at: u64, bound: u64) -> Result<Hdr, FormatError> {
        let avail = bound.saturating_sub(at);
        let head = self.read(at, avail.min(10), bound, "the header")?;
        if head.len() >= 4 && head[..4] != wire::MAGIC {
            return Err(err(
                ErrorKind::Syntax,
                at,
                format!(
                    "not a Tenso packet: magic is {:02x} {:02x} {:02x} {:02x}, expected 54 4e 53 4f (\"TNSO\")",
                    head[0], head[1], head[2], head[3]
                ),
            ));
        }
        if head.len() < 8 {
            return Err(err(
                ErrorKind::Truncated,
                at,
                format!(
                    "a packet header needs 8 bytes, {} are left; the file is truncated",
                    head.len()
                ),
            ));
        }
        match head[4] {
            4 if head.len() < 10 => Err(err(
                ErrorKind::Truncated,
                at,
                format!(
                    "a v4 header needs 10 bytes, {} are left; the file is truncated",
                    head.len()
                ),
            )),
            4 => Ok(Hdr {
                version: 4,
                flags: u16::from_le_bytes([head[5], head[6]]),
                dtype_code: head[7],
                ndim: head[8],
                len: 10,
            }),
            3 => Ok(Hdr {
                version: 3,
                flags: head[5] as u16,
                dtype_code: head[6],
                ndim: head[7],
                len: 8,
            }),
            2 => Err(err(
                ErrorKind::UnsupportedVersion,
                at + 4,
                "protocol version 2 (tenso 0.10.x); tenso 0.24 refuses it too: decode it with \
                 wire::DecodeOptions::allow_v2, or re-encode it with a current tenso",
            )),
            v => Err(err(
                ErrorKind::UnsupportedVersion,
                at + 4,
                format!("protocol version {v}; Tenso versions 3 and 4 are read"),
            )),
        }
    }

    fn ndim(&self, h: &Hdr, at: u64) -> Result<usize, FormatError> {
        let n = h.ndim as usize;
        if n > wire::MAX_NDIM {
            return Err(err(
                ErrorKind::Limit,
                at + h.len - 2,
                format!(
                    "the packet declares {n} dimensions; the format allows at most {}",
                    wire::MAX_NDIM
                ),
            ));
        }
        Ok(n)
    }

    fn shape(&self, at: u64, ndim: usize, bound: u64) -> Result<Vec<u64>, FormatError> {
        let b = self.read(at, 4 * ndim as u64, bound, "the shape")?;
        Ok(b.chunks_exact(4)
            .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]) as u64)
            .collect())
    }

    fn elements(&self, shape: &[u64], at: u64) -> Result<u64, FormatError> {
        match crate::tensor::numel(shape) {
            Some(n) if n <= wire::MAX_ELEMENTS => Ok(n),
            _ => Err(err(
                ErrorKind::Limit,
                at,
                format!(
                    "shape {shape:?} has more than {} elements (or the product overflows); the format allows at most \
                     10^9",
                    wire::MAX_ELEMENTS
                ),
            )),
        }
    }

    /// The alignment and the position after the exponent byte (if any), from `pos`.
    fn alignment(&self, h: &Hdr, pos: u64, bound: u64) -> Result<(u64, u64), FormatError> {
        if h.flags & flags::CUST_ALIGN != 0 {
            let e = self.read(pos, 1, bound, "the alignment exponent")?[0];
            if e >= 64 {
                return Err(err(
                    ErrorKind::Syntax,
                    pos,
                    format!("custom alignment exponent {e} is out of range (it must be below 64)"),
                ));
            }
            Ok((1u64 << e, pos + 1))
        } else if h.flags & flags::ALIGNED != 0 {
            Ok((wire::DEFAULT_ALIGNMENT, pos))
        } else {
            Ok((1, pos))
        }
    }

    /// `pos` padded to `align` counted from the packet start `at`; past `bound` is "truncated".
    fn padded(&self, at: u64, pos: u64, align: u64, bound: u64) -> Result<u64, FormatError> {
        let rel = pos - at;
        let pad = (align - rel % align) % align;
        let p = pos.saturating_add(pad);
        self.need(p, bound, "the padding before the body")?;
        Ok(p)
    }

    /// A dense packet at `at` whose outer bound is `bound` (a compressed body runs to it).
    fn dense(&self, at: u64, h: Hdr, bound: u64) -> Result<Dense, FormatError> {
        let Some(dtype) = wire::dtype_from_code(h.dtype_code) else {
            let msg = match h.dtype_code {
                21 => "dtype code 21 (BYTES) is reserved and never written; nothing reads it".to_string(),
                c => format!("unsupported or unknown dtype code {c} for a dense tensor; codes 1..=15 are dense dtypes"),
            };
            return Err(err(ErrorKind::Unsupported, at + h.len - 3, msg));
        };
        let ndim = self.ndim(&h, at)?;
        let shape = self.shape(at + h.len, ndim, bound)?;
        let n = self.elements(&shape, at + h.len)?;
        let (align, pos) = self.alignment(&h, at + h.len + 4 * ndim as u64, bound)?;
        let body_start = self.padded(at, pos, align, bound)?;
        let foot = if h.flags & flags::INTEGRITY != 0 { 8 } else { 0 };
        let raw = n * dtype.itemsize() as u64;
        if h.flags & flags::COMPRESSION != 0 {
            self.need(
                body_start.saturating_add(foot),
                bound,
                "the compressed body and its footer",
            )?;
            let body_end = bound - foot;
            let frame = body_end - body_start;
            // An LZ4 sequence cannot expand more than ~255:1 (as the decoder refuses).
            let honest = frame.saturating_mul(256).saturating_add(64);
            if raw > honest {
                return Err(err(
                    ErrorKind::SizeMismatch,
                    body_start,
                    format!(
                        "the shape {shape:?} needs {raw} bytes but the {frame}-byte LZ4 frame cannot decode to more than \
                         {honest}; the packet is inconsistent"
                    ),
                ));
            }
            return Ok(Dense {
                h,
                dtype,
                shape,
                body: (body_start, body_end),
                compressed: true,
                footer: (foot > 0).then_some(body_end),
                end: bound,
                align,
            });
        }
        let body_end = body_start.saturating_add(raw);
        let end = body_end.saturating_add(foot);
        self.need(
            end,
            bound,
            if foot > 0 {
                "the body and its footer"
            } else {
                "the body"
            },
        )?;
        Ok(Dense {
            h,
            dtype,
            shape,
            body: (body_start, body_end),
            compressed: false,
            footer: (foot > 0).then_some(body_end),
            end,
            align,
        })
    }

    /// The storage of a dense body and, with a footer, its check.
    fn dense_storage(&self, d: &Dense, bound: u64, what: String) -> Result<(Storage, Option<Check>), FormatError> {
        let (offset, len) = (d.body.0, d.body.1 - d.body.0);
        let storage = if d.compressed {
            Storage::Encoded {
                source: 0,
                offset,
                len,
                decoded: crate::tensor::numel(&d.shape).unwrap_or(0) * d.dtype.itemsize() as u64,
                codec: Codec::Lz4Frame,
            }
        } else {
            Storage::Range { source: 0, offset, len }
        };
        let check = match d.footer {
            None => None,
            Some(f) => Some(Check {
                source: 0,
                offset,
                len,
                digest: Digest::Xxh3(self.u64_at(f, bound, "the XXH3 footer")?),
                what,
                decoded: None,
            }),
        };
        Ok((storage, check))
    }

    /// Attributes every leaf carries.
    fn common(&self, kind: &str, at: u64, h: &Hdr) -> Vec<(String, Meta)> {
        vec![
            ("packet".to_string(), Meta::UInt(self.packet as u64)),
            ("packet_offset".to_string(), Meta::UInt(self.packet_offset)),
            ("offset".to_string(), Meta::UInt(at)),
            ("kind".to_string(), Meta::Str(kind.to_string())),
            ("version".to_string(), Meta::UInt(h.version as u64)),
            (
                "flags".to_string(),
                Meta::List(
                    flag_names(h.flags)
                        .into_iter()
                        .map(|n| Meta::Str(n.to_string()))
                        .collect(),
                ),
            ),
            ("integrity".to_string(), Meta::Bool(h.flags & flags::INTEGRITY != 0)),
        ]
    }

    /// Streams `[at, at + len)` in bounded pieces to `f`.
    fn stream(&self, at: u64, len: u64, f: &mut PieceSink<'_>) -> Result<(), FormatError> {
        let mut done = 0u64;
        while done < len {
            let n = (len - done).min(PIECE);
            let b = bytes_at(FORMAT, self.src, at + done, n)?;
            f(at + done, &b)?;
            done += n;
        }
        Ok(())
    }

    /// Compares the XXH3 of `ranges` (concatenated) with the footer at `footer`.
    fn verify_footer(&self, ranges: &[(u64, u64)], footer: u64, bound: u64, what: &str) -> Result<(), FormatError> {
        let stored = self.u64_at(footer, bound, "the XXH3 footer")?;
        let mut h = crate::hash::Xxh3::new();
        for &(s, e) in ranges {
            self.stream(s, e - s, &mut |_, b| {
                h.update(b);
                Ok(())
            })?;
        }
        let computed = h.digest();
        if computed != stored {
            return Err(err(
                ErrorKind::Checksum,
                footer,
                format!(
                    "{what}: XXH3 footer {stored:#018x} does not match the bytes it covers ({computed:#018x}); the \
                     file is corrupt"
                ),
            ));
        }
        Ok(())
    }

    /// Walks the packet at `at` (outer bound `bound`, nesting `depth`) whose leaves are named
    /// under `name`; returns where it ends.
    fn walk(&mut self, at: u64, bound: u64, depth: usize, name: &str) -> Result<u64, FormatError> {
        let h = self.header(at, bound)?;
        let f = h.flags;
        if f & flags::GPU_IPC_REF != 0 {
            return Err(err(
                ErrorKind::Unsupported,
                at + 5,
                "a GPU IPC reference packet (flag 0x0400) names device memory in another process; it is opened on \
                 the device, not read from a file",
            ));
        }
        let sparse = f & (flags::SPARSE_COO | flags::SPARSE_CSR | flags::SPARSE_CSC) != 0;
        if (f & flags::BUNDLE != 0 || sparse) && depth >= wire::MAX_DEPTH {
            return Err(err(
                ErrorKind::Limit,
                at,
                format!("containers are nested deeper than {} levels", wire::MAX_DEPTH),
            ));
        }
        if f & flags::BUNDLE != 0 {
            self.bundle(at, h, bound, depth, name)
        } else if sparse {
            self.sparse(at, h, bound, name)
        } else if f & (flags::STRING | flags::RAGGED) != 0 {
            self.strings(at, h, bound, name)
        } else if let Some(q) = QDType::from_code(h.dtype_code) {
            self.quantized(at, h, q, bound, name)
        } else {
            let d = self.dense(at, h, bound)?;
            let what = format!("Tenso footer of the packet at byte {at}");
            let (storage, check) = self.dense_storage(&d, bound, what)?;
            self.checks.extend(check);
            let mut attributes = self.common("dense", at, &h);
            attributes.push(("compressed".to_string(), Meta::Bool(d.compressed)));
            attributes.push(("alignment".to_string(), Meta::UInt(d.align)));
            self.tensors.push((
                self.packet,
                TensorInfo {
                    name: name.to_string(),
                    ty: ElementType::Dense(d.dtype),
                    shape: d.shape,
                    storage,
                    arrangement: Arrangement::default(),
                    attributes,
                },
            ));
            Ok(d.end)
        }
    }

    fn bundle(&mut self, at: u64, h: Hdr, bound: u64, depth: usize, name: &str) -> Result<u64, FormatError> {
        let mut pos = at + h.len;
        for i in 0..h.ndim {
            let kl = self.u32_at(pos, bound, "a bundle key length")? as u64;
            let key_at = pos + 4;
            let key = self.read(key_at, kl, bound, "a bundle key")?;
            let key = core::str::from_utf8(&key)
                .map_err(|_| {
                    err(
                        ErrorKind::Syntax,
                        key_at,
                        format!("bundle entry {i}: its key is not valid UTF-8; the file is corrupt"),
                    )
                })?
                .to_string();
            let sub = join(name, &key);
            let named = |e: FormatError| {
                if e.tensor.is_none() { e.tensor(sub.clone()) } else { e }
            };
            let vl = self
                .u32_at(key_at + kl, bound, "a bundle value length")
                .map_err(named)? as u64;
            let val = key_at.saturating_add(kl + 4);
            let val_end = val.saturating_add(vl);
            self.need(val_end, bound, "a bundle value").map_err(named)?;
            self.walk(val, val_end, depth + 1, &sub).map_err(named)?;
            pos = val_end;
        }
        Ok(pos)
    }

    fn sparse(&mut self, at: u64, h: Hdr, bound: u64, name: &str) -> Result<u64, FormatError> {
        let format = if h.flags & flags::SPARSE_COO != 0 {
            SparseFormat::Coo
        } else if h.flags & flags::SPARSE_CSR != 0 {
            SparseFormat::Csr
        } else {
            SparseFormat::Csc
        };
        let ndim = self.ndim(&h, at)?;
        let shape = self.shape(at + h.len, ndim, bound)?;
        let mut pos = at + h.len + 4 * ndim as u64;
        let wire_names = format.component_names();
        let mut comps: Vec<(Dense, Storage)> = Vec::with_capacity(3);
        for cname in wire_names {
            let len = self.u32_at(pos, bound, "a sparse component length")? as u64;
            let (c, c_end) = (pos.saturating_add(4), pos.saturating_add(4 + len));
            self.need(c_end, bound, "a sparse component")?;
            let ch = self.header(c, c_end)?;
            let sparse_bits = flags::SPARSE_COO | flags::SPARSE_CSR | flags::SPARSE_CSC;
            let dense_kind =
                ch.flags & (flags::GPU_IPC_REF | flags::BUNDLE | sparse_bits | flags::STRING | flags::RAGGED) == 0
                    && QDType::from_code(ch.dtype_code).is_none();
            if !dense_kind {
                return Err(err(
                    ErrorKind::Syntax,
                    c,
                    format!(
                        "sparse component {cname} is not a dense packet (flags {:?}); components are dense",
                        flag_names(ch.flags)
                    ),
                ));
            }
            let d = self.dense(c, ch, c_end)?;
            let what = format!("Tenso footer of sparse component {cname} of the packet at byte {at}");
            let (storage, check) = self.dense_storage(&d, c_end, what)?;
            self.checks.extend(check);
            comps.push((d, storage));
            pos = c_end;
        }
        // Index consistency needs the index values: decode the packet as the decoder would.
        let len = pos - at;
        if len > DEFAULT_MAX_TENSOR_BYTES {
            return Err(err(
                ErrorKind::Limit,
                at,
                format!(
                    "a {len}-byte sparse packet is over the {DEFAULT_MAX_TENSOR_BYTES} bytes this reader checks whole; \
                     convert it with the CLI or decode it with wire::decode"
                ),
            ));
        }
        let bytes = bytes_at(FORMAT, self.src, at, len)?;
        wire::decode_with(&bytes, &DecodeOptions::default()).map_err(|e| wire_error(&e, at))?;
        let integrity = comps.iter().any(|(d, _)| d.footer.is_some());
        let (layout, order): (&str, [(usize, &str); 3]) = match format {
            SparseFormat::Coo => (LAYOUT_SPARSE_COO, [(1, "row"), (2, "col"), (0, "values")]),
            SparseFormat::Csr => (LAYOUT_SPARSE_CSR, [(1, "indices"), (2, "indptr"), (0, "values")]),
            SparseFormat::Csc => (LAYOUT_SPARSE_CSC, [(1, "indices"), (2, "indptr"), (0, "values")]),
        };
        let values_ty = comps[0].0.dtype;
        let nnz = crate::tensor::numel(&comps[0].0.shape).unwrap_or(0);
        let mut comps: Vec<Option<(Dense, Storage)>> = comps.into_iter().map(Some).collect();
        let mut parts = Vec::with_capacity(3);
        let mut parts_meta = Vec::with_capacity(3);
        for (i, pname) in order {
            let Some((d, storage)) = comps[i].take() else { continue };
            let len = crate::tensor::numel(&d.shape).unwrap_or(0) * d.dtype.itemsize() as u64;
            parts_meta.push((
                pname.to_string(),
                Meta::Map(vec![
                    ("dtype".to_string(), Meta::Str(d.dtype.name().to_string())),
                    (
                        "shape".to_string(),
                        Meta::List(d.shape.iter().map(|&x| Meta::UInt(x)).collect()),
                    ),
                    ("offset".to_string(), Meta::UInt(d.body.0)),
                    ("length".to_string(), Meta::UInt(d.body.1 - d.body.0)),
                    ("compressed".to_string(), Meta::Bool(d.compressed)),
                    ("integrity".to_string(), Meta::Bool(d.footer.is_some())),
                    (
                        "flags".to_string(),
                        Meta::List(
                            flag_names(d.h.flags)
                                .into_iter()
                                .map(|n| Meta::Str(n.to_string()))
                                .collect(),
                        ),
                    ),
                ]),
            ));
            parts.push(Part {
                name: pname.to_string(),
                ty: Some(ElementType::Dense(d.dtype)),
                type_name: d.dtype.name().to_string(),
                len,
                storage,
            });
        }
        let mut attributes = self.common("sparse", at, &h);
        if let Some((_, Meta::Bool(b))) = attributes.iter_mut().find(|(k, _)| k == "integrity") {
            *b = integrity;
        }
        attributes.push(("layout".to_string(), Meta::Str(layout.to_string())));
        attributes.push(("sparse_format".to_string(), Meta::Str(format.name().to_string())));
        attributes.push(("nnz".to_string(), Meta::UInt(nnz)));
        attributes.push(("parts".to_string(), Meta::Map(parts_meta)));
        self.tensors.push((
            self.packet,
            TensorInfo {
                name: name.to_string(),
                ty: ElementType::Dense(values_ty),
                shape,
                storage: Storage::Parts(Box::new(Parts {
                    layout: layout.to_string(),
                    parts,
                })),
                arrangement: Arrangement::default(),
                attributes,
            },
        ));
        Ok(pos)
    }

    fn strings(&mut self, at: u64, h: Hdr, bound: u64, name: &str) -> Result<u64, FormatError> {
        if h.flags & flags::STRING == 0 {
            return Err(err(
                ErrorKind::Unsupported,
                at + 5,
                "a RAGGED packet (flag 0x0200): tenso never writes it and refuses to load it",
            ));
        }
        let ndim = self.ndim(&h, at)?;
        let shape = self.shape(at + h.len, ndim, bound)?;
        let count = shape.first().copied().unwrap_or(0);
        let (align, pos) = self.alignment(&h, at + h.len + 4 * ndim as u64, bound)?;
        let body = self.padded(at, pos, align, bound)?;
        let off_len = count.checked_add(1).and_then(|c| c.checked_mul(8)).unwrap_or(u64::MAX);
        let off_end = body.saturating_add(off_len);
        self.need(off_end, bound, "the string offsets")?;
        let payload = self.u64_at(off_end - 8, bound, "the last string offset")?;
        let pay_end = off_end.saturating_add(payload);
        let foot = if h.flags & flags::INTEGRITY != 0 { 8 } else { 0 };
        let end = pay_end.saturating_add(foot);
        self.need(end, bound, "the string payload")?;
        if foot > 0 {
            self.verify_footer(&[(body, pay_end)], pay_end, bound, "string packet")?;
        }
        let mut prev = 0u64;
        let mut index = 0u64;
        self.stream(body, off_len, &mut |piece_at, b| {
            for (k, c) in b.chunks_exact(8).enumerate() {
                let o = u64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]);
                if (index == 0 && o != 0) || o < prev {
                    return Err(err(
                        ErrorKind::Syntax,
                        piece_at + 8 * k as u64,
                        format!("string offset {index} is {o}; offsets start at 0 and never decrease"),
                    ));
                }
                prev = o;
                index += 1;
            }
            Ok(())
        })?;
        let range = |offset: u64, len: u64| Storage::Range { source: 0, offset, len };
        let part_meta = |dtype: DType, n: u64, offset: u64, length: u64| {
            Meta::Map(vec![
                ("dtype".to_string(), Meta::Str(dtype.name().to_string())),
                ("shape".to_string(), Meta::List(vec![Meta::UInt(n)])),
                ("offset".to_string(), Meta::UInt(offset)),
                ("length".to_string(), Meta::UInt(length)),
            ])
        };
        let parts = vec![
            Part {
                name: "offsets".to_string(),
                ty: Some(ElementType::Dense(DType::U64)),
                type_name: DType::U64.name().to_string(),
                len: off_len,
                storage: range(body, off_len),
            },
            Part {
                name: "payload".to_string(),
                ty: Some(ElementType::Dense(DType::U8)),
                type_name: DType::U8.name().to_string(),
                len: payload,
                storage: range(off_end, payload),
            },
        ];
        let mut attributes = self.common("string", at, &h);
        attributes.push(("layout".to_string(), Meta::Str(LAYOUT_STRINGS.to_string())));
        attributes.push(("count".to_string(), Meta::UInt(count)));
        attributes.push(("payload_bytes".to_string(), Meta::UInt(payload)));
        attributes.push(("alignment".to_string(), Meta::UInt(align)));
        attributes.push((
            "parts".to_string(),
            Meta::Map(vec![
                ("offsets".to_string(), part_meta(DType::U64, count + 1, body, off_len)),
                ("payload".to_string(), part_meta(DType::U8, payload, off_end, payload)),
            ]),
        ));
        self.tensors.push((
            self.packet,
            TensorInfo {
                name: name.to_string(),
                ty: ElementType::Dense(DType::U8),
                shape: vec![count],
                storage: Storage::Parts(Box::new(Parts {
                    layout: LAYOUT_STRINGS.to_string(),
                    parts,
                })),
                arrangement: Arrangement::default(),
                attributes,
            },
        ));
        Ok(end)
    }

    fn quantized(&mut self, at: u64, h: Hdr, q: QDType, bound: u64, name: &str) -> Result<u64, FormatError> {
        let ndim = self.ndim(&h, at)?;
        let shape = self.shape(at + h.len, ndim, bound)?;
        let n = self.elements(&shape, at + h.len)?;
        let meta_start = at + h.len + 4 * ndim as u64;
        let m = self.read(meta_start, 10, bound, "the quantization metadata")?;
        let (scheme, axis) = (QuantScheme::from_code(m[0]), m[1]);
        let group_size = u32::from_le_bytes([m[2], m[3], m[4], m[5]]);
        let num_scales = u32::from_le_bytes([m[6], m[7], m[8], m[9]]) as u64;
        let scales_at = meta_start + 10;
        let meta_end = scales_at + 8 * num_scales;
        self.need(meta_end, bound, "the scales and zero points")?;
        let (align, pos) = self.alignment(&h, meta_end, bound)?;
        let body_start = self.padded(at, pos, align, bound)?;
        let body_len = q.packed_len(n);
        let body_end = body_start.saturating_add(body_len);
        let foot = if h.flags & flags::INTEGRITY != 0 { 8 } else { 0 };
        let end = body_end.saturating_add(foot);
        self.need(end, bound, "the packed body")?;
        if foot > 0 {
            // The footer covers the metadata and the body, which padding separates: not one
            // range a catalog check can describe, so it is checked here.
            self.verify_footer(
                &[(meta_start, meta_end), (body_start, body_end)],
                body_end,
                bound,
                &format!("quantized packet at byte {at}"),
            )?;
        }
        let mut attributes = self.common("quantized", at, &h);
        attributes.push(("layout".to_string(), Meta::Str(LAYOUT_QUANTIZED.to_string())));
        attributes.push(("qdtype".to_string(), Meta::Str(q.name().to_string())));
        attributes.push(("scheme".to_string(), Meta::Str(scheme.name().to_string())));
        attributes.push(("scheme_code".to_string(), Meta::UInt(scheme.code() as u64)));
        attributes.push(("axis".to_string(), Meta::UInt(axis as u64)));
        attributes.push(("group_size".to_string(), Meta::UInt(group_size as u64)));
        attributes.push(("num_scales".to_string(), Meta::UInt(num_scales)));
        attributes.push(("alignment".to_string(), Meta::UInt(align)));
        if num_scales <= MAX_ATTRIBUTE_SCALES {
            let b = self.read(scales_at, 8 * num_scales, bound, "the scales")?;
            let f32s = |s: &[u8]| -> Meta {
                Meta::List(
                    s.chunks_exact(4)
                        .map(|c| Meta::Float(f32::from_le_bytes([c[0], c[1], c[2], c[3]]) as f64))
                        .collect(),
                )
            };
            let half = 4 * num_scales as usize;
            attributes.push(("scales".to_string(), f32s(&b[..half])));
            attributes.push(("zero_points".to_string(), f32s(&b[half..])));
        }
        let part_meta = |dtype: &str, shape: Option<u64>, offset: u64, length: u64| {
            let mut m = vec![("dtype".to_string(), Meta::Str(dtype.to_string()))];
            m.extend(shape.map(|n| ("shape".to_string(), Meta::List(vec![Meta::UInt(n)]))));
            m.push(("offset".to_string(), Meta::UInt(offset)));
            m.push(("length".to_string(), Meta::UInt(length)));
            Meta::Map(m)
        };
        attributes.push((
            "parts".to_string(),
            Meta::Map(vec![
                ("data".to_string(), part_meta(q.name(), None, body_start, body_len)),
                (
                    "scales".to_string(),
                    part_meta("float32", Some(num_scales), scales_at, 4 * num_scales),
                ),
                (
                    "zero_points".to_string(),
                    part_meta("float32", Some(num_scales), scales_at + 4 * num_scales, 4 * num_scales),
                ),
            ]),
        ));
        let (data_ty, ty) = match q {
            QDType::QInt8 => (Some(ElementType::Dense(DType::I8)), DType::I8),
            QDType::QUInt8 => (Some(ElementType::Dense(DType::U8)), DType::U8),
            QDType::QInt4 => (None, DType::I8),
            QDType::QUInt4 => (None, DType::U8),
        };
        let range = |offset: u64, len: u64| Storage::Range { source: 0, offset, len };
        let f32_ty = Some(ElementType::Dense(DType::F32));
        let parts = vec![
            Part {
                name: "data".to_string(),
                ty: data_ty,
                type_name: q.name().to_string(),
                len: body_len,
                storage: range(body_start, body_len),
            },
            Part {
                name: "scales".to_string(),
                ty: f32_ty,
                type_name: "float32".to_string(),
                len: 4 * num_scales,
                storage: range(scales_at, 4 * num_scales),
            },
            Part {
                name: "zero_points".to_string(),
                ty: f32_ty,
                type_name: "float32".to_string(),
                len: 4 * num_scales,
                storage: range(scales_at + 4 * num_scales, 4 * num_scales),
            },
        ];
        self.tensors.push((
            self.packet,
            TensorInfo {
                name: name.to_string(),
                ty: ElementType::Dense(ty),
                shape,
                storage: Storage::Parts(Box::new(Parts {
                    layout: LAYOUT_QUANTIZED.to_string(),
                    parts,
                })),
                arrangement: Arrangement::default(),
                attributes,
            },
        ));
        Ok(end)
    }
}

/// Opens a file of Tenso packets: one or several packets back to back, each dense packet a
/// tensor, each bundle's leaves tensors (see the module docs for names, storage and checks).
/// Reads headers only, except where a decoder rule needs the bytes (module docs).
pub fn open<S: ReadAt + ?Sized>(src: &S) -> Result<Catalog, FormatError> {
    let size = src.size();
    if size == 0 {
        return Err(err(
            ErrorKind::Truncated,
            0,
            "the file is empty; a Tenso file holds at least one packet",
        ));
    }
    let mut l = Lister {
        src,
        packet: 0,
        packet_offset: 0,
        tensors: Vec::new(),
        checks: Vec::new(),
    };
    let mut first_is_bundle = false;
    let mut off = 0u64;
    let mut trailing = None;
    while off < size {
        if l.packet > 0 {
            let head = bytes_at(FORMAT, src, off, (size - off).min(4))?;
            if head.as_ref() != wire::MAGIC {
                trailing = Some((off, size - off));
                break;
            }
        }
        l.packet_offset = off;
        let packet = l.packet;
        let end = l.walk(off, size, 0, "").map_err(|mut e| {
            // Names inside packet 0 stay relative (whether they get `#0/` depends on packets not
            // read yet); after it, every name is prefixed.
            let e = match e.tensor.take() {
                None => e.tensor(format!("#{packet}")),
                Some(t) => e.tensor(if packet > 0 { full_name(true, packet, &t) } else { t }),
            };
            FormatError {
                message: format!("packet {packet} (at byte {off}): {}", e.message),
                ..e
            }
        })?;
        if packet == 0 {
            first_is_bundle = l.header(0, size).is_ok_and(|h| h.flags & flags::BUNDLE != 0);
        }
        if end <= off {
            break;
        }
        off = end;
        l.packet += 1;
    }
    let prefixed = !(l.packet == 1 && first_is_bundle);
    let mut cat = Catalog::new(Format::Tenso);
    cat.metadata.push(("packets".to_string(), Meta::UInt(l.packet as u64)));
    let named: Vec<TensorInfo> = l
        .tensors
        .into_iter()
        .map(|(p, mut t)| {
            t.name = full_name(prefixed, p, &t.name);
            t
        })
        .collect();
    // A repeated name keeps its last value (tenso's decoder: the last duplicate key wins).
    let mut last = alloc::collections::BTreeMap::new();
    for (i, t) in named.iter().enumerate() {
        last.insert(t.name.clone(), i);
    }
    for (i, t) in named.into_iter().enumerate() {
        if last.get(&t.name) == Some(&i) {
            cat.tensors.push(t);
        } else {
            cat.skipped.push((
                t.name,
                "a later entry has the same name; tenso's decoder keeps the last value of a repeated key".to_string(),
            ));
        }
    }
    if let Some((at, n)) = trailing {
        cat.metadata.push(("trailing_offset".to_string(), Meta::UInt(at)));
        cat.metadata.push(("trailing_bytes".to_string(), Meta::UInt(n)));
        cat.skipped.push((
            "(trailing bytes)".to_string(),
            format!(
                "{n} bytes at byte {at} after the last packet do not start with the Tenso magic; they were ignored"
            ),
        ));
    }
    cat.checks = l.checks;
    Ok(cat)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_are_named_in_bit_order() {
        assert_eq!(flag_names(0x0103), ["ALIGNED", "INTEGRITY", "STRING"]);
        assert!(flag_names(0xF800).is_empty());
    }

    #[test]
    fn names_follow_the_conversion() {
        assert_eq!(full_name(false, 0, "a/b"), "a/b");
        assert_eq!(full_name(true, 0, ""), "#0");
        assert_eq!(full_name(true, 2, "k"), "#2/k");
    }
}
