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
    /// not in the file: valid input this command cannot handle (exit 1).
    Refused(String),
    /// Bad usage: an argument out of range, a directory where a file is wanted (exit 1).
    Usage(String),
    /// Input that is invalid in a way no format error covers, such as a tensor whose bytes do not
    /// add up (exit 2).
    Invalid(String),
    /// The file could not be read or written (exit 1).
    Io(String),
    /// A foreign model format refused the file (exit 2), or it could not be read or is valid but
    /// needs what the reader does not support (exit 1: [`ErrorKind::Io`], [`ErrorKind::Unsupported`]).
    Format(FormatError),
}

impl CliError {
    /// The tool's one rule ([`EXIT_CODES`]): 2 when the input is invalid, damaged or hostile (or
    /// not canonical); 1 for bad usage, I/O failures and valid input this tool cannot handle
    /// (`Unsupported`, `NotFound`, a conversion the target cannot represent, a file in no format
    /// read here).
    pub fn exit_code(&self) -> u8 {
        match self {
            CliError::Zt(e) if !e.rule.is_rejection() => 1,
            CliError::Legacy(e) if matches!(e.rule, Rule::Io | Rule::Unsupported | Rule::NotFound) => 1,
            CliError::Io(_) | CliError::Refused(_) | CliError::Usage(_) => 1,
            // A `.zt` error through the catalog: its message starts with the spec's rule name.
            CliError::Format(e) if e.format == "zt" && zt_rule(e).is_some() => {
                if zt_rule(e).is_some_and(|r| r.is_rejection()) {
                    2
                } else {
                    1
                }
            }
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

/// The spec's rule a `.zt` error read through the catalog names first (`formats::zt::error`).
fn zt_rule(e: &FormatError) -> Option<Rule> {
    e.message.split(':').next().and_then(Rule::from_name)
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
            CliError::Refused(m) | CliError::Usage(m) | CliError::Invalid(m) => f.write_str(m),
            CliError::Io(m) => f.write_str(m),
            // `.zt` names objects as its own tools do: `object "name"`.
            CliError::Format(e) if e.format == "zt" && e.tensor.is_some() => {
                let mut plain = e.clone();
                let object = plain.tensor.take().unwrap_or_default();
                let shown = plain.to_string();
                let rest = shown.strip_prefix("zt: ").unwrap_or(&shown);
                write!(f, "zt: object {object:?}: {rest}")
            }
            CliError::Format(e) => e.fmt(f),
        }
    }
}

/// The exit codes, as `tensorlane --help` prints them.
pub const EXIT_CODES: &str = "Exit codes:
  0  success
  1  bad usage (an unknown option, value, preset or profile; a directory for a file), a file that
     cannot be read or written, or valid input this tool cannot handle (a file in no format it
     reads, an encoding it does not support, a conversion the target cannot represent)
  2  invalid, damaged or hostile input: a format rule, a digest or a limit is broken (for .zt the
     message starts with the spec's rule name and gives the byte offset), or `verify --canonical`
     finds a file not in canonical form";

/// Parses the command line with clap; on an error prints clap's message and exits with 1 (bad
/// usage, [`EXIT_CODES`]), or 0 for `--help` and `--version`.
pub fn parse_args<P: clap::Parser>() -> P {
    P::try_parse().unwrap_or_else(|e| {
        let _ = e.print();
        std::process::exit(if e.use_stderr() { 1 } else { 0 })
    })
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
