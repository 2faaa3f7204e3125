//! Borrowing decode of complete packets.

use alloc::borrow::Cow;
use alloc::string::String;
use alloc::vec::Vec;
use core::ops::Range;

use super::error::{Error, ErrorKind, Result};
use super::layout::{
    Ctx, DenseLayout, Fault, Header, Layout, dense_layout, header, is_dense, layout_after_header, u64_at,
};
use super::lz4::decompress_frame;
use super::packet::{Bundle, Packet, QDType, QuantScheme, Quantized, Sparse, SparseFormat, Strings};
use super::{MAGIC, MAX_ELEMENTS, dtype_from_code, flags, pad_to};
use crate::dtype::DType;
use crate::tensor::{Dims, INLINE_DIMS, Tensor};

/// How strict the decoder is. The defaults read everything tenso 0.24.0 writes and accepts.
#[derive(Clone, Debug)]
pub struct DecodeOptions {
    /// Verify XXH3 footers where the INTEGRITY flag is set (default `true`).
    pub verify_integrity: bool,
    /// Refuse leaf packets (dense, quantized, string) that carry no footer (default `false`).
    pub require_integrity: bool,
    /// Cap on the bytes one compressed body may decompress to (default 4 GiB, or `isize::MAX`
    /// bytes on 32-bit targets). The shape bounds it too.
    pub max_decompressed_bytes: u64,
    /// Accept bytes after a complete top-level packet (default `true`, as tenso does).
    pub allow_trailing_bytes: bool,
    /// Read version-2 packets (tenso 0.10.x) with the v3 rules (default `false`, as tenso 0.24).
    pub allow_v2: bool,
    /// Refuse bundles whose keys repeat (default `false`: wire order kept, the last wins on lookup).
    pub strict_keys: bool,
    /// Check sparse components for consistency and bounds (default `true`).
    pub validate_sparse: bool,
}

impl Default for DecodeOptions {
    #[inline]
    fn default() -> Self {
        DecodeOptions {
            verify_integrity: true,
            require_integrity: false,
            max_decompressed_bytes: (4u64 << 30).min(isize::MAX as u64),
            allow_trailing_bytes: true,
            allow_v2: false,
            strict_keys: false,
            validate_sparse: true,
        }
    }
}

/// A decoded packet and how many bytes of the input it spans.
#[derive(Clone, Debug, PartialEq)]
pub struct Decoded<'a> {
    /// The packet.
    pub packet: Packet<'a>,
    /// Bytes the packet spans from the start of the input; trailing bytes come after.
    pub len: usize,
}

/// Decodes one packet with the default options, borrowing the input where it can.
///
/// A dense, uncompressed body comes back as a view of `bytes` in O(1) time
/// ([`Tensor::is_view`]); compressed bodies are decompressed into owned memory.
#[inline]
pub fn decode(bytes: &[u8]) -> Result<Packet<'_>> {
    let opts = DecodeOptions::default();
    if let Some(v) = plain_dense(bytes, &opts) {
        return Ok(v.packet(bytes));
    }
    decode_general(bytes, &opts).map(|d| d.packet)
}

/// Decodes one packet with explicit options.
#[inline]
pub fn decode_with<'a>(bytes: &'a [u8], opts: &DecodeOptions) -> Result<Decoded<'a>> {
    if let Some(v) = plain_dense(bytes, opts)
        && (opts.allow_trailing_bytes || v.end == bytes.len())
    {
        return Ok(Decoded {
            len: v.end,
            packet: v.packet(bytes),
        });
    }
    decode_general(bytes, opts)
}

