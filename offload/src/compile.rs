//! The plan compiler: from a [`Workload`] and a [`DeviceProfile`] to a [`Plan`] under a VRAM
//! budget. A layout (how much of each tensor streams, the ring, the event discipline) is chosen
//! per policy; the scheduler searches candidate layouts and keeps the one the simulator finds
//! fastest. `build` then lays a layout out as a plan in named steps: split the tensors, place
//! the resident set, assign ring slots, pick each chunk's home, stage disk and page-cache chunks,
//! derive the slot-reuse dependencies and write the stream programs.

use std::collections::HashMap;

use crate::error::Error;
use crate::plan::{
    ALIGN, Chunk, EventKind, Home, Instr, MIN_STREAM_BYTES, Plan, PlanOp, PlanTensor, Policy, Region, Resident, Stream,
    StreamKind, ZERO_PERSIST_BYTES, align,
};
use crate::profile::{DeviceProfile, HostWeights};
use crate::sim::{SEARCH_FORWARDS, simulate};
use crate::workload::{Access, Workload};

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

/// Facts about the workload the compiler uses.
struct Facts {
    /// Dense tensors some op reads, in first-reader order.
    dense: Vec<usize>,
    first: Vec<Option<u32>>,
    last: Vec<Option<u32>>,
    op_seconds: Vec<f64>,
}

fn facts(workload: &Workload, profile: &DeviceProfile) -> Facts {
    let n = workload.tensors.len();
    let mut first = vec![None; n];
    let mut last = vec![None; n];
    for (i, op) in workload.ops.iter().enumerate() {
        for &t in &op.reads {
            if first[t].is_none() {
                first[t] = Some(i as u32);
            }
            last[t] = Some(i as u32);
        }
    }
    let mut dense: Vec<usize> = (0..n)
        .filter(|&t| first[t].is_some() && workload.tensors[t].access == Access::Dense)
        .collect();
    dense.sort_by_key(|&t| (first[t], t));
    Facts {
        dense,
        first,
        last,
        op_seconds: workload.ops.iter().map(|o| o.cost.seconds_on(profile)).collect(),
    }
}

/// Compiles the scheduler's plan: the best of its candidate layouts by simulated steady-state
/// time per forward.
pub fn compile(workload: &Workload, profile: &DeviceProfile, budget_bytes: u64) -> Result<Plan, Error> {
    compile_policy(workload, profile, budget_bytes, Policy::Scheduler)
}

/// Compiles the plan of one policy (the scheduler or a baseline).
pub fn compile_policy(
    workload: &Workload,
    profile: &DeviceProfile,
    budget_bytes: u64,
    policy: Policy,
) -> Result<Plan, Error> {
    workload.validate()?;
    profile.validate()?;
    let f = facts(workload, profile);
    match policy {
        Policy::Scheduler => scheduler(workload, profile, budget_bytes, &f),
        _ => {
            let layout = baseline_layout(workload, budget_bytes, &f, policy)?;
            build(workload, profile, budget_bytes, policy, &f, &layout)
        }
    }
}

/// Per-op FIFO unit: the largest sum of aligned chunk sizes first read by one op.
fn op_unit(workload: &Workload, f: &Facts, streamed: &[u64]) -> u64 {
    let mut per_op = vec![0u64; workload.ops.len()];
    for &t in &f.dense {
        if streamed[t] > 0
            && let Some(op) = f.first[t]
        {
            per_op[op as usize] = per_op[op as usize].saturating_add(align(streamed[t]));
        }
    }
    per_op.into_iter().max().unwrap_or(0)
}

/// `streamed` bytes of tensor `t` rounded up so that the resident prefix is a whole number of
/// its rows ([`WorkloadTensor::row_bytes`](crate::workload::WorkloadTensor::row_bytes)).
fn whole_rows(workload: &Workload, t: usize, streamed: u64) -> u64 {
    let ti = &workload.tensors[t];
    let streamed = streamed.min(ti.bytes);
    if ti.row_bytes <= 1 {
        return streamed;
    }
    let resident = (ti.bytes - streamed) / ti.row_bytes * ti.row_bytes;
    ti.bytes - resident
}

fn slack(workload: &Workload) -> u64 {
    ALIGN.saturating_mul(workload.tensors.len() as u64 + 2)
}

