//! Tenso packets with host allocation: [`encode`] and [`decode_owned`] are the core's
//! [`tensorlane_core::wire::encode`] and `decode(..).into_owned()` with large outputs in
//! [`crate::buffers`] (transparent huge pages on Linux), which makes a 64 MiB encode or decode +
//! copy about twice as fast on a fresh buffer (BENCHMARKS.md). Same bytes, same errors.
//!
//! Faster still, when a buffer can be reused: [`tensorlane_core::wire::encode_into`] into a `Vec`
//! you keep (`clear()` it between packets; its pages are already mapped), and
//! [`tensorlane_core::wire::decode`], which returns views of the input and copies nothing.

use tensorlane_core::DType;
use tensorlane_core::wire::{
    self, DEFAULT_ALIGNMENT, DecodeOptions, EncodeOptions, MAGIC, MAX_ALIGNMENT, MAX_ELEMENTS, MAX_NDIM, Packet,
    Result, VERSION, dtype_code, flags,
};

use crate::buffers;

/// The head of a dense packet (header, shape, the alignment exponent byte and padding) for a
/// tensor of `dtype` and `shape` whose body is written separately, uncompressed: the same bytes
/// as [`wire::encode_parts`]`(t, opts).head` for such a tensor, without the body in memory. A
/// server streams a packet as this head, the tensor's bytes read from the file in pieces, and
/// (with `opts.integrity`) the [`BodyHash`] footer of those bytes.
///
/// Refused, with a message saying what to change: `opts.compress` (a streamed body is not
/// compressed), an alignment that is not a power of two up to [`MAX_ALIGNMENT`], more than
/// [`MAX_NDIM`] dimensions, a dimension over `u32::MAX` and more than [`MAX_ELEMENTS`] elements
/// (the format's limits, which the encoder enforces too).
pub fn dense_head(dtype: DType, shape: &[u64], opts: &EncodeOptions) -> std::result::Result<Vec<u8>, String> {
    if opts.compress {
        return Err("a streamed body is written as it is: encode without compression".into());
    }
    if !opts.alignment.is_power_of_two() || opts.alignment > MAX_ALIGNMENT {
        return Err(format!(
            "alignment {} is not a power of two up to {MAX_ALIGNMENT}",
            opts.alignment
        ));
    }
    if shape.len() > MAX_NDIM {
        return Err(format!(
            "{} dimensions; the format allows at most {MAX_NDIM}",
            shape.len()
        ));
    }
    match shape.iter().try_fold(1u64, |n, &d| n.checked_mul(d)) {
        Some(n) if n <= MAX_ELEMENTS => {}
        Some(n) => return Err(format!("{n} elements; the format allows at most {MAX_ELEMENTS}")),
        None => return Err("the element count overflows 64 bits".into()),
    }
    let mut f = if opts.alignment == DEFAULT_ALIGNMENT {
        flags::ALIGNED
    } else {
        flags::CUST_ALIGN
    };
    if opts.integrity {
        f |= flags::INTEGRITY;
    }
    let mut out = Vec::with_capacity(16 + 4 * shape.len() + opts.alignment.min(256) as usize);
    out.extend_from_slice(&MAGIC);
    out.push(VERSION);
    out.extend_from_slice(&f.to_le_bytes());
    out.push(dtype_code(dtype));
    out.push(shape.len() as u8);
    out.push(0);
    for (i, &d) in shape.iter().enumerate() {
        let d = u32::try_from(d).map_err(|_| {
            format!(
                "dimension {i} is {d}, above the wire-format limit of 4294967295 (each dimension is a 32-bit integer)"
            )
        })?;
        out.extend_from_slice(&d.to_le_bytes());
    }
    if opts.alignment != DEFAULT_ALIGNMENT {
        out.push(opts.alignment.trailing_zeros() as u8);
    }
    let pad = (opts.alignment - out.len() as u64 % opts.alignment) % opts.alignment;
    out.resize(out.len() + pad as usize, 0);
    Ok(out)
}

/// The integrity footer of a dense packet whose body is fed in pieces: after [`update`] with
/// every piece of the body in order, [`finish`] gives the 8 bytes [`wire::encode_parts`] puts
/// in `footer` (XXH3-64 of the body, little-endian, by [`tensorlane_core::hash`]).
///
/// [`update`]: BodyHash::update
/// [`finish`]: BodyHash::finish
#[derive(Clone)]
pub struct BodyHash(tensorlane_core::hash::Xxh3);

