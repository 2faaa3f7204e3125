//! The plan IR (offload.md §3.5) and the plan compiler: a resident set, a FIFO ring of slots for
//! streamed tensors, copies issued in consumption order, explicit events, and a periodic program
//! (the copy stream runs ahead into the next forward). The baselines of §6.2 are plans of the same
//! IR, so the simulator and the hazard checker treat every policy alike.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use super::OffloadError;
use super::model::{Access, Model};
use super::profile::{DeviceProfile, HostWeights};

/// Alignment of every arena and staging offset, bytes.
pub const ALIGN: u64 = 256;
/// Tensors smaller than this stay resident under the scheduler (a copy's fixed cost would
/// dominate).
pub const MIN_STREAM_BYTES: u64 = 1 << 20;
/// ZeRO's `stage3_param_persistence_threshold` (1e5 elements) at 2 bytes per element.
pub const ZERO_PERSIST_BYTES: u64 = 200_000;

fn align(x: u64) -> u64 {
    x.div_ceil(ALIGN).saturating_mul(ALIGN)
}

/// Which policy produced a plan.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Policy {
    /// The scheduler: water-filled resident set, FIFO ring, chosen by simulator-in-the-loop search.
    Scheduler,
    /// Everything resident (only when the weights fit): the ceiling, `C`.
    AllResident,
    /// Accelerate-like: resident prefix in execution order; every other tensor copied from
    /// pageable memory just before use, synchronously, and freed after.
    SyncJit,
    /// ZeRO-Inference-like: nothing resident (but tiny tensors), in-order prefetch as memory allows.
    FullOffload,
    /// FlexGen-like: the same fraction of every tensor resident, one-layer lookahead with a
    /// barrier per layer, two layer buffers, pinned memory.
    FlexGen,
}

impl Policy {
    /// The four baselines of offload.md §6.2, in table order.
    pub const BASELINES: [Policy; 4] = [
        Policy::AllResident,
        Policy::SyncJit,
        Policy::FullOffload,
        Policy::FlexGen,
    ];

    /// Short name used in tables and on the command line.
    pub fn name(&self) -> &'static str {
        match self {
            Policy::Scheduler => "scheduler",
            Policy::AllResident => "all-resident",
            Policy::SyncJit => "sync-jit",
            Policy::FullOffload => "full-offload",
            Policy::FlexGen => "flexgen-like",
        }
    }
}

/// Where a streamed chunk's bytes live between forwards.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Home {
    /// Pinned host memory: asynchronous copies at `P`.
    Pinned,
    /// Pageable host memory: synchronous copies at the pageable rate.
    Pageable,
    /// On disk: read into a pinned host staging slot first (`D`), then copied.
    Disk,
    /// In the page cache (a warm, mapped file): staged into a pinned host slot by the memcpy
    /// threads (`M`), then copied.
    PageCache,
}

impl Home {
    /// Whether the chunk passes through a pinned host staging slot (disk or page cache).
    pub fn is_staged(self) -> bool {
        matches!(self, Home::Disk | Home::PageCache)
    }
}

/// A byte range `[base, base + len)`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Region {
    /// First byte.
    pub base: u64,
    /// Length.
    pub len: u64,
}

impl Region {
    /// One past the last byte.
    pub fn end(&self) -> u64 {
        self.base.saturating_add(self.len)
    }
    /// True if the two ranges share a byte.
    pub fn overlaps(&self, o: &Region) -> bool {
        self.len > 0 && o.len > 0 && self.base < o.end() && o.base < self.end()
    }
}

/// A tensor as planned: how many of its bytes stay resident, how many are streamed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PlanTensor {
    /// Name.
    pub name: String,
    /// Size in bytes.
    pub bytes: u64,
    /// Dense or gathered.
    pub access: Access,
    /// Bytes kept resident (a prefix of the tensor, split along output rows).
    pub resident_bytes: u64,
    /// Bytes streamed every forward (the rest).
    pub streamed_bytes: u64,
}

/// The resident part of one tensor: loaded once, never evicted.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Resident {
    /// Index into [`Plan::tensors`].
    pub tensor: u32,
    /// Arena offset.
    pub offset: u64,
    /// Bytes.
    pub bytes: u64,
}