fn baseline_layout(workload: &Workload, budget: u64, f: &Facts, policy: Policy) -> Result<Layout, Error> {
    let n = workload.tensors.len();
    let w = |t: usize| workload.tensors[t].bytes;
    let total: u64 = f.dense.iter().map(|&t| w(t)).sum();
    let too_big = |needed: u64| Error::DoesNotFit {
        needed,
        budget,
        policy: policy.name(),
    };
    match policy {
        Policy::AllResident | Policy::Scheduler => {
            if total.saturating_add(slack(workload)) > budget {
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
            let l0 = op_unit(workload, f, &all);
            let room = budget.saturating_sub(l0).saturating_sub(slack(workload));
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
            let l = op_unit(workload, f, &streamed);
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
            let ring = budget.saturating_sub(res).saturating_sub(slack(workload)) / ALIGN * ALIGN;
            let need = op_unit(workload, f, &streamed);
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
                    streamed[t] = whole_rows(workload, t, w(t) - keep.min(w(t)));
                    let keep = w(t) - streamed[t];
                    res += align(keep);
                    if streamed[t] > 0
                        && let Some(op) = f.first[t]
                    {
                        *per_group.entry(workload.ops[op as usize].group).or_default() += align(streamed[t]);
                    }
                }
                let layer = per_group.values().copied().max().unwrap_or(0);
                (streamed, res, 2 * layer)
            };
            let fits = |frac: f64| {
                let (_, res, ring) = split(frac);
                res.saturating_add(ring).saturating_add(slack(workload)) <= budget
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
fn family_split(workload: &Workload, profile: &DeviceProfile, f: &Facts, fam: Family, room: u64) -> Option<Vec<u64>> {
    family_split_min(workload, profile, f, fam, room, MIN_STREAM_BYTES)
        .or_else(|| family_split_min(workload, profile, f, fam, room, 0))
}

fn family_split_min(
    workload: &Workload,
    profile: &DeviceProfile,
    f: &Facts,
    fam: Family,
    room: u64,
    min_stream: u64,
) -> Option<Vec<u64>> {
    let n = workload.tensors.len();
    let w = |t: usize| workload.tensors[t].bytes;
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
    for &t in &elig {
        streamed[t] = whole_rows(workload, t, streamed[t]);
    }
    Some(streamed)
}

fn scheduler(workload: &Workload, profile: &DeviceProfile, budget: u64, f: &Facts) -> Result<Plan, Error> {
    let mut cands: Vec<Plan> = Vec::new();
    let mut last_err = None;
    let mut push = |r: Result<Plan, Error>, cands: &mut Vec<Plan>| match r {
        Ok(p) => cands.push(p),
        Err(e) => last_err = Some(e),
    };
    if let Ok(l) = baseline_layout(workload, budget, f, Policy::AllResident) {
        push(build(workload, profile, budget, Policy::Scheduler, f, &l), &mut cands);
    }
    if cands.is_empty() {
        for fam in [Family::WaterFill, Family::Uniform, Family::Prefix] {
            for k in [1.0, 1.5, 2.0, 3.0, 4.0, 6.0, 8.0, 12.0, 16.0] {
                let mut ring = 0u64;
                let mut split = None;
                for _ in 0..5 {
                    let room = budget.saturating_sub(ring).saturating_sub(slack(workload));
                    let Some(s) = family_split(workload, profile, f, fam, room) else {
                        break;
                    };
                    let unit = op_unit(workload, f, &s);
                    let next = align((unit as f64 * k).ceil() as u64).max(unit);
                    let done = next <= ring;
                    split = Some(s);
                    if done {
                        break;
                    }
                    ring = next;
                }
                let Some(streamed) = split else { continue };
                let unit = op_unit(workload, f, &streamed);
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
                push(
                    build(workload, profile, budget, Policy::Scheduler, f, &layout),
                    &mut cands,
                );
            }
        }
        // The baselines' layouts are in the search space too: the scheduler never loses to them.
        for b in [Policy::SyncJit, Policy::FullOffload, Policy::FlexGen] {
            if let Ok(mut l) = baseline_layout(workload, budget, f, b) {
                l.label = format!("{} layout: {}", b.name(), l.label);
                push(build(workload, profile, budget, Policy::Scheduler, f, &l), &mut cands);
            }
        }
    }
    let mut best: Option<(f64, u64, Plan)> = None;
    for p in cands {
        let Ok(r) = simulate(&p, profile, SEARCH_FORWARDS) else {
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
        None => Err(last_err.unwrap_or(Error::DoesNotFit {
            needed: workload.weight_bytes(),
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

/// Lays `layout` out as a plan: each step below is one function.
fn build(
    workload: &Workload,
    profile: &DeviceProfile,
    budget: u64,
    policy: Policy,
    f: &Facts,
    layout: &Layout,
) -> Result<Plan, Error> {
    let tensors = split_tensors(workload, f, layout);
    let (resident, res_of, ring_base) = place_resident(f, &tensors);
    let (mut chunks, chunk_of) = chunks_in_order(f, &tensors);
    let ring_len = if chunks.is_empty() { 0 } else { align(layout.ring_len) };
    match layout.alloc {
        Alloc::OpFifo => assign_op_fifo(workload, &mut chunks, ring_base, ring_len)?,
        Alloc::LayerBuffers => assign_layer_buffers(workload, &mut chunks, ring_base, ring_len)?,
    }
    let arena = if chunks.is_empty() {
        ring_base
    } else {
        ring_base + ring_len
    };
    if arena > budget {
        return Err(Error::DoesNotFit {
            needed: arena,
            budget,
            policy: policy.name(),
        });
    }
    assign_homes(profile, layout, &mut chunks);
    let (staged, host_staging) = stage_on_host(&mut chunks);
    let dev_preds = slot_reuse_preds(&chunks, &tensors)?;
    let mut events = Events::default();
    let mut need_done = vec![false; workload.ops.len()];
    let h2d = h2d_program(workload, layout.mode, &chunks, &dev_preds, &mut events, &mut need_done);
    let (io, memcpy) = staging_programs(&chunks, &staged, &mut events);
    let (ops, compute) = compute_program(workload, f, &chunks, &res_of, &chunk_of, &need_done, &mut events);
    let streams = [
        (StreamKind::Compute, compute),
        (StreamKind::H2d, h2d),
        (StreamKind::Io, io),
        (StreamKind::Memcpy, memcpy),
    ]
    .into_iter()
    .filter(|(kind, program)| *kind == StreamKind::Compute || !program.is_empty())
    .map(|(kind, program)| Stream { kind, program })
    .collect();
    Ok(Plan {
        profile_id: profile.id.clone(),
        model: workload.name.clone(),
        tokens: workload.tokens,
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
        events: events.list,
        streams,
        period: true,
    })
}

/// Each tensor with its split: dense tensors some op reads stream `layout.streamed` bytes and
/// keep the rest resident; gathered and unread tensors do neither.
fn split_tensors(workload: &Workload, f: &Facts, layout: &Layout) -> Vec<PlanTensor> {
    workload
        .tensors
        .iter()
        .enumerate()
        .map(|(t, ti)| {
            let on_device = ti.access == Access::Dense && f.first[t].is_some();
            let s = if on_device {
                layout.streamed.get(t).copied().unwrap_or(0).min(ti.bytes)
            } else {
                0
            };
            PlanTensor {
                name: ti.name.clone(),
                bytes: ti.bytes,
                access: ti.access,
                resident_bytes: if on_device { ti.bytes - s } else { 0 },
                streamed_bytes: s,
            }
        })
        .collect()
}

/// The resident parts, packed from arena offset 0 in first-reader order: the parts, each
/// tensor's part index, and where the ring starts.
fn place_resident(f: &Facts, tensors: &[PlanTensor]) -> (Vec<Resident>, Vec<Option<u32>>, u64) {
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
    (resident, res_of, off)
}

/// The streamed parts in consumption (= copy) order, not yet placed, and each tensor's chunk
/// index.
fn chunks_in_order(f: &Facts, tensors: &[PlanTensor]) -> (Vec<Chunk>, Vec<Option<u32>>) {
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
    (chunks, chunk_of)
}

/// FIFO slots at op granularity: the chunks first read by one op are contiguous; they wrap to
/// the ring start when they would not fit before its end.
fn assign_op_fifo(workload: &Workload, chunks: &mut [Chunk], ring_base: u64, ring_len: u64) -> Result<(), Error> {
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
            return Err(Error::RingTooSmall(format!(
                "op {} streams {total} bytes, ring holds {ring_len}",
                workload.ops[op as usize].name
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
    Ok(())
}

/// Two layer buffers (halves of the ring), alternating by layer group.
fn assign_layer_buffers(workload: &Workload, chunks: &mut [Chunk], ring_base: u64, ring_len: u64) -> Result<(), Error> {
    let half = ring_len / 2 / ALIGN * ALIGN;
    let groups = groups(workload);
    let mut cur_group = None;
    let mut p = 0u64;
    let mut limit = 0u64;
    for c in chunks {
        let g = workload.ops[c.first_reader as usize].group;
        if cur_group != Some(g) {
            let gp = groups.iter().position(|&x| x == g).unwrap_or(0) as u64;
            p = (gp % 2) * half;
            limit = p + half;
            cur_group = Some(g);
        }
        if p.saturating_add(align(c.bytes)) > limit {
            return Err(Error::RingTooSmall(format!(
                "layer group {g} does not fit its layer buffer of {half} bytes"
            )));
        }
        c.dev_offset = ring_base + p;
        p += align(c.bytes);
    }
    Ok(())
}

/// The layer groups in op order, each once.
fn groups(workload: &Workload) -> Vec<u32> {
    let mut groups: Vec<u32> = workload.ops.iter().map(|o| o.group).collect();
    groups.dedup();
    groups
}

/// Where each chunk's bytes live: host copies (pinned, pageable or the page cache) up to host
/// RAM, the rest on disk.
fn assign_homes(profile: &DeviceProfile, layout: &Layout, chunks: &mut [Chunk]) {
    let mut host_used = 0u64;
    for c in chunks {
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
}

/// Disk and page-cache chunks share one double-buffered pinned staging ring: sets each one's
/// host offset; returns their indices and the staging region.
fn stage_on_host(chunks: &mut [Chunk]) -> (Vec<usize>, Region) {
    let staged: Vec<usize> = (0..chunks.len()).filter(|&i| chunks[i].home.is_staged()).collect();
    let max_staged = staged.iter().map(|&i| align(chunks[i].bytes)).max().unwrap_or(0);
    let host_staging = Region {
        base: 0,
        len: 2 * max_staged,
    };
    let mut p = 0u64;
    for &i in &staged {
        let b = align(chunks[i].bytes);
        if p.saturating_add(b) > host_staging.len {
            p = 0;
        }
        chunks[i].host_offset = Some(p);
        p += b;
    }
    (staged, host_staging)
}

/// For each chunk, the earlier chunks (cyclically, with their lag in forwards) whose device slot
/// it overwrites; refuses a layout that reuses a slot within a forward while it is still read.
fn slot_reuse_preds(chunks: &[Chunk], tensors: &[PlanTensor]) -> Result<Vec<Vec<(usize, u32)>>, Error> {
    let slots: Vec<Region> = chunks.iter().map(|c| c.slot()).collect();
    let mut dev_preds = Vec::with_capacity(chunks.len());
    for j in 0..chunks.len() {
        let preds = overlapping_preds(j, &slots);
        for &(k, lag) in &preds {
            if lag == 0 && chunks[k].last_reader >= chunks[j].first_reader {
                return Err(Error::RingTooSmall(format!(
                    "slot of {} is reused by {} while still needed",
                    tensors[chunks[k].tensor as usize].name, tensors[chunks[j].tensor as usize].name
                )));
            }
        }
        dev_preds.push(preds);
    }
    Ok(dev_preds)
}

/// The plan's events, each given an index when first used.
#[derive(Default)]
struct Events {
    list: Vec<EventKind>,
    ids: HashMap<EventKind, u32>,
}

impl Events {
    /// The index of event `k`, allocating it on first use.
    fn id(&mut self, k: EventKind) -> u32 {
        let list = &mut self.list;
        *self.ids.entry(k).or_insert_with(|| {
            list.push(k);
            (list.len() - 1) as u32
        })
    }
}

/// The copy engine's program: per chunk, wait for its host staging (if staged), for the slot's
/// previous occupants to be freed and for what the mode adds (the op before, or the layer two
/// back), then copy and record. Marks in `need_done` the ops whose completion is waited on.
fn h2d_program(
    workload: &Workload,
    mode: Mode,
    chunks: &[Chunk],
    dev_preds: &[Vec<(usize, u32)>],
    ev: &mut Events,
    need_done: &mut [bool],
) -> Vec<Instr> {
    let n_ops = workload.ops.len();
    let groups = groups(workload);
    let last_op_of_group = |gp: usize| -> u32 {
        let g = groups[gp];
        workload.ops.iter().rposition(|o| o.group == g).unwrap_or(0) as u32
    };
    let mut h2d = Vec::new();
    for (j, c) in chunks.iter().enumerate() {
        let mut waits: Vec<(u32, u32)> = Vec::new();
        if c.home.is_staged() {
            waits.push((ev.id(EventKind::HostReady(j as u32)), 0));
        }
        for &(k, lag) in &dev_preds[j] {
            waits.push((ev.id(EventKind::SlotFree(k as u32)), lag));
        }
        let done_wait = match mode {
            Mode::Async => None,
            Mode::SyncJit if c.first_reader > 0 => Some((c.first_reader - 1, 0)),
            Mode::SyncJit => Some(((n_ops - 1) as u32, 1)),
            Mode::LayerBarrier => {
                let g = workload.ops[c.first_reader as usize].group;
                let gp = groups.iter().position(|&x| x == g).unwrap_or(0) as i64;
                let mut p = gp - 2;
                let mut lag = 0u32;
                while p < 0 {
                    p += groups.len() as i64;
                    lag += 1;
                }
                Some((last_op_of_group(p as usize), lag))
            }
        };
        if let Some((op, lag)) = done_wait {
            need_done[op as usize] = true;
            waits.push((ev.id(EventKind::OpDone(op)), lag));
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
            event: ev.id(EventKind::Loaded(j as u32)),
        });
        if c.home.is_staged() {
            h2d.push(Instr::Record {
                event: ev.id(EventKind::HostFree(j as u32)),
            });
        }
    }
    h2d
}

/// The disk thread's and the memcpy threads' programs: each fills the staging slots of its
/// chunks (disk, page cache), waiting until the slot's previous chunk was copied out.
fn staging_programs(chunks: &[Chunk], staged: &[usize], ev: &mut Events) -> (Vec<Instr>, Vec<Instr>) {
    let host_slots: Vec<Region> = staged
        .iter()
        .map(|&i| Region {
            base: chunks[i].host_offset.unwrap_or(0),
            len: chunks[i].bytes,
        })
        .collect();
    let (mut io, mut memcpy) = (Vec::new(), Vec::new());
    for (d, &j) in staged.iter().enumerate() {
        let program = if chunks[j].home == Home::Disk {
            &mut io
        } else {
            &mut memcpy
        };
        for (k, lag) in overlapping_preds(d, &host_slots) {
            program.push(Instr::Wait {
                event: ev.id(EventKind::HostFree(staged[k] as u32)),
                lag,
            });
        }
        program.push(Instr::Read { chunk: j as u32 });
        program.push(Instr::Record {
            event: ev.id(EventKind::HostReady(j as u32)),
        });
    }
    (io, memcpy)
}

/// The planned ops and the compute stream's program: each op waits for its chunks, runs, frees
/// the slots it read last and records its completion where a copy waits on it.
fn compute_program(
    workload: &Workload,
    f: &Facts,
    chunks: &[Chunk],
    res_of: &[Option<u32>],
    chunk_of: &[Option<u32>],
    need_done: &[bool],
    ev: &mut Events,
) -> (Vec<PlanOp>, Vec<Instr>) {
    let mut ops = Vec::with_capacity(workload.ops.len());
    let mut compute = Vec::new();
    for (i, op) in workload.ops.iter().enumerate() {
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
                event: ev.id(EventKind::Loaded(c)),
                lag: 0,
            });
        }
        compute.push(Instr::Exec { op: i as u32 });
        for &c in &cs {
            if chunks[c as usize].last_reader == i as u32 {
                compute.push(Instr::Record {
                    event: ev.id(EventKind::SlotFree(c)),
                });
            }
        }
        if need_done[i] {
            compute.push(Instr::Record {
                event: ev.id(EventKind::OpDone(i as u32)),
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
    (ops, compute)
}
