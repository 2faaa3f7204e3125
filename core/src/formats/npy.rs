//! NumPy `.npy` (versions 1–3) and `.npz` archives.

use super::{Catalog, ErrorKind, FormatError};
use crate::source::ReadAt;

/// Opens an `.npy` file.
pub fn open<S: ReadAt + ?Sized>(_src: &S) -> Result<Catalog, FormatError> {
    Err(FormatError::new("npy", ErrorKind::Unsupported, "not yet implemented"))
}

/// Opens an `.npz` archive.
pub fn open_npz<S: ReadAt + ?Sized>(_src: &S) -> Result<Catalog, FormatError> {
    Err(FormatError::new("npz", ErrorKind::Unsupported, "not yet implemented"))
}
