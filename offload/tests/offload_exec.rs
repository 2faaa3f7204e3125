//! The offload executors run plans for real (docs/specs/offload.md §3.5, §4.4–4.5): the CPU
//! executor moves the tiny model's weight bytes through a host "VRAM" arena exactly as each plan
//! says (resident offsets, ring slots, waits and records) and its output equals the all-resident
//! reference bit for bit, for the scheduler and every baseline, at budgets that force streaming.
//! Broken plans (a removed wait, a shifted slot) give a different output or an error.

use tensorlane_offload::exec::{CpuBackend, ExecModel, ExecOptions, bit_equal, execute};
use tensorlane_offload::plan::{EventKind, Home, Instr, StreamKind};
use tensorlane_offload::{DeviceProfile, Error, Plan, Policy, check, compile_policy, simulate};

const MB: u64 = 1_000_000;

fn policies() -> [Policy; 5] {
    [
        Policy::Scheduler,
        Policy::AllResident,
        Policy::SyncJit,
        Policy::FullOffload,
        Policy::FlexGen,
    ]
}

fn plan_for(m: &ExecModel, budget: u64, p: Policy) -> Option<Plan> {
    match compile_policy(&m.workload, &DeviceProfile::h100(), budget, p) {
        Ok(plan) => Some(plan),
        Err(Error::DoesNotFit { .. }) | Err(Error::RingTooSmall(_)) => None,
        Err(e) => panic!("{}: {e}", p.name()),
    }
}

#[test]
fn every_policy_matches_the_resident_reference_while_streaming() {
    let m = ExecModel::tiny(7).unwrap();
    let reference = m.reference();
    assert!(reference.iter().all(|v| v.is_finite()) && reference.iter().any(|v| *v != 0.0));
    let w = m.dense_bytes();
    let profile = DeviceProfile::h100();
    let mut streamed_per_policy = std::collections::HashMap::new();
    for budget in [14 * MB, 26 * MB, 40 * MB] {
        for p in policies() {
            let Some(plan) = plan_for(&m, budget, p) else { continue };
            assert!(check(&plan).is_empty(), "{} at {budget}: hazards", p.name());
            let rep = execute(
                &plan,
                &m,
                &mut CpuBackend::new(),
                ExecOptions {
                    forwards: 2,
                    poison: true,
                    copies_first: true,
                },
            )
            .unwrap_or_else(|e| panic!("{} at {budget}: {e}", p.name()));
            assert_eq!(rep.outputs.len(), 2);
            for (f, out) in rep.outputs.iter().enumerate() {
                assert!(
                    bit_equal(out, &reference),
                    "{} at {budget} B, forward {f}: output differs",
                    p.name()
                );
            }
            // Bytes counted by the executor = the plan's = the simulator's.
            let sim = simulate(&plan, &profile, 3).unwrap();
            for f in 0..2 {
                assert_eq!(rep.h2d_bytes[f], plan.streamed_bytes(), "{} forward {f}", p.name());
            }
            assert_eq!(
                rep.h2d_bytes[1],
                sim.h2d_bytes,
                "{}: executor vs simulator bytes",
                p.name()
            );
            assert_eq!(rep.resident_load_bytes, plan.resident_bytes());
            if plan.streamed_bytes() > 0 && budget < w {
                *streamed_per_policy.entry(p.name()).or_insert(0) += 1;
            }
            eprintln!(
                "{:>13} budget {:>9} arena {:>9} streamed/fwd {:>9} copies {:>3}: exact",
                p.name(),
                budget,
                plan.arena_bytes,
                rep.h2d_bytes[1],
                rep.copies[1]
            );
        }
    }
    for p in [Policy::Scheduler, Policy::SyncJit, Policy::FullOffload, Policy::FlexGen] {
        assert!(
            streamed_per_policy.get(p.name()).copied().unwrap_or(0) > 0,
            "{} never ran with a budget that forces streaming",
            p.name()
        );
    }
}

fn tiny_streaming_plan(p: Policy) -> (ExecModel, Plan) {
    let m = ExecModel::tiny(3).unwrap();
    for budget in [8 * MB, 14 * MB, 20 * MB] {
        if let Some(plan) = plan_for(&m, budget, p)
            && plan.streamed_bytes() > 0
        {
            return (m, plan);
        }
    }
    panic!("no streaming plan for {}", p.name());
}

