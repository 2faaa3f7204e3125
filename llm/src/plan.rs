//! A session's offload plan under a budget ([`Options::budget`](crate::Options::budget)): the
//! workload is the architecture's own op list over the bound weight matrices (their stored
//! bytes, so a Q4_K weight costs Q4_K bytes on the link), compiled by
//! [`tensorlane_offload::compile_policy`] for the chosen [`Policy`] and checked by the hazard
//! checker. The executors keep each matrix's planned resident rows on the device and stream the
//! rest before each use.

use std::collections::HashMap;

use tensorlane_offload::{
    Access, Cost, DeviceProfile, Op, Phase, Plan, Policy, SimReport, Workload, WorkloadTensor, check, compile_policy,
    simulate,
};

use crate::arch::Spec;
#[cfg(feature = "native")]
use crate::kernels::Matrix;
use crate::{Error, Result};

/// Positions evaluated in one batch by the executors (their activation buffers hold this many).
pub const BATCH: usize = 32;

/// How the KV cache stores keys and values.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CacheType {
    /// 4 bytes a value: exact.
    F32,
    /// 2 bytes a value (llama.cpp's default): half the memory. Attention takes the query and the
    /// softmax weights rounded to f16 too, as llama.cpp's CPU path does with an f16 cache.
    F16,
    /// llama.cpp's `q8_0`: blocks of 32 values of one attention head, 8 bits each with an f16
    /// scale (34 bytes per 32 values, 1.0625 a value): 0.53x the memory of f16. Attention takes
    /// each query head quantized the same way (the integer dot product of llama.cpp's flash
    /// attention with a q8_0 cache) and sums the values in f32. Needs a head width that is a
    /// multiple of 32, as llama.cpp does.
    Q8_0,
}

impl CacheType {
    /// Every type, in the order `--cache-type` lists them.
    pub const ALL: [CacheType; 3] = [CacheType::F16, CacheType::F32, CacheType::Q8_0];

    /// Bytes `values` cached values take (`values` a multiple of 32 for [`CacheType::Q8_0`]).
    pub fn bytes_of(self, values: usize) -> usize {
        match self {
            CacheType::F32 => 4 * values,
            CacheType::F16 => 2 * values,
            CacheType::Q8_0 => values.div_ceil(32) * 34,
        }
    }

    /// The name `--cache-type` takes (`f32`, `f16`, `q8_0`).
    pub fn name(self) -> &'static str {
        match self {
            CacheType::F32 => "f32",
            CacheType::F16 => "f16",
            CacheType::Q8_0 => "q8_0",
        }
    }

    /// The type named `name` (`f32`, `f16`, `q8_0`), or `None`.
    pub fn from_name(name: &str) -> Option<CacheType> {
        CacheType::ALL.into_iter().find(|c| c.name() == name)
    }

    /// The type named `name`, or what to write instead (`'q4' is not a KV cache type (use one of:
    /// f16, f32, q8_0)`), for a caller to prefix with the option it came from.
    pub fn parse(name: &str) -> std::result::Result<CacheType, String> {
        CacheType::from_name(name).ok_or_else(|| {
            format!(
                "'{name}' is not a KV cache type (use one of: {})",
                CacheType::ALL.map(|c| c.name()).join(", ")
            )
        })
    }

    /// Why a model whose attention heads are `head_dim` wide cannot keep this cache, if it
    /// cannot: a q8_0 cache quantizes each head in blocks of 32 values.
    pub fn check(self, head_dim: usize) -> Result<()> {
        let hd = head_dim;
        if self == CacheType::Q8_0 && !hd.is_multiple_of(32) {
            return Err(Error::Options(format!(
                "a q8_0 KV cache quantizes each attention head in blocks of 32 values, and this model's heads \
                 are {hd} wide: use cache type f16 (llama.cpp refuses this too)"
            )));
        }
        Ok(())
    }
}

