//! `tensorlane run`: text generation from a GGUF checkpoint, a `.zt` converted from one, or a
//! Hugging Face one (safetensors with `config.json` and `tokenizer.json` beside it), local or by
//! URL ([`tensorlane_llm`]).
//!
//! ```text
//! tensorlane run MODEL [--prompt TEXT | --tokens IDS] [--max-new-tokens N] [--temperature T]
//!                [--top-k K] [--top-p P] [--seed S] [--context N] [--threads N]
//!                [--device cpu|wgpu] [--budget SIZE] [--policy P] [--json]
//! ```
//!
//! A progress bar while the resident weights load (models of 64 MiB and more, on a terminal);
//! tokens are printed to stdout as they are generated, then a summary to stderr: prefill and
//! decode tokens/s and, under a budget, the bytes streamed per token, the achieved copy rate
//! against the link's measured one, the floor of a decode step and T/floor, and the plan's
//! simulated step on a PCIe-4 GPU. `--json` prints one object instead:
//! `{"prompt_tokens": [...], "tokens": [...], "text": "...", "stats": {...}}`.
//!
//! Exit codes follow the tool's rule ([`crate::error::EXIT_CODES`]): 1 for bad usage (a prompt
//! longer than the context, an unknown token id, a device not implemented yet, a budget below
//! the plan's minimum), a model
//! this tool cannot run (an unsupported architecture or element type); 2 for an invalid model
//! (a missing or misshapen tensor, unusable metadata or vocabulary).

use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use serde_json::json;
use tensorlane::model::Model;
use tensorlane_llm::{Device, Error as LlmError, Options, Policy, Sampling, Session};

use crate::error::CliError;
use crate::output::human_bytes;

/// `tensorlane run` arguments.
#[derive(Args, Debug)]
pub struct RunArgs {
    /// The model (llama, mistral or qwen2 architecture), a path or a URL (s3://, gs://, az://,
    /// http(s)://): a GGUF file with its embedded vocabulary, a .zt converted from one, or a
    /// .safetensors file (single, or a sharded set's index) or .zt with config.json and
    /// tokenizer.json beside it.
    model: PathBuf,
    /// The prompt text (tokenized with the model's vocabulary; BOS added when it says so).
    #[arg(long, conflicts_with = "tokens")]
    prompt: Option<String>,
    /// The prompt as token ids, comma- or space-separated (nothing is added).
    #[arg(long, value_name = "IDS")]
    tokens: Option<String>,
    /// Tokens to generate (fewer if the model ends the text).
    #[arg(long, default_value_t = 64)]
    max_new_tokens: usize,
    /// Sampling temperature; 0 is greedy.
    #[arg(long, default_value_t = 0.0)]
    temperature: f32,
    /// Sample from the K most likely tokens only (0: all).
    #[arg(long, default_value_t = 0)]
    top_k: usize,
    /// Sample from the most likely tokens whose probabilities add up to P.
    #[arg(long, default_value_t = 1.0)]
    top_p: f32,
    /// The sampler's random seed.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Positions the KV cache holds (prompt and generated tokens); default: the model's training
    /// context, at most 4096.
    #[arg(long)]
    context: Option<usize>,
    /// Worker threads (default: every core).
    #[arg(long)]
    threads: Option<usize>,
    /// Where to run: `cpu`, `wgpu` (a build with the `wgpu` feature) or `cuda` (a build with the
    /// `cuda` feature, on a machine with an NVIDIA driver).
    #[arg(long, default_value = "cpu", value_parser = ["cpu", "wgpu", "cuda"])]
    device: String,
    /// Device memory for the weights, the KV cache, the norms and the activations, e.g. 4GiB:
    /// the offload plan keeps whole rows of each weight resident as far as they fit and streams
    /// the rest into place, in stored form, before each use, every token (default: everything
    /// resident). Below the policy's minimum: an error naming it.
    #[arg(long, value_name = "SIZE", value_parser = crate::limits::parse_size)]
    budget: Option<u64>,
    /// The offload policy under --budget: the scheduler, or a baseline (all-resident, sync-jit,
    /// full-offload, flexgen-like); the tokens are the same, the split and the speed differ.
    #[arg(long, default_value = "scheduler", requires = "budget",
          value_parser = ["scheduler", "all-resident", "sync-jit", "full-offload", "flexgen-like"])]
    policy: String,
    /// Print one JSON object (prompt tokens, generated tokens, text, stats) instead of the text.
    #[arg(long)]
    json: bool,
}

