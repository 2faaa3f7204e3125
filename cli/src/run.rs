//! `tensorlane run`: text generation from a GGUF checkpoint, a `.zt` converted from one, or a
//! Hugging Face one (safetensors with `config.json` and `tokenizer.json` beside it), local or by
//! URL ([`tensorlane_llm`]).
//!
//! ```text
//! tensorlane run MODEL [--prompt TEXT | --tokens IDS] [--chat [--system TEXT]] [--max-new-tokens N]
//!                [--temperature T] [--top-k K] [--top-p P] [--seed S] [--context N] [--threads N]
//!                [--device cpu|wgpu] [--budget SIZE] [--policy P] [--json]
//! ```
//!
//! `--chat` renders the conversation with the model's own chat template
//! ([`tensorlane_llm::chat::Chat`]): one turn with `--prompt`, else a turn per line of standard
//! input, the KV cache kept between turns ([`Session::generate_continued`]); `--json` then prints
//! one object per turn.
//!
//! A progress bar while the resident weights load (models of 64 MiB and more, on a terminal);
//! tokens are printed to stdout as they are generated, then a summary to stderr: prefill and
//! decode tokens/s and, under a budget, the bytes streamed per token, the achieved copy rate
//! against the link's measured one, the floor of a decode step and T/floor, and the plan's
//! simulated step on a PCIe-4 GPU. Under a budget on the CPU the streamed bytes are read from the
//! model file ahead of use (the disk tier, `O_DIRECT` where the file system allows): a `disk:`
//! line gives the bytes read per token, the disk's measured read rate, the floor (bytes / rate)
//! and T/floor (`stats.disk` in `--json`). `--json` prints one object instead:
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
use tensorlane_llm::chat::Chat;
use tensorlane_llm::grammar::{Constraint, Grammars};
use tensorlane_llm::{CacheType, Device, Error as LlmError, Options, Policy, Sampling, Session};

use crate::error::CliError;
use crate::output::human_bytes;

/// `tensorlane run` arguments.
#[derive(Args, Debug)]
pub struct RunArgs {
    /// The model (llama, mistral, qwen2, qwen3, phi3, gemma2, gemma3, qwen3moe, olmoe or mixtral architecture), a path or a URL (s3://, gs://, az://,
    /// http(s)://): a GGUF file with its embedded vocabulary, a .zt converted from one, or a
    /// .safetensors file (single, or a sharded set's index) or .zt with config.json and
    /// tokenizer.json beside it.
    model: PathBuf,
    /// The prompt text (tokenized with the model's vocabulary; BOS added when it says so). With
    /// --chat: the user's message of a single turn.
    #[arg(long, conflicts_with = "tokens")]
    prompt: Option<String>,
    /// Chat with the model through its own chat template (the GGUF's tokenizer.chat_template or
    /// tokenizer_config.json beside the file): with --prompt, one turn; without it, turns are
    /// read from standard input a line each (a `> ` prompt on a terminal; an empty line or
    /// end of input ends the chat, `/reset` forgets the conversation), the KV cache kept
    /// between turns so each one evaluates only its new messages. Special tokens are
    /// recognised only where the template writes them, never in what you type.
    #[arg(long, conflicts_with = "tokens")]
    chat: bool,
    /// With --chat: the system message that opens the conversation.
    #[arg(long, requires = "chat")]
    system: Option<String>,
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
    /// How the KV cache stores keys and values: `f16` (the default on the cpu, as llama.cpp's:
    /// half the memory of f32), `q8_0` (cpu: 8-bit blocks, about half of f16 again) or `f32`
    /// (exact; the only one of the wgpu and cuda devices so far).
    #[arg(long, value_parser = ["f32", "f16", "q8_0"])]
    cache_type: Option<String>,
    /// The offload policy under --budget: the scheduler, or a baseline (all-resident, sync-jit,
    /// full-offload, flexgen-like); the tokens are the same, the split and the speed differ.
    #[arg(long, default_value = "scheduler", requires = "budget",
          value_parser = ["scheduler", "all-resident", "sync-jit", "full-offload", "flexgen-like"])]
    policy: String,
    /// Print one JSON object (prompt tokens, generated tokens, text, stats) instead of the text.
    #[arg(long)]
    json: bool,
    /// Write what each forward pass did as a Chrome/Perfetto trace to FILE (CPU device): one
    /// track each for forward passes, layers, products' compute, copies in, waits for the disk
    /// tier and its reads; `offload sim --trace` writes the predicted schedule in the same
    /// format. Open it in https://ui.perfetto.dev or chrome://tracing.
    #[arg(long, value_name = "FILE")]
    trace: Option<PathBuf>,
    /// Constrain the output to JSON valid under the JSON Schema in FILE (llguidance: each token
    /// is picked among those that keep the text a prefix of a valid value; the output ends when
    /// the value is complete). With --chat, every reply.
    #[arg(long, value_name = "FILE", conflicts_with = "grammar")]
    json_schema: Option<PathBuf>,
    /// Constrain the output to the language of the Lark grammar in FILE (llguidance's dialect:
    /// `start: ...`; `%json {...}` embeds a JSON schema).
    #[arg(long, value_name = "FILE")]
    grammar: Option<PathBuf>,
}

