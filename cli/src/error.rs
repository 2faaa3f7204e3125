//! [`CliError`]: the one error type of the `tensorlane` tool, and its exit codes.

use std::fmt;

use tensorlane_core::formats::{ErrorKind, FormatError};
use tensorlane_core::wire;
use tensorlane_core::zt::rule::Rule;
use tensorlane_core::zt::{Error as ZtError, Op};

/// Why a command failed. [`CliError::exit_code`] maps it to the tool's exit status; the message
/// (printed as `error: FILE: MESSAGE`) says what was wrong, where, and what to do.
#[derive(Debug)]
#[non_exhaustive]
pub enum CliError {
    /// A `.zt` v2 error: a rejection (exit 2) or an outcome such as `Unsupported` (exit 1).
    Zt(ZtError),
    /// A legacy-format error (exit 2, or 1 for I/O and unsupported encodings).
    Legacy(ZtError),
    /// A Tenso packet file that does not decode (exit 2): which packet, where it starts, and the
    /// codec's error (with its offset inside the packet and its entry path).
    Tenso {
        /// Index of the failing packet.
        packet: usize,
        /// File offset of the failing packet's first byte.
        packet_offset: u64,
        /// What was wrong.
        error: wire::Error,
    },
    /// The file is valid but not in canonical form (exit 2); the message names the §10 rule.
    NotCanonical(String),
    /// A conversion that the target format cannot represent, a writer refusal, a tensor that is
    /// not in the file, or bad usage (exit 2).
    Refused(String),
    /// The file could not be read or written (exit 1).
    Io(String),
    /// A foreign model format refused the file (exit 2), or it could not be read or is valid but
    /// needs what the reader does not support (exit 1: [`ErrorKind::Io`], [`ErrorKind::Unsupported`]).
    Format(FormatError),
}

impl CliError {
    /// 2 when the input is invalid, not canonical or cannot be converted; 1 for I/O failures and
    /// for valid files this tool cannot fully handle (`Unsupported`, `NotFound`).
    pub fn exit_code(&self) -> u8 {
        match self {
            CliError::Zt(e) if !e.rule.is_rejection() => 1,
            CliError::Legacy(e) if matches!(e.rule, Rule::Io | Rule::Unsupported | Rule::NotFound) => 1,
            CliError::Io(_) => 1,
            CliError::Format(e)
                if matches!(
                    e.kind,
                    ErrorKind::Io | ErrorKind::Unsupported | ErrorKind::UnsupportedVersion
                ) =>
            {
                1
            }
            _ => 2,
        }
    }
}

impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CliError::Zt(e) => e.fmt(f),
            CliError::Legacy(e) => e.fmt(f),
            CliError::Tenso {
                packet,
                packet_offset,
                error,
            } => {
                write!(f, "packet #{packet}")?;
                if *packet_offset != 0 {
                    write!(f, " (starting at file byte {packet_offset})")?;
                }
                write!(f, ": {error}")?;
                if !error.path().is_empty() {
                    write!(f, "; entry path: {}", error.path())?;
                }
                write!(f, "; file byte {}", packet_offset.saturating_add(error.offset()))
            }
            CliError::NotCanonical(m) => write!(f, "Canonical: not in canonical form: {m}"),
            CliError::Refused(m) => f.write_str(m),
            CliError::Io(m) => f.write_str(m),
            CliError::Format(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for CliError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            CliError::Tenso { error, .. } => Some(error),
            CliError::Format(e) => Some(e),
            _ => None,
        }
    }
}

/// Routed by the operation that failed: legacy reads keep their own exit rules, a writer
/// refusal is a refusal (exit 2), everything else is a `.zt` v2 error.
impl From<ZtError> for CliError {
    fn from(e: ZtError) -> Self {
        match e.op {
            Op::ReadLegacy => CliError::Legacy(e),
            Op::Write => CliError::Refused(format!("the .zt writer refused: {e}")),
            _ => CliError::Zt(e),
        }
    }
}

impl From<FormatError> for CliError {
    fn from(e: FormatError) -> Self {
        CliError::Format(e)
    }
}

impl From<tensorlane::Error> for CliError {
    fn from(e: tensorlane::Error) -> Self {
        match e {
            tensorlane::Error::Io { path, source, .. } => {
                CliError::Io(format!("cannot write {}: {source}", path.display()))
            }
            tensorlane::Error::ZtWrite(e) => e.into(),
            tensorlane::Error::Safetensors(m) => CliError::Refused(m),
            tensorlane::Error::Format(e) => CliError::Format(e),
            other => CliError::Refused(other.to_string()),
        }
    }
}
