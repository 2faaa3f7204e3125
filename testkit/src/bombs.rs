//! Compression bombs for the bounded-memory tests, built at test time (never committed): a few
//! megabytes on disk that declare gigabytes.
//!
//! * [`npz_bomb`]: an `.npz` whose one deflated member `bomb.npy` declares `uint8[n]` of zeros
//!   (for `n` = 3,000,000,000 the file is 2.9 MB, deflate's best ratio), with the member's true
//!   CRC-32, so a reader that streams gets to the end and a reader that inflates whole needs `n`
//!   bytes.
//! * [`zt_seekable_bomb`]: a `.zt` whose one object `bomb` is `uint8[n]` zeros stored as
//!   `zt.zstd-seekable/1` (16 MiB zstd frames, each a few hundred bytes).
//! * [`lz4_packet_bomb`]: a Tenso packet, `float32[n]` with an LZ4-compressed body: a frame of
//!   independent 4 MiB blocks of zeros (each ~16 KiB), honest about its size (LZ4 cannot do
//!   better than ~255:1, so 3e9 bytes take ~12 MB).

use std::path::Path;

/// An LSB-first bit writer, as deflate packs its fields.
struct Bits {
    out: Vec<u8>,
    acc: u64,
    n: u32,
}

impl Bits {
    fn new() -> Bits {
        Bits {
            out: Vec::new(),
            acc: 0,
            n: 0,
        }
    }
    /// `len` bits of `value`, least significant first (header fields, extra bits).
    fn put(&mut self, value: u64, len: u32) {
        self.acc |= value << self.n;
        self.n += len;
        while self.n >= 8 {
            self.out.push(self.acc as u8);
            self.acc >>= 8;
            self.n -= 8;
        }
    }
    /// A Huffman code of `len` bits, most significant bit first.
    fn code(&mut self, code: u64, len: u32) {
        for i in (0..len).rev() {
            self.put((code >> i) & 1, 1);
        }
    }
    /// `count` zero bits, fast (whole zero bytes once aligned).
    fn zeros(&mut self, mut count: u64) {
        while count > 0 && self.n != 0 {
            self.put(0, 1);
            count -= 1;
        }
        let bytes = count / 8;
        self.out.resize(self.out.len() + bytes as usize, 0);
        for _ in 0..count % 8 {
            self.put(0, 1);
        }
    }
    /// Pads to a byte boundary.
    fn align(&mut self) {
        if self.n > 0 {
            self.put(0, 8 - self.n);
        }
    }
    fn finish(mut self) -> Vec<u8> {
        self.align();
        self.out
    }
}

/// A raw-deflate stream of `prefix` (one stored block) followed by `zeros` zero bytes (one
/// dynamic-Huffman block whose only codes are literal 0, end-of-block and length 258 at distance
/// 1: two bits per 258 bytes).
pub fn deflate_zeros(prefix: &[u8], zeros: u64) -> Vec<u8> {
    let mut b = Bits::new();
    // Stored blocks (not final) for the prefix, 65535 bytes at most each.
    for piece in prefix.chunks(65535) {
        b.put(0, 1);
        b.put(0, 2);
        b.align();
        let n = piece.len() as u64;
        b.put(n, 16);
        b.put(!n & 0xffff, 16);
        for &x in piece {
            b.put(u64::from(x), 8);
        }
    }
    // The final dynamic block.
    b.put(1, 1);
    b.put(2, 2);
    b.put(29, 5); // HLIT: 286 literal/length codes
    b.put(0, 5); // HDIST: 1 distance code
    b.put(14, 4); // HCLEN: 18 code-length codes
    // Code-length code lengths in the permuted order; symbols 1, 2, 17, 18 get 2 bits.
    const ORDER: [usize; 19] = [16, 17, 18, 0, 8, 7, 9, 6, 10, 5, 11, 4, 12, 3, 13, 2, 14, 1, 15];
    for &sym in &ORDER[..18] {
        b.put(if matches!(sym, 1 | 2 | 17 | 18) { 2 } else { 0 }, 3);
    }
    // Canonical code-length codes: 1 -> 00, 2 -> 01, 17 -> 10, 18 -> 11.
    let (c1, c2, c18) = (0b00, 0b01, 0b11);
    // Literal/length lengths: 0 -> 2, 1..=255 -> 0, 256 -> 2, 257..=284 -> 0, 285 -> 1.
    b.code(c2, 2);
    b.code(c18, 2);
    b.put(138 - 11, 7);
    b.code(c18, 2);
    b.put(117 - 11, 7);
    b.code(c2, 2);
    b.code(c18, 2);
    b.put(28 - 11, 7);
    b.code(c1, 2);
    // Distance lengths: code 0 (distance 1) -> 1.
    b.code(c1, 2);
    // Codes: 285 -> 0, literal 0 -> 10, end of block -> 11; distance 0 -> 0.
    let mut left = zeros;
    if left > 0 {
        b.code(0b10, 2);
        left -= 1;
    }
    let matches = left / 258;
    b.zeros(matches * 2);
    for _ in 0..left % 258 {
        b.code(0b10, 2);
    }
    b.code(0b11, 2);
    b.finish()
}

