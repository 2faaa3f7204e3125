//! GGUF v1–v3 (llama.cpp): metadata key/values, tensor infos, alignment, split files.

use super::{Catalog, ErrorKind, FormatError};
use crate::source::ReadAt;

/// Opens a GGUF file.
pub fn open<S: ReadAt + ?Sized>(_src: &S) -> Result<Catalog, FormatError> {
    Err(FormatError::new("gguf", ErrorKind::Unsupported, "not yet implemented"))
}