/// What --json-schema or --grammar asked for, ready to make a constraint per reply.
struct Grammar {
    grammars: Grammars,
    source: GrammarSource,
}

enum GrammarSource {
    Schema(serde_json::Value),
    Lark(String),
}

impl Grammar {
    /// The grammar of `args`, or `None` when it asks for none.
    fn of(args: &RunArgs, session: &Session<'_>) -> Result<Option<Grammar>, CliError> {
        let read = |flag: &str, p: &PathBuf| {
            std::fs::read_to_string(p).map_err(|e| CliError::Usage(format!("{flag} {}: {e}", p.display())))
        };
        let source = match (&args.json_schema, &args.grammar) {
            (Some(p), _) => {
                let text = read("--json-schema", p)?;
                GrammarSource::Schema(serde_json::from_str(&text).map_err(|e| {
                    CliError::Usage(format!("--json-schema {}: not JSON ({e})", p.display()))
                })?)
            }
            (None, Some(p)) => GrammarSource::Lark(read("--grammar", p)?),
            (None, None) => return Ok(None),
        };
        let grammars = Grammars::new(session.tokenizer()).map_err(llm_error)?;
        let g = Grammar { grammars, source };
        g.constraint()?; // a grammar that does not compile is refused before any work
        Ok(Some(g))
    }

    /// A fresh constraint (one per reply).
    fn constraint(&self) -> Result<Constraint, CliError> {
        match &self.source {
            GrammarSource::Schema(s) => self
                .grammars
                .json_schema(s)
                .map_err(|e| CliError::Usage(format!("--json-schema: {e}"))),
            GrammarSource::Lark(l) => self.grammars.lark(l).map_err(|e| CliError::Usage(format!("--grammar: {e}"))),
        }
    }
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
            cache_type: args.cache_type.as_deref().and_then(CacheType::from_name),
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
    let sampling = Sampling {
        temperature: args.temperature,
        top_k: args.top_k,
        top_p: args.top_p,
        seed: args.seed,
        ..Sampling::default()
    };
    let grammar = Grammar::of(args, &session)?;
    let grammar = grammar.as_ref();
    let mut chat = None;
    if args.chat {
        let mut c = Chat::for_model(&model).map_err(|e| CliError::Usage(format!("--chat: {e}")))?;
        if let Some(system) = &args.system {
            c.push("system", system, session.tokenizer());
        }
        if args.prompt.is_none() {
            return converse(args, &mut session, c, &sampling, grammar);
        }
        chat = Some(c);
    }
    let prompt = match (&args.prompt, &args.tokens, &mut chat) {
        (Some(text), None, Some(c)) => {
            c.push("user", text, session.tokenizer());
            c.prompt(session.tokenizer()).map_err(llm_error)?
        }
        (_, Some(ids), _) => parse_ids(ids)?,
        (Some(text), None, None) => session.tokenizer().encode(text, true),
        (None, None, _) => return Err(CliError::Usage("give --prompt TEXT, --tokens IDS or --chat".into())),
    };
    if prompt.is_empty() {
        return Err(CliError::Usage("the prompt has no tokens".into()));
    }

    if args.trace.is_some() {
        session.start_trace().map_err(|e| CliError::Usage(format!("--trace: {e}")))?;
    }
    let mut out = std::io::stdout().lock();
    let (tokens, bytes) = stream(&mut session, &prompt, &sampling, grammar, args.max_new_tokens, false, !args.json, &mut out)?;
    if let Some(path) = &args.trace {
        let spans = session.take_trace();
        let process = format!("{} on {} (measured)", args.model.display(), args.device);
        let trace = tensorlane_offload::chrome_trace(&process, &tensorlane_llm::TRACE_TRACKS, &spans);
        std::fs::write(path, serde_json::to_vec(&trace).map_err(|e| CliError::Usage(e.to_string()))?)
            .map_err(|e| CliError::Usage(format!("--trace: cannot write {}: {e}", path.display())))?;
        if !args.json {
            eprintln!("trace: {} spans in {}", spans.len(), path.display());
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
                "disk": (stats.disk_gbps > 0.0).then(|| json!({
                    "bytes_per_token": stats.streamed_bytes,
                    "read_gbps": stats.disk_gbps,
                    "direct": stats.disk_direct,
                    "ring_bytes": stats.ring_bytes,
                    "wait_s": stats.decode_copy.as_secs_f64(),
                    "floor_s": stats.disk_floor_s(),
                    "t_over_floor": stats.t_over_disk_floor(),
                })),
                "threads": stats.threads,
                "device": args.device,
            },
        });
        let _ = writeln!(out, "{v}");
    } else {
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
        if stats.disk_gbps > 0.0 {
            eprintln!(
                "disk: {} read per token ({}, ring {}), disk reads {:.2} GB/s measured; floor {:.2} ms a token \
                 (bytes / rate), decode step {:.2} ms ({:.2} ms of it waiting for reads), T/floor {:.2}",
                human_bytes(stats.streamed_bytes),
                if stats.disk_direct { "O_DIRECT" } else { "buffered pread" },
                human_bytes(stats.ring_bytes),
                stats.disk_gbps,
                1e3 * stats.disk_floor_s(),
                1e3 * stats.decode.as_secs_f64() / stats.decode_tokens.max(1) as f64,
                1e3 * stats.decode_copy.as_secs_f64() / stats.decode_tokens.max(1) as f64,
                stats.t_over_disk_floor(),
            );
        }
    }
    Ok(())
}

