//! The offload scheduler against its bars (docs/specs/offload.md §6.5), in the simulator:
//!
//! * the grid: profiles {h100, pcie4} × {llama-7b, llama-13b} × budgets {2, 4, 8, 16} GB ×
//!   {decode, prefill 512, 2048, 8192}: the scheduler is never slower than any baseline, within
//!   1.05× of the floor `max(C, X/P, X_disk/D)` at decode and 1.10× at prefill, and every plan
//!   (baselines included) has zero hazard findings. `cargo test -p tensorlane-offload --test
//!   offload -- --nocapture grid` prints the table (set `OFFLOAD_GRID_MD=path` to also write it as Markdown);
//! * 10,000 random op graphs / budgets / profiles / policies: zero findings, no deadlock;
//! * deliberately broken plans: the checker names the rule, op and slot.

use proptest::prelude::*;
use tensorlane_offload::plan::{EventKind, Home, Instr, StreamKind};
use tensorlane_offload::{
    Access, Cost, DeviceProfile, HostWeights, Op, Phase, Plan, Policy, Rule, Workload, WorkloadTensor, check, compile,
    compile_policy, evaluate, simulate, simulate_traced,
};

const GB: u64 = 1_000_000_000;

fn phases() -> [Phase; 4] {
    [
        Phase::DECODE,
        Phase::Prefill { tokens: 512 },
        Phase::Prefill { tokens: 2048 },
        Phase::Prefill { tokens: 8192 },
    ]
}