/// CRC-32 of `prefix` followed by `zeros` zero bytes (without hashing them one by one).
pub fn crc32_zeros(prefix: &[u8], zeros: u64) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(prefix);
    let block = vec![0u8; 1 << 20];
    let mut one = crc32fast::Hasher::new();
    one.update(&block);
    let mut left = zeros;
    while left >= block.len() as u64 {
        h.combine(&one);
        left -= block.len() as u64;
    }
    h.update(&block[..left as usize]);
    h.finalize()
}

/// The `.npy` header (version 1.0) of a C-order `|u1` array of shape `(n,)`.
pub fn npy_header_u8(n: u64) -> Vec<u8> {
    let dict = format!("{{'descr': '|u1', 'fortran_order': False, 'shape': ({n},), }}");
    let mut h = b"\x93NUMPY\x01\x00".to_vec();
    let total = (10 + dict.len() + 1).div_ceil(64) * 64;
    let pad = total - 10 - dict.len() - 1;
    h.extend_from_slice(&((total - 10) as u16).to_le_bytes());
    h.extend_from_slice(dict.as_bytes());
    h.extend(std::iter::repeat_n(b' ', pad));
    h.push(b'\n');
    h
}

/// A zip archive (no ZIP64: every size must fit 32 bits) of one deflated member.
pub fn zip_one_deflated(name: &str, raw: &[u8], size: u64, crc: u32) -> Vec<u8> {
    let size = u32::try_from(size).expect("a classic zip member");
    let comp = u32::try_from(raw.len()).expect("a classic zip member");
    let mut z = Vec::new();
    let local = |z: &mut Vec<u8>, sig: u32| {
        z.extend_from_slice(&sig.to_le_bytes());
    };
    // Local header.
    local(&mut z, 0x0403_4b50);
    z.extend_from_slice(&20u16.to_le_bytes()); // version needed
    z.extend_from_slice(&0u16.to_le_bytes()); // flags
    z.extend_from_slice(&8u16.to_le_bytes()); // deflate
    z.extend_from_slice(&[0; 4]); // time, date
    z.extend_from_slice(&crc.to_le_bytes());
    z.extend_from_slice(&comp.to_le_bytes());
    z.extend_from_slice(&size.to_le_bytes());
    z.extend_from_slice(&(name.len() as u16).to_le_bytes());
    z.extend_from_slice(&0u16.to_le_bytes());
    z.extend_from_slice(name.as_bytes());
    z.extend_from_slice(raw);
    let cd = z.len() as u32;
    local(&mut z, 0x0201_4b50);
    z.extend_from_slice(&20u16.to_le_bytes()); // made by
    z.extend_from_slice(&20u16.to_le_bytes()); // needed
    z.extend_from_slice(&0u16.to_le_bytes());
    z.extend_from_slice(&8u16.to_le_bytes());
    z.extend_from_slice(&[0; 4]);
    z.extend_from_slice(&crc.to_le_bytes());
    z.extend_from_slice(&comp.to_le_bytes());
    z.extend_from_slice(&size.to_le_bytes());
    z.extend_from_slice(&(name.len() as u16).to_le_bytes());
    z.extend_from_slice(&[0; 2 + 2 + 2 + 2 + 4]); // extra, comment, disk, internal, external
    z.extend_from_slice(&0u32.to_le_bytes()); // local header offset
    z.extend_from_slice(name.as_bytes());
    let cd_size = z.len() as u32 - cd;
    local(&mut z, 0x0605_4b50);
    z.extend_from_slice(&[0; 4]);
    z.extend_from_slice(&1u16.to_le_bytes());
    z.extend_from_slice(&1u16.to_le_bytes());
    z.extend_from_slice(&cd_size.to_le_bytes());
    z.extend_from_slice(&cd.to_le_bytes());
    z.extend_from_slice(&0u16.to_le_bytes());
    z
}

