//! [`Error`]: the one error type of the host library.
//!
//! Every fallible function of this crate returns it, except the file sources
//! ([`crate::source`], plain [`std::io::Result`] like `std::fs`) and the network helpers, which
//! return [`std::io::Error`] as `std::io` and `tokio_util` expect, with an [`Error`] inside:
//! [`Error::from_io`] gets it back. [`Model`](crate::model::Model) reports the core's
//! [`FormatError`] (format, tensor, byte offset, kind) as [`Error::Format`].
//!
//! Each message says what went wrong, where (the path, the packet and its stream offset, the
//! object) and, where there is a choice, what to do about it.

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

use tensorlane_core::formats::FormatError;
use tensorlane_core::wire;
use tensorlane_core::zt::Error as ZtError;

/// Why a host-library operation failed.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// A file system operation failed.
    Io {
        /// The file or folder it failed on.
        path: PathBuf,
        /// What was being done (`"create"`, `"write"`, `"fsync"`, `"rename into place"`, ...).
        op: &'static str,
        /// The operating system's error.
        source: io::Error,
    },
    /// The core `.zt` writer refused an object, an attribute or the manifest (the message names
    /// the writer rule and the object).
    ZtWrite(ZtError),
    /// A `.safetensors` file cannot be written as asked: a duplicate or reserved name, a size
    /// that is not whole bytes, a header over the format's limit, or tensor bytes that do not
    /// match the header.
    Safetensors(String),
    /// A foreign model format refused a file (see [`FormatError`]).
    Format(FormatError),
    /// A `zt.zstd-seekable/1` frame size outside 1..=16 MiB was asked for.
    FrameSize {
        /// The frame size asked for, in decoded bytes.
        size: usize,
    },
    /// The input is too large for the `zt.zstd-seekable/1` seek table's u32 fields.
    EncodeTooLarge {
        /// Decoded bytes handed to the encoder.
        bytes: usize,
    },
    /// A packet in a stream is malformed.
    Wire {
        /// Index of the packet in the stream (0-based), where known.
        packet: Option<u64>,
        /// Byte offset of the packet's first byte in the stream, where known.
        stream_offset: Option<u64>,
        /// What the codec found, with its offset inside the packet and its entry path.
        error: wire::Error,
    },
    /// A header declares a packet larger than the receiver's limit.
    TooLarge {
        /// Index of the packet in the stream (0-based), where known.
        packet: Option<u64>,
        /// Byte offset of the packet's first byte in the stream, where known.
        stream_offset: Option<u64>,
        /// The size the header declares (a lower bound while the header is incomplete).
        declared: usize,
        /// The limit in force.
        limit: usize,
    },
    /// The stream ended inside a packet.
    Truncated {
        /// Index of the packet in the stream (0-based), where known.
        packet: Option<u64>,
        /// Byte offset of the packet's first byte in the stream, where known.
        stream_offset: Option<u64>,
        /// Bytes of the packet received.
        received: usize,
        /// Bytes the packet needs at least.
        needed: usize,
    },
    /// A packet this side refuses to send (it could not be framed, or it breaks a limit).
    Unsendable(String),
}

impl Error {
    /// An I/O failure of `op` on `path`.
    pub fn io(path: impl AsRef<Path>, op: &'static str, source: io::Error) -> Error {
        Error::Io {
            path: path.as_ref().to_path_buf(),
            op,
            source,
        }
    }

    /// A closure for `map_err` that makes an [`Error::Io`] of `op` on `path`.
    pub fn at<'a>(path: &'a Path, op: &'static str) -> impl FnOnce(io::Error) -> Error + 'a {
        move |e| Error::io(path, op, e)
    }

    /// The [`Error`] inside an [`io::Error`] returned by [`crate::net`], if there is one.
    pub fn from_io(e: &io::Error) -> Option<&Error> {
        e.get_ref().and_then(|inner| inner.downcast_ref::<Error>())
    }

    /// This error inside an [`io::Error`]: `UnexpectedEof` for a truncated stream, `InvalidInput`
    /// for a packet this side refuses to send, the original kind for file system errors,
    /// `InvalidData` otherwise.
    pub fn into_io(self) -> io::Error {
        let kind = match &self {
            Error::Truncated { .. } => io::ErrorKind::UnexpectedEof,
            Error::Unsendable(_) => io::ErrorKind::InvalidInput,
            Error::Io { source, .. } => source.kind(),
            _ => io::ErrorKind::InvalidData,
        };
        io::Error::new(kind, self)
    }
}

fn where_(f: &mut fmt::Formatter<'_>, packet: &Option<u64>, offset: &Option<u64>) -> fmt::Result {
    match (packet, offset) {
        (Some(p), Some(o)) => write!(f, "packet #{p} (stream byte {o}): "),
        (Some(p), None) => write!(f, "packet #{p}: "),
        (None, Some(o)) => write!(f, "packet at stream byte {o}: "),
        (None, None) => Ok(()),
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Io { path, op, source } => write!(f, "cannot {op} {}: {source}", path.display()),
            Error::ZtWrite(e) => write!(f, "the .zt writer refused: {e}"),
            Error::Safetensors(m) => write!(f, "cannot write safetensors: {m}"),
            Error::Format(e) => e.fmt(f),
            Error::FrameSize { size } => write!(
                f,
                "zt.zstd-seekable/1 frame size {size} is outside 1..=16 MiB; use DEFAULT_FRAME_SIZE (1 MiB)"
            ),
            Error::EncodeTooLarge { bytes } => write!(
                f,
                "{bytes} bytes are too many for the zt.zstd-seekable/1 seek table's u32 fields; split the tensor or store it raw"
            ),
            Error::Wire {
                packet,
                stream_offset,
                error,
            } => {
                where_(f, packet, stream_offset)?;
                write!(f, "{error}")?;
                if let Some(o) = stream_offset {
                    write!(f, " [stream byte {}]", o.saturating_add(error.offset()))?;
                }
                Ok(())
            }
            Error::TooLarge {
                packet,
                stream_offset,
                declared,
                limit,
            } => {
                where_(f, packet, stream_offset)?;
                write!(
                    f,
                    "header declares a packet of {declared} bytes (at least), above this receiver's limit of {limit}; raise the limit if the sender is trusted"
                )
            }
            Error::Truncated {
                packet,
                stream_offset,
                received,
                needed,
            } => {
                where_(f, packet, stream_offset)?;
                write!(
                    f,
                    "stream ended after {received} bytes of a packet that needs at least {needed}; the sender stopped mid-packet"
                )
            }
            Error::Unsendable(why) => write!(f, "cannot send packet: {why}"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Io { source, .. } => Some(source),
            Error::ZtWrite(e) => Some(e),
            Error::Format(e) => Some(e),
            Error::Wire { error, .. } => Some(error),
            _ => None,
        }
    }
}

impl From<ZtError> for Error {
    fn from(e: ZtError) -> Self {
        Error::ZtWrite(e)
    }
}

impl From<FormatError> for Error {
    fn from(e: FormatError) -> Self {
        Error::Format(e)
    }
}
