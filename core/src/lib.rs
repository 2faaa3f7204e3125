//! # tensorlane-core
//!
//! Pure code over bytes: no I/O, no threads, no clock. `#![no_std]` + `alloc`, so the same codec
//! runs natively, in WebAssembly (browsers, Node) and behind the N-API addon.
//!
//! * [`detect`] — which format a file is in, from its magic bytes.
//! * [`dtype`] — one table of storage dtypes, with NumPy names and element sizes.
//! * [`tensor`] — [`Tensor`], a dense tensor that borrows its bytes when it can.
//! * [`source`] — [`source::ReadAt`], random access over memory, files or the network.
//! * [`stats`] — count, min, max, mean, std, special values and a NumPy-exact histogram of any
//!   tensor, streamed chunk by chunk ([`stats::tensor_stats`]).
//! * [`zt`] — the `.zt` container.
//! * [`hash`] — XXH3-64, with run-time SIMD selection where `std` allows it.
//! * [`formats`] — safetensors, GGUF, PyTorch, NumPy, ONNX and HDF5 files as one [`formats::Catalog`].
//! * [`wire`] — Tenso 0.24-compatible packets: [`wire::decode`], [`wire::encode`],
//!   [`wire::StreamDecoder`].
//!
//! ```
//! use tensorlane_core::{dtype::DType, tensor::Tensor, wire};
//!
//! let values: Vec<u8> = [1.0f32, 2.0, 3.0].iter().flat_map(|v| v.to_le_bytes()).collect();
//! let t = Tensor::new(DType::F32, vec![3], values.as_slice()).unwrap();
//! let bytes = wire::encode(&wire::Packet::Dense(t), &wire::EncodeOptions::default()).unwrap();
//! let back = wire::decode(&bytes).unwrap();
//! let dense = back.as_dense().unwrap();
//! assert_eq!(dense.shape(), &[3]);
//! assert!(dense.is_view()); // the body was borrowed from `bytes`, not copied
//! ```
#![no_std]
#![forbid(unsafe_code)]
#![deny(missing_docs)]

extern crate alloc;
#[cfg(feature = "std")]
extern crate std;

pub mod detect;
pub mod dtype;
pub mod formats;
pub mod hash;
pub mod source;
pub mod stats;
pub mod tensor;
pub mod wire;
pub mod zt;

pub use dtype::DType;
pub use tensor::{ByteOrder, Tensor};

/// The crate README's examples, compiled and run as doctests (`cargo test --doc`).
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