/// The streamed part of one tensor: copied into its ring slot before its first reader, freed
/// after its last reader, every forward.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Chunk {
    /// Index into [`Plan::tensors`].
    pub tensor: u32,
    /// Offset of the streamed part inside the tensor.
    pub tensor_offset: u64,
    /// Bytes.
    pub bytes: u64,
    /// Arena offset of its slot (inside [`Plan::ring`]).
    pub dev_offset: u64,
    /// Where its bytes come from.
    pub home: Home,
    /// Offset of its host staging slot (inside [`Plan::host_staging`]) for [`Home::Disk`] and
    /// [`Home::PageCache`].
    pub host_offset: Option<u64>,
    /// First op reading it.
    pub first_reader: u32,
    /// Last op reading it.
    pub last_reader: u32,
}

impl Chunk {
    /// Its device slot.
    pub fn slot(&self) -> Region {
        Region {
            base: self.dev_offset,
            len: self.bytes,
        }
    }
}

/// One op as planned.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PlanOp {
    /// Name.
    pub name: String,
    /// Layer group.
    pub group: u32,
    /// Compute time on the plan's profile, seconds.
    pub seconds: f64,
    /// Indices into [`Plan::resident`] it reads.
    pub resident: Vec<u32>,
    /// Indices into [`Plan::chunks`] it reads.
    pub chunks: Vec<u32>,
}

/// What an event marks (each is recorded once per forward).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum EventKind {
    /// Chunk copied into its slot.
    Loaded(u32),
    /// Chunk's last reader done: its slot may be overwritten.
    SlotFree(u32),
    /// Op done.
    OpDone(u32),
    /// Staged chunk (disk or page cache) filled into its host staging slot.
    HostReady(u32),
    /// Staged chunk copied out of its host staging slot.
    HostFree(u32),
}

/// Which engine a stream drives.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum StreamKind {
    /// The compute stream.
    Compute,
    /// The host-to-device copy engine.
    H2d,
    /// The disk IO thread (disk → pinned host staging).
    Io,
    /// The memcpy threads (page cache → pinned host staging), each chunk split across them.
    Memcpy,
}

/// One instruction of a stream's program.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Instr {
    /// Block until the event's instance from `lag` forwards back is recorded (an instance before
    /// the first forward counts as already recorded: the ring starts empty).
    Wait {
        /// Index into [`Plan::events`].
        event: u32,
        /// How many forwards back.
        lag: u32,
    },
    /// Record the event (this forward's instance) when everything before it on the stream is done.
    Record {
        /// Index into [`Plan::events`].
        event: u32,
    },
    /// Fill a chunk's host staging slot: a disk read (Io stream) or a page-cache memcpy (Memcpy
    /// stream).
    Read {
        /// Index into [`Plan::chunks`].
        chunk: u32,
    },
    /// Host-to-device copy of a chunk into its slot (H2D stream).
    Copy {
        /// Index into [`Plan::chunks`].
        chunk: u32,
    },
    /// Run an op (compute stream).
    Exec {
        /// Index into [`Plan::ops`].
        op: u32,
    },
}

/// One stream: an engine and its per-forward program.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Stream {
    /// Engine.
    pub kind: StreamKind,
    /// Program of one forward (repeated every forward).
    pub program: Vec<Instr>,
}

/// A static, serialisable offload plan (offload.md §3.5).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Plan {
    /// The device profile it was compiled for.
    pub profile_id: String,
    /// Model name.
    pub model: String,
    /// Tokens per forward.
    pub tokens: u64,
    /// The policy that produced it.
    pub policy: Policy,
    /// Which layout the policy chose (the scheduler's winning search candidate).
    pub layout: String,
    /// VRAM budget for weights, bytes.
    pub budget_bytes: u64,
    /// Bytes the arena needs (resident set + ring), `<= budget_bytes`.
    pub arena_bytes: u64,
    /// Tensors with their split.
    pub tensors: Vec<PlanTensor>,
    /// Resident parts with arena offsets.
    pub resident: Vec<Resident>,
    /// The FIFO ring for streamed chunks (arena offsets).
    pub ring: Region,
    /// Pinned host staging for staged chunks (host offsets; empty when every chunk has a pinned
    /// host copy).
    pub host_staging: Region,
    /// Streamed chunks in consumption (= copy) order.
    pub chunks: Vec<Chunk>,
    /// Ops in execution order.
    pub ops: Vec<PlanOp>,
    /// Events.
    pub events: Vec<EventKind>,
    /// Streams and their programs.
    pub streams: Vec<Stream>,
    /// Always true: the program is a loop body; the next forward's copies may run in this one's tail.
    pub period: bool,
}

