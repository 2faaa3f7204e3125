//! HDF5: the subset model files use.

use alloc::vec::Vec;

use super::{Catalog, ErrorKind, FormatError};
use crate::source::ReadAt;

/// A chunked dataset's layout, resolved when the tensor is read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Chunked {
    /// Index into [`Catalog::sources`].
    pub source: usize,
}

/// Opens an HDF5 file.
pub fn open<S: ReadAt + ?Sized>(_src: &S) -> Result<Catalog, FormatError> {
    Err(FormatError::new("hdf5", ErrorKind::Unsupported, "not yet implemented"))
}

/// Reads a chunked dataset into C-order stored bytes.
pub fn read_chunked<S: ReadAt + ?Sized>(_c: &Chunked, _src: &S) -> Result<Vec<u8>, FormatError> {
    Err(FormatError::new("hdf5", ErrorKind::Unsupported, "not yet implemented"))
}
