//! Encoding: into a `Vec`, or as vectored parts that reference the caller's body.

use alloc::borrow::Cow;
use alloc::format;
use alloc::vec::Vec;

use super::error::{Error, Result};
use super::lz4::compress_frame;
use super::packet::{Bundle, Packet, Quantized, Sparse, Strings};
use super::{
    DEFAULT_ALIGNMENT, MAGIC, MAX_BUNDLE_ENTRIES, MAX_DEPTH, MAX_ELEMENTS, MAX_NDIM, VERSION, dtype_code, flags, pad_to,
};
use crate::tensor::Tensor;

/// The largest alignment the encoder accepts (1 MiB). tenso materialises padding for any
/// power of two and fails with `MemoryError` near 2^40; a cap keeps packets sane.
pub const MAX_ALIGNMENT: u64 = 1 << 20;

/// Encoder options. The defaults write what `tenso.dumps(x)` writes.
#[derive(Clone, Debug)]
pub struct EncodeOptions {
    /// Body alignment relative to the packet start, a power of two up to [`MAX_ALIGNMENT`]
    /// (default 64). 64 sets ALIGNED; any other value sets CUST_ALIGN and writes its exponent.
    pub alignment: u64,
    /// Append an XXH3-64 footer to dense, quantized and string packets (default `false`).
    pub integrity: bool,
    /// LZ4-compress dense bodies (default `false`). Ignored for quantized, string and sparse
    /// packets, as tenso ignores it.
    pub compress: bool,
    /// Apply `compress` to dense leaves inside bundles (default `true`: tenso's bytes). **tenso
    /// 0.24.0 cannot read compressed bundle leaves**: set `false` when the peer is tenso.
    pub compress_in_containers: bool,
    /// Store a body uncompressed (COMPRESSION cleared) when the frame would not be smaller
    /// (default `false`: tenso's bytes, which grow on incompressible data). tenso reads both.
    pub skip_incompressible: bool,
    /// Protect sparse components with integrity footers when `integrity` is set (default
    /// `false`: tenso ignores all options for sparse components).
    pub sparse_integrity: bool,
}

impl Default for EncodeOptions {
    fn default() -> Self {
        EncodeOptions {
            alignment: DEFAULT_ALIGNMENT,
            integrity: false,
            compress: false,
            compress_in_containers: true,
            skip_incompressible: false,
            sparse_integrity: false,
        }
    }
}

impl EncodeOptions {
    fn check(&self) -> Result<()> {
        if !self.alignment.is_power_of_two() {
            return Err(Error::encode(format!(
                "alignment {} is not a power of two",
                self.alignment
            )));
        }
        if self.alignment > MAX_ALIGNMENT {
            return Err(Error::encode(format!(
                "alignment {} exceeds the maximum of {MAX_ALIGNMENT}",
                self.alignment
            )));
        }
        Ok(())
    }

    fn sparse_component(&self) -> EncodeOptions {
        EncodeOptions {
            alignment: DEFAULT_ALIGNMENT,
            integrity: self.integrity && self.sparse_integrity,
            compress: false,
            ..self.clone()
        }
    }
}

/// Encodes a packet into a new `Vec`.
pub fn encode(packet: &Packet<'_>, opts: &EncodeOptions) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    encode_into(packet, opts, &mut out)?;
    Ok(out)
}

/// Appends the encoded packet to `out`. On error, `out` is left as it was.
pub fn encode_into(packet: &Packet<'_>, opts: &EncodeOptions, out: &mut Vec<u8>) -> Result<()> {
    opts.check()?;
    let start = out.len();
    let r = write_packet(packet, opts, out, 0);
    if r.is_err() {
        out.truncate(start);
    }
    r
}

fn header(out: &mut Vec<u8>, flags: u16, dtype: u8, ndim: usize) {
    out.extend_from_slice(&MAGIC);
    out.push(VERSION);
    out.extend_from_slice(&flags.to_le_bytes());
    out.push(dtype);
    out.push(ndim as u8);
    out.push(0);
}

