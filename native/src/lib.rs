//! # tensorlane
//!
//! The std host library of [`tensorlane_core`]: files and sockets for the no_std core. The
//! `tensorlane` command-line tool is its own crate (`tensorlane-cli`, folder `cli/`) built on
//! this one.
//!
//! * [`source`] — [`tensorlane_core::source::ReadAt`] over files: a memory map (zero-copy) or
//!   `pread`.
//! * [`remote`] (feature `remote`, default) — objects on S3, GCS, Azure and HTTP(S) read by
//!   range ([`remote::RemoteSource`]), and multipart uploads.
//! * [`model`] — [`model::Model`]: a safetensors, GGUF, PyTorch, NumPy, ONNX or HDF5 file (with its
//!   shards, splits or external data) memory-mapped, its catalog of tensors, zero-copy reads.
//! * [`zt_write`] — writing `.zt` files: durable publish, generational append, compressed parts,
//!   shard files.
//! * [`zt_encode`] — `.zt` encodings on the write side: `zt.zstd-seekable/1` with a pure-Rust zstd.
//! * [`st_write`] — writing `.safetensors` files: header first, tensor bytes streamed, atomic.
//! * [`publish`] — the one atomic publish (temporary file in the same folder, fsync, rename,
//!   fsync the folder) that every writer uses.
//! * [`net`] — a `tokio_util` codec ([`net::TensoCodec`]) for async streams, and blocking
//!   [`net::read_packet`] / [`net::write_packet`] that never read past a packet and never copy an
//!   uncompressed body on the way out.
//! * [`wire`] — Tenso packets with large outputs in [`buffers`]: [`wire::encode`],
//!   [`wire::decode_owned`].
//! * [`buffers`] — large output `Vec`s backed by transparent huge pages on Linux.
//! * [`error`] — [`Error`], the one error type of this crate.
//!
//! The offload scheduler and device transfers are the `tensorlane-offload` crate (folder
//! `offload/`), built on this one.
#![deny(missing_docs)]

pub mod buffers;
pub mod error;
pub mod model;
pub mod net;
pub mod publish;
#[cfg(feature = "remote")]
pub mod remote;
#[cfg(feature = "serve")]
pub mod serve;
pub mod source;
pub mod st_write;
pub mod wire;
pub mod zt_encode;
pub mod zt_write;

pub use error::Error;
pub use tensorlane_core as core;

/// The crate README's examples, compiled and run as doctests (`cargo test --doc`).
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
