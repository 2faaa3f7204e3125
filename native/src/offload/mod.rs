//! Running models bigger than the GPU: the offload scheduler (docs/specs/offload.md).
//!
//! * [`model`] — what a forward needs: ordered ops, the tensors each reads, their cost
//!   ([`Model`]); Llama-style presets ([`LlamaShape`]) and `.zt` files ([`Model::from_zt`]).
//! * [`profile`] — device profiles ([`DeviceProfile`]); `h100` and `pcie4` are checked in.
//! * [`plan`] — the static plan IR ([`Plan`]) and its compiler ([`compile`], [`compile_policy`]):
//!   a water-filled resident set, a FIFO ring, copies in consumption order (Belady-optimal for a
//!   known sequence; never LRU), events, wrap-around prefetch; the baselines of §6.2 as plans of
//!   the same IR ([`Policy`]).
//! * [`sim`] — the discrete-event simulator ([`simulate`], [`SimReport`]).
//! * [`check`] — the hazard checker over happens-before ([`check()`], [`Finding`], [`Rule`]).
//!
//! ```
//! use tensorlane::offload::{DeviceProfile, Model, Phase, check, compile, simulate};
//! let model = Model::preset("tiny", Phase::DECODE).unwrap();
//! let profile = DeviceProfile::h100();
//! let plan = compile(&model, &profile, 2_000_000).unwrap();
//! assert!(check(&plan).is_empty());
//! let report = simulate(&plan, &profile, 6).unwrap();
//! assert!(report.forward_s >= report.floor_s * 0.999);
//! ```

pub mod check;
pub mod exec;
pub mod model;
pub mod plan;
pub mod profile;
pub mod sim;

use serde::{Deserialize, Serialize};

pub use check::{Finding, Rule, check};
pub use model::{Access, Cost, LlamaShape, Model, Op, Phase, TensorInfo};
pub use plan::{Plan, Policy, compile, compile_policy};
pub use profile::{DeviceProfile, HostWeights};
pub use sim::{SimReport, simulate};

/// What can go wrong planning or simulating.
#[derive(Debug, Clone, PartialEq)]
pub enum OffloadError {
    /// The model is malformed (bad index, group order, cost).
    InvalidModel(String),
    /// The profile is malformed.
    InvalidProfile(String),
    /// A plan is malformed (index out of range).
    InvalidPlan(String),
    /// The policy cannot fit the budget.
    DoesNotFit {
        /// Bytes the policy needs at least.
        needed: u64,
        /// The budget.
        budget: u64,
        /// The policy's name.
        policy: &'static str,
    },
    /// The ring cannot hold what one op reads (or a slot would be reused while needed).
    RingTooSmall(String),
    /// The simulation stopped: a wait that no record can satisfy.
    Deadlock(String),
    /// A file could not be read.
    Io(String),
    /// A file could not be parsed.
    Input(String),
}

impl std::fmt::Display for OffloadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            OffloadError::InvalidModel(m) => write!(f, "invalid model: {m}"),
            OffloadError::InvalidProfile(m) => write!(f, "invalid device profile: {m}"),
            OffloadError::InvalidPlan(m) => write!(f, "invalid plan: {m}"),
            OffloadError::DoesNotFit { needed, budget, policy } => write!(
                f,
                "{policy}: needs at least {needed} bytes of VRAM, the budget is {budget} bytes"
            ),
            OffloadError::RingTooSmall(m) => write!(f, "ring too small: {m}"),
            OffloadError::Deadlock(m) => write!(f, "deadlock: {m}"),
            OffloadError::Io(m) => write!(f, "{m}"),
            OffloadError::Input(m) => write!(f, "{m}"),
        }
    }
}

impl std::error::Error for OffloadError {}

/// One policy's plan, simulated and checked: a row of the comparison table.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Evaluation {
    /// The policy.
    pub policy: Policy,
    /// The layout it chose.
    pub layout: String,
    /// Bytes resident across forwards.
    pub resident_bytes: u64,
    /// Bytes streamed per forward.
    pub streamed_bytes: u64,
    /// The arena (resident + ring).
    pub arena_bytes: u64,
    /// The simulation.
    pub sim: SimReport,
    /// Hazard findings (empty = safe).
    pub findings: Vec<Finding>,
}

/// Compiles, simulates (`forwards` forwards) and checks one policy's plan.
pub fn evaluate(
    model: &Model,
    profile: &DeviceProfile,
    budget_bytes: u64,
    policy: Policy,
    forwards: usize,
) -> Result<(Plan, Evaluation), OffloadError> {
    let plan = compile_policy(model, profile, budget_bytes, policy)?;
    let sim = simulate(&plan, profile, forwards)?;
    let findings = check(&plan);
    let e = Evaluation {
        policy,
        layout: plan.layout.clone(),
        resident_bytes: plan.resident_bytes(),
        streamed_bytes: plan.streamed_bytes(),
        arena_bytes: plan.arena_bytes,
        sim,
        findings,
    };
    Ok((plan, e))
}

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
