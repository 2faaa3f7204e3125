//! Tenso packets with host allocation: [`encode`] and [`decode_owned`] are the core's
//! [`tensorlane_core::wire::encode`] and `decode(..).into_owned()` with large outputs in
//! [`crate::buffers`] (transparent huge pages on Linux), which makes a 64 MiB encode or decode +
//! copy about twice as fast on a fresh buffer (BENCHMARKS.md). Same bytes, same errors.
//!
//! Faster still, when a buffer can be reused: [`tensorlane_core::wire::encode_into`] into a `Vec`
//! you keep (`clear()` it between packets; its pages are already mapped), and
//! [`tensorlane_core::wire::decode`], which returns views of the input and copies nothing.

use tensorlane_core::wire::{self, DecodeOptions, EncodeOptions, Packet, Result};

use crate::buffers;

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
/// The same packet as `decode_with(bytes, opts)?.packet.into_owned()`.
pub fn decode_owned(bytes: &[u8], opts: &DecodeOptions) -> Result<Packet<'static>> {
    Ok(wire::decode_with(bytes, opts)?
        .packet
        .into_owned_with(&mut |b| buffers::copy_of(b)))
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
}
