//! Borrowing decode of complete packets.

use alloc::borrow::Cow;
use alloc::string::String;
use alloc::vec::Vec;
use core::ops::Range;

use super::error::{Error, ErrorKind, Result};
use super::layout::{Ctx, Fault, Header, Layout, layout, u64_at};
use super::lz4::decompress_frame;
use super::packet::{Bundle, Packet, QDType, QuantScheme, Quantized, Sparse, SparseFormat, Strings};
use super::{dtype_from_code, flags};
use crate::dtype::DType;
use crate::tensor::Tensor;

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
pub fn decode(bytes: &[u8]) -> Result<Packet<'_>> {
    decode_with(bytes, &DecodeOptions::default()).map(|d| d.packet)
}

/// Decodes one packet with explicit options.
pub fn decode_with<'a>(bytes: &'a [u8], opts: &DecodeOptions) -> Result<Decoded<'a>> {
    let (packet, len) = decode_at(bytes, opts, 0)?;
    if !opts.allow_trailing_bytes && len < bytes.len() {
        return Err(Error::new(ErrorKind::TrailingBytes((bytes.len() - len) as u64), len));
    }
    Ok(Decoded { packet, len })
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

pub(crate) fn decode_at<'a>(bytes: &'a [u8], opts: &DecodeOptions, depth: usize) -> Result<(Packet<'a>, usize)> {
    let l = match layout(
        bytes,
        Ctx {
            bounded: true,
            allow_v2: opts.allow_v2,
        },
        depth,
    ) {
        Ok(l) => l,
        Err(Fault::Short(n)) => return Err(short(bytes, n)),
        Err(Fault::Bad(e)) => return Err(e),
    };
    let end = l.end();
    let packet = match l {
        Layout::Dense {
            header,
            shape,
            body,
            compressed,
            footer,
            ..
        } => {
            let dtype = dtype_from_code(header.dtype_code)
                .ok_or_else(|| Error::new(ErrorKind::UnknownDType(header.dtype_code), 7))?;
            footer_check(bytes, footer, || crate::hash::xxh3_64(&bytes[body.clone()]), opts)?;
            let data = dense_data(bytes, dtype, &shape, body, compressed, opts)?;
            Packet::Dense(Tensor::from_parts_unchecked(dtype, shape, data))
        }
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
            Packet::Quantized(Quantized {
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

/// The body of a dense packet: borrowed, or decompressed (bounded by the shape and the options).
fn dense_data<'a>(
    bytes: &'a [u8],
    dtype: DType,
    shape: &[u64],
    body: Range<usize>,
    compressed: bool,
    opts: &DecodeOptions,
) -> Result<Cow<'a, [u8]>> {
    Ok(if compressed {
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
        Cow::Owned(decompress_frame(frame, expected as usize).map_err(|e| e.shifted(body.start as u64))?)
    } else {
        Cow::Borrowed(&bytes[body])
    })
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
    Ok(Packet::Sparse(s))
}