impl Plan {
    /// Bytes resident across forwards.
    pub fn resident_bytes(&self) -> u64 {
        self.resident.iter().map(|r| r.bytes).sum()
    }
    /// Bytes copied host → device per forward.
    pub fn streamed_bytes(&self) -> u64 {
        self.chunks.iter().map(|c| c.bytes).sum()
    }
    /// Bytes read from disk per forward.
    pub fn disk_bytes(&self) -> u64 {
        self.chunks
            .iter()
            .filter(|c| c.home == Home::Disk)
            .map(|c| c.bytes)
            .sum()
    }
    /// Bytes staged from the page cache by the memcpy threads per forward.
    pub fn memcpy_bytes(&self) -> u64 {
        self.chunks
            .iter()
            .filter(|c| c.home == Home::PageCache)
            .map(|c| c.bytes)
            .sum()
    }
    /// The plan as pretty JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_default()
    }
    /// A plan from JSON.
    pub fn from_json(text: &str) -> Result<Plan, OffloadError> {
        serde_json::from_str(text).map_err(|e| OffloadError::Input(format!("plan JSON: {e}")))
    }
}

/// How copies are ordered against compute.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    /// Copies wait only for their slot to be free.
    Async,
    /// A chunk's copy also waits for the op before its first reader (synchronous, just in time).
    SyncJit,
    /// Layer `g + 1` loads after layer `g − 1` computed (one-layer lookahead, barrier per step).
    LayerBarrier,
}

/// How ring slots are assigned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Alloc {
    /// FIFO at op granularity: an op's chunks are contiguous; wrap to the ring start when they
    /// would not fit before its end.
    OpFifo,
    /// Two layer buffers, alternating by layer group.
    LayerBuffers,
}

/// A layout: the split of every tensor, the ring length and the event discipline.
#[derive(Clone, Debug)]
struct Layout {
    streamed: Vec<u64>,
    ring_len: u64,
    mode: Mode,
    pageable: bool,
    alloc: Alloc,
    label: String,
}

/// Facts about the model the compiler uses.
struct Facts {
    /// Dense tensors some op reads, in first-reader order.
    dense: Vec<usize>,
    first: Vec<Option<u32>>,
    last: Vec<Option<u32>>,
    op_seconds: Vec<f64>,
}

fn facts(model: &Model, profile: &DeviceProfile) -> Facts {
    let n = model.tensors.len();
    let mut first = vec![None; n];
    let mut last = vec![None; n];
    for (i, op) in model.ops.iter().enumerate() {
        for &t in &op.reads {
            if first[t].is_none() {
                first[t] = Some(i as u32);
            }
            last[t] = Some(i as u32);
        }
    }
    let mut dense: Vec<usize> = (0..n)
        .filter(|&t| first[t].is_some() && model.tensors[t].access == Access::Dense)
        .collect();
    dense.sort_by_key(|&t| (first[t], t));
    Facts {
        dense,
        first,
        last,
        op_seconds: model.ops.iter().map(|o| o.cost.seconds_on(profile)).collect(),
    }
}

/// Compiles the scheduler's plan: the best of its candidate layouts by simulated steady-state
/// time per forward.
pub fn compile(model: &Model, profile: &DeviceProfile, budget_bytes: u64) -> Result<Plan, OffloadError> {
    compile_policy(model, profile, budget_bytes, Policy::Scheduler)
}

/// Compiles the plan of one policy (the scheduler or a baseline).
pub fn compile_policy(
    model: &Model,
    profile: &DeviceProfile,
    budget_bytes: u64,
    policy: Policy,
) -> Result<Plan, OffloadError> {
    model.validate()?;
    profile.validate()?;
    let f = facts(model, profile);
    match policy {
        Policy::Scheduler => scheduler(model, profile, budget_bytes, &f),
        _ => {
            let layout = baseline_layout(model, budget_bytes, &f, policy)?;
            build(model, profile, budget_bytes, policy, &f, &layout)
        }
    }
}

/// Per-op FIFO unit: the largest sum of aligned chunk sizes first read by one op.
fn op_unit(model: &Model, f: &Facts, streamed: &[u64]) -> u64 {
    let mut per_op = vec![0u64; model.ops.len()];
    for &t in &f.dense {
        if streamed[t] > 0
            && let Some(op) = f.first[t]
        {
            per_op[op as usize] = per_op[op as usize].saturating_add(align(streamed[t]));
        }
    }
    per_op.into_iter().max().unwrap_or(0)
}

fn slack(model: &Model) -> u64 {
    ALIGN.saturating_mul(model.tensors.len() as u64 + 2)
}

