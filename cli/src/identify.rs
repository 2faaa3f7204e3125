//! What a file given to the tool is, by the one rule every front end shares
//! ([`tensorlane_core::detect::identify`]: the CLI here, the Node addon and the wasm build through
//! the bindings), the checks on a path before it is opened, and how it is opened (with `pread`, so
//! that a file truncated underneath is an error naming it, not SIGBUS).

use std::path::Path;

use tensorlane::core::detect::{Format, Identified, ZT_MAGIC};
use tensorlane::core::formats::unrecognised_error;
use tensorlane::core::zt::reader::Reader;
use tensorlane::source::Source;
use tensorlane_core::source::{ReadAt, SourceError};

use crate::error::CliError;

/// The format `path` (opened as `src`) is read as. A file in no format read here is an error
/// whose message says what it looks like (text, raw data, ONNX external data, empty); a file that
/// only ends with the `.zt` magic is taken as a damaged `.zt` v2 file, whose validator says what
/// is wrong.
pub fn identify(path: &Path, src: &Source) -> Result<Format, CliError> {
    match tensorlane::model::identify(path, src)? {
        Identified::Format(f) => Ok(f),
        // A damaged `.zt` v2 file: its validator says what is wrong.
        Identified::Unrecognised(u) if ends_with(src, &ZT_MAGIC) => match Reader::open(src) {
            Err(e) => Err(e.into()),
            Ok(_) => Err(CliError::Format(unrecognised_error(u))),
        },
        Identified::Unrecognised(u) => Err(CliError::Format(unrecognised_error(u))),
    }
}

/// Refuses a directory (mapping one fails with "No such device"), naming the model files in it
/// that the tool would read.
pub fn check_not_dir(path: &Path) -> Result<(), CliError> {
    if !path.is_dir() {
        return Ok(());
    }
    let mut found: Vec<String> = std::fs::read_dir(path)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.path().is_file())
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            tensorlane::core::detect::format_from_name(&name).map(|_| name)
        })
        .collect();
    found.sort();
    let hint = if found.is_empty() {
        String::from("no file in it has a model or .zt extension")
    } else if let Some(index) = found.iter().find(|n| n.ends_with(".safetensors.index.json")) {
        format!(
            "for the sharded set in it, give its index: {}",
            path.join(index).display()
        )
    } else {
        let shown: Vec<&str> = found.iter().take(5).map(String::as_str).collect();
        format!(
            "give one of the files in it: {}{}",
            shown.join(", "),
            if found.len() > 5 { ", ..." } else { "" }
        )
    };
    Err(CliError::Usage(format!("a directory, not a file; {hint}")))
}

/// Opens a local file for `pread`, or a URL (`s3://`, `http(s)://`, ...: see
/// [`tensorlane::remote`]); an I/O failure names the path.
///
/// Local files are never mapped here: a user's file may be truncated or rewritten while the tool
/// reads it, and a map would then kill the process with SIGBUS. With `pread` a read past the new
/// end is an error (exit 2) that the caller prints with the file's name ([`truncated`]).
pub fn open_source(path: &Path) -> Result<Source, CliError> {
    check_not_dir(path)?;
    Source::open_with(path, false).map_err(|e| match e {
        tensorlane::core::source::SourceError::Io(m) => CliError::Io(m),
        other => CliError::Io(format!("cannot read {}: {other}", path.display())),
    })
}

/// The error for a read of `src` that failed: a file that is now shorter than when it was opened
/// (truncated or rewritten underneath) is invalid input (exit 2) and says so; anything else is an
/// I/O error (exit 1).
pub fn truncated(src: &Source, e: SourceError) -> CliError {
    match e {
        SourceError::OutOfBounds { offset, len, size } if size <= src.size() => CliError::Invalid(format!(
            "the file changed while it was read: bytes {offset}..{} are past its end ({size} bytes now, {} when \
             it was opened); it was truncated or rewritten in place, so run again once nothing writes to it",
            offset.saturating_add(len),
            src.size()
        )),
        other => CliError::Io(format!("read failed: {other}")),
    }
}

/// `e`, completed when the local file `path` no longer has the `size_at_open` bytes it had when
/// it was opened: whatever a reader made of the missing bytes, the cause is that the file was
/// truncated or rewritten in place while it was read (invalid input, exit 2), and the message
/// says so. A URL, or a file of the same size, gives `e` back as it is.
pub fn note_if_changed(path: &Path, size_at_open: u64, e: CliError) -> CliError {
    if crate::remote::is_url(path) || matches!(e, CliError::Invalid(ref m) if m.starts_with("the file changed")) {
        return e;
    }
    match std::fs::metadata(path) {
        Ok(m) if m.len() != size_at_open => CliError::Invalid(format!(
            "{e}; the file changed while it was read ({} bytes now, {size_at_open} when it was opened): it was \
             truncated or rewritten in place, so run again once nothing writes to it",
            m.len()
        )),
        _ => e,
    }
}

/// An error (invalid input, exit 2) when a file of `model` was written in place, truncated or
/// extended since it was opened ([`Model::check_unchanged`]): what a pass computed from it may
/// mix two versions, so it is not reported. Passes call it after their last read.
pub fn check_unchanged(model: &tensorlane::model::Model) -> Result<(), CliError> {
    model.check_unchanged().map_err(|e| CliError::Invalid(e.to_string()))
}

/// Whether the file ends with `magic`.
pub fn ends_with(src: &Source, magic: &[u8]) -> bool {
    let n = magic.len() as u64;
    src.size() >= n && src.read_vec(src.size() - n, n).is_ok_and(|t| t == magic)
}
