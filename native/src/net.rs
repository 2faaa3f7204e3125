//! Moving Tenso packets over byte streams: a `tokio_util` codec for async sockets and blocking
//! helpers for `std::io` readers and writers.
//!
//! Packets travel back to back with no outer framing (tenso's `write_stream` format): each packet
//! says how long it is, and [`wire::measure`] reads that from its header. Both sides therefore
//! refuse a packet whose length is not self-described, namely a *top-level* packet with a
//! compressed body (compressed leaves inside bundles are fine: their entries are length-prefixed).
//!
//! A receiver never trusts a declared length: the limit ([`TensoCodec::max_packet_bytes`],
//! [`read_packet_with_limit`]) is enforced as soon as the header declares the size, and memory
//! grows only with bytes that actually arrive.
//!
//! Errors are [`io::Error`]s (as `std::io` and `tokio_util` expect) carrying a [`crate::Error`]
//! (`Wire`, `TooLarge`, `Truncated`, `Unsendable`); [`crate::Error::from_io`] gets it back.
//!
//! ```
//! use tensorlane::net::{read_packet, write_packet};
//! use tensorlane_core::wire::{self, EncodeOptions, Packet};
//! use tensorlane_core::{DType, Tensor};
//!
//! let t = Tensor::new(DType::U8, vec![3], &[1u8, 2, 3][..]).unwrap();
//! let mut stream = Vec::new();
//! write_packet(&mut stream, &Packet::Dense(t.clone()), &EncodeOptions::default()).unwrap();
//! write_packet(&mut stream, &Packet::Dense(t.clone()), &EncodeOptions::default()).unwrap();
//! let mut r = stream.as_slice();
//! for _ in 0..2 {
//!     let bytes = read_packet(&mut r).unwrap().unwrap();
//!     assert_eq!(wire::decode(&bytes).unwrap(), Packet::Dense(t.clone()));
//! }
//! assert!(read_packet(&mut r).unwrap().is_none()); // clean end of stream
//! ```

use std::io::{self, IoSlice, Read, Write};

use bytes::{Bytes, BytesMut};
use tensorlane_core::wire::{self, EncodeOptions, Measure, Packet};
use tokio_util::codec::{Decoder, Encoder};

use crate::Error;

/// Default largest packet a receiver accepts: 1 GiB (as [`wire::StreamLimits`]).
pub const DEFAULT_MAX_PACKET_BYTES: usize = 1 << 30;

/// The most a reader asks for at once: 1 MiB. Buffers grow only as bytes arrive (at most about
/// twice what has arrived, plus one chunk), so a header that declares gigabytes costs nothing
/// until the gigabytes actually come.
pub const READ_CHUNK: usize = 1 << 20;

/// Checks that `bytes` is exactly one packet a receiver can frame.
fn check_framable(bytes: &[u8]) -> Result<(), Error> {
    match wire::measure(bytes) {
        Ok(Measure::Complete(n)) if n == bytes.len() => Ok(()),
        Ok(Measure::Complete(n)) => Err(Error::Unsendable(format!(
            "the buffer holds a {n}-byte packet followed by {} more bytes; send one packet per item",
            bytes.len() - n
        ))),
        Ok(Measure::Incomplete(n)) => Err(Error::Unsendable(format!(
            "the buffer holds {} bytes of a packet that needs at least {n}",
            bytes.len()
        ))),
        Err(e) => Err(Error::Unsendable(format!(
            "a receiver could not frame it ({e}); top-level compressed packets carry no length: send them uncompressed or inside a bundle"
        ))),
    }
}