impl Default for BodyHash {
    fn default() -> Self {
        BodyHash(tensorlane_core::hash::Xxh3::new())
    }
}

impl std::fmt::Debug for BodyHash {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("BodyHash")
    }
}

impl BodyHash {
    /// A hash of no bytes yet.
    pub fn new() -> BodyHash {
        BodyHash::default()
    }

    /// Feeds the next piece of the body.
    pub fn update(&mut self, piece: &[u8]) {
        self.0.update(piece);
    }

    /// The footer for the pieces fed so far.
    pub fn finish(&self) -> [u8; 8] {
        self.0.digest().to_le_bytes()
    }
}

/// The bytes the packet's payloads take (bodies, scales, string offsets), plus a generous
/// allowance for headers and alignment: a capacity that an encode nearly never outgrows.
fn size_hint(p: &Packet<'_>, compress: bool) -> usize {
    const HEAD: usize = 256;
    let body = |n: usize| if compress { n + n / 255 + 64 } else { n };
    match p {
        Packet::Dense(t) => HEAD + body(t.nbytes()),
        Packet::Bundle(b) => {
            HEAD + b
                .entries
                .iter()
                .map(|(k, v)| k.len() + 8 + size_hint(v, compress))
                .sum::<usize>()
        }
        Packet::Sparse(s) => HEAD + s.components.iter().map(|c| HEAD + c.nbytes()).sum::<usize>(),
        Packet::Quantized(q) => HEAD + body(q.data.len()) + 8 * q.scales.len(),
        Packet::Strings(s) => HEAD + body(s.payload().len() + 8 * (s.len() + 1)),
    }
}

/// Encodes a packet into a new buffer sized for it up front ([`buffers::with_capacity`]): the
/// same bytes as [`tensorlane_core::wire::encode`].
pub fn encode(packet: &Packet<'_>, opts: &EncodeOptions) -> Result<Vec<u8>> {
    let mut out = buffers::with_capacity(size_hint(packet, opts.compress));
    wire::encode_into(packet, opts, &mut out)?;
    Ok(out)
}

/// Decodes a packet and detaches it from `bytes`: every body that was a view of the input is
/// copied into a [`buffers::copy_of`] buffer (decompressed bodies are already owned and move).
/// The same packet, and the same errors, as `decode_with(bytes, opts)?.packet.into_owned()`.
///
/// A dense, uncompressed packet with an XXH3 footer is copied and hashed in one pass over its
/// body, [`FUSED_PIECE`] bytes at a time, each piece hashed while it is still in cache, instead
/// of one pass to verify and a second to copy: a body larger than the caches is read from memory
/// once. A mismatch is reported exactly as the two-pass decode reports it.
pub fn decode_owned(bytes: &[u8], opts: &DecodeOptions) -> Result<Packet<'static>> {
    if let Some(packet) = decode_dense_fused(bytes, opts)? {
        return Ok(packet);
    }
    Ok(wire::decode_with(bytes, opts)?
        .packet
        .into_owned_with(&mut |b| buffers::copy_of(b)))
}

/// The piece [`decode_owned`] copies and then hashes at a time: small enough to stay in a core's
/// L2 cache between the two.
pub const FUSED_PIECE: usize = 256 << 10;

