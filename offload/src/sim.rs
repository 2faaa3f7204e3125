//! The discrete-event simulator: runs a [`Plan`] for K forwards on a [`DeviceProfile`]'s
//! resources — the disk queue (Io stream), the memcpy threads staging page-cache weights into
//! pinned memory (Memcpy stream, `bytes/M` with `M` the threads' aggregate rate), the
//! host-to-device copy engine (H2D stream, `α + bytes/P`, pageable copies at the pageable rate)
//! and the compute stream (each op's roofline
//! time). Each resource belongs to one stream and runs its instructions in order, so the timeline
//! is exact for the model (a max-plus system): an instruction starts when its stream is free and
//! every event it waits on has been recorded.

use serde::{Deserialize, Serialize};

use crate::error::Error;
use crate::plan::{Home, Instr, Plan, StreamKind};
use crate::profile::DeviceProfile;

/// Forwards simulated by default (the first is the cold one; the rest are steady state).
pub const DEFAULT_FORWARDS: usize = 6;
/// Forwards simulated per candidate during the scheduler's search.
pub const SEARCH_FORWARDS: usize = 4;

/// What a simulation reports.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SimReport {
    /// Forwards simulated.
    pub forwards: usize,
    /// Steady-state time per forward, seconds.
    pub forward_s: f64,
    /// The first (cold) forward, seconds.
    pub cold_s: f64,
    /// `C`: compute time per forward, seconds.
    pub compute_s: f64,
    /// `X`: bytes copied host → device per forward (counted by the simulator).
    pub h2d_bytes: u64,
    /// `X_disk`: bytes read from disk per forward.
    pub disk_bytes: u64,
    /// `X_m`: bytes staged from the page cache by the memcpy threads per forward.
    #[serde(default)]
    pub memcpy_bytes: u64,
    /// Copy-engine busy time per forward, seconds (`T_xfer`).
    pub xfer_s: f64,
    /// The floor `max(C, X/P, X_disk/D, X_m/M)`, seconds.
    pub floor_s: f64,
    /// `forward_s / floor_s`.
    pub ratio: f64,
    /// Hidden transfer fraction `1 − stall/T_xfer` (1 when nothing is copied).
    pub hidden_fraction: f64,
    /// The hideable maximum `min(1, C/T_xfer)`.
    pub hideable: f64,
    /// Peak arena bytes in use over the timeline (resident + live slots).
    pub peak_bytes: u64,
    /// Achieved host → device GB/s while copying (`X / T_xfer`).
    pub achieved_gbps: f64,
}

#[derive(Clone, Copy)]
struct Span {
    start: f64,
    end: f64,
}

/// One span of a simulated (or measured) schedule: what a stream did from `start_s` to `end_s`
/// (seconds from the first forward's start), for a Chrome/Perfetto trace ([`chrome_trace`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TraceSpan {
    /// The stream's track: `compute`, `h2d copies`, `disk reads`, `page-cache copies`.
    pub track: String,
    /// What ran: an op's name, or the tensor whose chunk was copied or read.
    pub name: String,
    /// Which forward (0 is the cold one).
    pub forward: usize,
    /// Start, seconds.
    pub start_s: f64,
    /// End, seconds.
    pub end_s: f64,
}

/// A trace in the Chrome trace-event format (`chrome://tracing`, <https://ui.perfetto.dev>): one
/// track (thread) per stream in the order given, named `process`; spans as complete events in
/// microseconds, each with its forward in `args`.
pub fn chrome_trace(process: &str, tracks: &[&str], spans: &[TraceSpan]) -> serde_json::Value {
    let mut names: Vec<&str> = tracks.to_vec();
    for sp in spans {
        if !names.contains(&sp.track.as_str()) {
            names.push(&sp.track);
        }
    }
    let tid = |t: &str| names.iter().position(|n| *n == t).unwrap_or(0) + 1;
    let mut events = vec![serde_json::json!({
        "ph": "M", "name": "process_name", "pid": 1, "tid": 0, "args": {"name": process},
    })];
    for (i, n) in names.iter().enumerate() {
        events.push(serde_json::json!({"ph": "M", "name": "thread_name", "pid": 1, "tid": i + 1, "args": {"name": n}}));
        events.push(serde_json::json!({"ph": "M", "name": "thread_sort_index", "pid": 1, "tid": i + 1, "args": {"sort_index": i}}));
    }
    for sp in spans {
        events.push(serde_json::json!({
            "ph": "X", "name": sp.name, "cat": sp.track, "pid": 1, "tid": tid(&sp.track),
            "ts": sp.start_s * 1e6, "dur": ((sp.end_s - sp.start_s) * 1e6).max(0.0),
            "args": {"forward": sp.forward},
        }));
    }
    serde_json::json!({"traceEvents": events, "displayTimeUnit": "ms"})
}

