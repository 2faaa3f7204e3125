//! What a file given to the tool is, by the one rule every front end shares
//! ([`tensorlane_core::detect::identify`]: the CLI here, the Node addon and the wasm build through
//! the bindings), and the checks on a path before it is opened.

use std::path::Path;

use tensorlane::core::detect::{Format, Identified, ZT_MAGIC};
use tensorlane::core::formats::unrecognised_error;
use tensorlane::source::Source;

use crate::error::CliError;

/// The format `path` (opened as `src`) is read as. A file in no format read here is an error
/// whose message says what it looks like (text, raw data, ONNX external data, empty); a file that
/// only ends with the `.zt` magic is taken as a damaged `.zt` v2 file, whose validator says what
/// is wrong.
pub fn identify(path: &Path, src: &Source) -> Result<Format, CliError> {
    match tensorlane::model::identify(path, src)? {
        Identified::Format(f) => Ok(f),
        Identified::Unrecognised(_) if crate::zt_tools::ends_with(src, &ZT_MAGIC) => Ok(Format::Zt),
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