/// Device bytes a session needs besides the weight matrices: the KV cache (keys and values of
/// `context` positions, `cache` bytes a value), the f32 vectors (norms, biases, rope factors) and
/// the activations of one [`BATCH`] (hidden states, projections, attention scores over the
/// context, logits).
pub fn working_set(spec: &Spec, context: usize, vector_bytes: u64, cache: CacheType) -> u64 {
    let h = &spec.hparams;
    let q_dim = h.n_head * h.head_dim;
    let kv_dim = h.n_head_kv * h.head_dim;
    let kv = (context as u64).saturating_mul((2 * h.n_layer * cache.bytes_of(kv_dim)) as u64);
    let widest = h.n_ff.max(q_dim).max(h.n_embd);
    let floats = BATCH as u64 * (3 * h.n_embd + 3 * q_dim + 2 * kv_dim + 2 * h.n_ff + widest + h.n_vocab) as u64
        + (BATCH * h.n_head) as u64 * context as u64;
    kv.saturating_add(vector_bytes).saturating_add(floats.saturating_mul(4))
}

/// One forward of `spec` at decode (one token against `context` cached ones) over the matrices
/// `mats` (name, rows, cols, stored bytes): the embedding lookup (a gather, when the output is
/// not tied to it), per layer the q/k/v projections, attention (no weights), the output
/// projection, gate and up, down; the output projection last (the embedding when tied).
pub fn workload(name: &str, spec: &Spec, mats: &[(&str, usize, usize, u64)], context: usize) -> Workload {
    let index: HashMap<&str, usize> = mats.iter().enumerate().map(|(i, m)| (m.0, i)).collect();
    let tied = !index.contains_key(spec.output.name.as_str());
    let tensors: Vec<WorkloadTensor> = mats
        .iter()
        .map(|&(n, rows, _, bytes)| WorkloadTensor {
            name: n.to_string(),
            bytes,
            access: if n == spec.token_embd.name && !tied {
                Access::Gather
            } else {
                Access::Dense
            },
            row_bytes: bytes / rows.max(1) as u64,
        })
        .collect();
    let id = |n: &str| index.get(n).copied();
    // A product over one token: 2·rows·cols flops, the stored weight bytes plus its in/out rows.
    let gemm = |reads: &[usize]| {
        let (mut flops, mut bytes) = (0.0, 0.0);
        for &t in reads {
            let (_, rows, cols, b) = mats[t];
            flops += 2.0 * (rows * cols) as f64;
            bytes += b as f64 + 4.0 * (rows + cols) as f64;
        }
        Cost::roofline(flops, bytes)
    };
    let mut ops = Vec::new();
    let embd = id(&spec.token_embd.name);
    if let (false, Some(e)) = (tied, embd) {
        let row = mats[e].3 as f64 / mats[e].1.max(1) as f64;
        ops.push(Op {
            name: "embed".into(),
            group: 0,
            reads: vec![e],
            cost: Cost::roofline(0.0, row),
        });
    }
    let h = &spec.hparams;
    let kv_dim = h.n_head_kv * h.head_dim;
    for (l, ls) in spec.layers.iter().enumerate() {
        let group = (l + 1) as u32;
        let mut op = |what: &str, reads: Vec<usize>, cost: Option<Cost>| {
            let cost = cost.unwrap_or_else(|| gemm(&reads));
            ops.push(Op {
                name: format!("layer {l} {what}"),
                group,
                reads,
                cost,
            });
        };
        let ids = |specs: &[&crate::arch::TensorSpec]| specs.iter().filter_map(|s| id(&s.name)).collect::<Vec<_>>();
        op("q/k/v", ids(&[&ls.wq, &ls.wk, &ls.wv]), None);
        let attn_flops = 4.0 * context as f64 * (h.n_head * h.head_dim) as f64;
        let attn_bytes = 2.0 * context as f64 * kv_dim as f64 * 4.0;
        op("attention", Vec::new(), Some(Cost::roofline(attn_flops, attn_bytes)));
        op("output", ids(&[&ls.wo]), None);
        op("gate/up", ids(&[&ls.gate, &ls.up]), None);
        op("down", ids(&[&ls.down]), None);
        if let Some(m) = &ls.moe {
            op("router", ids(&[&m.router]), None);
            // Each expert is an op of its own reading its three matrices, so the plan places
            // (keeps resident or streams) expert by expert; a token runs `n_expert_used` of
            // them, so each one's compute is counted at that share. The streamed bytes the plan
            // reports are every expert's (what a forward pass streams at most); a pass streams
            // only its routed experts' ones.
            let share = m.n_expert_used as f64 / m.n_expert.max(1) as f64;
            for e in 0..m.n_expert {
                let reads: Vec<usize> = m.expert_names(e).iter().filter_map(|n| id(n)).collect();
                let c = gemm(&reads);
                let cost = Cost::roofline(c.flops * share, c.hbm_bytes * share);
                op(&format!("expert {e}"), reads, Some(cost));
            }
        }
    }
    let out = id(&spec.output.name).or(embd).into_iter().collect::<Vec<_>>();
    ops.push(Op {
        name: "logits".into(),
        group: (spec.layers.len() + 1) as u32,
        cost: gemm(&out),
        reads: out,
    });
    Workload {
        name: name.to_string(),
        tokens: Phase::Decode {
            context: context as u64,
        }
        .tokens(),
        tensors,
        ops,
    }
}

