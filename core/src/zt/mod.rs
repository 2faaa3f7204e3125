//! The `.zt` container (spec: `docs/specs/zt.md`).

pub mod cbor;
mod error;
pub mod format;
pub mod layout;
pub mod legacy;
pub mod manifest;
pub mod reader;
pub mod rule;
pub mod seekable;
pub mod validate;
pub mod verify;
pub mod writer;

pub use error::{Error, Op, Result};