/// A [`tokio_util::codec`] codec for back-to-back Tenso packets.
///
/// Decoding yields each packet as one [`Bytes`] split off the read buffer (no copy); decode it
/// with [`wire::decode`]. Encoding accepts already-encoded packets ([`Bytes`], `Vec<u8>`) and
/// [`Packet`] values (encoded with [`TensoCodec::encode_options`]). Items that a receiver could not
/// frame are refused with `InvalidInput` before anything is written.
///
/// ```no_run
/// # async fn demo() -> std::io::Result<()> {
/// use futures::{SinkExt, StreamExt};
/// use tensorlane::net::TensoCodec;
/// use tokio_util::codec::Framed;
///
/// let socket = tokio::net::TcpStream::connect("127.0.0.1:7000").await?;
/// let mut framed = Framed::new(socket, TensoCodec::new());
/// while let Some(bytes) = framed.next().await {
///     let bytes = bytes?;
///     let packet = tensorlane_core::wire::decode(&bytes).map_err(std::io::Error::other)?;
///     framed.send(&packet).await?; // echo it back
/// }
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct TensoCodec {
    max_packet_bytes: usize,
    encode_options: EncodeOptions,
    packets_in: u64,
    bytes_in: u64,
    scratch: Vec<u8>,
}

impl Default for TensoCodec {
    fn default() -> Self {
        Self::new()
    }
}

impl TensoCodec {
    /// A codec with the default limit ([`DEFAULT_MAX_PACKET_BYTES`]) and default encode options.
    pub fn new() -> Self {
        TensoCodec {
            max_packet_bytes: DEFAULT_MAX_PACKET_BYTES,
            encode_options: EncodeOptions::default(),
            packets_in: 0,
            bytes_in: 0,
            scratch: Vec::new(),
        }
    }

    /// Sets the largest packet accepted (received and sent); a header declaring more is refused
    /// as soon as it is read.
    pub fn with_max_packet_bytes(mut self, limit: usize) -> Self {
        self.max_packet_bytes = limit;
        self
    }

    /// Sets the options used to encode [`Packet`] items. `compress` applies inside bundles only
    /// in effect: a compressed top-level dense packet cannot be framed and is refused.
    pub fn with_encode_options(mut self, opts: EncodeOptions) -> Self {
        self.encode_options = opts;
        self
    }

    /// The largest packet accepted.
    pub fn max_packet_bytes(&self) -> usize {
        self.max_packet_bytes
    }

    /// The options used to encode [`Packet`] items.
    pub fn encode_options(&self) -> &EncodeOptions {
        &self.encode_options
    }

    /// Packets decoded so far.
    pub fn packets_decoded(&self) -> u64 {
        self.packets_in
    }

    fn too_large(&self, declared: usize) -> io::Error {
        Error::TooLarge {
            packet: Some(self.packets_in),
            stream_offset: Some(self.bytes_in),
            declared,
            limit: self.max_packet_bytes,
        }
        .into_io()
    }

    fn check_send_size(&self, len: usize) -> Result<(), io::Error> {
        if len > self.max_packet_bytes {
            return Err(Error::Unsendable(format!(
                "the packet is {len} bytes, above this codec's limit of {}",
                self.max_packet_bytes
            ))
            .into_io());
        }
        Ok(())
    }
}

impl Decoder for TensoCodec {
    type Item = Bytes;
    type Error = io::Error;

    fn decode(&mut self, src: &mut BytesMut) -> Result<Option<Bytes>, io::Error> {
        if src.is_empty() {
            return Ok(None);
        }
        match wire::measure(src) {
            Ok(Measure::Complete(n)) => {
                if n > self.max_packet_bytes {
                    return Err(self.too_large(n));
                }
                self.packets_in += 1;
                self.bytes_in += n as u64;
                Ok(Some(src.split_to(n).freeze()))
            }
            Ok(Measure::Incomplete(n)) => {
                if n > self.max_packet_bytes {
                    return Err(self.too_large(n));
                }
                // Room for what is missing, but never more than one chunk ahead of the data.
                src.reserve((n - src.len().min(n)).min(READ_CHUNK));
                Ok(None)
            }
            Err(error) => Err(Error::Wire {
                packet: Some(self.packets_in),
                stream_offset: Some(self.bytes_in),
                error,
            }
            .into_io()),
        }
    }

