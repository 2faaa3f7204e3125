//! One policy's plan compiled, simulated and checked: a row of the table that compares the
//! scheduler with the baselines.

use serde::{Deserialize, Serialize};

use crate::check::{Finding, check};
use crate::compile::compile_policy;
use crate::error::Error;
use crate::plan::{Plan, Policy};
use crate::profile::DeviceProfile;
use crate::sim::{SimReport, simulate};
use crate::workload::Workload;

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
    workload: &Workload,
    profile: &DeviceProfile,
    budget_bytes: u64,
    policy: Policy,
    forwards: usize,
) -> Result<(Plan, Evaluation), Error> {
    let plan = compile_policy(workload, profile, budget_bytes, policy)?;
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
