//! tensorlane-core's integration tests, one test binary: each module was a binary of its own, and
//! with the core at opt-level 3 in test builds (Cargo.toml) fifteen binaries spent 135 s of a CI
//! build where one spends 70 s. Run one module with `cargo test -p tensorlane-core --test all
//! fixtures_gguf::`.

#[macro_use]
mod common;

// The largest single allocation made by each thread (common::counting), for the "no allocation
// larger than the file" checks of fixtures_npy and fixtures_safetensors.
install_counting_allocator!();

mod fixtures_detect;
mod fixtures_gguf;
mod fixtures_hdf5;
mod fixtures_npy;
mod fixtures_onnx;
mod fixtures_pt;
mod fixtures_safetensors;
mod integrity;
mod properties;
mod tenso_catalog;
mod vectors;
mod zt_conformance;
mod zt_legacy;
mod zt_reader;
mod zt_seekable;