/// Writes an `.npz` bomb to `path`: member `bomb.npy` declares `uint8[n]` zeros (see the module
/// docs). Returns the file's size.
pub fn npz_bomb(path: &Path, n: u64) -> u64 {
    let header = npy_header_u8(n);
    let raw = deflate_zeros(&header, n);
    let crc = crc32_zeros(&header, n);
    let z = zip_one_deflated("bomb.npy", &raw, header.len() as u64 + n, crc);
    std::fs::write(path, &z).unwrap();
    z.len() as u64
}

/// Writes a `.zt` bomb to `path`: object `bomb`, `uint8[n]` zeros, as `zt.zstd-seekable/1` frames
/// of 16 MiB (one compressed frame repeated; the last one shorter). Returns the file's size.
pub fn zt_seekable_bomb(path: &Path, n: u64) -> u64 {
    use ruzstd::encoding::{CompressionLevel, compress_to_vec};
    use tensorlane_core::DType;
    use tensorlane_core::zt::seekable::{ENCODING_ID, MAX_FRAME_DECODED, SEEKABLE_MAGIC, SKIPPABLE_MAGIC};
    use tensorlane_core::zt::writer::{ObjectSpec, Options, PartSpec, Writer};
    let full = u64::from(MAX_FRAME_DECODED);
    let zeros = vec![0u8; full as usize];
    let frame = compress_to_vec(&zeros[..], CompressionLevel::Fastest);
    let (count, rest) = (n / full, n % full);
    let mut stored = Vec::new();
    let mut table = Vec::new();
    for _ in 0..count {
        stored.extend_from_slice(&frame);
        table.push((frame.len() as u32, MAX_FRAME_DECODED));
    }
    if rest > 0 {
        let last = compress_to_vec(&zeros[..rest as usize], CompressionLevel::Fastest);
        stored.extend_from_slice(&last);
        table.push((last.len() as u32, rest as u32));
    }
    stored.extend_from_slice(&SKIPPABLE_MAGIC.to_le_bytes());
    stored.extend_from_slice(&(table.len() as u32 * 8 + 9).to_le_bytes());
    for (c, d) in &table {
        stored.extend_from_slice(&c.to_le_bytes());
        stored.extend_from_slice(&d.to_le_bytes());
    }
    stored.extend_from_slice(&(table.len() as u32).to_le_bytes());
    stored.push(0);
    stored.extend_from_slice(&SEEKABLE_MAGIC.to_le_bytes());
    // The decoded bytes the writer digests: zero pages the allocator maps lazily, never written.
    let decoded = vec![0u8; n as usize];
    let mut w = Writer::new(Vec::new(), Options::non_canonical()).unwrap();
    w.add_object(
        "bomb",
        &ObjectSpec::dense(&[n]),
        &[PartSpec::encoded("data", DType::U8, ENCODING_ID, &stored, &decoded)],
    )
    .unwrap();
    let bytes = w.finish().unwrap().sink;
    std::fs::write(path, &bytes).unwrap();
    bytes.len() as u64
}