fn baseline_layout(model: &Model, budget: u64, f: &Facts, policy: Policy) -> Result<Layout, OffloadError> {
    let n = model.tensors.len();
    let w = |t: usize| model.tensors[t].bytes;
    let total: u64 = f.dense.iter().map(|&t| w(t)).sum();
    let too_big = |needed: u64| OffloadError::DoesNotFit {
        needed,
        budget,
        policy: policy.name(),
    };
    match policy {
        Policy::AllResident | Policy::Scheduler => {
            if total.saturating_add(slack(model)) > budget {
                return Err(too_big(total));
            }
            Ok(Layout {
                streamed: vec![0; n],
                ring_len: 0,
                mode: Mode::Async,
                pageable: false,
                alloc: Alloc::OpFifo,
                label: "all resident".into(),
            })
        }
        Policy::SyncJit => {
            let all: Vec<u64> = (0..n).map(w).collect();
            let l0 = op_unit(model, f, &all);
            let room = budget.saturating_sub(l0).saturating_sub(slack(model));
            let mut streamed = vec![0; n];
            let mut cum = 0u64;
            let mut full = false;
            for &t in &f.dense {
                if !full && cum.saturating_add(w(t)) <= room {
                    cum += w(t);
                } else {
                    full = true;
                    streamed[t] = w(t);
                }
            }
            let l = op_unit(model, f, &streamed);
            Ok(Layout {
                streamed,
                ring_len: l,
                mode: Mode::SyncJit,
                pageable: true,
                alloc: Alloc::OpFifo,
                label: format!("prefix resident, {} MB staging", l / 1_000_000),
            })
        }
        Policy::FullOffload => {
            let mut streamed = vec![0; n];
            let mut res = 0u64;
            for &t in &f.dense {
                if w(t) < ZERO_PERSIST_BYTES {
                    res += align(w(t));
                } else {
                    streamed[t] = w(t);
                }
            }
            let ring = budget.saturating_sub(res).saturating_sub(slack(model)) / ALIGN * ALIGN;
            let need = op_unit(model, f, &streamed);
            if ring < need {
                return Err(too_big(res.saturating_add(need)));
            }
            Ok(Layout {
                streamed,
                ring_len: ring,
                mode: Mode::Async,
                pageable: false,
                alloc: Alloc::OpFifo,
                label: format!("{} MB ring", ring / 1_000_000),
            })
        }
        Policy::FlexGen => {
            let split = |frac: f64| -> (Vec<u64>, u64, u64) {
                let mut streamed = vec![0; n];
                let mut res = 0u64;
                let mut per_group: HashMap<u32, u64> = HashMap::new();
                for &t in &f.dense {
                    let keep = ((w(t) as f64) * frac).floor() as u64;
                    let keep = keep.min(w(t));
                    streamed[t] = w(t) - keep;
                    res += align(keep);
                    if streamed[t] > 0
                        && let Some(op) = f.first[t]
                    {
                        *per_group.entry(model.ops[op as usize].group).or_default() += align(streamed[t]);
                    }
                }
                let layer = per_group.values().copied().max().unwrap_or(0);
                (streamed, res, 2 * layer)
            };
            let fits = |frac: f64| {
                let (_, res, ring) = split(frac);
                res.saturating_add(ring).saturating_add(slack(model)) <= budget
            };
            let frac = if fits(1.0) {
                1.0
            } else if !fits(0.0) {
                let (_, res, ring) = split(0.0);
                return Err(too_big(res + ring));
            } else {
                let (mut lo, mut hi) = (0.0f64, 1.0f64);
                for _ in 0..50 {
                    let mid = 0.5 * (lo + hi);
                    if fits(mid) { lo = mid } else { hi = mid }
                }
                lo
            };
            let (streamed, _, ring) = split(frac);
            Ok(Layout {
                streamed,
                ring_len: ring,
                mode: Mode::LayerBarrier,
                pageable: false,
                alloc: Alloc::LayerBuffers,
                label: format!("{:.0}% of every tensor resident", frac * 100.0),
            })
        }
    }
}

#[derive(Clone, Copy, Debug)]
enum Family {
    WaterFill,
    Uniform,
    Prefix,
}

/// The streamed bytes per tensor for a family, given bytes that may stay resident.
fn family_split(model: &Model, profile: &DeviceProfile, f: &Facts, fam: Family, room: u64) -> Option<Vec<u64>> {
    family_split_min(model, profile, f, fam, room, MIN_STREAM_BYTES)
        .or_else(|| family_split_min(model, profile, f, fam, room, 0))
}