/// Checks one packet as [`decode_with`] does (its framing, every bound and limit, and the XXH3
/// footers `opts` asks for) without building the [`Packet`]: the packet's length in bytes, or
/// the error [`decode_with`] would give, the same kind at the same offset.
///
/// For code that needs to know a packet arrived whole but not its values: a relay or store that
/// forwards packets untouched, a file check (`tensorlane inspect` of a `.tenso` file walks its
/// packets with it). The dense packet of rank 4 or less, uncompressed, costs its header parse
/// and the XXH3 pass: 0.91-0.95x of XXH3 alone over a 4 KiB body, where [`decode_with`]'s
/// 72-byte [`Packet`], built, returned and dropped, costs about a tenth more (`BENCHMARKS.md`).
/// Every other packet is decoded and dropped, so it costs what decoding it costs.
#[inline]
pub fn verify(bytes: &[u8], opts: &DecodeOptions) -> Result<usize> {
    if let Some(v) = plain_dense(bytes, opts)
        && (opts.allow_trailing_bytes || v.end == bytes.len())
    {
        return Ok(v.end);
    }
    decode_general(bytes, opts).map(|d| d.len)
}

/// [`decode_with`] without the fast path: every packet kind, and every error.
#[inline(never)]
fn decode_general<'a>(bytes: &'a [u8], opts: &DecodeOptions) -> Result<Decoded<'a>> {
    let (packet, len) = decode_at(bytes, opts, 0)?;
    if !opts.allow_trailing_bytes && len < bytes.len() {
        return Err(Error::new(ErrorKind::TrailingBytes((bytes.len() - len) as u64), len));
    }
    Ok(Decoded { packet, len })
}

/// A complete, valid, uncompressed dense packet of at most [`INLINE_DIMS`] dimensions, found by
/// [`plain_dense`]: plain scalars, so that the public functions build their result once, in
/// place.
struct PlainDense {
    dtype: DType,
    ndim: usize,
    dims: [u64; INLINE_DIMS],
    body: Range<usize>,
    end: usize,
}

impl PlainDense {
    #[inline(always)]
    fn packet<'a>(self, bytes: &'a [u8]) -> Packet<'a> {
        Packet::Dense(Tensor::from_parts_unchecked(
            self.dtype,
            Dims::inline(self.ndim, self.dims),
            Cow::Borrowed(&bytes[self.body]),
        ))
    }
}

/// The fast path of [`decode`] and [`decode_with`], for the packet nearly everyone sends: a v3/v4
/// dense packet, uncompressed, with no flag but ALIGNED, CUST_ALIGN and INTEGRITY, of rank 4 or
/// less.
///
/// It accepts exactly what the general path ([`decode_at`]) accepts for such a packet, with the
/// same checks (element cap, overflow-safe lengths, the footer when `opts` asks), and answers
/// `None` for everything else, errors included: the general path then decodes it, or names
/// the fault with its offset, exactly as before. On a 4 KiB packet the general path takes ~75-117 ns
/// (the `Layout` built and the `Packet` moved between frames) and this one ~16 ns
/// (`BENCHMARKS.md`); `fast_path_agrees_with_the_general_path` below holds the two together.
#[inline(always)]
fn plain_dense(bytes: &[u8], opts: &DecodeOptions) -> Option<PlainDense> {
    if bytes.len() < 10 || bytes[..4] != MAGIC {
        return None;
    }
    let (flag_bits, code, ndim, base) = match bytes[4] {
        4 => (
            u16::from_le_bytes([bytes[5], bytes[6]]),
            bytes[7],
            bytes[8] as usize,
            10,
        ),
        3 => (bytes[5] as u16, bytes[6], bytes[7] as usize, 8),
        _ => return None,
    };
    if flag_bits & !(flags::ALIGNED | flags::INTEGRITY | flags::CUST_ALIGN) != 0 || ndim > INLINE_DIMS {
        return None;
    }
    let dtype = dtype_from_code(code)?;
    let shape_end = base + 4 * ndim;
    let shape = bytes.get(base..shape_end)?;
    let mut dims = [0u64; INLINE_DIMS];
    let mut numel = 1u64;
    for (d, c) in dims.iter_mut().zip(shape.chunks_exact(4)) {
        *d = u32::from_le_bytes([c[0], c[1], c[2], c[3]]) as u64;
        numel = numel.checked_mul(*d)?;
    }
    if numel > MAX_ELEMENTS {
        return None;
    }
    let (align, pos) = if flag_bits & flags::CUST_ALIGN != 0 {
        let e = *bytes.get(shape_end)?;
        if e >= 64 {
            return None;
        }
        (1u64 << e, shape_end + 1)
    } else if flag_bits & flags::ALIGNED != 0 {
        (64, shape_end)
    } else {
        (1, shape_end)
    };
    // No u64 overflow below: pos < 64, the padding < 2^63, numel <= 10^9 and itemsize <= 16;
    // the end is checked against the input before anything is used as an index.
    let body_start = pos as u64 + pad_to(pos as u64, align);
    let integrity = flag_bits & flags::INTEGRITY != 0;
    let body_end = body_start + numel * dtype.itemsize() as u64;
    let end = body_end + if integrity { 8 } else { 0 };
    if end > bytes.len() as u64 {
        return None;
    }
    let (body_start, body_end, end) = (body_start as usize, body_end as usize, end as usize);
    if integrity {
        if opts.verify_integrity && u64_at(bytes, body_end) != crate::hash::xxh3_64(&bytes[body_start..body_end]) {
            return None;
        }
    } else if opts.require_integrity {
        return None;
    }
    Some(PlainDense {
        dtype,
        ndim,
        dims,
        body: body_start..body_end,
        end,
    })
}