/// A compiled, hazard-checked plan and what it keeps resident.
#[derive(Clone, Debug)]
pub struct Budgeted {
    /// The plan (PCIe-4 profile).
    pub plan: Plan,
    /// Its simulation on that profile (the prediction a run is compared with).
    pub sim: SimReport,
    /// Device bytes outside the weight arena ([`working_set`]).
    pub working_set: u64,
}

impl Budgeted {
    /// Each device-computed matrix's resident bytes (whole rows) and, when it streams, its
    /// slot's offset in the plan's ring: what a device executor lays its weights out by.
    #[cfg(any(feature = "wgpu", feature = "cuda"))]
    pub(crate) fn placement(&self) -> HashMap<String, (u64, Option<u64>)> {
        let p = &self.plan;
        let mut split: HashMap<String, (u64, Option<u64>)> = p
            .tensors
            .iter()
            .filter(|t| t.access == Access::Dense)
            .map(|t| (t.name.clone(), (t.resident_bytes, None)))
            .collect();
        for c in &p.chunks {
            if let Some(t) = p.tensors.get(c.tensor as usize)
                && let Some(e) = split.get_mut(&t.name)
            {
                e.1 = Some(c.dev_offset - p.ring.base);
            }
        }
        split
    }

    /// Resident bytes of each matrix the device computes with (gathered ones are absent: they
    /// stay on the host).
    pub fn resident(&self) -> HashMap<&str, u64> {
        self.plan
            .tensors
            .iter()
            .filter(|t| t.access == Access::Dense)
            .map(|t| (t.name.as_str(), t.resident_bytes))
            .collect()
    }
}

