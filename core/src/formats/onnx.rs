//! ONNX: graph initializers, read by a small hand-written protobuf walk.

use super::{Catalog, ErrorKind, FormatError};
use crate::source::ReadAt;

/// Opens an ONNX model.
pub fn open<S: ReadAt + ?Sized>(_src: &S) -> Result<Catalog, FormatError> {
    Err(FormatError::new("onnx", ErrorKind::Unsupported, "not yet implemented"))
}