fn short(bytes: &[u8], needed: u64) -> Error {
    Error::new(
        ErrorKind::TooShort {
            needed,
            available: bytes.len() as u64,
        },
        bytes.len(),
    )
}

#[inline]
fn footer_check(bytes: &[u8], at: Option<usize>, hash: impl FnOnce() -> u64, opts: &DecodeOptions) -> Result<()> {
    match at {
        None if opts.require_integrity => Err(Error::new(ErrorKind::IntegrityRequired, 5)),
        None => Ok(()),
        Some(_) if !opts.verify_integrity => Ok(()),
        Some(at) => {
            let stored = u64_at(bytes, at);
            let computed = hash();
            if stored == computed {
                Ok(())
            } else {
                Err(Error::new(ErrorKind::IntegrityMismatch { stored, computed }, at))
            }
        }
    }
}

fn f32s(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// Decodes the packet at the start of `bytes` (nested `depth` containers deep): the packet and
/// how many bytes it spans. Dense packets are built from their own small layout; every other kind
/// goes through [`decode_other`].
pub(crate) fn decode_at<'a>(bytes: &'a [u8], opts: &DecodeOptions, depth: usize) -> Result<(Packet<'a>, usize)> {
    let ctx = Ctx {
        bounded: true,
        allow_v2: opts.allow_v2,
    };
    let h = match header(bytes, opts.allow_v2) {
        Ok(h) => h,
        Err(f) => return Err(fault(bytes, f)),
    };
    if !is_dense(&h) {
        return decode_other(bytes, h, ctx, opts, depth);
    }
    match dense_layout(bytes, h, ctx) {
        Ok(d) => dense_packet(bytes, d, opts),
        Err(f) => Err(fault(bytes, f)),
    }
}

/// A parse fault as the decoder reports it: "short" becomes [`ErrorKind::TooShort`].
#[cold]
fn fault(bytes: &[u8], f: Fault) -> Error {
    match f {
        Fault::Short(n) => short(bytes, n),
        Fault::Bad(e) => e,
    }
}