fn shape(out: &mut Vec<u8>, shape: &[u64]) -> Result<()> {
    if shape.len() > MAX_NDIM {
        return Err(Error::encode(format!(
            "{} dimensions; the format allows at most {MAX_NDIM}",
            shape.len()
        )));
    }
    for (i, &d) in shape.iter().enumerate() {
        let d = u32::try_from(d).map_err(|_| {
            Error::encode(format!(
                "dimension {i} is {d}, above the wire-format limit of 4294967295 (each dimension is a 32-bit integer)"
            ))
        })?;
        out.extend_from_slice(&d.to_le_bytes());
    }
    Ok(())
}

fn check_elements(shape: &[u64]) -> Result<()> {
    match crate::tensor::numel(shape) {
        Some(n) if n <= MAX_ELEMENTS => Ok(()),
        Some(n) => Err(Error::encode(format!(
            "{n} elements; the format allows at most {MAX_ELEMENTS}"
        ))),
        None => Err(Error::encode("the element count overflows 64 bits")),
    }
}

fn align_flags(opts: &EncodeOptions) -> u16 {
    if opts.alignment == DEFAULT_ALIGNMENT {
        flags::ALIGNED
    } else {
        flags::CUST_ALIGN
    }
}

/// Writes the exponent byte (custom alignment) and zero padding relative to `start`.
fn align(out: &mut Vec<u8>, start: usize, opts: &EncodeOptions) {
    if opts.alignment != DEFAULT_ALIGNMENT {
        out.push(opts.alignment.trailing_zeros() as u8);
    }
    let pad = pad_to((out.len() - start) as u64, opts.alignment) as usize;
    out.resize(out.len() + pad, 0);
}

/// The header of a dense packet up to (and including) its padding.
fn dense_head(t: &Tensor<'_>, opts: &EncodeOptions, compressed: bool, out: &mut Vec<u8>) -> Result<()> {
    check_elements(t.shape())?;
    let start = out.len();
    let mut f = align_flags(opts);
    if opts.integrity {
        f |= flags::INTEGRITY;
    }
    if compressed {
        f |= flags::COMPRESSION;
    }
    header(out, f, dtype_code(t.dtype()), t.shape().len());
    shape(out, t.shape())?;
    align(out, start, opts);
    Ok(())
}

fn write_dense(t: &Tensor<'_>, opts: &EncodeOptions, out: &mut Vec<u8>) -> Result<()> {
    let start = out.len();
    if opts.compress {
        let mut frame = Vec::new();
        compress_frame(t.data(), &mut frame);
        if !(opts.skip_incompressible && frame.len() >= t.nbytes()) {
            dense_head(t, opts, true, out)?;
            out.extend_from_slice(&frame);
            if opts.integrity {
                out.extend_from_slice(&crate::hash::xxh3_64(&frame).to_le_bytes());
            }
            return Ok(());
        }
        out.truncate(start);
    }
    dense_head(t, opts, false, out)?;
    out.reserve(t.nbytes() + 8);
    out.extend_from_slice(t.data());
    if opts.integrity {
        out.extend_from_slice(&crate::hash::xxh3_64(t.data()).to_le_bytes());
    }
    Ok(())
}