    fn decode_eof(&mut self, src: &mut BytesMut) -> Result<Option<Bytes>, io::Error> {
        match self.decode(src)? {
            Some(p) => Ok(Some(p)),
            None if src.is_empty() => Ok(None),
            None => {
                let needed = match wire::measure(src) {
                    Ok(Measure::Incomplete(n)) => n,
                    _ => src.len() + 1,
                };
                Err(Error::Truncated {
                    packet: Some(self.packets_in),
                    stream_offset: Some(self.bytes_in),
                    received: src.len(),
                    needed,
                }
                .into_io())
            }
        }
    }
}

impl Encoder<Bytes> for TensoCodec {
    type Error = io::Error;

    fn encode(&mut self, item: Bytes, dst: &mut BytesMut) -> Result<(), io::Error> {
        self.encode(item.as_ref(), dst)
    }
}

impl Encoder<Vec<u8>> for TensoCodec {
    type Error = io::Error;

    fn encode(&mut self, item: Vec<u8>, dst: &mut BytesMut) -> Result<(), io::Error> {
        self.encode(item.as_slice(), dst)
    }
}

impl Encoder<&[u8]> for TensoCodec {
    type Error = io::Error;

    fn encode(&mut self, item: &[u8], dst: &mut BytesMut) -> Result<(), io::Error> {
        check_framable(item).map_err(Error::into_io)?;
        self.check_send_size(item.len())?;
        dst.extend_from_slice(item);
        Ok(())
    }
}

impl Encoder<&Packet<'_>> for TensoCodec {
    type Error = io::Error;

    fn encode(&mut self, item: &Packet<'_>, dst: &mut BytesMut) -> Result<(), io::Error> {
        let opts = self.encode_options.clone();
        if let Packet::Dense(t) = item {
            let parts = encode_dense_parts(t, &opts)?;
            self.check_send_size(parts.len())?;
            dst.reserve(parts.len());
            for s in parts.slices() {
                dst.extend_from_slice(s);
            }
            return Ok(());
        }
        self.scratch.clear();
        wire::encode_into(item, &opts, &mut self.scratch).map_err(encode_error)?;
        let mut scratch = std::mem::take(&mut self.scratch);
        let r = self.encode(scratch.as_slice(), dst);
        scratch.clear();
        if scratch.capacity() <= 4 * READ_CHUNK {
            self.scratch = scratch; // keep a modest buffer for the next packet
        }
        r
    }
}

impl Encoder<Packet<'_>> for TensoCodec {
    type Error = io::Error;

    fn encode(&mut self, item: Packet<'_>, dst: &mut BytesMut) -> Result<(), io::Error> {
        self.encode(&item, dst)
    }
}

fn encode_error(e: wire::Error) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, e)
}

/// `encode_parts`, refusing a compressed body (not framable on a stream).
fn encode_dense_parts<'a>(t: &'a tensorlane_core::Tensor<'_>, opts: &EncodeOptions) -> io::Result<wire::Parts<'a>> {
    let parts = wire::encode_parts(t, opts).map_err(encode_error)?;
    if matches!(parts.body, std::borrow::Cow::Owned(_)) {
        return Err(Error::Unsendable(
            "a top-level compressed dense packet carries no length, so a receiver cannot frame it; send it uncompressed or inside a bundle".into(),
        )
        .into_io());
    }
    Ok(parts)
}

/// Reads one packet from a blocking reader, with the default limit
/// ([`DEFAULT_MAX_PACKET_BYTES`]). See [`read_packet_with_limit`].
pub fn read_packet<R: Read>(r: R) -> io::Result<Option<Vec<u8>>> {
    read_packet_with_limit(r, DEFAULT_MAX_PACKET_BYTES)
}

