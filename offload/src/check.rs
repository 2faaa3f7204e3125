//! The hazard checker (offload.md §4): happens-before over streams and events, not one
//! simulated timeline. The program is unrolled over a few forwards; graph edges are program order
//! within each stream plus record → wait; vector clocks give happens-before. Then:
//!
//! * every read of a slot happens after the copy that fills it ([`Rule::ReadBeforeCopy`]);
//! * two slot lifetimes (copy → last reader) that share bytes are ordered: one's last reader
//!   happens before the other's copy ([`Rule::OverwriteBeforeLastReader`],
//!   [`Rule::OverlappingLifetimes`]) — so under *every* interleaving the events allow, live bytes
//!   never exceed the arena;
//! * offsets lie inside the ring and arena, the arena inside the budget, resident parts
//!   disjoint ([`Rule::OutOfArena`], [`Rule::OverBudget`], [`Rule::ResidentOverlap`]);
//! * every wait has exactly one record, and the graph has no cycle ([`Rule::UnmatchedWait`],
//!   [`Rule::DuplicateRecord`], [`Rule::Cycle`]).

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};

use crate::plan::{Instr, Plan, Region};

/// Which rule a finding breaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Rule {
    /// An index (tensor, chunk, op, event) out of range, or a chunk never copied.
    BadIndex,
    /// A read of a slot not ordered after the copy that fills it.
    ReadBeforeCopy,
    /// A slot overwritten (by a copy or disk read) before its last reader is done.
    OverwriteBeforeLastReader,
    /// Two writes to shared bytes with no order between them.
    OverlappingLifetimes,
    /// An offset outside the ring, the arena or the host staging region.
    OutOfArena,
    /// The arena exceeds the budget.
    OverBudget,
    /// Resident parts overlapping each other or the ring.
    ResidentOverlap,
    /// A wait on an event no instruction records.
    UnmatchedWait,
    /// An event recorded more than once per forward.
    DuplicateRecord,
    /// Waits form a cycle: the plan deadlocks.
    Cycle,
}

/// One hazard: which rule, where.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Finding {
    /// The rule broken.
    pub rule: Rule,
    /// The op involved (a reader), if any.
    pub op: Option<String>,
    /// The tensor involved, if any.
    pub tensor: Option<String>,
    /// The chunk involved (index into [`Plan::chunks`]), if any.
    pub chunk: Option<u32>,
    /// The slot (arena or host staging range) involved, if any.
    pub slot: Option<Region>,
    /// The forward (0-based, in the unrolled program) where it shows, if any.
    pub forward: Option<u32>,
    /// A sentence saying what is wrong.
    pub message: String,
}

impl std::fmt::Display for Finding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}: {}", self.rule, self.message)
    }
}

const MAX_FINDINGS: usize = 1000;

fn finding(rule: Rule, message: String) -> Finding {
    Finding {
        rule,
        op: None,
        tensor: None,
        chunk: None,
        slot: None,
        forward: None,
        message,
    }
}

/// One filled slot in one forward: its writer and readers (graph nodes).
struct Inst {
    space: u8,
    region: Region,
    chunk: u32,
    forward: u32,
    writer: usize,
    readers: Vec<(usize, Option<u32>)>,
}

/// Checks `plan`; an empty list means no hazard under any interleaving the events allow.
pub fn check(plan: &Plan) -> Vec<Finding> {
    let mut out = Vec::new();
    static_checks(plan, &mut out);
    if out.iter().any(|f| f.rule == Rule::BadIndex) {
        return out;
    }
    let (rec_at, max_lag) = record_sites(plan, &mut out);
    unmatched_waits(plan, &rec_at, &mut out);
    let graph = Graph::unroll(plan, &rec_at, max_lag);
    let order = match graph.topological_order() {
        Ok(order) => order,
        Err(v) => {
            let s = graph.stream_of[v];
            out.push(finding(
                Rule::Cycle,
                format!(
                    "waits form a cycle through {:?} stream instruction {} (the plan deadlocks)",
                    plan.streams[s].kind,
                    graph.pos_of[v] as usize % graph.lens[s].max(1)
                ),
            ));
            return out;
        }
    };
    let hb = graph.happens_before(&order);
    let insts = slot_instances(plan, &graph, &mut out);
    reads_after_fill(plan, &insts, &hb, &mut out);
    ordered_lifetimes(plan, &insts, &hb, &mut out);
    out
}