fn run(m: &ExecModel, plan: &Plan) -> Result<Vec<Vec<f32>>, Error> {
    execute(
        plan,
        m,
        &mut CpuBackend::new(),
        ExecOptions {
            forwards: 2,
            poison: true,
            copies_first: true,
        },
    )
    .map(|r| r.outputs)
}

fn differs(m: &ExecModel, plan: &Plan) -> bool {
    let reference = m.reference();
    match run(m, plan) {
        Ok(outs) => outs.iter().any(|o| !bit_equal(o, &reference)),
        Err(_) => true,
    }
}

#[test]
fn removing_slot_free_waits_changes_the_output() {
    for p in [Policy::Scheduler, Policy::FullOffload] {
        let (m, mut plan) = tiny_streaming_plan(p);
        assert!(!differs(&m, &plan), "{}: the intact plan must match", p.name());
        let h2d = plan.streams.iter().position(|s| s.kind == StreamKind::H2d).unwrap();
        let events = plan.events.clone();
        let before = plan.streams[h2d].program.len();
        plan.streams[h2d].program.retain(
            |i| !matches!(i, Instr::Wait { event, .. } if matches!(events[*event as usize], EventKind::SlotFree(_))),
        );
        assert!(
            plan.streams[h2d].program.len() < before,
            "{}: no SlotFree waits to remove",
            p.name()
        );
        assert!(!check(&plan).is_empty(), "the checker flags it too");
        assert!(
            differs(&m, &plan),
            "{}: copies overwrote live slots, yet the output is unchanged",
            p.name()
        );
    }
}

#[test]
fn page_cache_and_disk_staging_match_the_reference() {
    // Chunks staged through pinned host slots (by the memcpy threads or the disk thread) reach
    // the device intact, with staging slots reused under their HostFree waits.
    let m = ExecModel::tiny(3).unwrap();
    let mut profile = DeviceProfile::h100();
    profile.host_weights = tensorlane_offload::HostWeights::PageCache;
    for (host_ram, policy) in [(u64::MAX, Policy::Scheduler), (4 * MB, Policy::FullOffload)] {
        profile.host_ram_bytes = host_ram;
        let plan = compile_policy(&m.workload, &profile, 14 * MB, policy).unwrap();
        let homes: Vec<Home> = plan.chunks.iter().map(|c| c.home).collect();
        assert!(
            homes.contains(&Home::PageCache) && homes.iter().all(|h| h.is_staged()),
            "{homes:?}"
        );
        assert_eq!(homes.contains(&Home::Disk), host_ram < u64::MAX, "{homes:?}");
        assert!(check(&plan).is_empty());
        assert!(
            !differs(&m, &plan),
            "host_ram {host_ram}: staged plan differs from the reference"
        );
        // Without their HostFree waits the staging threads overwrite slots not yet copied out.
        let mut broken = plan.clone();
        for s in &mut broken.streams {
            if matches!(s.kind, StreamKind::Memcpy | StreamKind::Io) {
                s.program.retain(|i| !matches!(i, Instr::Wait { .. }));
            }
        }
        assert!(!check(&broken).is_empty());
        assert!(
            differs(&m, &broken),
            "host_ram {host_ram}: staging overwrites went unnoticed"
        );
    }
}

#[test]
fn removing_a_loaded_wait_changes_the_output() {
    let (m, mut plan) = tiny_streaming_plan(Policy::Scheduler);
    let late = ExecOptions {
        forwards: 2,
        poison: true,
        copies_first: false,
    };
    let reference = m.reference();
    let ok = execute(&plan, &m, &mut CpuBackend::new(), late).unwrap();
    assert!(
        ok.outputs.iter().all(|o| bit_equal(o, &reference)),
        "compute-first order must match too"
    );
    let comp = plan.streams.iter().position(|s| s.kind == StreamKind::Compute).unwrap();
    let events = plan.events.clone();
    plan.streams[comp]
        .program
        .retain(|i| !matches!(i, Instr::Wait { event, .. } if matches!(events[*event as usize], EventKind::Loaded(_))));
    // Compute runs before the copies it no longer waits for: it reads unwritten (NaN) slots.
    let broken = execute(&plan, &m, &mut CpuBackend::new(), late);
    assert!(
        broken
            .map(|r| r.outputs.iter().any(|o| !bit_equal(o, &reference)))
            .unwrap_or(true)
    );
}