fn family_split_min(
    model: &Model,
    profile: &DeviceProfile,
    f: &Facts,
    fam: Family,
    room: u64,
    min_stream: u64,
) -> Option<Vec<u64>> {
    let n = model.tensors.len();
    let w = |t: usize| model.tensors[t].bytes;
    let mut streamed = vec![0u64; n];
    let small: u64 = f
        .dense
        .iter()
        .filter(|&&t| w(t) < min_stream)
        .map(|&t| align(w(t)))
        .sum();
    let elig: Vec<usize> = f.dense.iter().copied().filter(|&t| w(t) >= min_stream).collect();
    let room = room.checked_sub(small)?;
    let elig_total: u64 = elig.iter().map(|&t| w(t)).sum();
    // Alignment padding of the resident parts.
    let room = room.saturating_sub(ALIGN * elig.len() as u64);
    let need = elig_total.saturating_sub(room);
    if need == 0 {
        return Some(streamed);
    }
    match fam {
        Family::Uniform => {
            let frac = need as f64 / elig_total as f64;
            for &t in &elig {
                streamed[t] = (((w(t) as f64) * frac).ceil() as u64).min(w(t));
            }
        }
        Family::Prefix => {
            let mut cum = 0u64;
            let mut full = false;
            for &t in &elig {
                if !full && cum + w(t) <= room {
                    cum += w(t);
                } else {
                    full = true;
                    streamed[t] = w(t);
                }
            }
        }
        Family::WaterFill => {
            // s_j = min(w_j, λ·c_j·P); c_j = the compute of its op, shared by bytes.
            let p = profile.h2d_pinned_gbps * 1e9;
            let mut op_dense: HashMap<u32, u64> = HashMap::new();
            for &t in &f.dense {
                if let Some(op) = f.first[t] {
                    *op_dense.entry(op).or_default() += w(t);
                }
            }
            let cap: Vec<(usize, f64)> = elig
                .iter()
                .map(|&t| {
                    let op = f.first[t].unwrap_or(0);
                    let share = w(t) as f64 / op_dense.get(&op).copied().unwrap_or(1).max(1) as f64;
                    let c = (f.op_seconds.get(op as usize).copied().unwrap_or(0.0) * share).max(1e-12);
                    (t, c * p)
                })
                .collect();
            let total = |lam: f64| -> f64 { cap.iter().map(|&(t, c)| (lam * c).min(w(t) as f64)).sum() };
            let mut hi = cap.iter().map(|&(t, c)| w(t) as f64 / c).fold(0.0f64, f64::max);
            if !(hi.is_finite()) || hi <= 0.0 {
                hi = 1e30;
            }
            let mut lo = 0.0f64;
            for _ in 0..100 {
                let mid = 0.5 * (lo + hi);
                if total(mid) >= need as f64 { hi = mid } else { lo = mid }
            }
            for &(t, c) in &cap {
                streamed[t] = ((hi * c).ceil().min(w(t) as f64)) as u64;
            }
            let got: u64 = elig.iter().map(|&t| streamed[t]).sum();
            // Rounding: take any shortfall from the largest tensors.
            let mut short = need.saturating_sub(got);
            let mut order = elig.clone();
            order.sort_by_key(|&t| std::cmp::Reverse(w(t) - streamed[t]));
            for t in order {
                if short == 0 {
                    break;
                }
                let add = short.min(w(t) - streamed[t]);
                streamed[t] += add;
                short -= add;
            }
        }
    }
    Some(streamed)
}