fn llm_error(e: LlmError) -> CliError {
    match e {
        LlmError::Model(e) => e.into(),
        e @ (LlmError::UnsupportedArchitecture { .. }
        | LlmError::UnsupportedFormat(_)
        | LlmError::TensorType { .. }) => CliError::Refused(e.to_string()),
        e @ (LlmError::Context { .. } | LlmError::UnknownToken { .. } | LlmError::Options(_) | LlmError::Budget(_)) => {
            CliError::Usage(e.to_string())
        }
        e => CliError::Invalid(e.to_string()),
    }
}

fn parse_ids(s: &str) -> Result<Vec<u32>, CliError> {
    s.split(|c: char| c == ',' || c.is_whitespace())
        .filter(|t| !t.is_empty())
        .map(|t| {
            t.parse::<u32>()
                .map_err(|_| CliError::Usage(format!("--tokens: '{t}' is not a token id (a number 0..2^32)")))
        })
        .collect()
}

/// Runs `tensorlane run`.
pub fn run(args: RunArgs) -> ExitCode {
    let name = args.model.display().to_string();
    match generate(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {name}: {e}");
            ExitCode::from(e.exit_code())
        }
    }
}

fn generate(args: &RunArgs) -> Result<(), CliError> {
    let device = match args.device.as_str() {
        "cpu" => Device::Cpu,
        "wgpu" if cfg!(feature = "wgpu") => Device::Wgpu,
        "cuda" if cfg!(feature = "cuda") => Device::Cuda,
        other => {
            return Err(CliError::Usage(format!(
                "--device {other}: this tensorlane was built without the `{other}` feature \
                 (cargo build -p tensorlane-cli --features {other}); use --device cpu"
            )));
        }
    };
    let model = Model::open(&args.model)?;
    let mut bar: Option<indicatif::ProgressBar> = None;
    let opened = Session::open_with_progress(
        &model,
        Options {
            context: args.context,
            threads: args.threads,
            budget: args.budget,
            device,
            policy: Policy::from_name(&args.policy),
        },
        &mut |load| match &bar {
            Some(b) => b.set_position(load.loaded),
            None => bar = crate::output::progress(load.total, "loading weights"),
        },
    );
    crate::output::finish(bar);
    let mut session = opened.map_err(|e| match (e, args.budget) {
        (e @ LlmError::Budget(_), Some(b)) => CliError::Usage(format!("--budget {}: {e}", human_bytes(b))),
        (e @ LlmError::Device(_), _) => CliError::Usage(format!("--device {}: {e}", args.device)),
        (e, _) => llm_error(e),
    })?;
    let prompt = match (&args.prompt, &args.tokens) {
        (_, Some(ids)) => parse_ids(ids)?,
        (Some(text), None) => session.tokenizer().encode(text, true),
        (None, None) => return Err(CliError::Usage("give --prompt TEXT or --tokens IDS".into())),
    };
    if prompt.is_empty() {
        return Err(CliError::Usage("the prompt has no tokens".into()));
    }
    let sampling = Sampling {
        temperature: args.temperature,
        top_k: args.top_k,
        top_p: args.top_p,
        seed: args.seed,
        ..Sampling::default()
    };

    let mut out = std::io::stdout().lock();
    let mut tokens = Vec::new();
    let mut pending: Vec<u8> = Vec::new();
    let mut bytes = Vec::new();
    for t in session.generate(&prompt, &sampling).take(args.max_new_tokens) {
        let t = t.map_err(llm_error)?;
        tokens.push(t.id);
        let piece = t.piece;
        bytes.extend_from_slice(&piece);
        if !args.json {
            pending.extend_from_slice(&piece);
            // print every complete character; keep a split one for the next token
            let valid = match std::str::from_utf8(&pending) {
                Ok(s) => s.len(),
                Err(e) if e.error_len().is_none() => e.valid_up_to(),
                Err(_) => pending.len(),
            };
            let _ = out.write_all(&pending[..valid]);
            let _ = out.flush();
            pending.drain(..valid);
        }
    }
    let stats = session.stats();
    let text = String::from_utf8_lossy(&bytes).into_owned();
    if args.json {
        let v = json!({
            "prompt_tokens": prompt,
            "tokens": tokens,
            "text": text,
            "stats": {
                "prefill_tokens": stats.prefill_tokens,
                "prefill_s": stats.prefill.as_secs_f64(),
                "prefill_tokens_per_s": stats.prefill_tokens_per_s(),
                "decode_tokens": stats.decode_tokens,
                "decode_s": stats.decode.as_secs_f64(),
                "decode_tokens_per_s": stats.decode_tokens_per_s(),
                "weight_bytes": stats.weight_bytes,
                "resident_bytes": stats.resident_bytes,
                "plan_streamed_bytes_per_token": stats.plan_streamed_bytes,
                "streamed_bytes_per_token": stats.streamed_bytes,
                "streamed_bytes_total": stats.streamed_total,
                "copy_s": stats.copy.as_secs_f64(),
                "h2d_gbps": stats.h2d_gbps(),
                "link_gbps": stats.link_gbps,
                "floor_s": stats.floor_s(),
                "t_over_floor": stats.t_over_floor(),
                "working_set_bytes": stats.working_set_bytes,
                "policy": stats.policy.map(|p| p.name()),
                "sim_pcie4_forward_s": stats.sim_forward_s,
                "sim_pcie4_floor_s": stats.sim_floor_s,
                "threads": stats.threads,
                "device": args.device,
            },
        });
        let _ = writeln!(out, "{v}");
    } else {
        let _ = out.write_all(&pending);
        let _ = writeln!(out);
        let _ = out.flush();
        let streaming = if stats.plan_streamed_bytes > 0 {
            format!(
                " ({} resident, {} streamed per token)",
                human_bytes(stats.resident_bytes),
                human_bytes(stats.streamed_bytes)
            )
        } else {
            String::new()
        };
        let on = match device {
            Device::Cpu => format!("the cpu, {} threads", stats.threads),
            Device::Wgpu => "wgpu".to_string(),
            Device::Cuda => "cuda".to_string(),
        };
        eprintln!(
            "prefill: {} tokens in {:.3} s ({:.1} tokens/s); decode: {} tokens in {:.3} s ({:.1} tokens/s); \
             weights {}{streaming} on {on}",
            stats.prefill_tokens,
            stats.prefill.as_secs_f64(),
            stats.prefill_tokens_per_s(),
            stats.decode_tokens,
            stats.decode.as_secs_f64(),
            stats.decode_tokens_per_s(),
            human_bytes(stats.weight_bytes),
        );
        if let Some(policy) = stats.policy {
            eprintln!(
                "offload ({}, budget {}): copies {:.2} GB/s achieved, link {:.2} GB/s measured; decode step {:.2} ms, \
                 floor {:.2} ms, T/floor {:.2}; on a PCIe-4 GPU the plan simulates {:.2} ms a step (floor {:.2} ms)",
                policy.name(),
                human_bytes(args.budget.unwrap_or(0)),
                stats.h2d_gbps(),
                stats.link_gbps,
                1e3 * stats.decode.as_secs_f64() / stats.decode_tokens.max(1) as f64,
                1e3 * stats.floor_s(),
                stats.t_over_floor(),
                1e3 * stats.sim_forward_s,
                1e3 * stats.sim_floor_s,
            );
        }
    }
    Ok(())
}
