//! # tensorlane-bindings
//!
//! The code both JavaScript backends share: `tensorlane-wasm` (wasm-bindgen) and `tensorlane-node`
//! (napi-rs) are thin adapters that move bytes and strings between JavaScript and these functions,
//! so that the two backends describe, encode, open and read everything with the very same code.
//! Results cross to JavaScript as JSON strings (read by `js/common.js` and `js/formats.js`) plus
//! byte buffers referenced by index.
//!
//! * [`packets`] — Tenso packets: decode descriptors (byte offsets into the caller's input) and
//!   encode/dequantize plans.
//! * [`formats`] — every model format (safetensors, GGUF, PyTorch, NumPy, ONNX, HDF5, `.zt` v2 with
//!   its shards and legacy `.zt`, Tenso packet files) over sparse sources, with the "need" protocol
//!   that lets JavaScript fetch only the ranges a parser asks for; catalogs as JSON, part reads,
//!   verification.
//! * [`write`] — the `.zt` v2 writer (`writeZt`).
//! * [`stats`] — the core's tensor statistics in two passes fed slice by slice, as JSON.
//!
//! No I/O happens here and nothing is platform-specific: the crate builds for
//! `wasm32-unknown-unknown` and for the host alike.

#![deny(missing_docs)]
#![forbid(unsafe_code)]

pub mod formats;
pub mod packets;
pub mod stats;
pub mod write;