#[test]
fn a_shifted_slot_changes_the_output() {
    let (m, mut plan) = tiny_streaming_plan(Policy::Scheduler);
    let n = plan.chunks.len();
    assert!(n >= 1);
    // Move a chunk onto another's slot: whichever copy lands last wins, the other tensor reads it.
    if n >= 2 {
        plan.chunks[n - 1].dev_offset = plan.chunks[n - 2].dev_offset;
    } else {
        plan.chunks[0].dev_offset = plan.resident.first().map(|r| r.offset).unwrap_or(0);
    }
    assert!(differs(&m, &plan), "a shifted slot did not change the output");
}

#[test]
fn malformed_plans_are_errors_not_panics() {
    let (m, plan) = tiny_streaming_plan(Policy::Scheduler);
    let mut p = plan.clone();
    p.chunks[0].dev_offset = u64::MAX - 3;
    assert!(run(&m, &p).is_err());
    let mut p = plan.clone();
    p.chunks[0].bytes += 4;
    assert!(run(&m, &p).is_err());
    let mut p = plan.clone();
    p.streams[0].program.push(Instr::Exec { op: u32::MAX });
    assert!(run(&m, &p).is_err());
    let mut p = plan.clone();
    p.streams[0].program.insert(0, Instr::Wait { event: 0, lag: 0 });
    p.streams
        .iter_mut()
        .for_each(|s| s.program.retain(|i| !matches!(i, Instr::Record { event: 0 })));
    let stuck = run(&m, &p);
    assert!(matches!(stuck, Err(Error::Deadlock(_))), "{stuck:?}");
    let other = ExecModel::synthetic(
        "other",
        &tensorlane_offload::LlamaShape {
            layers: 2,
            ..tensorlane_offload::LlamaShape::tiny()
        },
        tensorlane_offload::Phase::DECODE,
        1,
    )
    .unwrap();
    assert!(run(&other, &plan).is_err());
}

/// CUDA executor: builds with `--features cuda`; without a driver it is a clean error (set
/// `TENSORLANE_EXPECT_CUDA=1` on a GPU machine to require the real run).
#[cfg(feature = "cuda")]
#[test]
fn cuda_executor_runs_or_reports_no_driver() {
    use tensorlane_offload::exec::cuda::CudaBackend;
    let expect = std::env::var("TENSORLANE_EXPECT_CUDA").as_deref() == Ok("1");
    match CudaBackend::new() {
        Err(e) => {
            assert!(!expect, "TENSORLANE_EXPECT_CUDA=1 but: {e}");
            assert!(
                matches!(e, Error::NoDevice(_) | Error::Device(_) | Error::Panicked(_)),
                "{e:?}"
            );
            assert!(e.to_string().contains("CUDA"), "{e}");
        }
        Ok(mut b) => {
            // Every streaming policy matches the resident reference bit for bit, with freed
            // slots poisoned; the executor moves exactly the plan's bytes.
            let opts = ExecOptions {
                forwards: 2,
                poison: true,
                copies_first: true,
            };
            for p in policies().into_iter().filter(|p| *p != Policy::AllResident) {
                let (m, plan) = tiny_streaming_plan(p);
                let rep = execute(&plan, &m, &mut b, opts).unwrap();
                let reference = m.reference();
                assert!(rep.outputs.iter().all(|o| bit_equal(o, &reference)), "{}", p.name());
                assert!(rep.h2d_bytes.iter().all(|&x| x == plan.streamed_bytes()));
            }
            // Without the SlotFree waits copies overwrite live slots: the output must change.
            let (m, mut plan) = tiny_streaming_plan(Policy::FullOffload);
            let events = plan.events.clone();
            for s in &mut plan.streams {
                s.program.retain(
                    |i| !matches!(i, Instr::Wait { event, .. } if matches!(events[*event as usize], EventKind::SlotFree(_))),
                );
            }
            let reference = m.reference();
            let r = execute(&plan, &m, &mut b, opts);
            assert!(
                r.map(|r| r.outputs.iter().any(|o| !bit_equal(o, &reference)))
                    .unwrap_or(true)
            );
        }
    }
}
