//! Sans-IO framing of back-to-back packets: push bytes in any chunking, pop whole packets.

use alloc::vec::Vec;

use super::error::{Error, ErrorKind, Result};
use super::layout::{Measure, measure};

/// Bounds a [`StreamDecoder`] enforces.
#[derive(Clone, Copy, Debug)]
pub struct StreamLimits {
    /// Largest packet accepted; a header declaring more is refused as soon as it is read
    /// (default 1 GiB).
    pub max_packet_bytes: usize,
    /// Most bytes held at once, complete packets not yet popped included (default 1 GiB + 64 KiB).
    pub max_buffered_bytes: usize,
}

impl Default for StreamLimits {
    fn default() -> Self {
        StreamLimits {
            max_packet_bytes: 1 << 30,
            max_buffered_bytes: (1 << 30) + (64 << 10),
        }
    }
}

/// Frames packets written back to back (tenso's `write_stream` format: no outer length prefix).
///
/// It holds only bytes it has been given: a header that declares 4 GiB costs nothing until 4 GiB
/// arrive, and is refused at once if it exceeds [`StreamLimits::max_packet_bytes`]. Popped packets
/// are whole, self-contained buffers ready for [`super::decode`]. Compressed top-level packets
/// cannot be framed (their length is not stored) and are refused, as tenso's `read_stream` does.
/// String packets are framed (tenso's reader cannot).
///
/// ```
/// use tensorlane_core::wire::{StreamDecoder, encode, decode, Packet, EncodeOptions};
/// use tensorlane_core::{Tensor, DType};
/// let t = Tensor::new(DType::U8, vec![3], &[1u8, 2, 3][..]).unwrap();
/// let p = encode(&Packet::Dense(t), &EncodeOptions::default()).unwrap();
/// let mut s = StreamDecoder::new();
/// for b in p.iter().chain(&p) {
///     s.push(&[*b]).unwrap(); // one byte at a time
/// }
/// assert_eq!(s.next_packet().unwrap().unwrap(), p);
/// assert_eq!(s.next_packet().unwrap().unwrap(), p);
/// assert!(s.next_packet().unwrap().is_none());
/// ```
#[derive(Debug, Default)]
pub struct StreamDecoder {
    buf: Vec<u8>,
    start: usize,
    limits: StreamLimits,
    /// Absolute stream offset of `buf[0]`, for error messages.
    consumed: u64,
    failed: bool,
}

impl StreamDecoder {
    /// A decoder with the default limits.
    pub fn new() -> Self {
        Self::with_limits(StreamLimits::default())
    }

    /// A decoder with explicit limits.
    pub fn with_limits(limits: StreamLimits) -> Self {
        StreamDecoder {
            buf: Vec::new(),
            start: 0,
            limits,
            consumed: 0,
            failed: false,
        }
    }

    /// Bytes held and not yet returned.
    pub fn buffered(&self) -> usize {
        self.buf.len() - self.start
    }

    /// Total bytes handed out as packets so far.
    pub fn position(&self) -> u64 {
        self.consumed + self.start as u64
    }

    /// Adds received bytes. Fails, without keeping them, if they would exceed the buffer bound.
    pub fn push(&mut self, data: &[u8]) -> Result<()> {
        if self.buffered() + data.len() > self.limits.max_buffered_bytes {
            return Err(Error::new(
                ErrorKind::LimitExceeded {
                    what: "buffered stream data",
                    size: (self.buffered() + data.len()) as u64,
                    limit: self.limits.max_buffered_bytes as u64,
                },
                0,
            )
            .shifted(self.position()));
        }
        if self.start > 0 && self.start >= self.buf.len() / 2 {
            self.buf.drain(..self.start);
            self.consumed += self.start as u64;
            self.start = 0;
        }
        self.buf.extend_from_slice(data);
        Ok(())
    }

    /// How many bytes the packet at the head of the buffer needs at least, or `None` when a whole
    /// packet is ready. Lets a reader ask for exactly what is missing.
    pub fn wanted(&self) -> Result<Option<usize>> {
        match self.measure_head()? {
            Measure::Complete(_) => Ok(None),
            Measure::Incomplete(n) => Ok(Some(n - self.buffered())),
        }
    }

    fn measure_head(&self) -> Result<Measure> {
        let m = measure(&self.buf[self.start..]).map_err(|e| e.shifted(self.position()))?;
        let declared = match m {
            Measure::Complete(n) | Measure::Incomplete(n) => n,
        };
        if declared > self.limits.max_packet_bytes {
            return Err(Error::new(
                ErrorKind::LimitExceeded {
                    what: "packet",
                    size: declared as u64,
                    limit: self.limits.max_packet_bytes as u64,
                },
                0,
            )
            .shifted(self.position()));
        }
        Ok(m)
    }

    /// Frames the packet at the head of the buffer: its length once complete.
    fn ready(&mut self) -> Result<Option<usize>> {
        if self.failed {
            return Err(Error::new(
                ErrorKind::Unsupported("stream is out of sync after an earlier error; reconnect".into()),
                0,
            )
            .shifted(self.position()));
        }
        if self.buffered() == 0 {
            return Ok(None);
        }
        match self.measure_head() {
            Ok(Measure::Complete(n)) => Ok(Some(n)),
            Ok(Measure::Incomplete(_)) => Ok(None),
            Err(e) => {
                self.failed = true;
                Err(e)
            }
        }
    }

    /// Pops the next whole packet as an owned buffer, or `None` until enough bytes have been
    /// pushed. After an error the stream is out of sync and every later call fails.
    ///
    /// When the packet is all that is buffered (the common case for large packets) the buffer
    /// itself is handed out; otherwise the smaller of the packet and the rest is copied.
    pub fn next_packet(&mut self) -> Result<Option<Vec<u8>>> {
        let Some(len) = self.ready()? else { return Ok(None) };
        let (start, end) = (self.start, self.start + len);
        let rest = self.buf.len() - end;
        let packet = if start == 0 && rest < len {
            let tail = self.buf.split_off(end);
            self.consumed += len as u64;
            core::mem::replace(&mut self.buf, tail)
        } else {
            let p = self.buf[start..end].to_vec();
            self.start = end;
            if self.start == self.buf.len() {
                self.consumed += self.start as u64;
                self.buf.clear();
                self.start = 0;
            }
            p
        };
        Ok(Some(packet))
    }

    /// Pops the next whole packet without copying it: a slice of the internal buffer, valid until
    /// the next call on this decoder. Decode it in place with [`super::decode`].
    pub fn next_packet_slice(&mut self) -> Result<Option<&[u8]>> {
        let Some(len) = self.ready()? else { return Ok(None) };
        let start = self.start;
        self.start += len;
        Ok(Some(&self.buf[start..start + len]))
    }

    /// `true` when no partial packet is held (a clean place for the stream to end).
    pub fn is_idle(&self) -> bool {
        self.buffered() == 0
    }
}