/// [`decode_at`] for every kind but dense (which it still handles, for completeness).
#[inline(never)]
fn decode_other<'a>(
    bytes: &'a [u8],
    h: Header,
    ctx: Ctx,
    opts: &DecodeOptions,
    depth: usize,
) -> Result<(Packet<'a>, usize)> {
    let l = layout_after_header(bytes, h, ctx, depth).map_err(|f| fault(bytes, f))?;
    let end = l.end();
    let packet = match l {
        Layout::Dense(d) => return dense_packet(bytes, d, opts),
        Layout::Quantized {
            header,
            shape,
            meta,
            num_scales,
            body,
            footer,
            ..
        } => {
            footer_check(
                bytes,
                footer,
                || {
                    let mut h = crate::hash::Xxh3::new();
                    h.update(&bytes[meta.clone()]);
                    h.update(&bytes[body.clone()]);
                    h.digest()
                },
                opts,
            )?;
            let m = &bytes[meta];
            let qdtype = QDType::from_code(header.dtype_code)
                .ok_or_else(|| Error::new(ErrorKind::UnknownDType(header.dtype_code), 7))?;
            let scales = f32s(&m[10..10 + 4 * num_scales]);
            let zero_points = f32s(&m[10 + 4 * num_scales..10 + 8 * num_scales]);
            Packet::from(Quantized {
                qdtype,
                shape,
                scheme: QuantScheme::from_code(m[0]),
                axis: m[1],
                group_size: u32::from_le_bytes([m[2], m[3], m[4], m[5]]),
                scales,
                zero_points,
                data: Cow::Borrowed(&bytes[body]),
            })
        }
        Layout::Strings {
            offsets,
            payload,
            footer,
            ..
        } => {
            footer_check(
                bytes,
                footer,
                || crate::hash::xxh3_64(&bytes[offsets.start..payload.end]),
                opts,
            )?;
            check_string_offsets(bytes, offsets.clone())?;
            Packet::Strings(Strings {
                offsets: Cow::Borrowed(&bytes[offsets]),
                payload: Cow::Borrowed(&bytes[payload]),
            })
        }
        Layout::Bundle { entries, .. } => bundle(bytes, entries, opts, depth)?,
        Layout::Sparse {
            header,
            shape,
            components,
            ..
        } => sparse(bytes, &header, shape, components, opts, depth)?,
    };
    Ok((packet, end))
}

/// A dense packet from its layout: the footer checked (when asked), the body borrowed or
/// decompressed.
#[inline]
fn dense_packet<'a>(bytes: &'a [u8], d: DenseLayout, opts: &DecodeOptions) -> Result<(Packet<'a>, usize)> {
    footer_check(bytes, d.footer, || crate::hash::xxh3_64(&bytes[d.body.clone()]), opts)?;
    let data = if d.compressed {
        Cow::Owned(decompressed(bytes, d.dtype, d.shape.as_slice(), d.body, opts)?)
    } else {
        Cow::Borrowed(&bytes[d.body])
    };
    Ok((
        Packet::Dense(Tensor::from_parts_unchecked(d.dtype, d.shape, data)),
        d.end,
    ))
}

/// A compressed dense body, decompressed (bounded by the shape and the options).
fn decompressed(
    bytes: &[u8],
    dtype: DType,
    shape: &[u64],
    body: Range<usize>,
    opts: &DecodeOptions,
) -> Result<Vec<u8>> {
    let expected = crate::tensor::numel(shape)
        .unwrap_or(u64::MAX)
        .saturating_mul(dtype.itemsize() as u64);
    let frame = &bytes[body.clone()];
    // An LZ4 sequence cannot expand more than ~255:1; anything beyond is a lie.
    let honest = (frame.len() as u64).saturating_mul(256).saturating_add(64);
    if expected > opts.max_decompressed_bytes {
        return Err(Error::new(
            ErrorKind::LimitExceeded {
                what: "decompressed body",
                size: expected,
                limit: opts.max_decompressed_bytes,
            },
            body.start,
        ));
    }
    if expected > honest {
        return Err(Error::new(
            ErrorKind::DecompressedSize {
                expected,
                actual: honest,
            },
            body.start,
        ));
    }
    decompress_frame(frame, expected as usize).map_err(|e| e.shifted(body.start as u64))
}