/// Where each event is recorded (stream, position), the largest wait lag, and a
/// [`Rule::DuplicateRecord`] finding for each event recorded twice per forward.
fn record_sites(plan: &Plan, out: &mut Vec<Finding>) -> (Vec<Option<(usize, usize)>>, u32) {
    let mut rec_at: Vec<Option<(usize, usize)>> = vec![None; plan.events.len()];
    let mut max_lag = 0u32;
    for (s, st) in plan.streams.iter().enumerate() {
        for (i, ins) in st.program.iter().enumerate() {
            match *ins {
                Instr::Record { event } => {
                    let e = event as usize;
                    if rec_at[e].is_some() {
                        out.push(finding(
                            Rule::DuplicateRecord,
                            format!("event {e} ({:?}) recorded more than once per forward", plan.events[e]),
                        ));
                    } else {
                        rec_at[e] = Some((s, i));
                    }
                }
                Instr::Wait { lag, .. } => max_lag = max_lag.max(lag),
                _ => {}
            }
        }
    }
    (rec_at, max_lag)
}

/// A [`Rule::UnmatchedWait`] finding for each wait on an event that nothing records.
fn unmatched_waits(plan: &Plan, rec_at: &[Option<(usize, usize)>], out: &mut Vec<Finding>) {
    for st in &plan.streams {
        for ins in &st.program {
            if let Instr::Wait { event, .. } = *ins
                && rec_at[event as usize].is_none()
            {
                out.push(finding(
                    Rule::UnmatchedWait,
                    format!(
                        "wait on event {event} ({:?}), which nothing records",
                        plan.events[event as usize]
                    ),
                ));
            }
        }
    }
}

/// The plan's programs unrolled over `k` forwards: one node per instruction instance; edges are
/// program order within each stream plus record → wait.
struct Graph {
    /// Forwards unrolled.
    k: usize,
    /// Program length of each stream.
    lens: Vec<usize>,
    /// First node of each stream (and the node count at the end).
    base: Vec<usize>,
    stream_of: Vec<usize>,
    /// Position of a node on its stream, over all forwards.
    pos_of: Vec<u32>,
    preds: Vec<Vec<usize>>,
}

impl Graph {
    fn unroll(plan: &Plan, rec_at: &[Option<(usize, usize)>], max_lag: u32) -> Graph {
        let k = (max_lag as usize + 2).clamp(3, 8);
        let ns = plan.streams.len();
        let lens: Vec<usize> = plan.streams.iter().map(|s| s.program.len()).collect();
        let mut base = vec![0usize; ns + 1];
        for s in 0..ns {
            base[s + 1] = base[s] + lens[s] * k;
        }
        let n = base[ns];
        let mut g = Graph {
            k,
            lens,
            base,
            stream_of: vec![0usize; n],
            pos_of: vec![0u32; n],
            preds: vec![Vec::new(); n],
        };
        for s in 0..ns {
            let len = g.lens[s];
            for it in 0..k {
                for i in 0..len {
                    let v = g.node(s, it, i);
                    g.stream_of[v] = s;
                    g.pos_of[v] = (it * len + i) as u32;
                    if it * len + i > 0 {
                        g.preds[v].push(v - 1);
                    }
                    if let Instr::Wait { event, lag } = plan.streams[s].program[i]
                        && it >= lag as usize
                        && let Some((rs, ri)) = rec_at[event as usize]
                    {
                        let p = g.node(rs, it - lag as usize, ri);
                        g.preds[v].push(p);
                    }
                }
            }
        }
        g
    }

    /// Node of instruction `i` of stream `s` in forward `it`.
    fn node(&self, s: usize, it: usize, i: usize) -> usize {
        self.base[s] + it * self.lens[s] + i
    }

    fn len(&self) -> usize {
        self.stream_of.len()
    }