/// The simulator's tracks, in the order a trace shows them.
pub const SIM_TRACKS: [&str; 4] = ["compute", "h2d copies", "disk reads", "page-cache copies"];

/// Runs `plan` for `forwards` forwards (at least 3). Fails on a deadlock (a wait no record can
/// satisfy) or a plan whose indices are out of range.
pub fn simulate(plan: &Plan, profile: &DeviceProfile, forwards: usize) -> Result<SimReport, Error> {
    run(plan, profile, forwards, None)
}

/// [`simulate`], and every instruction's span on its stream (ops, copies, reads; a stream's
/// waits are the gaps between them): the predicted schedule, for [`chrome_trace`].
pub fn simulate_traced(plan: &Plan, profile: &DeviceProfile, forwards: usize) -> Result<(SimReport, Vec<TraceSpan>), Error> {
    let mut spans = Vec::new();
    let report = run(plan, profile, forwards, Some(&mut spans))?;
    Ok((report, spans))
}

fn run(plan: &Plan, profile: &DeviceProfile, forwards: usize, mut trace: Option<&mut Vec<TraceSpan>>) -> Result<SimReport, Error> {
    let k = forwards.max(3);
    let tensor_name = |c: &crate::plan::Chunk| plan.tensors.get(c.tensor as usize).map_or_else(String::new, |t| t.name.clone());
    let n_ev = plan.events.len();
    let bad = |what: &str| Error::InvalidPlan(what.to_string());
    // rec[event][forward]
    let mut rec: Vec<Vec<Option<f64>>> = vec![vec![None; k]; n_ev];
    let ns = plan.streams.len();
    let mut pos = vec![(0usize, 0usize); ns]; // (forward, index)
    let mut clock = vec![0.0f64; ns];
    let mut exec: Vec<Vec<Span>> = vec![Vec::new(); k];
    let mut copies: Vec<(usize, usize, Span)> = Vec::new(); // (forward, chunk, span)
    let mut copy_busy = vec![0.0f64; k];
    let mut chunk_end: Vec<Vec<f64>> = vec![vec![0.0; plan.chunks.len()]; k];
    loop {
        let mut progressed = false;
        let mut all_done = true;
        for s in 0..ns {
            let prog = &plan.streams[s].program;
            loop {
                let (it, idx) = pos[s];
                if it >= k || prog.is_empty() {
                    break;
                }
                let instr = prog[idx];
                match instr {
                    Instr::Wait { event, lag } => {
                        let e = event as usize;
                        if e >= n_ev {
                            return Err(bad("wait on an unknown event"));
                        }
                        if it >= lag as usize {
                            match rec[e][it - lag as usize] {
                                Some(t) => clock[s] = clock[s].max(t),
                                None => break,
                            }
                        }
                    }
                    Instr::Record { event } => {
                        let e = event as usize;
                        if e >= n_ev {
                            return Err(bad("record of an unknown event"));
                        }
                        rec[e][it] = Some(clock[s]);
                    }
                    Instr::Copy { chunk } => {
                        let c = plan
                            .chunks
                            .get(chunk as usize)
                            .ok_or_else(|| bad("copy of an unknown chunk"))?;
                        let d = profile.copy_seconds(c.bytes, c.home == Home::Pageable);
                        let sp = Span {
                            start: clock[s],
                            end: clock[s] + d,
                        };
                        copies.push((it, chunk as usize, sp));
                        copy_busy[it] += d;
                        clock[s] = sp.end;
                        if let Some(t) = trace.as_deref_mut() {
                            t.push(TraceSpan { track: SIM_TRACKS[1].into(), name: tensor_name(c), forward: it, start_s: sp.start, end_s: sp.end });
                        }
                    }
                    Instr::Read { chunk } => {
                        let c = plan
                            .chunks
                            .get(chunk as usize)
                            .ok_or_else(|| bad("read of an unknown chunk"))?;
                        let (d, track) = if c.home == Home::PageCache {
                            (profile.memcpy_seconds(c.bytes), SIM_TRACKS[3])
                        } else {
                            (profile.disk_seconds(c.bytes), SIM_TRACKS[2])
                        };
                        if let Some(t) = trace.as_deref_mut() {
                            t.push(TraceSpan { track: track.into(), name: tensor_name(c), forward: it, start_s: clock[s], end_s: clock[s] + d });
                        }
                        clock[s] += d;
                    }
                    Instr::Exec { op } => {
                        let o = plan.ops.get(op as usize).ok_or_else(|| bad("exec of an unknown op"))?;
                        let sp = Span {
                            start: clock[s],
                            end: clock[s] + o.seconds,
                        };
                        exec[it].push(sp);
                        if let Some(t) = trace.as_deref_mut() {
                            t.push(TraceSpan { track: SIM_TRACKS[0].into(), name: o.name.clone(), forward: it, start_s: sp.start, end_s: sp.end });
                        }
                        for &c in &o.chunks {
                            if let Some(e) = chunk_end[it].get_mut(c as usize) {
                                *e = e.max(sp.end);
                            }
                        }
                        clock[s] = sp.end;
                    }
                }
                progressed = true;
                pos[s] = if idx + 1 == prog.len() {
                    (it + 1, 0)
                } else {
                    (it, idx + 1)
                };
            }
            if pos[s].0 < k && !prog.is_empty() {
                all_done = false;
            }
        }
        if all_done {
            break;
        }
        if !progressed {
            let stuck: Vec<String> = (0..ns)
                .filter(|&s| pos[s].0 < k && !plan.streams[s].program.is_empty())
                .map(|s| {
                    format!(
                        "{:?} at forward {} instruction {}",
                        plan.streams[s].kind, pos[s].0, pos[s].1
                    )
                })
                .collect();
            return Err(Error::Deadlock(stuck.join("; ")));
        }
    }
    let compute_idx = plan.streams.iter().position(|s| s.kind == StreamKind::Compute);
    if compute_idx.is_none() {
        return Err(bad("no compute stream"));
    }
    let end_of = |it: usize| exec[it].last().map_or(0.0, |s| s.end);
    let cold = end_of(0);
    let m = k - 2;
    let forward = (end_of(k - 1) - end_of(1)) / m as f64;
    // Stalls on the compute stream over the steady forwards 2..k.
    let mut stall = 0.0;
    for (it, spans) in exec.iter().enumerate().take(k).skip(2) {
        let mut prev = end_of(it - 1);
        for sp in spans {
            stall += (sp.start - prev).max(0.0);
            prev = sp.end;
        }
    }
    let stall = stall / m as f64;
    let compute: f64 = plan.ops.iter().map(|o| o.seconds).sum();
    let xfer = copy_busy[k - 1];
    let h2d_bytes = plan.streamed_bytes();
    let disk_bytes = plan.disk_bytes();
    let memcpy_bytes = plan.memcpy_bytes();
    let floor = compute
        .max(h2d_bytes as f64 / (profile.h2d_pinned_gbps * 1e9))
        .max(disk_bytes as f64 / (profile.disk_gbps * 1e9))
        .max(memcpy_bytes as f64 / (profile.memcpy_total_gbps() * 1e9));
    let hidden = if xfer > 0.0 {
        (1.0 - stall / xfer).clamp(0.0, 1.0)
    } else {
        1.0
    };
    let hideable = if xfer > 0.0 { (compute / xfer).min(1.0) } else { 1.0 };
    // Peak memory: resident + slots live from copy start to last reader's end.
    let resident = plan.resident_bytes();
    let mut deltas: Vec<(f64, i128)> = Vec::with_capacity(copies.len() * 2);
    for &(it, c, sp) in &copies {
        let b = plan.chunks[c].bytes as i128;
        deltas.push((sp.start, b));
        deltas.push((chunk_end[it][c].max(sp.end), -b));
    }
    deltas.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    let mut cur: i128 = 0;
    let mut peak: i128 = 0;
    for (_, d) in deltas {
        cur += d;
        peak = peak.max(cur);
    }
    Ok(SimReport {
        forwards: k,
        forward_s: forward,
        cold_s: cold,
        compute_s: compute,
        h2d_bytes,
        disk_bytes,
        memcpy_bytes,
        xfer_s: xfer,
        floor_s: floor,
        ratio: if floor > 0.0 { forward / floor } else { 1.0 },
        hidden_fraction: hidden,
        hideable,
        peak_bytes: resident.saturating_add(peak.max(0) as u64),
        achieved_gbps: if xfer > 0.0 { h2d_bytes as f64 / xfer / 1e9 } else { 0.0 },
    })
}