/// Writes a Tenso packet bomb to `path`: `float32[elements]` zeros (at most 10^9 elements, the
/// format's limit), the body an LZ4 frame of independent 4 MiB blocks. Returns the file's size.
pub fn lz4_packet_bomb(path: &Path, elements: u64) -> u64 {
    use tensorlane_core::wire::{self, EncodeOptions, Packet};
    use tensorlane_core::{DType, Tensor};
    // The head (header, shape, padding) of a compressed float32[1] packet, its shape patched.
    let one = Tensor::from_values(vec![1], &[0f32]).unwrap();
    assert_eq!(one.dtype(), DType::F32);
    let n = elements * 4;
    let opts = EncodeOptions {
        compress: true,
        ..Default::default()
    };
    let small = wire::encode(&Packet::Dense(one), &opts).unwrap();
    let magic = 0x184D_2204u32.to_le_bytes();
    let at = small.windows(4).position(|w| w == magic).unwrap();
    let mut out = small[..at].to_vec();
    // Header, the one dimension as a u32 (= 1), then zero padding up to the frame.
    let dim = (0..at - 3)
        .rev()
        .find(|&i| u32::from_le_bytes(small[i..i + 4].try_into().unwrap()) == 1)
        .unwrap();
    out[dim..dim + 4].copy_from_slice(&u32::try_from(elements).unwrap().to_le_bytes());
    // The frame: FLG (version 01, independent blocks), BD (4 MiB blocks), header checksum.
    out.extend_from_slice(&magic);
    let (flg, bd) = (0b0110_0000u8, 0x70u8);
    out.push(flg);
    out.push(bd);
    out.push((xxhash_rust::xxh32::xxh32(&[flg, bd], 0) >> 8) as u8);
    let block = 4usize << 20;
    let zeros = vec![0u8; block];
    let full = lz4_flex::block::compress(&zeros);
    for _ in 0..n / block as u64 {
        out.extend_from_slice(&(full.len() as u32).to_le_bytes());
        out.extend_from_slice(&full);
    }
    let rest = (n % block as u64) as usize;
    if rest > 0 {
        let last = lz4_flex::block::compress(&zeros[..rest]);
        out.extend_from_slice(&(last.len() as u32).to_le_bytes());
        out.extend_from_slice(&last);
    }
    out.extend_from_slice(&0u32.to_le_bytes());
    std::fs::write(path, &out).unwrap();
    out.len() as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_bomb_inflates_to_what_it_declares() {
        let header = npy_header_u8(100_000);
        let raw = deflate_zeros(&header, 100_000);
        let out = tensorlane_core::formats::zip::inflate(
            &raw,
            header.len() as u64 + 100_000,
            Some(crc32_zeros(&header, 100_000)),
        )
        .unwrap();
        assert_eq!(&out[..header.len()], &header[..]);
        assert!(out[header.len()..].iter().all(|&x| x == 0));
        assert_eq!(out.len(), header.len() + 100_000);
    }

    #[test]
    fn small_lz4_bomb_decodes() {
        let p = std::env::temp_dir().join(format!("tl-lz4-bomb-{}.tenso", std::process::id()));
        let n = (3 << 20) + 12345;
        lz4_packet_bomb(&p, n);
        let bytes = std::fs::read(&p).unwrap();
        std::fs::remove_file(&p).unwrap();
        let packet = tensorlane_core::wire::decode(&bytes).unwrap();
        let t = packet.as_dense().unwrap();
        assert_eq!(t.shape(), &[n]);
        assert!(t.data().len() as u64 == 4 * n && t.data().iter().all(|&x| x == 0));
    }

    #[test]
    fn small_seekable_bomb_reads_back() {
        let p = std::env::temp_dir().join(format!("tl-seekable-bomb-{}.zt", std::process::id()));
        zt_seekable_bomb(&p, 40 << 20);
        let bytes = std::fs::read(&p).unwrap();
        std::fs::remove_file(&p).unwrap();
        let r = tensorlane_core::zt::reader::Reader::open(&bytes[..]).unwrap();
        r.verify().unwrap();
        let data = r.read("bomb", "data").unwrap();
        assert_eq!(data.len(), 40 << 20);
        assert!(data.iter().all(|&x| x == 0));
    }
}