fn write_quantized(q: &Quantized<'_>, opts: &EncodeOptions, out: &mut Vec<u8>) -> Result<()> {
    check_elements(&q.shape)?;
    let n = crate::tensor::numel(&q.shape).unwrap_or(0);
    let body_len = q.qdtype.packed_len(n);
    if q.data.len() as u64 != body_len {
        return Err(Error::encode(format!(
            "{} tensor of shape {:?} packs into {body_len} bytes, but {} were given",
            q.qdtype.name(),
            q.shape,
            q.data.len()
        )));
    }
    if q.scales.len() != q.zero_points.len() {
        return Err(Error::encode(format!(
            "{} scales but {} zero points; they pair up one to one",
            q.scales.len(),
            q.zero_points.len()
        )));
    }
    let start = out.len();
    let f = align_flags(opts) | if opts.integrity { flags::INTEGRITY } else { 0 };
    header(out, f, q.qdtype.code(), q.shape.len());
    shape(out, &q.shape)?;
    let meta_start = out.len();
    out.push(q.scheme.code());
    out.push(q.axis);
    out.extend_from_slice(&q.group_size.to_le_bytes());
    out.extend_from_slice(&(q.scales.len() as u32).to_le_bytes());
    for s in &q.scales {
        out.extend_from_slice(&s.to_le_bytes());
    }
    for z in &q.zero_points {
        out.extend_from_slice(&z.to_le_bytes());
    }
    let meta_end = out.len();
    align(out, start, opts);
    let body_start = out.len();
    out.extend_from_slice(&q.data);
    if opts.integrity {
        let mut h = crate::hash::Xxh3::new();
        h.update(&out[meta_start..meta_end]);
        h.update(&out[body_start..]);
        let d = h.digest();
        out.extend_from_slice(&d.to_le_bytes());
    }
    Ok(())
}

fn write_strings(s: &Strings<'_>, opts: &EncodeOptions, out: &mut Vec<u8>) -> Result<()> {
    let count =
        u32::try_from(s.len()).map_err(|_| Error::encode(format!("{} strings; at most 4294967295 fit", s.len())))?;
    let start = out.len();
    header(
        out,
        flags::STRING | flags::ALIGNED | if opts.integrity { flags::INTEGRITY } else { 0 },
        20,
        1,
    );
    out.extend_from_slice(&count.to_le_bytes());
    let pad = pad_to((out.len() - start) as u64, DEFAULT_ALIGNMENT) as usize;
    out.resize(out.len() + pad, 0);
    let body = out.len();
    out.extend_from_slice(&s.offsets);
    out.extend_from_slice(&s.payload);
    if opts.integrity {
        let d = crate::hash::xxh3_64(&out[body..]);
        out.extend_from_slice(&d.to_le_bytes());
    }
    Ok(())
}

/// Writes a `u32` length prefix, then `write`, then patches the prefix; refuses 4 GiB or more.
fn prefixed(
    out: &mut Vec<u8>,
    what: &dyn Fn() -> alloc::string::String,
    write: impl FnOnce(&mut Vec<u8>) -> Result<()>,
) -> Result<()> {
    let at = out.len();
    out.extend_from_slice(&[0; 4]);
    write(out)?;
    let len = out.len() - at - 4;
    let l = u32::try_from(len).map_err(|_| {
        Error::encode(format!(
            "{} is {len} bytes encoded; length prefixes are 32-bit, so entries must stay below 4 GiB (tenso 0.24 silently corrupts such packets)",
            what()
        ))
    })?;
    out[at..at + 4].copy_from_slice(&l.to_le_bytes());
    Ok(())
}

fn write_bundle(b: &Bundle<'_>, opts: &EncodeOptions, out: &mut Vec<u8>, depth: usize) -> Result<()> {
    if b.entries.len() > MAX_BUNDLE_ENTRIES {
        return Err(Error::encode(format!(
            "bundle has {} entries; the wire format encodes the entry count in a single byte, so at most 255 entries are supported",
            b.entries.len()
        )));
    }
    if depth >= MAX_DEPTH {
        return Err(Error::encode("containers nested deeper than 64 levels"));
    }
    header(out, flags::BUNDLE, 0, b.entries.len());
    let leaf_opts = EncodeOptions {
        compress: opts.compress && opts.compress_in_containers,
        ..opts.clone()
    };
    for (k, v) in &b.entries {
        let kb = k.as_bytes();
        let kl = u32::try_from(kb.len()).map_err(|_| Error::encode("bundle key longer than 4 GiB"))?;
        out.extend_from_slice(&kl.to_le_bytes());
        out.extend_from_slice(kb);
        prefixed(out, &|| format!("bundle entry {k:?}"), |out| {
            write_packet(v, &leaf_opts, out, depth + 1)
        })?;
    }
    Ok(())
}