    /// A topological order (Kahn), or a node on a cycle.
    fn topological_order(&self) -> Result<Vec<usize>, usize> {
        let n = self.len();
        let mut indeg: Vec<usize> = self.preds.iter().map(Vec::len).collect();
        let mut succ: Vec<Vec<usize>> = vec![Vec::new(); n];
        for (v, preds) in self.preds.iter().enumerate() {
            for &p in preds {
                succ[p].push(v);
            }
        }
        let mut q: VecDeque<usize> = (0..n).filter(|&v| indeg[v] == 0).collect();
        let mut order = Vec::with_capacity(n);
        while let Some(v) = q.pop_front() {
            order.push(v);
            for &w in &succ[v] {
                indeg[w] -= 1;
                if indeg[w] == 0 {
                    q.push_back(w);
                }
            }
        }
        if order.len() < n {
            return Err((0..n).find(|&v| indeg[v] > 0).unwrap_or(0));
        }
        Ok(order)
    }

    /// Happens-before by vector clocks over a topological `order`.
    fn happens_before(&self, order: &[usize]) -> HappensBefore<'_> {
        let ns = self.lens.len();
        // vc[v*ns + s] = 1 + the last position on stream s that happens before or is v.
        let mut vc = vec![0u32; self.len() * ns];
        for &v in order {
            let mut row = vec![0u32; ns];
            for &p in &self.preds[v] {
                for s in 0..ns {
                    row[s] = row[s].max(vc[p * ns + s]);
                }
            }
            row[self.stream_of[v]] = self.pos_of[v] + 1;
            vc[v * ns..(v + 1) * ns].copy_from_slice(&row);
        }
        HappensBefore { graph: self, vc, ns }
    }
}

/// Vector clocks of an unrolled [`Graph`].
struct HappensBefore<'a> {
    graph: &'a Graph,
    vc: Vec<u32>,
    ns: usize,
}

impl HappensBefore<'_> {
    /// Whether node `a` happens before node `b` under every interleaving.
    fn hb(&self, a: usize, b: usize) -> bool {
        a != b && self.vc[b * self.ns + self.graph.stream_of[a]] > self.graph.pos_of[a]
    }
}

/// The name of the tensor of chunk `c`, if it is in range.
fn tensor_name(plan: &Plan, c: u32) -> Option<String> {
    plan.tensors
        .get(plan.chunks[c as usize].tensor as usize)
        .map(|t| t.name.clone())
}

/// Every fill of a device slot (by its copy) and of a host staging slot (by its read) in every
/// unrolled forward, with the nodes that read it; a [`Rule::BadIndex`] finding for a chunk that
/// is read but never copied.
fn slot_instances(plan: &Plan, graph: &Graph, out: &mut Vec<Finding>) -> Vec<Inst> {
    // Where each chunk is copied / read from disk and each op executed.
    let mut copy_at = vec![None; plan.chunks.len()];
    let mut read_at = vec![None; plan.chunks.len()];
    let mut exec_at = vec![None; plan.ops.len()];
    for (s, st) in plan.streams.iter().enumerate() {
        for (i, ins) in st.program.iter().enumerate() {
            match *ins {
                Instr::Copy { chunk } => {
                    copy_at[chunk as usize].get_or_insert((s, i));
                }
                Instr::Read { chunk } => {
                    read_at[chunk as usize].get_or_insert((s, i));
                }
                Instr::Exec { op } => {
                    exec_at[op as usize].get_or_insert((s, i));
                }
                _ => {}
            }
        }
    }
    let mut readers_of: Vec<Vec<u32>> = vec![Vec::new(); plan.chunks.len()];
    for (i, op) in plan.ops.iter().enumerate() {
        for &c in &op.chunks {
            readers_of[c as usize].push(i as u32);
        }
    }
    let mut insts: Vec<Inst> = Vec::new();
    for (c, ch) in plan.chunks.iter().enumerate() {
        let Some((cs, ci)) = copy_at[c] else {
            if !readers_of[c].is_empty() {
                out.push(Finding {
                    chunk: Some(c as u32),
                    tensor: tensor_name(plan, c as u32),
                    ..finding(Rule::BadIndex, format!("chunk {c} is read but never copied"))
                });
            }
            continue;
        };
        for it in 0..graph.k {
            let writer = graph.node(cs, it, ci);
            let mut readers = Vec::new();
            for &op in &readers_of[c] {
                if let Some((es, ei)) = exec_at[op as usize] {
                    readers.push((graph.node(es, it, ei), Some(op)));
                }
            }
            insts.push(Inst {
                space: 0,
                region: ch.slot(),
                chunk: c as u32,
                forward: it as u32,
                writer,
                readers,
            });
            if let (Some((rs, ri)), Some(h)) = (read_at[c], ch.host_offset) {
                insts.push(Inst {
                    space: 1,
                    region: Region { base: h, len: ch.bytes },
                    chunk: c as u32,
                    forward: it as u32,
                    writer: graph.node(rs, it, ri),
                    readers: vec![(writer, None)],
                });
            }
        }
    }
    insts
}