#[test]
fn grid() {
    let mut md = String::new();
    md.push_str(
        "| profile | model | budget | phase | scheduler ms | floor ms | ratio | streamed GB | hidden / hideable | \
         all-resident | sync-jit | full-offload | flexgen-like | scheduler layout |\n",
    );
    md.push_str("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    let mut failures = Vec::new();
    let mut worst_decode: f64 = 0.0;
    let mut worst_prefill: f64 = 0.0;
    for profile in [DeviceProfile::h100(), DeviceProfile::pcie4()] {
        for name in ["llama-7b", "llama-13b"] {
            for b in [2u64, 4, 8, 16] {
                for phase in phases() {
                    let model = Workload::preset(name, phase).unwrap();
                    let budget = b * GB;
                    let cell = format!("{} {name} {b} GB {}", profile.id, phase.label());
                    let (_, s) = evaluate(&model, &profile, budget, Policy::Scheduler, 6).unwrap();
                    if !s.findings.is_empty() {
                        failures.push(format!("{cell}: scheduler findings {:?}", s.findings));
                    }
                    let bar = if matches!(phase, Phase::Decode { .. }) {
                        1.05
                    } else {
                        1.10
                    };
                    if matches!(phase, Phase::Decode { .. }) {
                        worst_decode = worst_decode.max(s.sim.ratio);
                    } else {
                        worst_prefill = worst_prefill.max(s.sim.ratio);
                    }
                    if s.sim.ratio > bar {
                        failures.push(format!("{cell}: ratio {:.4} > {bar}", s.sim.ratio));
                    }
                    let mut cols = Vec::new();
                    for p in Policy::BASELINES {
                        match evaluate(&model, &profile, budget, p, 6) {
                            Ok((_, e)) => {
                                if !e.findings.is_empty() {
                                    failures.push(format!("{cell}: {} findings {:?}", p.name(), e.findings));
                                }
                                if s.sim.forward_s > e.sim.forward_s * (1.0 + 1e-9) {
                                    failures.push(format!(
                                        "{cell}: scheduler {:.3} ms slower than {} {:.3} ms",
                                        s.sim.forward_s * 1e3,
                                        p.name(),
                                        e.sim.forward_s * 1e3
                                    ));
                                }
                                cols.push(format!(
                                    "{:.1} ({:.2}x)",
                                    e.sim.forward_s * 1e3,
                                    e.sim.forward_s / s.sim.forward_s
                                ));
                            }
                            Err(_) => cols.push("does not fit".into()),
                        }
                    }
                    md.push_str(&format!(
                        "| {} | {name} | {b} GB | {} | {:.1} | {:.1} | {:.3} | {:.2} | {:.2} / {:.2} | {} | {} |\n",
                        profile.id,
                        phase.label(),
                        s.sim.forward_s * 1e3,
                        s.sim.floor_s * 1e3,
                        s.sim.ratio,
                        s.streamed_bytes as f64 / 1e9,
                        s.sim.hidden_fraction,
                        s.sim.hideable,
                        cols.join(" | "),
                        s.layout
                    ));
                }
            }
        }
    }
    md.push_str(&format!(
        "\nworst scheduler ratio: decode {worst_decode:.4} (bar 1.05), prefill {worst_prefill:.4} (bar 1.10)\n"
    ));
    println!("{md}");
    if let Ok(path) = std::env::var("OFFLOAD_GRID_MD") {
        std::fs::write(path, &md).unwrap();
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn decode_bytes_streamed_near_w_minus_b() {
    // §6.5: decode at 4 GB streams within 2 % of W − B + 2·max_chunk (and never fewer than W − B).
    let profile = DeviceProfile::h100();
    let model = Workload::preset("llama-7b", Phase::DECODE).unwrap();
    let plan = compile(&model, &profile, 4 * GB).unwrap();
    let w = model.weight_bytes();
    let max_chunk = plan.chunks.iter().map(|c| c.bytes).max().unwrap();
    let x = plan.streamed_bytes();
    assert!(x >= w - 4 * GB);
    assert!(
        x as f64 <= (w - 4 * GB + 2 * max_chunk) as f64 * 1.02,
        "X {x} W {w} max chunk {max_chunk}"
    );
}

#[test]
fn plan_round_trips_through_json() {
    let profile = DeviceProfile::pcie4();
    let model = Workload::preset("tiny", Phase::Prefill { tokens: 64 }).unwrap();
    let plan = compile(&model, &profile, 8_000_000).unwrap();
    let back = Plan::from_json(&plan.to_json()).unwrap();
    assert_eq!(plan.chunks, back.chunks);
    assert_eq!(plan.resident, back.resident);
    assert_eq!(plan.streams, back.streams);
    assert_eq!(plan.events, back.events);
    assert!(check(&back).is_empty());
}

#[test]
fn all_resident_when_it_fits() {
    let profile = DeviceProfile::h100();
    let model = Workload::preset("llama-7b", Phase::DECODE).unwrap();
    let plan = compile(&model, &profile, 16 * GB).unwrap();
    assert!(plan.chunks.is_empty());
    let r = simulate(&plan, &profile, 6).unwrap();
    assert!((r.forward_s - r.compute_s).abs() < 1e-9);
    assert!(compile_policy(&model, &profile, 4 * GB, Policy::AllResident).is_err());
}

#[test]
fn disk_tier_plans_are_safe() {
    let mut profile = DeviceProfile::pcie4();
    profile.host_ram_bytes = 4 * GB;
    let model = Workload::preset("llama-7b", Phase::DECODE).unwrap();
    for policy in [Policy::Scheduler, Policy::SyncJit, Policy::FullOffload, Policy::FlexGen] {
        let (plan, e) = evaluate(&model, &profile, 4 * GB, policy, 6).unwrap();
        assert!(plan.disk_bytes() > 0);
        assert!(plan.streams.iter().any(|s| s.kind == StreamKind::Io));
        assert!(e.findings.is_empty(), "{policy:?}: {:?}", e.findings);
        assert!(e.sim.forward_s >= e.sim.floor_s * 0.999);
        assert!(e.sim.peak_bytes <= plan.arena_bytes);
    }
}

/// The simulated schedule as a trace: the same report as `simulate`; per forward one compute
/// span per op (their durations the ops' times), one copy span per chunk and one disk read per
/// disk chunk; each stream's spans in order without overlap; and `chrome_trace` lays them out
/// as complete events in microseconds on named tracks.
#[test]
fn simulated_schedule_as_a_trace() {
    let mut profile = DeviceProfile::pcie4();
    profile.host_ram_bytes = 4 * GB;
    let model = Workload::preset("llama-7b", Phase::DECODE).unwrap();
    let plan = compile_policy(&model, &profile, 4 * GB, Policy::Scheduler).unwrap();
    assert!(plan.disk_bytes() > 0);
    let (report, spans) = simulate_traced(&plan, &profile, 4).unwrap();
    assert_eq!(report, simulate(&plan, &profile, 4).unwrap());
    let disk_chunks = plan.chunks.iter().filter(|c| c.home == Home::Disk).count();
    for f in 0..report.forwards {
        let on = |track: &str| spans.iter().filter(|s| s.forward == f && s.track == track).collect::<Vec<_>>();
        let compute = on("compute");
        assert_eq!(compute.len(), plan.ops.len(), "forward {f}");
        let c: f64 = compute.iter().map(|s| s.end_s - s.start_s).sum();
        assert!((c - report.compute_s).abs() <= 1e-9 * report.compute_s.max(1.0), "forward {f}: {c} vs {}", report.compute_s);
        assert_eq!(on("h2d copies").len(), plan.chunks.len(), "forward {f}");
        assert_eq!(on("disk reads").len(), disk_chunks, "forward {f}");
    }
    for track in tensorlane_offload::sim::SIM_TRACKS {
        let mut on: Vec<_> = spans.iter().filter(|s| s.track == track).collect();
        on.sort_by(|a, b| a.start_s.total_cmp(&b.start_s));
        for w in on.windows(2) {
            assert!(w[0].end_s <= w[1].start_s + 1e-12, "{track}: {:?} overlaps {:?}", w[0], w[1]);
        }
    }
    let trace = tensorlane_offload::chrome_trace("llama-7b (simulated)", &tensorlane_offload::sim::SIM_TRACKS, &spans);
    let events = trace["traceEvents"].as_array().unwrap();
    let complete: Vec<_> = events.iter().filter(|e| e["ph"] == "X").collect();
    assert_eq!(complete.len(), spans.len());
    let names: Vec<_> = events
        .iter()
        .filter(|e| e["name"] == "thread_name")
        .map(|e| e["args"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, tensorlane_offload::sim::SIM_TRACKS);
    let last = spans.iter().map(|s| s.end_s).fold(0.0, f64::max);
    assert!(complete.iter().all(|e| e["ts"].as_f64().unwrap() >= 0.0 && e["ts"].as_f64().unwrap() <= last * 1e6 + 1e-3));
}

#[test]
fn page_cache_tier_is_staged_by_memcpy_threads() {
    // Weights warm in the page cache: every streamed chunk is staged into pinned memory by the
    // memcpy threads before its copy. With 2 threads (20 GB/s < P = 50 GB/s) the memcpy stage
    // is the bottleneck, and the floor says so: X_m/M.
    let mut profile = DeviceProfile::h100();
    profile.host_weights = HostWeights::PageCache;
    profile.memcpy_threads = 2;
    for phase in [Phase::DECODE, Phase::Prefill { tokens: 2048 }] {
        let model = Workload::preset("llama-7b", phase).unwrap();
        for policy in [Policy::Scheduler, Policy::FullOffload, Policy::FlexGen] {
            let (plan, e) = evaluate(&model, &profile, 4 * GB, policy, 6).unwrap();
            assert!(
                plan.chunks
                    .iter()
                    .all(|c| c.home == Home::PageCache && c.host_offset.is_some())
            );
            assert_eq!(plan.memcpy_bytes(), plan.streamed_bytes());
            assert!(plan.streams.iter().any(|s| s.kind == StreamKind::Memcpy));
            assert!(e.findings.is_empty(), "{policy:?}: {:?}", e.findings);
            assert_eq!(e.sim.memcpy_bytes, plan.streamed_bytes());
            let xm = plan.memcpy_bytes() as f64 / (profile.memcpy_total_gbps() * 1e9);
            assert!(
                e.sim.floor_s >= xm * 0.999,
                "{policy:?}: floor {} < X_m/M {xm}",
                e.sim.floor_s
            );
            assert!(e.sim.forward_s >= e.sim.floor_s * 0.999);
            if policy == Policy::Scheduler {
                let bar = if phase == Phase::DECODE { 1.05 } else { 1.10 };
                assert!(e.sim.ratio <= bar, "{phase:?}: ratio {} over {bar}", e.sim.ratio);
            }
        }
        // More threads than the link needs: the copy engine is the bottleneck again.
        let mut fast = profile.clone();
        fast.memcpy_threads = 8;
        let (_, e) = evaluate(&model, &fast, 4 * GB, Policy::Scheduler, 6).unwrap();
        let (_, pinned) = evaluate(&model, &DeviceProfile::h100(), 4 * GB, Policy::Scheduler, 6).unwrap();
        assert!((e.sim.floor_s - pinned.sim.floor_s).abs() < 1e-9);
    }
}

#[test]
fn zt_file_becomes_a_model() {
    use tensorlane::core::DType;
    use tensorlane::core::zt::writer::Options;
    use tensorlane::zt_write::ZtFile;
    let dir = std::env::temp_dir().join(format!("tl-offload-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("m.zt");
    let mut w = ZtFile::create(&path, Options::default()).unwrap();
    let names = [
        ("model.embed_tokens.weight", vec![64u64, 16]),
        ("model.layers.0.self_attn.q_proj.weight", vec![16, 16]),
        ("model.layers.0.mlp.down_proj.weight", vec![16, 32]),
        ("model.layers.1.self_attn.q_proj.weight", vec![16, 16]),
        ("model.layers.10.self_attn.q_proj.weight", vec![16, 16]),
        ("model.norm.weight", vec![16]),
        ("lm_head.weight", vec![64, 16]),
    ];
    let mut sorted = names.to_vec();
    sorted.sort_by(|a, b| a.0.cmp(b.0));
    for (n, shape) in &sorted {
        let elems: u64 = shape.iter().product();
        w.add(n, DType::F32, shape, &vec![0u8; elems as usize * 4]).unwrap();
    }
    w.finish().unwrap();
    let model = Workload::from_model(&tensorlane::model::Model::open(&path).unwrap(), Phase::DECODE);
    std::fs::remove_dir_all(&dir).ok();
    let order: Vec<&str> = model.ops.iter().map(|o| o.name.as_str()).collect();
    assert_eq!(
        order,
        [
            "model.embed_tokens.weight",
            "model.layers.0.self_attn.q_proj.weight",
            "model.layers.0.mlp.down_proj.weight",
            "model.layers.1.self_attn.q_proj.weight",
            "model.layers.10.self_attn.q_proj.weight",
            "model.norm.weight",
            "lm_head.weight",
        ]
    );
    assert_eq!(model.tensors.iter().filter(|t| t.access == Access::Gather).count(), 1);
    assert_eq!(model.weight_bytes(), (256 + 512 + 256 + 256 + 16 + 1024) * 4);
    let plan = compile(&model, &DeviceProfile::h100(), 4096).unwrap();
    assert!(check(&plan).is_empty());
    assert!(tensorlane::model::Model::open(std::path::Path::new("/nonexistent.zt")).is_err());
}

// ---- Negative tests: the checker catches broken plans. ----

fn streamed_plan() -> Plan {
    let profile = DeviceProfile::h100();
    let model = Workload::preset("tiny", Phase::DECODE).unwrap();
    let plan = compile_policy(&model, &profile, 8_000_000, Policy::FullOffload).unwrap();
    assert!(check(&plan).is_empty());
    assert!(plan.chunks.len() > 4);
    plan
}

fn stream_mut(plan: &mut Plan, kind: StreamKind) -> &mut Vec<Instr> {
    &mut plan.streams.iter_mut().find(|s| s.kind == kind).unwrap().program
}

#[test]
fn checker_catches_read_before_copy() {
    let mut plan = streamed_plan();
    // The compute stream no longer waits for chunk 3's copy.
    let loaded = plan.events.iter().position(|e| *e == EventKind::Loaded(3)).unwrap() as u32;
    stream_mut(&mut plan, StreamKind::Compute).retain(|i| *i != Instr::Wait { event: loaded, lag: 0 });
    let f = check(&plan);
    let hit = f.iter().find(|f| f.rule == Rule::ReadBeforeCopy).expect("finding");
    assert_eq!(hit.chunk, Some(3));
    let reader = plan.chunks[3].first_reader as usize;
    assert_eq!(hit.op.as_deref(), Some(plan.ops[reader].name.as_str()));
    assert_eq!(hit.slot, Some(plan.chunks[3].slot()));
}

#[test]
fn checker_catches_copy_after_read() {
    let mut plan = streamed_plan();
    // Move chunk 2's copy (and its record) to the end of the H2D program: the read now waits on
    // a later copy of the *previous* slot contents... and the checker sees the cycle or the hazard.
    let h2d = stream_mut(&mut plan, StreamKind::H2d);
    let at = h2d.iter().position(|i| *i == Instr::Copy { chunk: 2 }).unwrap();
    let copy = h2d.remove(at);
    h2d.push(copy);
    let f = check(&plan);
    assert!(
        f.iter().any(|f| matches!(
            f.rule,
            Rule::ReadBeforeCopy | Rule::OverwriteBeforeLastReader | Rule::Cycle
        )),
        "{f:?}"
    );
}

#[test]
fn checker_catches_overwrite_before_last_reader() {
    let mut plan = streamed_plan();
    // The H2D stream no longer waits for any slot to be freed.
    let free: Vec<u32> = plan
        .events
        .iter()
        .enumerate()
        .filter(|(_, e)| matches!(e, EventKind::SlotFree(_)))
        .map(|(i, _)| i as u32)
        .collect();
    stream_mut(&mut plan, StreamKind::H2d).retain(|i| !matches!(i, Instr::Wait { event, .. } if free.contains(event)));
    let f = check(&plan);
    let hit = f
        .iter()
        .find(|f| f.rule == Rule::OverwriteBeforeLastReader)
        .expect("finding");
    assert!(hit.op.is_some() && hit.slot.is_some() && hit.chunk.is_some());
}

#[test]
fn checker_catches_over_budget() {
    let mut plan = streamed_plan();
    plan.budget_bytes = plan.arena_bytes - 1;
    assert!(check(&plan).iter().any(|f| f.rule == Rule::OverBudget));
    let mut plan = streamed_plan();
    plan.chunks[1].dev_offset = plan.arena_bytes;
    assert!(check(&plan).iter().any(|f| f.rule == Rule::OutOfArena));
    let mut plan = streamed_plan();
    plan.resident[0].offset = plan.ring.base;
    assert!(check(&plan).iter().any(|f| f.rule == Rule::ResidentOverlap));
}

#[test]
fn checker_catches_deadlock_and_unmatched_waits() {
    let mut plan = streamed_plan();
    // The copy of chunk 0 waits for its own reader: a cycle.
    let done = plan.events.len() as u32;
    plan.events.push(EventKind::OpDone(plan.chunks[0].first_reader));
    let reader = plan.chunks[0].first_reader;
    let comp = stream_mut(&mut plan, StreamKind::Compute);
    let at = comp.iter().position(|i| *i == Instr::Exec { op: reader }).unwrap();
    comp.insert(at + 1, Instr::Record { event: done });
    stream_mut(&mut plan, StreamKind::H2d).insert(0, Instr::Wait { event: done, lag: 0 });
    assert!(check(&plan).iter().any(|f| f.rule == Rule::Cycle));
    assert!(simulate(&plan, &DeviceProfile::h100(), 4).is_err());
    let mut plan = streamed_plan();
    plan.events.push(EventKind::OpDone(0));
    let ev = plan.events.len() as u32 - 1;
    stream_mut(&mut plan, StreamKind::H2d).insert(0, Instr::Wait { event: ev, lag: 0 });
    assert!(check(&plan).iter().any(|f| f.rule == Rule::UnmatchedWait));
}

#[test]
fn checker_reasons_over_the_partial_order_not_one_timeline() {
    // Remove the slot-free wait between two chunks whose copy happens to finish late anyway in
    // the simulated timeline: the simulator shows nothing wrong, the checker still flags it.
    let mut plan = streamed_plan();
    let h2d = stream_mut(&mut plan, StreamKind::H2d);
    let first_wait = h2d
        .iter()
        .position(|i| matches!(i, Instr::Wait { lag: 0, .. }))
        .expect("a same-forward slot wait");
    h2d.remove(first_wait);
    assert!(simulate(&plan, &DeviceProfile::h100(), 4).is_ok());
    assert!(!check(&plan).is_empty());
}

// ---- Random plans: zero findings. ----

fn arb_profile() -> impl Strategy<Value = DeviceProfile> {
    (
        1.0f64..60.0,
        0.05f64..1.0,
        0.0f64..50.0,
        0.1f64..10.0,
        1.0f64..1000.0,
        10.0f64..4000.0,
        0u64..20_000,
        (1u32..8, any::<bool>()),
    )
        .prop_map(|(p, pg, lat, d, f, hbm, host, (threads, page_cache))| DeviceProfile {
            id: "random".into(),
            description: String::new(),
            h2d_pinned_gbps: p,
            h2d_pageable_gbps: p * pg, // pageable never beats pinned
            h2d_latency_us: lat,
            disk_gbps: d,
            disk_latency_us: lat * 3.0,
            memcpy_gbps: 10.0,
            memcpy_threads: threads,
            host_weights: if page_cache {
                HostWeights::PageCache
            } else {
                HostWeights::Pinned
            },
            compute_tflops: f,
            hbm_gbps: hbm,
            launch_us: 1.0,
            vram_bytes: 1 << 40,
            host_ram_bytes: host,
        })
}

#[derive(Debug, Clone)]
struct RandomCase {
    model: Workload,
    budget: u64,
    policy: Policy,
    profile: DeviceProfile,
}

fn arb_case() -> impl Strategy<Value = RandomCase> {
    let op = (
        prop::collection::vec(1u64..6000, 0..3),
        prop::option::of(0usize..8),
        0.0f64..2e-6,
        any::<bool>(),
        any::<bool>(),
    );
    (prop::collection::vec(op, 1..9), 0u64..40_000, 0usize..5, arb_profile()).prop_map(|(ops, budget, pol, profile)| {
        let mut tensors: Vec<WorkloadTensor> = Vec::new();
        let mut out = Vec::new();
        let mut group = 0u32;
        for (i, (sizes, shared, secs, new_group, gather)) in ops.into_iter().enumerate() {
            if new_group {
                group += 1;
            }
            let mut reads = Vec::new();
            for (j, b) in sizes.into_iter().enumerate() {
                tensors.push(WorkloadTensor {
                    name: format!("t{i}.{j}"),
                    bytes: b,
                    access: if gather && j == 0 {
                        Access::Gather
                    } else {
                        Access::Dense
                    },
                    // Split units: any byte, rows of a few bytes, rows that need not divide it.
                    row_bytes: [0, 1, 3, 64, 1000][(i + j) % 5],
                });
                reads.push(tensors.len() - 1);
            }
            // Sometimes read a tensor of an earlier op again (shared / tied weights).
            if let Some(s) = shared
                && s < tensors.len()
                && !reads.contains(&s)
            {
                reads.push(s);
            }
            out.push(Op {
                name: format!("op{i}"),
                group,
                reads,
                cost: if secs < 1e-6 {
                    Cost::explicit(secs)
                } else {
                    Cost::roofline(secs * 1e12, 1000.0)
                },
            });
        }
        RandomCase {
            model: Workload {
                name: "random".into(),
                tokens: 1,
                tensors,
                ops: out,
            },
            budget,
            policy: [
                Policy::Scheduler,
                Policy::AllResident,
                Policy::SyncJit,
                Policy::FullOffload,
                Policy::FlexGen,
            ][pol],
            profile,
        }
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 10_000, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn random_plans_have_no_hazards(case in arb_case()) {
        match compile_policy(&case.model, &case.profile, case.budget, case.policy) {
            Ok(plan) => {
                let findings = check(&plan);
                prop_assert!(findings.is_empty(), "{:?}", findings);
                prop_assert!(plan.arena_bytes <= case.budget);
                let r = simulate(&plan, &case.profile, 4);
                prop_assert!(r.is_ok(), "{:?}", r.err());
                let r = r.unwrap();
                prop_assert!(r.peak_bytes <= plan.arena_bytes);
                prop_assert!(r.forward_s + 1e-12 >= r.floor_s * (1.0 - 1e-9));
                for c in &plan.chunks {
                    prop_assert!(!c.home.is_staged() || c.host_offset.is_some());
                }
                // Resident parts are whole rows: a kernel never reads a row split in two.
                for (pt, wt) in plan.tensors.iter().zip(&case.model.tensors) {
                    if wt.row_bytes > 1 && pt.streamed_bytes > 0 {
                        prop_assert_eq!(pt.resident_bytes % wt.row_bytes, 0, "{}", pt.name);
                    }
                }
            }
            Err(e) => {
                // Only "does not fit" style refusals, never a broken plan.
                let s = e.to_string();
                prop_assert!(s.contains("needs at least") || s.contains("ring too small"), "{}", s);
            }
        }
    }
}