fn write_sparse(s: &Sparse<'_>, opts: &EncodeOptions, out: &mut Vec<u8>, depth: usize) -> Result<()> {
    if depth >= MAX_DEPTH {
        return Err(Error::encode("containers nested deeper than 64 levels"));
    }
    // Never write what the decoder (which validates sparse packets by default) would refuse.
    s.validate()?;
    header(out, s.format.flag(), 0, s.shape.len());
    shape(out, &s.shape)?;
    let copts = opts.sparse_component();
    for (t, name) in s.components.iter().zip(s.format.component_names()) {
        prefixed(out, &|| format!("sparse component {name}"), |out| {
            write_dense(t, &copts, out)
        })?;
    }
    Ok(())
}

fn write_packet(p: &Packet<'_>, opts: &EncodeOptions, out: &mut Vec<u8>, depth: usize) -> Result<()> {
    match p {
        Packet::Dense(t) => write_dense(t, opts, out),
        Packet::Quantized(q) => write_quantized(q, opts, out),
        Packet::Strings(s) => write_strings(s, opts, out),
        Packet::Bundle(b) => write_bundle(b, opts, out, depth),
        Packet::Sparse(s) => write_sparse(s, opts, out, depth),
    }
}

/// A dense packet as three pieces for vectored writes (`writev`, `Blob([...])`): the header
/// (with padding), the body, and the footer. The body borrows the tensor's bytes unless it was
/// compressed, so encoding a 1 GB tensor this way copies nothing.
#[derive(Clone, Debug)]
pub struct Parts<'a> {
    /// Header, shape, exponent byte and padding.
    pub head: Vec<u8>,
    /// The body: the tensor's own bytes (borrowed) or an LZ4 frame (owned).
    pub body: Cow<'a, [u8]>,
    /// The XXH3 footer, or empty.
    pub footer: Vec<u8>,
}

impl Parts<'_> {
    /// Total packet length.
    pub fn len(&self) -> usize {
        self.head.len() + self.body.len() + self.footer.len()
    }

    /// `true` if the packet has no bytes (never: a header is always there).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The three pieces, in order.
    pub fn slices(&self) -> [&[u8]; 3] {
        [&self.head, &self.body, &self.footer]
    }

    /// `true` when the body references the caller's bytes (nothing copied).
    pub fn body_is_borrowed(&self) -> bool {
        matches!(self.body, Cow::Borrowed(_))
    }

    /// Joins the pieces into one buffer.
    pub fn to_vec(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(self.len());
        for s in self.slices() {
            v.extend_from_slice(s);
        }
        v
    }
}

/// Encodes a dense tensor as [`Parts`], without copying an uncompressed body.
pub fn encode_parts<'a>(t: &'a Tensor<'_>, opts: &EncodeOptions) -> Result<Parts<'a>> {
    opts.check()?;
    let mut head = Vec::with_capacity(192);
    let body: Cow<'a, [u8]> = if opts.compress {
        let mut frame = Vec::new();
        compress_frame(t.data(), &mut frame);
        if opts.skip_incompressible && frame.len() >= t.nbytes() {
            Cow::Borrowed(t.data())
        } else {
            Cow::Owned(frame)
        }
    } else {
        Cow::Borrowed(t.data())
    };
    dense_head(t, opts, matches!(body, Cow::Owned(_)), &mut head)?;
    let footer = if opts.integrity {
        crate::hash::xxh3_64(&body).to_le_bytes().to_vec()
    } else {
        Vec::new()
    };
    Ok(Parts { head, body, footer })
}
