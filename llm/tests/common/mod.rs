//! The budget sweep both executors' tests run: every offload policy at every budget from its
//! minimum to all-resident gives the all-resident tokens and logits, and the bytes the executor
//! counts as it copies them in equal the plan's streamed bytes every forward pass.

// Each test binary uses its own part of this module.
#![allow(dead_code)]

use tensorlane::model::Model;
use tensorlane_llm::{Device, Error, Options, Policy, Sampling, Session};

/// Runs the sweep on `device` over the model at `path` for `policies`, at `budgets` budgets
/// each (evenly spaced from the policy's minimum to all-resident, both ends included when
/// `budgets >= 2`); returns the budgets checked.
pub fn sweep(name: &str, path: &str, device: Device, policies: &[Policy], budgets: u64) -> usize {
    let model = Model::open(path).unwrap();
    let opts = |budget, policy| Options {
        device,
        threads: Some(2),
        context: Some(64),
        budget,
        policy,
        cache_type: None,
    };
    let mut all = Session::open(&model, opts(None, None)).unwrap();
    let prompt = all.tokenizer().encode("Hello world, the tensor data model", true);
    let sampling = Sampling {
        stop_at_eog: false,
        ..Sampling::default()
    };
    let want: Vec<u32> = all
        .generate(&prompt, &sampling)
        .take(12)
        .map(|t| t.unwrap().id)
        .collect();
    let want_logits = all.logits(&prompt).unwrap();
    let weights = all.stats().weight_bytes;
    assert_eq!(all.stats().streamed_bytes, 0);
    drop(all);

    let full = Session::minimum_budget(&model, &opts(None, Some(Policy::AllResident)))
        .unwrap()
        .expect("all-resident fits some budget");
    let mut checked = 0;
    for &policy in policies {
        let p = policy.name();
        let min = Session::minimum_budget(&model, &opts(None, Some(policy)))
            .unwrap()
            .unwrap_or_else(|| panic!("{name} {p}: no budget fits"));
        // Below the minimum: an error naming it.
        match Session::open(&model, opts(Some(min - 512), Some(policy))) {
            Err(e @ Error::Budget(_)) => {
                let msg = e.to_string();
                assert!(msg.contains(&format!("accepts is {min} bytes")), "{name} {p}: {msg}");
            }
            Err(e) => panic!("{name} {p}: {e}"),
            Ok(_) => panic!("{name} {p}: {} bytes, under the minimum {min}, was accepted", min - 512),
        }
        let top = full.max(min);
        let steps = budgets.saturating_sub(1).max(1);
        let mut last = None;
        for budget in (0..budgets).map(|i| min + (top - min) * i / steps) {
            if last == Some(budget) {
                continue;
            }
            last = Some(budget);
            let mut s = Session::open(&model, opts(Some(budget), Some(policy)))
                .unwrap_or_else(|e| panic!("{name} {p} {budget}: {e}"));
            let st = s.stats();
            assert_eq!(
                st.resident_bytes + st.plan_streamed_bytes,
                weights,
                "{name} {p} {budget}"
            );
            let mut got = Vec::new();
            let mut it = s.generate(&prompt, &sampling);
            for t in it.by_ref().take(12) {
                got.push(t.unwrap().id);
            }
            let after = it.stats();
            drop(it);
            assert_eq!(
                after.streamed_bytes, st.plan_streamed_bytes,
                "{name} {p} {budget}: bytes copied in by a forward pass vs the plan's streamed bytes"
            );
            assert_eq!(
                after.streamed_total,
                st.plan_streamed_bytes * 12,
                "{name} {p} {budget}: bytes over the prompt and 11 decode steps"
            );
            assert_eq!(got, want, "{name} {p} {budget}: tokens differ from all-resident");
            assert_eq!(s.logits(&prompt).unwrap(), want_logits, "{name} {p} {budget}: logits");
            eprintln!(
                "{name} {device:?} {p:<12} budget {budget:>9}: resident {:>8}, streamed {:>8} per forward",
                st.resident_bytes, st.plan_streamed_bytes
            );
            checked += 1;
        }
    }
    checked
}

/// The index of the largest logit.
pub fn argmax(v: &[f32]) -> usize {
    (0..v.len()).fold(0, |b, i| if v[i] > v[b] { i } else { b })
}

/// How far the largest logit is above the second.
pub fn margin(v: &[f32]) -> f32 {
    let top = argmax(v);
    let second = (0..v.len())
        .filter(|&i| i != top)
        .map(|i| v[i])
        .fold(f32::NEG_INFINITY, f32::max);
    v[top] - second
}