/// Rule 1: every read of a slot happens after the fill ([`Rule::ReadBeforeCopy`]).
fn reads_after_fill(plan: &Plan, insts: &[Inst], hb: &HappensBefore<'_>, out: &mut Vec<Finding>) {
    for inst in insts {
        for &(r, op) in &inst.readers {
            if !hb.hb(inst.writer, r) && out.len() < MAX_FINDINGS {
                out.push(Finding {
                    rule: Rule::ReadBeforeCopy,
                    op: op.and_then(|o| plan.ops.get(o as usize)).map(|o| o.name.clone()),
                    tensor: tensor_name(plan, inst.chunk),
                    chunk: Some(inst.chunk),
                    slot: Some(inst.region),
                    forward: Some(inst.forward),
                    message: format!(
                        "{} slot [{}, {}) may be read before its {} completes (forward {})",
                        if inst.space == 0 { "device" } else { "host staging" },
                        inst.region.base,
                        inst.region.end(),
                        if inst.space == 0 { "copy" } else { "disk read" },
                        inst.forward
                    ),
                });
            }
        }
    }
}

/// Rule 2: fills that share bytes are ordered, and the earlier one's readers are done before the
/// later fill ([`Rule::OverlappingLifetimes`], [`Rule::OverwriteBeforeLastReader`]).
fn ordered_lifetimes(plan: &Plan, insts: &[Inst], hb: &HappensBefore<'_>, out: &mut Vec<Finding>) {
    let mut idx: Vec<usize> = (0..insts.len()).collect();
    idx.sort_by_key(|&i| (insts[i].space, insts[i].region.base));
    let mut active: Vec<usize> = Vec::new();
    for &b in &idx {
        active.retain(|&a| insts[a].space == insts[b].space && insts[a].region.end() > insts[b].region.base);
        for &a in &active {
            if out.len() >= MAX_FINDINGS {
                return;
            }
            if !insts[a].region.overlaps(&insts[b].region) {
                continue;
            }
            let (x, y) = (&insts[a], &insts[b]);
            let (first, second) = if hb.hb(x.writer, y.writer) {
                (x, y)
            } else if hb.hb(y.writer, x.writer) {
                (y, x)
            } else {
                out.push(Finding {
                    rule: Rule::OverlappingLifetimes,
                    op: None,
                    tensor: tensor_name(plan, y.chunk),
                    chunk: Some(y.chunk),
                    slot: Some(y.region),
                    forward: Some(y.forward),
                    message: format!(
                        "fills of chunk {} (forward {}) and chunk {} (forward {}) share bytes with no order between them",
                        x.chunk, x.forward, y.chunk, y.forward
                    ),
                });
                continue;
            };
            for &(r, op) in &first.readers {
                if !hb.hb(r, second.writer) {
                    out.push(Finding {
                        rule: Rule::OverwriteBeforeLastReader,
                        op: op.and_then(|o| plan.ops.get(o as usize)).map(|o| o.name.clone()),
                        tensor: tensor_name(plan, first.chunk),
                        chunk: Some(first.chunk),
                        slot: Some(first.region),
                        forward: Some(first.forward),
                        message: format!(
                            "chunk {} (forward {}) may overwrite bytes of chunk {} (forward {}) before its reader is done",
                            second.chunk, second.forward, first.chunk, first.forward
                        ),
                    });
                }
            }
        }
        active.push(b);
    }
}

