//! The `.zt` container (spec: `../shared/specs/zt.md`).

pub mod cbor;
pub mod seekable;
pub mod legacy;
pub mod writer;