/// Compiles the plan of `policy` for `budget` bytes (the working set included) over `mats`.
/// A budget that cannot hold the working set, or that the policy cannot fit, is an error naming
/// the smallest budget that works; a plan with a hazard finding is refused.
#[cfg(feature = "native")]
#[allow(clippy::too_many_arguments)]
pub(crate) fn compile(
    name: &str,
    spec: &Spec,
    mats: &[&Matrix<'_>],
    vector_bytes: u64,
    budget: u64,
    context: usize,
    cache: CacheType,
    policy: Policy,
) -> Result<Budgeted> {
    compile_described(name, spec, &described(mats), vector_bytes, budget, context, cache, policy)
}

/// The session's plan compiler over matrices given as `(name, rows, cols, stored bytes)` (in
/// the order [`workload`] takes: the embedding, per layer q, k, v, o, gate, up, down, then the
/// output unless it is tied) and the bytes of the f32 vectors (norms, biases, rope factors),
/// with a KV cache of `cache`: what a session compiles for `budget`, with the same errors, for
/// runtimes that hold the weights elsewhere (the browser's WebGPU executor).
#[allow(clippy::too_many_arguments)]
pub fn compile_described(
    name: &str,
    spec: &Spec,
    mats: &[(&str, usize, usize, u64)],
    vector_bytes: u64,
    budget: u64,
    context: usize,
    cache: CacheType,
    policy: Policy,
) -> Result<Budgeted> {
    let workload = workload(name, spec, mats, context);
    let fixed = working_set(spec, context, vector_bytes, cache);
    try_compile(&workload, fixed, budget, policy).map_err(|why| {
        let minimum = match minimum_budget(&workload, fixed, policy) {
            Some(m) => format!("the smallest budget the {} policy accepts is {m} bytes", policy.name()),
            None => format!("the {} policy accepts no budget for this model", policy.name()),
        };
        Error::Budget(format!(
            "budget {budget} bytes: {why}; {minimum} ({fixed} of them for the KV cache of {context} positions \
             ({} values), the norm vectors and the activations)",
            cache.name()
        ))
    })
}

/// [`compile`] without the search for the minimum: the reason as text.
fn try_compile(workload: &Workload, fixed: u64, budget: u64, policy: Policy) -> std::result::Result<Budgeted, String> {
    if budget <= fixed {
        return Err("below the working set alone".into());
    }
    let profile = DeviceProfile::pcie4();
    let plan = compile_policy(workload, &profile, budget - fixed, policy).map_err(|e| match e {
        tensorlane_offload::Error::DoesNotFit { .. } => format!("too small for the {} policy", policy.name()),
        other => other.to_string(),
    })?;
    let findings = check(&plan);
    if let Some(f) = findings.first() {
        return Err(format!(
            "the plan fails the hazard checker ({} findings; first: {f:?})",
            findings.len()
        ));
    }
    let sim = simulate(&plan, &profile, tensorlane_offload::sim::DEFAULT_FORWARDS)
        .map_err(|e| format!("the plan does not simulate: {e}"))?;
    Ok(Budgeted {
        plan,
        sim,
        working_set: fixed,
    })
}

/// The smallest budget `policy` accepts for `workload` (to 256 bytes; a binary search over
/// [`try_compile`]), `None` when even twice the model does not fit (all-resident on a model
/// that cannot be, never).
fn minimum_budget(workload: &Workload, fixed: u64, policy: Policy) -> Option<u64> {
    let total = workload.weight_bytes();
    let (mut lo, mut hi) = (
        fixed,
        fixed.saturating_add(total.saturating_mul(2)).saturating_add(1 << 20),
    );
    let ok = |b: u64| try_compile(workload, fixed, b, policy).is_ok();
    if !ok(hi) {
        return None;
    }
    while hi - lo > 256 {
        let mid = lo + (hi - lo) / 2;
        if ok(mid) { hi = mid } else { lo = mid }
    }
    Some(hi)
}

/// [`minimum_budget`] of a session's matrices.
#[cfg(feature = "native")]
pub(crate) fn minimum(
    name: &str,
    spec: &Spec,
    mats: &[&Matrix<'_>],
    vector_bytes: u64,
    context: usize,
    cache: CacheType,
    policy: Policy,
) -> Option<u64> {
    minimum_described(name, spec, &described(mats), vector_bytes, context, cache, policy)
}

/// The smallest budget [`compile_described`] accepts for these matrices (`None`: none).
pub fn minimum_described(
    name: &str,
    spec: &Spec,
    mats: &[(&str, usize, usize, u64)],
    vector_bytes: u64,
    context: usize,
    cache: CacheType,
    policy: Policy,
) -> Option<u64> {
    minimum_budget(
        &workload(name, spec, mats, context),
        working_set(spec, context, vector_bytes, cache),
        policy,
    )
}

/// `(name, rows, cols, stored bytes)` of each matrix: what [`workload`] takes.
#[cfg(feature = "native")]
fn described<'a>(mats: &[&'a Matrix<'_>]) -> Vec<(&'a str, usize, usize, u64)> {
    mats.iter()
        .map(|m| (m.name.as_str(), m.rows, m.cols, m.stored_bytes() as u64))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cache_types_by_name_size_and_head_width() {
        for c in CacheType::ALL {
            assert_eq!(CacheType::from_name(c.name()), Some(c));
        }
        assert_eq!(CacheType::from_name("q4_0"), None);
        assert_eq!(CacheType::parse("q8_0"), Ok(CacheType::Q8_0));
        assert_eq!(CacheType::parse("q4").unwrap_err(), "'q4' is not a KV cache type (use one of: f16, f32, q8_0)");
        // 64 values: 256, 128 and 2 * 34 bytes (ggml's block_q8_0)
        let sizes: Vec<usize> = [CacheType::F32, CacheType::F16, CacheType::Q8_0].map(|c| c.bytes_of(64)).into();
        assert_eq!(sizes, [256, 128, 68]);
        assert!(CacheType::Q8_0.check(64).is_ok());
        assert!(CacheType::F16.check(80).is_ok());
        let e = CacheType::Q8_0.check(80).unwrap_err().to_string();
        assert!(e.contains("80 wide") && e.contains("f16"), "{e}");
    }
}