fn scheduler(model: &Model, profile: &DeviceProfile, budget: u64, f: &Facts) -> Result<Plan, OffloadError> {
    let mut cands: Vec<Plan> = Vec::new();
    let mut last_err = None;
    let mut push = |r: Result<Plan, OffloadError>, cands: &mut Vec<Plan>| match r {
        Ok(p) => cands.push(p),
        Err(e) => last_err = Some(e),
    };
    if let Ok(l) = baseline_layout(model, budget, f, Policy::AllResident) {
        push(build(model, profile, budget, Policy::Scheduler, f, &l), &mut cands);
    }
    if cands.is_empty() {
        for fam in [Family::WaterFill, Family::Uniform, Family::Prefix] {
            for k in [1.0, 1.5, 2.0, 3.0, 4.0, 6.0, 8.0, 12.0, 16.0] {
                let mut ring = 0u64;
                let mut split = None;
                for _ in 0..5 {
                    let room = budget.saturating_sub(ring).saturating_sub(slack(model));
                    let Some(s) = family_split(model, profile, f, fam, room) else {
                        break;
                    };
                    let unit = op_unit(model, f, &s);
                    let next = align((unit as f64 * k).ceil() as u64).max(unit);
                    let done = next <= ring;
                    split = Some(s);
                    if done {
                        break;
                    }
                    ring = next;
                }
                let Some(streamed) = split else { continue };
                let unit = op_unit(model, f, &streamed);
                let ring = ring.max(unit);
                let layout = Layout {
                    streamed,
                    ring_len: ring,
                    mode: Mode::Async,
                    pageable: false,
                    alloc: Alloc::OpFifo,
                    label: format!(
                        "{} split, {k}x ring ({} MB)",
                        format!("{fam:?}").to_lowercase(),
                        ring / 1_000_000
                    ),
                };
                push(build(model, profile, budget, Policy::Scheduler, f, &layout), &mut cands);
            }
        }
        // The baselines' layouts are in the search space too: the scheduler never loses to them.
        for b in [Policy::SyncJit, Policy::FullOffload, Policy::FlexGen] {
            if let Ok(mut l) = baseline_layout(model, budget, f, b) {
                l.label = format!("{} layout: {}", b.name(), l.label);
                push(build(model, profile, budget, Policy::Scheduler, f, &l), &mut cands);
            }
        }
    }
    let mut best: Option<(f64, u64, Plan)> = None;
    for p in cands {
        let Ok(r) = super::sim::simulate(&p, profile, super::sim::SEARCH_FORWARDS) else {
            continue;
        };
        let key = (r.forward_s, p.streamed_bytes());
        let better = match &best {
            None => true,
            Some((t, b, _)) => key.0 < *t * (1.0 - 1e-9) || (key.0 <= *t * (1.0 + 1e-9) && key.1 < *b),
        };
        if better {
            best = Some((key.0, key.1, p));
        }
    }
    match best {
        Some((_, _, p)) => Ok(p),
        None => Err(last_err.unwrap_or(OffloadError::DoesNotFit {
            needed: model.weight_bytes(),
            budget,
            policy: Policy::Scheduler.name(),
        })),
    }
}

/// Cyclic predecessors of item `j` among `n` items (in order) whose regions overlap: `(k, lag)`.
fn overlapping_preds(j: usize, regions: &[Region]) -> Vec<(usize, u32)> {
    let n = regions.len();
    let mut out = Vec::new();
    for d in 1..=n {
        let k = (j + n - d) % n;
        let lag = if k < j { 0 } else { 1 };
        if regions[k].overlaps(&regions[j]) {
            out.push((k, lag));
        }
    }
    out
}