/// Reads exactly one packet from a blocking reader and never a byte past it, so the reader can
/// be handed on afterwards (to another protocol, or the next call).
///
/// Returns `Ok(None)` when the stream ends cleanly before the packet's first byte. The reader
/// asks [`wire::measure`] how much it needs at least and reads only that (in chunks of at most
/// [`READ_CHUNK`]), so a header that lies about its size forces no large allocation; a declared
/// size above `max_packet_bytes` is refused as soon as the header is read. Errors are
/// `InvalidData` (malformed packet, too large) or `UnexpectedEof` (stream ended mid-packet), each
/// carrying an [`Error`].
pub fn read_packet_with_limit<R: Read>(r: R, max_packet_bytes: usize) -> io::Result<Option<Vec<u8>>> {
    let mut buf = Vec::new();
    Ok(read_packet_into(r, &mut buf, max_packet_bytes)?.map(|_| buf))
}

/// Like [`read_packet_with_limit`], but reads into `buf` (cleared first, capacity kept) and
/// returns the packet length. Reusing one buffer across packets keeps a steady stream of large
/// packets free of allocation and page faults: the 64 MiB loopback figure in BENCHMARKS.md.
pub fn read_packet_into<R: Read>(mut r: R, buf: &mut Vec<u8>, max_packet_bytes: usize) -> io::Result<Option<usize>> {
    buf.clear();
    loop {
        let needed = match wire::measure(buf) {
            Ok(Measure::Complete(n)) => {
                debug_assert_eq!(n, buf.len());
                buf.truncate(n);
                return Ok(Some(n));
            }
            Ok(Measure::Incomplete(n)) => n,
            Err(error) => {
                return Err(Error::Wire {
                    packet: None,
                    stream_offset: None,
                    error,
                }
                .into_io());
            }
        };
        if needed > max_packet_bytes {
            return Err(Error::TooLarge {
                packet: None,
                stream_offset: None,
                declared: needed,
                limit: max_packet_bytes,
            }
            .into_io());
        }
        if needed <= buf.len() {
            // measure promises progress; guard against looping forever all the same.
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "packet framing made no progress",
            ));
        }
        // Read at most one chunk past what has arrived: a lying header costs at most twice the
        // bytes actually received (amortised doubling), never its declared size.
        let want = (needed - buf.len()).min(READ_CHUNK.max(buf.len()));
        buf.reserve(want);
        let before = buf.len();
        let got = (&mut r).take(want as u64).read_to_end(buf)?;
        if got < want {
            if before == 0 && got == 0 {
                return Ok(None);
            }
            return Err(Error::Truncated {
                packet: None,
                stream_offset: None,
                received: buf.len(),
                needed,
            }
            .into_io());
        }
    }
}

/// Writes one packet to a blocking writer and returns its length.
///
/// Dense packets go out as [`wire::encode_parts`]: header, body and footer in vectored writes,
/// so an uncompressed body is written straight from the tensor's memory without a copy. Other
/// kinds are encoded into one buffer first. A top-level compressed dense packet is refused
/// (`InvalidInput`): a stream reader cannot frame it.
pub fn write_packet<W: Write>(mut w: W, packet: &Packet<'_>, opts: &EncodeOptions) -> io::Result<usize> {
    if let Packet::Dense(t) = packet {
        let parts = encode_dense_parts(t, opts)?;
        let mut slices = parts.slices().map(IoSlice::new);
        write_all_vectored(&mut w, &mut slices)?;
        return Ok(parts.len());
    }
    let bytes = wire::encode(packet, opts).map_err(encode_error)?;
    w.write_all(&bytes)?;
    Ok(bytes.len())
}

/// Writes one already-encoded packet, after checking that a receiver can frame it.
pub fn write_packet_bytes<W: Write>(mut w: W, bytes: &[u8]) -> io::Result<()> {
    check_framable(bytes).map_err(Error::into_io)?;
    w.write_all(bytes)
}