/// Checks that a strings packet's offsets start at 0 and never decrease.
fn check_string_offsets(bytes: &[u8], offsets: Range<usize>) -> Result<()> {
    let mut prev = 0u64;
    for (i, c) in bytes[offsets.clone()].chunks_exact(8).enumerate() {
        let o = u64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]);
        if (i == 0 && o != 0) || o < prev {
            return Err(Error::new(
                ErrorKind::BadStringOffsets(alloc::format!(
                    "offset {i} is {o}; offsets start at 0 and never decrease"
                )),
                offsets.start + 8 * i,
            ));
        }
        prev = o;
    }
    Ok(())
}

/// The entries of a bundle, each value decoded (errors name the entry's key).
fn bundle<'a>(
    bytes: &'a [u8],
    entries: Vec<(Range<usize>, Range<usize>)>,
    opts: &DecodeOptions,
    depth: usize,
) -> Result<Packet<'a>> {
    let mut out = Vec::with_capacity(entries.len());
    for (k, v) in entries {
        let key = core::str::from_utf8(&bytes[k.clone()]).map_err(|_| Error::new(ErrorKind::InvalidKey, k.start))?;
        if opts.strict_keys && out.iter().any(|(e, _): &(Cow<'_, str>, Packet<'_>)| e == key) {
            return Err(Error::new(ErrorKind::DuplicateKey(String::from(key)), k.start));
        }
        let (value, _) =
            decode_at(&bytes[v.clone()], opts, depth + 1).map_err(|e| e.shifted(v.start as u64).within(key))?;
        out.push((Cow::Borrowed(key), value));
    }
    Ok(Packet::Bundle(Bundle { entries: out }))
}

/// A sparse container: its three dense components, decoded and (when asked) validated.
fn sparse<'a>(
    bytes: &'a [u8],
    header: &Header,
    shape: Vec<u64>,
    components: [Range<usize>; 3],
    opts: &DecodeOptions,
    depth: usize,
) -> Result<Packet<'a>> {
    let format = if header.flags & flags::SPARSE_COO != 0 {
        SparseFormat::Coo
    } else if header.flags & flags::SPARSE_CSR != 0 {
        SparseFormat::Csr
    } else {
        SparseFormat::Csc
    };
    let names = format.component_names();
    let mut comps: Vec<Tensor<'a>> = Vec::with_capacity(3);
    for (r, name) in components.into_iter().zip(names) {
        let (p, _) =
            decode_at(&bytes[r.clone()], opts, depth + 1).map_err(|e| e.shifted(r.start as u64).within(name))?;
        match p {
            Packet::Dense(t) => comps.push(t),
            other => {
                return Err(Error::new(
                    ErrorKind::Sparse(alloc::format!(
                        "component {name} is a {} packet; components are dense",
                        other.kind_name()
                    )),
                    r.start,
                ));
            }
        }
    }
    let [a, b, c]: [Tensor<'a>; 3] = comps
        .try_into()
        .map_err(|_| Error::new(ErrorKind::Sparse("missing components".into()), 0))?;
    let s = Sparse {
        format,
        shape,
        components: [a, b, c],
    };
    if opts.validate_sparse {
        s.validate()?;
    }
    Ok(Packet::from(s))
}

#[cfg(test)]
mod tests {
    use alloc::vec;

    use super::*;
    use crate::wire::{EncodeOptions, encode};