/// [`decode_owned`]'s one-pass path, or `None` where it does not apply (not a top-level dense
/// packet with a footer and an uncompressed body, or integrity not verified).
fn decode_dense_fused(bytes: &[u8], opts: &DecodeOptions) -> Result<Option<Packet<'static>>> {
    const NOT_PLAIN_DENSE: u16 = flags::COMPRESSION
        | flags::BUNDLE
        | flags::SPARSE_COO
        | flags::SPARSE_CSR
        | flags::SPARSE_CSC
        | flags::STRING
        | flags::RAGGED
        | flags::GPU_IPC_REF;
    let Some(f) = bytes.get(5..7).map(|f| u16::from_le_bytes([f[0], f[1]])) else {
        return Ok(None);
    };
    if !opts.verify_integrity || f & flags::INTEGRITY == 0 || f & NOT_PLAIN_DENSE != 0 {
        return Ok(None);
    }
    let unverified = DecodeOptions {
        verify_integrity: false,
        ..opts.clone()
    };
    // Every rule but the footer's is checked here, in O(header) time: the body stays a view.
    let decoded = wire::decode_with(bytes, &unverified)?;
    let Packet::Dense(t) = &decoded.packet else {
        return Ok(None);
    };
    if !t.is_view() || decoded.len < 8 {
        return Ok(None);
    }
    let body = t.data();
    let footer = &bytes[decoded.len - 8..decoded.len];
    let mut copy = buffers::with_capacity(body.len());
    let mut hash = tensorlane_core::hash::Xxh3::new();
    for piece in body.chunks(FUSED_PIECE) {
        copy.extend_from_slice(piece);
        hash.update(&copy[copy.len() - piece.len()..]);
    }
    if hash.digest().to_le_bytes() != footer {
        // The two-pass decode names the mismatch (stored and computed values, offset).
        return wire::decode_with(bytes, opts).map(|_| None);
    }
    // The dense body is the one borrowed piece: it takes the copy just made.
    let mut copy = Some(copy);
    Ok(Some(decoded.packet.into_owned_with(&mut |b| {
        copy.take().filter(|c| c.len() == b.len()).unwrap_or_else(|| buffers::copy_of(b))
    })))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tensorlane_core::wire::{Bundle, Strings};
    use tensorlane_core::{DType, Tensor};

    fn body(n: usize) -> Vec<u8> {
        (0..n).map(|i| (i ^ (i >> 9)) as u8).collect()
    }

    #[test]
    fn dense_head_and_body_hash_match_encode_parts_byte_for_byte() {
        let shapes: [&[u64]; 5] = [&[], &[3], &[2, 5], &[1, 1, 7], &[4, 0, 2]];
        let dtypes = [DType::F32, DType::U8, DType::F16, DType::C128, DType::Bool, DType::I64];
        for shape in shapes {
            for dtype in dtypes {
                let n: u64 = shape.iter().product();
                let data = body(n as usize * dtype.itemsize());
                let t = Tensor::new(dtype, shape.to_vec(), &data[..]).unwrap();
                for alignment in [1u64, 8, 64, 4096] {
                    for integrity in [false, true] {
                        let opts = EncodeOptions {
                            alignment,
                            integrity,
                            ..EncodeOptions::default()
                        };
                        let parts = wire::encode_parts(&t, &opts).unwrap();
                        assert_eq!(
                            dense_head(dtype, shape, &opts).unwrap(),
                            parts.head,
                            "{dtype:?} {shape:?} {alignment}"
                        );
                        let mut h = BodyHash::new();
                        for piece in data.chunks(5) {
                            h.update(piece);
                        }
                        if integrity {
                            assert_eq!(&h.finish()[..], &parts.footer[..]);
                        }
                    }
                }
            }
        }
        let compress = EncodeOptions {
            compress: true,
            ..EncodeOptions::default()
        };
        assert!(
            dense_head(DType::U8, &[4], &compress)
                .unwrap_err()
                .contains("compression")
        );
        assert!(dense_head(DType::U8, &[1 << 33], &EncodeOptions::default()).is_err());
        assert!(
            dense_head(DType::U8, &[1 << 20, 1 << 20], &EncodeOptions::default())
                .unwrap_err()
                .contains("elements")
        );
    }

    #[test]
    fn encode_and_decode_owned_match_the_core_byte_for_byte() {
        let big = body(buffers::HUGE_PAGE_THRESHOLD);
        let small = body(100);
        let strings = Strings::from_items(&[&b"ab"[..], b"", b"xyz"]);
        let packets = [
            Packet::Dense(Tensor::new(DType::F32, vec![(big.len() / 4) as u64], &big[..]).unwrap()),
            Packet::Dense(Tensor::new(DType::U8, vec![100], &small[..]).unwrap()),
            Packet::Bundle(
                Bundle::new()
                    .with(
                        "w",
                        Packet::Dense(Tensor::new(DType::U8, vec![big.len() as u64], &big[..]).unwrap()),
                    )
                    .with("s", Packet::Strings(strings)),
            ),
        ];
        for (i, p) in packets.iter().enumerate() {
            for (j, opts) in [
                EncodeOptions::default(),
                EncodeOptions {
                    integrity: true,
                    ..EncodeOptions::default()
                },
                EncodeOptions {
                    compress: true,
                    ..EncodeOptions::default()
                },
            ]
            .into_iter()
            .enumerate()
            {
                // LZ4 on the large bodies is slow in a debug build; the small one covers it.
                if j == 2 && i != 1 {
                    continue;
                }
                let ours = encode(p, &opts).unwrap();
                assert_eq!(ours, wire::encode(p, &opts).unwrap());
                let owned = decode_owned(&ours, &DecodeOptions::default()).unwrap();
                let core = wire::decode(&ours).unwrap().into_owned();
                assert_eq!(owned, core);
                assert_eq!(&owned, p);
            }
        }
        // Errors are the core's.
        let bad = b"TNSO\x09";
        assert_eq!(
            decode_owned(bad, &DecodeOptions::default()).unwrap_err().to_string(),
            wire::decode(bad).unwrap_err().to_string()
        );
    }

    /// The one-pass copy-and-hash path gives what the two-pass decode gives: the same packet for
    /// bodies around the piece size, and the same error for a flipped byte anywhere in the body
    /// or footer, a cut packet, trailing bytes refused, and a missing footer required.
    #[test]
    fn fused_copy_and_hash_equals_verify_then_copy() {
        let integrity = EncodeOptions {
            integrity: true,
            ..EncodeOptions::default()
        };
        let two_pass = |b: &[u8], o: &DecodeOptions| wire::decode_with(b, o).map(|d| d.packet.into_owned());
        for len in [0, 1, FUSED_PIECE - 1, FUSED_PIECE, FUSED_PIECE + 1, 3 * FUSED_PIECE + 17] {
            let data = body(len);
            let p = Packet::Dense(Tensor::new(DType::U8, vec![len as u64], &data[..]).unwrap());
            let ours = encode(&p, &integrity).unwrap();
            assert!(decode_dense_fused(&ours, &DecodeOptions::default()).unwrap().is_some());
            assert_eq!(decode_owned(&ours, &DecodeOptions::default()).unwrap(), p, "len {len}");
            let body_start = ours.len() - 8 - len;
            let mut flips = vec![ours.len() - 1, ours.len() - 8];
            if len > 0 {
                flips.extend([body_start, body_start + len / 2, body_start + len - 1]);
            }
            for at in flips {
                let mut bad = ours.clone();
                bad[at] ^= 0x40;
                let o = DecodeOptions::default();
                assert_eq!(
                    decode_owned(&bad, &o).unwrap_err().to_string(),
                    two_pass(&bad, &o).unwrap_err().to_string(),
                    "len {len}, flipped byte {at}"
                );
            }
            let cut = &ours[..ours.len() - 3];
            assert_eq!(
                decode_owned(cut, &DecodeOptions::default()).unwrap_err().to_string(),
                two_pass(cut, &DecodeOptions::default()).unwrap_err().to_string()
            );
            let mut trailing = ours.clone();
            trailing.extend_from_slice(b"xyz");
            let strict = DecodeOptions {
                allow_trailing_bytes: false,
                ..DecodeOptions::default()
            };
            assert_eq!(
                decode_owned(&trailing, &strict).unwrap_err().to_string(),
                two_pass(&trailing, &strict).unwrap_err().to_string()
            );
            assert_eq!(decode_owned(&trailing, &DecodeOptions::default()).unwrap(), p);
        }
        // Unverified, or without a footer: the ordinary path, with the same answers.
        let data = body(1000);
        let p = Packet::Dense(Tensor::new(DType::U8, vec![1000], &data[..]).unwrap());
        let plain = encode(&p, &EncodeOptions::default()).unwrap();
        assert!(decode_dense_fused(&plain, &DecodeOptions::default()).unwrap().is_none());
        let required = DecodeOptions {
            require_integrity: true,
            ..DecodeOptions::default()
        };
        assert_eq!(
            decode_owned(&plain, &required).unwrap_err().to_string(),
            two_pass(&plain, &required).unwrap_err().to_string()
        );
        let mut bad = encode(&p, &integrity).unwrap();
        let n = bad.len();
        bad[n - 20] ^= 1;
        let unverified = DecodeOptions {
            verify_integrity: false,
            ..DecodeOptions::default()
        };
        assert!(decode_dense_fused(&bad, &unverified).unwrap().is_none());
        assert_eq!(decode_owned(&bad, &unverified).unwrap(), two_pass(&bad, &unverified).unwrap());
    }
}