/// `Write::write_all_vectored` (unstable in std) on stable Rust.
pub fn write_all_vectored<W: Write>(w: &mut W, mut bufs: &mut [IoSlice<'_>]) -> io::Result<()> {
    IoSlice::advance_slices(&mut bufs, 0);
    while !bufs.is_empty() {
        match w.write_vectored(bufs) {
            Ok(0) => return Err(io::Error::new(io::ErrorKind::WriteZero, "failed to write whole packet")),
            Ok(n) => IoSlice::advance_slices(&mut bufs, n),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use tensorlane_core::{DType, Tensor};

    fn dense(n: usize) -> Vec<u8> {
        let data: Vec<u8> = (0..n).map(|i| i as u8).collect();
        let t = Tensor::new(DType::U8, vec![n as u64], data).unwrap();
        wire::encode(&Packet::Dense(t), &EncodeOptions::default()).unwrap()
    }

    /// A reader that hands out one byte per call and counts what it gave.
    struct Trickle<'a>(&'a [u8], usize);
    impl Read for Trickle<'_> {
        fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
            if self.0.is_empty() || out.is_empty() {
                return Ok(0);
            }
            out[0] = self.0[0];
            self.0 = &self.0[1..];
            self.1 += 1;
            Ok(1)
        }
    }

    #[test]
    fn reads_exactly_one_packet() {
        let mut s = dense(100);
        let first = s.len();
        s.extend_from_slice(&dense(7));
        let mut r = Trickle(&s, 0);
        assert_eq!(read_packet(&mut r).unwrap().unwrap().len(), first);
        assert_eq!(r.1, first, "read past the packet");
        assert_eq!(read_packet(&mut r).unwrap().unwrap(), dense(7));
        assert!(read_packet(&mut r).unwrap().is_none());
    }

    #[test]
    fn truncated_and_lying_headers() {
        let p = dense(100);
        let e = read_packet(&p[..p.len() - 1]).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof);
        assert!(e.to_string().contains("needs at least"), "{e}");
        // A header declaring 10^9 u8 elements and nothing else: refused by the limit at once.
        let mut lie = p[..64].to_vec();
        lie[10..14].copy_from_slice(&1_000_000_000u32.to_le_bytes());
        let e = read_packet_with_limit(lie.as_slice(), 1 << 20).unwrap_err();
        assert!(matches!(Error::from_io(&e), Some(Error::TooLarge { .. })), "{e}");
        // Under the default limit it reads what exists, then reports truncation.
        let e = read_packet(lie.as_slice()).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof);
        let e = read_packet(&b"NOPE0000000000"[..]).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData);
        assert!(e.to_string().contains("magic"), "{e}");
    }

    #[test]
    fn codec_frames_and_refuses() {
        let mut c = TensoCodec::new().with_max_packet_bytes(1000);
        let mut buf = BytesMut::new();
        let p = dense(10);
        for b in p.iter().chain(p.iter()) {
            buf.extend_from_slice(&[*b]);
            if let Some(got) = c.decode(&mut buf).unwrap() {
                assert_eq!(&got[..], &p[..]);
            }
        }
        assert_eq!(c.packets_decoded(), 2);
        let mut big = BytesMut::from(&dense(5000)[..64]);
        let e = c.decode(&mut big).unwrap_err();
        assert!(e.to_string().contains("limit of 1000"), "{e}");
        let mut trunc = BytesMut::from(&p[..20]);
        assert!(c.decode_eof(&mut trunc).is_err());
        // Compressed top level is refused on send.
        let t = Tensor::new(DType::U8, vec![4], vec![0u8; 4]).unwrap();
        let mut c = TensoCodec::new().with_encode_options(EncodeOptions {
            compress: true,
            ..Default::default()
        });
        let e = c.encode(&Packet::Dense(t), &mut BytesMut::new()).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
    }
}
