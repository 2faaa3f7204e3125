//! The wgpu executor on lavapipe (or any adapter): the tiny model's output equals the
//! all-resident reference bit for bit under a budget that forces streaming, for the scheduler's
//! plan and every baseline plan. Without an adapter: skipped with a message, or a failure when
//! `CI=true`.
#![cfg(feature = "wgpu")]

use tensorlane_offload::exec::wgpu::WgpuBackend;
use tensorlane_offload::exec::{ExecModel, ExecOptions, bit_equal, execute};
use tensorlane_offload::plan::{EventKind, Instr, StreamKind};
use tensorlane_offload::{DeviceProfile, Policy, check, compile_policy};

fn backend() -> Option<WgpuBackend> {
    match WgpuBackend::new() {
        Ok(b) => Some(b),
        Err(e) => {
            assert!(
                std::env::var("CI").as_deref() != Ok("true"),
                "CI=true but no wgpu adapter: {e}"
            );
            eprintln!("skip: no wgpu adapter: {e}");
            None
        }
    }
}

#[test]
fn every_policy_matches_the_resident_reference_on_the_gpu() {
    let Some(mut b) = backend() else { return };
    let m = ExecModel::tiny(11).unwrap();
    let reference = m.reference();
    let w = m.dense_bytes();
    let profile = DeviceProfile::h100();
    let opts = ExecOptions {
        forwards: 2,
        poison: true,
        copies_first: true,
    };
    let mut ran = 0;
    for (budget, policies) in [
        (
            14_000_000u64,
            &[Policy::SyncJit, Policy::FullOffload, Policy::FlexGen][..],
        ),
        (
            26_000_000,
            &[Policy::Scheduler, Policy::SyncJit, Policy::FullOffload, Policy::FlexGen][..],
        ),
        (40_000_000, &[Policy::AllResident][..]),
    ] {
        for &p in policies {
            let plan = compile_policy(&m.workload, &profile, budget, p).unwrap_or_else(|e| panic!("{}: {e}", p.name()));
            assert!(check(&plan).is_empty());
            if p != Policy::AllResident {
                assert!(
                    plan.streamed_bytes() > 0 && budget < w,
                    "{} at {budget}: must stream",
                    p.name()
                );
            }
            let rep = execute(&plan, &m, &mut b, opts).unwrap_or_else(|e| panic!("{} at {budget}: {e}", p.name()));
            for (f, out) in rep.outputs.iter().enumerate() {
                assert!(
                    bit_equal(out, &reference),
                    "{} at {budget}: forward {f} differs",
                    p.name()
                );
            }
            assert_eq!(rep.h2d_bytes[1], plan.streamed_bytes());
            eprintln!(
                "{} {:>13} budget {budget:>9}: streamed/fwd {:>9} B in {:>3} copies, forward {:.1} ms: exact",
                rep.backend,
                p.name(),
                rep.h2d_bytes[1],
                rep.copies[1],
                rep.steady_forward_s() * 1e3
            );
            ran += 1;
        }
    }
    assert_eq!(ran, 8);
}

#[test]
fn a_shifted_slot_changes_the_gpu_output() {
    let Some(mut b) = backend() else { return };
    let m = ExecModel::tiny(5).unwrap();
    let mut plan = compile_policy(&m.workload, &DeviceProfile::h100(), 14_000_000, Policy::FullOffload).unwrap();
    let n = plan.chunks.len();
    plan.chunks[n - 1].dev_offset = plan.chunks[n - 2].dev_offset;
    let reference = m.reference();
    let r = execute(&plan, &m, &mut b, ExecOptions::default());
    assert!(
        r.map(|r| r.outputs.iter().any(|o| !bit_equal(o, &reference)))
            .unwrap_or(true)
    );
}

#[test]
fn removing_slot_free_waits_changes_the_gpu_output() {
    // With freed slots poisoned on the GPU too, copies that overwrite live slots (no SlotFree
    // waits) must show in the output, as on the CPU executor.
    let Some(mut b) = backend() else { return };
    let m = ExecModel::tiny(3).unwrap();
    let mut plan = compile_policy(&m.workload, &DeviceProfile::h100(), 14_000_000, Policy::FullOffload).unwrap();
    assert!(plan.streamed_bytes() > 0);
    let reference = m.reference();
    let opts = ExecOptions {
        forwards: 2,
        poison: true,
        copies_first: true,
    };
    let intact = execute(&plan, &m, &mut b, opts).unwrap();
    assert!(intact.outputs.iter().all(|o| bit_equal(o, &reference)));
    // Full offload splits no weight: every weight is read in place, scratch stays a few bytes.
    assert!(b.scratch_bytes() <= 64, "scratch {} bytes", b.scratch_bytes());
    let h2d = plan.streams.iter().position(|s| s.kind == StreamKind::H2d).unwrap();
    let events = plan.events.clone();
    plan.streams[h2d].program.retain(
        |i| !matches!(i, Instr::Wait { event, .. } if matches!(events[*event as usize], EventKind::SlotFree(_))),
    );
    let r = execute(&plan, &m, &mut b, opts);
    assert!(
        r.map(|r| r.outputs.iter().any(|o| !bit_equal(o, &reference)))
            .unwrap_or(true)
    );
}
