//! Moving tensor bytes towards a device: where weights live on the host ([`tiers`]: RAM, page cache
//! through a memory map, disk through `O_DIRECT`), and the transfer into device memory.
//!
//! * [`tiers`] — always built: read tensor bytes from memory, a memory map or the disk
//!   (`O_DIRECT` `pread` into aligned buffers, buffered `pread` where the file system refuses
//!   `O_DIRECT`), and a throughput probe per tier.
//! * `wgpu` (cargo feature `wgpu`) — a [`wgpu`](https://docs.rs/wgpu) device (any adapter, CPU
//!   ones such as Mesa lavapipe included): uploads from byte slices, chunked through a staging
//!   ring, downloads, an f32 matmul compute shader and a bandwidth probe.
//! * `cuda` (cargo feature `cuda`) — a CUDA device through `cudarc` with the driver loaded at run
//!   time: pinned (default and write-combined) staging, async host-to-device copies on streams
//!   with events, and a bandwidth probe by chunk size and host-memory kind. Without `libcuda` every
//!   entry point returns an error instead of panicking.
//!
//! The offload executors are built on these; the plan they run is data (see `DESIGN.md`).

pub mod tiers;

#[cfg(feature = "wgpu")]
pub mod wgpu;

#[cfg(feature = "cuda")]
pub mod cuda;