/// Generates up to `max` tokens after `prompt` ([`Session::generate_continued`] when
/// `continued`: the KV cache's prefix of `prompt` is kept), writing each complete character to
/// `out` as it comes when `print` (a character split over tokens waits for its last byte; what
/// is left at the end is written then), within `grammar`. Returns the tokens and the bytes they
/// stand for.
#[allow(clippy::too_many_arguments)]
fn stream(
    session: &mut Session<'_>,
    prompt: &[u32],
    sampling: &Sampling,
    grammar: Option<&Grammar>,
    max: usize,
    continued: bool,
    print: bool,
    out: &mut impl std::io::Write,
) -> Result<(Vec<u32>, Vec<u8>), CliError> {
    let mut tokens = Vec::new();
    let mut pending: Vec<u8> = Vec::new();
    let mut bytes = Vec::new();
    let mut generate = if continued {
        session.generate_continued(prompt, sampling)
    } else {
        session.generate(prompt, sampling)
    };
    if let Some(g) = grammar {
        generate = generate.with_sampler(sampling.sampler().constrained(g.constraint()?));
    }
    for t in generate.take(max) {
        let t = t.map_err(llm_error)?;
        tokens.push(t.id);
        bytes.extend_from_slice(&t.piece);
        if print {
            pending.extend_from_slice(&t.piece);
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
    let _ = out.write_all(&pending);
    Ok((tokens, bytes))
}

/// `run --chat` without --prompt: a conversation, a user turn per line of standard input, each
/// reply streamed to stdout; the KV cache keeps the conversation, so a turn evaluates only its
/// new messages (the figures after each reply say how many). On a terminal a `> ` prompt is shown
/// (on stderr); an empty line or the end of input ends it; `/reset` starts a new conversation.
fn converse(
    args: &RunArgs,
    session: &mut Session<'_>,
    mut chat: Chat,
    sampling: &Sampling,
    grammar: Option<&Grammar>,
) -> Result<(), CliError> {
    use std::io::{BufRead as _, IsTerminal as _};
    let stdin = std::io::stdin();
    let terminal = stdin.is_terminal();
    let opening = chat.clone_messages();
    if terminal {
        eprintln!(
            "chatting with {} (an empty line or Ctrl-D ends it; /reset starts over)",
            args.model.display()
        );
    }
    let mut out = std::io::stdout().lock();
    let mut turns = 0usize;
    let mut lines = stdin.lock().lines();
    loop {
        if terminal {
            eprint!("> ");
        }
        let Some(line) = lines.next() else { break };
        let line = line.map_err(|e| CliError::Usage(format!("standard input: {e}")))?;
        let line = line.trim_end_matches('\r');
        if line.trim().is_empty() {
            break;
        }
        if line.trim() == "/reset" {
            chat.set_messages(opening.clone());
            continue;
        }
        chat.push("user", line, session.tokenizer());
        let prompt = chat.prompt(session.tokenizer()).map_err(llm_error)?;
        let (tokens, bytes) = stream(session, &prompt, sampling, grammar, args.max_new_tokens, true, !args.json, &mut out)?;
        let reply = String::from_utf8_lossy(&bytes).into_owned();
        chat.push("assistant", reply.trim(), session.tokenizer());
        let stats = session.stats();
        if args.json {
            let v = json!({
                "user": line, "prompt_tokens": prompt.len(), "evaluated_prompt_tokens": stats.prefill_tokens,
                "tokens": tokens, "text": reply, "decode_tokens_per_s": stats.decode_tokens_per_s(),
            });
            let _ = writeln!(out, "{v}");
        } else {
            let _ = writeln!(out);
            let _ = out.flush();
            eprintln!(
                "[{} prompt tokens, {} evaluated ({} kept from the last turn); {} tokens at {:.1} tokens/s]",
                prompt.len(),
                stats.prefill_tokens,
                prompt.len() - stats.prefill_tokens,
                stats.decode_tokens + 1,
                stats.decode_tokens_per_s(),
            );
        }
        turns += 1;
    }
    if terminal {
        eprintln!();
    }
    if turns == 0 && !terminal {
        return Err(CliError::Usage(
            "--chat read no message from standard input (give --prompt TEXT for one turn)".into(),
        ));
    }
    Ok(())
}