fn build(
    model: &Model,
    profile: &DeviceProfile,
    budget: u64,
    policy: Policy,
    f: &Facts,
    layout: &Layout,
) -> Result<Plan, OffloadError> {
    let n_ops = model.ops.len();
    let tensors: Vec<PlanTensor> = model
        .tensors
        .iter()
        .enumerate()
        .map(|(t, ti)| {
            let s = if ti.access == Access::Dense && f.first[t].is_some() {
                layout.streamed.get(t).copied().unwrap_or(0).min(ti.bytes)
            } else {
                0
            };
            let r = if ti.access == Access::Dense && f.first[t].is_some() {
                ti.bytes - s
            } else {
                0
            };
            PlanTensor {
                name: ti.name.clone(),
                bytes: ti.bytes,
                access: ti.access,
                resident_bytes: r,
                streamed_bytes: s,
            }
        })
        .collect();
    // Resident set.
    let mut resident = Vec::new();
    let mut res_of = vec![None; tensors.len()];
    let mut off = 0u64;
    for &t in &f.dense {
        if tensors[t].resident_bytes > 0 {
            res_of[t] = Some(resident.len() as u32);
            resident.push(Resident {
                tensor: t as u32,
                offset: off,
                bytes: tensors[t].resident_bytes,
            });
            off = align(off.saturating_add(tensors[t].resident_bytes));
        }
    }
    let ring_base = off;
    // Chunks in consumption order.
    let mut chunks: Vec<Chunk> = Vec::new();
    let mut chunk_of = vec![None; tensors.len()];
    for &t in &f.dense {
        if tensors[t].streamed_bytes > 0 {
            chunk_of[t] = Some(chunks.len() as u32);
            chunks.push(Chunk {
                tensor: t as u32,
                tensor_offset: tensors[t].resident_bytes,
                bytes: tensors[t].streamed_bytes,
                dev_offset: 0,
                home: Home::Pinned,
                host_offset: None,
                first_reader: f.first[t].unwrap_or(0),
                last_reader: f.last[t].unwrap_or(0),
            });
        }
    }
    let ring_len = if chunks.is_empty() { 0 } else { align(layout.ring_len) };
    let ring_err = |what: String| OffloadError::RingTooSmall(what);
    // Slot assignment.
    match layout.alloc {
        Alloc::OpFifo => {
            let mut p = 0u64;
            let mut i = 0;
            while i < chunks.len() {
                let op = chunks[i].first_reader;
                let mut j = i;
                let mut total = 0u64;
                while j < chunks.len() && chunks[j].first_reader == op {
                    total = total.saturating_add(align(chunks[j].bytes));
                    j += 1;
                }
                if total > ring_len {
                    return Err(ring_err(format!(
                        "op {} streams {total} bytes, ring holds {ring_len}",
                        model.ops[op as usize].name
                    )));
                }
                if p.saturating_add(total) > ring_len {
                    p = 0;
                }
                for c in &mut chunks[i..j] {
                    c.dev_offset = ring_base + p;
                    p += align(c.bytes);
                }
                i = j;
            }
        }
        Alloc::LayerBuffers => {
            let half = ring_len / 2 / ALIGN * ALIGN;
            let mut groups: Vec<u32> = model.ops.iter().map(|o| o.group).collect();
            groups.dedup();
            let mut cur_group = None;
            let mut p = 0u64;
            let mut limit = 0u64;
            for c in &mut chunks {
                let g = model.ops[c.first_reader as usize].group;
                if cur_group != Some(g) {
                    let gp = groups.iter().position(|&x| x == g).unwrap_or(0) as u64;
                    p = (gp % 2) * half;
                    limit = p + half;
                    cur_group = Some(g);
                }
                if p.saturating_add(align(c.bytes)) > limit {
                    return Err(ring_err(format!(
                        "layer group {g} does not fit its layer buffer of {half} bytes"
                    )));
                }
                c.dev_offset = ring_base + p;
                p += align(c.bytes);
            }
        }
    }
    let arena = if chunks.is_empty() {
        ring_base
    } else {
        ring_base + ring_len
    };
    if arena > budget {
        return Err(OffloadError::DoesNotFit {
            needed: arena,
            budget,
            policy: policy.name(),
        });
    }
    // Homes: host copies (pinned, or the page cache) up to host RAM, the rest from disk.
    let mut host_used = 0u64;
    for c in &mut chunks {
        host_used = host_used.saturating_add(c.bytes);
        c.home = if host_used > profile.host_ram_bytes {
            Home::Disk
        } else if layout.pageable {
            Home::Pageable
        } else if profile.host_weights == HostWeights::PageCache {
            Home::PageCache
        } else {
            Home::Pinned
        };
    }
    // Disk and page-cache chunks share one double-buffered pinned staging ring.
    let staged: Vec<usize> = (0..chunks.len()).filter(|&i| chunks[i].home.is_staged()).collect();
    let max_staged = staged.iter().map(|&i| align(chunks[i].bytes)).max().unwrap_or(0);
    let host_staging = Region {
        base: 0,
        len: 2 * max_staged,
    };
    {
        let mut p = 0u64;
        for &i in &staged {
            let b = align(chunks[i].bytes);
            if p.saturating_add(b) > host_staging.len {
                p = 0;
            }
            chunks[i].host_offset = Some(p);
            p += b;
        }
    }
    // Dependencies from slot reuse, checked for deadlock freedom.
    let slots: Vec<Region> = chunks.iter().map(|c| c.slot()).collect();
    let mut dev_preds = Vec::with_capacity(chunks.len());
    for j in 0..chunks.len() {
        let preds = overlapping_preds(j, &slots);
        for &(k, lag) in &preds {
            if lag == 0 && chunks[k].last_reader >= chunks[j].first_reader {
                return Err(ring_err(format!(
                    "slot of {} is reused by {} while still needed",
                    tensors[chunks[k].tensor as usize].name, tensors[chunks[j].tensor as usize].name
                )));
            }
        }
        dev_preds.push(preds);
    }
    let host_slots: Vec<Region> = staged
        .iter()
        .map(|&i| Region {
            base: chunks[i].host_offset.unwrap_or(0),
            len: chunks[i].bytes,
        })
        .collect();
    // Events and programs.
    let mut events: Vec<EventKind> = Vec::new();
    let mut ev_ids: HashMap<EventKind, u32> = HashMap::new();
    let mut ev = |k: EventKind| -> u32 {
        *ev_ids.entry(k).or_insert_with(|| {
            events.push(k);
            (events.len() - 1) as u32
        })
    };
    let mut groups: Vec<u32> = model.ops.iter().map(|o| o.group).collect();
    groups.dedup();
    let last_op_of_group = |gp: usize| -> u32 {
        let g = groups[gp];
        model.ops.iter().rposition(|o| o.group == g).unwrap_or(0) as u32
    };
    let mut need_done = vec![false; n_ops];
    let mut h2d = Vec::new();
    for (j, c) in chunks.iter().enumerate() {
        let mut waits: Vec<(u32, u32)> = Vec::new();
        if c.home.is_staged() {
            waits.push((ev(EventKind::HostReady(j as u32)), 0));
        }
        for &(k, lag) in &dev_preds[j] {
            waits.push((ev(EventKind::SlotFree(k as u32)), lag));
        }
        match layout.mode {
            Mode::Async => {}
            Mode::SyncJit => {
                let (op, lag) = if c.first_reader > 0 {
                    (c.first_reader - 1, 0)
                } else {
                    ((n_ops - 1) as u32, 1)
                };
                need_done[op as usize] = true;
                waits.push((ev(EventKind::OpDone(op)), lag));
            }
            Mode::LayerBarrier => {
                let g = model.ops[c.first_reader as usize].group;
                let gp = groups.iter().position(|&x| x == g).unwrap_or(0) as i64;
                let mut p = gp - 2;
                let mut lag = 0u32;
                while p < 0 {
                    p += groups.len() as i64;
                    lag += 1;
                }
                let op = last_op_of_group(p as usize);
                need_done[op as usize] = true;
                waits.push((ev(EventKind::OpDone(op)), lag));
            }
        }
        let mut seen = Vec::new();
        for w in waits {
            if !seen.contains(&w) {
                seen.push(w);
                h2d.push(Instr::Wait { event: w.0, lag: w.1 });
            }
        }
        h2d.push(Instr::Copy { chunk: j as u32 });
        h2d.push(Instr::Record {
            event: ev(EventKind::Loaded(j as u32)),
        });
        if c.home.is_staged() {
            h2d.push(Instr::Record {
                event: ev(EventKind::HostFree(j as u32)),
            });
        }
    }
    // The disk thread fills the staging slots of disk chunks, the memcpy threads those of
    // page-cache chunks; both wait until the slot's previous chunk was copied out.
    let (mut io, mut memcpy) = (Vec::new(), Vec::new());
    for (d, &j) in staged.iter().enumerate() {
        let program = if chunks[j].home == Home::Disk {
            &mut io
        } else {
            &mut memcpy
        };
        for (k, lag) in overlapping_preds(d, &host_slots) {
            program.push(Instr::Wait {
                event: ev(EventKind::HostFree(staged[k] as u32)),
                lag,
            });
        }
        program.push(Instr::Read { chunk: j as u32 });
        program.push(Instr::Record {
            event: ev(EventKind::HostReady(j as u32)),
        });
    }
    let mut ops = Vec::with_capacity(n_ops);
    let mut compute = Vec::new();
    for (i, op) in model.ops.iter().enumerate() {
        let mut r = Vec::new();
        let mut cs = Vec::new();
        for &t in &op.reads {
            if let Some(x) = res_of[t]
                && !r.contains(&x)
            {
                r.push(x);
            }
            if let Some(x) = chunk_of[t]
                && !cs.contains(&x)
            {
                cs.push(x);
            }
        }
        for &c in &cs {
            compute.push(Instr::Wait {
                event: ev(EventKind::Loaded(c)),
                lag: 0,
            });
        }
        compute.push(Instr::Exec { op: i as u32 });
        for &c in &cs {
            if chunks[c as usize].last_reader == i as u32 {
                compute.push(Instr::Record {
                    event: ev(EventKind::SlotFree(c)),
                });
            }
        }
        if need_done[i] {
            compute.push(Instr::Record {
                event: ev(EventKind::OpDone(i as u32)),
            });
        }
        ops.push(PlanOp {
            name: op.name.clone(),
            group: op.group,
            seconds: f.op_seconds[i],
            resident: r,
            chunks: cs,
        });
    }
    let mut streams = vec![Stream {
        kind: StreamKind::Compute,
        program: compute,
    }];
    if !chunks.is_empty() {
        streams.push(Stream {
            kind: StreamKind::H2d,
            program: h2d,
        });
    }
    if !io.is_empty() {
        streams.push(Stream {
            kind: StreamKind::Io,
            program: io,
        });
    }
    if !memcpy.is_empty() {
        streams.push(Stream {
            kind: StreamKind::Memcpy,
            program: memcpy,
        });
    }
    Ok(Plan {
        profile_id: profile.id.clone(),
        model: model.name.clone(),
        tokens: model.tokens,
        policy,
        layout: layout.label.clone(),
        budget_bytes: budget,
        arena_bytes: arena,
        tensors,
        resident,
        ring: Region {
            base: ring_base,
            len: ring_len,
        },
        host_staging,
        chunks,
        ops,
        events,
        streams,
        period: true,
    })
}
