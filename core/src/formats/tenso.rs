//! Tenso packet files as a [`Catalog`]: each dense packet a tensor, a bundle's entries as
//! tensors, several packets back to back as several tensors.

use super::{Catalog, ErrorKind, FormatError};
use crate::source::ReadAt;

/// Opens a file of Tenso packets. Not listed as a catalog yet: the CLI's Tenso tools read them.
pub fn open<S: ReadAt + ?Sized>(_src: &S) -> Result<Catalog, FormatError> {
    Err(FormatError::new(
        "tenso",
        ErrorKind::Unsupported,
        "Tenso files are not yet listed as a catalog",
    ))
}
