//! Times prefill and decode of a model (scripts/bench_llm.sh runs it beside llama.cpp):
//!
//! ```text
//! cargo run --example bench -p tensorlane-llm -- MODEL THREADS PROMPT_TOKENS DECODE_TOKENS [cpu|wgpu|cuda]
//! ```
//!
//! The device defaults to the CPU; `wgpu` and `cuda` need the crate's feature of that name
//! (`--features wgpu`). `CACHE_TYPE=f32|f16|q8_0` in the environment sets the KV cache (default:
//! the device's).
//!
//! The prompt is BOS followed by ids 300, 301, ... (any ids of the vocabulary time the same);
//! prints one JSON line with prefill and decode tokens/s.
use tensorlane::model::Model;
use tensorlane_llm::{CacheType, Device, Options, Sampling, Session};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let a: Vec<String> = std::env::args().collect();
    if a.len() != 5 && a.len() != 6 {
        return Err("usage: bench MODEL THREADS PROMPT_TOKENS DECODE_TOKENS [cpu|wgpu|cuda]".into());
    }
    let device = match a.get(5).map(String::as_str) {
        None | Some("cpu") => Device::Cpu,
        Some("wgpu") => Device::Wgpu,
        Some("cuda") => Device::Cuda,
        Some(other) => return Err(format!("unknown device {other:?} (cpu, wgpu or cuda)").into()),
    };
    let cache_type = std::env::var("CACHE_TYPE").ok().map(|n| CacheType::parse(&n)).transpose()?;
    let model = Model::open(&a[1])?;
    let (threads, n_prompt, n_decode): (usize, u32, usize) = (a[2].parse()?, a[3].parse()?, a[4].parse()?);
    let mut s = Session::open(
        &model,
        Options {
            threads: Some(threads),
            device,
            context: Some(n_prompt as usize + n_decode + 1),
            cache_type,
            ..Options::default()
        },
    )?;
    let prompt: Vec<u32> = std::iter::once(1).chain(300..300 + n_prompt - 1).collect();
    let sampling = Sampling {
        stop_at_eog: false,
        ..Sampling::default()
    };
    let n = s
        .generate(&prompt, &sampling)
        .take(n_decode + 1)
        .collect::<Result<Vec<_>, _>>()?
        .len();
    let st = s.stats();
    println!(
        "{{\"model\": {:?}, \"device\": \"{device:?}\", \"threads\": {threads}, \"prefill_tokens\": {}, \"prefill_tokens_per_s\": {:.2}, \"decode_tokens\": {}, \"decode_tokens_per_s\": {:.2}, \"generated\": {n}}}",
        a[1],
        st.prefill_tokens,
        st.prefill_tokens_per_s(),
        st.decode_tokens,
        st.decode_tokens_per_s()
    );
    Ok(())
}