fn static_checks(plan: &Plan, out: &mut Vec<Finding>) {
    let bad = |m: String| finding(Rule::BadIndex, m);
    for (i, c) in plan.chunks.iter().enumerate() {
        if c.tensor as usize >= plan.tensors.len() {
            out.push(bad(format!("chunk {i} names tensor {}", c.tensor)));
        }
    }
    for r in &plan.resident {
        if r.tensor as usize >= plan.tensors.len() {
            out.push(bad(format!("resident part names tensor {}", r.tensor)));
        }
    }
    for op in &plan.ops {
        for &c in &op.chunks {
            if c as usize >= plan.chunks.len() {
                out.push(bad(format!("op {} reads chunk {c}", op.name)));
            }
        }
        for &r in &op.resident {
            if r as usize >= plan.resident.len() {
                out.push(bad(format!("op {} reads resident part {r}", op.name)));
            }
        }
    }
    for st in &plan.streams {
        for ins in &st.program {
            let ok = match *ins {
                Instr::Wait { event, .. } | Instr::Record { event } => (event as usize) < plan.events.len(),
                Instr::Copy { chunk } | Instr::Read { chunk } => (chunk as usize) < plan.chunks.len(),
                Instr::Exec { op } => (op as usize) < plan.ops.len(),
            };
            if !ok {
                out.push(bad(format!("{:?} stream: {ins:?} is out of range", st.kind)));
            }
        }
    }
    if !out.is_empty() {
        return;
    }
    if plan.arena_bytes > plan.budget_bytes {
        out.push(finding(
            Rule::OverBudget,
            format!(
                "arena {} bytes exceeds the budget of {} bytes",
                plan.arena_bytes, plan.budget_bytes
            ),
        ));
    }
    let arena = Region {
        base: 0,
        len: plan.arena_bytes,
    };
    let inside = |r: &Region, outer: &Region| r.len == 0 || (r.base >= outer.base && r.end() <= outer.end());
    if !plan.chunks.is_empty() && !inside(&plan.ring, &arena) {
        out.push(Finding {
            slot: Some(plan.ring),
            ..finding(Rule::OutOfArena, "the ring lies outside the arena".into())
        });
    }
    for (i, r) in plan.resident.iter().enumerate() {
        let reg = Region {
            base: r.offset,
            len: r.bytes,
        };
        let name = plan.tensors[r.tensor as usize].name.clone();
        if !inside(&reg, &arena) {
            out.push(Finding {
                tensor: Some(name.clone()),
                slot: Some(reg),
                ..finding(
                    Rule::OutOfArena,
                    format!("resident part of {name} lies outside the arena"),
                )
            });
        }
        if !plan.chunks.is_empty() && reg.overlaps(&plan.ring) {
            out.push(Finding {
                tensor: Some(name.clone()),
                slot: Some(reg),
                ..finding(
                    Rule::ResidentOverlap,
                    format!("resident part of {name} overlaps the ring"),
                )
            });
        }
        for o in &plan.resident[i + 1..] {
            let oreg = Region {
                base: o.offset,
                len: o.bytes,
            };
            if reg.overlaps(&oreg) {
                out.push(Finding {
                    tensor: Some(name.clone()),
                    slot: Some(reg),
                    ..finding(
                        Rule::ResidentOverlap,
                        format!(
                            "resident parts of {name} and {} overlap",
                            plan.tensors[o.tensor as usize].name
                        ),
                    )
                });
            }
        }
    }
    for (i, c) in plan.chunks.iter().enumerate() {
        if !inside(&c.slot(), &plan.ring) || !inside(&c.slot(), &arena) {
            out.push(Finding {
                chunk: Some(i as u32),
                tensor: Some(plan.tensors[c.tensor as usize].name.clone()),
                slot: Some(c.slot()),
                ..finding(
                    Rule::OutOfArena,
                    format!("slot of chunk {i} lies outside the ring or arena"),
                )
            });
        }
        if let Some(h) = c.host_offset {
            let r = Region { base: h, len: c.bytes };
            if !inside(&r, &plan.host_staging) {
                out.push(Finding {
                    chunk: Some(i as u32),
                    slot: Some(r),
                    ..finding(
                        Rule::OutOfArena,
                        format!("host staging slot of chunk {i} lies outside staging"),
                    )
                });
            }
        }
    }
}
