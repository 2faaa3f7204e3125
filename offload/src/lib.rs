//! # tensorlane-offload
//!
//! Running models bigger than the GPU: the offload scheduler (docs/specs/offload.md) and the
//! device transfer under it. The plan is data: one compiler writes it, one simulator and one
//! hazard checker judge it, and the executors run it on the CPU, wgpu or CUDA.
//!
//! * [`workload`] — what a forward needs: ordered ops, the tensors each reads, their cost
//!   ([`Workload`]); Llama-style presets ([`LlamaShape`]) and any model file
//!   ([`Workload::from_model`]).
//! * [`profile`] — device profiles ([`DeviceProfile`]); `h100` and `pcie4` are checked in.
//! * [`plan`] — the static plan IR ([`Plan`]): resident parts, a FIFO ring of slots, copies,
//!   events and per-stream programs; the policies that produce plans ([`Policy`]).
//! * [`compile`](mod@compile) — the plan compiler ([`compile()`], [`compile_policy`]): a
//!   water-filled resident set, a FIFO ring, copies in consumption order (Belady-optimal for a
//!   known sequence; never LRU), events, wrap-around prefetch; the baselines of §6.2 as plans of
//!   the same IR.
//! * [`sim`] — the discrete-event simulator ([`simulate`], [`SimReport`]).
//! * [`check`](mod@check) — the hazard checker over happens-before ([`check()`], [`Finding`],
//!   [`Rule`]).
//! * [`evaluate`](mod@evaluate) — one policy compiled, simulated and checked: a row of the
//!   comparison table ([`evaluate()`], [`Evaluation`]).
//! * [`exec`] — executors that run a plan for real: [`exec::CpuBackend`] always,
//!   `exec::wgpu::WgpuBackend` (feature `wgpu`) and `exec::cuda::CudaBackend` (feature `cuda`).
//! * [`device`] — moving tensor bytes towards a device: host weight tiers, and the wgpu and CUDA
//!   devices under their features.
//!
//! Module arrows run one way: `evaluate -> compile -> sim -> plan -> workload -> profile`,
//! `evaluate -> check -> plan`, `exec -> plan`, `exec::{wgpu, cuda} -> device`. Every fallible
//! call returns [`Error`].
//!
//! ```
//! use tensorlane_offload::{DeviceProfile, Phase, Workload, check, compile, simulate};
//! let workload = Workload::preset("tiny", Phase::DECODE).unwrap();
//! let profile = DeviceProfile::h100();
//! let plan = compile(&workload, &profile, 2_000_000).unwrap();
//! assert!(check(&plan).is_empty());
//! let report = simulate(&plan, &profile, 6).unwrap();
//! assert!(report.forward_s >= report.floor_s * 0.999);
//! ```
#![deny(missing_docs)]

pub mod check;
pub mod compile;
#[cfg(feature = "native")]
pub mod device;
mod error;
pub mod evaluate;
#[cfg(feature = "native")]
pub mod exec;
pub mod plan;
pub mod profile;
pub mod sim;
pub mod workload;

pub use check::{Finding, Rule, check};
pub use compile::{compile, compile_policy};
pub use error::Error;
pub use evaluate::{Evaluation, evaluate};
pub use plan::{Plan, Policy};
pub use profile::{DeviceProfile, HostWeights};
pub use sim::{SimReport, TraceSpan, chrome_trace, simulate, simulate_traced};
pub use workload::{Access, Cost, LlamaShape, Op, Phase, Workload, WorkloadTensor};

/// Parses a byte size: `4GiB`, `4GB`, `512MiB`, `1.5G` (= GiB), `1000000`.
pub fn parse_bytes(s: &str) -> Option<u64> {
    let t = s.trim();
    let split = t.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let v: f64 = num.parse().ok()?;
    let mul: f64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "kb" => 1e3,
        "mb" => 1e6,
        "gb" => 1e9,
        "tb" => 1e12,
        "k" | "kib" => 1024.0,
        "m" | "mib" => 1024.0 * 1024.0,
        "g" | "gib" => 1024.0 * 1024.0 * 1024.0,
        "t" | "tib" => 1024.0f64.powi(4),
        _ => return None,
    };
    let b = v * mul;
    if b.is_finite() && (0.0..1.8e19).contains(&b) {
        Some(b as u64)
    } else {
        None
    }
}

/// The crate README's examples, compiled and run as doctests (`cargo test --doc`).
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
