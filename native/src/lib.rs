//! # tensorlane
//!
//! The std host of [`tensorlane_core`]: moving Tenso packets over sockets and files, and the
//! `tensorlane` command-line tool.
//!
//! * [`net`] — a `tokio_util` codec ([`net::TensoCodec`]) for async streams, and blocking
//!   [`net::read_packet`] / [`net::write_packet`] that never read past a packet and never copy an
//!   uncompressed body on the way out.
//! * [`inspect`] — what a packet file holds (kinds, dtypes, shapes, flags, sizes, hashes), as a
//!   serialisable report; the engine of `tensorlane inspect`.
//! * [`model`] — [`model::Model`]: a safetensors, GGUF, PyTorch, NumPy, ONNX or HDF5 file (with its
//!   shards, splits or external data) memory-mapped, its catalog of tensors, zero-copy reads.
//! * [`model_tools`] — those formats in the CLI: `inspect` (the packet report's schema plus
//!   metadata, layout and attributes) and `convert` to `.zt` or `.safetensors`, streaming.
//! * [`st_write`] — writing `.safetensors` files: header first, tensor bytes streamed, atomic.
//! * [`source`] — [`tensorlane_core::source::ReadAt`] over files: a memory map (zero-copy) or `pread`.
//! * [`sample`] — a small bundled sample packet (a float32 weight, a quantized tensor, a sparse
//!   matrix and strings), used by `tensorlane demo`.
//! * [`zt_encode`] — `.zt` encodings on the write side: `zt.zstd-seekable/1` with a pure-Rust zstd.
//! * [`zt_write`] — writing `.zt` files: durable publish (temp name, fsync, rename), generational
//!   append, compressed parts, shard files.
//! * [`zt_tools`] — `.zt` in the CLI: inspect (v2 with shards, legacy v1/v0) in the packet report's
//!   schema, verify (digests, content rules, shards, canonical form), convert (legacy → v2,
//!   v2 ↔ Tenso, canonicalise).
#![warn(missing_docs)]

pub mod inspect;
pub mod model;
pub mod model_tools;
pub mod net;
pub mod sample;
pub mod source;
pub mod st_write;
pub mod zt_encode;
pub mod zt_tools;
pub mod zt_write;

pub use tensorlane_core as core;