    /// Dense packets the fast path takes: every rank it keeps in place (and one above), v4 as
    /// encoded and v3 rewritten by hand, aligned or not, with and without a footer.
    fn samples() -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        for (dtype, shape) in [
            (DType::F32, vec![]),
            (DType::F32, vec![3]),
            (DType::I16, vec![2, 3]),
            (DType::U8, vec![1, 2, 3]),
            (DType::F64, vec![2, 1, 2, 1]),
            (DType::F32, vec![2, 1, 1, 1, 2]),
            (DType::C64, vec![0, 4]),
        ] {
            let n: u64 = shape.iter().product();
            let data: Vec<u8> = (0..n as usize * dtype.itemsize())
                .map(|i| (i * 37 + 11) as u8)
                .collect();
            let t = Tensor::new(dtype, shape, data).unwrap();
            for (alignment, integrity) in [(64, false), (64, true), (1, false), (1, true)] {
                let opts = EncodeOptions {
                    alignment,
                    integrity,
                    ..EncodeOptions::default()
                };
                let v4 = encode(&Packet::Dense(t.clone()), &opts).unwrap();
                // v3: an 8-byte header with a one-byte flags field; the body moves up by two
                // bytes, so only unaligned packets keep a valid layout.
                if alignment == 1 {
                    let mut v3 = vec![b'T', b'N', b'S', b'O', 3, v4[5], v4[7], v4[8]];
                    v3.extend_from_slice(&v4[10..]);
                    out.push(v3);
                }
                out.push(v4);
            }
        }
        out
    }

    fn option_sets() -> Vec<DecodeOptions> {
        let d = DecodeOptions::default();
        vec![
            d.clone(),
            DecodeOptions {
                verify_integrity: false,
                ..d.clone()
            },
            DecodeOptions {
                require_integrity: true,
                ..d.clone()
            },
            DecodeOptions {
                allow_trailing_bytes: false,
                ..d.clone()
            },
            DecodeOptions { allow_v2: true, ..d },
        ]
    }

    /// The fast path and the general path give the same packet, length and error (kind, offset)
    /// for valid packets and for every truncation, one-byte corruption (header, shape, body,
    /// footer), flag bit and trailing byte of them, under every option that changes the outcome;
    /// and the fast path does take the valid ones. `verify` gives the same length or error.
    #[test]
    fn fast_path_agrees_with_the_general_path() {
        let mut taken = 0;
        for packet in samples() {
            assert!(decode_general(&packet, &DecodeOptions::default()).is_ok());
            let mut variants = vec![packet.clone()];
            for cut in 0..packet.len() {
                variants.push(packet[..cut].to_vec());
            }
            for at in 0..packet.len() {
                for v in [0u8, 0xff, packet[at] ^ 1, packet[at].wrapping_add(1), 4, 32] {
                    let mut b = packet.clone();
                    b[at] = v;
                    variants.push(b);
                }
            }
            for bit in 0..16 {
                let mut b = packet.clone();
                if packet[4] == 4 {
                    let f = u16::from_le_bytes([b[5], b[6]]) ^ (1 << bit);
                    b[5..7].copy_from_slice(&f.to_le_bytes());
                } else if bit < 8 {
                    b[5] ^= 1 << bit;
                }
                variants.push(b);
            }
            let mut trailing = packet.clone();
            trailing.extend_from_slice(b"tail");
            variants.push(trailing);
            for b in &variants {
                for opts in option_sets() {
                    let general = decode_general(b, &opts);
                    assert_eq!(decode_with(b, &opts), general, "{b:?} {opts:?}");
                    assert_eq!(
                        verify(b, &opts),
                        general.as_ref().map(|d| d.len).map_err(Clone::clone),
                        "{b:?} {opts:?}"
                    );
                    if opts.allow_trailing_bytes && opts.verify_integrity && !opts.require_integrity && !opts.allow_v2 {
                        assert_eq!(decode(b), general.map(|d| d.packet), "{b:?}");
                    }
                    if plain_dense(b, &opts).is_some() {
                        taken += 1;
                    }
                }
            }
            let fast = plain_dense(&packet, &DecodeOptions::default());
            let rank = decode(&packet).unwrap().as_dense().unwrap().shape().len();
            assert_eq!(fast.is_some(), rank <= INLINE_DIMS, "{packet:?}");
        }
        assert!(taken > 100, "the fast path was taken only {taken} times");
    }
}
